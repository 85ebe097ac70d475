"""``wheel:PATH``: a wheel is one layer whose root is a site-packages folder.

Only the members the snapshot keeps are decompressed (zip allows random
access), which is why a 330 MB vLLM wheel snapshots in seconds.

A wheel is someone else's zip file, so every way :mod:`zipfile` can fail
on one (a central directory that lies, a local header that does not match
it, a bad CRC, a compression method or encryption recon cannot read, a
member whose data is longer or shorter than its header says) is one
:class:`ReconError` line naming the wheel and the member; what the members
declare is capped against the wheel's size (zip bombs) before anything is
decompressed.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from ...errors import ReconError, UnsafeArchiveError
from .base import Image, Layer, layer_cap, max_ratio_default
from .entry import DIR, FILE, Entry

SITE = "site-packages"
MAX_MEMBERS = 250_000  # the largest wheels (torch) hold ~20k files; zipfile keeps every entry in memory
_READABLE = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA)


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 22):
            h.update(block)
    return "sha256:" + h.hexdigest()


def _entry_count(path: Path) -> int | None:
    """The entry count the end-of-central-directory record declares (zip64 too), read before
    :mod:`zipfile` builds one object per entry; None if there is no record to read."""
    import struct

    with open(path, "rb") as fh:
        fh.seek(0, 2)
        end = fh.tell()
        fh.seek(max(0, end - (1 << 16) - 22))
        tail = fh.read()
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) < at + 22:
        return None
    count = struct.unpack("<H", tail[at + 10:at + 12])[0]
    z64 = tail.rfind(b"PK\x06\x06", 0, at)
    if count == 0xFFFF and z64 >= 0 and len(tail) >= z64 + 40:
        count = struct.unpack("<Q", tail[z64 + 32:z64 + 40])[0]
    return int(count)


def _zip(path: Path) -> zipfile.ZipFile:
    """Open the central directory; anything :mod:`zipfile` raises on a hostile one is one line."""
    count = _entry_count(path)
    if count is not None and count > MAX_MEMBERS:
        raise UnsafeArchiveError(f"the wheel declares {count} members (over {MAX_MEMBERS})",
                                 where=str(path))
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError) as err:
        raise ReconError(f"not a readable wheel ({err})", where=str(path)) from err
    except Exception as err:  # struct.error, ValueError, NotImplementedError, UnicodeDecodeError
        raise ReconError(f"not a readable wheel ({type(err).__name__}: {err})", where=str(path)) from err


class _Member(io.RawIOBase):
    """Exactly ``info.file_size`` bytes of one member, or a one-line error naming it.

    :mod:`zipfile` stops at the declared size and ignores anything after it,
    so "the data holds more than the header says" is checked here: a stored
    member's two sizes must agree, and a compressed one's stream must end
    exactly at the declared size.
    """

    def __init__(self, zf: zipfile.ZipFile, info: zipfile.ZipInfo, where: str) -> None:
        self.where = f"{where}: {info.filename[:200]}"
        self.info = info
        self.left = info.file_size
        if info.flag_bits & 0x1:
            raise ReconError("member is encrypted, which recon does not read", where=self.where)
        if info.compress_type not in _READABLE:
            raise ReconError(f"member uses compression method {info.compress_type}, which recon "
                             "does not read", where=self.where)
        if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
            raise ReconError(f"stored member says {info.file_size} bytes but holds "
                             f"{info.compress_size}", where=self.where)
        self.fh = self._guard(lambda: zf.open(info))

    def _guard(self, call: Any) -> Any:
        try:
            return call()
        except ReconError:
            raise
        except Exception as err:  # BadZipFile (CRC, header), EOFError, zlib.error, lzma, RuntimeError
            raise ReconError(f"corrupt member ({type(err).__name__}: {str(err)[:160]})",
                             where=self.where) from err

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        if self.left <= 0:
            return 0
        data = self._guard(lambda: self.fh.read(min(len(buf), self.left)))
        if not data:
            raise ReconError(f"member ends {self.left} bytes before the {self.info.file_size} its "
                             "header says", where=self.where)
        n = len(data)
        memoryview(buf)[:n] = data
        self.left -= n
        if self.left == 0:
            self._check_end()
        return n

    def _check_end(self) -> None:
        """A deflate stream must end at the declared size (zipfile has checked the CRC).

        zipfile stops decompressing at ``file_size``; the end-of-stream marker
        may not have been reached yet, so the rest of the member's compressed
        bytes (at most ``compress_size``, 64 KiB at a time) are fed on, asking
        for one byte of output: any output means the data is longer than its
        header says. Uses zipfile's reader state; skipped if that ever changes.
        """
        fh = self.fh
        dec = getattr(fh, "_decompressor", None)
        read2 = getattr(fh, "_read2", None)
        if self.info.compress_type != zipfile.ZIP_DEFLATED or dec is None or read2 is None:
            return
        tail = dec.unconsumed_tail
        while not dec.eof:
            if not tail:
                if getattr(fh, "_compress_left", 0) <= 0:
                    return  # the stream ended without its marker: the CRC check has judged it
                tail = self._guard(lambda: read2(1 << 16))
                if not tail:
                    return
            if self._guard(lambda t=tail: dec.decompress(t, 1)):
                raise ReconError(f"member holds more data than the {self.info.file_size} bytes its "
                                 "header says", where=self.where)
            tail = dec.unconsumed_tail

    def close(self) -> None:
        if not self.closed:
            self.fh.close()
        super().close()


class WheelLayer(Layer):
    def __init__(self, path: Path, digest: str) -> None:
        super().__init__(0, digest, media_type="application/zip", size=path.stat().st_size)
        self.path = path

    def entries(self) -> Iterator[Entry]:
        from .tarstream import _check_name

        where = str(self.path)
        zf = _zip(self.path)
        with zf:
            for info in zf.infolist():
                name = info.filename
                if name.startswith("./"):
                    name = name[2:]
                if not name.strip("/"):
                    raise ReconError(f"member at offset {info.header_offset} has an empty name",
                                     where=where)
                full = f"{SITE}/{name.rstrip('/')}" if not name.startswith("/") else name
                _check_name(full, "name", info.header_offset, where)
                if name.endswith("/"):
                    yield Entry(full, DIR)
                    continue
                yield Entry(full, FILE, info.file_size, None, 0o644,
                            lambda info=info: _open(zf, info, where))  # type: ignore[misc]
                self.bytes_read += info.compress_size


def _open(zf: zipfile.ZipFile, info: zipfile.ZipInfo, where: str) -> IO[bytes]:
    return io.BufferedReader(_Member(zf, info, where), 1 << 20)


def _check_sizes(path: Path, max_ratio: float | None) -> None:
    """Refuse a wheel whose members declare more bytes than the ratio cap allows (zip bombs)."""
    ratio = max_ratio_default() if max_ratio is None else max_ratio
    with _zip(path) as zf:
        total = sum(max(0, i.file_size) for i in zf.infolist())
    cap, hint = layer_cap(path.stat().st_size, None, ratio)
    if cap is not None and total > cap:
        raise UnsafeArchiveError(f"wheel members add up to {hint}", where=str(path))


def open_wheel(path: str, *, max_ratio: float | None = None) -> Image:
    p = Path(path)
    if not p.is_file():
        raise ReconError(f"wheel not found: {path}")
    _check_sizes(p, max_ratio)
    digest = file_sha256(p)
    return Image(ref=f"wheel:{path}", scheme="wheel", digest=digest,
                 layers=[WheelLayer(p, digest)], config=None,
                 extra={"wheel": p.name, "site_dirs": [SITE]})
