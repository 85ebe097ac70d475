"""Reports a person reads outside the terminal: Markdown and a standalone HTML page.

One plain-data view of a :class:`~recon.diffing.DiffResult` (:func:`rows`)
feeds the terminal tables, the Markdown and the HTML alike, so the three
never disagree. The HTML page is self-contained (inline CSS, Python syntax
colours from Pygments, no scripts) and can be mailed or attached to a ticket.
Files are written by the caller through :mod:`recon.writer`.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

from .diffing.model import ConstantChange, DiffResult, FieldChange, FunctionChange, KeyedDiff

#: Longest file list a report prints in full; the rest is counted.
MAX_FILES = 300


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


def rows(result: DiffResult, *, all_moved: bool = False) -> dict[str, Any]:
    """Plain data of every section, in report order (what the renderers lay out)."""
    out: dict[str, Any] = {"title": f"{result.a.label} -> {result.b.label}",
                           "a": result.a, "b": result.b}
    if result.image is not None:
        img = result.image
        out["image"] = {"note": img.note,
                        "fields": [(k, _text(a), _text(b)) for k, (a, b) in img.fields.items()],
                        "env": keyed_rows(img.env), "labels": keyed_rows(img.labels)}
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
        out["functions"] = {
            "summary": fd.summary(), "focus": fd.focus, "note": fd.note,
            "changes": [change_row(c) for c in fd.changes],
            "diffs": [(c.qualname, c.kind, c.diff) for c in fd.changes if c.diff],
            "moved": [change_row(c) for c in fd.moved] if all_moved else [],
            "moved_count": len(fd.moved), "formatting": [c.qualname for c in fd.formatting]}
    if result.fields is not None:
        fl = result.fields
        out["fields"] = {"summary": fl.summary(), "focus": fl.focus,
                         "changes": [field_row(c) for c in fl.changes],
                         "constants_summary": fl.constant_summary(),
                         "constants": [constant_row(c) for c in fl.constants]}
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


def to_markdown(result: DiffResult, *, all_moved: bool = False) -> str:
    """The whole diff as GitHub-flavoured Markdown (diffs in ``diff`` fences)."""
    r = rows(result, all_moved=all_moved)
    a, b = result.a, result.b
    out = [f"# recon diff: {a.label} → {b.label}", "",
           f"- **A**: {a.label}, source `{a.ref}`, digest `{a.digest}`",
           f"- **B**: {b.label}, source `{b.ref}`, digest `{b.digest}`", ""]
    if "image" in r:
        img = r["image"]
        out += ["## Image", ""]
        if img["note"]:
            out += [f"_{img['note']}_", ""]
        if img["fields"]:
            out += _md_table(["field", "A", "B"], img["fields"]) + [""]
        for name in ("env", "labels"):
            if img[name]:
                out += [f"**{'Environment' if name == 'env' else 'Labels'}**", ""]
                out += _md_table(["key", "change", "A", "B"], img[name]) + [""]
        if not (img["fields"] or img["env"] or img["labels"] or img["note"]):
            out += ["No differences.", ""]
    if "distributions" in r:
        out += ["## Distributions", ""]
        out += (_md_table(["package", "change", "A", "B"], r["distributions"])
                if r["distributions"] else ["No differences."]) + [""]
    if "files" in r:
        f = r["files"]
        c = f["counts"]
        out += ["## Files", "", f"{c['added']} added, {c['removed']} removed, {c['changed']} changed, "
                f"{c['unchanged']} unchanged (by sha256).", ""]
        if f["listed"]:
            out += _md_table(["change", "path"], f["listed"])
            if f["more"]:
                out += ["", f"... and {f['more']} more"]
            out += [""]
    if "fields" in r:
        fl = r["fields"]
        out += ["## Class fields and module constants", "",
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
        out += ["**Module constants**: " + fl["constants_summary"]
                + (" (modules owning a function on the focus chain)" if fl["focus"] else "") + ".",
                ""]
        if fl["constants"]:
            out += _md_table(["kind", "module constant", "A", "B", "where"],
                             [[c["kind"], f"`{c['constant']}`", _md_code(c["a"]),
                               _md_code(c["b"]), c["where"]] for c in fl["constants"]]) + [""]
    if "functions" in r:
        fn = r["functions"]
        out += ["## Functions", "", fn["summary"], ""]
        if fn["focus"]:
            out += [f"Focus: `{fn['focus']['target']}`, depth {fn['focus']['depth']}, "
                    f"{len(fn['focus']['members'])} functions on the chain.", ""]
        if fn["note"]:
            out += [f"_{fn['note']}_", ""]
        if fn["changes"]:
            out += _md_table(["kind", "function", "where", "detail"],
                             [[c["kind"], f"`{c['function']}`", c["where"], c["detail"]]
                              for c in fn["changes"]]) + [""]
        if fn["moved"]:
            out += ["### Moved only (same normalized AST)", ""]
            out += _md_table(["function", "where"], [[f"`{c['function']}`", c["where"]]
                                                    for c in fn["moved"]]) + [""]
        if fn["diffs"]:
            out += ["### Diffs", ""]
            for q, kind, lines in fn["diffs"]:
                out += [f"#### `{q}` ({kind})", "", "```diff", *lines, "```", ""]
    return "\n".join(out) + "\n"


# -- HTML ----------------------------------------------------------------------------------------
_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#1f2328}
h1{font-size:1.5em}h2{border-bottom:1px solid #d0d7de;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.6em 0;width:100%}td,th{border:1px solid #d0d7de;
padding:3px 8px;text-align:left;vertical-align:top}th{background:#f6f8fa}
code,pre{font:12px/1.4 ui-monospace,Menlo,Consolas,monospace}
pre.diff{background:#f6f8fa;padding:.6em;overflow-x:auto;border:1px solid #d0d7de}
.add{background:#dafbe1;display:block}.del{background:#ffebe9;display:block}
.hunk{color:#0550ae;display:block}.meta{font-weight:bold;display:block}.ctx{display:block}
.k-added{color:#1a7f37}.k-removed{color:#cf222e}.k-signature,.k-body,.k-default,
.k-annotation,.k-value{color:#9a6700}
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


def _highlight_line(code: str) -> str:
    """One line of Python as HTML spans (Pygments inline styles)."""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    text = highlight(code, PythonLexer(), HtmlFormatter(nowrap=True, noclasses=True,
                                                        style="default"))
    return text.rstrip("\n")


def diff_html(lines: list[str]) -> str:
    """A unified diff as a ``<pre>`` with green/red lines and Python colours."""
    out = ['<pre class="diff">']
    for ln in lines:
        if ln.startswith(("---", "+++")):
            out.append(f'<span class="meta">{_h(ln)}</span>')
        elif ln.startswith("@@"):
            out.append(f'<span class="hunk">{_h(ln)}</span>')
        else:
            cls = {"+": "add", "-": "del"}.get(ln[:1], "ctx")
            out.append(f'<span class="{cls}">{_h(ln[:1] or " ")}{_highlight_line(ln[1:])}</span>')
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


def to_html(result: DiffResult, *, all_moved: bool = False) -> str:
    """A standalone HTML page of the whole diff."""
    r = rows(result, all_moved=all_moved)
    a, b = result.a, result.b
    out = ["<!doctype html><html><head><meta charset='utf-8'>",
           f"<title>recon diff: {_h(r['title'])}</title><style>{_CSS}</style></head><body>",
           f"<h1>recon diff: {_h(a.label)} → {_h(b.label)}</h1>",
           _html_table(["side", "snapshot", "source", "digest"],
                       [["A", a.label, a.ref or "", a.digest or ""],
                        ["B", b.label, b.ref or "", b.digest or ""]])]
    if "image" in r:
        img = r["image"]
        out.append("<h2>Image</h2>")
        if img["note"]:
            out.append(f"<p class='muted'>{_h(img['note'])}</p>")
        if img["fields"]:
            out.append(_html_table(["field", "A", "B"], img["fields"]))
        for name, title in (("env", "Environment"), ("labels", "Labels")):
            if img[name]:
                out.append(f"<h3>{title}</h3>" + _html_table(["key", "change", "A", "B"], img[name]))
        if not (img["fields"] or img["env"] or img["labels"] or img["note"]):
            out.append("<p>No differences.</p>")
    if "distributions" in r:
        out.append("<h2>Distributions</h2>")
        out.append(_html_table(["package", "change", "A", "B"], r["distributions"])
                   if r["distributions"] else "<p>No differences.</p>")
    if "files" in r:
        f = r["files"]
        c = f["counts"]
        out.append(f"<h2>Files</h2><p>{c['added']} added, {c['removed']} removed, {c['changed']} "
                   f"changed, {c['unchanged']} unchanged (by sha256).</p>")
        if f["listed"]:
            out.append(f"<details><summary>{len(f['listed'])} files listed</summary>"
                       + _html_table(["change", "path"], f["listed"]) + "</details>")
            if f["more"]:
                out.append(f"<p class='muted'>... and {f['more']} more</p>")
    if "fields" in r:
        fl = r["fields"]
        out.append(f"<h2>Class fields and module constants</h2><p>{_h(fl['summary'])}"
                   + (" (classes owning a function on the focus chain)" if fl["focus"] else "")
                   + ".</p>")
        if fl["changes"]:
            out.append(_html_value_changes("field", fl["changes"], lambda c: c["where"] + (
                f" (class was {c['old_class']})" if c["old_class"] else "")))
        out.append(f"<h3>Module constants</h3><p>{_h(fl['constants_summary'])}"
                   + (" (modules owning a function on the focus chain)" if fl["focus"] else "")
                   + ".</p>")
        if fl["constants"]:
            out.append(_html_value_changes("constant", fl["constants"], lambda c: c["where"]))
    if "functions" in r:
        fn = r["functions"]
        out.append(f"<h2>Functions</h2><p>{_h(fn['summary'])}</p>")
        if fn["focus"]:
            out.append(f"<p>Focus: <code>{_h(fn['focus']['target'])}</code>, depth "
                       f"{fn['focus']['depth']}, {len(fn['focus']['members'])} functions on the "
                       "chain.</p>")
        if fn["note"]:
            out.append(f"<p class='muted'>{_h(fn['note'])}</p>")
        diffs = {q: lines for q, _, lines in fn["diffs"]}
        body = []
        for c in fn["changes"]:
            name = f"<code>{_h(c['function'])}</code>"
            if c["function"] in diffs:
                name = (f"<details><summary>{name}</summary>{diff_html(diffs[c['function']])}"
                        "</details>")
            body.append([f"<span class='k-{_h(c['kind'])}'>{_h(c['kind'])}</span>", name,
                         _h(c["where"]), _h(c["detail"])])
        if body:
            out.append(_html_table(["kind", "function", "where", "detail"], body, raw=True))
        if fn["moved"]:
            out.append("<h3>Moved only (same normalized AST)</h3>"
                       + _html_table(["function", "where"],
                                     [[c["function"], c["where"]] for c in fn["moved"]]))
    out.append("<p class='muted'>Written by recon diff.</p></body></html>")
    return "\n".join(out) + "\n"
