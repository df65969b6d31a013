"""What one-node probe models are made of: a model's constants, value shapes, and tensors.

Targets that ask a runtime about one node at a time (``openvino``, ``tract``) build a model of
that node alone; these helpers give it the model's constant inputs (small ones with their
values: translators read shapes, axes and pads from them; big ones as zeros of their shape)
and the shapes onnx's inference gives the node's inputs.
"""

from __future__ import annotations

# Constant inputs up to this many bytes are given to a probe with their values; integer and
# boolean ones are part of a verdict's cache key by value, floating-point ones (weights) by
# type and shape. Bigger ones (up to PROBE_CONSTANT_LIMIT) are given as zeros of their shape.
SMALL_CONSTANT_BYTES = 4096
VALUE_TYPES = frozenset({6, 7, 9, 2, 3, 4, 5, 12, 13})  # int32/64, bool, (u)int8/16/32/64
PROBE_CONSTANT_LIMIT = 64 * 2**20
_SCALAR_CONSTANTS = {"value_float": ("f", "float32"), "value_int": ("i", "int64"),
                     "value_floats": ("floats", "float32"), "value_ints": ("ints", "int64")}


def model_constants(model) -> dict:
    """Value name -> TensorProto for the main graph's initializers and Constant nodes."""
    from onnx import numpy_helper

    constants = {t.name: t for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and len(n.attribute) == 1:
            a = n.attribute[0]
            if a.name == "value" and n.output:
                constants[n.output[0]] = a.t
            elif a.name in _SCALAR_CONSTANTS and n.output:
                import numpy as np

                field, dtype = _SCALAR_CONSTANTS[a.name]
                value = np.array(getattr(a, field), dtype)
                constants[n.output[0]] = numpy_helper.from_array(value, n.output[0])
    return constants


def shape_key(tp) -> tuple | None:
    """A TypeProto's dimensions (values, parameters, "?" where unknown); None: no shape."""
    if tp is None or tp.WhichOneof("value") != "tensor_type":
        return None
    if not tp.tensor_type.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                 for d in tp.tensor_type.shape.dim)


def zeros_like(tensor):
    """A tensor of zeros with ``tensor``'s name, type and shape (a weight's stand-in)."""
    import numpy as np
    from onnx import helper, numpy_helper

    dtype = helper.tensor_dtype_to_np_dtype(tensor.data_type)
    return numpy_helper.from_array(np.zeros(tuple(tensor.dims), dtype=dtype), tensor.name)


def tensor_bytes(tensor) -> int:
    from onnx import helper

    count = 1
    for d in tensor.dims:
        count *= d
    try:
        itemsize = helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except Exception:  # noqa: BLE001 - strings and unknown types: by their stored size
        return tensor.ByteSize()
    return count * itemsize


def external(tensor) -> bool:
    from onnx import TensorProto

    return tensor.data_location == TensorProto.EXTERNAL


def renamed(tensor, name: str):
    if tensor.name == name:
        return tensor
    from onnx import TensorProto

    copy = TensorProto()
    copy.CopyFrom(tensor)
    copy.name = name
    return copy


def inferred_shapes(model) -> dict:
    """Every value's TypeProto with its shape, from onnx's shape inference (all graphs)."""
    from onnx import shape_inference

    from rewriter.plugin import iter_scopes

    try:
        inferred = shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
    except Exception:  # noqa: BLE001 - shapes are a help, not a requirement
        return {}
    out = {}
    for scope in iter_scopes(inferred):
        g = scope.graph
        if g is None:
            continue
        for vi in (*g.input, *g.value_info, *g.output):
            if vi.type.WhichOneof("value") is not None:
                out.setdefault(vi.name, vi.type)
    return out


def onnxruntime_runs(data: bytes, feeds: dict) -> bool:
    """Whether onnxruntime (CPU) runs the model on the same inputs: then another runtime's
    failure on them is not the inputs' fault. False when it cannot load the model either
    (ops it lacks). External data is read from the working directory."""
    import os

    try:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.log_severity_level = 4
        so.add_session_config_entry("session.model_external_initializers_file_folder_path",
                                    os.getcwd())
        session = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        session.run(None, feeds)
    except Exception:  # noqa: BLE001 - any failure: it cannot vouch for the inputs
        return False
    return True
