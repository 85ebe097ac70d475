"""recon: offline, static source reconnaissance for LLM inference engines.

The Python API is what the CLI calls; notebooks use it directly::

    import recon
    snap = recon.snapshot("pip:vllm==0.33.0")
    snap.files["vllm/config/compilation.py"].sha256
"""

from __future__ import annotations

from .errors import ReconError, UnsafeArchiveError
from .snapshots.model import FileRecord, Snapshot, list_snapshots
from .snapshots.verify import Verification, verify_snapshot
from .version import __version__


def snapshot(source: str, **kwargs):  # noqa: ANN201 - re-exported below
    """Take a snapshot of ``source`` (see :func:`recon.snapshots.take.take_snapshot`).

    Running the same call again returns the snapshot it wrote when nothing behind the
    source changed (a notebook cell run twice); a changed source under the same name
    is still refused unless ``force=True``.
    """
    from .snapshots.take import take_snapshot

    kwargs.setdefault("reuse_same", True)
    return take_snapshot(source, **kwargs)


def open_snapshot(ref: str) -> Snapshot:
    """Open an existing snapshot by name or path."""
    return Snapshot.open(ref)


__all__ = [
    "FileRecord",
    "ReconError",
    "Snapshot",
    "UnsafeArchiveError",
    "Verification",
    "__version__",
    "list_snapshots",
    "open_snapshot",
    "snapshot",
    "verify_snapshot",
]
