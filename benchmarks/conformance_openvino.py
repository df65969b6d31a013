"""OpenVINO (CPU) on the ONNX backend node cases that ship inside the ``onnx`` package.

``python benchmarks/conformance_openvino.py check`` compares ``check --target openvino``
(static, no confirmation) with what OpenVINO really does with each case: convert and compile
it, run it on the case's inputs, and compare with the case's expected outputs. It prints
the confusion matrix against "compiles" and against "runs", and the disagreements.

``python benchmarks/conformance_openvino.py confirm`` compares ``check --target openvino``
as users get it (the static check, then the confirmation: compile and run once on generated
inputs in a child process) with OpenVINO's own convert + compile + run on the case's inputs,
on every case OpenVINO refuses plus a seeded sample of those it runs (``--sample 300``,
``--seed 0``).

``python benchmarks/conformance_openvino.py rescue [--refused-sample 120 --seed 0]``
measures ``rewrite --target openvino`` (on all cases, or on a fixed seeded sample of the
cases OpenVINO refuses):
every case OpenVINO refuses (it fails to convert, compile or run it) is rewritten and counted
as rescued when the result runs on OpenVINO and matches the case's expected outputs within
the case's tolerances on every data set. Every case OpenVINO runs must come back unchanged
(no remedy applied), or, where the static check asked for a rewrite, with outputs that still
match. Failures are grouped by reason.

Every model runs in the isolation worker (``rewriter.comparison.isolation.Runner``), so an OpenVINO
crash or hang is a verdict, not the end of the benchmark. ``--only NAME`` (repeatable)
restricts either measure to some cases; ``--json`` prints the result as JSON.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conformance import (  # noqa: E402
    Confirmed,
    _as_array,
    _same_nodes,
    _short,
    compare_outputs,
    confirmed_agreement,
    node_testcases,
    print_confirmed,
    rewrite_case,
    verification_problem,
)

RUN_TIMEOUT_S = 120
TARGET = "openvino"

# What `rescue` reached (onnx 1.23, OpenVINO 2026.4, the plugins of this tree): the cases
# rewritten into models OpenVINO runs with the expected outputs. tests/test_openvino.py
# re-runs them (and RUNNING_SAMPLE, which must stay untouched); raise MIN_RESCUED when a
# plugin rescues more, never lower it to make a change pass.
RESCUED = frozenset({
    "test_adagrad", "test_adagrad_multiple", "test_adam", "test_adam_multiple",
    "test_ai_onnx_ml_array_feature_extractor", "test_ai_onnx_ml_binarizer",
    "test_basic_deform_conv_with_padding", "test_basic_deform_conv_without_padding",
    "test_bitcast_2d_float32_to_int32", "test_bitcast_bool_to_uint8",
    "test_bitcast_float32_to_int32", "test_bitcast_int8_to_uint8",
    "test_bitcast_scalar_float32_to_int32", "test_bitcast_uint16_to_int16",
    "test_causal_conv_with_state_b1_c1_degenerate", "test_causal_conv_with_state_basic",
    "test_causal_conv_with_state_decode_step", "test_causal_conv_with_state_fp16",
    "test_causal_conv_with_state_kernel_size_one",
    "test_causal_conv_with_state_short_input_no_past_state", "test_causal_conv_with_state_silu",
    "test_causal_conv_with_state_silu_fp16", "test_causal_conv_with_state_silu_with_past_state",
    "test_causal_conv_with_state_swish_alias", "test_causal_conv_with_state_with_bias",
    "test_causal_conv_with_state_with_bias_and_past_state",
    "test_causal_conv_with_state_with_past_state", "test_celu_bfloat16", "test_celu_float16",
    "test_cumprod_1d", "test_cumprod_1d_exclusive", "test_cumprod_1d_int32_exclusive",
    "test_cumprod_1d_reverse", "test_cumprod_1d_reverse_exclusive", "test_cumprod_2d_axis_0",
    "test_cumprod_2d_axis_1", "test_cumprod_2d_int32", "test_cumprod_2d_negative_axis",
    "test_deform_conv_with_mask_bias", "test_deform_conv_with_multiple_offset_groups",
    "test_det_2d", "test_det_nd", "test_flexattention", "test_flexattention_causal_mask",
    "test_flexattention_diff_head_sizes", "test_flexattention_fp16", "test_flexattention_gqa",
    "test_flexattention_prob_mod", "test_flexattention_relative_positional",
    "test_flexattention_scaled", "test_flexattention_score_mod", "test_flexattention_soft_cap",
    "test_gridsample_volumetric_bilinear_align_corners_0",
    "test_gridsample_volumetric_bilinear_align_corners_1",
    "test_gridsample_volumetric_nearest_align_corners_0",
    "test_gridsample_volumetric_nearest_align_corners_1", "test_linear_attention_decode_step",
    "test_linear_attention_decode_step_expanded", "test_linear_attention_delta",
    "test_linear_attention_delta_expanded", "test_linear_attention_explicit_scale",
    "test_linear_attention_explicit_scale_expanded", "test_linear_attention_fp16",
    "test_linear_attention_fp16_expanded", "test_linear_attention_gated",
    "test_linear_attention_gated_delta", "test_linear_attention_gated_delta_beta_scalar",
    "test_linear_attention_gated_delta_beta_scalar_expanded",
    "test_linear_attention_gated_delta_expanded", "test_linear_attention_gated_delta_gqa",
    "test_linear_attention_gated_delta_gqa_expanded", "test_linear_attention_gated_delta_mqa",
    "test_linear_attention_gated_delta_mqa_expanded", "test_linear_attention_gated_expanded",
    "test_linear_attention_gated_per_head_decay",
    "test_linear_attention_gated_per_head_decay_expanded", "test_linear_attention_linear",
    "test_linear_attention_linear_expanded", "test_linear_attention_linear_t1_no_past",
    "test_linear_attention_linear_t1_no_past_expanded",
    "test_linear_attention_no_past_explicit_zeros",
    "test_linear_attention_no_past_explicit_zeros_expanded",
    "test_linear_attention_prefill_with_past", "test_linear_attention_prefill_with_past_expanded",
    "test_maxunpool_export_with_output_shape", "test_maxunpool_export_without_output_shape",
    "test_melweightmatrix", "test_mod_float16_mixed_sign_fmod_0",
    "test_mod_float32_mixed_sign_fmod_0", "test_mod_float64_mixed_sign_fmod_0",
    "test_mod_float_edge_cases_fmod_0_float16", "test_mod_float_edge_cases_fmod_0_float32",
    "test_momentum", "test_momentum_multiple", "test_nesterov_momentum",
    "test_optional_get_element_tensor",
    "test_optional_has_element_empty_no_input_name_optional_input",
    "test_optional_has_element_empty_no_input_name_tensor_input",
    "test_optional_has_element_empty_no_input_optional_input",
    "test_optional_has_element_empty_no_input_tensor_input",
    "test_quantizelinear_blocked_symmetric", "test_quantizelinear_float4e2m1",
    "test_resize_downsample_scales_linear_half_pixel_symmetric", "test_resize_tf_crop_and_resize",
    "test_resize_tf_crop_and_resize_axes_2_3", "test_resize_tf_crop_and_resize_axes_3_2",
    "test_resize_tf_crop_and_resize_extrapolation_value",
    "test_resize_upsample_scales_linear_half_pixel_symmetric", "test_stft",
    "test_stft_with_window", "test_swiglu", "test_swiglu_alpha", "test_swiglu_float16",
    "test_training_dropout_zero_ratio", "test_training_dropout_zero_ratio_mask",
    "test_unsqueeze_axis_0", "test_unsqueeze_axis_1", "test_unsqueeze_axis_2",
    "test_unsqueeze_negative_axes", "test_unsqueeze_three_axes", "test_unsqueeze_two_axes",
    "test_unsqueeze_unsorted_axes", "test_wrap_pad",
})
MIN_RESCUED = len(RESCUED)
# Cases OpenVINO runs as they are: a rewrite must leave them alone (a few op families,
# control flow included).
RUNNING_SAMPLE = frozenset({
    "test_relu", "test_add_bcast", "test_conv_with_strides_padding", "test_gelu_tanh_2",
    "test_layer_normalization_4d_axis0", "test_if", "test_softmax_axis_0",
    "test_gemm_default_scalar_bias",
})


def _feeds(model, data_sets) -> list[dict]:
    initializers = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in initializers]
    return [dict(zip(names, (_as_array(v) for v in inputs))) for inputs, _ in data_sets]


@dataclass
class Actual:
    """What OpenVINO did with one model: ``compiles``, ``runs`` (every data set ran), and
    ``problem`` (why not, or how the outputs differ from the expected ones; None if they
    match)."""

    compiles: bool
    runs: bool
    problem: str | None
    outputs: list | None = None


class OpenVINORunner:
    """Runs models on OpenVINO in the isolation worker."""

    def __init__(self, plugins) -> None:
        from rewriter.comparison.isolation import Runner

        self.plugins = plugins
        self.runner = Runner(plugins, timeout=RUN_TIMEOUT_S)
        self.base_dir = tempfile.mkdtemp(prefix="conformance-openvino-")

    def run(self, model, feeds: list[dict]):
        from rewriter.comparison.isolation import Job

        return self.runner.run(Job.make(TARGET, model, self.base_dir, feeds,
                                        plugins=self.plugins))

    def actual(self, model, case) -> Actual:
        """Compile and run ``model`` on ``case``'s inputs; compare with its expected
        outputs."""
        result = self.run(model, _feeds(model, case.data_sets))
        if not result.ok:
            compiles = result.kind == "error" and not result.error.startswith(
                "could not load the model")
            what = result.error if result.kind == "error" else f"{result.kind}: {result.error}"
            return Actual(compiles, False, _short(what, 240))
        names = [o.name for o in model.graph.output]
        for i, ((_, expected), got) in enumerate(zip(case.data_sets, result.outputs)):
            actual = [got.get(n) for n in names]
            if len(expected) != len(actual):
                return Actual(True, True, f"{len(actual)} outputs, expected {len(expected)}",
                              result.outputs)
            for j, (e, a) in enumerate(zip(expected, actual)):
                problem = compare_outputs(_as_array(e), a, case.rtol, case.atol, f" {j}")
                if problem:
                    where = f" (data set {i})" if len(case.data_sets) > 1 else ""
                    return Actual(True, True, f"mismatch{where}: {_short(problem, 200)}",
                                  result.outputs)
        return Actual(True, True, None, result.outputs)

    def close(self) -> None:
        self.runner.close()


def _plugins():
    from rewriter.manager import load_plugins

    return load_plugins(autoload=False)


@functools.cache
def all_cases() -> tuple:
    """Every backend node case (collected once per process: it takes seconds)."""
    return tuple(node_testcases())


def _select(only) -> list:
    cases = list(all_cases())
    if only:
        wanted = set(only)
        cases = [c for c in cases if c.name in wanted]
    return cases


# -- check: does the static answer predict OpenVINO? ------------------------------------------

@dataclass
class Agreement:
    total: int
    compiles: dict[str, int]  # "predicted/actual" against "converts and compiles"
    runs: dict[str, int]  # against "compiles and runs on the case's inputs"
    correct: int  # runs and matches the expected outputs
    disagreements: list[dict]
    seconds: float
    check_seconds: float

    def rate(self, matrix: dict[str, int]) -> float:
        agree = matrix.get("runs/runs", 0) + matrix.get("fails/fails", 0)
        return agree / self.total if self.total else 0.0


def measure_openvino_agreement(cases=None, *, per_node: bool = False,
                               progress=None) -> Agreement:
    """``check --target openvino --no-confirm`` against OpenVINO on every case.

    ``per_node``: probe every node (the target's whole-model fast path off), to measure
    the node-level answers alone."""
    from rewriter.api import resolve_targets
    from rewriter.detect.walker import find_unsupported

    plugins = _plugins()
    (target,) = resolve_targets(plugins, [TARGET])
    target.model_fast_path = not per_node
    cases = cases if cases is not None else node_testcases()
    compiles: Counter = Counter()
    runs: Counter = Counter()
    correct = 0
    disagreements = []
    runner = OpenVINORunner(plugins)
    start = time.perf_counter()
    check_seconds = 0.0
    try:
        for case in cases:
            if progress:
                progress(case.name)
            t0 = time.perf_counter()
            findings = find_unsupported(case.model, target)
            check_seconds += time.perf_counter() - t0
            predicted = "fails" if findings else "runs"
            actual = runner.actual(case.model, case)
            compiles[f"{predicted}/{'runs' if actual.compiles else 'fails'}"] += 1
            ran = "runs" if actual.runs else "fails"
            runs[f"{predicted}/{ran}"] += 1
            correct += actual.runs and actual.problem is None
            if predicted != ran:
                disagreements.append({
                    "case": case.name, "predicted": predicted, "actual": ran,
                    "finding": (f"{findings[0].op_label}: {findings[0].detail}"
                                if findings else None),
                    "openvino": actual.problem,
                })
    finally:
        runner.close()
    return Agreement(len(cases), dict(compiles), dict(runs), correct, disagreements,
                     time.perf_counter() - start, check_seconds)


def measure_confirmed_agreement(cases=None, *, sample: int = 300, seed: int = 0,
                                progress=None) -> Confirmed:
    """``check --target openvino`` (static check, then compile and run once on generated
    inputs in a child process) against OpenVINO's convert + compile + run on each case's
    own inputs, on every case OpenVINO refuses and ``sample`` (seeded) of those it runs."""
    plugins = _plugins()
    cases = list(cases if cases is not None else all_cases())
    runner = OpenVINORunner(plugins)
    start = time.perf_counter()
    try:
        actual = {}
        for case in cases:
            outcome = runner.actual(case.model, case)
            actual[case.name] = (outcome.runs, outcome.problem)
    finally:
        runner.close()
    return confirmed_agreement(cases, TARGET, actual, plugins, sample=sample, seed=seed,
                               progress=progress, start=start)


def print_agreement(result: Agreement) -> None:
    print(f"cases: {result.total}   ({result.seconds:.1f}s, of which static check "
          f"{result.check_seconds:.1f}s)")
    for title, matrix in (("converts and compiles", result.compiles),
                          ("compiles and runs on the case's inputs", result.runs)):
        print(f"\ncheck predicts vs OpenVINO {title}: agreement {result.rate(matrix):.2%}")
        print(f"{'':>16} {'runs':>8} {'fails':>8}")
        for p in ("runs", "fails"):
            print(f"{'predicts ' + p:>16} {matrix.get(p + '/runs', 0):>8} "
                  f"{matrix.get(p + '/fails', 0):>8}")
    ran = result.runs.get("runs/runs", 0) + result.runs.get("fails/runs", 0)
    print(f"\nOpenVINO runs {ran}; outputs match the expected ones in {result.correct}")
    for d in result.disagreements:
        print(f"- {d['case']}: predicted {d['predicted']}, actual {d['actual']}")
        print(f"    check: {d['finding']}")
        print(f"    openvino: {d['openvino']}")


# -- rescue: rewrite what OpenVINO refuses, leave alone what it runs -------------------------

@dataclass
class Rescue:
    total: int = 0
    refused: list[str] = field(default_factory=list)  # fails to convert, compile or run
    refused_why: dict[str, list[str]] = field(default_factory=dict)
    rescued: list[str] = field(default_factory=list)
    failed: dict[str, list[str]] = field(default_factory=dict)  # reason -> refused cases
    running: list[str] = field(default_factory=list)  # runs and matches its expected outputs
    wrong: list[str] = field(default_factory=list)  # runs, outputs differ from the expected
    rewritten_running: list[str] = field(default_factory=list)  # changed, outputs still ok
    changed: dict[str, list[str]] = field(default_factory=dict)  # reason -> regressions
    seconds: float = 0.0

    @property
    def unchanged(self) -> int:
        return len(self.running) - len(self.rewritten_running) - sum(
            len(v) for v in self.changed.values())

    def as_dict(self) -> dict:
        return {
            "total": self.total, "refused": len(self.refused), "rescued": len(self.rescued),
            "still_failing": sum(len(v) for v in self.failed.values()),
            "running": len(self.running), "running_unchanged": self.unchanged,
            "running_rewritten_still_matching": self.rewritten_running,
            "wrong_outputs": self.wrong, "rescued_cases": self.rescued,
            "failed": self.failed, "changed": self.changed, "refused_why": self.refused_why,
            "seconds": self.seconds,
        }


def measure_rescue(cases=None, *, verify: bool = True, progress=None) -> Rescue:
    """Rewrite every case OpenVINO refuses and check the result on OpenVINO against the
    case's expected outputs; check that the cases it runs are left alone.

    Args:
        cases: onnx backend TestCases (default: every node case).
        verify: let ``rewrite`` run its own verification (compare against the original on
            the reference evaluator) too, as it does by default.
        progress: called with each case's name before it is handled.
    """
    plugins = _plugins()
    cases = cases if cases is not None else node_testcases()
    out = Rescue(total=len(cases))
    runner = OpenVINORunner(plugins)
    start = time.perf_counter()

    def note(table: dict, reason: str, name: str) -> None:
        table.setdefault(reason, []).append(name)

    try:
        for case in cases:
            if progress:
                progress(case.name)
            before = runner.actual(case.model, case)
            if before.runs and before.problem is not None:
                out.wrong.append(case.name)
                continue
            if not before.runs:
                out.refused.append(case.name)
                note(out.refused_why, _short(before.problem or "", 120), case.name)
                model, report = rewrite_case(case.model, plugins, TARGET, verify)
                if model is None:
                    note(out.failed, report, case.name)
                    continue
                problem = verification_problem(report)
                if problem is None and not report.applied:
                    problem = "nothing to rewrite: check finds no problem, but OpenVINO " \
                              f"fails: {_short(before.problem or '', 120)}"
                if problem is None:
                    after = runner.actual(model, case)
                    problem = after.problem
                if problem is None:
                    out.rescued.append(case.name)
                else:
                    note(out.failed, problem, case.name)
                continue
            out.running.append(case.name)
            model, report = rewrite_case(case.model, plugins, TARGET, verify)
            if model is None:
                note(out.changed, report, case.name)
                continue
            if not report.applied and _same_nodes(model, case.model):
                continue
            after = runner.actual(model, case)
            if after.problem is None:
                out.rewritten_running.append(case.name)
            else:
                note(out.changed, f"rewritten although it runs, and now: {after.problem}",
                     case.name)
    finally:
        runner.close()
    out.seconds = time.perf_counter() - start
    return out


def refused_sample(cases, size: int, seed: int = 0) -> list:
    """``size`` of the cases OpenVINO refuses (fails to convert, compile or run), drawn with
    ``random.Random(seed).sample`` from their sorted names: a fixed sample to follow the
    rescue count on (``rescue --refused-sample 120 --seed 0``)."""
    import random

    plugins = _plugins()
    runner = OpenVINORunner(plugins)
    try:
        refused = sorted(c.name for c in cases if not runner.actual(c.model, c).runs)
    finally:
        runner.close()
    chosen = set(random.Random(seed).sample(refused, min(size, len(refused))))
    return [c for c in cases if c.name in chosen]


def print_rescue(result: Rescue) -> None:
    failing = sum(len(v) for v in result.failed.values())
    print(f"cases: {result.total}   ({result.seconds:.1f}s)")
    print(f"OpenVINO refuses {len(result.refused)} (fails to convert, compile or run them); "
          f"runs {len(result.running) + len(result.wrong)}, of which {len(result.wrong)} "
          "with outputs that differ from the expected ones (not attempted)")
    for reason, names in sorted(result.refused_why.items(), key=lambda kv: -len(kv[1]))[:25]:
        print(f"  {len(names):>4}  {reason}")
    print(f"\nrescued by rewrite --target openvino: {len(result.rescued)} of "
          f"{len(result.refused)}; still failing: {failing}")
    for reason, names in sorted(result.failed.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        print(f"  {len(names):>4}  {reason}")
        print(f"        {', '.join(names[:6])}{' …' if len(names) > 6 else ''}")
    print(f"\nOpenVINO runs {len(result.running)} correctly: unchanged by rewrite "
          f"{result.unchanged}, rewritten with outputs still matching "
          f"{len(result.rewritten_running)}, regressions "
          f"{sum(len(v) for v in result.changed.values())}")
    for name in result.rewritten_running:
        print(f"        rewritten, still matching: {name}")
    for reason, names in sorted(result.changed.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        print(f"  {len(names):>4}  {reason}")
        print(f"        {', '.join(names[:6])}{' …' if len(names) > 6 else ''}")
    if result.rescued:
        print("\nrescued: " + ", ".join(result.rescued))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["check", "confirm", "rescue"])
    parser.add_argument("--only", action="append", default=[], metavar="CASE")
    parser.add_argument("--no-verify", action="store_true",
                        help="rescue: skip rewrite's own compare against the reference")
    parser.add_argument("--per-node", action="store_true",
                        help="check: probe every node (no whole-model compile first)")
    parser.add_argument("--sample", type=int, default=300,
                        help="confirm: how many of the cases OpenVINO runs to measure")
    parser.add_argument("--seed", type=int, default=0,
                        help="confirm, rescue --refused-sample: the sample's seed")
    parser.add_argument("--refused-sample", type=int, metavar="N",
                        help="rescue: only N seeded cases among those OpenVINO refuses")
    parser.add_argument("--progress", action="store_true", help="case names on stderr")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    cases = _select(args.only)

    def progress(name: str) -> None:
        print(name, file=sys.stderr, flush=True)

    shown = progress if args.progress else None
    if args.what == "rescue":
        if args.refused_sample:
            cases = refused_sample(cases, args.refused_sample, args.seed)
        rescue = measure_rescue(cases, verify=not args.no_verify, progress=shown)
        if args.json:
            print(json.dumps(rescue.as_dict(), indent=2))
        else:
            print_rescue(rescue)
        return 0
    if args.what == "confirm":
        confirmed = measure_confirmed_agreement(cases, sample=args.sample, seed=args.seed,
                                                progress=shown)
        if args.json:
            print(json.dumps(confirmed.__dict__ | {"rate": confirmed.rate}, indent=2))
        else:
            print_confirmed(confirmed, "openvino", "OpenVINO convert + compile + run")
        return 0
    result = measure_openvino_agreement(cases, per_node=args.per_node, progress=shown)
    if args.json:
        print(json.dumps(result.__dict__ | {"rate_compiles": result.rate(result.compiles),
                                            "rate_runs": result.rate(result.runs)}, indent=2))
    else:
        print_agreement(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
