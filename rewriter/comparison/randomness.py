"""Random operators: which outputs depend on them, and how such outputs are compared.

Two runtimes draw different random numbers from the same seed (onnxruntime's generator is
not the reference evaluator's nor OpenVINO's), so an output downstream of ``RandomUniform``,
``RandomNormal``, their ``*Like`` forms, ``Bernoulli``, ``Multinomial`` or a ``Dropout`` in
training mode (a ``training_mode`` input that is fed, or a constant True; com.microsoft's
``BiasDropout``/``BitmaskDropout``/``BitmaskBiasDropout`` too) is never compared value by
value: equal values would be luck, different ones no evidence. Such an output is compared
as a distribution instead (:func:`distribution_test`): its shape and element type exactly,
its elements over every input set pooled, with

* the two-sample Kolmogorov-Smirnov test of their distributions (asymptotic p-value, with
  Stephens' small-sample correction),
* a z-test of their means (finite elements),
* where either has NaN, a z-test of the fractions of NaN,

each at ``alpha / number of tests`` (Bonferroni; :data:`ALPHA` = 0.001 overall). The tests
treat elements as independent draws: elements drawn independently but not identically
(Dropout's ``x * mask / (1 - ratio)`` at each position) make them conservative.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import ModelProto, NodeProto, numpy_helper

from rewriter.graph.walk import normalize_domain, outer_references, subgraphs

ALPHA = 1e-3
MIN_ELEMENTS = 8  # fewer pooled elements: no test, said so
RANDOM_OPS = frozenset({("", "RandomUniform"), ("", "RandomNormal"), ("", "RandomUniformLike"),
                        ("", "RandomNormalLike"), ("", "Bernoulli"), ("", "Multinomial")})
# ops random only in training mode: the position of their training_mode input
TRAINING_INPUT = {("", "Dropout"): 2, ("com.microsoft", "BiasDropout"): 4,
                  ("com.microsoft", "BitmaskDropout"): 2,
                  ("com.microsoft", "BitmaskBiasDropout"): 4}
TEST_NAME = ("two-sample Kolmogorov-Smirnov test and z-test of the means (and of the NaN "
             "fractions), Bonferroni at alpha 0.001")


def _constant_values(nodes: Sequence[NodeProto], initializers) -> dict[str, np.ndarray]:
    values = {t.name: t for t in initializers}
    for node in nodes:
        if node.op_type == "Constant" and normalize_domain(node.domain) == "" and node.output:
            for a in node.attribute:
                if a.name == "value":
                    values[node.output[0]] = a.t
    return values


def _draws(node: NodeProto, constants: dict) -> bool:
    """Whether ``node`` itself draws random numbers."""
    key = (normalize_domain(node.domain), node.op_type)
    if key in RANDOM_OPS:
        return True
    position = TRAINING_INPUT.get(key)
    if position is None:
        return False
    if key == ("", "Dropout") and any(a.name == "is_test" for a in node.attribute):
        return not any(a.name == "is_test" and a.i for a in node.attribute)  # opset < 7
    if len(node.input) <= position or not node.input[position]:
        return False  # no training_mode: inference
    fixed = constants.get(node.input[position])
    if fixed is not None:
        try:
            return bool(np.asarray(numpy_helper.to_array(fixed)).reshape(-1)[0])
        except Exception:  # noqa: BLE001 - unreadable: assume it may be True
            return True
    return True


def _random_in(nodes, initializers, functions, seen=frozenset()) -> list[str]:
    """Labels of the nodes of ``nodes`` (and their subgraphs and called model-local
    functions) that draw random numbers."""
    constants = _constant_values(nodes, initializers)
    found = []
    for node in nodes:
        if _draws(node, constants):
            found.append(f"{node.op_type} {node.name!r}" if node.name else node.op_type)
        for _, graph in subgraphs(node):
            found += _random_in(graph.node, graph.initializer, functions, seen)
        key = (normalize_domain(node.domain), node.op_type)
        if key in functions and key not in seen:
            f = functions[key]
            found += _random_in(f.node, (), functions, seen | {key})
    return found


def random_outputs(model: ModelProto) -> dict[str, list[str]]:
    """Each main-graph output of ``model`` that depends on a random draw, with the nodes
    drawing (a node holding them in a subgraph or a called function is named by its
    own op)."""
    functions = {(normalize_domain(f.domain), f.name): f for f in model.functions}
    constants = _constant_values(model.graph.node, model.graph.initializer)
    tainted: dict[str, list[str]] = {}
    for node in model.graph.node:
        sources: list[str] = []
        if _draws(node, constants):
            sources.append(f"{node.op_type} {node.name!r}" if node.name else node.op_type)
        inner = []
        for _, graph in subgraphs(node):
            inner += _random_in(graph.node, graph.initializer, functions)
        key = (normalize_domain(node.domain), node.op_type)
        if key in functions:
            inner += _random_in(functions[key].node, (), functions, frozenset({key}))
        if inner:
            sources.append(f"{node.op_type} {node.name!r}" if node.name else node.op_type)
        read = list(node.input) + (outer_references(node) if node.attribute else [])
        for name in read:
            sources += tainted.get(name, [])
        if sources:
            unique = list(dict.fromkeys(sources))
            for out in node.output:
                if out:
                    tainted[out] = unique
    return {o.name: tainted[o.name] for o in model.graph.output if o.name in tainted}


# -- the statistical comparison -------------------------------------------------------------


def _ks_p(d: float, n: int, m: int) -> float:
    """P(D >= d) for two samples of n and m under the null (asymptotic Kolmogorov
    distribution, Stephens' correction)."""
    en = math.sqrt(n * m / (n + m))
    lam = (en + 0.12 + 0.11 / en) * d
    if lam < 1e-3:
        return 1.0
    total = 0.0
    for k in range(1, 101):
        term = 2.0 * (-1) ** (k - 1) * math.exp(-2.0 * k * k * lam * lam)
        total += term
        if abs(term) < 1e-12:
            break
    return min(max(total, 0.0), 1.0)


def ks_two_sample(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(D, p): the largest distance between the two empirical distribution functions and
    its p-value."""
    a, b = np.sort(a), np.sort(b)
    points = np.concatenate([a, b])
    cdf_a = np.searchsorted(a, points, side="right") / a.size
    cdf_b = np.searchsorted(b, points, side="right") / b.size
    d = float(np.max(np.abs(cdf_a - cdf_b)))
    return d, _ks_p(d, a.size, b.size)


def _z_p(mean_a: float, mean_b: float, var_a: float, var_b: float, n: int, m: int) -> float:
    se = math.sqrt(var_a / n + var_b / m)
    if se == 0:
        return 1.0 if mean_a == mean_b else 0.0
    return math.erfc(abs(mean_a - mean_b) / se / math.sqrt(2))


def _elements(arrays: Sequence[Any]) -> np.ndarray:
    parts = [np.asarray(a).astype(np.float64).reshape(-1) for a in arrays]
    return np.concatenate(parts) if parts else np.zeros(0)


def distribution_test(expected: Sequence[Any], actual: Sequence[Any],
                      alpha: float = ALPHA) -> dict[str, Any]:
    """Whether the elements of ``actual`` (arrays, one per input set) could be drawn from
    the distribution of those of ``expected``: the tests of the module's docstring, pooled
    over the sets. Returns the statistics, ``ok`` and, when not ok, ``detail``."""
    a, b = _elements(expected), _elements(actual)
    out: dict[str, Any] = {"test": TEST_NAME, "alpha": alpha, "elements": [int(a.size),
                                                                           int(b.size)]}
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    va, vb = a[~nan_a], b[~nan_b]
    if va.size < MIN_ELEMENTS or vb.size < MIN_ELEMENTS:
        out.update(ok=True, detail="", note=f"too few elements ({min(va.size, vb.size)} < "
                   f"{MIN_ELEMENTS}) for a statistical test: shapes and dtypes compared only")
        return out
    tests: dict[str, float] = {}
    d, tests["ks"] = ks_two_sample(va, vb)
    fa, fb = va[np.isfinite(va)], vb[np.isfinite(vb)]
    out["ks_statistic"] = d
    if fa.size >= 2 and fb.size >= 2:
        out["means"] = [float(fa.mean()), float(fb.mean())]
        tests["mean"] = _z_p(fa.mean(), fb.mean(), fa.var(ddof=1), fb.var(ddof=1), fa.size,
                             fb.size)
    if nan_a.any() or nan_b.any():
        pa, pb = float(nan_a.mean()), float(nan_b.mean())
        pooled = (nan_a.sum() + nan_b.sum()) / (a.size + b.size)
        tests["nan_fraction"] = _z_p(pa, pb, pooled * (1 - pooled), pooled * (1 - pooled),
                                     a.size, b.size)
        out["nan_fractions"] = [pa, pb]
    out["p_values"] = {k: float(v) for k, v in tests.items()}
    level = alpha / len(tests)
    failed = [k for k, p in tests.items() if p < level]
    out["ok"] = not failed
    out["detail"] = "" if not failed else (
        "the distributions differ: " + ", ".join(f"{k} p={tests[k]:.2g}" for k in failed)
        + f" < {level:.2g}")
    return out
