"""The pytorch plugin's body builder and the helpers every aten operator's body uses:
the computation type (torch's CPU kernels compute float16/bfloat16 in float32), axes and
lengths of the ``self`` tensor, declared shapes."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import FunctionProto, TensorProto, helper

from rewriter.plugin import FunctionBuilder

from .calls import AtenCall

BODY_DOMAIN = "pytorch"
FALLBACK_OPSET = 13  # the body opset for a model without an ai.onnx import

FLOAT_TYPES = {
    "tensor(float)": TensorProto.FLOAT,
    "tensor(float16)": TensorProto.FLOAT16,
    "tensor(double)": TensorProto.DOUBLE,
    "tensor(bfloat16)": TensorProto.BFLOAT16,
}


# -- body construction -------------------------------------------------------------------


class Body(FunctionBuilder):
    """Collects the nodes of one function body written for ai.onnx ``opset``; ``elem_type``
    is the element type of the computation (float32 for float16 inputs). A subgraph's body
    gets a ``prefix`` that keeps its names apart from its outer scope's."""

    def iota(self, length: str) -> str:
        """``[0, 1, ..., n - 1]`` (int64) for ``length = [n]``, valid from opset 9 (no
        Range before 11): the indices of a tensor of ones."""
        ones = self.fill(length, 1, np.int64)
        return self.reshape(self.op("NonZero", ones), [-1])

    def live_nodes(self, outputs: Sequence[str]) -> list:
        """The nodes ``outputs`` depend on (a builder may compute a value it then drops)."""
        needed, live = set(outputs), []
        for node in reversed(self.nodes):
            if any(name in needed for name in node.output):
                live.append(node)
                needed.update(node.input)
                for attr in node.attribute:  # outer-scope values a subgraph reads
                    if attr.g.node:
                        needed.update(i for n in attr.g.node for i in n.input)
        return live[::-1]

    def positional_function(self, name: str, n_inputs: int, outputs: Sequence[str]
                            ) -> FunctionProto:
        """The body as a function of inputs ``in0..`` and outputs ``out0..``, keeping only
        the nodes the outputs depend on."""
        body = self.live_nodes(outputs)
        out_names = [f"out{i}" for i in range(len(outputs))]
        produced = {name for node in body for name in node.output}
        renames = {value: out for value, out in zip(outputs, out_names) if value in produced}
        for node in body:  # the producing node writes the function output itself
            for names in (node.input, node.output):
                for k, name in enumerate(names):
                    names[k] = renames.get(name, name)
        body += [helper.make_node("Identity", [value], [out])
                 for value, out in zip(outputs, out_names) if value not in produced]
        return helper.make_function(
            BODY_DOMAIN, name, [f"in{i}" for i in range(n_inputs)], out_names, body,
            self.opset_imports())


def compute_type(elem: int) -> int:
    """torch's CPU kernels compute float16/bfloat16 in float32."""
    return TensorProto.FLOAT if elem in (TensorProto.FLOAT16, TensorProto.BFLOAT16) else elem


def to_compute(b: Body, name: str | None, elem: int) -> str | None:
    """An input converted to the computation type (absent stays None)."""
    if name is None or b.elem_type == elem:
        return name
    return b.cast(name, b.elem_type)


def from_compute(b: Body, value: str, elem: int) -> str:
    return value if b.elem_type == elem else b.cast(value, elem)



def axis_of(call: AtenCall, arg: str, dim: int, opset: int) -> int | None:
    """``dim`` as an axis of tensor ``arg``: negative axes stay negative from opset 11
    (Gather's and Shape-indexing's negative indices), below they need the declared rank."""
    shape = call.shapes.get(arg)
    if shape is not None:
        return dim + len(shape) if -len(shape) <= dim < 0 else dim if dim < len(shape) else None
    return dim if dim >= 0 or opset >= 11 else None


def length_of(b: Body, x: str, axis: int) -> str:
    """``x.shape[axis]`` as an int64 ``[1]``."""
    return b.op("Gather", b.op("Shape", x), b.ints([axis]), axis=0)


def zero_like(b: Body, elem: int) -> str:
    return b.const(np.zeros((), helper.tensor_dtype_to_np_dtype(elem)))


def body_opset(ctx) -> int:
    """The ai.onnx opset a body is written at: the model's, or FALLBACK_OPSET for a model
    importing none (OpenVINO's test models)."""
    opsets = ctx.opsets or {}
    if "" in opsets or "ai.onnx" in opsets:
        return ctx.opset
    return FALLBACK_OPSET
