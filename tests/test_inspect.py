"""inspect: the inventory and structure it reports, from the protobuf alone."""

from __future__ import annotations

import json

from rewriter.cli import main
from tests.conftest import model_from_text, write_model

MODEL = """
<ir_version: 10, opset_import: ["" : 18, "local" : 1, "com.microsoft" : 1],
 producer_name: "exporter", producer_version: "2.1">
g (float[batch, 4] X, bool C) => (float[batch, 4] Y, float[batch, 4] Z) {
    W = Constant <value: tensor = float[4] {1, 2, 3, 4}> ()
    a = Add (X, W)
    b = Relu (a)
    c = Relu (b)
    Y = If (C) <then_branch: graph = t () => (float[batch, 4] o) {
                    o = Relu (c)
                }, else_branch: graph = e () => (float[batch, 4] o) {
                    o = If (C) <then_branch: graph = t2 () => (float[batch, 4] p) {
                        p = Neg (c)
                    }, else_branch: graph = e2 () => (float[batch, 4] p) {
                        p = Abs (c)
                    }>
                }>
    Z = local.Block (c)
}
<domain: "local", opset_import: ["" : 18, "com.microsoft" : 1]>
Block (x) => (y) {
    y = com.microsoft.FastGelu (x)
}
"""


def test_inspect_json_reports_structure_and_inventory(tmp_path, capsys):
    path = write_model(tmp_path / "m.onnx", model_from_text(MODEL))
    assert main(["inspect", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["ir_version"] == 10
    assert info["producer"] == "exporter 2.1"
    assert info["opset_imports"] == {"ai.onnx": 18, "local": 1, "com.microsoft": 1}
    assert info["inputs"] == [
        {"name": "X", "type": "tensor(float)", "shape": ["batch", 4]},
        {"name": "C", "type": "tensor(bool)", "shape": []},
    ]
    ops = {(o["domain"], o["op_type"]): o for o in info["operators"]}
    relu = ops[("ai.onnx", "Relu")]
    assert relu["count"] == 3 and relu["since_version"] == 14
    assert ops[("ai.onnx", "If")]["count"] == 2
    assert ops[("ai.onnx", "Add")]["since_version"] == 14
    assert ops[("local", "Block")]["local_function"] is True
    assert ops[("com.microsoft", "FastGelu")]["since_version"] == 1  # from onnxruntime's schemas
    assert info["nodes"] == 11  # subgraph and function nodes included
    assert info["subgraphs"] == {"count": 4, "max_depth": 2}
    assert info["functions"] == [
        {"domain": "local", "name": "Block", "overload": "", "nodes": 1, "inputs": ["x"],
         "outputs": ["y"]}
    ]
    assert info["tensors"] == {"count": 1, "bytes": 16, "external_bytes": 0}


def test_inspect_text_output(tmp_path, capsys):
    path = write_model(tmp_path / "m.onnx", model_from_text(MODEL))
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "opset imports: ai.onnx 18, local 1, com.microsoft 1" in out
    assert "[batch, 4]" in out
    assert "Block (local function)" in out
    assert "subgraphs: 4 (max depth 2)" in out
