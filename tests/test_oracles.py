"""Every registered decomposition of the built-in plugins against its independent oracle
(``registry.add(..., oracle=..., samples=...)``; ``rewriter.testing``), at every dtype
it claims: values, shapes and element types must agree, and a Python kernel of the same op
must declare the decomposition's output types. A newly registered op is included
automatically; one without an oracle fails ``test_every_decomposition_has_an_oracle``.
"""

from __future__ import annotations

import pytest

from rewriter import testing as oracle_check
from rewriter.manager import load_plugins
from tests.conftest import skip_where_the_oracle_cannot_run

pytest.importorskip("onnxruntime")

_REGISTRY = load_plugins(autoload=False).registry
BUILTIN = {name for name, info in _REGISTRY.plugins.items() if info.builtin}
ENTRIES = list(_REGISTRY.decompositions)


def _params():
    for index, entry in enumerate(ENTRIES):
        if entry.plugin not in BUILTIN:
            continue
        if entry.oracle == "spec" and not entry.samples:
            yield pytest.param(index, None, None, id=oracle_check.label(entry))
            continue
        for sample, dtype in oracle_check.sample_runs(entry):
            name = f"{oracle_check.label(entry)}[{oracle_check.run_name(sample, dtype)}]"
            yield pytest.param(index, sample, dtype, id=name)


@pytest.fixture(scope="module")
def oracle_plugins():
    return oracle_check.oracle_plugins()


@pytest.mark.parametrize("index,sample,dtype", list(_params()))
def test_decomposition_agrees_with_its_oracle(oracle_plugins, index, sample, dtype):
    entry = oracle_plugins.registry.decompositions[index]
    assert oracle_check.label(entry) == oracle_check.label(ENTRIES[index])
    if sample is None:
        checks = oracle_check.spec_checks(entry)
        assert checks, f"{oracle_check.label(entry)}: no backend case of the op"
    else:
        checks = [oracle_check.build(entry, sample, dtype)]
        too_old = oracle_check.needs_newer_onnxruntime(checks[0])
        if too_old:
            pytest.skip(too_old)
    try:
        problems = {c.label: oracle_check.check_one(c, oracle_plugins) for c in checks}
    except Exception:
        for c in checks:  # the oracle alone: is it the one that cannot run here?
            try:
                oracle_check.run_oracle(c, oracle_plugins.registry)
            except Exception as e:  # noqa: BLE001
                skip_where_the_oracle_cannot_run([f"oracle: {e}"])
        raise
    problems = {k: v for k, v in problems.items() if v}
    assert not problems, "\n".join(f"{k}: {'; '.join(v)}" for k, v in problems.items())


def test_every_decomposition_has_an_oracle():
    missing = oracle_check.without_oracle(_REGISTRY, BUILTIN)
    assert not missing, "decompositions without an oracle:\n" + "\n".join(missing)


def test_every_kernel_of_a_decomposed_op_declares_its_output_types_on_a_sample():
    """Where an op has both a decomposition and a Python kernel, some sample has input types
    of a kernel signature, so the kernel's declared output types meet the decomposition's."""
    unchecked = oracle_check.kernels_never_type_checked(_REGISTRY, BUILTIN)
    assert not unchecked, "\n".join(unchecked)


ACME = '''
import numpy as np
from onnx import helper

from rewriter import hookimpl
from rewriter.plugin import kernel
from rewriter.registry import OpSample


def twice(x):
    """com.acme::Twice as documented: 2 x."""
    return 2 * x


def softplus(x):
    """com.acme::SoftPlus as documented: log(1 + exp(x)), without overflow."""
    return np.logaddexp(0, x).astype(x.dtype)


@kernel(signatures=["float -> int32"])
def sign_kernel(x):
    return np.sign(x).astype(np.int32)


def _body(name, nodes, opset=17):
    return helper.make_function("com.acme", name, ["x"], ["y"], nodes,
                                [helper.make_opsetid("", opset)])


THRICE = _body("twice", [helper.make_node("Constant", [], ["k"], value_float=3.0),
                         helper.make_node("Mul", ["x", "k"], ["y"])])
SIGN64 = _body("sign", [helper.make_node("Sign", ["x"], ["s"]),
                        helper.make_node("Cast", ["s"], ["y"], to=7)])
# right on small x, inf for large x (exp overflows before the log brings it back)
NAIVE_SOFTPLUS = _body("softplus", [helper.make_node("Exp", ["x"], ["e"]),
                                    helper.make_node("Constant", [], ["one"], value_float=1.0),
                                    helper.make_node("Add", ["e", "one"], ["s"]),
                                    helper.make_node("Log", ["s"], ["y"])])


@hookimpl
def register_decompositions(registry):
    registry.add("com.acme", "Twice", THRICE, opsets=(17, None), dtypes=["float"],
                 oracle=f"{__name__}:twice", samples=[OpSample(["T[2,3]"])])
    registry.add("com.acme", "SoftPlus", NAIVE_SOFTPLUS, opsets=(17, None), dtypes=["float"],
                 oracle=f"{__name__}:softplus", samples=[OpSample(["T[12]"])])
    registry.add("com.acme", "Sign", SIGN64, opsets=(17, None), dtypes=["float"],
                 oracle="kernel", samples=[OpSample(["T[4]"], ["int32"])])
    registry.add("", "Swish", _body("swish", [helper.make_node("Sigmoid", ["x"], ["y"])], 24),
                 opsets=(24, None), dtypes=["float"], oracle="onnxruntime",
                 samples=[OpSample(["T[4]"])])


@hookimpl
def register_kernels(registry):
    registry.add("com.acme", "Sign", f"{__name__}:sign_kernel")
'''


@pytest.fixture(scope="module")
def acme(tmp_path_factory):
    path = tmp_path_factory.mktemp("acme") / "acme_oracles.py"
    path.write_text(ACME)
    plugins = oracle_check.oracle_plugins([str(path)])
    return plugins, {(e.domain, e.op_type): e for e in plugins.registry.decompositions
                     if e.plugin == "acme_oracles"}


def _only_check(entry):
    (check,) = oracle_check.checks(entry)
    return check


def test_a_wrong_body_is_a_disagreement(acme):
    plugins, entries = acme
    problems = oracle_check.check_one(_only_check(entries[("com.acme", "Twice")]), plugins)
    assert problems and "6 of 6 values differ" in problems[0], problems


def test_a_body_wrong_only_at_the_edges_is_a_disagreement(acme):
    """The sample's own draw (in [-2, 2)) agrees; the edges regime (magnitudes up to 1e4,
    rewriter.io.regimes) shows the naive SoftPlus overflowing where the op does not."""
    plugins, entries = acme
    check = _only_check(entries[("com.acme", "SoftPlus")])
    assert check.labels == ["typical", "edges"]  # 12 elements hold every named edge
    typical = oracle_check.build(check.entry, check.entry.samples[0], "float", regimes=False)
    assert typical.labels == ["typical"] and not oracle_check.check_one(typical, plugins)
    problems = oracle_check.check_one(check, plugins)
    assert problems and all("(edges)" in p for p in problems[:-1]), problems


def test_a_wrong_output_type_is_a_disagreement(acme):
    """The body gives int64 where the op (and its kernel) give int32."""
    plugins, entries = acme
    problems = " ".join(oracle_check.check_one(_only_check(entries[("com.acme", "Sign")]),
                                               plugins))
    assert "dtype int64, the oracle gives int32" in problems
    assert "dtype int64, the op declares int32" in problems
    assert "declares outputs (int32), the decomposition gives (int64)" in problems


def test_an_oracle_that_would_run_the_function_body_is_refused(acme):
    """onnxruntime 1.32 has no Swish kernel of its own: as an oracle it is not independent."""
    plugins, entries = acme
    with pytest.raises(AssertionError, match="not independent"):
        oracle_check.check_one(_only_check(entries[("", "Swish")]), plugins)


def test_a_sample_needing_a_newer_onnxruntime_says_so_and_why(acme):
    """``OpSample(min_onnxruntime=(version, why))``: the check is not decided below it."""
    import dataclasses

    import onnxruntime

    from rewriter.registry import OpSample

    check = _only_check(acme[1][("com.acme", "Twice")])
    newer = dataclasses.replace(check, min_onnxruntime=("999.1", "its kernel came later"))
    why = oracle_check.needs_newer_onnxruntime(newer)
    assert why and "needs onnxruntime >= 999.1" in why and "its kernel came later" in why
    assert onnxruntime.__version__ in why
    installed = dataclasses.replace(check, min_onnxruntime=(onnxruntime.__version__, "x"))
    assert oracle_check.needs_newer_onnxruntime(installed) is None
    with pytest.raises(ValueError, match="min_onnxruntime"):
        OpSample(["T[2]"], min_onnxruntime=("1.24",))


def test_kernel_types_run_along_a_chain_and_declare_each_value_once(tmp_path):
    """typed_through_kernels: a chain of ops no schema types (com.acme::FusedSwish feeding
    another, twice over, one value already declared) gets each kernel output's element type
    declared once, the given model left as it is; onnxruntime then runs the retargeted
    chain, checked against numpy's swish."""
    import numpy as np
    from conftest import FUSED_SWISH_KERNEL_SOURCE, FUSED_SWISH_SOURCE
    from onnx import TensorProto, helper

    from rewriter.comparison.oracles import typed_through_kernels, with_kernels
    from rewriter.comparison.runtime import session
    from rewriter.detect.targets import TargetOptions, resolve_targets
    from rewriter.manager import load_plugins

    plugin = tmp_path / "acme_swish_kernel.py"
    plugin.write_text("from onnx import parser\nfrom rewriter import hookimpl\n"
                      + FUSED_SWISH_SOURCE + FUSED_SWISH_KERNEL_SOURCE)
    plugins = load_plugins([str(plugin)], autoload=False)
    names = ["x", "a", "b", "c", "y"]
    nodes = [helper.make_node("FusedSwish", [names[i]], [names[i + 1]], domain="com.acme",
                              name=f"swish{i}") for i in range(4)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6])],
        value_info=[helper.make_tensor_value_info("b", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                    helper.make_opsetid("com.acme", 1)])
    before = model.SerializeToString()
    (target,) = resolve_targets(plugins, ["onnxruntime"], TargetOptions(confirm=False))
    typed = typed_through_kernels(model, plugins, target)
    declared = [v.name for v in typed.graph.value_info]
    assert sorted(declared) == ["a", "b", "c"]
    assert all(v.type.tensor_type.elem_type == TensorProto.FLOAT for v in typed.graph.value_info)
    assert model.SerializeToString() == before
    retargeted, why = with_kernels(model, plugins)
    assert retargeted is not None, why
    x = np.linspace(-3, 3, 6).astype(np.float32)
    (got,) = session(retargeted, plugins=plugins).run(None, {"x": x})
    want = x
    for _ in range(4):
        want = want / (1 + np.exp(-want))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
