"""Remedies ``pytorch``: PyTorch export fallbacks (``ATen``, ``org.pytorch.aten``,
``com.microsoft::ATen``/``ATenOp``, ``org.pytorch._caffe2``).

Node forms (one builder per form, dispatching on the aten operator name):

* ``ATen`` in the default domain (torch.onnx ``ONNX_ATEN_FALLBACK``): attribute ``operator``
  (and maybe ``overload_name``); tensor arguments are the inputs in schema order, the other
  arguments are attributes named as in the aten schema.
* ``org.pytorch.aten::<name>``: without attributes every argument is an input in schema
  order (non-tensor ones must be constants); with attributes, as ``ATen`` above.
* ``org.pytorch.aten::ATen`` (what torch 2.x's ``ONNX_ATEN_FALLBACK`` export writes) and
  ``com.microsoft::ATen`` (onnxruntime training): attributes ``operator``/``overload_name``,
  every argument an input (constants for non-tensors, an empty name for ``None``).
* ``com.microsoft::ATenOp`` (older onnxruntime training export): attribute ``name``
  (``"aten::embedding"``), tensor arguments as inputs, the others in the JSON attribute
  ``custom_attributes_json``.

aten operators (overload ``""``, or ``vec`` for upsample; anything else is declined, as is an
unknown argument name or a non-constant non-tensor argument). ``iota(n)`` below is
``NonZero(ConstantOfShape([n], 1))``, which needs no Range (opset 11):

* ``layer_norm(input, normalized_shape, weight?, bias?, eps=1e-5, cudnn_enable)``: with
  ``x`` viewed as ``[-1, prod(normalized_shape)]``: ``(x - mean) / sqrt(var + eps) * weight
  + bias`` (biased variance). ReduceMean over a positive axis, so valid from opset 5.
* ``group_norm(input, num_groups, weight?, bias?, eps=1e-5, cudnn_enabled)``: the same over
  ``x`` viewed as ``[N, num_groups, -1]``, then ``* weight[c] + bias[c]`` per channel.
* ``adaptive_avg_pool{1,2,3}d(self, output_size)``: output size 1 everywhere: ReduceMean over
  the last k axes; otherwise, per spatial axis of length ``L`` and output ``o``, window ``i``
  is ``[floor(i L / o), ceil((i + 1) L / o))`` (computed from the runtime shape) and its mean
  is taken, axis by axis (the rectangle's mean, exactly as torch). Opset >= 11.
* ``embedding(weight, indices, padding_idx, scale_grad_by_freq, sparse)``:
  ``Gather(weight, indices, axis=0)`` (the other arguments only matter for training).
* ``index_select(self, dim, index)``: ``Gather(self, Reshape(index, [-1]), axis=dim)``.
* ``gelu(self, approximate="none")``: ``0.5 x (1 + erf(x / sqrt 2))`` (opset >= 9); ``"tanh"``:
  ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``.
* ``silu(self)``: ``x * sigmoid(x)``.
* ``grid_sampler(input, grid, interpolation_mode, padding_mode, align_corners)``:
  ``GridSample`` (opset >= 16; modes 0/1/2 = bilinear/nearest/bicubic, padding 0/1/2 =
  zeros/border/reflection).
* ``cumsum(self, dim, dtype=None)``: ``CumSum`` (opset >= 11); opset 9-10: ``x @ U`` along
  the last axis (``U[i, j] = i <= j``, transposed there and back; needs the declared rank;
  floats sum in another order than torch). Integers and bool accumulate in int64, as torch.
* ``tril``/``triu(self, diagonal=0)``: ``Where(j - i > diagonal (tril) / < diagonal (triu),
  0, x)`` over the last two axes.
* ``flip(self, dims)``: ``Gather(x, L - 1 - iota(L))`` per dim; ``roll(self, shifts, dims)``:
  ``Gather(x, (iota(L) - shift) mod L)`` per dim (no dims: on the flattened tensor).
* ``masked_fill(self, mask, value)``: ``Where(mask, Cast(value), self)``.
* ``upsample_{nearest1d,2d,3d, linear1d, bilinear2d, trilinear3d, bicubic2d}`` (default and
  ``.vec`` overloads): torch's CPU kernels, axis by axis from the innermost, with indices
  and weights computed in the graph from ``iota(out)`` in float32 (double for double
  linear/cubic): out size ``floor(L * scale)`` (double) or the given size; ``ratio =
  1 / scale`` when a scale is given, else ``L / out`` (``(L - 1) / (out - 1)`` with
  align_corners); nearest: ``min(floor(i * ratio), L - 1)`` (``i`` when out == L, ``i // 2``
  when out == 2L); linear: ``src = max(ratio (i + 0.5) - 0.5, 0)`` (``ratio i`` aligned),
  ``i0 = min(floor(src), L - 1)``, ``i1 = min(i0 + 1, L - 1)``, weights ``1 - t, t`` with
  ``t = clamp(src - i0, 0, 1)``; bicubic: four taps ``clamp(i0 - 1 + j, 0, L - 1)`` with
  A = -0.75 coefficients. Valid from opset 9 (Resize's coordinate modes need 11, which is
  why torch falls back to ATen below it).

Negative dims below opset 11 need the declared rank (Gather's negative indices arrive at 11).
float16 (and bfloat16) inputs are computed in float32 and cast back once, as torch's CPU
kernels do. A model importing no ai.onnx opset (OpenVINO's test models) gets bodies at
opset ``FALLBACK_OPSET``.

``org.pytorch._caffe2::GenerateProposals`` (upright boxes, float) is decomposed from
opset 9, image by image in ``(N, K)`` tensors: scores and deltas in (h, w, a) order, anchors
shifted to every cell (``anchor + (w, h, w, h) / spatial_scale``), ``TopK`` of
``pre_nms_topN`` (all when <= 0; TopK-1's static ``k`` below opset 10 needs a declared
``A*H*W``), caffe2's box transform (``dw, dh`` clipped at ``log(1000/16)``, ``+1`` widths in
legacy_plus_one mode), clip to ``[0, int(width) - p]``, the min-size filter (``min_size *
im_scale`` in double, centres inside the image), then greedy NMS as a ``Loop`` over the K
sorted positions (keep a live box while its image has < ``post_nms_topN``; kill the others
whose ``+p`` IoU > ``nms_thresh`` or is NaN; stop once every image is full): onnxruntime's
NonMaxSuppression (opset 10) would need ``x2 + 1`` tricks and differs in rounding, so it is
not used. Outputs ``rois (R, 5)`` (image index, box) and ``rois_probs (R)`` in image, then
score order. Rotated anchors (A, 5) or an undeclared anchor width are declined; the numpy
kernel (``rewriter_custom_ops.caffe2_generate_proposals``) then runs the node. The ``ATen``
and ``ATenOp`` forms also have numpy kernels (``rewriter_custom_ops.aten_fallback``, which
decline unknown operators through ``accepts``) so that ``compare`` can run an original model
on the reference evaluator; ``org.pytorch.aten::ATen`` has none (its non-tensor arguments
are inputs, some absent, which kernel signatures cannot express).


Modules, one op family each:

=================  ========================================================================
module             contents
=================  ========================================================================
``calls``          the aten schemas and the resolution of a node against them (AtenCall)
``forms``          the node forms above, dispatching to each operator's body
``body``           the body builder and the helpers the bodies share
``normalization``  layer_norm, group_norm
``activations``    gelu, silu
``indexing``       embedding, index_select, cumsum, tril/triu, flip, roll, masked_fill
``resampling``     adaptive_avg_pool{1,2,3}d, grid_sampler, upsample_*
``caffe2``         org.pytorch._caffe2::GenerateProposals
``samples``        the oracle samples (torch's own operators where installed)
=================  ========================================================================
"""

from __future__ import annotations

from rewriter.plugin import hookimpl

from .caffe2 import MIN_PROPOSALS_OPSET, build_generate_proposals
from .calls import ATEN_SCHEMAS
from .forms import (
    MIN_OPSETS,
    build_aten,
    build_ms_atenop,
    build_org_pytorch_aten,
    build_positional_aten,
)

ATEN_DOMAIN = "org.pytorch.aten"
MS_DOMAIN = "com.microsoft"
CAFFE2_DOMAIN = "org.pytorch._caffe2"

__all__ = ["build_aten", "build_generate_proposals", "build_ms_atenop",
           "build_org_pytorch_aten", "build_positional_aten"]


# int64: cumsum, tril/triu, flip, roll, masked_fill (tested); the rest are float only
_DTYPES = ("float", "float16", "double", "int64")
_INT64_TESTED = ("cumsum", "tril", "triu", "flip", "roll", "masked_fill")


@hookimpl
def register_decompositions(registry):
    """One builder per node form; the opset range is the union of the operators' (each
    builder declines below its operator's ``MIN_OPSETS`` entry)."""
    from .samples import oracles  # torch's own operators

    ops = ", ".join(sorted({name.partition(".")[0] for name in ATEN_SCHEMAS}))
    for domain, op_type, builder, form in (("", "ATen", build_aten, "named"),
                                           (ATEN_DOMAIN, "ATen", build_positional_aten,
                                            "positional"),
                                           (MS_DOMAIN, "ATen", build_positional_aten,
                                            "ms_aten"),
                                           (MS_DOMAIN, "ATenOp", build_ms_atenop, "atenop")):
        label = f"{domain}::{op_type}" if domain else op_type
        registry.add(domain, op_type, builder, opsets=(1, None), dtypes=_DTYPES,
                     description=f"pytorch:{label} ({ops})", **oracles(form))
    for operator in sorted(name for name in ATEN_SCHEMAS if "." not in name):
        # (1, None): a model importing no ai.onnx opset counts as opset 1 and gets a body
        # at FALLBACK_OPSET; below MIN_OPSETS[operator] the builder declines
        tested = _DTYPES if operator in _INT64_TESTED else _DTYPES[:3]
        registry.add(ATEN_DOMAIN, operator, build_org_pytorch_aten, opsets=(1, None),
                     dtypes=tested, description=f"pytorch:org.pytorch.aten::{operator} "
                     f"(opset >= {MIN_OPSETS[operator]})", **oracles("op_type", operator))
    registry.add(CAFFE2_DOMAIN, "GenerateProposals", build_generate_proposals,
                 opsets=(MIN_PROPOSALS_OPSET, None), dtypes=("float",),
                 description="pytorch:org.pytorch._caffe2::GenerateProposals (upright boxes; "
                 "TopK, greedy NMS in a Loop; static A*H*W below opset 10)",
                 **oracles("proposals"))


_KERNELS = "rewriter_custom_ops.aten_fallback"
_ATEN_KERNELS = {"adaptive_avg_pool1d": "adaptive_avg_pool1d",
                 "adaptive_avg_pool2d": "adaptive_avg_pool2d",
                 "adaptive_avg_pool3d": "adaptive_avg_pool3d", "embedding": "embedding_kernel",
                 "gelu": "gelu_kernel", "silu": "silu_kernel",
                 "index_select": "index_select_kernel"}


@hookimpl
def register_kernels(registry):
    registry.add("", "ATen", f"{_KERNELS}:aten", description="pytorch: numpy aten operators")
    registry.add(ATEN_DOMAIN, "ATen", f"{_KERNELS}:aten_named_form",
                 description="pytorch: numpy aten operators (arguments as attributes)")
    registry.add(MS_DOMAIN, "ATenOp", f"{_KERNELS}:atenop",
                 description="pytorch: numpy aten operators")
    for operator, attr in _ATEN_KERNELS.items():
        registry.add(ATEN_DOMAIN, operator, f"{_KERNELS}:{attr}",
                     description=f"pytorch: numpy aten::{operator}")
    registry.add(CAFFE2_DOMAIN, "GenerateProposals",
                 "rewriter_custom_ops.caffe2_generate_proposals:kernel",
                 description="pytorch: caffe2 GenerateProposals (upright boxes) in numpy")
