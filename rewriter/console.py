"""The process: its standard streams (stdout kept for what the tool prints; text that fits
the terminal's width and its encoding), the signals that stop it (SIGTERM and SIGHUP end it
as cleanly as Ctrl-C), time limits on Python code, and child processes that die with it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any, TextIO

# -- text for the terminal --------------------------------------------------------------------

# what the tool prints beyond ASCII, and what stands for it where the stream cannot encode it
ASCII_FALLBACKS = {"✓": "ok", "✗": "x", "→": "->", "×": "x", "—": "-", "…": "...",
                   "≤": "<=", "≥": ">=", "·": "-"}


NO_WRAP = 10**6  # output to a file or pipe: lines are not wrapped (grep sees them whole)


def width() -> int:
    """The width to wrap text at: ``COLUMNS`` when set, else the terminal's width, at least
    40; :data:`NO_WRAP` when stdout is no terminal and ``COLUMNS`` is not set."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return max(40, int(columns))
    try:
        if not os.isatty(sys.__stdout__.fileno()):
            return NO_WRAP
        return max(40, shutil.get_terminal_size().columns)
    except (AttributeError, ValueError, OSError):
        return NO_WRAP


def can_encode(stream: Any, text: str = "".join(ASCII_FALLBACKS)) -> bool:
    """Whether ``stream`` can encode ``text`` (by default every symbol the tool prints)."""
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        text.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return False
    return True


def ascii_safe(text: str, encoding: str) -> str:
    """``text`` with the symbols ``encoding`` cannot encode replaced by their ASCII stand-ins
    (anything else it cannot encode by ``?``)."""
    for symbol, fallback in ASCII_FALLBACKS.items():
        if symbol in text:
            try:
                symbol.encode(encoding)
            except (UnicodeEncodeError, LookupError):
                text = text.replace(symbol, fallback)
    try:
        text.encode(encoding)
        return text
    except (UnicodeEncodeError, LookupError):
        return text.encode(encoding, "replace").decode(encoding, "replace")


class SafeStream:
    """A text stream that writes what its encoding cannot hold as ASCII stand-ins ("✓" as
    "ok") instead of failing; everything else is the wrapped stream's."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._encoding = getattr(stream, "encoding", None) or "utf-8"

    def write(self, text: str) -> int:
        return self._stream.write(ascii_safe(text, self._encoding))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def safe_stream(stream: TextIO | None = None) -> TextIO:
    """``stream`` (default: the current ``sys.stdout``), wrapped in :class:`SafeStream` when
    it cannot encode the tool's symbols."""
    stream = sys.stdout if stream is None else stream
    if isinstance(stream, SafeStream) or can_encode(stream):
        return stream
    return SafeStream(stream)  # type: ignore[return-value]


def never_fail_on_encoding() -> None:
    """Make ``sys.stdout``/``sys.stderr`` replace what their encoding cannot hold (a cp1252
    console), so printing a symbol never fails a run that already did its work."""
    for stream in (sys.stdout, sys.stderr):
        if not can_encode(stream) and hasattr(stream, "reconfigure"):
            with contextlib.suppress(Exception):
                stream.reconfigure(errors="replace")


def wrap(text: str, indent: int = 0, first: int | None = None, columns: int | None = None
         ) -> list[str]:
    """``text`` as lines of at most ``columns`` (default: :func:`width`) characters,
    broken only at spaces: a word (an op name, a path) longer than a line stands alone on
    its line, never cut. ``first``: the first line's indent (default ``indent``)."""
    columns = columns or width()
    first = indent if first is None else first
    return textwrap.wrap(text, width=columns, initial_indent=" " * first,
                         subsequent_indent=" " * indent, break_long_words=False,
                         break_on_hyphens=False) or [" " * first]


def error_lines(message: str, columns: int | None = None) -> list[str]:
    """An error as one line (``error: ...``: easy to grep) unless it is longer than four
    rows of the terminal (a list of findings without a remedy): then a short first line and
    the rest as indented detail, split after the first ``: `` or ``; `` that ends the
    summary, then at every ``; `` (an item a line)."""
    columns = columns or width()
    head = f"error: {message}"
    if len(head) <= 4 * columns:
        return [head]
    cut = -1
    for sep in (": ", "; "):
        at = message.find(sep)
        if 0 < at < columns - 10 and (cut < 0 or at < cut):
            cut = at
    if cut < 0:
        return wrap(head, indent=2, first=0, columns=columns)
    summary, rest = message[:cut + 1], message[cut + 2:]
    lines = wrap(f"error: {summary}", indent=2, first=0, columns=columns)
    for item in rest.split("; "):
        lines += wrap(item, indent=4, first=2, columns=columns)
    return lines


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
        with contextlib.suppress(OSError, ValueError):  # a closed pipe (| head)
            sys.stdout.flush()
        if python_on_fd1:
            with contextlib.suppress(OSError, ValueError):
                sys.stdout.close()
            sys.stdout = previous
        os.dup2(saved, 1)
        os.close(saved)


# -- signals ----------------------------------------------------------------------------------

STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP")
                     if hasattr(signal, name))


@contextlib.contextmanager
def stop_on_signals(signals: tuple[int, ...] = STOP_SIGNALS) -> Iterator[None]:
    """Meanwhile, SIGTERM and SIGHUP raise :class:`~rewriter.errors.Terminated` (a
    KeyboardInterrupt) in the main thread, so the process unwinds as on Ctrl-C: temporary
    files are removed, child processes stopped. Later ones are ignored while it unwinds."""
    from rewriter.errors import Terminated

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        for s in signals:
            signal.signal(s, signal.SIG_IGN)  # let the clean-up finish
        raise Terminated(signum)

    previous = {}
    for s in signals:
        try:
            previous[s] = signal.signal(s, stop)
        except (OSError, ValueError):
            pass
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def time_limit(seconds: float | None, what: str) -> Iterator[None]:
    """Raise :class:`~rewriter.errors.TimeLimitError` ("WHAT took longer than Ns") in
    Python code that runs past ``seconds`` (SIGALRM; main thread only, elsewhere no limit).
    An earlier limit already set outside is left to fire first."""
    from rewriter.errors import TimeLimitError

    if (not seconds or seconds <= 0 or not hasattr(signal, "setitimer")
            or threading.current_thread() is not threading.main_thread()):
        yield
        return
    outer_delay, outer_interval = signal.getitimer(signal.ITIMER_REAL)
    if outer_delay and outer_delay <= seconds:
        yield
        return

    def expired(signum, frame):
        raise TimeLimitError(f"{what} took longer than {seconds:g}s")

    start = time.monotonic()
    handler = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, handler)
        if outer_delay:
            left = max(outer_delay - (time.monotonic() - start), 0.001)
            signal.setitimer(signal.ITIMER_REAL, left, outer_interval)


# -- child processes --------------------------------------------------------------------------

PARENT_ENV = "ONNX_REWRITER_PARENT"
_PR_SET_PDEATHSIG = 1


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a child process that is to die with this one: names this
    process (and whether the child may use the parent-death signal: only for a child
    started by the main thread, since Linux sends it when the starting *thread* ends)."""
    env = dict(os.environ if env is None else env)
    main = threading.current_thread() is threading.main_thread()
    env[PARENT_ENV] = f"{os.getpid()}:{'pdeathsig' if main else 'watch'}"
    return env


def die_with_parent(poll_seconds: float = 0.5) -> None:
    """In a child process: end when the parent ends, even if the parent was killed
    (SIGKILL) and even if the child hangs in a kernel. The parent is the one named by
    :func:`child_env`, else the process that started this one (a child whose starter waits
    for it, as ``subprocess.run`` does). Linux's parent-death signal where allowed, and a
    thread watching the parent in any case; the child's own process group (its children)
    is killed with it when it leads one."""
    value = os.environ.pop(PARENT_ENV, "")  # not inherited by this process's children
    pid_text, _, how = value.partition(":")
    if not pid_text.isdigit():
        pid_text, how = str(os.getppid()), "pdeathsig"
    parent = int(pid_text)
    if how == "pdeathsig" and sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # it died before the signal was armed
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(poll_seconds)
            if os.getppid() != parent:
                try:
                    if os.getpgrp() == os.getpid():
                        os.killpg(os.getpid(), signal.SIGKILL)
                finally:
                    os._exit(1)

    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()


def die_with_parent_line() -> str:
    """A line to put first in a ``python -c`` child's script: :func:`die_with_parent`."""
    return "import rewriter.console as _c; _c.die_with_parent(); del _c\n"
