"""Check probe targets against a snapshot before anything reaches a container.

For each target: does it exist in this release, what kind of callable is it
(function, method, classmethod, staticmethod, property), what is its signature,
do the requested expressions and ``self`` attributes make sense for it, and
which modules copy it with ``from module import name``: those copies keep the
unpatched function when they were taken before the patch (a circular import,
an image's own ``sitecustomize``), so the bundle lists them for the runtime.

Definitions and copies come from the shared snapshot index
(:mod:`recon.index`); a stdlib-``ast`` lookup stands in when that package
cannot be imported (see :mod:`recon.probes.lookup`).
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import asdict, dataclass, field
from typing import Any

from ..snapshots.model import Snapshot
from .lookup import AstLookup, IndexLookup, LookupProblem
from .spec import ProbeSpec, TargetSpec

BOUND_KINDS = ("method", "classmethod", "property", "cached_property")
SUPPORTED_KINDS = ("function", "method", "classmethod", "staticmethod", "property",
                   "cached_property")


@dataclass
class TargetCheck:
    """What the snapshot says about one target; ``problems`` empty means usable."""

    qualname: str
    kind: str | None = None
    signature: str | None = None
    file: str | None = None
    line: int | None = None
    params: list[str] = field(default_factory=list)
    copies: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    source: str = "index"  # which lookup answered: "index" or "ast"

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def make_lookup(snap: Snapshot, *, use_index: bool = True) -> IndexLookup | AstLookup:
    """The index when it can be imported (and ``use_index``), else the ``ast`` fallback."""
    if use_index:
        try:
            return IndexLookup(snap)
        except ImportError:
            pass
    return AstLookup(snap)


def validate_targets(spec: ProbeSpec, snap: Snapshot, *, use_index: bool = True
                     ) -> list[TargetCheck]:
    """One :class:`TargetCheck` per target of ``spec``, in order."""
    lookup = make_lookup(snap, use_index=use_index)
    return [check_target(t, lookup) for t in spec.targets]


def free_names(tree: ast.AST) -> set[str]:
    """Names an expression reads from outside itself.

    A comprehension's loop variables, a lambda's parameters and a ``:=`` target
    are the expression's own (``[c.num_blocks for c in result]`` reads ``result``
    only), so they are not looked up among the target's parameters.
    """
    nodes = list(ast.walk(tree))
    own = {n.id for n in nodes if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    own |= {a.arg for n in nodes if isinstance(n, ast.Lambda)
            for a in (*n.args.posonlyargs, *n.args.args, *n.args.kwonlyargs)}
    own |= {a.arg for n in nodes if isinstance(n, ast.Lambda)
            for a in (n.args.vararg, n.args.kwarg) if a is not None}
    return {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - own


def check_target(target: TargetSpec, lookup: IndexLookup | AstLookup) -> TargetCheck:
    out = TargetCheck(qualname=target.qualname, source=lookup.source)
    try:
        d = lookup.definition(target.module, target.attr)
    except LookupProblem as problem:
        out.problems.append(str(problem))
        return out
    out.kind, out.signature, out.params, out.file, out.line = (
        d.kind, d.signature, d.params, d.file, d.line)
    if d.kind not in SUPPORTED_KINDS:
        out.problems.append(f"{target.attr} is a {d.kind}; the runtime patches only "
                            + ", ".join(SUPPORTED_KINDS))
    if target.self_attrs and d.kind not in BOUND_KINDS:
        out.problems.append(f"--self-attr needs a method; {target.attr} is a {d.kind}")
    known = set(d.params) | {"result"} | set(dir(builtins)) | d.module_names
    for name, src in target.exprs.items():
        unknown = sorted(free_names(ast.parse(src, mode="eval")) - known)
        if unknown:
            out.problems.append(f"--expr {name}={src} uses {', '.join(unknown)}, which is neither "
                                f"a parameter {d.signature} nor a name of {target.module}")
    if d.kind == "function" and "." not in target.attr:
        out.copies = lookup.copies(target.module, target.attr)
    return out
