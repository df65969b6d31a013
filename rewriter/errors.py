"""Errors the tool reports as one readable line, with the exit code they map to."""

from __future__ import annotations

import re
from typing import Any

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_BAD_INPUT = 2
EXIT_UNVERIFIED = 3  # the result could not be compared with the original (docs/compare.md)


class RewriterError(Exception):
    """Base class: a problem the user can act on, reported as one line (exit 2)."""

    exit_code = EXIT_BAD_INPUT


class ModelError(RewriterError):
    """The model file, its structure or its external data is unusable."""

    def __init__(self, path: str | None, message: str) -> None:
        self.path = path
        self.detail = message
        super().__init__(f"{path}: {message}" if path else message)


class ExternalDataError(ModelError):
    """An external-data reference is unsafe, missing or out of bounds."""


class PluginError(RewriterError):
    """A plugin failed to import, or registered something invalid."""

    def __init__(self, plugin: str, message: str, distribution: str | None = None) -> None:
        self.plugin = plugin
        self.distribution = distribution
        where = f"plugin {plugin!r}" + (f" (from {distribution})" if distribution else "")
        super().__init__(f"{where}: {message}")


class TargetError(RewriterError):
    """A target name is unknown or its runtime is not installed."""


class OutputError(RewriterError):
    """The output path is unsafe (would overwrite the input, not writable, ...)."""


class WriteError(OutputError):
    """The OS refused a write (no space left, read-only, permission denied); the message
    names its reason and the file. ``errno``: the OS's error number."""

    errno: int | None = None


class LimitError(RewriterError):
    """An input is past a limit the tool sets to protect its own process (an input set
    too large to allocate, a compressed member that would decompress past it)."""


class TimeLimitError(RewriterError):
    """Python code (a plugin's builder) ran past its time limit."""


class Terminated(KeyboardInterrupt):
    """The process was asked to stop (SIGTERM, SIGHUP); it unwinds as on Ctrl-C, so
    temporary files are removed and child processes stopped. ``signum``: the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def one_line(text: str) -> str:
    """Escape control characters (newlines in node names, ...) so a message stays one line."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


class UnfixableError(RewriterError):
    """Some findings have no remedy; nothing was changed."""

    exit_code = EXIT_FINDINGS

    def __init__(self, findings: list[Any], why: dict[int, str]) -> None:
        self.findings = findings
        groups: dict[tuple, int] = {}
        for f in findings:
            key = (f.target, f.op_label, f.detail, why.get(id(f), ""))
            groups[key] = groups.get(key, 0) + 1
        # (target, op, what the target lacks, why no remedy applies, count) per distinct
        # failure, for callers that group them
        self.groups = [(t, op, detail, reason, n) for (t, op, detail, reason), n in groups.items()]
        parts = []
        for t, op, detail, reason, n in self.groups:
            text = f"{t}: {op} ×{n}: {detail}"
            if reason and reason != detail:
                text += f" — no remedy: {reason}"
            parts.append(text)
        super().__init__(
            f"{len(findings)} finding(s) have no remedy, nothing was changed: " + "; ".join(parts)
        )
