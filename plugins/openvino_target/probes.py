"""OpenVINO's answer on a one-node probe model (:func:`probe`: read by path and from bytes,
converted, compiled), and the node forms a probe cannot decide (a decomposition body's node
whose axes or weights the caller feeds, a ``Split`` of computed sizes), a refusal that names
an If/Loop/Scan body's node, a graph input or output OpenVINO cannot take."""

from __future__ import annotations

import io
import re

from rewriter.plugin import Finding, NodeQuery, probe_models

from .runtime import (
    BY_BYTES,
    BY_PATH,
    CONFIG,
    clean_message,
    is_type_problem,
    no_rule_ops,
    openvino_runtime,
)


def probe(model_bytes: bytes, device: str, op_label: str, *, unknown_ranks: bool = False):
    """What OpenVINO says about a small model: None if it converts and compiles for
    ``device``; else (reason, detail). The model is read by path (written to a private
    temporary file: OpenVINO's file decoder, ``Core.read_model``'s) and from bytes, and
    a refusal by either is the answer; the path route's conversion is compiled. When
    compiling fails, ``Core.query_model`` names the operations the device does not support.
    ``unknown_ranks``: some tensor input's rank is not known to us, so a model that converts
    but has inputs of dynamic rank (which the CPU plugin never compiles) is not compiled:
    conversion decides."""
    _, core, frontend = openvino_runtime()
    with probe_models.written(model_bytes) as path:
        verdict, ov_model = _converted(frontend, (path, model_bytes), op_label, BY_PATH)
        if verdict is None:  # the bytes route: stricter wins
            verdict, _ = _converted(frontend, io.BytesIO(model_bytes), op_label, BY_BYTES)
        if verdict is not None:
            return verdict
        if unknown_ranks and _has_dynamic_rank(ov_model):
            return None  # the CPU plugin compiles no input of unknown rank: conversion decides
        return _compiles(core, ov_model, device)


def _compiles(core, ov_model, device: str):
    """None when ``device`` compiles ``ov_model``; else (reason, detail), naming the
    operations ``Core.query_model`` says the device does not support."""
    try:
        core.compile_model(ov_model, device, CONFIG)
    except Exception as e:  # noqa: BLE001
        message = clean_message(str(e))
    else:
        return None
    try:
        supported = core.query_model(ov_model, device, CONFIG)
    except Exception:  # noqa: BLE001 - the compile error says enough
        supported = None
    if supported is not None:
        missing = sorted({op.get_type_name() for op in ov_model.get_ordered_ops()
                          if op.get_friendly_name() not in supported})
        if missing:
            return ("no-kernel", f"OpenVINO's {device} device does not support the "
                    f"operation(s) {', '.join(missing)} it converts to ({message})")
    reason = "type-binding" if is_type_problem(message) else "runtime-refused"
    return (reason, f"OpenVINO's {device} plugin cannot compile it: {message}")


def _converted(frontend, source, op_label: str, route: str):
    """(None, openvino.Model) when OpenVINO's ONNX frontend loads and converts ``source`` (a
    path or a stream), else ((reason, detail), None); a refusal from bytes says so (the
    file route converts the same model)."""
    said = "" if route == BY_PATH else " (from bytes, FrontEnd.load(stream); read from a file " \
        "it converts)"
    if route == BY_PATH and isinstance(source, tuple):  # (path, bytes): say so when the
        source, data = source  # bytes route converts what the file route refuses
        verdict, model = _converted(frontend, source, op_label, route)
        if verdict is not None and _converted(frontend, io.BytesIO(data), op_label,
                                              BY_BYTES)[0] is None:
            verdict = (verdict[0], verdict[1] + " (read from a file, as Core.read_model(path) "
                       "reads it; from bytes it converts)")
        return verdict, model
    try:
        input_model = frontend.load(source)
    except Exception as e:  # noqa: BLE001 - OpenVINO's refusal is the answer
        return ("invalid-node", f"OpenVINO's ONNX frontend cannot load it{said}: "
                f"{clean_message(str(e))}"), None
    try:
        return None, frontend.convert(input_model)
    except Exception as e:  # noqa: BLE001
        text = str(e)
        missing = no_rule_ops(text)
        if missing:
            return ("no-kernel", f"OpenVINO's ONNX frontend has no conversion rule for "
                    f"{op_label} (it lists {', '.join(missing)}){said}"), None
        message = clean_message(text)
        reason = "type-binding" if is_type_problem(message) else "runtime-refused"
        return (reason, f"OpenVINO's ONNX frontend cannot convert it{said}: {message}"), None


def _has_dynamic_rank(ov_model) -> bool:
    return any(p.get_partial_shape().rank.is_dynamic or p.get_element_type().is_dynamic()
               for p in ov_model.get_parameters())


_REDUCE_OPS = frozenset({"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                         "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                         "ReduceSumSquare"})


def rank_follows_fed_axes(query: NodeQuery) -> bool:
    """A reduction in a decomposition body whose ``axes`` the model's caller feeds (the
    planner says which; the probe, given no shapes there, would guess its way past it), with
    ``keepdims = 0``: OpenVINO converts it to an operation of dynamic rank, which its CPU
    plugin refuses ("ReduceSum operation with dynamic rank")."""
    node = query.node
    if query.domain or node.op_type not in _REDUCE_OPS or len(query.inputs) < 2:
        return False
    keepdims = next((a.i for a in node.attribute if a.name == "keepdims"), 1)
    return keepdims == 0 and bool(query.inputs[1]) and query.inputs[1] in query.caller_fed


def has_dynamic_input(model) -> bool:
    """Whether some input of ``model`` (not an initializer) has a shape not fully static."""
    initializers = {t.name for t in model.graph.initializer}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        shape = probe_models.shape_key(value.type)
        if shape is None or not all(isinstance(d, int) for d in shape):
            return True
    return False


def weights_follow_fed_values(query: NodeQuery) -> bool:
    """A convolution in a decomposition body whose weights the model's caller feeds (the
    planner says which; the probe, given no shapes there, would give it the benefit of the
    doubt), asked about for a model with an input of a dynamic shape (the body does not say
    which input the weights come from): OpenVINO's CPU plugin convolves with no weights of
    a dynamic shape ("Doesn't support dynamic weights shape")."""
    node = query.node
    return (not query.domain and node.op_type == "Conv"
            and len(query.inputs) > 1 and bool(query.inputs[1])
            and query.inputs[1] in query.caller_fed)


def split_sizes_proto(node, query: NodeQuery, name: str, proto):
    """A ``Split``'s computed ``split`` input of unknown length as what the spec makes it:
    one size per output (OpenVINO's frontend makes as many outputs as that length says, one
    when it is unknown: a decomposition body's ``Split`` of computed sizes converts in the
    whole model, where the length is known, but not in a probe that did not say it)."""
    from onnx import helper

    if (query.domain not in ("", "ai.onnx") or node.op_type != "Split"
            or len(node.input) < 2 or name != node.input[1] or proto is None
            or proto.WhichOneof("value") != "tensor_type"
            or probe_models.shape_key(proto) not in (None, (None,))):
        return proto
    return helper.make_tensor_type_proto(proto.tensor_type.elem_type, [len(query.outputs)])


def blames_subgraph(node, detail: str) -> bool:
    """Whether OpenVINO's refusal of a node with subgraphs names an operation or a node of
    those subgraphs (then the walk reports that node; the If/Loop/Scan itself is fine)."""
    from onnx import AttributeProto

    inner = []
    stack = [a.g for a in node.attribute if a.type == AttributeProto.GRAPH]
    stack += [g for a in node.attribute if a.type == AttributeProto.GRAPHS for g in a.graphs]
    while stack:
        graph = stack.pop()
        for n in graph.node:
            inner.append(n)
            stack += [a.g for a in n.attribute if a.type == AttributeProto.GRAPH]
    if not inner:
        return False
    ops = {n.op_type for n in inner} - {node.op_type}
    names = {x for n in inner for x in (n.name, *n.output) if x}
    quoted = set(re.findall(r"'([^']*)'", detail))
    mentioned = re.findall(r"no conversion rule for (?:[\w.]+::)?(\w+)", detail)
    return bool(quoted & names) or any(op in ops for op in mentioned) or any(
        re.search(rf"\b{re.escape(op)}\b", detail) for op in ops)


VALUE_INFO = re.compile(r"Unsupported value_info type: (\S+)")


def boundary_finding(target: str, model, message: str) -> Finding | None:
    """OpenVINO's refusal of a graph input or output that is not a tensor ("Unsupported
    value_info type: NAME": a map, a sequence, an optional) as a finding on the model naming
    the value and its type: no rewrite of the nodes changes the model's interface."""
    from rewriter.plugin import type_string

    named = VALUE_INFO.search(message)
    if named is None:
        return None
    for kind, values in (("input", model.graph.input), ("output", model.graph.output)):
        for v in values:
            if v.name == named.group(1) and v.type.WhichOneof("value") != "tensor_type":
                what = type_string(v.type) or v.type.WhichOneof("value") or "untyped"
                verb = "take" if kind == "input" else "return"
                return Finding(
                    target=target, path="model", domain="", op_type="", version=None,
                    reason="type-binding", value=v.name,
                    detail=f"{kind} {v.name!r} is {what}, not a tensor: OpenVINO cannot "
                    f"{verb} it (its ONNX frontend: Unsupported value_info type); "
                    + ("--adapt-interface rewrites ZipMap's sequence of maps to tensors"
                       if kind == "output" else "--adapt-interface adapts outputs only"))
    return None


def openvino_shapes(model) -> dict:
    """Value name -> dimensions (None where dynamic) as OpenVINO's partial conversion infers
    them: it knows the shapes of the contrib ops it converts, where onnx's inference stops.
    Empty when the model has external data or the partial conversion fails."""
    from rewriter.plugin import iter_tensors

    if any(probe_models.external(t) for _, t in iter_tensors(model)):
        return {}
    _, _, frontend = openvino_runtime()
    try:
        ov_model = frontend.convert_partially(frontend.load(io.BytesIO(model.SerializeToString())))
    except Exception:  # noqa: BLE001 - shapes are a help, not a requirement
        return {}
    out = {}
    for op in ov_model.get_ordered_ops():
        for port in op.outputs():
            shape = port.get_partial_shape()
            if shape.rank.is_dynamic:
                continue
            dims = [d.get_length() if d.is_static else None for d in shape]
            for name in port.get_names():
                out.setdefault(name, dims)
    return out

