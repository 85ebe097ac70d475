"""Where recon keeps things on disk: the shared cache and the default snapshot folder.

Both can be moved with environment variables so tests, CI and users on shared
machines can point every process at one cache (wheels are big; download once).
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$RECON_CACHE`` or ``~/.cache/recon``: wheels, index entries, blobs."""
    root = os.environ.get("RECON_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "recon"
    )
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def snapshots_dir() -> Path:
    """``$RECON_SNAPSHOTS`` or ``./snapshots``: where ``recon snapshot`` writes by default."""
    return Path(os.environ.get("RECON_SNAPSHOTS") or "snapshots")
