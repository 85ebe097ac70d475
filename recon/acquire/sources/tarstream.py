"""A lean tar reader: one pass over 512-byte headers, member data skipped or streamed.

Why not :mod:`tarfile`: an engine image has tens of thousands of members and
recon keeps a few thousand; ``tarfile`` spends about 30 us building each
``TarInfo`` (every field decoded, checksums computed twice, member lists),
which made header parsing the largest cost of a snapshot. This reader decodes
only what squashing needs (name, type, size, link target, mode) and follows
the format rules the Docker engine's Go reader follows:

* ustar (with the 155-byte name prefix), GNU (``L``/``K`` long names and
  links; the prefix area holds times there, so it is not a prefix) and PAX
  (``path``, ``linkpath``, ``size`` records). Global PAX headers are ignored,
  as the engine does when it applies a layer.
* Checksums are verified (unsigned, or signed as old tars wrote them); a bad
  one is corruption, reported with the layer and the byte offset.
* Sizes may be octal or base-256. Special headers (long names, PAX) are
  capped at 1 MiB; the layer's decompressed size is capped by
  ``max_size`` *before* any member is skipped, so a bomb is refused without
  decompressing it.
* GNU sparse members are listed but refuse to open: recon never needs one
  (Docker's own tar writer cannot produce them).

Nothing here writes to disk; :class:`Entry` objects are handed to the squash.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import IO

from ...errors import ReconError, UnsafeArchiveError
from .entry import DIR, FILE, HARDLINK, OTHER, SYMLINK, Entry
from .streams import Bounded, stream_error

BLOCK = 512
_ZERO = bytes(BLOCK)
_SPECIAL_MAX = 1 << 20  # PAX records (the Docker engine's Go reader uses the same cap)
_LONG_MAX = 64 << 10  # a GNU long name or link: far above PATH_MAX, so the name check below says why
PATH_MAX = 4096  # the kernel's limits: no layer the engine can apply holds a longer name...
NAME_MAX = 255  # ... or a longer component
_KINDS = {b"0": FILE, b"\0": FILE, b"7": FILE, b"1": HARDLINK, b"2": SYMLINK, b"5": DIR,
          b"3": OTHER, b"4": OTHER, b"6": OTHER}
_SPECIAL = (b"L", b"K", b"x", b"X", b"g")  # GNU long name/link, PAX (and Solaris X), global PAX
_SPECIAL_KINDS = {b"L": "GNU long name", b"K": "GNU long link"}  # the rest are PAX
_POSIX_MAGIC = b"ustar\x0000"
_STAR_TRAILER = b"tar\0"


def _number(field: bytes, what: str, where: str) -> int:
    """An octal field, or GNU base-256 when the high bit of the first byte is set."""
    if field and field[0] & 0x80:
        if field[0] & 0x40:  # 0xff...: a negative number
            raise ReconError(f"negative {what} in a tar header", where=where)
        return int.from_bytes(bytes([field[0] & 0x7F]) + field[1:], "big")
    text = field.split(b"\0", 1)[0].strip(b" ")
    if not text:
        return 0
    try:
        return int(text, 8)
    except ValueError:
        raise ReconError(f"bad {what} field {field!r} in a tar header", where=where) from None


def _text(raw: bytes) -> str:
    """A NUL-terminated name field, decoded the way Python decodes file names."""
    return raw.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _checksum_ok(buf: bytes) -> bool:
    stored = buf[148:156].split(b"\0", 1)[0].strip(b" ")
    try:
        want = int(stored, 8)
    except ValueError:
        return False
    unsigned = sum(buf) - sum(buf[148:156]) + 256
    if unsigned == want:
        return True
    signed = unsigned - 2 * sum(b for b in buf[:148] + buf[156:] if b > 127)
    return signed == want


def _pax_records(data: bytes, where: str) -> dict[str, str]:
    """``"%d %s=%s\\n"`` records, each length counting the whole record."""
    out: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        space = data.find(b" ", pos)
        if space < 0:
            break
        try:
            length = int(data[pos:space])
        except ValueError:
            raise ReconError("malformed PAX header record", where=where) from None
        if length <= 0 or pos + length > len(data):
            raise ReconError("malformed PAX header record", where=where)
        record = data[space + 1:pos + length - 1]
        key, eq, value = record.partition(b"=")
        if not eq:
            raise ReconError("malformed PAX header record", where=where)
        out[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return out


def _sparse(name: str, where: str) -> IO[bytes]:
    raise ReconError(f"{name!r} is stored as a GNU sparse file, which recon does not read",
                     where=where)


class _TarStream:
    """The stream a tar walk reads and its byte offset, shared by every stage of the walk."""

    def __init__(self, raw: IO[bytes], *, where: str, seekable: bool, noun: str,
                 max_size: int | None, cap_hint: str | None) -> None:
        self.raw = raw
        self.read = raw.read
        self.scratch = memoryview(bytearray(1 << 20))
        # ReadAhead drops whole blocks without copying them
        self.fast_skip: Callable[[int], int] | None = getattr(raw, "skip", None)
        self.where = where
        self.seekable = seekable
        self.noun = noun
        self.max_size = max_size
        self.cap_hint = cap_hint
        self.pos = 0  # bytes consumed from the stream

    def header(self) -> bytes | None:
        """The next header block, checksum verified; None where the archive ends."""
        buf = self.read(BLOCK)
        if len(buf) < BLOCK:
            if not buf:
                return None  # no end-of-archive blocks: tolerated, as tarfile and Go do
            raise ReconError(f"{self.noun} ends inside a tar header at offset {self.pos} "
                             "(truncated)", where=self.where)
        if buf == _ZERO:
            return None
        if not _checksum_ok(buf):
            raise ReconError(f"bad tar header checksum at offset {self.pos} (not a tar layer, "
                             "or truncated or corrupt)", where=self.where)
        self.pos += BLOCK
        return buf

    def skip(self, n: int, name: str) -> None:
        """Drop ``n`` bytes of member data or padding, refusing a stream that ends first."""
        if n <= 0:
            return
        if self.seekable:
            # Seeking past the end is not an error for files; reading the last byte is
            # (a truncated layer must not pass for a complete one). The next header read
            # is then served from the same buffer refill.
            self.raw.seek(n - 1, io.SEEK_CUR)
            if not self.read(1):
                raise ReconError(f"{self.noun} ends inside {name!r} (truncated)", where=self.where)
            self.pos += n
            return
        if self.fast_skip is not None:
            if self.fast_skip(n) != n:
                raise ReconError(f"{self.noun} ends inside {name!r} (truncated)", where=self.where)
            self.pos += n
            return
        readinto = self.raw.readinto  # type: ignore[attr-defined]
        left = n
        while left:
            got = readinto(self.scratch[: min(left, len(self.scratch))])
            if not got:
                raise ReconError(f"{self.noun} ends inside {name!r} (truncated)", where=self.where)
            left -= got
        self.pos += n

    def special(self, size: int, kind: str) -> bytes:
        """A long-name or PAX header's data, capped before it is read (hostile sizes)."""
        most = _SPECIAL_MAX if kind == "PAX" else _LONG_MAX
        if size > most:
            raise UnsafeArchiveError(f"{kind} header of {size} bytes at offset {self.pos} "
                                     f"(over the {most}-byte cap)", where=self.where)
        data = self.read(size)
        if len(data) < size:
            raise ReconError(f"{self.noun} ends inside a {kind} header (truncated)",
                             where=self.where)
        self.pos += size
        self.skip(-size % BLOCK, kind)
        return data

    def sparse_extensions(self) -> None:
        """Step over an old GNU sparse header's extension blocks (the member never opens)."""
        while True:
            ext = self.read(BLOCK)
            if len(ext) < BLOCK:
                raise ReconError(f"{self.noun} ends inside a sparse header (truncated)",
                                 where=self.where)
            self.pos += BLOCK
            if not ext[504]:
                break

    def check_cap(self, padded: int, name: str) -> None:
        """Refuse a member whose data takes the tar past ``max_size``, before any of it is read."""
        if self.max_size is not None and self.pos + padded > self.max_size:
            raise UnsafeArchiveError(
                f"{self.noun} expands to " + (self.cap_hint or f"more than {self.max_size} bytes "
                                              "(decompression bomb? raise the cap with "
                                              "--max-layer-size)")
                + f" at {name[:200]!r}", where=self.where)

    def finish_file(self, size: int, padded: int, data: Bounded | None, name: str) -> None:
        """Count what the consumer read of a member's data, then skip the rest and the padding."""
        consumed = size - data.left if data is not None else 0
        self.pos += consumed
        self.skip(padded - consumed, name)


@dataclass
class _Pending:
    """Extended headers (GNU long name/link, PAX) waiting for the member header they describe."""

    long_name: str | None = None
    long_link: str | None = None
    pax: dict[str, str] = field(default_factory=dict)
    pax_bytes: int = 0

    def add(self, flag: bytes, data: bytes, pos: int, where: str) -> None:
        """Keep one extended header for the next member (global PAX is dropped)."""
        if flag == b"L":
            self.long_name = _text(data)
        elif flag == b"K":
            self.long_link = _text(data)
        elif flag != b"g":  # global PAX headers are ignored, as the engine does
            self.pax.update(_pax_records(data, where))
            self.pax_bytes += len(data)
            if self.pax_bytes > _SPECIAL_MAX:  # many PAX headers in a row, one member
                raise UnsafeArchiveError(f"PAX headers of more than {_SPECIAL_MAX} bytes for "
                                         f"one member at offset {pos}", where=where)

    def member(self, buf: bytes, flag: bytes, size: int,
               where: str) -> tuple[str, str, int, bool]:
        """A member header's name, link target, size and sparseness, extended headers used up."""
        magic = buf[257:265]
        name = _text(buf[:100])
        if magic == _POSIX_MAGIC:
            head = buf[345:476] if buf[508:512] == _STAR_TRAILER else buf[345:500]
            if head[0]:
                name = f"{_text(head)}/{name}"
        if self.long_name is not None:
            name, self.long_name = self.long_name, None
        linkname = _text(buf[157:257])
        if self.long_link is not None:
            linkname, self.long_link = self.long_link, None
        sparse = flag == b"S"
        if self.pax:
            name, linkname, size, sparse = _apply_pax(self.pax, name, linkname, size, sparse, where)
            self.pax = {}
        self.pax_bytes = 0
        return name, linkname, size, sparse


def _apply_pax(pax: dict[str, str], name: str, linkname: str, size: int, sparse: bool,
               where: str) -> tuple[str, str, int, bool]:
    """PAX records override the header's name, link target and size (and may mark it sparse)."""
    name = pax.get("path", name)
    linkname = pax.get("linkpath", linkname)
    if "size" in pax:
        try:
            size = int(pax["size"])
        except ValueError:
            size = -1
        if size < 0:
            raise ReconError(f"bad PAX size record {pax['size']!r}", where=where)
    if "GNU.sparse.name" in pax:
        name, sparse = pax["GNU.sparse.name"], True
    return name, linkname, size, sparse


def _kind(flag: bytes, name: str, sparse: bool) -> str:
    """The entry kind a header's type flag stands for (sparse members are files)."""
    kind = FILE if sparse else _KINDS.get(flag, FILE)
    if kind == FILE and not flag[0] and name.endswith("/"):
        kind = DIR  # old V7 tars mark directories with a trailing slash
    return kind


def _dataless_entry(kind: str, name: str, linkname: str, mode: int, strip: str,
                    prefix: str) -> Entry:
    """A directory, link or device: no data to hand out, a hard link's target renamed too."""
    if kind == DIR:
        return Entry(name, DIR, 0, None, mode)
    if kind == SYMLINK:
        return Entry(name, SYMLINK, 0, linkname, mode)
    if kind == HARDLINK:
        return Entry(name, HARDLINK, 0, member_name(linkname, strip, prefix), mode)
    return Entry(name, OTHER, 0, None, mode)


def tar_members(raw: IO[bytes], *, where: str, seekable: bool, strip: str = "", prefix: str = "",
                max_size: int | None = None, cap_hint: str | None = None, noun: str = "layer",
                on_offset: Callable[[int], None] | None = None) -> Iterator[Entry]:
    """Entries of an uncompressed tar stream, in archive order.

    ``seekable``: member data not read is skipped with ``seek`` (a file);
    otherwise it is read and dropped (a decompressor). ``strip``/``prefix``
    rename members (see :func:`member_name`). ``on_offset`` receives each
    member's data offset (progress, and the registry's offset listing).
    ``Entry.open()`` is valid until the next entry is requested. ``cap_hint``
    words the error past ``max_size``; ``noun`` names the tar in errors
    ("layer", "archive").
    """
    stream = _TarStream(raw, where=where, seekable=seekable, noun=noun, max_size=max_size,
                        cap_hint=cap_hint)
    pending = _Pending()
    try:
        while True:
            buf = stream.header()
            if buf is None:
                return
            flag = buf[156:157]
            size = _number(buf[124:136], "size", where)
            if flag in _SPECIAL:
                data = stream.special(size, _SPECIAL_KINDS.get(flag, "PAX"))
                pending.add(flag, data, stream.pos, where)
                continue
            name, linkname, size, sparse = pending.member(buf, flag, size, where)
            _check_name(name, "name", stream.pos, where)
            if flag in (b"1", b"2"):
                _check_name(linkname, "link target", stream.pos, where)
            if sparse and buf[482]:  # old GNU sparse: extension blocks follow the header
                stream.sparse_extensions()
            kind = _kind(flag, name, sparse)
            # Links, directories, devices and FIFOs carry no data whatever their size field says.
            padded = size + (-size % BLOCK) if kind == FILE else 0
            stream.check_cap(padded, name)
            if on_offset is not None:
                on_offset(stream.pos)
            mode = _number(buf[100:108], "mode", where) & 0o7777
            name = member_name(name, strip, prefix)
            if kind != FILE:
                yield _dataless_entry(kind, name, linkname, mode, strip, prefix)
                continue
            if sparse:
                data_reader = None
                yield Entry(name, FILE, size, None, mode, partial(_sparse, name, where))
            else:
                data_reader = Bounded(raw, size, where=where,
                                      short=f"{noun} ends inside {name!r} (truncated)")
                yield Entry(name, FILE, size, None, mode, data_reader.opened)
            stream.finish_file(size, padded, data_reader, name)
    except (ReconError, GeneratorExit):
        raise
    except Exception as err:  # OSError, EOFError, zlib.error, zstd errors underneath
        raise stream_error(err, where) from err


def _check_name(name: str, what: str, pos: int, where: str) -> None:
    """Refuse a name no kernel would take (PATH_MAX, NAME_MAX): why a name is capped here.

    Everything after the reader (the squash's folder sets, the writer) costs
    at least linear memory per name and per component; a 1 MiB PAX path once
    cost 18 GiB. The engine could not apply such a layer either.
    """
    raw = name.encode("utf-8", "surrogateescape")
    if len(raw) > PATH_MAX:
        raise UnsafeArchiveError(f"member {what} of {len(raw)} bytes at offset {pos} (over PATH_MAX "
                                 f"{PATH_MAX}): {name[:80]!r}...", where=where)
    if len(raw) > NAME_MAX and any(len(part) > NAME_MAX for part in raw.split(b"/")):
        raise UnsafeArchiveError(f"member {what} has a component over NAME_MAX {NAME_MAX} bytes at "
                                 f"offset {pos}: {name[:80]!r}...", where=where)
    if "\0" in name:
        raise UnsafeArchiveError(f"member {what} holds a NUL byte at offset {pos}", where=where)


def member_name(name: str, strip: str, prefix: str) -> str:
    """Image-root-relative name: no ``./``, ``strip`` removed, ``prefix`` added, no trailing ``/``."""
    if name.startswith("./"):
        name = name[2:]
    if strip and (name == strip or name.startswith(strip + "/")):
        name = name[len(strip):].lstrip("/")
    if prefix:
        name = f"{prefix}/{name}" if name else prefix
    return name.rstrip("/")
