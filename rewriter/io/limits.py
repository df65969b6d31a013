"""Limits that protect the tool's own process from what it is given.

Inputs are allocated in the tool's process (generated from the model's declared shapes and
``--dim`` values, or read from ``.npz`` / ``.pb`` files) before any child process runs the
model, so their size is computed first and refused past :func:`input_limit`: 2 GiB per
input set by default, set with the ``ONNX_REWRITER_MAX_INPUT_MIB`` environment variable (in
MiB). Every file read as a model, its data or inputs must be a regular file: a FIFO would
block the read forever, a device could be endless.
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from rewriter.errors import LimitError

INPUT_LIMIT_ENV = "ONNX_REWRITER_MAX_INPUT_MIB"
DEFAULT_INPUT_LIMIT = 2 * 2**30
STRING_ELEMENT_BYTES = 64  # an object pointer and a short str, per string element


def input_limit() -> int:
    """Bytes one input set may take in the tool's process."""
    text = os.environ.get(INPUT_LIMIT_ENV, "").strip()
    if not text:
        return DEFAULT_INPUT_LIMIT
    try:
        mib = float(text)
    except ValueError:
        raise LimitError(f"{INPUT_LIMIT_ENV}={text!r}: not a number of MiB") from None
    if not math.isfinite(mib) or mib <= 0:
        raise LimitError(f"{INPUT_LIMIT_ENV}={text!r}: give a positive number of MiB")
    return int(mib * 2**20)


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB" if n >= 2**20 else f"{n:,} bytes"


def check_input_bytes(nbytes: int, what: str) -> None:
    """A LimitError when ``nbytes`` (of ``what``) is past :func:`input_limit`."""
    limit = input_limit()
    if nbytes > limit:
        raise LimitError(f"{what}: {_mib(nbytes)} is past the input limit of {_mib(limit)} "
                         f"(set {INPUT_LIMIT_ENV} to raise it)")


def array_bytes(shape: Iterable[int], itemsize: int) -> int:
    """Bytes an array of ``shape`` takes (Python ints: no overflow)."""
    return math.prod(int(d) for d in shape) * itemsize


def regular_file(path: str | os.PathLike, what: str = "input") -> os.stat_result:
    """``path``'s stat, or a LimitError when it is not a regular file (a FIFO, a device,
    a socket: reading one could block or never end)."""
    st = os.stat(path)  # follows symlinks, as open() would
    if stat.S_ISREG(st.st_mode):
        return st
    kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode) else
            "a directory" if stat.S_ISDIR(st.st_mode) else
            "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else
            "a socket" if stat.S_ISSOCK(st.st_mode) else "not a file")
    raise LimitError(f"{Path(path)}: is {kind}, not a regular file; refusing to read it as "
                     f"{what}")


def npz_member_bytes(path: str | os.PathLike) -> dict[str, int]:
    """For each array of a ``.npz`` file, the bytes it will take once read, from the zip's
    directory and each member's ``.npy`` header, without decompressing the data (a small
    file can decompress to gigabytes)."""
    import zipfile

    import numpy as np
    from numpy.lib import format as npy

    sizes: dict[str, int] = {}
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            declared = info.file_size
            with archive.open(info) as member:
                try:
                    version = npy.read_magic(member)
                    read_header = (npy.read_array_header_1_0 if version == (1, 0)
                                   else npy.read_array_header_2_0)
                    shape, _, dtype = read_header(member)
                    declared = max(declared, array_bytes(
                        shape, np.dtype(dtype).itemsize if np.dtype(dtype).itemsize else 1))
                except Exception:  # noqa: BLE001 - numpy's reader says what is wrong later
                    pass
            sizes[name] = declared
    return sizes
