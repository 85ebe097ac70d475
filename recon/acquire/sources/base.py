"""The one abstraction every image source yields: an image made of layers of entries.

Like stereoscope/syft, a source (Docker engine, ``docker save`` archive, OCI
layout, wheel, folder) only has to say how to list its layers and how to
stream each layer's entries; squashing, package discovery and writing are
shared (``recon.acquire.layers``). A layer is re-openable: hardlink targets hidden by
an upper layer are fetched by reading the same layer again.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any, cast

from ...errors import ReconError
from .entry import Entry
from .streams import ReadAhead
from .tarstream import tar_members


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
    def from_image_json(cls, data: Any, *, where: str | None = None) -> ImageConfig:
        """Build from an OCI/Docker image config blob (``config`` or ``Config`` key).

        The blob comes from the image, so every field is checked for its type:
        a config that is a list, labels that are a list or an Env entry that is
        a number is one :class:`ReconError` line naming the field, never a
        traceback further on.
        """
        if not isinstance(data, dict):
            raise ReconError(f"image config is a JSON {_json_kind(data)}, not an object", where=where)
        cfg = data.get("config") or data.get("Config") or {}
        if not isinstance(cfg, dict):
            raise ReconError(f"image config: config is a JSON {_json_kind(cfg)}, not an object",
                             where=where)
        labels = cfg.get("Labels") or {}
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            raise ReconError("image config: Labels is not an object of strings", where=where)
        return cls(
            env=_strings(cfg.get("Env"), "Env", where) or [],
            entrypoint=_strings(cfg.get("Entrypoint"), "Entrypoint", where),
            cmd=_strings(cfg.get("Cmd"), "Cmd", where),
            labels=dict(labels),
            working_dir=_string(cfg.get("WorkingDir"), "WorkingDir", where),
            user=_string(cfg.get("User"), "User", where),
            os=_string(data.get("os") or data.get("Os"), "os", where),
            architecture=_string(data.get("architecture") or data.get("Architecture"),
                                 "architecture", where),
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


def _json_kind(value: Any) -> str:
    """``list``, ``string``... as JSON calls the type, for one-line errors."""
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number")


def _strings(value: Any, key: str, where: str | None) -> list[str] | None:
    """A list of strings (Docker also accepts one string for Entrypoint/Cmd), or None."""
    if value is None:
        return None
    if isinstance(value, str) and key != "Env":
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ReconError(f"image config: {key} is not a list of strings", where=where)
    return list(value)


def _string(value: Any, key: str, where: str | None) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ReconError(f"image config: {key} is a JSON {_json_kind(value)}, not a string",
                         where=where)
    return value


def json_object(data: bytes, what: str, *, where: str | None = None) -> dict[str, Any]:
    """Parse a JSON document from an image that must be an object; one line on any failure.

    Covers what the image can do to :func:`json.loads`: bytes that are not
    JSON or not UTF-8, nesting deep enough to exhaust the recursion limit,
    and a document of the wrong type (a list where a manifest is expected).
    """
    try:
        doc = json.loads(data)
    except RecursionError:
        raise ReconError(f"{what} is nested too deeply to be read", where=where) from None
    except (ValueError, TypeError) as err:
        raise ReconError(f"{what} is not valid JSON ({str(err)[:120]})", where=where) from None
    if not isinstance(doc, dict):
        raise ReconError(f"{what} is a JSON {_json_kind(doc)}, not an object", where=where)
    return doc


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

        return cast(IO[bytes], igzip.IGzipFile(fileobj=raw, mode="rb"))
    except ImportError:
        import gzip

        return cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="rb"))


def decompressed(raw: IO[bytes], *, where: str,
                 wrap: Callable[[IO[bytes]], IO[bytes]] | None = None) -> IO[bytes]:
    """Sniff the compression by magic bytes (media types lie) and return a plain stream.

    ``wrap`` is applied to the decompressor's output *inside* the read-ahead
    thread (hashing the uncompressed stream there costs the tar walk nothing).
    """
    buffered = raw if hasattr(raw, "peek") else io.BufferedReader(cast(Any, raw), 1 << 20)
    head = buffered.peek(4)[:4]  # type: ignore[union-attr]
    wrap = wrap or (lambda s: s)
    if head[:2] == _GZIP_MAGIC:
        return ReadAhead(wrap(_gzip_reader(buffered)))  # type: ignore[return-value]
    if head == _ZSTD_MAGIC:
        import zstandard

        # read_across_frames: a multi-frame layer (zstd:chunked writes one frame per file)
        # must read as one stream; without it reads stop short at each frame end.
        return ReadAhead(wrap(zstandard.ZstdDecompressor().stream_reader(  # type: ignore[return-value, arg-type]
            buffered, read_size=1 << 20, read_across_frames=True)))
    return buffered  # type: ignore[return-value]


#: A compressed layer may expand to at most this many times its compressed size ...
DEFAULT_MAX_RATIO = 100.0
#: ... except below this floor, so small layers holding a few zero-filled files are never hit.
RATIO_FLOOR = 1 << 30
#: The per-layer cap when none is given (the largest engine layers, CUDA and torch, are ~15 GiB).
DEFAULT_MAX_LAYER_SIZE = 64 << 30


def max_ratio_default() -> float:
    """``RECON_MAX_RATIO`` when set (a number, 0 turns the ratio cap off), else the default."""
    raw = os.environ.get("RECON_MAX_RATIO", "").strip()
    if not raw:
        return DEFAULT_MAX_RATIO
    try:
        value = float(raw)
    except ValueError:
        raise ReconError(f"RECON_MAX_RATIO={raw!r} is not a number") from None
    if value < 0:
        raise ReconError(f"RECON_MAX_RATIO={raw!r} is negative")
    return value


def layer_cap(compressed_size: int | None, max_layer_size: int | None,
              max_ratio: float | None) -> tuple[int | None, str]:
    """The decompressed-size cap of one layer, and the words its error uses.

    Why two caps: the absolute one alone must be large enough for the
    biggest real layer, which lets a 1 MiB zstd bomb expand to tens of GiB;
    a ratio of the compressed size stops that bomb at once and never hits a
    real layer (engine layers expand 2-5x; a floor keeps small ones clear).
    """
    cap = max_layer_size
    hint = f"more than {max_layer_size} bytes (decompression bomb? raise the cap with --max-layer-size)"
    if max_ratio and compressed_size and compressed_size > 0:
        by_ratio = max(RATIO_FLOOR, int(compressed_size * max_ratio))
        if cap is None or by_ratio < cap:
            cap = by_ratio
            hint = (f"more than {by_ratio} bytes, {max_ratio:g}x its {compressed_size} compressed "
                    "bytes (decompression bomb? raise the cap with --max-ratio)")
    return cap, hint


def tar_entries(stream: IO[bytes], *, where: str, strip: str = "", prefix: str = "",
                max_layer_size: int | None = None) -> Iterator[Entry]:
    """Stream a (possibly compressed) tar as :class:`Entry` objects, never extracting.

    ``strip`` removes a leading path from every member; ``prefix`` adds one
    (the Docker engine's ``get_archive`` names members relative to the folder).
    ``max_layer_size`` caps the decompressed size (decompression bombs).
    """
    plain = _plain(stream, where)
    try:
        yield from tar_members(plain, where=where, seekable=False, strip=strip, prefix=prefix,
                               max_size=max_layer_size)
    finally:
        if isinstance(plain, ReadAhead):  # a walk that stops early must stop the thread too
            plain.close()


def _plain(stream: IO[bytes], where: str,
           wrap: Callable[[IO[bytes]], IO[bytes]] | None = None) -> IO[bytes]:
    try:
        return decompressed(stream, where=where, wrap=wrap)
    except ReconError:
        raise
    except Exception as err:  # a gzip/zstd header the decompressor rejects at once
        raise ReconError(f"truncated or corrupt compressed data ({err})", where=where) from err


def is_compressed(head: bytes) -> bool:
    return head[:2] == _GZIP_MAGIC or head[:4] == _ZSTD_MAGIC


@dataclass
class LayerCheck:
    """What a layer's bytes must hash to, and its caps: the inputs of :func:`verified_tar_entries`.

    ``blob``/``blob_size``: the descriptor's digest and size of the bytes as
    stored (compressed or not); ``diff_id``: the config's digest of the
    uncompressed tar. Either may be None where the format has none.
    """

    blob: str | None = None
    blob_size: int | None = None
    stored_size: int | None = None  # bytes as stored, for the ratio cap (the blob's file size)
    diff_id: str | None = None
    max_layer_size: int | None = None
    max_ratio: float | None = None
    name: str = "layer"  # "layer 3" in the mismatch message


def verified_tar_entries(raw: IO[bytes], check: LayerCheck, *, where: str,
                         on_offset: Callable[[int], None] | None = None) -> Iterator[Entry]:
    """Entries of a layer whose stored bytes and uncompressed stream are both hashed as read.

    The squash may skip most members; here every byte still goes through the
    hashes (a verified stream reads through instead of seeking), the rest of
    the stream after the end-of-archive blocks is read too, and a mismatch
    is raised from this generator when the stream ends, so it propagates out
    of the squash before anything is committed. The hashing runs on the
    read-ahead thread, next to decompression, so the tar walk does not wait
    for it. Decompression is capped by :func:`layer_cap`, checked before any
    member is skipped.
    """
    from .streams import Digesting, drain
    buffered = raw if hasattr(raw, "peek") else io.BufferedReader(cast(Any, raw), 1 << 20)
    compressed = is_compressed(buffered.peek(4)[:4])  # type: ignore[union-attr]
    checks: list[Digesting] = []

    def hashed(stream: IO[bytes], digest: str | None, size: int | None, what: str) -> IO[bytes]:
        if digest is None:
            return stream
        checks.append(Digesting(stream, digest, size=size, where=where, what=what))
        return checks[-1]  # type: ignore[return-value]

    diff_what = f"uncompressed stream of {check.name} (diff_id {check.diff_id})"
    stored = hashed(buffered, check.blob, check.blob_size, f"blob {check.blob} of {check.name}")
    if compressed:
        stream = _plain(io.BufferedReader(cast(Any, stored), 1 << 20), where,
                        wrap=lambda s: hashed(s, check.diff_id, None, diff_what))
    else:
        if check.diff_id != check.blob:
            stored = hashed(stored, check.diff_id, None, diff_what)
        stream = ReadAhead(stored)  # type: ignore[assignment]
    stored_size = check.stored_size if check.stored_size is not None else check.blob_size
    cap, hint = layer_cap(stored_size if compressed else None, check.max_layer_size, check.max_ratio)
    try:
        yield from tar_members(stream, where=where, seekable=False, max_size=cap, cap_hint=hint,
                               on_offset=on_offset)
        try:
            drain(stream, limit=cap, where=where, what=check.name, hint=hint)
            for c in checks:  # the compressed blob past the decompressor's end, then the checks
                drain(cast(IO[bytes], c), limit=None, where=where, what=check.name)
                if not c.checked:
                    c.check()
        except ReconError:
            raise
        except Exception as err:
            from .streams import stream_error

            raise stream_error(err, where) from err
    finally:
        if isinstance(stream, ReadAhead):
            stream.close()
