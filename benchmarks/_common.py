"""What the conformance benchmarks of one runtime target share (``conformance_openvino.py``,
``conformance_tract.py``): running the ONNX backend node cases on the target in the
isolation worker, and the rescue measure (``rewrite --target T`` on the cases the runtime
refuses; the cases it runs left alone)."""

from __future__ import annotations

import functools
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conformance import (  # noqa: E402
    _as_array,
    _same_nodes,
    _short,
    compare_outputs,
    node_testcases,
    rewrite_case,
    verification_problem,
)

RUN_TIMEOUT_S = 120


def feeds_of(model, data_sets) -> list[dict]:
    """A case's data sets as feeds by input name (initializers are not inputs)."""
    initializers = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in initializers]
    return [dict(zip(names, (_as_array(v) for v in inputs))) for inputs, _ in data_sets]


# integer element types by ONNX name: (lowest, highest)
_INTEGER_RANGES = {"int4": (-8, 7), "uint4": (0, 15), "int2": (-2, 1), "uint2": (0, 3)}


def spec_undefined(model, feeds: dict) -> np.ndarray | None:
    """For a one-node ``Cast``/``CastLike`` from a float to an integer type, the elements of
    its output whose value the spec leaves undefined (Cast: "floating point to fixed point:
    undefined if OOR", NaN and infinities included); None for any other case. The expected
    outputs of such cases hold one implementation's choice, which no runtime is wrong to
    differ from."""
    from onnx import helper

    nodes = list(model.graph.node)
    if len(nodes) != 1 or nodes[0].op_type not in ("Cast", "CastLike") or not nodes[0].input:
        return None
    x = feeds.get(nodes[0].input[0])
    output = model.graph.output[0].type.tensor_type.elem_type if model.graph.output else 0
    name = helper.tensor_dtype_to_np_dtype(output).name if output else ""
    if x is None or np.asarray(x).dtype.kind != "f":
        return None
    if name in _INTEGER_RANGES:
        low, high = _INTEGER_RANGES[name]
    elif np.dtype(name).kind in "iu":
        info = np.iinfo(np.dtype(name))
        low, high = info.min, info.max
    else:
        return None
    values = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return ~np.isfinite(values) | (np.trunc(values) < low) | (np.trunc(values) > high)


def draws_random(model) -> bool:
    """The case draws random numbers (what the comparison treats as random: a random op, a
    Dropout in training mode, upstream of an output): its expected outputs are one draw,
    which a distribution-compared verdict cannot match."""
    from rewriter.comparison.randomness import random_outputs

    return bool(random_outputs(model))


def write_case(case, folder) -> Path:
    """The case as the ONNX repository lays a node case out: ``folder/model.onnx`` and a
    ``test_data_set_K`` folder of ``input_I.pb`` / ``output_I.pb`` per data set (what a
    user checking the model finds beside it, and what the tool reads as its test data);
    the model's path."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model_path = folder / "model.onnx"
    onnx.save(case.model, model_path)
    initializers = {t.name for t in case.model.graph.initializer}
    inputs = [i.name for i in case.model.graph.input if i.name not in initializers]
    outputs = [o.name for o in case.model.graph.output]
    for k, (ins, outs) in enumerate(case.data_sets or []):
        data = folder / f"test_data_set_{k}"
        data.mkdir(exist_ok=True)
        for kind, names, values in (("input", inputs, ins), ("output", outputs, outs)):
            for i, (name, value) in enumerate(zip(names, values)):
                value = _as_array(value)
                if isinstance(value, np.generic):
                    value = np.asarray(value)
                if not isinstance(value, np.ndarray):
                    continue  # sequences and optionals: not written (kept tensors only)
                tensor = numpy_helper.from_array(value, name)
                (data / f"{kind}_{i}.pb").write_bytes(tensor.SerializeToString())
    return model_path


def load_plugins():
    from rewriter.manager import load_plugins

    return load_plugins(autoload=False)


@functools.cache
def all_cases() -> tuple:
    """Every backend node case (collected once per process: it takes seconds)."""
    return tuple(node_testcases())


def select(only) -> list:
    cases = list(all_cases())
    if only:
        wanted = set(only)
        cases = [c for c in cases if c.name in wanted]
    return cases


@dataclass
class Actual:
    """What the runtime did with one model: ``compiles`` (it loaded it), ``runs`` (every
    data set ran), and ``problem`` (why not, or how the outputs differ from the expected
    ones; None if they match)."""

    compiles: bool
    runs: bool
    problem: str | None
    outputs: list | None = None
    rounding: bool = False  # matched only within the float type's rounding (see below)


def within_rounding(case, outputs, model) -> bool:
    """Whether ``outputs`` (per data set, by name) differ from the case's expected ones only
    within the rounding of their float type at the output's magnitude: ``|a - e| <= atol +
    rtol |e| + scale max|e|`` with the case's atol/rtol and the tool's ``scale`` for the
    dtype (:data:`rewriter.comparison.compare.DEFAULT_TOLERANCES`: float32 1e-6). onnx's
    node cases hold float32 DFTs of magnitude 540 to an ``atol`` of 1e-7, below float32's
    resolution there (onnxruntime's own DFT misses it by 3e-4). Shapes, dtypes,
    infinities, NaN and non-float outputs must match exactly."""
    from rewriter.comparison.compare import default_tolerance

    if not outputs or len(outputs) != len(case.data_sets):
        return False
    names = [o.name for o in model.graph.output]
    for (_, expected), got in zip(case.data_sets, outputs):
        if len(expected) != len(names):
            return False
        for name, e in zip(names, expected):
            e, a = np.asarray(_as_array(e)), got.get(name)
            if not isinstance(a, np.ndarray) or a.shape != e.shape or a.dtype != e.dtype \
                    or e.dtype.kind != "f":
                return False
            e64, a64 = e.astype(np.float64), a.astype(np.float64)
            finite = np.abs(e64[np.isfinite(e64)])
            bound = case.atol + case.rtol * np.abs(e64) + (
                default_tolerance(e.dtype).scale * (finite.max() if finite.size else 0.0))
            same = np.isclose(a64, e64, rtol=0, atol=0, equal_nan=True)
            close = np.isfinite(e64) & (np.abs(a64 - e64) <= bound)
            if not (same | close).all():  # an infinity or NaN expected: exactly that
                return False
    return True


class TargetRunner:
    """Runs models on one target in the isolation worker (a crash or a hang is a verdict)."""

    def __init__(self, target: str, plugins, timeout: float = RUN_TIMEOUT_S) -> None:
        from rewriter.comparison.isolation import Runner

        self.target = target
        self.plugins = plugins
        self.runner = Runner(plugins, timeout=timeout)
        self.base_dir = tempfile.mkdtemp(prefix=f"conformance-{target.replace(':', '-')}-")

    def run(self, model, feeds: list[dict]):
        from rewriter.comparison.isolation import Job

        return self.runner.run(Job.make(self.target, model, self.base_dir, feeds,
                                        plugins=self.plugins))

    def actual(self, model, case) -> Actual:
        """Load and run ``model`` on ``case``'s inputs; compare with its expected outputs."""
        result = self.run(model, feeds_of(model, case.data_sets))
        if not result.ok:
            compiles = result.kind == "error" and not result.error.startswith(
                "could not load the model")
            what = result.error if result.kind == "error" else f"{result.kind}: {result.error}"
            return Actual(compiles, False, _short(what, 240))
        names = [o.name for o in model.graph.output]
        for i, ((_, expected), got) in enumerate(zip(case.data_sets, result.outputs)):
            actual = [got.get(n) for n in names]
            if len(expected) != len(actual):
                return Actual(True, True, f"{len(actual)} outputs, expected {len(expected)}",
                              result.outputs)
            undefined = spec_undefined(model, feeds_of(model, [case.data_sets[i]])[0])
            for j, (e, a) in enumerate(zip(expected, actual)):
                e = _as_array(e)
                if j == 0 and undefined is not None and a is not None and (
                        np.shape(a) == undefined.shape == np.shape(e)):
                    e, a = np.asarray(e)[~undefined], np.asarray(a)[~undefined]
                problem = compare_outputs(e, a, case.rtol, case.atol, f" {j}")
                if problem:
                    if undefined is None and within_rounding(case, result.outputs, model):
                        return Actual(True, True, None, result.outputs, rounding=True)
                    where = f" (data set {i})" if len(case.data_sets) > 1 else ""
                    return Actual(True, True, f"mismatch{where}: {_short(problem, 200)}",
                                  result.outputs)
        return Actual(True, True, None, result.outputs)

    def close(self) -> None:
        self.runner.close()


# -- rescue: rewrite what the runtime refuses, leave alone what it runs ----------------------

UNFIXABLE = "unfixable: "  # rewrite_case's reason when some finding has no remedy


@dataclass
class Rescue:
    total: int = 0
    refused: list[str] = field(default_factory=list)  # fails to load or run
    refused_why: dict[str, list[str]] = field(default_factory=dict)
    rescued: list[str] = field(default_factory=list)
    failed: dict[str, list[str]] = field(default_factory=dict)  # reason -> refused cases
    running: list[str] = field(default_factory=list)  # runs and matches its expected outputs
    wrong: list[str] = field(default_factory=list)  # runs, outputs differ from the expected
    rewritten_running: list[str] = field(default_factory=list)  # changed, outputs still ok
    changed: dict[str, list[str]] = field(default_factory=dict)  # reason -> regressions
    # results the rewrite called verified that do not run on the target with the case's
    # expected outputs (its own inputs): false verdicts, which must stay empty
    false_verdicts: list[str] = field(default_factory=list)
    # verified as distributions (random ops): the case's expected outputs are one draw
    random_verdicts: list[str] = field(default_factory=list)
    verdicts: dict[str, int] = field(default_factory=dict)  # the rewrite's verdict -> cases
    seconds: float = 0.0

    @property
    def unchanged(self) -> int:
        return len(self.running) - len(self.rewritten_running) - sum(
            len(v) for v in self.changed.values())

    @property
    def no_remedy(self) -> list[str]:
        """Refused cases with a finding no installed plugin has a remedy for."""
        return [n for reason, names in self.failed.items() if reason.startswith(UNFIXABLE)
                for n in names]

    @property
    def with_remedy(self) -> int:
        """Refused cases whose ops all have a remedy (or that no finding explains)."""
        return len(self.refused) - len(self.no_remedy)

    def as_dict(self) -> dict:
        return {
            "total": self.total, "refused": len(self.refused), "rescued": len(self.rescued),
            "refused_with_remedy": self.with_remedy, "refused_no_remedy": len(self.no_remedy),
            "still_failing": sum(len(v) for v in self.failed.values()),
            "running": len(self.running), "running_unchanged": self.unchanged,
            "running_rewritten_still_matching": self.rewritten_running,
            "wrong_outputs": self.wrong, "rescued_cases": self.rescued,
            "failed": self.failed, "changed": self.changed, "refused_why": self.refused_why,
            "verdicts": self.verdicts, "false_verdicts": self.false_verdicts,
            "random_verdicts": self.random_verdicts,
            "seconds": self.seconds,
        }


def measure_rescue(target: str, cases=None, *, verify: bool = True, progress=None,
                   plugins=None) -> Rescue:
    """Rewrite every case ``target`` refuses and check the result on it against the case's
    expected outputs; check that the cases it runs are left alone.

    Args:
        target: the target's name (``openvino``, ``tract``).
        cases: onnx backend TestCases (default: every node case).
        verify: let ``rewrite`` run its own verification (compare against the original on
            the reference evaluator) too, as it does by default.
        progress: called with each case's name before it is handled.
    """
    plugins = plugins or load_plugins()
    cases = cases if cases is not None else all_cases()
    out = Rescue(total=len(cases))
    runner = TargetRunner(target, plugins)
    start = time.perf_counter()

    def note(table: dict, reason: str, name: str) -> None:
        table.setdefault(reason, []).append(name)

    try:
        for case in cases:
            if progress:
                progress(case.name)
            before = runner.actual(case.model, case)
            if before.runs and before.problem is not None:
                out.wrong.append(case.name)
                continue
            if not before.runs:
                out.refused.append(case.name)
                note(out.refused_why, _short(before.problem or "", 120), case.name)
                model, report = rewrite_case(case.model, plugins, target, verify)
                if model is None:
                    note(out.failed, report, case.name)
                    continue
                out.verdicts[report.verdict or "none"] = \
                    out.verdicts.get(report.verdict or "none", 0) + 1
                problem = verification_problem(report)
                if report.verdict == "verified" and runner.actual(model, case).problem:
                    (out.random_verdicts if draws_random(case.model)
                     else out.false_verdicts).append(case.name)
                if problem is None and not report.applied:
                    problem = f"nothing to rewrite: check finds no problem, but {target} " \
                              f"fails: {_short(before.problem or '', 120)}"
                if problem is None:
                    after = runner.actual(model, case)
                    problem = after.problem
                if problem is None:
                    out.rescued.append(case.name)
                else:
                    note(out.failed, problem, case.name)
                continue
            out.running.append(case.name)
            model, report = rewrite_case(case.model, plugins, target, verify)
            if model is None:
                note(out.changed, report, case.name)
                continue
            if not report.applied and _same_nodes(model, case.model):
                continue
            after = runner.actual(model, case)
            if report.verdict == "verified" and after.problem is not None:
                (out.random_verdicts if draws_random(case.model)
                 else out.false_verdicts).append(case.name)
            if after.problem is None:
                out.rewritten_running.append(case.name)
            else:
                note(out.changed, f"rewritten although it runs, and now: {after.problem}",
                     case.name)
    finally:
        runner.close()
    out.seconds = time.perf_counter() - start
    return out


def split_by_runs(target: str, cases, plugins=None) -> tuple[list, list]:
    """(the cases ``target`` refuses: fails to load or run them, the cases it runs)."""
    plugins = plugins or load_plugins()
    runner = TargetRunner(target, plugins)
    refused, running = [], []
    try:
        for case in cases:
            (running if runner.actual(case.model, case).runs else refused).append(case)
    finally:
        runner.close()
    return refused, running


def seeded(cases, size: int | None, seed: int = 0) -> list:
    """``size`` of ``cases``, drawn with ``random.Random(seed).sample`` from their sorted
    names (all of them when ``size`` is None), in their order."""
    if size is None:
        return list(cases)
    names = sorted(c.name for c in cases)
    chosen = set(random.Random(seed).sample(names, min(size, len(names))))
    return [c for c in cases if c.name in chosen]


def refused_sample(target: str, cases, size: int, seed: int = 0) -> list:
    """``size`` of the cases ``target`` refuses, seeded: a fixed sample to follow the
    rescue count on."""
    return seeded(split_by_runs(target, cases)[0], size, seed)


def print_rescue(result: Rescue, runtime: str, target: str) -> None:
    failing = sum(len(v) for v in result.failed.values())
    print(f"cases: {result.total}   ({result.seconds:.1f}s)")
    print(f"rewrite's verdicts: {result.verdicts}; false verdicts (verified, yet the result "
          f"fails the case's own inputs on {runtime}): {len(result.false_verdicts)} "
          f"{result.false_verdicts}; verified as distributions (random ops, the case's "
          f"outputs one draw): {len(result.random_verdicts)} {result.random_verdicts}")
    print(f"{runtime} refuses {len(result.refused)} (fails to load or run them); "
          f"runs {len(result.running) + len(result.wrong)}, of which {len(result.wrong)} "
          "with outputs that differ from the expected ones (not attempted)")
    for reason, names in sorted(result.refused_why.items(), key=lambda kv: -len(kv[1]))[:25]:
        print(f"  {len(names):>4}  {reason}")
    share = len(result.rescued) / result.with_remedy if result.with_remedy else 0.0
    print(f"\nrescued by rewrite --target {target}: {len(result.rescued)} of "
          f"{len(result.refused)}; of the {result.with_remedy} whose ops all have a remedy: "
          f"{share:.1%}; no remedy for some op: {len(result.no_remedy)}; still failing: "
          f"{failing}")
    for reason, names in sorted(result.failed.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        print(f"  {len(names):>4}  {reason}")
        print(f"        {', '.join(names[:6])}{' …' if len(names) > 6 else ''}")
    print(f"\n{runtime} runs {len(result.running)} correctly: unchanged by rewrite "
          f"{result.unchanged}, rewritten with outputs still matching "
          f"{len(result.rewritten_running)}, regressions "
          f"{sum(len(v) for v in result.changed.values())}")
    for name in result.rewritten_running:
        print(f"        rewritten, still matching: {name}")
    for reason, names in sorted(result.changed.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        print(f"  {len(names):>4}  {reason}")
        print(f"        {', '.join(names[:6])}{' …' if len(names) > 6 else ''}")
    if result.rescued:
        print("\nrescued: " + ", ".join(result.rescued))


# -- check: detection against the runtime asked the way its users load models ----------------

# What each runtime's users call (the yardstick of `check`): the model as a file, read by
# path, compiled or optimized, run once on the case's first data set, its outputs read.
USER_ROUTES = {
    "openvino": "Core().read_model(path) and openvino.convert_model(path), each compiled "
                "(CPU) and run once",
    "tract": "tract.onnx().load(path).into_model().into_runnable(), run once",
    "onnxruntime": "onnxruntime.InferenceSession(path), run once",
}


def _openvino_route(path: str, feeds: dict) -> str | None:
    import openvino
    from rewriter_plugins.openvino_target import (
        clean_message,
        from_openvino,
        port_names,
        to_openvino,
    )

    core = openvino.Core()
    for how, read in (("Core.read_model(path)", core.read_model),
                      ("openvino.convert_model(path)", openvino.convert_model)):
        stage = "read"
        try:
            model = read(path)
            stage = "compile"
            compiled = core.compile_model(model, "CPU")
            stage = "run"
            names = port_names(compiled.inputs, list(feeds))
            request = compiled.create_infer_request()
            request.start_async([to_openvino(feeds[n], port.get_element_type())
                                 for n, port in zip(names, compiled.inputs)])
            request.wait()
            for i, port in enumerate(compiled.outputs):
                from_openvino(request.get_output_tensor(i), port.get_element_type())
        except Exception as e:  # noqa: BLE001 - the runtime's answer
            return f"{how}: {stage}: {clean_message(str(e))}"
    return None


def _tract_route(path: str, feeds: dict) -> str | None:
    import numpy as np
    import tract
    from rewriter_plugins.tract_target import clean_message

    stage = "load"
    try:
        model = tract.onnx().load(path)
        names = [model.input_name(i) for i in range(model.input_count())]
        stage = "typing"
        typed = model.into_model()
        stage = "optimizing"
        runnable = typed.into_runnable()
        stage = "run"
        outputs = runnable.run([np.asarray(feeds[n]) for n in names])
        stage = "outputs"
        for value in outputs:
            value.to_numpy()
    except Exception as e:  # noqa: BLE001
        return f"{stage}: {clean_message(str(e))}"
    return None


def _onnxruntime_route(path: str, feeds: dict) -> str | None:
    import onnxruntime as ort
    from rewriter_plugins.onnxruntime_feeds import run_once

    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        session = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001
        return f"session: {(str(e).strip().splitlines() or [type(e).__name__])[0]}"
    try:
        run_once(session, feeds)
    except Exception as e:  # noqa: BLE001
        return f"run: {(str(e).strip().splitlines() or [type(e).__name__])[0]}"
    return None


_ROUTE_FUNCTIONS = {"openvino": _openvino_route, "tract": _tract_route,
                    "onnxruntime": _onnxruntime_route}


def _route_worker(conn, runtime: str) -> None:
    import os

    os.environ.setdefault("RUST_BACKTRACE", "0")
    while True:
        job = conn.recv()
        if job is None:
            return
        data, feeds = job
        with tempfile.TemporaryDirectory(prefix="user-route-") as folder:
            path = f"{folder}/model.onnx"
            with open(path, "wb") as f:
                f.write(data)
            conn.send(_ROUTE_FUNCTIONS[runtime](path, feeds))


class UserRoute:
    """``runtime`` asked about a model the way its users load one (:data:`USER_ROUTES`), in
    a child process (a crash or a hang is a refusal, and the next model gets a new child).
    Independent of the targets: their code is not used, only the runtime's API."""

    def __init__(self, runtime: str, timeout: float = RUN_TIMEOUT_S) -> None:
        import multiprocessing

        self.runtime, self.timeout = runtime, timeout
        self._ctx = multiprocessing.get_context("spawn")
        self._proc = None

    def refusal(self, model, feeds: dict) -> str | None:
        """None when the runtime reads, compiles and runs ``model`` on ``feeds``; else why
        not (its error, with the stage)."""
        if self._proc is None or not self._proc.is_alive():
            parent, child = self._ctx.Pipe()
            self._proc = self._ctx.Process(target=_route_worker, args=(child, self.runtime),
                                           daemon=True)
            self._proc.start()
            self._conn = parent
        self._conn.send((model.SerializeToString(), feeds))
        try:
            if self._conn.poll(self.timeout):
                return self._conn.recv()
            self._proc.kill()
            answer = f"took longer than {self.timeout:.0f}s"
        except EOFError:
            answer = None
        self._proc.join()
        if answer is None:
            answer = f"crashed (exit code {self._proc.exitcode})"
        self._proc = None
        return answer

    def close(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            self._conn.send(None)
            self._proc.join(timeout=10)


@dataclass
class Detection:
    """``check --target T`` as users get it against the runtime asked the user's way."""

    target: str
    total: int
    matrix: dict[str, int]  # "predicted/actual"
    disagreements: list[dict]
    seconds: float
    check_seconds: float
    # cases check found the runtime computing other numbers than the oracle (it runs them)
    computes_differently: list[str] = field(default_factory=list)

    @property
    def agreement(self) -> int:
        return self.matrix.get("runs/runs", 0) + self.matrix.get("fails/fails", 0)

    @property
    def rate(self) -> float:
        return self.agreement / self.total if self.total else 0.0


def measure_detection(target: str, cases=None, *, runtime: str | None = None,
                      progress=None, plugins=None) -> Detection:
    """``check --target TARGET`` as users get it (its default confirmation included) on
    every case, against the runtime itself asked the way its users load models
    (:class:`UserRoute`: by path, compiled, one run on the case's first data set)."""
    from rewriter.api import check

    plugins = plugins or load_plugins()
    cases = list(cases if cases is not None else all_cases())
    route = UserRoute(runtime or target.split(":")[0])
    matrix: dict[str, int] = {}
    disagreements = []
    differs: list[str] = []
    start = time.perf_counter()
    check_seconds = 0.0
    try:
        for case in cases:
            if progress:
                progress(case.name)
            t0 = time.perf_counter()
            (result,) = check(case.model, [target], plugins=plugins).results
            check_seconds += time.perf_counter() - t0
            # a computes-differently finding says the runtime runs the model (with other
            # numbers than the oracle's): a verdict about numbers, counted apart
            refusals = [f for f in result.findings if f.reason != "computes-differently"]
            predicted = "fails" if refusals else "runs"
            if len(refusals) < len(result.findings):
                differs.append(case.name)
            feeds = feeds_of(case.model, case.data_sets[:1]) or [{}]
            refusal = route.refusal(case.model, feeds[0])
            actual = "fails" if refusal else "runs"
            key = f"{predicted}/{actual}"
            matrix[key] = matrix.get(key, 0) + 1
            if predicted != actual:
                f = refusals[0] if refusals else None
                disagreements.append({
                    "case": case.name, "predicted": predicted, "actual": actual,
                    "check": (f"{f.op_label or 'model'}: {f.reason}: {f.detail}" if f
                              else result.confirmation or "no finding, not confirmed"),
                    "runtime": refusal,
                })
    finally:
        route.close()
    return Detection(target, len(cases), matrix, disagreements,
                     time.perf_counter() - start, check_seconds, differs)


def print_detection(result: Detection) -> None:
    runtime = result.target.split(":")[0]
    print(f"check --target {result.target} (as users get it, confirmation by default) vs "
          f"{runtime} asked the way its users load models: {USER_ROUTES[runtime]}, on the "
          "case's first data set")
    print(f"cases: {result.total}   agreement: {result.agreement}/{result.total} = "
          f"{result.rate:.2%}   ({result.seconds:.1f}s, of which check "
          f"{result.check_seconds:.1f}s)")
    print(f"{'':>16} {'runs':>8} {'fails':>8}")
    for p in ("runs", "fails"):
        print(f"{'predicts ' + p:>16} {result.matrix.get(p + '/runs', 0):>8} "
              f"{result.matrix.get(p + '/fails', 0):>8}")
    print(f"computes differently (a finding about numbers, counted as runs): "
          f"{len(result.computes_differently)} {sorted(result.computes_differently)}")
    print(f"\ndisagreements: {len(result.disagreements)}")
    for d in result.disagreements:
        print(f"- {d['case']}: check says {d['predicted']}, {runtime} {d['actual']}")
        print(f"    check: {_line(d['check'])}")
        print(f"    {runtime}: {_line(d['runtime'] or 'runs')}")


def _line(message: str, limit: int = 400) -> str:
    """One line (node names kept: a disagreement is read for what it blames)."""
    message = " ".join(message.split())
    return message if len(message) <= limit else message[: limit - 1] + "…"
