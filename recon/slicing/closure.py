"""The dependency closure of target functions inside a snapshot's package.

Starting from the targets, the walker keeps every statement whose names the
kept code reads when it runs, across modules of the package, transitively:
module-level helpers and constants, imports (followed through re-exports to
the defining module), classes of other modules. Names from outside the
package are recorded (the stub layer handles them at run time), names that
cannot be found are recorded with their file:line.

Classes are kept in one of two modes:

* **shell**: the ``class`` line and bases (no decorators), plus the members the
  kept code reads by attribute name. Used for the class of a method target
  (``self`` is built from ``--self`` attributes, not by ``__init__``), for
  bases of shells, and for classes only used in ``isinstance``.
* **whole**: decorators, every data statement (fields, enum members, class
  constants), every dunder method, plus the members read by attribute name.
  Used for classes that are called, subclassed by whole classes, or read as
  values (``CUDAGraphMode.FULL``).

Members are selected by *attribute name*: a method is kept when its name
appears as ``.name`` anywhere in the kept code. That over-approximates (a
``.get`` anywhere keeps every kept class's ``get``) but never misses a
``self.helper()`` call, which matters more.
"""

from __future__ import annotations

import ast
import builtins
import sys
from collections import deque
from dataclasses import dataclass, field

from ..errors import ReconError
from ..index.models import split_dotted
from .modules import ModuleSet
from .names import (
    LocalImport,
    Needs,
    Ref,
    direct_imports,
    local_import_of,
    needs_of_exprs,
    needs_of_function,
    needs_of_statement,
)
from .units import ClassModel, ModuleModel, Unit, is_type_checking

_BUILTINS = frozenset(dir(builtins))
_STDLIB = frozenset(sys.stdlib_module_names) | {"__future__"}
_MODULE_DUNDERS = frozenset({"__name__", "__file__", "__doc__", "__spec__", "__package__",
                             "__loader__", "__path__", "__builtins__", "__dict__",
                             "__annotations__", "__cached__"})
_MODE_RANK = {"shell": 1, "whole": 2}
_USE_MODE = {"value": "whole", "isinstance": "shell", "shell": "shell", "whole": "whole"}
#: most pieces (top-level statements and class members) one slice keeps
DEFAULT_BUDGET = 4000


def suggest_budget(budget: int) -> int:
    """A budget worth trying after ``budget`` was reached.

    The walk stops expanding at the budget, so what the dropped pieces need
    is unknown; real closures that outgrow the default are several times it
    (``VllmConfig.__post_init__`` of vLLM 0.33.0: about 10,800 pieces), hence
    four times, and never less than the default.
    """
    return max(DEFAULT_BUDGET, 4 * budget)


def cut_hint(cut: int, budget: int) -> str:
    """The clause failure messages append when the slice was cut at its budget."""
    return (f"the slice was cut at the budget of {pieces(budget)} (at least {pieces(cut)} "
            f"dropped); try --budget {suggest_budget(budget)}")


def pieces(n: int) -> str:
    """``1 piece``, ``3 pieces``."""
    return f"{n} piece" + ("" if n == 1 else "s")


@dataclass(frozen=True)
class Res:
    """What a name resolves to."""

    kind: str  # module | class | value | outside | stub | builtin | missing | pending
    module: str = ""
    index: int = -1
    dotted: str = ""


@dataclass
class KeptClass:
    mode: str
    members: set[int] = field(default_factory=set)


@dataclass
class KeptModule:
    model: ModuleModel
    units: set[int] = field(default_factory=set)
    classes: dict[int, KeptClass] = field(default_factory=dict)
    #: compound units: nested def names whose bodies were walked
    walked_inner: dict[int, set[str]] = field(default_factory=dict)


@dataclass
class TargetInfo:
    """A resolved target: where it is defined and how to reach it at run time."""

    qualname: str  # as given, canonicalised "module:Attr.path"
    module: str  # module the attribute path starts from
    path: tuple[str, ...]
    kind: str  # function | method | class
    file: str
    line: int
    defined_in: str  # "module:Class" where a method was found (may be a base class)


@dataclass
class ClosureResult:
    """The plan the emitter turns into a slice module."""

    package: str
    targets: list[TargetInfo]
    modules: dict[str, KeptModule]
    outside: dict[str, dict[str, object]]
    unresolved: list[dict[str, object]]
    stub_points: list[tuple[str, str, str]]
    parse_errors: dict[str, str]
    #: pieces the walk reached but did not keep because the budget was spent
    #: ("file:line what", distinct, in the order reached); what they need in turn
    #: was never walked, so this is a lower bound of what the slice lacks
    cut: list[str]
    budget: int = DEFAULT_BUDGET


def parse_qualname(text: str, mods: ModuleSet) -> tuple[str, tuple[str, ...]]:
    """``pkg.mod:Class.method``, dotted ``pkg.mod.Class.method``, or a unique suffix
    (``CompilationConfig.adjust_cudagraph_sizes_for_spec_decode``) -> (module, attr path).

    The two full forms are split here without reading anything else; a suffix
    (no module prefix found) is resolved through the snapshot index
    (:func:`recon.index.load_index`), which also supplies suggestions.
    """
    text = text.strip()
    if ":" in text:
        module, _, rest = text.partition(":")
        path = tuple(p for p in rest.split(".") if p)
        if not path:
            raise ReconError(f"qualname {text!r} names no function after ':'")
        if mods.exists(module):
            return module, path
        return _index_lookup(text, mods)
    dotted = split_dotted(text, mods.exists)
    if dotted is not None:
        return dotted[0], tuple(dotted[1].split("."))
    return _index_lookup(text, mods)


def _index_lookup(text: str, mods: ModuleSet) -> tuple[str, tuple[str, ...]]:
    from ..index import load_index

    info = load_index(mods.snapshot).lookup_any(text)  # ReconError with suggestions
    module, _, local = info.qualname.partition(":")
    return module, tuple(local.split("."))


class Walker:
    """Computes the closure; one instance per slice."""

    def __init__(self, mods: ModuleSet, *, stubs: frozenset[str] = frozenset(),
                 budget: int = DEFAULT_BUDGET) -> None:
        self.mods = mods
        self.package = mods.package
        self.stub_exact = frozenset(s for s in stubs if "." in s)
        self.stub_bare = frozenset(s for s in stubs if "." not in s)
        self.budget = budget
        self.kept: dict[str, KeptModule] = {}
        self.outside: dict[str, dict[str, object]] = {}
        self.unresolved: list[dict[str, object]] = []
        self.stub_points: list[tuple[str, str, str]] = []
        self._cut: dict[str, None] = {}
        self.attrs: set[str] = set()
        self._parent: dict[tuple[str, int], tuple[str, int]] = {}
        self._fam_attrs: dict[tuple[str, int], set[str]] = {}
        self._fam_members: dict[tuple[str, int], set[tuple[str, int]]] = {}
        self._memo: dict[tuple[str, str], Res] = {}
        self._queue: deque[tuple[ModuleModel, Needs, ClassModel | None, tuple[str, int] | None]] = deque()
        self._members_by_name: dict[str, list[tuple[str, int]]] = {}
        self._count = 0
        self._exempt = False  # while keeping a target itself: asked for by name, never cut

    # -- targets ----------------------------------------------------------------
    def add_target(self, qualname: str) -> TargetInfo:
        """Keep the target (outside the budget: it was asked for by name) and walk its closure."""
        self._exempt = True
        try:
            return self._add_target(qualname)
        finally:
            self._exempt = False

    def _drain_charged(self) -> None:
        """Walk what is queued, every piece charged to the budget."""
        self._exempt = False
        self._drain()

    def _add_target(self, qualname: str) -> TargetInfo:
        module, path = parse_qualname(qualname, self.mods)
        model = self.mods.require(module)
        canonical = f"{module}:{'.'.join(path)}"
        res = self.resolve(module, path[0], (model.rel, 0))
        if res.kind not in ("class", "value") or res.index < 0:
            raise ReconError(self._not_found(model, path[0], canonical))
        tmod = self.mods.require(res.module)
        unit = tmod.units[res.index]
        if len(path) == 1:
            kind = "class" if res.kind == "class" else "function"
            if res.kind == "class":
                self.use_class(res.module, res.index, "whole")
            self._drain_charged()
            return TargetInfo(canonical, module, path, kind, tmod.rel, unit.start,
                              f"{res.module}:{path[0]}")
        if res.kind != "class":
            raise ReconError(f"{canonical}: {path[0]} is not a class in {tmod.rel}")
        self.use_class(res.module, res.index, "shell")
        cls_mod, cls_idx = res.module, res.index
        for depth, name in enumerate(path[1:-1], start=1):  # nested classes
            cm = self.mods.require(cls_mod).classes[cls_idx]
            idxs = cm.member_bindings.get(name)
            if not idxs:
                raise ReconError(f"{canonical}: no class {'.'.join(path[:depth + 1])}")
            for i in idxs:
                self.keep_member(cls_mod, cls_idx, i)
        found = self._find_method(cls_mod, cls_idx, path[-1], set()) if len(path) == 2 else None
        if len(path) > 2:
            self._drain_charged()
            return TargetInfo(canonical, module, path, "method", tmod.rel, unit.start,
                              f"{res.module}:{'.'.join(path[:-1])}")
        if found is None:
            cm = tmod.classes[res.index]
            raise ReconError(self._member_not_found(tmod, cm, path[-1], canonical))
        def_mod, def_cls, member_idx = found
        for i in self.mods.require(def_mod).classes[def_cls].member_bindings[path[-1]]:
            self.keep_member(def_mod, def_cls, i)
        dmodel = self.mods.require(def_mod)
        member = dmodel.classes[def_cls].members[member_idx]
        self._drain_charged()
        return TargetInfo(canonical, module, path, "method", dmodel.rel, member.start,
                          f"{def_mod}:{dmodel.classes[def_cls].node.name}")

    def _find_method(self, mod: str, idx: int, name: str,
                     seen: set[tuple[str, int]]) -> tuple[str, int, int] | None:
        """Look ``name`` up along the class's bases inside the package (MRO order, roughly)."""
        if (mod, idx) in seen:
            return None
        seen.add((mod, idx))
        model = self.mods.require(mod)
        cm = model.classes[idx]
        if name in cm.member_bindings:
            return mod, idx, cm.member_bindings[name][-1]
        for base in cm.node.bases:
            res = self._resolve_expr(model, base)
            if res is not None and res.kind == "class":
                found = self._find_method(res.module, res.index, name, seen)
                if found:
                    return found
        return None

    def _not_found(self, model: ModuleModel, name: str, canonical: str) -> str:
        import difflib

        names = [n for n in model.bindings if not n.startswith("__")]
        names += [f"{cm.node.name}.{m}" for cm in model.classes.values() for m in cm.member_bindings
                  if m == name or difflib.SequenceMatcher(None, m, name).ratio() >= 0.8]
        close = sorted(dict.fromkeys(difflib.get_close_matches(name, names, n=5, cutoff=0.5)
                                     + [n for n in names if n.endswith(f".{name}")]),
                       key=lambda n: -difflib.SequenceMatcher(None, n.rpartition(".")[2], name).ratio())[:5]
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        return f"{canonical}: {model.rel} defines no function or class {name!r}{hint}"

    def _member_not_found(self, model: ModuleModel, cm: ClassModel, name: str,
                          canonical: str) -> str:
        import difflib

        close = difflib.get_close_matches(name, list(cm.member_bindings), n=3, cutoff=0.5)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        return (f"{canonical}: class {cm.node.name} ({model.rel}:{cm.class_line}) and its bases "
                f"in the package have no member {name!r}{hint}")

    # -- resolution -----------------------------------------------------------------
    def _is_stubbed(self, mod: str, name: str) -> str | None:
        dotted = f"{mod}.{name}"
        if dotted in self.stub_exact:
            return dotted
        if name in self.stub_bare:
            return name
        return None

    def resolve(self, mod: str, name: str, site: tuple[str, int]) -> Res:
        key = (mod, name)
        memo = self._memo.get(key)
        if memo is not None:
            return memo
        self._memo[key] = Res("pending")
        res = self._resolve(mod, name, site)
        self._memo[key] = res
        return res

    def _resolve(self, mod: str, name: str, site: tuple[str, int]) -> Res:
        stub_key = self._is_stubbed(mod, name)
        if stub_key is not None:
            self.stub_points.append((mod, name, stub_key))
            return Res("stub", mod, dotted=stub_key)
        model = self.mods.get(mod)
        if model is None:
            if self.mods.exists(mod):
                self._unresolved(site, f"{mod}.{name}", f"cannot parse {mod}")
                return Res("missing", mod)
            # a module of the package that is not Python source (compiled extension)
            return self._outside(f"{mod}.{name}", site, kind="extension")
        idxs = model.bindings.get(name)
        if idxs:
            for i in idxs:
                self.keep_unit(model, i, name)
            unit = model.units[idxs[-1]]
            if unit.kind == "import":
                return self._import_target(model, unit, name, site)
            if unit.kind == "class":
                return Res("class", mod, unit.index)
            return Res("value", mod, unit.index)
        if model.is_package and self.mods.exists(f"{mod}.{name}"):
            return Res("module", f"{mod}.{name}")
        if name in _MODULE_DUNDERS:
            return Res("builtin")
        for si in model.star_imports:
            node = model.units[si].node
            assert isinstance(node, ast.ImportFrom)
            src = self.mods.resolve_relative(model, node.module, node.level)
            if self.mods.in_package(src):
                sub = self.resolve(src, name, site)
                if sub.kind not in ("missing", "builtin"):
                    self.keep_unit(model, si, None)
                    return sub
            else:
                self.keep_unit(model, si, None)
                return self._outside(f"{src}.{name}", site)
        if model.has_getattr:
            for i in model.bindings["__getattr__"]:
                self.keep_unit(model, i, "__getattr__")
            return Res("value", mod)
        if name in _BUILTINS:
            return Res("builtin")
        return Res("missing", mod, dotted=f"{mod}.{name}")

    def _import_target(self, model: ModuleModel, unit: Unit, name: str,
                       site: tuple[str, int]) -> Res:
        node = unit.node
        if isinstance(node, ast.ImportFrom):
            src = self.mods.resolve_relative(model, node.module, node.level)
            for alias in node.names:
                if (alias.asname or alias.name) != name:
                    continue
                if self.mods.in_package(src):
                    res = self.resolve(src, alias.name, (model.rel, node.lineno))
                    if res.kind == "missing":
                        self._unresolved((model.rel, node.lineno), f"{src}.{alias.name}",
                                         "imported name not found in the package")
                    return res
                return self._outside(f"{src}.{alias.name}", (model.rel, node.lineno))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                if bound != name:
                    continue
                target = alias.name if alias.asname else alias.name.split(".")[0]
                if self.mods.in_package(target):
                    return Res("module", target)
                return self._outside(target, (model.rel, node.lineno))
        return Res("value", model.name, unit.index)

    def _outside(self, dotted: str, site: tuple[str, int], kind: str = "outside") -> Res:
        if dotted.split(".")[0] in _STDLIB:
            return Res("outside", dotted=dotted)  # the standard library is always real
        entry = self.outside.setdefault(dotted, {"kind": kind, "sites": []})
        sites = entry["sites"]
        assert isinstance(sites, list)
        if len(sites) < 5:
            sites.append(f"{site[0]}:{site[1]}")
        return Res("outside", dotted=dotted)

    def _unresolved(self, site: tuple[str, int], name: str, why: str) -> None:
        item = {"file": site[0], "line": site[1], "name": name, "why": why}
        if item not in self.unresolved:
            self.unresolved.append(item)

    # -- keeping ------------------------------------------------------------------
    def _kept(self, model: ModuleModel) -> KeptModule:
        km = self.kept.get(model.name)
        if km is None:
            km = self.kept[model.name] = KeptModule(model)
        return km

    @property
    def cut(self) -> list[str]:
        """Pieces refused for the budget (distinct, in the order reached)."""
        return list(self._cut)

    def _charge(self, what: str) -> bool:
        """Count one new piece; False (and the piece recorded as cut) past the budget.

        A refused piece is not kept, so it may be charged again when reached from
        elsewhere: the record is a set, each piece listed once.
        """
        self._count += 1
        if self._count > self.budget and not self._exempt:
            self._cut.setdefault(what, None)
            return False
        return True

    def keep_unit(self, model: ModuleModel, index: int, name: str | None) -> None:
        km = self._kept(model)
        unit = model.units[index]
        if unit.kind in ("future", "docstring"):
            return
        first = index not in km.units
        if first:
            label = ", ".join(sorted(unit.names)) or unit.kind
            if not self._charge(f"{model.rel}:{unit.start} {label}"):
                return
            km.units.add(index)
        if unit.kind == "class":
            return  # the mode (shell/whole) is decided by how the class is used
        if unit.kind == "compound":
            walked = km.walked_inner.setdefault(index, set())
            if first:
                skip = {id(d) for n, defs in unit.inner_defs.items() if n != name for d in defs}
                walked.update(n for n in unit.inner_defs if n == name)
                node = unit.node
                parts = node.orelse if isinstance(node, ast.If) and is_type_checking(node.test) \
                    else [node]
                for part in parts:
                    self._queue.append((model, needs_of_statement(
                        part, skip_func_bodies=frozenset(skip)), None, None))
                # imports inside the block (try/except ImportError, platform checks) run too
                imports = [local_import_of(s) for s in direct_imports(list(parts))]
                self._queue.append((model, Needs(imports=imports), None, None))
            elif name is not None and name in unit.inner_defs and name not in walked:
                walked.add(name)
                for d in unit.inner_defs[name]:
                    self._queue.append((model, needs_of_function(d)[1], None, None))
            return
        if first:
            self._queue.append((model, needs_of_statement(unit.node), None, None))

    def use_class(self, mod: str, index: int, mode: str) -> None:
        """Keep a class in ``mode`` (upgrading shell -> whole when needed)."""
        model = self.mods.require(mod)
        km = self._kept(model)
        if index not in km.units:
            self.keep_unit(model, index, None)
            if index not in km.units:
                return  # over budget
        kc = km.classes.get(index)
        if kc is not None and _MODE_RANK[kc.mode] >= _MODE_RANK[mode]:
            return
        cm = model.classes[index]
        newly = kc is None
        if kc is None:
            kc = km.classes[index] = KeptClass(mode)
        kc.mode = mode
        me = (mod, index)
        if cm.atomic:
            self._queue.append((model, needs_of_statement(cm.node), None, None))
            return
        if newly:
            for name in cm.member_bindings:
                self._members_by_name.setdefault(name, []).append(me)
        # header: bases keep the class's mode (and join its family);
        # decorators and keywords only count when the class is kept whole
        for base in cm.node.bases:
            res = self._resolve_expr(model, base)
            if res is not None and res.kind == "class":
                self.use_class(res.module, res.index, mode)
                self._union(me, (res.module, res.index))
            else:
                base_needs = needs_of_exprs([base])
                self._queue.append((model, base_needs, None, None))
        extra = [k.value for k in cm.node.keywords]
        if mode == "whole":
            extra += cm.node.decorator_list
        self._queue.append((model, needs_of_exprs(extra), None, None))
        fam = self._family_attrs(me)
        for i, member in enumerate(cm.members):
            if member.kind == "docstring":
                kc.members.add(i)
                continue
            wanted = bool(member.names & fam)
            if mode == "whole":
                wanted = wanted or bool(member.names & self.attrs) or member.kind != "def" \
                    or member.is_dunder_def
            if wanted:
                self.keep_member(mod, index, i)

    def _resolve_expr(self, model: ModuleModel, expr: ast.expr) -> Res | None:
        """Resolve ``Name`` or ``mod.attr.Name`` (a class base) without walking anything else."""
        chain: list[str] = []
        root = expr
        while isinstance(root, ast.Attribute):
            chain.insert(0, root.attr)
            root = root.value
        if not isinstance(root, ast.Name):
            return None
        site = (model.rel, expr.lineno)
        if root.id in _BUILTINS and root.id not in model.bindings:
            return Res("builtin")
        res = self.resolve(model.name, root.id, site)
        for part in chain:
            if res.kind == "module":
                res = self.resolve(res.module, part, site)
            elif res.kind == "outside":
                res = self._outside(f"{res.dotted}.{part}", site)
            else:
                return res
        if res.kind == "missing":
            self._unresolved(site, res.dotted or root.id, "base class not found in the package")
        return res

    # -- class families: self.<attr> reads reach every class of one hierarchy ----------
    def _find(self, key: tuple[str, int]) -> tuple[str, int]:
        parent = self._parent.setdefault(key, key)
        while parent != self._parent.setdefault(parent, parent):
            parent = self._parent[parent]
        self._parent[key] = parent
        return parent

    def _family_attrs(self, key: tuple[str, int]) -> set[str]:
        return self._fam_attrs.setdefault(self._find(key), set())

    def _family_members(self, key: tuple[str, int]) -> set[tuple[str, int]]:
        return self._fam_members.setdefault(self._find(key), {key})

    def _union(self, a: tuple[str, int], b: tuple[str, int]) -> None:
        ra, rb = self._find(a), self._find(b)
        if ra == rb:
            return
        attrs_a, attrs_b = self._family_attrs(ra), self._family_attrs(rb)
        mem_a, mem_b = self._family_members(ra), self._family_members(rb)
        self._parent[rb] = ra
        merged = attrs_a | attrs_b
        self._fam_attrs[ra] = merged
        self._fam_members[ra] = mem_a | mem_b
        self._fam_attrs.pop(rb, None)
        self._fam_members.pop(rb, None)
        # each side now answers to the other side's self.<attr> reads
        for key in mem_a:
            self._keep_named(key, attrs_b - attrs_a)
        for key in mem_b:
            self._keep_named(key, attrs_a - attrs_b)

    def _keep_named(self, key: tuple[str, int], names: set[str]) -> None:
        if not names:
            return
        mod, index = key
        cm = self.mods.require(mod).classes[index]
        for name in names:
            for i in cm.member_bindings.get(name, ()):
                self.keep_member(mod, index, i)

    def keep_member(self, mod: str, index: int, member_index: int) -> None:
        model = self.mods.require(mod)
        km = self._kept(model)
        kc = km.classes.get(index)
        if kc is None:
            self.use_class(mod, index, "shell")
            kc = km.classes.get(index)
            if kc is None:
                return
        if member_index in kc.members:
            return
        cm = model.classes[index]
        member = cm.members[member_index]
        mlabel = ", ".join(sorted(member.names)) or member.kind
        if not self._charge(f"{model.rel}:{member.start} {cm.node.name}.{mlabel}"):
            return
        kc.members.add(member_index)
        node = member.node
        owner = (mod, index)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            head, body = needs_of_function(node)
            self._queue.append((model, head, cm, owner))
            self._queue.append((model, body, None, owner))
        else:
            self._queue.append((model, needs_of_statement(node), cm, owner))

    def attrs_update(self, names: set[str], self_names: set[str],
                     owner: tuple[str, int] | None) -> None:
        """Record attribute names read by kept code; keep the members they name.

        Whole classes answer to any ``.name``; shells only to names read on
        ``self``/``cls``/``super()`` inside their own family (their instances
        are built by recon, so only their own methods reach their members).
        """
        new = names - self.attrs
        self.attrs |= new
        for name in new:
            for mod, index in self._members_by_name.get(name, ()):
                kc = self._kept(self.mods.require(mod)).classes.get(index)
                if kc is not None and kc.mode == "whole":
                    self._keep_named((mod, index), {name})
        if owner is None or not self_names:
            return
        fam = self._family_attrs(owner)
        new_self = self_names - fam
        if not new_self:
            return
        fam |= new_self
        for key in list(self._family_members(owner)):
            self._keep_named(key, new_self)

    # -- walking needs ----------------------------------------------------------------
    def _drain(self) -> None:
        while self._queue:
            model, needs, scope, owner = self._queue.popleft()
            self.attrs_update(needs.attrs, needs.self_attrs, owner)
            for ref in needs.refs:
                self._use_ref(model, ref, scope, use=ref.use)
            for li in needs.imports:
                self._local_import(model, li)

    def _use_ref(self, model: ModuleModel, ref: Ref, scope: ClassModel | None, *,
                 use: str) -> None:
        site = (model.rel, ref.line)
        if scope is not None and ref.name in scope.member_bindings:
            mod = model.name
            cls_index = scope.unit.index
            for i in scope.member_bindings[ref.name]:
                self.keep_member(mod, cls_index, i)
            return
        if ref.name in _MODULE_DUNDERS:
            return
        if ref.name in _BUILTINS and ref.name not in model.bindings:
            return
        res = self.resolve(model.name, ref.name, site)
        self._follow(res, ref.chain, use, site, ref.name)

    def _follow(self, res: Res, chain: tuple[str, ...], use: str, site: tuple[str, int],
                shown: str) -> None:
        while True:
            if res.kind == "module":
                if not chain:
                    return
                shown = f"{res.module}.{chain[0]}"
                res = self.resolve(res.module, chain[0], site)
                chain = chain[1:]
                continue
            if res.kind == "class":
                mode = _USE_MODE.get(use, "whole") if not chain else "whole"
                self.use_class(res.module, res.index, mode)
                return
            if res.kind == "outside":
                if chain:
                    self._outside(".".join((res.dotted, *chain)), site)
                return
            if res.kind == "missing":
                self._unresolved(site, res.dotted or shown, "not defined in the package")
            return

    def _local_import(self, model: ModuleModel, li: LocalImport) -> None:
        site = (model.rel, li.line)
        if li.is_from:
            src = self.mods.resolve_relative(model, li.module, li.level)
            for name, asname in li.names:
                if name == "*":
                    continue
                if self.mods.in_package(src):
                    res = self.resolve(src, name, site)
                    if res.kind == "missing" and not self.mods.exists(f"{src}.{name}"):
                        self._unresolved(site, f"{src}.{name}", "imported name not found")
                    if res.kind == "missing" and self.mods.exists(f"{src}.{name}"):
                        res = Res("module", f"{src}.{name}")
                    for chain in li.chains.get(asname or name, []):
                        self._follow(res, chain, "value", site, name)
                    if res.kind == "class":
                        self.use_class(res.module, res.index, "whole")
                else:
                    self._outside(f"{src}.{name}", site)
            return
        for name, asname in li.names:
            target = name if asname else name.split(".")[0]
            if self.mods.in_package(name):
                res = Res("module", target)
                for chain in li.chains.get(asname or target, []):
                    self._follow(res, chain, "value", site, target)
            else:
                self._outside(name, site)

    # -- result --------------------------------------------------------------------
    def result(self, targets: list[TargetInfo]) -> ClosureResult:
        return ClosureResult(package=self.package, targets=targets, modules=self.kept,
                             outside=dict(sorted(self.outside.items())),
                             unresolved=self.unresolved, stub_points=self.stub_points,
                             parse_errors=dict(self.mods.parse_errors), cut=self.cut,
                             budget=self.budget)


def compute_closure(mods: ModuleSet, qualnames: list[str], *,
                    stubs: frozenset[str] = frozenset(),
                    budget: int = DEFAULT_BUDGET) -> ClosureResult:
    """Resolve ``qualnames`` and walk their closure."""
    walker = Walker(mods, stubs=stubs, budget=budget)
    targets = [walker.add_target(q) for q in qualnames]
    walker._drain()
    return walker.result(targets)
