"""The snapshot cache: any SOURCE snapshotted once into ``<recon cache>/snapshots``, reused while fresh.

Every verb that accepts "a snapshot name or any SOURCE" (index, find, chain,
slice, run, recipes, diff, bisect, logs, probes) comes through
:func:`ensure_snapshot`. A cached snapshot is served only while its
*freshness key* still matches what is behind the reference, and there is
exactly one key, :func:`freshness`, for every caller (``diff``'s sides
included), so two verbs never disagree about whether a cache entry is stale:

* ``pip:SPEC``: the wheel file the spec resolves to (a released wheel's
  name never changes content), so ``pip:vllm`` and ``pip:vllm==X`` share one;
* ``registry:REF``: the manifest digest the tag points to now (offline: the
  newest snapshot taken of that reference, with a warning);
* ``docker:REF``: the image id the local engine reports today;
* path sources (``dir:``, ``wheel:``, ``docker-archive:``, ``oci:``,
  ``oci-archive:``): for a file, its size, mtime, ctime and inode; for a
  folder, a hash over (relative path, kind, size, mtime, ctime, inode, link
  target) of every entry under it, walked without following symlinks.

ctime is part of the key because a copy that restores mtimes (``cp -p``,
``rsync -t``, ``touch -r``) cannot set it. Timestamps are coarse (one kernel
tick), so a file changed in the same tick as the walk could go unseen; a
walk that sees such a recent stamp waits a tick and walks again (see
:data:`SETTLE_NS`).

Many recon processes share one cache (two terminals, a notebook beside a CLI,
CI beside a user), so a cached snapshot is immutable: its folder is named by
its key, is published by one rename of a finished staging folder, and is
never replaced; a changed source gets a new folder beside it. Whoever loses a
race to publish the same key reads the winner's folder. Every snapshot
:func:`ensure_snapshot` returns holds a shared lock on its folder while the
object lives (:mod:`recon.snapshots.lock`), and ``recon cache prune`` removes
only folders nobody holds.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..acquire.sources import SCHEMES, split_ref
from ..errors import ReconError
from ..paths import cache_dir
from .lock import hold, open_held
from .model import MANIFEST, Snapshot
from .take import take_snapshot

#: A stamp newer than this before the walk may share the walk's timestamp tick (Linux: <= 10 ms).
SETTLE_NS = 50_000_000
#: Walks retried while the tree is still being written; after that the key never matches again.
SETTLE_TRIES = 4


@dataclass(frozen=True)
class Freshness:
    """What a cache entry for one reference is keyed by.

    ``source`` is what :func:`recon.snapshots.take.take_snapshot` reads (paths
    made absolute, ``pip:`` latest specs resolved to their wheel); ``label``
    is the readable part of the cache folder's name; ``key`` changes whenever
    the content behind the reference may have changed, and is None when it
    cannot be known (the snapshot is then taken again, never served cached).
    """

    source: str
    label: str
    key: str | None


def freshness(ref: str) -> Freshness:
    """The one freshness key for a SOURCE (module docstring); ReconError if it cannot be resolved.

    Registry and pip lookups can fail offline; those errors propagate, and
    :func:`ensure_snapshot` decides what to serve instead.
    """
    scheme, rest = split_ref(ref)
    if scheme == "pip":
        from ..acquire.sources.pip import fetch_wheel

        whl = fetch_wheel(rest)
        source = ref if "==" in ref else f"wheel:{whl}"  # exact pins keep the pip: reference
        return Freshness(source, whl.name, whl.name)
    if scheme == "registry":
        from ..acquire.sources.registry import resolve_digest

        return Freshness(ref, ref, ref + "@" + resolve_digest(rest))
    if scheme == "docker":
        return Freshness(ref, ref, _image_id(rest))
    path = os.path.realpath(rest)  # the top may be a link the user chose; nothing under it is followed
    return Freshness(f"{scheme}:{path}", f"{scheme}-{os.path.basename(path) or path}",
                     _path_key(scheme, path))


def _image_id(ref: str) -> str | None:
    """``docker:REF`` -> ``docker:REF@sha256:...`` (None without an engine or image: the snapshot
    is then attempted and reports the real error)."""
    from ..acquire.sources.daemon import _client

    try:
        return f"docker:{ref}@{_client().images.get(ref).id}"
    except ReconError:
        raise
    except Exception:
        return None


def _path_key(scheme: str, path: str) -> str | None:
    """``scheme:path`` plus :func:`tree_key` of it; None while the path is missing or unreadable."""
    fp = tree_key(path)
    return None if fp is None else f"{scheme}:{path}@{fp}"


def tree_key(path: str | Path) -> str | None:
    """A hash over the stat of ``path`` and, for a folder, of every entry under it.

    Symlinks are recorded (their target text), never followed, so a link out
    of the tree neither slows the walk nor leaks host files into the key.
    None when ``path`` cannot be read at all. If any stamp is so recent that a
    change in the same timestamp tick could hide behind it, waits and walks
    again; a tree still changing after :data:`SETTLE_TRIES` walks gets a key
    that will not match again (its snapshot is never reused).
    """
    for _ in range(SETTLE_TRIES):
        started = time.time_ns()
        try:
            digest, newest = _walk_digest(os.fspath(path))
        except OSError:  # the top is missing or unreadable: taking the snapshot says which
            return None
        if newest < started - SETTLE_NS:
            return digest
        time.sleep(SETTLE_NS / 1e9)
    return f"{digest}-unsettled-{time.time_ns()}"


def _stat_row(rel: str, st: os.stat_result, link: str = "") -> bytes:
    return (f"{rel}\0{stat.S_IFMT(st.st_mode)}\0{st.st_size}\0{st.st_mtime_ns}\0"
            f"{st.st_ctime_ns}\0{st.st_ino}\0{link}\n").encode("utf-8", "surrogateescape")


def _walk_digest(top: str) -> tuple[str, int]:
    """``(sha256 over every entry's stat row, newest ctime seen)``; entries in name order."""
    st = os.lstat(top)
    h = hashlib.sha256(f"{st.st_dev}\n".encode())
    h.update(_stat_row(".", st, os.readlink(top) if stat.S_ISLNK(st.st_mode) else ""))
    newest = st.st_ctime_ns  # ctime, not mtime: the kernel sets it to now, a file cannot fake it
    if not stat.S_ISDIR(st.st_mode):
        return h.hexdigest(), newest
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        try:
            with os.scandir(os.path.join(top, rel_dir) if rel_dir else top) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as err:  # unreadable or removed while walking: recorded, not fatal
            h.update(f"{rel_dir}\0{type(err).__name__}\n".encode("utf-8", "surrogateescape"))
            continue
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            try:
                est = entry.stat(follow_symlinks=False)
                link = os.readlink(entry.path) if stat.S_ISLNK(est.st_mode) else ""
            except OSError as err:  # removed while walking: the key differs from both states
                h.update(f"{rel}\0{type(err).__name__}\n".encode("utf-8", "surrogateescape"))
                continue
            h.update(_stat_row(rel, est, link))
            newest = max(newest, est.st_ctime_ns)
            if stat.S_ISDIR(est.st_mode):
                stack.append(rel)
    return h.hexdigest(), newest


def cache_name(fresh: Freshness, kwargs: dict[str, Any]) -> str:
    """The cache folder for one (freshness, snapshot options): readable label + key hash."""
    extra = "" if not kwargs else repr(sorted(kwargs.items()))
    key = fresh.key if fresh.key is not None else f"{fresh.source}@unknown-{time.time_ns()}"
    label = re.sub(r"[^A-Za-z0-9_.-]+", "_", fresh.label).lstrip(".")[:80] or "snapshot"
    return f"{label}-{hashlib.sha256((key + extra).encode()).hexdigest()[:10]}"


def ensure_snapshot(ref: str | Path, **kwargs: Any) -> Snapshot:
    """A snapshot for ``ref``: an existing snapshot (path, or name under ``snapshots/`` or the
    cache), or any SOURCE, snapshotted once into ``<recon cache>/snapshots`` and reused while its
    :func:`freshness` key is unchanged. ``kwargs`` go to ``take_snapshot`` and are part of the key.

    The snapshot returned is held (a shared lock on its folder) for as long as the object
    lives: no other recon replaces or prunes it meanwhile (module docstring).
    """
    text = str(ref)
    scheme, sep, rest = text.partition(":")
    if not (sep and rest and scheme in SCHEMES):
        return open_snapshot(text)
    base = cache_dir() / "snapshots"
    try:
        fresh = freshness(text)
    except ReconError as err:
        if scheme != "registry":
            raise
        return _offline_registry(base, text, err)
    name = cache_name(fresh, kwargs)
    if fresh.key is not None:
        cached = _cached(base / name)
        if cached is not None:
            return cached
    return take_snapshot(fresh.source, name=name, out=base, publish=True, **kwargs)


def _cached(dest: Path, tries: int = 3) -> Snapshot | None:
    """The finished snapshot at ``dest``, held; None when there is none (or none recon can
    open: it is then taken again, and replaced once nobody holds it)."""
    for _ in range(tries):  # a prune may remove it between the look and the lock
        if not (dest / MANIFEST).is_file():
            return None
        try:
            snap = open_held(dest)
        except ReconError:
            return None
        if snap is not None:
            return snap
    return None


def open_snapshot(ref: str) -> Snapshot:
    """A snapshot by path or by name (``snapshots/`` first, then the cache: :meth:`Snapshot.open`),
    held while the object lives (:func:`recon.snapshots.lock.hold`)."""
    return hold(Snapshot.open(ref))


def _offline_registry(base: Path, text: str, err: ReconError) -> Snapshot:
    """The registry is unreachable: the newest snapshot already taken of this reference, or ``err``."""
    from ..acquire.sources.registry import parse_reference

    cached = _newest_cached(base, f"registry:{parse_reference(text.partition(':')[2])}")
    if cached is None:
        raise err
    print(f"recon: warning: {err}; using the snapshot of {text} taken "
          f"{cached.manifest.created or '?'}", file=sys.stderr)
    return hold(cached)


def _newest_cached(base: Path, ref: str) -> Snapshot | None:
    """The most recently taken cached snapshot whose source reference is ``ref``."""
    best: tuple[tuple[str, int], Snapshot] | None = None
    for manifest in base.glob(f"*/{MANIFEST}"):
        try:
            snap = Snapshot.open(manifest.parent)
        except ReconError:
            continue
        if snap.manifest.source.get("ref") != ref:
            continue
        when = (snap.manifest.created, manifest.stat().st_mtime_ns)
        if best is None or when > best[0]:
            best = (when, snap)
    return best[1] if best else None


def is_recon_snapshot(path: Path) -> bool:
    """True when ``path`` is a real folder (not a link) holding a recon manifest that names it.

    This is the test ``--force`` applies before replacing anything: a
    folder recon did not create under that very name is never removed.
    """
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            return False
        with open(Path(path) / MANIFEST, encoding="utf-8") as fh:
            import json

            data = json.load(fh)
    except (OSError, ValueError):
        return False
    return (isinstance(data, dict) and isinstance(data.get("tool"), dict)
            and data["tool"].get("name") == "recon" and data.get("name") == Path(path).name)
