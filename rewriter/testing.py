"""Check a registered decomposition against its oracle, on the samples its registration
declares (``registry.add(..., oracle=..., samples=[OpSample(...)])``).

For one sample and dtype: build the one-node model, run the oracle on it, rewrite it with the
real engine for a target that lacks exactly that op (``lacking:DOMAIN::OP``, registered by
this module when it is loaded as a plugin: :func:`oracle_plugins`), run the result on
onnxruntime (the reference evaluator where onnxruntime refuses it for one of its own limits,
:data:`RUNTIME_LIMITS`) and compare every output's element type, shape and values. Where the
op also has a Python kernel, the kernel's declared output types must be the decomposition's
too.

Oracles (:data:`rewriter.registry.ORACLES`) must be independent of the decomposition, and are
checked to be: ``onnxruntime`` only where onnxruntime has a kernel of its own for the op (not
a function it expands), ``reference`` only where the reference evaluator implements the op
(not by running its function body). ``spec`` checks on the ONNX backend node test cases of
the op (at most :data:`SPEC_CASES` per op, distinct input types first) and their expected
outputs. ``tests/test_oracles.py`` runs every built-in registration; a third-party plugin
can run its own the same way.

For plugin authors' own suites (and this repository's tests): :func:`one_node_model` and
:func:`make_model` build models, :func:`rewritten` rewrites one asserting nothing is left,
:func:`run_on` and :func:`assert_rewrite_runs_everywhere` run original and rewritten on every
installed runtime, and :func:`check_plugin` is the contract test any plugin can run.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from onnx import ModelProto, NodeProto, TensorProto, ValueInfoProto, helper, numpy_helper

from rewriter.detect.targets import Finding, NodeQuery, Target
from rewriter.graph.opid import OpId
from rewriter.graph.walk import normalize_domain
from rewriter.hookspecs import hookimpl
from rewriter.registry import Arg, DecompositionEntry, OpSample

if TYPE_CHECKING:
    from rewriter.manager import Plugins
    from rewriter.registry import Registry

LACKING = "lacking"
SPEC_CASES = 6  # backend cases per op for the "spec" oracle
# backend cases the check leaves out, and why
SPEC_LEFT_OUT = {
    "test_range_bfloat16_type_positive_delta": "onnxruntime has no bfloat16 kernels for the "
    "body's Loop, and the reference evaluator stacks a Loop's scalar scan outputs as (n, 1)",
}
MIN_OPSET = 7  # the oldest ai.onnx opset onnxruntime runs models of
# (rtol, atol) by element type; integers and bool compare exactly
TOLERANCE = {"float": (1e-4, 1e-5), "double": (1e-7, 1e-9), "float16": (1e-2, 1e-2),
             "bfloat16": (4e-2, 4e-2)}


# -- the target that lacks one op ----------------------------------------------------------


class Lacking(Target):
    """A runtime that runs everything but one op (``DOMAIN::OP``, ``ai.onnx::Celu``), so a
    rewrite must remedy exactly that op; ``DOMAIN::OP@TYPE`` lacks it only where an input is
    of element type TYPE (a remedy that computes the op in a wider type);
    ``DOMAIN::OP->NAME`` only the node making the value NAME (a remedy that keeps the op in
    a safe form, e.g. BitShift by in-range counts only: the body's own nodes make other
    values)."""

    def __init__(self, argument: str | None) -> None:
        argument, _, self.output = (argument or "").partition("->")
        spec, _, elem = argument.partition("@")
        domain, sep, op_type = spec.rpartition("::")
        if not sep or not op_type:
            raise ValueError(f"target {LACKING}:{argument}: want {LACKING}:DOMAIN::OP[@TYPE]")
        self.domain, self.op_type = normalize_domain(domain), op_type
        self.input_type = f"tensor({elem})" if elem else None
        self.name = f"{LACKING}:{argument}"

    def check_node(self, query: NodeQuery) -> Finding | None:
        if query.domain == self.domain and query.node.op_type == self.op_type and (
                self.input_type is None
                or self.input_type in {query.types.get(n) for n in query.inputs}) and (
                not self.output or self.output in query.outputs):
            if self.output:  # that node computes differently, as a runtime's finding says
                return self.finding(query, "computes-differently",
                                    "the node under check computes differently by request")
            return self.finding(query, "no-kernel", "the op under check is lacking by request")
        return None


@hookimpl
def register_targets(registry) -> None:
    registry.add(LACKING, lambda argument, options=None: Lacking(argument),
                 description="lacks one op (DOMAIN::OP): checks its decomposition")


def oracle_plugins(plugins: Sequence[str] = (), *, autoload: bool = False) -> Plugins:
    """The plugins (built-ins and ``plugins``) with the ``lacking`` target loaded."""
    from rewriter.manager import load_plugins

    return load_plugins([*plugins, __name__], autoload=autoload)


# -- one check -----------------------------------------------------------------------------


@dataclass
class Check:
    """One model the decomposition is checked on, with its data sets."""

    entry: DecompositionEntry
    label: str
    model: ModelProto
    feeds: list[dict[str, Any]]
    dtype: str | None = None
    declared: list[str | None] = field(default_factory=list)  # output element types
    expected: list[list[Any]] | None = None  # per data set ("spec")
    tolerance: tuple[float, float] | None = None
    oracle: str | None = None  # the sample's own, else the registration's
    min_onnxruntime: tuple[str, str] | None = None  # the sample's (version, why)
    # per data set, its input regime (rewriter.io.regimes): "typical" (the sample's own
    # draw), "edges", "booleans", "special-values"; and the regimes the oracle could not
    # run, with why (dropped from ``feeds``)
    labels: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def oracle_name(self) -> str | None:
        return self.oracle or self.entry.oracle


def label(entry: DecompositionEntry) -> str:
    lo, hi = entry.opsets
    return (f"{entry.plugin}:{OpId(entry.domain, entry.op_type)}"
            f"@{lo}-{hi if hi is not None else ''}")


def opset_of(entry: DecompositionEntry, sample: OpSample) -> int | None:
    """The ai.onnx opset ``sample`` runs at for ``entry`` (None: outside its range; 0: the
    model imports no ai.onnx opset, which the engine plans as opset 1)."""
    opset = sample.opset if sample.opset is not None else max(entry.opsets[0], MIN_OPSET)
    return opset if entry.covers(max(opset, 1)) else None


def run_name(sample: OpSample, dtype: str | None) -> str:
    """``float16-bias@12``: the dtype, the sample's name and its own opset."""
    name = dtype or "-"
    if sample.name:
        name += f"-{sample.name}"
    if sample.opset is not None:
        name += f"@{sample.opset}"
    if sample.domain_opset is not None:
        name += f"-domain{sample.domain_opset}"
    return name


def sample_runs(entry: DecompositionEntry) -> list[tuple[OpSample, str | None]]:
    """Every (sample, dtype) the registration is checked at: each sample at each of the
    registration's dtypes it applies to (a sample whose inputs are all typed runs once)."""
    runs = []
    for sample in entry.samples:
        if opset_of(entry, sample) is None:
            continue
        generic = any(a is not None and a.type == "T" for a in sample.inputs) or (
            "T" in sample.outputs)
        if not generic:
            runs.append((sample, None))
            continue
        for dtype in entry.dtypes or sample.dtypes or ():
            if sample.dtypes is None or dtype in sample.dtypes:
                runs.append((sample, dtype))
    return runs


def _elem(type_name: str, dtype: str | None) -> int:
    name = dtype if type_name == "T" else type_name
    if name is None:
        raise ValueError("a sample with 'T' inputs needs a dtype")
    elem = getattr(TensorProto, name.upper(), None)
    if not isinstance(elem, int):
        raise ValueError(f"unknown element type {name!r}")
    return elem


def _values(arg: Arg, elem: int, rng: np.random.Generator) -> np.ndarray:
    np_type = helper.tensor_dtype_to_np_dtype(elem)
    if callable(arg.values):
        return np.asarray(arg.values(rng, arg.shape)).astype(np_type).reshape(arg.shape)
    if arg.values is not None:
        return np.asarray(arg.values).astype(np_type).reshape(arg.shape)
    if elem == TensorProto.BOOL:
        return rng.random(arg.shape) < 0.5
    if np.issubdtype(np.dtype(np_type), np.integer) or elem in (TensorProto.INT4,
                                                                TensorProto.UINT4):
        return rng.integers(int(arg.low), int(arg.high), arg.shape).astype(np_type)
    return rng.uniform(arg.low, arg.high, arg.shape).astype(np_type)


def build(entry: DecompositionEntry, sample: OpSample, dtype: str | None,
          regimes: bool = True) -> Check:
    """The one-node model of ``sample`` at ``dtype`` and its data sets: the sample's own
    draw, then (``regimes``) those of :func:`regime_sets`."""
    opset = opset_of(entry, sample)
    if opset is None:
        raise ValueError(f"{label(entry)}: sample {sample.name!r} is outside the opsets")
    run_label = f"{label(entry)}[{run_name(sample, dtype)}]"
    rng = np.random.default_rng(zlib.crc32(run_label.encode()))
    names, graph_inputs, initializers, feeds = [], [], [], {}
    for i, arg in enumerate(sample.inputs):
        if arg is None:
            names.append("")
            continue
        name = f"x{i}"
        names.append(name)
        elem = _elem(arg.type, dtype)
        value = _values(arg, elem, rng)
        if arg.constant:
            initializers.append(numpy_helper.from_array(value, name) if elem not in (
                TensorProto.INT4, TensorProto.UINT4) else helper.make_tensor(
                    name, elem, value.shape, value.astype(np.int8).reshape(-1).tolist()))
        else:
            graph_inputs.append(helper.make_tensor_value_info(name, elem, arg.shape))
            feeds[name] = value
    while names and not names[-1]:
        names.pop()
    outputs = [f"y{i}" if t is not None else "" for i, t in enumerate(sample.outputs)]
    node = helper.make_node(entry.op_type, names, outputs, domain=entry.domain, name=CHECKED)
    node.attribute.extend(helper.make_attribute(k, v) for k, v in sample.attributes.items())
    out_elems = [_elem(t, dtype) for t in sample.outputs if t is not None]
    graph = helper.make_graph([node], "sample", graph_inputs, [
        helper.make_tensor_value_info(n, e, None)
        for n, e in zip([o for o in outputs if o], out_elems)], initializer=initializers)
    imports = [helper.make_opsetid("", opset)] if opset else []
    if entry.domain:
        imports.append(helper.make_opsetid(entry.domain, sample.domain_opset or 1))
    model = helper.make_model(graph, opset_imports=imports, producer_name="oracle_check")
    model.ir_version = max(_ir_version(opset or MIN_OPSET),
                           helper.find_min_ir_version_for(imports, ignore_unknown=True))
    declared = [helper.tensor_dtype_to_np_dtype(e).name for e in out_elems]
    sets, labels = [feeds], [TYPICAL]
    if regimes:
        for name, extra in regime_sets(model, sample, feeds, rng):
            sets.append(extra)
            labels.append(name)
    return Check(entry, run_label, model, sets, dtype, declared, None, sample.tolerance,
                 sample.oracle, sample.min_onnxruntime, labels)


TYPICAL = "typical"
_DEFAULT_RANGE = (Arg.low, Arg.high)


def regime_sets(model: ModelProto, sample: OpSample, feeds: dict[str, Any],
                rng: np.random.Generator) -> list[tuple[str, dict[str, Any]]]:
    """More data sets for a sample, as ``compare`` verifies models
    (:mod:`rewriter.io.regimes`): ``edges`` (one or two sets: inputs read as data at their
    type's edges; one whose sample narrows its range, at that range's ends; indices, axes, fixed
    and constant inputs as drawn), ``booleans`` (every boolean scalar True, then False)
    and, for an ai.onnx op whose specification defines its result on them,
    ``special-values`` (NaN, +inf, -inf among the float inputs)."""
    from rewriter.io.regimes import (
        INDEX,
        SPECIAL_SAFE_OPS,
        bound_kind,
        edge_orders,
        edge_values,
        input_uses,
        special_values,
    )

    args = {f"x{i}": a for i, a in enumerate(sample.inputs)
            if a is not None and not a.constant}
    uses = input_uses([model])
    data = {name: use != INDEX for name, use in uses.items()}
    drawn = [n for n, a in args.items() if a.values is None and n in feeds]
    out = []
    edges = []
    for last in edge_orders({n: feeds[n] for n in drawn}, uses):
        edged = dict(feeds)
        for name in drawn:
            arg, value = args[name], feeds[name]
            if not data.get(name, True) or value.dtype == np.bool_:
                continue
            if (arg.low, arg.high) == _DEFAULT_RANGE:
                edged[name] = edge_values(value, rng, None, last, bound_kind(uses.get(name, "")))
            else:
                edged[name] = _range_ends(value, arg, rng, last)
        edges.append(edged)
    if any(not _same(e, feeds) for e in edges):
        out += [("edges", e) for e in edges]
    flags = [n for n in drawn if feeds[n].dtype == np.bool_ and feeds[n].size == 1]
    if flags:
        out += [("booleans", {**feeds, **{n: np.full_like(feeds[n], flag) for n in flags}})
                for flag in (True, False)]
    node = model.graph.node[0]
    floats = [n for n in drawn if data.get(n, True) and (
        feeds[n].dtype.kind == "f" or feeds[n].dtype.name == "bfloat16")]
    if normalize_domain(node.domain) == "" and node.op_type in SPECIAL_SAFE_OPS and floats:
        out.append(("special-values", {**feeds, **{n: special_values(feeds[n], rng)
                                                   for n in floats}}))
    return out


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return all(np.array_equal(a[k], b[k]) for k in a)


def _range_ends(value: np.ndarray, arg: Arg, rng, last: bool) -> np.ndarray:
    """``value`` with its sample's range's ends among uniform draws within it."""
    if value.dtype.kind in "iu":
        ends = [int(arg.low), int(arg.high) - 1]
    elif value.dtype.kind == "f" or value.dtype.name == "bfloat16":
        top = np.nextafter(np.float32(arg.high), np.float32(arg.low))
        ends = [arg.low, float(top), (arg.low + arg.high) / 2]
    else:
        return value
    flat = value.reshape(-1).copy()
    ends = ends[::-1] if last else ends
    positions = rng.permutation(flat.size)[:len(ends)]
    flat[positions] = np.asarray(ends[:len(positions)]).astype(np.float32).astype(flat.dtype) \
        if flat.dtype.kind not in "iu" else np.asarray(ends[:len(positions)]).astype(flat.dtype)
    return flat.reshape(value.shape)


def _ir_version(opset: int) -> int:
    return max(7, helper.find_min_ir_version_for([helper.make_opsetid("", opset)]))


def _release(version: str) -> tuple[int, ...]:
    """``"1.23.2"`` (or ``"1.24.0.dev20250101"``) as ``(1, 23, 2)``: its numbered parts."""
    parts = []
    for part in version.split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


def onnxruntime_below(version: str) -> bool:
    """The installed onnxruntime is older than ``version`` (``"1.24"``); False without one."""
    try:
        import onnxruntime
    except ImportError:
        return False
    return _release(onnxruntime.__version__) < _release(version)


def needs_newer_onnxruntime(check: Check) -> str | None:
    """Why ``check`` cannot be decided on the installed onnxruntime (older than the
    sample's ``min_onnxruntime``: its kernels lack the form or compute it differently), or
    None."""
    if check.min_onnxruntime is None or not onnxruntime_below(check.min_onnxruntime[0]):
        return None
    import onnxruntime

    version, why = check.min_onnxruntime
    return (f"{check.label}: needs onnxruntime >= {version}, {onnxruntime.__version__} is "
            f"installed: {why}")


# -- "spec": the backend node test cases -----------------------------------------------------


@functools.cache
def _backend_cases() -> tuple:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        return tuple(c for c in collect_testcases() if c.model is not None)


def spec_checks(entry: DecompositionEntry, limit: int = SPEC_CASES) -> list[Check]:
    """The backend node cases of the op (one node, at an opset the registration covers),
    at most ``limit``: one per distinct input-type signature first, then by name."""
    found = []
    for case in sorted(_backend_cases(), key=lambda c: c.name):
        graph = case.model.graph
        if (len(graph.node) != 1 or graph.node[0].op_type != entry.op_type
                or normalize_domain(graph.node[0].domain) != entry.domain
                or case.name in SPEC_LEFT_OUT):
            continue
        model = _at_covered_opset(case.model, entry)
        if model is not None:
            found.append((case, model))
    signature = {c.name: tuple(i.type.SerializeToString() for i in m.graph.input)
                 for c, m in found}
    chosen, seen = [], set()
    for case, model in found:
        if signature[case.name] not in seen:
            seen.add(signature[case.name])
            chosen.append((case, model))
    chosen += [x for x in found if x not in chosen]
    checks = []
    for case, model in chosen[:limit]:
        inputs = [i.name for i in model.graph.input]
        feeds = [dict(zip(inputs, map(_array, data_in))) for data_in, _ in case.data_sets]
        expected = [[_array(v) for v in data_out] for _, data_out in case.data_sets]
        declared = [_declared_name(o.type) for o in case.model.graph.output]
        checks.append(Check(entry, f"{label(entry)}[{case.name}]", model, feeds, None,
                            declared, expected, (case.rtol, case.atol)))
    return checks


def _at_covered_opset(model: ModelProto, entry: DecompositionEntry) -> ModelProto | None:
    """A one-node case model at an ai.onnx opset the registration covers: as it is, or at
    the registration's lowest opset when the op's schema is the same there (Relu-14's case
    at opset 18, where its function body begins); None otherwise."""
    from onnx import defs

    opset = _domain_version(model, "")
    if opset is None or entry.covers(opset):
        return model
    lo = entry.opsets[0]
    node = model.graph.node[0]
    try:
        same = defs.get_schema(node.op_type, lo, node.domain).since_version <= opset < lo
    except Exception:  # noqa: BLE001 - no schema: not the same op
        return None
    if not same:
        return None
    raised = ModelProto()
    raised.CopyFrom(model)
    for imp in raised.opset_import:
        if normalize_domain(imp.domain) == "":
            imp.version = lo
    raised.ir_version = max(raised.ir_version, _ir_version(lo))
    return raised


def _array(value: Any) -> Any:
    """A backend case's value as runtimes take it (arrays, lists of arrays for sequences)."""
    from onnx import TensorProto as Tensor

    if isinstance(value, list):
        return [_array(v) for v in value]
    if isinstance(value, Tensor):
        return numpy_helper.to_array(value)
    return np.asarray(value)


def _declared_name(type_proto) -> str | None:
    if type_proto.HasField("tensor_type") and type_proto.tensor_type.elem_type:
        return helper.tensor_dtype_to_np_dtype(type_proto.tensor_type.elem_type).name
    return None


def checks(entry: DecompositionEntry) -> list[Check]:
    """Every model the registration's oracle check runs."""
    if entry.oracle == "spec" and not entry.samples:
        return spec_checks(entry)
    return [build(entry, sample, dtype) for sample, dtype in sample_runs(entry)]


# -- running the oracle ----------------------------------------------------------------------


@functools.cache
def _ort_kernels() -> frozenset[tuple[str, str, int, int]]:
    from onnxruntime.capi import _pybind_state

    return frozenset((normalize_domain(k.domain), k.op_name, *k.version_range)
                     for k in _pybind_state.get_all_opkernel_def()
                     if k.provider == "CPUExecutionProvider")


def _domain_version(model: ModelProto, domain: str) -> int | None:
    return next((o.version for o in model.opset_import if normalize_domain(o.domain) == domain),
                None)


def dependence(check: Check, oracle: str) -> str | None:
    """Why ``oracle`` would not be independent of the decomposition here (None: it is)."""
    entry = check.entry
    version = _domain_version(check.model, entry.domain) or 1
    if oracle == "onnxruntime":
        if not any(d == entry.domain and op == entry.op_type and lo <= version <= hi
                   for d, op, lo, hi in _ort_kernels()):
            return (f"onnxruntime has no CPU kernel of its own for "
                    f"{OpId(entry.domain, entry.op_type, version)} (it would expand "
                    "the op's function, or cannot run it)")
    if oracle == "reference":
        from onnx.reference import ReferenceEvaluator
        from onnx.reference.op_run import OpFunction

        try:
            (implementation,) = ReferenceEvaluator(check.model).rt_nodes_
        except Exception as e:  # noqa: BLE001 - it cannot run the op at all
            return f"the reference evaluator cannot run it: {type(e).__name__}: {e}"
        if isinstance(implementation, OpFunction) or type(implementation).__module__.split(
                ".")[:2] != ["onnx", "reference"]:
            return ("the reference evaluator has no implementation of "
                    f"{OpId(entry.domain, entry.op_type, version)} but its function")
    return None


def _run_kernel(check: Check, registry: Registry, feeds: Mapping[str, Any]) -> list:
    from onnx.reference import ReferenceEvaluator

    from rewriter.plan.kernels import reference_ops

    ops = reference_ops([(check.entry.domain, check.entry.op_type)], registry)
    return list(ReferenceEvaluator(check.model, new_ops=ops).run(None, dict(feeds)))


def _run_function(reference: str, check: Check, feeds: Mapping[str, Any]) -> list:
    """A numpy oracle ``f(*arrays, **attributes)`` (absent inputs as None; it may give every
    output of the op, the node's are taken by position; a :class:`~rewriter.plan.kernels.Kernel`
    gets its attribute defaults, and its outputs in its declared types)."""
    from rewriter.plan.functions import resolve_reference
    from rewriter.plan.kernels import Kernel, normalize_outputs

    fn = resolve_reference(reference)
    node = check.model.graph.node[0]
    values = dict(feeds)
    values.update({i.name: numpy_helper.to_array(i) for i in check.model.graph.initializer})
    arrays = [values[name] if name else None for name in node.input]
    attributes = {a.name: _attribute(a) for a in node.attribute}
    if isinstance(fn, Kernel):
        while arrays and arrays[-1] is None:
            arrays.pop()
        signature = fn.match([_kernel_type(a) for a in arrays])
        if signature is None:
            raise AssertionError(f"{check.label}: no signature of {reference} takes these "
                                 "inputs")
        return list(normalize_outputs(fn.fn(*arrays, **fn.cast_attributes(attributes)),
                                      signature))
    result = fn(*arrays, **attributes)
    result = list(result) if isinstance(result, tuple | list) else [result]
    # a function giving every output of the op: the node's, by position
    return [r for r, name in zip(result, node.output) if name]


def _kernel_type(array: Any) -> str | None:
    if array is None:
        return None
    name = np.asarray(array).dtype.name
    return {"float32": "float", "float64": "double", "object": "string"}.get(name, name)


def _attribute(a) -> Any:
    value = helper.get_attribute_value(a)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode() for v in value]
    return value


def run_oracle(check: Check, registry: Registry) -> list[list[Any]]:
    """The oracle's outputs on every data set of ``check``."""
    oracle = check.oracle_name
    if oracle is None:
        raise AssertionError(f"{label(check.entry)} declares no oracle")
    if oracle == "spec":
        if check.expected is None:
            raise AssertionError(f"{check.label}: oracle 'spec' on a sample without cases")
        return check.expected
    problem = dependence(check, oracle)
    if problem:
        raise AssertionError(f"{check.label}: oracle {oracle!r} is not independent: {problem}")
    if oracle == "onnxruntime":
        session = _ort_session(check.model)
        return _each_set(check, lambda feeds: session.run(None, feeds))
    if oracle == "reference":
        from onnx.reference import ReferenceEvaluator

        evaluator = ReferenceEvaluator(check.model)
        return _each_set(check, lambda feeds: list(evaluator.run(None, feeds)))
    if oracle == "kernel":
        if (check.entry.domain, check.entry.op_type) not in registry.kernels:
            raise AssertionError(f"{check.label}: oracle 'kernel' but no plugin registers a "
                                 "Python kernel for the op")
        return _each_set(check, lambda feeds: _run_kernel(check, registry, feeds))
    return _each_set(check, lambda feeds: _run_function(oracle, check, feeds))


def _each_set(check: Check, run) -> list[list[Any]]:
    """``run`` on every data set of ``check``. A regime's set the oracle cannot run (an op
    refusing values outside its domain) drops that regime from the check, recorded in
    ``check.skipped``; the sample's own set must run."""
    import warnings

    outputs, keep = [], []
    for i, feeds in enumerate(check.feeds):
        label = check.labels[i] if i < len(check.labels) else TYPICAL
        if label == TYPICAL:
            outputs.append(run(feeds))
            keep.append(i)
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = run(feeds)
        except Exception as e:  # noqa: BLE001 - the regime is invalid for this op
            check.skipped.setdefault(label, f"the oracle fails: {type(e).__name__}: "
                                     f"{(str(e).strip().splitlines() or [''])[0][:200]}")
            continue
        outputs.append(got)
        keep.append(i)
    if len(keep) != len(check.feeds):
        dropped = {check.labels[i] for i in range(len(check.feeds)) if i not in keep}
        kept = [i for i in keep if check.labels[i] not in dropped]
        outputs = [o for i, o in zip(keep, outputs) if i in kept]
        check.feeds = [check.feeds[i] for i in kept]
        check.labels = [check.labels[i] for i in kept]
    return outputs


def _ort_session(model: ModelProto, optimize: bool = True):
    """A CPU session; without ``optimize`` only onnxruntime's basic optimizations run
    (constant folding, redundant nodes): its extended fusions would turn a decomposed body
    back into the contrib kernel under check (FastGelu, LayerNormalization, FusedConv...)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


# -- running the decomposition ---------------------------------------------------------------

# onnxruntime refusals that are its own limits, not the decomposition's fault: a kernel it
# lacks for a type (double Erf, bfloat16, int4 Shape, ...), inputs it cannot take (bfloat16
# and float8 arrays), an opset beyond the ones it implements. The reference evaluator runs
# the decomposed model then; any other refusal (an invalid graph) fails the check.
RUNTIME_LIMITS = ("NOT_IMPLEMENTED", "can't be converted to MLDataType", "Unsupported",
                  "is under development", "opset", "is not currently registered or supported")
# of those, a model above the opset or IR version onnxruntime loads: the decomposed model is
# converted down to them (onnx 1.23's reference evaluator runs no iteration of a Loop
# without a condition input, and stacks a Loop's scalar scan outputs as (n, 1))
CEILING_REFUSALS = ("Unsupported model IR version", "is under development",
                    "support for domain ai.onnx is till opset")


# onnxruntime's Python API refuses feeds of a type numpy lacks (float4e2m1...) and gives
# outputs of one as their bits (float8e4m3fn as uint8) or raises the second: the onnxruntime
# target feeds and reads them
_AS_BITS = ("can't be converted to MLDataType", "No corresponding Numpy type")


def _bits_returned(model: ModelProto, outputs: list[Any]) -> bool:
    """Whether an output came back as the bits of an ml_dtypes type the model declares
    (float8e4m3fn as uint8)."""
    for declared, value in zip(model.graph.output, outputs):
        elem = declared.type.tensor_type.elem_type
        want = np.dtype(helper.tensor_dtype_to_np_dtype(elem)) if elem else None
        if want is not None and want.kind == "V" and getattr(value, "dtype", want) != want:
            return True
    return False


@dataclass
class Decomposed:
    model: ModelProto
    outputs: list[list[Any]]  # per data set
    runtime: str  # "onnxruntime" or "reference evaluator"
    why_not_onnxruntime: str = ""  # onnxruntime's refusal, when the evaluator ran it


def _nodes(model: ModelProto) -> Iterator:
    from rewriter.graph.walk import iter_nodes

    for site in iter_nodes(model):
        yield site.domain, site.node


def _alone(plugins: Plugins, entry) -> Plugins:
    """``plugins`` without other plugins' decompositions of ``entry``'s op: the one under
    check is the one the engine applies (another plugin's may come first)."""
    import dataclasses

    others = [d for d in plugins.registry.decompositions if d.plugin != entry.plugin
              and (d.domain, d.op_type) == (entry.domain, entry.op_type)]
    if not others:
        return plugins
    registry = dataclasses.replace(plugins.registry, decompositions=[
        d for d in plugins.registry.decompositions if d not in others])
    return dataclasses.replace(plugins, registry=registry)


CHECKED = "checked"  # the sample's node (a body keeping the op names its nodes otherwise)


def decompose(check: Check, plugins: Plugins) -> Decomposed:
    """Rewrite the model for a target lacking the op (the decomposition must be what the
    engine applies) and run the result."""
    from rewriter.api import rewrite

    entry = check.entry
    op = str(OpId(entry.domain, entry.op_type))
    from rewriter.errors import UnfixableError

    typed = False
    plugins = _alone(plugins, entry)
    made = ""  # the value the checked node makes, when only that node is lacking
    try:
        result = rewrite(check.model, [f"{LACKING}:{op}"], plugins=plugins, confirm=False,
                         verify=False)
    except UnfixableError:
        if entry.keeps_op:  # a body keeping the op (in a safe form, or another layout):
            # that node alone lacks it
            made = next(o for o in check.model.graph.node[0].output if o)
            result = rewrite(check.model, [f"{LACKING}:{op}->{made}"], plugins=plugins,
                             confirm=False, verify=False)
        elif not check.dtype:
            raise
        else:
            # a remedy computing the op in a wider type keeps the op: lacking at this type
            typed = True
            result = rewrite(check.model, [f"{LACKING}:{op}@{check.dtype}"], plugins=plugins,
                             confirm=False, verify=False)
    applied = {(kind, plugin) for (kind, plugin, _rule, label_), _n in
               result.report.applied.items() if label_.startswith(op + "(") or label_ == op}
    if ("decomposition", entry.plugin) not in applied:
        raise AssertionError(f"{check.label}: the rewrite applied {sorted(applied)}, not the "
                             f"decomposition of plugin {entry.plugin!r}")
    model = result.model
    left = [n.name or n.op_type for d, n in _nodes(model)
            if d == entry.domain and n.op_type == entry.op_type
            and (not made or n.name == CHECKED)] if not typed else [
        f.node_name or f.op_type for f in result.report.remaining]
    if left:
        raise AssertionError(f"{check.label}: {op} nodes remain after the rewrite: {left}")
    untyped = ModelProto()
    untyped.CopyFrom(model)
    for output in untyped.graph.output:  # the body's own types, not the declared ones
        output.ClearField("type")
    bits = False
    try:
        session = _ort_session(untyped, optimize=False)
        outputs = [session.run(None, f) for f in check.feeds]
        bits = any(_bits_returned(model, o) for o in outputs)
        if not bits:
            return Decomposed(model, outputs, "onnxruntime")
        refusal = "an output came back as its bits"
    except Exception as e:  # noqa: BLE001 - sorted below
        refusal = (str(e).strip().splitlines() or [type(e).__name__])[0]
    if bits or any(reason in refusal for reason in _AS_BITS):  # as the target feeds them
        try:                                                   # and reads them
            from rewriter.detect.targets import resolve_targets

            (ort_target,) = resolve_targets(plugins, ["onnxruntime"])
            run = ort_target.prepare(untyped, None)
            return Decomposed(model, [list(run(f).values()) for f in check.feeds],
                              "onnxruntime")
        except Exception as e:  # noqa: BLE001 - the reference evaluator then
            refusal += f"; as the onnxruntime target feeds it: {e}"
    if not any(reason in refusal for reason in RUNTIME_LIMITS):
        raise AssertionError(f"{check.label}: onnxruntime refuses the decomposed model: "
                             f"{refusal}")
    if any(reason in refusal for reason in CEILING_REFUSALS):
        lowered = _under_onnxruntime_ceilings(model, plugins, refusal)
        if lowered is not None:
            lowered_model, how = lowered
            for output in lowered_model.graph.output:
                output.ClearField("type")
            try:
                session = _ort_session(lowered_model, optimize=False)
                return Decomposed(model, [session.run(None, f) for f in check.feeds],
                                  f"onnxruntime ({how})", refusal)
            except Exception as e:  # noqa: BLE001 - the reference evaluator then
                refusal += f"; converted ({how}): {(str(e).strip().splitlines() or [''])[0]}"
    from onnx.reference import ReferenceEvaluator

    evaluator = ReferenceEvaluator(model)
    return Decomposed(model, [list(evaluator.run(None, f)) for f in check.feeds],
                      "reference evaluator", refusal)


def _under_onnxruntime_ceilings(model: ModelProto, plugins: Plugins,
                                refusal: str = "") -> tuple[ModelProto, str] | None:
    """``model`` converted down to the installed onnxruntime's opset and IR version (the
    engine's own conversion, as ``rewrite --target onnxruntime`` does; below the opset its
    ``refusal`` names as officially supported, where it has schemas of a newer one), and
    what changed; None when it cannot be."""
    import re

    from rewriter.api import rewrite

    targets = ["onnxruntime"]
    official = re.search(r"support for domain ai\.onnx is till opset (\d+)", refusal)
    if official:
        targets.append(f"opset:{official.group(1)}")
    try:
        result = rewrite(model, targets, plugins=plugins, confirm=False, verify=False)
    except Exception:  # noqa: BLE001 - not convertible: the reference evaluator runs it
        return None
    if result.model is None:
        return None
    before = (_domain_version(model, ""), model.ir_version)
    after = (_domain_version(result.model, ""), result.model.ir_version)
    return result.model, (f"converted from opset {before[0]}, IR {before[1]} to its opset "
                          f"{after[0]}, IR {after[1]}")


# -- comparing -------------------------------------------------------------------------------


def _dtype_name(value: Any) -> str:
    if isinstance(value, list):
        return "sequence(" + ", ".join(sorted({_dtype_name(v) for v in value})) + ")"
    return np.asarray(value).dtype.name


def _tolerance(check: Check, dtype: np.dtype) -> tuple[float, float]:
    base = TOLERANCE.get({"float32": "float", "float64": "double"}.get(dtype.name, dtype.name),
                         (0.0, 0.0))
    if check.tolerance is not None:
        return max(base[0], check.tolerance[0]), max(base[1], check.tolerance[1])
    return base


def _floating(dtype: np.dtype) -> bool:
    return dtype.kind in "fc" or dtype.name == "bfloat16" or dtype.name.startswith("float8")


def differences(check: Check, expected: Sequence[Any], got: Sequence[Any],
                where: str = "", scaled: bool = False) -> list[str]:
    """Every disagreement between the oracle's outputs and the decomposition's. ``scaled``
    (a set of the edges or another regime, of magnitudes from tiny to large): the absolute
    tolerance grows by a few units of the type's precision times the output's largest
    magnitude, as :class:`rewriter.comparison.compare.Tolerance`'s ``scale`` does (an
    element near zero computed from terms of 1e4 keeps their rounding)."""
    problems = []
    if len(expected) != len(got):
        return [f"{where}{len(got)} outputs, the oracle gives {len(expected)}"]
    for i, (e, g) in enumerate(zip(expected, got)):
        name = f"{where}output {i}"
        if isinstance(e, list) or isinstance(g, list):
            if not (isinstance(e, list) and isinstance(g, list)) or len(e) != len(g):
                problems.append(f"{name}: sequence mismatch")
                continue
            problems += differences(check, e, g, f"{name} item ", scaled)
            continue
        e, g = np.asarray(e), np.asarray(g)
        if e.dtype != g.dtype:
            problems.append(f"{name}: dtype {g.dtype.name}, the oracle gives {e.dtype.name}")
        if e.shape != g.shape:
            problems.append(f"{name}: shape {g.shape}, the oracle gives {e.shape}")
            continue
        if _floating(e.dtype) or _floating(g.dtype):  # bfloat16's kind is "V"
            rtol, atol = _tolerance(check, e.dtype if _floating(e.dtype) else g.dtype)
            e64, g64 = e.astype(np.float64), g.astype(np.float64)
            finite = e64[np.isfinite(e64)]
            if scaled and finite.size:
                from rewriter.comparison.compare import default_tolerance

                # a sample's own rtol (its oracle's precision: the reference evaluator
                # places GridSample's points in float32) scales with the output too
                scale = max(default_tolerance(e.dtype if _floating(e.dtype) else g.dtype
                                              ).scale,
                            check.tolerance[0] if check.tolerance is not None else 0.0)
                atol += scale * float(np.abs(finite).max())
            close = np.isclose(g64, e64, rtol=rtol, atol=atol, equal_nan=True)
            if not close.all():
                err = np.abs(np.where(close, 0, g64 - e64))
                problems.append(f"{name}: {int((~close).sum())} of {close.size} values differ"
                                f" (max abs error {np.nanmax(err):.3g}, rtol {rtol}, "
                                f"atol {atol})")
        elif not np.array_equal(e, g):
            problems.append(f"{name}: {int((e != g).sum())} of {e.size} values differ")
    return problems


def kernel_signature(check: Check, registry: Registry):
    """The signature of the op's Python kernel for the sample's input types: ``(kernel
    entry, Signature)``, or None (no kernel, or none of its signatures takes these)."""
    from rewriter.plan.kernels import load_kernel

    entry = registry.kernels.get((check.entry.domain, check.entry.op_type))
    if entry is None:
        return None
    node = check.model.graph.node[0]
    types = {i.name: i.type.tensor_type.elem_type for i in check.model.graph.input}
    types.update({i.name: i.data_type for i in check.model.graph.initializer})
    inputs = [helper.tensor_dtype_to_string(types[n]).lower().replace("tensorproto.", "")
              for n in node.input if n and n in types]
    signature = load_kernel(entry, registry).match(inputs)
    return None if signature is None else (entry, signature)


def kernel_type_problems(check: Check, registry: Registry, got: Sequence[Any]) -> list[str]:
    """The op's Python kernel, where one is registered, must declare the output types the
    decomposition gives (for the signature of these input types)."""
    found = kernel_signature(check, registry)
    if found is None:
        return []
    entry, signature = found
    have = [_dtype_name(g) for g in got]
    want = [{"float": "float32", "double": "float64", "string": "object"}.get(t, t)
            for t in signature.outputs[:len(have)]]
    if have != want:
        return [f"the kernel {entry.reference} declares outputs ({', '.join(want)}), the "
                f"decomposition gives ({', '.join(have)})"]
    return []


def _set_label(check: Check, i: int, count: int) -> str:
    regime = check.labels[i] if i < len(check.labels) else TYPICAL
    if regime != TYPICAL:
        return f"data set {i} ({regime}): "
    return f"data set {i}: " if count > 1 else ""


def set_differences(check: Check, expected: Sequence[Sequence[Any]],
                    got: Sequence[Sequence[Any]]) -> list[str]:
    """:func:`differences` on every data set of ``check``, each named (with its regime),
    a regime's set compared with its magnitude-scaled tolerance."""
    problems = []
    for i, (e, g) in enumerate(zip(expected, got)):
        regime = check.labels[i] if i < len(check.labels) else TYPICAL
        problems += differences(check, e, g, _set_label(check, i, len(expected)),
                                scaled=regime != TYPICAL)
    return problems


def check_one(check: Check, plugins: Plugins) -> list[str]:
    """Run the oracle and the decomposition on ``check``; every disagreement, as text."""
    registry = plugins.registry
    expected = run_oracle(check, registry)
    decomposed = decompose(check, plugins)
    problems = set_differences(check, expected, decomposed.outputs)
    for i, g in enumerate(decomposed.outputs):
        where = _set_label(check, i, len(expected))
        have = [_dtype_name(v) for v in g]
        for j, (d, h) in enumerate(zip(check.declared, have)):
            if d is not None and d != h:
                problems.append(f"{where}output {j}: dtype {h}, the op declares {d}")
    problems += kernel_type_problems(check, registry, decomposed.outputs[0])
    if problems:
        problems.append(f"(the decomposed model ran on {decomposed.runtime})")
    return list(dict.fromkeys(problems))


def kernels_never_type_checked(registry: Registry,
                                plugins: Sequence[str] | None = None) -> list[str]:
    """Ops with a decomposition (of ``plugins``) and a Python kernel where no sample's input
    types match a kernel signature, so the kernel's output types are never compared."""
    out = []
    for entry in registry.decompositions:
        if ((plugins is not None and entry.plugin not in plugins)
                or (entry.domain, entry.op_type) not in registry.kernels
                or entry.oracle == "spec"):
            continue
        if not any(kernel_signature(c, registry) for c in checks(entry)):
            out.append(f"{label(entry)}: no sample matches a signature of "
                       f"{registry.kernels[(entry.domain, entry.op_type)].reference}")
    return out


def without_oracle(registry: Registry, plugins: Sequence[str] | None = None) -> list[str]:
    """Registrations (of ``plugins``, default all) without an oracle or anything to check it
    on, one line each."""
    out = []
    for entry in registry.decompositions:
        if plugins is not None and entry.plugin not in plugins:
            continue
        if entry.oracle is None and not (entry.samples and all(x.oracle for x in entry.samples)):
            out.append(f"{label(entry)}: no oracle declared")
        elif entry.oracle == "spec" and not entry.samples:
            if not spec_checks(entry, limit=1):
                out.append(f"{label(entry)}: oracle 'spec' but no backend case of the op")
        elif not sample_runs(entry):
            out.append(f"{label(entry)}: oracle {entry.oracle!r} but no sample in its opsets "
                       "and dtypes")
    return out


# -- for plugin authors: one-node models, runs on every runtime, the contract test -----------

RUNTIMES = ("onnxruntime", "reference", "openvino")  # the runtimes a rewrite is run on


def value_info(name: str, elem: int | str = TensorProto.FLOAT,
               shape: Sequence[int | str | None] | None = None) -> ValueInfoProto:
    """A tensor's declaration: ``value_info("x", "float", [2, 3])`` (or ``TensorProto.FLOAT``;
    default float, shape unknown)."""
    if isinstance(elem, str):
        elem = _elem(elem, None)
    return helper.make_tensor_value_info(name, elem, shape)


def make_model(nodes: Sequence[NodeProto], inputs: Sequence[ValueInfoProto],
               outputs: Sequence[ValueInfoProto], *, opset: int | None = 18,
               domains: Mapping[str, int] | Sequence[str] = (),
               initializers: Sequence[TensorProto] = (),
               ir_version: int | None = None) -> ModelProto:
    """A model of ``nodes`` importing ai.onnx ``opset`` (None: no ai.onnx import),
    ``domains`` (at version 1 when given as names) and every other domain its nodes use (at
    1); ``ir_version`` default: the lowest that opset allows, at least 8."""
    versions = dict(domains) if isinstance(domains, Mapping) else dict.fromkeys(domains, 1)
    for node in nodes:
        if normalize_domain(node.domain):
            versions.setdefault(node.domain, 1)
    graph = helper.make_graph(list(nodes), "g", list(inputs), list(outputs),
                              initializer=list(initializers))
    imports = [helper.make_opsetid("", opset)] if opset is not None else []
    imports += [helper.make_opsetid(d, v) for d, v in versions.items()]
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = (ir_version if ir_version is not None
                        else max(8, _ir_version(opset or MIN_OPSET)))
    return model


def one_node_model(op_type: str, inputs: Sequence[ValueInfoProto | None],
                   outputs: Sequence[ValueInfoProto], *, domain: str = "", opset: int = 18,
                   attributes: Mapping[str, Any] | None = None, **kwargs: Any) -> ModelProto:
    """A model of one ``domain::op_type`` node reading ``inputs`` (None: an optional input
    left empty) and giving ``outputs``; ``kwargs`` as :func:`make_model`."""
    node = helper.make_node(op_type, [i.name if i is not None else "" for i in inputs],
                            [o.name for o in outputs], domain=domain, name=op_type.lower(),
                            **dict(attributes or {}))
    return make_model([node], [i for i in inputs if i is not None], outputs, opset=opset,
                      **kwargs)


def installed_runtimes(plugins: Plugins | None = None) -> list[str]:
    """The runtimes of :data:`RUNTIMES` that are installed (targets that load)."""
    from rewriter.comparison.oracles import _openvino_installed

    return [r for r in RUNTIMES if r != "openvino" or _openvino_installed()]


@functools.cache
def _builtins() -> Plugins:
    from rewriter.manager import load_plugins

    return load_plugins(autoload=False)


def run_on(runtime: str, model: ModelProto, feeds: Mapping[str, Any],
           plugins: Plugins | None = None) -> list[Any]:
    """``model``'s outputs (in order) run in this process by the target ``runtime``
    (``onnxruntime``, ``reference``, ``openvino``, or any target that runs models) of
    ``plugins`` (default: the built-ins)."""
    from rewriter.detect.targets import resolve_targets

    (target,) = resolve_targets(plugins or _builtins(), [runtime])
    out = target.run(model, None, dict(feeds))
    return [out[o.name] for o in model.graph.output]


def run_onnxruntime(model: ModelProto, feeds: Mapping[str, Any]) -> list[Any]:
    """``model``'s outputs from a plain onnxruntime CPU session (all its optimizations),
    as a user's session gives them."""
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, dict(feeds))


def rewrite_fully(model: ModelProto, targets: str | Sequence[str] = "onnxruntime",
                  plugins: Plugins | None = None, *, verify: bool = False, **kwargs: Any):
    """:func:`rewriter.rewrite` of ``model`` for ``targets`` (no confirmation; verified only
    with ``verify``; ``kwargs`` as it takes them), asserting nothing is left unfixed; the
    result (``.model``, ``.report``)."""
    from rewriter.api import rewrite

    targets = [targets] if isinstance(targets, str) else list(targets)
    result = rewrite(model, targets, plugins=plugins, confirm=False, verify=verify, **kwargs)
    assert not result.report.remaining, [f.as_dict() for f in result.report.remaining]
    return result


def rewritten(model: ModelProto, targets: str | Sequence[str] = "onnxruntime",
              plugins: Plugins | None = None, *, standard_only: bool = False,
              verify: bool = False, **kwargs: Any) -> ModelProto:
    """The model :func:`rewrite_fully` gives; with ``standard_only`` asserting only ai.onnx
    nodes remain (in subgraphs too)."""
    from rewriter.graph.walk import iter_nodes

    result = rewrite_fully(model, targets, plugins, verify=verify, **kwargs)
    if standard_only:
        left = {str(OpId(s.domain, s.node.op_type)) for s in iter_nodes(result.model)
                if s.domain}
        assert not left, f"non-standard ops remain: {sorted(left)}"
    return result.model


def assert_close(expected: Sequence[Any], got: Sequence[Any], rtol: float = 1e-4,
                 atol: float = 1e-5, where: str = "") -> None:
    """Same number of outputs, each of the same dtype and shape and close in value (exactly
    equal for integers and bool)."""
    assert len(expected) == len(got), f"{where}{len(got)} outputs, expected {len(expected)}"
    for i, (e, g) in enumerate(zip(expected, got)):
        e, g = np.asarray(e), np.asarray(g)
        name = f"{where}output {i}"
        assert e.dtype == g.dtype, f"{name}: dtype {g.dtype}, expected {e.dtype}"
        assert e.shape == g.shape, f"{name}: shape {g.shape}, expected {e.shape}"
        if e.dtype.kind in "fc":
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, equal_nan=True,
                                       err_msg=name)
        else:
            np.testing.assert_array_equal(g, e, err_msg=name)


def assert_rewrite_runs_everywhere(original: ModelProto, rewritten_model: ModelProto,
                                   feeds: Mapping[str, Any], expected: Sequence[Any] | None = None,
                                   runtimes: Sequence[str] | None = None,
                                   plugins: Plugins | None = None, **tolerance: float
                                   ) -> dict[str, list[Any]]:
    """Run ``rewritten_model`` on every installed runtime (or ``runtimes``) and compare each
    result with ``expected`` (default: the original run by the first runtime of
    :data:`RUNTIMES` that runs it). Returns the outputs by runtime."""
    runtimes = list(runtimes or installed_runtimes(plugins))
    if expected is None:
        refusals = []
        for runtime in RUNTIMES:
            try:
                expected = run_on(runtime, original, feeds, plugins)
                break
            except Exception as e:  # noqa: BLE001 - a runtime that lacks the op: the next
                refusals.append(f"{runtime}: {(str(e).strip().splitlines() or [''])[0]}")
        assert expected is not None, "no runtime runs the original: " + "; ".join(refusals)
    got = {}
    for runtime in runtimes:
        got[runtime] = run_on(runtime, rewritten_model, feeds, plugins)
        assert_close(expected, got[runtime], where=f"{runtime}: ", **tolerance)
    return got


@dataclass
class PluginCheck:
    """What :func:`check_plugin` checked, for a test to assert on."""

    plugin: str
    checked: list[str] = field(default_factory=list)  # every check's label, in order
    problems: list[str] = field(default_factory=list)


def plugin_problems(plugin: str) -> PluginCheck:
    """The contract test of a plugin (a module name, an entry-point name or a .py file, as
    ``-p`` takes it), without raising: it loads (with the built-ins only); every
    decomposition it registers declares an oracle and agrees with it on each of its samples
    at each dtype and opset (:func:`check_one`); where it also registers the op's Python
    kernel, the kernel's declared output types are the decomposition's on some sample; every
    kernel it registers loads."""
    from rewriter.errors import RewriterError
    from rewriter.manager import _entry_points, _spec_name
    from rewriter.plan.kernels import load_kernel

    entry_names = {ep.name for ep in _entry_points()}
    name = plugin if plugin in entry_names else _spec_name(plugin)
    result = PluginCheck(name)
    try:
        plugins = oracle_plugins([plugin])
    except RewriterError as e:
        result.problems.append(f"does not load: {e}")
        return result
    registry = plugins.registry
    if name not in registry.plugins:
        result.problems.append(f"no plugin {name!r} was loaded from {plugin!r}")
        return result
    result.problems += without_oracle(registry, [name])
    result.problems += kernels_never_type_checked(registry, [name])
    for entry in registry.decompositions:
        if entry.plugin != name or entry.oracle is None and not entry.samples:
            continue
        for check in checks(entry):
            if needs_newer_onnxruntime(check):  # the installed one cannot decide it
                continue
            result.checked.append(check.label)
            try:
                result.problems += [f"{check.label}: {p}" for p in check_one(check, plugins)]
            except AssertionError as e:
                result.problems.append(str(e))
    for (domain, op_type), entry in registry.kernels.items():
        if entry.plugin != name:
            continue
        result.checked.append(f"{name}:kernel {OpId(domain, op_type)}")
        try:
            load_kernel(entry, registry)
        except RewriterError as e:
            result.problems.append(f"kernel {OpId(domain, op_type)}: {e}")
    return result


def check_plugin(plugin: str) -> PluginCheck:
    """Assert the plugin keeps the API's contract (:func:`plugin_problems`), for any
    plugin's own test suite::

        def test_contract():
            rewriter.testing.check_plugin("acme_onnx_ops")

    Raises AssertionError listing every problem; returns what was checked."""
    result = plugin_problems(plugin)
    assert not result.problems, (f"plugin {result.plugin!r} breaks the contract:\n"
                                 + "\n".join(result.problems))
    assert result.checked, f"plugin {result.plugin!r} registers nothing to check"
    return result
