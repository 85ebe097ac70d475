"""The content-addressed blob cache every source shares: ``cache_dir()/blobs/sha256/<hex>``.

A file is stored under the digest of its bytes and only after those bytes
were hashed and found equal to the digest asked for, so a cached file is
never wrong and never half-written: writes go to ``blobs/.partial/`` and are
renamed into place when complete. A partial download is kept there on
failure or Ctrl-C and continued (HTTP ``Range``) by the next run; an
``flock`` per digest lets threads and processes share the cache without two
of them writing the same blob.

What lives here: registry layer blobs, configs and manifests fetched by
digest, tables of contents of lazy layers (keyed by their pinned digest), and
single files read lazily out of eStargz / zstd:chunked layers (keyed by the
file's own sha256 from the table of contents), and files kept as a reader
streams them through (:class:`Tee`). This module is the only place that
writes into the cache; ``recon.acquire.writer`` stays the only place that writes
snapshot trees.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from ..errors import ReconError
from ..paths import cache_dir

_DIGEST_RE = re.compile(r"^(sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128})$")
_CHUNK = 1 << 20

#: ``opener(offset)`` returns a stream of the blob's bytes starting at ``offset``.
Opener = Callable[[int], IO[bytes]]


class DigestMismatch(ReconError):
    """Bytes did not hash to the digest that names them (corrupt or tampered)."""


def check_digest(digest: object, *, where: str | None = None) -> str:
    """Return ``digest`` if it is a well-formed sha256/sha512 digest, else raise."""
    if not isinstance(digest, str) or not _DIGEST_RE.match(digest):
        raise ReconError(f"malformed digest {digest!r}", where=where)
    return digest


def hasher(digest: str) -> hashlib._Hash:
    return hashlib.new(digest.partition(":")[0])


def digest_of(data: bytes, algo: str = "sha256") -> str:
    return f"{algo}:{hashlib.new(algo, data).hexdigest()}"


class BlobCache:
    """Verified, content-addressed files under one root, shared by threads and processes."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else cache_dir() / "blobs"
        self.partial = self.root / ".partial"
        self.partial.mkdir(parents=True, exist_ok=True)
        self._thread_locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    # -- lookups ---------------------------------------------------------------
    def path(self, digest: str) -> Path:
        algo, _, hexd = check_digest(digest).partition(":")
        return self.root / algo / hexd

    def has(self, digest: str) -> bool:
        return self.path(digest).is_file()

    def open(self, digest: str) -> IO[bytes] | None:
        try:
            return open(self.path(digest), "rb")
        except FileNotFoundError:
            return None

    def read(self, digest: str, limit: int = 64 << 20) -> bytes | None:
        fh = self.open(digest)
        if fh is None:
            return None
        with fh:
            return fh.read(limit)

    # -- locking ---------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self, digest: str) -> Iterator[None]:
        """One writer per digest: a thread lock (flock alone does not order threads
        sharing one process reliably on every filesystem) plus an flock for other processes."""
        with self._guard:
            tlock = self._thread_locks.setdefault(digest, threading.Lock())
        with tlock:
            lock_path = self.partial / (digest.replace(":", "-") + ".lock")
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)

    def _finish(self, tmp: Path, digest: str) -> Path:
        final = self.path(digest)
        final.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(tmp, 0o644)
        os.replace(tmp, final)
        return final

    # -- data derived from a blob (TOC indexes), keyed by the blob's digest ----------
    def _derived_path(self, kind: str, digest: str) -> Path:
        if not re.fullmatch(r"[a-z0-9:._-]+", kind):
            raise ValueError(f"bad derived kind {kind!r}")
        algo, _, hexd = check_digest(digest).partition(":")
        return self.root / "derived" / kind.replace(":", "-") / algo / hexd

    def read_derived(self, kind: str, digest: str) -> bytes | None:
        """What :meth:`write_derived` stored for blob ``digest`` (e.g. a parsed TOC), or None."""
        try:
            return self._derived_path(kind, digest).read_bytes()
        except FileNotFoundError:
            return None

    def write_derived(self, kind: str, digest: str, data: bytes) -> None:
        """Keep data recon computed from a verified blob, so the next run skips the work."""
        final = self._derived_path(kind, digest)
        final.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix="derived-", dir=self.partial)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.chmod(tmp, 0o644)
            os.replace(tmp, final)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    # -- writes ----------------------------------------------------------------
    def new_temp(self) -> tuple[int, Path]:
        """A fresh temporary file in the cache's partial folder (for :meth:`adopt`)."""
        fd, tmp = tempfile.mkstemp(prefix="tee-", dir=self.partial)
        return fd, Path(tmp)

    def adopt(self, tmp: Path, digest: str) -> Path:
        """Move a temp file whose bytes the caller hashed to ``digest`` while writing into place."""
        check_digest(digest)
        if self.has(digest):
            tmp.unlink(missing_ok=True)
            return self.path(digest)
        return self._finish(tmp, digest)

    def put_bytes(self, digest: str, data: bytes, *, where: str | None = None) -> Path:
        """Store ``data`` under ``digest`` after checking that it hashes to it."""
        check_digest(digest, where=where)
        got = digest_of(data, digest.partition(":")[0])
        if got != digest:
            raise DigestMismatch(f"content does not match its digest {digest} (got {got})", where=where)
        final = self.path(digest)
        if final.is_file():
            return final
        fd, tmp = tempfile.mkstemp(prefix="put-", dir=self.partial)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            return self._finish(Path(tmp), digest)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def fetch(self, digest: str, size: int | None, opener: Opener, *, where: str | None = None,
              on_bytes: Callable[[int], None] | None = None, cancel: threading.Event | None = None,
              attempts: int = 3) -> Path:
        """Download a blob into the cache unless it is there; resumable and verified.

        ``opener(offset)`` must return the blob's bytes from ``offset`` on (a
        registry ``Range`` request). The partial file survives a failure so
        the next call continues where this one stopped; a partial whose bytes
        turn out wrong is discarded and the blob fetched once more from zero.
        """
        check_digest(digest, where=where)
        final = self.path(digest)
        if final.is_file():
            return final
        with self._locked(digest):
            if final.is_file():  # another thread or process finished it meanwhile
                return final
            part = self.partial / (digest.replace(":", "-") + ".part")
            for fresh in (False, True):
                if fresh:
                    part.unlink(missing_ok=True)
                have = part.stat().st_size if part.exists() else 0
                if size is not None and have > size:
                    part.unlink()
                    have = 0
                resumed = have > 0
                h = hasher(digest)
                if have:
                    with open(part, "rb") as fh:
                        while block := fh.read(_CHUNK):
                            h.update(block)
                have = self._download(part, have, h, size, opener, where, on_bytes, cancel, attempts)
                got = f"{digest.partition(':')[0]}:{h.hexdigest()}"
                if got == digest and (size is None or have == size):
                    return self._finish(part, digest)
                if fresh or not resumed:
                    part.unlink(missing_ok=True)
                    raise DigestMismatch(
                        f"blob does not match its digest {digest} (got {got}, {have} bytes): "
                        "the registry served corrupt or tampered data", where=where)
            raise AssertionError("unreachable")

    def _download(self, part: Path, have: int, h: hashlib._Hash, size: int | None, opener: Opener,
                  where: str | None, on_bytes: Callable[[int], None] | None,
                  cancel: threading.Event | None, attempts: int) -> int:
        """Append to ``part`` from ``have`` on until the stream ends; retry dropped connections."""
        import http.client

        tries = 0
        with open(part, "ab") as out:
            while size is None or have < size:
                try:
                    with opener(have) as src:
                        while block := src.read(_CHUNK):
                            if cancel is not None and cancel.is_set():
                                raise ReconError("download cancelled", where=where)
                            out.write(block)
                            h.update(block)
                            have += len(block)
                            if on_bytes is not None:
                                on_bytes(len(block))
                            if size is not None and have > size:
                                return have  # too long: the digest check reports it
                    if size is None:
                        break
                    if have < size:  # the connection ended early: continue from here
                        raise ConnectionError("connection closed before the end of the blob")
                except (ConnectionError, TimeoutError, http.client.HTTPException) as err:
                    out.flush()
                    tries += 1
                    if tries >= attempts:
                        raise ReconError(f"download failed after {tries} tries at byte {have} "
                                         f"({type(err).__name__}: {err}); run again to resume",
                                         where=where) from err
        return have


class Tee(io.RawIOBase):
    """Pass a stream's bytes through and keep a copy in the cache, verified.

    The copy is adopted only when all ``size`` bytes went through: under
    ``expect`` if given (anything else is a :class:`DigestMismatch`, raised
    instead of handing over the last bytes, and nothing is kept), else under
    the sha256 of what went through. ``on_kept(digest)`` is then called.
    Closing before the end keeps nothing and closes ``src`` (which, for a
    network stream, ends the transfer rather than reading the rest).
    """

    def __init__(self, src: IO[bytes], size: int, cache: BlobCache, *, expect: str | None = None,
                 where: str | None = None, on_kept: Callable[[str], None] | None = None) -> None:
        self.src, self.size, self.left, self.cache = src, size, size, cache
        self.expect = check_digest(expect, where=where) if expect is not None else None
        self.where, self.on_kept = where, on_kept
        self.hash = hasher(expect) if expect is not None else hashlib.sha256()
        fd, self.tmp = cache.new_temp()
        self.out: IO[bytes] | None = os.fdopen(fd, "wb")
        self.failed: DigestMismatch | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        if self.failed is not None:  # read on after a mismatch: the same error, never the rest
            raise self.failed
        data = self.src.read(len(buf))
        n = len(data)
        if self.out is not None and n:
            self.out.write(data)
            self.hash.update(data)
            self.left -= n
            if self.left <= 0:
                self._keep()
        memoryview(buf)[:n] = data
        return n

    def _keep(self) -> None:
        assert self.out is not None
        self.out.close()
        self.out = None
        got = f"{self.hash.name}:{self.hash.hexdigest()}"
        if self.left < 0 or (self.expect is not None and got != self.expect):
            self.tmp.unlink(missing_ok=True)
            if self.expect is None:
                return  # more than announced: keep nothing
            self.failed = DigestMismatch(f"content does not match its digest {self.expect} "
                                         f"(got {got}, {self.size - self.left} bytes)", where=self.where)
            raise self.failed
        self.cache.adopt(self.tmp, got)
        if self.on_kept is not None:
            self.on_kept(got)

    def close(self) -> None:
        if self.out is not None:  # not read to the end: keep nothing
            self.out.close()
            self.out = None
            self.tmp.unlink(missing_ok=True)
        with contextlib.suppress(Exception):
            self.src.close()
        super().close()
