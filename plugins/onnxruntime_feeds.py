"""Feeding onnxruntime's Python API what it cannot take as numpy arrays, and running once.

Imports numpy and onnxruntime only: the confirming child of the onnxruntime target uses it
(``onnx`` would cost it a second).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# ml_dtypes arrays the Python API takes only as OrtValues of their bits, and the ONNX element
# type of each; 4- and 2-bit ones (bits per value) are packed, the first value in the low bits
RAW_FEEDS = {"bfloat16": 16, "float8_e4m3fn": 17, "float8_e4m3fnuz": 18, "float8_e5m2": 19,
             "float8_e5m2fnuz": 20, "float8_e8m0fnu": 24, "uint4": 21, "int4": 22,
             "float4_e2m1fn": 23, "uint2": 25, "int2": 26}
PACKED = {"uint4": 4, "int4": 4, "float4_e2m1fn": 4, "uint2": 2, "int2": 2}
# what session.run raises converting an output numpy has no type for (float8, 4-bit): the
# run itself happened
_NO_NUMPY_TYPE = "No corresponding Numpy type for Tensor Type"


def as_ort_feed(value: Any) -> Any:
    """A feed onnxruntime's Python API takes: an ml_dtypes array (bfloat16, float8, 4- and
    2-bit types) as an OrtValue of its bits (numpy arrays of those types it refuses:
    "Numpy_type 256 can't be converted to MLDataType"); anything else as it is."""
    import numpy as np

    name = getattr(getattr(value, "dtype", None), "name", "")
    if name not in RAW_FEEDS:
        return value
    import onnxruntime as ort

    array = np.ascontiguousarray(value)
    if name in PACKED:  # a uint8 buffer of the array's shape, the packed bits at its start
        bits = PACKED[name]
        codes = array.view(np.uint8).reshape(-1) & ((1 << bits) - 1)
        codes = np.append(codes, np.zeros(-codes.size % (8 // bits), np.uint8))
        packed = np.zeros(codes.size * bits // 8, np.uint8)
        for k in range(8 // bits):
            packed |= codes[k::8 // bits] << (k * bits)
        raw = np.zeros(array.shape, np.uint8)
        raw.reshape(-1)[:packed.size] = packed[:raw.size]
    else:
        raw = array.view(np.uint16 if array.dtype.itemsize == 2 else np.uint8)
    return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(raw, onnx_element_type=RAW_FEEDS[name])


# outputs the Python API returns as the bits of their type (uint8 for float8e4m3fn, uint16
# for bfloat16): read back as the ml_dtypes type they are
_BITS_OUTPUTS = {"tensor(float8e4m3fn)": "float8_e4m3fn", "tensor(float8e4m3fnuz)":
                 "float8_e4m3fnuz", "tensor(float8e5m2)": "float8_e5m2",
                 "tensor(float8e5m2fnuz)": "float8_e5m2fnuz", "tensor(bfloat16)": "bfloat16"}


def from_ort_output(value: Any, declared: str) -> Any:
    """An output as the type the model declares (``declared``: onnxruntime's type string),
    where the Python API gave its bits as unsigned integers."""
    import numpy as np

    kind = _BITS_OUTPUTS.get(declared)
    if kind is None or not isinstance(value, np.ndarray) or value.dtype.kind != "u":
        return value
    import ml_dtypes

    wanted = np.dtype(getattr(ml_dtypes, kind))
    return value.view(wanted) if value.dtype.itemsize == wanted.itemsize else value


def run_once(session, feeds: Mapping[str, Any]) -> list | None:
    """``session.run`` on ``feeds`` (bfloat16 and float8 arrays fed as OrtValues): the
    outputs, those numpy has no type for (bfloat16, float8, 4- and 2-bit) read from their
    bits as ml_dtypes arrays; None when some output is of a kind that cannot be read."""
    given = {name: as_ort_feed(v) for name, v in feeds.items()}
    try:
        return session.run(None, given)
    except Exception as e:
        if _NO_NUMPY_TYPE not in str(e):
            raise
    return run_reading_bits(session, given)


def run_reading_bits(session, given: Mapping[str, Any]) -> list | None:
    """Run again keeping the outputs as OrtValues, and read each tensor whose element type
    numpy lacks from the bytes onnxruntime holds (CPU memory, so its data pointer is
    readable); None if some output is neither a tensor nor readable that way."""
    import onnxruntime as ort

    values = {name: v if isinstance(v, ort.OrtValue) else ort.OrtValue.ortvalue_from_numpy(v)
              for name, v in given.items()}
    out = []
    for value in session.run_with_ort_values(None, values):
        if not value.is_tensor():
            return None
        kind = _RAW_BY_TYPE.get(value.data_type())
        if kind is None:
            out.append(value.numpy())
            continue
        array = tensor_from_bits(value, kind)
        if array is None:
            return None
        out.append(array)
    return out


_RAW_BY_TYPE = {f"tensor({name.replace('_', '')})": name for name in RAW_FEEDS}
_RAW_BY_TYPE["tensor(float8e8m0)"] = "float8_e8m0fnu"


def tensor_from_bits(value, kind: str):
    """The ml_dtypes array (``kind``: its name) an OrtValue on the CPU holds, read from its
    bytes (4- and 2-bit values unpacked, the first value in the low bits); None where the
    value is not in CPU memory or ml_dtypes lacks the type."""
    import ctypes

    import numpy as np

    if value.device_name().lower() != "cpu":
        return None
    try:
        import ml_dtypes

        dtype = np.dtype(getattr(ml_dtypes, kind))
    except (ImportError, AttributeError):
        return None
    shape = tuple(value.shape())
    count = int(np.prod(shape, dtype=np.int64))
    size = -(-count * PACKED[kind] // 8) if kind in PACKED else count * dtype.itemsize
    raw = np.frombuffer(ctypes.string_at(value.data_ptr(), size), np.uint8)
    if kind in PACKED:
        bits = PACKED[kind]
        per_byte = 8 // bits
        codes = np.stack([(raw >> (k * bits)) & ((1 << bits) - 1) for k in range(per_byte)],
                         axis=-1).reshape(-1)[:count]
        return codes.astype(np.uint8).view(dtype).reshape(shape)
    return raw.copy().view(dtype).reshape(shape)
