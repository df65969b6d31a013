"""The longer fuzz run of issue 15 (the CI run is tests/test_properties.py, bounded).

1. The loader on mutated bytes of every real model in the shared corpus (and the tests'
   seed model): each mutant must load as a validated model (then ``inspect`` must describe
   it and ``check`` detect what onnxruntime and opset:17 cannot run, or refuse it with a
   RewriterError) or be refused with one ModelError line naming the file. Anything else is
   a failure.
2. The property-based tests of tests/test_properties.py with many more examples
   (``PROPERTY_EXAMPLES``), with Hypothesis's statistics.

    python benchmarks/fuzz.py [--mutants N] [--examples N] [--seed S] [--corpus DIR]

Prints the examples tried and the failures found; exit 1 when there is any.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("ONNX_REWRITER_CORPUS", ROOT.parent / "shared" / "corpus"))
if not CORPUS.is_dir():
    CORPUS = Path("/work/shared/corpus")


TARGETS = ["onnxruntime", "opset:17"]  # what check detects for each loaded mutant


def mutate(data: bytes, rng: np.random.Generator) -> bytes:
    """1 to 8 edits: a byte set, inserted or deleted, a slice repeated, or the file cut."""
    out = bytearray(data)
    for _ in range(int(rng.integers(1, 9))):
        at = int(rng.integers(0, max(len(out), 1)))
        how = rng.integers(0, 5)
        if how == 0 and out:
            out[at] = int(rng.integers(0, 256))
        elif how == 1:
            out[at:at] = bytes([int(rng.integers(0, 256))])
        elif how == 2 and out:
            del out[at]
        elif how == 3:
            n = int(rng.integers(1, 17))
            out[at:at] = out[at:at + n]
        elif how == 4:
            del out[at:]
    return bytes(out)


def seeds(corpus: Path, max_bytes: int) -> dict[str, bytes]:
    """The corpus models small enough to mutate in memory (external data left out: a
    mutant naming it is refused or loaded like any other), and the tests' seed model."""
    sys.path.insert(0, str(ROOT / "tests"))
    from test_properties import SEED_MODEL

    found = {"tests/seed": SEED_MODEL}
    for path in sorted(corpus.glob("*.onnx")) if corpus.is_dir() else []:
        if path.stat().st_size <= max_bytes:
            found[path.name] = path.read_bytes()
    return found


def fuzz_loader(mutants: int, seed: int, corpus: Path, max_bytes: int) -> dict:
    from rewriter.api import check
    from rewriter.errors import ModelError, RewriterError
    from rewriter.io.model import load_model
    from rewriter.manager import load_plugins
    from rewriter.report.summary import inspect_model

    plugins = load_plugins(())

    rng = np.random.default_rng(seed)
    models = seeds(corpus, max_bytes)
    names = list(models)
    counts = collections.Counter()
    failures: dict[str, tuple[str, str]] = {}
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="onnx-rewriter-fuzz-") as tmp:
        path = Path(tmp, "mutant.onnx")
        for i in range(mutants):
            name = names[i % len(names)]
            data = mutate(models[name], rng)
            path.write_bytes(data)
            try:
                loaded = load_model(path)
            except ModelError as e:
                text = str(e)
                if str(path) not in text or "\n" in text:
                    failures.setdefault(f"unclear error: {text[:80]}", (name, text))
                counts["refused"] += 1
                continue
            except Exception as e:  # noqa: BLE001 - the finding
                key = f"load: {type(e).__name__}: {str(e)[:60]}"
                failures.setdefault(key, (name, traceback.format_exc(limit=-3)))
                counts["crashed"] += 1
                continue
            for stage, work in (("inspect", lambda m=loaded: inspect_model(m)),
                                ("check", lambda m=loaded: check(m, TARGETS, plugins=plugins,
                                                                 confirm=False))):
                try:
                    work()
                except RewriterError:
                    counts[f"loaded, {stage} refused"] += 1
                    break
                except Exception as e:  # noqa: BLE001 - the finding
                    key = f"{stage}: {type(e).__name__}: {str(e)[:60]}"
                    failures.setdefault(key, (name, traceback.format_exc(limit=-3)))
                    counts["crashed"] += 1
                    break
            else:
                counts["loaded, inspected and checked"] += 1
    return {"tried": mutants, "seeds": len(models), "counts": dict(counts),
            "failures": failures, "seconds": time.monotonic() - start}


def run_properties(examples: int) -> dict:
    env = dict(os.environ, PROPERTY_EXAMPLES=str(examples))
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(ROOT / "tests" / "test_properties.py"), "-q",
         "-p", "no:cacheprovider", "--hypothesis-show-statistics"],
        capture_output=True, text=True, env=env, cwd=ROOT)
    stats = re.findall(r"test_properties\.py::(\w+):\s*\n\s*- during generate phase "
                       r"\(([\d.]+) seconds\):\s*\n\s*- Typical runtimes: [^\n]*\n\s*- "
                       r"(\d+) passing examples?, (\d+) failing examples?, (\d+) invalid",
                       proc.stdout)
    return {"returncode": proc.returncode, "stats": stats, "seconds": time.monotonic() - start,
            "tail": proc.stdout.strip().splitlines()[-15:]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=int, default=20000)
    parser.add_argument("--examples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--max-bytes", type=int, default=1 << 20)
    args = parser.parse_args(argv)

    loader = fuzz_loader(args.mutants, args.seed, args.corpus, args.max_bytes)
    print(f"loader: {loader['tried']} mutants of {loader['seeds']} seed models in "
          f"{loader['seconds']:.0f}s: " + ", ".join(f"{k} {v}" for k, v in
                                                     sorted(loader["counts"].items())))
    for key, (seed_name, detail) in loader["failures"].items():
        print(f"  FAILURE ({seed_name}) {key}\n    " + detail.strip().replace("\n", "\n    "))
    failed = bool(loader["failures"])
    if args.examples > 0:
        props = run_properties(args.examples)
        total = 0
        for name, _, passing, failing, invalid in props["stats"]:
            total += int(passing) + int(failing)
            print(f"property {name}: {passing} passing, {failing} failing, {invalid} invalid")
        print(f"properties: {total} examples in {props['seconds']:.0f}s, pytest exit "
              f"{props['returncode']}")
        if props["returncode"] != 0:
            print("\n".join(props["tail"]))
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
