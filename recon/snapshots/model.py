"""The snapshot: a folder of engine source plus a manifest that says where each file came from.

Layout::

    snapshots/<name>/
        manifest.json     provenance (source, image config, layers, per-file sha256/layer)
        src/<package>/... the files, byte-exact, symlinks kept as links

Everything downstream (index, chain, slice, run, diff, probes) reads a
:class:`Snapshot`; nothing downstream cares which source scheme produced it.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from ..errors import ReconError
from ..paths import cache_dir, snapshots_dir
from .manifest import FORMAT_VERSION, MANIFEST, FileRecord, Manifest, ManifestError

__all__ = ["FORMAT_VERSION", "MANIFEST", "FileRecord", "Manifest", "Snapshot", "list_snapshots",
           "module_name", "read_inside"]


def module_name(path: str) -> tuple[str, bool]:
    """``vllm/config/__init__.py`` -> ``("vllm.config", True)``; other ``.py`` -> (name, False)."""
    stem = path[:-3] if path.endswith(".py") else path
    if stem.endswith("/__init__") or stem == "__init__":
        return stem[: -len("/__init__")].replace("/", "."), True
    return stem.replace("/", "."), False

@dataclass
class Snapshot:
    """An opened snapshot folder (read-only view)."""

    root: Path
    manifest: Manifest = field(repr=False)

    @classmethod
    def open(cls, ref: str | Path) -> Snapshot:
        """Open by path, or by name: the default snapshots folder, then the cache that
        ``run``/``diff``/``recipe`` fill, so a name one verb printed opens in every other."""
        candidates = [Path(ref)]
        if not Path(ref).is_absolute():
            candidates.append(snapshots_dir() / str(ref))
        if "/" not in str(ref) and not str(ref).startswith("."):
            candidates.append(cache_dir() / "snapshots" / str(ref))
        for cand in candidates:
            man = cand / MANIFEST
            if man.is_file():
                try:
                    data = json.loads(man.read_text(encoding="utf-8"))
                except (OSError, ValueError) as err:
                    raise ReconError(f"unreadable manifest: {err}", where=str(man)) from err
                try:
                    manifest = Manifest.from_json(data)
                except ManifestError as err:
                    raise ReconError(f"not a recon manifest: {err}", where=str(man)) from err
                return cls(root=cand.resolve(), manifest=manifest)
        raise ReconError(f"no snapshot named {str(ref)!r} (looked for {MANIFEST} in "
                         + ", ".join(str(c) for c in candidates) + ")")

    # -- identity -------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.manifest.name or self.root.name

    @property
    def src(self) -> Path:
        return self.root / "src"

    @property
    def package(self) -> str:
        return self.manifest.package.name

    @property
    def version(self) -> str | None:
        return self.manifest.package.version

    @property
    def label(self) -> str:
        """Short human label used in reports: ``vllm 0.33.0 (name)``."""
        ver = self.version or "?"
        return f"{self.package} {ver} ({self.name})"

    # -- files ----------------------------------------------------------------
    @property
    def files(self) -> dict[str, FileRecord]:
        """Every file's record (the manifest's, built once when the snapshot was opened)."""
        return self.manifest.files

    def python_files(self) -> Iterator[FileRecord]:
        """Regular ``.py`` files in path order (what the index parses)."""
        for path, rec in sorted(self.manifest.files.items()):
            if path.endswith(".py") and rec.kind == "file":
                yield rec

    def path(self, rel: str) -> Path:
        return self.src / rel

    def read_bytes(self, rel: str) -> bytes:
        """The bytes of a file of the snapshot, never through a link (:func:`read_inside`)."""
        if rel not in self.manifest.files:
            raise ReconError(f"{rel} is not in snapshot {self.name}")
        return read_inside(self.src, rel)

    def read_text(self, rel: str) -> str:
        return self.read_bytes(rel).decode("utf-8", errors="surrogateescape")

    @cached_property
    def modules(self) -> dict[str, tuple[str, bool]]:
        """Module name -> (file, is a package) for every regular ``.py`` file.

        The one map from module names to files: the index, the slicer, bisect, the
        probes and the hot-fix all read it. Where ``pkg/x.py`` and ``pkg/x/__init__.py``
        both exist, the package wins, as in Python's import system.
        """
        table: dict[str, tuple[str, bool]] = {}
        for rec in self.python_files():
            mod, is_pkg = module_name(rec.path)
            if is_pkg or mod not in table:
                table[mod] = (rec.path, is_pkg)
        return table

    def module_path(self, module: str) -> str | None:
        """``vllm.config.compilation`` -> ``vllm/config/compilation.py`` (or a package's
        ``__init__.py``), from :attr:`modules`."""
        hit = self.modules.get(module)
        return hit[0] if hit else None

    def layer_of(self, rel: str) -> dict[str, Any] | None:
        return self.manifest.layer_of(rel)


def list_snapshots(base: Path | None = None) -> list[Snapshot]:
    """Every complete snapshot under ``base`` (partial folders have no manifest)."""
    base = Path(base) if base else snapshots_dir()
    if not base.is_dir():
        return []
    out = []
    for child in sorted(base.iterdir()):
        if child.name.startswith("."):
            continue
        if (child / MANIFEST).is_file():
            try:
                out.append(Snapshot.open(child))
            except ReconError:
                continue
    return out


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def read_inside(root: str | Path, rel: str) -> bytes:
    """Read the regular file ``rel`` under ``root``, opening each component with ``O_NOFOLLOW``.

    A snapshot folder can be edited after recon wrote it (or come from someone else): a file or
    folder swapped for a link to a host path must make every reader fail, never read the host.
    """
    parts = [p for p in rel.split("/") if p]
    if not parts or any(p in (".", "..") for p in parts):
        raise ReconError(f"{rel!r} is not a path inside the snapshot")
    fd = _open_at(os.fspath(root), _DIR_FLAGS, None, rel)
    try:
        for part in parts[:-1]:
            nxt = _open_at(part, _DIR_FLAGS, fd, rel)
            os.close(fd)
            fd = nxt
        leaf = _open_at(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, fd, rel)
    finally:
        os.close(fd)
    with os.fdopen(leaf, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise ReconError(f"{rel} in {root} is not a regular file (the snapshot folder was "
                             "changed after recon wrote it; `recon snapshot verify` says how)")
        return fh.read()


def _open_at(name: str, flags: int, dir_fd: int | None, rel: str) -> int:
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR):
            raise ReconError(f"{rel}: {name!r} is a link or not a folder inside the snapshot (the "
                             "snapshot folder was changed after recon wrote it; `recon snapshot "
                             "verify` says how)") from err
        raise ReconError(f"cannot read {rel} of the snapshot: {err.strerror}") from err
