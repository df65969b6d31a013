"""The README's commands under every Python on the machine, and with the lowest allowed onnx
and onnxruntime.

For each Python found (``/root/.pyenv/versions/3.1[0-3]*``): a fresh virtual environment,
the project installed from the tree of a commit (``--commit``, default HEAD: committed files
only) as pip resolves it for that Python (``pip install -e '.[dev]'``, the README's second command),
then the README's first command (``onnx-rewriter rewrite examples/new_opset_export.onnx
-o rewritten.onnx``, which must exit 0: verified) and a quick test subset (``--full``: the
README's whole test command, ``pytest -n 2``). ``--lowest`` adds one more run on the
lowest Python: the same install, then ``pip install onnx==X onnxruntime==Y ...`` with the
lower bounds ``pyproject.toml`` declares (``PINNED_LOWEST``). Runs go one at a time (the
machine has 2 cores); each prints one line (and the ids of the tests that failed), and
``--json FILE`` keeps every run's versions, exit codes, failed tests and last lines of
output.
``--reuse`` keeps a venv an earlier run made when its Python still starts (the install step
then only tops it up).

    python tools/python_versions.py --lowest                 # every Python + lowest pins
    python tools/python_versions.py --only 3.10 --lowest --full
    python tools/python_versions.py --only 3.10 --only 3.13 --lowest --full --reuse  # CI
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYENV = Path("/root/.pyenv/versions")
MINORS = ("3.10", "3.11", "3.12", "3.13")
QUICK_TESTS = ["tests/test_examples.py", "tests/test_check.py", "tests/test_rewrite.py",
               "tests/test_runtime_limits.py", "tests/test_layers.py",
               "tests/test_onnxruntime_reduced.py", "tests/test_tract.py"]
REPORTED = ("onnx", "onnxruntime", "onnxruntime-extensions", "onnx-ir", "onnxscript", "numpy",
            "openvino", "tract", "torch")
# the dependencies whose lower bound the lowest run installs (pluggy, click and rich: as pip
# resolves them)
PINNED_LOWEST = ("onnx", "onnxruntime", "onnx-ir", "onnxscript", "onnxruntime-extensions",
                 "numpy")
INSTALL_TIMEOUT_S = 1800
COMMAND_TIMEOUT_S = 600
TESTS_TIMEOUT_S = 7200  # the whole suite on a loaded 2-core machine: up to an hour


@dataclass
class Run:
    """One Python (with optional pins): what was installed and what passed."""

    name: str
    python: str
    pins: list[str] = field(default_factory=list)
    python_version: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    install: str = "not run"  # "ok" or the failure's last lines
    command1: str = "not run"
    tests: str = "not run"
    tests_summary: str = ""
    failures: list[str] = field(default_factory=list)  # the test ids pytest's summary lists
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.install == self.command1 == self.tests == "ok"


def lower_bounds(pyproject: Path = ROOT / "pyproject.toml") -> dict[str, str]:
    """The ``>=`` bound of each dependency of ``[project] dependencies`` (on Python 3.10,
    which has no tomllib: of the installed distribution's requirements instead)."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        from importlib import metadata

        specs = [r for r in metadata.requires("onnx-graph-rewriter") or []
                 if "extra ==" not in r]
    else:
        specs = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    out = {}
    for spec in specs:
        m = re.match(r"^\s*([A-Za-z0-9_.-]+)\s*>=\s*([^,;\s]+)", spec)
        if m:
            out[m.group(1).lower()] = m.group(2)
    return out


def found_pythons(only: list[str]) -> list[tuple[str, Path]]:
    """(minor version, interpreter) for each of 3.10-3.13 installed under pyenv."""
    out = []
    for minor in MINORS:
        if only and minor not in only:
            continue
        versions = sorted(PYENV.glob(f"{minor}.*"), key=lambda p: [
            int(x) if x.isdigit() else 0 for x in p.name.split(".")])
        interpreters = [v / "bin" / "python" for v in versions if (v / "bin" / "python").exists()]
        if interpreters:
            out.append((minor, interpreters[-1]))
    return out


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _run(cmd: list[str], cwd: Path, timeout: int, env: dict) -> tuple[int, str]:
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return -1, f"timed out after {timeout}s: {' '.join(cmd)}\n{e.stdout or ''}"
    return proc.returncode, proc.stdout + proc.stderr


def copy_tree(work: Path, commit: str = "HEAD") -> Path:
    """The tree of ``commit`` (committed files only: others' uncommitted edits in this shared
    working tree may need files they have not added yet) in ``work/main``, with
    ``work/shared`` pointing at the shared corpus as ``../shared`` does here."""
    src = work / "main"
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", "--format=tar", commit], cwd=ROOT,
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    shared = work / "shared"
    if not shared.exists() and (ROOT.parent / "shared").exists():
        shared.symlink_to(ROOT.parent / "shared")
    return src


def failed_tests(output: str) -> list[str]:
    """The ids of the tests pytest's short summary lists as FAILED or ERROR (``-ra``, the
    project's addopts)."""
    return [m.group(2) for m in re.finditer(r"^(FAILED|ERROR) (\S+)", output, re.MULTILINE)]


def _starts(python: Path, env: dict) -> bool:
    """The venv's interpreter runs and has pip (a venv kept from an earlier run)."""
    return python.exists() and _run([str(python), "-m", "pip", "--version"], python.parent,
                                     120, env)[0] == 0


def run_one(run: Run, src: Path, work: Path, tests: list[str] | None,
            reuse: bool = False) -> Run:
    """Fresh venv (``reuse``: the one there if it still starts), install, command 1, tests:
    each step only if the one before passed. ``tests`` None: the README's ``pytest -n 2``."""
    start = time.perf_counter()
    env_dir = work / f"venv-{run.name}"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    if reuse and _starts(env_dir / "bin" / "python", env):
        code, out = 0, ""
    else:
        if env_dir.exists():
            shutil.rmtree(env_dir)
        code, out = _run([run.python, "-m", "venv", str(env_dir)], work, 300, env)
    python = str(env_dir / "bin" / "python")
    env["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(env_dir)
    steps = [[python, "-m", "pip", "install", "--quiet", "-e", ".[dev]"]]
    if run.pins:
        steps.append([python, "-m", "pip", "install", "--quiet", *run.pins])
    for cmd in steps:
        if code != 0:
            break
        code, out = _run(cmd, src, INSTALL_TIMEOUT_S, env)
    run.install = "ok" if code == 0 else _tail(out)
    if code == 0:
        code, out = _run([python, "-c", "import json, sys, importlib.metadata as m\n"
                          "v = {}\nfor n in sys.argv[1:]:\n    try: v[n] = m.version(n)\n"
                          "    except m.PackageNotFoundError: pass\n"
                          "print(json.dumps([sys.version.split()[0], v]))", *REPORTED],
                         src, 120, env)
        if code == 0:
            run.python_version, run.versions = json.loads(out.strip().splitlines()[-1])
        out_dir = work / f"out-{run.name}"
        out_dir.mkdir(exist_ok=True)
        code, out = _run([str(env_dir / "bin" / "onnx-rewriter"), "rewrite",
                          "examples/new_opset_export.onnx", "-o",
                          str(out_dir / "rewritten.onnx")], src, COMMAND_TIMEOUT_S, env)
        shutil.rmtree(out_dir, ignore_errors=True)
        run.command1 = "ok" if code == 0 else f"exit {code}: {_tail(out)}"
        cmd = [python, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
        cmd += ["-n", "2"] if tests is None else [t for t in tests if (src / t).exists()]
        code, out = _run(cmd, src, TESTS_TIMEOUT_S, env)
        summary = [line for line in out.splitlines() if re.search(
            r"\b(passed|failed|error|skipped)\b", line) and line.strip().startswith(("=", "1",
            "2", "3", "4", "5", "6", "7", "8", "9"))]
        run.tests_summary = summary[-1].strip("= ") if summary else _tail(out, 3)
        run.failures = failed_tests(out)
        run.tests = "ok" if code == 0 else f"exit {code}: {_tail(out, 40)}"
    run.seconds = round(time.perf_counter() - start, 1)
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", default=[], metavar="3.X",
                        help="only this minor version (repeatable)")
    parser.add_argument("--lowest", action="store_true",
                        help="also a run with the lowest allowed onnx and onnxruntime")
    parser.add_argument("--lowest-only", action="store_true", help="only that run")
    parser.add_argument("--full", action="store_true",
                        help="the README's whole test command instead of the quick subset")
    parser.add_argument("--work", type=Path, default=Path("/tmp/python-versions"),
                        help="where the venvs and the tree's copy go (default %(default)s)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the runs as JSON")
    parser.add_argument("--commit", default="HEAD",
                        help="the commit whose tree is tested (default %(default)s)")
    parser.add_argument("--reuse", action="store_true",
                        help="keep a venv an earlier run left in --work if it still starts")
    args = parser.parse_args(argv)

    pythons = found_pythons(args.only)
    if not pythons:
        print(f"no Python {'/'.join(args.only or MINORS)} under {PYENV}", file=sys.stderr)
        return 2
    runs = [] if args.lowest_only else [Run(minor, str(py)) for minor, py in pythons]
    if args.lowest or args.lowest_only:
        bounds = lower_bounds()
        pins = [f"{name}=={bounds[name]}" for name in PINNED_LOWEST if name in bounds]
        minor, py = pythons[0]
        runs.append(Run(f"{minor}-lowest", str(py), pins))
    args.work.mkdir(parents=True, exist_ok=True)
    src = copy_tree(args.work, args.commit)
    tests = None if args.full else QUICK_TESTS
    head = subprocess.run(["git", "rev-parse", "--short", args.commit], cwd=ROOT,
                          capture_output=True, text=True).stdout.strip()
    print(f"tree: {ROOT} at {head} (committed files), copied to {src}", flush=True)
    for run in runs:
        run_one(run, src, args.work, tests, reuse=args.reuse)
        pins = f" pins {' '.join(run.pins)}" if run.pins else ""
        versions = " ".join(f"{k} {v}" for k, v in run.versions.items())
        print(f"{run.name:>12}: {'PASS' if run.passed else 'FAIL'}  Python "
              f"{run.python_version or '?'}{pins}; install {run.install.splitlines()[0]}, "
              f"command 1 {run.command1.splitlines()[0]}, tests {run.tests.splitlines()[0]} "
              f"({run.tests_summary}); {run.seconds:.0f}s\n{'':>14}{versions}", flush=True)
        for what in ("install", "command1", "tests"):
            text = getattr(run, what)
            if text not in ("ok", "not run"):
                print("\n".join(f"{'':>14}| {line}" for line in text.splitlines()[-25:]))
        if run.failures:
            print(f"{'':>14}{len(run.failures)} failed: " + " ".join(run.failures))
        if args.json:
            args.json.write_text(json.dumps([asdict(r) for r in runs], indent=2))
    return 0 if all(r.passed for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
