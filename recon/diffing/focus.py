"""``--focus QUALNAME --depth N``: the functions on the code path around one target.

"Did anything on the path to X change?" is answered with the call graph
of :mod:`recon.index.chain` (callers and callees of the target up to ``depth``
edges), computed on *both* sides and united: a caller that exists only in
the new release, or a callee the new release stopped calling, is on the
path too. The target only has to exist on one side.
"""

from __future__ import annotations

from typing import Any

from ..errors import ReconError
from ..index.snapshot_index import SnapshotIndex
from .model import FunctionChange, FunctionDiff


def chain_members(idx: SnapshotIndex, target: str, depth: int) -> tuple[str | None, dict[str, int]]:
    """``(resolved target, {qualname: distance})`` on one side; (None, {}) when it is absent there."""
    from ..index.chain import chain

    try:
        qualname = idx.lookup(target).qualname
    except ReconError:
        return None, {}
    result = chain(idx, qualname, depth=depth)
    members = {qualname: 0}
    for table in (result.callers, result.callees):
        for q, d in table.items():
            members[q] = min(d, members.get(q, d))
    return qualname, members


def focus_members(ia: SnapshotIndex, ib: SnapshotIndex, target: str,
                  depth: int) -> dict[str, Any]:
    """The chain around ``target`` on both sides; ReconError when neither side has it."""
    qa, ma = chain_members(ia, target, depth)
    qb, mb = chain_members(ib, target, depth)
    if qa is None and qb is None:
        try:
            ib.lookup(target)
        except ReconError as err:  # re-raise B's message: it carries the close matches
            raise ReconError(f"--focus: {err}") from err
    members = dict(ma)
    for q, d in mb.items():
        members[q] = min(d, members.get(q, d))
    return {"target": qb or qa, "target_old": qa, "depth": depth, "members": members,
            "in_old": len(ma), "in_new": len(mb)}


def apply_focus(fd: FunctionDiff, focus: dict[str, Any]) -> FunctionDiff:
    """Keep only the changes (and moves) that touch a member of the chain, on either side."""
    members = focus["members"]

    def hit(c: FunctionChange) -> bool:
        return bool((c.old is not None and c.old.qualname in members)
                    or (c.new is not None and c.new.qualname in members))

    return FunctionDiff(changes=[c for c in fd.changes if hit(c)],
                        moved=[c for c in fd.moved if hit(c)],
                        formatting=[c for c in fd.formatting if hit(c)],
                        files_compared=fd.files_compared,
                        unchanged=sum(1 for q in members if q not in _touched(fd)),
                        focus={k: v for k, v in focus.items()}, note=fd.note)


def _touched(fd: FunctionDiff) -> set[str]:
    out: set[str] = set()
    for c in (*fd.changes, *fd.moved, *fd.formatting):
        for fn in (c.old, c.new):
            if fn is not None:
                out.add(fn.qualname)
    return out
