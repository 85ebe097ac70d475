"""The index cache: one JSON record per file content, keyed by its sha256, stored in packs.

A record depends only on the file's bytes and on the Python that parsed it
(what parses, and the AST shape, change between Python versions), so the
key is ``(record version, Python major.minor, sha256)``. The sha256 is that
of the bytes on disk when the index runs (and, for a record written, of the
very bytes parsed), never the manifest's: an edited snapshot file is a miss,
not a stale hit (see :func:`recon.index.build._collect`). Two snapshots that
ship the same file share one record; a second index of the same snapshot
reads records and parses nothing.

Records are written in packs, one per batch a worker parsed (a JSON-lines
file of ``sha256<TAB>record``), plus a catalog mapping each sha256 to its
pack. One file per record was measured first: writing 3,231 small files
cost 2 s of CPU (mostly system time) against 7 s for parsing them, a quarter
of a cold index; 16 packs cost almost nothing, and a warm load reads 16
files instead of 3,231. Everything is written through
:func:`recon.acquire.writer.write_text` (temporary file + rename), so a reader never
sees half a pack. Concurrent indexers may lose each other's catalog
entries (last writer wins): that only costs a re-parse later. A missing or
corrupt pack is a miss.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..acquire.writer import write_text
from ..paths import cache_dir
from .visitor import RECORD_VERSION

CATALOG = "catalog.json"


def default_root() -> Path:
    """``<recon cache>/index/r<version>-py<X.Y>``: where packs and the catalog live."""
    return cache_dir() / "index" / f"r{RECORD_VERSION}-py{sys.version_info[0]}.{sys.version_info[1]}"


def new_pack_name(n: int = 0) -> str:
    """Unique across processes and runs: time, pid and a per-run number."""
    return f"{time.time_ns():x}-{os.getpid()}-{n}"


def write_pack(root: Path, name: str, entries: Iterable[tuple[str, str]]) -> None:
    """Write ``(sha256, record JSON)`` pairs as one pack (a failure only costs speed)."""
    text = "".join(f"{sha}\t{rec}\n" for sha, rec in entries)
    with contextlib.suppress(OSError):
        write_text(root / "packs" / f"{name}.jsonl", text)


class IndexCache:
    """Looks records up by sha256 under ``root`` (None: caching off)."""

    def __init__(self, root: Path | None) -> None:
        self.root = root
        self._catalog: dict[str, str] | None = None

    def catalog(self) -> dict[str, str]:
        if self._catalog is None:
            self._catalog = _read_catalog(self.root) if self.root is not None else {}
        return self._catalog

    def get_many(self, shas: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Records found for ``shas`` (absent ones are misses)."""
        if self.root is None:
            return {}
        catalog = self.catalog()
        by_pack: dict[str, list[str]] = {}
        for sha in shas:
            pack = catalog.get(sha)
            if pack is not None:
                by_pack.setdefault(pack, []).append(sha)
        found: dict[str, dict[str, Any]] = {}
        for pack, wanted in by_pack.items():
            try:
                with open(self.root / "packs" / f"{pack}.jsonl", encoding="utf-8") as fh:
                    lines = fh.read().split("\n")
            except OSError:
                continue
            texts = dict(line.split("\t", 1) for line in lines if "\t" in line)
            for sha in wanted:
                text = texts.get(sha)
                rec = decode(text) if text is not None else None
                if rec is not None:
                    found[sha] = rec
        return found

    def add(self, entries: dict[str, str]) -> None:
        """Record ``{sha256: pack}`` in the catalog (merged with what is on disk now)."""
        if self.root is None or not entries:
            return
        current = _read_catalog(self.root)
        if not current:
            prune_older_versions(self.root)  # a new record format: the old packs are dead weight
        current.update(entries)
        with contextlib.suppress(OSError):
            write_text(self.root / CATALOG, json.dumps(current, separators=(",", ":")))
        self._catalog = current


def prune_older_versions(root: Path) -> list[Path]:
    """Remove sibling caches of older record versions for the same Python; return them.

    Records of an older version are never read again (the key includes the
    version), and a vLLM release's records take about 50 MB. Newer versions
    (another recon installed side by side) and other Pythons are left alone.
    """
    import re
    import shutil

    m = re.fullmatch(r"r(\d+)-py(\d+\.\d+)", root.name)
    if m is None or not root.parent.is_dir():
        return []
    mine, py = int(m.group(1)), m.group(2)
    gone = []
    for sib in root.parent.iterdir():
        sm = re.fullmatch(r"r(\d+)-py(\d+\.\d+)", sib.name)
        if sm and sm.group(2) == py and int(sm.group(1)) < mine and sib.is_dir():
            shutil.rmtree(sib, ignore_errors=True)
            gone.append(sib)
    return gone


def _read_catalog(root: Path) -> dict[str, str]:
    try:
        with open(root / CATALOG, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def encode(record: dict[str, Any]) -> str:
    """Compact ASCII JSON (C encoder; no raw newlines, so one record is one pack line)."""
    return json.dumps(record, separators=(",", ":"))


def decode(text: str) -> dict[str, Any] | None:
    try:
        record = json.loads(text)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("v") != RECORD_VERSION:
        return None
    return record
