"""Down-conversion over the ONNX backend node suite.

For every node case that ships inside the ``onnx`` package and imports ai.onnx above opset
N, run the real engine (``rewrite(model, ["opset:N"])``) and count the cases that

1. convert (no ``UnfixableError``),
2. pass ``onnx.checker.check_model(full_check=True)``,
3. load and run on onnxruntime (CPU),
4. match every expected output of the case within its rtol/atol
   (``np.testing.assert_allclose`` semantics, NaNs equal; sequences element by element).

The original model is run too ("baseline"), so a case whose original does not run or match
on onnxruntime either is told apart from one the conversion broke. Work runs in child
processes (two by default), so a crash in onnx or onnxruntime is a verdict, not the end.

    python benchmarks/downconvert.py                 # opset 13 and 17
    python benchmarks/downconvert.py --opset 13 --json out.json --show 20
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field

STAGES = ("converted", "checker", "runs", "matches")
CASE_TIMEOUT_S = 120.0


def model_opset(model) -> int | None:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return entry.version
    return None


def node_cases(above: int | None = None):
    """Backend node cases (name order) whose ai.onnx import is above ``above``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        cases = collect_testcases()
    out = [c for c in cases if c.model is not None]
    if above is not None:
        out = [c for c in out if (model_opset(c.model) or 0) > above]
    return sorted(out, key=lambda c: c.name)


def _plain(value):
    """A data-set value as onnxruntime takes and returns it (numpy arrays, lists)."""
    import numpy as np
    from onnx import TensorProto, numpy_helper

    if isinstance(value, TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if value is None:
        return None
    return np.asarray(value)


def payload(case) -> tuple:
    """What a worker needs for one case (picklable)."""
    data = [([_plain(x) for x in inputs], [_plain(y) for y in outputs])
            for inputs, outputs in case.data_sets]
    return (case.name, case.model.SerializeToString(), data, case.rtol, case.atol)


# -- in the worker -----------------------------------------------------------------------

@functools.cache
def _plugins():
    """The built-in plugins, loaded once per worker process."""
    from rewriter.manager import load_plugins

    return load_plugins(autoload=False)


def _line(e: BaseException) -> str:
    text = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return text[:300]


def _compare(expected, actual, rtol: float, atol: float) -> str | None:
    import numpy as np

    if expected is None or actual is None:
        return None if expected is None and actual is None else "optional presence differs"
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return "sequence length differs"
        for e, a in zip(expected, actual):
            problem = _compare(e, a, rtol, atol)
            if problem:
                return problem
        return None
    expected, actual = np.asarray(expected), np.asarray(actual)
    if expected.dtype.name == "bfloat16" or actual.dtype.name == "bfloat16":
        expected, actual = expected.astype(np.float32), actual.astype(np.float32)
        rtol = max(rtol, 2**-6)  # as onnx's runner: two bfloat16 ulps
    if expected.shape != actual.shape:
        return f"shape {actual.shape} != expected {expected.shape}"
    if expected.dtype.kind in "OUS" or actual.dtype.kind in "OUS":
        return None if np.array_equal(expected.astype(str), actual.astype(str)) else \
            "strings differ"
    if expected.dtype != actual.dtype and not (
            expected.dtype.kind == actual.dtype.kind == "f"):
        if not (expected.dtype.kind in "iub" and actual.dtype.kind in "iub"):
            return f"dtype {actual.dtype} != expected {expected.dtype}"
    try:
        np.testing.assert_allclose(actual.astype(np.float64) if actual.dtype.kind == "f" else
                                   actual, expected, rtol=rtol, atol=atol, equal_nan=True)
    except AssertionError:
        return "values differ"
    except TypeError as e:
        return _line(e)
    return None


def _feeds(model, inputs) -> dict:
    names = [i.name for i in model.graph.input]
    inits = {t.name for t in model.graph.initializer}
    names = [n for n in names if n not in inits]
    return {n: v for n, v in zip(names, inputs)}


def _run_on_ort(model, data, rtol, atol) -> tuple[str, str | None]:
    """("runs"|"matches"|"session"|"run", message)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        session = ort.InferenceSession(model.SerializeToString(), so,
                                       providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001
        return "session", _line(e)
    from rewriter_plugins.onnxruntime_feeds import from_ort_output, run_once

    declared = [o.type for o in session.get_outputs()]
    mismatch = None
    for inputs, outputs in data:
        try:  # bfloat16/float8/4-bit feeds as OrtValues, outputs read from bits
            feeds = _feeds(model, inputs)
            got = run_once(session, feeds)
            if got is None:
                return "run", "an output is neither a tensor nor readable from its bits"
            got = [from_ort_output(v, t) for v, t in zip(got, declared)]
        except Exception as e:  # noqa: BLE001
            return "run", _line(e)
        for k, (expected, actual) in enumerate(zip(outputs, got)):
            problem = _compare(expected, actual, rtol, atol)
            if problem and mismatch is None:
                mismatch = f"output {k}: {problem}"
    return ("runs", mismatch) if mismatch else ("matches", None)


def evaluate(item: tuple, opset: int) -> dict:
    """Convert one case to ``opset`` and measure every stage."""
    import onnx

    from rewriter.api import rewrite
    from rewriter.errors import UnfixableError

    name, model_bytes, data, rtol, atol = item
    model = onnx.ModelProto.FromString(model_bytes)
    result: dict = {"case": name, "opset": model_opset(model)}
    base, _ = _run_on_ort(model, data, rtol, atol)
    result["baseline"] = base
    try:
        # numerics are checked below, per case; a result with findings left comes back too
        converted = rewrite(model, [f"opset:{opset}"], plugins=_plugins(), confirm=False,
                            verify=False, keep_failed=True).model
    except UnfixableError as e:
        groups = getattr(e, "groups", None) or []
        result["stage"] = "unfixable"
        result["why"] = [f"{op}: {reason or detail}" for _t, op, detail, reason, _n in groups] \
            or [_line(e)]
        return result
    except Exception as e:  # noqa: BLE001 - an engine bug is a verdict too
        result["stage"] = "error"
        result["why"] = [f"{type(e).__name__}: {_line(e)}"]
        return result
    try:
        onnx.checker.check_model(converted, full_check=True)
    except Exception as e:  # noqa: BLE001
        result["stage"] = "converted"
        result["why"] = [f"checker: {_line(e)}"]
        return result
    verdict, message = _run_on_ort(converted, data, rtol, atol)
    result["stage"] = {"session": "checker", "run": "checker"}.get(verdict, verdict)
    if message:
        result["why"] = [f"onnxruntime {verdict}: {message}" if verdict != "runs"
                         else f"mismatch: {message}"]
    return result


def _worker(conn) -> None:
    warnings.simplefilter("ignore")
    while True:
        job = conn.recv()
        if job is None:
            return
        item, opset = job
        try:
            conn.send(evaluate(item, opset))
        except Exception as e:  # noqa: BLE001
            conn.send({"case": item[0], "stage": "error",
                       "why": [f"{type(e).__name__}: {_line(e)}"]})


# -- the parent --------------------------------------------------------------------------


class _Pool:
    """Workers in child processes; one that crashes or hangs is replaced."""

    def __init__(self, size: int) -> None:
        import multiprocessing

        self._ctx = multiprocessing.get_context("spawn")
        self.size = size
        self._procs: list = [None] * size
        self._conns: list = [None] * size

    def _start(self, k: int) -> None:
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=_worker, args=(child,), daemon=True)
        proc.start()
        self._procs[k], self._conns[k] = proc, parent

    def map(self, items: list, opset: int, progress=None) -> list[dict]:
        from multiprocessing.connection import wait

        results: list[dict | None] = [None] * len(items)
        pending = list(range(len(items)))[::-1]
        busy: dict[int, tuple[int, float]] = {}  # worker -> (item index, start time)
        for k in range(self.size):
            if self._procs[k] is None or not self._procs[k].is_alive():
                self._start(k)
        while pending or busy:
            for k in range(self.size):
                if k not in busy and pending:
                    i = pending.pop()
                    self._conns[k].send((items[i], opset))
                    busy[k] = (i, time.monotonic())
            ready = wait([self._conns[k] for k in busy], timeout=1.0)
            for k in list(busy):
                i, started = busy[k]
                conn = self._conns[k]
                if conn in ready:
                    try:
                        results[i] = conn.recv()
                    except EOFError:
                        self._procs[k].join()
                        results[i] = {"case": items[i][0], "stage": "error",
                                      "why": [f"crashed (exit code {self._procs[k].exitcode})"]}
                        self._start(k)
                elif time.monotonic() - started > CASE_TIMEOUT_S:
                    self._procs[k].kill()
                    self._procs[k].join()
                    results[i] = {"case": items[i][0], "stage": "error",
                                  "why": [f"took longer than {CASE_TIMEOUT_S:.0f}s"]}
                    self._start(k)
                else:
                    continue
                del busy[k]
                if progress:
                    progress(results[i])
        return results  # type: ignore[return-value]

    def close(self) -> None:
        for k, proc in enumerate(self._procs):
            if proc is not None and proc.is_alive():
                self._conns[k].send(None)
                proc.join(5)
                if proc.is_alive():
                    proc.kill()


@dataclass
class Summary:
    opset: int
    total: int
    counts: dict[str, int]  # stage -> cases that reached it
    baseline_matches: int  # originals that match on onnxruntime
    both: int  # cases whose original and converted model both match
    failures: Counter = field(default_factory=Counter)  # (stage failed, reason) -> cases
    results: list[dict] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return {
            "opset": self.opset, "total": self.total, "counts": self.counts,
            "baseline_matches": self.baseline_matches, "both_match": self.both,
            "seconds": round(self.seconds, 1),
            "failures": [{"failed": s, "why": w, "cases": n}
                         for (s, w), n in self.failures.most_common()],
            "results": self.results,
        }


_NEXT = {"unfixable": "converted", "error": "converted", "converted": "checker",
         "checker": "runs", "runs": "matches"}


def summarise(opset: int, results: list[dict], seconds: float = 0.0) -> Summary:
    reached = {s: 0 for s in STAGES}
    failures: Counter = Counter()
    order = {"unfixable": -1, "error": -1, **{s: i for i, s in enumerate(STAGES)}}
    for r in results:
        level = order.get(r["stage"], -1)
        for i, s in enumerate(STAGES):
            if level >= i:
                reached[s] += 1
        if r["stage"] != "matches":
            for why in dict.fromkeys(r.get("why") or ["?"]):
                failures[(_NEXT.get(r["stage"], r["stage"]), _generalise(why))] += 1
    baseline = sum(1 for r in results if r.get("baseline") == "matches")
    both = sum(1 for r in results if r.get("baseline") == "matches" and r["stage"] == "matches")
    return Summary(opset, len(results), reached, baseline, both, failures, results, seconds)


def _generalise(why: str) -> str:
    """Group reasons that differ only in value names or numbers."""
    import re

    why = re.sub(r"'[^']*'", "'…'", why)
    why = re.sub(r"\b\d+(\.\d+)?(e-?\d+)?\b", "N", why)
    return why[:200]


def measure(opset: int, *, workers: int = 2, names: list[str] | None = None,
            progress=None) -> Summary:
    cases = node_cases(above=opset)
    if names is not None:
        wanted = set(names)
        cases = [c for c in cases if c.name in wanted]
    items = [payload(c) for c in cases]
    start = time.perf_counter()
    pool = _Pool(workers)
    try:
        results = pool.map(items, opset, progress)
    finally:
        pool.close()
    return summarise(opset, results, time.perf_counter() - start)


def report(summary: Summary, show: int = 25) -> str:
    c = summary.counts
    lines = [
        f"opset:{summary.opset}: {summary.total} node cases import ai.onnx > {summary.opset}",
        f"  converted {c['converted']}  checker ok {c['checker']}  runs on onnxruntime "
        f"{c['runs']}  matches expected {c['matches']}",
        f"  (originals matching on onnxruntime: {summary.baseline_matches}; both original and "
        f"converted match: {summary.both}; {summary.seconds:.0f}s)",
        "  main failures (stage that failed: reason — cases):",
    ]
    for (stage, why), n in summary.failures.most_common(show):
        lines.append(f"    {n:4d}  {stage}: {why}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--opset", type=int, action="append",
                        help="target opset (repeatable; default 13 and 17)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--case", action="append", help="only these cases (repeatable)")
    parser.add_argument("--json", help="write every result to this file")
    parser.add_argument("--show", type=int, default=25, help="failure groups to print")
    args = parser.parse_args(argv)
    summaries = []
    for opset in args.opset or [13, 17]:
        summary = measure(opset, workers=args.workers, names=args.case)
        summaries.append(summary)
        print(report(summary, args.show), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([s.as_dict() for s in summaries], f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
