"""Text: ``TfIdfVectorizer`` on integer n-grams (``pool_int64s``), as onnxruntime and
the reference evaluator count them (see :func:`build_tfidf_vectorizer`).
"""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, TensorProto

from rewriter.plugin import Arg, Declined, OpSample, declining

from .common import (
    DOMAIN,
    Body,
    body_opset,
    input_elem,
)

TFIDF_OPSETS = (9, None)


# -- TfIdfVectorizer on integers ------------------------------------------------------------


@declining
def build_tfidf_vectorizer(ctx) -> FunctionProto | None:
    """``TfIdfVectorizer`` over integer n-grams (``pool_int64s``), as onnxruntime and the
    reference evaluator count them: for each n-gram length ``n`` and skip distance ``d``
    (1 only for unigrams, 1 .. ``max_skip_count + 1`` otherwise), the items
    ``X[..., s + k d]`` of every start ``s`` compared with each pool n-gram; matches summed
    per pool entry, placed at its ``ngram_indexes`` column by a matrix product, then
    weighted by ``mode``."""
    node = ctx.node
    pool = ctx.attribute("pool_int64s", None)
    if pool is None or ctx.attribute("pool_strings", None) is not None:
        raise Declined("needs pool_int64s (strings have no standard-op form)")
    if len(node.input) != 1 or len(node.output) != 1:
        raise Declined("needs one input and one output")
    low, high = ctx.attribute("min_gram_length"), ctx.attribute("max_gram_length")
    skips = ctx.attribute("max_skip_count")
    starts, indexes = list(ctx.attribute("ngram_counts")), list(ctx.attribute("ngram_indexes"))
    mode = ctx.attribute("mode")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    weights = ctx.attribute("weights", None)
    pool = list(pool)
    grams = []  # (n, [pool entries of length n as lists])
    for n, begin in enumerate(starts, start=1):
        end = starts[n] if n < len(starts) else len(pool)
        grams.append((n, [pool[i:i + n] for i in range(begin, end, n)]))
    if sum(len(g) for _, g in grams) != len(indexes) or mode not in ("TF", "IDF", "TFIDF"):
        raise Declined("ngram_counts, ngram_indexes and the pool disagree, or unknown mode")
    size = max(indexes) + 1
    elem = input_elem(ctx)
    if elem not in (TensorProto.INT32, TensorProto.INT64):
        raise Declined("needs int32 or int64 items")
    dtype = np.int32 if elem == TensorProto.INT32 else np.int64
    rank = ctx.rank(node.input[0])
    if rank not in (1, 2):
        raise Declined("needs X of a declared rank 1 or 2")
    b = Body(body_opset(ctx))  # (axes counted from the start: opset 9 takes no negative axes)
    last = np.iinfo(np.int64).max
    counts, entry = [], 0
    placement = np.zeros((len(indexes), size), np.float32)  # lengths not counted: zero rows
    for n, entries in grams:
        for _ in entries:
            placement[entry, indexes[entry]] = 1.0 if low <= n <= high else 0.0
            entry += 1
        if not entries:
            continue
        for d in ([1] if n == 1 else range(1, skips + 2)):
            match = None
            for k in range(n):
                tail = (n - 1 - k) * d
                items = b.slice("X", [k * d], [-tail if tail else last], [rank - 1])
                column = b.const(np.array([g[k] for g in entries]), dtype)
                hit = b.op("Equal", b.unsqueeze(items, [rank]), column)
                match = hit if match is None else b.op("And", match, hit)
            found = b.reduce("ReduceSum", b.cast(match, TensorProto.FLOAT), [rank - 1],
                             keepdims=0)
            counts.append(found if d == 1 else b.op("Add", counts.pop(), found))
    total = counts[0] if len(counts) == 1 else b.op("Concat", *counts, axis=rank - 1)
    y = b.op("MatMul", total, b.const(placement, np.float32))
    scale = b.const(np.asarray(weights if weights is not None else np.ones(size)), np.float32)
    if mode == "IDF":
        zero = b.const(np.array(0), np.float32)
        y = b.op("Where", b.op("Greater", y, zero), b.op("Expand", scale, b.op("Shape", y)),
                 zero)
    elif mode == "TFIDF":
        y = b.op("Mul", y, scale)
    return b.function(DOMAIN, "tfidf_vectorizer", ["X"], [y])


def samples() -> dict[str, list[OpSample]]:
    """The samples of this module's ops, by op type."""
    return {
        "TfIdfVectorizer": [
            OpSample([Arg(f"T[{shape}]", low=2, high=9)], ["float"], dict(
                min_gram_length=low, max_gram_length=2, max_skip_count=skips, mode=mode,
                ngram_counts=[0, 4], ngram_indexes=[0, 1, 2, 3, 4, 5, 6],
                pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7], **extra), opset=9,
                     name=name, dtypes=["int32", "int64"])
            for shape, low, skips, mode, extra, name in [
                ("2,6", 1, 5, "TF", {}, "uni-and-bigrams-skip5"),
                ("12", 2, 5, "TF", {}, "bigrams-skip5"),
                ("3,7", 1, 0, "TFIDF", {"weights": [0.5, 1, 2, 1, 3, 1, 0.25]},
                 "tfidf-weights"),
                ("9", 1, 2, "IDF", {"weights": [1, 2, 3, 4, 5, 6, 7]}, "idf"),
                ("4", 2, 3, "TF", {}, "shorter-than-skips")]],
    }
