"""Which definitions of a file differ between two versions of it, compared by the index.

A *piece* is a module-level function, a class, or a method (at any class
nesting depth); functions nested in functions belong to their enclosing one.
A class is a piece of its own when something at class level differs (bases,
decorators, fields, the set of its methods): adding a method changes the
class, so it is the class that has to be taken whole.

Code is compared by the index's normalized AST hashes, so a definition whose
comments or formatting alone differ counts as the same code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..index.models import ClassInfo, FunctionInfo, split_qualname
from .sides import Side


@dataclass
class Changes:
    """What differs in one module: changed pieces, and definitions only one side has."""

    changed: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


def class_shape(side: Side, qualname: str) -> object:
    """A class's class-level parts (not its methods' code)."""
    info = side.index.classes[qualname]
    fields = sorted((k, v.annotation, v.value) for k, v in info.fields.items())
    return (info.bases, tuple(sorted(info.keywords.items())), info.decorators,
            tuple(sorted(info.methods)), tuple(fields))


def same_code(a: Side, b: Side, qualname: str, other: str | None = None) -> bool:
    """Whether ``qualname`` in ``a`` and ``other`` (default: the same name) in ``b`` are the same code."""
    other = other or qualname
    fa, fb = a.index.functions.get(qualname), b.index.functions.get(other)
    if fa is not None or fb is not None:
        return fa is not None and fb is not None and fa.ast_hash == fb.ast_hash
    if qualname not in a.index.classes or other not in b.index.classes:
        return False
    if class_shape(a, qualname) != class_shape(b, other):
        return False
    methods = a.index.classes[qualname].methods
    return all(same_code(a, b, f"{qualname}.{m}", f"{other}.{m}") for m in methods)


def _candidates(side: Side, module: str) -> dict[str, FunctionInfo | ClassInfo]:
    info = side.index.modules[module]
    out: dict[str, FunctionInfo | ClassInfo] = {}
    for q in (*info.classes, *info.functions):
        if "<locals>" not in q:
            out[q] = side.definition(q)  # type: ignore[assignment]
    return out


def changed_definitions(before: Side, after: Side, module: str) -> Changes:
    """The outermost definitions of ``module`` that differ from ``before`` to ``after``."""
    old, new = _candidates(before, module), _candidates(after, module)
    out = Changes()
    taken: list[str] = []  # class pieces: everything inside them is covered

    def inside_taken(q: str) -> bool:
        local = split_qualname(q)[1]
        return any(local.startswith(split_qualname(t)[1] + ".") for t in taken)

    for q in sorted(set(old) | set(new), key=lambda q: (q.count("."), q)):
        if inside_taken(q):
            continue
        if q not in new:
            out.removed.append(q)
        elif q not in old:
            out.added.append(q)
        elif isinstance(new[q], ClassInfo) and isinstance(old[q], ClassInfo):
            if class_shape(before, q) != class_shape(after, q):
                out.changed.append(q)
                taken.append(q)
        elif not same_code(before, after, q):
            out.changed.append(q)
    for bucket in (out.changed, out.added, out.removed):
        bucket.sort(key=lambda q: _line(before, after, q))
    return out


def _line(before: Side, after: Side, qualname: str) -> int:
    info = before.definition(qualname) or after.definition(qualname)
    return info.lineno if info is not None else 0


def span(side: Side, qualname: str) -> tuple[int, int]:
    """First line (decorators included) and last line of a definition."""
    info = side.definition(qualname)
    assert info is not None
    return info.lineno, info.end_lineno
