"""The generated real-world models committed in ``tests/data/realworld`` (made by
``python benchmarks/realworld testdata``; how each was made is in its ``PROVENANCE.md``):
for every model and target, ``check`` and ``rewrite`` (ending with its comparison on the
model's committed inputs), each pair's verdict pinned in VERDICTS.

A pair whose verdict changes fails, either way: a pair that starts verifying is recorded by
updating VERDICTS (the aim is every pair verified or unchanged); a pair that gets worse is a
regression. The whole benchmark (61 models) is ``python benchmarks/realworld`` (docs/realworld.md).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from rewriter import check

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from realworld.bench import rewrite_pair  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "realworld"
TARGETS = ("onnxruntime", "openvino", "reference", "opset:17", "opset:13")

# The verdict of `rewrite MODEL --target T` today, and why where it is not verified/unchanged.
# Pinned with the dev extras installed (OpenVINO is a target and the oracle's second opinion).
# `python benchmarks/realworld pin` prints this table as it is now (with every reason).
VERDICTS: dict[str, dict[str, str]] = {
    # Attention, EmbedLayerNormalization, SkipLayerNormalization, BiasGelu
    "bert-torchscript-ort-opt": {
        "onnxruntime": "unchanged", "openvino": "unchanged", "reference": "verified",
        "opset:17": "verified", "opset:13": "verified",
    },
    # the same in float16 (within float16's tolerance of onnxruntime's run)
    "bert-torchscript-ort-opt-fp16": {
        "onnxruntime": "unchanged", "openvino": "unchanged", "reference": "verified",
        "opset:17": "verified", "opset:13": "verified",
    },
    # QAttention, QEmbedLayerNormalization, DynamicQuantizeMatMul
    "bert-torchscript-ort-opt-qdyn-ort-extended": {
        "onnxruntime": "unchanged",
        # OpenVINO's own DynamicQuantizeMatMul was 2.1e-3 off: the OpenVINO target reports it
        # (KNOWN_INEXACT), the com-microsoft decomposition runs: max abs 4.8e-7
        "openvino": "verified",
        "reference": "verified", "opset:17": "verified", "opset:13": "verified",
    },
    # MatMulNBits (int4, block 32), FastGelu, SkipLayerNormalization
    "gpt2-torchscript-ort-opt-int4": {
        "onnxruntime": "unchanged",
        # OpenVINO's CPU plugin quantizes the activations of a compressed-weight MatMul to
        # int8 by default (logits 2.4e-3 off); the OpenVINO target compiles without that
        # dynamic quantization for a model whose MatMulNBits keep accuracy level 0 (the
        # definition): it then runs the model as it is with onnxruntime's numbers
        "openvino": "unchanged", "reference": "verified",
        "opset:17": "verified", "opset:13": "verified",
    },
    # dynamo (opset 20) + onnxscript's fusions on BERT: Attention, BiasGelu, SkipLayerNorm
    "bert-dynamo-ortfusions": {
        "onnxruntime": "unchanged", "openvino": "unchanged", "reference": "verified",
        "opset:17": "verified", "opset:13": "verified",
    },
    # dynamo (opset 20) saved by onnxruntime (extended): FusedMatMul, QuickGelu
    "qwen2-dynamo-ort-extended": {
        "onnxruntime": "unchanged", "openvino": "unchanged", "reference": "verified",
        "opset:17": "verified", "opset:13": "verified",
    },
    # GroupQueryAttention with a KV cache, MatMulNBits with accuracy_level 4 (the body
    # quantizes the activations to int8 per block as onnxruntime does: max abs 2e-7),
    # SkipSimplifiedLayerNormalization. On openvino: OpenVINO's own GroupQueryAttention runs
    # batch 1 only (test_genai_openvino_batch.py); the decomposition runs instead
    "llama-genai-int4": {
        "onnxruntime": "unchanged", "openvino": "verified", "reference": "verified",
        "opset:17": "verified", "opset:13": "verified",
    },
    # the same with a sliding window (GroupQueryAttention's local_window_size 2)
    "mistral-genai-int4": {
        "onnxruntime": "unchanged", "openvino": "verified", "reference": "verified",
        "opset:17": "verified", "opset:13": "verified",
    },
    # Qwen3's q/k RMS norms (Reshape, SimplifiedLayerNormalization) before the attention
    "qwen3-genai-int4": {
        "onnxruntime": "unchanged", "openvino": "verified", "reference": "verified",
        "opset:17": "verified", "opset:13": "verified",
    },
    # SimplifiedLayerNormalization, SkipSimplifiedLayerNormalization
    "t5-encoder-torchscript-ort-opt": {
        "onnxruntime": "unchanged", "openvino": "unchanged", "reference": "verified",
        "opset:17": "verified", "opset:13": "verified",
    },
    # dynamo (opset 20) + onnxscript's fusions: MultiHeadAttention, BiasGelu, SkipLayerNorm
    "whisper-encoder-dynamo-ortfusions": {
        "onnxruntime": "unchanged", "openvino": "unchanged", "reference": "verified",
        "opset:17": "verified", "opset:13": "verified",
    },
}
# the opset targets convert the whole model and verify it: most of this file's time (about a
# minute of the two on 2 cores), so they run with the slow tests
PAIRS = [pytest.param(m, t, id=f"{m}-{t}",
                      marks=[pytest.mark.slow] if t.startswith("opset:") else [])
         for m in VERDICTS for t in TARGETS]


def test_every_committed_model_is_pinned_and_matches_its_provenance():
    import hashlib

    models = sorted(p.stem for p in DATA.glob("*.onnx"))
    assert models == sorted(VERDICTS)
    provenance = (DATA / "PROVENANCE.md").read_text()
    for stem in models:
        section = provenance.split(f"## {stem}.onnx\n", 1)[1].split("\n## ", 1)[0]
        recorded = re.search(r"sha256 `([0-9a-f]{64})`", section).group(1)
        assert hashlib.sha256((DATA / f"{stem}.onnx").read_bytes()).hexdigest() == recorded
        assert "- recipe: `" in section and "- tool versions: " in section
        assert (DATA / f"{stem}.inputs.npz").is_file()


@pytest.mark.parametrize("model,target", PAIRS)
def test_check_and_rewrite_verdict(model, target, plugins, tmp_path):
    if target == "openvino" or any(v == "unverified" for v in VERDICTS[model].values()):
        pytest.importorskip("openvino")  # a target, and the oracle's second opinion
    path = DATA / f"{model}.onnx"
    (result,) = check(str(path), [target], plugins=plugins).results
    found = {f.op_label for f in result.findings}
    row = rewrite_pair(path, target, tmp_path, inputs=DATA / f"{model}.inputs.npz",
                       name=model, plugins=plugins)
    expected = VERDICTS[model][target]
    assert row.verdict == expected, (
        f"{model} on {target}: {row.verdict} (pinned: {expected}): {row.reason}\n"
        "an improvement is recorded by updating VERDICTS in tests/test_realworld.py "
        "(python benchmarks/realworld pin)")
    # check and rewrite agree: nothing found <=> nothing to rewrite
    assert (not found) == (expected == "unchanged"), (found, row.reason)
    if expected == "unfixable":  # what has no remedy is among what check found
        assert set(row.ops_left) <= found | {"model"}, (row.ops_left, found)
    if expected == "verified":  # the written result runs there as it is
        out = tmp_path / f"{target.replace(':', '_')}.onnx"
        (after,) = check(str(out), [target], plugins=plugins).results
        assert after.findings == [], after.findings
