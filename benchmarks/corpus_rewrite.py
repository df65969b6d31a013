"""Before/after table for the real models in ``../shared/corpus``.

``python benchmarks/corpus_rewrite.py [--target T ...] [--markdown] [MODEL ...]``

``--verdicts`` (the default targets onnxruntime, reference, openvino and opset:17): per
target, how many rewrites end verified, mismatched or unverified (and how many need no
rewrite or have no remedy), with the reason of every one that is not verified, and the wall
time of the rewrites and of their comparisons. ``--quick`` verifies on the typical inputs
alone (the single run before input regimes), to measure what the regimes cost.

Before: does what ``onnx-rewriter run MODEL`` does (onnxruntime, no rewrite) work? After:
what ``onnx-rewriter rewrite MODEL -o OUT --target T`` does (the library call behind it; it
ends by comparing the result with the original, run on the target where it runs there, else
on the ONNX reference evaluator with the plugins' kernels), then ``run OUT`` again. A model
counts as *fixed* when the original did not run and the rewritten one loads, runs and
compares equal. Inputs: the test data next to a model (``testdata/<model>/``), the few given
below (images, strings), else generated from the declared types.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"


@dataclass
class Row:
    model: str
    before: str  # "runs" or the first line of the error
    status: str = ""  # fixed | still runs | not fixed | broke
    rewrite: str = ""  # "no-op", "rewritten", "unfixable: ...", "error: ..."
    compare: str = ""
    after: str = ""  # run of the rewritten model
    remedies: list[str] = field(default_factory=list)
    verdict: str = ""  # verified | mismatch | unverified | unchanged | unfixable | error
    reason: str = ""  # the verdict's reason
    oracle: str = ""  # where the original ran
    target: str = ""
    seconds: float = 0.0  # the rewrite, its comparison included (wall time)
    compare_seconds: float = 0.0  # the comparison alone
    regimes: list[str] = field(default_factory=list)  # the input regimes that ran


def _short(message: str, limit: int = 120) -> str:
    """One line, without onnxruntime's prefix and the corpus path."""
    line = (message.strip().splitlines() or [""])[0]
    line = re.sub(r"onnxruntime cannot load \S+: ", "", line)
    line = re.sub(r"\[ONNXRuntimeError\] : \d+ : \w+ : ", "", line)
    return line.replace(f"{CORPUS}/", "")[:limit]


def _run(model: Path, inputs: Path | None, dims: dict[str, int], plugins) -> str:
    """What ``onnx-rewriter run MODEL`` does: "runs", or the first line of its error."""
    import onnx

    from rewriter.comparison import runtime
    from rewriter.errors import RewriterError
    from rewriter.io.inputs import load_inputs

    try:
        feeds = None
        if inputs is not None:
            sets = load_inputs([str(inputs)], onnx.load(model, load_external_data=False))
            feeds = sets[0] if sets else {}
        runtime.run(str(model), feeds, dims=dims, plugins=plugins)
    except RewriterError as e:
        return _short(str(e))
    except Exception as e:  # noqa: BLE001 - a failure is the result
        return _short(f"internal error: {type(e).__name__}: {e}")
    return "runs"


def _png(height: int, width: int) -> np.ndarray:
    """PNG bytes of a smooth RGB image (random bytes are no image)."""
    import io

    from PIL import Image

    yy, xx = np.mgrid[0:height, 0:width]
    pixels = np.stack([(3 * yy) % 256, (2 * xx) % 256, (xx + yy) % 256], -1).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return np.frombuffer(buffer.getvalue(), np.uint8)


def _rand(*shape) -> np.ndarray:
    return np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)


def _packed_attention() -> list:
    """Two sequences of 3 and 2 tokens padded to 4 (onnxruntime's RemovePadding layout:
    offsets of the 5 real tokens first, then of the padding), 12 heads of size 2."""
    return [_rand(5, 24), _rand(24, 72) * 0.3, _rand(72),
            np.array([[0, 1, 2, 4], [5, 3, 6, 7]], np.int32), np.array([0, 3, 5], np.int32)]


def _dmmha() -> list:
    """One decoding step of 2 sequences (beam width 1) after 3 cached tokens, cache of 8."""
    return [_rand(2, 1, 64), _rand(2, 1, 64), _rand(2, 1, 64), _rand(192),
            _rand(2, 2, 8, 32), _rand(2, 2, 8, 32), np.array([3], np.int32),
            np.array([1], np.int32), np.zeros((2, 1, 8), np.int32)]


def _gqa_rotary() -> list:
    """One new token after 3 cached ones (seqlens_k = total - 1 = 3), rotary cache of 8."""
    return [_rand(1, 1, 64), _rand(1, 1, 3, 16), _rand(1, 1, 3, 16),
            np.array([[3]], np.int32), _rand(8, 8), _rand(8, 8)]


# Inputs for models whose inputs cannot be generated meaningfully (images, strings the op
# wants 1-D, shapes and indices their attention ops tie together), and symbolic dimensions
# the model's own ops constrain.
GIVEN_INPUTS = {
    "ort_packed_attention_fp32.onnx": _packed_attention,
    "ort_dmmha_self_attn.onnx": _dmmha,
    "ov_com_microsoft_gqa_rotary.onnx": _gqa_rotary,
    "ortx_string_split.onnx": lambda: [np.array(["a,,b", "", "c, d"], dtype=object),
                                       np.array([", "], dtype=object), np.array([False])],
    "ortx_decode_encode_decode_image.onnx": lambda: [_png(9, 13)],
    "ortx_supres_pre_post.onnx": lambda: [_png(224, 224)],
}
DIMS = {"pt_com_microsoft_atenop_embedding.onnx": ["input_2_dim_1=8"]}  # its Add broadcasts


def _given_inputs(model: Path, workdir: Path) -> Path | None:
    """An ONNX test-data folder with this model's inputs: shipped next to the corpus
    (``testdata/<model>/``), or written from GIVEN_INPUTS; None: generate them."""
    from onnx import numpy_helper

    data = CORPUS / "testdata" / model.stem
    if any(data.rglob("input_*.pb")):
        return data
    make = GIVEN_INPUTS.get(model.name)
    if make is None:
        return None
    folder = workdir / f"{model.stem}.inputs" / "test_data_set_0"
    folder.mkdir(parents=True, exist_ok=True)
    for i, value in enumerate(make()):
        (folder / f"input_{i}.pb").write_bytes(numpy_helper.from_array(value).SerializeToString())
    return folder.parent


def measure(model: Path, target: str, workdir: Path, plugins=None, *,
            run_before: bool = True, quick: bool = False) -> Row:
    """Run, rewrite (as ``onnx-rewriter rewrite MODEL -o OUT --target T`` does, ending with
    its comparison; ``quick``: on the typical inputs alone, ``--quick``) and run the
    result."""
    import time

    from rewriter.api import rewrite
    from rewriter.errors import RewriterError, UnfixableError
    from rewriter.io.inputs import parse_dims
    from rewriter.manager import load_plugins

    plugins = plugins or load_plugins()
    inputs = _given_inputs(model, workdir)
    dims = parse_dims(DIMS.get(model.name, []))
    row = Row(model.name, _run(model, inputs, dims, plugins) if run_before else "",
              target=target)
    out = workdir / model.name
    out.unlink(missing_ok=True)
    options = {"dims": dims, **({"inputs": [str(inputs)]} if inputs else {})}
    if quick:
        options["quick"] = True
    start = time.perf_counter()
    try:
        result = rewrite(str(model), [target], output=str(out), plugins=plugins,
                         compare_options=options)
    except UnfixableError as e:
        first = e.findings[0]
        row.rewrite = (f"unfixable: {len(e.findings)} node(s), e.g. {first.op_label}: "
                       f"{first.reason}")
        row.verdict, row.reason = "unfixable", _short(str(e), 300)
    except RewriterError as e:
        row.rewrite = f"error: {_short(str(e))}"
        row.verdict, row.reason = "error", row.rewrite
    except Exception as e:  # noqa: BLE001 - reported, and failed by the test
        row.rewrite = f"internal error: {type(e).__name__}: {_short(str(e))}"
        row.verdict, row.reason = "error", row.rewrite
    else:
        report = result.report
        row.remedies = sorted({f"{op} ({kind}, {plugin})"
                               for (kind, plugin, _rule, op) in report.applied})
        row.rewrite = "rewritten" if row.remedies else "no-op"
        row.compare = report.verification.get("compare", "")
        row.verdict, row.reason = report.verdict, _short(report.verdict_reason, 300)
        if report.remaining:  # e.g. the target refused the result at load: not fixed
            f = report.remaining[0]
            row.verdict = "unfixable"
            row.reason = _short(f"{len(report.remaining)} finding(s) left after the rewrite "
                                f"(compare: {report.verdict}), e.g. {f.op_label or 'model'}: "
                                f"{f.detail}", 300)
        row.oracle = report.comparison.oracle if report.comparison is not None else ""
        if report.comparison is not None:
            row.compare_seconds = report.comparison.seconds
            row.regimes = [r.name for r in getattr(report.comparison, "regimes", [])
                           if r.ran]
    row.seconds = time.perf_counter() - start
    if not run_before:
        return row
    if out.exists():
        row.after = _run(out, inputs, dims, plugins)
    if row.rewrite == "no-op":  # nothing to fix for onnxruntime: the model is as it was
        row.status = "unchanged"
    elif row.before != "runs":
        row.status = "fixed" if row.after == "runs" and row.compare == "ok" else "not fixed"
    else:
        row.status = "still runs" if row.after == "runs" and row.compare == "ok" else "broke"
    return row


def markdown(rows: list[Row], target: str) -> str:
    before = sum(r.before == "runs" for r in rows)
    count = {s: sum(r.status == s for r in rows)
             for s in ("fixed", "still runs", "unchanged", "not fixed", "broke")}
    lines = [
        f"{len(rows)} models; onnxruntime runs {before} as they are (on the inputs below); "
        f"`rewrite --target {target}`: {count['fixed']} fixed (fail before; load, run and "
        f"compare equal after), {count['still runs']} rewritten and still equal, "
        f"{count['unchanged']} left unchanged (nothing to fix), {count['not fixed']} not "
        f"fixed, {count['broke']} broken.",
        "",
        "| model | before | rewrite | compare | after | status |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        cells = [r.model, r.before, r.rewrite + (f" ({'; '.join(r.remedies)})"
                                                   if r.remedies else ""),
                 r.compare or "-", r.after or "-", r.status]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


VERDICT_TARGETS = ("onnxruntime", "reference", "openvino", "opset:17")
VERDICTS = ("verified", "mismatch", "unverified", "unchanged", "unfixable", "error")


def verdicts_markdown(rows: list[Row]) -> str:
    """Per target: how many rewrites end in each verdict; then every one not verified."""
    targets = list(dict.fromkeys(r.target for r in rows))
    lines = ["| target | " + " | ".join(VERDICTS) + " |",
             "|---|" + "---|" * len(VERDICTS)]
    for t in targets:
        mine = [r for r in rows if r.target == t]
        lines.append(f"| {t} | " + " | ".join(str(sum(r.verdict == v for r in mine))
                                             for v in VERDICTS) + " |")
    total = sum(r.seconds for r in rows)
    compared = sum(r.compare_seconds for r in rows)
    lines += ["", f"wall time: {total:.1f} s for {len(rows)} rewrites, of which comparison "
              f"{compared:.1f} s"]
    lines += ["", "| target | model | verdict | oracle | reason |", "|---|---|---|---|---|"]
    for r in rows:
        if r.verdict in ("mismatch", "unverified", "error", "unfixable"):
            cells = [r.target, r.model, r.verdict, r.oracle or "-", r.reason]
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="model file names (default: all)")
    parser.add_argument("--target", action="append", dest="targets",
                        help="target (repeatable; default: onnxruntime, or with --verdicts "
                        f"{', '.join(VERDICT_TARGETS)})")
    parser.add_argument("--verdicts", action="store_true",
                        help="the verdict table per target (no before/after runs)")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--json", dest="json_out", help="write the rows to this file")
    parser.add_argument("--quick", action="store_true",
                        help="verify on the typical inputs alone (rewrite --quick)")
    args = parser.parse_args(argv)
    if not CORPUS.is_dir():
        print(f"error: no corpus at {CORPUS}", file=sys.stderr)
        return 2
    models = [CORPUS / m for m in args.models] or sorted(CORPUS.glob("*.onnx"))
    from rewriter.console import native_stdout_to_stderr
    from rewriter.manager import load_plugins

    plugins = load_plugins()
    if args.verdicts:
        targets = args.targets or list(VERDICT_TARGETS)
        with tempfile.TemporaryDirectory() as tmp, native_stdout_to_stderr():
            rows = []
            for t in targets:
                for m in models:
                    rows.append(measure(m, t, Path(tmp), plugins, run_before=False,
                                        quick=args.quick))
                    print(f"{t:12} {m.name:50} {rows[-1].verdict:10} "
                          f"{rows[-1].seconds:6.2f}s", file=sys.stderr)
        if args.json_out:
            Path(args.json_out).write_text(json.dumps([asdict(r) for r in rows], indent=1))
        print(verdicts_markdown(rows))
        return 0
    target = (args.targets or ["onnxruntime"])[0]
    args.target = target
    with tempfile.TemporaryDirectory() as tmp, native_stdout_to_stderr():
        rows = [measure(m, target, Path(tmp), plugins, quick=args.quick) for m in models]
    if args.json_out:
        Path(args.json_out).write_text(json.dumps([asdict(r) for r in rows], indent=1))
    if args.markdown:
        print(markdown(rows, args.target))
    else:
        for r in rows:
            print(f"{r.status:10} {r.model:50} {r.rewrite[:70]:70} {r.compare[:40]}")
        print(markdown(rows, args.target).splitlines()[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
