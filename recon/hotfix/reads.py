"""What a definition reads from outside itself: module-level names, attribute chains, local imports.

Free names come from the slicer's own scope analysis
(:func:`recon.slicing.names.needs_of_function`), so a hotfix and a slice agree on what
a function needs. Two things are added for a definition that will run inside a real
module rather than a slice:

* annotations count when the module does not start with
  ``from __future__ import annotations``: Python evaluates them when the
  ``def`` runs (at import), so ``def f(x: BlockTables)`` needs ``BlockTables``;
* attribute chains on ``self``, on ``super()`` and on annotated parameters
  (``self.cache_config.mamba_block_size``, ``input_batch.max_query_len``), which
  the index can follow through the classes of the release.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ..slicing.names import (
    LocalImport,
    attribute_chain,
    needs_of_exprs,
    needs_of_function,
    needs_of_statement,
)

_FUNC = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(frozen=True)
class CallSite:
    """A call in the new code of a module-level name, ``self.m`` or ``super().m``."""

    root: str  # "name:<N>", "self" or "super"
    method: str | None  # the attribute called on self/super(); None for a bare name
    line: int
    positional: int
    keywords: tuple[str, ...]
    star: bool  # ``*args`` passed: the positional count is unknown

    @property
    def label(self) -> str:
        head = self.root.partition(":")[2] if self.root.startswith("name:") else (
            "self" if self.root == "self" else "super()")
        return f"{head}.{self.method}(...)" if self.method else f"{head}(...)"


@dataclass
class Reads:
    """Everything one definition reads; lines are the file's."""

    free: dict[str, list[tuple[tuple[str, ...], int]]] = field(default_factory=dict)
    #: (root, chain, line): root is "self", "super" or "param:<name>:<annotation text>"
    chains: list[tuple[str, tuple[str, ...], int]] = field(default_factory=list)
    imports: list[LocalImport] = field(default_factory=list)
    calls: list[CallSite] = field(default_factory=list)
    #: names read only in annotations (evaluated at import; what they denote never runs)
    annotation_only: set[str] = field(default_factory=set)
    _in_code: set[str] = field(default_factory=set)

    def add_free(self, name: str, chain: tuple[str, ...], line: int, *,
                 annotation: bool = False) -> None:
        self.free.setdefault(name, []).append((chain, line))
        if annotation and name not in self._in_code:
            self.annotation_only.add(name)
        elif not annotation:
            self._in_code.add(name)
            self.annotation_only.discard(name)


def future_annotations(tree: ast.Module) -> bool:
    """Whether the module has ``from __future__ import annotations`` (annotations never run)."""
    return any(isinstance(s, ast.ImportFrom) and s.module == "__future__"
               and any(a.name == "annotations" for a in s.names) for s in tree.body)


def reads_of(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, *, method: bool,
             lazy_annotations: bool) -> Reads:
    """What ``node`` reads; ``method``: a function defined in a class (its first argument is self)."""
    out = Reads()
    if isinstance(node, ast.ClassDef):
        needs = needs_of_statement(node)
        for ref in needs.refs:
            out.add_free(ref.name, ref.chain, ref.line)
        out.imports.extend(needs.imports)
        if not lazy_annotations:
            _annotation_names(out, [s.annotation for s in node.body if isinstance(s, ast.AnnAssign)])
        for stmt in node.body:
            if isinstance(stmt, _FUNC):
                _function_extras(out, stmt, method=True, lazy_annotations=lazy_annotations)
        return out
    head, body = needs_of_function(node)
    for needs in (head, body):
        for ref in needs.refs:
            out.add_free(ref.name, ref.chain, ref.line)
    out.imports.extend(body.imports)
    _function_extras(out, node, method=method, lazy_annotations=lazy_annotations)
    return out


def _function_extras(out: Reads, node: ast.FunctionDef | ast.AsyncFunctionDef, *, method: bool,
                     lazy_annotations: bool) -> None:
    args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
    if not lazy_annotations:
        _annotation_names(out, [a.annotation for a in args] + [node.returns])
    self_name = args[0].arg if method and args and not _is_static(node) else None
    typed = {a.arg: ast.unparse(a.annotation) for a in args
             if a.annotation is not None and a.arg != self_name}
    out.chains.extend(attribute_chains(node, self_name, typed))
    out.calls.extend(call_sites(node, self_name, set(out.free)))


def _is_static(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)


def _annotation_names(out: Reads, annotations: list[ast.expr | None]) -> None:
    exprs = [a for a in annotations if a is not None and not
             (isinstance(a, ast.Constant) and isinstance(a.value, str))]  # a string is never run
    for ref in needs_of_exprs(exprs).refs:
        out.add_free(ref.name, ref.chain, ref.line, annotation=True)


def attribute_chains(node: ast.AST, self_name: str | None,
                     typed: dict[str, str]) -> list[tuple[str, tuple[str, ...], int]]:
    """The longest attribute chains read on self, ``super()`` and annotated parameters."""
    found: dict[tuple[str, tuple[str, ...]], int] = {}
    for sub in ast.walk(node):
        if not isinstance(sub, ast.Attribute):
            continue
        root, chain = attribute_chain(sub)
        if isinstance(root, ast.Name) and root.id == self_name:
            key = ("self", chain)
        elif isinstance(root, ast.Call) and isinstance(root.func, ast.Name) \
                and root.func.id == "super" and self_name is not None:
            key = ("super", chain)
        elif isinstance(root, ast.Name) and root.id in typed:
            key = (f"param:{root.id}:{typed[root.id]}", chain)
        else:
            continue
        found.setdefault(key, sub.lineno)
    longest = [k for k in found if not any(o[0] == k[0] and len(o[1]) > len(k[1])
                                           and o[1][:len(k[1])] == k[1] for o in found)]
    return [(root, chain, found[(root, chain)]) for root, chain in sorted(longest)]


def call_sites(node: ast.AST, self_name: str | None, free: set[str]) -> list[CallSite]:
    """Calls of module-level names and of methods on self or ``super()``, with their arguments."""
    out = []
    for sub in ast.walk(node):
        if not isinstance(sub, ast.Call):
            continue
        func, root, method = sub.func, None, None
        if isinstance(func, ast.Name) and func.id in free:
            root = f"name:{func.id}"
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
                and self_name is not None and func.value.id == self_name:
            root, method = "self", func.attr
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call) \
                and isinstance(func.value.func, ast.Name) and func.value.func.id == "super":
            root, method = "super", func.attr
        if root is None or any(k.arg is None for k in sub.keywords):
            continue  # not ours, or **kwargs passed: nothing can be counted
        star = any(isinstance(a, ast.Starred) for a in sub.args)
        out.append(CallSite(root, method, sub.lineno, len(sub.args), tuple(
            k.arg for k in sub.keywords if k.arg is not None), star))
    return out
