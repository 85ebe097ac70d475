"""``docker:`` read in place: the image's layers in the engine's own storage folders.

When the Docker engine keeps its images on this machine, in folders recon can
read, the image is read there instead of through the engine's archive API:
no container is created, nothing is streamed, listing a folder costs a
``getdents`` instead of the engine sending the whole folder, and only the
package's files and the small metadata files are ever opened. The cost then
follows the package, not the image: the installed-distributions list of a
site folder holding 10 GB of CUDA libraries is its ``*.dist-info`` names.

Where the folders are, asked of the engine (never guessed from paths):

* ``overlay2``: the image inspect's ``GraphDriver.Data`` names each layer's
  ``diff`` folder (``UpperDir`` the top one, ``LowerDir`` the rest, top
  first). Each folder is one layer as the engine applied it, so every file
  keeps the layer it came from. overlayfs marks a deleted path with a
  character device 0/0 and a folder that hides what is below with the
  ``trusted.overlay.opaque`` (``user.overlay.opaque`` for a rootless engine)
  attribute ``y``; both are turned into the ``.wh.`` markers of a layer tar,
  so the one squash of :mod:`recon.layers` applies.
* ``vfs``: every layer is a whole copy of the filesystem up to it, in
  ``vfs/dir/<cache-id>``, where the engine's layer database
  (``image/vfs/layerdb/sha256/<chain-id>/cache-id``) names the top one. That
  one folder is read as the engine's merged view (no per-layer provenance).
* Anything else (the containerd image store, a remote engine, folders this
  user cannot read): not read in place; the caller reads through the engine.

The folders are hostile content: nothing in them is followed. Every path is
opened component by component from a descriptor of the layer folder, with
``O_NOFOLLOW`` (a symlink inside a layer is reported as a link, never
resolved on the host), and a file is read only if ``fstat`` says it is a
regular file (a FIFO cannot block the read).
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from ..errors import ReconError
from .base import Layer
from .entry import DIR, FILE, OTHER, SYMLINK, Entry

OPAQUE_XATTRS = ("trusted.overlay.opaque", "user.overlay.opaque")
OPAQUE = ".wh..wh..opq"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: site-folder children whose contents are read: distribution metadata (the rest of a
#: site folder is only listed; the packages asked for are added by name)
METADATA_SUFFIXES = (".dist-info", ".egg-info")


@dataclass
class StoredLayers:
    """Where an image's layers lie in the engine's storage, bottom layer first."""

    driver: str
    folders: list[str]
    diff_ids: list[str]  # one per folder: the layer that folder stands for
    merged: bool  # vfs: one folder is the whole filesystem, not one layer's changes
    sizes: list[int] = field(default_factory=list)  # bytes of each layer, from the layer database


def chain_ids(diff_ids: list[str]) -> list[str]:
    """The engine's layer-database keys: ChainID(n) = sha256(ChainID(n-1) + " " + DiffID(n))."""
    out: list[str] = []
    for diff in diff_ids:
        if not out:
            out.append(diff)
        else:
            out.append("sha256:" + hashlib.sha256(f"{out[-1]} {diff}".encode()).hexdigest())
    return out


def find_stored(attrs: dict[str, Any], root_dir: str | None) -> tuple[StoredLayers | None, str]:
    """The image's layer folders from its inspect data and the engine's root folder, or
    ``None`` and, in words, why they cannot be read here."""
    driver = attrs.get("GraphDriver") or {}
    name = str(driver.get("Name") or "")
    diff_ids = [str(d) for d in ((attrs.get("RootFS") or {}).get("Layers") or [])]
    if not diff_ids:
        return None, "the image has no layers"
    if name == "overlay2":
        data = driver.get("Data") or {}
        upper = str(data.get("UpperDir") or "")
        lower = [p for p in str(data.get("LowerDir") or "").split(":") if p]
        folders = [*reversed(lower), upper] if upper else []
        if len(folders) != len(diff_ids):
            return None, (f"the engine names {len(folders)} overlay2 folders for "
                          f"{len(diff_ids)} layers")
        stored = StoredLayers(name, folders, diff_ids, merged=False)
    elif name == "vfs":
        if not root_dir:
            return None, "the engine does not say where its storage is"
        chain = chain_ids(diff_ids)[-1].split(":", 1)[1]
        try:
            with open(os.path.join(root_dir, "image", "vfs", "layerdb", "sha256", chain, "cache-id"),
                      encoding="ascii") as fh:
                cache_id = fh.read().strip()
        except OSError as err:
            return None, f"the engine's layer database is not readable here ({err.strerror})"
        if not cache_id or "/" in cache_id or cache_id.startswith("."):
            return None, "the engine's layer database names no folder for the top layer"
        stored = StoredLayers(name, [os.path.join(root_dir, "vfs", "dir", cache_id)], diff_ids[-1:],
                              merged=True)
    else:
        return None, f"the engine's storage ({name or 'unknown'}) is not read in place"
    for folder in stored.folders:
        if not os.path.isdir(folder) or not os.access(folder, os.R_OK | os.X_OK):
            return None, f"the engine's storage folder {folder} is not readable here"
    if root_dir:
        chains = chain_ids(diff_ids)[len(diff_ids) - len(stored.folders):]
        stored.sizes = [_layer_size(root_dir, name, c) for c in chains]
    return stored, ""


def _layer_size(root_dir: str, driver: str, chain: str) -> int:
    """A layer's size as the engine's layer database records it (0 where it does not)."""
    path = os.path.join(root_dir, "image", driver, "layerdb", "sha256", chain.split(":", 1)[1], "size")
    try:
        with open(path, encoding="ascii") as fh:
            return int(fh.read(32).strip() or 0)
    except (OSError, ValueError):
        return 0


# --- reading one layer folder -------------------------------------------------


def _open_dir(root_fd: int, parts: list[str]) -> int:
    """A descriptor of ``parts`` under ``root_fd``, opened one component at a time with
    ``O_NOFOLLOW`` (so a symlink anywhere on the way is an error, never followed)."""
    fd = os.dup(root_fd)
    try:
        for part in parts:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _lstat(root_fd: int, parts: list[str]) -> os.stat_result | None:
    """``lstat`` of ``parts`` in a layer folder; None where the layer does not have it."""
    try:
        fd = _open_dir(root_fd, parts[:-1])
    except OSError:
        return None
    try:
        return os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
    except OSError:
        return None
    finally:
        os.close(fd)


def _is_whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def _is_opaque(fd: int) -> bool:
    for attr in OPAQUE_XATTRS:
        try:
            if os.getxattr(fd, attr) == b"y":
                return True
        except OSError:
            continue
    return False


@dataclass
class Selection:
    """What to read of every layer: the rest of the image is never looked at.

    ``sites``: site folders, listed, with the children named in ``packages`` and
    the distribution metadata folders read whole. ``trees``: folders read whole.
    ``points``: single paths (interpreters, ``pyvenv.cfg``).
    """

    sites: list[str] = field(default_factory=list)
    packages: set[str] = field(default_factory=set)
    trees: list[str] = field(default_factory=list)
    points: list[str] = field(default_factory=list)


class StoredLayer(Layer):
    """One layer folder of the engine's storage, read in place (see the module docstring)."""

    def __init__(self, index: int, diff_id: str, folder: str, selection: Selection,
                 media_type: str) -> None:
        super().__init__(index, diff_id, diff_id=diff_id, media_type=media_type)
        self.folder = folder
        self.selection = selection

    def entries(self) -> Iterator[Entry]:
        yield from self._read(self.selection)

    def entries_under(self, roots: list[str]) -> Iterator[Entry]:
        yield from self._read(Selection(trees=list(roots)))

    def _read(self, sel: Selection) -> Iterator[Entry]:
        root = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            walk = _Walk(self, root)
            for path in sel.points:
                yield from walk.point(path)
            for path in sel.sites:
                yield from walk.tree(path, lambda rel: "/" in rel or rel in sel.packages
                                     or rel.endswith(METADATA_SUFFIXES))
            for path in sel.trees:
                yield from walk.tree(path, lambda rel: True)
        finally:
            os.close(root)


class _Walk:
    """The entries of one layer folder, by path, each ancestor folder reported once."""

    def __init__(self, layer: StoredLayer, root: int) -> None:
        self.layer = layer
        self.root = root
        self.seen: set[str] = set()

    def _stat(self, parts: list[str]) -> os.stat_result | None:
        return _lstat(self.root, parts)

    def _ancestors(self, parts: list[str]) -> Iterator[Entry]:
        """The folders above a path as this layer has them; stops (after reporting it)
        at a whiteout or a non-folder, which hides the lower layers' path anyway."""
        for depth in range(1, len(parts)):
            name = "/".join(parts[:depth])
            if name in self.seen:
                continue
            st = self._stat(parts[:depth])
            if st is None:
                return
            yield from self._entry(parts[:depth], st)
            if not stat.S_ISDIR(st.st_mode):
                return

    def _entry(self, parts: list[str], st: os.stat_result) -> Iterator[Entry]:
        """One path as an :class:`Entry` (whiteouts and opaque folders as tar markers)."""
        name = "/".join(parts)
        if name in self.seen:
            return
        self.seen.add(name)
        if _is_whiteout(st):
            parent, _, base = name.rpartition("/")
            yield Entry(f"{parent}/.wh.{base}" if parent else f".wh.{base}", OTHER)
        elif stat.S_ISDIR(st.st_mode):
            yield Entry(name, DIR)
            try:
                fd = _open_dir(self.root, parts)
            except OSError:
                return
            try:
                if _is_opaque(fd):
                    yield Entry(f"{name}/{OPAQUE}", OTHER)
            finally:
                os.close(fd)
        elif stat.S_ISLNK(st.st_mode):
            fd = _open_dir(self.root, parts[:-1])
            try:
                target = os.readlink(parts[-1], dir_fd=fd)
            finally:
                os.close(fd)
            yield Entry(name, SYMLINK, 0, target)
        elif stat.S_ISREG(st.st_mode):
            yield Entry(name, FILE, st.st_size, None, st.st_mode & 0o777,
                        lambda: self._open_file(parts))
        else:
            yield Entry(name, OTHER)

    def _open_file(self, parts: list[str]) -> IO[bytes]:
        """A regular file of this layer, opened without following anything."""
        where = f"{self.layer.folder}/{'/'.join(parts)}"
        try:
            fd = _open_dir(self.root, parts[:-1])
            try:
                file_fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=fd)
            finally:
                os.close(fd)
        except OSError as err:
            raise ReconError(f"cannot open a file of the engine's storage ({err.strerror})",
                             where=where) from err
        if not stat.S_ISREG(os.fstat(file_fd).st_mode):
            os.close(file_fd)
            raise ReconError("not a regular file in the engine's storage", where=where)
        os.set_blocking(file_fd, True)
        fh = os.fdopen(file_fd, "rb")
        self.layer.bytes_read += os.fstat(file_fd).st_size
        return fh

    def point(self, path: str) -> Iterator[Entry]:
        parts = [p for p in path.split("/") if p]
        if not parts:
            return
        yield from self._ancestors(parts)
        st = self._stat(parts)
        if st is not None:
            yield from self._entry(parts, st)

    def tree(self, path: str, descend: Callable[[str], bool]) -> Iterator[Entry]:
        """``path`` and what lies under it, descending into a child of ``path`` (named
        relative to it) only where ``descend(rel)`` says so."""
        parts = [p for p in path.split("/") if p]
        if not parts:
            return
        yield from self._ancestors(parts)
        st = self._stat(parts)
        if st is None:
            return
        yield from self._entry(parts, st)
        if not stat.S_ISDIR(st.st_mode) or _is_whiteout(st):
            return
        stack = [parts]
        while stack:
            folder = stack.pop()
            try:
                fd = _open_dir(self.root, folder)
            except OSError as err:
                raise ReconError(f"cannot read a folder of the engine's storage ({err.strerror})",
                                 where=f"{self.layer.folder}/{'/'.join(folder)}") from err
            try:
                with os.scandir(fd) as it:
                    children = sorted((e.name, e.stat(follow_symlinks=False)) for e in it)
            finally:
                os.close(fd)
            for child, cst in children:
                child_parts = [*folder, child]
                yield from self._entry(child_parts, cst)
                rel = "/".join(child_parts[len(parts):])
                if stat.S_ISDIR(cst.st_mode) and descend(rel):
                    stack.append(child_parts)


def selection(stored: StoredLayers, sites: list[str], packages: list[str],
              points: list[str]) -> Selection:
    """Keep the candidate site folders and single paths that some layer folder has (a
    missing one costs one failed ``open``), and follow the symlinks among the single
    paths (``python3`` -> ``python3.12``) hop by hop, in every layer."""
    roots = [os.open(f, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC) for f in stored.folders]
    try:
        def lstat_any(path: str) -> list[os.stat_result]:
            parts = [p for p in path.split("/") if p]
            return [st for st in (_lstat(fd, parts) for fd in roots) if st is not None]

        kept_sites = [s for s in sites if any(stat.S_ISDIR(st.st_mode) for st in lstat_any(s))]
        kept_points: list[str] = []
        todo = list(points)
        hops = 0
        while todo and hops < 64:
            path = todo.pop(0).strip("/")
            hops += 1
            if not path or path in kept_points:
                continue
            found = lstat_any(path)
            if not found:
                continue
            kept_points.append(path)
            for fd in roots:
                target = _readlink_in(fd, path)
                if target is not None:
                    todo.append(posixpath.normpath(posixpath.join(posixpath.dirname(path), target)))
    finally:
        for fd in roots:
            os.close(fd)
    return Selection(sites=kept_sites, packages=set(packages), points=kept_points)


def _readlink_in(root: int, path: str) -> str | None:
    parts = [p for p in path.split("/") if p]
    try:
        fd = _open_dir(root, parts[:-1])
    except OSError:
        return None
    try:
        return os.readlink(parts[-1], dir_fd=fd)
    except OSError:
        return None
    finally:
        os.close(fd)


def stored_layer_list(stored: StoredLayers, sel: Selection) -> list[Layer]:
    """The :class:`StoredLayer` objects of ``stored``, bottom first, as the squash takes them."""
    media = f"docker-engine-storage ({stored.driver}{', merged' if stored.merged else ''})"
    layers: list[Layer] = []
    for i, (diff, folder) in enumerate(zip(stored.diff_ids, stored.folders, strict=True)):
        layer = StoredLayer(i, diff, folder, sel, media)
        layer.size = stored.sizes[i] if i < len(stored.sizes) else 0
        layers.append(layer)
    return layers
