"""tract's answer on a probe model (one node, or a small whole model): loaded, typed and
optimized (:func:`probe_here`, and run once on zeros where it can), asked in a worker process
(:func:`probe`: tract panics on some models, and a panic across its C API aborts the
process); the symbols a probe gives inputs of unknown dimensions (:func:`symbolic`,
:func:`named_dims`) and a refusal about them (:func:`probe_made`)."""

from __future__ import annotations

import re

from rewriter.plugin import NodeQuery, ProbeCrashed, ProbeWorker, probe_models

from .runtime import clean_message, load, runnable, runnable_by_routes

_TYPE_WORDS = re.compile(r"DatumType|datum type|element type|not supported for type|"
                         r"Unsupported type|type mismatch", re.IGNORECASE)
PROBE_TIMEOUT_S = 60
_WORKER: list[ProbeWorker] = []  # the process's probe worker, once started


def probe(model_bytes: bytes, op_label: str, whole: bool = False) -> tuple[str, str] | None:
    """What tract says about a small model: None if it loads, types and optimizes; else
    (reason, detail). ``whole``: a whole model, whose outputs tract must also be able to
    hand out. Asked in the probe worker (:class:`rewriter.plugin.ProbeWorker`, answering
    with :func:`probe_here`): tract panics on some models, and a panic across its C API
    aborts the process. When tract crashes it (a Rust panic aborts) or takes longer than
    PROBE_TIMEOUT_S, that is the verdict on the model asked about, and the next question
    starts a new worker."""
    if not _WORKER:
        _WORKER.append(ProbeWorker("rewriter_plugins.tract_target.probes:probe_here",
                                   PROBE_TIMEOUT_S,
                                   {"RUST_BACKTRACE": "0", "RUST_LIB_BACKTRACE": "0"}))
    try:
        return _WORKER[0].ask(model_bytes, op_label, whole)
    except ProbeCrashed as e:  # tract's last words as the verdict
        if e.timed_out:
            return ("runtime-refused", f"tract took longer than {PROBE_TIMEOUT_S}s to load, "
                    "type and optimize it")
        panic, said = e.panic()
        return ("runtime-refused", f"tract crashed loading, typing or optimizing it "
                f"({'a panic: ' if panic else ''}{said})")


def probe_here(model_bytes: bytes, op_label: str, whole: bool = False
               ) -> tuple[str, str] | None:
    """:func:`probe` in this process (a whole model by path and from bytes, stricter
    wins; a node from bytes)."""
    try:
        if whole:
            with probe_models.written(model_bytes) as path:
                model, refusal = runnable_by_routes(path, model_bytes)
            if refusal is not None:
                raise RuntimeError(refusal)
        else:
            model = runnable(model_bytes)
    except RuntimeError as e:
        stage, _, message = str(e).partition(": ")
    else:
        if whole:
            return _shape_outputs(model_bytes) or (
                _run_on_zeros(model, model_bytes) if len(model_bytes) <= _ZERO_RUN_BYTES
                else None)
        return _run_on_zeros(model, model_bytes)
    missing = re.search(r"Unimplemented\(([\w.]+)\)", message)
    if missing:
        return ("no-kernel", f"tract has no ONNX operator {missing.group(1)} (it loads "
                f"{op_label} as Unimplemented)")
    if _TYPE_WORDS.search(message):
        return ("type-binding", f"tract cannot {_STAGES[stage]} it: {message}")
    if stage == "load":
        # invalid for tract's loader: invalid when onnx's checker agrees, else a form of
        # the op tract does not load (skl2onnx's binary TreeEnsembleClassifier with a
        # base value per class), which a remedy may rewrite
        reason = "invalid-node" if _checker_refuses(model_bytes) else "runtime-refused"
        return (reason, f"tract's ONNX loader cannot load it: {message}")
    return ("runtime-refused", f"tract cannot {_STAGES[stage]} it: {message}")


def _checker_refuses(model_bytes: bytes) -> bool:
    """Whether onnx's checker refuses a node of the probe model against its schema (the
    probe's untyped values aside)."""
    import onnx

    try:
        model = onnx.ModelProto.FromString(model_bytes)
        ctx = onnx.checker.C.CheckerContext()
        ctx.ir_version = model.ir_version
        ctx.opset_imports = {o.domain: o.version for o in model.opset_import}
        for node in model.graph.node:
            onnx.checker.check_node(node, ctx)
    except Exception:  # noqa: BLE001 - the checker's ValidationError, or a parse error
        return True
    return False


# element types a probe is run on (zeros): floats, where no value of an input is an index,
# a shape or a divisor tract could refuse
_ZERO_RUN_TYPES = {1: "float32", 10: "float16", 11: "float64"}
_ZERO_RUN_BYTES = 4 * 2**20  # a whole model is run on zeros up to this size
FAILS_RUNNING = "tract types and optimizes it, but fails running it"
# tract's words when values disagree with the symbols or dimensions it typed a model with: in a
# probe whose dimensions we made up, about our construction, not the node
_CLASH_WORDS = re.compile(r"Clashing resolution|Impossible to unify|symbol", re.IGNORECASE)
_ELEMENTWISE = frozenset({"Abs", "Ceil", "Cos", "Erf", "Exp", "Floor", "IsInf", "IsNaN",
                          "Log", "Neg", "Reciprocal", "Relu", "Round", "Sigmoid", "Sign",
                          "Sin", "Sqrt", "Tanh"})


def _run_on_zeros(model, model_bytes: bytes) -> tuple[str, str] | None:
    """Run a probe (one node, or a small whole model) once on zeros when every input is a
    float tensor of a known shape: tract types some nodes it cannot evaluate (0.23.9:
    ``IsNaN`` and ``IsInf`` of double)."""
    import numpy as np
    from onnx import ModelProto

    graph = ModelProto.FromString(model_bytes).graph
    # an element-wise op runs on any shape: one element stands for unknown dimensions
    elementwise = len(graph.node) == 1 and not graph.node[0].domain and \
        graph.node[0].op_type in _ELEMENTWISE and not graph.initializer
    feeds, invented = [], False
    for value in graph.input:
        tensor = value.type.tensor_type
        dims = list(tensor.shape.dim) if tensor.HasField("shape") else None
        dtype = _ZERO_RUN_TYPES.get(tensor.elem_type)
        if dtype is None:
            return None
        if dims is not None and all(d.HasField("dim_value") for d in dims):
            feeds.append(np.zeros([d.dim_value for d in dims], dtype))
        elif elementwise:  # (known dimensions kept: a 1 where the model says 32 clashes)
            invented = True
            feeds.append(np.zeros([d.dim_value if d.HasField("dim_value") else 1
                                   for d in dims] if dims is not None else [1], dtype))
        else:
            return None
    try:
        model.run(feeds)
    except Exception as e:  # noqa: BLE001 - tract's TractError
        message = clean_message(str(e))
        if invented and _CLASH_WORDS.search(message):
            return None  # the dimensions we made up clash with the probe's symbols: ours
        return ("runtime-refused", f"{FAILS_RUNNING}: {message}")
    return None


def _shape_outputs(model_bytes: bytes) -> tuple[str, str] | None:
    """tract types a shape computed from shapes (``Shape``, ``Size`` and what follows them,
    casts included) as ``TDim``, which its API cannot hand out: a model with such an output
    loads but fails when its outputs are read."""
    from onnx import ModelProto

    typed = load(model_bytes).into_model()
    names = [o.name for o in ModelProto.FromString(model_bytes).graph.output]
    shaped = [repr(n) for i, n in enumerate(names)
              if i < typed.output_count() and str(typed.output_fact(i)).endswith("tdim")]
    if not shaped:
        return None
    return ("runtime-refused", f"tract computes the model's output(s) {', '.join(shaped)} "
            f"{AS_SHAPES}, a type its API cannot hand out")


AS_SHAPES = "as shapes (TDim)"


_STAGES = {"load": "load", "typing": "type", "optimizing": "optimize"}


def probe_made(message: str, query: NodeQuery) -> bool:
    """Whether tract's refusal of a probe names a symbol the probe made up (a dimension
    ``{input}_d{i}`` of an input of unknown shape, or ``unk__N`` of onnx's shape inference):
    it is about the probe's construction (symbols that do not broadcast or unify), and
    tract's answer on the whole model decides."""
    if "unk__" in message:
        return True
    return any(f"{name}_d" in message for name in query.inputs if name)


def named_dims(model):
    """``model`` with each graph input's anonymous dimensions (neither a size nor a name, as
    skl2onnx writes a batch of None) a symbol of its own: tract types no input with one
    ("Source node without a determined fact") while the caller who feeds it gives the
    shapes; the model itself when it has none."""
    from onnx import ModelProto

    def anonymous(v) -> bool:
        return v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape") and any(
            not d.HasField("dim_value") and not d.HasField("dim_param")
            for d in v.type.tensor_type.shape.dim)

    if not any(anonymous(v) for v in model.graph.input):
        return model
    named = ModelProto()
    named.CopyFrom(model)
    for v in named.graph.input:
        if anonymous(v):
            for i, d in enumerate(v.type.tensor_type.shape.dim):
                if not d.HasField("dim_value") and not d.HasField("dim_param"):
                    d.dim_param = f"{v.name}_d{i}"
    return named


def symbolic(proto, name: str, rank: int | None):
    """``proto`` with every unknown dimension a symbol of its own (tract types symbols, not
    unknowns); with ``rank``, an input of unknown rank gets that many symbols."""
    from onnx import TypeProto, helper

    if proto.WhichOneof("value") != "tensor_type":
        return proto
    shape = probe_models.shape_key(proto)
    if shape is None and rank is None:
        return proto
    dims = [f"{name}_d{i}" if d == "?" else d for i, d in enumerate(
        shape if shape is not None else ("?",) * rank)]
    out = TypeProto()
    out.CopyFrom(helper.make_tensor_type_proto(proto.tensor_type.elem_type, dims))
    return out
