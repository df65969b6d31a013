"""``ai.onnx.preview.training`` optimizers ``Adagrad``, ``Adam`` and ``Momentum`` over any
number of tensors, in standard ONNX."""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, TensorProto

from rewriter.plugin import Declined, DecompositionContext

from .common import BODY_DOMAIN, Body, body_opset, element_type, plain_attributes

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
    if not plain_attributes(node, defaults) or not all(node.input):
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
    tensor_types = {element_type(t) for t in types[2:] if t}
    if len(tensor_types) != 1:  # the spec has one type T3
        raise Declined("the tensors' element type is unknown or not one type")
    (elem,) = tensor_types
    if elem not in (TensorProto.FLOAT, TensorProto.DOUBLE):
        raise Declined("the tensors must be float or double")
    if element_type(types[0]) not in (None, TensorProto.FLOAT, TensorProto.DOUBLE):
        raise Declined("R must be float or double")
    if element_type(types[1]) not in (None, TensorProto.INT64):
        raise Declined("T must be int64")
    return values, count, elem


def _new_body(ctx: DecompositionContext, count: int, inputs: str, outputs: str) -> Body:
    """A body whose formal inputs are ``R, T`` and ``<kind><i>`` for each kind in
    ``inputs``; outputs ``<kind><i>_new`` for each kind in ``outputs``."""
    b = Body(body_opset(ctx))
    b.reserve(["R", "T"] + [f"{k}{i}" for k in inputs for i in range(count)])
    b.reserve([f"{k}{i}_new" for k in outputs for i in range(count)])
    return b


def _optimizer_function(name: str, count: int, inputs: str, outputs: str, body: Body
                        ) -> FunctionProto:
    return body.function(BODY_DOMAIN, name,
                         ["R", "T"] + [f"{k}{i}" for k in inputs for i in range(count)],
                         [f"{k}{i}_new" for k in outputs for i in range(count)])


def _regularized(b: Body, x: str, g: str, norm: str) -> str:
    return b.named("Add", [b.named("Mul", [norm, x], f"{x}Scaled"), g], f"{g}Regularized")


def build_adagrad(ctx: DecompositionContext) -> FunctionProto | None:
    """Adagrad over any number of tensors."""
    setup = _optimizer_setup(ctx, "Adagrad")
    values, count, elem = setup
    f64 = TensorProto.DOUBLE
    b = _new_body(ctx, count, "XGH", "XH")
    r_d = b.converted("R", f64, "RD", element_type(ctx.input_types[0]))
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
    r_d = b.converted("R", f64, "RD", element_type(ctx.input_types[0]))
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
    rate = b.converted("R", elem, "Rate", element_type(ctx.input_types[0]))
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
