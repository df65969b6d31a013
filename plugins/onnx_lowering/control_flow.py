"""Control flow and optional values, as ops the runtimes have:

* ``Scan`` (from opset 11): a ``Loop`` whose iteration gathers each scan input's slice
  (counting from the end for a reverse direction) and runs the body unchanged; stacked
  outputs are reversed and moved to their ``scan_output_axes`` afterwards (a non-zero
  output axis needs the body output's rank).
* ``OptionalHasElement()`` / ``OptionalHasElement("")`` (no input): ``false``; with a plain
  tensor input: ``true``. ``OptionalGetElement(tensor)``: the tensor.
"""

from __future__ import annotations

import numpy as np
from onnx import FunctionProto, TensorProto, helper

from rewriter.plugin import Declined, OpSample, declining
from rewriter.plugin import present as _present

from .common import (
    DOMAIN,
    Body,
    attributes_known,
    body_opset,
)

OPTIONAL_OPSETS = (15, None)
SCAN_OPSETS = (11, None)


# -- Optional ops on plain tensors or nothing -----------------------------------------------


def build_optional_has_element(ctx) -> FunctionProto | None:
    """No input: ``false``; a plain tensor input: ``true``."""
    node = ctx.node
    if len(node.output) != 1 or node.attribute:
        raise Declined("needs one output and no attributes")
    types = list(ctx.input_types or [])
    given = _present(node.input, 0)
    if given and not (types and types[0] and types[0].startswith("tensor(")):
        raise Declined("an optional or sequence value: its emptiness is not known here")
    b = Body(body_opset(ctx))
    y = b.const(np.array(given), np.bool_, hint="has_element")
    return b.function(DOMAIN, "optional_has_element", ["input"] if node.input else [], [y])


def build_optional_get_element(ctx) -> FunctionProto | None:
    """A plain tensor input: itself."""
    node = ctx.node
    types = list(ctx.input_types or [])
    if (len(node.input) != 1 or not _present(node.input, 0) or len(node.output) != 1
            or not (types and types[0] and types[0].startswith("tensor("))):
        raise Declined("needs a tensor input and one output")
    b = Body(body_opset(ctx))
    return b.function(DOMAIN, "optional_get_element", ["input"], [b.op("Identity", "input")])


# -- Scan as Loop ---------------------------------------------------------------------------


@declining
def build_scan(ctx) -> FunctionProto | None:
    """``Scan`` (9+) as a ``Loop``: each iteration gathers the scan inputs' slices (from the
    end for a reverse direction) and runs the body unchanged; the stacked outputs are
    reversed and moved to their axis afterwards. The body may read outer values (the
    inliner leaves those names alone)."""
    node = ctx.node
    body = ctx.attribute("body")
    scan_inputs = ctx.attribute("num_scan_inputs")
    known = ["body", "num_scan_inputs", "scan_input_axes", "scan_input_directions",
             "scan_output_axes", "scan_output_directions"]
    if body is None or not scan_inputs or not attributes_known(node, known):
        raise Declined("needs a body, num_scan_inputs and known attributes")
    states = len(node.input) - scan_inputs
    scan_outputs = len(body.output) - states
    if (states < 0 or len(body.input) != len(node.input) or scan_outputs < 0
            or not all(node.input) or len(node.output) > states + scan_outputs):
        raise Declined("the node's inputs and outputs do not fit its body's")
    in_axes = list(ctx.attribute("scan_input_axes", [0] * scan_inputs))
    in_dirs = list(ctx.attribute("scan_input_directions", [0] * scan_inputs))
    out_axes = list(ctx.attribute("scan_output_axes", [0] * scan_outputs))
    out_dirs = list(ctx.attribute("scan_output_directions", [0] * scan_outputs))
    out_ranks = []
    for k, axis in enumerate(out_axes):
        rank = None
        value = body.output[states + k]
        if value.type.tensor_type.HasField("shape"):
            rank = len(value.type.tensor_type.shape.dim) + 1
        if axis != 0 and (rank is None or not -rank <= axis < rank):
            raise Declined("moving the stacked axis needs the element's rank")
        out_ranks.append(rank)
    b = Body(body_opset(ctx))
    formals = [f"s{i}" for i in range(states)] + [f"x{j}" for j in range(scan_inputs)]
    one = b.const(np.array(1, np.int64))
    steps = b.op("Gather", b.op("Shape", formals[states]),
                 b.const(np.array(in_axes[0], np.int64)), axis=0)
    loop = b.child()
    step, cond = loop.fresh("t"), loop.fresh("cond")
    last = loop.op("Sub", steps, one)
    for j in range(scan_inputs):
        index = step if in_dirs[j] == 0 else loop.op("Sub", last, step)
        loop.op("Gather", formals[states + j], index, axis=in_axes[j],
                outputs=[body.input[states + j].name])
    loop.nodes.extend(body.node)
    cond_out = loop.op("Identity", cond)
    graph = helper.make_graph(
        loop.nodes, b.fresh("scan_step"),
        [helper.make_tensor_value_info(step, TensorProto.INT64, []),
         helper.make_tensor_value_info(cond, TensorProto.BOOL, []),
         *body.input[:states]],
        [helper.make_tensor_value_info(cond_out, TensorProto.BOOL, []), *body.output],
        initializer=list(body.initializer))
    # (an explicit condition: the reference evaluator runs no trip when it is omitted)
    results = b.op("Loop", steps, b.const(np.array(True), TensorProto.BOOL), *formals[:states],
                   outputs=states + scan_outputs, body=graph)
    results = [results] if isinstance(results, str) else list(results)
    for k in range(scan_outputs):
        y = results[states + k]
        if out_dirs[k]:
            y = b.op("Gather", y, b.op("Range", b.op("Sub", steps, one),
                                       b.const(np.array(-1, np.int64)),
                                       b.const(np.array(-1, np.int64))), axis=0)
        axis = out_axes[k] % out_ranks[k] if out_axes[k] else 0
        if axis:
            perm = list(range(1, out_ranks[k]))
            perm.insert(axis, 0)
            y = b.op("Transpose", y, perm=perm)
        results[states + k] = y
    return b.function(DOMAIN, "scan", formals, results[:len(node.output)])


def _scan_body(outer: bool = False):
    """state (2) + slice (2) -> new state, and the slice times the new state (an outer
    value ``w`` scaled in when ``outer``)."""
    f = TensorProto.FLOAT
    nodes = [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
             helper.make_node("Mul", ["x_t", "s_out"], ["y_t"])]
    if outer:
        nodes[1] = helper.make_node("Mul", ["x_t", "w"], ["y_t"])
    return helper.make_graph(nodes, "scan_body",
                             [helper.make_tensor_value_info("s_in", f, [2]),
                              helper.make_tensor_value_info("x_t", f, [2])],
                             [helper.make_tensor_value_info("s_out", f, [2]),
                              helper.make_tensor_value_info("y_t", f, [2])])


def samples() -> dict[str, list[OpSample]]:
    """The samples of this module's ops, by op type."""
    return {
        "OptionalHasElement": [OpSample(["T[2,3]"], ["bool"], opset=18, name="tensor",
                                        dtypes=["float"]),
                               OpSample([], ["bool"], opset=18, name="no-input")],
        "OptionalGetElement": [OpSample(["T[2,3]"], opset=18, name="tensor",
                                        dtypes=["float", "int64"])],
        "Scan": [
            OpSample(["T[2]", "T[5,2]"], ["T", "T"], {"body": _scan_body(),
                                                     "num_scan_inputs": 1}, opset=11,
                     name="forward"),
            OpSample(["T[2]", "T[2,4]"], ["T", "T"], {
                "body": _scan_body(), "num_scan_inputs": 1, "scan_input_axes": [1],
                "scan_input_directions": [1], "scan_output_axes": [-1],
                "scan_output_directions": [1]}, opset=16, name="reverse-axes",
                     oracle="onnxruntime")],  # (the reference evaluator scans forward only)
    }
