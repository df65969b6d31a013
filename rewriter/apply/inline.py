"""Splice simple remedy bodies straight into a graph at the protobuf level.

onnx's C++ inliner serializes the whole model, parses it, inlines and serializes it back
(two round trips of every node, ~6 s at 100k nodes). A *simple* body (no subgraphs, no call
of another function, every output made by one of its nodes) needs none of that: each call
is replaced by the body's nodes with their values renamed, encoded as protobuf bytes, and
the graph's node list is parsed back from bytes once. Other bodies, and calls inside
model-local functions, are left to the inliner (:func:`rewriter.plan.functions.splice`).

Created nodes are named ``<call's node name>/<op>_<k>`` (at most :data:`MAX_NAME` chars;
the call's first output stands in for a missing name), which leads to their provenance
(:mod:`rewriter.apply.provenance`); their internal values are ``<call's first output>/<body
value name>``, made unique against the names the graph already defines.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field

from onnx import AttributeProto, FunctionProto, GraphProto, NodeProto

from rewriter.apply.provenance import ProvenanceTable
from rewriter.detect.walker import SplicedPositions

MAX_NAME = 80  # longest node name the splice creates


@dataclass
class Template:
    """A simple body prepared once per function: its nodes stamped with a provenance key,
    and what each call has to rename or bind, as slots of a per-call table of encoded
    fields (see :func:`_created`)."""

    function: FunctionProto
    bodies: list[tuple[tuple[str, ...], tuple[str, ...], bytes]]  # inputs, outputs, rest
    labels: list[str]  # "<op>_<k>": the suffix of each created node's name
    refs: list[tuple[int, str, str]]  # (node, attribute, function attribute it refers to)
    key: str | None  # its row of the provenance table (the function's own stamp)
    outputs: frozenset[str]  # the values the body's nodes define
    # the body nodes that make one of the function's outputs (or none at all): the ones a
    # re-check of the spliced graph visits (splice_graph's ``visit``)
    output_nodes: tuple[int, ...] = ()
    # The per-call table: [input field, output field] of each value of the body (in
    # ``values`` order), then each node's pre-encoded rest. ``fields``: per body node, the
    # table slots making its inputs, outputs and rest, in order.
    values: tuple[str, ...] = ()
    table: tuple[bytes | None, ...] = ()
    fields: tuple[tuple[int, ...], ...] = ()
    bind_inputs: tuple[tuple[int, int], ...] = ()  # (call input position, value index)
    bind_outputs: tuple[tuple[int, int], ...] = ()  # (call output position, value index)
    internal: tuple[int, ...] = ()  # value indices of the body's own values
    room: int = MAX_NAME  # longest region base that keeps every created name in MAX_NAME
    suffixes: tuple[bytes, ...] = ()  # b"/<op>_<k>" of each created node
    defaults: dict = field(default_factory=dict)  # function attribute -> its default
    plain: bool = False  # no value name of the body holds "/" (see splice_graph's per_call)


def simple_body(fn: FunctionProto, remedy_domain: str) -> bool:
    """Whether ``fn`` can be spliced directly: nodes with no subgraph, no call of another
    remedy, every value defined once, every output defined by a node."""
    if not fn.node:
        return False
    defined: set[str] = set(fn.input)
    for node in fn.node:
        if node.domain == remedy_domain:
            return False
        for a in node.attribute:
            if a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
                return False
        for name in node.input:
            if name and name not in defined:
                return False
        for name in node.output:
            if name in defined:
                return False
            if name:
                defined.add(name)
    produced = {o for node in fn.node for o in node.output if o}
    return all(o in produced for o in fn.output)


def template(fn: FunctionProto, table: ProvenanceTable) -> Template:
    """Prepare ``fn`` (a simple body) for :func:`splice_graph`: each node's inputs, outputs
    and the rest of it serialized (provenance key in, name, inputs, outputs and attributes
    referring to the function's left out)."""
    bodies, labels, refs = [], [], []
    counts: dict[str, int] = {}
    keys = [table.long_stamp_key(node) for node in fn.node]
    key = max(set(keys) - {None}, key=keys.count, default=None)  # the body's own rule
    for i, body_node in enumerate(fn.node):
        node = NodeProto()
        node.CopyFrom(body_node)
        table.restamp(node, key)
        k = counts.get(node.op_type, 0)
        counts[node.op_type] = k + 1
        labels.append(f"{node.op_type}_{k}")
        kept = []
        for a in node.attribute:
            if a.ref_attr_name:
                refs.append((i, a.name, a.ref_attr_name))
            else:
                kept.append(a)
        if len(kept) != len(node.attribute):
            del node.attribute[:]
            node.attribute.extend(kept)
        ins, outs = tuple(node.input), tuple(node.output)
        for name in ("input", "output", "name"):
            node.ClearField(name)
        bodies.append((ins, outs, node.SerializeToString()))
    outputs = frozenset(o for node in fn.node for o in node.output if o)
    results = set(fn.output)
    output_nodes = tuple(j for j, node in enumerate(fn.node)
                         if not any(node.output) or not results.isdisjoint(node.output))
    # the per-call table: "" first, then the function's inputs, outputs and own values
    values = tuple(dict.fromkeys(["", *fn.input, *fn.output, *sorted(outputs - results)]))
    index = {name: k for k, name in enumerate(values)}
    table: list[bytes | None] = [None] * (2 * len(values))
    table[0], table[1] = _INPUT + b"\x00", _OUTPUT + b"\x00"
    fields = []
    for ins, outs, rest in bodies:
        table.append(rest)
        fields.append(tuple([2 * index[n] for n in ins] + [2 * index[n] + 1 for n in outs]
                            + [len(table) - 1]))
    bind_inputs = tuple((p, index[n]) for p, n in enumerate(fn.input) if n)
    bind_outputs = tuple((p, index[n]) for p, n in enumerate(fn.output) if n)
    bound = {k for _, k in bind_inputs}
    internal = tuple(k for k, n in enumerate(values) if n and k not in bound
                     and n in outputs and n not in results)
    room = MAX_NAME - max(len(label) for label in labels) - 1
    return Template(fn, bodies, labels, refs, key, outputs, output_nodes, values,
                    tuple(table), tuple(fields), bind_inputs, bind_outputs, internal, room,
                    tuple(f"/{label}".encode() for label in labels),
                    {a.name: a for a in fn.attribute_proto},
                    not any("/" in v for v in values))


def region_base(name: str, labels: Iterable[str]) -> str:
    """``name`` cut so that ``name/label`` stays within :data:`MAX_NAME` characters for
    every label: a cut name ends with ``~`` and 8 hex digits of the whole name's hash, so
    two long names sharing a prefix stay two names (onnxruntime refuses a graph with two
    nodes of one name)."""
    return _cut(name, MAX_NAME - max(len(label) for label in labels) - 1)


def _cut(name: str, room: int) -> str:
    if len(name) > room:
        digest = hashlib.blake2s(name.encode("utf-8", "surrogatepass"),
                                 digest_size=4).hexdigest()
        name = name[:max(room - 9, 0)] + "~" + digest
    return name


def splice_graph(graph: GraphProto, templates: Mapping[str, Template], domain: str,
                 taken: Names, table: ProvenanceTable,
                 visit: SplicedPositions | None = None,
                 calls: Mapping[int, str] | None = None, *, into: GraphProto | None = None,
                 adjust: Callable[[NodeProto], NodeProto] | None = None,
                 per_call: bool = False) -> int:
    """Replace every node of ``graph`` calling ``domain:<name>`` with a template by the
    template's nodes, in place; ``taken``: the value names defined anywhere in the model
    (grown with the new ones). Returns the number of calls replaced. ``visit``: filled with
    the new positions, in order, of the nodes kept (and, of those, the ones with attributes
    or without outputs) and of the created nodes that make a call's outputs (what a
    re-check has to look at: the rest are body nodes the plan proved). ``calls``: the
    calls by node identity (``id`` of the NodeProto, alive) -> template name, for nodes
    left as they were (not retargeted at ``domain``). ``into``: the graph (without nodes)
    the new node list goes to, ``graph`` being left as it is; ``adjust``: called with each
    kept node that has attributes, returns the node to write in its place (itself, or a
    changed copy). ``per_call``: no two calls share an output, so a call's new names,
    "<its first output>/<body value>" with body values free of "/", cannot meet another
    call's and are remembered for the call only, not added to ``taken`` (250k names, ~25
    MiB, at 300k nodes): a later splice must read the graph's names again.

    The graph's node list is written as protobuf bytes (each kept node serialized, each
    created node encoded from its template's pre-encoded bytes) and parsed back once: a
    created node costs a few byte joins instead of a dozen protobuf field writes. NodeProto
    objects of the old list stay valid (detached)."""
    nodes = graph.node
    if into is not None:
        pass  # the node list is written whatever it holds
    elif calls is not None:
        if calls.keys().isdisjoint(map(id, nodes)):
            return 0
    elif not any(node.domain == domain and node.op_type in templates for node in nodes):
        return 0
    # the new node list's bytes, grown in place (a list of 240k small bytes objects would
    # stay in the allocator's pools, part of the peak, after being freed)
    buffer = bytearray()
    put = buffer.extend
    kept, made, holders = ((visit.kept.append, visit.made.extend, visit.holders.append)
                           if visit is not None else (None, None, None))
    encoded: dict[str, bytes] = {}
    count = 0
    at = 0  # the position in the new node list
    for node in nodes:
        if calls is not None:
            name = calls.get(id(node))
            t = templates[name] if name is not None else None
        else:
            t = templates.get(node.op_type) if node.domain == domain else None
        if t is None:
            attributed = bool(node.attribute)
            data = (adjust(node) if adjust is not None and attributed
                    else node).SerializeToString()
            put(_NODE_TAG + _varint(len(data)) + data)
            if kept is not None:
                kept(at)
                if attributed or not node.output:
                    holders(at)
            at += 1
            continue
        count += 1
        created = _created(node, t, taken, encoded, table, per_call)
        for data in created:
            put(_NODE_TAG + _varint(len(data)) + data)
        if made is not None:
            made([at + j for j in t.output_nodes])
        at += len(created)
    encoded.clear()  # (before the parse: the peak of a big splice)
    if into is None:
        del nodes[:]
    (graph if into is None else into).MergeFromString(buffer)
    return count


_NODE_TAG = b"\x0a"  # GraphProto.node = 1, length-delimited
_INPUT, _OUTPUT, _NAME = b"\x0a", b"\x12", b"\x1a"  # NodeProto fields 1, 2, 3
_ATTRIBUTE = b"\x2a"  # NodeProto.attribute = 5


def _varint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _string(s: str, encoded: dict[str, bytes]) -> bytes:
    """Length prefix and UTF-8 bytes of ``s`` (memoized: values recur across nodes)."""
    b = encoded.get(s)
    if b is None:
        raw = s.encode()
        b = encoded[s] = _varint(len(raw)) + raw
    return b


def _encoded(s: str) -> bytes:
    """Length prefix and UTF-8 bytes of ``s``."""
    raw = s.encode()
    return _varint(len(raw)) + raw


def _created(call: NodeProto, t: Template, taken: Names, encoded: dict[str, bytes],
             table: ProvenanceTable, per_call: bool = False) -> list[bytes]:
    """The serialized nodes replacing ``call``: the template's table of encoded fields with
    this call's values filled in, each node the join of its slots and its name."""
    call_inputs, call_outputs = call.input, call.output
    n_in, n_out = len(call_inputs), len(call_outputs)
    fields = list(t.table)
    for p, k in t.bind_inputs:
        s = _string(call_inputs[p] if p < n_in else "", encoded)
        fields[2 * k], fields[2 * k + 1] = _INPUT + s, _OUTPUT + s
    base_value = next((o for o in call_outputs if o), None)
    own = None  # the call's new names, when no other call's can meet them
    if base_value is None:
        base_value = call.name or call.op_type
    elif per_call and t.plain:
        own = set()
    values = t.values
    for p, k in t.bind_outputs:
        name = call_outputs[p] if p < n_out else ""
        s = (_string(name, encoded) if name  # (an output the call leaves out: its own value)
             else _encoded(_fresh(f"{base_value}/{values[k]}", taken, own)))
        fields[2 * k], fields[2 * k + 1] = _INPUT + s, _OUTPUT + s
    for k in t.internal:  # (made unique: not memoized)
        s = _encoded(_fresh(f"{base_value}/{values[k]}", taken, own))
        fields[2 * k], fields[2 * k + 1] = _INPUT + s, _OUTPUT + s
    base_name = _cut(call.name or base_value, t.room)
    if t.key is not None:
        table.add_region(t.key, base_name)
    base = base_name.encode()
    bound = _bound_attributes(call, t) if t.refs else None
    get = fields.__getitem__
    out = []
    for j, (slots, suffix) in enumerate(zip(t.fields, t.suffixes)):
        name = base + suffix
        data = b"".join(map(get, slots)) + _NAME + _varint(len(name)) + name
        if bound is not None and j in bound:
            data += b"".join(bound[j])
        out.append(data)
    return out


def _bound_attributes(call: NodeProto, t: Template) -> dict[int, list[bytes]]:
    """Per body node, its attributes that refer to the function's, bound to the call's
    values or the function's defaults (an attribute neither sets is left out, as ONNX
    specifies)."""
    given = {a.name: a for a in call.attribute}
    out: dict[int, list[bytes]] = {}
    for j, attr_name, ref in t.refs:
        value = given.get(ref)
        if value is None:
            value = t.defaults.get(ref)
            if value is None:
                continue
        attr = AttributeProto()
        attr.CopyFrom(value)
        attr.name = attr_name
        data = attr.SerializeToString()
        out.setdefault(j, []).append(_ATTRIBUTE + _varint(len(data)) + data)
    return out


def _fresh(name: str, taken: Names, own: set[str] | None = None) -> str:
    """``name``, or ``name_<k>`` for the first k not in ``taken`` nor ``own``; kept in
    ``own`` when given (one call's names, see :func:`splice_graph`), else in ``taken``."""
    if type(taken) is TakenNames:
        return taken.fresh(name, own)
    candidate, k = name, 0
    while candidate in taken or (own is not None and candidate in own):
        k += 1
        candidate = f"{name}_{k}"
    (taken if own is None else own).add(candidate)
    return candidate


class TakenNames:
    """The value names a model defines, as the union of sets the caller has already (e.g.
    detection's) without copying them (a copy of ~1M names costs ~60 MiB at 300k nodes);
    what is added (new names, :meth:`fresh`; a subgraph's, :meth:`update`) goes to a set of
    its own."""

    __slots__ = ("bases", "added")

    def __init__(self, *bases: Collection[str]) -> None:
        self.bases = bases
        self.added: set[str] = set()

    def fresh(self, name: str, own: set[str] | None = None) -> str:
        """``name``, or ``name_<k>`` for the first k that is not taken; taken from now on
        (:func:`_fresh`, with the lookups inline: the splice asks once per created value).
        ``own``: one call's names, when they cannot meet another call's (see
        :func:`splice_graph`'s ``per_call``): looked in as well, and the new name kept there."""
        added, bases = self.added, self.bases
        keep = added if own is None else own
        candidate, k = name, 0
        while True:
            if candidate not in added and (own is None or candidate not in own):
                for base in bases:
                    if candidate in base:
                        break
                else:
                    keep.add(candidate)
                    return candidate
            k += 1
            candidate = f"{name}_{k}"

    def update(self, names: Iterable[str]) -> None:
        self.added.update(names)


Names = set[str] | TakenNames  # the value names a splice must not reuse (grown with its own)


def defined_names(graphs: Iterable[GraphProto]) -> set[str]:
    """Every value name the graphs define (inputs, initializers, node outputs)."""
    names: set[str] = set()
    for g in graphs:
        names.update(v.name for v in g.input)
        names.update(t.name for t in g.initializer)
        for node in g.node:
            names.update(node.output)
    return names
