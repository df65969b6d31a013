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


def producer_outputs(estimator, rows: np.ndarray) -> np.ndarray:
    """What the fitted model itself computes on ``rows``: class probabilities, else a
    classifier's decision function (LinearSVC), else predictions (``[N, k]``)."""
    if hasattr(estimator, "predict_proba"):
        out = estimator.predict_proba(rows)
    elif hasattr(estimator, "decision_function") and hasattr(estimator, "classes_"):
        out = estimator.decision_function(rows)
    else:
        out = estimator.predict(rows)
    return np.asarray(out, np.float64).reshape(len(rows), -1)


def max_abs_error(path: Path, rows: np.ndarray, want: np.ndarray) -> float:
    """The largest difference between ``want`` (:func:`producer_outputs`) and the model's
    float output of the same shape on ``rows``, on onnxruntime (a sequence of maps, ZipMap's,
    read as its rows' values)."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    found = []
    for value in session.run(None, input_feeds(path, rows)):
        if isinstance(value, list) and value and isinstance(value[0], dict):
            value = [list(row.values()) for row in value]
        value = np.asarray(value)
        if value.dtype.kind == "f" and value.size == want.size:
            found.append(float(np.max(np.abs(value.reshape(want.shape) - want))))
    if not found:
        raise ValueError("no float output of the producer's shape")
    return min(found)


def input_feeds(path: Path, rows: np.ndarray) -> dict[str, np.ndarray]:
    """``rows`` as each of the model's inputs, in its element type."""
    import onnx

    graph = onnx.load(path, load_external_data=False).graph
    return {i.name: rows.astype(onnx.helper.tensor_dtype_to_np_dtype(
        i.type.tensor_type.elem_type)) for i in graph.input}
