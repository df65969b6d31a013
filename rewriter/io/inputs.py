"""Inputs for running a model: generated from its declared types, or loaded from files.

Generated inputs are seeded (the same seed gives the same arrays), take symbolic dimensions
from ``dims`` (``--dim batch=2``; others get :data:`DEFAULT_DIM`), and keep values where the
operators consuming them are meaningful: an input read by ``Log``, ``Sqrt``, ``Reciprocal``,
``Pow`` (base) or used as a divisor is positive, one read by ``Asin``/``Acos``/``Atanh`` lies
in (-1, 1), and so on (looked through ``Cast``, ``Reshape``, ``Transpose`` and the like).

Loaded inputs come from ``.npz`` files (arrays by input name) or ONNX test data: a
``test_data_set_N`` folder of ``input_K.pb`` files, a folder holding such folders, or single
``.pb`` files (a ``TensorProto`` named after its input, or taken in the model's input order).
Expected outputs load the same way (``output_K.pb``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from onnx import ModelProto, TensorProto, TypeProto, helper

from rewriter.errors import RewriterError
from rewriter.io.limits import (
    STRING_ELEMENT_BYTES,
    array_bytes,
    check_input_bytes,
    npz_member_bytes,
    regular_file,
)

DEFAULT_DIM = 3
FLOAT_RANGE = (-3.0, 3.0)
INT_RANGE = (0, 3)  # small and non-negative: indices, counts and axes stay in range

_POSITIVE = (0.5, 2.0)
_UNIT = (-0.9, 0.9)
_ABOVE_ONE = (1.1, 3.0)
_FIRST_INDEX = _ZERO = (0.0, 0.0)  # 0 only
_PROBABILITY = (0.1, 0.7)  # a probability or a drop ratio, away from its ends
# (domain, op) -> {input index: range} where the op is only meaningful on that range
_DOMAINS: dict[tuple[str, str], dict[int, tuple[float, float]]] = {
    ("", "Log"): {0: _POSITIVE},
    ("", "Sqrt"): {0: _POSITIVE},
    ("", "Reciprocal"): {0: _POSITIVE},
    ("", "Pow"): {0: _POSITIVE},
    ("", "Div"): {1: _POSITIVE},
    ("", "Mod"): {1: _POSITIVE},
    ("", "Asin"): {0: _UNIT},
    ("", "Acos"): {0: _UNIT},
    ("", "Atanh"): {0: _UNIT},
    ("", "Acosh"): {0: _ABOVE_ONE},
    # quantization scales are positive (a negative or tiny one saturates every value, where
    # runtimes differ: onnxruntime's float8 saturation is not the reference evaluator's)
    # and zero points 0 (float8 ones must be: runtimes read others differently)
    ("", "QuantizeLinear"): {1: _POSITIVE, 2: _ZERO},
    ("", "DequantizeLinear"): {1: _POSITIVE, 2: _ZERO},
    ("com.microsoft", "QuantizeLinear"): {1: _POSITIVE, 2: _ZERO},
    ("com.microsoft", "DequantizeLinear"): {1: _POSITIVE, 2: _ZERO},
    # an index into another input's first dimension, whose size is unknown here: 0 is valid
    ("", "RoiAlign"): {2: _FIRST_INDEX},
    ("com.microsoft", "RoiAlign"): {2: _FIRST_INDEX},
    ("", "Dropout"): {1: _PROBABILITY},
    # a mel filter bank the spec can build: bins, a DFT length and a sample rate whose
    # spectrogram holds them, band edges within its Nyquist frequency
    ("", "MelWeightMatrix"): {0: (4.0, 8.0), 1: (64.0, 128.0), 2: (8000.0, 16000.0),
                              3: (0.0, 100.0), 4: (3000.0, 4000.0)},
    ("", "Bernoulli"): {0: _PROBABILITY},
}
# ops whose output holds (some of) the values of these inputs, so a range carries through
_PASS_THROUGH: dict[str, tuple[int, ...] | None] = {  # None: every input
    "Identity": (0,), "Cast": (0,), "CastLike": (0,), "Reshape": (0,), "Transpose": (0,),
    "Flatten": (0,), "Squeeze": (0,), "Unsqueeze": (0,), "Expand": (0,), "Slice": (0,),
    "Gather": (0,), "GatherElements": (0,), "GatherND": (0,), "Tile": (0,), "Split": (0,),
    "Concat": None, "Max": None, "Min": None, "ReduceMax": (0,), "ReduceMin": (0,),
    "ReduceMean": (0,), "DepthToSpace": (0,), "SpaceToDepth": (0,), "Pad": (0,),
}


class InputError(RewriterError):
    """Inputs could not be generated or loaded (exit 2: could not run)."""


@dataclass(frozen=True)
class InputSpec:
    """One graph input: its name and declared type."""

    name: str
    type: TypeProto

    @property
    def kind(self) -> str:
        return self.type.WhichOneof("value") or "unknown"

    def describe(self) -> str:
        from rewriter.graph.typeinfer import type_string

        shape = _shape_of(self.type)
        dims = "" if shape is None else "[" + ", ".join(
            "?" if d is None else str(d) for d in shape) + "]"
        return f"{type_string(self.type) or self.kind}{dims}"


def input_specs(model: ModelProto) -> list[InputSpec]:
    """The inputs a caller must feed (inputs with an initializer of the same name are
    optional defaults and left out)."""
    initializers = {t.name for t in model.graph.initializer}
    return [InputSpec(i.name, i.type) for i in model.graph.input if i.name not in initializers]


def _shape_of(tp: TypeProto) -> list[int | str | None] | None:
    inner = tp.tensor_type if tp.HasField("tensor_type") else (
        tp.sparse_tensor_type if tp.HasField("sparse_tensor_type") else None)
    if inner is None or not inner.HasField("shape"):
        return None
    out: list[int | str | None] = []
    for d in inner.shape.dim:
        if d.HasField("dim_value") and d.dim_value >= 0:
            out.append(d.dim_value)
        elif d.HasField("dim_param") and d.dim_param:
            out.append(d.dim_param)
        else:
            out.append(None)
    return out


def parse_dims(items: Sequence[str]) -> dict[str, int]:
    """``["batch=2", "seq=7"]`` -> ``{"batch": 2, "seq": 7}``."""
    out = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise InputError(f"--dim {item!r}: expected NAME=VALUE")
        try:
            out[name.strip()] = int(value)
        except ValueError:
            raise InputError(f"--dim {item!r}: {value!r} is not an integer") from None
        if out[name.strip()] < 0:
            raise InputError(f"--dim {item!r}: a dimension cannot be negative")
    return out


# -- value ranges --------------------------------------------------------------------------


def value_ranges(models: Sequence[ModelProto]) -> dict[str, tuple[float, float]]:
    """For each graph input read (directly or through shape-only ops) where an operator is
    only meaningful on part of the real line, that range. Several models (the original and
    its rewrite) are read together: a decomposition may reveal a Log that a custom op hid."""
    ranges: dict[str, tuple[float, float]] = {}
    for name, domain, node, i in reached_positions(models, _PASS_THROUGH):
        wanted = _DOMAINS.get((domain, node.op_type), {}).get(i)
        if wanted is not None:
            ranges[name] = _intersect(ranges.get(name), wanted)
    return ranges


def reached_positions(models: Sequence[ModelProto],
                      through: Mapping[str, tuple[int, ...] | None]):
    """``(input name, domain, node, input index)`` for every node input each graph input of
    ``models`` reaches, directly or through the ai.onnx ops of ``through`` (op -> the input
    positions whose values carry to its outputs; None: every input), in any graph."""
    from rewriter.graph.walk import iter_scopes, normalize_domain

    for model in models:
        consumers: dict[str, list[tuple[Any, int]]] = {}
        for scope in iter_scopes(model):
            for node in scope.nodes:
                for i, name in enumerate(node.input):
                    if name:
                        consumers.setdefault(name, []).append((node, i))
        for spec in input_specs(model):
            seen, frontier = {spec.name}, [spec.name]
            while frontier:
                value = frontier.pop()
                for node, i in consumers.get(value, []):
                    domain = normalize_domain(node.domain)
                    yield spec.name, domain, node, i
                    carried = through.get(node.op_type, ()) if domain == "" else ()
                    if carried is None or i in carried:
                        for out in node.output:
                            if out and out not in seen:
                                seen.add(out)
                                frontier.append(out)


def _intersect(a: tuple[float, float] | None, b: tuple[float, float]) -> tuple[float, float]:
    if a is None:
        return b
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    # contradictory needs: the earlier one wins (the original's ops are read before those of
    # its rewrite, whose bodies' divisors and logs are generic needs of no particular range)
    return (lo, hi) if lo < hi else a


# -- generation ----------------------------------------------------------------------------


# Decoder exports (onnxruntime-genai's builder, Optimum) name the lengths of their KV cache
# ("past_sequence_length", "total_sequence_length", "past_sequence_length + 1", ...): with
# every symbolic dimension the same, the total would not be the past plus the new tokens and
# any run fails on the inputs. Generated inputs give them a decode step (one new token:
# onnxruntime's GroupQueryAttention takes several with a past only for batch 1) after a past
# of two, and an all-ones attention mask (random values are no mask a model expects).
PAST_LENGTH = 2
_NEW_TOKENS = ("sequence_length", "seq_len", "sequence")  # named so beside a past length
_MASK_NAMES = ("attention_mask",)


def cache_dims(model: ModelProto, default: int = DEFAULT_DIM) -> dict[str, int]:
    """Values for the symbolic dimensions of ``model``'s inputs that name KV-cache lengths,
    when some input has a past length (``past...``): that, one new token
    (``sequence_length``), the total (``total...``: past + new) and sums
    (``past_sequence_length + 1``); other dimensions are left to ``default``."""
    names = {d.dim_param for i in model.graph.input if i.type.HasField("tensor_type")
             for d in i.type.tensor_type.shape.dim if d.dim_param}
    dims = {n: PAST_LENGTH for n in names if "past" in n.lower() and "+" not in n}
    if not dims:
        return {}
    dims.update(attention_head_dims(model))
    dims.update({n: 1 for n in names if n.lower() in _NEW_TOKENS})
    for name in names:
        if "+" in name:
            terms = [t.strip() for t in name.split("+")]
            dims[name] = sum(int(t) if t.isdigit() else dims.get(t, default) for t in terms)
        elif "total" in name.lower():
            dims[name] = PAST_LENGTH + 1
    return dims


# where an attention op of onnxruntime takes its past key and value, and whether it has a
# separate key input (without one, the query input packs query, key and value)
_PAST_KEY_INPUTS = {"GroupQueryAttention": (3, 4), "MultiHeadAttention": (6, 7)}


def attention_head_dims(model: ModelProto) -> dict[str, int]:
    """The head size for a symbolic last dimension of a past key/value input of onnxruntime's
    ``GroupQueryAttention``/``MultiHeadAttention`` (onnxruntime-genai names it
    ``kv_cache_dim``): the query's width over the heads it holds, the width read from its
    producer (``MatMulNBits``' ``N``, a ``MatMul``/``Gemm`` weight, a ``Reshape`` to a constant
    shape, a declared type), else twice the rotary cache's width. Any other value fails at
    run time, so no input generated for such a model could run. A cache the model joins
    itself (onnxruntime-genai's float16 CPU models: ``Concat(past_key, new_key, axis=2)``
    before a ``MultiHeadAttention`` that takes no past) has the last dimension of the values
    it is joined with."""
    graph = model.graph
    inputs = {i.name: i for i in graph.input}
    producers = {o: n for n in graph.node for o in n.output}
    constants = {t.name: t for t in graph.initializer}
    declared = {v.name: v for v in (*graph.value_info, *graph.input)}
    out: dict[str, int] = {}
    for node in graph.node:
        where = _PAST_KEY_INPUTS.get(node.op_type)
        if node.domain != "com.microsoft" or where is None:
            continue
        symbols = set()
        for index in where:
            value = inputs.get(node.input[index]) if index < len(node.input) else None
            last = value.type.tensor_type.shape.dim[-1] if value is not None and \
                value.type.tensor_type.shape.dim else None
            if last is not None and last.dim_param:
                symbols.add(last.dim_param)
        if not symbols:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        heads = attrs.get("num_heads", 0)
        packed = len(node.input) < 2 or not node.input[1]
        if packed and node.op_type == "GroupQueryAttention":
            heads += 2 * attrs.get("kv_num_heads", 0)
        elif packed:
            heads *= 3
        width = _last_dim(node.input[0], producers, constants, declared)
        size = width // heads if width and heads and width % heads == 0 else None
        if size is None and node.op_type == "GroupQueryAttention" and attrs.get("do_rotary") \
                and len(node.input) > 7 and node.input[7] in constants:
            cos = constants[node.input[7]].dims
            size = 2 * cos[-1] if len(cos) == 2 else None
        if size:
            out.update(dict.fromkeys(symbols, size))
    for name, size in _joined_last_dims(graph, inputs, producers, constants, declared).items():
        out.setdefault(name, size)
    return out


def _joined_last_dims(graph, inputs, producers, constants, declared) -> dict[str, int]:
    """A symbolic last dimension of a graph input that a main-graph ``Concat`` joins, along
    another axis, with a value whose last dimension is static: that size."""
    out: dict[str, int] = {}
    for node in graph.node:
        if node.op_type != "Concat" or node.domain not in ("", "ai.onnx"):
            continue
        axis = next((a.i for a in node.attribute if a.name == "axis"), None)
        for name in node.input:
            value = inputs.get(name)
            dims = value.type.tensor_type.shape.dim if value is not None else ()
            if not dims or not dims[-1].dim_param or axis is None \
                    or axis % len(dims) == len(dims) - 1 or dims[-1].dim_param in out:
                continue
            sizes = {_last_dim(other, producers, constants, declared)
                     for other in node.input if other and other not in inputs}
            sizes.discard(None)
            if len(sizes) == 1:
                out[dims[-1].dim_param] = sizes.pop()
    return out


def _last_dim(name: str, producers, constants, declared) -> int | None:
    """The static last dimension of value ``name``, from its declaration or its producer."""
    value = declared.get(name)
    dims = value.type.tensor_type.shape.dim if value is not None else ()
    if dims and dims[-1].dim_value:
        return dims[-1].dim_value
    node = producers.get(name)
    if node is None:
        return None
    if node.op_type == "MatMulNBits":
        return next((a.i for a in node.attribute if a.name == "N"), None)
    if node.op_type in ("MatMul", "Gemm") and node.input[1] in constants:
        weight = constants[node.input[1]].dims
        trans = node.op_type == "Gemm" and any(a.name == "transB" and a.i
                                               for a in node.attribute)
        return (weight[0] if trans else weight[-1]) if weight else None
    if node.op_type == "Reshape" and node.input[1] in constants:
        from onnx import numpy_helper

        shape = numpy_helper.to_array(constants[node.input[1]]).ravel()
        return int(shape[-1]) if shape.size and shape[-1] > 0 else None
    if node.op_type in ("Add", "Cast", "Identity") or node.op_type.endswith("Normalization"):
        return _last_dim(node.input[0], producers, constants, declared)
    return None


def generate_inputs(
    model: ModelProto,
    *,
    seed: int = 0,
    dims: Mapping[str, int] | None = None,
    default_dim: int = DEFAULT_DIM,
    also: Sequence[ModelProto] = (),
    ranges: Mapping[str, tuple[float, float]] | None = None,
) -> dict[str, Any]:
    """One set of feeds for ``model``'s inputs, from their declared types.

    Args:
        seed: the same seed gives the same values.
        dims: values of symbolic dimensions by name; KV-cache lengths not given fit each
            other (:func:`cache_dims`); other unknown dimensions get ``default_dim``.
        also: more models whose operators inform the value ranges (e.g. the rewrite).
        ranges: :func:`value_ranges` of ``[model, *also]`` when the caller has them (a
            walk of both models less per set).

    An input named ``attention_mask`` is all ones.

    Raises:
        InputError: an input's type or rank is not declared, or is a kind (map) that cannot
            be generated.
    """
    check_dim_names(dims or {}, [model, *also])
    dims = {**cache_dims(model, default_dim), **(dims or {})}
    check_input_bytes(generated_bytes(model, dims, default_dim),
                      f"generated inputs of {', '.join(dims_text(dims)) or 'the model'}")
    rng = np.random.default_rng(seed)
    ranges = value_ranges([model, *also]) if ranges is None else ranges
    feeds = {spec.name: _generate(spec.name, spec.type, rng, dims, default_dim,
                                  ranges.get(spec.name))
             for spec in input_specs(model)}
    _distinct_axes(model, feeds, np.random.default_rng([seed, 1]))
    for name, value in feeds.items():
        if name.endswith(_MASK_NAMES) and isinstance(value, np.ndarray) \
                and value.dtype.kind in "biuf":
            feeds[name] = np.ones_like(value)
    return feeds


# reductions whose input 1 lists axes: each at most once, within the data's rank
_REDUCE_OPS = frozenset({"ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax",
                         "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum",
                         "ReduceSumSquare"})


def _distinct_axes(model: ModelProto, feeds: dict[str, Any], rng) -> None:
    """Regenerate fed ``axes`` of main-graph reductions as distinct axes within the data's
    declared rank (drawn independently, a repeated axis is invalid: the reference evaluator
    and OpenVINO refuse it, onnxruntime reduces once)."""
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in (*model.graph.input,
                                                                 *model.graph.value_info)
             if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape")}
    ranks.update({t.name: len(t.dims) for t in model.graph.initializer})
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx") or node.op_type not in _REDUCE_OPS \
                or len(node.input) < 2:
            continue
        axes, rank = feeds.get(node.input[1]), ranks.get(node.input[0])
        if not isinstance(axes, np.ndarray) or axes.ndim != 1 or rank is None \
                or axes.dtype.kind not in "iu" or not 0 < axes.size <= rank:
            continue
        feeds[node.input[1]] = np.sort(rng.permutation(rank)[:axes.size]).astype(axes.dtype)


def symbolic_dims(models: Sequence[ModelProto]) -> set[str]:
    """The names of the symbolic dimensions of the models' inputs."""
    names: set[str] = set()
    for model in models:
        for spec in input_specs(model):
            names.update(d for d in _symbols(spec.type))
    return names


def _symbols(tp: TypeProto) -> list[str]:
    kind = tp.WhichOneof("value")
    if kind in ("sequence_type", "optional_type"):
        return _symbols(getattr(tp, kind).elem_type)
    return [d for d in (_shape_of(tp) or []) if isinstance(d, str)]


def check_dim_names(dims: Mapping[str, int], models: Sequence[ModelProto]) -> None:
    """An InputError naming each ``--dim`` no input of the models has (a misspelt name
    would otherwise be ignored)."""
    known = symbolic_dims(models)
    unknown = [name for name in dims if name not in known]
    if unknown:
        listed = ", ".join(sorted(known)) if known else "none"
        raise InputError(f"--dim {', '.join(unknown)}: the model has no symbolic dimension "
                         f"of that name (its inputs' symbolic dimensions: {listed})")


def dims_text(dims: Mapping[str, int]) -> list[str]:
    return [f"{k}={v}" for k, v in dims.items()]


def generated_bytes(model: ModelProto, dims: Mapping[str, int],
                    default_dim: int = DEFAULT_DIM) -> int:
    """Bytes :func:`generate_inputs` would allocate (computed, nothing allocated)."""
    total = 0
    for spec in input_specs(model):
        total += _type_bytes(spec.type, dims, default_dim)
    return total


def _type_bytes(tp: TypeProto, dims, default_dim) -> int:
    kind = tp.WhichOneof("value")
    if kind == "sequence_type":
        return 2 * _type_bytes(tp.sequence_type.elem_type, dims, default_dim)
    if kind == "optional_type":
        return _type_bytes(tp.optional_type.elem_type, dims, default_dim)
    if kind != "tensor_type":
        return 0
    shape = _shape_of(tp) or []
    concrete = [d if isinstance(d, int) else dims.get(d, default_dim) if isinstance(d, str)
                else default_dim for d in shape]
    elem = tp.tensor_type.elem_type
    if elem == TensorProto.STRING:
        itemsize = STRING_ELEMENT_BYTES
    else:
        try:
            itemsize = np.dtype(helper.tensor_dtype_to_np_dtype(elem)).itemsize
        except (KeyError, ValueError, TypeError):
            itemsize = 8
    return array_bytes(concrete, max(itemsize, 8) if elem == TensorProto.BOOL else itemsize)


def _generate(name, tp: TypeProto, rng, dims, default_dim, value_range):
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        shape = _shape_of(tp)
        if shape is None:
            raise InputError(f"input {name!r} declares no shape (its rank is unknown), so it "
                             "cannot be generated: give --inputs")
        concrete = [d if isinstance(d, int) else
                    dims.get(d, default_dim) if isinstance(d, str) else default_dim
                    for d in shape]
        return _tensor(name, tp.tensor_type.elem_type, concrete, rng, value_range)
    if kind == "sequence_type":
        elem = tp.sequence_type.elem_type
        return [_generate(name, elem, rng, dims, default_dim, value_range) for _ in range(2)]
    if kind == "optional_type":
        return _generate(name, tp.optional_type.elem_type, rng, dims, default_dim, value_range)
    raise InputError(f"input {name!r} is a {kind or 'value of undeclared type'}, which cannot "
                     "be generated: give --inputs")


def _tensor(name: str, elem_type: int, shape: list[int], rng, value_range):
    if elem_type == TensorProto.UNDEFINED:
        raise InputError(f"input {name!r} declares no element type: give --inputs")
    if elem_type == TensorProto.STRING:
        words = np.array(["alpha", "Beta", "gamma", "DELTA", "epsilon", ""], dtype=object)
        picked = words[rng.integers(0, len(words), size=shape)]
        return np.asarray(picked, dtype=object).reshape(shape)  # a 0-d pick is a str
    try:
        dtype = helper.tensor_dtype_to_np_dtype(elem_type)
    except (KeyError, ValueError, TypeError):
        raise InputError(f"input {name!r}: element type "
                         f"{TensorProto.DataType.Name(elem_type)} cannot be generated") from None
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.kind in "iu":
        lo, hi = INT_RANGE
        if value_range == _FIRST_INDEX:
            lo, hi = 0, 1
        elif value_range is not None:  # a divisor or log argument: at least 1
            lo, hi = max(1, int(np.ceil(value_range[0]))), max(2, int(np.floor(value_range[1])) + 1)
        return rng.integers(lo, hi, size=shape).astype(dtype)
    lo, hi = value_range or FLOAT_RANGE
    if dtype.kind == "c":
        values = rng.uniform(lo, hi, size=shape) + 1j * rng.uniform(lo, hi, size=shape)
        return values.astype(dtype)
    return rng.uniform(lo, hi, size=shape).astype(np.float32).astype(dtype)


# -- loading -------------------------------------------------------------------------------

_NUMBERED = re.compile(r"^(input|output)_(\d+)\.pb$")


def load_inputs(paths: Sequence[str | os.PathLike], model: ModelProto) -> list[dict[str, Any]]:
    """Input sets from files (see the module's docstring); each ``.npz`` or test-data folder
    is one set, loose ``.pb`` files together form one set."""
    return _load(paths, model, "input")


def load_outputs(paths: Sequence[str | os.PathLike], model: ModelProto) -> list[dict[str, Any]]:
    """Expected output sets, read like :func:`load_inputs` (``output_K.pb`` files)."""
    return _load(paths, model, "output")


def _load(paths, model: ModelProto, kind: str) -> list[dict[str, Any]]:
    declared = ([(s.name, s.type) for s in input_specs(model)] if kind == "input"
                else [(o.name, o.type) for o in model.graph.output])
    sets: list[dict[str, Any]] = []
    loose: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.exists() and not path.is_dir():
            regular_file(path, f"{kind}s")
        if path.is_dir():
            own = sorted(p for p in path.iterdir() if _matches(p, kind))
            nested = sorted(p for p in path.iterdir() if p.is_dir()
                            and p.name.startswith("test_data_set"))
            if own:
                sets.append(_read_numbered(own, declared, kind))
            elif nested:
                for folder in nested:
                    files = sorted(p for p in folder.iterdir() if _matches(p, kind))
                    if files:
                        sets.append(_read_numbered(files, declared, kind))
            else:
                raise InputError(f"{path}: no {kind}_N.pb files or test_data_set_N folders")
        elif path.suffix == ".npz":
            sets.append(_read_npz(path))
        elif path.suffix == ".pb":
            loose.append(path)
        elif not path.exists():
            raise InputError(f"{path}: no such file")
        else:
            raise InputError(f"{path}: expected a .npz file, a .pb file or a test-data folder")
    if loose:
        sets.append(_read_loose(loose, declared, kind))
    if not sets:
        raise InputError(f"no {kind}s found in {', '.join(map(str, paths))}")
    return sets


def _matches(path: Path, kind: str) -> bool:
    m = _NUMBERED.match(path.name)
    return bool(m) and m.group(1) == kind


def _read_numbered(files: list[Path], declared, kind: str) -> dict[str, Any]:
    files = sorted(files, key=lambda p: int(_NUMBERED.match(p.name).group(2)))
    if len(files) > len(declared):
        raise InputError(f"{files[0].parent}: {len(files)} {kind} files, the model has "
                         f"{len(declared)} {kind}s")
    out = {}
    for path, (name, tp) in zip(files, declared):
        out[name] = _read_pb(path, tp)
    return out


def _read_loose(files: list[Path], declared, kind: str) -> dict[str, Any]:
    by_name = dict(declared)
    out, position = {}, 0
    for path in files:
        tensor_name = _proto_name(path)
        if tensor_name in by_name:
            out[tensor_name] = _read_pb(path, by_name[tensor_name])
            continue
        while position < len(declared) and declared[position][0] in out:
            position += 1
        if position >= len(declared):
            raise InputError(f"{path}: more {kind}s than the model has")
        name, tp = declared[position]
        out[name] = _read_pb(path, tp)
    return out


def _proto_name(path: Path) -> str:
    check_input_bytes(regular_file(path).st_size, str(path))
    tensor = TensorProto()
    try:
        tensor.ParseFromString(path.read_bytes())
    except Exception:  # noqa: BLE001 - not a tensor: named by position
        return ""
    return tensor.name


def _read_pb(path: Path, tp: TypeProto | None) -> Any:
    from onnx import MapProto, OptionalProto, SequenceProto, numpy_helper

    check_input_bytes(regular_file(path).st_size, str(path))
    data = path.read_bytes()
    kind = tp.WhichOneof("value") if tp is not None else "tensor_type"
    try:
        if kind == "sequence_type":
            proto = SequenceProto()
            proto.ParseFromString(data)
            return numpy_helper.to_list(proto)
        if kind == "optional_type":
            proto = OptionalProto()
            proto.ParseFromString(data)
            return numpy_helper.to_optional(proto)
        if kind == "map_type":
            proto = MapProto()
            proto.ParseFromString(data)
            return numpy_helper.to_dict(proto)
        proto = TensorProto()
        proto.ParseFromString(data)
        return numpy_helper.to_array(proto)
    except Exception as e:  # noqa: BLE001 - any decoding failure is the file's
        raise InputError(f"{path}: cannot read it as a {kind}: {e}") from e


def _read_npz(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise InputError(f"{path}: no such file")
    regular_file(path)
    try:
        sizes = npz_member_bytes(path)
    except Exception as e:  # noqa: BLE001 - not a zip file
        raise InputError(f"{path}: cannot read it as .npz: {e}") from e
    check_input_bytes(sum(sizes.values()), f"{path} (decompressed)")
    try:
        with np.load(path, allow_pickle=False) as data:
            # strings are stored as fixed-width unicode; ONNX string tensors are objects
            return {name: data[name].astype(object) if data[name].dtype.kind in "US"
                    else data[name] for name in data.files}
    except Exception as e:  # noqa: BLE001
        raise InputError(f"{path}: cannot read it as .npz: {e}") from e


def check_feeds(feeds: Mapping[str, Any], model: ModelProto, where: str = "inputs") -> None:
    """An InputError naming missing and unknown inputs, and values whose element type or
    rank is not the one the model declares."""
    specs = input_specs(model)
    wanted = [s.name for s in specs]
    optional = {t.name: t for t in model.graph.initializer}
    missing = [n for n in wanted if n not in feeds]
    unknown = [n for n in feeds if n not in wanted and n not in optional]
    problems = []
    if missing:
        problems.append(f"missing {', '.join(map(repr, missing))}")
    if unknown:
        problems.append(f"the model has no input {', '.join(map(repr, unknown))}")
    declared = {i.name: i.type for i in model.graph.input}
    for name, value in feeds.items():
        tp = declared.get(name)
        if tp is not None and tp.HasField("tensor_type"):
            problem = _tensor_problem(value, tp)
            if problem:
                problems.append(f"{name!r}: {problem}")
    if problems:
        raise InputError(f"{where}: {'; '.join(problems)} (the model's inputs: "
                         f"{', '.join(s.name + ' ' + s.describe() for s in specs) or 'none'})")


def _tensor_problem(value: Any, tp: TypeProto) -> str | None:
    """Why ``value`` does not fit a declared tensor type (element type, rank), or None."""
    if isinstance(value, TensorProto):  # types numpy has none for (float8 test data)
        if value.data_type != tp.tensor_type.elem_type and tp.tensor_type.elem_type:
            return (f"{TensorProto.DataType.Name(value.data_type).lower()} values, the model "
                    f"declares {TensorProto.DataType.Name(tp.tensor_type.elem_type).lower()}")
        return None
    if not isinstance(value, np.ndarray) and not np.isscalar(value):
        return f"a {type(value).__name__}, the model declares a tensor"
    array = np.asarray(value)
    elem = tp.tensor_type.elem_type
    if elem == TensorProto.STRING:
        if array.dtype.kind not in "OUS":
            return f"{array.dtype.name} values, the model declares string"
    elif elem != TensorProto.UNDEFINED:
        try:
            want = np.dtype(helper.tensor_dtype_to_np_dtype(elem))
        except (KeyError, ValueError, TypeError):
            want = None
        if want is not None and array.dtype != want:
            return (f"{array.dtype.name if array.dtype.kind not in 'OUS' else 'string'} values, "
                    f"the model declares {TensorProto.DataType.Name(elem).lower()}")
    shape = _shape_of(tp)
    # as onnxruntime: a declared shape without dimensions constrains nothing (exporters
    # write it for byte streams and string lists)
    if shape and array.ndim != len(shape):
        return f"rank {array.ndim}, the model declares rank {len(shape)}"
    return None


def feed_sets(value, model: ModelProto, what: str = "inputs") -> list[dict[str, Any]]:
    """Input (or, with ``what="expected"``, output) sets from what a caller gives: a dict of
    arrays by name, a list of such dicts, paths to .npz / .pb files or test-data folders,
    or (expected outputs) a list of arrays in the model's output order."""
    if isinstance(value, Mapping):
        return [dict(value)]
    if isinstance(value, (str, os.PathLike)):
        value = [value]
    items = list(value)
    if items and all(isinstance(x, (str, os.PathLike)) for x in items):
        return (load_inputs if what == "inputs" else load_outputs)(items, model)
    if items and all(isinstance(x, Mapping) for x in items):
        return [dict(x) for x in items]
    if what == "expected" and items:  # a list of arrays: the model's outputs in order
        names = [o.name for o in model.graph.output]
        if len(items) != len(names):
            raise InputError(f"expected: {len(items)} arrays, the model has {len(names)} "
                             "outputs")
        return [dict(zip(names, items))]
    raise InputError(f"{what}: give a dict of arrays by name, a list of such dicts, or "
                     "paths to .npz / .pb files or test-data folders")


# -- saving --------------------------------------------------------------------------------


def save_feed_sets(path: str | os.PathLike, sets: Sequence[Mapping[str, Any]], *,
                   protected: Sequence[str | os.PathLike] = ()) -> Path:
    """Write input sets so ``--inputs PATH`` reads them back: one set of tensors to a
    ``.npz`` file, anything else (several sets, sequences, optionals) to an ONNX test-data
    folder (``test_data_set_N/input_K.pb``, in the order given). Written through
    :mod:`rewriter.io.output` (atomic; an existing file or folder is replaced only as a
    whole; never one of the ``protected`` files: the model and its data)."""
    from onnx import numpy_helper

    from rewriter.io import output

    target = Path(path)
    tensors_only = all(isinstance(v, np.ndarray) for s in sets for v in s.values())
    if target.suffix == ".npz":
        if len(sets) != 1 or not tensors_only:
            raise InputError(f"{target}: a .npz file holds one set of tensors; give a folder "
                             "name to save several input sets or sequences")
        arrays = {name: (v.astype(str) if v.dtype == object else v)
                  for name, v in sets[0].items()}
        return output.write_file(target, lambda f: np.savez(f, **arrays), protected=protected)
    if target.exists() and not target.is_dir():
        raise InputError(f"{target}: exists and is not a folder (name a .npz file, or a "
                         "folder for test data)")

    def fill(tmp: Path) -> None:
        for i, feeds in enumerate(sets):
            folder = tmp / f"test_data_set_{i}"
            folder.mkdir()
            for k, (name, value) in enumerate(feeds.items()):
                if isinstance(value, list):
                    proto = numpy_helper.from_list(value, name)
                elif isinstance(value, np.ndarray) or np.isscalar(value):
                    proto = numpy_helper.from_array(np.asarray(value), name)
                else:
                    proto = numpy_helper.from_optional(value, name)
                (folder / f"input_{k}.pb").write_bytes(proto.SerializeToString())

    return output.write_folder(target, fill, protected=protected)
