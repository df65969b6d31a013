"""What the onnx-preview bodies share: the domains and opset ranges, element types, the
body builder with readable value names, the attribute check."""

from __future__ import annotations

from collections.abc import Iterable

from onnx import NodeProto, TensorProto

from rewriter.plugin import DecompositionContext, FunctionBuilder

PREVIEW = "ai.onnx.preview"
TRAINING = "ai.onnx.preview.training"
BODY_DOMAIN = "rewriter_plugins.onnx_preview"

# FlexAttention's body needs Unsqueeze/Slice with tensor inputs and Softmax on one axis (13).
FLEX_OPSETS = (13, None)
# The optimizers' bodies use Where (9) and Greater on int64 (9).
TRAINING_OPSETS = (9, None)
# A model importing no ai.onnx opset (as the spec's training test models) is planned by the
# engine as if at opset 1; such a body brings its own ai.onnx import at this version.
NO_IMPORT_OPSETS = (1, 1)
NO_IMPORT_BODY_OPSET = 13

_ELEM_TYPES = {
    f"tensor({name})": getattr(TensorProto, name.upper())
    for name in ("float", "double", "float16", "bfloat16", "int64")
}
FLOAT_TYPES = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16)


def element_type(type_str: str | None) -> int | None:
    """The element type of a ``tensor(...)`` type string (None: unknown or not handled)."""
    return _ELEM_TYPES.get(type_str or "")


class Body(FunctionBuilder):
    """A function body whose values keep readable names: the hint itself, numbered only when
    it is taken."""

    def __init__(self, opset: int) -> None:
        super().__init__(opset)
        self._used: set[str] = set()

    def fresh(self, hint: str = "v") -> str:
        name, k = hint, 1
        while name in self._used:
            k += 1
            name = f"{hint}_{k}"
        self._used.add(name)
        return name

    def reserve(self, names: Iterable[str]) -> None:
        self._used.update(names)

    def named(self, op_type: str, inputs: list[str], hint: str, out: str | None = None,
              **attributes) -> str:
        """Append a node whose one output is ``out``, else a fresh name from ``hint``."""
        return self.op(op_type, *inputs, outputs=[out or self.fresh(hint)], **attributes)

    def converted(self, value: str, to: int, hint: str, source: int | None) -> str:
        """``value`` as element type ``to`` (unchanged when ``source`` is ``to``)."""
        return value if source == to else self.named("Cast", [value], hint, to=to)


def plain_attributes(node: NodeProto, known: Iterable[str]) -> bool:
    """Every attribute of ``node`` is one we honour, and none is a reference."""
    names = set(known)
    return all(a.name in names and not a.ref_attr_name for a in node.attribute)


def body_opset(ctx: DecompositionContext) -> int:
    """The ai.onnx opset a body is written at (``NO_IMPORT_BODY_OPSET`` for a model
    importing none)."""
    return ctx.opset if "" in ctx.opsets else NO_IMPORT_BODY_OPSET
