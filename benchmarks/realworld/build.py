"""Build a recipe's model into the cache (skipping what is cached) and record how it was
made: ``<cache>/<recipe slug>-<key>/model.onnx`` with ``provenance.json`` and
``inputs.npz`` beside it. The key hashes the recipe, the tool versions and
the source of the modules that make models, so a new tool or a changed recipe builds anew.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from importlib import metadata
from pathlib import Path
from typing import Any

from realworld.families import FAMILIES, HEADS, KV_HEADS, VOCAB, Family
from realworld.recipes import Recipe

BUILDER_VERSION = 1  # bump when what a recipe makes changes in a way the key cannot see
DEFAULT_CACHE = Path.home() / ".cache" / "onnx-graph-rewriter" / "realworld"
TOOLS = ("torch", "transformers", "onnx", "onnxruntime", "onnxscript", "onnx-ir",
         "onnxruntime-genai")
TORCHSCRIPT_OPSET = 17
BLOCK_SIZE = 32  # MatMulNBits block (hidden 32, so every K is a multiple)
CALIBRATION_SETS = 4  # quantize_static's calibration input sets


def tool_versions() -> dict[str, str]:
    versions = {}
    for tool in TOOLS:
        try:
            versions[tool] = metadata.version(tool)
        except metadata.PackageNotFoundError:
            versions[tool] = "not installed"
    return versions


def _source_digest() -> str:
    here = Path(__file__).parent
    text = b"".join((here / m).read_bytes() for m in ("families.py", "build.py", "feeds.py"))
    return hashlib.sha256(text).hexdigest()


def cache_key(recipe: Recipe, versions: dict[str, str]) -> str:
    text = json.dumps({"recipe": recipe.name, "versions": versions,
                       "builder": BUILDER_VERSION, "source": _source_digest()},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def model_dir(cache: Path, recipe: Recipe, versions: dict[str, str]) -> Path:
    slug = recipe.name.replace("/", "__").replace("+", "_")
    return cache / f"{slug}-{cache_key(recipe, versions)}"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def op_inventory(path: Path) -> dict[str, int]:
    """``domain::op`` -> count over the main graph (``ai.onnx`` ops without a domain)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    counts = Counter(f"{n.domain}::{n.op_type}" if n.domain not in ("", "ai.onnx")
                     else n.op_type for n in model.graph.node)
    return dict(sorted(counts.items()))


def opsets(path: Path) -> dict[str, int]:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return {o.domain or "ai.onnx": o.version for o in model.opset_import}


# -- exports -------------------------------------------------------------------------------


def _export(family: Family, out: Path, dynamo: bool) -> dict[str, Any]:
    """TorchScript exports the eager attention (the pattern onnxruntime's optimizer fuses),
    dynamo the SDPA one (the pattern onnxscript's fusions look for)."""
    import torch

    attention = "sdpa" if dynamo else "eager"
    module, example = family.build(attention)
    names = list(example)
    args = tuple(example.values())
    if dynamo:
        from torch.export import Dim

        dims: dict[str, Any] = {}
        shapes = tuple({axis: dims.setdefault(d, Dim(d)) for axis, d in
                        family.dynamic.get(n, {}).items()} or None for n in names)
        torch.onnx.export(module, args, str(out), input_names=names,
                          output_names=list(family.outputs), dynamo=True,
                          dynamic_shapes=(shapes,), external_data=False)
        return {"tool": "torch.onnx.export", "dynamo": True, "attn_implementation": attention,
                "dynamic_shapes": family.dynamic}
    axes = {**family.dynamic, **{o: {0: "batch"} for o in family.outputs}}
    torch.onnx.export(module, args, str(out), input_names=names,
                      output_names=list(family.outputs), dynamo=False,
                      opset_version=TORCHSCRIPT_OPSET, dynamic_axes=axes)
    return {"tool": "torch.onnx.export", "dynamo": False, "attn_implementation": attention,
            "opset_version": TORCHSCRIPT_OPSET,
            "dynamic_axes": {k: {str(a): d for a, d in v.items()} for k, v in axes.items()}}


def _tiny_tokenizer(folder: Path) -> None:
    """A word-level tokenizer over the tiny vocabulary: the genai builder copies one."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordLevel({f"t{i}": i for i in range(VOCAB)}, unk_token="t0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="t0", bos_token="t1",
                            eos_token="t2").save_pretrained(str(folder))


def _genai(family: Family, out_dir: Path, precision: str) -> dict[str, Any]:
    """onnxruntime-genai's model builder, CPU, from a checkpoint saved with save_pretrained."""
    if family.hf_causal_lm is None:
        raise ValueError(f"{family.name}: the genai builder needs a causal LM")
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = Path(tmp) / "checkpoint"
        family.hf_causal_lm().save_pretrained(str(checkpoint))
        _tiny_tokenizer(checkpoint)
        built = Path(tmp) / "built"
        command = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i",
                   str(checkpoint), "-o", str(built), "-p", precision, "-e", "cpu", "-c",
                   str(Path(tmp) / "cache")]
        if family.genai_options:
            command += ["--extra_options", *family.genai_options]
        done = subprocess.run(command, capture_output=True, text=True,
                              env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=600)
        if done.returncode:
            raise RuntimeError(f"genai builder failed: {done.stderr.strip().splitlines()[-1]}")
        for name in ("model.onnx", "model.onnx.data", "genai_config.json"):
            if (built / name).exists():
                shutil.copy(built / name, out_dir / name)
    return {"tool": "onnxruntime_genai.models.builder", "precision": precision,
            "execution_provider": "cpu", "input": "save_pretrained checkpoint (random weights)",
            **({"extra_options": " ".join(family.genai_options)} if family.genai_options
               else {})}


# -- post-processing steps -----------------------------------------------------------------


def _ort_optimizer(family: Family, src: Path, out: Path, fp16: bool) -> dict[str, Any]:
    from onnxruntime.transformers.optimizer import optimize_model

    if family.ort_model_type is None:
        raise ValueError(f"{family.name}: no model_type for onnxruntime's optimizer")
    optimized = optimize_model(str(src), model_type=family.ort_model_type,
                               num_heads=family.num_heads, hidden_size=family.hidden_size)
    options: dict[str, Any] = {"model_type": family.ort_model_type,
                               "num_heads": family.num_heads,
                               "hidden_size": family.hidden_size}
    if fp16:
        optimized.convert_float_to_float16(keep_io_types=True)
        options["convert_float_to_float16"] = {"keep_io_types": True}
    optimized.save_model_to_file(str(out))
    return {"tool": "onnxruntime.transformers.optimizer.optimize_model", **options}


def _ortfusions(src: Path, out: Path) -> dict[str, Any]:
    import onnx_ir as ir
    from onnxscript.rewriter.ort_fusions import optimize_for_ort

    model = ir.load(str(src))
    model, counts = optimize_for_ort(model)
    ir.save(model, str(out))
    return {"tool": "onnxscript.rewriter.ort_fusions.optimize_for_ort",
            "fusions": {k: v for k, v in counts.items() if v}}


def _qdyn(src: Path, out: Path) -> dict[str, Any]:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # DefaultTensorType: the optimizer's contrib ops leave outputs shape inference cannot type
    quantize_dynamic(str(src), str(out), weight_type=QuantType.QInt8,
                     extra_options={"DefaultTensorType": 1})
    return {"tool": "onnxruntime.quantization.quantize_dynamic", "weight_type": "QInt8",
            "extra_options": {"DefaultTensorType": "FLOAT"}}


def _int4(src: Path, out: Path) -> dict[str, Any]:
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quantizer = MatMulNBitsQuantizer(onnx.load(str(src)), bits=4, block_size=BLOCK_SIZE,
                                     is_symmetric=True)
    quantizer.process()
    quantizer.model.save_model_to_file(str(out))
    return {"tool": "onnxruntime.quantization.matmul_nbits_quantizer.MatMulNBitsQuantizer",
            "bits": 4, "block_size": BLOCK_SIZE, "is_symmetric": True}


class _Calibration:
    """``CALIBRATION_SETS`` input sets made as the benchmark's own (realworld.feeds), other
    seeds: what ``quantize_static`` reads its activations' ranges from."""

    def __init__(self, model: Path):
        from realworld.feeds import feeds_for

        self.sets = iter([feeds_for(model, seed=100 + i) for i in range(CALIBRATION_SETS)])

    def get_next(self):
        return next(self.sets, None)


# quantize_static's formats: (format, activation type, weight type, extra options)
STATIC = {
    "qop": ("QOperator", "QUInt8", "QInt8", {}),
    "qdq": ("QDQ", "QUInt8", "QInt8", {}),
    # the QNN execution provider's recipe: 16-bit activations through com.microsoft Q/DQ
    "qnn": ("QDQ", "QUInt16", "QUInt8", {"UseQDQContribOps": True}),
}


def _static(step: str, src: Path, out: Path) -> dict[str, Any]:
    """``quant_pre_process`` (the quantizer's recommended first step: shape inference and
    onnx's optimizer), then ``quantize_static`` per channel in ``STATIC[step]``'s format and
    types."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    fmt, activations, weights, extra = STATIC[step]
    prepared = out.with_name("prepared.onnx")
    quant_pre_process(str(src), str(prepared))
    quantize_static(str(prepared), str(out), _Calibration(src),
                    quant_format=getattr(QuantFormat, fmt), per_channel=True,
                    activation_type=getattr(QuantType, activations),
                    weight_type=getattr(QuantType, weights), extra_options=extra)
    prepared.unlink()
    return {"tool": "onnxruntime.quantization.quantize_static", "quant_format": fmt,
            "pre_process": "onnxruntime.quantization.shape_inference.quant_pre_process",
            "per_channel": True, "activation_type": activations, "weight_type": weights,
            "calibration": f"{CALIBRATION_SETS} input sets (realworld.feeds, seeds 100+)",
            **({"extra_options": extra} if extra else {})}


def _hqq(src: Path, out: Path) -> dict[str, Any]:
    """Half-quadratic quantization: 4-bit MatMulNBits with float zero points."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        HQQWeightOnlyQuantConfig,
        MatMulNBitsQuantizer,
    )

    config = HQQWeightOnlyQuantConfig(block_size=BLOCK_SIZE, bits=4)
    quantizer = MatMulNBitsQuantizer(onnx.load(str(src)), algo_config=config)
    quantizer.process()
    quantizer.model.save_model_to_file(str(out))
    return {"tool": "onnxruntime.quantization.matmul_nbits_quantizer.MatMulNBitsQuantizer",
            "algo_config": "HQQWeightOnlyQuantConfig", "bits": 4, "block_size": BLOCK_SIZE}


def _int4_gather(src: Path, out: Path) -> dict[str, Any]:
    """Block-quantized embeddings: the quantizer's ``Gather`` too (GatherBlockQuantized)."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        MatMulNBitsQuantizer,
    )

    kinds = ("MatMul", "Gather")
    config = DefaultWeightOnlyQuantConfig(block_size=BLOCK_SIZE, is_symmetric=False,
                                          op_types_to_quantize=kinds,
                                          quant_axes=(("MatMul", 0), ("Gather", 1)))
    quantizer = MatMulNBitsQuantizer(onnx.load(str(src)), algo_config=config)
    quantizer.process()
    quantizer.model.save_model_to_file(str(out))
    return {"tool": "onnxruntime.quantization.matmul_nbits_quantizer.MatMulNBitsQuantizer",
            "algo_config": "DefaultWeightOnlyQuantConfig", "bits": 4,
            "block_size": BLOCK_SIZE, "is_symmetric": False, "op_types_to_quantize": kinds,
            "quant_axes": {"MatMul": 0, "Gather": 1}}


def _fp16(src: Path, out: Path) -> dict[str, Any]:
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    onnx.save(convert_float_to_float16(onnx.load(str(src)), keep_io_types=False), str(out))
    return {"tool": "onnxruntime.transformers.float16.convert_float_to_float16",
            "keep_io_types": False}


def _ort_offline(src: Path, out: Path, level: str) -> dict[str, Any]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = {
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED}[level]
    options.optimized_model_filepath = str(out)
    ort.InferenceSession(str(src), options, providers=["CPUExecutionProvider"])
    return {"tool": "onnxruntime.SessionOptions.optimized_model_filepath",
            "graph_optimization_level": level, "providers": ["CPUExecutionProvider"]}


def _apply(step: str, family: Family, src: Path, out: Path) -> dict[str, Any]:
    if step in ("ort-opt", "ort-opt-fp16"):
        return _ort_optimizer(family, src, out, fp16=step == "ort-opt-fp16")
    if step in ("ort-basic", "ort-extended"):
        return _ort_offline(src, out, step.removeprefix("ort-"))
    if step in STATIC:
        return _static(step, src, out)
    return {"ortfusions": _ortfusions, "qdyn": _qdyn, "int4": _int4, "fp16": _fp16,
            "hqq": _hqq, "int4-gather": _int4_gather}[step](src, out)


# -- the build -----------------------------------------------------------------------------


def build(recipe: Recipe, cache: Path = DEFAULT_CACHE,
          versions: dict[str, str] | None = None) -> Path:
    """The recipe's model in the cache, built (with its parents) where missing. Raises what
    the tools raise when a step fails."""
    versions = versions or tool_versions()
    folder = model_dir(cache, recipe, versions)
    model = folder / "model.onnx"
    if (folder / "provenance.json").exists():
        return model
    family = FAMILIES[recipe.family]
    parent = recipe.parent
    src = build(parent, cache, versions) if parent is not None else None
    started = time.perf_counter()  # this step only; its parents were timed when built
    work = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=cache))
    try:
        if parent is None and recipe.export.startswith("genai-"):
            made = _genai(family, work, recipe.export.removeprefix("genai-"))
        elif parent is None:
            made = _export(family, work / "model.onnx", dynamo=recipe.export == "dynamo")
        else:
            made = _apply(recipe.steps[-1], family, src, work / "model.onnx")
        from realworld.feeds import feeds_for

        feeds = feeds_for(work / "model.onnx")
        import numpy as np

        np.savez(work / "inputs.npz", **feeds)
        history = []
        if parent is not None:
            history = json.loads((src.parent / "provenance.json").read_text())["how"]
        provenance = {
            "recipe": recipe.name,
            "family": {"name": family.name, "description": family.description,
                       "hidden": family.hidden_size, "heads": HEADS,
                       **({"kv_heads": KV_HEADS} if family.hf_causal_lm else {}),
                       "layers": 2, "vocab": VOCAB, "weights": "random (torch.manual_seed(0))"},
            "how": [*history, {"step": recipe.steps[-1] if recipe.steps else recipe.export,
                               **made}],
            "versions": versions,
            "sha256": sha256(work / "model.onnx"),
            "bytes": sum(p.stat().st_size for p in work.iterdir() if p.name.startswith("model")),
            "opsets": opsets(work / "model.onnx"),
            "ops": op_inventory(work / "model.onnx"),
            "inputs": {k: [list(v.shape), str(v.dtype)] for k, v in feeds.items()},
            "build_seconds": round(time.perf_counter() - started, 2),
        }
        (work / "provenance.json").write_text(json.dumps(provenance, indent=1) + "\n")
        if folder.exists():
            shutil.rmtree(folder)
        work.rename(folder)
    finally:
        if work.exists():
            shutil.rmtree(work)
    return model
