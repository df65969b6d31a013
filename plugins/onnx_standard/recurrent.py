"""``RNN``, ``GRU`` and ``LSTM`` with ``layout = 1`` (batch first) or ``direction =
"reverse"`` as the same op time first and forward, its inputs and outputs rearranged (part
of the ``onnx-standard`` plugin, which registers them).

``layout = 1`` only moves axes: ``X`` is ``[batch, seq, input]`` instead of ``[seq, batch,
input]``, ``initial_h``/``initial_c`` and ``Y_h``/``Y_c`` are ``[batch, num_directions,
hidden]`` instead of ``[num_directions, batch, hidden]``, and ``Y`` is ``[batch, seq,
num_directions, hidden]`` instead of ``[seq, num_directions, batch, hidden]``; the weights,
biases, ``sequence_lens`` and peepholes are the same. OpenVINO 2026.4 runs ``layout = 1``
with other numbers (GRU 1.66 off on the ONNX node case ``test_gru_batchwise``, found against
the reference evaluator); onnxruntime 1.32 refuses it ("Batchwise recurrent operations
(layout == 1) are not supported").

A reverse direction runs from each sequence's last step to its first: the forward op on the
sequences reversed (``ReverseSequence`` over ``sequence_lens``, else a ``Slice`` with step
-1), its ``Y`` reversed back the same way; ``Y_h``/``Y_c``, the states after the first step,
are the forward run's last. tract 0.23 computes GRU, LSTM and RNN reverse otherwise (the ONNX
node cases ``test_*_reverse``). Bidirectional nodes are left as they are.

Exact: transposes and reversals move values. Checked against the reference evaluator's own
recurrent ops, and onnxruntime's kernel for shorter sequences (the evaluator ignores
``sequence_lens``)."""

from __future__ import annotations

from onnx import TensorProto, helper

from rewriter.plugin import Declined, FunctionBuilder, OpSample

RECURRENT = ("RNN", "GRU", "LSTM")
_STATES = {"RNN": 1, "GRU": 1, "LSTM": 2}  # initial_h (and initial_c) at inputs 5 (and 6)


def build_time_major(ctx):
    """The node time first (``layout = 0``) and forward, its batch-first inputs and
    outputs transposed, a reverse direction's sequences reversed (see the docstring)."""
    node = ctx.node
    batch_first = ctx.attribute("layout", 0) == 1
    direction = ctx.attribute("direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    reverse = direction == "reverse"
    if not batch_first and not reverse:
        raise Declined("time first and forward or bidirectional already: nothing to "
                       "rearrange")
    if reverse and ctx.opset < 10:
        raise Declined("reversing a sequence needs ReverseSequence and Slice steps "
                       "(opset 10)")
    b = FunctionBuilder(ctx.opset)
    names = [f"i{k}" for k in range(len(node.input))]  # a left-out one is bound to ""
    args = [name if given else "" for name, given in zip(names, node.input)]
    lengths = args[4] if len(args) > 4 else ""
    if batch_first:
        args[0] = b.op("Transpose", names[0], perm=[1, 0, 2])
        for k in range(5, 5 + _STATES[node.op_type]):
            if k < len(args) and args[k]:
                args[k] = b.op("Transpose", args[k], perm=[1, 0, 2])

    def reversed_in_time(value: str) -> str:
        """``value`` ([seq, batch, ...]) with each sequence's first ``sequence_lens``
        steps in reverse order (all of them without ``sequence_lens``)."""
        if lengths:
            return b.op("ReverseSequence", value, b.op("Cast", lengths, to=TensorProto.INT64),
                        batch_axis=1, time_axis=0)
        return b.op("Slice", value, b.ints([-1]), b.ints([-(1 << 62)]), b.ints([0]),
                    b.ints([-1]))

    if reverse:
        args[0] = reversed_in_time(args[0])
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute
             if a.name != "layout" and not (reverse and a.name == "direction")}
    made = b.op(node.op_type, *args, outputs=len(node.output), **attrs)
    made = [made] if isinstance(made, str) else list(made)
    outputs = []
    for k, (value, wanted) in enumerate(zip(made, node.output)):
        if wanted and k == 0 and reverse:  # Y: [seq, 1, batch, hidden]
            value = b.op("Transpose", reversed_in_time(
                b.op("Transpose", value, perm=[0, 2, 1, 3])), perm=[0, 2, 1, 3])
        if wanted and batch_first:
            value = b.op("Transpose", value, perm=[2, 0, 1, 3] if k == 0 else [1, 0, 2])
        outputs.append(value)  # (a left-out output: the value, unused)
    return b.function("onnx_standard", f"{node.op_type}_rearranged", names, outputs)


def time_major_samples(op_type: str) -> list[OpSample]:
    """Batch first (forward, both directions, reverse) and time-first reverse, with
    initial states."""
    from rewriter.plugin import Arg

    hidden, inputs, batch, seq = 3, 2, 2, 4
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op_type]
    states = _STATES[op_type]
    samples = []
    for direction, dirs, layout in (("forward", 1, 1), ("bidirectional", 2, 1),
                                    ("reverse", 1, 0), ("reverse", 1, 1)):
        lead = (batch, seq) if layout else (seq, batch)
        args = [Arg(f"T[{lead[0]},{lead[1]},{inputs}]"),
                Arg(f"T[{dirs},{gates * hidden},{inputs}]", low=-0.5, high=0.5),
                Arg(f"T[{dirs},{gates * hidden},{hidden}]", low=-0.5, high=0.5),
                Arg(f"T[{dirs},{2 * gates * hidden}]", low=-0.5, high=0.5),
                # full lengths: the reference evaluator (onnx 1.23) ignores sequence_lens
                Arg(f"int32[{batch}]", values=[seq, seq])]
        state = (batch, dirs) if layout else (dirs, batch)
        args += [Arg(f"T[{state[0]},{state[1]},{hidden}]") for _ in range(states)]
        outputs = ["T"] * (1 + states)
        samples.append(OpSample(args, outputs, {"hidden_size": hidden, "layout": layout,
                                                "direction": direction},
                                opset=14, dtypes=["float"],
                                name=f"{direction}-layout{layout}"))
    # a reverse direction with shorter sequences (each reversed over its own length):
    # onnxruntime's kernel, which reads sequence_lens, as the oracle
    args = [Arg(f"T[{seq},{batch},{inputs}]"),
            Arg(f"T[1,{gates * hidden},{inputs}]", low=-0.5, high=0.5),
            Arg(f"T[1,{gates * hidden},{hidden}]", low=-0.5, high=0.5),
            Arg(f"T[1,{2 * gates * hidden}]", low=-0.5, high=0.5),
            Arg(f"int32[{batch}]", values=[seq - 2, seq])]
    samples.append(OpSample(args, ["T"] * (1 + states), {"hidden_size": hidden,
                                                         "direction": "reverse"},
                            opset=14, dtypes=["float"], oracle="onnxruntime",
                            name="reverse-shorter-sequences"))
    return samples
