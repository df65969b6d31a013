"""Classical ML on every target (issue 28, item 4): small scikit-learn, LightGBM, XGBoost and
CatBoost models trained on generated data with fixed seeds, exported the usual way (skl2onnx,
onnxmltools, CatBoost's own exporter) into a temporary folder, each rewritten with the
library's ``rewriter.api.rewrite`` for every target (``benchmarks/realworld/bench.py``'s
``rewrite_pair``: the rewrite ends by comparing the result on the target with the original on
onnxruntime). A model x target table of verdicts with the reason of every pair not verified,
the tree strategy the rewrite chose, and the rewritten model's bytes and onnxruntime latency
(batch 1 and 1,024, one thread) over the original's.

    nice -n 10 python benchmarks/classical_ml.py [--only NAME ...] [--targets T,T]
        [--repeat 30] [--no-latency] [--json out.json] [--adapt-interface]
        [--hummingbird-python HB/bin/python] [--seed 0]

``--hummingbird-python``: the interpreter of an environment with hummingbird-ml (see
``benchmarks/hummingbird_convert.py``): Hummingbird converts the same fitted models (its own
tree strategy), and a table sets its coverage, numbers (largest difference from the
fitted model's own outputs on the held-out rows, beside the export's), bytes and latency
beside the rewrite's for the onnxruntime build without the ML ops (standard ops only, as
Hummingbird's output is).

Needs the ``bench-ml`` extra (scikit-learn, skl2onnx, onnxmltools, lightgbm, xgboost,
catboost). ``onnxruntime-no-ml`` is ``onnxruntime:ops=FILE`` with a reduced-build
configuration listing every ai.onnx op and no ai.onnx.ml one.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _hummingbird import input_feeds  # noqa: E402
from realworld.bench import OK, Row, rewrite_pair, short  # noqa: E402

TARGETS = ("onnxruntime", "onnxruntime-no-ml", "openvino", "tract", "reference", "opset:13")
FEATURES = 8
ROWS = 400
COMPARE_ROWS = 64  # rows of the held-out data the rewrite compares on
OPSETS = {"": 17, "ai.onnx.ml": 3}
ONNXMLTOOLS_OPSET = 15  # the highest onnxmltools 1.16 converts LightGBM and XGBoost at
BATCHES = (1, 1024)
DATA_SEED = [0]  # the generated data's seed (--seed): other data, other fitted models


@dataclass
class Recipe:
    """One model: how it is trained and exported, and what it is meant to cover."""

    name: str
    build: Callable[..., object]  # (x, binary labels, 3-class labels, regression target)
    covers: str


def _data(classes: int):
    from sklearn.datasets import make_classification, make_regression

    x, y = make_classification(ROWS, FEATURES, n_informative=5, n_classes=classes,
                               n_clusters_per_class=1, random_state=DATA_SEED[0])
    _, target = make_regression(ROWS, FEATURES, n_informative=5, noise=0.1,
                                random_state=DATA_SEED[0])
    return x.astype(np.float32), y, target.astype(np.float32)


FITTED: list[tuple[object, np.ndarray]] = []  # (estimator, rows) of the recipe last built


def _skl(estimator, x, y, *, zipmap: bool | None = None, dtype=np.float32, ml_opset: int = 3):
    """Fit ``estimator`` and export it with skl2onnx (``zipmap=None``: a regressor)."""
    from skl2onnx import to_onnx

    x = x.astype(dtype)
    estimator.fit(x, y)
    FITTED.append((estimator, x))
    options = None if zipmap is None else {id(estimator): {"zipmap": zipmap}}
    return to_onnx(estimator, x[:1], options=options,
                   target_opset={"": OPSETS[""], "ai.onnx.ml": ml_opset})


def _pipeline(x, y, *, regressor: bool):
    """ColumnTransformer: SimpleImputer + StandardScaler on 5 columns, OneHotEncoder on 3
    binned columns, then Ridge or LogisticRegression (NaNs in the numeric columns)."""
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    x = x.copy()
    x[:, 5:] = np.clip(np.round(x[:, 5:]), -2, 2)
    x[::7, 1] = np.nan
    pre = ColumnTransformer([
        ("num", Pipeline([("impute", SimpleImputer()), ("scale", StandardScaler())]),
         [0, 1, 2, 3, 4]),
        ("cat", OneHotEncoder(handle_unknown="ignore"), [5, 6, 7])])
    model = Ridge() if regressor else LogisticRegression(max_iter=500)
    pipe = Pipeline([("pre", pre), ("model", model)])
    return _skl(pipe, x, y, zipmap=None if regressor else False)


def _onnxmltools(estimator, x, y):
    from onnxmltools.convert import convert_lightgbm, convert_xgboost
    from onnxmltools.convert.common.data_types import FloatTensorType

    estimator.fit(x, y)
    FITTED.append((estimator, x))
    types = [("input", FloatTensorType([None, x.shape[1]]))]
    convert = convert_lightgbm if type(estimator).__module__.startswith("lightgbm") \
        else convert_xgboost
    return convert(estimator, initial_types=types, target_opset=ONNXMLTOOLS_OPSET)


def _catboost(estimator, x, y):
    import onnx

    estimator.fit(x, y, verbose=False)
    FITTED.append((estimator, x))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.onnx"
        estimator.save_model(str(path), format="onnx")
        return onnx.load(str(path))


def recipes() -> list[Recipe]:
    from sklearn.ensemble import (
        GradientBoostingClassifier,
        GradientBoostingRegressor,
        RandomForestClassifier,
        RandomForestRegressor,
    )
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor
    from sklearn.neural_network import MLPClassifier, MLPRegressor
    from sklearn.svm import SVC, SVR, LinearSVC

    def labels(y):  # string class labels
        return np.array(["ant", "bee", "cat", "dog"])[y]

    def lgbm(kind):
        import lightgbm
        return getattr(lightgbm, kind)(n_estimators=30, num_leaves=15, random_state=0,
                                       verbose=-1)

    def xgb(kind):
        import xgboost
        return getattr(xgboost, kind)(n_estimators=30, max_depth=4, random_state=0)

    def cat(kind):
        import catboost
        return getattr(catboost, kind)(iterations=30, depth=4, random_seed=0,
                                       thread_count=1, allow_writing_files=False)

    forest = dict(n_estimators=20, max_depth=6, random_state=0)
    r = Recipe
    return [
        r("logreg-binary-zipmap", lambda x, y2, y3, t: _skl(LogisticRegression(), x, y2,
                                                            zipmap=True),
          "linear, binary, ZipMap(int64)"),
        r("logreg-multi", lambda x, y2, y3, t: _skl(LogisticRegression(max_iter=500), x, y3,
                                                    zipmap=False), "linear, 3 classes"),
        r("logreg-multi-strlabels-zipmap",
          lambda x, y2, y3, t: _skl(LogisticRegression(max_iter=500), x, labels(y3),
                                    zipmap=True), "string labels, ZipMap(string)"),
        r("logreg-multi-double", lambda x, y2, y3, t: _skl(LogisticRegression(max_iter=500),
                                                           x, y3, zipmap=False,
                                                           dtype=np.float64),
          "float64 input"),
        r("ridge", lambda x, y2, y3, t: _skl(Ridge(), x, t), "LinearRegressor"),
        r("linearsvc-multi", lambda x, y2, y3, t: _skl(LinearSVC(random_state=0), x, y3),
          "LinearClassifier, no probabilities (no ZipMap option)"),
        r("svc-rbf-multi-proba", lambda x, y2, y3, t: _skl(
            SVC(probability=True, random_state=0), x, y3, zipmap=False),
          "SVMClassifier RBF, Platt"),
        r("svr-rbf", lambda x, y2, y3, t: _skl(SVR(), x, t / 100), "SVMRegressor"),
        r("rf-clf-multi", lambda x, y2, y3, t: _skl(RandomForestClassifier(**forest), x, y3,
                                                    zipmap=False), "trees, 3 classes"),
        r("rf-clf-multi-strlabels", lambda x, y2, y3, t: _skl(
            RandomForestClassifier(**forest), x, labels(y3), zipmap=False),
          "trees, string labels"),
        r("rf-reg-mlopset1", lambda x, y2, y3, t: _skl(RandomForestRegressor(**forest), x, t,
                                                       ml_opset=1), "trees, ml opset 1"),
        r("rf-reg-double", lambda x, y2, y3, t: _skl(RandomForestRegressor(**forest), x, t,
                                                     dtype=np.float64),
          "trees, float64, *_as_tensor (ml opset 3)"),
        r("gbt-clf-binary", lambda x, y2, y3, t: _skl(GradientBoostingClassifier(
            n_estimators=30, max_depth=3, random_state=0), x, y2, zipmap=False),
          "boosted trees, binary"),
        r("gbt-reg", lambda x, y2, y3, t: _skl(GradientBoostingRegressor(
            n_estimators=30, max_depth=3, random_state=0), x, t), "boosted trees, regressor"),
        r("pipeline-ct-ridge", lambda x, y2, y3, t: _pipeline(x, t, regressor=True),
          "ColumnTransformer: Imputer, Scaler, OneHotEncoder, Concat, Ridge"),
        r("pipeline-ct-logreg", lambda x, y2, y3, t: _pipeline(x, y3, regressor=False),
          "ColumnTransformer + LogisticRegression"),
        r("knn-clf-multi", lambda x, y2, y3, t: _skl(KNeighborsClassifier(5), x, y3,
                                                     zipmap=False), "k-NN (TopK, Scan)"),
        r("knn-reg", lambda x, y2, y3, t: _skl(KNeighborsRegressor(5), x, t), "k-NN regressor"),
        r("mlp-clf-multi", lambda x, y2, y3, t: _skl(MLPClassifier(
            hidden_layer_sizes=(16,), max_iter=300, random_state=0), x, y3, zipmap=False),
          "MLP"),
        r("mlp-reg", lambda x, y2, y3, t: _skl(MLPRegressor(
            hidden_layer_sizes=(16,), max_iter=300, random_state=0), x, t / 100),
          "MLP regressor"),
        r("lgbm-clf-binary-zipmap", lambda x, y2, y3, t: _onnxmltools(
            lgbm("LGBMClassifier"), x, y2), "LightGBM, binary, ZipMap"),
        r("lgbm-clf-multi-zipmap", lambda x, y2, y3, t: _onnxmltools(
            lgbm("LGBMClassifier"), x, y3), "LightGBM, 3 classes, ZipMap"),
        r("lgbm-reg", lambda x, y2, y3, t: _onnxmltools(lgbm("LGBMRegressor"), x, t),
          "LightGBM regressor"),
        r("xgb-clf-multi", lambda x, y2, y3, t: _onnxmltools(xgb("XGBClassifier"), x, y3),
          "XGBoost, 3 classes"),
        r("xgb-reg", lambda x, y2, y3, t: _onnxmltools(xgb("XGBRegressor"), x, t),
          "XGBoost regressor"),
        r("catboost-clf-binary", lambda x, y2, y3, t: _catboost(cat("CatBoostClassifier"), x,
                                                                y2),
          "CatBoost export, binary"),
        r("catboost-clf-multi", lambda x, y2, y3, t: _catboost(cat("CatBoostClassifier"), x,
                                                               y3),
          "CatBoost export, 3 classes"),
        r("catboost-reg", lambda x, y2, y3, t: _catboost(cat("CatBoostRegressor"), x, t),
          "CatBoost export, regressor"),
    ]


def no_ml_config(folder: Path) -> Path:
    """An onnxruntime reduced-build configuration: every ai.onnx op, no ai.onnx.ml one."""
    from onnx import defs

    ops = sorted({s.name for s in defs.get_all_schemas_with_history() if s.domain == ""})
    path = folder / "required_operators.config"
    path.write_text("ai.onnx;" + ",".join(map(str, range(7, 24))) + ";" + ",".join(ops) + "\n")
    return path


def build(recipe: Recipe, folder: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """Train and export ``recipe`` into ``folder``; the model's path and its compare inputs
    (held-out rows of the training distribution, as the model's inputs take them)."""
    import onnx

    x, y2, _ = _data(2)
    _, y3, t = _data(3)
    FITTED.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = recipe.build(x[:300], y2[:300], y3[:300], t[:300])
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    onnx.save(model, path)
    held_out = x[300:300 + COMPARE_ROWS].copy()
    if recipe.name.startswith("pipeline"):
        held_out[:, 5:] = np.clip(np.round(held_out[:, 5:]), -2, 2)
        held_out[::5, 1] = np.nan
    feeds = input_feeds(path, held_out)
    np.savez(folder / "inputs.npz", **feeds)
    return path, feeds


def latency(model_path: Path, feeds: dict[str, np.ndarray], batch: int, repeat: int) -> float:
    """Median seconds of one onnxruntime run (CPU, one thread) at ``batch`` rows."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 4
    session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
    reps = -(-batch // len(next(iter(feeds.values()))))
    batch_feeds = {k: np.concatenate([v] * reps)[:batch] for k, v in feeds.items()}
    session.run(None, batch_feeds)
    times = []
    for _ in range(max(5, repeat if batch == 1 else repeat // 3)):
        start = time.perf_counter()
        session.run(None, batch_feeds)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


@dataclass
class Result:
    """A pair's row and what the classical-ML benchmark adds."""

    row: Row
    covers: str = ""
    strategy: str = ""  # the tree lowering the rewrite chose (its rule's note)
    bytes_ratio: float | None = None
    latency_ratio: dict | None = None  # batch -> rewritten / original on onnxruntime


_STRATEGY = re.compile(r"ai-onnx-ml:TreeEnsemble\w*: (\w+): ([^;]*);[^;]*; ([^;]*)")


def strategies(rules: list[str]) -> str:
    """The tree strategies the applied rules name, with the ensemble's size and the reason
    (e.g. "traversal (20 trees, depth 6, 1144 nodes: lower estimated latency at batch 1 and
    1024)")."""
    found = {f"{m.group(1)} ({m.group(2)}: {m.group(3)})"
             for rule in rules for m in [_STRATEGY.search(rule)] if m}
    return "; ".join(sorted(found))


def run_pair(name: str, covers: str, path: Path, feeds: dict, target: str, spec: str,
             plugins, args) -> Result:
    workdir = path.parent / target.replace(":", "_")
    workdir.mkdir(exist_ok=True)
    row = rewrite_pair(path, spec, workdir, inputs=path.parent / "inputs.npz", name=name,
                       timeout=args.timeout, plugins=plugins,
                       adapt_interface=args.adapt_interface)
    row.target = target
    result = Result(row, covers, strategies(row.rules))
    written = [p for p in workdir.glob("*.onnx")]
    if row.verdict == "verified" and written and not args.no_latency:
        out = written[0]
        result.bytes_ratio = round(out.stat().st_size / path.stat().st_size, 2)
        try:
            result.latency_ratio = {b: round(latency(out, feeds, b, args.repeat) / latency(
                path, feeds, b, args.repeat), 2) for b in BATCHES}
        except Exception as e:  # noqa: BLE001 - a result onnxruntime cannot run is a finding
            result.latency_ratio = {"error": short(str(e), 120)}
    return result


@dataclass
class HummingbirdRow:
    """Hummingbird's conversion of one recipe's fitted model, beside the rewrite's."""

    model: str
    converted: bool
    error: str = ""
    max_abs_error: float | None = None  # against the fitted model's own outputs
    export_error: float | None = None  # the producer's export's, the same way
    bytes_ratio: float | None = None
    latency_ratio: dict | None = None


SAMPLE_ROWS = 16  # the rows Hummingbird traces its conversion with


def hummingbird_side(python: str, fitted: dict, folder: Path, args) -> list[HummingbirdRow]:
    """Hummingbird's own conversion (its default tree strategy) of every fitted model: its
    numbers against the fitted model's own (``predict_proba`` or ``predict``) on the
    held-out rows, its bytes and latency against the producer's export on onnxruntime."""
    from _hummingbird import convert, max_abs_error, producer_outputs

    jobs = [(name, est, rows[:SAMPLE_ROWS], None)
            for name, (est, rows, _, _) in fitted.items()]
    converted = convert(python, jobs, folder / "hummingbird")
    out = []
    for name, (estimator, _, path, feeds) in fitted.items():
        done = converted[name]
        if done.path is None:
            out.append(HummingbirdRow(name, False, short(done.error, 160)))
            continue
        row = HummingbirdRow(name, True)
        rows = next(iter(feeds.values()))
        try:
            row.bytes_ratio = round(done.path.stat().st_size / path.stat().st_size, 2)
            own = producer_outputs(estimator, rows)
            row.max_abs_error = max_abs_error(done.path, rows, own)
            row.export_error = max_abs_error(path, rows, own)
            if not args.no_latency:
                row.latency_ratio = {b: round(latency(done.path, input_feeds(done.path, rows),
                                                      b, args.repeat)
                                              / latency(path, feeds, b, args.repeat), 2)
                                     for b in BATCHES}
        except Exception as e:  # noqa: BLE001 - a conversion onnxruntime cannot run
            row.error = short(f"{type(e).__name__}: {e}", 160)
        out.append(row)
    return out


def hummingbird_table(rows: list[HummingbirdRow], results: list[Result]):
    from rich.table import Table

    ours = {r.row.model: r for r in results if r.row.target == "onnxruntime-no-ml"}
    grid = Table(title="Hummingbird's conversion beside the rewrite for onnxruntime without "
                 "the ML ops (error against the fitted model's own outputs; bytes and "
                 "latency over the producer's export on onnxruntime, batch 1 / 1024)")
    for column in ("model", "hummingbird", "max abs error (export's)", "bytes", "latency",
                   "rewrite", "bytes", "latency"):
        grid.add_column(column, overflow="fold")
    for r in rows:
        mine = ours.get(r.model)
        lat = r.latency_ratio or {}
        my_lat = (mine.latency_ratio or {}) if mine else {}
        grid.add_row(
            r.model, "converts" if r.converted and not r.error else (r.error or "no"),
            "" if r.max_abs_error is None else f"{r.max_abs_error:.2g}" + (
                "" if r.export_error is None else f" ({r.export_error:.2g})"),
            "" if r.bytes_ratio is None else f"{r.bytes_ratio}x",
            f"{lat.get(1)}x / {lat.get(1024)}x" if 1 in lat else "",
            mine.row.verdict if mine else "-",
            "" if not mine or mine.bytes_ratio is None else f"{mine.bytes_ratio}x",
            f"{my_lat.get(1)}x / {my_lat.get(1024)}x" if 1 in my_lat else "")
    return grid


def table(results: list[Result], targets: list[str]):
    from rich.table import Table

    grid = Table(title="classical ML: verdict per (model, target)", show_lines=False)
    grid.add_column("model")
    for t in targets:
        grid.add_column(t)
    grid.add_column("tree strategy")
    colour = {"verified": "green", "unchanged": "green", "mismatch": "red",
              "unverified": "yellow", "unfixable": "magenta", "error": "red"}
    by_model: dict[str, dict[str, Result]] = {}
    for r in results:
        by_model.setdefault(r.row.model, {})[r.row.target] = r
    for model, cells in by_model.items():
        texts = []
        for t in targets:
            r = cells.get(t)
            if r is None:
                texts.append("-")
                continue
            text = f"[{colour.get(r.row.verdict, 'white')}]{r.row.verdict}[/]"
            if r.bytes_ratio is not None:
                lat = r.latency_ratio or {}
                text += f" {r.bytes_ratio}x B" + (
                    f", {lat.get(1)}x/{lat.get(1024)}x t" if 1 in lat else "")
            texts.append(text)
        strategy = "; ".join(sorted({r.strategy.split(" (")[0] for r in cells.values()
                                     if r.strategy}))
        grid.add_row(model, *texts, strategy)
    totals = Table(title="pairs per verdict")
    verdicts = ("verified", "unchanged", "mismatch", "unverified", "unfixable", "error")
    totals.add_column("target")
    for v in (*verdicts, "runs and matches"):
        totals.add_column(v, justify="right")
    for t in [*targets, "all"]:
        mine = [r.row for r in results if t in ("all", r.row.target)
                and r.row.verdict != "not built"]
        count = Counter(r.verdict for r in mine)
        totals.add_row(t, *(str(count[v]) for v in verdicts),
                       f"{sum(count[v] for v in OK)}/{len(mine)}")
    reasons = Table(title="pairs not verified or unchanged: why", show_lines=False)
    for column in ("model", "target", "verdict", "reason"):
        reasons.add_column(column, overflow="fold")
    not_built = set()
    for r in results:
        if r.row.verdict == "not built":
            if r.row.model not in not_built:
                not_built.add(r.row.model)
                reasons.add_row(r.row.model, "(all)", r.row.verdict, short(r.row.reason, 220))
        elif r.row.verdict not in OK:
            reasons.add_row(r.row.model, r.row.target, r.row.verdict, short(r.row.reason, 220))
    return grid, totals, reasons


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="recipe names (default: all)")
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--repeat", type=int, default=30, help="latency runs at batch 1")
    parser.add_argument("--no-latency", action="store_true")
    parser.add_argument("--timeout", type=float, default=120, help="the compare's, per pair")
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--adapt-interface", action="store_true",
                        help="rewrite with --adapt-interface (ZipMap's maps and string labels "
                        "as tensors)")
    parser.add_argument("--hummingbird-python", help="the interpreter of an environment with "
                        "hummingbird-ml: its conversions side by side")
    parser.add_argument("--seed", type=int, default=0, help="the generated data's seed")
    args = parser.parse_args(argv)
    DATA_SEED[0] = args.seed

    from rich.console import Console

    from rewriter.console import native_stdout_to_stderr
    from rewriter.manager import load_plugins

    console = Console(width=240)
    targets = args.targets.split(",")
    chosen = [r for r in recipes() if not args.only or r.name in args.only]
    plugins = load_plugins()
    results: list[Result] = []
    fitted: dict = {}  # recipe -> (estimator, rows, exported model, held-out feeds)
    side: list[HummingbirdRow] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="classical-ml-") as tmp, native_stdout_to_stderr():
        config = no_ml_config(Path(tmp))
        specs = {t: f"onnxruntime:ops={config}" if t == "onnxruntime-no-ml" else t
                 for t in targets}
        for recipe in chosen:
            try:
                path, feeds = build(recipe, Path(tmp) / recipe.name)
            except Exception as e:  # noqa: BLE001 - a producer failing is a result
                for t in targets:
                    results.append(Result(Row(recipe.name, t, "not built",
                                              short(f"{type(e).__name__}: {e}")), recipe.covers))
                continue
            if FITTED:
                fitted[recipe.name] = (*FITTED[-1], path, feeds)
            for target in targets:
                result = run_pair(recipe.name, recipe.covers, path, feeds, target,
                                  specs[target], plugins, args)
                results.append(result)
                print(f"{target:18} {recipe.name:32} {result.row.verdict:10} "
                      f"{result.row.seconds:6.1f}s {result.strategy}", file=sys.stderr,
                      flush=True)
        if args.hummingbird_python:
            side = hummingbird_side(args.hummingbird_python, fitted, Path(tmp), args)
    for part in table(results, targets):
        console.print(part)
    if side:
        console.print(hummingbird_table(side, results))
    seconds = time.perf_counter() - started
    console.print(f"{len(chosen)} models x {len(targets)} targets in {seconds:.0f} s"
                  + (" (--adapt-interface)" if args.adapt_interface else ""))
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"seconds": round(seconds), "targets": targets,
             "rows": [{**asdict(r.row), "covers": r.covers, "strategy": r.strategy,
                       "bytes_ratio": r.bytes_ratio, "latency_ratio": r.latency_ratio}
                      for r in results],
             "hummingbird": [asdict(r) for r in side]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
