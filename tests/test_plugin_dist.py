"""A third-party plugin distribution written only against ``rewriter.plugin`` and the docs
(tests/data/contoso_plugin_dist: an onnxscript decomposition with an optional input, a
callable kernel, a pass), pip-installed in a venv next to an unrelated one
(tests/data/acme_unrelated_dist: plugin ``acme``, ``com.acme::FusedSwish``): it passes the
contract test and rewrites an opset-18 model for onnxruntime, reference, openvino and
``opset:13``; and this suite's tests give the same results with the unrelated plugin
installed (they load only the plugins they name)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from rewriter import testing
from tests.conftest import Venv

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
CONTOSO = DATA / "contoso_plugin_dist"
UNRELATED = DATA / "acme_unrelated_dist"


@pytest.fixture(scope="module")
def dist_venv(tmp_path_factory) -> Venv:
    tmp = tmp_path_factory.mktemp("dist-venv")
    env = Venv.create(tmp / "venv")
    for source in (CONTOSO, UNRELATED):
        env.install(source, tmp)
    return env


def test_the_distribution_imports_only_the_plugin_api():
    source = (CONTOSO / "contoso_ops" / "__init__.py").read_text()
    imports = {line.split()[1] for line in source.splitlines()
               if line.startswith(("import ", "from "))}
    assert {i for i in imports if i.startswith("rewriter")} == {"rewriter.plugin"}


def test_both_distributions_are_discovered(dist_venv):
    proc = dist_venv.run_python(
        "import json; from rewriter.manager import load_plugins\n"
        "r = load_plugins().registry\n"
        "print(json.dumps({n: [i.distribution, i.version] for n, i in r.plugins.items()}))")
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    assert found["contoso"] == ["rewriter-contoso-ops", "0.1.0"]
    assert found["acme"] == ["acme-fused-swish", "1.0.0"]


def test_the_distribution_passes_the_contract_test(dist_venv):
    proc = dist_venv.run_python(
        "from rewriter.testing import check_plugin\n"
        "print('\\n'.join(check_plugin('contoso').checked))")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checked = proc.stdout.split()
    # the decomposition at each sample (bias given, left empty "", not listed) and the kernels
    assert len([c for c in checked if "BiasSoftplus@13-[" in c]) == 3, checked
    assert "contoso:kernel" in checked


def contoso_model(path: Path) -> Path:
    """Opset 18: t = BiasSoftplus(x, b); u = BiasSoftplus(t, "") (optional bias left
    empty); y = Passthrough(u)."""
    x, b = testing.value_info("x", "float", [2, 3]), testing.value_info("b", "float", [2, 3])
    y = testing.value_info("y", "float", [2, 3])
    nodes = [helper.make_node("BiasSoftplus", ["x", "b"], ["t"], domain="com.contoso"),
             helper.make_node("BiasSoftplus", ["t", ""], ["u"], domain="com.contoso"),
             helper.make_node("Passthrough", ["u"], ["y"], domain="com.contoso")]
    onnx.save(testing.make_model(nodes, [x, b], [y], opset=18), str(path))
    return path


# the remedy of each op by target: Python kernels run where onnxruntime runs the model
REMEDIES = {
    "onnxruntime": {"BiasSoftplus": "decomposition", "Passthrough": "kernel"},
    "reference": {"BiasSoftplus": "decomposition", "Passthrough": "kernel"},
    "openvino": {"BiasSoftplus": "decomposition", "Passthrough": "pass"},
    "opset:13": {"BiasSoftplus": "decomposition", "Passthrough": "pass"},
}


@pytest.mark.slow  # 27-80 s each (2 cores, idle or loaded): a CLI run that rewrites and verifies
@pytest.mark.parametrize("target", sorted(REMEDIES))
def test_the_distribution_rewrites_an_opset_18_model_for(dist_venv, tmp_path, target):
    model = contoso_model(tmp_path / "m.onnx")
    out = tmp_path / "out.onnx"
    proc = dist_venv.rewriter("rewrite", str(model), "-o", str(out), "--target", target,
                              "--json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    text = proc.stdout
    report = json.loads(text)
    report = report.get("data", report) if isinstance(report, dict) else report
    assert report["verdict"] == "verified", report.get("verdict_reason")
    applied = {a["op"].split("::")[1].split("(")[0]: (a["kind"], a["plugin"])
               for a in report["applied"] if a["op"].startswith("com.contoso::")}
    assert applied == {op: (kind, "contoso") for op, kind in REMEDIES[target].items()}
    rewritten = onnx.load(str(out))
    if target in ("openvino", "opset:13"):  # only standard ops: run it here, on every runtime
        assert {n.domain for n in rewritten.graph.node} <= {""}
        if target == "opset:13":
            assert {(o.domain, o.version) for o in rewritten.opset_import} == {("", 13)}
        rng = np.random.default_rng(0)
        feeds = {n: rng.standard_normal((2, 3)).astype(np.float32) for n in "xb"}
        t = np.logaddexp(0, feeds["x"].astype(np.float64) + feeds["b"])
        expected = [np.logaddexp(0, t).astype(np.float32)]  # the op's documented math
        got = testing.assert_rewrite_runs_everywhere(onnx.load(str(model)), rewritten, feeds,
                                                     expected)
        assert "onnxruntime" in got and "reference" in got


# tests of this suite that fail when an installed plugin autoloads: a -p file named acme
# (a plugin of that name is then already loaded), com.acme::FusedSwish offered twice
INDEPENDENT = [
    "tests/test_plugins.py::test_builtins_load_with_autoload_off",
    "tests/test_plugins.py::test_broken_decomposition_is_one_error_naming_plugin_and_op",
    "tests/test_rewrite.py::test_plugin_decomposition_from_p_file_rewrites_custom_op",
    "tests/test_rewrite.py::test_cleanup_removes_only_what_the_rewrite_left_unused",
]


@pytest.mark.slow  # 50-100 s: a pytest run in the venv
def test_the_suite_loads_only_what_it_names(dist_venv, tmp_path):
    # as a user runs it, the installed acme takes the name a test's -p file uses
    acme = tmp_path / "acme.py"
    acme.write_text("")
    proc = dist_venv.rewriter("plugins", "-p", str(acme))
    assert proc.returncode == 2 and "already loaded" in proc.stderr, proc.stderr
    proc = dist_venv.run_python("-m", "pytest", "-q", "-p", "no:cacheprovider", *INDEPENDENT,
                                cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "skipped" not in proc.stdout, proc.stdout[-500:]
