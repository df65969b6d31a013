"""Safe model I/O: load without reading weights, validate every external-data reference,
save atomically next to the path the user gave.

Every failure raises :class:`~rewriter.errors.ModelError` (or a subclass) with one readable
line naming the file and the tensor or node at fault.
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path

import numpy as np
from google.protobuf.message import DecodeError
from onnx import ModelProto, TensorProto, helper

from rewriter.errors import ExternalDataError, ModelError, OutputError
from rewriter.graph.walk import (
    iter_scopes,
    iter_tensor_sites,
    node_label,
    normalize_domain,
    opset_map,
    tensor_location,
)
from rewriter.io import output as output_io

MAX_PROTOBUF_BYTES = 2**31 - 1  # protobuf cannot parse or serialize a message this large


@dataclass
class ExternalFile:
    """One external-data file a model refers to."""

    location: str  # as written in the model, relative to the model's folder
    path: Path  # resolved, validated path
    size: int
    tensors: int = 0
    referenced_bytes: int = 0


@dataclass
class LoadedModel:
    """A model loaded from disk with its weights left in place."""

    model: ModelProto
    path: Path
    file_size: int
    external_files: dict[str, ExternalFile] = field(default_factory=dict)
    folder: Path | None = None  # where external data lives, when not the file's folder
    # each main-graph node's (inputs, outputs), read by the validation when asked
    # (``load_model(node_io=True)``): detection reuses them instead of reading the fields again
    main_io: list[tuple[tuple[str, ...], tuple[str, ...]]] | None = field(
        default=None, repr=False, compare=False)
    # with ``main_io``: the positions of the main-graph nodes holding subgraphs
    main_holders: frozenset[int] | None = field(default=None, repr=False, compare=False)

    @property
    def base_dir(self) -> Path:
        return self.folder if self.folder is not None else self.path.parent


def _open_regular_file(path: Path) -> tuple[int, os.stat_result]:
    """Open without blocking (a FIFO would hang a plain open) and insist on a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise ModelError(str(path), "no such file") from None
    except IsADirectoryError:
        raise ModelError(str(path), "is a directory, not a model file") from None
    except OSError as e:
        raise ModelError(str(path), f"cannot open: {e.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        if stat.S_ISFIFO(st.st_mode):
            kind = "a FIFO (named pipe), not a regular file"
        raise ModelError(str(path), f"is {kind}; refusing to read it")
    return fd, st


def _read_all(fd: int, size: int) -> bytes:
    chunks = []
    remaining = size
    with os.fdopen(fd, "rb", closefd=True) as f:
        while remaining > 0:
            chunk = f.read(min(remaining, 1 << 26))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
    return b"".join(chunks)


def load_model(path: str | os.PathLike, *, validate: bool = True,
               node_io: bool = False) -> LoadedModel:
    """Load ``path`` without reading external data; validate structure and every reference.
    ``node_io``: keep each main-graph node's inputs and outputs as the validation read them
    (``LoadedModel.main_io``, for detection; 100k nodes hold ~20 MB).

    Raises:
        ModelError: the file is missing, not a regular file, not an ONNX model, structurally
            broken (undefined inputs, cycles), or its external data is unsafe or missing.
    """
    path = Path(os.path.abspath(os.fspath(path)))
    fd, st = _open_regular_file(path)
    if st.st_size == 0:
        os.close(fd)
        raise ModelError(str(path), "empty file; not an ONNX model")
    if st.st_size > MAX_PROTOBUF_BYTES:
        os.close(fd)
        raise ModelError(
            str(path),
            f"file is {st.st_size / 2**30:.2f} GiB; an ONNX protobuf over 2 GiB cannot be "
            "parsed; save the weights as external data",
        )
    data = _read_all(fd, st.st_size)
    model = ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise ModelError(str(path), f"not an ONNX model (protobuf parse failed: {e})") from None
    del data
    if not model.HasField("graph") or model.ir_version <= 0:
        missing = "graph" if not model.HasField("graph") else "IR version"
        raise ModelError(str(path), f"not an ONNX model (no {missing}; truncated or wrong file?)")
    if model.ir_version >= 3 and not model.opset_import:
        # IR >= 3 requires opset imports; a file cut right after the graph parses without them
        raise ModelError(str(path), "not an ONNX model (no opset imports; truncated file?)")
    loaded = LoadedModel(model=model, path=path, file_size=st.st_size)
    if validate:
        _validate(loaded, str(path), path.parent, node_io)
    return loaded


def _validate(loaded: LoadedModel, where: str, base_dir: Path, node_io: bool = False) -> None:
    """Structure, external data and opset imports: the checks every model goes through,
    from a file or given in memory."""
    scopes = list(iter_scopes(loaded.model))  # one walk for every check
    validate_text(loaded.model, where, scopes=scopes)
    io: list | None = [] if node_io else None
    validate_structure(loaded.model, where, scopes=scopes, main_io=io)
    loaded.main_io = io
    if node_io and scopes:  # (the main graph's scope comes first)
        loaded.main_holders = frozenset(s.holder for s in scopes if s.parent is scopes[0])
    loaded.external_files = validate_external_data(loaded.model, base_dir, where,
                                                   scopes=scopes)


def missing_imports(model: ModelProto, scopes: list | None = None) -> list[tuple[str, object]]:
    """(domain, function or None for the model) for each domain other than the standard one
    that a node uses and its model (or function) does not import (``check`` reports them as
    findings; :func:`save_model` writes the import, so what it writes passes the checker)."""
    missing: dict[tuple[str, int], tuple[str, object]] = {}
    imported_model = opset_map(model.opset_import)
    for scope in iter_scopes(model) if scopes is None else scopes:
        root = scope
        while root.parent is not None:
            root = root.parent
        function = root.function if root.function is not None and \
            root.function.opset_import else None
        imported = opset_map(function.opset_import) if function is not None else imported_model
        for raw in dict.fromkeys(map(_node_domain, scope.nodes)):  # C-level, in order
            domain = normalize_domain(raw)
            if domain in imported or domain == "":  # no version to guess for ai.onnx
                continue
            missing.setdefault((domain, id(function)), (domain, function))
    return list(missing.values())


_node_domain = attrgetter("domain")


def import_repairs(model: ModelProto, domains: Iterable[str] | None = None) -> list[str]:
    """Add to ``model``, in place, the opset import of each domain its nodes use and it (or
    the function using it) does not import, as :func:`save_model` would at the save; one
    sentence per import added (a repair is a change: the caller reports and verifies it).
    ``domains``: the domains the nodes use, when known (no walk for a model without
    functions)."""
    missing = (_missing_model_imports(model, domains)
               if domains is not None and not model.functions else missing_imports(model))
    add_imports(model, missing)
    return [f"added the opset import {domain} 1 to "
            + (f"function {function.domain}::{function.name}" if function is not None
               else "the model") + " (its nodes use the domain; it did not import it)"
            for domain, function in missing]


def add_imports(model: ModelProto, missing: list[tuple[str, object]]) -> list:
    """Import each missing domain at version 1 where it is used; return the (repeated
    field, entry) pairs added, for a caller that undoes them."""
    added = []
    for domain, function in missing:
        target = function.opset_import if function is not None else model.opset_import
        if domain not in opset_map(target):
            target.append(helper.make_opsetid(domain, 1))
            added.append((target, target[len(target) - 1]))
    return added


# ----------------------------------------------------------------------------- text


def _not_text(values) -> bool:
    """Whether some value is bytes: protobuf gives a string field that is not valid UTF-8
    (ONNX's are proto2, so parsing does not refuse it) as bytes."""
    try:
        "".join(values)
    except TypeError:
        return True
    return False


def _value_info_text(infos) -> list:
    values = []
    for v in infos:
        values.append(v.name)
        if v.type.HasField("tensor_type"):
            values.extend(d.dim_param for d in v.type.tensor_type.shape.dim)
    return values


def validate_text(model: ModelProto, where: str, *, scopes: list | None = None) -> None:
    """Every name the tool reads (ops, domains, node, graph-input/output, tensor and
    dimension names, producer, metadata) must be UTF-8 text, as ONNX requires; one that is
    not (a corrupt or hostile file: protobuf hands it over as bytes) is refused, naming
    where it is. Node inputs and outputs are checked by :func:`validate_structure`."""
    def refuse(place: str, values) -> None:
        bad = next(v for v in values if isinstance(v, bytes))
        raise ModelError(where, f"{place}: a name is not valid UTF-8 text ({bad[:40]!r})")

    top = [model.producer_name, model.producer_version, model.domain]
    top += [o.domain for o in model.opset_import]
    top += [x for p in model.metadata_props for x in (p.key, p.value)]
    if _not_text(top):
        refuse("model header (producer, domain, opset imports, metadata)", top)
    for scope in iter_scopes(model) if scopes is None else scopes:
        if scope.graph is not None:
            g = scope.graph
            names = [g.name, *_value_info_text(g.input), *_value_info_text(g.output),
                     *(t.name for t in g.initializer),
                     *(t.values.name for t in g.sparse_initializer)]
            if _not_text(names) or _not_text(_value_info_text(g.value_info)):
                refuse(f"{scope.path}: graph, input, output or initializer names",
                       names + _value_info_text(g.value_info))
        else:
            f = scope.function
            names = [f.name, f.domain, *f.input, *f.output, *f.attribute,
                     *(o.domain for o in f.opset_import)]
            if _not_text(names):
                refuse(f"{scope.path}: function name, domain, inputs or outputs", names)
        nodes = scope.nodes  # (their inputs and outputs: validate_structure)
        attributed = scope.attributed  # the nodes with attributes, as iter_scopes read them
        if attributed is None or scope.node_count != len(nodes):
            attributed = [i for i, n in enumerate(nodes) if n.attribute]
        try:
            [n.op_type + n.domain + n.name for n in nodes]  # noqa: B018 - str + bytes raises
            "".join([a.name for i in attributed for a in nodes[i].attribute])
        except TypeError:
            for i, node in enumerate(nodes):
                values = [node.op_type, node.domain, node.name,
                          *(a.name for a in node.attribute)]
                if _not_text(values):
                    label = f"node {i}" if isinstance(node.name, bytes) else \
                        node_label(i, node)
                    refuse(f"{scope.path}/{label}: op, domain, name or attribute names",
                           values)


# ----------------------------------------------------------------------------- structure


def validate_structure(model: ModelProto, where: str, *, scopes: list | None = None,
                       main_io: list | None = None) -> None:
    """Every node input and graph output must be defined, and no graph may contain a cycle.

    All problems are gathered into one error line. ``scopes``: the model's
    :func:`~rewriter.graph.walk.iter_scopes`, when the caller has them already.
    ``main_io``: filled with each main-graph node's (inputs, outputs) tuples.
    """
    problems: list[str] = []
    defined_in: dict[int, set[str]] = {}
    for scope in iter_scopes(model) if scopes is None else scopes:
        if scope.graph is not None:
            g = scope.graph
            names = {v.name for v in g.input}
            stored = [t.name for t in g.initializer]
            stored += [s.values.name for s in g.sparse_initializer]
            names.update(stored)
            if len(set(stored)) < len(stored):
                seen: set[str] = set()
                twice = sorted({n for n in stored if n in seen or seen.add(n)})
                problems.append(f"{scope.path}: {len(stored) - len(set(stored))} initializer(s) "
                                f"share a name with another: {', '.join(map(repr, twice[:5]))}")
        else:
            names = set(scope.function.input)
        # names visible from enclosing graphs, innermost first (sets, never copied)
        parents: list[set[str]] = []
        p = scope.parent
        while p is not None:
            if defined_in.get(id(p)):
                parents.append(defined_in[id(p)])
            p = p.parent
        nodes = scope.nodes
        local = set(names)
        pending: list[tuple[int, str]] = []
        defines_all = local.issuperset
        define = local.update
        io = zip(map(_INPUTS, nodes), map(_OUTPUTS, nodes))  # the fields, read C-level
        if main_io is not None and scope.parent is None and scope.graph is not None:
            main_io.extend(zip(map(tuple, map(_INPUTS, nodes)), map(tuple, map(_OUTPUTS, nodes))))
            io = main_io  # the main graph's, as tuples kept for detection
        for i, (inputs, outputs) in enumerate(io):
            if not defines_all(inputs):  # rare: an empty optional input, an outer-scope name
                for name in inputs:
                    if name and name not in local and not any(name in s for s in parents):
                        pending.append((i, name))
            define(outputs)
        if _not_text(local):  # protobuf's bytes for a name that is not UTF-8
            bad = next(n for n in local if isinstance(n, bytes))
            raise ModelError(where, f"{scope.path}: a value name is not valid UTF-8 text "
                             f"({bad[:40]!r})")
        local.discard("")  # an empty output name defines nothing
        local.update(n for n in names if not n)  # ...unless the graph declared one
        defined_in[id(scope)] = local
        if pending:
            produced_later = {o for node in nodes for o in node.output if o}
            for i, name in pending:
                if name in produced_later:
                    continue  # defined later: ordering or cycle, decided below
                problems.append(
                    f"{scope.path}/{node_label(i, nodes[i])}: input {name!r} is not defined"
                )
            if any(name in produced_later for _, name in pending):
                cycle = _find_cycle(nodes, names.union(*parents))
                if cycle:
                    problems.append(f"{scope.path}: cycle through nodes {', '.join(cycle)}")
        if scope.graph is not None:
            out_names = [o.name for o in scope.graph.output]
        else:
            out_names = list(scope.function.output)
        for name in out_names:
            if name and name not in local and not any(name in s for s in parents):
                problems.append(f"{scope.path}: output {name!r} is not produced by any node")
        if len(problems) > 20:
            break
    if problems:
        shown = "; ".join(problems[:5])
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise ModelError(where, f"invalid graph: {shown}{more}")


_INPUTS, _OUTPUTS = attrgetter("input"), attrgetter("output")


def _find_cycle(nodes, available: set[str]) -> list[str]:
    """Kahn's algorithm; returns labels of nodes that can never run (empty when acyclic)."""
    producer = {}
    for i, n in enumerate(nodes):
        for o in n.output:
            if o:
                producer[o] = i
    indegree = [0] * len(nodes)
    users: dict[int, list[int]] = {}
    for i, n in enumerate(nodes):
        deps = {producer[x] for x in n.input if x and x not in available and x in producer}
        indegree[i] = len(deps)
        for d in deps:
            users.setdefault(d, []).append(i)
    ready = [i for i, d in enumerate(indegree) if d == 0]
    seen = 0
    while ready:
        i = ready.pop()
        seen += 1
        for u in users.get(i, ()):
            indegree[u] -= 1
            if indegree[u] == 0:
                ready.append(u)
    if seen == len(nodes):
        return []
    stuck = [node_label(i, nodes[i]) for i, d in enumerate(indegree) if d > 0]
    return stuck[:6] + (["..."] if len(stuck) > 6 else [])


# ----------------------------------------------------------------------------- external data


def external_data_fields(tensor: TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in tensor.external_data}


def uses_external_data(tensor: TensorProto) -> bool:
    return tensor.data_location == TensorProto.EXTERNAL


def _unsafe_location_reason(location: str) -> str | None:
    if not location:
        return "has no 'location'"
    if "\x00" in location:
        return "location contains a NUL byte"
    if os.path.isabs(location) or location.startswith(("/", "\\")) or (
        len(location) > 1 and location[1] == ":"
    ):
        return f"location {location!r} is an absolute path"
    parts = location.replace("\\", "/").split("/")
    if ".." in parts:
        return f"location {location!r} contains '..'"
    return None


_PACKED_BITS = {
    getattr(TensorProto, name): bits
    for name, bits in (("INT4", 4), ("UINT4", 4), ("FLOAT4E2M1", 4), ("INT2", 2), ("UINT2", 2))
    if hasattr(TensorProto, name)
}


_NO_SIZE = (TensorProto.STRING, TensorProto.UNDEFINED)
_ITEMSIZE: dict[int, int | None] = {}  # data type -> bytes per element (None: unknown)


def _itemsize(data_type: int) -> int | None:
    try:
        return _ITEMSIZE[data_type]
    except KeyError:
        pass
    try:
        size = np.dtype(helper.tensor_dtype_to_np_dtype(data_type)).itemsize
    except (KeyError, ValueError, TypeError):
        size = None
    _ITEMSIZE[data_type] = size
    return size


def tensor_nbytes(tensor: TensorProto) -> int | None:
    """Bytes the tensor's data should occupy, or None for strings/unknown types."""
    return _nbytes(tensor.data_type, tensor.dims)


def _nbytes(data_type: int, dims) -> int | None:
    """:func:`tensor_nbytes` from the tensor's type and dimensions."""
    if data_type in _NO_SIZE:
        return None
    bits = _PACKED_BITS.get(data_type)
    if bits:
        return (math.prod(dims) * bits + 7) // 8
    itemsize = _itemsize(data_type)
    if itemsize is None:
        return None
    return math.prod(dims) * itemsize


def _tensor_label(site, tensor: TensorProto) -> str:
    return f"tensor {tensor.name!r} ({tensor_location(site)})"


def validate_external_data(
    model: ModelProto, base_dir: Path, where: str, *, scopes: list | None = None
) -> dict[str, ExternalFile]:
    """Check every external-data reference; return the files referenced, keyed by location.
    ``scopes``: the model's :func:`~rewriter.graph.walk.iter_scopes`, when the caller has them."""
    base_real = os.path.realpath(base_dir)
    files: dict[str, ExternalFile] = {}
    location_reasons: dict[str, str | None] = {}
    external = TensorProto.EXTERNAL
    for site, tensor in iter_tensor_sites(model, scopes):
        if tensor.data_location != external:
            continue
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        if not isinstance(location, str):
            raise ExternalDataError(
                where, f"external data of {_tensor_label(site, tensor)}: location is not valid "
                f"UTF-8 text ({location[:40]!r})")
        try:
            reason = location_reasons[location]
        except KeyError:
            reason = location_reasons[location] = _unsafe_location_reason(location)
        if reason:
            raise ExternalDataError(
                where, f"external data of {_tensor_label(site, tensor)}: {reason}"
            )
        ext = files.get(location)
        if ext is None:
            ext = files[location] = _check_external_file(
                base_dir, base_real, location, _tensor_label(site, tensor), where
            )
        try:
            offset = int(info.get("offset", "0") or 0)
            length = int(info["length"]) if info.get("length") not in (None, "") else None
        except ValueError:
            raise ExternalDataError(
                where,
                f"external data of {_tensor_label(site, tensor)}: offset/length are not integers",
            ) from None
        if offset < 0 or (length is not None and length < 0):
            raise ExternalDataError(
                where,
                f"external data of {_tensor_label(site, tensor)}: negative offset or length",
            )
        dims = tuple(tensor.dims)
        if dims and min(dims) < 0:
            raise ExternalDataError(
                where, f"external data of {_tensor_label(site, tensor)}: negative dimension "
                f"in shape {list(dims)}"
            )
        expected = _nbytes(tensor.data_type, dims)
        needed = length if length is not None else expected
        if length is not None and expected is not None and length < expected:
            raise ExternalDataError(
                where,
                f"external data of {_tensor_label(site, tensor)}: length {length} is shorter "
                f"than the {expected} bytes its shape and type need",
            )
        if needed is not None and offset + needed > ext.size:
            raise ExternalDataError(
                where,
                f"external data of {_tensor_label(site, tensor)}: offset {offset} + length "
                f"{needed} is past the end of {location!r} ({ext.size} bytes)",
            )
        if needed is None and offset > ext.size:
            raise ExternalDataError(
                where,
                f"external data of {_tensor_label(site, tensor)}: offset {offset} is past the "
                f"end of {location!r}",
            )
        ext.tensors += 1
        ext.referenced_bytes += needed or 0
    return files


def _check_external_file(base_dir: Path, base_real: str, location: str, label: str, where: str):
    full = os.path.join(base_dir, location)
    try:
        st = os.lstat(full)
    except FileNotFoundError:
        raise ExternalDataError(
            where, f"external data of {label}: file {location!r} is missing next to the model"
        ) from None
    except OSError as e:
        raise ExternalDataError(
            where, f"external data of {label}: cannot read {location!r}: {e.strerror}"
        ) from None
    if stat.S_ISLNK(st.st_mode):
        raise ExternalDataError(where, f"external data of {label}: {location!r} is a symlink")
    real = os.path.realpath(full)
    if os.path.commonpath([real, base_real]) != base_real:
        raise ExternalDataError(
            where, f"external data of {label}: {location!r} resolves outside the model's folder"
        )
    if not stat.S_ISREG(st.st_mode):
        raise ExternalDataError(
            where, f"external data of {label}: {location!r} is not a regular file"
        )
    if st.st_nlink > 1:
        raise ExternalDataError(
            where, f"external data of {label}: {location!r} is a hard link ({st.st_nlink} links)"
        )
    return ExternalFile(location=location, path=Path(real), size=st.st_size)


def read_external_tensor(loaded: LoadedModel, tensor: TensorProto) -> np.ndarray:
    """Read one external tensor's values (only when a rewrite needs them)."""
    from onnx import numpy_helper

    info = external_data_fields(tensor)
    ext = loaded.external_files[info["location"]]
    offset = int(info.get("offset", "0") or 0)
    length = int(info["length"]) if info.get("length") else tensor_nbytes(tensor)
    with open(ext.path, "rb") as f:
        f.seek(offset)
        raw = f.read(length)
    inline = TensorProto()
    inline.CopyFrom(tensor)
    del inline.external_data[:]
    inline.data_location = TensorProto.DEFAULT
    inline.raw_data = raw
    return numpy_helper.to_array(inline)


# ----------------------------------------------------------------------------- save
# The writing itself (atomic, locked, model and data as one unit) is rewriter.io.output's.


def check_output_path(output: str | os.PathLike, source: Path | None, *, in_place: bool,
                      folder_ok: bool = False, protected=()) -> Path:
    """Refuse an output that would overwrite the input (unless in_place) or its data, or is
    not a file (``folder_ok``: or a folder); see :func:`rewriter.io.output.check_output_path`."""
    return output_io.check_output_path(output, source, in_place=in_place,
                                       folder_ok=folder_ok, protected=protected)


def data_file_names(output: Path, count: int) -> list[str]:
    """Names the tool gives external data written next to ``output`` in a fresh folder."""
    return output_io.data_file_names(output, count)


def input_files(loaded: LoadedModel | None) -> list[Path]:
    """The files an output must never replace: the input model and its external data."""
    if loaded is None or not loaded.path.is_absolute() or not loaded.path.exists():
        return []
    return [loaded.path, *(ext.path for ext in loaded.external_files.values())]


def save_model(
    model: ModelProto,
    output: str | os.PathLike,
    *,
    source: LoadedModel | None = None,
    in_place: bool = False,
    domains: Iterable[str] | None = None,
) -> Path:
    """Write ``model`` to ``output`` with its external data, as one unit
    (:func:`rewriter.io.output.write_model`).

    External tensors that still point into ``source``'s folder are copied (streamed, never
    loaded) to files named after the output (names no file has yet), and their ``location``
    fields are updated; the caller's model is left as it was. ``domains``: the domains the
    nodes of every graph and function use, when the caller knows them (the engine's op
    counts): the imports the save adds are then found without a walk over the nodes.
    """
    data_paths = [ext.path for ext in source.external_files.values()] if source else []
    out = check_output_path(output, source.path if source else None, in_place=in_place,
                            protected=data_paths)
    # The usual place of external data is the main graph's initializers: those are read
    # first, and the serialized bytes tell whether that was every location (else: a walk)
    entries = _initializer_location_entries(model)
    try:
        return _save(model, out, source, in_place, data_paths, entries, domains, fast=True)
    except _Elsewhere:
        return _save(model, out, source, in_place, data_paths, _location_entries(model),
                     domains, fast=False)


class _Elsewhere(Exception):  # noqa: N818 - a signal, not an error
    """External data outside the main graph's initializers: the save walks for them."""


_LOCATION_KEY = b"\x0a\x08location\x12"  # an external_data entry: key "location", value


def _save(model: ModelProto, out: Path, source: LoadedModel | None, in_place: bool,
          data_paths: list[Path], entries: list, domains: Iterable[str] | None,
          fast: bool) -> Path:
    locations = sorted({entry.value for entry in entries})
    if locations and source is None:
        raise OutputError(f"{out}: model refers to external data but its source folder is unknown")
    protected = list(data_paths)
    if source is not None and not in_place:
        protected.append(source.path)
    copies: dict[str, Path] = {}
    keep: list[str] = []
    if locations:
        if in_place and _same_file(out.parent, source.base_dir):
            keep = locations
        else:
            for loc in locations:
                ext = source.external_files.get(loc)
                if ext is None:
                    raise OutputError(f"{out}: external data {loc!r} was not validated on load")
                copies[loc] = ext.path
    missing = (_missing_model_imports(model, domains)
               if domains is not None and not model.functions else missing_imports(model))

    def serialize(renames) -> bytes:
        # the locations are renamed in place, serialized, then restored: no copy of the model
        restore: list = []
        added = add_imports(model, missing)  # what is written passes the checker
        try:
            renamed = model
            if renames:
                renamed = _with_locations(model, _Renames(dict(renames), entries, restore))
            payload = renamed.SerializeToString()
        finally:
            for entry, old in restore:
                entry.value = old
            for field_, entry in added:
                field_.remove(entry)
        if fast and payload.count(_LOCATION_KEY) != len(entries):
            raise _Elsewhere  # before anything is written (write_model serializes first)
        return payload

    return output_io.write_model(out, serialize, copies, protected=protected, keep=keep)


def _missing_model_imports(model: ModelProto, domains: Iterable[str]
                           ) -> list[tuple[str, object]]:
    """:func:`missing_imports` of a model without functions whose nodes use ``domains``."""
    imported = opset_map(model.opset_import)
    used = dict.fromkeys(normalize_domain(d) for d in domains)
    return [(d, None) for d in used if d and d not in imported]


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _location_entries(model: ModelProto) -> list:
    """The ``location`` entry of every tensor stored as external data ("" added where a
    tensor has none, as :func:`external_data_fields` reads it)."""
    entries = []
    external = TensorProto.EXTERNAL
    for _, t in iter_tensor_sites(model):
        if t.data_location != external:
            continue
        for e in t.external_data:
            if e.key == "location":
                entries.append(e)
                break
        else:
            entries.append(_NoLocation())
    return entries


def _initializer_location_entries(model: ModelProto) -> list:
    """:func:`_location_entries` of the main graph's initializers alone."""
    external = TensorProto.EXTERNAL
    entries = []
    for t in model.graph.initializer:
        if t.data_location == external:
            entries.append(next((e for e in t.external_data if e.key == "location"),
                                _NoLocation()))
    return entries


class _NoLocation:
    """Stands for the location of a tensor that has none (never renamed: "" is unsafe)."""

    value = ""


class _Renames(dict):
    """Location renames, with the entries they apply to (found while listing locations)
    and a list to note (entry, old value) in, for the caller to restore."""

    def __init__(self, renames: dict[str, str], entries: list, restore: list) -> None:
        super().__init__(renames)
        self.entries, self.restore = entries, restore


def _with_locations(model: ModelProto, renames: dict[str, str]) -> ModelProto:
    """``model`` with its external-data locations renamed, in place (a big model is not
    copied); with :class:`_Renames`, each change is noted for the caller to undo."""
    entries = getattr(renames, "entries", None)
    restore = getattr(renames, "restore", [])
    for entry in _location_entries(model) if entries is None else entries:
        new = renames.get(entry.value, entry.value)
        if new != entry.value:
            restore.append((entry, entry.value))
            entry.value = new
    return model


def external_locations(tensors: Iterable[TensorProto]) -> set[str]:
    return {external_data_fields(t).get("location", "") for t in tensors if uses_external_data(t)}


IN_MEMORY = "<in-memory model>"


def as_loaded(model, *, node_io: bool = False) -> LoadedModel:
    """A LoadedModel from a path (safely loaded), a ModelProto or a LoadedModel
    (``node_io``: see :func:`load_model`).

    A ``ModelProto`` goes through the same validation as a file (structure, every
    external-data reference, opset imports), its external data resolved against the
    current directory, as onnx and onnxruntime resolve it for a model in memory; the
    caller's proto is never changed (a repair is made on a copy)."""
    if isinstance(model, LoadedModel):
        return model
    if isinstance(model, ModelProto):
        folder = Path(os.getcwd())
        loaded = LoadedModel(model=model, path=Path(IN_MEMORY), file_size=model.ByteSize(),
                             folder=folder)
        _validate(loaded, IN_MEMORY, folder, node_io)
        return loaded
    return load_model(model, node_io=node_io)
