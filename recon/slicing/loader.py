"""The runtime every emitted slice carries: it turns the stored pieces into modules.

This file is copied verbatim (from the ``# --- runtime ---`` marker on) into
each slice ``recon slice`` writes, so it is standard library only and must not
import recon. The slice defines ``SLICE`` and ``MODULES`` above it.

How a slice runs: a meta-path finder serves every module of the engine's
package. A module that holds kept pieces becomes a real module object of its
original name (``vllm.config.compilation``), and each piece is compiled with
its original file name and line numbers (padded with blank lines) and with
lazy annotations (PEP 563), so tracebacks, ``__name__``, relative imports and
``from x import y`` between pieces behave as in the engine. A module of the
package that holds no kept piece, and a name a kept module does not hold, come
from the stub factory (recording stubs) when one is given.
"""

from __future__ import annotations

from typing import Any

SLICE: dict[str, Any] = {}
MODULES: dict[str, dict[str, Any]] = {}

# --- runtime ---
import __future__ as _future  # noqa: E402

import importlib as _importlib  # noqa: E402
import importlib.abc as _iabc  # noqa: E402
import importlib.machinery as _imach  # noqa: E402
import linecache as _linecache  # noqa: E402
import sys as _sys  # noqa: E402

_FLAGS = _future.annotations.compiler_flag


def _assemble(segments: list[tuple[int, int, str, str]]) -> str:
    """Place each (start, end, sha256, text) at its original line; blank lines elsewhere."""
    out: list[str] = []
    line = 1
    for start, _end, _sha, text in segments:
        if start > line:
            out.append("\n" * (start - line))
            line = start
        body = text[1:] if text.startswith("\n") else text
        if not body.endswith("\n"):
            body += "\n"
        out.append(body)
        line += body.count("\n")
    return "".join(out)


class SliceFinder(_iabc.MetaPathFinder, _iabc.Loader):
    """Serves the package's modules from the slice's pieces (and stubs for the rest)."""

    def __init__(self, slice_meta: dict[str, Any], modules: dict[str, dict[str, Any]],
                 factory: Any = None) -> None:
        self.meta = slice_meta
        self.package = slice_meta["package"]
        self.modules = modules
        self.factory = factory
        self.failures: list[dict[str, Any]] = []
        if factory is not None and hasattr(factory, "kept_modules"):
            factory.kept_modules |= set(modules)
        self.parents = {name.rsplit(".", i)[0] for name in modules
                        for i in range(1, name.count(".") + 1)}
        self.stub_points: dict[str, list[tuple[str, str]]] = {}
        for mod, name, key in slice_meta.get("stub_points", []):
            self.stub_points.setdefault(mod, []).append((name, key))
        for info in modules.values():
            lines: dict[int, str] = {}
            for unit in info["units"]:
                for start, _end, _sha, text in unit["segments"]:
                    body = text[1:] if text.startswith("\n") else text
                    for i, ln in enumerate(body.splitlines(keepends=True)):
                        lines[start + i] = ln
            top = max(lines) if lines else 0
            full = [lines.get(i, "\n") for i in range(1, top + 1)]
            _linecache.cache[info["file"]] = (sum(map(len, full)), None, full, info["file"])

    # -- finder ---------------------------------------------------------------
    def owns(self, fullname: str) -> bool:
        return fullname == self.package or fullname.startswith(self.package + ".")

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if not self.owns(fullname):
            return None
        info = self.modules.get(fullname)
        if info is None and self.factory is None and fullname not in self.parents:
            return None  # let the normal machinery fail (or find a real copy)
        is_pkg = bool(info["package"]) if info is not None else True
        spec = _imach.ModuleSpec(fullname, self, origin=info["file"] if info else None,
                                 is_package=is_pkg)
        if info is not None:
            spec.has_location = False
        return spec

    def create_module(self, spec: Any) -> Any:
        if spec.name in self.modules or self.factory is None:
            return None  # a plain module (an empty parent package without a factory)
        return self.factory.module(spec.name, self._user_points(spec.name))

    def _user_points(self, module: str) -> dict[str, Any]:
        return {name: self.factory.user(key, f"{module}.{name}")
                for name, key in self.stub_points.get(module, [])}

    def exec_module(self, module: Any) -> None:
        info = self.modules.get(module.__name__)
        if info is None:
            return  # a placeholder module from the factory
        name = module.__name__
        ns = module.__dict__
        ns["__file__"] = info["file"]
        points = self._user_points(name) if self.factory is not None else {}
        if self.factory is not None:
            ns["__getattr__"] = self._fallback(name)
            ns.update(points)  # before the pieces: decorators and defaults may use them
        for unit in info["units"]:
            code = compile(_assemble(unit["segments"]), info["file"], "exec",
                           flags=_FLAGS, dont_inherit=True)
            try:
                exec(code, ns)
            except Exception as err:  # a piece that cannot be defined in the slice
                first = unit["segments"][0][0]
                where = f"{info['file']}:{first}"
                self.failures.append({"module": name, "where": where, "names": unit["names"],
                                      "error": f"{type(err).__name__}: {err}"})
                if self.factory is not None:
                    for bound in unit["names"]:
                        ns[bound] = self.factory.broken(f"{name}.{bound}", err, where)
        ns.update(points)  # and after: an import piece may have rebound the name

    def _fallback(self, module: str) -> Any:
        """Module ``__getattr__``: names the slice did not keep become recording stubs."""
        factory = self.factory
        modules = self.modules

        def __getattr__(attr: str) -> Any:
            if attr.startswith("__") and attr.endswith("__"):
                raise AttributeError(attr)
            if f"{module}.{attr}" in modules:
                raise AttributeError(attr)  # a kept submodule: let the import system load it
            return factory.missing(f"{module}.{attr}")

        return __getattr__

    # -- targets ----------------------------------------------------------------
    def load(self, qualname: str) -> tuple[Any, Any]:
        """``module:Attr.path`` -> (owner class or None, object)."""
        module, _, path = qualname.partition(":")
        obj: Any = _importlib.import_module(module)
        owner = None
        for part in path.split("."):
            owner = obj if isinstance(obj, type) else None
            if owner is not None:
                for klass in owner.__mro__:
                    if part in vars(klass):
                        obj = vars(klass)[part]
                        break
                else:
                    obj = getattr(owner, part)
            else:
                obj = getattr(obj, part)
        return owner, obj

    def remove(self) -> None:
        if self in _sys.meta_path:
            _sys.meta_path.remove(self)
        for name in list(_sys.modules):
            if self.owns(name):
                del _sys.modules[name]


def install(factory: Any = None) -> SliceFinder:
    """Put this slice's finder first on ``sys.meta_path`` and return it."""
    finder = SliceFinder(SLICE, MODULES, factory)
    _sys.meta_path.insert(0, finder)
    return finder


def _main() -> None:
    """``python slice.py``: load every target (with recording stubs when recon is installed)."""
    factory = None
    try:
        from recon.slicing.stubs import install_default  # type: ignore[import-not-found]

        factory = install_default(SLICE, MODULES)
    except ImportError:
        print("recon is not installed: outside imports are real (or fail)", file=_sys.stderr)
    finder = install(factory)
    for target in SLICE["targets"]:
        owner, obj = finder.load(target["qualname"])
        print(f"{target['qualname']}: {obj!r}" + (f" (on {owner.__name__})" if owner else ""))
    for failure in finder.failures:
        print(f"not defined: {failure['where']} {failure['names']}: {failure['error']}",
              file=_sys.stderr)


if __name__ == "__main__":
    _main()
