"""Image codecs shared by the image kernels (Pillow: the library the ONNX reference
implementation of ImageDecoder and its spec test data use)."""

from __future__ import annotations

import io

import numpy as np


def decode(data: np.ndarray, mode: str = "RGB") -> np.ndarray:
    """Encoded bytes -> HxWxC uint8 (mode RGB, BGR or L)."""
    from PIL import Image

    if data.ndim != 1:
        raise ValueError("expected a 1-D tensor of encoded image bytes")
    with Image.open(io.BytesIO(np.ascontiguousarray(data, dtype=np.uint8).tobytes())) as img:
        if mode == "BGR":
            return np.asarray(img.convert("RGB"))[..., ::-1].copy()
        if mode == "L":
            return np.asarray(img.convert("L"))[..., None].copy()
        return np.asarray(img.convert("RGB")).copy()


def encode(pixels: np.ndarray, fmt: str, bgr: bool = True, quality: int = 95) -> np.ndarray:
    """HxWx3 uint8 -> encoded bytes (PNG or JPEG)."""
    from PIL import Image

    if pixels.ndim != 3 or pixels.shape[2] != 3:
        raise ValueError(f"expected an HxWx3 image, got shape {pixels.shape}")
    rgb = pixels[..., ::-1] if bgr else pixels
    buf = io.BytesIO()
    fmt = fmt.lower().lstrip(".")
    if fmt in ("jpg", "jpeg"):
        Image.fromarray(np.ascontiguousarray(rgb, dtype=np.uint8)).save(
            buf, format="JPEG", quality=quality)
    elif fmt == "png":
        Image.fromarray(np.ascontiguousarray(rgb, dtype=np.uint8)).save(buf, format="PNG")
    else:
        raise ValueError(f"unsupported image format {fmt!r} (png or jpg)")
    return np.frombuffer(buf.getvalue(), dtype=np.uint8).copy()
