"""Models whose small shape tensors are in external data (issue 16): onnx's shape inference
reads some inputs' values and cannot read them from external data, so onnxruntime refuses
the model at load. The onnxruntime target reports each such node (``external-shape-data``);
the ``external-shape-data`` pass stores exactly those tensors inline."""

from __future__ import annotations

import hashlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from rewriter_plugins.external_shape_data import SHAPE_DATA_INPUTS, shape_data_inputs

EXTERNAL_ERROR = "Cannot parse data from external tensors"


def _i64(*values) -> np.ndarray:
    return np.array(values, np.int64)


# op, opset, attributes, [(input name, constant value | declared (elem type, shape) | None:
# left empty)]: one valid node per table entry.
_F = TensorProto.FLOAT
SAMPLES = [
    ("Reshape", 21, {}, [("x", (_F, [2, 3, 4])), ("shape", _i64(2, 12))]),
    ("Expand", 21, {}, [("x", (_F, [3, 1])), ("shape", _i64(2, 3, 4))]),
    ("ConstantOfShape", 21, {}, [("shape", _i64(2, 3))]),
    ("Slice", 21, {}, [("x", (_F, [4, 5])), ("starts", _i64(1)), ("ends", _i64(3)),
                       ("axes", _i64(1)), ("steps", _i64(1))]),
    ("Squeeze", 21, {}, [("x", (_F, [1, 3])), ("axes", _i64(0))]),
    ("Unsqueeze", 21, {}, [("x", (_F, [3])), ("axes", _i64(0))]),
    ("Split", 18, {}, [("x", (_F, [6])), ("split", _i64(2, 4))]),
    ("Tile", 21, {}, [("x", (_F, [2, 3])), ("repeats", _i64(2, 1))]),
    ("Pad", 21, {}, [("x", (_F, [2, 3])), ("pads", _i64(1, 1)), ("value", (_F, [])),
                     ("axes", _i64(1))]),
    ("Resize", 19, {}, [("x", (_F, [1, 1, 2, 2])), ("roi", None),
                        ("scales", np.array([1, 1, 2, 2], np.float32))]),
    ("Resize", 19, {}, [("x", (_F, [1, 1, 2, 2])), ("roi", None), ("scales", None),
                        ("sizes", _i64(1, 1, 4, 4))]),
    ("TopK", 21, {}, [("x", (_F, [5])), ("k", _i64(2))]),
    ("ReduceSum", 21, {}, [("x", (_F, [2, 3])), ("axes", _i64(1))]),
    ("ReduceMean", 21, {}, [("x", (_F, [2, 3])), ("axes", _i64(1))]),
    ("Range", 21, {}, [("start", np.array(0, np.int64)), ("limit", np.array(5, np.int64)),
                       ("delta", np.array(1, np.int64))]),
    ("OneHot", 21, {}, [("i", (TensorProto.INT64, [3])), ("depth", np.array(4, np.int64)),
                        ("values", (_F, [2]))]),
    ("CenterCropPad", 21, {}, [("x", (_F, [4, 4])), ("shape", _i64(2, 2))]),
    ("AffineGrid", 21, {}, [("theta", (_F, [1, 2, 3])), ("size", _i64(1, 1, 4, 4))]),
    ("HannWindow", 21, {}, [("size", np.array(8, np.int64))]),
    ("Col2Im", 21, {}, [("x", (_F, [1, 4, 9])), ("image", _i64(4, 4)), ("block", _i64(2, 2))]),
    ("SplitToSequence", 21, {}, [("x", (_F, [6])), ("split", _i64(2, 4))]),
    ("DFT", 20, {}, [("x", (_F, [1, 8, 1])), ("length", np.array(8, np.int64)),
                     ("axis", np.array(1, np.int64))]),
    ("DFT", 17, {}, [("x", (_F, [1, 8, 1])), ("length", np.array(8, np.int64))]),
    ("STFT", 21, {}, [("x", (_F, [1, 16, 1])), ("step", np.array(4, np.int64)), ("w", None),
                      ("frame", np.array(8, np.int64))]),
    ("Upsample", 9, {}, [("x", (_F, [1, 1, 2, 2])),
                         ("scales", np.array([1, 1, 2, 2], np.float32))]),
    ("Resize", 10, {}, [("x", (_F, [1, 1, 2, 2])),
                        ("scales", np.array([1, 1, 2, 2], np.float32))]),
    ("OneHot", 9, {}, [("i", _i64(0, 2)), ("depth", np.array(4, np.int64)),
                       ("values", (_F, [2]))]),
    ("MelWeightMatrix", 21, {}, [("bins", np.array(4, np.int64)),
                                 ("dft", np.array(16, np.int64)),
                                 ("rate", np.array(16000, np.int64)),
                                 ("low", np.array(0, np.float32)),
                                 ("high", np.array(8000, np.float32))]),
]


_OUTPUTS = {"Split": 2, "TopK": 2}


def _sample_model(op, opset, attrs, args, external: set[str]) -> onnx.ModelProto:
    """One ``op`` node; constant arguments are initializers, those named in ``external``
    marked as stored in a data file (shape inference fails before reading any file)."""
    inputs, inits, names = [], [], []
    for name, value in args:
        if value is None:
            names.append("")
        elif isinstance(value, tuple):
            inputs.append(helper.make_tensor_value_info(name, *value))
            names.append(name)
        else:
            tensor = numpy_helper.from_array(value, name)
            if name in external:  # the same tensor, its values in a data file
                tensor = TensorProto(name=name, data_type=tensor.data_type, dims=tensor.dims)
                tensor.data_location = TensorProto.EXTERNAL
                for key, text in (("location", "weights.data"), ("length", str(value.nbytes))):
                    tensor.external_data.add(key=key, value=text)
            inits.append(tensor)
            names.append(name)
    outputs = [f"y{i}" for i in range(_OUTPUTS.get(op, 1))]
    node = helper.make_node(op, names, outputs, **attrs)
    graph = helper.make_graph(
        [node], "g", inputs,
        [onnx.ValueInfoProto(name=y) for y in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _constants(args) -> list[str]:
    return [name for name, value in args if isinstance(value, np.ndarray)]


@pytest.mark.parametrize("op, opset, attrs, args", SAMPLES,
                         ids=[f"{s[0]}-{s[3][-1][0]}" for s in SAMPLES])
def test_the_table_is_what_onnx_shape_inference_reads(op, opset, attrs, args):
    """Each constant input the table lists fails onnx's strict shape inference when external;
    each one it does not list does not (and the node infers with every input inline)."""
    schema = onnx.defs.get_schema(op, opset)
    listed = {args[i][0] for i in shape_data_inputs(op, schema.since_version)
              if i < len(args) and args[i][1] is not None}
    onnx.shape_inference.infer_shapes(_sample_model(op, opset, attrs, args, set()),
                                      strict_mode=True)
    for name in _constants(args):
        model = _sample_model(op, opset, attrs, args, {name})
        if name in listed:
            with pytest.raises(onnx.shape_inference.InferenceError, match=EXTERNAL_ERROR):
                onnx.shape_inference.infer_shapes(model, strict_mode=True)
        else:
            onnx.shape_inference.infer_shapes(model, strict_mode=True)
    assert listed, f"{op}: the sample exercises no table entry"


def test_every_table_op_is_an_onnx_operator():
    for op in SHAPE_DATA_INPUTS:
        assert onnx.defs.has(op), op


# -- a model saved with every tensor external --------------------------------------------------

W = np.arange(12, dtype=np.float32).reshape(1, 12) / 7.0


def _save_external(tmp_path):
    """x (2, 3, 4) -> Reshape to (2, 12) -> + w: the shape and w in one data file."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 12])
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "flat_shape"], ["r"], name="flatten"),
         helper.make_node("Add", ["r", "w"], ["y"], name="bias")],
        "g", [x], [y],
        [numpy_helper.from_array(_i64(2, 12), "flat_shape"), numpy_helper.from_array(W, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    folder = tmp_path / "src"
    folder.mkdir()
    onnx.save(model, folder / "m.onnx", save_as_external_data=True,
              all_tensors_to_one_file=True, location="m.data", size_threshold=0)
    return folder / "m.onnx"


def _digest(*paths) -> list[str]:
    return [hashlib.sha256(p.read_bytes()).hexdigest() for p in paths]


def _ort_session(path):
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_check_names_the_node_the_tensor_and_the_pass(tmp_path, plugins):
    from rewriter.api import check

    path = _save_external(tmp_path)
    with pytest.raises(Exception, match=EXTERNAL_ERROR):
        _ort_session(path)  # the real onnxruntime refuses it at load
    result = check(path, ["onnxruntime"], plugins=plugins, confirm=False).results[0]
    assert [(f.path, f.reason, f.op_type) for f in result.findings] == [
        ("graph/node 0 (flatten)", "external-shape-data", "Reshape")]
    assert "'flat_shape'" in result.findings[0].detail
    assert list(result.plan.values()) == ["pass external-shape-data [external-shape-data]"]


def test_rewrite_stores_only_the_shape_inline_and_is_verified(tmp_path, plugins):
    from rewriter.api import rewrite

    path = _save_external(tmp_path)
    before = _digest(path, path.parent / "m.data")
    out = tmp_path / "out" / "fixed.onnx"
    out.parent.mkdir()
    report = rewrite(path, ["onnxruntime"], output=out, plugins=plugins, confirm=False).report
    assert report.verdict == "verified", report.verdict_reason
    assert report.verification["shape_inference"] == "ok"
    (compared,) = report.comparison.targets  # the numbers, against the original's run
    assert compared.target == "onnxruntime" and compared.status == "equal"
    assert [(o.name, o.ok, o.elements) for o in compared.outputs] == [("y", True, 24)]
    assert compared.outputs[0].max_abs <= 1e-6
    assert _digest(path, path.parent / "m.data") == before  # the input is never modified
    written = onnx.load(out, load_external_data=False)
    tensors = {t.name: t for t in written.graph.initializer}
    assert tensors["flat_shape"].data_location == TensorProto.DEFAULT
    assert numpy_helper.to_array(tensors["flat_shape"]).tolist() == [2, 12]
    assert tensors["w"].data_location == TensorProto.EXTERNAL  # the weights stay external
    info = {e.key: e.value for e in tensors["w"].external_data}
    data = (out.parent / info["location"]).read_bytes()
    offset = int(info.get("offset", 0))
    stored = np.frombuffer(data[offset:offset + W.nbytes], np.float32).reshape(W.shape)
    assert np.array_equal(stored, W)
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    (y,) = _ort_session(out).run(None, {"x": x})  # onnxruntime loads the result
    np.testing.assert_allclose(y, x.reshape(2, 12) + W, rtol=1e-6)


def test_a_model_in_memory_declines_with_the_reason(tmp_path, plugins, monkeypatch):
    from rewriter.api import rewrite
    from rewriter.errors import RewriterError

    path = _save_external(tmp_path)
    monkeypatch.chdir(path.parent)  # onnx resolves an in-memory model's data from here
    model = onnx.load(path, load_external_data=False)
    with pytest.raises(RewriterError, match="given in memory"):
        rewrite(model, ["onnxruntime"], plugins=plugins, confirm=False)
    assert model.graph.initializer[0].data_location == TensorProto.EXTERNAL


def test_reference_and_openvino_load_it_and_report_nothing(tmp_path, plugins):
    """The reference evaluator and OpenVINO read external data before they need the values."""
    from onnx.reference import ReferenceEvaluator

    from rewriter.api import check

    path = _save_external(tmp_path)
    x = np.ones((2, 3, 4), np.float32)
    (y,) = ReferenceEvaluator(str(path)).run(None, {"x": x})
    np.testing.assert_allclose(y, x.reshape(2, 12) + W, rtol=1e-6)
    targets = ["reference"]
    try:
        import openvino as ov
    except ImportError:
        ov = None
    if ov is not None:
        compiled = ov.Core().compile_model(str(path), "CPU")
        np.testing.assert_allclose(compiled({"x": x})[0], x.reshape(2, 12) + W, rtol=1e-6)
        targets.append("openvino")
    report = check(path, targets, plugins=plugins, confirm=False)
    assert [r.findings for r in report.results] == [[] for _ in targets]


def test_a_branch_reading_an_outer_external_shape_is_found_and_fixed(tmp_path, plugins):
    from rewriter.api import check, rewrite

    def branch(name):
        return helper.make_graph(
            [helper.make_node("Reshape", ["x", "flat_shape"], ["r"], name=f"{name}_flatten")],
            name, [], [helper.make_tensor_value_info("r", TensorProto.FLOAT, [2, 12])])

    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], name="pick", then_branch=branch("then"),
                          else_branch=branch("else"))],
        "g", [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
              helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 12])],
        [numpy_helper.from_array(_i64(2, 12), "flat_shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    path = tmp_path / "if.onnx"
    onnx.save(model, path, save_as_external_data=True, location="if.data", size_threshold=0)
    with pytest.raises(Exception, match=EXTERNAL_ERROR):
        _ort_session(path)
    findings = check(path, ["onnxruntime"], plugins=plugins, confirm=False).findings
    assert sorted(f.path for f in findings) == [
        "graph/node 0 (pick)/else_branch/node 0 (else_flatten)",
        "graph/node 0 (pick)/then_branch/node 0 (then_flatten)"]
    out = tmp_path / "fixed.onnx"
    report = rewrite(path, ["onnxruntime"], output=out, plugins=plugins, confirm=False).report
    assert report.verdict == "verified", report.verdict_reason
    x = np.ones((2, 3, 4), np.float32)
    (y,) = _ort_session(out).run(None, {"c": np.array(True), "x": x})
    np.testing.assert_array_equal(y, x.reshape(2, 12))


def test_the_pass_reads_no_file_outside_the_models_folder(tmp_path, plugins):
    """A location leaving the folder is refused (rewriter.io.model refuses it at load too; the
    pass checks again before it reads)."""
    from rewriter_plugins.external_shape_data import ExternalShapeDataPass

    from rewriter.plugin import PassContext

    path = _save_external(tmp_path)
    (tmp_path / "secret.data").write_bytes(_i64(2, 12).tobytes())
    model = onnx.load(path, load_external_data=False)
    shape = next(t for t in model.graph.initializer if t.name == "flat_shape")
    for entry in shape.external_data:
        if entry.key == "location":
            entry.value = "../secret.data"
        elif entry.key == "offset":
            entry.value = "0"
    ctx = PassContext([], plugins.registry, {"base_dir": path.parent})
    with pytest.raises(ValueError, match="'flat_shape'.*not a relative path inside"):
        ExternalShapeDataPass().run(model, ctx)
    assert shape.data_location == TensorProto.EXTERNAL and not shape.raw_data
