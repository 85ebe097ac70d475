"""``recon has FIX --in SOURCE``: does this image (or release) contain a fix?

FIX is a function plus either

* ``fixed_in``: a release or snapshot whose body of that function is the
  fixed one. With a ``pip:NAME==X`` reference the release just before X
  (from PyPI) is taken as the unfixed body, unless ``unfixed`` names one;
  or
* ``pattern``: code the fixed function contains: a Python expression or
  statement matched on the AST (``$X`` metavariables, as ``recon find
  --pattern``), a fragment compared token by token, or with ``regex=True``
  a regular expression over the comment-free lines. Comments never match.

Answers: ``yes`` (the fixed body, or the pattern is there), ``no`` (the
unfixed body, the pattern is absent, or the function is absent) and
``different`` (neither the fixed nor the unfixed body: a backport, a
patched image or another release line). For ``different`` the lines the
fix added are checked one by one, which is usually what a person wants to
know about a patched image.
"""

from __future__ import annotations

import io
import re
import textwrap
import time
import tokenize
from dataclasses import dataclass, field
from typing import Any

from ..errors import ReconError
from ..index.models import FunctionInfo
from ..index.snapshot_index import SnapshotIndex
from ..snapshots.model import Snapshot
from .bisect import find_function, own_module_index, resolve_qualname
from .functions import compare
from .model import function_json
from .releases import previous_release
from .sides import display_label, normalize_ref, open_side
from .textdiff import segment, unified


@dataclass
class Located:
    """A function found (or not) in one snapshot."""

    ref: str
    snapshot: Snapshot
    function: FunctionInfo | None
    index: SnapshotIndex | None
    note: str | None = None

    @property
    def label(self) -> str:
        return display_label(self.snapshot)

    def to_json(self) -> dict[str, Any]:
        return {"ref": self.ref, "snapshot": self.snapshot.label,
                "function": function_json(self.function), "note": self.note}


@dataclass
class HasResult:
    """The answer, one line of why, and the evidence (lines or a diff)."""

    answer: str  # yes | no | different
    why: str
    qualname: str
    target: Located
    fixed: Located | None = None
    unfixed: Located | None = None
    pattern: str | None = None
    mode: str | None = None  # how the pattern was matched: structure | tokens | regex
    matches: list[tuple[int, str]] = field(default_factory=list)  # (line, text) pattern hits
    fix_lines: list[tuple[str, bool]] = field(default_factory=list)  # (line the fix added, present)
    diff: list[str] = field(default_factory=list)  # target vs fixed
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"answer": self.answer, "why": self.why, "qualname": self.qualname,
                "target": self.target.to_json(),
                "fixed": self.fixed.to_json() if self.fixed else None,
                "unfixed": self.unfixed.to_json() if self.unfixed else None,
                "pattern": self.pattern, "mode": self.mode,
                "matches": [{"line": n, "text": t} for n, t in self.matches],
                "fix_lines": [{"line": t, "present": p} for t, p in self.fix_lines],
                "diff": "\n".join(self.diff), "seconds": round(self.seconds, 3)}


def locate(ref: str, qualname: str, *, package: str | None = None) -> Located:
    snap = open_side(ref, package=package)
    fn, idx, note = find_function(snap, qualname)
    return Located(str(ref), snap, fn, idx, note)


def code_lines(idx: SnapshotIndex, fn: FunctionInfo) -> list[tuple[int, str]]:
    """``(file line, text)`` of the function with comments removed and trailing space stripped.

    Comments are dropped with :mod:`tokenize`, so a ``#`` inside a string
    stays. A segment that does not tokenize is returned as it is.
    """
    lines = segment(idx, fn)
    width = fn.col
    text = "\n".join(ln[width:] if ln[:width].strip() == "" else ln for ln in lines) + "\n"
    comments: dict[int, int] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                comments[tok.start[0]] = tok.start[1]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        comments = {}
    out = []
    for i, ln in enumerate(text.split("\n")[:len(lines)], start=1):
        if i in comments:
            ln = ln[:comments[i]]
        out.append((fn.lineno + i - 1, ln.rstrip()))
    return out


_SKIP_TOKENS = frozenset({tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                          tokenize.DEDENT, tokenize.ENDMARKER, tokenize.ENCODING})


def code_tokens(text: str, first_line: int = 1) -> list[tuple[str, int]]:
    """``(token text, file line)`` of Python code, without comments and layout tokens.

    A fragment (``x // y)``, unbalanced brackets) tokenizes as far as it goes.
    """
    out: list[tuple[str, int]] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type not in _SKIP_TOKENS:
                out.append((tok.string, first_line + tok.start[0] - 1))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return out


def pattern_mode(pattern: str, regex: bool = False) -> str:
    """``regex``, ``structure`` (the pattern parses as Python) or ``tokens`` (a code fragment)."""
    if regex:
        return "regex"
    from ..index.find import Pattern

    try:
        Pattern(textwrap.dedent(pattern))
    except ReconError:
        return "tokens"
    return "structure"


def pattern_matches(idx: SnapshotIndex, fn: FunctionInfo, pattern: str,
                    regex: bool = False) -> list[tuple[int, str]]:
    """Lines of the function where ``pattern`` occurs in the code (comments never match).

    Three ways, chosen by :func:`pattern_mode`:

    * a pattern that parses as Python is matched against the function's AST
      with :class:`recon.index.find.Pattern` (``$X`` metavariables; layout, comments
      and redundant parentheses do not matter);
    * a fragment that does not parse (``// mamba_block_size``) is compared
      token by token, comments and layout ignored;
    * a regular expression is searched line by line in the comment-free code.
    """
    lines = code_lines(idx, fn)
    by_line = dict(lines)
    hits: set[int] = set()
    mode = pattern_mode(pattern, regex)
    if mode == "regex":
        rx = re.compile(pattern)
        hits = {n for n, text in lines if rx.search(text)}
    elif mode == "structure":
        from ..index.find import Pattern

        tree = idx.function_ast(fn.qualname)
        if tree is not None:
            for node in Pattern(textwrap.dedent(pattern)).matches(tree):
                first = getattr(node, "lineno", fn.def_lineno)
                hits.update(range(first, (getattr(node, "end_lineno", None) or first) + 1))
    else:
        want = [t for t, _ in code_tokens(textwrap.dedent(pattern).strip() + "\n")]
        if not want:
            raise ReconError("--pattern has no code in it")
        width = fn.col
        text = "\n".join(ln[width:] if ln[:width].strip() == "" else ln
                         for ln in segment(idx, fn)) + "\n"
        have = code_tokens(text, fn.lineno)
        words = [t for t, _ in have]
        k = len(want)
        for i in range(len(words) - k + 1):
            if words[i:i + k] == want:
                hits.update(range(have[i][1], have[i + k - 1][1] + 1))
    return [(n, by_line.get(n, "")) for n in sorted(hits)]


def has_fix(qualname: str, in_ref: str, *, fixed_in: str | None = None, unfixed: str | None = None,
            pattern: str | None = None, regex: bool = False,
            package: str | None = None) -> HasResult:
    """Answer "does ``in_ref`` contain the fix" (see the module docstring)."""
    start = time.perf_counter()
    if (fixed_in is None) == (pattern is None):
        raise ReconError("give exactly one of --fixed-in RELEASE or --pattern CODE")
    target_snap = open_side(in_ref, package=package)
    refs = [target_snap]
    if fixed_in is not None:
        refs.append(open_side(fixed_in, package=package))
    qualname = resolve_qualname(qualname, list(reversed(refs)))
    fn, idx, note = find_function(target_snap, qualname)
    target = Located(str(in_ref), target_snap, fn, idx, note)
    if pattern is not None:
        result = _by_pattern(qualname, target, pattern, regex)
    else:
        result = _by_release(qualname, target, str(fixed_in), unfixed, package)
    result.seconds = time.perf_counter() - start
    return result


def _by_pattern(qualname: str, target: Located, pattern: str, regex: bool) -> HasResult:
    if target.function is None or target.index is None:
        return HasResult("no", f"{qualname} is not in {target.label}", qualname, target,
                         pattern=pattern, mode=pattern_mode(pattern, regex))
    try:
        hits = pattern_matches(target.index, target.function, pattern, regex)
    except re.error as err:
        raise ReconError(f"bad --pattern regular expression: {err}") from err
    where = target.function.location
    mode = pattern_mode(pattern, regex)
    if hits:
        lines = ", ".join(str(n) for n, _ in hits[:6])
        return HasResult("yes", f"the pattern is in {qualname} at {where} (line {lines}; "
                         f"matched by {mode})", qualname, target, pattern=pattern, mode=mode,
                         matches=hits)
    return HasResult("no", f"the pattern is not in the code of {qualname} at {where} "
                     f"(matched by {mode}; comments ignored)", qualname, target, pattern=pattern,
                     mode=mode)


def _default_unfixed(fixed_ref: str) -> str | None:
    """``pip:vllm==0.32.0`` -> ``pip:vllm==0.31.0`` (the release before it on PyPI)."""
    m = re.fullmatch(r"pip:([A-Za-z0-9][A-Za-z0-9._-]*)==([^=,;\s]+)", normalize_ref(fixed_ref))
    if not m:
        return None
    prev = previous_release(m.group(1), m.group(2))
    return f"pip:{m.group(1)}=={prev}" if prev else None


def _by_release(qualname: str, target: Located, fixed_ref: str, unfixed_ref: str | None,
                package: str | None) -> HasResult:
    fixed = locate(fixed_ref, qualname, package=package)
    if fixed.function is None:
        own = fixed.index or own_module_index(fixed.snapshot, qualname)
        raise ReconError(f"{qualname} is not in {fixed.label}, so it cannot hold the fix"
                         + (own._suggest(qualname, own.functions) if own is not None else ""))
    unfixed_ref = unfixed_ref or _default_unfixed(fixed_ref)
    unfixed = locate(unfixed_ref, qualname, package=package) if unfixed_ref else None
    res = HasResult("different", "", qualname, target, fixed=fixed, unfixed=unfixed)
    fix_note = ""
    if unfixed is not None and unfixed.function is not None:
        before = compare(unfixed.index, unfixed.function, fixed.index, fixed.function)  # type: ignore[arg-type]
        if before.kind in ("unchanged", "moved", "formatting", "docstring"):
            fix_note = (f" (note: {qualname} has the same code in {unfixed.label} and "
                        f"{fixed.label}: the fix is not in this function)")
        else:
            old = {t.strip() for _, t in code_lines(unfixed.index, unfixed.function)}  # type: ignore[arg-type]
            added = [t.strip() for _, t in code_lines(fixed.index, fixed.function)  # type: ignore[arg-type]
                     if t.strip() and t.strip() not in old]
            have = ({t.strip() for _, t in code_lines(target.index, target.function)}
                    if target.function is not None and target.index is not None else set())
            res.fix_lines = [(t, t in have) for t in added]
    if target.function is None or target.index is None:
        res.answer, res.why = "no", f"{qualname} is not in {target.label}{fix_note}"
        return res
    vs_fixed = compare(fixed.index, fixed.function, target.index, target.function)  # type: ignore[arg-type]
    if vs_fixed.kind in ("unchanged", "moved", "formatting", "docstring"):
        res.answer = "yes"
        res.why = (f"{qualname} at {target.function.location} has the same code as in "
                   f"{fixed.label}{fix_note}")
        return res
    if unfixed is not None and unfixed.function is not None:
        vs_unfixed = compare(unfixed.index, unfixed.function, target.index, target.function)  # type: ignore[arg-type]
        if vs_unfixed.kind in ("unchanged", "moved", "formatting", "docstring"):
            res.answer = "no"
            res.why = (f"{qualname} at {target.function.location} has the same code as in "
                       f"{unfixed.label}, before the fix{fix_note}")
            res.diff = unified(target.index, target.function, fixed.index, fixed.function,
                               old_label="in", new_label="fixed")
            return res
    present = sum(1 for _, p in res.fix_lines if p)
    partial = (f"; {present} of {len(res.fix_lines)} lines the fix added are there"
               if res.fix_lines else "")
    res.why = (f"{qualname} at {target.function.location} differs from {fixed.label} "
               f"({vs_fixed.kind})" + (f" and from {unfixed.label}" if unfixed and unfixed.function
                                       else "") + partial + fix_note)
    res.diff = unified(target.index, target.function, fixed.index, fixed.function,
                       old_label="in", new_label="fixed")
    return res
