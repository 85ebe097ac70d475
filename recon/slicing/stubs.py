"""Recording stubs and the import hook that hands them out (runs inside the child).

Standard library only: this module is copied next to the slice into the
run's scratch folder and imported by the child process, never by recon itself
(except for tests and ``python slice.py``).

What a stub does, and why:

* every attribute, call, subscript and operator on a stub works and is
  counted (``torch.cuda.is_available()`` records ``torch``, ``torch.cuda``,
  ``torch.cuda.is_available``), so the report says which outside names the
  run really touched;
* a stub can be subclassed (``class Foo(nn.Module)``: ``__mro_entries__``
  gives a real class) and used in ``isinstance`` (``__instancecheck__``);
* a stub called with just a function, class or other callable returns it unchanged, so stubbed
  decorators (``@triton.jit``, ``@torch.compile(...)``,
  ``@torch.inference_mode()``) pass the function through instead of replacing
  it with a stub (the classic failure of mock-based stubbing);
* a stub has no value: ``int()``, ``len()``, ``<``, iteration raise a clear
  error naming the stub and how to give it one; truth tests answer True and
  are recorded as an *assumption* with the line that made it;
* a *forbidden* stub raises :class:`ForbiddenStubReached` (a BaseException,
  so an engine's ``except Exception`` cannot hide it) on any use, and the hit
  is recorded even if something catches it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

_DECORATABLE = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, type,
                staticmethod, classmethod, property)


class StubValueError(TypeError):
    """A stub was asked for a concrete value it does not have."""


class SliceDefinitionError(RuntimeError):
    """A piece of the slice could not be defined and was used anyway."""


class ForbiddenStubReached(BaseException):  # noqa: N818 - it is a signal, not an error class
    """A ``--forbid`` stub was used: the branch it guards was taken."""


class Recorder:
    """Counts stub use; the child reports it after the run."""

    def __init__(self) -> None:
        self.touches: dict[str, dict[str, Any]] = {}
        self.assumptions: dict[tuple[str, str], int] = {}
        self.forbidden: list[dict[str, str]] = []
        self.broken: list[dict[str, str]] = []
        self.slice_files: set[str] = set()

    def site(self) -> str:
        """``file:line`` of the innermost frame that runs slice code (else the caller)."""
        frame = sys._getframe(1)
        fallback = ""
        while frame is not None:
            fname = frame.f_code.co_filename
            if fname in self.slice_files:
                return f"{fname}:{frame.f_lineno}"
            if not fallback and fname != __file__ and not fname.startswith("<frozen"):
                fallback = f"{fname}:{frame.f_lineno}"
            frame = frame.f_back  # type: ignore[assignment]
        return fallback or "?"

    def touch(self, path: str, kind: str, op: str) -> None:
        rec = self.touches.get(path)
        if rec is None:
            rec = self.touches[path] = {"name": path, "kind": kind, "count": 0, "ops": {},
                                        "first": self.site()}
        rec["count"] += 1
        rec["ops"][op] = rec["ops"].get(op, 0) + 1

    def assume(self, path: str, what: str) -> None:
        key = (f"{what} of stub {path}", self.site())
        self.assumptions[key] = self.assumptions.get(key, 0) + 1

    def report(self) -> dict[str, Any]:
        return {
            "touches": sorted(self.touches.values(), key=lambda r: (-r["count"], r["name"])),
            "assumptions": [{"what": w, "site": s, "count": n}
                            for (w, s), n in self.assumptions.items()],
            "forbidden": self.forbidden,
            "broken": self.broken,
        }


RECORDER = Recorder()


def _decoratable(obj: Any) -> bool:
    """Functions, classes, descriptors and other callables (lru_cache wrappers, partials)."""
    return isinstance(obj, _DECORATABLE) or (callable(obj) and not isinstance(obj, Stub))


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


class _StubBase:
    """Base of the real classes a stub turns into when subclassed."""

    _recon_path = "?"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        RECORDER.touch(type(self)._recon_path, "outside", "init")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__()


class Stub:
    """A recording stand-in for a name the slice does not hold."""

    __slots__ = ("_recon_path", "_recon_kind", "_recon_registered", "_recon_factory",
                 "_recon_class", "_recon_store", "__weakref__")

    def __init__(self, path: str, kind: str, factory: StubFactory, registered: bool) -> None:
        object.__setattr__(self, "_recon_path", path)
        object.__setattr__(self, "_recon_kind", kind)
        object.__setattr__(self, "_recon_registered", registered)
        object.__setattr__(self, "_recon_factory", factory)
        object.__setattr__(self, "_recon_class", None)
        object.__setattr__(self, "_recon_store", {})

    # -- recording ------------------------------------------------------------
    def _t(self, op: str) -> None:
        RECORDER.touch(self._recon_path, self._recon_kind, op)

    def _derived(self, suffix: str) -> Stub:
        return Stub(self._recon_path + suffix, self._recon_kind, self._recon_factory, False)

    def _no_value(self, what: str) -> StubValueError:
        root = self._recon_path.split("(")[0].split("[")[0]
        return StubValueError(
            f"{what} of stub {self._recon_path} (at {RECORDER.site()}): it has no value; give "
            f"one with --stub {root}=EXPR, or use the real package with --real")

    # -- attribute access --------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        if _is_dunder(name):
            raise AttributeError(name)
        self._t("attr")
        store = self._recon_store
        if name in store:
            return store[name]
        path = f"{self._recon_path}.{name}"
        if self._recon_registered:
            return self._recon_factory.child(path, self._recon_kind)
        return Stub(path, self._recon_kind, self._recon_factory, False)

    def __setattr__(self, name: str, value: Any) -> None:
        self._t("setattr")
        self._recon_store[name] = value

    def __delattr__(self, name: str) -> None:
        self._t("delattr")
        self._recon_store.pop(name, None)

    # -- calls, decorators, classes ----------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and _decoratable(args[0]):
            self._t("decorate")
            return args[0]
        self._t("call")
        return self._derived("()")

    def _as_class(self) -> type:
        klass = self._recon_class
        if klass is None:
            name = self._recon_path.rsplit(".", 1)[-1].replace("(", "").replace(")", "") or "Stub"
            if not name.isidentifier():
                name = "Stub"
            klass = type(name, (_StubBase,), {"__module__": f"stub:{self._recon_path}",
                                              "_recon_path": self._recon_path})
            object.__setattr__(self, "_recon_class", klass)
        return klass

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        self._t("subclass")
        return (self._as_class(),)

    def __instancecheck__(self, obj: Any) -> bool:
        self._t("isinstance")
        return isinstance(obj, self._as_class())

    def __subclasscheck__(self, cls: Any) -> bool:
        self._t("issubclass")
        return isinstance(cls, type) and issubclass(cls, self._as_class())

    # -- containers and operators --------------------------------------------------
    def __getitem__(self, key: Any) -> Any:
        self._t("getitem")
        return self._derived("[]")

    def __setitem__(self, key: Any, value: Any) -> None:
        self._t("setitem")

    def __delitem__(self, key: Any) -> None:
        self._t("delitem")

    def __enter__(self) -> Any:
        self._t("with")
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def __bool__(self) -> bool:
        self._t("bool")
        RECORDER.assume(self._recon_path, "truth value True")
        return True

    def __eq__(self, other: Any) -> bool:
        self._t("==")
        return self is other

    def __ne__(self, other: Any) -> bool:
        self._t("!=")
        return self is not other

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"<stub {self._recon_path}>"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)

    def __dir__(self) -> list[str]:
        return []

    def __len__(self) -> int:
        raise self._no_value("len()")

    def __iter__(self) -> Any:
        raise self._no_value("iteration")

    def __contains__(self, item: Any) -> bool:
        raise self._no_value("`in`")

    def __int__(self) -> int:
        raise self._no_value("int()")

    def __float__(self) -> float:
        raise self._no_value("float()")

    def __index__(self) -> int:
        raise self._no_value("use as an index")

    def __lt__(self, other: Any) -> bool:
        raise self._no_value("comparison <")

    def __le__(self, other: Any) -> bool:
        raise self._no_value("comparison <=")

    def __gt__(self, other: Any) -> bool:
        raise self._no_value("comparison >")

    def __ge__(self, other: Any) -> bool:
        raise self._no_value("comparison >=")


def _binop(symbol: str, reflected: bool) -> Any:
    def op(self: Stub, other: Any) -> Stub:
        self._t(symbol)
        return self._derived(f" {symbol} ?" if not reflected else f" r{symbol} ?")

    return op


for _name, _sym in (("add", "+"), ("sub", "-"), ("mul", "*"), ("truediv", "/"),
                    ("floordiv", "//"), ("mod", "%"), ("pow", "**"), ("matmul", "@"),
                    ("and", "&"), ("or", "|"), ("xor", "^"), ("lshift", "<<"), ("rshift", ">>")):
    setattr(Stub, f"__{_name}__", _binop(_sym, False))
    setattr(Stub, f"__r{_name}__", _binop(_sym, True))
for _name, _sym in (("neg", "-x"), ("pos", "+x"), ("invert", "~x"), ("abs", "abs()")):
    setattr(Stub, f"__{_name}__", lambda self, _s=_sym: (self._t(_s), self._derived(f" {_s}"))[1])


class ForbiddenStub(Stub):
    """A stub whose every use is the proof that a branch was taken."""

    __slots__ = ()

    def _t(self, op: str) -> None:
        site = RECORDER.site()
        RECORDER.forbidden.append({"name": self._recon_path, "op": op, "site": site})
        raise ForbiddenStubReached(
            f"forbidden stub {self._recon_path} reached at {site} ({op})")

    def __repr__(self) -> str:
        return f"<forbidden stub {self._recon_path}>"

    __str__ = __repr__

    def __hash__(self) -> int:
        return id(self)


class BrokenStub(Stub):
    """Stands for a piece that failed to define; any use explains why."""

    __slots__ = ()

    def _t(self, op: str) -> None:
        factory = self._recon_factory
        why = factory.broken_why.get(self._recon_path, "")
        site = RECORDER.site()
        RECORDER.broken.append({"name": self._recon_path, "site": site, "why": why})
        raise SliceDefinitionError(
            f"{self._recon_path} is used at {site} but could not be defined in the slice ({why});"
            f" supply it with --stub {self._recon_path}=EXPR")

    def __repr__(self) -> str:
        return f"<undefined {self._recon_path}>"

    __str__ = __repr__

    def __hash__(self) -> int:
        return id(self)


class StubModule(types.ModuleType):
    """A module every attribute of which is a recording stub."""

    def __getattr__(self, name: str) -> Any:
        if _is_dunder(name):
            raise AttributeError(name)
        factory: StubFactory = self.__dict__["_recon_factory"]
        full = f"{self.__name__}.{name}"
        if full in factory.kept_modules:
            raise AttributeError(name)  # a real slice module: the import system loads it
        points = self.__dict__.get("_recon_points") or {}
        if name in points:
            return points[name]
        RECORDER.touch(self.__name__, self.__dict__["_recon_kind"], "attr")
        return factory.child(full, self.__dict__["_recon_kind"])


class StubFactory:
    """Hands out stubs, user values and forbidden stubs by dotted name."""

    def __init__(self, *, values: dict[str, Any] | None = None,
                 forbid: set[str] | frozenset[str] = frozenset()) -> None:
        self.values = dict(values or {})
        self.forbid = set(forbid)
        self.registry: dict[str, Any] = {}
        self.kept_modules: set[str] = set()
        self.broken_why: dict[str, str] = {}

    def _special(self, path: str) -> tuple[bool, Any]:
        last = path.rsplit(".", 1)[-1]
        for key in (path, last):
            if key in self.forbid:
                return True, ForbiddenStub(path, "forbidden", self, True)
            if key in self.values:
                return True, self.values[key]
        return False, None

    def child(self, path: str, kind: str = "outside") -> Any:
        """The (shared) stub for a dotted name, or the value the user gave for it."""
        hit = self.registry.get(path)
        if hit is not None:
            return hit
        special, value = self._special(path)
        obj = value if special else Stub(path, kind, self, True)
        self.registry[path] = obj
        return obj

    # -- the slice loader's protocol ----------------------------------------------
    def module(self, name: str, points: dict[str, Any], kind: str = "package") -> Any:
        """A placeholder module (package module not in the slice, or an outside module)."""
        special, value = self._special(name)
        if special:
            return value
        mod = StubModule(name)
        mod.__dict__["_recon_factory"] = self
        mod.__dict__["_recon_kind"] = kind
        mod.__dict__["_recon_points"] = points
        mod.__path__ = []
        return mod

    def missing(self, dotted: str) -> Any:
        """A name of a kept module that the slice does not hold."""
        return self.child(dotted, "package")

    def broken(self, dotted: str, err: BaseException, where: str) -> Any:
        self.broken_why[dotted] = f"{where}: {type(err).__name__}: {err}"
        return BrokenStub(dotted, "broken", self, True)

    def user(self, key: str, dotted: str) -> Any:
        if key in self.forbid:
            return ForbiddenStub(dotted, "forbidden", self, True)
        if key in self.values:
            return self.values[key]
        return self.child(dotted, "package")


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Import hook: outside modules imported *by slice code* become stub modules.

    Real packages asked for with ``--real`` (and everything they import
    themselves), the standard library, and modules already imported stay
    real; only imports made from the slice's own files are stubbed.
    """

    def __init__(self, factory: StubFactory, *, package: str, real: set[str],
                 absent: set[str] | None = None) -> None:
        self.factory = factory
        self.package = package
        self.real = set(real)
        self.absent = set(absent or ())
        self.stdlib = set(sys.stdlib_module_names) | {"__future__", "__main__"}

    def _from_slice(self) -> bool:
        frame = sys._getframe(2)
        while frame is not None:
            fname = frame.f_code.co_filename
            if fname.startswith("<frozen") or "importlib" in fname or fname == __file__:
                frame = frame.f_back  # type: ignore[assignment]
                continue
            return fname in RECORDER.slice_files
        return False

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        top = fullname.partition(".")[0]
        if (top in self.absent or fullname in self.absent) and self._from_slice():
            RECORDER.touch(fullname, "absent", "import")
            raise ModuleNotFoundError(f"No module named {fullname!r} (absent by request)",
                                      name=fullname)
        if top in self.real or top in self.stdlib or top == self.package:
            return None
        if not self._from_slice():
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: Any) -> Any:
        RECORDER.touch(spec.name, "outside", "import")
        special, value = self.factory._special(spec.name)
        if special:
            return value
        return self.factory.module(spec.name, {}, kind="outside")

    def exec_module(self, module: Any) -> None:
        return None


def install(*, package: str, slice_files: set[str], real: set[str] | None = None,
            values: dict[str, Any] | None = None, forbid: set[str] | None = None,
            absent: set[str] | None = None) -> StubFactory:
    """Put the stub hook on ``sys.meta_path``; return the factory for the slice loader.

    ``absent``: outside modules whose import fails with ModuleNotFoundError (to take the
    engine's "optional dependency missing" branch instead of a stub).
    """
    RECORDER.slice_files |= set(slice_files)
    factory = StubFactory(values=values, forbid=forbid or set())
    sys.meta_path.insert(0, StubFinder(factory, package=package, real=set(real or ()),
                                       absent=absent))
    return factory


def install_default(slice_meta: dict[str, Any], modules: dict[str, Any]) -> StubFactory:
    """Recording stubs for ``python slice.py`` (no user values)."""
    files = {info["file"] for info in modules.values()}
    return install(package=slice_meta["package"], slice_files=files)
