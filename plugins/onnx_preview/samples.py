"""The oracle samples of the onnx-preview decompositions (the reference evaluator implements
all four ops), the modifier graphs they use, and the optimizers' reference in the tensors'
type."""

from __future__ import annotations

import numpy as np
from onnx import GraphProto, NodeProto, TensorProto, helper

from rewriter.plugin import Arg, OpSample

from .common import TRAINING

_F32, _F64 = TensorProto.FLOAT, TensorProto.DOUBLE


def modifier(name: str, nodes: list[NodeProto], elem: int = _F32,
             initializers=()) -> GraphProto:
    """A score_mod/prob_mod graph ``s -> s_out``."""
    return helper.make_graph(nodes, name, [helper.make_tensor_value_info("s", elem, None)],
                             [helper.make_tensor_value_info("s_out", elem, None)],
                             initializer=list(initializers))


def _scalar(name: str, value, elem: int):
    return helper.make_tensor(name, elem, [], [value])


def bias_mod(value: float = 0.5, elem: int = _F32) -> GraphProto:
    """A score_mod graph adding ``value`` to every score."""
    return modifier("bias_mod", [helper.make_node("Add", ["s", "bias"], ["s_out"])], elem,
                    [_scalar("bias", value, elem)])


def causal_mod(elem: int = _F32) -> GraphProto:
    """Masks positions above the diagonal with -inf, built from the scores' own shape."""
    def const(name, value):
        return helper.make_node("Constant", [], [name], value=helper.make_tensor(
            name, TensorProto.INT64, [len(value)] if isinstance(value, list) else [],
            value if isinstance(value, list) else [value]))
    nodes = [
        const("i2", [2]), const("i3", [3]), const("i4", [4]), const("zero", 0),
        const("one", 1), helper.make_node("Shape", ["s"], ["shape"]),
        helper.make_node("Slice", ["shape", "i2", "i3"], ["l1"]),
        helper.make_node("Slice", ["shape", "i3", "i4"], ["s1"]),
        helper.make_node("Squeeze", ["l1"], ["l"]), helper.make_node("Squeeze", ["s1"], ["n"]),
        helper.make_node("Range", ["zero", "l", "one"], ["rows"]),
        helper.make_node("Range", ["zero", "n", "one"], ["cols"]),
        helper.make_node("Unsqueeze", ["rows", "one"], ["rows2"]),
        helper.make_node("Greater", ["cols", "rows2"], ["above"]),
        helper.make_node("Constant", [], ["ninf"], value=_scalar("ninf", -np.inf, elem)),
        helper.make_node("Where", ["above", "ninf", "s"], ["s_out"]),
    ]
    return modifier("causal", nodes, elem)


def _if_mod(elem: int = _F32) -> GraphProto:
    """A modifier with a nested If whose branches reuse names of the body around them."""
    then = helper.make_graph([helper.make_node("Neg", ["s"], ["Scores"])], "then", [],
                             [helper.make_tensor_value_info("Scores", elem, None)])
    other = helper.make_graph([helper.make_node("Identity", ["s"], ["Probs"])], "else", [],
                              [helper.make_tensor_value_info("Probs", elem, None)])
    return modifier("if_mod", [helper.make_node("If", ["flag"], ["s_out"], then_branch=then,
                                                else_branch=other)], elem,
                    [helper.make_tensor("flag", TensorProto.BOOL, [], [True])])


def _halve_mod(elem: int = _F32) -> GraphProto:
    return modifier("halve", [helper.make_node("Mul", ["s", "half"], ["s_out"])], elem,
                    [_scalar("half", 0.5, elem)])


def _flex_sample(name, q_heads=2, kv_heads=2, e=4, ev=4, opset=26, dtypes=("float",),
                 **attributes) -> OpSample:
    return OpSample([f"T[2,{q_heads},3,{e}]", f"T[2,{kv_heads},5,{e}]",
                     f"T[2,{kv_heads},5,{ev}]"], attributes=attributes, opset=opset,
                    dtypes=list(dtypes), name=name,
                    tolerance=(1e-2, 2e-3) if "float16" in dtypes else None)


def flex_samples() -> list[OpSample]:
    """FlexAttention's samples: scales, grouped heads, modifier graphs, precisions."""
    return [
        _flex_sample("default"), _flex_sample("scale", scale=0.3),
        _flex_sample("gqa", q_heads=4, kv_heads=2), _flex_sample("head-sizes", e=6, ev=3),
        _flex_sample("score-mod", score_mod=bias_mod()),
        _flex_sample("causal", score_mod=causal_mod()),
        _flex_sample("prob-mod", prob_mod=_halve_mod()),
        _flex_sample("both-mods-nested-if", score_mod=_if_mod(), prob_mod=_halve_mod(),
                     scale=0.5),
        _flex_sample("double-softmax", softmax_precision=_F64, score_mod=bias_mod(0.25, _F64)),
        _flex_sample("gqa-causal", opset=13, q_heads=4, kv_heads=1, score_mod=causal_mod()),
        _flex_sample("bias", q_heads=4, kv_heads=2, score_mod=bias_mod(0.5, _F64),
                     dtypes=("double",)),
        # float16: the softmax in float32 by default
        _flex_sample("bias", q_heads=4, kv_heads=2, score_mod=bias_mod(0.5),
                     dtypes=("float16",)),
    ]


OPTIMIZER_INPUT_KINDS = {"Adagrad": "XGH", "Adam": "XGVH", "Momentum": "XGV"}
OPTIMIZER_ATTRIBUTES = {
    "Adagrad": [{}, dict(decay_factor=0.1, epsilon=1e-3, norm_coefficient=0.01)],
    "Adam": [{}, dict(alpha=0.8, beta=0.95, epsilon=1e-4, norm_coefficient=0.02,
                      norm_coefficient_post=0.05)],
    "Momentum": [dict(alpha=0.9, beta=0.5, mode="standard", norm_coefficient=0.01),
                 dict(alpha=0.95, beta=0.7, mode="nesterov", norm_coefficient=0.001)],
}


def optimizer_sample(op_type: str, attributes: dict, count: int, t: int, opset: int = 13,
                     dtypes=("float",), rate: str = "T", oracle: str | None = None) -> OpSample:
    """One optimizer sample: ``count`` tensors of each kind, step ``t``."""
    shapes = ["[3,4]", "[5]", "[2,1,3]"]
    tensors = [Arg(f"T{shapes[i % 3]}", low=0 if kind == "H" else -2, high=2)
               for kind in OPTIMIZER_INPUT_KINDS[op_type] for i in range(count)]
    outputs = ["T"] * (count * (len(OPTIMIZER_INPUT_KINDS[op_type]) - 1))
    variant = "defaults" if not attributes else attributes.get("mode", "attributes")
    return OpSample([Arg(f"{rate}[]", values=0.1), Arg("int64[]", values=t), *tensors],
                    outputs, attributes, opset=opset, dtypes=list(dtypes), oracle=oracle,
                    name=f"{variant}-{count}x-t{t}" + (f"-rate-{rate}" if rate != "T" else ""))


def optimizer_samples(op_type: str) -> list[OpSample]:
    """Each attribute set with 1 and 3 float tensors, 2 double ones, at T = 0 and 3 (the
    branches of Adam's and Momentum's T > 0); one at opset 9."""
    samples = [optimizer_sample(op_type, attributes, count, t, dtypes=dtypes)
               for attributes in OPTIMIZER_ATTRIBUTES[op_type] for t in (0, 3)
               for count, dtypes in ((1, ("float",)), (3, ("float",)), (2, ("double",)))]
    return samples + [optimizer_sample(op_type, OPTIMIZER_ATTRIBUTES[op_type][-1], 2, 4,
                                       opset=9)]


def _reference_in_tensor_types(op_type: str, arrays, attributes) -> tuple:
    """The reference evaluator's optimizer, its outputs in the tensors' type as the spec
    defines them (``T3``): the evaluator's Adam returns float64 for one float tensor and
    float32 for several double ones, and every optimizer follows a double ``R``."""
    from onnx.reference import ReferenceEvaluator

    names = [f"i{k}" for k in range(len(arrays))]
    kinds = OPTIMIZER_INPUT_KINDS[op_type]
    outputs = [f"o{k}" for k in range((len(arrays) - 2) // len(kinds) * (len(kinds) - 1))]
    node = helper.make_node(op_type, names, outputs, domain=TRAINING, **attributes)
    graph = helper.make_graph([node], op_type, [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in zip(names, arrays)], [helper.make_value_info(o, helper.TypeProto())
                                          for o in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid(TRAINING, 1)])
    results = ReferenceEvaluator(model).run(None, dict(zip(names, arrays)))
    return tuple(np.asarray(r).astype(arrays[2].dtype) for r in results)


def adagrad_reference(*arrays, **attributes):
    """``Adagrad`` by the reference evaluator, outputs in the tensors' type."""
    return _reference_in_tensor_types("Adagrad", arrays, attributes)


def adam_reference(*arrays, **attributes):
    """``Adam`` by the reference evaluator, outputs in the tensors' type."""
    return _reference_in_tensor_types("Adam", arrays, attributes)


def momentum_reference(*arrays, **attributes):
    """``Momentum`` by the reference evaluator, outputs in the tensors' type."""
    return _reference_in_tensor_types("Momentum", arrays, attributes)
