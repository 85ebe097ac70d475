"""The releases a hotfix reads: the image's, the one with the fix, and the patched one in memory.

Each :class:`Side` is a snapshot with its whole index (from the per-file
cache: about 1.5 s for a vLLM release) and a :class:`~recon.index.resolve.Resolver`
over it, so names are resolved the way every other verb resolves them
(imports, re-exports, MRO, annotations). :func:`overlay` makes the patched
side before anything is written: the image's index with the one patched
module re-indexed from its new bytes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass, field
from functools import cached_property

from ..errors import ReconError
from ..index import load_index
from ..index.build import assemble
from ..index.models import ClassInfo, FunctionInfo, IndexStats
from ..index.resolve import Resolver
from ..index.snapshot_index import SnapshotIndex
from ..index.visitor import decode_source, index_source, split_lines
from ..snapshots.model import Snapshot
from .model import HotfixRefused

_COMPILED = re.compile(r"\.(?:[A-Za-z0-9_-]+\.)?(?:so|pyd|pyc)$")


@dataclass
class Side:
    """A snapshot, its index and a resolver over it."""

    snapshot: Snapshot
    index: SnapshotIndex
    label: str
    resolver: Resolver = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.resolver = Resolver(self.index)

    @classmethod
    def load(cls, snapshot: Snapshot, label: str | None = None) -> Side:
        """The whole index of ``snapshot`` (cached per file sha256) and a resolver over it."""
        return cls(snapshot, load_index(snapshot), label or _label(snapshot))

    @cached_property
    def compiled(self) -> dict[str, str]:
        """Dotted module name -> file, for the compiled modules the manifest lists."""
        out: dict[str, str] = {}
        listed = [*self.snapshot.manifest.files, *self.snapshot.manifest.skipped]
        for path in listed:
            if _COMPILED.search(path):
                folder, _, base = path.rpartition("/")
                name = base.split(".", 1)[0]
                out[".".join([*folder.split("/"), name]) if folder else name] = path
        return out

    def definition(self, qualname: str) -> FunctionInfo | ClassInfo | None:
        """The function or class ``qualname`` (exact), or None."""
        return self.index.functions.get(qualname) or self.index.classes.get(qualname)

    def compiled_prefix(self, dotted: str) -> str | None:
        """The compiled module ``dotted`` (or a module above it) names, if any."""
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            if ".".join(parts[:cut]) in self.compiled:
                return ".".join(parts[:cut])
        return None


def _label(snap: Snapshot) -> str:
    return f"{snap.package} {snap.version}" if snap.version else snap.name


def resolve_piece(name: str, sides: list[Side]) -> str:
    """``module:Local`` for a function, method or class, in the first side that has it.

    Accepts the full form, the dotted form (``pkg.mod.Class.method``) or a
    unique suffix (``Class.method``); the error names close matches.
    """
    if ":" in name:
        return name
    parts = name.split(".")
    for side in sides:
        for cut in range(len(parts) - 1, 0, -1):
            module = ".".join(parts[:cut])
            if module in side.index.modules:
                return f"{module}:{'.'.join(parts[cut:])}"
    errors = []
    for side in sides:
        try:
            return side.index.lookup_any(name).qualname
        except ReconError as err:
            errors.append(str(err))
    raise ReconError(errors[0] if errors else f"no function or class {name!r}")


def module_file(side: Side, module: str, qualname: str) -> str:
    """The ``.py`` file of ``module`` in ``side``; refuses compiled or missing modules."""
    path = side.snapshot.module_path(module)
    compiled = side.compiled.get(module)
    if compiled is not None:
        raise HotfixRefused("compiled", f"{module} is compiled code in {side.label} ({compiled}): "
                                        "a Python-source hotfix cannot replace it")
    if path is None:
        raise ReconError(f"{qualname}: {side.label} has no module {module}")
    rec = side.snapshot.manifest.files.get(path)
    if rec is not None and rec.kind != "file":
        raise HotfixRefused("scope", f"{path} is a {rec.kind} in {side.label}, not a "
                                     "regular file: mounting over it is not a one-file fix")
    return path


def overlay(side: Side, path: str, data: bytes, label: str) -> Side:
    """``side`` with the file ``path`` re-indexed from ``data`` (nothing is written)."""
    old = side.index
    module = old.by_path[path]
    record = index_source(data)
    if record.get("error"):
        raise ReconError(f"the patched {path} does not parse: {record['error']}")
    small = assemble(side.snapshot, [(path, hashlib.sha256(data).hexdigest(), record)],
                     IndexStats(files=1))
    new_module = small.modules[module]
    new_module._known = old.modules[module]._known  # resolve its imports against the whole release
    keep = {q: f for q, f in old.functions.items() if f.module != module}
    keep_classes = {q: c for q, c in old.classes.items() if c.module != module}
    lines = dict(old._lines)
    lines[path] = split_lines(decode_source(data))
    index = dataclasses.replace(
        old, modules={**old.modules, module: new_module}, functions={**keep, **small.functions},
        classes={**keep_classes, **small.classes}, _lines=lines, _spans={}, _by_short=None)
    return Side(side.snapshot, index, label)
