"""``ai.onnx.preview::FlexAttention(Q, K, V)``: scaled dot-product attention in standard
ONNX, with its ``score_mod``/``prob_mod`` graphs copied into the body."""

from __future__ import annotations

import numpy as np
from onnx import AttributeProto, FunctionProto, GraphProto, NodeProto, TensorProto, helper

from rewriter.plugin import Declined, DecompositionContext

from .common import BODY_DOMAIN, FLOAT_TYPES, Body, body_opset, element_type, plain_attributes

_FLEX_ATTRIBUTES = ("scale", "score_mod", "prob_mod", "softmax_precision")


def _subgraphs(node: NodeProto) -> list[GraphProto]:
    out = []
    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH:
            out.append(attr.g)
        elif attr.type == AttributeProto.GRAPHS:
            out.extend(attr.graphs)
    return out


def _defined_names(graph: GraphProto) -> set[str]:
    """Every value name ``graph`` defines, in nested subgraphs too."""
    names = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    names |= {t.values.name for t in graph.sparse_initializer}
    for node in graph.node:
        names.update(o for o in node.output if o)
        for sub in _subgraphs(node):
            names |= _defined_names(sub)
    return names


def _free_names(graph: GraphProto, outer: frozenset[str] = frozenset()) -> set[str]:
    """Names ``graph`` reads that neither it nor ``outer`` defines (outer-scope captures)."""
    scope = set(outer) | {i.name for i in graph.input} | {t.name for t in graph.initializer}
    scope |= {t.values.name for t in graph.sparse_initializer}
    free: set[str] = set()
    for node in graph.node:
        free.update(n for n in node.input if n and n not in scope)
        for sub in _subgraphs(node):
            free |= _free_names(sub, frozenset(scope))
        scope.update(o for o in node.output if o)
    free.update(o.name for o in graph.output if o.name not in scope)
    return free


def _rename_graph(graph: GraphProto, names: dict[str, str]) -> None:
    """Rename every value of ``graph`` (and its subgraphs) found in ``names``, in place."""
    for seq in (graph.input, graph.output, graph.value_info):
        for vi in seq:
            vi.name = names.get(vi.name, vi.name)
    for t in graph.initializer:
        t.name = names.get(t.name, t.name)
    for t in graph.sparse_initializer:
        t.values.name = names.get(t.values.name, t.values.name)
    for node in graph.node:
        _rename_node(node, names)


def _rename_node(node: NodeProto, names: dict[str, str]) -> None:
    for i, n in enumerate(node.input):
        if n:
            node.input[i] = names.get(n, n)
    for i, n in enumerate(node.output):
        if n:
            node.output[i] = names.get(n, n)
    for sub in _subgraphs(node):
        _rename_graph(sub, names)


def _domains(graph: GraphProto) -> set[str]:
    out = set()
    for node in graph.node:
        out.add("" if node.domain == "ai.onnx" else node.domain)
        for sub in _subgraphs(node):
            out |= _domains(sub)
    return out


def _splice_graph(body: Body, graph: GraphProto, value: str, tag: str) -> str:
    """Copy a one-input, one-output modifier graph into ``body``, reading ``value``; the name
    of its output (Declined: the graph cannot be spliced)."""
    if len(graph.input) != 1 or len(graph.output) != 1:
        raise Declined(f"{tag} has {len(graph.input)} input(s) and {len(graph.output)} "
                       "output(s); one of each is spliced")
    if _free_names(graph):  # a function body cannot capture outer-scope values
        raise Declined(f"{tag} reads outer-scope values: {', '.join(sorted(_free_names(graph)))}")
    if any(t.data_location == TensorProto.EXTERNAL for t in graph.initializer):
        raise Declined(f"{tag} has initializers in external data")
    copy = GraphProto()
    copy.CopyFrom(graph)
    formal = copy.input[0].name
    names = {n: body.fresh(f"{tag}__{n}") for n in sorted(_defined_names(copy)) if n != formal}
    names[formal] = value
    _rename_graph(copy, names)
    for t in copy.initializer:
        body.nodes.append(helper.make_node("Constant", [], [t.name], value=t))
    for t in copy.sparse_initializer:
        body.nodes.append(helper.make_node("Constant", [], [t.values.name], sparse_value=t))
    body.nodes.extend(copy.node)
    result = copy.output[0].name
    if result == value:  # the graph hands its input back unchanged
        result = body.named("Identity", [value], f"{tag}_out")
    return result


def build_flex_attention(ctx: DecompositionContext) -> FunctionProto | None:
    """FlexAttention in standard ONNX, with its modifier graphs spliced in."""
    node = ctx.node
    if len(node.input) != 3 or not all(node.input) or len(node.output) != 1:
        raise Declined("takes Q, K and V and gives one output")
    if not node.output[0] or not plain_attributes(node, _FLEX_ATTRIBUTES):
        raise Declined("an output left empty, or an unknown or referenced attribute")
    q_type, k_type, v_type = (element_type(t) for t in list(ctx.input_types)[:3])
    if q_type not in FLOAT_TYPES or k_type != q_type or v_type != q_type:
        raise Declined("Q, K and V must have one known float type")
    precision = ctx.attribute("softmax_precision")
    if precision is None:
        precision = TensorProto.FLOAT if q_type in (
            TensorProto.FLOAT16, TensorProto.BFLOAT16) else q_type
    if precision not in FLOAT_TYPES:
        raise Declined(f"softmax_precision {precision} is not a float type")

    b = Body(body_opset(ctx))
    b.reserve(["Q", "K", "V", "Y"])
    i64 = TensorProto.INT64
    q_shape = b.named("Shape", ["Q"], "QShape")
    k_shape = b.named("Shape", ["K"], "KShape")
    v_shape = b.named("Shape", ["V"], "VShape")
    one, two, four = (b.const([k], i64, f"I{k}") for k in (1, 2, 4))
    q_heads = b.named("Slice", [q_shape, one, two], "QNumHeads")
    kv_heads = b.named("Slice", [k_shape, one, two], "KVNumHeads")
    repeat = b.named("Div", [q_heads, kv_heads], "KVRepeat")
    ones = b.const([1, 1], i64, "Ones2")
    expand_shape = b.named("Concat", [ones, repeat, ones], "KVExpandShape", axis=0)
    zero = b.const([0], i64, "I0")

    def aligned(x: str, shape: str) -> str:
        """``x`` (B, Hkv, S, D) with each head repeated: (B, Hq, S, D)."""
        batch = b.named("Slice", [shape, zero, one], f"{x}Batch")
        tail = b.named("Slice", [shape, two, four], f"{x}Tail")
        unsqueezed = b.named("Unsqueeze", [x, two], f"{x}Unsqueezed")
        expanded = b.named("Expand", [unsqueezed, expand_shape], f"{x}Expanded")
        target = b.named("Concat", [batch, q_heads, tail], f"{x}AlignedShape", axis=0)
        return b.named("Reshape", [expanded, target], f"{x}Aligned")

    k_aligned = aligned("K", k_shape)
    v_aligned = aligned("V", v_shape)

    scale = ctx.attribute("scale")
    if scale is not None:
        sqrt_scale = b.const(np.sqrt(np.float32(scale)), q_type, "ScaleSqrt")
    else:  # 1 / sqrt(E) in double, rounded to float, its square root, in Q's type
        head = b.named("Slice", [q_shape, b.const([3], i64, "I3"), four], "HeadSize")
        head_d = b.named("Cast", [head], "HeadSizeD", to=TensorProto.DOUBLE)
        scale_d = b.named("Reciprocal", [b.named("Sqrt", [head_d], "SqrtHeadSize")], "ScaleD")
        scale_f = b.named("Cast", [scale_d], "Scale", to=TensorProto.FLOAT)
        sqrt_f = b.named("Sqrt", [scale_f], "ScaleSqrtF")
        sqrt_scale = b.converted(sqrt_f, q_type, "ScaleSqrt", TensorProto.FLOAT)
    q_scaled = b.named("Mul", ["Q", sqrt_scale], "QScaled")
    k_scaled = b.named("Mul", [k_aligned, sqrt_scale], "KScaled")
    k_t = b.named("Transpose", [k_scaled], "KTransposed", perm=[0, 1, 3, 2])
    scores = b.converted(b.named("MatMul", [q_scaled, k_t], "Scores"), precision, "ScoresP", q_type)

    score_mod = ctx.attribute("score_mod")
    if score_mod is not None:
        scores = _splice_graph(b, score_mod, scores, "score_mod")
    probs = b.named("Softmax", [scores], "Probs", axis=-1)
    prob_mod = ctx.attribute("prob_mod")
    if prob_mod is not None:
        probs = _splice_graph(b, prob_mod, probs, "prob_mod")
    v_p = b.converted(v_aligned, precision, "VAlignedP", v_type)
    if precision == v_type:
        b.named("MatMul", [probs, v_p], "", out="Y")
    else:
        b.named("Cast", [b.named("MatMul", [probs, v_p], "YP")], "", out="Y", to=v_type)

    opsets = {}  # the modifier graphs' domains besides ai.onnx
    for graph in (g for g in (score_mod, prob_mod) if g is not None):
        for domain in _domains(graph) - {""}:
            if domain not in ctx.opsets:
                raise Declined(f"a modifier graph uses domain {domain!r}, which the model "
                               "does not import")
            opsets[domain] = ctx.opsets[domain]
    return b.function(BODY_DOMAIN, "flex_attention", ["Q", "K", "V"], ["Y"],
                      opset_imports=opsets)
