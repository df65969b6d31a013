"""What targets ask of opsets: the ceilings and floors they set, and ``CeilingTarget``,
which finds the nodes whose operator version changes under a ceiling.
"""

from __future__ import annotations

from collections.abc import Mapping

from rewriter.plugin import Finding, NodeQuery, Target, normalize_domain

from .common import CONVERTIBLE


class CeilingTarget(Target):
    """Reports every node whose operator version changes when its domain is lowered to
    the ``to`` opsets (what the conversion has to touch)."""

    name = "opset-conversion"

    def __init__(self, to: Mapping[str, int]) -> None:
        self.to = dict(to)

    def check_node(self, query: NodeQuery) -> Finding | None:
        domain, opset = query.domain, query.opset
        top = self.to.get(domain)
        if top is None or opset is None or opset <= top:
            return None
        schemas = self.schemas
        now = schemas.resolve(domain, query.node.op_type, opset)
        then = schemas.resolve(domain, query.node.op_type, top)
        if now is not None and then is not None and now.since_version == then.since_version:
            return None
        return self.finding(query, "opset-too-new", "changes version",
                            version=now.since_version if now is not None else opset)


def floors(targets) -> dict[str, tuple[int, str]]:
    """The highest ai.onnx opset floor any target sets, and the target setting it."""
    out: dict[str, tuple[int, str]] = {}
    for t in targets:
        for domain, low in (getattr(t, "min_opsets", None) or {}).items():
            domain = normalize_domain(domain)
            if domain == "" and low > out.get(domain, (0, ""))[0]:
                out[domain] = (low, t.name)
    return out


def has_older_version(finding: Finding) -> bool:
    """Whether the finding's op existed, in another version, before the node's opset."""
    from onnx import defs

    domain = normalize_domain(finding.domain)
    opset = (finding.scope_opsets or {}).get(domain)
    if finding.node is None or domain not in CONVERTIBLE or opset is None:
        return False
    try:
        since = defs.get_schema(finding.op_type, opset, domain).since_version
        defs.get_schema(finding.op_type, since - 1, domain)
    except defs.SchemaError:
        return False
    return True


def ceilings(targets) -> dict[str, int]:
    """The lowest opset ceiling any target sets, per convertible domain."""
    out: dict[str, int] = {}
    for t in targets:
        for domain, top in (getattr(t, "max_opsets", None) or {}).items():
            domain = normalize_domain(domain)
            if domain in CONVERTIBLE:
                out[domain] = min(out.get(domain, top), top)
    return out
