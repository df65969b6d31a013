"""A runtime that refuses a whole model without naming a node (tract's panics, a crash) is
asked again about prefixes of the model: the main graph's first ``k`` nodes, every value
they make that the rest reads (or that is an output, or that nothing reads) exposed as an
output. A binary search over ``k`` finds the first node whose prefix the runtime refuses,
so that the finding names a node (issue 30: a finding always names a node). Each question
is the target's own confirmation (a child process), about ``log2(n)`` of them."""

from __future__ import annotations

from dataclasses import dataclass

from onnx import ModelProto, TypeProto, helper

# Main graphs up to this many nodes are bisected (each step loads a prefix in the runtime)
BISECT_MAX_NODES = 5000


@dataclass(frozen=True)
class Bisection:
    """The first main-graph node whose prefix the runtime refuses, with its refusal."""

    index: int
    refusal: str
    steps: int  # prefixes asked about

    def detail(self, target: str, also: str = "") -> str:
        """The refusal, said to be the first prefix's (``also``: more, after the count)."""
        return (f"{self.refusal} (the first node whose prefix of the model {target} refuses, "
                f"found in {self.steps} loads{also})")


def prefix_model(model: ModelProto, count: int, types: dict[str, TypeProto] | None = None
                 ) -> ModelProto:
    """The model's first ``count`` main-graph nodes as a model: the inputs and
    initializers they read, and as outputs every value they make that a later node reads,
    that the model outputs, or that nothing reads (a runtime computes nothing else), typed
    from ``types`` (default: onnx's shape inference of the model)."""
    graph = model.graph
    if types is None:
        types = _inferred_types(model)
    nodes = list(graph.node[:count])
    later_reads = {i for n in graph.node[count:] for i in n.input if i}
    later_reads |= {o.name for o in graph.output}
    made, read = [], set()
    for node in nodes:
        read.update(i for i in node.input if i)
        made.extend(o for o in node.output if o)
    outputs = [name for name in dict.fromkeys(made) if name in later_reads or name not in read]
    declared = {v.name: v.type for v in (*graph.value_info, *graph.output)}
    if types:
        declared = {**types, **declared}
    out = ModelProto()
    out.CopyFrom(model)
    g = out.graph
    del g.node[:], g.output[:], g.value_info[:]
    g.node.extend(nodes)
    needed = read | set(outputs)
    kept_inputs = [i for i in graph.input if i.name in needed]
    del g.input[:]
    g.input.extend(kept_inputs)
    kept = [t for t in graph.initializer if t.name in needed]
    del g.initializer[:]
    g.initializer.extend(kept)
    g.output.extend(helper.make_value_info(name, declared.get(name, TypeProto()))
                    for name in outputs)
    g.value_info.extend(v for v in graph.value_info if v.name in read)
    return out


def bisect_refusal(model: ModelProto, target, base_dir=None) -> Bisection | None:
    """The first main-graph node whose prefix ``target`` refuses (its confirmation), when
    the whole model is refused and no shorter prefix is; None when the model is too big to
    bisect, has no main-graph nodes, or no prefix short of the whole model is refused and
    the last node's own prefix runs (the refusal is then about the model, not a node)."""
    count = len(model.graph.node)
    if not 0 < count <= BISECT_MAX_NODES:
        return None
    types = _inferred_types(model)
    lo, hi = 0, count  # prefix(lo) runs (the empty one, by definition), prefix(hi) refused
    refusal, steps = None, 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        steps += 1
        answer = target.confirmation(prefix_model(model, mid, types), base_dir).refusal
        if answer is not None:
            hi, refusal = mid, answer
        else:
            lo = mid
    if refusal is None:  # only the whole model was asked about: ask its own prefix (all)
        steps += 1
        refusal = target.confirmation(prefix_model(model, count, types), base_dir).refusal
        if refusal is None:
            return None
    return Bisection(hi - 1, refusal, steps)


def _inferred_types(model: ModelProto) -> dict[str, TypeProto]:
    """Value types from onnx's shape inference (non-strict), for the prefixes' outputs."""
    from onnx import shape_inference

    try:
        inferred = shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - untyped outputs are asked about as they are
        return {}
    return {v.name: v.type for v in inferred.graph.value_info}
