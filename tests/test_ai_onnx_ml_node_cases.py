"""The ONNX backend node cases of the ai.onnx.ml domain (``test_ai_onnx_ml_*``) rescued for
OpenVINO, tract, the reference evaluator and an onnxruntime build without the ML ops
(``onnxruntime:ops=FILE`` whose operator configuration lists every ai.onnx op and no
ai.onnx.ml one): each case is rewritten for the target, run there on the case's own inputs
and compared with the case's expected outputs. A case whose interface is a string tensor
that the runtime cannot take is refused in one line naming the type."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import defs

from rewriter.api import rewrite
from rewriter.errors import RewriterError
from rewriter.testing import installed_runtimes, run_on

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from onnx.backend.test.case.node import collect_testcases

    CASES = {c.name: c for c in collect_testcases() if c.name.startswith("test_ai_onnx_ml_")}

TARGETS = ("openvino", "tract", "reference", "onnxruntime-without-ml")
# runtimes that take no string tensor: the cases with a string input are refused there
NO_STRINGS = {"openvino", "tract"}


def _string_interface(model: onnx.ModelProto) -> bool:
    return any(v.type.tensor_type.elem_type == onnx.TensorProto.STRING
               for v in list(model.graph.input) + list(model.graph.output))


@pytest.fixture(scope="module")
def without_ml(tmp_path_factory) -> str:
    """An onnxruntime reduced-build configuration: every ai.onnx op, no ai.onnx.ml op."""
    ops = sorted({s.name for s in defs.get_all_schemas_with_history() if s.domain == ""})
    path = tmp_path_factory.mktemp("reduced") / "required_operators.config"
    path.write_text("ai.onnx;13,17,19,21;" + ",".join(ops) + "\n")
    return str(path)


def _target(name: str, config: str) -> tuple[str, str]:
    """The --target of ``name``, and the runtime that runs its result."""
    if name == "onnxruntime-without-ml":
        return f"onnxruntime:ops={config}", "onnxruntime"
    return name, name


def test_the_ml_node_cases_are_the_known_eight():
    assert sorted(CASES) == sorted([
        "test_ai_onnx_ml_array_feature_extractor", "test_ai_onnx_ml_binarizer",
        "test_ai_onnx_ml_label_encoder_string_int",
        "test_ai_onnx_ml_label_encoder_string_int_no_default",
        "test_ai_onnx_ml_label_encoder_tensor_mapping",
        "test_ai_onnx_ml_label_encoder_tensor_value_only_mapping",
        "test_ai_onnx_ml_tree_ensemble_single_tree",
        "test_ai_onnx_ml_tree_ensemble_set_membership"])


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("name", TARGETS)
def test_node_case_is_rescued(name, case, without_ml):
    runtime = "onnxruntime" if name == "onnxruntime-without-ml" else name
    if runtime not in installed_runtimes() and runtime != "tract":
        pytest.skip(f"{runtime} is not installed")
    if runtime == "tract":
        pytest.importorskip("tract")
    test_case = CASES[case]
    target, runner = _target(name, without_ml)
    model = test_case.model
    inputs, expected = test_case.data_sets[0]
    feeds = {i.name: v for i, v in zip(model.graph.input, inputs)}
    if name in NO_STRINGS and _string_interface(model):
        with pytest.raises(RewriterError) as refused:
            result = rewrite(model, [target], confirm=True, verify=True)
            raise RewriterError(result.report.verdict_reason)
        message = str(refused.value)
        assert "\n" not in message.strip() and "string" in message, message
        return
    result = rewrite(model, [target], confirm=False, verify=False)
    rewritten = result.model
    left = {(n.domain, n.op_type) for n in rewritten.graph.node if n.domain == "ai.onnx.ml"}
    if name == "onnxruntime-without-ml":  # (the others run some ML ops themselves)
        assert not left, left
    got = run_on(runner, rewritten, feeds)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        g = np.asarray(g)
        assert g.shape == e.shape, (g.shape, e.shape)
        if e.dtype == object:
            assert g.tolist() == e.tolist()
        else:
            assert g.dtype == e.dtype, (g.dtype, e.dtype)
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
