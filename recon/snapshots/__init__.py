"""Snapshots: a package's exact source, hashed, with where every file came from.

:mod:`~recon.snapshots.take` makes one from a source, :mod:`~recon.snapshots.cache`
keeps one per source in the cache, :mod:`~recon.snapshots.verify` re-hashes one,
and :mod:`~recon.snapshots.model` is the read-only view every later stage uses
(``Snapshot``, ``FileRecord``; also importable from here).
"""

from .model import FileRecord, Snapshot, list_snapshots, read_inside

__all__ = ["FileRecord", "Snapshot", "list_snapshots", "read_inside"]
