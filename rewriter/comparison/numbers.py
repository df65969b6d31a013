"""Whether a runtime that runs a model computes what the model says.

A runtime can load a model and run it with other numbers than its operators define (the
reference evaluator's ``SVMClassifier`` probabilities, OpenVINO's bit-level casts of large
values): "it runs" is then not the answer a user needs. When a target's confirmation ran
the model, the model is compared with itself: the oracle (the first runtime of
:mod:`~rewriter.comparison.oracles`' chain) against the target's runtime, on the same
inputs (:func:`~rewriter.comparison.compare.compare`, its input regimes included). A
difference is a ``computes-differently`` finding on the first node whose outputs diverge
while its inputs agree (every main-graph node's outputs exposed in both runs), which
``rewrite`` remedies like any other finding (a decomposition into ops the runtime computes
right). Two runtimes disagreeing on the original decide nothing (a note, no finding).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from onnx import ModelProto

from rewriter.detect.targets import Finding, Target
from rewriter.detect.walker import finding_at
from rewriter.io.model import LoadedModel

COMPUTES_DIFFERENTLY = "computes-differently"


@dataclass
class NumbersCheck:
    """The target's outputs against the oracle's: a note for the report, and the findings
    (one, on the first diverging node or the model, or none)."""

    note: str
    findings: list[Finding] = field(default_factory=list)
    compared: bool = False  # both ran on the same inputs and were compared


def check_numbers(loaded: LoadedModel, target: Target, *, plugins: Any,
                  types: Mapping[str, str] | None = None,
                  custom_op_libraries=(), **compare_options) -> NumbersCheck:
    """Compare ``target``'s run of ``loaded`` with the oracle's (see the module's
    docstring). ``types``: the main graph's value types (the detection's), given to a
    finding's node for the rewrite engine. ``compare_options``: for
    :func:`~rewriter.comparison.compare.compare` (``inputs``, ``dims``, ``timeout``...)."""
    from rewriter.comparison.compare import MISMATCH, compare
    from rewriter.verify.verdicts import VERIFIED

    if not target.compares_numbers:
        return NumbersCheck("")
    report = compare(loaded, loaded, [target.name], plugins=plugins,
                     custom_op_libraries=custom_op_libraries, localize_nodes=True,
                     **compare_options)
    oracle = report.oracle_label
    if oracle and _runtime(oracle) == _runtime(target.name):
        tried = "; ".join(f"{a['target']}: {a['error']}" for a in report.oracle_attempts
                          if a.get("status") != "ok" and a.get("error")) or "none"
        return NumbersCheck("numbers not compared: no other runtime ran the model on these "
                            f"inputs ({tried})")
    sets = report.inputs.get("sets", 0)
    tc = next((t for t in report.targets if t.status == MISMATCH), None)
    if tc is None:
        shipped = _against_test_data(loaded, target, plugins, types, custom_op_libraries,
                                     compare_options, oracle if report.verdict == VERIFIED
                                     else None)
        if shipped is not None:
            return shipped
    if report.verdict == VERIFIED:
        return NumbersCheck(f"its outputs equal {oracle}'s on {sets} input set(s)",
                            compared=True)
    if tc is None:  # it did not run on these inputs, or the runtimes disagree on the model
        return NumbersCheck(f"numbers not compared: {report.summary()}")
    worst, error = _worst_output(tc)
    regime = getattr(worst, "regime", "") or ""
    on = f"input set {worst.input_set}" + (f" ({regime})" if regime else "")
    detail = (f"{target.name} runs it but computes other numbers than {oracle}: output "
              f"{worst.name!r} differs ({error}, {on})")
    loc = tc.localization
    if loc is not None and loc.region is not None and loc.status in ("found", "upstream"):
        detail += f"; {loc.message}"
        finding = finding_at(loaded.model, target.name, loc.region.index,
                             COMPUTES_DIFFERENTLY, detail, types)
    else:
        if loc is not None:
            detail += f"; {loc.message}"
        finding = Finding(target.name, "model", "", "", None, COMPUTES_DIFFERENTLY, detail)
    return NumbersCheck(f"computes differently from {oracle}", [finding], compared=True)


def _worst_output(tc) -> tuple[Any, str]:
    """The mismatching target's worst output comparison, and its error in words."""
    bad = [c for c in tc.outputs if not c.ok]
    worst = max(bad, key=lambda c: -1.0 if c.max_abs is None else c.max_abs)
    return worst, (f"max abs error {worst.max_abs:.3g}" if worst.max_abs is not None
                   else worst.detail or "values differ")


def _against_test_data(loaded: LoadedModel, target: Target, plugins: Any,
                       types: Mapping[str, str] | None, custom_op_libraries,
                       compare_options: Mapping[str, Any], agreeing: str | None
                       ) -> NumbersCheck | None:
    """The target's outputs on the test data beside the model (``test_data_set_*`` with
    their ``output_*.pb``) against those outputs, when the comparison with the oracle found
    nothing (``agreeing``: the oracle, which computed what the target did): a difference is
    a finding, on the node of a one-node model, else on the model. None: no such test
    data, or the target's outputs equal them."""
    from rewriter.comparison.compare import MISMATCH, compare
    from rewriter.io.regimes import test_data_folders

    folders = test_data_folders(loaded.path) if loaded.path is not None else []
    if not folders or not all(any(p.glob("output_*.pb")) for p in folders):
        return None
    options = {k: v for k, v in compare_options.items() if k not in ("inputs", "quick")}
    paths = [str(p) for p in folders]
    report = compare(loaded, None, [target.name], plugins=plugins, expected=paths,
                     inputs=paths, custom_op_libraries=custom_op_libraries, **options)
    tc = next((t for t in report.targets if t.status == MISMATCH), None)
    if tc is None:
        return None
    worst, error = _worst_output(tc)
    detail = (f"{target.name} runs it but computes other numbers than the test data beside "
              f"the model: output {worst.name!r} differs ({error}, test data set "
              f"{worst.input_set})" + (f"; {agreeing} computes what {target.name} does"
                                       if agreeing else ""))
    if len(loaded.model.graph.node) == 1:
        finding = finding_at(loaded.model, target.name, 0, COMPUTES_DIFFERENTLY, detail,
                             types)
    else:
        finding = Finding(target.name, "model", "", "", None, COMPUTES_DIFFERENTLY, detail)
    return NumbersCheck("computes differently from the test data beside the model",
                        [finding], compared=True)


def numbers_inputs(loaded: LoadedModel, confirmation) -> dict[str, Any] | None:
    """The ``inputs`` option of the numbers check after ``confirmation``: ``{}`` (its own
    input regimes) when it ran the model, the test data beside the model when the run on
    generated inputs failed (the inputs may have been the cause: a Resize whose generated
    scales OpenVINO cannot take), None when there is nothing to compare on."""
    from rewriter.io.regimes import test_data_folders

    if confirmation is None:
        return None
    if confirmation.ran:
        return {}
    folders = (test_data_folders(loaded.path) if confirmation.inconclusive_run
               and loaded.path is not None else [])
    return {"inputs": [str(p) for p in folders]} if folders else None


def _runtime(label: str) -> str:
    """The runtime a target spec or oracle label names ("onnxruntime with plugin kernels"
    and "onnxruntime:ops=FILE" are onnxruntime)."""
    return label.split(":")[0].split(" ")[0]


def numbers_for(loaded: LoadedModel, plugins: Any, custom_op_libraries=(),
                **compare_options):
    """The rewrite engine's ``numbers`` hook for ``loaded``: given the model, a target and
    the main graph's types and the target's confirmation, the ``computes-differently``
    findings (the engine calls it for a target whose confirmation ran the model, or loaded
    it and failed on generated inputs: then on the test data beside it)."""

    def numbers(model: ModelProto, target: Target, types: Mapping[str, str],
                confirmation=None) -> list[Finding]:
        subject = loaded if model is loaded.model else LoadedModel(
            model, loaded.path, loaded.file_size, loaded.external_files, loaded.folder)
        inputs = numbers_inputs(subject, confirmation) if confirmation is not None else {}
        if inputs is None:
            return []
        # a rewritten model's inputs are read as the original reads them
        informed = {"informed_by": [loaded.model]} if subject is not loaded else {}
        return check_numbers(subject, target, plugins=plugins, types=types,
                             custom_op_libraries=custom_op_libraries,
                             **{**compare_options, **inputs, **informed}).findings

    return numbers
