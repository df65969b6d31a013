"""Tree lowering strategies against onnxruntime's own tree kernel: for ensembles of several
shapes (trees x depth, complete trees of random splits; with ``--sklearn``, scikit-learn
forests and gradient boosting through skl2onnx, from the ``bench-ml`` extra), each strategy
(``gemm``, ``traversal``) and the cost model's choice (``auto``): the lowered model's bytes
over the original's, and its median latency on onnxruntime (CPU, one thread) over the
original's at batch 1 and 1024.

    python benchmarks/bench_trees.py [--repeat 200] [--sklearn] [--json out.json]
        [--hummingbird-python HB/bin/python]

With ``--hummingbird-python`` (an environment with hummingbird-ml, see
``benchmarks/hummingbird_convert.py``), the scikit-learn models are also converted by
Hummingbird with each of its tree strategies (``gemm``, ``tree_trav``, ``perf_tree_trav``)
and its own choice, and measured the same way, with their largest difference from
scikit-learn's own outputs (and the export's).

The targets of issue 28: within ~4x the bytes and ~2x the latency of onnxruntime's kernel.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnx.inliner
import onnxruntime as ort
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from rewriter_plugins.ai_onnx_ml import trees  # noqa: E402

from rewriter.plugin import DecompositionContext  # noqa: E402

FEATURES = 20
SHAPES = [(10, 3), (100, 4), (100, 8), (300, 6), (20, 12)]  # (trees, depth)
BATCHES = (1, 1024)


def synthetic(n_trees: int, depth: int, classes: int, seed: int = 0) -> onnx.ModelProto:
    """A TreeEnsembleClassifier (``classes`` > 1) or Regressor of complete trees."""
    rng = np.random.default_rng(seed)
    prefix = "class" if classes > 1 else "target"
    a: dict[str, list] = {k: [] for k in (
        "nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes", "nodes_values",
        "nodes_truenodeids", "nodes_falsenodeids", f"{prefix}_treeids", f"{prefix}_nodeids",
        f"{prefix}_ids", f"{prefix}_weights")}
    internal = 2 ** depth - 1
    for t in range(n_trees):
        for i in range(2 ** (depth + 1) - 1):
            leaf = i >= internal
            for key, v in zip(list(a)[:7], (t, i, int(rng.integers(0, FEATURES)),
                                             "LEAF" if leaf else "BRANCH_LEQ",
                                             0.0 if leaf else float(rng.normal()),
                                             0 if leaf else 2 * i + 1, 0 if leaf else 2 * i + 2)):
                a[key].append(v)
            if leaf:
                for k in range(max(classes, 1)):
                    for key, v in zip(list(a)[7:], (t, i, k, float(rng.normal()))):
                        a[key].append(v)
    outputs = [("label", TensorProto.INT64), ("scores", TensorProto.FLOAT)] if classes > 1 \
        else [("Y", TensorProto.FLOAT)]
    extra = ({"classlabels_int64s": list(range(classes)), "post_transform": "SOFTMAX"}
             if classes > 1 else {"n_targets": 1})
    op = "TreeEnsembleClassifier" if classes > 1 else "TreeEnsembleRegressor"
    node = helper.make_node(op, ["X"], [n for n, _ in outputs], domain="ai.onnx.ml", **a,
                            **extra)
    graph = helper.make_graph([node], "ensemble", [helper.make_tensor_value_info(
        "X", TensorProto.FLOAT, [None, FEATURES])], [helper.make_tensor_value_info(n, t, None)
                                                     for n, t in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("ai.onnx.ml", 1)])
    model.ir_version = 9
    return model


def sklearn_models(estimators: dict | None = None) -> dict[str, onnx.ModelProto]:
    """skl2onnx exports of two forests (``estimators``: filled with name -> (fitted
    estimator, sample rows))."""
    from skl2onnx import to_onnx
    from sklearn.datasets import make_classification
    from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier

    x, y = make_classification(2000, FEATURES, n_informative=10, n_classes=3, random_state=0)
    x = x.astype(np.float32)
    out = {}
    for name, est in (("rf-100-d8", RandomForestClassifier(100, max_depth=8, random_state=0)),
                      ("gbt-50x3-d3", GradientBoostingClassifier(n_estimators=50, max_depth=3,
                                                                 random_state=0))):
        est.fit(x, y)
        if estimators is not None:
            estimators[name] = (est, x[:1024])
        out[name] = to_onnx(est, x[:1], options={"zipmap": False},
                            target_opset={"": 17, "ai.onnx.ml": 3})
    return out


def lowered(model: onnx.ModelProto, strategy: str | None) -> tuple[onnx.ModelProto, str]:
    node = next(n for n in model.graph.node if n.domain == "ai.onnx.ml")
    x = model.graph.input[0]
    ctx = DecompositionContext(node, 17, {"": 17, "ai.onnx.ml": 1}, ["tensor(float)"],
                               declared={"X": x.type, node.input[0]: x.type})
    builder = (trees.build_tree_ensemble_classifier if node.op_type.endswith("Classifier")
               else trees.build_tree_ensemble_regressor)
    fn = builder(ctx, strategy)
    note = next(p.value for p in fn.metadata_props if p.key == trees.RULE_NOTE)
    call = helper.make_node(fn.name, list(node.input), list(node.output), domain=fn.domain)
    nodes = [call if n is node else n for n in model.graph.node]
    graph = helper.make_graph(nodes, "lowered", list(model.graph.input),
                              list(model.graph.output), list(model.graph.initializer))
    imports = [o for o in model.opset_import if o.domain != "ai.onnx.ml"]
    out = helper.make_model(graph, opset_imports=[*imports, helper.make_opsetid(fn.domain, 1)],
                            functions=[fn])
    out.ir_version = model.ir_version
    return onnx.inliner.inline_local_functions(out), note


def latency(model: onnx.ModelProto, batch: int, repeat: int) -> float:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 4
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    x = np.random.default_rng(1).normal(size=(batch, FEATURES)).astype(np.float32)
    for _ in range(5):
        session.run(None, {name: x})
    times = []
    runs = max(5, repeat // (1 if batch == 1 else 20))
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, {name: x})
        times.append(time.perf_counter() - start)
    return statistics.median(times)


SKIP_BYTES_RATIO = 16  # a forced strategy this much bigger is not timed (gemm of deep trees)
HUMMINGBIRD_STRATEGIES = ("gemm", "tree_trav", "perf_tree_trav", None)


def measure_hummingbird(python: str, name: str, model: onnx.ModelProto, estimator, rows,
                        repeat: int, folder: Path, base: dict[int, float]) -> list[dict]:
    """Hummingbird's conversions of ``estimator`` against ``model`` (the producer's; its
    latency per batch: ``base``)."""
    from _hummingbird import convert, max_abs_error, producer_outputs

    original = folder / f"{name}.original.onnx"
    onnx.save(model, original)
    jobs = [(f"{name}.{s or 'auto'}", estimator, rows[:16], s) for s in HUMMINGBIRD_STRATEGIES]
    converted = convert(python, jobs, folder)
    own = producer_outputs(estimator, rows)
    export_error = max_abs_error(original, rows, own)
    out = []
    for job, *_ in jobs:
        row = {"model": name, "strategy": "hummingbird:" + job.rsplit(".", 1)[1],
               "ort_us": {b: base[b] * 1e6 for b in BATCHES}}
        done = converted[job]
        if done.path is None:
            row["error"] = f"not converted: {done.error}"
        else:
            hb = onnx.load(done.path)
            row["bytes_ratio"] = hb.ByteSize() / model.ByteSize()
            row["max_abs_error"] = max_abs_error(done.path, rows, own)
            row["export_error"] = export_error
            try:
                for b in BATCHES:
                    row[f"latency_ratio_{b}"] = latency(hb, b, repeat) / base[b]
            except Exception as e:  # noqa: BLE001 - Hummingbird's model failing at a batch
                row["error"] = f"runs on {len(rows)} rows, fails at batch {b}: " + str(
                    e).splitlines()[0][:160]
        out.append(row)
    return out


def measure(name: str, model: onnx.ModelProto, repeat: int, base: dict[int, float]
            ) -> list[dict]:
    """Each strategy's lowering of ``model`` against it (its latency per batch: ``base``)."""
    base_bytes = model.ByteSize()
    rows = []
    for strategy in ("gemm", "traversal", None):
        low, note = lowered(model, strategy)
        if strategy is not None and low.ByteSize() > SKIP_BYTES_RATIO * base_bytes:
            rows.append({"model": name, "strategy": strategy, "bytes_ratio":
                         low.ByteSize() / base_bytes, "error": "not timed: "
                         f"{low.ByteSize() / base_bytes:.0f}x the bytes (the cost model "
                         "leaves it out)"})
            continue
        row = {"model": name, "strategy": strategy or f"auto={note.split(':')[0]}",
               "bytes_ratio": low.ByteSize() / base_bytes,
               "ort_us": {b: base[b] * 1e6 for b in BATCHES}}
        for b in BATCHES:
            row[f"latency_ratio_{b}"] = latency(low, b, repeat) / base[b]
        if strategy is None:
            row["note"] = note
        rows.append(row)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--sklearn", action="store_true", help="also scikit-learn models")
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--hummingbird-python", help="the interpreter of an environment with "
                        "hummingbird-ml: also its conversions of the scikit-learn models")
    args = parser.parse_args(argv)
    models = {f"synthetic-{t}x-d{d}-3cls": synthetic(t, d, 3) for t, d in SHAPES}
    models["synthetic-100x-d6-regr"] = synthetic(100, 6, 0)
    estimators: dict = {}
    if args.sklearn or args.hummingbird_python:
        models.update(sklearn_models(estimators))
    rows = []
    print(f"{'model':28} {'strategy':18} {'bytes':>7} {'lat b1':>7} {'lat b1024':>9}  "
          f"ort b1/b1024 (us)")
    with tempfile.TemporaryDirectory(prefix="bench-trees-") as tmp:
        for name, model in models.items():
            base = {b: latency(model, b, args.repeat) for b in BATCHES}
            measured = measure(name, model, args.repeat, base)
            if args.hummingbird_python and name in estimators:
                measured += measure_hummingbird(args.hummingbird_python, name, model,
                                                *estimators[name], args.repeat, Path(tmp),
                                                base)
            for row in measured:
                rows.append(row)
                if "error" in row:
                    print(f"{row['model']:28} {row['strategy']:18} {row['error']}")
                    continue
                error = (f"  max abs error {row['max_abs_error']:.2g} (the export's "
                         f"{row['export_error']:.2g}, against scikit-learn's own)"
                         if "max_abs_error" in row else "")
                print(f"{row['model']:28} {row['strategy']:18} {row['bytes_ratio']:6.2f}x "
                      f"{row['latency_ratio_1']:6.2f}x {row['latency_ratio_1024']:8.2f}x  "
                      f"{row['ort_us'][1]:.0f}/{row['ort_us'][1024]:.0f}{error}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
