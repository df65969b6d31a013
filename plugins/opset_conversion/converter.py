"""Pass ``opset-conversion``: lower a model to the opset a target implements (``opset:N``).

onnx's own version converter drops model-local functions and has adapters for few of the
steps users need most (down to opset 13..17 for older runtimes and NPU SDKs). This pass
converts node by node instead, and only the nodes whose operator changed:

1. **same op, older version**: the node is valid for the older schema as it is (attributes,
   arity, input and output types, checked with onnx's own node inference), or becomes valid
   once attributes introduced later and set to their default are dropped (``Relu`` 14 -> 13,
   ``Cast(saturate=1)`` 19 -> 13, ``Reshape(allowzero=0)`` 14 -> 13, ...);
2. **hand-written adapters** (``ADAPTERS``) for versions that moved an attribute to an
   input (or back), changed meaning without changing signature (``SEMANTIC_BOUNDARIES``:
   the node is never kept as it is across those) or widened types: ``Reduce*`` axes,
   ``Squeeze``/``Unsqueeze`` axes, ``Split``, ``Pad``, ``Clip``, ``Slice``, ``TopK``,
   ``Resize``, ``Shape(start, end)``, ``GridSample`` modes, ``Softmax``'s axis, negative
   axes before 11, 8/16-bit integer arithmetic, signed ``BitShift``, ``Trilu``, ... Each
   lowers one version step and its output is converted again from there. An input that
   must become an attribute must be constant (an initializer or a ``Constant``, or folded
   from them and from static shapes); otherwise the node is declined unless an exact
   run-time form exists;
3. **the spec's function body** (``LayerNormalization`` 17 -> 13, ``Gelu`` 20 -> 17, ...),
   with its own nodes converted recursively.

See ``docs/opset-conversion.md`` for what is covered and measured.

Every converted node becomes a ``FunctionProto`` written for opset N; the node is pointed at
it, the ai.onnx (and ai.onnx.ml) imports of the model and of its local functions are set to
N, and onnx's inliner splices the bodies in (also inside If/Loop/Scan bodies and model-local
functions, which are kept). A node that cannot be converted is declined during planning, so
nothing changes.

Up-conversion (a target that needs a newer opset than the model imports) goes through
``onnx.version_converter`` when the model has no local functions (which it would drop).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache, lru_cache

import numpy as np
from onnx import (
    AttributeProto,
    FunctionProto,
    GraphProto,
    ModelProto,
    NodeProto,
    TensorProto,
    TypeProto,
    defs,
    helper,
    numpy_helper,
)

from rewriter.plugin import (
    REMEDY_DOMAIN,
    Finding,
    NodeQuery,
    PassContext,
    RewritePass,
    Target,
    forget_contradicted_constant_shapes,
    hookimpl,
    iter_scopes,
    normalize_domain,
    opset_map,
    outer_references,
    retarget,
    specialise,
    splice,
)

#: domains this pass converts (other domains are left alone)
CONVERTIBLE = ("", "ai.onnx.ml")
#: constants larger than this are never read to become attributes
MAX_CONSTANT_ELEMENTS = 256
MAX_DEPTH = 40
#: findings an older version of the op may remedy (a runtime without the newest kernel)
OLDER_VERSION_REASONS = ("no-kernel", "type-binding")
#: how many older versions of one op are tried
MAX_OLDER_STEPS = 8
INT64_MAX = np.iinfo(np.int64).max


class Decline(Exception):
    """This node cannot be converted; the message says why."""


# -- what is known about values ---------------------------------------------------------


class Env:
    """Types, shapes and constant values known while converting one node (and the nodes it
    expands to), and fresh names for new values."""

    def __init__(self, types: dict[str, TypeProto], constants: dict[str, np.ndarray],
                 prefix: str = "_oc") -> None:
        self.types = types
        self.constants = constants
        self._prefix = prefix
        self._count = 0
        self.to: dict[str, int] = {}  # the opsets the conversion ends at
        self.emit_opset = 0  # the ai.onnx opset an adapter's nodes must be valid at

    def fresh(self, hint: str = "v") -> str:
        self._count += 1
        return f"{self._prefix}{self._count}_{hint}"

    def const(self, name: str) -> np.ndarray | None:
        if not name:
            return None
        return self.constants.get(name)

    def type(self, name: str) -> TypeProto | None:
        t = self.types.get(name)
        return t if t is not None and t.WhichOneof("value") else None

    def elem_type(self, name: str) -> int | None:
        t = self.type(name)
        if t is None or t.WhichOneof("value") != "tensor_type":
            return None
        return t.tensor_type.elem_type or None

    def shape(self, name: str) -> list[int | None] | None:
        """Dimensions (None where unknown), or None when the rank is unknown."""
        value = self.const(name)
        if value is not None:
            return list(value.shape)
        t = self.type(name)
        if t is None or t.WhichOneof("value") != "tensor_type":
            return None
        if not t.tensor_type.HasField("shape"):
            return None
        return [d.dim_value if d.HasField("dim_value") else None for d in t.tensor_type.shape.dim]

    def rank(self, name: str) -> int | None:
        shape = self.shape(name)
        return None if shape is None else len(shape)

    def constant_node(self, value, hint: str = "c", dtype=None) -> tuple[str, NodeProto]:
        array = np.asarray(value, dtype=dtype)
        name = self.fresh(hint)
        node = helper.make_node("Constant", [], [name], value=numpy_helper.from_array(array))
        self.constants[name] = array
        self.types[name] = helper.make_tensor_type_proto(
            helper.np_dtype_to_tensor_dtype(array.dtype), list(array.shape))
        return name, node


def _attr(node: NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _set_attrs(node: NodeProto, drop=(), **values) -> NodeProto:
    """A copy of ``node`` without the attributes in ``drop``, with ``values`` set."""
    out = NodeProto()
    out.CopyFrom(node)
    names = set(drop) | set(values)
    kept = [a for a in out.attribute if a.name not in names]
    del out.attribute[:]
    out.attribute.extend(kept)
    for k, v in values.items():
        if v is not None:
            out.attribute.append(helper.make_attribute(k, v))
    return out


def _with_inputs(node: NodeProto, inputs) -> NodeProto:
    out = NodeProto()
    out.CopyFrom(node)
    inputs = list(inputs)
    while inputs and not inputs[-1]:
        inputs.pop()
    del out.input[:]
    out.input.extend(inputs)
    return out


def _input(node: NodeProto, i: int) -> str:
    return node.input[i] if i < len(node.input) else ""


def _has_graphs(node: NodeProto) -> bool:
    return any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute)


@lru_cache(maxsize=4096)
def _get_schema(domain: str, op_type: str, version: int):
    try:
        return defs.get_schema(op_type, version, domain)
    except defs.SchemaError:
        return None


def _constant_value(node: NodeProto) -> np.ndarray | None:
    for a in node.attribute:
        if a.ref_attr_name:
            return None
        if a.name == "value":
            if a.t.data_location == TensorProto.EXTERNAL:
                return None
            return numpy_helper.to_array(a.t)
        if a.name == "value_float":
            return np.array(a.f, dtype=np.float32)
        if a.name == "value_floats":
            return np.array(list(a.floats), dtype=np.float32)
        if a.name == "value_int":
            return np.array(a.i, dtype=np.int64)
        if a.name == "value_ints":
            return np.array(list(a.ints), dtype=np.int64)
    return None


def _dims(dims) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    line = lines[0] if lines else type(e).__name__
    return line.removeprefix("[ShapeInferenceError] ").strip()


# -- adapters ---------------------------------------------------------------------------

#: (domain, op_type, since_version) -> adapter(node, env) returning nodes valid at opset
#: ``since_version - 1`` (the step just below the version the adapter is for)
ADAPTERS: dict[tuple[str, str, int], Callable[[NodeProto, Env], list[NodeProto]]] = {}
#: versions at which an op changed meaning without changing its signature: the node is
#: never kept as it is across these, only an adapter (or the function body) lowers it
SEMANTIC_BOUNDARIES: dict[tuple[str, str], tuple[int, ...]] = {
    ("", "Softmax"): (13,),
    ("", "LogSoftmax"): (13,),
    ("", "Hardmax"): (13,),
    ("", "GridSample"): (20,),
    ("", "RoiAlign"): (16,),
    ("", "GroupNormalization"): (21,),
    ("", "Pad"): (19,),
    ("", "Resize"): (19,),
    ("", "ScatterElements"): (18,),
    ("", "ScatterND"): (18,),
    ("", "Range"): (27,),
    ("", "Mod"): (28,),
}
#: ops whose axis attributes accept negative values only from opset 11
NEGATIVE_AXES_11 = ("ArgMax", "ArgMin", "Compress", "Concat", "Flatten", "Hardmax",
                    "LogSoftmax", "Softmax", "Split", "Squeeze", "Unsqueeze", "ReduceL1",
                    "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
                    "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare")
for _op in NEGATIVE_AXES_11:
    SEMANTIC_BOUNDARIES[("", _op)] = tuple(sorted({11, *SEMANTIC_BOUNDARIES.get(("", _op), ())}))


def _adapter_versions(domain: str, op_type: str) -> list[int]:
    return sorted(v for (d, op, v) in ADAPTERS if d == domain and op == op_type)


#: ops with an adapter that reads the values of constant inputs (axes, pads, sizes, ...)
READS_CONSTANTS: set[tuple[str, str]] = set()


def adapter(op_types, since: int, domain: str = "", reads_constants: bool = False):
    """Register an adapter lowering ``op_types`` from version ``since`` one step down;
    ``reads_constants``: it looks at the values of constant inputs."""
    def register(fn):
        for op in ([op_types] if isinstance(op_types, str) else op_types):
            ADAPTERS[(domain, op, since)] = fn
            if reads_constants:
                READS_CONSTANTS.add((domain, op))
        return fn
    return register


def _need_const(node: NodeProto, env: Env, index: int, what: str) -> np.ndarray | None:
    name = _input(node, index)
    if not name:
        return None
    value = env.const(name)
    if value is None:
        raise Decline(f"its {what} input is computed at run time; the older "
                      f"{node.op_type} takes it as an attribute")
    return value


def _ints(value: np.ndarray) -> list[int]:
    return [int(v) for v in np.asarray(value).reshape(-1)]


REDUCE_18 = ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
             "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")


#: reductions that are ReduceSum (whose axes are an input from opset 13) of a function of
#: the input, followed by a function of the sum
_VIA_SUM = {
    "ReduceSumSquare": ("square", None),
    "ReduceL1": ("Abs", None),
    "ReduceL2": ("square", "Sqrt"),
    "ReduceLogSum": (None, "Log"),
    "ReduceLogSumExp": ("Exp", "Log"),
    "ReduceMean": (None, "mean"),
}


@adapter(REDUCE_18, 18, reads_constants=True)
@adapter("ReduceSum", 13, reads_constants=True)
def _reduce_axes_to_attribute(node: NodeProto, env: Env) -> list[NodeProto]:
    name = _input(node, 1)
    if name and env.const(name) is None:
        if node.op_type in _VIA_SUM:
            return _reduce_via_sum(node, env)
        return _reduce_axis_by_axis(node, env)
    axes = _need_const(node, env, 1, "axes")
    noop = _attr(node, "noop_with_empty_axes", 0)
    if axes is None or axes.size == 0:
        if noop:
            return [helper.make_node("Identity", [node.input[0]], [node.output[0]])]
        return [_with_inputs(_set_attrs(node, drop=["noop_with_empty_axes"]), node.input[:1])]
    return [_with_inputs(_set_attrs(node, drop=["noop_with_empty_axes"], axes=_ints(axes)),
                         node.input[:1])]


def _reduce_axis_by_axis(node: NodeProto, env: Env) -> list[NodeProto]:
    """Axes computed at run time, for a reduction without a ReduceSum form: reduce each axis
    of the (statically known) rank in turn, under an If that asks whether the axis is
    listed; then squeeze the listed axes unless keepdims."""
    x, axes, y = node.input[0], node.input[1], node.output[0]
    rank, elem = env.rank(x), env.elem_type(x)
    if rank is None or elem is None:
        raise Decline(f"{node.op_type} with axes computed at run time needs the input's rank "
                      "and type")
    if env.to.get("", 1 << 30) < 11:
        raise Decline(f"{node.op_type} with axes computed at run time needs If branches of "
                      "different shapes (opset 11)")
    keepdims = _attr(node, "keepdims", 1)
    noop = _attr(node, "noop_with_empty_axes", 0)
    f = env.fresh
    r, c_r = env.constant_node(np.array(rank, dtype=np.int64), "rank")
    zero, c_zero = env.constant_node(np.array(0, dtype=np.int64), "zero")
    axes64, neg, shifted, norm, n_axes, empty = (f(h) for h in (
        "axes64", "negative", "shifted", "axes", "n_axes", "empty"))
    nodes = [c_r, c_zero,
             helper.make_node("Cast", [axes], [axes64], to=TensorProto.INT64),
             helper.make_node("Less", [axes64, zero], [neg]),
             helper.make_node("Add", [axes64, r], [shifted]),
             helper.make_node("Where", [neg, shifted, axes64], [norm]),
             helper.make_node("Size", [axes64], [n_axes]),
             helper.make_node("Equal", [n_axes, zero], [empty])]
    current = x
    conds = []
    for i in range(rank):
        idx, c_idx = env.constant_node(np.array(i, dtype=np.int64), f"axis{i}")
        eq, hits, count, listed = f("eq"), f("hits"), f("count"), f("listed")
        nodes += [c_idx,
                  helper.make_node("Equal", [norm, idx], [eq]),
                  helper.make_node("Cast", [eq], [hits], to=TensorProto.INT64),
                  helper.make_node("ReduceSum", [hits], [count], keepdims=0),
                  helper.make_node("Greater", [count, zero], [listed])]
        cond = listed
        if not noop:  # no axes listed: every axis is reduced
            cond = f("reduce")
            nodes.append(helper.make_node("Or", [listed, empty], [cond]))
        conds.append(cond)
        current = _if_then(nodes, env, cond, current, elem, _set_attrs(
            helper.make_node(node.op_type, [current], ["_"]), axes=[i], keepdims=1))
    if not keepdims:  # drop the reduced axes, last first so the indices stay valid
        for i in reversed(range(rank)):
            if env.emit_opset >= 13:
                a, c_a = env.constant_node(np.array([i], dtype=np.int64), f"squeeze{i}")
                nodes.append(c_a)
                squeeze = helper.make_node("Squeeze", [current, a], ["_"])
            else:
                squeeze = helper.make_node("Squeeze", [current], ["_"], axes=[i])
            current = _if_then(nodes, env, conds[i], current, elem, squeeze)
    nodes.append(helper.make_node("Identity", [current], [y]))
    return nodes


def _if_then(nodes: list, env: Env, cond: str, value: str, elem: int, step: NodeProto) -> str:
    """Append ``If(cond)`` whose then-branch is ``step`` applied to ``value`` (its output
    named "_", renamed here) and whose else-branch passes ``value`` on; return its output."""
    then_out, else_out, after = env.fresh("then"), env.fresh("else"), env.fresh("step")
    step = _with_outputs(step, [then_out])
    then_g = helper.make_graph([step], env.fresh("then_branch"), [],
                               [helper.make_tensor_value_info(then_out, elem, None)])
    else_g = helper.make_graph([helper.make_node("Identity", [value], [else_out])],
                               env.fresh("else_branch"), [],
                               [helper.make_tensor_value_info(else_out, elem, None)])
    nodes.append(helper.make_node("If", [cond], [after], then_branch=then_g,
                                  else_branch=else_g))
    return after


def _reduce_via_sum(node: NodeProto, env: Env) -> list[NodeProto]:
    """Axes computed at run time: ReduceSum takes them as an input already at opset 13."""
    before, after = _VIA_SUM[node.op_type]
    x, axes, y = node.input[0], node.input[1], node.output[0]
    nodes = []
    term = x
    if before == "square":
        term = env.fresh("square")
        nodes.append(helper.make_node("Mul", [x, x], [term]))
    elif before:
        term = env.fresh(before.lower())
        nodes.append(helper.make_node(before, [x], [term]))
    total = env.fresh("sum") if after else y
    keep = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    nodes.append(helper.make_node("ReduceSum", [term, axes], [total], **keep))
    if after == "mean":
        elem = env.elem_type(x)
        if elem is None:
            raise Decline("ReduceMean with axes computed at run time needs the input type")
        n_in, n_out, count, count_t = (env.fresh(h) for h in ("n_in", "n_out", "count", "n"))
        nodes += [helper.make_node("Size", [x], [n_in]),
                  helper.make_node("Size", [total], [n_out]),
                  helper.make_node("Div", [n_in, n_out], [count]),
                  helper.make_node("Cast", [count], [count_t], to=elem),
                  helper.make_node("Div", [total, count_t], [y])]
    elif after:
        nodes.append(helper.make_node(after, [total], [y]))
    return nodes


@adapter(NEGATIVE_AXES_11, 11)
def _non_negative_axes(node: NodeProto, env: Env) -> list[NodeProto]:
    """Before opset 11 these take axes counted from the front only."""
    rank = env.rank(node.input[0]) if node.input else None
    changes = {}
    for name in ("axis", "axes"):
        value = _attr(node, name)
        if value is None:
            continue
        values = [value] if isinstance(value, int) else list(value)
        if all(v >= 0 for v in values):
            continue
        r = rank
        if r is not None and node.op_type == "Unsqueeze":
            r += len(values)
        if r is None:
            raise Decline(f"a negative {name} before opset 11 needs the input's rank")
        values = [v + r if v < 0 else v for v in values]
        changes[name] = values[0] if isinstance(value, int) else values
    return [_set_attrs(node, **changes)] if changes else [node]


@adapter("Mod", 28)
def _mod_float_floor(node: NodeProto, env: Env) -> list[NodeProto]:
    """Mod(fmod=0) on floats exists from opset 28: fmod, then move a remainder whose sign
    differs from the divisor's by one divisor (the result takes the divisor's sign)."""
    elem = env.elem_type(node.input[0])
    if elem is None:
        raise Decline("the input type is unknown")
    floating = elem in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16,
                        TensorProto.BFLOAT16)
    if not floating or _attr(node, "fmod", 0):
        return [node]
    a, b = node.input[0], node.input[1]
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    zero, c_zero = env.constant_node(np.zeros((), dtype=dtype), "zero")
    r, nz, r_neg, b_neg, differ, fix, shifted = (env.fresh(h) for h in (
        "fmod", "nonzero", "r_neg", "b_neg", "differ", "fix", "shifted"))
    is_zero = env.fresh("is_zero")
    return [c_zero,
            helper.make_node("Mod", [a, b], [r], fmod=1),
            helper.make_node("Equal", [r, zero], [is_zero]),
            helper.make_node("Not", [is_zero], [nz]),
            helper.make_node("Less", [r, zero], [r_neg]),
            helper.make_node("Less", [b, zero], [b_neg]),
            helper.make_node("Xor", [r_neg, b_neg], [differ]),
            helper.make_node("And", [nz, differ], [fix]),
            helper.make_node("Add", [r, b], [shifted]),
            helper.make_node("Where", [fix, shifted, r], [node.output[0]])]


_NARROW_INTS = (TensorProto.INT8, TensorProto.INT16, TensorProto.UINT8, TensorProto.UINT16)


@adapter(("Add", "Sub", "Mul", "Div"), 14)
def _arithmetic_narrow_ints(node: NodeProto, env: Env) -> list[NodeProto]:
    """8- and 16-bit integers (opset 14): compute in int32 and cast back, which wraps the
    same way (Div truncates, and int32 holds every quotient)."""
    elem = env.elem_type(node.input[0])
    if elem not in _NARROW_INTS:
        return [node]
    a, b, wide = env.fresh("a32"), env.fresh("b32"), env.fresh("r32")
    return [helper.make_node("Cast", [node.input[0]], [a], to=TensorProto.INT32),
            helper.make_node("Cast", [node.input[1]], [b], to=TensorProto.INT32),
            _with_outputs(_with_inputs(node, [a, b]), [wide]),
            helper.make_node("Cast", [wide], [node.output[0]], to=elem)]


@adapter("Relu", 14)
def _relu_ints(node: NodeProto, env: Env) -> list[NodeProto]:
    elem = env.elem_type(node.input[0])
    if elem not in (TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64):
        return [node]
    zero, c_zero = env.constant_node(np.zeros((), dtype=helper.tensor_dtype_to_np_dtype(elem)),
                                     "zero")
    return [c_zero, helper.make_node("Max", [node.input[0], zero], [node.output[0]])]


# x types a DequantizeLinear of an older version does not take (float8 came at 19; 4-bit
# at 21; the FNUZ float8 types and float4 later still)
_FLOAT8 = tuple(getattr(TensorProto, n) for n in ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2",
                                                  "FLOAT8E5M2FNUZ", "FLOAT8E8M0")
                if hasattr(TensorProto, n))
_NOT_BEFORE_21 = tuple(getattr(TensorProto, n) for n in ("INT4", "UINT4", "FLOAT4E2M1", "INT2",
                                                         "UINT2") if hasattr(TensorProto, n))
_NOT_BEFORE_19 = _FLOAT8 + _NOT_BEFORE_21


def _type_name(elem_type: int) -> str:
    return TensorProto.DataType.Name(elem_type).lower() if elem_type else "unknown"


@adapter("DequantizeLinear", 19)
def _dequantize_half_scale(node: NodeProto, env: Env) -> list[NodeProto]:
    """A float16 scale (opset 19) of 8-bit ``x``: dequantized in float, rounded to float16
    once. Exact: ``|x - zero_point| <= 255`` times an 11-bit scale fits float's 24 bits, so
    the one rounding is float16's own."""
    x_type, scale_type = env.elem_type(node.input[0]), env.elem_type(_input(node, 1))
    if x_type in _NOT_BEFORE_19 or scale_type == TensorProto.BFLOAT16:
        raise Decline(f"DequantizeLinear(13) takes no {_type_name(x_type)} input or "
                      f"{_type_name(scale_type)} scale")
    if (scale_type != TensorProto.FLOAT16
            or x_type not in (TensorProto.INT8, TensorProto.UINT8)):
        return [node]  # valid at 13 as it is (or types unknown until the model's are)
    scale, wide = env.fresh("scale32"), env.fresh("y32")
    inputs = [node.input[0], scale, *node.input[2:]]
    return [helper.make_node("Cast", [node.input[1]], [scale], to=TensorProto.FLOAT),
            _with_outputs(_with_inputs(node, inputs), [wide]),
            helper.make_node("Cast", [wide], [node.output[0]], to=TensorProto.FLOAT16)]


@adapter("DequantizeLinear", 21)
def _dequantize_16bit(node: NodeProto, env: Env) -> list[NodeProto]:
    """16-bit ``x`` (opset 21), per tensor (a scalar scale, no blocks): ``(Cast(x) -
    Cast(zero_point)) * scale`` in float (exact up to the product's one rounding, as the
    kernel computes it), cast to a float16 scale's type at the end."""
    x_type, scale_type = env.elem_type(node.input[0]), env.elem_type(_input(node, 1))
    if x_type in _NOT_BEFORE_21:
        raise Decline(f"DequantizeLinear(19) takes no {_type_name(x_type)} input (4-bit "
                      "weights are widened to 8 bits only where they are initializers of the "
                      "main graph)")
    if _attr(node, "block_size", 0):
        return _dequantize_blocked(node, env)
    if (x_type not in (TensorProto.INT16, TensorProto.UINT16) or env.rank(node.input[1]) != 0
            or _attr(node, "block_size", 0) or scale_type not in (TensorProto.FLOAT,
                                                                   TensorProto.FLOAT16)):
        return [node]
    nodes, x = [], env.fresh("x32")
    nodes.append(helper.make_node("Cast", [node.input[0]], [x], to=TensorProto.FLOAT))
    if _input(node, 2):
        zero, shifted = env.fresh("zp32"), env.fresh("shifted")
        nodes += [helper.make_node("Cast", [node.input[2]], [zero], to=TensorProto.FLOAT),
                  helper.make_node("Sub", [x, zero], [shifted])]
        x = shifted
    scale = node.input[1]
    if scale_type == TensorProto.FLOAT16:
        scale = env.fresh("scale32")
        nodes.append(helper.make_node("Cast", [node.input[1]], [scale], to=TensorProto.FLOAT))
        wide = env.fresh("y32")
        nodes += [helper.make_node("Mul", [x, scale], [wide]),
                  helper.make_node("Cast", [wide], [node.output[0]], to=TensorProto.FLOAT16)]
    else:
        nodes.append(helper.make_node("Mul", [x, scale], [node.output[0]]))
    return nodes


def _dequantize_blocked(node: NodeProto, env: Env) -> list[NodeProto]:
    """``block_size`` (opset 21) of 8/16-bit ``x`` (4-bit weights arrive widened to 8 bits,
    see :func:`widen_4bit_initializers`): ``(Cast(x) - Cast(zero_point)) * scale`` with each
    scale and zero point repeated over its block along ``axis`` (``Unsqueeze`` -> ``Expand``
    -> ``Reshape`` -> ``Slice`` to x's size), the difference in int32 and the product in
    float (exact up to the product's one rounding, as onnxruntime's kernel), cast to a
    float16 scale's type at the end. Needs x's static shape."""
    x, scale, zp, y = node.input[0], _input(node, 1), _input(node, 2), node.output[0]
    x_type, scale_type = env.elem_type(x), env.elem_type(scale)
    shape, block = env.shape(x), _attr(node, "block_size", 0)
    if x_type not in (TensorProto.INT8, TensorProto.UINT8, TensorProto.INT16,
                      TensorProto.UINT16):
        raise Decline(f"blocked DequantizeLinear of {_type_name(x_type)} x (8/16-bit, or 4-bit "
                      "initializers widened to 8 bits, only)")
    if scale_type not in (TensorProto.FLOAT, TensorProto.FLOAT16):
        raise Decline("blocked DequantizeLinear lowered for a float or float16 scale only")
    if shape is None or any(d is None for d in shape) or not shape:
        raise Decline("blocked DequantizeLinear lowered for an x of static shape only")
    rank = len(shape)
    axis = _attr(node, "axis", 1) % rank
    blocks = -(-shape[axis] // block)
    nodes: list[NodeProto] = []

    def const(value, hint):
        name, c = _const_node(env, np.asarray(value), hint)
        nodes.append(c)
        return name

    def spread(v: str) -> str:  # (.., blocks, ..) -> (.., blocks * block, ..) -> x's size
        axes = const(np.array([axis + 1], np.int64), "axes")
        wide = [*shape[:axis], blocks, block, *shape[axis + 1:]]
        merged = [*shape[:axis], blocks * block, *shape[axis + 1:]]
        unsqueezed, expanded, reshaped = (env.fresh(h) for h in ("unsq", "expand", "merge"))
        nodes.extend([
            helper.make_node("Unsqueeze", [v, axes], [unsqueezed]),
            helper.make_node("Expand", [unsqueezed, const(np.array(wide, np.int64), "wide")],
                             [expanded]),
            helper.make_node("Reshape", [expanded, const(np.array(merged, np.int64), "merged")],
                             [reshaped])])
        if blocks * block == shape[axis]:
            return reshaped
        cut = env.fresh("cut")
        nodes.append(helper.make_node(
            "Slice", [reshaped, const(np.array([0], np.int64), "start"),
                      const(np.array([shape[axis]], np.int64), "end"),
                      const(np.array([axis], np.int64), "axis")], [cut]))
        return cut

    values = env.fresh("x32")
    nodes.append(helper.make_node("Cast", [x], [values], to=TensorProto.INT32))
    if zp:
        zero, shifted = env.fresh("zp32"), env.fresh("shifted")
        nodes += [helper.make_node("Cast", [spread(zp)], [zero], to=TensorProto.INT32),
                  helper.make_node("Sub", [values, zero], [shifted])]
        values = shifted
    real = env.fresh("real")
    nodes.append(helper.make_node("Cast", [values], [real], to=TensorProto.FLOAT))
    scales = spread(scale)
    if scale_type == TensorProto.FLOAT16:
        wide_scales, product = env.fresh("scale32"), env.fresh("y32")
        nodes += [helper.make_node("Cast", [scales], [wide_scales], to=TensorProto.FLOAT),
                  helper.make_node("Mul", [real, wide_scales], [product]),
                  helper.make_node("Cast", [product], [y], to=TensorProto.FLOAT16)]
    else:
        nodes.append(helper.make_node("Mul", [real, scales], [y]))
    return nodes


_WIDENED_4BIT = {TensorProto.INT4: TensorProto.INT8, TensorProto.UINT4: TensorProto.UINT8}


def widened_4bit(model: ModelProto) -> dict[str, int]:
    """The main graph's int4/uint4 initializers with their data in the file (not graph
    inputs), by name, with the 8-bit type they become below opset 21 (which has no 4-bit
    types): the same values, one per byte."""
    inputs = {v.name for v in model.graph.input}
    widened = {t.name: _WIDENED_4BIT[t.data_type] for t in model.graph.initializer
               if t.data_type in _WIDENED_4BIT and t.data_location != TensorProto.EXTERNAL
               and t.name not in inputs}
    if widened:  # and the values the main graph only moves from them (a reshaped weight)
        for node in model.graph.node:
            if (node.op_type in _MOVES_VALUES and normalize_domain(node.domain) == ""
                    and node.input and node.input[0] in widened and node.output):
                widened[node.output[0]] = widened[node.input[0]]
    return widened


# ops whose output has the element type of their first input, holding its values moved
_MOVES_VALUES = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten",
                           "Identity", "Slice", "Gather", "Expand"})


def widen_4bit_initializers(model: ModelProto) -> list[str]:
    """Rewrite the initializers :func:`widened_4bit` names as int8/uint8 (and the declared
    types of the values moved from them); the names changed."""
    widened = widened_4bit(model)
    for i, t in enumerate(model.graph.initializer):
        if t.name in widened:
            values = numpy_helper.to_array(t).astype(np.int8 if widened[t.name] == TensorProto.INT8
                                                     else np.uint8)
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(values, t.name))
    for info in list(model.graph.value_info) + list(model.graph.output):
        if info.name in widened and info.type.HasField("tensor_type"):
            info.type.tensor_type.elem_type = widened[info.name]
    return sorted(widened)


@adapter("QuantizeLinear", 19)
def _quantize_half(node: NodeProto, env: Env) -> list[NodeProto]:
    """A float16 ``x`` and scale (opset 19) quantized to 8 bits: both cast to float first.
    Exact: float16 values are floats, and onnxruntime's kernel divides in float too."""
    x_type, scale_type = env.elem_type(node.input[0]), env.elem_type(_input(node, 1))
    zp_type = env.elem_type(_input(node, 2))
    if zp_type in _NOT_BEFORE_19 or TensorProto.BFLOAT16 in (x_type, scale_type):
        raise Decline(f"QuantizeLinear(13) gives no {_type_name(zp_type)} output and takes no "
                      f"{_type_name(x_type)} input or {_type_name(scale_type)} scale")
    if _attr(node, "saturate", 1) != 1:
        raise Decline("QuantizeLinear(13) has no saturate (float8 outputs)")
    base = _set_attrs(node, drop=["saturate"])
    if TensorProto.FLOAT16 not in (x_type, scale_type):
        return [base]  # valid at 13 as it is (or types unknown until the model's are)
    nodes, inputs = [], list(base.input)
    for i in (0, 1):
        if env.elem_type(inputs[i]) == TensorProto.FLOAT16:
            wide = env.fresh("x32" if i == 0 else "scale32")
            nodes.append(helper.make_node("Cast", [inputs[i]], [wide], to=TensorProto.FLOAT))
            inputs[i] = wide
    return [*nodes, _with_inputs(base, inputs)]


_QUANTIZED_16 = {TensorProto.INT16: (-32768, 32767), TensorProto.UINT16: (0, 65535)}


def _const_node(env: Env, value: np.ndarray, hint: str) -> tuple[str, NodeProto]:
    name = env.fresh(hint)
    return name, helper.make_node("Constant", [], [name],
                                  value=numpy_helper.from_array(value))


def _along_axis_shape(x: str, axis: int, env: Env, nodes: list[NodeProto]) -> str:
    """The shape ``[-1, 1, ..., 1]`` that makes a per-axis (1-D) or scalar parameter
    broadcast along ``axis`` of ``x``: as many 1s as axes behind ``axis`` (known for a
    negative axis or a known rank; else computed from ``Shape(x)`` at run time)."""
    rank = env.rank(x)
    if axis < 0 or rank is not None:
        behind = -axis - 1 if axis < 0 else rank - axis - 1
        name, node = _const_node(env, np.array([-1] + [1] * max(behind, 0), np.int64),
                                 "axis_shape")
        nodes.append(node)
        return name
    shape, size, behind, count, ones, out = (env.fresh(h) for h in (
        "x_shape", "x_rank", "behind", "count", "ones", "axis_shape"))
    after, node_after = _const_node(env, np.array(axis + 1, np.int64), "after")
    zero, node_zero = _const_node(env, np.array(0, np.int64), "zero")
    one, node_one = _const_node(env, np.array([1], np.int64), "one")
    minus, node_minus = _const_node(env, np.array([-1], np.int64), "minus_one")
    nodes += [node_after, node_zero, node_one, node_minus,
              helper.make_node("Shape", [x], [shape]),
              helper.make_node("Size", [shape], [size]),
              helper.make_node("Sub", [size, after], [behind]),
              helper.make_node("Max", [behind, zero], [count]),
              helper.make_node("Reshape", [count, one], [count + "_1d"]),
              helper.make_node("Expand", [one, count + "_1d"], [ones]),
              helper.make_node("Concat", [minus, ones], [out], axis=0)]
    return out


@adapter("QuantizeLinear", 21)
def _quantize_16bit(node: NodeProto, env: Env) -> list[NodeProto]:
    """16-bit outputs (opset 21): ``Clip(Round(x / scale) + zero_point)`` in float, cast
    to the 16-bit type, as the spec defines it (``Round`` rounds half to even, as the
    kernel). Exact: the integers up to 65535 are floats. Per tensor, or per axis of an ``x``
    of known rank; no blocks."""
    x_type, scale_type = env.elem_type(node.input[0]), env.elem_type(_input(node, 1))
    zp = _input(node, 2)
    out_type = env.elem_type(zp) if zp else _attr(node, "output_dtype", 0) or None
    if out_type in _NOT_BEFORE_21:
        raise Decline(f"QuantizeLinear(19) gives no {_type_name(out_type)} output")
    if _attr(node, "block_size", 0):
        raise Decline("QuantizeLinear(19) has no block_size (blocked quantization)")
    if out_type not in _QUANTIZED_16:
        return [_set_attrs(node, drop=["output_dtype"])] if not zp and out_type in (
            None, TensorProto.UINT8) else [node]
    if x_type not in (TensorProto.FLOAT, TensorProto.FLOAT16) or scale_type not in (
            TensorProto.FLOAT, TensorProto.FLOAT16):
        raise Decline("16-bit QuantizeLinear lowered for float or float16 x and scale only")
    nodes: list[NodeProto] = []

    def wide(name: str, hint: str) -> str:
        if env.elem_type(name) == TensorProto.FLOAT:
            return name
        out = env.fresh(hint)
        nodes.append(helper.make_node("Cast", [name], [out], to=TensorProto.FLOAT))
        return out

    x, scale = wide(node.input[0], "x32"), wide(node.input[1], "scale32")
    zero = wide(zp, "zp32") if zp else None
    if env.rank(node.input[1]) != 0:  # per axis (or unknown): along `axis` of x
        shape = _along_axis_shape(node.input[0], _attr(node, "axis", 1), env, nodes)
        reshaped = []
        for name in [scale] + ([zero] if zero else []):
            out = env.fresh("along_axis")
            nodes.append(helper.make_node("Reshape", [name, shape], [out]))
            reshaped.append(out)
        scale, zero = reshaped[0], (reshaped[1] if zero else None)
    low, high = _QUANTIZED_16[out_type]
    ratio, rounded = env.fresh("ratio"), env.fresh("rounded")
    nodes += [helper.make_node("Div", [x, scale], [ratio]),
              helper.make_node("Round", [ratio], [rounded])]
    if zero:
        shifted = env.fresh("shifted")
        nodes.append(helper.make_node("Add", [rounded, zero], [shifted]))
        rounded = shifted
    lo, hi, clipped = env.fresh("low"), env.fresh("high"), env.fresh("clipped")
    nodes += [helper.make_node("Constant", [], [lo], value=numpy_helper.from_array(
                  np.array(low, np.float32))),
              helper.make_node("Constant", [], [hi], value=numpy_helper.from_array(
                  np.array(high, np.float32))),
              helper.make_node("Clip", [rounded, lo, hi], [clipped]),
              helper.make_node("Cast", [clipped], [node.output[0]], to=out_type)]
    return nodes


@adapter("IsInf", 20)
def _isinf_half(node: NodeProto, env: Env) -> list[NodeProto]:
    if env.elem_type(node.input[0]) not in (TensorProto.FLOAT16, TensorProto.BFLOAT16):
        return [node]
    wide = env.fresh("x32")
    return [helper.make_node("Cast", [node.input[0]], [wide], to=TensorProto.FLOAT),
            _with_inputs(node, [wide])]


_UNSIGNED = {TensorProto.INT8: TensorProto.UINT8, TensorProto.INT16: TensorProto.UINT16,
             TensorProto.INT32: TensorProto.UINT32, TensorProto.INT64: TensorProto.UINT64}


@adapter("BitShift", 28)
def _bitshift_signed(node: NodeProto, env: Env) -> list[NodeProto]:
    """Signed integers (opset 28) through the unsigned ones of the same width: a cast
    between them keeps the bits. A right shift is arithmetic: for x < 0 it is
    -1 - ((-1 - x) >> y). A shift by a negative amount or by the width or more gives 0, or
    -1 for a right shift of a negative x (clamping the amount to width - 1 does that)."""
    elem = env.elem_type(node.input[0])
    if elem not in _UNSIGNED:
        if elem is None:
            raise Decline("the input type is unknown")
        return [node]
    width = np.dtype(helper.tensor_dtype_to_np_dtype(elem)).itemsize * 8
    x, y, z = node.input[0], node.input[1], node.output[0]
    f = env.fresh
    nodes: list[NodeProto] = []
    compute = elem
    if elem == TensorProto.INT16:  # (onnxruntime has no int16 Where: compute in int32)
        compute = TensorProto.INT32
        x32, y32, z32 = f("x32"), f("y32"), f("z32")
        nodes += [helper.make_node("Cast", [x], [x32], to=compute),
                  helper.make_node("Cast", [y], [y32], to=compute)]
        x, y, z, final = x32, y32, z32, z
    unsigned = _UNSIGNED[compute]
    dtype = helper.tensor_dtype_to_np_dtype(compute)
    zero, c_zero = env.constant_node(np.zeros((), dtype=dtype), "zero")
    top, c_top = env.constant_node(np.array(width - 1, dtype=dtype), "top")
    minus1, c_m1 = env.constant_node(np.array(-1, dtype=dtype), "minus1")
    nodes += [c_zero, c_top, c_m1]
    back_to = [] if compute == elem else [
        helper.make_node("Cast", [z], [final], to=elem)]  # keeps the low bits
    y_neg, y_big, y_bad, y_ok, y_u = f("y_neg"), f("y_big"), f("y_bad"), f("y"), f("y_u")
    nodes += [helper.make_node("Less", [y, zero], [y_neg]),
              helper.make_node("Greater", [y, top], [y_big]),
              helper.make_node("Or", [y_neg, y_big], [y_bad]),
              helper.make_node("Where", [y_bad, top, y], [y_ok]),
              helper.make_node("Cast", [y_ok], [y_u], to=unsigned)]
    direction = _attr(node, "direction", b"")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    if direction == "LEFT":
        x_u, shifted, back = f("x_u"), f("shifted"), f("back")
        nodes += [helper.make_node("Cast", [x], [x_u], to=unsigned),
                  helper.make_node("BitShift", [x_u, y_u], [shifted], direction="LEFT"),
                  helper.make_node("Cast", [shifted], [back], to=compute),
                  helper.make_node("Where", [y_bad, zero, back], [z])]
        return nodes + back_to
    x_neg, flipped, t, t_u, shifted, r, r_flip = (f(h) for h in (
        "x_neg", "flipped", "t", "t_u", "shifted", "r", "r_flipped"))
    nodes += [helper.make_node("Less", [x, zero], [x_neg]),
              helper.make_node("Sub", [minus1, x], [flipped]),
              helper.make_node("Where", [x_neg, flipped, x], [t]),
              helper.make_node("Cast", [t], [t_u], to=unsigned),
              helper.make_node("BitShift", [t_u, y_u], [shifted], direction="RIGHT"),
              helper.make_node("Cast", [shifted], [r], to=compute),
              helper.make_node("Sub", [minus1, r], [r_flip]),
              helper.make_node("Where", [x_neg, r_flip, r], [z])]
    return nodes + back_to


@adapter(("ReduceMax", "ReduceMin"), 20)
def _reduce_bool(node: NodeProto, env: Env) -> list[NodeProto]:
    if env.elem_type(node.input[0]) != TensorProto.BOOL:
        if env.elem_type(node.input[0]) is None:
            raise Decline("the input type is unknown (bool needs a cast)")
        return [node]
    x8, y8 = env.fresh("u8"), env.fresh("r8")
    return [
        helper.make_node("Cast", [node.input[0]], [x8], to=TensorProto.UINT8),
        _with_outputs(_with_inputs(node, [x8, *node.input[1:]]), [y8]),
        helper.make_node("Cast", [y8], [node.output[0]], to=TensorProto.BOOL),
    ]


def _with_outputs(node: NodeProto, outputs) -> NodeProto:
    out = NodeProto()
    out.CopyFrom(node)
    del out.output[:]
    out.output.extend(outputs)
    return out


@adapter(("Squeeze", "Unsqueeze"), 13, reads_constants=True)
def _squeeze_axes_to_attribute(node: NodeProto, env: Env) -> list[NodeProto]:
    axes = _need_const(node, env, 1, "axes")
    if axes is None:
        if node.op_type == "Unsqueeze":
            raise Decline("Unsqueeze needs axes")
        return [_with_inputs(node, node.input[:1])]
    return [_with_inputs(_set_attrs(node, axes=_ints(axes)), node.input[:1])]


@adapter("Split", 13, reads_constants=True)
def _split_sizes_to_attribute(node: NodeProto, env: Env) -> list[NodeProto]:
    split = _need_const(node, env, 1, "split")
    if split is None:
        return [_with_inputs(node, node.input[:1])]
    return [_with_inputs(_set_attrs(node, split=_ints(split)), node.input[:1])]


@adapter("Split", 18)
def _split_num_outputs(node: NodeProto, env: Env) -> list[NodeProto]:
    n = _attr(node, "num_outputs")
    if n is None:
        return [node]
    base = _set_attrs(node, drop=["num_outputs"])
    if _input(node, 1):
        return [base]
    axis = _attr(node, "axis", 0)
    shape = env.shape(node.input[0])
    if shape is not None:
        dim = shape[axis]
        if dim is not None:
            chunk = -(-dim // n)
            sizes = [chunk] * (n - 1) + [dim - chunk * (n - 1)]
            if min(sizes) >= 0:  # (else an invalid split, e.g. in a branch never taken)
                name, const = env.constant_node(np.array(sizes, dtype=np.int64), "split")
                return [const, _with_inputs(base, [node.input[0], name])]
    # sizes at run time: ceil(dim / n) for all but the last chunk, the rest for the last
    nodes = []
    shape_name, dim_name = env.fresh("shape"), env.fresh("dim")
    idx, c_idx = env.constant_node(np.array([axis], dtype=np.int64), "axis")
    nm1, c_nm1 = env.constant_node(np.array([n - 1], dtype=np.int64), "n_minus_1")
    nn, c_n = env.constant_node(np.array([n], dtype=np.int64), "n")
    nodes += [c_idx, c_nm1, c_n,
              helper.make_node("Shape", [node.input[0]], [shape_name]),
              helper.make_node("Gather", [shape_name, idx], [dim_name], axis=0)]
    plus, chunk, used, last = (env.fresh(h) for h in ("plus", "chunk", "used", "last"))
    nodes += [helper.make_node("Add", [dim_name, nm1], [plus]),
              helper.make_node("Div", [plus, nn], [chunk]),
              helper.make_node("Mul", [chunk, nm1], [used]),
              helper.make_node("Sub", [dim_name, used], [last])]
    firsts, sizes = env.fresh("firsts"), env.fresh("sizes")
    nodes += [helper.make_node("Expand", [chunk, nm1], [firsts]),
              helper.make_node("Concat", [firsts, last], [sizes], axis=0)]
    nodes.append(_with_inputs(base, [node.input[0], sizes]))
    return nodes


@adapter("Pad", 11, reads_constants=True)
def _pad_inputs_to_attributes(node: NodeProto, env: Env) -> list[NodeProto]:
    pads = _need_const(node, env, 1, "pads")
    value = _need_const(node, env, 2, "constant_value")
    attrs = {"pads": _ints(pads)}
    if value is not None:
        attrs["value"] = float(np.asarray(value).reshape(-1)[0]) if value.size else 0.0
    return [_with_inputs(_set_attrs(node, **attrs), node.input[:1])]


@adapter("Pad", 18, reads_constants=True)
def _pad_axes(node: NodeProto, env: Env) -> list[NodeProto]:
    if not _input(node, 3):
        return [_with_inputs(node, node.input[:3])]
    rank = env.rank(node.input[0])
    if rank is None:
        raise Decline("Pad with axes needs the input's rank, which is unknown")
    axes = env.const(node.input[3])
    pads_name = node.input[1]
    if axes is None:
        return _pad_runtime_axes(node, env, rank)
    axes = [a + rank if a < 0 else a for a in _ints(axes)]
    pads = env.const(pads_name)
    if pads is not None:
        pads = _ints(pads)
        full = [0] * (2 * rank)
        for k, a in enumerate(axes):
            full[a] = pads[k]
            full[a + rank] = pads[k + len(axes)]
        name, const = env.constant_node(np.array(full, dtype=np.int64), "pads")
        return [const, _with_inputs(node, [node.input[0], name, _input(node, 2)])]
    # pads computed at run time: scatter them into a zero vector of the full length
    indices = np.array(axes + [a + rank for a in axes], dtype=np.int64)
    zeros, c_zeros = env.constant_node(np.zeros(2 * rank, dtype=np.int64), "zeros")
    idx, c_idx = env.constant_node(indices, "indices")
    full, cast = env.fresh("pads"), env.fresh("pads64")
    return [c_zeros, c_idx,
            helper.make_node("Cast", [pads_name], [cast], to=TensorProto.INT64),
            helper.make_node("ScatterElements", [zeros, idx, cast], [full], axis=0),
            _with_inputs(node, [node.input[0], full, _input(node, 2)])]


def _pad_runtime_axes(node: NodeProto, env: Env, rank: int) -> list[NodeProto]:
    """pads[k] and pads[k + len(axes)] go to positions axes[k] and axes[k] + rank."""
    zeros, c_zeros = env.constant_node(np.zeros(2 * rank, dtype=np.int64), "zeros")
    r, c_r = env.constant_node(np.array(rank, dtype=np.int64), "rank")
    z, c_z = env.constant_node(np.array(0, dtype=np.int64), "zero")
    axes64, neg, shifted, norm, ends, idx, pads64, full = (env.fresh(h) for h in (
        "axes64", "negative", "shifted", "axes", "ends", "indices", "pads64", "pads"))
    return [c_zeros, c_r, c_z,
            helper.make_node("Cast", [node.input[3]], [axes64], to=TensorProto.INT64),
            helper.make_node("Less", [axes64, z], [neg]),
            helper.make_node("Add", [axes64, r], [shifted]),
            helper.make_node("Where", [neg, shifted, axes64], [norm]),
            helper.make_node("Add", [norm, r], [ends]),
            helper.make_node("Concat", [norm, ends], [idx], axis=0),
            helper.make_node("Cast", [node.input[1]], [pads64], to=TensorProto.INT64),
            helper.make_node("ScatterElements", [zeros, idx, pads64], [full], axis=0),
            _with_inputs(node, [node.input[0], full, _input(node, 2)])]


@adapter("Pad", 19)
def _pad_wrap(node: NodeProto, env: Env) -> list[NodeProto]:
    if _attr(node, "mode", b"constant") in (b"wrap", "wrap"):
        raise Decline("Pad mode 'wrap' exists from opset 19")
    return [node]


@adapter("Clip", 11, reads_constants=True)
def _clip_inputs_to_attributes(node: NodeProto, env: Env) -> list[NodeProto]:
    low = _need_const(node, env, 1, "min")
    high = _need_const(node, env, 2, "max")
    attrs = {}
    if low is not None:
        attrs["min"] = float(np.asarray(low).reshape(-1)[0])
    if high is not None:
        attrs["max"] = float(np.asarray(high).reshape(-1)[0])
    return [_with_inputs(_set_attrs(node, **attrs), node.input[:1])]


@adapter("Slice", 10, reads_constants=True)
def _slice_inputs_to_attributes(node: NodeProto, env: Env) -> list[NodeProto]:
    starts = _need_const(node, env, 1, "starts")
    ends = _need_const(node, env, 2, "ends")
    axes = _need_const(node, env, 3, "axes")
    steps = _need_const(node, env, 4, "steps")
    if steps is not None and any(s != 1 for s in _ints(steps)):
        raise Decline("Slice with steps other than 1 exists from opset 10")
    attrs = {"starts": _ints(starts), "ends": _ints(ends)}
    if axes is not None:
        attrs["axes"] = _ints(axes)
    return [_with_inputs(_set_attrs(node, **attrs), node.input[:1])]


@adapter("TopK", 10, reads_constants=True)
def _topk_k_to_attribute(node: NodeProto, env: Env) -> list[NodeProto]:
    k = _need_const(node, env, 1, "K")
    return [_with_inputs(_set_attrs(node, k=_ints(k)[0]), node.input[:1])]


@adapter("TopK", 11)
def _topk_11(node: NodeProto, env: Env) -> list[NodeProto]:
    if _attr(node, "largest", 1) != 1 or _attr(node, "sorted", 1) != 1:
        raise Decline("TopK with largest=0 or sorted=0 exists from opset 11")
    axis = _attr(node, "axis", -1)
    if axis < 0:
        rank = env.rank(node.input[0])
        if rank is None:
            raise Decline("a negative axis needs the input's rank, which is unknown")
        axis += rank
    return [_set_attrs(node, drop=["largest", "sorted"], axis=axis)]


@adapter(("Softmax", "LogSoftmax", "Hardmax"), 13)
def _softmax_axis(node: NodeProto, env: Env) -> list[NodeProto]:
    """Before 13 these flatten the input to 2-D at ``axis``; equal when ``axis`` is last,
    otherwise the axis is transposed to the end and back."""
    rank = env.rank(node.input[0])
    axis = _attr(node, "axis", -1)
    if rank is None:
        if axis == -1:
            return [_set_attrs(node, axis=-1)]
        raise Decline(f"{node.op_type}(axis={axis}) needs the input's rank, which is unknown")
    axis = axis + rank if axis < 0 else axis
    if axis == rank - 1:
        return [_set_attrs(node, axis=rank - 1)]
    perm = list(range(rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    t_in, t_out = env.fresh("transposed"), env.fresh("result")
    return [helper.make_node("Transpose", [node.input[0]], [t_in], perm=perm),
            _with_outputs(_with_inputs(_set_attrs(node, axis=rank - 1), [t_in]), [t_out]),
            helper.make_node("Transpose", [t_out], [node.output[0]], perm=perm)]


@adapter("Shape", 15)
def _shape_start_end(node: NodeProto, env: Env) -> list[NodeProto]:
    start, end = _attr(node, "start", 0), _attr(node, "end")
    base = _set_attrs(node, drop=["start", "end"])
    if start == 0 and end is None:
        return [base]
    full = env.fresh("shape")
    s, c_s = env.constant_node(np.array([start], dtype=np.int64), "start")
    e, c_e = env.constant_node(np.array([INT64_MAX if end is None else end], dtype=np.int64),
                               "end")
    a, c_a = env.constant_node(np.array([0], dtype=np.int64), "axes")
    return [c_s, c_e, c_a, _with_outputs(base, [full]),
            helper.make_node("Slice", [full, s, e, a], [node.output[0]])]


@adapter("Reshape", 14, reads_constants=True)
def _reshape_allowzero(node: NodeProto, env: Env) -> list[NodeProto]:
    if _attr(node, "allowzero", 0):
        # allowzero matters only for a 0 in the target shape, and a valid one can hold a 0
        # only when the input has no elements
        shape = env.const(_input(node, 1))
        dims = env.shape(node.input[0])
        nonempty = dims is not None and all(d is not None and d > 0 for d in dims)
        if not nonempty and (shape is None or 0 in _ints(shape)):
            return _reshape_zero_dims(node, env)
    return [_set_attrs(node, drop=["allowzero"])]


def _reshape_zero_dims(node: NodeProto, env: Env) -> list[NodeProto]:
    """allowzero=1 with a target shape that may hold a 0: then the output has no elements
    and exactly that shape, which ConstantOfShape makes; otherwise a plain Reshape."""
    x, shape, y = node.input[0], node.input[1], node.output[0]
    elem = env.elem_type(x)
    if elem is None or elem == TensorProto.STRING or env.to.get("", 1 << 30) < 11:
        raise Decline("Reshape(allowzero=1) with a zero (or unknown) target dimension "
                      "exists from opset 14")
    f = env.fresh
    zero, c_zero = env.constant_node(np.array(0, dtype=np.int64), "zero")
    is_zero, hits, count, any_zero = f("is_zero"), f("hits"), f("count"), f("any_zero")
    then_out, else_out = f("empty"), f("reshaped")
    fill = numpy_helper.from_array(np.zeros(1, dtype=helper.tensor_dtype_to_np_dtype(elem)))
    then_g = helper.make_graph(
        [helper.make_node("ConstantOfShape", [shape], [then_out], value=fill)],
        f("then"), [], [helper.make_tensor_value_info(then_out, elem, None)])
    else_g = helper.make_graph(
        [helper.make_node("Reshape", [x, shape], [else_out])],
        f("else"), [], [helper.make_tensor_value_info(else_out, elem, None)])
    return [c_zero,
            helper.make_node("Equal", [shape, zero], [is_zero]),
            helper.make_node("Cast", [is_zero], [hits], to=TensorProto.INT64),
            helper.make_node("ReduceSum", [hits], [count], keepdims=0),
            helper.make_node("Greater", [count, zero], [any_zero]),
            helper.make_node("If", [any_zero], [y], then_branch=then_g, else_branch=else_g)]


@adapter("BatchNormalization", 14)
def _batch_norm_training(node: NodeProto, env: Env) -> list[NodeProto]:
    """training_mode=1 (opset 14) normalises with the batch statistics and updates the
    running ones; the older op's training outputs mean something else, so it is spelt out."""
    if not _attr(node, "training_mode", 0):
        return [_with_outputs(_set_attrs(node, drop=["training_mode"]), node.output[:1])]
    x, scale, bias, mean_in, var_in = node.input[:5]
    rank = env.rank(x)
    if rank is None or rank < 2:
        raise Decline("BatchNormalization training needs the input's rank")
    elem = env.elem_type(x)
    if elem is None or any(env.elem_type(n) not in (None, elem) for n in node.input[1:5]):
        raise Decline("BatchNormalization training with mixed or unknown types")
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    eps = _attr(node, "epsilon", 1e-5)
    momentum = _attr(node, "momentum", 0.9)
    reduce_axes = [0] + list(range(2, rank))
    channel_axes = list(range(1, rank - 1))
    c_eps, n_eps = env.constant_node(np.array(eps, dtype=dtype), "eps")
    c_m, n_m = env.constant_node(np.array(momentum, dtype=dtype), "momentum")
    c_1m, n_1m = env.constant_node(np.array(1 - momentum, dtype=dtype), "one_minus")
    c_red, n_red = env.constant_node(np.array(reduce_axes, dtype=np.int64), "axes")
    nodes = [n_eps, n_m, n_1m, n_red]
    f = env.fresh
    mean, diff, sq, var, var_eps, std, norm = (f(h) for h in (
        "mean", "diff", "sq", "var", "var_eps", "std", "norm"))
    nodes += [helper.make_node("ReduceMean", [x], [mean], axes=reduce_axes, keepdims=1),
              helper.make_node("Sub", [x, mean], [diff]),
              helper.make_node("Mul", [diff, diff], [sq]),
              helper.make_node("ReduceMean", [sq], [var], axes=reduce_axes, keepdims=1),
              helper.make_node("Add", [var, c_eps], [var_eps]),
              helper.make_node("Sqrt", [var_eps], [std]),
              helper.make_node("Div", [diff, std], [norm])]
    scaled = f("scaled")
    if channel_axes:
        c_ch, n_ch = env.constant_node(np.array(channel_axes, dtype=np.int64), "channel_axes")
        s_u, b_u = f("scale"), f("bias")
        nodes += [n_ch, helper.make_node("Unsqueeze", [scale, c_ch], [s_u]),
                  helper.make_node("Unsqueeze", [bias, c_ch], [b_u])]
    else:
        s_u, b_u = scale, bias
    nodes += [helper.make_node("Mul", [norm, s_u], [scaled]),
              helper.make_node("Add", [scaled, b_u], [node.output[0]])]
    for k, (batch, running) in enumerate(((mean, mean_in), (var, var_in)), start=1):
        out = node.output[k] if k < len(node.output) else ""
        if not out:
            continue
        flat, old, new = f("flat"), f("old"), f("new")
        nodes += [helper.make_node("Squeeze", [batch, c_red], [flat]),
                  helper.make_node("Mul", [running, c_m], [old]),
                  helper.make_node("Mul", [flat, c_1m], [new]),
                  helper.make_node("Add", [old, new], [out])]
    return nodes


@adapter("GridSample", 20)
def _grid_sample_modes(node: NodeProto, env: Env) -> list[NodeProto]:
    mode = _attr(node, "mode", b"linear")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    rank = env.rank(node.input[0])
    if rank != 4:
        raise Decline("GridSample before opset 20 takes 4-D input only"
                      + (" (the rank is unknown)" if rank is None else ""))
    renamed = {"linear": "bilinear", "cubic": "bicubic", "nearest": "nearest"}.get(mode)
    if renamed is None:
        raise Decline(f"GridSample mode {mode!r}")
    return [_set_attrs(node, mode=renamed)]


@adapter("RoiAlign", 16)
def _roi_align_coordinates(node: NodeProto, env: Env) -> list[NodeProto]:
    mode = _attr(node, "coordinate_transformation_mode", b"half_pixel")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    base = _set_attrs(node, drop=["coordinate_transformation_mode"])
    if mode == "output_half_pixel":
        return [base]
    # half_pixel samples at roi * scale - 0.5, the older op at roi * scale: shift the rois
    elem = env.elem_type(node.input[1])
    if elem is None:
        raise Decline("the rois type is unknown")
    scale = _attr(node, "spatial_scale", 1.0)
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    shift, c_shift = env.constant_node(np.array(0.5 / scale, dtype=dtype), "shift")
    rois = env.fresh("rois")
    return [c_shift, helper.make_node("Sub", [node.input[1], shift], [rois]),
            _with_inputs(base, [node.input[0], rois, *node.input[2:]])]


@adapter(("ScatterElements", "ScatterND"), 18)
def _scatter_reduction(node: NodeProto, env: Env) -> list[NodeProto]:
    reduction = _attr(node, "reduction", b"none")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    if reduction in ("max", "min"):
        raise Decline(f"{node.op_type}(reduction={reduction!r}) exists from opset 18")
    return [node]


@adapter("Resize", 19)
def _resize_half_pixel_symmetric(node: NodeProto, env: Env) -> list[NodeProto]:
    mode = _attr(node, "coordinate_transformation_mode", b"half_pixel")
    if mode in (b"half_pixel_symmetric", "half_pixel_symmetric"):
        raise Decline("Resize coordinate_transformation_mode 'half_pixel_symmetric' exists "
                      "from opset 19")
    return [node]


@adapter("Resize", 18, reads_constants=True)
def _resize_18(node: NodeProto, env: Env) -> list[NodeProto]:
    """``axes`` and ``keep_aspect_ratio_policy`` (opset 18) become full-rank roi, scales
    or sizes: folded when they are constants, computed in the graph otherwise."""
    if _attr(node, "antialias", 0):
        raise Decline("Resize(antialias=1) exists from opset 18")
    x, roi, scales, sizes = (_input(node, i) for i in range(4))
    axes = _attr(node, "axes")
    policy = _attr(node, "keep_aspect_ratio_policy", b"stretch")
    policy = policy.decode() if isinstance(policy, bytes) else policy
    base = _set_attrs(node, drop=["antialias", "axes", "keep_aspect_ratio_policy"])
    if axes is None and (policy == "stretch" or not sizes):
        return [base]
    shape = env.shape(x)
    rank = None if shape is None else len(shape)
    if rank is None:
        raise Decline("Resize with axes or keep_aspect_ratio_policy needs the input's rank")
    axes = list(range(rank)) if axes is None else [a + rank if a < 0 else a for a in axes]
    all_axes = axes == list(range(rank))
    nodes: list[NodeProto] = []
    new_inputs = [x, roi, scales, sizes]
    ax, c_ax = env.constant_node(np.array(axes, dtype=np.int64), "axes")
    nodes.append(c_ax)
    shape_x = None

    def input_shape() -> str:
        nonlocal shape_x
        if shape_x is None:
            shape_x = env.fresh("shape")
            nodes.append(helper.make_node("Shape", [x], [shape_x]))
        return shape_x

    def scatter(into: str, indices: str, updates: str, hint: str) -> str:
        out = env.fresh(hint)
        nodes.append(helper.make_node("ScatterElements", [into, indices, updates], [out],
                                      axis=0))
        return out

    if sizes:
        value = env.const(sizes)
        static = shape is not None and all(d is not None for d in shape)
        if value is not None and static:
            value = _ints(value)
            if policy != "stretch":
                ratios = [v / shape[a] for v, a in zip(value, axes)]
                scale = min(ratios) if policy == "not_larger" else max(ratios)
                value = [int(np.floor(scale * shape[a] + 0.5)) for a in axes]
            full = list(shape)
            for a, v in zip(axes, value):
                full[a] = v
            name, const = env.constant_node(np.array(full, dtype=np.int64), "sizes")
            nodes.append(const)
            new_inputs[3] = name
        else:
            wanted = env.fresh("sizes64")
            nodes.append(helper.make_node("Cast", [sizes], [wanted], to=TensorProto.INT64))
            if policy != "stretch":
                dims, dims_f, wanted_f, ratios, scale, scaled, up, down = (env.fresh(h) for h in (
                    "dims", "dims_f", "sizes_f", "ratios", "scale", "scaled", "up", "down"))
                half, c_half = env.constant_node(np.array(0.5, dtype=np.float32), "half")
                reduce = "ReduceMin" if policy == "not_larger" else "ReduceMax"
                nodes += [c_half,
                          helper.make_node("Gather", [input_shape(), ax], [dims], axis=0),
                          helper.make_node("Cast", [dims], [dims_f], to=TensorProto.FLOAT),
                          helper.make_node("Cast", [wanted], [wanted_f], to=TensorProto.FLOAT),
                          helper.make_node("Div", [wanted_f, dims_f], [ratios]),
                          helper.make_node(reduce, [ratios], [scale], axes=[0], keepdims=1),
                          helper.make_node("Mul", [scale, dims_f], [scaled]),
                          helper.make_node("Add", [scaled, half], [up]),
                          helper.make_node("Floor", [up], [down])]
                wanted = env.fresh("sizes64")
                nodes.append(helper.make_node("Cast", [down], [wanted], to=TensorProto.INT64))
            new_inputs[3] = wanted if all_axes else scatter(input_shape(), ax, wanted, "sizes")
    if scales and not all_axes:
        value = env.const(scales)
        if value is not None:
            full = np.ones(rank, dtype=value.dtype)
            for a, v in zip(axes, value.reshape(-1)):
                full[a] = v
            name, const = env.constant_node(full, "scales")
            nodes.append(const)
            new_inputs[2] = name
        else:
            ones, c_ones = env.constant_node(np.ones(rank, dtype=np.float32), "ones")
            nodes.append(c_ones)
            new_inputs[2] = scatter(ones, ax, scales, "scales")
    if roi and not all_axes:
        value = env.const(roi)
        elem = env.elem_type(roi)
        if value is None and elem is None:
            raise Decline("the roi type is unknown")
        dtype = value.dtype if value is not None else helper.tensor_dtype_to_np_dtype(elem)
        full = np.concatenate([np.zeros(rank), np.ones(rank)]).astype(dtype)
        if value is not None:
            value = value.reshape(-1)
            for k, a in enumerate(axes):
                full[a] = value[k]
                full[a + rank] = value[k + len(axes)]
            name, const = env.constant_node(full, "roi")
            nodes.append(const)
            new_inputs[1] = name
        else:
            start, c_start = env.constant_node(full, "roi")
            idx, c_idx = env.constant_node(np.array(axes + [a + rank for a in axes],
                                                    dtype=np.int64), "roi_axes")
            nodes += [c_start, c_idx]
            new_inputs[1] = scatter(start, idx, roi, "roi")
    return nodes + [_with_inputs(base, new_inputs)]


@adapter("Resize", 13)
def _resize_13(node: NodeProto, env: Env) -> list[NodeProto]:
    """Resize(11) requires roi and scales; an empty tensor stands for "not given"."""
    mode = _attr(node, "coordinate_transformation_mode", b"half_pixel")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode == "tf_half_pixel_for_nn":
        raise Decline("tf_half_pixel_for_nn")
    x, roi, scales, sizes = (_input(node, i) for i in range(4))
    nodes = []
    if not roi:
        roi, c = env.constant_node(np.zeros(0, dtype=np.float32), "roi")
        nodes.append(c)
    if not scales:
        scales, c = env.constant_node(np.zeros(0, dtype=np.float32), "scales")
        nodes.append(c)
    return nodes + [_with_inputs(node, [x, roi, scales, sizes])]


@adapter("DFT", 20, reads_constants=True)
def _dft_axis_to_attribute(node: NodeProto, env: Env) -> list[NodeProto]:
    axis = _need_const(node, env, 2, "axis")
    axis = -2 if axis is None else _ints(axis)[0]
    if axis < 0:
        rank = env.rank(node.input[0])
        if rank is None:
            raise Decline("a negative DFT axis needs the input's rank, which is unknown")
        axis += rank
    return [_with_inputs(_set_attrs(node, axis=axis), node.input[:2])]


@adapter("Range", 27)
def _range_stash(node: NodeProto, env: Env) -> list[NodeProto]:
    elem = env.elem_type(node.input[0])
    base = _set_attrs(node, drop=["stash_type"])
    if elem not in (TensorProto.FLOAT16, TensorProto.BFLOAT16) or not _attr(
            node, "stash_type", 1):
        if elem is None:
            raise Decline("the input type is unknown")
        return [base]
    nodes, cast = [], []
    for name in node.input:
        c = env.fresh("f32")
        nodes.append(helper.make_node("Cast", [name], [c], to=TensorProto.FLOAT))
        cast.append(c)
    r = env.fresh("range")
    nodes.append(_with_outputs(_with_inputs(base, cast), [r]))
    nodes.append(helper.make_node("Cast", [r], [node.output[0]], to=elem))
    return nodes


@adapter("Trilu", 14)
def _trilu(node: NodeProto, env: Env) -> list[NodeProto]:
    """Trilu with Range/comparison/Where (opset 13): keep x[i, j] where j - i >= k
    (upper) or j - i <= k (lower)."""
    x = node.input[0]
    elem = env.elem_type(x)
    if elem is None:
        raise Decline("the input type is unknown")
    nodes = []
    shape = env.fresh("shape")
    nodes.append(helper.make_node("Shape", [x], [shape]))
    m2, c_m2 = env.constant_node(np.array(-2, dtype=np.int64), "m2")
    m1, c_m1 = env.constant_node(np.array(-1, dtype=np.int64), "m1")
    zero, c_zero = env.constant_node(np.array(0, dtype=np.int64), "zero")
    one, c_one = env.constant_node(np.array(1, dtype=np.int64), "one")
    rows_n, cols_n, rows, cols = (env.fresh(h) for h in ("n", "m", "rows", "cols"))
    ax, c_ax = env.constant_node(np.array([1], dtype=np.int64), "axis1")
    rows_col, diff, mask, out_zero = (env.fresh(h) for h in ("rows2d", "diff", "mask", "zero"))
    nodes += [c_m2, c_m1, c_zero, c_one, c_ax,
              helper.make_node("Gather", [shape, m2], [rows_n], axis=0),
              helper.make_node("Gather", [shape, m1], [cols_n], axis=0),
              helper.make_node("Range", [zero, rows_n, one], [rows]),
              helper.make_node("Range", [zero, cols_n, one], [cols]),
              helper.make_node("Unsqueeze", [rows, ax], [rows_col]),
              helper.make_node("Sub", [cols, rows_col], [diff])]
    k = _input(node, 1)
    if not k:
        k = zero
    else:
        k64 = env.fresh("k")
        nodes.append(helper.make_node("Cast", [k], [k64], to=TensorProto.INT64))
        k = k64
    compare = "GreaterOrEqual" if _attr(node, "upper", 1) else "LessOrEqual"
    nodes.append(helper.make_node(compare, [diff, k], [mask]))
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    z, c_z = env.constant_node(np.zeros((), dtype=dtype), "zero")
    nodes += [c_z, helper.make_node("Where", [mask, x, z], [node.output[0]])]
    return nodes


# -- the converter ----------------------------------------------------------------------


@dataclass
class Conversion:
    """How one node is converted: kept as it is (``function`` None) or a remedy function."""

    how: str
    function: FunctionProto | None = None  # formals: see _as_function


class Converter:
    """Rewrites nodes written for one opset into nodes valid at the ``to`` opsets."""

    def __init__(self, to: Mapping[str, int]) -> None:
        self.to = dict(to)
        self.used_rules: list[str] = []

    # one node -> nodes valid at `to` (outputs keep their names) ------------------------

    def convert(self, node: NodeProto, opsets: Mapping[str, int], env: Env,
                depth: int = 0) -> list[NodeProto]:
        if depth > MAX_DEPTH:
            raise Decline("conversion nests too deeply")
        domain = normalize_domain(node.domain)
        version = opsets.get(domain)
        if domain not in self.to or version is None or version <= self.to[domain]:
            self._infer(node, opsets, env)
            return [self._convert_subgraphs(node, opsets, env, depth)]
        target = self.to[domain]
        s_from = _get_schema(domain, node.op_type, version)
        if s_from is None:
            raise Decline(f"onnx has no schema for {node.op_type} at opset {version}")
        s_to = _get_schema(domain, node.op_type, target)
        self._infer(node, opsets, env)
        if s_to is not None and s_to.since_version == s_from.since_version:
            return [self._convert_subgraphs(node, opsets, env, depth)]
        label = f"{node.op_type}({s_from.since_version})"
        reasons: list[str] = []
        bounds = SEMANTIC_BOUNDARIES.get((domain, node.op_type), ())
        crosses = any(s_to is None or s_to.since_version < b <= s_from.since_version
                      for b in bounds)
        if s_to is not None and not crosses:
            try:
                kept = self._same_op(node, domain, s_from, target, env)
            except Decline as e:
                reasons.append(str(e))
                cropped = self._cropped_pool(node, domain, s_from, target, env)
                if cropped is not None:
                    self.used_rules.append(f"{node.op_type}({s_to.since_version}), cropped")
                    return cropped
            else:
                self.used_rules.append("same op, older version")
                return [self._convert_subgraphs(kept, opsets, env, depth)]
        low = s_to.since_version if s_to is not None else 0
        steps = [v for v in _adapter_versions(domain, node.op_type)
                 if low < v <= s_from.since_version]
        if steps:
            # the newest adapter in range lowers one step; from the node's own version down
            # to that one, the op must stay the same
            v = steps[-1]
            step_label = f"{node.op_type}({v})"
            try:
                start = node
                if v < s_from.since_version:
                    start = self._same_op(node, domain, s_from, v, env)
                env.emit_opset = v - 1
                lowered = ADAPTERS[(domain, node.op_type, v)](start, env)
                below = dict(opsets)
                below[domain] = v - 1
                out = []
                for n in lowered:
                    out.extend(self.convert(n, below, env, depth + 1))
                self.used_rules.append(f"adapter {step_label}")
                return out
            except Decline as e:
                reasons.append(f"adapter {step_label}: {e}")
        try:
            body_nodes, body_opsets = self._function_body(node, opsets, env, version)
        except Decline as e:
            reasons.append(str(e))
            body_nodes = None
        if body_nodes is not None:
            try:
                out = []
                for n in body_nodes:
                    out.extend(self.convert(n, body_opsets, env, depth + 1))
                self.used_rules.append(f"function body {label}")
                return out
            except Decline as e:
                reasons.append(f"its function body: {e}")
        if s_to is None and not reasons:
            reasons.append(f"{node.op_type} does not exist at {domain or 'ai.onnx'} opset "
                           f"{target} and has no function body or adapter")
        elif not reasons:
            reasons.append("no adapter or function body")
        raise Decline(f"{label}: " + "; ".join(reasons))

    def _convert_subgraphs(self, node: NodeProto, opsets, env: Env, depth: int) -> NodeProto:
        """Nodes inside a body's subgraphs (a body node's Loop, say) are converted too; a
        model's own subgraphs are not reached here (the pass sees their nodes directly)."""
        if not _has_graphs(node) or depth == 0:
            return node
        out = NodeProto()
        out.CopyFrom(node)
        _seed_subgraph_types(out, env)
        for a in out.attribute:
            graphs = [a.g] if a.type == AttributeProto.GRAPH else (
                list(a.graphs) if a.type == AttributeProto.GRAPHS else [])
            for g in graphs:
                converted = []
                for inner in g.node:
                    converted.extend(self.convert(inner, opsets, env, depth + 1))
                del g.node[:]
                g.node.extend(converted)
        return out

    def _function_body(self, node: NodeProto, opsets, env: Env, version: int):
        from rewriter.plugin import BodyUnavailable, schema_function_body, type_proto, type_string

        domain = normalize_domain(node.domain)
        type_strings = [type_string(env.types[n]) if n in env.types else None
                        for n in node.input]
        declared = {n: env.types[n] for n in node.input if n in env.types}
        for n, t in zip(node.input, type_strings):
            if n and t and n not in declared:
                declared[n] = type_proto(t)
        try:
            body = schema_function_body(node, version, type_strings, declared)
        except BodyUnavailable:
            raise Decline(f"the function body of {node.op_type} needs input types that are "
                          "unknown") from None
        if body is None:
            return None, None
        body_opsets = dict(opsets)
        for entry in body.opset_import:
            d = normalize_domain(entry.domain)
            if d != domain:
                body_opsets.setdefault(d, entry.version)
        body_opsets[domain] = version
        schema = _get_schema(domain, node.op_type, version)
        return _instantiate(body, node, env, schema), body_opsets

    # checks --------------------------------------------------------------------------

    def _same_op(self, node: NodeProto, domain: str, s_from, version: int, env: Env):
        """``node`` as a valid node of the op's version in force at ``version`` (attributes
        introduced later and set to their default are dropped), or Decline."""
        problem = self._invalid_at(node, domain, version, env)
        if problem is None:
            return node
        s_to = _get_schema(domain, node.op_type, version)
        stripped = self._drop_default_attributes(node, s_from, s_to) if s_to else None
        if stripped is not None:
            second = self._invalid_at(stripped, domain, version, env)
            if second is None:
                return stripped
            problem = second
        since = s_to.since_version if s_to is not None else version
        raise Decline(f"{node.op_type}({since}) does not accept it: {problem}")

    def _invalid_at(self, node: NodeProto, domain: str, version: int, env: Env) -> str | None:
        """Why ``node`` is not a valid node at ``version`` of its domain (None: it is)."""
        from onnx import shape_inference

        schema = _get_schema(domain, node.op_type, version)
        if schema is None:
            return f"no schema at opset {version}"
        if _has_graphs(node):
            return _formal_problem(node, schema, domain, version, env)
        types = {n: env.types.get(n) or TypeProto() for n in node.input if n}
        imports = dict(self.to)
        imports[domain] = version
        imports = [helper.make_opsetid(d, v) for d, v in imports.items()]
        try:
            out = shape_inference.infer_node_outputs(schema, node, types, opset_imports=imports)
        except Exception as e:  # noqa: BLE001 - onnx raises several kinds
            return _first_line(e)
        for name, t in out.items():
            known = env.types.get(name)
            if known is None or not t.WhichOneof("value"):
                continue
            if known.WhichOneof("value") != "tensor_type" or t.WhichOneof(
                    "value") != "tensor_type":
                continue
            before, after = known.tensor_type, t.tensor_type
            if before.elem_type and after.elem_type and before.elem_type != after.elem_type:
                return f"output {name!r} would change type"
            if before.HasField("shape") and after.HasField("shape"):
                a = [d.dim_value if d.HasField("dim_value") else None for d in before.shape.dim]
                b = [d.dim_value if d.HasField("dim_value") else None for d in after.shape.dim]
                if len(a) != len(b) or any(x is not None and y is not None and x != y
                                           for x, y in zip(a, b)):
                    return (f"it would compute another output shape ({_dims(b)} instead of "
                            f"{_dims(a)})")
        return None

    def _cropped_pool(self, node: NodeProto, domain: str, s_from, version: int, env: Env):
        """Pooling with ceil_mode=1: older versions also keep a last window that starts in
        the padding; the other windows are the same, so the extra one is sliced off (static
        shapes only)."""
        if domain != "" or node.op_type not in ("AveragePool", "MaxPool", "LpPool") or not _attr(
                node, "ceil_mode", 0) or version < 10:
            return None
        s_to = _get_schema(domain, node.op_type, version)
        candidate = self._drop_default_attributes(node, s_from, s_to) or node
        wanted = [env.shape(o) if o else None for o in node.output]
        if any(o and (w is None or None in w) for o, w in zip(node.output, wanted)):
            return None
        from onnx import shape_inference

        types = {n: env.types.get(n) or TypeProto() for n in candidate.input if n}
        try:
            got = shape_inference.infer_node_outputs(
                s_to, candidate, types, opset_imports=[helper.make_opsetid(domain, version)])
        except Exception:  # noqa: BLE001
            return None
        nodes, outputs = [], []
        for name, want in zip(node.output, wanted):
            if not name:
                outputs.append("")
                continue
            t = got.get(name)
            if t is None or not t.tensor_type.HasField("shape"):
                return None
            have = [d.dim_value if d.HasField("dim_value") else None
                    for d in t.tensor_type.shape.dim]
            if len(have) != len(want) or any(h is None or h < w for h, w in zip(have, want)):
                return None
            wide = env.fresh("uncropped")
            outputs.append(wide)
            starts, c_s = env.constant_node(np.zeros(len(want), dtype=np.int64), "starts")
            ends, c_e = env.constant_node(np.array(want, dtype=np.int64), "ends")
            nodes += [c_s, c_e, helper.make_node("Slice", [wide, starts, ends], [name])]
        return [_with_outputs(candidate, outputs), *nodes]

    @staticmethod
    def _drop_default_attributes(node: NodeProto, s_from, s_to) -> NodeProto | None:
        """``node`` without the attributes ``s_to`` lacks, when each is set to the value the
        newer version treats as "not there" (its default, or all ones for ``dilations``)."""
        extra = [a for a in node.attribute if a.name not in s_to.attributes]
        if not extra:
            return None
        for a in extra:
            if a.ref_attr_name:
                return None
            value = helper.get_attribute_value(a)
            formal = s_from.attributes.get(a.name)
            default = formal.default_value if formal is not None else None
            if default is not None and default.type and helper.get_attribute_value(
                    default) == value:
                continue
            if a.name == "dilations" and all(v == 1 for v in value):
                continue
            return None
        return _set_attrs(node, drop=[a.name for a in extra])

    # types and constants -----------------------------------------------------------------

    def _infer(self, node: NodeProto, opsets: Mapping[str, int], env: Env) -> None:
        """Record the output types (and constant values) of ``node`` read at ``opsets``."""
        from onnx import shape_inference

        domain = normalize_domain(node.domain)
        if node.op_type == "Constant" and domain == "" and node.output:
            value = _constant_value(node)
            if value is not None and value.size <= MAX_CONSTANT_ELEMENTS:
                env.constants[node.output[0]] = value
        version = opsets.get(domain)
        if version is None:
            return
        schema = _get_schema(domain, node.op_type, version)
        if schema is None:
            return
        if _has_graphs(node):
            types = dict(env.types)
        else:
            types = {n: env.types.get(n) or TypeProto() for n in node.input if n}
        data = {}
        for n in node.input:
            value = env.const(n)
            if value is not None and value.size <= 64 and value.dtype != object:
                data[n] = numpy_helper.from_array(value, n)
        imports = [helper.make_opsetid(d, v) for d, v in opsets.items()]
        try:
            out = shape_inference.infer_node_outputs(schema, node, types, data,
                                                     opset_imports=imports)
        except Exception:  # noqa: BLE001 - types stay unknown
            out = {}
        for name, t in out.items():
            if name and t.WhichOneof("value"):
                env.types[name] = t
        self._fold(node, env, domain)

    @staticmethod
    def _fold(node: NodeProto, env: Env, domain: str) -> None:
        """Constant-fold a node whose inputs are all small constants (so that an axes input
        computed from constants in a function body can still become an attribute)."""
        if domain != "" or node.op_type == "Constant" or not node.input or _has_graphs(node):
            return
        if node.op_type in ("Shape", "Size"):  # of a value whose shape is static
            dims = env.shape(node.input[0])
            if dims is None or any(d is None for d in dims) or not node.output:
                return
            if node.op_type == "Size":
                env.constants[node.output[0]] = np.array(int(np.prod(dims)), dtype=np.int64)
                return
            start, end = _attr(node, "start", 0), _attr(node, "end")
            env.constants[node.output[0]] = np.array(dims[start:end], dtype=np.int64)
            return
        if node.op_type not in _FOLDABLE:
            return
        values = [env.const(n) for n in node.input if n]
        if any(v is None for v in values):
            return
        try:
            results = _FOLDABLE[node.op_type](node, values)
        except Exception:  # noqa: BLE001 - not folded
            return
        for name, value in zip(node.output, results):
            if name and value is not None and np.asarray(value).size <= MAX_CONSTANT_ELEMENTS:
                env.constants[name] = np.asarray(value)


def _fold_cast(node, values):
    to = helper.tensor_dtype_to_np_dtype(_attr(node, "to"))
    return [values[0].astype(to)]


def _fold_slice(node, values):
    data, starts, ends = values[0], _ints(values[1]), _ints(values[2])
    axes = _ints(values[3]) if len(values) > 3 else list(range(len(starts)))
    steps = _ints(values[4]) if len(values) > 4 else [1] * len(starts)
    index = [slice(None)] * data.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        index[a] = slice(s, e, st)
    return [data[tuple(index)]]


def _fold_div(node, values):
    a, b = values
    if np.issubdtype(a.dtype, np.integer):
        return [(np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))).astype(a.dtype)]
    return [a / b]


_FOLDABLE: dict[str, Callable] = {
    "Slice": _fold_slice,
    "Div": _fold_div,
    "Gather": lambda node, v: [np.take(v[0], v[1], axis=_attr(node, "axis", 0))],
    "Identity": lambda node, v: [v[0]],
    "Cast": _fold_cast,
    "Neg": lambda node, v: [-v[0]],
    "Concat": lambda node, v: [np.concatenate(v, axis=_attr(node, "axis"))],
    "Add": lambda node, v: [v[0] + v[1]],
    "Sub": lambda node, v: [v[0] - v[1]],
    "Mul": lambda node, v: [v[0] * v[1]],
    "Unsqueeze": lambda node, v: [np.expand_dims(
        v[0], tuple(_ints(v[1]) if len(v) > 1 else _attr(node, "axes")))]
    if np.issubdtype(v[0].dtype, np.integer) else [None],
    "Squeeze": lambda node, v: [np.squeeze(
        v[0], tuple(_ints(v[1])) if len(v) > 1 else None)],
}


def _seed_subgraph_types(node: NodeProto, env: Env) -> None:
    """Types of a Loop/Scan/SequenceMap body's inputs (a function body often leaves them
    unstated), from the node's inputs."""
    body = next((a.g for a in node.attribute if a.name == "body"
                 and a.type == AttributeProto.GRAPH), None)
    if body is None:
        return
    actual = [env.type(n) if n else None for n in node.input]
    formal = list(body.input)
    pairs: list[tuple] = []
    if node.op_type == "Loop":
        pairs = [(formal[0], helper.make_tensor_type_proto(TensorProto.INT64, [])),
                 (formal[1], helper.make_tensor_type_proto(TensorProto.BOOL, []))]
        pairs += list(zip(formal[2:], actual[2:]))
    elif node.op_type == "Scan":
        n_scan = _attr(node, "num_scan_inputs", 0)
        n_state = len(node.input) - n_scan
        pairs = list(zip(formal[:n_state], actual[:n_state]))
        for f, t in zip(formal[n_state:], actual[n_state:]):
            if t is not None and t.WhichOneof("value") == "tensor_type":
                pairs.append((f, helper.make_tensor_type_proto(t.tensor_type.elem_type, None)))
    elif node.op_type == "SequenceMap":
        for f, t in zip(formal, actual):
            if t is not None and t.WhichOneof("value") == "sequence_type":
                t = t.sequence_type.elem_type
            pairs.append((f, t))
    for f, t in pairs:
        if t is not None and f.name not in env.types and t.WhichOneof("value"):
            env.types[f.name] = t


def _formal_problem(node: NodeProto, schema, domain: str, version: int, env: Env) -> str | None:
    """For nodes with subgraphs (If, Loop, Scan): attributes, arity and the types of inputs
    and of the subgraphs' inputs and outputs against the older schema."""
    from rewriter.plugin import onnx_schemas, type_string

    for a in node.attribute:
        if a.name not in schema.attributes:
            return f"unknown attribute {a.name!r}"
    formal = onnx_schemas().resolve(domain, node.op_type, version)
    if formal is None:
        return "no schema"
    if formal.inputs and formal.inputs[-1].option != "variadic" and len(
            node.input) > len(formal.inputs):
        return "too many inputs"
    allowed: set[str] = set()
    for f in (*formal.inputs, *formal.outputs):
        allowed |= set(formal.constraints.get(f.type_str, {f.type_str}))
    seen = [type_string(env.types[n]) for n in node.input if n in env.types]
    for a in node.attribute:
        graphs = [a.g] if a.type == AttributeProto.GRAPH else list(a.graphs)
        for g in graphs:
            seen += [type_string(v.type) for v in (*g.input, *g.output)]
    for t in seen:
        if t and t not in allowed:
            return f"type {t} is not accepted"
    return None


def _instantiate(body: FunctionProto, node: NodeProto, env: Env, schema) -> list[NodeProto]:
    """The body's nodes with formals bound to the node's actual values, fresh names for its
    own values and attribute references resolved."""
    mapping: dict[str, str] = {}
    for formal, actual in zip(body.input, list(node.input) + [""] * len(body.input)):
        mapping[formal] = actual
    for k, formal in enumerate(body.output):
        actual = node.output[k] if k < len(node.output) else ""
        mapping[formal] = actual or env.fresh(formal)
    attrs = {a.name: a for a in node.attribute}
    defaults = {a.name: a for a in body.attribute_proto}
    if schema is not None:
        for name, formal in schema.attributes.items():
            d = formal.default_value
            if name not in defaults and d is not None and d.type:
                defaults[name] = d
    out = []
    for n in body.node:
        new = NodeProto()
        new.CopyFrom(n)
        _bind(new, mapping, env, attrs, defaults)
        out.append(new)
    return out


def _bind(node: NodeProto, mapping: dict[str, str], env: Env, attrs, defaults) -> None:
    inputs = [mapping.get(n, n) if n else "" for n in node.input]
    del node.input[:]
    node.input.extend(inputs)
    outputs = []
    for n in node.output:
        if not n:
            outputs.append("")
            continue
        if n not in mapping:
            mapping[n] = env.fresh(n)
        outputs.append(mapping[n])
    del node.output[:]
    node.output.extend(outputs)
    resolved = []
    for a in node.attribute:
        if a.ref_attr_name:
            source = attrs.get(a.ref_attr_name) or defaults.get(a.ref_attr_name)
            if source is None:
                continue
            new = AttributeProto()
            new.CopyFrom(source)
            new.name = a.name
            resolved.append(new)
            continue
        if a.type == AttributeProto.GRAPH:
            _bind_graph(a.g, mapping, env, attrs, defaults)
        elif a.type == AttributeProto.GRAPHS:
            for g in a.graphs:
                _bind_graph(g, mapping, env, attrs, defaults)
        resolved.append(a)
    del node.attribute[:]
    node.attribute.extend(resolved)


def _bind_graph(g: GraphProto, outer: dict[str, str], env: Env, attrs, defaults) -> None:
    mapping = dict(outer)
    for v in (*g.input, *g.initializer):
        mapping[v.name] = env.fresh(v.name)
        v.name = mapping[v.name]
    for n in g.node:
        _bind(n, mapping, env, attrs, defaults)
    for v in (*g.output, *g.value_info):
        v.name = mapping.get(v.name, v.name)


# -- the pass ---------------------------------------------------------------------------


class _CeilingTarget(Target):
    """Reports every node whose operator version changes when its domain is lowered to
    the ``to`` opsets (what the conversion has to touch)."""

    name = "opset-conversion"

    def __init__(self, to: Mapping[str, int]) -> None:
        self.to = dict(to)

    def check_node(self, query: NodeQuery) -> Finding | None:
        domain, opset = query.domain, query.opset
        top = self.to.get(domain)
        if top is None or opset is None or opset <= top:
            return None
        schemas = self.schemas
        now = schemas.resolve(domain, query.node.op_type, opset)
        then = schemas.resolve(domain, query.node.op_type, top)
        if now is not None and then is not None and now.since_version == then.since_version:
            return None
        return self.finding(query, "opset-too-new", "changes version",
                            version=now.since_version if now is not None else opset)


def floors(targets) -> dict[str, tuple[int, str]]:
    """The highest ai.onnx opset floor any target sets, and the target setting it."""
    out: dict[str, tuple[int, str]] = {}
    for t in targets:
        for domain, low in (getattr(t, "min_opsets", None) or {}).items():
            domain = normalize_domain(domain)
            if domain == "" and low > out.get(domain, (0, ""))[0]:
                out[domain] = (low, t.name)
    return out


def _has_older_version(finding: Finding) -> bool:
    """Whether the finding's op existed, in another version, before the node's opset."""
    from onnx import defs

    domain = normalize_domain(finding.domain)
    opset = (finding.scope_opsets or {}).get(domain)
    if finding.node is None or domain not in CONVERTIBLE or opset is None:
        return False
    try:
        since = defs.get_schema(finding.op_type, opset, domain).since_version
        defs.get_schema(finding.op_type, since - 1, domain)
    except defs.SchemaError:
        return False
    return True


def ceilings(targets) -> dict[str, int]:
    """The lowest opset ceiling any target sets, per convertible domain."""
    out: dict[str, int] = {}
    for t in targets:
        for domain, top in (getattr(t, "max_opsets", None) or {}).items():
            domain = normalize_domain(domain)
            if domain in CONVERTIBLE:
                out[domain] = min(out.get(domain, top), top)
    return out


class _ModelFacts:
    """What conversions may look at: small constants and value types with shapes."""

    def __init__(self, model: ModelProto) -> None:
        from rewriter.plugin import declared_protos

        self.constants: dict[str, np.ndarray] = {}
        self.types: dict[str, TypeProto] = {}
        for scope in iter_scopes(model):
            g = scope.graph
            if g is not None:
                for t in g.initializer:
                    self._add(t.name, helper.make_tensor_type_proto(t.data_type, list(t.dims)))
                    n = int(np.prod(t.dims)) if len(t.dims) else 1
                    if n <= MAX_CONSTANT_ELEMENTS and t.data_location != TensorProto.EXTERNAL:
                        try:
                            self.constants[t.name] = numpy_helper.to_array(t)
                        except Exception:  # noqa: BLE001 - an odd tensor is just not constant
                            pass
                for name, t in declared_protos(g).items():
                    self._add(name, t)
            for node in scope.nodes:
                if node.op_type == "Constant" and normalize_domain(node.domain) == "" \
                        and node.output:
                    value = _constant_value(node)
                    if value is not None and value.size <= MAX_CONSTANT_ELEMENTS:
                        self.constants[node.output[0]] = value
        for name, t in _inferred_types(model).items():
            self._add(name, t)
        self.widened = widened_4bit(model)  # 4-bit weights, widened to 8 bits below 21

    def with_constants(self, extra: Mapping[str, TensorProto]) -> _ModelFacts:
        """These facts with the small tensors of ``extra`` as constants too (a copy)."""
        out = object.__new__(_ModelFacts)
        out.widened = self.widened
        out.types = dict(self.types)
        out.constants = dict(self.constants)
        for name, tensor in extra.items():
            n = int(np.prod(tensor.dims)) if len(tensor.dims) else 1
            if n <= MAX_CONSTANT_ELEMENTS and tensor.data_location != TensorProto.EXTERNAL:
                out.constants[name] = numpy_helper.to_array(tensor)
                out.types.setdefault(name, helper.make_tensor_type_proto(
                    tensor.data_type, list(tensor.dims)))
        return out

    def _add(self, name: str, t: TypeProto) -> None:
        """Keep the most informative type seen for ``name`` (a graph may declare a value
        with no type at all, or with no shape)."""
        kind = t.WhichOneof("value")
        if not kind:
            return
        old = self.types.get(name)
        if old is None or (kind == old.WhichOneof("value") == "tensor_type"
                           and not old.tensor_type.HasField("shape")
                           and t.tensor_type.HasField("shape")):
            self.types[name] = t


def _inferred_types(model: ModelProto) -> dict[str, TypeProto]:
    """Value types with shapes from onnx's shape inference, run on a copy of the model
    without its weights (only small constants keep their data)."""
    from onnx import shape_inference

    skeleton = ModelProto()
    skeleton.ir_version = model.ir_version
    skeleton.opset_import.extend(model.opset_import)
    skeleton.functions.extend(model.functions)
    g = skeleton.graph
    src = model.graph
    g.input.extend(src.input)
    g.output.extend(src.output)
    g.value_info.extend(src.value_info)
    g.node.extend(src.node)
    inputs = {v.name for v in src.input}
    for t in src.initializer:
        n = int(np.prod(t.dims)) if len(t.dims) else 1
        if n <= MAX_CONSTANT_ELEMENTS and t.data_location != TensorProto.EXTERNAL:
            g.initializer.append(t)
        elif t.name not in inputs:  # a weight: its type and shape are all inference needs
            g.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    try:
        inferred = shape_inference.infer_shapes(skeleton, data_prop=True)
    except Exception:  # noqa: BLE001 - declared types are used alone
        return {}
    out: dict[str, TypeProto] = {}

    def collect(graph: GraphProto) -> None:
        for vi in (*graph.value_info, *graph.output, *graph.input):
            out.setdefault(vi.name, vi.type)
        for node in graph.node:
            for a in node.attribute:
                if a.type == AttributeProto.GRAPH:
                    collect(a.g)
                elif a.type == AttributeProto.GRAPHS:
                    for sub in a.graphs:
                        collect(sub)

    collect(inferred.graph)
    return out


def _reads_constant(domain: str, op_type: str, value: np.ndarray) -> bool:
    """Whether lowering the op may read this constant input's value: its adapters read
    constants, or it has a function body whose nodes may (integer constants only there:
    shapes and axes, not weights)."""
    policy = _constant_policy(domain, op_type)
    return policy == "all" or (policy == "int" and np.issubdtype(value.dtype, np.integer))


@cache
def _constant_policy(domain: str, op_type: str) -> str | None:
    if (domain, op_type) in READS_CONSTANTS:
        return "all"
    if any(s.name == op_type and normalize_domain(s.domain) == domain and (
            s.has_function or s.has_context_dependent_function) for s in _all_schemas()):
        return "int"
    return None


@lru_cache(maxsize=1)
def _all_schemas():
    return tuple(defs.get_all_schemas_with_history())


def _digest(value: np.ndarray) -> bytes:
    return hashlib.blake2b(
        str(value.dtype).encode() + repr(value.shape).encode() + value.tobytes(), digest_size=16
    ).digest()


class OpsetConversionPass(RewritePass):
    """Lowers every node whose operator changed after the target opset, then the model's
    imports (see the module documentation)."""

    phase = "convert"

    def __init__(self) -> None:
        self._facts: _ModelFacts | None = None
        self._model: ModelProto | None = None
        self._ctx_targets = None
        self._cache: dict[tuple, Conversion | Decline] = {}
        self._raised_cache: tuple | None = None  # (model, version, raised model or Decline)

    def prepare(self, model: ModelProto, ctx: PassContext) -> None:
        self._model, self._facts = model, None
        self._ctx_targets = ctx.targets

    def facts(self) -> _ModelFacts:
        if self._facts is None:
            self._facts = _ModelFacts(self._model if self._model is not None else ModelProto())
        return self._facts

    # planning ----------------------------------------------------------------------------

    def handles(self, finding: Finding, ctx: PassContext) -> bool:
        if finding.reason == "opset-too-new":
            return normalize_domain(finding.domain) in ceilings(ctx.targets)
        if self._raise_to(ctx, finding.target) is not None:
            return True
        return finding.reason in OLDER_VERSION_REASONS and _has_older_version(finding)

    def offers_for_op(self, finding: Finding, ctx: PassContext) -> bool:
        # per node: an older version for a kernel or type the target lacks, and the
        # lowering of a node of a domain with a ceiling (both read the node)
        if finding.reason in OLDER_VERSION_REASONS:
            return False
        if finding.reason == "opset-too-new":
            return normalize_domain(finding.domain) not in ceilings(ctx.targets)
        return True  # raising the whole model to the target's floor, or nothing

    def offers(self, finding: Finding, ctx: PassContext) -> tuple[bool, str]:
        if finding.reason in OLDER_VERSION_REASONS and self._raise_to(ctx) is None:
            return self._offers_older_version(finding, ctx)
        if finding.reason != "opset-too-new":
            target = self._raise_to(ctx, finding.target)
            if target is None:
                return False, "converts opsets only (this finding is not about an opset)"
            result = self._raised(target)
            if isinstance(result, Decline):
                return False, f"cannot raise the model to opset {target}: {result}"
            return True, (f"raises the model to ai.onnx opset {target} (the lowest "
                          f"{finding.target} runs) with onnx's version converter")
        to = ceilings(ctx.targets)
        domain = normalize_domain(finding.domain)
        if domain not in to:
            return False, (f"no target sets a ceiling for {domain or 'ai.onnx'} that this "
                           f"pass can convert to")
        if finding.node is None:
            if finding.version is not None and finding.version > to[domain]:
                return True, f"converts the model to {domain or 'ai.onnx'} opset {to[domain]}"
            return False, "nothing to lower"
        if normalize_domain(finding.node.domain) != domain:
            return False, "not a node of the domain being lowered"
        result = self.conversion(finding.node, dict(finding.scope_opsets or {}),
                                 finding.input_types, to, finding.known_constants)
        if isinstance(result, Decline):
            return False, f"cannot lower to opset {to[domain]}: {result}"
        return True, result.how

    def conversion(self, node: NodeProto, opsets: Mapping[str, int], input_types,
                   to: Mapping[str, int],
                   known_constants: Mapping[str, TensorProto] | None = None,
                   ) -> Conversion | Decline:
        """The conversion of one node (cached by everything it depends on).
        ``known_constants``: values the model's own constants do not hold (a body node's
        Constant inputs, see :attr:`Finding.known_constants`)."""
        facts = self.facts()
        if known_constants:
            facts = facts.with_constants(known_constants)
        key = None
        if not _has_graphs(node):
            key = self._key(node, opsets, input_types, to, facts)
            hit = self._cache.get(key)
            if hit is not None:
                return hit
        try:
            result: Conversion | Decline = self._convert(node, opsets, input_types, to, facts)
        except Decline as e:
            result = e
        if key is not None:
            self._cache[key] = result
        return result

    @staticmethod
    def _key(node, opsets, input_types, to, facts: _ModelFacts) -> tuple:
        """Everything a conversion depends on: types (with shapes) of inputs and outputs,
        which inputs are the same value, attributes, and the values of constant inputs
        its lowering may read (see :func:`_reads_constant`)."""
        parts = []
        first: dict[str, int] = {}
        domain = normalize_domain(node.domain)
        for i, name in enumerate(node.input):
            if not name:
                parts.append(None)
                continue
            const = facts.constants.get(name)
            if const is not None and not _reads_constant(domain, node.op_type, const):
                const = None
            t = facts.types.get(name)
            parts.append((
                first.setdefault(name, i),
                input_types[i] if i < len(input_types) else None,
                t.SerializeToString() if t is not None else b"",
                _digest(const) if const is not None else None,
            ))
        outputs = tuple(facts.types[o].SerializeToString() if o in facts.types else bool(o)
                        for o in node.output)
        attrs = tuple(a.SerializeToString() for a in node.attribute)
        return (normalize_domain(node.domain), node.op_type, node.overload,
                tuple(sorted(opsets.items())), tuple(sorted(to.items())), tuple(parts),
                outputs, attrs)

    def _convert(self, node, opsets, input_types, to, facts: _ModelFacts) -> Conversion:
        from rewriter.plugin import type_proto

        types: dict[str, TypeProto] = {}
        constants: dict[str, np.ndarray] = {}
        for i, name in enumerate(node.input):
            if not name:
                continue
            t = facts.types.get(name)
            known = input_types[i] if i < len(input_types) else None
            if t is None and known:
                t = type_proto(known)
            if name in facts.widened and to.get("", 21) < 21 and t is not None:
                t = helper.make_tensor_type_proto(facts.widened[name], _type_dims(t))
            if t is not None:
                types[name] = t
            const = facts.constants.get(name)
            if const is not None and _reads_constant(normalize_domain(node.domain),
                                                     node.op_type, const):
                constants[name] = const
        for name in node.output:
            if name in facts.types:
                types[name] = facts.types[name]
        env = Env(types, constants)
        env.to = dict(to)
        converter = Converter(to)
        original = NodeProto()
        original.CopyFrom(node)
        nodes = converter.convert(original, opsets, env)
        how = converter.used_rules[-1] if converter.used_rules else "same op, older version"
        if len(nodes) == 1 and nodes[0].SerializeToString() == node.SerializeToString():
            return Conversion(how)
        if _has_graphs(node) and outer_references(node):
            raise Decline("a node whose subgraphs use the enclosing graph's values must be "
                          "lowered as it is")
        if any(a.ref_attr_name for a in node.attribute):
            raise Decline("an attribute refers to the enclosing function's attributes")
        return _as_function(node, nodes, to, how)

    # down-conversion for a runtime that has the op only at an older version -------------

    def _offers_older_version(self, finding: Finding, ctx: PassContext) -> tuple[bool, str]:
        version = self.older_version(finding, ctx)
        if isinstance(version, Decline):
            return False, str(version)
        return True, (f"converts the model to {normalize_domain(finding.domain) or 'ai.onnx'} "
                      f"opset {version}, where {finding.target} has {finding.op_type}")

    def older_version(self, finding: Finding, ctx: PassContext) -> int | Decline:
        """The newest opset below the node's at which the finding's target runs the node's
        op (as converted), e.g. RoiAlign-22 -> opset 21 (RoiAlign-16) for onnxruntime."""
        from onnx import defs

        node, domain = finding.node, normalize_domain(finding.domain)
        if node is None or domain not in CONVERTIBLE or normalize_domain(node.domain) != domain:
            return Decline("converts opsets of ai.onnx and ai.onnx.ml nodes only")
        opsets = dict(finding.scope_opsets or {})
        current = opsets.get(domain)
        target = next((t for t in ctx.targets if t.name == finding.target), None)
        if current is None or target is None:
            return Decline("the node's opset or target is unknown")
        key = ("older", self._key(node, opsets, finding.input_types, {}, self.facts()),
               finding.target)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        result: int | Decline = Decline(
            f"{finding.target} has no older version of {node.op_type} this pass reaches")
        types = {n: t for n, t in zip(node.input, finding.input_types) if n and t}
        version = current
        for _ in range(MAX_OLDER_STEPS):
            try:
                since = defs.get_schema(node.op_type, version, domain).since_version
            except defs.SchemaError:
                break
            version = since - 1  # the newest opset where the op had its previous version
            if version < 1:
                break
            to = {domain: version}
            query = NodeQuery(node=node, path=finding.path, domain=domain, opset=version,
                              types=types, opsets={**opsets, **to})
            if target.check_node(query) is not None:
                continue
            converted = self.conversion(node, opsets, finding.input_types, to)
            if isinstance(converted, Decline):
                result = Decline(f"{node.op_type} cannot be lowered to opset {version}: "
                                 f"{converted}")
                break
            result = version
            break
        self._cache[key] = result
        return result

    def _older_opset_for_targets(self, model: ModelProto, ctx: PassContext) -> dict[str, int]:
        """The opsets to convert to so that every node a target lacks at its version runs
        at an older one (the lowest such opset over all findings; {} when none)."""
        from rewriter.plugin import find_unsupported

        best: dict[str, int] = {}
        for target in ctx.targets:
            for f in find_unsupported(model, target, keep_nodes=True):
                if f.reason not in OLDER_VERSION_REASONS:
                    continue
                version = self.older_version(f, ctx)
                if isinstance(version, Decline):
                    continue
                domain = normalize_domain(f.domain)
                best[domain] = min(best.get(domain, version), version)
        return best

    # up-conversion -----------------------------------------------------------------------

    def _raise_to(self, ctx: PassContext, target_name: str | None = None) -> int | None:
        """The opset the model must be raised to (for ``target_name``, or any target)."""
        low = floors(ctx.targets).get("")
        model = self._model
        if low is None or model is None or (target_name and low[1] != target_name):
            return None
        current = opset_map(model.opset_import).get("")
        if current is None or current >= low[0]:
            return None
        return low[0]

    def _raised(self, version: int) -> ModelProto | Decline:
        cached = self._raised_cache
        if cached is not None and cached[0] is self._model and cached[1] == version:
            return cached[2]
        result: ModelProto | Decline
        model = self._model
        top = ceilings(self._ctx_targets).get("") if self._ctx_targets else None
        if top is not None and top < version:
            result = Decline(f"another target allows at most opset {top}")
        elif model.functions:
            result = Decline("onnx's version converter drops model-local functions")
        else:
            from onnx import version_converter

            try:
                result = version_converter.convert_version(model, version)
            except Exception as e:  # noqa: BLE001 - the converter raises several kinds
                result = Decline(f"onnx's version converter failed: {_first_line(e)}")
        self._raised_cache = (model, version, result)
        return result

    # running -----------------------------------------------------------------------------

    def run(self, model: ModelProto, ctx: PassContext) -> ModelProto | None:
        from rewriter.plugin import find_unsupported

        self.prepare(model, ctx)
        up = self._raise_to(ctx)
        if up is not None:
            result = self._raised(up)
            if isinstance(result, Decline):
                return None
            ctx.record("conversion", self.plugin, "onnx version converter",
                       f"ai.onnx opset {opset_map(model.opset_import).get('')} -> {up}")
            out = ModelProto()
            out.CopyFrom(result)
            self._model, self._facts = out, None
            return out
        to = ceilings(ctx.targets)
        for domain, older in self._older_opset_for_targets(model, ctx).items():
            to[domain] = min(to.get(domain, older), older)  # a ceiling and an older version
        if not to:
            return None
        if to.get("", 21) < 21 and widened_4bit(model):
            model = _copy(model)
            for name in widen_4bit_initializers(model):
                ctx.record("conversion", self.plugin, "4-bit weights widened to 8 bits "
                           "(no 4-bit types before opset 21)", name)
            self._model, self._facts = model, None
        findings = find_unsupported(model, _CeilingTarget(to), keep_nodes=True)
        plans = []
        for f in findings:
            if f.node is None or f.reason != "opset-too-new":
                continue
            result = self.conversion(f.node, dict(f.scope_opsets or {}), f.input_types, to)
            if isinstance(result, Decline):
                return None  # planning said yes; leave the model for the report to show
            plans.append((f, result))
        if not _lowers_imports(model, to) and not plans:
            return None
        used_before = _referenced(model)
        functions: dict[bytes, FunctionProto] = {}
        for f, result in plans:
            ctx.record("conversion", self.plugin, result.how, f.op_label)
            if result.function is None:
                continue
            key = result.function.SerializeToString()
            fn = functions.get(key)
            if fn is None:
                name = f"{f.op_type}_to_{to.get(f.domain)}_{len(functions)}"
                fn = functions[key] = specialise(result.function, name, to, self.plugin,
                                                 result.how)
            _call(f.node, fn)
        _lower_imports(model, to)
        for local in model.functions:
            if not any(normalize_domain(o.domain) == REMEDY_DOMAIN for o in local.opset_import):
                entry = local.opset_import.add()
                entry.domain, entry.version = REMEDY_DOMAIN, 1
        out = splice(model, list(functions.values())) if functions else model
        _drop_dead_constants(out, used_before - _referenced(out))
        forget_contradicted_constant_shapes(out)  # genai builder scalars, see there
        self._model, self._facts = out, None
        return out


def _copy(model: ModelProto) -> ModelProto:
    out = ModelProto()
    out.CopyFrom(model)
    return out


def _type_dims(t: TypeProto) -> list | None:
    """The dimensions of a tensor type (values or names), None without a shape."""
    if not t.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in t.tensor_type.shape.dim]


def _referenced(model: ModelProto) -> set[str]:
    """Every value name some node reads or some graph returns, anywhere in the model."""
    names: set[str] = set()
    for scope in iter_scopes(model):
        for node in scope.nodes:
            names.update(node.input)
        if scope.graph is not None:
            names.update(v.name for v in scope.graph.output)
        else:
            names.update(scope.function.output)
    return names


def _drop_dead_constants(model: ModelProto, unused: set[str]) -> None:
    """Remove the Constant nodes and initializers only converted nodes read (an axes input
    that became an attribute); what was unused before the conversion stays."""
    if not unused:
        return
    edits = []  # found first, applied after the walk (which indexes the nodes it visits)
    for scope in iter_scopes(model):
        nodes = scope.nodes
        dead = [i for i, n in enumerate(nodes) if n.op_type == "Constant" and n.domain in (
            "", "ai.onnx") and n.output and all(o in unused for o in n.output)]
        g = scope.graph
        kept = None
        if g is not None:
            inputs = {v.name for v in g.input}
            kept = [t for t in g.initializer if t.name not in unused or t.name in inputs]
            if len(kept) == len(g.initializer):
                kept = None
        if dead or kept is not None:
            edits.append((nodes, dead, g, kept))
    for nodes, dead, g, kept in edits:
        for i in reversed(dead):
            del nodes[i]
        if kept is not None:
            del g.initializer[:]
            g.initializer.extend(kept)


def _lowers_imports(model: ModelProto, to: Mapping[str, int]) -> bool:
    for container in (model, *model.functions):
        for entry in container.opset_import:
            d = normalize_domain(entry.domain)
            if d in to and entry.version > to[d]:
                return True
    return False


def _lower_imports(model: ModelProto, to: Mapping[str, int]) -> None:
    for container in (model, *model.functions):
        for entry in container.opset_import:
            d = normalize_domain(entry.domain)
            if d in to and entry.version > to[d]:
                entry.version = to[d]


def _as_function(node: NodeProto, nodes: list[NodeProto], to, how: str) -> Conversion:
    """Wrap the converted nodes as a function of the node's (distinct, present) inputs."""
    inputs: list[str] = []
    for n in node.input:
        if n and n not in inputs:
            inputs.append(n)
    outputs = [n for n in node.output if n]
    rename = {a: f"x{i}" for i, a in enumerate(inputs)}
    rename.update({a: f"y{i}" for i, a in enumerate(outputs)})
    body = []
    for n in nodes:
        new = NodeProto()
        new.CopyFrom(n)
        _rename_refs(new, rename)
        body.append(new)
    used = {normalize_domain(n.domain) for n in body}
    imports = [helper.make_opsetid(d, v) for d, v in sorted(to.items()) if d in used or d == ""]
    for d in sorted(used - set(to)):
        if d:
            imports.append(helper.make_opsetid(d, 1))
    fn = helper.make_function(REMEDY_DOMAIN, node.op_type, [rename[a] for a in inputs],
                              [rename[a] for a in outputs], body, imports)
    return Conversion(how, fn)


def _rename_refs(node: NodeProto, rename: Mapping[str, str]) -> None:
    for field in (node.input, node.output):
        names = [rename.get(n, n) for n in field]
        del field[:]
        field.extend(names)
    for a in node.attribute:
        graphs = [a.g] if a.type == AttributeProto.GRAPH else (
            list(a.graphs) if a.type == AttributeProto.GRAPHS else [])
        for g in graphs:
            for inner in g.node:
                _rename_refs(inner, rename)
            for v in g.output:
                v.name = rename.get(v.name, v.name)


def _call(node: NodeProto, fn: FunctionProto) -> None:
    """Point ``node`` at ``fn``: its distinct present inputs and present outputs, in order,
    bind the function's formals (as :func:`_as_function` made them)."""
    inputs = list(dict.fromkeys(n for n in node.input if n))
    outputs = [n for n in node.output if n]
    retarget(node, fn)
    del node.input[:]
    node.input.extend(inputs)
    del node.output[:]
    node.output.extend(outputs)


@hookimpl
def register_passes(registry):
    registry.add("opset-conversion", OpsetConversionPass, phase="convert")
