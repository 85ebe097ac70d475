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
  so the one squash of :mod:`recon.acquire.layers` applies.
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

import errno
import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from ...errors import ReconError
from .base import Layer
from .entry import DIR, FILE, OTHER, SYMLINK, Entry

OPAQUE = ".wh..wh..opq"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: errors that mean "this layer has no such path" (anything else is an error, not an absence)
_ABSENT = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP)
#: site-folder children whose contents are read: distribution metadata (the rest of a
#: site folder is only listed; the packages asked for are added by name)
METADATA_SUFFIXES = (".dist-info", ".egg-info")
MAX_LINK_HOPS = 40
CAP_SYS_ADMIN = 21


class InPlaceRefused(ReconError):
    """A layer folder uses an overlayfs feature recon does not apply in place (redirects,
    metacopy, attribute whiteouts) or a name the engine never writes: the image is read
    through the engine instead, which applies them as the kernel does."""


@dataclass
class StoredLayers:
    """Where an image's layers lie in the engine's storage, bottom layer first."""

    driver: str
    folders: list[str]
    diff_ids: list[str]  # one per folder: the layer that folder stands for
    merged: bool  # vfs: one folder is the whole filesystem, not one layer's changes
    sizes: list[int] = field(default_factory=list)  # bytes of each layer, from the layer database
    #: the attribute namespace overlayfs reads for this engine: ``trusted`` (a root engine),
    #: ``user`` (a rootless one, mounted with ``userxattr``); the other one the kernel ignores;
    #: empty for vfs, which is not overlayfs
    xattr_ns: str = "trusted"


def chain_ids(diff_ids: list[str]) -> list[str]:
    """The engine's layer-database keys: ChainID(n) = sha256(ChainID(n-1) + " " + DiffID(n))."""
    out: list[str] = []
    for diff in diff_ids:
        if not out:
            out.append(diff)
        else:
            out.append("sha256:" + hashlib.sha256(f"{out[-1]} {diff}".encode()).hexdigest())
    return out


def _has_cap_sys_admin() -> bool:
    """Whether this process may read ``trusted.*`` attributes (CAP_SYS_ADMIN in the initial
    user namespace): without it the kernel answers "no such attribute", and an opaque
    folder would read as an ordinary one."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            caps = next((line.split()[1] for line in fh if line.startswith("CapEff:")), "0")
        with open("/proc/self/uid_map", encoding="ascii") as fh:
            initial = fh.read().split() == ["0", "0", "4294967295"]
    except OSError:
        return False
    return initial and bool(int(caps, 16) >> CAP_SYS_ADMIN & 1)


def find_stored(attrs: dict[str, Any], root_dir: str | None,
                rootless: bool = False) -> tuple[StoredLayers | None, str]:
    """The image's layer folders from its inspect data and the engine's root folder, or
    ``None`` and, in words, why they cannot be read here. ``rootless``: the engine says it
    runs rootless (``docker info``'s security options), so overlayfs reads ``user.*``."""
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
        stored = StoredLayers(name, folders, diff_ids, merged=False,
                              xattr_ns="user" if rootless else "trusted")
        if not rootless and not _has_cap_sys_admin():
            return None, ("reading overlayfs's trusted.* attributes (opaque folders) needs "
                          "CAP_SYS_ADMIN, which this process does not have")
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
                              merged=True, xattr_ns="")  # vfs applies no overlay attributes
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


def clean_path(path: str) -> str:
    """``path`` relative to the image root: ``.`` dropped, ``..`` taken back but never above
    the root (as the kernel resolves it inside a container). Paths come from the image's
    config, ``.pth`` files and link targets, so nothing may climb out of a layer folder."""
    out: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if out:
                out.pop()
            continue
        out.append(part)
    return "/".join(out)


def _open_dir(root_fd: int, parts: list[str]) -> int:
    """A descriptor of ``parts`` under ``root_fd``, opened one component at a time with
    ``O_NOFOLLOW`` (so a symlink anywhere on the way is an error, never followed); a
    component that could climb (``..``) or is empty is refused outright."""
    if any(p in ("", ".", "..") or "/" in p for p in parts):
        raise ReconError(f"unsafe path {'/'.join(parts)!r} for a layer folder")
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


def _storage_error(err: OSError, where: str) -> ReconError:
    return ReconError(f"cannot read the engine's storage ({err.strerror})", where=where)


def _lstat(root_fd: int, parts: list[str]) -> os.stat_result | None:
    """``lstat`` of ``parts`` in a layer folder; None where the layer does not have it (a
    refused permission is an error: it must not read as "not there")."""
    if not parts:
        return None
    try:
        fd = _open_dir(root_fd, parts[:-1])
    except OSError as err:
        if err.errno in _ABSENT:
            return None
        raise _storage_error(err, "/".join(parts)) from err
    try:
        if parts[-1] in (".", ".."):
            raise ReconError(f"unsafe path {'/'.join(parts)!r} for a layer folder")
        return os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
    except OSError as err:
        if err.errno in _ABSENT:
            return None
        raise _storage_error(err, "/".join(parts)) from err
    finally:
        os.close(fd)


def _is_whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def overlay_attrs(fd: int, ns: str, where: str) -> bool:
    """Whether the open folder or file ``fd`` is opaque (``<ns>.overlay.opaque`` = ``y``).

    Any other overlayfs attribute of the namespace the kernel reads (a redirect, metacopy,
    an attribute whiteout or an opaque value other than ``y``) changes what the kernel
    shows in ways recon does not apply, and the image can carry them (the engine copies a
    layer's ``SCHILY.xattr`` records): :class:`InPlaceRefused`. The other namespace's
    attributes are ignored, as the kernel ignores them; with no namespace (vfs, which
    is not overlayfs) all of them are.
    """
    if not ns:
        return False
    try:
        names = os.listxattr(fd)
    except OSError as err:
        if err.errno in (errno.ENOTSUP, errno.ENODATA):
            return False
        raise _storage_error(err, where) from err
    opaque = False
    for name in names:
        if not name.startswith(f"{ns}.overlay."):
            continue
        value = os.getxattr(fd, name)
        if name == f"{ns}.overlay.opaque" and value == b"y":
            opaque = True
        else:
            raise InPlaceRefused(f"overlayfs attribute {name}={value[:40]!r} in the engine's "
                                 "storage, which recon does not apply in place", where=where)
    return opaque


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
                 media_type: str, xattr_ns: str = "trusted") -> None:
        super().__init__(index, diff_id, diff_id=diff_id, media_type=media_type)
        self.folder = folder
        self.selection = selection
        self.xattr_ns = xattr_ns

    def entries(self) -> Iterator[Entry]:
        yield from self._read(self.selection)

    def entries_under(self, roots: list[str]) -> Iterator[Entry]:
        yield from self._read(Selection(trees=list(roots)))

    def _read(self, sel: Selection) -> Iterator[Entry]:
        try:
            root = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as err:
            raise _storage_error(err, self.folder) from err
        try:
            walk = _Walk(self, root)
            for path in sel.points:
                yield from walk.point(path)
            for path in sel.sites:
                yield from walk.tree(path, lambda rel: "/" in rel or rel in sel.packages
                                     or rel.endswith(METADATA_SUFFIXES))
            for path in sel.trees:
                yield from walk.tree(path, lambda rel: True)
            if os.fstat(root).st_nlink == 0:  # the engine removed the image meanwhile
                raise ReconError("the image was removed from the engine while recon read it",
                                 where=self.folder)
        finally:
            os.close(root)


class _Walk:
    """The entries of one layer folder, by path, each ancestor folder reported once."""

    def __init__(self, layer: StoredLayer, root: int) -> None:
        self.layer = layer
        self.root = root
        self.ns = layer.xattr_ns
        self.seen: set[str] = set()

    def _where(self, parts: list[str]) -> str:
        return f"{self.layer.folder}/{'/'.join(parts)}"

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
        if parts[-1].startswith(".wh."):  # the engine never writes one: it would read as a marker
            raise InPlaceRefused("a name starting with .wh. in the engine's storage",
                                 where=self._where(parts))
        if _is_whiteout(st):
            parent, _, base = name.rpartition("/")
            yield Entry(f"{parent}/.wh.{base}" if parent else f".wh.{base}", OTHER)
        elif stat.S_ISDIR(st.st_mode):
            yield Entry(name, DIR)
            fd = self._open(lambda: _open_dir(self.root, parts), parts)
            try:
                if overlay_attrs(fd, self.ns, self._where(parts)):
                    yield Entry(f"{name}/{OPAQUE}", OTHER)
            finally:
                os.close(fd)
        elif stat.S_ISLNK(st.st_mode):
            yield Entry(name, SYMLINK, 0, self._open(lambda: _readlink_at(self.root, parts), parts))
        elif stat.S_ISREG(st.st_mode):
            yield Entry(name, FILE, st.st_size, None, st.st_mode & 0o777,
                        lambda: self._open_file(parts))
        else:
            yield Entry(name, OTHER)

    def _open(self, how: Callable[[], Any], parts: list[str]) -> Any:
        try:
            return how()
        except OSError as err:
            raise _storage_error(err, self._where(parts)) from err

    def _open_file(self, parts: list[str]) -> IO[bytes]:
        """A regular file of this layer, opened without following anything, refused where
        overlayfs would show other bytes than its own (a metacopy or redirect attribute)."""
        where = self._where(parts)

        def opened() -> int:
            fd = _open_dir(self.root, parts[:-1])
            try:
                return os.open(parts[-1], _FILE_FLAGS, dir_fd=fd)
            finally:
                os.close(fd)

        file_fd = self._open(opened, parts)
        try:
            st = os.fstat(file_fd)
            if not stat.S_ISREG(st.st_mode):
                raise ReconError("not a regular file in the engine's storage", where=where)
            overlay_attrs(file_fd, self.ns, where)
            os.set_blocking(file_fd, True)
        except BaseException:
            os.close(file_fd)
            raise
        self.layer.bytes_read += st.st_size
        return os.fdopen(file_fd, "rb")

    def point(self, path: str) -> Iterator[Entry]:
        parts = [p for p in clean_path(path).split("/") if p]
        if not parts:
            return
        yield from self._ancestors(parts)
        st = self._stat(parts)
        if st is not None:
            yield from self._entry(parts, st)

    def tree(self, path: str, descend: Callable[[str], bool]) -> Iterator[Entry]:
        """``path`` and what lies under it, descending into a child of ``path`` (named
        relative to it) only where ``descend(rel)`` says so."""
        parts = [p for p in clean_path(path).split("/") if p]
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
            for child, cst in self._list(folder):
                child_parts = [*folder, child]
                yield from self._entry(child_parts, cst)
                rel = "/".join(child_parts[len(parts):])
                if stat.S_ISDIR(cst.st_mode) and descend(rel):
                    stack.append(child_parts)

    def _list(self, folder: list[str]) -> list[tuple[str, os.stat_result]]:
        """A folder's children with their ``lstat``, sorted by name."""
        def listed() -> list[tuple[str, os.stat_result]]:
            fd = _open_dir(self.root, folder)
            try:
                with os.scandir(fd) as it:
                    return sorted((e.name, e.stat(follow_symlinks=False)) for e in it)
            finally:
                os.close(fd)

        return self._open(listed, folder)  # type: ignore[no-any-return]


def _readlink_at(root: int, parts: list[str]) -> str:
    fd = _open_dir(root, parts[:-1])
    try:
        return os.readlink(parts[-1], dir_fd=fd)
    finally:
        os.close(fd)


class _Resolver:
    """Paths of the image resolved through its own symlinks, across the layer folders.

    What exists where is asked of the topmost layer folder that has the path (enough to
    decide what to *read*: the squash still decides what is visible). A link on the way
    (``/opt/venv -> venvs/py312``) is kept as a point, so the squash records it for the
    locator, and the path is followed to the folder it names, as the engine's own
    lookups (and a process in the container) would.
    """

    def __init__(self, roots: list[int]) -> None:
        self.roots = list(reversed(roots))  # top first
        self.links: set[str] = set()

    def top(self, parts: list[str]) -> tuple[int, os.stat_result] | None:
        for fd in self.roots:
            st = _lstat(fd, parts)
            if st is not None:
                return None if _is_whiteout(st) else (fd, st)
        return None

    def resolve(self, path: str, follow_last: bool = False) -> tuple[str, os.stat_result] | None:
        """``path`` with every symlink on the way replaced (the last one only when asked),
        and its ``lstat``; None where it does not exist or the links go round."""
        parts = clean_path(path).split("/")
        i = hops = 0
        while parts and parts[0] and i < len(parts):
            found = self.top(parts[:i + 1])
            if found is None:
                return None
            fd, st = found
            if stat.S_ISLNK(st.st_mode) and (i < len(parts) - 1 or follow_last):
                hops += 1
                if hops > MAX_LINK_HOPS:
                    return None
                self.links.add("/".join(parts[:i + 1]))
                target = _readlink_at(fd, parts[:i + 1])
                base = "" if target.startswith("/") else "/".join(parts[:i])
                parts = clean_path(f"{base}/{target}/{'/'.join(parts[i + 1:])}").split("/")
                i = 0
                continue
            i += 1
        if not parts or not parts[0]:
            return None
        found = self.top(parts)
        return ("/".join(parts), found[1]) if found else None


def selection(stored: StoredLayers, sites: list[str], packages: list[str],
              points: list[str]) -> Selection:
    """Keep the candidate site folders and single paths that the image has, resolved
    through its own symlinks (a missing one costs a failed ``open`` per layer): the links
    met on the way (``python3`` -> ``python3.12``, ``/opt/venv`` -> ...) become points too,
    so the squash sees them as the image has them. Each chain of links is followed at
    most :data:`MAX_LINK_HOPS` times."""
    try:
        roots = [os.open(f, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC) for f in stored.folders]
    except OSError as err:
        raise _storage_error(err, stored.folders[0]) from err
    try:
        resolver = _Resolver(roots)
        kept_sites: list[str] = []
        kept_points: list[str] = []
        for site in sites:
            # a site folder that is itself a link stays a link (the locator follows it, and
            # the squash's second pass reads where it points); links above it are followed
            found = resolver.resolve(site)
            if found is None:
                continue
            if stat.S_ISDIR(found[1].st_mode) and found[0] not in kept_sites:
                kept_sites.append(found[0])
            elif stat.S_ISLNK(found[1].st_mode):
                kept_points.append(found[0])
        for point in points:
            found = resolver.resolve(point, follow_last=True)
            if found is not None and found[0] not in kept_points:
                kept_points.append(found[0])
    finally:
        for fd in roots:
            os.close(fd)
    links = sorted(resolver.links - set(kept_points))
    return Selection(sites=kept_sites, packages=set(packages), points=[*links, *kept_points])


def stored_layer_list(stored: StoredLayers, sel: Selection) -> list[Layer]:
    """The :class:`StoredLayer` objects of ``stored``, bottom first, as the squash takes them."""
    media = f"docker-engine-storage ({stored.driver}{', merged' if stored.merged else ''})"
    layers: list[Layer] = []
    for i, (diff, folder) in enumerate(zip(stored.diff_ids, stored.folders, strict=True)):
        layer = StoredLayer(i, diff, folder, sel, media, stored.xattr_ns)
        layer.size = stored.sizes[i] if i < len(stored.sizes) else 0
        layers.append(layer)
    return layers
