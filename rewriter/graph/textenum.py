"""A string enum that prints as its value (``enum.StrEnum`` needs Python 3.11)."""

from __future__ import annotations

from enum import Enum


class TextEnum(str, Enum):
    """Compares equal to its value, and prints and formats as it (in JSON too)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)
