"""The names the new code reads, resolved in the patched image and in the release with the fix.

For every replaced piece this is one level of its closure, resolved by the index
(:class:`~recon.index.resolve.Resolver`): each module-level name, each attribute
chain on ``self``/``super()``/an annotated parameter, each import inside the body.
A name gets one of the statuses of :mod:`recon.hotfix.model`:

* ``same`` / ``changed``: both sides have it; ``changed`` when its code or
  definition differs (the patched code will call the image's version: a warning);
* ``in-file``: defined in the patched file itself (compared the same way);
* ``missing``: the fix's release has it, the patched image does not (refuses);
* ``new-import``: the image's release has it, but the image's file does not bind
  it: the fix also needs a new import line, more than the named pieces (refuses);
* ``compiled``: the new code reaches into a compiled module the image's version
  of the piece did not use (refuses: its contents cannot be checked);
* ``unknown``: the patched image cannot decide (a base class outside the snapshot).

"The patched image" is the image's index with the patched file re-indexed, so a
name the replaced pieces bring with them (a whole class) counts as present.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field

from ..index.models import (
    KEYWORD_ONLY,
    POSITIONAL_ONLY,
    POSITIONAL_OR_KEYWORD,
    VAR_KEYWORD,
    VAR_POSITIONAL,
    ClassInfo,
    FunctionInfo,
    absolute_module,
    split_qualname,
)
from ..index.resolve import Ref
from ..slicing.names import scope_bindings
from .model import CHANGED, COMPILED, LOCAL, MISSING, NEW_IMPORT, SAME, UNKNOWN, NeedRow
from .reads import CallSite, Reads, future_annotations, reads_of
from .sides import Side

_BUILTINS = frozenset(dir(builtins))
_DUNDERS = frozenset({"__name__", "__file__", "__doc__", "__spec__", "__package__", "__loader__",
                      "__path__", "__builtins__", "__dict__", "__annotations__", "__cached__",
                      "__class__"})


@dataclass
class Context:
    """The three sides and the file the pieces live in."""

    patched: Side
    fixed: Side
    image: Side
    module: str
    path: str
    rows: dict[str, NeedRow] = field(default_factory=dict)
    #: compiled modules the image's own versions of the pieces already reach
    image_compiled: set[str] = field(default_factory=set)
    _bound: dict[int, set[str]] = field(default_factory=dict)

    def add(self, row: NeedRow) -> None:
        self.rows.setdefault(row.name, row)

    def where(self, line: int) -> str:
        return f"{self.path}:{line}"

    def bound(self, side: Side) -> set[str]:
        """Module-level names the file binds on ``side`` (imports, defs, assignments, if/try too)."""
        key = id(side)
        if key not in self._bound:
            self._bound[key] = scope_bindings(module_tree(side, self.path).body)[0]
        return self._bound[key]


def module_tree(side: Side, path: str) -> ast.Module:
    """The whole file as ``side`` has it (the patched side: the patched bytes)."""
    return ast.parse("\n".join(side.index.lines(path)) + "\n")


def definition_ast(side: Side, qualname: str) -> ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef:
    """The AST of a function or class of ``side`` (file line numbers), parsed from its segment."""
    info = side.definition(qualname)
    assert info is not None
    if isinstance(info, FunctionInfo):
        tree = side.index.function_ast(qualname)
        assert tree is not None
        return tree
    lines = side.index.lines(info.path)[info.lineno - 1: info.end_lineno]
    text = ("if 1:\n" if info.col else "") + "\n".join(lines) + "\n"
    body = ast.parse(text).body
    node = body[0].body[0] if info.col else body[0]  # type: ignore[attr-defined]
    ast.increment_lineno(node, info.lineno - 1 - (1 if info.col else 0))
    assert isinstance(node, ast.ClassDef)
    return node


def closure(ctx: Context, qualnames: list[str]) -> list[NeedRow]:
    """The rows for every name the patched pieces read (deduplicated by what the code writes)."""
    lazy = future_annotations(module_tree(ctx.patched, ctx.path))
    for q in qualnames:
        if ctx.image.definition(q) is not None:
            reads = reads_of(definition_ast(ctx.image, q), method=True, lazy_annotations=lazy)
            ctx.image_compiled |= compiled_uses(ctx.image, ctx.module, reads)
    for q in qualnames:
        info = ctx.patched.definition(q)
        assert info is not None
        method = isinstance(info, FunctionInfo) and info.class_name is not None
        reads = reads_of(definition_ast(ctx.patched, q), method=method, lazy_annotations=lazy)
        owner = f"{info.module}:{info.class_name}" if method else (  # type: ignore[union-attr]
            q if isinstance(info, ClassInfo) else None)
        _free_names(ctx, q, reads)
        _chains(ctx, q, owner, reads)
        _local_imports(ctx, reads)
        _calls(ctx, owner, reads)
    return list(ctx.rows.values())


# -- module-level names ----------------------------------------------------------------
def _free_names(ctx: Context, piece: str, reads: Reads) -> None:
    own = {piece.partition(":")[2].split(".")[0]}
    for name, uses in sorted(reads.free.items()):
        if name in _DUNDERS or (name in _BUILTINS and name not in ctx.bound(ctx.patched)):
            continue
        line = uses[0][1]
        if name not in ctx.bound(ctx.patched):
            _unbound(ctx, name, line)
            continue
        target = compiled_target(ctx.fixed, ctx.module, name) or \
            compiled_target(ctx.patched, ctx.module, name)
        if target is not None:
            _compiled_row(ctx, name, target, line)
            continue
        ref_p = ctx.patched.resolver.lookup(ctx.module, name)
        ref_f = ctx.fixed.resolver.lookup(ctx.module, name)
        status = LOCAL if ref_p is not None and ref_p.kind in ("class", "function") \
            and split_qualname(ref_p.name)[0] == ctx.module and name not in own else None
        note = ""
        if name in reads.annotation_only and ref_p is not None and ref_f is not None:
            status, note = status or SAME, "read only in annotations (evaluated at import, not run)"
        _compare_refs(ctx, name, ref_p, ref_f, line, status, note)
        for chain in sorted({c[:1] for c, _ in uses if c}):
            _member(ctx, f"{name}.{chain[0]}", ref_p, ref_f, chain[0], line)


def _unbound(ctx: Context, name: str, line: int) -> None:
    if name in ctx.bound(ctx.fixed):
        ref = ctx.fixed.resolver.lookup(ctx.module, name)
        info = ctx.fixed.index.modules.get(ctx.module)
        how = next((f"line {i.lineno}: from {i.module} import {i.name}" if i.name else
                    f"line {i.lineno}: import {i.module}" for i in (info.imports if info else ())
                    if not i.scope and i.bound_name == name), "a module-level name")
        ctx.add(NeedRow(name, ref.name if ref else name, NEW_IMPORT, ctx.where(line),
                        fixed=_location(ctx.fixed, ref),
                        detail=f"the fix's file binds it ({how}); the image's "
                               f"{ctx.path.rsplit('/', 1)[-1]} does not"))
    else:
        ctx.add(NeedRow(name, name, MISSING, ctx.where(line),
                        detail="not defined in the file, not imported, not a builtin"))


def _compare_refs(ctx: Context, name: str, ref_p: Ref | None, ref_f: Ref | None, line: int,
                  status: str | None = None, note: str = "") -> None:
    """One row for a name both files bind: what it denotes on each side."""
    if ref_p is None or ref_f is None:
        known = ref_f if ref_f is not None else ref_p
        ctx.add(NeedRow(name, known.name if known is not None else name, UNKNOWN,
                        ctx.where(line), _location(ctx.patched, ref_p), _location(ctx.fixed, ref_f),
                        "not resolved on both sides (outside the snapshot?)"))
        return
    if ref_p.name != ref_f.name:
        ctx.add(NeedRow(name, ref_f.name, CHANGED, ctx.where(line), _location(ctx.patched, ref_p),
                        _location(ctx.fixed, ref_f),
                        f"the patched file's {name} is {ref_p.name}, the fix's is {ref_f.name}"))
        return
    same = fingerprint(ctx.patched, ref_p.name) == fingerprint(ctx.fixed, ref_f.name)
    if status == LOCAL and not same:
        status = None  # a helper of the same file that the fix's release changed: a warning
    ctx.add(NeedRow(name, ref_p.name, status or (SAME if same else CHANGED), ctx.where(line),
                    _location(ctx.patched, ref_p), _location(ctx.fixed, ref_f),
                    note or ("" if same else "its code differs between the two releases: the "
                                             "patched code uses the image's version")))


def _member(ctx: Context, name: str, ref_p: Ref | None, ref_f: Ref | None, attr: str,
            line: int) -> None:
    """``module.attr`` read on an imported module: present in the image's module?"""
    if ref_p is None or ref_f is None or ref_p.kind != "module" or ref_f.kind != "module":
        return
    got_p = ctx.patched.resolver.member(ref_p, attr)
    got_f = ctx.fixed.resolver.member(ref_f, attr)
    if got_f is not None and got_f.kind != "external" and got_p is None:
        has_getattr = f"{ref_p.name}:__getattr__" in ctx.patched.index.functions
        ctx.add(NeedRow(name, f"{ref_f.name}.{attr}", UNKNOWN if has_getattr else MISSING,
                        ctx.where(line), fixed=_location(ctx.fixed, got_f),
                        detail=f"{ctx.patched.label}'s {ref_p.name} does not define {attr}"
                               + (" (it answers through __getattr__)" if has_getattr else "")))
        return
    if got_p is not None or got_f is not None:
        _compare_refs(ctx, name, got_p, got_f, line)


def _local_imports(ctx: Context, reads: Reads) -> None:
    info = ctx.patched.index.modules[ctx.module]
    package = ctx.patched.snapshot.package
    for imp in reads.imports:
        base = absolute_module(ctx.module, info.is_package, imp.module or "", imp.level)
        for name, _as in imp.names:
            dotted = f"{base}.{name}" if imp.is_from else name
            if dotted.split(".")[0] != package:
                continue
            target = ctx.fixed.compiled_prefix(dotted) or ctx.patched.compiled_prefix(dotted)
            if target is not None:
                _compiled_row(ctx, dotted, dotted, imp.line)
                continue
            ref_p = ctx.patched.resolver.resolve_dotted(dotted)
            ref_f = ctx.fixed.resolver.resolve_dotted(dotted)
            if ref_f is not None and ref_p is None:
                ctx.add(NeedRow(dotted, dotted, MISSING, ctx.where(imp.line),
                                fixed=_location(ctx.fixed, ref_f),
                                detail=f"imported inside the function; {ctx.patched.label} has no "
                                       "such name"))
            else:
                _compare_refs(ctx, dotted, ref_p, ref_f, imp.line)


# -- attribute chains on self, super() and annotated parameters -------------------------------
def _chains(ctx: Context, piece: str, owner: str | None, reads: Reads) -> None:
    for root, chain, line in reads.chains:
        if root in ("self", "super"):
            if owner is None:
                continue
            start_p: Ref | None = Ref("instance", owner)
            start_f: Ref | None = Ref("instance", owner) if owner in ctx.fixed.index.classes else None
            label = "self" if root == "self" else "super()"
            skip = 1 if root == "super" else 0
        else:
            _, pname, annotation = root.split(":", 2)
            start_p = _instance(ctx.patched.resolver.annotation(ctx.module, annotation))
            start_f = _instance(ctx.fixed.resolver.annotation(ctx.module, annotation))
            label, skip = pname, 0
        _walk_chain(ctx, label, start_p, start_f, chain, line, skip, writers_too=root == "self")


def _instance(ref: Ref | None) -> Ref | None:
    return ref if ref is not None and ref.kind == "instance" else None


def _walk_chain(ctx: Context, label: str, cur_p: Ref | None, cur_f: Ref | None,
                chain: tuple[str, ...], line: int, skip: int, *, writers_too: bool = False) -> None:
    """Follow ``label.a.b.c`` one attribute at a time while both sides know the class.

    ``writers_too``: the chain starts at ``self``, whose first attribute is state of the
    piece's own class, so which methods set it is compared too (:func:`attribute_row`).
    """
    name = label
    for i, attr in enumerate(chain):
        name = f"{name}.{attr}"
        if cur_p is None or cur_f is None or cur_p.kind != "instance" or cur_f.kind != "instance":
            return
        row = attribute_row(ctx, name, cur_p.name, cur_f.name, attr, line, skip if i == 0 else 0,
                            writers_too=writers_too and i == 0)
        if row is None:
            return
        ctx.add(row)
        if row.status in (MISSING, UNKNOWN):
            return
        cur_p = attr_type(ctx.patched, cur_p.name, attr)
        cur_f = attr_type(ctx.fixed, cur_f.name, attr)


def attribute_row(ctx: Context, name: str, cls_p: str, cls_f: str, attr: str, line: int,
                  skip: int, *, writers_too: bool = False) -> NeedRow | None:
    """The row for ``instance.attr``: who defines it on each side, and whether it changed.

    With ``writers_too`` (state of the piece's own class, read on self) an attribute
    that the fix's release sets in a method the patched image does not have is
    ``missing``: the new code was written for state that method keeps, and the image
    never runs it (vLLM 0.32.0's ``preprocess_state`` reads ``self._mamba_ctx``, which
    0.32.0 sets in ``initialize_kv_cache``, a method 0.29.0 does not have).
    """
    own_f = owner_of(ctx.fixed, cls_f, attr, skip)
    if own_f is None:
        return None  # the fix's release cannot say where it comes from: nothing to compare
    own_p = owner_of(ctx.patched, cls_p, attr, skip)
    if own_p is None:
        complete = mro_complete(ctx.patched, cls_p)
        return NeedRow(name, own_f[0], MISSING if complete else UNKNOWN, ctx.where(line),
                       fixed=own_f[1], detail=(f"{cls_p.partition(':')[2]} in "
                                               f"{ctx.patched.label} has no {attr}") if complete
                       else "a base class of the image's class is outside the snapshot")
    lost = sorted(m for m in writers(ctx.fixed, cls_f, attr)
                  if not has_method(ctx.patched, cls_p, m)) if writers_too else []
    if lost:
        return NeedRow(name, own_f[0], MISSING, ctx.where(line), own_p[1], own_f[1],
                       f"the fix's release sets it in {', '.join(lost)}, which "
                       f"{cls_p.partition(':')[2]} in {ctx.patched.label} does not have: the new "
                       "code would read it as the image's code leaves it")
    same = fingerprint(ctx.patched, own_p[0]) == fingerprint(ctx.fixed, own_f[0])
    return NeedRow(name, own_p[0], SAME if same else CHANGED, ctx.where(line), own_p[1], own_f[1],
                   "" if same else "its definition differs between the two releases: the patched "
                                   "code uses the image's version")


def owner_of(side: Side, cls: str, attr: str, skip: int = 0) -> tuple[str, str] | None:
    """``(Class.attr qualname, path:line)`` of the class along the MRO that defines ``attr``."""
    index = side.index
    for klass in side.resolver.mro(cls)[skip:]:
        info = index.classes.get(klass)
        if info is None:
            continue
        member = f"{klass}.{attr}"
        found = index.functions.get(member) or index.classes.get(member)
        if found is not None:
            return member, f"{found.path}:{found.def_lineno}"
        field_info = info.fields.get(attr)
        if field_info is not None:
            return member, f"{info.path}:{field_info.lineno}"
        if attr in info.attributes or attr in assigned_attributes(side, klass):
            return member, f"{info.path}:{info.def_lineno}"
    return None


def assigned_attributes(side: Side, klass: str) -> dict[str, set[str]]:
    """Attribute -> the class's own methods that bind it on self (``self.x = ...``, ``self.x: T``)."""
    out: dict[str, set[str]] = {}
    for name, fn in side.index.methods_of(klass).items():
        tree = side.index.function_ast(fn.qualname)
        args = tree.args.args if tree is not None else []
        if not args:
            continue
        me = args[0].arg
        for sub in ast.walk(tree):  # type: ignore[arg-type]
            targets: list[ast.expr] = list(sub.targets) if isinstance(sub, ast.Assign) else \
                [sub.target] if isinstance(sub, (ast.AnnAssign, ast.AugAssign)) else []
            for target in _bound_targets(targets):
                if isinstance(target.value, ast.Name) and target.value.id == me:
                    out.setdefault(target.attr, set()).add(name)
    return out


def _bound_targets(targets: list[ast.expr]) -> list[ast.Attribute]:
    """Attribute targets that are bound (``a.x =``, ``a.x, b = ``), not subscripted ones."""
    out: list[ast.Attribute] = []
    stack = list(targets)
    while stack:
        t = stack.pop()
        if isinstance(t, ast.Attribute):
            out.append(t)
        elif isinstance(t, (ast.Tuple, ast.List)):
            stack.extend(t.elts)
        elif isinstance(t, ast.Starred):
            stack.append(t.value)
    return out


def writers(side: Side, cls: str, attr: str) -> set[str]:
    """Names of the methods along the MRO that bind ``self.attr``."""
    out: set[str] = set()
    for klass in side.resolver.mro(cls):
        if klass in side.index.classes:
            out |= assigned_attributes(side, klass).get(attr, set())
    return out


def has_method(side: Side, cls: str, name: str) -> bool:
    """Whether the class or a base inside the package defines a method ``name``."""
    return any(f"{k}.{name}" in side.index.functions for k in side.resolver.mro(cls))


def mro_complete(side: Side, cls: str) -> bool:
    """Whether every base along the MRO resolved (a base outside the snapshot leaves it open)."""
    for klass in side.resolver.mro(cls):
        info = side.index.classes.get(klass)
        if info is None or len(side.resolver.bases(klass)) < len(info.bases):
            return False
    return True


def attr_type(side: Side, cls: str, attr: str) -> Ref | None:
    """The class of ``instance.attr``: its hint, or ``self.x = param.y`` through the parameter's
    annotation (``self.cache_config = vllm_config.cache_config`` -> CacheConfig)."""
    ref = side.resolver.class_member(cls, attr, instance=True)
    if ref is not None:
        return ref if ref.kind == "instance" else None
    for klass in side.resolver.mro(cls):
        info = side.index.classes.get(klass)
        hint = info.attributes.get(attr) if info is not None else None
        if not hint or not hint.startswith("="):
            continue
        head, _, rest = hint[1:].partition(".")
        for fn in side.index.methods_of(klass).values():
            ann = next((p.annotation for p in fn.params if p.name == head and p.annotation), None)
            if ann is None:
                continue
            cur = side.resolver.annotation(fn.module, ann)
            for part in filter(None, rest.split(".")):
                cur = side.resolver.member(cur, part) if cur is not None else None
            return cur if cur is not None and cur.kind == "instance" else None
    return None


# -- calls: does the callee in the patched image take what the new code passes? ---------------
#: decorators that keep a function's signature as written
_PLAIN = frozenset({"staticmethod", "classmethod", "property", "cache", "lru_cache",
                    "functools.cache", "functools.lru_cache", "override", "abstractmethod",
                    "abc.abstractmethod", "typing.override"})


def _calls(ctx: Context, owner: str | None, reads: Reads) -> None:
    """A call the image's callee cannot take (a new keyword, more arguments, a required one
    left out) while the fix's own callee can is ``missing``: the fix changed both sides of
    the call, and the hotfix brings only one."""
    for site in reads.calls:
        found = _callee(ctx.patched, ctx.module, site, owner)
        if found is None:
            continue
        fn, bound = found
        problem = call_mismatch(fn, site, bound)
        reference = _callee(ctx.fixed, ctx.module, site, owner)
        if reference is None or call_mismatch(reference[0], site, reference[1]) is not None:
            continue  # the fix's own callee cannot be matched either: no evidence either way
        if problem:
            ctx.add(NeedRow(f"call {site.label} at line {site.line}", fn.qualname, MISSING,
                            ctx.where(site.line), f"{fn.path}:{fn.def_lineno}",
                            detail=f"{problem}; in {ctx.patched.label} it is "
                                   f"{fn.name}{fn.signature}"))


def _callee(side: Side, module: str, site: CallSite,
            owner: str | None) -> tuple[FunctionInfo, bool] | None:
    """The function a call reaches in ``side``, and whether its first parameter is bound."""
    fn: FunctionInfo | None = None
    if site.root.startswith("name:"):
        ref = side.resolver.lookup(module, site.root[5:])
        if ref is not None and ref.kind == "function":
            fn = side.index.functions.get(ref.name)
        elif ref is not None and ref.kind == "class":
            fn = _method(side, ref.name, "__init__", 0)
    elif owner is not None and site.method is not None:
        fn = _method(side, owner, site.method, 1 if site.root == "super" else 0)
    if fn is None or any(d.split("(")[0] not in _PLAIN for d in fn.decorators):
        return None  # unknown, or a decorator that may change what it takes
    bound = (fn.class_name is not None and fn.kind != "staticmethod") or fn.short == "__init__"
    return fn, bound


def _method(side: Side, cls: str, name: str, skip: int) -> FunctionInfo | None:
    """The method ``name`` along the MRO (``skip=1``: as ``super()`` finds it)."""
    for klass in side.resolver.mro(cls)[skip:]:
        fn = side.index.functions.get(f"{klass}.{name}")
        if fn is not None:
            return fn
    return None


def call_mismatch(fn: FunctionInfo, site: CallSite, bound: bool) -> str | None:
    """Why ``fn`` cannot take the call's arguments, or None when it can."""
    params = list(fn.params[1:] if bound and fn.params else fn.params)
    kinds = {p.kind for p in params}
    named = {p.name for p in params if p.kind in (POSITIONAL_OR_KEYWORD, KEYWORD_ONLY)}
    unknown = [k for k in site.keywords if k not in named]
    if unknown and VAR_KEYWORD not in kinds:
        return f"called with keyword {', '.join(unknown)}"
    positional = [p for p in params if p.kind in (POSITIONAL_ONLY, POSITIONAL_OR_KEYWORD)]
    if not site.star and site.positional > len(positional) and VAR_POSITIONAL not in kinds:
        return f"called with {site.positional} positional arguments (it takes {len(positional)})"
    if site.star:
        return None
    given = {p.name for p in positional[:site.positional]} | set(site.keywords)
    required = [p.name for p in params if p.default is None and p.name not in given
                and p.kind in (POSITIONAL_ONLY, POSITIONAL_OR_KEYWORD, KEYWORD_ONLY)]
    return f"called without {', '.join(required)}" if required else None


# -- comparison helpers ---------------------------------------------------------------------
def fingerprint(side: Side, qualname: str) -> object:
    """What must be equal for two definitions to count as the same code (positions aside)."""
    index = side.index
    fn = index.functions.get(qualname)
    if fn is not None:
        return ("function", fn.ast_hash)
    cls = index.classes.get(qualname)
    if cls is not None:
        methods = sorted((n, getattr(index.functions.get(f"{qualname}.{n}"), "ast_hash", None))
                         for n in cls.methods)
        fields = sorted((k, v.annotation, v.value) for k, v in cls.fields.items())
        return ("class", cls.bases, cls.decorators, tuple(methods), tuple(fields))
    owner, _, attr = qualname.rpartition(".")
    info = index.classes.get(owner)
    if info is not None:
        f = info.fields.get(attr)
        return ("field", f.annotation if f else None, f.value if f else None,
                info.attributes.get(attr))
    return ("name", qualname)


def _location(side: Side, ref: Ref | None) -> str | None:
    if ref is None:
        return None
    info = side.definition(ref.name)
    if info is not None:
        return f"{info.path}:{info.def_lineno}"
    module = side.index.modules.get(ref.name)
    return module.path if module is not None else None


def compiled_target(side: Side, module: str, name: str) -> str | None:
    """The dotted name ``name`` is bound to in ``module``, when that is compiled code."""
    info = side.index.modules.get(module)
    target = info.bindings.get(name) if info is not None else None
    return target if target is not None and side.compiled_prefix(target) else None


def compiled_uses(side: Side, module: str, reads: Reads) -> set[str]:
    """Compiled modules a definition reaches through its module's names or its own imports."""
    out = set()
    for name in reads.free:
        target = compiled_target(side, module, name)
        if target is not None:
            out.add(side.compiled_prefix(target) or target)
    info = side.index.modules[module]
    for imp in reads.imports:
        base = absolute_module(module, info.is_package, imp.module or "", imp.level)
        for name, _as in imp.names:
            hit = side.compiled_prefix(f"{base}.{name}" if imp.is_from else name)
            if hit is not None:
                out.add(hit)
    return out


def _compiled_row(ctx: Context, name: str, target: str, line: int) -> None:
    """A name reaching compiled code: fine when the image's own piece reached that module too."""
    hit = ctx.fixed.compiled_prefix(target) or ctx.patched.compiled_prefix(target) or target
    if hit in ctx.image_compiled:
        ctx.add(NeedRow(name, target, SAME, ctx.where(line),
                        detail=f"compiled ({hit}); the image's version of the piece uses it too"))
    else:
        ctx.add(NeedRow(name, target, COMPILED, ctx.where(line),
                        detail=f"compiled code ({hit}) the image's version of the piece does not "
                               "use: a Python-source hotfix cannot bring or check it"))
