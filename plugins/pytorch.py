"""Remedies ``pytorch``: PyTorch fallbacks (``ATen``, ``org.pytorch.aten``,
``com.microsoft::ATenOp``, ``org.pytorch._caffe2``)."""
