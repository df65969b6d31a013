"""Hummingbird side by side (issue 28): convert fitted models with Hummingbird in its own
environment (``benchmarks/hummingbird_convert.py``), then judge its ONNX models here, on
onnxruntime, against the producer's export: numbers, bytes and latency."""

from __future__ import annotations

import pickle
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SCRIPT = Path(__file__).with_name("hummingbird_convert.py")


@dataclass
class Converted:
    """One Hummingbird conversion: its ONNX file, or why there is none."""

    path: Path | None
    error: str = ""


def convert(python: str, jobs: list[tuple[str, object, np.ndarray, str | None]],
            folder: Path, timeout: float = 1800) -> dict[str, Converted]:
    """Run Hummingbird (``python``: its environment's interpreter) on ``jobs`` (name,
    fitted estimator, sample rows, tree strategy or None) in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, estimator, rows, strategy in jobs:
        (folder / f"{name}.job.pkl").write_bytes(pickle.dumps((estimator, rows, strategy)))
    done = subprocess.run([python, str(SCRIPT), str(folder)], capture_output=True, text=True,
                          timeout=timeout)
    out = {}
    for name, *_ in jobs:
        onnx_file, error = folder / f"{name}.onnx", folder / f"{name}.error"
        if onnx_file.exists():
            out[name] = Converted(onnx_file)
        elif error.exists():
            out[name] = Converted(None, error.read_text().splitlines()[0])
        else:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            out[name] = Converted(None, f"Hummingbird's run ended ({done.returncode}): "
                                        f"{tail[0][:200]}")
    return out


def max_abs_error(original: Path, converted: Path, rows: np.ndarray) -> float:
    """The largest difference between the two models' float outputs (probabilities or
    predictions, matched by shape) on ``rows``, on onnxruntime."""
    import onnxruntime as ort

    def floats(path: Path, x: np.ndarray) -> list[np.ndarray]:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        want = session.get_inputs()[0].type
        x = x.astype(np.float64 if "double" in want else np.float32)
        return [np.asarray(v, np.float64).reshape(len(x), -1)
                for v in session.run(None, {name: x})
                if isinstance(v, np.ndarray) and v.dtype.kind == "f"]

    a, b = floats(original, rows), floats(converted, rows)
    pairs = [(u, v) for u in a for v in b if u.shape == v.shape]
    if not pairs:
        raise ValueError("no float output of the same shape in both")
    return min(float(np.max(np.abs(u - v))) for u, v in pairs)
