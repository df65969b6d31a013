"""What the com.microsoft modules share: the body builder (``Body``), the element-type and
input helpers, the fused activations (``activation``, also read by ``onnx-removed``),
trimming of unused outputs, literal folding, one node run on onnxruntime's own kernel (the
numpy oracles' helper), and the registration of one op."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import FunctionProto, TensorProto, helper, numpy_helper

from rewriter.plugin import Declined, FunctionBuilder, OpSample, typed_tensor

DOMAIN = "com.microsoft"
# Body opset for a model that imports no ai.onnx opset (its body brings the import along).
NO_IMPORT_OPSET = 17

FLOAT_TYPES = {
    "tensor(float)": TensorProto.FLOAT,
    "tensor(float16)": TensorProto.FLOAT16,
    "tensor(double)": TensorProto.DOUBLE,
    "tensor(bfloat16)": TensorProto.BFLOAT16,
}
LOW_PRECISION = (TensorProto.FLOAT16, TensorProto.BFLOAT16)
F32_F16 = ("float", "float16")


def fold_literal_casts(fn: FunctionProto, elem_type: int | None) -> FunctionProto:
    """Replace ``CastLike(Constant(value=literal), x)`` by a ``Constant`` of ``elem_type``
    (the known element type of ``x``) and drop constants nothing reads any more. Constants
    whose value is a reference attribute (``value_float = @alpha``) are left alone."""
    if elem_type is None:
        return fn
    literals = {}
    for node in fn.node:
        if (node.op_type == "Constant" and node.domain in ("", "ai.onnx")
                and len(node.attribute) == 1):
            attr = node.attribute[0]
            if attr.name == "value" and not attr.ref_attr_name:
                literals[node.output[0]] = numpy_helper.to_array(attr.t)
    if not literals:
        return fn
    new_nodes = []
    for node in fn.node:
        if (node.op_type == "CastLike" and node.domain in ("", "ai.onnx")
                and node.input[0] in literals):
            tensor = typed_tensor(literals[node.input[0]], elem_type, node.output[0])
            new_nodes.append(helper.make_node("Constant", [], list(node.output), value=tensor))
        else:
            new_nodes.append(node)
    used = {name for node in new_nodes for name in node.input} | set(fn.output)
    kept = [n for n in new_nodes
            if not (n.op_type == "Constant" and n.output[0] in literals
                    and n.output[0] not in used)]
    out = FunctionProto()
    out.CopyFrom(fn)
    del out.node[:]
    out.node.extend(kept)
    return out


def trim_outputs(fn: FunctionProto, used: list[bool]) -> FunctionProto:
    """Drop trailing function outputs the call site does not use, and stop computing
    optional node outputs nothing reads any more."""
    keep = max((i for i, u in enumerate(used) if u), default=0) + 1
    out = FunctionProto()
    out.CopyFrom(fn)
    del out.output[keep:]
    needed = set(out.output) | {name for n in out.node for name in n.input}
    for node in out.node:
        for i in range(1, len(node.output)):
            if node.output[i] not in needed:
                node.output[i] = ""
        while len(node.output) > 1 and not node.output[-1]:
            del node.output[-1]
    return out


# -- body builder -------------------------------------------------------------------------


class Body(FunctionBuilder):
    """Builds one FunctionProto node by node, in the forms of ai.onnx ``opset``."""

    def shape_part(self, x: str, start: int, end: int | None = None) -> str:
        """``Shape(x)[start:end]`` as an int64 vector."""
        shape = self.op("Shape", x)
        return self.slice(shape, [start], [end if end is not None else 2 ** 62], [0])


def body_opset(ctx) -> int:
    """The ai.onnx opset a body is written for: the model's, or a default when the model
    imports none (the engine then keeps the body's own import)."""
    if "" not in (ctx.opsets or {}) and "ai.onnx" not in (ctx.opsets or {}):
        return NO_IMPORT_OPSET
    return ctx.opset


def input_elem_type(ctx, index: int = 0) -> int | None:
    types = list(ctx.input_types or [])
    return FLOAT_TYPES.get(types[index]) if len(types) > index and types[index] else None


def shared_elem_type(ctx, *indices: int) -> int | None:
    """The float element type of the first input among ``indices`` whose type is known (the
    op binds them to one type parameter; an input fed by another contrib op may have a type
    the engine cannot infer)."""
    return next((t for t in (input_elem_type(ctx, i) for i in indices) if t is not None), None)


def any_elem_type(ctx, index: int) -> int | None:
    """The element type of input ``index`` (any tensor type), if known."""
    types = list(ctx.input_types or [])
    if len(types) > index and types[index] and types[index].startswith("tensor("):
        return getattr(TensorProto, types[index][7:-1].upper(), None)
    return None


def single_output(node) -> bool:
    return len(node.output) == 1 and bool(node.output[0])


def formal_inputs(node, formal: Sequence[str]) -> list[str]:
    """The formal input names the node binds: up to its last present input."""
    return list(formal[:len(node.input)])


def unknown_attributes(node, known: Sequence[str]) -> bool:
    return any(a.name not in known for a in node.attribute)


def activation(b: Body, x: str, kind: str, alpha=None, beta=None, gamma=None) -> str:
    """``kind`` applied to ``x`` with standard ops; raises Declined for unknown kinds or
    missing parameters (onnxruntime requires them too)."""
    def need(*values):
        if any(v is None for v in values):
            raise Declined(f"{kind} needs its parameters")
    if kind in ("", None):
        return x
    if kind in ("Relu", "Tanh", "Sigmoid", "Softsign", "Softplus"):
        return b.op(kind, x)
    if kind in ("LeakyRelu", "Elu", "ThresholdedRelu"):
        need(alpha)
        if kind == "ThresholdedRelu" and b.opset < 10:
            raise Declined("ThresholdedRelu is an ai.onnx op from opset 10")
        return b.op(kind, x, alpha=float(alpha))
    if kind == "HardSigmoid":
        need(alpha, beta)
        return b.op(kind, x, alpha=float(alpha), beta=float(beta))
    if kind == "Selu":
        need(alpha, gamma)
        return b.op(kind, x, alpha=float(alpha), gamma=float(gamma))
    if kind == "Clip":
        return b.clip(x, alpha, beta)
    if kind == "ScaledTanh":  # alpha * tanh(beta * x)
        need(alpha, beta)
        return b.op("Mul", b.literal(alpha, x),
                    b.op("Tanh", b.op("Mul", b.literal(beta, x), x)))
    if kind == "ParametricSoftplus":  # alpha * ln(1 + exp(beta * x))
        need(alpha, beta)
        return b.op("Mul", b.literal(alpha, x),
                    b.op("Softplus", b.op("Mul", b.literal(beta, x), x)))
    raise Declined(f"activation {kind!r}")


def onnxruntime_node(op_type: str, domain: str, arrays, outputs: int = 1, **attributes):
    """Run one node on onnxruntime's own CPU kernel (absent inputs as None)."""
    import onnxruntime as ort

    names = [f"i{i}" if a is not None else "" for i, a in enumerate(arrays)]
    while names and not names[-1]:
        names.pop()
    present = [(n, np.asarray(a)) for n, a in zip(names, arrays) if n]
    node = helper.make_node(op_type, names, [f"o{i}" for i in range(outputs)], domain=domain,
                            **attributes)
    graph = helper.make_graph([node], "oracle", [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in present], [helper.make_value_info(f"o{i}", helper.TypeProto())
                               for i in range(outputs)])
    imports = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 8
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, dict(present))


def sample(*inputs, **kw) -> OpSample:
    """An oracle sample of ``inputs`` (``OpSample``'s keywords)."""
    return OpSample(list(inputs), **kw)


def add(registry, op_type: str, builder, opsets, checked: dict, dtypes=F32_F16, exact=True,
        note: str = "", domain: str = DOMAIN) -> None:
    """Registers ``builder`` for ``op_type`` with its oracle and samples (``checked``)."""
    registry.add(domain, op_type, builder, opsets=opsets, dtypes=dtypes, exact=exact,
                 description=f"com-microsoft:{op_type}" + (f" ({note})" if note else ""),
                 **checked)
