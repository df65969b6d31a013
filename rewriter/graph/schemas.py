"""Operator schemas in one normalized shape, from onnx's registry or a runtime's own.

A :class:`SchemaIndex` answers "which version of op X applies at opset N of domain D", the
question every target asks first.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from rewriter.graph.walk import normalize_domain

if TYPE_CHECKING:
    from onnx import FunctionProto

SINGLE, OPTIONAL, VARIADIC = "single", "optional", "variadic"


@dataclass(frozen=True)
class Formal:
    """A formal input or output of an operator."""

    name: str
    type_str: str  # a type parameter ("T") or a concrete type ("tensor(int64)")
    option: str  # SINGLE | OPTIONAL | VARIADIC
    homogeneous: bool = True


@dataclass(frozen=True)
class OpSchema:
    domain: str
    name: str
    since_version: int
    inputs: tuple[Formal, ...]
    outputs: tuple[Formal, ...]
    constraints: dict[str, frozenset[str]]
    has_function: bool = False
    deprecated: bool = False

    def __hash__(self) -> int:
        return hash((self.domain, self.name, self.since_version))

    def formal_for(self, formals: tuple[Formal, ...], index: int) -> Formal | None:
        """The formal parameter the ``index``-th actual argument binds to."""
        if index < len(formals):
            return formals[index]
        if formals and formals[-1].option == VARIADIC:
            return formals[-1]
        return None


_OPTION_NAMES = {0: SINGLE, 1: OPTIONAL, 2: VARIADIC}


def _option(value) -> str:
    name = getattr(value, "name", None)
    if name:
        return {"Single": SINGLE, "Optional": OPTIONAL, "Variadic": VARIADIC}[name]
    return _OPTION_NAMES[int(value)]


def from_onnx_schema(s, *, type_attr: str = "type_str") -> OpSchema:
    """Normalize an ``onnx.defs.OpSchema`` (or onnxruntime's schema object)."""

    def formal(p) -> Formal:
        return Formal(
            name=p.name,
            type_str=getattr(p, type_attr, None) or getattr(p, "typeStr", ""),
            option=_option(p.option),
            homogeneous=getattr(p, "is_homogeneous", getattr(p, "isHomogeneous", True)),
        )

    has_function = bool(getattr(s, "has_function", False)) or bool(
        getattr(s, "has_context_dependent_function", False)
    )
    return OpSchema(
        domain=normalize_domain(s.domain),
        name=s.name,
        since_version=s.since_version,
        inputs=tuple(formal(p) for p in s.inputs),
        outputs=tuple(formal(p) for p in s.outputs),
        constraints={c.type_param_str: frozenset(c.allowed_type_strs) for c in s.type_constraints},
        has_function=has_function,
        deprecated=bool(getattr(s, "deprecated", False)),
    )


class SchemaIndex:
    """Versioned schemas keyed by (domain, op_type), normalized lazily on first use.

    Args:
        raw: ``{(domain, op_type): [schema objects of any version]}``; values are normalized
            with :func:`from_onnx_schema` the first time the op is asked about.
    """

    def __init__(self, raw: dict[tuple[str, str], list]) -> None:
        self._raw = raw
        self._table: dict[tuple[str, str], tuple[list[int], dict[int, OpSchema]]] = {}
        self._cache: dict[tuple[str, str, int], OpSchema | None] = {}
        self.domains = frozenset(d for d, _ in raw)
        self.max_version: dict[str, int] = {}
        for (domain, _), items in raw.items():
            top = max(x.since_version for x in items)
            self.max_version[domain] = max(self.max_version.get(domain, 0), top)

    def _entry(self, domain: str, op_type: str):
        key = (domain, op_type)
        entry = self._table.get(key)
        if entry is None:
            schemas = {}
            for raw in self._raw.get(key, ()):
                schemas[raw.since_version] = from_onnx_schema(raw)
            entry = self._table[key] = (sorted(schemas), schemas)
        return entry

    def knows_op(self, domain: str, op_type: str) -> bool:
        return (normalize_domain(domain), op_type) in self._raw

    def versions(self, domain: str, op_type: str) -> list[int]:
        return self._entry(normalize_domain(domain), op_type)[0]

    def resolve(self, domain: str, op_type: str, opset: int) -> OpSchema | None:
        """The schema in force at ``opset`` of ``domain`` (largest since_version <= opset)."""
        key = (domain, op_type, opset)
        try:
            return self._cache[key]
        except KeyError:
            pass
        versions, schemas = self._entry(normalize_domain(domain), op_type)
        i = bisect.bisect_right(versions, opset)
        found = schemas[versions[i - 1]] if i else None
        self._cache[key] = found
        return found


def group_raw_schemas(schemas) -> dict[tuple[str, str], list]:
    raw: dict[tuple[str, str], list] = {}
    for s in schemas:
        raw.setdefault((normalize_domain(s.domain), s.name), []).append(s)
    return raw


@lru_cache(maxsize=1)
def onnxruntime_schemas() -> SchemaIndex:
    """onnxruntime's own schema registry (ONNX ops plus its contrib domains)."""
    from onnxruntime.capi import _pybind_state as C

    return SchemaIndex(group_raw_schemas(C.get_all_operator_schema()))


@lru_cache(maxsize=1)
def onnx_schemas() -> SchemaIndex:
    """Every schema onnx knows (all domains, all versions, deprecated included)."""
    from onnx import defs

    return SchemaIndex(group_raw_schemas(defs.get_all_schemas_with_history()))


def type_proto(type_str: str | None):
    """A TypeProto from a type string (``tensor(float)``, ``seq(tensor(int64))``,
    ``optional(...)``); None when the string is unknown or unsupported."""
    from onnx import TensorProto, helper

    if not type_str:
        return None
    if type_str.startswith("tensor(") and type_str.endswith(")"):
        try:
            elem = TensorProto.DataType.Value(type_str[len("tensor(") : -1].upper())
        except ValueError:
            return None
        return helper.make_tensor_type_proto(elem, None)
    for prefix, make in (("seq(", helper.make_sequence_type_proto),
                         ("optional(", helper.make_optional_type_proto)):
        if type_str.startswith(prefix) and type_str.endswith(")"):
            inner = type_proto(type_str[len(prefix) : -1])
            return make(inner) if inner is not None else None
    return None


class BodyUnavailable(Exception):
    """The op has a function body, but it cannot be built without knowing more types."""


def schema_function_body(node, opset: int, input_types, declared=None) -> FunctionProto | None:
    """The spec's FunctionProto for a standard op at ``opset`` (plain or context-dependent),
    specialised for this node's attributes and input types; None if the op has no body.

    Raises:
        BodyUnavailable: the body depends on input types that are not known.
    """
    from onnx import FunctionProto, TypeProto, defs

    try:
        schema = defs.get_schema(node.op_type, opset, node.domain)
    except defs.SchemaError:
        return None
    data = None
    try:
        if schema.has_function:
            versions = [v for v in schema.function_opset_versions if v <= opset]
            if versions:
                data = schema.get_function_with_opset_version(max(versions))
        if data is None and schema.has_context_dependent_function:
            versions = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
            if versions:
                protos = []
                for name, t in zip(node.input, input_types):
                    proto = (declared or {}).get(name) if name else TypeProto()  # with shape
                    if proto is None or proto.WhichOneof("value") is None:
                        proto = type_proto(t) if name else TypeProto()
                    if proto is None:  # onnx crashes building some bodies from unknown types
                        raise BodyUnavailable(node.op_type)
                    protos.append(proto)
                types = [p.SerializeToString() for p in protos]
                data = schema.get_context_dependent_function_with_opset_version(
                    max(versions), node.SerializeToString(), types
                )
    except BodyUnavailable:
        raise
    except Exception:  # noqa: BLE001 - onnx raises various errors for unbuildable bodies
        raise BodyUnavailable(node.op_type) from None
    if not data:
        if schema.has_context_dependent_function:
            raise BodyUnavailable(node.op_type)  # the builder needs shapes or attributes
        return None
    body = FunctionProto()
    body.ParseFromString(data)
    return body
