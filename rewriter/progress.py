"""Progress of the long stages (load, detect, plan, apply, validate, save, confirm, compare)
on stderr, with rich, only where a person watches: the CLI turns it on when stderr is a
terminal and ``--quiet`` is not given (:func:`enable`); the library is silent otherwise.

A stage shows a spinner with its name while it runs and leaves one line when it ends
(``✓ detect  1.2s``). Stages started inside a running stage are folded into it (one live
display at a time).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from typing import Any, TextIO


class Reporter:
    """Writes stage progress to a terminal stream."""

    def __init__(self, stream: TextIO) -> None:
        from rich.console import Console

        self.console = Console(file=stream, highlight=False)
        self.depth = 0
        self.status: Any = None  # the running stage's spinner
        self.text = ""  # and its text

    @contextlib.contextmanager
    def stage(self, name: str, detail: str = "") -> Iterator[None]:
        if self.depth:  # folded into the running stage
            yield
            return
        self.depth += 1
        start = time.perf_counter()
        text = f"{name} {detail}".strip()
        ok = False
        try:
            with self.console.status(f"{text}…", spinner="dots") as status:
                self.status, self.text = status, text
                yield
            ok = True
        finally:
            self.depth -= 1
            self.status = None
            mark = "[green]✓[/]" if ok else "[red]✗[/]"
            self.console.print(f"{mark} {text}  {time.perf_counter() - start:.1f}s")

    @contextlib.contextmanager
    def step(self, text: str) -> Iterator[None]:
        """One step of the running stage: shown on its spinner, a line when it ends."""
        status = self.status
        if status is None:
            yield
            return
        status.update(f"{self.text}: {text}…")
        start = time.perf_counter()
        ok = False
        try:
            yield
            ok = True
        finally:
            status.update(f"{self.text}…")
            mark = "·" if ok else "[red]✗[/]"
            self.console.print(f"  {mark} {text}  {time.perf_counter() - start:.1f}s")


_reporter: Reporter | None = None


def enable(stream: TextIO | None = None, *, quiet: bool = False) -> bool:
    """Show progress on ``stream`` (default stderr) when it is a terminal and not
    ``quiet``; returns whether it is on. Called by the CLI; off for library callers."""
    global _reporter
    stream = stream if stream is not None else sys.stderr
    is_tty = getattr(stream, "isatty", lambda: False)()
    _reporter = Reporter(stream) if is_tty and not quiet else None
    return _reporter is not None


def disable() -> None:
    global _reporter
    _reporter = None


def stage(name: str, detail: Any = "") -> contextlib.AbstractContextManager:
    """A context manager around one stage: a spinner and a closing line when progress is
    on, its duration noted while :func:`timed` records, nothing otherwise."""
    if _timings is not None:
        return _timed_stage(name, detail)
    if _reporter is None:
        return contextlib.nullcontext()
    return _reporter.stage(name, str(detail) if detail else "")


def step(text: str) -> contextlib.AbstractContextManager:
    """One step of the running stage (a compare run): shown on the stage's spinner with a
    line of its own when it ends, when progress is on and a stage runs; nothing
    otherwise."""
    if _reporter is None:
        return contextlib.nullcontext()
    return _reporter.step(text)


_timings: list[dict[str, Any]] | None = None  # where timed() records (report timing)
_timed_depth = 0


@contextlib.contextmanager
def timed() -> Iterator[list[dict[str, Any]]]:
    """Record how long each stage run inside takes, for a report: a list of ``{"stage":
    NAME, "seconds": S}`` in the order the stages first ran; a stage run again (detect
    on each target) adds to its entry; a stage inside another is part of it (report
    timing)."""
    global _timings
    outer, _timings = _timings, []
    try:
        yield _timings
    finally:
        _timings = outer


@contextlib.contextmanager
def _timed_stage(name: str, detail: Any) -> Iterator[None]:
    global _timed_depth
    records = _timings
    shown = (_reporter.stage(name, str(detail) if detail else "") if _reporter is not None
             else contextlib.nullcontext())
    _timed_depth += 1
    start = time.perf_counter()
    try:
        with shown:
            yield
    finally:
        _timed_depth -= 1
        if _timed_depth == 0 and records is not None:
            seconds = time.perf_counter() - start
            entry = next((e for e in records if e["stage"] == name), None)
            if entry is None:
                records.append({"stage": name, "seconds": seconds})
            else:
                entry["seconds"] += seconds


def loaded_name(model: Any) -> str:
    """How a stage names a model: its path, or "(in memory)"."""
    import os

    return str(model) if isinstance(model, (str, os.PathLike)) else "(in memory)"
