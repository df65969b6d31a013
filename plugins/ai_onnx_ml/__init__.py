"""Plugin ``ai-onnx-ml``: remedies for the ai.onnx.ml domain (scikit-learn pipelines,
gradient-boosted trees and linear models as skl2onnx, onnxmltools and CatBoost export them),
which onnxruntime runs and few other runtimes do. Every op is written with standard ops as
onnxruntime's ML kernel computes it, and checked against that kernel (``oracle="onnxruntime"``)
on its samples.

The index, one module per op family (each module's docstring gives its ops' semantics):

================  =========================================================================
module            ops
================  =========================================================================
trees             TreeEnsembleClassifier, TreeEnsembleRegressor (ml opsets 1 and 3),
                  TreeEnsemble (5); the lowering strategy chosen per ensemble by cost
                  (``tree_strategies``)
tree_ensembles    the tree attributes (ml opsets 1, 3, 5) read into one canonical Ensemble
tree_strategies   an Ensemble lowered by gemm or traversal, chosen by a cost model
linear            LinearClassifier, LinearRegressor
svm               SVMClassifier, SVMRegressor
preprocessing     Scaler, Normalizer, Imputer, Binarizer, FeatureVectorizer,
                  ArrayFeatureExtractor
encoders          OneHotEncoder, LabelEncoder (1-4), CategoryMapper
interface         ZipMap, DictVectorizer, graph outputs a target cannot return: a pass
                  adapts ZipMap outputs and string labels with ``--adapt-interface``, and
                  otherwise declines naming the type and the flag
================  =========================================================================

``_common`` holds what the modules share (the body builder, the opset a body is written
at, the score transforms of onnxruntime's ML kernels).

``loop_free`` is a plugin of its own (``ai-onnx-ml-loop-free``): bodies written without
``Loop`` (the SVM classifier's probabilities), asked only where this plugin's are refused.
"""

from __future__ import annotations

from rewriter.plugin import hookimpl

from . import encoders, interface, linear, preprocessing, svm, trees
from ._common import ML, PLUGIN_OPSETS

MODULES = (trees, linear, svm, preprocessing, encoders, interface)


@hookimpl
def register_decompositions(registry):
    for module in MODULES:
        for op_type, builder, dtypes, note, samples in module.REGISTRATIONS:
            registry.add(ML, op_type, builder, opsets=PLUGIN_OPSETS, dtypes=dtypes,
                         description=f"ai-onnx-ml:{op_type}" + (f" ({note})" if note else ""),
                         oracle="onnxruntime", samples=samples)


@hookimpl
def register_passes(registry):
    registry.add("ai-onnx-ml-interface", interface.InterfaceOps, phase="convert")
