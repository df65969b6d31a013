"""Running a compiled OpenVINO model: feeds and outputs by the model's names
(:func:`run_function`), values converted to and from OpenVINO's tensors (bfloat16, float8,
4-bit, strings), and the confirming child (:func:`confirm_child`), which names the node of
the model an error about one of OpenVINO's own operations lies in (:func:`lying_in`)."""

from __future__ import annotations

import pickle
import re
import sys

from rewriter.plugin import child_says, probe_models, run_sets

from .runtime import clean_message, compiled_by_routes


def io_names(model) -> tuple[list[str], list[str]]:
    """The names of the inputs a caller feeds (not those with an initializer) and of the
    outputs."""
    initializers = {t.name for t in model.graph.initializer}
    return ([i.name for i in model.graph.input if i.name not in initializers],
            [o.name for o in model.graph.output])


def run_function(compiled, data, inputs: list[str], outputs: list[str]):
    """Run ``compiled`` (compiled from ``data``, whose graph has these input and output
    names; anything kept alive as long as the run function) on feeds by input name; outputs
    by name. RuntimeError with OpenVINO's message in one line."""
    # OpenVINO merges tensor names while optimizing (an input may also carry the name of
    # a node it optimized away): pick each port's name among the model's own.
    out_names = port_names(compiled.outputs, outputs)
    in_names = port_names(compiled.inputs, inputs)
    request = compiled.create_infer_request()
    keep_alive = (data, compiled)  # the compiled model reads constants from `data`

    in_types = [port.get_element_type() for port in compiled.inputs]
    out_types = [port.get_element_type() for port in compiled.outputs]

    def run(feeds):
        assert keep_alive
        missing = [name for name in in_names if name not in feeds]
        if missing:
            raise RuntimeError(f"no value given for input(s) {', '.join(missing)}")
        given = [to_openvino(feeds[name], t) for name, t in zip(in_names, in_types)]
        try:
            request.infer(given)
        except Exception as e:  # noqa: BLE001
            raise RuntimeError(f"OpenVINO failed running the model: "
                               f"{clean_message(str(e))}") from None
        return {name: from_openvino(request.get_output_tensor(i), out_types[i])
                for i, name in enumerate(out_names)}

    return run


def confirm_child() -> None:
    """The confirming child (``OpenVINOTarget.confirmation``): stdin a pickle of {"model":
    bytes, "path": the model as a file (None: not asked by path), "feeds": [input sets] or
    None, "device": str, "io": (input names, output names), "producers": {value: name of the
    node making it}}; reads and compiles the model by every route users take
    (:func:`compiled_by_routes`), then runs the one read by path on the input sets until
    one runs, reporting each stage with :func:`rewriter.plugin.child_says`. Its working
    directory is the model's folder (the bytes route's external data). It imports no onnx
    (a second saved per confirmation)."""
    job = pickle.load(sys.stdin.buffer)
    data = job["model"]
    compiled, refusal = compiled_by_routes(job["path"], data, job["device"])
    if refusal is not None:
        child_says("load", refusal)
        return
    child_says("loaded")
    if job["feeds"] is None:
        return
    chosen = compiled[0][1]
    error, values = run_sets(run_function(chosen, data, *job["io"]), job["feeds"])
    if error is None:
        child_says("ran")
        return
    error = error.removeprefix("OpenVINO failed running the model: ")
    error += lying_in(chosen, error, job["producers"])
    elsewhere = not values and probe_models.onnxruntime_runs(data, job["feeds"][0])
    child_says("run", error, "onnxruntime" if elsewhere else None, values)


def lying_in(compiled, error: str, producers: dict) -> str:
    """When OpenVINO's error names one of its own operations (made while converting or
    compiling a node, e.g. 'Reshape_4185'), which node of the model it lies in: the node
    whose output is the first of the model's values downstream of it, in the compiled
    model's graph; said as " (OpenVINO's 'Reshape_4185' lies inside node 'N': ...)"; "" when
    the error names a node of the model, or none is found."""
    from collections import deque

    m = re.search(r"node with name '([^']*)'", error)
    if not m or m.group(1) in producers or m.group(1) in producers.values():
        return ""
    ops = {op.get_friendly_name(): op for op in compiled.get_runtime_model().get_ordered_ops()}
    start = ops.get(m.group(1))
    queue, seen = deque([start] if start is not None else []), {m.group(1)}
    while queue:
        op = queue.popleft()
        info = op.get_rt_info()
        names = [op.get_friendly_name()]
        if "originalLayersNames" in info:
            names += str(info["originalLayersNames"].astype(str)).split(",")
        for name in names:
            value = name.split("/sink_port_")[0]  # a model output's Result
            if value in producers:
                node = producers[value]
                where = f"node '{node}'" if node else f"the node of output '{value}'"
                return (f" (OpenVINO's '{m.group(1)}' lies inside {where}: the first of the "
                        f"model's values it feeds is that node's output '{value}')")
        for output in op.outputs():
            for target in output.get_target_inputs():
                following = target.get_node()
                if following.get_friendly_name() not in seen:
                    seen.add(following.get_friendly_name())
                    queue.append(following)
    return ""


# OpenVINO element types numpy has no dtype for (its arrays show their raw bits, 4-bit
# types two to a byte, the first in the low nibble), and the ml_dtypes type of each
_RAW_TYPES = {"bf16": "bfloat16", "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2",
              "i4": "int4", "u4": "uint4", "f4e2m1": "float4_e2m1fn"}
_NIBBLE_TYPES = frozenset({"i4", "u4", "f4e2m1"})


def to_openvino(value, element_type):
    """A feed as OpenVINO takes it: numpy arrays as they are (0-d kept 0-d), object arrays
    of strings as numpy str arrays ("Unknown string kind" otherwise); bfloat16, float8 and
    4-bit arrays (ml_dtypes) copied bit for bit into a tensor of that type."""
    import numpy as np

    array = np.asarray(value, order="C")
    if array.dtype.kind == "O":  # strings as onnx and onnxruntime give them: OpenVINO takes
        return np.array([v.decode() if isinstance(v, bytes) else str(v)  # numpy's str
                         for v in array.reshape(-1)], dtype=str).reshape(array.shape)
    kind = element_type.to_string()
    if kind not in _RAW_TYPES or array.dtype.name != _RAW_TYPES[kind]:
        return array
    import openvino

    tensor = openvino.Tensor(element_type, openvino.Shape(list(array.shape)))
    raw = array.reshape(-1).view(np.uint8)
    if kind in _NIBBLE_TYPES:
        codes = raw & 0x0F
        if codes.size % 2:
            codes = np.append(codes, np.uint8(0))
        raw = codes[0::2] | (codes[1::2] << 4)
    tensor.data.reshape(-1).view(np.uint8)[:] = raw
    return tensor


def from_openvino(tensor, element_type):
    """An output tensor as a numpy array (strings as an object array, as onnxruntime gives
    them; bfloat16, float8 and 4-bit types as ml_dtypes arrays)."""
    import numpy as np

    kind = element_type.to_string()
    if kind == "string":  # .data of an empty string tensor crashes OpenVINO 2026.4 (SIGSEGV)
        return np.array(tensor.str_data, dtype=object).reshape(tuple(tensor.get_shape()))
    name = _RAW_TYPES.get(kind)
    if name is None:
        return np.array(tensor.data, copy=True)
    import ml_dtypes

    shape = tuple(tensor.get_shape())
    raw = np.array(tensor.data, copy=True).reshape(-1).view(np.uint8)
    if kind in _NIBBLE_TYPES:
        codes = np.empty(raw.size * 2, np.uint8)
        codes[0::2], codes[1::2] = raw & 0x0F, raw >> 4
        count = int(np.prod(shape)) if shape else 1
        raw = codes[:count]
    return raw.view(getattr(ml_dtypes, name)).reshape(shape)


def port_names(ports, wanted: list[str]) -> list[str]:
    """The model's name for each of OpenVINO's input or output ports, in port order."""
    out = []
    for i, port in enumerate(ports):
        names = port.get_names()
        match = [n for n in wanted if n in names]
        out.append(match[0] if match else wanted[i] if i < len(wanted) else port.get_any_name())
    return out
