"""The two (or more) sides of a comparison: snapshots, or any SOURCE snapshotted once and cached.

``recon diff A B`` and ``recon bisect`` accept a snapshot (name or path) or
any SOURCE (a bare ``NAME==VER`` pin means ``pip:NAME==VER``). A SOURCE goes
through :func:`recon.snapshots.cache.ensure_snapshot`, whose one freshness key is
shared with every other verb: a comparison never reads yesterday's image,
and a snapshot that ``diff`` took is the one ``index`` or ``run`` reuse.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .. import progress
from ..acquire.sources import SCHEMES
from ..errors import ReconError
from ..snapshots.cache import ensure_snapshot
from ..snapshots.model import Snapshot


def is_source(ref: str) -> bool:
    """True for ``scheme:rest`` references recon can snapshot (not snapshot names or paths)."""
    scheme, sep, rest = ref.partition(":")
    return bool(sep and rest) and scheme in SCHEMES


def normalize_ref(ref: str) -> str:
    """``vllm==0.33.0`` (a bare pin, as bisect lists take it) -> ``pip:vllm==0.33.0``."""
    text = ref.strip()
    if not is_source(text) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*==[^=\s,]+", text) \
            and not Path(text).exists():
        return f"pip:{text}"
    return text


def open_side(ref: str | Path | Snapshot, *, package: str | None = None) -> Snapshot:
    """A :class:`Snapshot` for ``ref``: a snapshot as is, or a SOURCE snapshotted once and cached."""
    if isinstance(ref, Snapshot):
        return ref
    text = normalize_ref(str(ref))
    return ensure_snapshot(text, **({"package": package} if package and is_source(text) else {}))


def open_sides(refs: Sequence[str | Path | Snapshot], *, jobs: int = 4,
               package: str | None = None) -> list[Snapshot]:
    """Open many sides at once: downloads and snapshots run in parallel threads.

    Threads suffice: the slow parts are ``pip download`` (a subprocess),
    inflating and hashing (C code that releases the GIL) and disk writes.
    The first failure is raised as a ReconError naming its reference.
    """
    with progress.step("opening sides (snapshots are downloaded and taken once, then cached)",
                       total=len(refs), unit="sides") as line:
        if len(refs) <= 1 or jobs <= 1:
            opened = []
            for r in refs:
                opened.append(open_side(r, package=package))
                line.update(advance=1)
            return opened

        def one(ref: str | Path | Snapshot) -> Snapshot:
            try:
                return open_side(ref, package=package)
            except ReconError as err:
                raise ReconError(f"{ref}: {err}") from err
            finally:
                line.update(advance=1)

        with ThreadPoolExecutor(max_workers=min(jobs, len(refs))) as pool:
            return list(pool.map(one, refs))


def display_label(snap: Snapshot) -> str:
    """``vllm 0.33.0`` for a release from PyPI or a wheel; the full label (with the
    snapshot's name) for images and folders, where the version alone does not say which."""
    scheme = (snap.manifest.source).get("scheme")
    if scheme in ("pip", "wheel") and snap.version:
        return f"{snap.package} {snap.version}"
    return snap.label
