"""Registries that plugins fill. Every entry records the plugin that registered it."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from onnx import FunctionProto

from rewriter.errors import PluginError
from rewriter.graph.opid import OpId
from rewriter.graph.walk import normalize_domain

# The order passes run in within a round of a rewrite, after its kernels and decompositions
# (``registry.add(name, factory, phase=...)`` of ``register_passes``).
PHASES = ("decompose", "legalize", "convert", "cleanup")

_TARGET_NAME = re.compile(r"^[a-z][a-z0-9_.\-]*$")
_LAZY_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_VERSION = re.compile(r"\d+(\.\d+)*")  # a release number, as min_onnxruntime gives it


@dataclass(frozen=True)
class PluginInfo:
    """Where a plugin came from."""

    name: str
    distribution: str | None = None
    version: str | None = None
    builtin: bool = False
    module: str | None = None  # the module the plugin was loaded from

    @property
    def origin(self) -> str:
        if self.distribution:
            return f"{self.distribution} {self.version or ''}".strip()
        return "-p (this run only)"


@dataclass(frozen=True)
class TargetEntry:
    name: str
    factory: Callable[[str | None], Any]
    description: str
    plugin: str


# What checks a decomposition (``registry.add(..., oracle=...)``), besides a "module:attr"
# numpy function ``f(*arrays, **attributes)`` written from the op's documentation:
ORACLES: dict[str, str] = {
    "onnxruntime": "onnxruntime's own kernel runs the original node",
    "kernel": "the plugin kernel registered for the same op",
    "reference": "the ONNX reference evaluator's implementation of the op",
    "spec": "the expected outputs of the ONNX backend node test cases",
}
REARRANGED = "rearranged"  # keeps_op: the body is the op in another layout

_ELEMENT = re.compile(r"^(T|[a-z][a-z0-9]*)\[([0-9, ]*)\]$")


@dataclass(frozen=True)
class Arg:
    """One input of an :class:`OpSample`.

    ``spec`` is ``"T[2, 3, 8]"`` (``T``: the dtype the sample runs at) or an element type
    with a shape (``"int64[3]"``, ``"float[]"`` for a scalar). ``values`` fixes the values
    (index-like inputs, anything the op constrains), or is a function ``values(rng, shape)``
    drawing them (boxes with ``x1 < x2``, ...); otherwise they are drawn uniformly from
    ``[low, high)`` (integers: ``low..high-1``; bool: at random). ``constant`` makes the
    input an initializer, for builders that must read it (weights, sizes, axes).
    """

    spec: str
    values: Any = None
    low: float = -2.0
    high: float = 2.0
    constant: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.spec, str) or not _ELEMENT.match(self.spec.strip()):
            raise ValueError(f"sample input {self.spec!r} is not 'T[dims]' or 'type[dims]'")
        if not self.low < self.high:
            raise ValueError(f"sample input {self.spec!r}: low {self.low} >= high {self.high}")

    @property
    def type(self) -> str:
        return _ELEMENT.match(self.spec.strip()).group(1)

    @property
    def shape(self) -> tuple[int, ...]:
        dims = _ELEMENT.match(self.spec.strip()).group(2)
        return tuple(int(d) for d in dims.replace(" ", "").split(",") if d)


@dataclass(frozen=True)
class OpSample:
    """A one-node model of the op the registry-wide oracle test builds
    (``tests/test_oracles.py``, ``rewriter.testing``).

    Args:
        inputs: the node's inputs in order: :class:`Arg` or its spec string; None for an
            absent optional input.
        outputs: the element types of the node's outputs, as the op defines them (``"T"``:
            the sample's dtype; None: an optional output left out); the decomposition and
            the oracle must both give these.
        attributes: the node's attributes.
        opset: the ai.onnx opset of the model (default: the registration's lowest, at least
            7; 0: the model imports no ai.onnx opset, which counts as opset 1); outside the
            registration's range the sample does not apply to it.
        dtypes: the registration's dtypes this sample runs at (default: all of them).
        tolerance: ``(rtol, atol)`` for float outputs (default: by dtype).
        oracle: this sample's oracle, where the registration's cannot run it (onnxruntime's
            kernel lacking a dtype, ...).
        name: a label for test ids.
        min_onnxruntime: ``(version, why)``: the oldest onnxruntime whose kernels (the
            oracle's, or those running the decomposition) compute this sample as the op
            defines it; below it the check is skipped, saying why.
        domain_opset: the opset of the op's own domain the model imports (default 1), for
            a domain other than ai.onnx (``ai.onnx.ml``'s ``TreeEnsemble`` is new in 5).
    """

    inputs: Sequence[Arg | str | None]
    outputs: Sequence[str | None] = ("T",)
    attributes: Mapping[str, Any] = field(default_factory=dict)
    opset: int | None = None
    dtypes: Sequence[str] | None = None
    tolerance: tuple[float, float] | None = None
    oracle: str | None = None
    name: str = ""
    min_onnxruntime: tuple[str, str] | None = None
    domain_opset: int | None = None

    def __post_init__(self) -> None:
        if self.min_onnxruntime is not None and not (
                len(self.min_onnxruntime) == 2 and _VERSION.fullmatch(self.min_onnxruntime[0])
                and self.min_onnxruntime[1]):
            raise ValueError("min_onnxruntime is (version, why), e.g. ('1.24', 'before it ...')")
        if self.oracle is not None and not _is_oracle(self.oracle):
            raise ValueError(f"sample oracle {self.oracle!r} is not one of {', '.join(ORACLES)}"
                             " or a 'module:attr' function")
        args = tuple(a if a is None or isinstance(a, Arg) else Arg(a) for a in self.inputs)
        object.__setattr__(self, "inputs", args)
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "attributes", dict(self.attributes))
        if self.dtypes is not None:
            object.__setattr__(self, "dtypes", tuple(self.dtypes))
        if not self.outputs or not all(t is None or isinstance(t, str) and t
                                       for t in self.outputs) or self.outputs[-1] is None:
            raise ValueError("a sample declares the element type of every output it uses")


def _is_oracle(oracle: Any) -> bool:
    return isinstance(oracle, str) and (oracle in ORACLES or bool(_LAZY_REF.match(oracle)))


@dataclass(frozen=True)
class DecompositionEntry:
    domain: str
    op_type: str
    builder: Any
    opsets: tuple[int, int | None]
    description: str
    plugin: str
    dtypes: tuple[str, ...] = ()  # element types the body is tested for ("float", ...)
    exact: bool = True  # False: an approximation of the op (the description says how)
    oracle: str | None = None  # a key of ORACLES or "module:attr" (None: none declared)
    samples: tuple[OpSample, ...] = ()  # what the oracle test runs ("spec": the cases)
    # the body keeps the op in a safe form (True: BitShift by in-range counts only), for a
    # node a runtime computes differently, not for a runtime lacking the op; REARRANGED:
    # the op in another layout (batch-first LSTM as time-first), for either
    keeps_op: bool | str = False

    def covers(self, opset: int | None) -> bool:
        """Whether the decomposition applies at ``opset`` of the ai.onnx domain (``None``:
        unknown, so it may)."""
        lo, hi = self.opsets
        return opset is None or (opset >= lo and (hi is None or opset <= hi))


@dataclass(frozen=True)
class KernelEntry:
    domain: str
    op_type: str
    reference: str  # "module:attr": how a rewritten model's metadata and a child process name it
    description: str
    plugin: str
    kernel: Any = None  # the Kernel itself, when registered as an object (else imported lazily)


@dataclass(frozen=True)
class NativeEntry:
    """An op a custom-op library implements natively: a node of ``(domain, op_type)`` runs as
    ``target`` (its own op by default) once the library is registered."""

    domain: str
    op_type: str
    library: str  # "extensions": onnxruntime-extensions
    target: tuple[str, str]
    attributes: str | None  # "module:attr": node -> attributes for the native op, or None
    description: str
    plugin: str


@dataclass(frozen=True)
class PassEntry:
    name: str
    factory: Callable[..., Any]
    phase: str
    plugin: str


@dataclass
class Registry:
    """Everything all loaded plugins registered."""

    plugins: dict[str, PluginInfo] = field(default_factory=dict)
    targets: dict[str, TargetEntry] = field(default_factory=dict)
    decompositions: list[DecompositionEntry] = field(default_factory=list)
    kernels: dict[tuple[str, str], KernelEntry] = field(default_factory=dict)
    natives: dict[tuple[str, str], NativeEntry] = field(default_factory=dict)
    passes: dict[str, PassEntry] = field(default_factory=dict)

    def plugin_error(self, plugin: str, message: str) -> PluginError:
        info = self.plugins.get(plugin)
        return PluginError(plugin, message, info.origin if info else None)

    def remedies_for(
        self, domain: str, op_type: str, opset: int | None, *, onnx_opset: int | None = None
    ) -> list[str]:
        """Human-readable remedies installed plugins offer for one op.

        Args:
            domain, op_type: the op.
            opset: the op's version in its own domain (a finding's ``version``).
            onnx_opset: the ai.onnx opset in force where the op is, when known.

        A decomposition's ``opsets`` range is one of ai.onnx opsets. For an ai.onnx op the
        op's version stands for it when ``onnx_opset`` is not given; for an op of another
        domain the op's version says nothing about ai.onnx, so without ``onnx_opset`` every
        decomposition of the op is offered.
        """
        domain = normalize_domain(domain)
        if onnx_opset is None and domain == "":
            onnx_opset = opset
        found = [
            f"decomposition ({d.plugin})"
            for d in self.decompositions
            if d.domain == domain and d.op_type == op_type and d.covers(onnx_opset)
        ]
        native = self.natives.get((domain, op_type))
        if native:
            found.append(f"native {native.library} kernel ({native.plugin})")
        kernel = self.kernels.get((domain, op_type))
        if kernel:
            found.append(f"kernel ({kernel.plugin})")
        return found

    def registered_by(self, plugin: str) -> dict[str, list[str]]:
        """What one plugin registered, by kind (for ``onnx-rewriter plugins``)."""
        out: dict[str, list[str]] = {}
        out["targets"] = sorted(t.name for t in self.targets.values() if t.plugin == plugin)
        out["decompositions"] = sorted(
            f"{OpId(d.domain, d.op_type)} "
            f"[ai.onnx opset {d.opsets[0]}..{d.opsets[1] or ''}]"
            for d in self.decompositions
            if d.plugin == plugin
        )
        out["kernels"] = sorted(
            str(OpId(k.domain, k.op_type))
            for k in self.kernels.values()
            if k.plugin == plugin
        )
        out["native_kernels"] = sorted(
            f"{OpId(k.domain, k.op_type)} -> {k.library} {OpId(*k.target)}"
            for k in self.natives.values()
            if k.plugin == plugin
        )
        out["passes"] = sorted(
            f"{p.name} ({p.phase})" for p in self.passes.values() if p.plugin == plugin
        )
        return out


class _Bound:
    """Base of the per-plugin registry views handed to registration hooks."""

    def __init__(self, registry: Registry, plugin: str) -> None:
        self._registry = registry
        self.plugin = plugin

    def _fail(self, message: str) -> PluginError:
        return self._registry.plugin_error(self.plugin, message)


class TargetRegistry(_Bound):
    """Passed to ``register_targets``."""

    def add(
        self, name: str, factory: Callable[[str | None], Any], *, description: str = ""
    ) -> None:
        if not isinstance(name, str) or not _TARGET_NAME.match(name):
            raise self._fail(f"invalid target name {name!r} (lowercase letters, digits, -_.)")
        if not callable(factory):
            raise self._fail(f"target {name!r}: factory {factory!r} is not callable")
        existing = self._registry.targets.get(name)
        if existing:
            raise self._fail(
                f"target {name!r} is already registered by plugin {existing.plugin!r}"
            )
        self._registry.targets[name] = TargetEntry(name, factory, description, self.plugin)


class DecompositionRegistry(_Bound):
    """Passed to ``register_decompositions``."""

    def add(
        self,
        domain: str,
        op_type: str,
        builder: Any,
        *,
        opsets: tuple[int, int | None] = (1, None),
        description: str = "",
        dtypes: tuple[str, ...] | list[str] = (),
        exact: bool = True,
        oracle: str | None = None,
        samples: Sequence[OpSample] = (),
        keeps_op: bool | str = False,
    ) -> None:
        """Offer ``builder`` as the decomposition of ``(domain, op_type)`` at ai.onnx opsets
        ``opsets``. ``dtypes`` lists the element types it is tested for (``"float"``,
        ``"float16"``, ...; empty: not stated) and ``exact=False`` marks an approximation;
        both are shown in the operator table (``onnx-rewriter ops``).

        ``oracle`` names what checks the decomposition independently (a key of
        :data:`ORACLES`, or a ``"module:attr"`` numpy function ``f(*arrays, **attributes)``
        written from the op's documentation) and ``samples`` the one-node models it is
        checked on, at every dtype of ``dtypes`` (``"spec"`` brings its own cases).
        ``keeps_op``: the body uses the op itself in a safe form (for a runtime that
        computes some of its forms differently: a ``computes-differently`` finding), or
        :data:`REARRANGED`: the op in another layout its inputs and outputs are moved to
        and from (for a runtime refusing the node's layout, or computing it differently)."""
        if not isinstance(domain, str) or not isinstance(op_type, str) or not op_type:
            raise self._fail(f"decomposition key must be (domain, op_type) strings, got "
                             f"({domain!r}, {op_type!r})")
        if isinstance(builder, str):
            if not _LAZY_REF.match(builder):
                raise self._fail(f"decomposition {op_type!r}: {builder!r} is not 'module:attr'")
        elif not (isinstance(builder, FunctionProto) or callable(builder)):
            raise self._fail(
                f"decomposition {op_type!r}: builder {builder!r} is not a FunctionProto, an "
                "onnxscript function or a 'module:attr' string"
            )
        if not _is_range(opsets):
            raise self._fail(f"decomposition {domain}::{op_type}: invalid opset range {opsets!r}"
                             " (want (lo, hi) with 1 <= lo <= hi, hi None for open)")
        if isinstance(dtypes, str) or not all(isinstance(t, str) for t in dtypes):
            raise self._fail(f"decomposition {op_type!r}: dtypes must be a list of type names")
        if oracle is not None and not _is_oracle(oracle):
            raise self._fail(f"decomposition {op_type!r}: oracle {oracle!r} is not one of "
                             f"{', '.join(ORACLES)} or a 'module:attr' function")
        if keeps_op not in (False, True, REARRANGED):
            raise self._fail(f"decomposition {op_type!r}: keeps_op is True, False or "
                             f"{REARRANGED!r}, not {keeps_op!r}")
        if isinstance(samples, OpSample) or not all(isinstance(x, OpSample) for x in samples):
            raise self._fail(f"decomposition {op_type!r}: samples must be a list of OpSample")
        lo, hi = opsets
        domain = normalize_domain(domain)
        # Several plugins may offer the same op (the planner prefers third-party plugins over
        # built-ins, then goes by name); one plugin may not offer it twice for one opset,
        # but for two purposes (a body for a runtime refusing the op, and one keeping the op
        # in a safe form for a runtime computing it differently: ``keeps_op``) it may.
        for d in self._registry.decompositions:
            if (d.plugin == self.plugin and d.domain == domain and d.op_type == op_type
                    and _overlap(d.opsets, (lo, hi)) and d.keeps_op == keeps_op):
                raise self._fail(
                    f"decomposition {OpId(domain, op_type)} for opsets {(lo, hi)} "
                    f"overlaps opsets {d.opsets} this plugin already registered"
                )
        self._registry.decompositions.append(
            DecompositionEntry(domain, op_type, builder, (lo, hi), description, self.plugin,
                               tuple(dtypes), bool(exact), oracle, tuple(samples),
                               keeps_op)
        )


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_range(opsets: Any) -> bool:
    if not isinstance(opsets, tuple | list) or len(opsets) != 2:
        return False
    lo, hi = opsets
    return _is_int(lo) and lo >= 1 and (hi is None or (_is_int(hi) and hi >= lo))


def _overlap(a: tuple[int, int | None], b: tuple[int, int | None]) -> bool:
    a_hi = a[1] if a[1] is not None else 1 << 30
    b_hi = b[1] if b[1] is not None else 1 << 30
    return a[0] <= b_hi and b[0] <= a_hi


class KernelRegistry(_Bound):
    """Passed to ``register_kernels``."""

    def add(self, domain: str, op_type: str, kernel: Any, *, description: str = "") -> None:
        """Register the Python kernel of ``(domain, op_type)``: a
        :class:`~rewriter.plan.kernels.Kernel` (made with ``@kernel(...)``), or its
        ``"module:attr"`` name, imported only when a model needs it. A kernel given as an
        object must be importable by that name too (defined at module level, not a lambda
        or a local function): a rewritten model's metadata names it so, and the child
        processes that verify a rewrite import it so."""
        if not isinstance(domain, str) or not isinstance(op_type, str) or not op_type:
            raise self._fail(f"kernel key must be (domain, op_type) strings, got "
                             f"({domain!r}, {op_type!r})")
        op = OpId(domain, op_type)
        obj = None
        if isinstance(kernel, str):
            if not _LAZY_REF.match(kernel):
                raise self._fail(f"kernel {op}: {kernel!r} is not a 'module:attr' string")
            reference = kernel
        else:
            reference, obj = self._reference_of(op, kernel), kernel
        key = op.key
        existing = self._registry.kernels.get(key)
        if existing:
            raise self._fail(f"kernel {op} is already registered by plugin {existing.plugin!r}")
        self._registry.kernels[key] = KernelEntry(
            key[0], op_type, reference, description, self.plugin, obj
        )

    def _reference_of(self, op: OpId, kernel: Any) -> str:
        """The ``"module:attr"`` a kernel object is importable by (a clear error when it is
        not a Kernel, or cannot be imported by name)."""
        import importlib

        fn = getattr(kernel, "fn", None)
        if not callable(kernel) or fn is None or not hasattr(kernel, "signatures"):
            what = "a function" if callable(kernel) else repr(kernel)
            raise self._fail(f"kernel {op}: {what} is not a Kernel; declare it with "
                             "@rewriter.plugin.kernel(signatures=[...]) or give its "
                             "'module:attr' name")
        module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
        reference = f"{module}:{name}"
        found = None
        if module and _LAZY_REF.match(reference):
            try:
                found = importlib.import_module(module)
                for part in name.split("."):
                    found = getattr(found, part)
            except (ImportError, AttributeError):
                found = None
        if found is not kernel:
            raise self._fail(
                f"kernel {op}: {name or kernel!r} of module {module} cannot be imported by "
                f"name as {reference!r} (a lambda, a local function, or a kernel not bound "
                "to its function's name); the runs that verify a rewrite import kernels by "
                "name: define it at module level with @kernel, or give a 'module:attr' string")
        return reference

    def add_native(
        self,
        domain: str,
        op_type: str,
        *,
        library: str = "extensions",
        target: tuple[str, str] | None = None,
        attributes: str | None = None,
        description: str = "",
    ) -> None:
        """Declare that custom-op ``library`` implements ``(domain, op_type)`` natively, with
        the same semantics, as op ``target`` (default: the same op).

        ``attributes``: optional ``"module:attr"`` naming ``f(node) -> dict | None`` that
        gives the native op's attributes for a node (None: this node cannot be mapped).
        """
        if not isinstance(domain, str) or not isinstance(op_type, str) or not op_type:
            raise self._fail(f"native kernel key must be (domain, op_type) strings, got "
                             f"({domain!r}, {op_type!r})")
        if not isinstance(library, str) or not library:
            raise self._fail(f"native kernel {op_type!r}: library must be a name")
        if attributes is not None and (not isinstance(attributes, str)
                                       or not _LAZY_REF.match(attributes)):
            raise self._fail(f"native kernel {op_type!r}: {attributes!r} is not 'module:attr'")
        key = (normalize_domain(domain), op_type)
        if target is None:
            target = key
        elif (not isinstance(target, tuple | list) or len(target) != 2
              or not all(isinstance(x, str) for x in target) or not target[1]):
            raise self._fail(f"native kernel {op_type!r}: target must be (domain, op_type)")
        existing = self._registry.natives.get(key)
        if existing:
            raise self._fail(
                f"native kernel {OpId(domain, op_type)} is already registered by "
                f"plugin {existing.plugin!r}"
            )
        self._registry.natives[key] = NativeEntry(
            key[0], op_type, library, (normalize_domain(target[0]), target[1]), attributes,
            description, self.plugin,
        )


class PassRegistry(_Bound):
    """Passed to ``register_passes``."""

    def add(self, name: str, factory: Callable[..., Any], *, phase: str = "cleanup") -> None:
        """Register a pass: ``factory()`` returns a :class:`rewriter.plugin.RewritePass`.
        ``phase`` (one of :data:`PHASES`) orders it among the passes of a round."""
        if not isinstance(name, str) or not _TARGET_NAME.match(name):
            raise self._fail(f"invalid pass name {name!r} (lowercase letters, digits, -_.)")
        if not callable(factory):
            raise self._fail(f"pass {name!r}: factory is not callable")
        if phase not in PHASES:
            raise self._fail(f"pass {name!r}: unknown phase {phase!r} (phases, in the order "
                             f"they run: {', '.join(PHASES)})")
        existing = self._registry.passes.get(name)
        if existing:
            raise self._fail(f"pass {name!r} is already registered by plugin {existing.plugin!r}")
        self._registry.passes[name] = PassEntry(name, factory, phase, self.plugin)
