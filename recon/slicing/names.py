"""What a piece of code needs from its module: free names, attribute names, local imports.

The closure walker asks one question of every statement it keeps: which
module-level names does this code read when it runs? Annotations are skipped
on purpose: the emitted slice compiles every piece with lazy annotations
(PEP 563), so ``def f(config: Qwen3Config)`` does not need ``Qwen3Config``.
Decorators, default values, class bases and class-body statements are
evaluated when the ``def``/``class`` runs, so they count.

Scopes are handled the way CPython resolves names: a name assigned anywhere in
a function is local to it (unless declared ``global``), comprehensions and
lambdas have their own scopes, class bodies are not visible to their methods.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

_FUNC = (ast.FunctionDef, ast.AsyncFunctionDef)
_COMP = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


@dataclass
class Ref:
    """A read of a name that is not local: resolved later against the module."""

    name: str
    line: int
    #: attribute chain read on the name (``envs.VLLM_X`` -> ["VLLM_X"])
    chain: tuple[str, ...] = ()
    #: "value" (any use), "isinstance" (only the class argument of isinstance/issubclass)
    use: str = "value"


@dataclass
class LocalImport:
    """An import statement inside a function body (runs when the function runs)."""

    module: str | None
    level: int
    names: list[tuple[str, str | None]]  # (name, asname); for ``import a.b`` name is "a.b"
    is_from: bool
    line: int
    #: local alias -> attribute chains read on it inside the function
    chains: dict[str, list[tuple[str, ...]]] = field(default_factory=dict)


@dataclass
class Needs:
    """Everything one piece of code reads from outside itself."""

    refs: list[Ref] = field(default_factory=list)
    attrs: set[str] = field(default_factory=set)
    #: attributes read on ``self``/``cls``/``super()``/``type(self)`` (what shells must hold)
    self_attrs: set[str] = field(default_factory=set)
    imports: list[LocalImport] = field(default_factory=list)

    def merge(self, other: Needs) -> None:
        self.refs.extend(other.refs)
        self.attrs |= other.attrs
        self.self_attrs |= other.self_attrs
        self.imports.extend(other.imports)


def _target_names(node: ast.AST) -> set[str]:
    out: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
            out.add(sub.id)
        elif isinstance(sub, ast.Starred) and isinstance(sub.value, ast.Name):
            out.add(sub.value.id)
    return out


def _args_names(args: ast.arguments) -> set[str]:
    names = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
    if args.vararg:
        names.add(args.vararg.arg)
    if args.kwarg:
        names.add(args.kwarg.arg)
    return names


def scope_bindings(body: list[ast.stmt]) -> tuple[set[str], set[str]]:
    """(names bound in this scope, names declared global) without entering nested scopes."""
    bound: set[str] = set()
    globs: set[str] = set()
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, (*_FUNC, ast.ClassDef)):
            bound.add(node.name)
            # decorators/defaults/bases belong to this scope
            stack.extend(node.decorator_list)
            if isinstance(node, ast.ClassDef):
                stack.extend(node.bases)
                stack.extend(k.value for k in node.keywords)
            else:
                stack.extend(d for d in node.args.defaults)
                stack.extend(d for d in node.args.kw_defaults if d is not None)
            continue
        if isinstance(node, ast.Lambda):
            stack.extend(node.args.defaults)
            continue
        if isinstance(node, _COMP):
            # walrus inside a comprehension binds in the enclosing scope
            for sub in ast.walk(node):
                if isinstance(sub, ast.NamedExpr) and isinstance(sub.target, ast.Name):
                    bound.add(sub.target.id)
            continue
        if isinstance(node, ast.Global):
            globs.update(node.names)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    continue
                bound.add(alias.asname or alias.name.split(".")[0])
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            bound.add(node.rest)
        elif isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
            bound.add(node.target.id)
        if isinstance(node, ast.AnnAssign):
            stack.append(node.target)
            if node.value is not None:
                stack.append(node.value)
            continue  # the annotation itself is lazy
        stack.extend(ast.iter_child_nodes(node))
    return bound - globs, globs


def direct_imports(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """Import statements of one function scope (not those of nested defs/lambdas/classes)."""
    out: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        elif not isinstance(node, (*_FUNC, ast.ClassDef, ast.Lambda, ast.expr)):
            stack.extend(ast.iter_child_nodes(node))
    return sorted(out, key=lambda n: n.lineno)


def local_import_of(stmt: ast.Import | ast.ImportFrom) -> LocalImport:
    """The :class:`LocalImport` record of one import statement."""
    if isinstance(stmt, ast.ImportFrom):
        return LocalImport(stmt.module, stmt.level, [(a.name, a.asname) for a in stmt.names],
                           True, stmt.lineno)
    return LocalImport(None, 0, [(a.name, a.asname) for a in stmt.names], False, stmt.lineno)


def _is_self_like(node: ast.expr, visible: frozenset[str]) -> bool:
    """``self``/``cls`` (as locals), ``super()``, ``type(self)``, ``self.__class__``."""
    if isinstance(node, ast.Name):
        return node.id in ("self", "cls") and node.id in visible
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        if node.func.id == "super":
            return True
        if node.func.id == "type" and len(node.args) == 1:
            return _is_self_like(node.args[0], visible)
    return False


def attribute_chain(node: ast.Attribute) -> tuple[ast.expr, tuple[str, ...]]:
    """``a.b.c`` -> (the ``a`` node, ("b", "c")): the root an attribute path hangs from."""
    parts: list[str] = []
    cur: ast.expr = node
    while isinstance(cur, ast.Attribute):
        parts.append(cur.attr)
        cur = cur.value
    return cur, tuple(reversed(parts))


def _is_type_check(node: ast.Call) -> bool:
    """``isinstance``/``issubclass`` with two arguments: its class argument is read specially."""
    return isinstance(node.func, ast.Name) and node.func.id in ("isinstance", "issubclass") \
        and len(node.args) == 2


class _Collector:
    """Walks code, tracking which names are local, and records what is not."""

    def __init__(self) -> None:
        self.needs = Needs()
        #: alias -> LocalImport for imports bound in enclosing function scopes
        self._import_alias: list[dict[str, LocalImport]] = []

    # -- entry points ---------------------------------------------------------
    def function(self, node: ast.FunctionDef | ast.AsyncFunctionDef, visible: frozenset[str],
                 *, header: bool = True) -> None:
        if header:
            self._exprs(node.decorator_list, visible)
            self._exprs(node.args.defaults, visible)
            self._exprs([d for d in node.args.kw_defaults if d is not None], visible)
        bound, _globs = scope_bindings(node.body)
        inner = visible | bound | _args_names(node.args)
        aliases: dict[str, LocalImport] = {}
        for stmt in direct_imports(node.body):
            li = self._local_import(stmt)
            self.needs.imports.append(li)
            for name, asname in li.names:
                aliases[asname or name.split(".")[0]] = li
        self._import_alias.append(aliases)
        try:
            self._stmts(node.body, frozenset(inner - _globs))
        finally:
            self._import_alias.pop()

    @staticmethod
    def _local_import(stmt: ast.Import | ast.ImportFrom) -> LocalImport:
        return local_import_of(stmt)

    # -- walking ----------------------------------------------------------------
    def _stmts(self, stmts: list[ast.stmt], visible: frozenset[str]) -> None:
        for stmt in stmts:
            self._node(stmt, visible)

    def _exprs(self, exprs: list[ast.expr], visible: frozenset[str]) -> None:
        for e in exprs:
            self._node(e, visible)

    def _node(self, node: ast.AST, visible: frozenset[str]) -> None:
        """Record what one node reads, walking each part it evaluates in that part's scope."""
        # Expressions nest deeply (call and attribute chains, long sums): the common kinds
        # are walked here, in one frame per level, so deep code reaches the same depth.
        if isinstance(node, _FUNC):
            self.function(node, visible)
        elif isinstance(node, ast.ClassDef):
            self._class(node, visible)
        elif isinstance(node, ast.Lambda):
            self._lambda(node, visible)
        elif isinstance(node, _COMP):
            self._comprehension(node, visible)
        elif isinstance(node, ast.AnnAssign):
            self._node(node.target, visible)
            if node.value is not None:
                self._node(node.value, visible)
        elif isinstance(node, ast.arg):
            pass  # a parameter node holds only its annotation, which is lazy
        elif isinstance(node, ast.Call) and _is_type_check(node):
            self._type_check(node, visible)
        elif isinstance(node, ast.Attribute):
            root = self._attribute(node, visible)
            if root is not None:
                self._node(root, visible)
        elif isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load) and node.id not in visible:
                self.needs.refs.append(Ref(node.id, node.lineno))
        else:
            if isinstance(node, ast.Call):
                self._reflective_attr(node, visible)
            for child in ast.iter_child_nodes(node):
                self._node(child, visible)

    def _class(self, node: ast.ClassDef, visible: frozenset[str]) -> None:
        """Header in the enclosing scope; body in the class scope, which methods do not see."""
        self._exprs([*node.decorator_list, *node.bases, *(k.value for k in node.keywords)],
                    visible)
        bound, _ = scope_bindings(node.body)
        body_visible = visible | bound
        for stmt in node.body:
            if isinstance(stmt, _FUNC):
                self.function(stmt, visible)  # methods do not see the class scope
                self._exprs(stmt.decorator_list, frozenset(body_visible))
            else:
                self._node(stmt, frozenset(body_visible))

    def _lambda(self, node: ast.Lambda, visible: frozenset[str]) -> None:
        """Defaults run where the lambda is written; the body sees its parameters too."""
        self._exprs(node.args.defaults, visible)
        self._exprs([d for d in node.args.kw_defaults if d is not None], visible)
        self._node(node.body, visible | _args_names(node.args))

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp,
                       visible: frozenset[str]) -> None:
        """A comprehension is its own scope, except for its first iterable."""
        inner = set(visible)
        for gen in node.generators:
            inner |= _target_names(gen.target)
        first = True
        for gen in node.generators:
            # the first iterable is evaluated in the enclosing scope
            self._node(gen.iter, visible if first else frozenset(inner))
            first = False
            for cond in gen.ifs:
                self._node(cond, frozenset(inner))
        elts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        for e in elts:
            self._node(e, frozenset(inner))

    def _type_check(self, node: ast.Call, visible: frozenset[str]) -> None:
        """``isinstance(x, C)`` needs ``C`` only as a class, which a slice may stand in for."""
        self._node(node.func, visible)
        self._node(node.args[0], visible)
        cls_arg = node.args[1]
        elts = cls_arg.elts if isinstance(cls_arg, ast.Tuple) else [cls_arg]
        for e in elts:
            if isinstance(e, ast.Name) and e.id not in visible:
                self.needs.refs.append(Ref(e.id, e.lineno, (), "isinstance"))
            else:
                self._node(e, visible)
        for kw in node.keywords:
            self._node(kw.value, visible)

    def _attribute(self, node: ast.Attribute, visible: frozenset[str]) -> ast.expr | None:
        """Record an attribute chain whole; the root still to walk, or None for a name root."""
        self.needs.attrs.add(node.attr)
        root, chain = attribute_chain(node)
        for part in chain:
            self.needs.attrs.add(part)
        if _is_self_like(root, visible):
            self.needs.self_attrs.add(chain[0])
        if not isinstance(root, ast.Name):
            return root
        if root.id not in visible:
            self.needs.refs.append(Ref(root.id, root.lineno, chain))
        else:
            for aliases in reversed(self._import_alias):
                if root.id in aliases:
                    aliases[root.id].chains.setdefault(root.id, []).append(chain)
                    break
        return None

    def _reflective_attr(self, node: ast.Call, visible: frozenset[str]) -> None:
        """``getattr(obj, "name")`` reads an attribute as surely as ``obj.name`` does."""
        if isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "hasattr", "setattr") and len(node.args) >= 2 \
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            self.needs.attrs.add(node.args[1].value)
            if _is_self_like(node.args[0], visible):
                self.needs.self_attrs.add(node.args[1].value)

def needs_of_function(node: ast.FunctionDef | ast.AsyncFunctionDef, *,
                      class_scope: frozenset[str] = frozenset()) -> tuple[Needs, Needs]:
    """(needs of the def statement itself: decorators/defaults, needs of the body).

    ``class_scope``: names of the enclosing class body; decorators of a method
    are evaluated in the class scope, its body is not.
    """
    head = _Collector()
    head._exprs(node.decorator_list, class_scope)
    head._exprs(node.args.defaults, class_scope)
    head._exprs([d for d in node.args.kw_defaults if d is not None], class_scope)
    body = _Collector()
    body.function(node, frozenset(), header=False)
    return head.needs, body.needs


def needs_of_exprs(exprs: list[ast.expr]) -> Needs:
    """Needs of expressions evaluated in module scope (class bases, decorators, keywords)."""
    col = _Collector()
    col._exprs(exprs, frozenset())
    return col.needs


def needs_of_statement(node: ast.stmt, *, scope: frozenset[str] = frozenset(),
                       skip_func_bodies: frozenset[int] = frozenset()) -> Needs:
    """Needs of a module- or class-level statement run as is.

    ``skip_func_bodies``: ids of nested def nodes whose bodies are not needed
    (a compound statement kept whole for one of its names still *defines* the
    others, so their decorators and defaults count but their bodies do not).
    """
    col = _Collector()
    if isinstance(node, _FUNC):
        head, body = needs_of_function(node, class_scope=scope)
        col.needs.merge(head)
        if id(node) not in skip_func_bodies:
            col.needs.merge(body)
        return col.needs
    if skip_func_bodies:
        # walk children, treating skipped defs as header-only
        for child in _iter_statement_parts(node):
            if isinstance(child, _FUNC) and id(child) in skip_func_bodies:
                head, _ = needs_of_function(child, class_scope=scope)
                col.needs.merge(head)
            elif isinstance(child, ast.stmt):
                col.needs.merge(needs_of_statement(child, scope=scope,
                                                   skip_func_bodies=skip_func_bodies))
            else:
                col._node(child, scope)
        return col.needs
    col._node(node, scope)
    return col.needs


def _iter_statement_parts(node: ast.stmt) -> list[ast.AST]:
    """Direct children of a compound statement, statements kept as statements."""
    return list(ast.iter_child_nodes(node))
