"""``OpsetConversionPass``: which findings it remedies (per node, or per
model) and its run: raise the model to a target's floor with onnx's version converter, or lower
it node by node to the targets' ceilings (and to older versions a target runs).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from functools import cache, lru_cache

import numpy as np
from onnx import FunctionProto, ModelProto, NodeProto, TensorProto, TypeProto, defs, helper

from rewriter.plugin import (
    REMEDY_DOMAIN,
    Finding,
    NodeQuery,
    PassContext,
    RewritePass,
    forget_contradicted_constant_shapes,
    normalize_domain,
    opset_map,
    outer_references,
    specialise,
    splice,
)

from .ceilings import CeilingTarget, ceilings, floors, has_older_version
from .common import CONVERTIBLE, Decline, Env, first_line, has_graphs
from .converter import Converter
from .facts import ModelFacts
from .model_edits import (
    Conversion,
    as_function,
    call_function,
    copy_model,
    drop_dead_constants,
    lower_imports,
    lowers_imports,
    referenced,
)
from .quantization import widen_4bit_initializers, widened_4bit
from .registry import READS_CONSTANTS

#: findings an older version of the op may remedy (a runtime without the newest kernel)
OLDER_VERSION_REASONS = ("no-kernel", "type-binding")
#: how many older versions of one op are tried
MAX_OLDER_STEPS = 8


def _reads_constant(domain: str, op_type: str, value: np.ndarray) -> bool:
    """Whether lowering the op may read this constant input's value: its adapters read
    constants, or it has a function body whose nodes may (integer constants only there:
    shapes and axes, not weights)."""
    policy = _constant_policy(domain, op_type)
    return policy == "all" or (policy == "int" and np.issubdtype(value.dtype, np.integer))


@cache
def _constant_policy(domain: str, op_type: str) -> str | None:
    if (domain, op_type) in READS_CONSTANTS:
        return "all"
    if any(s.name == op_type and normalize_domain(s.domain) == domain and (
            s.has_function or s.has_context_dependent_function) for s in _all_schemas()):
        return "int"
    return None


@lru_cache(maxsize=1)
def _all_schemas():
    return tuple(defs.get_all_schemas_with_history())


def _digest(value: np.ndarray) -> bytes:
    return hashlib.blake2b(
        str(value.dtype).encode() + repr(value.shape).encode() + value.tobytes(), digest_size=16
    ).digest()


class OpsetConversionPass(RewritePass):
    """Lowers every node whose operator changed after the target opset, then the model's
    imports (see the module documentation)."""

    phase = "convert"

    def __init__(self) -> None:
        self._facts: ModelFacts | None = None
        self._model: ModelProto | None = None
        self._ctx_targets = None
        self._cache: dict[tuple, Conversion | Decline] = {}
        self._raised_cache: tuple | None = None  # (model, version, raised model or Decline)

    def prepare(self, model: ModelProto, ctx: PassContext) -> None:
        self._model, self._facts = model, None
        self._ctx_targets = ctx.targets

    def facts(self) -> ModelFacts:
        if self._facts is None:
            self._facts = ModelFacts(self._model if self._model is not None else ModelProto())
        return self._facts

    # planning ----------------------------------------------------------------------------

    def handles(self, finding: Finding, ctx: PassContext) -> bool:
        if finding.reason == "opset-too-new":
            return normalize_domain(finding.domain) in ceilings(ctx.targets)
        if self._raise_to(ctx, finding.target) is not None:
            return True
        return finding.reason in OLDER_VERSION_REASONS and has_older_version(finding)

    def offers_for_op(self, finding: Finding, ctx: PassContext) -> bool:
        # per node: an older version for a kernel or type the target lacks, and the
        # lowering of a node of a domain with a ceiling (both read the node)
        if finding.reason in OLDER_VERSION_REASONS:
            return False
        if finding.reason == "opset-too-new":
            return normalize_domain(finding.domain) not in ceilings(ctx.targets)
        return True  # raising the whole model to the target's floor, or nothing

    def offers(self, finding: Finding, ctx: PassContext) -> tuple[bool, str]:
        if finding.reason in OLDER_VERSION_REASONS and self._raise_to(ctx) is None:
            return self._offers_older_version(finding, ctx)
        if finding.reason != "opset-too-new":
            target = self._raise_to(ctx, finding.target)
            if target is None:
                return False, "converts opsets only (this finding is not about an opset)"
            result = self._raised(target)
            if isinstance(result, Decline):
                return False, f"cannot raise the model to opset {target}: {result}"
            return True, (f"raises the model to ai.onnx opset {target} (the lowest "
                          f"{finding.target} runs) with onnx's version converter")
        to = ceilings(ctx.targets)
        domain = normalize_domain(finding.domain)
        if domain not in to:
            return False, (f"no target sets a ceiling for {domain or 'ai.onnx'} that this "
                           f"pass can convert to")
        if finding.node is None:
            if finding.version is not None and finding.version > to[domain]:
                return True, f"converts the model to {domain or 'ai.onnx'} opset {to[domain]}"
            return False, "nothing to lower"
        if normalize_domain(finding.node.domain) != domain:
            return False, "not a node of the domain being lowered"
        result = self.conversion(finding.node, dict(finding.scope_opsets or {}),
                                 finding.input_types, to, finding.known_constants)
        if isinstance(result, Decline):
            return False, f"cannot lower to opset {to[domain]}: {result}"
        return True, result.how

    def conversion(self, node: NodeProto, opsets: Mapping[str, int], input_types,
                   to: Mapping[str, int],
                   known_constants: Mapping[str, TensorProto] | None = None,
                   ) -> Conversion | Decline:
        """The conversion of one node (cached by everything it depends on).
        ``known_constants``: values the model's own constants do not hold (a body node's
        Constant inputs, see :attr:`Finding.known_constants`)."""
        facts = self.facts()
        if known_constants:
            facts = facts.with_constants(known_constants)
        key = None
        if not has_graphs(node):
            key = self._key(node, opsets, input_types, to, facts)
            hit = self._cache.get(key)
            if hit is not None:
                return hit
        try:
            result: Conversion | Decline = self._convert(node, opsets, input_types, to, facts)
        except Decline as e:
            result = e
        if key is not None:
            self._cache[key] = result
        return result

    @staticmethod
    def _key(node, opsets, input_types, to, facts: ModelFacts) -> tuple:
        """Everything a conversion depends on: types (with shapes) of inputs and outputs,
        which inputs are the same value, attributes, and the values of constant inputs
        its lowering may read (see :func:`_reads_constant`)."""
        parts = []
        first: dict[str, int] = {}
        domain = normalize_domain(node.domain)
        for i, name in enumerate(node.input):
            if not name:
                parts.append(None)
                continue
            const = facts.constants.get(name)
            if const is not None and not _reads_constant(domain, node.op_type, const):
                const = None
            t = facts.types.get(name)
            parts.append((
                first.setdefault(name, i),
                input_types[i] if i < len(input_types) else None,
                t.SerializeToString() if t is not None else b"",
                _digest(const) if const is not None else None,
            ))
        outputs = tuple(facts.types[o].SerializeToString() if o in facts.types else bool(o)
                        for o in node.output)
        attrs = tuple(a.SerializeToString() for a in node.attribute)
        return (normalize_domain(node.domain), node.op_type, node.overload,
                tuple(sorted(opsets.items())), tuple(sorted(to.items())), tuple(parts),
                outputs, attrs)

    def _convert(self, node, opsets, input_types, to, facts: ModelFacts) -> Conversion:
        from rewriter.plugin import type_proto

        types: dict[str, TypeProto] = {}
        constants: dict[str, np.ndarray] = {}
        for i, name in enumerate(node.input):
            if not name:
                continue
            t = facts.types.get(name)
            known = input_types[i] if i < len(input_types) else None
            if t is None and known:
                t = type_proto(known)
            if name in facts.widened and to.get("", 21) < 21 and t is not None:
                t = helper.make_tensor_type_proto(facts.widened[name], _type_dims(t))
            if t is not None:
                types[name] = t
            const = facts.constants.get(name)
            if const is not None and _reads_constant(normalize_domain(node.domain),
                                                     node.op_type, const):
                constants[name] = const
        for name in node.output:
            if name in facts.types:
                types[name] = facts.types[name]
        env = Env(types, constants)
        env.to = dict(to)
        converter = Converter(to)
        original = NodeProto()
        original.CopyFrom(node)
        nodes = converter.convert(original, opsets, env)
        how = converter.used_rules[-1] if converter.used_rules else "same op, older version"
        if len(nodes) == 1 and nodes[0].SerializeToString() == node.SerializeToString():
            return Conversion(how)
        if has_graphs(node) and outer_references(node):
            raise Decline("a node whose subgraphs use the enclosing graph's values must be "
                          "lowered as it is")
        if any(a.ref_attr_name for a in node.attribute):
            raise Decline("an attribute refers to the enclosing function's attributes")
        return as_function(node, nodes, to, how)

    # down-conversion for a runtime that has the op only at an older version -------------

    def _offers_older_version(self, finding: Finding, ctx: PassContext) -> tuple[bool, str]:
        version = self.older_version(finding, ctx)
        if isinstance(version, Decline):
            return False, str(version)
        return True, (f"converts the model to {normalize_domain(finding.domain) or 'ai.onnx'} "
                      f"opset {version}, where {finding.target} has {finding.op_type}")

    def older_version(self, finding: Finding, ctx: PassContext) -> int | Decline:
        """The newest opset below the node's at which the finding's target runs the node's
        op (as converted), e.g. RoiAlign-22 -> opset 21 (RoiAlign-16) for onnxruntime."""
        from onnx import defs

        node, domain = finding.node, normalize_domain(finding.domain)
        if node is None or domain not in CONVERTIBLE or normalize_domain(node.domain) != domain:
            return Decline("converts opsets of ai.onnx and ai.onnx.ml nodes only")
        opsets = dict(finding.scope_opsets or {})
        current = opsets.get(domain)
        target = next((t for t in ctx.targets if t.name == finding.target), None)
        if current is None or target is None:
            return Decline("the node's opset or target is unknown")
        key = ("older", self._key(node, opsets, finding.input_types, {}, self.facts()),
               finding.target)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        result: int | Decline = Decline(
            f"{finding.target} has no older version of {node.op_type} this pass reaches")
        types = {n: t for n, t in zip(node.input, finding.input_types) if n and t}
        version = current
        for _ in range(MAX_OLDER_STEPS):
            try:
                since = defs.get_schema(node.op_type, version, domain).since_version
            except defs.SchemaError:
                break
            version = since - 1  # the newest opset where the op had its previous version
            if version < 1:
                break
            to = {domain: version}
            query = NodeQuery(node=node, path=finding.path, domain=domain, opset=version,
                              types=types, opsets={**opsets, **to})
            if target.check_node(query) is not None:
                continue
            converted = self.conversion(node, opsets, finding.input_types, to)
            if isinstance(converted, Decline):
                result = Decline(f"{node.op_type} cannot be lowered to opset {version}: "
                                 f"{converted}")
                break
            result = version
            break
        self._cache[key] = result
        return result

    def _older_opset_for_targets(self, model: ModelProto, ctx: PassContext) -> dict[str, int]:
        """The opsets to convert to so that every node a target lacks at its version runs
        at an older one (the lowest such opset over all findings; {} when none)."""
        from rewriter.plugin import find_unsupported

        best: dict[str, int] = {}
        for target in ctx.targets:
            for f in find_unsupported(model, target, keep_nodes=True):
                if f.reason not in OLDER_VERSION_REASONS:
                    continue
                version = self.older_version(f, ctx)
                if isinstance(version, Decline):
                    continue
                domain = normalize_domain(f.domain)
                best[domain] = min(best.get(domain, version), version)
        return best

    # up-conversion -----------------------------------------------------------------------

    def _raise_to(self, ctx: PassContext, target_name: str | None = None) -> int | None:
        """The opset the model must be raised to (for ``target_name``, or any target)."""
        low = floors(ctx.targets).get("")
        model = self._model
        if low is None or model is None or (target_name and low[1] != target_name):
            return None
        current = opset_map(model.opset_import).get("")
        if current is None or current >= low[0]:
            return None
        return low[0]

    def _raised(self, version: int) -> ModelProto | Decline:
        cached = self._raised_cache
        if cached is not None and cached[0] is self._model and cached[1] == version:
            return cached[2]
        result: ModelProto | Decline
        model = self._model
        top = ceilings(self._ctx_targets).get("") if self._ctx_targets else None
        if top is not None and top < version:
            result = Decline(f"another target allows at most opset {top}")
        elif model.functions:
            result = Decline("onnx's version converter drops model-local functions")
        else:
            from onnx import version_converter

            try:
                result = version_converter.convert_version(model, version)
            except Exception as e:  # noqa: BLE001 - the converter raises several kinds
                result = Decline(f"onnx's version converter failed: {first_line(e)}")
        self._raised_cache = (model, version, result)
        return result

    # running -----------------------------------------------------------------------------

    def run(self, model: ModelProto, ctx: PassContext) -> ModelProto | None:
        from rewriter.plugin import find_unsupported

        self.prepare(model, ctx)
        up = self._raise_to(ctx)
        if up is not None:
            result = self._raised(up)
            if isinstance(result, Decline):
                return None
            ctx.record("conversion", self.plugin, "onnx version converter",
                       f"ai.onnx opset {opset_map(model.opset_import).get('')} -> {up}")
            out = ModelProto()
            out.CopyFrom(result)
            self._model, self._facts = out, None
            return out
        to = ceilings(ctx.targets)
        for domain, older in self._older_opset_for_targets(model, ctx).items():
            to[domain] = min(to.get(domain, older), older)  # a ceiling and an older version
        if not to:
            return None
        if to.get("", 21) < 21 and widened_4bit(model):
            model = copy_model(model)
            for name in widen_4bit_initializers(model):
                ctx.record("conversion", self.plugin, "4-bit weights widened to 8 bits "
                           "(no 4-bit types before opset 21)", name)
            self._model, self._facts = model, None
        findings = find_unsupported(model, CeilingTarget(to), keep_nodes=True)
        plans = []
        for f in findings:
            if f.node is None or f.reason != "opset-too-new":
                continue
            result = self.conversion(f.node, dict(f.scope_opsets or {}), f.input_types, to)
            if isinstance(result, Decline):
                return None  # planning said yes; leave the model for the report to show
            plans.append((f, result))
        if not lowers_imports(model, to) and not plans:
            return None
        used_before = referenced(model)
        functions: dict[bytes, FunctionProto] = {}
        for f, result in plans:
            ctx.record("conversion", self.plugin, result.how, f.op_label)
            if result.function is None:
                continue
            key = result.function.SerializeToString()
            fn = functions.get(key)
            if fn is None:
                name = f"{f.op_type}_to_{to.get(f.domain)}_{len(functions)}"
                fn = functions[key] = specialise(result.function, name, to, self.plugin,
                                                 result.how)
            call_function(f.node, fn)
        lower_imports(model, to)
        for local in model.functions:
            if not any(normalize_domain(o.domain) == REMEDY_DOMAIN for o in local.opset_import):
                entry = local.opset_import.add()
                entry.domain, entry.version = REMEDY_DOMAIN, 1
        out = splice(model, list(functions.values())) if functions else model
        drop_dead_constants(out, used_before - referenced(out))
        forget_contradicted_constant_shapes(out)  # genai builder scalars, see there
        self._model, self._facts = out, None
        return out


def _type_dims(t: TypeProto) -> list | None:
    """The dimensions of a tensor type (values or names), None without a shape."""
    if not t.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in t.tensor_type.shape.dim]
