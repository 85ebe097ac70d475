"""``diff(A, B)``: the four sections, computed from two snapshots (or SOURCEs).

Cost is kept proportional to what changed: the image, distributions and
files sections read only the manifests; the function section indexes only
the ``.py`` files whose sha256 differs (plus added and removed ones), from
the per-file index cache. ``--focus`` needs the call graph, hence the full
index of each side (still from the cache). The class fields (defaults and
annotations of class-body assignments, :mod:`recon.diffing.fields`) and the
module constants (module-body assignments, :mod:`recon.diffing.constants`)
come with the function section, from the same indexes and files.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

from ..errors import ReconError
from ..index import load_index
from ..index.snapshot_index import SnapshotIndex
from ..snapshots.model import Snapshot
from .constants import focus_modules
from .fields import diff_fields, focus_owners
from .focus import apply_focus, focus_members
from .functions import diff_functions
from .meta import diff_distributions, diff_files, diff_image, python_paths
from .model import SECTIONS, DiffResult, FunctionChange, Side
from .sides import display_label, open_sides
from .textdiff import unified


def side_of(snap: Snapshot) -> Side:
    src = snap.manifest.source
    return Side(label=display_label(snap), name=snap.name, path=str(snap.root), ref=src.get("ref"),
                digest=src.get("digest"), package=snap.package, version=snap.version)


def parse_sections(sections: Iterable[str] | None) -> tuple[str, ...]:
    """Validate section names (comma lists allowed); None or empty means all four."""
    if not sections:
        return SECTIONS
    wanted: list[str] = []
    for item in sections:
        for name in str(item).split(","):
            name = name.strip().lower()
            if not name:
                continue
            hits = [s for s in SECTIONS if s.startswith(name)]
            if len(hits) != 1:
                raise ReconError(f"unknown section {name!r}: choose from {', '.join(SECTIONS)}")
            if hits[0] not in wanted:
                wanted.append(hits[0])
    return tuple(s for s in SECTIONS if s in wanted)


def diff(a: str | Path | Snapshot, b: str | Path | Snapshot, *,
         sections: Iterable[str] | None = None, focus: str | None = None, depth: int = 2,
         show: bool = False, context: int = 3, workers: int | None = None,
         package: str | None = None) -> DiffResult:
    """Compare A with B (snapshots, snapshot names/paths or any SOURCE).

    ``focus`` limits the function section to the call chain around that
    function (``depth`` edges up and down, on both sides); ``show`` fills
    each listed change's unified diff.
    """
    start = time.perf_counter()
    chosen = parse_sections(sections)
    if focus and not sections:  # "what changed on the path to X": the file list is noise there
        chosen = ("image", "distributions", "functions")
    elif focus and "functions" not in chosen:
        chosen = (*chosen, "functions")
    sa, sb = open_sides([a, b], package=package)
    if sa.package != sb.package:
        raise ReconError(f"A is {sa.label} and B is {sb.label}: different packages")
    result = DiffResult(a=side_of(sa), b=side_of(sb), sections=chosen)
    t = time.perf_counter()
    result.timings["open"] = t - start
    if "image" in chosen:
        result.image = diff_image(sa, sb)
    if "distributions" in chosen:
        result.distributions = diff_distributions(sa, sb)
    files = diff_files(sa, sb)
    if "files" in chosen:
        result.files = files
    result.timings["manifests"] = time.perf_counter() - t
    if "functions" in chosen:
        t = time.perf_counter()
        paths_a = python_paths(sa, [*files.changed, *files.removed])
        paths_b = python_paths(sb, [*files.changed, *files.added])
        focus_info = None
        if focus:
            ia, ib = load_index(sa, workers=workers), load_index(sb, workers=workers)
            result.timings["index"] = time.perf_counter() - t
            t = time.perf_counter()
            focus_info = focus_members(ia, ib, focus, depth)
            result.timings["focus"] = time.perf_counter() - t
            paths_a, paths_b = _focus_paths(ia, ib, focus_info["members"], paths_a, paths_b)
        else:
            ia = load_index(sa, paths=paths_a, workers=workers)
            ib = load_index(sb, paths=paths_b, workers=workers)
            result.timings["index"] = time.perf_counter() - t
        t = time.perf_counter()
        fd = diff_functions(ia, ib, paths_a=paths_a, paths_b=paths_b)
        if focus_info is not None:
            fd = apply_focus(fd, focus_info)
        result.timings["match"] = time.perf_counter() - t
        t = time.perf_counter()
        members = focus_info["members"] if focus_info is not None else None
        result.fields = diff_fields(
            ia, ib, paths_a=paths_a, paths_b=paths_b,
            owners=focus_owners(members) if members is not None else None,
            modules=focus_modules(members) if members is not None else None)
        result.timings["fields"] = time.perf_counter() - t
        errors = sorted({*ia.errors, *ib.errors} & {*paths_a, *paths_b})
        if errors:
            fd.note = (f"{len(errors)} file(s) failed to parse and define no functions here: "
                       + ", ".join(errors[:5]) + (" ..." if len(errors) > 5 else ""))
        if show:
            for c in fd.changes:
                fill_diff(c, ia, ib, context=context)
        result.functions = fd
    result.seconds = time.perf_counter() - start
    return result


def _focus_paths(ia: SnapshotIndex, ib: SnapshotIndex, members: dict[str, int],
                 paths_a: list[str], paths_b: list[str]) -> tuple[list[str], list[str]]:
    """The changed files that can hold a change of a chain member.

    A member's own file, and any changed file defining a function of the
    same short name (where it may have moved to, or been renamed from);
    matching only these keeps a focused diff as cheap as the chain itself.
    """
    shorts = set()
    for q in members:
        fn = ia.functions.get(q) or ib.functions.get(q)
        if fn is not None:
            shorts.add(fn.short)
    keep_a = {f.path for f in ia.functions.values() if f.short in shorts}
    keep_b = {f.path for f in ib.functions.values() if f.short in shorts}
    return [p for p in paths_a if p in keep_a], [p for p in paths_b if p in keep_b]


def fill_diff(c: FunctionChange, ia: SnapshotIndex, ib: SnapshotIndex, *, context: int = 3) -> None:
    """Compute ``c.diff`` (unified diff lines of this function between the sides)."""
    c.diff = unified(ia, c.old, ib, c.new, context=context)
