"""The call graph of a snapshot, built on demand from the functions a query reaches.

Nothing is computed for the whole program up front. Asking for a
function's callees parses that one function (its source segment, cut from
the index's pre-split lines) and resolves each call with
:class:`recon.index.resolve.Resolver`. Asking for its callers looks up the
functions whose recorded call names (``FunctionInfo.calls``) include its
name, then resolves only those. Results accumulate in a ``networkx``
directed graph whose nodes are qualnames (``pkg.mod:Cls.meth``, and
``pkg.mod:<module>`` for code that runs at import time).

Resolution covers imports and aliases (``import x as y``, re-exports in
``__init__``), ``self.m()`` and ``cls.m()`` along the class's bases inside
the package, ``super().m()``, constructors (``Foo(...)`` -> ``Foo.__init__``
and a dataclass's ``__post_init__``), attributes with recorded types
(``self.cache_config.m()``), parameters and locals with annotations or
constructor values, and module-level calls. Every call site ends up in
exactly one bucket: resolved (an edge), external (it leaves the package:
``torch.cat``, ``len``) or unresolved (kept, counted and listable, never
silently dropped).

Edge kinds: ``call``, ``constructor``, and ``override`` from a method to a
subclass method that overrides it (where dynamic dispatch may land).
Budgets (seconds, nodes) turn a runaway query into a partial answer marked
``partial`` instead of a hang.
"""

from __future__ import annotations

import ast
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

import networkx as nx

from .models import FunctionInfo, split_qualname
from .resolve import Ref, Resolver, dotted
from .snapshot_index import SnapshotIndex
from .visitor import value_hint

MODULE_NODE = "<module>"
CONSTRUCTORS = ("__init__", "__post_init__")
#: Above this many overriding subclasses, override edges are cut (and the node marked).
MAX_OVERRIDES = 64


class CallSite(NamedTuple):
    """One call expression in a function, and what it was resolved to."""

    caller: str  # qualname (or "pkg.mod:<module>")
    lineno: int
    text: str  # the callee expression as written, e.g. "current_platform.update_block_size_for_backend"
    status: str  # "resolved" | "external" | "unresolved"
    targets: tuple[str, ...]  # qualnames, for resolved calls
    kind: str  # "call" | "constructor"
    detail: str  # external dotted name, or why it is unresolved


@dataclass
class Budget:
    """Limits for one query; exceeding one makes the answer partial, never an error."""

    seconds: float = 10.0
    max_nodes: int = 5000
    started: float = field(default_factory=time.perf_counter)
    reason: str | None = None

    def exhausted(self, graph: nx.DiGraph) -> bool:
        if self.reason is None:
            if time.perf_counter() - self.started > self.seconds:
                self.reason = f"time budget of {self.seconds:g}s spent"
            elif graph.number_of_nodes() > self.max_nodes:
                self.reason = f"node budget of {self.max_nodes} reached"
        return self.reason is not None


class _Scope:
    """What names mean inside one function body (or a module body)."""

    __slots__ = ("fn", "module", "hints", "alts", "locals", "parent", "self_ref", "class_q")

    def __init__(self, module: str, fn: FunctionInfo | None, parent: _Scope | None) -> None:
        self.fn = fn
        self.module = module
        self.hints: dict[str, str | Ref] = {}  # local name -> type hint text or a resolved Ref
        self.alts: dict[str, list[str | Ref]] = {}  # names bound to several things (branches)
        self.locals: set[str] = set()  # every name bound locally (shadows module globals)
        self.parent = parent
        self.self_ref: tuple[str, Ref] | None = None  # ("self", instance ref) for methods
        self.class_q: str | None = None


def _is_module_node(q: str) -> bool:
    return q.endswith(":" + MODULE_NODE)


class CallGraph:
    """An on-demand call graph over one index. Reuse one instance across queries."""

    def __init__(self, index: SnapshotIndex, resolver: Resolver | None = None) -> None:
        self.index = index
        self.resolver = resolver or Resolver(index)
        self.graph: nx.DiGraph = nx.DiGraph()
        self.sites: dict[str, list[CallSite]] = {}  # analysed callers -> their call sites
        self._callers_done: set[str] = set()
        self._by_call: dict[str, list[str]] | None = None
        self._scopes: dict[str, _Scope] = {}
        self._nodes: dict[str, ast.AST | None] = {}
        self.truncated: set[str] = set()  # nodes whose override fan-out was cut

    # -- public queries --------------------------------------------------------------
    def callees(self, qualname: str) -> list[CallSite]:
        """Every call site of ``qualname`` (analysed once, then cached); adds edges."""
        if qualname in self.sites:
            return self.sites[qualname]
        sites = list(self._analyse(qualname))
        self.sites[qualname] = sites
        self.add_node(qualname)
        for site in sites:
            for target in site.targets:
                self._edge(qualname, target, site.kind, site.lineno)
        fn = self.index.functions.get(qualname)
        if fn is not None and fn.class_name is not None:
            subs = self.resolver.overrides(fn)
            if len(subs) > MAX_OVERRIDES:
                self.truncated.add(qualname)
                subs = subs[:MAX_OVERRIDES]
            for sub in subs:
                self._edge(qualname, sub.qualname, "override", sub.def_lineno)
        return sites

    def callers(self, qualname: str, budget: Budget | None = None) -> list[str]:
        """Functions (and module bodies) that call ``qualname``, plus overridden ancestor methods.

        With a ``budget``, the search stops when it runs out (a common name such
        as ``forward`` has thousands of candidate callers); the node is then not
        marked as done, so a later call with more budget completes it.
        """
        if qualname not in self._callers_done:
            self.add_node(qualname)
            fn = self.index.functions.get(qualname)
            complete = True
            if fn is not None:
                for anc in self.resolver.overridden(fn):
                    self._edge(anc.qualname, qualname, "override", fn.def_lineno)
                for cand in self._candidates(fn):
                    if budget is not None and budget.exhausted(self.graph):
                        complete = False
                        break
                    self.callees(cand)  # adds the edges to qualname when there are some
            if complete:
                self._callers_done.add(qualname)
        return sorted(self.graph.predecessors(qualname))

    def successors(self, qualname: str) -> list[str]:
        self.callees(qualname)
        return sorted(self.graph.successors(qualname))

    def unresolved(self) -> list[CallSite]:
        """Unresolved call sites of every function analysed so far."""
        return [s for sites in self.sites.values() for s in sites if s.status == "unresolved"]

    def external(self) -> list[CallSite]:
        return [s for sites in self.sites.values() for s in sites if s.status == "external"]

    # -- graph helpers ---------------------------------------------------------------
    def add_node(self, q: str) -> None:
        """Add ``q`` with its path and line (no analysis)."""
        if q in self.graph:
            return
        fn = self.index.functions.get(q)
        if fn is not None:
            self.graph.add_node(q, kind="function", path=fn.path, lineno=fn.def_lineno)
        else:
            module = split_qualname(q)[0]
            info = self.index.modules.get(module)
            self.graph.add_node(q, kind="module", path=info.path if info else "", lineno=1)

    def _edge(self, a: str, b: str, kind: str, lineno: int) -> None:
        self.add_node(a)
        self.add_node(b)
        data = self.graph.get_edge_data(a, b)
        if data is None:
            self.graph.add_edge(a, b, kind=kind, lines=[lineno])
        elif lineno not in data["lines"]:
            data["lines"].append(lineno)

    def _candidates(self, fn: FunctionInfo) -> list[str]:
        """Callers worth analysing: functions whose recorded call names include ``fn``'s name."""
        by_call = self._call_table()
        names = {fn.short}
        if fn.short in CONSTRUCTORS and fn.class_name is not None:
            names = {fn.class_name.rsplit(".", 1)[-1]}  # Foo(...)
            subs = set(self.resolver.subclasses(f"{fn.module}:{fn.class_name}"))
            # super().__init__() in subclasses, and direct Base.__init__(self) calls
            out = set()
            for q in by_call.get(fn.short, ()):
                owner = self.index.functions.get(q)
                if owner is not None and owner.class_name is not None and (
                        f"{owner.module}:{owner.class_name}" in subs):
                    out.add(q)
            out.update(q for n in names for q in by_call.get(n, ()))
            return sorted(out)
        if fn.short in ("forward", "__call__") and fn.class_name is not None:
            # module(x) calls forward through __call__: look for calls of the attributes
            # typed with this class (self.qkv_proj = ColumnParallelLinear(...)).
            names |= self._attributes_of_type(fn.class_name.rsplit(".", 1)[-1])
        return sorted({q for n in names for q in by_call.get(n, ())})

    def _attributes_of_type(self, class_short: str) -> set[str]:
        """Attribute names whose recorded type hint mentions ``class_short`` (cheap text test)."""
        pattern = re.compile(rf"(?<![\w.]){re.escape(class_short)}\b|\.{re.escape(class_short)}\b")
        return {attr for cls in self.index.classes.values() for attr, hint in cls.attributes.items()
                if pattern.search(hint)}

    def _call_table(self) -> dict[str, list[str]]:
        if self._by_call is None:
            table: dict[str, list[str]] = {}
            for q, fn in self.index.functions.items():
                for name in fn.calls:
                    table.setdefault(name, []).append(q)
            for mod, info in self.index.modules.items():
                for name in info.calls:
                    table.setdefault(name, []).append(f"{mod}:{MODULE_NODE}")
            self._by_call = table
        return self._by_call

    # -- analysis ----------------------------------------------------------------------
    def _analyse(self, qualname: str) -> Iterator[CallSite]:
        if _is_module_node(qualname):
            module = split_qualname(qualname)[0]
            tree = self._module_tree(module)
            if tree is None:
                return
            scope = _Scope(module, None, None)
            for call in _module_calls(tree):
                yield self._site(qualname, call, scope)
            return
        fn = self.index.functions.get(qualname)
        if fn is None:
            return
        node = self._function_node(fn)
        if node is None:
            return
        scope = self._scope(fn, node)
        for call in _body_calls(node):
            yield self._site(qualname, call, scope)

    def _site(self, caller: str, call: ast.Call, scope: _Scope) -> CallSite:
        sites = [self._site_for(caller, call, s) for s in _variants(call.func, scope)]
        if len(sites) == 1:
            return sites[0]
        resolved = [s for s in sites if s.status == "resolved"]
        if not resolved:
            return sites[0]
        targets = tuple(dict.fromkeys(t for s in resolved for t in s.targets))
        return resolved[0]._replace(targets=targets)

    def _site_for(self, caller: str, call: ast.Call, scope: _Scope) -> CallSite:
        text = _callee_text(call.func)
        try:
            ref = self._expr(call.func, scope, 0)
        except RecursionError:
            ref = None
        line = call.lineno
        if ref is None:
            return CallSite(caller, line, text, "unresolved", (), "call", _why(call.func, scope))
        if ref.kind == "function":
            return CallSite(caller, line, text, "resolved", (ref.name,), "call", "")
        if ref.kind == "class":
            targets = tuple(fn.qualname for fn in (self.resolver.find_method(ref.name, m)
                                                   for m in CONSTRUCTORS) if fn is not None)
            if targets:
                return CallSite(caller, line, text, "resolved", targets, "constructor", "")
            ext = self.resolver.external_bases(ref.name)
            if ext:
                return CallSite(caller, line, text, "external", (), "constructor", f"{ext[0]}.__init__")
            # A class of the package with no __init__ of its own (a dataclass, a NamedTuple):
            # resolved, with nothing of the package's code to call.
            return CallSite(caller, line, text, "resolved", (), "constructor",
                            f"generated __init__ of {ref.name}")
        if ref.kind == "instance":
            fn = self.resolver.find_method(ref.name, "__call__")
            if fn is None and self.resolver.external_bases(ref.name):
                fn = self.resolver.find_method(ref.name, "forward")  # nn.Module.__call__ -> forward
            if fn is not None:
                return CallSite(caller, line, text, "resolved", (fn.qualname,), "call", "")
            return CallSite(caller, line, text, "unresolved", (), "call",
                            f"instance of {ref.name} is called but has no __call__")
        if ref.kind == "external":
            return CallSite(caller, line, text, "external", (), "call", ref.name)
        return CallSite(caller, line, text, "unresolved", (), "call", f"{ref.kind} {ref.name} is called")

    # -- expressions -------------------------------------------------------------------
    def _expr(self, node: ast.expr, scope: _Scope, depth: int) -> Ref | None:
        if depth > 24:
            return None
        if isinstance(node, ast.Name):
            return self._name(node.id, scope)
        if isinstance(node, ast.Attribute):
            value = node.value
            if (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
                    and value.func.id == "super" and scope.class_q is not None):
                fn = self.resolver.find_method(scope.class_q, node.attr, after=scope.class_q)
                if fn is not None:
                    return Ref("function", fn.qualname)
                ext = self.resolver.external_bases(scope.class_q)
                return Ref("external", f"{ext[0]}.{node.attr}") if ext else None
            base = self._expr(value, scope, depth + 1)
            return self.resolver.member(base, node.attr) if base is not None else None
        if isinstance(node, ast.Call):
            return self.resolver.call_result(self._expr(node.func, scope, depth + 1))
        if isinstance(node, ast.Subscript):
            base = self._expr(node.value, scope, depth + 1)
            return base if base is not None and base.kind == "external" else None
        literal = _LITERALS.get(type(node))
        if literal is not None:  # "/".join(...), [..].append(...): methods of builtin types
            if isinstance(node, ast.Constant):
                return Ref("external", f"builtins.{type(node.value).__name__}")
            return Ref("external", literal)
        return None

    def _name(self, name: str, scope: _Scope | None, depth: int = 0) -> Ref | None:
        first = scope
        while scope is not None:
            if scope.self_ref is not None and scope.self_ref[0] == name:
                return scope.self_ref[1]
            hint = scope.hints.get(name)
            if hint is not None:
                if isinstance(hint, Ref):
                    return hint
                return self._local_hint(name, hint, scope, depth)
            if name in scope.locals:
                return None  # bound here, to something we cannot type
            scope = scope.parent
        module = first.module if first is not None else ""
        return self.resolver.lookup(module, name)

    def _local_hint(self, name: str, hint: str, scope: _Scope, depth: int) -> Ref | None:
        """A local's hint: ``x = y.z`` and ``x = f(...)`` are read in the function's own scope
        (``model_config = vllm_config.model_config``); annotations in the module's."""
        if depth > 8:
            return None
        if not (hint.startswith("=") or hint.endswith("()")):
            return self.resolver.annotation(scope.module, hint)
        path = hint[1:] if hint.startswith("=") else hint[:-2]
        head, *rest = path.split(".")
        # "x = x.attr" refers to the outer x: look it up past this binding
        ref = self._name(head, scope.parent, depth + 1) if head == name else \
            self._name(head, scope, depth + 1)
        if ref is None and head == name and scope.parent is None:
            ref = self.resolver.lookup(scope.module, head)
        for attr in rest:
            if ref is None:
                return None
            ref = self.resolver.member(ref, attr)
        return self.resolver.call_result(ref) if hint.endswith("()") else ref

    # -- parsing on demand -----------------------------------------------------------
    def _function_node(self, fn: FunctionInfo) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        if fn.qualname not in self._nodes:
            self._nodes[fn.qualname] = self.index.function_ast(fn.qualname)
        return self._nodes[fn.qualname]  # type: ignore[return-value]

    def _module_tree(self, module: str) -> ast.Module | None:
        key = f"{module}:{MODULE_NODE}"
        if key not in self._nodes:
            info = self.index.modules.get(module)
            tree = None
            if info is not None and info.error is None:
                try:
                    tree = ast.parse("\n".join(self.index.lines(info.path)) + "\n")
                except (SyntaxError, ValueError, RecursionError, MemoryError):
                    tree = None
            self._nodes[key] = tree
        return self._nodes[key]  # type: ignore[return-value]

    def _scope(self, fn: FunctionInfo, node: ast.FunctionDef | ast.AsyncFunctionDef) -> _Scope:
        got = self._scopes.get(fn.qualname)
        if got is not None:
            return got
        parent = None
        if ".<locals>." in fn.name:
            outer = fn.module + ":" + fn.name.rsplit(".<locals>.", 1)[0]
            outer_fn = self.index.functions.get(outer)
            outer_node = self._function_node(outer_fn) if outer_fn is not None else None
            if outer_fn is not None and outer_node is not None:
                parent = self._scope(outer_fn, outer_node)
        scope = _Scope(fn.module, fn, parent)
        args = node.args
        params = [*args.posonlyargs, *args.args, *args.kwonlyargs]
        for extra in (args.vararg, args.kwarg):
            if extra is not None:
                scope.locals.add(extra.arg)
        for arg in params:
            scope.locals.add(arg.arg)
            if arg.annotation is not None:
                scope.hints[arg.arg] = ast.unparse(arg.annotation)
        if fn.class_name is not None:
            cls_q = f"{fn.module}:{fn.class_name}"
            scope.class_q = cls_q
            first = params[0].arg if params and fn.kind != "staticmethod" else None
            if first is not None:
                kind = "class" if fn.kind == "classmethod" else "instance"
                scope.self_ref = (first, Ref(kind, cls_q))
        elif parent is not None:
            scope.class_q = parent.class_q
        _collect_locals(node, scope, self.resolver)
        self._scopes[fn.qualname] = scope
        return scope


# -- AST helpers ------------------------------------------------------------------------
_LITERALS: dict[type, str] = {
    ast.Constant: "builtins.object", ast.JoinedStr: "builtins.str", ast.List: "builtins.list",
    ast.ListComp: "builtins.list", ast.Dict: "builtins.dict", ast.DictComp: "builtins.dict",
    ast.Set: "builtins.set", ast.SetComp: "builtins.set", ast.Tuple: "builtins.tuple",
    ast.GeneratorExp: "builtins.generator",
}


def _own_nodes(roots: Iterable[ast.AST]) -> Iterator[ast.AST]:
    """Nodes of a body, not descending into nested defs (their decorators/defaults excepted)."""
    stack = list(roots)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            stack.extend(node.decorator_list)
            stack.extend(d for d in node.args.defaults)
            stack.extend(d for d in node.args.kw_defaults if d is not None)
        elif isinstance(node, ast.ClassDef):
            stack.extend(node.decorator_list)
            stack.extend(node.bases)
            stack.extend(k.value for k in node.keywords)
        else:
            stack.extend(ast.iter_child_nodes(node))


def _body_calls(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.Call]:
    calls = [n for n in _own_nodes(node.body) if isinstance(n, ast.Call)]
    calls.sort(key=lambda c: (c.lineno, c.col_offset))
    return calls


def _module_calls(tree: ast.Module) -> list[ast.Call]:
    """Calls that run at import time: the module body and class bodies, not function bodies."""
    out = []
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Call):
            out.append(node)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            stack.extend(node.decorator_list)
            stack.extend(node.args.defaults)
            stack.extend(d for d in node.args.kw_defaults if d is not None)
        else:
            stack.extend(ast.iter_child_nodes(node))
    out.sort(key=lambda c: (c.lineno, c.col_offset))
    return out


def _collect_locals(fn: ast.FunctionDef | ast.AsyncFunctionDef, scope: _Scope,
                    resolver: Resolver) -> None:
    """Local names of a function: imports, nested defs, assignments with a recognisable type.

    A name bound to different things on different branches (``if v2: from a import
    X as R`` / ``else: from b import Y as R``) keeps every binding in
    ``scope.alts``, so a call through it gets an edge to each target.
    """
    index = resolver.index
    info = scope.fn
    prefix = f"{info.name}.<locals>." if info is not None else ""
    found: list[tuple[int, int, int, str, str | Ref]] = []  # (weak, line, col, name, hint)

    def bind(node: ast.AST, name: str, hint: str | Ref | None, strong: bool = False) -> None:
        scope.locals.add(name)
        if hint is not None:
            found.append((0 if strong else 1, node.lineno, node.col_offset, name, hint))  # type: ignore[attr-defined]

    for node in _own_nodes(fn.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            q = f"{scope.module}:{prefix}{node.name}"
            ref = (Ref("class", q) if q in index.classes
                   else Ref("function", q) if q in index.functions else None)
            bind(node, node.name, ref)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for name, ref in _import_bindings(node, scope.module, resolver):
                bind(node, name, ref)
        elif isinstance(node, ast.Assign):
            hint = value_hint(node.value, dotted)
            for assigned in node.targets:
                for name in _bound_names(assigned):
                    bind(node, name, hint if isinstance(assigned, ast.Name) else None)
        elif isinstance(node, ast.AnnAssign):
            if isinstance(node.target, ast.Name):
                bind(node, node.target.id, ast.unparse(node.annotation), strong=True)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            for name in _bound_names(node.target):
                bind(node, name, None)
        elif isinstance(node, ast.comprehension):
            for name in _bound_names(node.target):
                scope.locals.add(name)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    hint = value_hint(item.context_expr, dotted)
                    for name in _bound_names(item.optional_vars):
                        bind(node, name, hint if isinstance(item.optional_vars, ast.Name) else None)
        elif isinstance(node, (ast.AugAssign, ast.NamedExpr)):
            for name in _bound_names(node.target):
                scope.locals.add(name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            scope.locals.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                scope.locals.discard(name)
    _record_hints(scope, found)


def _import_bindings(node: ast.Import | ast.ImportFrom, module: str,
                     resolver: Resolver) -> Iterator[tuple[str, Ref | None]]:
    """(local name, what it resolves to) per name an import binds, resolved one at a time."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            target = alias.name if alias.asname else alias.name.split(".", 1)[0]
            yield alias.asname or target, resolver.resolve_dotted(target)
        return
    mod = _absolute(module, resolver.index, node.module or "", node.level)
    for alias in node.names:
        if alias.name != "*":
            yield (alias.asname or alias.name,
                   resolver.resolve_dotted(f"{mod}.{alias.name}" if mod else alias.name))


def _record_hints(scope: _Scope, found: list[tuple[int, int, int, str, str | Ref]]) -> None:
    """Annotated bindings win the hint; names bound differently on branches keep each one."""
    found.sort(key=lambda t: (t[0], t[1], t[2]))
    for weak, _, _, name, bound in found:
        if name not in scope.hints:
            scope.hints[name] = bound
        if not weak:
            continue
        alts = scope.alts.setdefault(name, [])
        if bound not in alts:
            alts.append(bound)
    for name in [n for n, alts in scope.alts.items() if len(alts) < 2]:
        del scope.alts[name]


def _variants(func: ast.expr, scope: _Scope) -> list[_Scope]:
    """One scope per binding of the callee's root name when branches bind it differently."""
    root = func
    while isinstance(root, (ast.Attribute, ast.Call, ast.Subscript)):
        root = root.func if isinstance(root, ast.Call) else root.value
    if not isinstance(root, ast.Name):
        return [scope]
    s: _Scope | None = scope
    while s is not None:
        if root.id in s.hints or root.id in s.locals:
            break
        s = s.parent
    if s is None or root.id not in s.alts:
        return [scope]
    out = []
    for hint in s.alts[root.id]:
        variant = _Scope(scope.module, scope.fn, scope.parent)
        variant.hints, variant.alts, variant.locals = dict(scope.hints), {}, scope.locals
        variant.self_ref, variant.class_q = scope.self_ref, scope.class_q
        variant.hints[root.id] = hint  # for this call only; shadows an enclosing binding too
        out.append(variant)
    return out


def _absolute(module: str, index: SnapshotIndex, name: str, level: int) -> str:
    from .models import absolute_module

    info = index.modules.get(module)
    return absolute_module(module, bool(info and info.is_package), name, level)


def _bound_names(target: ast.expr) -> Iterator[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            yield from _bound_names(elt)
    elif isinstance(target, ast.Starred):
        yield from _bound_names(target.value)


def _callee_text(func: ast.expr) -> str:
    name = dotted(func)
    if name is not None:
        return name
    try:
        text = ast.unparse(func)
    except Exception:  # pragma: no cover - unparse of odd nodes
        text = type(func).__name__
    return text if len(text) <= 80 else text[:77] + "..."


def _why(func: ast.expr, scope: _Scope) -> str:
    root = func
    while isinstance(root, (ast.Attribute, ast.Call, ast.Subscript)):
        root = root.func if isinstance(root, ast.Call) else root.value
    if not isinstance(root, ast.Name):
        return f"callee is a {type(func).__name__} expression"
    s: _Scope | None = scope
    while s is not None:
        typed = (s.self_ref is not None and s.self_ref[0] == root.id) or root.id in s.hints
        if typed:
            break
        if root.id in s.locals:
            return f"type of local {root.id!r} unknown"
        s = s.parent
    if isinstance(func, ast.Attribute):
        return f"attribute {func.attr!r} not found on the type of {_callee_text(func.value)!r}"
    return f"name {root.id!r} not found"
