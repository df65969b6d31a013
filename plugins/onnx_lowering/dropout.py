"""``Dropout`` with a training mode known only at run time:

* ``Dropout(data[, ratio[, training_mode]])`` with a ``training_mode`` computed at run
  time: ``Where(training_mode, Where(u >= ratio, data / (1 - ratio), 0), data)`` with
  ``u = RandomUniformLike(data)``; ``mask`` the kept positions (all true when not
  training). The random draw is not numpy's, so only ``ratio = 0`` or inference reproduce
  a reference run.
"""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, TensorProto

from rewriter.plugin import Arg, Declined, OpSample, declining
from rewriter.plugin import present as _present

from .common import (
    DOMAIN,
    Body,
    attributes_known,
    body_opset,
    float_elem,
    formal_inputs,
)

DROPOUT_OPSETS = (12, None)  # ratio and training_mode as inputs


# -- Dropout with a run-time training mode --------------------------------------------------


@declining
def build_dropout(ctx) -> FunctionProto | None:
    """Training ``Dropout`` with ``RandomUniformLike``, chosen at run time."""
    node = ctx.node
    elem = float_elem(ctx, 0)
    if (elem is None or not _present(node.input, 2) or len(node.input) > 3
            or not attributes_known(node, ["seed"]) or len(node.output) > 2):
        raise Declined("needs data of a known float type and training_mode given, only seed, at "
                       "most 2 outputs")
    b = Body(body_opset(ctx))
    one = b.const(np.array(1.0), elem, hint="one")
    ratio = "ratio" if _present(node.input, 1) else b.const(np.array(0.5), elem, hint="ratio")
    ratio = b.cast(ratio, elem)
    seed = ctx.attribute("seed")
    uniform = b.op("RandomUniformLike", "data", dtype=elem,
                   seed=None if seed is None else float(seed))
    keep = b.op("GreaterOrEqual", uniform, ratio)
    scaled = b.op("Div", "data", b.op("Sub", one, ratio))
    dropped = b.op("Where", keep, scaled, b.const(np.array(0.0), elem, hint="zero"))
    training = b.op("Reshape", b.cast("training_mode", TensorProto.BOOL), b.ints([]))
    y = b.op("Where", training, dropped, "data")
    outputs = [y]
    if len(node.output) > 1 and node.output[1]:
        outputs.append(b.op("Or", b.op("Not", training), keep))
    return b.function(DOMAIN, "dropout", formal_inputs(node, ["data", "ratio", "training_mode"]),
                      outputs)


def samples() -> dict[str, list[OpSample]]:
    """The samples of this module's ops, by op type."""
    return {
        "Dropout": [
            OpSample(["T[3,4,5]", Arg("T[]", values=0.0), Arg("bool[]", values=True)],
                     ["T", "bool"], {"seed": 0}, opset=22, name="zero-ratio-training"),
            OpSample(["T[3,4,5]", Arg("T[]", values=0.7), Arg("bool[]", values=False)],
                     ["T", "bool"], opset=13, name="not-training"),
            OpSample(["T[3,4]", None, Arg("bool[]", values=False)], opset=12,
                     name="default-ratio-not-training")],
    }
