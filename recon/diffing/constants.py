"""Module constants: what a release changed in the assignments directly in a module body.

Engines keep many defaults at module level (``DEFAULT_MAX_NUM_SEQS = 256``,
a ``Literal[...]`` of accepted modes, a protocol version) and point class
fields at them (``max_num_seqs: int = Field(default=DEFAULT_MAX_NUM_SEQS)``):
a changed constant changes behaviour while the class field's text, and every
function, stays the same. This compares the index's
:attr:`ModuleInfo.constants <recon.index.models.ModuleInfo.constants>` on
normalized source (:func:`ast.unparse`), as :mod:`recon.diffing.fields`
compares class fields, so reformatting, quotes and comments are not changes.

Modules are paired by module name only: a module moved or renamed is left
out (its constants would need the same guesswork as moved classes, and
engines move whole config modules rarely enough to read the file list
instead). A file that failed to parse on either side is left out too (it
defines nothing, so every constant would look added or removed). Only files
whose bytes differ are compared: a file with the same sha256 holds the same
constants.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..index.models import ModuleInfo, split_qualname
from ..index.snapshot_index import SnapshotIndex
from .model import ConstantChange


def diff_constants(ia: SnapshotIndex, ib: SnapshotIndex, *, paths_a: Iterable[str] | None = None,
                   paths_b: Iterable[str] | None = None,
                   modules: set[str] | None = None) -> tuple[list[ConstantChange], int]:
    """``(changes, modules compared)`` for the modules of ``paths_a`` in ``ia`` and ``paths_b`` in ``ib``.

    Without paths every module of both indexes is compared. ``modules``
    (``--focus``, see :func:`focus_modules`) keeps only these module names.
    """
    ma, mb = _select(ia, paths_a), _select(ib, paths_b)
    pairs = [(o, mb[name]) for name, o in ma.items()
             if name in mb and o.error is None and mb[name].error is None]
    if modules is not None:
        pairs = [(o, n) for o, n in pairs if n.name in modules]
    changes: list[ConstantChange] = []
    for o, n in sorted(pairs, key=lambda p: p[1].path):
        changes += compare_constants(o, n)
    return changes, len(pairs)


def compare_constants(o: ModuleInfo, n: ModuleInfo) -> list[ConstantChange]:
    """The constant changes of one module: B's constants in B's order, then the removed ones."""
    out: list[ConstantChange] = []
    old_consts, new_consts = o.constants, n.constants
    for name, new in new_consts.items():
        old = old_consts.get(name)
        if old is None:
            out.append(ConstantChange("added", o, n, name, None, new))
            continue
        parts = tuple(p for p, differs in (("value", old.value != new.value),
                                           ("annotation", old.annotation != new.annotation))
                      if differs)
        if parts:
            out.append(ConstantChange(parts[0], o, n, name, old, new, parts))
    out += [ConstantChange("removed", o, n, name, old, None)
            for name, old in old_consts.items() if name not in new_consts]
    return out


def focus_modules(members: Iterable[str]) -> set[str]:
    """``--focus``: the modules owning a function of the chain (``mod`` of ``mod:Cls.meth``)."""
    return {split_qualname(q)[0] for q in members}


def _select(idx: SnapshotIndex, paths: Iterable[str] | None) -> dict[str, ModuleInfo]:
    if paths is None:
        return dict(idx.modules)
    out = {}
    for p in paths:
        name = idx.by_path.get(p)
        if name is not None and name in idx.modules:
            out[name] = idx.modules[name]
    return out
