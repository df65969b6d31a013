"""Decompositions ``onnx-functions``: every standard op the ONNX spec defines as a function
(``schema.has_function`` or a context-dependent function) can be lowered to its body when a
target lacks it; the body is specialised for the node's attributes, input types and the
model's opset, and nested function ops are lowered in later rounds as needed.

Oracle: the expected outputs of the op's ONNX backend node test cases (numpy code written
from the op's documentation, not its function body). ``Bernoulli``'s cases are random draws,
so it is checked on probabilities 0 and 1 (deterministic) against the reference evaluator's
own implementation.

``LinearAttention`` is lowered to the onnx-lowering plugin's body instead of the spec's:
the same recurrence as a ``Loop`` rather than a ``Scan`` (which OpenVINO 2026.4's frontend
cannot convert), checked against the reference evaluator's own implementation.

``Softplus`` is lowered to a body of this plugin's too: the spec's ``Log(Exp(x) + 1)`` is its
definition written literally, which overflows to inf for x above ~88 (float32) where
onnxruntime's and OpenVINO's kernels give x (found by the edges input regime: FusedGemm's
Softplus activation lowered for opset 13); here ``Max(x, 0) + Log(1 + Exp(-|x|))``, the
same function without the overflow, checked against onnxruntime's own Softplus kernel on
values up to ±100.

A ``ConstantOfShape`` of a spec body without ``value`` gets the default written out (float32
zeros): tract 0.23 fills it with float64 zeros, so Attention's body did not type there.

One spec body is wrong and is corrected here: ``Bernoulli``'s (onnx 1.23, opset 15+) draws
``Greater(RandomUniformLike(p), p)``, which is 1 with probability ``1 - p``; the op is
documented as "an output of 1 is produced with probability p" (the reference evaluator's
``np.random.binomial(1, p)``). The body drawn here is ``Less(uniform, p)``. (onnxruntime 1.32,
which runs Bernoulli by expanding that body, gives 0 for p = 1.)
"""

from __future__ import annotations

from rewriter.plugin import Arg, Declined, DecompositionContext, OpSample, hookimpl

# ops whose backend cases cannot be the oracle, with what checks them instead
_OWN_ORACLES = {
    "Bernoulli": ("reference", [
        OpSample([Arg("T[3,4]", values=[[0, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 1]])],
                 dtypes=["float", "double"], opset=15),
        OpSample([Arg("T[5]", values=[1, 0, 1, 1, 0])], outputs=["int64"],
                 attributes={"dtype": 7}, dtypes=["float"], opset=22, name="to-int64"),
    ]),
}


def function_ops() -> list[tuple[str, str, int]]:
    """(domain, op_type, first version with a body) for every standard function op."""
    from onnx import defs

    found: dict[tuple[str, str], int] = {}
    for schema in defs.get_all_schemas_with_history():
        if schema.deprecated or schema.domain not in ("", "ai.onnx.ml"):
            continue
        versions = list(schema.function_opset_versions) + list(
            schema.context_dependent_function_opset_versions
        )
        if not (schema.has_function or schema.has_context_dependent_function) or not versions:
            continue
        key = (schema.domain, schema.name)
        # the opset the body is written for, which may be newer than the schema (Relu-14
        # has a body from opset 18 only)
        found[key] = min(found.get(key, 1 << 30), max(schema.since_version, min(versions)))
    return sorted((d, op, v) for (d, op), v in found.items())


def lower_to_function_body(ctx: DecompositionContext):
    """The spec's own body for this node at the model's opset (Declined when it has none
    or it cannot be built for these types)."""
    from rewriter.plugin import BodyUnavailable, schema_function_body

    try:
        body = schema_function_body(ctx.node, ctx.opset, ctx.input_types, ctx.declared)
    except BodyUnavailable as e:
        raise Declined(f"the spec's body needs more types: {e}" if str(e) else
                       "the spec's body cannot be built without knowing more types") from None
    if body is None:
        raise Declined(f"the op has no function body at opset {ctx.opset}")
    for entry in body.opset_import:  # the spec's bodies are valid up to the next version
        if entry.domain in ("", "ai.onnx"):
            entry.version = ctx.opset
    _declare_defaults(body, ctx)
    _explicit_zero_fill(body)
    if ctx.node.op_type == "Bernoulli" and ctx.node.domain in ("", "ai.onnx"):
        _draw_one_with_probability_p(body)
    return body


def _draw_one_with_probability_p(body) -> None:
    """Bernoulli's spec body compares ``uniform > p`` (1 with probability 1 - p); the op
    draws 1 with probability p: ``uniform < p``."""
    for node in body.node:
        if node.op_type == "Greater" and node.domain in ("", "ai.onnx"):
            node.op_type = "Less"


def _explicit_zero_fill(body) -> None:
    """A ``ConstantOfShape`` without ``value`` fills with float32 zeros (the spec's
    default); tract 0.23 fills it with float64 zeros, and then cannot type the body
    (Attention's bias: "Impossible to unify F64 with F32" at its MatMul). The default is
    written out."""
    from onnx import TensorProto, helper

    for node in body.node:
        if (node.op_type == "ConstantOfShape" and node.domain in ("", "ai.onnx")
                and not any(a.name == "value" for a in node.attribute)):
            node.attribute.append(helper.make_attribute(
                "value", helper.make_tensor("value", TensorProto.FLOAT, [1], [0.0])))


def _declare_defaults(body, ctx: DecompositionContext) -> None:
    """Give the function the schema's attribute defaults, so a body node reading an
    attribute the node leaves unset (``@alpha``) gets the default rather than nothing."""
    from onnx import defs

    schema = defs.get_schema(ctx.node.op_type, ctx.opset, ctx.node.domain)
    with_default = {a.name for a in body.attribute_proto}
    plain = []
    for name in body.attribute:
        attr = schema.attributes.get(name)
        default = attr.default_value if attr is not None else None
        if default is not None and default.type and name not in with_default:
            entry = body.attribute_proto.add()
            entry.CopyFrom(default)
            entry.name = name
        else:
            plain.append(name)
    del body.attribute[:]
    body.attribute.extend(plain)


def build_stable_softplus(ctx: DecompositionContext):
    """``Softplus(X) = ln(exp(X) + 1)`` as ``Max(X, 0) + Log(1 + Exp(-|X|))``: equal in
    exact arithmetic, and finite wherever the result is (no ``Exp`` of a large X)."""
    from rewriter_plugins.onnx_lowering.common import float_elem

    from rewriter.plugin import FunctionBuilder

    elem = float_elem(ctx)
    b = FunctionBuilder(ctx.opset, elem)
    zero, one = b.literal(0.0, like="X"), b.literal(1.0, like="X")
    tail = b.op("Log", b.op("Add", one, b.op("Exp", b.op("Neg", b.op("Abs", "X")))))
    y = b.op("Add", b.op("Max", "X", zero), tail)
    return b.function("onnx-functions", "softplus", ["X"], [y])


def _softplus_samples() -> list[OpSample]:
    return [OpSample([Arg("T[4,6]", low=-100.0, high=100.0)], dtypes=["float"], opset=18,
                     name="wide"),
            OpSample([Arg("T[3,4]")], dtypes=["float"], opset=22)]


def _own_bodies() -> dict[str, tuple]:
    """Ops lowered to a body of this plugin's rather than the spec's: (builder, note,
    oracle, samples)."""
    from rewriter_plugins.onnx_lowering.linear_attention import (
        build_linear_attention,
        linear_attention_samples,
    )

    return {
        # the spec's body is a Scan that OpenVINO 2026.4 cannot convert; the same
        # recurrence as a Loop
        "LinearAttention": (build_linear_attention, "a Loop over time", "reference",
                            linear_attention_samples()),
        # the spec's body overflows for large x
        "Softplus": (build_stable_softplus, "max(x, 0) + log(1 + exp(-|x|))", "onnxruntime",
                     _softplus_samples()),
    }


@hookimpl
def register_decompositions(registry):
    own = _own_bodies()
    for domain, op_type, since in function_ops():
        oracle, samples = _OWN_ORACLES.get(op_type, ("spec", []))
        builder, note = lower_to_function_body, ""
        if domain == "" and op_type in own:
            builder, note, oracle, samples = own[op_type]
        registry.add(
            domain, op_type, builder, opsets=(since, None),
            description=f"onnx-functions:{op_type}" + (f" ({note})" if note else ""),
            oracle=oracle, samples=samples,
        )
