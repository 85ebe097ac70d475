"""The per-file index cache: one JSON record per file content, keyed by its sha256.

A record depends only on the file's bytes and on the Python that parsed it
(what parses, and the AST shape, change between Python versions), so the
key is ``(record version, Python major.minor, sha256)``. Two snapshots that
ship the same file share one entry; a second index of the same snapshot
reads records and parses nothing. Entries are written through
:func:`recon.writer.write_text` (temporary file + rename), so concurrent
indexers never see half a record; a corrupt or foreign entry is a miss.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any

from ..paths import cache_dir
from ..writer import write_text
from .visitor import RECORD_VERSION


def default_root() -> Path:
    """``<recon cache>/index/r<version>-py<X.Y>``: where records live."""
    return cache_dir() / "index" / f"r{RECORD_VERSION}-py{sys.version_info[0]}.{sys.version_info[1]}"


class IndexCache:
    """Read and write per-file records under ``root`` (None: caching off)."""

    def __init__(self, root: Path | None) -> None:
        self.root = root

    def entry(self, sha256: str) -> Path | None:
        if self.root is None:
            return None
        return self.root / sha256[:2] / f"{sha256}.json"

    def get(self, sha256: str) -> dict[str, Any] | None:
        path = self.entry(sha256)
        if path is None:
            return None
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError:
            return None
        return decode(text)

    def put_text(self, sha256: str, text: str) -> None:
        path = self.entry(sha256)
        if path is not None:
            with contextlib.suppress(OSError):  # a read-only or full cache only costs speed
                write_text(path, text)


def encode(record: dict[str, Any]) -> str:
    """Compact ASCII JSON (C encoder; lone surrogates from undecodable bytes survive as escapes)."""
    return json.dumps(record, separators=(",", ":"))


def decode(text: str) -> dict[str, Any] | None:
    try:
        record = json.loads(text)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("v") != RECORD_VERSION:
        return None
    return record
