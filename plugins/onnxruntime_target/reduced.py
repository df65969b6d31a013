"""A reduced onnxruntime build (``onnxruntime:ops=FILE``): :class:`ReducedBuildTarget`, the
kernels of the installed onnxruntime that the build's operator configuration keeps."""

from __future__ import annotations

from rewriter.plugin import Finding, NodeQuery, TargetOptions

from .runtime import CPU, FOLDED_OPS, version_matches
from .target import OnnxRuntimeTarget


class ReducedBuildTarget(OnnxRuntimeTarget):
    """A reduced onnxruntime build (``onnxruntime:ops=FILE``): the kernels of the installed
    onnxruntime that the build's operator configuration keeps. Models run (``compare``,
    confirmation) on the full installed onnxruntime."""

    def __init__(self, config_path: str, provider: str = CPU,
                 options: TargetOptions | None = None) -> None:
        from rewriter_plugins.onnxruntime_reduced import read_config

        super().__init__(provider, options)
        self.build = read_config(config_path)
        self.name = (f"{self.name},ops={config_path}" if provider != CPU
                     else f"onnxruntime:ops={config_path}")
        self.description = f"a reduced onnxruntime build ({provider}) with the ops of {config_path}"
        self._reduced: dict[tuple, tuple[str, str, int | None] | None] = {}

    def check_op(self, domain: str, op_type: str, opset: int | None) -> str:
        """As onnxruntime's: the build's own verdict depends on the op and its types."""
        return super().check_op(domain, op_type, opset)

    def check_node(self, query: NodeQuery) -> Finding | None:
        finding = super().check_node(query)
        if finding is not None or self.build.all_ops:
            return finding
        node, types = query.node, query.types
        ins = tuple(types.get(n) if n else None for n in query.inputs)
        outs = tuple(types.get(n) if n else None for n in query.outputs)
        key = (query.domain, node.op_type, query.opset, ins, outs)
        verdict = self._reduced.get(key, ...)
        if verdict is ...:
            verdict = self._reduced[key] = self._build_verdict(query, ins, outs)
        return None if verdict is None else self.finding(query, *verdict[:2], version=verdict[2])

    def _build_verdict(self, query: NodeQuery, ins, outs):
        from rewriter_plugins.onnxruntime_reduced import type_problem

        node, domain = query.node, query.domain
        if domain == "" and node.op_type in FOLDED_OPS:
            return None
        opset = query.opset or self.schemas.max_version.get(domain)
        schema = self.schemas.resolve(domain, node.op_type, opset or 0)
        if schema is None:
            return None  # a custom-op library's op: not the build's kernels
        label = f"{domain or 'ai.onnx'}::{node.op_type}({schema.since_version})"
        kernels = [k for k in self._kernels.get((domain, node.op_type), [])
                   if version_matches(k, schema.since_version)]
        listed = self.build.listed_opsets(domain, node.op_type)
        if not kernels:
            return ("no-kernel", f"{label} runs in onnxruntime by inlining its function body; "
                    f"the reduced build ({self.build.path}) is checked by its kernels only",
                    schema.since_version)
        if not any(k.start <= o <= k.end for k in kernels for o in listed):
            where = (f"lists it only at opset {', '.join(map(str, sorted(listed)))}" if listed
                     else "does not list it")
            return ("no-kernel", f"the reduced build's operator config ({self.build.path}) "
                    f"{where}: no kernel for {label}", schema.since_version)
        problem = type_problem(self.build, domain, node.op_type, ins, outs)
        if problem:
            return ("type-binding", f"the reduced build ({self.build.path}): {problem}",
                    schema.since_version)
        return None

    def kernel_problem(self, remedy) -> str | None:
        return (f"{self.name}: a reduced build is checked against its operator config, "
                "not with custom kernels")

