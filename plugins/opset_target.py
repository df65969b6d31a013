"""Target ``opset:N``: a runtime implementing the standard ONNX domain up to opset N.

This is what older runtimes and NPU SDKs are ("opset <= 13 only"). A node fails when its
domain is not standard, or when the version of its op in force at the model's opset was
introduced after N.
"""

from __future__ import annotations

from rewriter.plugin import (
    REFUSED,
    RUNS,
    Finding,
    NodeQuery,
    Target,
    TargetError,
    TargetOptions,
    hookimpl,
    onnx_schemas,
)

MIN_OPSET = 1


def ml_opset_for(opset: int) -> int:
    """The ai.onnx.ml version released alongside ai.onnx ``opset``."""
    from onnx.helper import VERSION_TABLE

    best = 1
    for _release, _ir, onnx_opset, ml_opset, *_ in VERSION_TABLE:
        if onnx_opset <= opset:
            best = max(best, ml_opset)
    return best


class OpsetTarget(Target):
    def __init__(self, max_opset: int) -> None:
        self.max_opset = max_opset
        self.max_versions = {"": max_opset, "ai.onnx.ml": ml_opset_for(max_opset)}
        self.max_opsets = self.max_versions
        self.name = f"opset:{max_opset}"
        self.description = f"a runtime implementing ai.onnx up to opset {max_opset}"

    def check_model(self, model):
        from rewriter.plugin import opset_import_findings

        return opset_import_findings(self.name, model, self.max_versions, ("", "ai.onnx.ml"))

    def check_op(self, domain: str, op_type: str, opset: int | None) -> str:
        """The verdict depends on the op's version alone."""
        if opset is None or domain not in self.max_versions:
            return REFUSED
        schema = onnx_schemas().resolve(domain, op_type, opset)
        if schema is None or schema.since_version > self.max_versions[domain]:
            return REFUSED
        return RUNS

    def check_node(self, query: NodeQuery) -> Finding | None:
        node, domain, opset = query.node, query.domain, query.opset
        if opset is None:
            return self.finding(
                query, "domain-not-imported",
                f"the model has no opset import for domain {domain or 'ai.onnx'!r}",
            )
        if domain not in self.max_versions:
            return self.finding(
                query, "unknown-domain",
                f"{self.name} runs only the standard domains, not {domain!r}",
            )
        schemas = onnx_schemas()
        schema = schemas.resolve(domain, node.op_type, opset)
        if schema is None:
            return self.finding(
                query, "no-schema",
                f"onnx has no schema for {domain or 'ai.onnx'}::{node.op_type} at opset {opset}",
            )
        limit = self.max_versions[domain]
        if schema.since_version <= limit:
            return None
        older = schemas.resolve(domain, node.op_type, limit)
        if older is None:
            first = next(v for v in range(limit + 1, schema.since_version + 1)
                         if schemas.resolve(domain, node.op_type, v) is not None)
            detail = f"{node.op_type} was introduced in opset {first}, after {limit}"
            if first != schema.since_version:
                detail += f" (the model's is {node.op_type}({schema.since_version}))"
        else:
            detail = (f"{node.op_type}({schema.since_version}) is newer than the "
                      f"{node.op_type}({older.since_version}) a runtime at opset {limit} has")
        return self.finding(query, "opset-too-new", detail, version=schema.since_version)


def _make(argument: str | None, options: TargetOptions | None = None) -> OpsetTarget:
    if not argument or not argument.isdigit() or int(argument) < MIN_OPSET:
        raise TargetError(f"target 'opset' needs a version, e.g. opset:13 (got {argument!r})")
    top = onnx_schemas().max_version[""]
    if int(argument) > top:
        raise TargetError(f"opset:{argument} is beyond the newest opset onnx knows ({top})")
    return OpsetTarget(int(argument))


@hookimpl
def register_targets(registry):
    registry.add("opset", _make, description="a runtime implementing ai.onnx up to opset N")
