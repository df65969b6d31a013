"""The few generated models committed under ``tests/data/realworld`` (each a distinct class
of real-world graph), their inputs and ``PROVENANCE.md``: ``python benchmarks/realworld
testdata`` copies them from the cache (weights made internal: one file per model)."""

from __future__ import annotations

import json
from pathlib import Path

from realworld.recipes import Recipe

TESTDATA = Path(__file__).resolve().parents[2] / "tests" / "data" / "realworld"

# recipe -> what it covers (the reason it is committed)
TEST_MODELS: dict[str, str] = {
    "bert/torchscript+ort-opt":
        "onnxruntime's transformer optimizer on BERT: Attention, EmbedLayerNormalization, "
        "SkipLayerNormalization, BiasGelu",
    "bert/torchscript+ort-opt-fp16":
        "the same in float16 (float32 inputs and outputs, Cast at the edges)",
    "bert/torchscript+ort-opt+qdyn+ort-extended":
        "quantize_dynamic after the optimizer, saved by onnxruntime (extended): QAttention, "
        "QEmbedLayerNormalization, DynamicQuantizeMatMul",
    "gpt2/torchscript+ort-opt+int4":
        "MatMulNBits (int4, block 32) after the optimizer: FastGelu, SkipLayerNormalization",
    "t5-encoder/torchscript+ort-opt":
        "T5's RMS norms fused: SimplifiedLayerNormalization, SkipSimplifiedLayerNormalization",
    "whisper-encoder/dynamo+ortfusions":
        "the dynamo export (opset 20) with onnxscript's fusions: MultiHeadAttention, BiasGelu, "
        "SkipLayerNormalization",
    "bert/dynamo+ortfusions":
        "the dynamo export (opset 20) with onnxscript's fusions on BERT: Attention, BiasGelu, "
        "SkipLayerNormalization",
    "qwen2/dynamo+ort-extended":
        "the dynamo export (opset 20) saved by onnxruntime (extended): FusedMatMul, QuickGelu",
    "llama/genai-int4":
        "onnxruntime-genai's builder (CPU, int4): GroupQueryAttention with a KV cache, "
        "MatMulNBits, SkipSimplifiedLayerNormalization",
    "mistral/genai-int4":
        "the genai builder's Mistral: GroupQueryAttention with a sliding window "
        "(local_window_size 2, shorter than the cache)",
    "qwen3/genai-int4":
        "the genai builder's Qwen3: per-head q/k RMS norms (Reshape, "
        "SimplifiedLayerNormalization) feeding GroupQueryAttention separate Q, K and V",
}


def file_stem(recipe: str) -> str:
    """``bert/torchscript+ort-opt`` -> ``bert-torchscript-ort-opt``."""
    return recipe.replace("/", "-").replace("+", "-")


def _options(step: dict) -> str:
    """A step's options, without the long ones (dynamic axes, fusion counts)."""
    skip = ("tool", "step", "dynamic_axes", "dynamic_shapes", "fusions")
    return ", ".join(f"{k}={v}" for k, v in step.items() if k not in skip)


def _sections(provenance: Path) -> dict[str, list[str]]:
    """``PROVENANCE.md``'s section of each model (by file stem), as lines."""
    sections: dict[str, list[str]] = {}
    stem = None
    for line in provenance.read_text().splitlines() if provenance.exists() else []:
        if line.startswith("## ") and line.endswith(".onnx"):
            stem = line[3:].removesuffix(".onnx")
            sections[stem] = []
        if stem is not None:
            sections[stem].append(line)
    for lines in sections.values():  # each ends in a blank line, as written
        while lines and not lines[-1]:
            lines.pop()
        lines.append("")
    return sections


def write_test_models(built: dict[str, Path], dest: Path = TESTDATA) -> list[Path]:
    """Copy the models of :data:`TEST_MODELS` that are in ``built`` (recipe -> cached model)
    to ``dest`` with their inputs, and write ``PROVENANCE.md`` (the others keep their files
    and their sections)."""
    import shutil

    import onnx

    from realworld.build import op_inventory, sha256

    dest.mkdir(parents=True, exist_ok=True)
    kept = _sections(dest / "PROVENANCE.md")
    written = []
    sections = ["# Generated real-world models", "",
                "Made by `python benchmarks/realworld testdata` (the recipes of "
                "`benchmarks/realworld`, `docs/realworld.md`): tiny configurations with random "
                "weights (`torch.manual_seed(0)`), no downloaded weights. Each model's inputs "
                "are the `.npz` beside it (`benchmarks/realworld/feeds.py`). Tests: "
                "`tests/test_realworld.py`.", ""]
    for recipe in TEST_MODELS:
        stem = file_stem(Recipe.parse(recipe).name)
        if recipe not in built:
            if stem not in kept:
                raise ValueError(f"{recipe}: not built, and not in {dest / 'PROVENANCE.md'}")
            sections += kept[stem]
            continue
        source = built[recipe]
        target = dest / f"{stem}.onnx"
        onnx.save(onnx.load(str(source)), str(target))  # external data made internal
        shutil.copy(source.parent / "inputs.npz", dest / f"{stem}.inputs.npz")
        provenance = json.loads((source.parent / "provenance.json").read_text())
        ops = op_inventory(target)
        family = provenance["family"]
        sizes = ", ".join(f"{k} {v}" for k, v in family.items()
                          if k not in ("name", "description"))
        steps = " → ".join(f"`{h['tool']}` ({_options(h)})" for h in provenance["how"])
        sections += [
            f"## {stem}.onnx", "",
            f"- recipe: `{recipe}` — {TEST_MODELS[recipe]}",
            f"- family: {family['description']} ({sizes})",
            f"- made by: {steps}",
            "- tool versions: " + ", ".join(f"{k} {v}" for k, v in provenance["versions"].items()),
            f"- opsets: {', '.join(f'{k} {v}' for k, v in provenance['opsets'].items())}",
            f"- ops: {', '.join(f'{k} ×{v}' for k, v in ops.items())}",
            f"- inputs: {', '.join(f'{k} {v[0]} {v[1]}' for k, v in provenance['inputs'].items())}",
            f"- size: {target.stat().st_size:,} bytes; sha256 `{sha256(target)}`", ""]
        written.append(target)
    (dest / "PROVENANCE.md").write_text("\n".join(sections))
    return written


def pinned_verdicts(targets: tuple[str, ...], dest: Path = TESTDATA) -> str:
    """``VERDICTS`` for ``tests/test_realworld.py`` as they are today (each committed model
    rewritten for each target, in this process), with the reason of every pair that is not
    verified or unchanged as a comment."""
    import tempfile
    import textwrap

    from realworld.bench import OK, rewrite_pair, short
    from rewriter.manager import load_plugins

    plugins = load_plugins(autoload=False)  # the tests' plugins: the built-ins
    lines = ["VERDICTS: dict[str, dict[str, str]] = {"]
    with tempfile.TemporaryDirectory() as tmp:
        for recipe in TEST_MODELS:
            stem = file_stem(recipe)
            lines += textwrap.wrap(TEST_MODELS[recipe], 100, initial_indent="    # ",
                                   subsequent_indent="    # ")
            lines.append(f'    "{stem}": {{')
            for target in targets:
                row = rewrite_pair(dest / f"{stem}.onnx", target, Path(tmp), name=stem,
                                   inputs=dest / f"{stem}.inputs.npz", plugins=plugins)
                if row.verdict not in OK:  # the reason, above its pair
                    lines += textwrap.wrap(short(row.reason, 180), 100,
                                           initial_indent="        # ",
                                           subsequent_indent="        # ")
                lines.append(f'        "{target}": "{row.verdict}",')
            lines.append("    },")
    lines.append("}")
    return "\n".join(lines)
