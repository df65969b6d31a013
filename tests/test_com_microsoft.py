"""The ``com-microsoft`` plugin's decompositions against their oracles: onnxruntime's own
contrib kernels running the original node (FastGelu, Gelu, BiasGelu, QuickGelu,
SkipLayerNormalization: all have CPU kernels) or numpy (GemmFastGelu, NhwcConv: no CPU
kernel). Each one-node model is rewritten for the ``reference`` target (which lacks
com.microsoft, so every node is rewritten) and run on onnxruntime.
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


def _model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model


def _run(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _rewritten(model, plugins):
    result = rewrite(model, ["reference"], plugins=plugins, confirm=False, verify=False)
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


def _unary_model(op_type, elem, n_inputs=1, **attrs):
    names = ["X", "bias"][:n_inputs]
    shapes = [[2, 3, 8], [8]][:n_inputs]
    node = helper.make_node(op_type, names, ["Y"], domain=MS, **attrs)
    return _model([node], [_vi(n, elem, s) for n, s in zip(names, shapes)], [_vi("Y", elem)])


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


def _conv_oracle(x_nhwc, w, b, **attrs):
    """A standard Conv (onnxruntime) on the input transposed to NCHW, transposed back."""
    rank = x_nhwc.ndim - 2
    names = ["X", "W", "B"] if b is not None else ["X", "W"]
    node = helper.make_node("Conv", names, ["Y"], **attrs)
    graph = helper.make_graph([node], "conv", [_vi(n, F32) for n in names], [_vi("Y", F32)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    feeds = {"X": np.transpose(x_nhwc, [0, rank + 1, *range(1, rank + 1)]), "W": w}
    if b is not None:
        feeds["B"] = b
    (y,) = _run(model, feeds)
    return np.transpose(y, [0, *range(2, rank + 2), 1])


@pytest.mark.parametrize("case", [
    dict(spatial=(6, 5), attrs=dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), bias=True),
    dict(spatial=(7, 6), attrs=dict(strides=[2, 1], dilations=[1, 2], group=2), bias=False),
    dict(spatial=(6, 6), attrs=dict(auto_pad="SAME_UPPER", strides=[2, 2]), bias=True),
    dict(spatial=(9,), attrs=dict(kernel_shape=[3]), bias=True),
], ids=["pads", "strides-dilations-group", "auto-pad", "1d"])
@pytest.mark.parametrize("weight_initializer", [False, True])
def test_nhwc_conv(plugins, case, weight_initializer):
    rng = np.random.default_rng(8)
    channels, out_channels, k = 4, 6, 3
    group = case["attrs"].get("group", 1)
    rank = len(case["spatial"])
    attrs = dict(case["attrs"])
    if not weight_initializer:  # the rank then comes from kernel_shape
        attrs.setdefault("kernel_shape", [k] * rank)
    x = _rand(rng, [2, *case["spatial"], channels], F32, 1.0)
    w = _rand(rng, [out_channels, channels // group, *[k] * rank], F32, 0.5)
    b = _rand(rng, [out_channels], F32) if case["bias"] else None
    names = ["X", "W", "B"] if case["bias"] else ["X", "W"]
    node = helper.make_node("NhwcConv", names, ["Y"], domain=MS, **attrs)
    values = {"X": x, "W": w, "B": b}
    if weight_initializer:
        inputs = [_vi("X", F32, list(x.shape))]
        inits = [numpy_helper.from_array(values[n], n) for n in names[1:]]
    else:
        inputs = [_vi(n, F32, list(values[n].shape)) for n in names]
        inits = []
    model = _model([node], inputs, [_vi("Y", F32)], inits)
    feeds = {n: values[n] for n in names if not weight_initializer or n == "X"}
    _check(model, plugins, feeds, F32, [_conv_oracle(x, w, b, **attrs)])


def test_nhwc_conv_unknown_rank_declines(plugins):
    """No kernel_shape and no constant weight: the spatial rank is unknown, so it declines."""
    node = helper.make_node("NhwcConv", ["X", "W"], ["Y"], domain=MS)
    model = _model([node], [_vi("X", F32), _vi("W", F32)], [_vi("Y", F32)])
    with pytest.raises(UnfixableError):
        rewrite(model, ["reference"], plugins=plugins, confirm=False, verify=False)


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


def test_failing_export_only_aten_remains(plugins):
    """``onnx-rewriter rewrite examples/failing_export.onnx --target onnxruntime``: NhwcConv
    and GemmFastGelu now have remedies; only the ATen node is left."""
    model = load(str(EXAMPLES / "failing_export.onnx"))
    with pytest.raises(UnfixableError) as info:
        rewrite(model, ["onnxruntime"], plugins=plugins, confirm=False, verify=False)
    message = str(info.value)
    assert "ATen" in message
    assert "NhwcConv" not in message and "GemmFastGelu" not in message
