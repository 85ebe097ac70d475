"""Image archives read without any Docker engine: ``docker save`` tarballs and OCI layouts.

* ``docker-archive:PATH``: the legacy ``manifest.json`` + ``<id>/layer.tar`` form,
  and the OCI form newer engines write (``index.json`` + ``blobs/``).
* ``oci:DIR`` and ``oci-archive:PATH``: an OCI image layout as a folder or a tar.

An index with several manifests is resolved by platform (``linux/amd64`` by
default); if the platform is absent the error lists the choices. Layer
compression (gzip, zstd, none) is sniffed from the bytes, not the media type.

Everything here is read from a file someone else wrote, so:

* a blob is named only by a validated digest (``sha256:`` + 64 hex, ``sha512:``
  + 128 hex, the OCI spec's registered algorithms) or, in a legacy
  ``manifest.json``, by a relative name with no ``..`` and no leading ``/``;
* a name is looked up *inside* the archive: among the outer tar's members
  (symlinks followed only to other members), or under the layout folder
  opened by descriptor, every component with ``O_NOFOLLOW`` (symlinks inside
  the folder are resolved by recon and may not leave it);
* every blob is hashed against its descriptor (digest and size) and every
  layer's uncompressed stream against the config's ``rootfs.diff_ids`` while
  it is read (:func:`recon.acquire.sources.base.verified_tar_entries`).
"""

from __future__ import annotations

import io
import os
import posixpath
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ...errors import ReconError
from ..blobcache import DigestMismatch, check_digest, digest_of
from .base import (
    Entry,
    Image,
    ImageConfig,
    Layer,
    LayerCheck,
    is_compressed,
    json_object,
    max_ratio_default,
    verified_tar_entries,
)
from .oci import (
    INDEX_TYPES,
    check_platform,
    descriptor,
    diff_ids_of,
    is_index,
    pick_manifest,
    platform_of,
)
from .streams import CountingReader, FileWindow

_INDEX_TYPES = INDEX_TYPES  # kept for importers of the old name
MAX_JSON = 64 << 20  # manifests, indexes and configs larger than this are refused
MAX_HOPS = 16  # symlinks followed inside one archive lookup
MAX_MEMBERS = 100_000  # an image archive holds a few files per layer; the index is kept in memory
_HEX_NAME = re.compile(r"^blobs/(sha256)/([0-9a-f]{64})$|^blobs/(sha512)/([0-9a-f]{128})$")


@dataclass
class _Member:
    kind: str
    offset: int
    size: int
    linkname: str | None


def clean_name(name: Any, *, where: str) -> str:
    """A member name from a manifest, made relative and normal, or a one-line refusal.

    Why refuse instead of normalising ``..`` away: a manifest naming
    ``../../etc/passwd`` is hostile, and silently reading some other member
    would hide that.
    """
    if not isinstance(name, str) or not name or "\0" in name:
        raise ReconError(f"the manifest names a blob {name!r}, which is not a file name", where=where)
    if name.startswith("/") or ".." in name.split("/"):
        raise ReconError(f"the manifest names {name!r}, which is outside the archive", where=where)
    clean = posixpath.normpath(name)
    return "" if clean == "." else clean


class BlobStore:
    """Reads blobs by name from a layout folder (by descriptor) or from inside an uncompressed tar."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.where = str(path)
        self._members: dict[str, _Member] = {}
        self._dirfd: int | None = None
        if path.is_dir():
            self._dirfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
            return
        self._index_tar()

    def _index_tar(self) -> None:
        """List the outer tar's members with the lean reader: caps, checksums, one-line errors."""
        from .tarstream import tar_members

        try:
            fh = open(self.path, "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError as err:
            raise ReconError(f"archive not found: {self.path}") from err
        except OSError as err:
            raise ReconError(f"cannot read the archive ({err.strerror or err})", where=self.where) from err
        offsets: list[int] = []
        with fh, io.BufferedReader(fh, 1 << 16) as raw:  # type: ignore[arg-type]
            try:
                for entry in tar_members(raw, where=self.where, seekable=True, noun="archive",
                                         on_offset=offsets.append):
                    if entry.name:
                        self._members[entry.name] = _Member(entry.kind, offsets[-1], entry.size,
                                                            entry.linkname)
                    if len(self._members) > MAX_MEMBERS:
                        raise ReconError(f"more than {MAX_MEMBERS} members: not an image archive")
            except ReconError as err:
                raise ReconError(f"not a readable image archive ({err})") from err

    # -- lookups -------------------------------------------------------------------
    def _member(self, name: str) -> _Member | None:
        """The regular member ``name`` stands for: symlinks and hardlinks followed inside the tar."""
        for _ in range(MAX_HOPS):
            member = self._members.get(name)
            if member is None or member.kind == "file":
                return member
            if member.kind == "symlink":
                target = posixpath.normpath(posixpath.join(posixpath.dirname(name), member.linkname or ""))
            elif member.kind == "hardlink":
                target = posixpath.normpath(member.linkname or "")
            else:
                return None
            if target.startswith(("/", "../")) or target == "..":
                raise ReconError(f"{name!r} is a link to {member.linkname!r}, outside the archive",
                                 where=self.where)
            name = target
        raise ReconError(f"{name!r}: too many links", where=self.where)

    def exists(self, name: str) -> bool:
        try:
            fh = self.open(name)
        except ReconError:
            return False
        fh.close()
        return True

    def open(self, name: str) -> IO[bytes]:
        """A private stream of the blob (layers are read by several threads at once)."""
        name = clean_name(name, where=self.where)
        if self._dirfd is not None:
            fd = open_beneath(self._dirfd, name, where=self.where)
            return os.fdopen(fd, "rb", buffering=1 << 20)
        member = self._member(name)
        if member is None:
            raise ReconError(f"missing blob {name}", where=self.where)
        return io.BufferedReader(FileWindow(self.path, member.offset, member.size), 1 << 20)

    def size(self, name: str) -> int:
        if self._dirfd is None:
            member = self._member(clean_name(name, where=self.where))
            return member.size if member is not None else 0
        with self.open(name) as fh:
            return os.fstat(fh.fileno()).st_size

    def read(self, name: str, *, limit: int = MAX_JSON) -> bytes:
        with self.open(name) as fh:
            data = fh.read(limit + 1)
        if len(data) > limit:
            raise ReconError(f"{name} is larger than {limit} bytes", where=self.where)
        return data

    def read_json(self, name: str) -> dict[str, Any]:
        return json_object(self.read(name), name, where=self.where)

    def read_blob(self, desc: dict[str, Any], what: str) -> dict[str, Any]:
        """A JSON blob (index, manifest, config) by descriptor: digest and size checked, an object."""
        digest, size = descriptor(desc, what, where=self.where)
        data = self.read(blob_path(digest, where=self.where))
        if size is not None and len(data) != size:
            raise DigestMismatch(f"{what} {digest} is {len(data)} bytes, not the {size} its "
                                 "descriptor says", where=self.where)
        got = digest_of(data, digest.partition(":")[0])
        if got != digest:
            raise DigestMismatch(f"{what} {digest} does not match its digest (got {got})",
                                 where=self.where)
        return json_object(data, f"{what} {digest}", where=self.where)

    def close(self) -> None:
        if self._dirfd is not None:
            os.close(self._dirfd)
            self._dirfd = None


def open_beneath(root: int, name: str, *, where: str) -> int:
    """Open the regular file ``name`` under the folder ``root`` (a descriptor), never outside it.

    Every component is opened relative to its parent's descriptor with
    ``O_NOFOLLOW``, so no symlink is ever followed by the kernel; a symlink
    met on the way is resolved here (relative targets only, never above
    ``root``, at most ``MAX_HOPS``). A file swapped for a link meanwhile
    makes the open fail (``ELOOP``), never escape. FIFOs and devices are
    refused without blocking (``O_NONBLOCK``, then ``fstat``).
    """
    todo = [p for p in name.split("/") if p not in ("", ".")]
    fds: list[int] = [root]
    hops = 0
    try:
        while todo:
            part = todo.pop(0)
            if part == "..":
                if len(fds) == 1:
                    raise ReconError(f"{name!r} leads outside the layout folder", where=where)
                os.close(fds.pop())
                continue
            try:
                st = os.stat(part, dir_fd=fds[-1], follow_symlinks=False)
            except FileNotFoundError:
                raise ReconError(f"missing blob {name}", where=where) from None
            if stat.S_ISLNK(st.st_mode):
                hops += 1
                target = os.readlink(part, dir_fd=fds[-1])
                if target.startswith("/") or hops > MAX_HOPS:
                    raise ReconError(f"{name!r} goes through a link to {target!r}, which recon does "
                                     "not follow", where=where)
                todo[:0] = [p for p in target.split("/") if p not in ("", ".")]
                continue
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
            if todo:
                fds.append(os.open(part, flags | os.O_DIRECTORY, dir_fd=fds[-1]))
                continue
            fd = os.open(part, flags | os.O_NONBLOCK, dir_fd=fds[-1])
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise ReconError(f"blob {name} is not a regular file", where=where)
            return fd
        raise ReconError(f"blob {name!r} names a folder", where=where)
    except OSError as err:
        raise ReconError(f"cannot open blob {name} ({err.strerror or err})", where=where) from None
    finally:
        for fd in fds[1:]:
            os.close(fd)


class BlobLayer(Layer):
    """One layer blob of an archive; every read is hashed against ``check``."""

    def __init__(self, store: BlobStore, blob: str, index: int, digest: str, *,
                 check: LayerCheck, media_type: str) -> None:
        size = store.size(blob)
        super().__init__(index, digest, diff_id=check.diff_id, media_type=media_type, size=size)
        self.store = store
        self.blob = blob
        check.stored_size = size
        self.check = check
        with store.open(blob) as fh:
            self.compressed = is_compressed(fh.read(4))

    def entries(self) -> Iterator[Entry]:
        self.bytes_read = 0

        def on_read(n: int) -> None:
            self.bytes_read += n

        with self.store.open(self.blob) as raw:
            counted = io.BufferedReader(CountingReader(raw, on_read), 1 << 20)
            yield from verified_tar_entries(counted, self.check,
                                            where=f"layer {self.index} ({self.digest[:19]})")


def blob_path(digest: Any, *, where: str | None = None) -> str:
    """``blobs/<algo>/<hex>`` for a validated digest only (no ``../..`` algorithm, no odd hex)."""
    algo, _, hexd = check_digest(digest, where=where).partition(":")
    return f"blobs/{algo}/{hexd}"


_blob_path = blob_path  # kept for importers of the old name
_platform_of = platform_of  # kept for importers of the old name


def _manifest_of(store: BlobStore, platform: str | None, where: str) -> tuple[dict[str, Any], dict[str, Any], str | None]:
    """index.json down to one image manifest: (its descriptor, the document, the platform)."""
    index = store.read_json("index.json")

    def load(desc: dict[str, Any]) -> dict[str, Any]:
        return store.read_blob(desc, "index")

    desc, plat = pick_manifest(index, platform, where, load)
    manifest = store.read_blob(desc, "manifest")
    if is_index(manifest):  # an untyped descriptor that named an index after all
        desc, plat = pick_manifest(manifest, platform, where, load)
        manifest = store.read_blob(desc, "manifest")
        if is_index(manifest):
            raise ReconError("an index entry that should be an image manifest is an index", where=where)
    return desc, manifest, plat


def _open_oci(store: BlobStore, ref: str, scheme: str, platform: str | None,
              max_layer_size: int | None, max_ratio: float | None) -> Image:
    where = ref
    desc, manifest, plat = _manifest_of(store, platform, where)
    layer_descs = manifest.get("layers")
    if not isinstance(manifest.get("config"), dict) or not isinstance(layer_descs, list):
        raise ReconError(f"manifest {desc.get('digest')} has no config or no layers list", where=where)
    config_blob = store.read_blob(manifest["config"], "image config")
    diff_ids = diff_ids_of(config_blob, len(layer_descs), where)
    layers: list[Layer] = []
    for i, ld in enumerate(layer_descs):
        digest, size = descriptor(ld, f"layer {i}", where=where)
        check = LayerCheck(blob=digest, blob_size=size, diff_id=diff_ids[i],
                           max_layer_size=max_layer_size, max_ratio=max_ratio, name=f"layer {i}")
        layers.append(BlobLayer(store, blob_path(digest), i, digest, check=check,
                                media_type=str(ld.get("mediaType") or "")))
    cfg = ImageConfig.from_image_json(config_blob, where=where)
    if plat is None:
        check_platform(platform, cfg.os, cfg.architecture, where)
    return Image(ref=ref, scheme=scheme, digest=str(desc["digest"]), layers=layers, config=cfg,
                 platform=plat or (f"{cfg.os}/{cfg.architecture}" if cfg.os else None),
                 extra={"config_digest": manifest["config"]["digest"]}, closer=store.close)


def _legacy_entry(store: BlobStore, ref: str) -> dict[str, Any]:
    """The one image entry of a legacy ``manifest.json``, checked for shape."""
    from .base import _json_kind

    try:
        import json

        entries = json.loads(store.read("manifest.json"))
    except RecursionError:
        raise ReconError("manifest.json is nested too deeply to be read", where=ref) from None
    except ValueError as err:
        raise ReconError(f"manifest.json is not valid JSON ({str(err)[:120]})", where=ref) from None
    if not isinstance(entries, list) or not entries:
        raise ReconError("manifest.json lists no images", where=ref)
    if not all(isinstance(e, dict) for e in entries):
        bad = next(e for e in entries if not isinstance(e, dict))
        raise ReconError(f"manifest.json holds a JSON {_json_kind(bad)} where an image entry "
                         "(an object) belongs", where=ref)
    if len(entries) > 1:
        tags = ", ".join(str(t) for e in entries for t in (e.get("RepoTags") or []))
        raise ReconError(f"archive holds {len(entries)} images ({tags}); save one image per archive",
                         where=ref)
    ent = entries[0]
    names = ent.get("Layers")
    if not isinstance(ent.get("Config"), str) or not isinstance(names, list):
        raise ReconError("manifest.json entry has no Config name or no Layers list", where=ref)
    return ent


def _open_docker_archive(store: BlobStore, ref: str, platform: str | None,
                         max_layer_size: int | None, max_ratio: float | None) -> Image:
    if not store.exists("manifest.json"):
        if store.exists("index.json"):
            return _open_oci(store, ref, "docker-archive", platform, max_layer_size, max_ratio)
        raise ReconError("no manifest.json or index.json: not a docker save archive", where=ref)
    ent = _legacy_entry(store, ref)
    config_name = clean_name(ent["Config"], where=ref)
    raw_cfg = store.read(config_name)
    digest = digest_of(raw_cfg)
    named = _named_digest(config_name)
    if named is not None and named != digest_of(raw_cfg, named.partition(":")[0]):
        raise DigestMismatch(f"image config {config_name} does not match its name", where=ref)
    config_blob = json_object(raw_cfg, f"image config {config_name}", where=ref)
    diff_ids = diff_ids_of(config_blob, len(ent["Layers"]), ref)
    layers: list[Layer] = []
    for i, name in enumerate(ent["Layers"]):
        name = clean_name(name, where=ref)
        named = _named_digest(name)  # blobs/sha256/<hex>: the OCI form, content-addressed
        check = LayerCheck(blob=named, diff_id=diff_ids[i], max_layer_size=max_layer_size,
                           max_ratio=max_ratio, name=f"layer {i} ({name})")
        layers.append(BlobLayer(store, name, i, named or diff_ids[i], check=check, media_type=""))
    cfg = ImageConfig.from_image_json(config_blob, where=ref)
    check_platform(platform, cfg.os, cfg.architecture, ref)
    tags = ent.get("RepoTags") or []
    return Image(ref=ref, scheme="docker-archive", digest=digest, layers=layers, config=cfg,
                 platform=f"{cfg.os}/{cfg.architecture}" if cfg.os else None,
                 extra={"repo_tags": [str(t) for t in tags] if isinstance(tags, list) else []},
                 closer=store.close)


def _named_digest(name: str) -> str | None:
    """The digest a content-addressed member name (``blobs/sha256/<hex>``) promises, if it is one."""
    m = _HEX_NAME.match(name)
    if m is None:
        return None
    algo, hexd = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
    return f"{algo}:{hexd}"


def _ratio(max_ratio: float | None) -> float | None:
    return max_ratio_default() if max_ratio is None else max_ratio


def open_docker_archive(path: str, *, platform: str | None = None,
                        max_layer_size: int | None = None, max_ratio: float | None = None) -> Image:
    p = Path(path)
    if not p.exists():
        raise ReconError(f"archive not found: {path}")
    store = BlobStore(p)
    try:
        return _open_docker_archive(store, f"docker-archive:{path}", platform, max_layer_size,
                                    _ratio(max_ratio))
    except BaseException:
        store.close()
        raise


def open_oci(path: str, *, archive: bool, platform: str | None = None,
             max_layer_size: int | None = None, max_ratio: float | None = None) -> Image:
    p = Path(path)
    scheme = "oci-archive" if archive else "oci"
    if not p.exists():
        raise ReconError(f"{'archive' if archive else 'OCI layout folder'} not found: {path}")
    if not archive and not p.is_dir():
        raise ReconError(f"oci: wants a folder; for a tar use oci-archive:{path}")
    store = BlobStore(p)
    try:
        if not store.exists("index.json"):
            raise ReconError("no index.json: not an OCI image layout", where=path)
        return _open_oci(store, f"{scheme}:{path}", scheme, platform, max_layer_size,
                         _ratio(max_ratio))
    except BaseException:
        store.close()
        raise
