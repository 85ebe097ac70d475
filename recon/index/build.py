"""``load_index``: index a snapshot, parsing only what the cache does not already hold.

Parsing is CPU-bound and the GIL serializes it, so misses are parsed in a
process pool (fork on Linux: workers start in milliseconds and inherit the
generated serializers). Each worker parses a batch, writes it as one cache
pack itself and sends back the records' JSON text, which the parent decodes
with the C JSON decoder and enters in the cache catalog; nothing but strings
crosses the process boundary.

The cyclic garbage collector is paused while records are parsed or
assembled: ASTs and index records hold no reference cycles, and the
collector's repeated scans of millions of young objects otherwise cost about
a fifth of the total time.

Records are looked up by the sha256 of each file's bytes on disk, not the
manifest's (an edited snapshot is never indexed stale), and a parsed
record is stored under the sha256 of the very bytes parsed. Hashing every
``.py`` file of a vLLM release (3,231 files, 50 MB, page cache warm) costs
0.1-0.3 s on a warm index of about 1 s: the price of never serving a record
of bytes that are no longer there.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import multiprocessing
import os
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from .. import progress
from ..errors import ReconError
from ..snapshots.model import FileRecord, Snapshot, read_inside
from .cache import IndexCache, decode, default_root, encode, new_pack_name, write_pack
from .models import IndexStats
from .snapshot_index import SnapshotIndex, assemble
from .visitor import index_source

#: Below this many files to parse, a pool costs more than it saves.
POOL_THRESHOLD = 24


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC (refcounting still frees everything here)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _parse_one(src: str, rel: str) -> tuple[str, str]:
    """Parse one file: ``(sha256 of the bytes parsed, record JSON)``.

    The key is computed from the very bytes that were parsed, so a file
    edited between the lookup and the parse is still stored under the key of
    what the record describes. Read without following links (a snapshot
    folder edited to hold a host link is an error record, not a host read).
    """
    try:
        data = read_inside(src, rel)
    except ReconError as err:
        return "", encode({"v": None, "error": str(err), "lines": 0})
    return hashlib.sha256(data).hexdigest(), encode(index_source(data))


def _parse_batch(src: str, paths: list[str], cache_root: str | None,
                 pack: str) -> list[tuple[str, str]]:
    """Worker body: parse a batch, store it as one cache pack, return ``(sha256, record JSON)``s."""
    gc.disable()  # the worker's own objects hold no cycles; see module docstring
    parsed = [_parse_one(src, path) for path in paths]
    if cache_root is not None:
        # unreadable files (record version None) are not cached: the next run retries them
        write_pack(Path(cache_root), pack, ((sha, text) for sha, text in parsed
                                            if not text.startswith('{"v":null')))
    return parsed


def _batches(items: list[tuple[str, int]], workers: int) -> list[list[str]]:
    """Largest files first, dealt round-robin into ~8 batches per worker, for even finishing."""
    items = sorted(items, key=lambda t: -t[1])
    count = max(1, min(len(items), workers * 8))
    out: list[list[str]] = [[] for _ in range(count)]
    for i, (path, _) in enumerate(items):
        out[i % count].append(path)
    return out


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def load_index(snapshot: Snapshot | str | Path, *, paths: Iterable[str] | None = None,
               workers: int | None = None, cache: bool = True,
               cache_root: Path | None = None) -> SnapshotIndex:
    """Index every ``.py`` file of ``snapshot`` (or only ``paths``) and return the index.

    ``workers``: processes for parsing (default: the CPUs this process may
    use; 0 parses in this process). ``cache=False`` neither reads nor writes
    the per-file cache; ``cache_root`` moves it (tests, benchmarks).
    """
    start = time.perf_counter()
    snap = snapshot if isinstance(snapshot, Snapshot) else Snapshot.open(snapshot)
    files = list(snap.python_files())
    if paths is not None:
        wanted = set(paths)
        missing = sorted(wanted - {f.path for f in files})
        if missing:
            raise ReconError(f"not a Python file of {snap.label}: {', '.join(missing[:5])}")
        files = [f for f in files if f.path in wanted]
    store = IndexCache((cache_root or default_root()) if cache else None)
    stats = IndexStats(files=len(files))
    with gc_paused():
        # The raw records die when _collect returns, before the collector resumes.
        records, edited = _collect(snap, files, store, workers, stats)
        index = assemble(snap, records, stats)
        index.edited = edited
    stats.seconds = time.perf_counter() - start
    return index


def _collect(snap: Snapshot, files: list[FileRecord], store: IndexCache, workers: int | None,
             stats: IndexStats) -> tuple[list[tuple[str, str, dict[str, Any]]], list[str]]:
    """``(path, sha256, record)`` for ``files``, from the cache or parsed now, and the edited paths.

    Records are keyed by the sha256 of the bytes on disk now, not the
    manifest's: a snapshot file edited after it was taken is indexed as it
    is (and listed as edited), never served from the record of its old bytes.
    """
    shas = {f.path: _sha256(snap.src, f.path) for f in files}
    edited = [f.path for f in files if f.sha256 and shas[f.path] != f.sha256]
    found = store.get_many(s for s in shas.values() if s)
    records: dict[str, tuple[str, str, dict[str, Any]]] = {}
    misses: list[tuple[str, int]] = []
    for f in files:
        rec = found.get(shas[f.path])
        if rec is not None:
            records[f.path] = (f.path, shas[f.path], rec)
        else:
            misses.append((f.path, f.size))
    stats.cached = len(records)
    stats.parsed = len(misses)
    if misses:
        nworkers = default_workers() if workers is None else workers
        root = str(store.root) if store.root is not None else None
        packed: dict[str, str] = {}
        with progress.step(f"indexing {snap.name}", total=len(misses), unit="files") as line:
            for path, sha, text, pack in _parse_all(snap, misses, nworkers, root, stats):
                rec = decode(text)
                if rec is None:
                    rec = _unreadable(text)
                else:
                    packed[sha] = pack
                records[path] = (path, sha, rec)
                line.update(advance=1)
        store.add(packed)
    return [records[f.path] for f in files], edited


def _parse_all(snap: Snapshot, misses: list[tuple[str, int]], workers: int,
               cache_root: str | None, stats: IndexStats) -> Iterator[tuple[str, str, str, str]]:
    """Yield ``(path, sha256 of the bytes parsed, record JSON, pack name)`` for every miss."""
    src = str(snap.src)
    if workers <= 0 or len(misses) < POOL_THRESHOLD:
        stats.workers = 0
        pack = new_pack_name()
        parsed = _parse_batch(src, [p for p, _ in misses], cache_root, pack)
        for (path, _), (sha, text) in zip(misses, parsed, strict=True):
            yield path, sha, text, pack
        return
    batches = _batches(misses, workers)
    packs = [new_pack_name(i) for i in range(len(batches))]
    stats.workers = min(workers, len(batches))
    ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods()
                                      else None)
    with ProcessPoolExecutor(max_workers=stats.workers, mp_context=ctx) as pool:
        futures = [pool.submit(_parse_batch, src, list(batch), cache_root, pack)
                   for batch, pack in zip(batches, packs, strict=True)]
        for batch, pack, fut in zip(batches, packs, futures, strict=True):
            for path, (sha, text) in zip(batch, fut.result(), strict=True):
                yield path, sha, text, pack


def _unreadable(text: str) -> dict[str, Any]:
    import json

    try:
        err = json.loads(text).get("error")
    except ValueError:
        err = None
    return {"v": None, "error": err or "unreadable index record", "lines": 0}


def _sha256(src: Path, rel: str) -> str:
    """sha256 of the file's bytes now ("" if unreadable or a link: a miss, and the parse says why)."""
    try:
        return hashlib.sha256(read_inside(src, rel)).hexdigest()
    except ReconError:
        return ""
