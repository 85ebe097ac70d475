"""``docker:REF``: read the package out of an image through the Docker engine.

The container is created and **never started**; files come from the engine's
archive API (``GET /containers/{id}/archive``), which returns the engine's own
squashed view. The container is removed in every case, Ctrl-C included (the
CLI turns SIGTERM into the same interruption). A create call the engine was
still answering when recon was killed can land after recon is gone: every
container carries its creator (host, pid, start time), and the next
``docker:`` run removes those whose creator on this host is no longer alive.

The engine cannot list a folder without sending everything under it, so what
to read is found by asking for paths by name (a ``HEAD`` per path): the site
folders of every prefix the image config points at, the package folder in
each, and ``python3``/``python`` on the image's ``PATH`` (links followed hop by
hop) with their ``pyvenv.cfg``. Site folders holding the package are read
whole (their ``.pth`` files and ``*.dist-info`` are the installed
distributions); if none holds it by name, every site folder is read, to find
an editable install or a ``.pth`` entry; folders those point at, and the
target of a symlinked package folder, are then read in a second pass. With
``--package-only`` only the package folders are read (no distributions list).
Per-file layer provenance is not available this way (the engine has already
merged the layers): files are attributed to one layer standing for the
engine's view. With ``--layers`` the image is instead exported through the
engine's ``docker save`` into a temporary folder and read like a
``docker-archive:``, so every file names the layer it came from.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import posixpath
import socket
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ...errors import ReconError
from ..locate import DEFAULT_PATH
from .base import Image, ImageConfig, Layer, tar_entries
from .entry import FILE, SYMLINK, Entry

CONTAINER_LABEL = "io.recon.snapshots.model"  # on the created container; its value is the image ref
#: who created it: "host:pid:start" of the recon process (start: its start time in clock ticks)
OWNER_LABEL = "io.recon.owner"
SAVE_EXPORT = "docker save export"  # media type of the stand-in layer that reports export progress
PY_VERSIONS = [f"3.{m}" for m in range(8, 15)]
GO_MODE_SYMLINK = 1 << 27  # os.FileMode bits in the engine's stat header
MAX_LINK_HOPS = 8
PREFIXES = ["usr/local", "usr", "opt/conda", "opt/venv", "venv", "root/.local", "app/.venv"]


class _ChunkReader(io.RawIOBase):
    """A file-like view over the SDK's chunk generator."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks = chunks
        self.buf = b""

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self.buf:
            try:
                self.buf = next(self.chunks)
            except StopIteration:
                return 0
        n = min(len(b), len(self.buf))
        b[:n] = self.buf[:n]
        self.buf = self.buf[n:]
        return n


def _start_ticks(pid: int) -> str | None:
    """A process's start time (``/proc/PID/stat`` field 22): with the pid, one process ever."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return None


def owner_id() -> str:
    """This process as the creator of a container: ``host:pid:start``."""
    return f"{socket.gethostname()}:{os.getpid()}:{_start_ticks(os.getpid())}"


def owner_gone(owner: str) -> bool:
    """Whether ``owner`` (``host:pid:start``) is a process of this host that no longer runs.

    A creator on another host (a remote engine shared by several machines) is never
    judged gone: only its own host can tell.
    """
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != socket.gethostname() or not parts[1].isdigit():
        return False
    return _start_ticks(int(parts[1])) != parts[2]


def sweep_survivors(client: Any) -> list[str]:
    """Remove the containers killed recon processes of this host left (their names)."""
    gone = []
    listed: list[dict[str, Any]] = []
    with contextlib.suppress(Exception):
        # the engine's list alone: inspecting each (docker-py's containers.list) fails on a
        # container another recon removes in between, and would end the whole sweep
        listed = client.api.containers(all=True, filters={"label": CONTAINER_LABEL})
    for c in listed:
        owner = (c.get("Labels") or {}).get(OWNER_LABEL)
        if owner and owner_gone(owner):
            with contextlib.suppress(Exception):
                client.api.remove_container(c["Id"], force=True)
                gone.append(((c.get("Names") or ["/" + c["Id"][:12]])[0]).lstrip("/"))
    return gone


def _client() -> Any:
    try:
        import docker
    except ImportError as err:  # pragma: no cover - dependency of recon
        raise ReconError("the 'docker' Python package is not installed") from err
    try:
        client = docker.from_env(timeout=120)
        client.ping()
        return client
    except Exception as err:
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise ReconError(f"no Docker engine answers at {host} (start dockerd or set DOCKER_HOST); "
                         "docker-archive:/oci: sources need no engine") from err


def _stat(client: Any, cid: str, path: str) -> dict[str, Any] | None:
    """HEAD the archive endpoint: the engine's stat of ``path`` without any content."""
    res = client.api.head(client.api._url("/containers/{0}/archive", cid), params={"path": path})
    if res.status_code != 200:
        return None
    raw = res.headers.get("X-Docker-Container-Path-Stat")
    return json.loads(base64.b64decode(raw)) if raw else {}


def candidate_roots(config: ImageConfig, python: str | None = None) -> list[str]:
    """Folders where an importable package may live, most likely first: ``PYTHONPATH``,
    then the site folders of every prefix the image points at (``VIRTUAL_ENV``,
    ``CONDA_PREFIX``, each ``PATH`` entry ending in ``bin``, ``--python``'s own
    prefix) and of the usual ones, for every Python 3 minor version."""
    env = config.env_dict()
    roots: list[str] = []
    for item in (env.get("PYTHONPATH") or "").split(":"):
        if item.strip("/"):
            roots.append(item.strip("/"))
    prefixes: list[str] = []
    if python:
        prefixes.append(posixpath.dirname(posixpath.dirname(python.strip("/"))))
    for var in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        if env.get(var):
            prefixes.append(env[var].strip("/"))
    for d in (env.get("PATH") or DEFAULT_PATH).split(":"):
        if d.endswith("/bin"):
            prefixes.append(d[:-4].strip("/"))
    prefixes += PREFIXES
    seen = set(roots)
    for prefix in prefixes:
        for ver in PY_VERSIONS:
            for kind in ("site-packages", "dist-packages"):
                cand = f"{prefix}/lib/python{ver}/{kind}".lstrip("/")
                if cand not in seen:
                    seen.add(cand)
                    roots.append(cand)
    for extra in ("usr/lib/python3/dist-packages", "usr/local/lib/python3/dist-packages"):
        if extra not in seen:
            roots.append(extra)
    return roots


def _link_target(st: dict[str, Any]) -> str | None:
    """The link target the engine reports for a symlink (an absolute path in the image)."""
    if int(st.get("mode") or 0) & GO_MODE_SYMLINK:
        return str(st.get("linkTarget") or "") or None
    return None


def _interpreters(client: Any, cid: str, config: ImageConfig, python: str | None) -> tuple[list[Entry], list[str]]:
    """The interpreters on the image's ``PATH`` (and ``--python``), found by stat alone.

    The engine cannot list a folder without sending all of it, and ``/usr/bin``
    can be large, so each likely name is asked for: ``python3`` and ``python``
    in every ``PATH`` folder, following links hop by hop. They come back as
    stand-in entries (links as links, files empty), which is all the squash
    needs to decide which copy of the package that interpreter imports. Also
    returns the ``pyvenv.cfg`` files next to those ``bin`` folders.
    """
    names, cfg_names = interpreter_names(config, python)
    stubs: dict[str, Entry] = {}
    for start in names:
        path = start
        for _hop in range(MAX_LINK_HOPS):
            if path in stubs:
                break
            st = _stat(client, cid, "/" + path)
            if st is None:
                break
            target = _link_target(st)
            if target is None:
                stubs[path] = Entry(path, FILE, size=0, mode=0o755, open=lambda: io.BytesIO(b""))
                break
            stubs[path] = Entry(path, SYMLINK, linkname=target)
            path = posixpath.normpath(posixpath.join(posixpath.dirname(path), target)).lstrip("/")
    cfgs = [c for c in cfg_names if _stat(client, cid, "/" + c) is not None]
    return list(stubs.values()), cfgs


def interpreter_names(config: ImageConfig, python: str | None) -> tuple[list[str], list[str]]:
    """Where the image's Python may be: ``python3`` and ``python`` in every ``PATH`` folder
    (``--python`` first), and the ``pyvenv.cfg`` next to each of those ``bin`` folders."""
    env = config.env_dict()
    dirs = [d.strip("/") for d in (env.get("PATH") or DEFAULT_PATH).split(":") if d.strip("/")]
    names = [f"{d}/{exe}" for d in dirs for exe in ("python3", "python")]
    if python:
        names.insert(0, python.strip("/"))
    prefixes = {posixpath.dirname(posixpath.dirname(n)) for n in names
                if posixpath.basename(posixpath.dirname(n)) == "bin"}
    return names, [f"{p}/pyvenv.cfg".lstrip("/") for p in sorted(prefixes)]


class DaemonLayer(Layer):
    """The engine's merged view: the folders that hold candidate packages, read through the
    archive API, plus stand-ins for the interpreters and their ``pyvenv.cfg``."""

    def __init__(self, client: Any, cid: str, roots: list[str], digest: str,
                 stubs: list[Entry] | None = None, small_files: list[str] | None = None) -> None:
        super().__init__(0, digest, media_type=ENGINE_VIEW)
        self.client = client
        self.cid = cid
        self.roots = roots
        self.stubs = stubs or []
        self.small_files = small_files or []

    def entries(self) -> Iterator[Entry]:
        yield from self.stubs
        for path in [*self.small_files, *self.roots]:
            yield from self._read(path)

    def entries_under(self, roots: list[str]) -> Iterator[Entry]:
        """Only ``roots``, asked for by name: the folders a ``.pth`` file, an editable
        install or a symlinked package folder pointed at, found in the first pass."""
        for root in roots:
            if _stat(self.client, self.cid, "/" + root) is not None:
                yield from self._read(root)

    def _read(self, path: str) -> Iterator[Entry]:
        """Everything under ``path`` (or the file itself), named from the image root."""
        chunks, _stat_info = self.client.api.get_archive(self.cid, "/" + path, chunk_size=1 << 20)

        def counted() -> Iterator[bytes]:
            for chunk in chunks:
                self.bytes_read += len(chunk)
                yield chunk

        parent = os.path.dirname(path)
        reader = io.BufferedReader(_ChunkReader(counted()), 1 << 20)
        for entry in tar_entries(reader, where=f"docker archive of /{path}"):
            if parent and entry.name:
                entry.name = f"{parent}/{entry.name}"
                if entry.kind == "hardlink" and entry.linkname:
                    entry.linkname = f"{parent}/{entry.linkname}"
            yield entry


READS = ("site", "package", "layers")
#: the media type of the one layer that stands for the engine's merged view (archive API)
ENGINE_VIEW = "docker-engine-view"


def is_merged_view(layer: dict[str, Any]) -> bool:
    """Whether a manifest's layer record stands for the engine's merged view (the archive API,
    or vfs storage, whose folder is the whole filesystem): its files do not name their layer."""
    media = str(layer.get("media_type") or "")
    return media == ENGINE_VIEW or (media.startswith("docker-engine-storage") and "merged" in media)


def open_daemon(ref: str, *, packages: list[str], platform: str | None = None,
                read: str = "site", engine_view: bool = False, max_layer_size: int | None = None, python: str | None = None,
                progress: Callable[[Layer, str], None] | None = None) -> Image:
    """Open an image of the local engine.

    ``read`` says how. ``"site"`` (the default) and ``"package"`` first try the
    image's layer folders in the engine's storage, in place
    (:mod:`recon.acquire.sources.stored`: no container, only the package and the
    metadata files opened, each file's layer kept on overlay2); where those
    cannot be read here, one line on stderr says why and the engine's merged
    view is read through a created (never started) container: ``"site"``
    reads every site folder that holds the package whole (installed
    distributions listed), ``"package"`` only the package folders (no
    distributions list). ``engine_view`` skips the storage folders;
    ``"layers"``, the image's layers through ``docker save`` (each file's
    layer recorded).
    """
    if read not in READS:
        raise ReconError(f"unknown engine read {read!r}: one of {', '.join(READS)}")
    client = _client()
    image = _inspect(client, ref)
    _sweep_and_warn(client)
    if read == "layers":
        return _open_saved(client, image, ref, platform, max_layer_size, progress)
    attrs = image.attrs
    config = ImageConfig.from_image_json(attrs)
    if not engine_view:
        in_place = _open_in_place(client, image, ref, config, python, packages)
        if in_place is not None:
            return in_place
    # Create (never start) a container; the command is a placeholder never run. It is
    # named up front so that a Ctrl-C arriving while the engine answers the create call
    # (the container exists, the SDK has not returned it yet) can still remove it, and
    # labelled so that `docker ps -a --filter label=CONTAINER_LABEL` finds any survivor.
    name = f"recon-snapshot-{uuid.uuid4().hex[:12]}"
    removed = False

    def remove() -> None:
        nonlocal removed
        if not removed:
            removed = True
            with contextlib.suppress(Exception):
                client.api.remove_container(name, force=True)

    try:
        container = client.containers.create(image.id, command=["/recon-never-started"], name=name,
                                             entrypoint=[], network_disabled=True,
                                             labels={CONTAINER_LABEL: ref,
                                                     OWNER_LABEL: owner_id()})
        roots, package_only = _roots_to_read(client, container.id, config, python, packages, read)
        stubs, cfgs = _interpreters(client, container.id, config, python)
    except BaseException:
        remove()
        raise

    return Image(ref=f"docker:{ref}", scheme="docker", digest=image.id,
                 layers=[DaemonLayer(client, container.id, roots, image.id, stubs, cfgs)], config=config,
                 platform=f"{config.os}/{config.architecture}" if config.os else None,
                 extra={"repo_tags": image.tags, "container": container.id,
                        "repo_digests": attrs.get("RepoDigests") or [],
                        "read": "package folders only" if package_only else "site folders",
                        "layer_diff_ids": (attrs.get("RootFS") or {}).get("Layers") or []},
                 closer=remove)


def _open_in_place(client: Any, image: Any, ref: str, config: ImageConfig, python: str | None,
                   packages: list[str]) -> Image | None:
    """The image read from the engine's storage folders, or None (and one line on stderr
    saying why) where they cannot be read here."""
    from .stored import find_stored, selection, stored_layer_list

    try:
        info = client.info()
    except Exception:  # an engine that will not say: only GraphDriver paths can be used
        info = {}
    root_dir = str(info.get("DockerRootDir") or "")
    rootless = any("rootless" in str(opt) for opt in info.get("SecurityOptions") or [])
    stored, why = find_stored(image.attrs, root_dir, rootless=rootless)
    if stored is None:
        print(f"recon: {why}; reading through the engine's archive API instead", file=sys.stderr,
              flush=True)
        return None
    names, cfgs = interpreter_names(config, python)
    sel = selection(stored, candidate_roots(config, python), packages, [*names, *cfgs])
    attrs = image.attrs
    how = f"layer folders in place ({stored.driver}{', merged view' if stored.merged else ''})"
    return Image(ref=f"docker:{ref}", scheme="docker", digest=image.id,
                 layers=stored_layer_list(stored, sel), config=config,
                 platform=f"{config.os}/{config.architecture}" if config.os else None,
                 extra={"repo_tags": image.tags, "repo_digests": attrs.get("RepoDigests") or [],
                        "read": how, "layer_diff_ids": (attrs.get("RootFS") or {}).get("Layers") or []})


def _inspect(client: Any, ref: str) -> Any:
    """The engine's image object for ``ref``, its refusals worded as recon errors."""
    import docker.errors

    try:
        return client.images.get(ref)
    except docker.errors.ImageNotFound as err:
        raise ReconError(f"image {ref!r} not found in the Docker engine (docker pull/load it first)") from err
    except docker.errors.APIError as err:
        raise ReconError(f"the Docker engine refused to inspect {ref!r}: {err.explanation}") from err


def _sweep_and_warn(client: Any) -> None:
    """Remove what killed recon processes left in the engine, and say so on stderr."""
    left = sweep_survivors(client)
    if left:
        print(f"recon: warning: removed {len(left)} container(s) a stopped recon left in the "
              f"engine: {', '.join(sorted(left))}", file=sys.stderr, flush=True)


def _roots_to_read(client: Any, cid: str, config: ImageConfig, python: str | None,
                   packages: list[str], read: str) -> tuple[list[str], bool]:
    """The folders to read through the archive API, and whether they are only package folders."""
    existing = [r for r in candidate_roots(config, python) if _stat(client, cid, "/" + r) is not None]
    found = [f"{r}/{p}" for r in existing for p in packages
             if _stat(client, cid, f"/{r}/{p}") is not None]
    package_only = read == "package" and bool(found)
    if package_only:
        roots = found
    else:
        roots = [r for r in existing if not packages or any(f.startswith(r + "/") for f in found)]
    # No folder holds the package by name: it may be installed editable (a .pth file or an
    # editable finder pointing elsewhere), so every site folder is read to find out.
    return roots or existing, package_only


def _open_saved(client: Any, image: Any, ref: str, platform: str | None,
                max_layer_size: int | None, progress: Callable[[Layer, str], None] | None) -> Image:
    """The image's layers as the engine exports them (``docker save``), for per-layer provenance.

    The engine's archive of the whole image is streamed into a private temporary
    folder under the cache (it needs as much free space as the image) and read
    like a ``docker-archive:``; the folder is removed when the image is closed,
    also on error or Ctrl-C. No container is created at all.
    """
    import shutil
    import tempfile

    from ...paths import cache_dir
    from ..writer import TreeWriter
    from .archive import open_docker_archive

    tmp_root = cache_dir() / "tmp"
    tmp_root.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="docker-save-", dir=tmp_root)
    # A stand-in layer so the progress bars can follow the export (it can take minutes).
    export = Layer(-1, image.id, media_type=SAVE_EXPORT, size=int(image.attrs.get("Size") or 0))

    def counted(chunks: Iterator[bytes]) -> Iterator[bytes]:
        for chunk in chunks:
            export.bytes_read += len(chunk)
            if progress is not None:
                progress(export, "advance")
            yield chunk

    try:
        chunks = client.api.get_image(image.id, chunk_size=1 << 20)
        if progress is not None:
            progress(export, "start")
        with TreeWriter(Path(tmp)) as out:
            # no sha256 of the whole archive: the layers inside are what gets hashed and cited
            out.write_stream("image.tar", io.BufferedReader(_ChunkReader(counted(chunks)), 1 << 20),
                             where=f"docker save of {ref}", digest=False)
        if progress is not None:
            progress(export, "done")
        saved = open_docker_archive(os.path.join(tmp, "image.tar"), platform=platform,
                                    max_layer_size=max_layer_size)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    inner = saved.closer

    def close() -> None:
        try:
            if inner is not None:
                inner()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    attrs = image.attrs
    saved.ref, saved.scheme, saved.digest, saved.closer = f"docker:{ref}", "docker", image.id, close
    saved.extra.update({"repo_tags": image.tags, "repo_digests": attrs.get("RepoDigests") or [],
                        "read": "docker save"})
    return saved
