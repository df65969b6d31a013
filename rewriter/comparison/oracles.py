"""Where a model can be run: the chain of runtimes tried, in a documented order.

The original model is evaluated by the first runtime of the chain that runs it (the
*oracle*), whatever targets the rewrite was for; a rewritten model whose target cannot run
models (``opset:N``), or that still holds findings (``--partial``), runs on the chain too.
The order (``docs/compare.md``):

1. ``onnxruntime`` as it is: contrib ops, onnxruntime-extensions' native ops where it is
   installed, and custom-op libraries given with ``--custom-ops-library``;
2. ``onnxruntime`` with plugin kernels: every node onnxruntime lacks retargeted to a kernel
   an installed plugin registers (an onnxruntime-extensions native op, else a Python kernel
   run through onnxruntime-extensions); only when kernels cover every such node;
3. ``openvino``, where OpenVINO is installed;
4. ``reference``: the ONNX reference evaluator, with plugin kernels as extra ops;
5. any other target asked for that runs models (a third-party runtime).

Each runtime is asked statically first (its ``check``), so one that cannot run the model
costs no child process; the runs themselves happen in :mod:`rewriter.comparison.isolation`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from onnx import ModelProto

if TYPE_CHECKING:
    from rewriter.manager import Plugins

ONNXRUNTIME, OPENVINO, REFERENCE = "onnxruntime", "openvino", "reference"
WITH_KERNELS = "onnxruntime with plugin kernels"


@dataclass(frozen=True)
class Runner:
    """One way to run a model: a target spec, and the model as that target takes it."""

    label: str  # for reports: "onnxruntime", "onnxruntime with plugin kernels", ...
    target: str  # the target spec the isolated worker builds
    model: ModelProto
    reference_ops: tuple[type, ...] = ()
    libraries: tuple[str, ...] | None = None  # custom-op libraries (None: the caller's)


class Chain:
    """The chain's entries in order: a runner that can run the model, or a runtime left out
    (``{"target", "status": "skipped", "error"}``: why). Entries are made on demand (each
    one asks its runtime about the whole model: iterating stops at the first runner that
    works without asking the runtimes after it); :attr:`entries` makes them all."""

    def __init__(self, entries: Iterable[Runner | dict[str, str]] = ()) -> None:
        self._made: list[Runner | dict[str, str]] = []
        self._pending: Iterator[Runner | dict[str, str]] | None = iter(entries)

    def __iter__(self) -> Iterator[Runner | dict[str, str]]:
        i = 0
        while True:
            while i >= len(self._made):
                if self._pending is None:
                    return
                entry = next(self._pending, None)
                if entry is None:
                    self._pending = None
                    return
                self._made.append(entry)
            yield self._made[i]
            i += 1

    @property
    def entries(self) -> list[Runner | dict[str, str]]:
        return list(self)

    @property
    def runners(self) -> list[Runner]:
        return [e for e in self if isinstance(e, Runner)]

    @property
    def skipped(self) -> list[dict[str, str]]:
        return [e for e in self if not isinstance(e, Runner)]


def runners_for(
    model: ModelProto,
    plugins: Plugins,
    *,
    custom_op_libraries: Sequence[str] = (),
    reference_ops: Sequence[type] = (),
    only: str | None = None,
    also: Sequence[str] = (),
) -> Chain:
    """The chain for ``model`` (see the module's docstring), each entry made when reached.

    Args:
        only: a target name (``--original-target``): keep its runners only; a target outside
            the chain is used as it is, unchecked.
        also: more target specs that run models (tried last, as they are).
    """
    return Chain(_entries(model, plugins, custom_op_libraries, reference_ops, only, also))


def _entries(model: ModelProto, plugins: Plugins, custom_op_libraries: Sequence[str],
             reference_ops: Sequence[type], only: str | None, also: Sequence[str],
             ) -> Iterator[Runner | dict[str, str]]:
    from rewriter.detect.walker import find_unsupported

    registry = plugins.registry
    base = only.partition(":")[0] if only else None
    if base and base not in (ONNXRUNTIME, OPENVINO, REFERENCE):
        yield Runner(only, only, model)
        return

    def target(spec: str, libraries=None, **options):
        from rewriter.detect.targets import TargetOptions, resolve_targets

        given = tuple(custom_op_libraries) if libraries is None else libraries
        opts = TargetOptions(custom_op_libraries=given, confirm=False, plugins=plugins,
                             **options)
        return resolve_targets(plugins, [spec], opts)[0]

    def consider(label: str, spec: str, candidate: ModelProto, ops=(), libraries=None,
                 **options) -> tuple[Runner | dict[str, str], list | None]:
        """The entry for the target, and its static findings for ``candidate`` (empty: a
        runner); None when the target cannot be built (not installed)."""
        try:
            t = target(spec, libraries, **options)
            findings = find_unsupported(candidate, t)
        except Exception as e:  # noqa: BLE001 - a target that cannot even check is no runner
            return {"target": label, "status": "skipped",
                    "error": f"{type(e).__name__}: {e}"}, None
        if not findings:
            return Runner(label, spec, candidate, tuple(ops), libraries), findings
        return {"target": label, "status": "skipped",
                "error": f"cannot run it: {findings_text(findings)}"}, findings

    def wanted(name: str) -> bool:
        return base is None or base == name

    ort_spec = only if base == ONNXRUNTIME else ONNXRUNTIME
    if wanted(ONNXRUNTIME) and ONNXRUNTIME in registry.targets:
        libraries = tuple(dict.fromkeys((*custom_op_libraries, *_extensions())))
        entry, findings = consider(ONNXRUNTIME, ort_spec, model, libraries=libraries)
        yield entry
        if findings:
            retargeted, why = with_kernels(model, plugins, ort_spec, custom_op_libraries)
            if retargeted is not None:
                yield consider(WITH_KERNELS, ort_spec, retargeted)[0]
            else:
                yield {"target": WITH_KERNELS, "status": "skipped", "error": why}
    def openvino() -> Iterator[Runner | dict[str, str]]:
        if wanted(OPENVINO) and OPENVINO in registry.targets and _openvino_installed():
            yield consider(OPENVINO, only if base == OPENVINO else OPENVINO, model)[0]

    def reference() -> Iterator[Runner | dict[str, str]]:
        if not (wanted(REFERENCE) and REFERENCE in registry.targets):
            return
        try:
            from rewriter.plan.kernels import reference_ops as plugin_kernels

            ops = tuple(reference_ops) + tuple(plugin_kernels(model, plugins.registry))
        except Exception as e:  # noqa: BLE001 - e.g. a kernel that cannot be imported
            yield {"target": REFERENCE, "status": "skipped",
                   "error": f"{type(e).__name__}: {e}"}
        else:
            label = REFERENCE + (" with plugin kernels" if len(ops) > len(reference_ops)
                                 else "")
            # the worker adds the plugins' kernels itself: the job carries the caller's only
            yield consider(label, REFERENCE, model, tuple(reference_ops), reference_ops=ops)[0]

    # a runtime under comparison is the oracle last: OpenVINO checked against itself shows
    # nothing of its numbers (GRU with layout 1, RoiAlign-22: onnxruntime cannot run them,
    # OpenVINO computes them otherwise, the reference evaluator as the spec says)
    compared = {spec.partition(":")[0] for spec in also}
    if OPENVINO in compared and REFERENCE not in compared:
        yield from reference()
        yield from openvino()
    else:
        yield from openvino()
        yield from reference()
    if base is None:
        for spec in also:
            if spec.partition(":")[0] not in (ONNXRUNTIME, OPENVINO, REFERENCE):
                yield consider(spec, spec, model)[0]


def after_refusal(runner: Runner, error: str, plugins: Plugins,
                  custom_op_libraries: Sequence[str] = ()) -> Runner | None:
    """When onnxruntime refused to run the model at run time on one node it names (its CPU
    Attention and a 4-D mask), the runner that has that node run by a plugin's kernel
    instead (the rest still onnxruntime's), or None."""
    from rewriter.detect.targets import runtime_refusal

    if runner.target.partition(":")[0] != ONNXRUNTIME:
        return None
    refused = runtime_refusal(runner.target, runner.model, error)
    if not refused.node_name:
        return None
    retargeted, _ = with_kernels(runner.model, plugins, runner.target,
                                 runner.libraries or custom_op_libraries,
                                 refused={refused.node_name: (refused.domain, refused.op_type)})
    if retargeted is None:
        return None
    return Runner(f"{WITH_KERNELS} (for the node it refused, {refused.node_name!r})",
                  runner.target, retargeted, runner.reference_ops, runner.libraries)


def with_kernels(model: ModelProto, plugins: Plugins, spec: str = ONNXRUNTIME,
                 custom_op_libraries: Sequence[str] = (), *,
                 refused: Mapping[str, tuple[str, str]] | None = None
                 ) -> tuple[ModelProto | None, str]:
    """``model`` with every node ``spec`` cannot run, and the nodes ``refused`` names (node
    name -> its (domain, op_type)), retargeted to a plugin kernel (the engine, restricted to
    kernel remedies), or None and why not."""
    from rewriter.detect.targets import TargetOptions, resolve_targets
    from rewriter.engine import rewrite_proto
    from rewriter.errors import RewriterError

    registry = plugins.registry
    if not registry.kernels and not registry.natives:
        return None, "no installed plugin registers a kernel"
    only_kernels = dataclasses.replace(
        plugins, registry=dataclasses.replace(registry, decompositions=[], passes={}))
    try:
        (target,) = resolve_targets(only_kernels, [spec], TargetOptions(
            custom_op_libraries=tuple(custom_op_libraries), confirm=False, plugins=plugins))
        if refused:
            target = _Refusing(target, refused)
        typed = typed_through_kernels(model, plugins, target)
        rewritten, report = rewrite_proto(typed, [target], only_kernels, prefer="kernel")
    except RewriterError as e:
        return None, f"plugin kernels do not cover it: {e}"
    except Exception as e:  # noqa: BLE001 - a plugin's kernel failing is a reason, not a crash
        return None, f"retargeting to plugin kernels failed: {type(e).__name__}: {e}"
    if report.remaining:
        return None, f"plugin kernels do not cover it: {findings_text(report.remaining)}"
    if not report.applied:
        return None, "no node needs a kernel"
    return rewritten, ""


def typed_through_kernels(model: ModelProto, plugins: Plugins, target,
                          rounds: int = 16) -> ModelProto:
    """``model``, or a copy whose values carry the element types a kernel's signature gives
    the outputs of an op no schema describes, so the kernels' signatures can be matched
    all along a chain of such ops (``com.acme::Op`` feeding another, directly or through
    ops ``target`` types, contrib ops included): a walk of ``target`` types what it can,
    each kernel op with known input types declares its outputs, until nothing is learned."""
    from onnx import ModelProto as Model
    from onnx import TensorProto, helper

    from rewriter.detect.walker import find_unsupported
    from rewriter.graph.walk import iter_scopes
    from rewriter.plan.kernels import element_type, load_kernel

    registry = plugins.registry
    current = model
    for _ in range(rounds):
        added: list = []  # (scope path, value name, element type)
        for f in find_unsupported(current, target, keep_nodes=True):
            entry = registry.kernels.get((f.domain, f.op_type)) if f.node is not None else None
            if entry is None:
                continue
            try:
                signature = load_kernel(entry, registry).match(
                    [element_type(t) for t in f.input_types])
            except Exception:  # noqa: BLE001 - an unusable kernel types nothing
                continue
            if signature is not None:
                scope = f.path.rsplit("/", 1)[0]
                added += [(scope, name, t) for name, t in zip(f.node.output, signature.outputs)
                          if name]
        if current is model:
            current = Model()
            current.CopyFrom(model)
        graphs = {s.path: s.graph for s in iter_scopes(current) if s.graph is not None}
        declared: dict[str, set[str]] = {}  # scope path -> the names its graph declares
        learned = 0
        for scope, name, t in added:
            graph = graphs.get(scope)
            if graph is None:
                continue
            names = declared.get(scope)
            if names is None:  # (a set per graph: a search of value_info per name was
                names = declared[scope] = {v.name for v in graph.value_info} | {
                    v.name for v in (*graph.input, *graph.output)  # typed ones: quadratic)
                    if v.type.tensor_type.elem_type}
            if name in names:
                continue
            names.add(name)
            elem = TensorProto.DataType.Value(t.upper())
            graph.value_info.append(
                helper.make_value_info(name, helper.make_tensor_type_proto(elem, None)))
            learned += 1
        if not learned:
            break
    return current if current is not model and len(current.graph.value_info) else model


class _Refusing:
    """A target as another one, except that the nodes ``refused`` names (node name -> its
    (domain, op_type), so a node once retargeted is not refused again) are findings: the
    runtime refused them at run time, and the engine gives them a kernel."""

    def __init__(self, base, refused: Mapping[str, tuple[str, str]]) -> None:
        self._base, self._refused = base, dict(refused)

    def __getattr__(self, attr):
        return getattr(self._base, attr)

    def check_node(self, query):
        if self._refused.get(query.node.name) == (query.domain, query.node.op_type):
            return self._base.finding(query, "runtime-refused", "refused at run time")
        return self._base.check_node(query)


def findings_text(findings, limit: int = 3) -> str:
    """``op ×n (detail); ...`` for the first ``limit`` groups of findings."""
    from rewriter.detect.walker import group_findings

    groups = group_findings(findings)
    parts = [f"{g.op_label} ×{g.count} ({g.detail})" for g in groups[:limit]]
    if len(groups) > limit:
        parts.append(f"and {len(groups) - limit} more")
    return "; ".join(parts)


def _extensions() -> tuple[str, ...]:
    """``("extensions",)`` where onnxruntime-extensions is installed (its native ops are
    installed kernels as much as contrib ops are)."""
    import importlib.util

    from rewriter.plan.kernels import EXTENSIONS

    try:
        found = importlib.util.find_spec("onnxruntime_extensions") is not None
    except (ImportError, ValueError):
        found = False
    return (EXTENSIONS,) if found else ()


def _openvino_installed() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec("openvino") is not None
    except (ImportError, ValueError):
        return False
