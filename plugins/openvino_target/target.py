"""The ``openvino`` target's class: OpenVINO asked about the whole model, else one probe per
distinct node signature (:class:`OpenVINOTarget`, a :class:`rewriter.plugin.RuntimeTarget`).

Capability comes from OpenVINO's own answers, node by node: a one-node model (the node, its
input types and shapes, the values of its small constant inputs, the values it reads from
enclosing graphs) is loaded by OpenVINO's ONNX frontend (``FrontEndManager`` → ``onnx``),
converted (``FrontEnd.convert``: a missing conversion rule or a translator's refusal is the
answer), asked to the device (``Core.query_model``) and compiled (``Core.compile_model``).
Verdicts are cached per process by what they depend on (domain, op, opset, input types and
shapes, constant inputs, attributes), so a big model costs one probe per distinct node
signature, not one per node. ``confirm`` compiles the whole model in a child process and, for
small models, runs it once there on generated inputs; ``prepare`` runs it (``compare`` calls
it inside the isolation worker).

Models reach OpenVINO by path, as users give them (written to a private temporary folder with
their external data beside it), and as bytes; locations leaving the model's folder are
refused before anything is read.

The CPU plugin runs float32 models in bfloat16 on CPUs that have it unless told otherwise,
and quantizes the activations of compressed-weight MatMuls to int8; this target asks for
float32 (``INFERENCE_PRECISION_HINT``) without that dynamic quantization
(``DYNAMIC_QUANTIZATION_GROUP_SIZE`` 0) so a comparison measures the model, not the device's
precision.
"""

from __future__ import annotations

import re
import weakref

from rewriter.plugin import (
    Finding,
    NodeQuery,
    RuntimeTarget,
    TargetOptions,
    iter_nodes,
    probe_models,
)

from .inexact import (
    INEXACT,
    KNOWN_INEXACT,
    has_16bit_qdq,
    inexact_form,
    per_channel_conv,
    weights_dequantized,
)
from .probes import (
    VALUE_INFO,
    blames_subgraph,
    boundary_finding,
    has_dynamic_input,
    openvino_shapes,
    probe,
    rank_follows_fed_axes,
    split_sizes_proto,
    weights_follow_fed_values,
)
from .runs import io_names, run_function
from .runtime import (
    BY_BYTES,
    BY_PATH,
    DEFAULT_DEVICE,
    compiled_by_routes,
    config_for,
    openvino_runtime,
    reason_of,
)

CONFIRM_BY_DEFAULT_BELOW = 100 * 2**20  # bytes of model + external data
CONFIRM_TIMEOUT_S = 300
# Constant inputs are given to a probe as rewriter.plugin.probe_models says (OpenVINO's
# translators read shapes, axes, pads... from them). Shape inference (ranks for the probes'
# inputs: the CPU plugin compiles no input of unknown rank) runs on models up to
# RuntimeTarget.shape_inference_max_nodes nodes; bigger ones are probed at conversion level
# where a rank is unknown, and the whole-model confirmation decides. The whole model is
# compiled first (one answer for every node) up to RuntimeTarget.whole_model_max_nodes.
# Domains OpenVINO's ONNX frontend registers translators in (strings of
# libopenvino_onnx_frontend, 2024.x-2026.x); an op of any other domain has no conversion.
_OPENVINO_DOMAINS = frozenset({
    "", "ai.onnx.ml", "ai.onnx.preview.training", "com.microsoft", "org.openvinotoolkit",
    "org.pytorch.aten", "mmdeploy",
})
# Shapes tried, in order, for a node whose inputs' ranks are unknown: a rank with dynamic
# dimensions (images, matrices, ...), then with static ones of size 1 (the CPU plugin wants
# static shapes for some inputs, e.g. convolution weights)
_SHAPE_WORDS = re.compile(r"\b(rank|shape|dynamic|dimension)", re.IGNORECASE)
_GUESSED_RANKS = ((4, None), (2, None), (3, None), (1, None), (0, None), (5, None),
                  (4, 1), (3, 1), (2, 1))


class OpenVINOTarget(RuntimeTarget):
    """OpenVINO's ONNX frontend and one device (CPU by default)."""

    runtime = "OpenVINO"
    computes_float64_as = "float32"  # measured: 1 + 1e-10 in float64 is 1.0 on CPU
    confirm_by_default_below = CONFIRM_BY_DEFAULT_BELOW
    confirm_timeout_s = CONFIRM_TIMEOUT_S

    def __init__(self, device: str = DEFAULT_DEVICE, options: TargetOptions | None = None):
        openvino = openvino_runtime()[0]
        super().__init__("openvino" if device == DEFAULT_DEVICE else f"openvino:{device}",
                         f"OpenVINO {openvino.__version__.split('-')[0]} ({device})", options)
        self.device = device
        self._sixteen_bit_model = False  # it quantizes to 16 bits (has_16bit_qdq)
        # where OpenVINO's refusal of the whole model last checked points besides a node
        # (see blame): op type -> verdict
        self._blamed_ops: dict[str, tuple[str, str]] = {}
        self._boundary: str | None = None  # a graph input or output it refuses (a map...)
        self._ov_shapes: dict | None = {}  # name -> dims from OpenVINO's partial conversion
        self._model = None  # the model last checked, until its OpenVINO shapes are read
        self._dynamic_inputs = True  # some input of the model last checked has a dynamic shape

    # -- model-level --------------------------------------------------------------------------

    def remember(self, model) -> None:
        self._sixteen_bit_model = has_16bit_qdq(model)
        self._ov_shapes, self._model = {}, None
        self._dynamic_inputs = has_dynamic_input(model)
        self._blamed_ops = {}
        self._boundary = None  # the graph input or output OpenVINO refuses (a map...)

    def shapes_inferred(self, model) -> None:
        self._ov_shapes = None  # computed when first needed
        self._model = model

    def verdict_scope(self) -> tuple:
        return (self.device,)

    def ask_whole_model(self, data: bytes):
        """OpenVINO's answer on the whole model as it is (None: it compiles), read by path
        (written to a private temporary file, as ``Core.read_model(path)`` reads it) and
        from bytes, each compiled; the stricter answer wins (compiling costs 2-5 ms per
        node, probes with the cache far less on big models)."""
        with probe_models.written(data) as path:
            _, refusal = compiled_by_routes(path, data, self.device, (BY_PATH, BY_BYTES))
        return None if refusal is None else (
            reason_of(refusal), f"OpenVINO refuses the whole model: {refusal}")

    def blame(self, model, verdict) -> list[Finding]:
        """Where OpenVINO's refusal of the whole model points: a graph input or output it
        cannot take (a finding on the model), the node it names, else the nodes of the
        operators it lists (their findings come from :meth:`check_node`, so that they carry
        their nodes); a finding on the model when it names neither."""
        boundary = boundary_finding(self.name, model, verdict[1])
        if boundary is not None:
            self._boundary = VALUE_INFO.search(verdict[1]).group(1)
            return [boundary]
        if self.blame_node(model, verdict):
            return []
        listed = set(re.findall(r"\b([A-Za-z]\w*)-\d+\b", verdict[1]))
        rules = re.search(r"No conversion rule found for operations: ([^\[(]*)", verdict[1])
        if rules:  # "com.acme.Frobnicate, NhwcConv-1": each op's name
            listed |= {item.strip().rsplit("-", 1)[0].rsplit(".", 1)[-1]
                       for item in rules.group(1).split(",")}
        present = {s.node.op_type for s in iter_nodes(model)} & listed
        if present:
            self._blamed_ops.update(dict.fromkeys(present, verdict))
            return []
        self.keep_model_refusal(verdict)
        return []

    # -- per node -----------------------------------------------------------------------------

    def check_node(self, query: NodeQuery) -> Finding | None:
        node = query.node
        label = f"{query.domain or 'ai.onnx'}::{node.op_type}"
        if query.opset is not None:
            label += f" (opset {query.opset})"
        if query.domain not in _OPENVINO_DOMAINS:
            return self.finding(query, "unknown-domain",
                                f"OpenVINO's ONNX frontend knows no operators in domain "
                                f"{query.domain!r}")
        inexact = inexact_form(query) or per_channel_conv(query, self.constants) or (
            weights_dequantized(query, self.constants) if self._sixteen_bit_model else None)
        if inexact is not None:
            return self.finding(query, INEXACT, inexact)
        found = self._openvino_finding(query, label)
        known = KNOWN_INEXACT.get((query.domain, node.op_type))
        if found is None and known is not None:  # it runs, otherwise than its definition
            return self.finding(query, INEXACT, known)
        return found  # OpenVINO's own refusal first (in its words: softcap, ...)

    def _openvino_finding(self, query: NodeQuery, label: str) -> Finding | None:
        """OpenVINO's answer for the node: the whole model's verdict, or the node's probe."""
        node = query.node
        in_body = self.in_body(query)  # the planner asking about a decomposition body
        if in_body and rank_follows_fed_axes(query):
            return self.finding(query, "no-kernel", (
                f"{label} over axes the model's caller feeds, keepdims = 0: its output's rank "
                "depends on their values, and OpenVINO's CPU plugin compiles no operation of "
                "dynamic rank"))
        if in_body and self._dynamic_inputs and weights_follow_fed_values(query):
            return self.finding(query, "no-kernel", (
                f"{label} with weights the model's caller feeds: OpenVINO's CPU plugin "
                "convolves with no weights of a dynamic shape"))
        if self.model_runs and not in_body:
            return None  # the whole model compiled (check_model)
        build, key, unranked, guessed = self._probe_model(query, in_body)

        def ask():
            verdict = probe(build().SerializeToString(), self.device, label,
                            unknown_ranks=unranked)
            if verdict is not None and unranked:
                verdict = self._with_guessed_ranks(query, in_body, label, verdict)
            if verdict is not None and guessed and "no conversion rule" not in verdict[1]:
                verdict = None  # a type we guessed may be what OpenVINO objects to
            return verdict

        verdict = self.cached_verdict((*self.verdict_scope(), key), ask)
        if verdict is not None and self._boundary and not in_body:
            named = VALUE_INFO.search(verdict[1])
            if named and named.group(1) == self._boundary:
                return None  # the model's finding names that input or output
        if verdict is None or blames_subgraph(node, verdict[1]):
            # an If/Loop/Scan body's node is checked (and reported) on its own; a node the
            # whole model's refusal names is found, whatever its probe says
            blamed = None if in_body else (self.blamed_verdict(query)
                                           or self._blamed_ops.get(node.op_type))
            return None if blamed is None else self.finding(query, *blamed)
        return self.finding(query, verdict[0], verdict[1])

    def _with_guessed_ranks(self, query, in_body: bool, label: str, verdict):
        """Inputs of unknown rank (a decomposition body's values, or shapes inference could
        not give them): OpenVINO's translators and the CPU plugin want ranks, some static
        shapes. The node runs if it converts and compiles with its unranked inputs given
        some common shape; if every refusal is about ranks or shapes, the node is given
        the benefit of the doubt (the rewritten model is checked as a whole afterwards, with
        its real shapes); else the first verdict stands."""
        shape_bound = _SHAPE_WORDS.search(verdict[1]) is not None
        for guess in _GUESSED_RANKS:
            build, _, _, _ = self._probe_model(query, in_body, guess)
            answer = probe(build().SerializeToString(), self.device, label, unknown_ranks=True)
            if answer is None:
                return None
            shape_bound = shape_bound or _SHAPE_WORDS.search(answer[1]) is not None
        # In a decomposition body OpenVINO objects to shapes it was not told (the planner
        # knows none): it cannot decide without them. Elsewhere the first verdict stands.
        return None if shape_bound and in_body else verdict

    def _openvino_dims(self, name: str):
        """The dimensions OpenVINO's partial conversion of the model gives ``name``, if any
        (the conversion runs once per model, on the first value onnx's inference misses)."""
        if self._ov_shapes is None:
            model, self._model = self._model, None
            self._ov_shapes = openvino_shapes(model) if model is not None else {}
        return self._ov_shapes.get(name)

    def _input_proto(self, name: str, query: NodeQuery, in_body: bool, guess=None):
        """The input's type with the best shape known (declared, else inferred); with
        ``guess`` (rank, dimension or None), an input of unknown rank gets that shape."""
        from onnx import helper

        from rewriter.plugin import type_proto

        candidates = [query.declared.get(name)]
        if not in_body:
            candidates.append(self.shapes.get(name))
        known = [p for p in candidates if p is not None and p.WhichOneof("value") is not None]
        shaped = next((p for p in known if probe_models.shape_key(p) is not None), None)
        shape = probe_models.shape_key(shaped)
        if shape is not None and all(isinstance(d, int) for d in shape):
            return shaped  # fully static
        proto = shaped or (known[0] if known else type_proto(query.types.get(name)))
        tensor = proto is not None and proto.WhichOneof("value") == "tensor_type" and \
            proto.tensor_type.elem_type
        # OpenVINO's partial conversion folds shape computations onnx's inference cannot
        # follow (a Reshape's target shape built by Shape/Concat/ConstantOfShape)
        dims = None if in_body or not tensor else self._openvino_dims(name)
        if dims is not None and (shape is None or len(shape) == len(dims)):
            merged = [d if isinstance(d, int) else o for d, o in zip(shape or dims, dims)]
            return helper.make_tensor_type_proto(proto.tensor_type.elem_type, merged)
        if shaped is not None:
            return shaped
        if guess is not None and proto is not None and \
                proto.WhichOneof("value") == "tensor_type" and proto.tensor_type.elem_type:
            rank, dim = guess
            return helper.make_tensor_type_proto(proto.tensor_type.elem_type, [dim] * rank)
        return proto

    def _probe_model(self, query: NodeQuery, in_body: bool, guess=None):
        """(a function building the one-node model to ask OpenVINO about, the key of its
        verdict, whether some tensor input's rank is unknown, whether some input's type was
        guessed). The model is only built on a cache miss."""
        node = query.node
        constants = dict(query.constants) if in_body else self.constants
        inputs = probe_models.probe_inputs(query, constants, lambda name: split_sizes_proto(
            node, query, name, self._input_proto(name, query, in_body, guess)), guess=guess)
        versions = {}
        if query.opset is not None:
            versions[query.domain] = query.opset
        versions.setdefault("", query.opsets.get("", 21) if query.opsets else 21)
        attributes = probe_models.attributes_digest(node) if node.attribute else b""
        key = (query.domain, node.op_type, query.opset, versions.get(""), inputs.key,
               attributes, tuple(bool(o) for o in query.outputs),
               tuple(bool(i) for i in query.inputs))

        def build():
            return probe_models.one_node_model(node, inputs.parts, query.outputs, versions)

        return build, key, inputs.unranked, inputs.guessed

    # -- confirmation and runs ----------------------------------------------------------------

    def confirm_job(self, model, base_dir, data, path, feeds):
        """Read the whole model as users do, by path (``Core.read_model(path)`` and
        ``openvino.convert_model(path)``) and from bytes, compile each in the child (the
        stricter answer wins: a refusal by any says which) and run the one read by path on
        the input sets. A failed run is a refusal when its message says OpenVINO lacks
        something or when onnxruntime runs the same model on the same inputs; an error
        naming an operation OpenVINO made is pointed at the node it lies in."""
        script = ("from rewriter_plugins.openvino_target.runs import confirm_child\n"
                  "confirm_child()\n")
        return [script], {"model": data, "path": path, "feeds": feeds, "device": self.device,
                          "io": io_names(model),
                          "producers": probe_models.value_producers(model)}

    def prepare(self, model, base_dir):
        """A compiled model (float32 precision) as a run function: feeds by input name,
        outputs by the model's output names. The model is read by path as users read it
        (``Core.read_model(path)``; written to a private temporary folder with its external
        data beside it, removed once the run function is gone); from bytes only when it
        cannot be put there (external data too big to copy and no file of its own)."""
        file, stack = self.run_model_file(model, base_dir)
        routes = (BY_PATH,) if file.path is not None else (BY_BYTES,)
        try:
            compiled, refusal = compiled_by_routes(file.path, file.data, self.device, routes,
                                                   config_for(model))
        except BaseException:
            stack.close()
            raise
        if refusal is not None:
            stack.close()
            raise RuntimeError(f"OpenVINO cannot compile the model: {refusal}")
        run = run_function(compiled[0][1], (file.data, stack), *io_names(model))
        weakref.finalize(run, stack.close)
        return run
