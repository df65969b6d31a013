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
VERDICTS = ("verified", "unchanged", "mismatch", "unverified", "unfixable", "error", "timeout")


@dataclass
class Row:
    model: str  # the recipe's name
    target: str
    verdict: str  # one of VERDICTS, or "not built"
    reason: str = ""  # first line of the verdict's reason (shortened)
    oracle: str = ""  # where the original ran
    remedies: list[str] = field(default_factory=list)  # what the rewrite applied
    ops_left: list[str] = field(default_factory=list)  # ops without a remedy, or refused
    seconds: float = 0.0


def short(message: str, limit: int = 160) -> str:
    """One line, without onnxruntime's prefixes and temporary paths."""
    line = " ".join((message or "").split())
    line = re.sub(r"\[ONNXRuntimeError\] : \d+ : \w+ : ", "", line)
    line = re.sub(r"(/tmp|/root|/home)\S*/", "", line)
    return line if len(line) <= limit else line[:limit - 1] + "…"


def rewrite_pair(model: Path, target: str, workdir: Path, timeout: float) -> Row:
    """``rewrite(model, [target])`` ending with its comparison on the model's inputs."""
    from rewriter.api import rewrite
    from rewriter.pipeline import UnfixableError

    name = json.loads((model.parent / "provenance.json").read_text())["recipe"]
    row = Row(name, target, "error")
    out = workdir / f"{target.replace(':', '_')}.onnx"
    started = time.perf_counter()
    options = {"inputs": str(model.parent / "inputs.npz"), "timeout": timeout}
    try:
        result = rewrite(str(model), [target], output=str(out), compare_options=options,
                         allow_unverified=True, keep_failed=True)
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
        if report.comparison is not None:
            row.oracle = str(report.comparison.oracle or "")
        if report.remaining:  # the target refused the result: findings left
            row.verdict = "unfixable"
            row.ops_left = sorted({f.op_label or "model" for f in report.remaining})
            first = report.remaining[0]
            row.reason = short(f"{len(report.remaining)} finding(s) left after the rewrite, "
                               f"e.g. {first.op_label or 'model'}: {first.detail}")
    row.seconds = round(time.perf_counter() - started, 2)
    return row


def child(argv: list[str]) -> None:
    """In the child: MODEL RESULTS TIMEOUT TARGET... ; one JSON row per line to RESULTS."""
    from rewriter.console import native_stdout_to_stderr

    model, results, timeout, targets = Path(argv[0]), Path(argv[1]), float(argv[2]), argv[3:]
    with tempfile.TemporaryDirectory() as tmp, native_stdout_to_stderr():
        for target in targets:
            row = rewrite_pair(model, target, Path(tmp), timeout)
            with open(results, "a") as f:
                f.write(json.dumps(asdict(row)) + "\n")


_CHILD = ("import sys; sys.path.insert(0, {path!r}); from realworld.bench import child; "
          "child(sys.argv[1:])")


def run_model(name: str, model: Path, targets: list[str], timeout: float) -> list[Row]:
    """Every target for one model, in child processes; a pair that takes longer than
    ``timeout`` (plus a minute to start) is killed and recorded as "timeout"."""
    rows: list[Row] = []
    pending = list(targets)
    with tempfile.TemporaryDirectory() as tmp:
        results, log = Path(tmp) / "rows.jsonl", Path(tmp) / "child.log"
        while pending:
            results.write_text("")
            with open(log, "w") as err:
                process = subprocess.Popen(
                    [sys.executable, "-c", _CHILD.format(path=str(BENCHMARKS)), str(model),
                     str(results), str(timeout), *pending],
                    stdout=err, stderr=err, start_new_session=True)
            done, deadline = 0, time.monotonic() + timeout + 60
            while True:
                lines = results.read_text().splitlines()
                for line in lines[done:]:
                    rows.append(Row(**json.loads(line)))
                    deadline = time.monotonic() + timeout + 60
                done = len(lines)
                if done == len(pending) or process.poll() is not None:
                    break
                if time.monotonic() > deadline:
                    os.killpg(process.pid, signal.SIGKILL)
                    break
                time.sleep(0.2)
            process.wait()
            lines = results.read_text().splitlines()
            for line in lines[done:]:  # written while we were deciding
                rows.append(Row(**json.loads(line)))
            done = len(lines)
            if done < len(pending):  # the pair in progress hung or killed its process
                target = pending[done]
                if process.returncode == -signal.SIGKILL:
                    rows.append(Row(name, target, "timeout",
                                    f"no result within {timeout:.0f}s (+60s to start)"))
                else:
                    tail = (log.read_text().strip().splitlines() or [""])[-1]
                    rows.append(Row(name, target, "error", short(
                        f"the process died (exit {process.returncode}): {tail}")))
                done += 1
            pending = pending[done:]
    return rows


def run_all(built: dict[str, Path], failed: dict[str, str], targets: list[str], *,
            timeout: float = 300, jobs: int = 1) -> list[Row]:
    """Rows for every (model, target); models that failed to build get "not built"."""

    def one(item: tuple[str, Path]) -> list[Row]:
        rows = run_model(item[0], item[1], targets, timeout)
        for r in rows:
            print(f"{r.target:12} {r.model:50} {r.verdict:10} {r.seconds:6.1f}s",
                  file=sys.stderr, flush=True)
        return rows

    with ThreadPoolExecutor(max(1, jobs)) as pool:
        per_model = dict(zip(built, pool.map(one, built.items())))
    rows = []
    for name in [*built, *failed]:
        if name in per_model:
            order = {t: i for i, t in enumerate(targets)}
            rows += sorted(per_model[name], key=lambda r: order[r.target])
        else:
            rows += [Row(name, t, "not built", short(failed[name])) for t in targets]
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown(rows: list[Row], targets: list[str]) -> str:
    """The model x target verdicts, the totals, and the reason of every pair not verified."""
    models = list(dict.fromkeys(r.model for r in rows))
    verdict = {(r.model, r.target): r.verdict for r in rows}
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
              + (f"; {len(not_built)} recipe(s) not built" if not_built else "") + ".", "",
              "| model | target | verdict | oracle | reason |", "|---|---|---|---|---|"]
    for r in rows:
        if r.verdict not in OK:
            lines.append("| " + " | ".join(_cell(c) for c in (
                r.model, r.target, r.verdict, r.oracle or "-", r.reason)) + " |")
    return "\n".join(lines)
