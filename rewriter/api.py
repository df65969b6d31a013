"""Library entry points that tie plugins, I/O and detection together.

Each stage is logged through ``logging.getLogger("rewriter")`` (INFO: what each stage found
or chose; DEBUG: more); the library adds no handler (the CLI's ``-v``/``-q`` set one up)."""

from __future__ import annotations

import dataclasses
import gc
import logging
import os
import sys
import types
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from onnx import ModelProto

from rewriter import progress
from rewriter.detect.ranks import shape_warnings, without_contradicted_declarations
from rewriter.detect.targets import TargetOptions, resolve_targets
from rewriter.detect.walker import CheckReport, TargetResult, confirm_model, detect
from rewriter.errors import OutputError
from rewriter.io.model import LoadedModel, as_loaded
from rewriter.manager import Plugins, load_plugins
from rewriter.report.render import plan_key

if TYPE_CHECKING:
    from rewriter.engine import RewriteResult

ModelLike = str | os.PathLike | ModelProto | LoadedModel
TargetsLike = str | Sequence[str]
# plugin names, .py files, modules, a list of those, or loaded Plugins
PluginsLike = Plugins | str | os.PathLike | types.ModuleType | Sequence[Any] | None

log = logging.getLogger("rewriter")


def as_targets(targets: TargetsLike) -> list[str]:
    """``"onnxruntime"`` or ``["onnxruntime", "opset:13"]`` as a list of target names."""
    if isinstance(targets, (str, os.PathLike)):
        return [os.fspath(targets)]
    names = list(targets)
    wrong = [t for t in names if not isinstance(t, str)]
    if wrong:
        raise TypeError(f"targets: expected target names (str), got {wrong[0]!r}")
    return names


def _plugin_spec(item: Any) -> str:
    """One ``plugins=`` item as a ``-p`` value: a name or file as it is, a module by its
    importable name (else its file)."""
    if isinstance(item, (str, os.PathLike)):
        return os.fspath(item)
    if isinstance(item, types.ModuleType):
        name = item.__name__
        file = getattr(item, "__file__", None)
        if sys.modules.get(name) is item and not name.startswith("onnx_rewriter_local_"):
            return name
        if file:
            return file
        raise TypeError(f"plugins: module {name!r} has neither an importable name nor a file")
    raise TypeError(f"plugins: expected names, .py files, modules or a Plugins object, got "
                    f"{item!r}")


def as_plugins(plugins: PluginsLike) -> Plugins:
    """``plugins=`` of the API as loaded :class:`~rewriter.manager.Plugins`: None (the
    installed ones), a Plugins object, or names/files/modules (one or a list) loaded with the
    installed ones, as ``-p`` does."""
    if plugins is None:
        return load_plugins()
    if isinstance(plugins, Plugins):
        return plugins
    if isinstance(plugins, (str, os.PathLike, types.ModuleType)):
        plugins = [plugins]
    return load_plugins([_plugin_spec(p) for p in plugins])


def check(
    model: ModelLike,
    targets: TargetsLike = ("onnxruntime",),
    *,
    plugins: PluginsLike = None,
    confirm: bool | None = None,
    custom_op_libraries: Sequence[str] = (),
    report_details: bool = False,
    fix_dims: Mapping[str, int] | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    adapt_interface: bool = False,
) -> CheckReport:
    """List every node each target cannot run.

    Args:
        model: a path, a ``ModelProto``, an ``onnx_ir.Model`` or a
            :class:`~rewriter.io.LoadedModel`.
        targets: a target name or a list, e.g. ``"onnxruntime"``, ``["onnxruntime",
            "opset:13"]``.
        plugins: loaded plugins (default: :func:`rewriter.manager.load_plugins`), or plugin
            names, .py files or modules to load with the installed ones.
        confirm: where the static verdict says "runs", load the model in the runtime and
            run it once on generated inputs (in a child process; default: the target
            decides, e.g. onnxruntime and OpenVINO confirm models up to 100 MiB). A
            refusal at load or run time is a ``runtime-refused`` finding on the node the
            runtime names; a run that fails on the generated inputs' values (an index out
            of range) is not a refusal (``TargetResult.confirmation`` says so).
        custom_op_libraries: shared libraries of custom ops to register in onnxruntime
            (``"extensions"`` names onnxruntime-extensions).
        report_details: fill ``size`` (nodes, initializer and file bytes) for a report
            (``--json``, ``--report``); a walk over every graph and initializer.
        fix_dims, input_shapes: static shapes the model will run with (``--fix-dim``,
            ``--input-shape``: :func:`rewriter.io.shapes.static_shapes`), applied before
            detection so each target is asked about that model.
        adapt_interface: plan as ``rewrite(..., adapt_interface=True)`` does: a graph output
            a target cannot return that the flag adapts has that pass as its remedy.

    Each target's result carries ``plan``: for every finding (by path and op), the remedy
    ``rewrite`` would apply for that target alone ("decomposition RULE [PLUGIN]", "pass
    NAME [PLUGIN]", ...), or why none applies ("none: WHY").
    """
    plugins = as_plugins(plugins)
    if _is_onnx_ir_model(model):  # every model kind rewrite takes
        import onnx_ir

        model = onnx_ir.to_proto(model)
    # the cyclic collector is paused, as the engine pauses it (rewrite_proto): detection
    # makes a few tuples per node and a finding per refused node, none in a cycle; the
    # collector's passes over them were ~10% of check at 100k nodes and freed nothing
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _check(model, targets, plugins, confirm, custom_op_libraries, report_details,
                      fix_dims, input_shapes, adapt_interface)
    finally:
        if enabled:
            gc.enable()


def _check(model: ModelLike, targets: TargetsLike, plugins: Plugins, confirm: bool | None,
           custom_op_libraries: Sequence[str], report_details: bool,
           fix_dims=None, input_shapes=None, adapt_interface: bool = False) -> CheckReport:
    """:func:`check` with its plugins loaded."""
    with progress.stage("load", progress.loaded_name(model)):
        loaded = as_loaded(model, node_io=True)  # node names kept for each target's walk
    loaded, _ = with_static_shapes(loaded, fix_dims, input_shapes)
    options = TargetOptions(custom_op_libraries=tuple(custom_op_libraries), confirm=confirm)
    results = []
    warnings = shape_warnings(loaded.model)
    # findings and their remedies are judged as rewrite judges them: on the model without
    # the declared shapes onnx's inference contradicts (rewriter.engine); a runtime confirms
    # the model as given
    given = loaded
    repaired, _ = without_contradicted_declarations(loaded.model)
    if repaired is not loaded.model:
        loaded = dataclasses.replace(loaded, model=repaired)  # (the same nodes)
    for target in resolve_targets(plugins, as_targets(targets), options):
        wants = confirm if confirm is not None else target.wants_confirm(loaded)
        with progress.stage("detect", f"on {target.name}"):  # nodes kept for the plan
            # (a confirmation's refusal carries its node's input types: a walk types them)
            detection = detect(loaded.model, target, confirm=False, record=False,
                               main_io=loaded.main_io, inventory=not wants,
                               main_holders=loaded.main_holders)
        findings = detection.findings
        result = TargetResult(target.name, target.description, findings,
                              warnings=list(warnings))
        if not findings and wants:
            log.info("check %s: confirming on %s", loaded.path, target.name)
            with progress.stage("confirm", f"on {target.name}"):
                confirmation, refused = confirm_model(given.model, target, given.base_dir,
                                                      detection.main_types)
            result.confirmation = confirmation.describe()
            from rewriter.comparison.numbers import check_numbers, numbers_inputs

            inputs = numbers_inputs(given, confirmation) if not refused else None
            if inputs is not None and target.compares_numbers:
                with progress.stage("confirm", f"{target.name}'s numbers"):
                    numbers = check_numbers(given, target, plugins=plugins,
                                            types=detection.main_types,
                                            custom_op_libraries=custom_op_libraries,
                                            **inputs)
                refused = numbers.findings
                result.confirmation += f"; {numbers.note}" if numbers.note else ""
            result.confirmed = not refused
            result.findings = refused
        if result.findings:
            with progress.stage("plan", f"{len(result.findings)} findings"):
                result.plan = planned_remedies(loaded, target, plugins, result.findings,
                                               detection.declared,
                                               adapt_interface=adapt_interface)
        for f in result.findings:
            object.__setattr__(f, "node", None)  # do not keep the model alive through reports
        log.info("check %s on %s: %d finding(s)", loaded.path, target.name,
                 len(result.findings))
        results.append(result)
    from rewriter.report.size import input_file_bytes, model_size

    size = model_size(loaded.model, input_file_bytes(loaded)) if report_details else None
    return CheckReport(str(loaded.path), results, size)  # report size


def with_static_shapes(loaded: LoadedModel, fix_dims=None, input_shapes=None
                       ) -> tuple[LoadedModel, list[str]]:
    """``loaded`` with the static shapes asked for (its model a copy; the same LoadedModel
    when none are), and one sentence per change."""
    if not fix_dims and not input_shapes:
        return loaded, []
    from rewriter.io.shapes import static_shapes

    fixed, said = static_shapes(loaded.model, fix_dims, input_shapes)
    return dataclasses.replace(loaded, model=fixed), said


def finding_key(finding: Any) -> tuple[str, str]:
    """:func:`plan_key` of a finding."""
    return plan_key(finding.path, finding.op_type)


def planned_remedies(loaded: LoadedModel, target: Any, plugins: Plugins,
                     findings: Sequence[Any], declared: Mapping[str, Any] | None = None,
                     adapt_interface: bool = False) -> dict[tuple[str, str], str]:
    """What ``rewrite`` would apply to each finding for ``target`` alone (its planner, as in
    ``rewrite --dry-run --explain``): "KIND RULE [PLUGIN]", or "none: WHY". ``findings``
    from :func:`~rewriter.detect.walker.detect` (with their nodes) and its ``declared``
    are planned as they are; others are detected again."""
    from rewriter.engine import plan_for_check
    from rewriter.errors import RewriterError

    given = findings
    if declared is None:  # findings without their nodes: detect again
        detection = detect(loaded.model, target, confirm=False, record=False)
        findings, declared = detection.findings, detection.declared
    try:
        planned = plan_for_check(loaded.model, target, plugins, findings, declared,
                                 base_dir=None if loaded.folder else loaded.base_dir,  # in memory
                                 adapt_interface=adapt_interface)
    except RewriterError as e:  # the plan itself failed: say so on every finding
        return {finding_key(f): f"none: {e}" for f in findings}
    plan: dict[tuple[str, str], str] = {}
    for item in planned.explain:
        chosen = next((c for c in item["candidates"] if c["accepted"]), None)
        if chosen is not None:
            text = f"{chosen['kind']} {chosen['rule']} [{chosen['plugin']}]"
        else:
            # as rewrite says it (planner.why_not): the reason of a pass the finding is
            # about first; for the model itself, not another pass's boilerplate
            found = item["finding"]
            whys = ([c["why"] for c in item["candidates"] if c["why"] and c.get("relevant")]
                    or (["no plugin's remedy applies to the model as a whole (the finding "
                         "says why)"] if not found["op_type"] else [])
                    or [c["why"] for c in item["candidates"] if c["why"]])
            text = "none: " + (whys[0] if whys else "no plugin offers one")
        for path in item["paths"]:
            plan[plan_key(path, item["finding"]["op_type"])] = text
    if findings is not given:  # detected again: a runtime refusal is not in the plan
        for f in given:
            plan.setdefault(finding_key(f), "none: found by loading the model; rewrite "
                            "plans from the static findings")
    named = [v for v in plan.values() if not v.startswith("none: ")]
    # a decomposition or kernel is planned with its body built and checked; a pass (opset
    # conversion) is only asked whether it applies, and a finding downstream of an op no
    # schema types is decided once upstream remedies are spliced: the rewrite settles those
    # (only those: a plan of proven bodies next to findings nothing remedies stands)
    if named and (any(v.startswith("pass ") for v in named)
                  or planned.typed_later):
        plan = _settled(loaded, target, plugins, plan, adapt_interface)
    return plan


def _settled(loaded: LoadedModel, target: Any, plugins: Plugins,
             plan: dict[tuple[str, str], str], adapt_interface: bool = False
             ) -> dict[tuple[str, str], str]:
    """A plan where some findings have a remedy and some not, settled by the rewrite itself
    (``--partial``, in memory): a finding whose types are known only once the remedies
    upstream are spliced may be fixed after all, and a pass that needs the whole model
    (opset conversion) may not run while a finding stays."""
    from rewriter.engine import rewrite_proto
    from rewriter.errors import RewriterError

    try:
        _, report = rewrite_proto(loaded.model, [target], plugins, partial=True,
                                  model_name=str(loaded.path), base_dir=loaded.base_dir,
                                  adapt_interface=adapt_interface)
    except RewriterError:
        return plan
    left = {finding_key(f) for f in report.remaining}
    settled = dict(plan)
    for key, text in plan.items():
        if text.startswith("none: ") and key not in left:
            op_type = key[1]
            used = sorted({f"{kind} {rule} [{plugin}]"
                           for (kind, plugin, rule, op), n in report.applied.items()
                           if op.split("::")[-1].split("(")[0] == op_type})
            settled[key] = (used[0] if used else "pass (once the remedies upstream are "
                            "applied) [rewrite]")
        elif not text.startswith("none: ") and key in left:
            settled[key] = (f"none: {text} is offered, but the rewrite leaves this node "
                            "as it is")
    return settled


def rewrite(
    model: ModelLike | Any,
    targets: TargetsLike = ("onnxruntime",),
    *,
    output: str | os.PathLike | None = None,
    plugins: PluginsLike = None,
    partial: bool = False,
    dry_run: bool = False,
    explain: bool = False,
    in_place: bool = False,
    confirm: bool | None = None,
    custom_op_libraries: Sequence[str] = (),
    prefer: str = "decompose",
    verify: bool = True,
    compare_options: Mapping[str, Any] | None = None,
    allow_unverified: bool = False,
    keep_failed: bool = False,
    strip_provenance: bool = False,
    report_details: bool = False,
    fix_dims: Mapping[str, int] | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    cleanup: bool = True,
    adapt_interface: bool = False,
) -> RewriteResult:
    """Rewrite ``model`` until every target runs it; verify; save to ``output``.

    Args:
        model: a path, an ``onnx.ModelProto`` or an ``onnx_ir.Model``.
        targets: a target name or a list; the rewrite must satisfy all of them.
        plugins: as for :func:`check`.
        output: where to save (paths only; required for a path unless ``dry_run``).
        partial: rewrite what can be rewritten and report the rest instead of failing; what
            was changed is verified as a whole rewrite is.
        dry_run: plan only; change and write nothing.
        explain: record, for each finding, which plugins were asked and why each declined.
        in_place: allow ``output`` to be the input path.
        prefer: ``"decompose"`` (default; a decomposed model needs nothing at deployment)
            or ``"kernel"``: which remedy wins for an op that has both. A kernel remedy
            retargets the node and records in the model's metadata what it needs; run the
            result with :func:`rewriter.session`.
        verify: compare the result with the original (:func:`rewriter.compare`: the
            original on the first runtime that runs it, the result on every target). False:
            the verdict is ``unverified`` ("verification turned off") and the result is
            written and returned all the same.
        compare_options: keyword arguments for that comparison (``inputs``, ``expected``,
            ``runs``, ``seed``, ``dims``, ``atol``, ``rtol``, ``original_target``,
            ``reference_ops``, ``timeout``, ``memory_limit``, ``save_inputs``). Given
            inputs and expected outputs are checked against the model before any work.
        allow_unverified: write (and return) an ``unverified`` result too.
        keep_failed: write (and return) a result whose verdict is ``mismatch`` too.
        strip_provenance: leave out which plugin and rule made each node (the model's
            provenance table and the nodes' keys, :mod:`rewriter.apply.provenance`).
        report_details: fill the report's ``size`` (nodes, initializer and file bytes of
            the input and the result) and ``picture`` (one replaced node and the nodes that
            replaced it) for a report (``--json``, ``--report``); walks over both models.
        fix_dims, input_shapes: static shapes the model will run with (``--fix-dim``,
            ``--input-shape``), applied before detection; the result keeps them, the report
            names them (``repairs``) and the comparison runs at them.
        cleanup: tidy the result's graph once the remedies are in (constants folded, dead
            nodes removed, common subexpressions merged: :mod:`rewriter.apply.simplify`;
            the report's ``cleanup`` says what it did); verified with the rest.
        adapt_interface: rewrite a graph output a target cannot return to a tensor it can
            (``--adapt-interface``: ZipMap's sequence of maps to the float probabilities, a
            classifier's string labels to int64 indices), recording the labels and the
            original types in the model's metadata (:mod:`rewriter.io.interface`); the
            comparison converts the original's outputs through that record, and
            :func:`rewriter.session` gives the original interface back. Without it such an
            output is a finding with no remedy, naming the flag.

    Returns:
        the rewritten model in the kind it was given (for a path: the output path, None when
        nothing was written) and a :class:`~rewriter.engine.RewriteReport`, whose
        ``verdict`` is ``verified``, ``mismatch``, ``unverified`` or ``unchanged``
        (:mod:`rewriter.verify.verdicts`) and ``exit_code`` the CLI's. A result is written (and
        returned) when verified or unchanged, when ``verify`` is False, when unverified
        with ``allow_unverified``, or when mismatched with ``keep_failed``; otherwise the
        model returned for a ``ModelProto``/``onnx_ir.Model`` input is None.

    Raises:
        UnfixableError: a finding has no remedy (and not ``partial``); nothing was changed.
        InputError: given inputs or expected outputs do not fit the model (before any work).
    """
    from rewriter.engine import RewriteResult, rewrite_proto
    from rewriter.io.model import check_output_path, save_model
    from rewriter.verify.verdicts import MISMATCH, UNVERIFIED, VERIFIED

    plugins = as_plugins(plugins)
    targets = as_targets(targets)
    ir_model = None
    if _is_onnx_ir_model(model):
        import onnx_ir

        ir_model = model
        model = onnx_ir.to_proto(model)
    is_path = isinstance(model, (str, os.PathLike))
    if is_path and output is None and not dry_run and not in_place:
        raise OutputError("rewrite needs an output path (-o OUT), --in-place or --dry-run")
    with progress.stage("load", progress.loaded_name(model)):
        loaded = as_loaded(model)
    loaded, shape_changes = with_static_shapes(loaded, fix_dims, input_shapes)
    if output is not None and not dry_run:  # refuse a bad output before doing the work
        check_output_path(output, loaded.path if is_path else None, in_place=in_place)
    options = dict(compare_options or {})
    if verify and not dry_run:
        options = _checked_compare_options(options, loaded, is_path)
    target_options = TargetOptions(custom_op_libraries=tuple(custom_op_libraries),
                                   confirm=confirm)
    resolved = resolve_targets(plugins, targets, target_options)
    log.info("rewrite %s for %s", loaded.path, ", ".join(targets))
    from rewriter.comparison.numbers import numbers_for

    numbers = numbers_for(loaded, plugins, custom_op_libraries,
                          **{k: v for k, v in options.items() if k in _NUMBERS_OPTIONS})
    rewritten, report = rewrite_proto(
        loaded.model, resolved, plugins, partial=partial, explain=explain, dry_run=dry_run,
        model_name=str(loaded.path), prefer=prefer, adapt_interface=adapt_interface,
        base_dir=loaded.base_dir if is_path else None,
        data_locations=tuple(loaded.external_files) if is_path else None,
        numbers=numbers if confirm is not False else None, clean=cleanup,
    )
    report.verify = verify
    if not dry_run and not (report.remaining and not report.applied and not partial):
        from rewriter.io.model import import_repairs

        # what the save would add, made here: the result compared is the result written
        report.repairs = report.repairs + shape_changes + import_repairs(
            rewritten, report.after.domains if report.after else None)
    if report_details:
        _report_size_and_picture(report, loaded, rewritten, dry_run)
    log.info("rewrite %s: %d remedy application(s), %d finding(s) left", loaded.path,
             sum(report.applied.values()), len(report.remaining))
    if verify and not dry_run and (report.applied or report.repairs):
        from rewriter.comparison.isolation import shared_runner

        shared_runner(plugins, memory_limit=options.get("memory_limit")).start()
    for _ in range(CONFIRM_PASSES):
        if dry_run or report.remaining:
            break
        refused = []
        for target in resolved:
            wants = confirm if confirm is not None else target.wants_confirm(loaded)
            if wants:
                with progress.stage("confirm", f"the result on {target.name}"):
                    confirmation, found = confirm_model(rewritten, target, loaded.base_dir)
                report.verification[f"{target.name} load"] = confirmation.refusal or "ok"
                # the rewrite did not make it run there: a finding left, on the node the
                # runtime names (or the first whose prefix it refuses)
                refused.extend(found)
        report.remaining.extend(refused)
        if not any(f.op_type for f in refused):
            break
        # a node the runtime refuses only in the rewritten model: another pass of the
        # engine over the result (its detection confirms and finds it again), to a fixed
        # point
        again = _another_pass(rewritten, resolved, plugins, report, loaded, is_path,
                              partial=partial, explain=explain, prefer=prefer,
                              adapt_interface=adapt_interface, clean=cleanup)
        if again is None:
            break
        rewritten = again
    if adapt_interface and not dry_run:
        from rewriter.io.interface import new_adaptations

        report.interface = [a.describe()
                            for a in new_adaptations(loaded.model, rewritten).values()]
    # in_place names the input file; an in-memory model has none to write back to
    destination = output if output is not None else (loaded.path if in_place and is_path else None)
    if verify and not dry_run:
        from rewriter.comparison.compare import verify_rewrite

        log.info("rewrite %s: comparing the result with the original", loaded.path)
        with progress.stage("compare", "the result with the original"):
            verify_rewrite(loaded, rewritten, targets, resolved, report, plugins=plugins,
                           custom_op_libraries=custom_op_libraries, output=destination,
                           **options)
        # a target whose runtime computes a node of the result differently (an op of a
        # body, on values the original never held there): the engine once more over the
        # result for those targets, its numbers step finding that node, then compared again
        differing = _differing_targets(report, resolved) if confirm is not False else []
        if differing and not report.remaining:
            with progress.stage("rewrite", "the nodes the target computes differently"):
                again = _another_pass(rewritten, differing, plugins, report, loaded, is_path,
                                      partial=partial, prefer=prefer, numbers=numbers,
                                      adapt_interface=adapt_interface, clean=cleanup)
            if again is not None:
                rewritten = again
                with progress.stage("compare", "the result with the original"):
                    verify_rewrite(loaded, rewritten, targets, resolved, report,
                                   plugins=plugins, custom_op_libraries=custom_op_libraries,
                                   output=destination, **options)
    report.decide()
    log.info("rewrite %s: %s", loaded.path, report.verdict or report.verdict_reason)
    if dry_run:
        return RewriteResult(model if not ir_model else ir_model, report)
    if report.remaining and not report.applied and not partial:
        return RewriteResult(None, report)  # --explain of an unfixable model: nothing changed
    failed = report.verdict == MISMATCH or (report.remaining and not partial)
    unverified = report.verdict == UNVERIFIED and verify and not allow_unverified
    if unverified and partial and report.comparison is not None and report.remaining:
        # a partial result is written when what was changed holds: every target ran it and
        # matched, or (one that still refuses it) it matched on the chain
        unverified = not all(t.verdict == VERIFIED or t.changes_hold_elsewhere
                             for t in report.comparison.targets) or \
            bool(report.comparison.error or report.comparison.oracle_error)
    keep = not ((failed and not keep_failed) or unverified)
    if strip_provenance and keep:  # after the comparison: it names rules by provenance
        from rewriter.apply.provenance import strip_provenance as strip

        strip(rewritten)
    if is_path:  # nothing reads the input model from here on (the save needs its paths):
        # its memory goes before the result is serialized, the peak of a big rewrite's save
        loaded = dataclasses.replace(loaded, model=None)
    if destination is not None and keep:
        with progress.stage("save", destination):
            written = save_model(rewritten, destination, source=loaded if is_path else None,
                                 in_place=in_place,
                                 domains=report.after.domains if report.after else None)
        report.output, report.written = str(written), True
    if not keep:
        return RewriteResult(None, report)
    if report_details:
        _report_output_size(report, rewritten, loaded if is_path else None)
    if ir_model is not None:
        import onnx_ir

        return RewriteResult(onnx_ir.from_proto(rewritten), report)
    if is_path:
        return RewriteResult(report.output, report)
    return RewriteResult(rewritten, report)


# passes of the engine over its own result when a runtime refuses a node of it only then
CONFIRM_PASSES = 3


def _another_pass(rewritten: ModelProto, resolved, plugins: Plugins, report: Any,
                  loaded: LoadedModel, is_path: bool, **options) -> ModelProto | None:
    """The engine once more over ``rewritten`` (whose confirmation refused a node): the new
    result, with ``report`` merged (remedies, rounds, counts, checks, what is left); None
    when nothing more could be changed (the refusal stays a finding left)."""
    from rewriter.engine import rewrite_proto
    from rewriter.errors import UnfixableError

    try:
        result, more = rewrite_proto(
            rewritten, resolved, plugins, model_name=str(loaded.path),
            base_dir=loaded.base_dir if is_path else None, **options)
    except UnfixableError:
        return None
    if not more.applied:
        return None
    report.applied.update(more.applied)
    report.repairs.extend(r for r in more.repairs if r not in report.repairs)
    report.rounds += more.rounds
    report.after, report.kernels = more.after, more.kernels
    report.remaining = list(more.remaining)
    report.verification.update(more.verification)
    return result


def _differing_targets(report: Any, resolved) -> list[Any]:
    """The targets whose runtime ran the result and mismatched (a target that compares
    numbers: its runtime's, not the chain's)."""
    comparison = report.comparison
    if comparison is None:
        return []
    from rewriter.comparison.compare import MISMATCH

    names = {t.target for t in comparison.targets if t.status == MISMATCH and not t.runtime}
    return [t for t in resolved if t.name in names and t.compares_numbers]


# compare options that also shape the confirmation's comparison of a runtime's numbers
_NUMBERS_OPTIONS = ("inputs", "dims", "seed", "runs", "quick", "atol", "rtol", "timeout",
                    "memory_limit", "reference_ops")


def _report_size_and_picture(report: Any, loaded: LoadedModel, rewritten: ModelProto,
                             dry_run: bool) -> None:
    """The report's input size and its picture of one replaced node (rewriter.report)."""
    from rewriter.report.picture import replaced_region
    from rewriter.report.size import input_file_bytes, model_size

    report.size["input"] = model_size(loaded.model, input_file_bytes(loaded),
                                      report.before.nodes if report.before else None)
    if report.applied and not dry_run:
        report.picture = replaced_region(loaded.model, rewritten)


def _report_output_size(report: Any, rewritten: ModelProto, source: LoadedModel | None
                        ) -> None:
    """The report's output size: the written files (rewriter.report), or the model alone."""
    from rewriter.report.size import model_size, written_file_bytes

    written = written_file_bytes(report.output, rewritten, source) if report.written else None
    report.size["output"] = model_size(rewritten, written,
                                       report.after.nodes if report.after else None)


def _checked_compare_options(options: dict[str, Any], loaded: LoadedModel,
                             is_path: bool) -> dict[str, Any]:
    """``compare_options`` with given inputs and expected outputs loaded and checked against
    the model (names, element types, ranks), and ``save_inputs`` checked, so a mistake
    fails before any work (InputError, OutputError)."""
    from rewriter.io.inputs import InputError, check_feeds, feed_sets
    from rewriter.io.model import check_output_path

    if options.get("inputs") is not None:
        sets = feed_sets(options["inputs"], loaded.model, "inputs")
        for i, feeds in enumerate(sets):
            check_feeds(feeds, loaded.model, f"input set {i}" if len(sets) > 1 else "inputs")
        options["inputs"] = sets
    if options.get("expected") is not None:
        want = feed_sets(options["expected"], loaded.model, "expected")
        names = {o.name for o in loaded.model.graph.output}
        for outputs in want:
            unknown = sorted(set(outputs) - names)
            if unknown:
                raise InputError(f"expected: the model has no output "
                                 f"{', '.join(map(repr, unknown))} (its outputs: "
                                 f"{', '.join(sorted(names))})")
        count = len(options["inputs"]) if options.get("inputs") is not None else \
            options.get("runs", 1)
        if len(want) != count:
            raise InputError(f"expected: {len(want)} output set(s) for {count} input set(s)")
        options["expected"] = want
    save = options.get("save_inputs")
    if save is not None:
        check_output_path(save, loaded.path if is_path else None, in_place=False,
                          folder_ok=not str(save).endswith(".npz"))
        sets = len(options["inputs"]) if options.get("inputs") is not None else \
            options.get("runs", 1)
        if str(save).endswith(".npz") and sets != 1:
            raise InputError(f"--save-inputs {save}: a .npz file holds one input set; name a "
                             f"folder to save {sets}")
    return options


def _is_onnx_ir_model(model) -> bool:
    module = type(model).__module__ or ""
    return module.startswith("onnx_ir") and type(model).__name__ == "Model"
