"""Interfaces a target cannot take (issue 28, item 3): ``check`` and ``rewrite`` refuse in
one line naming the graph input or output and its type (a sequence of maps from ZipMap, a
map into DictVectorizer, a string tensor on tract) instead of an op or a probe, and each
claim is asked of the runtime itself. Also tract's check of an input with an anonymous
dimension (skl2onnx's batch of None), which tract types once the dimension has a name."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from rewriter.api import check, rewrite
from rewriter.errors import UnfixableError
from rewriter.testing import installed_runtimes, run_on
from tests.conftest import model_from_text

NO_ZIPMAP = ("openvino", "tract", "reference")


def _available(runtime: str) -> None:
    if runtime == "tract":
        pytest.importorskip("tract")
    elif runtime not in installed_runtimes():
        pytest.skip(f"{runtime} is not installed")


def _one_line_refusal(model, target: str) -> str:
    with pytest.raises(UnfixableError) as refused:
        rewrite(model, [target], confirm=True, verify=False)
    message = str(refused.value).strip()
    assert "\n" not in message, message
    return message


@pytest.fixture(scope="module")
def zipmap_classifier():
    """A skl2onnx logistic regression with its default ZipMap output, and inputs."""
    pytest.importorskip("sklearn")
    pytest.importorskip("skl2onnx")
    from skl2onnx import to_onnx
    from sklearn.datasets import make_classification
    from sklearn.linear_model import LogisticRegression

    x, y = make_classification(120, 5, n_informative=3, n_classes=3, random_state=0)
    x = x.astype(np.float32)
    model = to_onnx(LogisticRegression(max_iter=300).fit(x, y), x[:1],
                    target_opset={"": 17, "ai.onnx.ml": 3})
    return model, {model.graph.input[0].name: x[:4]}


@pytest.mark.parametrize("target", NO_ZIPMAP)
def test_zipmap_output_is_refused_naming_the_sequence_of_maps(target, zipmap_classifier):
    _available(target)
    model, feeds = zipmap_classifier
    name = next(n.output[0] for n in model.graph.node if n.op_type == "ZipMap")
    assert name in {o.name for o in model.graph.output}
    # the runtime itself does not give that output back
    with pytest.raises(Exception):  # noqa: B017 - each runtime words it its own way
        run_on(target, model, feeds)
    message = _one_line_refusal(model, target)
    assert f"output {name!r} is a sequence of maps, seq(map(int64, float)) (ZipMap): " \
           f"{target} cannot return it" in message, message
    assert "--adapt-interface" in message and "zipmap" in message, message
    # check says the same as the remedy it lacks
    result = check(model, [target], confirm=False)
    from rewriter.report.render import check_as_dict

    groups = check_as_dict(result)["targets"][0]["groups"]
    zipmap = [g for g in groups if g["op_type"] == "ZipMap"]
    assert zipmap and f"output {name!r} is a sequence of maps" in zipmap[0]["no_remedy"]


def _string_label_model() -> onnx.ModelProto:
    """Scores in, the string label of the largest out (as a classifier's label output)."""
    classes = helper.make_tensor("classes", TensorProto.STRING, [3], [b"ant", b"bee", b"cat"])
    nodes = [helper.make_node("Constant", [], ["table"], value=classes),
             helper.make_node("ArgMax", ["scores"], ["index"], axis=1, keepdims=0),
             helper.make_node("Gather", ["table", "index"], ["label"], axis=0)]
    graph = helper.make_graph(
        nodes, "labels", [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("label", TensorProto.STRING, [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_string_output_on_tract_is_refused_naming_the_output():
    pytest.importorskip("tract")
    model = _string_label_model()
    feeds = {"scores": np.array([[0.1, 0.7, 0.2], [0.9, 0.0, 0.1]], np.float32)}
    assert run_on("onnxruntime", model, feeds)[0].tolist() == ["bee", "ant"]
    with pytest.raises(Exception, match="String"):  # tract's API hands out no string
        run_on("tract", model, feeds)
    message = _one_line_refusal(model, "tract")
    assert "output 'label' is a string tensor: tract's Python API cannot return one" \
        in message, message
    assert "--adapt-interface" in message
    # no op is blamed: the only tract finding is the model's interface
    findings = check(model, ["tract"], confirm=False).results[0].findings
    assert [(f.path, f.op_type) for f in findings] == [("model", "")], findings


def test_string_output_is_no_finding_where_the_runtime_returns_strings():
    model = _string_label_model()
    assert check(model, ["onnxruntime", "reference"], confirm=True).ok


def _dict_vectorizer_model() -> onnx.ModelProto:
    features = helper.make_map_type_proto(TensorProto.STRING,
                                          helper.make_tensor_type_proto(TensorProto.FLOAT, []))
    node = helper.make_node("DictVectorizer", ["features"], ["vector"], domain="ai.onnx.ml",
                            string_vocabulary=["a", "b", "c"])
    graph = helper.make_graph(
        [node], "vectorize", [helper.make_value_info("features", features)],
        [helper.make_tensor_value_info("vector", TensorProto.FLOAT, [1, 3])])
    return helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])


@pytest.mark.parametrize("target", ("openvino", "tract"))
def test_map_input_is_refused_naming_the_map(target):
    _available(target)
    model = _dict_vectorizer_model()
    vector = run_on("onnxruntime", model, {"features": {"a": 1.0, "c": 3.0}})[0]
    np.testing.assert_array_equal(vector, [[1.0, 0.0, 3.0]])  # onnxruntime runs it
    with pytest.raises(Exception):  # noqa: B017 - and the target does not
        run_on(target, model, {"features": {"a": 1.0, "c": 3.0}})
    message = _one_line_refusal(model, target)
    # (OpenVINO refuses the model's input itself; tract's loader the node reading it)
    named = {"openvino": "input 'features' is map(string,tensor(float)), not a tensor: "
                         "OpenVINO cannot take it",
             "tract": "input 'features' is a map(string | int64, T) (DictVectorizer): "
                      "tract cannot take it"}[target]
    assert named in message and "--adapt-interface" in message, message
    assert "invalid" not in message, message


def test_tract_types_an_input_with_an_anonymous_dimension():
    """skl2onnx writes a batch of None as a dimension with neither size nor name; tract
    refuses to type such an input ("Source node without a determined fact"), and runs the
    model once fed. check names the dimension (the runtime's answer decides)."""
    pytest.importorskip("tract")
    model = model_from_text("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[n, 4] x) => (float[n, 4] y) { y = Relu(x) }
    """)
    model.graph.input[0].type.tensor_type.shape.dim[0].Clear()  # anonymous, as skl2onnx
    assert not model.graph.input[0].type.tensor_type.shape.dim[0].HasField("dim_param")
    x = np.array([[-1, 2, -3, 4], [5, -6, 7, -8]], np.float32)
    np.testing.assert_array_equal(run_on("tract", model, {"x": x})[0], np.maximum(x, 0))
    assert check(model, ["tract"], confirm=False).ok
