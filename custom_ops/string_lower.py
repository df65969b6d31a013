"""ai.onnx.contrib::StringLower, with onnxruntime-extensions' exact case table: it lowers
only A-Z, Latin-1 À-Þ (not ×), Greek Ι-Ν, Ο-Π, Cyrillic А-Я and U+1F08-U+1F68, each by
adding 32 to the code point (measured on every code point up to U+2FFFF; Python's
``str.lower`` lowers far more, so it is not used)."""

from __future__ import annotations

import numpy as np

from rewriter.plugin import kernel as _kernel

_RANGES = ((0x41, 0x5A), (0xC0, 0xD6), (0xD8, 0xDE), (0x399, 0x39D), (0x39F, 0x3A0),
           (0x410, 0x42F), (0x1F08, 0x1F68))
_TABLE = {c: c + 32 for lo, hi in _RANGES for c in range(lo, hi + 1)}


def lower(s: str) -> str:
    return s.translate(_TABLE)


@_kernel(signatures=["string -> string"])
def kernel(x: np.ndarray) -> np.ndarray:
    out = np.empty(x.shape, dtype=object)
    flat_in, flat_out = x.reshape(-1), out.reshape(-1)
    for i, s in enumerate(flat_in):
        flat_out[i] = lower(s if isinstance(s, str) else s.decode())
    return out
