"""Intermediate shapes a model declares that a run contradicts (``declared-shape``).

onnxruntime-genai's float16 CPU models declare the key/value heads repeated from the whole
KV cache as ``(batch_size, sequence_length, 64)``; on a decoding step they are
``(batch_size, total_sequence_length, 64)``, and onnxruntime's memory planner, which trusts
the declarations, fails ("Shape mismatch attempting to re-use buffer"). The handmade model
here has the same fault: a cache joined with the new tokens (``Concat``), the values computed
from it declared with the new tokens' length. Real onnxruntime runs; the numbers against
numpy written from the ops' documentation.
"""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper, parser
from rewriter_plugins.onnxruntime_target.declared_shapes import (
    REASON,
    contradictions,
    declared_intermediates,
)

from rewriter.api import check, rewrite
from rewriter.io.inputs import cache_dims, generate_inputs

STALE = ("c", "d")  # the values declared (batch_size, sequence_length, 4), made (.., total, 4)

MODEL = """
<ir_version: 8, opset_import: ["" : 17]>
cache (float[batch_size, sequence_length, 4] x, float[batch_size, past_sequence_length, 4] past)
    => (float[batch_size, sequence_length, 4] y,
        float[batch_size, total_sequence_length, 4] present)
<float[batch_size, sequence_length, 4] a, float[batch_size, sequence_length, 4] c,
 float[batch_size, sequence_length, 4] d, float[batch_size, total_sequence_length, 4] e>
{
  a = Neg (x)
  present = Concat <axis = 1> (past, a)
  c = Abs (present)
  d = Sigmoid (c)
  e = Neg (d)
  y = ReduceMax <axes = [1], keepdims = 1> (e)
}
"""


def _model() -> onnx.ModelProto:
    model = parser.parse_model(MODEL)
    for node, name in zip(model.graph.node, ("neg", "cat", "abs", "sigmoid", "neg2", "max")):
        node.name = name
    onnx.checker.check_model(model, full_check=True)
    return model


def _expected(x: np.ndarray, past: np.ndarray) -> dict[str, np.ndarray]:
    """y = max over the sequence of -sigmoid(|concat(past, -x)|) (documentation's formulas)."""
    present = np.concatenate([past, -x], axis=1)
    e = -1.0 / (1.0 + np.exp(-np.abs(present)))
    return {"y": e.max(axis=1, keepdims=True).astype(np.float32), "present": present}


def _feeds(batch: int = 2, past: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((batch, 1, 4)).astype(np.float32),
            "past": rng.standard_normal((batch, past, 4)).astype(np.float32)}


@pytest.fixture(scope="module")
def plugins():
    from rewriter.testing import oracle_plugins

    return oracle_plugins()


def _ort(model: onnx.ModelProto, feeds):
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def test_onnxruntime_fails_on_the_declarations_and_runs_without_them():
    model, feeds = _model(), _feeds()
    with pytest.raises(Exception, match="Shape mismatch attempting to re-use buffer"):
        _ort(model, feeds)
    del model.graph.value_info[:]
    got, want = _ort(model, feeds), _expected(**feeds)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-6)


def test_generated_inputs_give_one_new_token_after_a_longer_cache():
    dims = cache_dims(_model())
    assert dims["sequence_length"] == 1
    assert dims["past_sequence_length"] > 1


def test_a_cache_the_model_joins_itself_gets_the_head_size_of_what_it_is_joined_with():
    """onnxruntime-genai's float16 CPU models join the past keys with the new ones
    (``Concat`` on the sequence axis) before a ``MultiHeadAttention`` that takes no past:
    the cache's symbolic head size is the new keys' (any other fails the ``Concat``)."""
    model = parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    joined (float[batch_size, 2, sequence_length, 8] x,
            float[batch_size, 2, past_sequence_length, kv_cache_dim] past_key)
        => (float[batch_size, 2, total_sequence_length, kv_cache_dim] present_key)
    {
      k = MatMul (x, w)
      present_key = Concat <axis = 2> (past_key, k)
    }
    """)
    weight = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    model.graph.initializer.append(numpy_helper.from_array(weight, "w"))
    assert cache_dims(model)["kv_cache_dim"] == 16
    feeds = generate_inputs(model)
    assert feeds["past_key"].shape[-1] == 16 and feeds["x"].shape[2] == 1
    (present,) = _ort(model, feeds).values()  # the Concat takes them
    assert present.shape == (feeds["x"].shape[0], 2, feeds["past_key"].shape[2] + 1, 16)


def test_contradictions_are_the_declarations_the_run_contradicts():
    model, feeds = _model(), _feeds(batch=2, past=3)
    shapes = {n: (2, 1, 4) if n == "a" else (2, 4, 4) for n in declared_intermediates(model)}
    found = contradictions(model, feeds, shapes)
    assert [c.name for c in found] == list(STALE)
    assert "'sequence_length', which the inputs make 1; the run makes 4" in found[0].why
    # e's (batch_size, total_sequence_length, 4): a name no input gives, one size: right;
    # one symbolic name for two sizes is a contradiction (one name, one size)
    del model.graph.value_info[3]
    model.graph.value_info.append(helper.make_tensor_value_info("e", TensorProto.FLOAT,
                                                                ["n", "n", 4]))
    found = contradictions(model, feeds, shapes)
    assert [c.name for c in found] == [*STALE, "e"]
    assert "'n', which the run makes 2, 4 in different values" in found[-1].why


def test_check_onnxruntime_names_each_contradicted_value(plugins):
    (result,) = check(_model(), ["onnxruntime"], plugins=plugins, confirm=True).results
    assert not result.runs
    assert {f.reason for f in result.findings} == {REASON}
    assert sorted(f.value for f in result.findings) == list(STALE)
    by_value = {f.value: f for f in result.findings}
    assert by_value["c"].op_type == "Abs" and by_value["c"].node_name == "abs"
    assert "Shape mismatch attempting to re-use buffer" in by_value["c"].detail
    assert "runs it without the intermediate declarations" in by_value["c"].detail
    assert all(p.startswith("pass") for p in result.plan.values()), result.plan


def test_a_failure_the_declarations_do_not_explain_stays_inconclusive(plugins):
    model = _model()  # every declaration right: a failure of the inputs' own making
    del model.graph.value_info[:]
    model.graph.node[1].attribute[0].i = 2  # Concat along the features: sizes differ
    (result,) = check(model, ["onnxruntime"], plugins=plugins, confirm=True).results
    assert result.runs, result.findings
    assert "not counted as a refusal" in result.confirmation


@pytest.mark.parametrize("batch", [1, 2])
def test_rewrite_for_onnxruntime_clears_them_and_verifies(plugins, tmp_path, batch):
    feeds = _feeds(batch=batch)
    np.savez(tmp_path / "inputs.npz", **feeds)
    result = rewrite(_model(), ["onnxruntime"], plugins=plugins,
                     compare_options={"inputs": str(tmp_path / "inputs.npz")})
    report = result.report
    assert report.verdict == "verified", report.verdict_reason
    out = result.model
    declared = {v.name: v for v in out.graph.value_info}
    for name in STALE:
        assert not declared[name].type.tensor_type.HasField("shape")
        assert declared[name].type.tensor_type.elem_type == TensorProto.FLOAT
    assert declared["a"].type.tensor_type.HasField("shape")  # right: kept
    assert [n.op_type for n in out.graph.node] == [n.op_type for n in _model().graph.node]
    got, want = _ort(out, feeds), _expected(**feeds)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-6)


def _genai_fp16(recipe: str) -> str | None:
    cache = os.path.expanduser("~/.cache/onnx-graph-rewriter/realworld")
    found = sorted(glob.glob(os.path.join(cache, recipe.replace("/", "__") + "-*",
                                          "model.onnx")), key=os.path.getmtime)
    return found[-1] if found else None


def test_genai_fp16_check_finds_only_the_contradicted_declarations(plugins):
    """onnxruntime-genai's Qwen3 float16 CPU model, from the benchmark's cache (skipped
    without it): onnx's inference failing on it is a warning, and the findings are the
    declarations a decoding step contradicts."""
    path = _genai_fp16("qwen3/genai-fp16")
    if path is None:
        pytest.skip("qwen3/genai-fp16 is not built (python benchmarks/realworld build)")
    model = onnx.load(path, load_external_data=False)
    assert generate_inputs(model)["past_key_values.0.key"].shape[-1] == 16  # head size
    (result,) = check(path, ["onnxruntime"], plugins=plugins).results
    assert result.findings and {f.reason for f in result.findings} == {REASON}
    assert "/model/layers.1/attn/v_proj/repeat_kv/Reshape_4/output_0" in {
        f.value for f in result.findings}
    assert any("Concat" in w for w in result.warnings), result.warnings
