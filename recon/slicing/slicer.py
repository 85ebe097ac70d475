"""``build_slice``: qualnames of a snapshot -> a standalone slice module (cached).

A recipe may slice the same functions a dozen times; the result is cached per
(snapshot folder, qualnames, stubbed names) and revalidated against the size
and mtime of every file it used, so an edited copy of a snapshot is re-sliced.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..acquire.writer import write_text
from ..errors import ReconError
from ..snapshots.model import Snapshot
from .closure import DEFAULT_BUDGET, compute_closure, cut_hint, pieces, suggest_budget
from .emit import render
from .modules import ModuleSet


@dataclass
class Slice:
    """An emitted slice: its text and what it contains."""

    text: str
    meta: dict[str, Any]
    snapshot: Snapshot = field(repr=False)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8", errors="surrogateescape")).hexdigest()

    @property
    def targets(self) -> list[dict[str, Any]]:
        return list(self.meta["targets"])

    @property
    def pieces(self) -> list[dict[str, Any]]:
        return list(self.meta["pieces"])

    @property
    def outside(self) -> dict[str, dict[str, Any]]:
        return dict(self.meta["outside"])

    @property
    def unresolved(self) -> list[dict[str, Any]]:
        return list(self.meta["unresolved"])

    @property
    def budget(self) -> int:
        """The piece budget the slice was built with."""
        return int(self.meta["budget"])

    @property
    def cut(self) -> list[str]:
        """Pieces the kept code needs that the budget left out (``"file:line what"``).

        Empty when the closure is complete. What the dropped pieces need in turn
        was not walked, so a non-empty list is a lower bound.
        """
        return list(self.meta["cut"])

    def cut_hint(self) -> str:
        """``the slice was cut at the budget ...; try --budget M`` ("" when nothing was cut)."""
        return cut_hint(len(self.meta["cut"]), self.budget) if self.meta["cut"] else ""

    def cut_warning(self) -> str:
        """One line for stderr naming what was cut and how to raise the budget ("" when none)."""
        return cut_warning(self.cut, self.budget)

    def write(self, path: str | Path) -> Path:
        """Write the slice module (through recon's single writer)."""
        path = Path(path)
        write_text(path, self.text)
        return path

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.meta.items()}
        out["sha256"] = self.sha256
        out["lines"] = self.text.count("\n")
        return out


def cut_warning(cut: list[str], budget: int, shown: int = 3) -> str:
    """One line: how many pieces the budget cut, the first few, and the flag to raise it."""
    if not cut:
        return ""
    first = "; ".join(cut[:shown]) + ("; ..." if len(cut) > shown else "")
    return (f"slice cut at its budget of {pieces(budget)}: at least {pieces(len(cut))} the code "
            f"needs dropped ({first}); a run may fail with NameError/ImportError or silently "
            f"lack them; raise the budget with --budget {suggest_budget(budget)}")


_CACHE: dict[tuple[Any, ...], tuple[Slice, list[tuple[str, int, int]]]] = {}


def _stamps(snapshot: Snapshot, meta: dict[str, Any]) -> list[tuple[str, int, int]]:
    out = []
    for rel in sorted({p["file"] for p in meta["pieces"]}):
        path = snapshot.src / rel
        try:
            st = os.stat(path)
        except OSError:
            out.append((str(path), -1, -1))
            continue
        out.append((str(path), st.st_size, st.st_mtime_ns))
    return out


def _still_valid(stamps: list[tuple[str, int, int]]) -> bool:
    for path, size, mtime in stamps:
        try:
            st = os.stat(path)
        except OSError:
            return False
        if (st.st_size, st.st_mtime_ns) != (size, mtime):
            return False
    return True


def build_slice(snapshot: Snapshot | str | Path, qualnames: list[str] | str, *,
                stubs: list[str] | frozenset[str] | tuple[str, ...] = (),
                budget: int = DEFAULT_BUDGET) -> Slice:
    """Slice ``qualnames`` (``pkg.mod:Class.method`` or dotted) out of ``snapshot``.

    ``stubs``: names the caller will supply at run time (``--stub``/``--forbid``);
    the walk stops at them instead of pulling in their closure.
    ``budget``: most pieces (statements, class members) to keep; past it the
    walk keeps nothing more and lists what it dropped in :attr:`Slice.cut`
    (and in a comment at the top of the slice).
    """
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ReconError(f"slice budget must be a positive number of pieces, not {budget!r}")
    snap = snapshot if isinstance(snapshot, Snapshot) else Snapshot.open(snapshot)
    names = [qualnames] if isinstance(qualnames, str) else list(qualnames)
    stub_set = frozenset(stubs)
    key = (str(snap.root), tuple(names), stub_set, budget)
    hit = _CACHE.get(key)
    if hit is not None and _still_valid(hit[1]):
        return hit[0]
    closure = compute_closure(ModuleSet(snap), names, stubs=stub_set, budget=budget)
    text, meta = render(closure, snap)
    result = Slice(text=text, meta=meta, snapshot=snap)
    if len(_CACHE) > 64:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[key] = (result, _stamps(snap, meta))
    return result
