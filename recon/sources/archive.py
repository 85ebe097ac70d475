"""Image archives read without any Docker engine: ``docker save`` tarballs and OCI layouts.

* ``docker-archive:PATH``: the legacy ``manifest.json`` + ``<id>/layer.tar`` form,
  and the OCI form newer engines write (``index.json`` + ``blobs/``).
* ``oci:DIR`` and ``oci-archive:PATH``: an OCI image layout as a folder or a tar.

An index with several manifests is resolved by platform (``linux/amd64`` by
default); if the platform is absent the error lists the choices. Layer
compression (gzip, zstd, none) is sniffed from the bytes, not the media type.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from ..errors import ReconError
from .base import Entry, Image, ImageConfig, Layer, is_compressed, seekable_tar_entries, tar_entries
from .oci import INDEX_TYPES, pick_manifest, platform_of
from .streams import CountingReader, FileWindow

_INDEX_TYPES = INDEX_TYPES  # kept for importers of the old name


class BlobStore:
    """Reads blobs by name from a folder or from inside an (uncompressed) tar."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._tar: tarfile.TarFile | None = None
        self._members: dict[str, tarfile.TarInfo] = {}
        if path.is_dir():
            return
        try:
            self._tar = tarfile.open(path, mode="r:")
        except FileNotFoundError as err:
            raise ReconError(f"archive not found: {path}") from err
        except (tarfile.TarError, OSError) as err:
            raise ReconError(f"not a readable image archive ({err})", where=str(path)) from err
        for m in self._tar.getmembers():
            name = m.name[2:] if m.name.startswith("./") else m.name
            self._members[name] = m

    def exists(self, name: str) -> bool:
        if self._tar is None:
            return (self.path / name).is_file()
        return name in self._members

    def open(self, name: str) -> IO[bytes]:
        if self._tar is None:
            try:
                return open(self.path / name, "rb")
            except OSError as err:
                raise ReconError(f"missing blob {name}", where=str(self.path)) from err
        member = self._members.get(name)
        if member is not None and member.issym():
            target = str(Path(name).parent / member.linkname)
            member = self._members.get(target)
        if member is None or not member.isreg():
            raise ReconError(f"missing blob {name}", where=str(self.path))
        # A private file handle per blob: layers are read by several threads at once.
        return io.BufferedReader(FileWindow(self.path, member.offset_data, member.size), 1 << 20)

    def size(self, name: str) -> int:
        if self._tar is None:
            return (self.path / name).stat().st_size
        m = self._members.get(name)
        return m.size if m is not None else 0

    def read_json(self, name: str) -> Any:
        with self.open(name) as fh:
            data = fh.read(64 << 20)
        try:
            return json.loads(data)
        except ValueError as err:
            raise ReconError(f"{name} is not valid JSON ({err})", where=str(self.path)) from err

    def close(self) -> None:
        if self._tar is not None:
            self._tar.close()


class BlobLayer(Layer):
    def __init__(self, store: BlobStore, blob: str, index: int, digest: str, *,
                 diff_id: str | None, media_type: str, max_layer_size: int | None) -> None:
        super().__init__(index, digest, diff_id=diff_id, media_type=media_type,
                         size=store.size(blob))
        self.store = store
        self.blob = blob
        self.max_layer_size = max_layer_size
        with store.open(blob) as fh:
            self.compressed = is_compressed(fh.read(4))

    def entries(self) -> Iterator[Entry]:
        self.bytes_read = 0

        def on_read(n: int) -> None:
            self.bytes_read += n

        with self.store.open(self.blob) as raw:
            if raw.seekable():
                head = raw.read(4)
                raw.seek(0)
                if not is_compressed(head):
                    yield from seekable_tar_entries(
                        raw, where=f"layer {self.index} ({self.digest[:19]})",
                        on_offset=lambda n: setattr(self, "bytes_read", n))
                    self.bytes_read = raw.tell()  # through the end-of-archive marker
                    return
            counted = CountingReader(raw, on_read)
            import io

            yield from tar_entries(io.BufferedReader(counted, 1 << 20),
                                   where=f"layer {self.index} ({self.digest[:19]})",
                                   max_layer_size=self.max_layer_size)


def _blob_path(digest: str) -> str:
    algo, _, hexd = digest.partition(":")
    if not hexd or "/" in hexd or ".." in hexd:
        raise ReconError(f"malformed digest {digest!r}")
    return f"blobs/{algo}/{hexd}"


_platform_of = platform_of  # kept for importers of the old name


def _pick_manifest(store: BlobStore, index: dict[str, Any], platform: str | None,
                   where: str) -> tuple[dict[str, Any], str | None]:
    """Follow an OCI index (possibly nested) down to one image manifest descriptor."""
    return pick_manifest(index, platform, where,
                         lambda digest: store.read_json(_blob_path(digest)))


def _open_oci(store: BlobStore, ref: str, scheme: str, platform: str | None,
              max_layer_size: int | None) -> Image:
    where = ref
    index = store.read_json("index.json")
    desc, plat = _pick_manifest(store, index, platform, where)
    manifest = store.read_json(_blob_path(desc["digest"]))
    if manifest.get("mediaType") in _INDEX_TYPES or "manifests" in manifest:
        desc, plat = _pick_manifest(store, manifest, platform, where)
        manifest = store.read_json(_blob_path(desc["digest"]))
    config_blob = store.read_json(_blob_path(manifest["config"]["digest"]))
    diff_ids = (config_blob.get("rootfs") or {}).get("diff_ids") or []
    layers: list[Layer] = []
    for i, ld in enumerate(manifest.get("layers", [])):
        layers.append(BlobLayer(store, _blob_path(ld["digest"]), i, ld["digest"],
                                diff_id=diff_ids[i] if i < len(diff_ids) else None,
                                media_type=ld.get("mediaType", ""), max_layer_size=max_layer_size))
    cfg = ImageConfig.from_image_json(config_blob)
    return Image(ref=ref, scheme=scheme, digest=desc["digest"], layers=layers, config=cfg,
                 platform=plat or (f"{cfg.os}/{cfg.architecture}" if cfg.os else None),
                 extra={"config_digest": manifest["config"]["digest"]}, closer=store.close)


def _open_docker_archive(store: BlobStore, ref: str, platform: str | None,
                         max_layer_size: int | None) -> Image:
    if not store.exists("manifest.json"):
        if store.exists("index.json"):
            return _open_oci(store, ref, "docker-archive", platform, max_layer_size)
        raise ReconError("no manifest.json or index.json: not a docker save archive", where=ref)
    entries = store.read_json("manifest.json")
    if not isinstance(entries, list) or not entries:
        raise ReconError("manifest.json lists no images", where=ref)
    if len(entries) > 1:
        tags = ", ".join(t for e in entries for t in (e.get("RepoTags") or []))
        raise ReconError(f"archive holds {len(entries)} images ({tags}); save one image per archive",
                         where=ref)
    ent = entries[0]
    config_name = ent["Config"]
    with store.open(config_name) as fh:
        raw_cfg = fh.read(64 << 20)
    config_blob = json.loads(raw_cfg)
    digest = "sha256:" + hashlib.sha256(raw_cfg).hexdigest()
    diff_ids = (config_blob.get("rootfs") or {}).get("diff_ids") or []
    layers: list[Layer] = []
    for i, name in enumerate(ent.get("Layers") or []):
        ldigest = ("sha256:" + name.split("/")[-1]) if name.startswith("blobs/sha256/") else \
            (diff_ids[i] if i < len(diff_ids) else name)
        layers.append(BlobLayer(store, name, i, ldigest,
                                diff_id=diff_ids[i] if i < len(diff_ids) else None,
                                media_type="", max_layer_size=max_layer_size))
    cfg = ImageConfig.from_image_json(config_blob)
    return Image(ref=ref, scheme="docker-archive", digest=digest, layers=layers, config=cfg,
                 platform=f"{cfg.os}/{cfg.architecture}" if cfg.os else None,
                 extra={"repo_tags": ent.get("RepoTags") or []}, closer=store.close)


def open_docker_archive(path: str, *, platform: str | None = None,
                        max_layer_size: int | None = None) -> Image:
    p = Path(path)
    if not p.exists():
        raise ReconError(f"archive not found: {path}")
    store = BlobStore(p)
    try:
        return _open_docker_archive(store, f"docker-archive:{path}", platform, max_layer_size)
    except BaseException:
        store.close()
        raise


def open_oci(path: str, *, archive: bool, platform: str | None = None,
             max_layer_size: int | None = None) -> Image:
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
        return _open_oci(store, f"{scheme}:{path}", scheme, platform, max_layer_size)
    except BaseException:
        store.close()
        raise
