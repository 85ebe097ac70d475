"""Check probe targets against a snapshot before anything reaches a container.

For each target: does it exist in this release, what kind of callable is it
(function, method, classmethod, staticmethod, property), what is its signature,
do the requested expressions and ``self`` attributes make sense for it, and
which modules copy it with ``from module import name`` (those copies keep the
unpatched function unless the runtime fixes them, so the bundle lists them).

The lookup is a small stdlib-``ast`` walk of the target's own file plus a
text-filtered scan for importers: the shared index (``recon.index``) was not
ready when this was written, and these questions need only a few files.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import ReconError
from ..snapshot import Snapshot
from .spec import ProbeSpec, TargetSpec

BOUND_KINDS = ("method", "classmethod", "property")
SUPPORTED_KINDS = ("function", "method", "classmethod", "staticmethod", "property")


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

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def validate_targets(spec: ProbeSpec, snap: Snapshot) -> list[TargetCheck]:
    """One :class:`TargetCheck` per target of ``spec``, in order."""
    return [check_target(t, snap) for t in spec.targets]


def check_target(target: TargetSpec, snap: Snapshot) -> TargetCheck:
    out = TargetCheck(qualname=target.qualname)
    rel = snap.module_path(target.module)
    if rel is None:
        out.problems.append(f"module {target.module} is not in snapshot {snap.name}")
        return out
    out.file = rel
    try:
        tree = ast.parse(snap.read_bytes(rel), filename=rel)
    except SyntaxError as err:
        out.problems.append(f"{rel} does not parse: {err.msg} (line {err.lineno})")
        return out
    node, parent = _find(tree, target.attr.split("."))
    if node is None:
        out.problems.append(f"{target.attr} is not defined in {rel}")
        return out
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        out.problems.append(f"{target.attr} in {rel} is a {type(node).__name__}, not a function")
        return out
    out.line = node.lineno
    out.kind = _kind(node, parent)
    out.signature = f"({ast.unparse(node.args)})" + (
        f" -> {ast.unparse(node.returns)}" if node.returns else "")
    out.params = _params(node.args)
    if out.kind not in SUPPORTED_KINDS:
        out.problems.append(f"{target.attr} is a {out.kind}; the runtime patches only "
                            + ", ".join(SUPPORTED_KINDS))
    if _is_generator(node):
        out.problems.append(f"{target.attr} is a generator function: the runtime leaves those alone")
    if target.self_attrs and out.kind not in BOUND_KINDS:
        out.problems.append(f"--self-attr needs a method; {target.attr} is a {out.kind}")
    known = set(out.params) | {"result"} | set(dir(builtins)) | _module_names(tree)
    for name, src in target.exprs.items():
        unknown = sorted({n.id for n in ast.walk(ast.parse(src, mode="eval"))
                          if isinstance(n, ast.Name) and n.id not in known})
        if unknown:
            out.problems.append(f"--expr {name}={src} uses {', '.join(unknown)}, which is neither "
                                f"a parameter {out.signature} nor a name of {target.module}")
    if out.kind == "function" and "." not in target.attr:
        out.copies = find_copies(snap, target.module, target.attr)
    return out


def _find(tree: ast.Module, parts: list[str]) -> tuple[ast.AST | None, ast.AST | None]:
    """Walk ``Class.Inner.method`` through class bodies; the last definition wins."""
    scope: ast.AST = tree
    parent: ast.AST | None = None
    for part in parts:
        found = None
        for node in _body_defs(scope):
            if getattr(node, "name", None) == part:
                found = node
        if found is None:
            return None, None
        parent, scope = scope, found
    return scope, parent


def _body_defs(scope: ast.AST) -> Iterator[ast.AST]:
    """Definitions of a module or class body, looking into if/try blocks, not functions."""
    stack = list(getattr(scope, "body", []))
    while stack:
        node = stack.pop(0)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield node
        elif isinstance(node, ast.If | ast.Try | ast.With):
            for name in ("body", "orelse", "finalbody", "handlers"):
                stack.extend(getattr(node, name, []))
        elif isinstance(node, ast.ExceptHandler):
            stack.extend(node.body)


def _kind(node: ast.FunctionDef | ast.AsyncFunctionDef, parent: ast.AST | None) -> str:
    decorators = {ast.unparse(d).rsplit(".", 1)[-1] for d in node.decorator_list}
    if not isinstance(parent, ast.ClassDef):
        return "function"
    for name in ("staticmethod", "classmethod", "cached_property"):
        if name in decorators:
            return name
    if decorators & {"property", "setter", "getter", "deleter"}:
        return "property"
    return "method"


def _is_generator(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    stack = list(node.body)
    while stack:
        child = stack.pop()
        if isinstance(child, ast.Yield | ast.YieldFrom):
            return True
        if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            stack.extend(ast.iter_child_nodes(child))
    return False


def _params(args: ast.arguments) -> list[str]:
    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    return names


def _module_names(tree: ast.Module) -> set[str]:
    """Top-level names of a module (expressions are evaluated in its globals)."""
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
    parts = base[:max(keep, 0)] + ([node.module] if node.module else [])
    return ".".join(parts)


def find_copies(snap: Snapshot, module: str, name: str) -> list[str]:
    """Modules holding ``from module import name`` (re-exports followed transitively)."""
    sources = {(module, name)}
    found: dict[str, None] = {}
    importers = []  # (module, its ImportFrom nodes resolved to absolute module names)
    for rec in snap.python_files():
        try:
            text = snap.read_text(rec.path)
        except (OSError, ReconError):
            continue
        if name not in text or "import" not in text:
            continue  # cheap filter: parse only the files that can hold a copy
        try:
            tree = ast.parse(text, filename=rec.path)
        except SyntaxError:
            continue
        is_pkg = rec.path.endswith("/__init__.py")
        mod = (rec.path[: -len("/__init__.py")] if is_pkg else rec.path[: -len(".py")])
        mod = mod.replace("/", ".")
        froms = [(_resolve(mod, is_pkg, n), n.names) for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom)]
        importers.append((mod, froms))
    changed = True
    while changed:
        changed = False
        for mod, froms in importers:
            for origin, aliases in froms:
                for alias in aliases:
                    key = (mod, alias.asname or alias.name)
                    if (origin, alias.name) in sources and mod != module and key not in sources:
                        sources.add(key)
                        found[mod] = None
                        changed = True
    return sorted(found)
