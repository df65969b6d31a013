"""Decompositions ``onnx-preview``: the ONNX preview ops (domains ``ai.onnx.preview`` and
``ai.onnx.preview.training``) in standard ONNX, for runtimes that have no kernel for them
(onnxruntime has none). Semantics as the ONNX operator docs and onnx's reference evaluator.

* ``ai.onnx.preview::FlexAttention(Q, K, V)`` (attributes ``scale``, ``score_mod``,
  ``prob_mod``, ``softmax_precision``), rank-4 ``Q (B, Hq, L, E)``, ``K (B, Hkv, S, E)``,
  ``V (B, Hkv, S, Ev)``::

      s = sqrt(float32(scale))  (default scale = 1 / sqrt(E)), cast to Q's type
      K', V' = K, V with each head repeated Hq / Hkv times (query head h uses kv head
               h // (Hq / Hkv))
      scores = Cast<P>((Q * s) @ (K' * s)^T)     P: softmax_precision, default float32
                                                   for float16/bfloat16 inputs, else Q's type
      scores = score_mod(scores)                  the graph attribute, spliced in
      probs = Softmax(scores, axis=-1)
      probs = prob_mod(probs)                     the graph attribute, spliced in
      Y = Cast<V's type>(probs @ Cast<P>(V'))

  A modifier graph is copied into the body (its initializers become Constants, every name
  it defines, nested subgraphs included, is renamed); one that reads outer-scope values
  is declined (a function body cannot capture them).

* ``ai.onnx.preview.training`` optimizers, inputs ``R, T, X_1..X_n, G_1..G_n, ...`` (every
  group of one kind, then the next kind) for any ``n``; outputs likewise:

  - ``Adagrad(R, T, X.., G.., H..) -> X_new.., H_new..`` (``decay_factor`` 0,
    ``epsilon`` 1e-6, ``norm_coefficient`` 0)::

        r = R / (1 + T * decay_factor);  G' = norm_coefficient * X + G
        H_new = H + G' * G';  X_new = X - r * G' / (Sqrt(H_new) + epsilon)

  - ``Adam(R, T, X.., G.., V.., H..) -> X_new.., V_new.., H_new..`` (``alpha`` 0.9,
    ``beta`` 0.999, ``epsilon`` 1e-6, ``norm_coefficient`` 0, ``norm_coefficient_post`` 0)::

        G' = norm_coefficient * X + G
        V_new = alpha * V + (1 - alpha) * G';  H_new = beta * H + (1 - beta) * G' * G'
        R' = T > 0 ? R * Sqrt(1 - beta**T) / (1 - alpha**T) : R
        X_new = (1 - norm_coefficient_post) * (X - R' * V_new / (Sqrt(H_new) + epsilon))

  - ``Momentum(R, T, X.., G.., V..) -> X_new.., V_new..`` (``alpha``, ``beta``, ``mode``,
    ``norm_coefficient`` required)::

        G' = norm_coefficient * X + G;  V_new = alpha * V + (T > 0 ? beta : 1) * G'
        standard: X_new = X - R * V_new
        nesterov: X_new = X - R * (G' + alpha * V_new)

  The scalar learning-rate factors (``r``, ``R'``) are computed in double precision, as
  the reference evaluator does, and cast to the tensors' type.

Every builder reads the node's attributes, declines attributes it does not know (and
attribute references), and bakes the values into the body as constants of the node's
element type. ``tests/test_onnx_preview.py`` checks each body on onnxruntime against the
reference evaluator and the spec's test data.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from onnx import AttributeProto, FunctionProto, GraphProto, NodeProto, TensorProto, helper

from rewriter.plugin import (
    Arg,
    Declined,
    DecompositionContext,
    FunctionBuilder,
    OpSample,
    hookimpl,
)

PREVIEW = "ai.onnx.preview"
TRAINING = "ai.onnx.preview.training"
BODY_DOMAIN = "rewriter_plugins.onnx_preview"

# FlexAttention's body needs Unsqueeze/Slice with tensor inputs and Softmax on one axis (13).
FLEX_OPSETS = (13, None)
# The optimizers' bodies use Where (9) and Greater on int64 (9).
TRAINING_OPSETS = (9, None)
# A model importing no ai.onnx opset (as the spec's training test models) is planned by the
# engine as if at opset 1; such a body brings its own ai.onnx import at this version.
NO_IMPORT_OPSETS = (1, 1)
NO_IMPORT_BODY_OPSET = 13

_ELEM_TYPES = {
    f"tensor({name})": getattr(TensorProto, name.upper())
    for name in ("float", "double", "float16", "bfloat16", "int64")
}
_FLOATS = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16)


def _elem_type(type_str: str | None) -> int | None:
    return _ELEM_TYPES.get(type_str or "")


class _Body(FunctionBuilder):
    """A function body whose values keep readable names: the hint itself, numbered only when
    it is taken."""

    def __init__(self, opset: int) -> None:
        super().__init__(opset)
        self._used: set[str] = set()

    def fresh(self, hint: str = "v") -> str:
        name, k = hint, 1
        while name in self._used:
            k += 1
            name = f"{hint}_{k}"
        self._used.add(name)
        return name

    def reserve(self, names: Iterable[str]) -> None:
        self._used.update(names)

    def named(self, op_type: str, inputs: list[str], hint: str, out: str | None = None,
              **attributes) -> str:
        """Append a node whose one output is ``out``, else a fresh name from ``hint``."""
        return self.op(op_type, *inputs, outputs=[out or self.fresh(hint)], **attributes)

    def converted(self, value: str, to: int, hint: str, source: int | None) -> str:
        """``value`` as element type ``to`` (unchanged when ``source`` is ``to``)."""
        return value if source == to else self.named("Cast", [value], hint, to=to)


def _plain_attributes(node: NodeProto, known: Iterable[str]) -> bool:
    """Every attribute of ``node`` is one we honour, and none is a reference."""
    names = set(known)
    return all(a.name in names and not a.ref_attr_name for a in node.attribute)


def _body_opset(ctx: DecompositionContext) -> int:
    return ctx.opset if "" in ctx.opsets else NO_IMPORT_BODY_OPSET


# -- FlexAttention --------------------------------------------------------------------------

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


def _splice_graph(body: _Body, graph: GraphProto, value: str, tag: str) -> str:
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
    if not node.output[0] or not _plain_attributes(node, _FLEX_ATTRIBUTES):
        raise Declined("an output left empty, or an unknown or referenced attribute")
    q_type, k_type, v_type = (_elem_type(t) for t in list(ctx.input_types)[:3])
    if q_type not in _FLOATS or k_type != q_type or v_type != q_type:
        raise Declined("Q, K and V must have one known float type")
    precision = ctx.attribute("softmax_precision")
    if precision is None:
        precision = TensorProto.FLOAT if q_type in (
            TensorProto.FLOAT16, TensorProto.BFLOAT16) else q_type
    if precision not in _FLOATS:
        raise Declined(f"softmax_precision {precision} is not a float type")

    b = _Body(_body_opset(ctx))
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


# -- training optimizers --------------------------------------------------------------------

# op -> (inputs per optimized tensor, attribute defaults; None: required)
_OPTIMIZERS: dict[str, tuple[int, dict[str, float | str | None]]] = {
    "Adagrad": (3, {"decay_factor": 0.0, "epsilon": 1e-6, "norm_coefficient": 0.0}),
    "Adam": (4, {"alpha": 0.9, "beta": 0.999, "epsilon": 1e-6, "norm_coefficient": 0.0,
                 "norm_coefficient_post": 0.0}),
    "Momentum": (3, {"alpha": None, "beta": None, "mode": None, "norm_coefficient": None}),
}


def _optimizer_setup(ctx: DecompositionContext, op_type: str):
    """(attribute values, number of tensors, element type); Declined where the node is not
    of a form decomposed."""
    node = ctx.node
    per_tensor, defaults = _OPTIMIZERS[op_type]
    if not _plain_attributes(node, defaults) or not all(node.input):
        raise Declined("an unknown or referenced attribute, or an input left empty")
    values = {k: ctx.attribute(k, v) for k, v in defaults.items()}
    # the attributes are float32: a default is too (0.9 is 0.89999998 as the spec has it)
    values = {k: float(np.float32(v)) if isinstance(v, float) else v for k, v in values.items()}
    missing = sorted(k for k, v in values.items() if v is None)
    if missing:
        raise Declined(f"required attribute(s) missing: {', '.join(missing)}")
    if isinstance(values.get("mode"), bytes):
        values["mode"] = values["mode"].decode()
    if op_type == "Momentum" and values["mode"] not in ("standard", "nesterov"):
        raise Declined(f"mode {values['mode']!r} (standard or nesterov only)")
    count, rest = divmod(len(node.input) - 2, per_tensor)
    if count < 1 or rest or len(node.output) != count * (per_tensor - 1):
        raise Declined(f"{len(node.input)} inputs and {len(node.output)} outputs are not "
                       f"R, T and {per_tensor} per tensor")
    types = list(ctx.input_types)
    tensor_types = {_elem_type(t) for t in types[2:] if t}
    if len(tensor_types) != 1:  # the spec has one type T3
        raise Declined("the tensors' element type is unknown or not one type")
    (elem,) = tensor_types
    if elem not in (TensorProto.FLOAT, TensorProto.DOUBLE):
        raise Declined("the tensors must be float or double")
    if _elem_type(types[0]) not in (None, TensorProto.FLOAT, TensorProto.DOUBLE):
        raise Declined("R must be float or double")
    if _elem_type(types[1]) not in (None, TensorProto.INT64):
        raise Declined("T must be int64")
    return values, count, elem


def _new_body(ctx: DecompositionContext, count: int, inputs: str, outputs: str) -> _Body:
    """A body whose formal inputs are ``R, T`` and ``<kind><i>`` for each kind in
    ``inputs``; outputs ``<kind><i>_new`` for each kind in ``outputs``."""
    b = _Body(_body_opset(ctx))
    b.reserve(["R", "T"] + [f"{k}{i}" for k in inputs for i in range(count)])
    b.reserve([f"{k}{i}_new" for k in outputs for i in range(count)])
    return b


def _optimizer_function(name: str, count: int, inputs: str, outputs: str, body: _Body
                        ) -> FunctionProto:
    return body.function(BODY_DOMAIN, name,
                         ["R", "T"] + [f"{k}{i}" for k in inputs for i in range(count)],
                         [f"{k}{i}_new" for k in outputs for i in range(count)])


def _regularized(b: _Body, x: str, g: str, norm: str) -> str:
    return b.named("Add", [b.named("Mul", [norm, x], f"{x}Scaled"), g], f"{g}Regularized")


def build_adagrad(ctx: DecompositionContext) -> FunctionProto | None:
    """Adagrad over any number of tensors."""
    setup = _optimizer_setup(ctx, "Adagrad")
    values, count, elem = setup
    f64 = TensorProto.DOUBLE
    b = _new_body(ctx, count, "XGH", "XH")
    r_d = b.converted("R", f64, "RD", _elem_type(ctx.input_types[0]))
    t_d = b.named("Cast", ["T"], "TD", to=f64)
    decay = b.const(values["decay_factor"], f64, "DecayFactor")
    one_d = b.const(1.0, f64, "OneD")
    rate = b.named("Div", [r_d, b.named("Add", [one_d, b.named("Mul", [t_d, decay], "TDecay")],
                                        "Decay")], "RateD")
    rate = b.converted(rate, elem, "Rate", f64)
    norm = b.const(values["norm_coefficient"], elem, "NormCoefficient")
    epsilon = b.const(values["epsilon"], elem, "Epsilon")
    for i in range(count):
        x, g, h = f"X{i}", f"G{i}", f"H{i}"
        g_reg = _regularized(b, x, g, norm)
        h_new = b.named("Add", [h, b.named("Mul", [g_reg, g_reg], f"{g}Squared")], "",
                        out=f"H{i}_new")
        adaptive = b.named("Add", [b.named("Sqrt", [h_new], f"{h}Sqrt"), epsilon], f"{h}Adaptive")
        step = b.named("Div", [b.named("Mul", [rate, g_reg], f"{g}Rated"), adaptive], f"{x}Step")
        b.named("Sub", [x, step], "", out=f"X{i}_new")
    return _optimizer_function("adagrad", count, "XGH", "XH", b)


def build_adam(ctx: DecompositionContext) -> FunctionProto | None:
    """Adam over any number of tensors."""
    setup = _optimizer_setup(ctx, "Adam")
    values, count, elem = setup
    f64 = TensorProto.DOUBLE
    b = _new_body(ctx, count, "XGVH", "XVH")
    alpha, beta = values["alpha"], values["beta"]
    # R' = T > 0 ? R * sqrt(1 - beta**T) / (1 - alpha**T) : R, in double
    r_d = b.converted("R", f64, "RD", _elem_type(ctx.input_types[0]))
    t_d = b.named("Cast", ["T"], "TD", to=f64)
    one_d = b.const(1.0, f64, "OneD")
    beta_t = b.named("Pow", [b.const(beta, f64, "BetaD"), t_d], "BetaPowT")
    alpha_t = b.named("Pow", [b.const(alpha, f64, "AlphaD"), t_d], "AlphaPowT")
    corrected = b.named("Div", [
        b.named("Mul", [r_d, b.named("Sqrt", [b.named("Sub", [one_d, beta_t], "OneMinusBetaPowT")],
                                "SqrtOneMinusBetaPowT")], "RSqrt"),
        b.named("Sub", [one_d, alpha_t], "OneMinusAlphaPowT")], "RCorrected")
    positive = b.named("Greater", ["T", b.const(0, TensorProto.INT64, "ZeroI")], "TPositive")
    rate = b.converted(b.named("Where", [positive, corrected, r_d], "RateD"), elem, "Rate", f64)

    def c(value: float, hint: str) -> str:
        return b.const(value, elem, hint)

    def one_minus(value: float) -> np.float32:
        """``1 - value`` in float32, the attributes' type (as the reference evaluator)."""
        return np.float32(1) - np.float32(value)

    norm = c(values["norm_coefficient"], "NormCoefficient")
    alpha_c, one_minus_alpha = c(alpha, "Alpha"), c(one_minus(alpha), "OneMinusAlpha")
    beta_c, one_minus_beta = c(beta, "Beta"), c(one_minus(beta), "OneMinusBeta")
    epsilon = c(values["epsilon"], "Epsilon")
    post = c(one_minus(values["norm_coefficient_post"]), "OneMinusNormCoefficientPost")
    for i in range(count):
        x, g, v, h = f"X{i}", f"G{i}", f"V{i}", f"H{i}"
        g_reg = _regularized(b, x, g, norm)
        b.named("Add", [b.named("Mul", [alpha_c, v], f"{v}Decayed"),
                        b.named("Mul", [one_minus_alpha, g_reg], f"{g}Weighted")], "",
                out=f"V{i}_new")
        squared = b.named("Mul", [g_reg, g_reg], f"{g}Squared")
        b.named("Add", [b.named("Mul", [beta_c, h], f"{h}Decayed"),
                        b.named("Mul", [one_minus_beta, squared], f"{g}SquaredWeighted")], "",
                out=f"H{i}_new")
        h_sqrt = b.named("Add", [b.named("Sqrt", [f"H{i}_new"], f"{h}Sqrt"), epsilon],
                         f"{h}SqrtEps")
        direction = b.named("Div", [f"V{i}_new", h_sqrt], f"{x}Direction")
        updated = b.named("Sub", [x, b.named("Mul", [rate, direction], f"{x}Step")], f"{x}Updated")
        b.named("Mul", [post, updated], "", out=f"X{i}_new")
    return _optimizer_function("adam", count, "XGVH", "XVH", b)


def build_momentum(ctx: DecompositionContext) -> FunctionProto | None:
    """Momentum (standard or Nesterov) over any number of tensors."""
    setup = _optimizer_setup(ctx, "Momentum")
    values, count, elem = setup
    b = _new_body(ctx, count, "XGV", "XV")
    rate = b.converted("R", elem, "Rate", _elem_type(ctx.input_types[0]))
    norm = b.const(values["norm_coefficient"], elem, "NormCoefficient")
    alpha = b.const(values["alpha"], elem, "Alpha")
    positive = b.named("Greater", ["T", b.const(0, TensorProto.INT64, "ZeroI")], "TPositive")
    beta = b.named("Where", [positive, b.const(values["beta"], elem, "Beta"),
                             b.const(1.0, elem, "One")], "BetaAdjusted")
    nesterov = values["mode"] == "nesterov"
    for i in range(count):
        x, g, v = f"X{i}", f"G{i}", f"V{i}"
        g_reg = _regularized(b, x, g, norm)
        b.named("Add", [b.named("Mul", [alpha, v], f"{v}Decayed"),
                        b.named("Mul", [beta, g_reg], f"{g}Weighted")], "", out=f"V{i}_new")
        direction = f"V{i}_new"
        if nesterov:
            direction = b.named("Add", [g_reg, b.named("Mul", [alpha, direction], f"{v}Ahead")],
                                f"{x}Direction")
        b.named("Sub", [x, b.named("Mul", [rate, direction], f"{x}Step")], "", out=f"X{i}_new")
    return _optimizer_function("momentum", count, "XGV", "XV", b)


# -- oracle samples: the reference evaluator implements all four ops -----------------------

_F32, _F64 = TensorProto.FLOAT, TensorProto.DOUBLE


def modifier(name: str, nodes: list[NodeProto], elem: int = _F32,
             initializers=()) -> GraphProto:
    """A score_mod/prob_mod graph ``s -> s_out``."""
    return helper.make_graph(nodes, name, [helper.make_tensor_value_info("s", elem, None)],
                             [helper.make_tensor_value_info("s_out", elem, None)],
                             initializer=list(initializers))


def _scalar(name: str, value, elem: int):
    return helper.make_tensor(name, elem, [], [value])


def bias_mod(value: float = 0.5, elem: int = _F32) -> GraphProto:
    return modifier("bias_mod", [helper.make_node("Add", ["s", "bias"], ["s_out"])], elem,
                    [_scalar("bias", value, elem)])


def causal_mod(elem: int = _F32) -> GraphProto:
    """Masks positions above the diagonal with -inf, built from the scores' own shape."""
    def const(name, value):
        return helper.make_node("Constant", [], [name], value=helper.make_tensor(
            name, TensorProto.INT64, [len(value)] if isinstance(value, list) else [],
            value if isinstance(value, list) else [value]))
    nodes = [
        const("i2", [2]), const("i3", [3]), const("i4", [4]), const("zero", 0),
        const("one", 1), helper.make_node("Shape", ["s"], ["shape"]),
        helper.make_node("Slice", ["shape", "i2", "i3"], ["l1"]),
        helper.make_node("Slice", ["shape", "i3", "i4"], ["s1"]),
        helper.make_node("Squeeze", ["l1"], ["l"]), helper.make_node("Squeeze", ["s1"], ["n"]),
        helper.make_node("Range", ["zero", "l", "one"], ["rows"]),
        helper.make_node("Range", ["zero", "n", "one"], ["cols"]),
        helper.make_node("Unsqueeze", ["rows", "one"], ["rows2"]),
        helper.make_node("Greater", ["cols", "rows2"], ["above"]),
        helper.make_node("Constant", [], ["ninf"], value=_scalar("ninf", -np.inf, elem)),
        helper.make_node("Where", ["above", "ninf", "s"], ["s_out"]),
    ]
    return modifier("causal", nodes, elem)


def _if_mod(elem: int = _F32) -> GraphProto:
    """A modifier with a nested If whose branches reuse names of the body around them."""
    then = helper.make_graph([helper.make_node("Neg", ["s"], ["Scores"])], "then", [],
                             [helper.make_tensor_value_info("Scores", elem, None)])
    other = helper.make_graph([helper.make_node("Identity", ["s"], ["Probs"])], "else", [],
                              [helper.make_tensor_value_info("Probs", elem, None)])
    return modifier("if_mod", [helper.make_node("If", ["flag"], ["s_out"], then_branch=then,
                                                else_branch=other)], elem,
                    [helper.make_tensor("flag", TensorProto.BOOL, [], [True])])


def _halve_mod(elem: int = _F32) -> GraphProto:
    return modifier("halve", [helper.make_node("Mul", ["s", "half"], ["s_out"])], elem,
                    [_scalar("half", 0.5, elem)])


def _flex_sample(name, q_heads=2, kv_heads=2, e=4, ev=4, opset=26, dtypes=("float",),
                 **attributes) -> OpSample:
    return OpSample([f"T[2,{q_heads},3,{e}]", f"T[2,{kv_heads},5,{e}]",
                     f"T[2,{kv_heads},5,{ev}]"], attributes=attributes, opset=opset,
                    dtypes=list(dtypes), name=name,
                    tolerance=(1e-2, 2e-3) if "float16" in dtypes else None)


def _flex_samples() -> list[OpSample]:
    return [
        _flex_sample("default"), _flex_sample("scale", scale=0.3),
        _flex_sample("gqa", q_heads=4, kv_heads=2), _flex_sample("head-sizes", e=6, ev=3),
        _flex_sample("score-mod", score_mod=bias_mod()),
        _flex_sample("causal", score_mod=causal_mod()),
        _flex_sample("prob-mod", prob_mod=_halve_mod()),
        _flex_sample("both-mods-nested-if", score_mod=_if_mod(), prob_mod=_halve_mod(),
                     scale=0.5),
        _flex_sample("double-softmax", softmax_precision=_F64, score_mod=bias_mod(0.25, _F64)),
        _flex_sample("gqa-causal", opset=13, q_heads=4, kv_heads=1, score_mod=causal_mod()),
        _flex_sample("bias", q_heads=4, kv_heads=2, score_mod=bias_mod(0.5, _F64),
                     dtypes=("double",)),
        # float16: the softmax in float32 by default
        _flex_sample("bias", q_heads=4, kv_heads=2, score_mod=bias_mod(0.5),
                     dtypes=("float16",)),
    ]


_KINDS = {"Adagrad": "XGH", "Adam": "XGVH", "Momentum": "XGV"}
_OPTIMIZER_ATTRIBUTES = {
    "Adagrad": [{}, dict(decay_factor=0.1, epsilon=1e-3, norm_coefficient=0.01)],
    "Adam": [{}, dict(alpha=0.8, beta=0.95, epsilon=1e-4, norm_coefficient=0.02,
                      norm_coefficient_post=0.05)],
    "Momentum": [dict(alpha=0.9, beta=0.5, mode="standard", norm_coefficient=0.01),
                 dict(alpha=0.95, beta=0.7, mode="nesterov", norm_coefficient=0.001)],
}


def _optimizer_sample(op_type: str, attributes: dict, count: int, t: int, opset: int = 13,
                      dtypes=("float",), rate: str = "T", oracle: str | None = None) -> OpSample:
    shapes = ["[3,4]", "[5]", "[2,1,3]"]
    tensors = [Arg(f"T{shapes[i % 3]}", low=0 if kind == "H" else -2, high=2)
               for kind in _KINDS[op_type] for i in range(count)]
    outputs = ["T"] * (count * (len(_KINDS[op_type]) - 1))
    variant = "defaults" if not attributes else attributes.get("mode", "attributes")
    return OpSample([Arg(f"{rate}[]", values=0.1), Arg("int64[]", values=t), *tensors],
                    outputs, attributes, opset=opset, dtypes=list(dtypes), oracle=oracle,
                    name=f"{variant}-{count}x-t{t}" + (f"-rate-{rate}" if rate != "T" else ""))


def _optimizer_samples(op_type: str) -> list[OpSample]:
    """Each attribute set with 1 and 3 float tensors, 2 double ones, at T = 0 and 3 (the
    branches of Adam's and Momentum's T > 0); one at opset 9."""
    samples = [_optimizer_sample(op_type, attributes, count, t, dtypes=dtypes)
               for attributes in _OPTIMIZER_ATTRIBUTES[op_type] for t in (0, 3)
               for count, dtypes in ((1, ("float",)), (3, ("float",)), (2, ("double",)))]
    return samples + [_optimizer_sample(op_type, _OPTIMIZER_ATTRIBUTES[op_type][-1], 2, 4,
                                        opset=9)]


def _reference_in_tensor_types(op_type: str, arrays, attributes) -> tuple:
    """The reference evaluator's optimizer, its outputs in the tensors' type as the spec
    defines them (``T3``): the evaluator's Adam returns float64 for one float tensor and
    float32 for several double ones, and every optimizer follows a double ``R``."""
    from onnx.reference import ReferenceEvaluator

    names = [f"i{k}" for k in range(len(arrays))]
    kinds = _KINDS[op_type]
    outputs = [f"o{k}" for k in range((len(arrays) - 2) // len(kinds) * (len(kinds) - 1))]
    node = helper.make_node(op_type, names, outputs, domain=TRAINING, **attributes)
    graph = helper.make_graph([node], op_type, [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in zip(names, arrays)], [helper.make_value_info(o, helper.TypeProto())
                                          for o in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid(TRAINING, 1)])
    results = ReferenceEvaluator(model).run(None, dict(zip(names, arrays)))
    return tuple(np.asarray(r).astype(arrays[2].dtype) for r in results)


def adagrad_reference(*arrays, **attributes):
    """``Adagrad`` by the reference evaluator, outputs in the tensors' type."""
    return _reference_in_tensor_types("Adagrad", arrays, attributes)


def adam_reference(*arrays, **attributes):
    """``Adam`` by the reference evaluator, outputs in the tensors' type."""
    return _reference_in_tensor_types("Adam", arrays, attributes)


def momentum_reference(*arrays, **attributes):
    """``Momentum`` by the reference evaluator, outputs in the tensors' type."""
    return _reference_in_tensor_types("Momentum", arrays, attributes)


@hookimpl
def register_decompositions(registry) -> None:
    registry.add(PREVIEW, "FlexAttention", build_flex_attention, opsets=FLEX_OPSETS,
                 dtypes=("float", "double", "float16"),
                 description="onnx-preview:FlexAttention (score_mod/prob_mod spliced in)",
                 oracle="reference", samples=_flex_samples())
    for op_type, builder in (("Adagrad", build_adagrad), ("Adam", build_adam),
                             ("Momentum", build_momentum)):
        # the evaluator's output types are off for Adam, and for any optimizer given a
        # double rate: there the outputs are taken in the tensors' type
        in_tensor_types = f"rewriter_plugins.onnx_preview:{op_type.lower()}_reference"
        registry.add(TRAINING, op_type, builder, opsets=TRAINING_OPSETS,
                     dtypes=("float", "double"), description=f"onnx-preview:{op_type}",
                     oracle=in_tensor_types if op_type == "Adam" else "reference",
                     samples=_optimizer_samples(op_type))
        # a model importing the training domain only; the rate double, the tensors float
        double_rate = _optimizer_sample(op_type, _OPTIMIZER_ATTRIBUTES[op_type][-1], 2, 2,
                                        opset=0, rate="double", oracle=in_tensor_types)
        registry.add(TRAINING, op_type, _no_ai_onnx_import(builder), opsets=NO_IMPORT_OPSETS,
                     dtypes=("float", "double"),
                     description=f"onnx-preview:{op_type} (model imports no ai.onnx opset; "
                                 f"the body imports ai.onnx {NO_IMPORT_BODY_OPSET})",
                     oracle=in_tensor_types, samples=[double_rate])


def _no_ai_onnx_import(builder):
    """``builder`` for models that import no ai.onnx opset at all (the engine plans them at
    opset 1); a model that really imports ai.onnx 1 is declined."""

    def build(ctx: DecompositionContext) -> FunctionProto | None:
        if "" in ctx.opsets:
            raise Declined("the model imports ai.onnx opset 1 (the decomposition is for "
                           "models importing no ai.onnx opset)")
        return builder(ctx)

    build.__name__ = f"{builder.__name__}_no_ai_onnx_import"
    return build
