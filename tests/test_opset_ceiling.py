"""``rewrite --target opset:13`` and ``opset:17`` from models that import ai.onnx 20 or 22 and
use vendor ops: the committed real-world models of that kind (``tests/data/realworld``, made
by ``python benchmarks/realworld testdata``) and the vendor-op node samples raised to opset 22
(``benchmarks/downconvert_vendor.py``). Each result passes the full checker, imports nothing
above the ceiling (model and local functions), keeps no vendor op, and computes what the
original computes: the real models on onnxruntime against the original on onnxruntime (their
committed inputs), the samples against their registered oracle."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from rewriter.api import rewrite
from rewriter.testing import onnxruntime_below
from tests.conftest import skip_where_the_oracle_cannot_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import downconvert_vendor  # noqa: E402

ort = pytest.importorskip("onnxruntime")

DATA = Path(__file__).resolve().parent / "data" / "realworld"
CEILINGS = (13, 17)
# the committed models that import ai.onnx >= 20 and use vendor ops (checked below)
MODELS = ("whisper-encoder-dynamo-ortfusions", "llama-genai-int4", "bert-dynamo-ortfusions",
          "qwen2-dynamo-ort-extended")
SLOW = {"qwen2-dynamo-ort-extended", "bert-dynamo-ortfusions"}
# the onnxruntime whose contrib kernels compute a model as its ops define (the oracle is the
# original run on onnxruntime), and why
MODEL_MIN_ONNXRUNTIME = {
    "bert-dynamo-ortfusions": (
        "1.23", "its com.microsoft Attention adds a (B, 1, S, S) attention_bias, which "
        "onnxruntime 1.21.0 broadcasts wrongly for the batch entries after the first (the "
        "rewritten model on 1.21.0 agrees with the original on 1.32.0 within 5e-7)"),
    "llama-genai-int4": (
        "1.23", "onnxruntime 1.21.0 cannot load the export: its GroupQueryAttention nodes give "
        "12 inputs, 1.21.0's schema takes 7 to 9"),
}
# the vendor ops the real exports carry: one sample of each runs by default, all when slow
REAL_EXPORT_OPS = ("Attention", "MultiHeadAttention", "GroupQueryAttention", "MatMulNBits",
                   "SkipLayerNormalization", "SkipSimplifiedLayerNormalization", "BiasGelu",
                   "FastGelu", "QuickGelu", "FusedMatMul", "RotaryEmbedding",
                   "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "QAttention",
                   "EmbedLayerNormalization", "SimplifiedLayerNormalization")


def _run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 4
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.fixture(scope="module")
def plugins():
    from rewriter.testing import oracle_plugins

    return oracle_plugins()


@pytest.mark.parametrize("name,ceiling", [
    pytest.param(m, c, id=f"{m}-opset{c}", marks=[pytest.mark.slow] if m in SLOW else [])
    for m in MODELS for c in CEILINGS])
def test_committed_new_opset_model_lowers_under_the_ceiling(plugins, name, ceiling):
    model = onnx.load(str(DATA / f"{name}.onnx"))
    imports = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    vendor = {n.domain for n in model.graph.node} - {"", "ai.onnx"}
    assert imports["ai.onnx"] >= 20 and vendor, (imports, vendor)  # what the test is about

    out = rewrite(model, [f"opset:{ceiling}"], plugins=plugins, confirm=False,
                  verify=False).model
    onnx.checker.check_model(out, full_check=True)
    assert downconvert_vendor.above_ceiling(out, ceiling) == []

    with np.load(DATA / f"{name}.inputs.npz") as npz:
        feeds = dict(npz)
    version, why = MODEL_MIN_ONNXRUNTIME.get(name, ("0", ""))
    if onnxruntime_below(version):
        pytest.skip(f"{name}: needs onnxruntime >= {version}, {ort.__version__} is installed: "
                    f"{why}")
    expected, got = _run(model, feeds), _run(out, feeds)
    assert len(got) == len(expected)
    for e, g in zip(expected, got):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-3, atol=1e-4)


# samples that cannot be lowered today, and why (docs/opset-conversion.md): strict, so one
# that starts passing is noticed
_NO_GRID_SAMPLE_AT_13 = "no GridSample below 16"
_BICUBIC = (", and mmdeploy's Gather body (written for older opsets, adapted to 22, then "
            "lowered) samples bilinear/nearest only")
_ATEN = ", and the pytorch plugin's grid_sampler has no other body"


def _declined(sample, ceiling: int) -> str | None:
    if sample.op.endswith("::grid_sampler") and ceiling == 13:
        if sample.op.startswith("org.pytorch.aten"):
            return _NO_GRID_SAMPLE_AT_13 + _ATEN
        if "mode2" in sample.label:  # bicubic
            return _NO_GRID_SAMPLE_AT_13 + _BICUBIC
    if sample.op == "org.pytorch.aten::grid_sampler" and "float16" in sample.label:
        return ("its body's GridSample-22 of float16 reads a Cast of the input, whose rank "
                "is unknown inside the body: GridSample-20+ is lowered to 16 for rank 4 only")
    if sample.op == "org.pytorch.aten::grid_sampler" and "double" in sample.label:
        return ("lowered to GridSample-16 of double, which neither onnxruntime (float only) "
                "nor onnx's reference evaluator (it knows the opset-20 mode names only) runs")
    # (GatherBlockQuantized of int4/uint4 data lowers too: below opset 21 the constant
    # 4-bit data is widened to 8 bits by the opset conversion)
    return None


def _sample_params():
    from rewriter.testing import oracle_plugins

    samples, _ = downconvert_vendor.vendor_samples(oracle_plugins())
    first: set[str] = set()  # the first sample of each op the real exports carry: fast
    for sample in samples:
        op = sample.op.split("::")[1]
        slow = op not in REAL_EXPORT_OPS or op in first
        first.add(op)
        for ceiling in CEILINGS:
            marks = [pytest.mark.slow] if slow else []
            why = _declined(sample, ceiling)
            if why:
                marks.append(pytest.mark.xfail(strict=True, reason=why))
            yield pytest.param(sample.label, ceiling, id=f"{sample.label}-opset{ceiling}",
                               marks=marks)


@pytest.fixture(scope="module")
def samples(plugins):
    found, _ = downconvert_vendor.vendor_samples(plugins)
    return {s.label: s for s in found}


@pytest.mark.parametrize("label,ceiling", list(_sample_params()))
def test_vendor_sample_at_opset_22_lowers_under_the_ceiling(plugins, samples, label, ceiling):
    from rewriter.testing import needs_newer_onnxruntime

    too_old = needs_newer_onnxruntime(samples[label].check)
    if too_old:
        pytest.skip(too_old)
    result = downconvert_vendor.evaluate(samples[label], ceiling, plugins)
    if result["stage"] == "error":
        skip_where_the_oracle_cannot_run(result["why"])
    assert result["stage"] == "matches", result.get("why")


def test_an_output_the_oracle_gives_no_value_for_declares_no_shape():
    """onnxruntime 1.23's SkipLayerNormalization gives None for mean / inv_std_var: the
    raised sample declares no shape for them (not a rank-0 one, which strict inference
    refuses)."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Identity", ["x"], ["z"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "z")])
    model = helper.make_model(graph)
    declared = downconvert_vendor.with_output_shapes(model, [np.zeros((2, 3)), None])
    y, z = (o.type.tensor_type for o in declared.graph.output)
    assert [d.dim_value for d in y.shape.dim] == [2, 3]
    assert not z.HasField("shape")
