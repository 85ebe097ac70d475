"""One member of a layer: the unit every source yields and the tar reader produces.

Kept apart from :mod:`recon.acquire.sources.base` so that the tar reader, which makes
entries, and the layer model, which reads tars, depend on it and not on each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

FILE, DIR, SYMLINK, HARDLINK, OTHER = "file", "dir", "symlink", "hardlink", "other"


@dataclass
class Entry:
    """One member of a layer. ``open()`` is valid only while the layer is being iterated."""

    name: str  # path relative to the image root, no leading "/" ("" is the root itself)
    kind: str  # FILE | DIR | SYMLINK | HARDLINK | OTHER (device, fifo, socket)
    size: int = 0
    linkname: str | None = None  # symlink target as stored / hardlink target (root-relative)
    mode: int = 0o644
    open: Callable[[], IO[bytes]] | None = None
