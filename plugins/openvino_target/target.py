"""Target ``openvino[:DEVICE]``: OpenVINO (CPU device by default), an optional dependency.

Capability comes from OpenVINO's own answers, node by node: a one-node model (the node, its
input types and shapes, the values of its small constant inputs, the values it reads from
enclosing graphs) is loaded by OpenVINO's ONNX frontend (``FrontEndManager`` → ``onnx``),
converted (``FrontEnd.convert``: a missing conversion rule or a translator's refusal is the
answer), asked to the device (``Core.query_model``) and compiled (``Core.compile_model``).
Verdicts are cached per process by what they depend on (domain, op, opset, input types and
shapes, constant inputs, attributes), so a big model costs one probe per distinct node
signature, not one per node. ``confirm`` compiles the whole model in a child process and, for
small models, runs it once there on generated inputs; ``prepare`` runs it (``compare`` calls
it inside the isolation worker).

Models reach OpenVINO as bytes; OpenVINO resolves external data against the working
directory, so loads happen with the model's folder (``base_dir``) as working directory (the
confirming child starts there; ``prepare`` switches to it in the isolation worker while
OpenVINO loads), after checking that every location stays inside that folder. Nothing is
written anywhere.

The CPU plugin runs float32 models in bfloat16 on CPUs that have it unless told otherwise;
this target asks for float32 (``INFERENCE_PRECISION_HINT``) so a comparison measures the
model, not the device's precision.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import pickle
import re
import sys
import weakref
from functools import cache

from rewriter_plugins.probe_models import PROBE_CONSTANT_LIMIT as _PROBE_CONSTANT_LIMIT
from rewriter_plugins.probe_models import SMALL_CONSTANT_BYTES as _SMALL_CONSTANT_BYTES
from rewriter_plugins.probe_models import VALUE_TYPES as _VALUE_TYPES
from rewriter_plugins.probe_models import external as _external
from rewriter_plugins.probe_models import inferred_shapes as _inferred_shapes
from rewriter_plugins.probe_models import model_constants, model_file, onnxruntime_runs, written
from rewriter_plugins.probe_models import renamed as _renamed
from rewriter_plugins.probe_models import shape_key as _shape_key
from rewriter_plugins.probe_models import tensor_bytes as _tensor_bytes
from rewriter_plugins.probe_models import zeros_like as _zeros_like

from rewriter.plugin import (
    RUN_BY_DEFAULT_BELOW,
    Confirmation,
    Finding,
    NodeQuery,
    Target,
    TargetError,
    TargetOptions,
    child_says,
    confirm_in_child,
    generated_feeds,
    hookimpl,
    model_size,
    run_sets,
)

NOT_INSTALLED = "OpenVINO is not installed: pip install 'onnx-graph-rewriter[openvino]'"
DEFAULT_DEVICE = "CPU"
CONFIRM_BY_DEFAULT_BELOW = 100 * 2**20  # bytes of model + external data
CONFIRM_TIMEOUT_S = 300
# Constant inputs are given to a probe as rewriter_plugins.probe_models says (OpenVINO's
# translators read shapes, axes, pads... from them).
# Shape inference (ranks for the probes' inputs: the CPU plugin compiles no input of unknown
# rank) runs on models up to this many nodes; bigger ones are probed at conversion level
# where a rank is unknown, and the whole-model confirmation decides.
_SHAPE_INFERENCE_MAX_NODES = 20_000
# The whole model is compiled first (one answer for every node) up to this many nodes.
_WHOLE_MODEL_MAX_NODES = 500
# Domains OpenVINO's ONNX frontend registers translators in (strings of
# libopenvino_onnx_frontend, 2024.x-2026.x); an op of any other domain has no conversion.
_OPENVINO_DOMAINS = frozenset({
    "", "ai.onnx.ml", "ai.onnx.preview.training", "com.microsoft", "org.openvinotoolkit",
    "org.pytorch.aten", "mmdeploy",
})
_CONFIG = {"INFERENCE_PRECISION_HINT": "f32"}
# Shapes tried, in order, for a node whose inputs' ranks are unknown: a rank with dynamic
# dimensions (images, matrices, ...), then with static ones of size 1 (the CPU plugin wants
# static shapes for some inputs, e.g. convolution weights)
_SHAPE_WORDS = re.compile(r"\b(rank|shape|dynamic|dimension)", re.IGNORECASE)
_GUESSED_RANKS = ((4, None), (2, None), (3, None), (1, None), (0, None), (5, None),
                  (4, 1), (3, 1), (2, 1))

# Ops OpenVINO converts, compiles and runs, but not with the op's definition: a finding, so
# that an exact remedy runs instead. (domain, op) -> why, as measured.
KNOWN_INEXACT = {
    ("com.microsoft", "DynamicQuantizeMatMul"): (
        "OpenVINO's translation of com.microsoft::DynamicQuantizeMatMul does not compute the "
        "op's quantized arithmetic (onnxruntime's kernel): outputs differ by up to 2.1e-3 "
        "on a dynamically quantized BERT"),
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

_NOT_ASKED = ("not-asked", "")  # the whole model was not asked about (too big, external data)

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


def _weights_dequantized(query: NodeQuery, constants) -> str | None:
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


def inexact_form(query: NodeQuery) -> str | None:
    """Why OpenVINO computes this node otherwise than its definition (one of the forms
    above), or None."""
    node, types = query.node, query.types
    sixteen = _qdq_16bit(query)
    if sixteen is not None:
        return sixteen
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

# (device, probe key) -> None (runs) or (reason, detail): one cache per process
_VERDICTS: dict[tuple, tuple[str, str] | None] = {}


@cache
def _openvino():
    """(openvino module, Core, the ONNX FrontEnd); TargetError when OpenVINO is absent."""
    try:
        import openvino
        from openvino.frontend import FrontEndManager
    except ImportError:
        raise TargetError(NOT_INSTALLED) from None
    frontend = FrontEndManager().load_by_framework("onnx")
    return openvino, openvino.Core(), frontend


def convert(model_bytes: bytes):
    """OpenVINO's ONNX frontend: load serialized ONNX bytes and convert them to an
    ``openvino.Model`` (raises OpenVINO's error)."""
    _, _, frontend = _openvino()
    return frontend.convert(frontend.load(io.BytesIO(model_bytes)))


def compile_model(model_bytes: bytes, device: str = DEFAULT_DEVICE):
    """Convert and compile for ``device`` with float32 inference precision.

    The compiled model may read constants from ``model_bytes`` itself (the frontend does
    not copy them): keep the bytes alive as long as the compiled model."""
    _, core, _ = _openvino()
    return core.compile_model(convert(model_bytes), device, _CONFIG)


# -- the ways users load a model --------------------------------------------------------------

# OpenVINO reads an ONNX file (a path: its GraphIterator decoder) and ONNX bytes (a stream:
# its ModelProto decoder) differently: 2026.4 converts NegativeLogLikelihoodLoss with an
# ignore_index from bytes and refuses it from a file ("get_attribute is not implemented").
# A whole model is asked by path as users do, and from bytes; the stricter answer wins.
BY_PATH = "Core.read_model(path)"
BY_CONVERT = "openvino.convert_model(path)"  # read_model's conversion + its MOC passes
BY_BYTES = "FrontEnd.load(bytes)"
USER_ROUTES = (BY_PATH, BY_CONVERT, BY_BYTES)


def read_by(route: str, path: str | None, data: bytes):
    """OpenVINO's ``openvino.Model`` of the ONNX model at ``path`` (its bytes ``data``), read
    the way ``route`` names (raises OpenVINO's error)."""
    openvino, core, _ = _openvino()
    if route == BY_PATH:
        return core.read_model(path)
    if route == BY_CONVERT:
        return openvino.convert_model(path)
    return convert(data)


def compiled_by_routes(path: str | None, data: bytes, device: str, routes=USER_ROUTES):
    """Read the model by each of ``routes`` (those by path only with a ``path``) and compile
    each result for ``device``: ([(route, compiled model)], refusal or None). The stricter
    answer wins: any route's refusal is the answer, in OpenVINO's words (one line) with the
    route that refused and those that compile it ("... [refused by Core.read_model(path);
    FrontEnd.load(bytes) compiles it]")."""
    _, core, _ = _openvino()
    compiled, refusals = [], []
    for route in routes:
        if route != BY_BYTES and path is None:
            continue
        try:
            compiled.append((route, core.compile_model(read_by(route, path, data), device,
                                                       _CONFIG)))
        except Exception as e:  # noqa: BLE001 - OpenVINO's refusal is the answer
            refusals.append((route, clean_message(str(e))))
    if not refusals:
        return compiled, None
    route, message = refusals[0]
    refused = ", ".join(r for r, _ in refusals)
    ok = ", ".join(r for r, _ in compiled)
    verb = "compiles" if len(compiled) == 1 else "compile"
    return compiled, f"{message} [refused by {refused}" + (f"; {ok} {verb} it]" if ok
                                                          else "]")


def reason_of(message: str) -> str:
    """The reason code of OpenVINO's refusal: no conversion rule (``no-kernel``), a type it
    does not take (``type-binding``), else ``runtime-refused``."""
    if "No conversion rule found" in message or "no conversion rule" in message:
        return "no-kernel"
    return "type-binding" if _is_type_problem(message) else "runtime-refused"


# -- OpenVINO's messages ----------------------------------------------------------------------

_CHECK = re.compile(r"Check '.*?' failed at \S+:\d+:\s*")
_NODE_REF = re.compile(r"While validating ONNX node '<Node\((\w+)\): ([^>]*)>':?\s*")
_NOISE_LINES = (
    "Exception from src", "FrontEnd API failed", "Model wasn't fully converted",
    "Summary:", "To facilitate", "Failed operations detailed log", "While validating node '",
)


def clean_message(text: str) -> str:
    """OpenVINO's multi-line error as one line: source locations, check expressions and the
    frontend's boilerplate dropped; the node it names kept as "node with name '...'"."""
    node = _NODE_REF.search(text)
    kept = []
    for line in text.splitlines():
        line = _NODE_REF.sub("", _CHECK.sub("", line.strip())).strip()
        if not line or line.startswith(_NOISE_LINES) or re.match(r"-- .* with a message:$", line):
            continue
        if line.startswith("-- Conversion is failed for"):
            continue
        kept.append(line.removeprefix("Unexpected: ").removeprefix("-- "))
    message = " ".join(dict.fromkeys(kept)) or (text.strip().splitlines() or ["error"])[0]
    if node and node.group(2):
        message += f" (node with name '{node.group(2)}', {node.group(1)})"
    return message


def _no_rule_ops(text: str) -> list[str]:
    m = re.search(r"No conversion rule found for operations: ([^\n]*)", text)
    return [x.strip() for x in m.group(1).split(",")] if m else []


def _is_type_problem(message: str) -> bool:
    lowered = message.lower()
    return any(w in lowered for w in ("element type", "precision", "prc", "data type",
                                      "unsupported type", "not supported type", "type: "))


# -- probes -----------------------------------------------------------------------------------

def probe(model_bytes: bytes, device: str, op_label: str, *, unknown_ranks: bool = False):
    """What OpenVINO says about a small model: None if it converts and compiles for
    ``device``; else (reason, detail). The model is read by path (written to a private
    temporary file: OpenVINO's file decoder, ``Core.read_model``'s) and from bytes, and
    a refusal by either is the answer; the path route's conversion is compiled. When
    compiling fails, ``Core.query_model`` names the operations the device does not support.
    ``unknown_ranks``: some tensor input's rank is not known to us, so a model that converts
    but has inputs of dynamic rank (which the CPU plugin never compiles) is not compiled:
    conversion decides."""
    _, core, frontend = _openvino()
    with written(model_bytes) as path:
        verdict, ov_model = _converted(frontend, (path, model_bytes), op_label, BY_PATH)
        if verdict is None:  # the bytes route: stricter wins
            verdict, _ = _converted(frontend, io.BytesIO(model_bytes), op_label, BY_BYTES)
        if verdict is not None:
            return verdict
        if unknown_ranks and _has_dynamic_rank(ov_model):
            return None  # the CPU plugin compiles no input of unknown rank: conversion decides
        return _compiles(core, ov_model, device)


def _compiles(core, ov_model, device: str):
    """None when ``device`` compiles ``ov_model``; else (reason, detail), naming the
    operations ``Core.query_model`` says the device does not support."""
    try:
        core.compile_model(ov_model, device, _CONFIG)
    except Exception as e:  # noqa: BLE001
        message = clean_message(str(e))
    else:
        return None
    try:
        supported = core.query_model(ov_model, device, _CONFIG)
    except Exception:  # noqa: BLE001 - the compile error says enough
        supported = None
    if supported is not None:
        missing = sorted({op.get_type_name() for op in ov_model.get_ordered_ops()
                          if op.get_friendly_name() not in supported})
        if missing:
            return ("no-kernel", f"OpenVINO's {device} device does not support the "
                    f"operation(s) {', '.join(missing)} it converts to ({message})")
    reason = "type-binding" if _is_type_problem(message) else "runtime-refused"
    return (reason, f"OpenVINO's {device} plugin cannot compile it: {message}")


def _converted(frontend, source, op_label: str, route: str):
    """(None, openvino.Model) when OpenVINO's ONNX frontend loads and converts ``source`` (a
    path or a stream), else ((reason, detail), None); a refusal from bytes says so (the
    file route converts the same model)."""
    said = "" if route == BY_PATH else " (from bytes, FrontEnd.load(stream); read from a file " \
        "it converts)"
    if route == BY_PATH and isinstance(source, tuple):  # (path, bytes): say so when the
        source, data = source  # bytes route converts what the file route refuses
        verdict, model = _converted(frontend, source, op_label, route)
        if verdict is not None and _converted(frontend, io.BytesIO(data), op_label,
                                              BY_BYTES)[0] is None:
            verdict = (verdict[0], verdict[1] + " (read from a file, as Core.read_model(path) "
                       "reads it; from bytes it converts)")
        return verdict, model
    try:
        input_model = frontend.load(source)
    except Exception as e:  # noqa: BLE001 - OpenVINO's refusal is the answer
        return ("invalid-node", f"OpenVINO's ONNX frontend cannot load it{said}: "
                f"{clean_message(str(e))}"), None
    try:
        return None, frontend.convert(input_model)
    except Exception as e:  # noqa: BLE001
        text = str(e)
        missing = _no_rule_ops(text)
        if missing:
            return ("no-kernel", f"OpenVINO's ONNX frontend has no conversion rule for "
                    f"{op_label} (it lists {', '.join(missing)}){said}"), None
        message = clean_message(text)
        reason = "type-binding" if _is_type_problem(message) else "runtime-refused"
        return (reason, f"OpenVINO's ONNX frontend cannot convert it{said}: {message}"), None


def _has_dynamic_rank(ov_model) -> bool:
    return any(p.get_partial_shape().rank.is_dynamic or p.get_element_type().is_dynamic()
               for p in ov_model.get_parameters())


_REDUCE_OPS = frozenset({"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                         "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                         "ReduceSumSquare"})


def _rank_follows_fed_axes(query: NodeQuery) -> bool:
    """A reduction in a decomposition body whose ``axes`` the model's caller feeds (the
    planner says which; the probe, given no shapes there, would guess its way past it), with
    ``keepdims = 0``: OpenVINO converts it to an operation of dynamic rank, which its CPU
    plugin refuses ("ReduceSum operation with dynamic rank")."""
    node = query.node
    if query.domain or node.op_type not in _REDUCE_OPS or len(query.inputs) < 2:
        return False
    keepdims = next((a.i for a in node.attribute if a.name == "keepdims"), 1)
    return keepdims == 0 and bool(query.inputs[1]) and query.inputs[1] in query.caller_fed


def _has_dynamic_input(model) -> bool:
    """Whether some input of ``model`` (not an initializer) has a shape not fully static."""
    initializers = {t.name for t in model.graph.initializer}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        shape = _shape_key(value.type)
        if shape is None or not all(isinstance(d, int) for d in shape):
            return True
    return False


def _weights_follow_fed_values(query: NodeQuery) -> bool:
    """A convolution in a decomposition body whose weights the model's caller feeds (the
    planner says which; the probe, given no shapes there, would give it the benefit of the
    doubt), asked about for a model with an input of a dynamic shape (the body does not say
    which input the weights come from): OpenVINO's CPU plugin convolves with no weights of
    a dynamic shape ("Doesn't support dynamic weights shape")."""
    node = query.node
    return (not query.domain and node.op_type == "Conv"
            and len(query.inputs) > 1 and bool(query.inputs[1])
            and query.inputs[1] in query.caller_fed)


def _split_sizes_proto(node, query: NodeQuery, name: str, proto):
    """A ``Split``'s computed ``split`` input of unknown length as what the spec makes it:
    one size per output (OpenVINO's frontend makes as many outputs as that length says, one
    when it is unknown: a decomposition body's ``Split`` of computed sizes converts in the
    whole model, where the length is known, but not in a probe that did not say it)."""
    from onnx import helper

    if (query.domain not in ("", "ai.onnx") or node.op_type != "Split"
            or len(node.input) < 2 or name != node.input[1] or proto is None
            or proto.WhichOneof("value") != "tensor_type"
            or _shape_key(proto) not in (None, (None,))):
        return proto
    return helper.make_tensor_type_proto(proto.tensor_type.elem_type, [len(query.outputs)])


def _blames_subgraph(node, detail: str) -> bool:
    """Whether OpenVINO's refusal of a node with subgraphs names an operation or a node of
    those subgraphs (then the walk reports that node; the If/Loop/Scan itself is fine)."""
    from onnx import AttributeProto

    inner = []
    stack = [a.g for a in node.attribute if a.type == AttributeProto.GRAPH]
    stack += [g for a in node.attribute if a.type == AttributeProto.GRAPHS for g in a.graphs]
    while stack:
        graph = stack.pop()
        for n in graph.node:
            inner.append(n)
            stack += [a.g for a in n.attribute if a.type == AttributeProto.GRAPH]
    if not inner:
        return False
    ops = {n.op_type for n in inner} - {node.op_type}
    names = {x for n in inner for x in (n.name, *n.output) if x}
    quoted = set(re.findall(r"'([^']*)'", detail))
    mentioned = re.findall(r"no conversion rule for (?:[\w.]+::)?(\w+)", detail)
    return bool(quoted & names) or any(op in ops for op in mentioned) or any(
        re.search(rf"\b{re.escape(op)}\b", detail) for op in ops)


_VALUE_INFO = re.compile(r"Unsupported value_info type: (\S+)")


def _boundary_finding(target: str, model, message: str) -> Finding | None:
    """OpenVINO's refusal of a graph input or output that is not a tensor ("Unsupported
    value_info type: NAME": a map, a sequence, an optional) as a finding on the model naming
    the value and its type: no rewrite of the nodes changes the model's interface."""
    from rewriter.plugin import type_string

    named = _VALUE_INFO.search(message)
    if named is None:
        return None
    for kind, values in (("input", model.graph.input), ("output", model.graph.output)):
        for v in values:
            if v.name == named.group(1) and v.type.WhichOneof("value") != "tensor_type":
                what = type_string(v.type) or v.type.WhichOneof("value") or "untyped"
                verb = "take" if kind == "input" else "return"
                return Finding(
                    target=target, path="model", domain="", op_type="", version=None,
                    reason="type-binding", value=v.name,
                    detail=f"{kind} {v.name!r} is {what}, not a tensor: OpenVINO cannot "
                    f"{verb} it (its ONNX frontend: Unsupported value_info type); "
                    + ("--adapt-interface rewrites ZipMap's sequence of maps to tensors"
                       if kind == "output" else "--adapt-interface adapts outputs only"))
    return None


# -- the target -------------------------------------------------------------------------------

class OpenVINOTarget(Target):
    """OpenVINO's ONNX frontend and one device (CPU by default)."""

    # check_model compiles the whole model first and probes nodes only if that fails;
    # False: probe every node (what the conformance benchmark's "per-node" figures measure)
    model_fast_path = True

    def __init__(self, device: str = DEFAULT_DEVICE, options: TargetOptions | None = None):
        options = options or TargetOptions()
        self.device = device
        self.name = "openvino" if device == DEFAULT_DEVICE else f"openvino:{device}"
        openvino = _openvino()[0]
        self.description = f"OpenVINO {openvino.__version__.split('-')[0]} ({device})"
        self.confirm_option = options.confirm
        self.plugins = options.plugins
        self._constants: dict = {}  # name -> TensorProto of the model last checked
        self._sixteen_bit_model = False  # it quantizes to 16 bits (has_16bit_qdq)
        self._shapes: dict = {}  # name -> TypeProto with shape (shape inference)
        self._model_compiles = False  # the model last checked compiled as a whole
        # where OpenVINO's refusal of the whole model last checked points (see _blame):
        # node path -> verdict, op type -> verdict
        self._blamed: dict[str, tuple[str, str]] = {}
        self._blamed_ops: dict[str, tuple[str, str]] = {}
        self._unplaced: Finding | None = None  # a refusal of it that names no node
        self._boundary: str | None = None  # a graph input or output it refuses (a map...)
        self._ov_shapes: dict | None = {}  # name -> dims from OpenVINO's partial conversion
        self._model = None  # the model last checked, until its OpenVINO shapes are read
        self._dynamic_inputs = True  # some input of the model last checked has a dynamic shape
        self._confirmations: dict[tuple, Confirmation] = {}

    @property
    def schemas(self):
        """onnxruntime's schema registry: onnx's plus the contrib domains (com.microsoft),
        whose output types the walk then knows."""
        from rewriter.plugin import onnxruntime_schemas

        return onnxruntime_schemas()

    # -- model-level --------------------------------------------------------------------------

    def check_model(self, model) -> list[Finding]:
        """Remember the model's constants and inferred shapes for the node probes; ask
        OpenVINO about the whole model first when it is small (then no node needs a probe,
        or its refusal names the node to blame)."""
        self._constants = model_constants(model)
        self._sixteen_bit_model = has_16bit_qdq(model)
        self._shapes, self._ov_shapes, self._model = {}, {}, None
        self._dynamic_inputs = _has_dynamic_input(model)
        self._blamed, self._blamed_ops = {}, {}
        self._unplaced = None
        self._boundary = None  # the graph input or output OpenVINO refuses (a map...)
        verdict = self._whole_model_verdict(model)
        self._model_compiles = verdict is None
        if not self._model_compiles and len(model.graph.node) <= _SHAPE_INFERENCE_MAX_NODES:
            self._shapes = _inferred_shapes(model)
            self._ov_shapes = None  # computed when first needed
            self._model = model
        if verdict is None or verdict is _NOT_ASKED:
            return []
        return self._blame(model, verdict)

    def _whole_model_verdict(self, model):
        """OpenVINO's answer on the whole model as it is (None: it compiles), read by path
        (written to a private temporary file, as ``Core.read_model(path)`` reads it) and
        from bytes, each compiled; the stricter answer wins. Asked of models of up to
        _WHOLE_MODEL_MAX_NODES nodes (compiling costs 2-5 ms per node, probes with the cache
        far less on big models) and CONFIRM_BY_DEFAULT_BELOW bytes, without external data
        (their folder is not known here): _NOT_ASKED otherwise, the probes decide."""
        from rewriter.plugin import iter_tensors

        if not self.model_fast_path or len(model.graph.node) > _WHOLE_MODEL_MAX_NODES:
            return _NOT_ASKED
        if model.ByteSize() > CONFIRM_BY_DEFAULT_BELOW:
            return _NOT_ASKED
        if any(_external(t) for _, t in iter_tensors(model)):
            return _NOT_ASKED
        data = model.SerializeToString()
        key = (self.device, "model", hashlib.sha256(data).digest())
        if key not in _VERDICTS:
            with written(data) as path:
                _, refusal = compiled_by_routes(path, data, self.device, (BY_PATH, BY_BYTES))
            _VERDICTS[key] = None if refusal is None else (
                reason_of(refusal), f"OpenVINO refuses the whole model: {refusal}")
        return _VERDICTS[key]

    def _blame(self, model, verdict) -> list[Finding]:
        """Where OpenVINO's refusal of the whole model points: the node it names, else the
        nodes of the operators it lists (their findings come from :meth:`check_node`, so
        that they carry their nodes); a finding on the model when it names neither."""
        from rewriter.plugin import iter_nodes, refused_node

        boundary = _boundary_finding(self.name, model, verdict[1])
        if boundary is not None:
            self._boundary = _VALUE_INFO.search(verdict[1]).group(1)
            return [boundary]
        site = refused_node(model, verdict[1])
        if site is not None:
            self._blamed[site.path] = verdict
            return []
        listed = set(re.findall(r"\b([A-Za-z]\w*)-\d+\b", verdict[1]))
        rules = re.search(r"No conversion rule found for operations: ([^\[(]*)", verdict[1])
        if rules:  # "com.acme.Frobnicate, NhwcConv-1": each op's name
            listed |= {item.strip().rsplit("-", 1)[0].rsplit(".", 1)[-1]
                       for item in rules.group(1).split(",")}
        present = {s.node.op_type for s in iter_nodes(model)} & listed
        if present:
            self._blamed_ops.update(dict.fromkeys(present, verdict))
            return []
        self._unplaced = Finding(target=self.name, path="model", domain="", op_type="",
                                 version=None, reason=verdict[0], detail=verdict[1])
        return []

    def check_done(self, model, findings) -> list[Finding]:
        """The runtime's refusal of the whole model that names no node (see
        :meth:`_blame`), when no node finding of this target explains it."""
        unplaced, self._unplaced = self._unplaced, None
        if unplaced is None or any(f.target == self.name for f in findings):
            return []
        return [unplaced]

    # -- per node -----------------------------------------------------------------------------

    def check_node(self, query: NodeQuery) -> Finding | None:
        node = query.node
        label = f"{query.domain or 'ai.onnx'}::{node.op_type}"
        if query.opset is not None:
            label += f" (opset {query.opset})"
        if query.domain not in _OPENVINO_DOMAINS:
            return self.finding(query, "unknown-domain",
                                f"OpenVINO's ONNX frontend knows no operators in domain "
                                f"{query.domain!r}")
        inexact = inexact_form(query) or (
            _weights_dequantized(query, self._constants) if self._sixteen_bit_model else None)
        if inexact is not None:
            return self.finding(query, INEXACT, inexact)
        found = self._openvino_finding(query, label)
        known = KNOWN_INEXACT.get((query.domain, node.op_type))
        if found is None and known is not None:  # it runs, otherwise than its definition
            return self.finding(query, INEXACT, known)
        return found  # OpenVINO's own refusal first (in its words: softcap, ...)

    def _openvino_finding(self, query: NodeQuery, label: str) -> Finding | None:
        """OpenVINO's answer for the node: the whole model's verdict, or the node's probe."""
        node = query.node
        in_body = "/<body>/" in query.path  # the planner asking about a decomposition body
        if in_body and _rank_follows_fed_axes(query):
            return self.finding(query, "no-kernel", (
                f"{label} over axes the model's caller feeds, keepdims = 0: its output's rank "
                "depends on their values, and OpenVINO's CPU plugin compiles no operation of "
                "dynamic rank"))
        if in_body and self._dynamic_inputs and _weights_follow_fed_values(query):
            return self.finding(query, "no-kernel", (
                f"{label} with weights the model's caller feeds: OpenVINO's CPU plugin "
                "convolves with no weights of a dynamic shape"))
        if self._model_compiles and not in_body:
            return None  # the whole model compiled (check_model)
        build, key, unranked, guessed = self._probe_model(query, in_body)
        full_key = (self.device, key)
        if full_key not in _VERDICTS:
            verdict = probe(build().SerializeToString(), self.device, label,
                            unknown_ranks=unranked)
            if verdict is not None and unranked:
                verdict = self._with_guessed_ranks(query, in_body, label, verdict)
            if verdict is not None and guessed and "no conversion rule" not in verdict[1]:
                verdict = None  # a type we guessed may be what OpenVINO objects to
            _VERDICTS[full_key] = verdict
        verdict = _VERDICTS[full_key]
        if verdict is not None and self._boundary and not in_body:
            named = _VALUE_INFO.search(verdict[1])
            if named and named.group(1) == self._boundary:
                return None  # the model's finding names that input or output
        if verdict is None or _blames_subgraph(node, verdict[1]):
            # an If/Loop/Scan body's node is checked (and reported) on its own; a node the
            # whole model's refusal names is found, whatever its probe says
            blamed = None if in_body else (self._blamed.get(query.path)
                                           or self._blamed_ops.get(node.op_type))
            return None if blamed is None else self.finding(query, *blamed)
        return self.finding(query, verdict[0], verdict[1])

    def _with_guessed_ranks(self, query, in_body: bool, label: str, verdict):
        """Inputs of unknown rank (a decomposition body's values, or shapes inference could
        not give them): OpenVINO's translators and the CPU plugin want ranks, some static
        shapes. The node runs if it converts and compiles with its unranked inputs given
        some common shape; if every refusal is about ranks or shapes, the node is given
        the benefit of the doubt (the rewritten model is checked as a whole afterwards, with
        its real shapes); else the first verdict stands."""
        shape_bound = _SHAPE_WORDS.search(verdict[1]) is not None
        for guess in _GUESSED_RANKS:
            build, _, _, _ = self._probe_model(query, in_body, guess)
            answer = probe(build().SerializeToString(), self.device, label, unknown_ranks=True)
            if answer is None:
                return None
            shape_bound = shape_bound or _SHAPE_WORDS.search(answer[1]) is not None
        # In a decomposition body OpenVINO objects to shapes it was not told (the planner
        # knows none): it cannot decide without them. Elsewhere the first verdict stands.
        return None if shape_bound and in_body else verdict

    def _openvino_dims(self, name: str):
        """The dimensions OpenVINO's partial conversion of the model gives ``name``, if any
        (the conversion runs once per model, on the first value onnx's inference misses)."""
        if self._ov_shapes is None:
            model, self._model = self._model, None
            self._ov_shapes = _openvino_shapes(model) if model is not None else {}
        return self._ov_shapes.get(name)

    def _input_proto(self, name: str, query: NodeQuery, in_body: bool, guess=None):
        """The input's type with the best shape known (declared, else inferred); with
        ``guess`` (rank, dimension or None), an input of unknown rank gets that shape."""
        from onnx import helper

        from rewriter.plugin import type_proto

        candidates = [query.declared.get(name)]
        if not in_body:
            candidates.append(self._shapes.get(name))
        known = [p for p in candidates if p is not None and p.WhichOneof("value") is not None]
        shaped = next((p for p in known if _shape_key(p) is not None), None)
        shape = _shape_key(shaped)
        if shape is not None and all(isinstance(d, int) for d in shape):
            return shaped  # fully static
        proto = shaped or (known[0] if known else type_proto(query.types.get(name)))
        tensor = proto is not None and proto.WhichOneof("value") == "tensor_type" and \
            proto.tensor_type.elem_type
        # OpenVINO's partial conversion folds shape computations onnx's inference cannot
        # follow (a Reshape's target shape built by Shape/Concat/ConstantOfShape)
        dims = None if in_body or not tensor else self._openvino_dims(name)
        if dims is not None and (shape is None or len(shape) == len(dims)):
            merged = [d if isinstance(d, int) else o for d, o in zip(shape or dims, dims)]
            return helper.make_tensor_type_proto(proto.tensor_type.elem_type, merged)
        if shaped is not None:
            return shaped
        if guess is not None and proto is not None and \
                proto.WhichOneof("value") == "tensor_type" and proto.tensor_type.elem_type:
            rank, dim = guess
            return helper.make_tensor_type_proto(proto.tensor_type.elem_type, [dim] * rank)
        return proto

    def _probe_model(self, query: NodeQuery, in_body: bool, guess=None):
        """(a function building the one-node model to ask OpenVINO about, the key of its
        verdict, whether some tensor input's rank is unknown, whether some input's type was
        guessed). The model is only built on a cache miss."""
        from onnx import TensorProto, helper

        from rewriter.plugin import outer_references

        node = query.node
        constants = dict(query.constants) if in_body else self._constants
        parts, key_inputs, seen = [], [], set()  # parts: (name, TensorProto or TypeProto)
        unranked = guessed = False
        names = [n for n in query.inputs if n]
        if node.attribute:
            names += outer_references(node)
        for name in names:
            if name in seen:
                continue
            seen.add(name)
            tensor = constants.get(name)
            if tensor is not None:
                size = _tensor_bytes(tensor)
                if size <= _SMALL_CONSTANT_BYTES and not _external(tensor):
                    parts.append((name, tensor, False))
                    if tensor.data_type in _VALUE_TYPES:  # shapes, axes, pads, indices...
                        key_inputs.append(("const", tensor.SerializeToString()))
                    else:  # weights: conversion depends on their type and shape only
                        key_inputs.append(("weight", tensor.data_type, tuple(tensor.dims)))
                    continue
                if size <= _PROBE_CONSTANT_LIMIT:
                    parts.append((name, tensor, True))
                    key_inputs.append(("weight", tensor.data_type, tuple(tensor.dims)))
                    continue
            proto = self._input_proto(name, query, in_body, guess)
            proto = _split_sizes_proto(node, query, name, proto)
            if proto is None:  # type unknown (it comes from an op nobody has a schema for)
                guessed = True
                rank, dim = guess or (None, None)
                proto = helper.make_tensor_type_proto(
                    TensorProto.FLOAT, None if rank is None else [dim] * rank)
            shape = _shape_key(proto)
            unranked = unranked or (shape is None and proto.WhichOneof("value") == "tensor_type")
            parts.append((name, proto, None))
            key_inputs.append((query.types.get(name), shape))
        versions = {}
        if query.opset is not None:
            versions[query.domain] = query.opset
        versions.setdefault("", query.opsets.get("", 21) if query.opsets else 21)
        attributes = hashlib.sha256(b"".join(
            a.SerializeToString(deterministic=True) for a in node.attribute)).digest() \
            if node.attribute else b""
        key = (query.domain, node.op_type, query.opset, versions.get(""), tuple(key_inputs),
               attributes, tuple(bool(o) for o in query.outputs),
               tuple(bool(i) for i in query.inputs))

        def build():
            from onnx import TypeProto

            inputs, initializers = [], []
            for name, value, zeros in parts:
                if zeros is None:
                    inputs.append(helper.make_value_info(name, value))
                else:
                    tensor = _renamed(value, name)
                    initializers.append(_zeros_like(tensor) if zeros else tensor)
            outputs = [helper.make_value_info(o, TypeProto()) for o in query.outputs if o]
            graph = helper.make_graph([node], "probe", inputs, outputs, initializers)
            opsets = [helper.make_opsetid(d, v) for d, v in versions.items()]
            model = helper.make_model(graph, opset_imports=opsets)
            model.ir_version = max(
                helper.find_min_ir_version_for(opsets, ignore_unknown=True), 8)
            return model

        return build, key, unranked, guessed

    # -- confirmation and runs ----------------------------------------------------------------

    def kernel_problem(self, remedy) -> str | None:
        return "OpenVINO runs no Python or onnxruntime custom-op kernels"

    def wants_confirm(self, loaded) -> bool:
        return self.confirm_by_size(self.confirm_option, loaded, CONFIRM_BY_DEFAULT_BELOW)

    def confirm(self, model, base_dir) -> str | None:
        """OpenVINO's refusal of the model (see :meth:`confirmation`), or None."""
        return self.confirmation(model, base_dir).refusal

    def confirmation(self, model, base_dir) -> Confirmation:
        """Read the whole model as users do, by path (``Core.read_model(path)`` and
        ``openvino.convert_model(path)``, the model written to a private temporary folder
        with its external data beside it) and from bytes, compile each in a child process
        (the stricter answer wins: a refusal by any says which) and, for models up to
        RUN_BY_DEFAULT_BELOW bytes, run the one read by path once there on generated
        inputs (a crash is an answer, not our crash). A failed run is a refusal when its
        message says OpenVINO lacks something or when onnxruntime runs the same model on the
        same inputs; an error naming an operation OpenVINO made is pointed at the node it
        lies in. Cached per model bytes and folder."""
        from rewriter.plugin import iter_nodes

        data = model.SerializeToString()
        key = (hashlib.sha256(data).digest(), str(base_dir))
        if key in self._confirmations:
            return self._confirmations[key]
        feeds, note = None, f"not run: larger than {RUN_BY_DEFAULT_BELOW // 2**20} MiB"
        if self.confirm_by_size(None, model_size(model, base_dir), RUN_BY_DEFAULT_BELOW):
            feeds, note = generated_feeds(model)
        script = ("from rewriter_plugins.openvino_target import confirm_child\n"
                  "confirm_child()\n")
        producers = {o: site.node.name for site in iter_nodes(model)
                     for o in site.node.output if o}
        try:
            with model_file(model, base_dir, data) as file:
                payload = pickle.dumps({"model": data, "path": file.path, "feeds": feeds,
                                        "device": self.device, "io": _io_names(model),
                                        "producers": producers})
                result = confirm_in_child(self, "OpenVINO", [script], payload, base_dir,
                                          CONFIRM_TIMEOUT_S)
        except ValueError as e:  # an external-data location leaving the model's folder
            return Confirmation(str(e), "load")
        note = "; ".join(n for n in (file.note, note) if n)
        if note and result.refusal is None and not result.note:
            result = Confirmation(ran=result.ran, note=note)
        self._confirmations[key] = result
        return result

    def prepare(self, model, base_dir):
        """A compiled model (float32 precision) as a run function: feeds by input name,
        outputs by the model's output names. The model is read by path as users read it
        (``Core.read_model(path)``; written to a private temporary folder with its external
        data beside it, removed once the run function is gone); from bytes only when it
        cannot be put there (external data too big to copy and no file of its own)."""
        stack = contextlib.ExitStack()
        try:
            file = stack.enter_context(model_file(model, base_dir))
        except ValueError as e:
            raise RuntimeError(str(e)) from None
        routes = (BY_PATH,) if file.path is not None else (BY_BYTES,)
        try:
            compiled, refusal = compiled_by_routes(file.path, file.data, self.device, routes)
        except BaseException:
            stack.close()
            raise
        if refusal is not None:
            stack.close()
            raise RuntimeError(f"OpenVINO cannot compile the model: {refusal}")
        run = _run_function(compiled[0][1], (file.data, stack), *_io_names(model))
        weakref.finalize(run, stack.close)
        return run


def _io_names(model) -> tuple[list[str], list[str]]:
    """The names of the inputs a caller feeds (not those with an initializer) and of the
    outputs."""
    initializers = {t.name for t in model.graph.initializer}
    return ([i.name for i in model.graph.input if i.name not in initializers],
            [o.name for o in model.graph.output])


def _run_function(compiled, data, inputs: list[str], outputs: list[str]):
    """Run ``compiled`` (compiled from ``data``, whose graph has these input and output
    names; anything kept alive as long as the run function) on feeds by input name; outputs
    by name. RuntimeError with OpenVINO's message in one line."""
    # OpenVINO merges tensor names while optimizing (an input may also carry the name of
    # a node it optimized away): pick each port's name among the model's own.
    out_names = _port_names(compiled.outputs, outputs)
    in_names = _port_names(compiled.inputs, inputs)
    request = compiled.create_infer_request()
    keep_alive = (data, compiled)  # the compiled model reads constants from `data`

    in_types = [port.get_element_type() for port in compiled.inputs]
    out_types = [port.get_element_type() for port in compiled.outputs]

    def run(feeds):
        assert keep_alive
        missing = [name for name in in_names if name not in feeds]
        if missing:
            raise RuntimeError(f"no value given for input(s) {', '.join(missing)}")
        given = [_to_openvino(feeds[name], t) for name, t in zip(in_names, in_types)]
        try:
            request.infer(given)
        except Exception as e:  # noqa: BLE001
            raise RuntimeError(f"OpenVINO failed running the model: "
                               f"{clean_message(str(e))}") from None
        return {name: _from_openvino(request.get_output_tensor(i), out_types[i])
                for i, name in enumerate(out_names)}

    return run


def confirm_child() -> None:
    """The confirming child (``OpenVINOTarget.confirmation``): stdin a pickle of {"model":
    bytes, "path": the model as a file (None: not asked by path), "feeds": [input sets] or
    None, "device": str, "io": (input names, output names), "producers": {value: name of the
    node making it}}; reads and compiles the model by every route users take
    (:func:`compiled_by_routes`), then runs the one read by path on the input sets until
    one runs, reporting each stage with :func:`rewriter.plugin.child_says`. Its working
    directory is the model's folder (the bytes route's external data). It imports no onnx
    (a second saved per confirmation)."""
    job = pickle.load(sys.stdin.buffer)
    data = job["model"]
    compiled, refusal = compiled_by_routes(job["path"], data, job["device"])
    if refusal is not None:
        child_says("load", refusal)
        return
    child_says("loaded")
    if job["feeds"] is None:
        return
    chosen = compiled[0][1]
    error, values = run_sets(_run_function(chosen, data, *job["io"]), job["feeds"])
    if error is None:
        child_says("ran")
        return
    error = error.removeprefix("OpenVINO failed running the model: ")
    error += _owner(chosen, error, job["producers"])
    elsewhere = not values and onnxruntime_runs(data, job["feeds"][0])
    child_says("run", error, "onnxruntime" if elsewhere else None, values)


def _owner(compiled, error: str, producers: dict) -> str:
    """When OpenVINO's error names one of its own operations (made while converting or
    compiling a node, e.g. 'Reshape_4185'), which node of the model it lies in: the node
    whose output is the first of the model's values downstream of it, in the compiled
    model's graph; said as " (OpenVINO's 'Reshape_4185' lies inside node 'N': ...)"; "" when
    the error names a node of the model, or none is found."""
    from collections import deque

    m = re.search(r"node with name '([^']*)'", error)
    if not m or m.group(1) in producers or m.group(1) in producers.values():
        return ""
    ops = {op.get_friendly_name(): op for op in compiled.get_runtime_model().get_ordered_ops()}
    start = ops.get(m.group(1))
    queue, seen = deque([start] if start is not None else []), {m.group(1)}
    while queue:
        op = queue.popleft()
        info = op.get_rt_info()
        names = [op.get_friendly_name()]
        if "originalLayersNames" in info:
            names += str(info["originalLayersNames"].astype(str)).split(",")
        for name in names:
            value = name.split("/sink_port_")[0]  # a model output's Result
            if value in producers:
                node = producers[value]
                where = f"node '{node}'" if node else f"the node of output '{value}'"
                return (f" (OpenVINO's '{m.group(1)}' lies inside {where}: the first of the "
                        f"model's values it feeds is that node's output '{value}')")
        for output in op.outputs():
            for target in output.get_target_inputs():
                following = target.get_node()
                if following.get_friendly_name() not in seen:
                    seen.add(following.get_friendly_name())
                    queue.append(following)
    return ""


# OpenVINO element types numpy has no dtype for (its arrays show their raw bits, 4-bit
# types two to a byte, the first in the low nibble), and the ml_dtypes type of each
_RAW_TYPES = {"bf16": "bfloat16", "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2",
              "i4": "int4", "u4": "uint4", "f4e2m1": "float4_e2m1fn"}
_NIBBLE_TYPES = frozenset({"i4", "u4", "f4e2m1"})


def _to_openvino(value, element_type):
    """A feed as OpenVINO takes it: numpy arrays as they are (0-d kept 0-d), object arrays
    of strings as numpy str arrays ("Unknown string kind" otherwise); bfloat16, float8 and
    4-bit arrays (ml_dtypes) copied bit for bit into a tensor of that type."""
    import numpy as np

    array = np.asarray(value, order="C")
    if array.dtype.kind == "O":  # strings as onnx and onnxruntime give them: OpenVINO takes
        return np.array([v.decode() if isinstance(v, bytes) else str(v)  # numpy's str
                         for v in array.reshape(-1)], dtype=str).reshape(array.shape)
    kind = element_type.to_string()
    if kind not in _RAW_TYPES or array.dtype.name != _RAW_TYPES[kind]:
        return array
    import openvino

    tensor = openvino.Tensor(element_type, openvino.Shape(list(array.shape)))
    raw = array.reshape(-1).view(np.uint8)
    if kind in _NIBBLE_TYPES:
        codes = raw & 0x0F
        if codes.size % 2:
            codes = np.append(codes, np.uint8(0))
        raw = codes[0::2] | (codes[1::2] << 4)
    tensor.data.reshape(-1).view(np.uint8)[:] = raw
    return tensor


def _from_openvino(tensor, element_type):
    """An output tensor as a numpy array (strings as an object array, as onnxruntime gives
    them; bfloat16, float8 and 4-bit types as ml_dtypes arrays)."""
    import numpy as np

    kind = element_type.to_string()
    if kind == "string":  # .data of an empty string tensor crashes OpenVINO 2026.4 (SIGSEGV)
        return np.array(tensor.str_data, dtype=object).reshape(tuple(tensor.get_shape()))
    name = _RAW_TYPES.get(kind)
    if name is None:
        return np.array(tensor.data, copy=True)
    import ml_dtypes

    shape = tuple(tensor.get_shape())
    raw = np.array(tensor.data, copy=True).reshape(-1).view(np.uint8)
    if kind in _NIBBLE_TYPES:
        codes = np.empty(raw.size * 2, np.uint8)
        codes[0::2], codes[1::2] = raw & 0x0F, raw >> 4
        count = int(np.prod(shape)) if shape else 1
        raw = codes[:count]
    return raw.view(getattr(ml_dtypes, name)).reshape(shape)


def _port_names(ports, wanted: list[str]) -> list[str]:
    """The model's name for each of OpenVINO's input or output ports, in port order."""
    out = []
    for i, port in enumerate(ports):
        names = port.get_names()
        match = [n for n in wanted if n in names]
        out.append(match[0] if match else wanted[i] if i < len(wanted) else port.get_any_name())
    return out


def _openvino_shapes(model) -> dict:
    """Value name -> dimensions (None where dynamic) as OpenVINO's partial conversion infers
    them: it knows the shapes of the contrib ops it converts, where onnx's inference stops.
    Empty when the model has external data or the partial conversion fails."""
    from rewriter.plugin import iter_tensors

    if any(_external(t) for _, t in iter_tensors(model)):
        return {}
    _, _, frontend = _openvino()
    try:
        ov_model = frontend.convert_partially(frontend.load(io.BytesIO(model.SerializeToString())))
    except Exception:  # noqa: BLE001 - shapes are a help, not a requirement
        return {}
    out = {}
    for op in ov_model.get_ordered_ops():
        for port in op.outputs():
            shape = port.get_partial_shape()
            if shape.rank.is_dynamic:
                continue
            dims = [d.get_length() if d.is_static else None for d in shape]
            for name in port.get_names():
                out.setdefault(name, dims)
    return out


def _make(argument: str | None, options: TargetOptions | None = None) -> OpenVINOTarget:
    _, core, _ = _openvino()
    device = (argument or DEFAULT_DEVICE).upper()
    available = core.available_devices
    if device not in available and not any(d.startswith(device + ".") for d in available):
        raise TargetError(f"OpenVINO device {argument!r} is not available here; available: "
                          + ", ".join(available))
    return OpenVINOTarget(device, options)


@hookimpl
def register_targets(registry):
    registry.add(
        "openvino",
        _make,
        description="OpenVINO's ONNX frontend and CPU device (openvino:DEVICE for others)",
    )
