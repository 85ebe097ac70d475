"""Reports a person reads outside the terminal: Markdown and a standalone HTML page.

One plain-data view of a :class:`~recon.diffing.DiffResult` (:func:`rows`)
feeds the terminal tables, the Markdown and the HTML alike, so the three
never disagree. The HTML page is self-contained (one stylesheet, Python syntax
colours from Pygments as CSS classes, no scripts) and can be mailed or attached
to a ticket. Files are written by the caller through :mod:`recon.acquire.writer`.

A release pair changes thousands of functions (vLLM 0.32.0 -> 0.33.0: 7,319),
so every table and the per-function diffs follow one ``limit`` (the CLI's
``--limit``; 0 means no limit), and each report says in one line what it left
out and how to see it all; per-function diffs are folded.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..safetext import safe_text
from .model import ConstantChange, DiffResult, FieldChange, FunctionChange, KeyedDiff

#: Longest file list a report prints in full; the rest is counted.
MAX_FILES = 300

#: Rows per table and per-function diffs a report renders when the caller does not say
#: (the CLI's ``--limit`` default); 0 means no limit.
LIMIT = 200

T = TypeVar("T")


def head(items: Sequence[T], limit: int) -> tuple[list[T], int]:
    """The first ``limit`` items (all when ``limit`` is 0) and how many were left out.

    The terminal tables and both reports cut with this one rule, so ``--limit``
    means the same wherever its output lands.
    """
    shown = list(items) if limit <= 0 else list(items[:limit])
    return shown, len(items) - len(shown)


def left_out(count: int, what: str, limit: int) -> str:
    """The one line a report or table prints for what ``--limit`` left out, and how to see it."""
    return (f"{count} more {what} left out by --limit {limit}; "
            "--limit 0 lists them all (--json has them too).")


def change_row(c: FunctionChange) -> dict[str, str]:
    """The four columns every renderer shows for one function change."""
    return {"kind": c.kind, "function": c.qualname, "where": c.where(), "detail": c.detail()}


#: Longest field value a table cell shows (``--json`` has them whole).
MAX_VALUE = 160


def clip_pair(a: str, b: str, limit: int = MAX_VALUE, context: int = 30) -> tuple[str, str]:
    """Two long values cut around where they differ, ``...`` marking what was left out.

    A mapping table of 2,000 characters with one entry added stays readable,
    and the part that changed stays in view on both sides.
    """
    if len(a) <= limit and len(b) <= limit:
        return a, b
    prefix = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        prefix += 1
    suffix = 0
    while (suffix < min(len(a), len(b)) - prefix
           and a[len(a) - 1 - suffix] == b[len(b) - 1 - suffix]):
        suffix += 1

    def cut(t: str) -> str:
        start, end = max(0, prefix - context), min(len(t), len(t) - suffix + context)
        mid = t[start:end]
        if len(mid) > limit:
            mid, end = mid[:limit], start + limit
        return ("..." if start else "") + mid + ("..." if end < len(t) else "")

    return cut(a), cut(b)


def field_row(c: FieldChange) -> dict[str, str]:
    """The columns every renderer shows for one class field change (long values clipped)."""
    a, b = clip_pair(c.side("a"), c.side("b"))
    return {"kind": c.kind, "field": c.qualname, "a": a, "b": b,
            "where": c.where(), "old_class": c.old_class or "", "detail": c.detail()}


def constant_row(c: ConstantChange) -> dict[str, str]:
    """The columns every renderer shows for one module constant change (long values clipped)."""
    a, b = clip_pair(c.side("a"), c.side("b"))
    return {"kind": c.kind, "constant": c.qualname, "a": a, "b": b, "where": c.where(),
            "detail": c.detail()}


def keyed_rows(d: KeyedDiff) -> list[tuple[str, str, str, str]]:
    """``(key, change, old, new)`` for a keyed table."""
    out = [(k, "added", "", _text(v)) for k, v in d.added.items()]
    out += [(k, "removed", _text(v), "") for k, v in d.removed.items()]
    out += [(k, "changed", _text(a), _text(b)) for k, (a, b) in d.changed.items()]
    return sorted(out)


def _text(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, list):
        return " ".join(str(x) for x in v)
    return str(v)


def rows(result: DiffResult, *, all_moved: bool = False, limit: int = LIMIT) -> dict[str, Any]:
    """Plain data of every section, in report order (what the renderers lay out).

    The function, class-field and module-constant tables keep their first
    ``limit`` rows (0: all) and count the rest (``more``); ``diffs`` are those
    of the listed functions only, as ``(row, qualname, kind, lines)``.
    """
    out: dict[str, Any] = {"title": f"{result.a.label} -> {result.b.label}",
                           "a": result.a, "b": result.b, "limit": limit}
    if result.image is not None:
        img = result.image
        out["image"] = {"note": img.note,
                        "fields": [(k, _text(a), _text(b)) for k, (a, b) in img.fields.items()],
                        "env": keyed_rows(img.env), "labels": keyed_rows(img.labels),
                        "layers": keyed_rows(img.layers)}
    if result.distributions is not None:
        out["distributions"] = keyed_rows(result.distributions)
    if result.files is not None:
        f = result.files
        listed = ([("added", p) for p in f.added] + [("removed", p) for p in f.removed]
                  + [("changed", p) for p in f.changed])
        out["files"] = {"counts": f.to_json()["counts"], "listed": listed[:MAX_FILES],
                        "more": max(0, len(listed) - MAX_FILES)}
    if result.functions is not None:
        fd = result.functions
        shown, more = head(fd.changes, limit)
        diffs = [(n, c.qualname, c.kind, c.diff) for n, c in enumerate(shown) if c.diff]
        out["functions"] = {
            "summary": fd.summary(), "focus": fd.focus, "note": fd.note,
            "changes": [change_row(c) for c in shown], "more": more, "diffs": diffs,
            "diffs_more": sum(1 for c in fd.changes if c.diff) - len(diffs),
            "moved": [change_row(c) for c in fd.moved] if all_moved else [],
            "moved_count": len(fd.moved), "formatting": [c.qualname for c in fd.formatting]}
    if result.fields is not None:
        fl = result.fields
        fields, fields_more = head(fl.changes, limit)
        constants, constants_more = head(fl.constants, limit)
        out["fields"] = {"summary": fl.summary(), "focus": fl.focus,
                         "changes": [field_row(c) for c in fields], "more": fields_more,
                         "constants_summary": fl.constant_summary(),
                         "constants": [constant_row(c) for c in constants],
                         "constants_more": constants_more}
    return out


# -- Markdown ----------------------------------------------------------------------------------
def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_code(text: str) -> str:
    """A cell as inline code (``-`` for an absent side); backticks inside get a longer fence."""
    if text == "-":
        return text
    fence = "``" if "`" in text else "`"
    pad = " " if "`" in text else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _md_table(head: list[str], body: list[tuple[str, ...]] | list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(_md(str(c)) for c in row) + " |" for row in body]
    return out


def _md_left_out(count: int, what: str, limit: int) -> list[str]:
    return [f"_{left_out(count, what, limit)}_", ""] if count else []


def _fence(lines: list[str]) -> str:
    """A code fence longer than any run of backticks opening a line inside it.

    A context line of Markdown source (a docstring with an example) would
    otherwise close the fence and spill the rest of the diff into the page.
    """
    runs = [len(m[1]) for ln in lines if (m := re.match(r"\s*(`{3,})", ln))]
    return "`" * max([3, *(n + 1 for n in runs)])


def _md_diff(qualname: str, kind: str, lines: list[str]) -> list[str]:
    """One function's diff, folded: GitHub renders ``<details>`` and the fence inside it."""
    fence = _fence(lines)
    return [f"<details><summary><code>{html.escape(qualname)}</code> ({kind})</summary>", "",
            f"{fence}diff", *lines, fence, "", "</details>", ""]


def to_markdown(result: DiffResult, *, all_moved: bool = False, limit: int = LIMIT) -> str:
    """The whole diff as GitHub-flavoured Markdown (diffs folded, in ``diff`` fences)."""
    r = rows(result, all_moved=all_moved, limit=limit)
    a, b = result.a, result.b
    out = [f"# recon diff: {a.label} → {b.label}", "",
           f"- **A**: {a.label}, source `{a.ref}`, digest `{a.digest}`",
           f"- **B**: {b.label}, source `{b.ref}`, digest `{b.digest}`", ""]
    if "image" in r:
        out += _md_image(r["image"])
    if "distributions" in r:
        out += ["## Distributions", ""]
        out += (_md_table(["package", "change", "A", "B"], r["distributions"])
                if r["distributions"] else ["No differences."]) + [""]
    if "files" in r:
        out += _md_files(r["files"])
    if "fields" in r:
        out += _md_fields(r["fields"], limit)
    if "functions" in r:
        out += _md_functions(r["functions"], limit)
    return safe_text("\n".join(out) + "\n")  # names and source are data: no control character


def _md_image(img: dict[str, Any]) -> list[str]:
    out = ["## Image", ""]
    if img["note"]:
        out += [f"_{img['note']}_", ""]
    if img["fields"]:
        out += _md_table(["field", "A", "B"], img["fields"]) + [""]
    for name, title in (("env", "Environment"), ("labels", "Labels"), ("layers", "Layers")):
        if img.get(name):
            out += [f"**{title}**", ""]
            out += _md_table(["key", "change", "A", "B"], img[name]) + [""]
    if not (img["fields"] or img["env"] or img["labels"] or img.get("layers") or img["note"]):
        out += ["No differences.", ""]
    return out


def _md_files(f: dict[str, Any]) -> list[str]:
    c = f["counts"]
    out = ["## Files", "", f"{c['added']} added, {c['removed']} removed, {c['changed']} changed, "
           f"{c['unchanged']} unchanged (by sha256).", ""]
    if f["listed"]:
        out += _md_table(["change", "path"], f["listed"])
        if f["more"]:
            out += ["", f"... and {f['more']} more"]
        out += [""]
    return out


def _md_fields(fl: dict[str, Any], limit: int) -> list[str]:
    out = ["## Class fields and module constants", "",
           "Assignments directly in class bodies (dataclass and pydantic fields, class "
           "constants) of the classes on both sides, and directly in module bodies "
           "(module constants, listed as `module:NAME`) of the modules on both sides, "
           "by normalized source.", "",
           fl["summary"] + (" (classes owning a function on the focus chain)"
                            if fl["focus"] else "") + ".", ""]
    if fl["changes"]:
        out += _md_table(["kind", "field", "A", "B", "where"],
                         [[c["kind"], f"`{c['field']}`", _md_code(c["a"]), _md_code(c["b"]),
                           c["where"] + (f" (class was `{c['old_class']}`)" if c["old_class"]
                                         else "")]
                          for c in fl["changes"]]) + [""]
    out += _md_left_out(fl["more"], "class field changes", limit)
    out += ["**Module constants**: " + fl["constants_summary"]
            + (" (modules owning a function on the focus chain)" if fl["focus"] else "") + ".",
            ""]
    if fl["constants"]:
        out += _md_table(["kind", "module constant", "A", "B", "where"],
                         [[c["kind"], f"`{c['constant']}`", _md_code(c["a"]),
                           _md_code(c["b"]), c["where"]] for c in fl["constants"]]) + [""]
    return out + _md_left_out(fl["constants_more"], "module constant changes", limit)


def _md_functions(fn: dict[str, Any], limit: int) -> list[str]:
    out = ["## Functions", "", fn["summary"], ""]
    if fn["focus"]:
        out += [f"Focus: `{fn['focus']['target']}`, depth {fn['focus']['depth']}, "
                f"{len(fn['focus']['members'])} functions on the chain.", ""]
    if fn["note"]:
        out += [f"_{fn['note']}_", ""]
    if fn["changes"]:
        out += _md_table(["kind", "function", "where", "detail"],
                         [[c["kind"], f"`{c['function']}`", c["where"], c["detail"]]
                          for c in fn["changes"]]) + [""]
    out += _md_left_out(fn["more"], "function changes", limit)
    if fn["moved"]:
        out += ["### Moved only (same normalized AST)", ""]
        out += _md_table(["function", "where"], [[f"`{c['function']}`", c["where"]]
                                                for c in fn["moved"]]) + [""]
    if fn["diffs"]:
        out += ["### Diffs", ""]
        for _, q, kind, lines in fn["diffs"]:
            out += _md_diff(q, kind, lines)
    return out + _md_left_out(fn["diffs_more"], "function diffs", limit)


# -- HTML ----------------------------------------------------------------------------------------
#: The page's own rules. Long names and values break anywhere rather than push the page
#: sideways (``anywhere``, unlike ``break-word``, also lets a table column shrink below its
#: longest word); a diff's lines never wrap, its ``<pre>`` scrolls instead.
_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1200px;padding:0 1em;
color:#1f2328;overflow-wrap:anywhere}
h1{font-size:1.5em}h2{border-bottom:1px solid #d0d7de;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.6em 0;width:100%}td,th{border:1px solid #d0d7de;
padding:3px 8px;text-align:left;vertical-align:top}th{background:#f6f8fa}
code,pre{font:12px/1.4 ui-monospace,Menlo,Consolas,monospace}
pre.diff{background:#f6f8fa;padding:.6em;overflow-x:auto;border:1px solid #d0d7de;margin:.3em 0}
.add{background:#dafbe1;display:block}.del{background:#ffebe9;display:block}
.hunk{color:#0550ae;display:block}.meta{font-weight:bold;display:block}.ctx{display:block}
.k-added{color:#1a7f37}.k-removed{color:#cf222e}.k-signature,.k-body,.k-default,
.k-annotation,.k-value{color:#9a6700}td>span[class^=k-]{white-space:nowrap}
.muted{color:#656d76}details{margin:.3em 0}summary{cursor:pointer}
"""


def _h(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _html_table(head: list[str], body: list[tuple[str, ...]] | list[list[str]],
                raw: bool = False) -> str:
    cells = "".join(f"<th>{_h(x)}</th>" for x in head)
    out = [f"<table><tr>{cells}</tr>"]
    for row in body:
        out.append("<tr>" + "".join(f"<td>{c if raw else _h(c)}</td>" for c in row) + "</tr>")
    out.append("</table>")
    return "".join(out)


def _html_left_out(count: int, what: str, limit: int) -> str:
    return f"<p class='muted'>{_h(left_out(count, what, limit))}</p>" if count else ""


class PythonHtml:
    """Python source as HTML lines coloured by CSS classes; one per report.

    Reports once built a Pygments lexer and formatter for every diff line,
    with the styles inline on every token: one release pair's report (166,071
    lines) took a minute and 31 MB. Here one lexer serves the whole page,
    :meth:`stylesheet` goes once into its ``<style>``, and only tokens the
    style colours get a ``<span>`` (names and punctuation, half of all tokens,
    are plain text, as they were with inline styles).
    """

    def __init__(self, style: str = "default") -> None:
        from pygments.lexers import PythonLexer
        from pygments.styles import get_style_by_name

        # stripnl=False keeps leading and trailing blank lines: output line i is input line i
        self._lexer = PythonLexer(stripnl=False, ensurenl=True)
        self._style = get_style_by_name(style)
        self._classes: dict[Any, str] = {}

    def _css(self, ttype: Any) -> str:
        """The CSS declarations the style gives this token type ("" when it leaves it plain)."""
        st = self._style.style_for_token(ttype)
        rules = [f"color:#{st['color']}" if st["color"] else "",
                 f"background-color:#{st['bgcolor']}" if st["bgcolor"] else "",
                 "font-weight:bold" if st["bold"] else "",
                 "font-style:italic" if st["italic"] else "",
                 "text-decoration:underline" if st["underline"] else "",
                 f"border:1px solid #{st['border']}" if st["border"] else ""]
        return ";".join(r for r in rules if r)

    def _class(self, ttype: Any) -> str:
        """Pygments' short class name of the nearest standard token type, if the style colours it."""
        if ttype not in self._classes:
            from pygments.token import STANDARD_TYPES

            std = ttype
            while std not in STANDARD_TYPES:
                std = std.parent
            self._classes[ttype] = STANDARD_TYPES[std] if self._css(std) else ""
        return self._classes[ttype]

    def stylesheet(self) -> str:
        """The token colours, for code inside ``pre.diff`` only."""
        from pygments.token import STANDARD_TYPES

        rules = ((name, self._css(ttype)) for ttype, name in STANDARD_TYPES.items() if name)
        return "".join(f"pre.diff .{name}{{{css}}}\n" for name, css in rules if css)

    def lines(self, code: list[str]) -> list[str]:
        """Each line as HTML; the block is lexed whole, so a multi-line string keeps its colour.

        Pygments reads a lone ``\\r`` as a line end too; when the line count comes
        out different, the lines are returned plain rather than shifted against the diff.
        """
        out: list[str] = []
        line: list[str] = []
        for ttype, value in self._lexer.get_tokens("\n".join(code)) if code else ():
            cls = self._class(ttype)
            for k, part in enumerate(value.split("\n")):
                if k:
                    out.append("".join(line))
                    line = []
                if part:
                    text = html.escape(part, quote=False)
                    plain = not cls or part.isspace()  # a colour on spaces shows nothing
                    line.append(text if plain else f'<span class="{cls}">{text}</span>')
        if len(out) != len(code) or line:  # ensurenl: the text ends with a line end
            return [_h(ln) for ln in code]
        return out


def diff_html(lines: list[str], python: PythonHtml | None = None) -> str:
    """A unified diff (as :func:`recon.diffing.unified` writes it) as a ``<pre>``.

    Green/red lines, Python colours: each side's code (its own lines and the
    shared context, in order) is highlighted as one block, as the terminal's
    :func:`recon.diffing.highlighted` does, and the diff laid out from the two.
    """
    python = python or PythonHtml()
    header = 2 if lines[:2] and lines[0].startswith("---") and lines[1].startswith("+++") else 0
    body = [ln for ln in lines[header:] if not ln.startswith("@@")]
    old = python.lines([ln[1:] for ln in body if ln[:1] != "+"])
    new = python.lines([ln[1:] for ln in body if ln[:1] != "-"])
    i = j = 0
    out = ['<pre class="diff">']
    out += [f'<span class="meta">{_h(ln)}</span>' for ln in lines[:header]]
    for ln in lines[header:]:
        mark = ln[:1]
        if mark == "@":
            out.append(f'<span class="hunk">{_h(ln)}</span>')
            continue
        if mark == "-":
            code = old[i] if i < len(old) else _h(ln[1:])
            i += 1
        else:  # "+" and context lines, which both sides share
            code = new[j] if j < len(new) else _h(ln[1:])
            j += 1
            if mark != "+":
                i += 1
        cls = {"+": "add", "-": "del"}.get(mark, "ctx")
        out.append(f'<span class="{cls}">{_h(mark or " ")}{code}</span>')
    out.append("</pre>")
    return "".join(out)


def _html_value_changes(what: str, changes: list[dict[str, Any]],
                        where: Callable[[dict[str, Any]], str]) -> str:
    """One table of value changes (class fields or module constants): kind, name, A, B, where."""
    return _html_table(
        ["kind", "field" if what == "field" else "module constant", "A", "B", "where"],
        [[f"<span class='k-{_h(c['kind'])}'>{_h(c['kind'])}</span>", f"<code>{_h(c[what])}</code>",
          f"<code>{_h(c['a'])}</code>", f"<code>{_h(c['b'])}</code>", _h(where(c))] for c in changes],
        raw=True)


def to_html(result: DiffResult, *, all_moved: bool = False, limit: int = LIMIT) -> str:
    """A standalone HTML page of the whole diff: one stylesheet, no scripts, diffs folded."""
    r = rows(result, all_moved=all_moved, limit=limit)
    python = PythonHtml()
    a, b = result.a, result.b
    out = ["<!doctype html><html><head><meta charset='utf-8'>",
           "<meta name='viewport' content='width=device-width,initial-scale=1'>",
           f"<title>recon diff: {_h(r['title'])}</title>",
           f"<style>{_CSS}{python.stylesheet()}\n</style></head><body>",
           f"<h1>recon diff: {_h(a.label)} → {_h(b.label)}</h1>",
           _html_table(["side", "snapshot", "source", "digest"],
                       [["A", a.label, a.ref or "", a.digest or ""],
                        ["B", b.label, b.ref or "", b.digest or ""]])]
    if "image" in r:
        out += _html_image(r["image"])
    if "distributions" in r:
        out.append("<h2>Distributions</h2>")
        out.append(_html_table(["package", "change", "A", "B"], r["distributions"])
                   if r["distributions"] else "<p>No differences.</p>")
    if "files" in r:
        out += _html_files(r["files"])
    if "fields" in r:
        out += _html_fields(r["fields"], limit)
    if "functions" in r:
        out += _html_functions(r["functions"], limit, python)
    out.append("<p class='muted'>Written by recon diff.</p></body></html>")
    return safe_text("\n".join(x for x in out if x) + "\n")  # nor here


def _html_image(img: dict[str, Any]) -> list[str]:
    out = ["<h2>Image</h2>"]
    if img["note"]:
        out.append(f"<p class='muted'>{_h(img['note'])}</p>")
    if img["fields"]:
        out.append(_html_table(["field", "A", "B"], img["fields"]))
    for name, title in (("env", "Environment"), ("labels", "Labels"), ("layers", "Layers")):
        if img.get(name):
            out.append(f"<h3>{title}</h3>" + _html_table(["key", "change", "A", "B"], img[name]))
    if not (img["fields"] or img["env"] or img["labels"] or img.get("layers") or img["note"]):
        out.append("<p>No differences.</p>")
    return out


def _html_files(f: dict[str, Any]) -> list[str]:
    c = f["counts"]
    out = [f"<h2>Files</h2><p>{c['added']} added, {c['removed']} removed, {c['changed']} "
           f"changed, {c['unchanged']} unchanged (by sha256).</p>"]
    if f["listed"]:
        out.append(f"<details><summary>{len(f['listed'])} files listed</summary>"
                   + _html_table(["change", "path"], f["listed"]) + "</details>")
        if f["more"]:
            out.append(f"<p class='muted'>... and {f['more']} more</p>")
    return out


def _html_fields(fl: dict[str, Any], limit: int) -> list[str]:
    out = [f"<h2>Class fields and module constants</h2><p>{_h(fl['summary'])}"
           + (" (classes owning a function on the focus chain)" if fl["focus"] else "")
           + ".</p>"]
    if fl["changes"]:
        out.append(_html_value_changes("field", fl["changes"], lambda c: c["where"] + (
            f" (class was {c['old_class']})" if c["old_class"] else "")))
    out.append(_html_left_out(fl["more"], "class field changes", limit))
    out.append(f"<h3>Module constants</h3><p>{_h(fl['constants_summary'])}"
               + (" (modules owning a function on the focus chain)" if fl["focus"] else "")
               + ".</p>")
    if fl["constants"]:
        out.append(_html_value_changes("constant", fl["constants"], lambda c: c["where"]))
    out.append(_html_left_out(fl["constants_more"], "module constant changes", limit))
    return out


def _html_functions(fn: dict[str, Any], limit: int, python: PythonHtml) -> list[str]:
    """The function table (names link to their diffs), then the diffs, each folded."""
    out = [f"<h2>Functions</h2><p>{_h(fn['summary'])}</p>"]
    if fn["focus"]:
        out.append(f"<p>Focus: <code>{_h(fn['focus']['target'])}</code>, depth "
                   f"{fn['focus']['depth']}, {len(fn['focus']['members'])} functions on the "
                   "chain.</p>")
    if fn["note"]:
        out.append(f"<p class='muted'>{_h(fn['note'])}</p>")
    with_diff = {n for n, *_ in fn["diffs"]}
    body = []
    for n, c in enumerate(fn["changes"]):
        name = f"<code>{_h(c['function'])}</code>"
        if n in with_diff:
            name = f"<a href='#f{n}'>{name}</a>"
        body.append([f"<span class='k-{_h(c['kind'])}'>{_h(c['kind'])}</span>", name,
                     _h(c["where"]), _h(c["detail"])])
    if body:
        out.append(_html_table(["kind", "function", "where", "detail"], body, raw=True))
    out.append(_html_left_out(fn["more"], "function changes", limit))
    if fn["moved"]:
        out.append("<h3>Moved only (same normalized AST)</h3>"
                   + _html_table(["function", "where"],
                                 [[c["function"], c["where"]] for c in fn["moved"]]))
    if fn["diffs"]:
        out.append("<h3>Diffs</h3>")
        out += [f"<details><summary id='f{n}'><span class='k-{_h(kind)}'>{_h(kind)}</span> "
                f"<code>{_h(q)}</code></summary>{diff_html(lines, python)}</details>"
                for n, q, kind, lines in fn["diffs"]]
    out.append(_html_left_out(fn["diffs_more"], "function diffs", limit))
    return out
