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
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .diffing.functions import compare
from .diffing.model import CODE_KINDS, FunctionChange, function_json
from .diffing.releases import is_range, resolve_range
from .diffing.sides import normalize_ref, open_sides
from .diffing.textdiff import unified
from .errors import ReconError
from .index import load_index
from .index.models import FunctionInfo, split_qualname
from .index.snapshot_index import SnapshotIndex
from .snapshot import Snapshot

#: Step statuses that count as "the function changed here".
CHANGE_STATUSES = frozenset({*CODE_KINDS, "appeared", "disappeared"})


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

    @property
    def present(self) -> bool:
        return self.function is not None

    def to_json(self) -> dict[str, Any]:
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

    @property
    def first(self) -> BisectRow | None:
        return self.rows[self.first_change] if self.first_change is not None else None

    @property
    def changes(self) -> list[int]:
        """Indexes of every row that is a change (the first one included)."""
        return [i for i, r in enumerate(self.rows) if self._is_change(r.status)]

    def _is_change(self, status: str) -> bool:
        return status in CHANGE_STATUSES or (self.count_docstrings and status == "docstring")

    def verdict(self) -> str:
        """One sentence naming the first change."""
        first = self.first
        if first is None:
            present = [r for r in self.rows if r.present]
            if not present:
                return f"{self.qualname} is in none of the {len(self.rows)} releases"
            return (f"{self.qualname} did not change across the {len(self.rows)} releases "
                    f"(moves and formatting aside)")
        prev = self.rows[self.first_change - 1]  # type: ignore[operator]
        what = {"appeared": "appeared", "disappeared": "disappeared"}.get(
            first.status, f"changed ({first.status})")
        return f"{self.qualname} first {what} in {first.label} (previous: {prev.label})"

    def to_json(self) -> dict[str, Any]:
        return {"qualname": self.qualname, "verdict": self.verdict(),
                "first_change": self.first.label if self.first else None,
                "first_change_index": self.first_change, "changes": self.changes,
                "rows": [r.to_json() for r in self.rows], "diff": "\n".join(self.diff),
                "seconds": round(self.seconds, 3)}


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
                         or (snap.manifest.get("source") or {}).get("scheme") in ("pip", "wheel")):
        return snap.version
    return f"{snap.version} ({snap.name})" if snap.version else snap.name


def resolve_qualname(name: str, snaps: Sequence[Snapshot]) -> str:
    """``module:Local`` for any accepted form, resolved on the newest snapshot that has it."""
    if ":" in name:
        return name
    parts = name.split(".")
    for snap in reversed(snaps):  # dotted form: the longest module prefix that is a file
        for cut in range(len(parts) - 1, 0, -1):
            if snap.module_path(".".join(parts[:cut])):
                return f"{'.'.join(parts[:cut])}:{'.'.join(parts[cut:])}"
    last_error: ReconError | None = None
    for snap in reversed(snaps):  # a suffix such as Class.method: ask the index
        try:
            return _candidates_index(snap, parts[-1]).lookup(name).qualname
        except ReconError as err:
            last_error = err
    raise last_error or ReconError(f"no function {name!r} in any of the releases")


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


def find_function(snap: Snapshot, qualname: str) -> tuple[FunctionInfo | None, SnapshotIndex | None,
                                                          str | None]:
    """The function in ``snap``: in its own module, else the one other module defining it."""
    module, local = split_qualname(qualname)
    path = snap.module_path(module)
    if path is not None and path.endswith(".py"):
        idx = load_index(snap, paths=[path], workers=0)
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


def bisect(qualname: str, versions: str | Sequence[str], *, jobs: int = 4,
           count_docstrings: bool = False, context: int = 3,
           package: str | None = None) -> BisectResult:
    """Walk ``versions`` (see :func:`resolve_versions`) and find where ``qualname`` changed."""
    start = time.perf_counter()
    refs = resolve_versions(versions)
    snaps = open_sides(refs, jobs=jobs, package=package)
    qualname = resolve_qualname(qualname, snaps)
    rows: list[BisectRow] = []
    for ref, snap in zip(refs, snaps, strict=True):
        fn, idx, note = find_function(snap, qualname)
        rows.append(BisectRow(ref=ref if not isinstance(ref, Path) else str(ref),
                              label=_label(snap, ref), version=snap.version, function=fn,
                              status="first" if fn else "absent", note=note, index=idx))
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
