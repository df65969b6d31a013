"""Target ``tract``: Sonos' tract inference engine (the ``tract`` package), an optional
dependency (``pip install 'onnx-graph-rewriter[tract]'``).

tract declares no operator table: its ONNX loader turns an op it has no translator for into
``Unimplemented(Op)``, and typing or optimizing the model is where it refuses what it cannot
run (an attribute value, a shape input it needs constant, an element type it has no datum
type for). So capability is tract's own answer: the whole model is loaded, typed
(``into_model``) and optimized for the CPU (``into_runnable``) in process when small enough;
otherwise one probe per distinct node signature (the node, its inputs' types and shapes,
its small constant inputs with their values), cached per process. ``confirm`` does the same
with the whole model in a child process and runs it once on generated inputs; ``prepare``
runs it (``compare``, inside the isolation worker), with the inputs' shapes set from the
feeds.
"""

from __future__ import annotations

import hashlib
import pickle
import re
from functools import cache

from rewriter_plugins.probe_models import (
    PROBE_CONSTANT_LIMIT,
    SMALL_CONSTANT_BYTES,
    VALUE_TYPES,
    external,
    inferred_shapes,
    model_constants,
    model_file,
    onnxruntime_runs,
    renamed,
    shape_key,
    tensor_bytes,
    written,
    zeros_like,
)

from rewriter.plugin import (
    RUN_BY_DEFAULT_BELOW,
    Confirmation,
    Finding,
    NodeQuery,
    Target,
    TargetError,
    TargetOptions,
    child_says,
    confirm_in_child,
    generated_feeds,
    hookimpl,
    model_size,
    run_sets,
)

NOT_INSTALLED = "tract is not installed: pip install 'onnx-graph-rewriter[tract]'"
CONFIRM_BY_DEFAULT_BELOW = 100 * 2**20  # bytes of model + external data
CONFIRM_TIMEOUT_S = 300
# The whole model is typed and optimized first (one answer for every node) up to this size.
_WHOLE_MODEL_MAX_NODES = 500
_SHAPE_INFERENCE_MAX_NODES = 20_000
# Ranks tried, in order, for a node input whose rank is unknown (tract types nothing without
# a rank): images, matrices, sequences, vectors, scalars.
_GUESSED_RANKS = (4, 2, 3, 1, 0, 5)
_SHAPE_WORDS = re.compile(r"\b(rank|shape|dimension|fact|symbol)", re.IGNORECASE)
_TYPE_WORDS = re.compile(r"DatumType|datum type|element type|not supported for type|"
                         r"Unsupported type|type mismatch", re.IGNORECASE)
# tract wants the value of an input (axes, a shape, pads) when it types the model: no shape
# given to the input changes that
_CONSTANT_WORDS = re.compile(r"\bconst(ant)?\b|is variable|known scalar|constant input",
                             re.IGNORECASE)
# ops whose first input may be one tract wants the value of (a shape, a bound, a size); of
# every other op, the first input is the data and the value wanted is of another
_VALUE_FIRST = frozenset({"ConstantOfShape", "Range", "HammingWindow", "HannWindow",
                          "BlackmanWindow"})
# ONNX element types tract loads (TensorProto: float, uint8, int8, uint16, int16, int32, int64,
# string, bool, float16, double, uint32, uint64)
_TRACT_TYPES = frozenset({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13})
# tract's datum type names for numpy's dtypes (input facts set from feeds)
_FACT_TYPES = {"float32": "f32", "float64": "f64", "float16": "f16", "int8": "i8",
               "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8", "uint16": "u16",
               "uint32": "u32", "uint64": "u64", "bool": "bool"}

# probe key -> None (runs) or (reason, detail): one cache per process
_VERDICTS: dict[tuple, tuple[str, str] | None] = {}


@cache
def _tract():
    try:
        import tract
    except ImportError:
        raise TargetError(NOT_INSTALLED) from None
    return tract


def version() -> str:
    return _tract().version()


def clean_message(text: str) -> str:
    """tract's error (a chain of causes, then a stack backtrace) as one line."""
    text = text.split("Stack backtrace:")[0]
    parts = [re.sub(r"^\d+: ", "", line.strip()) for line in text.splitlines()]
    parts = [p for p in parts if p and p != "Caused by:"]
    return ": ".join(dict.fromkeys(parts)) or "tract failed"


def load(model_bytes: bytes):
    """tract's ONNX loader on serialized bytes: an ``InferenceModel``."""
    import ctypes

    tract = _tract()
    from tract.bindings import check, lib
    from tract.inference_model import InferenceModel

    onnx = tract.onnx()
    ptr = ctypes.c_void_p()
    check(lib.tract_onnx_load_buffer(onnx.ptr, model_bytes, ctypes.c_size_t(len(model_bytes)),
                                     ctypes.byref(ptr)))
    return InferenceModel(ptr)


def runnable(model_bytes: bytes | None, feeds=None, *, path: str | None = None):
    """Load (from ``path`` as users do, ``tract.onnx().load(path)``, else from the bytes),
    type and optimize (tract's CPU runtime); with ``feeds``, each input's fact is set from
    its value's shape and type first. Raises tract's error, said by stage: "load: ...",
    "typing: ...", "optimizing: ..."."""
    stage = "load"
    try:
        model = _tract().onnx().load(path) if path is not None else load(model_bytes)
        stage = "typing"
        if feeds is not None:
            for i in range(model.input_count()):
                value = feeds.get(model.input_name(i))
                kind = None if value is None else _FACT_TYPES.get(value.dtype.name)
                if kind is not None:
                    model.set_input_fact(i, ",".join([*map(str, value.shape), kind]))
        typed = model.into_model()
        stage = "optimizing"
        return typed.into_runnable()
    except Exception as e:  # noqa: BLE001 - tract's TractError, said with its stage
        raise RuntimeError(f"{stage}: {clean_message(str(e))}") from None


# A whole model is asked by path as users load it (tract.onnx().load(path)) and from bytes
# (tract_onnx_load_buffer); the stricter answer wins, and a refusal by one says so.
BY_PATH = "tract.onnx().load(path)"
BY_BYTES = "tract's loader on bytes"


def runnable_by_routes(path: str | None, data: bytes, feeds=None):
    """(the runnable read by path, else from bytes; None and the refusal, with the route
    that refused, when either route refuses: "typing: ... [refused by tract.onnx().load(path);
    tract's loader on bytes loads it]")."""
    chosen, refusals, ok = None, [], []
    for route in (BY_PATH, BY_BYTES):
        if route == BY_PATH and path is None:
            continue
        try:
            model = runnable(data, feeds, path=path if route == BY_PATH else None)
        except RuntimeError as e:
            refusals.append((route, str(e)))
            continue
        ok.append(route)
        chosen = chosen or model
    if not refusals:
        return chosen, None
    route, message = refusals[0]
    said = ", ".join(r for r, _ in refusals)
    return None, message + (f" [refused by {said}; {ok[0]} loads it]" if ok else "")


def probe(model_bytes: bytes, op_label: str, whole: bool = False) -> tuple[str, str] | None:
    """What tract says about a small model: None if it loads, types and optimizes; else
    (reason, detail). ``whole``: a whole model, whose outputs tract must also be able to
    hand out. Asked in the probe worker (:class:`_ProbeWorker`): tract panics on some
    models, and a panic across its C API aborts the process."""
    global _WORKER
    if _WORKER is None:
        _WORKER = _ProbeWorker()
    return _WORKER.ask(model_bytes, op_label, whole)


def probe_here(model_bytes: bytes, op_label: str, whole: bool = False
               ) -> tuple[str, str] | None:
    """:func:`probe` in this process (a whole model by path and from bytes, stricter
    wins; a node from bytes)."""
    try:
        if whole:
            with written(model_bytes) as path:
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
        return ("invalid-node", f"tract's ONNX loader cannot load it: {message}")
    return ("runtime-refused", f"tract cannot {_STAGES[stage]} it: {message}")


# element types a probe is run on (zeros): floats, where no value of an input is an index,
# a shape or a divisor tract could refuse
_ZERO_RUN_TYPES = {1: "float32", 10: "float16", 11: "float64"}
_ZERO_RUN_BYTES = 4 * 2**20  # a whole model is run on zeros up to this size
_FAILS_RUNNING = "tract types and optimizes it, but fails running it"
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
        return ("runtime-refused", f"{_FAILS_RUNNING}: {message}")
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
            f"{_AS_SHAPES}, a type its API cannot hand out")


_AS_SHAPES = "as shapes (TDim)"


_STAGES = {"load": "load", "typing": "type", "optimizing": "optimize"}
_TOO_BIG = ("runtime-refused", "not asked: the model is too large to type whole")
PROBE_TIMEOUT_S = 60
_WORKER: _ProbeWorker | None = None


class _ProbeWorker:
    """A child process answering :func:`probe_here` questions, one at a time (pickles on
    its stdin and stdout). When tract crashes it (a Rust panic aborts) or takes longer
    than PROBE_TIMEOUT_S, that is the verdict on the model asked about, and the next
    question starts a new child."""

    def __init__(self) -> None:
        self.proc = None
        self.stderr = None

    def _start(self) -> None:
        import os
        import subprocess
        import sys
        import tempfile

        self.stderr = tempfile.TemporaryFile()
        env = dict(os.environ, RUST_BACKTRACE="0", RUST_LIB_BACKTRACE="0")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from rewriter_plugins.tract_target import probe_server\n"
             "probe_server()\n"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self.stderr, env=env)

    def ask(self, model_bytes: bytes, op_label: str, whole: bool = False
            ) -> tuple[str, str] | None:
        import select
        import struct

        if self.proc is None or self.proc.poll() is not None:
            self._start()
        request = pickle.dumps((model_bytes, op_label, whole))
        ready = [self.proc.stdout]  # an error writing: the child is gone, not slow
        try:
            self.proc.stdin.write(struct.pack("<Q", len(request)) + request)
            self.proc.stdin.flush()
            ready, _, _ = select.select([self.proc.stdout], [], [], PROBE_TIMEOUT_S)
            header = self.proc.stdout.read(8) if ready else b""
            if len(header) == 8:
                return pickle.loads(self.proc.stdout.read(struct.unpack("<Q", header)[0]))
        except (BrokenPipeError, OSError, EOFError, pickle.UnpicklingError):
            pass
        return self._failed(bool(ready))

    def _failed(self, answered: bool) -> tuple[str, str]:
        """The child died (or hung: it is killed): tract's last words as the verdict."""
        self.proc.kill()
        self.proc.wait()
        self.stderr.seek(0)
        lines = [ln.strip() for ln in self.stderr.read().decode(errors="replace").splitlines()
                 if ln.strip()]
        self.stderr.close()
        self.proc = None
        if not answered:
            return ("runtime-refused", f"tract took longer than {PROBE_TIMEOUT_S}s to load, "
                    "type and optimize it")
        panic = next((ln for ln in lines if "panicked at" in ln), None)
        index = lines.index(panic) if panic else -1
        said = lines[index + 1] if panic and index + 1 < len(lines) else (
            lines[-1] if lines else "no message")
        return ("runtime-refused", f"tract crashed loading, typing or optimizing it "
                f"({'a panic: ' if panic else ''}{said})")


def probe_server() -> None:
    """The probe worker's loop (:class:`_ProbeWorker`): a question per pickle on stdin, an
    answer per pickle on stdout; ends at the end of stdin (its parent is gone)."""
    import struct
    import sys

    try:  # Linux: killed with the parent, even when tract hangs
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write on the answers' channel
    while True:
        header = stdin.read(8)
        if len(header) < 8:
            return
        model_bytes, op_label, whole = pickle.loads(stdin.read(struct.unpack("<Q", header)[0]))
        answer = pickle.dumps(probe_here(model_bytes, op_label, whole))
        stdout.write(struct.pack("<Q", len(answer)) + answer)
        stdout.flush()


def _named(message: str, producers: dict[str, str]) -> str:
    """tract names a node by its name (an unnamed node by its first output): say it the way
    rewriter.detect.targets.refused_node reads ("node with name 'N'", "the node of output
    'y'"): "node #37 "N" Pad", "Evaluating #2 "y" Dropout"."""
    m = re.search(r'#\d+ "([^"]*)"', message)
    if not m:
        return message
    name = m.group(1)
    if name in producers.values() and name:
        return f"{message} (node with name '{name}')"
    if name in producers:
        return f"{message} (the node of output '{name}')"
    return message


class TractTarget(Target):
    """tract's ONNX loader and its CPU runtime."""

    def __init__(self, options: TargetOptions | None = None) -> None:
        options = options or TargetOptions()
        self.name = "tract"
        self.description = f"tract {version()} (CPU)"
        self.confirm_option = options.confirm
        self.plugins = options.plugins
        self._constants: dict = {}
        self._shapes: dict = {}
        self._model_runs = False
        # the node tract's refusal of the whole model last checked names: path -> verdict
        self._blamed: dict[str, tuple[str, str]] = {}
        self._unplaced: Finding | None = None  # a refusal of it that names no node
        self._graph_inputs: set[str] = set()
        self._confirmations: dict[tuple, Confirmation] = {}

    @property
    def schemas(self):
        """onnxruntime's schema registry: onnx's plus the contrib domains (com.microsoft),
        whose output types the walk then knows (a probe needs its inputs' types)."""
        from rewriter.plugin import onnxruntime_schemas

        return onnxruntime_schemas()

    # -- model-level --------------------------------------------------------------------------

    def check_model(self, model) -> list[Finding]:
        """Remember the model's constants and shapes for the node probes; type and optimize
        the whole model when it is small (then no node needs a probe)."""
        self._constants = model_constants(model)
        self._graph_inputs = {i.name for i in model.graph.input} - set(self._constants)
        self._shapes = {}
        self._blamed = {}
        self._unplaced = None
        verdict = self._whole_model_verdict(model)
        # outputs typed as shapes: every node runs, the model's outputs cannot be read
        shaped = verdict is not None and _AS_SHAPES in verdict[1]
        self._model_runs = verdict is None or shaped
        if not self._model_runs and len(model.graph.node) <= _SHAPE_INFERENCE_MAX_NODES:
            self._shapes = inferred_shapes(model)
        strings = self._string_findings(model)
        if shaped:
            return [Finding(target=self.name, path="model", domain="", op_type="",
                            version=None, reason=verdict[0], detail=verdict[1]), *strings]
        if self._model_runs:
            return strings
        return self._interface_findings(model) or [*strings, *self._blame(model, verdict)]

    def _blame(self, model, verdict) -> list[Finding]:
        """The node tract's own refusal of the whole model names (``Failed analyse for node
        #37 "name" Pad``): found whatever its probe says (:meth:`check_node`); a finding on
        the model when the refusal names none, nor any node of an op it says it lacks."""
        from rewriter.plugin import iter_nodes, refused_node

        if verdict is _TOO_BIG:
            return []  # not asked: the probes decide
        producers = {o: site.node.name for site in iter_nodes(model)
                     for o in site.node.output if o}
        detail = _named(verdict[1], producers)
        site = refused_node(model, detail)
        if site is not None:
            self._blamed[site.path] = (verdict[0], detail)
            return []
        missing = {m for pair in re.findall(r"Unimplemented\(([\w.]+)\)|no ONNX operator "
                                            r"([\w.]+)", detail) for m in pair if m}
        if missing & {s.node.op_type for s in iter_nodes(model)}:
            return []  # the probes of those nodes say it
        self._unplaced = Finding(target=self.name, path="model", domain="", op_type="",
                                 version=None, reason=verdict[0],
                                 detail=f"tract refuses the whole model: {detail}")
        return []

    def _interface_findings(self, model) -> list[Finding]:
        """A graph input or output of an element type tract has no datum type for (float8,
        4- and 2-bit integers, bfloat16...): tract loads no such model, and no rewrite
        changes a model's interface."""
        from onnx import TensorProto

        out = []
        for kind, values in (("input", model.graph.input), ("output", model.graph.output)):
            for v in values:
                elem = v.type.tensor_type.elem_type if v.type.HasField("tensor_type") else 0
                if elem and elem not in _TRACT_TYPES:
                    out.append(Finding(
                        target=self.name, path="model", domain="", op_type="", version=None,
                        reason="type-binding",
                        detail=f"the model's {kind} {v.name!r} is "
                        f"{TensorProto.DataType.Name(elem).lower()}, a type tract has no "
                        "datum type for"))
        return out

    def _string_findings(self, model) -> list[Finding]:
        """A graph input or output that is a string tensor: tract loads and runs such a model,
        but its Python API neither takes nor hands out a string tensor ("Unsupported
        DatumType in the public API String"), so no caller gets at that value; a rewrite
        of the nodes does not change the model's interface."""
        from onnx import TensorProto

        out = []
        for kind, values, verb in (("input", model.graph.input, "take"),
                                   ("output", model.graph.output, "return")):
            for v in values:
                if v.name in self._constants or not v.type.HasField("tensor_type"):
                    continue
                if v.type.tensor_type.elem_type == TensorProto.STRING:
                    out.append(Finding(
                        target=self.name, path="model", domain="", op_type="", version=None,
                        reason="type-binding",
                        value=v.name,
                        detail=f"{kind} {v.name!r} is a string tensor: tract's Python API "
                        f"cannot {verb} one (Unsupported DatumType in the public API "
                        "String); " + ("--adapt-interface rewrites a classifier's string "
                                       "labels to int64 indices (the label table in the "
                                       "model's metadata)" if kind == "output" else
                                       "--adapt-interface adapts outputs only")))
        return out

    def _whole_model_verdict(self, model) -> tuple[str, str] | None:
        """tract's verdict on the whole model (None: it runs), when it is small enough to
        ask; else a placeholder refusal (the nodes are probed one by one)."""
        from rewriter.plugin import iter_tensors

        too_big = _TOO_BIG
        if len(model.graph.node) > _WHOLE_MODEL_MAX_NODES:
            return too_big
        if model.ByteSize() > CONFIRM_BY_DEFAULT_BELOW:
            return too_big
        if any(external(t) for _, t in iter_tensors(model)):
            return too_big
        data = _named_dims(model).SerializeToString()
        key = ("model", hashlib.sha256(data).digest())
        if key not in _VERDICTS:
            _VERDICTS[key] = probe(data, "the model", whole=True)
        return _VERDICTS[key]

    def check_done(self, model, findings) -> list[Finding]:
        """The runtime's refusal of the whole model that names no node (see
        :meth:`_blame`), when no node finding of this target explains it."""
        unplaced, self._unplaced = self._unplaced, None
        if unplaced is None or any(f.target == self.name for f in findings):
            return []
        return [unplaced]

    # -- per node -----------------------------------------------------------------------------

    def check_node(self, query: NodeQuery) -> Finding | None:
        node = query.node
        in_body = "/<body>/" in query.path  # the planner asking about a decomposition body
        if self._training_dropout(query, in_body):
            return self.finding(query, "runtime-refused", "tract runs Dropout in training "
                                "mode only with a ratio of 0 (its training_mode is not a "
                                "constant false, its ratio not a constant 0)")
        if self._model_runs and not in_body:
            return None
        label = f"{query.domain or 'ai.onnx'}::{node.op_type}"
        build, key, unranked = self._probe_model(query, in_body)
        if key not in _VERDICTS:
            verdict = probe(build(None).SerializeToString(), label)
            if verdict is not None and unranked and verdict[0] != "no-kernel" and \
                    not _CONSTANT_WORDS.search(verdict[1]):
                verdict = self._with_guessed_ranks(build, label, verdict, in_body)
            _VERDICTS[key] = verdict
        verdict = _VERDICTS[key]
        if verdict is not None and _CONSTANT_WORDS.search(verdict[1]) and \
                not self._fed(query, in_body):
            # tract wants an input's value, and the node's non-constant inputs are computed
            # (a Reshape's shape from Shape and Concat): typing the whole model folds what it
            # can; the confirmation (or, after a rewrite, the verification) decides
            verdict = None
        if verdict is not None and _probe_made(verdict[1], query):
            verdict = None  # about the symbols the probe gave the node, not the node
        if verdict is None:  # a node tract's refusal of the whole model names is found
            verdict = None if in_body else self._blamed.get(query.path)
        return None if verdict is None else self.finding(query, verdict[0], verdict[1])

    def _training_dropout(self, query: NodeQuery, in_body: bool) -> bool:
        """A Dropout in training mode (a constant true) with a non-zero ratio (a constant, or
        the default): tract types and optimizes it, and refuses it only when it runs."""
        if query.domain or query.node.op_type != "Dropout" or len(query.inputs) < 3 or \
                not query.inputs[2]:
            return False
        import numpy as np
        from onnx import numpy_helper

        constants = query.constants if in_body else self._constants

        def value(name):
            tensor = constants.get(name) if name else None
            return None if tensor is None or external(tensor) else numpy_helper.to_array(
                tensor)

        training = value(query.inputs[2])
        ratio = value(query.inputs[1]) if query.inputs[1] else 0.5  # the default
        # values fed when it runs decide: a rewrite could not do better (no form of a
        # random draw tract loads), and a ratio fed as 0 runs
        return training is not None and bool(training.any()) and ratio is not None and \
            bool(np.any(ratio))

    def _fed(self, query: NodeQuery, in_body: bool) -> bool:
        """Whether some non-constant input of the node is an input of the main graph (its
        value is known only when the model runs). In a decomposition body: whether some
        input is computed from such a value (the planner's ``caller_fed``): a body that
        keeps it dynamic where tract wants a constant is declined, and another remedy
        tried."""
        if in_body:
            # the refusal is about an input other than the data (its first input), unless
            # the first is a size or a bound itself
            wanted = query.inputs if query.node.op_type in _VALUE_FIRST else query.inputs[1:]
            return any(n in query.caller_fed and n not in query.constants for n in wanted)
        return any(n in self._graph_inputs for n in query.inputs
                   if n and n not in self._constants)

    def _with_guessed_ranks(self, build, label: str, verdict, in_body: bool):
        """An input of unknown rank: the node runs if tract types it with some common rank
        (each dimension a symbol). When every refusal is about shapes, the node is given the
        benefit of the doubt: tract checks a reshape's volume or a broadcast against the
        dimensions it is given, and the real ones are unknown here (a decomposition body's,
        or a value shape inference could not follow). The whole model is loaded and run
        afterwards (``confirm``; after a rewrite, the verification), with its real
        shapes."""
        shape_bound = _SHAPE_WORDS.search(verdict[1]) is not None
        for rank in _GUESSED_RANKS:
            answer = probe(build(rank).SerializeToString(), label)
            if answer is None or answer[0] == "no-kernel" or \
                    _CONSTANT_WORDS.search(answer[1]) or _FAILS_RUNNING in answer[1]:
                return answer  # it runs; or, typed at last, tract has no such op, wants
                # an input's value or cannot evaluate it
            shape_bound = shape_bound or _SHAPE_WORDS.search(answer[1]) is not None
        return None if shape_bound else verdict

    def _input_proto(self, name: str, query: NodeQuery, in_body: bool):
        from rewriter.plugin import type_proto

        candidates = [query.declared.get(name)]
        if not in_body:
            candidates.append(self._shapes.get(name))
        known = [p for p in candidates if p is not None and p.WhichOneof("value") is not None]
        shaped = next((p for p in known if shape_key(p) is not None), None)
        return shaped or (known[0] if known else type_proto(query.types.get(name)))

    def _probe_model(self, query: NodeQuery, in_body: bool):
        """(a function building the one-node model, given a rank for inputs of unknown rank;
        the verdict's key; whether some input's rank is unknown)."""
        from onnx import TensorProto, TypeProto, helper

        from rewriter.plugin import outer_references

        node = query.node
        constants = dict(query.constants) if in_body else self._constants
        parts, key_inputs, seen, unranked = [], [], set(), False
        names = [n for n in query.inputs if n]
        if node.attribute:
            names += outer_references(node)
        for name in names:
            if name in seen:
                continue
            seen.add(name)
            tensor = constants.get(name)
            if tensor is not None and not external(tensor):
                size = tensor_bytes(tensor)
                if size <= SMALL_CONSTANT_BYTES:
                    parts.append((name, tensor, False))
                    key_inputs.append(("const", tensor.SerializeToString())
                                      if tensor.data_type in VALUE_TYPES else
                                      ("weight", tensor.data_type, tuple(tensor.dims)))
                    continue
                if size <= PROBE_CONSTANT_LIMIT:
                    parts.append((name, tensor, True))
                    key_inputs.append(("weight", tensor.data_type, tuple(tensor.dims)))
                    continue
            proto = self._input_proto(name, query, in_body)
            if proto is None:
                proto = helper.make_tensor_type_proto(TensorProto.FLOAT, None)
            shape = shape_key(proto)
            unranked = unranked or (shape is None and proto.WhichOneof("value") == "tensor_type")
            parts.append((name, proto, None))
            key_inputs.append((query.types.get(name), shape))
        versions = dict(query.opsets)
        if query.opset is not None:
            versions[query.domain] = query.opset
        versions.setdefault("", 21)
        attributes = hashlib.sha256(b"".join(
            a.SerializeToString(deterministic=True) for a in node.attribute)).digest()
        key = (query.domain, node.op_type, query.opset, tuple(sorted(versions.items())),
               tuple(key_inputs), attributes, tuple(bool(o) for o in query.outputs),
               tuple(bool(i) for i in query.inputs))

        def build(rank: int | None):
            inputs, initializers = [], []
            for name, value, zeros in parts:
                if zeros is None:
                    inputs.append(helper.make_value_info(name, _symbolic(value, name, rank)))
                else:
                    tensor = renamed(value, name)
                    initializers.append(zeros_like(tensor) if zeros else tensor)
            outputs = [helper.make_value_info(o, TypeProto()) for o in query.outputs if o]
            graph = helper.make_graph([node], "probe", inputs, outputs, initializers)
            opsets = [helper.make_opsetid(d, v) for d, v in versions.items()]
            model = helper.make_model(graph, opset_imports=opsets)
            model.ir_version = max(
                helper.find_min_ir_version_for(opsets, ignore_unknown=True), 8)
            return model

        return build, key, unranked

    # -- confirmation and runs ----------------------------------------------------------------

    def kernel_problem(self, remedy) -> str | None:
        return "tract runs no Python or onnxruntime custom-op kernels"

    def wants_confirm(self, loaded) -> bool:
        return self.confirm_by_size(self.confirm_option, loaded, CONFIRM_BY_DEFAULT_BELOW)

    def confirm(self, model, base_dir) -> str | None:
        return self.confirmation(model, base_dir).refusal

    def confirmation(self, model, base_dir) -> Confirmation:
        """Load, type and optimize the whole model in a child process as users do, by path
        (``tract.onnx().load(path)``: the model written to a private temporary folder with
        its external data beside it), and from bytes (the stricter answer wins, and says
        which route refused) and, for models up to RUN_BY_DEFAULT_BELOW bytes, run the one
        read by path once there on generated inputs (their shapes set as the inputs' facts).
        Cached per model bytes and folder."""
        from rewriter.plugin import iter_nodes

        try:
            data = _with_weights(model, base_dir).SerializeToString()
        except (OSError, ValueError) as e:
            return Confirmation(f"cannot read the model's external data: {e}", "load")
        key = (hashlib.sha256(data).digest(), str(base_dir))
        if key in self._confirmations:
            return self._confirmations[key]
        feeds, note = None, f"not run: larger than {RUN_BY_DEFAULT_BELOW // 2**20} MiB"
        if self.confirm_by_size(None, model_size(model, base_dir), RUN_BY_DEFAULT_BELOW):
            feeds, note = generated_feeds(model)
        producers = {o: site.node.name for site in iter_nodes(model)
                     for o in site.node.output if o}
        script = "from rewriter_plugins.tract_target import confirm_child\nconfirm_child()\n"
        try:
            with model_file(model, base_dir) as file:
                payload = pickle.dumps({"model": data, "path": file.path, "feeds": feeds,
                                        "producers": producers})
                result = confirm_in_child(self, "tract", [script], payload, base_dir,
                                          CONFIRM_TIMEOUT_S)
        except ValueError as e:  # an external-data location leaving the model's folder
            return Confirmation(str(e), "load")
        note = "; ".join(n for n in (file.note, note) if n)
        if note and result.refusal is None and not result.note:
            result = Confirmation(ran=result.ran, note=note)
        self._confirmations[key] = result
        return result

    def prepare(self, model, base_dir):
        """A run function: feeds by input name -> outputs by the model's output names. The
        model is read by path as users read it (written to a private temporary folder with
        its external data beside it, removed once the run function is gone; from bytes
        when it cannot be put there), typed and optimized for the shapes of the first
        feeds of each shape."""
        import contextlib
        import weakref

        stack = contextlib.ExitStack()
        try:
            path = stack.enter_context(model_file(model, base_dir)).path
        except ValueError as e:
            raise RuntimeError(str(e)) from None
        data = _with_weights(model, base_dir).SerializeToString() if path is None else None
        outputs = [o.name for o in model.graph.output]
        try:
            probe_model = _tract().onnx().load(path) if path is not None else load(data)
        except Exception:
            stack.close()
            raise
        inputs = [probe_model.input_name(i) for i in range(probe_model.input_count())]
        del probe_model
        runnables: dict[tuple, object] = {}

        def run(feeds):
            import numpy as np

            assert stack  # the model's file lives as long as the run function
            missing = [name for name in inputs if name not in feeds]
            if missing:
                raise RuntimeError(f"no value given for input(s) {', '.join(missing)}")
            given = {name: np.asarray(feeds[name]) for name in inputs}
            key = tuple((v.shape, v.dtype.str) for v in given.values())
            if key not in runnables:
                runnables[key] = runnable(data, given, path=path)
            try:
                values = runnables[key].run([given[name] for name in inputs])
            except Exception as e:  # noqa: BLE001
                raise RuntimeError(f"tract failed running the model: "
                                   f"{clean_message(str(e))}") from None
            return {name: np.array(v.to_numpy(), copy=True)
                    for name, v in zip(outputs, values)}

        weakref.finalize(run, stack.close)
        return run


def _probe_made(message: str, query: NodeQuery) -> bool:
    """Whether tract's refusal of a probe names a symbol the probe made up (a dimension
    ``{input}_d{i}`` of an input of unknown shape, or ``unk__N`` of onnx's shape inference):
    it is about the probe's construction (symbols that do not broadcast or unify), and
    tract's answer on the whole model decides."""
    if "unk__" in message:
        return True
    return any(f"{name}_d" in message for name in query.inputs if name)


def _named_dims(model):
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


def _symbolic(proto, name: str, rank: int | None):
    """``proto`` with every unknown dimension a symbol of its own (tract types symbols, not
    unknowns); with ``rank``, an input of unknown rank gets that many symbols."""
    from onnx import TypeProto, helper

    if proto.WhichOneof("value") != "tensor_type":
        return proto
    shape = shape_key(proto)
    if shape is None and rank is None:
        return proto
    dims = [f"{name}_d{i}" if d == "?" else d for i, d in enumerate(
        shape if shape is not None else ("?",) * rank)]
    out = TypeProto()
    out.CopyFrom(helper.make_tensor_type_proto(proto.tensor_type.elem_type, dims))
    return out


def _with_weights(model, base_dir):
    """``model`` with its external data read in (tract is given bytes, not files)."""
    from rewriter.plugin import iter_tensors

    if not any(external(t) for _, t in iter_tensors(model)):
        return model
    from onnx import ModelProto
    from onnx.external_data_helper import load_external_data_for_model

    copy = ModelProto()
    copy.CopyFrom(model)
    load_external_data_for_model(copy, str(base_dir or "."))
    return copy


def confirm_child() -> None:
    """The confirming child (``TractTarget.confirmation``): stdin a pickle of {"model":
    bytes, "path": the model as a file (None: not asked by path), "feeds": [input sets] or
    None, "producers": {value: node name}}; loads, types and optimizes by path and from
    bytes (:func:`runnable_by_routes`), then runs the input sets until one runs."""
    import sys

    job = pickle.load(sys.stdin.buffer)
    data, sets, path = job["model"], job["feeds"], job["path"]
    model, refusal = runnable_by_routes(path, data, sets[0] if sets else None)
    if refusal is not None:
        child_says("load", _named(refusal, job["producers"]))
        return
    child_says("loaded")
    if sets is None:
        return
    loaded = _tract().onnx().load(path) if path is not None else load(data)
    names = [loaded.input_name(i) for i in range(loaded.input_count())]

    def run(feeds):
        try:
            model.run([feeds[n] for n in names])
        except Exception as e:  # noqa: BLE001
            raise RuntimeError(clean_message(str(e))) from None

    error, values = run_sets(run, sets)
    if error is None:
        child_says("ran")
        return
    elsewhere = not values and onnxruntime_runs(data, sets[0])
    child_says("run", _named(error, job["producers"]), "onnxruntime" if elsewhere else None,
               values)


def _make(argument: str | None, options: TargetOptions | None = None) -> TractTarget:
    if argument:
        raise TargetError(f"target 'tract' takes no argument (got {argument!r})")
    _tract()
    return TractTarget(options)


@hookimpl
def register_targets(registry):
    registry.add("tract", _make, description="tract (Sonos' inference engine for the edge)")


@hookimpl
def register_decompositions(registry):
    from rewriter_plugins import float_classes, static_axis

    static_axis.register(registry)
    float_classes.register(registry)
