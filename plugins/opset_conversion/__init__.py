"""Pass ``opset-conversion``: lower a model to the opset a target implements (``opset:N``).

onnx's own version converter drops model-local functions and has adapters for few of the
steps users need most (down to opset 13..17 for older runtimes and NPU SDKs). This pass
converts node by node instead, and only the nodes whose operator changed:

1. **same op, older version**: the node is valid for the older schema as it is (attributes,
   arity, input and output types, checked with onnx's own node inference), or becomes valid
   once attributes introduced later and set to their default are dropped (``Relu`` 14 -> 13,
   ``Cast(saturate=1)`` 19 -> 13, ``Reshape(allowzero=0)`` 14 -> 13, ...);
2. **hand-written adapters** (``registry.ADAPTERS``) for versions that moved an attribute to
   an input (or back), changed meaning without changing signature (``SEMANTIC_BOUNDARIES``:
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

The index, one module per concern (the adapters one per op family):

===================  =======================================================================
module               holds
===================  =======================================================================
common               ``Env`` (types, shapes and constants known while converting a node),
                     ``Decline``, node helpers
registry             ``ADAPTERS``, ``SEMANTIC_BOUNDARIES``, the ``adapter`` decorator
reductions           adapters: ``Reduce*`` axes (13, 18), bool ``ReduceMax``/``ReduceMin`` (20)
axes                 adapters: negative axes (11), ``Softmax``/``LogSoftmax``/``Hardmax``
                     (13), ``TopK`` (10, 11), ``DFT`` (20)
arithmetic           adapters: ``Mod`` (28), 8/16-bit ``Add``/``Sub``/``Mul``/``Div`` and
                     ``Relu`` (14), ``IsInf`` (20), ``BitShift`` (28), ``Clip`` (11),
                     ``Range`` (27)
quantization         adapters: ``QuantizeLinear``/``DequantizeLinear`` (19, 21); 4-bit weights
                     widened to 8 bits
shapes               adapters: ``Squeeze``/``Unsqueeze``, ``Split``, ``Pad``, ``Slice``,
                     ``Shape``, ``Reshape``, ``ScatterElements``/``ScatterND``, ``Trilu``
normalization        adapter: ``BatchNormalization`` training mode (14)
resampling           adapters: ``Resize`` (13, 18, 19), ``GridSample`` (20), ``RoiAlign`` (16)
converter            ``Converter``: one node to the target opsets (same op, adapter, function
                     body), with type inference and constant folding
ceilings             the targets' ceilings and floors, ``CeilingTarget``
facts                ``ModelFacts``: a model's small constants and value types
model_edits          ``Conversion`` as a remedy function, the node pointed at it, imports
                     lowered, dead constants dropped
conversion_pass      ``OpsetConversionPass``: planning and running the conversion
===================  =======================================================================
"""

from __future__ import annotations

from rewriter.plugin import hookimpl

from .conversion_pass import OpsetConversionPass

__all__ = ["OpsetConversionPass", "register_passes"]


@hookimpl
def register_passes(registry):
    registry.add("opset-conversion", OpsetConversionPass, phase="convert")
