"""What a target is: a runtime that can or cannot run each node of a model.

Targets are registered by plugins (``register_targets``). The core only knows this
interface; onnxruntime, the reference evaluator and ``opset:N`` are built-in plugins.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rewriter.console import die_with_parent_line
from rewriter.graph.opid import domain_label

if TYPE_CHECKING:  # onnx is imported where used: a confirming child runs without it
    from onnx import ModelProto, NodeProto, TensorProto, TypeProto

    from rewriter.graph.schemas import SchemaIndex
    from rewriter.io.model import LoadedModel

# Why a target cannot run a node. Keys are stable (JSON); values are for people.
REASONS: dict[str, str] = {
    "unknown-domain": "unknown domain",
    "domain-not-imported": "domain not in the model's opset imports",
    "no-schema": "no schema",
    "no-kernel": "no kernel for that opset version",
    "type-binding": "unsupported type binding",
    "opset-too-new": "opset beyond what the runtime supports",
    "ir-too-new": "IR version beyond what the runtime supports",
    "invalid-node": "node does not match the operator's schema",
    "input-rank": "an input's rank contradicts the operator's schema (invalid on every target)",
    "attribute-as-input": "an attribute the operator's schema takes as an input at this opset "
                          "(invalid on every target)",
    "runtime-refused": "the runtime refused the model",
    "computes-differently": "the runtime runs it, but its outputs differ from the oracle's",
    "external-shape-data": "a value shape inference reads is stored in external data",
    "declared-shape": "an intermediate value's declared shape (value_info) contradicts what "
                      "the model computes, and the runtime trusts it",
}

# What a target's verdict on a node depends on (:meth:`Target.check_op`), so that detection
# asks once per op, or once per op and type signature, instead of once per node.
RUNS = "runs"  # every node of the op runs: not asked per node
REFUSED = "refused"  # every node of the op is refused the same way: asked for the first one
BY_TYPES = "depends on types"  # the same answer for nodes of the op with the same input and
# output types (and the same inputs left empty): asked once per such signature
BY_NODE = "depends on the node"  # attributes, shapes, names...: asked for every node
OP_VERDICTS = (RUNS, REFUSED, BY_TYPES, BY_NODE)

# Models up to this many bytes (with external data) are run once on generated inputs when
# they are confirmed (``Target.confirm_by_size``); bigger ones are only loaded.
RUN_BY_DEFAULT_BELOW = 100 * 2**20
# A confirmation's cost is the session's creation, which grows with the node count, not the
# file size (issue 16: ~0.7 ms a node for onnxruntime on a loaded 2-core machine, 111 s for
# a 100k-node model); by default only models up to this many main-graph nodes are confirmed
CONFIRM_MAX_NODES = 20_000
# A run failure counts as the runtime refusing the model only when its message says the
# runtime lacks something; other run failures (an index out of range, shapes that do not
# fit) may come from the generated inputs, and the static verdict stands.
_LACKS = re.compile(r"not (yet )?(supported|implemented)|unsupported|does(n't| not) support",
                    re.IGNORECASE)


def schema_arity_problem(node: NodeProto, schema, inputs=None, outputs=None) -> str | None:
    """A required input or output left empty, or too many arguments, as a sentence."""
    inputs = node.input if inputs is None else inputs
    outputs = node.output if outputs is None else outputs
    for formals, actual, kind in ((schema.inputs, inputs, "input"),
                                  (schema.outputs, outputs, "output")):
        for i, formal in enumerate(formals):
            if formal.option == "single" and (i >= len(actual) or not actual[i]):
                return (f"required {kind} {i} ({formal.name!r}) of {node.op_type}"
                        f"({schema.since_version}) is missing")
        if formals and formals[-1].option != "variadic" and len(actual) > len(formals):
            return (f"{node.op_type}({schema.since_version}) takes at most {len(formals)} "
                    f"{kind}s, the node has {len(actual)}")
    return None


@dataclass(frozen=True, slots=True)
class Finding:
    """One node (or the model itself) a target cannot run, and why."""

    target: str
    path: str
    domain: str
    op_type: str
    version: int | None
    reason: str
    detail: str
    node_name: str = ""
    # Where the node lives, for the rewrite engine (not part of reports or equality).
    node: NodeProto | None = field(default=None, compare=False, repr=False)
    input_types: tuple[str | None, ...] = field(default=(), compare=False, repr=False)
    # (one mapping shared by the findings of a scope: copy it to change it)
    scope_opsets: Mapping[str, int] | None = field(default=None, compare=False, repr=False)
    # Constant values the node reads that the model's own constants do not hold (a body
    # node's Constant inputs, under the names they get once the body is spliced).
    known_constants: Mapping[str, TensorProto] | None = field(
        default=None, compare=False, repr=False)
    # The graph input or output a model-level finding is about (a type the target cannot
    # take or return: what ``--adapt-interface`` may rewrite), else "".
    value: str = field(default="", compare=False)

    @property
    def op_label(self) -> str:
        from rewriter.graph.opid import OpId

        return str(OpId(self.domain, self.op_type, self.version))

    def as_dict(self) -> dict:
        return {
            "target": self.target,
            "path": self.path,
            "node_name": self.node_name,
            "domain": domain_label(self.domain),
            "op_type": self.op_type,
            "version": self.version,
            "reason": self.reason,
            "reason_text": REASONS.get(self.reason, self.reason),
            "detail": self.detail,
        }


@dataclass(slots=True)
class NodeQuery:
    """What a target is asked about one node (built once per node: keep it cheap)."""

    node: NodeProto
    path: str
    domain: str  # normalized ("" for ai.onnx)
    opset: int | None  # version of the node's domain imported in its scope
    types: Mapping[str, str]  # value name -> type string, where known
    opsets: Mapping[str, int] = field(default_factory=dict)
    declared: Mapping[str, TypeProto] = field(default_factory=dict)  # stated types, with shapes
    inputs: tuple[str, ...] | None = None  # the node's input names, when already read
    outputs: tuple[str, ...] | None = None
    # values known to be constant (name -> TensorProto): a decomposition body's Constant
    # outputs, when the planner asks about a body node (the model's own: the target reads them)
    constants: Mapping[str, Any] = field(default_factory=dict)
    # a decomposition body's node: those of its inputs computed from a value the model's
    # caller feeds (a graph input, not through Shape or Size): known only when it runs
    caller_fed: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.inputs is None:
            self.inputs = tuple(self.node.input)
        if self.outputs is None:
            self.outputs = tuple(self.node.output)


@dataclass
class TargetOptions:
    """Options a target factory may use; unknown ones are ignored by targets."""

    custom_op_libraries: tuple[str, ...] = ()
    confirm: bool | None = None  # None: the target decides (e.g. only small models)
    # Python kernels (onnx.reference.op_run.OpRun subclasses) for ops the reference
    # evaluator lacks, e.g. the proprietary ops of an original model being compared
    reference_ops: tuple[type, ...] = ()
    # The run's loaded plugins (rewriter.manager.Plugins): targets that run custom kernels
    # look up the kernels a rewritten model's metadata lists in plugins.registry.
    plugins: Any = None
    # The target runs an original as the comparison's oracle (not as the runtime a user
    # loads the result with): a runtime whose numbers depend on its settings may pin them to
    # the model's definition (onnxruntime: no accuracy-level-4 fusion of DequantizeLinear ->
    # MatMul, one thread for kernels whose result depends on the thread count)
    oracle: bool = False


@dataclass
class KernelRemedy:
    """A kernel remedy the planner asks a target about: ``node`` as it would be after the
    retarget (a copy), and what it needs."""

    kind: str  # "python": a rewriter.plan.kernels.KernelUse; "native": a NativeUse
    node: NodeProto
    use: Any
    kernel: Any = None  # the resolved rewriter.plan.kernels.Kernel ("python")
    input_types: tuple[str | None, ...] = ()
    opsets: Mapping[str, int] = field(default_factory=dict)
    declared: Mapping[str, TypeProto] = field(default_factory=dict)


@dataclass(frozen=True)
class Confirmation:
    """What really loading a model in the runtime, and running it once on generated inputs
    (small models), showed."""

    refusal: str | None = None  # the runtime's words refusing the model; None: no refusal
    stage: str = ""  # where it refused: "load" (session, conversion, compilation) or "run"
    ran: bool = False  # it ran once on generated inputs without an error
    note: str = ""  # why it was not run, or why a failed run is not counted as a refusal
    inconclusive_run: bool = False  # it loaded; the run failed on generated inputs
    run_error: str = ""  # the runtime's words, where the run failed on every input set
    # what the target traced the refusal to, where it did (findings on the values or nodes
    # at fault, instead of one on the node the runtime names): e.g. onnxruntime failing on
    # intermediate shapes the model declares and the run contradicts
    findings: tuple[Finding, ...] = ()

    @classmethod
    def inconclusive(cls, error: str) -> Confirmation:
        """A run that failed in a way the inputs may explain: no refusal, said in the note."""
        return cls(note=f"the run on generated inputs failed, not counted as a refusal (the "
                        f"inputs may be the cause): {error}", inconclusive_run=True,
                   run_error=error)

    @classmethod
    def varied(cls, error: str) -> Confirmation:
        """A run that failed on one input set and ran on another: it runs."""
        return cls(ran=True, note=f"the run failed on one generated input set and ran on "
                                  f"another (the values, not the model): {error}")

    def describe(self) -> str:
        """One line for reports: how the verdict was confirmed."""
        if self.refusal is not None:
            return f"refused at {self.stage or 'load'}: {self.refusal}"
        done = "loaded and ran once on generated inputs" if self.ran else "loaded"
        return f"{done}; {self.note}" if self.note else done


class Target:
    """Base class for targets. Subclasses implement :meth:`check_node`."""

    name: str = "target"
    description: str = ""
    plugins: Any = None  # the run's loaded plugins (TargetOptions.plugins), if given
    confirm_option: bool | None = None  # TargetOptions.confirm (--confirm / --no-confirm)

    def _registry(self):
        """The registry of the run's plugins: targets that run custom kernels look up the
        kernels a model's metadata lists. A target never loads plugins itself (the caller
        does, and passes them down through :func:`resolve_targets`)."""
        if self.plugins is None:
            from rewriter.errors import RewriterError

            raise RewriterError(f"target {self.name!r} was made without the run's plugins: make "
                                "it with rewriter.detect.targets.resolve_targets(plugins, ...)")
        return self.plugins.registry
    # The float type the runtime computes float64 in, where it is narrower (OpenVINO's CPU
    # plugin computes it in float32): the comparison judges its float64 outputs at that
    # type's tolerance, and says so.
    computes_float64_as: str | None = None
    # Highest opset version of each domain the runtime implements ({"": 13} for ai.onnx up
    # to 13), when it has such a ceiling; an opset-conversion pass lowers models to it.
    max_opsets: Mapping[str, int] | None = None
    # Lowest opset version of each domain it runs models of ({"": 7} for onnxruntime); an
    # opset-conversion pass raises older models to it.
    min_opsets: Mapping[str, int] | None = None

    @property
    def schemas(self) -> SchemaIndex:
        """Schemas used to resolve versions and infer types (default: onnx's)."""
        from rewriter.graph.schemas import onnx_schemas

        return onnx_schemas()

    def check_model(self, model: ModelProto) -> list[Finding]:
        """Model-level findings (opset imports beyond the runtime, ...)."""
        return []

    def check_node(self, query: NodeQuery) -> Finding | None:
        """A finding if the target cannot run this node, else None."""
        raise NotImplementedError

    def check_done(self, model: ModelProto, findings: Sequence[Finding]) -> list[Finding]:
        """Model-level findings that depend on the walk's ``findings`` (every node asked):
        e.g. the runtime's refusal of the whole model, asked in :meth:`check_model`, that
        names no node and that no node finding explains."""
        return []

    def check_op(self, domain: str, op_type: str, opset: int | None) -> str:
        """What :meth:`check_node`'s answer for the nodes of ``domain::op_type`` (``domain``
        normalized, ``opset`` the version of that domain imported where the node lives, None
        when not imported) depends on: :data:`RUNS`, :data:`REFUSED`, :data:`BY_TYPES` or
        :data:`BY_NODE` (the default: every node is asked). Detection asks once per op, or
        once per op and type signature, where the target says so; a finding asked once is
        repeated for the other nodes with their own path and name. A subclass that
        overrides :meth:`check_node` without overriding this is asked for every node."""
        return BY_NODE

    def wants_confirm(self, loaded: LoadedModel) -> bool:
        """Whether to confirm by default (e.g. only for small models)."""
        return False

    @staticmethod
    def confirm_by_size(confirm_option: bool | None, loaded: LoadedModel | int,
                        below: int) -> bool:
        """``--confirm``/``--no-confirm`` when given, else whether the model and its
        external data together (``loaded``, or their size in bytes) are at most ``below``
        bytes (a helper for :meth:`wants_confirm`, and for whether a confirmation runs the
        model: :data:`RUN_BY_DEFAULT_BELOW`), and (for a model) whether its main graph has at
        most :data:`CONFIRM_MAX_NODES` nodes."""
        if confirm_option is not None:
            return confirm_option
        if isinstance(loaded, int):
            return loaded <= below
        if len(loaded.model.graph.node) > CONFIRM_MAX_NODES:
            return False
        total = loaded.file_size + sum(f.size for f in loaded.external_files.values())
        return total <= below

    def kernel_problem(self, remedy: KernelRemedy) -> str | None:
        """Why this target cannot run a node retargeted to a custom kernel (None: it can).
        Targets that run no custom kernels keep this default."""
        return f"{self.name} cannot run custom kernels"

    def confirm(self, model: ModelProto, base_dir) -> str | None:
        """Really load ``model`` (external data relative to ``base_dir``) in the runtime
        and, where the target can, run it once on generated inputs; return the runtime's
        refusal, or None. Targets that cannot confirm return None."""
        return None

    def confirmation(self, model: ModelProto, base_dir) -> Confirmation:
        """:meth:`confirm` with how far it got (targets that run the model say more)."""
        error = self.confirm(model, base_dir)
        return Confirmation(error, "load" if error is not None else "")

    def run_refuses(self, message: str) -> bool:
        """Whether a failure while running a model that loaded is the runtime refusing it
        (it lacks a kernel, a mode, a mask layout...), rather than a problem of the
        generated inputs (an index out of range, shapes that do not fit each other)."""
        return _LACKS.search(message) is not None

    # -- running models (used by ``compare``, always in a child process) -----------------

    def prepare(self, model: ModelProto, base_dir) -> Callable[[Mapping[str, Any]], dict]:
        """Load ``model`` (external data relative to ``base_dir``) in the runtime and return
        a function that runs it on one set of feeds (input name -> value) and returns its
        outputs by name. A target implements this or :meth:`run`; one that implements
        neither only answers capability questions (``opset:N``).

        ``compare`` calls it only in a child process with a time limit, so a runtime that
        crashes, hangs or runs out of memory is a result, never the tool's crash."""
        if type(self).run is Target.run:
            raise NotImplementedError(f"target {self.name!r} cannot run models")
        return lambda feeds: self.run(model, base_dir, feeds)

    def run(self, model: ModelProto, base_dir, feeds: Mapping[str, Any]) -> dict:
        """Run ``model`` once on ``feeds``; outputs by name (see :meth:`prepare`)."""
        if type(self).prepare is Target.prepare:
            raise NotImplementedError(f"target {self.name!r} cannot run models")
        return self.prepare(model, base_dir)(feeds)

    @property
    def runs_models(self) -> bool:
        """Whether the target implements :meth:`prepare` or :meth:`run`."""
        cls = type(self)
        return cls.prepare is not Target.prepare or cls.run is not Target.run

    def runs_otherwise_as_oracle(self, model: ModelProto) -> bool:
        """Whether the runtime's numbers for ``model`` may differ between its run as a
        comparison's oracle (pinned to the model's definition, ``TargetOptions.oracle``) and
        its run as loaded by its users: then a model this target runs as it is is compared
        like for like, with the original as its users load it."""
        return False

    @property
    def compares_numbers(self) -> bool:
        """Whether a confirmation that ran the model also compares the runtime's outputs
        with the oracle's (:mod:`rewriter.comparison.numbers`: a difference is a
        ``computes-differently`` finding). A runtime that is the oracle itself says no."""
        return self.runs_models

    def finding(self, query: NodeQuery, reason: str, detail: str, version: int | None = None):
        node = query.node
        return Finding(
            target=self.name,
            path=query.path,
            domain=query.domain,
            op_type=node.op_type,
            version=version if version is not None else query.opset,
            reason=reason,
            detail=detail,
            node_name=node.name,
        )


def _owner(cls: type, attribute: str) -> type:
    return next(c for c in cls.__mro__ if attribute in c.__dict__)


def op_verdicts_apply(target: Target) -> bool:
    """Whether ``target``'s :meth:`Target.check_op` speaks for its :meth:`Target.check_node`:
    both from the same class (or ``check_op`` from a subclass of the one that wrote
    ``check_node``), on the target itself (not a wrapper forwarding to another target, nor
    a ``check_node`` set on the instance)."""
    method = getattr(target, "check_op", None)
    if getattr(method, "__self__", None) is not target or \
            "check_node" in getattr(target, "__dict__", ()):  # replaced on the instance
        return False
    cls = type(target)
    return issubclass(_owner(cls, "check_op"), _owner(cls, "check_node"))


def opset_import_findings(
    target: str, model: ModelProto, max_versions: Mapping[str, int], domains: tuple[str, ...]
) -> list[Finding]:
    """Findings for opset imports newer than ``max_versions`` in the given domains."""
    from rewriter.graph.walk import normalize_domain

    out = []
    for imp in model.opset_import:
        domain = normalize_domain(imp.domain)
        top = max_versions.get(domain)
        if domain in domains and top is not None and imp.version > top:
            out.append(
                Finding(
                    target=target,
                    path="model",
                    domain=domain,
                    op_type="",
                    version=imp.version,
                    reason="opset-too-new",
                    detail=f"model imports {domain_label(domain)} opset {imp.version}; "
                    f"the runtime supports up to {top}",
                )
            )
    return out


_NODE_NAME_PATTERNS = (
    r"lies inside node '([^']*)'",  # OpenVINO's own operation, traced to a node
    r"the node of output '([^']*)'",  # an unnamed node, by its output
    r"running \w+ node\. Name:'([^']*)'",  # onnxruntime, at run time
    r'In Node, \("([^"]*)", (\w+), "([^"]*)"',
    r"node with name '([^']*)'",
    r"\(node:'([^']*)'",
    r"Node \(([^)]*)\)",
)


def refused_node(model: ModelProto, message: str):
    """The node (a :class:`rewriter.graph.walk.NodeSite`) a runtime's error names, if it names
    one of the model's: by node name, else by output name (OpenVINO names the operations
    it converts a node to after the node's outputs); None when no single node matches."""
    from rewriter.graph.walk import iter_nodes

    for pattern in _NODE_NAME_PATTERNS:
        m = re.search(pattern, message)
        if not (m and m.group(1)):
            continue
        name = m.group(1)
        by_name, by_output = [], []
        for site in iter_nodes(model):
            if site.node.name == name:
                by_name.append(site)
            elif name in site.node.output:
                by_output.append(site)
        found = by_name or by_output
        if len(found) == 1 or (found and by_name):
            return found[0]
    return None


def runtime_refusal(target: str, model: ModelProto, message: str) -> Finding:
    """A finding for a runtime's refusal (at load or run time), pointed at the node it
    names when it names one."""
    site = refused_node(model, message)
    if site is not None:
        return Finding(target, site.path, site.domain, site.node.op_type, site.opset_version,
                       "runtime-refused", message, site.node.name)
    return Finding(target, "model", "", "", None, "runtime-refused", message)


# -- confirming in a child process ------------------------------------------------------------

CHILD_MARK = "@confirm "  # the confirming child's reports on stdout start with this


def child_says(stage: str, error: str | None = None, elsewhere: str | None = None,
               values: bool = False) -> None:
    """In a confirming child: report how far it got (``loaded``, ``ran``) or where the
    runtime refused (``load``/``run`` with ``error``; ``elsewhere``: another runtime that
    ran the same model on the same inputs; ``values``: the run failed on the first input
    set but ran on another), one line on stdout."""
    print(CHILD_MARK + json.dumps({"stage": stage, "error": error, "elsewhere": elsewhere,
                                   "values": values}), flush=True)


def run_sets(run: Callable[[Mapping[str, Any]], Any], sets: Sequence[Mapping[str, Any]]
             ) -> tuple[str | None, bool]:
    """In a confirming child: run each input set until one runs. (the first set's error
    or None, whether a later set ran after the first failed)."""
    first = None
    for feeds in sets:
        try:
            run(feeds)
        except Exception as e:  # noqa: BLE001 - the runtime's answer
            text = str(e).strip()
            first = first or (text.splitlines()[0] if text else type(e).__name__)
            continue
        return first, first is not None
    return first, False


# A confirmation runs the model on input sets of these seeds (same shapes, other values)
# until one runs: a failure counts only when every set fails (an input generated as 0 where
# the op wants a positive value fails on one set, not on all).
RUN_SEEDS = (0, 1, 2)


def generated_feeds(model: ModelProto) -> tuple[list[dict] | None, str]:
    """Seeded input sets for a confirmation run (:func:`rewriter.io.inputs.generate_inputs`
    with each of RUN_SEEDS: KV-cache lengths that fit each other, attention masks of ones),
    or None and why they cannot be generated (an input of unknown rank, a map...)."""
    from rewriter.io.inputs import InputError, generate_inputs

    sets = []
    for seed in RUN_SEEDS:
        try:
            sets.append(generate_inputs(model, seed=seed))
        except InputError as e:
            return None, f"not run: {e}"
    return sets, ""


def model_size(model: ModelProto, base_dir) -> int:
    """Bytes of the model and the external-data files it names (those found under
    ``base_dir``), for :meth:`Target.confirm_by_size`."""
    from rewriter.graph.walk import iter_tensors

    files = set()
    for _, tensor in iter_tensors(model):
        for entry in tensor.external_data:
            if entry.key == "location":
                files.add(entry.value)
    total = model.ByteSize()
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    for name in files:
        try:
            total += (base / name).stat().st_size
        except OSError:
            pass
    return total


def confirm_in_child(target: Target, runtime: str, argv: list[str], payload: bytes, cwd,
                     timeout: float, clean: Callable[[str], str] = str.strip) -> Confirmation:
    """Run ``python -c argv[0] argv[1:]`` with ``payload`` on stdin, a child that loads a
    model, then runs it on each input set it was given until one runs (:func:`run_sets`),
    reporting with :func:`child_says`; the :class:`Confirmation` its reports (or its crash,
    or the time limit) amount to. A run failing on every set counts as a refusal when
    another runtime ran the same model on the same inputs (the child says which), or when
    ``target.run_refuses`` its message; ``clean`` makes the runtime's message one readable
    line afterwards."""
    try:
        script = die_with_parent_line() + argv[0]  # killed with this process, even by KILL
        proc = subprocess.run([sys.executable, "-c", script, *argv[1:]], input=payload,
                              capture_output=True, timeout=timeout,
                              cwd=str(cwd) if cwd is not None else None)
        out, err, code = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        out, err, code = e.stdout or b"", e.stderr or b"", None
    reports = [json.loads(line[len(CHILD_MARK):]) for line in
               out.decode(errors="replace").splitlines() if line.startswith(CHILD_MARK)]
    loaded = any(r["stage"] == "loaded" for r in reports)
    last = reports[-1] if reports else {}
    if last.get("error") is not None:
        stage, error = last["stage"], clean(last["error"])
        if stage == "run" and last.get("values"):
            return Confirmation.varied(error)
        if stage == "run" and last.get("elsewhere"):  # another runtime ran the same inputs
            return Confirmation(f"{error} ({last['elsewhere']} runs the same model on the "
                                "same inputs)", stage)
        if stage == "run" and not target.run_refuses(last["error"]):
            return Confirmation.inconclusive(error)
        return Confirmation(error, stage)
    if last.get("stage") == "ran":
        return Confirmation(ran=True)
    if code == 0 and loaded:
        return Confirmation()
    if code is None:
        if loaded:
            return Confirmation(note=f"the run on generated inputs took longer than "
                                f"{timeout:.0f}s")
        return Confirmation(f"{runtime} took longer than {timeout:.0f}s to load the model",
                            "load")
    tail = err.decode(errors="replace").strip().splitlines()[-1:]
    crash = f"{runtime} crashed (exit code {code})" + (f": {tail[0]}" if tail else "")
    if loaded:  # the inputs may be what it cannot take: not counted as a refusal
        return Confirmation(note=f"{crash} while running it on generated inputs")
    return Confirmation(crash.replace(" crashed", " crashed while loading the model", 1),
                        "load")


# Short names people type for the built-in targets (a registered target of that name wins)
TARGET_ALIASES = {"ort": "onnxruntime", "ov": "openvino", "ref": "reference"}


def unknown_target(spec: str, known: Sequence[str]) -> str:
    """The error for a target name nobody registered: the close names ("did you mean"),
    then every installed one."""
    import difflib

    name = spec.partition(":")[0]
    candidates = sorted({*known, *(a for a, t in TARGET_ALIASES.items() if t in known)})
    close = difflib.get_close_matches(name.lower(), candidates, n=3, cutoff=0.6)
    close = list(dict.fromkeys(TARGET_ALIASES.get(c, c) for c in close))
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    listed = ", ".join(sorted(known)) or "none"
    return f"unknown target {spec!r}{hint} (installed targets: {listed})"


def resolve_targets(
    plugins, names: Sequence[str], options: TargetOptions | None = None
) -> list[Target]:
    """Instantiate targets by name (``onnxruntime``, ``opset:13``, ``onnxruntime:CUDA``)
    from loaded ``plugins`` (:class:`rewriter.manager.Plugins`)."""
    from rewriter.errors import TargetError

    options = options or TargetOptions()
    if options.plugins is None:  # targets that run kernels look them up here
        options.plugins = plugins
    targets = []
    for spec in names:
        name, _, argument = spec.partition(":")
        name = TARGET_ALIASES.get(name, name) if name not in plugins.registry.targets \
            else name
        entry = plugins.registry.targets.get(name)
        if entry is None:
            raise TargetError(unknown_target(spec, plugins.registry.targets))
        try:
            target = entry.factory(argument or None, options)
        except TargetError:
            raise
        except Exception as e:  # noqa: BLE001 - a factory failing is the plugin's fault
            raise plugins.registry.plugin_error(
                entry.plugin, f"target {spec!r} could not be created: {type(e).__name__}: {e}"
            ) from e
        if not isinstance(target, Target):
            raise plugins.registry.plugin_error(
                entry.plugin, f"target {spec!r}: factory returned {type(target).__name__}, "
                "not a rewriter.detect.targets.Target"
            )
        targets.append(target)
    return targets
