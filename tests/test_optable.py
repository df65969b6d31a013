"""``onnx-rewriter ops``: the operator table comes from the registries, and the copy in
``docs/operators.md`` is the current output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from rewriter.report.optable import operator_rows, to_markdown

DOCS = Path(__file__).resolve().parents[1] / "docs" / "operators.md"
PLUGIN = '''
from onnx import helper
from rewriter import hookimpl

@hookimpl
def register_decompositions(registry):
    body = helper.make_function("com.acme", "f", ["x"], ["y"],
                                [helper.make_node("Relu", ["x"], ["y"])],
                                [helper.make_opsetid("", 14)])
    registry.add("com.acme", "Thing", body, opsets=(14, None), dtypes=["float", "double"],
                 exact=False, description="acme:Thing")

@hookimpl
def register_kernels(registry):
    registry.add("com.acme", "Thing", "rewriter_custom_ops.fused_swish:kernel")
'''


def _ops(*args, env_extra=None):
    env = dict(os.environ, ONNX_REWRITER_DISABLE_PLUGIN_AUTOLOAD="1", **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "rewriter.cli", "ops", *args],
                          capture_output=True, text=True, env=env, timeout=120)


def test_docs_table_is_current():
    done = _ops("--markdown")
    assert done.returncode == 0, done.stderr
    assert DOCS.read_text() == done.stdout, (
        "docs/operators.md is stale: regenerate with "
        "`ONNX_REWRITER_DISABLE_PLUGIN_AUTOLOAD=1 onnx-rewriter ops --markdown > docs/operators.md`"
    )


def test_rows_combine_decompositions_and_kernels(tmp_path):
    plugin = tmp_path / "acme_table.py"
    plugin.write_text(PLUGIN)
    done = _ops("--json", "-p", str(plugin))
    assert done.returncode == 0, done.stderr
    rows = {(r["domain"], r["op_type"]): r for r in json.loads(done.stdout)["rows"]}
    thing = rows[("com.acme", "Thing")]
    assert thing["remedy"] == "decomposition + kernel"
    assert thing["opsets"] == ["14+"]
    assert thing["dtypes"][:2] == ["float", "double"]  # then the kernel's input types
    assert thing["accuracy"] == "approximate / exact"
    assert any("acme_table" in d for d in thing["decompositions"])
    assert thing["oracle"] == "none"  # the registration declares none


def test_every_registered_op_is_a_row(plugins):
    rows = operator_rows(plugins.registry)
    keys = {(r.domain, r.op_type) for r in rows}
    registry = plugins.registry
    expected = {(d.domain, d.op_type) for d in registry.decompositions}
    expected |= set(registry.kernels) | set(registry.natives)
    assert keys == expected
    text = to_markdown(rows)
    for _domain, op_type in expected:
        assert f"| {op_type} |" in text


def test_every_built_in_op_names_its_oracle(plugins):
    """The oracle column: what checks each decomposition (tests/test_oracles.py runs it);
    an op with kernels only is its own oracle."""
    rows = {(r.domain, r.op_type): r for r in operator_rows(plugins.registry)}
    assert not [key for key, r in rows.items() if r.oracle == "none"]
    assert rows[("com.microsoft", "FastGelu")].oracle == "onnxruntime kernel, numpy"
    assert rows[("com.microsoft", "NhwcConv")].oracle == "plugin kernel"
    assert rows[("", "Celu")].oracle == "ONNX test cases"
    assert rows[("", "BitCast")].oracle == "reference evaluator"
    assert rows[("ai.onnx.contrib", "StringUpper")].oracle == (
        "the extensions native kernel itself")
    assert rows[("org.openvinotoolkit", "ExperimentalDetectronDetectionOutput")].oracle == (
        "the kernel itself")
    assert rows[("org.openvinotoolkit", "DeformableConv2D")].oracle == "plugin kernel"


def test_every_remedy_names_the_module_and_function_of_its_code():
    """``ops --json``: a contributor goes from an op's name to its code in one step."""
    import importlib
    import json

    done = _ops("--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["rows"]
    assert rows and all(r["code"] for r in rows), [r["op_type"] for r in rows if not r["code"]]
    for r in rows:
        for where in r["code"]:
            module, _, name = where.partition(":")
            obj = importlib.import_module(module)
            for part in name.split(" (")[0].split("."):
                obj = getattr(obj, part)  # the named function exists there
            assert callable(obj), where
    natives = [r for r in rows if any("native" in k for k in r["kernels"])]
    assert natives and all("rewriter_plugins.ortx_native:register_kernels" in r["code"]
                           for r in natives if r["domain"] == "com.microsoft.extensions")
