"""The patched snapshot: the image's snapshot with one file replaced, as a real snapshot folder.

Every other verb reads it like any snapshot (``recon has``, ``recon run``,
``recon recipe run --snapshot NAME``), which is what the proof needs. It is
written into recon's snapshot cache (``<cache>/snapshots/<image>+hotfix-<sha12>``,
so ``Snapshot.open`` finds it by name) through the guarded writer: staged,
every copied file checked against the image's manifest, renamed into place
when complete, and replacing only a snapshot recon made.

Its manifest is the image's (image config, layers, interpreter, ``sys.path``,
distributions, the wheel it came from: engine mode still finds the release's
requirements) with the patched file's record replaced and marked ``hotfix``,
``parent`` pointing at the image's snapshot, and a source that says it is
not the image itself (``scheme: hotfix``, ``ref: <image ref> + hotfix <sha12>``),
so no lookup by source reference can mistake it for the image.
"""

from __future__ import annotations

import hashlib
import os
import stat
from typing import Any

from ..acquire.writer import TreeWriter, commit, staging, write_json
from ..errors import ReconError
from ..paths import cache_dir
from ..snapshots.cache import is_recon_snapshot
from ..snapshots.model import MANIFEST, FileRecord, Manifest, Snapshot

SCHEME = "hotfix"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def patched_name(parent: Snapshot, sha256: str) -> str:
    """``<image snapshot>+hotfix-<sha12 of the patched file>``: one per patched content."""
    return f"{parent.name[:180]}+hotfix-{sha256[:12]}"


def patched_snapshot(parent: Snapshot, rel: str, data: bytes, hotfix: dict[str, Any]) -> Snapshot:
    """The snapshot of ``parent`` with ``rel`` holding ``data`` (made once, then reused)."""
    sha = hashlib.sha256(data).hexdigest()
    base = cache_dir() / "snapshots"
    dest = base / patched_name(parent, sha)
    if _reusable(dest, parent, rel, sha):
        return Snapshot.open(dest)
    with staging(base, dest.name) as tmp:
        with TreeWriter(tmp / "src") as writer:
            _copy_tree(parent, writer, skip=rel)
            writer.write_bytes(rel, data)
        write_json(tmp / MANIFEST, _manifest(parent, dest.name, rel, data, sha, hotfix).to_json())
        if (dest.exists() or dest.is_symlink()) and not is_recon_snapshot(dest):
            raise ReconError(f"{dest} exists and is not a snapshot recon wrote; it is left alone")
        commit(tmp, dest, replace=True)
    return Snapshot.open(dest)


def _reusable(dest: Any, parent: Snapshot, rel: str, sha: str) -> bool:
    """A patched snapshot of the same parent and the same patched bytes is already there."""
    if not is_recon_snapshot(dest):
        return False
    try:
        made = Snapshot.open(dest)
    except ReconError:
        return False
    same_parent = (made.manifest.parent or {}).get("name") == parent.name
    made_rec = made.manifest.files.get(rel)
    return same_parent and made_rec is not None and made_rec.sha256 == sha


def _copy_tree(parent: Snapshot, writer: TreeWriter, *, skip: str) -> None:
    """Every file of the parent, byte-exact and checked against its manifest; links as links.

    Files are read folder by folder through one descriptor per folder, each
    opened ``O_NOFOLLOW`` below the snapshot's ``src`` (as
    :func:`recon.snapshots.model.read_inside` does per file, without re-walking the
    path for each of a release's ~5,000 files).
    """
    by_folder: dict[str, list[tuple[str, FileRecord]]] = {}
    for rel, rec in parent.manifest.files.items():
        if rel == skip:
            continue
        if rec.kind == "symlink":
            writer.symlink(rel, rec.target or "")
            continue
        by_folder.setdefault(rel.rpartition("/")[0], []).append((rel, rec))
    for folder, items in sorted(by_folder.items()):
        fd = _open_folder(parent, folder)
        try:
            for rel, rec in items:
                data = _read_at(fd, rel.rpartition("/")[2], rel, parent)
                want = rec.sha256
                if want and hashlib.sha256(data).hexdigest() != want:
                    raise ReconError(f"{rel} changed on disk since the snapshot was taken (sha256 "
                                     "differs from the manifest; `recon snapshot verify` says "
                                     "more)", where=str(parent.root))
                writer.write_bytes(rel, data)
        finally:
            os.close(fd)


def _open_folder(parent: Snapshot, folder: str) -> int:
    """A descriptor of ``src/<folder>``, every component opened without following a link."""
    fd = os.open(parent.src, _DIR_FLAGS)
    try:
        for part in filter(None, folder.split("/")):
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except OSError as err:
        os.close(fd)
        raise ReconError(f"cannot read {folder} of the snapshot ({err.strerror}); `recon snapshot "
                         "verify` says what changed", where=str(parent.root)) from err
    return fd


def _read_at(dir_fd: int, name: str, rel: str, parent: Snapshot) -> bytes:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as err:
        raise ReconError(f"cannot read {rel} of the snapshot ({err.strerror})",
                         where=str(parent.root)) from err
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ReconError(f"{rel} is not a regular file in the snapshot", where=str(parent.root))
        return fh.read()


def _manifest(parent: Snapshot, name: str, rel: str, data: bytes, sha: str,
              hotfix: dict[str, Any]) -> Manifest:
    source = parent.manifest.source
    files = {**parent.manifest.files,
             rel: FileRecord(path=rel, sha256=sha, size=len(data), layer=None, hotfix=True)}
    return parent.manifest.derived(
        name,
        source={**source, "scheme": SCHEME, "parent_scheme": source.get("scheme"),
                "ref": f"{source.get('ref')} + hotfix {sha[:12]}"},
        files=files,
        parent={"name": parent.name, "path": str(parent.root), "source": source.get("ref"),
                "digest": source.get("digest"), "files": len(files)},
        selection={**parent.manifest.selection, "hotfix": hotfix},
        stats={**parent.manifest.stats, "files": len(files),
               "bytes": sum(r.size for r in files.values())})
