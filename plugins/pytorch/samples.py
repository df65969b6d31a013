"""The ``pytorch`` plugin's oracle and samples (``tests/test_oracles.py``).

The oracle is torch itself, the producer of these nodes: ``torch.ops.aten.<operator>``,
called through torch's own operator schemas (not the plugin's table) on the node's
arguments, in each node form:

* ``torch_oracle.named``: ``ATen`` (tensor arguments are the inputs in schema order, the
  others attributes by name, schema defaults for the rest);
* ``torch_oracle.positional``: ``org.pytorch.aten::ATen`` / ``com.microsoft::ATen`` (every
  argument an input, ``""`` for None);
* ``torch_oracle.atenop``: ``com.microsoft::ATenOp`` (``name`` "aten::op", non-tensor
  arguments in ``custom_attributes_json``);
* ``torch_oracle.<operator>``: ``org.pytorch.aten::<operator>`` (positional without
  attributes, named with them).

Overload ``""`` tries ``default`` and then the operator's other overloads, the first that
binds the arguments (``upsample_*.vec``, ``masked_fill.Scalar``). float16 is computed in
float32 and cast back, as torch's CPU kernels accumulate. ``GenerateProposals`` is checked
against the plugin's numpy kernel (itself checked against a loop-by-loop transcription of
caffe2's algorithm in ``tests/test_pytorch_plugin.py``).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from rewriter.plugin import Arg, OpSample

_ORACLE = "rewriter_plugins.pytorch.samples:torch_oracle"


# -- the oracle --------------------------------------------------------------------------


def _is_tensor(kind: str) -> bool:
    return kind in ("Tensor", "Optional[Tensor]")


def _convert(value: Any, kind: str) -> Any:
    """A node's argument (array, attribute value) as the schema type ``kind`` takes it."""
    import torch

    optional = kind.startswith("Optional[")
    kind = kind[9:-1] if optional else kind
    if kind == "Tensor":
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, bytes):
        value = value.decode()
    array = np.asarray(value)
    if kind in ("int", "SymInt"):
        return int(array.item())
    if kind in ("List[int]", "List[SymInt]"):
        return [int(v) for v in array.reshape(-1)]
    if kind == "float":
        return float(array.item())
    if kind == "List[float]":
        return [float(v) for v in array.reshape(-1)]
    if kind == "bool":
        return bool(array.item())
    if kind == "str":
        item = array.item()
        return item.decode() if isinstance(item, bytes) else str(item)
    if kind == "number":
        return array.item()
    raise TypeError(f"argument type {kind} is not handled")


def _bind(schema, arrays: list, named: dict[str, Any], positional: bool) -> dict[str, Any]:
    """Keyword arguments for one overload's schema (TypeError: they do not fit it)."""
    kwargs: dict[str, Any] = {}
    tensors = list(arrays)
    unknown = set(named) - {a.name for a in schema.arguments}
    if unknown:
        raise TypeError(f"no argument {sorted(unknown)}")
    if positional and len(arrays) > len(schema.arguments):
        raise TypeError("too many arguments")
    for i, arg in enumerate(schema.arguments):
        kind = str(arg.type)
        if positional:
            value = arrays[i] if i < len(arrays) else None
        elif _is_tensor(kind):
            value = tensors.pop(0) if tensors else None
        else:
            value = named.get(arg.name)
        if value is not None:
            kwargs[arg.name] = _convert(value, kind)
        elif not (arg.has_default_value() or kind.startswith("Optional[")):
            raise TypeError(f"argument {arg.name} missing")
        elif kind.startswith("Optional[") and not arg.has_default_value():
            kwargs[arg.name] = None
    if not positional and tensors:
        raise TypeError("more tensors than the schema takes")
    return kwargs


def _torch_call(operator: str, overload: str, arrays, named: dict[str, Any],
                positional: bool):
    import torch

    packet = getattr(torch.ops.aten, operator)
    overloads = [o for o in packet.overloads() if "out" not in o]
    if overload and overload != "default":
        names = [overload]
    else:
        names = (["default"] if "default" in overloads else []) + sorted(
            o for o in overloads if o != "default")
    half = any(a is not None and np.asarray(a).dtype == np.float16 for a in arrays)
    arrays = [None if a is None else (np.asarray(a).astype(np.float32)
                                      if np.asarray(a).dtype == np.float16 else a)
              for a in arrays]
    problems = []
    for name in names:
        op = getattr(packet, name)
        try:
            kwargs = _bind(op._schema, list(arrays), named, positional)
        except TypeError as e:
            problems.append(f"{name}: {e}")
            continue
        result = op(**kwargs)
        results = result if isinstance(result, tuple | list) else (result,)
        out = [r.numpy() for r in results]
        return tuple(o.astype(np.float16) if half and o.dtype == np.float32 else o
                     for o in out)
    raise TypeError(f"aten::{operator}: no overload takes these arguments ({problems})")


class TorchOracles:
    """``torch.ops.aten`` for each node form (see the module docstring)."""

    @staticmethod
    def named(*arrays, operator, overload_name="", **attributes):
        return _torch_call(operator, overload_name, arrays, attributes, positional=False)

    @staticmethod
    def positional(*arrays, operator, overload_name="", **_):
        return _torch_call(operator, overload_name, arrays, {}, positional=True)

    @staticmethod
    def atenop(*arrays, name, custom_attributes_json="{}", **_):
        operator, _, overload = name.removeprefix("aten::").partition(".")
        return _torch_call(operator, overload, arrays, json.loads(custom_attributes_json),
                           positional=False)

    def __getattr__(self, operator: str):
        if operator.startswith("_"):
            raise AttributeError(operator)

        def call(*arrays, overload_name="", **attributes):
            return _torch_call(operator, overload_name, arrays, attributes,
                               positional=not attributes)

        call.__name__ = operator
        return call


torch_oracle = TorchOracles()


# -- samples -----------------------------------------------------------------------------

_FLOATS = ["float", "float16", "double"]


def _const(spec: str, value) -> Arg:
    return Arg(spec, values=value, constant=True)


def _ints(values) -> Arg:
    return _const(f"int64[{len(values)}]", values)


def _int(value) -> Arg:
    return _const("int64[]", value)


def _named_samples() -> list[OpSample]:
    """``ATen`` with attributes (torch.onnx's ONNX_ATEN_FALLBACK, opset 9 era)."""
    x = "T[2,3,4,5]"
    return [
        *[OpSample([x, "T[4,5]", "T[4,5]"], attributes=dict(
            operator="layer_norm", normalized_shape=[4, 5], eps=1e-3, cudnn_enable=1),
            opset=opset, dtypes=_FLOATS, name="layer_norm") for opset in (9, 13, 18)],
        OpSample(["T[3,7]"], attributes=dict(operator="layer_norm", normalized_shape=[7]),
                 opset=11, dtypes=["float"], name="layer_norm-no-weight"),
        *[OpSample([f"T{shape}", "T[6]", "T[6]"], attributes=dict(
            operator="group_norm", num_groups=3, eps=1e-5, cudnn_enabled=1), opset=12,
            dtypes=_FLOATS, name=f"group_norm-{len(shape)}d")
          for shape in ([2, 6, 5], [2, 6, 3, 4])],
        *[OpSample([f"T{shape}"], attributes=dict(operator=f"adaptive_avg_pool{rank}d",
                                                  output_size=size), opset=11,
                   dtypes=["float"], name=f"adaptive_avg_pool{rank}d-{size}")
          for rank, shape, size in ((1, [2, 3, 10], [4]), (3, [1, 2, 5, 4, 6], [2, 3, 4]),
                                    (3, [1, 2, 5, 4, 6], [1, 1, 1]))],
        OpSample(["T[10,4]", Arg("int64[2,3]", low=0, high=10)], attributes=dict(
            operator="embedding", padding_idx=-1, scale_grad_by_freq=0, sparse=0),
            opset=13, dtypes=["float"], name="embedding"),
        *[OpSample(["T[4,5,6]", Arg(f"{index}[3]", low=0, high=4)], attributes=dict(
            operator="index_select", dim=dim), opset=13, dtypes=["double"],
            name=f"index_select-dim{dim}-{index}")
          for dim, index in ((1, "int64"), (-1, "int32"), (0, "int64"))],
        # (onnxruntime has no double Erf: the reference evaluator runs that body, and its
        # Erf is good to ~1e-7)
        *[OpSample([Arg("T[3,8]", low=-6, high=6)], attributes=dict(
            operator="gelu", **({} if approximate is None else {"approximate": approximate})),
            opset=9, dtypes=_FLOATS, tolerance=(1e-6, 1e-7), name=f"gelu-{approximate}")
          for approximate in (None, "none", "tanh")],
        OpSample([Arg("T[4,5]", low=-8, high=8)], attributes=dict(operator="silu"), opset=9,
                 dtypes=_FLOATS, name="silu"),
        *[OpSample(["T[2,3,5,6]", Arg("T[2,4,3,2]", low=-1.2, high=1.2)], attributes=dict(
            operator="grid_sampler", interpolation_mode=mode, padding_mode=padding,
            align_corners=align), opset=20 if dtype == "double" else 16, dtypes=[dtype],
            tolerance=(1e-5, 1e-5), name=f"grid_sampler-{mode}{padding}{align}")
          for mode, padding, align, dtype in ((0, 0, 0, "float"), (0, 1, 1, "float"),
                                              (1, 0, 0, "float"), (2, 2, 1, "float"),
                                              (0, 0, 1, "float16"), (0, 2, 0, "double"),
                                              (1, 1, 1, "double"))],
        OpSample([Arg("T[2,3,4]", low=-9, high=9)], attributes=dict(
            operator="roll", shifts=[2, -1], dims=[0, 2]), opset=13, name="roll"),
        OpSample([Arg("T[3,4]", low=-9, high=9)], attributes=dict(operator="cumsum", dim=1),
                 opset=13, name="cumsum"),
        # the default overload's per-axis scales (not out / in) are used
        OpSample(["T[1,2,4,5]"], attributes=dict(
            operator="upsample_bilinear2d", output_size=[10, 7], align_corners=0,
            scales_h=2.5, scales_w=1.5), opset=11, dtypes=["float"],
            name="upsample_bilinear2d-scales"),
    ]


# tril/triu/flip/roll/cumsum as torch exports them (every argument an input)
_MOVES = {
    "tril": [_int(-1)], "triu": [_int(2)], "flip": [_ints([1, -1])],
    "roll": [_ints([9, -2]), _ints([3, 1])], "roll-flat": [_ints([-11]), _ints([])],
    "cumsum": [_int(1), None], "cumsum-last": [_int(-1), None],
}


def _upsample_args(align, size, scale) -> list:
    args = [None if size is None else _ints(size)]
    if align is not None:
        args.append(_const("bool[]", align))
    return args + [None if scale is None else _const(f"float[{len(scale)}]", scale)]


def _positional_samples() -> list[OpSample]:
    """``org.pytorch.aten::ATen``: torch 2.x's ONNX_ATEN_FALLBACK form."""
    x = Arg("T[2,3,5,7]", low=-9, high=9)

    def aten(operator, *args, **kw):
        return OpSample(list(args), attributes=dict(operator=operator, overload_name=""), **kw)

    samples = [aten(case.partition("-")[0], x, *args, opset=opset, dtypes=["float"],
                    name=case) for case, args in _MOVES.items() for opset in (9, 13)]
    samples += [
        aten("triu", x, *_MOVES["triu"], opset=11, dtypes=["float16"], name="triu"),
        aten("flip", x, *_MOVES["flip"], opset=9, dtypes=["int64"], name="flip"),
        aten("roll", x, *_MOVES["roll"], opset=13, dtypes=["int64"], name="roll"),
        aten("cumsum", x, *_MOVES["cumsum"], opset=9, dtypes=["int64"], name="cumsum"),
        OpSample([Arg("int32[2,3,5,7]", low=-9, high=9), *_MOVES["cumsum"]], ["int64"],
                 dict(operator="cumsum", overload_name=""), opset=13,
                 name="cumsum-int32-to-int64"),
        aten("cumsum", x, *_MOVES["cumsum-last"], opset=13, dtypes=["float16"],
             name="cumsum-last"),
        aten("tril", x, *_MOVES["tril"], opset=9, dtypes=["double"], name="tril"),
    ]
    samples += [aten("masked_fill", "T[3,4]", Arg("bool[4]"), _const(f"{kind}[]", value),
                     opset=13, dtypes=[dtype], name=f"masked_fill-{kind}")
                for dtype, kind, value in (("float", "float", -2.5), ("float16", "double", 7.0),
                                           ("int64", "int64", 4))]
    for op, mode in (("upsample_bilinear2d", "bilinear"), ("upsample_bicubic2d", "bicubic"),
                     ("upsample_nearest2d", "nearest")):
        for align in ((False, True) if mode != "nearest" else (None,)):
            for size, scale in (([9, 4], None), (None, [2.0, 2.0]), (None, [1.7, 0.6])):
                samples.append(aten(op, "T[2,3,5,7]", *_upsample_args(align, size, scale),
                                    opset=9, dtypes=["float"],
                                    name=f"{op}-{align}-{size or scale}"))
    return samples


def _ms_aten_samples() -> list[OpSample]:
    """``com.microsoft::ATen`` (onnxruntime training): every argument an input."""
    return [
        OpSample(["T[10,4]", Arg("int64[2,3]", low=0, high=10), _int(2),
                  _const("bool[]", False)], attributes=dict(operator="embedding",
                                                            overload_name=""),
                 opset=13, dtypes=["float"], name="embedding"),
        OpSample([Arg("T[2,3,5,7]", low=-9, high=9), *_MOVES["roll"]],
                 attributes=dict(operator="roll", overload_name=""), opset=13, name="roll"),
    ]


def _atenop_samples() -> list[OpSample]:
    """``com.microsoft::ATenOp`` (older onnxruntime training export)."""
    return [OpSample(["T[10,4]", Arg("int64[2,3]", low=0, high=10)], attributes=dict(
        name="aten::embedding", custom_attributes_json=json.dumps(
            {"padding_idx": 2, "scale_grad_by_freq": False, "sparse": False})),
        opset=13, dtypes=["float"], name="embedding")]


def _upsample_op_samples(op: str) -> list[OpSample]:
    """``org.pytorch.aten::upsample_*`` (the op type names the operator), dynamic input
    shapes and several element types."""
    cases = {  # rank, align, size, scale, dtype, opset
        "upsample_linear1d": (1, True, None, [2.5], "float", 13),
        "upsample_trilinear3d": (3, False, [3, 5, 2], None, "double", 13),
        "upsample_nearest3d": (3, None, None, [2.0, 1.5, 0.5], "float16", 11),
        "upsample_nearest1d": (1, None, [13], None, "float", 11),
        "upsample_nearest2d": (2, None, None, [2.0, 1.5], "float", 13),
        "upsample_bilinear2d": (2, False, None, [3.0, 1.3], "float16", 13),
        "upsample_bicubic2d": (2, True, [8, 3], None, "double", 18),
    }
    rank, align, size, scale, dtype, opset = cases[op]
    shape = [2, 3, 4, 5, 6][:2 + rank]
    return [OpSample([f"T{shape}", *_upsample_args(align, size, scale)], opset=opset,
                     dtypes=[dtype], name=op)]


def _op_type_samples(operator: str) -> list[OpSample]:
    """``org.pytorch.aten::<operator>`` without attributes: every argument an input."""
    if operator.startswith("upsample"):
        return _upsample_op_samples(operator)
    if operator.startswith("adaptive_avg_pool"):
        rank = int(operator[-2])
        cases = {1: [([2, 3, 10], [4])], 3: [([1, 2, 5, 4, 6], [2, 3, 4])],
                 2: [([1, 2, 4, 4], [2, 2]), ([2, 3, 5, 7], [3, 2]), ([2, 3, 5, 7], [1, 1]),
                     ([3, 6, 5], [4, 5]), ([1, 2, 3, 3], [5, 4])]}[rank]
        # OpenVINO's form: the size a constant int32 input
        return [OpSample([f"T{shape}", _const(f"int32[{len(size)}]", size)],
                         opset=17 if rank == 2 else 11, name=f"{shape}-to-{size}")
                for shape, size in cases]
    x = Arg("T[2,3,5,7]", low=-9, high=9)
    table = {
        "layer_norm": [["T[2,3,4,5]", _ints([4, 5]), "T[4,5]", "T[4,5]", _const(
            "double[]", 1e-3), _const("bool[]", True)]],
        "group_norm": [["T[2,6,3,4]", _int(3), "T[6]", "T[6]", _const("double[]", 1e-5),
                        _const("bool[]", True)]],
        "embedding": [["T[10,4]", Arg("int64[2,3]", low=0, high=10)]],
        "index_select": [["T[4,5,6]", _int(1), Arg("int64[3]", low=0, high=4)]],
        "gelu": [[Arg("T[3,8]", low=-6, high=6)]],  # tolerance: as the named form's
        "silu": [[Arg("T[4,5]", low=-8, high=8)]],
        "grid_sampler": [["T[2,3,5,6]", Arg("T[2,4,3,2]", low=-1.2, high=1.2), _int(0),
                          _int(1), _const("bool[]", True)]],  # opset: see below
        "masked_fill": [["T[3,4]", Arg("bool[4]"), _const("double[]", -2.5)]],
        **{name: [[x, *args]] for name, args in _MOVES.items() if "-" not in name},
    }
    if operator == "grid_sampler":  # GridSample's mode names change at 20, where the
        # reference evaluator runs double (onnxruntime's GridSample is float only)
        return [OpSample(inputs, opset=opset, dtypes=dtypes, tolerance=(1e-5, 1e-5))
                for inputs in table[operator]
                for opset, dtypes in ((16, ["float", "float16"]), (20, ["double"]))]
    return [OpSample(inputs, opset=13, tolerance=(1e-6, 1e-7) if operator == "gelu" else None)
            for inputs in table[operator]]


def oracles(form: str, operator: str | None = None) -> dict[str, Any]:
    """``oracle`` and ``samples`` for one registration: ``form`` is ``named``,
    ``positional``, ``ms_aten``, ``atenop``, ``op_type`` (with ``operator``) or
    ``proposals``."""
    if form == "named":
        return dict(oracle=f"{_ORACLE}.named", samples=_named_samples())
    if form == "positional":
        return dict(oracle=f"{_ORACLE}.positional", samples=_positional_samples())
    if form == "ms_aten":
        return dict(oracle=f"{_ORACLE}.positional", samples=_ms_aten_samples())
    if form == "atenop":
        return dict(oracle=f"{_ORACLE}.atenop", samples=_atenop_samples())
    if form == "op_type":
        return dict(oracle=f"{_ORACLE}.{operator}", samples=_op_type_samples(operator))
    if form == "proposals":
        return dict(oracle="kernel", samples=_proposal_samples())
    raise ValueError(form)


def _proposal_samples() -> list[OpSample]:
    """TopK, the box transform, clip, filter and the greedy-NMS Loop (static shapes; opset
    9's TopK takes the candidate count from them)."""
    inputs = [Arg("T[2,3,6,5]", low=0, high=1),
              Arg("T[2,12,6,5]", values=lambda rng, shape: rng.standard_normal(shape) * 0.3),
              Arg("T[2,3]", values=[[40, 48, 1.0], [37.5, 30.7, 0.5]]),
              Arg("T[3,4]", values=[[-4, -4, 11, 11], [-10, -2, 17, 9], [0, 0, 7, 23]])]
    return [OpSample(inputs, ["T", "T"], dict(
        spatial_scale=0.25, pre_nms_topN=pre, post_nms_topN=post, nms_thresh=thresh,
        min_size=3.0, legacy_plus_one=plus_one), opset=opset, tolerance=(1e-5, 1e-4),
        name=f"pre{pre}-post{post}-plus{plus_one}")
        for opset, pre, post, thresh, plus_one in ((9, 6000, 300, 0.7, 1), (10, 40, 12, 0.5, 1),
                                                   (13, 0, 0, 0.6, 0), (11, 25, 5, 0.3, 0),
                                                   (18, 70, 0, 0.45, 1))]
