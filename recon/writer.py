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
from pathlib import Path, PurePosixPath
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
    parts = [p for p in PurePosixPath(name).parts if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise UnsafeArchiveError(f"path traversal ('..') in archive: {name!r}", where=where or None)
    return "/".join(parts)


class TreeWriter:
    """Writes files, symlinks and directories strictly below one root folder.

    The root is opened once; every write walks the relative path from the
    root's descriptor with ``O_NOFOLLOW`` so an existing symlink inside the
    tree is an error, never a redirection.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._root_fd = os.open(self.root, _DIR_FLAGS)
        self.bytes_written = 0

    def close(self) -> None:
        if self._root_fd >= 0:
            os.close(self._root_fd)
            self._root_fd = -1

    def __enter__(self) -> TreeWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _parent_fd(self, rel: str, *, where: str) -> tuple[int, str]:
        """Open (creating) every directory above ``rel``; return (fd, leaf name)."""
        parts = rel.split("/")
        fd = os.dup(self._root_fd)
        try:
            for part in parts[:-1]:
                try:
                    nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    os.mkdir(part, 0o755, dir_fd=fd)
                    nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except (NotADirectoryError, OSError) as err:
                    st = os.stat(part, dir_fd=fd, follow_symlinks=False)
                    if stat.S_ISLNK(st.st_mode):
                        raise UnsafeArchiveError(
                            f"entry {rel!r} goes through the symlink {part!r}", where=where or None
                        ) from err
                    raise UnsafeArchiveError(
                        f"entry {rel!r} needs {part!r} to be a directory but it is a file",
                        where=where or None,
                    ) from err
                os.close(fd)
                fd = nfd
            return fd, parts[-1]
        except BaseException:
            os.close(fd)
            raise

    def _clear(self, dfd: int, leaf: str) -> None:
        """Remove whatever is at ``leaf`` (a later entry replaces an earlier one)."""
        try:
            st = os.stat(leaf, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            sub = os.open(leaf, _DIR_FLAGS, dir_fd=dfd)
            try:
                for name in os.listdir(sub):
                    self._clear(sub, name)
            finally:
                os.close(sub)
            os.rmdir(leaf, dir_fd=dfd)
        else:
            os.unlink(leaf, dir_fd=dfd)

    def write_stream(self, rel: str, src: IO[bytes], *, where: str = "", limit: int | None = None,
                     chunk: int = 1 << 20) -> tuple[int, str]:
        """Copy ``src`` into ``rel``; return (size, sha256 hex). Refuse more than ``limit`` bytes."""
        rel = clean_relpath(rel, where=where)
        dfd, leaf = self._parent_fd(rel, where=where)
        try:
            self._clear(dfd, leaf)
            fd = os.open(leaf, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, _FILE_MODE,
                         dir_fd=dfd)
            total = 0
            digest = hashlib.sha256()
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
                    digest.update(block)
            self.bytes_written += total
            return total, digest.hexdigest()
        finally:
            os.close(dfd)

    def write_bytes(self, rel: str, data: bytes, *, where: str = "") -> tuple[int, str]:
        import io

        return self.write_stream(rel, io.BytesIO(data), where=where)

    def symlink(self, rel: str, target: str, *, where: str = "") -> None:
        """Create a symlink as a link; its target is recorded, never followed here."""
        rel = clean_relpath(rel, where=where)
        dfd, leaf = self._parent_fd(rel, where=where)
        try:
            self._clear(dfd, leaf)
            os.symlink(target, leaf, dir_fd=dfd)
        finally:
            os.close(dfd)

    def open_read(self, rel: str) -> IO[bytes] | None:
        """Open a regular file of the tree for reading, never through a symlink; None if absent."""
        try:
            dfd, leaf = self._parent_fd(clean_relpath(rel), where="")
        except (UnsafeArchiveError, OSError):
            return None
        try:
            fd = os.open(leaf, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dfd)
        except OSError:
            return None
        finally:
            os.close(dfd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        return os.fdopen(fd, "rb")

    def mkdir(self, rel: str, *, where: str = "") -> None:
        rel = clean_relpath(rel, where=where)
        if not rel:
            return
        dfd, leaf = self._parent_fd(rel + "/x", where=where)
        os.close(dfd)

    def remove(self, rel: str, *, where: str = "") -> None:
        rel = clean_relpath(rel, where=where)
        dfd, leaf = self._parent_fd(rel, where=where)
        try:
            self._clear(dfd, leaf)
        finally:
            os.close(dfd)


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
