"""How OpenVINO computes some ops otherwise than their definition: each is a finding for the
``openvino`` target, so that an exact remedy runs instead (or the node is reported with the
reason).

``KNOWN_INEXACT``: ops whose translation OpenVINO converts, compiles and runs, measured to
compute otherwise (quantized com.microsoft ops, GroupQueryAttention's batch of one).
:func:`inexact_form`: forms of standard ops its CPU plugin runs otherwise (int64 held in int32,
double in float32, 16-bit Q/DQ folded into FakeQuantize); :func:`weights_dequantized` with
:func:`has_16bit_qdq`: 8-bit weights in a model with 16-bit Q/DQ; :func:`per_channel_conv`:
``QLinearConv`` with per-channel weight scales; :func:`body_dequantized`: a
decomposition body's 8-bit ``DequantizeLinear``.
"""

from __future__ import annotations

from rewriter.plugin import NodeQuery

# Ops OpenVINO converts, compiles and runs, but not with the op's definition: a finding, so
# that an exact remedy runs instead. (domain, op) -> why, as measured.
KNOWN_INEXACT = {
    ("com.microsoft", "DynamicQuantizeMatMul"): (
        "OpenVINO's translation of com.microsoft::DynamicQuantizeMatMul does not compute the "
        "op's quantized arithmetic (onnxruntime's kernel): outputs differ by up to 2.1e-3 "
        "on a dynamically quantized BERT"),
    ("com.microsoft", "DynamicQuantizeLSTM"): (
        "OpenVINO's translation of com.microsoft::DynamicQuantizeLSTM does not compute the "
        "op's quantized arithmetic (onnxruntime's kernel, which quantizes each step's hidden "
        "state anew): 46 of 46 data sets of the com-microsoft plugin's oracle samples differ, "
        "by up to 0.24; a quantize_dynamic'd 2-layer torch.nn.LSTM's outputs by 3.9e-3 "
        "(OpenVINO 2026.4)"),
    **{("com.microsoft", op): (
        f"OpenVINO's translation of com.microsoft::{op} does not compute onnxruntime's "
        f"quantized arithmetic: {measured} (OpenVINO 2026.4, float32 precision, the "
        "com-microsoft plugin's oracle samples)")
       for op, measured in (
           ("QLinearAdd", "10 of 10 samples differ, by up to 254 units"),
           ("QLinearMul", "10 of 10 samples differ, by up to 254 units"),
           ("QLinearSigmoid", "2 of 2 samples differ, by up to 245 units"),
           ("QLinearLeakyRelu", "4 of 6 samples (alpha 0.2, 1.5) differ, by up to 255 units"),
           ("QLinearWhere", "4 of 4 samples differ, by up to 252 units"),
           ("QLinearSoftmax", "24 of 24 samples differ, by up to 255 units"),
           ("QLinearAveragePool", "16 of 24 samples differ, by up to 255 units"),
           ("QLinearConcat", "2 of 6 samples (3 inputs, axis -1) differ, by up to 252 "
                             "units"))},
    # the genai builder's attention (Llama, Qwen2, Qwen3, Mistral): OpenVINO's translation
    # compiles (a one-node probe passes) and runs batch 1; a user's batch of two fails
    ("com.microsoft", "GroupQueryAttention"): (
        "OpenVINO's translation of com.microsoft::GroupQueryAttention runs only a batch of "
        "one: at batch 2 its CPU plugin fails at run time ('Reshape node ...: the shape of "
        "input data (2) conflicts with the reshape pattern (1)'), and a compiled model that "
        "ran one shape fails on the next (a prompt after a decoding step), measured with "
        "OpenVINO 2026.4 on the genai builder's Llama, Qwen2, Qwen3 and Mistral"),
}
INEXACT = "runtime-refused"  # the reason code of a known-inexact translation

# Forms of standard ops OpenVINO's CPU plugin runs otherwise than their definition, because
# it holds int64 in int32 and double in float32, an infinity becoming +-3.4e38 (OpenVINO
# 2026.4, measured: int64 2^40 + 2^40 gave 0; Neg of a double inf -3.4e38). Each is a
# finding, so that a remedy OpenVINO computes exactly runs instead, or the node is reported
# with the reason. Only IsInf of a double is looked for in the model itself; infinite
# double constants and int64 forms in decomposition bodies only (a model's own int64
# arithmetic on large constants is mostly shape arithmetic OpenVINO folds exactly). A
# remedy's doubles are otherwise taken as OpenVINO takes the model's own: in float32.
_DOUBLE_INF = ("OpenVINO's CPU plugin computes double in float32, where an infinity becomes "
               "+-3.4e38: {op} of a double never sees an infinity (measured: IsInf of a "
               "double inf gave false)")
_DOUBLE_INF_CONSTANT = (
    "OpenVINO's CPU plugin computes double in float32, where an infinity becomes +-3.4e38: "
    "{op} of a double with an infinite constant compares or computes with 3.4e38 instead")
_WIDE_INT64 = ("OpenVINO's CPU plugin computes int64 in int32: {op} on a constant past "
               "int32's range ({value}) computes with its low 32 bits (measured: int64 "
               "2^40 + 2^40 gave 0)")
_CAST_64 = ("OpenVINO's CPU plugin computes int64 in int32: a Cast between int64 and uint64 "
            "loses the high 32 bits (measured: int64 -2^63 to uint64 gave 0)")
_INT64_ARITHMETIC = frozenset({"Add", "Sub", "Mul", "Div", "Mod", "Max", "Min", "Less",
                               "Greater", "LessOrEqual", "GreaterOrEqual", "Equal", "Where",
                               "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Sum"})
_INT32_RANGE = (-2 ** 31, 2 ** 31 - 1)


# 16-bit QuantizeLinear / DequantizeLinear (ai.onnx from 21, com.microsoft): OpenVINO
# folds them into its FakeQuantize, which computes them otherwise (OpenVINO 2026.4,
# measured against onnxruntime: QuantizeLinear alone one unit off on 1 in 10 values; a
# QuantizeLinear -> DequantizeLinear pair of uint16 activations 4.6 off on values up to 5.3;
# the QNN recipe's uint16 model 7.7 off on outputs up to 13.6). A finding, so that the
# Cast/Sub/Mul arithmetic of the op's definition runs instead.
_QDQ_16BIT = ("OpenVINO computes 16-bit {op} otherwise than onnxruntime and the op's "
              "definition (it folds Q/DQ into FakeQuantize; measured: a uint16 Quantize -> "
              "Dequantize pair 4.6 off on values up to 5.3)")
_SIXTEEN_BITS = frozenset({"tensor(int16)", "tensor(uint16)"})
# In a model with 16-bit Q/DQ, 8-bit weights' DequantizeLinear too: OpenVINO runs a MatMul
# of dequantized 8-bit weights followed by a scale (the next QuantizeLinear's) with a kernel
# that is 4e-3 of the output's range off (measured on one DequantizeLinear(uint8 weights)
# -> MatMul -> Div node chain: 3.9e-3; without the Div 1.2e-6), below 8-bit activations'
# resolution, 130 units of 16-bit ones. The arithmetic folds the weights to float instead.
_WEIGHTS_IN_16BIT = (
    "OpenVINO computes a MatMul of 8-bit weights dequantized by {op} and followed by a scale "
    "4e-3 of its range off (measured), 130 units of this model's 16-bit activations")
_EIGHT_BITS = frozenset({"tensor(int8)", "tensor(uint8)"})
_QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


def _qdq_16bit(query: NodeQuery) -> str | None:
    """The 16-bit (De)QuantizeLinear finding above, or None."""
    node, types = query.node, query.types
    if query.domain not in ("", "com.microsoft") or node.op_type not in (
            "QuantizeLinear", "DequantizeLinear"):
        return None
    if node.op_type == "DequantizeLinear":
        quantized = types.get(node.input[0]) if node.input else None
    elif len(node.input) > 2 and node.input[2]:
        quantized = types.get(node.input[2])
    else:
        quantized = types.get(node.output[0]) if node.output else None
        if quantized is None:
            output_dtype = next((a.i for a in node.attribute if a.name == "output_dtype"), 0)
            quantized = {4: "tensor(uint16)", 5: "tensor(int16)"}.get(output_dtype)
    return _QDQ_16BIT.format(op=node.op_type) if quantized in _SIXTEEN_BITS else None


def has_16bit_qdq(model) -> bool:
    """Whether the model quantizes to 16 bits anywhere (a Q/DQ zero point or quantized
    initializer of int16/uint16, in the main graph)."""
    sixteen = {_INT16, _UINT16}
    quantized = {t.name for t in model.graph.initializer if t.data_type in sixteen}
    for node in model.graph.node:
        if node.op_type in _QDQ_OPS and node.domain in ("", "ai.onnx", "com.microsoft"):
            if any(name in quantized for name in node.input[::2]):
                return True
            if any(a.name == "output_dtype" and a.i in sixteen for a in node.attribute):
                return True
    return False


_INT16, _UINT16 = 5, 4  # TensorProto element types (onnx is imported lazily here)


def weights_dequantized(query: NodeQuery, constants) -> str | None:
    """The finding on an 8-bit DequantizeLinear of constant weights (see _WEIGHTS_IN_16BIT),
    or None; ``constants``: the model's (a body's node reads weights its caller does not
    feed)."""
    node = query.node
    if (query.domain not in ("", "com.microsoft") or node.op_type != "DequantizeLinear"
            or not node.input or query.types.get(node.input[0]) not in _EIGHT_BITS):
        return None
    in_body = "/<body>/" in query.path
    weight = (node.input[0] not in query.caller_fed) if in_body else (
        node.input[0] in constants)
    return _WEIGHTS_IN_16BIT.format(op=node.op_type) if weight else None


# ai.onnx QLinearConv with a per-output-channel w_scale: OpenVINO 2026.4's translation scales
# the weights along their axis 1 (the input channels) instead of axis 0 (measured: a 4 -> 4
# channel QLinearConv 24 units off onnxruntime on 140 of 144 outputs, and equal, 0 off, to
# a numpy Conv whose weights are scaled along axis 1; with as many input as output channels
# it compiles, otherwise it refuses the node: "The number of dequantization scale elements
# '16' must match the input shape dimension '3' pointed to by the axis attribute: 1"). The
# quantized ResNet of quantize_static(per_channel=True) was 1.1 off on its outputs.
_PER_CHANNEL_CONV = (
    "OpenVINO's translation of QLinearConv scales per-channel weights along their input "
    "channels (axis 1) instead of their output channels (axis 0): measured 24 units off "
    "onnxruntime on a 4 -> 4 channel QLinearConv with {scales} distinct scales (OpenVINO "
    "2026.4)")


def per_channel_conv(query: NodeQuery, constants) -> str | None:
    """The finding on an ai.onnx ``QLinearConv`` whose ``w_scale`` has more than one distinct
    value (a constant), or more than one element (its declared shape), or None;
    ``constants``: the model's (a body node's are ``query.constants``)."""
    node = query.node
    if query.domain != "" or node.op_type != "QLinearConv" or len(node.input) < 5:
        return None
    name = node.input[4]
    tensor = query.constants.get(name) or constants.get(name)
    if tensor is not None:
        from onnx import numpy_helper

        distinct = len(set(numpy_helper.to_array(tensor).ravel().tolist()))
        return _PER_CHANNEL_CONV.format(scales=distinct) if distinct > 1 else None
    declared = query.declared.get(name)
    if declared is None or not declared.tensor_type.HasField("shape"):
        return None
    dims = [d.dim_value if d.HasField("dim_value") else None
            for d in declared.tensor_type.shape.dim]
    if any(d is None or d > 1 for d in dims):  # maybe per channel: its values are fed
        return _PER_CHANNEL_CONV.format(scales="several")
    return None


# A decomposition body's 8-bit DequantizeLinear (the QOperator ops' bodies, DequantizeLinear
# -> the float op -> QuantizeLinear): OpenVINO's low-precision transformations fold the
# dequantization of activations with the op after it and the next QuantizeLinear into integer
# arithmetic of their own, which rounds otherwise (OpenVINO 2026.4, measured on
# quantize_static's ResNet rewritten from QOperator: a QLinearAdd body 1 unit off onnxruntime
# on 491 of 2,048 values, the outputs 3 units, 0.06, off). Its definition in int32 and float
# arithmetic (onnx-standard: Cast to int32, Sub, Cast to float, Mul; not Cast to float, Sub,
# Mul, which they take for a dequantization too) is none to them, and the body computes
# onnxruntime's numbers (0 off). A body's node cannot tell activations from weights (its
# values are not the model's): the weights' DequantizeLinear is lowered too, to constants
# OpenVINO folds. A body's 8-bit QuantizeLinear likewise: OpenVINO takes it with the
# DequantizeLinear after it (the model's own, between two QOperator ops) for a FakeQuantize,
# and its low-precision transformations carry that into the ops after (measured: a ViT
# quantized to QOperator and rewritten, last_hidden_state 0.27 off onnxruntime; with the
# bodies' QuantizeLinear in Div/Round/Clip arithmetic, 2.4e-7). Per tensor or per axis with
# a float scale (what onnx-standard lowers); a model's own QDQ is left to OpenVINO: its
# numbers are compared as they are.
_QDQ_8BIT_IN_BODY = (
    "OpenVINO's low-precision transformations fold an 8-bit {op} of a decomposition body "
    "with the ops around it into integer arithmetic that rounds otherwise (measured: a "
    "QLinearAdd body of a quantized ResNet 1 unit off onnxruntime on 491 of 2,048 values; a "
    "ViT's QLinear* bodies 0.27 off; OpenVINO 2026.4)")


def body_dequantized(query: NodeQuery) -> str | None:
    """The finding on a decomposition body's 8-bit ``DequantizeLinear`` or
    ``QuantizeLinear`` (ai.onnx, per tensor or per axis, float scale), or None."""
    node, types = query.node, query.types
    if (query.domain != "" or node.op_type not in _QDQ_OPS
            or "/<body>/" not in query.path or len(node.input) < 2
            or types.get(node.input[1]) not in (None, "tensor(float)")
            or any(a.name == "block_size" for a in node.attribute)):
        return None
    if node.op_type == "DequantizeLinear":
        eight_bits = types.get(node.input[0]) in _EIGHT_BITS
    else:  # its output's type, else its zero point's, else uint8 (no zero point, no dtype)
        zero_point = node.input[2] if len(node.input) > 2 else ""
        quantized = types.get(node.output[0]) or types.get(zero_point) or (
            None if zero_point or any(a.name == "output_dtype" for a in node.attribute)
            else "tensor(uint8)")
        # a constant scale (static quantization: a QLinear* body's, bound to the model's
        # initializer), not one computed from the data (a dynamic quantization's, whose
        # per-axis reshape OpenVINO cannot compile in an If, and whose grid moves anyway)
        eight_bits = (quantized in _EIGHT_BITS and node.input[1] in query.constants
                      and types.get(node.input[0]) in (None, "tensor(float)"))
    return _QDQ_8BIT_IN_BODY.format(op=node.op_type) if eight_bits else None


def inexact_form(query: NodeQuery) -> str | None:
    """Why OpenVINO computes this node otherwise than its definition (one of the forms
    above), or None."""
    node, types = query.node, query.types
    qdq = _qdq_16bit(query) or body_dequantized(query)
    if qdq is not None:
        return qdq
    if query.domain != "":
        return None
    if node.op_type == "IsInf" and types.get(node.input[0]) == "tensor(double)":
        return _DOUBLE_INF.format(op="IsInf")
    if "/<body>/" not in query.path:
        return None
    for name in node.input:
        tensor = query.constants.get(name)
        if tensor is not None and tensor.data_type == 11:  # double
            import numpy as np
            from onnx import numpy_helper

            if np.isinf(numpy_helper.to_array(tensor)).any():
                return _DOUBLE_INF_CONSTANT.format(op=node.op_type)
    if node.op_type == "Cast" and {types.get(node.input[0]), _cast_to(node)} == {
            "tensor(int64)", "tensor(uint64)"}:
        return _CAST_64
    if node.op_type in _INT64_ARITHMETIC:
        for name in node.input:
            tensor = query.constants.get(name)
            if tensor is None or tensor.data_type not in (7, 13):  # int64, uint64
                continue
            from onnx import numpy_helper

            values = numpy_helper.to_array(tensor)
            outside = values[values > _INT32_RANGE[1]] if values.dtype.kind == "u" else \
                values[(values < _INT32_RANGE[0]) | (values > _INT32_RANGE[1])]
            if outside.size:
                return _WIDE_INT64.format(op=node.op_type, value=int(outside.flat[0]))
    return None


def _cast_to(node) -> str | None:
    """The 64-bit integer type a Cast casts to, else None."""
    to = next((a.i for a in node.attribute if a.name == "to"), None)
    return {7: "tensor(int64)", 13: "tensor(uint64)"}.get(to)
