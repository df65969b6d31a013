"""A plugin's body written at a newer opset than the target's ceiling (issue 31, item 4): an
onnxscript body using ``CastLike`` (the usual idiom), a model at opsets 13-17, ``-t
opset:13``: the body's nodes are lowered to the ceiling with the model (at opset 13, where
``CastLike`` does not exist, by its spec body built at 15 and converted down), never an
internal error; where a body op has no form at all at the model's opset and no spec body,
the remedy declines with the reason."""

from __future__ import annotations

import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from rewriter.api import rewrite
from rewriter.errors import UnfixableError
from rewriter.manager import load_plugins

PLUGIN = textwrap.dedent('''
    from onnxscript import opset18 as op
    from onnxscript import script
    from onnxscript.values import Opset

    from rewriter.plugin import hookimpl

    ACME = Opset("com.acme", 1)


    @script(ACME)
    def ScaledGelu(x):
        half = op.CastLike(0.5, x)
        one = op.CastLike(1.0, x)
        root2 = op.CastLike(1.4142135, x)
        return op.Mul(op.Mul(x, half), op.Add(one, op.Erf(op.Div(x, root2))))


    @hookimpl
    def register_decompositions(registry):
        registry.add("com.acme", "ScaledGelu", ScaledGelu, opsets=(13, None),
                     dtypes=["float"])
''')


def _model(opset: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("ScaledGelu", ["x"], ["y"], domain="com.acme")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    helper.make_opsetid("com.acme", 1)])
    model.ir_version = 8
    return model


@pytest.fixture(scope="module")
def acme(tmp_path_factory):
    path = tmp_path_factory.mktemp("plugin") / "acme_castlike.py"
    path.write_text(PLUGIN)
    return load_plugins([str(path)], autoload=False)


@pytest.mark.parametrize("opset", [13, 15, 16, 17])
def test_a_castlike_body_is_lowered_for_an_older_ceiling(acme, opset):
    from math import erf

    import onnxruntime

    result = rewrite(_model(opset), "opset:13", plugins=acme, verify=False)
    out = result.model
    assert {(o.domain, o.version) for o in out.opset_import if o.domain in ("", "ai.onnx")} \
        == {("", 13)}
    assert "CastLike" not in {n.op_type for n in out.graph.node}
    x = np.linspace(-3, 3, 6, dtype=np.float32).reshape(2, 3)
    (y,) = onnxruntime.InferenceSession(out.SerializeToString()).run(None, {"x": x})
    want = 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))  # the op's definition
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


TRILU_PLUGIN = PLUGIN.replace(  # Trilu (14): no form at 13, no spec body
    "return op.Mul(op.Mul(x, half), op.Add(one, op.Erf(op.Div(x, root2))))",
    "return op.Mul(op.Trilu(x), half)")


def test_a_body_op_without_a_form_at_the_models_opset_declines_with_the_reason(tmp_path):
    path = tmp_path / "acme_trilu.py"
    path.write_text(TRILU_PLUGIN)
    plugins = load_plugins([str(path)], autoload=False)
    for target in ("opset:13", "onnxruntime"):  # whether or not the target reads schemas
        with pytest.raises(UnfixableError) as raised:
            rewrite(_model(13), target, plugins=plugins, verify=False)
        assert "Trilu" in str(raised.value) and "opset 13" in str(raised.value), target
