"""Check a snapshot's files against its manifest: is this still the engine's exact source?

Investigators edit snapshots (a print here, a patched constant there) and copy
them between machines; every later answer (index, slice, run, diff) is only as
good as the files under ``src/``. Verification re-hashes each file and compares
it with the sha256, size, kind and link target the snapshot recorded when it was
taken, and lists files that appeared since. Nothing is written.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .model import FileRecord, Snapshot

CHUNK = 1 << 20


@dataclass
class Verification:
    """What :func:`verify_snapshot` found; ``ok`` when the tree is exactly what was recorded."""

    snapshot: str
    checked: int = 0
    modified: list[str] = field(default_factory=list)  # content (sha256 or size) differs
    missing: list[str] = field(default_factory=list)  # recorded, no longer there
    extra: list[str] = field(default_factory=list)  # there, never recorded
    changed_kind: list[str] = field(default_factory=list)  # a file became a link or the reverse
    retargeted: list[str] = field(default_factory=list)  # a link now points elsewhere

    @property
    def ok(self) -> bool:
        return not (self.modified or self.missing or self.extra or self.changed_kind or self.retargeted)

    def problems(self) -> list[tuple[str, str]]:
        """(what, path) pairs in a stable order, for tables and reports."""
        out: list[tuple[str, str]] = []
        for what in ("modified", "missing", "extra", "changed_kind", "retargeted"):
            out += [(what.replace("_", " "), p) for p in getattr(self, what)]
        return out

    def to_json(self) -> dict[str, Any]:
        return {"snapshot": self.snapshot, "ok": self.ok, "checked": self.checked,
                "modified": self.modified, "missing": self.missing, "extra": self.extra,
                "changed_kind": self.changed_kind, "retargeted": self.retargeted}


def _sha256(path: str) -> tuple[int, str]:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            size += len(chunk)
            h.update(chunk)
    return size, h.hexdigest()


def _on_disk(src: str) -> dict[str, str]:
    """Every non-folder under ``src`` by relative path: "symlink" or "file" (anything else
    that is not a folder counts as a file that does not match)."""
    found: dict[str, str] = {}
    for folder, dirs, names in os.walk(src):  # does not follow links to folders
        rel_folder = os.path.relpath(folder, src)
        for name in names + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            rel = name if rel_folder == "." else f"{rel_folder}/{name}"
            found[rel.replace(os.sep, "/")] = "symlink" if os.path.islink(os.path.join(folder, name)) else "file"
    return found


def verify_snapshot(snap: Snapshot, progress: Callable[[int, int], None] | None = None) -> Verification:
    """Re-hash ``snap``'s files and compare them with its manifest.

    ``progress(done, total)`` is called after each recorded file. Files the
    snapshot listed but did not write (compiled artefacts skipped by default)
    are not expected on disk.
    """
    result = Verification(snapshot=snap.name)
    src = str(snap.src)
    disk = _on_disk(src) if os.path.isdir(src) else {}
    records: dict[str, FileRecord] = snap.files
    total = len(records)
    for done, (rel, rec) in enumerate(sorted(records.items()), 1):
        result.checked += 1
        kind = disk.pop(rel, None)
        path = os.path.join(src, rel)
        if kind is None:
            result.missing.append(rel)
        elif kind != rec.kind:
            result.changed_kind.append(rel)
        elif kind == "symlink":
            if os.readlink(path) != rec.target:
                result.retargeted.append(rel)
        elif not os.path.isfile(path) or (rec.size, rec.sha256) != _sha256(path):
            result.modified.append(rel)
        if progress is not None:
            progress(done, total)
    result.extra = sorted(disk)
    return result
