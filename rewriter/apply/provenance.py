"""Compact provenance: one table in the model's metadata; a created node's name is its key.

Before, every created node carried its plugin, rule and replaced op as three
``metadata_props`` (20 MB of a 48 MB model at 100k nodes); even one short entry per node
(``"p": "0"``, 8 bytes) would be ~9% of a created node. Now the model holds one table,
``metadata_props["rewriter.provenance"]``, a JSON object::

    {"rows": {KEY: [plugin, rule, op, version]},   # version: the replaced op's, or null
     "regions": {KEY: [BASE, ...]}}                # the regions each row made

and a node created for the region ``BASE`` (the replaced node's name, or its first output)
is named ``BASE/<op>_<k>``: its name leads to its row. A created node whose own stamp
differs from its region's (a nested remedy's node) carries its key as ``rewriter.p``.
Nodes stamped the long way (remedies onnx's inliner spliced, kernels) are read too
(:func:`stamp_of`).
"""

from __future__ import annotations

import json
import re

from onnx import GraphProto, ModelProto, NodeProto

from rewriter.graph.walk import subgraphs
from rewriter.plan.functions import PROVENANCE_OP, PROVENANCE_PLUGIN, PROVENANCE_RULE

TABLE_KEY = "rewriter.provenance"  # in the model's metadata_props
NODE_KEY = "rewriter.p"  # on a node whose row is not its region's
_LONG = (PROVENANCE_PLUGIN, PROVENANCE_RULE, PROVENANCE_OP)
_LABEL = re.compile(r"[A-Za-z0-9.]+_[0-9]+")  # the "<op>_<k>" a created name ends with


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if not n:
            return out


class ProvenanceTable:
    """One model's table: its rows and the regions each made (those it held already,
    and new ones)."""

    def __init__(self, rows: dict[str, list] | None = None,
                 regions: dict[str, list[str]] | None = None,
                 versions: dict[str, int | None] | None = None) -> None:
        self.rows: dict[str, list] = dict(rows or {})
        self.regions: dict[str, list[str]] = {k: list(v) for k, v in (regions or {}).items()}
        self._keys = {tuple(v[:3]): k for k, v in self.rows.items()}
        self.versions = dict(versions or {})  # op label -> since-version of the replaced op
        self._by_region: dict[str, str] | None = None

    @classmethod
    def of(cls, model: ModelProto, versions: dict[str, int | None] | None = None
           ) -> ProvenanceTable:
        table = read_table(model)
        table.versions = dict(versions or {})
        return table

    def key(self, plugin: str, rule: str, op: str) -> str:
        found = self._keys.get((plugin, rule, op))
        if found is None:
            found = _base36(len(self.rows))
            while found in self.rows:
                found += "_"
            self.rows[found] = [plugin, rule, op, self.versions.get(op)]
            self._keys[(plugin, rule, op)] = found
        return found

    def long_stamp_key(self, node: NodeProto) -> str | None:
        """The row of ``node``'s long stamp (None if it has none)."""
        props = {p.key: p.value for p in node.metadata_props}
        if PROVENANCE_RULE not in props:
            return None
        return self.key(props.get(PROVENANCE_PLUGIN, "?"), props[PROVENANCE_RULE],
                        props.get(PROVENANCE_OP, ""))

    def restamp(self, node: NodeProto, region_key: str | None) -> None:
        """Replace ``node``'s long stamp: by nothing when it is its region's row (the name
        says it), else by its short key."""
        key = self.long_stamp_key(node)
        if key is None:
            return
        kept = [(p.key, p.value) for p in node.metadata_props if p.key not in _LONG]
        if key != region_key:
            kept.append((NODE_KEY, key))
        del node.metadata_props[:]
        for k, v in kept:
            node.metadata_props.add(key=k, value=v)

    def add_region(self, key: str, base: str) -> None:
        self.regions.setdefault(key, []).append(base)
        self._by_region = None

    def row_of_region(self, base: str) -> list | None:
        if self._by_region is None:
            self._by_region = {}
            for key, bases in self.regions.items():
                for b in bases:
                    self._by_region.setdefault(b, key)
        key = self._by_region.get(base)
        return self.rows.get(key) if key is not None else None

    def write(self, model: ModelProto) -> None:
        """Store the table in ``model``'s metadata (replacing an earlier one)."""
        if not self.rows:
            return
        _drop_entry(model, TABLE_KEY)
        value = json.dumps({"rows": self.rows, "regions": self.regions},
                           separators=(",", ":"))
        model.metadata_props.add(key=TABLE_KEY, value=value)


def read_table(model: ModelProto) -> ProvenanceTable:
    """The model's provenance table (empty if none, or unreadable)."""
    for p in model.metadata_props:
        if p.key == TABLE_KEY:
            try:
                data = json.loads(p.value)
            except ValueError:
                break
            if isinstance(data, dict):
                return ProvenanceTable(data.get("rows") or {}, data.get("regions") or {})
    return ProvenanceTable()


def stamp_of(node: NodeProto, table: ProvenanceTable | None
             ) -> tuple[str, str, str] | None:
    """``(plugin, rule, op)`` of a created node: from its short key, its name
    (``BASE/<op>_<k>`` of a region in the table) or its long stamp; None for a node the
    rewrite did not create."""
    props = {p.key: p.value for p in node.metadata_props} if node.metadata_props else {}
    row = None
    if table is not None and table.rows:
        key = props.get(NODE_KEY)
        if key is not None:
            row = table.rows.get(key)
        elif "/" in node.name:
            base, _, label = node.name.rpartition("/")
            if _LABEL.fullmatch(label):
                row = table.row_of_region(base)
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
