"""Issue 29, item 5: onnxruntime-genai's builder's Qwen3 fp16 CPU model (RotaryEmbedding +
MultiHeadAttention), whose declared shapes onnx's strict inference contradicts (Concat "All
inputs to Concat must have same rank"). Builds a tiny random-weight one (needs the ``bench``
extra: torch, transformers, onnxruntime-genai), then ``check`` and ``rewrite`` for each
target at batch 1 and 2 (a decoding step: one new token after 3 cached ones), and, as the
model's users run it, onnxruntime-genai's greedy generation of 5 tokens with the original and
with the onnxruntime rewrite (the builder's folder, its model replaced).

    python benchmarks/genai_declared_shapes.py OUT_DIR [--targets onnxruntime,openvino,...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

VOCAB, PAST, HEAD_DIM, KV_HEADS, LAYERS = 256, 3, 16, 2, 2


def build(out: Path) -> Path:
    """The builder's fp16 CPU model of a random-weight Qwen3 in ``out``; its path."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=LAYERS, num_attention_heads=4,
                         num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
                         max_position_embeddings=128, architectures=["Qwen3ForCausalLM"])
    checkpoint = out / "checkpoint"
    Qwen3ForCausalLM(config).save_pretrained(str(checkpoint))
    tokenizer = Tokenizer(models.WordLevel({f"t{i}": i for i in range(VOCAB)}, unk_token="t0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="t0", bos_token="t1",
                            eos_token="t2").save_pretrained(str(checkpoint))
    subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i",
                    str(checkpoint), "-o", str(out / "built"), "-p", "fp16", "-e", "cpu",
                    "-c", str(out / "cache")], check=True, capture_output=True,
                   env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return out / "built" / "model.onnx"


def feeds(out: Path, batch: int) -> Path:
    """A decoding step's inputs (one new token after ``PAST`` cached ones), as .npz."""
    rng = np.random.default_rng(batch)
    data = {"input_ids": rng.integers(0, VOCAB, (batch, 1)).astype(np.int64),
            "attention_mask": np.ones((batch, PAST + 1), np.int64),
            "position_ids": np.full((batch, 1), PAST, np.int64)}
    for layer in range(LAYERS):
        for kind in ("key", "value"):
            data[f"past_key_values.{layer}.{kind}"] = rng.standard_normal(
                (batch, KV_HEADS, PAST, HEAD_DIM)).astype(np.float16)
    path = out / f"feeds_b{batch}.npz"
    np.savez(path, **data)
    return path


def generate(folder: Path, tokens: int = 5) -> str:
    """onnxruntime-genai's greedy generation of ``tokens`` tokens after a 3-token prompt
    with the model in ``folder`` (beside its genai_config.json), in a child process: the
    tokens, or the first line of the error."""
    script = (
        "import sys, numpy as np, onnxruntime_genai as og\n"
        "m = og.Model(sys.argv[1]); p = og.GeneratorParams(m)\n"
        "p.set_search_options(max_length=16, do_sample=False)\n"
        "g = og.Generator(m, p); g.append_tokens(np.array([[1, 2, 3]], dtype=np.int32))\n"
        "out = []\n"
        "for _ in range(int(sys.argv[2])):\n"
        "    g.generate_next_token(); out.append(int(g.get_next_tokens()[0]))\n"
        "print(out)\n")
    done = subprocess.run([sys.executable, "-c", script, str(folder), str(tokens)],
                          capture_output=True, text=True)
    if done.returncode == 0:
        return f"generated {done.stdout.strip()}"
    lines = [x for x in done.stderr.strip().splitlines() if "Error" in x] or ["failed"]
    return "failed: " + lines[-1][:300]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--targets", default="onnxruntime,openvino,opset:17,reference")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    model = build(args.out)
    tool = [sys.executable, "-m", "rewriter.cli"]
    for target in args.targets.split(","):
        checked = subprocess.run([*tool, "check", str(model), "-t", target],
                                 capture_output=True, text=True)
        print(f"check {target}: exit {checked.returncode}")
        print("  " + "\n  ".join(checked.stdout.strip().splitlines()[1:3]))
        for batch in (1, 2):
            written = args.out / f"{target.replace(':', '')}_b{batch}.onnx"
            done = subprocess.run([*tool, "rewrite", str(model), "-o", str(written), "-t",
                                   target, "--inputs", str(feeds(args.out, batch))],
                                  capture_output=True, text=True)
            last = (done.stdout.strip().splitlines() or [done.stderr.strip()])[-1]
            print(f"rewrite {target} batch {batch}: exit {done.returncode}: {last}")
    print(f"onnxruntime-genai, the original: {generate(model.parent)}")
    rewritten = args.out / "rewritten-for-onnxruntime"
    rewritten.mkdir(exist_ok=True)
    shutil.copy(model.parent / "genai_config.json", rewritten)
    done = subprocess.run([*tool, "rewrite", str(model), "-o", str(rewritten / "model.onnx"),
                           "-t", "onnxruntime", "--inputs", str(feeds(args.out, 1))],
                          capture_output=True, text=True)
    print(f"onnxruntime-genai, rewritten for onnxruntime (exit {done.returncode}): "
          f"{generate(rewritten)}")


if __name__ == "__main__":
    main()
