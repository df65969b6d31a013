"""The benchmark's decompositions (``benchmarks/bench_plugin.py``) against their oracles:
onnxruntime's contrib kernels for com.microsoft::FastGelu and SkipLayerNormalization (CPU),
numpy for the made-up com.acme::FusedSwish. Each model is rewritten for the ``reference``
target (which has neither domain) through ``rewriter.api.rewrite`` and run on onnxruntime.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from rewriter.api import rewrite
from rewriter.manager import load_plugins
from rewriter.testing import make_model, rewritten
from rewriter.testing import run_onnxruntime as run_ort
from rewriter.testing import value_info as vi

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
PLUGIN = BENCH / "bench_plugin.py"
OPSET = 17
HIDDEN = 8


@pytest.fixture(scope="module")
def bench_plugins():
    return load_plugins([str(PLUGIN)], autoload=False)


_bench_model = functools.partial(make_model, opset=OPSET, ir_version=8)


def _verified(model, plugins):
    """Rewritten for the reference evaluator and verified: only standard ops left."""
    return rewritten(model, "reference", plugins, standard_only=True, verify=True)


def _inputs(rng, shape, dtype=np.float32, scale=3.0):
    x = (rng.standard_normal(shape) * scale).astype(dtype)
    x.flat[:4] = np.array([0.0, -0.0, 6.0, -6.0], dtype=dtype)  # zero and saturating tails
    return x


# -- FastGelu ---------------------------------------------------------------------------

@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no-bias"])
def test_fast_gelu_matches_onnxruntime(bench_plugins, with_bias):
    rng = np.random.default_rng(0)
    inputs = ["X", "bias"] if with_bias else ["X"]
    node = helper.make_node("FastGelu", inputs, ["Y"], domain="com.microsoft")
    graph_inputs = [vi("X", TensorProto.FLOAT, [2, 5, HIDDEN])]
    feeds = {"X": _inputs(rng, (2, 5, HIDDEN))}
    if with_bias:
        graph_inputs.append(vi("bias", TensorProto.FLOAT, [HIDDEN]))
        feeds["bias"] = rng.standard_normal(HIDDEN).astype(np.float32)
    model = _bench_model([node], graph_inputs, [vi("Y", TensorProto.FLOAT, [2, 5, HIDDEN])])
    expected = run_ort(model, feeds)[0]  # onnxruntime's contrib kernel
    rewritten = _verified(model, bench_plugins)
    got = run_ort(rewritten, feeds)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    # the literal CastLikes were folded for the known float input: at most 12 nodes with a
    # bias (fewer once the cleanup merges the body's repeated subexpressions)
    assert "CastLike" not in {n.op_type for n in rewritten.graph.node}
    assert len(rewritten.graph.node) <= (12 if with_bias else 11)
    assert not any(n.op_type == "CastLike" for n in rewritten.graph.node)


@pytest.fixture(scope="module")
def bench_module():
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("bench_plugin_under_test", PLUGIN)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # onnxscript's @script looks its module up
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def test_fast_gelu_unknown_dtype_keeps_castlike(bench_module):
    """Without a known input type the generic body (CastLike of each literal) is kept."""
    from rewriter.plan.functions import DecompositionContext

    node = helper.make_node("FastGelu", ["X", "b"], ["Y"], domain="com.microsoft")

    def context(input_types):
        return DecompositionContext(node=node, opset=17, opsets={"": 17, "com.microsoft": 1},
                                    input_types=input_types)

    fn = bench_module.build_fast_gelu(context([None, None]))
    assert sum(n.op_type == "CastLike" for n in fn.node) == 3
    typed = bench_module.build_fast_gelu(context(["tensor(float16)", None]))
    consts = [n for n in typed.node if n.op_type == "Constant"]
    assert len(consts) == 3 and not any(n.op_type == "CastLike" for n in typed.node)
    assert {c.attribute[0].t.data_type for c in consts} == {TensorProto.FLOAT16}


def test_fast_gelu_float16(bench_plugins):
    """float16 in, float16 constants: close to the float64 formula at float16 precision."""
    node = helper.make_node("FastGelu", ["X", "bias"], ["Y"], domain="com.microsoft")
    shape = [2, 3, HIDDEN]
    model = _bench_model([node], [vi("X", TensorProto.FLOAT16, shape),
                                  vi("bias", TensorProto.FLOAT16, [HIDDEN])],
                         [vi("Y", TensorProto.FLOAT16, shape)])
    rng = np.random.default_rng(4)
    x = _inputs(rng, shape, np.float16)
    bias = rng.standard_normal(HIDDEN).astype(np.float16)
    v = x.astype(np.float64) + bias
    expected = 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v**3)))
    got = run_ort(_verified(model, bench_plugins), {"X": x, "bias": bias})[0]
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), expected, rtol=1e-2, atol=1e-2)


# -- SkipLayerNormalization -------------------------------------------------------------

SKIP_CASES = {
    # id: (inputs present, outputs present, epsilon attribute or None)
    "gamma": ((True, True, True, False, False), (True, False, False, False), 1e-5),
    "gamma-default-eps": ((True, True, True, False, False), (True, False, False, False), None),
    "beta": ((True, True, True, True, False), (True, False, False, False), 1e-5),
    "beta-bias": ((True, True, True, True, True), (True, False, False, False), 1e-3),
    "bias-no-beta": ((True, True, True, False, True), (True, False, False, False), 1e-5),
    "sum-output": ((True, True, True, True, True), (True, False, False, True), 1e-5),
    "all-outputs": ((True, True, True, True, True), (True, True, True, True), 1e-5),
}


@pytest.mark.parametrize("case", list(SKIP_CASES))
def test_skip_layer_norm_matches_onnxruntime(bench_plugins, case):
    present_in, present_out, epsilon = SKIP_CASES[case]
    rng = np.random.default_rng(1)
    shape = (2, 5, HIDDEN)
    names = ["input", "skip", "gamma", "beta", "bias"]
    node_inputs = [n if p else "" for n, p in zip(names, present_in)]
    while node_inputs and not node_inputs[-1]:
        node_inputs.pop()
    out_names = ["output", "mean", "inv_std_var", "sum"]
    node_outputs = [n if p else "" for n, p in zip(out_names, present_out)]
    while node_outputs and not node_outputs[-1]:
        node_outputs.pop()
    attrs = {} if epsilon is None else {"epsilon": epsilon}
    node = helper.make_node("SkipLayerNormalization", node_inputs, node_outputs,
                            domain="com.microsoft", **attrs)
    feeds = {
        "input": _inputs(rng, shape, scale=2.0),
        "skip": rng.standard_normal(shape).astype(np.float32),
        "gamma": (1 + rng.standard_normal(HIDDEN) * 0.1).astype(np.float32),
        "beta": rng.standard_normal(HIDDEN).astype(np.float32),
        "bias": rng.standard_normal(HIDDEN).astype(np.float32),
    }
    feeds = {k: v for k, v in feeds.items() if k in node_inputs}
    shapes = {"input": list(shape), "skip": list(shape)}
    graph_inputs = [vi(k, TensorProto.FLOAT, shapes.get(k, [HIDDEN])) for k in feeds]
    out_shapes = {"output": list(shape), "sum": list(shape), "mean": [2, 5, 1],
                  "inv_std_var": [2, 5, 1]}
    graph_outputs = [vi(n, TensorProto.FLOAT, out_shapes[n]) for n in node_outputs if n]
    model = _bench_model([node], graph_inputs, graph_outputs)
    expected = run_ort(model, feeds)
    if any(e is None for e in expected):
        pytest.skip(f"onnxruntime {ort.__version__}'s SkipLayerNormalization returns no "
                    "mean and inv_std_var (None), so its kernel is no oracle for them")
    got = run_ort(_verified(model, bench_plugins), feeds)
    for name, e, g in zip([n for n in node_outputs if n], expected, got):
        np.testing.assert_allclose(g.reshape(e.shape), e, rtol=1e-4, atol=1e-5, err_msg=name)


def test_skip_layer_norm_tiny_variance_uses_default_epsilon(bench_plugins):
    """A constant row: the result is driven by epsilon alone, so the default must match
    onnxruntime's (1e-12)."""
    node = helper.make_node("SkipLayerNormalization", ["input", "skip", "gamma"], ["output"],
                            domain="com.microsoft")
    shape = [1, 2, HIDDEN]
    model = _bench_model([node], [vi("input", TensorProto.FLOAT, shape),
                                  vi("skip", TensorProto.FLOAT, shape),
                                  vi("gamma", TensorProto.FLOAT, [HIDDEN])],
                         [vi("output", TensorProto.FLOAT, shape)])
    x = np.ones(shape, np.float32)
    x[0, 1, 0] += 1e-4  # variance ~1e-9: 1e-12 and 1e-5 give visibly different outputs
    feeds = {"input": x, "skip": np.zeros(shape, np.float32),
             "gamma": np.ones(HIDDEN, np.float32)}
    expected = run_ort(model, feeds)[0]
    got = run_ort(_verified(model, bench_plugins), feeds)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3)


# -- FusedSwish -------------------------------------------------------------------------

@pytest.mark.parametrize("alpha", [None, 1.7])
def test_fused_swish_matches_numpy(bench_plugins, alpha):
    attrs = {} if alpha is None else {"alpha": alpha}
    node = helper.make_node("FusedSwish", ["X"], ["Y"], domain="com.acme", **attrs)
    shape = [3, 4, HIDDEN]
    model = _bench_model([node], [vi("X", TensorProto.FLOAT, shape)],
                         [vi("Y", TensorProto.FLOAT, shape)])
    x = _inputs(np.random.default_rng(2), shape, scale=4.0)
    x.flat[4:6] = [30.0, -30.0]
    a = 1.0 if alpha is None else alpha
    expected = x / (1 + np.exp(-a * x.astype(np.float64)))
    got = run_ort(_verified(model, bench_plugins), {"X": x})[0]
    np.testing.assert_allclose(got, expected.astype(np.float32), rtol=1e-5, atol=1e-6)


# -- the generator's model, end to end ---------------------------------------------------

def test_generated_model_rewrites_and_agrees(bench_plugins, tmp_path):
    """A small generated model with 30% custom ops (If branches included): decomposing only
    FusedSwish (target onnxruntime, which has the com.microsoft kernels) and decomposing
    everything (target reference) must give the same outputs on onnxruntime."""
    import sys

    sys.path.insert(0, str(BENCH))
    try:
        from generate import generate_model
    finally:
        sys.path.remove(str(BENCH))
    gen = generate_model(600, custom_fraction=0.3, seed=3)
    assert set(gen.custom_counts) == {"FastGelu", "SkipLayerNormalization", "FusedSwish"}
    only_swish = rewrite(gen.model, ["onnxruntime"], plugins=bench_plugins, confirm=False)
    everything = rewrite(gen.model, ["reference"], plugins=bench_plugins, confirm=False)
    assert not only_swish.report.remaining and not everything.report.remaining
    applied = {op: n for (_, _, _, op), n in everything.report.applied.items()}
    assert sum(applied.values()) == gen.custom_total
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 16)).astype(np.float32)
    for branch in (True, False):
        feeds = {"x": x, "use_branch": np.array(branch)}
        expected = run_ort(only_swish.model, feeds)[0]
        got = run_ort(everything.model, feeds)[0]
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
