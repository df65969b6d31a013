"""Decompositions ``onnx-functions``: every standard op the ONNX spec defines as a function
(``schema.has_function`` or a context-dependent function) can be lowered to its body when a
target lacks it; the body is specialised for the node's attributes, input types and the
model's opset, and nested function ops are lowered in later rounds as needed.
"""

from __future__ import annotations

from rewriter import hookimpl
from rewriter.functions import DecompositionContext


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
        found[key] = min(found.get(key, 1 << 30), schema.since_version)
    return sorted((d, op, v) for (d, op), v in found.items())


def lower_to_function_body(ctx: DecompositionContext):
    """The spec's own body for this node at the model's opset (None when it has none or
    it cannot be built for these types)."""
    from rewriter.schemas import BodyUnavailable, schema_function_body

    try:
        body = schema_function_body(ctx.node, ctx.opset, ctx.input_types, ctx.declared)
    except BodyUnavailable:
        return None
    if body is None:
        return None
    for entry in body.opset_import:  # the spec's bodies are valid up to the next version
        if entry.domain in ("", "ai.onnx"):
            entry.version = ctx.opset
    _declare_defaults(body, ctx)
    return body


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


@hookimpl
def register_decompositions(registry):
    for domain, op_type, since in function_ops():
        registry.add(
            domain, op_type, lower_to_function_body, opsets=(since, None),
            description=f"onnx-functions:{op_type}",
        )
