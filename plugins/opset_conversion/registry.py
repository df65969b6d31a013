"""The adapter registry: ``ADAPTERS`` (one version step down per op, registered with
:func:`adapter` by the op-family modules), ``SEMANTIC_BOUNDARIES`` (versions that changed an op's
meaning without changing its signature), and the helpers adapters share to read constant inputs
as attributes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from onnx import NodeProto

from .common import Decline, Env, input_at

#: (domain, op_type, since_version) -> adapter(node, env) returning nodes valid at opset
#: ``since_version - 1`` (the step just below the version the adapter is for)
ADAPTERS: dict[tuple[str, str, int], Callable[[NodeProto, Env], list[NodeProto]]] = {}
#: versions at which an op changed meaning without changing its signature: the node is
#: never kept as it is across these, only an adapter (or the function body) lowers it
SEMANTIC_BOUNDARIES: dict[tuple[str, str], tuple[int, ...]] = {
    ("", "Softmax"): (13,),
    ("", "LogSoftmax"): (13,),
    ("", "Hardmax"): (13,),
    ("", "GridSample"): (20,),
    ("", "RoiAlign"): (16,),
    ("", "GroupNormalization"): (21,),
    ("", "Pad"): (19,),
    ("", "Resize"): (19,),
    ("", "ScatterElements"): (18,),
    ("", "ScatterND"): (18,),
    ("", "Range"): (27,),
    ("", "Mod"): (28,),
}
#: ops whose axis attributes accept negative values only from opset 11
NEGATIVE_AXES_11 = ("ArgMax", "ArgMin", "Compress", "Concat", "Flatten", "Hardmax",
                    "LogSoftmax", "Softmax", "Split", "Squeeze", "Unsqueeze", "ReduceL1",
                    "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
                    "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare")
for _op in NEGATIVE_AXES_11:
    SEMANTIC_BOUNDARIES[("", _op)] = tuple(sorted({11, *SEMANTIC_BOUNDARIES.get(("", _op), ())}))


def adapter_versions(domain: str, op_type: str) -> list[int]:
    return sorted(v for (d, op, v) in ADAPTERS if d == domain and op == op_type)


#: ops with an adapter that reads the values of constant inputs (axes, pads, sizes, ...)
READS_CONSTANTS: set[tuple[str, str]] = set()


def adapter(op_types, since: int, domain: str = "", reads_constants: bool = False):
    """Register an adapter lowering ``op_types`` from version ``since`` one step down;
    ``reads_constants``: it looks at the values of constant inputs."""
    def register(fn):
        for op in ([op_types] if isinstance(op_types, str) else op_types):
            ADAPTERS[(domain, op, since)] = fn
            if reads_constants:
                READS_CONSTANTS.add((domain, op))
        return fn
    return register


def need_const(node: NodeProto, env: Env, index: int, what: str) -> np.ndarray | None:
    name = input_at(node, index)
    if not name:
        return None
    value = env.const(name)
    if value is None:
        raise Decline(f"its {what} input is computed at run time; the older "
                      f"{node.op_type} takes it as an attribute")
    return value


def ints(value: np.ndarray) -> list[int]:
    return [int(v) for v in np.asarray(value).reshape(-1)]
