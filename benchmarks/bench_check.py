"""How fast ``inspect`` and ``check`` are on big graphs, against ``onnx.load`` of the same file.

``python benchmarks/bench_check.py`` generates (once, cached in ``benchmarks/_out/``)
transformer-like models of 10k, 100k and 300k nodes with ``benchmarks/generate.py`` and, in
one process, times for each size (best of several runs, ``gc.collect()`` before each, GC left
enabled during the run as in real use):

* ``onnx.load``      - ``onnx.load(path, load_external_data=False)`` (upb parses lazily)
* ``onnx.load+save`` - that, plus ``onnx.save`` to a scratch file: the floor, as in issue 16
* ``load_model``     - ``rewriter.io.load_model``: parse plus structure/external-data checks
* ``inspect``        - ``load_model`` + ``rewriter.report.summary.inspect_model``
* ``check:TARGET``   - ``rewriter.api.check(path, [TARGET], confirm=False)`` (loads itself)
* ``check:TARGET before`` - with ``--before DIR``: the same with the ``rewriter`` package in
                     folder ``DIR`` (an earlier version, its ``rewriter_plugins`` and
                     ``rewriter_custom_ops`` beside it), in a child process of the same run

It prints seconds, ratios to the floor (wall, and process CPU time in brackets: the steadier
figure on a shared machine), the per-node time of 300k over 10k (1.0 = linear),
and CLI start-up (``onnx-rewriter --help`` against ``python -c "import onnx"``), and writes
everything to ``benchmarks/_out/bench_check.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "_out"
sys.path.insert(0, str(HERE))

from generate import generate_model, save_generated  # noqa: E402

SIZES = (10_000, 100_000, 300_000)
TARGETS = ("onnxruntime", "reference", "opset:13")
# Requirements (from the issue)
CHECK_OVER_FLOOR_AT_100K = 2.0  # floor: onnx.load + onnx.save
FLOOR = "onnx.load+save"
PER_NODE_GROWTH = 1.3  # per-node time at 300k over 10k
STARTUP_MARGIN_S = 0.3


def model_path(nodes: int, custom_fraction: float, external: bool, seed: int) -> Path:
    kind = "ext" if external else "inline"
    return OUT / f"bench_{nodes}_{kind}_c{custom_fraction:g}_s{seed}.onnx"


def ensure_model(nodes: int, custom_fraction: float, external: bool, seed: int,
                 regenerate: bool) -> tuple[Path, dict]:
    """Generate the model unless an up-to-date copy (same arguments) is cached."""
    path = model_path(nodes, custom_fraction, external, seed)
    meta_path = path.with_suffix(".json")
    if not regenerate and path.is_file() and meta_path.is_file():
        return path, json.loads(meta_path.read_text())
    start = time.perf_counter()
    gen = generate_model(nodes, custom_fraction=custom_fraction, seed=seed)
    save_generated(gen, path, external=external)
    meta = gen.summary() | {"bytes": path.stat().st_size,
                            "generate_seconds": round(time.perf_counter() - start, 2)}
    data = path.with_name(path.name + ".data")
    if data.is_file():
        meta["external_bytes"] = data.stat().st_size
    meta_path.write_text(json.dumps(meta, indent=1))
    return path, meta


def best_of(fn, repeats: int) -> dict:
    times, cpu = [], []
    for _ in range(repeats):
        gc.collect()
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return {"best": min(times), "runs": times, "cpu": min(cpu), "cpu_runs": cpu}


_BEFORE = r"""
import gc, json, sys, time
path, target, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3])
from rewriter.api import check
check(path, [target], confirm=False)  # one-off costs, as measure_size pays them
times, cpu = [], []
for _ in range(repeats):
    gc.collect()
    start, start_cpu = time.perf_counter(), time.process_time()
    found = len(check(path, [target], confirm=False).findings)
    times.append(time.perf_counter() - start)
    cpu.append(time.process_time() - start_cpu)
print(json.dumps({"best": min(times), "runs": times, "cpu": min(cpu), "cpu_runs": cpu,
                  "findings": found}))
"""


def time_before(engine: Path, path: Path, target: str, repeats: int) -> dict | None:
    """``check`` of the ``rewriter`` package in folder ``engine``, timed as ``check:TARGET``
    in a child process (cwd ``engine``, so its packages come first); None if it failed."""
    proc = subprocess.run([sys.executable, "-c", _BEFORE, str(path), target, str(repeats)],
                          capture_output=True, text=True, cwd=str(engine))
    if proc.returncode:
        print(f"the check in {engine} failed: {proc.stderr.strip()[-300:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure_size(path: Path, repeats: int, targets, before: Path | None = None) -> dict:
    import onnx

    from rewriter.api import check
    from rewriter.io.model import load_model
    from rewriter.report.summary import inspect_model

    scratch = OUT / f"_scratch_{os.getpid()}.onnx"

    def load_and_save():
        onnx.save(onnx.load(path, load_external_data=False), scratch)

    findings: dict[str, int] = {}

    def run_check(target):
        def go():
            findings[target] = len(check(path, [target], confirm=False).findings)
        return go

    cases = [
        ("onnx.load", lambda: onnx.load(path, load_external_data=False)),
        ("onnx.load+save", load_and_save),
        ("load_model", lambda: load_model(path)),
        ("inspect", lambda: inspect_model(load_model(path))),
        *((f"check:{t}", run_check(t)) for t in targets),
    ]
    results = {}
    for name, fn in cases:
        if name.startswith("check:"):
            fn()  # first call pays one-off costs (importing onnxruntime, kernel tables)
        results[name] = best_of(fn, repeats)
        if before is not None and name.startswith("check:"):
            earlier = time_before(before, path, name.removeprefix("check:"), repeats)
            if earlier is not None:
                findings[name.removeprefix("check:") + " before"] = earlier.pop("findings")
                results[f"{name} before"] = earlier
    scratch.unlink(missing_ok=True)
    return {"timings": results, "findings": findings}


def measure_startup(repeats: int = 5) -> dict:
    exe = shutil.which("onnx-rewriter")
    help_cmd = [exe, "--help"] if exe else [sys.executable, "-m", "rewriter.cli", "--help"]
    commands = {
        "onnx-rewriter --help": help_cmd,
        'python -c "import onnx"': [sys.executable, "-c", "import onnx"],
    }
    out = {}
    for name, cmd in commands.items():
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            times.append(time.perf_counter() - start)
        out[name] = {"best": min(times), "runs": times, "command": cmd}
    # what --help imports: it must not pull in onnxruntime, rich (or onnx)
    probe = (
        "import sys\n"
        "from rewriter.cli import main\n"
        "import contextlib, io\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['--help'])\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'onnxruntime', 'rich', 'onnx'})\n"
        "print(','.join(heavy))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    out["help_imports_heavy"] = [m for m in proc.stdout.strip().split(",") if m]
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")],
                        default=list(SIZES), help="comma-separated node counts")
    parser.add_argument("--repeats", type=int, default=None,
                        help="runs per measurement (default: 7 below 100k nodes, else 3)")
    parser.add_argument("--custom-fraction", type=float, default=0.05)
    parser.add_argument("--inline", action="store_true",
                        help="weights inline in the protobuf (default: external data file)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--regenerate", action="store_true", help="ignore cached models")
    parser.add_argument("--no-startup", action="store_true")
    parser.add_argument("--before", type=Path, default=None,
                        help="folder with an earlier rewriter (and its rewriter_plugins, "
                             "rewriter_custom_ops): its check timed in the same run")
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    targets = [t for t in args.targets.split(",") if t]
    wall = time.perf_counter()

    sizes = {}
    for nodes in args.sizes:
        path, meta = ensure_model(nodes, args.custom_fraction, not args.inline, args.seed,
                                  args.regenerate)
        repeats = args.repeats or (7 if nodes < 100_000 else 3)
        print(f"measuring {nodes} nodes ({path.name}, {meta['bytes'] / 2**20:.1f} MiB, "
              f"{repeats} runs each) ...", file=sys.stderr, flush=True)
        sizes[nodes] = {"model": meta | {"path": str(path)}, "repeats": repeats,
                        **measure_size(path, repeats, targets, args.before)}

    startup = None if args.no_startup else measure_startup()
    report = summarize(sizes, startup)
    report["environment"] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "protobuf": _version("protobuf"),
        "onnx": _version("onnx"),
        "onnxruntime": _version("onnxruntime"),
        "protobuf_implementation": _protobuf_impl(),
    }
    report["wall_seconds"] = round(time.perf_counter() - wall, 1)
    out_file = OUT / "bench_check.json"
    out_file.write_text(json.dumps(report, indent=1))
    print_report(report)
    print(f"\nwritten: {out_file}   (whole run: {report['wall_seconds']}s)")
    return 0


def summarize(sizes: dict, startup: dict | None) -> dict:
    names = list(dict.fromkeys(n for data in sizes.values() for n in data["timings"]))
    table = {}
    for name in names:
        row = {}
        for nodes, data in sizes.items():
            if name not in data["timings"]:
                continue  # an earlier version that failed at this size
            timing, floor = data["timings"][name], data["timings"][FLOOR]
            best = timing["best"]
            row[nodes] = {"seconds": best, "over_floor": best / floor["best"],
                          "cpu_seconds": timing.get("cpu"),
                          "cpu_over_floor": (timing["cpu"] / floor["cpu"]
                                             if timing.get("cpu") and floor.get("cpu") else None),
                          "us_per_node": best / nodes * 1e6}
        table[name] = row
    small, big = min(sizes), max(sizes)
    growth = {
        name: (row[big]["us_per_node"] / row[small]["us_per_node"])
        if big != small and big in row and small in row else None
        for name, row in table.items()
    }
    cpu_growth = {  # the same from process CPU time (steadier on a shared machine)
        name: (row[big]["cpu_seconds"] / big) / (row[small]["cpu_seconds"] / small)
        if big != small and big in row and small in row and row[small]["cpu_seconds"]
        else None
        for name, row in table.items()
    }
    ours = [n for n in table if not n.endswith(" before")]
    verdicts = {}
    for name in [n for n in ours if n.startswith("check:")] if 100_000 in sizes else ():
        ratio = table[name][100_000]["over_floor"]
        verdicts[f"{name.replace(':', '_')}_over_load_save_at_100k"] = {
            "value": ratio, "limit": CHECK_OVER_FLOOR_AT_100K,
            "ok": ratio <= CHECK_OVER_FLOOR_AT_100K}
    if big != small:
        measured = {k: growth[k] for k in ours
                    if k.startswith(("check", "inspect", "load_model"))}
        verdicts["per_node_growth"] = {
            "value": measured,
            "limit": PER_NODE_GROWTH,
            "ok": all(v <= PER_NODE_GROWTH for v in measured.values()),
            "sizes": [small, big]}
    if startup:
        delta = startup["onnx-rewriter --help"]["best"] - startup['python -c "import onnx"']["best"]
        verdicts["startup_help_minus_import_onnx"] = {
            "value": delta, "limit": STARTUP_MARGIN_S, "ok": delta <= STARTUP_MARGIN_S}
        verdicts["help_imports_no_onnxruntime_or_rich"] = {
            "value": startup["help_imports_heavy"],
            "ok": not {"onnxruntime", "rich"} & set(startup["help_imports_heavy"])}
    return {"sizes": sizes, "table": table, "per_node_growth": growth,
            "per_node_growth_cpu": cpu_growth, "startup": startup, "verdicts": verdicts}


def print_report(report: dict) -> None:
    table, sizes = report["table"], list(report["sizes"])
    head = f"{'':25}" + "".join(f"{_k(n) + ' s':>11}{'x floor (cpu)':>16}" for n in sizes)
    if len(sizes) > 1:
        head += f"{f'us/node {_k(sizes[-1])}/{_k(sizes[0])}':>22}"
    print(head)
    for name, row in table.items():
        line = f"{name:25}" + "".join(
            (f"{row[n]['seconds']:>11.3f}{row[n]['over_floor']:>9.1f}"
             + (f" ({row[n]['cpu_over_floor']:4.1f})" if row[n].get("cpu_over_floor")
                else " " * 7)) if n in row else " " * 27
            for n in sizes)
        growth = report["per_node_growth"].get(name)
        if growth is not None:
            cpu = report.get("per_node_growth_cpu", {}).get(name)
            line += f"{growth:>15.2f}" + (f" ({cpu:4.2f})" if cpu else "")
        print(line)
    for n, data in report["sizes"].items():
        m = data["model"]
        print(f"  {_k(n)}: {m['nodes']} nodes, {m['initializers']} initializers, "
              f"{m['if_nodes']} If, {m['custom_total']} custom-op nodes; findings "
              + ", ".join(f"{t}={c}" for t, c in data["findings"].items()))
    if report["startup"]:
        s = report["startup"]
        help_s = s["onnx-rewriter --help"]["best"]
        onnx_s = s['python -c "import onnx"']["best"]
        heavy = ", ".join(s["help_imports_heavy"]) or "none of onnx/onnxruntime/rich"
        print(f"start-up: onnx-rewriter --help {help_s:.3f}s, python -c 'import onnx' "
              f"{onnx_s:.3f}s; --help imports {heavy}")
    print("requirements:")
    for name, v in report["verdicts"].items():
        value = v["value"]
        if isinstance(value, dict):
            value = ", ".join(f"{k}={x:.2f}" for k, x in value.items())
        elif isinstance(value, float):
            value = f"{value:.3f}"
        limit = f" (limit {v['limit']})" if "limit" in v else ""
        print(f"  {'ok  ' if v['ok'] else 'OVER'} {name}: {value}{limit}")


def _k(n: int) -> str:
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _protobuf_impl() -> str:
    from google.protobuf.internal import api_implementation

    return api_implementation.Type()


if __name__ == "__main__":
    sys.exit(main())
