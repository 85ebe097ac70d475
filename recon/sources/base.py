"""The one abstraction every image source yields: an image made of layers of entries.

Like stereoscope/syft, a source (Docker engine, ``docker save`` archive, OCI
layout, wheel, folder) only has to say how to list its layers and how to
stream each layer's entries; squashing, package discovery and writing are
shared (``recon.layers``). A layer is re-openable: hardlink targets hidden by
an upper layer are fetched by reading the same layer again.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from ..errors import ReconError
from .streams import ReadAhead

FILE, DIR, SYMLINK, HARDLINK, OTHER = "file", "dir", "symlink", "hardlink", "other"


@dataclass
class Entry:
    """One member of a layer. ``open()`` is valid only while the layer is being iterated."""

    name: str  # path relative to the image root, no leading "/" ("" is the root itself)
    kind: str  # FILE | DIR | SYMLINK | HARDLINK | OTHER (device, fifo, socket)
    size: int = 0
    linkname: str | None = None  # symlink target as stored / hardlink target (root-relative)
    mode: int = 0o644
    open: Callable[[], IO[bytes]] | None = None


@dataclass
class ImageConfig:
    """The parts of an image's config a person investigating a crash wants to see."""

    env: list[str] = field(default_factory=list)
    entrypoint: list[str] | None = None
    cmd: list[str] | None = None
    labels: dict[str, str] = field(default_factory=dict)
    working_dir: str = ""
    user: str = ""
    os: str = ""
    architecture: str = ""

    @classmethod
    def from_image_json(cls, data: dict[str, Any]) -> ImageConfig:
        """Build from an OCI/Docker image config blob (``config`` or ``Config`` key)."""
        cfg = data.get("config") or data.get("Config") or {}
        return cls(
            env=list(cfg.get("Env") or []),
            entrypoint=cfg.get("Entrypoint"),
            cmd=cfg.get("Cmd"),
            labels=dict(cfg.get("Labels") or {}),
            working_dir=cfg.get("WorkingDir") or "",
            user=cfg.get("User") or "",
            os=data.get("os") or data.get("Os") or "",
            architecture=data.get("architecture") or data.get("Architecture") or "",
        )

    def env_dict(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for item in self.env:
            key, _, value = item.partition("=")
            out[key] = value
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "env": self.env, "entrypoint": self.entrypoint, "cmd": self.cmd,
            "labels": self.labels, "working_dir": self.working_dir, "user": self.user,
            "os": self.os, "architecture": self.architecture,
        }


class Layer:
    """A re-openable stream of entries. Subclasses implement :meth:`entries`."""

    def __init__(self, index: int, digest: str, *, diff_id: str | None = None,
                 media_type: str = "", size: int = 0) -> None:
        self.index = index
        self.digest = digest
        self.diff_id = diff_id
        self.media_type = media_type
        self.size = size
        self.bytes_read = 0  # compressed bytes consumed (progress bars)
        #: gzip/zstd on the wire or on disk (decides whether layers are scanned side by side)
        self.compressed = False

    def entries(self) -> Iterator[Entry]:
        raise NotImplementedError

    def entries_under(self, roots: list[str]) -> Iterator[Entry]:
        """Entries under ``roots`` (folders relative to the image root). A layer stream has
        to be read whole anyway, so by default this is :meth:`entries` and the squash
        filters; a source that reads folders on request (the engine view) reads only these."""
        return self.entries()

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"index": self.index, "digest": self.digest, "size": self.size}
        if self.diff_id:
            out["diff_id"] = self.diff_id
        if self.media_type:
            out["media_type"] = self.media_type
        return out


@dataclass
class Image:
    """What a source resolves to: config (if any), layers bottom to top, identity."""

    ref: str
    scheme: str
    digest: str | None
    layers: list[Layer]
    config: ImageConfig | None = None
    platform: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    closer: Callable[[], None] | None = None

    def close(self) -> None:
        if self.closer is not None:
            closer, self.closer = self.closer, None
            closer()


# --- tar streams ------------------------------------------------------------

_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def _gzip_reader(raw: IO[bytes]) -> IO[bytes]:
    """The fastest gzip decompressor here: ISA-L (a dependency), zlib where it could not be installed."""
    try:
        from isal import igzip  # type: ignore[import-not-found]

        return igzip.IGzipFile(fileobj=raw, mode="rb")  # type: ignore[no-any-return]
    except ImportError:
        import gzip

        return gzip.GzipFile(fileobj=raw, mode="rb")


def decompressed(raw: IO[bytes], *, where: str) -> IO[bytes]:
    """Sniff the compression by magic bytes (media types lie) and return a plain stream."""
    buffered = raw if hasattr(raw, "peek") else io.BufferedReader(raw, 1 << 20)  # type: ignore[arg-type]
    head = buffered.peek(4)[:4]  # type: ignore[union-attr]
    if head[:2] == _GZIP_MAGIC:
        return ReadAhead(_gzip_reader(buffered))  # type: ignore[return-value]
    if head == _ZSTD_MAGIC:
        import zstandard

        # read_across_frames: a multi-frame layer (zstd:chunked writes one frame per file)
        # must read as one stream; without it reads stop short at each frame end.
        return ReadAhead(zstandard.ZstdDecompressor().stream_reader(  # type: ignore[return-value]
            buffered, read_size=1 << 20, read_across_frames=True))
    return buffered  # type: ignore[return-value]


def tar_entries(stream: IO[bytes], *, where: str, strip: str = "", prefix: str = "",
                max_layer_size: int | None = None) -> Iterator[Entry]:
    """Stream a (possibly compressed) tar as :class:`Entry` objects, never extracting.

    ``strip`` removes a leading path from every member; ``prefix`` adds one
    (the Docker engine's ``get_archive`` names members relative to the folder).
    ``max_layer_size`` caps the decompressed size (decompression bombs).
    """
    from .tarstream import tar_members

    try:
        plain = decompressed(stream, where=where)
    except ReconError:
        raise
    except Exception as err:  # a gzip/zstd header the decompressor rejects at once
        raise ReconError(f"truncated or corrupt compressed data ({err})", where=where) from err
    try:
        yield from tar_members(plain, where=where, seekable=False, strip=strip, prefix=prefix,
                               max_size=max_layer_size)
    finally:
        if isinstance(plain, ReadAhead):  # a walk that stops early must stop the thread too
            plain.close()


def is_compressed(head: bytes) -> bool:
    return head[:2] == _GZIP_MAGIC or head[:4] == _ZSTD_MAGIC


def seekable_tar_entries(raw: IO[bytes], *, where: str, strip: str = "", prefix: str = "",
                         on_offset: Callable[[int], None] | None = None,
                         max_layer_size: int | None = None) -> Iterator[Entry]:
    """Entries of an *uncompressed, seekable* tar: member data is skipped by seeking.

    ``docker save`` archives hold uncompressed layers inside a seekable outer
    tar, so only the headers of the files recon does not keep are ever read.
    """
    from .tarstream import tar_members

    yield from tar_members(raw, where=where, seekable=True, strip=strip, prefix=prefix,
                           max_size=max_layer_size, on_offset=on_offset)
