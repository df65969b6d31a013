"""ai.onnx.contrib::StringSplit: split each string of a vector on any character of the
delimiter (on every character when it is empty), giving a sparse result: ``indices``
(n, 2), ``values`` (n,) and the dense ``shape`` (rows, widest row). An empty string has no
tokens; ``skip_empty`` drops empty tokens."""

from __future__ import annotations

import re

import numpy as np

from rewriter.plugin import kernel as _kernel


def split(s: str, delimiter: str, skip_empty: bool) -> list[str]:
    if not s:
        return []
    if not delimiter:
        return list(s)
    parts = re.split("[" + re.escape(delimiter) + "]", s)
    return [p for p in parts if p] if skip_empty else parts


@_kernel(signatures=["string, string, bool -> int64, string, int64"])
def kernel(text: np.ndarray, delimiter: np.ndarray, skip_empty: np.ndarray):
    if text.ndim != 1:
        raise ValueError("StringSplit: only 1D tensors are supported as input")
    delim = str(delimiter.reshape(-1)[0]) if delimiter.size else ""
    skip = bool(skip_empty.reshape(-1)[0]) if skip_empty.size else False
    indices, values, width = [], [], 0
    for row, s in enumerate(text):
        tokens = split(str(s), delim, skip)
        width = max(width, len(tokens))
        indices.extend((row, col) for col in range(len(tokens)))
        values.extend(tokens)
    return (np.array(indices, dtype=np.int64).reshape(-1, 2),
            np.array(values, dtype=object),
            np.array([len(text), width], dtype=np.int64))
