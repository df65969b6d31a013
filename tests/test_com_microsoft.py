"""The ``com-microsoft`` plugin's decompositions against their oracles: onnxruntime's own
contrib kernels running the original node where onnxruntime has a CPU kernel (FastGelu,
Gelu, BiasGelu, QuickGelu, SkipLayerNormalization, SkipSimplifiedLayerNormalization,
SimplifiedLayerNormalization, FusedMatMul, TransposeMatMul, FusedGemm, FusedConv, Trilu,
MatMulNBits, GatherBlockQuantized, DequantizeLinear, QuantizeLinear), numpy otherwise
(GemmFastGelu, BiasAdd, BiasSoftmax; NhwcConv and NhwcFusedConv through the channels-first
Conv/FusedConv). Each one-node model is rewritten for the ``reference`` target (which lacks
com.microsoft, so every node is rewritten; ``opset:N`` for the QDQ ops, see below) and run
on onnxruntime, at the opsets the bodies change form (12/13 versus 17+).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, load, numpy_helper

from rewriter.api import rewrite
from rewriter.manager import load_plugins
from rewriter.pipeline import UnfixableError
from tests.conftest import CORPUS

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


def _vi(name, elem, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs, outputs, initializers=(), opset=OPSET):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)])
    model.ir_version = 10 if opset >= 21 else 8
    return model


def _run(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _rewritten(model, plugins, target="reference"):
    result = rewrite(model, [target], plugins=plugins, confirm=False, verify=False)
    assert not result.report.remaining, [f.as_dict() for f in result.report.remaining]
    out = result.model
    nodes = list(out.graph.node)
    nodes += [inner for n in nodes for a in n.attribute if a.g for inner in a.g.node]
    domains = {n.domain for n in nodes}
    assert domains <= {"", "ai.onnx"}, domains
    return out


def _check(model, plugins, feeds, elem, expected=None):
    """Rewrite, run, and compare with ``expected`` (default: onnxruntime on the original)."""
    if expected is None:
        expected = _run(model, feeds)
    got = _run(_rewritten(model, plugins), feeds)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == np.dtype(NP[elem])
        np.testing.assert_allclose(g.astype(np.float64), np.asarray(e, np.float64).reshape(
            g.shape), **TOL[elem])


def _rand(rng, shape, elem, scale=2.0):
    return (rng.standard_normal(shape) * scale).astype(NP[elem])


def _unary_model(op_type, elem, n_inputs=1, opset=OPSET, **attrs):
    names = ["X", "bias"][:n_inputs]
    shapes = [[2, 3, 8], [8]][:n_inputs]
    node = helper.make_node(op_type, names, ["Y"], domain=MS, **attrs)
    return _model([node], [_vi(n, elem, s) for n, s in zip(names, shapes)], [_vi("Y", elem)],
                  opset=opset)


def _feeds(rng, elem, n_inputs=1):
    return dict(zip(["X", "bias"], [_rand(rng, [2, 3, 8], elem), _rand(rng, [8], elem)]
                    [:n_inputs]))


def _fast_gelu_np(x):
    x = x.astype(np.float64)
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def _gelu_np(x):
    x = x.astype(np.float64)
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


@pytest.mark.parametrize("with_bias", [False, True])
def test_fast_gelu(plugins, with_bias):
    n = 2 if with_bias else 1
    _check(_unary_model("FastGelu", F32, n), plugins, _feeds(np.random.default_rng(0), F32, n),
           F32)


def test_fast_gelu_float16(plugins):
    """onnxruntime's CPU FastGelu is float only: float16 goes against the float64 formula."""
    feeds = _feeds(np.random.default_rng(1), F16, 2)
    expected = _fast_gelu_np(feeds["X"].astype(np.float64) + feeds["bias"])
    _check(_unary_model("FastGelu", F16, 2), plugins, feeds, F16, [expected])


@pytest.mark.parametrize("elem", [F32, F16])
def test_gelu(plugins, elem):
    model = _unary_model("Gelu", elem)
    feeds = _feeds(np.random.default_rng(2), elem)
    expected = None if elem == F32 else [_gelu_np(feeds["X"])]
    _check(model, plugins, feeds, elem, expected)


@pytest.mark.parametrize("elem", [F32, F16])
def test_bias_gelu(plugins, elem):
    model = _unary_model("BiasGelu", elem, 2)
    feeds = _feeds(np.random.default_rng(3), elem, 2)
    expected = None if elem == F32 else [_gelu_np(feeds["X"].astype(np.float64) + feeds["bias"])]
    _check(model, plugins, feeds, elem, expected)


@pytest.mark.parametrize("alpha", [None, 1.0, 0.5])
def test_quick_gelu(plugins, alpha):
    attrs = {} if alpha is None else {"alpha": alpha}
    _check(_unary_model("QuickGelu", F32, **attrs), plugins,
           _feeds(np.random.default_rng(4), F32), F32)


@pytest.mark.parametrize("beta,bias,outputs", [
    (False, False, 1), (True, False, 1), (False, True, 1), (True, True, 1),
    (True, True, 4), (False, True, 4),
])
def test_skip_layer_norm(plugins, beta, bias, outputs):
    rng = np.random.default_rng(5)
    hidden = 8
    names = ["input", "skip", "gamma", "beta" if beta else "", "bias" if bias else ""]
    while not names[-1]:
        names.pop()
    out_names = ["Y", "mean", "inv_std_var", "sum"][:outputs]
    node = helper.make_node("SkipLayerNormalization", names, out_names, domain=MS,
                            epsilon=1e-5)
    shapes = {"input": [2, 3, hidden], "skip": [2, 3, hidden], "gamma": [hidden],
              "beta": [hidden], "bias": [hidden]}
    present = [n for n in names if n]
    model = _model([node], [_vi(n, F32, shapes[n]) for n in present],
                   [_vi(n, F32) for n in out_names])
    feeds = {n: _rand(rng, shapes[n], F32) for n in present}
    expected = _run(model, feeds)
    got = _run(_rewritten(model, plugins), feeds)
    for name, g, e in zip(out_names, got, expected):
        np.testing.assert_allclose(g.reshape(e.shape), e, rtol=1e-4, atol=1e-5, err_msg=name)


def test_skip_layer_norm_float16(plugins):
    rng = np.random.default_rng(6)
    node = helper.make_node("SkipLayerNormalization", ["input", "skip", "gamma", "beta"],
                            ["Y"], domain=MS)
    shapes = {"input": [2, 3, 8], "skip": [2, 3, 8], "gamma": [8], "beta": [8]}
    model = _model([node], [_vi(n, F16, s) for n, s in shapes.items()], [_vi("Y", F16)])
    feeds = {n: _rand(rng, s, F16, 1.0) for n, s in shapes.items()}
    _check(model, plugins, feeds, F16)


def _gemm_fast_gelu_model(with_bias, elem=F32):
    names = ["X", "W", "bias"] if with_bias else ["X", "W"]
    shapes = {"X": [2, 3, 5], "W": [5, 8], "bias": [8]}
    node = helper.make_node("GemmFastGelu", names, ["Y"], domain=MS)
    return _model([node], [_vi(n, elem, shapes[n]) for n in names], [_vi("Y", elem)]), shapes


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("elem", [F32, F16])
def test_gemm_fast_gelu(plugins, with_bias, elem):
    """No CPU kernel: numpy's ``FastGelu(X @ W + bias)`` in float64."""
    rng = np.random.default_rng(7)
    model, shapes = _gemm_fast_gelu_model(with_bias, elem)
    feeds = {n.name: _rand(rng, shapes[n.name], elem, 1.0) for n in model.graph.input}
    x = feeds["X"].astype(np.float64) @ feeds["W"].astype(np.float64)
    if with_bias:
        x = x + feeds["bias"]
    _check(model, plugins, feeds, elem, [_fast_gelu_np(x)])


def test_nhwc_conv_unknown_rank_falls_back_to_the_kernel(plugins):
    """No kernel_shape and no constant weight: the spatial rank is unknown, so the
    decomposition declines and the plugin's Python kernel (any rank) is chosen."""
    node = helper.make_node("NhwcConv", ["X", "W"], ["Y"], domain=MS)
    model = _model([node], [_vi("X", F32), _vi("W", F32)], [_vi("Y", F32)])
    result = rewrite(model, ["reference"], plugins=plugins, confirm=False, verify=False,
                     explain=True)
    (out,) = result.model.graph.node
    assert out.domain == "ai.onnx.contrib" and out.op_type.startswith("NhwcConv__")


def test_inside_if_branch(plugins):
    """Contrib nodes in both branches of an If (reading outer-scope values) are rewritten."""
    rng = np.random.default_rng(9)
    then_branch = helper.make_graph(
        [helper.make_node("FastGelu", ["X", "bias"], ["t"], domain=MS)],
        "then", [], [_vi("t", F32, [2, 3, 8])])
    else_branch = helper.make_graph(
        [helper.make_node("QuickGelu", ["X"], ["e"], domain=MS, alpha=1.5)],
        "else", [], [_vi("e", F32, [2, 3, 8])])
    node = helper.make_node("If", ["cond"], ["Y"], then_branch=then_branch,
                            else_branch=else_branch)
    model = _model([node], [_vi("cond", TensorProto.BOOL, []), _vi("X", F32, [2, 3, 8]),
                            _vi("bias", F32, [8])], [_vi("Y", F32, [2, 3, 8])])
    for cond in (True, False):
        feeds = {**_feeds(rng, F32, 2), "cond": np.array(cond)}
        _check(model, plugins, feeds, F32)


# -- the rest of the contrib ops -----------------------------------------------------------


def _dtype_of(array):
    return helper.np_dtype_to_tensor_dtype(array.dtype)


def _node_model(op_type, names, values, outputs=("Y",), opset=OPSET, domain=MS,
                initializers=(), **attrs):
    """One node reading ``names`` ("" for an absent input): graph inputs for every value
    except ``initializers``, which become initializers."""
    node = helper.make_node(op_type, list(names), list(outputs), domain=domain, **attrs)
    inputs = [_vi(n, _dtype_of(values[n]), list(values[n].shape)) for n in names
              if n and n not in initializers]
    inits = [numpy_helper.from_array(values[n], n) for n in initializers]
    outs = [helper.make_value_info(o, helper.TypeProto()) for o in outputs if o]
    return _model([node], inputs, outs, inits, opset=opset)


def _compare(model, plugins, values, tol, expected=None, target="reference"):
    """Rewrite for ``target``, run on onnxruntime, compare with ``expected`` (default:
    onnxruntime's contrib kernel on the original); returns the largest absolute error."""
    feeds = {i.name: values[i.name] for i in model.graph.input}
    if expected is None:
        expected = _run(model, feeds)
    got = _run(_rewritten(model, plugins, target), feeds)
    assert len(got) == len(expected)
    worst = 0.0
    for g, e in zip(got, expected):
        e = np.asarray(e)
        assert g.dtype == e.dtype, (g.dtype, e.dtype)
        assert g.size == e.size, (g.shape, e.shape)
        g64, e64 = g.astype(np.float64), e.astype(np.float64).reshape(g.shape)
        np.testing.assert_allclose(g64, e64, **tol)
        worst = max(worst, float(np.max(np.abs(g64 - e64), initial=0.0)))
    return worst


@pytest.mark.parametrize("op_type,n_inputs", [("FastGelu", 2), ("Gelu", 1), ("QuickGelu", 1)])
@pytest.mark.parametrize("elem", [F32, F16])
def test_activations_at_opset_12(plugins, op_type, n_inputs, elem):
    """Below opset 15 (no CastLike) the literals are written in the input's type."""
    feeds = _feeds(np.random.default_rng(10), elem, n_inputs)
    if elem == F16 and op_type != "QuickGelu":  # onnxruntime's CPU kernels are float only
        x = feeds["X"].astype(np.float64) + (feeds["bias"] if n_inputs == 2 else 0)
        expected = [_fast_gelu_np(x) if op_type == "FastGelu" else _gelu_np(x)]
    else:
        expected = None
    _check(_unary_model(op_type, elem, n_inputs, opset=12), plugins, feeds, elem, expected)


def test_gemm_fast_gelu_at_opset_12(plugins):
    rng = np.random.default_rng(11)
    values = {"X": _rand(rng, [2, 3, 5], F32, 1.0), "W": _rand(rng, [5, 8], F32, 1.0),
              "bias": _rand(rng, [8], F32)}
    model = _node_model("GemmFastGelu", ["X", "W", "bias"], values, opset=12,
                        initializers=["W", "bias"])
    expected = _fast_gelu_np(values["X"].astype(np.float64) @ values["W"] + values["bias"])
    _compare(model, plugins, values, TOL[F32], [expected.astype(np.float32)])


def _skip_values(rng, elem, names, hidden=16):
    shapes = {"input": [2, 3, hidden], "skip": [2, 3, hidden], "gamma": [hidden],
              "beta": [hidden], "bias": [hidden]}
    return {n: _rand(rng, shapes[n], elem, 1.0) for n in names if n}


@pytest.mark.parametrize("opset", [12, 13, 17])
@pytest.mark.parametrize("elem", [F32, F16])
def test_skip_layer_norm_low_opsets(plugins, opset, elem):
    """Opset 12-16 bodies spell LayerNormalization out (statistics in float32)."""
    names = ["input", "skip", "gamma", "beta", "bias"]
    values = _skip_values(np.random.default_rng(12), elem, names)
    outputs = ("Y", "mean", "inv_std_var", "sum") if elem == F32 else ("Y", "", "", "sum")
    model = _node_model("SkipLayerNormalization", names, values, outputs, opset=opset,
                        epsilon=1e-5)
    _compare(model, plugins, values, TOL[elem])  # onnxruntime's kernel, at any opset


@pytest.mark.parametrize("with_bias,outputs", [
    (False, ("Y",)), (True, ("Y",)), (True, ("Y", "", "inv_std_var", "sum")),
])
@pytest.mark.parametrize("elem", [F32, F16])
def test_skip_simplified_layer_norm(plugins, with_bias, outputs, elem):
    names = ["input", "skip", "gamma"] + (["bias"] if with_bias else [])
    values = _skip_values(np.random.default_rng(13), elem, names)
    model = _node_model("SkipSimplifiedLayerNormalization", names, values, outputs,
                        opset=13, epsilon=1e-6)
    _compare(model, plugins, values, TOL[elem])


@pytest.mark.parametrize("domain", ["", MS])
@pytest.mark.parametrize("elem,axis,opset", [(F32, -1, 13), (F32, -2, 18), (F16, -1, 17)])
def test_simplified_layer_norm(plugins, domain, elem, axis, opset):
    """onnxruntime registers it in the ai.onnx domain; its kernel is the oracle for both."""
    rng = np.random.default_rng(14)
    scale_shape = [5, 8] if axis == -2 else [8]
    values = {"X": _rand(rng, [2, 5, 8], elem), "scale": _rand(rng, scale_shape, elem)}
    outputs = ("Y", "inv_std_var") if elem == F32 else ("Y",)
    model = _node_model("SimplifiedLayerNormalization", ["X", "scale"], values, outputs,
                        opset=opset, domain=domain, axis=axis, epsilon=1e-5)
    oracle = _node_model("SimplifiedLayerNormalization", ["X", "scale"], values, outputs,
                         opset=opset, domain="", axis=axis, epsilon=1e-5)
    _compare(model, plugins, values, TOL[elem],
             _run(oracle, {n: values[n] for n in ["X", "scale"]}))


def test_bias_add(plugins):
    rng = np.random.default_rng(15)
    values = {"X": _rand(rng, [2, 9, 4], F32), "bias": _rand(rng, [4], F32),
              "skip": _rand(rng, [2, 9, 4], F32)}
    model = _node_model("BiasAdd", ["X", "bias", "skip"], values)
    expected = (values["X"] + values["bias"]) + values["skip"]
    assert _compare(model, plugins, values, TOL[F32], [expected]) == 0.0


@pytest.mark.parametrize("axis,bias_shape", [(1, [4, 5, 6]), (3, [1, 1, 5, 6]), (2, [5, 6])])
def test_bias_softmax(plugins, axis, bias_shape):
    """No CPU kernel: numpy's Softmax-1 (2-D coercion at ``axis``) of ``data + bias``."""
    rng = np.random.default_rng(16)
    values = {"data": _rand(rng, [2, 4, 5, 6], F32), "bias": _rand(rng, bias_shape, F32)}
    model = _node_model("BiasSoftmax", ["data", "bias"], values, axis=axis,
                        is_inner_broadcast=0)
    z = (values["data"] + values["bias"]).astype(np.float64)
    flat = z.reshape(int(np.prod(z.shape[:axis])), -1)
    e = np.exp(flat - flat.max(axis=1, keepdims=True))
    expected = (e / e.sum(axis=1, keepdims=True)).reshape(z.shape)
    _compare(model, plugins, values, TOL[F32], [expected.astype(np.float32)])


def test_bias_softmax_inner_broadcast_declines(plugins):
    values = {"data": np.zeros([2, 3], np.float32), "bias": np.zeros([2, 3], np.float32)}
    model = _node_model("BiasSoftmax", ["data", "bias"], values, is_inner_broadcast=1)
    with pytest.raises(UnfixableError):
        rewrite(model, ["reference"], plugins=plugins, confirm=False, verify=False)


@pytest.mark.parametrize("attrs,shapes", [
    ({}, ([3, 4], [4, 5])),
    ({"transA": 1, "alpha": 0.5}, ([2, 4, 3], [2, 4, 5])),
    ({"transB": 1}, ([2, 3, 4], [5, 4])),
    ({"transBatchA": 1}, ([3, 2, 4], [2, 4, 5])),
    ({"transBatchA": 1, "transA": 1, "transBatchB": 1, "transB": 1, "alpha": 2.0},
     ([4, 2, 3], [5, 2, 4])),
    ({"transBatchB": 1}, ([2, 6, 3, 4], [4, 2, 6, 5])),
], ids=["plain", "transA-alpha", "transB", "batchA", "all", "batchB-4d"])
@pytest.mark.parametrize("elem", [F32, F16])
def test_fused_matmul(plugins, attrs, shapes, elem):
    rng = np.random.default_rng(17)
    values = {"A": _rand(rng, shapes[0], elem, 1.0), "B": _rand(rng, shapes[1], elem, 1.0)}
    _compare(_node_model("FusedMatMul", ["A", "B"], values, **attrs), plugins, values,
             TOL[elem])


def test_transpose_matmul(plugins):
    rng = np.random.default_rng(18)
    values = {"A": _rand(rng, [2, 4, 3], F32), "B": _rand(rng, [5, 4], F32)}
    _compare(_node_model("TransposeMatMul", ["A", "B"], values, transA=1, transB=1,
                         alpha=0.25), plugins, values, TOL[F32])


@pytest.mark.parametrize("activation,params", [
    ("Relu", {}), ("Tanh", {}), ("Sigmoid", {}), ("Softplus", {}), ("Softsign", {}),
    ("LeakyRelu", {"activation_alpha": 0.2}), ("Elu", {"activation_alpha": 0.7}),
    ("ThresholdedRelu", {"activation_alpha": 0.3}),
    ("HardSigmoid", {"activation_alpha": 0.3, "activation_beta": 0.4}),
    ("Selu", {"activation_alpha": 1.5, "activation_gamma": 1.1}),
    ("ScaledTanh", {"activation_alpha": 1.5, "activation_beta": 0.5}),
    ("ParametricSoftplus", {"activation_alpha": 1.5, "activation_beta": 0.5}),
])
def test_fused_gemm(plugins, activation, params):
    rng = np.random.default_rng(19)
    values = {"A": _rand(rng, [4, 3], F32), "B": _rand(rng, [5, 4], F32),
              "C": _rand(rng, [5], F32)}
    model = _node_model("FusedGemm", ["A", "B", "C"], values, opset=11, activation=activation,
                        transA=1, transB=1, alpha=0.5, beta=2.0, **params)
    _compare(model, plugins, values, TOL[F32])


def test_fused_gemm_without_activation_parameter_declines(plugins):
    """onnxruntime rejects LeakyRelu without ``activation_alpha``; so does the builder."""
    values = {"A": np.zeros([2, 2], np.float32), "B": np.zeros([2, 2], np.float32)}
    model = _node_model("FusedGemm", ["A", "B"], values, activation="LeakyRelu")
    with pytest.raises(UnfixableError):
        rewrite(model, ["reference"], plugins=plugins, confirm=False, verify=False)


@pytest.mark.parametrize("activation,params,inputs", [
    ("Relu", [], "XWB"), ("Tanh", [], "XW"), ("Sigmoid", [], "XWBZ"),
    ("LeakyRelu", [0.2], "XWB"), ("Clip", [-0.5, 0.7], "XWBZ"), ("HardSigmoid", [0.3, 0.4], "XW"),
    ("", [], "XWBZ"),
])
@pytest.mark.parametrize("elem", [F32, F16])
def test_fused_conv(plugins, activation, params, inputs, elem):
    rng = np.random.default_rng(20)
    values = {"X": _rand(rng, [2, 4, 7, 6], elem, 1.0), "W": _rand(rng, [6, 2, 3, 3], elem, 0.5),
              "B": _rand(rng, [6], elem), "Z": _rand(rng, [2, 6, 4, 2], elem)}
    attrs = dict(strides=[2, 2], pads=[1, 0, 1, 0], group=2, kernel_shape=[3, 3])
    if activation:
        attrs["activation"] = activation
    if params:
        attrs["activation_params"] = params
    names = {"X": "X", "W": "W", "B": "B", "Z": "Z"}
    node_inputs = [names[c] for c in inputs]
    if "Z" in inputs and "B" not in inputs:
        node_inputs.insert(2, "")
    model = _node_model("FusedConv", node_inputs, values, opset=11, **attrs)
    _compare(model, plugins, values, TOL[elem])


@pytest.mark.parametrize("opset", [11, 17])
@pytest.mark.parametrize("upper,k", [(1, None), (0, None), (1, -1), (0, 2)])
@pytest.mark.parametrize("elem", [F32, F16])
def test_trilu(plugins, opset, upper, k, elem):
    """ai.onnx Trilu from opset 14; a Range mask below."""
    rng = np.random.default_rng(22)
    values = {"X": _rand(rng, [2, 4, 5], elem)}
    names = ["X"]
    if k is not None:
        values["k"] = np.array(k, np.int64)
        names.append("k")
    model = _node_model("Trilu", names, values, opset=opset, upper=upper)
    assert _compare(model, plugins, values, TOL[elem]) == 0.0


def _pack(q, bits):
    """Pack unsigned ``bits``-bit values along the last axis, low bits first."""
    per_byte = 8 // bits
    q = q.reshape(*q.shape[:-1], -1, per_byte).astype(np.uint16)
    return sum(q[..., j] << (bits * j) for j in range(per_byte)).astype(np.uint8)


def _nbits_values(rng, elem, k, n, bits, block, zero_points):
    blocks = -(-k // block)
    q = rng.integers(0, 2 ** bits, size=(n, blocks * block))
    values = {"A": _rand(rng, [2, 3, k], elem, 1.0),
              "B": _pack(q, bits).reshape(n, blocks, block * bits // 8),
              "scales": (rng.random((n, blocks)) * 0.1 + 0.01).astype(NP[elem]),
              "bias": _rand(rng, [n], elem)}
    if zero_points == "packed":
        zp = rng.integers(0, 2 ** bits, size=(n, -(-blocks * bits // 8) * 8 // bits))
        values["zero_points"] = _pack(zp, bits)
    elif zero_points == "float":
        values["zero_points"] = (rng.random((n, blocks)) * 2 ** bits).astype(NP[elem])
    return values


@pytest.mark.parametrize("bits,k,zero_points,bias,opset", [
    (4, 64, None, False, 21), (4, 48, "packed", True, 13), (4, 32, "float", False, 21),
    (8, 40, "packed", True, 21), (2, 64, "packed", False, 17),
])
@pytest.mark.parametrize("elem", [F32, F16])
def test_matmul_nbits(plugins, bits, k, zero_points, bias, opset, elem):
    rng = np.random.default_rng(23)
    n, block = 5, 16
    values = _nbits_values(rng, elem, k, n, bits, block, zero_points)
    names = ["A", "B", "scales", "zero_points" if zero_points else "", "", "bias" if bias
             else ""]
    while not names[-1]:
        names.pop()
    model = _node_model("MatMulNBits", names, values, opset=opset, K=k, N=n, bits=bits,
                        block_size=block, initializers=[x for x in names[1:] if x])
    tol = TOL[elem] if elem == F32 else dict(rtol=2e-2, atol=2e-2)
    _compare(model, plugins, values, tol)


def test_matmul_nbits_g_idx_declines(plugins):
    rng = np.random.default_rng(24)
    values = _nbits_values(rng, F32, 32, 2, 4, 16, None)
    values["g_idx"] = np.zeros([32], np.int32)
    model = _node_model("MatMulNBits", ["A", "B", "scales", "", "g_idx"], values, K=32, N=2,
                        block_size=16)
    with pytest.raises(UnfixableError):
        rewrite(model, ["reference"], plugins=plugins, confirm=False, verify=False)


@pytest.mark.parametrize("data_type,zero_points,axes,opset", [
    (TensorProto.INT4, False, (0, 1), 21), (TensorProto.UINT4, True, (0, 1), 21),
    (TensorProto.INT4, True, (1, 0), 21), ("uint8-4", True, (0, 1), 13),
    ("uint8-8", False, (0, 1), 17),
])
@pytest.mark.parametrize("elem", [F32, F16])
def test_gather_block_quantized(plugins, data_type, zero_points, axes, opset, elem):
    """Indices include one out of range (-> zeros) and a negative one."""
    rng = np.random.default_rng(25)
    gather_axis, quantize_axis = axes
    rows, cols, block = 6, 40, 16
    shape = [rows, cols] if quantize_axis == 1 else [cols, rows]
    blocks = -(-cols // block)
    scale_shape = [rows, blocks] if quantize_axis == 1 else [blocks, rows]
    scales = (rng.random(scale_shape) * 0.1 + 0.01).astype(NP[elem])
    indices = np.array([[0, 5, -2], [3, 7, 1]], np.int64)
    attrs = dict(gather_axis=gather_axis, quantize_axis=quantize_axis, block_size=block)
    if isinstance(data_type, str):
        bits = int(data_type.split("-")[1])
        q = rng.integers(0, 2 ** bits, size=shape)
        data = _pack(q, bits) if bits < 8 else q.astype(np.uint8)
        zp_q = rng.integers(0, 2 ** bits, size=[rows, -(-blocks * bits // 8) * 8 // bits])
        zp = _pack(zp_q, bits) if bits < 8 else zp_q.astype(np.uint8)
        attrs["bits"] = bits
        data_init = numpy_helper.from_array(data, "data")
        zp_init = numpy_helper.from_array(zp, "zero_points")
    else:
        low = -8 if data_type == TensorProto.INT4 else 0
        q = rng.integers(low, low + 16, size=shape)
        data_init = helper.make_tensor("data", data_type, shape, q.ravel().tolist())
        zp_init = helper.make_tensor("zero_points", data_type, scale_shape,
                                     rng.integers(low, low + 16, size=scale_shape).ravel()
                                     .tolist())
    names = ["data", "indices", "scales"] + (["zero_points"] if zero_points else [])
    node = helper.make_node("GatherBlockQuantized", names, ["Y"], domain=MS, **attrs)
    inits = [data_init, numpy_helper.from_array(scales, "scales")]
    if zero_points:
        inits.append(zp_init)
    model = _model([node], [_vi("indices", TensorProto.INT64, list(indices.shape))],
                   [_vi("Y", elem)], inits, opset=opset)
    got = _compare(model, plugins, {"indices": indices}, TOL[elem])
    assert got <= TOL[elem]["atol"] * 10


@pytest.mark.parametrize("op_type,x_type,scale_type,axis,opset", [
    ("DequantizeLinear", np.int8, np.float32, None, 13),
    ("DequantizeLinear", np.uint8, np.float32, 1, 13),
    ("DequantizeLinear", np.int32, np.float32, -2, 13),
    ("DequantizeLinear", np.int8, np.float16, 1, 19),
    ("DequantizeLinear", np.int16, np.float32, None, 21),
    ("QuantizeLinear", np.uint8, np.float32, None, 13),
    ("QuantizeLinear", np.int8, np.float32, 1, 13),
    ("QuantizeLinear", np.int8, np.float16, 1, 19),
    ("QuantizeLinear", np.uint16, np.float32, 1, 21),
])
def test_quantize_dequantize(plugins, op_type, x_type, scale_type, axis, opset):
    """Rewritten for ``opset:N`` (the reference evaluator has no (De)QuantizeLinear 13-18)."""
    rng = np.random.default_rng(26)
    channels = 3
    scale = (rng.random([] if axis is None else [channels]) * 0.2 + 0.05).astype(scale_type)
    info = np.iinfo(x_type)
    zp_range = (info.min, info.max) if x_type != np.int32 else (0, 1)
    zero_point = rng.integers(*zp_range, size=scale.shape).astype(x_type)
    if x_type == np.int32:
        zero_point[...] = 0
    if op_type == "DequantizeLinear":
        x = rng.integers(max(info.min, -1000), min(info.max, 1000), size=[2, channels, 4])
        values = {"x": x.astype(x_type), "scale": scale, "zero_point": zero_point}
    else:
        values = {"x": (rng.standard_normal([2, channels, 4]) * 10).astype(scale_type),
                  "scale": scale, "zero_point": zero_point}
    attrs = {} if axis is None else {"axis": axis}
    model = _node_model(op_type, ["x", "scale", "zero_point"], values, opset=opset,
                        initializers=["scale", "zero_point"], **attrs)
    assert _compare(model, plugins, values, dict(rtol=1e-6, atol=0),
                    target=f"opset:{opset}") == 0.0


def test_quantize_linear_without_zero_point_is_uint8(plugins):
    values = {"x": np.linspace(-3, 300, 12, dtype=np.float32), "scale": np.float32(0.7)}
    model = _node_model("QuantizeLinear", ["x", "scale"], values, opset=13,
                        initializers=["scale"])
    _compare(model, plugins, values, dict(rtol=0, atol=0), target="opset:13")


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
    result = rewrite(_corpus_model(name), ["onnxruntime"], plugins=plugins, confirm=False,
                     compare_options={"dims": {"n": 1, "h": 5, "w": 4, "cin": 4, "cout": 6}})
    assert not result.report.remaining
    assert result.report.verification["compare"] == "ok", result.report.verification


@pytest.mark.parametrize("name", [
    "ort_matmulnbits_add", "ov_com_microsoft_gather_block_quantized_int4",
])
def test_corpus_reference(plugins, name):
    """onnxruntime runs the original (the oracle); the result runs on the reference
    evaluator, with nothing left unfixed."""
    result = rewrite(_corpus_model(name), ["reference"], plugins=plugins, confirm=False,
                     compare_options={"original_target": "onnxruntime"})
    assert not result.report.remaining
    assert result.report.verification["compare"] == "ok", result.report.verification
