"""The com.microsoft attention family in standard ONNX, one module per op family:

================  ======================================================================
module            ops
================  ======================================================================
``core``          the shared core (notation, masks, heads, scale), the body builder
``multi_head``    ``Attention``, ``MultiHeadAttention``
``rotary``        ``RotaryEmbedding`` (its rotation serves ``GroupQueryAttention``)
``group_query``   ``GroupQueryAttention``
``decoder``       ``DecoderMaskedMultiHeadAttention``
``embedding``     ``EmbedLayerNormalization``
``padding``       ``RemovePadding``, ``RestorePadding``
``kernels``       numpy kernels (``RemovePadding``, ``RestorePadding``, ``Attention``) and
                  the oracles that run onnxruntime's own kernel on a form it takes
``samples``       the oracle samples of every op above
================  ======================================================================

``register_kernels`` adds the numpy kernels (the oracle when the original cannot run on
onnxruntime, e.g. its CPU kernel refusing a 4-D mask). Every body is checked against
onnxruntime's contrib kernels, or these numpy kernels, on the samples registered below
(``tests/test_oracles.py``).
"""

from __future__ import annotations

from . import kernels
from .core import ATTENTION_OPSETS, DOMAIN
from .decoder import build_decoder_masked_mha
from .embedding import build_embed_layer_norm
from .group_query import build_group_query_attention
from .multi_head import build_attention, build_multi_head_attention
from .padding import build_remove_padding, build_restore_padding
from .rotary import build_rotary_embedding
from .samples import oracles


def register_decompositions(registry) -> None:
    """Called by ``rewriter_plugins.com_microsoft``'s hook."""
    checked = oracles()

    def add(op_type, builder, opsets, dtypes=("float", "float16"), exact=True, note=""):
        registry.add(DOMAIN, op_type, builder, opsets=opsets, dtypes=dtypes, exact=exact,
                     description=f"com-microsoft:{op_type}" + (f" ({note})" if note else ""),
                     **checked[op_type])

    add("Attention", build_attention, ATTENTION_OPSETS)
    add("MultiHeadAttention", build_multi_head_attention, ATTENTION_OPSETS)
    add("RotaryEmbedding", build_rotary_embedding, ATTENTION_OPSETS)
    add("EmbedLayerNormalization", build_embed_layer_norm, ATTENTION_OPSETS, ("float",))
    add("RemovePadding", build_remove_padding, ATTENTION_OPSETS)
    add("RestorePadding", build_restore_padding, ATTENTION_OPSETS)
    add("GroupQueryAttention", build_group_query_attention, ATTENTION_OPSETS,
        note="no quantized cache, qk norm, query_seqlens or windowed cache")
    add("DecoderMaskedMultiHeadAttention", build_decoder_masked_mha, ATTENTION_OPSETS,
        dtypes=("float",), note="self-attention with a shared past/present buffer only")


def register_kernels(registry) -> None:
    """Called by ``rewriter_plugins.com_microsoft``'s hook."""
    kernels.register_kernels(registry)
