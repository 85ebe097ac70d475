"""``take_snapshot``: from any SOURCE to a finished, hashed snapshot folder.

The steps are deliberately plain: open the source (no engine start), squash
its layers in one top-down pass into a staging folder, decide which copy of
the package the image's Python imports, move that copy to ``src/``, write the
manifest, and rename the staging folder into place. Any failure removes the
staging folder, so a snapshot folder with a manifest is always complete; an
output folder this call created is removed again when the call is interrupted
(Ctrl-C, SIGTERM) before a snapshot is in it.

A folder in use is never replaced: ``force`` refuses while any recon process
holds the old snapshot (:mod:`recon.snapshots.lock`), and ``publish`` (the
snapshot cache) never replaces a finished snapshot at all: the first one
published under a name stays, and a later taker reads that one.

Everything after the squash happens through descriptors: the chosen copy is
resolved with the image's own symlinks (never the host's), moved out of the
squashed tree with a rename relative to folders opened ``O_NOFOLLOW``, and the
rest of the tree is removed without following links. The snapshot's name is
checked before anything is moved.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..acquire.layers import (
    DEFAULT_PACKAGES,
    CaptureLimits,
    ProgressFn,
    ScanResult,
    Squasher,
    resolve_virtual,
)
from ..acquire.locate import (
    Copy,
    DistInfo,
    Interpreter,
    choose,
    distributions,
    extra_roots_from,
    find_copies,
    interpreter,
    package_version,
)
from ..acquire.sources import open_source
from ..acquire.sources.base import Image
from ..acquire.sources.stored import InPlaceRefused
from ..acquire.writer import (
    NAME_MAX,
    TreeWriter,
    commit,
    open_output_folder,
    remove_tree_at,
    short,
    staged_fd,
    staging,
    write_json_at,
    writing,
)
from ..errors import PackageNotFound, ReconError, UnsafeArchiveError
from ..paths import snapshots_dir
from . import lock
from .manifest import TOOL, FileRecord, Manifest, PackageInfo, PythonInfo, SkippedRecord, now
from .model import MANIFEST, Snapshot

_NOT_PACKAGES = re.compile(r"(\.dist-info|\.egg-info|\.pth|\.py[cdo]?|\.so|__pycache__|\.egg-link|"
                           r"_distutils_hack|^_virtualenv|^__editable__.*|\.libs)$")
#: What a version string may be when it becomes part of a folder name: PEP 440
#: and local versions fit; anything else from an image (slashes, newlines, 300
#: characters) is refused, and ``--name`` names the snapshot instead.
_VERSION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+!_-]{0,127}")
_BAD_NAME_CHARS = re.compile(r"[\x00-\x1f\x7f/\\]")


def default_name(package: str, version: str | None, scheme: str, digest: str | None) -> str:
    """``<package>-<version>[-<scheme>-<digest>]``; a version that cannot name a folder is refused."""
    if version is not None and not _VERSION_RE.fullmatch(version):
        raise ReconError(f"the {package} version found in the image, {short(version, 80)!r}, is not a "
                         "version string that can name a folder; name the snapshot with --name")
    base = f"{package}-{version or 'unknown'}"
    if scheme in ("pip", "wheel"):
        return base
    tag = (digest or "").split(":")[-1][:12]
    return f"{base}-{scheme}-{tag}" if tag else f"{base}-{scheme}"


def check_name(name: str) -> None:
    """A snapshot name is one folder name: no slash, no leading dot, no control character, <= NAME_MAX bytes."""
    if (not name or name.startswith(".") or _BAD_NAME_CHARS.search(name)
            or len(name.encode("utf-8", "surrogateescape")) > NAME_MAX):
        raise ReconError(f"bad snapshot name {short(name, 80)!r}: one folder name of at most {NAME_MAX} "
                         "bytes, no slashes or control characters, not starting with a dot")


@dataclass
class _Found:
    """What the squash decided: the copy to keep and everything the manifest says about it."""

    scan: ScanResult
    chosen: Copy
    others: list[Copy]
    interp: Interpreter
    dists: list[DistInfo]
    files: dict[str, FileRecord]
    skipped: dict[str, SkippedRecord]
    version: str | None
    dropped: list[str]  # links out of the package: in the staged tree, never in the snapshot


def take_snapshot(source: str, *, name: str | None = None, out: str | Path | None = None,
                  package: str | None = None, python: str | None = None,
                  include: Iterable[str] = (), all_files: bool = False,
                  platform: str | None = None, limits: CaptureLimits | None = None,
                  force: bool = False, progress: ProgressFn | None = None,
                  docker_read: str = "site", engine_view: bool = False,
                  reuse_same: bool = False, publish: bool = False) -> Snapshot:
    """Snapshot ``source`` (``docker:``, ``docker-archive:``, ``oci:``, ``oci-archive:``,
    ``wheel:``, ``pip:``, ``dir:``) and return the opened :class:`Snapshot`.

    The output folder ``out`` must not be a symlink (refused, see
    :func:`recon.acquire.writer.open_output_folder`); it is checked before the source
    is opened, so a refusal costs nothing. A chosen copy whose path goes
    through a symlink of the image is refused in one line
    (:class:`UnsafeArchiveError`): the files were written under the literal
    path, so a link there means the tree and the image disagree.

    ``reuse_same``: when the destination already holds a snapshot of the same
    source with the same files (path, sha256), return it instead of refusing
    ("already exists"); a different one is still refused (``recon.snapshots.model``,
    so that a notebook cell can run twice).

    ``publish`` (the snapshot cache, :func:`recon.snapshots.cache.ensure_snapshot`):
    the destination is never replaced while it holds a snapshot; when another
    process published one under this name first, that one is returned. The
    result is held (:func:`recon.snapshots.lock.open_held`) from the moment it
    is in place.
    """
    limits = limits or CaptureLimits()
    packages = [package] if package else list(DEFAULT_PACKAGES)
    if name is not None:
        check_name(name)
    base_dir = Path(out) if out else snapshots_dir()
    with _created_for(base_dir):
        os.close(open_output_folder(base_dir))

        def opened(engine_view: bool) -> Image:
            return open_source(source, packages=packages, platform=platform,
                               max_layer_size=limits.max_layer_size, max_ratio=limits.max_ratio,
                               docker_read=docker_read, engine_view=engine_view,
                               python=python, progress=progress)

        def written(image: Image) -> Snapshot:
            return _write(image, base_dir, name=name, packages=packages, package=package,
                          python=python, include=include, all_files=all_files, limits=limits,
                          progress=progress, force=force, reuse_same=reuse_same,
                          publish=publish)

        try:
            return written(opened(engine_view))
        except InPlaceRefused as err:
            if engine_view:
                raise
            # nothing of the first attempt is left: its staging folder went with the error
            print(f"recon: {err}; reading through the engine's archive API instead",
                  file=sys.stderr, flush=True)
            return written(opened(True))


@contextlib.contextmanager
def _created_for(base_dir: Path) -> Iterator[None]:
    """When the block is interrupted (Ctrl-C, SIGTERM), remove the folders of ``base_dir``
    (itself and missing parents) that it created, while they are still empty. A refusal
    leaves the output folder as it made it (empty: its staging folder is gone)."""
    missing = []
    for folder in [base_dir, *base_dir.parents]:
        if os.path.lexists(folder):
            break
        missing.append(folder)
    try:
        yield
    except (KeyboardInterrupt, SystemExit):
        for folder in missing:  # deepest first
            try:
                os.rmdir(folder)
            except OSError:  # not empty (another run's snapshot, a user's file), or gone
                break
        raise


def _write(image: Image, base_dir: Path, *, name: str | None, packages: list[str],
           package: str | None, python: str | None, include: Iterable[str], all_files: bool,
           limits: CaptureLimits, progress: ProgressFn | None, force: bool,
           reuse_same: bool, publish: bool) -> Snapshot:
    """Squash ``image`` into a staging folder under ``base_dir`` and commit it (closes it)."""
    try:
        # Stage in a scratch folder first: the final name depends on the version found.
        with staging(base_dir, "snapshot") as work:
            wfd = staged_fd(work)
            with TreeWriter(work / "rootfs", parent_fd=wfd, label=str(base_dir)) as writer:
                found = _squash(image, writer, packages=packages, package=package, python=python,
                                include=include, all_files=all_files, limits=limits, progress=progress)
                snap_name = name or default_name(found.chosen.package, found.version, image.scheme,
                                                 image.digest)
                check_name(snap_name)  # before anything moves
                _move_copy(writer, wfd, found, base_dir)
            remove_tree_at(wfd, "rootfs")
            manifest = _manifest(image, found, snap_name, include, all_files)
            write_json_at(wfd, MANIFEST, manifest.to_json(), label=base_dir)
            dest = base_dir / snap_name
            if reuse_same and not force and _same_snapshot(dest, manifest):
                return Snapshot.open(dest)  # the staging folder goes with the context
            if publish:
                return _publish(work, wfd, dest)
            _commit(work, dest, force)
    finally:
        image.close()
    return Snapshot.open(dest)


def _commit(work: Path, dest: Path, force: bool) -> None:
    """Rename the staging folder to ``dest``; with ``force`` replace a snapshot there, unless
    a recon process holds it (:func:`recon.snapshots.lock.unheld`)."""
    if not (force and os.path.lexists(dest)):
        commit(work, dest, replace=force)
        return
    with lock.unheld(dest):
        commit(work, dest, replace=True)


def _publish(work: Path, wfd: int, dest: Path) -> Snapshot:
    """Put a finished staging folder at ``dest`` unless a snapshot is already there; either
    way return the snapshot at ``dest``, held.

    The staging folder's own lock becomes the reader's shared lock before the
    rename, so the new snapshot is held from the instant it has its name. A
    folder at ``dest`` that no recon can open (an older format, damaged) is
    replaced when no process holds it.
    """
    fcntl.flock(wfd, fcntl.LOCK_SH)
    keep = os.dup(wfd)  # outlives the staging context, which closes wfd
    try:
        if not os.path.lexists(dest):
            with contextlib.suppress(ReconError):  # lost the race: read the winner's below
                commit(work, dest)
                return lock.keep(Snapshot.open(dest), keep)
        there = _open_held_or_none(dest)
        if there is not None:
            os.close(keep)
            return there
        with lock.unheld(dest):
            commit(work, dest, replace=True)
        return lock.keep(Snapshot.open(dest), keep)
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(keep)
        raise


def _open_held_or_none(dest: Path) -> Snapshot | None:
    """The snapshot at ``dest``, held; None when no snapshot recon can open is there."""
    try:
        return lock.open_held(dest)
    except ReconError:
        return None


def _same_snapshot(dest: Path, manifest: Manifest) -> bool:
    """Whether ``dest`` is a snapshot of the same source, options and file contents."""
    try:
        old = Snapshot.open(dest).manifest
    except (ReconError, OSError, ValueError):
        return False

    def digests(m: Manifest) -> dict[str, str | None]:
        return {p: r.sha256 for p, r in m.files.items()}
    same_source = all(old.source.get(k) == manifest.source.get(k) for k in ("ref", "digest"))
    return same_source and old.selection == manifest.selection and \
        digests(old) == digests(manifest)


def _squash(image: Image, writer: TreeWriter, *, packages: list[str], package: str | None,
            python: str | None, include: Iterable[str], all_files: bool, limits: CaptureLimits,
            progress: ProgressFn | None) -> _Found:
    """Squash the layers into ``writer``'s tree and decide which copy the image's Python imports."""
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
                          all_files=all_files, limits=limits, only_roots=True, progress=progress)
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
    files, skipped, version_src, dropped = _records(scan, chosen, writer)
    version = package_version(scan, chosen, dists, version_src)
    return _Found(scan, chosen, others, interp, dists, files, skipped, version, dropped)


def _records(scan: ScanResult, chosen: Copy, writer: TreeWriter
             ) -> tuple[dict[str, FileRecord], dict[str, SkippedRecord], dict[str, bytes | None],
                        list[str]]:
    """The manifest's file and skipped records of the chosen copy, its version-bearing sources,
    and the links that leave the package (listed as skipped, removed before the move)."""
    prefix = chosen.path + "/"
    files: dict[str, FileRecord] = {}
    version_src: dict[str, bytes | None] = {}
    outside: dict[str, SkippedRecord] = {}
    dropped = []
    for path, cap in sorted(scan.captured.items()):
        if not path.startswith(prefix):
            continue
        rel = f"{chosen.package}/{path[len(prefix):]}"
        if cap.outside:
            outside[rel] = SkippedRecord(size=0, layer=cap.layer, kind="symlink",
                                         target=cap.target, reason="points outside the package")
            dropped.append(path)
            continue
        files[rel] = FileRecord(path=rel, sha256=cap.sha256 or None, size=cap.size,
                                layer=cap.layer, kind=cap.kind, target=cap.target)
        if rel.endswith(("/version.py", "/_version.py")) or rel == f"{chosen.package}/__init__.py":
            fh = writer.open_read(path)
            version_src[rel] = fh.read(1 << 16) if fh else None
            if fh:
                fh.close()
    skipped = {rel: SkippedRecord.from_json(rel, v) for rel, v in
               ((f"{chosen.package}/{p[len(prefix):]}", v) for p, v in sorted(scan.skipped.items())
                if p.startswith(prefix))}
    return files, dict(sorted({**skipped, **outside}.items())), version_src, dropped


def _move_copy(writer: TreeWriter, wfd: int, found: _Found, base_dir: Path) -> None:
    """Move the chosen copy's folder to ``src/<package>``, inside the staging folder only.

    Links that leave the package are removed first (they are listed as
    skipped). The copy is resolved with the image's symlinks: a path that goes
    through one of them is refused (the squash never writes through a link,
    so its files cannot be there). The rename itself opens every folder of
    the path with ``O_NOFOLLOW`` from the tree's root (:meth:`TreeWriter.move_dir`).
    """
    chosen = found.chosen
    real = resolve_virtual(chosen.path, found.scan.symlinks)
    if real != chosen.path:
        raise UnsafeArchiveError(f"the copy of {chosen.package} at /{short(chosen.path)} goes through a "
                                 f"symlink of the image (it resolves to /{short(real)}); recon does not "
                                 "follow links out of the tree it wrote")
    with writing(base_dir):
        os.mkdir("src", 0o755, dir_fd=wfd)
        src_fd = os.open("src", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=wfd)
    try:
        for path in found.dropped:
            writer.remove(path)
        writer.move_dir(chosen.path, src_fd, chosen.package)
    finally:
        os.close(src_fd)


def _manifest(image: Image, found: _Found, snap_name: str, include: Iterable[str],
              all_files: bool) -> Manifest:
    chosen, interp, scan, files = found.chosen, found.interp, found.scan, found.files
    return Manifest(
        name=snap_name, created=now(), tool=TOOL,
        source={"ref": image.ref, "scheme": image.scheme, "digest": image.digest,
                "platform": image.platform, **_jsonable(image.extra)},
        image=image.config.to_json() if image.config else None,
        layers=[layer.describe() for layer in image.layers],
        package=PackageInfo(name=chosen.package, version=found.version,
                            import_root="/" + chosen.root + "/" + chosen.package,
                            real_path="/" + chosen.path,
                            other_copies=["/" + c.path for c in found.others]),
        python=PythonInfo(executable=interp.path, version=interp.version, venv=interp.venv,
                          sys_path=["/" + p for p in interp.sys_path]),
        distributions=[dict(d) for d in found.dists],
        selection={"include": list(include), "all_files": all_files,
                   "skipped_files": len(found.skipped)},
        stats={"entries_seen": scan.entries_seen, "duplicate_entries": scan.duplicates,
               "files": len(files), "bytes": sum(r.size for r in files.values())},
        files=files, skipped=found.skipped, parent=None)


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
