"""The ONNX backend node cases a runtime runs but gets wrong ("computes differently").

``python benchmarks/wrong_numbers.py --target openvino`` runs every node case that ships
inside the ``onnx`` package on the target (as ``onnx-rewriter`` runs models there: the
target's own run path, in the isolation worker, so a crash or a hang is a verdict) with the
case's own inputs, and lists the cases that run but whose outputs differ from the case's
expected ones beyond its tolerances, with the ops of each case's graph and their input
types (in a one-node case, the diverging op). ``--target`` is ``openvino``, ``tract`` or
``reference`` (the ONNX reference evaluator).

``--rescue`` then asks, for each wrong case, what the tool does about it, as a user would:
the case written as the ONNX repository lays it out (``model.onnx`` beside its
``test_data_set_0``), ``check --target T MODEL`` with its defaults (the confirmation, which
compares the target's numbers with the oracle's on the regimes and the test data: a
``computes-differently`` finding), and ``rewrite --target T MODEL -o OUT`` with its defaults
(verification on): rescued when the result runs on the target with the case's expected
outputs. A result the rewrite calls verified that does not is a false verdict.

A case whose outputs differ from the expected ones only within the rounding of their float
type at the output's magnitude (``_common.within_rounding``: onnx's ``atol`` of 1e-7 is
below float32's resolution at 540, and onnxruntime's own DFT misses it by 3e-4) matches, as
in the conformance benchmarks; such cases are listed apart (``rounding``).

``--only NAME`` (repeatable) restricts the run to some cases; ``--json`` prints JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    TargetRunner,
    all_cases,
    draws_random,
    load_plugins,
    select,
    write_case,
)
from conformance import _short  # noqa: E402

TARGETS = ("openvino", "tract", "reference")


@dataclass
class Wrong:
    """A case the target runs with outputs other than the expected ones."""

    name: str
    op: str  # the diverging op: the node of a one-node case, else the op a case expands
    ops: list[str]  # op(input types) of the case's main graph, in order
    problem: str
    random: bool  # the case draws random numbers: its expected outputs are numpy's draws
    finding: str | None = None  # what check reports (--rescue), None: nothing
    rescued: bool | None = None  # --rescue: the rewrite runs with the expected outputs
    rescue_problem: str | None = None  # why not
    verdict: str | None = None  # --rescue: the rewrite's own verdict
    has_remedy: bool | None = None  # --rescue: some plugin offers a remedy for the finding


@dataclass
class Result:
    target: str
    total: int = 0
    runs: int = 0
    refused: int = 0
    wrong: list[Wrong] = field(default_factory=list)
    # off the expected outputs only within their float type's rounding (not counted wrong)
    rounding: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict:
        data = asdict(self)
        wrong = [w for w in self.wrong if not w.random]
        data["wrong_count"] = len(wrong)
        data["random_count"] = len(self.wrong) - len(wrong)
        data["by_op"] = dict(Counter(w.op.split("(")[0].strip() for w in wrong).most_common())
        if any(w.rescued is not None for w in wrong):
            data["with_finding"] = sum(w.finding is not None for w in wrong)
            data["with_remedy"] = sum(bool(w.has_remedy) for w in wrong)
            data["rescued"] = sum(bool(w.rescued) for w in wrong)
            data["rescued_with_remedy"] = sum(bool(w.rescued) for w in wrong if w.has_remedy)
            data["false_verdicts"] = [w.name for w in wrong
                                      if w.verdict == "verified" and not w.rescued]
        return data




def _diverging_op(case, labels: list[str], by_name: dict) -> str:
    """The op a wrong case is about: its node, or for an ``_expanded`` case (a function's
    body) the node of the case it expands."""
    if len(labels) == 1:
        return labels[0]
    base = by_name.get(case.name.removesuffix("_expanded"))
    if case.name.endswith("_expanded") and base is not None and len(base.graph.node) == 1:
        return f"{base.graph.node[0].op_type} (expanded: {len(labels)} nodes)"
    return f"{len(labels)} nodes"


def _op_labels(model) -> list[str]:
    """``Op-version(input types)`` of each main-graph node (types from shape inference)."""
    import onnx
    from onnx import helper

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - the labels then go without the types
        inferred = model
    types = {v.name: v.type for v in (*inferred.graph.input, *inferred.graph.value_info,
                                      *inferred.graph.output)}
    types.update({t.name: helper.make_tensor_type_proto(t.data_type, t.dims)
                  for t in inferred.graph.initializer})
    versions = {o.domain or "": o.version for o in model.opset_import}
    labels = []
    for node in inferred.graph.node:
        kinds = []
        for name in node.input:
            tp = types.get(name)
            kinds.append("" if not name else
                         helper.tensor_dtype_to_np_dtype(tp.tensor_type.elem_type).name
                         if tp is not None and tp.HasField("tensor_type")
                         and tp.tensor_type.elem_type else "?")
        domain = f"{node.domain}::" if node.domain not in ("", "ai.onnx") else ""
        labels.append(f"{domain}{node.op_type}-{versions.get(node.domain, '?')}"
                      f"({', '.join(kinds)})")
    return labels


def _finding(path, target: str, plugins) -> tuple[str | None, bool]:
    """What ``check --target`` reports on the model file (with its confirmation), or None;
    and whether the remedy check plans for it is one (not "none: ...")."""
    from rewriter.api import check

    (result,) = check(str(path), [target], plugins=plugins).results
    if not result.findings:
        return None, False
    f = result.findings[0]
    planned = any(not v.startswith("none") for v in result.plan.values())
    return _short(f"{f.op_label}: {f.reason}: {f.detail}", 200), planned


def _rewrite(path, target: str, plugins):
    """``rewrite --target`` of the model file as users run it (defaults: confirmation and
    verification on; whatever the verdict, the result is kept to be judged here): (model,
    report) or (None, why)."""
    from rewriter.api import rewrite
    from rewriter.errors import RewriterError

    try:
        result = rewrite(str(path), [target], plugins=plugins,
                         output=path.with_name("rewritten.onnx"),
                         allow_unverified=True, keep_failed=True)
    except RewriterError as e:
        return None, _short(str(e), 300)
    except Exception as e:  # noqa: BLE001 - the engine's crash is a result here
        return None, f"rewrite raised {type(e).__name__}: {_short(str(e))}"
    import onnx

    written = result.report.written and onnx.load(str(path.with_name("rewritten.onnx")))
    return (written or None), result.report


def measure(target: str, cases, *, rescue: bool = False, progress=None) -> Result:
    plugins = load_plugins()
    by_name = {c.name: c.model for c in all_cases()}
    runner = TargetRunner(target, plugins)
    out = Result(target, total=len(cases))
    start = time.perf_counter()
    try:
        for case in cases:
            if progress:
                progress(case.name)
            actual = runner.actual(case.model, case)
            if not actual.runs:
                out.refused += 1
                continue
            out.runs += 1
            if actual.problem is None:
                if actual.rounding:
                    out.rounding.append(case.name)
                continue
            labels = _op_labels(case.model)
            random = draws_random(case.model)
            wrong = Wrong(case.name, _diverging_op(case, labels, by_name), labels,
                          actual.problem, random)
            if rescue and not random:
                with tempfile.TemporaryDirectory() as tmp:
                    path = write_case(case, Path(tmp) / case.name)
                    wrong.finding, wrong.has_remedy = _finding(path, target, plugins)
                    model, report = _rewrite(path, target, plugins)
                problem = report if model is None else None
                if model is not None:
                    wrong.verdict = report.verdict
                    if not report.applied:
                        problem = f"nothing rewritten ({report.verdict_reason})"
                if problem is None:
                    problem = runner.actual(model, case).problem
                wrong.rescued, wrong.rescue_problem = problem is None, problem
            out.wrong.append(wrong)
    finally:
        runner.close()
    out.seconds = time.perf_counter() - start
    return out


def print_result(result: Result) -> None:
    data = result.as_dict()
    print(f"{result.target}: {result.total} cases ({result.seconds:.0f}s): runs "
          f"{result.runs}, refuses {result.refused}; runs but gets wrong: "
          f"{data['wrong_count']} (and {data['random_count']} drawing random numbers)")
    for w in result.wrong:
        print(f"  {w.name}{' (random)' if w.random else ''}: {w.op}")
        print(f"      {w.problem}")
        if w.rescued is not None:
            print(f"      check: {w.finding or 'no finding'}")
            print(f"      rewrite ({w.verdict or 'not written'}): "
                  f"{'rescued' if w.rescued else w.rescue_problem}")
    print("by op: " + ", ".join(f"{op} {n}" for op, n in data["by_op"].items()))
    if data["rounding"]:
        print(f"within the rounding of their float type (not counted): {data['rounding']}")
    if "rescued" in data:
        print(f"with a finding: {data['with_finding']} of {data['wrong_count']}; with a "
              f"remedy: {data['with_remedy']}; rescued: {data['rescued']} "
              f"({data['rescued_with_remedy']} of those with a remedy); false verdicts: "
              f"{len(data['false_verdicts'])} {data['false_verdicts']}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=TARGETS, required=True)
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help="a node case to run (repeatable; default: all)")
    parser.add_argument("--rescue", action="store_true",
                        help="also check and rewrite each wrong case")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--progress", action="store_true", help="name each case on stderr")
    args = parser.parse_args(argv)

    def progress(name: str) -> None:
        print(name, file=sys.stderr, flush=True)

    result = measure(args.target, select(args.only), rescue=args.rescue,
                     progress=progress if args.progress else None)
    if args.json:
        print(json.dumps(result.as_dict(), indent=2))
    else:
        print_result(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
