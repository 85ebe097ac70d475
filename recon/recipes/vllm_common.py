"""Shared plumbing of the vLLM recipes capture-sizes, mamba-align-column and kv-capacity.

Why this module exists: these recipes run a *chain* of a release's functions
in one sandboxed child (``recon.slicing.run_calls``), where a later call works
on what an earlier one built or changed: ``VllmConfig._set_cudagraph_sizes``
fills a ``CompilationConfig``, ``resolve_cudagraph_mode_and_sizes`` rounds it,
the dispatcher's ``initialize_cudagraph_keys`` reads it and ``dispatch`` uses
the keys. recon/slicing builds a fresh ``self`` for each call from attributes
and returns only JSON, so the child gets a small helper file (passed as
``stub_file``; its names are visible to ``Py(...)`` expressions) that

* builds engine objects without their ``__init__`` (``instance``), with a
  plain ``repr`` so recon's result pictures never run an engine ``__repr__``
  (which may need pydantic or the whole engine);
* binds a method to one of those objects (``bind``): the call recon makes
  on its fresh ``self`` is forwarded to the bound object, so the real method
  (traced, with provenance) works on the chain's shared state, and its
  return value is kept (``R``) for later inputs;
* reads an object's state back as JSON (``state``).

Nothing here computes an engine quantity: every number comes from the
release's own code.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..acquire.writer import write_text
from ..errors import ReconError
from .base import Provenance, RecipeContext

#: Code run in the child (standard library only); see the module docstring.
CHILD_HELPERS = r'''
import copy as _copy
import functools as _functools
import inspect as _inspect
import logging as _logging
import types as _types

#: values kept across the calls of one run: bound objects, return values
R = {}


def attr(qual):
    """``pkg.mod:Class.attr`` -> the object, from the slice."""
    module, _, path = qual.partition(":")
    obj = __import__(module, fromlist=["_"])
    for part in path.split(".") if path else ():
        obj = getattr(obj, part)
    return obj


_PLAIN = {}


def _plain_class(cls):
    """A subclass with object's repr: recon pictures objects with repr()."""
    sub = _PLAIN.get(cls)
    if sub is None:
        sub = type(cls.__name__, (cls,), {"__repr__": object.__repr__, "__module__": cls.__module__,
                                          "__qualname__": cls.__qualname__})
        _PLAIN[cls] = sub
    return sub


def _given(name):
    return property(lambda self: self.__dict__[name])


_DEFAULTED = set()


def _defaulted(key, name):
    """An unmodelled attribute ``key`` of ``name`` was read: report it once (dunders stay missing)."""
    if key.startswith("__") and key.endswith("__"):
        raise AttributeError(key)
    if name not in _DEFAULTED:
        _DEFAULTED.add(name)
        print(f"@@recon-vllm@@ defaulted {name}", flush=True)


def _lenient_getattr(name):
    def __getattr__(self, key):
        _defaulted(key, f"{name}.{key}")
        return None
    return __getattr__


def instance(qual, _lenient=None, **attrs):
    """An instance of a slice class without running its ``__init__`` (which needs the engine).

    An attribute given here that the class defines as a property (``ModelConfig.use_mla``)
    answers the given value: the property would need state recon does not build. With
    ``_lenient="cache_config"``, fields recon does not give read as None (each reported).
    """
    cls = attr(qual)
    abstract = getattr(cls, "__abstractmethods__", None)
    sub = _plain_class(cls)
    props = sorted(k for k in attrs if isinstance(_inspect.getattr_static(cls, k, None), property))
    extra = {k: _given(k) for k in props}
    if _lenient:
        extra["__getattr__"] = _lenient_getattr(_lenient)
    if extra:
        sub = type(cls.__name__, (sub,), extra)
    if abstract:
        sub.__abstractmethods__ = frozenset()
    obj = object.__new__(sub)
    obj.__dict__.update(attrs)
    return obj


def make(qual, _fill=None, **kwargs):
    """Call dataclass ``qual`` with the keywords this release's fields accept.

    Keywords the release's class lacks are dropped; ``_fill`` gives fields some
    releases require (``use_mla`` of old attention specs) when the class has them.
    """
    import dataclasses as _dc

    cls = attr(qual)
    names = {f.name for f in _dc.fields(cls)} if _dc.is_dataclass(cls) else set(kwargs)
    args = {k: v for k, v in kwargs.items() if k in names}
    for k, v in (_fill or {}).items():
        if k in names and k not in args:
            args[k] = v
    return cls(**args)


def clone(obj, **changes):
    """A copy of an ``instance`` object (its attributes deep-copied, enums kept)."""
    new = object.__new__(type(obj))
    new.__dict__.update(_copy.deepcopy(vars(obj)))
    new.__dict__.update(changes)
    return new


def keep(key, value):
    """Remember ``value`` under ``key`` for later inputs; returns it."""
    R[key] = value
    return value


def bind(qual, obj, key=None):
    """Forward the next calls of method ``qual`` to ``obj``; keep each return value in ``R[key]``."""
    module, _, path = qual.partition(":")
    cls_path, _, name = path.rpartition(".")
    cls = attr(f"{module}:{cls_path}")
    current = cls.__dict__.get(name)
    real = getattr(current, "__recon_real__", current)
    if not hasattr(current, "__recon_real__"):
        def forward(self, *args, **kwargs):
            value = forward.__recon_real__(forward.__recon_obj__, *args, **kwargs)
            if forward.__recon_key__ is not None:
                R[forward.__recon_key__] = value
            return value
        _functools.update_wrapper(forward, real)
        forward.__recon_real__ = real
        setattr(cls, name, forward)
        current = forward
    current.__recon_obj__ = obj
    current.__recon_key__ = key
    return f"<bound to {type(obj).__name__}>"


def state(obj, *names):
    """The attributes of ``obj`` (all, or ``names``) as a namespace recon reports as JSON."""
    data = vars(obj)
    return _types.SimpleNamespace(**{k: data.get(k) for k in (names or data)})


class Opaque:
    """A container recon should not picture in full (it stays usable by the engine code)."""

    def __init__(self, inner, label="..."):
        self.inner = inner
        self.label = label

    def __getitem__(self, key):
        return self.inner[key]

    def __setitem__(self, key, value):
        self.inner[key] = value

    def __contains__(self, key):
        return key in self.inner

    def __iter__(self):
        return iter(self.inner)

    def __len__(self):
        return len(self.inner)

    def get(self, key, default=None):
        return self.inner.get(key, default)

    def setdefault(self, key, default=None):
        return self.inner.setdefault(key, default)

    def items(self):
        return self.inner.items()

    def values(self):
        return self.inner.values()

    def keys(self):
        return self.inner.keys()

    def __repr__(self):
        return f"<{self.label}: {len(self.inner)} entries>"


class Lenient(_types.SimpleNamespace):
    """A config section whose attributes recon does not model read as None (reported once each).

    Used only where an unmodelled field means "feature off" (a feature-support check);
    every such read is printed as a marker line, and the recipe lists them as assumptions.
    """

    def __init__(self, _name="section", **values):
        super().__init__(**values)
        object.__setattr__(self, "_recon_name", _name)

    def __getattr__(self, key):
        _defaulted(key, f"{object.__getattribute__(self, '_recon_name')}.{key}")
        return None


class Answers:
    """An object whose unmodelled methods return None (each reported once), e.g. the platform.

    ``Answers('current_platform', is_cuda=lambda: True)``: known methods answer as given; a
    hook the engine calls that recon does not model (``register_custom_kv_cache_specs``)
    does nothing and is listed among the assumptions.
    """

    def __init__(self, _name="object", **known):
        self.__dict__.update(known)
        self.__dict__["_recon_name"] = _name

    def __getattr__(self, key):
        _defaulted(key, f"{self.__dict__['_recon_name']}.{key}()")
        return lambda *args, **kwargs: None


class _ToMarkers(_logging.Handler):
    """The release's own log records, as marker lines the parent reads (``logged``)."""

    def emit(self, record):
        try:
            print("@@recon-vllm@@ log " + record.getMessage().replace("\n", " "), flush=True)
        except Exception:  # a log line must never break the run
            pass


_logging.getLogger().addHandler(_ToMarkers())
_logging.getLogger().setLevel(_logging.INFO)


def record(qual, key):
    """Keep every return value of module-level function ``qual`` in ``R[key]`` (call unchanged)."""
    module, _, name = qual.partition(":")
    mod = __import__(module, fromlist=["_"])
    real = getattr(mod, name)
    real = getattr(real, "__recon_real__", real)

    def wrapper(*args, **kwargs):
        value = real(*args, **kwargs)
        R[key] = value
        return value

    _functools.update_wrapper(wrapper, real)
    wrapper.__recon_real__ = real
    setattr(mod, name, wrapper)


class _Cell:
    def __init__(self, row, index):
        self.row = row
        self.index = index

    def fill_(self, value):
        list.__setitem__(self.row, self.index, int(value))
        return self


class Cells(list):
    """Stands in for a 1-D int tensor the code writes with ``t[i].fill_(v)``; reported as a list."""

    def __getitem__(self, index):
        if isinstance(index, int):
            return _Cell(self, index)
        return list.__getitem__(self, index)
'''


@contextmanager
def helper_file(extra: str = "") -> Iterator[Path]:
    """The child helpers (plus ``extra`` code) as a stub file for ``run_calls(stub_file=...)``."""
    with tempfile.TemporaryDirectory(prefix="recon-vllm-") as tmp:
        path = Path(tmp) / "helpers.py"
        write_text(path, CHILD_HELPERS + "\n" + extra)
        yield path


#: outside names every chain of these recipes replaces: pydantic's dataclass decorator
#: (vLLM's ``@config`` calls it with keywords; recording stubs would turn the class into a
#: stub) becomes the identity, so config classes stay real classes of the slice.
BASE_STUBS: dict[str, str] = {
    "pydantic.dataclasses.dataclass": "lambda cls=None, **kw: cls if cls is not None else (lambda c: c)",
}


def params_of(ctx: RecipeContext, qualname: str) -> list[str]:
    """Parameter names of a function of the release (``self`` excluded)."""
    fn = ctx.index.functions[qualname]
    return [p.name for p in fn.params if p.name not in ("self", "cls")]


def has(ctx: RecipeContext, qualname: str) -> bool:
    return qualname in ctx.index.functions


def source_of(ctx: RecipeContext, qualname: str) -> str:
    """The source text of one function of the release."""
    fn = ctx.index.functions[qualname]
    lines = ctx.snapshot.read_text(fn.path).splitlines(keepends=True)
    return "".join(lines[fn.lineno - 1: fn.end_lineno])


def ran_provenance(ctx: RecipeContext, results: Iterable[Any]) -> list[Provenance]:
    """Provenance of every function of the release whose code ran in these results.

    Built from what the child's tracer saw (``RunResult.provenance``), mapped back
    to the index's qualnames, so the list is what really executed, not what a
    recipe meant to run.
    """
    by_start: dict[tuple[str, int], str] = {}
    for q, fn in ctx.index.functions.items():
        by_start.setdefault((fn.path, fn.lineno), q)
        by_start.setdefault((fn.path, fn.def_lineno), q)
    out: list[Provenance] = []
    seen: set[tuple[str, int]] = set()
    for r in results:
        for piece in getattr(r, "provenance", []):
            key = (piece.file, piece.start)
            if key in seen:
                continue
            seen.add(key)
            q = by_start.get(key)
            out.append(ctx.provenance(q) if q else
                       Provenance(f"{piece.module}:{piece.what}", piece.file, piece.start,
                                  piece.sha256))
    return out


def speculative_tokens(ctx: RecipeContext) -> tuple[int, str | None]:
    """``(num_speculative_tokens, method)`` from ``--speculative-config`` (0, None without it)."""
    spec = ctx.flags.get("speculative_config") or {}
    k = spec.get("num_speculative_tokens", ctx.flags.get("num_speculative_tokens"))
    if k is None:
        return 0, spec.get("method")
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ReconError(f"--speculative-config: num_speculative_tokens must be a "
                         f"non-negative integer, got {k!r}")
    return k, spec.get("method")


def gpu_family(ctx: RecipeContext) -> int:
    """The CUDA capability the recipes assume (``--set gpu=sm90``; 90 = H100/H200)."""
    raw = str(ctx.options.get("gpu", "sm90")).lower().removeprefix("sm").removeprefix("_")
    try:
        return int(raw)
    except ValueError as err:
        raise ReconError(f"--set gpu: expected e.g. sm80, sm90, sm100, got {ctx.options['gpu']!r}") \
            from err


def ranges(rows: Sequence[tuple[int, Any]]) -> list[tuple[int, int, Any]]:
    """Runs of equal values: ``[(1, a), (2, a), (3, b)]`` -> ``[(1, 2, a), (3, 3, b)]``."""
    out: list[tuple[int, int, Any]] = []
    for n, value in rows:
        if out and out[-1][2] == value and out[-1][1] == n - 1:
            out[-1] = (out[-1][0], n, value)
        else:
            out.append((n, n, value))
    return out


def defaulted(results: Sequence[Any]) -> list[str]:
    """Config fields a ``Lenient`` section answered with None during the run."""
    out: list[str] = []
    text = results[0].stdout if results else ""
    for line in text.splitlines():
        if line.startswith("@@recon-vllm@@ defaulted "):
            name = line.split(" ", 2)[2].strip()
            if name not in out:
                out.append(name)
    return out


def logged(results: Sequence[Any]) -> list[str]:
    """The release's log messages during the run (``@@recon-vllm@@ log`` marker lines)."""
    text = results[0].stdout if results else ""
    return [line.split(" ", 2)[2] for line in text.splitlines()
            if line.startswith("@@recon-vllm@@ log ")]


def stub_notes(results: Iterable[Any]) -> list[str]:
    """The stub assumptions a run reported (a value a stub stood in for), one line each."""
    seen = sorted({f"{a.get('what', '')} at {a.get('site', '')}" for r in results
                   for a in getattr(r, "assumptions", [])})
    return [f"stub assumption: {a}" for a in seen]

