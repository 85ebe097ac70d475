"""Unified diffs of single functions, as text and as syntax-highlighted rich output.

A function's diff is cut from its own source segment on each side
(decorators included), so it shows that function's change and nothing of
its neighbours, and its hunk headers carry the real file line numbers.
"""

from __future__ import annotations

import difflib

from rich.containers import Lines
from rich.syntax import Syntax
from rich.text import Text

from ..index.models import FunctionInfo
from ..index.snapshot_index import SnapshotIndex


def segment(idx: SnapshotIndex, fn: FunctionInfo) -> list[str]:
    """The definition's lines (no line ends), decorators included."""
    return idx.lines(fn.path)[fn.lineno - 1: fn.end_lineno]


def unified(old_idx: SnapshotIndex | None, old: FunctionInfo | None, new_idx: SnapshotIndex | None,
            new: FunctionInfo | None, *, context: int = 3, old_label: str = "a",
            new_label: str = "b") -> list[str]:
    """``---``/``+++`` headers and hunks, with the files' own line numbers in ``@@`` lines."""
    a = segment(old_idx, old) if old is not None and old_idx is not None else []
    b = segment(new_idx, new) if new is not None and new_idx is not None else []
    a_start = old.lineno if old is not None else 0
    b_start = new.lineno if new is not None else 0
    out = [f"--- {old_label}/{old.path}:{old.def_lineno}" if old else "--- /dev/null",
           f"+++ {new_label}/{new.path}:{new.def_lineno}" if new else "+++ /dev/null"]
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for group in matcher.get_grouped_opcodes(context):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        out.append(f"@@ -{a_start + i1 if a else 0},{i2 - i1} +{b_start + j1 if b else 0},{j2 - j1} @@"
                   + (f" {named.name}" if (named := new or old) else ""))
        for tag, x1, x2, y1, y2 in group:
            if tag == "equal":
                out += [" " + ln for ln in a[x1:x2]]
                continue
            if tag in ("replace", "delete"):
                out += ["-" + ln for ln in a[x1:x2]]
            if tag in ("replace", "insert"):
                out += ["+" + ln for ln in b[y1:y2]]
    return out


_LINE_STYLE = {"+": "on #12361f", "-": "on #3b1219"}
_MARK_STYLE = {"+": "bold green", "-": "bold red", "@": "cyan", " ": "dim"}


def highlighted(lines: list[str], *, theme: str = "monokai") -> Text:
    """A unified diff with Python syntax colours on code lines and green/red line backgrounds.

    Each side's code (its context and its own lines, in order) is highlighted
    as one block, so a multi-line string keeps its colour; the diff is then
    laid out from the two highlighted sides.
    """
    syntax = Syntax("", "python", theme=theme, background_color="default")
    body = [ln for ln in lines if not ln.startswith(("---", "+++", "@@"))]
    old_code = [ln[1:] for ln in body if ln[:1] in ("-", " ")]
    new_code = [ln[1:] for ln in body if ln[:1] in ("+", " ")]
    old_hl: list[Text] | Lines = syntax.highlight("\n".join(old_code)).split("\n") if old_code else []
    new_hl: list[Text] | Lines = syntax.highlight("\n".join(new_code)).split("\n") if new_code else []
    i = j = 0
    out = Text()
    for ln in lines:
        if ln.startswith(("---", "+++")):
            out.append(ln + "\n", style="bold")
            continue
        if ln.startswith("@@"):
            out.append(ln + "\n", style="cyan")
            continue
        mark = ln[:1]
        if mark == "-":
            piece = old_hl[i].copy() if i < len(old_hl) else Text(ln[1:])
            i += 1
        else:  # "+" and context lines, which both sides share
            piece = new_hl[j].copy() if j < len(new_hl) else Text(ln[1:])
            j += 1
            if mark == " ":
                i += 1
        piece.rstrip()
        line = Text(mark, style=_MARK_STYLE.get(mark, ""))
        line.append_text(piece)
        if mark in _LINE_STYLE:
            line.stylize(_LINE_STYLE[mark])
        out.append_text(line)
        out.append("\n")
    return out
