"""Write the hotfix folder through recon's guarded writer.

Layout::

    <folder>/
        <file>.py           the patched file, to mount read-only over the image's
        hotfix.diff         the unified diff against the image's file
        hotfix.json         sha256 of both files, pieces, source, closure, proof, mount lines
        README.md           docker run / compose / Kubernetes lines, verify, rollback
        verify_hotfix.py    the in-container check (standard library only)

The folder is built in a locked staging folder and renamed into place when
complete (:mod:`recon.acquire.writer`), so a failure never leaves a folder that
looks finished. ``force`` replaces an existing folder only when it is a
hotfix folder recon wrote (its ``hotfix.json`` says so, next to
``verify_hotfix.py``); anything else is refused in one line. Files are
0644 and the folder 0755: the engine often runs as another user.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from pathlib import Path

from ..acquire.writer import (
    commit,
    open_output_folder,
    read_small_at,
    remove_tree_at,
    staged_fd,
    staging,
    write_bytes_at,
    writing,
)
from ..errors import ReconError
from .model import HotfixResult
from .mount import VERIFY
from .proof import VERIFY_SOURCE
from .readme import render_readme

MANIFEST = "hotfix.json"
KIND = "recon-hotfix"
FORMAT = 1
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def write_hotfix(result: HotfixResult, dest: Path, *, force: bool = False) -> Path:
    """Write the folder at ``dest``; return its absolute path."""
    dest = Path(dest)
    _check_dest(dest, force)
    files = {
        result.mount["file"]: result.patched_bytes,
        "hotfix.diff": result.diff.encode("utf-8", "surrogateescape"),
        MANIFEST: (json.dumps({"kind": KIND, "format": FORMAT, **result.to_json(),
                               "output": str(dest.resolve())}, indent=2, default=str) + "\n"
                   ).encode("utf-8"),
        "README.md": render_readme(result, dest.name).encode("utf-8"),
        VERIFY: VERIFY_SOURCE.read_bytes(),
    }
    with staging(dest.parent, dest.name) as tmp:
        tfd = staged_fd(tmp)
        for name, data in files.items():
            write_bytes_at(tfd, name, data, label=dest.parent)
        _check_dest(dest, force)  # again: something may have appeared meanwhile
        if force:
            _remove_old(dest)
        commit(tmp, dest)
    return dest.resolve()


def _check_dest(dest: Path, force: bool) -> None:
    if not (dest.exists() or dest.is_symlink()):
        return
    if not force:
        raise ReconError(f"{dest} already exists (use --force to replace it)")
    if not is_hotfix_folder(dest):
        raise ReconError(f"{dest} is not a hotfix folder recon wrote, so --force does not replace "
                         "it: move it away or choose another -o")


def is_hotfix_folder(path: Path) -> bool:
    """A real folder (not a link) with recon's ``hotfix.json`` and ``verify_hotfix.py``."""
    try:
        fd = os.open(path, _DIR_FLAGS)
    except OSError:
        return False
    try:
        data = read_small_at(fd, MANIFEST, 64 << 20)
        script = read_small_at(fd, VERIFY, 64 << 20)
    finally:
        os.close(fd)
    try:
        obj = json.loads(data) if data is not None else None
    except ValueError:
        return False
    return isinstance(obj, dict) and obj.get("kind") == KIND and script is not None


def _remove_old(dest: Path) -> None:
    """Move the old hotfix folder aside under a staging-style name, then remove it (no links)."""
    pfd = open_output_folder(dest.parent)
    try:
        trash = f".{dest.name[:64]}.partial-{os.getpid()}-{secrets.token_hex(4)}"
        with writing(dest.parent):
            os.rename(dest.name, trash, src_dir_fd=pfd, dst_dir_fd=pfd)
        with contextlib.suppress(OSError):
            remove_tree_at(pfd, trash)
    finally:
        os.close(pfd)
