"""``rewrite --target opset:N`` on the vendor-op node samples, raised to a new opset.

Every built-in decomposition of an op outside the standard domains (``com.microsoft``,
``org.pytorch.aten``, TensorRT, mmdeploy, ``ai.onnx.preview`` ...) registers one-node
samples (``registry.add(..., samples=...)``, the ones ``tests/test_oracles.py`` checks). Each
sample model is raised to import ai.onnx at ``--model-opset`` (22 by default, as the
onnxruntime-genai builder writes them; the node itself is the vendor op, whose meaning does
not depend on that import) and rewritten for ``opset:13`` and ``opset:17``. A sample counts
when the result

1. is produced (no ``UnfixableError``),
2. passes ``onnx.checker.check_model(full_check=True)``,
3. imports nothing above the ceiling: ai.onnx and ai.onnx.ml of the model and of every
   model-local function at most N, and no node left in a vendor domain,
4. gives the oracle's outputs (the registration's oracle run on the sample: onnxruntime's
   own contrib kernel, the plugin's numpy kernel, the reference evaluator...) when run on
   onnxruntime, or on the reference evaluator where onnxruntime has no kernel for a type.

A sample whose ``min_onnxruntime`` is above the installed onnxruntime is ``skipped``, with
the sample's reason.

    python benchmarks/downconvert_vendor.py                  # opset 13 and 17
    python benchmarks/downconvert_vendor.py --opset 13 --op MatMulNBits --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field

MODEL_OPSET = 22
STANDARD = ("", "ai.onnx", "ai.onnx.ml")
STAGES = ("converted", "checker", "ceiling", "matches")


@dataclass
class Sample:
    label: str
    op: str  # DOMAIN::OP
    check: object  # rewriter.testing.Check (the sample at its own opset)
    model: object  # the same, importing ai.onnx at the raised opset


def vendor_samples(plugins, model_opset: int = MODEL_OPSET,
                   ops: list[str] | None = None) -> tuple[list[Sample], dict[str, str]]:
    """The samples of every built-in vendor-op decomposition that covers ``model_opset``,
    raised to it; and the registrations left out, with why."""
    from onnx import helper

    from rewriter import testing

    registry = plugins.registry
    builtin = {name for name, info in registry.plugins.items() if info.builtin}
    samples, left_out = [], {}
    for entry in registry.decompositions:
        if entry.plugin not in builtin or entry.domain in STANDARD:
            continue
        if ops and entry.op_type not in ops:
            continue
        label = testing.label(entry)
        if not entry.covers(model_opset):
            left_out[label] = f"registered for opsets {entry.opsets}, not {model_opset}"
            continue
        runs = testing.sample_runs(entry)
        if not runs:
            left_out[label] = "no sample"
        for sample, dtype in runs:
            check = testing.build(entry, sample, dtype)
            model = type(check.model)()
            model.CopyFrom(check.model)
            imports = [o for o in model.opset_import if o.domain not in ("", "ai.onnx")]
            del model.opset_import[:]
            model.opset_import.extend([helper.make_opsetid("", model_opset), *imports])
            model.ir_version = max(model.ir_version, 10)
            samples.append(Sample(check.label, f"{entry.domain}::{entry.op_type}", check,
                                  model))
    return samples, left_out


def above_ceiling(model, ceiling: int) -> list[str]:
    """Imports above ``ceiling`` (model and local functions) and nodes left in a vendor
    domain."""
    from rewriter.graph.walk import iter_nodes

    problems = []
    for where, imports in [("model", model.opset_import),
                           *[(f"function {f.name}", f.opset_import) for f in model.functions]]:
        for o in imports:
            if o.domain in STANDARD and o.version > ceiling:
                problems.append(f"{where} imports {o.domain or 'ai.onnx'} {o.version}")
    vendor = sorted({f"{site.domain}::{site.node.op_type}" for site in iter_nodes(model)
                     if site.domain not in STANDARD})
    if vendor:
        problems.append("vendor ops left: " + ", ".join(vendor))
    return problems


def _run(model, feeds_list) -> tuple[list, str]:
    """Outputs per data set on onnxruntime, or on the reference evaluator where onnxruntime
    has no kernel for some type; and which ran."""
    from rewriter import testing

    try:
        session = testing._ort_session(model, optimize=False)
        return [session.run(None, f) for f in feeds_list], "onnxruntime"
    except Exception as e:  # noqa: BLE001 - sorted below
        refusal = (str(e).strip().splitlines() or [type(e).__name__])[0]
        if not any(reason in refusal for reason in testing.RUNTIME_LIMITS):
            raise
    from onnx.reference import ReferenceEvaluator

    evaluator = ReferenceEvaluator(model)
    return [list(evaluator.run(None, f)) for f in feeds_list], "reference evaluator"


def evaluate(sample: Sample, ceiling: int, plugins) -> dict:
    """Rewrite one raised sample for ``opset:<ceiling>`` and measure every stage."""
    import onnx

    from rewriter import testing
    from rewriter.api import rewrite
    from rewriter.errors import UnfixableError

    result: dict = {"sample": sample.label, "op": sample.op, "ceiling": ceiling}
    check = sample.check
    too_old = testing.needs_newer_onnxruntime(check)
    if too_old:  # the sample says its oracle is not decided by this onnxruntime
        result["stage"], result["why"] = "skipped", [too_old.split(": ", 1)[1]]
        return result
    try:
        expected = testing.run_oracle(check, plugins.registry)
    except Exception as e:  # noqa: BLE001
        result["stage"], result["why"] = "error", [f"oracle: {_line(e)}"]
        return result
    absent = [i for data_set in expected for i, v in enumerate(data_set) if v is None]
    if absent:  # an optional output its kernel does not compute: nothing to compare it with
        result["stage"] = "error"
        result["why"] = [f"oracle: gives no value for output {i}" for i in dict.fromkeys(absent)]
        return result
    model = with_output_shapes(sample.model, expected[0])
    try:
        report = rewrite(model, [f"opset:{ceiling}"], plugins=plugins, confirm=False,
                         verify=False)
    except UnfixableError as e:
        result["stage"] = "unfixable"
        result["why"] = [f"{op}: {reason or detail}" for _t, op, detail, reason, _n in e.groups]
        return result
    except Exception as e:  # noqa: BLE001 - an engine bug is a verdict too
        result["stage"], result["why"] = "error", [f"{type(e).__name__}: {_line(e)}"]
        return result
    out = report.model
    if out is None:  # the rewrite refused its own result (validation): nothing to measure
        result["stage"] = "unfixable"
        result["why"] = [f"not written: {report.report.verdict_reason}"]
        return result
    result["stage"] = "converted"
    try:
        onnx.checker.check_model(out, full_check=True)
    except Exception as e:  # noqa: BLE001
        result["why"] = [f"checker: {_line(e)}"]
        return result
    result["stage"] = "checker"
    problems = above_ceiling(out, ceiling)
    if problems:
        result["why"] = problems
        return result
    result["stage"] = "ceiling"
    try:
        untyped = type(out)()
        untyped.CopyFrom(out)
        for output in untyped.graph.output:  # the body's own types, not the declared ones
            output.ClearField("type")
        got, runtime = _run(untyped, check.feeds)
    except Exception as e:  # noqa: BLE001
        result["why"] = [f"run: {_line(e)}"]
        return result
    result["runtime"] = runtime
    problems = testing.set_differences(check, expected, got)
    if problems:
        result["why"] = [f"mismatch on {runtime}: {p}" for p in problems]
        return result
    result["stage"] = "matches"
    return result


def with_output_shapes(model, outputs: list):
    """A copy of ``model`` whose graph outputs declare the shapes of ``outputs`` (the
    oracle's): the samples declare none, which the full checker refuses. An output the
    oracle gives no value for (None) keeps its undeclared shape."""
    import numpy as np

    out = type(model)()
    out.CopyFrom(model)
    for info, value in zip(out.graph.output, outputs):
        if value is None or isinstance(value, list) or not info.type.HasField("tensor_type"):
            continue  # (None: no value, no shape to declare; not a rank-0 one)
        shape = info.type.tensor_type.shape
        shape.ClearField("dim")
        for size in np.shape(value):
            shape.dim.add().dim_value = size
    return out


def _line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:300]


@dataclass
class Summary:
    ceiling: int
    results: list[dict]
    left_out: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    def reached(self, stage: str) -> int:
        order = {s: i for i, s in enumerate(STAGES)}
        return sum(1 for r in self.results if order.get(r["stage"], -1) >= order[stage])

    def failures(self) -> Counter:
        return Counter((r["stage"], why) for r in self.results if r["stage"] != "matches"
                       for why in dict.fromkeys(r.get("why") or ["?"]))


def measure(ceiling: int, *, model_opset: int = MODEL_OPSET, ops: list[str] | None = None,
            plugins=None, progress=None) -> Summary:
    from rewriter.testing import oracle_plugins

    plugins = plugins or oracle_plugins()
    samples, left_out = vendor_samples(plugins, model_opset, ops)
    start = time.perf_counter()
    results = []
    for sample in samples:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            results.append(evaluate(sample, ceiling, plugins))
        if progress:
            progress(results[-1])
    return Summary(ceiling, results, left_out, time.perf_counter() - start)


def report(summary: Summary, model_opset: int = MODEL_OPSET) -> str:
    n = len(summary.results)
    ops = len({r["op"] for r in summary.results})
    lines = [f"opset:{summary.ceiling}: {n} samples of {ops} vendor ops, raised to opset "
             f"{model_opset} ({summary.seconds:.0f}s)",
             "  " + "  ".join(f"{s} {summary.reached(s)}" for s in STAGES)]
    for (stage, why), count in summary.failures().most_common():
        lines.append(f"    {count:4d}  after {stage}: {why[:220]}")
    for label, why in sorted(summary.left_out.items()):
        lines.append(f"  left out {label}: {why}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--opset", type=int, action="append",
                        help="ceiling (repeatable; default 13 and 17)")
    parser.add_argument("--model-opset", type=int, default=MODEL_OPSET,
                        help=f"the ai.onnx import the samples are raised to ({MODEL_OPSET})")
    parser.add_argument("--op", action="append", help="only these op types (repeatable)")
    parser.add_argument("--json", help="write every result to this file")
    args = parser.parse_args(argv)
    from rewriter.testing import oracle_plugins

    plugins = oracle_plugins()
    summaries = []
    for ceiling in args.opset or [13, 17]:
        summary = measure(ceiling, model_opset=args.model_opset, ops=args.op, plugins=plugins)
        summaries.append(summary)
        print(report(summary, args.model_opset), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"ceiling": s.ceiling, "results": s.results, "left_out": s.left_out}
                       for s in summaries], f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
