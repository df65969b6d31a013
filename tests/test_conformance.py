"""check --target onnxruntime against really creating onnxruntime sessions, on every ONNX
backend node conformance case shipped inside the onnx package."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import conformance  # noqa: E402

MIN_AGREEMENT = 0.99


def test_static_check_agrees_with_onnxruntime_sessions_on_the_node_suite():
    result = conformance.measure_onnxruntime_agreement()
    assert result.total > 1500, "the onnx package should ship ~1,900 node cases"
    shown = "\n".join(
        f"{d['case']}: predicted {d['predicted']}, onnxruntime {d['actual']}: "
        f"{d['finding'] or d['onnxruntime']}"
        for d in result.disagreements[:20]
    )
    assert result.rate >= MIN_AGREEMENT, f"agreement {result.rate:.2%}\n{shown}"
    # both verdicts occur, so the rate is not trivially met by always answering one way
    assert result.matrix.get("fails/fails", 0) > 50
    assert result.matrix.get("runs/runs", 0) > 1000
