"""compare: prove a rewritten model computes what the original did, on each target runtime.

The original is evaluated where it can be (the oracle): on a requested target that runs it
as it is, else on the ONNX reference evaluator with Python kernels (``OpRun`` classes) for
its proprietary ops; or its outputs are given (``expected=``, e.g. computed by PyTorch). The
rewritten model runs on every requested target. Every run happens in a child process with a
time limit (:mod:`rewriter.isolation`), so a crash, a hang or running out of memory is a
result. Outputs are compared with tolerances by element type; when they diverge, the
boundaries of every rewritten region are exposed and the first diverging region is named
with the plugin and rule that produced it (:mod:`rewriter.localize`).

Exit codes: 0 equal within tolerance, 1 mismatch, 2 could not run (the report says why).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from rewriter.errors import EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK, RewriterError
from rewriter.isolation import DEFAULT_TIMEOUT_S, Job, RunResult, shared_runner

if TYPE_CHECKING:
    from rewriter.localize import Localization
    from rewriter.manager import Plugins

EQUAL, MISMATCH, ERROR = "equal", "mismatch", "error"
EXPECTED = "expected"  # the oracle's name when outputs are given


# -- tolerances ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Tolerance:
    """|actual - expected| <= atol + rtol * |expected|, element by element."""

    atol: float
    rtol: float


EXACT = Tolerance(0.0, 0.0)
# Looser for narrower floats; integers, booleans and strings must be equal.
DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "float64": Tolerance(1e-8, 1e-7),
    "complex128": Tolerance(1e-8, 1e-7),
    "float32": Tolerance(1e-5, 1e-4),
    "complex64": Tolerance(1e-5, 1e-4),
    "float16": Tolerance(1e-3, 1e-2),
    "bfloat16": Tolerance(1e-2, 4e-2),
    "float8_e4m3fn": Tolerance(0.0625, 0.25),
    "float8_e4m3fnuz": Tolerance(0.0625, 0.25),
    "float8_e5m2": Tolerance(0.125, 0.5),
    "float8_e5m2fnuz": Tolerance(0.125, 0.5),
    "float8_e8m0fnu": Tolerance(0.0, 1.0),
    "float4_e2m1fn": Tolerance(0.5, 0.5),
}
_WIDENED = {"bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
            "float8_e8m0fnu", "float4_e2m1fn"}


def default_tolerance(dtype: np.dtype | str) -> Tolerance:
    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    return DEFAULT_TOLERANCES.get(name, EXACT)


def _overrides(value: float | Mapping[str | None, float] | None) -> dict[str | None, float]:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    return {None: float(value)}


def parse_tolerances(items: Sequence[str], option: str = "--atol") -> dict[str | None, float]:
    """``["1e-3", "y=1e-2"]`` -> ``{None: 1e-3, "y": 1e-2}`` (no name: every output)."""
    out: dict[str | None, float] = {}
    for item in items:
        name, eq, value = item.rpartition("=")
        try:
            number = float(value)
        except ValueError:
            raise RewriterError(f"{option} {item!r}: {value!r} is not a number") from None
        if number < 0 or math.isnan(number):
            raise RewriterError(f"{option} {item!r}: must be a non-negative number")
        out[name if eq else None] = number
    return out


class Tolerances:
    """Defaults by element type, overridden for all outputs or per output name."""

    def __init__(self, atol=None, rtol=None) -> None:
        self.atol = _overrides(atol)
        self.rtol = _overrides(rtol)

    def for_value(self, name: str, dtype) -> Tolerance:
        base = default_tolerance(dtype)
        root = name.split("[", 1)[0]  # a sequence item "y[0]" uses the overrides of "y"
        atol = self.atol.get(name, self.atol.get(root, self.atol.get(None, base.atol)))
        rtol = self.rtol.get(name, self.rtol.get(root, self.rtol.get(None, base.rtol)))
        return Tolerance(atol, rtol)

    def as_dict(self) -> dict[str, Any]:
        return {"atol": {k or "*": v for k, v in self.atol.items()},
                "rtol": {k or "*": v for k, v in self.rtol.items()}}


# -- metrics -------------------------------------------------------------------------------


@dataclass
class OutputComparison:
    """One output (or sequence item) of one run, or the worst over several runs."""

    name: str
    ok: bool
    expected_shape: tuple | None = None
    actual_shape: tuple | None = None
    expected_dtype: str = ""
    actual_dtype: str = ""
    elements: int = 0
    mismatches: int = 0
    max_abs: float | None = None
    max_rel: float | None = None
    cosine: float | None = None
    nan_agree: bool = True
    atol: float = 0.0
    rtol: float = 0.0
    input_set: int = 0  # the run these numbers come from (the worst one)
    detail: str = ""  # why not ok

    @property
    def mismatch_fraction(self) -> float:
        return self.mismatches / self.elements if self.elements else 0.0

    @property
    def shape_ok(self) -> bool:
        return self.expected_shape == self.actual_shape

    @property
    def dtype_ok(self) -> bool:
        return self.expected_dtype == self.actual_dtype

    def as_dict(self) -> dict[str, Any]:
        def num(x):
            if x is None:
                return None
            return x if math.isfinite(x) else str(x)

        return {
            "name": self.name, "ok": self.ok, "detail": self.detail,
            "shape": {"expected": _shape_list(self.expected_shape),
                      "actual": _shape_list(self.actual_shape), "agree": self.shape_ok},
            "dtype": {"expected": self.expected_dtype, "actual": self.actual_dtype,
                      "agree": self.dtype_ok},
            "max_abs": num(self.max_abs), "max_rel": num(self.max_rel),
            "mismatches": self.mismatches, "elements": self.elements,
            "mismatch_fraction": self.mismatch_fraction, "cosine": num(self.cosine),
            "nan_agree": self.nan_agree, "atol": self.atol, "rtol": self.rtol,
            "input_set": self.input_set,
        }


def _shape_list(shape):
    return None if shape is None else list(shape)


def _dtype_name(a: np.ndarray) -> str:
    return "string" if a.dtype.kind in "OUS" else a.dtype.name


def _widen(a: np.ndarray) -> np.ndarray:
    name = a.dtype.name
    if name in _WIDENED or a.dtype.kind == "V":
        return a.astype(np.float64)
    if name in ("int4", "uint4", "int2", "uint2"):
        return a.astype(np.int64)
    return a


def compare_values(name: str, expected: Any, actual: Any, tolerances: Tolerances,
                   input_set: int = 0) -> list[OutputComparison]:
    """Compare one output: a tensor, a sequence (item by item), a map or None."""
    if expected is None or actual is None:
        ok = expected is None and actual is None
        return [OutputComparison(name, ok, input_set=input_set, detail="" if ok else
                                 f"expected {type(expected).__name__}, got "
                                 f"{type(actual).__name__}")]
    if isinstance(expected, dict) or isinstance(actual, dict):
        if not (isinstance(expected, dict) and isinstance(actual, dict)):
            return [OutputComparison(name, False, input_set=input_set,
                                     detail="expected a map" if isinstance(expected, dict)
                                     else "got a map")]
        if sorted(map(str, expected)) != sorted(map(str, actual)):
            return [OutputComparison(name, False, input_set=input_set,
                                     detail="the maps' keys differ")]
        out = []
        for key in expected:
            out.extend(compare_values(f"{name}[{key!r}]", expected[key], actual[key],
                                      tolerances, input_set))
        return out
    if isinstance(expected, (list, tuple)) or isinstance(actual, (list, tuple)):
        if not (isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple))):
            return [OutputComparison(name, False, input_set=input_set,
                                     detail="expected a sequence" if isinstance(
                                         expected, (list, tuple)) else "got a sequence")]
        if len(expected) != len(actual):
            return [OutputComparison(name, False, input_set=input_set,
                                     detail=f"{len(actual)} items, expected {len(expected)}")]
        out = []
        for i, (e, a) in enumerate(zip(expected, actual)):
            out.extend(compare_values(f"{name}[{i}]", e, a, tolerances, input_set))
        return out or [OutputComparison(name, True, input_set=input_set)]
    return [compare_tensor(name, np.asarray(expected), np.asarray(actual),
                           tolerances.for_value(name, np.asarray(expected).dtype), input_set)]


def compare_tensor(name: str, expected: np.ndarray, actual: np.ndarray, tol: Tolerance,
                   input_set: int = 0) -> OutputComparison:
    """Metrics for one tensor: shape and dtype agreement, max abs and rel error, the
    fraction of elements beyond ``tol``, cosine similarity, NaN positions."""
    c = OutputComparison(
        name, True, tuple(expected.shape), tuple(actual.shape), _dtype_name(expected),
        _dtype_name(actual), int(expected.size), atol=tol.atol, rtol=tol.rtol,
        input_set=input_set,
    )
    problems = []
    if not c.dtype_ok:
        problems.append(f"dtype {c.actual_dtype}, expected {c.expected_dtype}")
    if not c.shape_ok:
        c.ok = False
        problems.append(f"shape {list(actual.shape)}, expected {list(expected.shape)}")
        c.detail = "; ".join(problems)
        return c
    if expected.size == 0:
        c.ok = c.dtype_ok
        c.detail = "; ".join(problems)
        return c
    e, a = _widen(expected), _widen(actual)
    if e.dtype.kind in "OUS" or a.dtype.kind in "OUS":
        differs = np.asarray(e.astype(object) != a.astype(object), dtype=bool)
        c.mismatches = int(differs.sum())
    elif e.dtype.kind in "biu" and a.dtype.kind in "biu":
        differs = e != a
        c.mismatches = int(differs.sum())
        diff = np.abs(e.astype(np.float64) - a.astype(np.float64))
        c.max_abs = float(diff.max())
        c.max_rel = _max_rel(diff, np.abs(e.astype(np.float64)))
        c.cosine = _cosine(e.astype(np.float64), a.astype(np.float64))
    else:
        if e.dtype.kind == "c" or a.dtype.kind == "c":
            ef, af = e.astype(np.complex128), a.astype(np.complex128)
            nan_e, nan_a = np.isnan(ef), np.isnan(af)
        else:
            ef, af = e.astype(np.float64), a.astype(np.float64)
            nan_e, nan_a = np.isnan(ef), np.isnan(af)
        c.nan_agree = bool(np.array_equal(nan_e, nan_a))
        finite = np.isfinite(ef) & np.isfinite(af)
        with np.errstate(invalid="ignore", over="ignore"):
            same = (ef == af) | (nan_e & nan_a)  # equal infinities and NaN at NaN agree
            diff = np.where(finite, np.abs(af - ef), 0.0)
            within = same | (finite & (diff <= tol.atol + tol.rtol * np.abs(ef)))
        c.mismatches = int((~within).sum())
        if finite.any():
            c.max_abs = float(diff[finite].max())
            c.max_rel = _max_rel(diff[finite], np.abs(ef[finite]))
            c.cosine = _cosine(ef[finite], af[finite])
        if not finite.all() and not (finite | same).all():
            c.max_abs = math.inf
        if not c.nan_agree:
            problems.append(f"NaN at {int((nan_e != nan_a).sum())} position(s) only one "
                            "model has")
    if c.mismatches:
        problems.append(f"{c.mismatches} of {c.elements} elements differ beyond atol="
                        f"{tol.atol:g} rtol={tol.rtol:g}")
    c.ok = not problems
    c.detail = "; ".join(problems)
    return c


def _max_rel(diff: np.ndarray, magnitude: np.ndarray) -> float | None:
    nonzero = magnitude > 0
    if not nonzero.any():
        return 0.0 if not diff.size or not diff.any() else math.inf
    rel = diff[nonzero] / magnitude[nonzero]
    worst = float(rel.max()) if rel.size else 0.0
    if (diff[~nonzero] > 0).any():
        worst = max(worst, math.inf)
    return worst


def _cosine(e: np.ndarray, a: np.ndarray) -> float | None:
    if e.dtype.kind == "c":
        e = np.concatenate([e.real.ravel(), e.imag.ravel()])
        a = np.concatenate([a.real.ravel(), a.imag.ravel()])
    e, a = e.ravel(), a.ravel()
    ne, na = float(np.linalg.norm(e)), float(np.linalg.norm(a))
    if ne == 0 and na == 0:
        return 1.0
    if ne == 0 or na == 0 or not (math.isfinite(ne) and math.isfinite(na)):
        return 0.0 if ne == 0 or na == 0 else None
    return float(np.dot(e, a) / (ne * na))


def _worse(a: OutputComparison, b: OutputComparison) -> OutputComparison:
    """The worst of two comparisons of one output (over input sets)."""
    def key(c):
        return (c.ok, -(c.mismatches), -(c.max_abs if c.max_abs is not None else -1.0))
    return a if key(a) <= key(b) else b


# -- reports -------------------------------------------------------------------------------


@dataclass
class TargetComparison:
    """The rewritten model on one target against the oracle."""

    target: str
    status: str  # equal | mismatch | error
    outputs: list[OutputComparison] = field(default_factory=list)
    error: str = ""
    error_kind: str = ""  # error | crash | timeout | oom | unsupported
    seconds: float = 0.0
    localization: Localization | None = None

    @property
    def max_abs(self) -> float | None:
        values = [c.max_abs for c in self.outputs if c.max_abs is not None]
        return max(values) if values else None

    def as_dict(self) -> dict[str, Any]:
        worst = self.max_abs
        return {
            "target": self.target, "status": self.status, "error": self.error or None,
            "error_kind": self.error_kind or None, "seconds": round(self.seconds, 3),
            "max_abs": worst if worst is None or math.isfinite(worst) else str(worst),
            "outputs": [c.as_dict() for c in self.outputs],
            "localization": self.localization.as_dict() if self.localization else None,
        }


@dataclass
class CompareReport:
    """Every target's verdict, with the oracle and the inputs used."""

    original: str | None
    rewritten: str
    oracle: str = ""  # a target name, or "expected"
    oracle_error: str = ""  # why the original could not be evaluated
    oracle_attempts: list[dict[str, str]] = field(default_factory=list)
    inputs: dict[str, Any] = field(default_factory=dict)
    tolerances: dict[str, Any] = field(default_factory=dict)
    targets: list[TargetComparison] = field(default_factory=list)
    error: str = ""  # a problem before anything ran (inputs, models)
    seconds: float = 0.0

    @property
    def status(self) -> str:
        if self.error or self.oracle_error or not self.targets:
            return ERROR
        statuses = {t.status for t in self.targets}
        if MISMATCH in statuses:
            return MISMATCH
        return ERROR if ERROR in statuses else EQUAL

    @property
    def ok(self) -> bool:
        return self.status == EQUAL

    @property
    def exit_code(self) -> int:
        return {EQUAL: EXIT_OK, MISMATCH: EXIT_FINDINGS}.get(self.status, EXIT_BAD_INPUT)

    @property
    def max_abs(self) -> float | None:
        values = [t.max_abs for t in self.targets if t.max_abs is not None]
        return max(values) if values else None

    def why_not_run(self) -> str:
        if self.error:
            return self.error
        if self.oracle_error:
            return f"could not evaluate the original: {self.oracle_error}"
        if not self.targets:
            return "no target to run the rewritten model on"
        return "; ".join(f"{t.target}: {t.error}" for t in self.targets if t.status == ERROR)

    def summary(self) -> str:
        """One line: the verdict and the largest error, or why there is none."""
        status = self.status
        against = f"against {self.oracle}" if self.oracle else ""
        if status == EQUAL:
            worst = self.max_abs
            err = "" if worst is None else f", max abs error {worst:.3g}"
            names = ", ".join(t.target for t in self.targets)
            return f"equal within tolerance on {names} {against}{err}".replace("  ", " ")
        if status == MISMATCH:
            parts = []
            for t in self.targets:
                if t.status != MISMATCH:
                    continue
                bad = [c for c in t.outputs if not c.ok]
                text = f"{t.target}: {', '.join(c.name for c in bad)} differ"
                if t.max_abs is not None:
                    text += f" (max abs error {t.max_abs:.3g})"
                if t.localization is not None and t.localization.status == "found":
                    s = t.localization.region.stamp
                    if s is not None:
                        text += f"; first diverging region: {t.localization.region.label} by " \
                                f"rule {s.rule!r} of plugin {s.plugin!r}"
                parts.append(text)
            return f"mismatch {against}: " + "; ".join(parts)
        return f"could not compare: {self.why_not_run()}"

    def as_dict(self) -> dict[str, Any]:
        worst = self.max_abs
        return {
            "original": self.original, "rewritten": self.rewritten, "status": self.status,
            "ok": self.ok, "exit_code": self.exit_code, "summary": self.summary(),
            "error": self.error or None, "oracle": self.oracle or None,
            "oracle_error": self.oracle_error or None, "oracle_attempts": self.oracle_attempts,
            "inputs": self.inputs, "tolerances": self.tolerances,
            "max_abs": worst if worst is None or math.isfinite(worst) else str(worst),
            "targets": [t.as_dict() for t in self.targets], "seconds": round(self.seconds, 3),
        }


# -- kernels for the reference evaluator ---------------------------------------------------


def plugin_reference_ops(plugins: Plugins, model=None) -> list[type]:
    """``OpRun`` classes for the ops of ``model`` that installed plugins' kernels implement
    (through :func:`rewriter.kernels.reference_ops`), so the reference evaluator can run an
    original model's proprietary ops. Empty when the kernels module is absent."""
    if model is None:
        return []
    try:
        from rewriter.kernels import reference_ops
    except ImportError:
        return []
    return list(reference_ops(model, plugins.registry))


# -- the comparison ------------------------------------------------------------------------


def _as_feed_sets(value, model, what: str) -> list[dict[str, Any]]:
    from rewriter.inputs import load_inputs, load_outputs

    if isinstance(value, Mapping):
        return [dict(value)]
    if isinstance(value, (str, os.PathLike)):
        value = [value]
    items = list(value)
    if items and all(isinstance(x, (str, os.PathLike)) for x in items):
        return (load_inputs if what == "inputs" else load_outputs)(items, model)
    if items and all(isinstance(x, Mapping) for x in items):
        return [dict(x) for x in items]
    if what == "expected" and items:  # a list of arrays: the model's outputs in order
        names = [o.name for o in model.graph.output]
        if len(items) != len(names):
            raise RewriterError(f"expected: {len(items)} arrays, the model has {len(names)} "
                                "outputs")
        return [dict(zip(names, items))]
    raise RewriterError(f"{what}: give a dict of arrays by name, a list of such dicts, or "
                        "paths to .npz / .pb files or test-data folders")


def _describe_inputs(feeds: list[dict[str, Any]]) -> dict[str, Any]:
    first = feeds[0] if feeds else {}
    shapes = {}
    for name, value in first.items():
        if isinstance(value, np.ndarray):
            shapes[name] = f"{_dtype_name(value)}{list(value.shape)}"
        else:
            shapes[name] = type(value).__name__
    return {"sets": len(feeds), "shapes": shapes}


def compare(
    model,
    rewritten=None,
    targets: Sequence[str] = ("onnxruntime",),
    *,
    expected=None,
    inputs=None,
    runs: int = 1,
    seed: int = 0,
    dims: Mapping[str, int] | None = None,
    atol: float | Mapping[str | None, float] | None = None,
    rtol: float | Mapping[str | None, float] | None = None,
    original_target: str | None = None,
    plugins: Plugins | None = None,
    reference_ops: Sequence[type] = (),
    custom_op_libraries: Sequence[str] = (),
    timeout: float | None = DEFAULT_TIMEOUT_S,
    memory_limit: int | None = None,
    localize: bool = True,
) -> CompareReport:
    """Run the rewritten model on each target and compare it with the original.

    ``compare(original, rewritten, targets)`` evaluates ``original`` on the oracle (see
    ``original_target``); ``compare(model, expected=...)`` checks one model against outputs
    computed elsewhere (PyTorch, a test-data folder). With both, ``expected`` is the oracle
    and the original is only run to localize a divergence.

    Args:
        model: the original model (a path, ``ModelProto`` or ``LoadedModel``); the model
            under test when ``rewritten`` is None.
        rewritten: the rewritten model.
        targets: target names to run the rewritten model on (``onnxruntime``, ``reference``,
            a plugin's target).
        expected: reference outputs: a dict of arrays by output name, a list of arrays in
            output order, a list of dicts (one per input set), or .npz / test-data paths.
        inputs: a dict of arrays, a list of dicts, or .npz / .pb / test-data paths; default:
            ``runs`` sets generated from the declared inputs with seeds ``seed``,
            ``seed + 1``, ... and symbolic dimensions from ``dims``.
        atol, rtol: tolerance overrides: a number for every output, or by output name
            (``{"y": 1e-3}``; key None for every output).
        original_target: where to evaluate the original (default: the first requested
            target that runs it as it is, else ``reference``).
        reference_ops: ``OpRun`` classes for the reference evaluator (ops of the original it
            lacks), added to those the installed plugins' kernels provide. They are pickled
            by reference to the child process, so they must be importable (module level).
        custom_op_libraries: custom-op libraries to register in onnxruntime.
        timeout: seconds each run (load and every input set) may take in its child process.
        memory_limit: bytes of address space each child process may use.
        localize: on a mismatch, find the first diverging rewritten region.

    Returns:
        a :class:`CompareReport`; ``exit_code`` is 0 (equal), 1 (mismatch) or 2 (could not
        run, ``why_not_run()`` says why). Runtime failures are results, never exceptions.

    Raises:
        TargetError: a target name is unknown.
        ModelError: a model file cannot be loaded.
    """
    from rewriter.api import as_loaded, resolve_targets
    from rewriter.inputs import InputError, check_feeds, generate_inputs
    from rewriter.manager import load_plugins
    from rewriter.targets import TargetOptions

    start = time.perf_counter()
    plugins = plugins or load_plugins()
    if rewritten is None:
        if expected is None:
            raise RewriterError("compare needs the rewritten model, or expected outputs")
        original, subject = None, as_loaded(model)
    else:
        original, subject = as_loaded(model), as_loaded(rewritten)
        original = with_missing_imports(original, subject.model)
    options = TargetOptions(custom_op_libraries=tuple(custom_op_libraries), confirm=False)
    specs = list(dict.fromkeys(targets))
    resolved = resolve_targets(plugins, specs, options)
    tolerances = Tolerances(atol, rtol)
    report = CompareReport(str(original.path) if original else None, str(subject.path),
                           tolerances=tolerances.as_dict())

    runner = shared_runner(plugins, memory_limit=memory_limit)
    runner.start()  # a new child imports its runtimes while we prepare the inputs
    try:
        source = original.model if original is not None else subject.model
        try:
            if inputs is None:
                if runs < 1:
                    raise InputError("runs must be at least 1")
                feeds = [generate_inputs(source, seed=seed + i, dims=dims,
                                         also=[subject.model] if original else [])
                         for i in range(runs)]
                report.inputs = {"source": "generated", "seeds": [seed + i for i in range(runs)],
                                 "dims": dict(dims or {})}
            else:
                feeds = _as_feed_sets(inputs, source, "inputs")
                report.inputs = {"source": "given"}
            for i, f in enumerate(feeds):
                where = f"input set {i}" if len(feeds) > 1 else "inputs"
                check_feeds(f, subject.model, where)
                if original is not None:
                    check_feeds(f, original.model, where)
            report.inputs.update(_describe_inputs(feeds))
            want = (_as_feed_sets(expected, subject.model, "expected")
                    if expected is not None else None)
            if want is not None and len(want) != len(feeds):
                raise InputError(f"expected: {len(want)} output set(s) for {len(feeds)} input "
                                 "set(s)")
        except RewriterError as e:
            report.error = str(e)
            return report

        def job(target: str, proto, base_dir, feed_sets) -> Job:
            return Job.make(target, proto, base_dir, feed_sets, plugins=plugins,
                            custom_op_libraries=custom_op_libraries,
                            reference_ops=reference_ops)

        def run(j: Job) -> RunResult:
            return runner.run(j, timeout)

        # the oracle
        oracle_spec = None
        if want is not None:
            report.oracle = EXPECTED
        else:
            candidates, skipped = _oracle_candidates(original, specs, resolved, original_target,
                                                     plugins, reference_ops)
            report.oracle_attempts.extend(skipped)
            for spec in candidates:
                result = run(job(spec, original.model, original.base_dir, feeds))
                report.oracle_attempts.append(
                    {"target": spec, "status": result.kind, "error": result.error})
                if result.ok:
                    want, recast = as_declared_floats(result.outputs, original.model)
                    if recast:
                        report.oracle_attempts[-1]["note"] = (
                            f"{spec} returned {', '.join(recast)} in another float type than "
                            "the model declares; cast to the declared type")
                    report.oracle, oracle_spec = spec, spec
                    break
            if want is None:
                report.oracle_error = "; ".join(
                    f"{a['target']}: {a['error']}" for a in report.oracle_attempts) or \
                    "no target can run it"
                return report

        # the rewritten model on every target
        for spec, target in zip(specs, resolved):
            if not target.runs_models:
                report.targets.append(TargetComparison(
                    spec, ERROR, error=f"target {spec!r} cannot run models (it only answers "
                    "what it supports)", error_kind="unsupported"))
                continue
            result = run(job(spec, subject.model, subject.base_dir, feeds))
            report.targets.append(_judge_target(spec, result, want, tolerances))

        if localize and original is not None:
            for tc in report.targets:
                if tc.status == MISMATCH:
                    if oracle_spec is None:
                        oracle_spec = next(iter(_oracle_candidates(
                            original, specs, resolved, None, plugins, reference_ops)[0]), None)
                    tc.localization = _localize(run, job, original, subject, tc, feeds,
                                                tolerances, oracle_spec)
    finally:
        report.seconds = time.perf_counter() - start
    return report


def as_declared_floats(output_sets, model) -> tuple[list[dict], list[str]]:
    """The oracle's outputs with each floating-point output in the float type the model
    declares for it (the reference evaluator returns some in float64, e.g. Adam's X_new:
    an artefact of the evaluator, not a property of the model), and the names recast."""
    from onnx import helper

    declared = {}
    for v in model.graph.output:
        elem = v.type.tensor_type.elem_type if v.type.HasField("tensor_type") else 0
        if elem:
            try:
                declared[v.name] = np.dtype(helper.tensor_dtype_to_np_dtype(elem))
            except (KeyError, TypeError, ValueError):
                pass
    recast: list[str] = []
    out = []
    for outputs in output_sets:
        fixed = dict(outputs)
        for name, value in outputs.items():
            want = declared.get(name)
            if (want is not None and isinstance(value, np.ndarray) and value.dtype != want
                    and value.dtype.kind == "f" and want.kind == "f"):
                fixed[name] = value.astype(want)
                if name not in recast:
                    recast.append(name)
        out.append(fixed)
    return out, recast


def with_missing_imports(original, rewritten):
    """The original with an opset import for every domain its graphs use but do not import
    (exporters forget them; onnxruntime fills them in, the reference evaluator refuses),
    at the version the rewritten model imports, else the newest (ai.onnx) or 1; the same
    LoadedModel when nothing is missing."""
    import dataclasses

    from onnx import ModelProto, defs

    from rewriter.walk import iter_scopes, normalize_domain

    model = original.model
    imported = {normalize_domain(i.domain) for i in model.opset_import}
    used = {normalize_domain(n.domain) for scope in iter_scopes(model)
            if scope.graph is not None for n in scope.nodes}
    missing = sorted(used - imported)
    if not missing:
        return original
    versions = {normalize_domain(i.domain): i.version for i in rewritten.opset_import}
    copy = ModelProto()
    copy.CopyFrom(model)
    for domain in missing:
        entry = copy.opset_import.add()
        entry.domain = domain
        entry.version = versions.get(domain) or (defs.onnx_opset_version() if domain == ""
                                                 else 1)
    return dataclasses.replace(original, model=copy)


def _findings_text(findings, limit: int = 3) -> str:
    from rewriter.detect import group_findings

    groups = group_findings(findings)
    parts = [f"{g.op_label} ×{g.count} ({g.detail})" for g in groups[:limit]]
    if len(groups) > limit:
        parts.append(f"and {len(groups) - limit} more")
    return "; ".join(parts)


def _oracle_candidates(original, specs, resolved, original_target, plugins, reference_ops):
    """(targets to evaluate the original on, in order; attempts skipped and why): the given
    target; else each requested target that runs it as it is, then the reference evaluator
    with the Python kernels for the ops it lacks (a static check first, so a model that
    cannot run there costs no child run)."""
    from rewriter.api import resolve_targets
    from rewriter.detect import find_unsupported
    from rewriter.targets import TargetOptions

    if original_target:
        return [original_target], []
    out, skipped = [], []

    def consider(spec, target):
        try:
            findings = find_unsupported(original.model, target)
        except Exception as e:  # noqa: BLE001 - a check that fails is no candidate
            findings, why = None, f"{type(e).__name__}: {e}"
        if findings == []:
            out.append(spec)
            return
        if findings:
            why = f"cannot run the original as it is: {_findings_text(findings)}"
        skipped.append({"target": spec, "status": "skipped", "error": why})

    for spec, target in zip(specs, resolved):
        if target.runs_models and spec != "reference":
            consider(spec, target)
    if "reference" in plugins.registry.targets:
        try:
            ops = tuple(reference_ops) + tuple(plugin_reference_ops(plugins, original.model))
            (reference,) = resolve_targets(plugins, ["reference"],
                                           TargetOptions(confirm=False, reference_ops=ops))
        except Exception as e:  # noqa: BLE001 - e.g. a kernel that cannot be imported
            skipped.append({"target": "reference", "status": "skipped",
                            "error": f"{type(e).__name__}: {e}"})
        else:
            consider("reference", reference)
    return out, skipped


def _judge_target(spec: str, result: RunResult, want, tolerances: Tolerances) -> TargetComparison:
    if not result.ok:
        return TargetComparison(spec, ERROR, error=result.error, error_kind=result.kind,
                                seconds=result.seconds)
    worst: dict[str, OutputComparison] = {}
    order: list[str] = []
    for i, (expected, actual) in enumerate(zip(want, result.outputs)):
        names = list(expected)
        common = [n for n in names if n in actual]
        if not common and len(expected) == len(actual):  # renamed outputs: by position
            actual = dict(zip(names, actual.values()))
        for name in names:
            if name not in actual:
                found = [OutputComparison(name, False, input_set=i,
                                          detail="the rewritten model has no such output")]
            else:
                found = compare_values(name, expected[name], actual[name], tolerances, i)
            for c in found:
                if c.name not in worst:
                    order.append(c.name)
                    worst[c.name] = c
                else:
                    worst[c.name] = _worse(worst[c.name], c)
    outputs = [worst[n] for n in order]
    status = EQUAL if all(c.ok for c in outputs) else MISMATCH
    return TargetComparison(spec, status, outputs, seconds=result.seconds)


def _localize(run, job, original, subject, tc: TargetComparison, feeds,
              tolerances: Tolerances, oracle_spec: str | None) -> Localization:
    from rewriter.localize import Localization, boundary_names, expose, find_regions, judge

    bad = [c for c in tc.outputs if not c.ok]
    index = bad[0].input_set if bad else 0
    regions = find_regions(original.model, subject.model)
    if not regions:
        return Localization("no-regions", "no node of the original was rewritten (or the "
                            "rewritten nodes carry no provenance)", input_set=index)
    if oracle_spec is None:
        return Localization("unavailable", "no target can run the original model to read "
                            "its intermediate values", input_set=index)
    names = boundary_names(regions)
    feed = [feeds[index]]
    before = run(job(oracle_spec, expose(original.model, names), original.base_dir, feed))
    if not before.ok:
        return Localization("unavailable", f"the original with its region boundaries exposed "
                            f"failed on {oracle_spec}: {before.error}", input_set=index)
    after = run(job(tc.target, expose(subject.model, names), subject.base_dir, feed))
    if not after.ok:
        return Localization("unavailable", f"the rewritten model with its region boundaries "
                            f"exposed failed on {tc.target}: {after.error}", input_set=index)

    def one(name, e, a):
        found = compare_values(name, e, a, tolerances, index)
        return found[0] if len(found) == 1 else _merge_items(name, found)

    return judge(regions, before.outputs[0], after.outputs[0], one, index)


def _merge_items(name: str, items: list[OutputComparison]) -> OutputComparison:
    worst = items[0]
    for c in items[1:]:
        worst = _worse(worst, c)
    merged = OutputComparison(**{**worst.__dict__, "name": name})
    merged.ok = all(c.ok for c in items)
    return merged


# -- after a rewrite -----------------------------------------------------------------------


def verify_rewrite(loaded, rewritten, specs: Sequence[str], resolved, report, *,
                   plugins: Plugins, custom_op_libraries: Sequence[str] = (),
                   **options) -> None:
    """``rewrite``'s last step: compare the result with the original on every requested
    target that runs models (the reference evaluator when none does), and record the verdict
    in ``report.verification["compare"]`` and ``report.comparison``.

    A mismatch, or a rewritten model that fails on a target where the original ran, fails the
    rewrite; an original that cannot be evaluated anywhere (a proprietary op without a
    kernel) or inputs that cannot be generated skip the check, saying why.
    """
    from pathlib import Path

    from rewriter.io import LoadedModel

    if not report.applied:
        report.verification["compare"] = "skipped: nothing was rewritten"
        return
    refused = [name for name, verdict in report.verification.items()
               if name.endswith(" load") and verdict != "ok"]
    if refused:
        report.verification["compare"] = f"skipped: the result does not load ({refused[0]})"
        return
    runnable = [spec for spec, t in zip(specs, resolved) if t.runs_models]
    if not runnable and "reference" in plugins.registry.targets:
        runnable = ["reference"]
    if not runnable:
        report.verification["compare"] = "skipped: no installed target runs models"
        return
    subject = LoadedModel(rewritten, Path(f"{loaded.path} (rewritten)"), rewritten.ByteSize())
    result = compare(loaded, subject, runnable, plugins=plugins,
                     custom_op_libraries=custom_op_libraries, **options)
    report.comparison = result
    if result.status == EQUAL:
        verdict = "ok"
    elif result.status == MISMATCH:
        verdict = result.summary()
    elif result.error or result.oracle_error:
        verdict = f"skipped: {result.why_not_run()}"
    else:
        verdict = f"failed: the original runs on {result.oracle} but the result does not: " \
                  f"{result.why_not_run()}"
    report.verification["compare"] = verdict
