"""Calibration data for ``onnxruntime.quantization.quantize_static`` in tests: ``count``
standard normal input sets of one input."""

from __future__ import annotations

import numpy as np


class CalibrationSets:
    """A ``CalibrationDataReader`` (duck-typed: ``get_next``) of ``count`` sets of ``name``,
    shape ``shape``, drawn with ``seed``."""

    def __init__(self, name: str = "x", shape=(1, 3, 8, 8), count: int = 8, seed: int = 1):
        rng = np.random.default_rng(seed)
        self.sets = iter([{name: rng.normal(0, 1, shape).astype(np.float32)}
                          for _ in range(count)])

    def get_next(self):
        return next(self.sets, None)
