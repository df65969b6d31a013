"""Generate a transformer-like ONNX model with a chosen number of nodes, for benchmarks.

The model is a stack of pre-norm transformer blocks (LayerNormalization, MatMul + bias Add,
Reshape/Transpose into heads, scaled Softmax attention, an erf-GELU written out as
elementwise ops, residual Adds), with distinct small weights per block, typed inputs and
outputs, ``value_info`` for some intermediates, a few ``If`` nodes whose branches read
outer-scope values, and optionally a fraction of nodes replaced by custom ops:

* a bias ``Add``      -> ``com.microsoft::FastGelu(X, bias)``
* a residual ``Add``  -> ``com.microsoft::SkipLayerNormalization(a, b, gamma)``
* any other elementwise node -> ``com.acme::FusedSwish(X)`` (a made-up domain)

Every replacement keeps the node's output shape, so the graph stays well-formed. The
result is deterministic for a given set of arguments (``seed``).

Library use::

    from benchmarks.generate import generate_model, save_generated
    gen = generate_model(10_000, custom_fraction=0.05)
    gen.model, gen.node_count, gen.custom_counts

CLI::

    python benchmarks/generate.py 100000 -o /tmp/m.onnx --custom-fraction 0.05 --external
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from onnx import ModelProto, TensorProto, helper, numpy_helper

OPSET = 17  # LayerNormalization needs 17
IR_VERSION = 8
CUSTOM_OPS = {
    "FastGelu": "com.microsoft",
    "SkipLayerNormalization": "com.microsoft",
    "FusedSwish": "com.acme",
}


@dataclass
class _Spec:
    """A node before it becomes a NodeProto. ``kind`` says which custom op may replace it."""

    op_type: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict = field(default_factory=dict)
    kind: str | None = None  # "bias" | "residual" | "unary" | None (not replaceable)
    domain: str = ""


@dataclass
class GeneratedModel:
    model: ModelProto
    node_count: int  # every node, If branches included
    main_graph_nodes: int
    subgraph_nodes: int
    if_nodes: int
    blocks: int
    custom_counts: dict[str, int]  # op_type -> nodes (main graph and subgraphs)
    custom_in_subgraphs: int

    @property
    def custom_total(self) -> int:
        return sum(self.custom_counts.values())

    def summary(self) -> dict:
        return {
            "nodes": self.node_count,
            "main_graph_nodes": self.main_graph_nodes,
            "subgraph_nodes": self.subgraph_nodes,
            "if_nodes": self.if_nodes,
            "blocks": self.blocks,
            "custom_counts": dict(self.custom_counts),
            "custom_total": self.custom_total,
            "custom_in_subgraphs": self.custom_in_subgraphs,
            "initializers": len(self.model.graph.initializer),
        }


class _Builder:
    def __init__(self, hidden: int, heads: int, ffn: int, rng: np.random.Generator) -> None:
        self.h, self.heads, self.ffn = hidden, heads, ffn
        self.rng = rng
        self.specs: list[_Spec] = []
        self.inits: list[TensorProto] = []
        self.value_info: list = []

    def weight(self, name: str, *shape: int) -> str:
        arr = (self.rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def const(self, name: str, arr: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def node(self, op, inputs, output, kind=None, **attrs) -> str:
        self.specs.append(_Spec(op, list(inputs), [output], attrs, kind))
        return output

    def typed(self, name: str) -> None:
        self.value_info.append(
            helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", "seq", self.h])
        )

    def block(self, b: int, x: str) -> str:
        """One pre-norm transformer block: 33 nodes."""
        p = f"b{b}."
        n = self.node
        h, ffn = self.h, self.ffn
        ln1 = n("LayerNormalization", [x, self.weight(p + "ln1.g", h), self.weight(p + "ln1.b", h)],
                p + "ln1", axis=-1, epsilon=1e-5)
        self.typed(ln1)
        proj = {}
        for which in ("q", "k", "v"):
            mm = n("MatMul", [ln1, self.weight(f"{p}W{which}", h, h)], f"{p}{which}.mm")
            proj[which] = n("Add", [mm, self.weight(f"{p}b{which}", h)], f"{p}{which}", "bias")
        heads = {}
        for which, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
            r = n("Reshape", [proj[which], "shape.heads"], f"{p}{which}.r")
            heads[which] = n("Transpose", [r], f"{p}{which}.t", perm=perm)
        scores = n("MatMul", [heads["q"], heads["k"]], p + "scores")
        scaled = n("Mul", [scores, "attn.scale"], p + "scaled", "unary")
        probs = n("Softmax", [scaled], p + "probs", "unary", axis=-1)
        ctx = n("MatMul", [probs, heads["v"]], p + "ctx")
        ctx_t = n("Transpose", [ctx], p + "ctx.t", perm=[0, 2, 1, 3])
        merged = n("Reshape", [ctx_t, "shape.merge"], p + "merged")
        o = n("MatMul", [merged, self.weight(p + "Wo", h, h)], p + "o.mm")
        o = n("Add", [o, self.weight(p + "bo", h)], p + "o", "bias")
        res1 = n("Add", [x, o], p + "res1", "residual")
        self.typed(res1)
        ln2 = n("LayerNormalization", [res1, self.weight(p + "ln2.g", h),
                                       self.weight(p + "ln2.b", h)], p + "ln2", axis=-1)
        f1 = n("MatMul", [ln2, self.weight(p + "W1", h, ffn)], p + "f1.mm")
        f1 = n("Add", [f1, self.weight(p + "b1", ffn)], p + "f1", "bias")
        # GELU(x) = x * 0.5 * (1 + erf(x / sqrt(2)))
        d = n("Div", [f1, "gelu.sqrt2"], p + "g.div", "unary")
        e = n("Erf", [d], p + "g.erf", "unary")
        a = n("Add", [e, "gelu.one"], p + "g.add", "unary")
        m = n("Mul", [f1, a], p + "g.mul", "unary")
        g = n("Mul", [m, "gelu.half"], p + "g", "unary")
        f2 = n("MatMul", [g, self.weight(p + "W2", ffn, h)], p + "f2.mm")
        f2 = n("Add", [f2, self.weight(p + "b2", h)], p + "f2", "bias")
        out = n("Add", [res1, f2], p + "out", "residual")
        self.typed(out)
        return out


def _if_node(index: int, x: str, hidden: int, custom_then: bool) -> tuple:
    """``If(use_branch)``: then = FusedSwish-or-Mul(x, half) + x; else = Identity(x).
    Both branches read ``x`` from the outer scope. Returns (NodeProto, output, nodes, customs)."""
    out = f"if{index}.out"
    vi = lambda name: helper.make_tensor_value_info(  # noqa: E731
        name, TensorProto.FLOAT, ["batch", "seq", hidden]
    )
    t_mid = f"if{index}.then.mid"
    if custom_then:
        first = helper.make_node("FusedSwish", [x], [t_mid], domain="com.acme")
    else:
        first = helper.make_node("Mul", [x, "gelu.half"], [t_mid])
    then_g = helper.make_graph(
        [first, helper.make_node("Add", [t_mid, x], [f"if{index}.then.out"])],
        f"if{index}_then", [], [vi(f"if{index}.then.out")],
    )
    else_g = helper.make_graph(
        [helper.make_node("Identity", [x], [f"if{index}.else.out"])],
        f"if{index}_else", [], [vi(f"if{index}.else.out")],
    )
    node = helper.make_node("If", ["use_branch"], [out], then_branch=then_g, else_branch=else_g)
    return node, out, 3, int(custom_then)


def generate_model(
    nodes: int,
    *,
    custom_fraction: float = 0.0,
    if_count: int | None = None,
    hidden: int = 16,
    heads: int = 2,
    ffn: int | None = None,
    seed: int = 0,
) -> GeneratedModel:
    """A transformer-like model with exactly ``nodes`` nodes (If branches included).

    Args:
        nodes: total node count (at least 64).
        custom_fraction: fraction of all nodes that are custom ops (0 to ~0.4).
        if_count: number of If nodes (default: one per 8 blocks, between 1 and 16).
        hidden, heads, ffn: layer sizes; weights are hidden*hidden and hidden*ffn floats.
        seed: RNG seed; the same arguments always give the same model.
    """
    if nodes < 64:
        raise ValueError("nodes must be at least 64")
    if not 0.0 <= custom_fraction <= 0.4:
        raise ValueError("custom_fraction must be within [0, 0.4]")
    ffn = ffn or 2 * hidden
    rng = np.random.default_rng(seed)
    pick = random.Random(seed)
    b = _Builder(hidden, heads, ffn, rng)
    b.const("shape.heads", np.array([0, 0, heads, hidden // heads], dtype=np.int64))
    b.const("shape.merge", np.array([0, 0, hidden], dtype=np.int64))
    b.const("attn.scale", np.array(1.0 / math.sqrt(hidden // heads), dtype=np.float32))
    b.const("gelu.sqrt2", np.array(math.sqrt(2.0), dtype=np.float32))
    b.const("gelu.one", np.array(1.0, dtype=np.float32))
    b.const("gelu.half", np.array(0.5, dtype=np.float32))

    per_block = 33
    blocks = max(1, (nodes - 8) // (per_block + 1))
    if if_count is None:
        if_count = min(16, max(1, blocks // 8))
    sub_nodes = 3 * if_count  # each If: 1 node in the main graph, 3 inside its branches
    blocks = min(blocks, (nodes - 4 * if_count) // per_block)
    if blocks < 1:
        raise ValueError(f"{nodes} nodes cannot hold one block and {if_count} If nodes")
    # block index -> If nodes placed after it, spread evenly over the stack
    if_plan: Counter = Counter(np.linspace(0, blocks - 1, if_count, dtype=int).tolist())

    x = "x"
    if_specs: list[tuple[int, str]] = []  # (position in b.specs, value feeding the If)
    for i in range(blocks):
        x = b.block(i, x)
        for _ in range(if_plan.get(i, 0)):
            if_specs.append((len(b.specs), x))
            b.specs.append(_Spec("If", ["use_branch"], [f"if{len(if_specs) - 1}.out"]))
            x = f"if{len(if_specs) - 1}.out"
    # pad with Identity to the exact count
    pad = nodes - (len(b.specs) + sub_nodes)
    for i in range(pad):
        x = b.node("Identity", [x], f"pad{i}")

    # choose which nodes become custom ops (exactly round(fraction * nodes))
    want = round(custom_fraction * nodes)
    # at least one custom op inside an If branch when there are any
    want_sub = min(if_count, max(1, round(if_count * custom_fraction))) if want else 0
    eligible = [i for i, s in enumerate(b.specs) if s.kind]
    want_main = want - want_sub
    if want_main > len(eligible):
        raise ValueError(f"custom_fraction {custom_fraction} needs {want_main} replaceable "
                         f"nodes; the model has {len(eligible)}")
    counts: Counter = Counter()
    for i in sorted(pick.sample(eligible, want_main)):
        s = b.specs[i]
        if s.kind == "bias":
            s.op_type, s.domain = "FastGelu", "com.microsoft"
        elif s.kind == "residual":
            gamma = b.weight(f"{s.outputs[0]}.skipln.gamma", hidden)
            s.op_type, s.domain = "SkipLayerNormalization", "com.microsoft"
            s.inputs = [*s.inputs, gamma]
            s.attrs = {"epsilon": 1e-5}
        else:
            s.op_type, s.domain, s.inputs, s.attrs = "FusedSwish", "com.acme", s.inputs[:1], {}
        counts[s.op_type] += 1
    custom_if = set(pick.sample(range(if_count), want_sub)) if want_sub else set()

    node_protos = []
    if_index = 0
    if_inputs = dict(if_specs)
    for pos, s in enumerate(b.specs):
        if s.op_type == "If":
            proto, _, _, n_custom = _if_node(if_index, if_inputs[pos], hidden,
                                             if_index in custom_if)
            counts["FusedSwish"] += n_custom
            node_protos.append(proto)
            if_index += 1
            continue
        node_protos.append(
            helper.make_node(s.op_type, s.inputs, s.outputs, domain=s.domain or None, **s.attrs)
        )
    graph = helper.make_graph(
        node_protos,
        "transformer_like",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", hidden]),
            helper.make_tensor_value_info("use_branch", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", "seq", hidden])],
        initializer=b.inits,
        value_info=b.value_info,
    )
    opsets = [helper.make_opsetid("", OPSET)]
    if counts["FastGelu"] or counts["SkipLayerNormalization"]:
        opsets.append(helper.make_opsetid("com.microsoft", 1))
    if counts["FusedSwish"]:
        opsets.append(helper.make_opsetid("com.acme", 1))
    model = helper.make_model(graph, opset_imports=opsets, producer_name="benchmarks.generate")
    model.ir_version = IR_VERSION
    total = len(node_protos) + sub_nodes
    assert total == nodes, (total, nodes)
    return GeneratedModel(
        model=model,
        node_count=total,
        main_graph_nodes=len(node_protos),
        subgraph_nodes=sub_nodes,
        if_nodes=if_count,
        blocks=blocks,
        custom_counts={k: v for k, v in sorted(counts.items()) if v},
        custom_in_subgraphs=len(custom_if),
    )


def save_generated(
    gen: GeneratedModel | ModelProto, path: str | os.PathLike, *, external: bool = False,
    size_threshold: int = 256,
) -> Path:
    """Write the model; with ``external`` the weights of at least ``size_threshold`` bytes go
    to ``<name>.data`` next to it (onnx's external-data helpers)."""
    import onnx
    from onnx.external_data_helper import convert_model_to_external_data

    model = gen.model if isinstance(gen, GeneratedModel) else gen
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data_name = path.name + ".data"
    (path.parent / data_name).unlink(missing_ok=True)
    if external:
        copy = ModelProto()
        copy.CopyFrom(model)
        convert_model_to_external_data(
            copy, all_tensors_to_one_file=True, location=data_name, size_threshold=size_threshold
        )
        onnx.save_model(copy, path)
    else:
        onnx.save_model(model, path)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("nodes", type=int, help="total node count (e.g. 10000, 100000, 300000)")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--custom-fraction", type=float, default=0.0)
    parser.add_argument("--if-count", type=int, default=None)
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--external", action="store_true",
                        help="weights as external data in <output>.data (default: inline)")
    args = parser.parse_args(argv)
    gen = generate_model(args.nodes, custom_fraction=args.custom_fraction,
                         if_count=args.if_count, hidden=args.hidden, seed=args.seed)
    path = save_generated(gen, args.output, external=args.external)
    import json

    print(json.dumps({"path": str(path), "bytes": path.stat().st_size, **gen.summary()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
