"""The cleanup stage against onnxslim on the same rewrites (issue 30, item 2).

``python benchmarks/cleanup_vs_onnxslim.py [--target T ...] [--no-verify] [--json] [MODEL ...]``
(extra ``[bench-slim]``: onnxslim). For each model (default: ``../shared/corpus`` and the
real-world benchmark's models under ``tests/data/realworld``) and target (default
onnxruntime and openvino) that needs a rewrite: the rewrite without cleanup
(``cleanup=False``), that result slimmed by onnxslim, and the rewrite with the cleanup
(verified unless ``--no-verify``, the verdict printed); node counts over every graph and
function. The headline: our total against onnxslim's (goal: ours <= onnxslim's + 5%).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
REALWORLD = ROOT / "tests" / "data" / "realworld"


def _nodes(model: onnx.ModelProto) -> int:
    from rewriter.graph.walk import iter_scopes

    return sum(len(scope.nodes) for scope in iter_scopes(model))


def _slim(path: Path) -> tuple[int | None, int | None, str]:
    import onnxslim

    try:
        slimmed = onnxslim.slim(str(path))
    except Exception as e:  # noqa: BLE001 - onnxslim's failure is a row, not the end
        return None, None, f"onnxslim: {type(e).__name__}: {str(e)[:120]}"
    return _nodes(slimmed), slimmed.ByteSize(), ""


def measure(model_path: Path, target: str, plugins, verify: bool, work: Path) -> dict | None:
    from rewriter.api import rewrite
    from rewriter.errors import RewriterError

    row = {"model": model_path.name, "target": target}
    raw, ours = work / "raw.onnx", work / "ours.onnx"
    try:
        result = rewrite(model_path, target, output=raw, plugins=plugins, verify=False,
                         cleanup=False)
    except RewriterError as e:
        row["skipped"] = str(e).splitlines()[0][:160]
        return row
    if result.report.verdict == "unchanged" or not result.report.written:
        return None  # nothing rewritten: no cleanup runs
    row["before"] = result.report.before.nodes
    raw_model = onnx.load(raw, load_external_data=False)
    row["raw"], row["raw_bytes"] = _nodes(raw_model), raw_model.ByteSize()
    row["onnxslim"], row["onnxslim_bytes"], row["onnxslim_error"] = _slim(raw)
    start = time.perf_counter()
    try:
        cleaned = rewrite(model_path, target, output=ours, plugins=plugins, verify=verify,
                          allow_unverified=True, keep_failed=True)
    except RewriterError as e:
        row["ours_error"] = str(e).splitlines()[0][:160]
        return row
    row["seconds"] = round(time.perf_counter() - start, 2)
    ours_model = onnx.load(ours, load_external_data=False) if cleaned.report.written else None
    row["ours"] = _nodes(ours_model) if ours_model is not None else None
    row["ours_bytes"] = ours_model.ByteSize() if ours_model is not None else None
    row["cleanup"] = cleaned.report.cleanup
    row["verdict"] = cleaned.report.verdict
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--target", action="append", dest="targets")
    parser.add_argument("--no-verify", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from rewriter.manager import load_plugins

    models = args.models or sorted([*CORPUS.glob("*.onnx"), *REALWORLD.glob("*.onnx")])
    targets = args.targets or ["onnxruntime", "openvino"]
    plugins = load_plugins()
    rows = []
    for model in models:
        for target in targets:
            with tempfile.TemporaryDirectory() as tmp:
                row = measure(model, target, plugins, not args.no_verify, Path(tmp))
            if row is not None:
                rows.append(row)
                if not args.json:
                    print(json.dumps(row), file=sys.stderr, flush=True)
    both = [r for r in rows if r.get("ours") is not None and r.get("onnxslim") is not None]
    ours, slim = sum(r["ours"] for r in both), sum(r["onnxslim"] for r in both)
    raw = sum(r["raw"] for r in both)
    size = {k: sum(r[f"{k}_bytes"] for r in both) for k in ("raw", "ours", "onnxslim")}
    summary = {"pairs": len(both), "raw_nodes": raw, "ours": ours, "onnxslim": slim,
               "bytes": size,
               "ours_over_onnxslim": round(ours / slim, 4) if slim else None,
               "verdicts": {v: sum(1 for r in both if r.get("verdict") == v)
                            for v in sorted({r.get("verdict") for r in both if r.get("verdict")})},
               "not_compared": [r for r in rows if r not in both]}
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary}, indent=1))
    else:
        print(f"{'model':<52} {'target':<12} {'raw':>6} {'slim':>6} {'ours':>6}  verdict")
        for r in both:
            print(f"{r['model'][:52]:<52} {r['target']:<12} {r['raw']:>6} {r['onnxslim']:>6} "
                  f"{r['ours']:>6}  {r.get('verdict')}")
        print(f"\n{len(both)} rewrites: {raw} nodes without cleanup, onnxslim {slim}, ours "
              f"{ours} ({summary['ours_over_onnxslim']} x onnxslim's; goal <= 1.05); bytes "
              f"(weights in the file included): without cleanup {size['raw']:,}, onnxslim "
              f"{size['onnxslim']:,}, ours {size['ours']:,}")
        for r in summary["not_compared"]:
            print(f"not compared: {r['model']} {r['target']}: "
                  f"{r.get('skipped') or r.get('onnxslim_error') or r.get('ours_error')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
