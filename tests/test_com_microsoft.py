"""The ``com-microsoft`` plugin beyond its samples: every decomposition against its oracle
(onnxruntime's own contrib kernel, the plugin's numpy kernel or a numpy function from the
op's documentation) on the samples it registers, at the opsets the bodies change form, is
in ``tests/test_oracles.py``. Here: what a one-node sample cannot show (declines, the kernel
fallback, nodes inside If branches, the corpus models).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, load, numpy_helper

from rewriter.api import rewrite
from rewriter.errors import UnfixableError
from rewriter.manager import load_plugins
from rewriter.testing import make_model, rewritten
from rewriter.testing import run_onnxruntime as run_ort
from rewriter.testing import value_info as vi
from tests.conftest import CORPUS, onnxruntime_is_behind_onnx

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
OPSET = 17
MS = "com.microsoft"
F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16
NP = {F32: np.float32, F16: np.float16}
TOL = {F32: dict(rtol=1e-5, atol=1e-5), F16: dict(rtol=1e-2, atol=1e-2)}


@pytest.fixture(scope="module")
def plugins():
    return load_plugins(autoload=False)


def _check(model, plugins, feeds, elem, expected=None):
    """Rewrite, run, and compare with ``expected`` (default: onnxruntime on the original)."""
    if expected is None:
        expected = run_ort(model, feeds)
    got = run_ort(rewritten(model, "reference", plugins, standard_only=True), feeds)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == np.dtype(NP[elem])
        np.testing.assert_allclose(g.astype(np.float64), np.asarray(e, np.float64).reshape(
            g.shape), **TOL[elem])


def _feeds(rng, elem, n_inputs=1):
    return dict(zip(["X", "bias"], [(rng.standard_normal(s) * 2).astype(NP[elem])
                                    for s in ([2, 3, 8], [8])][:n_inputs]))


def test_nhwc_conv_unknown_rank_falls_back_to_the_kernel(plugins):
    """No kernel_shape and no constant weight: the spatial rank is unknown, so the
    decomposition declines and the plugin's Python kernel (any rank) is chosen."""
    node = helper.make_node("NhwcConv", ["X", "W"], ["Y"], domain=MS)
    model = make_model([node], [vi("X", F32), vi("W", F32)], [vi("Y", F32)], opset=OPSET)
    result = rewrite(model, ["reference"], plugins=plugins, confirm=False, verify=False,
                     explain=True)
    (out,) = result.model.graph.node
    assert out.domain == "ai.onnx.contrib" and out.op_type.startswith("NhwcConv__")


def test_inside_if_branch(plugins):
    """Contrib nodes in both branches of an If (reading outer-scope values) are rewritten."""
    rng = np.random.default_rng(9)
    then_branch = helper.make_graph(
        [helper.make_node("FastGelu", ["X", "bias"], ["t"], domain=MS)],
        "then", [], [vi("t", F32, [2, 3, 8])])
    else_branch = helper.make_graph(
        [helper.make_node("QuickGelu", ["X"], ["e"], domain=MS, alpha=1.5)],
        "else", [], [vi("e", F32, [2, 3, 8])])
    node = helper.make_node("If", ["cond"], ["Y"], then_branch=then_branch,
                            else_branch=else_branch)
    model = make_model([node], [vi("cond", TensorProto.BOOL, []), vi("X", F32, [2, 3, 8]),
                                vi("bias", F32, [8])], [vi("Y", F32, [2, 3, 8])],
                       opset=OPSET, domains=[MS])
    for cond in (True, False):
        feeds = {**_feeds(rng, F32, 2), "cond": np.array(cond)}
        _check(model, plugins, feeds, F32)


# -- declines -------------------------------------------------------------------------------


def _dtype_of(array):
    return helper.np_dtype_to_tensor_dtype(array.dtype)


def _node_model(op_type, names, values, outputs=("Y",), opset=OPSET, domain=MS,
                initializers=(), **attrs):
    """One node reading ``names`` ("" for an absent input): graph inputs for every value
    except ``initializers``, which become initializers."""
    node = helper.make_node(op_type, list(names), list(outputs), domain=domain, **attrs)
    inputs = [vi(n, _dtype_of(values[n]), list(values[n].shape)) for n in names
              if n and n not in initializers]
    inits = [numpy_helper.from_array(values[n], n) for n in initializers]
    outs = [helper.make_value_info(o, helper.TypeProto()) for o in outputs if o]
    return make_model([node], inputs, outs, initializers=inits, opset=opset, domains=[MS])


def test_bias_softmax_inner_broadcast_declines(plugins):
    values = {"data": np.zeros([2, 3], np.float32), "bias": np.zeros([2, 3], np.float32)}
    model = _node_model("BiasSoftmax", ["data", "bias"], values, is_inner_broadcast=1)
    with pytest.raises(UnfixableError):
        rewrite(model, ["reference"], plugins=plugins, confirm=False, verify=False)


def test_fused_gemm_without_activation_parameter_declines(plugins):
    """onnxruntime rejects LeakyRelu without ``activation_alpha``; so does the builder."""
    values = {"A": np.zeros([2, 2], np.float32), "B": np.zeros([2, 2], np.float32)}
    model = _node_model("FusedGemm", ["A", "B"], values, activation="LeakyRelu")
    with pytest.raises(UnfixableError):
        rewrite(model, ["reference"], plugins=plugins, confirm=False, verify=False)


@pytest.mark.parametrize("bits,zero_points", [(4, "packed"), (8, None), (2, None)])
def test_matmul_nbits_g_idx_forms_onnxruntime_misreads_decline(plugins, bits, zero_points):
    """g_idx with packed zero points (onnxruntime 1.32 ignores them), or with 8 or 2 bits
    (it refuses or computes something else): no meaning to reproduce, declined."""
    blob = 16 * bits // 8
    values = {"A": np.zeros([2, 3, 32], np.float32), "B": np.zeros([2, 2, blob], np.uint8),
              "scales": np.ones([2, 2], np.float32), "zp": np.zeros([2, 1], np.uint8),
              "g_idx": np.zeros([32], np.int32)}
    names = ["A", "B", "scales", "zp" if zero_points else "", "g_idx"]
    model = _node_model("MatMulNBits", names, values, K=32, N=2, bits=bits, block_size=16)
    with pytest.raises(UnfixableError):
        rewrite(model, ["reference"], plugins=plugins, confirm=False, verify=False)


# -- the corpus ----------------------------------------------------------------------------


def _corpus_model(name):
    path = CORPUS / f"{name}.onnx"
    if not path.is_file():
        pytest.skip(f"corpus model {path} is absent")
    return load(str(path))


@pytest.mark.parametrize("name", ["ort_gemmfastgelu_withbias", "ort_nhwcconv_fp32"])
def test_corpus_onnxruntime_refuses(plugins, name):
    """onnxruntime has no CPU kernel: the rewrite runs on it and compares ok against this
    plugin's numpy kernels (the reference evaluator runs the original)."""
    dims = {"n": 1, "h": 5, "w": 4, "cin": 4, "cout": 6} if name == "ort_nhwcconv_fp32" else {}
    result = rewrite(_corpus_model(name), ["onnxruntime"], plugins=plugins, confirm=False,
                     compare_options={"dims": dims})
    assert not result.report.remaining
    assert result.report.verification["compare"] == "ok", result.report.verification


@pytest.mark.parametrize("name", [
    "ort_matmulnbits_add", "ov_com_microsoft_gather_block_quantized_int4",
])
def test_corpus_reference(plugins, name):
    """onnxruntime runs the original (the oracle); the result runs on the reference
    evaluator, with nothing left unfixed."""
    model = _corpus_model(name)
    options = {"original_target": "onnxruntime"}
    if name == "ov_com_microsoft_gather_block_quantized_int4":  # data [2, 32]: indices in [-2, 1]
        sets = [{"indices": np.array(i, np.int32)} for i in ([1, 0], [-2, -1], [0, 0])]
        try:
            run_ort(model, sets[0])
        except Exception as e:  # noqa: BLE001 - onnxruntime's Fail, whichever its class
            if not onnxruntime_is_behind_onnx():
                raise
            pytest.skip(f"onnxruntime {_onnxruntime_version()} cannot run the original, the oracle "
                        f"(1.21 has no `bits` attribute): {str(e)[-120:]}")
        if _onnxruntime_gathers_out_of_range(model):  # as zeros, as the decomposition does
            sets.append({"indices": np.array([2, -3], np.int32)})
        options["inputs"] = sets
    result = rewrite(model, ["reference"], plugins=plugins, confirm=False,
                     compare_options=options)
    assert not result.report.remaining
    assert result.report.verification["compare"] == "ok", result.report.verification


def _onnxruntime_version() -> str:
    import onnxruntime

    return onnxruntime.__version__


def _onnxruntime_gathers_out_of_range(model) -> bool:
    """The installed onnxruntime's GatherBlockQuantized takes an index past the data (1.32
    gathers zeros; 1.23 refuses it: "indices element out of data bounds")."""
    try:
        run_ort(model, {"indices": np.array([2, 2], np.int32)})
    except Exception:  # noqa: BLE001 - onnxruntime's Fail, whichever its class
        return False
    return True


def test_qattention_with_qkv_hidden_sizes_declines(plugins):
    """onnxruntime's quantizer never writes it, and the body reads equal thirds."""
    values = {"x": np.zeros([1, 2, 8], np.uint8), "w": np.zeros([8, 24], np.int8),
              "b": np.zeros([24], np.float32), "xs": np.array(0.1, np.float32),
              "ws": np.array(0.1, np.float32)}
    model = _node_model("QAttention", ["x", "w", "b", "xs", "ws"], values, num_heads=2,
                        qkv_hidden_sizes=[8, 8, 8])
    with pytest.raises(UnfixableError):
        rewrite(model, ["reference"], plugins=plugins, confirm=False, verify=False)


def test_corpus_layer_norm_below_opset_17_runs_everywhere_else(plugins):
    """onnxruntime's ai.onnx LayerNormalization at opset 12 (no other runtime has it) is
    written in opset-12 ops and verified against onnxruntime's run of the original."""
    model = _corpus_model("ort_layernorm_opset12")
    for target in ("reference", "opset:13"):
        result = rewrite(model, [target], plugins=plugins, confirm=False)
        assert result.report.verdict == "verified", (target, result.report.verification)
        assert "LayerNormalization" not in {n.op_type for n in result.model.graph.node}
