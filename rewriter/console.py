"""The process's standard streams: keep stdout for what the tool prints."""

from __future__ import annotations

import contextlib
import os
import sys


@contextlib.contextmanager
def native_stdout_to_stderr():
    """Send what C++ code prints to stdout (onnx's checker: "Warning: Model contains
    experimental ops") to stderr, so stdout holds only what we print (``--json`` stays
    parseable). Python's ``sys.stdout`` keeps writing to the real stdout."""
    try:
        python_on_fd1 = sys.stdout.fileno() == 1
    except (AttributeError, OSError, ValueError):  # captured (tests) or replaced
        python_on_fd1 = False
    try:
        saved = os.dup(1)
    except OSError:
        yield
        return
    sys.stdout.flush()
    os.dup2(2, 1)
    previous = sys.stdout
    if python_on_fd1:
        sys.stdout = os.fdopen(os.dup(saved), "w", encoding=previous.encoding,
                               errors=previous.errors, buffering=1)
    try:
        yield
    finally:
        sys.stdout.flush()
        if python_on_fd1:
            sys.stdout.close()
            sys.stdout = previous
        os.dup2(saved, 1)
        os.close(saved)
