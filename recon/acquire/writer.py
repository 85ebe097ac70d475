"""The one place where recon writes files to disk.

Everything recon produces (snapshot trees, manifests, probe bundles, reports)
goes through here, so the rules live in one spot:

* a tree is built in a hidden staging folder (``.<label>.partial-<pid>-<hex>``)
  next to its final place and renamed into place only when complete
  (:func:`staging`, :func:`commit`), so a failure never leaves a folder that
  looks finished. The staging folder is locked (``flock``) while its run
  lives; one left by a killed run (its pid gone, its lock free) is removed by
  the next run in the same output folder;
* the output folder is opened once, and a symlink there is refused: every
  later step is relative to that descriptor, so nothing can redirect it;
* a path inside a tree is opened component by component with ``O_NOFOLLOW``
  relative to the tree's own directory descriptor (:class:`TreeWriter`), so no
  entry name, ``..``, absolute path or symlink planted earlier can make a write,
  a rename or a removal land outside the tree. Removal (:func:`remove_tree_at`)
  never follows a link either. ``tarfile.extractall`` and ``shutil.rmtree`` are
  never used;
* names are held to the kernel's own limits (``PATH_MAX``, ``NAME_MAX``, and a
  depth limit), so a hostile name is one error line, not a crash or a memory
  blow-up;
* a full disk or a read-only output folder is one line naming the folder;
* ``replace=True`` (``--force``) replaces only a folder that recon made for the
  same purpose (a snapshot, a probe bundle), never anything else.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import resource
import secrets
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ..errors import ReconError, UnsafeArchiveError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_FILE_MODE = 0o644
#: The kernel's limits (linux/limits.h): a path of PATH_MAX bytes or more, or a
#: component over NAME_MAX bytes, cannot exist on disk. MAX_DEPTH is recon's
#: own: no real package nests folders 512 deep, and it bounds per-entry work.
PATH_MAX = 4096
NAME_MAX = 255
MAX_DEPTH = 512
_RM_DEPTH = 32  # removal keeps at most this many folders open, whatever the depth
_SMALL = 256 << 20  # most bytes read from a marker file (manifest.json) to check it
_PARTIAL = re.compile(r"^\.(?P<label>.*)\.partial-(?P<pid>[0-9]{1,10})-[0-9a-f]{8}$")


def _fd_cap() -> int:
    """How many folder descriptors a writer may keep open: a quarter of the soft limit, at most 1024."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return 1024
    return max(64, min(1024, soft // 4))


_FD_CAP = _fd_cap()


def short(name: str, width: int = 160) -> str:
    """``name`` cut in the middle for a one-line message (a hostile name can be a megabyte)."""
    if len(name) <= width:
        return name
    return f"{name[:width // 2]}...({len(name)} characters)...{name[-width // 4:]}"


def _limits(name: str, parts: list[str], where: str | None) -> None:
    """Refuse what the kernel could not hold: long paths, long components, deep nesting."""
    size = len(name.encode("utf-8", "surrogateescape"))
    if size >= PATH_MAX:
        raise UnsafeArchiveError(f"entry name is {size} bytes, over the path limit of {PATH_MAX - 1} "
                                 f"(PATH_MAX): {short(name)!r}", where=where)
    if len(parts) > MAX_DEPTH:
        raise UnsafeArchiveError(f"entry name is {len(parts)} folders deep, over the depth limit of "
                                 f"{MAX_DEPTH}: {short(name)!r}", where=where)
    for part in parts:
        if len(part) > NAME_MAX // 4 and len(part.encode("utf-8", "surrogateescape")) > NAME_MAX:
            raise UnsafeArchiveError(f"entry name has a component of {len(part.encode('utf-8', 'surrogateescape'))} "
                                     f"bytes, over the limit of {NAME_MAX} (NAME_MAX): {short(name)!r}",
                                     where=where)


def clean_relpath(name: str, *, where: str = "") -> str:
    """Normalise an archive member name to a safe relative POSIX path.

    Leading ``./`` is accepted (tar writes it); ``..`` components, absolute
    paths and NUL bytes are refused outright rather than "fixed", because an
    archive that contains them is hostile or broken and the user must know.
    Names the kernel could not create (see :data:`PATH_MAX`) are refused too,
    before any work proportional to their length and depth is done.
    """
    w = where or None
    if "\x00" in name:
        raise UnsafeArchiveError(f"entry name contains a NUL byte: {short(name)!r}", where=w)
    if name.startswith("/"):
        raise UnsafeArchiveError(f"absolute path in archive: {short(name)!r}", where=w)
    parts = [p for p in name.split("/") if p and p != "."]
    if ".." in parts:
        raise UnsafeArchiveError(f"path traversal ('..') in archive: {short(name)!r}", where=w)
    if len(name) > NAME_MAX // 4:  # shorter names cannot break any limit
        _limits(name, parts, w)
    return "/".join(parts)


def check_link_target(name: str, target: str, *, where: str = "") -> None:
    """A symlink target the kernel can create: not empty, no NUL, under PATH_MAX bytes."""
    w = where or None
    if not target:
        raise UnsafeArchiveError(f"symlink {short(name)!r} has an empty target (no filesystem can "
                                 "hold one)", where=w)
    if "\x00" in target:
        raise UnsafeArchiveError(f"symlink {short(name)!r} has a NUL byte in its target", where=w)
    if len(target) >= PATH_MAX // 4 and len(target.encode("utf-8", "surrogateescape")) >= PATH_MAX:
        raise UnsafeArchiveError(f"symlink {short(name)!r} has a target over {PATH_MAX - 1} bytes "
                                 "(PATH_MAX)", where=w)


def output_error(folder: str | Path, err: OSError) -> ReconError:
    """The one line for a failed write: which folder, and the system's reason (ENOSPC, EROFS...)."""
    code = errno.errorcode.get(err.errno or 0, "")
    reason = f"{err.strerror or err}" + (f" ({code})" if code else "")
    return ReconError(f"cannot write to the output folder {folder}: {reason}")


@contextlib.contextmanager
def writing(folder: str | Path) -> Iterator[None]:
    """Turn an OSError of the write inside into :func:`output_error` (full disk, read-only...)."""
    try:
        yield
    except OSError as err:
        raise output_error(folder, err) from err


def _output_folder(path: Path) -> str:
    """The folder a user would recognise for ``path``: the one holding the staging folder."""
    for parent in (path, *path.parents):
        if _PARTIAL.match(parent.name):
            return str(parent.parent)
    return str(path)


def remove_tree_at(dir_fd: int, name: str) -> None:
    """Remove ``name`` under the folder ``dir_fd`` (a file, a link, or a whole folder).

    Never follows a symlink: every entry is looked at with ``lstat`` and removed
    relative to its own folder's descriptor, so a link inside (or a link at
    ``name`` itself) is unlinked, never its target. Folders deeper than
    ``_RM_DEPTH`` are first moved up to the top folder being removed (a rename
    inside the same tree), so at most ``_RM_DEPTH`` descriptors and stack frames
    are used whatever the depth.
    """
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return
    top = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    try:
        while names := os.listdir(top):  # a second round takes what was moved up
            for child in names:
                _remove_below(top, top, child, 1)
    finally:
        os.close(top)
    os.rmdir(name, dir_fd=dir_fd)


def _remove_below(top: int, dfd: int, name: str, depth: int) -> None:
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dfd)
        return
    if depth >= _RM_DEPTH:
        os.rename(name, f".recon-rm-{secrets.token_hex(8)}", src_dir_fd=dfd, dst_dir_fd=top)
        return
    sub = os.open(name, _DIR_FLAGS, dir_fd=dfd)
    try:
        for child in os.listdir(sub):
            _remove_below(top, sub, child, depth + 1)
    finally:
        os.close(sub)
    os.rmdir(name, dir_fd=dfd)


def _ancestors(path: str) -> list[str]:
    """``a/b/c`` -> ``["a/b/c", "a/b", "a"]`` (deepest first)."""
    out = []
    while path:
        out.append(path)
        path = path.rpartition("/")[0]
    return out


class TreeWriter:
    """Writes files, symlinks and directories strictly below one root folder.

    Every directory is opened relative to its parent's descriptor with
    ``O_NOFOLLOW``, starting from the root's, so an existing symlink inside
    the tree is an error, never a redirection. Directory descriptors are
    cached (an image writes thousands of files into a few hundred folders),
    at most ``_FD_CAP`` of them; the cache entries under a path are dropped
    when that path is replaced or moved. ``parent_fd`` creates the root as
    ``root.name`` inside that folder descriptor (a staging folder) rather than
    by path. ``label`` is the folder named when a write fails (full disk...).
    """

    def __init__(self, root: Path, *, parent_fd: int | None = None, label: str | None = None) -> None:
        self.root = Path(root)
        self.label = label or _output_folder(self.root)
        with writing(self.label):
            if parent_fd is None:
                self.root.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.root, _DIR_FLAGS)
            else:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(self.root.name, 0o755, dir_fd=parent_fd)
                fd = os.open(self.root.name, _DIR_FLAGS, dir_fd=parent_fd)
        self._dirs: dict[str, int] = {"": fd}

    def close(self) -> None:
        for fd in self._dirs.values():
            os.close(fd)
        self._dirs = {}

    def __enter__(self) -> TreeWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _dir_fd(self, path: str, rel: str, where: str, *, create: bool = True) -> int:
        """Descriptor of directory ``path`` (created if missing); never through a symlink.

        Iterative (a path can be :data:`MAX_DEPTH` deep): the missing folders
        are opened one below the other from the deepest one already open.
        """
        fd = self._dirs.get(path)
        if fd is not None:
            return fd
        missing = []
        cur = path
        while cur and cur not in self._dirs:
            missing.append(cur)
            cur = cur.rpartition("/")[0]
        if len(self._dirs) > 1 and len(self._dirs) + len(missing) > _FD_CAP:
            self._forget("\0all")  # start again from the root (a deep path may exceed the cap alone)
            missing = [*missing, *_ancestors(cur)]
            cur = ""
        fd = self._dirs[cur]
        for sub in reversed(missing):
            fd = self._open_child(fd, sub.rpartition("/")[2], rel, where, create)
            self._dirs[sub] = fd
        return fd

    def _open_child(self, pfd: int, part: str, rel: str, where: str, create: bool) -> int:
        try:
            return os.open(part, _DIR_FLAGS, dir_fd=pfd)
        except FileNotFoundError:
            if not create:
                raise
            with writing(self.label), contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=pfd)
            return os.open(part, _DIR_FLAGS, dir_fd=pfd)
        except OSError as err:
            try:
                st = os.stat(part, dir_fd=pfd, follow_symlinks=False)
            except OSError:
                raise output_error(self.label, err) from err
            if stat.S_ISLNK(st.st_mode):
                raise UnsafeArchiveError(f"entry {short(rel)!r} goes through the symlink {short(part)!r}",
                                         where=where or None) from err
            if not stat.S_ISDIR(st.st_mode):
                raise UnsafeArchiveError(f"entry {short(rel)!r} needs {short(part)!r} to be a directory "
                                         "but it is a file", where=where or None) from err
            raise output_error(self.label, err) from err

    def _forget(self, path: str) -> None:
        """Close cached descriptors at or below ``path`` (it is being replaced or moved)."""
        for key in [k for k in self._dirs if k and (path == "\0all" or k == path
                                                   or k.startswith(path + "/"))]:
            os.close(self._dirs.pop(key))

    def _parent_fd(self, rel: str, *, where: str) -> tuple[int, str]:
        parent, _, leaf = rel.rpartition("/")
        return self._dir_fd(parent, rel, where), leaf

    def _clear(self, dfd: int, leaf: str, path: str) -> None:
        """Remove whatever is at ``leaf`` (a later entry replaces an earlier one)."""
        try:
            st = os.stat(leaf, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            self._forget(path)
        remove_tree_at(dfd, leaf)

    def _create(self, dfd: int, leaf: str, rel: str) -> int:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        with writing(self.label):
            try:
                return os.open(leaf, flags, _FILE_MODE, dir_fd=dfd)
            except FileExistsError:
                self._clear(dfd, leaf, rel)
                return os.open(leaf, flags, _FILE_MODE, dir_fd=dfd)

    def _write_all(self, fd: int, data: bytes) -> None:
        view = memoryview(data)
        with writing(self.label):
            while view:
                view = view[os.write(fd, view):]

    def write_stream(self, rel: str, src: IO[bytes], *, where: str = "", limit: int | None = None,
                     chunk: int = 1 << 20, digest: bool = True) -> tuple[int, str]:
        """Copy ``src`` into ``rel``; return (size, sha256 hex, or "" with ``digest=False``).
        Refuse more than ``limit`` bytes."""
        rel = clean_relpath(rel, where=where)
        dfd, leaf = self._parent_fd(rel, where=where)
        fd = self._create(dfd, leaf, rel)
        total = 0
        hasher = hashlib.sha256() if digest else None
        try:
            while block := src.read(chunk):
                total += len(block)
                if limit is not None and total > limit:
                    raise UnsafeArchiveError(
                        f"entry {short(rel)!r} is larger than the size cap of {limit} bytes "
                        "(raise it with --max-file-size)", where=where or None)
                self._write_all(fd, block)
                if hasher is not None:
                    hasher.update(block)
        finally:
            os.close(fd)
        return total, hasher.hexdigest() if hasher is not None else ""

    def write_bytes(self, rel: str, data: bytes, *, where: str = "") -> tuple[int, str]:
        """Write ``data`` to ``rel`` in one go; return (size, sha256 hex)."""
        rel = clean_relpath(rel, where=where)
        dfd, leaf = self._parent_fd(rel, where=where)
        fd = self._create(dfd, leaf, rel)
        try:
            self._write_all(fd, data)
        finally:
            os.close(fd)
        return len(data), hashlib.sha256(data).hexdigest()

    def symlink(self, rel: str, target: str, *, where: str = "") -> None:
        """Create a symlink as a link; its target is recorded, never followed here."""
        rel = clean_relpath(rel, where=where)
        check_link_target(rel, target, where=where)
        dfd, leaf = self._parent_fd(rel, where=where)
        with writing(self.label):
            self._clear(dfd, leaf, rel)
            os.symlink(target, leaf, dir_fd=dfd)

    def open_read(self, rel: str) -> IO[bytes] | None:
        """Open a regular file of the tree for reading, never through a symlink; None if absent."""
        try:
            rel = clean_relpath(rel)
            parent, _, leaf = rel.rpartition("/")
            dfd = self._dir_fd(parent, rel, "", create=False)
            fd = os.open(leaf, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dfd)
        except (ReconError, OSError):
            return None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        return os.fdopen(fd, "rb")

    def mkdir(self, rel: str, *, where: str = "") -> None:
        rel = clean_relpath(rel, where=where)
        if rel:
            self._dir_fd(rel, rel, where)

    def remove(self, rel: str, *, where: str = "") -> None:
        """Remove ``rel`` (and all below it) if it is there; creates nothing, follows no link."""
        rel = clean_relpath(rel, where=where)
        parent, _, leaf = rel.rpartition("/")
        try:
            dfd = self._dir_fd(parent, rel, where, create=False)
        except (FileNotFoundError, UnsafeArchiveError):
            return  # a folder above is missing or not a folder: nothing of ``rel`` is there
        with writing(self.label):
            self._clear(dfd, leaf, rel)

    def move_dir(self, rel: str, dst_fd: int, dst_name: str, *, where: str = "") -> None:
        """Rename the folder ``rel`` of this tree to ``dst_name`` in the folder ``dst_fd``.

        Each component of ``rel`` is opened with ``O_NOFOLLOW`` from the tree's
        root descriptor (nothing is created), and ``rel`` itself must be a real
        folder, so the rename can only ever move something this writer made.
        """
        rel = clean_relpath(rel, where=where)
        parent, _, leaf = rel.rpartition("/")
        try:
            dfd = self._dir_fd(parent, rel, where, create=False)
            st = os.stat(leaf, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError as err:
            raise ReconError(f"/{short(rel)} is not in the tree written", where=where or None) from err
        if stat.S_ISLNK(st.st_mode):
            raise UnsafeArchiveError(f"/{short(rel)} is a symlink; recon moves only folders it wrote, "
                                     "never through a link", where=where or None)
        if not stat.S_ISDIR(st.st_mode):
            raise ReconError(f"/{short(rel)} is not a folder", where=where or None)
        self._forget(rel)
        with writing(self.label):
            os.rename(leaf, dst_name, src_dir_fd=dfd, dst_dir_fd=dst_fd)


def open_output_folder(path: Path) -> int:
    """Create the output folder if needed and open it; the caller closes the descriptor.

    A symlink there is refused rather than followed: the folder is where recon
    creates, renames and removes things, and a link planted there (a checkout's
    ``snapshots``) would send all of that elsewhere. Links in the folders above
    are the user's own layout and are followed, once, here.
    """
    path = Path(path)
    if path.is_symlink():
        raise ReconError(f"the output folder {path} is a symlink (to {os.readlink(path)}); recon does "
                         "not follow it: give the folder itself")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise output_error(path, err) from err
    try:
        return os.open(path, _DIR_FLAGS)
    except OSError as err:
        raise output_error(path, err) from err


def _alive(pid: int) -> bool:
    """Whether process ``pid`` may still run (anything unclear counts as alive: nothing is removed)."""
    if pid <= 0 or pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):
        return True
    return True


def sweep_stale(dir_fd: int) -> list[str]:
    """Remove staging folders in ``dir_fd`` left by runs that were killed (SIGKILL, power loss).

    Only a folder that recon names (``.<label>.partial-<pid>-<8 hex>``), that is
    a real folder of this user, whose pid no longer runs *and* whose lock is
    free: a live run holds its lock (also from another pid namespace sharing
    the folder), and a pid that runs again is left alone. Returns the names removed.
    """
    removed = []
    for name in os.listdir(dir_fd):
        m = _PARTIAL.match(name)
        if m is None or _alive(int(m.group("pid"))):
            continue
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        except OSError:
            continue  # a link or a file of that name is not a staging folder
        try:
            if os.fstat(fd).st_uid != os.geteuid():
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue
            with contextlib.suppress(OSError):
                remove_tree_at(dir_fd, name)
                removed.append(name)
        finally:
            os.close(fd)
    return removed


@dataclass
class _Staged:
    """A staging folder this process holds: its output folder's descriptor and its own (locked)."""

    parent: Path
    parent_fd: int
    name: str
    fd: int
    committed: bool = False


_LIVE: dict[Path, _Staged] = {}


def _partial_name(label: str) -> str:
    return f".{label[:64]}.partial-{os.getpid()}-{secrets.token_hex(4)}"


@contextlib.contextmanager
def staging(parent: Path, label: str) -> Iterator[Path]:
    """Yield a fresh hidden folder in ``parent``; it is removed unless :func:`commit` moved it.

    On any exception (Ctrl-C included) the folder goes, so a half-written
    result never sits where a finished one is expected. The folder is locked
    and named after this process, so the next run can tell a killed run's
    leftovers (removed first, :func:`sweep_stale`) from a live one's.
    """
    parent = Path(parent)
    pfd = open_output_folder(parent)
    try:
        sweep_stale(pfd)
        name = _partial_name(label)
        with writing(parent):
            os.mkdir(name, 0o755, dir_fd=pfd)
            fd = os.open(name, _DIR_FLAGS, dir_fd=pfd)
        held = _Staged(parent, pfd, name, fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.chmod(fd, 0o755)
            tmp = parent / name
            _LIVE[tmp] = held
            yield tmp
        finally:
            _LIVE.pop(parent / name, None)
            if not held.committed:
                with contextlib.suppress(OSError):
                    remove_tree_at(pfd, name)
            os.close(fd)
    finally:
        os.close(pfd)


def _held(tmp: Path) -> _Staged:
    held = _LIVE.get(Path(tmp))
    if held is None:
        raise ReconError(f"{tmp} is not a staging folder of this run")
    return held


def staged_fd(tmp: Path) -> int:
    """The descriptor of a staging folder (owned by :func:`staging`; do not close it)."""
    return _held(tmp).fd


def read_small_at(dfd: int, name: str, limit: int = _SMALL) -> bytes | None:
    """A small regular file of the folder ``dfd`` (at most ``limit`` bytes), read without
    following a link; None if there is no such regular file."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dfd)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return fh.read(limit)


def _json_object(data: bytes | None) -> dict[str, Any] | None:
    try:
        obj = json.loads(data) if data is not None else None
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def recon_kind_at(dir_fd: int, name: str) -> str | None:
    """What recon folder ``name`` is ("snapshot", "probe bundle"), or None if it is not one.

    A snapshot has a ``manifest.json`` that parses to an object with recon's
    ``format`` key; a probe bundle (recon/probes/bundle.py) a ``probe.json``
    object with ``targets`` next to ``_recon_probe_runtime.py``. A symlink is
    never one.
    """
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        manifest = _json_object(read_small_at(fd, "manifest.json"))
        if manifest is not None and "format" in manifest:
            return "snapshot"
        spec = _json_object(read_small_at(fd, "probe.json"))
        if spec is not None and "targets" in spec and read_small_at(fd, "_recon_probe_runtime.py") is not None:
            return "probe bundle"
        return None
    finally:
        os.close(fd)


def _same_folder(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def commit(tmp: Path, dest: Path, *, replace: bool = False) -> None:
    """Move a finished staging folder to ``dest`` (its own output folder: one rename).

    ``replace`` (``--force``) swaps out an existing ``dest`` only if it is the
    same kind of recon folder as the new one (:func:`recon_kind_at`); anything
    else there (a user's folder, a file, a symlink, a folder of snapshots) is
    refused in one line and left as it was. Renames are relative to the output
    folder's descriptor; the old folder is renamed to a staging name first (so
    a kill leaves it to :func:`sweep_stale`) and removed without following links.
    """
    held, dest = _held(tmp), Path(dest)
    if not _same_folder(held.parent_fd, dest.parent):
        raise ReconError(f"{dest} is not in {held.parent}, where it was built")
    pfd, name = held.parent_fd, dest.name
    try:
        os.stat(name, dir_fd=pfd, follow_symlinks=False)
    except FileNotFoundError:
        with writing(held.parent):
            os.rename(held.name, name, src_dir_fd=pfd, dst_dir_fd=pfd)
        held.committed = True
        return
    if not replace:
        raise ReconError(f"{dest} already exists (use --force to replace it)")
    kind, new = recon_kind_at(pfd, name), recon_kind_at(pfd, held.name)
    if kind is None or kind != new:
        raise ReconError(f"{dest} is not a {new or 'folder'} recon made, so --force does not replace "
                         "it: move it away or choose another name")
    trash = _partial_name(name)
    with writing(held.parent):
        os.rename(name, trash, src_dir_fd=pfd, dst_dir_fd=pfd)
        try:
            os.rename(held.name, name, src_dir_fd=pfd, dst_dir_fd=pfd)
        except OSError:
            os.rename(trash, name, src_dir_fd=pfd, dst_dir_fd=pfd)
            raise
    held.committed = True
    with contextlib.suppress(OSError):
        remove_tree_at(pfd, trash)


@contextlib.contextmanager
def staged_dir(dest: Path, *, replace: bool = False) -> Iterator[Path]:
    """Build a folder whose final name is known up front; rename it into place on success."""
    dest = Path(dest)
    if (dest.exists() or dest.is_symlink()) and not replace:
        raise ReconError(f"{dest} already exists (use --force to replace it)")
    with staging(dest.parent, dest.name) as tmp:
        yield tmp
        commit(tmp, dest, replace=replace)


def write_bytes_at(dir_fd: int, name: str, data: bytes, *, mode: int = _FILE_MODE,
                   label: str | Path = "") -> None:
    """Write ``name`` in the folder ``dir_fd`` atomically (temporary file + rename), no link followed."""
    tmp = f".{name[:64]}.{secrets.token_hex(6)}"
    with writing(label):
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode, dir_fd=dir_fd)
        try:
            try:
                os.fchmod(fd, mode)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise


def _json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n").encode("utf-8")


def write_json_at(dir_fd: int, name: str, obj: Any, *, label: str | Path = "") -> None:
    """:func:`write_json` relative to a folder descriptor (a staging folder)."""
    write_bytes_at(dir_fd, name, _json_bytes(obj), label=label)


def _write_file(path: Path, data: bytes, mode: int) -> None:
    path = Path(path)
    with writing(path.parent):
        path.parent.mkdir(parents=True, exist_ok=True)
        dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        write_bytes_at(dfd, path.name, data, mode=mode, label=path.parent)
    finally:
        os.close(dfd)


def write_json(path: Path, obj: Any) -> None:
    """Write JSON atomically (temp file + rename) so readers never see half a file."""
    _write_file(path, _json_bytes(obj), _FILE_MODE)


def write_text(path: Path, text: str, *, mode: int = 0o644) -> None:
    """Write a text file atomically (used for reports, slices, bundle files)."""
    _write_file(path, text.encode("utf-8"), mode)
