"""Inputs that make sense for these models, from each input's name and declared shape.

Symbolic dimensions take the values of :data:`DIMS` (batch 2, sequence 6; a decoding step of
one new token after 3 cached ones for models with a KV cache). Token ids are drawn from the
vocabulary, positions count up, masks are ones except that the second sequence of an
encoder batch ends in one padding token, caches and features are standard normal.
numpy and onnx only: the committed test models use this too.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

VOCAB = 128  # realworld.families.VOCAB (not imported: that module is for the builds)
HEAD_SIZE = 16  # the LLM families' (hidden 64, 4 heads)
DIMS = {
    "batch": 2, "batch_size": 2,
    "sequence": 6, "decoder_sequence": 4,
    # the genai builder's names: a decoding step, one new token after 3 cached ones
    # (onnxruntime's GroupQueryAttention takes several new tokens after a cache only for
    # batch 1)
    "sequence_length": 1, "past_sequence_length": 3, "total_sequence_length": 4,
    "kv_cache_dim": HEAD_SIZE,
}
_ONNX_TO_NUMPY = {1: np.float32, 10: np.float16, 11: np.float64, 6: np.int32, 7: np.int64,
                  9: np.bool_}


BATCH_DIMS = ("batch", "batch_size")


def _shape(value_info, path: Path, dims: dict[str, int]) -> list[int]:
    shape = []
    for dim in value_info.type.tensor_type.shape.dim:
        if dim.HasField("dim_value"):
            shape.append(dim.dim_value)
        elif dim.dim_param in dims:
            shape.append(dims[dim.dim_param])
        else:
            raise ValueError(f"{path}: input {value_info.name!r} has dimension "
                             f"{dim.dim_param or '?'!r}, which realworld.feeds.DIMS lacks")
    return shape


def _genai_head_size(path: Path) -> int | None:
    """The head size the genai builder wrote beside the model (``genai_config.json``), if
    any (Phi's 32; the other LLM families' 16)."""
    import json

    config = path.parent / "genai_config.json"
    if not config.exists():
        return None
    return json.loads(config.read_text()).get("model", {}).get("decoder", {}).get("head_size")


def feeds_for(path: str | Path, seed: int = 0, batch: int | None = None
              ) -> dict[str, np.ndarray]:
    """One input set for the model at ``path`` (its weights are not read); ``batch``: the
    symbolic batch dimensions' value instead of DIMS' (a static one stays as declared)."""
    import onnx

    path = Path(path)
    graph = onnx.load(str(path), load_external_data=False).graph
    initializers = {t.name for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in initializers]
    has_cache = any(i.name.startswith("past") for i in inputs)
    rng = np.random.default_rng(seed)
    dims = DIMS if batch is None else {**DIMS, **dict.fromkeys(BATCH_DIMS, batch)}
    head_size = _genai_head_size(path)
    if head_size is not None:  # the genai builder's cache: its model's own head size
        dims = {**dims, "kv_cache_dim": head_size}
    feeds = {}
    for value_info in inputs:
        name, shape = value_info.name, _shape(value_info, path, dims)
        dtype = _ONNX_TO_NUMPY[value_info.type.tensor_type.elem_type]
        if name.endswith("input_ids"):
            value = rng.integers(0, VOCAB, shape)
        elif name == "token_type_ids":
            value = rng.integers(0, 2, shape)
        elif name == "position_ids":
            start = DIMS["past_sequence_length"] if has_cache else 0
            value = np.broadcast_to(np.arange(start, start + shape[-1]), shape)
        elif name.endswith("attention_mask"):
            value = np.ones(shape)
            if not has_cache and shape[0] > 1 and shape[-1] > 1:
                value[1, -1] = 0  # the second sequence is one token shorter
        else:  # caches, images, audio features, encoder states
            value = rng.standard_normal(shape)
        feeds[name] = np.ascontiguousarray(value).astype(dtype)
    return feeds
