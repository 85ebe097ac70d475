"""``recon diff``, ``recon bisect``, ``recon has``: thin layers over recon.diffing, bisect and has."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape

from ..errors import ReconError
from .output import console, emit_json, quiet_stdout

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from ..diffing.bisect import BisectResult
    from ..diffing.has import HasResult
    from ..diffing.model import DiffResult, FunctionChange

#: Exit codes of ``recon has`` (errors keep ReconError's 2 and 3).
HAS_EXIT = {"yes": 0, "no": 1, "different": 4}

_KIND_STYLE = {"added": "green", "removed": "red", "renamed": "magenta", "signature": "yellow",
               "body": "yellow", "decorators": "yellow", "docstring": "blue", "moved": "dim",
               "formatting": "dim", "appeared": "green", "disappeared": "red", "same": "dim",
               "first": "dim", "absent": "dim", "default": "yellow", "annotation": "yellow",
               "value": "yellow"}


def _kind(kind: str) -> str:
    style = _KIND_STYLE.get(kind, "")
    return f"[{style}]{kind}[/]" if style else kind


def _table(title: str, *columns: str) -> Table:
    """A table whose cells wrap instead of being cut (names and values must stay whole)."""
    from rich.table import Table

    t = Table(title=title)
    for col in columns:
        t.add_column(col, overflow="fold")
    return t


def _write_report(path: str, text: str) -> None:
    from ..acquire.writer import write_text

    if path == "-":
        sys.stdout.write(text)
        return
    write_text(Path(path), text)
    console.print(f"report written to [bold]{escape(str(path))}[/]")


# -- diff ------------------------------------------------------------------------------------------
def diff_cmd(
    a: str = typer.Argument(..., help="Side A: snapshot name/folder or any SOURCE (pip:vllm==0.32.0, docker:IMG, ...)."),
    b: str = typer.Argument(..., help="Side B, the same way."),
    section: list[str] = typer.Option(None, "--section", help="Sections to show: image, distributions, files, functions (repeat or comma-separate; default all)."),
    focus: str = typer.Option(None, "--focus", help="Only functions on the call chain around this one (callers and callees)."),
    depth: int = typer.Option(2, "--depth", help="With --focus: call edges up and down from the target."),
    show: bool = typer.Option(False, "--show", help="Print each changed function's unified diff, syntax-highlighted."),
    all_moved: bool = typer.Option(False, "--moved", help="List moved-only functions too (they are always counted)."),
    files: bool = typer.Option(False, "--files", help="List every changed file (default: counts and the first 40)."),
    limit: int = typer.Option(200, "--limit", min=0, help="List at most this many changes per table (functions, class fields, module constants) and per-function diffs (--show, --markdown, --html); 0: no limit. --json always has them all."),
    context: int = typer.Option(3, "--context", "-U", help="Context lines in diffs."),
    package: str = typer.Option(None, "--package", help="Package to take from images holding several."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    markdown: str = typer.Option(None, "--markdown", help="Write a Markdown report to this file ('-': stdout)."),
    html_out: str = typer.Option(None, "--html", help="Write a standalone HTML report to this file."),
) -> None:
    """What changed between A and B: image config, installed packages, files, functions.

    Functions are compared by normalized AST: a function that only moved,
    or whose formatting or comments changed, is counted but not listed as a
    change; docstring-only edits are their own kind; signature changes are
    named as `griffe check` names them. With the functions come class fields
    (dataclass/pydantic defaults) and module constants (`module:NAME`),
    compared on normalized source.
    """
    from ..diffing import diff
    from ..diffing.render import to_html, to_markdown

    result = diff(a, b, sections=section, focus=focus, depth=depth,
                  show=show or bool(markdown) or bool(html_out), context=context, package=package)
    if markdown:
        _write_report(markdown, to_markdown(result, all_moved=all_moved, limit=limit))
    if html_out:
        _write_report(html_out, to_html(result, all_moved=all_moved, limit=limit))
    if as_json:
        emit_json(result.to_json())
        return
    if markdown == "-":
        return
    _print_diff(result, show=show, all_moved=all_moved, all_files=files, limit=limit)


def _print_diff(result: DiffResult, *, show: bool, all_moved: bool, all_files: bool,
                limit: int) -> None:
    from ..diffing.render import keyed_rows, rows

    r = rows(result, all_moved=all_moved)
    console.print(f"[bold]A[/] {escape(result.a.label)}  [dim]{escape(result.a.ref or '')}[/]")
    console.print(f"[bold]B[/] {escape(result.b.label)}  [dim]{escape(result.b.ref or '')}[/]")
    if "image" in r:
        img = r["image"]
        if img["note"]:
            console.print(f"[bold]image[/]: [dim]{escape(img['note'])}[/]")
        if img["fields"] or img["env"] or img["labels"] or img["layers"]:
            t = _table("image", "what", "key", "A", "B")
            for k, va, vb in img["fields"]:
                t.add_row("config", escape(k), escape(str(va)), escape(str(vb)))
            for what in ("env", "labels", "layers"):
                for k, change, va, vb in img[what]:
                    t.add_row(f"{what} ({_kind(change)})", escape(k), escape(str(va)), escape(str(vb)))
            console.print(t)
        elif not img["note"]:
            console.print("[bold]image[/]: no differences")
    if result.distributions is not None:
        dr = keyed_rows(result.distributions)
        if dr:
            t = _table("distributions", "package", "change", "A", "B")
            for k, change, va, vb in dr:
                t.add_row(escape(k), _kind(change), escape(str(va)), escape(str(vb)))
            console.print(t)
        else:
            console.print("[bold]distributions[/]: no differences")
    if result.files is not None:
        f = result.files
        console.print(f"[bold]files[/]: {len(f.added)} added, {len(f.removed)} removed, "
                      f"{len(f.changed)} changed, {f.unchanged} unchanged (by sha256)")
        listed = [("added", p) for p in f.added] + [("removed", p) for p in f.removed] + \
            [("changed", p) for p in f.changed]
        shown = listed if all_files else listed[:40]
        for change, path in shown:
            console.print(f"  {_kind(change):>8} {escape(path)}", highlight=False, soft_wrap=True)
        if len(shown) < len(listed):
            console.print(f"  [dim]... {len(listed) - len(shown)} more (--files lists all)[/]")
    if result.functions is not None:
        _print_functions(result, all_moved=all_moved, limit=limit)
    if result.fields is not None:
        _print_fields(result, limit=limit)
    if show and result.functions is not None:
        from ..diffing.render import head

        for c in head(result.functions.changes, limit)[0]:
            _print_change_diff(c)
    console.print(f"[dim]{result.seconds:.2f}s[/]")


def _print_fields(result: DiffResult, *, limit: int) -> None:
    """Class-body fields and module constants whose value or annotation changed, or that came or went."""
    from rich.markup import escape

    from ..diffing.render import constant_row, field_row, head

    fl = result.fields
    assert fl is not None
    if fl.changes:
        t = _table("class fields", "kind", "field", "A", "B", "where")
        shown, more = head(fl.changes, limit)
        for c in shown:  # values are Python source: "list[str]" is not markup
            row = field_row(c)
            t.add_row(_kind(c.kind), escape(row["field"]), escape(row["a"]), escape(row["b"]),
                      escape(row["where"] + (f" (class was {row['old_class']})"
                                             if row["old_class"] else "")))
        console.print(t)
        _print_left_out(more, "class field changes", limit)
    if fl.constants:
        t = _table("module constants", "kind", "constant", "A", "B", "where")
        shown_constants, more = head(fl.constants, limit)
        for cc in shown_constants:
            crow = constant_row(cc)
            t.add_row(_kind(cc.kind), escape(crow["constant"]), escape(crow["a"]),
                      escape(crow["b"]), escape(crow["where"]))
        console.print(t)
        _print_left_out(more, "module constant changes", limit)
    focus = " (classes owning a function on the focus chain)" if fl.focus else ""
    console.print(f"[bold]class fields[/]: {fl.summary()}{focus}", soft_wrap=True, highlight=False)
    focus = " (modules owning a function on the focus chain)" if fl.focus else ""
    console.print(f"[bold]module constants[/]: {fl.constant_summary()}{focus}", soft_wrap=True,
                  highlight=False)


def _print_left_out(count: int, what: str, limit: int) -> None:
    """The line the reports print too, so ``--limit`` reads the same on screen and on paper."""
    from ..diffing.render import left_out

    if count:
        console.print(f"[dim]... {escape(left_out(count, what, limit))}[/]", soft_wrap=True,
                      highlight=False)


def _print_functions(result: DiffResult, *, all_moved: bool, limit: int) -> None:
    from rich.table import Table

    from ..diffing.render import head

    fd = result.functions
    assert fd is not None
    if fd.focus:
        console.print(f"[bold]focus[/]: {escape(str(fd.focus['target']))} depth {fd.focus['depth']} "
                      f"({len(fd.focus['members'])} functions on the chain)", soft_wrap=True)
    if fd.note:
        console.print(f"[yellow]{escape(fd.note)}[/]")
    if fd.changes:
        t = Table("kind", title="functions")
        t.add_column("function", overflow="fold")
        t.add_column("where", overflow="fold")
        t.add_column("detail", overflow="fold")
        shown, more = head(fd.changes, limit)
        for c in shown:
            t.add_row(_kind(c.kind), escape(c.qualname), escape(c.where()), escape(c.detail()))
        console.print(t)
        _print_left_out(more, "function changes", limit)
    if all_moved and fd.moved:
        t = Table(title="moved only (same normalized AST)")
        t.add_column("function", overflow="fold")
        t.add_column("where", overflow="fold")
        for c in fd.moved:
            t.add_row(escape(c.qualname), escape(c.where() + (" (text differs)" if "text" in c.parts else "")))
        console.print(t)
    console.print(f"[bold]functions[/]: {fd.summary()}", soft_wrap=True)


def _print_change_diff(c: FunctionChange, out: Console = console) -> None:
    from ..diffing import highlighted

    if not c.diff:
        return
    out.rule(escape(f"{c.kind}: {c.qualname}"))
    out.print(highlighted(c.diff), end="", soft_wrap=True)


# -- bisect ----------------------------------------------------------------------------------------
def bisect_cmd(
    qualname: str = typer.Argument(..., help="The function (module:Class.method, dotted, or a unique suffix), class field (module:Class.field) or module constant (module:NAME)."),
    versions: list[str] = typer.Option(..., "--versions", help="A PyPI range (vllm==0.28.0..0.33.0, vllm>=0.28,<0.34) or a comma-separated list of snapshots / SOURCEs / pins (repeatable)."),
    jobs: int = typer.Option(4, "--jobs", "-j", help="Parallel downloads and snapshots."),
    docstrings: bool = typer.Option(False, "--docstrings", help="Count docstring-only edits as changes."),
    context: int = typer.Option(3, "--context", "-U", help="Context lines in the diff."),
    package: str = typer.Option(None, "--package", help="Package to take from images holding several."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Find the first release where a function, class field or module constant changed, appeared or disappeared, and show that diff."""
    from ..diffing.bisect import bisect

    result = bisect(qualname, versions, jobs=jobs, count_docstrings=docstrings, context=context,
                    package=package)
    if as_json:
        emit_json(result.to_json())
        return
    _print_bisect(result)


def _print_bisect(result: BisectResult) -> None:
    from rich.table import Table

    from ..diffing import highlighted

    if result.target != "function":
        _print_bisect_assignment(result)
        return
    t = Table("release", "present", title=escape(result.qualname))
    t.add_column("where", overflow="fold")
    t.add_column("hash")
    t.add_column("signature", overflow="fold")
    t.add_column("vs previous", overflow="fold")
    last_sig: str | None = None
    for i, row in enumerate(result.rows):
        fn = row.function
        mark = " [bold]<- first change[/]" if i == result.first_change else ""
        detail = row.change.detail() if row.change and row.status not in ("same", "moved") else ""
        sig = ""
        if fn is not None:
            sig = "[dim]same[/]" if fn.signature == last_sig else escape(fn.signature)
            last_sig = fn.signature
        t.add_row(escape(row.label), "yes" if fn else "no", escape(fn.location if fn else (row.note or "-")),
                  (fn.ast_hash or "?")[:10] if fn else "", sig,
                  _kind(row.status) + mark + (f"\n[dim]{escape(detail)}[/]" if detail else "")
                  + (f"\n[dim]{escape(row.note)}[/]" if row.note and fn else ""))
    console.print(t)
    console.print(f"[bold]{escape(result.verdict())}[/]", soft_wrap=True)
    if result.diff:
        console.print(highlighted(result.diff), end="", soft_wrap=True)
    console.print(f"[dim]{result.seconds:.2f}s[/]")


def _print_bisect_assignment(result: BisectResult) -> None:
    """The table for a class field or module constant: where, the assignment, vs previous."""
    from rich.table import Table

    from ..diffing import highlighted

    what = {"field": "class field", "constant": "module constant"}[result.target]
    t = Table("release", "present", title=escape(f"{result.qualname} ({what})"))
    t.add_column("where", overflow="fold")
    t.add_column("assignment", overflow="fold")
    t.add_column("vs previous", overflow="fold")
    prev = None
    for i, row in enumerate(result.rows):
        a = row.assignment
        mark = " [bold]<- first change[/]" if i == result.first_change else ""
        detail = ""
        if prev is not None and a is not None:
            detail = "; ".join(f"{p} {getattr(prev.info, attr)} -> {getattr(a.info, attr)}"
                               for p in row.parts
                               for attr in ("annotation" if p == "annotation" else "value",))
        t.add_row(escape(row.label), "yes" if a else "no",
                  escape(a.location if a else (row.note or "-")), escape(a.text()) if a else "",
                  _kind(row.status) + mark + (f"\n[dim]{escape(detail)}[/]" if detail else ""))
        prev = a
    console.print(t)
    console.print(f"[bold]{escape(result.verdict())}[/]", soft_wrap=True)
    if result.diff:
        console.print(highlighted(result.diff), end="", soft_wrap=True)
    console.print(f"[dim]{result.seconds:.2f}s[/]")


# -- has -------------------------------------------------------------------------------------------
def has_cmd(
    fix: str = typer.Argument(..., help="The function that holds the fix (module:Class.method, or a unique suffix)."),
    in_ref: str = typer.Option(..., "--in", help="The image, release or snapshot to check."),
    fixed_in: str = typer.Option(None, "--fixed-in", help="A release/snapshot with the fixed body, e.g. pip:vllm==0.32.0."),
    unfixed: str = typer.Option(None, "--unfixed", help="A release/snapshot with the unfixed body (default for pip:NAME==X: the release before X)."),
    pattern: str = typer.Option(None, "--pattern", "-p", help="Code the fixed function contains: Python with $X metavariables, or a fragment."),
    regex: bool = typer.Option(False, "--regex", help="--pattern is a regular expression (matched per line, comments removed)."),
    package: str = typer.Option(None, "--package", help="Package to take from images holding several."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Does SOURCE contain the fix? Answers yes (exit 0), no (exit 1) or different (exit 4), and why."""
    from ..diffing.has import has_fix

    result = has_fix(fix, in_ref, fixed_in=fixed_in, unfixed=unfixed, pattern=pattern,
                     regex=regex, package=package)
    try:
        if as_json:
            emit_json(result.to_json())
        else:
            _print_has(result)
    except BrokenPipeError:  # `recon has ... | head -1`: the answer stands, the reader left
        quiet_stdout()
    raise typer.Exit(HAS_EXIT[result.answer])


def _print_has(result: HasResult) -> None:
    from ..diffing import highlighted

    style = {"yes": "bold green", "no": "bold red", "different": "bold yellow"}[result.answer]
    console.print(f"[{style}]{result.answer}[/]: {escape(result.why)}", highlight=False, soft_wrap=True)
    for lineno, text in result.matches:
        console.print(f"  {lineno:>6} | {escape(text)}", highlight=False, soft_wrap=True)
    if result.fix_lines:
        console.print("lines the fix added:")
        for text, present in result.fix_lines:
            console.print(f"  {'[green]present[/]' if present else '[red]missing[/]'}  {escape(text)}",
                          highlight=False)
    if result.diff:
        console.print(highlighted(result.diff), end="", soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("diff")(diff_cmd)
    app.command("bisect")(bisect_cmd)
    app.command("has")(has_cmd)


__all__ = ["HAS_EXIT", "ReconError", "register"]
