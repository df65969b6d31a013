"""The recipes, as data: model family x export path x post-processing steps.

A recipe's name reads as its making: ``bert/torchscript+ort-opt+qdyn`` is the BERT family
exported with TorchScript, optimized by onnxruntime's transformer optimizer, then quantized
by ``quantize_dynamic``. Each step's tool and options are in :mod:`realworld.build`.
"""

from __future__ import annotations

from dataclasses import dataclass

EXPORTS = ("torchscript", "dynamo", "genai-int4", "genai-int8", "genai-fp32", "genai-fp16")
STEPS = ("ort-opt", "ort-opt-fp16", "ortfusions", "qdyn", "int4", "fp16", "ort-basic",
         "ort-extended", "qop", "qdq", "qnn", "hqq", "int4-gather")


@dataclass(frozen=True)
class Recipe:
    family: str  # a key of realworld.families.FAMILIES
    export: str  # one of EXPORTS
    steps: tuple[str, ...] = ()  # each one of STEPS, applied in order

    @property
    def name(self) -> str:
        return "/".join([self.family, "+".join([self.export, *self.steps])])

    @property
    def parent(self) -> Recipe | None:
        """The recipe this one applies its last step to (None: an export)."""
        return Recipe(self.family, self.export, self.steps[:-1]) if self.steps else None

    @staticmethod
    def parse(name: str) -> Recipe:
        family, _, rest = name.partition("/")
        export, *steps = rest.split("+")
        return Recipe(family, export, tuple(steps))


def _r(name: str) -> Recipe:
    recipe = Recipe.parse(name)
    assert recipe.export in EXPORTS and set(recipe.steps) <= set(STEPS), name
    return recipe


RECIPES: list[Recipe] = [_r(n) for n in [
    # the exporters as they are
    "bert/torchscript", "bert/dynamo",
    "gpt2/torchscript", "gpt2/dynamo",
    "llama/torchscript", "llama/dynamo",
    "qwen2/torchscript", "qwen2/dynamo",
    "t5-encoder/torchscript", "t5-decoder/torchscript",  # dynamo fails on T5 (docs)
    "vit/torchscript", "vit/dynamo",
    "clip-text/torchscript", "clip-vision/torchscript",
    "whisper-encoder/torchscript", "whisper-encoder/dynamo",
    "resnet/torchscript", "resnet/dynamo",
    # onnxruntime's transformer optimizer (fp32, and fp16 with float32 inputs/outputs)
    "bert/torchscript+ort-opt", "gpt2/torchscript+ort-opt", "t5-encoder/torchscript+ort-opt",
    "t5-decoder/torchscript+ort-opt", "vit/torchscript+ort-opt",
    "clip-text/torchscript+ort-opt", "clip-vision/torchscript+ort-opt",
    "whisper-encoder/torchscript+ort-opt",
    "bert/torchscript+ort-opt-fp16", "gpt2/torchscript+ort-opt-fp16",
    "vit/torchscript+ort-opt-fp16",
    # onnxscript's onnxruntime fusions on the dynamo exports
    "bert/dynamo+ortfusions", "gpt2/dynamo+ortfusions", "llama/dynamo+ortfusions",
    "qwen2/dynamo+ortfusions", "vit/dynamo+ortfusions", "whisper-encoder/dynamo+ortfusions",
    # quantize_dynamic (int8), alone, after the optimizer, and saved by onnxruntime after
    "bert/torchscript+qdyn", "bert/torchscript+ort-opt+qdyn",
    "bert/torchscript+ort-opt+qdyn+ort-extended", "gpt2/torchscript+qdyn",
    "llama/torchscript+qdyn", "resnet/torchscript+qdyn",
    # MatMulNBits (int4)
    "bert/torchscript+int4", "llama/torchscript+int4", "gpt2/torchscript+ort-opt+int4",
    # fp16 conversion (float16 inputs and outputs)
    "resnet/torchscript+fp16", "vit/torchscript+fp16", "llama/torchscript+fp16",
    # onnxruntime's offline-optimized save (basic, extended)
    "resnet/torchscript+ort-basic", "resnet/torchscript+ort-extended",
    "bert/torchscript+ort-extended", "llama/torchscript+ort-extended",
    "qwen2/dynamo+ort-extended",
    # the onnxruntime-genai model builder (GroupQueryAttention with a KV cache), CPU
    "llama/genai-int4", "llama/genai-fp32", "qwen2/genai-int4", "qwen2/genai-fp32",
    # ... with a sliding window (Mistral), q/k norms (Qwen3), and in float16
    "mistral/genai-int4", "mistral/genai-fp32", "qwen3/genai-int4", "qwen3/genai-fp32",
    "llama/genai-fp16",
    # ... with soft-capping and shared embeddings (Gemma 2), partial rotary (Phi), int8
    # weights, and float16 with Qwen3's q/k norms (RotaryEmbedding + MultiHeadAttention)
    "gemma2/genai-int4", "gemma2/genai-fp32", "phi/genai-int4", "phi/genai-int8",
    "qwen2/genai-int8", "qwen3/genai-fp16",
    # quantize_static: QOperator (QLinear* ops), QDQ and QDQ saved by onnxruntime's offline
    # optimizer (which fuses QDQ groups back into QLinear* ops), the QNN recipe (uint16
    # activations through com.microsoft Q/DQ)
    "convnet/torchscript", "convnet/torchscript+qop", "convnet/torchscript+qdq",
    "convnet/torchscript+qdq+ort-extended", "convnet/torchscript+qnn",
    "resnet/torchscript+qop", "vit/torchscript+qop",
    # quantize_dynamic of LSTMs (DynamicQuantizeLSTM)
    "lstm/torchscript", "lstm/torchscript+qdyn",
    # weight-only int4: HQQ (float zero points), block-quantized embeddings
    # (GatherBlockQuantized)
    "llama/torchscript+hqq", "llama/torchscript+int4-gather",
]]
