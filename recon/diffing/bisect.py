"""``recon bisect QUALNAME --versions SPEC``: which release changed a function.

Every release (or snapshot, or image) in SPEC is opened in parallel
(downloads and snapshots are cached), the function is looked up in each,
and each step is classified against the previous one with the same rules
as ``recon diff`` (moved and formatting-only steps are not changes). The
first code change, appearance or disappearance is named and its diff is
printed.

Per release only the function's own module is indexed (from the per-file
cache). When the function is not there, the release's files are scanned
for ``def NAME`` and only the files that have it are indexed, so a
function that moved to another module is still found (and reported as
moved) without indexing a whole release.

QUALNAME may also name an assignment: a class field (``module:Class.field``,
a dataclass/pydantic field or class constant) or a module constant
(``module:NAME``). When no release has a function of that name in its
module but some release has such an assignment there, each release shows the
assignment's normalized text (``annotation = value``, as ``recon diff``
compares them) and the first change is the first release whose annotation or
value differs from the first release's (or where it appears or disappears).
Assignments are looked up in their own module only (a moved class or module
is not followed).
"""

from __future__ import annotations

import difflib
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from .. import progress
from ..errors import ReconError
from ..index import load_index
from ..index.models import ClassField, FunctionInfo, split_dotted, split_qualname
from ..index.snapshot_index import SnapshotIndex
from ..snapshots.model import Snapshot
from .functions import compare
from .model import CODE_KINDS, FunctionChange, function_json
from .releases import is_range, resolve_range
from .sides import normalize_ref, open_sides
from .textdiff import unified

#: Step statuses that count as "the function changed here".
CHANGE_STATUSES = frozenset({*CODE_KINDS, "appeared", "disappeared"})
#: Step statuses of an assignment that changed: ``default`` (a class field's value),
#: ``value`` (a module constant's), ``annotation``.
ASSIGNMENT_CHANGES = frozenset({"default", "value", "annotation", "appeared", "disappeared"})


@dataclass(frozen=True)
class Assignment:
    """A class field (``kind == "field"``) or module constant (``"constant"``) in one release."""

    kind: str
    owner: str  # the class qualname, or the module name
    name: str
    path: str
    info: ClassField

    @property
    def key(self) -> tuple[str | None, str | None]:
        """What is compared between releases: normalized annotation and value."""
        return self.info.annotation, self.info.value

    @property
    def location(self) -> str:
        return f"{self.path}:{self.info.lineno}"

    def text(self) -> str:
        """``name: annotation = value``, ``name = value``: the normalized assignment."""
        if self.info.annotation is not None:
            return f"{self.name}: {self.info.render()}"
        return f"{self.name} {self.info.render()}".rstrip()

    def to_json(self) -> dict[str, Any]:
        return {"annotation": self.info.annotation, "value": self.info.value,
                "text": self.text(), "path": self.path, "line": self.info.lineno}


@dataclass
class BisectRow:
    """One release: is the function there, where, and how it differs from the previous row."""

    ref: str
    label: str
    version: str | None
    function: FunctionInfo | None
    status: str  # first | absent | same | moved | formatting | <change kind> | appeared | disappeared
    change: FunctionChange | None = None
    note: str | None = None
    index: SnapshotIndex | None = field(default=None, repr=False)
    #: For a class field or module constant (``target`` "field" / "constant"):
    #: the assignment here, and what differs from the previous row.
    target: str = "function"
    assignment: Assignment | None = None
    parts: tuple[str, ...] = ()

    @property
    def present(self) -> bool:
        return self.function is not None or self.assignment is not None

    @property
    def location(self) -> str | None:
        if self.function is not None:
            return self.function.location
        return self.assignment.location if self.assignment is not None else None

    def to_json(self) -> dict[str, Any]:
        if self.target != "function":
            a = self.assignment
            return {"ref": self.ref, "label": self.label, "version": self.version,
                    "present": self.present, "location": self.location,
                    "annotation": a.info.annotation if a else None,
                    "value": a.info.value if a else None, "text": a.text() if a else None,
                    "status": self.status, "parts": list(self.parts), "note": self.note}
        fn = self.function
        return {"ref": self.ref, "label": self.label, "version": self.version,
                "present": self.present, "location": fn.location if fn else None,
                "function": function_json(fn), "status": self.status,
                "parts": list(self.change.parts) if self.change else [],
                "signature_changes": [s.to_json() for s in self.change.signature]
                if self.change else [], "note": self.note}


@dataclass
class BisectResult:
    """The table, the first change (an index into ``rows``) and its diff."""

    qualname: str
    rows: list[BisectRow]
    first_change: int | None
    diff: list[str]
    seconds: float
    count_docstrings: bool = False
    target: str = "function"  # or "field" (class field), "constant" (module constant)

    @property
    def first(self) -> BisectRow | None:
        return self.rows[self.first_change] if self.first_change is not None else None

    @property
    def changes(self) -> list[int]:
        """Indexes of every row that is a change (the first one included)."""
        return [i for i, r in enumerate(self.rows) if self._is_change(r.status)]

    def _is_change(self, status: str) -> bool:
        if self.target != "function":
            return status in ASSIGNMENT_CHANGES
        return status in CHANGE_STATUSES or (self.count_docstrings and status == "docstring")

    def verdict(self) -> str:
        """One sentence naming the first change."""
        first = self.first
        if first is None:
            present = [r for r in self.rows if r.present]
            if not present:
                return f"{self.qualname} is in none of the {len(self.rows)} releases"
            aside = "moves and formatting aside" if self.target == "function" else "formatting aside"
            return f"{self.qualname} did not change across the {len(self.rows)} releases ({aside})"
        prev = self.rows[self.first_change - 1]  # type: ignore[operator]
        what = {"appeared": "appeared", "disappeared": "disappeared"}.get(
            first.status, f"changed ({first.status})")
        return f"{self.qualname} first {what} in {first.label} (previous: {prev.label})"

    def to_json(self) -> dict[str, Any]:
        out = {"qualname": self.qualname, "verdict": self.verdict(),
               "first_change": self.first.label if self.first else None,
               "first_change_index": self.first_change, "changes": self.changes,
               "rows": [r.to_json() for r in self.rows], "diff": "\n".join(self.diff),
               "seconds": round(self.seconds, 3)}
        if self.target != "function":
            out["target"] = self.target
        return out


def resolve_versions(versions: str | Sequence[str]) -> list[str]:
    """SPEC -> the references to open, oldest first for a PyPI range.

    A range (``vllm==0.28.0..0.33.0``, ``vllm>=0.28,<0.34``) becomes the real
    releases in order; anything else is a list (comma-separated or several
    values) of snapshots, SOURCEs or bare pins (``vllm==0.31.0``), kept in
    the order given.
    """
    items = [versions] if isinstance(versions, str) else list(versions)
    if len(items) == 1 and is_range(items[0]):
        name, found = resolve_range(items[0])
        return [f"pip:{name}=={v}" for v in found]
    refs = [normalize_ref(part) for item in items for part in str(item).split(",") if part.strip()]
    if len(refs) < 2:
        raise ReconError("bisect needs at least two releases: a range such as "
                         "vllm==0.28.0..0.33.0 or a comma-separated list")
    return refs


def _label(snap: Snapshot, ref: str) -> str:
    """The release number for PyPI releases; version and snapshot name otherwise."""
    if snap.version and (re.fullmatch(r"pip:.*==.*", ref)
                         or (snap.manifest.source).get("scheme") in ("pip", "wheel")):
        return snap.version
    return f"{snap.version} ({snap.name})" if snap.version else snap.name


def resolve_qualname(name: str, snaps: Sequence[Snapshot]) -> str:
    """``module:Local`` for any accepted form, resolved on the newest snapshot that has it."""
    if ":" in name:
        return name
    parts = name.split(".")
    for snap in reversed(snaps):  # dotted form: the longest module prefix that is a file
        dotted = split_dotted(name, partial(_has_module, snap))
        if dotted is not None:
            return ":".join(dotted)
    last_error: ReconError | None = None
    for snap in reversed(snaps):  # a suffix such as Class.method: ask the index
        try:
            return _candidates_index(snap, parts[-1]).lookup(name).qualname
        except ReconError as err:
            last_error = err
    raise last_error or ReconError(f"no function {name!r} in any of the releases")


def _has_module(snap: Snapshot, module: str) -> bool:
    return snap.module_path(module) is not None


def _candidates_index(snap: Snapshot, short: str) -> SnapshotIndex:
    """An index of only the files that contain ``def SHORT(`` (a byte scan, then the cache)."""
    pat = re.compile(rb"\bdef\s+" + re.escape(short.split("#", 1)[0].encode()) + rb"\s*[\[(]")
    paths = []
    for rec in snap.python_files():
        try:
            data = snap.path(rec.path).read_bytes()
        except OSError:
            continue
        if pat.search(data):
            paths.append(rec.path)
    return load_index(snap, paths=paths, workers=0 if len(paths) < 24 else None)


def own_module_index(snap: Snapshot, qualname: str) -> SnapshotIndex | None:
    """An index of only the file of ``qualname``'s module (None when it has no ``.py`` file)."""
    path = snap.module_path(split_qualname(qualname)[0])
    if path is None or not path.endswith(".py"):
        return None
    return load_index(snap, paths=[path], workers=0)


def find_function(snap: Snapshot, qualname: str, own: SnapshotIndex | None = None,
                  ) -> tuple[FunctionInfo | None, SnapshotIndex | None, str | None]:
    """The function in ``snap``: in its own module, else the one other module defining it.

    ``own`` is :func:`own_module_index`'s answer when the caller has it already.
    """
    module, local = split_qualname(qualname)
    idx = own if own is not None else own_module_index(snap, qualname)
    if idx is not None:
        fn = idx.functions.get(qualname)
        if fn is not None:
            return fn, idx, None
    short = local.rsplit(".", 1)[-1]
    idx = _candidates_index(snap, short)
    hits = [f for q, f in idx.functions.items() if split_qualname(q)[1] == local]
    if len(hits) == 1:
        return hits[0], idx, f"found as {hits[0].qualname}"
    if len(hits) > 1:
        return None, idx, ("defined in several other modules: "
                           + ", ".join(sorted(h.module for h in hits)[:4]))
    return None, None, None


def find_assignment(own: SnapshotIndex | None, qualname: str) -> tuple[Assignment | None, str | None]:
    """The class field or module constant ``qualname`` in its module's index, or why not.

    ``module:NAME`` is a module constant; ``module:Class.field`` a field of
    that class (``module:Outer.Inner.field`` of a nested class).
    """
    module, local = split_qualname(qualname)
    mod = own.modules.get(module) if own is not None else None
    if mod is None:
        return None, f"no module {module}"
    if mod.error is not None:
        return None, f"{mod.path} does not parse"
    if "." not in local:
        f = mod.constants.get(local)
        return (Assignment("constant", module, local, mod.path, f), None) if f else (None, None)
    owner, name = local.rsplit(".", 1)
    cls = own.classes.get(f"{module}:{owner}")  # type: ignore[union-attr]
    if cls is None:
        return None, f"no class {owner}"
    f = cls.fields.get(name)
    return (Assignment("field", cls.qualname, name, cls.path, f), None) if f else (None, None)


def _not_found(qualname: str, snaps: Sequence[Snapshot], owns: Sequence[SnapshotIndex | None],
               ) -> ReconError:
    """No function, field or constant of that name anywhere: one line, with close names if any."""
    module, local = split_qualname(qualname)
    msg = (f"no function, class field or module constant {qualname!r} in any of the "
           f"{len(snaps)} releases")
    idx = next((i for i in reversed(owns) if i is not None and module in i.modules), None)
    if idx is None:
        return ReconError(msg + f" (no module {module!r})")
    mod = idx.modules[module]
    names = [split_qualname(q)[1] for q in idx.functions if q.startswith(module + ":")]
    names += list(mod.constants)
    names += [f"{split_qualname(c.qualname)[1]}.{n}" for c in idx.classes.values()
              if c.module == module for n in c.fields]
    close = difflib.get_close_matches(local, names, n=5, cutoff=0.75)
    if close:
        msg += "; did you mean: " + ", ".join(f"{module}:{c}" for c in close) + "?"
    return ReconError(msg)


def _assignment_step(prev: BisectRow, row: BisectRow) -> None:
    """Classify ``row`` against ``prev`` for a field or constant."""
    a, b = prev.assignment, row.assignment
    if a is None and b is None:
        row.status = "absent"
    elif a is None:
        row.status = "appeared"
    elif b is None:
        row.status = "disappeared"
    else:
        value = "default" if row.target == "field" else "value"
        row.parts = tuple(p for p, differs in ((value, a.info.value != b.info.value),
                                               ("annotation", a.info.annotation != b.info.annotation))
                          if differs)
        row.status = row.parts[0] if row.parts else "same"


def _assignment_diff(prev: BisectRow, row: BisectRow) -> list[str]:
    """The assignment before and after, as a two-line unified diff with ``recon diff``'s headers."""
    def side(r: BisectRow) -> str:
        a = r.assignment
        return f"{r.version or r.label}/{a.location}" if a else "/dev/null"

    lines = [f"--- {side(prev)}", f"+++ {side(row)}",
             f"@@ -{1 if prev.assignment else '0,0'} +{1 if row.assignment else '0,0'} @@"]
    if prev.assignment is not None:
        lines.append("-" + prev.assignment.text())
    if row.assignment is not None:
        lines.append("+" + row.assignment.text())
    return lines


def bisect(qualname: str, versions: str | Sequence[str], *, jobs: int = 4,
           count_docstrings: bool = False, context: int = 3,
           package: str | None = None) -> BisectResult:
    """Walk ``versions`` (see :func:`resolve_versions`) and find where ``qualname`` changed."""
    start = time.perf_counter()
    refs = resolve_versions(versions)
    snaps = open_sides(refs, jobs=jobs, package=package)
    try:
        qualname = resolve_qualname(qualname, snaps)
    except ReconError as err:
        if not str(err).startswith("no function"):
            raise
        raise ReconError(f"{err} (a class field or module constant needs its module: "
                         "module:Class.field, module:NAME)") from err
    owns = [own_module_index(snap, qualname) for snap in snaps]
    if not any(i is not None and qualname in i.functions for i in owns):
        found = [find_assignment(i, qualname) for i in owns]
        if any(a is not None for a, _ in found):
            return _bisect_assignment(qualname, refs, snaps, found, start)
    rows: list[BisectRow] = []
    with progress.step(f"finding {qualname} in each release", total=len(snaps), unit="releases") as line:
        for ref, snap, own in zip(refs, snaps, owns, strict=True):
            fn, idx, note = find_function(snap, qualname, own)
            rows.append(BisectRow(ref=ref if not isinstance(ref, Path) else str(ref),
                                  label=_label(snap, ref), version=snap.version, function=fn,
                                  status="first" if fn else "absent", note=note, index=idx))
            line.update(advance=1)
    for prev, row in zip(rows, rows[1:], strict=False):
        if prev.function is None and row.function is None:
            row.status = "absent"
        elif prev.function is None:
            row.status = "appeared"
        elif row.function is None:
            row.status = "disappeared"
        else:
            row.change = compare(prev.index, prev.function, row.index, row.function)  # type: ignore[arg-type]
            row.status = "same" if row.change.kind == "unchanged" else row.change.kind
    if not any(r.present for r in rows):
        missing = _not_found(qualname, snaps, owns)
        notes = sorted({f"{r.label}: {r.note}" for r in rows if r.note})
        raise ReconError(f"{missing}; {notes[0]}") if notes else missing
    result = BisectResult(qualname=qualname, rows=rows, first_change=None, diff=[], seconds=0.0,
                          count_docstrings=count_docstrings)
    steps = result.changes
    if steps:
        i = steps[0]
        result.first_change = i
        prev, row = rows[i - 1], rows[i]
        result.diff = unified(prev.index, prev.function, row.index, row.function, context=context,
                              old_label=prev.version or prev.label,
                              new_label=row.version or row.label)
    result.seconds = time.perf_counter() - start
    return result


def _bisect_assignment(qualname: str, refs: Sequence[str | Path], snaps: Sequence[Snapshot],
                       found: Sequence[tuple[Assignment | None, str | None]],
                       start: float) -> BisectResult:
    """:func:`bisect` for a class field or module constant (see the module docstring)."""
    target = next(a.kind for a, _ in found if a is not None)
    rows = [BisectRow(ref=str(ref), label=_label(snap, str(ref)), version=snap.version,
                      function=None, status="first" if a else "absent", note=note,
                      target=target, assignment=a)
            for ref, snap, (a, note) in zip(refs, snaps, found, strict=True)]
    for prev, row in zip(rows, rows[1:], strict=False):
        _assignment_step(prev, row)
    result = BisectResult(qualname=qualname, rows=rows, first_change=None, diff=[], seconds=0.0,
                          target=target)
    # steps are against the previous row, so the first step that is a change is the
    # first release whose annotation and value differ from the first release's
    steps = result.changes
    if steps:
        result.first_change = steps[0]
        result.diff = _assignment_diff(rows[steps[0] - 1], rows[steps[0]])
    result.seconds = time.perf_counter() - start
    return result
