"""``RNN``, ``GRU`` and ``LSTM`` with ``layout = 1`` (batch first) as the same op with
``layout = 0`` between transposes (part of the ``onnx-standard`` plugin, which registers
them).

``layout = 1`` only moves axes: ``X`` is ``[batch, seq, input]`` instead of ``[seq, batch,
input]``, ``initial_h``/``initial_c`` and ``Y_h``/``Y_c`` are ``[batch, num_directions,
hidden]`` instead of ``[num_directions, batch, hidden]``, and ``Y`` is ``[batch, seq,
num_directions, hidden]`` instead of ``[seq, num_directions, batch, hidden]``; the weights,
biases, ``sequence_lens`` and peepholes are the same. OpenVINO 2026.4 runs ``layout = 1``
with other numbers (GRU 1.66 off on the ONNX node case ``test_gru_batchwise``, found against
the reference evaluator); onnxruntime 1.32 refuses it ("Batchwise recurrent operations
(layout == 1) are not supported"). Exact: transposes move values. Checked against the
reference evaluator's own recurrent ops."""

from __future__ import annotations

from onnx import helper

from rewriter.plugin import Declined, FunctionBuilder, OpSample

RECURRENT = ("RNN", "GRU", "LSTM")
_STATES = {"RNN": 1, "GRU": 1, "LSTM": 2}  # initial_h (and initial_c) at inputs 5 (and 6)


def build_time_major(ctx):
    """The node with ``layout = 0``, its batch-first inputs and outputs transposed."""
    node = ctx.node
    if ctx.attribute("layout", 0) != 1:
        raise Declined("layout is 0 already")
    b = FunctionBuilder(ctx.opset)
    names = [f"i{k}" for k in range(len(node.input))]  # a left-out one is bound to ""
    args = [name if given else "" for name, given in zip(names, node.input)]
    args[0] = b.op("Transpose", names[0], perm=[1, 0, 2])
    for k in range(5, 5 + _STATES[node.op_type]):
        if k < len(args) and args[k]:
            args[k] = b.op("Transpose", args[k], perm=[1, 0, 2])
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute
             if a.name != "layout"}
    count = len(node.output)
    made = b.op(node.op_type, *args, outputs=count, **attrs)
    made = [made] if isinstance(made, str) else list(made)
    outputs = []
    for k, (value, wanted) in enumerate(zip(made, node.output)):
        if not wanted:
            outputs.append("")
            continue
        outputs.append(b.op("Transpose", value, perm=[2, 0, 1, 3] if k == 0 else [1, 0, 2]))
    return b.function("onnx_standard", f"{node.op_type}_time_major", names, outputs)


def time_major_samples(op_type: str) -> list[OpSample]:
    """Batch first, one and both directions, with initial states."""
    from rewriter.plugin import Arg

    hidden, inputs, batch, seq = 3, 2, 2, 4
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op_type]
    states = _STATES[op_type]
    samples = []
    for direction, dirs in (("forward", 1), ("bidirectional", 2)):
        args = [Arg(f"T[{batch},{seq},{inputs}]"),
                Arg(f"T[{dirs},{gates * hidden},{inputs}]", low=-0.5, high=0.5),
                Arg(f"T[{dirs},{gates * hidden},{hidden}]", low=-0.5, high=0.5),
                Arg(f"T[{dirs},{2 * gates * hidden}]", low=-0.5, high=0.5),
                # full lengths: the reference evaluator (onnx 1.23) ignores sequence_lens
                Arg(f"int32[{batch}]", values=[seq, seq])]
        args += [Arg(f"T[{batch},{dirs},{hidden}]") for _ in range(states)]
        outputs = ["T"] * (1 + states)
        samples.append(OpSample(args, outputs, {"hidden_size": hidden, "layout": 1,
                                                "direction": direction},
                                opset=14, dtypes=["float"], name=direction))
    return samples
