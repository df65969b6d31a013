"""OpenCV-compatible colour conversion and bicubic resize in numpy (the super-resolution
pre/post-processing ops were written against OpenCV; these reproduce its float formulas)."""

from __future__ import annotations

import numpy as np

DELTA_FLOAT = 0.5  # OpenCV's chroma offset for floating-point images (128 for 8-bit)


def bgr_to_ycrcb(bgr: np.ndarray, delta: float = DELTA_FLOAT) -> tuple[np.ndarray, ...]:
    b, g, r = (bgr[..., i].astype(np.float32) for i in range(3))
    y = np.float32(0.299) * r + np.float32(0.587) * g + np.float32(0.114) * b
    cr = (r - y) * np.float32(0.713) + np.float32(delta)
    cb = (b - y) * np.float32(0.564) + np.float32(delta)
    return y, cr, cb


def ycrcb_to_bgr(y, cr, cb, delta: float = DELTA_FLOAT) -> np.ndarray:
    d = np.float32(delta)
    r = y + np.float32(1.403) * (cr - d)
    g = y - np.float32(0.714) * (cr - d) - np.float32(0.344) * (cb - d)
    b = y + np.float32(1.773) * (cb - d)
    return np.stack([b, g, r], axis=-1).astype(np.float32)


def saturate_u8(x: np.ndarray) -> np.ndarray:
    """OpenCV's saturate_cast<uchar>(float): round half to even, then clamp."""
    return np.clip(np.rint(x), 0, 255).astype(np.uint8)


def _cubic_weights(t: np.ndarray, a: float = -0.75) -> np.ndarray:
    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return np.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], axis=-1)


def _resize_axis(img: np.ndarray, size: int, axis: int) -> np.ndarray:
    n = img.shape[axis]
    if n == size:
        return img
    scale = n / size
    fx = (np.arange(size) + 0.5) * scale - 0.5
    ix = np.floor(fx).astype(np.int64)
    w = _cubic_weights((fx - ix).astype(np.float32)).astype(np.float32)
    idx = np.clip(ix[:, None] + np.arange(-1, 3)[None, :], 0, n - 1)
    moved = np.moveaxis(img, axis, 0)
    out = np.einsum("ok,ok...->o...", w, moved[idx])
    return np.moveaxis(out, 0, axis).astype(np.float32)


def resize_bicubic(img: np.ndarray, height: int, width: int) -> np.ndarray:
    """cv::resize(..., INTER_CUBIC) on a float HxW image (replicated borders)."""
    return _resize_axis(_resize_axis(img.astype(np.float32), height, 0), width, 1)
