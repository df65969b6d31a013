"""Compact provenance: one table in the model's metadata, a short key on each created node.

Before, every created node carried its plugin, rule and replaced op as three
``metadata_props`` (20 MB of a 48 MB model at 100k nodes). Now the model holds one table,
``metadata_props["rewriter.provenance"]``: a JSON object from key to ``[plugin, rule, op,
version]`` (``version``: the replaced op's since-version, or null), and each created node
one entry ``rewriter.p`` = its key (base 36). Nodes stamped the long way (remedies the
inliner spliced, kernels) are still read (:func:`stamp_of`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from onnx import GraphProto, ModelProto, NodeProto

from rewriter.graph.walk import subgraphs
from rewriter.plan.functions import PROVENANCE_OP, PROVENANCE_PLUGIN, PROVENANCE_RULE

TABLE_KEY = "rewriter.provenance"  # in the model's metadata_props
NODE_KEY = "rewriter.p"  # on a node: its row of the table
_LONG = (PROVENANCE_PLUGIN, PROVENANCE_RULE, PROVENANCE_OP)


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if not n:
            return out


class ProvenanceTable:
    """The rows of one model's table (those it held already, and new ones)."""

    def __init__(self, rows: Mapping[str, list] | None = None,
                 versions: Mapping[str, int | None] | None = None) -> None:
        self.rows: dict[str, list] = dict(rows or {})
        self._keys = {tuple(v[:3]): k for k, v in self.rows.items()}
        self.versions = dict(versions or {})  # op label -> since-version of the replaced op

    @classmethod
    def of(cls, model: ModelProto, versions: Mapping[str, int | None] | None = None
           ) -> ProvenanceTable:
        return cls(read_table(model), versions)

    def key(self, plugin: str, rule: str, op: str) -> str:
        found = self._keys.get((plugin, rule, op))
        if found is None:
            found = _base36(len(self.rows))
            while found in self.rows:
                found += "_"
            self.rows[found] = [plugin, rule, op, self.versions.get(op)]
            self._keys[(plugin, rule, op)] = found
        return found

    def restamp(self, node: NodeProto) -> None:
        """Replace ``node``'s long stamp (three metadata_props) by its short key."""
        props = {p.key: p.value for p in node.metadata_props}
        if PROVENANCE_RULE not in props:
            return
        key = self.key(props.get(PROVENANCE_PLUGIN, "?"), props[PROVENANCE_RULE],
                       props.get(PROVENANCE_OP, ""))
        kept = [(p.key, p.value) for p in node.metadata_props if p.key not in _LONG]
        del node.metadata_props[:]
        for k, v in [*kept, (NODE_KEY, key)]:
            node.metadata_props.add(key=k, value=v)

    def write(self, model: ModelProto) -> None:
        """Store the table in ``model``'s metadata (replacing an earlier one)."""
        if not self.rows:
            return
        _drop_entry(model, TABLE_KEY)
        model.metadata_props.add(key=TABLE_KEY,
                                 value=json.dumps(self.rows, separators=(",", ":")))


def read_table(model: ModelProto) -> dict[str, list]:
    """The model's provenance table ({} if none, or unreadable)."""
    for p in model.metadata_props:
        if p.key == TABLE_KEY:
            try:
                rows = json.loads(p.value)
            except ValueError:
                return {}
            return rows if isinstance(rows, dict) else {}
    return {}


def stamp_of(node: NodeProto, table: Mapping[str, list]) -> tuple[str, str, str] | None:
    """``(plugin, rule, op)`` of a created node, from its short key or its long stamp."""
    props = {p.key: p.value for p in node.metadata_props}
    key = props.get(NODE_KEY)
    if key is not None:
        row = table.get(key)
        if row:
            return str(row[0]), str(row[1]), str(row[2])
    if PROVENANCE_RULE in props:
        return (props.get(PROVENANCE_PLUGIN, "?"), props[PROVENANCE_RULE],
                props.get(PROVENANCE_OP, ""))
    return None


def strip_provenance(model: ModelProto) -> int:
    """Remove every provenance entry (table, short keys, long stamps) from ``model``, in
    place. Returns the number of nodes that had one."""
    _drop_entry(model, TABLE_KEY)
    drop = {NODE_KEY, *_LONG}
    count = 0
    graphs: list[GraphProto] = [model.graph]
    node_lists = [f.node for f in model.functions]
    while graphs or node_lists:
        nodes = graphs.pop().node if graphs else node_lists.pop()
        for node in nodes:
            if node.metadata_props:
                kept = [(p.key, p.value) for p in node.metadata_props if p.key not in drop]
                if len(kept) != len(node.metadata_props):
                    count += 1
                    del node.metadata_props[:]
                    for k, v in kept:
                        node.metadata_props.add(key=k, value=v)
            if node.attribute:
                graphs.extend(g for _, g in subgraphs(node))
    return count


def _drop_entry(model: ModelProto, key: str) -> None:
    kept = [p for p in model.metadata_props if p.key != key]
    if len(kept) != len(model.metadata_props):
        del model.metadata_props[:]
        model.metadata_props.extend(kept)
