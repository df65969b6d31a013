"""onnxruntime itself: its kernel registry (:func:`ort_kernels`, and onnxruntime's rule for a
kernel's version range, :func:`version_matches`), the highest opsets and IR version it loads,
its execution providers and custom-op libraries, and its error messages in one line
(:func:`clean_ort_message`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

from rewriter.plugin import SchemaIndex, TargetError, normalize_domain, onnx_schemas

CPU = "CPUExecutionProvider"
QDQ_MATMULNBITS_ACCURACY_LEVEL = "session.qdq_matmulnbits_accuracy_level"
DISABLE_QUANT_QDQ = "session.disable_quant_qdq"  # no QDQ -> QLinear* fusion
EXTENSIONS = "extensions"
# Nodes onnxruntime turns into initializers while loading; they need no kernel.
FOLDED_OPS = frozenset({"Constant"})


# Kernels of onnxruntime's CPU provider whose numbers depend on the session's thread count:
# DynamicQuantizeLSTM quantizes each step's hidden state over blocks of ceil(batch /
# threads) rows (UniDirectionalLstm; 1.8e-3 to 6.6e-3 apart between 1 and 2 threads)
THREAD_DEPENDENT_OPS = frozenset({("com.microsoft", "DynamicQuantizeLSTM")})


def thread_dependent_ops(model) -> list[str]:
    """The ``domain::op`` of the model's nodes (main graph, subgraphs and functions) whose
    numbers on onnxruntime depend on its thread count."""
    from rewriter.plugin import iter_nodes

    found = {(site.node.domain or "ai.onnx", site.node.op_type) for site in iter_nodes(model)}
    return sorted(f"{d}::{o}" for d, o in found & THREAD_DEPENDENT_OPS)


def oracle_session_differs(model) -> bool:
    """Whether onnxruntime's oracle session computes ``model`` otherwise than a default one:
    Q/DQ nodes (no fusion into QLinear* or MatMulNBits kernels there) or thread-dependent
    kernels (one thread there)."""
    from rewriter.plugin import iter_nodes

    return bool(thread_dependent_ops(model)) or any(
        site.node.op_type in ("DequantizeLinear", "QuantizeLinear")
        for site in iter_nodes(model))


@dataclass(frozen=True)
class KernelDef:
    start: int
    end: int
    constraints: Mapping[str, frozenset[str]]


@cache
def ort_kernels(provider: str) -> dict[tuple[str, str], list[KernelDef]]:
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
CEILING_DOMAINS = ("", "ai.onnx.ml")


def runtime_ceilings(schemas: SchemaIndex) -> dict[str, int] | None:
    """The installed onnxruntime's highest ai.onnx and ai.onnx.ml opsets, where they are
    below the newest the installed onnx knows (onnxruntime 1.23 stops at ai.onnx 23): an
    opset-conversion pass lowers newer models to them. None when onnxruntime knows every
    opset onnx does (no model onnx writes is above it)."""
    newest = onnx_schemas().max_version
    loads = released_opsets(tuple((d, schemas.max_version[d]) for d in CEILING_DOMAINS
                                  if d in schemas.max_version))
    out = {}
    for d in CEILING_DOMAINS:
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


def short_types(types) -> str:
    names = sorted(t.removeprefix("tensor(").removesuffix(")") for t in types)
    return "{" + ", ".join(names) + "}"


OPEN_END = 2**31 - 1


def version_matches(kernel: KernelDef, since_version: int) -> bool:
    """onnxruntime's rule (KernelRegistry::VerifyKernelDef): an open-ended kernel ("since
    N") matches only schema version N exactly; a closed range matches any version in it."""
    if kernel.start == since_version:
        return True
    return kernel.start < since_version <= kernel.end and kernel.end != OPEN_END



def accepts(kernel: KernelDef, binding: Mapping[str, str]) -> bool:
    for param, allowed in kernel.constraints.items():
        actual = binding.get(param)
        if actual is not None and actual not in allowed:
            return False
    return True


def clean_ort_message(message: str) -> str:
    """Drop onnxruntime's '[ONNXRuntimeError] : 1 : FAIL :' prefix and source locations."""
    import re

    message = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", message)
    message = re.sub(r"/onnxruntime_src/\S+:\d+ [^\]]*?\) ", "", message)
    return message.strip()
