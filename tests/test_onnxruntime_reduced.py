"""``--target onnxruntime:ops=FILE``: a reduced onnxruntime build's operator configuration.

The oracle for what a configuration lists is onnxruntime's own parser
(``onnxruntime.tools.reduced_build_config_parser.parse_config``); for the numbers, the
original model run by the full onnxruntime (its own kernels of the fused ops)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper
from rewriter_plugins.onnxruntime_reduced import read_config

import rewriter
from rewriter.detect.targets import resolve_targets
from rewriter.errors import TargetError, UnfixableError

# The ops a basic reduced build keeps (at the model's opset 20): no LayerNormalization,
# Gelu or Softmax, no contrib op.
BASIC_OPS = ("Add,Sub,Mul,Div,MatMul,Transpose,ReduceMean,ReduceMax,ReduceSum,Sqrt,Pow,Erf,"
             "Exp,Tanh,Cast,CastLike,Shape,Size,Reshape,Flatten,Concat,Slice,Gather,Expand,"
             "ConstantOfShape,Reciprocal,Identity,Neg,Squeeze,Unsqueeze,Split,Where,Equal,Less")

# A fused transformer block: LayerNormalization-17, Gelu-20, Softmax-13 and three
# onnxruntime contrib ops.
FUSED_BLOCK = """
<ir_version: 10, opset_import: ["": 20, "com.microsoft": 1]>
block (float[2, 4, 8] x, float[2, 4, 8] skip) => (float[2, 4, 8] y, float[2, 4, 4] p) {
    ln = LayerNormalization <axis: int = -1, epsilon: float = 1e-5> (x, gamma, beta)
    h = MatMul (ln, w1)
    g = Gelu (h)
    f = com.microsoft.FastGelu (g, b1)
    s = com.microsoft.SkipLayerNormalization <epsilon: float = 1e-5> (f, skip, gamma, beta, b1)
    bg = com.microsoft.BiasGelu (s, b1)
    y = Add (bg, x)
    t = Transpose <perm: ints = [0, 2, 1]> (y)
    sc = MatMul (y, t)
    p = Softmax <axis: int = -1> (sc)
}
"""


def fused_block() -> onnx.ModelProto:
    model = onnx.parser.parse_model(FUSED_BLOCK)
    rng = np.random.default_rng(0)
    for name, shape in (("gamma", [8]), ("beta", [8]), ("w1", [8, 8]), ("b1", [8])):
        array = rng.standard_normal(shape).astype(np.float32)
        model.graph.initializer.append(numpy_helper.from_array(array, name))
    onnx.checker.check_model(model, full_check=True)
    return model


def _ops(model: onnx.ModelProto) -> set[tuple[str, str]]:
    return {(n.domain or "ai.onnx", n.op_type) for n in model.graph.node}


def _run(model: onnx.ModelProto, feeds) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def test_config_is_read_as_onnxruntime_reads_it(tmp_path):
    from onnxruntime.tools.reduced_build_config_parser import parse_config

    config = tmp_path / "required_operators.config"
    config.write_text(
        "# Generated from model/s:\n"
        "# - model.ort\n"
        "ai.onnx;13;Gather,OneHot{\"custom\": [[\"int64_t\", \"float\", \"int64_t\"]]}\n"
        "ai.onnx;12,13;Add{\"inputs\": {\"0\": [\"float\", \"int32_t\"]}},Cast{\"inputs\": "
        "{\"0\": [\"float\"]}, \"outputs\": {\"0\": [\"int64_t\"]}},Concat\n"
        "com.microsoft;1;FusedConv\n")
    build = read_config(config)
    # (onnxruntime's parser shares one set between the opsets of a multi-opset line, so a
    # later line for one of them adds its ops to the others; the lines are ordered here so
    # that this does not happen, and this target reads each line as written)
    expected, _ = parse_config(str(config))
    ours: dict[str, dict[int, set[str]]] = {}
    for (domain, op), opsets in build.ops.items():
        for opset in opsets:
            ours.setdefault(domain or "ai.onnx", {}).setdefault(opset, set()).add(op)
    assert ours == expected
    add = build.types[("", "Add")]
    assert add.inputs == {0: frozenset({"tensor(float)", "tensor(int32)"})}
    assert build.types[("", "Cast")].outputs == {0: frozenset({"tensor(int64)"})}
    assert build.types[("", "OneHot")].custom == frozenset(
        {("tensor(int64)", "tensor(float)", "tensor(int64)")})


def test_config_errors_name_the_file_and_line(tmp_path):
    bad = tmp_path / "ops.config"
    bad.write_text("ai.onnx;13;Add\nai.onnx;thirteen;Mul\n")
    with pytest.raises(TargetError, match=r"ops.config:2: opsets must be integers"):
        read_config(bad)
    bad.write_text('ai.onnx;13;Add{"inputs": {"0": ["quad"]}}\n')
    with pytest.raises(TargetError, match=r"ops.config:1: unknown type 'quad'"):
        read_config(bad)
    with pytest.raises(TargetError, match="cannot read the reduced-build operator config"):
        read_config(tmp_path / "missing.config")


def test_reduced_build_findings(plugins, tmp_path):
    config = tmp_path / "ops.config"
    config.write_text('ai.onnx;20;MatMul,Transpose,Softmax\n'
                      'ai.onnx;13;Add{"inputs": {"0": ["int64_t"]}}\n')
    target, = resolve_targets(plugins, [f"onnxruntime:ops={config}"])
    assert target.name == f"onnxruntime:ops={config}"
    report = rewriter.check(fused_block(), [target.name], plugins=plugins, confirm=False)
    found = {(f.op_type, f.reason) for f in report.findings}
    # Softmax is listed at 20 but its kernel for Softmax(13) is registered "since 13": kept
    assert ("Softmax", "no-kernel") not in found
    assert ("MatMul", "no-kernel") not in found and ("Transpose", "no-kernel") not in found
    assert {("LayerNormalization", "no-kernel"), ("Gelu", "no-kernel"),
            ("FastGelu", "no-kernel"), ("SkipLayerNormalization", "no-kernel"),
            ("BiasGelu", "no-kernel")} <= found
    # Add(14)'s kernel is "since 14": a build listing Add only at opset 13 lacks it
    add = next(f for f in report.findings if f.op_type == "Add")
    assert "lists it only at opset 13" in add.detail
    # type reduction: Add(13) kept only for int64 input 0
    model = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["": 13]>
        g (float[3] a, float[3] b, int64[3] c, int64[3] d) => (float[3] y, int64[3] z) {
            y = Add (a, b)
            z = Add (c, d)
        }""")
    report = rewriter.check(model, [target.name], plugins=plugins, confirm=False)
    assert [(f.node_name or f.path, f.reason) for f in report.findings] == [
        ("graph/node 0 (Add)", "type-binding")]
    assert "input 0 is tensor(float); the build keeps it only for {int64}" in \
        report.findings[0].detail


def test_unknown_ops_argument(plugins):
    with pytest.raises(TargetError, match="needs a reduced-build operator config file"):
        resolve_targets(plugins, ["onnxruntime:ops="])


def test_fused_model_rewritten_to_the_listed_ops(plugins, tmp_path):
    from onnxruntime.tools.reduced_build_config_parser import parse_config

    config = tmp_path / "required_operators.config"
    config.write_text(f"ai.onnx;20;{BASIC_OPS},Sum\n")
    original = fused_block()
    result = rewriter.rewrite(original, [f"onnxruntime:ops={config}"], plugins=plugins)
    report = result.report
    assert report.verification["compare"] == "ok", report.verification
    rewritten = result.model
    listed, _ = parse_config(str(config))
    allowed = {("ai.onnx", op) for op in listed["ai.onnx"][20]} | {("ai.onnx", "Constant")}
    assert _ops(rewritten) <= allowed, _ops(rewritten) - allowed
    assert ("com.microsoft", "FastGelu") in _ops(original)
    # the same numbers as the full onnxruntime's own fused kernels, on other inputs
    rng = np.random.default_rng(7)
    feeds = {"x": rng.standard_normal((2, 4, 8)).astype(np.float32),
             "skip": rng.standard_normal((2, 4, 8)).astype(np.float32)}
    for want, got in zip(_run(original, feeds), _run(rewritten, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_refused_naming_each_op_without_remedy(plugins, tmp_path):
    config = tmp_path / "ops.config"
    config.write_text(f"ai.onnx;20;{BASIC_OPS}\n")  # no Sum: Gelu's spec body needs it
    with pytest.raises(UnfixableError) as info:
        rewriter.rewrite(fused_block(), [f"onnxruntime:ops={config}"], plugins=plugins)
    message = str(info.value)
    assert "ai.onnx::Gelu(20)" in message and "Sum(13)" in message
    assert "FastGelu" not in message  # the others have a remedy


def test_corpus_whisper_encoder_on_a_reduced_build(plugins, corpus, tmp_path):
    config = tmp_path / "ops.config"
    config.write_text(f"ai.onnx;17;{BASIC_OPS}\n")
    model = onnx.load(corpus / "ort_whisper_encoder_self_attention.onnx")
    result = rewriter.rewrite(model, [f"onnxruntime:ops={config}"], plugins=plugins)
    assert result.report.verification["compare"] == "ok", result.report.verification
    assert {d for d, _ in _ops(result.model)} == {"ai.onnx"}
    assert not {op for _, op in _ops(result.model)} & {
        "LayerNormalization", "Softmax", "Attention", "SkipLayerNormalization", "BiasGelu"}
