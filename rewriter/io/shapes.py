"""Static shapes on request, the way edge users prepare a model: ``--fix-dim NAME=V`` sets a
symbolic dimension everywhere it appears, ``--input-shape INPUT=d0,d1,...`` an input's whole
shape (Polygraphy's and onnxsim's conventions). Applied before detection, so a target is
asked about the model it will really run; the result keeps them (its inputs are static)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from onnx import ModelProto, TypeProto

from rewriter.io.inputs import InputError, parse_dims


def parse_input_shapes(items: Sequence[str]) -> dict[str, list[int]]:
    """``INPUT=d0,d1,...`` items (``--input-shape``) as {input: [d0, d1, ...]}; an empty
    shape (``x=``) is a scalar."""
    shapes: dict[str, list[int]] = {}
    for item in items:
        name, sep, text = item.rpartition("=")
        if not sep or not name:
            raise InputError(f"--input-shape {item!r}: expected INPUT=d0,d1,... (e.g. "
                             "images=1,3,224,224)")
        try:
            dims = [int(d) for d in text.replace("x", ",").split(",") if d.strip()]
        except ValueError:
            raise InputError(f"--input-shape {item!r}: dimensions are whole numbers") from None
        if any(d < 0 for d in dims):
            raise InputError(f"--input-shape {item!r}: dimensions are 0 or more")
        shapes[name] = dims
    return shapes


def parse_fixed_dims(items: Sequence[str]) -> dict[str, int]:
    """``NAME=V`` items (``--fix-dim``) as {name: value}."""
    return {name: value for name, value in parse_dims(items).items()}


def _tensor_types(model: ModelProto) -> Iterable[TypeProto]:
    """Every tensor type the main graph declares (inputs, outputs, value_info), sequences'
    and optionals' elements included."""
    graph = model.graph
    for value in (*graph.input, *graph.output, *graph.value_info):
        tp = value.type
        while tp.WhichOneof("value") in ("sequence_type", "optional_type"):
            tp = getattr(tp, tp.WhichOneof("value")).elem_type
        if tp.WhichOneof("value") == "tensor_type" and tp.tensor_type.HasField("shape"):
            yield tp


def static_shapes(model: ModelProto, fix_dims: Mapping[str, int] | None = None,
                  input_shapes: Mapping[str, Sequence[int]] | None = None,
                  ) -> tuple[ModelProto, list[str]]:
    """A copy of ``model`` with the symbolic dimensions of ``fix_dims`` set everywhere the
    main graph declares them, and the inputs of ``input_shapes`` given those shapes (a
    symbolic dimension an input shape fixes is fixed everywhere too); one sentence per
    change. InputError for a name the model does not have, a rank that differs, or a
    static dimension given another value."""
    fix = dict(fix_dims or {})
    shapes = {k: list(v) for k, v in (input_shapes or {}).items()}
    initializers = {t.name for t in model.graph.initializer}
    inputs = {i.name: i for i in model.graph.input if i.name not in initializers}
    unknown = sorted(set(shapes) - set(inputs))
    if unknown:
        raise InputError(f"--input-shape {', '.join(unknown)}: the model has no such input "
                         f"(its inputs: {', '.join(inputs) or 'none'})")
    said: list[str] = []
    for name, dims in shapes.items():
        tp = inputs[name].type
        if tp.WhichOneof("value") != "tensor_type":
            raise InputError(f"--input-shape {name}: the input is not a tensor")
        declared = tp.tensor_type.shape.dim if tp.tensor_type.HasField("shape") else None
        if declared is not None and len(declared) != len(dims):
            raise InputError(f"--input-shape {name}: {len(dims)} dimensions given, the input "
                             f"has rank {len(declared)}")
        for i, (d, value) in enumerate(zip(declared or [], dims)):
            if d.HasField("dim_value") and d.dim_value != value:
                raise InputError(f"--input-shape {name}: dimension {i} is {d.dim_value} in "
                                 f"the model, {value} given")
            if d.dim_param:
                if fix.get(d.dim_param, value) != value:
                    raise InputError(f"--input-shape {name}: dimension {i} ({d.dim_param}) "
                                     f"is given {value} and {fix[d.dim_param]}")
                fix[d.dim_param] = value
    known = {d.dim_param for tp in _tensor_types(model) for d in tp.tensor_type.shape.dim
             if d.dim_param}
    unknown = sorted(set(fix_dims or {}) - known)
    if unknown:
        raise InputError(f"--fix-dim {', '.join(unknown)}: the model declares no dimension of "
                         f"that name (its symbolic dimensions: "
                         f"{', '.join(sorted(known)) or 'none'})")
    if not fix and not shapes:
        return model, []
    out = ModelProto()
    out.CopyFrom(model)
    for tp in _tensor_types(out):
        for d in tp.tensor_type.shape.dim:
            if d.dim_param in fix:
                d.dim_value = fix[d.dim_param]  # (clears dim_param: a oneof)
    for value in out.graph.input:
        dims = shapes.get(value.name)
        if dims is None:
            continue
        shape = value.type.tensor_type.shape
        if not value.type.tensor_type.HasField("shape"):
            for d in dims:
                shape.dim.add().dim_value = d
        else:
            for d, v in zip(shape.dim, dims):
                d.dim_value = v
        said.append(f"input {value.name!r} given the static shape {dims} (--input-shape)")
    given = set(fix_dims or {})
    said += [f"symbolic dimension {name!r} fixed to {value} everywhere "
             + ("(--fix-dim)" if name in given else "(from --input-shape)")
             for name, value in sorted(fix.items()) if name in known]
    return out, said
