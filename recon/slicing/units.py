"""One module of a snapshot, cut into the statements a slice can keep.

A *unit* is a top-level statement of the module (a ``def``, a ``class``, an
import, an assignment, or a compound ``if``/``try``/``with`` block kept whole)
or, inside a class, one member statement. Units carry their exact line range
(decorators included), the names they bind, and the sha256 of their bytes, so
the slice can keep any subset of them byte-exact at their original line numbers.

Source lines come from one split of the file (never ``ast.get_source_segment``,
which re-splits the whole file on every call).
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass, field

from .names import scope_bindings

_FUNC = (ast.FunctionDef, ast.AsyncFunctionDef)


def is_type_checking(test: ast.expr) -> bool:
    """``if TYPE_CHECKING:`` / ``if typing.TYPE_CHECKING:`` (False when the code runs)."""
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def stmt_start(node: ast.stmt) -> int:
    """First line of a statement, its decorators included."""
    decos = getattr(node, "decorator_list", None) or []
    return min([node.lineno, *(d.lineno for d in decos)])


def stmt_end(node: ast.stmt) -> int:
    return int(node.end_lineno or node.lineno)


@dataclass
class Unit:
    """A statement the slice can keep, with where it came from."""

    index: int
    node: ast.stmt
    start: int
    end: int
    kind: str  # def | class | import | assign | compound | docstring | future | other
    names: set[str] = field(default_factory=set)
    #: for compound units: name -> nested defs binding it (bodies walked only when needed)
    inner_defs: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = field(default_factory=dict)

    @property
    def is_dunder_def(self) -> bool:
        return (self.kind == "def" and isinstance(self.node, _FUNC)
                and self.node.name.startswith("__") and self.node.name.endswith("__"))


@dataclass
class ClassModel:
    """A class statement split into its header and member units."""

    unit: Unit
    node: ast.ClassDef
    class_line: int  # the line of the ``class`` keyword (shells start here: no decorators)
    header_end: int  # last line before the first member
    members: list[Unit]
    member_bindings: dict[str, list[int]]
    atomic: bool  # one-line class: kept whole or not at all
    body_indent: str


@dataclass
class ModuleModel:
    """A parsed module of the snapshot."""

    name: str
    rel: str
    is_package: bool
    lines: list[str]  # keepends
    units: list[Unit]
    bindings: dict[str, list[int]]
    classes: dict[int, ClassModel]  # unit index -> class model (top-level classes)
    has_getattr: bool
    star_imports: list[int]
    file_sha256: str

    def text(self, start: int, end: int) -> str:
        """Lines ``start..end`` (1-based, inclusive) exactly as in the file."""
        return "".join(self.lines[start - 1:end])

    def segment_sha256(self, start: int, end: int) -> str:
        data = self.text(start, end).encode("utf-8", errors="surrogateescape")
        return hashlib.sha256(data).hexdigest()

    @property
    def package_name(self) -> str:
        return self.name if self.is_package else self.name.rpartition(".")[0]


def _bound_names(node: ast.stmt) -> set[str]:
    if isinstance(node, (*_FUNC, ast.ClassDef)):
        return {node.name}
    if isinstance(node, ast.If) and is_type_checking(node.test):
        bound, _ = scope_bindings(node.orelse)
        return bound
    bound, _ = scope_bindings([node])
    return bound


def _kind(node: ast.stmt, first: bool) -> str:
    if isinstance(node, _FUNC):
        return "def"
    if isinstance(node, ast.ClassDef):
        return "class"
    if isinstance(node, ast.ImportFrom) and node.module == "__future__":
        return "future"
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return "import"
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        return "assign"
    if first and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
            and isinstance(node.value.value, str):
        return "docstring"
    if isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While, ast.AsyncWith,
                         ast.AsyncFor)) or type(node).__name__ == "TryStar":
        return "compound"
    return "other"


def _inner_defs(node: ast.stmt) -> dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Defs nested in a compound statement (not inside other defs or classes)."""
    out: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = {}
    stack: list[ast.AST] = [node]
    while stack:
        cur = stack.pop()
        if isinstance(cur, _FUNC):
            out.setdefault(cur.name, []).append(cur)
            continue
        if isinstance(cur, (ast.ClassDef, ast.expr)):
            continue
        if isinstance(cur, ast.If) and is_type_checking(cur.test):
            stack.extend(cur.orelse)
            continue
        stack.extend(ast.iter_child_nodes(cur))
    return out


def _make_units(body: list[ast.stmt], *, module_level: bool = True) -> tuple[list[Unit], dict[str, list[int]]]:
    units: list[Unit] = []
    bindings: dict[str, list[int]] = {}
    for i, node in enumerate(body):
        kind = _kind(node, i == 0)
        unit = Unit(i, node, stmt_start(node), stmt_end(node), kind)
        unit.names = set() if kind == "docstring" else _bound_names(node)
        if module_level and isinstance(node, ast.AnnAssign) and node.value is None:
            # `current_platform: Platform` binds nothing when the module runs (a module
            # __getattr__ often provides the name): it must not hide that __getattr__
            unit.names = set()
        if kind == "compound":
            unit.inner_defs = _inner_defs(node)
        units.append(unit)
        for name in unit.names:
            bindings.setdefault(name, []).append(i)
    return units, bindings


def _class_model(unit: Unit, lines: list[str]) -> ClassModel:
    node = unit.node
    assert isinstance(node, ast.ClassDef)
    members, mb = _make_units(node.body, module_level=False)
    first = members[0]
    atomic = first.start <= node.lineno
    first_line = lines[first.start - 1] if first.start - 1 < len(lines) else ""
    indent = first_line[: len(first_line) - len(first_line.lstrip())] or "    "
    return ClassModel(unit=unit, node=node, class_line=node.lineno,
                      header_end=max(node.lineno, first.start - 1), members=members,
                      member_bindings=mb, atomic=atomic, body_indent=indent)


def parse_module(name: str, rel: str, data: bytes, *, is_package: bool) -> ModuleModel:
    """Parse one file into a :class:`ModuleModel` (raises SyntaxError/ValueError)."""
    text = data.decode("utf-8", errors="surrogateescape")
    if text.startswith("\ufeff"):
        text = text[1:]
    tree = ast.parse(text, filename=rel)
    lines = text.splitlines(keepends=True)
    units, bindings = _make_units(tree.body)
    classes = {u.index: _class_model(u, lines) for u in units if u.kind == "class"}
    stars = [u.index for u in units if isinstance(u.node, ast.ImportFrom)
             and any(a.name == "*" for a in u.node.names)]
    return ModuleModel(name=name, rel=rel, is_package=is_package, lines=lines, units=units,
                       bindings=bindings, classes=classes, has_getattr="__getattr__" in bindings,
                       star_imports=stars, file_sha256=hashlib.sha256(data).hexdigest())
