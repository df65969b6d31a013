"""Render results for people (rich tables) and for programs (JSON)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from rewriter.detect.targets import REASONS
from rewriter.detect.walker import CheckReport, group_findings
from rewriter.errors import one_line
from rewriter.graph.opid import OpId, domain_label

MAX_PATHS_SHOWN = 3


def _console(stream=None):
    from rich.console import Console

    from rewriter.console import safe_stream

    return Console(file=safe_stream(stream), highlight=False, soft_wrap=True)


def _plain(stream=None):
    """A ``print`` to ``stream`` (default stdout) that never fails on its encoding."""
    from rewriter.console import safe_stream

    out = safe_stream(stream)

    def say(line: str = "") -> None:
        out.write(line + "\n")

    return say


def short_rule(text: str) -> str:
    """A remedy as shown: its rule without the list of variants it covers ("decomposition
    pytorch:org.pytorch.aten::ATen [pytorch]")."""
    head, sep, plugin = text.rpartition(" [")
    if not sep:
        return text.split(" (", 1)[0]
    return f"{head.split(' (', 1)[0]} [{plugin}"


_NODE_INDEX = re.compile(r"node \d+ \(")


def plan_key(path: str, op_type: str) -> tuple[str, str]:
    """How ``check`` matches a finding with the rewrite plan and what the rewrite left: its
    path without node indices where the node is named (a rewrite upstream renumbers the
    nodes: ``graph/node 1 (y)`` may be ``graph/node 9 (y)`` after it), and its op type."""
    return (_NODE_INDEX.sub("node (", path), op_type)


def _group_remedy(paths: list[str], op_type: str, plan: dict
                  ) -> tuple[list[str], list[str], str]:
    """The remedies ``rewrite`` applies to a group's findings (its plan) as "KIND
    (PLUGIN)", their rules, and why not when none does ("" when every finding has one)."""
    chosen, rules, why = [], [], ""
    for path in paths:
        text = plan.get(plan_key(path, op_type))
        if text is None:
            continue
        if text.startswith("none: "):
            why = why or text[6:]
            continue
        rule = short_rule(text)
        head, _, plugin = rule.rpartition(" [")
        kind, _, rule_name = head.partition(" ")
        remedy = f"{kind} ({plugin.rstrip(']')})"
        if remedy not in chosen:
            chosen.append(remedy)
        if rule_name and rule_name not in rules:
            rules.append(rule_name)
    return chosen, rules, why


def check_as_dict(report: CheckReport, registry=None) -> dict[str, Any]:
    """A ``check`` result as the data of its report document. A group's ``remedies`` are
    what ``rewrite`` would apply for that target (``no_remedy`` says why none), when the
    result carries the plan (:func:`rewriter.api.check`); else what plugins offer."""
    targets = []
    for r in report.results:
        plan = getattr(r, "plan", None) or {}
        groups = []
        for g in group_findings(r.findings, registry):
            if plan:
                remedies, rules, why = _group_remedy(g.paths, g.op_type, plan)
            else:
                remedies, rules, why = list(g.remedies), [], ""
            groups.append({
                "op": g.op_label, "domain": domain_label(g.domain), "op_type": g.op_type,
                "version": g.version, "reason": g.reason,
                "reason_text": REASONS.get(g.reason, g.reason), "detail": g.detail,
                "count": g.count, "paths": g.paths, "remedies": remedies, "rules": rules,
                "no_remedy": why or (None if remedies else "no installed plugin offers one"),
            })
        targets.append({
            "target": r.target,
            "description": r.description,
            "runs": r.runs,
            "confirmed": r.confirmed,
            "confirmation": r.confirmation or None,
            "findings": [f.as_dict() for f in r.findings],
            "groups": groups,
            "warnings": list(r.warnings),
        })
    fixable = all(not g["no_remedy"] for t in targets for g in t["groups"])
    return {"model": report.model_path, "ok": report.ok,
            "fixable": (not report.ok) and fixable, "targets": targets,
            "size": {"input": report.size, "output": None}}


def _mark(kind: str) -> str:
    return {"ok": "[green]✓[/green]", "bad": "[red]✗[/red]", "warn": "[yellow]![/yellow]"}[kind]


def check_lines(doc: dict[str, Any], columns: int | None = None) -> list[str]:
    """One model's ``check`` for people: per target a verdict, then per group of findings the
    op (never cut) with its count and reason code, why, where, and the remedy ``rewrite``
    applies; wrapped to ``columns`` (plain text)."""
    from rewriter.console import wrap

    lines = [doc["model"]]
    if doc.get("error"):
        return lines + wrap(f"✗ error: {doc['error']}", indent=4, first=0, columns=columns)
    for t in doc["targets"]:
        if t["runs"]:
            how = (f" (confirmed: {t['confirmation'] or 'loaded'})" if t["confirmed"]
                   else " (static check)")
            lines += wrap(f"✓ {t['target']}: every node runs{how}", indent=4, first=0,
                          columns=columns)
            lines += _warning_lines(t, columns)
            continue
        groups = t["groups"]
        lines += wrap(f"✗ {t['target']}: {len(t['findings'])} finding(s) in {len(groups)} "
                      "group(s)", indent=4, first=0, columns=columns)
        for g in groups:
            lines += wrap(f"{g['op']} ×{g['count']} [{g['reason']}] {g['reason_text']}",
                          indent=6, first=2, columns=columns)
            lines += wrap(one_line(g["detail"]), indent=6, first=4, columns=columns)
            shown = ", ".join(g["paths"][:MAX_PATHS_SHOWN])
            more = (f" (and {g['count'] - MAX_PATHS_SHOWN} more)"
                    if g["count"] > MAX_PATHS_SHOWN else "")
            lines += wrap(one_line(f"at {shown}{more}"), indent=6, first=4, columns=columns)
            remedy = ("; ".join(g["remedies"]) if g["remedies"]
                      else f"none ({g['no_remedy']})")
            if g.get("rules"):
                remedy += f", rule {', '.join(g['rules'])}"
            lines += wrap(one_line(f"remedy: {remedy}"), indent=6, first=4, columns=columns)
        lines += _warning_lines(t, columns)
    return lines


def _warning_lines(target: dict[str, Any], columns: int | None) -> list[str]:
    """A target's warnings (no findings: what onnx's inference says of a model it runs)."""
    from rewriter.console import wrap

    out = []
    for warning in target.get("warnings") or ():
        out += wrap(one_line(f"! warning: {warning}"), indent=6, first=2, columns=columns)
    return out


def print_check(report: CheckReport | dict[str, Any], registry=None, stream=None) -> None:
    """Print one model's ``check`` (a CheckReport or its document)."""
    doc = report if isinstance(report, dict) else check_as_dict(report, registry)
    say = _plain(stream)
    for line in check_lines(doc):
        say(line)


def check_summary(docs: list[dict[str, Any]], targets: Sequence[str] = (),
                  plugins: Sequence[str] = (), libraries: Sequence[str] = (),
                  options: Sequence[tuple[str, str]] = ()) -> list[str]:
    """The closing lines of ``check``: how many models run, have findings, could not be
    checked (named); and what to do next, as a command to copy, with the user's targets,
    plugins and custom-op libraries ("2 of 3 with findings fixable: run `onnx-rewriter
    rewrite a.onnx -o a.rewritten.onnx -t openvino`")."""
    errors = [d for d in docs if d.get("error")]
    with_findings = [d for d in docs if not d.get("error") and not d["ok"]]
    fixable = [d for d in with_findings if d.get("fixable")]
    runs = len(docs) - len(errors) - len(with_findings)
    parts = [f"{runs} run{'s' if runs == 1 else ''} on every target"]
    if with_findings:
        parts.append(f"{len(with_findings)} with findings")
    if errors:
        parts.append(f"{len(errors)} could not be checked ("
                     + ", ".join(str(d["model"]) for d in errors) + ")")
    lines = [f"{len(docs)} model{'s' if len(docs) != 1 else ''}: " + ", ".join(parts)]
    if with_findings:
        hint = ("run `" + rewrite_command([str(d["model"]) for d in fixable], targets, plugins,
                                          libraries, options) + "`" if fixable else
                "no installed plugin fixes them (see `onnx-rewriter ops`)")
        if not fixable and ("--adapt-interface", None) not in options and any(
                "--adapt-interface" in (g.get("no_remedy") or "")
                for d in with_findings for t in d.get("targets", []) for g in t["groups"]):
            hint += "; an output they cannot return is adapted with --adapt-interface " \
                "(check again with it)"
        if fixable and len(fixable) > 1:
            hint += " for each of " + ", ".join(str(d["model"]) for d in fixable)
        lines.append(f"{len(fixable)} of {len(with_findings)} with findings fixable: {hint}")
    return lines


def rewrite_command(models: Sequence[str], targets: Sequence[str] = (),
                    plugins: Sequence[str] = (), libraries: Sequence[str] = (),
                    options: Sequence[tuple[str, str]] = ()) -> str:
    """The ``rewrite`` command line for one model (its output beside it, named
    ``NAME.rewritten.onnx``), or ``MODEL -o OUT`` for many, with the given options
    (``options``: more (flag, value) pairs, e.g. ``("--fix-dim", "batch=1")``;
    ``("--adapt-interface", None)`` a flag alone)."""
    import shlex
    from pathlib import Path

    words = ["onnx-rewriter"]
    for spec in plugins:
        words += ["-p", shlex.quote(spec)]
    if len(models) == 1:
        path = Path(models[0])
        out = path.with_name(f"{path.stem}.rewritten{path.suffix or '.onnx'}")
        words += ["rewrite", shlex.quote(str(path)), "-o", shlex.quote(str(out))]
    else:
        words += ["rewrite", "MODEL", "-o", "OUT"]
    for target in targets:
        words += ["-t", shlex.quote(target)]
    for library in libraries:
        words += ["--custom-ops-library", shlex.quote(library)]
    for flag, value in options:  # (value None: a flag alone)
        words += [flag] if value is None else [flag, shlex.quote(value)]
    return " ".join(words)


def print_inspect(info: dict[str, Any], stream=None) -> None:
    from rich.markup import escape
    from rich.table import Table

    console = _console(stream)
    console.print(f"[bold]{escape(info['path'])}[/bold]  ({info['file_size']:,} bytes)")
    console.print(
        f"IR version {info['ir_version']}; producer: {info['producer'] or '?'}", markup=False
    )
    opsets = ", ".join(f"{d} {v}" for d, v in info["opset_imports"].items())
    console.print(f"opset imports: {opsets or 'none'}", markup=False)
    io_table = Table(title="inputs and outputs")
    for col in ("", "name", "type", "shape"):
        io_table.add_column(col, overflow="fold")
    for kind in ("inputs", "outputs"):
        for v in info[kind]:
            shape = "?" if v["shape"] is None else "[" + ", ".join(map(str, v["shape"])) + "]"
            io_table.add_row(kind[:-1], escape(v["name"]), v["type"], escape(shape))
    console.print(io_table)
    ops = Table(title=f"operators ({info['nodes']:,} nodes)")
    for col in ("domain", "op_type", "since", "count"):
        ops.add_column(col, justify="right" if col in ("since", "count") else "left")
    for op in info["operators"]:
        label = op["op_type"] + (" (local function)" if op["local_function"] else "")
        since = "?" if op["since_version"] is None else str(op["since_version"])
        ops.add_row(escape(op["domain"]), escape(label), since, f"{op['count']:,}")
    console.print(ops)
    if info["functions"]:
        names = ", ".join(
            f"{f['domain']}:{f['name']} ({f['nodes']} nodes)" for f in info["functions"]
        )
        console.print(f"model-local functions: {names}", markup=False)
    sub = info["subgraphs"]
    console.print(f"subgraphs: {sub['count']} (max depth {sub['max_depth']})")
    t = info["tensors"]
    console.print(
        f"tensors with data: {t['count']:,}, {t['bytes']:,} bytes "
        f"({t['external_bytes']:,} in external data)"
    )
    for f in info["external_data"]:
        console.print(
            f"external data: {f['location']} ({f['size']:,} bytes, {f['tensors']} tensors)",
            markup=False,
        )


def _registered_counts(registered: dict[str, list]) -> str:
    """What a plugin registered, counted by kind ("12 decompositions, 3 kernels")."""
    parts = []
    for kind, items in registered.items():
        if items:
            word = kind if len(items) != 1 else (kind[:-2] if kind.endswith("sses")
                                                 else kind[:-1])
            parts.append(f"{len(items)} {word}")
    return ", ".join(parts) or "nothing"


def print_plugins(rows: list[dict[str, Any]], stream=None) -> None:
    """One line per plugin (wrapped under its name): where it comes from and how much it
    registered; ``plugins NAME`` lists what."""
    from rewriter.console import wrap

    say = _plain(stream)
    name_width = min(max((len(r["name"]) for r in rows), default=0), 24)
    for row in rows:
        dist = row["distribution"] or "-p (this run)"
        if row["version"]:
            dist += f" {row['version']}"
        if row["builtin"]:
            dist += " (built-in)"
        text = f"{row['name']:<{name_width}}  {_registered_counts(row['registered'])}; {dist}"
        for line in wrap(text, indent=name_width + 2, first=0):
            say(line)
    say()
    say(f"{len(rows)} plugin(s); details: onnx-rewriter plugins NAME")


def print_plugin(row: dict[str, Any], stream=None) -> None:
    """Everything one plugin registered, a kind per paragraph, items wrapped (never cut)."""
    from rewriter.console import wrap

    say = _plain(stream)
    dist = row["distribution"] or "-p (this run)"
    say(f"{row['name']}: {dist} {row['version'] or ''}".rstrip()
        + (" (built-in)" if row["builtin"] else ""))
    for kind, items in row["registered"].items():
        if not items:
            continue
        say(f"{kind} ({len(items)}):")
        for line in wrap(", ".join(map(str, items)), indent=2):
            say(line)


def print_operators(rows: list[dict[str, Any]], stream=None) -> None:
    """Operators grouped by domain, one line each: the op (never cut), its remedy, opsets,
    accuracy, oracle; dtypes on a wrapped line below when listed."""
    from rewriter.console import wrap

    say = _plain(stream)
    say(f"operators ({len(rows)})")
    domain = None
    for r in rows:
        if r["domain"] != domain:
            domain = r["domain"]
            say()
            say(f"{domain}:")
        opsets = ", ".join(r["opsets"]) or "any"
        text = (f"{r['op_type']}  {r['remedy']}; opsets {opsets}; {r['accuracy']}; "
                f"oracle: {r.get('oracle') or '-'}")
        for line in wrap(text, indent=6, first=2):
            say(line)
        if r["dtypes"]:
            for line in wrap("dtypes: " + ", ".join(r["dtypes"]), indent=6, first=4):
                say(line)
        if r.get("code"):
            for line in _code_lines(r["code"]):
                say(line)


def _code_lines(locations: list[str]) -> list[str]:
    """``code:`` and each ``module:function`` on its own line; one too long for the
    terminal is broken after its colon (a module path and a function name are never cut)."""
    from rewriter.console import width

    lines = []
    for i, where in enumerate(locations):
        prefix = "    code: " if i == 0 else " " * 10
        module, colon, function = where.partition(":")
        if len(prefix + where) > width() and colon:
            lines += [prefix + module + ":", " " * 12 + function]
        else:
            lines.append(prefix + where)
    return lines


def dumps(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=False)


EXPLAIN_DECLINED_SHOWN = 4


def rewrite_lines(report, columns: int | None = None) -> list[str]:
    """``rewrite`` for people (plain text, wrapped to ``columns``, op names never cut):
    the remedies by op, what the result needs to run, node counts, the structural checks,
    findings left, the verdict line, then ``--explain``'s groups."""
    from rewriter.console import wrap

    def para(text: str, indent: int = 4, first: int = 0) -> list[str]:
        return wrap(one_line(text), indent=indent, first=first, columns=columns)

    title = "plan (dry run)" if report.dry_run else "rewrite"
    lines = [f"{report.model} → {report.output or '(not written)'}"]
    if report.applied:
        lines.append(f"{title}: remedies by op")
        for (kind, plugin, rule, op), n in sorted(report.applied.items()):
            lines += para(f"{op} ×{n}: {short_rule(f'{kind} {rule} [{plugin}]')}",
                          indent=6, first=2)
    for repair in getattr(report, "repairs", None) or []:
        lines += para(f"repair: {repair}", indent=4, first=0)
    for change in getattr(report, "interface", None) or []:
        lines += para(f"interface changed (--adapt-interface): {change}; rewriter.session() "
                      "and `onnx-rewriter run` give the original back", indent=4, first=0)
    needs = getattr(report, "kernels", None) or {}
    if needs.get("native"):
        lines += para("runs natively in onnxruntime-extensions (no Python at run time): "
                      + ", ".join(f"{v['op']}" + (f" as {k}" if k != v["op"] else "")
                                  for k, v in sorted(needs["native"].items())))
    if needs.get("python"):
        lines += para("runs Python kernels: " + ", ".join(
            f"{v['op']} ({', '.join(v['inputs'])}) → ai.onnx.contrib::{k} [{v['plugin']}]"
            for k, v in sorted(needs["python"].items())))
    if needs:
        lines += para("run it with `onnx-rewriter run` or rewriter.session(): they register "
                      "what the model's metadata lists")
    if report.before and report.after:
        lines.append(f"nodes: {report.before.nodes:,} → {report.after.nodes:,}; "
                     f"ops: {len(report.before.ops)} kinds → {len(report.after.ops)} kinds")
    if getattr(report, "cleanup", ""):
        lines.append(f"cleanup: {report.cleanup}")
    comparison = getattr(report, "comparison", None)
    for name, verdict in report.verification.items():
        if name == "compare" and (comparison is not None or report.verdict == "unchanged"):
            continue  # the verdict line says it
        mark = "✓" if verdict == "ok" else "!"
        if not (verdict == "ok" or verdict.startswith(("pre-existing", "skipped"))):
            mark = "✗"
        lines += para(f"{mark} {name}: {verdict}")
    if report.remaining:
        lines.append(f"✗ {len(report.remaining)} finding(s) not fixed:")
        for g in group_findings(report.remaining):
            lines += para(f"{g.op_label} ×{g.count} on {g.target} [{g.reason}]: {g.detail}",
                          indent=6, first=2)
    if comparison is not None and hasattr(comparison, "regime_dicts"):
        skipped = [r for r in comparison.regime_dicts() if r["status"] == "skipped"]
        if skipped:  # what ran is in the verdict line; what did not, and why, here
            lines += para("input regimes not run: " + "; ".join(
                f"{r['name']} ({r['reason']})" for r in skipped))
    if not report.dry_run:
        lines += para(verdict_line(report))
    for item in report.explain:
        f, count = item["finding"], item.get("count", 1)
        op = str(OpId(f["domain"], f["op_type"], f.get("version")))
        lines += para(f"explain {op} ×{count} on {f['target']}, at "
                      + ", ".join(item["paths"][:MAX_PATHS_SHOWN])
                      + (f" and {count - MAX_PATHS_SHOWN} more" if count > MAX_PATHS_SHOWN
                         else ""), indent=4)
        lines += _explain_candidates(item["candidates"], str(OpId(f["domain"], f["op_type"])),
                                     para)
    return lines


def _explain_candidates(candidates: list[dict], op: str, para) -> list[str]:
    """One finding's ``--explain`` lines: the chosen remedy; else, first, the fact that
    matters when no plugin registers a decomposition or kernel for the op; then the plugins'
    own declines (up to EXPLAIN_DECLINED_SHOWN); the passes that do not apply in one line
    (``--json`` lists every candidate and why)."""
    chosen = [c for c in candidates if c["accepted"]]
    # a pass the finding is about (opset conversion of an opset finding) declines with a
    # reason that matters, as a remedy's does; the others are boilerplate
    remedies = [c for c in candidates if not c["accepted"] and c["plugin"] != "-"
                and (c["kind"] != "pass" or c.get("relevant"))]
    passes = [c for c in candidates if not c["accepted"] and c["kind"] == "pass"
              and not c.get("relevant")]
    lines: list[str] = []
    for c in chosen:
        lines += para("chosen: " + short_rule(f"{c['kind']} {c['rule']} [{c['plugin']}]"),
                      indent=6, first=2)
    if not chosen and not any(c["kind"] != "pass" for c in remedies):
        lines += para(f"no plugin registers a remedy for {op} (no decomposition, no kernel)",
                      indent=6, first=2)
    for c in remedies[:EXPLAIN_DECLINED_SHOWN]:
        rule = short_rule(f"{c['kind']} {c['rule']} [{c['plugin']}]")
        lines += para(f"{rule} — declined: {c['why']}", indent=6, first=2)
    if len(remedies) > EXPLAIN_DECLINED_SHOWN:
        lines.append(f"  (and {len(remedies) - EXPLAIN_DECLINED_SHOWN} more declined; --json "
                     "lists them)")
    if passes and not chosen:
        lines += para("passes that do not apply: " + ", ".join(c["plugin"] for c in passes)
                      + " (--json says why)", indent=6, first=2)
    return lines


def print_rewrite(report, stream=None) -> None:
    say = _plain(stream)
    for line in rewrite_lines(report):
        say(line)


def verdict_line(report) -> str:
    """The last line of ``rewrite``: the verdict, why, and what was written."""
    verdict, reason = report.verdict, one_line(report.verdict_reason)
    if report.written:
        where = f"written to {report.output}"
    elif report.output is None and verdict in ("mismatch", "unverified") and report.verify:
        flag = "--keep-failed" if verdict == "mismatch" else "--allow-unverified"
        where = f"nothing written ({flag} writes it)"
    else:
        where = "nothing written"
    if not verdict:  # nothing was changed (findings without a remedy)
        return f"✗ {reason}; {where}"
    if verdict == "unverified" and not report.verify:
        line = f"! not verified ({reason}); {where}"
    elif verdict == "unchanged":
        line = f"✓ {reason.split(' (')[0]}" + (f"; {where}" if report.written else "")
    else:
        mark = {"verified": "✓", "mismatch": "✗"}.get(verdict, "!")
        line = f"{mark} {verdict}: {reason}; {where}"
    if report.remaining:  # the verdict is about what changed; the rest does not run yet
        what = "what --partial changed" if report.written else "what was changed"
        line = f"✗ {len(report.remaining)} finding(s) left; {what}: " + line.split(" ", 1)[1]
    return line


def _num(x, fmt: str = ".3g") -> str:
    if x is None:
        return "-"
    return format(x, fmt) if x == x and abs(x) != float("inf") else str(x)


def print_compare(report, stream=None) -> None:
    """``onnx-rewriter compare``: a verdict per target, a row per output, the localization."""
    from rich.markup import escape
    from rich.table import Table

    console = _console(stream)
    head = escape(report.rewritten)
    if report.original:
        head = f"{escape(report.original)} → {head}"
    console.print(f"[bold]{head}[/bold]")
    inputs = report.inputs or {}
    if inputs:
        how = inputs.get("source", "")
        if how == "generated":
            seeds = inputs.get("seeds", [])
            how = f"generated (seed{'s' if len(seeds) > 1 else ''} " \
                  f"{', '.join(map(str, seeds))})"
        shapes = ", ".join(f"{k}: {v}" for k, v in inputs.get("shapes", {}).items())
        console.print(f"inputs: {inputs.get('sets', 0)} set(s), {escape(how)}; "
                      f"{escape(shapes)}")
    from rewriter.report.document import regime_rows

    rows = regime_rows({"regimes": report.regime_dicts()})
    if len(rows) > 1:
        console.print("regimes: " + escape("; ".join(
            f"{name} ({sets})" if state == "ran" else f"{name} ({sets}: {state})"
            for name, sets, state, _ in rows)))
    if report.oracle == "expected":
        console.print("reference outputs: given (expected)")
    elif report.oracle:
        console.print(f"original evaluated on: {escape(report.oracle)} (the oracle)")
    for attempt in report.oracle_attempts:
        if attempt["status"] != "ok":
            console.print(f"  (not on {escape(attempt['target'])}: "
                          f"{escape(one_line(attempt['error']))})")
    if report.error or report.oracle_error:
        console.print(f"[yellow]![/yellow] unverified: could not compare: "
                      f"{escape(one_line(report.why_not_run()))}")
        return
    for t in report.targets:
        where = t.target if not t.runtime else f"{t.target} (run on {t.runtime})"
        if t.status == "error":
            mark = "[yellow]![/yellow]"
            console.print(f"{mark} {escape(where)}: could not run "
                          f"({t.error_kind}): {escape(one_line(t.error))}")
            continue
        mark = "[green]✓[/green]" if t.status == "equal" else "[red]✗[/red]"
        verdict = "equal within tolerance" if t.status == "equal" else "mismatch"
        console.print(f"{mark} {escape(where)}: {verdict} (max abs error {_num(t.max_abs)})")
        table = Table(show_edge=False, pad_edge=False, box=None)
        for col in ("output", "shape", "dtype", "max abs", "max rel", "mismatch", "cosine", ""):
            table.add_column(col, justify="right" if col in (
                "max abs", "max rel", "mismatch", "cosine") else "left")
        for c in t.outputs:
            shape = str(list(c.actual_shape)) if c.actual_shape is not None else "-"
            dtype = c.actual_dtype or "-"
            state = "ok" if c.ok else "[red]differs[/red]"
            if c.compared_as == "distribution":
                state += " (as a distribution)"
            table.add_row(escape(c.name), shape, escape(dtype), _num(c.max_abs),
                          _num(c.max_rel), f"{c.mismatch_fraction:.2%}",
                          _num(c.cosine, ".6f"), state)
        console.print(table)
        for c in t.outputs:
            if not c.ok:
                console.print(f"  {escape(c.name)}: {escape(one_line(c.detail or 'differs'))}")
        loc = t.localization
        if loc is not None:
            console.print(f"  localization: {escape(one_line(loc.message))}")
            for check in loc.checks:
                r = check.region
                s = r.stamp
                rule = f"{s.rule} [{s.plugin}]" if s else "no provenance"
                errors = [c.max_abs for c in check.outputs if c.max_abs is not None]
                worst = max(errors) if errors else None
                state = "diverges" if check.diverges else "agrees"
                console.print(f"    {escape(r.label)} — {escape(rule)}: {state} "
                              f"(max abs {_num(worst)})")
    console.print(f"{report.verdict}: {escape(report.summary())}")
