"""Every registered decomposition of the built-in plugins against its independent oracle
(``registry.add(..., oracle=..., samples=...)``; ``rewriter.oracle_check``), at every dtype
it claims: values, shapes and element types must agree, and a Python kernel of the same op
must declare the decomposition's output types. A newly registered op is included
automatically; one without an oracle fails ``test_every_decomposition_has_an_oracle``.
"""

from __future__ import annotations

import pytest

from rewriter import oracle_check
from rewriter.manager import load_plugins

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
    problems = {c.label: oracle_check.check_one(c, oracle_plugins) for c in checks}
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
