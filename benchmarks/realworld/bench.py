"""The benchmark run: every model rewritten for every target with the library's
``rewriter.api.rewrite`` (which ends by comparing the result with the original), one child
process per model with a time limit per (model, target) pair, and the tables.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1]
# success: runs on the target with the original's numbers (verified, or nothing to rewrite)
OK = ("verified", "unchanged")
VERDICTS = ("verified", "unchanged", "mismatch", "run-fails", "unverified", "unfixable", "error",
            "timeout")
# "run-fails": the rewrite says the target runs the model as it is (its check ran it once on
# generated inputs), and the target fails to run it on the pair's inputs (a batch of 2)


@dataclass
class Row:
    model: str  # the recipe's name
    target: str
    verdict: str  # one of VERDICTS, or "not built"
    reason: str = ""  # the verdict's reason, one line (up to 600 characters)
    oracle: str = ""  # where the original ran
    remedies: list[str] = field(default_factory=list)  # what the rewrite applied
    ops_left: list[str] = field(default_factory=list)  # ops without a remedy, or refused
    seconds: float = 0.0
    rules: list[str] = field(default_factory=list)  # the rules applied (with their notes)
    batch: int = 2  # the inputs' batch size (realworld.feeds)
    # verified segment by segment: the run-time quantization points its activations were
    # anchored at (rewriter.comparison.anchoring), 0 when verified as a whole
    anchored: int = 0


def short(message: str, limit: int = 600) -> str:
    """One line, without onnxruntime's prefixes and temporary paths."""
    line = " ".join((message or "").split())
    line = re.sub(r"\[ONNXRuntimeError\] : \d+ : \w+ : ", "", line)
    line = re.sub(r"(/tmp|/root|/home)\S*/", "", line)
    return line if len(line) <= limit else line[:limit - 1] + "…"


def rewrite_pair(model: Path, target: str, workdir: Path, *, inputs: Path, name: str,
                 timeout: float = 300, plugins=None, **rewrite_options) -> Row:
    """``rewrite(model, [target])``, ending with its comparison on ``inputs`` (a .npz), as a
    row: the verdict, or "unfixable" (findings without a remedy, or findings the target
    still has after the rewrite), or "error" (the engine raised). ``rewrite_options``: more
    keyword arguments of ``rewrite`` (``adapt_interface=True``)."""
    from rewriter.api import rewrite
    from rewriter.errors import UnfixableError

    row = Row(name, target, "error")
    out = workdir / (re.sub(r"[^\w.=-]", "_", target) + ".onnx")  # (ops=FILE: a path)
    out.unlink(missing_ok=True)
    started = time.perf_counter()
    options = {"inputs": str(inputs), "timeout": timeout}
    try:
        result = rewrite(str(model), [target], output=str(out), compare_options=options,
                         plugins=plugins, allow_unverified=True, keep_failed=True,
                         **rewrite_options)
    except UnfixableError as e:
        row.verdict = "unfixable"
        row.ops_left = sorted({op for _t, op, _d, _r, _n in e.groups})
        row.reason = short("; ".join(f"{op} x{n}: {reason or detail}"
                                     for _t, op, detail, reason, n in e.groups))
    except Exception as e:  # noqa: BLE001 - the engine failing is a result
        row.reason = short(f"{type(e).__name__}: {e}")
    else:
        report = result.report
        row.verdict, row.reason = report.verdict, short(report.verdict_reason)
        row.remedies = sorted({f"{op} ({kind})" for (kind, _p, _r, op) in report.applied})
        row.rules = sorted({rule for (_k, _p, rule, _op) in report.applied})
        if report.comparison is not None:
            row.oracle = str(report.comparison.oracle or "")
            row.anchored = max((len(t.anchored.points) for t in report.comparison.targets
                                if t.anchored is not None and t.status == "equal"), default=0)
        if report.remaining:  # the target refused the result: findings left
            row.verdict = "unfixable"
            row.ops_left = sorted({f.op_label or "model" for f in report.remaining})
            first = report.remaining[0]
            row.reason = short(f"{len(report.remaining)} finding(s) left after the rewrite, "
                               f"e.g. {first.op_label or 'model'}: {first.detail}")
    if row.verdict == "unchanged":
        _run_unchanged(row, model, target, inputs, timeout, plugins)
    row.seconds = round(time.perf_counter() - started, 2)
    return row


def _run_unchanged(row: Row, model: Path, target: str, inputs: Path, timeout: float,
                   plugins) -> None:
    """An unchanged model run on the target with the pair's inputs and compared with the
    oracle's run (``rewrite`` compares nothing when it changes nothing): "run-fails" when the
    target fails there, "mismatch" when its numbers differ."""
    from rewriter.comparison.compare import compare
    from rewriter.verify.verdicts import MISMATCH, VERIFIED

    report = compare(str(model), str(model), [target], inputs=str(inputs), plugins=plugins,
                     timeout=timeout, localize=False)
    row.oracle = report.oracle_label or ""
    if report.verdict == VERIFIED:
        return
    row.verdict = "mismatch" if report.verdict == MISMATCH else "run-fails"
    row.reason = short(f"the model as it is, on the pair's inputs: {report.summary()}")


def inputs_at(model: Path, batch: int, folder: Path) -> Path:
    """The model's inputs at ``batch``: its ``inputs.npz`` when that is the batch it was built
    with, else made the same way at that batch (realworld.feeds) in ``folder``."""
    import numpy as np

    from realworld.feeds import DIMS, feeds_for

    if batch == DIMS["batch"]:
        return model.parent / "inputs.npz"
    path = folder / f"{model.parent.name}.batch{batch}.npz"
    if not path.exists():
        np.savez(path, **feeds_for(model, batch=batch))
    return path


def child(argv: list[str]) -> None:
    """In the child: PAIRS RESULTS TIMEOUT, PAIRS a JSON list of [model, target, batch]; one
    JSON row per line appended to RESULTS as each pair ends."""
    from rewriter.console import native_stdout_to_stderr
    from rewriter.manager import load_plugins

    pairs, results, timeout = json.loads(Path(argv[0]).read_text()), Path(argv[1]), float(argv[2])
    plugins = load_plugins()
    names: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp, native_stdout_to_stderr():
        for model_path, target, batch in pairs:
            model = Path(model_path)
            if model_path not in names:
                provenance = json.loads((model.parent / "provenance.json").read_text())
                names[model_path] = provenance["recipe"]
            row = rewrite_pair(model, target, Path(tmp), inputs=inputs_at(model, batch, Path(tmp)),
                               name=names[model_path], timeout=timeout, plugins=plugins)
            row.batch = batch
            with open(results, "a") as f:
                f.write(json.dumps(asdict(row)) + "\n")


_CHILD = ("import sys; sys.path.insert(0, {path!r}); from realworld.bench import child; "
          "child(sys.argv[1:])")


def run_pairs(pairs: list[tuple[str, Path, str, int]], timeout: float,
              progress=None) -> list[Row]:
    """Rows for (name, model, target, batch) pairs, rewritten one after the other in a child
    process (one Python start and one comparison worker for all); a pair that takes longer
    than ``timeout`` (plus a minute) is killed and recorded as "timeout", a child that dies
    records "error", and a new child goes on with the rest."""
    rows: list[Row] = []
    pending = list(pairs)
    with tempfile.TemporaryDirectory() as tmp:
        results, log = Path(tmp) / "rows.jsonl", Path(tmp) / "child.log"
        todo = Path(tmp) / "pairs.json"
        while pending:
            results.write_text("")
            todo.write_text(json.dumps([[str(m), t, b] for _n, m, t, b in pending]))
            with open(log, "w") as err:
                process = subprocess.Popen(
                    [sys.executable, "-c", _CHILD.format(path=str(BENCHMARKS)), str(todo),
                     str(results), str(timeout)],
                    stdout=err, stderr=err, start_new_session=True)
            try:
                done = _wait(process, results, rows, timeout, len(pending), progress)
                if done == len(pending):
                    process.wait(timeout=60)
            finally:  # interrupted: leave no child (nor its workers) behind
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            lines = results.read_text().splitlines()
            for line in lines[done:]:  # written while we were deciding
                rows.append(Row(**json.loads(line)))
                if progress:
                    progress(rows[-1])
            done = len(lines)
            if done < len(pending):  # the pair in progress hung or killed its process
                name, _model, target, batch = pending[done]
                if process.returncode == -signal.SIGKILL:
                    rows.append(Row(name, target, "timeout",
                                    f"no result within {timeout:.0f}s (+60s)", batch=batch))
                else:
                    tail = (log.read_text().strip().splitlines() or [""])[-1]
                    rows.append(Row(name, target, "error", short(
                        f"the process died (exit {process.returncode}): {tail}"),
                        batch=batch))
                if progress:
                    progress(rows[-1])
                done += 1
            pending = pending[done:]
    return rows


def _wait(process: subprocess.Popen, results: Path, rows: list[Row], timeout: float,
          expected: int, progress) -> int:
    """Collect the child's rows until it is done, dies, or a pair overruns (killed): how
    many rows it wrote. The first pair also has a minute for the child to start."""
    done, deadline = 0, time.monotonic() + timeout + 60
    while True:
        lines = results.read_text().splitlines()
        for line in lines[done:]:
            rows.append(Row(**json.loads(line)))
            if progress:
                progress(rows[-1])
            deadline = time.monotonic() + timeout + 60
        done = len(lines)
        if done == expected or process.poll() is not None:
            return done
        if time.monotonic() > deadline:
            os.killpg(process.pid, signal.SIGKILL)
            return done
        time.sleep(0.2)


def run_all(built: dict[str, Path], failed: dict[str, str], targets: list[str], *,
            timeout: float = 300, jobs: int = 1, batches: tuple[int, ...] = (1, 2)
            ) -> list[Row]:
    """Rows for every (model, batch, target), in the order of ``built`` then ``failed``
    (models that failed to build get "not built"); ``jobs`` children share the models."""

    def progress(r: Row) -> None:
        print(f"{r.target:12} {r.model:50} b{r.batch} {r.verdict:10} {r.seconds:6.1f}s",
              file=sys.stderr, flush=True)

    names = list(built)
    shares = [[(n, built[n], t, b) for n in names[i::max(1, jobs)] for b in batches
               for t in targets] for i in range(max(1, jobs))]
    with ThreadPoolExecutor(len(shares)) as pool:
        found = [r for share in pool.map(lambda p: run_pairs(p, timeout, progress), shares)
                 for r in share]
    by_pair = {(r.model, r.batch, r.target): r for r in found}
    rows = []
    for name in names:
        rows += [by_pair[(name, b, t)] for b in batches for t in targets]
    for name, error in failed.items():
        rows += [Row(name, t, "not built", short(error), batch=b) for b in batches
                 for t in targets]
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _label(row: Row, batches: set[int]) -> str:
    """The model's name, with the batch when the rows have several."""
    return f"{row.model} (batch {row.batch})" if len(batches) > 1 else row.model


def markdown(rows: list[Row], targets: list[str]) -> str:
    """The model x target verdicts (a row per model and batch), the totals, and the reason
    of every pair not verified."""
    batches = {r.batch for r in rows}
    models = list(dict.fromkeys(_label(r, batches) for r in rows))
    verdict = {(_label(r, batches), r.target): r.verdict for r in rows}
    lines = ["| model | " + " | ".join(targets) + " |", "|---|" + "---|" * len(targets)]
    for m in models:
        lines.append(f"| {m} | " + " | ".join(verdict.get((m, t), "-") for t in targets) + " |")
    pairs = [r for r in rows if r.verdict != "not built"]
    ok = sum(r.verdict in OK for r in pairs)
    lines += ["", "| target | " + " | ".join(VERDICTS) + " | runs and matches |",
              "|---|" + "---:|" * (len(VERDICTS) + 1)]
    for t in [*targets, "all"]:
        mine = [r for r in pairs if t in ("all", r.target)]
        count = Counter(r.verdict for r in mine)
        share = sum(count[v] for v in OK)
        lines.append(f"| {t} | " + " | ".join(str(count[v]) for v in VERDICTS)
                     + f" | {share}/{len(mine)} |")
    not_built = sorted({r.model for r in rows if r.verdict == "not built"})
    lines += ["", f"{ok} of {len(pairs)} (model, target) pairs run on the target with the "
              f"original's numbers (verified, or nothing to rewrite)"
              + (f"; {len(not_built)} recipe(s) not built" if not_built else "") + "."]
    anchored = [r for r in rows if r.anchored and r.verdict == "verified"]
    if anchored:
        lines.append(f"{len(anchored)} of them verified segment by segment, anchored at "
                     "their run-time quantization points: " + ", ".join(
                         f"{_label(r, batches)} on {r.target}" for r in anchored) + ".")
    lines += ["",
              "| model | target | verdict | oracle | reason |", "|---|---|---|---|---|"]
    for r in rows:
        if r.verdict not in OK:
            lines.append("| " + " | ".join(_cell(c) for c in (
                _label(r, batches), r.target, r.verdict, r.oracle or "-",
                short(r.reason, 200))) + " |")
    return "\n".join(lines)
