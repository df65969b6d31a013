"""Hummingbird's own conversion of fitted models to ONNX, run with the Python of a separate
environment (hummingbird-ml 0.4.12 pins onnx 1.16.1, below this project's floor, so it cannot
share its environment). Called by ``benchmarks/_hummingbird.py``; not imported by them.

    HB_PYTHON benchmarks/hummingbird_convert.py FOLDER

FOLDER holds one ``NAME.job.pkl`` per job: ``(estimator, sample rows, strategy or
None)``, one file each, so an estimator this environment cannot unpickle is that job's
error only. For each job it writes ``NAME.onnx`` (``hummingbird.ml.convert(estimator,
"onnx", rows)``, ``tree_implementation`` = the strategy where given), or ``NAME.error``
with the exception. The environment: ``python -m venv HB && HB/bin/pip install
hummingbird-ml==0.4.12 torch==2.13.0 onnx==1.16.1 onnxscript`` and the same scikit-learn,
lightgbm, xgboost and catboost as the benchmark's, since the estimators are pickled across.
"""

from __future__ import annotations

import functools
import pickle
import sys
import traceback
from pathlib import Path


def main(folder: str) -> int:
    import torch.onnx

    # torch >= 2.9 exports with dynamo by default, which needs an onnxscript newer than
    # onnx 1.16 allows; Hummingbird's graphs export with the TorchScript exporter
    torch.onnx.export = functools.partial(torch.onnx.export, dynamo=False)
    from hummingbird.ml import convert

    root = Path(folder)
    for job in sorted(root.glob("*.job.pkl")):
        name = job.name[:-len(".job.pkl")]
        try:
            estimator, rows, strategy = pickle.loads(job.read_bytes())
            extra = {"tree_implementation": strategy} if strategy else {}
            converted = convert(estimator, "onnx", rows, extra_config=extra)
            (root / f"{name}.onnx").write_bytes(converted.model.SerializeToString())
        except Exception as e:  # noqa: BLE001 - a model Hummingbird cannot convert is a result
            (root / f"{name}.error").write_text(
                f"{type(e).__name__}: {e}".strip().splitlines()[0][:300] + "\n"
                + traceback.format_exc())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
