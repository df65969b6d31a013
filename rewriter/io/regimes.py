"""Input regimes: the input sets a verification runs, chosen per input from its type and use.

One random draw of small values proves little: a decomposition exact on integers in [0, 3)
may be wrong above 2^31, a boolean scalar drawn False may hide the branch that differs, a
symbolic dimension at 3 may hide one that breaks at 1. Each regime is named and holds one or
more input sets; a verdict names the regime and set that broke it.

=================  ========================================================================
regime             inputs
=================  ========================================================================
``typical``        ``runs`` seeded draws (:func:`~rewriter.io.inputs.generate_inputs`):
                   floats in [-3, 3], integers in [0, 3), operators' domains kept
``edges``          inputs read as data at their type's edges: integers over the full range
                   with 0, ±1, min and max (unsigned ones with the high bit set), floats with
                   negatives, zeros, large and tiny magnitudes; inputs read as indices,
                   axes, shapes, counts, ... (:data:`INDEX_INPUTS`) keep their typical values,
                   shift counts span the type's width (:data:`SHIFT_INPUTS`), and an input
                   an operator needs positive or in (-1, 1) stays there
``booleans``       every boolean scalar input True, then False (the typical set otherwise)
``dims=1``,        every symbolic dimension not given with ``--dim`` at 1, then at
``dims=5``         :data:`LARGE_DIM` (a KV-cache past length too, with as many new tokens)
``past=0``         where an input has a past (KV-cache) length: an empty past
``special-values`` NaN, +inf and -inf among the float data inputs; only outputs whose every
                   op defines its result on them (:data:`SPECIAL_SAFE_OPS`) are compared
``test-data``      the ONNX test data shipped next to the model file (``test_data_set_*``
                   beside it, or in a folder named after it); their outputs, where given,
                   are checked against the oracle too
=================  ========================================================================

``quick`` keeps the typical regime alone (the single run of earlier versions).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from onnx import ModelProto, TensorProto

from rewriter.errors import RewriterError
from rewriter.io import inputs as _inputs
from rewriter.io.inputs import (
    _ABOVE_ONE,
    _NEW_TOKENS,
    _PASS_THROUGH,
    _POSITIVE,
    _REDUCE_OPS,
    _UNIT,
    DEFAULT_DIM,
    generate_inputs,
    input_specs,
    reached_positions,
    symbolic_dims,
    value_ranges,
)

LARGE_DIM = 5
TYPICAL, EDGES, BOOLEANS, SPECIAL, TEST_DATA = (
    "typical", "edges", "booleans", "special-values", "test-data")
GIVEN = "given"

# (tiny, large) magnitudes of the edges regime per float type: normal numbers (no
# subnormals, which runtimes may flush to zero) whose square stays finite; float16's large
# is 16, so that a dot product of a few hundred of its squares stays below 65504 too (how
# wide a runtime accumulates float16 is no specification's: a fused kernel's float32 sum and
# a float16 MatMul differ only once one overflows)
MAGNITUDES = {"float64": (1e-12, 1e8), "float32": (1e-6, 1e4), "float16": (1e-3, 16.0),
              "bfloat16": (1e-6, 1e4), "complex64": (1e-6, 1e4), "complex128": (1e-12, 1e8)}

# ai.onnx inputs read as indices, axes, shapes, counts, sizes, pads, repeats, k, split
# sizes, sequence positions, probabilities, conditions, ...: kept at typical values
INDEX_INPUTS: dict[str, tuple[int, ...]] = {
    "Gather": (1,), "GatherElements": (1,), "GatherND": (1,), "Scatter": (1,),
    "ScatterElements": (1,), "ScatterND": (1,), "TensorScatter": (2,),
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "Slice": (1, 2, 3, 4), "Squeeze": (1,),
    "Unsqueeze": (1,), "Pad": (1, 3), "Split": (1,), "TopK": (1,), "OneHot": (0, 1),
    "ConstantOfShape": (0,), "Range": (0, 1, 2), "CumSum": (1,), "CumProd": (1,),
    "Trilu": (1,), "Compress": (1,), "Resize": (1, 2, 3), "Upsample": (1,),
    "ReverseSequence": (1,), "Loop": (0, 1), "If": (0,), "NonMaxSuppression": (2, 3, 4),
    "RoiAlign": (1, 2), "MaxRoiPool": (1,), "MaxUnpool": (1, 2), "SequenceAt": (1,),
    "SequenceInsert": (2,), "SequenceErase": (1,), "SplitToSequence": (1,),
    "CenterCropPad": (1,), "DFT": (1, 2), "STFT": (1, 3), "Col2Im": (1, 2),
    "BlackmanWindow": (0,), "HannWindow": (0,), "HammingWindow": (0,), "Bernoulli": (0,),
    "MelWeightMatrix": (0, 1, 2, 3, 4),
    "Dropout": (1, 2), "Pow": (1,), "AffineGrid": (1,), "GridSample": (1,),
    "RotaryEmbedding": (3,), "Attention": (6,), "ImageDecoder": (0,), "DeformConv": (2, 4),
    "QuantizeLinear": (1, 2), "DequantizeLinear": (1, 2), "MatMulInteger": (2, 3),
    "ConvInteger": (2, 3), "QLinearMatMul": (1, 2, 4, 5, 6, 7),
    "QLinearConv": (1, 2, 4, 5, 6, 7), "SoftmaxCrossEntropyLoss": (1,),
    "NegativeLogLikelihoodLoss": (1,), "Where": (0,),
    **{op: (1,) for op in _REDUCE_OPS},
}
# ai.onnx inputs read as a shift count: in the edges regime, counts over the whole width of
# the shifted type (0, 1, width - 1 and between: a runtime that shifts in floating point is
# exact on the small counts and values of a typical draw)
SHIFT_INPUTS: dict[str, tuple[int, ...]] = {"BitShift": (1,)}
# ai.onnx ops that multiply or accumulate integers: the result of an overflow is not the
# specification's (runtimes wrap, saturate or accumulate wider), so an integer they read gets
# edges bounded to keep products and sums of its elements in range
OVERFLOWING_OPS = frozenset({
    "Mul", "Pow", "MatMul", "Gemm", "Einsum", "Conv", "ConvInteger", "MatMulInteger",
    "QLinearMatMul", "QLinearConv", "CumSum", "CumProd", "ReduceSum", "ReduceProd",
    "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceMean", "ReduceLogSum",
    "ReduceLogSumExp"})
# of those, the ones that multiply all of an input's elements together
PRODUCT_OPS = frozenset({"Pow", "CumProd", "ReduceProd"})
DATA, BOUNDED, PRODUCT, INDEX, SHIFT = "data", "bounded", "product", "index", "shift"
# ai.onnx ops whose bodies read their inputs under other names: what they do with an
# integer is not known here, so it keeps its typical values
OPAQUE_OPS = frozenset({"Loop", "Scan", "If", "SequenceMap"})
# ops whose result on NaN and ±inf their specification defines (IEEE 754 arithmetic,
# comparisons, selection and data movement), for the special-values regime; anything else
# on an output's path (Exp, Max, Relu, reductions, contrib ops...) leaves it uncompared there.
# Cast and CastLike count only to a float type, Mod under its opset-28 special cases.
SPECIAL_SAFE_OPS = frozenset({
    "Identity", "Add", "Sub", "Mul", "Div", "Neg", "Abs", "Sqrt", "Reciprocal", "Floor",
    "Ceil", "Mod", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "IsNaN",
    "IsInf", "Not", "And", "Or", "Xor", "Where", "Cast", "CastLike", "Reshape", "Transpose",
    "Flatten", "Squeeze", "Unsqueeze", "Expand", "Slice", "Gather", "GatherElements",
    "GatherND", "Concat", "Split", "Tile", "DepthToSpace", "SpaceToDepth", "Shape", "Size",
    "Constant", "ConstantOfShape", "Pad"})
_FLOAT_ELEMS = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16,
                          TensorProto.BFLOAT16})
# what a Cast of NaN and infinities gives is defined to these (the float 8 ones by the
# spec's table: NaN, or the largest value with saturate)
_SPECIAL_CAST_TARGETS = _FLOAT_ELEMS | {TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ,
                                        TensorProto.FLOAT8E5M2, TensorProto.FLOAT8E5M2FNUZ}


@dataclass
class Regime:
    """A named kind of inputs and its sets, or why it did not run (``skipped``)."""

    name: str
    description: str
    sets: list[dict[str, Any]] = field(default_factory=list)
    # the outputs compared on these sets (None: every output), and why the others are not
    compared: frozenset[str] | None = None
    not_compared: dict[str, str] = field(default_factory=dict)
    expected: list[dict[str, Any]] | None = None  # outputs shipped with test data
    skipped: str = ""
    note: str = ""  # what the run found besides the verdict (test data's own outputs)

    @property
    def ran(self) -> bool:
        return not self.skipped and bool(self.sets)

    def as_dict(self, first: int | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "description": self.description,
                               "sets": len(self.sets) if not self.skipped else 0,
                               "status": "skipped" if self.skipped else "ran",
                               "reason": self.skipped or None, "first_set": first}
        if self.not_compared:
            out["not_compared"] = dict(self.not_compared)
        if self.note:
            out["note"] = self.note
        return out


# -- how each input is used --------------------------------------------------------------


def input_uses(models: Sequence[ModelProto]) -> dict[str, str]:
    """For each graph input how it is read: :data:`INDEX` (an index, axis, shape, count...),
    :data:`SHIFT` (a shift count: :data:`SHIFT_INPUTS`),
    :data:`BOUNDED` (an integer some op multiplies or accumulates: :data:`OVERFLOWING_OPS`),
    :data:`PRODUCT` (one whose elements are all multiplied: :data:`PRODUCT_OPS`) or
    :data:`DATA`; looked through the ops that carry its values (Cast, Reshape, Concat...,
    as :func:`~rewriter.io.inputs.value_ranges`; not through arithmetic: a decomposition
    computing a clamped index from data reads data). An integer that reaches an op of
    another domain or a body (If, Loop, a model-local function), whose use is unknown here,
    counts as an index."""
    declared = {s.name: s.type for m in models for s in input_specs(m)}
    local = {(f.domain, f.name) for m in models for f in m.functions}
    out = {name: DATA for name in declared}
    for name, domain, node, i in reached_positions(models, _PASS_THROUGH):
        integer = _elem(declared.get(name)) not in _FLOAT_ELEMS
        if domain == "" and i in INDEX_INPUTS.get(node.op_type, ()):
            out[name] = INDEX
        elif domain == "" and i in SHIFT_INPUTS.get(node.op_type, ()) and out[name] == DATA:
            out[name] = SHIFT
        elif integer and (domain != "" or node.op_type in OPAQUE_OPS
                          or (node.domain, node.op_type) in local):
            out[name] = INDEX
        elif integer and node.op_type in PRODUCT_OPS and out[name] in (DATA, BOUNDED):
            out[name] = PRODUCT
        elif integer and node.op_type in OVERFLOWING_OPS and out[name] == DATA:
            out[name] = BOUNDED
    return out


def data_inputs(models: Sequence[ModelProto]) -> dict[str, bool]:
    """For each graph input, whether it is read as data (:func:`input_uses` not INDEX)."""
    return {name: use != INDEX for name, use in input_uses(models).items()}


def _elem(tp) -> int:
    if tp is None:
        return 0
    kind = tp.WhichOneof("value")
    if kind in ("sequence_type", "optional_type"):
        return _elem(getattr(tp, kind).elem_type)
    return tp.tensor_type.elem_type if kind == "tensor_type" else 0


# -- the regimes --------------------------------------------------------------------------


def input_regimes(
    model: ModelProto,
    *,
    seed: int = 0,
    runs: int = 1,
    dims: Mapping[str, int] | None = None,
    also: Sequence[ModelProto] = (),
    quick: bool = False,
    path: str | Path | None = None,
    spec_model: ModelProto | None = None,
) -> list[Regime]:
    """The regimes of the module's table for ``model``'s inputs (``also``: more models
    whose operators inform the value ranges, e.g. the rewrite; ``spec_model``: the model
    whose operators decide which outputs the special-values regime compares, the original;
    ``path``: the model's file, beside which test data is looked for).

    The typical regime's errors are raised (bad ``dims``, inputs that cannot be
    generated); another regime that cannot be built is returned skipped, with why.

    Raises:
        InputError: the typical inputs cannot be generated.
    """
    models = [model, *also]
    ranges = value_ranges(models)
    typical = Regime(TYPICAL, f"{runs} random draw{'s' if runs > 1 else ''} "
                     f"(seed{'s' if runs > 1 else ''} "
                     f"{', '.join(str(seed + i) for i in range(runs))})",
                     [generate_inputs(model, seed=seed + i, dims=dims, also=also,
                                      ranges=ranges) for i in range(runs)])
    if quick:
        return [typical]
    base = typical.sets[0]
    uses = input_uses(models)
    rng = np.random.default_rng([seed, 27])
    out = [typical]
    out.append(_built(EDGES, "data inputs at their type's edges (full integer range with "
                      "0, ±1, min, max; floats with zeros, negatives, large and tiny "
                      "magnitudes); indices, shapes and counts typical",
                      lambda: [_edges(base, uses, ranges, rng, last)
                               for last in edge_orders(base, uses)]))
    scalars = _boolean_scalars(model, base)
    if scalars:
        out.append(_built(BOOLEANS, f"boolean scalar input{'s' if len(scalars) > 1 else ''} "
                          f"{', '.join(scalars)} True, then False",
                          lambda: _booleans(base, scalars)))
    out.extend(_dims_regimes(model, also, seed, dims or {}, ranges))
    out.append(_special(base, uses, spec_model if spec_model is not None else model, rng))
    if path is not None:
        found = _test_data(Path(path), model, also)
        if found is not None:
            out.append(found)
    return out


def _built(name: str, description: str, make) -> Regime:
    try:
        return Regime(name, description, make())
    except RewriterError as e:
        return Regime(name, description, skipped=f"its inputs cannot be built: {e}")


NAMED_EDGES = 7  # the most named edge values of a type (signed integers: 0, ±1, min, ...)


def edge_orders(base: Mapping[str, Any], uses: Mapping[str, str]) -> tuple[bool, ...]:
    """The edges regime's sets, as the ``last`` of :func:`edge_values`: one set where every
    data input holds all its named edges, a second (from the end of the list) where one is
    too small for them (a scalar, three elements)."""
    small = any(uses.get(name, DATA) != INDEX and (
        min((np.size(v) for v in value), default=NAMED_EDGES) if isinstance(value, list)
        else np.size(value)) < NAMED_EDGES for name, value in base.items())
    return (False, True) if small else (False,)


def _edges(base: dict[str, Any], uses: Mapping[str, str], ranges, rng,
           last: bool) -> dict[str, Any]:
    out = {}
    for name, value in base.items():
        use = uses.get(name, DATA)
        if use == INDEX or name.endswith(_inputs._MASK_NAMES):
            out[name] = value
        elif isinstance(value, list):
            out[name] = [edge_values(v, rng, ranges.get(name), last, bound_kind(use))
                         for v in value]
        else:
            out[name] = edge_values(value, rng, ranges.get(name), last, bound_kind(use))
    return out


def bound_kind(use: str) -> str | None:
    """How an input of this use is bounded in the edges regime (None: not)."""
    return {BOUNDED: "sum", PRODUCT: "product", SHIFT: "shift"}.get(use)


def edge_values(value: Any, rng: np.random.Generator,
                value_range: tuple[float, float] | None = None, last: bool = False,
                bounded: str | None = None) -> Any:
    """An array like ``value`` (same shape and type) at the edges of its type: integers over
    the full range with 0, ±1, min and max (unsigned: the high bit alone, and below it);
    floats of magnitudes from tiny to large with zeros, ±1 and both extremes. The named
    values come first, as many as the array holds (``last``: from the end of their list,
    so that two sets put all of them in a small array). ``value_range`` (what an operator
    needs: positive, in (-1, 1), above 1) is kept; other constrained inputs and other types
    are returned as they are. ``bounded``: integers some op multiplies and sums
    (``"sum"``: at most sqrt(max / size) in magnitude) or multiplies all together
    (``"product"``: at most max ** (1 / size)), so that no result overflows (the result of
    an overflow is no specification's); ``"shift"``: shift counts from 0 to the width - 1."""
    if not isinstance(value, np.ndarray) or value.size == 0:
        return value
    kind, name = value.dtype.kind, value.dtype.name
    if kind in "iu" and name not in ("int4", "uint4", "int2", "uint2"):
        info = np.iinfo(value.dtype)
        if bounded == "shift":  # counts within the type's width, from 0 to width - 1
            values = rng.integers(0, info.bits, size=value.shape, dtype=value.dtype)
            named = [info.bits - 1, 1, info.bits // 2, 0]
        elif bounded and value_range is None:
            top = max(1, int(np.sqrt(float(info.max) / value.size)) if bounded == "sum"
                      else int(float(info.max) ** (1.0 / value.size)))
            low = -top if kind == "i" else 0
            values = rng.integers(low, top, size=value.shape, endpoint=True, dtype=value.dtype)
            named = [0, 1, -1, top, -top] if kind == "i" else [0, 1, top]
        elif value_range is None:
            values = rng.integers(info.min, info.max, size=value.shape, endpoint=True,
                                  dtype=value.dtype)
            half = 1 << (info.bits - 1)
            named = [0, 1, -1, info.max, info.min, info.max - 1, info.min + 1] \
                if kind == "i" else [0, 1, info.max, info.max - 1, half, half - 1]
        elif value_range == _POSITIVE:  # a divisor: 1 up to the maximum, never 0
            top = float(info.max // 2)  # exactly representable well below the maximum
            values = np.exp(rng.uniform(0, np.log(top), size=value.shape))
            values = np.clip(np.floor(values), 1, top).astype(value.dtype)
            named = [1, info.max, 2]
        else:
            return value
        return _place(values, named[::-1] if last else named, rng)
    if name not in MAGNITUDES:
        return value
    tiny, large = MAGNITUDES[name]
    if kind == "c":
        real = edge_values(value.real.astype(np.float64), rng, value_range, last)
        imag = edge_values(value.imag.astype(np.float64), rng, value_range, not last)
        return (real + 1j * imag).astype(value.dtype)
    magnitude = np.exp(rng.uniform(np.log(tiny), np.log(large), size=value.shape))
    if value_range is None:
        values = magnitude * rng.choice([-1.0, 1.0], size=value.shape)
        named = [0.0, 1.0, -1.0, large, -large, tiny, -tiny]
    elif value_range == _POSITIVE:
        values, named = magnitude, [tiny, 1.0, large]
    elif value_range == _UNIT:
        values = rng.uniform(-0.999, 0.999, size=value.shape)
        named = [0.0, tiny, -tiny, 0.999, -0.999]
    elif value_range == _ABOVE_ONE:
        values, named = 1.0 + magnitude, [1.5, large]
    else:
        return value
    placed = _place(values, named[::-1] if last else named, rng)
    return placed.astype(np.float32).astype(value.dtype) if name == "bfloat16" \
        else placed.astype(value.dtype)


def _place(values: np.ndarray, named: list, rng) -> np.ndarray:
    """``values`` with ``named`` put at random positions (as many as fit)."""
    flat = values.reshape(-1).copy()
    positions = rng.permutation(flat.size)[:len(named)]
    flat[positions] = np.asarray(named[:len(positions)]).astype(flat.dtype)
    return flat.reshape(values.shape)


def _boolean_scalars(model: ModelProto, base: Mapping[str, Any]) -> list[str]:
    """Inputs that are one boolean (a flag such as Dropout's training_mode)."""
    return [s.name for s in input_specs(model)
            if isinstance(base.get(s.name), np.ndarray) and base[s.name].dtype == np.bool_
            and base[s.name].size == 1]


def _booleans(base: dict[str, Any], names: list[str]) -> list[dict[str, Any]]:
    return [{**base, **{n: np.full_like(base[n], flag) for n in names}}
            for flag in (True, False)]


# -- symbolic dimensions ------------------------------------------------------------------


def regime_dims(model: ModelProto, value: int, *, past: int | None = None,
                new: int | None = None, given: Mapping[str, int] | None = None
                ) -> dict[str, int]:
    """Every symbolic dimension of ``model``'s inputs at ``value``, with ``given`` ones as
    given; where an input has a past (KV-cache) length, that at ``past`` (default
    ``value``), the new tokens at ``new`` (default ``value``) and totals and sums
    (``past_sequence_length + 1``) computed from them."""
    given = dict(given or {})
    names = symbolic_dims([model])
    has_past = any("past" in n.lower() and "+" not in n for n in names)
    dims: dict[str, int] = {}
    for name in names:
        low = name.lower()
        if "+" in name or (has_past and "total" in low):
            continue
        if has_past and "past" in low:
            dims[name] = value if past is None else past
        elif has_past and low in _NEW_TOKENS:
            dims[name] = value if new is None else new
        else:
            dims[name] = value
    dims.update({k: v for k, v in given.items() if k in names})
    past_total = max((dims[n] for n in dims if has_past and "past" in n.lower()), default=0)
    new_total = max((dims[n] for n in dims if n.lower() in _NEW_TOKENS), default=value)
    for name in names:
        if name in given:
            continue
        if "+" in name:
            terms = [t.strip() for t in name.split("+")]
            dims[name] = sum(int(t) if t.isdigit() else dims.get(t, value) for t in terms)
        elif has_past and "total" in name.lower():
            dims[name] = past_total + new_total
    return dims


def _dims_regimes(model: ModelProto, also, seed: int, given: Mapping[str, int],
                  ranges) -> list[Regime]:
    names = symbolic_dims([model])
    free = sorted(names - set(given))
    if not free:
        return []
    has_past = any("past" in n.lower() and "+" not in n for n in free)
    out = []
    wanted = [("dims=1", 1, None, None), (f"dims={LARGE_DIM}", LARGE_DIM, None, None)]
    if has_past:
        wanted.append(("past=0", DEFAULT_DIM, 0, DEFAULT_DIM))
    for name, value, past, new in wanted:
        chosen = regime_dims(model, value, past=past, new=new, given=given)
        shown = ", ".join(f"{k}={v}" for k, v in sorted(chosen.items()) if k in free)
        out.append(_built(name, f"symbolic dimensions {shown}", lambda chosen=chosen: [
            generate_inputs(model, seed=seed, dims=chosen, also=also, ranges=ranges)]))
    return out


# -- special values -----------------------------------------------------------------------


def special_outputs(model: ModelProto) -> tuple[set[str], dict[str, str]]:
    """The main-graph outputs of ``model`` whose every op on the way from the inputs defines
    its result on NaN and ±inf (:data:`SPECIAL_SAFE_OPS`), and for the others the first op
    on their way that does not."""
    from onnx import helper

    from rewriter.graph.walk import normalize_domain

    producer = {out: node for node in model.graph.node for out in node.output if out}
    verdicts: dict[str, str] = {}  # value name -> "" (safe) or why not

    def unsafe(node) -> str:
        label = f"{node.op_type} {node.name!r}" if node.name else node.op_type
        if normalize_domain(node.domain) != "" or node.op_type not in SPECIAL_SAFE_OPS:
            return f"{label} does not define its result on NaN/inf"
        if any(a.type in (5, 10) for a in node.attribute):  # GRAPH, GRAPHS
            return f"{label} holds a subgraph"
        if node.op_type == "Cast":
            to = next((helper.get_attribute_value(a) for a in node.attribute
                       if a.name == "to"), 0)
            if to not in _SPECIAL_CAST_TARGETS:
                return f"{label} casts to a type where NaN/inf are undefined"
        return ""

    def why(value: str) -> str:
        stack = [value]
        while stack:  # iterative: deep graphs
            name = stack[-1]
            if name in verdicts:
                stack.pop()
                continue
            node = producer.get(name)
            if node is None:
                verdicts[name] = ""
                stack.pop()
                continue
            pending = [i for i in node.input if i and i not in verdicts]
            if pending:
                stack.extend(pending)
                continue
            own = unsafe(node)
            inherited = next((verdicts[i] for i in node.input if i and verdicts[i]), "")
            for out in node.output:
                if out:
                    verdicts[out] = own or inherited
            stack.pop()
        return verdicts[value]

    safe, not_safe = set(), {}
    for output in model.graph.output:
        reason = why(output.name)
        if reason:
            not_safe[output.name] = reason
        else:
            safe.add(output.name)
    return safe, not_safe


def _special(base: dict[str, Any], uses: Mapping[str, str], spec_model: ModelProto,
             rng) -> Regime:
    description = ("NaN, +inf and -inf among the float data inputs; compared only where "
                   "every op defines its result on them")
    floats = [n for n, v in base.items() if uses.get(n, DATA) != INDEX
              and isinstance(v, np.ndarray)
              and v.size and (v.dtype.kind == "f" or v.dtype.name == "bfloat16")]
    if not floats:
        return Regime(SPECIAL, description, skipped="no float input read as data")
    safe, not_safe = special_outputs(spec_model)
    if not safe:
        return Regime(SPECIAL, description, not_compared=not_safe, skipped=(
            "no output is defined on NaN/inf by every op on its way: "
            + "; ".join(f"{k}: {v}" for k, v in list(not_safe.items())[:3])))
    feeds = dict(base)
    for name in floats:
        feeds[name] = special_values(base[name], rng)
    return Regime(SPECIAL, description, [feeds], compared=frozenset(safe),
                  not_compared=not_safe)


def special_values(value: np.ndarray, rng) -> np.ndarray:
    """``value`` with NaN, +inf and -inf at random positions (each at least once where the
    array is large enough, about a quarter of it in all)."""
    flat = value.reshape(-1).astype(np.float64)
    count = max(min(3, flat.size), flat.size // 4)
    positions = rng.permutation(flat.size)[:count]
    chosen = np.resize(np.array([np.nan, np.inf, -np.inf]), count)
    flat[positions] = chosen
    cast = flat.astype(np.float32) if value.dtype.name == "bfloat16" else flat
    return cast.astype(value.dtype).reshape(value.shape)


# -- test data shipped with the model ------------------------------------------------------


def test_data_folders(path: Path) -> list[Path]:
    """``test_data_set_*`` folders beside the model file, else in a folder named after it
    (``model/test_data_set_0`` for ``model.onnx``)."""
    if not path.is_file():
        return []
    for folder in (path.parent, path.parent / path.stem):
        found = sorted(p for p in folder.glob("test_data_set_*") if p.is_dir()) \
            if folder.is_dir() else []
        if found:
            return found
    return []


def _test_data(path: Path, model: ModelProto, also) -> Regime | None:
    from rewriter.io.inputs import check_feeds, load_inputs, load_outputs

    folders = test_data_folders(path)
    if not folders:
        return None
    where = ", ".join(str(p) for p in folders[:3]) + (" ..." if len(folders) > 3 else "")
    regime = Regime(TEST_DATA, f"the test data beside the model ({where})")
    try:
        regime.sets = load_inputs([str(p) for p in folders], model)
        for i, feeds in enumerate(regime.sets):
            for m in (model, *also):
                check_feeds(feeds, m, f"test data set {i}")
        if all(any(p.glob("output_*.pb")) for p in folders):
            regime.expected = load_outputs([str(p) for p in folders], model)
    except RewriterError as e:
        regime.sets, regime.skipped = [], f"its inputs do not fit the model: {e}"
    return regime
