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


class _Group(click.Group):
    """Turns RewriterError (and any crash) into one line and an exit code."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except RewriterError as e:
            if _debug(ctx):
                traceback.print_exc()
            click.echo(f"error: {one_line(str(e))}", err=True)
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
            click.echo(f"error: {one_line(os_reason(e) + where)}", err=True)
            ctx.exit(EXIT_BAD_INPUT)
        except MemoryError:
            if _debug(ctx):
                traceback.print_exc()
            click.echo("error: out of memory in the tool's own process (the model or its "
                       "inputs are too large for this machine)", err=True)
            ctx.exit(EXIT_BAD_INPUT)
        except Exception as e:  # noqa: BLE001 - last resort: no traceback unless --debug
            if _debug(ctx):
                traceback.print_exc()
            first = one_line((str(e).strip().splitlines() or [""])[0])
            click.echo(
                f"error: internal error: {type(e).__name__}: {first} (run with --debug for a "
                "traceback, and please report it)",
                err=True,
            )
            ctx.exit(EXIT_BAD_INPUT)


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


def _state(ctx: click.Context, plugin_specs, debug) -> dict:
    obj = ctx.find_root().obj
    obj["plugins"] = tuple(obj.get("plugins", ())) + tuple(plugin_specs)
    obj["debug"] = obj.get("debug") or debug
    return obj


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
                     help="Generated input sets (seeds SEED, SEED+1, ...)."),
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
                     help="Write the inputs used (.npz for one set, else a test-data "
                     "folder), to reproduce the verdict with --inputs PATH."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _comparison_kwargs(inputs, expected, runs, seed, dims, atol, rtol, original_target,
                       timeout, memory_limit, save_inputs) -> dict:
    """The comparison options as keyword arguments of rewriter.compare."""
    from rewriter.comparison.compare import parse_tolerances
    from rewriter.io.inputs import parse_dims

    return {
        "inputs": list(inputs) or None, "expected": list(expected) or None, "runs": runs,
        "seed": seed, "dims": parse_dims(dims), "atol": parse_tolerances(atol, "--atol") or None,
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


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@_common
@click.version_option(package_name="onnx-graph-rewriter", prog_name="onnx-rewriter")
@click.pass_context
def cli(ctx: click.Context, plugin_specs, debug):
    """Find the operators a target runtime cannot run, and rewrite the model until it runs."""
    ctx.obj = {"plugins": tuple(plugin_specs), "debug": debug}


@cli.command()
@click.argument("model", type=click.Path(dir_okay=True))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_common
@click.pass_context
def inspect(ctx, model, as_json, plugin_specs, debug):
    """Show a model's inputs, outputs, opsets and operator inventory."""
    _state(ctx, plugin_specs, debug)
    from rewriter.io.model import load_model
    from rewriter.report import render as report
    from rewriter.report.summary import inspect_model

    info = inspect_model(load_model(model))
    if as_json:
        click.echo(report.dumps(info))
    else:
        report.print_inspect(info)
    ctx.exit(EXIT_OK)


@cli.command()
@click.argument("model", type=click.Path(dir_okay=True))
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
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_common
@click.pass_context
def check(ctx, model, targets, confirm, libraries, as_json, plugin_specs, debug):
    """List every node the targets cannot run, and why. Exit 1 if there are any."""
    obj = _state(ctx, plugin_specs, debug)
    from rewriter.api import check as run_check
    from rewriter.io.model import load_model
    from rewriter.report import render as report

    plugins = _load_plugins(obj)
    loaded = load_model(model)
    result = run_check(
        loaded, targets, plugins=plugins, confirm=confirm, custom_op_libraries=libraries
    )
    if as_json:
        click.echo(report.dumps(report.check_as_dict(result, plugins.registry)))
    else:
        report.print_check(result, plugins.registry)
    ctx.exit(EXIT_OK if result.ok else EXIT_FINDINGS)


@cli.command()
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
@_comparison_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_common
@click.pass_context
def rewrite(ctx, model, output, targets, partial, dry_run, explain, in_place, confirm,
            libraries, prefer, verify, allow_unverified, keep_failed, inputs, expected, runs,
            seed, dims, atol, rtol, original_target, timeout, memory_limit, save_inputs,
            as_json, plugin_specs, debug):
    """Rewrite MODEL until every target runs it; verify; write it to OUTPUT.

    The result is compared with the original (run on the first installed runtime that runs
    it) on every target. Exit 0 verified (or nothing to do, or --no-verify), 1 mismatch or
    findings left (nothing written unless --keep-failed or --partial), 2 bad input,
    3 unverified (nothing written unless --allow-unverified).
    """
    obj = _state(ctx, plugin_specs, debug)
    from rewriter.api import rewrite as run_rewrite
    from rewriter.errors import UnfixableError
    from rewriter.report import render

    plugins = _load_plugins(obj)
    compare_options = _comparison_kwargs(inputs, expected, runs, seed, dims, atol, rtol,
                                         original_target, timeout, memory_limit, save_inputs)
    compare_options = {k: v for k, v in compare_options.items() if v is not None}
    try:
        result = run_rewrite(
            model, targets, output=output, plugins=plugins, partial=partial, dry_run=dry_run,
            explain=explain, in_place=in_place, confirm=confirm, custom_op_libraries=libraries,
            prefer=prefer, verify=verify, compare_options=compare_options,
            allow_unverified=allow_unverified, keep_failed=keep_failed,
        )
    except UnfixableError as e:
        if as_json:
            click.echo(render.dumps({"ok": False, "error": one_line(str(e)),
                                     "remaining": [f.as_dict() for f in e.findings]}))
        raise
    report = result.report
    if as_json:
        click.echo(render.dumps(report.as_dict()))
    else:
        render.print_rewrite(report)
    ctx.exit(report.exit_code)


@cli.command()
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
    obj = _state(ctx, plugin_specs, debug)
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
        click.echo(render.dumps({"model": model, "output": output, "generated": generated,
                                 "inputs": inputs_rows, "outputs": rows}))
    else:
        for row in inputs_rows:
            how = f"random (seed {seed})" if generated else "given"
            click.echo(f"input {row['name']}: {how} {row['dtype']}{row['shape']}", err=True)
        for row in rows:
            click.echo(f"{row['name']}: {row['dtype']}{row['shape']} {row['preview']}")
    ctx.exit(EXIT_OK)


@cli.command()
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
@_common
@click.pass_context
def compare(ctx, original, rewritten, targets, inputs, expected, runs, seed, dims, atol, rtol,
            original_target, timeout, memory_limit, save_inputs, no_localize, libraries,
            as_json, plugin_specs, debug):
    """Prove REWRITTEN computes what ORIGINAL did, on every target.

    ORIGINAL runs on the first installed runtime that runs it (or --expected gives its
    outputs). Exit 0 verified: every output agrees within tolerance on every target; 1
    mismatch (the first diverging rewritten region and its rule are named); 3 unverified:
    nothing could decide (the report says why); 2 bad input.
    """
    obj = _state(ctx, plugin_specs, debug)
    from rewriter.comparison.compare import compare as run_compare
    from rewriter.report import render

    if rewritten is None and not expected:
        raise click.UsageError("give REWRITTEN, or --expected outputs for ORIGINAL")
    plugins = _load_plugins(obj)
    options = _comparison_kwargs(inputs, expected, runs, seed, dims, atol, rtol,
                                 original_target, timeout, memory_limit, save_inputs)
    result = run_compare(original, rewritten, targets, plugins=plugins,
                         custom_op_libraries=libraries, localize=not no_localize, **options)
    if as_json:
        click.echo(render.dumps(result.as_dict()))
    else:
        render.print_compare(result)
    if result.exit_code == EXIT_BAD_INPUT and not as_json:
        click.echo(f"error: could not compare: {one_line(result.why_not_run())}", err=True)
    ctx.exit(result.exit_code)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_common
@click.pass_context
def plugins(ctx, as_json, plugin_specs, debug):
    """List plugins, where they come from and what they registered."""
    obj = _state(ctx, plugin_specs, debug)
    from rewriter.report import render as report

    loaded = _load_plugins(obj)
    rows = [
        {
            "name": info.name,
            "distribution": info.distribution,
            "version": info.version,
            "builtin": info.builtin,
            "registered": loaded.registry.registered_by(info.name),
        }
        for info in sorted(loaded.registry.plugins.values(), key=lambda i: i.name)
    ]
    if as_json:
        click.echo(report.dumps(rows))
    else:
        report.print_plugins(rows)
    ctx.exit(EXIT_OK)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--markdown", is_flag=True, help="Print the Markdown table of docs/operators.md.")
@_common
@click.pass_context
def ops(ctx, as_json, markdown, plugin_specs, debug):
    """List every operator the installed plugins remedy, and how."""
    obj = _state(ctx, plugin_specs, debug)
    from rewriter.report import render as report
    from rewriter.report.optable import operator_rows, passes_markdown, to_markdown

    registry = _load_plugins(obj).registry
    rows = operator_rows(registry)
    if markdown:
        click.echo(to_markdown(rows) + passes_markdown(registry), nl=False)
    elif as_json:
        click.echo(report.dumps([r.as_dict() for r in rows]))
    else:
        report.print_operators([r.as_dict() for r in rows])
    ctx.exit(EXIT_OK)


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point. Usage errors (a bad option value) are one line too;
    SIGTERM and SIGHUP end the run as cleanly as Ctrl-C (exit 128 + the signal)."""
    try:
        with native_stdout_to_stderr(), stop_on_signals():
            rv = cli.main(args=argv, prog_name="onnx-rewriter", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as e:
        e.show()
        return EXIT_BAD_INPUT
    except click.ClickException as e:
        click.echo(f"error: {one_line(e.format_message())}", err=True)
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
