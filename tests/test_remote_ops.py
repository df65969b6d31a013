"""An op that calls a network service (onnxruntime-extensions' Azure ops) is refused by
``rewrite`` with that reason, not "no decomposition"."""

from __future__ import annotations

import onnx
import pytest

from rewriter.api import rewrite
from rewriter.errors import UnfixableError
from tests.conftest import CORPUS


def test_azure_triton_invoker_is_refused_as_a_network_call(plugins):
    path = CORPUS / "ortx_azure_triton_addf.onnx"
    if not path.exists():
        pytest.skip("the shared corpus is not here")
    model = onnx.load(str(path))
    with pytest.raises(UnfixableError) as e:
        rewrite(model, ["onnxruntime"], plugins=plugins, confirm=False)
    message = str(e.value)
    assert "AzureTritonInvoker" in message
    assert "remote inference service over the network" in message
    assert "no installed plugin registers a decomposition" not in message
