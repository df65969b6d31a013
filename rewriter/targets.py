"""What a target is: a runtime that can or cannot run each node of a model.

Targets are registered by plugins (``register_targets``). The core only knows this
interface; onnxruntime, the reference evaluator and ``opset:N`` are built-in plugins.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from onnx import ModelProto, NodeProto, TypeProto

from rewriter.schemas import SchemaIndex, onnx_schemas

if TYPE_CHECKING:
    from rewriter.io import LoadedModel

# Why a target cannot run a node. Keys are stable (JSON); values are for people.
REASONS: dict[str, str] = {
    "unknown-domain": "unknown domain",
    "domain-not-imported": "domain not in the model's opset imports",
    "no-schema": "no schema",
    "no-kernel": "no kernel for that opset version",
    "type-binding": "unsupported type binding",
    "opset-too-new": "opset beyond what the runtime supports",
    "invalid-node": "node does not match the operator's schema",
    "runtime-refused": "the runtime refused the model",
}


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


@dataclass(frozen=True)
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
    scope_opsets: Mapping[str, int] | None = field(default=None, compare=False, repr=False)

    @property
    def op_label(self) -> str:
        domain = self.domain or "ai.onnx"
        version = f"({self.version})" if self.version is not None else ""
        return f"{domain}::{self.op_type}{version}" if self.op_type else domain

    def as_dict(self) -> dict:
        return {
            "target": self.target,
            "path": self.path,
            "node_name": self.node_name,
            "domain": self.domain or "ai.onnx",
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


@dataclass
class KernelRemedy:
    """A kernel remedy the planner asks a target about: ``node`` as it would be after the
    retarget (a copy), and what it needs."""

    kind: str  # "python": a rewriter.kernels.KernelUse; "native": a NativeUse
    node: NodeProto
    use: Any
    kernel: Any = None  # the resolved rewriter.kernels.Kernel ("python")
    input_types: tuple[str | None, ...] = ()
    opsets: Mapping[str, int] = field(default_factory=dict)
    declared: Mapping[str, TypeProto] = field(default_factory=dict)


class Target:
    """Base class for targets. Subclasses implement :meth:`check_node`."""

    name: str = "target"
    description: str = ""
    plugins: Any = None  # the run's loaded plugins (TargetOptions.plugins), if given

    def _registry(self):
        """The registry of the run's plugins (loaded on first use when none were given):
        targets that run custom kernels look up the kernels a model's metadata lists."""
        if self.plugins is None:
            from rewriter.manager import load_plugins

            self.plugins = load_plugins()
        return self.plugins.registry
    # Highest opset version of each domain the runtime implements ({"": 13} for ai.onnx up
    # to 13), when it has such a ceiling; an opset-conversion pass lowers models to it.
    max_opsets: Mapping[str, int] | None = None
    # Lowest opset version of each domain it runs models of ({"": 7} for onnxruntime); an
    # opset-conversion pass raises older models to it.
    min_opsets: Mapping[str, int] | None = None

    @property
    def schemas(self) -> SchemaIndex:
        """Schemas used to resolve versions and infer types (default: onnx's)."""
        return onnx_schemas()

    def check_model(self, model: ModelProto) -> list[Finding]:
        """Model-level findings (opset imports beyond the runtime, ...)."""
        return []

    def check_node(self, query: NodeQuery) -> Finding | None:
        """A finding if the target cannot run this node, else None."""
        raise NotImplementedError

    def wants_confirm(self, loaded: LoadedModel) -> bool:
        """Whether to confirm by default (e.g. only for small models)."""
        return False

    @staticmethod
    def confirm_by_size(confirm_option: bool | None, loaded: LoadedModel, below: int) -> bool:
        """``--confirm``/``--no-confirm`` when given, else whether the model and its
        external data together are at most ``below`` bytes (a helper for
        :meth:`wants_confirm`)."""
        if confirm_option is not None:
            return confirm_option
        total = loaded.file_size + sum(f.size for f in loaded.external_files.values())
        return total <= below

    def kernel_problem(self, remedy: KernelRemedy) -> str | None:
        """Why this target cannot run a node retargeted to a custom kernel (None: it can).
        Targets that run no custom kernels keep this default."""
        return f"{self.name} cannot run custom kernels"

    def confirm(self, model: ModelProto, base_dir) -> str | None:
        """Really load ``model`` (external data relative to ``base_dir``) in the runtime;
        return the runtime's error, or None if it loads. Targets that cannot confirm return
        None."""
        return None

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


def opset_import_findings(
    target: str, model: ModelProto, max_versions: Mapping[str, int], domains: tuple[str, ...]
) -> list[Finding]:
    """Findings for opset imports newer than ``max_versions`` in the given domains."""
    from rewriter.walk import normalize_domain

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
                    detail=f"model imports {domain or 'ai.onnx'} opset {imp.version}; "
                    f"the runtime supports up to {top}",
                )
            )
    return out


_NODE_NAME_PATTERNS = (
    r'In Node, \("([^"]*)", (\w+), "([^"]*)"',
    r"node with name '([^']*)'",
    r"\(node:'([^']*)'",
    r"Node \(([^)]*)\)",
)


def runtime_refusal(target: str, model: ModelProto, message: str) -> Finding:
    """A finding for a runtime's load error, pointed at the node it names when it names one."""
    import re

    from rewriter.walk import iter_nodes

    name = None
    for pattern in _NODE_NAME_PATTERNS:
        m = re.search(pattern, message)
        if m and m.group(1):
            name = m.group(1)
            break
    if name:
        for site in iter_nodes(model):
            if site.node.name == name:
                return Finding(target, site.path, site.domain, site.node.op_type,
                               site.opset_version, "runtime-refused", message, name)
    return Finding(target, "model", "", "", None, "runtime-refused", message)
