"""The model families: a tiny transformers (or torch) model built offline from a config with
random weights, its example inputs, and the names and dynamic axes its export declares.

Everything here imports transformers and torch lazily: :data:`FAMILIES` is plain data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Shared sizes: hidden 32, 2 layers, 4 heads, vocabulary 128. The decoder-only LLMs have
# hidden 64 with 4 query and 2 key/value heads: onnxruntime's GroupQueryAttention (the genai
# builder's) wants a head size that is a multiple of 16. Every model stays under a megabyte.
HIDDEN, LAYERS, HEADS, VOCAB, FFN = 32, 2, 4, 128, 64
LLM_HIDDEN, KV_HEADS = 64, 2
# Mistral's sliding window: shorter than the decoding step's 4 tokens (3 cached + 1 new), so
# the window drops cached tokens (realworld.feeds)
SLIDING_WINDOW = 2
BATCH, SEQUENCE, IMAGE, MEL_FRAMES = 2, 6, 32, 32  # example inputs of the export
SEED = 0
# Gemma 2's soft caps (scores, logits): the models' own are 50 and 30, which random weights
# never reach; these do
SOFTCAP_SCORES, SOFTCAP_LOGITS = 2.0, 3.0
PARTIAL_ROTARY = 0.5  # Phi's share of each head that gets the rotary embedding
PHI_HEADS = 2
LSTM_FEATURES, LSTM_HIDDEN = 16, 32


@dataclass(frozen=True)
class Family:
    """One model family: how to build it and how it is exported."""

    name: str
    description: str
    # (attention implementation: "eager" or "sdpa") -> (torch.nn.Module, {name: example})
    build: Callable[[str], Any]
    outputs: tuple[str, ...]
    dynamic: dict[str, dict[int, str]]  # input name -> {axis: symbolic dim name}
    ort_model_type: str | None = None  # onnxruntime.transformers optimizer's model_type
    num_heads: int = HEADS
    hidden_size: int = HIDDEN
    hf_causal_lm: Callable[[], Any] | None = None  # for the genai builder: a *ForCausalLM
    genai_options: tuple[str, ...] = ()  # the genai builder's --extra_options (key=value)


def _seeded():
    import torch

    torch.manual_seed(SEED)
    return torch


def _ids(batch: int = BATCH, seq: int = SEQUENCE):
    torch = _seeded()
    return torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(1))


def _wrap(model, names: tuple[str, ...], keys: tuple[str, ...], **fixed):
    """A torch module calling ``model(**inputs, **fixed)`` and returning ``keys`` in order."""
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, *args):
            out = self.inner(**dict(zip(names, args)), **fixed)
            return tuple(out[k] for k in keys)

    return Wrapped().eval()


def _text_inputs(with_types: bool = False) -> dict:
    torch = _seeded()
    feeds = {"input_ids": _ids(), "attention_mask": torch.ones(BATCH, SEQUENCE, dtype=torch.int64)}
    if with_types:
        feeds["token_type_ids"] = torch.zeros(BATCH, SEQUENCE, dtype=torch.int64)
    return feeds


def _bert(attn: str):
    from transformers import BertConfig, BertModel

    _seeded()
    config = BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                        num_attention_heads=HEADS, intermediate_size=FFN,
                        max_position_embeddings=64, type_vocab_size=2, attn_implementation=attn)
    feeds = _text_inputs(with_types=True)
    model = BertModel(config).eval()
    return _wrap(model, tuple(feeds), ("last_hidden_state", "pooler_output")), feeds


def _gpt2(attn: str):
    from transformers import GPT2Config, GPT2LMHeadModel

    _seeded()
    config = GPT2Config(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS,
                        n_positions=64, n_inner=FFN, attn_implementation=attn)
    feeds = _text_inputs()
    model = GPT2LMHeadModel(config).eval()
    return _wrap(model, tuple(feeds), ("logits",), use_cache=False), feeds


def _llama_config(attn: str = "sdpa"):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=VOCAB, hidden_size=LLM_HIDDEN, intermediate_size=2 * FFN,
                       num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                       num_key_value_heads=KV_HEADS, max_position_embeddings=64,
                       architectures=["LlamaForCausalLM"], bos_token_id=1, eos_token_id=2,
                       attn_implementation=attn)


def _qwen2_config(attn: str = "sdpa"):
    from transformers import Qwen2Config

    return Qwen2Config(vocab_size=VOCAB, hidden_size=LLM_HIDDEN, intermediate_size=2 * FFN,
                       num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                       num_key_value_heads=KV_HEADS, max_position_embeddings=64,
                       max_window_layers=LAYERS, architectures=["Qwen2ForCausalLM"],
                       bos_token_id=1, eos_token_id=2, attn_implementation=attn)


def _mistral_config(attn: str = "sdpa"):
    """Mistral with a sliding window (the genai builder's ``local_window_size``)."""
    from transformers import MistralConfig

    return MistralConfig(vocab_size=VOCAB, hidden_size=LLM_HIDDEN, intermediate_size=2 * FFN,
                         num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                         num_key_value_heads=KV_HEADS, head_dim=LLM_HIDDEN // HEADS,
                         max_position_embeddings=64, sliding_window=SLIDING_WINDOW,
                         layer_types=["sliding_attention"] * LAYERS,
                         architectures=["MistralForCausalLM"], bos_token_id=1, eos_token_id=2,
                         attn_implementation=attn)


def _qwen3_config(attn: str = "sdpa"):
    """Qwen3: RMS norms on the queries and keys of each head (q_norm, k_norm)."""
    from transformers import Qwen3Config

    return Qwen3Config(vocab_size=VOCAB, hidden_size=LLM_HIDDEN, intermediate_size=2 * FFN,
                       num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                       num_key_value_heads=KV_HEADS, head_dim=LLM_HIDDEN // HEADS,
                       max_position_embeddings=64, max_window_layers=LAYERS,
                       architectures=["Qwen3ForCausalLM"], bos_token_id=1, eos_token_id=2,
                       attn_implementation=attn)


def _gemma2_config(attn: str = "eager"):
    """Gemma 2: soft-capped attention scores and logits, tied (shared) embeddings, sliding
    and global layers in turn. The caps are small enough to bite on random weights."""
    from transformers import Gemma2Config

    return Gemma2Config(vocab_size=VOCAB, hidden_size=LLM_HIDDEN, intermediate_size=2 * FFN,
                        num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                        num_key_value_heads=KV_HEADS, head_dim=LLM_HIDDEN // HEADS,
                        query_pre_attn_scalar=LLM_HIDDEN // HEADS, max_position_embeddings=64,
                        sliding_window=64, attn_logit_softcapping=SOFTCAP_SCORES,
                        final_logit_softcapping=SOFTCAP_LOGITS, tie_word_embeddings=True,
                        architectures=["Gemma2ForCausalLM"], bos_token_id=1, eos_token_id=2,
                        pad_token_id=0, attn_implementation="eager")


def _phi_config(attn: str = "sdpa"):
    """Phi (Phi-2's architecture): rotary embedding on half of each head (partial rotary),
    parallel attention and MLP. 2 heads of 32: onnxruntime's GroupQueryAttention wants the
    rotated part's half (its cos cache's width) a multiple of 8."""
    from transformers import PhiConfig

    return PhiConfig(vocab_size=VOCAB, hidden_size=LLM_HIDDEN, intermediate_size=2 * FFN,
                     num_hidden_layers=LAYERS, num_attention_heads=PHI_HEADS,
                     num_key_value_heads=PHI_HEADS, partial_rotary_factor=PARTIAL_ROTARY,
                     max_position_embeddings=64, architectures=["PhiForCausalLM"],
                     bos_token_id=1, eos_token_id=2, attn_implementation=attn)


def _causal_lm(config_factory):
    def make():
        from transformers import AutoModelForCausalLM

        _seeded()
        return AutoModelForCausalLM.from_config(config_factory()).eval()

    return make


def _decoder(config_factory):
    def build(attn: str):
        feeds = _text_inputs()
        model = _causal_lm(lambda: config_factory(attn))()
        return _wrap(model, tuple(feeds), ("logits",), use_cache=False), feeds

    return build


def _t5_config(attn: str):
    from transformers import T5Config

    return T5Config(vocab_size=VOCAB, d_model=HIDDEN, d_kv=HIDDEN // HEADS, d_ff=FFN,
                    num_layers=LAYERS, num_decoder_layers=LAYERS, num_heads=HEADS,
                    decoder_start_token_id=0, attn_implementation=attn)


def _t5_encoder(attn: str):
    from transformers import T5EncoderModel

    _seeded()
    feeds = _text_inputs()
    model = T5EncoderModel(_t5_config(attn)).eval()
    return _wrap(model, tuple(feeds), ("last_hidden_state",)), feeds


def _t5_decoder(attn: str):
    """The decoder with its LM head: decoder ids and the encoder's states in, logits out."""
    import torch
    from transformers import T5ForConditionalGeneration

    _seeded()
    full = T5ForConditionalGeneration(_t5_config(attn)).eval()

    class Decoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = full

        def forward(self, decoder_input_ids, encoder_hidden_states, encoder_attention_mask):
            out = self.inner.decoder(input_ids=decoder_input_ids,
                                     encoder_hidden_states=encoder_hidden_states,
                                     encoder_attention_mask=encoder_attention_mask,
                                     use_cache=False)
            hidden = out.last_hidden_state
            if self.inner.config.tie_word_embeddings:
                hidden = hidden * (self.inner.model_dim ** -0.5)
            return (self.inner.lm_head(hidden),)

    feeds = {"decoder_input_ids": _ids(seq=4),
             "encoder_hidden_states": torch.randn(BATCH, SEQUENCE, HIDDEN),
             "encoder_attention_mask": torch.ones(BATCH, SEQUENCE, dtype=torch.int64)}
    return Decoder().eval(), feeds


def _random_biases(model) -> None:
    """Biases drawn as a trained model's are (transformers initializes them to zero): the
    TorchScript export shares one zero bias between layers through Identity nodes, which
    ``quant_pre_process`` removes, and ``quantize_static`` then quantizes that one tensor as
    the patch convolution's int32 bias and hands it to every QLinearAdd (an invalid model
    that neither onnxruntime nor OpenVINO loads)."""
    import torch

    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("bias"):
                parameter.normal_(0.0, 0.02)


def _vit(attn: str):
    from transformers import ViTConfig, ViTModel

    torch = _seeded()
    config = ViTConfig(image_size=IMAGE, patch_size=8, num_channels=3, hidden_size=HIDDEN,
                       num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                       intermediate_size=FFN, attn_implementation=attn)
    feeds = {"pixel_values": torch.randn(BATCH, 3, IMAGE, IMAGE)}
    model = ViTModel(config, add_pooling_layer=False).eval()
    _random_biases(model)
    return _wrap(model, tuple(feeds), ("last_hidden_state",)), feeds


def _clip_text(attn: str):
    from transformers import CLIPTextConfig, CLIPTextModel

    _seeded()
    config = CLIPTextConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN,
                            num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                            max_position_embeddings=16, eos_token_id=2, attn_implementation=attn)
    feeds = _text_inputs()
    model = CLIPTextModel(config).eval()
    return _wrap(model, tuple(feeds), ("last_hidden_state", "pooler_output")), feeds


def _clip_vision(attn: str):
    from transformers import CLIPVisionConfig, CLIPVisionModel

    torch = _seeded()
    config = CLIPVisionConfig(hidden_size=HIDDEN, intermediate_size=FFN,
                              num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                              image_size=IMAGE, patch_size=8, num_channels=3,
                              attn_implementation=attn)
    feeds = {"pixel_values": torch.randn(BATCH, 3, IMAGE, IMAGE)}
    model = CLIPVisionModel(config).eval()
    return _wrap(model, tuple(feeds), ("last_hidden_state", "pooler_output")), feeds


def _whisper_encoder(attn: str):
    from transformers import WhisperConfig, WhisperModel

    torch = _seeded()
    config = WhisperConfig(vocab_size=VOCAB, num_mel_bins=16, d_model=HIDDEN,
                           encoder_layers=LAYERS, decoder_layers=LAYERS,
                           encoder_attention_heads=HEADS, decoder_attention_heads=HEADS,
                           encoder_ffn_dim=FFN, decoder_ffn_dim=FFN,
                           max_source_positions=MEL_FRAMES // 2, max_target_positions=16,
                           pad_token_id=0, bos_token_id=1, eos_token_id=2,
                           decoder_start_token_id=1, attn_implementation=attn)
    feeds = {"input_features": torch.randn(BATCH, 16, MEL_FRAMES)}
    model = WhisperModel(config).eval().get_encoder()
    return _wrap(model, tuple(feeds), ("last_hidden_state",)), feeds


def _resnet(attn: str):
    from transformers import ResNetConfig, ResNetModel

    torch = _seeded()
    config = ResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[16, 32],
                          depths=[1, 1], layer_type="basic")
    feeds = {"pixel_values": torch.randn(BATCH, 3, IMAGE, IMAGE)}
    model = ResNetModel(config).eval()
    return _wrap(model, tuple(feeds), ("last_hidden_state", "pooler_output")), feeds


def _convnet(attn: str):
    """A small CNN whose quantized form uses every QOperator op onnxruntime's static
    quantizer writes for CNNs: convolutions, LeakyRelu, SiLU (Sigmoid, Mul), a residual Add,
    Concat, average pooling, global average pooling, Gemm and Softmax."""
    import torch

    _seeded()

    class ConvNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.left = torch.nn.Conv2d(8, 8, 1)
            self.right = torch.nn.Conv2d(8, 8, 3, padding=1)
            self.mix = torch.nn.Conv2d(16, 16, 3, padding=1)
            self.head = torch.nn.Linear(16, 10)

        def forward(self, pixel_values):
            x = torch.nn.functional.leaky_relu(self.stem(pixel_values), 0.1)
            left = self.left(x)
            left = left * torch.sigmoid(left)
            right = torch.relu(self.right(x)) + x
            x = torch.nn.functional.avg_pool2d(torch.cat([left, right], 1), 2)
            x = self.mix(x) + x
            x = torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1)
            return (torch.softmax(self.head(x), -1),)

    feeds = {"pixel_values": torch.randn(BATCH, 3, IMAGE, IMAGE)}
    return ConvNet().eval(), feeds


def _lstm(attn: str):
    """Two stacked LSTM layers over a sequence of features (batch first), then a linear head:
    ``quantize_dynamic`` makes each LSTM a ``DynamicQuantizeLSTM``."""
    import torch

    _seeded()

    class Recurrent(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(LSTM_FEATURES, LSTM_HIDDEN, num_layers=2,
                                      batch_first=True)
            self.head = torch.nn.Linear(LSTM_HIDDEN, 8)

        def forward(self, features):
            out, _state = self.lstm(features)
            return (self.head(out),)

    feeds = {"features": torch.randn(BATCH, SEQUENCE, LSTM_FEATURES)}
    return Recurrent().eval(), feeds


_TEXT = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}}
_IMAGE = {"pixel_values": {0: "batch"}}

FAMILIES: dict[str, Family] = {f.name: f for f in [
    Family("bert", "BertModel", _bert, ("last_hidden_state", "pooler_output"),
           {**_TEXT, "token_type_ids": {0: "batch", 1: "sequence"}}, "bert"),
    Family("gpt2", "GPT2LMHeadModel, no cache", _gpt2, ("logits",), _TEXT, "gpt2"),
    Family("llama", "LlamaForCausalLM (GQA 4/2 heads), no cache", _decoder(_llama_config),
           ("logits",), _TEXT, None, hidden_size=LLM_HIDDEN,
           hf_causal_lm=_causal_lm(_llama_config)),
    Family("qwen2", "Qwen2ForCausalLM (GQA 4/2 heads), no cache", _decoder(_qwen2_config),
           ("logits",), _TEXT, None, hidden_size=LLM_HIDDEN,
           hf_causal_lm=_causal_lm(_qwen2_config)),
    Family("mistral", f"MistralForCausalLM (GQA 4/2 heads, sliding window {SLIDING_WINDOW}), "
           "no cache", _decoder(_mistral_config), ("logits",), _TEXT, None,
           hidden_size=LLM_HIDDEN, hf_causal_lm=_causal_lm(_mistral_config),
           # a full-length KV cache, with GroupQueryAttention's local_window_size (the
           # builder's default, a window-sized cache, is a form no decomposition takes yet)
           genai_options=("windowed_kv_cache=false",)),
    Family("qwen3", "Qwen3ForCausalLM (GQA 4/2 heads, q/k RMS norms), no cache",
           _decoder(_qwen3_config), ("logits",), _TEXT, None, hidden_size=LLM_HIDDEN,
           hf_causal_lm=_causal_lm(_qwen3_config)),
    Family("t5-encoder", "T5EncoderModel", _t5_encoder, ("last_hidden_state",), _TEXT, "t5"),
    Family("t5-decoder", "T5 decoder + LM head, no cache", _t5_decoder, ("logits",),
           {"decoder_input_ids": {0: "batch", 1: "decoder_sequence"},
            "encoder_hidden_states": {0: "batch", 1: "sequence"},
            "encoder_attention_mask": {0: "batch", 1: "sequence"}}, "t5"),
    Family("vit", "ViTModel, 32x32 images, patch 8", _vit, ("last_hidden_state",), _IMAGE,
           "vit"),
    Family("clip-text", "CLIPTextModel", _clip_text, ("last_hidden_state", "pooler_output"),
           _TEXT, "clip"),
    Family("clip-vision", "CLIPVisionModel, 32x32 images, patch 8", _clip_vision,
           ("last_hidden_state", "pooler_output"), _IMAGE, "clip"),
    Family("whisper-encoder", "WhisperModel's encoder, 16 mel bins x 32 frames",
           _whisper_encoder, ("last_hidden_state",), {"input_features": {0: "batch"}}, "bart"),
    Family("resnet", "ResNetModel, 2 basic stages", _resnet,
           ("last_hidden_state", "pooler_output"), _IMAGE, None),
    Family("gemma2", "Gemma2ForCausalLM (GQA 4/2 heads, soft-capped scores and logits, "
           "shared embeddings), no cache", _decoder(_gemma2_config), ("logits",), _TEXT, None,
           hidden_size=LLM_HIDDEN, hf_causal_lm=_causal_lm(_gemma2_config),
           genai_options=("windowed_kv_cache=false",)),  # as Mistral's
    Family("phi", f"PhiForCausalLM ({PHI_HEADS} heads, rotary on {PARTIAL_ROTARY:.0%} of "
           "each head), no cache", _decoder(_phi_config), ("logits",), _TEXT, None,
           num_heads=PHI_HEADS, hidden_size=LLM_HIDDEN, hf_causal_lm=_causal_lm(_phi_config)),
    Family("convnet", "a small CNN: Conv, LeakyRelu, SiLU, Add, Concat, AveragePool, "
           "GlobalAveragePool, Gemm, Softmax", _convnet, ("probabilities",), _IMAGE, None),
    Family("lstm", f"2 stacked LSTM layers ({LSTM_FEATURES} features, hidden {LSTM_HIDDEN}) "
           "and a linear head", _lstm, ("scores",),
           {"features": {0: "batch", 1: "sequence"}}, None),
]}
