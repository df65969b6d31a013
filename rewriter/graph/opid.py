"""One name for an operator: ``(domain, op_type, version)``, printed ``com.acme::Foo(1)``.

The standard domain is stored as ``""`` and printed ``ai.onnx``, so every report, error
and registry listing spells an operator the same way. Imports nothing (a confirming child
process uses it without onnx).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

STANDARD_LABEL = "ai.onnx"
DOMAIN_ALIASES = {"ai.onnx": ""}  # spellings of the standard domain besides ""
_LABEL = re.compile(r"^(?P<domain>[^:]*)::(?P<op>[^(]+)(?:\((?P<version>\d+)\))?$")


def normalize_domain(domain: str) -> str:
    """``ai.onnx`` and ``""`` name the same domain; return the canonical spelling."""
    return DOMAIN_ALIASES.get(domain, domain)


def domain_label(domain: str) -> str:
    """A domain as reports print it: ``ai.onnx`` for the standard domain."""
    return normalize_domain(domain) or STANDARD_LABEL


@dataclass(frozen=True, order=True)
class OpId:
    """An operator: its domain (``""`` for ai.onnx; ``"ai.onnx"`` is accepted and
    normalized), its type and, where it matters, its version (``None``: unversioned).

    ``str(OpId("", "Relu", 14))`` is ``"ai.onnx::Relu(14)"``; an ``OpId`` without an
    ``op_type`` names the domain alone (``"ai.onnx"``, an opset import)."""

    domain: str
    op_type: str = ""
    version: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "domain", normalize_domain(self.domain or ""))

    @property
    def domain_label(self) -> str:
        return domain_label(self.domain)

    @property
    def key(self) -> tuple[str, str]:
        """``(domain, op_type)``: how registries key an op."""
        return self.domain, self.op_type

    def unversioned(self) -> OpId:
        return OpId(self.domain, self.op_type)

    def __str__(self) -> str:
        if not self.op_type:
            return self.domain_label
        version = f"({self.version})" if self.version is not None else ""
        return f"{self.domain_label}::{self.op_type}{version}"

    @classmethod
    def parse(cls, text: str) -> OpId:
        """``"com.acme::Foo"``, ``"ai.onnx::Relu(14)"`` or ``"::Relu"`` as an ``OpId``."""
        match = _LABEL.match(text.strip())
        if not match:
            raise ValueError(f"{text!r} is not an operator label like 'com.acme::Foo(1)'")
        version = match.group("version")
        return cls(match.group("domain"), match.group("op"),
                   int(version) if version else None)
