"""Verify the structure of a rewritten model: onnx's full checker and strict, type-checking
shape inference (on the whole model, or, for big rewrites, on each rewritten region)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Collection, Iterator, Mapping, Sequence

from onnx import ModelProto

from rewriter.apply.splice import Region
from rewriter.graph.walk import normalize_domain


@contextlib.contextmanager
def _checkable(model: ModelProto | bytes, base_dir, locations: Collection[str] | None = None,
               ) -> Iterator[ModelProto | bytes | str]:
    """What to give onnx's checker for ``model``: the model itself, or, when it has external
    data, the path of a copy in a temporary folder beside empty stand-ins for its data files.
    onnx's checker resolves the locations of an in-memory model against the current
    directory and of a file against the file's folder; the data itself has been validated
    on load (:func:`rewriter.io.model.validate_external_data`) and is never read here. No
    process-wide state (the working directory) is touched. ``locations``: the data files
    the model's tensors name, when known (those of the loaded model: a rewrite adds none);
    else every tensor is read for them (``model`` serialized: they must be given)."""
    if base_dir is None:
        yield model
        return
    if locations is None and isinstance(model, bytes):
        raise ValueError("the data files of a serialized model must be given")
    if locations is None:
        from rewriter.graph.walk import iter_tensors
        from rewriter.io.model import external_data_fields, uses_external_data

        locations = {external_data_fields(t).get("location", "")
                     for _, t in iter_tensors(model) if uses_external_data(t)}
    locations = set(locations)
    if base_dir is None or not locations:
        yield model
        return
    from rewriter.io.output import named_errors

    with named_errors(tempfile.gettempdir(), "writing the checker's copy of the model in"):
        holder = tempfile.TemporaryDirectory(prefix="onnx-rewriter-check-")
    with holder as folder:
        with named_errors(folder, "writing the checker's copy of the model in"):
            path = _stand_ins(model, folder, base_dir, locations)
        yield path


def _stand_ins(model: ModelProto | bytes, folder: str, base_dir, locations: set[str]) -> str:
    """``model`` written to ``folder`` beside empty stand-ins of its data files; its path."""
    for location in locations:
        if not location or os.path.isabs(location) or ".." in location.replace(
                "\\", "/").split("/"):
            continue  # left missing: the checker says why
        real = os.path.join(base_dir, location)
        if not os.path.isfile(real):
            continue
        stand_in = os.path.join(folder, location)
        os.makedirs(os.path.dirname(stand_in), exist_ok=True)
        with open(stand_in, "wb") as f:
            try:
                f.truncate(os.path.getsize(real))  # sparse: no bytes written
            except OSError:  # past a file-size limit (EFBIG): onnx's checker does not
                pass  # read the data, an empty stand-in does as well
    path = os.path.join(folder, "model.onnx")
    with open(path, "wb") as f:
        f.write(model if isinstance(model, bytes) else model.SerializeToString())
    return path


def verify(model: ModelProto, original: ModelProto, base_dir=None,
           locations: Collection[str] | None = None) -> dict[str, str]:
    """The full checker and strict, type-checking shape inference; a failure the original
    shares is noted as pre-existing rather than blamed on the rewrite.

    ``check_model(full_check=True)`` runs both in one call (its shape inference is strict and
    checks types), so that is all the happy path costs. ``base_dir``: the folder external
    data is relative to; ``locations``: the data files the model names (see _checkable).
    """
    import onnx

    def first_line(e: Exception) -> str:
        return (str(e).strip().splitlines() or [type(e).__name__])[0]

    def run(m: ModelProto) -> dict[str, str]:
        # checked as it is written: with the domain imports the save adds (undone after)
        from rewriter.io.model import add_imports, missing_imports

        added = add_imports(m, missing_imports(m))
        try:
            with _checkable(m, base_dir, locations) as checkable:
                return check(checkable)
        finally:
            for field_, entry in added:
                field_.remove(entry)

    errors: dict[int, dict[str, list[str]]] = {}  # id(result) -> check -> onnx's error lines

    def check(m: ModelProto | str) -> dict[str, str]:
        try:
            onnx.checker.check_model(m, full_check=True)
            return {"checker": "ok", "shape_inference": "ok"}
        except Exception as full:  # noqa: BLE001 - onnx raises several kinds
            try:
                onnx.checker.check_model(m, full_check=False)
            except Exception as basic:  # noqa: BLE001
                result = {"checker": first_line(basic), "shape_inference": "skipped: the "
                          "checker failed"}
                errors[id(result)] = {"checker": _error_lines(basic)}
                return result
            result = {"checker": "ok", "shape_inference": first_line(full)}
            errors[id(result)] = {"shape_inference": _error_lines(full)}
            return result

    results = run(model)
    if any(v != "ok" for v in results.values()):
        now = errors.get(id(results), {})
        before = run(original)
        was = errors.get(id(before), {})
        for name, verdict in results.items():
            if verdict == "ok" or verdict.startswith("skipped") or before[name] == "ok":
                continue
            # pre-existing only when every error is one the original has (the same node,
            # the same words): a new one is the rewrite's, and fails it
            new = [line for line in now.get(name, [verdict]) if line not in
                   set(was.get(name, [before[name]]))]
            results[name] = (f"pre-existing: the original fails too: {verdict}" if not new
                             else f"{new[0]} (new: the original fails otherwise)")
    return results


def _error_lines(error: Exception) -> list[str]:
    """onnx's error as its lines, one per node for inference's "Inference error(s): ..."."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return lines or [type(error).__name__]

def verify_regions(
    model: ModelProto | bytes, original: ModelProto, regions: Mapping[str, Region],
    declared: Mapping, conflicts: Sequence[str] = (), base_dir=None,
    types: Mapping[str, str] | None = None, locations: Collection[str] | None = None,
    ir_version: int | None = None, spliced: bool = False, original_verdict: str | None = None,
) -> tuple[dict[str, str], str]:
    """Verification of a big rewrite without a whole-model full check: the non-full checker
    on the whole model, and the full checker (strict, type-checking shape inference) on
    each rewritten region alone (:func:`region_problem`; ``types``: the main graph's value
    types after the rewrite, for calls whose input types planning did not know).
    ``conflicts`` (from the target re-check: types that changed or disagree) fail it too.
    ``locations``: the data files the model names (see _checkable). ``model`` may be its
    serialized bytes (the caller has freed the model meanwhile), with its ``ir_version``.

    ``spliced``: ``model`` is ``original`` with each replaced node's place taken by its
    remedy function's nodes, encoded from the function's own bytes with the call's values
    and names no graph uses, every other node kept byte for byte (one round of the
    protobuf splice, :func:`rewriter.apply.splice.splice_into_new`). The non-full checker
    then runs on ``original``, which holds every kept node and the graph's structure, the
    functions being fully checked alone; the result itself only when the original fails,
    to tell a pre-existing failure from one the rewrite made or fixed; its verdict may be
    given (``original_verdict``, :func:`non_full_check`): onnx's checker keeps its own copy
    of the model it checks, smaller before the splice than beside its result. Returns the
    verdicts and what they covered."""
    def basic(m: ModelProto | bytes) -> str:
        return non_full_check(m, base_dir, locations)

    checked = untyped = 0
    problems: list[str] = []
    for region in regions.values():
        problem = region_problem(region, declared,
                                 model.ir_version if ir_version is None else ir_version,
                                 types or {})
        if problem is _UNTYPED:
            untyped += 1
            continue
        checked += 1
        if problem:
            problems.append(f"remedy for {region.finding.op_label} "
                            f"({region.function.name}): {problem}")
    problems.extend(conflicts)
    if spliced:
        results = {"checker": original_verdict or basic(original)}
        if results["checker"] != "ok":
            result = basic(model)
            if result != "ok":
                results["checker"] = f"pre-existing: the original fails too: {result}"
            else:
                results["checker"] = result
    else:
        results = {"checker": basic(model)}
        if results["checker"] != "ok" and basic(original) != "ok":
            results["checker"] = f"pre-existing: the original fails too: {results['checker']}"
    results["shape_inference"] = problems[0] if problems else "ok"
    scope = (f"rewritten regions: {checked} remedy function(s) checked alone"
             + (f", {untyped} not checkable alone (an input of unknown type, or "
                "ai.onnx opset < 11)" if untyped else "")
             + ("; whole model: non-full checker on the input, whose nodes the splice kept "
                "byte for byte around the functions' nodes" if spliced
                else "; whole model: non-full checker"))
    return results, scope

def non_full_check(model: ModelProto | bytes, base_dir=None,
                   locations: Collection[str] | None = None) -> str:
    """onnx's checker without shape inference on ``model``: "ok", or the first line of its
    error (``base_dir`` and ``locations`` as for :func:`_checkable`)."""
    import onnx

    with _checkable(model, base_dir, locations) as checkable:
        try:
            onnx.checker.check_model(checkable, full_check=False)
        except Exception as e:  # noqa: BLE001 - onnx raises several kinds
            return (str(e).strip().splitlines() or [type(e).__name__])[0]
    return "ok"


_UNTYPED = "untyped"

def region_problem(region: Region, declared: Mapping, ir_version: int,
                   types: Mapping[str, str] | None = None) -> str | None:
    """The full checker on one remedy function spliced into a wrapper model alone: its
    inputs typed as at the call (declared type and shape where the model states them, else
    the element type at unknown rank), its outputs held to their declared types. The
    first line of the checker's error, None if it passes, or ``_UNTYPED`` when an input's
    type is unknown (the region cannot be checked alone)."""
    import onnx
    from onnx import TensorProto, helper, inliner

    from rewriter.graph.typeinfer import type_string

    f, call, fn = region.finding, region.call, region.function
    opsets = {normalize_domain(k): v for k, v in (f.scope_opsets or {}).items()}
    if opsets.get("", 1) < 11:  # the wrapper's Reshape/SequenceConstruct
        return _UNTYPED
    nodes, inputs, outputs = [], [], []
    for name, t in zip(call.input, f.input_types):
        if not name or any(v.name == name for v in inputs):
            continue
        t = t or (types or {}).get(name)
        proto = declared.get(name)
        if proto is not None and proto.tensor_type.HasField("shape"):
            inputs.append(helper.make_value_info(name, proto))
            continue
        elem = _elem_type(t or (type_string(proto) if proto is not None else None))
        if elem is None:
            return _UNTYPED
        inputs += [helper.make_tensor_value_info(f"{name}.data", elem, ["n"]),
                   helper.make_tensor_value_info(f"{name}.shape", TensorProto.INT64, ["r"])]
        nodes.append(helper.make_node("Reshape", [f"{name}.data", f"{name}.shape"], [name]))
    nodes.append(call)
    for name in call.output:
        proto = declared.get(name) if name else None
        if proto is None:
            continue
        if proto.tensor_type.HasField("shape"):
            outputs.append(helper.make_value_info(name, proto))
            continue
        elem = _elem_type(type_string(proto))
        if elem is not None:  # same element type as the declaration, at any shape
            inputs.append(helper.make_tensor_value_info(f"{name}.declared", elem, ["n"]))
            nodes.append(helper.make_node("SequenceConstruct", [name, f"{name}.declared"],
                                          [f"{name}.same"]))
    wrapper = helper.make_model(
        helper.make_graph(nodes, "region", inputs, outputs),
        opset_imports=[helper.make_opsetid(d, v) for d, v in sorted(opsets.items())]
        + [helper.make_opsetid(fn.domain, 1)],
        ir_version=max(ir_version, 8),
    )
    wrapper.functions.append(fn)
    try:
        spliced = inliner.inline_selected_functions(wrapper, [(fn.domain, fn.name)], False)
        del spliced.functions[:]
        onnx.checker.check_model(spliced, full_check=True)
    except Exception as e:  # noqa: BLE001 - onnx raises several kinds
        return (str(e).strip().splitlines() or [type(e).__name__])[0]
    return None

def _elem_type(type_str: str | None) -> int | None:
    from onnx import TensorProto

    if not type_str or not type_str.startswith("tensor(") or not type_str.endswith(")"):
        return None
    try:
        return TensorProto.DataType.Value(type_str[7:-1].upper())
    except ValueError:
        return None
