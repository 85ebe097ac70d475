"""``registry:HOST/REPO:TAG`` and ``registry:HOST/REPO@sha256:...``: straight from a registry.

Speaks the registry HTTP API v2 (the OCI distribution spec) with the standard
library, no engine and no pull: resolve the tag to a manifest (an OCI index
or Docker manifest list is walked down to one platform, ``linux/amd64`` by
default, by the same code as ``oci:``), fetch the config, then the layers.

* Plain layers (gzip, zstd, uncompressed) are downloaded into the shared,
  content-addressed blob cache (:mod:`recon.acquire.blobcache`): several at once,
  resumed with HTTP ``Range`` after an interruption, kept only once their
  sha256 matches the manifest. A layer already in the cache (another image,
  an earlier snapshot) is not downloaded again.
* eStargz and zstd:chunked layers are read lazily (:mod:`recon.acquire.sources.lazy`):
  the table of contents, then only the byte ranges of the files the squash
  keeps.

Auth is Docker's: anonymous first, then whatever the ``401`` asks for
(bearer token or basic), with the user's own credentials from the Docker
config and credential helpers (:mod:`recon.acquire.sources.auth`). HTTPS always,
except ``insecure=True`` (or ``RECON_REGISTRY_INSECURE=1``), which allows
plain HTTP to a registry on this machine (loopback) only. Every problem is a
one-line :class:`ReconError`; nothing half-downloaded is ever used. A malformed
response (a bad status line, a header line over 64 KiB, over 100 headers) is one
line, and no request waits without bound: :mod:`recon.acquire.sources.deadline`
(``RECON_REGISTRY_TIMEOUT``, ``RECON_REGISTRY_MIN_RATE``).
"""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import os
import re
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Any, cast

from ...errors import ReconError
from ..blobcache import BlobCache, DigestMismatch, Tee, check_digest, digest_of
from .auth import DOCKER_HUB, Authenticator, is_loopback
from .base import Image, ImageConfig, Layer
from .deadline import Deadline, limits_from_env
from .entry import Entry
from .lazy import LazyLayer, lazy_format
from .oci import (
    DOCKER_SCHEMA1,
    INDEX_TYPES,
    MANIFEST_TYPES,
    check_platform,
    diff_ids_of,
    is_index,
    pick_manifest,
)
from .streams import Bounded

ACCEPT = ", ".join([*sorted(INDEX_TYPES), *sorted(MANIFEST_TYPES)])
MAX_MANIFEST = 4 << 20
MAX_CONFIG = 64 << 20
USER_AGENT = "recon (registry v2 client)"
_REPO_RE = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$")
_TAG_RE = re.compile(r"^[\w][\w.-]{0,127}$")
_HUB_API = "registry-1.docker.io"


# --- references ---------------------------------------------------------------------

@dataclass(frozen=True)
class Reference:
    """``HOST[:PORT]/REPO[:TAG][@DIGEST]``, Docker's rules for the registry part."""

    registry: str  # as written (docker.io for Docker Hub)
    repository: str
    tag: str | None
    digest: str | None

    @property
    def api_host(self) -> str:
        return _HUB_API if self.registry == DOCKER_HUB else self.registry

    @property
    def reference(self) -> str:
        """What the manifest endpoint is asked for: the digest if pinned, else the tag."""
        return self.digest or self.tag or "latest"

    def __str__(self) -> str:
        out = f"{self.registry}/{self.repository}"
        if self.tag:
            out += f":{self.tag}"
        if self.digest:
            out += f"@{self.digest}"
        return out


def parse_reference(text: str) -> Reference:
    """Parse ``HOST/REPO:TAG`` (``REPO`` alone means Docker Hub, ``library/`` for one name)."""
    where = f"registry:{text}"
    name, _, digest = text.partition("@")
    digest_s = check_digest(digest, where=where) if digest else None
    slash, colon = name.rfind("/"), name.rfind(":")
    tag = None
    if colon > slash:
        name, tag = name[:colon], name[colon + 1:]
        if not _TAG_RE.match(tag):
            raise ReconError(f"bad tag {tag!r}", where=where)
    first, sep, rest = name.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost" or first.startswith("[")):
        host, repo = first, rest
    else:
        host, repo = DOCKER_HUB, name
    host = host.lower()
    if host == DOCKER_HUB and "/" not in repo:
        repo = f"library/{repo}"
    if not repo or not _REPO_RE.match(repo):
        raise ReconError(f"bad repository name {repo!r} (lowercase letters, digits, . _ - /)",
                         where=where)
    if not tag and not digest_s:
        tag = "latest"
    return Reference(host, repo, tag, digest_s)


def insecure_from_env(host: str) -> bool:
    """``RECON_REGISTRY_INSECURE=1`` (any loopback host) or a comma list of hosts."""
    raw = os.environ.get("RECON_REGISTRY_INSECURE", "").strip()
    if raw.lower() in ("1", "true", "yes", "*"):
        return True
    return host in {h.strip().lower() for h in raw.split(",") if h.strip()}


# --- transfer accounting -------------------------------------------------------------

@dataclass
class TransferStats:
    """Bytes of response bodies received from registries, and requests made."""

    bytes: int = 0
    requests: int = 0

    def add(self, n: int, requests: int = 0) -> None:
        with _STATS_LOCK:
            self.bytes += n
            self.requests += requests


_STATS_LOCK = threading.Lock()
#: Process-wide totals (benchmarks and tests read and reset them).
TRANSFERS = TransferStats()


def reset_transfers() -> TransferStats:
    """Return the totals so far and start counting from zero."""
    with _STATS_LOCK:
        snap = TransferStats(TRANSFERS.bytes, TRANSFERS.requests)
        TRANSFERS.bytes = TRANSFERS.requests = 0
    return snap


class _Counted(io.RawIOBase):
    """A response body that counts what it delivers and closes its connection at the end."""

    def __init__(self, resp: http.client.HTTPResponse, conn: http.client.HTTPConnection,
                 stats: TransferStats, deadline: Deadline) -> None:
        self.resp, self.conn, self.stats, self.deadline = resp, conn, stats, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        try:
            n = self.resp.readinto(memoryview(buf)[:self.deadline.piece()])
        except (OSError, ValueError, http.client.HTTPException) as err:
            if self.deadline.expired:
                raise ConnectionError(self.deadline.message()) from None
            raise ConnectionError(f"connection dropped while reading ({_describe(err)})") from err
        if self.deadline.expired:  # the cut looks like the end of the body: it is not
            raise ConnectionError(self.deadline.message())
        if n:
            self.deadline.fed(n)
            self.stats.add(n)
            TRANSFERS.add(n)
        return n or 0

    def close(self) -> None:
        self.deadline.done()
        with contextlib.suppress(Exception):
            self.resp.close()
            self.conn.close()
        super().close()


def _describe(err: BaseException) -> str:
    """An HTTP error as short, printable text (a bad status line is the server's bytes)."""
    detail = ascii(str(err))[1:-1]
    detail = detail if len(detail) <= 80 else detail[:77] + "..."
    return f"{type(err).__name__}: {detail}" if detail else type(err).__name__


# --- HTTP ----------------------------------------------------------------------------------

class Response:
    """Status, headers and (for non-streamed requests) the whole body."""

    def __init__(self, status: int, headers: dict[str, str], body: bytes = b"",
                 stream: IO[bytes] | None = None, url: str = "") -> None:
        self.status, self.headers, self.body, self.stream, self.url = status, headers, body, stream, url

    def header(self, name: str) -> str:
        return self.headers.get(name.lower(), "")

    def error_text(self) -> str:
        """The registry's own error code and message, if it sent JSON."""
        try:
            errs = json.loads(self.body).get("errors") or []
            return "; ".join(f"{e.get('code', '?')}: {e.get('message', '')}".strip() for e in errs[:3])
        except (ValueError, AttributeError):
            return ""


class Transport:
    """Keep-alive HTTP(S) connections, one set per thread; redirects; readable errors."""

    def __init__(self, *, timeout: float | None = None, min_rate: int | None = None,
                 stats: TransferStats | None = None) -> None:
        env_timeout, env_rate = limits_from_env()
        self.timeout = env_timeout if timeout is None else timeout
        self.min_rate = env_rate if min_rate is None else min_rate
        self.stats = stats or TransferStats()
        self._local = threading.local()
        self._ssl = ssl.create_default_context()
        self._pools: list[dict[tuple[str, str], http.client.HTTPConnection]] = []
        self._lock = threading.Lock()

    def _pool(self) -> dict[tuple[str, str], http.client.HTTPConnection]:
        pool = getattr(self._local, "pool", None)
        if pool is None:
            pool = self._local.pool = {}
            with self._lock:
                self._pools.append(pool)
        return pool  # type: ignore[no-any-return]

    def _connect(self, scheme: str, netloc: str) -> http.client.HTTPConnection:
        if scheme == "https":
            return http.client.HTTPSConnection(netloc, timeout=self.timeout, context=self._ssl)
        return http.client.HTTPConnection(netloc, timeout=self.timeout)

    def close(self) -> None:
        """Close the kept-alive connections of every thread (call when the work is done)."""
        with self._lock:
            pools, self._pools = self._pools, []
        for pool in pools:
            for conn in list(pool.values()):
                conn.close()
            pool.clear()

    def send(self, method: str, url: str, headers: dict[str, str], body: bytes | None = None, *,
             stream: bool = False, auth_netloc: str | None = None, max_body: int = MAX_MANIFEST,
             redirects: int = 5) -> Response:
        """One request; follows redirects (dropping ``Authorization`` off the first host)."""
        for _ in range(redirects + 1):
            parts = urllib.parse.urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ReconError(f"bad URL from the registry: {url[:200]!r}")
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            hdrs = {"User-Agent": USER_AGENT, **headers}
            if auth_netloc is not None and parts.netloc != auth_netloc:
                hdrs.pop("Authorization", None)  # never hand credentials to a redirect target
            resp, conn, deadline = self._roundtrip(parts.scheme, parts.netloc, method, path, hdrs,
                                                   body, stream)
            self.stats.add(0, 1)
            TRANSFERS.add(0, 1)
            status = resp.status
            rheaders = {k.lower(): v for k, v in resp.getheaders()}
            if stream and status in (200, 206):
                counted = _Counted(resp, conn, self.stats, deadline)
                return Response(status, rheaders, stream=cast(IO[bytes], counted), url=url)
            redirect = status in (301, 302, 303, 307, 308) and bool(rheaders.get("location"))
            try:  # a redirect's body is read to its end and its connection closed
                data = self._read_body(resp, conn, deadline, 1 << 20 if redirect else max_body,
                                       stream or redirect, url, key=(parts.scheme, parts.netloc))
            finally:
                deadline.done()
            if redirect:
                url = urllib.parse.urljoin(url, rheaders["location"])
                if status == 303:
                    method, body = "GET", None
                continue
            return Response(status, rheaders, data, url=url)
        raise ReconError(f"too many redirects fetching {url[:200]}")

    def _roundtrip(self, scheme: str, netloc: str, method: str, path: str, headers: dict[str, str],
                   body: bytes | None, stream: bool
                   ) -> tuple[http.client.HTTPResponse, http.client.HTTPConnection, Deadline]:
        key = (scheme, netloc)
        pool = self._pool()
        for attempt in (0, 1):
            reused = not stream and key in pool
            conn = pool.pop(key) if reused else self._connect(scheme, netloc)
            deadline = Deadline(conn, netloc, self.timeout, self.min_rate)
            try:
                conn.request(method, path, body=body, headers=headers)
                deadline.sent()
                resp = conn.getresponse()
                if deadline.expired:  # cut while the head came: what arrived is not an answer
                    raise deadline.error()
                deadline.head_read()
                return resp, conn, deadline
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError,
                    http.client.CannotSendRequest, http.client.ResponseNotReady) as err:
                self._failed(conn, deadline)
                if reused and attempt == 0:
                    continue  # a kept-alive connection the server had closed: once more, fresh
                raise ReconError(f"registry {netloc} closed the connection ({type(err).__name__})") from err
            except (OSError, http.client.HTTPException) as err:
                self._failed(conn, deadline)
                raise self._request_error(netloc, err) from err
            except BaseException:
                self._failed(conn, deadline)
                raise
        raise AssertionError("unreachable")

    @staticmethod
    def _failed(conn: http.client.HTTPConnection, deadline: Deadline) -> None:
        deadline.done()
        conn.close()
        if deadline.expired:
            raise deadline.error()

    def _request_error(self, netloc: str, err: BaseException) -> ReconError:
        """One line for a request that failed before its answer's head was read."""
        if isinstance(err, http.client.HTTPException):  # bad status line, header over 64 KiB, ...
            return ReconError(f"registry {netloc} sent a malformed HTTP response ({_describe(err)})")
        if isinstance(err, ssl.SSLError):
            hint = ("; for a plain-HTTP registry on this machine use --insecure "
                    "(RECON_REGISTRY_INSECURE=1)") if is_loopback(netloc) else ""
            return ReconError(f"TLS with {netloc} failed ({err.reason or err}){hint}")
        if isinstance(err, ConnectionRefusedError):
            return ReconError(f"cannot reach registry {netloc} (connection refused)")
        if isinstance(err, socket.gaierror):
            return ReconError(f"cannot resolve registry host {netloc} ({err.strerror or err})")
        if isinstance(err, TimeoutError):
            return ReconError(f"registry {netloc} did not answer within {self.timeout:g} s")
        return ReconError(f"cannot reach registry {netloc} ({getattr(err, 'strerror', None) or err})")

    def _read_body(self, resp: http.client.HTTPResponse, conn: http.client.HTTPConnection,
                   deadline: Deadline, max_body: int, stream: bool, url: str,
                   key: tuple[str, str] | None = None) -> bytes:
        """Read a whole (small) body; the connection goes back to this thread's pool."""
        parts: list[bytes] = []
        got = 0
        try:
            while got <= max_body and (piece := resp.read(min(deadline.piece(),
                                                              max_body + 1 - got))):
                parts.append(piece)
                got += len(piece)
                deadline.fed(len(piece))
        except (OSError, ValueError, http.client.HTTPException) as err:
            conn.close()
            if deadline.expired:
                raise deadline.error(url[:200]) from None
            raise ReconError(f"connection dropped while reading {url[:200]} ({_describe(err)})") from err
        if deadline.expired:  # the cut looks like the end of a body without a length: it is not
            conn.close()
            raise deadline.error(url[:200])
        data = b"".join(parts)
        self.stats.add(len(data))
        TRANSFERS.add(len(data))
        if len(data) > max_body:
            conn.close()
            raise ReconError(f"response from {url[:200]} is larger than {max_body} bytes")
        if stream or resp.will_close or key is None:
            conn.close()
        else:
            old = self._pool().pop(key, None)
            if old is not None and old is not conn:
                old.close()
            self._pool()[key] = conn
        return data


# --- the registry client -----------------------------------------------------------

class RegistryClient:
    """One repository on one registry: manifests, blobs, byte ranges, with auth."""

    def __init__(self, ref: Reference, *, insecure: bool = False, cache: BlobCache | None = None,
                 transport: Transport | None = None) -> None:
        self.ref = ref
        host = ref.api_host
        if insecure and not is_loopback(host):
            raise ReconError(f"plain HTTP (--insecure) is only allowed to a registry on this machine "
                             f"(loopback), not {host}")
        self.scheme = "http" if insecure else "https"
        self.secure = not insecure or is_loopback(host)  # credentials may travel: TLS or loopback
        self.base = f"{self.scheme}://{host}"
        self.netloc = host
        self.cache = cache or BlobCache()
        self.stats = TransferStats()
        self.transport = transport or Transport(stats=self.stats)
        self.scope = f"repository:{ref.repository}:pull"
        self.auth = Authenticator(ref.registry, self._send_token)
        self.where = f"registry:{ref}"

    def _send_token(self, method: str, url: str, headers: dict[str, str],
                    body: bytes | None) -> tuple[int, dict[str, str], bytes]:
        r = self.transport.send(method, url, headers, body, max_body=1 << 20)
        return r.status, r.headers, r.body

    def request(self, method: str, path: str, headers: dict[str, str] | None = None, *,
                stream: bool = False, max_body: int = MAX_MANIFEST) -> Response:
        """A request to ``/v2/...`` with auth; a 401 is answered once, transient errors retried."""
        url = self.base + path
        answered = False
        for attempt in range(4):
            hdrs = dict(headers or {})
            token = self.auth.header(self.scope)
            if token:
                hdrs["Authorization"] = token
            resp = self.transport.send(method, url, hdrs, stream=stream, auth_netloc=self.netloc,
                                       max_body=max_body)
            if resp.status == 401 and not answered:
                answered = True
                self.auth.challenge(resp.header("WWW-Authenticate"), self.scope, secure=self.secure)
                continue
            if resp.status in (429, 502, 503, 504) and attempt < 3 and method in ("GET", "HEAD"):
                time.sleep(min(8.0, 0.5 * 2 ** attempt))
                continue
            return resp
        return resp

    def _fail(self, resp: Response, what: str) -> ReconError:
        detail = resp.error_text()
        if resp.status == 401:
            creds = self.auth.credentials
            who = f"with the credentials from {creds.origin}" if creds else "anonymously"
            return ReconError(f"access to {self.ref.repository} denied {who} (HTTP 401: authentication "
                              f"failed{'; ' + detail if detail else ''})", where=self.where)
        if resp.status == 403:
            return ReconError(f"access to {self.ref.repository} is forbidden (HTTP 403"
                              f"{'; ' + detail if detail else ''})", where=self.where)
        if resp.status == 404:
            return ReconError(f"{what} not found (HTTP 404{'; ' + detail if detail else ''})",
                              where=self.where)
        return ReconError(f"{what}: registry answered HTTP {resp.status}"
                          f"{'; ' + detail if detail else ''}", where=self.where)

    # -- manifests -----------------------------------------------------------------------
    def manifest(self, reference: str) -> tuple[dict[str, Any], str, str]:
        """(document, media type, digest) of a manifest or index; digest checked.

        A manifest asked for by digest is served from the blob cache when it
        is there (it cannot have changed); one asked for by tag always comes
        from the registry.
        """
        pinned = reference.startswith(("sha256:", "sha512:"))
        body: bytes | None = self.cache.read(reference, MAX_MANIFEST) if pinned else None
        if body is None:
            resp = self.request("GET", f"/v2/{self.ref.repository}/manifests/{reference}",
                                {"Accept": ACCEPT})
            if resp.status != 200:
                what = (f"manifest {reference}" if pinned else f"tag {reference!r}") + \
                    f" of {self.ref.registry}/{self.ref.repository}"
                raise self._fail(resp, what)
            body = resp.body
            algo = reference.partition(":")[0] if pinned else "sha256"
            digest = digest_of(body, algo)
            if pinned and digest != reference:
                raise DigestMismatch(f"the registry sent a manifest whose digest is {digest}, not "
                                     f"{reference}", where=self.where)
            claimed = resp.header("Docker-Content-Digest")
            if claimed and not pinned and claimed.startswith("sha256:") and claimed != digest:
                raise DigestMismatch(f"manifest digest {digest} differs from the registry's "
                                     f"Docker-Content-Digest {claimed}", where=self.where)
            self.cache.put_bytes(digest, body, where=self.where)
        else:
            digest = reference
        from .base import json_object

        doc = json_object(body, f"manifest {digest}", where=self.where)
        media = str(doc.get("mediaType") or "")
        if media in DOCKER_SCHEMA1 or doc.get("schemaVersion") == 1:
            raise ReconError("Docker schema 1 manifests are not supported (push the image again "
                             "with a current client)", where=self.where)
        return doc, media, digest

    # -- blobs -----------------------------------------------------------------------------
    def _blob_path(self, digest: str) -> str:
        return f"/v2/{self.ref.repository}/blobs/{digest}"

    def open_blob(self, digest: str, start: int = 0, end: int | None = None) -> IO[bytes]:
        """A stream of the blob's bytes ``[start, end)``; a server that ignores ``Range`` is handled."""
        headers = {}
        if start or end is not None:
            headers["Range"] = f"bytes={start}-{'' if end is None else end - 1}"
        resp = self.request("GET", self._blob_path(digest), headers, stream=True)
        if resp.status not in (200, 206) or resp.stream is None:
            raise self._fail(resp, f"blob {digest}")
        raw = resp.stream
        if resp.status == 200 and start:  # whole blob sent: skip to the start
            left = start
            while left:
                got = raw.read(min(left, 1 << 20))
                if not got:
                    break
                left -= len(got)
        return raw

    def read_range(self, digest: str, start: int, end: int) -> bytes:
        """Exactly bytes ``[start, end)`` of a blob."""
        if end <= start:
            return b""
        want = end - start
        parts: list[bytes] = []
        got = 0
        with self.open_blob(digest, start, end) as raw:
            while got < want and (piece := raw.read(want - got)):  # reads come in pieces
                parts.append(piece)
                got += len(piece)
        data = b"".join(parts)
        if len(data) != want:
            raise ReconError(f"blob {digest}: asked for {want} bytes at {start}, got {len(data)}",
                             where=self.where)
        return data

    def fetch_blob(self, digest: str, size: int | None, *, cancel: threading.Event | None = None,
                   on_bytes: Callable[[int], None] | None = None) -> str:
        """Make sure the blob is in the cache (downloading it, resumably); return its cache name."""
        self.cache.fetch(digest, size, lambda offset: self.open_blob(digest, offset),
                         where=f"{self.where}: blob {digest[:19]}", cancel=cancel, on_bytes=on_bytes)
        return digest

    def close(self) -> None:
        self.transport.close()


class _HttpRanges:
    """:class:`recon.acquire.sources.lazy.RangeReader` over registry ``Range`` requests."""

    def __init__(self, client: RegistryClient, digest: str, size: int) -> None:
        self.client, self.digest, self.size = client, digest, size

    def read(self, start: int, end: int) -> bytes:
        return self.client.read_range(self.digest, start, min(end, self.size))

    def stream(self, start: int, end: int) -> IO[bytes]:
        return self.client.open_blob(self.digest, start, min(end, self.size))


class _FileRanges:
    """The same over a blob already whole in the cache (no network)."""

    def __init__(self, path: str, size: int) -> None:
        self.path, self.size = path, size

    def read(self, start: int, end: int) -> bytes:
        with open(self.path, "rb") as fh:
            fh.seek(start)
            return fh.read(end - start)

    def stream(self, start: int, end: int) -> IO[bytes]:
        from pathlib import Path

        from .streams import FileWindow

        return io.BufferedReader(FileWindow(Path(self.path), start, max(0, min(end, self.size) - start)),
                                 1 << 20)


# --- layers ------------------------------------------------------------------------------

LISTING = "tar-listing-v3"  # v3: {"diff_id": verified against, "records": [...]}
TEE_MAX = 64 << 20  # files opened up to this size are also kept in the blob cache


def _kept(src: IO[bytes], size: int, cache: BlobCache, record: list[Any]) -> Tee:
    """Pass a file's bytes through and keep a copy in the blob cache under their sha256.

    The copy is adopted only when all ``size`` bytes went through (the squash
    reads every file it keeps to the end); ``record[6]`` then names it, so
    the next read of the layer serves the file from the cache.
    """
    return Tee(src, size, cache, on_kept=lambda digest: record.__setitem__(6, digest))


class RemoteLayer(Layer):
    """A layer downloaded whole into the blob cache, then read from there.

    The first read streams the whole tar (like ``oci:``) and keeps a listing
    of it (every entry's name, kind, size and data offset) keyed by the
    layer digest. Later reads list the entries from that listing and
    decompress only up to the files actually opened: a layer none of whose
    files the squash wants (CUDA libraries, apt packages) is not
    decompressed at all. The listing holds every entry, so the squash sees
    exactly what a full read shows.
    """

    def __init__(self, client: RegistryClient, index: int, desc: dict[str, Any], *,
                 diff_id: str | None, max_layer_size: int | None, cancel: threading.Event,
                 max_ratio: float | None = None) -> None:
        super().__init__(index, desc["digest"], diff_id=diff_id, media_type=str(desc.get("mediaType") or ""),
                         size=int(desc.get("size") or 0))
        self.client = client
        self.max_layer_size = max_layer_size
        self.max_ratio = max_ratio
        self.cancel = cancel
        self.compressed = "gzip" in self.media_type or "zstd" in self.media_type
        self.future: Future[None] | None = None
        self.fetched = 0
        self.where = f"layer {index} ({self.digest[:19]})"

    def prepare(self) -> None:
        def count(n: int) -> None:
            self.fetched += n

        self.client.fetch_blob(self.digest, self.size or None, cancel=self.cancel, on_bytes=count)

    def _plain(self, raw: IO[bytes]) -> IO[bytes]:
        """The tar stream of the cached blob: seekable when uncompressed, else forward-only."""
        from .base import decompressed, is_compressed
        from .streams import CountingReader, ForwardReader

        head = raw.read(4)
        raw.seek(0)
        if not is_compressed(head):
            return raw

        def on_read(n: int) -> None:
            self.bytes_read += n

        plain = decompressed(io.BufferedReader(CountingReader(raw, on_read), 1 << 20), where=self.where)  # type: ignore[arg-type]
        return ForwardReader(plain)  # type: ignore[return-value]

    def entries(self) -> Iterator[Entry]:
        """The first read walks the whole tar, hashing it against the config's diff_id; the
        listing it leaves is kept only once that check passed, and names the diff_id it
        was checked against (another image's config may claim another one)."""
        if self.future is not None:
            self.future.result()
        else:
            self.prepare()
        self.bytes_read = 0
        cache = self.client.cache
        listing = cache.read_derived(LISTING, self.digest)
        if listing is not None:
            try:
                doc = json.loads(listing)
            except (ValueError, RecursionError):
                doc = None
            if isinstance(doc, dict) and doc.get("diff_id") == self.diff_id and \
                    isinstance(doc.get("records"), list):
                yield from self._from_listing(doc["records"])
                return
        from .base import LayerCheck, verified_tar_entries
        from .entry import FILE
        from .streams import CountingReader

        def on_read(n: int) -> None:
            self.bytes_read += n

        records = []
        offsets: list[int] = []
        check = LayerCheck(diff_id=self.diff_id, stored_size=self.size or None,
                           max_layer_size=self.max_layer_size, max_ratio=self.max_ratio,
                           name=f"layer {self.index}")
        with open(cache.path(self.digest), "rb") as raw:
            counted = io.BufferedReader(CountingReader(raw, on_read), 1 << 20)  # type: ignore[arg-type]
            for entry in verified_tar_entries(counted, check, where=self.where,
                                              on_offset=offsets.append):
                rec = [entry.name, entry.kind, entry.size, entry.linkname, entry.mode, offsets[-1], None]
                records.append(rec)
                if entry.kind == FILE and entry.open is not None and 0 < entry.size <= TEE_MAX:
                    entry.open = self._teeing(entry.open, entry.size, rec)
                yield entry
        self._keep_listing(records)

    def _keep_listing(self, records: list[list[Any]]) -> None:
        doc = {"diff_id": self.diff_id, "records": records}
        self.client.cache.write_derived(LISTING, self.digest, json.dumps(doc, separators=(",", ":")).encode())

    def _teeing(self, opener: Callable[[], IO[bytes]], size: int, rec: list[Any]) -> Callable[[], IO[bytes]]:
        return lambda: io.BufferedReader(_kept(opener(), size, self.client.cache, rec), 1 << 20)

    def _from_listing(self, records: list[list[Any]]) -> Iterator[Entry]:
        """Entries from the listing; a file comes from the cache if an earlier read kept it,
        else from decompressing the blob forwards only as far as that file."""
        from .entry import FILE

        if self.max_layer_size is not None and sum(int(r[2]) for r in records) > self.max_layer_size:
            from ...errors import UnsafeArchiveError

            raise UnsafeArchiveError(
                f"layer expands past {self.max_layer_size} bytes when decompressed (decompression "
                "bomb? raise the cap with --max-layer-size)", where=self.where)
        state: dict[str, Any] = {}
        cache = self.client.cache
        path = cache.path(self.digest)
        known = {id(r): r[6] for r in records}

        def open_at(rec: list[Any]) -> IO[bytes]:
            if rec[6]:
                fh = cache.open(rec[6])
                if fh is not None:
                    return fh
            offset, size = int(rec[5]), int(rec[2])
            stream = state.get("stream")
            if stream is None or stream.tell() > offset:  # first open, or out of order: restart
                _close(state)
                state["raw"] = open(path, "rb")  # noqa: SIM115 - closed below
                stream = state["stream"] = self._plain(state["raw"])
            stream.seek(offset)
            part: IO[bytes] = Bounded(stream, size, where=self.where, short=(  # type: ignore[assignment]
                "cached layer is shorter than its listing (cache damaged? delete it and run again)"))
            if 0 < size <= TEE_MAX:
                part = _kept(part, size, cache, rec)  # type: ignore[assignment]
            return io.BufferedReader(cast(Any, part), 1 << 20)

        try:
            for rec in records:
                if len(rec) != 7:
                    raise ReconError("cached layer listing has the wrong shape", where=self.where)
                name, kind, size, linkname, mode = rec[:5]
                opener = (lambda r=rec: open_at(r)) if kind == FILE else None  # noqa: E731
                yield Entry(name, kind, size, linkname, mode, opener)
        finally:
            _close(state)
        if any(known[id(r)] != r[6] for r in records):  # files newly kept: remember them
            self._keep_listing(records)


def _close(state: dict[str, Any]) -> None:
    """Close a listing read's decompressing stream (its read-ahead thread) and its file."""
    for key in ("stream", "raw"):
        fh = state.pop(key, None)
        if fh is not None:
            fh.close()


def _layer_for(client: RegistryClient, i: int, desc: Any, diff_id: str | None,
               max_layer_size: int | None, cancel: threading.Event,
               max_ratio: float | None = None) -> Layer:
    from .oci import descriptor

    digest, size_or_none = descriptor(desc, f"layer {i}", where=client.where)
    size = size_or_none or 0
    annotations = desc.get("annotations")
    if annotations is not None and (not isinstance(annotations, dict)
                                    or not all(isinstance(v, str) for v in annotations.values())):
        raise ReconError(f"layer {i} {digest}: annotations are not an object of strings",
                         where=client.where)
    fmt = lazy_format(annotations)

    def whole() -> Layer:
        return RemoteLayer(client, i, desc, diff_id=diff_id, max_layer_size=max_layer_size,
                           cancel=cancel, max_ratio=max_ratio)

    if fmt is None or size <= 0 or os.environ.get("RECON_REGISTRY_LAZY", "1") == "0":
        return whole()
    cache = client.cache

    def reader() -> Any:
        if cache.has(digest):  # the whole blob is here already: ranges from the file
            return _FileRanges(str(cache.path(digest)), size)
        return _HttpRanges(client, digest, size)

    return LazyLayer(i, digest, fmt=fmt, annotations=dict(annotations or {}),
                     make_reader=reader, cache=cache, fallback=whole, diff_id=diff_id,
                     media_type=str(desc.get("mediaType") or ""), size=size,
                     max_layer_size=max_layer_size, max_ratio=max_ratio)


def _config(client: RegistryClient, desc: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The image config (a JSON object) by its descriptor; the blob cache checks its digest."""
    from .base import json_object
    from .oci import descriptor

    cfg_digest, size = descriptor(desc, "image config", where=client.where)
    if size is not None and size > MAX_CONFIG:
        raise ReconError(f"image config {cfg_digest} is {size} bytes (over {MAX_CONFIG})",
                         where=client.where)
    client.fetch_blob(cfg_digest, size or None)
    raw_cfg = client.cache.read(cfg_digest, MAX_CONFIG) or b""
    return json_object(raw_cfg, f"image config {cfg_digest}", where=client.where), cfg_digest


def _workers() -> int:
    try:
        return max(1, int(os.environ.get("RECON_REGISTRY_WORKERS") or 4))
    except ValueError:
        return 4


def open_registry(rest: str, *, platform: str | None = None, max_layer_size: int | None = None,
                  insecure: bool | None = None, cache: BlobCache | None = None,
                  max_ratio: float | None = None) -> Image:
    """Resolve ``rest`` (``HOST/REPO:TAG`` or ``...@sha256:...``) to an :class:`Image`.

    Layer downloads start at once in the background (top layer first, the
    order the squash reads them in); ``Image.close()`` stops them, keeping
    what arrived for the next run to resume.
    """
    ref = parse_reference(rest)
    if insecure is None:
        insecure = insecure_from_env(ref.api_host)
    client = RegistryClient(ref, insecure=insecure, cache=cache)
    try:
        from .base import max_ratio_default

        ratio = max_ratio_default() if max_ratio is None else max_ratio
        return _open(client, ref, platform, max_layer_size, ratio)
    except BaseException:
        client.close()
        raise


def resolve_digest(rest: str, *, insecure: bool | None = None) -> str:
    """The digest a reference points to now: itself if pinned, else one manifest request.

    Cached snapshots of ``registry:`` sources are keyed by it, so a tag that
    moved to a new image gets a new snapshot instead of the old one.
    """
    ref = parse_reference(rest)
    if ref.digest:
        return ref.digest
    if insecure is None:
        insecure = insecure_from_env(ref.api_host)
    client = RegistryClient(ref, insecure=insecure)
    try:
        return client.manifest(ref.reference)[2]
    finally:
        client.close()


def _open(client: RegistryClient, ref: Reference, platform: str | None,
          max_layer_size: int | None, max_ratio: float | None = None) -> Image:
    where = client.where
    doc, media, digest = client.manifest(ref.reference)
    index_digest = None
    plat = None
    if is_index(doc, media or None):
        index_digest = digest

        def load(d: dict[str, Any]) -> dict[str, Any]:
            return client.manifest(check_digest(d.get("digest"), where=where))[0]

        desc, plat = pick_manifest(doc, platform, where, load)
        doc, media, digest = client.manifest(check_digest(desc.get("digest"), where=where))
        if is_index(doc, media or None):
            raise ReconError("an index entry that should be an image manifest is an index", where=where)
    if not isinstance(doc.get("layers"), list) or not isinstance(doc.get("config"), dict):
        raise ReconError(f"manifest {digest} has no config or layers ({media or 'no media type'})",
                         where=where)
    config_blob, cfg_digest = _config(client, doc["config"])
    if plat is None:  # one image, not an index: its own config says which platform it is
        named = ImageConfig.from_image_json(config_blob, where=where)
        check_platform(platform, named.os, named.architecture, where)
    diff_ids = diff_ids_of(config_blob, len(doc["layers"]), where)
    cancel = threading.Event()
    layers = [_layer_for(client, i, ld, diff_ids[i], max_layer_size, cancel, max_ratio)
              for i, ld in enumerate(doc["layers"])]
    lazy = [ly for ly in layers if isinstance(ly, LazyLayer)]
    for ly in lazy:
        ly.above = [up for up in lazy if up.index > ly.index]
    pool = ThreadPoolExecutor(_workers(), thread_name_prefix="recon-registry")
    for layer in reversed(layers):  # the squash wants the top layer first
        if isinstance(layer, (RemoteLayer, LazyLayer)) and not (
                isinstance(layer, RemoteLayer) and client.cache.has(layer.digest)):
            layer.future = pool.submit(layer.prepare)  # type: ignore[union-attr]

    def close() -> None:
        cancel.set()
        pool.shutdown(wait=True, cancel_futures=True)
        client.close()

    cfg = ImageConfig.from_image_json(config_blob, where=where)
    extra: dict[str, Any] = {"registry": ref.registry, "repository": ref.repository,
                             "config_digest": cfg_digest}
    if ref.tag:
        extra["tag"] = ref.tag
    if index_digest:
        extra["index_digest"] = index_digest
    return Image(ref=f"registry:{ref}", scheme="registry", digest=digest, layers=layers, config=cfg,
                 platform=plat or (f"{cfg.os}/{cfg.architecture}" if cfg.os else None),
                 extra=extra, closer=close)
