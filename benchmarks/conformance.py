"""ONNX backend node conformance cases as a yardstick.

``python benchmarks/conformance.py check`` compares ``check --target onnxruntime`` (static,
no confirmation) with really creating an onnxruntime session, over every node case that
ships inside the ``onnx`` package, and prints the confusion matrix and the disagreements.

``python benchmarks/conformance.py confirm`` compares ``check --target onnxruntime`` as users
get it (static check, then a session and one run on generated inputs in a child process)
with a session run on each case's own inputs, on every case onnxruntime refuses (at load or
run time) and a seeded sample of the others (``--sample 300``, ``--seed 0``).

``python benchmarks/conformance.py rescue`` measures ``rewrite --target onnxruntime``: every
case onnxruntime refuses for lack of a kernel or schema is rewritten, and counted as rescued
when the result runs on onnxruntime and matches the case's expected outputs within its
tolerances on every data set; every case that already runs must come back unchanged (no
remedy applied, the same nodes, the same outputs). Failures are grouped by reason. Every
model the rewrite produces is also compared (``rewriter.compare``) with the original run on
the ONNX reference evaluator, on the case's own inputs and on generated ones (the check
``rewrite`` runs by default).
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

RUN_TIMEOUT_S = 120


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


def _run(model_bytes: bytes, feeds: list[dict], outputs_optional: bool = False) -> dict:
    """Create a session and run it on every feed: {"session": error} if onnxruntime refuses
    the model, {"run": error, "index": i} if a run fails, else {"outputs": [per feed]}.
    ``outputs_optional``: a run whose outputs numpy has no type for (float8...) ran (its
    outputs None); else that is a failed run."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        model = _kernel_model(model_bytes)
        if model is not None:  # rewritten to Python/native kernels: register them first
            from rewriter.comparison.runtime import session as kernel_session

            session = kernel_session(model, plugins=_worker_plugins(), sess_options=so)
        else:
            session = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001
        return {"session": (str(e).strip().splitlines() or [type(e).__name__])[0]}
    from rewriter_plugins.onnxruntime_feeds import from_ort_output, run_once

    declared = [o.type for o in session.get_outputs()]
    results = []
    for i, feed in enumerate(feeds):
        try:
            outputs = run_once(session, feed)  # bfloat16/float8/4-bit read from their bits
        except Exception as e:  # noqa: BLE001
            return {"run": (str(e).strip().splitlines() or [type(e).__name__])[0], "index": i}
        if outputs is None and not outputs_optional:
            return {"run": "an output is neither a tensor nor readable from its bits",
                    "index": i}
        if outputs is not None:
            outputs = [from_ort_output(v, t) for v, t in zip(outputs, declared)]
        results.append(outputs)
    return {"outputs": results}


def _kernel_model(model_bytes: bytes):
    """The model, if it needs kernels registered (the rewrite retargeted nodes to them)."""
    from onnx import ModelProto

    from rewriter.plan.kernels import read_needs

    model = ModelProto.FromString(model_bytes)
    return model if read_needs(model) else None


@functools.cache
def _worker_plugins():
    """The built-in plugins, loaded once per worker process."""
    from rewriter.manager import load_plugins

    return load_plugins(autoload=False)


def _worker(conn) -> None:
    while True:
        data = conn.recv()
        if data is None:
            return
        if isinstance(data, tuple):  # (model bytes, feeds[, outputs_optional]): run
            conn.send(_run(*data))
        else:
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

    def run(self, model, feeds: list[dict], timeout: float = RUN_TIMEOUT_S,
            outputs_optional: bool = False) -> dict:
        """Create a session for ``model`` and run it on each feed (see :func:`_run`); a crash
        or a hang is reported as {"crash": message}."""
        if self._proc is None or not self._proc.is_alive():
            self._start()
        self._conn.send((model.SerializeToString(), feeds, outputs_optional))
        try:
            if self._conn.poll(timeout):
                return self._conn.recv()
        except EOFError:
            pass
        else:
            self._proc.kill()
            self._proc.join()
            self._proc = None
            return {"crash": f"onnxruntime took longer than {timeout:.0f}s"}
        self._proc.join()
        code = self._proc.exitcode
        self._proc = None
        return {"crash": f"onnxruntime crashed (exit code {code})"}

    def close(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            self._conn.send(None)
            self._proc.join(timeout=10)


def measure_onnxruntime_agreement(cases=None) -> Agreement:
    from rewriter.api import resolve_targets
    from rewriter.detect.walker import find_unsupported
    from rewriter.manager import load_plugins

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


@dataclass
class Confirmed:
    """``check --target T`` with its confirmation against the runtime's own run."""

    total: int
    refused: int  # cases the runtime refuses (all of them are measured)
    sampled: int  # cases it runs, a seeded sample
    matrix: dict[str, int]  # "predicted/actual" against "compiles and runs on its inputs"
    confirmations: dict[str, int]  # how check confirmed its "runs" verdicts
    disagreements: list[dict]
    unproven: dict[str, str]  # case -> why its run on generated inputs proves nothing
    seconds: float

    @property
    def rate(self) -> float:
        agree = self.matrix.get("runs/runs", 0) + self.matrix.get("fails/fails", 0)
        return agree / self.total if self.total else 0.0


def confirmed_agreement(cases, target: str, actual: dict[str, tuple[bool, str | None]],
                        plugins, *, sample: int = 300, seed: int = 0, progress=None,
                        start: float | None = None) -> Confirmed:
    """``check --target TARGET`` as users get it (the static check, then the target's
    confirmation: load and run once on generated inputs, in a child process) against what
    the runtime did with each case's own inputs (``actual``: name -> (ran, why not)), on
    every case it refuses and ``sample`` (seeded) of those it runs."""
    import random

    from rewriter.api import check

    start = time.perf_counter() if start is None else start
    refused = [c for c in cases if not actual[c.name][0]]
    running = sorted((c for c in cases if actual[c.name][0]), key=lambda c: c.name)
    chosen = random.Random(seed).sample(running, min(sample, len(running)))
    matrix: Counter = Counter()
    how: Counter = Counter()
    disagreements, unproven = [], {}
    for case in sorted(refused + chosen, key=lambda c: c.name):
        if progress:
            progress(case.name)
        (result,) = check(case.model, [target], plugins=plugins, confirm=True).results
        # a computes-differently finding says the runtime runs it, with other numbers than
        # the oracle's (a verdict about numbers: wrong_numbers.py measures those)
        refusals = [f for f in result.findings if f.reason != "computes-differently"]
        predicted = "fails" if refusals else "runs"
        ran = "runs" if actual[case.name][0] else "fails"
        matrix[f"{predicted}/{ran}"] += 1
        if not refusals:
            how[_confirmation_kind(result.confirmation)] += 1
            if not result.confirmation.startswith("loaded and ran"):
                unproven[case.name] = result.confirmation
        if predicted != ran:
            f = refusals[0] if refusals else None
            disagreements.append({
                "case": case.name, "predicted": predicted, "actual": ran,
                "finding": f"{f.op_label}: {f.reason}: {f.detail}" if f else None,
                "confirmation": result.confirmation,
                "runtime": actual[case.name][1],
            })
    return Confirmed(len(refused) + len(chosen), len(refused), len(chosen), dict(matrix),
                     dict(how), disagreements, unproven, time.perf_counter() - start)


def _confirmation_kind(text: str) -> str:
    if "ran on another" in text:
        return "loaded and ran on a second input set (the first failed on its values)"
    if text.startswith("loaded and ran"):
        return "loaded and ran once on generated inputs"
    if "run on generated inputs failed" in text:
        return "loaded; the run on generated inputs failed (not a refusal)"
    if "not run" in text:
        return "loaded; not run (inputs cannot be generated)"
    return f"loaded; {_short(text.removeprefix('loaded').strip(' ();'), 80) or 'not run'}"


def print_confirmed(result: Confirmed, target: str, actual: str) -> None:
    print(f"cases: {result.total} = every case {target} refuses ({result.refused}) + "
          f"{result.sampled} of those it runs (seeded sample)   ({result.seconds:.1f}s)")
    print(f"\ncheck --target {target} (with confirmation) vs {actual} on the case's inputs: "
          f"agreement {result.rate:.2%}")
    print(f"{'':>16} {'runs':>8} {'fails':>8}")
    for p in ("runs", "fails"):
        print(f"{'predicts ' + p:>16} {result.matrix.get(p + '/runs', 0):>8} "
              f"{result.matrix.get(p + '/fails', 0):>8}")
    print("\nhow check confirmed its 'runs' verdicts:")
    for kind, n in sorted(result.confirmations.items(), key=lambda kv: -kv[1]):
        print(f"  {n:>5}  {kind}")
    for name, why in sorted(result.unproven.items()):
        print(f"        {name}: {_short(why.split(': ', 1)[-1], 110)}")
    for d in result.disagreements:
        print(f"- {d['case']}: predicted {d['predicted']}, actual {d['actual']}")
        print(f"    check: {d['finding'] or d['confirmation']}")
        print(f"    runtime: {d['runtime']}")


def measure_confirmed_onnxruntime(cases=None, *, sample: int = 300, seed: int = 0,
                                  progress=None) -> Confirmed:
    """``check --target onnxruntime`` (static check, then a session and one run on
    generated inputs in a child process) against a session run on each case's own inputs,
    on every case onnxruntime refuses (at load or run time) and ``sample`` of the others.
    Inputs of types numpy cannot give onnxruntime's Python API (bfloat16, float8, 4- and
    2-bit) are fed as OrtValues of their bits."""
    from rewriter.manager import load_plugins

    plugins = load_plugins(autoload=False)
    cases = list(cases if cases is not None else node_testcases())
    probe = SessionProbe()
    start = time.perf_counter()
    actual = {}
    try:
        for case in cases:
            feeds = [{n: _as_array(v) for n, v in f.items()}
                     for f in _feeds(case.model, case.data_sets)]
            outcome = probe.run(case.model, feeds, outputs_optional=True)
            problem = outcome.get("session") or outcome.get("run") or outcome.get("crash")
            actual[case.name] = (problem is None, problem)
    finally:
        probe.close()
    return confirmed_agreement(cases, "onnxruntime", actual, plugins, sample=sample,
                               seed=seed, progress=progress, start=start)


def _as_array(value):
    """A case's value as numpy (bfloat16/float8 cases store TensorProtos: ml_dtypes
    arrays)."""
    from onnx import TensorProto, numpy_helper

    if isinstance(value, TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list):
        return [_as_array(v) for v in value]
    return value



# -- rescue: rewrite what onnxruntime refuses, leave alone what it runs ---------------------

# onnxruntime's words for "I have no kernel or no schema for this node".
_MISSING_KERNEL_OR_SCHEMA = (
    "Could not find an implementation",
    "Failed to find kernel",
    "is not a registered function/op",
    "No Op registered",
    "No opset import for domain",
)


@dataclass
class Rescue:
    """What ``rewrite --target onnxruntime`` does over the node suite."""

    total: int = 0
    refused: list[str] = field(default_factory=list)  # no kernel/schema: rewrite attempted
    refused_other: dict[str, list[str]] = field(default_factory=dict)  # not attempted
    rescued: list[str] = field(default_factory=list)
    # every rewritten refused case -> compare against the reference evaluator: the verdict on
    # the case's inputs and on generated ones ("equal", "mismatch: ...", "error: ...")
    compared: dict[str, dict[str, str]] = field(default_factory=dict)
    failed: dict[str, list[str]] = field(default_factory=dict)  # reason -> cases
    running: list[str] = field(default_factory=list)  # onnxruntime runs the original
    changed: dict[str, list[str]] = field(default_factory=dict)  # reason -> running cases
    seconds: float = 0.0

    @property
    def unchanged(self) -> int:
        return len(self.running) - sum(len(v) for v in self.changed.values())

    def as_dict(self) -> dict:
        return {
            "total": self.total, "refused": len(self.refused), "rescued": len(self.rescued),
            "still_failing": sum(len(v) for v in self.failed.values()),
            "running": len(self.running), "running_unchanged": self.unchanged,
            "refused_other": self.refused_other, "rescued_cases": self.rescued,
            "failed": self.failed, "changed": self.changed, "seconds": self.seconds,
            "compared": self.compared,
        }


def node_testcases():
    """Every backend node case (onnx's TestCase: model, data_sets, rtol, atol), by name."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        cases = collect_testcases()
    return sorted((c for c in cases if c.model is not None), key=lambda c: c.name)


def _plain(value):
    """A data-set value as numpy holds it: a TensorProto (the cases of float8, 4- and 2-bit
    types) as its ml_dtypes array, which onnxruntime is fed as an OrtValue of its bits; a
    numpy scalar (np.float32(2)) as the 0-d array its .pb file holds."""
    import numpy as np
    from onnx import TensorProto, numpy_helper

    if isinstance(value, TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, np.generic):
        return np.asarray(value)
    return value


def _feeds(model, data_sets) -> list[dict]:
    initializers = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in initializers]
    return [{n: _plain(x) for n, x in zip(names, inputs)} for inputs, _ in data_sets]


def _short(message: str, limit: int = 160) -> str:
    """One line, without onnxruntime's prefix, source locations and node names, so that
    the same failure on different cases groups together."""
    import re

    message = (message.strip().splitlines() or [""])[0]
    message = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", message)
    message = re.sub(r"/onnxruntime_src/\S+:\d+ [^\]]*?\) ", "", message)
    message = re.sub(r"(node with name|node:|Node \(|node) '[^']*'", r"\1 '…'", message)
    message = re.sub(r"Node \([^)]*\)", "Node (…)", message)
    return message if len(message) <= limit else message[: limit - 1] + "…"


def _as_comparable(value):
    """A numpy array numpy can compare (ml_dtypes and onnxruntime's raw 8/16-bit floats
    widened to float32)."""
    import numpy as np

    array = np.asarray(value)
    if array.dtype.name in ("int4", "uint4", "int2", "uint2"):  # (their kind is "V" too)
        return array.astype(np.int8 if array.dtype.name.startswith("int") else np.uint8)
    if array.dtype.kind == "V" or array.dtype.name in (
        "bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
        "float8_e8m0fnu", "float4_e2m1fn",
    ):
        return array.astype(np.float32)
    return array


def compare_outputs(expected, actual, rtol: float, atol: float, where: str = "") -> str | None:
    """None if ``actual`` matches ``expected`` the way onnx's backend runner checks them
    (sequences and maps element by element), else what differs."""
    import numpy as np

    if expected is None or actual is None:
        return None if expected is None and actual is None else (
            f"output{where}: expected {type(expected).__name__}, got {type(actual).__name__}")
    if isinstance(expected, dict) or isinstance(actual, dict):
        if not (isinstance(expected, dict) and isinstance(actual, dict)) or (
                sorted(expected) != sorted(actual)):
            return f"output{where}: the maps differ in keys"
        for k in expected:
            problem = compare_outputs(expected[k], actual[k], rtol, atol, f"{where}[{k!r}]")
            if problem:
                return problem
        return None
    if isinstance(expected, (list, tuple)) or isinstance(actual, (list, tuple)):
        if not isinstance(expected, (list, tuple)) or not isinstance(actual, (list, tuple)):
            return (f"output{where}: expected {type(expected).__name__}, "
                    f"got {type(actual).__name__}")
        if len(expected) != len(actual):
            return f"output{where}: {len(actual)} items, expected {len(expected)}"
        for i, (e, a) in enumerate(zip(expected, actual)):
            problem = compare_outputs(e, a, rtol, atol, f"{where}[{i}]")
            if problem:
                return problem
        return None
    expected = _plain(expected)
    raw_expected = np.asarray(expected)
    e, a = _as_comparable(expected), _as_comparable(actual)
    if e.shape != a.shape:
        return f"output{where}: shape {a.shape}, expected {e.shape}"
    if e.dtype == object or a.dtype == object:
        if not np.array_equal(e.astype(object), a.astype(object)):
            return f"output{where}: strings differ"
        return None
    if e.dtype != a.dtype and not (e.dtype.kind == a.dtype.kind == "f"
                                   and raw_expected.dtype != e.dtype):
        return f"output{where}: dtype {a.dtype}, expected {e.dtype}"
    if raw_expected.dtype.name == "bfloat16":
        rtol = max(rtol, 2**-6)  # as onnx's runner: two bfloat16 ulps
    try:
        np.testing.assert_allclose(a, e, rtol=rtol, atol=atol)
    except AssertionError as err:
        lines = [x.strip() for x in str(err).splitlines() if "Max" in x or "Mismatched" in x]
        return f"output{where}: values differ ({'; '.join(lines) or 'allclose failed'})"
    return None


def _same_nodes(a, b) -> bool:
    from rewriter.graph.walk import iter_scopes

    def nodes(model):
        return [n.SerializeToString(deterministic=True)
                for scope in iter_scopes(model) for n in scope.nodes]

    return nodes(a) == nodes(b) and [f.SerializeToString(deterministic=True)
                                     for f in a.functions] == [
        f.SerializeToString(deterministic=True) for f in b.functions]


def rewrite_case(model, plugins, target: str = "onnxruntime", verify: bool = True):
    """(rewritten model, report) or (None, reason) when rewrite raises. The model comes back
    whatever the verdict: the benchmark judges it on the case's own expected outputs."""
    from rewriter.api import rewrite
    from rewriter.errors import UnfixableError

    try:
        result = rewrite(model, [target], plugins=plugins, confirm=False, verify=verify,
                         allow_unverified=True, keep_failed=True)
    except UnfixableError as e:
        parts = sorted({f"{op}: {_short(detail, 120)} — {_short(why, 200)}"
                        for _t, op, detail, why, _n in e.groups})
        return None, "unfixable: " + "; ".join(parts)
    except Exception as e:  # noqa: BLE001 - a crash of the engine is a result here
        return None, f"rewrite raised {type(e).__name__}: {_short(str(e))}"
    return result.model, result.report


def verification_problem(report) -> str | None:
    if report.remaining:
        parts = sorted({f"{f.op_label} ({_short(f.detail, 120)})" for f in report.remaining})
        return "still unsupported after rewriting: " + "; ".join(parts)
    for name, verdict in report.verification.items():
        if name == "compare":  # the rewrite's own comparison: a mismatch fails the case; an
            if report.verdict == "mismatch":  # unverified one leaves it to the case's data
                return f"verification failed: compare: {_short(verdict)}"
            continue
        if not (verdict == "ok" or verdict.startswith(("skipped", "pre-existing"))):
            return f"verification failed: {name}: {_short(verdict)}"
    return None


def _outcome_problem(outcome: dict, data_sets, rtol, atol, what: str) -> str | None:
    if "session" in outcome:
        return f"onnxruntime refuses the {what}: {_short(outcome['session'])}"
    if "crash" in outcome:
        return f"{what}: {outcome['crash']}"
    if "run" in outcome:
        return f"onnxruntime fails running the {what}: {_short(outcome['run'])}"
    for i, ((_, expected), actual) in enumerate(zip(data_sets, outcome["outputs"])):
        if len(expected) != len(actual):
            return f"mismatch: {len(actual)} outputs, expected {len(expected)}"
        for j, (e, a) in enumerate(zip(expected, actual)):
            problem = compare_outputs(e, a, rtol, atol, f" {j}")
            if problem:
                where = f" (data set {i})" if len(data_sets) > 1 else ""
                return f"mismatch{where}: {_short(problem, 200)}"
    return None


def _verdict(result) -> str:
    from rewriter.comparison.compare import EQUAL, MISMATCH

    if result.status == EQUAL:
        return "equal"
    if result.status == MISMATCH:
        return f"mismatch: {result.summary()}"
    return f"error: {result.why_not_run()}"


def _compare_with_reference(case, model, report, plugins) -> dict[str, str]:
    """The rewritten model on onnxruntime against the original on the reference evaluator:
    on the case's own inputs, and on the generated ones ``rewrite`` compared already."""
    from rewriter.comparison.compare import compare

    on_case = compare(case.model, model, ["onnxruntime"], original_target="reference",
                      inputs=_feeds(case.model, case.data_sets), plugins=plugins)
    generated = report.comparison
    if generated is None or generated.oracle != "reference":
        generated = compare(case.model, model, ["onnxruntime"], original_target="reference",
                            plugins=plugins)
    return {"case inputs": _verdict(on_case), "generated inputs": _verdict(generated),
            "max abs": max((r.max_abs for r in (on_case, generated) if r.max_abs is not None),
                           default=None)}


def measure_rescue(cases=None, *, progress=None) -> Rescue:
    """Rewrite every case onnxruntime refuses for lack of a kernel or schema and check the
    result numerically; check that every case onnxruntime runs comes back unchanged: no
    remedy, the same nodes and functions, and the same outputs (compared by running both
    unless the rewritten model serializes to the very same bytes).

    Args:
        cases: onnx backend TestCases (default: every node case).
        progress: called with each case's name before it is handled.
    """
    from rewriter.manager import load_plugins

    plugins = load_plugins(autoload=False)
    cases = cases if cases is not None else node_testcases()
    out = Rescue(total=len(cases))
    probe = SessionProbe()
    start = time.perf_counter()

    def note(table: dict, reason: str, name: str) -> None:
        table.setdefault(reason, []).append(name)

    try:
        for case in cases:
            if progress:
                progress(case.name)
            error = probe.error(case.model)
            if error is not None:
                if not any(m in error for m in _MISSING_KERNEL_OR_SCHEMA):
                    note(out.refused_other, _short(error), case.name)
                    continue
                out.refused.append(case.name)
                model, report = rewrite_case(case.model, plugins)
                if model is None:
                    note(out.failed, report, case.name)
                    continue
                out.compared[case.name] = _compare_with_reference(case, model, report,
                                                                  plugins)
                problem = verification_problem(report)
                if problem is None and not report.applied:
                    problem = (f"nothing to rewrite: check finds no problem, but onnxruntime "
                               f"refuses: {_short(error)}")
                if problem is None:
                    outcome = probe.run(model, _feeds(model, case.data_sets))
                    problem = _outcome_problem(outcome, case.data_sets, case.rtol, case.atol,
                                               "rewritten model")
                if problem is None:
                    out.rescued.append(case.name)
                else:
                    note(out.failed, problem, case.name)
                continue
            out.running.append(case.name)
            model, report = rewrite_case(case.model, plugins)
            if model is None:
                note(out.changed, report, case.name)
                continue
            if report.applied:
                ops = sorted({op for (_k, _p, _r, op) in report.applied})
                note(out.changed, "remedies applied to a model onnxruntime runs: "
                     + ", ".join(ops), case.name)
                continue
            if not _same_nodes(model, case.model):
                note(out.changed, "nodes differ although no remedy was applied", case.name)
                continue
            if model.SerializeToString() == case.model.SerializeToString():
                continue  # the very same model: the same outputs
            feeds = _feeds(case.model, case.data_sets)
            before = probe.run(case.model, feeds)
            after = probe.run(model, feeds)
            if "outputs" not in before:
                problem = None if before == after else "the rewritten model fails differently"
            else:
                expected = [([], o) for o in before["outputs"]]
                problem = _outcome_problem(after, expected, case.rtol, case.atol,
                                           "unchanged model")
            if problem:
                note(out.changed, f"outputs changed: {problem}", case.name)
    finally:
        probe.close()
    out.seconds = time.perf_counter() - start
    return out


def print_rescue(result: Rescue) -> None:
    failing = sum(len(v) for v in result.failed.values())
    other = sum(len(v) for v in result.refused_other.values())
    print(f"cases: {result.total}   ({result.seconds:.1f}s)")
    print(f"onnxruntime refuses {len(result.refused) + other}: {len(result.refused)} for lack "
          f"of a kernel or schema, {other} for other reasons (not attempted)")
    print(f"rescued by rewrite --target onnxruntime: {len(result.rescued)} of "
          f"{len(result.refused)}; still failing: {failing}")
    for reason, names in sorted(result.failed.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        print(f"  {len(names):>4}  {reason}")
        print(f"        {', '.join(names[:6])}{' …' if len(names) > 6 else ''}")
    print(f"onnxruntime runs {len(result.running)}: unchanged by rewrite {result.unchanged}, "
          f"changed {len(result.running) - result.unchanged}")
    for reason, names in sorted(result.changed.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        print(f"  {len(names):>4}  {reason}")
        print(f"        {', '.join(names[:6])}{' …' if len(names) > 6 else ''}")
    if result.refused_other:
        print("refused for other reasons (not attempted):")
        for reason, names in sorted(result.refused_other.items(), key=lambda kv: -len(kv[1])):
            print(f"  {len(names):>4}  {reason}")
    if result.rescued:
        print("rescued: " + ", ".join(result.rescued))
    if result.compared:
        print(f"compare with the original on the reference evaluator ({len(result.compared)} "
              "rewritten models):")
        for name, verdicts in sorted(result.compared.items()):
            worst = verdicts["max abs"]
            shown = "" if worst is None else f" (max abs error {worst:.3g})"
            print(f"  {name}: case inputs {verdicts['case inputs']}; generated inputs "
                  f"{verdicts['generated inputs']}{shown}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("what", choices=["check", "confirm", "rescue"])
    parser.add_argument("--sample", type=int, default=300,
                        help="confirm: how many of the cases onnxruntime runs to measure")
    parser.add_argument("--seed", type=int, default=0, help="confirm: the sample's seed")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.what == "confirm":
        confirmed = measure_confirmed_onnxruntime(sample=args.sample, seed=args.seed)
        if args.json:
            print(json.dumps(confirmed.__dict__ | {"rate": confirmed.rate}, indent=2))
        else:
            print_confirmed(confirmed, "onnxruntime", "a session run")
        return 0
    if args.what == "rescue":
        rescue = measure_rescue()
        if args.json:
            print(json.dumps(rescue.as_dict(), indent=2))
        else:
            print_rescue(rescue)
        return 0
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
