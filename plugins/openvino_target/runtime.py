"""OpenVINO itself: the module and its ONNX frontend, converting and compiling a model, the
routes users read a model by (:func:`compiled_by_routes`), and its error messages in one line
(:func:`clean_message`, :func:`reason_of`)."""

from __future__ import annotations

import io
import re
from functools import cache

from rewriter.plugin import TargetError

NOT_INSTALLED = "OpenVINO is not installed: pip install 'onnx-graph-rewriter[openvino]'"
DEFAULT_DEVICE = "CPU"
# float32 inference (the CPU plugin runs float32 models in bfloat16 where the CPU has it),
# and no dynamic quantization of the activations a compressed (int4/int8) weight's MatMul
# reads (the CPU plugin quantizes them to int8 in groups of 32 by default: measured 5.3e-3
# off the model's definition on a MatMulNBitsQuantizer int4 Llama, 1.8e-7 without): a
# comparison measures the model, not the device's precision
CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}
# ... except for a model whose MatMulNBits ask for accuracy level 4 (onnxruntime quantizes
# their activations to int8 per block: the genai builder's int4/int8 models), which the CPU
# plugin's default dynamic quantization computes as onnxruntime does (within rounding)
QUANTIZED_ACTIVATIONS_CONFIG = {"INFERENCE_PRECISION_HINT": "f32"}


def config_for(model) -> dict[str, str]:
    """The compile configuration for ``model`` (a ModelProto): :data:`CONFIG`, or
    :data:`QUANTIZED_ACTIVATIONS_CONFIG` where a MatMulNBits asks for accuracy level 4."""
    from rewriter.plugin import iter_nodes

    for site in iter_nodes(model):
        node = site.node
        if node.op_type == "MatMulNBits" and node.domain == "com.microsoft" and any(
                a.name == "accuracy_level" and a.i == 4 for a in node.attribute):
            return QUANTIZED_ACTIVATIONS_CONFIG
    return CONFIG


@cache
def openvino_runtime():
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
    _, _, frontend = openvino_runtime()
    return frontend.convert(frontend.load(io.BytesIO(model_bytes)))


def compile_model(model_bytes: bytes, device: str = DEFAULT_DEVICE, config=None):
    """Convert and compile for ``device`` with float32 inference precision (``config``:
    :data:`CONFIG` by default).

    The compiled model may read constants from ``model_bytes`` itself (the frontend does
    not copy them): keep the bytes alive as long as the compiled model."""
    _, core, _ = openvino_runtime()
    return core.compile_model(convert(model_bytes), device, config or CONFIG)


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
    openvino, core, _ = openvino_runtime()
    if route == BY_PATH:
        return core.read_model(path)
    if route == BY_CONVERT:
        return openvino.convert_model(path)
    return convert(data)


def compiled_by_routes(path: str | None, data: bytes, device: str, routes=USER_ROUTES,
                       config=None):
    """Read the model by each of ``routes`` (those by path only with a ``path``) and compile
    each result for ``device``: ([(route, compiled model)], refusal or None). The stricter
    answer wins: any route's refusal is the answer, in OpenVINO's words (one line) with the
    route that refused and those that compile it ("... [refused by Core.read_model(path);
    FrontEnd.load(bytes) compiles it]")."""
    _, core, _ = openvino_runtime()
    compiled, refusals = [], []
    for route in routes:
        if route != BY_BYTES and path is None:
            continue
        try:
            compiled.append((route, core.compile_model(read_by(route, path, data), device,
                                                       config or CONFIG)))
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
    return "type-binding" if is_type_problem(message) else "runtime-refused"


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


def no_rule_ops(text: str) -> list[str]:
    m = re.search(r"No conversion rule found for operations: ([^\n]*)", text)
    return [x.strip() for x in m.group(1).split(",")] if m else []


def is_type_problem(message: str) -> bool:
    lowered = message.lower()
    return any(w in lowered for w in ("element type", "precision", "prc", "data type",
                                      "unsupported type", "not supported type", "type: "))

