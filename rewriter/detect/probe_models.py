"""What one-node probe models are made of: a model's constants, value shapes, and tensors.

Targets that ask a runtime about one node at a time (``openvino``, ``tract``: subclasses of
:class:`rewriter.detect.runtime_target.RuntimeTarget`) build a model of that node alone
(:func:`probe_inputs`, :func:`one_node_model`); these helpers give it the model's constant
inputs (small ones with their values: translators read shapes, axes and pads from them; big
ones as zeros of their shape) and the shapes onnx's inference gives the node's inputs.

A runtime is asked about a whole model the way its users load one: from a file
(:func:`model_file`), with its external data beside it. Plugins reach this module as
``rewriter.plugin.probe_models``.
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

    from rewriter.graph.walk import iter_scopes

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


def value_producers(model) -> dict[str, str]:
    """Value name -> the name of the node computing it (every graph): what a runtime's error
    naming a value or a node is read against (:func:`rewriter.detect.targets.refused_node`)."""
    from rewriter.graph.walk import iter_nodes

    return {o: site.node.name for site in iter_nodes(model) for o in site.node.output if o}


def with_external_data(model, base_dir):
    """``model`` with its external data read in from ``base_dir`` (a copy; the model itself
    when it has none), for a runtime given bytes, not files."""
    from rewriter.graph.walk import iter_tensors

    if not any(external(t) for _, t in iter_tensors(model)):
        return model
    from onnx import ModelProto
    from onnx.external_data_helper import load_external_data_for_model

    copy = ModelProto()
    copy.CopyFrom(model)
    load_external_data_for_model(copy, str(base_dir or "."))
    return copy


# -- one-node probe models ----------------------------------------------------------------------

@dataclass
class ProbeInputs:
    """What a one-node probe is given (:func:`probe_inputs`): ``parts``, (name, TensorProto or
    TypeProto, zeros) each (zeros: None for a graph input of that TypeProto, False for a
    constant with its values, True for a constant as zeros of its shape); ``key``, what a
    verdict depends on per input (a constant's value or its type and shape; an input's type
    string and shape); ``unranked``, some tensor input's rank is unknown; ``guessed``, some
    input's type was not known (given as float)."""

    parts: list
    key: tuple
    unranked: bool
    guessed: bool


def probe_inputs(query, constants, input_type, *, external_constants: bool = True,
                 guess: tuple | None = None) -> ProbeInputs:
    """The inputs of a one-node probe of ``query``'s node (a
    :class:`rewriter.detect.targets.NodeQuery`): its inputs and the values it reads from
    enclosing graphs, each once. A constant of ``constants`` (name -> TensorProto) up to
    SMALL_CONSTANT_BYTES is given with its values (not when stored externally), one up to
    PROBE_CONSTANT_LIMIT as zeros of its shape (``external_constants`` False: an external
    one is given as an input instead); any other input as a graph input of the TypeProto
    ``input_type(name)`` returns (None: unknown, given as float of rank ``guess[0]`` with
    dimensions ``guess[1]``, or of unknown rank)."""
    from onnx import TensorProto, helper

    from rewriter.graph.walk import outer_references

    node = query.node
    parts, key_inputs, seen = [], [], set()
    unranked = guessed = False
    names = [n for n in query.inputs if n]
    if node.attribute:
        names += outer_references(node)
    for name in names:
        if name in seen:
            continue
        seen.add(name)
        tensor = constants.get(name)
        if tensor is not None and (external_constants or not external(tensor)):
            size = tensor_bytes(tensor)
            if size <= SMALL_CONSTANT_BYTES and not external(tensor):
                parts.append((name, tensor, False))
                if tensor.data_type in VALUE_TYPES:  # shapes, axes, pads, indices...
                    key_inputs.append(("const", tensor.SerializeToString()))
                else:  # weights: conversion depends on their type and shape only
                    key_inputs.append(("weight", tensor.data_type, tuple(tensor.dims)))
                continue
            if size <= PROBE_CONSTANT_LIMIT:
                parts.append((name, tensor, True))
                key_inputs.append(("weight", tensor.data_type, tuple(tensor.dims)))
                continue
        proto = input_type(name)
        if proto is None:  # type unknown (it comes from an op nobody has a schema for)
            guessed = True
            rank, dim = guess or (None, None)
            proto = helper.make_tensor_type_proto(
                TensorProto.FLOAT, None if rank is None else [dim] * rank)
        shape = shape_key(proto)
        unranked = unranked or (shape is None and proto.WhichOneof("value") == "tensor_type")
        parts.append((name, proto, None))
        key_inputs.append((query.types.get(name), shape))
    return ProbeInputs(parts, tuple(key_inputs), unranked, guessed)


def attributes_digest(node) -> bytes:
    """A digest of ``node``'s attributes (part of a probe verdict's key)."""
    import hashlib

    return hashlib.sha256(b"".join(
        a.SerializeToString(deterministic=True) for a in node.attribute)).digest()


def one_node_model(node, parts, outputs, versions, input_type=None):
    """The model of ``node`` alone: graph inputs and initializers from ``parts`` (see
    :class:`ProbeInputs`; ``input_type(name, proto)`` may change an input's TypeProto), its
    non-empty ``outputs`` untyped, the opsets ``versions`` (domain -> version), IR version
    at least 8."""
    from onnx import TypeProto, helper

    inputs, initializers = [], []
    for name, value, zeros in parts:
        if zeros is None:
            proto = value if input_type is None else input_type(name, value)
            inputs.append(helper.make_value_info(name, proto))
        else:
            tensor = renamed(value, name)
            initializers.append(zeros_like(tensor) if zeros else tensor)
    graph_outputs = [helper.make_value_info(o, TypeProto()) for o in outputs if o]
    graph = helper.make_graph([node], "probe", inputs, graph_outputs, initializers)
    opsets = [helper.make_opsetid(d, v) for d, v in versions.items()]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = max(helper.find_min_ir_version_for(opsets, ignore_unknown=True), 8)
    return model


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
    from rewriter.graph.walk import iter_tensors

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
