"""Numpy kernels and oracles of the attention family: ``RemovePadding`` and
``RestorePadding`` (onnxruntime has no CPU kernel for them) and ``Attention`` (the oracle
when the original cannot run on onnxruntime, e.g. its CPU kernel refusing Megatron's 4-D
mask); oracles that run onnxruntime's own kernel on a form it takes."""

from __future__ import annotations

import numpy as np

from rewriter.plugin import kernel

from ..common import onnxruntime_node
from .core import DEFAULT_MASK_FILTER_VALUE, DOMAIN

# -- numpy kernels: oracles for the reference evaluator (onnxruntime has no CPU kernel for
# RemovePadding / RestorePadding, and its CPU Attention refuses Megatron's 4-D mask) -------


@kernel(signatures=["float, int32 -> float, int32, int32, int32"])
def remove_padding_kernel(x: np.ndarray, counts: np.ndarray):
    """RemovePadding as documented (right padding)."""
    batch, seq = x.shape[:2]
    valid = np.arange(seq)[None, :] < counts[:, None]
    flat = np.arange(batch * seq).reshape(batch, seq)
    offsets = np.concatenate([flat[valid], flat[~valid]]).astype(np.int32)
    output = x.reshape(batch * seq, -1)[offsets[:int(counts.sum())]]
    cumulated = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    return (output, offsets.reshape(batch, seq), cumulated,
            np.array([counts.max()], np.int32))


@kernel(signatures=["float, int32 -> float"])
def restore_padding_kernel(x: np.ndarray, token_offset: np.ndarray) -> np.ndarray:
    """RestorePadding: scatter the rows of ``x`` to ``token_offset``'s first positions."""
    batch, seq = token_offset.shape
    out = np.zeros((batch * seq, x.shape[1]), x.dtype)
    out[token_offset.reshape(-1)[:x.shape[0]]] = x
    return out.reshape(batch, seq, -1)


def attention_reference(x, weights, bias=None, mask_index=None, *, num_heads: int,
                        unidirectional: int = 0, scale: float = 0.0,
                        mask_filter_value: float = DEFAULT_MASK_FILTER_VALUE,
                        past=None) -> tuple[np.ndarray, np.ndarray]:
    """``com.microsoft::Attention`` in float64 numpy (equal ``qkv_hidden_sizes``): the
    module docstring's formula, mask forms included. Returns (output, present)."""
    x64 = x.astype(np.float64)
    qkv = x64 @ weights.astype(np.float64)
    if bias is not None:
        qkv = qkv + bias
    batch, seq = x.shape[:2]

    def heads(t):
        return t.reshape(batch, t.shape[1], num_heads, -1).transpose(0, 2, 1, 3)

    q, k, v = (heads(t) for t in np.split(qkv, 3, axis=-1))
    if past is not None:
        k = np.concatenate([past[0], k], axis=2)
        v = np.concatenate([past[1], v], axis=2)
    total = k.shape[2]
    scores = q @ k.transpose(0, 1, 3, 2) * (scale or 1 / np.sqrt(q.shape[-1]))
    if mask_index is not None:
        m = mask_index
        if m.ndim == 1:
            positions = np.arange(total)[None, :]
            keep = positions < m[:batch, None]
            if m.shape[0] == 2 * batch:
                keep &= positions >= m[batch:, None]
            keep = keep[:, None, None, :]
        elif m.ndim == 2:
            keep = (m > 0)[:, None, None, :]
        elif m.ndim == 3:
            keep = (m > 0)[:, None]
        else:
            keep = m[:, :, total - seq:total, :total] > 0
        scores = scores + np.where(keep, 0.0, mask_filter_value)
    if unidirectional:  # future keys are out of the softmax
        future = np.arange(total)[None, :] > np.arange(seq)[:, None] + (total - seq)
        scores = scores + np.where(future, -np.inf, 0.0)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    out = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, seq, -1)
    return out.astype(x.dtype), np.stack([k, v]).astype(x.dtype)


def megatron_attention_oracle(x, weights, bias, mask_index, past, **attributes):
    """``Attention`` with Megatron's (B, 1, M, M) ``mask_index``: onnxruntime's own CPU
    kernel (which refuses the 4-D mask) on rows ``P .. P + S``, columns ``0 .. T`` of it as
    a 3-D (B, S, T) mask, the part onnxruntime's CUDA kernel reads (``attention_softmax.cu``:
    mask row ``total - sequence_length + s``)."""
    seq, total = x.shape[1], past.shape[3] + x.shape[1]
    rows = np.ascontiguousarray(mask_index[:, 0, total - seq:total, :total])
    return tuple(onnxruntime_node("Attention", DOMAIN, [x, weights, bias, rows, past], 2,
                                  **attributes))


def mha_unpacked_oracle(query, key=None, value=None, bias=None, key_padding_mask=None,
                        attention_bias=None, past_key=None, past_value=None, **attributes):
    """``MultiHeadAttention`` with packed QKV (B, S, N, 3, H) or packed KV (B, L, N, 2, H):
    onnxruntime's own CPU kernel (which refuses the packed forms) on Q, K and V unpacked as
    onnxruntime's ``fusion_attention_unet.py`` packs them (``[..., i, :]`` is Q, K, V)."""
    def flat(x):  # (B, L, N, H) -> (B, L, N * H)
        return np.ascontiguousarray(x.reshape(*x.shape[:2], -1))

    if key is None:
        query, key, value = (flat(query[:, :, :, i]) for i in range(3))
    elif value is None:
        key, value = (flat(key[:, :, :, i]) for i in range(2))
    return tuple(onnxruntime_node("MultiHeadAttention", DOMAIN, [
        query, key, value, bias, key_padding_mask, attention_bias, past_key, past_value], 3,
        **attributes))


def remove_padding_oracle(x, counts):
    """``RemovePadding`` by the numpy kernel, computed in float32 for float16 input."""
    out = remove_padding_kernel.fn(x.astype(np.float32), counts)
    return (out[0].astype(x.dtype), *out[1:])


def restore_padding_oracle(x, token_offset):
    """``RestorePadding`` by the numpy kernel, computed in float32 for float16 input."""
    return restore_padding_kernel.fn(x.astype(np.float32), token_offset).astype(x.dtype)


_ATTENTION_KERNEL_ATTRIBUTES = {"num_heads": int, "unidirectional": 0, "scale": 0.0,
                                "mask_filter_value": DEFAULT_MASK_FILTER_VALUE}


@kernel(signatures=["float, float, float, int32, float -> float, float",
                    "float, float, float, int32 -> float", "float, float, float -> float",
                    "float, float -> float"], attributes=_ATTENTION_KERNEL_ATTRIBUTES)
def attention_kernel(x, weights, bias=None, mask_index=None, past=None, **attributes):
    """Attention (see ``attention_reference``): the output, and with ``past`` the present
    too (GPT-2 exports with a Megatron mask, which onnxruntime's CPU kernel refuses)."""
    output, present = attention_reference(x, weights, bias, mask_index, past=past,
                                          **attributes)[:2]
    return output if past is None else (output, present)


def register_kernels(registry) -> None:
    """Numpy kernels (called by the package's ``register_kernels`` hook)."""
    module = __name__
    for op_type, attr in (("RemovePadding", "remove_padding_kernel"),
                          ("RestorePadding", "restore_padding_kernel"),
                          ("Attention", "attention_kernel")):
        registry.add(DOMAIN, op_type, f"{module}:{attr}",
                     description=f"com-microsoft:{op_type} (numpy)")
