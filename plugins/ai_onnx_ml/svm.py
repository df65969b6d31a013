"""Support vector machines of ai.onnx.ml, as onnxruntime's kernels (``svmclassifier.cc``,
``svmregressor.cc``, ``ml_common.h``) compute them, in float32: ``X`` (rows; a 1-D ``X`` is
one row) cast to float32.

* The kernel ``k(x, v)`` of a row and a support vector (``kernel_type``, ``kernel_params`` =
  ``[gamma, coef0, degree]``, all 0 when absent): ``LINEAR`` ``x.v``; ``POLY``
  ``(gamma x.v + coef0)^degree``; ``RBF`` ``exp(-gamma |x - v|^2)``; ``SIGMOID``
  ``tanh(gamma x.v + coef0)``.
* ``SVMClassifier(X) -> (label, scores)`` with ``C`` classes (``classlabels_ints`` or
  ``classlabels_strings``). With ``vectors_per_class`` (libsvm's SVC): one score per pair of
  classes ``i < j`` in order, ``s = sum_{v of i} coef[j-1, v] k(x, v) + sum_{v of j} coef[i,
  v] k(x, v) + rho[pair]``; a pair votes for ``i`` where ``s > 0``, else for ``j``; the label
  is the class of the first most votes. Without ``prob_a``: the scores are the pairs',
  through ``post_transform``; two classes give ``[-s, s]`` (``NONE``), ``[logistic(-s),
  logistic(s)]`` (``LOGISTIC``: onnxruntime 1.32, where its sources read ``[1 - s, s]``),
  ``[1 - s, s]`` (``SOFTMAX``, ``SOFTMAX_ZERO``; ``PROBIT`` leaves the second unwritten:
  declined). With ``prob_a``/``prob_b`` (Platt): each pair's ``1 - logistic(s a +
  b)`` clipped to ``[1e-7, 1 - 1e-7]`` fills the matrix ``r``, from which Wu, Lin and Weng's
  coupling (``multiclass_probability``: at most 100 sweeps, stopping where the largest
  ``|Qp_i - pQp|`` is below ``0.005 / C``) gives ``C`` probabilities, through
  ``post_transform``. Without ``vectors_per_class`` (liblinear): ``scores = X coef^T +
  rho[0]`` (``coef``: ``[C, F]``), the label the first highest score's class, except for two
  classes without ``prob_a``: the second class where the highest score is at least 0.5 (all
  coefficients non-negative) or above 0 (some negative).
* ``SVMRegressor(X) -> Y [N, 1]``: ``sum_v coef[v] k(x, v) + rho[0]`` (``n_supports`` vectors;
  none: ``X coef + rho[0]``); ``one_class``: 1 where that is above 0, else -1. onnxruntime
  ignores ``post_transform`` (a transform other than ``NONE`` is declined: the spec and the
  kernel disagree).

The probabilities' sweeps are a ``Loop`` (at most 100 trips, ended when no row is left to
converge; :func:`build_svm_classifier_unrolled` writes all 100 in the graph instead); each
sweep is the kernel's float32 arithmetic in its order, so a row stops after the same sweep
as in the kernel.
"""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, helper

from rewriter.plugin import Arg, Declined, OpSample

from ._common import (
    BOOL,
    DOMAIN,
    DOUBLE,
    FLOAT,
    INT64,
    NUMERIC,
    Body,
    body_opset,
    features_rank,
    input_elem,
    logistic,
    make_string_const,
    only_attributes,
    post_transform,
    text,
    texts,
)

KERNELS = ("LINEAR", "POLY", "RBF", "SIGMOID")
MAX_SWEEPS = 100  # multiclass_probability's iterations
MAX_INTEGER_DEGREE = 64  # a POLY degree up to this, integral, is a product (exact sign)
_F32 = np.float32


# -- the parts both ops share ----------------------------------------------------------------


def _floats(ctx, name: str) -> np.ndarray:
    return np.asarray(list(ctx.attribute(name, []) or []), _F32)


def _kernel_parameters(ctx) -> tuple[str, float, float, float]:
    kernel = text(ctx.attribute("kernel_type"), "LINEAR")
    if kernel not in KERNELS:
        raise Declined(f"unknown kernel_type {kernel!r} ({', '.join(KERNELS)})")
    params = _floats(ctx, "kernel_params")
    if len(params) and len(params) < 3:
        raise Declined("kernel_params holds gamma, coef0 and degree (3 values)")
    gamma, coef0, degree = (params[:3] if len(params) else np.zeros(3, _F32))
    return kernel, float(gamma), float(coef0), float(degree)


def _rows(b: Body, ctx, width: int) -> str:
    """``X`` as float32 rows ``[N, width]``."""
    rank = features_rank(ctx, ctx.node.op_type)
    elem = input_elem(ctx)
    if elem not in NUMERIC:
        raise Declined("X must be float, double, int64 or int32")
    shape = ctx.shape(ctx.node.input[0]) or []
    known = shape[-1] if shape else None
    if isinstance(known, int) and known != width:
        raise Declined(f"X has {known} features; the support vectors or coefficients "
                       f"{width}")
    x = b.rows("X", rank)
    return x if elem == FLOAT else b.cast(x, FLOAT)


def _power(b: Body, base: str, degree: float) -> str:
    """``base ** degree`` as Eigen's ``pow`` (a square and a cube as products): an integral
    degree as repeated products (the sign of a negative base kept), else ``Pow``."""
    if degree == int(degree) and 0 <= degree <= MAX_INTEGER_DEGREE:
        n = int(degree)
        if n == 0:  # (1 everywhere, NaN included, as pow)
            return b.op("Expand", b.scalar_like(1.0, FLOAT), b.op("Shape", base))
        result, square, first = None, base, True
        while n:
            if n & 1:
                result = square if first else b.op("Mul", result, square)
                first = False
            n >>= 1
            if n:
                square = b.op("Mul", square, square)
        return result
    return b.op("Pow", base, b.scalar_like(degree, FLOAT))


def _kernel(b: Body, x: str, vectors: np.ndarray, kernel: str, gamma: float, coef0: float,
            degree: float) -> str:
    """``k(x, v)`` of every row and vector: ``[N, V]`` float32 (``batched_kernel_dot``)."""
    if kernel == "RBF":
        difference = b.op("Sub", b.unsqueeze(x, [1]), b.const(vectors[None], _F32))
        distance = b.reduce_sum(b.op("Mul", difference, difference), [2], keepdims=0)
        return b.op("Exp", b.op("Mul", distance, b.scalar_like(float(-_F32(gamma)), FLOAT)))
    dot = b.op("MatMul", x, b.const(np.ascontiguousarray(vectors.T), _F32))
    if kernel == "LINEAR":
        return dot
    scaled = b.op("Add", b.op("Mul", dot, b.scalar_like(gamma, FLOAT)),
                  b.scalar_like(coef0, FLOAT))
    if kernel == "SIGMOID":
        return b.op("Tanh", scaled)
    return _power(b, scaled, degree)


def _column(b: Body, x: str, k: int) -> str:
    return b.slice(x, [k], [k + 1], [1])


# -- SVMClassifier ---------------------------------------------------------------------------


def _pairs(count: int) -> list[tuple[int, int]]:
    return [(i, j) for i in range(count - 1) for j in range(i + 1, count)]


def _pair_scores(b: Body, kernels: str, coefficients: np.ndarray, per_class: list[int],
                 rho: np.ndarray) -> str:
    """``[N, pairs]``: for each pair ``(i, j)``, class ``i``'s vectors weighed by coefficient
    row ``j - 1`` plus class ``j``'s weighed by row ``i``, plus its ``rho``: float products
    summed in double, as the kernel sums them (exact sums, so the float score is the
    kernel's to the bit). Each class's products are summed apart: a vector's NaN or
    infinite kernel value reaches only the pairs of its class."""
    count, total = len(per_class), sum(per_class)
    rows = coefficients.reshape(count - 1, total)
    starts = np.concatenate([[0], np.cumsum(per_class)[:-1]]).astype(int)
    products = b.cast(b.op("Mul", b.unsqueeze(kernels, [2]), b.const(
        np.ascontiguousarray(rows.T)[None], _F32)), DOUBLE)  # [N, V, count - 1]
    sums = [b.reduce_sum(b.slice(products, [int(starts[c])], [int(starts[c] + per_class[c])],
                                 [1]), [1], keepdims=0)
            for c in range(count)]  # class c's vectors by every row: [N, count - 1] each
    table = b.op("Concat", *sums, axis=1)  # [N, count * (count - 1)]
    pairs = _pairs(count)
    first = [i * (count - 1) + (j - 1) for i, j in pairs]
    second = [j * (count - 1) + i for i, j in pairs]
    scores = b.op("Add", b.op("Gather", table, b.ints(first), axis=1),
                  b.op("Gather", table, b.ints(second), axis=1))
    scores = b.op("Add", scores, b.const(rho[:len(pairs)].astype(np.float64), np.float64))
    return b.cast(scores, FLOAT)


def _votes_winner(b: Body, scores: str, count: int) -> str:
    """The index ``[N]`` of the class of the first most votes (a pair votes for its first
    class where its score is above 0, else for its second)."""
    pairs = _pairs(count)
    swing = np.zeros((len(pairs), count), _F32)
    second = np.zeros(count, _F32)
    for p, (i, j) in enumerate(pairs):
        swing[p, i], swing[p, j] = 1.0, -1.0
        second[j] += 1.0
    won = b.cast(b.op("Greater", scores, b.scalar_like(0.0, FLOAT)), FLOAT)
    votes = b.op("Add", b.op("MatMul", won, b.const(swing, _F32)), b.const(second, _F32))
    return b.op("ArgMax", votes, axis=1, keepdims=0)


def _clip(b: Body, x: str, low: float, high: float) -> str:
    """``std::min(std::max(x, low), high)`` (NaN kept, as the kernel's comparisons keep it)."""
    low_, high_ = b.scalar_like(low, FLOAT), b.scalar_like(high, FLOAT)
    x = b.op("Where", b.op("Less", x, low_), low_, x)
    return b.op("Where", b.op("Less", high_, x), high_, x)


def _exact_logistic(b: Body, x: str) -> str:
    """``ComputeLogistic`` as written (``1 / (1 + exp(-|x|))``, ``1 - v`` below 0), which
    ``sigmoid_probability`` calls, with ``std::exp``'s correctly rounded float (an ``Exp`` in
    double): onnxruntime's ``Sigmoid`` and float ``Exp`` are an ulp or more off, which the
    coupling carries and a ``PROBIT`` of the probabilities magnifies a thousandfold."""
    one = b.scalar_like(1.0, FLOAT)
    exp = b.cast(b.op("Exp", b.op("Neg", b.op("Abs", b.cast(x, DOUBLE)))), FLOAT)
    v = b.op("Div", one, b.op("Add", one, exp))
    return b.op("Where", b.op("Less", x, b.scalar_like(0.0, FLOAT)), b.op("Sub", one, v), v)


def _sum_in_order(b: Body, terms: list[str]) -> str:
    total = terms[0]
    for term in terms[1:]:
        total = b.op("Add", total, term)
    return total


def _probabilities(b: Body, scores: str, count: int, prob_a: np.ndarray,
                   prob_b: np.ndarray, unrolled: bool) -> str:
    """``[N, C]``: the pairs' Platt probabilities coupled (``multiclass_probability``): its
    sweeps a ``Loop``, or, ``unrolled``, all :data:`MAX_SWEEPS` of them in the graph (for a
    runtime without ``Loop``)."""
    pairs = _pairs(count)
    sigmoid = b.op("Sub", b.scalar_like(1.0, FLOAT), _exact_logistic(b, b.op(
        "Add", b.op("Mul", scores, b.const(prob_a[:len(pairs)], _F32)),
        b.const(prob_b[:len(pairs)], _F32))))
    clipped = _clip(b, sigmoid, 1e-7, float(_F32(1) - _F32(1e-7)))
    r: dict[tuple[int, int], str] = {}
    for p, (i, j) in enumerate(pairs):
        r[i, j] = _column(b, clipped, p)
        r[j, i] = b.op("Sub", b.scalar_like(1.0, FLOAT), r[i, j])
    # Q[i][i] = sum_{j != i} r[j][i]^2 (in j's order); Q[i][j] = -r[j][i] r[i][j]
    q: dict[tuple[int, int], str] = {}
    for i in range(count):
        q[i, i] = _sum_in_order(b, [b.op("Mul", r[j, i], r[j, i])
                                    for j in range(count) if j != i])
        for j in range(i + 1, count):
            q[i, j] = q[j, i] = b.op("Neg", b.op("Mul", r[j, i], r[i, j]))
    q_rows = [b.op("Concat", *[q[i, j] for j in range(count)], axis=1) for i in range(count)]
    q_columns = [b.op("Concat", *[q[i, j] for i in range(count)], axis=1)
                 for j in range(count)]
    rows = b.slice(b.op("Shape", scores), [0], [1], [0])
    start = b.op("Expand", b.const(np.full((1, count), _F32(1) / _F32(count)), _F32),
                 b.op("Concat", rows, b.ints([count]), axis=0))

    if unrolled:  # every sweep in the graph, a converged row left as it is
        p = start
        for _ in range(MAX_SWEEPS):
            p, _active = _sweep(b, p, q, q_rows, q_columns, count)
        return p
    loop = b.child()
    trip, cond_in, p_in = loop.fresh("trip"), loop.fresh("cond"), loop.fresh("p")
    p, active = _sweep(loop, p_in, q, q_rows, q_columns, count)
    again = loop.op("Greater", loop.reduce_sum(loop.cast(active, FLOAT), [0, 1], keepdims=0),
                    loop.scalar_like(0.0, FLOAT))
    p_out = loop.op("Identity", p)
    graph = helper.make_graph(
        loop.nodes, b.fresh("svm_coupling_sweep"),
        [helper.make_tensor_value_info(trip, INT64, []),
         helper.make_tensor_value_info(cond_in, BOOL, []),
         helper.make_tensor_value_info(p_in, FLOAT, None)],
        [helper.make_tensor_value_info(again, BOOL, []),
         helper.make_tensor_value_info(p_out, FLOAT, None)])
    # (an explicit condition: the reference evaluator runs no trip when it is omitted)
    return b.op("Loop", b.const(np.array(MAX_SWEEPS, np.int64)),
                b.const(np.array(True), np.bool_), start, body=graph)


def _sweep(b: Body, p: str, q: dict, q_rows: list[str], q_columns: list[str],
           count: int) -> tuple[str, str]:
    """One sweep of ``multiclass_probability`` over every row: the stopping test (``Qp`` and
    ``pQp`` recomputed from ``p``, in the kernel's order), then, in the rows not yet
    converged, each class's update in turn. Returns the new ``p`` and the rows that were
    still converging (``[N, 1]`` bool)."""
    qp = _sum_in_order(b, [b.op("Mul", q_columns[j], _column(b, p, j)) for j in range(count)])
    pqp = _sum_in_order(b, [b.op("Mul", _column(b, p, i), _column(b, qp, i))
                            for i in range(count)])
    error = b.op("Abs", b.op("Sub", qp, pqp))
    zero = b.scalar_like(0.0, FLOAT)
    error = b.op("Where", b.op("Greater", error, zero), error, zero)  # (NaN: ignored)
    largest = b.reduce_max(error, [1], keepdims=1)
    eps = float(_F32(0.005) / _F32(count))
    active = b.op("Not", b.op("Less", largest, b.scalar_like(eps, FLOAT)))
    one = b.scalar_like(1.0, FLOAT)
    for i in range(count):
        qp_i = _column(b, qp, i)
        q_ii = q[i, i]
        diff = b.op("Div", b.op("Add", b.op("Neg", qp_i), pqp), q_ii)
        diff = b.op("Where", active, diff, zero)
        at_i = b.const(np.arange(count)[None] == i, np.bool_)
        p = b.op("Where", at_i, b.op("Add", p, diff), p)
        grow = b.op("Add", one, diff)
        pqp = b.op("Div", b.op("Div", b.op("Add", pqp, b.op(
            "Mul", diff, b.op("Add", b.op("Mul", diff, q_ii), b.op(
                "Mul", b.scalar_like(2.0, FLOAT), qp_i)))), grow), grow)
        qp = b.op("Div", b.op("Add", qp, b.op("Mul", diff, q_rows[i])), grow)
        p = b.op("Div", p, grow)
    return p, active


def _labels(b: Body, index: str, ints: list[int], strings: list[str]) -> str:
    if strings:
        return b.op("Gather", make_string_const(b, strings), index, axis=0)
    return b.op("Gather", b.const(np.asarray(ints, np.int64)), index, axis=0)


def build_svm_classifier(ctx) -> FunctionProto:
    """The body; Platt probabilities' sweeps in a ``Loop``."""
    return _svm_classifier(ctx, unrolled=False)


def build_svm_classifier_unrolled(ctx) -> FunctionProto:
    """The body with the probabilities' sweeps unrolled, for a runtime without ``Loop``
    (tract 0.23 refuses the other body for it): every one of the :data:`MAX_SWEEPS` sweeps
    in the graph (a 3-class skl2onnx SVC: 12,925 nodes against 128). Registered by the
    ``ai-onnx-ml-loop-free`` plugin (:mod:`.loop_free`), asked after this plugin's body. A
    node without ``prob_a`` has no sweeps (declined)."""
    if not len(_floats(ctx, "prob_a")) or not sum(
            int(v) for v in ctx.attribute("vectors_per_class", []) or []):
        raise Declined("no Platt probabilities' sweeps to unroll (the Loop-free body is "
                       "the other registration's)")
    return _svm_classifier(ctx, unrolled=True)


def _svm_classifier(ctx, unrolled: bool) -> FunctionProto:
    node = ctx.node
    if len(node.output) != 2 or not node.output[0] or not node.output[1]:
        raise Declined("SVMClassifier's label and scores must both be used")
    only_attributes(node, ["classlabels_ints", "classlabels_strings", "coefficients",
                           "kernel_params", "kernel_type", "post_transform", "prob_a",
                           "prob_b", "rho", "support_vectors", "vectors_per_class"])
    ints = [int(v) for v in ctx.attribute("classlabels_ints", []) or []]
    strings = texts(ctx.attribute("classlabels_strings", []))
    count = len(strings) or len(ints)
    if count < 2:
        raise Declined("a classifier of fewer than two classes is not lowered")
    kernel, gamma, coef0, degree = _kernel_parameters(ctx)
    coefficients = _floats(ctx, "coefficients")
    rho = _floats(ctx, "rho")
    prob_a, prob_b = _floats(ctx, "prob_a"), _floats(ctx, "prob_b")
    if len(prob_a) != len(prob_b):
        raise Declined("prob_a and prob_b differ in length (onnxruntime refuses the node)")
    have_proba = len(prob_a) > 0
    transform = text(ctx.attribute("post_transform"), "NONE")
    per_class = [int(v) for v in ctx.attribute("vectors_per_class", []) or []]
    total = sum(per_class)
    if not len(coefficients) or not len(rho):
        raise Declined("coefficients and rho must be given")
    b = Body(body_opset(ctx))
    if total > 0:  # libsvm
        pairs = count * (count - 1) // 2
        vectors = _floats(ctx, "support_vectors")
        if len(per_class) != count or min(per_class) < 0:
            raise Declined(f"vectors_per_class has {len(per_class)} counts for {count} "
                           "classes")
        if len(vectors) % total or not len(vectors):
            raise Declined(f"{len(vectors)} support vector values for {total} vectors")
        if len(coefficients) != (count - 1) * total:
            raise Declined(f"{len(coefficients)} coefficients for {count - 1} x {total}")
        if len(rho) < pairs or (have_proba and len(prob_a) < pairs):
            raise Declined(f"rho, prob_a and prob_b need one value per pair ({pairs})")
        if count == 2 and not have_proba and transform == "PROBIT":
            raise Declined("two classes with PROBIT and no prob_a: the kernel leaves its "
                           "second score unwritten")
        width = len(vectors) // total
        x = _rows(b, ctx, width)
        kernels = _kernel(b, x, vectors.reshape(total, width), kernel, gamma, coef0, degree)
        if min(per_class) < 1:
            raise Declined("a class without support vectors")
        scores = _pair_scores(b, kernels, coefficients, per_class, rho)
        index = _votes_winner(b, scores, count)
        if have_proba:
            z = post_transform(b, _probabilities(b, scores, count, prob_a, prob_b,
                                                   unrolled), transform)
        elif count == 2 and transform == "LOGISTIC":
            z = b.op("Concat", logistic(b, b.op("Neg", scores)), logistic(b, scores), axis=1)
        elif count == 2:
            first = (b.op("Neg", scores) if transform == "NONE"
                     else b.op("Sub", b.scalar_like(1.0, FLOAT), scores))
            z = b.op("Concat", first, scores, axis=1)
        else:
            z = post_transform(b, scores, transform)
    else:  # liblinear: one row of coefficients per class, rho[0] for all
        if len(coefficients) % count:
            raise Declined(f"{len(coefficients)} coefficients for {count} classes")
        width = len(coefficients) // count
        x = _rows(b, ctx, width)
        matrix = coefficients.reshape(count, width)
        raw = b.op("Add", b.op("MatMul", x, b.const(np.ascontiguousarray(matrix.T), _F32)),
                   b.scalar_like(float(rho[0]), FLOAT))
        index = b.op("ArgMax", raw, axis=1, keepdims=0)
        if count == 2 and not have_proba:
            highest = b.reshape(b.reduce_max(raw, [1], keepdims=1), [-1])
            if bool(np.all(coefficients >= 0)):
                second = b.op("GreaterOrEqual", highest, b.scalar_like(0.5, FLOAT)) \
                    if b.opset >= 12 else b.op("Not", b.op(
                        "Less", highest, b.scalar_like(0.5, FLOAT)))
            else:
                second = b.op("Greater", highest, b.scalar_like(0.0, FLOAT))
            index = b.op("Where", second, b.const(np.array(1, np.int64)), index)
        z = post_transform(b, raw, transform)
    label = _labels(b, index, ints, strings)
    return b.function(DOMAIN, "svm_classifier", ["X"], [label, z])


# -- SVMRegressor ----------------------------------------------------------------------------


def build_svm_regressor(ctx) -> FunctionProto:
    node = ctx.node
    if len(node.output) != 1:
        raise Declined("SVMRegressor has one output")
    only_attributes(node, ["coefficients", "kernel_params", "kernel_type", "n_supports",
                           "one_class", "post_transform", "rho", "support_vectors"])
    transform = text(ctx.attribute("post_transform"), "NONE")
    if transform != "NONE":
        raise Declined(f"post_transform {transform}: onnxruntime ignores it, the spec "
                       "applies it")
    kernel, gamma, coef0, degree = _kernel_parameters(ctx)
    coefficients = _floats(ctx, "coefficients")
    rho = _floats(ctx, "rho")
    if not len(coefficients) or not len(rho):
        raise Declined("coefficients and rho must be given")
    supports = int(ctx.attribute("n_supports", 0) or 0)
    b = Body(body_opset(ctx))
    if supports > 0:
        vectors = _floats(ctx, "support_vectors")
        if len(vectors) % supports or not len(vectors):
            raise Declined(f"{len(vectors)} support vector values for {supports} vectors")
        if len(coefficients) != supports:
            raise Declined(f"{len(coefficients)} coefficients for {supports} vectors")
        width = len(vectors) // supports
        x = _rows(b, ctx, width)
        kernels = _kernel(b, x, vectors.reshape(supports, width), kernel, gamma, coef0,
                          degree)
        y = b.op("MatMul", kernels, b.const(coefficients.reshape(-1, 1), _F32))
    else:
        x = _rows(b, ctx, len(coefficients))
        y = b.op("MatMul", x, b.const(coefficients.reshape(-1, 1), _F32))
    y = b.op("Add", y, b.scalar_like(float(rho[0]), FLOAT))
    if int(ctx.attribute("one_class", 0) or 0):
        y = b.op("Where", b.op("Greater", y, b.scalar_like(0.0, FLOAT)),
                 b.scalar_like(1.0, FLOAT), b.scalar_like(-1.0, FLOAT))
    return b.function(DOMAIN, "svm_regressor", ["X"], [y])


# -- samples ---------------------------------------------------------------------------------


def svc_attributes(count: int, per_class: list[int], width: int, kernel: str,
                    proba: bool, seed: int) -> dict:
    """A random libsvm model: support vectors, pair coefficients, rho, Platt pairs."""
    rng = np.random.default_rng(seed)
    total = sum(per_class)
    pairs = count * (count - 1) // 2
    attributes = {
        "vectors_per_class": per_class, "kernel_type": kernel,
        "kernel_params": [0.3, 0.5, 3.0] if kernel == "POLY" else [0.4, 0.1, 0.0],
        "support_vectors": np.round(rng.uniform(-1.5, 1.5, total * width), 2).tolist(),
        "coefficients": np.round(rng.uniform(-1, 1, (count - 1) * total), 2).tolist(),
        "rho": np.round(rng.uniform(-0.5, 0.5, pairs), 2).tolist()}
    if proba:
        attributes["prob_a"] = np.round(rng.uniform(-3, -0.5, pairs), 2).tolist()
        attributes["prob_b"] = np.round(rng.uniform(-0.3, 0.3, pairs), 2).tolist()
    return attributes


def sample_rows(rng, shape):
    return np.round(rng.uniform(-1.5, 1.5, shape), 3)


_TRANSFORMS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")

REGISTRATIONS = [
    ("SVMClassifier", build_svm_classifier, ("float", "double", "int64", "int32"), "", [
        OpSample([Arg("T[7,3]", values=sample_rows)], ["int64", "float"],
                 {**svc_attributes(3, [2, 1, 3], 3, kernel, proba, seed),
                  "classlabels_ints": [4, 5, 6], "post_transform": transform},
                 opset=0, name=f"3-classes-{kernel.lower()}-{'platt' if proba else 'votes'}-"
                 f"{transform.lower()}", dtypes=["float"])
        for seed, (kernel, proba, transform) in enumerate([
            ("RBF", True, "NONE"), ("LINEAR", True, "SOFTMAX"), ("POLY", False, "NONE"),
            ("SIGMOID", False, "LOGISTIC"), ("RBF", False, "SOFTMAX_ZERO"),
            ("RBF", True, "PROBIT")])] + [
        OpSample([Arg("T[6,2]", values=sample_rows)], ["string", "float"],
                 {**svc_attributes(2, [2, 2], 2, "RBF", proba, 7),
                  "classlabels_strings": ["no", "yes"], "post_transform": transform},
                 opset=13, name=f"binary-{'platt' if proba else 'votes'}-{transform.lower()}",
                 dtypes=["float"])
        for proba, transform in [(True, "NONE"), (False, "NONE"), (False, "LOGISTIC")]] + [
        OpSample([Arg("T[5,3]", low=-3, high=3)], ["int64", "float"],
                 {**svc_attributes(4, [1, 2, 1, 2], 3, "RBF", True, 8),
                  "classlabels_ints": [0, 1, 2, 3]}, opset=17, name="4-classes-platt"),
        OpSample([Arg("T[5,3]", values=sample_rows)], ["int64", "float"],
                 {"coefficients": [0.5, -1.0, 0.25, 2.0, 0.0, -0.5, -1.5, 1.0, 0.75],
                  "rho": [0.2], "classlabels_ints": [1, 2, 3], "post_transform": "SOFTMAX",
                  "kernel_params": [0.0, 0.0, 0.0]},
                 opset=13, name="liblinear-3-classes", dtypes=["float"])] + [
        OpSample([Arg("T[6,3]", values=sample_rows)], ["int64", "float"],
                 {"coefficients": coefficients, "rho": [rho], "classlabels_ints": [0, 1],
                  "kernel_params": [0.0, 0.0, 0.0]},
                 opset=13, name=f"liblinear-binary-{name}", dtypes=["float"])
        for name, coefficients, rho in [
            ("positive", [0.5, 0.25, 0.1, 0.3, 0.0, 0.2], 0.1),
            ("mixed", [0.5, -1.0, 0.25, 2.0, 0.0, -0.5], -0.2)]]),
    # (onnxruntime's kernel takes float only; the body casts any numeric X)
    ("SVMRegressor", build_svm_regressor, ("float",), "", [
        OpSample([Arg("T[7,3]", values=sample_rows)], ["float"],
                 {"n_supports": 4, "kernel_type": kernel,
                  "kernel_params": [0.3, 0.5, degree],
                  "support_vectors": svc_attributes(2, [2, 2], 3, "RBF", False, 9)[
                      "support_vectors"],
                  "coefficients": [0.5, -1.0, 0.75, 0.25], "rho": [0.1],
                  "one_class": one_class}, opset=0,
                 name=f"{kernel.lower()}{'-one-class' if one_class else ''}")
        for kernel, degree, one_class in [("LINEAR", 0.0, 0), ("POLY", 2.0, 0),
                                          ("POLY", 2.5, 0), ("RBF", 0.0, 0),
                                          ("SIGMOID", 0.0, 0), ("RBF", 0.0, 1)]] + [
        OpSample([Arg("T[4]", values=sample_rows)], ["float"],
                 {"coefficients": [0.5, -1.0, 0.25, 2.0], "rho": [0.5],
                  "kernel_params": [0.0, 0.0, 0.0]}, opset=13,
                 name="linear-1d")]),
]
