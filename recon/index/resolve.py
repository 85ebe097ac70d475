"""Static name resolution over an index: what does ``x.y`` written in module M refer to?

The call graph, and later the slicer, need the answers to a few questions
that Python itself answers at import time: which object a dotted name
written in a module denotes (through imports, aliases, re-exports in
``__init__`` files and ``from x import *``), a class's bases and method
resolution order inside the package, the subclasses that override a
method, and the class an annotation or a ``f()`` result stands for. Each
answer is a :class:`Ref`; names that leave the package resolve to
``external`` refs (``torch.cat``, ``builtins.len``), and names that cannot
be decided resolve to None, never to a guess.
"""

from __future__ import annotations

import ast
import builtins
from functools import lru_cache
from typing import NamedTuple

from .models import FunctionInfo, split_qualname
from .snapshot_index import SnapshotIndex

_BUILTINS = frozenset(dir(builtins))
#: Wrappers whose first argument is the type that matters.
_UNWRAP = frozenset({"Optional", "ClassVar", "Final", "Annotated", "Required", "NotRequired",
                     "ReadOnly", "InitVar"})
MAX_DEPTH = 16


class Ref(NamedTuple):
    """What a name denotes.

    ``kind`` is ``module`` (``name``: dotted module), ``class`` (the class
    object, ``name``: qualname), ``instance`` (an instance of that class),
    ``function`` (qualname) or ``external`` (dotted name outside the snapshot).
    """

    kind: str
    name: str


@lru_cache(maxsize=4096)
def parse_annotation(text: str) -> ast.expr | None:
    """Parse annotation source text (quotes and all) into an expression, or None."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError):
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return parse_annotation(node.value)
    return node


def dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for Name/Attribute chains, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


class Resolver:
    """Answers resolution questions over one :class:`SnapshotIndex`, memoizing them."""

    def __init__(self, index: SnapshotIndex) -> None:
        self.index = index
        self._names: dict[tuple[str, str], Ref | None] = {}
        self._bases: dict[str, tuple[Ref, ...]] = {}
        self._mro: dict[str, tuple[str, ...]] = {}
        self._subclasses: dict[str, list[str]] | None = None

    # -- names ---------------------------------------------------------------------
    def resolve_dotted(self, name: str, depth: int = 0) -> Ref | None:
        """An absolute dotted name (``vllm.config.VllmConfig``) -> Ref."""
        parts = name.split(".")
        modules = self.index.modules
        for cut in range(len(parts), 0, -1):
            mod = ".".join(parts[:cut])
            if mod in modules:
                ref: Ref | None = Ref("module", mod)
                for attr in parts[cut:]:
                    ref = self.member(ref, attr, depth + 1) if ref else None
                return ref
        return Ref("external", name)

    def resolve_name(self, module: str, name: str, depth: int = 0) -> Ref | None:
        """A dotted name as written at module level of ``module`` -> Ref."""
        head, _, rest = name.partition(".")
        ref = self.lookup(module, head, depth)
        if rest:
            for attr in rest.split("."):
                if ref is None:
                    return None
                ref = self.member(ref, attr, depth + 1)
        return ref

    def lookup(self, module: str, name: str, depth: int = 0, *, builtin: bool = True) -> Ref | None:
        """One identifier in ``module``'s global scope (definitions, imports, variables, builtins)."""
        key = (module, name if builtin else name + "\x00")
        if key in self._names:
            return self._names[key]
        self._names[key] = None  # cycle guard (a re-export loop resolves to None)
        ref = self._lookup(module, name, depth, builtin)
        self._names[key] = ref
        return ref

    def _lookup(self, module: str, name: str, depth: int, builtin: bool) -> Ref | None:
        if depth > MAX_DEPTH:
            return None
        idx = self.index
        q = f"{module}:{name}"
        if q in idx.classes:
            return Ref("class", q)
        if q in idx.functions:
            return Ref("function", q)
        info = idx.modules.get(module)
        if info is not None:
            target = info.bindings.get(name)
            if target is not None:
                return self.resolve_dotted(target, depth + 1)
            if name in info.variables:
                hint = info.variables[name]
                return self.hint(module, hint, depth + 1) if hint else None
            sub = f"{module}.{name}"
            if info.is_package and sub in idx.modules:
                return Ref("module", sub)
            for star in info.star_imports:
                if star in idx.modules:
                    ref = self.lookup(star, name, depth + 1, builtin=False)
                    if ref is not None:
                        return ref
                else:
                    return None  # could come from the external star import: undecidable
        if builtin and name in _BUILTINS:
            return Ref("external", f"builtins.{name}")
        return None

    def member(self, ref: Ref, attr: str, depth: int = 0) -> Ref | None:
        """``ref.attr``: a module member, a class attribute or method, or an external name."""
        if depth > MAX_DEPTH:
            return None
        if ref.kind == "module":
            got = self.lookup(ref.name, attr, depth + 1, builtin=False)
            if got is None and f"{ref.name}.{attr}" in self.index.modules:
                got = Ref("module", f"{ref.name}.{attr}")
            return got
        if ref.kind in ("class", "instance"):
            return self.class_member(ref.name, attr, instance=ref.kind == "instance", depth=depth)
        if ref.kind == "external":
            return Ref("external", f"{ref.name}.{attr}")
        return None

    def class_member(self, cls: str, attr: str, *, instance: bool, depth: int = 0) -> Ref | None:
        """An attribute looked up along the class's MRO inside the package."""
        idx = self.index
        for klass in self.mro(cls):
            module, local = split_qualname(klass)
            q = f"{module}:{local}.{attr}"
            fn = idx.functions.get(q)
            if fn is not None:
                if instance and fn.kind == "property":
                    return self.hint(module, fn.returns, depth + 1) if fn.returns else None
                return Ref("function", q)
            if q in idx.classes:
                return Ref("class", q)
            hint = idx.classes[klass].attributes.get(attr)
            if hint is not None:
                return self.hint(module, hint, depth + 1)
        for base in self.external_bases(cls):
            return Ref("external", f"{base}.{attr}")
        return None

    # -- type hints ----------------------------------------------------------------
    def hint(self, module: str, hint: str | None, depth: int = 0) -> Ref | None:
        """A recorded type hint (``"T"``, ``"f()"``, ``"=x.y"``) -> what it denotes."""
        if not hint or depth > MAX_DEPTH:
            return None
        if hint.startswith("="):
            return self.resolve_name(module, hint[1:], depth + 1)
        if hint.endswith("()"):
            return self.call_result(self.resolve_name(module, hint[:-2], depth + 1), depth + 1)
        return self.annotation(module, hint, depth + 1)

    def annotation(self, module: str, text: str, depth: int = 0) -> Ref | None:
        """An annotation -> the instance it describes (``Optional[X]``, ``"X"``, ``X | None`` -> X)."""
        node = parse_annotation(text)
        return self._annotation_node(module, node, depth) if node is not None else None

    def _annotation_node(self, module: str, node: ast.expr, depth: int) -> Ref | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            inner = parse_annotation(node.value)
            return self._annotation_node(module, inner, depth + 1) if inner is not None else None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            for side in (node.left, node.right):
                if not (isinstance(side, ast.Constant) and side.value is None):
                    got = self._annotation_node(module, side, depth + 1)
                    if got is not None:
                        return got
            return None
        if isinstance(node, ast.Subscript):
            head = dotted(node.value) or ""
            last = head.rsplit(".", 1)[-1]
            args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if last in _UNWRAP or last == "Union":
                for arg in args:
                    if not (isinstance(arg, ast.Constant) and arg.value is None):
                        return self._annotation_node(module, arg, depth + 1)
                return None
            if last in ("type", "Type") and args:
                ref = self._annotation_node(module, args[0], depth + 1)
                return Ref("class", ref.name) if ref and ref.kind == "instance" else ref
            node = node.value  # Generic[T] and friends: the origin class
        name = dotted(node)
        if name is None:
            return None
        ref = self.resolve_name(module, name, depth + 1)
        if ref is None:
            return None
        if ref.kind == "class":
            return Ref("instance", ref.name)
        if ref.kind == "external":
            return ref
        return None

    def call_result(self, ref: Ref | None, depth: int = 0) -> Ref | None:
        """What calling ``ref`` returns: an instance for a class, the return annotation for a function."""
        if ref is None:
            return None
        if ref.kind == "class":
            return Ref("instance", ref.name)
        if ref.kind == "function":
            fn = self.index.functions[ref.name]
            return self.annotation(fn.module, fn.returns, depth + 1) if fn.returns else None
        if ref.kind == "external":
            return Ref("external", f"{ref.name}()")
        return None

    # -- classes ---------------------------------------------------------------------
    def bases(self, cls: str) -> tuple[Ref, ...]:
        """The class's bases, resolved in its module (subscripts dropped: ``Generic[T]`` -> Generic)."""
        got = self._bases.get(cls)
        if got is None:
            info = self.index.classes[cls]
            refs = []
            for text in info.bases:
                node = parse_annotation(text)
                if isinstance(node, ast.Subscript):
                    node = node.value
                name = dotted(node) if node is not None else None
                ref = self.resolve_name(info.module, name) if name else None
                if ref is not None and ref.kind in ("class", "external"):
                    refs.append(ref)
            got = self._bases[cls] = tuple(refs)
        return got

    def external_bases(self, cls: str) -> list[str]:
        """Bases outside the package anywhere along the MRO (``torch.nn.Module``...)."""
        out: list[str] = []
        for klass in self.mro(cls):
            out.extend(r.name for r in self.bases(klass) if r.kind == "external"
                       and r.name not in ("builtins.object", "typing.Generic", "abc.ABC"))
        return out

    def mro(self, cls: str) -> tuple[str, ...]:
        """C3 linearization over the bases inside the package (depth-first order if C3 fails)."""
        got = self._mro.get(cls)
        if got is not None:
            return got
        self._mro[cls] = (cls,)  # cycle guard for broken hierarchies
        parents = [r.name for r in self.bases(cls) if r.kind == "class" and r.name != cls]
        seqs = [list(self.mro(p)) for p in parents] + [parents]
        merged: list[str] = [cls]
        while True:
            seqs = [s for s in seqs if s]
            if not seqs:
                break
            for seq in seqs:
                head = seq[0]
                if not any(head in s[1:] for s in seqs):
                    break
            else:  # inconsistent hierarchy: fall back to depth-first, first occurrence wins
                seen = dict.fromkeys(merged)
                for p in parents:
                    for k in self.mro(p):
                        seen.setdefault(k)
                merged = list(seen)
                break
            merged.append(head)
            for s in seqs:
                if s and s[0] == head:
                    del s[0]
        got = self._mro[cls] = tuple(merged)
        return got

    def find_method(self, cls: str, name: str, *, after: str | None = None) -> FunctionInfo | None:
        """The method ``name`` as ``cls`` inherits it; ``after``: start past that class (``super()``)."""
        chain = self.mro(cls)
        if after is not None and after in chain:
            chain = chain[chain.index(after) + 1:]
        for klass in chain:
            module, local = split_qualname(klass)
            fn = self.index.functions.get(f"{module}:{local}.{name}")
            if fn is not None:
                return fn
        return None

    def subclasses(self, cls: str) -> list[str]:
        """Every class of the package that has ``cls`` in its MRO (itself excluded)."""
        if self._subclasses is None:
            direct: dict[str, list[str]] = {}
            for q in self.index.classes:
                for ref in self.bases(q):
                    if ref.kind == "class":
                        direct.setdefault(ref.name, []).append(q)
            self._subclasses = direct
        out: list[str] = []
        seen = {cls}
        stack = [cls]
        while stack:
            for sub in self._subclasses.get(stack.pop(), ()):
                if sub not in seen:
                    seen.add(sub)
                    out.append(sub)
                    stack.append(sub)
        return out

    def overrides(self, method: FunctionInfo) -> list[FunctionInfo]:
        """Methods of subclasses that override ``method`` (same short name)."""
        if method.class_name is None:
            return []
        cls = f"{method.module}:{method.class_name}"
        out = []
        for sub in self.subclasses(cls):
            module, local = split_qualname(sub)
            fn = self.index.functions.get(f"{module}:{local}.{method.short}")
            if fn is not None:
                out.append(fn)
        return out

    def overridden(self, method: FunctionInfo) -> list[FunctionInfo]:
        """Methods of ancestor classes that ``method`` overrides (nearest first)."""
        if method.class_name is None:
            return []
        cls = f"{method.module}:{method.class_name}"
        out = []
        for klass in self.mro(cls)[1:]:
            module, local = split_qualname(klass)
            fn = self.index.functions.get(f"{module}:{local}.{method.short}")
            if fn is not None:
                out.append(fn)
        return out

