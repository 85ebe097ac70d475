"""Show a :class:`LogReport`: rich tables on a terminal, Markdown for a write-up.

Both views are built from the same rows (:func:`sections`), so what a person
reads on screen and what they paste into an incident note cannot drift apart.
A person should not have to grep: the timeline folds rank repeats, the
windowed metrics become one summary row, and every row cites its line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..safetext import safe_text
from .models import Event, LogReport, ServerLog
from .patterns import BY_ID
from .quantities import QUANTITIES


@dataclass
class Section:
    title: str
    columns: list[str]
    rows: list[list[str]]
    note: str = ""


def fmt(value: Any, unit: str = "", width: int = 90) -> str:
    """A value as a person reads it: long lists shortened, units attached."""
    if isinstance(value, list) and len(value) > 8 and all(isinstance(x, (int, float)) for x in value):
        text = f"[{', '.join(map(str, value[:3]))}, ..., {', '.join(map(str, value[-2:]))}] " \
               f"({len(value)} values)"
    elif isinstance(value, float):
        text = f"{value:,.4g}" if abs(value) >= 1e5 else f"{value:g}"
    elif isinstance(value, int) and not isinstance(value, bool):
        text = f"{value:,}"
    elif isinstance(value, (dict, list)):
        text = json.dumps(value, default=str)
    else:
        text = str(value)
    if unit and text and unit not in ("x", "%"):
        text += f" {unit}"
    elif unit:
        text += unit
    return text if len(text) <= width else text[: width - 3] + "..."


def shown(value: Any, raw: str | None, unit: str = "") -> str:
    """The number as the engine printed it ("19.40"), else formatted."""
    if raw is not None and isinstance(value, float):
        return fmt(raw, unit)
    return fmt(value, unit)


def describe(ev: Event) -> str:
    """One timeline cell for an event."""
    pat = BY_ID[ev.pattern]
    if pat.kind == "args":
        args = ev.values.get("args") or {}
        shown = [f"{k}={v if isinstance(v, (int, float, str)) else fmt(v, width=60)}"
                 for k, v in args.items() if k not in ("model_tag", "__raw__") and v is not None]
        return "arguments: " + ", ".join(shown)
    if pat.kind == "config":
        parts = [f"resolved config of v{ev.values.get('version')}"]
        for name in ("max_model_len", "enable_prefix_caching", "cudagraph_mode",
                     "cudagraph_capture_sizes", "max_cudagraph_capture_size", "speculative_method",
                     "num_speculative_tokens"):
            if name in ev.values:
                parts.append(f"{QUANTITIES[name].label} {fmt(ev.values[name])}")
        return "; ".join(parts)
    cells = []
    for name, value in ev.values.items():
        q = QUANTITIES.get(name)
        if q is None or q.kind == "raw" and name != "spec_per_position":
            continue
        if q.kind == "bool" and value is True:
            cells.append(q.label)
        else:
            cells.append(f"{q.label} {fmt(value, q.unit)}")
    return "; ".join(cells) or ev.text


_SERIES_TITLES = {"spec": "speculative decoding / batch metrics", "runtime": "runtime stats"}


def _series_rows(log: ServerLog) -> list[tuple[int, list[str]]]:
    """One summary row per windowed metric (spec decoding, engine stats, batch lines)."""
    out: list[tuple[int, list[str]]] = []
    groups: dict[str, list[Event]] = {}
    for ev in log.events:
        if BY_ID[ev.pattern].series:
            groups.setdefault(ev.pattern, []).append(ev)
    for pid, evs in groups.items():
        first, last = evs[0], evs[-1]
        parts = [f"{len(evs)} windows"]
        for name in ("spec_mean_acceptance_length", "spec_accept_length", "spec_accept_rate",
                     "kv_cache_usage_pct", "token_usage", "mamba_usage", "running_reqs",
                     "decode_running_reqs", "prefill_new_tokens"):
            vals = [e.values[name] for e in evs if isinstance(e.values.get(name), (int, float))]
            vals = [v for v in vals if v == v]
            if vals:
                q = QUANTITIES[name]
                parts.append(f"{q.label} {fmt(min(vals))}-{fmt(max(vals), q.unit)} "
                             f"(last {fmt(vals[-1])})")
        where = f"lines {first.line}-{last.line}" if len(evs) > 1 else f"line {first.line}"
        title = _SERIES_TITLES.get(BY_ID[pid].kind, "windows")
        out.append((first.line, [str(first.line), first.time or "", "",
                                 f"{title} [{pid}]: " + "; ".join(parts) + f" ({where})"]))
    return out


def sections(report: LogReport) -> list[Section]:
    """Every table of the report, in reading order."""
    log = report.log
    out: list[Section] = []
    rows: list[tuple[int, list[str]]] = []
    for ev in log.events:
        if BY_ID[ev.pattern].series:
            continue
        proc = ev.process or ""
        if ev.repeats > 1:
            proc += f" (x{ev.repeats})"
        rows.append((ev.line, [str(ev.line), ev.time or "", proc.strip(), describe(ev)]))
    rows += _series_rows(log)
    for err in log.errors:
        text = "ERROR " + err.headline + (f" -> {err.exception}" if err.exception and
                                          err.exception != err.headline else "")
        proc = (err.process or "") + (f" (x{err.count})" if err.count > 1 else "")
        rows.append((err.line, [str(err.line), err.time or "", proc.strip(), text]))
    rows.sort(key=lambda r: r[0])
    out.append(Section("What the engine said", ["line", "time", "process", "event"],
                       [r for _, r in rows]))

    obs_rows = []
    for o in log.observed.values():
        q = QUANTITIES.get(o.name)
        other = [f"{fmt(s['value'])} (line {s['line']})" for s in o.seen
                 if repr(s["value"]) != repr(o.value)]
        obs_rows.append([o.label, shown(o.value, o.raw, q.unit if q else ""), str(o.line),
                         "; ".join(other)])
    if obs_rows:
        out.append(Section("Observed quantities", ["quantity", "value", "line", "other values"],
                           obs_rows))
    if log.spec_windows:
        out.append(_spec_section(log))
    if log.errors:
        out.append(Section("Errors", ["line", "process", "error", "first frame", "raised at",
                                      "count"],
                           [[str(e.line), e.process or "", _err_text(e.headline, e.exception,
                                                                     e.cause),
                             e.first_frame or "", e.last_frame or "", str(e.count)]
                            for e in log.errors]))
    if log.traps:
        out.append(Section("Warnings (known traps)", ["level", "trap", "what", "lines"],
                           [[t.level, t.code, t.text + (f" Next: {t.hint}" if t.hint else ""),
                             ", ".join(map(str, t.lines))] for t in log.traps]))
    if report.snapshot:  # the answer to the question asked goes first
        out.insert(0, _compare_section(report))
        if report.checks:
            out.insert(1, Section("The release's code on this server's configuration",
                                  ["recipe", "level", "finding"],
                                  [[c["recipe"], c["level"], c["text"]] for c in report.checks],
                                  "recipes run with the engine's own numbers from this log"))
    return out


def _err_text(headline: str, exception: str | None, cause: str | None) -> str:
    text = headline
    if exception and exception != headline:
        text += f" -> {exception}"
    if cause and cause not in (headline, exception):
        text += f" (caused by {cause})"
    return text


def _spec_section(log: ServerLog) -> Section:
    wins = log.spec_windows
    shown = wins if len(wins) <= 12 else wins[:6] + wins[-6:]
    rows = []
    for w in shown:
        length = w.get("spec_mean_acceptance_length", w.get("spec_accept_length"))
        rate = w.get("spec_accept_rate", w.get("spec_draft_acceptance_pct"))
        rows.append([str(w["line"]), w.get("time") or "", fmt(length) if length is not None else "",
                     fmt(rate) if rate is not None else "",
                     fmt(w.get("spec_per_position", "")),
                     f"{w.get('spec_accepted_tokens', '')}/{w.get('spec_drafted_tokens', '')}"
                     if "spec_drafted_tokens" in w else ""])
    note = ("windowed values (each line covers the interval since the previous one), not "
            "per-request numbers" + (f"; {len(wins) - 12} middle windows not shown"
                                     if len(wins) > 12 else ""))
    return Section("Speculative decoding", ["line", "time", "acceptance length",
                                            "acceptance rate", "per position",
                                            "accepted/drafted"], rows, note)


def _compare_section(report: LogReport) -> Section:
    rows = []
    for c in report.comparisons:
        verdict = {"match": "match", "mismatch": "MISMATCH"}.get(c.status, c.status)
        obs = report.log.observed.get(c.quantity)
        q = QUANTITIES.get(c.quantity)
        unit = q.unit if q and q.unit in ("%", "x") else ""
        predicted = sorted(c.predicted) if isinstance(c.predicted, list) and all(
            isinstance(x, int) for x in c.predicted) else c.predicted
        rows.append([c.label, (shown(c.observed, obs.raw if obs else None, unit)
                               if c.observed is not None else "")
                     + (f" (line {c.observed_line})" if c.observed_line else ""),
                     fmt(predicted, unit) if c.predicted is not None else "",
                     c.recipe or "", verdict, c.note])
    ran = "; ".join(f"{k}: {v}" for k, v in report.recipes.items()) or "no recipe applies"
    note = f"{report.release} ({report.snapshot}); flags from {report.flags_from}. Recipes: {ran}."
    if report.inputs:
        note += " Taken from the log: " + "; ".join(taken_from_log(report.inputs)) + "."
    if report.notes:
        note += " " + " ".join(f"Note: {n}." for n in report.notes)
    return Section("Predicted vs observed", ["quantity", "observed", "predicted", "recipe",
                                             "verdict", "note"], rows, note)


def taken_from_log(inputs: list[dict[str, Any]]) -> list[str]:
    """One phrase per option the log gave the recipes: value, line, what was read, for whom."""
    grouped: dict[tuple[str, str, Any, Any], list[str]] = {}
    for i in inputs:
        key = (str(i["option"]), str(i["value"]), i["line"], i["quantity"])
        grouped.setdefault(key, []).append(str(i["recipe"]))
    out = []
    for (option, value, line, what), recipes in grouped.items():
        said = what if " " in str(what) else QUANTITIES[what].label if what in QUANTITIES else what
        out.append(f"--set {option}={value} (line {line}: {said}; used by {', '.join(recipes)})")
    return out


def headline(report: LogReport) -> str:
    log = report.log
    eng = {"vllm": "vLLM", "sglang": "SGLang"}.get(log.engine or "", "unknown engine")
    parts = [f"{log.path}: {eng} {log.version or '(version not printed)'}", f"{log.lines} lines",
             f"{log.starts} start-up{'s' if log.starts != 1 else ''}",
             f"{len(log.errors)} error{'s' if len(log.errors) != 1 else ''}",
             f"{len(log.traps)} warning{'s' if len(log.traps) != 1 else ''}"]
    if report.snapshot:
        parts.append(f"{len(report.mismatches)} mismatch{'es' if len(report.mismatches) != 1 else ''}")
        parts.append(f"{len(report.unpredicted)} not predicted")
    return ", ".join(parts)


def render_markdown(report: LogReport) -> str:
    """The report as Markdown (tables with pipes escaped)."""
    out = [f"## Server log — {headline(report)}", ""]
    if not report.log.events and not report.log.errors:
        out += ["No engine line recognised (is this a vLLM or SGLang server log?).", ""]
    for s in sections(report):
        out += [f"### {s.title}", ""]
        if s.note:
            out += [f"_{s.note}_", ""]
        out.append("| " + " | ".join(s.columns) + " |")
        out.append("|" + "---|" * len(s.columns))
        out += ["| " + " | ".join(_md(c) for c in row) + " |" for row in s.rows]
        out.append("")
    return safe_text("\n".join(out))  # a log's text (and what its escapes decode to) is data


def _md(cell: str) -> str:
    return cell.replace("|", "\\|").replace("\n", " ")


#: Rows of one table drawn on the console (the whole table is in --json and --markdown).
CONSOLE_ROWS = 400


def render_console(report: LogReport, console: Any) -> None:
    """Rich tables; mismatches and errors in red, warnings in yellow."""
    from rich.table import Table
    from rich.text import Text

    console.print(Text(headline(report), style="bold"))  # the path and version are data
    if not report.log.events and not report.log.errors:
        console.print("[yellow]no engine line recognised (is this a vLLM or SGLang server log?)[/]")
    colours = {"error": "red", "warn": "yellow", "info": "blue", "MISMATCH": "bold red",
               "match": "green", "ok": "green"}
    for s in sections(report):
        rows, cut = s.rows[:CONSOLE_ROWS], len(s.rows) - CONSOLE_ROWS
        caption = s.note or ""
        if cut > 0:  # a terminal table of tens of thousands of rows takes minutes to draw
            caption = (caption + "; " if caption else "") + (
                f"the first {CONSOLE_ROWS} of {len(s.rows):,} rows; --json or --markdown has all")
        t = Table(title=Text(s.title), caption=Text(caption) if caption else None, show_lines=False)
        for c in s.columns:
            t.add_column(c, overflow="fold")
        for row in rows:
            t.add_row(*[Text(safe_text(c), style=colours.get(c, "")) for c in row])
        console.print(t)
