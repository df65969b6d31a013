"""The ``tract`` target's class: tract asked about the whole model, else one probe per
distinct node signature (:class:`TractTarget`, a :class:`rewriter.plugin.RuntimeTarget`).

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

import re

from rewriter.plugin import (
    NOT_ASKED,
    Finding,
    NodeQuery,
    RuntimeTarget,
    TargetOptions,
    iter_nodes,
    probe_models,
)

from .probes import AS_SHAPES, FAILS_RUNNING, named_dims, probe, probe_made, symbolic
from .runtime import clean_message, load, named, runnable, tract_runtime, version

CONFIRM_BY_DEFAULT_BELOW = 100 * 2**20  # bytes of model + external data
CONFIRM_TIMEOUT_S = 300
# Ranks tried, in order, for a node input whose rank is unknown (tract types nothing without
# a rank): images, matrices, sequences, vectors, scalars.
_GUESSED_RANKS = (4, 2, 3, 1, 0, 5)
_SHAPE_WORDS = re.compile(r"\b(rank|shape|dimension|fact|symbol)", re.IGNORECASE)
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


class TractTarget(RuntimeTarget):
    """tract's ONNX loader and its CPU runtime."""

    runtime = "tract"
    confirm_by_default_below = CONFIRM_BY_DEFAULT_BELOW
    confirm_timeout_s = CONFIRM_TIMEOUT_S

    def __init__(self, options: TargetOptions | None = None) -> None:
        super().__init__("tract", f"tract {version()} (CPU)", options)
        self._graph_inputs: set[str] = set()

    # -- model-level --------------------------------------------------------------------------

    def remember(self, model) -> None:
        self._graph_inputs = {i.name for i in model.graph.input} - set(self.constants)

    def whole_model_bytes(self, model) -> bytes:
        return named_dims(model).SerializeToString()

    def ask_whole_model(self, data: bytes):
        """tract's verdict on the whole model (None: it runs): loaded by path and from
        bytes, typed and optimized, in the probe worker."""
        return probe(data, "the model", whole=True)

    def runs_whole(self, verdict) -> bool:
        # outputs typed as shapes: every node runs, the model's outputs cannot be read
        return verdict is None or (verdict is not NOT_ASKED and AS_SHAPES in verdict[1])

    def model_findings(self, model, verdict) -> list[Finding]:
        """Graph inputs and outputs tract's API cannot take or hand out, and where tract's
        refusal of the whole model points."""
        strings = self._string_findings(model)
        if verdict is not None and AS_SHAPES in verdict[1]:
            casts = self._casts_to_int64(model)
            if casts:  # what tract types as a shape: its Cast to int64 (not its CastLike)
                for index in casts:
                    self.blame_main_node(model, index, (
                        verdict[0], f"{verdict[1]}: tract types this Cast to int64 as a "
                        "shape (TDim), upstream of that output"))
                return strings
            return [Finding(target=self.name, path="model", domain="", op_type="",
                            version=None, reason=verdict[0], detail=verdict[1]), *strings]
        if self.model_runs:
            return strings
        return self._interface_findings(model) or [*strings, *self.blame(model, verdict)]

    @staticmethod
    def _casts_to_int64(model) -> list[int]:
        """The positions of the main graph's ``Cast`` nodes to int64 nearest upstream of its
        int64 outputs (each path back from an output stops at the first): tract's ``Cast``
        to int64 gives a ``TDim``, its ``CastLike`` an ``i64`` (measured on tract 0.23)."""
        from onnx import TensorProto

        producer = {o: i for i, n in enumerate(model.graph.node) for o in n.output if o}
        frontier = [o.name for o in model.graph.output
                    if o.type.tensor_type.elem_type == TensorProto.INT64]
        seen, found = set(frontier), []
        while frontier:
            index = producer.get(frontier.pop())
            if index is None:
                continue
            node = model.graph.node[index]
            if node.op_type == "Cast" and node.domain in ("", "ai.onnx") and any(
                    a.name == "to" and a.i == TensorProto.INT64 for a in node.attribute):
                found.append(index)
                continue
            for name in node.input:
                if name and name not in seen:
                    seen.add(name)
                    frontier.append(name)
        return found

    def blame(self, model, verdict) -> list[Finding]:
        """The node tract's own refusal of the whole model names (``Failed analyse for node
        #37 "name" Pad``): found whatever its probe says (:meth:`check_node`); a finding on
        the model when the refusal names none, nor any node of an op it says it lacks."""
        if verdict is NOT_ASKED:
            return []  # not asked: the probes decide
        detail = named(verdict[1], probe_models.value_producers(model))
        if self.blame_node(model, (verdict[0], detail)):
            return []
        missing = {m for pair in re.findall(r"Unimplemented\(([\w.]+)\)|no ONNX operator "
                                            r"([\w.]+)", detail) for m in pair if m}
        if missing & {s.node.op_type for s in iter_nodes(model)}:
            return []  # the probes of those nodes say it
        if self.blame_by_prefix(model, (verdict[0], detail)):
            return []  # (a panic naming no node: the first whose prefix tract refuses)
        self.keep_model_refusal((verdict[0], f"tract refuses the whole model: {detail}"))
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
                if v.name in self.constants or not v.type.HasField("tensor_type"):
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

    # -- per node -----------------------------------------------------------------------------

    def check_node(self, query: NodeQuery) -> Finding | None:
        node = query.node
        in_body = self.in_body(query)  # the planner asking about a decomposition body
        if self._training_dropout(query, in_body):
            return self.finding(query, "runtime-refused", "tract runs Dropout in training "
                                "mode only with a ratio of 0 (its training_mode is not a "
                                "constant false, its ratio not a constant 0)")
        if self.model_runs and not in_body:  # (its outputs typed as shapes: their casts)
            blamed = self.blamed_verdict(query)
            return None if blamed is None else self.finding(query, blamed[0], blamed[1])
        label = f"{query.domain or 'ai.onnx'}::{node.op_type}"
        build, key, unranked = self._probe_model(query, in_body)

        def ask():
            verdict = probe(build(None).SerializeToString(), label)
            if verdict is not None and unranked and verdict[0] != "no-kernel" and \
                    not _CONSTANT_WORDS.search(verdict[1]):
                verdict = self._with_guessed_ranks(build, label, verdict, in_body)
            return verdict

        verdict = self.cached_verdict(key, ask)
        if verdict is not None and _CONSTANT_WORDS.search(verdict[1]) and \
                not self._fed(query, in_body):
            # tract wants an input's value, and the node's non-constant inputs are computed
            # (a Reshape's shape from Shape and Concat): typing the whole model folds what it
            # can; the confirmation (or, after a rewrite, the verification) decides
            verdict = None
        if verdict is not None and probe_made(verdict[1], query):
            verdict = None  # about the symbols the probe gave the node, not the node
        if verdict is None:  # a node tract's refusal of the whole model names is found
            verdict = self.blamed_verdict(query)
        return None if verdict is None else self.finding(query, verdict[0], verdict[1])

    def _training_dropout(self, query: NodeQuery, in_body: bool) -> bool:
        """A Dropout in training mode (a constant true) with a non-zero ratio (a constant, or
        the default): tract types and optimizes it, and refuses it only when it runs."""
        if query.domain or query.node.op_type != "Dropout" or len(query.inputs) < 3 or \
                not query.inputs[2]:
            return False
        import numpy as np
        from onnx import numpy_helper

        constants = query.constants if in_body else self.constants

        def value(name):
            tensor = constants.get(name) if name else None
            return None if tensor is None or probe_models.external(tensor) else \
                numpy_helper.to_array(tensor)

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
                   if n and n not in self.constants)

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
                    _CONSTANT_WORDS.search(answer[1]) or FAILS_RUNNING in answer[1]:
                return answer  # it runs; or, typed at last, tract has no such op, wants
                # an input's value or cannot evaluate it
            shape_bound = shape_bound or _SHAPE_WORDS.search(answer[1]) is not None
        return None if shape_bound else verdict

    def _input_proto(self, name: str, query: NodeQuery, in_body: bool):
        from rewriter.plugin import type_proto

        candidates = [query.declared.get(name)]
        if not in_body:
            candidates.append(self.shapes.get(name))
        known = [p for p in candidates if p is not None and p.WhichOneof("value") is not None]
        shaped = next((p for p in known if probe_models.shape_key(p) is not None), None)
        return shaped or (known[0] if known else type_proto(query.types.get(name)))

    def _probe_model(self, query: NodeQuery, in_body: bool):
        """(a function building the one-node model, given a rank for inputs of unknown rank;
        the verdict's key; whether some input's rank is unknown)."""
        node = query.node
        constants = dict(query.constants) if in_body else self.constants
        inputs = probe_models.probe_inputs(
            query, constants, lambda name: self._input_proto(name, query, in_body),
            external_constants=False)
        versions = dict(query.opsets)
        if query.opset is not None:
            versions[query.domain] = query.opset
        versions.setdefault("", 21)
        key = (query.domain, node.op_type, query.opset, tuple(sorted(versions.items())),
               inputs.key, probe_models.attributes_digest(node),
               tuple(bool(o) for o in query.outputs), tuple(bool(i) for i in query.inputs))

        def build(rank: int | None):
            return probe_models.one_node_model(
                node, inputs.parts, query.outputs, versions,
                lambda name, proto: symbolic(proto, name, rank))

        return build, key, inputs.unranked

    # -- confirmation and runs ----------------------------------------------------------------

    def confirm_bytes(self, model, base_dir, data: bytes) -> bytes:
        """The model with its external data read in (tract is given bytes, not files)."""
        weighted = probe_models.with_external_data(model, base_dir)
        return data if weighted is model else weighted.SerializeToString()

    def confirm_job(self, model, base_dir, data, path, feeds):
        """Load, type and optimize the whole model in the child as users do, by path
        (``tract.onnx().load(path)``) and from bytes (the stricter answer wins, and says
        which route refused), and run the one read by path on the input sets (their shapes
        set as the inputs' facts)."""
        script = ("from rewriter_plugins.tract_target.runtime import confirm_child\n"
                  "confirm_child()\n")
        return [script], {"model": data, "path": path, "feeds": feeds,
                          "producers": probe_models.value_producers(model)}

    def prepare(self, model, base_dir):
        """A run function: feeds by input name -> outputs by the model's output names. The
        model is read by path as users read it (written to a private temporary folder with
        its external data beside it, removed once the run function is gone; from bytes
        when it cannot be put there), typed and optimized for the shapes of the first
        feeds of each shape."""
        import weakref

        file, stack = self.run_model_file(model, base_dir)
        path = file.path
        data = None if path is not None else \
            probe_models.with_external_data(model, base_dir).SerializeToString()
        outputs = [o.name for o in model.graph.output]
        try:
            probe_model = tract_runtime().onnx().load(path) if path is not None else load(data)
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

