"""``--adapt-interface`` (issue 28, item 3): a ZipMap output and a classifier's string label
output, which OpenVINO, tract (its Python API) and the reference evaluator cannot return,
are refused without the flag in one line naming it; with it they become tensors (the
probabilities ZipMap was fed; int64 indices into the label table), the labels go to the
model's metadata, the comparison converts the original's outputs through that record, and
``rewriter.session`` gives the original interface back. Models are built with onnx.helper
(no scikit-learn needed); the runtimes are real and skip when absent."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

import rewriter
from rewriter.api import check, rewrite
from rewriter.cli import cli
from rewriter.errors import UnfixableError
from rewriter.io.interface import (
    INTERFACE_KEY,
    Adaptation,
    InterfaceError,
    read_interface,
    to_adapted,
    to_original,
)
from rewriter.testing import installed_runtimes, run_on

ML = "ai.onnx.ml"
STRINGS = ["ant", "bee", "cat"]
INTS = [3, 7, 11]


def _available(runtime: str) -> None:
    if runtime == "tract":
        pytest.importorskip("tract")
    elif runtime not in installed_runtimes():
        pytest.skip(f"{runtime} is not installed")


def _zipmap_output(name: str, strings: bool):
    key = TensorProto.STRING if strings else TensorProto.INT64
    return helper.make_value_info(name, helper.make_sequence_type_proto(
        helper.make_map_type_proto(key, helper.make_tensor_type_proto(TensorProto.FLOAT, []))))


def _labels(strings: bool, int_key: str) -> dict:
    return {"classlabels_strings": STRINGS} if strings else {int_key: INTS}


def _classifier_model(kind: str, strings: bool, through_identity: bool = False
                      ) -> onnx.ModelProto:
    """A 3-class LinearClassifier or TreeEnsembleClassifier (4 features) with its label and
    ZipMap outputs, as skl2onnx exports one (``through_identity``: the label output through
    an Identity, as some exporters write it)."""
    if kind == "linear":
        coef = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
        node = helper.make_node("LinearClassifier", ["X"], ["label", "probabilities"],
                                domain=ML, coefficients=coef.ravel().tolist(),
                                intercepts=[0.1, -0.2, 0.05], post_transform="SOFTMAX",
                                **_labels(strings, "classlabels_ints"))
    else:  # two stumps, leaf weights for every class
        node = helper.make_node(
            "TreeEnsembleClassifier", ["X"], ["label", "probabilities"], domain=ML,
            nodes_treeids=[0, 0, 0, 1, 1, 1], nodes_nodeids=[0, 1, 2, 0, 1, 2],
            nodes_featureids=[0, 0, 0, 2, 0, 0], nodes_values=[0.1, 0, 0, -0.3, 0, 0],
            nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"] * 2,
            nodes_truenodeids=[1, 0, 0, 1, 0, 0], nodes_falsenodeids=[2, 0, 0, 2, 0, 0],
            class_treeids=[0] * 6 + [1] * 6, class_nodeids=[1, 1, 1, 2, 2, 2] * 2,
            class_ids=[0, 1, 2] * 4,
            class_weights=[0.9, 0.2, 0.1, 0.1, 0.3, 0.8, 0.5, 0.1, 0.3, 0.2, 0.7, 0.1],
            post_transform="SOFTMAX", **_labels(strings, "classlabels_int64s"))
    zipmap = helper.make_node("ZipMap", ["probabilities"], ["output_probability"], domain=ML,
                              **_labels(strings, "classlabels_int64s"))
    nodes = [node, zipmap]
    label = "label"
    if through_identity:
        nodes.append(helper.make_node("Identity", ["label"], ["output_label"]))
        label = "output_label"
    graph = helper.make_graph(
        nodes, kind, [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info(label, TensorProto.STRING if strings
                                       else TensorProto.INT64, ["N"]),
         _zipmap_output("output_probability", strings)])
    return helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid(ML, 1)])


def _feeds(rows: int = 6) -> dict:
    return {"X": np.random.default_rng(1).normal(size=(rows, 4)).astype(np.float32)}


def _same_interface(got: list, want: list) -> None:
    """Outputs of the original interface: labels exactly, maps by the same keys, values to
    float32 precision."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, list):
            assert isinstance(g, list) and len(g) == len(w)
            for gm, wm in zip(g, w):
                assert list(gm) == list(wm)
                np.testing.assert_allclose(list(gm.values()), list(wm.values()), rtol=1e-5,
                                           atol=1e-6)
        else:
            assert np.asarray(g).tolist() == np.asarray(w).tolist()


# -- without the flag: one line naming it ---------------------------------------------------

@pytest.mark.parametrize("target", ("openvino", "tract", "reference"))
def test_without_the_flag_a_zipmap_output_is_refused_naming_it(target):
    _available(target)
    with pytest.raises(UnfixableError) as refused:
        rewrite(_classifier_model("linear", strings=False), [target], confirm=True,
                verify=False)
    message = str(refused.value).strip()
    assert "\n" not in message, message
    assert "output 'output_probability' is a sequence of maps" in message, message
    assert "--adapt-interface rewrites it" in message and "planned" not in message, message


def test_without_the_flag_the_cli_exits_non_zero_naming_it(tmp_path):
    pytest.importorskip("tract")
    path = tmp_path / "m.onnx"
    onnx.save(_classifier_model("linear", strings=True), path)
    result = CliRunner().invoke(cli, ["rewrite", str(path), "-o", str(tmp_path / "out.onnx"),
                                      "-t", "tract"])
    assert result.exit_code == 1, result.output
    # the CLI wraps the error, a finding per entry: each names the value and the flag
    text = " ".join(result.stderr.split())
    assert "Traceback" not in result.output, result.output
    assert text.startswith("error: 2 finding(s) have no remedy, nothing was changed"), text
    assert "output 'label' is a string tensor" in text and \
        "output 'label' is part of the model's interface: rerun with --adapt-interface" in text
    assert "output 'output_probability' is a sequence of maps" in text and \
        "--adapt-interface rewrites it to the float probabilities" in text
    assert not (tmp_path / "out.onnx").exists()


def test_check_plans_the_adaptation_only_with_the_flag():
    pytest.importorskip("tract")
    model = _classifier_model("linear", strings=True)

    def plans(**kw) -> dict:
        (result,) = check(model, ["tract"], confirm=False, **kw).results
        return {op or "model": text for (_path, op), text in result.plan.items()}

    without, with_flag = plans(), plans(adapt_interface=True)
    assert without["ZipMap"].startswith("none: ") and "--adapt-interface" in without["ZipMap"]
    assert without["model"].startswith("none: ") and "--adapt-interface" in without["model"]
    assert with_flag["ZipMap"] == with_flag["model"] == \
        "pass ai-onnx-ml-interface [ai-onnx-ml]", with_flag


# -- with the flag: tensors, verified, the original interface back -------------------------

CASES = [("linear", False, "openvino"), ("linear", True, "openvino"),
         ("tree", False, "openvino"), ("linear", False, "tract"), ("linear", True, "tract"),
         ("tree", True, "tract"), ("tree", True, "reference")]


@pytest.mark.parametrize(("kind", "strings", "target"), CASES)
def test_adapted_model_runs_is_verified_and_gives_the_original_interface_back(
        kind, strings, target):
    _available(target)
    original = _classifier_model(kind, strings)
    feeds = _feeds()
    result = rewrite(original, [target], confirm=True, adapt_interface=True)
    report = result.report
    assert report.verdict == "verified", report.verdict_reason
    # verified through the adapter: the comparison converted the original's outputs
    assert report.comparison.interface and "interface adapter" in report.verdict_reason
    assert any("output 'output_probability' was seq(map(" in line for line in report.interface)
    assert any(kind == "interface" for (kind, _p, _r, _op) in report.applied)
    adapted = result.model
    assert not any(n.op_type == "ZipMap" for n in adapted.graph.node)
    types = {o.name: o.type.tensor_type.elem_type for o in adapted.graph.output}
    assert types["output_probability"] == TensorProto.FLOAT
    record = read_interface(adapted)
    assert list(record["output_probability"].labels) == (STRINGS if strings else INTS)
    if target == "tract" and strings:  # tract's API returns no string: indices instead
        assert types["label"] == TensorProto.INT64
        assert record["label"].labels == tuple(STRINGS)
    # the target runs it: the probabilities ZipMap was fed
    want = ort.InferenceSession(original.SerializeToString()).run(None, feeds)
    got = run_on(target, adapted, feeds)
    names = [o.name for o in adapted.graph.output]
    np.testing.assert_allclose(got[names.index("output_probability")],
                               [list(m.values()) for m in want[1]], rtol=1e-5, atol=1e-6)
    # session/run give the original interface back, equal to onnxruntime's run of it
    _same_interface(rewriter.session(adapted).run(None, feeds), want)
    outputs, _, _ = rewriter.comparison.runtime.run(adapted, feeds)
    _same_interface([outputs[o.name] for o in original.graph.output], want)


def test_a_label_through_an_identity_on_tract():
    pytest.importorskip("tract")
    original = _classifier_model("tree", strings=True, through_identity=True)
    result = rewrite(original, ["tract"], confirm=True, adapt_interface=True)
    assert result.report.verdict == "verified", result.report.verdict_reason
    assert set(read_interface(result.model)) == {"output_label", "output_probability"}
    want = ort.InferenceSession(original.SerializeToString()).run(None, _feeds())
    _same_interface(rewriter.session(result.model).run(None, _feeds()), want)


def test_a_model_importing_ai_onnx_ml_alone_gets_an_ai_onnx_import():
    """CatBoost exports import ai.onnx.ml alone: the Identity standing for ZipMap needs
    ai.onnx (the reference evaluator refuses a node of a domain the model does not import)."""
    original = _classifier_model("tree", strings=False)
    del original.opset_import[:]
    original.opset_import.append(helper.make_opsetid(ML, 1))
    result = rewrite(original, ["reference"], confirm=True, adapt_interface=True)
    assert result.report.verdict == "verified", result.report.verdict_reason
    assert {o.domain: o.version for o in result.model.opset_import}[""] == 17
    want = ort.InferenceSession(original.SerializeToString()).run(None, _feeds())
    _same_interface(rewriter.session(result.model).run(None, _feeds()), want)


def test_a_string_output_that_is_no_label_is_not_adapted():
    """A string input passed through: no label table to index, refused with the reason."""
    pytest.importorskip("tract")
    graph = helper.make_graph(
        [helper.make_node("Identity", ["s"], ["t"])], "echo",
        [helper.make_tensor_value_info("s", TensorProto.STRING, [2])],
        [helper.make_tensor_value_info("t", TensorProto.STRING, [2])])
    model = helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnfixableError, match="--adapt-interface cannot adapt output 't': it is "
                                             "not the string label of a classifier"):
        rewrite(model, ["tract"], confirm=True, verify=False, adapt_interface=True)


def test_the_cli_reports_the_interface_change(tmp_path):
    pytest.importorskip("tract")
    path, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save(_classifier_model("linear", strings=True), path)
    result = CliRunner().invoke(cli, ["rewrite", str(path), "-o", str(out), "-t", "tract",
                                      "--adapt-interface", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["verdict"] == "verified"
    assert sorted(line.split("'")[1] for line in doc["interface"]) == \
        ["label", "output_probability"]
    assert doc["compare"]["interface"] == doc["interface"]
    assert INTERFACE_KEY in {p.key for p in onnx.load(out).metadata_props}


# -- the comparison goes through the recorded adapter ---------------------------------------

def _with_record(model: onnx.ModelProto, outputs: dict) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for p in copy.metadata_props:
        if p.key == INTERFACE_KEY:
            p.value = json.dumps({"outputs": outputs})
    return copy


def test_the_comparison_uses_the_recorded_labels():
    """The adapted model compared again with the record's labels in another order: the
    probabilities no longer match (a mismatch); a label the original gives that the table
    lacks: nothing could be compared (unverified)."""
    original = _classifier_model("linear", strings=True)
    adapted = rewrite(original, ["openvino"] if "openvino" in installed_runtimes()
                      else ["reference"], adapt_interface=True).model
    record = json.loads(next(p.value for p in adapted.metadata_props
                             if p.key == INTERFACE_KEY))["outputs"]
    assert rewriter.compare(original, adapted, ["onnxruntime"]).verdict == "verified"
    swapped = json.loads(json.dumps(record))
    swapped["output_probability"]["labels"] = ["bee", "ant", "cat"]
    report = rewriter.compare(original, _with_record(adapted, swapped), ["onnxruntime"])
    assert report.verdict == "mismatch", report.summary()
    missing = json.loads(json.dumps(record))
    missing["output_probability"]["labels"] = ["ant", "bee", "dog"]
    report = rewriter.compare(original, _with_record(adapted, missing), ["onnxruntime"])
    assert report.verdict == "unverified"
    assert "do not convert to the rewritten model's interface" in report.summary()
    assert "'dog'" in report.summary()


# -- the record's conversions ---------------------------------------------------------------

def test_conversions_round_trip():
    zipmap = Adaptation("p", "zipmap", "seq(map(int64,tensor(float)))", "tensor(float)",
                        tuple(INTS))
    labels = Adaptation("y", "labels", "tensor(string)", "tensor(int64)", tuple(STRINGS))
    original = {"p": [{3: 0.5, 7: 0.25, 11: 0.25}, {3: 0.0, 7: 1.0, 11: 0.0}],
                "y": np.array(["cat", "ant"], dtype=object), "z": np.ones(2)}
    adapted = to_adapted(original, {"p": zipmap, "y": labels})
    np.testing.assert_array_equal(adapted["p"], [[0.5, 0.25, 0.25], [0, 1, 0]])
    assert adapted["p"].dtype == np.float32
    assert adapted["y"].tolist() == [2, 0] and adapted["y"].dtype == np.int64
    back = to_original(adapted, {"p": zipmap, "y": labels})
    assert back["p"] == original["p"] and back["y"].tolist() == ["cat", "ant"]
    assert back["z"] is original["z"]
    with pytest.raises(InterfaceError, match="label 'dog' is not in the label table"):
        labels.to_adapted(np.array(["dog"], dtype=object))
    with pytest.raises(InterfaceError, match="index out of the label table"):
        labels.to_original(np.array([3]))
    with pytest.raises(InterfaceError, match="expected a sequence of maps"):
        zipmap.to_adapted(np.zeros((2, 3)))


def test_check_says_the_flag_and_plans_with_it(tmp_path):
    pytest.importorskip("tract")
    path = tmp_path / "m.onnx"
    onnx.save(_classifier_model("linear", strings=True), path)
    without = CliRunner().invoke(cli, ["check", str(path), "-t", "tract"])
    assert without.exit_code == 1, without.output
    assert "0 of 1 with findings fixable" in without.stdout
    assert "adapted with --adapt-interface (check again with it)" in \
        " ".join(without.stdout.split())
    flagged = CliRunner().invoke(cli, ["check", str(path), "-t", "tract", "--adapt-interface"])
    assert flagged.exit_code == 1, flagged.output  # findings all the same: check changes nothing
    text = " ".join(flagged.stdout.split())
    assert "1 of 1 with findings fixable" in text and "-t tract --adapt-interface`" in text
    assert "remedy: pass (ai-onnx-ml), rule ai-onnx-ml-interface" in text


def test_the_html_and_markdown_reports_name_the_interface_change(tmp_path):
    pytest.importorskip("tract")
    path = tmp_path / "m.onnx"
    onnx.save(_classifier_model("linear", strings=False), path)
    for name in ("r.md", "r.html"):
        result = CliRunner().invoke(cli, ["rewrite", str(path), "-o", str(tmp_path / "o.onnx"),
                                          "-t", "tract", "--adapt-interface",
                                          "--report", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
        text = (tmp_path / name).read_text()
        assert "Interface changed (--adapt-interface)" in text
        assert "output &#x27;output_probability&#x27; was seq(map(int64" in text or \
            "output 'output_probability' was seq(map(int64" in text


def test_onnx_rewriter_run_gives_the_original_interface(tmp_path):
    pytest.importorskip("tract")
    original = _classifier_model("linear", strings=True)
    adapted = rewrite(original, ["tract"], adapt_interface=True).model
    path = tmp_path / "adapted.onnx"
    onnx.save(adapted, path)
    result = CliRunner().invoke(cli, ["run", str(path), "--dim", "N=3", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.stdout)["outputs"]}
    assert rows["label"]["dtype"] == "string" and set(rows["label"]["preview"]) <= set(STRINGS)
    assert rows["output_probability"]["dtype"] == "seq(map)"
    assert rows["output_probability"]["shape"] == [3]
    assert [list(m) for m in rows["output_probability"]["preview"]] == [STRINGS, STRINGS]
