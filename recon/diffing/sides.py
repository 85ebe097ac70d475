"""The two (or more) sides of a comparison: snapshots, or any SOURCE snapshotted once and cached.

``recon diff A B`` and ``recon bisect`` accept a snapshot (name or path) or
any SOURCE. A SOURCE is snapshotted into ``<recon cache>/snapshots`` and
reused afterwards. The cache key must change whenever the thing behind the
reference can change, or a comparison silently reads yesterday's image:

* ``pip:NAME==X`` resolves to a wheel file name, which never changes content;
* ``docker:REF`` is keyed by the image ID the local engine reports for REF
  today (tags such as ``:latest`` move);
* file sources (``docker-archive:``, ``oci-archive:``, ``wheel:``) by path,
  size and modification time; directory sources (``oci:``, ``dir:``) by the
  same for every file under them (a stat walk, milliseconds).

The generic :func:`recon.snapshotter.ensure_snapshot` keys everything but
``pip:`` by the reference text alone, which is why this module keys the
mutable sources itself.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..errors import ReconError
from ..paths import cache_dir
from ..snapshot import MANIFEST, Snapshot
from ..snapshotter import ensure_snapshot, take_snapshot
from ..sources import SCHEMES, split_ref


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


def _fingerprint(scheme: str, rest: str) -> str:
    """What identifies the current content behind a mutable SOURCE (see the module docstring)."""
    if scheme == "docker":
        try:
            import docker

            return str(docker.from_env(timeout=60).images.get(rest).id)
        except Exception as err:  # no engine, no image: take_snapshot reports it properly
            return f"unresolved:{type(err).__name__}"
    path = Path(rest)
    if path.is_dir():
        h = hashlib.sha256()
        for root, dirs, files in os.walk(path):
            dirs.sort()
            for name in sorted(files):
                full = os.path.join(root, name)
                try:
                    st = os.lstat(full)
                except OSError:
                    continue
                h.update(f"{os.path.relpath(full, path)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        return h.hexdigest()
    try:
        st = path.stat()
    except OSError:
        return "missing"
    return f"{st.st_size}:{st.st_mtime_ns}"


def open_side(ref: str | Path | Snapshot, *, package: str | None = None) -> Snapshot:
    """A :class:`Snapshot` for ``ref``: a snapshot as is, or a SOURCE snapshotted once and cached."""
    if isinstance(ref, Snapshot):
        return ref
    text = normalize_ref(str(ref))
    if not is_source(text):
        return Snapshot.open(text)
    scheme, rest = split_ref(text)
    kwargs = {"package": package} if package else {}
    if scheme == "pip":
        return ensure_snapshot(text, **kwargs)
    if scheme != "docker":
        rest = str(Path(rest).resolve())
    key = f"{scheme}:{rest}\0{_fingerprint(scheme, rest)}\0{package or ''}"
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{scheme}-{Path(rest).name or rest}")[:60]
    name = f"{stem}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
    base = cache_dir() / "snapshots"
    dest = base / name
    if (dest / MANIFEST).is_file():
        return Snapshot.open(dest)
    return take_snapshot(f"{scheme}:{rest}", name=name, out=base, force=True, **kwargs)


def open_sides(refs: Sequence[str | Path | Snapshot], *, jobs: int = 4,
               package: str | None = None) -> list[Snapshot]:
    """Open many sides at once: downloads and snapshots run in parallel threads.

    Threads suffice: the slow parts are ``pip download`` (a subprocess),
    inflating and hashing (C code that releases the GIL) and disk writes.
    The first failure is raised as a ReconError naming its reference.
    """
    if len(refs) <= 1 or jobs <= 1:
        return [open_side(r, package=package) for r in refs]

    def one(ref: str | Path | Snapshot) -> Snapshot:
        try:
            return open_side(ref, package=package)
        except ReconError as err:
            raise ReconError(f"{ref}: {err}") from err

    with ThreadPoolExecutor(max_workers=min(jobs, len(refs))) as pool:
        return list(pool.map(one, refs))


def display_label(snap: Snapshot) -> str:
    """``vllm 0.33.0`` for a release from PyPI or a wheel; the full label (with the
    snapshot's name) for images and folders, where the version alone does not say which."""
    scheme = (snap.manifest.get("source") or {}).get("scheme")
    if scheme in ("pip", "wheel") and snap.version:
        return f"{snap.package} {snap.version}"
    return snap.label
