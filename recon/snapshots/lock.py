"""Who is reading a snapshot folder: a shared ``flock`` on the folder itself.

A snapshot folder is read by path for as long as its :class:`Snapshot` is in
use (an index, a slice, a sandbox that binds it, an engine-mode server), by
this process and by others: two terminals, a notebook beside a CLI, CI beside
a user. So a reader holds a shared lock on the folder for as long as the
Snapshot object it got lives (:func:`open_held`), and anything that would
remove or replace a folder first takes the exclusive lock without waiting
(:func:`exclusive_at`, :func:`unheld`) and leaves the folder alone while any
reader holds it. The lock is on the folder's inode, so it follows the folder
through a rename and holds across pid namespaces sharing the file system.

Removers and replacers rename the folder away under their exclusive lock; a
reader that was waiting for its shared lock meanwhile sees that the path no
longer names the folder it locked and opens again (:func:`open_held`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import weakref
from collections.abc import Iterator
from pathlib import Path

from ..errors import ReconError
from .model import Snapshot

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: an entry of any kind, opened to be locked: never through a link, never waiting on a FIFO
_ANY = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
#: the lock cannot be taken because someone holds it
_BUSY = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)


def keep(snap: Snapshot, fd: int) -> Snapshot:
    """Tie ``fd`` (a descriptor holding the shared lock on ``snap``'s folder) to ``snap``:
    it is closed, and the lock released, when ``snap`` is garbage or the process ends."""
    weakref.finalize(snap, os.close, fd)
    return snap


def _same(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def open_held(path: str | Path) -> Snapshot | None:
    """The snapshot folder at ``path``, opened and held (shared lock) while the result lives.

    None when there is no snapshot folder there, or it was removed or replaced while
    this waited for the lock (the caller opens again or takes it anew). A folder
    that is there but holds no readable recon manifest raises ReconError, as
    :meth:`Snapshot.open` does.
    """
    path = Path(path).absolute()
    try:
        fd = os.open(path, _DIR)
    except OSError as err:
        if err.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
            return None  # gone, or not a folder (a link is never followed here)
        return Snapshot.open(path)  # a folder this user may read but not open: as before, unheld
    try:
        with contextlib.suppress(OSError):  # a file system without flock: read as before, unheld
            fcntl.flock(fd, fcntl.LOCK_SH)  # waits while a remover holds it; they rename first
        if not _same(fd, path):
            os.close(fd)
            return None
        snap = Snapshot.open(path)
    except BaseException:
        os.close(fd)
        raise
    return keep(snap, fd)


def hold(snap: Snapshot, tries: int = 3) -> Snapshot:
    """``snap`` opened again from its folder and held; ReconError if the folder is gone."""
    for _ in range(tries):
        held = open_held(snap.root)
        if held is not None:
            return held
    raise ReconError(f"snapshot {snap.name} was removed while it was being opened "
                     f"(by `recon cache prune` or a --force): {snap.root}")


def exclusive_at(dir_fd: int, name: str) -> int | None:
    """The exclusive lock on entry ``name`` of folder ``dir_fd``, taken without waiting.

    Returns the descriptor that holds it (the caller closes it when done), -1
    for an entry that cannot be opened without following a link (nothing can
    hold it: a symlink, a vanished name), or None while a reader holds it.
    """
    try:
        fd = os.open(name, _ANY, dir_fd=dir_fd)
    except OSError:
        return -1
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        os.close(fd)
        if err.errno in _BUSY:
            return None
        return -1
    return fd


@contextlib.contextmanager
def unheld(path: str | Path) -> Iterator[None]:
    """Run the block with nobody reading the folder at ``path`` (exclusive lock held); one
    ReconError line, without waiting, while a recon process holds it as a snapshot."""
    path = Path(path)
    parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = exclusive_at(parent, path.name)
    finally:
        os.close(parent)
    if fd is None:
        raise ReconError(f"{path} is in use: a running recon holds it as a snapshot (this "
                         "process too, while it keeps a Snapshot of it); it is not replaced. "
                         "Run again when that process is done, or choose another --name")
    try:
        yield
    finally:
        if fd >= 0:
            os.close(fd)
