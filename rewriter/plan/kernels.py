"""Custom kernels: Python callables over numpy arrays that run what cannot be decomposed.

A plugin registers a kernel lazily (``registry.add(domain, op_type, "module:attr")`` in
``register_kernels``); the attribute is a :class:`Kernel`, built with :func:`kernel`::

    @kernel(signatures=["float -> float", "double -> double"], attributes={"alpha": 1.0})
    def fused_swish(x, *, alpha):
        return x / (1 + np.exp(-alpha * x))

One kernel has two adapters:

- **onnxruntime**, through onnxruntime-extensions' Python custom ops (``PyCustomOpDef``).
  Those live in domain ``ai.onnx.contrib`` and have one type signature each, so the rewrite
  retargets a node to ``ai.onnx.contrib::<unique name per signature>`` and records in the
  model's ``metadata_props`` (key :data:`METADATA_KEY`) which kernels the model needs.
  :func:`register_onnxruntime` registers them lazily and idempotently (onnxruntime-extensions
  registers process-globally and a second registration of one name breaks every later
  session).
- **the ONNX reference evaluator**: :func:`reference_ops` builds ``OpRun`` subclasses for
  ``ReferenceEvaluator(model, new_ops=...)``, the oracle for the original model's
  proprietary ops.

Ops onnxruntime-extensions implements natively are registered with
``registry.add_native(...)``; a node remedied that way keeps (or is retargeted to) the native
op and the model records that it needs the extensions library.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from rewriter.errors import RewriterError
from rewriter.graph.opid import OpId, domain_label

if TYPE_CHECKING:
    from onnx import ModelProto, NodeProto

    from rewriter.registry import KernelEntry, NativeEntry, Registry

CONTRIB_DOMAIN = "ai.onnx.contrib"  # where onnxruntime-extensions registers Python ops
METADATA_KEY = "rewriter.kernels"
EXTENSIONS = "extensions"  # the onnxruntime-extensions library, as --custom-ops-library names it

# Element types onnxruntime-extensions' Python ops accept (float16, bfloat16 and complex
# types make it abort the process, so they are refused before registration).
ORT_PYTHON_TYPES = frozenset({
    "float", "double", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
    "uint64", "bool", "string",
})
_ELEMENT_TYPES = ORT_PYTHON_TYPES | {"float16", "bfloat16"}
_ATTRIBUTE_TYPES = {float: "float", int: "int", str: "string"}


class KernelError(RewriterError):
    """A model needs a kernel no installed plugin provides, or a kernel is unusable."""


class KernelRunError(RewriterError):
    """A Python kernel raised while onnxruntime ran it."""


# -- declaring kernels ---------------------------------------------------------------------


@dataclass(frozen=True)
class Signature:
    """Element types of the inputs and outputs (``("float", "float") -> ("float",)``)."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    @classmethod
    def parse(cls, spec: str | Signature | tuple) -> Signature:
        """``"float, int64 -> float"``, a Signature, or ``(inputs, outputs)``."""
        if isinstance(spec, Signature):
            return spec
        if isinstance(spec, str):
            left, arrow, right = spec.partition("->")
            if not arrow:
                raise ValueError(f"signature {spec!r} has no '->'")
            inputs = tuple(t.strip() for t in left.split(",") if t.strip())
            outputs = tuple(t.strip() for t in right.split(",") if t.strip())
        else:
            inputs, outputs = (tuple(x) for x in spec)
        for t in inputs + outputs:
            if t not in _ELEMENT_TYPES:
                raise ValueError(f"signature {spec!r}: unknown element type {t!r}")
        if not outputs:
            raise ValueError(f"signature {spec!r} declares no output")
        return cls(inputs, outputs)

    @property
    def label(self) -> str:
        return f"{', '.join(self.inputs)} -> {', '.join(self.outputs)}"

    def as_dict(self) -> dict[str, list[str]]:
        return {"inputs": list(self.inputs), "outputs": list(self.outputs)}


@dataclass(frozen=True)
class Attribute:
    """An attribute a kernel takes: a scalar (``float``, ``int``, ``string``) or a list
    (``ints``, ``floats``). onnxruntime-extensions passes only scalars, so a list travels on
    the retargeted node as JSON text (see :func:`retarget_node`) and reaches the kernel
    function as a Python list again."""

    name: str
    type: str  # "float", "int", "string", "ints" or "floats"
    default: Any = None  # None: required; a tuple for a list attribute

    @property
    def required(self) -> bool:
        return self.default is None

    @property
    def is_list(self) -> bool:
        return self.type in _LIST_ATTRIBUTE_TYPES

    def value(self, raw: Any) -> Any:
        """``raw`` (a node's value, or the text onnxruntime-extensions and retargeted nodes
        carry) as the kernel function receives it."""
        if isinstance(raw, bytes):
            raw = raw.decode()
        if not self.is_list:
            return {"float": float, "int": int, "string": str}[self.type](raw)
        if isinstance(raw, str):
            try:
                raw = json.loads(raw)
            except ValueError as e:
                raise KernelError(f"attribute {self.name!r}: {raw!r} is not the JSON list "
                                  f"a retargeted node carries") from e
        if isinstance(raw, np.ndarray):
            raw = raw.tolist()
        element = _LIST_ATTRIBUTE_TYPES[self.type]
        if not isinstance(raw, list | tuple) or not all(_fits(v, element) for v in raw):
            raise KernelError(f"attribute {self.name!r}: expected {_describe(self.type)}, "
                              f"got {raw!r}")
        return [element(v) for v in raw]


_LIST_ATTRIBUTE_TYPES: dict[str, type] = {"ints": int, "floats": float}
_KIND_NAMES = {"float": "a float", "int": "an int", "string": "a string",
               "ints": "a list of ints", "floats": "a list of floats"}


def _describe(kind: str) -> str:
    """``"ints"`` -> ``"a list of ints"``; any AttributeProto type name lower-cased too."""
    if kind in _KIND_NAMES:
        return _KIND_NAMES[kind]
    if kind.endswith("s") and kind[:-1] in ("string", "tensor", "graph", "sparse_tensor",
                                            "type_proto"):
        return f"a list of {kind}"
    return f"a {kind}"


def _fits(value: Any, element: type) -> bool:
    """Whether a list element is an int (for ``ints``) or a number (for ``floats``)."""
    if isinstance(value, bool | np.bool_):
        return False
    if element is int:
        return isinstance(value, int | np.integer)
    return isinstance(value, int | float | np.integer | np.floating)


def _declare_attribute(name: str, spec: Any) -> Attribute:
    """One entry of ``kernel(attributes=...)``: a default value, a type (required), or a
    ``(type, default)`` pair."""
    import typing

    supported = ("float, int, str, list[int] and list[float] attributes are supported "
                 "(onnxruntime-extensions passes scalars; lists travel as JSON text)")

    def kind_of_type(t: Any) -> str | None:
        if typing.get_origin(t) is list:
            args = typing.get_args(t)
            return {(int,): "ints", (float,): "floats"}.get(args)
        return _ATTRIBUTE_TYPES.get(t) if isinstance(t, type) else None

    def kind_of_value(v: Any) -> str | None:
        if isinstance(v, list):
            if not v:
                raise ValueError(f"attribute {name!r}: an empty list default has no element "
                                 "type; declare it as (list[int], []) or (list[float], [])")
            if all(_fits(e, int) for e in v):
                return "ints"
            return "floats" if all(_fits(e, float) for e in v) else None
        return None if isinstance(v, bool) else _ATTRIBUTE_TYPES.get(type(v))

    if isinstance(spec, tuple):
        if len(spec) != 2 or kind_of_type(spec[0]) is None:
            raise ValueError(f"attribute {name!r}: a tuple declares (type, default), e.g. "
                             f"(list[int], []) or (float, 1); got {spec!r}. Only {supported}")
        kind, default = kind_of_type(spec[0]), spec[1]
    elif kind_of_type(spec) is not None:
        kind, default = kind_of_type(spec), None
    else:
        kind, default = kind_of_value(spec), spec
    if kind is None:
        raise ValueError(f"attribute {name!r}: {spec!r} is not a declaration; only {supported}")
    if default is not None:
        if kind in _LIST_ATTRIBUTE_TYPES:
            element = _LIST_ATTRIBUTE_TYPES[kind]
            if not isinstance(default, list) or not all(_fits(e, element) for e in default):
                raise ValueError(f"attribute {name!r}: default {default!r} is not "
                                 f"{_describe(kind)}")
            default = tuple(element(e) for e in default)
        elif kind == "float" and _fits(default, float):
            default = float(default)
        elif kind == "int" and _fits(default, int):
            default = int(default)
        elif not (kind == "string" and isinstance(default, str)):
            raise ValueError(f"attribute {name!r}: default {default!r} is not {_describe(kind)}")
    return Attribute(name, kind, default)


@dataclass(frozen=True)
class Kernel:
    """A Python implementation of one op: ``fn(*arrays, **attributes)`` returns an array or
    a tuple of arrays, with the output element types of the matching signature."""

    fn: Callable[..., Any]
    signatures: tuple[Signature, ...]
    attributes: Mapping[str, Attribute] = field(default_factory=dict)
    requires: tuple[str, ...] = ()  # importable modules it needs (checked before use)
    description: str = ""
    # accepts(node) -> None (the kernel takes this node); a reason to decline it: a string
    # returned, or Declined("why") raised
    accepts: Callable[[NodeProto], str | None] | None = None

    def __call__(self, *arrays, **attributes):
        return self.fn(*arrays, **attributes)

    def match(self, input_types: Sequence[str | None]) -> Signature | None:
        """The signature whose inputs are these element types (None: unknown, matches any
        single candidate)."""
        fits = [s for s in self.signatures if len(s.inputs) == len(input_types)
                and all(t is None or t == s_t for t, s_t in zip(input_types, s.inputs))]
        return fits[0] if len(fits) == 1 else None

    def missing_requirements(self) -> list[str]:
        import importlib.util

        return [m for m in self.requires if importlib.util.find_spec(m) is None]

    def with_defaults(self, given: Mapping[str, Any]) -> dict[str, Any]:
        out = {name: list(a.default) if a.is_list else a.default
               for name, a in self.attributes.items() if not a.required}
        out.update(given)
        return out

    def cast_attributes(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Declared attributes from text or bytes (as onnxruntime-extensions and retargeted
        nodes pass them; lists as JSON) or from a node's own values (the reference evaluator
        on an original model) to their types, defaults filled in."""
        return self.with_defaults({name: self.attributes[name].value(value)
                                   for name, value in given.items()
                                   if name in self.attributes})

    def declines(self, node: NodeProto) -> str | None:
        """Why :attr:`accepts` declines ``node`` (None: it takes it, or there is no
        predicate). A predicate that raises or returns something else declines too."""
        from rewriter.plan.bodies import Declined

        if self.accepts is None:
            return None
        try:
            verdict = self.accepts(node)
        except Declined as e:
            return f"the kernel declines this node: {e}"
        except Exception as e:  # noqa: BLE001 - a plugin's predicate failing is its bug
            return f"the kernel's accepts() failed: {type(e).__name__}: {e}"
        if verdict is None:
            return None
        if isinstance(verdict, str) and verdict:
            return f"the kernel declines this node: {verdict}"
        return (f"the kernel's accepts() returned {verdict!r}; it must return None (accept) "
                "or a reason string (decline)")


def kernel(
    *,
    signatures: Iterable[str | Signature | tuple],
    attributes: Mapping[str, Any] | None = None,
    requires: Iterable[str] = (),
    description: str = "",
    accepts: Callable[[NodeProto], str | None] | None = None,
) -> Callable[[Callable[..., Any]], Kernel]:
    """Declare a kernel.

    Args:
        signatures: ``"float, float -> float"`` strings (element types as in
            ``tensor(float)``); several allowed, their input types must differ.
        attributes: name -> a default value (``1.0``, ``3``, ``"same"``, ``[1, 1]`` for a
            list of ints, ``[0.5, 2.0]`` for a list of floats), the type itself for a
            required attribute (``float``, ``int``, ``str``, ``list[int]``,
            ``list[float]``), or a ``(type, default)`` pair (``(list[int], [])``,
            ``(float, 1)``). The function receives lists as Python lists.
        requires: modules the kernel imports (a clear error names them when absent).
        accepts: ``accepts(node)`` is asked at planning time for each node the kernel
            could take: None to take it; to decline (e.g. an attribute value the kernel
            does not implement), ``raise Declined("why")`` or return the reason (shown by
            ``--explain``).
    """
    parsed = tuple(Signature.parse(s) for s in signatures)
    if not parsed:
        raise ValueError("a kernel needs at least one signature")
    if len({s.inputs for s in parsed}) != len(parsed):
        raise ValueError("two signatures of one kernel take the same input types")
    attrs = {name: _declare_attribute(name, spec) for name, spec in (attributes or {}).items()}
    if accepts is not None and not callable(accepts):
        raise ValueError(f"accepts must be a callable taking the NodeProto, not {accepts!r}")

    def wrap(fn: Callable[..., Any]) -> Kernel:
        return Kernel(fn, parsed, attrs, tuple(requires), description or (fn.__doc__ or "")
                      .strip().split("\n")[0], accepts)

    return wrap


# -- what a rewritten model needs ----------------------------------------------------------


def element_type(type_string: str | None) -> str | None:
    """``tensor(float)`` -> ``float``; None for non-tensors and unknowns."""
    if type_string and type_string.startswith("tensor(") and type_string.endswith(")"):
        return type_string[7:-1]
    return None


def op_name(domain: str, op_type: str, signature: Signature, reference: str) -> str:
    """The unique ai.onnx.contrib op name a kernel (``reference``, its ``"module:attr"``) is
    registered under for one signature: never the op's own name, which a native
    onnxruntime-extensions op may already use, and distinct per kernel, since
    onnxruntime-extensions cannot replace an op registered in the process (two plugin sets
    with kernels for one op, in one library process or one test session)."""
    import hashlib

    dom = re.sub(r"\W", "_", domain_label(domain))
    digest = hashlib.sha256(reference.encode()).hexdigest()[:6]
    return f"{op_type}__{dom}__{'_'.join(signature.inputs) or 'none'}__{digest}"


@dataclass(frozen=True)
class KernelUse:
    """A Python kernel one retargeted op needs: ``ai.onnx.contrib::op_name``."""

    op_name: str
    domain: str
    op_type: str
    reference: str
    plugin: str
    signature: Signature
    distribution: str | None = None

    @property
    def op_label(self) -> str:
        return str(OpId(self.domain, self.op_type))

    def as_dict(self) -> dict[str, Any]:
        return {"op": self.op_label, "kernel": self.reference, "plugin": self.plugin,
                "distribution": self.distribution, **self.signature.as_dict()}


@dataclass(frozen=True)
class NativeUse:
    """A native op of a custom-op library a node runs as (``library``: ``extensions``)."""

    domain: str
    op_type: str
    library: str
    plugin: str
    original: str  # "domain::op_type" the node had before the rewrite
    distribution: str | None = None

    @property
    def key(self) -> str:
        return str(OpId(self.domain, self.op_type))

    def as_dict(self) -> dict[str, Any]:
        return {"library": self.library, "plugin": self.plugin, "op": self.original,
                "distribution": self.distribution}


@dataclass
class Needs:
    """Everything a model's metadata says it needs at run time."""

    python: dict[str, KernelUse] = field(default_factory=dict)  # op name -> use
    native: dict[str, NativeUse] = field(default_factory=dict)  # "domain::op" -> use

    def __bool__(self) -> bool:
        return bool(self.python or self.native)

    @property
    def libraries(self) -> list[str]:
        libs = {n.library for n in self.native.values()}
        if self.python:
            libs.add(EXTENSIONS)
        return sorted(libs)

    def to_json(self) -> str:
        return json.dumps({
            "version": 1,
            "python": {k: v.as_dict() for k, v in sorted(self.python.items())},
            "native": {k: v.as_dict() for k, v in sorted(self.native.items())},
        }, sort_keys=True)


def read_needs(model: ModelProto) -> Needs:
    """The kernels and libraries ``model``'s metadata lists (empty when none)."""
    needs = Needs()
    for prop in model.metadata_props:
        if prop.key != METADATA_KEY:
            continue
        try:
            data = json.loads(prop.value)
        except ValueError as e:
            raise KernelError(f"model metadata {METADATA_KEY!r} is not valid JSON: {e}") from e
        if not isinstance(data, dict):
            raise KernelError(f"model metadata {METADATA_KEY!r} is not a JSON object")
        for name, d in (data.get("python") or {}).items():
            domain, _, op = str(d.get("op", "")).rpartition("::")
            sig = Signature.parse((d.get("inputs", []), d.get("outputs", [])))
            needs.python[name] = KernelUse(
                name, "" if domain == "ai.onnx" else domain, op, str(d.get("kernel", "")),
                str(d.get("plugin", "")), sig, d.get("distribution"),
            )
        for key, d in (data.get("native") or {}).items():
            domain, _, op = key.rpartition("::")
            needs.native[key] = NativeUse(
                "" if domain == "ai.onnx" else domain, op, str(d.get("library", EXTENSIONS)),
                str(d.get("plugin", "")), str(d.get("op", key)), d.get("distribution"),
            )
    return needs


def write_needs(model: ModelProto, needs: Needs) -> None:
    """Record ``needs`` in ``model.metadata_props`` (merged with what it already lists)."""
    merged = read_needs(model)
    merged.python.update(needs.python)
    merged.native.update(needs.native)
    kept = [p for p in model.metadata_props if p.key != METADATA_KEY]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    if merged:
        entry = model.metadata_props.add()
        entry.key, entry.value = METADATA_KEY, merged.to_json()


# -- resolving kernels through the installed plugins ---------------------------------------


def _install_hint(plugin: str, distribution: str | None) -> str:
    if distribution:
        return f"install {distribution} (plugin {plugin!r})"
    return f"load plugin {plugin!r} (it was given with -p when the model was rewritten)"


def load_kernel(entry: KernelEntry, registry: Registry | None = None) -> Kernel:
    """Import a registered kernel; a clear error names the plugin when it is unusable."""
    from rewriter.plan.functions import resolve_reference

    def fail(message: str) -> RewriterError:
        if registry is not None:
            return registry.plugin_error(entry.plugin, message)
        return KernelError(f"plugin {entry.plugin!r}: {message}")

    try:
        obj = entry.kernel if entry.kernel is not None else resolve_reference(entry.reference)
    except Exception as e:  # noqa: BLE001 - any import failure is the plugin's
        raise fail(f"kernel {OpId(entry.domain, entry.op_type)}: cannot import "
                   f"{entry.reference!r}: {type(e).__name__}: {e}") from e
    if not isinstance(obj, Kernel):
        raise fail(f"kernel {OpId(entry.domain, entry.op_type)}: {entry.reference!r} "
                   f"is a {type(obj).__name__}, not a rewriter.plan.kernels.Kernel")
    missing = obj.missing_requirements()
    if missing:
        raise fail(f"kernel {OpId(entry.domain, entry.op_type)} needs "
                   f"{', '.join(missing)}, which is not installed")
    return obj


def resolve_python(use: KernelUse, registry: Registry) -> Kernel:
    """The installed kernel for a use the model's metadata lists, or a KernelError naming
    the op and the plugin to install."""
    entry = registry.kernels.get((use.domain, use.op_type))
    if entry is None:
        raise KernelError(
            f"the model needs a kernel for {use.op_label} (op {CONTRIB_DOMAIN}::{use.op_name}),"
            f" which no installed plugin provides: {_install_hint(use.plugin, use.distribution)}"
        )
    k = load_kernel(entry, registry)
    if use.signature not in k.signatures:
        raise KernelError(
            f"the model needs {use.op_label} for ({use.signature.label}), but the kernel of "
            f"plugin {entry.plugin!r} ({entry.reference}) has no such signature"
        )
    return k


def check_native(use: NativeUse) -> None:
    """A KernelError unless the library a native use needs is installed."""
    if use.library == EXTENSIONS:
        import importlib.util

        if importlib.util.find_spec("onnxruntime_extensions") is None:
            raise KernelError(
                f"the model runs {use.key} natively in onnxruntime-extensions, which is not "
                "installed (pip install onnxruntime-extensions)"
            )
        return
    raise KernelError(f"the model needs custom-op library {use.library!r} for {use.key}; "
                      "only 'extensions' (onnxruntime-extensions) is known")


def resolve_needs(needs: Needs, registry: Registry) -> dict[str, Kernel]:
    """Check that every need is met; one error lists all that are not."""
    problems, kernels = [], {}
    for name, use in sorted(needs.python.items()):
        try:
            kernels[name] = resolve_python(use, registry)
        except RewriterError as e:
            problems.append(str(e))
    for use in needs.native.values():
        try:
            check_native(use)
        except KernelError as e:
            problems.append(str(e))
    if problems:
        raise KernelError("; ".join(dict.fromkeys(problems)))
    return kernels


def library_path(name: str) -> str:
    if name == EXTENSIONS:
        import onnxruntime_extensions

        return onnxruntime_extensions.get_library_path()
    return name


# -- outputs -------------------------------------------------------------------------------


def _np_dtype(element: str):
    if element == "string":
        return np.dtype(object)
    if element == "bool":
        return np.dtype(bool)
    return np.dtype(element if element != "float" else "float32")


def normalize_outputs(result: Any, signature: Signature) -> tuple[np.ndarray, ...]:
    """A kernel's result as a tuple of arrays of the signature's output types."""
    values = result if isinstance(result, tuple | list) else (result,)
    if len(values) != len(signature.outputs):
        raise KernelError(f"kernel returned {len(values)} output(s), its signature "
                          f"({signature.label}) declares {len(signature.outputs)}")
    out = []
    for value, element in zip(values, signature.outputs):
        dtype = _np_dtype(element)
        if element == "string":
            arr = np.asarray(value, dtype=object)
            arr = np.vectorize(lambda s: s.decode() if isinstance(s, bytes) else str(s),
                               otypes=[object])(arr) if arr.size else arr.astype(object)
        else:
            arr = np.asarray(value)
            if arr.dtype != dtype:
                arr = arr.astype(dtype)
        out.append(arr)
    return tuple(out)


def _prepare_inputs(arrays: Sequence[Any]) -> list[np.ndarray]:
    out = []
    for a in arrays:
        a = np.asarray(a)
        if a.dtype.kind in "US":
            a = a.astype(object)
        out.append(a)
    return out


# -- onnxruntime adapter (onnxruntime-extensions Python custom ops) ------------------------
#
# onnxruntime-extensions calls one process-wide hook for every Python op; its own hook hands
# outputs back as Python lists (``flatten().tolist()``), about 0.1 s per million elements.
# The library copies whatever array-like the hook returns with ``numpy.ascontiguousarray``,
# so our hook returns numpy arrays for the ops we registered (a memcpy: some 300x faster on
# 1M floats) and delegates every other op to the library's own hook, unchanged.
#
# Attributes reach the hook as text, and float attributes are printed with 6 significant
# digits on the way; a kernel's float attributes are therefore declared as strings holding
# ``repr(value)`` on the retargeted node, which keeps them exact. The library passes no list
# attributes at all: an int or float list is declared as a string holding its JSON
# (``"[1, 1]"``, floats exact) under the attribute's own name, decoded back to a list by
# :meth:`Attribute.value` before the kernel function is called.

_ORT_LOCK = threading.Lock()
_ORT_REGISTERED: dict[str, tuple[str, Signature]] = {}  # op name -> (kernel id, signature)
_ORT_BY_ID: dict[int, Callable[[Sequence[Any], Mapping[str, str]], tuple]] = {}
_ORT_ERRORS: list[tuple[str, BaseException]] = []
_ORT_HOOK: list[Any] = []  # [the library's own hook] once ours is installed


def _install_hook() -> None:
    if _ORT_HOOK:
        return
    from onnxruntime_extensions import PyCustomOpDef, _ocos

    library_hook = _ocos._on_pyop_invocation

    def invoke(k_id, feed, attributes):
        ours = _ORT_BY_ID.get(k_id)
        if ours is None:
            return library_hook(k_id, feed, attributes)
        return (k_id, *ours(feed, attributes))

    PyCustomOpDef.install_hooker(invoke)
    _ORT_HOOK.append(library_hook)


def _record_failure(name: str, e: BaseException) -> None:
    """Keep the error without its frames (they hold onnxruntime's input buffers, which are
    gone once the call returns) for KernelSession.run to raise."""
    import traceback

    where = "".join(traceback.format_exception(e)[-3:]).strip()
    error = type(e)(*e.args) if _simple(e) else RuntimeError(f"{type(e).__name__}: {e}")
    error.__traceback__ = None
    error.kernel_traceback = where  # type: ignore[attr-defined]
    with _ORT_LOCK:
        _ORT_ERRORS.append((name, error))
    sys.stderr.write(f"rewriter: kernel {name} failed: {type(error).__name__}: {error}\n")


def _ort_call(name: str, k: Kernel, signature: Signature):
    """What our hook runs for one op: ``(shape, data, shape, data, ...)``. An exception must
    not escape (onnxruntime-extensions would abort the process): it is recorded and
    re-raised by :class:`rewriter.comparison.runtime.KernelSession` after the run, and the op
    returns empty outputs."""

    def call(feed, attributes):
        try:
            outputs = normalize_outputs(
                k.fn(*_prepare_inputs(feed), **k.cast_attributes(attributes)), signature)
        except BaseException as e:  # noqa: BLE001 - must never reach onnxruntime
            _record_failure(name, e)
            outputs = tuple(np.zeros((0,), dtype=_np_dtype(t)) for t in signature.outputs)
        flat = []
        for value in outputs:
            flat.append(value.shape)
            flat.append(value.reshape(-1).tolist() if value.dtype == object
                        else np.ascontiguousarray(value).reshape(-1))
        return tuple(flat)

    return call


def _library_body(call):
    """The op's body for onnxruntime-extensions' own hook, should it be reinstalled."""

    def body(*arrays, **attributes):
        flat = call(arrays, attributes)
        outputs = tuple(np.asarray(d, dtype=object if isinstance(d, list) else None).reshape(s)
                        for s, d in zip(flat[::2], flat[1::2]))
        return outputs if len(outputs) > 1 else outputs[0]

    return body


def _simple(e: BaseException) -> bool:
    """Whether ``type(e)(*e.args)`` rebuilds the exception faithfully."""
    try:
        return type(type(e)(*e.args)) is type(e)
    except Exception:  # noqa: BLE001
        return False


def register_onnxruntime(uses: Iterable[KernelUse], kernels: Mapping[str, Kernel]) -> list[str]:
    """Register each use as an onnxruntime-extensions Python op, once per process.

    ``kernels`` maps op names to resolved kernels. Returns the op names newly registered.
    A session sees the ops registered before it was created (with the extensions library).
    """
    from onnxruntime_extensions import PyCustomOpDef, onnx_op

    types = {t: getattr(PyCustomOpDef, f"dt_{t}") for t in ORT_PYTHON_TYPES}
    attr_types = {"float": PyCustomOpDef.dt_string, "int": PyCustomOpDef.dt_int64,
                  "string": PyCustomOpDef.dt_string, "ints": PyCustomOpDef.dt_string,
                  "floats": PyCustomOpDef.dt_string}  # floats and lists as text: see above
    added = []
    with _ORT_LOCK:
        for use in uses:
            k = kernels[use.op_name]
            done = _ORT_REGISTERED.get(use.op_name)
            if done is not None:
                if done != (use.reference, use.signature):
                    raise KernelError(
                        f"op {CONTRIB_DOMAIN}::{use.op_name} is already registered in this "
                        f"process by kernel {done[0]}; onnxruntime-extensions cannot replace it"
                    )
                continue
            bad = [t for t in use.signature.inputs + use.signature.outputs
                   if t not in ORT_PYTHON_TYPES]
            if bad:
                raise KernelError(
                    f"{use.op_label} ({use.signature.label}): onnxruntime-extensions' Python "
                    f"ops do not support {', '.join(sorted(set(bad)))}"
                )
            _install_hook()
            call = _ort_call(use.op_name, k, use.signature)
            opdef = onnx_op(
                op_type=use.op_name,
                inputs=[types[t] for t in use.signature.inputs],
                outputs=[types[t] for t in use.signature.outputs],
                attrs={a.name: attr_types[a.type] for a in k.attributes.values()},
            )(_library_body(call))
            _ORT_BY_ID[opdef._nativedef.obj_id] = call
            _ORT_REGISTERED[use.op_name] = (use.reference, use.signature)
            added.append(use.op_name)
    return added


def take_kernel_errors() -> list[tuple[str, BaseException]]:
    """Errors Python kernels raised under onnxruntime since the last call."""
    with _ORT_LOCK:
        errors = list(_ORT_ERRORS)
        _ORT_ERRORS.clear()
    return errors


def retarget_node(node: NodeProto, use: KernelUse, k: Kernel) -> None:
    """Point ``node`` at the kernel's ai.onnx.contrib op, with every attribute the kernel
    declares set (onnxruntime-extensions refuses a node missing one): floats as exact text,
    int and float lists as JSON text (``strides = "[1, 1]"``)."""
    from onnx import helper

    given = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    values = k.with_defaults({n: _attr_value(v) for n, v in given.items()
                              if n in k.attributes})
    node.domain, node.op_type = CONTRIB_DOMAIN, use.op_name
    while node.input and not node.input[-1]:  # optional inputs left out: not passed
        node.input.pop()
    del node.attribute[:]
    for name in sorted(k.attributes):
        value = values[name]
        spec = k.attributes[name]
        if spec.type == "float":  # exact: see the adapter's notes
            value = repr(float(value))
        elif spec.is_list:  # onnxruntime-extensions passes no lists: JSON text
            value = json.dumps(spec.value(value))
        node.attribute.append(helper.make_attribute(name, value))


def _attr_value(v: Any) -> Any:
    """A string attribute as text; one that is not UTF-8 (binary data some vendor ops keep
    in strings) stays bytes."""
    if isinstance(v, bytes):
        try:
            return v.decode()
        except UnicodeDecodeError:
            return v
    return v


def node_problem(node: NodeProto, k: Kernel) -> str | None:
    """Why the kernel cannot take ``node`` (None: it can): an attribute it does not declare,
    one of another type (``ints`` where ``floats`` are declared, ...), a required one
    missing, or its ``accepts`` predicate declining the node."""
    from onnx import AttributeProto

    kinds = {AttributeProto.FLOAT: "float", AttributeProto.INT: "int",
             AttributeProto.STRING: "string", AttributeProto.INTS: "ints",
             AttributeProto.FLOATS: "floats"}
    present = set()
    for a in node.attribute:
        spec = k.attributes.get(a.name)
        if spec is None:
            declared = ", ".join(sorted(k.attributes)) or "none"
            return f"the kernel takes no attribute {a.name!r} (it declares: {declared})"
        kind = kinds.get(a.type) or AttributeProto.AttributeType.Name(a.type).lower()
        if kind != spec.type:
            return (f"attribute {a.name!r} is {_describe(kind)}; the kernel takes "
                    f"{_describe(spec.type)}")
        present.add(a.name)
    missing = [n for n, a in k.attributes.items() if a.required and n not in present]
    if missing:
        return f"required attribute(s) {', '.join(missing)} missing"
    return k.declines(node)


attribute_problem = node_problem  # the name the planner imports


# -- reference evaluator adapter -----------------------------------------------------------


def _op_run_class(op_type: str, domain: str, run: Callable[..., tuple], note: str = "",
                  vet: Callable[[NodeProto], str | None] | None = None):
    """An OpRun class calling ``run(node, *inputs, **attributes)``; ``vet(node)``, asked once
    per node, gives a reason to refuse it (a KernelError when the node runs)."""
    from onnx.reference.op_run import OpRun

    def _run(self, *inputs, **attributes):
        if vet is not None:
            if "_rewriter_refusal" not in self.__dict__:
                self._rewriter_refusal = vet(self.onnx_node)
            if self._rewriter_refusal:
                raise KernelError(f"{OpId(domain, op_type)} node "
                                  f"{self.onnx_node.name!r}: {self._rewriter_refusal}")
        given = {n: _attr_value(v) for n, v in attributes.items() if v is not None}
        return run(self.onnx_node, *inputs, **given)

    return type(op_type, (OpRun,), {"op_domain": domain, "_run": _run, "__doc__": note})


def _python_runner(k: Kernel, fixed: Signature | None = None):
    def run(node, *inputs, **attributes):
        inputs = list(inputs)
        while inputs and inputs[-1] is None:  # optional inputs left out at the end
            inputs.pop()
        if any(x is None for x in inputs):
            gap = next(i for i, x in enumerate(inputs) if x is None)
            raise KernelError(f"node {node.name or node.op_type!r} leaves input {gap} empty "
                              "before a given one; a kernel takes its inputs without gaps")
        arrays = _prepare_inputs(inputs)
        signature = fixed or k.match([_element_of(a) for a in arrays])
        if signature is None:
            raise KernelError(f"no signature of the kernel takes "
                              f"({', '.join(_element_of(a) or '?' for a in arrays)})")
        return normalize_outputs(k.fn(*arrays, **k.cast_attributes(attributes)), signature)

    return run


def _element_of(a: np.ndarray) -> str | None:
    """The ONNX element type name of an array (``float`` for float32, ...)."""
    if a.dtype == object or a.dtype.kind in "US":
        return "string"
    return {"float32": "float", "float64": "double", "bool": "bool"}.get(a.dtype.name,
                                                                        a.dtype.name)


def _native_runner(domain: str, op_type: str, library: str):
    """Runs one native library op through a one-node onnxruntime session (used as the
    reference only where no Python kernel exists: it is not an independent oracle)."""
    sessions: dict[tuple, Any] = {}

    def run(node, *inputs, **attributes):
        from onnx import NodeProto, TensorProto, helper

        arrays = _prepare_inputs(inputs)
        key = (node.SerializeToString(), tuple((a.dtype.str, a.ndim) for a in arrays))
        s = sessions.get(key)
        if s is None:
            ins = []
            for i, a in enumerate(arrays):
                elem = (TensorProto.STRING if a.dtype == object
                        else helper.np_dtype_to_tensor_dtype(a.dtype))
                ins.append(helper.make_tensor_value_info(f"i{i}", elem, None))
            one = NodeProto()
            one.CopyFrom(node)
            one.domain, one.op_type = domain, op_type
            del one.input[:]
            one.input.extend(i.name for i in ins)
            del one.output[:]
            one.output.extend(f"o{k}" for k in range(len(node.output)))
            s = sessions[key] = _native_session(one, ins, library)
        return tuple(s.run(None, {f"i{i}": a for i, a in enumerate(arrays)}))

    return run


def _native_session(node, ins, library: str):
    import onnxruntime as ort
    from onnx import helper

    outs = [helper.make_value_info(o, helper.TypeProto()) for o in node.output]
    m = helper.make_model(helper.make_graph([node], "native", ins, outs), opset_imports=[
        helper.make_opsetid("", 18), helper.make_opsetid(node.domain, 1)])
    m.ir_version = 8
    so = ort.SessionOptions()
    so.log_severity_level = 4
    so.register_custom_ops_library(library_path(library))
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _reference_has(domain: str, op_type: str, opset: int | None) -> bool:
    """Whether the reference evaluator implements a standard op itself."""
    if domain not in ("", "ai.onnx.ml"):
        return False
    import importlib

    module = importlib.import_module(
        "onnx.reference.ops" if domain == "" else "onnx.reference.ops.aionnxml")
    try:
        module.load_op(domain, op_type, opset)
    except Exception:  # noqa: BLE001 - any refusal means "not implemented here"
        return False
    return True


def reference_ops(
    model_or_ops: ModelProto | Iterable[tuple[str, str]], registry: Registry, *,
    only_retargeted: bool = False,
) -> list[type]:
    """``OpRun`` classes for ``ReferenceEvaluator(model, new_ops=...)``.

    For a model: every op it uses that has a registered Python kernel (standard ops the
    evaluator implements itself are left to it), every ``ai.onnx.contrib`` op its metadata
    lists, and every native library op the installed plugins map (run through a one-node
    onnxruntime session: not independent of the rewritten model, so only used where no
    Python kernel exists). For ``(domain, op_type)`` pairs: those ops. With
    ``only_retargeted``: only the ``ai.onnx.contrib`` ops the metadata lists.
    """
    from onnx import ModelProto

    from rewriter.graph.walk import iter_scopes, normalize_domain

    classes: dict[tuple[str, str], type] = {}
    needs = Needs()
    if isinstance(model_or_ops, ModelProto):
        needs = read_needs(model_or_ops)
        ops: dict[tuple[str, str], int | None] = {}
        for scope in iter_scopes(model_or_ops):
            for node in scope.nodes:
                domain = normalize_domain(node.domain)
                ops.setdefault((domain, node.op_type), scope.opsets.get(domain))
    else:
        ops = {(normalize_domain(d), op): None for d, op in model_or_ops}
    for (domain, op_type), opset in sorted(ops.items()):
        if domain == CONTRIB_DOMAIN and op_type in needs.python:
            use = needs.python[op_type]
            k = resolve_python(use, registry)
            classes[(domain, op_type)] = _op_run_class(
                op_type, domain, _python_runner(k, use.signature),
                f"kernel {use.reference} for {use.op_label}")
            continue
        if only_retargeted:
            continue
        entry = registry.kernels.get((domain, op_type))
        if entry is not None and not _reference_has(domain, op_type, opset):
            k = load_kernel(entry, registry)
            classes[(domain, op_type)] = _op_run_class(
                op_type, domain, _python_runner(k), f"kernel {entry.reference}",
                vet=k.declines if k.accepts is not None else None)
            continue
        native = registry.natives.get((domain, op_type))
        if native is not None and not _reference_has(domain, op_type, opset):
            target_domain, target_op = native.target
            classes[(domain, op_type)] = _op_run_class(
                op_type, domain, _native_runner(target_domain, target_op, native.library),
                f"native {native.library} op (not an independent oracle)")
    return list(classes.values())


def native_only(model: ModelProto, registry: Registry) -> list[str]:
    """Ops of ``model`` the reference evaluator would run through a native library because
    no Python kernel exists (so a comparison on them is not independent)."""
    from rewriter.graph.walk import iter_scopes, normalize_domain

    out = set()
    for scope in iter_scopes(model):
        for node in scope.nodes:
            key = (normalize_domain(node.domain), node.op_type)
            if key in registry.natives and key not in registry.kernels:
                out.add(str(OpId(*key)))
    return sorted(out)


def kernel_entry_for(registry: Registry, domain: str, op_type: str) -> KernelEntry | None:
    return registry.kernels.get((domain, op_type))


def native_entry_for(registry: Registry, domain: str, op_type: str) -> NativeEntry | None:
    return registry.natives.get((domain, op_type))
