"""tract itself: loading (by path as users do, or from bytes), typing and optimizing a model
(:func:`runnable`, :func:`runnable_by_routes`), its errors in one line (:func:`clean_message`,
:func:`named`), and the confirming child (:func:`confirm_child`)."""

from __future__ import annotations

import pickle
import re
from functools import cache

from rewriter.plugin import TargetError, child_says, probe_models, run_sets

NOT_INSTALLED = "tract is not installed: pip install 'onnx-graph-rewriter[tract]'"
# tract's datum type names for numpy's dtypes (input facts set from feeds)
FACT_TYPES = {"float32": "f32", "float64": "f64", "float16": "f16", "int8": "i8",
              "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8", "uint16": "u16",
              "uint32": "u32", "uint64": "u64", "bool": "bool"}


@cache
def tract_runtime():
    try:
        import tract
    except ImportError:
        raise TargetError(NOT_INSTALLED) from None
    return tract


def version() -> str:
    return tract_runtime().version()


def clean_message(text: str) -> str:
    """tract's error (a chain of causes, then a stack backtrace) as one line."""
    text = text.split("Stack backtrace:")[0]
    parts = [re.sub(r"^\d+: ", "", line.strip()) for line in text.splitlines()]
    parts = [p for p in parts if p and p != "Caused by:"]
    return ": ".join(dict.fromkeys(parts)) or "tract failed"


def load(model_bytes: bytes):
    """tract's ONNX loader on serialized bytes: an ``InferenceModel``."""
    import ctypes

    tract = tract_runtime()
    from tract.bindings import check, lib
    from tract.inference_model import InferenceModel

    onnx = tract.onnx()
    ptr = ctypes.c_void_p()
    check(lib.tract_onnx_load_buffer(onnx.ptr, model_bytes, ctypes.c_size_t(len(model_bytes)),
                                     ctypes.byref(ptr)))
    return InferenceModel(ptr)


def runnable(model_bytes: bytes | None, feeds=None, *, path: str | None = None):
    """Load (from ``path`` as users do, ``tract.onnx().load(path)``, else from the bytes),
    type and optimize (tract's CPU runtime); with ``feeds``, each input's fact is set from
    its value's shape and type first. Raises tract's error, said by stage: "load: ...",
    "typing: ...", "optimizing: ..."."""
    stage = "load"
    try:
        model = tract_runtime().onnx().load(path) if path is not None else load(model_bytes)
        stage = "typing"
        if feeds is not None:
            for i in range(model.input_count()):
                value = feeds.get(model.input_name(i))
                kind = None if value is None else FACT_TYPES.get(value.dtype.name)
                if kind is not None:
                    model.set_input_fact(i, ",".join([*map(str, value.shape), kind]))
        typed = model.into_model()
        stage = "optimizing"
        return typed.into_runnable()
    except Exception as e:  # noqa: BLE001 - tract's TractError, said with its stage
        raise RuntimeError(f"{stage}: {clean_message(str(e))}") from None


# A whole model is asked by path as users load it (tract.onnx().load(path)) and from bytes
# (tract_onnx_load_buffer); the stricter answer wins, and a refusal by one says so.
BY_PATH = "tract.onnx().load(path)"
BY_BYTES = "tract's loader on bytes"


def runnable_by_routes(path: str | None, data: bytes, feeds=None):
    """(the runnable read by path, else from bytes; None and the refusal, with the route
    that refused, when either route refuses: "typing: ... [refused by tract.onnx().load(path);
    tract's loader on bytes loads it]")."""
    chosen, refusals, ok = None, [], []
    for route in (BY_PATH, BY_BYTES):
        if route == BY_PATH and path is None:
            continue
        try:
            model = runnable(data, feeds, path=path if route == BY_PATH else None)
        except RuntimeError as e:
            refusals.append((route, str(e)))
            continue
        ok.append(route)
        chosen = chosen or model
    if not refusals:
        return chosen, None
    route, message = refusals[0]
    said = ", ".join(r for r, _ in refusals)
    return None, message + (f" [refused by {said}; {ok[0]} loads it]" if ok else "")


def named(message: str, producers: dict[str, str]) -> str:
    """tract names a node by its name (an unnamed node by its first output): say it the way
    rewriter.detect.targets.refused_node reads ("node with name 'N'", "the node of output
    'y'"): "node #37 "N" Pad", "Evaluating #2 "y" Dropout"."""
    m = re.search(r'#\d+ "([^"]*)"', message)
    if not m:
        return message
    name = m.group(1)
    if name in producers.values() and name:
        return f"{message} (node with name '{name}')"
    if name in producers:
        return f"{message} (the node of output '{name}')"
    return message


def confirm_child() -> None:
    """The confirming child (``TractTarget.confirmation``): stdin a pickle of {"model":
    bytes, "path": the model as a file (None: not asked by path), "feeds": [input sets] or
    None, "producers": {value: node name}}; loads, types and optimizes by path and from
    bytes (:func:`runnable_by_routes`), then runs the input sets until one runs."""
    import sys

    job = pickle.load(sys.stdin.buffer)
    data, sets, path = job["model"], job["feeds"], job["path"]
    model, refusal = runnable_by_routes(path, data, sets[0] if sets else None)
    if refusal is not None:
        child_says("load", named(refusal, job["producers"]))
        return
    child_says("loaded")
    if sets is None:
        return
    loaded = tract_runtime().onnx().load(path) if path is not None else load(data)
    names = [loaded.input_name(i) for i in range(loaded.input_count())]

    def run(feeds):
        try:
            model.run([feeds[n] for n in names])
        except Exception as e:  # noqa: BLE001
            raise RuntimeError(clean_message(str(e))) from None

    error, values = run_sets(run, sets)
    if error is None:
        child_says("ran")
        return
    elsewhere = not values and probe_models.onnxruntime_runs(data, sets[0])
    child_says("run", named(error, job["producers"]), "onnxruntime" if elsewhere else None,
               values)
