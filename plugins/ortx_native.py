"""Native kernels ``ortx-native``: ops onnxruntime-extensions implements natively.

A node of one of these ops is remedied by running it in the extensions library (registered
by ``rewriter.session`` / ``onnx-rewriter run`` from what the rewritten model's metadata
lists), preferred over a Python kernel: nothing in Python runs at inference time. Whether
the installed library really has the op is asked of onnxruntime with a one-node session
when planning, so an op missing from a build (or CUDA-only, like ``FastGelu``) falls back to
a Python kernel.

The table maps each op to itself: these are the library's own ops, so the semantics are the
library's by definition. Ops of other domains are mapped only where the semantics agree
exactly; none qualifies today: ai.onnx::ImageDecoder vs ``DecodeImage`` decodes JPEG
differently (up to 56 levels apart on the ONNX spec's test image), and ai.onnx::StringSplit
(opset 20) returns dense outputs where ``StringSplit`` returns sparse ones.
"""

from __future__ import annotations

from rewriter.plugin import RewritePass, hookimpl

CONTRIB = "ai.onnx.contrib"
EXT = "com.microsoft.extensions"

# Ops onnxruntime-extensions 0.15 registers on CPU, by domain (probed with real sessions).
NATIVE = {
    CONTRIB: (
        "StringLower", "StringUpper", "StringJoin", "StringConcat", "StringLength",
        "StringRegexReplace", "StringECMARegexReplace", "StringRegexSplitWithOffsets",
        "StringECMARegexSplitWithOffsets", "StringSplit", "StringStrip",
        "StringToHashBucket", "StringToHashBucketFast", "StringEqual", "StringMapping",
        "StringToVector", "VectorToString", "MaskedFill", "NegPos", "Inverse",
        "SegmentExtraction", "SegmentSum", "GPT2Tokenizer", "CLIPTokenizer",
        "RobertaTokenizer", "BertTokenizer", "BertTokenizerDecoder", "BasicTokenizer",
        "WordpieceTokenizer", "BpeDecoder", "SentencepieceTokenizer", "SentencepieceDecoder",
        "SpmTokenizer", "TrieTokenizer", "TrieDetokenizer", "HfJsonTokenizer",
        "BlingFireSentenceBreaker", "RaggedTensorToSparse", "RaggedTensorToDense",
        "StringRaggedTensorToDense", "AudioDecoder", "StftNorm", "SplitSignalSegments",
        "MergeSignalSegments",
        # CUDA-only in onnxruntime-extensions: the CPU probe declines it, a Python kernel
        # (custom-ops) takes over
        "FastGelu",
    ),
    EXT: (
        "GPT2Tokenizer", "CLIPTokenizer", "RobertaTokenizer", "BertTokenizer",
        "BertTokenizerDecoder", "BasicTokenizer", "WordpieceTokenizer", "BpeDecoder",
        "SentencepieceTokenizer", "SentencepieceDecoder", "SpmTokenizer", "TrieTokenizer",
        "TrieDetokenizer", "HfJsonTokenizer", "BlingFireSentenceBreaker", "DecodeImage",
        "EncodeImage", "DrawBoundingBoxes",
    ),
}


@hookimpl
def register_kernels(registry):
    for domain, ops in NATIVE.items():
        for op in ops:
            registry.add_native(domain, op, library="extensions",
                                description=f"onnxruntime-extensions {domain}::{op}")


# onnxruntime-extensions' Azure ops (built only with its Azure option): each sends its
# inputs to a remote service and returns the answer
REMOTE = {EXT: ("AzureTritonInvoker", "AzureAudioToText", "AzureTextToText",
                "OpenAIAudioToText")}


class RemoteServiceOps(RewritePass):
    """Remedies nothing: says why an op that calls a network service cannot be rewritten,
    which ``check``/``rewrite`` then report instead of "no decomposition"."""

    def handles(self, finding, ctx) -> bool:
        return finding.op_type in REMOTE.get(finding.domain, ())

    def offers_for_op(self, finding, ctx) -> bool:
        return True  # the op decides

    def offers(self, finding, ctx) -> tuple[bool, str]:
        if not self.handles(finding, ctx):
            return False, "not an op that calls a network service"
        return False, (f"{finding.op_type} sends its inputs to a remote inference service over "
                       "the network (onnxruntime-extensions' Azure ops), so no local graph or "
                       "kernel computes it (run it with an onnxruntime-extensions build with "
                       "Azure support and the service's endpoint)")

    def run(self, model, ctx):
        return None


@hookimpl
def register_passes(registry):
    registry.add("remote-service-ops", RemoteServiceOps, phase="convert")
