"""ONNX backend node conformance cases as a yardstick.

``python benchmarks/conformance.py check`` compares ``check --target onnxruntime`` (static,
no confirmation) with really creating an onnxruntime session, over every node case that
ships inside the ``onnx`` package, and prints the confusion matrix and the disagreements.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass


@dataclass
class Agreement:
    total: int
    matrix: dict[str, int]  # "predicted_runs/actual_runs" -> count
    disagreements: list[dict]
    seconds: float

    @property
    def rate(self) -> float:
        agree = self.matrix.get("runs/runs", 0) + self.matrix.get("fails/fails", 0)
        return agree / self.total if self.total else 0.0


def node_cases():
    """(name, ModelProto) for every backend node case, sorted by name."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        cases = collect_testcases()
    return sorted(((c.name, c.model) for c in cases if c.model is not None), key=lambda x: x[0])


def _session_error(model_bytes: bytes) -> str | None:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001
        return (str(e).strip().splitlines() or [type(e).__name__])[0]
    return None


def _worker(conn) -> None:
    while True:
        data = conn.recv()
        if data is None:
            return
        conn.send(_session_error(data))


class SessionProbe:
    """Creates onnxruntime sessions in a child process, so a crash is a verdict, not the end."""

    def __init__(self) -> None:
        import multiprocessing

        self._ctx = multiprocessing.get_context("spawn")
        self._proc = None

    def _start(self) -> None:
        parent, child = self._ctx.Pipe()
        self._proc = self._ctx.Process(target=_worker, args=(child,), daemon=True)
        self._proc.start()
        self._conn = parent

    def error(self, model) -> str | None:
        if self._proc is None or not self._proc.is_alive():
            self._start()
        self._conn.send(model.SerializeToString())
        try:
            return self._conn.recv()
        except EOFError:
            self._proc.join()
            code = self._proc.exitcode
            self._proc = None
            return f"onnxruntime crashed (exit code {code})"

    def close(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            self._conn.send(None)
            self._proc.join(timeout=10)


def measure_onnxruntime_agreement(cases=None) -> Agreement:
    from rewriter.detect import find_unsupported
    from rewriter.manager import load_plugins
    from rewriter.api import resolve_targets

    plugins = load_plugins(autoload=False)
    (target,) = resolve_targets(plugins, ["onnxruntime"])
    cases = cases if cases is not None else node_cases()
    matrix: Counter = Counter()
    disagreements = []
    probe = SessionProbe()
    start = time.perf_counter()
    for name, model in cases:
        findings = find_unsupported(model, target)
        predicted = "fails" if findings else "runs"
        error = probe.error(model)
        actual = "fails" if error else "runs"
        matrix[f"{predicted}/{actual}"] += 1
        if predicted != actual:
            disagreements.append(
                {
                    "case": name,
                    "predicted": predicted,
                    "actual": actual,
                    "finding": findings[0].detail if findings else None,
                    "onnxruntime": error,
                }
            )
    probe.close()
    return Agreement(len(cases), dict(matrix), disagreements, time.perf_counter() - start)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("what", choices=["check"])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = measure_onnxruntime_agreement()
    if args.json:
        print(json.dumps(result.__dict__ | {"rate": result.rate}, indent=2))
        return 0
    print(f"cases: {result.total}   agreement: {result.rate:.2%}   ({result.seconds:.1f}s)")
    print("confusion matrix (rows: check predicts; columns: onnxruntime session):")
    print(f"{'':>16} {'runs':>8} {'fails':>8}")
    for p in ("runs", "fails"):
        print(f"{'predicts ' + p:>16} {result.matrix.get(p + '/runs', 0):>8} "
              f"{result.matrix.get(p + '/fails', 0):>8}")
    for d in result.disagreements:
        print(f"- {d['case']}: predicted {d['predicted']}, actual {d['actual']}")
        print(f"    check: {d['finding']}")
        print(f"    onnxruntime: {d['onnxruntime']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
