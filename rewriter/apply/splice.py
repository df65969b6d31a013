"""Apply: retarget the nodes whose remedy is a kernel, splice the decomposition functions in
(simple bodies at the protobuf level, the rest with onnx's inliner), and remove what the
rewrite left unused."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from onnx import AttributeProto, FunctionProto, GraphProto, ModelProto, NodeProto

from rewriter.apply.inline import (
    Names,
    Template,
    defined_names,
    simple_body,
    splice_graph,
    template,
)
from rewriter.apply.provenance import ProvenanceTable
from rewriter.detect.targets import Finding
from rewriter.detect.walker import SplicedPositions
from rewriter.graph.walk import (
    iter_scopes,
    main_node_index,
    normalize_domain,
    opset_map,
    subgraphs,
)
from rewriter.plan.functions import REMEDY_DOMAIN, retarget, specialise, splice
from rewriter.plan.passes import PassContext
from rewriter.plan.planner import LazyConstants, Planner, replaced_op


@dataclass
class Region:
    """One remedy function as spliced: the function, a call to it (a copy of the first
    node retargeted to it) and that node's finding. Verification checks it alone."""

    function: FunctionProto
    call: NodeProto
    finding: Finding

def apply_kernels(
    model: ModelProto, findings: list[Finding], planner: Planner, ctx: PassContext
) -> set[int]:
    """Retarget, in place, every node whose chosen remedy is a kernel; record what the model
    needs in its metadata. Returns the ids of the nodes changed."""
    from rewriter.plan.kernels import Needs, write_needs

    constants = LazyConstants(model)
    needs = Needs()
    changed: dict[int, Any] = {}
    for f in findings:
        if f.node is None or id(f.node) in changed:
            continue
        choice = planner.chosen(f, constants)
        if choice is None or choice.kind != "kernel":
            continue
        remedy = choice.kernel
        changed[id(f.node)] = (f.node, remedy)
        ctx.record("kernel", choice.plugin, choice.rule, f.op_label)
        if remedy.kind == "python":
            needs.python[remedy.use.op_name] = remedy.use
        else:
            needs.native[remedy.use.key] = remedy.use
    # retarget after every choice is made: plans are keyed by the node as it was. A plan is
    # shared by every node of its signature: the remedy's node gives the op, domain,
    # attributes and provenance, each node keeps its own name, inputs and outputs
    for node, remedy in changed.values():
        name, inputs, outputs = node.name, list(node.input), list(node.output)
        node.CopyFrom(remedy.node)
        node.name = name
        node.input[:] = inputs
        node.output[:] = outputs
        while node.input and not node.input[-1]:  # optional inputs left out: a kernel
            node.input.pop()  # takes its inputs without gaps, and none beyond its own
    if not changed:
        return set()
    domains = {node.domain for node, _ in changed.values()}
    for container in [model, *[fn for fn in model.functions
                               if any(id(n) in changed for n in fn.node)]]:
        have = opset_map(container.opset_import)
        for domain in sorted(domains):
            if normalize_domain(domain) not in have:
                entry = container.opset_import.add()
                entry.domain, entry.version = domain, 1
    write_needs(model, needs)
    return set(changed)

def apply_decompositions(
    model: ModelProto, findings: list[Finding], planner: Planner, ctx: PassContext,
    skip: set[int] | frozenset = frozenset(), regions: dict[str, Region] | None = None,
    taken: Names | None = None, visit: SplicedPositions | None = None,
) -> tuple[ModelProto, bool]:
    """Retarget every node with an accepted decomposition, then splice them all at once:
    simple bodies directly (:func:`splice_simple`), the rest with onnx's inliner.
    ``regions``: filled with one :class:`Region` per remedy function; ``taken``: every
    value name the model defines, when the caller knows them (else they are read);
    ``visit``: filled as :func:`~rewriter.apply.inline.splice_graph` fills it for the main
    graph when every call was spliced there (left empty otherwise)."""
    functions, chosen, _ = _remedy_calls(model, findings, planner, skip)
    if not functions:
        return model, False
    # Calls of simple bodies are found by the node's identity and spliced as they are;
    # the others are retargeted at their function for onnx's inliner. Identity needs
    # protobuf's upb wrappers (one per message while alive) and no model-local function
    # (a call inside one is the inliner's).
    by_identity = not model.functions and _stable_wrappers()
    direct = {name: by_identity and simple_body(fn, REMEDY_DOMAIN)
              for name, fn in functions.items()}
    calls, produced, _ = _take(chosen, functions, direct, ctx, regions)
    _import_domains(model, functions.values())
    forget_shapes(model, produced)
    left = splice_simple(model, functions, findings, taken, visit, calls if calls else None)
    if not left:
        return model, True
    if visit is not None:
        visit.clear()  # the inliner renumbers the nodes
    for local in model.functions:  # calls may sit inside model-local functions
        if not any(normalize_domain(o.domain) == REMEDY_DOMAIN for o in local.opset_import):
            entry = local.opset_import.add()
            entry.domain, entry.version = REMEDY_DOMAIN, 1
    return splice(model, left), True


def splice_into_new(
    model: ModelProto, findings: list[Finding], planner: Planner, ctx: PassContext,
    regions: dict[str, Region] | None = None, taken: Names | None = None,
    visit: SplicedPositions | None = None, before_splice: Callable[[], Any] | None = None,
) -> ModelProto | None:
    """:func:`apply_decompositions` into a new model, ``model`` left as it is (no working
    copy of its nodes): when every accepted remedy is a decomposition whose body is simple
    (spliced by identity from its function's bytes) and the model has no local function.
    The new model is the spliced node list, then every other field of ``model``; a node
    holding subgraphs with calls (or with stale declared shapes) is
    written as a changed copy. None, with nothing done, when a remedy needs more (a
    kernel, a body that is not simple, the inliner): the caller changes a copy instead.
    ``before_splice``: called once it is known that the splice goes ahead, before it."""
    if model.functions or not _stable_wrappers():
        return None
    functions, chosen, kernels = _remedy_calls(model, findings, planner, frozenset())
    if kernels or not functions or not all(simple_body(fn, REMEDY_DOMAIN)
                                           for fn in functions.values()):
        return None
    if before_splice is not None:
        before_splice()
    calls, produced, distinct = _take(chosen, functions, dict.fromkeys(functions, True), ctx,
                                      regions)
    result = ModelProto()
    table, templates = _templates(model, functions, findings)
    if taken is None:
        taken = defined_names([model.graph])
    done = 0

    def adjust(node: NodeProto) -> NodeProto:
        # a holder of subgraphs with calls or with declarations of replaced values: a copy,
        # spliced and cleared innermost first (an outer splice re-reads its nodes)
        nonlocal done
        graphs = _nested_graphs(node)
        if not graphs or not any(
                not calls.keys().isdisjoint(map(id, g.node))
                or any(v.name in produced for v in g.value_info) for g in graphs):
            return node
        copy = NodeProto()
        copy.CopyFrom(node)
        copies = _nested_graphs(copy)
        taken.update(defined_names(graphs))
        for original, g in reversed(list(zip(graphs, copies, strict=True))):
            alive = list(g.node)  # (the keys below are their ids: kept alive meanwhile)
            here = {id(c): calls[id(o)] for o, c in zip(original.node, alive)
                    if id(o) in calls}
            if here:
                done += splice_graph(g, templates, REMEDY_DOMAIN, taken, table, calls=here,
                                     per_call=distinct)
            del alive
            _forget_shapes_in(g, produced)
        return copy

    main = splice_graph(model.graph, templates, REMEDY_DOMAIN, taken, table, visit, calls,
                        into=result.graph, adjust=adjust, per_call=distinct)  # (adjust: done)
    if done + main != len(calls):
        raise AssertionError(f"the splice found {done + main} of {len(calls)} calls by "
                             "identity")
    calls = chosen = None  # (before the copy of the other fields: the peak of a big splice)
    # the other fields after the nodes: the splice's buffer is gone by then
    _copy_fields(model, result, "graph")
    _copy_fields(model.graph, result.graph, "node")
    _import_domains(result, functions.values())
    _forget_shapes_in(result.graph, produced)  # (subgraphs': in their holders, above)
    table.write(result)
    return result


def _templates(model: ModelProto, functions: dict[str, FunctionProto],
               findings: list[Finding]) -> tuple[ProvenanceTable, dict[str, Template]]:
    """The model's provenance table, with the replaced ops' versions, and the splice
    template of each simple body among ``functions``, by name."""
    ops = {(f.domain, f.op_type): f for f in findings}  # one str(OpId) per op, not finding
    table = ProvenanceTable.of(model, {replaced_op(f): f.version for f in ops.values()})
    return table, {name: template(fn, table) for name, fn in functions.items()
                   if simple_body(fn, REMEDY_DOMAIN)}


def _remedy_calls(model: ModelProto, findings: list[Finding], planner: Planner,
                  skip: set[int] | frozenset) -> tuple[dict[str, FunctionProto], list, bool]:
    """The accepted decompositions' functions (specialised once each, by name) and each
    finding's node taking one, once: ``(finding, function name, choice)``; and whether a
    finding's remedy is a kernel. Nothing is changed."""
    constants = LazyConstants(model)
    functions: dict[str, FunctionProto] = {}
    chosen: list[tuple[Finding, str, Any]] = []
    seen: set[int] = set(skip)  # nodes already given a kernel
    kernels = False
    for f in findings:
        if f.node is None or id(f.node) in seen:
            continue
        seen.add(id(f.node))
        choice = planner.chosen(f, constants)
        if choice is None or choice.kind != "decomposition":
            kernels = kernels or (choice is not None and choice.kind == "kernel")
            continue
        name = planner.function_name(f)
        if name not in functions:
            functions[name] = specialise(
                choice.function, name, dict(f.scope_opsets or {}), choice.plugin, choice.rule,
                replaced_op(f),
            )
        chosen.append((f, name, choice))
    outer = _outermost(chosen)
    if len(outer) < len(chosen):
        used = {name for _, name, _ in outer}
        functions = {name: fn for name, fn in functions.items() if name in used}
    return functions, outer, kernels


def _outermost(chosen: list) -> list:
    """``chosen`` without the calls inside a subgraph of another call: the outer node's body
    takes its subgraphs with it (a Scan lowered to a Loop), so an inner call spliced in
    the same round would be spliced into a graph that is gone; the next round finds it
    again where the outer body put it."""
    holders = [f.path + "/" for f, _, _ in chosen if f.path and any(
        a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in f.node.attribute)]
    if not holders:
        return chosen
    prefixes = tuple(holders)
    return [c for c in chosen if not (c[0].path or "").startswith(prefixes)]


def _take(chosen: list, functions: dict[str, FunctionProto], direct: dict[str, bool],
          ctx: PassContext, regions: dict[str, Region] | None
          ) -> tuple[dict[int, str], set[str], bool]:
    """Record each chosen remedy in ``ctx`` and its function's first call in ``regions``;
    retarget the calls not spliced by identity (``direct``) at their function. Returns the
    others by node identity -> function name, the replaced nodes' outputs, and whether no
    two of them share an output (else the model is invalid)."""
    labels: dict[tuple, str] = {}
    calls: dict[int, str] = {}  # id(node) -> function name, for those
    produced: set[str] = set()  # outputs of the replaced nodes
    outputs = 0
    for f, name, choice in chosen:
        key = (f.domain, f.op_type, f.version)
        label = labels.get(key)
        if label is None:
            label = labels[key] = f.op_label  # (a str(OpId) per finding costs at 100k)
        ctx.record("decomposition", choice.plugin, choice.rule, label)
        for kind, plugin, rule, op_label in choice.nested:
            ctx.record(kind, plugin, rule, op_label)
        named = [o for o in f.node.output if o]
        produced.update(named)
        outputs += len(named)
        if direct[name]:
            calls[id(f.node)] = name
        else:
            retarget(f.node, functions[name])
        if regions is not None and name not in regions:
            call = NodeProto()
            call.CopyFrom(f.node)
            if direct[name]:
                retarget(call, functions[name])
            regions[name] = Region(functions[name], call, f)
    return calls, produced, len(produced) == outputs


def _nested_graphs(node: NodeProto) -> list[GraphProto]:
    """Every graph ``node`` holds, at any depth, parents before their subgraphs."""
    out: list[GraphProto] = []
    stack = [node]
    while stack:
        for _, g in subgraphs(stack.pop()):
            out.append(g)
            stack.extend(n for n in g.node if n.attribute)
    return out


def _copy_fields(source, dest, skip: str) -> None:
    """Every field ``source`` sets but ``skip``, copied to ``dest``."""
    for field_, value in source.ListFields():
        name = field_.name
        if name == skip:
            continue
        if hasattr(value, "extend") and not isinstance(value, (str, bytes)):
            getattr(dest, name).extend(value)  # repeated
        elif hasattr(value, "CopyFrom"):
            getattr(dest, name).CopyFrom(value)
        else:
            setattr(dest, name, value)


def splice_simple(model: ModelProto, functions: dict[str, FunctionProto],
                  findings: list[Finding], taken: Names | None = None,
                  visit: SplicedPositions | None = None, calls: dict[int, str] | None = None,
                  ) -> list[FunctionProto]:
    """Splice the simple bodies (:mod:`rewriter.apply.inline`) into the main graph and its
    subgraphs at the protobuf level, the created nodes named after the replaced ones, as the
    provenance table lists them (:mod:`rewriter.apply.provenance`). Returns the functions
    left for onnx's inliner (bodies that are not simple, and those still called from
    model-local functions). ``visit``: as :func:`splice_graph` fills it, for the main
    graph. ``calls``: the calls of simple bodies by node identity (left as they were, see
    :func:`splice_graph`); the others are found retargeted at their function."""
    table, templates = _templates(model, functions, findings)
    if not templates:
        return list(functions.values())
    if calls is not None:
        _splice_by_identity(model, templates, findings, calls, taken, table, visit)
        table.write(model)
        return [fn for name, fn in functions.items() if name not in templates]
    expected = len({id(f.node) for f in findings if f.node is not None
                    and f.node.domain == REMEDY_DOMAIN and f.node.op_type in templates})
    if taken is None:
        taken = defined_names([model.graph])
    done = splice_graph(model.graph, templates, REMEDY_DOMAIN, taken, table, visit)
    if done < expected:  # some calls sit in subgraphs
        subs = [s.graph for s in iter_scopes(model) if s.graph is not None
                and s.graph is not model.graph]
        taken.update(defined_names(subs))
        for g in subs:
            done += splice_graph(g, templates, REMEDY_DOMAIN, taken, table)
    table.write(model)
    left = [fn for name, fn in functions.items() if name not in templates]
    if done < expected or left:  # calls inside model-local functions: the inliner's
        called = {(n.domain, n.op_type) for f in model.functions for n in f.node}
        left += [fn for name, fn in functions.items()
                 if name in templates and (REMEDY_DOMAIN, name) in called]
    return left


def _stable_wrappers() -> bool:
    """Whether protobuf gives one Python object per message while it is alive (upb)."""
    from google.protobuf.internal import api_implementation

    return api_implementation.Type() == "upb"


def _splice_by_identity(model: ModelProto, templates: dict[str, Template],
                        findings: list[Finding], calls: dict[int, str],
                        taken: Names | None, table: ProvenanceTable,
                        visit: SplicedPositions | None) -> None:
    """:func:`splice_simple` for calls known by identity: the subgraphs holding some are
    found from their findings' paths (the main-graph node each starts at), before the main
    graph is spliced (which moves its nodes); every call must be found."""
    main = model.graph.node
    subs: dict[int, GraphProto] = {}
    for f in findings:
        if f.node is None or id(f.node) not in calls:
            continue
        i = main_node_index(f.path)
        if i is not None and i < len(main) and main[i] is f.node:
            continue  # in the main graph
        if i is None or i >= len(main):  # not where the path says: every subgraph
            subs.update((id(s.graph), s.graph) for s in iter_scopes(model)
                        if s.graph is not None and s.graph is not model.graph)
            break
        stack = [main[i]]
        while stack:
            for _, g in subgraphs(stack.pop()):
                subs[id(g)] = g
                stack.extend(n for n in g.node if n.attribute)
    if taken is None:
        taken = defined_names([model.graph])
    if subs:
        taken.update(defined_names(subs.values()))
    done = 0
    for g in subs.values():
        done += splice_graph(g, templates, REMEDY_DOMAIN, taken, table, calls=calls)
    done += splice_graph(model.graph, templates, REMEDY_DOMAIN, taken, table, visit, calls)
    if done != len(calls):
        raise AssertionError(f"the splice found {done} of {len(calls)} calls by identity")


def _import_domains(model: ModelProto, functions) -> None:
    """Add opset imports that the new nodes need and the model lacks."""
    have = opset_map(model.opset_import)
    for fn in functions:
        for entry in fn.opset_import:
            domain = normalize_domain(entry.domain)
            if domain not in have:
                new = model.opset_import.add()
                new.domain, new.version = entry.domain, entry.version
                have[domain] = entry.version

def _uses(model: ModelProto) -> tuple[set[str], set[tuple[str, str]]]:
    """The domains the model's nodes use, and the (domain, op_type) they call."""
    used_domains: set[str] = set()
    called: set[tuple[str, str]] = set()
    for scope in iter_scopes(model):
        for node in scope.nodes:
            used_domains.add(normalize_domain(node.domain))
            called.add((normalize_domain(node.domain), node.op_type))
    return used_domains, called

def _uses_of(counts: Counter) -> tuple[set[str], set[tuple[str, str]]]:
    """:func:`_uses` from :func:`rewriter.walk.op_counts`."""
    return {d for d, _ in counts}, set(counts)

def cleanup(model: ModelProto, original: ModelProto | None = None, *,
            counts: Counter | None = None, original_counts: Counter | None = None) -> bool:
    """Drop opset imports and model-local functions nothing uses any more. With
    ``original``, only those the rewrite left unused go: what the original already imported
    or defined without using is not the rewrite's business. ``counts`` and
    ``original_counts``: the models' :func:`~rewriter.walk.op_counts`, when known.
    Returns whether a function was dropped."""
    used_domains, called = _uses_of(counts) if counts is not None else _uses(model)
    if original is not None:
        before_domains, before_called = (_uses_of(original_counts)
                                         if original_counts is not None else _uses(original))
        used_domains |= {normalize_domain(o.domain) for o in original.opset_import
                         if normalize_domain(o.domain) not in before_domains}
        for f in original.functions:
            for entry in f.opset_import:
                if normalize_domain(entry.domain) not in before_domains:
                    used_domains.add(normalize_domain(entry.domain))
            if (normalize_domain(f.domain), f.name) not in before_called:
                called.add((normalize_domain(f.domain), f.name))
    kept = [f for f in model.functions if (normalize_domain(f.domain), f.name) in called]
    dropped = len(kept) != len(model.functions)
    if dropped:
        del model.functions[:]
        model.functions.extend(kept)
    for container in [model, *model.functions]:
        imports = [o for o in container.opset_import
                   if normalize_domain(o.domain) in used_domains | {""}]
        if len(imports) != len(container.opset_import):
            del container.opset_import[:]
            container.opset_import.extend(imports)
    return dropped


def forget_shapes(model: ModelProto, names: set[str]) -> None:
    """Clear the declared shapes (``value_info``) of ``names`` in every graph: a remedy now
    computes them, and a producer's declaration may be stale (onnxscript's fusions keep a
    rank-2 shape on a rank-3 ``MultiHeadAttention`` output), which strict shape inference
    then rejects. The element type stays; graph outputs keep their declarations."""
    if not names:
        return
    for scope in iter_scopes(model):
        if scope.graph is not None:
            _forget_shapes_in(scope.graph, names)


def _forget_shapes_in(graph: GraphProto, names: set[str]) -> None:
    """:func:`forget_shapes` in one graph."""
    for info in graph.value_info:
        if info.name in names and info.type.HasField("tensor_type"):
            info.type.tensor_type.ClearField("shape")
