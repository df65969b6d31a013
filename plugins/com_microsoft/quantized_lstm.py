"""``com.microsoft::DynamicQuantizeLSTM`` in standard ONNX, as onnxruntime's CPU kernel
computes it (``contrib_ops/cpu/quantization/dynamic_quantize_lstm.cc`` over the deep-CPU
LSTM, ``uni_directional_lstm.cc``, ``rnn_helpers.cc``); registered by the ``com-microsoft``
plugin, whose ``register_decompositions`` hook calls this module's.

``DynamicQuantizeLSTM(X, W, R[, B][, sequence_lens][, initial_h][, initial_c][, P], W_scale,
W_zero_point, R_scale, R_zero_point)`` is ``LSTM`` with 8-bit weights stored input-major
(``W``: ``[num_directions, input_size, 4 * hidden]``, ``R``: ``[num_directions, hidden, 4 *
hidden]``, gates in ``i, o, f, c`` order) and each product's float side quantized
dynamically to uint8 (``GetQuantizationParameter``: ``min(min, 0)`` to ``max(max, 0)`` over
the whole matrix, scale ``range / 255`` (1 when the range is 0), zero point
``round_half_even(clamp(-min / scale, 0, 255))``; ``dynamic_quantization.dynamic_uint8``):

* the input product, once per direction over all of ``X`` (``[seq, batch, input]``):
  ``XW = MatMulInteger(q(X), W[d], zp(X), W_zero_point[d]) * (scale(X) * W_scale[d])``;
* the recurrent product, at each step, over that step's hidden state ``H_{t-1}`` (``[batch,
  hidden]``, ``initial_h`` or zeros first): ``HR = MatMulInteger(q(H), R[d], zp(H),
  R_zero_point[d]) * (scale(H) * R_scale[d])``;
* the gates ``(XW_t + HR) + (Wb + Rb)`` (``clip`` when given), ``i = f(.)``, ``o = f(.)``,
  ``f = f(.)`` (``1 - i`` with ``input_forget``), ``c = g(.)``, ``C = C_prev * f + i *
  c``, ``H = o * h(C)``. A ``Loop`` over time per direction carries ``H`` and ``C``
  (the hidden state is quantized anew at each step, which no standard ``LSTM`` does).

Scales are per direction (``[num_directions]``) or per column (``[num_directions, 4 *
hidden]``); the kernel reads one zero point per direction (its first: per column it
requires them equal, zero for int8), as the body does.

Declined: ``sequence_lens`` and peepholes ``P`` (the ``torch.nn.LSTM`` that
``quantize_dynamic`` quantizes has neither), and activations other than the defaults
(``Sigmoid, Tanh, Tanh``).

onnxruntime's result depends on its thread count for some batches: the kernel quantizes
each step's hidden state over blocks of ``ceil(batch / threads)`` rows when ``batch > 4`` or
``2 <= batch`` with ``hidden_size <= 256`` (measured with onnxruntime 1.32, batch 2 to 5,
hidden 8: 1.8e-3 to 6.6e-3 apart between 1 and 2 threads). The body computes the whole batch
as one block: the kernel's arithmetic on one thread, for every batch (and on any thread count
for a batch of 1, or 2 to 4 with ``hidden_size > 256``). The comparison's oracle runs a model
holding this op on one thread (``rewriter_plugins.onnxruntime_target.THREAD_DEPENDENT_OPS``).

The quantization is written as ``Cast(Clip(Round(x / scale) + zero_point))``
(``dynamic_uint8(arithmetic=True)``), the numbers of ``QuantizeLinear``, which OpenVINO folds
with what follows into other arithmetic (1e-3 off). On OpenVINO the body still rounds a value
on a half-way point of the quantization grid the other way at times: its ``Divide`` is not
IEEE division (measured: 239 of 1000 quotients an ulp off), so the oracle's ``edges`` data
sets (inputs at their range's ends) differ (28 of 46, up to 0.023; a 2-layer bidirectional
torch LSTM 1.1e-3 off, verdict mismatch); typical data agree to 5e-7.

Oracle: onnxruntime's own CPU kernel.
"""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, TensorProto, helper

from rewriter.plugin import Arg, Declined, OpSample
from rewriter.plugin import present as _present

from .common import Body, unknown_attributes
from .dynamic_quantization import QUANT_OPSETS, dynamic_uint8

DOMAIN = "com.microsoft"

_INPUTS = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P",
           "W_scale", "W_zero_point", "R_scale", "R_zero_point"]
_ATTRIBUTES = {"activation_alpha", "activation_beta", "activations", "clip", "direction",
               "hidden_size", "input_forget"}
_DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}
_DEFAULT_ACTIVATIONS = ("sigmoid", "tanh", "tanh")
_INT8 = ("tensor(int8)", "tensor(uint8)")
def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _declines(ctx) -> str | None:
    node = ctx.node
    types = list(ctx.input_types or [])

    def typed(i, allowed):
        return (types[i] if i < len(types) else None) in (None, *allowed)

    if (unknown_attributes(node, _ATTRIBUTES) or not ctx.attribute("hidden_size")
            or len(node.input) != 12 or len(node.output) > 3
            or not any(node.output)
            or not all(_present(node.input, i) for i in (0, 1, 2, 8, 9, 10, 11))
            or not typed(0, ["tensor(float)"]) or not typed(1, _INT8) or not typed(2, _INT8)):
        return ("takes LSTM's attributes and hidden_size; X (float), W and R (int8 or uint8), "
                "the scales and zero points given; up to three outputs")
    if _text(ctx.attribute("direction", b"forward")) not in _DIRECTIONS:
        return "direction must be forward, reverse or bidirectional"
    if _present(node.input, 4):
        return ("sequence_lens is not covered (the kernel stops each sequence at its "
                "length and quantizes only the steps up to the longest)")
    if _present(node.input, 7):
        return "peepholes (P) are not covered"
    activations = [_text(a).lower() for a in ctx.attribute("activations", [])]
    dirs = _DIRECTIONS[_text(ctx.attribute("direction", b"forward"))]
    if activations and activations != list(_DEFAULT_ACTIVATIONS) * dirs:
        return "only the default activations (Sigmoid, Tanh, Tanh) are covered"
    return None


def _per_direction(b: Body, name: str, d: str) -> str:
    """``name[d]``: a scale per direction ([]) or per column ([4 * hidden])."""
    return b.op("Gather", name, d, axis=0)


def _zero_point(b: Body, name: str, d: str, dirs: int) -> str:
    """The one zero point the kernel reads for direction ``d``: the first of ``name[d]``
    (a scalar)."""
    return b.take(b.op("Gather", b.reshape(name, [dirs, -1]), d, axis=0), 0)


def _reversed_in_time(b: Body, x: str) -> str:
    return b.slice(x, [-1], [-(1 << 62)], [0], [-1])


def _direction(b: Body, ctx, d: int, xq: str, xs: str, xz: str, dirs: int,
               reverse: bool) -> tuple[str, str, str]:
    """One direction's ``Y`` ([seq, batch, hidden]), ``Y_h`` and ``Y_c`` ([batch,
    hidden])."""
    node = ctx.node
    hidden = int(ctx.attribute("hidden_size"))
    clip = ctx.attribute("clip")
    input_forget = bool(ctx.attribute("input_forget", 0))
    f32 = TensorProto.FLOAT
    index = b.const(np.array(d, np.int64))
    w, r = b.op("Gather", "W", index, axis=0), b.op("Gather", "R", index, axis=0)
    xw = b.op("Mul", b.cast(b.op("MatMulInteger", xq, w, xz,
                                 _zero_point(b, "W_zero_point", index, dirs)), f32),
              b.op("Mul", xs, _per_direction(b, "W_scale", index)))     # [seq, batch, 4h]
    if reverse:
        xw = _reversed_in_time(b, xw)
    bias = None
    if _present(node.input, 3):
        wb, rb = b.split(b.op("Gather", "B", index, axis=0), [4 * hidden, 4 * hidden])
        bias = b.op("Add", wb, rb)
    r_scale = _per_direction(b, "R_scale", index)
    r_zero = _zero_point(b, "R_zero_point", index, dirs)
    states = []
    for k, name in ((5, "initial_h"), (6, "initial_c")):
        if _present(node.input, k):
            states.append(b.op("Gather", name, index, axis=0))
        else:
            shape = b.op("Concat", b.dim_vector("X", 1), b.ints([hidden]), axis=0)
            states.append(b.fill(shape, 0.0, f32))

    body = b.child()
    step, cond, h, c = (body.fresh("t"), body.fresh("cond"), body.fresh("h"),
                        body.fresh("c"))
    hq, hs, hz = dynamic_uint8(body, h, arithmetic=True)
    hr = body.op("Mul", body.cast(body.op("MatMulInteger", hq, r, hz, r_zero), f32),
                 body.op("Mul", hs, r_scale))
    gates = body.op("Add", body.op("Gather", xw, step, axis=0), hr)
    if bias is not None:
        gates = body.op("Add", gates, bias)
    if clip is not None:
        gates = body.clip(gates, -float(clip), float(clip))
    i, o, f, g = body.split(gates, [hidden] * 4, axis=1)
    i = body.op("Sigmoid", i)
    f = body.op("Sub", body.literal(1.0), i) if input_forget else body.op("Sigmoid", f)
    c_new = body.op("Add", body.op("Mul", c, f), body.op("Mul", i, body.op("Tanh", g)))
    h_new = body.op("Mul", body.op("Sigmoid", o), body.op("Tanh", c_new))
    outs = [body.op("Identity", cond), h_new, c_new, body.op("Identity", h_new)]
    graph = helper.make_graph(
        body.nodes, b.fresh("dynamic_quantize_lstm_step"),
        [helper.make_tensor_value_info(step, TensorProto.INT64, []),
         helper.make_tensor_value_info(cond, TensorProto.BOOL, []),
         helper.make_tensor_value_info(h, f32, None),
         helper.make_tensor_value_info(c, f32, None)],
        [helper.make_tensor_value_info(outs[0], TensorProto.BOOL, []),
         *[helper.make_tensor_value_info(v, f32, None) for v in outs[1:]]])
    # (an explicit condition: the reference evaluator runs no trip when it is omitted)
    h_last, c_last, y = b.op("Loop", b.dim("X", 0), b.const(np.array(True), TensorProto.BOOL),
                             *states, outputs=3, body=graph)
    # [seq, batch, hidden] (onnx 1.23's reference evaluator concatenates a Loop's scan
    # outputs, [seq * batch, hidden], where the spec stacks them)
    y = b.op("Reshape", y, b.op("Concat", b.ints([-1]), b.op("Shape", h_last), axis=0))
    if reverse:
        y = _reversed_in_time(b, y)
    return y, h_last, c_last


def build_dynamic_quantize_lstm(ctx) -> FunctionProto | None:
    """``com.microsoft::DynamicQuantizeLSTM`` (see the module docstring)."""
    why = _declines(ctx)
    if why:
        raise Declined(why)
    direction = _text(ctx.attribute("direction", b"forward"))
    dirs = _DIRECTIONS[direction]
    b = Body(ctx.opset, TensorProto.FLOAT)
    xq, xs, xz = dynamic_uint8(b, "X", arithmetic=True)
    per_direction = [_direction(b, ctx, d, xq, xs, xz, dirs,
                                reverse=direction == "reverse" or d == 1)
                     for d in range(dirs)]

    def stacked(k: int, axis: int) -> str:
        parts = [b.unsqueeze(p[k], [axis]) for p in per_direction]
        return parts[0] if dirs == 1 else b.op("Concat", *parts, axis=axis)

    outputs = [stacked(0, 1), stacked(1, 0), stacked(2, 0)][:len(ctx.node.output)]
    return b.function(DOMAIN, "dynamic_quantize_lstm", _INPUTS, outputs)


# -- oracle samples --------------------------------------------------------------------------

def _sample(case: str, opset: int) -> OpSample:
    """``X`` (4, batch 1, 5), hidden 4 (one case: batch 3, hidden 260); int8 or uint8
    weights, scales per direction or per column, forward, reverse or both directions."""
    seq, batch, inputs, hidden = 4, 1, 5, 4
    if "batch3" in case:
        batch, hidden = 3, 260
    direction = ("bidirectional" if "bidirectional" in case
                 else "reverse" if "reverse" in case else "forward")
    dirs = _DIRECTIONS[direction]
    signed = "uint8" not in case
    w_type, (low, high) = ("int8", (-128, 128)) if signed else ("uint8", (0, 256))
    columns = "per-column" in case

    def scale(low_scale, high_scale):
        return Arg(f"float[{dirs},{4 * hidden}]" if columns else f"float[{dirs}]",
                   low=low_scale, high=high_scale, constant=True)

    def zero_point():
        shape = (dirs, 4 * hidden) if columns else (dirs,)
        if signed:  # symmetric per column (the kernel requires it), any per direction
            values = np.zeros(shape, np.int8) if columns else np.array([3, -5][:dirs], np.int8)
        else:  # one value per column (the kernel requires it)
            values = np.full(shape, 128, np.uint8) if columns else np.array(
                [128, 120][:dirs], np.uint8)
        return Arg(f"{w_type}[{','.join(map(str, shape))}]", values=values, constant=True)

    states = "no-states" not in case
    args = [Arg(f"float[{seq},{batch},{inputs}]", low=-3.0, high=3.0),
            Arg(f"{w_type}[{dirs},{inputs},{4 * hidden}]", low=low, high=high, constant=True),
            Arg(f"{w_type}[{dirs},{hidden},{4 * hidden}]", low=low, high=high, constant=True),
            Arg(f"float[{dirs},{8 * hidden}]", low=-0.5, high=0.5, constant=True)
            if "no-bias" not in case else None,
            None,
            Arg(f"float[{dirs},{batch},{hidden}]", low=-1.0, high=1.0) if states else None,
            Arg(f"float[{dirs},{batch},{hidden}]", low=-1.0, high=1.0) if states else None,
            None,
            scale(0.001, 0.004), zero_point(), scale(0.002, 0.008), zero_point()]
    attrs = {"hidden_size": hidden, "direction": direction}
    if "clip" in case:
        attrs["clip"] = 0.5
    if "input-forget" in case:
        attrs["input_forget"] = 1
    return OpSample(args, ["float", "float", "float"], attrs, opset=opset, name=case,
                    tolerance=(1e-4, 1e-5))


_OPSETS = (11, 17)
_CASES = ["int8", "uint8-no-states", "int8-per-column", "uint8-per-column",
          "int8-reverse", "int8-bidirectional", "uint8-per-column-bidirectional-no-states",
          "int8-no-bias-clip-input-forget", "int8-batch3-hidden260"]


def _oracles() -> dict[str, dict]:
    return {"DynamicQuantizeLSTM": dict(oracle="onnxruntime", samples=[
        _sample(c, o) for c in _CASES for o in _OPSETS])}


def register_decompositions(registry) -> None:
    """Called by ``rewriter_plugins.com_microsoft``'s hook."""
    registry.add(DOMAIN, "DynamicQuantizeLSTM", build_dynamic_quantize_lstm,
                 opsets=QUANT_OPSETS, dtypes=("float",),
                 description="com-microsoft:DynamicQuantizeLSTM",
                 **_oracles()["DynamicQuantizeLSTM"])
