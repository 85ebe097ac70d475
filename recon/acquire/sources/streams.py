"""Byte streams the sources share: windows on files, bounded reads, forward seeks, read-ahead.

Every image source ends in the same few needs: a region of a big file read
with its own handle (a layer inside a ``docker save`` tar), exactly ``size``
bytes of a shared stream (a tar member, a TOC entry, a cached blob), a
decompressor made to look seekable forwards, progress counting, and
decompression running ahead on a second core (the cap on decompressed size
is the tar reader's, checked before anything is skipped). Each is here once,
so a short read always turns into the same kind of error.
"""

from __future__ import annotations

import io
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from ...errors import ReconError


def stream_error(err: BaseException, where: str) -> ReconError:
    """The one-line error for a failure of the bytes underneath (I/O, zlib, zstd)."""
    if isinstance(err, ReconError):
        return err
    if isinstance(err, (OSError, EOFError)):
        return ReconError(f"truncated or corrupt layer ({type(err).__name__}: {err})", where=where)
    return ReconError(f"truncated or corrupt compressed data ({err})", where=where)


class FileWindow(io.RawIOBase):
    """A seekable read-only view of ``size`` bytes at ``offset`` of a file, with its own handle."""

    def __init__(self, path: Path, offset: int, size: int) -> None:
        self._fh = open(path, "rb")  # noqa: SIM115 - closed in close()
        self._start = offset
        self._size = size
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, min(self._size, base + offset))
        return self._pos

    def readinto(self, buf: Any) -> int:
        want = min(len(buf), self._size - self._pos)
        if want <= 0:
            return 0
        self._fh.seek(self._start + self._pos)
        n = self._fh.readinto(memoryview(buf)[:want]) or 0
        self._pos += n
        return n

    def close(self) -> None:
        self._fh.close()
        super().close()


class Bounded(io.RawIOBase):
    """Exactly ``size`` bytes of a shared stream, then end of file.

    Ending early is corruption (``short`` says what, in the reader's words);
    a decompressor failing underneath becomes a :class:`ReconError` too, so a
    half-read file is never taken for a whole one.
    """

    def __init__(self, raw: IO[bytes], size: int, *, where: str, short: str) -> None:
        self._read = raw.read
        self.left = size
        self._where = where
        self._short = short

    def readable(self) -> bool:
        return True

    def opened(self) -> IO[bytes]:
        """This reader, as an ``Entry.open`` callback returns it."""
        return self  # type: ignore[return-value]

    def read(self, n: int | None = -1) -> bytes:
        if self.left <= 0:
            return b""
        want = self.left if n is None or n < 0 else min(n, self.left)
        try:
            data = self._read(want)
        except Exception as err:
            raise stream_error(err, self._where) from err
        if not data:
            raise ReconError(self._short, where=self._where)
        self.left -= len(data)
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buf: Any) -> int:
        data = self.read(len(buf))
        n = len(data)
        memoryview(buf)[:n] = data
        return n


class Prefixed(io.RawIOBase):
    """``head`` (bytes already read to look at a file's magic number), then the rest of ``raw``."""

    def __init__(self, head: bytes, raw: IO[bytes]) -> None:
        self._head = head
        self._raw = raw

    def readable(self) -> bool:
        return True

    def read(self, n: int | None = -1) -> bytes:
        if self._head:
            if n is None or n < 0:
                out, self._head = self._head + self._raw.read(), b""
                return out
            out, self._head = self._head[:n], self._head[n:]
            return out
        return self._raw.read(-1 if n is None else n)

    def readinto(self, buf: Any) -> int:
        data = self.read(len(buf))
        memoryview(buf)[:len(data)] = data
        return len(data)

    def close(self) -> None:
        self._raw.close()
        super().close()


class ForwardReader(io.RawIOBase):
    """Makes a one-way stream (a decompressor) look seekable *forwards*.

    The registry's cached layer listing jumps to member offsets; going
    forwards is reading into a reusable buffer, going back is an error.
    """

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.pos = 0
        self._scratch = bytearray(1 << 20)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def readinto(self, buf: Any) -> int:
        n = self.raw.readinto(buf) or 0  # type: ignore[attr-defined]
        self.pos += n
        return n

    def close(self) -> None:
        if not self.closed:
            self.raw.close()  # a ReadAhead underneath: stop its thread
        super().close()

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        target = offset if whence == io.SEEK_SET else self.pos + offset
        if whence not in (io.SEEK_SET, io.SEEK_CUR) or target < self.pos:
            raise io.UnsupportedOperation("this layer stream only seeks forwards")
        view = memoryview(self._scratch)
        while self.pos < target:
            n = self.raw.readinto(view[: min(len(view), target - self.pos)])  # type: ignore[attr-defined]
            if not n:
                break
            self.pos += n
        return self.pos


class CountingReader(io.RawIOBase):
    """Wraps a binary stream and counts bytes so progress bars can follow a layer."""

    def __init__(self, raw: IO[bytes], on_read: Callable[[int], None] | None = None) -> None:
        self.raw = raw
        self.count = 0
        self.on_read = on_read

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        n = self.raw.readinto(buf) or 0  # type: ignore[attr-defined]
        self.count += n
        if self.on_read is not None and n:
            self.on_read(n)
        return n


_DONE = object()


class ReadAhead(io.RawIOBase):
    """Reads ``raw`` (a decompressor) on a background thread, up to ``depth`` blocks ahead.

    Why: gzip and zstd decompression release the GIL, and the tar walk and
    file writes that consume them spend much of their time in system calls;
    with a deep queue neither waits for the other (measured in
    docs/benchmarks/snapshot.md). ``igzip_threaded`` does the same with a
    two-block queue, which stalls whenever a file is being written. Memory is
    ``depth * block`` bytes at most. Errors from the decompressor are raised
    in the reader, where the tar walk turns them into one line.
    """

    def __init__(self, raw: IO[bytes], *, block: int = 1 << 20, depth: int = 16) -> None:
        self._raw = raw
        self._block = block
        self._queue: queue.Queue[Any] = queue.Queue(depth)
        self._stop = threading.Event()
        self._view = memoryview(b"")
        self._eof = False
        self._thread = threading.Thread(target=self._pump, name="recon-readahead", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        read = self._raw.read
        try:
            while not self._stop.is_set():
                data = read(self._block)
                if not data:
                    break
                self._put(data)
            self._put(_DONE)
        except BaseException as err:  # handed to the reading thread
            self._put(err)

    def _put(self, item: Any) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def readable(self) -> bool:
        return True

    def _next(self) -> bool:
        if self._eof:
            return False
        item = self._queue.get()
        if item is _DONE:
            self._eof = True
            return False
        if isinstance(item, BaseException):
            self._eof = True
            raise item
        self._view = memoryview(item)
        return True

    def readinto(self, buf: Any) -> int:
        if not self._view and not self._next():
            return 0
        n = min(len(buf), len(self._view))
        memoryview(buf)[:n] = self._view[:n]
        self._view = self._view[n:]
        return n

    def skip(self, n: int) -> int:
        """Drop ``n`` bytes without copying them (most of a layer is skipped); return how many."""
        left = n
        while left:
            if not self._view and not self._next():
                break
            take = min(left, len(self._view))
            self._view = self._view[take:]
            left -= take
        return n - left

    def read(self, n: int | None = -1) -> bytes:
        """Exactly ``n`` bytes unless the stream ends (the tar walk reads 512-byte headers)."""
        if n is None or n < 0:
            parts = [bytes(self._view)]
            self._view = memoryview(b"")
            while self._next():
                parts.append(bytes(self._view))
                self._view = memoryview(b"")
            return b"".join(parts)
        if len(self._view) >= n:
            out = self._view[:n].tobytes()
            self._view = self._view[n:]
            return out
        parts = []
        left = n
        while left:
            if not self._view and not self._next():
                break
            take = self._view[:left]
            parts.append(take.tobytes())
            self._view = self._view[len(take):]
            left -= len(take)
        return b"".join(parts)

    def close(self) -> None:
        if not self.closed:
            self._stop.set()
            while True:  # unblock the pump if it waits on a full queue
                try:
                    self._queue.get_nowait()
                except queue.Empty:
                    break
            self._thread.join()
            self._raw.close()
        super().close()


class Digesting(io.RawIOBase):
    """Hashes every byte read through it; at the end of the stream checks digest and size.

    Why here and not after the walk: the squash consumes a layer as a stream
    (headers, then only the members it keeps), so the one place that sees
    every byte is the stream itself. The check runs when ``raw`` reports its
    end (or when :func:`drain` reads the rest), so a mismatch is raised out
    of the layer's entry iterator, before the squash returns and before any
    snapshot is committed. ``expect`` is a validated ``algo:hex`` digest;
    ``what`` names the blob in the error ("blob sha256:... of layer 2").
    """

    def __init__(self, raw: IO[bytes], expect: str, *, what: str, where: str,
                 size: int | None = None) -> None:
        import hashlib

        self._raw = raw
        self.expect = expect
        self.size = size
        self.what = what
        self.where = where
        self.hash = hashlib.new(expect.partition(":")[0])
        self.count = 0
        self.checked = False

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        n = self._raw.readinto(buf) or 0  # type: ignore[attr-defined]
        if n:
            self.hash.update(memoryview(buf)[:n])
            self.count += n
            if self.size is not None and self.count > self.size:
                self._fail(f"is longer than the {self.size} bytes its descriptor says")
        elif not self.checked:
            self.check()
        return n

    def check(self) -> None:
        """Compare what went through with ``expect`` (called at the end of the stream)."""
        self.checked = True
        if self.size is not None and self.count != self.size:
            self._fail(f"is {self.count} bytes, not the {self.size} its descriptor says")
        got = f"{self.hash.name}:{self.hash.hexdigest()}"
        if got != self.expect:
            self._fail(f"does not match its digest (got {got})")

    def _fail(self, why: str) -> None:
        from ..blobcache import DigestMismatch

        self.checked = True
        raise DigestMismatch(f"{self.what} {why}: corrupt or tampered", where=self.where)

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


def drain(stream: IO[bytes], *, limit: int | None, where: str, what: str, hint: str = "") -> int:
    """Read ``stream`` to its end (so a :class:`Digesting` underneath checks), at most ``limit`` bytes.

    A layer's digest covers the bytes after the tar's end-of-archive blocks
    too; they are read, never kept. ``limit`` keeps trailing data from being
    a decompression bomb of its own.
    """
    from ...errors import UnsafeArchiveError

    scratch = bytearray(1 << 20)
    view = memoryview(scratch)
    readinto = getattr(stream, "readinto", None)
    total = 0
    while True:
        if readinto is not None:
            n = readinto(view) or 0
        else:
            data = stream.read(len(view))
            n = len(data)
        if not n:
            return total
        total += n
        if limit is not None and total > limit:
            raise UnsafeArchiveError(f"{what} goes on after the end of its tar and expands to "
                                     + (hint or f"more than {limit} bytes (decompression bomb?)"),
                                     where=where)
