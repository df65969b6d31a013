"""Target ``onnxruntime[:PROVIDER]``: capability read from onnxruntime's live kernel registry.

A node runs when a kernel of the provider (or the CPU fallback) covers its resolved schema
version and type binding, or when the op is an ONNX function whose body runs. Ops from
custom-op libraries the user registers are probed with a real one-node session. The static
verdict can be confirmed by building a real session in a child process and, for small models,
running it once on generated inputs.
"""

from __future__ import annotations

import hashlib
import pickle
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

from rewriter.plugin import (
    BY_NODE,
    BY_TYPES,
    REFUSED,
    RUN_BY_DEFAULT_BELOW,
    BodyUnavailable,
    Confirmation,
    Finding,
    NodeQuery,
    OpSchema,
    SchemaIndex,
    Target,
    TargetError,
    TargetOptions,
    bind_type_params,
    confirm_in_child,
    generated_feeds,
    hookimpl,
    infer_node_outputs,
    model_size,
    normalize_domain,
    onnx_schemas,
    onnxruntime_schemas,
    opset_import_findings,
    opset_map,
    schema_arity_problem,
    schema_function_body,
    type_proto,
)

CPU = "CPUExecutionProvider"
CONFIRM_BY_DEFAULT_BELOW = 100 * 2**20  # bytes of model + external data
QDQ_MATMULNBITS_ACCURACY_LEVEL = "session.qdq_matmulnbits_accuracy_level"
CONFIRM_TIMEOUT_S = 300
EXTENSIONS = "extensions"
# Nodes onnxruntime turns into initializers while loading; they need no kernel.
_FOLDED_OPS = frozenset({"Constant"})
# Ops whose CPU kernels reject some attribute values when constructed (e.g. layout=1).
_KERNEL_VALIDATES_ATTRIBUTES = frozenset({"LSTM", "GRU", "RNN", "StringNormalizer"})
_FLOAT16, _FLOAT = "tensor(float16)", "tensor(float)"
_EXPANDS = ("expands", "")  # sentinel verdict: runs by inlining the op's function body


@dataclass(frozen=True)
class KernelDef:
    start: int
    end: int
    constraints: Mapping[str, frozenset[str]]


@cache
def _ort_kernels(provider: str) -> dict[tuple[str, str], list[KernelDef]]:
    from onnxruntime.capi import _pybind_state as C

    table: dict[tuple[str, str], list[KernelDef]] = {}
    for k in C.get_all_opkernel_def():
        if k.provider != provider:
            continue
        start, end = k.version_range
        constraints = {p: frozenset(ts) for p, ts in k.type_constraints.items()}
        table.setdefault((normalize_domain(k.domain), k.op_name), []).append(
            KernelDef(start, end, constraints)
        )
    return table


# Domains whose opset ceiling onnxruntime declares and the opset-conversion pass can lower to.
_CEILING_DOMAINS = ("", "ai.onnx.ml")


def runtime_ceilings(schemas: SchemaIndex) -> dict[str, int] | None:
    """The installed onnxruntime's highest ai.onnx and ai.onnx.ml opsets, where they are
    below the newest the installed onnx knows (onnxruntime 1.23 stops at ai.onnx 23): an
    opset-conversion pass lowers newer models to them. None when onnxruntime knows every
    opset onnx does (no model onnx writes is above it)."""
    newest = onnx_schemas().max_version
    loads = released_opsets(tuple((d, schemas.max_version[d]) for d in _CEILING_DOMAINS
                                  if d in schemas.max_version))
    out = {}
    for d in _CEILING_DOMAINS:
        if d in schemas.max_version:
            ceiling = min(schemas.max_version[d], loads.get(d, schemas.max_version[d]))
            if ceiling < newest.get(d, 0):
                out[d] = ceiling
    return out or None


@cache
def released_opsets(known: tuple[tuple[str, int], ...]) -> dict[str, int]:
    """Where the installed onnxruntime has schemas for an opset it refuses to load (1.30
    knows ai.onnx 27 but loads "official released" opsets only, up to 26): the highest it
    loads, per domain of ``known`` ((domain, highest schema version) pairs), asked with
    one-node models. Empty when it loads all it knows."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "opset", [x], [y])
    so = ort.SessionOptions()
    so.log_severity_level = 4
    ir = runtime_max_ir_version()
    out = {}
    for domain, top in known:
        for version in range(top, max(top - 3, 0), -1):
            imports = {"": 13, domain: version}
            model = helper.make_model(graph, opset_imports=[
                helper.make_opsetid(d, v) for d, v in imports.items()])
            if ir is not None:
                model.ir_version = min(model.ir_version, ir)
            try:
                ort.InferenceSession(model.SerializeToString(), so,
                                     providers=["CPUExecutionProvider"])
            except Exception as e:  # noqa: BLE001 - "only *guarantees* support for ... released"
                if "released" in str(e):
                    continue
                break  # refused for another reason: the probe tells nothing
            if version < top:
                out[domain] = version
            break
    return out


@cache
def runtime_max_ir_version() -> int | None:
    """The highest IR version the installed onnxruntime loads, asked with one-node models
    (onnxruntime 1.23 loads up to IR 11); None when it loads the newest onnx writes."""
    import onnxruntime as ort
    from onnx import IR_VERSION, TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "ir", [x], [y])
    so = ort.SessionOptions()
    so.log_severity_level = 4
    for ir in range(IR_VERSION, 6, -1):
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                                  ir_version=ir)
        try:
            ort.InferenceSession(model.SerializeToString(), so,
                                 providers=["CPUExecutionProvider"])
        except Exception:  # noqa: BLE001 - "Unsupported model IR version": try an older one
            continue
        return None if ir == IR_VERSION else ir
    return None


def available_providers() -> list[str]:
    import onnxruntime

    return onnxruntime.get_available_providers()


def resolve_provider(argument: str | None) -> str:
    if not argument:
        return CPU
    name = argument if argument.endswith("ExecutionProvider") else f"{argument}ExecutionProvider"
    providers = available_providers()
    for p in providers:
        if p.lower() == name.lower():
            return p
    raise TargetError(
        f"onnxruntime provider {argument!r} is not available here; installed: "
        + ", ".join(p.removesuffix("ExecutionProvider") for p in providers)
    )


def resolve_library(spec: str) -> str:
    if spec == EXTENSIONS:
        import onnxruntime_extensions

        return onnxruntime_extensions.get_library_path()
    return spec


def _short_types(types) -> str:
    names = sorted(t.removeprefix("tensor(").removesuffix(")") for t in types)
    return "{" + ", ".join(names) + "}"


class OnnxRuntimeTarget(Target):
    """onnxruntime with one execution provider (CPU by default)."""

    # onnxruntime is the first runtime of the oracle chain: its numbers are the yardstick
    compares_numbers = False

    def __init__(self, provider: str = CPU, options: TargetOptions | None = None) -> None:
        options = options or TargetOptions()
        self.provider = provider
        short = provider.removesuffix("ExecutionProvider")
        self.name = "onnxruntime" if provider == CPU else f"onnxruntime:{short}"
        self.description = f"onnxruntime ({provider})"
        self.libraries = tuple(resolve_library(x) for x in options.custom_op_libraries)
        self._given_libraries = self.libraries  # the model's kernels may add to them
        self.plugins = options.plugins
        self.confirm_option = options.confirm
        self._kernels = dict(_ort_kernels(CPU))
        if provider != CPU:  # ORT falls back to CPU for nodes the provider cannot take
            for key, defs in _ort_kernels(provider).items():
                self._kernels[key] = self._kernels.get(key, []) + defs
        self._verdicts: dict[tuple, tuple[str, str] | None] = {}
        self._confirmations: dict[tuple, Confirmation] = {}
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
        if any(_accepts(k, binding) for k in kernels):
            return True
        # onnxruntime's InsertCastTransformer runs float16 nodes through float kernels
        if _FLOAT16 in binding.values():
            widened = {p: (_FLOAT if t == _FLOAT16 else t) for p, t in binding.items()}
            return any(_accepts(k, widened) for k in kernels)
        return False

    def _schema_verdict(
        self, node, schema: OpSchema, binding, types, opset: int, depth: int, declared=None
    ):
        """None if a kernel takes the node; _EXPANDS if its function body runs instead;
        else (reason, detail)."""
        op = f"{node.op_type}({schema.since_version})"
        if schema.domain == "" and node.op_type in _FOLDED_OPS:
            return None
        kernels = self._kernels.get((schema.domain, node.op_type), [])
        in_range = [k for k in kernels if _version_matches(k, schema.since_version)]
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
                    f"{a}-{b}" if b != _OPEN_END else f"{a} (exactly)" for a, b in ranges
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
                f"{p}={binding[p]} (kernels take {p} in {_short_types(ts)})"
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
                        f"body: {_clean_ort_message(message)}")
            guessed = any(n and not t for n, t in zip(node.input, in_types))
            if guessed and "Type Error" in message:
                return None  # the op exists; we only guessed its input types wrong
            return ("runtime-refused", _clean_ort_message(message))
        return None

    # -- confirmation ---------------------------------------------------------------------

    def wants_confirm(self, loaded) -> bool:
        return self.confirm_by_size(self.confirm_option, loaded, CONFIRM_BY_DEFAULT_BELOW)

    def confirm(self, model, base_dir) -> str | None:
        """onnxruntime's refusal of the model (see :meth:`confirmation`), or None."""
        return self.confirmation(model, base_dir).refusal

    def confirmation(self, model, base_dir) -> Confirmation:
        """Build a real session in a child process and, for models up to
        RUN_BY_DEFAULT_BELOW bytes, run it once on generated inputs (a crash is an answer,
        not our crash). Cached per model bytes and folder."""
        from rewriter.plugin import RewriterError, read_needs

        data = model.SerializeToString()
        key = (hashlib.sha256(data).digest(), str(base_dir), self.libraries)
        if key in self._confirmations:
            return self._confirmations[key]
        try:
            if read_needs(model):
                error = self._confirm_with_kernels(model, base_dir)
                result = Confirmation(error, "load" if error else "",
                                      note="" if error else "not run: it needs custom kernels")
                self._confirmations[key] = result
                return result
        except RewriterError as e:
            return Confirmation(str(e), "load")
        feeds, note = None, f"not run: larger than {RUN_BY_DEFAULT_BELOW // 2**20} MiB"
        if self.confirm_by_size(None, model_size(model, base_dir), RUN_BY_DEFAULT_BELOW):
            feeds, note = generated_feeds(model)
        from rewriter.plugin import probe_models

        try:
            with probe_models.model_file(model, base_dir, data) as file:
                payload = pickle.dumps({"model": data, "path": file.path, "feeds": feeds})
                result = confirm_in_child(
                    self, "onnxruntime",
                    [_CONFIRM_CHILD, self.provider, str(base_dir or ""), *self.libraries],
                    payload, base_dir, CONFIRM_TIMEOUT_S, _clean_ort_message)
        except ValueError as e:  # an external-data location leaving the model's folder
            return Confirmation(str(e), "load")
        note = "; ".join(n for n in (file.note, note) if n)
        if note and result.refusal is None and not result.note:
            result = Confirmation(ran=result.ran, note=note)
        self._confirmations[key] = result
        return result

    def run_refuses(self, message: str) -> bool:
        """A run error is a refusal when its status is NOT_IMPLEMENTED or its message says
        onnxruntime lacks something ("4D mask in attention cpu kernel is not supported");
        INVALID_ARGUMENT and the like (an index out of range, shapes that do not fit) may
        come from the generated inputs."""
        return ": NOT_IMPLEMENTED :" in message or super().run_refuses(message)

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
        # onnxruntime's optimizer fuses DequantizeLinear(8/4-bit weights) -> MatMul into a
        # MatMulNBits it gives accuracy_level 4 by default (the activations quantized to
        # int8 per block): measured 130 units of the output's uint16 quantization off the
        # model's definition on the QNN recipe's model. At 0 the fused kernel computes the
        # definition, which a comparison measures against (a MatMulNBits of the model keeps
        # its own accuracy_level).
        so.add_session_config_entry(QDQ_MATMULNBITS_ACCURACY_LEVEL, "0")
        for lib in self.libraries:
            so.register_custom_ops_library(lib)
        try:
            from rewriter.plugin import KernelSession

            session = KernelSession(model.SerializeToString(), so, providers=[self.provider])
        except Exception as e:  # noqa: BLE001 - say it without onnxruntime's boilerplate
            raise RuntimeError(_clean_ort_message(str(e).strip().splitlines()[0]
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
                raise RuntimeError(_clean_ort_message(first)) from None
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
        return _confirm_in_child([script, json.dumps(args)], model, base_dir)


def _confirm_in_child(argv: list[str], model, base_dir) -> str | None:
    """Run ``python -c argv[0] argv[1:]`` with the model on stdin: None if the session was
    built, else onnxruntime's error (exit code 3) or what the crash left behind."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", *argv], input=model.SerializeToString(),
            capture_output=True, timeout=CONFIRM_TIMEOUT_S,
            cwd=str(base_dir) if base_dir is not None else None,
        )
    except subprocess.TimeoutExpired:
        return f"building a session took longer than {CONFIRM_TIMEOUT_S}s"
    if proc.returncode == 0:
        return None
    if proc.returncode == 3:
        return _clean_ort_message(proc.stdout.decode(errors="replace").strip())
    tail = proc.stderr.decode(errors="replace").strip().splitlines()[-1:]
    return (f"onnxruntime crashed while loading the model (exit code {proc.returncode})"
            + (f": {tail[0]}" if tail else ""))


# The confirming child (rewriter.detect.targets.confirm_in_child): argv provider, external-data
# folder, custom-op libraries; stdin a pickle of {"model": bytes, "path": the model as a file
# (None: not asked by path), "feeds": [input sets] or None}. A session is made as users make
# one, InferenceSession(path), and from the bytes (external data from the folder): the
# stricter answer wins, and a refusal by one says so; the session by path runs. It imports no
# onnx (a second): the inputs are generated by the parent.
_CONFIRM_CHILD = """
import pickle, sys
import onnxruntime as ort
from rewriter.detect.targets import child_says, run_sets
from rewriter_plugins.onnxruntime_feeds import run_once

job = pickle.load(sys.stdin.buffer)
so = ort.SessionOptions()
so.log_severity_level = 4
so.add_session_config_entry("session.model_external_initializers_file_folder_path",
                            sys.argv[2])
routes = [("InferenceSession(path)", job["path"])] if job["path"] else []
routes.append(("InferenceSession(bytes)", job["model"]))
sessions, refusals = [], []
try:
    for library in sys.argv[3:]:
        so.register_custom_ops_library(library)
except Exception as e:
    text = str(e).strip()
    child_says("load", text.splitlines()[0] if text else type(e).__name__)
    sys.exit(0)
for route, source in routes:
    try:
        sessions.append((route, ort.InferenceSession(source, so, providers=[sys.argv[1]])))
    except Exception as e:
        text = str(e).strip()
        refusals.append((route, text.splitlines()[0] if text else type(e).__name__))
if refusals:
    said = ", ".join(r for r, _ in refusals)
    ok = f"; {sessions[0][0]} loads it" if sessions else ""
    child_says("load", f"{refusals[0][1]} [refused by {said}{ok}]" if len(routes) > 1
               else refusals[0][1])
    sys.exit(0)
child_says("loaded")
session = sessions[0][1]
if job["feeds"] is not None:
    error, values = run_sets(lambda feeds: run_once(session, feeds), job["feeds"])
    child_says("run", error, values=values) if error else child_says("ran")
"""


_OPEN_END = 2**31 - 1


def _version_matches(kernel: KernelDef, since_version: int) -> bool:
    """onnxruntime's rule (KernelRegistry::VerifyKernelDef): an open-ended kernel ("since
    N") matches only schema version N exactly; a closed range matches any version in it."""
    if kernel.start == since_version:
        return True
    return kernel.start < since_version <= kernel.end and kernel.end != _OPEN_END


def _versioned(verdict, version):
    """A (reason, detail) verdict or Finding as (reason, detail, version), or None."""
    if verdict is None:
        return None
    if isinstance(verdict, Finding):
        return (verdict.reason, verdict.detail, verdict.version)
    return (verdict[0], verdict[1], version)


def _accepts(kernel: KernelDef, binding: Mapping[str, str]) -> bool:
    for param, allowed in kernel.constraints.items():
        actual = binding.get(param)
        if actual is not None and actual not in allowed:
            return False
    return True


def _clean_ort_message(message: str) -> str:
    """Drop onnxruntime's '[ONNXRuntimeError] : 1 : FAIL :' prefix and source locations."""
    import re

    message = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", message)
    message = re.sub(r"/onnxruntime_src/\S+:\d+ [^\]]*?\) ", "", message)
    return message.strip()


class ReducedBuildTarget(OnnxRuntimeTarget):
    """A reduced onnxruntime build (``onnxruntime:ops=FILE``): the kernels of the installed
    onnxruntime that the build's operator configuration keeps. Models run (``compare``,
    confirmation) on the full installed onnxruntime."""

    def __init__(self, config_path: str, provider: str = CPU,
                 options: TargetOptions | None = None) -> None:
        from rewriter_plugins.onnxruntime_reduced import read_config

        super().__init__(provider, options)
        self.build = read_config(config_path)
        self.name = (f"{self.name},ops={config_path}" if provider != CPU
                     else f"onnxruntime:ops={config_path}")
        self.description = f"a reduced onnxruntime build ({provider}) with the ops of {config_path}"
        self._reduced: dict[tuple, tuple[str, str, int | None] | None] = {}

    def check_op(self, domain: str, op_type: str, opset: int | None) -> str:
        """As onnxruntime's: the build's own verdict depends on the op and its types."""
        return super().check_op(domain, op_type, opset)

    def check_node(self, query: NodeQuery) -> Finding | None:
        finding = super().check_node(query)
        if finding is not None or self.build.all_ops:
            return finding
        node, types = query.node, query.types
        ins = tuple(types.get(n) if n else None for n in query.inputs)
        outs = tuple(types.get(n) if n else None for n in query.outputs)
        key = (query.domain, node.op_type, query.opset, ins, outs)
        verdict = self._reduced.get(key, ...)
        if verdict is ...:
            verdict = self._reduced[key] = self._build_verdict(query, ins, outs)
        return None if verdict is None else self.finding(query, *verdict[:2], version=verdict[2])

    def _build_verdict(self, query: NodeQuery, ins, outs):
        from rewriter_plugins.onnxruntime_reduced import type_problem

        node, domain = query.node, query.domain
        if domain == "" and node.op_type in _FOLDED_OPS:
            return None
        opset = query.opset or self.schemas.max_version.get(domain)
        schema = self.schemas.resolve(domain, node.op_type, opset or 0)
        if schema is None:
            return None  # a custom-op library's op: not the build's kernels
        label = f"{domain or 'ai.onnx'}::{node.op_type}({schema.since_version})"
        kernels = [k for k in self._kernels.get((domain, node.op_type), [])
                   if _version_matches(k, schema.since_version)]
        listed = self.build.listed_opsets(domain, node.op_type)
        if not kernels:
            return ("no-kernel", f"{label} runs in onnxruntime by inlining its function body; "
                    f"the reduced build ({self.build.path}) is checked by its kernels only",
                    schema.since_version)
        if not any(k.start <= o <= k.end for k in kernels for o in listed):
            where = (f"lists it only at opset {', '.join(map(str, sorted(listed)))}" if listed
                     else "does not list it")
            return ("no-kernel", f"the reduced build's operator config ({self.build.path}) "
                    f"{where}: no kernel for {label}", schema.since_version)
        problem = type_problem(self.build, domain, node.op_type, ins, outs)
        if problem:
            return ("type-binding", f"the reduced build ({self.build.path}): {problem}",
                    schema.since_version)
        return None

    def kernel_problem(self, remedy) -> str | None:
        return (f"{self.name}: a reduced build is checked against its operator config, "
                "not with custom kernels")


_OPS = "ops="


def _make(argument: str | None, options: TargetOptions | None = None) -> OnnxRuntimeTarget:
    """``onnxruntime``, ``onnxruntime:PROVIDER``, ``onnxruntime:ops=FILE`` (a reduced build),
    ``onnxruntime:PROVIDER,ops=FILE``."""
    provider, _, config = (argument or "").partition(_OPS)
    if config or (argument or "").endswith(_OPS):
        if not config:
            raise TargetError("onnxruntime:ops= needs a reduced-build operator config file, "
                              "e.g. onnxruntime:ops=required_operators.config")
        return ReducedBuildTarget(config, resolve_provider(provider.rstrip(",") or None),
                                  options)
    return OnnxRuntimeTarget(resolve_provider(argument), options)


@hookimpl
def register_targets(registry):
    registry.add(
        "onnxruntime",
        _make,
        description="onnxruntime's kernel registry (onnxruntime:PROVIDER for other providers; "
        "onnxruntime:ops=FILE for a reduced build's operator config)",
    )
