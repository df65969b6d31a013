"""How big a model is, for reports: its nodes, the bytes of its initializers and of its files
(the ``.onnx`` file and the external-data files it names). Read from the protobuf and the
file system; weights are never loaded."""

from __future__ import annotations

import os
from typing import Any

from onnx import ModelProto

from rewriter.graph.walk import iter_scopes, iter_tensor_sites
from rewriter.io.model import IN_MEMORY, LoadedModel, external_locations, tensor_nbytes


def _initializer_bytes(scopes) -> int:
    total = 0
    for scope in scopes:
        g = scope.graph
        if g is None:
            continue
        total += sum(tensor_nbytes(t) or 0 for t in g.initializer)
        total += sum((tensor_nbytes(st.values) or 0) + (tensor_nbytes(st.indices) or 0)
                     for st in g.sparse_initializer)
    return total


def model_size(model: ModelProto, file_bytes: int | None,
               nodes: int | None = None) -> dict[str, Any]:
    """``{"nodes", "initializer_bytes", "file_bytes"}`` of ``model``: nodes in every graph,
    subgraph and function (``nodes`` when the caller counted them already), the data of
    every initializer (dense and sparse, external data included), and ``file_bytes`` as
    given (None: the model is not a file)."""
    scopes = list(iter_scopes(model))
    if nodes is None:
        nodes = sum(len(s.nodes) for s in scopes)
    return {"nodes": nodes, "initializer_bytes": _initializer_bytes(scopes),
            "file_bytes": file_bytes}


def file_model_size(path: str | os.PathLike) -> dict[str, Any]:
    """:func:`model_size` of a model file (read without its weights)."""
    from rewriter.io.model import as_loaded

    loaded = as_loaded(path)
    return model_size(loaded.model, input_file_bytes(loaded))


def input_file_bytes(loaded: LoadedModel) -> int | None:
    """Bytes of a loaded model's file and of the external-data files it names (None for a
    model given in memory)."""
    if str(loaded.path) == IN_MEMORY:
        return None
    return loaded.file_size + sum(f.size for f in loaded.external_files.values())


def written_file_bytes(path: str | os.PathLike, model: ModelProto,
                       source: LoadedModel | None) -> int:
    """Bytes of a written model: its file, plus the external-data files of ``source`` that
    ``model`` still names (the writer copies each of them whole next to the output)."""
    total = os.stat(path).st_size
    if source is not None and source.external_files:
        named = external_locations(t for _, t in iter_tensor_sites(model))
        total += sum(source.external_files[loc].size for loc in named
                     if loc in source.external_files)
    return total


def byte_text(n: Any) -> str:
    """A byte count as a report shows it: exact, with a binary unit past 1 KiB."""
    if not isinstance(n, int):
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n:,} ({n / size:.1f} {unit})"
    return f"{n:,}"
