"""The longer randomized fault-injection run of issue 15 (the CI run is tests/test_faults.py).

- save: a process saving two model+data pairs in turn to one output (4 MiB of weights each,
  under the CLI's signal handling) is killed with TERM, HUP or KILL after a random delay;
  the output must be one whole pair, TERM/HUP leave no temp file, and the next write leaves
  no temp file and no orphan data file.
- compare: ``onnx-rewriter compare A A -t onnxruntime --save-inputs`` killed after a random
  delay anywhere in its run; no process it started may be left a moment later, no temp file,
  the saved inputs absent or whole.
- two writers: two processes saving different pairs to one output, many times each.

    python benchmarks/faults.py [--saves N] [--compares N] [--races N] [--seed S]

Prints what each kind of fault left; exit 1 on any failure.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import test_faults as tf  # noqa: E402 - the suite's own checks, run more often

SIGNALS = [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL]


def save_kills(count: int, rng: random.Random, root: Path) -> tuple[collections.Counter, list]:
    found: collections.Counter = collections.Counter()
    failures = []
    for i in range(count):
        sig = SIGNALS[i % 3]
        kill = tf.SaveKill(root / f"save{i}", sig, rng.uniform(0.0, 2.0), n=1024)
        try:
            kill.kill()
            found[(sig.name, kill.check())] += 1
        except Exception:  # noqa: BLE001 - the finding
            failures.append((f"save {i} {sig.name} after {kill.delay:.2f}s",
                             traceback.format_exc(limit=-2)))
    return found, failures


def compare_kills(count: int, rng: random.Random, root: Path) -> tuple[collections.Counter,
                                                                        list]:
    seen: collections.Counter = collections.Counter()
    failures = []
    for i in range(count):
        sig = SIGNALS[i % 3]
        folder = root / f"compare{i}"
        model = tf.write_source(folder, "A", 256)
        tag = uuid.uuid4().hex
        argv = tf.CLI + ["compare", str(model), str(model), "-t", "onnxruntime",
                         "--save-inputs", str(folder / "inputs.npz")]
        delay = rng.uniform(0.5, 8.0)
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=tf.tagged_env(tag), cwd=folder, start_new_session=True)
        try:
            time.sleep(delay)
            if proc.poll() is None:
                had_child = bool([p for p in tf.tagged_processes(tag) if p != proc.pid])
                os.kill(proc.pid, sig)
                seen[(sig.name, "during the run, worker up" if had_child else
                      "during the run, no worker yet")] += 1
            else:
                seen[(sig.name, "after the end")] += 1
            _, err = proc.communicate(timeout=120)
            err = err.decode(errors="replace")
            assert "Traceback" not in err, err
            left = tf.wait_until_gone(tag)
            assert left == [], f"processes left running: {left}"
            assert tf.temp_files(folder) == [], tf.temp_files(folder)
            saved = folder / "inputs.npz"
            if saved.exists():
                assert set(np.load(saved).files) == {"X"}
        except Exception:  # noqa: BLE001 - the finding
            failures.append((f"compare {i} {sig.name} after {delay:.2f}s",
                             traceback.format_exc(limit=-2)))
            tf.wait_until_gone(tag, 0)
    return seen, failures


def races(count: int, saves: int, root: Path) -> tuple[collections.Counter, list]:
    found: collections.Counter = collections.Counter()
    failures = []
    for i in range(count):
        folder = root / f"race{i}"
        a = tf.write_source(folder / "src_a", "A", 512)
        b = tf.write_source(folder / "src_b", "B", 512)
        out_dir = folder / "out"
        out_dir.mkdir()
        out = out_dir / "model.onnx"
        try:
            writers = [tf.start_saver(out, [a], saves), tf.start_saver(out, [b], saves)]
            for w in writers:
                tf.wait_ready(w)
            for w in writers:
                _, err = w.communicate(timeout=600)
                assert w.returncode == 0, err.decode(errors="replace")
            found[tf.pair_of(out)] += 1
            assert tf.temp_files(out_dir) == []
            assert tf.data_files(out) == tf.output_io.referenced_data(out)
        except Exception:  # noqa: BLE001 - the finding
            failures.append((f"race {i}", traceback.format_exc(limit=-2)))
    return found, failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saves", type=int, default=60, help="save kills")
    parser.add_argument("--compares", type=int, default=12, help="compare kills")
    parser.add_argument("--races", type=int, default=3, help="two-writer races")
    parser.add_argument("--race-saves", type=int, default=40, help="saves per writer")
    parser.add_argument("--seed", type=int, default=15)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    failures = []
    with tempfile.TemporaryDirectory(prefix="onnx-rewriter-faults-") as tmp:
        root = Path(tmp)
        start = time.monotonic()
        found, failed = save_kills(args.saves, rng, root)
        failures += failed
        print(f"save kills: {args.saves} in {time.monotonic() - start:.0f}s; pair found "
              "afterwards: " + ", ".join(f"{s} {p}: {n}" for (s, p), n in sorted(found.items())))
        start = time.monotonic()
        seen, failed = compare_kills(args.compares, rng, root)
        failures += failed
        print(f"compare kills: {args.compares} in {time.monotonic() - start:.0f}s: "
              + ", ".join(f"{s} {w}: {n}" for (s, w), n in sorted(seen.items())))
        start = time.monotonic()
        pairs, failed = races(args.races, args.race_saves, root)
        failures += failed
        print(f"two writers: {args.races} races of 2x{args.race_saves} saves in "
              f"{time.monotonic() - start:.0f}s; pair left: "
              + ", ".join(f"{p}: {n}" for p, n in sorted(pairs.items())))
    print(f"failures: {len(failures)}")
    for what, detail in failures:
        print(f"  {what}\n    " + detail.strip().replace("\n", "\n    "))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
