"""What recon keeps in its cache folder, and taking old entries out of it.

The cache (:func:`recon.paths.cache_dir`) grows with use: a vLLM wheel is about
330 MB, a release's engine-mode environment over 1 GB, each snapshot of a
release a few hundred MB. ``recon cache`` lists it by kind, and ``recon cache
prune`` removes entries (the items directly inside a kind's folder: one wheel,
one environment, one snapshot) not modified for a given number of days.
Removal goes through :func:`recon.acquire.writer.remove_tree_at`: a link inside an
entry is unlinked, never followed.

Other recon processes may be using the cache meanwhile. An entry is removed
only under its exclusive lock, taken without waiting: a snapshot a running
recon holds (:mod:`recon.snapshots.lock`) and a staging folder being written
are kept and listed as in use. A removed entry is first renamed to a hidden
staging name, so no process ever finds a half-removed entry under its name
(and a prune killed midway leaves it to :func:`recon.acquire.writer.sweep_stale`).
"""

from __future__ import annotations

import os
import re
import secrets
import stat
import time
from dataclasses import asdict, dataclass, field

from .acquire.writer import remove_tree_at
from .errors import ReconError
from .paths import cache_dir
from .snapshots.lock import exclusive_at

#: the kinds of things recon caches: folder under the cache -> what it holds
KINDS = {
    "wheels": "engine wheels from PyPI (pip:)",
    "snapshots": "snapshots taken for any SOURCE by run, recipe, diff, logs, ...",
    "envs": "engine-mode environments, one per release (its Requires-Dist, CPU torch)",
    "engine-results": "engine-mode answers, one per request",
    "index": "the per-file index records (by content digest)",
    "blobs": "registry and image layer blobs (by digest)",
    "test-snapshots": "snapshots the test suite takes",
    "tmp": "temporary copies (docker save exports), removed after use",
}
DAY = 86_400
#: a staging folder (:func:`recon.acquire.writer.staging`): ``.<label>.partial-<pid>-<8 hex>``
_STAGING = re.compile(r"^\..*\.partial-(?P<pid>[0-9]{1,10})-[0-9a-f]{8}$")


@dataclass
class Entry:
    """One item of a kind's folder."""

    name: str
    bytes: int
    modified: float  # newest mtime inside it (seconds since the epoch)


@dataclass
class KindUsage:
    """One kind: its folder, entries, total bytes, and the newest/oldest modification."""

    kind: str
    what: str
    path: str
    entries: list[Entry] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(e.bytes for e in self.entries)

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind, "what": self.what, "path": self.path,
                "entries": len(self.entries), "bytes": self.bytes,
                "items": [asdict(e) for e in self.entries]}


def _measure(dir_fd: int, name: str) -> tuple[int, float]:
    """(bytes, newest mtime) of ``name`` under ``dir_fd``, links not followed."""
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        return st.st_size, st.st_mtime
    total, newest = 0, st.st_mtime
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
    try:
        for child in os.listdir(fd):
            size, when = _measure(fd, child)
            total += size
            newest = max(newest, when)
    finally:
        os.close(fd)
    return total, newest


def usage(kinds: list[str] | None = None) -> list[KindUsage]:
    """Every kind (or those named) with its entries, largest first."""
    base = cache_dir()
    out = []
    for kind in _chosen(kinds):
        folder = base / kind
        row = KindUsage(kind, KINDS[kind], str(folder))
        if folder.is_dir() and not folder.is_symlink():
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            try:
                for name in sorted(os.listdir(fd)):
                    size, when = _measure(fd, name)
                    row.entries.append(Entry(name, size, when))
            finally:
                os.close(fd)
        row.entries.sort(key=lambda e: -e.bytes)
        out.append(row)
    return out


def prune(*, older_than_days: float, kinds: list[str] | None = None,
          dry_run: bool = False, now: float | None = None,
          in_use: list[tuple[str, Entry]] | None = None) -> list[tuple[str, Entry]]:
    """Remove (or with ``dry_run`` only list) entries not modified for ``older_than_days``.

    Entries another recon process is using stay, and are appended to ``in_use``
    when given (module docstring).
    """
    if older_than_days < 0:
        raise ReconError(f"--older-than: a number of days, 0 or more, got {older_than_days}")
    cutoff = (now if now is not None else time.time()) - older_than_days * DAY
    gone: list[tuple[str, Entry]] = []
    kept = in_use if in_use is not None else []
    for row in usage(kinds):
        old = [e for e in row.entries if e.modified < cutoff]
        if not old:
            continue
        fd = os.open(row.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            for entry in old:
                removed = _remove_unless_used(fd, entry.name, dry_run)
                (gone if removed else kept).append((row.kind, entry))
        finally:
            os.close(fd)
    return gone


def _running(pid: int) -> bool:
    """Whether process ``pid`` may still run (anything unclear counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):
        return True
    return True


def _remove_unless_used(dir_fd: int, name: str, dry_run: bool) -> bool:
    """Remove entry ``name`` of ``dir_fd`` unless a recon process uses it; False when it does.

    A live run's staging folder is in use; anything else is in use while its
    lock is held (a snapshot a reader holds). Under the lock the entry is
    renamed to a staging name first, then removed.
    """
    staged = _STAGING.match(name)
    if staged is not None and _running(int(staged.group("pid"))):
        return False
    lock_fd = exclusive_at(dir_fd, name)
    if lock_fd is None:
        return False
    try:
        if not dry_run:
            trash = f".{name[:64]}.partial-{os.getpid()}-{secrets.token_hex(4)}"
            try:
                os.rename(name, trash, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except FileNotFoundError:  # another prune was first
                return True
            remove_tree_at(dir_fd, trash)
    finally:
        if lock_fd >= 0:
            os.close(lock_fd)
    return True


def _chosen(kinds: list[str] | None) -> list[str]:
    unknown = sorted(set(kinds or []) - set(KINDS))
    if unknown:
        raise ReconError(f"unknown cache kind {', '.join(unknown)}; known: {', '.join(KINDS)}")
    return list(kinds) if kinds else list(KINDS)


def human(n: float) -> str:
    """Bytes for people: ``1.4 GB``."""
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


__all__ = ["KINDS", "Entry", "KindUsage", "human", "prune", "usage"]
