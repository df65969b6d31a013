"""Plugins: discovery through installed metadata, -p / no:, validation errors, provenance."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, save

from rewriter import hookspecs
from rewriter.cli import cli
from rewriter.errors import PluginError
from rewriter.manager import DISABLE_AUTOLOAD_ENV, load_plugins
from tests.conftest import Venv

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "examples" / "onnx-rewriter-example"
def _builtin_names() -> list[str]:
    """Entry points of our own distribution: the built-in plugins."""
    from importlib import metadata

    return sorted(
        ep.name for ep in metadata.entry_points(group="onnx_rewriter")
        if ep.dist is not None and ep.dist.metadata["Name"] == "onnx-graph-rewriter"
    )


BUILTINS = _builtin_names()
assert {"onnxruntime", "opset", "reference", "onnx-functions"} <= set(BUILTINS)


# -- helpers -----------------------------------------------------------------------------------


def _model(path: Path, nodes, opsets) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph(nodes, "g", [x], [y])
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()]
    )
    model.ir_version = 8
    save(model, str(path))
    return path


def npu_model(path: Path) -> Path:
    """Relu (on the NPU's whitelist) then Sigmoid (not on it), opset 13."""
    return _model(
        path,
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("Sigmoid", ["r"], ["y"], name="sig")],
        {"": 13},
    )


def swish2_model(path: Path) -> Path:
    return _model(
        path,
        [helper.make_node("Swish2", ["x"], ["y"], domain="com.example", name="sw")],
        {"": 17, "com.example": 1},
    )


def plugin_file(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text("from rewriter import hookimpl\n\n" + textwrap.dedent(body))
    return path


def run_cli(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=True)


def one_error_line(result, *needles: str) -> str:
    """The result failed with exit 2 and exactly one stderr line, with no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


# -- a real third-party distribution, installed in a venv ------------------------------------


@pytest.fixture(scope="session")
def example_venv(tmp_path_factory) -> Venv:
    """A venv that sees the installed onnx-graph-rewriter and has the example distribution
    pip-installed, so it is found through its entry-point metadata."""
    tmp = tmp_path_factory.mktemp("plugin-venv")
    env = Venv.create(tmp / "venv")
    env.install(EXAMPLE, tmp)
    return env


def _rows(proc) -> dict[str, dict]:
    assert proc.returncode == 0, proc.stderr
    return {row["name"]: row for row in json.loads(proc.stdout)["rows"]}


def test_example_distribution_is_discovered_in_a_venv(example_venv, tmp_path):
    rows = _rows(example_venv.rewriter("plugins", "--json"))
    example = rows["example"]
    assert example["distribution"] == "onnx-rewriter-example"
    assert example["version"] == "0.1.0"
    assert example["builtin"] is False
    assert example["registered"]["targets"] == ["example-npu"]
    assert [d.split(" ")[0] for d in example["registered"]["decompositions"]] == [
        "com.example::Swish2"
    ]
    for name in BUILTINS:
        assert rows[name]["distribution"] == "onnx-graph-rewriter"
        assert rows[name]["builtin"] is True

    # the NPU target: an op outside the whitelist is a finding, exit 1
    proc = example_venv.rewriter(
        "check", "--target", "example-npu", "--json", str(npu_model(tmp_path / "npu.onnx"))
    )
    assert proc.returncode == 1, proc.stderr
    (result,) = json.loads(proc.stdout)["targets"]
    assert result["target"] == "example-npu"
    (finding,) = result["findings"]
    assert (finding["op_type"], finding["reason"], finding["node_name"]) == (
        "Sigmoid", "no-kernel", "sig"
    )
    assert "no kernel for Sigmoid" in finding["detail"]

    # the decomposition is offered as a remedy where onnxruntime cannot run Swish2
    proc = example_venv.rewriter(
        "check", "--target", "onnxruntime", "--json", str(swish2_model(tmp_path / "sw.onnx"))
    )
    assert proc.returncode == 1, proc.stderr
    (result,) = json.loads(proc.stdout)["targets"]
    (group,) = result["groups"]
    assert group["op"].startswith("com.example::Swish2")
    assert "decomposition (example)" in group["remedies"]


def test_example_distribution_can_be_turned_off(example_venv, tmp_path):
    rows = _rows(example_venv.rewriter("plugins", "--json", **{DISABLE_AUTOLOAD_ENV: "1"}))
    assert "example" not in rows
    assert sorted(rows) == BUILTINS

    # naming its entry point with -p loads it anyway, with its distribution (as in pytest)
    rows = _rows(example_venv.rewriter("plugins", "-p", "example", "--json",
                                       **{DISABLE_AUTOLOAD_ENV: "1"}))
    assert rows["example"]["distribution"] == "onnx-rewriter-example"

    rows = _rows(example_venv.rewriter("-p", "no:example", "plugins", "--json"))
    assert "example" not in rows
    # autoload is on here: other third-party plugins the environment has may show up
    assert sorted(name for name, row in rows.items() if row["builtin"]) == BUILTINS

    model = str(npu_model(tmp_path / "npu.onnx"))
    proc = example_venv.rewriter("-p", "no:example", "check", "--target", "example-npu", model)
    assert proc.returncode == 2
    assert "unknown target 'example-npu'" in proc.stderr


def test_example_npu_target_in_process(tmp_path):
    """The example module's target, loaded with -p (no distribution)."""
    module = EXAMPLE / "onnx_rewriter_example" / "__init__.py"
    ok = _model(tmp_path / "ok.onnx", [helper.make_node("Relu", ["x"], ["y"])], {"": 13})
    result = run_cli("check", "-p", str(module), "--target", "example-npu", str(ok))
    assert result.exit_code == 0, result.output
    new = _model(tmp_path / "new.onnx", [helper.make_node("Relu", ["x"], ["y"])], {"": 14})
    result = run_cli("check", "-p", str(module), "--target", "example-npu", "--json", str(new))
    assert result.exit_code == 1, result.output
    findings = json.loads(result.stdout)["targets"][0]["findings"]
    reasons = {(f["reason"], f["op_type"]) for f in findings}
    assert reasons == {("opset-too-new", ""), ("opset-too-new", "Relu")}


# -- loading, in process -----------------------------------------------------------------------


def test_builtins_load_and_record_their_plugin():
    plugins = load_plugins()
    for name in BUILTINS:
        info = plugins.registry.plugins[name]
        assert info.builtin and info.distribution == "onnx-graph-rewriter"
        if name in plugins.registry.targets:
            assert plugins.registry.targets[name].plugin == name


def test_builtins_load_with_autoload_off(monkeypatch):
    monkeypatch.setenv(DISABLE_AUTOLOAD_ENV, "1")
    assert sorted(load_plugins().registry.plugins) == BUILTINS
    registry = load_plugins(autoload=False).registry
    assert {"onnxruntime", "opset", "reference"} <= set(registry.targets)
    assert {registry.targets[t].plugin for t in registry.targets} <= set(BUILTINS)


def test_every_registry_entry_records_its_plugin(tmp_path):
    path = plugin_file(tmp_path, "everything", """
        from onnx import helper

        def factory(argument, options):
            raise AssertionError("not called")

        @hookimpl
        def register_targets(registry):
            registry.add("acme-npu", factory, description="Acme NPU")

        @hookimpl
        def register_decompositions(registry):
            fn = helper.make_function("com.acme", "Foo", ["X"], ["Y"],
                                      [helper.make_node("Relu", ["X"], ["Y"])],
                                      [helper.make_opsetid("", 13)])
            registry.add("com.acme", "Foo", fn, opsets=(13, None))
            registry.add("ai.onnx", "Gelu", "acme.decomp:gelu", opsets=(20, None))

        @hookimpl
        def register_kernels(registry):
            registry.add("com.acme", "Bar", "acme.kernels:bar")

        @hookimpl
        def register_passes(registry):
            registry.add("acme-fuse", lambda: None, phase="cleanup")
    """)
    registry = load_plugins([str(path)], autoload=False).registry
    assert registry.plugins["everything"].distribution is None
    assert registry.targets["acme-npu"].plugin == "everything"
    assert {(d.domain, d.op_type, d.plugin) for d in registry.decompositions
            if d.plugin == "everything"} == {
        ("com.acme", "Foo", "everything"), ("", "Gelu", "everything"),
    }
    assert registry.kernels[("com.acme", "Bar")].plugin == "everything"
    assert registry.passes["acme-fuse"].plugin == "everything"
    entries = [*registry.targets.values(), *registry.decompositions,
               *registry.kernels.values(), *registry.passes.values()]
    assert all(e.plugin in registry.plugins for e in entries)

    # remedies: a custom-domain decomposition's range is of ai.onnx opsets, not the op's
    assert registry.remedies_for("com.acme", "Foo", 1) == ["decomposition (everything)"]
    assert registry.remedies_for("com.acme", "Foo", 1, onnx_opset=12) == []
    assert "decomposition (everything)" in registry.remedies_for("ai.onnx", "Gelu", 20)
    assert registry.remedies_for("", "Gelu", 19) == []
    assert registry.remedies_for("com.acme", "Bar", 1) == ["kernel (everything)"]

    result = run_cli("plugins", "-p", str(path), "--json")
    assert result.exit_code == 0, result.output
    row = {r["name"]: r for r in json.loads(result.stdout)["rows"]}["everything"]
    assert row["distribution"] is None and row["version"] is None and not row["builtin"]
    assert row["registered"]["targets"] == ["acme-npu"]
    assert row["registered"]["kernels"] == ["com.acme::Bar"]
    assert row["registered"]["passes"] == ["acme-fuse (cleanup)"]
    assert len(row["registered"]["decompositions"]) == 2


def test_dash_p_adds_a_plugin_for_one_run(tmp_path):
    path = plugin_file(tmp_path, "acme", """
        @hookimpl
        def register_targets(registry):
            registry.add("acme-npu", lambda argument, options: None)
    """)
    result = run_cli("plugins", "-p", str(path), "--json")
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.stdout)["rows"]}
    assert rows["acme"]["distribution"] is None
    assert rows["acme"]["registered"]["targets"] == ["acme-npu"]
    # -p also works before the command; and without it the plugin is gone
    result = run_cli("-p", str(path), "plugins", "--json")
    assert "acme" in {r["name"] for r in json.loads(result.stdout)["rows"]}
    result = run_cli("plugins", "--json")
    assert "acme" not in {r["name"] for r in json.loads(result.stdout)["rows"]}


def test_dash_p_package_init_is_named_after_its_folder():
    module = EXAMPLE / "onnx_rewriter_example" / "__init__.py"
    assert "onnx_rewriter_example" in load_plugins([str(module)], autoload=False).registry.plugins


def test_no_blocks_a_builtin(tmp_path):
    result = run_cli("-p", "no:opset", "plugins", "--json")
    assert result.exit_code == 0, result.output
    assert sorted(r["name"] for r in json.loads(result.stdout)["rows"]) == [
        b for b in BUILTINS if b != "opset"
    ]
    model = npu_model(tmp_path / "m.onnx")
    assert run_cli("check", "--target", "opset:13", str(model)).exit_code == 0
    result = run_cli("check", "-p", "no:opset", "--target", "opset:13", str(model))
    one_error_line(result, "unknown target 'opset:13'")


def test_no_blocks_a_dash_p_plugin_before_importing_it(tmp_path):
    path = plugin_file(tmp_path, "explodes", "raise RuntimeError('imported')\n")
    plugins = load_plugins([str(path), "no:explodes"], autoload=False)
    assert "explodes" not in plugins.registry.plugins


def test_load_order_is_builtins_then_by_name(tmp_path):
    body = """
        @hookimpl
        def register_targets(registry):
            registry.add({target!r}, lambda argument, options: None)
    """
    zeta = plugin_file(tmp_path, "zeta", body.format(target="zeta-npu"))
    alpha = plugin_file(tmp_path, "alpha", body.format(target="alpha-npu"))
    for order in ([zeta, alpha], [alpha, zeta]):
        plugins = load_plugins([str(p) for p in order], autoload=False)
        added = ("alpha-npu", "zeta-npu")
        builtin_targets = [t for t in plugins.registry.targets if t not in added]
        assert list(plugins.registry.targets) == [*builtin_targets, "alpha-npu", "zeta-npu"]

    # two plugins claiming one target: the later by name is blamed, whatever the -p order
    clash_a = plugin_file(tmp_path, "a_clash", body.format(target="npu"))
    clash_b = plugin_file(tmp_path, "b_clash", body.format(target="npu"))
    for order in ([clash_a, clash_b], [clash_b, clash_a]):
        with pytest.raises(PluginError) as err:
            load_plugins([str(p) for p in order], autoload=False)
        assert err.value.plugin == "b_clash"
        assert "already registered by plugin 'a_clash'" in str(err.value)

    # a plugin sorting before a built-in cannot take the built-in's name
    squatter = plugin_file(tmp_path, "aaa", body.format(target="opset"))
    with pytest.raises(PluginError) as err:
        load_plugins([str(squatter)], autoload=False)
    assert err.value.plugin == "aaa"
    assert "already registered by plugin 'opset'" in str(err.value)


class _FakeDist:
    def __init__(self, name: str, version: str) -> None:
        self.metadata = {"Name": name}
        self.version = version


class _FakeEntryPoint:
    group = "onnx_rewriter"

    def __init__(self, name: str, value: str, dist: _FakeDist) -> None:
        self.name, self.value, self.dist = name, value, dist

    def load(self):
        import importlib

        return importlib.import_module(self.value)


def test_entry_point_name_clash_between_distributions(tmp_path, monkeypatch, autoload):
    from rewriter import manager

    for module in ("clashdemo_one_plugin", "clashdemo_two_plugin"):
        (tmp_path / f"{module}.py").write_text(
            "from rewriter import hookimpl\n\n"
            "@hookimpl\n"
            "def register_targets(registry):\n"
            f"    registry.add({module.replace('_', '-')!r}, lambda a, o: None)\n"
        )
    monkeypatch.syspath_prepend(str(tmp_path))
    real = manager.metadata.entry_points
    one = _FakeEntryPoint("clashdemo", "clashdemo_one_plugin", _FakeDist("acme-one", "1.0"))

    def fake(extra):
        return lambda group: [*real(group=group), *extra]

    # the same distribution listed twice (on sys.path twice) loads once
    monkeypatch.setattr(manager.metadata, "entry_points", fake([one, one]))
    plugins = load_plugins()
    assert plugins.registry.plugins["clashdemo"].distribution == "acme-one"
    assert plugins.registry.targets["clashdemo-one-plugin"].plugin == "clashdemo"

    # two distributions using one plugin name: an error, not one silently shadowing the other
    two = _FakeEntryPoint("clashdemo", "clashdemo_two_plugin", _FakeDist("acme-two", "2.0"))
    monkeypatch.setattr(manager.metadata, "entry_points", fake([one, two]))
    with pytest.raises(PluginError) as err:
        load_plugins()
    assert "already loaded (from acme-one 1.0)" in str(err.value)
    assert "(from acme-two 2.0)" in str(err.value)
    # -p no:clashdemo blocks both
    assert "clashdemo" not in load_plugins(["no:clashdemo"]).registry.plugins


def test_failed_dash_p_import_leaves_no_module_behind(tmp_path):
    path = plugin_file(tmp_path, "half_imported", "x = 1\nraise ImportError('acme_sdk')\n")
    with pytest.raises(PluginError):
        load_plugins([str(path)], autoload=False)
    assert "onnx_rewriter_local_half_imported" not in sys.modules


# -- one readable line per broken plugin -------------------------------------------------------

BROKEN = {
    "import_error": ("raise ImportError('no module named acme_sdk')\n", "acme_sdk"),
    "invalid_name": ("""
        @hookimpl
        def register_targets(registry):
            registry.add("Acme NPU", lambda argument, options: None)
    """, "invalid target name 'Acme NPU'"),
    "duplicate_target": ("""
        @hookimpl
        def register_targets(registry):
            registry.add("onnxruntime", lambda argument, options: None)
    """, "target 'onnxruntime' is already registered by plugin 'onnxruntime'"),
    "non_callable": ("""
        @hookimpl
        def register_targets(registry):
            registry.add("acme-npu", "acme:Target")
    """, "is not callable"),
    "bad_kernel_ref": ("""
        @hookimpl
        def register_kernels(registry):
            registry.add("com.acme", "Foo", "acme.kernels.foo")
    """, "'acme.kernels.foo' is not a 'module:attr'"),
    "bad_decomposition_ref": ("""
        @hookimpl
        def register_decompositions(registry):
            registry.add("com.acme", "Foo", "acme.decompositions")
    """, "is not 'module:attr'"),
    "bad_builder": ("""
        @hookimpl
        def register_decompositions(registry):
            registry.add("com.acme", "Foo", 42)
    """, "is not a FunctionProto"),
    "bad_range": ("""
        @hookimpl
        def register_decompositions(registry):
            registry.add("com.acme", "Foo", "acme:foo", opsets=(13, 12))
    """, "invalid opset range (13, 12)"),
    "overlapping": ("""
        @hookimpl
        def register_decompositions(registry):
            registry.add("com.acme", "Foo", "acme:foo_old", opsets=(1, 15))
            registry.add("com.acme", "Foo", "acme:foo_new", opsets=(13, None))
    """, "overlaps opsets (1, 15) this plugin already registered"),
    "misspelled_hook": ("""
        @hookimpl
        def register_target(registry):
            pass
    """, "'register_target' is not a hook (did you mean 'register_targets'?)"),
    "wrong_argument": ("""
        @hookimpl
        def register_targets(reg):
            pass
    """, "argument(s) reg not passed by the hook register_targets(registry)"),
    "wrong_pipeline_argument": ("""
        @hookimpl
        def modify_pipeline(passes, model):
            pass
    """, "modify_pipeline(passes, targets, config)"),
    "wrapper": ("""
        @hookimpl(wrapper=True)
        def register_passes(registry):
            yield
    """, "cannot be a wrapper"),
    "hook_raises": ("""
        @hookimpl
        def register_passes(registry):
            1 / 0
    """, "register_passes failed: ZeroDivisionError"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_plugin_is_one_line(tmp_path, name):
    body, expected = BROKEN[name]
    path = plugin_file(tmp_path, name, body)
    line = one_error_line(run_cli("plugins", "-p", str(path)), f"plugin {name!r}", expected)
    assert line.startswith("error: ")
    assert "-p (this run only)" in line


# -- one readable error per broken decomposition, through `rewrite` ---------------------------

# com.acme::Op(x, b) = x + b; its kernel (the oracle that runs the original) when asked for
DECOMPOSITION_HEAD = """
from onnx import parser

from rewriter.plugin import kernel


def body(text):
    return parser.parse_function(
        '<domain: "com.acme", opset_import: ["": 18]>\\n' + text)


@kernel(signatures=["float, float -> float"])
def op(x, b):
    return (x + b).astype(x.dtype)


def raises(ctx):
    raise KeyError("boom")
"""

BROKEN_DECOMPOSITIONS = {
    # case: (decomposition, with the kernel, exit code, what the error says)
    "wrong_arity": ("body('Op (x) => (y) { y = Relu (x) }')", False, 1,
                    "its body takes 1 input(s) (x)"),
    "missing_output": ("body('Op (x, b) => (y) { z = Add (x, b) }')", True, 2,
                       "its body never computes its output 0 ('y')"),
    "extra_outputs": ("body('Op (x, b) => (y, z) { y = Add (x, b)\\n z = Neg (x) }')", True,
                      2, "its body gives 2 outputs (y, z)"),
    "builder_exception": ("raises", True, 2, "its builder raised KeyError: 'boom'"),
}


def one_error(result, code: int, *needles: str) -> str:
    """Exit ``code``, one error on stderr (a line ``error: ...``, its detail indented below
    it when the console splits a long one), no traceback; the error's text (its lines
    joined) holds every needle."""
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert lines and lines[0].startswith("error: "), result.stderr
    assert all(line.startswith(" ") for line in lines[1:]), result.stderr
    assert "Traceback" not in result.output
    text = " ".join(line.strip() for line in lines)
    for needle in needles:
        assert needle in text, text
    return text


def acme_op_model(path: Path) -> Path:
    """y = com.acme::Op(x, b), opset 18."""
    x, b, y = (helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in "xby")
    node = helper.make_node("Op", ["x", "b"], ["y"], domain="com.acme", name="op1")
    model = helper.make_model(helper.make_graph([node], "g", [x, b], [y]), opset_imports=[
        helper.make_opsetid("", 18), helper.make_opsetid("com.acme", 1)])
    model.ir_version = 10
    save(model, str(path))
    return path


def broken_decomposition(tmp_path: Path, case: str, builder: str, with_kernel: bool) -> Path:
    kernels = ('\n@hookimpl\ndef register_kernels(registry):\n'
               '    registry.add("com.acme", "Op", op)\n') if with_kernel else ""
    return plugin_file(tmp_path, f"acme_{case}", DECOMPOSITION_HEAD + f"""

@hookimpl
def register_decompositions(registry):
    registry.add("com.acme", "Op", {builder}, description="acme:{case}")
""" + kernels)


@pytest.mark.parametrize("case", sorted(BROKEN_DECOMPOSITIONS))
def test_broken_decomposition_is_one_error_naming_plugin_and_op(tmp_path, case):
    builder, with_kernel, code, expected = BROKEN_DECOMPOSITIONS[case]
    path = broken_decomposition(tmp_path, case, builder, with_kernel)
    model = acme_op_model(tmp_path / "m.onnx")
    out = tmp_path / "out.onnx"
    result = run_cli("rewrite", "-p", str(path), str(model), "-o", str(out),
                     "--target", "onnxruntime")
    one_error(result, code, f"plugin 'acme_{case}'", "com.acme::Op", expected)
    assert not out.exists()


def test_broken_plugin_import_in_rewrite_is_one_error(tmp_path):
    path = plugin_file(tmp_path, "acme_sdk_missing", "import acme_sdk_xyz\n")
    model = acme_op_model(tmp_path / "m.onnx")
    out = tmp_path / "out.onnx"
    result = run_cli("rewrite", "-p", str(path), str(model), "-o", str(out),
                     "--target", "onnxruntime")
    one_error(result, 2, "plugin 'acme_sdk_missing'", "ModuleNotFoundError", "acme_sdk_xyz")
    assert not out.exists()


def test_wrong_math_is_a_mismatch_naming_plugin_and_rule(tmp_path):
    """A decomposition computing x + x where the op (and its kernel, the oracle) computes
    x + b: the verdict is mismatch, names the plugin and the rule, nothing is written."""
    path = broken_decomposition(tmp_path, "wrong_math",
                                "body('Op (x, b) => (y) { y = Add (x, x) }')", True)
    model = acme_op_model(tmp_path / "m.onnx")
    out = tmp_path / "out.onnx"
    args = ["rewrite", "-p", str(path), str(model), "-o", str(out), "--target", "onnxruntime"]
    result = run_cli(*args)
    assert result.exit_code == 1, result.output
    verdict = " ".join(result.stdout.split("mismatch: ", 1)[1].split())  # unwrapped
    assert "rule 'acme:wrong_math' of plugin 'acme_wrong_math'" in verdict
    assert "(com.acme::Op)" in verdict
    assert not out.exists()
    result = run_cli(*args, "--json")
    assert result.exit_code == 1
    assert "plugin 'acme_wrong_math'" in result.stdout
    assert not out.exists()


def test_dash_p_on_an_installed_plugin_is_one_error(tmp_path):
    """``-p MODULE`` of a plugin already loaded under its entry-point name: one line saying
    so, not pluggy's ValueError."""
    result = run_cli("plugins", "-p", "rewriter_plugins.onnx_standard")
    text = one_error(result, 2, "plugin 'rewriter_plugins.onnx_standard'",
                     "already loaded as plugin 'onnx-standard'")
    assert "ValueError" not in text
    # the entry-point name is fine (it is loaded once), twice as well
    assert run_cli("plugins", "-p", "onnx-standard", "-p", "onnx-standard").exit_code == 0


def test_several_plugins_may_offer_the_same_op(tmp_path):
    first = plugin_file(tmp_path, "first", """
        @hookimpl
        def register_decompositions(registry):
            registry.add("com.acme", "Foo", "acme:foo", opsets=(13, None))
    """)
    second = plugin_file(tmp_path, "second", """
        @hookimpl
        def register_decompositions(registry):
            registry.add("com.acme", "Foo", "other:foo", opsets=(17, 18))
    """)
    registry = load_plugins([str(second), str(first)], autoload=False).registry
    offered = sorted(d.plugin for d in registry.decompositions if d.op_type == "Foo")
    assert offered == ["first", "second"]
    assert registry.remedies_for("com.acme", "Foo", 1, onnx_opset=17) == [
        "decomposition (first)", "decomposition (second)"
    ]


def test_same_plugin_name_twice(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one = plugin_file(tmp_path / "a", "acme", "")
    two = plugin_file(tmp_path / "b", "acme", "")
    one_error_line(run_cli("plugins", "-p", str(one), "-p", str(two)),
                   "plugin 'acme'", "already loaded")
    one_error_line(run_cli("plugins", "-p", str(tmp_path / "missing.py")),
                   "plugin 'missing'", "not found")
    one_error_line(run_cli("plugins", "-p", "no_such_module_xyz"),
                   "plugin 'no_such_module_xyz'", "ModuleNotFoundError")


def test_failing_target_factory_names_its_plugin(tmp_path):
    path = plugin_file(tmp_path, "factory_fails", """
        @hookimpl
        def register_targets(registry):
            registry.add("acme-npu", lambda argument, options: 1 / 0)
    """)
    model = npu_model(tmp_path / "m.onnx")
    one_error_line(run_cli("check", "-p", str(path), "--target", "acme-npu", str(model)),
                   "plugin 'factory_fails'", "ZeroDivisionError")


def test_debug_shows_a_traceback(tmp_path):
    path = plugin_file(tmp_path, "import_error", "raise ImportError('no module acme_sdk')\n")
    base = [sys.executable, "-m", "rewriter.cli", "plugins", "-p", str(path)]
    quiet = subprocess.run(base, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert quiet.returncode == 2
    assert quiet.stderr.strip().splitlines() == [
        "error: plugin 'import_error' (from -p (this run only)): failed to import "
        f"{str(path)!r}: ImportError: no module acme_sdk"
    ]
    loud = subprocess.run([*base, "--debug"], capture_output=True, text=True, cwd=tmp_path,
                          timeout=120)
    assert loud.returncode != 0
    assert "Traceback (most recent call last)" in loud.stderr
    assert "ImportError: no module acme_sdk" in loud.stderr


def test_modify_pipeline_is_called_with_the_plugin(tmp_path):
    """The engine calls the hook once per rewrite with the passes, the targets and the
    options: a plugin that drops the opset conversion leaves an opset-18 model unfixable
    for opset:13, which the conversion otherwise fixes."""
    from rewriter import rewrite
    from rewriter.errors import UnfixableError

    path = plugin_file(tmp_path, "dropconv", """
        seen = []

        @hookimpl
        def modify_pipeline(passes, targets, config):
            seen.append(([p.name for p in passes], [t.name for t in targets], config["partial"]))
            passes[:] = [p for p in passes if p.name != "opset-conversion"]
    """)
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph([node], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    assert rewrite(model, ["opset:13"], confirm=False, verify=False).report.applied
    plugins = load_plugins([str(path)])
    with pytest.raises(UnfixableError):
        rewrite(model, ["opset:13"], plugins=plugins, confirm=False, verify=False)
    seen = plugins.manager.get_plugin("dropconv").seen
    assert seen and "opset-conversion" in seen[0][0] and seen[0][1] == ["opset:13"]
    assert seen[0][2] is False


# -- every hook is documented and tested -------------------------------------------------------


def test_every_hookspec_has_a_docstring_and_a_test():
    specs = [
        name for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
        if hasattr(fn, f"{hookspecs.PROJECT}_spec")
    ]
    assert specs, "no hookspecs found"
    tests = Path(__file__).parent
    sources = {p: p.read_text() for p in tests.rglob("*.py")}
    for name in specs:
        doc = inspect.getdoc(getattr(hookspecs, name)) or ""
        assert len(doc) > 20, f"hookspec {name} has no docstring"
        mentions = [p.name for p, text in sources.items() if name in text]
        assert mentions, f"no test mentions hookspec {name}"


# -- --explain: every plugin's reason per finding, grouped ------------------------------------

EXPLAIN_FIRST = """
from rewriter.plugin import Declined


def needs_constant_axis(ctx):
    raise Declined("axis must be a constant")


@hookimpl
def register_decompositions(registry):
    registry.add("com.acme", "Mystery", needs_constant_axis, description="first:axis")
"""

EXPLAIN_SECOND = """
from rewriter.plugin import Declined


def only_float(ctx):
    raise Declined("only float inputs")


@hookimpl
def register_decompositions(registry):
    registry.add("com.acme", "Mystery", only_float, description="second:float")
"""


def test_explain_gives_every_plugins_reason_once_per_group(tmp_path):
    """40 alike com.acme::Mystery nodes that two plugins decline for their own reasons: one
    group (×40) with both reasons, in a few lines; nothing written."""
    first = plugin_file(tmp_path, "first", EXPLAIN_FIRST)
    second = plugin_file(tmp_path, "second", EXPLAIN_SECOND)
    nodes = [helper.make_node("Mystery", ["x" if i == 0 else f"h{i - 1}"],
                              ["y" if i == 39 else f"h{i}"], domain="com.acme", name=f"m{i}")
             for i in range(40)]
    model = _model(tmp_path / "m.onnx", nodes, {"": 18, "com.acme": 1})
    out = tmp_path / "out.onnx"
    args = ["rewrite", "-p", str(first), "-p", str(second), str(model), "-o", str(out),
            "--target", "onnxruntime", "--explain"]
    result = run_cli(*args, "--json")
    assert result.exit_code == 1, result.output
    (group,) = json.loads(result.stdout)["explain"]
    assert group["count"] == 40 and len(group["paths"]) == 40
    said = {(c["plugin"], c["why"]) for c in group["candidates"]}
    assert {("first", "axis must be a constant"), ("second", "only float inputs")} <= said
    assert not out.exists()

    result = run_cli(*args)
    assert result.exit_code == 1
    text = result.stdout
    assert text.count("axis must be a constant") == 1, text
    assert text.count("only float inputs") == 1, text
    assert "×40" in text
    assert len(text.splitlines()) <= 25, text  # 40 ungrouped entries: 200 lines
    assert not out.exists()


def test_explain_of_the_example_export_is_short(tmp_path):
    """examples/failing_export.onnx: each finding once, with its chosen remedy and what
    was not tried, in a screenful."""
    out = tmp_path / "out.onnx"
    result = run_cli("rewrite", str(ROOT / "examples" / "failing_export.onnx"), "-o", str(out),
                     "--explain", "--dry-run")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    explained = [line for line in lines if line.startswith("explain ")]
    assert len(explained) == 3, result.stdout
    assert sum("chosen:" in line for line in lines) == 3
    assert len(lines) <= 30, result.stdout
    assert not out.exists()


def test_example_plugins_import_only_the_plugin_api():
    """The plugins of docs/examples and tests/data use nothing of rewriter but its plugin
    API (a user's script, such as export_and_compare.py, may use the library)."""
    import ast

    sources = [EXAMPLE / "onnx_rewriter_example" / "__init__.py",
               ROOT / "docs" / "examples" / "torch-custom-op" / "acme_rmsnorm.py",
               *sorted((ROOT / "tests" / "data").glob("*_dist/*/__init__.py"))]
    assert len(sources) >= 4
    for path in sources:
        used = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                used.add(node.module)
            elif isinstance(node, ast.Import):
                used.update(a.name for a in node.names)
        assert {m for m in used if m.split(".")[0] == "rewriter"} == {"rewriter.plugin"}, path


def test_plugins_doc_explains_every_registry_parameter():
    from rewriter.registry import (
        DecompositionRegistry,
        KernelRegistry,
        PassRegistry,
        TargetRegistry,
    )

    doc = (ROOT / "docs" / "plugins.md").read_text()
    methods = [DecompositionRegistry.add, KernelRegistry.add, KernelRegistry.add_native,
               PassRegistry.add, TargetRegistry.add]
    for method in methods:
        for name in list(inspect.signature(method).parameters)[1:]:
            assert f"`{name}`" in doc or f"{name}=" in doc, (method.__qualname__, name)
    # it leads with a decomposition in onnxscript, then kernels, then passes
    order = [doc.index(h) for h in ("onnxscript", "## 2. Kernels", "## 3. Passes")]
    assert order == sorted(order)
    design = (ROOT / "docs" / "design-notes.md").read_text()
    opening = design.split("\n## ", 2)[1]
    assert opening.startswith("The stages and where each lives")
    for package in sorted(p.name for p in (ROOT / "rewriter").iterdir()
                          if (p / "__init__.py").is_file()):
        assert f"`rewriter/{package}/`" in opening, package
