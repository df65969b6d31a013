"""compare: prove a rewritten model computes what the original did, on each target runtime.

The original is evaluated where it can be (the oracle): on a requested target that runs it
as it is, else on the ONNX reference evaluator with Python kernels (``OpRun`` classes) for
its proprietary ops; or its outputs are given (``expected=``, e.g. computed by PyTorch). The
rewritten model runs on every requested target. Every run happens in a child process with a
time limit (:mod:`rewriter.comparison.isolation`), so a crash, a hang or running out of memory is a
result. Outputs are compared with tolerances by element type; when they diverge, the
boundaries of every rewritten region are exposed and the first diverging region is named
with the plugin and rule that produced it (:mod:`rewriter.comparison.localize`).

The verdict (:mod:`rewriter.verify.verdicts`) and exit code: ``verified`` 0 (equal within tolerance
on every target), ``mismatch`` 1 (outputs differ, or the rewritten model fails where the
original runs), ``unverified`` 3 (nothing could decide: the original runs nowhere, a run
crashed or timed out; the report says why), 2 for bad input (inputs that do not fit the
model).
"""

from __future__ import annotations

import copy
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from rewriter import progress
from rewriter.comparison.isolation import DEFAULT_TIMEOUT_S, Job, RunResult, shared_runner
from rewriter.errors import EXIT_BAD_INPUT, RewriterError
from rewriter.verify.verdicts import EXIT_CODES, UNVERIFIED, VERIFIED, Status
from rewriter.verify.verdicts import MISMATCH as MISMATCHED

if TYPE_CHECKING:
    from onnx import ModelProto

    from rewriter.comparison.anchoring import Anchoring
    from rewriter.comparison.localize import Localization
    from rewriter.manager import Plugins

EQUAL, MISMATCH, ERROR = Status  # one target's outcome (verdicts.Status)
EXPECTED = "expected"  # the oracle's name when outputs are given


# -- tolerances ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Tolerance:
    """|actual - expected| <= atol + rtol * |expected| + scale * max|expected|, element by
    element. ``scale`` (a few units of the type's precision) admits the rounding of long
    reductions: a dot product over 1,024 terms computed in another order differs by about
    sqrt(1024) * eps * its largest terms, which an element near zero cannot absorb by its
    own magnitude (seen: 2.1e-4 on outputs of magnitude ~300 in float32)."""

    atol: float
    rtol: float
    scale: float = 0.0


EXACT = Tolerance(0.0, 0.0)
# Looser for narrower floats; integers, booleans and strings must be equal.
DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "float64": Tolerance(1e-8, 1e-7, 2e-15),
    "complex128": Tolerance(1e-8, 1e-7, 2e-15),
    "float32": Tolerance(1e-5, 1e-4, 1e-6),
    "complex64": Tolerance(1e-5, 1e-4, 1e-6),
    "float16": Tolerance(1e-3, 1e-2, 1e-3),
    "bfloat16": Tolerance(1e-2, 4e-2, 8e-3),
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


# narrower floats last: a model computing in one of them is compared at its tolerance
_FLOAT_WIDTHS = ("float64", "float32", "float16", "bfloat16")


class Tolerances:
    """Defaults by element type, overridden for all outputs or per output name.
    ``computed_in``: the narrowest float type the model computes in (``float16`` for an fp16
    model converted with float32 inputs and outputs): a float output wider than it gets the
    tolerance of that type, since its values went through it."""

    def __init__(self, atol=None, rtol=None, computed_in: str | None = None) -> None:
        self.atol = _overrides(atol)
        self.rtol = _overrides(rtol)
        self.computed_in = computed_in
        # target -> the float type it computes float64 in, where narrower (OpenVINO's CPU
        # plugin: float32): that target's float64 outputs get that type's tolerance
        self.float64_as: dict[str, str] = {}
        # the ops that made ``computed_in`` float16 in a float32 model: they quantize its
        # activations on a grid computed at run time (dynamically_quantized)
        self.quantized_by: list[str] = []

    def on(self, target: str) -> Tolerances:
        """These tolerances for the outputs of ``target`` (see :attr:`float64_as`)."""
        narrower = self.float64_as.get(target)
        if narrower is None or (self.computed_in in _FLOAT_WIDTHS and _FLOAT_WIDTHS.index(
                self.computed_in) >= _FLOAT_WIDTHS.index(narrower)):
            return self
        out = copy.copy(self)
        out.computed_in = narrower
        return out

    def for_value(self, name: str, dtype) -> Tolerance:
        kind = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
        if (self.computed_in in _FLOAT_WIDTHS and kind in _FLOAT_WIDTHS
                and _FLOAT_WIDTHS.index(self.computed_in) > _FLOAT_WIDTHS.index(kind)):
            kind = self.computed_in
        base = default_tolerance(kind)
        root = name.split("[", 1)[0]  # a sequence item "y[0]" uses the overrides of "y"
        atol = self.atol.get(name, self.atol.get(root, self.atol.get(None, base.atol)))
        rtol = self.rtol.get(name, self.rtol.get(root, self.rtol.get(None, base.rtol)))
        return Tolerance(atol, rtol, base.scale)

    def as_dict(self) -> dict[str, Any]:
        return {"atol": {k or "*": v for k, v in self.atol.items()},
                "rtol": {k or "*": v for k, v in self.rtol.items()},
                "computed_in": self.computed_in, "float64_as": dict(self.float64_as),
                "dynamically_quantized_by": list(self.quantized_by)}


def narrowest_float(model) -> str | None:
    """The narrowest of float64, float32, bfloat16 and float16 that ``model`` declares a
    value, an initializer or a Cast in (any graph or function), or None."""
    from onnx import TensorProto, helper

    from rewriter.graph.walk import iter_scopes

    seen: set[int] = set()
    for scope in iter_scopes(model):
        if scope.graph is not None:
            g = scope.graph
            seen.update(v.type.tensor_type.elem_type for v in (*g.input, *g.output,
                                                                *g.value_info)
                        if v.type.HasField("tensor_type"))
            seen.update(t.data_type for t in g.initializer)
        for node in scope.nodes:
            if node.op_type == "Cast":
                seen.update(a.i for a in node.attribute if a.name == "to")
            elif node.op_type == "Constant":
                seen.update(a.t.data_type for a in node.attribute if a.name == "value")
    names = set()
    for elem in seen:
        if elem in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16,
                    TensorProto.BFLOAT16):
            names.add(np.dtype(helper.tensor_dtype_to_np_dtype(elem)).name)
    ranked = [n for n in _FLOAT_WIDTHS if n in names]
    return ranked[-1] if ranked else None


# Ops whose quantization grid is computed from the data at run time (the scale from a
# tensor's or block's largest magnitude): a one-ulp difference upstream moves the grid or
# lands a value on the other side of a half-way point, and a value one 8-bit step (1/127 of
# its block's range) apart flows on. onnxruntime's MatMulNBits quantizes its activations so
# at accuracy level 4 only.
DYNAMIC_QUANTIZATION = frozenset({("ai.onnx", "DynamicQuantizeLinear"),
                                  ("com.microsoft", "DynamicQuantizeMatMul"),
                                  ("com.microsoft", "DynamicQuantizeLSTM")})
# ...compared at float16's tolerance, as a model computing in float16 is (an 8-bit grid is
# coarser, but a value lands on another step of it only where two runs differ by an ulp)
DYNAMICALLY_QUANTIZED_AS = "float16"


def dynamically_quantized(model) -> list[str]:
    """The ``domain::op`` of the model's nodes (any graph or function) that quantize
    activations on a grid computed at run time (:data:`DYNAMIC_QUANTIZATION`, and
    MatMulNBits at accuracy level 4)."""
    from rewriter.comparison.anchoring import quantizes_at_run_time
    from rewriter.graph.walk import iter_scopes

    found = set()
    for scope in iter_scopes(model):
        for node in scope.nodes:
            key = (node.domain or "ai.onnx", node.op_type)
            if key in DYNAMIC_QUANTIZATION or quantizes_at_run_time(node):
                found.add("::".join(key))
    return sorted(found)


def computed_in(model) -> tuple[str | None, list[str]]:
    """The float type whose tolerance ``model``'s outputs are compared at
    (:func:`narrowest_float`, or :data:`DYNAMICALLY_QUANTIZED_AS` where it quantizes
    activations at run time and is not narrower), and the ops that quantize so."""
    narrowest = narrowest_float(model)
    quantized = dynamically_quantized(model)
    if quantized and (narrowest is None or _FLOAT_WIDTHS.index(narrowest)
                      < _FLOAT_WIDTHS.index(DYNAMICALLY_QUANTIZED_AS)):
        return DYNAMICALLY_QUANTIZED_AS, quantized
    return narrowest, quantized


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
    # elements per size of |error| (ERROR_BINS; finite values only), None for text
    error_histogram: list[int] | None = None
    regime: str = ""  # the input regime of ``input_set`` (rewriter.io.regimes)
    regime_set: int = 0  # its position within that regime
    # "values" (element by element) or "distribution" (an output downstream of random ops:
    # rewriter.comparison.randomness), with the statistical test's figures
    compared_as: str = "values"
    distribution: dict[str, Any] | None = None

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
            "input_set": self.input_set, "error_histogram": self.error_histogram,
            "regime": self.regime or None, "regime_set": self.regime_set,
            "compared_as": self.compared_as, "distribution": self.distribution,
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


# the report's error distribution: |error| exactly 0, at most 1e-12, then per decade up to
# 1e2, then above 1e2 (17 bins)
ERROR_BINS = tuple(10.0 ** k for k in range(-12, 3))


def error_histogram(diff: np.ndarray) -> list[int]:
    """How many of the (finite) absolute errors ``diff`` fall in each bin of ERROR_BINS."""
    zero = int((diff == 0).sum())
    bins = np.searchsorted(np.asarray(ERROR_BINS), diff[diff != 0], side="left")
    return [zero, *np.bincount(bins, minlength=len(ERROR_BINS) + 1).tolist()]


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
        c.error_histogram = error_histogram(diff.ravel())
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
            bound = tol.atol + tol.rtol * np.abs(ef)
            if tol.scale and finite.any():
                bound = bound + tol.scale * float(np.abs(ef[finite]).max())
            within = same | (finite & (diff <= bound))
        c.mismatches = int((~within).sum())
        if finite.any():
            c.max_abs = float(diff[finite].max())
            c.error_histogram = error_histogram(diff[finite])
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
    error_kind: str = ""  # error | crash | timeout | oom | unsupported | no-runtime
    seconds: float = 0.0
    localization: Localization | None = None
    runtime: str = ""  # where it ran, when not on the target itself (``opset:N``, partial)
    # where it ran when not on the target itself: a rewriter.comparison.oracles.Runner
    runner: Any = field(default=None, repr=False, compare=False)
    # the rewritten model's outputs (per input set), for a second opinion on a mismatch
    produced: Any = field(default=None, repr=False, compare=False)
    # a partial result the target could not run, run on the chain instead: {"runtime",
    # "status", "max_abs"} (evidence about what was changed, not the target's verdict)
    elsewhere: dict[str, Any] | None = None
    # compared like for like: with the original run on this target as its users load it
    # (Target.runs_otherwise_as_oracle), not with the oracle's run
    as_loaded: bool = False
    # a mismatch of a dynamically quantized model judged again with its activations
    # anchored at its run-time quantization points (rewriter.comparison.anchoring)
    anchored: Anchoring | None = None

    @property
    def max_abs(self) -> float | None:
        """The largest error of the outputs compared value by value (not those compared as
        distributions)."""
        values = [c.max_abs for c in self.outputs
                  if c.max_abs is not None and c.compared_as == "values"]
        return max(values) if values else None

    @property
    def verdict(self) -> str:
        """This target's own verdict: ``verified`` (its outputs equal the oracle's),
        ``mismatch``, or ``unverified`` (the rewritten model did not run there)."""
        return {EQUAL: VERIFIED, MISMATCH: MISMATCHED}.get(self.status, UNVERIFIED)

    def as_dict(self) -> dict[str, Any]:
        worst = self.max_abs
        return {
            "target": self.target, "runtime": self.runtime or self.target,
            "status": self.status, "verdict": self.verdict, "error": self.error or None,
            "error_kind": self.error_kind or None, "seconds": round(self.seconds, 3),
            "max_abs": worst if worst is None or math.isfinite(worst) else str(worst),
            "outputs": [c.as_dict() for c in self.outputs], "as_loaded": self.as_loaded,
            "anchored": self.anchored.as_dict() if self.anchored else None,
            "localization": self.localization.as_dict() if self.localization else None,
            "elsewhere": self.elsewhere,
        }

    @property
    def changes_hold_elsewhere(self) -> bool:
        """A partial result this target could not run, equal to the original on the chain."""
        return self.elsewhere is not None and self.elsewhere["status"] == EQUAL


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
    # on a mismatch, the original run again on the next runtime of the chain:
    # {"target", "agrees" (with the oracle), "max_abs" (between the two), "result_agrees"}
    second_opinion: dict[str, Any] | None = None
    # the input regimes (rewriter.io.regimes.Regime), those skipped too, in the order
    # their sets were fed
    regimes: list[Any] = field(default_factory=list)
    # outputs downstream of random ops, compared as distributions: output -> the ops
    random_outputs: dict[str, list[str]] = field(default_factory=dict)
    # outputs whose interface the rewrite adapted (--adapt-interface): one line each; the
    # original's values were converted to the adapted form before they were compared
    interface: list[str] = field(default_factory=list)
    # when two runtimes disagreed on the original and the test data's own outputs sided
    # with the second one, which became the oracle: one line saying so
    tiebreak: str = ""
    # what the oracle's run of the original read otherwise than as it is written (an
    # invalid model: rewriter.detect.attributes): one line each
    original_repairs: list[str] = field(default_factory=list)

    @property
    def oracles_disagree(self) -> bool:
        return bool(self.second_opinion) and not self.second_opinion["agrees"]

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
    def verdict(self) -> str:
        """``verified``, ``mismatch`` or ``unverified`` (:mod:`rewriter.verify.verdicts`). A
        mismatch is outputs compared and found different (and, where a second runtime runs the
        original, that runtime agreeing with the oracle); a rewritten model that could not
        be run (refused, raised, crashed, timed out) decides nothing, nor do two runtimes
        that disagree on the original."""
        if self.error or self.oracle_error or not self.targets or self.oracles_disagree:
            return UNVERIFIED
        if any(t.status == MISMATCH for t in self.targets):
            return MISMATCHED
        return VERIFIED if all(t.status == EQUAL for t in self.targets) else UNVERIFIED

    @property
    def exit_code(self) -> int:
        """0 verified, 1 mismatch, 3 unverified; 2 when the inputs or models were bad."""
        if self.error:
            return EXIT_BAD_INPUT
        return EXIT_CODES[self.verdict]

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
        return "; ".join(f"{_where(t)}: {t.error}{_elsewhere_text(t)}" for t in self.targets
                         if t.status == ERROR)

    def summary(self) -> str:
        """One line: the verdict and the largest error, or why there is none."""
        verdict = self.verdict
        against = f"against the original run on {self.oracle}" if self.oracle else ""
        if self.oracle == EXPECTED:
            against = "against the expected outputs"
        elif self.interface and against:
            against += " (its outputs through the interface adapter)"
        if self.original_repairs and against:
            against += f" ({'; '.join(self.original_repairs)})"
        quantized = self.tolerances.get("dynamically_quantized_by")
        if quantized and against and not self.tolerances.get("atol") and not \
                self.tolerances.get("rtol"):
            against += (f" at {DYNAMICALLY_QUANTIZED_AS}'s tolerance (activations quantized at "
                        f"run time by {', '.join(quantized)})")
        if verdict == VERIFIED:
            worst = self.max_abs
            err = "" if worst is None else f", max abs error {worst:.3g}"
            names = ", ".join(_where(t) for t in self.targets)
            text = f"equal within tolerance on {names} {against}{self._coverage()}{err}"
            text += self._distributions() + (f"; {self.tiebreak}" if self.tiebreak else "")
            return (text + self._narrowed()).replace("  ", " ")
        if verdict == MISMATCHED:
            parts = []
            for t in self.targets:
                if t.status != MISMATCH:
                    continue
                bad = [c for c in t.outputs if not c.ok]
                text = f"{_where(t)}: {', '.join(c.name for c in bad)} differ"
                if t.max_abs is not None:
                    text += f" (max abs error {t.max_abs:.3g})"
                if bad and bad[0].regime and len(self.regimes) > 1:
                    text += f" in regime {bad[0].regime} (its set {bad[0].regime_set})"
                if t.localization is not None and t.localization.status == "found":
                    s = t.localization.region.stamp
                    if s is not None:
                        text += f"; first diverging region: {t.localization.region.label} by " \
                                f"rule {s.rule!r} of plugin {s.plugin!r}"
                parts.append(text)
            second = self.second_opinion
            if second:
                parts.append(f"{second['target']} agrees with {self.oracle} on the original")
            if self.tiebreak:
                parts.append(self.tiebreak)
            return f"differs from {against.removeprefix('against ')}: " + "; ".join(parts)
        if self.oracles_disagree:
            second = self.second_opinion
            which = second["target"] if second["result_agrees"] else "neither"
            return (f"could not decide: the original's outputs on {self.oracle} and on "
                    f"{second['target']} differ (max abs {_num_text(second['max_abs'])}); "
                    f"the rewritten model agrees with {which}")
        return f"could not compare: {self.why_not_run()}"

    def _narrowed(self) -> str:
        """``; openvino computes float64 in float32 (...)`` for a target whose float64
        outputs were judged at a narrower type's tolerance."""
        narrowed = (self.tolerances or {}).get("float64_as") or {}
        parts = [f"{t.target} computes float64 in {narrowed[t.target]}" for t in self.targets
                 if t.target in narrowed and any(c.expected_dtype == "float64" for c in t.outputs)]
        return (f"; {', '.join(parts)} (its float64 outputs compared at that type's "
                "tolerance)") if parts else ""

    def _coverage(self) -> str:
        """`` over 7 input sets (typical, edges, ...)`` when more than one regime ran."""
        ran = [r for r in self.regimes if r.ran]
        if len(ran) < 2:
            return ""
        sets = sum(len(r.sets) for r in ran)
        return f" over {sets} input sets ({', '.join(r.name for r in ran)})"

    def _distributions(self) -> str:
        names = list(dict.fromkeys(c.name for t in self.targets for c in t.outputs
                                   if c.compared_as == "distribution"))
        if not names:
            return ""
        from rewriter.comparison.randomness import TEST_NAME

        ops = list(dict.fromkeys(op for n in names
                                 for op in self.random_outputs.get(n.split("[")[0], [])))
        return (f"; {', '.join(names)} compared as distributions, not values (random ops "
                f"upstream: {', '.join(ops)}; {TEST_NAME})")

    @property
    def oracle_label(self) -> str:
        """Where the original was evaluated, for people."""
        return "the expected outputs" if self.oracle == EXPECTED else self.oracle

    def as_dict(self) -> dict[str, Any]:
        worst = self.max_abs
        return {
            "original": self.original, "rewritten": self.rewritten, "status": self.status,
            "verdict": self.verdict, "ok": self.ok, "exit_code": self.exit_code,
            "summary": self.summary(),
            "error": self.error or None, "oracle": self.oracle or None,
            "oracle_error": self.oracle_error or None, "oracle_attempts": self.oracle_attempts,
            "inputs": self.inputs, "tolerances": self.tolerances,
            "max_abs": worst if worst is None or math.isfinite(worst) else str(worst),
            "targets": [t.as_dict() for t in self.targets], "seconds": round(self.seconds, 3),
            "second_opinion": self.second_opinion, "regimes": self.regime_dicts(),
            "random_outputs": self.random_outputs, "interface": self.interface,
            "tiebreak": self.tiebreak or None, "original_repairs": self.original_repairs,
        }

    def regime_dicts(self) -> list[dict[str, Any]]:
        """The regimes as the JSON report has them (``first_set``: the position of the
        regime's first set among all sets fed)."""
        out, first = [], 0
        for r in self.regimes:
            out.append(r.as_dict(first if r.ran else None))
            first += len(r.sets) if r.ran else 0
        return out


def _num_text(x) -> str:
    return "-" if x is None else (f"{x:.3g}" if math.isfinite(x) else str(x))


def _elsewhere_text(t: TargetComparison) -> str:
    """What a partial result that ``t``'s runtime could not run showed on the chain."""
    if t.elsewhere is None:
        return ""
    state = ("equals the original" if t.elsewhere["status"] == EQUAL else
             "differs from the original" if t.elsewhere["status"] == MISMATCH else
             "could not run")
    return f" (what was changed {state} on {t.elsewhere['runtime']})"


def _where(t: TargetComparison) -> str:
    if t.as_loaded:
        return f"{t.target} (against the original on {t.target} as its users load it)"
    where = f"{t.target} (run on {t.runtime})" if t.runtime and t.runtime != t.target \
        else t.target
    if t.anchored is not None and t.status == EQUAL:
        n = len(t.anchored.points)
        where += (f" (segment by segment: its activations anchored at the oracle's values at "
                  f"{n} run-time quantization point{'s' if n != 1 else ''}; unanchored, max "
                  f"abs {_num_text(t.anchored.unanchored_max_abs)})")
    return where


# -- the comparison ------------------------------------------------------------------------


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
    save_inputs: str | os.PathLike | None = None,
    off_target: Sequence[str] = (),
    localize_nodes: bool = False,
    quick: bool = False,
    informed_by: Sequence[ModelProto] = (),
) -> CompareReport:
    """Run the rewritten model on each target and compare it with the original.

    ``compare(original, rewritten, targets)`` evaluates ``original`` on the oracle: the
    first runtime of the chain (:mod:`~rewriter.comparison.oracles`) that runs it
    (onnxruntime, onnxruntime with plugin kernels, OpenVINO, the reference evaluator with
    plugin kernels), whatever
    ``targets`` are; ``compare(model, expected=...)`` checks one model against outputs
    computed elsewhere (PyTorch, a test-data folder). With both, ``expected`` is the oracle
    and the original is only run to localize a divergence.

    Args:
        model: the original model (a path, ``ModelProto`` or ``LoadedModel``); the model
            under test when ``rewritten`` is None.
        rewritten: the rewritten model.
        targets: target names to run the rewritten model on. A target that cannot run
            models (``opset:N``) has the rewritten model run on the chain instead.
        expected: reference outputs: a dict of arrays by output name, a list of arrays in
            output order, a list of dicts (one per input set), or .npz / test-data paths.
        inputs: a dict of arrays, a list of dicts, or .npz / .pb / test-data paths; default:
            the input regimes of :mod:`rewriter.io.regimes`, generated from the declared
            inputs: ``runs`` typical sets with seeds ``seed``, ``seed + 1``, ..., symbolic
            dimensions from ``dims``, then edges, booleans, other dimensions, special values
            and the test data beside the original (``quick``: the typical sets alone).
        atol, rtol: tolerance overrides: a number for every output, or by output name
            (``{"y": 1e-3}``; key None for every output).
        original_target: evaluate the original on this target only (``onnxruntime`` covers
            onnxruntime with plugin kernels too).
        reference_ops: ``OpRun`` classes for the reference evaluator (ops of the original it
            lacks), added to those the installed plugins' kernels provide. They are pickled
            by reference to the child process, so they must be importable (module level).
        custom_op_libraries: custom-op libraries to register in onnxruntime.
        timeout: seconds each run (load and every input set) may take in its child process.
        memory_limit: bytes of address space each child process may use.
        localize: on a mismatch, find the first diverging rewritten region.
        save_inputs: write the inputs used here (a folder: every set, as ONNX test data;
            a ``.npz`` file: the set that decided the verdict), so a verdict can be
            reproduced with ``inputs=``.
        localize_nodes: localize by the original's own nodes (each main-graph node a
            region) instead of the rewritten regions: for a model compared with itself on
            another runtime (:mod:`~rewriter.comparison.numbers`).
        off_target: targets the rewritten model still holds findings for (a partial
            rewrite): it is run on the target all the same (a target's verdict comes from
            its own runtime), and a failure there says why.
        quick: the typical sets alone, no other regime (faster, proves less).
        informed_by: models whose operators also decide how the generated inputs are read
            (an index, data) and which outputs the special-values regime compares: the
            original of a rewritten model checked on its own (whose decomposed bodies read
            an index as arithmetic).

    Returns:
        a :class:`CompareReport`; ``verdict`` is ``verified``, ``mismatch`` or
        ``unverified`` and ``exit_code`` 0, 1 or 3 (2 when the inputs do not fit the model;
        ``why_not_run()`` says why). Runtime failures are results, never exceptions.

    Raises:
        TargetError: a target name is unknown.
        ModelError: a model file cannot be loaded.
    """
    from rewriter.comparison.oracles import Runner, after_refusal, runners_for
    from rewriter.comparison.randomness import random_outputs
    from rewriter.detect.targets import TargetOptions, resolve_targets
    from rewriter.io.inputs import InputError, feed_sets
    from rewriter.io.model import as_loaded
    from rewriter.io.regimes import GIVEN, Regime, input_regimes
    from rewriter.manager import load_plugins

    start = time.perf_counter()
    plugins = plugins or load_plugins()
    if rewritten is None:
        if expected is None:
            raise RewriterError("compare needs the rewritten model, or expected outputs")
        original, subject = None, as_loaded(model)
        read_as_inputs = 0
    else:
        original, subject = as_loaded(model), as_loaded(rewritten)
        original = with_missing_imports(original, subject.model)
        original, read_as_inputs = with_attributes_read_as_inputs(original)
    options = TargetOptions(custom_op_libraries=tuple(custom_op_libraries), confirm=False)
    specs = list(dict.fromkeys(targets))
    resolved = resolve_targets(plugins, specs, options)
    tolerances = Tolerances(atol, rtol)
    tolerances.computed_in, tolerances.quantized_by = computed_in(
        original.model if original is not None else subject.model)
    tolerances.float64_as = {spec: t.computes_float64_as for spec, t in zip(specs, resolved)
                             if t.computes_float64_as}
    report = CompareReport(str(original.path) if original else None, str(subject.path),
                           tolerances=tolerances.as_dict())
    if read_as_inputs:
        report.original_repairs.append(
            f"{read_as_inputs} node(s)' attributes their operator takes as inputs read as "
            "those inputs")

    runner = shared_runner(plugins, memory_limit=memory_limit)
    runner.start()  # a new child imports its runtimes while we prepare the inputs
    try:
        source = original.model if original is not None else subject.model
        try:
            if inputs is None:
                if runs < 1:
                    raise InputError("runs must be at least 1")
                report.regimes = input_regimes(
                    source, seed=seed, runs=runs, dims=dims,
                    also=[*([subject.model] if original else []), *informed_by],
                    quick=quick or expected is not None,  # given outputs are for typical sets
                    path=original.path if original is not None else None,
                    spec_model=informed_by[0] if informed_by else source)
                report.inputs = {"source": "generated", "seeds": [seed + i for i in range(runs)],
                                 "dims": dict(dims or {})}
            else:
                report.regimes = [Regime(GIVEN, "the inputs given",
                                         feed_sets(inputs, source, "inputs"))]
                report.inputs = {"source": "given"}
            _check_regimes(report.regimes, [m for m in (subject, original) if m is not None])
            feeds, plan = _flatten(report.regimes)
            report.inputs.update(_describe_inputs(feeds))
            want = (feed_sets(expected, subject.model, "expected")
                    if expected is not None else None)
            if want is not None and len(want) != len(feeds):
                raise InputError(f"expected: {len(want)} output set(s) for {len(feeds)} input "
                                 "set(s)")
            if save_inputs is not None:  # refused before any run; written after them
                from rewriter.io.model import input_files
                from rewriter.io.output import check_output_path

                check_output_path(save_inputs, folder_ok=not str(save_inputs).endswith(
                    ".npz"), protected=[p for m in (original, subject) if m is not None
                                        for p in input_files(m)])
        except RewriterError as e:
            report.error = str(e)
            return report
        report.random_outputs = {**random_outputs(subject.model), **(
            random_outputs(original.model) if original is not None else {})}
        plan.random = report.random_outputs

        def job(runner_target: str, proto, base_dir, feed_sets, ops=(),
                libraries=None, oracle: bool = False) -> Job:
            return Job.make(runner_target, proto, base_dir, feed_sets, plugins=plugins,
                            custom_op_libraries=custom_op_libraries if libraries is None
                            else libraries,
                            reference_ops=tuple(reference_ops) + tuple(ops), keep_going=True,
                            oracle=oracle)

        def run(j: Job, what: str = "") -> RunResult:
            with progress.step(what or f"a run on {j.target}"):
                return runner.run(j, timeout)

        def chain(loaded):
            return runners_for(loaded.model, plugins, custom_op_libraries=custom_op_libraries,
                               reference_ops=reference_ops, also=specs)

        # the oracle: the first runtime of the chain that runs the original
        oracle = None
        if want is not None:
            report.oracle = EXPECTED
        else:
            found = runners_for(original.model, plugins,
                                custom_op_libraries=custom_op_libraries,
                                reference_ops=reference_ops, only=original_target, also=specs)
            # runtimes asked one by one, up to the first that runs it (each check walks the
            # whole model); a runtime's refusal at run time may queue its kernel fallback
            queued, pending = [], iter(found)
            while queued or (candidate := next(pending, None)) is not None:
                if queued:
                    candidate = queued.pop(0)
                if not isinstance(candidate, Runner):
                    report.oracle_attempts.append(candidate)
                    continue

                def original_on(sets, c=candidate):
                    return run(job(c.target, c.model, original.base_dir, sets, c.reference_ops,
                                   c.libraries, oracle=True), f"the original on {c.label}")

                result = original_on(feeds)
                if not result.ok and result.kind != "error" and len(plan.required) < len(feeds):
                    # a crash, hang or exhaustion with every regime: the required sets alone
                    again = original_on([feeds[i] for i in plan.required])
                    if again.ok:
                        # then each other regime alone: only those that crash it go
                        first, crashed = plan.first, set()
                        for regime in report.regimes:
                            if regime.ran and regime.name != first:
                                alone = original_on(regime.sets)
                                if not alone.ok and alone.kind != "error":
                                    crashed.add(regime.name)
                        _skip_regimes(report.regimes, lambda r, crashed=crashed: r.name in crashed,
                                      f"the original's run with them {_failure(result)} on "
                                      f"{candidate.label}")
                        feeds, plan = _replan(report.regimes, plan)
                        result = again if len(plan.required) == len(feeds) else \
                            original_on(feeds)
                result = _required_ran(result, plan)
                report.oracle_attempts.append(
                    {"target": candidate.label, "status": result.kind, "error": result.error})
                if result.kind == "error":  # a node refused at run time: its kernel next
                    instead = after_refusal(candidate, result.error, plugins,
                                            custom_op_libraries)
                    if instead is not None:
                        queued.insert(0, instead)
                if result.ok:
                    outputs = _drop_failed(report.regimes, plan, result, candidate.label)
                    feeds, plan = _replan(report.regimes, plan)
                    report.inputs["sets"] = len(feeds)
                    if not any(c is None or c for c in plan.compared):
                        # every set the original ran on was dropped: nothing is compared,
                        # and nothing is verified
                        report.oracle_error = "no input set left to compare on: " + "; ".join(
                            f"{r.name}: {r.skipped}" for r in report.regimes if r.skipped)
                        return report
                    want, recast = as_declared_floats(outputs, original.model)
                    if recast:
                        report.oracle_attempts[-1]["note"] = (
                            f"{candidate.label} returned {', '.join(recast)} in another float "
                            "type than the model declares; cast to the declared type")
                    report.oracle, oracle = candidate.label, candidate
                    _check_shipped_outputs(report.regimes, plan, want, tolerances)
                    break
            if want is not None:
                want = _through_adapters(report, want, original.model, subject.model)
            if want is None:
                report.oracle_error = report.oracle_error or "; ".join(
                    f"{a['target']}: {a['error']}" for a in report.oracle_attempts) or \
                    "no installed runtime can run it"
                return report

        as_loaded = _as_users_load_it(specs, resolved, oracle, original, subject, feeds, run,
                                      job, report)
        # the rewritten model on every target: a target's verdict comes from its own
        # runtime; a target that runs no models (opset:N) has it run on the chain
        subject_chain = None
        for spec, target in zip(specs, resolved):
            if target.runs_models:
                result = run(job(spec, subject.model, subject.base_dir, feeds),
                             f"the rewritten model on {spec}")
                tc = _judge_target(spec, result, as_loaded.get(spec, want), tolerances, plan)
                tc.as_loaded = spec in as_loaded
                if not result.ok and spec in off_target:
                    tc.error = (f"{spec} cannot run the rewritten model (it still holds "
                                f"nodes {spec} refuses): {tc.error}")
                    # what was changed, checked on the chain all the same: evidence for a
                    # partial rewrite, not this target's verdict
                    subject_chain = subject_chain or chain(subject)
                    for candidate in subject_chain.runners:
                        other = run(job(candidate.target, candidate.model, subject.base_dir,
                                        feeds, candidate.reference_ops, candidate.libraries,
                                        oracle=True),
                                    f"the rewritten model on {candidate.label}")
                        if other.ok:
                            judged = _judge_target(spec, other, want, tolerances, plan)
                            tc.elsewhere = {"runtime": candidate.label,
                                            "status": judged.status,
                                            "max_abs": judged.max_abs}
                            if judged.status == MISMATCH:  # what was changed is wrong:
                                # a mismatch, said to be found on that runtime
                                judged.runtime, judged.runner = candidate.label, candidate
                                judged.elsewhere = tc.elsewhere
                                tc = judged
                            break
                report.targets.append(tc)
                continue
            subject_chain = subject_chain or chain(subject)
            why = "it runs no models"
            tc = TargetComparison(spec, ERROR, error_kind="no-runtime", error=(
                f"{why}, and no installed runtime runs the rewritten model: "
                + ("; ".join(f"{a['target']}: {a['error']}" for a in subject_chain.skipped)
                   or "none")))
            for candidate in subject_chain.runners:
                # a stand-in for the model's definition: run as the oracle is
                result = run(job(candidate.target, candidate.model, subject.base_dir, feeds,
                                 candidate.reference_ops, candidate.libraries, oracle=True),
                             f"the rewritten model on {candidate.label}")
                tc = _judge_target(spec, result, want, tolerances, plan)
                tc.runtime, tc.runner = candidate.label, candidate
                if result.ok:
                    break
            report.targets.append(tc)

        if oracle is not None and tolerances.quantized_by and not report.interface:
            for i, tc in enumerate(report.targets):
                if tc.status == MISMATCH and not tc.as_loaded:
                    report.targets[i] = _judged_anchored(run, job, original, subject, tc,
                                                         feeds, tolerances, oracle, plan)
        if oracle is not None and any(t.status == MISMATCH and not t.as_loaded
                                      for t in report.targets):
            later = [*queued, *pending]  # the runtimes after the oracle, asked now
            oracle = _second_opinion(
                report, [c for c in later if isinstance(c, Runner)],
                lambda c: run(job(c.target, c.model, original.base_dir, feeds,
                                  c.reference_ops, c.libraries, oracle=True)),
                want, tolerances, original.model, plan, subject.model) or oracle

        if save_inputs is not None:
            try:
                _save_inputs(report, save_inputs, feeds, source, original, subject)
            except RewriterError as e:
                report.error = str(e)
                return report

        if localize and original is not None:
            for tc in report.targets:
                if tc.status == MISMATCH:
                    if oracle is None:
                        oracle = next(iter(chain(original).runners), None)
                    tc.localization = _localize(run, job, original, subject, tc, feeds,
                                                tolerances, oracle, localize_nodes)
    finally:
        report.seconds = time.perf_counter() - start
    return report


# -- regimes in a comparison ---------------------------------------------------------------


def _as_users_load_it(specs, resolved, oracle, original, subject, feeds, run, job,
                      report: CompareReport) -> dict[str, list[dict]]:
    """spec -> the original's outputs on that target as its users load it, for each target
    that runs the original as it is (it is the oracle's runtime, without plugin kernels)
    and computes otherwise as the oracle (onnxruntime's Q/DQ fusions, thread count): the
    rewritten model there is compared like for like, since the numbers its users got
    before the rewrite are the ones it must keep. A run that fails leaves the oracle's."""
    found: dict[str, list[dict]] = {}
    if oracle is None or original is None:
        return found
    for spec, target in zip(specs, resolved):
        if (not target.runs_models or spec != oracle.target or oracle.label != spec
                or not target.runs_otherwise_as_oracle(original.model)):
            continue
        result = run(job(spec, oracle.model, original.base_dir, feeds, oracle.reference_ops,
                         oracle.libraries), f"the original on {spec} as its users load it")
        if not result.ok or result.set_errors:
            continue
        theirs, _ = as_declared_floats(result.outputs, original.model)
        theirs = _through_adapters(report, theirs, original.model, subject.model)
        if theirs is not None:
            found[spec] = theirs
    return found


def _through_adapters(report: CompareReport, want: list[dict], original, subject
                      ) -> list[dict] | None:
    """The original's outputs in the form ``subject`` gives them, where the rewrite adapted
    its interface (:mod:`rewriter.io.interface`: ZipMap's maps as the probabilities, string
    labels as indices), said in ``report.interface``; None (and ``report.oracle_error``)
    when they do not convert: nothing is compared then, and the verdict is unverified."""
    from rewriter.io.interface import InterfaceError, new_adaptations, to_adapted

    try:
        adaptations = new_adaptations(original, subject)
        if not adaptations:
            return want
        report.interface = [a.describe() for a in adaptations.values()]
        return [to_adapted(outputs, adaptations) for outputs in want]
    except InterfaceError as e:
        report.oracle_error = (f"the original's outputs do not convert to the rewritten "
                               f"model's interface: {e}")
        return None


def _check_regimes(regimes, models) -> None:
    """Every set must fit every model: the first regime's (typical, given) raise
    InputError; another regime's that do not are skipped, saying why."""
    from rewriter.io.inputs import InputError, check_feeds

    for k, regime in enumerate(regimes):
        if not regime.ran:
            continue
        try:
            for i, f in enumerate(regime.sets):
                where = f"input set {i}" if len(regime.sets) > 1 else "inputs"
                if k:
                    where = f"{regime.name} {where}"
                for m in models:
                    check_feeds(f, m.model, where)
        except InputError as e:
            if not k:
                raise
            regime.sets, regime.skipped = [], str(e)


def _flatten(regimes) -> tuple[list[dict[str, Any]], SetPlan]:
    """The sets of the regimes that run, in order, and how each is compared."""
    feeds: list[dict[str, Any]] = []
    plan = SetPlan()
    for regime in regimes:
        if not regime.ran:
            continue
        for j, f in enumerate(regime.sets):
            feeds.append(f)
            plan.labels.append((regime.name, j))
            plan.compared.append(regime.compared)
    plan.first = regimes[0].name if regimes else ""
    plan.required = [i for i, (name, _) in enumerate(plan.labels) if name == plan.first]
    return feeds, plan


def _replan(regimes, plan: SetPlan) -> tuple[list[dict[str, Any]], SetPlan]:
    """:func:`_flatten` again once regimes were skipped."""
    new_feeds, new_plan = _flatten(regimes)
    new_plan.random = plan.random
    return new_feeds, new_plan


def _skip_regimes(regimes, which, reason: str) -> None:
    for regime in regimes:
        if regime.ran and which(regime):
            regime.sets, regime.skipped = [], reason


def _failure(result: RunResult) -> str:
    return {"crash": "crashed", "timeout": "timed out", "oom": "ran out of memory"}.get(
        result.kind, "failed") + (f" ({_one_line(result.error)})" if result.error else "")


def _one_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0]


def _required_ran(result: RunResult, plan: SetPlan) -> RunResult:
    """A run whose required sets (the typical or given ones) failed is a failure of the
    runtime, as a single-run job's would be; generated typical sets excepted when the sets
    of some other regime ran."""
    if not result.ok or not result.set_errors:
        return result
    failed = [i for i in plan.required if i in result.set_errors]
    if not failed:
        return result
    if plan.first == "typical" and len(result.set_errors) < len(plan.labels):
        # generated inputs the model cannot take (a beam count that must divide a batch
        # of the same symbol) while another regime's it can: that regime decides, and the
        # typical one is skipped saying why
        return result
    i = failed[0]
    where = f" on input set {i}" if len(plan.labels) > 1 else ""
    return RunResult("error", error=f"failed{where}: {result.set_errors[i]}",
                     seconds=result.seconds)


def _drop_failed(regimes, plan: SetPlan, result: RunResult, label: str) -> list[dict]:
    """The oracle's outputs without the regimes the original failed on (skipped, saying
    why), in the order of the remaining sets."""
    failed_regimes = {}
    for i, message in sorted(result.set_errors.items()):
        name, j = plan.label(i)
        failed_regimes.setdefault(name, f"the original fails on its set {j} on {label}: "
                                        f"{message}")
    for regime in regimes:
        if regime.ran and regime.name in failed_regimes:
            regime.sets, regime.skipped = [], failed_regimes[regime.name]
    return [out for i, out in enumerate(result.outputs or [])
            if plan.label(i)[0] not in failed_regimes]


def _check_shipped_outputs(regimes, plan: SetPlan, want, tolerances: Tolerances) -> None:
    """Test data's own outputs against the oracle's, noted on the regime."""
    for regime in regimes:
        if not regime.ran or regime.expected is None:
            continue
        worst = None
        for i, name, value in _shipped_values(regime, plan):
            if name in want[i]:
                for c in compare_values(name, value, want[i][name], tolerances, i):
                    worst = c if worst is None else _worse(worst, c)
        if worst is None:
            continue
        if worst.ok:
            regime.note = "the oracle agrees with the test data's outputs"
        else:
            regime.note = (f"the oracle differs from the test data's outputs: {worst.name} "
                           f"(max abs {_num_text(worst.max_abs)})")


def _shipped_values(regime, plan: SetPlan):
    """``(input set, output name, value)`` of each output the test data of ``regime`` ships
    (``output_*.pb``)."""
    for j, shipped in enumerate(regime.expected or ()):
        i = plan.labels.index((regime.name, j))
        for name, value in shipped.items():
            yield i, name, value


def _save_inputs(report: CompareReport, path, feeds, source, original, subject) -> None:
    """The inputs used, in the model's input order (test data is positional): all sets to
    a test-data folder, or to a ``.npz`` file the one set that decided the verdict (the
    worst set of the first mismatching target, else the first set)."""
    from rewriter.io.inputs import save_feed_sets
    from rewriter.io.model import input_files

    order = {i.name: k for k, i in enumerate(source.graph.input)}
    chosen = list(range(len(feeds)))
    if str(path).endswith(".npz") and len(feeds) > 1:
        bad = [c for t in report.targets if t.status == MISMATCH for c in t.outputs
               if not c.ok]
        chosen = [bad[0].input_set if bad else 0]
        report.inputs["saved_sets"] = chosen
    ordered = [dict(sorted(feeds[i].items(), key=lambda kv: order.get(kv[0], 1 << 30)))
               for i in chosen]
    keep = [p for m in (original, subject) if m is not None for p in input_files(m)]
    report.inputs["saved"] = str(save_feed_sets(path, ordered, protected=keep))


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


def with_attributes_read_as_inputs(original):
    """The original with the attributes its nodes give where their operator takes an input
    (``rewriter.detect.attributes``) moved to those inputs, and how many nodes changed."""
    import dataclasses

    from rewriter.detect.attributes import with_attributes_as_inputs

    model, changed = with_attributes_as_inputs(original.model)
    return (dataclasses.replace(original, model=model) if changed else original), changed


def with_missing_imports(original, rewritten):
    """The original with an opset import for every domain its graphs use but do not import
    (exporters forget them; onnxruntime fills them in, the reference evaluator refuses),
    at the version the rewritten model imports, else the newest (ai.onnx) or 1, and for
    every domain a local function uses and does not import (the save's repair); the same
    LoadedModel when nothing is missing."""
    import dataclasses

    from onnx import ModelProto, defs

    from rewriter.graph.walk import iter_scopes, normalize_domain

    model = original.model
    imported = {normalize_domain(i.domain) for i in model.opset_import}
    used = {normalize_domain(n.domain) for scope in iter_scopes(model)
            if scope.graph is not None for n in scope.nodes}
    missing = sorted(used - imported)
    from rewriter.io.model import missing_imports

    in_functions = [(d, f) for d, f in missing_imports(model) if f is not None]
    if not missing and not in_functions:
        return original
    versions = {normalize_domain(i.domain): i.version for i in rewritten.opset_import}
    copy = ModelProto()
    copy.CopyFrom(model)
    for domain in missing:
        entry = copy.opset_import.add()
        entry.domain = domain
        entry.version = versions.get(domain) or (defs.onnx_opset_version() if domain == ""
                                                 else 1)
    if in_functions:  # a function using a domain it does not import: the same repair there
        from rewriter.io.model import add_imports

        add_imports(copy, missing_imports(copy))
    return dataclasses.replace(original, model=copy)


def _second_opinion(report: CompareReport, runners, run, want, tolerances: Tolerances,
                    model, plan: SetPlan | None = None, subject=None):
    """On a mismatch, the original on the next runtime of the chain that runs it: when it
    agrees with the oracle on an input set where the rewritten model differs (on every
    mismatching target), the mismatch stands; when it does not, the oracles disagree and
    nothing is decided (the report says which one the rewritten model agrees with), unless
    the test data beside the model has outputs that side with this runtime and not with
    the oracle: then this runtime becomes the oracle, every target is judged against it,
    and the report says why (returned: its runner). Sets where only the runtimes disagree
    on the original (an out-of-range cast in the edges regime) are listed, and decide
    nothing. ``subject``: the rewritten model, whose adapted interface
    (``--adapt-interface``) the outputs are converted to, as the oracle's were."""
    from rewriter.io.interface import InterfaceError, new_adaptations, to_adapted

    plan = plan or SetPlan()
    adaptations = new_adaptations(model, subject) if subject is not None else {}
    for candidate in runners:
        result = run(candidate)
        report.oracle_attempts.append({"target": candidate.label, "status": result.kind,
                                       "error": result.error, "note": "second opinion"})
        if not result.ok:
            continue
        other, _ = as_declared_floats([o if o is not None else {} for o in result.outputs],
                                      model)
        other = [None if o is None else x for o, x in zip(result.outputs, other)]
        try:
            other = [None if o is None else to_adapted(o, adaptations) for o in other]
        except InterfaceError:
            continue  # (the oracle's converted: this runtime's outputs differ in kind)
        # sets this runtime failed on are not compared: what it ran must agree
        between = _judge_target(candidate.label, RunResult("ok", other), want, tolerances,
                                plan)
        oracles = _agreeing_sets(want, other, tolerances, plan)
        mismatching = [t for t in report.targets if t.status == MISMATCH and not t.as_loaded]
        stands = all(any(agree and differs is False for agree, differs in zip(
            oracles, _agreeing_sets(want, t.produced, tolerances, plan)))
            for t in mismatching)
        opinion = {"target": candidate.label, "agrees": between.status != MISMATCH or stands,
                   "max_abs": between.max_abs, "result_agrees": True}
        if between.status == MISMATCH:
            opinion["disagreeing_sets"] = [
                "{} {}".format(*plan.label(i)) for i, a in enumerate(oracles) if a is False]
        if not opinion["agrees"]:
            shipped = _shipped_side(report.regimes, plan, want, other, tolerances)
            if shipped is not None:
                report.tiebreak = (
                    f"{report.oracle} and {candidate.label} differ on the original (max abs "
                    f"{_num_text(between.max_abs)}); the test data's outputs beside the model "
                    f"side with {candidate.label} ({report.oracle} is {shipped} off them), so "
                    f"{candidate.label} is the oracle")
                report.oracle = candidate.label
                report.targets = [_rejudged(t, other, tolerances, plan)
                                  for t in report.targets]
                _check_shipped_outputs(report.regimes, plan, other, tolerances)
                return candidate
            opinion["result_agrees"] = all(
                _judge_target(t.target, RunResult("ok", t.produced), other,
                              tolerances, plan).status == EQUAL for t in mismatching)
        report.second_opinion = opinion
        return None
    return None


def _shipped_side(regimes, plan: SetPlan, want, other, tolerances: Tolerances) -> str | None:
    """When the test data's own outputs agree with ``other`` (a second runtime's run of the
    original) on every set of theirs and differ from ``want`` (the oracle's) on one: how far
    the oracle is off them, in words. None: no such outputs, or they do not decide."""
    oracle_worst, other_ok, compared = None, True, False
    for regime in regimes:
        if not regime.ran:
            continue
        for i, name, value in _shipped_values(regime, plan):
            if want[i] is None or other[i] is None:
                return None
            if name not in want[i] or name not in other[i]:
                continue
            compared = True
            other_ok &= all(c.ok for c in compare_values(name, value, other[i][name],
                                                         tolerances, i))
            for c in compare_values(name, value, want[i][name], tolerances, i):
                oracle_worst = c if oracle_worst is None else _worse(oracle_worst, c)
    if not compared or not other_ok or oracle_worst is None or oracle_worst.ok:
        return None
    return f"max abs {_num_text(oracle_worst.max_abs)}"


def _rejudged(tc: TargetComparison, want, tolerances: Tolerances,
              plan: SetPlan) -> TargetComparison:
    """A target's outputs judged again against another oracle's (a run that failed stays)."""
    if tc.produced is None or tc.status == ERROR or tc.as_loaded:
        return tc
    judged = _judge_target(tc.target, RunResult("ok", tc.produced), want, tolerances, plan)
    judged.seconds, judged.runtime, judged.runner = tc.seconds, tc.runtime, tc.runner
    judged.elsewhere = tc.elsewhere
    return judged


def _agreeing_sets(want, got, tolerances: Tolerances, plan: SetPlan) -> list[bool | None]:
    """Per input set: whether ``got`` agrees with ``want`` there (None: one did not run)."""
    out: list[bool | None] = []
    for i, expected in enumerate(want):
        actual = got[i] if got is not None and i < len(got) else None
        if expected is None or actual is None:
            out.append(None)
            continue
        one = SetPlan([plan.label(i)], [plan.compared[i] if i < len(plan.compared) else None],
                      plan.random)
        out.append(_judge_target("", RunResult("ok", [actual]), [expected], tolerances,
                                 one).status == EQUAL)
    return out


@dataclass
class SetPlan:
    """How the outputs of each input set are compared: the regime a set belongs to
    (``labels[i]``: name, position within it), the outputs compared on it (``compared[i]``,
    None: all; the special-values regime compares fewer), and the outputs downstream of
    random ops, compared as distributions over all sets (``random``)."""

    labels: list[tuple[str, int]] = field(default_factory=list)
    compared: list[frozenset[str] | None] = field(default_factory=list)
    random: Mapping[str, list[str]] = field(default_factory=dict)
    first: str = ""  # the regime that must run (typical, or the inputs given)
    required: list[int] = field(default_factory=list)  # its sets

    def label(self, i: int) -> tuple[str, int]:
        return self.labels[i] if i < len(self.labels) else ("", i)

    def compares(self, i: int, name: str) -> bool:
        only = self.compared[i] if i < len(self.compared) else None
        return only is None or name in only

    def where(self, i: int) -> str:
        regime, j = self.label(i)
        return f"input set {i} (regime {regime}, its set {j})" if regime else f"input set {i}"


def _judge_target(spec: str, result: RunResult, want, tolerances: Tolerances,
                  plan: SetPlan | None = None) -> TargetComparison:
    if not result.ok:
        return TargetComparison(spec, ERROR, error=result.error, error_kind=result.kind,
                                seconds=result.seconds)
    tolerances = tolerances.on(spec)
    plan = plan or SetPlan()
    worst: dict[str, OutputComparison] = {}
    order: list[str] = []
    drawn: dict[str, list[tuple[int, Any, Any]]] = {}  # random outputs: (set, want, got)
    for i, (expected, actual) in enumerate(zip(want, result.outputs)):
        if expected is None or actual is None:  # a set that failed (a job kept going)
            continue
        names = list(expected)
        common = [n for n in names if n in actual]
        if not common and len(expected) == len(actual):  # renamed outputs: by position
            actual = dict(zip(names, actual.values()))
        for name in names:
            if not plan.compares(i, name):
                continue
            if name not in actual:
                found = [OutputComparison(name, False, input_set=i,
                                          detail="the rewritten model has no such output")]
            elif name in plan.random:
                if name not in drawn:
                    order.append(name)
                drawn.setdefault(name, []).append((i, expected[name], actual[name]))
                continue
            else:
                found = compare_values(name, expected[name], actual[name], tolerances, i)
            for c in found:
                c.regime, c.regime_set = plan.label(i)
                if c.name not in worst:
                    order.append(c.name)
                    worst[c.name] = c
                else:
                    worst[c.name] = _worse(worst[c.name], c)
    for name, pairs in drawn.items():
        worst[name] = _judge_random(name, pairs, tolerances, plan)
    outputs = [worst[n] for n in order]
    status = EQUAL if all(c.ok for c in outputs) else MISMATCH
    tc = TargetComparison(spec, status, outputs, seconds=result.seconds,
                          produced=result.outputs)
    if result.set_errors and status == EQUAL:  # nothing differs, but not everything ran
        i, message = min(result.set_errors.items())
        tc.status, tc.error_kind = ERROR, "error"
        tc.error = f"failed on {plan.where(i)}: {message}"
    return tc


def _judge_random(name: str, pairs, tolerances: Tolerances, plan: SetPlan) -> OutputComparison:
    """An output downstream of random ops over its sets: equal values on every set are
    equal (the random branch did not run: training off, ratio 0); otherwise shapes and
    element types must agree on each set and the elements, pooled, pass the distribution
    test of :mod:`rewriter.comparison.randomness`, pooled over the sets whose values
    differ."""
    from rewriter.comparison.randomness import distribution_test

    exact, drawn = None, []
    for i, e, a in pairs:
        found = compare_values(name, e, a, tolerances, i)
        for c in found:
            c.regime, c.regime_set = plan.label(i)
            exact = c if exact is None else _worse(exact, c)
        if not all(c.ok for c in found):
            drawn.append((i, e, a))
    if exact is not None and exact.ok:
        return exact
    # the sets whose values differ: those equal drew nothing (training off), and pooled
    # with the others would only dilute the test
    tensors = [(i, np.asarray(e), np.asarray(a)) for i, e, a in drawn
               if isinstance(e, np.ndarray) and isinstance(a, np.ndarray)]
    if len(tensors) != len(drawn):  # sequences, maps: values only
        return exact
    first = tensors[0]
    c = OutputComparison(name, True, tuple(first[1].shape), tuple(first[2].shape),
                         _dtype_name(first[1]), _dtype_name(first[2]),
                         sum(int(e.size) for _, e, _ in tensors), input_set=first[0],
                         compared_as="distribution")
    c.regime, c.regime_set = plan.label(first[0])
    for i, e, a in tensors:
        if e.shape != a.shape or _dtype_name(e) != _dtype_name(a):
            c.expected_shape, c.actual_shape = tuple(e.shape), tuple(a.shape)
            c.expected_dtype, c.actual_dtype = _dtype_name(e), _dtype_name(a)
            c.ok, c.input_set = False, i
            c.regime, c.regime_set = plan.label(i)
            c.detail = (f"shape {list(a.shape)} {_dtype_name(a)}, expected {list(e.shape)} "
                        f"{_dtype_name(e)} on {plan.where(i)}")
            return c
    numeric = [(e, a) for _, e, a in tensors if e.dtype.kind in "biufc" or
               e.dtype.name in _WIDENED]
    if len(numeric) != len(tensors):
        return exact
    stats = distribution_test([_widen(e).real for e, _ in numeric],
                              [_widen(a).real for _, a in numeric])
    c.distribution = stats
    c.ok, c.detail = stats["ok"], stats["detail"]
    return c


def _judged_anchored(run, job, original, subject, tc: TargetComparison, feeds,
                     tolerances: Tolerances, oracle, plan: SetPlan) -> TargetComparison:
    """A mismatching target of a dynamically quantized model, judged again with its
    activations anchored at the run-time quantization points
    (:mod:`rewriter.comparison.anchoring`): equal there, it is equal, with the anchoring
    and the unanchored error on record; otherwise the mismatch stands, the anchored
    comparison beside it."""
    from rewriter.comparison.anchoring import (
        ANCHOR_SUFFIX,
        Anchoring,
        anchored,
        quantized_activations,
    )
    from rewriter.comparison.localize import expose

    points = quantized_activations(original.model, subject.model)
    if not points:
        return tc
    unanchored = tc.max_abs
    before = run(job(oracle.target, expose(oracle.model, points), original.base_dir, feeds,
                     oracle.reference_ops, oracle.libraries, oracle=True),
                 f"the original on {oracle.label}, its quantized activations kept")
    if not before.ok or before.set_errors:
        tc.anchored = Anchoring(points, ERROR, unanchored, error=f"the original with its "
                                f"quantized activations exposed failed on {oracle.label}: "
                                f"{before.error or 'on some input sets'}")
        return tc
    want, _ = as_declared_floats(before.outputs, original.model)
    values = {name: want[0][name] for name in points}
    anchored_feeds = [{**feed, **{n + ANCHOR_SUFFIX: w[n] for n in points}}
                      for feed, w in zip(feeds, want)]
    where = tc.runner
    if where is None:
        result = run(job(tc.target, anchored(subject.model, values), subject.base_dir,
                         anchored_feeds), f"the rewritten model on {tc.target}, anchored")
    else:
        result = run(job(where.target, anchored(where.model, values), subject.base_dir,
                         anchored_feeds, where.reference_ops, where.libraries, oracle=True),
                     f"the rewritten model on {where.label}, anchored")
    judged = _judge_target(tc.target, result, want, tolerances, plan)
    tc.anchored = Anchoring(points, judged.status, unanchored, error=judged.error,
                            outputs=judged.outputs)
    if judged.status != EQUAL:
        return tc
    judged.seconds, judged.runtime, judged.runner = tc.seconds, tc.runtime, tc.runner
    judged.elsewhere, judged.anchored = tc.elsewhere, tc.anchored
    judged.produced = tc.produced
    model_outputs = {o.name for o in original.model.graph.output}
    judged.outputs = [c for c in judged.outputs if c.name.split("[", 1)[0] in model_outputs]
    return judged


# Localizing by node exposes every main-graph node's outputs in both runs: up to this many
LOCALIZE_NODES_MAX = 5000


def _localize(run, job, original, subject, tc: TargetComparison, feeds,
              tolerances: Tolerances, oracle, by_node: bool = False) -> Localization:
    """The first diverging rewritten region: both models run again with every region's
    boundary values exposed as outputs, the original on the oracle's runtime (``oracle``:
    a :class:`rewriter.comparison.oracles.Runner`), the rewritten one where it ran."""
    from rewriter.comparison.localize import (
        Localization,
        boundary_names,
        expose,
        find_regions,
        judge,
        node_regions,
    )

    bad = [c for c in tc.outputs if not c.ok]
    index = bad[0].input_set if bad else 0
    if by_node and len(original.model.graph.node) > LOCALIZE_NODES_MAX:
        return Localization("unavailable", f"not localized: the model has more than "
                            f"{LOCALIZE_NODES_MAX} nodes (each one's outputs would be "
                            "exposed in both runs)", input_set=index)
    regions = (node_regions(original.model) if by_node
               else find_regions(original.model, subject.model))
    if not regions:
        return Localization("no-regions", "no node of the original was rewritten (or the "
                            "rewritten nodes carry no provenance)", input_set=index)
    if oracle is None:
        return Localization("unavailable", "no runtime can run the original model to read "
                            "its intermediate values", input_set=index)
    names = boundary_names(regions)
    feed = [feeds[index]]
    before = run(job(oracle.target, expose(oracle.model, names), original.base_dir, feed,
                     oracle.reference_ops, oracle.libraries, oracle=True))
    if not before.ok:
        return Localization("unavailable", f"the original with its region boundaries exposed "
                            f"failed on {oracle.label}: {before.error}", input_set=index)
    where = tc.runner
    if where is None:
        after = run(job(tc.target, expose(subject.model, names), subject.base_dir, feed))
    else:
        after = run(job(where.target, expose(where.model, names), subject.base_dir, feed,
                        where.reference_ops, where.libraries, oracle=True))
    if not after.ok:
        return Localization("unavailable", f"the rewritten model with its region boundaries "
                            f"exposed failed on {tc.runtime or tc.target}: {after.error}",
                            input_set=index)

    def one(name, e, a):
        found = compare_values(name, e, a, tolerances, index)
        return found[0] if len(found) == 1 else _merge_items(name, found)

    return judge(regions, before.outputs[0], after.outputs[0], one, index, by_node)


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
                   output: str | os.PathLike | None = None, **options) -> None:
    """``rewrite``'s last step: compare the result with the original on every requested
    target, each on its own runtime (a target that runs no models, ``opset:N``, has the
    result run on the chain of :mod:`~.oracles`), and record the comparison in
    ``report.comparison`` and its one-line verdict in ``report.verification["compare"]``
    ("ok" when verified). ``output``: the path the result is to be written to (named in the
    report). Nothing is compared when nothing was changed (no remedy, no repair)."""
    from pathlib import Path

    from rewriter.io.model import LoadedModel

    if not report.applied and not report.repairs:
        report.verification["compare"] = "skipped: nothing was rewritten"
        return
    still = {f.target for f in report.remaining}  # a target that refused the result too
    off_target = [spec for spec, t in zip(specs, resolved) if t.name in still]
    # named after the input so its external data resolves there (it is not written yet)
    subject = LoadedModel(rewritten, Path(f"{loaded.path} (rewritten)"), rewritten.ByteSize(),
                          folder=loaded.base_dir)
    result = compare(loaded, subject, specs, plugins=plugins,
                     custom_op_libraries=custom_op_libraries, off_target=off_target, **options)
    if output is not None:
        result.rewritten = str(output)
    report.comparison = result
    report.verification["compare"] = "ok" if result.verdict == VERIFIED else result.summary()
