"""Snapshots: a package's exact source, hashed, with where every file came from.

:mod:`~recon.snapshots.take` makes one from a source, :mod:`~recon.snapshots.cache`
keeps one per source in the cache, :mod:`~recon.snapshots.verify` re-hashes one,
:mod:`~recon.snapshots.manifest` is its typed ``manifest.json``, and
:mod:`~recon.snapshots.model` is the read-only view every later stage uses
(``Snapshot``, ``Manifest``, ``FileRecord``; also importable from here).
"""

from .manifest import FileRecord, Manifest
from .model import Snapshot, list_snapshots, read_inside

__all__ = ["FileRecord", "Manifest", "Snapshot", "list_snapshots", "read_inside"]
