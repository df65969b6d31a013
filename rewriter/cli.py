"""``onnx-rewriter``: inspect | check | rewrite | compare | run | plugins | ops.

Exit codes: 0 ok (verified), 1 findings or mismatch, 2 bad input or usage, 3 unverified
(docs/compare.md). Errors are one line on stderr; pass
``--debug`` for a traceback. Heavy imports happen inside commands so ``--help`` stays fast.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import traceback

import click

from rewriter.console import native_stdout_to_stderr, stop_on_signals
from rewriter.errors import (
    EXIT_BAD_INPUT,
    EXIT_FINDINGS,
    EXIT_OK,
    RewriterError,
    Terminated,
    one_line,
)

EXIT_INTERRUPTED = 130  # as a shell reports SIGINT


def _stopped(e: BaseException) -> int:
    """Say why the run stopped (Ctrl-C, SIGTERM, SIGHUP); its exit code (128 + signal)."""
    if isinstance(e, Terminated):
        click.echo(f"terminated ({signal.Signals(e.signum).name})", err=True)
        return 128 + e.signum
    click.echo("interrupted", err=True)
    return EXIT_INTERRUPTED


def report_error(message: str, exit_code: int, as_json: bool = False, **extra) -> None:
    """An error as the user sees it: ``error: SHORT LINE`` on stderr and, when long, its
    detail indented below it; with ``--json`` also the JSON error object on stdout."""
    from rewriter.console import error_lines

    message = one_line(message)
    if as_json:
        from rewriter.report.document import error_document
        from rewriter.report.render import dumps

        click.echo(dumps(error_document(message, exit_code, **extra)))
    for line in error_lines(message):
        click.echo(line, err=True)


class _ModelError(RewriterError):
    """A model ``check`` could not read (the message is already one line)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class _Group(click.Group):
    """Turns RewriterError (and any crash) into one error (short line, indented detail)
    and an exit code; with --json, a JSON error object on stdout too."""

    def invoke(self, ctx: click.Context):
        as_json = _wants_json(ctx)
        try:
            return super().invoke(ctx)
        except RewriterError as e:
            if _debug(ctx):
                traceback.print_exc()
            extra = {}
            if hasattr(e, "findings") and isinstance(e.findings, list):
                extra["remaining"] = [f.as_dict() for f in e.findings]
            report_error(str(e), e.exit_code, as_json(), **extra)
            ctx.exit(e.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except KeyboardInterrupt as e:  # Ctrl-C, and SIGTERM/SIGHUP (Terminated)
            ctx.exit(_stopped(e))
        except OSError as e:  # the OS said no (permissions, a full disk): not our bug
            if _debug(ctx):
                traceback.print_exc()
            from rewriter.io.output import os_reason

            where = f" ({e.filename})" if e.filename else ""
            report_error(os_reason(e) + where, EXIT_BAD_INPUT, as_json())
            ctx.exit(EXIT_BAD_INPUT)
        except MemoryError:
            if _debug(ctx):
                traceback.print_exc()
            report_error("out of memory in the tool's own process (the model or its inputs "
                         "are too large for this machine)", EXIT_BAD_INPUT, as_json())
            ctx.exit(EXIT_BAD_INPUT)
        except Exception as e:  # noqa: BLE001 - last resort: no traceback unless --debug
            if _debug(ctx):
                traceback.print_exc()
            first = one_line((str(e).strip().splitlines() or [""])[0])
            report_error(f"internal error: {type(e).__name__}: {first} (run with --debug for "
                         "a traceback, and please report it)", EXIT_BAD_INPUT, as_json())
            ctx.exit(EXIT_BAD_INPUT)


def _wants_json(ctx: click.Context):
    """Whether the command asked for JSON (known once its options are parsed)."""
    return lambda: bool((ctx.find_root().obj or {}).get("json"))


def _debug(ctx: click.Context) -> bool:
    obj = ctx.find_root().obj or {}
    return bool(obj.get("debug")) or "--debug" in sys.argv


def _common(f):
    """-p and --debug, accepted before or after the command name."""
    f = click.option(
        "-p", "plugin_specs", multiple=True, metavar="MODULE_OR_FILE",
        help="Load a plugin for this run; -p no:NAME blocks one.",
    )(f)
    f = click.option("--debug", is_flag=True, help="Show tracebacks.")(f)
    return f


def _state(ctx: click.Context, plugin_specs, debug, as_json: bool = False) -> dict:
    obj = ctx.find_root().obj
    obj["plugins"] = tuple(obj.get("plugins", ())) + tuple(plugin_specs)
    obj["debug"] = obj.get("debug") or debug
    obj["json"] = as_json
    return obj


def _static_shape_options(f):
    """--fix-dim and --input-shape (check and rewrite): static shapes the model will run with,
    applied before detection."""
    f = click.option("--input-shape", "input_shapes", multiple=True,
                     metavar="INPUT=d0,d1,...",
                     help="Give an input a static shape before anything is asked (repeatable;"
                     " a symbolic dimension it fixes is fixed everywhere).")(f)
    return click.option("--fix-dim", "fix_dims", multiple=True, metavar="NAME=VALUE",
                        help="Set a symbolic dimension to a static value everywhere the "
                        "model declares it, before anything is asked (repeatable).")(f)


def _static_shapes(fix_dims, input_shapes) -> tuple[dict, dict]:
    from rewriter.io.shapes import parse_fixed_dims, parse_input_shapes

    return parse_fixed_dims(fix_dims), parse_input_shapes(input_shapes)


def _load_plugins(obj):
    from rewriter.manager import load_plugins

    return load_plugins(obj["plugins"])


class _Seconds(click.ParamType):
    """A finite, positive number of seconds (``nan`` and ``inf`` refused)."""

    name = "seconds"

    def convert(self, value, param, ctx):
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not math.isfinite(seconds) or seconds <= 0:
            self.fail(f"{value!r}: give a positive, finite number of seconds", param, ctx)
        return seconds


class _Library(click.ParamType):
    """``extensions`` (onnxruntime-extensions), or a shared library file that exists."""

    name = "path|extensions"

    def convert(self, value, param, ctx):
        if value == "extensions":
            return value
        if not os.path.exists(value):
            self.fail(f"{value!r}: no such file (a custom-op shared library, or "
                      "'extensions')", param, ctx)
        if not os.path.isfile(value):
            self.fail(f"{value!r}: not a regular file (a custom-op shared library, or "
                      "'extensions')", param, ctx)
        return value


SEED = click.IntRange(min=0, max=2**63 - 1)
MEMORY_MIB = click.IntRange(min=1, max=2**43)
LIBRARY = _Library()


def _comparison_options(f):
    """The options of the numeric comparison, shared by ``compare`` and ``rewrite``."""
    options = [
        click.option("--inputs", "inputs", multiple=True, metavar="PATH",
                     help="Inputs: .npz, .pb files or ONNX test-data folders (repeatable; "
                     "default: generated). Checked against the model before any work."),
        click.option("--expected", "expected", multiple=True, metavar="PATH",
                     help="Outputs of the original (.npz or test data) to compare with, "
                     "instead of running it."),
        click.option("--runs", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Typical generated input sets (seeds SEED, SEED+1, ...); the "
                     "other regimes (edges, booleans, dims, special values, test data) "
                     "come on top."),
        click.option("--quick", is_flag=True,
                     help="Typical generated inputs only: no edges, booleans, dims, special "
                     "values or test-data regimes (faster, proves less)."),
        click.option("--seed", type=SEED, default=0, show_default=True, help="First seed."),
        click.option("--dim", "dims", multiple=True, metavar="NAME=VALUE",
                     help="Value of a symbolic dimension for generated inputs (repeatable)."),
        click.option("--atol", "atol", multiple=True, metavar="[OUTPUT=]VALUE",
                     help="Absolute tolerance, for every output or one (repeatable)."),
        click.option("--rtol", "rtol", multiple=True, metavar="[OUTPUT=]VALUE",
                     help="Relative tolerance, for every output or one (repeatable)."),
        click.option("--original-target", metavar="TARGET",
                     help="Evaluate the original on this runtime only (default: the first "
                     "of onnxruntime, onnxruntime with plugin kernels, openvino, reference "
                     "that runs it)."),
        click.option("--timeout", type=_Seconds(), default=300.0, show_default=True,
                     help="Seconds each run may take (in a child process)."),
        click.option("--memory-limit", type=MEMORY_MIB, metavar="MIB",
                     help="Address space each run may use, in MiB."),
        click.option("--save-inputs", type=click.Path(), metavar="PATH",
                     help="Write the inputs used (a folder: every set, as test data; a .npz "
                     "file: the set that decided the verdict), to reproduce the verdict "
                     "with --inputs PATH."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _comparison_kwargs(inputs, expected, runs, quick, seed, dims, atol, rtol,
                       original_target, timeout, memory_limit, save_inputs) -> dict:
    """The comparison options as keyword arguments of rewriter.compare."""
    from rewriter.comparison.compare import parse_tolerances
    from rewriter.io.inputs import parse_dims

    return {
        "inputs": list(inputs) or None, "expected": list(expected) or None, "runs": runs,
        "quick": quick or None, "seed": seed, "dims": parse_dims(dims),
        "atol": parse_tolerances(atol, "--atol") or None,
        "rtol": parse_tolerances(rtol, "--rtol") or None, "original_target": original_target,
        "timeout": timeout, "memory_limit": memory_limit * 2**20 if memory_limit else None,
        "save_inputs": save_inputs,
    }


def _paths_protected(model: str) -> list:
    """The model file and its external data: what no output of this run may replace."""
    from rewriter.io.model import input_files, load_model

    try:
        return input_files(load_model(model))
    except RewriterError:
        return [model]


def _logging(verbose: int, quiet: int) -> None:
    """``-v`` (INFO: each stage), ``-vv`` (DEBUG), ``-q`` (errors only) for the
    ``rewriter`` logger, on stderr; default: warnings."""
    import logging

    class StderrHandler(logging.StreamHandler):
        """Writes to the current ``sys.stderr`` (not the one at its creation)."""

        @property
        def stream(self):
            return sys.stderr

        @stream.setter
        def stream(self, value):
            pass

    level = logging.WARNING - 10 * verbose + 10 * quiet
    logger = logging.getLogger("rewriter")
    logger.setLevel(max(logging.DEBUG, min(level, logging.ERROR)))
    if not any(getattr(h, "onnx_rewriter_cli", False) for h in logger.handlers):
        handler = StderrHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        handler.onnx_rewriter_cli = True  # type: ignore[attr-defined]
        logger.addHandler(handler)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]},
             epilog="""\b
Examples:
  onnx-rewriter check examples/failing_export.onnx
  onnx-rewriter rewrite examples/new_opset_export.onnx -o rewritten.onnx
  onnx-rewriter rewrite examples/failing_export.onnx -o fixed.onnx --report fixed.html

Every command: 'onnx-rewriter COMMAND --help'. Reference: docs/cli.md.""")
@_common
@click.option("-v", "--verbose", count=True, help="Log each stage on stderr (-vv: more).")
@click.option("-q", "--quiet", count=True, help="Log errors only.")
@click.version_option(package_name="onnx-graph-rewriter", prog_name="onnx-rewriter")
@click.pass_context
def cli(ctx: click.Context, plugin_specs, debug, verbose, quiet):
    """Find the operators a target runtime cannot run, and rewrite the model until it runs."""
    ctx.obj = {"plugins": tuple(plugin_specs), "debug": debug}
    _logging(verbose, quiet)
    from rewriter import progress

    progress.enable(sys.stderr, quiet=quiet > 0)  # only on a terminal


@cli.command(epilog="""\b
Example:
  onnx-rewriter inspect examples/failing_export.onnx --json""")
@click.argument("model", type=click.Path(dir_okay=True))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_common
@click.pass_context
def inspect(ctx, model, as_json, plugin_specs, debug):
    """Show a model's inputs, outputs, opsets and operator inventory."""
    _state(ctx, plugin_specs, debug, as_json)
    from rewriter.io.model import load_model
    from rewriter.report import render as report
    from rewriter.report.document import document
    from rewriter.report.summary import inspect_model

    info = inspect_model(load_model(model))
    if as_json:
        click.echo(report.dumps(document("inspect", info)))
    else:
        report.print_inspect(info)
    ctx.exit(EXIT_OK)


OUTPUT_FORMATS = ("text", "json", "github", "junit", "sarif")


def _model_paths(specs: tuple[str, ...]) -> list[str]:
    """MODEL arguments as files: a file as it is, a folder as the .onnx files under it, a
    glob as its matches (sorted); one that matches nothing stays (checking it says why)."""
    import glob
    from pathlib import Path

    paths: list[str] = []
    for spec in specs:
        if os.path.isdir(spec):
            found = sorted(str(p) for p in Path(spec).rglob("*.onnx") if p.is_file()) \
                or [spec]  # no models in it: checking the folder says so
        elif os.path.exists(spec) or not glob.has_magic(spec):
            found = [spec]
        else:
            found = sorted(glob.glob(spec, recursive=True)) or [spec]
        paths += [p for p in found if p not in paths]
    return paths


ADAPT_INTERFACE = click.option(
    "--adapt-interface", is_flag=True,
    help="Rewrite a graph output a target cannot return to a tensor it can: ZipMap's "
    "sequence of maps to the float probabilities [N, C], a classifier's string labels to "
    "int64 indices; the labels go to the model's metadata (rewriter.interface), the "
    "comparison goes through them, and 'onnx-rewriter run' / rewriter.session() give the "
    "original outputs back. Without it such an output is refused, naming this flag.")


def _check_one(path: str, targets: tuple[str, ...], plugin_specs: tuple[str, ...],
               confirm: bool | None, libraries: tuple[str, ...], plugins=None,
               details: bool = False, shapes: tuple[dict, dict] = ({}, {}),
               adapt_interface: bool = False) -> dict:
    """``check`` of one model as its document's data, or ``{model, ok: False, error,
    exit_code}`` when it could not be checked (run in a worker process for many models)."""
    from rewriter.api import check as run_check
    from rewriter.errors import RewriterError
    from rewriter.report.document import stage_times
    from rewriter.report.render import check_as_dict

    try:
        if plugins is None:
            from rewriter.manager import load_plugins

            plugins = load_plugins(plugin_specs)
        from rewriter import progress

        with progress.timed() as stages:  # the report's time per stage
            result = run_check(path, targets, plugins=plugins, confirm=confirm,
                               custom_op_libraries=libraries, report_details=details,
                               fix_dims=shapes[0], input_shapes=shapes[1],
                               adapt_interface=adapt_interface)
        doc = check_as_dict(result, plugins.registry)
        doc["stages"] = stage_times(stages)
        doc["model"] = path
        doc["exit_code"] = EXIT_OK if doc["ok"] else EXIT_FINDINGS
        return doc
    except RewriterError as e:
        return {"model": path, "ok": False, "exit_code": e.exit_code, "error": one_line(str(e))}
    except OSError as e:
        from rewriter.io.output import os_reason

        return {"model": path, "ok": False, "exit_code": EXIT_BAD_INPUT,
                "error": f"{os_reason(e)} ({e.filename or path})"}
    except Exception as e:  # noqa: BLE001 - one model's crash is that model's error
        first = one_line((str(e).strip().splitlines() or [""])[0])
        return {"model": path, "ok": False, "exit_code": EXIT_BAD_INPUT,
                "error": f"internal error: {type(e).__name__}: {first}"}


def _check_many(paths: list[str], targets, plugin_specs, confirm, libraries, plugins,
                details: bool = False, shapes: tuple[dict, dict] = ({}, {}),
                adapt_interface: bool = False) -> list[dict]:
    """Every model's ``check``: in this process for one, in a pool of worker processes
    (one per core) for many; in the order given. ``details``: each model's size, for a
    report."""
    if len(paths) == 1:
        return [_check_one(paths[0], targets, plugin_specs, confirm, libraries, plugins,
                           details, shapes, adapt_interface)]
    import concurrent.futures
    import multiprocessing

    workers = max(1, min(os.cpu_count() or 1, len(paths)))
    context = multiprocessing.get_context("spawn")  # no fork of a process holding runtimes
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers,
                                                mp_context=context) as pool:
        futures = [pool.submit(_check_one, p, targets, plugin_specs, confirm, libraries,
                               None, details, shapes, adapt_interface) for p in paths]
        return [f.result() for f in futures]


def _check_document(docs: list[dict], targets=(), plugin_specs=(), libraries=()) -> dict:
    """The ``check`` report document: one model's data as it is; many models under
    ``models`` with the summary (its hint carrying the user's targets and options)."""
    from rewriter.report.document import document
    from rewriter.report.render import check_summary

    if len(docs) == 1 and not docs[0].get("error"):
        return document("check", docs[0])
    return document("check", {
        "ok": all(d["ok"] for d in docs),
        "exit_code": max(d["exit_code"] for d in docs),
        "fixable": all(d.get("fixable") or d["ok"] for d in docs),
        "summary": check_summary(docs, targets, plugin_specs, libraries), "models": docs,
    })


def _compared_sizes(original: str, rewritten: str | None) -> dict:
    """The report's model size for ``compare``: the original ("input") and the rewritten
    model ("output"); None for one that cannot be read as a model file."""
    from rewriter.errors import RewriterError
    from rewriter.report.size import file_model_size

    sizes: dict = {}
    for key, path in (("input", original), ("output", rewritten)):
        try:
            sizes[key] = file_model_size(path) if path else None
        except (RewriterError, OSError):
            sizes[key] = None
    return sizes


def _write_report(path: str | None, doc: dict, protected=()) -> None:
    """``--report FILE.html|FILE.md``: the document rendered, written atomically (never
    over an input)."""
    if not path:
        return
    from rewriter.io.output import write_text
    from rewriter.report.html import to_html
    from rewriter.report.markdown import to_markdown

    text = to_markdown(doc) if path.lower().endswith((".md", ".markdown")) else to_html(doc)
    write_text(path, text, protected=protected)


class _ReportPath(click.ParamType):
    """A report file: .html (or .htm), or .md (or .markdown)."""

    name = "FILE.html|FILE.md"

    def convert(self, value, param, ctx):
        if not str(value).lower().endswith((".html", ".htm", ".md", ".markdown")):
            self.fail(f"{value!r}: name a .html or .md file", param, ctx)
        return str(value)


REPORT = click.option(
    "--report", "report_path", type=_ReportPath(), metavar="FILE.html|FILE.md",
    help="Also write a self-contained HTML or Markdown report (the data of --json).")


@cli.command(epilog="""\b
Examples:
  onnx-rewriter check examples/failing_export.onnx
  onnx-rewriter check 'models/*.onnx' -t onnxruntime -t openvino
  onnx-rewriter check models/ --output-format sarif > check.sarif""")
@click.argument("models", nargs=-1, required=True, metavar="MODEL...")
@click.option(
    "-t", "--target", "targets", multiple=True, default=("onnxruntime",), show_default=True,
    help="Target to check against (repeatable): onnxruntime[:PROVIDER], reference, opset:N, ...",
)
@click.option(
    "--confirm/--no-confirm", default=None,
    help="Confirm a 'runs' verdict by really loading the model (default: on for small models).",
)
@click.option(
    "--custom-ops-library", "libraries", multiple=True, metavar="PATH|extensions",
    type=LIBRARY,
    help="Register a custom-op shared library with onnxruntime ('extensions' for "
    "onnxruntime-extensions).",
)
@click.option("--output-format", "output_format", type=click.Choice(OUTPUT_FORMATS),
              default="text", show_default=True,
              help="text; json (as --json); github (workflow-command annotations); junit "
              "(JUnit XML); sarif (SARIF 2.1.0).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (--output-format json).")
@click.option("--base-dir", "base_dir", type=click.Path(file_okay=False), default=None,
              help="github/sarif: model locations relative to this folder (the repository's "
              "root; default: the current folder).")
@_static_shape_options
@ADAPT_INTERFACE
@REPORT
@_common
@click.pass_context
def check(ctx, models, targets, confirm, libraries, output_format, as_json, base_dir,
          fix_dims, input_shapes, adapt_interface, report_path, plugin_specs, debug):
    """List every node the targets cannot run, why (a reason code) and the remedy rewrite
    would apply.

    MODEL: files, folders (their .onnx files) or globs; many models are checked in
    parallel. Exit 0 when every target runs every model, 1 findings, 2 a model could not
    be checked (the worst of all models).
    """
    obj = _state(ctx, plugin_specs, debug, as_json or output_format == "json")
    from rewriter.report import render as report

    if as_json:
        output_format = "json"
    plugins = _load_plugins(obj)
    paths = _model_paths(models)
    shapes = _static_shapes(fix_dims, input_shapes)
    docs = _check_many(paths, tuple(targets), obj["plugins"], confirm, tuple(libraries),
                       plugins, details=output_format == "json" or bool(report_path),
                       shapes=shapes, adapt_interface=adapt_interface)
    if len(docs) == 1 and docs[0].get("error") and output_format in ("text", "json"):
        raise _ModelError(docs[0]["error"], docs[0]["exit_code"])
    doc = _check_document(docs, targets, obj["plugins"], libraries)
    _write_report(report_path, doc, protected=paths)
    if output_format == "json":
        click.echo(report.dumps(doc))
    elif output_format == "github":
        from rewriter.report.ci import github_lines

        for line in github_lines(docs, base_dir):
            click.echo(line)
    elif output_format == "junit":
        from rewriter.report.ci import junit_xml

        click.echo(junit_xml(docs), nl=False)
    elif output_format == "sarif":
        from rewriter.report.ci import sarif

        click.echo(report.dumps(sarif(docs, doc["tool"]["version"], base_dir)))
    else:
        say = report._plain()
        for i, d in enumerate(docs):
            if i:
                say()
            for line in report.check_lines(d):
                say(line)
        if len(docs) > 1 or not docs[0]["ok"]:
            say()
            from rewriter.console import wrap

            shape_options = [("--fix-dim", v) for v in fix_dims] + \
                [("--input-shape", v) for v in input_shapes] + \
                ([("--adapt-interface", None)] if adapt_interface else [])
            for line in report.check_summary(docs, targets, obj["plugins"], libraries,
                                             shape_options):
                for part in wrap(line, indent=2, first=0):
                    say(part)
    ctx.exit(max(d["exit_code"] for d in docs))


@cli.command(epilog="""\b
Examples:
  onnx-rewriter rewrite examples/new_opset_export.onnx -o rewritten.onnx
  onnx-rewriter rewrite examples/failing_export.onnx -o fixed.onnx --report fixed.html
  onnx-rewriter rewrite model.onnx --dry-run --explain -t openvino""")
@click.argument("model", type=click.Path(dir_okay=True))
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Where to write the result.")
@click.option(
    "-t", "--target", "targets", multiple=True, default=("onnxruntime",), show_default=True,
    help="Target the result must run on (repeatable; all must be satisfied).",
)
@click.option("--partial", is_flag=True, help="Rewrite what can be fixed and report the rest.")
@click.option("--dry-run", is_flag=True, help="Show the plan; change and write nothing.")
@click.option("--explain", is_flag=True, help="Say which plugins were asked and why each declined.")
@click.option("--in-place", is_flag=True, help="Allow the output to overwrite the input.")
@click.option(
    "--confirm/--no-confirm", default=None,
    help="Load the result in each target runtime (default: on for small models).",
)
@click.option(
    "--custom-ops-library", "libraries", multiple=True, metavar="PATH|extensions",
    type=LIBRARY, help="Register a custom-op shared library with onnxruntime.",
)
@click.option(
    "--prefer", type=click.Choice(["decompose", "kernel"]), default="decompose",
    show_default=True,
    help="Which remedy wins for an op that has both: a decomposition (the result needs "
    "nothing at deployment) or a custom kernel (run the result with 'onnx-rewriter run').",
)
@click.option(
    "--verify/--no-verify", default=True, show_default=True,
    help="Compare the result with the original run on the first runtime that runs it "
    "(see 'onnx-rewriter compare'). --no-verify writes the result unverified, exit 0.",
)
@click.option("--allow-unverified", is_flag=True,
              help="Write the result even when no comparison could decide (exit 3 all the "
              "same).")
@click.option("--keep-failed", is_flag=True,
              help="Write the result even when it does not match the original (exit 1).")
@click.option("--strip-provenance", is_flag=True,
              help="Leave out which plugin and rule made each new node (a table in the "
              "model's metadata and a short key per node).")
@click.option("--no-cleanup", "no_cleanup", is_flag=True,
              help="Leave the result's graph as the remedies made it (no constant folding, "
              "dead-node removal or merging of common subexpressions).")
@_static_shape_options
@ADAPT_INTERFACE
@_comparison_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@REPORT
@_common
@click.pass_context
def rewrite(ctx, model, output, targets, partial, dry_run, explain, in_place, confirm,
            libraries, prefer, verify, allow_unverified, keep_failed, fix_dims, input_shapes,
            adapt_interface,
            inputs, expected, runs, quick, seed, dims, atol, rtol, original_target, timeout,
            memory_limit, save_inputs, as_json, report_path, plugin_specs, debug,
            strip_provenance=False, no_cleanup=False):
    """Rewrite MODEL until every target runs it; verify; write it to OUTPUT.

    The result is compared with the original (run on the first installed runtime that runs
    it) on every target. Exit 0 verified (or nothing to do, or --no-verify), 1 mismatch or
    findings left (nothing written unless --keep-failed or --partial), 2 bad input,
    3 unverified (nothing written unless --allow-unverified).
    """
    obj = _state(ctx, plugin_specs, debug, as_json)
    from rewriter.api import rewrite as run_rewrite
    from rewriter.report import render
    from rewriter.report.document import document

    plugins = _load_plugins(obj)
    compare_options = _comparison_kwargs(inputs, expected, runs, quick, seed, dims, atol,
                                         rtol, original_target, timeout, memory_limit,
                                         save_inputs)
    compare_options = {k: v for k, v in compare_options.items() if v is not None}
    shapes = _static_shapes(fix_dims, input_shapes)
    if report_path:  # refused before any work: never the model or its data
        from rewriter.io.output import check_output_path

        check_output_path(report_path, protected=_paths_protected(model))
    from rewriter import progress  # the report's time per stage

    with progress.timed() as stages:  # the report's time per stage
        result = run_rewrite(
            model, targets, output=output, plugins=plugins, partial=partial, dry_run=dry_run,
            explain=explain, in_place=in_place, confirm=confirm, custom_op_libraries=libraries,
            prefer=prefer, verify=verify, compare_options=compare_options,
            allow_unverified=allow_unverified, keep_failed=keep_failed,
            strip_provenance=strip_provenance, report_details=bool(as_json or report_path),
            fix_dims=shapes[0], input_shapes=shapes[1], cleanup=not no_cleanup,
            adapt_interface=adapt_interface,
        )
    report = result.report
    doc = document("rewrite", report.as_dict(), stages=stages)
    if report_path:
        _write_report(report_path, doc, protected=_paths_protected(model))
    if as_json:
        click.echo(render.dumps(doc))
    else:
        render.print_rewrite(report)
    ctx.exit(report.exit_code)


@cli.command(epilog="""\b
Example:
  onnx-rewriter run fixed.onnx --inputs inputs.npz -o outputs.npz""")
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--inputs", "inputs_path", type=click.Path(exists=True),
              help="Inputs: an .npz file or an ONNX test_data_set folder (default: seeded "
              "random inputs from the declared types and shapes).")
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Write the outputs to this .npz file.")
@click.option("--dim", "dims", multiple=True, metavar="NAME=VALUE",
              help="Value of a symbolic dimension for random inputs (repeatable).")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Random-input seed.")
@click.option("--provider", "providers", multiple=True, metavar="NAME",
              help="onnxruntime execution provider (repeatable; default CPU).")
@click.option("--timeout", type=_Seconds(), default=300.0, show_default=True,
              help="Seconds the run may take (in a child process).")
@click.option("--memory-limit", type=MEMORY_MIB, metavar="MIB",
              help="Address space the run may use, in MiB.")
@click.option("--custom-ops-library", "libraries", multiple=True, metavar="PATH|extensions",
              type=LIBRARY, help="Register a custom-op shared library with onnxruntime.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_common
@click.pass_context
def run(ctx, model, inputs_path, output, dims, seed, providers, timeout, memory_limit,
        libraries, as_json, plugin_specs, debug):
    """Run MODEL once in onnxruntime with every kernel it needs registered (in a child
    process: a crashing or hanging kernel is an error, not the end of the tool)."""
    obj = _state(ctx, plugin_specs, debug, as_json)
    from rewriter.comparison import runtime
    from rewriter.io.inputs import load_inputs, parse_dims
    from rewriter.io.model import input_files, load_model
    from rewriter.report import render

    plugins = _load_plugins(obj)
    loaded = load_model(model)
    if output:  # refused before any work: never the model or its data
        from rewriter.io.output import check_output_path

        check_output_path(output, loaded.path, protected=input_files(loaded))
    inputs = None
    if inputs_path:
        sets = load_inputs([inputs_path], loaded.model)
        inputs = sets[0] if sets else {}
    providers = [p if p.endswith("ExecutionProvider") else f"{p}ExecutionProvider"
                 for p in providers] or None
    outputs, used, generated = runtime.run(
        loaded, inputs, dims=parse_dims(dims), seed=seed, providers=providers, plugins=plugins,
        timeout=timeout, memory_limit=memory_limit * 2**20 if memory_limit else None,
        custom_op_libraries=libraries,
    )
    if output:
        runtime.save_outputs(output, outputs, protected=input_files(loaded))
    rows = [runtime.describe(name, value) for name, value in outputs.items()]
    inputs_rows = [runtime.describe(name, value) for name, value in used.items()]
    if as_json:
        from rewriter.report.document import document

        click.echo(render.dumps(document("run", {
            "model": model, "output": output, "generated": generated, "inputs": inputs_rows,
            "outputs": rows})))
    else:
        for row in inputs_rows:
            how = f"random (seed {seed})" if generated else "given"
            click.echo(f"input {row['name']}: {how} {row['dtype']}{row['shape']}", err=True)
        for row in rows:
            click.echo(f"{row['name']}: {row['dtype']}{row['shape']} {row['preview']}")
    ctx.exit(EXIT_OK)


@cli.command(epilog="""\b
Examples:
  onnx-rewriter compare model.onnx fixed.onnx -t onnxruntime -t openvino --runs 3
  onnx-rewriter compare model.onnx fixed.onnx --inputs real.npz --report compare.md""")
@click.argument("original", type=click.Path(dir_okay=False))
@click.argument("rewritten", type=click.Path(dir_okay=False), required=False)
@click.option(
    "-t", "--target", "targets", multiple=True, default=("onnxruntime",), show_default=True,
    help="Target to run the rewritten model on (repeatable).",
)
@_comparison_options
@click.option("--no-localize", is_flag=True,
              help="Do not look for the first diverging rewritten region on a mismatch.")
@click.option(
    "--custom-ops-library", "libraries", multiple=True, metavar="PATH|extensions",
    type=LIBRARY, help="Register a custom-op shared library with onnxruntime.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@REPORT
@_common
@click.pass_context
def compare(ctx, original, rewritten, targets, inputs, expected, runs, quick, seed, dims, atol,
            rtol, original_target, timeout, memory_limit, save_inputs, no_localize, libraries,
            as_json, report_path, plugin_specs, debug):
    """Prove REWRITTEN computes what ORIGINAL did, on every target.

    ORIGINAL runs on the first installed runtime that runs it (or --expected gives its
    outputs). Exit 0 verified: every output agrees within tolerance on every target; 1
    mismatch (the first diverging rewritten region and its rule are named); 3 unverified:
    nothing could decide (the report says why); 2 bad input.
    """
    obj = _state(ctx, plugin_specs, debug, as_json)
    from rewriter.comparison.compare import compare as run_compare
    from rewriter.report import render
    from rewriter.report.document import document

    if rewritten is None and not expected:
        raise click.UsageError("give REWRITTEN, or --expected outputs for ORIGINAL")
    plugins = _load_plugins(obj)
    options = _comparison_kwargs(inputs, expected, runs, quick, seed, dims, atol, rtol,
                                 original_target, timeout, memory_limit, save_inputs)
    protected = []
    if report_path:  # refused before any work: never an input
        from rewriter.io.output import check_output_path

        protected = _paths_protected(original) + (
            _paths_protected(rewritten) if rewritten else [])
        check_output_path(report_path, protected=protected)
    from rewriter import progress  # the report's time per stage

    with progress.timed() as stages:  # the report's time per stage
        result = run_compare(original, rewritten, targets, plugins=plugins,
                             custom_op_libraries=libraries, localize=not no_localize, **options)
    doc = document("compare", result.as_dict(), stages=stages)
    doc["size"] = _compared_sizes(original, rewritten)  # report size
    _write_report(report_path, doc, protected=protected)
    if as_json:
        click.echo(render.dumps(doc))
    else:
        render.print_compare(result)
    if result.exit_code == EXIT_BAD_INPUT:
        from rewriter.console import error_lines

        for line in error_lines(f"could not compare: {one_line(result.why_not_run())}"):
            click.echo(line, err=True)
    ctx.exit(result.exit_code)


@cli.command(epilog="""\b
Examples:
  onnx-rewriter plugins
  onnx-rewriter plugins com-microsoft""")
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_common
@click.pass_context
def plugins(ctx, name, as_json, plugin_specs, debug):
    """List plugins (one line each), or what plugin NAME registered."""
    obj = _state(ctx, plugin_specs, debug, as_json)
    from rewriter.report import render as report
    from rewriter.report.document import document

    loaded = _load_plugins(obj)
    infos = sorted(loaded.registry.plugins.values(), key=lambda i: i.name)
    if name is not None:
        known = [i.name for i in infos]
        if name not in known:
            raise RewriterError(f"no plugin {name!r}; installed: {', '.join(known)}")
        infos = [i for i in infos if i.name == name]
    rows = [
        {
            "name": info.name,
            "distribution": info.distribution,
            "version": info.version,
            "builtin": info.builtin,
            "registered": loaded.registry.registered_by(info.name),
        }
        for info in infos
    ]
    if as_json:
        click.echo(report.dumps(document("plugins", rows)))
    elif name is not None:
        report.print_plugin(rows[0])
    else:
        report.print_plugins(rows)
    ctx.exit(EXIT_OK)


@cli.command(epilog="""\b
Examples:
  onnx-rewriter ops
  onnx-rewriter ops gelu
  onnx-rewriter ops com.microsoft --json""")
@click.argument("filter_text", required=False, metavar="[FILTER]")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--markdown", is_flag=True, help="Print the Markdown table of docs/operators.md.")
@_common
@click.pass_context
def ops(ctx, filter_text, as_json, markdown, plugin_specs, debug):
    """List every operator the installed plugins remedy, and how. FILTER keeps the ops whose
    domain::name contains it (any case)."""
    obj = _state(ctx, plugin_specs, debug, as_json)
    from rewriter.report import render as report
    from rewriter.report.document import document
    from rewriter.report.optable import operator_rows, passes_markdown, to_markdown

    registry = _load_plugins(obj).registry
    rows = operator_rows(registry)
    if filter_text:
        needle = filter_text.lower()
        rows = [r for r in rows
                if needle in "{domain}::{op_type}".format(**r.as_dict()).lower()]
    if markdown:
        click.echo(to_markdown(rows) + ("" if filter_text else passes_markdown(registry)),
                   nl=False)
    elif as_json:
        click.echo(report.dumps(document("ops", [r.as_dict() for r in rows])))
    else:
        report.print_operators([r.as_dict() for r in rows])
    ctx.exit(EXIT_OK)


def _option_row(param: click.Parameter) -> list[str]:
    """One row of the options table of docs/cli.md: names, value, default, help."""
    names = ", ".join(f"`{n}`" for n in [*param.opts, *param.secondary_opts])
    if isinstance(param, click.Option) and (param.is_flag or param.count):
        value = ""
    else:
        value = f"`{param.metavar or param.type.name.upper()}`" if isinstance(
            param, click.Option) else ""
        if isinstance(param.type, click.Choice):
            value = " \\| ".join(f"`{c}`" for c in param.type.choices)
    default = ""
    if isinstance(param, click.Option) and param.show_default and param.default not in (
            None, (), False):
        default = f"`{param.default[0] if isinstance(param.default, tuple) else param.default}`"
    text = " ".join((getattr(param, "help", None) or "").split())
    if getattr(param, "multiple", False) and "repeatable" not in text:
        text += " (repeatable)"
    return [names, value.replace("|", "\\|") if "\\|" not in value else value, default,
            text.replace("|", "\\|")]


def reference_markdown() -> str:
    """docs/cli.md: every command's usage, description, options and examples, from the
    click commands themselves (tests/test_cli_docs.py keeps the file current)."""
    import inspect as pyinspect

    out = ["# CLI reference", "",
           "Generated from the commands themselves (`python -c \"from rewriter.cli import "
           "reference_markdown as r; print(r(), end='')\" > docs/cli.md`); "
           "`tests/test_cli_docs.py` fails when it is stale. Exit codes, targets and plugins: "
           "see the [README](../README.md); problems: [troubleshooting](troubleshooting.md).",
           ""]
    commands = [(None, cli)] + sorted(cli.commands.items())
    for name, command in commands:
        ctx = click.Context(command, info_name=f"onnx-rewriter {name}" if name
                            else "onnx-rewriter")
        out += [f"## `onnx-rewriter{' ' + name if name else ''}`", "",
                "```", " ".join(command.collect_usage_pieces(ctx)).join(
                    [f"{ctx.info_name} ", ""]), "```", ""]
        out += [pyinspect.cleandoc(command.help or ""), ""]
        rows = [_option_row(p) for p in command.params
                if isinstance(p, click.Option) and not p.hidden]
        rows.append(["`-h`, `--help`", "", "", "Show the help and exit."])
        out += ["| option | value | default | what |", "|---|---|---|---|"]
        out += ["| " + " | ".join(r) + " |" for r in rows] + [""]
        if command.epilog:
            example = [line for line in command.epilog.splitlines()
                       if line.strip() and line.strip() != "\b"]
            out += ["```bash"] + [line.strip() for line in example
                                   if line.strip().startswith("onnx-rewriter")] + ["```", ""]
            rest = [line for line in example if not line.strip().startswith(("onnx-rewriter",
                                                                              "Example"))]
            out += [" ".join(rest), ""] if rest else []
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point. Usage errors (a bad option value) are one line too;
    SIGTERM and SIGHUP end the run as cleanly as Ctrl-C (exit 128 + the signal)."""
    from rewriter.console import never_fail_on_encoding

    never_fail_on_encoding()
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        with native_stdout_to_stderr(), stop_on_signals():
            rv = cli.main(args=args, prog_name="onnx-rewriter", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as e:
        e.show()
        return EXIT_BAD_INPUT
    except click.ClickException as e:  # a usage error: one line, as every error
        as_json = "--json" in args or "--output-format=json" in args or any(
            a == "--output-format" and b == "json" for a, b in zip(args, args[1:]))
        hint = ""
        if isinstance(e, click.UsageError) and e.ctx is not None:
            hint = f" (see '{e.ctx.command_path} --help')"
        report_error(e.format_message() + hint, e.exit_code, as_json)
        return e.exit_code
    except click.exceptions.Abort as e:
        return _stopped(e.__cause__ if isinstance(e.__cause__, Terminated) else e)
    except KeyboardInterrupt as e:
        return _stopped(e)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_BAD_INPUT)
    return rv if isinstance(rv, int) else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
