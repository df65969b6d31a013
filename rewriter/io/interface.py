"""A model's interface as adapted by ``--adapt-interface``, and the one place that converts
values between the original interface and the adapted one.

A plugin that rewrites a graph output to a tensor a target takes records what the output
was in the model's ``metadata_props`` (key :data:`INTERFACE_KEY`), a JSON object::

    {"outputs": {"output_probability": {"adapter": "zipmap",
                                        "was": "seq(map(int64,tensor(float)))",
                                        "now": "tensor(float)", "labels": [0, 1, 2]},
                 "output_label": {"adapter": "labels", "was": "tensor(string)",
                                  "now": "tensor(int64)", "labels": ["ant", "bee"]}}}

* ``zipmap``: the output is the float tensor ``[N, C]`` ZipMap was fed; the original's
  ``N`` maps, each ``{labels[c]: row[c]}``.
* ``labels``: the output holds int64 indices into ``labels``; the original holds
  ``labels[index]`` (a string tensor of the same shape).

:func:`to_adapted` turns the original's outputs into the adapted form (the comparison of a
rewrite: :mod:`rewriter.comparison.compare`), :func:`to_original` the adapted model's back
into the original's (:func:`rewriter.session`, ``onnx-rewriter run``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from onnx import ModelProto

INTERFACE_KEY = "rewriter.interface"
ADAPTERS = ("zipmap", "labels")


class InterfaceError(ValueError):
    """Values that do not fit the recorded adaptation (one line)."""


@dataclass(frozen=True)
class Adaptation:
    """One graph output as the model has it now, and as its users had it."""

    name: str
    adapter: str  # one of ADAPTERS
    was: str  # the original type ("seq(map(int64,tensor(float)))")
    now: str  # the adapted type ("tensor(float)")
    labels: tuple = field(default=())

    def describe(self) -> str:
        """One line: what changed and where the rest went."""
        how = {"zipmap": f"the [N, {len(self.labels)}] probabilities ZipMap was fed",
               "labels": f"int64 indices into a table of {len(self.labels)} labels"}
        return (f"output {self.name!r} was {self.was}, is now {self.now} "
                f"({how[self.adapter]}; the labels are in the model's metadata "
                f"{INTERFACE_KEY!r})")

    def as_dict(self) -> dict[str, Any]:
        return {"adapter": self.adapter, "was": self.was, "now": self.now,
                "labels": list(self.labels)}

    def to_adapted(self, value: Any) -> np.ndarray:
        """The original's value of this output in the adapted form."""
        if self.adapter == "zipmap":
            if not isinstance(value, (list, tuple)) or \
                    not all(isinstance(m, Mapping) for m in value):
                raise InterfaceError(f"output {self.name!r}: expected a sequence of maps "
                                     f"(ZipMap's), got {type(value).__name__}")
            try:
                rows = [[m[label] for label in self.labels] for m in value]
            except KeyError as e:
                raise InterfaceError(f"output {self.name!r}: a map has no label {e}") from e
            return np.asarray(rows, np.float32).reshape(len(rows), len(self.labels))
        table = {label: i for i, label in enumerate(self.labels)}
        strings = np.asarray(value).astype(str)
        try:
            return np.vectorize(table.__getitem__, otypes=[np.int64])(strings) \
                if strings.size else np.zeros(strings.shape, np.int64)
        except KeyError as e:
            raise InterfaceError(f"output {self.name!r}: label {e} is not in the label "
                                 "table") from e

    def to_original(self, value: Any) -> Any:
        """The adapted model's value of this output in the original form."""
        array = np.asarray(value)
        if self.adapter == "zipmap":
            return [dict(zip(self.labels, map(float, row)))
                    for row in array.reshape(-1, len(self.labels))]
        table = np.asarray(self.labels, dtype=object)
        if array.size and (array.min() < 0 or array.max() >= len(table)):
            raise InterfaceError(f"output {self.name!r}: index out of the label table "
                                 f"({len(table)} labels)")
        return table[array.astype(np.int64)]


def read_interface(model: ModelProto) -> dict[str, Adaptation]:
    """The adapted outputs ``model``'s metadata records, by name (empty: none)."""
    for prop in model.metadata_props:
        if prop.key != INTERFACE_KEY:
            continue
        try:
            data = json.loads(prop.value)
            return {name: Adaptation(name, str(d["adapter"]), str(d["was"]), str(d["now"]),
                                     tuple(d.get("labels", ())))
                    for name, d in (data.get("outputs") or {}).items()
                    if d.get("adapter") in ADAPTERS}
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise InterfaceError(f"model metadata {INTERFACE_KEY!r} is not a valid record: "
                                 f"{e}") from e
    return {}


def record_adaptation(model: ModelProto, adaptation: Adaptation) -> None:
    """Add ``adaptation`` to ``model``'s metadata (merged with what it records)."""
    known = read_interface(model)
    known[adaptation.name] = adaptation
    kept = [p for p in model.metadata_props if p.key != INTERFACE_KEY]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    entry = model.metadata_props.add()
    entry.key = INTERFACE_KEY
    entry.value = json.dumps({"outputs": {n: a.as_dict() for n, a in sorted(known.items())}},
                             sort_keys=True)


def new_adaptations(original: ModelProto, adapted: ModelProto) -> dict[str, Adaptation]:
    """What ``adapted`` records and ``original`` does not: the interface a rewrite changed."""
    before = read_interface(original)
    return {n: a for n, a in read_interface(adapted).items() if n not in before}


def to_adapted(outputs: Mapping[str, Any], adaptations: Mapping[str, Adaptation]
               ) -> dict[str, Any]:
    """The original model's outputs (by name) as the adapted model gives them."""
    return {name: (adaptations[name].to_adapted(v) if name in adaptations else v)
            for name, v in outputs.items()}


def to_original(outputs: Mapping[str, Any], adaptations: Mapping[str, Adaptation]
                ) -> dict[str, Any]:
    """The adapted model's outputs (by name) as the original model gave them."""
    return {name: (adaptations[name].to_original(v) if name in adaptations else v)
            for name, v in outputs.items()}
