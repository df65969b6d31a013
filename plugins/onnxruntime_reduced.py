"""onnxruntime reduced builds: the operator configuration file their build keeps kernels for.

A custom minimal or mobile onnxruntime is built with ``--include_ops_by_config FILE``
(``required_operators.config``, written by ``convert_onnx_models_to_ort`` or by hand). Each
line is ``domain;opset[,opset...];Op[,Op...]``; an op may be followed by the JSON of its
type reduction (``Add{"inputs": {"0": ["float", "int32_t"]}}``, OneHot's ``{"custom":
[[...]]}``); ``!globally_allowed_types;T1,T2`` and ``!no_ops_specified_means_all_ops_are_required``
are directives; ``#`` starts a comment (onnxruntime's ``tools/reduced_build_config_parser.py``
is the reference). The build keeps a kernel registered for versions [a, b] of an op when the
file lists the op at an opset in [a, b] (``exclude_unused_ops.py``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rewriter.plugin import TargetError, normalize_domain

# C++ type names used by onnxruntime's type reduction -> ONNX tensor element type names
_CPP_TYPES = {
    "float": "float", "double": "double", "bool": "bool", "std::string": "string",
    "int8_t": "int8", "uint8_t": "uint8", "int16_t": "int16", "uint16_t": "uint16",
    "int32_t": "int32", "uint32_t": "uint32", "int64_t": "int64", "uint64_t": "uint64",
    "MLFloat16": "float16", "BFloat16": "bfloat16", "Float8E4M3FN": "float8e4m3fn",
    "Float8E4M3FNUZ": "float8e4m3fnuz", "Float8E5M2": "float8e5m2",
    "Float8E5M2FNUZ": "float8e5m2fnuz", "Int4x2": "int4", "UInt4x2": "uint4",
}


@dataclass(frozen=True)
class OpTypes:
    """The types one op is reduced to: per input / output index, or OneHot's triples."""

    inputs: Mapping[int, frozenset[str]] = field(default_factory=dict)
    outputs: Mapping[int, frozenset[str]] = field(default_factory=dict)
    custom: frozenset[tuple[str, ...]] = frozenset()


@dataclass(frozen=True)
class ReducedBuild:
    """What a reduced-build operator configuration keeps."""

    path: str
    ops: Mapping[tuple[str, str], frozenset[int]]  # (domain, op) -> opsets it is listed at
    types: Mapping[tuple[str, str], OpTypes]
    allowed_types: frozenset[str] | None = None  # !globally_allowed_types, as ONNX names
    all_ops: bool = False  # no op listed and "no ops specified means all ops are required"

    def listed_opsets(self, domain: str, op: str) -> frozenset[int]:
        return self.ops.get((normalize_domain(domain), op), frozenset())


def _tensor_type(cpp: str, where: str) -> str:
    name = _CPP_TYPES.get(cpp.strip())
    if name is None:
        raise TargetError(f"{where}: unknown type {cpp!r} (onnxruntime's C++ type names: "
                          f"{', '.join(sorted(_CPP_TYPES))})")
    return f"tensor({name})"


def _split_ops(text: str, where: str) -> list[tuple[str, str | None]]:
    """``OpA,OpB{json},OpC`` -> [(op, json or None)] (braces nest; commas inside JSON)."""
    out: list[tuple[str, str | None]] = []
    cur, end = 0, len(text)
    while cur < end:
        comma = text.find(",", cur)
        comma = end if comma == -1 else comma
        brace = text.find("{", cur)
        if cur < brace < comma:
            i, depth = brace + 1, 1
            while depth and i < end:
                depth += {"{": 1, "}": -1}.get(text[i], 0)
                i += 1
            if depth:
                raise TargetError(f"{where}: unbalanced braces in {text[brace:]!r}")
            out.append((text[cur:brace].strip(), text[brace:i]))
            cur = i + 1
        else:
            out.append((text[cur:comma].strip(), None))
            cur = comma + 1
    return [(op, js) for op, js in out if op]


def _op_types(entry: str, where: str) -> OpTypes:
    try:
        data = json.loads(entry)
    except json.JSONDecodeError as e:
        raise TargetError(f"{where}: type information is not JSON: {e}") from None

    def per_index(key: str) -> dict[int, frozenset[str]]:
        return {int(i): frozenset(_tensor_type(t, where) for t in types)
                for i, types in (data.get(key) or {}).items()}

    custom = frozenset(tuple(_tensor_type(t, where) for t in triple)
                       for triple in data.get("custom") or ())
    return OpTypes(per_index("inputs"), per_index("outputs"), custom)


def read_config(path: str | Path) -> ReducedBuild:
    """Parse a reduced-build operator configuration (errors name the file and line)."""
    file = Path(path)
    try:
        lines = file.read_text().splitlines()
    except OSError as e:
        raise TargetError(f"cannot read the reduced-build operator config {str(path)!r}: "
                          f"{e.strerror or e}") from None
    ops: dict[tuple[str, str], set[int]] = {}
    types: dict[tuple[str, str], OpTypes] = {}
    allowed: frozenset[str] | None = None
    all_if_none = False
    for number, raw in enumerate(lines, 1):
        line, where = raw.strip(), f"{path}:{number}"
        if not line or line.startswith("#"):
            continue
        if line.startswith("!globally_allowed_types;"):
            allowed = frozenset(_tensor_type(t, where) for t in line.split(";", 1)[1].split(",")
                                if t.strip())
            continue
        if line == "!no_ops_specified_means_all_ops_are_required":
            all_if_none = True
            continue
        parts = line.split(";", 2)
        if len(parts) != 3:
            raise TargetError(f"{where}: expected 'domain;opset[,opset];Op[,Op]', got {line!r}")
        domain, opsets_text, ops_text = (p.strip() for p in parts)
        try:
            opsets = {int(v) for v in opsets_text.split(",")}
        except ValueError:
            raise TargetError(f"{where}: opsets must be integers, got {opsets_text!r}") from None
        for op, entry in _split_ops(ops_text, where):
            key = (normalize_domain(domain), op)
            ops.setdefault(key, set()).update(opsets)
            if entry is not None:
                types[key] = _op_types(entry, where)
    if allowed is not None and types:
        raise TargetError(f"{path}: globally allowed types and per-op types together are not "
                          "supported (onnxruntime refuses them too)")
    return ReducedBuild(str(path), {k: frozenset(v) for k, v in ops.items()}, types, allowed,
                        all_ops=all_if_none and not ops)


def type_problem(build: ReducedBuild, domain: str, op: str, input_types, output_types
                 ) -> str | None:
    """Why the build's type reduction drops the kernel for these types (None: kept).
    ``input_types``/``output_types``: the node's types by position, None where unknown."""
    spec = build.types.get((normalize_domain(domain), op))
    if spec is not None:
        for kind, given, wanted in (("input", input_types, spec.inputs),
                                    ("output", output_types, spec.outputs)):
            for i, allowed in sorted(wanted.items()):
                t = given[i] if i < len(given) else None
                if t is not None and t not in allowed:
                    return (f"{op}'s {kind} {i} is {t}; the build keeps it only for "
                            f"{_short(allowed)}")
        if spec.custom and len(input_types) >= 3 and all(input_types[:3]):
            # onnxruntime orders OneHot's registration types as (indices, values, depth)
            triple = (input_types[0], input_types[2], input_types[1])
            if triple not in spec.custom:
                return (f"{op} with (indices, values, depth) types {_short(triple)} is not "
                        f"among the build's {sorted(_short(t) for t in spec.custom)}")
    if build.allowed_types is not None:
        # stricter than onnxruntime, which reduces only the typed registrations: every known
        # type of the node must be an allowed one
        for t in (*input_types, *output_types):
            if t is not None and t.startswith("tensor(") and t not in build.allowed_types:
                return f"{t} is not among the build's globally allowed types"
    return None


def _short(types) -> str:
    names = [t.removeprefix("tensor(").removesuffix(")") for t in types]
    return "{" + ", ".join(sorted(names) if isinstance(types, frozenset) else names) + "}"
