"""The 0.x import paths keep working for the 1.x series (issue 31, item 1): a plugin written
from the 0.x documentation, kept frozen under tests/data/plugin_0x/, loads, decomposes its op
and is verified against its own kernel with the same numbers, with a DeprecationWarning that
names the rewriter.plugin import; every name the 0.x documentation listed still imports."""

from __future__ import annotations

import importlib
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from rewriter.api import rewrite
from rewriter.manager import load_plugins

FROZEN = Path(__file__).parent / "data" / "plugin_0x"

# every public name of the 0.x documentation, by its old module, and where it lives now
OLD_NAMES = {
    "rewriter.bodies": {"FunctionBuilder": "rewriter.plugin", "declining": "rewriter.plugin"},
    "rewriter.kernels": {"kernel": "rewriter.plugin", "reference_ops": "rewriter.plugin",
                         "Kernel": "rewriter.plan.kernels",
                         "native_only": "rewriter.plan.kernels"},
    "rewriter.targets": {"Finding": "rewriter.plugin", "NodeQuery": "rewriter.plugin",
                         "Target": "rewriter.plugin", "refused_node": "rewriter.detect.targets"},
    "rewriter.functions": {"DecompositionContext": "rewriter.plugin"},
    "rewriter.oracle_check": {name: "rewriter.testing" for name in
                              ("oracle_plugins", "checks", "check_one", "without_oracle")},
}


@pytest.mark.parametrize("old", sorted(OLD_NAMES))
def test_every_0x_name_imports_with_a_warning_naming_its_new_home(old):
    module = importlib.import_module(old)
    for name, new in OLD_NAMES[old].items():
        with pytest.warns(DeprecationWarning, match=rf"from {new} import {name}\b"):
            value = getattr(module, name)
        assert value is getattr(importlib.import_module(new), name)
    with pytest.raises(AttributeError, match="0.x compatibility forwards only"):
        module.NoSuchName  # noqa: B018


def _model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("ScaledSoftsign", ["x"], ["y"], domain="com.acme", scale=0.5)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.acme", 1)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("target", ["onnxruntime", "reference", "opset:13"])
def test_the_frozen_0x_plugin_rewrites_with_a_deprecation_warning(tmp_path, monkeypatch,
                                                                   target):
    import onnxruntime

    monkeypatch.syspath_prepend(str(FROZEN))  # its kernel is named "acme_0x_plugin:..."
    sys.modules.pop("acme_0x_plugin", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plugins = load_plugins(["acme_0x_plugin"], autoload=False)
        result = rewrite(_model(), target, plugins=plugins)
    moved = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert any("from rewriter.plugin import FunctionBuilder" in m for m in moved), moved
    assert any("from rewriter.plugin import kernel" in m for m in moved), moved
    report = result.report
    # the decomposition was applied and verified against the plugin's own kernel
    assert ("decomposition", "acme_0x_plugin") in {(k, p) for k, p, _, _ in report.applied}
    assert report.verdict == "verified", report.verdict_reason
    # the same numbers as the op's definition: scale * x / (1 + |x|)
    x = np.linspace(-3, 3, 6, dtype=np.float32).reshape(2, 3)
    (y,) = onnxruntime.InferenceSession(result.model.SerializeToString()).run(None, {"x": x})
    np.testing.assert_allclose(y, 0.5 * x / (1 + np.abs(x)), rtol=1e-6, atol=1e-7)
