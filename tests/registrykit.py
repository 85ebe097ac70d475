"""Real registries on loopback for tests and benchmarks, and eStargz layers built to the spec.

* :class:`Registry` runs Debian's ``docker-registry`` (distribution 2.8) on
  127.0.0.1 with a free port and a private storage folder: anonymous, with
  an htpasswd file (basic auth), or with token auth against
  :class:`TokenServer`, a small token service that signs RS256 JWTs with a
  self-signed certificate the registry is configured to trust (the same
  protocol Docker Hub's auth service speaks).
* :func:`estargz_layer` turns a plain layer tar into an eStargz blob
  (one gzip member per header run and per payload chunk, the TOC as the
  last tar entry ``stargz.index.json``, the 51-byte footer naming its
  offset), following the eStargz specification; no tool on these machines
  writes eStargz.
* :func:`write_oci_layout` writes an OCI layout (one image or a
  multi-platform index) so ``skopeo copy --preserve-digests`` pushes the
  exact blobs and annotations.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import hashlib
import http.server
import io
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import tarfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ESTARGZ_TOC = "containerd.io/snapshot/stargz/toc.digest"
GZIP_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- the registry ---------------------------------------------------------------------

@dataclass
class Registry:
    """A ``docker-registry serve`` process on 127.0.0.1; ``stop()`` kills it."""

    root: Path
    auth: dict[str, Any] | None = None
    port: int = 0
    tls: tuple[Path, Path] | None = None  # (certificate, key): serve HTTPS
    proc: subprocess.Popen[bytes] | None = None
    log: Path = field(init=False)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def storage(self) -> Path:
        return self.root / "data"

    def start(self) -> Registry:
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        cfg: dict[str, Any] = {
            "version": 0.1,
            "log": {"level": "info", "formatter": "json", "accesslog": {"disabled": True}},
            "storage": {"filesystem": {"rootdirectory": str(self.storage)}, "delete": {"enabled": True}},
            "http": {"addr": self.host},
        }
        if self.auth:
            cfg["auth"] = self.auth
        if self.tls:
            cfg["http"]["tls"] = {"certificate": str(self.tls[0]), "key": str(self.tls[1])}
        config = self.root / "config.yml"
        config.write_text(json.dumps(cfg))  # JSON is YAML
        self.log = self.root / "registry.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 20
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"docker-registry exited: {self.log.read_text()[-2000:]}")
            try:
                import ssl

                urllib.request.urlopen(f"{'https' if self.tls else 'http'}://{self.host}/v2/", timeout=2,
                                       context=ssl._create_unverified_context() if self.tls else None)
                return self
            except urllib.error.HTTPError:
                return self  # 401: up, and asking for auth
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("docker-registry did not come up in 20 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None

    def blob_file(self, digest: str) -> Path:
        """Where the registry's filesystem driver keeps a blob (to tamper with it in tests)."""
        hexd = digest.split(":", 1)[1]
        return self.storage / "docker/registry/v2/blobs/sha256" / hexd[:2] / hexd / "data"

    def bytes_served(self) -> int:
        """Sum of ``http.response.written`` in the registry's own log: its view of bytes sent."""
        total = 0
        for line in self.log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                rec = json.loads(line)
                total += int(rec.get("http.response.written") or 0)
        return total


def htpasswd_auth(root: Path, users: dict[str, str]) -> dict[str, Any]:
    """An ``auth:`` section for basic auth; bcrypt lines from apache2-utils' ``htpasswd``."""
    path = root / "htpasswd"
    root.mkdir(parents=True, exist_ok=True)
    lines = []
    for user, password in users.items():
        out = subprocess.run(["htpasswd", "-Bbn", user, password], check=True, capture_output=True)
        lines.append(out.stdout.decode().strip())
    path.write_text("\n".join(lines) + "\n")
    return {"htpasswd": {"realm": "recon-test", "path": str(path)}}


def self_signed(root: Path, host: str = "127.0.0.1") -> tuple[Path, Path]:
    """A certificate for ``host`` (IP SAN) and its key, for a registry that serves HTTPS."""
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    root.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = root / "tls.pem", root / "tls.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


# --- a token service ------------------------------------------------------------------

def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenServer:
    """Issues registry bearer tokens (RS256 JWTs with an ``x5c`` chain) on 127.0.0.1.

    ``users`` may pull and push anything; anonymous callers may pull only
    repositories under ``public/``. Wrong credentials get ``401``.
    """

    service = "recon-test-registry"
    issuer = "recon-test-issuer"

    def __init__(self, root: Path, users: dict[str, str]) -> None:
        import datetime as dt

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        from cryptography.x509.oid import NameOID

        root.mkdir(parents=True, exist_ok=True)
        self.users = users
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "recon test token signer")])
        now = dt.datetime.now(dt.timezone.utc)
        self.cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=1))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.cert_path = root / "token-signer.pem"
        self.cert_path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        self._der = self.cert.public_bytes(serialization.Encoding.DER)
        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                server._answer(self)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def realm(self) -> str:
        return f"http://127.0.0.1:{self.port}/token"

    def auth_config(self) -> dict[str, Any]:
        return {"token": {"realm": self.realm, "service": self.service, "issuer": self.issuer,
                          "rootcertbundle": str(self.cert_path)}}

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _answer(self, h: http.server.BaseHTTPRequestHandler) -> None:
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(h.path).query)
        user = None
        header = h.headers.get("Authorization") or ""
        if header.startswith("Basic "):
            name, _, password = base64.b64decode(header[6:]).decode().partition(":")
            if self.users.get(name) != password:
                self.requests.append({"user": name, "ok": False})
                h.send_response(401)
                h.send_header("Content-Length", "0")
                h.end_headers()
                return
            user = name
        access = []
        for scope in q.get("scope", []):
            kind, _, rest = scope.partition(":")
            repo, _, actions = rest.rpartition(":")
            wanted = actions.split(",")
            granted = wanted if user else [a for a in wanted if a == "pull" and repo.startswith("public/")]
            access.append({"type": kind, "name": repo, "actions": granted})
        self.requests.append({"user": user, "ok": True, "scope": q.get("scope", [])})
        body = json.dumps({"token": self._jwt(user or "", access), "expires_in": 300}).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _jwt(self, sub: str, access: list[dict[str, Any]]) -> str:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        now = int(time.time())
        head = {"typ": "JWT", "alg": "RS256", "x5c": [base64.b64encode(self._der).decode()]}
        claims = {"iss": self.issuer, "sub": sub, "aud": self.service, "exp": now + 300,
                  "nbf": now - 30, "iat": now, "jti": os.urandom(8).hex(), "access": access}
        signing = f"{_b64url(json.dumps(head).encode())}.{_b64url(json.dumps(claims).encode())}"
        sig = self.key.sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing}.{_b64url(sig)}"


# --- pushing --------------------------------------------------------------------------

def skopeo_copy(src: str, dest: str, *extra: str) -> None:
    """``skopeo copy`` with TLS verification off for the loopback registry."""
    subprocess.run(["skopeo", "copy", "-q", "--dest-tls-verify=false", "--src-tls-verify=false",
                    *extra, src, dest], check=True, capture_output=True)


def need(tool: str) -> None:
    import pytest

    if shutil.which(tool) is None:
        if os.environ.get("CI"):
            pytest.fail(f"{tool} is required in CI (.ci/run installs it)")
        pytest.skip(f"{tool} not installed")


# --- eStargz ----------------------------------------------------------------------------

def _gz(data: bytes, level: int) -> bytes:
    return gzip.compress(data, compresslevel=level, mtime=0)


def _footer(toc_offset: int) -> bytes:
    """The 51-byte eStargz footer: an empty gzip member whose extra field says where the TOC is."""
    extra = b"SG" + struct.pack("<H", 22) + b"%016xSTARGZ" % toc_offset
    header = b"\x1f\x8b\x08\x04\x00\x00\x00\x00\x00\xff" + struct.pack("<H", len(extra)) + extra
    return header + b"\x01\x00\x00\xff\xff" + struct.pack("<II", 0, 0)  # stored empty block, crc, size


@dataclass
class EStargz:
    path: Path
    digest: str
    size: int
    diff_id: str
    toc_digest: str
    uncompressed: int

    def descriptor(self) -> dict[str, Any]:
        return {"mediaType": GZIP_LAYER, "digest": self.digest, "size": self.size,
                "annotations": {ESTARGZ_TOC: self.toc_digest,
                                "io.containers.estargz.uncompressed-size": str(self.uncompressed)}}


_TYPES = {tarfile.REGTYPE: "reg", tarfile.AREGTYPE: "reg", tarfile.DIRTYPE: "dir",
          tarfile.SYMTYPE: "symlink", tarfile.LNKTYPE: "hardlink", tarfile.CHRTYPE: "char",
          tarfile.BLKTYPE: "block", tarfile.FIFOTYPE: "fifo"}


def estargz_layer(tar_path: Path, out: Path, *, chunk_size: int = 4 << 20, level: int = 6,
                  landmark: bool = True,
                  tamper: Callable[[str, bytes], bytes] | None = None) -> EStargz:
    """Convert an uncompressed layer tar into an eStargz blob at ``out``.

    Every payload chunk starts a new gzip member whose offset the TOC records;
    the bytes between payloads (tar headers, padding) form members of their
    own. Decompressed end to end, the blob is an ordinary tar whose last
    entry is ``stargz.index.json``. ``tamper(name, payload)`` changes a
    payload *after* its digest went into the TOC (a TOC that lies, for tests).
    """
    raw = bytearray(Path(tar_path).read_bytes())
    segments: list[tuple[int, int, dict[str, Any] | None]] = []  # (start, end, toc record for payloads)
    records: list[dict[str, Any]] = []
    prefix = b""
    if landmark:  # the writer's marker that no prefetch list follows
        ti = tarfile.TarInfo(".no.prefetch.landmark")
        ti.size = 1
        prefix = ti.tobuf(tarfile.PAX_FORMAT) + b"f" + b"\0" * 511
        records.append({"name": ".no.prefetch.landmark", "type": "reg", "size": 1, "mode": 0o644,
                        "digest": "sha256:" + hashlib.sha256(b"f").hexdigest()})
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tf:
        pos = 0
        for m in tf:
            rec: dict[str, Any] = {"name": m.name + ("/" if m.isdir() else ""), "type": _TYPES.get(m.type, "reg"),
                                   "mode": m.mode, "uid": m.uid, "gid": m.gid,
                                   "modtime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(m.mtime))}
            if m.issym() or m.islnk():
                rec["linkName"] = m.linkname
            records.append(rec)
            if not m.isreg() or m.size == 0:
                continue
            rec["size"] = m.size
            payload = bytes(raw[m.offset_data:m.offset_data + m.size])
            rec["digest"] = "sha256:" + hashlib.sha256(payload).hexdigest()
            segments.append((pos, m.offset_data, None))
            for off in range(0, m.size, chunk_size):
                n = min(chunk_size, m.size - off)
                chunk = raw[m.offset_data + off:m.offset_data + off + n]
                crec = rec if off == 0 else {"name": rec["name"], "type": "chunk", "chunkOffset": off}
                crec["chunkSize"] = n
                crec["chunkDigest"] = "sha256:" + hashlib.sha256(chunk).hexdigest()
                if off:
                    records.append(crec)
                segments.append((m.offset_data + off, m.offset_data + off + n, crec))
            if tamper is not None:
                changed = tamper(m.name, payload)
                assert len(changed) == len(payload)
                raw[m.offset_data:m.offset_data + m.size] = changed
            pos = m.offset_data + m.size
        end = tf.offset  # after the last member's padding, before the end-of-archive blocks
    segments.append((pos, end, None))
    blob = io.BytesIO()
    plain = hashlib.sha256()
    if prefix:
        blob.write(_gz(prefix[:512], level))
        records[0]["offset"] = blob.tell()
        blob.write(_gz(prefix[512:], level))
        plain.update(prefix)
    for start, stop, rec in segments:
        if start == stop:
            continue
        if rec is not None:
            rec["offset"] = blob.tell()
        blob.write(_gz(bytes(raw[start:stop]), level))
        plain.update(raw[start:stop])
    toc_offset = blob.tell()
    toc = json.dumps({"version": 1, "entries": records}, separators=(",", ":")).encode()
    ti = tarfile.TarInfo("stargz.index.json")
    ti.size = len(toc)
    tail = ti.tobuf(tarfile.PAX_FORMAT) + toc + b"\0" * (-len(toc) % 512) + b"\0" * 1024
    blob.write(_gz(tail, level))
    plain.update(tail)
    blob.write(_footer(toc_offset))
    data = blob.getvalue()
    out = Path(out)
    out.write_bytes(data)
    uncompressed = len(prefix) + end + len(tail)  # bytes of the tar stream
    return EStargz(out, "sha256:" + hashlib.sha256(data).hexdigest(), len(data),
                   "sha256:" + plain.hexdigest(), "sha256:" + hashlib.sha256(toc).hexdigest(),
                   uncompressed)


# --- zstd:chunked -----------------------------------------------------------------------

ZSTD_LAYER = "application/vnd.oci.image.layer.v1.tar+zstd"


@dataclass
class ZstdChunked:
    path: Path
    digest: str
    size: int
    diff_id: str
    position: str
    checksum: str

    def descriptor(self) -> dict[str, Any]:
        return {"mediaType": ZSTD_LAYER, "digest": self.digest, "size": self.size,
                "annotations": {"io.containers.zstd-chunked.manifest-checksum": self.checksum,
                                "io.containers.zstd-chunked.manifest-position": self.position}}


def zstd_chunked_layer(tar_path: Path, out: Path, *, level: int = 3) -> ZstdChunked:
    """Convert an uncompressed layer tar into a zstd:chunked blob, as containers/storage writes it.

    One zstd frame per run of tar headers and one per file payload (the
    manifest records each payload's ``offset``/``endOffset``); then the
    zstd-compressed JSON manifest inside a skippable frame, and a skippable
    footer frame (offset, length, uncompressed length, type 1, ``GnUlInUx``).
    Skippable frames are invisible to a plain zstd reader, so the blob is
    also an ordinary zstd tar. (Used where skopeo 1.9's own zstd:chunked
    writer fails on a large image.)
    """
    import zstandard

    cctx = zstandard.ZstdCompressor(level=level)
    raw = Path(tar_path).read_bytes()
    records: list[dict[str, Any]] = []
    blob = io.BytesIO()
    plain = hashlib.sha256()
    pos = 0

    def frame(data: bytes) -> None:
        if data:
            blob.write(cctx.compress(data))
            plain.update(data)

    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tf:
        for m in tf:
            rec: dict[str, Any] = {"type": _TYPES.get(m.type, "reg"), "name": m.name + ("/" if m.isdir() else ""),
                                   "mode": m.mode, "uid": m.uid, "gid": m.gid,
                                   "modtime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(m.mtime))}
            if m.issym() or m.islnk():
                rec["linkName"] = m.linkname
            records.append(rec)
            if not m.isreg() or m.size == 0:
                continue
            payload = raw[m.offset_data:m.offset_data + m.size]
            frame(raw[pos:m.offset_data])
            rec["size"] = m.size
            rec["digest"] = "sha256:" + hashlib.sha256(payload).hexdigest()
            rec["offset"] = blob.tell()
            frame(payload)
            rec["endOffset"] = blob.tell()
            pos = m.offset_data + m.size
    frame(raw[pos:])  # padding and the end-of-archive blocks
    manifest = json.dumps({"version": 1, "entries": records}, separators=(",", ":")).encode()
    compressed = cctx.compress(manifest)
    blob.write(struct.pack("<II", 0x184D2A50, len(compressed)))
    offset = blob.tell()
    blob.write(compressed)
    footer = struct.pack("<QQQQ", offset, len(compressed), len(manifest), 1) + b"GnUlInUx"
    blob.write(struct.pack("<II", 0x184D2A50, len(footer)) + footer)
    data = blob.getvalue()
    Path(out).write_bytes(data)
    return ZstdChunked(Path(out), "sha256:" + hashlib.sha256(data).hexdigest(), len(data),
                       "sha256:" + plain.hexdigest(), f"{offset}:{len(compressed)}:{len(manifest)}:1",
                       "sha256:" + hashlib.sha256(compressed).hexdigest())


# --- OCI layouts ----------------------------------------------------------------------

def _put_blob(layout: Path, data: bytes) -> dict[str, Any]:
    digest = hashlib.sha256(data).hexdigest()
    p = layout / "blobs" / "sha256" / digest
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def image_manifest(layout: Path, layers: list[tuple[dict[str, Any], Path, str]], *,
                   arch: str = "amd64", env: list[str] | None = None) -> dict[str, Any]:
    """Write config + manifest blobs for ``(descriptor, blob file, diff_id)`` layers; return
    the manifest descriptor (with its platform)."""
    for desc, path, _ in layers:
        dest = layout / "blobs" / "sha256" / desc["digest"].split(":", 1)[1]
        dest.parent.mkdir(parents=True, exist_ok=True)
        if not dest.exists():
            shutil.copyfile(path, dest)
    config = {"architecture": arch, "os": "linux",
              "config": {"Env": env or ["PATH=/usr/local/bin:/usr/bin:/bin"]},
              "rootfs": {"type": "layers", "diff_ids": [d for _, _, d in layers]},
              "history": [{"created_by": f"layer {i}"} for i in range(len(layers))]}
    cfg = _put_blob(layout, json.dumps(config).encode())
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **cfg},
                "layers": [desc for desc, _, _ in layers]}
    m = _put_blob(layout, json.dumps(manifest).encode())
    return {"mediaType": "application/vnd.oci.image.manifest.v1+json", **m,
            "platform": {"architecture": arch, "os": "linux"}}


def write_oci_layout(layout: Path, manifests: list[dict[str, Any]], *, tag: str = "latest",
                     as_index: bool = False) -> Path:
    """``index.json`` naming one manifest, or (``as_index``) an image index of several."""
    layout.mkdir(parents=True, exist_ok=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    if as_index:
        idx = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
               "manifests": manifests}
        d = _put_blob(layout, json.dumps(idx).encode())
        top = [{"mediaType": "application/vnd.oci.image.index.v1+json", **d,
                "annotations": {"org.opencontainers.image.ref.name": tag}}]
    else:
        top = [{**manifests[0], "annotations": {"org.opencontainers.image.ref.name": tag}}]
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": top}))
    return layout


def gzip_layer(tar_path: Path, out: Path) -> tuple[dict[str, Any], Path, str]:
    """A plain gzip layer descriptor for ``image_manifest``."""
    raw = Path(tar_path).read_bytes()
    data = gzip.compress(raw, compresslevel=1, mtime=0)
    out.write_bytes(data)
    return ({"mediaType": GZIP_LAYER, "digest": "sha256:" + hashlib.sha256(data).hexdigest(),
             "size": len(data)}, out, "sha256:" + hashlib.sha256(raw).hexdigest())
