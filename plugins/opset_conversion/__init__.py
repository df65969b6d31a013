"""Pass ``opset-conversion`` (being split into op-family modules; see ``converter``)."""

from __future__ import annotations

from rewriter_plugins.opset_conversion.converter import OpsetConversionPass, register_passes

__all__ = ["OpsetConversionPass", "register_passes"]
