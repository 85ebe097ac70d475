"""Builders of hostile or broken inputs for tests/test_hostile_corpus.py (stdlib + zstandard).

Written from README.md, docs/guide.md and issue 14 only, never from recon's code or tests.
Every builder is cheap: bombs are made of repeated compressed members/frames of zeros.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import struct
import tarfile
import zipfile
import zlib
from dataclasses import dataclass, field

import zstandard

SITE = "usr/local/lib/python3.11/site-packages"
PKG = "pkg"
PKG_INIT = b"VERSION = '1.0'\n"


# --------------------------------------------------------------------------- tar entries

@dataclass
class E:
    """One tar entry. kind: file dir sym hard fifo chr blk cont or a raw typeflag byte."""

    name: str
    kind: str = "file"
    data: bytes = b""
    link: str = ""
    mode: int | None = None
    pax: dict | None = None
    size: int | None = None  # header size override (data still as given)


def _info(e: E) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(e.name)
    ti.mtime = 1700000000
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = "root"
    kinds = {
        "file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "sym": tarfile.SYMTYPE,
        "hard": tarfile.LNKTYPE, "fifo": tarfile.FIFOTYPE, "chr": tarfile.CHRTYPE,
        "blk": tarfile.BLKTYPE, "cont": tarfile.CONTTYPE,
    }
    ti.type = kinds.get(e.kind, e.kind.encode() if isinstance(e.kind, str) else e.kind)
    ti.mode = e.mode if e.mode is not None else (0o755 if e.kind == "dir" else 0o644)
    ti.linkname = e.link
    if e.kind in ("chr", "blk"):
        ti.devmajor, ti.devminor = 1, 3
    ti.size = len(e.data) if e.kind in ("file", "cont") or ti.type not in kinds.values() else 0
    if e.pax:
        ti.pax_headers = dict(e.pax)
    return ti


def tar_bytes(entries: list[E], fmt: int = tarfile.PAX_FORMAT, end: bool = True) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        for e in entries:
            ti = _info(e)
            tf.addfile(ti, io.BytesIO(e.data) if ti.size else None)
    raw = buf.getvalue()
    if not end:
        raw = raw.rstrip(b"\0")
        raw += b"\0" * (-len(raw) % 512)
    return raw


def pkg_entries(extra: list[E] | None = None, dirs: bool = True) -> list[E]:
    out = []
    if dirs:
        parts = SITE.split("/")
        for i in range(1, len(parts) + 1):
            out.append(E("/".join(parts[:i]) + "/", "dir"))
        out.append(E(f"{SITE}/{PKG}/", "dir"))
    out.append(E(f"{SITE}/{PKG}/__init__.py", data=PKG_INIT))
    out.append(E(f"{SITE}/{PKG}/mod.py", data=b"def f():\n    return 1\n"))
    out.extend(extra or [])
    return out


def base_layer() -> bytes:
    return tar_bytes(pkg_entries())


def fix_checksum(block: bytearray) -> None:
    block[148:156] = b" " * 8
    chk = sum(block[:512])
    block[148:156] = b"%06o\0 " % chk


def patch_header(raw: bytes, index: int, offset: int, value: bytes, fix: bool = True) -> bytes:
    """Patch the index-th 512-byte header block (counting headers, skipping data)."""
    b = bytearray(raw)
    pos, n = 0, 0
    while pos < len(b):
        blk = b[pos:pos + 512]
        if blk == b"\0" * 512:
            break
        size_field = bytes(blk[124:136])
        try:
            size = int(size_field.strip(b"\0 ") or b"0", 8)
        except ValueError:
            size = 0
        if n == index:
            b[pos + offset:pos + offset + len(value)] = value
            if fix:
                hdr = b[pos:pos + 512]
                fix_checksum(hdr)
                b[pos:pos + 512] = hdr
            return bytes(b)
        typ = blk[156:157]
        data = 0 if typ in (b"5", b"2", b"1", b"3", b"4", b"6") else size
        pos += 512 + (data + 511) // 512 * 512
        n += 1
    raise IndexError(index)


def header_offsets(raw: bytes) -> list[int]:
    out, pos = [], 0
    while pos + 512 <= len(raw):
        blk = raw[pos:pos + 512]
        if blk == b"\0" * 512:
            break
        size = int(blk[124:136].strip(b"\0 ") or b"0", 8)
        typ = blk[156:157]
        out.append(pos)
        data = 0 if typ in (b"5", b"2", b"1", b"3", b"4", b"6") else size
        pos += 512 + (data + 511) // 512 * 512
    return out


# --------------------------------------------------------------------------- compression

def gz(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=6, mtime=0)


def zst(data: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=3).compress(data)


_ZCACHE: dict = {}


def gzip_zero_member(n: int) -> bytes:
    key = ("gz", n)
    if key not in _ZCACHE:
        co = zlib.compressobj(9, zlib.DEFLATED, 31)
        chunk = b"\0" * (1 << 20)
        parts = []
        for _ in range(n >> 20):
            parts.append(co.compress(chunk))
        parts.append(co.flush())
        _ZCACHE[key] = b"".join(parts)
    return _ZCACHE[key]


def zstd_zero_frame(n: int) -> bytes:
    key = ("zst", n)
    if key not in _ZCACHE:
        cctx = zstandard.ZstdCompressor(level=1)
        chunk = b"\0" * (1 << 20)
        obj = cctx.compressobj(size=n)
        parts = [obj.compress(chunk) for _ in range(n >> 20)]
        parts.append(obj.flush())
        _ZCACHE[key] = b"".join(parts)
    return _ZCACHE[key]


def bomb_tar_prefix(name: str, size: int) -> bytes:
    """Header of one huge regular file (its zero data follows), preceded by the package."""
    pre = tar_bytes(pkg_entries(), end=False)
    ti = tarfile.TarInfo(name)
    ti.size = size
    ti.mtime = 1700000000
    return pre + ti.tobuf(tarfile.PAX_FORMAT)


def gzip_bomb(total: int, member: int = 64 << 20) -> bytes:
    """A layer: package + one file of `total` zero bytes, as gzip members (cheap)."""
    head = gz(bomb_tar_prefix("opt/zeros.bin", total))
    body = gzip_zero_member(member) * (total // member)
    return head + body + gz(b"\0" * 1024)


def zstd_bomb(total: int, frame: int = 256 << 20) -> bytes:
    head = zst(bomb_tar_prefix("opt/zeros.bin", total))
    body = zstd_zero_frame(frame) * (total // frame)
    return head + body + zst(b"\0" * 1024)


# --------------------------------------------------------------------------- images

def sha(b: bytes) -> str:
    return "sha256:" + hashlib.sha256(b).hexdigest()


def image_config(diff_ids: list[str], env: list | None = None, labels=None, extra: dict | None = None) -> dict:
    cfg = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": env if env is not None else ["PATH=/usr/local/bin:/usr/bin:/bin"],
            "Cmd": ["python3"],
            "Labels": labels if labels is not None else {"org.test": "1"},
        },
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [{"created_by": "test"} for _ in diff_ids],
    }
    if extra:
        cfg.update(extra)
    return cfg


@dataclass
class Image:
    """Layers as (uncompressed tar bytes, compression) plus knobs for lies."""

    layers: list[bytes] = field(default_factory=lambda: [base_layer()])
    compress: str = "gzip"  # gzip | zstd | none (OCI); docker legacy is always plain
    env: list | None = None
    labels: object = None
    config_raw: bytes | None = None  # replaces the config bytes entirely
    config_obj: object = None  # replaces the config object
    diff_ids: list[str] | None = None
    raw_layers: list[bytes] | None = None  # already compressed blobs (bombs, truncations)


def _layer_blobs(img: Image) -> tuple[list[bytes], list[str], str]:
    if img.raw_layers is not None:
        blobs = img.raw_layers
        diffs = img.diff_ids or [sha(b"") for _ in blobs]
        mt = {"gzip": "+gzip", "zstd": "+zstd", "none": ""}[img.compress]
        return blobs, diffs, mt
    diffs = img.diff_ids or [sha(layer) for layer in img.layers]
    if img.compress == "gzip":
        blobs, mt = [gz(layer) for layer in img.layers], "+gzip"
    elif img.compress == "zstd":
        blobs, mt = [zst(layer) for layer in img.layers], "+zstd"
    else:
        blobs, mt = list(img.layers), ""
    return blobs, diffs, mt


def _config_bytes(img: Image, diffs: list[str]) -> bytes:
    if img.config_raw is not None:
        return img.config_raw
    if img.config_obj is not None:
        return json.dumps(img.config_obj).encode()
    return json.dumps(image_config(diffs, img.env, img.labels)).encode()


def docker_archive(path: str, img: Image, manifest=None, layer_names: list[str] | None = None,
                   as_dir: bool = False, outer_extra: list[E] | None = None, config_name: str | None = None,
                   manifest_raw: bytes | None = None, drop: set | None = None, outer_truncate: int | None = None) -> str:
    """Legacy `docker save` form: manifest.json + <hex>.json + <id>/layer.tar (plain tars)."""
    layers = img.raw_layers if img.raw_layers is not None else img.layers
    diffs = img.diff_ids or [sha(layer) for layer in layers]
    cfg = _config_bytes(img, diffs)
    cname = config_name or hashlib.sha256(cfg).hexdigest() + ".json"
    names = layer_names or [f"{hashlib.sha256(layer).hexdigest()[:12]}{i}/layer.tar" for i, layer in enumerate(layers)]
    files: dict[str, bytes] = {}
    if not config_name or not (config_name.startswith("/") or ".." in config_name):
        files[cname] = cfg
    for n, layer in zip(names, layers, strict=False):
        if n.startswith("/") or ".." in n.split("/"):
            continue
        files[n] = layer
    if manifest is None:
        manifest = [{"Config": cname, "RepoTags": ["test/img:1"], "Layers": names}]
    files["manifest.json"] = manifest_raw if manifest_raw is not None else json.dumps(manifest).encode()
    for d in drop or ():
        files.pop(d, None)
    if as_dir:
        os.makedirs(path, exist_ok=True)
        for n, b in files.items():
            p = os.path.join(path, n)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "wb") as f:
                f.write(b)
        return "docker-archive:" + path
    entries = [E(n, data=b) for n, b in files.items()] + list(outer_extra or [])
    raw = tar_bytes(entries, fmt=tarfile.GNU_FORMAT)
    if outer_truncate is not None:
        raw = raw[:outer_truncate]
    with open(path, "wb") as f:
        f.write(raw)
    return "docker-archive:" + path


def oci_files(img: Image, manifest_patch=None, index_patch=None, layer_descs=None,
              config_desc_patch=None) -> tuple[dict[str, bytes], dict]:
    """Return {relative path: bytes} of an OCI layout and the manifest object."""
    blobs, diffs, mt = _layer_blobs(img)
    cfg = _config_bytes(img, diffs)
    files: dict[str, bytes] = {"oci-layout": b'{"imageLayoutVersion": "1.0.0"}'}

    def put(b: bytes) -> str:
        d = sha(b)
        files["blobs/sha256/" + d[7:]] = b
        return d

    cdesc = {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": put(cfg), "size": len(cfg)}
    if config_desc_patch:
        cdesc.update(config_desc_patch)
    ldescs = [{"mediaType": "application/vnd.oci.image.layer.v1.tar" + mt, "digest": put(b), "size": len(b)}
              for b in blobs]
    if layer_descs is not None:
        ldescs = layer_descs(ldescs)
    man = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
           "config": cdesc, "layers": ldescs}
    if manifest_patch:
        man = manifest_patch(man)
    mb = man if isinstance(man, bytes) else json.dumps(man).encode()
    mdesc = {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": put(mb), "size": len(mb),
             "platform": {"architecture": "amd64", "os": "linux"}}
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [mdesc]}
    if index_patch:
        index = index_patch(index, put)
    files["index.json"] = index if isinstance(index, bytes) else json.dumps(index).encode()
    return files, man


def write_tree(path: str, files: dict[str, bytes]) -> None:
    for n, b in files.items():
        p = os.path.join(path, n)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(b)


def oci_layout(path: str, img: Image, **kw) -> str:
    files, _ = oci_files(img, **kw)
    os.makedirs(path, exist_ok=True)
    write_tree(path, files)
    return "oci:" + path


def oci_archive(path: str, img: Image, outer_extra: list[E] | None = None, **kw) -> str:
    files, _ = oci_files(img, **kw)
    entries = [E(n, data=b) for n, b in files.items()] + list(outer_extra or [])
    with open(path, "wb") as f:
        f.write(tar_bytes(entries, fmt=tarfile.GNU_FORMAT))
    return "oci-archive:" + path


# --------------------------------------------------------------------------- wheels

def wheel_members(version: str = "1.0", extra: list | None = None) -> list:
    meta = f"Metadata-Version: 2.1\nName: {PKG}\nVersion: {version}\n\n".encode()
    members = [
        (f"{PKG}/__init__.py", PKG_INIT),
        (f"{PKG}/mod.py", b"def f():\n    return 1\n"),
        (f"{PKG}-1.0.dist-info/METADATA", meta),
        (f"{PKG}-1.0.dist-info/WHEEL", b"Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
    ]
    members += extra or []
    rec = "".join(f"{m[0]},,\n" for m in members) + f"{PKG}-1.0.dist-info/RECORD,,\n"
    members.append((f"{PKG}-1.0.dist-info/RECORD", rec.encode()))
    return members


def zip_bytes(members: list, compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression) as zf:
        for m in members:
            if isinstance(m, zipfile.ZipInfo):
                raise TypeError
            if len(m) == 3:
                name, data, attr = m
                zi = zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0))
                zi.external_attr = attr << 16
                zi.create_system = 3
                zi.compress_type = compression
                zf.writestr(zi, data)
            else:
                name, data = m
                zi = zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0))
                zi.compress_type = compression
                zi.external_attr = 0o644 << 16
                zf.writestr(zi, data)
    return buf.getvalue()


def zip_locate(raw: bytes, name: str) -> tuple[int, int]:
    """(local header offset, central directory header offset) of a member."""
    b = name.encode()
    cd = raw.rfind(b"PK\x01\x02" + b"", 0)
    # scan central directory entries
    pos = 0
    local = central = -1
    while True:
        i = raw.find(b"PK\x01\x02", pos)
        if i < 0:
            break
        nlen, elen, clen = struct.unpack("<HHH", raw[i + 28:i + 34])
        if raw[i + 46:i + 46 + nlen] == b:
            central = i
            local = struct.unpack("<I", raw[i + 42:i + 46])[0]
            break
        pos = i + 4
    del cd
    return local, central


def zip_patch(raw: bytes, name: str, local: dict | None = None, central: dict | None = None) -> bytes:
    """Patch fields {offset: bytes} relative to the member's local / central headers."""
    b = bytearray(raw)
    lo, co = zip_locate(raw, name)
    for off, val in (local or {}).items():
        b[lo + off:lo + off + len(val)] = val
    for off, val in (central or {}).items():
        b[co + off:co + off + len(val)] = val
    return bytes(b)


def deflate_zero_stream(n: int) -> tuple[bytes, int]:
    """Raw deflate of n zero bytes, built from one full-flushed 1 MiB block repeated (cheap)."""
    co = zlib.compressobj(9, zlib.DEFLATED, -15)
    chunk = b"\0" * (1 << 20)
    first = co.compress(chunk) + co.flush(zlib.Z_FULL_FLUSH)
    second = co.compress(chunk) + co.flush(zlib.Z_FULL_FLUSH)
    count = n >> 20
    body = first + second * (count - 1) if count else b""
    return body + co.flush(), 0


def zip_bomb_member(name: str, n: int, version: str = "1.0") -> bytes:
    """A hand-built zip: the wheel's members plus one deflated member of n zero bytes (cheap)."""
    comp, _ = deflate_zero_stream(n)
    crc = 0
    chunk = b"\0" * (1 << 20)
    for _ in range(n >> 20):
        crc = zlib.crc32(chunk, crc)
    out = io.BytesIO()
    cds = []
    for mn, data in wheel_members(version):
        c = zlib.compressobj(6, zlib.DEFLATED, -15)
        cds.append(_zip_add(out, mn, c.compress(data) + c.flush(), zlib.crc32(data), len(data)))
    cds.append(_zip_add(out, name, comp, crc, n))
    cdo = out.tell()
    for c in cds:
        out.write(c)
    cdl = out.tell() - cdo
    out.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(cds), len(cds), cdl, cdo, 0))
    return out.getvalue()


def _zip_add(out: io.BytesIO, name: str, comp: bytes, crc: int, size: int) -> bytes:
    nb = name.encode()
    off = out.tell()
    out.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0x21, crc, len(comp), size, len(nb), 0))
    out.write(nb)
    out.write(comp)
    return struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0x21, crc, len(comp), size,
                       len(nb), 0, 0, 0, 0, 0o644 << 16, off) + nb


# --------------------------------------------------------------------------- misc

def nested_json(depth: int, kind: str = "list") -> bytes:
    if kind == "list":
        return b"[" * depth + b"]" * depth
    return b'{"a":' * depth + b"1" + b"}" * depth
