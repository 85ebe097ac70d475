"""Read the Python reprs and JSON that engines print into their logs.

Engines log their arguments and resolved configs as whatever ``str()`` gave:
a dict repr (``non-default args: {...}``), a dataclass repr
(``ServerArgs(model_path='m', tp_size=4, ...)``), a ``k=v, k=v`` list with
unquoted paths (vLLM's ``Initializing a V1 LLM engine ... with config:``) whose
``compilation_config`` is JSON in one release and a dict repr with enum reprs
(``<CUDAGraphMode.FULL: 2>``) in another. ``ast.literal_eval`` refuses most of
these, so this module is lenient: what it cannot read as a literal it keeps as
the source text, never raising. A log line is evidence; a parser that throws
on one odd value would hide the rest of it.

The one exception is a value no engine prints and that would cost recon
unbounded work: nesting deeper than :data:`MAX_DEPTH` or a number longer than
:data:`MAX_DIGITS` digits raises :class:`BoundExceeded` (one line, which the
log reader prefixes with the file and line number). One linear scan finds
both before any recursive parser sees the text.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from ..errors import ReconError

#: deepest bracket nesting read in a printed value (engines print a few levels)
MAX_DEPTH = 64
#: longest number read from a log, in digits (engines print at most about 20)
MAX_DIGITS = 100

_ENUM_REPR = re.compile(r"<([A-Za-z_][\w.]*)(?::[^<>]*)?>")
#: any other object repr an engine prints (``<function cmd at 0x7f..>``), read as its text
_OTHER_REPR = re.compile(r"<[A-Za-z_][^<>'\"]*>")
#: an enum member's repr with its value: ``<CompilationMode.VLLM_COMPILE: 3>``
_ENUM_MEMBER = re.compile(r"<([A-Za-z_]\w*\.[A-Za-z_]\w*): ([^<>]*)>")
_KEY_START = re.compile(r"\s*([A-Za-z_]\w*)=")
#: what :func:`check_bounds` looks at: quotes, backslashes, brackets, over-long digit runs
_SPECIAL = re.compile(r"[\\'\"()\[\]{}]|\d{" + str(MAX_DIGITS + 1) + ",}")


class BoundExceeded(ReconError):
    """A printed value past recon's bounds (nesting, digits): not something an engine prints."""


def too_many_digits() -> BoundExceeded:
    return BoundExceeded(f"a number of more than {MAX_DIGITS} digits (recon reads at most "
                         f"{MAX_DIGITS}; no engine prints one)")


def check_bounds(text: str) -> None:
    """Refuse nesting past :data:`MAX_DEPTH` or a digit run past :data:`MAX_DIGITS` (outside
    quotes), in one pass over ``text``'s quotes, brackets and long digit runs, before a
    recursive parser sees it."""
    depth = 0
    quote: str | None = None
    skip = -1  # the character after a backslash inside a string
    for m in _SPECIAL.finditer(text):
        c, at = m.group(), m.start()
        if at == skip:
            continue
        if quote:
            if c == "\\":
                skip = at + 1
            elif c == quote:
                quote = None
        elif len(c) > 1:
            raise too_many_digits()
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
            if depth > MAX_DEPTH:
                raise BoundExceeded(f"a value nested more than {MAX_DEPTH} levels deep (recon "
                                    "reads at most that; no engine prints one)")
        elif c in ")]}":
            depth = max(0, depth - 1)


def parse_value(text: str) -> Any:
    """A Python/JSON value from its printed form; the stripped text when unreadable.

    Raises :class:`BoundExceeded` for nesting or numbers past recon's bounds.
    """
    s = text.strip()
    if not s:
        return s
    check_bounds(s)
    for attempt in (_literal, _json):
        ok, value = attempt(s)
        if ok:
            return value
    cleaned = _reprs_as_text(s)
    try:
        node = ast.parse(cleaned, mode="eval").body
        return _node_value(node, cleaned)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return s


def _reprs_as_text(text: str) -> str:
    """``text`` with each object repr outside its quoted strings made a string literal: an enum
    member's by its name (``'CUDAGraphMode.FULL'``), any other by its text."""
    out: list[str] = []
    quote, i = "", 0
    while i < len(text):
        c = text[i]
        m = None if quote or c != "<" else (_ENUM_REPR.match(text, i) or _OTHER_REPR.match(text, i))
        if m:
            out.append(repr(m.group(1) if m.re is _ENUM_REPR else m.group(0)))
            i = m.end()
            continue
        if quote and c == "\\":
            out.append(text[i:i + 2])
            i += 2
            continue
        if c in "'\"" and (not quote or c == quote):
            quote = "" if quote else c
        out.append(c)
        i += 1
    return "".join(out)


def enum_members(text: str) -> dict[str, Any]:
    """The enum members ``text`` prints, by the name :func:`parse_value` reads them as
    (``'CompilationMode.VLLM_COMPILE'``), each with its printed value (``3``; the value's
    text where it is not a literal)."""
    out: dict[str, Any] = {}
    for m in _ENUM_MEMBER.finditer(text):
        ok, value = _literal(m.group(2))
        out[m.group(1)] = value if ok else m.group(2).strip()
    return out


def as_typed(value: Any, members: dict[str, Any]) -> Any:
    """``value`` with each enum member (see :func:`enum_members`) as a command line takes it:
    its value where that is a number or text (``3``, ``'backed'``), else its bare name
    (``FULL_AND_PIECEWISE`` for a tuple value)."""
    if isinstance(value, dict):
        return {k: as_typed(v, members) for k, v in value.items()}
    if isinstance(value, list):
        return [as_typed(v, members) for v in value]
    if isinstance(value, str) and value in members:
        member = members[value]
        scalar = isinstance(member, (int, float, str)) and not isinstance(member, bool)
        return member if scalar else value.rsplit(".", 1)[1]
    return value


def _literal(s: str) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(s)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False, None


def _json(s: str) -> tuple[bool, Any]:
    if s[0] not in "{[" and s not in ("true", "false", "null"):
        return False, None
    try:
        return True, json.loads(s)
    except (ValueError, RecursionError, MemoryError):
        return False, None


def _node_value(node: ast.AST, src: str) -> Any:
    """Literal value of ``node``; containers and calls are read member by member."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):
        pass
    if isinstance(node, ast.Dict):
        out: dict[Any, Any] = {}
        for k, v in zip(node.keys, node.values, strict=True):
            if k is None:
                continue
            out[_node_value(k, src)] = _node_value(v, src)
        return out
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [_node_value(e, src) for e in node.elts]
    if isinstance(node, ast.Call):
        kwargs = {kw.arg: _node_value(kw.value, src) for kw in node.keywords if kw.arg}
        if not node.args:
            return kwargs
        return {"__call__": ast.get_source_segment(src, node.func),
                "args": [_node_value(a, src) for a in node.args], **kwargs}
    if isinstance(node, ast.Name):
        return {"True": True, "False": False, "None": None}.get(node.id, node.id)
    return ast.get_source_segment(src, node) or ""


def parse_call(text: str) -> tuple[str | None, dict[str, Any]]:
    """``Name(k=v, ...)`` -> ``("Name", {k: v})``; ``(None, {})`` when it is not one."""
    s = text.strip()
    m = re.match(r"([A-Za-z_][\w.]*)\(", s)
    if not m or not s.endswith(")"):
        return None, {}
    return m.group(1), split_kv(s[m.end():-1])


def split_kv(text: str) -> dict[str, Any]:
    """``a=1, b=/path/x, c={"j": [1, 2]}`` -> dict, splitting only at top-level commas.

    Values are read with :func:`parse_value`; an unquoted value (a path, a
    dtype name) stays text. Brackets and quotes nest, so a comma inside JSON
    or a string never splits.
    """
    out: dict[str, Any] = {}
    for part in _top_level_split(text):
        m = _KEY_START.match(part)
        if not m:
            continue
        out[m.group(1)] = parse_value(part[m.end():])
    return out


def _top_level_split(text: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    quote: str | None = None
    start = 0
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth = max(0, depth - 1)
        elif c == "," and depth == 0 and _KEY_START.match(text, i + 1):
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return [p for p in (x.strip() for x in parts) if p]


def as_int_list(value: Any) -> list[int] | None:
    """A list of ints from a parsed value or a printed list/tuple; None if it is not one."""
    if isinstance(value, str):
        value = parse_value(value)
    if isinstance(value, (list, tuple)):
        try:
            return [int(x) for x in value]
        except (TypeError, ValueError, OverflowError):  # OverflowError: an infinity
            return None
    return None
