"""The image, distributions and files sections: manifest against manifest, no source read.

All three come from what the snapshot manifests already record (image
config, installed distributions, per-file sha256), so they cost
milliseconds even for two 5,000-file packages.
"""

from __future__ import annotations

from typing import Any

from packaging.utils import canonicalize_name

from ..snapshots.model import FileRecord, Snapshot
from .model import FileDiff, ImageDiff, KeyedDiff

#: Image config fields compared as whole values (env and labels are compared key by key).
IMAGE_FIELDS = ("entrypoint", "cmd", "working_dir", "user", "os", "architecture")


def keyed_diff(old: dict[str, Any], new: dict[str, Any]) -> KeyedDiff:
    """Added, removed and changed keys of two flat tables, in key order."""
    out = KeyedDiff()
    for key in sorted(old.keys() | new.keys()):
        if key not in old:
            out.added[key] = new[key]
        elif key not in new:
            out.removed[key] = old[key]
        elif old[key] != new[key]:
            out.changed[key] = (old[key], new[key])
    return out


def _env(image: dict[str, Any] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in (image or {}).get("env") or []:
        key, _, value = str(item).partition("=")
        out[key] = value
    return out


def diff_image(a: Snapshot, b: Snapshot) -> ImageDiff:
    """Environment, labels, entrypoint, cmd, working dir, user and Python version."""
    ia, ib = a.manifest.image, b.manifest.image
    fields: dict[str, tuple[Any, Any]] = {}
    for name in IMAGE_FIELDS:
        va, vb = (ia or {}).get(name), (ib or {}).get(name)
        if (va or None) != (vb or None):
            fields[name] = (va, vb)
    pa, pb = a.manifest.python.version, b.manifest.python.version
    if pa != pb:
        fields["python"] = (pa, pb)
    note = None
    if ia is None and ib is None:
        note = "neither side is a container image (no image config to compare)"
    elif ia is None or ib is None:
        note = f"only {'B' if ia is None else 'A'} is a container image"
    return ImageDiff(env=keyed_diff(_env(ia), _env(ib)),
                     labels=keyed_diff((ia or {}).get("labels") or {}, (ib or {}).get("labels") or {}),
                     fields=fields, note=note, layers=diff_layers(image_layers(a), image_layers(b)))


def image_layers(snap: Snapshot) -> list[str]:
    """The image's layers, bottom first, by diff id, as the manifest records them ([] when it
    does not: not an image, or one layer standing for the engine's merged view)."""
    from ..acquire.sources.daemon import is_merged_view

    m = snap.manifest
    listed = m.source.get("layer_diff_ids")
    if listed:
        return [str(d) for d in listed]
    if m.image is None or any(is_merged_view(layer) for layer in m.layers):
        return []
    return [str(layer.get("diff_id") or layer.get("digest")) for layer in m.layers]


def diff_layers(a: list[str], b: list[str]) -> KeyedDiff:
    """Layers only B has (added) and only A has (removed), each with its place in its image."""
    out = KeyedDiff()
    if not (a and b):
        return out
    out.added = {d: f"layer {i} of {len(b)}" for i, d in enumerate(b) if d not in a}
    out.removed = {d: f"layer {i} of {len(a)}" for i, d in enumerate(a) if d not in b}
    return out


def _dists(snap: Snapshot) -> dict[str, str]:
    """Canonical name -> version; a package installed twice shows both versions."""
    out: dict[str, list[str]] = {}
    for d in snap.manifest.distributions:
        name = canonicalize_name(str(d.get("name", "")))
        if not name:
            continue
        versions = out.setdefault(name, [])
        version = str(d.get("version") or "?")
        if version not in versions:
            versions.append(version)
    return {k: " + ".join(v) for k, v in out.items()}


def diff_distributions(a: Snapshot, b: Snapshot) -> KeyedDiff:
    """Python distributions installed in the image: added, removed, version changed."""
    return keyed_diff(_dists(a), _dists(b))


def _identity(rec: FileRecord) -> tuple[str, str | None]:
    if rec.kind == "symlink":
        return "symlink", rec.target
    return "file", rec.sha256


def diff_files(a: Snapshot, b: Snapshot) -> FileDiff:
    """The package's files by content (sha256), symlinks by target, in path order."""
    fa = a.manifest.files
    fb = b.manifest.files
    added = sorted(p for p in fb if p not in fa)
    removed = sorted(p for p in fa if p not in fb)
    changed = []
    same = 0
    for p in sorted(fa.keys() & fb.keys()):
        if _identity(fa[p]) != _identity(fb[p]):
            changed.append(p)
        else:
            same += 1
    sizes = {p: (fa[p].size if p in fa else None, fb[p].size if p in fb else None)
             for p in (*added, *removed, *changed)}
    return FileDiff(added=added, removed=removed, changed=changed, unchanged=same, sizes=sizes)


def python_paths(snap: Snapshot, paths: list[str]) -> list[str]:
    """The regular ``.py`` files among ``paths`` (what the index can parse)."""
    files = snap.manifest.files
    return [p for p in paths if p.endswith(".py") and p in files
            and files[p].kind == "file"]
