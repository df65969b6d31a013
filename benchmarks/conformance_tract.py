"""tract (Sonos' inference engine, the ``tract`` package) on the ONNX backend node cases that
ship inside the ``onnx`` package, and on the shared corpus.

``python benchmarks/conformance_tract.py rescue [--refused-sample N] [--running-sample M]
[--seed S]`` measures ``rewrite --target tract``: every case tract refuses (it fails to
load, type, optimize or run it) is rewritten and counted as rescued when the result runs
on tract and matches the case's expected outputs within the case's tolerances on every data
set. A case tract runs with other outputs than the expected ones is counted apart (not
attempted: nothing says tract cannot run it). Every case tract runs must come back
unchanged (no remedy applied), or with outputs that still match. The headline share is
rescued / refused cases whose ops all have a remedy (a case with a finding no plugin can
remedy is counted apart). ``--refused-sample`` and ``--running-sample`` take a fixed seeded
sample of either kind (the full run takes long on 2 cores).

``python benchmarks/conformance_tract.py check`` compares ``check --target tract`` as users
get it (the static check, then by default the confirmation: load, type, optimize and run
once on generated inputs) with tract asked the way its users load models
(``_common.UserRoute``: the case written to a file, ``tract.onnx().load(path)``,
``into_model().into_runnable()``, run once on the case's first data set), on every node
case: agreement, the confusion matrix and every disagreement.

``python benchmarks/conformance_tract.py corpus [MODEL ...]``: for each model of
``../shared/corpus``, whether tract loads and runs it as it is (the target's confirmation:
load, type, optimize and run once on generated inputs in a child process), and what
``rewrite --target tract`` makes of it (verdict, remedies, reason), as
``benchmarks/corpus_rewrite.py --verdicts`` does.

Every model runs in the isolation worker, so a tract crash or hang is a verdict.
``--only NAME`` (repeatable) restricts ``rescue`` to some cases; ``--json`` prints JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

TARGET = "tract"

# What `rescue` reached (onnx 1.23, tract 0.23.9, the plugins of this tree) on the seeded
# sample `rescue --refused-sample 100 --running-sample 100 --seed 0`: the cases rewritten
# into models tract runs with the expected outputs. tests/test_tract.py re-runs some of them
# and RUNNING_SAMPLE (which must stay untouched).
RESCUED = frozenset({
    "test_adagrad_multiple", "test_attention_4d_with_qk_matmul",
    "test_basic_deform_conv_with_padding", "test_bitcast_bool_to_uint8",
    "test_bitcast_scalar_float32_to_int32", "test_bitcast_uint32_to_int32",
    "test_causal_conv_with_state_short_input_no_past_state", "test_causal_conv_with_state_silu",
    "test_cumprod_2d_axis_0", "test_cumprod_2d_int32", "test_cumsum_2d_axis_0",
    "test_det_nd", "test_flexattention_relative_positional", "test_hammingwindow",
    "test_nllloss_NC", "test_nllloss_NCd1d2d3_none_no_weight_negative_ii",
    "test_optional_has_element_empty_no_input_name_optional_input",
    "test_resize_downsample_scales_linear_half_pixel_symmetric",
    "test_resize_downsample_sizes_nearest", "test_resize_upsample_scales_cubic_align_corners",
    "test_resize_upsample_scales_cubic_asymmetric", "test_resize_upsample_sizes_cubic",
    "test_sce_NCd1d2d3_none_no_weight_negative_ii_log_prob", "test_sce_mean_weight_ii_expanded",
    "test_sce_mean_no_weight_ii_4d_log_prob",
})
RUNNING_SAMPLE = frozenset({"test_relu", "test_add_bcast", "test_softmax_axis_0",
                            "test_gemm_default_scalar_bias", "test_conv_with_strides_padding"})


def measure_rescue(cases=None, *, verify: bool = True, progress=None) -> _common.Rescue:
    """``rewrite --target tract`` on every case tract refuses, checked on tract; the cases
    it runs left alone (:func:`_common.measure_rescue`)."""
    return _common.measure_rescue(TARGET, cases, verify=verify, progress=progress)


def sample(cases, refused: int | None, running: int | None, seed: int) -> list:
    """A fixed seeded sample of the cases tract refuses and of those it runs."""
    if refused is None and running is None:
        return list(cases)
    no, yes = _common.split_by_runs(TARGET, cases)
    print(f"tract refuses {len(no)} of {len(no) + len(yes)} cases; sampled {refused} of "
          f"those and {running} of the others (seed {seed})", file=sys.stderr, flush=True)
    chosen = {c.name for c in _common.seeded(no, refused, seed)}
    chosen |= {c.name for c in _common.seeded(yes, running, seed)}
    return [c for c in cases if c.name in chosen]


# -- corpus: the shared models rewritten for tract --------------------------------------------

@dataclass
class CorpusRow:
    model: str
    before: str  # "runs", "loads (not run: ...)" or tract's refusal
    verdict: str = ""  # verified | mismatch | unverified | unchanged | unfixable | error
    reason: str = ""
    remedies: list[str] = field(default_factory=list)


def measure_corpus(models: list[Path], progress=None) -> list[CorpusRow]:
    """Per model: tract's confirmation of the original, then ``rewrite --target tract``."""
    import onnx
    from corpus_rewrite import measure

    from rewriter.api import resolve_targets
    from rewriter.console import native_stdout_to_stderr
    from rewriter.manager import load_plugins

    plugins = load_plugins()
    (target,) = resolve_targets(plugins, [TARGET])
    rows = []
    with tempfile.TemporaryDirectory() as tmp, native_stdout_to_stderr():
        for path in models:
            if progress:
                progress(path.name)
            model = onnx.load(path, load_external_data=False)
            confirmation = target.confirmation(model, path.parent)
            if confirmation.refusal is not None:
                before = f"refused ({confirmation.stage}): " \
                         f"{_common._short(confirmation.refusal, 160)}"
            elif confirmation.ran:
                before = "runs"
            else:
                before = f"loads ({_common._short(confirmation.note or 'not run', 120)})"
            row = measure(path, TARGET, Path(tmp), plugins, run_before=False)
            rows.append(CorpusRow(path.name, before, row.verdict, row.reason, row.remedies))
    return rows


def print_corpus(rows: list[CorpusRow]) -> None:
    runs = sum(r.before == "runs" for r in rows)
    verdicts = {v: sum(r.verdict == v for r in rows) for v in dict.fromkeys(
        ("verified", "unchanged", "mismatch", "unverified", "unfixable", "error"))}
    print(f"{len(rows)} models; tract runs {runs} as they are; rewrite --target tract: "
          + ", ".join(f"{n} {v}" for v, n in verdicts.items()))
    print("\n| model | tract before | verdict | remedies | reason |\n|---|---|---|---|---|")
    for r in rows:
        cells = [r.model, r.before, r.verdict, "; ".join(r.remedies) or "-",
                 r.reason if r.verdict != "verified" else "-"]
        print("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["check", "rescue", "corpus"])
    parser.add_argument("models", nargs="*", help="corpus: model file names (default: all)")
    parser.add_argument("--only", action="append", default=[], metavar="CASE")
    parser.add_argument("--no-verify", action="store_true",
                        help="rescue: skip rewrite's own compare against the reference")
    parser.add_argument("--refused-sample", type=int, metavar="N",
                        help="rescue: only N seeded cases among those tract refuses")
    parser.add_argument("--running-sample", type=int, metavar="N",
                        help="rescue: only N seeded cases among those tract runs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--progress", action="store_true", help="names on stderr")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    def progress(name: str) -> None:
        print(name, file=sys.stderr, flush=True)

    shown = progress if args.progress else None
    if args.what == "corpus":
        from corpus_rewrite import CORPUS

        models = [CORPUS / m for m in args.models] or sorted(CORPUS.glob("*.onnx"))
        rows = measure_corpus(models, shown)
        if args.json:
            print(json.dumps([asdict(r) for r in rows], indent=1))
        else:
            print_corpus(rows)
        return 0
    if args.what == "check":
        detection = _common.measure_detection(TARGET, _common.select(args.only),
                                              progress=shown)
        if args.json:
            print(json.dumps(asdict(detection) | {"rate": detection.rate}, indent=2))
        else:
            _common.print_detection(detection)
        return 0
    cases = sample(_common.select(args.only), args.refused_sample, args.running_sample,
                   args.seed)
    rescue = measure_rescue(cases, verify=not args.no_verify, progress=shown)
    if args.json:
        print(json.dumps(rescue.as_dict(), indent=2))
    else:
        _common.print_rescue(rescue, "tract", TARGET)
    return 0


if __name__ == "__main__":
    sys.exit(main())
