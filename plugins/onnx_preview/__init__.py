"""Decompositions ``onnx-preview``: the ONNX preview ops (domains ``ai.onnx.preview`` and
``ai.onnx.preview.training``) in standard ONNX, for runtimes that have no kernel for them
(onnxruntime has none). Semantics as the ONNX operator docs and onnx's reference evaluator.

* ``ai.onnx.preview::FlexAttention(Q, K, V)`` (attributes ``scale``, ``score_mod``,
  ``prob_mod``, ``softmax_precision``), rank-4 ``Q (B, Hq, L, E)``, ``K (B, Hkv, S, E)``,
  ``V (B, Hkv, S, Ev)``::

      s = sqrt(float32(scale))  (default scale = 1 / sqrt(E)), cast to Q's type
      K', V' = K, V with each head repeated Hq / Hkv times (query head h uses kv head
               h // (Hq / Hkv))
      scores = Cast<P>((Q * s) @ (K' * s)^T)     P: softmax_precision, default float32
                                                   for float16/bfloat16 inputs, else Q's type
      scores = score_mod(scores)                  the graph attribute, spliced in
      probs = Softmax(scores, axis=-1)
      probs = prob_mod(probs)                     the graph attribute, spliced in
      Y = Cast<V's type>(probs @ Cast<P>(V'))

  A modifier graph is copied into the body (its initializers become Constants, every name
  it defines, nested subgraphs included, is renamed); one that reads outer-scope values
  is declined (a function body cannot capture them).

* ``ai.onnx.preview.training`` optimizers, inputs ``R, T, X_1..X_n, G_1..G_n, ...`` (every
  group of one kind, then the next kind) for any ``n``; outputs likewise:

  - ``Adagrad(R, T, X.., G.., H..) -> X_new.., H_new..`` (``decay_factor`` 0,
    ``epsilon`` 1e-6, ``norm_coefficient`` 0)::

        r = R / (1 + T * decay_factor);  G' = norm_coefficient * X + G
        H_new = H + G' * G';  X_new = X - r * G' / (Sqrt(H_new) + epsilon)

  - ``Adam(R, T, X.., G.., V.., H..) -> X_new.., V_new.., H_new..`` (``alpha`` 0.9,
    ``beta`` 0.999, ``epsilon`` 1e-6, ``norm_coefficient`` 0, ``norm_coefficient_post`` 0)::

        G' = norm_coefficient * X + G
        V_new = alpha * V + (1 - alpha) * G';  H_new = beta * H + (1 - beta) * G' * G'
        R' = T > 0 ? R * Sqrt(1 - beta**T) / (1 - alpha**T) : R
        X_new = (1 - norm_coefficient_post) * (X - R' * V_new / (Sqrt(H_new) + epsilon))

  - ``Momentum(R, T, X.., G.., V..) -> X_new.., V_new..`` (``alpha``, ``beta``, ``mode``,
    ``norm_coefficient`` required)::

        G' = norm_coefficient * X + G;  V_new = alpha * V + (T > 0 ? beta : 1) * G'
        standard: X_new = X - R * V_new
        nesterov: X_new = X - R * (G' + alpha * V_new)

  The scalar learning-rate factors (``r``, ``R'``) are computed in double precision, as
  the reference evaluator does, and cast to the tensors' type.

Every builder reads the node's attributes, declines attributes it does not know (and
attribute references), and bakes the values into the body as constants of the node's
element type. ``tests/test_onnx_preview.py`` checks each body on onnxruntime against the
reference evaluator and the spec's test data.

Modules, one op family each:

==================  ======================================================================
module              contents
==================  ======================================================================
``common``          domains, opset ranges, element types, the body builder, attribute check
``flex_attention``  ai.onnx.preview::FlexAttention, its modifier graphs spliced in
``optimizers``      ai.onnx.preview.training::Adagrad, Adam, Momentum
``samples``         the oracle samples and modifier graphs, the optimizers' reference
==================  ======================================================================
"""

from __future__ import annotations

from onnx import FunctionProto

from rewriter.plugin import Declined, DecompositionContext, hookimpl

from .common import (
    BODY_DOMAIN,
    FLEX_OPSETS,
    NO_IMPORT_BODY_OPSET,
    NO_IMPORT_OPSETS,
    PREVIEW,
    TRAINING,
    TRAINING_OPSETS,
)
from .flex_attention import build_flex_attention
from .optimizers import build_adagrad, build_adam, build_momentum
from .samples import (
    OPTIMIZER_ATTRIBUTES,
    adagrad_reference,
    adam_reference,
    bias_mod,
    causal_mod,
    flex_samples,
    modifier,
    momentum_reference,
    optimizer_sample,
    optimizer_samples,
)

__all__ = ["BODY_DOMAIN", "FLEX_OPSETS", "NO_IMPORT_BODY_OPSET", "NO_IMPORT_OPSETS", "PREVIEW",
           "TRAINING", "TRAINING_OPSETS", "adagrad_reference", "adam_reference", "bias_mod",
           "build_adagrad", "build_adam", "build_flex_attention", "build_momentum",
           "causal_mod", "modifier", "momentum_reference"]


@hookimpl
def register_decompositions(registry) -> None:
    registry.add(PREVIEW, "FlexAttention", build_flex_attention, opsets=FLEX_OPSETS,
                 dtypes=("float", "double", "float16"),
                 description="onnx-preview:FlexAttention (score_mod/prob_mod spliced in)",
                 oracle="reference", samples=flex_samples())
    for op_type, builder in (("Adagrad", build_adagrad), ("Adam", build_adam),
                             ("Momentum", build_momentum)):
        # the evaluator's output types are off for Adam, and for any optimizer given a
        # double rate: there the outputs are taken in the tensors' type
        in_tensor_types = f"rewriter_plugins.onnx_preview.samples:{op_type.lower()}_reference"
        registry.add(TRAINING, op_type, builder, opsets=TRAINING_OPSETS,
                     dtypes=("float", "double"), description=f"onnx-preview:{op_type}",
                     oracle=in_tensor_types if op_type == "Adam" else "reference",
                     samples=optimizer_samples(op_type))
        # a model importing the training domain only; the rate double, the tensors float
        double_rate = optimizer_sample(op_type, OPTIMIZER_ATTRIBUTES[op_type][-1], 2, 2,
                                       opset=0, rate="double", oracle=in_tensor_types)
        registry.add(TRAINING, op_type, _no_ai_onnx_import(builder), opsets=NO_IMPORT_OPSETS,
                     dtypes=("float", "double"),
                     description=f"onnx-preview:{op_type} (model imports no ai.onnx opset; "
                                 f"the body imports ai.onnx {NO_IMPORT_BODY_OPSET})",
                     oracle=in_tensor_types, samples=[double_rate])


def _no_ai_onnx_import(builder):
    """``builder`` for models that import no ai.onnx opset at all (the engine plans them at
    opset 1); a model that really imports ai.onnx 1 is declined."""

    def build(ctx: DecompositionContext) -> FunctionProto | None:
        if "" in ctx.opsets:
            raise Declined("the model imports ai.onnx opset 1 (the decomposition is for "
                           "models importing no ai.onnx opset)")
        return builder(ctx)

    build.__name__ = f"{builder.__name__}_no_ai_onnx_import"
    return build
