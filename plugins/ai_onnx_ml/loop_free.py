"""Plugin ``ai-onnx-ml-loop-free``: bodies of ai.onnx.ml ops written without ``Loop``, for
runtimes that have none (tract 0.23 refuses it). The planner asks built-in plugins by name,
so each body here is asked only where the ``ai-onnx-ml`` plugin's own (with its ``Loop``,
far smaller) is refused; checked against onnxruntime's ML kernels as that plugin's are.

=============  ===========================================================================
op             body
=============  ===========================================================================
SVMClassifier  Platt probabilities with all 100 coupling sweeps in the graph
               (:func:`svm.build_svm_classifier_unrolled`); declined without ``prob_a``
=============  ===========================================================================
"""

from __future__ import annotations

from rewriter.plugin import Arg, OpSample, hookimpl

from . import svm
from ._common import ML, PLUGIN_OPSETS

REGISTRATIONS = [
    ("SVMClassifier", svm.build_svm_classifier_unrolled, ("float", "double", "int64", "int32"),
     "Platt sweeps unrolled, for runtimes without Loop", [
        OpSample([Arg("T[7,3]", values=svm.sample_rows)], ["int64", "float"],
                 {**svm.svc_attributes(3, [2, 1, 3], 3, "RBF", True, 0),
                  "classlabels_ints": [4, 5, 6], "post_transform": "SOFTMAX"},
                 opset=0, name="3-classes-rbf-platt-softmax", dtypes=["float"]),
        OpSample([Arg("T[6,2]", values=svm.sample_rows)], ["string", "float"],
                 {**svm.svc_attributes(2, [2, 2], 2, "RBF", True, 7),
                  "classlabels_strings": ["no", "yes"]}, opset=13, name="binary-platt")]),
]


@hookimpl
def register_decompositions(registry):
    for op_type, builder, dtypes, note, samples in REGISTRATIONS:
        registry.add(ML, op_type, builder, opsets=PLUGIN_OPSETS, dtypes=dtypes,
                     description=f"ai-onnx-ml-loop-free:{op_type} ({note})",
                     oracle="onnxruntime", samples=samples)
