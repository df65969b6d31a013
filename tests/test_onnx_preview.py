"""The ``onnx-preview`` plugin beyond its samples (which ``tests/test_oracles.py`` checks
against onnx's reference evaluator, the implementation of FlexAttention, Adagrad, Adam and
Momentum): the body's imports and precision, declines, unused outputs, If branches, and the
spec's test data shipped with the corpus. Rewritten for onnxruntime (which has none of these
ops), the results run on onnxruntime.
"""

from __future__ import annotations

import glob

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from rewriter_plugins.onnx_preview import bias_mod, causal_mod, modifier

from rewriter import testing
from rewriter.api import rewrite
from rewriter.errors import UnfixableError
from rewriter.testing import make_model, run_onnxruntime, value_info
from tests.conftest import CORPUS, onnxruntime_max_ir_version, onnxruntime_max_opset

ort = pytest.importorskip("onnxruntime")

PREVIEW, TRAINING = "ai.onnx.preview", "ai.onnx.preview.training"
F32, F64, F16 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16
NP = {F32: np.float32, F64: np.float64, F16: np.float16}
TOL = {F32: dict(rtol=1e-5, atol=1e-6), F64: dict(rtol=1e-12, atol=1e-12),
       F16: dict(rtol=1e-2, atol=2e-3)}


def _preview_model(nodes, inputs, outputs, opsets, ir_version=10):
    """ai.onnx at ``opsets[""]`` (absent: not imported), the other domains at theirs."""
    return make_model(nodes, inputs, outputs, opset=opsets.get(""), ir_version=ir_version,
                      domains={d: v for d, v in opsets.items() if d})


def _without_preview_ops(model, plugins):
    """Rewritten for onnxruntime (the tests compare numbers themselves): only standard ops
    left, in subgraphs too, no preview domain imported, and a valid model."""
    rewritten = testing.rewritten(model, "onnxruntime", plugins, standard_only=True)
    assert not [o.domain for o in rewritten.opset_import if o.domain.startswith(PREVIEW)]
    onnx.checker.check_model(rewritten, full_check=True)
    return rewritten


# -- training optimizers --------------------------------------------------------------------

KINDS = {"Adagrad": ("XGH", "XH"), "Adam": ("XGVH", "XVH"), "Momentum": ("XGV", "XV")}


def _optimizer_model(op_type, count, elem, opsets, r_elem=None, **attrs):
    inputs, outputs = KINDS[op_type]
    names = [f"{k}{i}" for k in inputs for i in range(count)]
    out_names = [f"{k}{i}_new" for k in outputs for i in range(count)]
    shapes = [[3, 4], [5], [2, 1, 3]]
    node = helper.make_node(op_type, ["R", "T", *names], out_names, domain=TRAINING, **attrs)
    in_vis = [value_info("R", r_elem or elem, []), value_info("T", TensorProto.INT64, [])]
    in_vis += [value_info(n, elem, shapes[int(n[1:]) % 3]) for n in names]
    out_vis = [value_info(n, elem, shapes[int(n[1:-4]) % 3]) for n in out_names]
    return _preview_model([node], in_vis, out_vis, opsets)


def _optimizer_feeds(model, rng, t):
    feeds = {}
    for vi in model.graph.input:
        tt = vi.type.tensor_type
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        shape = [d.dim_value for d in tt.shape.dim]
        if vi.name == "T":
            feeds["T"] = np.array(t, np.int64)
        elif vi.name == "R":
            feeds["R"] = np.array(0.1, dtype)
        elif vi.name.startswith("H"):  # accumulated squares are non-negative
            feeds[vi.name] = rng.uniform(0, 2, shape).astype(dtype)
        else:
            feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


OPTIMIZER_CASES = [
    ("Adam", dict(alpha=0.8, beta=0.95, epsilon=1e-4, norm_coefficient=0.02,
                  norm_coefficient_post=0.05)),
]


def test_optimizer_without_ai_onnx_import_imports_ai_onnx_13():
    """The model imports only the training domain (the engine plans it at opset 1): the
    body brings ai.onnx 13 (its values: the no-import samples of tests/test_oracles.py)."""
    model = _optimizer_model("Momentum", 2, F32, {TRAINING: 1}, r_elem=F64, alpha=0.9,
                             beta=0.5, mode="standard", norm_coefficient=0.01)
    model.ir_version = 7
    rewritten = _without_preview_ops(model, None)
    assert {o.domain: o.version for o in rewritten.opset_import} == {"": 13}


def test_optimizer_declines(plugins):
    """A mode the spec does not define, an attribute the body would not honour, and an input
    count that does not split into groups are left alone."""
    bad = [
        _optimizer_model("Momentum", 1, F32, {"": 13, TRAINING: 1}, alpha=0.9, beta=1.0,
                         mode="heavy-ball", norm_coefficient=0.0),
        _optimizer_model("Adagrad", 1, F32, {"": 13, TRAINING: 1}, foo=1.0),
    ]
    odd = _optimizer_model("Adagrad", 2, F32, {"": 13, TRAINING: 1})
    del odd.graph.node[0].input[-1]
    bad.append(odd)
    for model in bad:
        with pytest.raises(UnfixableError):
            rewrite(model, ["onnxruntime"], plugins=plugins, confirm=False, verify=False)


def _test_data(name):
    folder = CORPUS / "testdata" / name / "test_data_set_0"
    load = [numpy_helper.to_array(onnx.load_tensor(p))
            for p in sorted(glob.glob(str(folder / "input_*.pb")))]
    expected = [numpy_helper.to_array(onnx.load_tensor(p))
                for p in sorted(glob.glob(str(folder / "output_*.pb")))]
    return load, expected


def _corpus_end_to_end(name, plugins):
    """``rewrite(path, ["onnxruntime"])`` with its own verification, then the result on the
    spec's test data."""
    path = CORPUS / f"{name}.onnx"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    result = rewrite(onnx.load(str(path)), ["onnxruntime"], plugins=plugins)
    assert not result.report.remaining
    inputs, expected = _test_data(name)
    names = [i.name for i in result.model.graph.input]
    got = run_onnxruntime(result.model, dict(zip(names, inputs)))
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    return result


def _run_expansion(model: onnx.ModelProto, feeds: dict) -> list:
    """onnx's expansion of a node, on onnxruntime, or on the reference evaluator where the
    installed onnxruntime does not load it (1.23: its opset 26 and IR 13 are above it)."""
    opset = max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    if model.ir_version > onnxruntime_max_ir_version() or opset > onnxruntime_max_opset():
        return ReferenceEvaluator(model).run(None, feeds)
    return run_onnxruntime(model, feeds)


def _adam_verdict_ok(result) -> bool:
    """The verification's oracle, onnx's reference evaluator, returns Adam's X_new as float64
    for one float tensor (its several-tensor path casts to float32), so compare may flag that
    dtype, and only that: every value must agree."""
    if result.report.verification["compare"] == "ok":
        return True
    for target in result.report.comparison.as_dict()["targets"]:
        for out in target["outputs"]:
            assert out["mismatches"] == 0, out
            assert out["ok"] or out["detail"] == "dtype float32, expected float64", out
    return True


def test_corpus_end_to_end(plugins):
    """The three corpus models: rewritten (verification included: compare with the original
    on the reference evaluator), equal to the spec's test data on onnxruntime; the
    FlexAttention result also agrees with onnx's own expansion of the node. One test, so
    the verification's worker process starts once."""
    flex = "onnx_preview_flexattention_score_mod"
    result = _corpus_end_to_end(flex, plugins)
    assert result.report.verification["compare"] == "ok"
    expanded = onnx.load(str(CORPUS / "testdata" / flex / "reference_expanded_ver26.onnx"))
    inputs, _ = _test_data(flex)
    feeds = dict(zip(["Q", "K", "V"], inputs))
    np.testing.assert_allclose(run_onnxruntime(result.model, feeds)[0],
                               _run_expansion(expanded, feeds)[0], rtol=1e-6, atol=1e-7)

    result = _corpus_end_to_end("onnx_preview_training_nesterov_momentum", plugins)
    assert result.report.verification["compare"] == "ok"

    result = _corpus_end_to_end("onnx_preview_training_adam", plugins)
    assert _adam_verdict_ok(result)


# -- FlexAttention --------------------------------------------------------------------------

def _flex_model(elem=F32, q_heads=2, kv_heads=2, e=4, ev=4, opset=26, **attrs):
    node = helper.make_node("FlexAttention", ["Q", "K", "V"], ["Y"], domain=PREVIEW, **attrs)
    inputs = [value_info("Q", elem, [2, q_heads, 3, e]), value_info("K", elem, [2, kv_heads, 5, e]),
              value_info("V", elem, [2, kv_heads, 5, ev])]
    return _preview_model([node], inputs, [value_info("Y", elem, [2, q_heads, 3, ev])],
                  {"": opset, PREVIEW: 1}, ir_version=10 if opset < 26 else 13)


def test_flex_attention_float16_softmax_in_float32(plugins):
    """float16 inputs: the softmax runs in float32 by default (its values: the float16
    sample of tests/test_oracles.py)."""
    model = _flex_model(F16, q_heads=4, kv_heads=2, score_mod=bias_mod(0.5))
    text = onnx.printer.to_text(_without_preview_ops(model, plugins))
    assert "Softmax" in text and "Cast <to: int = 1>" in text


def test_flex_attention_declines_outer_scope_capture(plugins):
    """A modifier reading a value of the graph around it cannot go into a function body."""
    mod = modifier("capture", [helper.make_node("Add", ["s", "outer"], ["s_out"])])
    node = helper.make_node("FlexAttention", ["Q", "K", "V"], ["Y"], domain=PREVIEW,
                            score_mod=mod)
    outer = helper.make_node("Constant", [], ["outer"], value_float=0.5)
    model = _flex_model()
    model.graph.node.insert(0, outer)
    model.graph.node[1].CopyFrom(node)
    with pytest.raises(UnfixableError):
        rewrite(model, ["onnxruntime"], plugins=plugins, confirm=False, verify=False)


# -- inside an If branch ----------------------------------------------------------------------

def test_ops_inside_if_branch(plugins):
    """FlexAttention (with a score_mod) and Momentum inside the branches of an If."""
    flex = helper.make_node("FlexAttention", ["Q", "K", "V"], ["Y"], domain=PREVIEW,
                            score_mod=causal_mod(), scale=0.4)
    momentum = helper.make_node("Momentum", ["R", "T", "Q", "K", "V"],
                                ["Y", "Vnew"], domain=TRAINING, alpha=0.9, beta=0.8,
                                mode="nesterov", norm_coefficient=0.01)
    shape = [1, 2, 3, 4]
    then = helper.make_graph([flex], "then", [], [value_info("Y", F32, shape)])
    other = helper.make_graph([momentum], "else", [], [value_info("Y", F32, shape)])
    node = helper.make_node("If", ["cond"], ["Out"], then_branch=then, else_branch=other)
    inputs = [value_info("cond", TensorProto.BOOL, []), value_info("R", F32, []),
              value_info("T", TensorProto.INT64, [])]
    inputs += [value_info(n, F32, shape) for n in "QKV"]
    model = _preview_model([node], inputs, [value_info("Out", F32, shape)],
                           {"": 17, PREVIEW: 1, TRAINING: 1})
    rewritten = _without_preview_ops(model, plugins)
    rng = np.random.default_rng(5)
    for cond in (True, False):
        feeds = {"cond": np.array(cond), "R": np.array(0.1, np.float32),
                 "T": np.array(2, np.int64)}
        feeds.update({n: rng.standard_normal(shape).astype(np.float32) for n in "QKV"})
        expected = ReferenceEvaluator(model).run(None, feeds)[0]
        np.testing.assert_allclose(run_onnxruntime(rewritten, feeds)[0], expected, **TOL[F32])


def test_optimizer_unused_outputs(plugins):
    """Outputs the node leaves unnamed are not needed: X_new alone is computed and right."""
    model = _optimizer_model("Adam", 1, F32, {"": 13, TRAINING: 1}, **OPTIMIZER_CASES[0][1])
    del model.graph.output[1:]
    model.graph.node[0].output[1] = model.graph.node[0].output[2] = ""
    feeds = _optimizer_feeds(model, np.random.default_rng(11), 2)
    got = run_onnxruntime(_without_preview_ops(model, plugins), feeds)
    assert len(got) == 1
    expected = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_allclose(got[0], expected, **TOL[F32])
