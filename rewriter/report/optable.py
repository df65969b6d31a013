"""The operator table: every op the installed plugins can remedy, generated from the
registries (``onnx-rewriter ops``; ``docs/operators.md`` is its ``--markdown`` output)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rewriter.graph.opid import domain_label
from rewriter.registry import DecompositionEntry, Registry

# How the table names each oracle kind (rewriter.registry.ORACLES); "module:attr" is "numpy"
_ORACLE_LABELS = {"onnxruntime": "onnxruntime kernel", "kernel": "plugin kernel",
                  "reference": "reference evaluator", "spec": "ONNX test cases"}


@dataclass
class OperatorRow:
    """What the installed plugins offer for one ``(domain, op_type)``."""

    domain: str
    op_type: str
    decompositions: list[str] = field(default_factory=list)  # "plugin [opsets]"
    kernels: list[str] = field(default_factory=list)  # "plugin (python)" / "plugin (native)"
    opsets: list[str] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    accuracy: set[str] = field(default_factory=set)
    oracles: list[str] = field(default_factory=list)  # what checks the remedies
    # where each remedy's code is: "module:function" of a decomposition's builder or a
    # kernel (a contributor goes from the op's name to its code in one step)
    code: list[str] = field(default_factory=list)

    @property
    def oracle(self) -> str:
        return ", ".join(self.oracles) or "none"

    @property
    def remedy(self) -> str:
        kinds = [k for k, present in (("decomposition", self.decompositions),
                                      ("kernel", self.kernels)) if present]
        return " + ".join(kinds)

    def as_dict(self) -> dict[str, Any]:
        return {
            "domain": domain_label(self.domain), "op_type": self.op_type, "remedy": self.remedy,
            "decompositions": self.decompositions, "kernels": self.kernels,
            "opsets": self.opsets, "dtypes": self.dtypes,
            "accuracy": " / ".join(sorted(self.accuracy)) or "-", "oracle": self.oracle,
            "code": self.code,
        }


def _opset_range(lo: int, hi: int | None) -> str:
    return f"{lo}+" if hi is None else (f"{lo}" if lo == hi else f"{lo}-{hi}")


def _kernel_dtypes(reference: str) -> list[str]:
    """Input element types of a kernel's signatures (importing the kernel module)."""
    from rewriter.plan.functions import resolve_reference

    try:
        k = resolve_reference(reference)
    except Exception:  # noqa: BLE001 - a kernel that cannot be imported has no known types
        return []
    types: list[str] = []
    for sig in getattr(k, "signatures", ()):
        for t in sig.inputs[:1] or sig.outputs[:1]:
            if t not in types:
                types.append(t)
    return types


def code_location(builder: Any, plugin_module: str | None = None) -> str:
    """``module:function`` of a remedy's code: a ``"module:attr"`` reference as it is; a
    function (or an onnxscript function's Python function) by its module and qualified
    name; a ``FunctionProto`` by the registering plugin's module and the function's name."""
    from onnx import FunctionProto

    if isinstance(builder, str):
        return builder
    if isinstance(builder, FunctionProto):
        return f"{plugin_module or '?'}:{builder.name} (a FunctionProto)"
    function = getattr(builder, "function", None)  # onnxscript's OnnxFunction
    target = function if callable(function) else builder
    module = getattr(target, "__module__", None) or plugin_module or "?"
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or \
        type(target).__name__
    if ".<locals>." in name:  # a builder a function makes: that function
        return f"{module}:{name.split('.<locals>.')[0]} (the builder it makes)"
    return f"{module}:{name}"


def oracle_labels(entry: DecompositionEntry) -> list[str]:
    """What checks a decomposition: its oracle and its samples' own, as the table says."""
    names = [entry.oracle] + [s.oracle for s in entry.samples]
    out: list[str] = []
    for name in names:
        if name is not None:
            text = _ORACLE_LABELS.get(name, "numpy")
            if text not in out:
                out.append(text)
    return out


def operator_rows(registry: Registry) -> list[OperatorRow]:
    """One row per op any plugin registered a decomposition or kernel for, sorted by
    domain then op."""
    rows: dict[tuple[str, str], OperatorRow] = {}

    def row(domain: str, op_type: str) -> OperatorRow:
        return rows.setdefault((domain, op_type), OperatorRow(domain, op_type))

    def add_types(r: OperatorRow, types) -> None:
        for t in types:
            if t not in r.dtypes:
                r.dtypes.append(t)

    for d in registry.decompositions:
        r = row(d.domain, d.op_type)
        span = _opset_range(*d.opsets)
        r.decompositions.append(f"{d.plugin} [opset {span}]")
        r.opsets.append(span)
        add_types(r, d.dtypes)
        r.accuracy.add("exact" if d.exact else "approximate")
        r.oracles += [o for o in oracle_labels(d) if o not in r.oracles]
        where = code_location(d.builder, _plugin_module(registry, d.plugin))
        if where not in r.code:
            r.code.append(where)
    for (domain, op_type), k in registry.kernels.items():
        r = row(domain, op_type)
        r.kernels.append(f"{k.plugin} (python)")
        if k.reference not in r.code:
            r.code.append(k.reference)
        add_types(r, _kernel_dtypes(k.reference))
        r.accuracy.add("exact")
        if not r.decompositions:  # a kernel written from the op's documentation
            r.oracles.append("the kernel itself")
    for (domain, op_type), n in registry.natives.items():
        r = row(domain, op_type)
        r.kernels.append(f"{n.plugin} (native {n.library})")
        # the library's own C++ has the op's code; the module and hook that register it
        # are where a contributor changes the mapping
        module = _plugin_module(registry, n.plugin) or n.plugin
        r.code.append(n.attributes or f"{module}:register_kernels")
        r.accuracy.add("exact")
        if not r.decompositions and not r.oracles:
            r.oracles.append(f"the {n.library} native kernel itself")
    return [rows[k] for k in sorted(rows, key=lambda k: (k[0], k[1].lower()))]


def _plugin_module(registry: Registry, plugin: str) -> str | None:
    info = registry.plugins.get(plugin)
    return getattr(info, "module", None) if info is not None else None


def to_markdown(rows: list[OperatorRow]) -> str:
    """The table as Markdown, grouped by domain."""
    out = [
        "# Operators the built-in plugins remedy",
        "",
        "Generated by `onnx-rewriter ops --markdown` from the plugin registries; do not edit",
        "by hand (`tests/test_optable.py` checks it is current). *opsets*: the ai.onnx",
        "opsets a decomposition's body is valid at (a kernel runs at any). *dtypes*: element",
        "types the decomposition is tested for, and a kernel's input types; `-`: as the op's",
        "schema allows. *exact*: the same math up to float rounding; *approximate*: see the",
        "plugin's documentation. *oracle*: what a decomposition is checked against on the",
        "samples its registration declares, at each of its dtypes (`tests/test_oracles.py`):",
        "onnxruntime's own kernel running the original node, the plugin's numpy kernel, the",
        "reference evaluator's implementation of the op, the ONNX backend test cases'",
        "expected outputs, or a numpy function written from the op's documentation; an op",
        "with kernels only is its own oracle.",
        "",
    ]
    by_domain: dict[str, list[OperatorRow]] = {}
    for r in rows:
        by_domain.setdefault(domain_label(r.domain), []).append(r)
    for domain, group in by_domain.items():
        out += [f"## {domain} ({len(group)})", "",
                "| op | remedy | plugin | opsets | dtypes | accuracy | oracle |",
                "|---|---|---|---|---|---|---|"]
        for r in group:
            plugins = sorted({p.split(" ")[0] for p in r.decompositions + r.kernels})
            out.append(
                f"| {r.op_type} | {r.remedy} | {', '.join(plugins)} | "
                f"{', '.join(r.opsets) or 'any'} | {', '.join(r.dtypes) or '-'} | "
                f"{' / '.join(sorted(r.accuracy)) or '-'} | {r.oracle} |"
            )
        out.append("")
    return "\n".join(out)


def passes_markdown(registry: Registry) -> str:
    """Whole-model passes (they remedy findings of any op, e.g. an opset conversion)."""
    if not registry.passes:
        return ""
    lines = ["", "## Passes", "", "| pass | phase | plugin |", "|---|---|---|"]
    for p in sorted(registry.passes.values(), key=lambda p: p.name):
        lines.append(f"| {p.name} | {p.phase} | {p.plugin} |")
    return "\n".join(lines) + "\n"
