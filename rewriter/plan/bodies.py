"""Building a decomposition's body node by node: :class:`FunctionBuilder`.

A decomposition builder (a callable registered with ``registry.add(domain, op_type,
builder, ...)``) that looks at the node usually writes its ``FunctionProto`` by hand. The
builder here keeps the bookkeeping out of the way: fresh value names, constants, literals in
the computation's element type, and the forms of the ai.onnx ops whose signature changed
across opsets, picked for the body's ``opset``:

================  ===============================================================
method            form
================  ===============================================================
``unsqueeze``     ``axes`` attribute below 13, input from 13
``squeeze``       ``axes`` attribute below 13, input from 13
``reduce_sum``    ``axes`` attribute below 13, input from 13
``reduce_mean``   ``axes`` attribute below 18, input from 18 (``reduce_max``, and
                  ``reduce`` for any other ``Reduce*`` op, the same)
``split``         ``split`` attribute below 13, input from 13; equal parts carry
                  ``num_outputs`` from 18
``clip``          ``min``/``max`` attributes below 11, inputs from 11
``slice``         ``starts``/``ends``/``axes`` attributes below 10, inputs from 10
================  ===============================================================

Example (the body of ``y = x * sigmoid(alpha * x)`` for a model at ``ctx.opset``)::

    from rewriter.plan.bodies import FunctionBuilder

    def build_quick_gelu(ctx):
        b = FunctionBuilder(ctx.opset, elem_type=TensorProto.FLOAT)
        scaled = b.op("Mul", "X", b.literal(ctx.attribute("alpha", 1.702)))
        y = b.op("Mul", "X", b.op("Sigmoid", scaled))
        return b.function("com.acme", "quick_gelu", ["X"], [y])

A plugin adds its own helpers by subclassing.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from onnx import FunctionProto, NodeProto, TensorProto, helper, numpy_helper

__all__ = ["Declined", "FunctionBuilder", "declining", "typed_tensor"]

# The opset from which each op takes its axes (Split: its sizes) as an input.
UNSQUEEZE_AXES_INPUT = 13
REDUCE_SUM_AXES_INPUT = 13
REDUCE_AXES_INPUT = 18  # every other Reduce* op
SPLIT_INPUT = 13
SPLIT_NUM_OUTPUTS = 18
CLIP_INPUTS = 11
SLICE_INPUTS = 10
CASTLIKE = 15
CONSTANT_ANY_TYPE = 9  # Constant-1 holds float16, float and double tensors only
_CONSTANT_1_TYPES = (TensorProto.FLOAT16, TensorProto.FLOAT, TensorProto.DOUBLE)


class Declined(Exception):
    """How a builder, a kernel's ``accepts`` predicate or a pass's ``offers`` says "not this
    node", with the reason ``--explain`` shows: ``raise Declined("axis must be constant")``.

    Any other exception a builder raises is a bug of its plugin: the rewrite stops with an
    error naming the plugin, the op and the node.

    ``needs_opset``: the body needs a newer ai.onnx opset than the model imports (the
    rewrite then raises the model's opset with onnx's version converter, when every target
    takes the newer one)."""

    def __init__(self, reason: str = "", *, needs_opset: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.needs_opset = needs_opset

    def __str__(self) -> str:
        return self.reason or "declined (no reason given)"


def declining(builder: Callable[[Any], FunctionProto | None]
              ) -> Callable[[Any], FunctionProto | None]:
    """Mark a builder that declines with :class:`Declined` (the planner catches it and keeps
    the reason; kept for API 1.0 compatibility: a builder needs no marker)."""
    return builder


def present(names, index: int) -> bool:
    """Whether a node's input or output ``index`` is given (exists and is not "")."""
    return len(names) > index and bool(names[index])


def typed_tensor(value, elem_type: int, name: str = "") -> TensorProto:
    """``value`` as a tensor of ONNX element type ``elem_type`` (bfloat16 and the 4-bit
    types included, which numpy has no dtype for)."""
    array = np.asarray(value)
    if elem_type in (TensorProto.BFLOAT16, TensorProto.INT4, TensorProto.UINT4):
        return helper.make_tensor(name, elem_type, array.shape,
                                  array.astype(np.float32).ravel().tolist())
    return numpy_helper.from_array(array.astype(helper.tensor_dtype_to_np_dtype(elem_type)),
                                   name)


class FunctionBuilder:
    """Collects the nodes of one function body written for ai.onnx ``opset``.

    ``elem_type`` (an ONNX ``TensorProto`` element type, or None when unknown) is the type of
    the float literals :meth:`literal` writes. Value names are ``<prefix><hint>_<n>``;
    :meth:`child` gives a builder for a subgraph that shares the numbering, so names stay
    unique across the whole body.
    """

    #: dtype of :meth:`const` when the call gives none (None: the value's own numpy dtype).
    default_dtype: Any = None

    def __init__(self, opset: int, elem_type: int | None = None, *, prefix: str = "",
                 counter: Iterator[int] | None = None) -> None:
        self.opset = opset
        self.elem_type = elem_type
        self.nodes: list[NodeProto] = []
        self.prefix = prefix
        self._counter = counter if counter is not None else itertools.count(1)

    def child(self) -> FunctionBuilder:
        """A builder of the same kind for a subgraph (``If``/``Loop`` branch) of this body:
        same opset, element type and name numbering, its own nodes."""
        child = type(self).__new__(type(self))
        child.__dict__.update(self.__dict__)
        child.nodes = []
        return child

    def fresh(self, hint: str = "v") -> str:
        """A value name not used elsewhere in the body."""
        return f"{self.prefix}{hint}_{next(self._counter)}"

    # -- nodes and constants --------------------------------------------------------------

    def op(self, op_type: str, *inputs: str, outputs: int | Sequence[str] = 1,
           domain: str = "", **attrs: Any) -> Any:
        """Append a node; returns its output name, or the list of them when ``outputs`` (a
        count of fresh names, or the names themselves) is not one. ``""`` skips an optional
        input; attributes whose value is None are left out."""
        if isinstance(outputs, int):
            names = [self.fresh(op_type.lower()) for _ in range(outputs)]
        else:
            names = list(outputs)
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(helper.make_node(op_type, list(inputs), names, domain=domain or None,
                                           **attrs))
        return names[0] if len(names) == 1 else names

    def const(self, value, dtype: Any = None, hint: str = "const") -> str:
        """A ``Constant`` (named from ``hint``). ``dtype``: a numpy dtype, or an ONNX element
        type (an int such as ``TensorProto.BFLOAT16``); default :attr:`default_dtype`, else
        the value's own. Below opset 9 (``Constant-1`` holds float types only) another type
        is a double ``Constant`` and a ``Cast``: exact for integers up to 2^53, beyond that
        :class:`Declined`."""
        if dtype is None:
            dtype = self.default_dtype
        name = self.fresh(hint)
        if isinstance(dtype, int):
            tensor = typed_tensor(value, dtype, name)
        else:
            tensor = numpy_helper.from_array(np.asarray(value, dtype=dtype), name)
        if self.opset < CONSTANT_ANY_TYPE and tensor.data_type not in _CONSTANT_1_TYPES:
            array = numpy_helper.to_array(tensor)
            doubles = array.astype(np.float64)
            if array.dtype.kind not in "biuf" or not np.array_equal(
                    doubles.astype(array.dtype), array):
                raise Declined(f"a {array.dtype} constant below opset {CONSTANT_ANY_TYPE} "
                               "(Constant-1 holds float types only) that double cannot hold")
            source = self.op("Constant", outputs=[self.fresh(hint)],
                             value=numpy_helper.from_array(doubles))
            return self.op("Cast", source, outputs=[name], to=tensor.data_type)
        return self.op("Constant", outputs=[name], value=tensor)

    def ints(self, values: Sequence[int]) -> str:
        """An int64 vector constant."""
        return self.const(np.asarray(list(values), dtype=np.int64))

    def literal(self, value: float, like: str | None = None,
                elem_type: int | None = None) -> str:
        """A scalar in the element type ``elem_type`` (default: the body's). When neither is
        known, ``CastLike(value, like)`` (opset >= 15); below 15 that raises
        :class:`Declined`."""
        elem_type = elem_type or self.elem_type
        if elem_type is not None:
            return self.const(np.array(value), elem_type)
        if like is None:
            raise ValueError("literal: no element type and no value to cast like")
        if self.opset < CASTLIKE:
            raise Declined("element type unknown below opset 15")
        return self.op("CastLike", self.const(np.array(value, np.float32)), like)

    def fill(self, shape: str, value: float, dtype: Any = None) -> str:
        """``ConstantOfShape(shape)`` filled with ``value`` (``dtype``: numpy dtype or ONNX
        element type; default the body's element type, else float32)."""
        if dtype is None:
            dtype = self.elem_type if self.elem_type is not None else np.float32
        if isinstance(dtype, int):
            tensor = typed_tensor([value], dtype, "value")
        else:
            tensor = numpy_helper.from_array(np.asarray([value], dtype=dtype), "value")
        return self.op("ConstantOfShape", shape, value=tensor)

    def cast(self, x: str, to: int) -> str:
        return self.op("Cast", x, to=to)

    def reshape(self, x: str, shape: Sequence[int] | str) -> str:
        """``Reshape(x, shape)``; ``shape`` an int list or the name of an int64 vector."""
        return self.op("Reshape", x, shape if isinstance(shape, str) else self.ints(shape))

    def take(self, x: str, index: int, axis: int = 0) -> str:
        """``x`` at ``index`` along ``axis`` (that axis removed): ``Gather`` of a scalar."""
        return self.op("Gather", x, self.const(np.array(index, np.int64)), axis=axis)

    def dim(self, x: str, axis: int) -> str:
        """``Shape(x)[axis]`` as an int64 scalar (``axis`` may be negative)."""
        return self.take(self.op("Shape", x), axis)

    def dim_vector(self, x: str, axis: int) -> str:
        """``Shape(x)[axis]`` as a 1-element int64 vector (for ``Concat`` into a shape);
        ``axis`` may be negative."""
        end = axis + 1 if axis != -1 else np.iinfo(np.int64).max
        if self.opset < SLICE_INPUTS:
            return self.op("Slice", self.op("Shape", x), starts=[axis], ends=[end])
        return self.op("Slice", self.op("Shape", x), self.ints([axis]), self.ints([end]))

    # -- ops whose form depends on the opset ----------------------------------------------

    def unsqueeze(self, x: str, axes: Sequence[int]) -> str:
        if self.opset >= UNSQUEEZE_AXES_INPUT:
            return self.op("Unsqueeze", x, self.ints(axes))
        return self.op("Unsqueeze", x, axes=list(axes))

    def squeeze(self, x: str, axes: Sequence[int]) -> str:
        if self.opset >= UNSQUEEZE_AXES_INPUT:
            return self.op("Squeeze", x, self.ints(axes))
        return self.op("Squeeze", x, axes=list(axes))

    def reduce(self, op_type: str, x: str, axes: Sequence[int], keepdims: int = 1) -> str:
        """``op_type`` (a ``Reduce*`` op) over ``axes``: an input from opset 18 (``ReduceSum``:
        13)."""
        first = REDUCE_SUM_AXES_INPUT if op_type == "ReduceSum" else REDUCE_AXES_INPUT
        if self.opset >= first:
            return self.op(op_type, x, self.ints(axes), keepdims=keepdims)
        return self.op(op_type, x, axes=list(axes), keepdims=keepdims)

    def reduce_sum(self, x: str, axes: Sequence[int], keepdims: int = 1) -> str:
        return self.reduce("ReduceSum", x, axes, keepdims)

    def reduce_mean(self, x: str, axes: Sequence[int], keepdims: int = 1) -> str:
        return self.reduce("ReduceMean", x, axes, keepdims)

    def reduce_max(self, x: str, axes: Sequence[int], keepdims: int = 1) -> str:
        return self.reduce("ReduceMax", x, axes, keepdims)

    def split(self, x: str, sizes: Sequence[int] | None, axis: int = 0,
              parts: int | None = None) -> list[str]:
        """``x`` split along ``axis`` into pieces of ``sizes``, or (``sizes`` None) into
        ``parts`` equal pieces."""
        if sizes is None:
            if parts is None:
                raise ValueError("split: give sizes or parts")
            if self.opset >= SPLIT_NUM_OUTPUTS:
                return self._outputs(self.op("Split", x, outputs=parts, axis=axis,
                                             num_outputs=parts))
            return self._outputs(self.op("Split", x, outputs=parts, axis=axis))
        if self.opset >= SPLIT_INPUT:
            return self._outputs(self.op("Split", x, self.ints(sizes), outputs=len(sizes),
                                         axis=axis))
        return self._outputs(self.op("Split", x, outputs=len(sizes), axis=axis,
                                     split=list(sizes)))

    def clip(self, x: str, low: float | None, high: float | None) -> str:
        """``Clip(x, low, high)`` (None: unbounded); from opset 11 the bounds are
        :meth:`literal` inputs (so they need the element type, or ``CastLike``)."""
        if self.opset >= CLIP_INPUTS:
            bounds = ["" if v is None else self.literal(v, x) for v in (low, high)]
            while bounds and not bounds[-1]:
                bounds.pop()
            return self.op("Clip", x, *bounds)
        return self.op("Clip", x, min=low, max=high)

    def slice(self, x: str, starts: Sequence[int] | str, ends: Sequence[int] | str,
              axes: Sequence[int] | str, steps: Sequence[int] | str | None = None) -> str:
        """``Slice``; each of ``starts``/``ends``/``axes``/``steps`` an int list or (opset
        >= 10) the name of an int64 vector."""
        if self.opset < SLICE_INPUTS:
            if any(isinstance(v, str) for v in (starts, ends, axes)):
                raise Declined("Slice takes computed bounds only from opset 10")
            if steps is not None and any(s != 1 for s in steps):
                raise Declined("Slice takes steps only from opset 10")
            return self.op("Slice", x, starts=list(starts), ends=list(ends), axes=list(axes))

        def vector(v):
            return v if isinstance(v, str) else self.ints(v)
        inputs = [vector(starts), vector(ends), vector(axes)]
        if steps is not None:
            inputs.append(vector(steps))
        return self.op("Slice", x, *inputs)

    # -- the function ---------------------------------------------------------------------

    def opset_imports(self, extra: Mapping[str, int] | None = None) -> list:
        """The body's opset imports: ai.onnx at :attr:`opset`, and ``extra`` domains."""
        versions = {"": self.opset, **(extra or {})}
        return [helper.make_opsetid(domain, version)
                for domain, version in sorted(versions.items())]

    def function(self, domain: str, name: str, inputs: Sequence[str], outputs: Sequence[str],
                 attributes: Sequence[str] = (), *,
                 opset_imports: Mapping[str, int] | None = None) -> FunctionProto:
        """The ``FunctionProto`` ``domain::name`` of the nodes so far. An output that no node
        produces (an input passed through) or that repeats gets an ``Identity``.
        ``attributes``: names of the function's attributes (for ``ref_attr_name``);
        ``opset_imports``: domains the body uses besides ai.onnx, with their versions."""
        produced = {o for node in self.nodes for o in node.output}
        final: list[str] = []
        for out in outputs:
            if out not in produced or out in final:
                out = self.op("Identity", out)
            final.append(out)
        return helper.make_function(domain, name, list(inputs), final, self.nodes,
                                    self.opset_imports(opset_imports),
                                    attributes=list(attributes))

    @staticmethod
    def _outputs(names: str | list[str]) -> list[str]:
        return [names] if isinstance(names, str) else names
