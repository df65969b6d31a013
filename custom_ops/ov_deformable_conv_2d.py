"""OpenVINO's ``DeformableConv2D(data, deformation, filters[, mask])`` (the ONNX importer's
op, default or ``org.openvinotoolkit`` domain), as ``DeformableConvolution-8`` with
``bilinear_interpolation_pad=false``: :func:`rewriter_custom_ops.mm_deform_conv.deform_conv2d`
with the ``"openvino"`` sampler. Attributes as the importer reads them: ``strides``,
``dilations`` (2 values), ``pads`` (``[top, left, bottom, right]``), ``group``,
``deformable_groups``; ``auto_pad`` other than ``NOTSET`` is declined.
"""

from __future__ import annotations

import numpy as np
from rewriter_custom_ops.mm_deform_conv import deform_conv2d

from rewriter.plugin import kernel as _kernel


def _explicit_padding(node) -> str | None:
    for a in node.attribute:
        if a.name == "auto_pad" and a.s not in (b"", b"NOTSET"):
            return f"auto_pad={a.s.decode()} is not implemented (only NOTSET)"
        if a.name in ("strides", "dilations") and len(a.ints) != 2:
            return f"{a.name} needs 2 values"
        if a.name == "pads" and len(a.ints) != 4:
            return "pads needs 4 values"
    return None


@_kernel(signatures=["float, float, float -> float", "float, float, float, float -> float"],
         attributes={"group": 1, "deformable_groups": 1, "strides": [1, 1],
                     "dilations": [1, 1], "pads": [0, 0, 0, 0], "auto_pad": "NOTSET"},
         accepts=_explicit_padding)
def kernel(data: np.ndarray, deformation: np.ndarray, filters: np.ndarray,
           mask: np.ndarray | None = None, *, group: int, deformable_groups: int,
           strides: list[int], dilations: list[int], pads: list[int], auto_pad: str):
    """DeformableConv2D -> (N, O, oh, ow)."""
    return deform_conv2d(data, deformation, filters, mask, strides=strides, pads=pads,
                         dilations=dilations, groups=group, offset_groups=deformable_groups,
                         sampler="openvino")
