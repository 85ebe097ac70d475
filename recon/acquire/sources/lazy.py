"""Lazy layers: read a layer's table of contents, then only the byte ranges of wanted files.

Two layer formats carry a table of contents (TOC) inside an otherwise
ordinary compressed tar, so that every runtime can still pull them whole:

* **eStargz** (``containerd.io/snapshot/stargz/toc.digest`` annotation): a
  gzip layer made of one gzip member per tar header and per file payload;
  the last tar entry ``stargz.index.json`` is the TOC, and a 51-byte gzip
  footer names its offset (``%016xSTARGZ`` in the header's extra field).
* **zstd:chunked** (``io.containers.zstd-chunked.manifest-position``): a
  zstd layer with one frame per payload chunk and a zstd-compressed JSON
  manifest in a skippable frame; the annotation gives its offset and length.

Trust: a lazy reader never sees the whole blob, so the blob digest is not
checked. The TOC is used only when the image manifest (itself digest
checked) pins it (``toc.digest`` / ``manifest-checksum``) and every
non-empty file in it has a sha256; each file's bytes are checked against
that digest before anyone reads them. Otherwise the layer is read whole.
The one exception is a file over ``BIG_FILE``: it is streamed as it is read
(so that looking at the first bytes of a big executable the squash then
skips does not fetch all of it) and checked when its last bytes go through;
a mismatch fails the read before those bytes are handed over. So only the
choice to skip such a file (listed in the manifest, never written) can rest
on bytes not yet checked.

The squash invariant: :class:`recon.acquire.layers.Squasher` decides visibility
(whiteouts, opaque folders, a file replacing a folder) from the *names and
kinds of every entry* of every layer, not only the files it keeps. A TOC
lists every tar entry of the layer, whiteout and opaque markers included
(they are ordinary zero-length files), in tar order; only the format's own
TOC member is left out. So :meth:`LazyLayer.entries` yields exactly the
entries a full read would, and file contents are fetched only when the
squash calls ``open()``.

Fetched file contents (a streamed file only once read to the end) go to the
shared blob cache under their own sha256, and the parsed TOC is kept keyed
by the layer digest, so a second snapshot of the same layer asks the
registry for nothing.
"""

from __future__ import annotations

import contextlib
import fnmatch
import gzip
import io
import json
import re
import tarfile
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import IO, Any, Protocol

from ...errors import ReconError, UnsafeArchiveError
from ..blobcache import BlobCache, Tee, check_digest, digest_of
from .base import Layer, layer_cap
from .entry import DIR, FILE, HARDLINK, OTHER, SYMLINK, Entry
from .streams import Bounded, CountingReader
from .tarstream import _check_name

ESTARGZ_TOC_DIGEST = "containerd.io/snapshot/stargz/toc.digest"
ZSTD_POSITION_KEYS = ("io.github.containers.zstd-chunked.manifest-position",
                      "io.containers.zstd-chunked.manifest-position")
ZSTD_CHECKSUM_KEYS = ("io.github.containers.zstd-chunked.manifest-checksum",
                      "io.containers.zstd-chunked.manifest-checksum")
TOC_NAME = "stargz.index.json"
FOOTER_SIZE = 51  # eStargz; the legacy stargz footer is 47 bytes
_FOOTER_RE = re.compile(rb"([0-9a-f]{16})STARGZ")
MAX_TOC = 256 << 20  # compressed or not, a TOC larger than this is refused
BIG_FILE = 8 << 20  # files above this are streamed on their own
STREAM_BUFFER = 64 << 10  # read-ahead of a streamed file (what a peek at its first bytes costs)
STREAM_FIRST = 256 << 10  # a streamed file's first range request; the rest is asked for if read
BATCH_SPAN = 16 << 20  # one range request covers at most this many compressed bytes
BATCH_GAP = 256 << 10  # and never skips more than this between two wanted files
INDEX_VERSION = 1
UPPER_WAIT = 600.0  # seconds a lazy layer waits for the scan of a lazy layer above it
_KINDS = {"reg": FILE, "dir": DIR, "symlink": SYMLINK, "hardlink": HARDLINK,
          "char": OTHER, "block": OTHER, "fifo": OTHER}
_BINARY = ("*.so", "*.so.*", "*.cubin", "*.fatbin", "*.a", "*.o", "*.dll", "*.dylib")
_PKG_RE = re.compile(r"^(.*?(?:site|dist)-packages/[^/]+)/")


class RangeReader(Protocol):
    """Random access to a blob: a registry (HTTP ``Range``) or a local cached file."""

    size: int

    def read(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the blob, exactly."""

    def stream(self, start: int, end: int) -> IO[bytes]:
        """A stream of bytes ``[start, end)`` (for large files)."""


@dataclass
class TocEntry:
    """One tar entry as the TOC lists it, with the compressed range holding its payload."""

    name: str
    kind: str
    size: int = 0
    linkname: str | None = None
    mode: int = 0o644
    digest: str | None = None
    start: int = 0
    end: int = 0


def lazy_format(annotations: dict[str, str] | None) -> str | None:
    """"estargz", "zstd:chunked" or None, from a layer descriptor's annotations."""
    ann = annotations or {}
    if any(k in ann for k in ZSTD_POSITION_KEYS) and any(k in ann for k in ZSTD_CHECKSUM_KEYS):
        return "zstd:chunked"
    if ESTARGZ_TOC_DIGEST in ann:
        return "estargz"
    return None


def _clean(name: str) -> str:
    while name.startswith("./"):
        name = name[2:]
    return name.strip("/")


# --- eStargz --------------------------------------------------------------------

def estargz_toc_offset(tail: bytes, *, where: str) -> int:
    """The TOC offset named by the footer (the last bytes of the blob)."""
    found = _FOOTER_RE.findall(tail)
    if not found:
        raise ReconError("no eStargz footer at the end of the layer", where=where)
    return int(found[-1], 16)


def parse_estargz(reader: RangeReader, toc_digest: str, *, where: str) -> list[TocEntry]:
    """Fetch the footer and the TOC, check the TOC against its pinned digest, list entries."""
    check_digest(toc_digest, where=where)
    tail = reader.read(max(0, reader.size - FOOTER_SIZE), reader.size)
    toc_off = estargz_toc_offset(tail, where=where)
    if not 0 <= toc_off < reader.size or reader.size - toc_off > MAX_TOC:
        raise ReconError(f"eStargz TOC offset {toc_off} is out of range", where=where)
    raw = reader.read(toc_off, reader.size)  # the TOC member, then the (empty) footer member
    try:
        plain = gzip.GzipFile(fileobj=io.BytesIO(raw)).read(MAX_TOC + 1)
        with tarfile.open(fileobj=io.BytesIO(plain), mode="r:") as tf:
            member = tf.next()
            if member is None or member.name != TOC_NAME or not member.isreg():
                raise ReconError(f"the eStargz TOC member is not {TOC_NAME}", where=where)
            fh = tf.extractfile(member)
            assert fh is not None
            toc_bytes = fh.read()
    except ReconError:
        raise
    except (OSError, EOFError, zlib.error, tarfile.TarError) as err:
        raise ReconError(f"unreadable eStargz TOC ({err})", where=where) from err
    got = digest_of(toc_bytes, toc_digest.partition(":")[0])
    if got != toc_digest:
        raise ReconError(f"eStargz TOC does not match the digest the manifest pins "
                         f"({toc_digest}, got {got})", where=where)
    try:
        toc = json.loads(toc_bytes)
    except (ValueError, RecursionError) as err:
        raise ReconError(f"eStargz TOC is not JSON ({err})", where=where) from err
    return _checked_entries(toc, default_end=toc_off, where=where, gzip_ranges=True)


# --- zstd:chunked -------------------------------------------------------------------

def parse_zstd_chunked(reader: RangeReader, annotations: dict[str, str], *, where: str) -> list[TocEntry]:
    """Fetch the manifest the annotations point at, check its checksum, list entries."""
    position = next(annotations[k] for k in ZSTD_POSITION_KEYS if k in annotations)
    checksum = check_digest(next(annotations[k] for k in ZSTD_CHECKSUM_KEYS if k in annotations),
                            where=where)
    try:
        off, length, ulength, kind = (int(x) for x in position.split(":")[:4])
    except ValueError as err:
        raise ReconError(f"bad zstd:chunked manifest position {position!r}", where=where) from err
    if kind != 1:
        raise ReconError(f"zstd:chunked manifest type {kind} is not supported", where=where)
    if off < 0 or length <= 0 or off + length > reader.size or length > MAX_TOC or ulength > 4 * MAX_TOC:
        raise ReconError(f"zstd:chunked manifest position {position!r} is out of range", where=where)
    raw = reader.read(off, off + length)
    got = digest_of(raw, checksum.partition(":")[0])
    if got != checksum:
        raise ReconError(f"zstd:chunked manifest does not match the checksum the image manifest pins "
                         f"({checksum}, got {got})", where=where)
    import zstandard

    try:
        data = zstandard.ZstdDecompressor().decompress(raw, max_output_size=ulength)
        toc = json.loads(data)
    except (zstandard.ZstdError, ValueError, RecursionError) as err:
        raise ReconError(f"unreadable zstd:chunked manifest ({str(err)[:160]})", where=where) from err
    return _checked_entries(toc, default_end=off, where=where, gzip_ranges=False)


# --- shared TOC logic ---------------------------------------------------------------

def _checked_entries(toc: Any, *, default_end: int, where: str, gzip_ranges: bool) -> list[TocEntry]:
    """:func:`_toc_entries`, with a TOC of the wrong shape reported as one clear error."""
    if not isinstance(toc, dict) or not isinstance(toc.get("entries") or [], list):
        raise ReconError("the layer's TOC is not a JSON object with an entries list", where=where)
    try:
        return _toc_entries(toc.get("entries") or [], default_end=default_end, where=where,
                            gzip_ranges=gzip_ranges)
    except (ValueError, TypeError, KeyError) as err:
        raise ReconError(f"malformed TOC entry ({type(err).__name__}: {err})", where=where) from err


def _toc_entries(raw: list[dict[str, Any]], *, default_end: int, where: str,
                 gzip_ranges: bool) -> list[TocEntry]:
    """Turn TOC records into entries in tar order; chunks merge into their file's range.

    eStargz gives only where each payload *starts*; a payload ends before the
    next recorded start (or the TOC), which may include a few header bytes
    that decompression stops short of. zstd:chunked gives ``endOffset``.
    """
    starts = sorted({int(e["offset"]) for e in raw if isinstance(e, dict) and e.get("offset")})
    import bisect

    def next_start(after: int) -> int:
        i = bisect.bisect_right(starts, after)
        return starts[i] if i < len(starts) else default_end

    out: list[TocEntry] = []
    last_file: TocEntry | None = None
    pinned_end = False  # the file's record gave its end (zstd:chunked endOffset)
    for rec in raw:
        if not isinstance(rec, dict):
            raise ReconError("malformed TOC entry", where=where)
        kind_name = rec.get("type")
        if kind_name == "chunk":
            _merge_chunk(rec, last_file, pinned_end, next_start, default_end, where)
            continue
        kind = _KINDS.get(str(kind_name))
        if kind is None:
            raise ReconError(f"unknown TOC entry type {kind_name!r}", where=where)
        name = _clean(str(rec.get("name", "")))
        if name == TOC_NAME:
            continue
        _check_name(name, "name", 0, where)
        entry = TocEntry(name=name, kind=kind, size=int(rec.get("size") or 0),
                         mode=int(rec.get("mode") or 0) & 0o7777)
        if kind in (SYMLINK, HARDLINK):
            entry.linkname = str(rec.get("linkName") or "")
            _check_name(entry.linkname, "link target", 0, where)
            if kind == HARDLINK:
                entry.linkname = _clean(entry.linkname)
        if kind == FILE:
            entry.size = max(entry.size, 0)
            if entry.size:  # an empty file leaves pinned_end as the previous file set it
                pinned_end = _payload_range(entry, rec, next_start, default_end, where, gzip_ranges)
            last_file = entry
        else:
            last_file = None
        out.append(entry)
    return out


def _merge_chunk(rec: dict[str, Any], last_file: TocEntry | None, pinned_end: bool,
                 next_start: Callable[[int], int], default_end: int, where: str) -> None:
    """Widen the file just listed over one of its chunks (a TOC splits large files in chunks)."""
    if last_file is None or _clean(str(rec.get("name", ""))) != last_file.name:
        raise ReconError("TOC chunk without its file", where=where)
    # "zeros" only hints that the chunk is a run of zero bytes: its compressed bytes are
    # still in the blob (a plain reader needs them), and the file digest checks the result
    if rec.get("chunkType") not in (None, "", "data", "zeros"):
        raise _Unsupported(f"chunk type {rec.get('chunkType')!r}")
    if rec.get("offset") and not pinned_end:
        last_file.end = max(last_file.end, next_start(int(rec["offset"])))
    if last_file.end > default_end:
        raise ReconError(f"file {last_file.name!r} has a chunk out of the layer", where=where)


def _payload_range(entry: TocEntry, rec: dict[str, Any], next_start: Callable[[int], int],
                   default_end: int, where: str, gzip_ranges: bool) -> bool:
    """Set a non-empty file's digest and compressed range; True when its record gave the end."""
    name = entry.name
    digest = rec.get("digest")
    if not digest:
        raise _Unsupported(f"file {name!r} has no digest in the TOC")
    entry.digest = check_digest(str(digest), where=where)
    start = int(rec.get("offset") or 0)
    if start <= 0:
        raise ReconError(f"file {name!r} has no payload offset in the TOC", where=where)
    entry.start = start
    end = rec.get("endOffset")
    pinned_end = bool(end) and not gzip_ranges
    entry.end = int(end) if pinned_end else next_start(start)  # type: ignore[arg-type]
    if not 0 < entry.start < entry.end <= default_end:
        raise ReconError(f"file {name!r} has a payload range out of the layer", where=where)
    return pinned_end


class _Unsupported(Exception):
    """A TOC feature recon does not read lazily: the layer is read whole instead."""


def _decompressor(fmt: str, raw: IO[bytes]) -> IO[bytes]:
    if fmt == "estargz":
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]
    import zstandard

    return zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)  # type: ignore[return-value]


def _exactly(raw: IO[bytes], size: int, where: str) -> IO[bytes]:
    """Exactly ``size`` decompressed bytes of one TOC entry; fewer is corruption."""
    return Bounded(raw, size, where=where, short="payload shorter than the TOC says")  # type: ignore[return-value]


class _SplitRange(io.RawIOBase):
    """Bytes ``[start, end)`` of a blob in two range requests: the first ``first`` bytes, then,
    only if they are all read, the rest.

    A server sends ahead of the reader as far as the socket buffers allow
    (megabytes), so one request for a whole big file costs that much even
    when the reader stops after a few bytes; the first request bounds it.
    """

    def __init__(self, reader: RangeReader, start: int, end: int, first: int) -> None:
        self.reader, self.pos, self.end = reader, start, end
        self.cut = min(end, start + first)
        self.cur: IO[bytes] | None = reader.stream(start, self.cut)

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        while self.cur is not None:
            n = self.cur.readinto(buf)  # type: ignore[attr-defined]
            if n:
                self.pos += n
                return n  # type: ignore[no-any-return]
            if self.pos != self.cut or self.cut >= self.end:
                return 0  # the end, or a short answer (the reader above reports it)
            self.cur.close()
            self.cur = None  # a failed request below leaves nothing to close twice
            self.cur = self.reader.stream(self.pos, self.end)
            self.cut = self.end
        return 0

    def close(self) -> None:
        if self.cur is not None:
            self.cur.close()
            self.cur = None
        super().close()


class _Streamed(io.RawIOBase):
    """Exactly ``size`` decompressed bytes of ``raw`` (one file's range request).

    Closing closes ``raw`` where it stands: for a registry response that
    closes the connection instead of reading the rest of the body.
    """

    def __init__(self, raw: IO[bytes], fmt: str, size: int, where: str,
                 on_read: Callable[[int], None]) -> None:
        self.raw = raw
        self.dec = _decompressor(fmt, CountingReader(raw, on_read))  # type: ignore[arg-type]
        self.plain = _exactly(self.dec, size, where)

    def readable(self) -> bool:
        return True

    def read(self, n: int | None = -1) -> bytes:
        return self.plain.read(-1 if n is None else n)

    def readinto(self, buf: Any) -> int:
        data = self.plain.read(len(buf))
        memoryview(buf)[:len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            with contextlib.suppress(Exception):
                self.dec.close()
            self.raw.close()
        super().close()


class LazyLayer(Layer):
    """A layer read through its TOC: entries from the TOC, contents by byte range on ``open()``.

    ``make_reader()`` returns the blob's :class:`RangeReader`. ``fallback``
    is called (once) when the TOC turns out not to be usable lazily; its
    layer is then read whole instead.
    """

    def __init__(self, index: int, digest: str, *, fmt: str, annotations: dict[str, str],
                 make_reader: Callable[[], RangeReader], cache: BlobCache,
                 fallback: Callable[[], Layer], diff_id: str | None = None,
                 media_type: str = "", size: int = 0, max_layer_size: int | None = None,
                 max_ratio: float | None = None) -> None:
        super().__init__(index, digest, diff_id=diff_id, media_type=media_type, size=size)
        self.fmt = fmt
        self.annotations = annotations
        self.make_reader = make_reader
        self.cache = cache
        self.fallback = fallback
        self.max_layer_size = max_layer_size
        self.max_ratio = max_ratio
        self.where = f"layer {index} ({digest[:19]})"
        self._toc: list[TocEntry] | None = None
        self._reader: RangeReader | None = None
        self._whole: Layer | None = None
        self.future: Any = None  # set when a pool prepares the layer ahead of the squash
        #: Lazy layers above this one in the same image (set by the source); see :meth:`entries`.
        self.above: list[LazyLayer] = []
        self._started = threading.Event()
        self._listed = threading.Event()

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["format"] = self.fmt
        out["read"] = "whole" if self._whole is not None else "lazy"
        return out

    # -- the TOC ---------------------------------------------------------------------
    @property
    def reader(self) -> RangeReader:
        if self._reader is None:
            self._reader = self.make_reader()
        return self._reader

    def prepare(self) -> None:
        """Load the TOC (from the cache, else the registry); decide lazy or whole."""
        if self._toc is not None or self._whole is not None:
            return
        key = f"{self.fmt}-v{INDEX_VERSION}"
        cached = self.cache.read_derived(key, self.digest)
        if cached is not None:
            try:
                self._toc = [TocEntry(**e) for e in json.loads(cached)]
                return
            except (ValueError, TypeError):
                pass  # an index from another version: rebuild it
        try:
            if self.fmt == "estargz":
                toc = parse_estargz(self.reader, self.annotations[ESTARGZ_TOC_DIGEST], where=self.where)
            else:
                toc = parse_zstd_chunked(self.reader, self.annotations, where=self.where)
        except _Unsupported:
            self._whole = self.fallback()
            return
        total = sum(e.size for e in toc)
        cap, hint = layer_cap(self.size, self.max_layer_size, self.max_ratio)
        if cap is not None and total > cap:
            raise UnsafeArchiveError(f"layer's table of contents adds up to {hint}", where=self.where)
        self.cache.write_derived(key, self.digest, json.dumps([asdict(e) for e in toc]).encode())
        self._toc = toc

    def entries(self) -> Iterator[Entry]:
        """The TOC's entries, in tar order; a file's bytes are fetched when it is opened.

        The squash scans layers in parallel, top first, and skips opening a
        file that an upper layer it has *finished* scanning hides. A lazy
        layer therefore first waits (bounded) for the lazy layers above it
        whose scan is under way: listing a TOC is instant, so this costs
        little time and saves fetching files an upper layer replaces (a
        release upgraded in a later layer). Only bytes fetched depend on
        it, never the result; layers not being scanned are not waited for.
        """
        self._started.set()
        try:
            for upper in self.above:
                if upper._started.is_set() and not upper._listed.is_set():
                    upper._listed.wait(UPPER_WAIT)
                    time.sleep(0.05)  # let the squash record the finished scan
            if self.future is not None:
                self.future.result()
            self.prepare()
            if self._whole is not None:
                yield from self._whole.entries()
                self.bytes_read = self._whole.bytes_read
                return
            toc = self._toc
            assert toc is not None
            for i, e in enumerate(toc):
                opener = None
                if e.kind == FILE:
                    opener = (lambda i=i: self._open(toc, i))  # noqa: E731
                yield Entry(e.name, e.kind, e.size, e.linkname, e.mode, opener)
        finally:
            self._listed.set()

    # -- contents ------------------------------------------------------------------------
    def _open(self, toc: list[TocEntry], i: int) -> IO[bytes]:
        e = toc[i]
        if not e.size:
            return io.BytesIO(b"")
        assert e.digest is not None
        fh = self.cache.open(e.digest)
        if fh is not None:
            return fh
        where = f"{self.where}: {e.name}"
        if e.size > BIG_FILE:
            return self._stream(e, where)
        self._fetch_batch(toc, self._plan(toc, i))
        fh = self.cache.open(e.digest)
        if fh is None:  # pragma: no cover - put_* either stored it or raised
            raise ReconError("file vanished from the cache", where=where)
        return fh

    def _stream(self, e: TocEntry, where: str) -> IO[bytes]:
        """A big file read straight from its range request through the decompressor.

        Only what the reader asks for travels: the squash looks at the first
        bytes of every file it keeps and skips executables (``vllm/vllm-rs``,
        60 MB), and closing the reader then ends the transfer (the file is
        asked for in two ranges, so the registry sends at most the first
        ``STREAM_FIRST`` bytes for a file left after a peek). A file read to
        the end is kept in the blob cache if its bytes match the TOC digest;
        if they do not, the read fails before its last bytes are handed over.
        """
        def count(n: int) -> None:
            self.bytes_read += n

        assert e.digest is not None
        raw: IO[bytes] = _SplitRange(self.reader, e.start, e.end, STREAM_FIRST)  # type: ignore[assignment]
        try:
            payload = _Streamed(raw, self.fmt, e.size, where, count)
            tee = Tee(payload, e.size, self.cache, expect=e.digest, where=where)  # type: ignore[arg-type]
        except BaseException:
            raw.close()
            raise
        return io.BufferedReader(tee, STREAM_BUFFER)  # type: ignore[return-value]

    def _plan(self, toc: list[TocEntry], i: int) -> list[int]:
        """``i`` plus the files right after it in the same package folder: one range request.

        The squash opens a package's files one after the other, and a
        package's files are adjacent in its layer, so reading ahead within
        the package turns thousands of tiny requests into a few. Binaries
        (which the squash skips by default) and big files are not read ahead.
        """
        group = _group(toc[i].name)
        plan = [i]
        end = toc[i].end
        for j in range(i + 1, len(toc)):
            e = toc[j]
            if e.kind != FILE or not e.size:
                if _group(e.name) != group and e.kind != DIR:
                    break
                continue
            if _group(e.name) != group or e.size > BIG_FILE or \
                    any(fnmatch.fnmatchcase(e.name.rpartition("/")[2], g) for g in _BINARY):
                break
            if e.start - end > BATCH_GAP or e.end - toc[i].start > BATCH_SPAN or e.start < end:
                break
            if self.cache.has(e.digest or ""):
                break
            plan.append(j)
            end = e.end
        return plan

    def _fetch_batch(self, toc: list[TocEntry], plan: list[int]) -> None:
        base = toc[plan[0]].start
        data = self.reader.read(base, toc[plan[-1]].end)
        self.bytes_read += len(data)
        for j in plan:
            e = toc[j]
            where = f"{self.where}: {e.name}"
            raw = io.BytesIO(memoryview(data)[e.start - base:e.end - base])
            content = _exactly(_decompressor(self.fmt, raw), e.size, where).read()  # type: ignore[attr-defined]
            assert e.digest is not None
            self.cache.put_bytes(e.digest, content, where=where)


def _group(name: str) -> str:
    m = _PKG_RE.match(name)
    return m.group(1) if m else name.rpartition("/")[0]
