"""The command line: ``build`` the models, ``run`` the benchmark (builds what is missing),
``testdata`` writes the committed test models (``tests/data/realworld``), ``pin`` prints
their verdicts today as ``tests/test_realworld.py``'s VERDICTS."""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import json
import os
import sys
import time
from pathlib import Path

from realworld.recipes import RECIPES, Recipe

TARGETS = ("onnxruntime", "openvino", "reference", "opset:17", "opset:13")
BATCHES = (1, 2)  # the inputs' batch sizes, each pair rewritten and compared at each


def _selected(patterns: list[str] | None) -> list[Recipe]:
    if not patterns:
        return list(RECIPES)
    return [r for r in RECIPES if any(fnmatch.fnmatch(r.name, p) for p in patterns)]


def build_all(recipes: list[Recipe], cache: Path) -> tuple[dict[str, Path], dict[str, str]]:
    """Build every recipe (cached ones are skipped): paths by recipe name, and the error of
    each one that failed to build."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import warnings

    warnings.filterwarnings("ignore")
    from realworld.build import build, tool_versions

    cache.mkdir(parents=True, exist_ok=True)
    versions = tool_versions()
    built, failed = {}, {}
    for recipe in recipes:
        started = time.perf_counter()
        try:
            with contextlib.redirect_stdout(sys.stderr):  # the exporters' progress lines
                built[recipe.name] = build(recipe, cache, versions)
        except Exception as e:  # noqa: BLE001 - a recipe that fails is reported, not fatal
            line = (str(e).strip().splitlines() or [""])[0][:200]
            failed[recipe.name] = f"{type(e).__name__}: {line}"
        status = "ok" if recipe.name in built else f"FAILED {failed[recipe.name]}"
        print(f"build {recipe.name:50} {time.perf_counter() - started:6.1f}s {status}",
              file=sys.stderr, flush=True)
    return built, failed


def main(argv: list[str] | None = None) -> int:
    from realworld.build import DEFAULT_CACHE

    parser = argparse.ArgumentParser(prog="python benchmarks/realworld",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("command", nargs="?", choices=("build", "run", "testdata", "pin"),
                        default="run")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                        help=f"where models are built and kept (default {DEFAULT_CACHE})")
    parser.add_argument("--only", action="append", metavar="PATTERN",
                        help="recipes whose name matches (fnmatch; repeatable), e.g. 'bert/*'")
    parser.add_argument("--target", action="append", dest="targets",
                        help=f"target (repeatable; default {', '.join(TARGETS)})")
    parser.add_argument("--timeout", type=float, default=300,
                        help="seconds per (model, target) pair (default 300)")
    parser.add_argument("--batch", action="append", type=int, dest="batches",
                        help="the inputs' batch size (repeatable; default 1 and 2)")
    parser.add_argument("--jobs", type=int, default=1, help="pairs run at once (default 1)")
    parser.add_argument("--json", dest="json_out", type=Path, help="write the rows here")
    parser.add_argument("--list", action="store_true", help="list the recipes and exit")
    args = parser.parse_args(argv)
    recipes = _selected(args.only)
    if args.command == "pin":  # the committed models only: no build, no transformers
        from realworld.testdata import pinned_verdicts

        print(pinned_verdicts(tuple(args.targets or TARGETS)))
        return 0
    if args.command == "testdata":
        from realworld.testdata import TEST_MODELS, write_test_models

        recipes = [r for r in recipes if r.name in TEST_MODELS]  # --only: those alone
    if args.list:
        print("\n".join(r.name for r in recipes))
        return 0
    if not recipes:
        print("error: no recipe matches", file=sys.stderr)
        return 2
    started = time.perf_counter()
    built, failed = build_all(recipes, args.cache.expanduser())
    build_seconds = time.perf_counter() - started
    print(f"built {len(built)} of {len(recipes)} models in {build_seconds:.0f}s",
          file=sys.stderr)
    if args.command == "testdata":
        if failed:
            print(f"error: not built: {', '.join(failed)}", file=sys.stderr)
            return 1
        for path in write_test_models(built):
            print(path)
        return 0
    if args.command == "build":
        for name, error in failed.items():
            print(f"{name}: {error}")
        return 1 if failed else 0
    from realworld.bench import markdown, run_all

    started = time.perf_counter()
    rows = run_all(built, failed, list(args.targets or TARGETS), timeout=args.timeout,
                   jobs=args.jobs, batches=tuple(args.batches or BATCHES))
    run_seconds = time.perf_counter() - started
    if args.json_out:
        args.json_out.write_text(json.dumps([r.__dict__ for r in rows], indent=1) + "\n")
    print(markdown(rows, list(args.targets or TARGETS)))
    print(f"\nbuild {build_seconds:.0f}s (cached models are not rebuilt), run "
          f"{run_seconds:.0f}s")
    return 0
