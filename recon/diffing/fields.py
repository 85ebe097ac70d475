"""Class fields: what a release changed in dataclass/pydantic field defaults and class constants.

vLLM's and SGLang's configuration lives in classes whose field defaults are
class-body assignments (``max_num_seqs: int = 256``,
``cpu_offload: bool = Field(default_factory=f)``). A changed default changes
behaviour without changing any function (a dataclass's ``__init__`` has no
source), so the function section cannot see it; this one compares the
index's :attr:`ClassInfo.fields <recon.index.models.ClassInfo.fields>`,
normalized source of each annotation and value, so reformatting, quotes
and comments are not changes.

Classes are paired:

1. by qualname (the common case: the class stayed in its module);
2. a class gone from one module and a class of the same module-local name
   new in another, each the only one of that name left unpaired on its side,
   when at least half of the larger field set is shared (a config class
   moved to its own file). A class that was renamed, or moved and rewritten
   past that, is left out: nothing here could tell it apart from an
   unrelated class, and its methods are reported by the function section.

Classes only on one side are not listed here (their methods are, as added
or removed functions). Only files whose bytes differ are compared, as for
functions: a file with the same sha256 holds the same classes.

The module constants (assignments directly in a module body,
:mod:`recon.diffing.constants`) are compared here too and reported in the
same section, under ``module:NAME``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from ..index.models import ClassInfo, split_qualname
from ..index.snapshot_index import SnapshotIndex
from .constants import diff_constants
from .model import FieldChange, FieldDiff


def diff_fields(ia: SnapshotIndex, ib: SnapshotIndex, *, paths_a: Iterable[str] | None = None,
                paths_b: Iterable[str] | None = None,
                owners: set[str] | None = None, modules: set[str] | None = None) -> FieldDiff:
    """Compare the class fields and module constants of ``paths_a`` in ``ia`` with ``paths_b`` in ``ib``.

    Without paths every class and module of both indexes is compared.
    ``owners`` (``--focus``, see :func:`focus_owners`) keeps only the class
    pairs with one of these qualnames on either side, ``modules``
    (:func:`~recon.diffing.constants.focus_modules`) only the module pairs
    of these names.
    """
    ca, cb = _select(ia, paths_a), _select(ib, paths_b)
    pairs = [(o, cb[q]) for q, o in ca.items() if q in cb]
    pairs += _moved(
        {q: c for q, c in ca.items() if q not in cb}, {q: c for q, c in cb.items() if q not in ca})
    if owners is not None:
        pairs = [(o, n) for o, n in pairs if o.qualname in owners or n.qualname in owners]
    changes: list[FieldChange] = []
    for o, n in sorted(pairs, key=lambda p: (p[1].path, p[1].lineno)):
        changes += compare_fields(o, n)
    constants, modules_compared = diff_constants(ia, ib, paths_a=paths_a, paths_b=paths_b,
                                                 modules=modules)
    return FieldDiff(changes=changes, classes_compared=len(pairs),
                     focus=owners is not None or modules is not None, constants=constants,
                     modules_compared=modules_compared)


def compare_fields(o: ClassInfo, n: ClassInfo) -> list[FieldChange]:
    """The field changes of one class: B's fields in B's order, then the removed ones."""
    out: list[FieldChange] = []
    for name, new in n.fields.items():
        old = o.fields.get(name)
        if old is None:
            out.append(FieldChange("added", o, n, name, None, new))
            continue
        parts = tuple(p for p, differs in (("default", old.value != new.value),
                                           ("annotation", old.annotation != new.annotation))
                      if differs)
        if parts:
            out.append(FieldChange(parts[0], o, n, name, old, new, parts))
    out += [FieldChange("removed", o, n, name, old, None)
            for name, old in o.fields.items() if name not in n.fields]
    return out


def _moved(gone: dict[str, ClassInfo], new: dict[str, ClassInfo]) -> list[tuple[ClassInfo, ClassInfo]]:
    """Round 2 of the module docstring: same local name, unique, mostly the same fields."""
    by_local_old: dict[str, list[ClassInfo]] = defaultdict(list)
    by_local_new: dict[str, list[ClassInfo]] = defaultdict(list)
    for c in gone.values():
        by_local_old[split_qualname(c.qualname)[1]].append(c)
    for c in new.values():
        by_local_new[split_qualname(c.qualname)[1]].append(c)
    out = []
    for local, olds in by_local_old.items():
        news = by_local_new.get(local)
        if len(olds) != 1 or not news or len(news) != 1:
            continue
        o, n = olds[0], news[0]
        shared = len(o.fields.keys() & n.fields.keys())
        if shared and 2 * shared >= max(len(o.fields), len(n.fields)):
            out.append((o, n))
    return out


def focus_owners(members: Iterable[str]) -> set[str]:
    """``--focus``: the classes owning a function of the chain (``mod:Cls`` of ``mod:Cls.meth``)."""
    owners = set()
    for q in members:
        module, local = split_qualname(q)
        head = local.rpartition(".")[0]
        if head and not head.endswith(">"):  # not "f.<locals>"
            owners.add(f"{module}:{head}")
    return owners


def _select(idx: SnapshotIndex, paths: Iterable[str] | None) -> dict[str, ClassInfo]:
    if paths is None:
        return dict(idx.classes)
    wanted = set(paths)
    return {q: c for q, c in idx.classes.items() if c.path in wanted}
