"""Edge deployment: one rewrite for onnxruntime, OpenVINO and tract at once (issue 30).

``python benchmarks/edge_multi_target.py [--timeout S] [--partial] [--json FILE] [MODEL ...]``

For each model of ``../shared/corpus`` (inputs as ``corpus_rewrite.py`` gives them) and of
the real-world benchmark (``tests/data/realworld``, compared on the ``.inputs.npz`` beside
each), one ``rewrite(model, ["onnxruntime", "openvino", "tract"])`` call, what
``onnx-rewriter rewrite MODEL -o OUT -t onnxruntime -t openvino -t tract`` does. Per target,
the verdict of its own runtime (``report.comparison.targets``; a target whose result was run
on another runtime counts as not verified, and the reason says so); a model nothing needed
changing for is compared with itself on the three (``unchanged`` when its runtime agrees).
"All three": verified or unchanged on each. Then every real-world model once more, for
tract alone, with each symbolic input dimension fixed (``--fix-dim NAME=V``) to its size in
the ``.inputs.npz``. Each call runs in a child process killed after ``--timeout`` seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from corpus_rewrite import CORPUS, DIMS, _given_inputs  # noqa: E402
from realworld.bench import short  # noqa: E402

REALWORLD = ROOT / "tests" / "data" / "realworld"
TARGETS = ("onnxruntime", "openvino", "tract")
OK = ("verified", "unchanged")
FIX_DIM = "tract --fix-dim"


@dataclass
class Row:
    model: str
    kind: str  # corpus | realworld
    run: str = "all three"  # or FIX_DIM: tract alone, symbolic dims fixed
    verdict: str = ""  # the call's: verified, mismatch, unverified, unchanged, unfixable, error
    verdicts: dict[str, str] = field(default_factory=dict)  # per target, its own runtime's
    reasons: dict[str, str] = field(default_factory=dict)  # per target not OK: why
    remedies: list[str] = field(default_factory=list)
    fix_dims: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def all_ok(self) -> bool:
        return all(self.verdicts.get(t) in OK for t in TARGETS)


def fixed_dims(model: Path) -> dict[str, int]:
    """Every symbolic input dimension of ``model`` at its size in the ``.inputs.npz``."""
    import numpy as np
    import onnx

    proto = onnx.load(model, load_external_data=False)
    feeds = np.load(model.with_suffix(".inputs.npz"))
    dims: dict[str, int] = {}
    for value in proto.graph.input:
        if value.name not in feeds.files:
            continue
        shape = feeds[value.name].shape
        for d, size in zip(value.type.tensor_type.shape.dim, shape):
            if d.dim_param and dims.setdefault(d.dim_param, int(size)) != size:
                raise ValueError(f"{d.dim_param}: {dims[d.dim_param]} and {size} in the npz")
    return dims


def _per_target(row: Row, report, targets) -> None:
    """Each target's verdict from ``report``: its own runtime's run of the result."""
    left = {f.target: f for f in report.remaining}
    by_target = {t.target: t for t in report.comparison.targets} if report.comparison else {}
    for target in targets:
        tc = by_target.get(target)
        if target in left:
            f = left[target]
            row.verdicts[target] = "unfixable"
            row.reasons[target] = short(f"refuses the result: {f.op_label or 'model'}: "
                                        f"{f.detail}", 200)
        elif tc is None:
            row.verdicts[target] = report.verdict or "error"
            row.reasons[target] = short(report.verdict_reason, 200)
        elif tc.runtime and tc.runtime != target:
            row.verdicts[target] = f"{tc.verdict} on {tc.runtime}"
            row.reasons[target] = short(f"run on {tc.runtime}, not {target}: {tc.error}", 200)
        else:
            row.verdicts[target] = tc.verdict
            if tc.verdict != "verified":
                bad = [c.name for c in tc.outputs if not c.ok]
                why = tc.error or (f"{', '.join(bad)} differ (max abs {tc.max_abs:.3g})"
                                   if tc.max_abs is not None else ", ".join(bad))
                row.reasons[target] = short(why, 200)


def measure(model: Path, kind: str, run: str, timeout: float, partial: bool) -> Row:
    """The rewrite call (in this process), as a row."""
    from rewriter.api import rewrite
    from rewriter.comparison.compare import compare
    from rewriter.errors import UnfixableError
    from rewriter.io.inputs import parse_dims

    row = Row(model.name, kind, run)
    targets = ["tract"] if run == FIX_DIM else list(TARGETS)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        if kind == "realworld":
            options = {"inputs": str(model.with_suffix(".inputs.npz"))}
        else:
            inputs = _given_inputs(model, Path(tmp))
            options = {"dims": parse_dims(DIMS.get(model.name, [])),
                       **({"inputs": [str(inputs)]} if inputs else {})}
        options["timeout"] = min(timeout, 300)
        row.fix_dims = fixed_dims(model) if run == FIX_DIM else {}
        try:
            result = rewrite(str(model), targets, output=str(Path(tmp) / model.name),
                             compare_options=options, allow_unverified=True,
                             keep_failed=True, partial=partial,
                             fix_dims=row.fix_dims or None)
        except UnfixableError as e:
            row.verdict = "unfixable"
            for t in targets:
                mine = [f"{op} x{n}: {detail}" + (f" (no remedy: {reason})" if reason else "")
                        for tt, op, detail, reason, n in e.groups if tt == t]
                row.verdicts[t] = "unfixable" if mine else "not rewritten"
                row.reasons[t] = short("; ".join(mine) if mine else "the call is unfixable "
                                       "for another target: nothing was changed", 300)
        except Exception as e:  # noqa: BLE001 - the engine failing is a result
            row.verdict = "error"
            for t in targets:
                row.verdicts[t], row.reasons[t] = "error", short(f"{type(e).__name__}: {e}",
                                                                 200)
        else:
            report = result.report
            row.verdict = report.verdict or "unfixable"
            row.remedies = sorted({f"{op} ({kind_})"
                                   for (kind_, _p, _r, op) in report.applied})
            if report.verdict == "unchanged":  # nothing compared: the model as it is, on each
                same = compare(str(model), str(model), targets, plugins=None, localize=False,
                               **options)
                for tc in same.targets:
                    if tc.runtime and tc.runtime != tc.target:  # not its own runtime's word
                        row.verdicts[tc.target] = f"as is: {tc.verdict} on {tc.runtime}"
                        row.reasons[tc.target] = f"run on {tc.runtime}, not {tc.target}"
                        continue
                    row.verdicts[tc.target] = "unchanged" if tc.verdict == "verified" \
                        else f"as is: {tc.verdict}"
                    if tc.verdict != "verified":
                        row.reasons[tc.target] = short(tc.error or same.summary(), 200)
            else:
                _per_target(row, report, targets)
    row.seconds = round(time.perf_counter() - start, 1)
    return row


def isolated(model: Path, kind: str, run: str, timeout: float, partial: bool) -> Row:
    """:func:`measure` in a child process (this script), killed after ``timeout`` s."""
    targets = ["tract"] if run == FIX_DIM else list(TARGETS)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "row.json"
        argv = [sys.executable, __file__, "--child", str(out), str(model), kind, run,
                "--timeout", str(timeout), *(["--partial"] if partial else [])]
        with open(Path(tmp) / "log", "w") as log:
            process = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        if out.exists():
            return Row(**json.loads(out.read_text()))
        tail = ((Path(tmp) / "log").read_text().strip().splitlines() or [""])[-1]
        why = (f"no result within {timeout:.0f}s" if process.returncode == -signal.SIGKILL
               else f"the process died (exit {process.returncode}): {tail}")
        verdict = "timeout" if process.returncode == -signal.SIGKILL else "error"
        return Row(model.name, kind, run, verdict, {t: verdict for t in targets},
                   {t: short(why, 200) for t in targets},
                   seconds=round(time.perf_counter() - start, 1))


def print_table(rows: list[Row]) -> None:
    print(f"{'model':48} {'run':16} " + " ".join(f"{t:14}" for t in TARGETS) + "  seconds")
    for r in rows:
        print(f"{r.model[:48]:48} {r.run:16} "
              + " ".join(f"{r.verdicts.get(t, '-')[:14]:14}" for t in TARGETS)
              + f"  {r.seconds:7.1f}")
    print("\nnot verified (target: reason):")
    for r in rows:
        for t, why in r.reasons.items():
            print(f"  {r.model} [{r.run}] {t}: {r.verdicts[t]}: {why}")


def headline(rows: list[Row]) -> str:
    lines = []
    for kind in ("corpus", "realworld"):
        mine = [r for r in rows if r.kind == kind and r.run == "all three"]
        if mine:
            per = ", ".join(f"{t} {sum(r.verdicts.get(t) in OK for r in mine)}"
                            for t in TARGETS)
            lines.append(f"{kind}: {sum(r.all_ok for r in mine)} of {len(mine)} models run on "
                         f"all three in one call ({per})")
    fixed = [r for r in rows if r.run == FIX_DIM]
    if fixed:
        lines.append(f"realworld: {sum(r.verdicts.get('tract') in OK for r in fixed)} of "
                     f"{len(fixed)} models verified on tract with --fix-dim")
    lines.append(f"wall time: {sum(r.seconds for r in rows):.0f} s for {len(rows)} calls")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path,
                        help="model paths (default: the corpus and the real-world models)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per call")
    parser.add_argument("--partial", action="store_true", help="rewrite --partial")
    parser.add_argument("--json", dest="json_out", help="write the rows to this file")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        from rewriter.console import native_stdout_to_stderr

        out, model, kind, run = args.child
        with native_stdout_to_stderr():
            row = measure(Path(model), kind, run, args.timeout, args.partial)
        Path(out).write_text(json.dumps(asdict(row)))
        return 0
    models = [m.resolve() for m in args.models] or \
        sorted(CORPUS.glob("*.onnx")) + sorted(REALWORLD.glob("*.onnx"))
    jobs = [(m, "realworld" if m.parent == REALWORLD else "corpus", "all three")
            for m in models]
    jobs += [(m, kind, FIX_DIM) for m, kind, _ in jobs if kind == "realworld"]
    rows = []
    for model, kind, run in jobs:
        rows.append(isolated(model, kind, run, args.timeout, args.partial))
        r = rows[-1]
        print(f"{r.model:48} {r.run:16} {json.dumps(r.verdicts)} {r.seconds:.1f}s",
              file=sys.stderr, flush=True)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps([asdict(r) for r in rows], indent=1))
    print_table(rows)
    print()
    print(headline(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
