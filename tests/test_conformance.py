"""check --target onnxruntime against really creating onnxruntime sessions, on every ONNX
backend node conformance case shipped inside the onnx package."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

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


# -- check with its confirmation (load, then run once on generated inputs) -------------------

# node cases, seeded, for the tests; the figure in docs/targets.md (every refused case and 300
# others) is the benchmarks' (`python benchmarks/conformance_openvino.py confirm`,
# `python benchmarks/conformance.py confirm`: minutes)
SAMPLE = 40


def _sample(cases, seed: int = 0) -> list:
    import random

    return random.Random(seed).sample(sorted(cases, key=lambda c: c.name), SAMPLE)


def _assert_agrees(result, runtime: str) -> None:
    shown = "\n".join(f"{d['case']}: predicted {d['predicted']}, {runtime} {d['actual']}: "
                      f"{d['finding'] or d['confirmation']} / {d['runtime']}"
                      for d in result.disagreements[:20])
    assert result.rate >= MIN_AGREEMENT, f"agreement {result.rate:.2%}\n{shown}"


def test_confirmed_check_agrees_with_onnxruntime_running_a_sample():
    cases = _sample(conformance.node_testcases())
    result = conformance.measure_confirmed_onnxruntime(cases, sample=SAMPLE)
    assert result.total == SAMPLE
    _assert_agrees(result, "onnxruntime")
    assert result.matrix.get("fails/fails", 0) >= 2 and result.matrix.get("runs/runs", 0) > 20
    assert result.confirmations.get("loaded and ran once on generated inputs", 0) > 20


def test_confirmed_check_agrees_with_openvino_running_a_sample():
    pytest.importorskip("openvino")
    import conformance_openvino as bench

    cases = _sample(bench.all_cases(), seed=1)
    result = bench.measure_confirmed_agreement(cases, sample=SAMPLE)
    assert result.total == SAMPLE
    _assert_agrees(result, "openvino")
    assert result.matrix.get("fails/fails", 0) >= 2 and result.matrix.get("runs/runs", 0) > 20
    assert result.confirmations.get("loaded and ran once on generated inputs", 0) > 20
