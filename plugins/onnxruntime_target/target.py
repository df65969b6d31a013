"""The ``onnxruntime`` target's class: capability read from onnxruntime's live kernel registry
(:class:`OnnxRuntimeTarget`).

A node runs when a kernel of the provider (or the CPU fallback) covers its resolved schema
version and type binding, or when the op is an ONNX function whose body runs. Ops from
custom-op libraries the user registers are probed with a real one-node session. The static
verdict can be confirmed by building a real session in a child process and, for small models,
running it once on generated inputs.
"""

from __future__ import annotations

from rewriter.plugin import (
    BY_NODE,
    BY_TYPES,
    REFUSED,
    BodyUnavailable,
    Confirmation,
    Finding,
    NodeQuery,
    OpSchema,
    RuntimeTarget,
    SchemaIndex,
    TargetOptions,
    bind_type_params,
    infer_node_outputs,
    normalize_domain,
    onnx_schemas,
    onnxruntime_schemas,
    opset_import_findings,
    opset_map,
    schema_arity_problem,
    schema_function_body,
    type_proto,
)

from .confirm import (
    CONFIRM_CHILD,
    CONFIRM_TIMEOUT_S,
    confirm_with_kernels_in_child,
    run_shapes_in_child,
)
from .runtime import (
    CPU,
    DISABLE_QUANT_QDQ,
    FOLDED_OPS,
    OPEN_END,
    QDQ_MATMULNBITS_ACCURACY_LEVEL,
    accepts,
    clean_ort_message,
    oracle_session_differs,
    ort_kernels,
    resolve_library,
    runtime_ceilings,
    runtime_max_ir_version,
    short_types,
    thread_dependent_ops,
    version_matches,
)

CONFIRM_BY_DEFAULT_BELOW = 100 * 2**20  # bytes of model + external data
# Ops whose CPU kernels reject some attribute values when constructed (e.g. layout=1).
_KERNEL_VALIDATES_ATTRIBUTES = frozenset({"LSTM", "GRU", "RNN", "StringNormalizer"})
_FLOAT16, _FLOAT = "tensor(float16)", "tensor(float)"
_EXPANDS = ("expands", "")  # sentinel verdict: runs by inlining the op's function body


class OnnxRuntimeTarget(RuntimeTarget):
    """onnxruntime with one execution provider (CPU by default). A
    :class:`rewriter.plugin.RuntimeTarget` for its confirmation (a session in a child
    process); capability comes from the kernel registry, not from probing the whole model."""

    runtime = "onnxruntime"
    confirm_by_default_below = CONFIRM_BY_DEFAULT_BELOW
    confirm_timeout_s = CONFIRM_TIMEOUT_S
    # onnxruntime is the first runtime of the oracle chain: its numbers are the yardstick
    compares_numbers = False

    def __init__(self, provider: str = CPU, options: TargetOptions | None = None) -> None:
        options = options or TargetOptions()
        short = provider.removesuffix("ExecutionProvider")
        super().__init__("onnxruntime" if provider == CPU else f"onnxruntime:{short}",
                         f"onnxruntime ({provider})", options)
        self.provider = provider
        self.libraries = tuple(resolve_library(x) for x in options.custom_op_libraries)
        self._given_libraries = self.libraries  # the model's kernels may add to them
        self._kernels = dict(ort_kernels(CPU))
        if provider != CPU:  # ORT falls back to CPU for nodes the provider cannot take
            for key, defs in ort_kernels(provider).items():
                self._kernels[key] = self._kernels.get(key, []) + defs
        self._verdicts: dict[tuple, tuple[str, str] | None] = {}
        self._fast: dict[tuple, tuple[str, str, int | None] | None] = {}
        self._probes: dict[tuple, tuple[str, str] | None] = {}
        self._known_domains = (
            set(self.schemas.domains) | {d for d, _ in self._kernels}
        )
        self.max_opsets = runtime_ceilings(self.schemas)
        self.max_ir_version = runtime_max_ir_version()

    @property
    def schemas(self) -> SchemaIndex:
        return onnxruntime_schemas()

    def check_model(self, model):
        findings = opset_import_findings(
            self.name, model, self.schemas.max_version, ("", "ai.onnx.ml", "com.microsoft")
        )
        if self.max_ir_version is not None and model.ir_version > self.max_ir_version:
            findings.append(Finding(
                self.name, "model", "", "", model.ir_version, "ir-too-new",
                f"model has IR version {model.ir_version}; the installed onnxruntime loads up "
                f"to {self.max_ir_version}"))
        problem = self._use_kernels(model)
        if problem:
            findings.append(Finding(self.name, "model", "", "", None, "no-kernel", problem))
        findings.extend(self._external_shape_data(model))
        return findings

    def _external_shape_data(self, model) -> list[Finding]:
        """Nodes whose input onnx's shape inference reads as a value (Reshape's shape, ...)
        is an external initializer: onnxruntime refuses the model when it loads it."""
        from rewriter_plugins.external_shape_data import REASON, external_shape_reads

        def since(op_type: str, opset: int) -> int | None:
            schema = self.schemas.resolve("", op_type, opset)
            return schema.since_version if schema is not None else None

        return [Finding(self.name, path, "", node.op_type, version, REASON,
                        f"input {tensor.name!r} is stored in external data; onnxruntime's shape "
                        "inference reads its value when it loads the model and cannot read "
                        "external data", node.name)
                for path, node, tensor, version in external_shape_reads(model, since)]

    # -- custom kernels -------------------------------------------------------------------

    def _use_kernels(self, model) -> str | None:
        """Register the kernels a rewritten model's metadata (``rewriter.plan.kernels``) lists and
        that the installed plugins provide, and the custom-op libraries it needs, so that
        its retargeted nodes are checked by real sessions like any custom op. Returns what
        is missing (None: nothing)."""
        from rewriter.plugin import RewriterError, read_needs

        libraries = list(self._given_libraries)
        problem = None
        try:
            if read_needs(model):
                from rewriter.plugin import prepare_kernels

                libraries += prepare_kernels(model, self._registry())
        except RewriterError as e:
            problem = str(e)
        libraries = tuple(dict.fromkeys(libraries))
        if libraries != self.libraries:  # verdicts depend on the libraries: start afresh
            self.libraries = libraries
            self._fast.clear()
            self._verdicts.clear()
            self._probes.clear()
        return problem

    def kernel_problem(self, remedy) -> str | None:
        """Python kernels run as onnxruntime-extensions Python ops, native ones from its
        library: register what the remedy needs and ask a one-node session."""
        import importlib.util

        from rewriter.plugin import EXTENSIONS, RewriterError, library_path, register_onnxruntime

        if importlib.util.find_spec("onnxruntime_extensions") is None:
            return "onnxruntime-extensions is not installed"
        library = EXTENSIONS if remedy.kind == "python" else remedy.use.library
        try:
            if remedy.kind == "python":
                register_onnxruntime([remedy.use], {remedy.use.op_name: remedy.kernel})
            libraries = tuple(dict.fromkeys((*self._given_libraries, library_path(library))))
        except RewriterError as e:
            return str(e)
        node = remedy.node
        domain = normalize_domain(node.domain)
        opsets = dict(remedy.opsets)
        opsets[domain] = 1
        types = {n: t for n, t in zip(node.input, remedy.input_types) if n and t}
        query = NodeQuery(node, "<kernel probe>", domain, 1, types, opsets,
                          dict(remedy.declared))
        in_types = tuple(types.get(n) if n else None for n in node.input)
        key = ("kernel", node.SerializeToString(), in_types, libraries)
        if key not in self._probes:
            self._probes[key] = self._probe(query, in_types, 1, libraries=libraries)
        verdict = self._probes[key]
        return None if verdict is None else verdict[1]

    # -- per node -------------------------------------------------------------------------

    def check_op(self, domain: str, op_type: str, opset: int | None) -> str:
        """Refused whatever the node where onnxruntime knows no domain or schema for the op;
        decided by the type signature where a kernel's type constraints decide; per node
        where custom-op libraries are probed, the domain is not imported, the kernel checks
        attributes, or the op's function body may run instead (see :meth:`_verdict`)."""
        if self.libraries or opset is None:
            return BY_NODE
        if domain not in self._known_domains:
            return REFUSED
        schema = self.schemas.resolve(domain, op_type, opset)
        if schema is None:
            return REFUSED
        if domain == "" and op_type in _KERNEL_VALIDATES_ATTRIBUTES:
            return BY_NODE
        if domain in ("", "ai.onnx.ml"):  # a spec function body may run (_function_verdict)
            spec = onnx_schemas().resolve(domain, op_type, opset)
            if schema.has_function or (spec is not None and spec.has_function):
                return BY_NODE
        return BY_TYPES

    def check_node(self, query: NodeQuery) -> Finding | None:
        # Most nodes repeat an (op, opset, input types, output types) already decided: answer
        # those from a cache before any schema work (the verdict depends on nothing else,
        # except for the ops whose answer depends on attributes, which are not cached here).
        types = query.types
        key = (query.domain, query.node.op_type, query.opset,
               tuple([types.get(n) if n else None for n in query.inputs]),
               tuple([types.get(n) if n else None for n in query.outputs]),
               tuple([not n for n in query.inputs]))
        cached = self._fast.get(key, ...)
        if cached is None:
            return None
        if cached is ...:
            verdict, cacheable = self._verdict(query)
            if cacheable:
                self._fast[key] = verdict
        else:
            verdict = cached
        if verdict is None:
            return None
        return self.finding(query, verdict[0], verdict[1], version=verdict[2])

    def _verdict(self, query: NodeQuery):
        """((reason, detail, version) or None, whether it may be cached by types alone)."""
        node, domain, opset = query.node, query.domain, query.opset
        if opset is None:
            # onnxruntime imports a domain it knows at its latest version when the model
            # forgets to; an unknown domain without an import makes the model invalid.
            opset = self.schemas.max_version.get(domain)
            if opset is None and self.libraries:
                return _versioned(self._probe_finding(query, 1), None), False
            if opset is None:
                return ("domain-not-imported",
                        f"the model has no opset import for domain {domain or 'ai.onnx'!r}, "
                        "and onnxruntime does not know it", None), True
        if domain not in self._known_domains:
            if self.libraries:
                return _versioned(self._probe_finding(query), opset), False
            return ("unknown-domain",
                    f"onnxruntime knows no operators in domain {domain!r} "
                    "(register a custom-op library, or rewrite the node)", opset), True
        schema = self.schemas.resolve(domain, node.op_type, opset)
        if schema is None:
            if self.libraries:
                return _versioned(self._probe_finding(query), opset), False
            versions = self.schemas.versions(domain, node.op_type)
            if versions:
                detail = (f"{node.op_type} exists from opset {versions[0]} of "
                          f"{domain or 'ai.onnx'}; the model imports opset {opset}")
            else:
                detail = f"onnxruntime has no schema for {domain or 'ai.onnx'}::{node.op_type}"
            return ("no-schema", detail, opset), True
        problem = schema_arity_problem(node, schema, query.inputs, query.outputs)
        if problem:
            return ("invalid-node", problem, schema.since_version), True
        binding = bind_type_params(node, schema, query.types, query.inputs, query.outputs)
        key = (domain, node.op_type, schema.since_version, tuple(sorted(binding.items())))
        verdict = self._verdicts.get(key, ...)
        if verdict is ...:
            verdict = self._verdicts[key] = self._schema_verdict(
                node, schema, binding, query.types, opset, 0, query.declared
            )
        asks_runtime = verdict == _EXPANDS or (
            verdict is None and node.op_type in _KERNEL_VALIDATES_ATTRIBUTES and domain == ""
        )
        if asks_runtime:  # depends on attributes and shapes: never cached by types alone
            verdict = self._ask_runtime(query, opset)
        return _versioned(verdict, schema.since_version), not asks_runtime

    def _ask_runtime(self, query: NodeQuery, opset: int):
        """Function inlining and attribute checks in kernel constructors are decided by
        onnxruntime itself: ask it with a one-node session when the input types are known."""
        node = query.node
        present = [n for n in node.input if n]
        if not all(query.types.get(n) for n in present):
            return None
        in_types = tuple(query.types.get(n) if n else None for n in node.input)
        shapes = tuple(
            query.declared[n].SerializeToString() if n in query.declared else b"" for n in present
        )
        attrs = tuple(a.SerializeToString() for a in node.attribute)
        key = (query.domain, node.op_type, opset, in_types, shapes, attrs)
        if key not in self._probes:
            self._probes[key] = self._probe(query, in_types, opset)
        return self._probes[key]

    def _kernel_matches(self, kernels, binding) -> bool:
        if any(accepts(k, binding) for k in kernels):
            return True
        # onnxruntime's InsertCastTransformer runs float16 nodes through float kernels
        if _FLOAT16 in binding.values():
            widened = {p: (_FLOAT if t == _FLOAT16 else t) for p, t in binding.items()}
            return any(accepts(k, widened) for k in kernels)
        return False

    def _schema_verdict(
        self, node, schema: OpSchema, binding, types, opset: int, depth: int, declared=None
    ):
        """None if a kernel takes the node; _EXPANDS if its function body runs instead;
        else (reason, detail)."""
        op = f"{node.op_type}({schema.since_version})"
        if schema.domain == "" and node.op_type in FOLDED_OPS:
            return None
        kernels = self._kernels.get((schema.domain, node.op_type), [])
        in_range = [k for k in kernels if version_matches(k, schema.since_version)]
        if in_range and self._kernel_matches(in_range, binding):
            return None
        # onnxruntime inlines a function op's body when no kernel takes the node
        body_problem = self._function_verdict(node, schema, types, opset, depth, declared)
        if body_problem == _EXPANDS:
            return _EXPANDS
        if not in_range:
            if kernels:
                ranges = sorted({(k.start, k.end) for k in kernels})
                shown = ", ".join(
                    f"{a}-{b}" if b != OPEN_END else f"{a} (exactly)" for a, b in ranges
                )
                reason = (
                    "no-kernel",
                    f"no {self.provider} kernel for {op}; kernels exist for versions {shown}",
                )
            else:
                reason = (
                    "no-kernel", f"no {self.provider} kernel for {node.op_type} at any version"
                )
        else:
            expected: dict[str, set[str]] = {}
            for k in in_range:
                for p, ts in k.constraints.items():
                    expected.setdefault(p, set()).update(ts)
            bad = [
                f"{p}={binding[p]} (kernels take {p} in {short_types(ts)})"
                for p, ts in sorted(expected.items())
                if p in binding and binding[p] not in ts
            ]
            if not bad:  # each parameter is accepted by some kernel, but not all together
                bad = [", ".join(f"{p}={t}" for p, t in sorted(binding.items())) +
                       " (no kernel takes this combination)"]
            reason = ("type-binding", f"no kernel for {op} with " + "; ".join(bad))
        if body_problem is not None:
            reason = (reason[0], f"{reason[1]}; its function body fails: {body_problem[1]}")
        return reason

    def _function_verdict(self, node, schema, types, opset, depth, declared=None):
        """_EXPANDS if the op's spec function body runs (or cannot be checked for lack of
        types); a (reason, detail) if a node of the body cannot run; None if no body."""
        if schema.domain not in ("", "ai.onnx.ml") or depth > 8:
            return None
        in_types = [types.get(n) if n else None for n in node.input]
        try:
            body = schema_function_body(node, opset, in_types, declared)
        except BodyUnavailable:
            return _EXPANDS
        if body is None:
            return None
        body_opsets = opset_map(body.opset_import) or {"": opset}
        inner_types = {formal: t for formal, t in zip(body.input, in_types) if t}
        for inner in body.node:
            domain = normalize_domain(inner.domain)
            inner_opset = body_opsets.get(domain, opset if domain == "" else None)
            inner_schema = self.schemas.resolve(domain, inner.op_type, inner_opset or 0)
            if inner_schema is None:
                return ("no-schema", f"{inner.op_type} has no schema at opset {inner_opset}")
            inner_binding = bind_type_params(inner, inner_schema, inner_types)
            verdict = self._schema_verdict(
                inner, inner_schema, inner_binding, inner_types, inner_opset, depth + 1
            )
            if verdict is not None and verdict != _EXPANDS:
                return verdict
            for name, t in zip(inner.output, infer_node_outputs(inner, inner_schema, inner_types)):
                if name and t:
                    inner_types.setdefault(name, t)
        return _EXPANDS

    # -- custom-op libraries --------------------------------------------------------------

    def _probe_finding(self, query: NodeQuery, opset: int | None = None) -> Finding | None:
        node = query.node
        in_types = tuple(query.types.get(n) if n else None for n in node.input)
        key = (query.domain, node.op_type, in_types)
        if key not in self._probes:
            self._probes[key] = self._probe(query, in_types, opset)
        result = self._probes[key]
        return None if result is None else self.finding(query, result[0], result[1])

    def _probe(self, query: NodeQuery, in_types, opset: int | None = None, *, libraries=None):
        """Build a one-node model and ask onnxruntime (custom-op libraries registered)."""
        import onnxruntime as ort
        from onnx import TensorProto, helper

        node = query.node
        inputs = []
        for name, t in zip(node.input, in_types):
            if not name or name in {i.name for i in inputs}:
                continue
            proto = query.declared.get(name)
            if proto is None or proto.WhichOneof("value") is None:
                proto = type_proto(t) or helper.make_tensor_type_proto(TensorProto.FLOAT, None)
            inputs.append(helper.make_value_info(name, proto))
        outputs = [helper.make_value_info(o, helper.TypeProto()) for o in node.output if o]
        graph = helper.make_graph([node], "probe", inputs, outputs)
        versions = dict(query.opsets)
        if opset is not None:
            versions.setdefault(query.domain, opset)
        opsets = [helper.make_opsetid(d, v) for d, v in versions.items()]
        model = helper.make_model(graph, opset_imports=opsets)
        model.ir_version = helper.find_min_ir_version_for(opsets, ignore_unknown=True)
        so = ort.SessionOptions()
        so.log_severity_level = 4
        for lib in self.libraries if libraries is None else libraries:
            so.register_custom_ops_library(lib)
        try:
            ort.InferenceSession(model.SerializeToString(), so, providers=[self.provider])
        except Exception as e:  # noqa: BLE001 - the runtime's refusal is the answer
            message = str(e).splitlines()[0] if str(e) else type(e).__name__
            if "is not a registered function/op" in message or "No Op registered" in message:
                known = query.domain in self._known_domains
                reason = "no-schema" if known else "unknown-domain"
                if query.opset is None:
                    reason = "domain-not-imported"
                return (reason, "neither onnxruntime nor the registered custom-op libraries "
                        f"provide {query.domain or 'ai.onnx'}::{node.op_type}")
            if "Could not find an implementation" in message or "Failed to find kernel" in message:
                return ("no-kernel", "onnxruntime found no kernel and did not inline a function "
                        f"body: {clean_ort_message(message)}")
            guessed = any(n and not t for n, t in zip(node.input, in_types))
            if guessed and "Type Error" in message:
                return None  # the op exists; we only guessed its input types wrong
            return ("runtime-refused", clean_ort_message(message))
        return None

    # -- confirmation ---------------------------------------------------------------------

    def confirmation_key(self) -> tuple:
        return (self.libraries,)  # verdicts depend on the custom-op libraries

    def early_confirmation(self, model, base_dir) -> Confirmation | None:
        """A model whose metadata lists custom kernels: a session built in a child process
        that loads the same plugins and registers them (not run)."""
        from rewriter.plugin import read_needs

        if not read_needs(model):
            return None
        error = self._confirm_with_kernels(model, base_dir)
        return Confirmation(error, "load" if error else "",
                            note="" if error else "not run: it needs custom kernels")

    def clean_message(self, message: str) -> str:
        return clean_ort_message(message)

    def confirmation(self, model, base_dir) -> Confirmation:
        """:meth:`RuntimeTarget.confirmation`; a run that failed on every generated input set
        is traced to the model's declared intermediate shapes when the same model without
        them runs on the same sets: then each declaration that run contradicts is a
        ``declared-shape`` finding (:mod:`.declared_shapes`)."""
        result = super().confirmation(model, base_dir)
        if not result.inconclusive_run or not result.run_error:
            return result
        import hashlib

        key = (hashlib.sha256(model.SerializeToString()).digest(), str(base_dir),
               "declared-shapes", *self.confirmation_key())
        if key not in self.confirmations:
            findings = self._declared_shape_findings(model, base_dir, result.run_error)
            self.confirmations[key] = Confirmation(
                result.run_error, "run", findings=tuple(findings)) if findings else result
        return self.confirmations[key]

    def _declared_shape_findings(self, model, base_dir, error: str) -> list[Finding]:
        from rewriter.plugin import generated_feeds

        from .declared_shapes import (
            contradiction_findings,
            contradictions,
            declared_intermediates,
            shapes_model,
        )

        declared = declared_intermediates(model)
        if not declared:
            return []
        feeds, _ = generated_feeds(model)
        if not feeds:
            return []
        ran = run_shapes_in_child(shapes_model(model, list(declared)), feeds, self.provider,
                                  base_dir, self.libraries)
        if ran is None:  # it fails without the declarations too: not theirs
            return []
        index, shapes = ran
        return contradiction_findings(self.name, model,
                                      contradictions(model, feeds[index], shapes), error)

    def confirm_job(self, model, base_dir, data, path, feeds):
        """A real session in a child process (:data:`CONFIRM_CHILD`), made by path and from
        bytes, run once on the input sets."""
        return ([CONFIRM_CHILD, self.provider, str(base_dir or ""), *self.libraries],
                {"model": data, "path": path, "feeds": feeds})

    def run_refuses(self, message: str) -> bool:
        """A run error is a refusal when its status is NOT_IMPLEMENTED or its message says
        onnxruntime lacks something ("4D mask in attention cpu kernel is not supported");
        INVALID_ARGUMENT and the like (an index out of range, shapes that do not fit) may
        come from the generated inputs."""
        return ": NOT_IMPLEMENTED :" in message or super().run_refuses(message)

    runs_otherwise_as_oracle = staticmethod(oracle_session_differs)  # (runtime.py)

    def prepare(self, model, base_dir):
        """An onnxruntime session (custom-op libraries registered) as a run function."""
        import onnxruntime as ort

        problem = self._use_kernels(model)  # kernels a rewritten model lists, registered
        if problem:
            raise RuntimeError(problem)

        so = ort.SessionOptions()
        so.log_severity_level = 4
        so.add_session_config_entry(
            "session.model_external_initializers_file_folder_path", str(base_dir))
        if self.as_oracle:  # the model's definition (docs/compare.md): no accuracy-level-4
            # MatMulNBits fusion of DequantizeLinear -> MatMul, no QDQ -> QLinear* fusion (each
            # measured off the definition), one thread for thread-dependent kernels; as a
            # target, onnxruntime loads the model as its users do
            so.add_session_config_entry(QDQ_MATMULNBITS_ACCURACY_LEVEL, "0")
            so.add_session_config_entry(DISABLE_QUANT_QDQ, "1")
            if thread_dependent_ops(model):
                so.intra_op_num_threads = 1
        for lib in self.libraries:
            so.register_custom_ops_library(lib)
        try:
            from rewriter.plugin import KernelSession

            session = KernelSession(model.SerializeToString(), so, providers=[self.provider])
        except Exception as e:  # noqa: BLE001 - say it without onnxruntime's boilerplate
            raise RuntimeError(clean_ort_message(str(e).strip().splitlines()[0]
                                                  if str(e).strip() else type(e).__name__)
                               ) from None
        inputs = [i.name for i in session.get_inputs()]
        outputs = [o.name for o in session.get_outputs()]
        declared = [o.type for o in session.get_outputs()]

        def run(feeds):
            from rewriter_plugins.onnxruntime_feeds import from_ort_output, run_once

            # ml_dtypes' bfloat16/float8/4-bit arrays go in as OrtValues of their bits, and
            # outputs of those types come back read from their bits
            try:
                values = run_once(session, {n: feeds[n] for n in inputs if n in feeds})
            except Exception as e:  # noqa: BLE001
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise RuntimeError(clean_ort_message(first)) from None
            if values is None:
                raise RuntimeError("an output is of a kind onnxruntime's Python API cannot "
                                   "return (neither a tensor nor readable from its bits)")
            return {name: from_ort_output(value, kind)
                    for name, value, kind in zip(outputs, values, declared)}

        return run

    def _confirm_with_kernels(self, model, base_dir) -> str | None:
        """The child loads the same plugins and registers the model's kernels first."""
        import json

        self._registry()
        args = {"provider": self.provider, "base_dir": str(base_dir or ""),
                "specs": list(getattr(self.plugins, "specs", ())),
                "autoload": bool(getattr(self.plugins, "autoload", True)),
                "libraries": list(self._given_libraries)}
        script = (
            "import sys, json\n"
            "from rewriter.comparison.runtime import confirm_child\n"
            "error = confirm_child(**json.loads(sys.argv[1]), "
            "model_bytes=sys.stdin.buffer.read())\n"
            "if error:\n"
            "    print(error)\n"
            "    sys.exit(3)\n"
        )
        return confirm_with_kernels_in_child([script, json.dumps(args)], model, base_dir)



def _versioned(verdict, version):
    """A (reason, detail) verdict or Finding as (reason, detail, version), or None."""
    if verdict is None:
        return None
    if isinstance(verdict, Finding):
        return (verdict.reason, verdict.detail, verdict.version)
    return (verdict[0], verdict[1], version)

