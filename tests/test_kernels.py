"""Custom kernels end to end: a kernel remedy retargets the node to an onnxruntime-extensions
Python op (or to a native library op), records what the model needs in its metadata, and
``rewriter.session`` / ``onnx-rewriter run`` run the result with real onnxruntime; the
reference evaluator (with the same kernels as OpRun classes) runs the original.

The proprietary op is a made-up com.acme::FusedSwish, whose kernel a plugin file loaded with
``-p`` registers (it reuses the example kernel rewriter_custom_ops.fused_swish).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from rewriter.api import check, rewrite
from rewriter.cli import main
from rewriter.comparison.runtime import KernelRunError, session
from rewriter.errors import PluginError, UnfixableError
from rewriter.manager import load_plugins
from rewriter.plan.kernels import (
    CONTRIB_DOMAIN,
    METADATA_KEY,
    KernelError,
    KernelUse,
    Signature,
    kernel,
    native_only,
    op_name,
    read_needs,
    reference_ops,
    register_onnxruntime,
)
from tests.conftest import (
    FUSED_SWISH_SOURCE,
    NO_KERNEL,
    model_from_text,
    onnxruntime_refusal,
    write_model,
)
from tests.conftest import make_model as runtime_model
from tests.test_rewrite import CONTAINERS, all_nodes, make_model

ACME_OP = op_name("com.acme", "FusedSwish", Signature.parse("float -> float"),
                  "rewriter_custom_ops.fused_swish:kernel")
FAST = {"verify": False, "confirm": False}  # the tests compare outputs themselves

ACME_KERNEL = '''
from rewriter import hookimpl


@hookimpl
def register_kernels(registry):
    registry.add("com.acme", "FusedSwish", "rewriter_custom_ops.fused_swish:kernel",
                 description="acme FusedSwish (Python)")
'''

ACME_BOTH = ACME_KERNEL + '''

from onnx import parser

''' + FUSED_SWISH_SOURCE + '''

@hookimpl
def register_decompositions(registry):
    registry.add("com.acme", "FusedSwish", FUSED_SWISH, description="acme:FusedSwish")
'''


def swish(x, alpha):
    """Independent of the kernel: float64 math."""
    x64 = x.astype(np.float64)
    return (x64 / (1 + np.exp(-alpha * x64))).astype(x.dtype)


def write_plugin(tmp_path_factory, name: str, text: str) -> Path:
    path = tmp_path_factory.mktemp("plugins") / f"{name}.py"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def acme_file(tmp_path_factory) -> Path:
    return write_plugin(tmp_path_factory, "acme_kernels", ACME_KERNEL)


@pytest.fixture(scope="module")
def acme(acme_file):
    return load_plugins([str(acme_file)], autoload=False)


@pytest.fixture(scope="module")
def acme_both(tmp_path_factory):
    return load_plugins([str(write_plugin(tmp_path_factory, "acme_both", ACME_BOTH))],
                        autoload=False)


def acme_model(n: int | str = "N", alpha: float = 1.5) -> onnx.ModelProto:
    return model_from_text(textwrap.dedent(f"""
        <ir_version: 10, opset_import: ["" : 18, "com.acme" : 1]>
        g (float[{n}] x) => (float[{n}] y) {{
            t = Relu (x)
            s = com.acme.FusedSwish <alpha: float = {alpha}> (x)
            y = Add (s, t)
        }}"""))


X = np.array([-3, -1.5, -0.0, 0, 0.25, 2, 40, -40], dtype=np.float32)


def rw(model, targets, **kwargs):
    """rewrite() as (model, report)."""
    result = rewrite(model, targets, **kwargs)
    return result.model, result.report


def run_cli(args, capsys) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def reference_run(model, registry, feeds):
    """The oracle: the reference evaluator on the original, with the registered kernels."""
    return ReferenceEvaluator(model, new_ops=reference_ops(model, registry)).run(None, feeds)


# -- the kernel remedy ---------------------------------------------------------------------


@pytest.mark.parametrize("container", sorted(CONTAINERS))
def test_kernel_remedy_runs_in_graphs_subgraphs_and_functions(container, acme):
    model, feeds = make_model(container, "acme", alpha=0.75)
    rewritten, report = rw(model, ["onnxruntime"], plugins=acme, **FAST)
    assert report.ok, report.as_dict()
    kinds = {(k, p, op) for (k, p, _r, op) in report.applied}
    assert kinds == {("kernel", "acme_kernels", "com.acme::FusedSwish(1)")}
    retargeted = [n for n in all_nodes(rewritten) if n.domain == CONTRIB_DOMAIN]
    assert [(n.op_type, n.name) for n in retargeted] == [(ACME_OP, "orig_bad")]
    assert {p.key: p.value for p in retargeted[0].metadata_props} == {
        "rewriter.plugin": "acme_kernels", "rewriter.op": "com.acme::FusedSwish",
        "rewriter.rule": "python rewriter_custom_ops.fused_swish:kernel"}
    # float attributes travel as exact text (onnxruntime-extensions prints floats with 6
    # significant digits otherwise)
    assert {a.name: a.s for a in retargeted[0].attribute} == {"alpha": b"0.75"}
    needs = json.loads({p.key: p.value for p in rewritten.metadata_props}[METADATA_KEY])
    assert needs["python"][ACME_OP] == {
        "op": "com.acme::FusedSwish", "kernel": "rewriter_custom_ops.fused_swish:kernel",
        "plugin": "acme_kernels", "distribution": None, "inputs": ["float"],
        "outputs": ["float"]}
    assert report.kernels == needs
    got = session(rewritten, plugins=acme).run(None, feeds)
    expected = reference_run(model, acme.registry, feeds) if container != "function" else None
    if expected is not None:
        np.testing.assert_allclose(got[0], expected[0], rtol=1e-6, atol=1e-7)
    x = feeds["x"]
    independent = {
        "if": swish(x, 0.75),
        "loop": _loop_swish(x, 0.75, int(feeds.get("n", 0))),
        "function": swish(x, 0.75) + x,
    }[container]
    np.testing.assert_allclose(got[0], independent, rtol=1e-5, atol=1e-6)


def _loop_swish(x, alpha, n):
    for _ in range(n):
        x = swish(x, alpha)
    return x


def test_kernel_rewrite_runs_in_a_fresh_process(tmp_path, acme, acme_file):
    """The must-show case: com.acme::FusedSwish with only a kernel, rewritten here and run
    through rewriter.session in a new interpreter; same outputs as the reference run."""
    src = write_model(tmp_path / "acme.onnx", acme_model())
    out = tmp_path / "acme.rewritten.onnx"
    result = rewrite(src, ["onnxruntime"], output=out, plugins=acme, verify=False)
    assert result.report.ok, result.report.as_dict()
    assert result.report.verification["onnxruntime load"] == "ok"  # a child registered it
    np.save(tmp_path / "x.npy", X)
    script = textwrap.dedent(f"""
        import numpy as np, rewriter
        s = rewriter.session({str(out)!r}, plugins=[{str(acme_file)!r}])
        assert type(s).__mro__[1].__name__ == "InferenceSession"
        (y,) = s.run(None, {{"x": np.load({str(tmp_path / 'x.npy')!r})}})
        np.save({str(tmp_path / 'y.npy')!r}, y)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = np.load(tmp_path / "y.npy")
    (expected,) = reference_run(acme_model(), acme.registry, {"x": X})
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got, swish(X, 1.5) + np.maximum(X, 0), rtol=1e-5, atol=1e-6)


def test_missing_kernel_names_the_op_and_the_plugin(tmp_path, acme, capsys):
    out = tmp_path / "needs.onnx"
    rewrite(write_model(tmp_path / "m.onnx", acme_model()), ["onnxruntime"], output=out,
            plugins=acme, **FAST)
    bare = load_plugins(autoload=False)
    with pytest.raises(KernelError) as e:
        session(out, plugins=bare)
    message = str(e.value)
    assert "com.acme::FusedSwish" in message and ACME_OP in message
    assert "load plugin 'acme_kernels'" in message
    code, _, err = run_cli(["run", out], capsys)
    assert code == 2 and "com.acme::FusedSwish" in err and "acme_kernels" in err
    # a plugin that came from a distribution is named with it
    model = onnx.load(out)
    needs = json.loads(model.metadata_props[0].value)
    needs["python"][ACME_OP]["distribution"] = "acme-onnx-kernels"
    model.metadata_props[0].value = json.dumps(needs)
    with pytest.raises(KernelError, match="install acme-onnx-kernels"):
        session(model, plugins=bare)
    # check names it too, as a model-level finding
    report = check(model, ["onnxruntime"], plugins=bare, confirm=False)
    assert any("acme-onnx-kernels" in f.detail for f in report.findings)


def test_check_of_a_rewritten_model_registers_its_kernels(tmp_path, acme_file, capsys):
    acme = load_plugins([str(acme_file)], autoload=False)
    out = tmp_path / "checked.onnx"
    rewrite(write_model(tmp_path / "m.onnx", acme_model()), ["onnxruntime"], output=out,
            plugins=acme, **FAST)
    code, stdout, _ = run_cli(["-p", acme_file, "check", "--confirm", out], capsys)
    assert code == 0, stdout
    code, stdout, _ = run_cli(["check", "--no-confirm", out], capsys)
    assert code == 1 and "acme_kernels" in stdout


def test_prefer_chooses_between_decomposition_and_kernel(acme_both, capsys, tmp_path):
    model = acme_model()
    decomposed, report = rw(model, ["onnxruntime"], plugins=acme_both, explain=True,
                                 **FAST)
    assert {k for (k, *_rest) in report.applied} == {"decomposition"}
    assert not read_needs(decomposed) and METADATA_KEY not in {
        p.key for p in decomposed.metadata_props}
    (item,) = report.explain
    assert [(c["kind"], c["accepted"]) for c in item["candidates"]] == [
        ("decomposition", True), ("kernel", False)]
    assert "--prefer decompose" in item["candidates"][1]["why"]
    kernelled, report = rw(model, ["onnxruntime"], plugins=acme_both, prefer="kernel",
                                **FAST)
    assert {k for (k, *_rest) in report.applied} == {"kernel"}
    assert ACME_OP in read_needs(kernelled).python
    feeds = {"x": X}
    a = session(decomposed, plugins=acme_both).run(None, feeds)[0]
    b = session(kernelled, plugins=acme_both).run(None, feeds)[0]
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    with pytest.raises(Exception, match="prefer"):
        rewrite(model, ["onnxruntime"], plugins=acme_both, prefer="fastest", **FAST)
    src = write_model(tmp_path / "m.onnx", model)
    plugin = next(iter(acme_both.specs))
    code, out, _ = run_cli(["-p", plugin, "rewrite", src, "-o", tmp_path / "k.onnx",
                            "--prefer", "kernel", "--no-confirm", "--json"], capsys)
    assert code == 0, out
    assert [a["kind"] for a in json.loads(out)["applied"]] == ["kernel"]


def test_rewrite_for_the_reference_target_uses_the_same_kernel(acme):
    model = acme_model()
    rewritten, report = rw(model, ["onnxruntime", "reference"], plugins=acme,
                                confirm=True, verify=False)
    assert report.ok, report.as_dict()
    assert report.verification["reference load"] == "ok"
    assert ACME_OP in read_needs(rewritten).python
    ops = reference_ops(rewritten, acme.registry)
    assert [(c.op_domain, c.__name__) for c in ops] == [(CONTRIB_DOMAIN, ACME_OP)]
    got = ReferenceEvaluator(rewritten, new_ops=ops).run(None, {"x": X})[0]
    np.testing.assert_allclose(got, swish(X, 1.5) + np.maximum(X, 0), rtol=1e-5, atol=1e-6)


def test_kernels_are_imported_only_when_a_model_needs_them(tmp_path):
    module = f"lazy_kernel_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(textwrap.dedent("""
        from rewriter.plugin import kernel

        @kernel(signatures=["float -> float"])
        def double(x):
            return x * 2
    """))
    plugin = tmp_path / "lazy_plugin.py"
    plugin.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        from rewriter import hookimpl

        @hookimpl
        def register_kernels(registry):
            registry.add("com.lazy", "Double", "{module}:double")
    """))
    plugins = load_plugins([str(plugin)], autoload=False)
    assert module not in sys.modules
    plain = model_from_text("""
        <ir_version: 10, opset_import: ["" : 18]>
        g (float[2] x) => (float[2] y) { y = Relu (x) }""")
    rewrite(plain, ["onnxruntime"], plugins=plugins, **FAST)
    assert module not in sys.modules
    model = model_from_text("""
        <ir_version: 10, opset_import: ["" : 18, "com.lazy" : 1]>
        g (float[2] x) => (float[2] y) { y = com.lazy.Double (x) }""")
    rewritten, report = rw(model, ["onnxruntime"], plugins=plugins, **FAST)
    assert module in sys.modules
    x = np.array([1.5, -2], dtype=np.float32)
    np.testing.assert_array_equal(session(rewritten, plugins=plugins).run(None, {"x": x})[0],
                                  x * 2)


# -- registration --------------------------------------------------------------------------


def test_duplicate_kernels_are_rejected_naming_both_plugins(tmp_path_factory):
    first = write_plugin(tmp_path_factory, "first_kernels", ACME_KERNEL)
    second = write_plugin(tmp_path_factory, "second_kernels", ACME_KERNEL)
    with pytest.raises(PluginError) as e:
        load_plugins([str(first), str(second)], autoload=False)
    assert "second_kernels" in str(e.value) and "first_kernels" in str(e.value)
    native = '''
from rewriter import hookimpl

@hookimpl
def register_kernels(registry):
    registry.add_native("ai.onnx.contrib", "StringLower")
'''
    clash = write_plugin(tmp_path_factory, "native_clash", native)
    with pytest.raises(PluginError) as e:
        load_plugins([str(clash)], autoload=False)  # the built-in ortx-native has it
    assert "native_clash" in str(e.value) and "ortx-native" in str(e.value)


@pytest.mark.parametrize("bad, message", [
    ('registry.add("com.x", "Op", "not a reference")', "module:attr"),
    ('registry.add_native("com.x", "Op", target=("only-one",))', "target"),
    ('registry.add_native("com.x", "Op", attributes="nope")', "module:attr"),
])
def test_invalid_kernel_registrations(tmp_path_factory, bad, message):
    text = f"from rewriter import hookimpl\n\n@hookimpl\ndef register_kernels(registry):\n" \
           f"    {bad}\n"
    with pytest.raises(PluginError, match=message):
        load_plugins([str(write_plugin(tmp_path_factory, "bad_kernel", text))],
                     autoload=False)


def test_kernel_declarations_are_validated():
    with pytest.raises(ValueError, match="unknown element type"):
        kernel(signatures=["float -> floaty"])(lambda x: x)
    with pytest.raises(ValueError, match="same input types"):
        kernel(signatures=["float -> float", "float -> double"])(lambda x: x)
    with pytest.raises(ValueError, match="only float, int, str, list"):
        kernel(signatures=["float -> float"], attributes={"axes": list[str]})(lambda x: x)
    with pytest.raises(ValueError, match="only float, int, str, list"):
        kernel(signatures=["float -> float"], attributes={"flag": [True]})(lambda x: x)
    k = kernel(signatures=["float, int64 -> float"], attributes={"n": int, "s": "a"})(
        lambda x, i, n, s: x)
    assert k.attributes["n"].required and k.attributes["s"].default == "a"
    assert k.match(["float", None]) == Signature(("float", "int64"), ("float",))
    assert k.match(["double", "int64"]) is None


def test_onnxruntime_registration_is_lazy_and_idempotent():
    """onnxruntime-extensions accepts a second registration of a name silently and then
    fails every later session: registering twice must be a no-op."""
    import onnxruntime as ort
    import onnxruntime_extensions

    k = kernel(signatures=["double -> double"])(lambda x: x + 1)
    use = KernelUse("Inc__test_idem__double", "test.idem", "Inc", "tests:inc", "tests",
                    Signature.parse("double -> double"))
    assert register_onnxruntime([use], {use.op_name: k}) == [use.op_name]
    assert register_onnxruntime([use], {use.op_name: k}) == []
    other = KernelUse(use.op_name, "test.idem", "Inc", "tests:other", "tests", use.signature)
    with pytest.raises(KernelError, match="already registered"):
        register_onnxruntime([other], {use.op_name: k})
    node = helper.make_node(use.op_name, ["x"], ["y"], domain=CONTRIB_DOMAIN)
    model = runtime_model(helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [2])],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [2])]),
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(CONTRIB_DOMAIN, 1)])
    so = ort.SessionOptions()
    so.register_custom_ops_library(onnxruntime_extensions.get_library_path())
    sess = ort.InferenceSession(model.SerializeToString(), so)
    np.testing.assert_array_equal(sess.run(None, {"x": np.array([1.0, 2.0])})[0], [2.0, 3.0])


def test_a_failing_kernel_raises_instead_of_aborting_the_process(tmp_path_factory):
    """An exception escaping a Python op makes onnxruntime-extensions abort the process; the
    adapter records it and KernelSession.run raises it."""
    text = '''
from rewriter import hookimpl

@hookimpl
def register_kernels(registry):
    registry.add("com.fail", "Boom", "tests.test_kernels:BOOM")
'''
    plugins = load_plugins([str(write_plugin(tmp_path_factory, "boom", text))],
                           autoload=False)
    model = model_from_text("""
        <ir_version: 10, opset_import: ["" : 18, "com.fail" : 1]>
        g (float[2] x) => (float[2] y) { y = com.fail.Boom (x) }""")
    rewritten, _ = rw(model, ["onnxruntime"], plugins=plugins, **FAST)
    sess = session(rewritten, plugins=plugins)
    with pytest.raises(KernelRunError, match="ZeroDivisionError"):
        sess.run(None, {"x": np.ones(2, np.float32)})
    # the session still works for the next call
    with pytest.raises(KernelRunError):
        sess.run(None, {"x": np.ones(2, np.float32)})


@kernel(signatures=["float -> float"])
def BOOM(x):  # noqa: N802 - a module attribute named like a constant
    raise ZeroDivisionError("boom")


def test_unsupported_types_are_declined_at_planning(tmp_path_factory):
    text = '''
from rewriter import hookimpl

@hookimpl
def register_kernels(registry):
    registry.add("com.half", "Twice", "tests.test_kernels:TWICE")
'''
    plugins = load_plugins([str(write_plugin(tmp_path_factory, "half", text))],
                           autoload=False)
    model = model_from_text("""
        <ir_version: 10, opset_import: ["" : 18, "com.half" : 1]>
        g (float16[2] x, float[2] f) => (float16[2] y, float[2] z) {
            y = com.half.Twice (x)
            z = com.half.Twice (f)
        }""")
    with pytest.raises(UnfixableError, match="do not support float16") as e:
        rewrite(model, ["onnxruntime"], plugins=plugins, **FAST)
    assert "float16" in str(e.value)
    with pytest.raises(UnfixableError, match=r"no signature takes \(double\)"):
        rewrite(model_from_text("""
            <ir_version: 10, opset_import: ["" : 18, "com.half" : 1]>
            g (double[2] x) => (double[2] y) { y = com.half.Twice (x) }"""),
            ["onnxruntime"], plugins=plugins, **FAST)
    # the float16 node is declined, the float one is not: partial rewrites the latter
    _, report = rw(model, ["onnxruntime"], plugins=plugins, partial=True, **FAST)
    assert [f.node_name or f.op_type for f in report.remaining] == ["Twice"]


@kernel(signatures=["float16 -> float16", "float -> float"])
def TWICE(x):  # noqa: N802
    return x * 2


# -- native onnxruntime-extensions ops -----------------------------------------------------


def _string_model(domain: str, op: str, imports: str) -> onnx.ModelProto:
    return model_from_text(f"""
        <ir_version: 10, opset_import: ["" : 18{imports}]>
        g (string[N] x) => (string[N] y) {{ y = {domain}.{op} (x) }}""")


def test_native_op_is_preferred_and_needs_no_python(plugins):
    model = _string_model("ai.onnx.contrib", "StringLower", ', "ai.onnx.contrib" : 1')
    rewritten, report = rw(model, ["onnxruntime"], plugins=plugins, explain=True, **FAST)
    ((kind, plugin, rule, _op),) = report.applied
    assert (kind, plugin) == ("kernel", "ortx-native") and "native extensions" in rule
    needs = read_needs(rewritten)
    assert not needs.python and list(needs.native) == ["ai.onnx.contrib::StringLower"]
    assert rewritten.graph.node[0].op_type == "StringLower"
    x = np.array(["HeLLo", "ÀB"], dtype=object)
    assert session(rewritten, plugins=plugins).run(None, {"x": x})[0].tolist() == ["hello", "àb"]


def test_native_op_missing_from_the_library_falls_back_to_python(plugins):
    """ai.onnx.contrib::FastGelu is CUDA-only in onnxruntime-extensions: the live probe
    declines the native remedy and the Python kernel takes over (asked to prefer a kernel:
    onnx-lowering also decomposes it)."""
    model = model_from_text("""
        <ir_version: 10, opset_import: ["" : 18, "ai.onnx.contrib" : 1]>
        g (float[N] x, float[N] b) => (float[N] y) { y = ai.onnx.contrib.FastGelu (x, b) }""")
    rewritten, report = rw(model, ["onnxruntime"], plugins=plugins, explain=True,
                           prefer="kernel", **FAST)
    (item,) = report.explain
    native, python = [c for c in item["candidates"] if c["kind"] == "kernel"]
    assert (native["plugin"], native["accepted"]) == ("ortx-native", False)
    assert "provide ai.onnx.contrib::FastGelu" in native["why"]
    assert (python["plugin"], python["accepted"]) == ("custom-ops", True)
    (name,) = read_needs(rewritten).python
    assert name.startswith("FastGelu__ai_onnx_contrib__float_float__")


def test_native_mapping_to_another_op(tmp_path_factory, plugins):
    """A plugin maps its own op onto a library op with the same semantics."""
    text = '''
from rewriter import hookimpl

@hookimpl
def register_kernels(registry):
    registry.add_native("com.acme", "Lower", target=("ai.onnx.contrib", "StringLower"),
                        description="acme Lower is ortx StringLower")
'''
    mapped = load_plugins([str(write_plugin(tmp_path_factory, "acme_lower", text))],
                          autoload=False)
    model = _string_model("com.acme", "Lower", ', "com.acme" : 1')
    rewritten, report = rw(model, ["onnxruntime"], plugins=mapped, **FAST)
    assert report.ok
    node = rewritten.graph.node[0]
    assert (node.domain, node.op_type) == ("ai.onnx.contrib", "StringLower")
    assert read_needs(rewritten).native["ai.onnx.contrib::StringLower"].original == \
        "com.acme::Lower"
    assert "ai.onnx.contrib" in {o.domain for o in rewritten.opset_import}
    x = np.array(["ABC"], dtype=object)
    assert session(rewritten, plugins=mapped).run(None, {"x": x})[0].tolist() == ["abc"]


def test_reference_target_takes_the_python_kernel_where_native_is_chosen_for_ort(plugins):
    model = _string_model("ai.onnx.contrib", "StringLower", ', "ai.onnx.contrib" : 1')
    rewritten, report = rw(model, ["onnxruntime", "reference"], plugins=plugins,
                                explain=True, **FAST)
    assert report.ok, report.as_dict()
    cands = [c for c in report.explain[0]["candidates"] if c["kind"] == "kernel"]
    assert not cands[0]["accepted"] and "reference evaluator cannot run" in cands[0]["why"]
    (name,) = read_needs(rewritten).python
    assert name.startswith("StringLower__ai_onnx_contrib__string__")


def test_run_cli_random_inputs_dims_and_outputs(tmp_path, acme, acme_file, capsys):
    out = tmp_path / "r.onnx"
    rewrite(write_model(tmp_path / "m.onnx", acme_model()), ["onnxruntime"], output=out,
            plugins=acme, **FAST)
    args = ["-p", acme_file, "run", out, "--dim", "N=5", "-o", tmp_path / "o.npz", "--json"]
    code, stdout, _ = run_cli(args, capsys)
    assert code == 0, stdout
    shown = json.loads(stdout)
    assert shown["generated"] and shown["inputs"][0]["shape"] == [5]
    y = np.load(tmp_path / "o.npz")["y"]
    assert y.shape == (5,)
    code, _, _ = run_cli(args, capsys)  # seeded: the same outputs again
    np.testing.assert_array_equal(np.load(tmp_path / "o.npz")["y"], y)
    np.savez(tmp_path / "in.npz", x=X)
    code, stdout, err = run_cli(["-p", acme_file, "run", out, "--inputs", tmp_path / "in.npz"],
                                capsys)
    assert code == 0 and "given" in err and stdout.startswith("y: float32[8]")
    code, _, err = run_cli(["-p", acme_file, "run", out, "--dim", "N"], capsys)
    assert code == 2 and "NAME=VALUE" in err


# -- the onnxruntime-extensions corpus -----------------------------------------------------


def _png(pixels_rgb):
    from tests.test_custom_ops import png_bytes

    return png_bytes(pixels_rgb)


def _smooth_image(h, w):
    yy, xx = np.mgrid[0:h, 0:w]
    return np.stack([(3 * yy) % 256, (2 * xx) % 256, (xx + yy) % 256], -1).astype(np.uint8)


def _corpus_inputs(name, corpus):
    """Meaningful inputs per model (random bytes are not an image)."""
    if name == "onnx_op20_image_decoder_jpeg_rgb":
        data = corpus / "testdata" / name / "test_data_set_0"
        x = numpy_helper.to_array(onnx.load_tensor(str(data / "input_0.pb")))
        y = numpy_helper.to_array(onnx.load_tensor(str(data / "output_0.pb")))
        return {"data": x}, [y]
    return {
        "ortx_fastgelu": ({"x": np.array(0.75, np.float32), "bias": np.array(-0.25, np.float32)},
                          None),
        "ortx_masked_fill": ({"value": np.array(["a", "bb", "", "Ω"], dtype=object),
                              "mask": np.array([True, False, True, True])}, None),
        "ortx_negpos_no_opset_import": (
            {"X": np.array([[-1.5, 0.0], [np.inf, np.nan]], np.float32)}, None),
        "ortx_string_lower": ({"input_1": np.array([["HeLLo", "ÄÖÜ"], ["ΣΑΣ", ""]],
                                                   dtype=object)}, None),
        "ortx_string_split": ({"input": np.array(["a,,b", "", "c, d"], dtype=object),
                               "delimiter": np.array([", "], dtype=object),
                               "skip_empty": np.array([False])}, None),
        "ortx_gpt2_tokenizer": ({"input_text": np.array(["Hello world", "This is a test."],
                                                        dtype=object)}, None),
        "ortx_decode_encode_decode_image": ({"image": _png(img := _smooth_image(9, 13))},
                                            [img[..., ::-1]]),
        "ortx_supres_pre_post": ({"raw_input_image": _png(_smooth_image(224, 224))}, None),
    }[name]


RUNNABLE = ["onnx_op20_image_decoder_jpeg_rgb", "ortx_decode_encode_decode_image",
            "ortx_fastgelu", "ortx_gpt2_tokenizer", "ortx_masked_fill",
            "ortx_negpos_no_opset_import", "ortx_string_lower", "ortx_string_split",
            "ortx_supres_pre_post"]
# (NegPos and MaskedFill have decompositions since, which --prefer decompose takes)
NATIVE = {"ortx_decode_encode_decode_image", "ortx_gpt2_tokenizer", "ortx_string_lower",
          "ortx_string_split"}


@pytest.mark.parametrize("name", RUNNABLE)
def test_corpus_model_runs_after_rewrite_and_matches(name, corpus, plugins, tmp_path):
    original = onnx.load(corpus / f"{name}.onnx")
    out = tmp_path / f"{name}.onnx"
    result = rewrite(corpus / f"{name}.onnx", ["onnxruntime"], output=out, plugins=plugins,
                     **FAST)
    assert result.report.ok or all(v.startswith(("ok", "pre-existing", "skipped"))
                                   for v in result.report.verification.values())
    needs = read_needs(onnx.load(out))
    assert bool(needs.native) == (name in NATIVE)  # the report says which run natively
    feeds, expected = _corpus_inputs(name, corpus)
    got = session(out, plugins=plugins).run(None, feeds)
    if expected is None:  # the oracle: the reference evaluator on the original
        if name == "ortx_negpos_no_opset_import":  # the original forgot an opset import
            original.opset_import.append(helper.make_opsetid(CONTRIB_DOMAIN, 1))
        if name in ("ortx_string_lower", "ortx_string_split"):  # ... or the default one
            original.opset_import.append(helper.make_opsetid("", 14))
        expected = reference_run(original, plugins.registry, feeds)
    independent = not native_only(original, plugins.registry)
    assert independent == (name != "ortx_gpt2_tokenizer")
    if name == "ortx_supres_pre_post":  # JPEG bytes: compare the pixels they decode to
        from rewriter_custom_ops._images import decode

        a, b = (decode(v.reshape(-1)).astype(int) for v in (got[0], expected[0]))
        assert a.shape == b.shape == (672, 672, 3)
        assert np.abs(a - b).max() <= 3 and (a != b).mean() < 1e-3
        return
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        g, e = np.asarray(g), np.asarray(e)
        assert g.shape == e.shape
        if e.dtype.kind == "f":
            np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-7)
        else:
            assert g.tolist() == e.tolist()


def test_corpus_remote_invoker_is_refused_with_a_clear_reason(corpus, plugins, tmp_path):
    with pytest.raises(UnfixableError, match="AzureTritonInvoker"):
        rewrite(corpus / "ortx_azure_triton_addf.onnx", ["onnxruntime"], plugins=plugins,
                output=tmp_path / "never.onnx", **FAST)
    assert not (tmp_path / "never.onnx").exists()


def test_corpus_image_decoder_through_the_cli(corpus, tmp_path, capsys):
    src = corpus / "onnx_op20_image_decoder_jpeg_rgb.onnx"
    out = tmp_path / "dec.onnx"
    data = corpus / "testdata" / "onnx_op20_image_decoder_jpeg_rgb" / "test_data_set_0"
    # random bytes are no image: no runtime can run the original on them, so unverified
    code, stdout, _ = run_cli(["rewrite", src, "-o", out, "--no-confirm"], capsys)
    assert code == 3 and not out.exists() and "unverified" in stdout, stdout
    code, stdout, _ = run_cli(["rewrite", src, "-o", out, "--no-confirm", "--inputs", data],
                              capsys)
    assert code == 0 and "verified" in stdout, stdout
    code, stdout, _ = run_cli(["run", out, "--inputs", data, "-o", tmp_path / "o.npz"], capsys)
    assert code == 0 and "uint8[32, 32, 3]" in stdout
    expected = numpy_helper.to_array(onnx.load_tensor(str(data / "output_0.pb")))
    np.testing.assert_array_equal(np.load(tmp_path / "o.npz")["output"], expected)


def test_float_attributes_reach_the_kernel_exactly(acme):
    """onnxruntime-extensions prints float attributes with 6 significant digits; the
    retargeted node carries them as exact text instead."""
    model = acme_model(alpha=0.123456789)
    rewritten, _ = rw(model, ["onnxruntime"], plugins=acme, **FAST)
    got = session(rewritten, plugins=acme).run(None, {"x": X})[0]
    from rewriter_custom_ops.fused_swish import kernel as swish_kernel

    alpha32 = float(np.float32(0.123456789))
    np.testing.assert_array_equal(got, swish_kernel(X, alpha=alpha32) + np.maximum(X, 0))
    (expected,) = reference_run(model, acme.registry, {"x": X})
    np.testing.assert_array_equal(got, expected)


def test_other_python_ops_keep_working_alongside_ours(acme):
    """Our invocation hook serves our ops and hands every other Python op to the library's
    own hook."""
    import onnxruntime as ort
    import onnxruntime_extensions
    from onnxruntime_extensions import PyCustomOpDef, onnx_op

    rw(acme_model(), ["onnxruntime"], plugins=acme, **FAST)  # our hook is installed by now
    name = "UsersOwnTriple"
    from rewriter.plan.kernels import _ORT_REGISTERED

    if name not in _ORT_REGISTERED:  # a user's op, registered the library's way, once
        onnx_op(op_type=name, inputs=[PyCustomOpDef.dt_float],
                outputs=[PyCustomOpDef.dt_float])(lambda x: x * 3)
        _ORT_REGISTERED[name] = ("tests:users-own", Signature.parse("float -> float"))
    node = helper.make_node(name, ["x"], ["y"], domain=CONTRIB_DOMAIN)
    model = runtime_model(helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8])]),
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(CONTRIB_DOMAIN, 1)])
    so = ort.SessionOptions()
    so.register_custom_ops_library(onnxruntime_extensions.get_library_path())
    got = ort.InferenceSession(model.SerializeToString(), so).run(None, {"x": X})[0]
    np.testing.assert_array_equal(got, X * 3)


def test_kernel_benchmark_runs(tmp_path):
    """benchmarks/bench_kernel.py on a small tensor: it runs and its cases agree."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        import bench_kernel
    finally:
        sys.path.pop(0)
    results = bench_kernel.bench(size=1000, repeat=2)
    assert set(results) == {"fastgelu", "identity", "swish"}
    assert all(r["python_kernel_s"] > 0 and r["native_s"] > 0 for r in results.values())


def test_the_native_table_matches_the_installed_library(plugins, capsys):
    """Every op the ortx-native table maps is one the installed onnxruntime-extensions
    registers on CPU (FastGelu excepted: CUDA-only, which the planner's probe handles)."""
    import onnxruntime as ort
    import onnxruntime_extensions

    missing = []
    for (domain, op), entry in sorted(plugins.registry.natives.items()):
        assert entry.plugin == "ortx-native" and entry.target == (domain, op)
        node = helper.make_node(op, ["x"], ["y"], domain=domain)
        model = runtime_model(helper.make_graph(
            [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
            [helper.make_value_info("y", onnx.TypeProto())]),
            opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(domain, 1)])
        so = ort.SessionOptions()
        so.log_severity_level = 4
        so.register_custom_ops_library(onnxruntime_extensions.get_library_path())
        try:
            ort.InferenceSession(model.SerializeToString(), so)
        except Exception as e:  # noqa: BLE001 - a type error still proves the op exists
            if "is not a registered function/op" in str(e):
                missing.append(f"{domain}::{op}")
    assert missing == ["ai.onnx.contrib::FastGelu"]
    code, out, _ = run_cli(["plugins", "--json"], capsys)
    rows = {r["name"]: r for r in json.loads(out)["rows"]}
    assert "ai.onnx.contrib::StringLower -> extensions ai.onnx.contrib::StringLower" in \
        rows["ortx-native"]["registered"]["native_kernels"]
    assert "ai.onnx::ImageDecoder" in rows["custom-ops"]["registered"]["kernels"]


def test_run_of_a_model_onnxruntime_cannot_load_is_one_line(tmp_path, capsys):
    from rewriter.cli import main

    source = Path(__file__).resolve().parents[1] / "examples" / "new_opset_export.onnx"
    assert main(["run", str(source), "-o", str(tmp_path / "out.npz")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "onnxruntime cannot load" in err
    # no Swish-24 kernel; an older onnxruntime already refuses the IR version or the opset
    why = onnxruntime_refusal(onnx.load(source))
    assert "Swish(24)" in err if why == NO_KERNEL else re.search(why, err)
    assert not (tmp_path / "out.npz").exists()


# -- list attributes and accepts(node) -----------------------------------------------------

LISTS_PLUGIN = '''
"""com.acme::PickScale: a kernel with int-list and float-list attributes;
com.acme::Dispatch: an ATen-like op whose kernel accepts only the operators it implements."""
import numpy as np

from rewriter import hookimpl
from rewriter.plugin import kernel


@kernel(signatures=["float -> float", "double -> double"],
        attributes={"columns": list[int], "scales": (list[float], []), "bias": 0.0})
def pick_scale(x, *, columns, scales, bias):
    """y = x[..., columns] * scales + bias (scales: all ones when empty), in float64."""
    if type(columns) is not list or not all(type(c) is int for c in columns):
        raise TypeError(f"columns reached the kernel as {columns!r}")
    if type(scales) is not list or not all(type(s) is float for s in scales):
        raise TypeError(f"scales reached the kernel as {scales!r}")
    y = x.astype(np.float64)[..., columns]
    if scales:
        y = y * np.asarray(scales, dtype=np.float64)
    return (y + bias).astype(x.dtype)


OPERATORS = {"relu": lambda x: np.maximum(x, 0), "neg": np.negative}


def implemented(node):
    operator = next(a.s.decode() for a in node.attribute if a.name == "operator")
    if operator not in OPERATORS:
        return f"operator {operator!r} is not implemented (only {', '.join(sorted(OPERATORS))})"
    return None


@kernel(signatures=["float -> float"], attributes={"operator": str}, accepts=implemented)
def dispatch(x, *, operator):
    return OPERATORS[operator](x).astype(x.dtype)


@hookimpl
def register_kernels(registry):
    registry.add("com.acme", "PickScale", f"{__name__}:pick_scale")
    registry.add("com.acme", "Dispatch", f"{__name__}:dispatch")
'''

PICK_OP = "PickScale__com_acme__float__"  # and the digest of the plugin's kernel reference


@pytest.fixture(scope="module")
def lists_file(tmp_path_factory) -> Path:
    return write_plugin(tmp_path_factory, "acme_lists", LISTS_PLUGIN)


@pytest.fixture(scope="module")
def lists(lists_file):
    return load_plugins([str(lists_file)], autoload=False)


def pick_scale_oracle(x, columns, scales=(), bias=0.0):
    """Independent of the kernel: numpy's take, float32 attribute values as onnx stores
    them."""
    y = np.take(x.astype(np.float64), columns, axis=-1)
    if len(scales):
        y = y * np.float32(scales).astype(np.float64)
    return (y + float(np.float32(bias))).astype(x.dtype)


def _pick_node(output="y", inputs=("x",), name="pick", **attributes):
    return helper.make_node("PickScale", list(inputs), [output], name=name, domain="com.acme",
                            **attributes)


def _one_op_model(nodes, outputs, inputs=("x",), extra_domains=()) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(i, TensorProto.FLOAT, ["N", 4])
                     for i in inputs],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs])
    model = runtime_model(graph, opset_imports=[
        helper.make_opsetid("", 18), helper.make_opsetid("com.acme", 1),
        *[helper.make_opsetid(d, 1) for d in extra_domains]])
    model.ir_version = 10
    return model


def lists_model() -> onnx.ModelProto:
    """PickScale at the top level (every attribute given, floats not exact in float32) and
    inside an If branch (scales and bias left to their defaults)."""
    top = _pick_node("p", columns=[3, 0, -1, 1], scales=[0.1, -2.5, 1e-3, 3.0], bias=0.7)
    inner = _pick_node("b", inputs=("p",), name="inner", columns=[2, 2, 0])
    branch = helper.make_graph([inner], "then", [], [
        helper.make_tensor_value_info("b", TensorProto.FLOAT, None)])
    other = helper.make_graph(
        [helper.make_node("Slice", ["p", "s", "e", "a"], ["c"], name="slice")], "else", [],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, None)])
    consts = [helper.make_node("Constant", [], [n], value=numpy_helper.from_array(
        np.array([v], np.int64), n)) for n, v in (("s", 0), ("e", 3), ("a", -1))]
    model = _one_op_model(
        [*consts, top, helper.make_node("If", ["c0"], ["y"], name="if", then_branch=branch,
                                        else_branch=other)], ["p", "y"])
    model.graph.input.append(helper.make_tensor_value_info("c0", TensorProto.BOOL, []))
    return model


XM = np.random.default_rng(3).normal(size=(5, 4)).astype(np.float32)


def lists_oracle(x, condition: bool):
    p = pick_scale_oracle(x, [3, 0, -1, 1], [0.1, -2.5, 1e-3, 3.0], 0.7)
    return p, (pick_scale_oracle(p, [2, 2, 0]) if condition else p[:, :3])


def test_list_attributes_reach_the_kernel_in_a_fresh_process(tmp_path, lists, lists_file):
    """Int and float lists travel on the retargeted node as JSON text (onnxruntime-extensions
    passes no lists) and reach the kernel function as lists again, exactly."""
    src = write_model(tmp_path / "lists.onnx", lists_model())
    out = tmp_path / "lists.rewritten.onnx"
    result = rewrite(src, ["onnxruntime"], output=out, plugins=lists, prefer="kernel", **FAST)
    assert result.report.ok, result.report.as_dict()
    rewritten = onnx.load(out)
    retargeted = {n.name: n for n in all_nodes(rewritten) if n.domain == CONTRIB_DOMAIN}
    assert {n.op_type[:len(PICK_OP)] for n in retargeted.values()} == {PICK_OP}
    f32 = [float(np.float32(v)) for v in (0.1, -2.5, 1e-3, 3.0)]
    assert {a.name: a.s.decode() for a in retargeted["pick"].attribute} == {
        "bias": repr(float(np.float32(0.7))), "columns": "[3, 0, -1, 1]",
        "scales": json.dumps(f32)}
    assert {a.name: a.s.decode() for a in retargeted["inner"].attribute} == {
        "bias": "0.0", "columns": "[2, 2, 0]", "scales": "[]"}
    np.savez(tmp_path / "in.npz", x=XM, c0=np.array(True))
    script = textwrap.dedent(f"""
        import numpy as np, rewriter
        s = rewriter.session({str(out)!r}, plugins=[{str(lists_file)!r}])
        feeds = dict(np.load({str(tmp_path / 'in.npz')!r}))
        p, y = s.run(None, feeds)
        np.savez({str(tmp_path / 'out.npz')!r}, p=p, y=y)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = np.load(tmp_path / "out.npz")
    expected = reference_run(lists_model(), lists.registry, {"x": XM, "c0": np.array(True)})
    for g, e, o in zip((got["p"], got["y"]), expected, lists_oracle(XM, True)):
        np.testing.assert_array_equal(g, e)  # the same attribute values on both adapters
        np.testing.assert_allclose(g, o, rtol=1e-6, atol=1e-6)


def test_compare_runs_list_attributes_on_the_reference_evaluator(lists):
    """compare: the original (native INTS/FLOATS attributes) on the reference evaluator with
    the kernel as an OpRun, the rewritten one (JSON text) on onnxruntime and the reference
    evaluator."""
    from rewriter.comparison.compare import compare

    original = lists_model()
    rewritten, report = rw(original, ["onnxruntime", "reference"], plugins=lists,
                           prefer="kernel", **FAST)
    assert report.ok, report.as_dict()
    result = compare(original, rewritten, ["onnxruntime", "reference"], plugins=lists,
                     inputs=[{"x": XM, "c0": np.array(c)} for c in (True, False)],
                     original_target="reference")
    assert (result.status, result.exit_code) == ("equal", 0), result.summary()
    assert result.oracle == "reference with plugin kernels"
    assert [t.status for t in result.targets] == ["equal", "equal"]
    # the oracle itself, against numpy
    for c in (True, False):
        got = reference_run(original, lists.registry, {"x": XM, "c0": np.array(c)})
        for g, o in zip(got, lists_oracle(XM, c)):
            np.testing.assert_allclose(g, o, rtol=1e-6, atol=1e-6)


def test_list_attributes_of_another_kind_are_declined_with_the_reason(lists, capsys,
                                                                     tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # --explain's reasons on one line each
    nodes = [
        _pick_node("a", name="float_columns", columns=[0.0, 1.0]),
        _pick_node("b", name="int_scales", columns=[0], scales=[1, 2]),
        _pick_node("c", name="undeclared", columns=[0], extra=[1]),
        _pick_node("d", name="scalar_columns", columns=1),
        _pick_node("e", name="string_columns", columns=["a"]),
        _pick_node("f", name="missing_columns"),
        _pick_node("g", name="fine", columns=[1], scales=[2.0]),
    ]
    model = _one_op_model(nodes, "abcdefg")
    rewritten, report = rw(model, ["onnxruntime"], plugins=lists, partial=True, explain=True,
                           **FAST)
    assert [f.node_name for f in report.remaining] == [n.name for n in nodes[:-1]]
    why = {item["finding"]["node_name"]: [c for c in item["candidates"]
                                          if c["kind"] == "kernel"][0]
           for item in report.explain}
    assert why["fine"]["accepted"]
    assert {name: c["why"] for name, c in why.items() if name != "fine"} == {
        "float_columns": "attribute 'columns' is a list of floats; the kernel takes a list "
                         "of ints",
        "int_scales": "attribute 'scales' is a list of ints; the kernel takes a list of "
                      "floats",
        "undeclared": "the kernel takes no attribute 'extra' (it declares: bias, columns, "
                      "scales)",
        "scalar_columns": "attribute 'columns' is an int; the kernel takes a list of ints",
        "string_columns": "attribute 'columns' is a list of strings; the kernel takes a "
                          "list of ints",
        "missing_columns": "required attribute(s) columns missing",
    }
    (fine,) = [n for n in rewritten.graph.node if n.domain == CONTRIB_DOMAIN]
    assert fine.name == "fine"
    got = session(retargeted_alone(rewritten, "fine"), plugins=lists).run(None, {"x": XM})[0]
    np.testing.assert_allclose(got, pick_scale_oracle(XM, [1], [2.0]), rtol=1e-6)
    # the CLI's --explain shows the same reasons
    src = write_model(tmp_path / "declines.onnx", model)
    code, out, _ = run_cli(["-p", next(iter(lists.specs)), "rewrite", src, "-o",
                            tmp_path / "never.onnx", "--explain", "--no-confirm"], capsys)
    assert code == 1
    assert "attribute 'columns' is a list of floats; the kernel takes a list of ints" in out
    assert "the kernel takes no attribute 'extra'" in out


def retargeted_alone(partial: onnx.ModelProto, name: str) -> onnx.ModelProto:
    """The retargeted node ``name`` of a partial rewrite (which keeps ops onnxruntime lacks)
    as a model of its own, with the kernels the partial rewrite recorded."""
    (node,) = [n for n in partial.graph.node if n.name == name]
    alone = _one_op_model([node], list(node.output), extra_domains=[CONTRIB_DOMAIN])
    alone.metadata_props.extend(partial.metadata_props)
    return alone


def dispatch_model() -> onnx.ModelProto:
    return _one_op_model([
        helper.make_node("Dispatch", ["x"], ["r"], name="relu", domain="com.acme",
                         operator="relu"),
        helper.make_node("Dispatch", ["x"], ["t"], name="tanh", domain="com.acme",
                         operator="tanh"),
    ], ["r", "t"])


def test_accepts_declines_a_node_at_planning_and_explain_shows_why(lists, capsys, tmp_path):
    reason = "operator 'tanh' is not implemented (only neg, relu)"
    with pytest.raises(UnfixableError) as e:
        rewrite(dispatch_model(), ["onnxruntime"], plugins=lists, **FAST)
    assert [f.node_name for f in e.value.findings] == ["tanh"]
    rewritten, report = rw(dispatch_model(), ["onnxruntime"], plugins=lists, partial=True,
                           explain=True, **FAST)
    assert [f.node_name for f in report.remaining] == ["tanh"]
    verdicts = {item["finding"]["node_name"]: [c for c in item["candidates"]
                                               if c["kind"] == "kernel"][0]
                for item in report.explain}
    assert verdicts["relu"]["accepted"]
    assert verdicts["tanh"]["why"] == f"the kernel declines this node: {reason}"
    assert [(n.name, n.domain) for n in rewritten.graph.node] == [
        ("relu", CONTRIB_DOMAIN), ("tanh", "com.acme")]
    x = XM - 0.5
    r = session(retargeted_alone(rewritten, "relu"), plugins=lists).run(None, {"x": x})[0]
    np.testing.assert_array_equal(r, np.maximum(x, 0))
    src = write_model(tmp_path / "dispatch.onnx", dispatch_model())
    code, out, _ = run_cli(["-p", next(iter(lists.specs)), "rewrite", src, "-o",
                            tmp_path / "never.onnx", "--explain", "--no-confirm"], capsys)
    assert code == 1 and reason in " ".join(out.split())
    # the reference evaluator's adapter refuses the node with the same reason
    with pytest.raises(KernelError, match="operator 'tanh' is not implemented"):
        reference_run(dispatch_model(), lists.registry, {"x": x})


def test_list_attribute_declarations_and_decoding():
    from rewriter.plan.kernels import node_problem

    k = kernel(signatures=["float -> float"], attributes={
        "strides": [1, 1], "scales": [0.5, 2], "pads": (list[int], []), "axes": list[int],
        "gamma": list[float], "alpha": (float, 1), "n": (int, 3)})(lambda x, **a: x)
    kinds = {n: (a.type, a.default) for n, a in k.attributes.items()}
    assert kinds == {"strides": ("ints", (1, 1)), "scales": ("floats", (0.5, 2.0)),
                     "pads": ("ints", ()), "axes": ("ints", None), "gamma": ("floats", None),
                     "alpha": ("float", 1.0), "n": ("int", 3)}
    assert type(k.attributes["alpha"].default) is float
    for bad, words in [
        ({"pads": []}, "empty list default"), ({"p": (list[int], [1.5])}, "not a list of ints"),
        ({"p": (int, 1.5)}, "not an int"), ({"p": (list[int],)}, "(type, default)"),
        ({"p": (1, 1)}, "(type, default)"), ({"p": [1, "a"]}, "only float"),
    ]:
        with pytest.raises(ValueError, match=re.escape(words)):
            kernel(signatures=["float -> float"], attributes=bad)(lambda x: x)
    with pytest.raises(ValueError, match="accepts must be a callable"):
        kernel(signatures=["float -> float"], accepts="yes")(lambda x: x)
    # decoding: JSON text (onnxruntime-extensions, retargeted nodes) or native values
    given = {"strides": "[2, 3]", "scales": b"[0.1, 1e-300]", "axes": [np.int64(1)],
             "gamma": [np.float32(0.25), 1], "alpha": "0.1", "n": 4, "unknown": "x"}
    attrs = k.cast_attributes(given)
    assert attrs == {"strides": [2, 3], "scales": [0.1, 1e-300], "pads": [], "axes": [1],
                     "gamma": [0.25, 1.0], "alpha": 0.1, "n": 4}
    assert [type(v) for v in attrs["gamma"]] == [float, float]
    attrs["pads"].append(9)  # a kernel mutating a default does not change the next call
    assert k.cast_attributes({})["pads"] == [] and k.cast_attributes({})["strides"] == [1, 1]
    for wrong in ("[1.5]", "[true]", "{\"a\": 1}", "[1,", 3):
        with pytest.raises(KernelError, match="'axes'"):
            k.cast_attributes({"axes": wrong})
    # accepts: None takes the node, a reason declines it; anything else is the plugin's bug
    node = helper.make_node("Op", ["x"], ["y"], axes=[0], gamma=[1.0])
    for verdict, words in [(None, None), ("too big", "the kernel declines this node: too big"),
                           (False, "must return None"), ("", "must return None")]:
        pick = kernel(signatures=["float -> float"], attributes={
            "axes": list[int], "gamma": list[float]}, accepts=lambda n, v=verdict: v)(
            lambda x, **a: x)
        problem = node_problem(node, pick)
        assert problem == words if words is None else words in problem
    boom = kernel(signatures=["float -> float"], attributes={"axes": list[int],
                  "gamma": list[float]}, accepts=lambda n: 1 / 0)(lambda x, **a: x)
    assert node_problem(node, boom) == \
        "the kernel's accepts() failed: ZeroDivisionError: division by zero"


def test_a_string_attribute_that_is_not_utf8_stays_bytes():
    """Found by benchmarks/fuzz.py: a non-UTF-8 string attribute crashed `check` with a
    UnicodeDecodeError; binary data in a string attribute is passed on as bytes."""
    from rewriter.plan.kernels import _attr_value

    assert _attr_value(b"\xff\xfe") == b"\xff\xfe"
    assert _attr_value(b"same") == "same"
