"""Find a probe target's definition in a snapshot, and the modules that copy it.

Two ways to answer, one shape of answer (:class:`Definition`):

* :class:`IndexLookup` uses the shared snapshot index (``recon.index``:
  every module's functions with kind and signature, and its module-level
  import bindings, cached per file hash). This is the normal path.
* :class:`AstLookup` parses only the target's own file with stdlib ``ast``,
  and text-filters the package for importers. It is the fallback when the
  index package cannot be imported, and a second opinion in the tests.
"""

from __future__ import annotations

import ast
import difflib
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import ReconError
from ..snapshots.model import Snapshot


class LookupProblem(Exception):
    """The target is not where the spec says (message is user-facing)."""


@dataclass
class Definition:
    """What the probes need to know about one target's definition."""

    kind: str  # function, method, classmethod, staticmethod, property, cached_property
    signature: str
    params: list[str]
    file: str
    line: int
    generator: bool
    module_names: set[str] = field(default_factory=set)  # names an expression may use


def is_generator(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """``yield`` in the function's own body (not in nested functions or classes)."""
    stack: list[ast.AST] = list(node.body)
    while stack:
        child = stack.pop()
        if isinstance(child, ast.Yield | ast.YieldFrom):
            return True
        if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            stack.extend(ast.iter_child_nodes(child))
    return False


def copies_from_bindings(bindings: dict[str, dict[str, str]], module: str, name: str) -> list[str]:
    """Modules whose module-level names are bound to ``module.name``, re-exports followed.

    ``bindings`` maps each module to ``{local name: absolute dotted target}``.
    """
    sources = {f"{module}.{name}"}
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for mod, table in bindings.items():
            for local, target in table.items():
                alias = f"{mod}.{local}"
                if target in sources and mod != module and alias not in sources:
                    sources.add(alias)
                    found.add(mod)
                    changed = True
    return sorted(found)


class IndexLookup:
    """Answers from :func:`recon.index.load_index` (built once per snapshot, cached)."""

    source = "index"

    def __init__(self, snap: Snapshot) -> None:
        from ..index import load_index

        self.index = load_index(snap)

    def definition(self, module: str, attr: str) -> Definition:
        idx = self.index
        if module not in idx.modules:
            raise LookupProblem(f"module {module} is not in snapshot {idx.snapshot.name}")
        info = idx.modules[module]
        fn = idx.functions.get(f"{module}:{attr}")
        if fn is None:
            if f"{module}:{attr}" in idx.classes:
                raise LookupProblem(f"{attr} in {info.path} is a class, not a function")
            raise LookupProblem(f"{attr} is not defined in {info.path}"
                                + idx._suggest(f"{module}:{attr}", idx.functions))
        if "<locals>" in fn.name:
            raise LookupProblem(f"{attr} is a nested function: not reachable as an attribute")
        kind = fn.kind
        if kind == "property" and any(d.endswith("cached_property") for d in fn.decorators):
            kind = "cached_property"
        node = ast.parse(textwrap.dedent(idx.source(fn.qualname))).body[0]
        generator = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and is_generator(node)
        names = set(info.bindings) | set(info.variables)
        names |= {q.partition(":")[2].split(".")[0] for q in info.functions + info.classes}
        return Definition(kind=kind, signature=fn.signature, params=[p.name for p in fn.params],
                          file=fn.path, line=fn.def_lineno, generator=generator,
                          module_names=names)

    def copies(self, module: str, name: str) -> list[str]:
        bindings = {m: info.bindings for m, info in self.index.modules.items()}
        return copies_from_bindings(bindings, module, name)


class AstLookup:
    """Answers from stdlib ``ast``, parsing only the files that matter."""

    source = "ast"

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap

    def definition(self, module: str, attr: str) -> Definition:
        rel = self.snap.module_path(module)
        if rel is None:
            raise LookupProblem(f"module {module} is not in snapshot {self.snap.name}")
        try:
            tree = ast.parse(self.snap.read_bytes(rel), filename=rel)
        except SyntaxError as err:
            raise LookupProblem(f"{rel} does not parse: {err.msg} (line {err.lineno})") from err
        node, parent = _find(tree, attr.split("."))
        if node is None:
            close = difflib.get_close_matches(attr, _defined(tree), n=5, cutoff=0.6)
            raise LookupProblem(f"{attr} is not defined in {rel}" + (
                f"; did you mean: {', '.join(f'{module}:{c}' for c in close)}?" if close else ""))
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            raise LookupProblem(f"{attr} in {rel} is a class, not a function")
        args = node.args
        params = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
        params += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
        signature = f"({ast.unparse(args)})" + (f" -> {ast.unparse(node.returns)}"
                                                if node.returns else "")
        return Definition(kind=_kind(node, parent), signature=signature, params=params, file=rel,
                          line=node.lineno, generator=is_generator(node),
                          module_names=_module_names(tree))

    def copies(self, module: str, name: str) -> list[str]:
        bindings: dict[str, dict[str, str]] = {}
        for rec in self.snap.python_files():
            try:
                text = self.snap.read_text(rec.path)
            except (OSError, ReconError):
                continue
            if name not in text or "import" not in text:
                continue  # cheap filter: parse only the files that can hold a copy
            try:
                tree = ast.parse(text, filename=rec.path)
            except SyntaxError:
                continue
            is_pkg = rec.path.endswith("/__init__.py")
            mod = rec.path[: -len("/__init__.py")] if is_pkg else rec.path[: -len(".py")]
            mod = mod.replace("/", ".")
            table = bindings.setdefault(mod, {})
            for node in _module_level(tree):
                if isinstance(node, ast.ImportFrom):
                    origin = _resolve(mod, is_pkg, node)
                    for alias in node.names:
                        table[alias.asname or alias.name] = f"{origin}.{alias.name}"
        return copies_from_bindings(bindings, module, name)


def _find(tree: ast.Module, parts: list[str]) -> tuple[Any, Any]:
    """Walk ``Class.Inner.method`` through class bodies; the last definition wins."""
    scope: ast.AST = tree
    parent: ast.AST | None = None
    for part in parts:
        found = None
        for node in _body_defs(scope):
            if node.name == part:
                found = node
        if found is None:
            return None, None
        parent, scope = scope, found
    return scope, parent


def _body_defs(scope: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef]:
    """Definitions of a module or class body, looking into if/try/with blocks, not functions."""
    stack = list(getattr(scope, "body", []))
    while stack:
        node = stack.pop(0)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield node
        elif isinstance(node, ast.If | ast.Try | ast.With | ast.ExceptHandler):
            for name in ("body", "orelse", "finalbody", "handlers"):
                stack.extend(getattr(node, name, []))


def _module_level(tree: ast.Module) -> Iterator[ast.stmt]:
    """Statements that run at import time: the body, into if/try/with blocks."""
    stack: list[Any] = list(tree.body)
    while stack:
        node = stack.pop(0)
        yield node
        if isinstance(node, ast.If | ast.Try | ast.With | ast.ExceptHandler):
            for name in ("body", "orelse", "finalbody", "handlers"):
                stack.extend(getattr(node, name, []))


def _kind(node: ast.FunctionDef | ast.AsyncFunctionDef, parent: ast.AST | None) -> str:
    if not isinstance(parent, ast.ClassDef):
        return "function"
    decorators = {ast.unparse(d).rsplit(".", 1)[-1] for d in node.decorator_list}
    for name in ("staticmethod", "classmethod", "cached_property"):
        if name in decorators:
            return name
    if decorators & {"property", "setter", "getter", "deleter"}:
        return "property"
    return "method"


def _defined(tree: ast.Module) -> list[str]:
    """The functions and classes a module defines, with their methods (``Class.method``)."""
    defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    out = [n.name for n in tree.body if isinstance(n, defs)]
    out += [f"{c.name}.{m.name}" for c in tree.body if isinstance(c, ast.ClassDef)
            for m in c.body if isinstance(m, defs)]
    return out


def _module_names(tree: ast.Module) -> set[str]:
    """Names bound anywhere at module level (expressions are evaluated in its globals)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def _resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module an ``ImportFrom`` names, relative imports included."""
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    keep = len(base) - node.level + (1 if is_package else 0)
    return ".".join(base[:max(keep, 0)] + ([node.module] if node.module else []))
