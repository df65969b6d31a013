"""Intermediate shapes a model declares (``value_info``) that a run contradicts: the
``declared-shape`` findings and the pass that clears those declarations.

onnxruntime's memory planner trusts the shapes a model declares for its intermediate values:
two values declared with the same symbolic dimensions share a buffer, and a run where they
differ fails ("Shape mismatch attempting to re-use buffer. {2,1,64} != {2,4,64}. Validate
usage of dim_value ... and dim_param (all values with the same string should equate to the
same size)"). onnxruntime-genai's float16 CPU models declare the key/value heads repeated from
the whole cache (``repeat_kv``) as ``(batch_size, sequence_length, 64)``; a decoding step
(one new token after a cache) makes ``(batch_size, total_sequence_length, 64)``.

Detection (the onnxruntime target's confirmation): when the run on generated inputs fails on
every input set, the same model without its intermediate declarations, each declared value
made an output, runs on the same input sets in a child process. If it runs, the failure
came from the declarations, and each declaration that run contradicts is a finding on the
value's producer (reason ``declared-shape``, the value named): a rank or a static dimension
other than the run's, a symbolic dimension the inputs give another size, or a symbolic
dimension that takes several sizes in the run (one name is one size, in ONNX and in
onnxruntime's planner). The pass ``declared-shapes`` clears those declarations (their
element types stay; graph outputs keep theirs: they are the interface); the re-check
confirms the result again, to a fixed point.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rewriter.plugin import Finding, PassContext, RewritePass

REASON = "declared-shape"
NAME = "declared-shapes"


@dataclass(frozen=True)
class Contradiction:
    """One declared intermediate shape the run contradicts."""

    name: str
    declared: tuple  # dims: int, str (a symbolic name) or None (unknown)
    actual: tuple[int, ...]
    why: str


def declared_intermediates(model) -> dict:
    """The main graph's ``value_info`` entries declaring a tensor shape, of values a
    main-graph node makes (not graph inputs, outputs or initializers), by name."""
    graph = model.graph
    produced = {o for node in graph.node for o in node.output if o}
    interface = {v.name for v in (*graph.input, *graph.output)}
    return {v.name: v for v in graph.value_info
            if v.name in produced and v.name not in interface
            and v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape")}


def shapes_model(model, names: Sequence[str]):
    """A copy of ``model`` without any intermediate declaration (every graph's
    ``value_info``), with ``names`` made graph outputs (element types as declared), so a run
    returns their shapes."""
    from onnx import ModelProto, helper

    from rewriter.plugin import iter_scopes

    declared = {v.name: v.type.tensor_type.elem_type for v in model.graph.value_info
                if v.type.HasField("tensor_type")}
    copy = ModelProto()
    copy.CopyFrom(model)
    for scope in iter_scopes(copy):
        if scope.graph is not None:
            del scope.graph.value_info[:]
    outputs = {o.name for o in copy.graph.output}
    copy.graph.output.extend(helper.make_tensor_value_info(n, declared.get(n, 0), None)
                             for n in names if n not in outputs)
    return copy


def _dims(info) -> tuple:
    return tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                 for d in info.type.tensor_type.shape.dim)


def contradictions(model, feeds: Mapping, shapes: Mapping[str, Sequence[int]]
                   ) -> list[Contradiction]:
    """The declared intermediate shapes of ``model`` that a run on ``feeds`` contradicts,
    given the shapes it made (``shapes``: value name -> its shape), in graph order."""
    bound: dict[str, int] = {}  # symbolic dimension -> the size the inputs give it
    for value in model.graph.input:
        fed = feeds.get(value.name)
        shape = getattr(fed, "shape", None)
        if shape is None or not value.type.HasField("tensor_type"):
            continue
        for dim, size in zip(_dims(value), shape):
            if isinstance(dim, str):
                bound.setdefault(dim, int(size))
    declared = declared_intermediates(model)
    seen: dict[str, set[int]] = {}  # a symbolic dimension the inputs do not give: its sizes
    for name, info in declared.items():
        actual = shapes.get(name)
        dims = _dims(info)
        if actual is not None and len(actual) == len(dims):
            for dim, size in zip(dims, actual):
                if isinstance(dim, str) and dim not in bound:
                    seen.setdefault(dim, set()).add(int(size))
    out = []
    for name, info in declared.items():
        actual = shapes.get(name)
        if actual is None:
            continue
        actual, dims = tuple(int(n) for n in actual), _dims(info)
        why = None
        if len(actual) != len(dims):
            why = f"rank {len(dims)} declared, the run makes rank {len(actual)}"
        else:
            for i, (dim, size) in enumerate(zip(dims, actual)):
                if isinstance(dim, int) and dim != size:
                    why = f"dimension {i} declared {dim}, the run makes {size}"
                elif isinstance(dim, str) and dim in bound and bound[dim] != size:
                    why = (f"dimension {i} declared {dim!r}, which the inputs make "
                           f"{bound[dim]}; the run makes {size}")
                elif isinstance(dim, str) and len(seen.get(dim, ())) > 1:
                    why = (f"dimension {i} declared {dim!r}, which the run makes "
                           f"{', '.join(map(str, sorted(seen[dim])))} in different values")
                if why:
                    break
        if why:
            out.append(Contradiction(name, dims, actual, why))
    return out


def _shown(dims) -> str:
    return "(" + ", ".join("?" if d is None else str(d) for d in dims) + ")"


def _short(error: str) -> str:
    """onnxruntime's run error without its boilerplate: the status message, up to its advice."""
    import re

    said = error.split("Status Message: ", 1)
    text = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", said[-1]).split(" Validate ")[0]
    m = re.search(r"running (\w+) node\. Name:'([^']*)'", said[0]) if len(said) > 1 else None
    return f"{text} (at {m.group(1)} {m.group(2)!r})" if m else text


def contradiction_findings(target: str, model, found: Sequence[Contradiction], error: str
                           ) -> list[Finding]:
    """A finding per contradiction, on the node that makes the value (the value named),
    saying how the runtime failed (``error``)."""
    from rewriter.plugin import iter_nodes

    producers = {}
    for site in iter_nodes(model):
        if site.scope.graph is model.graph:
            for output in site.node.output:
                producers.setdefault(output, site)
    out, short = [], _short(error)
    for c in found:
        site = producers[c.name]
        detail = (f"value {c.name!r} is declared {_shown(c.declared)}, and the run on "
                  f"generated inputs makes {_shown(c.actual)} ({c.why}); onnxruntime fails "
                  f"on the model as declared ({short}) and runs it without the "
                  "intermediate declarations")
        out.append(Finding(target, site.path, site.domain, site.node.op_type,
                           site.opset_version, REASON, detail, site.node.name, value=c.name))
    return out


class DeclaredShapesPass(RewritePass):
    """Clears the declared shapes of the values of the ``declared-shape`` findings."""

    phase = "legalize"
    wants_findings = True

    def handles(self, finding: Finding, ctx: PassContext) -> bool:
        return finding.reason == REASON

    def offers_for_op(self, finding: Finding, ctx: PassContext) -> bool:
        return False  # each finding names its own value

    def offers(self, finding: Finding, ctx: PassContext) -> tuple[bool, str]:
        if finding.reason != REASON or not finding.value:
            return False, "clears only the declared shapes a run contradicts"
        return True, (f"clears the declared shape of {finding.value!r} (its element type "
                      "stays)")

    def run(self, model, ctx: PassContext):
        names = {f.value for f in ctx.findings if f.reason == REASON and f.value}
        cleared = 0
        for info in model.graph.value_info:
            if info.name in names and info.type.tensor_type.HasField("shape"):
                info.type.tensor_type.ClearField("shape")
                cleared += 1
        if not cleared:
            return None
        ctx.record("conversion", self.plugin, "clear declared shapes the run contradicts",
                   "value_info", cleared)
        return model
