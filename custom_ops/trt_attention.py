"""TensorRT attention plugins in numpy (the oracle for the ``tensorrt`` plugin's
decompositions; semantics in ``rewriter_plugins.tensorrt``).

* ``fmha``: ``fMHAPlugin(q, k, v)``, ``[B,S,H,D]`` each: per batch and head
  ``softmax(scale * q k^T) v`` in float32 (float16 inputs) or float64, cast back
  (``causal``: keys after the query are masked).
* ``disentangled_attention``: ``DisentangledAttention_TRT(c2c, c2p, p2c)``, version 2 of
  disentangledKernel.cu (log-bucket relative positions), index arithmetic in float32 as the
  kernel does it.
"""

from __future__ import annotations

import numpy as np

from rewriter.plugin import kernel as _kernel


@_kernel(signatures=["float16, float16, float16 -> float16", "float, float, float -> float"],
         attributes={"scale": 1.0, "dropout_p": 0.0, "causal": 0, "return_attn_probs": 0})
def fmha(q, k, v, *, scale, dropout_p, causal, return_attn_probs):
    """fMHAPlugin: flash attention over [B,S,H,D] inputs."""
    if dropout_p != 0 or return_attn_probs:
        raise ValueError("fMHAPlugin: dropout_p and return_attn_probs are not supported")
    # float16 inputs in float32 (as flash attention accumulates), float32 ones in float64
    work = np.float32 if q.dtype == np.float16 else np.float64
    qh, kh, vh = (np.ascontiguousarray(np.swapaxes(x, 1, 2), dtype=work)
                  for x in (q, k, v))  # [B,H,S,D]
    logits = work(np.float32(scale)) * (qh @ np.swapaxes(kh, -1, -2))
    if causal:
        future = np.arange(k.shape[1])[None, :] > np.arange(q.shape[1])[:, None]
        logits = np.where(future, -np.inf, logits)
    logits -= logits.max(axis=-1, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(axis=-1, keepdims=True)
    return np.swapaxes(probs @ vh, 1, 2).astype(q.dtype)


def relative_index(seq: int, span: int, length: int) -> np.ndarray:
    """``I[r, c]``: the c2p/p2c column of relative position ``r - c`` (version 2)."""
    mid = span // 2
    delta = np.arange(seq)[:, None] - np.arange(seq)[None, :]
    log_mid = np.log(np.float32(mid))
    t = (np.float32(mid - 1) / (np.log(np.float32(length - 1)) - log_mid)
         * (np.float32(1) - np.float32(1e-7)))
    magnitude = np.maximum(np.abs(delta), 1).astype(np.float32)  # |d| <= mid is not logged
    log_bucket = (np.ceil((np.log(magnitude) - log_mid) * t) + np.float32(mid)).astype(np.int64)
    bucket = np.where(np.abs(delta) <= mid, delta, np.sign(delta) * log_bucket)
    return np.clip(bucket + span, 0, 2 * span - 1)


@_kernel(signatures=["float, float, float -> float", "float16, float16, float16 -> float16"],
         attributes={"span": int, "factor": float, "plugin_version": "1",
                     "plugin_namespace": ""})
def disentangled_attention(c2c, c2p, p2c, *, span, factor, plugin_version, plugin_namespace):
    """DisentangledAttention_TRT: (c2c + c2p[r, I(r-c)] + p2c[c, I(r-c)]) * factor."""
    seq = c2c.shape[1]
    index = relative_index(seq, int(span), c2p.shape[2])
    n = c2c.shape[0]
    res1 = np.take_along_axis(c2p, np.broadcast_to(index, (n, seq, seq)), axis=2)
    res2 = np.swapaxes(np.take_along_axis(p2c, np.broadcast_to(index.T, (n, seq, seq)),
                                          axis=2), 1, 2)
    scale = np.asarray(factor, c2c.dtype)
    if c2c.dtype == np.float16:
        return ((c2c + (res1 + res2)) * scale).astype(np.float16)
    return ((c2c + res1 + res2) * scale).astype(c2c.dtype)
