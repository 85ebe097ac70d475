"""``take_snapshot``: from any SOURCE to a finished, hashed snapshot folder.

The steps are deliberately plain: open the source (no engine start), squash
its layers in one top-down pass into a staging folder, decide which copy of
the package the image's Python imports, move that copy to ``src/``, write the
manifest, and rename the staging folder into place. Any failure removes the
staging folder, so a snapshot folder with a manifest is always complete.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from . import __version__
from .errors import PackageNotFound, ReconError
from .layers import DEFAULT_PACKAGES, CaptureLimits, ProgressFn, Squasher
from .locate import (
    choose,
    distributions,
    extra_roots_from,
    find_copies,
    interpreter,
    package_version,
)
from .paths import snapshots_dir
from .snapshot import FORMAT_VERSION, MANIFEST, Snapshot
from .sources import open_source
from .writer import TreeWriter, commit, staging, write_json

_NOT_PACKAGES = re.compile(r"(\.dist-info|\.egg-info|\.pth|\.py[cdo]?|\.so|__pycache__|\.egg-link|"
                           r"_distutils_hack|^_virtualenv|^__editable__.*|\.libs)$")


def default_name(package: str, version: str | None, scheme: str, digest: str | None) -> str:
    base = f"{package}-{version or 'unknown'}"
    if scheme in ("pip", "wheel"):
        return base
    tag = (digest or "").split(":")[-1][:12]
    return f"{base}-{scheme}-{tag}" if tag else f"{base}-{scheme}"


def take_snapshot(source: str, *, name: str | None = None, out: str | Path | None = None,
                  package: str | None = None, python: str | None = None,
                  include: Iterable[str] = (), all_files: bool = False,
                  platform: str | None = None, limits: CaptureLimits | None = None,
                  force: bool = False, progress: ProgressFn | None = None,
                  docker_read: str = "site") -> Snapshot:
    """Snapshot ``source`` (``docker:``, ``docker-archive:``, ``oci:``, ``oci-archive:``,
    ``wheel:``, ``pip:``, ``dir:``) and return the opened :class:`Snapshot`."""
    limits = limits or CaptureLimits()
    packages = [package] if package else list(DEFAULT_PACKAGES)
    base_dir = Path(out) if out else snapshots_dir()
    base_dir.mkdir(parents=True, exist_ok=True)
    image = open_source(source, packages=packages, platform=platform,
                        max_layer_size=limits.max_layer_size, docker_read=docker_read,
                        python=python, progress=progress)
    try:
        # Stage in a scratch folder first: the final name depends on the version found.
        with staging(base_dir, "snapshot") as work:
            writer = TreeWriter(work / "rootfs")
            try:
                env_roots = []
                if image.config:
                    env_roots = [p for p in (image.config.env_dict().get("PYTHONPATH") or "").split(":") if p]
                roots = [*env_roots, *image.extra.get("site_dirs", [])]
                squasher = Squasher(writer, packages=packages, extra_roots=roots, include=include,
                                    all_files=all_files, limits=limits, progress=progress)
                scan = squasher.run(image)
                late = [r for r in extra_roots_from(scan, packages) if r not in roots]
                if late:  # .pth / editable / symlinked package roots: one more pass for them
                    second = Squasher(writer, packages=packages, extra_roots=late, include=include,
                                      all_files=all_files, limits=limits, only_roots=True,
                                      progress=progress)
                    second.result = scan
                    second.run(image)
                copies = find_copies(scan, packages)
                if not copies:
                    raise _not_found(scan, package, image.ref)
                # Default search order: vllm, then sglang (an image with both gives vllm).
                first = next(p for p in packages if any(c.package == p for c in copies))
                copies = [c for c in copies if c.package == first]
                interp = interpreter(scan, image.config, python)
                chosen, others = choose(copies, interp)
                dists = distributions(scan)
                prefix = chosen.path + "/"
                files: dict[str, Any] = {}
                version_src: dict[str, bytes | None] = {}
                for path, cap in sorted(scan.captured.items()):
                    if not path.startswith(prefix):
                        continue
                    rel = f"{chosen.package}/{path[len(prefix):]}"
                    rec: dict[str, Any] = {"kind": cap.kind, "size": cap.size, "layer": cap.layer}
                    if cap.sha256:
                        rec["sha256"] = cap.sha256
                    if cap.target is not None:
                        rec["target"] = cap.target
                    files[rel] = rec
                    if rel.endswith(("/version.py", "/_version.py")) or rel == f"{chosen.package}/__init__.py":
                        fh = writer.open_read(path)
                        version_src[rel] = fh.read(1 << 16) if fh else None
                        if fh:
                            fh.close()
                skipped = {f"{chosen.package}/{p[len(prefix):]}": v for p, v in sorted(scan.skipped.items())
                           if p.startswith(prefix)}
                version = package_version(scan, chosen, dists, version_src)
            finally:
                writer.close()
            (work / "src").mkdir()
            os.rename(work / "rootfs" / chosen.path, work / "src" / chosen.package)
            shutil.rmtree(work / "rootfs")
            snap_name = name or default_name(chosen.package, version, image.scheme, image.digest)
            _check_name(snap_name)
            manifest = {
                "format": FORMAT_VERSION,
                "name": snap_name,
                "tool": {"name": "recon", "version": __version__},
                "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                "source": {"ref": image.ref, "scheme": image.scheme, "digest": image.digest,
                           "platform": image.platform, **_jsonable(image.extra)},
                "image": image.config.to_json() if image.config else None,
                "layers": [layer.describe() for layer in image.layers],
                "package": {"name": chosen.package, "version": version,
                            "import_root": "/" + chosen.root + "/" + chosen.package,
                            "real_path": "/" + chosen.path,
                            "other_copies": ["/" + c.path for c in others]},
                "python": {"executable": interp.path, "version": interp.version, "venv": interp.venv,
                           "sys_path": ["/" + p for p in interp.sys_path]},
                "distributions": dists,
                "selection": {"include": list(include), "all_files": all_files,
                              "skipped_files": len(skipped)},
                "stats": {"entries_seen": scan.entries_seen, "duplicate_entries": scan.duplicates,
                          "files": len(files), "bytes": sum(r["size"] for r in files.values())},
                "files": files,
                "skipped": skipped,
                "parent": None,
            }
            write_json(work / MANIFEST, manifest)
            dest = base_dir / snap_name
            commit(work, dest, replace=force)
    finally:
        image.close()
    return Snapshot.open(dest)


def _check_name(name: str) -> None:
    if not name or "/" in name or name.startswith(".") or "\x00" in name:
        raise ReconError(f"bad snapshot name {name!r}: no slashes, not starting with a dot")


def _jsonable(extra: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in extra.items() if k not in ("site_dirs",)}


def _not_found(scan: Any, package: str | None, ref: str) -> PackageNotFound:
    tops = sorted({t for names in scan.tops.values() for t in names if not _NOT_PACKAGES.search(t)})
    listing = ", ".join(tops[:40]) + (" ..." if len(tops) > 40 else "") if tops else "none"
    if package:
        return PackageNotFound(f"package {package!r} not found in {ref}; top-level packages there: "
                               f"{listing}", tops)
    return PackageNotFound(f"neither vllm nor sglang found in {ref}; choose one with --package "
                           f"(top-level packages there: {listing})", tops)

