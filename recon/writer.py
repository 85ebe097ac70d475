"""The one place where recon writes files to disk.

Everything recon produces (snapshot trees, manifests, probe bundles, reports)
goes through here, so the rules live in one spot:

* a tree is built in a hidden temporary sibling folder and renamed into place
  only when complete (:func:`staged_dir`), so a failure never leaves a folder
  that looks finished;
* a path inside a tree is opened component by component with ``O_NOFOLLOW``
  relative to the tree's own directory descriptor (:class:`TreeWriter`), so no
  entry name, ``..``, absolute path or symlink planted earlier can make a write
  land outside the tree. ``tarfile.extractall`` is never used.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from .errors import ReconError, UnsafeArchiveError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_FILE_MODE = 0o644


def clean_relpath(name: str, *, where: str = "") -> str:
    """Normalise an archive member name to a safe relative POSIX path.

    Leading ``./`` is accepted (tar writes it); ``..`` components, absolute
    paths and NUL bytes are refused outright rather than "fixed", because an
    archive that contains them is hostile or broken and the user must know.
    """
    if "\x00" in name:
        raise UnsafeArchiveError(f"entry name contains a NUL byte: {name!r}", where=where or None)
    if name.startswith("/"):
        raise UnsafeArchiveError(f"absolute path in archive: {name!r}", where=where or None)
    parts = [p for p in name.split("/") if p and p != "."]
    if ".." in parts:
        raise UnsafeArchiveError(f"path traversal ('..') in archive: {name!r}", where=where or None)
    return "/".join(parts)


class TreeWriter:
    """Writes files, symlinks and directories strictly below one root folder.

    Every directory is opened relative to its parent's descriptor with
    ``O_NOFOLLOW``, starting from the root's, so an existing symlink inside
    the tree is an error, never a redirection. Directory descriptors are
    cached (an image writes thousands of files into a few hundred folders);
    the cache entries under a path are dropped when that path is replaced.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._dirs: dict[str, int] = {"": os.open(self.root, _DIR_FLAGS)}
        self.bytes_written = 0

    def close(self) -> None:
        for fd in self._dirs.values():
            os.close(fd)
        self._dirs = {}

    def __enter__(self) -> TreeWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _dir_fd(self, path: str, rel: str, where: str) -> int:
        """Descriptor of directory ``path`` (created if missing); never through a symlink."""
        fd = self._dirs.get(path)
        if fd is not None:
            return fd
        parent, _, part = path.rpartition("/")
        pfd = self._dir_fd(parent, rel, where)
        try:
            fd = os.open(part, _DIR_FLAGS, dir_fd=pfd)
        except FileNotFoundError:
            os.mkdir(part, 0o755, dir_fd=pfd)
            fd = os.open(part, _DIR_FLAGS, dir_fd=pfd)
        except OSError as err:
            st = os.stat(part, dir_fd=pfd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                raise UnsafeArchiveError(
                    f"entry {rel!r} goes through the symlink {part!r}", where=where or None) from err
            raise UnsafeArchiveError(
                f"entry {rel!r} needs {part!r} to be a directory but it is a file",
                where=where or None) from err
        if len(self._dirs) > 4096:  # bound the number of open descriptors
            self._forget("\0all")
        self._dirs[path] = fd
        return fd

    def _forget(self, path: str) -> None:
        """Close cached descriptors at or below ``path`` (it is being replaced)."""
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
            sub = os.open(leaf, _DIR_FLAGS, dir_fd=dfd)
            try:
                for name in os.listdir(sub):
                    self._clear(sub, name, f"{path}/{name}")
            finally:
                os.close(sub)
            os.rmdir(leaf, dir_fd=dfd)
        else:
            os.unlink(leaf, dir_fd=dfd)

    def _create(self, dfd: int, leaf: str, rel: str) -> int:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        try:
            return os.open(leaf, flags, _FILE_MODE, dir_fd=dfd)
        except FileExistsError:
            self._clear(dfd, leaf, rel)
            return os.open(leaf, flags, _FILE_MODE, dir_fd=dfd)

    def write_stream(self, rel: str, src: IO[bytes], *, where: str = "", limit: int | None = None,
                     chunk: int = 1 << 20, digest: bool = True) -> tuple[int, str]:
        """Copy ``src`` into ``rel``; return (size, sha256 hex, or "" with ``digest=False``).
        Refuse more than ``limit`` bytes."""
        rel = clean_relpath(rel, where=where)
        dfd, leaf = self._parent_fd(rel, where=where)
        fd = self._create(dfd, leaf, rel)
        total = 0
        hasher = hashlib.sha256() if digest else None
        with os.fdopen(fd, "wb") as out:
            while True:
                block = src.read(chunk)
                if not block:
                    break
                total += len(block)
                if limit is not None and total > limit:
                    raise UnsafeArchiveError(
                        f"entry {rel!r} is larger than the size cap of {limit} bytes "
                        "(raise it with --max-file-size)", where=where or None)
                out.write(block)
                if hasher is not None:
                    hasher.update(block)
        self.bytes_written += total
        return total, hasher.hexdigest() if hasher is not None else ""

    def write_bytes(self, rel: str, data: bytes, *, where: str = "") -> tuple[int, str]:
        """Write ``data`` to ``rel`` in one go; return (size, sha256 hex)."""
        rel = clean_relpath(rel, where=where)
        dfd, leaf = self._parent_fd(rel, where=where)
        fd = self._create(dfd, leaf, rel)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        self.bytes_written += len(data)
        return len(data), hashlib.sha256(data).hexdigest()

    def symlink(self, rel: str, target: str, *, where: str = "") -> None:
        """Create a symlink as a link; its target is recorded, never followed here."""
        rel = clean_relpath(rel, where=where)
        dfd, leaf = self._parent_fd(rel, where=where)
        self._clear(dfd, leaf, rel)
        os.symlink(target, leaf, dir_fd=dfd)

    def open_read(self, rel: str) -> IO[bytes] | None:
        """Open a regular file of the tree for reading, never through a symlink; None if absent."""
        try:
            dfd, leaf = self._parent_fd(clean_relpath(rel), where="")
            fd = os.open(leaf, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dfd)
        except (UnsafeArchiveError, OSError):
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
        rel = clean_relpath(rel, where=where)
        dfd, leaf = self._parent_fd(rel, where=where)
        self._clear(dfd, leaf, rel)


@contextlib.contextmanager
def staging(parent: Path, label: str) -> Iterator[Path]:
    """Yield a fresh hidden folder in ``parent``; it is removed unless :func:`commit` moved it.

    On any exception (Ctrl-C included) the folder goes, so a half-written
    result never sits where a finished one is expected.
    """
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{label}.partial-", dir=parent))
    os.chmod(tmp, 0o755)
    try:
        yield tmp
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def commit(tmp: Path, dest: Path, *, replace: bool = False) -> None:
    """Move a finished staging folder to ``dest`` (same filesystem: one rename)."""
    dest = Path(dest)
    if dest.exists() or dest.is_symlink():
        if not replace:
            raise ReconError(f"{dest} already exists (use --force to replace it)")
        old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
        os.rename(dest, old)
        os.rename(tmp, dest)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, dest)


@contextlib.contextmanager
def staged_dir(dest: Path, *, replace: bool = False) -> Iterator[Path]:
    """Build a folder whose final name is known up front; rename it into place on success."""
    dest = Path(dest)
    if (dest.exists() or dest.is_symlink()) and not replace:
        raise ReconError(f"{dest} already exists (use --force to replace it)")
    with staging(dest.parent, dest.name) as tmp:
        yield tmp
        commit(tmp, dest, replace=replace)


def write_json(path: Path, obj: Any) -> None:
    """Write JSON atomically (temp file + rename) so readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(obj, fh, indent=2, sort_keys=False, default=str)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_text(path: Path, text: str, *, mode: int = 0o644) -> None:
    """Write a text file atomically (used for reports, slices, bundle files)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
