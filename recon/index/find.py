"""``recon find``: search one release's code by name, by regex, or by code structure.

* By name: a glob over qualnames (``*:*.add_request``,
  ``vllm.config.*:CompilationConfig.*``); without a colon the glob may also
  match the module-local name alone (``MambaHybridModelState.*``).
* By regex: functions whose source matches; every matching line is
  reported with the matched spans, for highlighting.
* By structure: a Python expression with metavariables, matched against
  the AST, so formatting, comments and parentheses do not matter::

      $X // self.cache_config.block_size      floor division by that attribute
      torch.empty($SHAPE, ...)                any call with that first argument
      $A.to($A.device)                        the same expression twice ($A)

  ``$NAME`` matches any expression (the same text each time it appears),
  ``$_`` anything, and ``...`` any number of arguments or list items.

Regex and structural searches scan a file only if its text contains the
literal words the query needs, so a search over a whole release parses
the few files that can match.
"""

from __future__ import annotations

import ast
import bisect
import fnmatch
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..errors import ReconError
from .models import ClassInfo, FunctionInfo
from .normalize import normalized_tokens
from .snapshot_index import SnapshotIndex

MODULE_SCOPE = "<module>"
_MV_PREFIX = "__recon_mv_"
_MV_RE = re.compile(r"\$([A-Za-z_]\w*)")


class LineMatch(NamedTuple):
    """One matching line: its number, its text and the matched character spans in it."""

    lineno: int
    text: str
    spans: tuple[tuple[int, int], ...]


@dataclass
class Hit:
    """A function (or a module's top-level code) with the lines that matched."""

    qualname: str  # "pkg.mod:Local", or "pkg.mod:<module>" for code outside functions
    path: str
    lineno: int  # the function's def line (first matching line for module code)
    lines: list[LineMatch] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"qualname": self.qualname, "path": self.path, "lineno": self.lineno,
                "lines": [{"lineno": m.lineno, "text": m.text, "spans": [list(s) for s in m.spans]}
                          for m in self.lines]}


# -- by name ---------------------------------------------------------------------------
def find_names(index: SnapshotIndex, pattern: str, *, classes: bool = False) -> list[FunctionInfo | ClassInfo]:
    """Functions (and classes, if asked) whose qualname matches the glob ``pattern``."""
    rx = re.compile(fnmatch.translate(pattern))
    local_too = ":" not in pattern
    tables: list[dict[str, Any]] = [index.functions] + ([index.classes] if classes else [])
    out: list[FunctionInfo | ClassInfo] = []
    for table in tables:
        for q, info in table.items():
            if rx.match(q) or (local_too and rx.match(info.name)):
                out.append(info)
    out.sort(key=lambda i: (i.path, i.lineno))
    return out


def _scope_filter(index: SnapshotIndex, within: str | None) -> tuple[set[str] | None, set[str] | None]:
    """``within`` glob -> (allowed qualnames, files holding them); (None, None) means everything."""
    if not within:
        return None, None
    fns = [f for f in find_names(index, within) if isinstance(f, FunctionInfo)]
    if not fns:
        raise ReconError(f"no function matches {within!r} in {index.label}")
    return {f.qualname for f in fns}, {f.path for f in fns}


def _owner(index: SnapshotIndex, path: str, lineno: int) -> tuple[str, int]:
    fn = index.function_at(path, lineno)
    if fn is not None:
        return fn.qualname, fn.def_lineno
    return f"{index.by_path[path]}:{MODULE_SCOPE}", lineno


def _group(index: SnapshotIndex, found: Iterable[tuple[str, int, int, int, int]],
           allowed: set[str] | None) -> list[Hit]:
    """``(path, line0, col0, line1, col1)`` character spans -> hits per function."""
    hits: dict[str, Hit] = {}
    per_line: dict[tuple[str, str, int], list[tuple[int, int]]] = {}
    for path, l0, c0, l1, c1 in found:
        q, def_line = _owner(index, path, l0)
        if allowed is not None and q not in allowed:
            continue
        hit = hits.get(q)
        if hit is None:
            hit = hits[q] = Hit(q, path, def_line)
        lines = index.lines(path)
        for ln in range(l0, l1 + 1):
            start = c0 if ln == l0 else len(lines[ln - 1]) - len(lines[ln - 1].lstrip())
            end = c1 if ln == l1 else len(lines[ln - 1])
            per_line.setdefault((q, path, ln), []).append((start, end))
    for (q, path, ln), spans in sorted(per_line.items(), key=lambda kv: (kv[0][1], kv[0][2])):
        hits[q].lines.append(LineMatch(ln, index.lines(path)[ln - 1], tuple(sorted(set(spans)))))
    return sorted(hits.values(), key=lambda h: (h.path, h.lineno))


# -- by regex ---------------------------------------------------------------------------
def find_regex(index: SnapshotIndex, pattern: str, *, within: str | None = None,
               flags: int = 0) -> list[Hit]:
    """Functions whose source matches the regex ``pattern`` (``re.MULTILINE`` is on)."""
    try:
        rx = re.compile(pattern, flags | re.MULTILINE)
    except re.error as err:
        raise ReconError(f"bad regex {pattern!r}: {err}") from err
    allowed, paths = _scope_filter(index, within)
    return _group(index, _regex_spans(index, rx, paths), allowed)


def _regex_spans(index: SnapshotIndex, rx: re.Pattern[str],
                 paths: set[str] | None) -> Iterator[tuple[str, int, int, int, int]]:
    for path in sorted(index.by_path):
        if paths is not None and path not in paths:
            continue
        text = _text(index, path)
        first = rx.search(text)
        if first is None:
            continue
        starts = [0]
        for line in index.lines(path):
            starts.append(starts[-1] + len(line) + 1)
        for m in rx.finditer(text, first.start()):
            if m.end() == m.start():
                continue  # zero-width matches (a bare "^") mark no code
            l0 = bisect.bisect_right(starts, m.start())
            l1 = bisect.bisect_right(starts, m.end() - 1)
            yield path, l0, m.start() - starts[l0 - 1], l1, m.end() - starts[l1 - 1]


def _text(index: SnapshotIndex, path: str) -> str:
    """The file as the index sees it (``\\n`` line ends, no BOM), without keeping its lines."""
    text = index.snapshot.read_text(path)
    if text.startswith("\ufeff"):
        text = text[1:]
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


# -- by structure -----------------------------------------------------------------------
class Pattern:
    """A structural pattern: a Python expression or statement with ``$`` metavariables."""

    def __init__(self, source: str) -> None:
        self.source = source
        text = _MV_RE.sub(lambda m: _MV_PREFIX + m.group(1), source.strip())
        try:
            node: ast.AST = ast.parse(text, mode="eval").body
        except SyntaxError:
            try:
                body = ast.parse(text).body
            except SyntaxError as err:
                raise ReconError(f"pattern is not Python: {source!r} ({err.msg})") from err
            if len(body) != 1:
                raise ReconError(f"pattern must be one expression or statement: {source!r}") from None
            node = body[0]
        self.node = node
        self.words = sorted(_literal_words(node))

    def could_match(self, text: str) -> bool:
        """Cheap test: every identifier and string the pattern names occurs in ``text``."""
        return all(w in text for w in self.words)

    def matches(self, tree: ast.AST) -> Iterator[ast.AST]:
        root_type = type(self.node)
        for node in ast.walk(tree):
            if type(node) is root_type and _match(self.node, node, {}):
                yield node


def _literal_words(node: ast.AST) -> set[str]:
    words: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and not n.id.startswith(_MV_PREFIX):
            words.add(n.id)
        elif isinstance(n, ast.Attribute):
            words.add(n.attr)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):
            words.add(n.value)
    return words


def _is_ellipsis(node: Any) -> bool:
    if isinstance(node, ast.Expr):
        node = node.value
    return isinstance(node, ast.Constant) and node.value is Ellipsis


_IGNORED = frozenset({"ctx", "kind", "type_comment", "lineno", "col_offset", "end_lineno",
                      "end_col_offset"})


def _match(pat: Any, node: Any, env: dict[str, list[str]]) -> bool:
    if isinstance(pat, ast.Name) and pat.id.startswith(_MV_PREFIX):
        if not isinstance(node, ast.expr):
            return False
        name = pat.id[len(_MV_PREFIX):]
        if name == "_":
            return True
        form = normalized_tokens(node)
        if name in env:
            return env[name] == form
        env[name] = form
        return True
    if isinstance(pat, ast.AST):
        if type(pat) is not type(node):
            return False
        for fname, pval in ast.iter_fields(pat):
            if fname in _IGNORED:
                continue
            if not _match(pval, getattr(node, fname, None), env):
                return False
        return True
    if isinstance(pat, list):
        return isinstance(node, list) and _match_seq(pat, node, env)
    return bool(pat == node)


def _match_seq(pats: list[Any], nodes: list[Any], env: dict[str, list[str]]) -> bool:
    if not pats:
        return not nodes
    if _is_ellipsis(pats[0]):
        return any(_match_seq(pats[1:], nodes[i:], dict(env)) for i in range(len(nodes) + 1))
    if not nodes:
        return False
    trial = dict(env)
    if _match(pats[0], nodes[0], trial) and _match_seq(pats[1:], nodes[1:], trial):
        env.update(trial)
        return True
    return False


def find_pattern(index: SnapshotIndex, pattern: str | Pattern, *, within: str | None = None) -> list[Hit]:
    """Functions holding code that matches the structural ``pattern`` (see the module doc)."""
    pat = pattern if isinstance(pattern, Pattern) else Pattern(pattern)
    allowed, paths = _scope_filter(index, within)
    return _group(index, _pattern_spans(index, pat, paths), allowed)


def _pattern_spans(index: SnapshotIndex, pat: Pattern,
                   paths: set[str] | None) -> Iterator[tuple[str, int, int, int, int]]:
    for path in sorted(index.by_path):
        if paths is not None and path not in paths:
            continue
        if path in index.errors:
            continue
        text = _text(index, path)
        if not pat.could_match(text):
            continue
        lines = index.lines(path)
        for node in _candidate_nodes(index, path, text, lines, pat):
            l0, l1 = node.lineno, node.end_lineno or node.lineno  # type: ignore[attr-defined]
            yield (path, l0, _char_col(lines[l0 - 1], node.col_offset),  # type: ignore[attr-defined]
                   l1, _char_col(lines[l1 - 1], node.end_col_offset or 0))  # type: ignore[attr-defined]


def _candidate_nodes(index: SnapshotIndex, path: str, text: str, lines: list[str],
                     pat: Pattern) -> Iterator[ast.AST]:
    """Matches in one file, parsing only the functions whose lines hold the pattern's rarest word."""
    word = max(pat.words, key=len) if pat.words else None
    owners: set[str] = set()
    whole = word is None
    if word is not None:
        for lineno, line in enumerate(lines, 1):
            if word in line:
                fn = index.function_at(path, lineno)
                if fn is None:
                    whole = True
                    break
                owners.add(fn.qualname)
    seen: set[tuple[int, int, int, int]] = set()
    if whole:
        try:
            trees: list[ast.AST | None] = [ast.parse(text)]
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return
    else:
        trees = [index.function_ast(q) for q in sorted(owners)]
    for tree in trees:
        if tree is None:
            continue
        for node in pat.matches(tree):
            key = (node.lineno, node.col_offset, node.end_lineno or 0,  # type: ignore[attr-defined]
                   node.end_col_offset or 0)  # type: ignore[attr-defined]
            if key not in seen:
                seen.add(key)
                yield node


def _char_col(line: str, byte_col: int) -> int:
    """AST columns count UTF-8 bytes; spans for display count characters."""
    if line.isascii():
        return byte_col
    return len(line.encode("utf-8", "surrogateescape")[:byte_col].decode("utf-8", "surrogateescape"))
