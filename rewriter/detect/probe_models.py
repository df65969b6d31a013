"""What one-node probe models are made of: a model's constants, value shapes, and tensors.

Targets that ask a runtime about one node at a time (``openvino``, ``tract``) build a model of
that node alone; these helpers give it the model's constant inputs (small ones with their
values: translators read shapes, axes and pads from them; big ones as zeros of their shape)
and the shapes onnx's inference gives the node's inputs.

A runtime is asked about a whole model the way its users load one: from a file
(:func:`model_file`), with its external data beside it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

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


# -- the model as a file, the way users hand it to a runtime ----------------------------------

# External data of a model written to a temporary folder is copied beside it up to this many
# bytes (runtimes refuse symlinks and resolve locations inside the model file's folder; the
# project's loader refuses hard links); a bigger one is asked from the model's own file when
# one in its folder holds exactly these bytes, else not by path (``ModelFile.path`` None).
COPY_EXTERNAL_BELOW = 256 * 2**20


@dataclass
class ModelFile:
    """Where a model lies as a file for a runtime's path route: ``path`` (None: it cannot be
    put there without copying more than COPY_EXTERNAL_BELOW bytes of external data, and
    ``note`` says so), and ``data``, its serialized bytes."""

    path: str | None
    data: bytes
    note: str = ""


def external_locations(model, base_dir) -> dict[str, Path]:
    """Location -> file of every external-data location of ``model``, resolved in
    ``base_dir`` (the working directory when None); ValueError for one leaving it."""
    from rewriter.plugin import iter_tensors

    base = Path(base_dir if base_dir is not None else os.getcwd()).resolve()
    out: dict[str, Path] = {}
    for _, tensor in iter_tensors(model):
        if not external(tensor):
            continue
        for entry in tensor.external_data:
            if entry.key != "location" or entry.value in out:
                continue
            resolved = (base / entry.value).resolve()
            if base not in resolved.parents:
                raise ValueError(f"external data {entry.value!r} of tensor {tensor.name!r} "
                                 f"lies outside the model's folder {str(base)!r}")
            out[entry.value] = resolved
    return out


@contextlib.contextmanager
def model_file(model, base_dir, data: bytes | None = None) -> Iterator[ModelFile]:
    """``model`` as a file with its external data beside it, as users give it to a runtime
    (``Core.read_model(path)``, ``InferenceSession(path)``): written to a private temporary
    folder (removed afterwards) with its external-data files copied at their locations, or,
    for more than COPY_EXTERNAL_BELOW bytes of them, the model's own file in ``base_dir``
    when it holds exactly these bytes. ValueError when a location leaves ``base_dir``."""
    data = model.SerializeToString() if data is None else data
    files = external_locations(model, base_dir)
    size = sum(f.stat().st_size for f in files.values() if f.is_file())
    if files and size > COPY_EXTERNAL_BELOW:
        own = _own_file(Path(base_dir if base_dir is not None else os.getcwd()), data)
        yield ModelFile(str(own) if own else None, data, "" if own else (
            f"not asked by path: its {size / 2**30:.1f} GiB of external data are not copied "
            "beside a temporary copy of the model"))
        return
    with written(data) as path:
        folder = os.path.dirname(path)
        for location, source in files.items():
            target = Path(folder) / location
            target.parent.mkdir(parents=True, exist_ok=True)
            if source.is_file():
                shutil.copyfile(source, target)
        yield ModelFile(path, data)


@contextlib.contextmanager
def written(data: bytes) -> Iterator[str]:
    """The path of ``data`` written as ``model.onnx`` in a private temporary folder, removed
    afterwards (a probe model asked by path)."""
    with tempfile.TemporaryDirectory(prefix="onnx-rewriter-") as folder:
        path = os.path.join(folder, "model.onnx")
        with open(path, "wb") as f:
            f.write(data)
        yield path


def _own_file(folder: Path, data: bytes) -> Path | None:
    """The file in ``folder`` holding exactly ``data`` (the model as it was loaded), if any."""
    try:
        candidates = [p for p in folder.iterdir() if p.is_file() and not p.is_symlink()
                      and p.stat().st_size == len(data)]
    except OSError:
        return None
    for candidate in candidates:
        try:
            if candidate.read_bytes() == data:
                return candidate
        except OSError:
            continue
    return None
