"""Module lookup inside a snapshot: names -> files -> parsed :class:`ModuleModel`.

Parsed modules are cached per process, keyed by file path, size and mtime, so a
recipe that slices a dozen functions of one release parses each file once, and
an edited copy of a snapshot is never served stale.
"""

from __future__ import annotations

import difflib
import os

from ..errors import ReconError
from ..index.visitor import MAX_MODULE_BYTES
from ..snapshots.model import Snapshot, read_inside
from .units import ModuleModel, parse_module

_CACHE: dict[tuple[str, int, int], ModuleModel] = {}
_CACHE_MAX = 512


class SliceFailed(ReconError):
    """recon could not slice the release's code: a module the slice needs is one recon cannot
    parse (syntax of a newer Python, a damaged file) or is over the cap on what the slicer
    parses. Neither bad input (exit 2) nor the code under test failing (exit 4): recon's own
    limit, exit 8."""

    exit_code = 8


class ModuleSet:
    """The Python modules of one snapshot, parsed on demand."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.package = snapshot.package
        self._names = snapshot.modules  # the one module table
        self.parse_errors: dict[str, str] = {}

    @property
    def names(self) -> dict[str, tuple[str, bool]]:
        """module name -> (relative path, is_package)."""
        return self._names

    def exists(self, module: str) -> bool:
        return module in self._names

    def in_package(self, module: str) -> bool:
        return module == self.package or module.startswith(self.package + ".")

    def get(self, module: str) -> ModuleModel | None:
        """The parsed module, or None when absent or unparsable (recorded in parse_errors)."""
        entry = self._names.get(module)
        if entry is None:
            return None
        rel, is_pkg = entry
        path = self.snapshot.src / rel
        try:
            st = os.stat(path, follow_symlinks=False)  # a link is refused by read_inside below
        except OSError as err:
            self.parse_errors[module] = str(err)
            return None
        if st.st_size > MAX_MODULE_BYTES:
            raise SliceFailed(f"{rel} is {st.st_size / (1 << 20):.1f} MiB, over the "
                              f"{MAX_MODULE_BYTES >> 20} MiB cap on a module the slicer parses; "
                              "refusing to parse it")
        key = (str(path), st.st_size, st.st_mtime_ns)
        model = _CACHE.get(key)
        if model is None:
            try:
                model = parse_module(module, rel, read_inside(self.snapshot.src, rel),
                                     is_package=is_pkg)
            except (SyntaxError, ValueError, RecursionError, OSError) as err:
                self.parse_errors[module] = f"{type(err).__name__}: {err}"
                return None
            if len(_CACHE) >= _CACHE_MAX:
                _CACHE.pop(next(iter(_CACHE)))
            _CACHE[key] = model
        return model

    def require(self, module: str) -> ModuleModel:
        model = self.get(module)
        if model is not None:
            return model
        if module in self.parse_errors:
            raise SliceFailed(f"cannot parse {module} ({self.names[module][0]}) to slice it: "
                              f"{self.parse_errors[module]}")
        close = difflib.get_close_matches(module, list(self._names), n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ReconError(f"no module {module!r} in snapshot {self.snapshot.name}{hint}")

    def resolve_relative(self, current: ModuleModel, module: str | None, level: int) -> str:
        """The absolute module name of ``from <level dots><module> import ...`` in ``current``."""
        if level == 0:
            return module or ""
        base = current.package_name.split(".")
        if level > 1:
            base = base[: len(base) - (level - 1)]
        parts = [p for p in (".".join(base), module) if p]
        return ".".join(parts)
