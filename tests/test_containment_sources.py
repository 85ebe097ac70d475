"""Containment of the readers: one hostile input per class, each built for real, each one line.

Every case is a real OCI layout, ``docker save`` archive, oci-archive tar or
wheel whose bytes the test writes itself, snapshotted through
:func:`recon.snapshots.take.take_snapshot`. A case passes when recon raises a
:class:`ReconError` whose message is one line naming what was wrong, the
output folder is left empty, and (for the escape cases) a file outside the
archive is never opened: an audit hook records every ``open`` of the process.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import struct
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zstandard

from recon.acquire.blobcache import DigestMismatch
from recon.errors import ReconError, UnsafeArchiveError
from recon.snapshots.take import take_snapshot
from tests.imagekit import SITE, layer_bytes, put_blob, tar_folder, write_docker_archive, write_oci

PKG = {"usr/local/bin/python3": b"#!\n", f"{SITE}/vllm/__init__.py": b"__version__ = '1.0'\n",
       f"{SITE}/vllm/envs.py": b"X = 1\n"}
SECRET = b"HOST-SECRET-BYTES"

_OPENED: list[str] = []
_WATCH: list[str] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and _WATCH and args and isinstance(args[0], (str, bytes)):
        path = os.fsdecode(args[0])
        if any(w in path for w in _WATCH):
            _OPENED.append(path)


sys.addaudithook(_audit)


@pytest.fixture
def outside(tmp_path: Path) -> Iterator[Path]:
    """A host folder with a secret file; any ``open`` of a path under it is recorded."""
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret").write_bytes(SECRET)
    (d / "secret.tar").write_bytes(layer_bytes({f"{SITE}/vllm/__init__.py": SECRET}))
    _OPENED.clear()
    _WATCH[:] = [str(d)]
    yield d
    _WATCH.clear()


def _fails(tmp_path: Path, source: str, *words: str, kind: type[Exception] = ReconError) -> ReconError:
    """Snapshot ``source``; it must fail in one line holding ``words``, leaving ``out`` empty."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    with pytest.raises(ReconError) as info:
        take_snapshot(source, out=out, name="snap")
    msg = str(info.value)
    assert isinstance(info.value, kind), msg
    assert "\n" not in msg and len(msg) < 600, msg
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"
    assert list(out.iterdir()) == [], "a failed snapshot left something behind"
    return info.value


def _ok(tmp_path: Path, source: str) -> dict[str, str]:
    out = tmp_path / "ok"
    snap = take_snapshot(source, out=out, name="snap")
    return {rel: rec.sha256 or "" for rel, rec in snap.files.items()}


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


# --- the good path, so every failure below is about the one thing broken --------------------

def test_a_clean_layout_and_archive_snapshot(tmp_path: Path) -> None:
    layer = layer_bytes(PKG)
    layout = write_oci(tmp_path / "lay", [gzip.compress(layer)])
    files = _ok(tmp_path, f"oci:{layout}")
    assert files["vllm/__init__.py"] == hashlib.sha256(PKG[f"{SITE}/vllm/__init__.py"]).hexdigest()
    archive = tar_folder(layout, tmp_path / "lay.tar")
    assert _ok(tmp_path / "b", f"oci-archive:{archive}") == files


# --- 1. blob paths only from validated digests ---------------------------------------------

@pytest.mark.parametrize("digest", ["../../outside:secret", "sha256:../../../outside/secret",
                                    "sha256:" + "A" * 64, "md5:" + "0" * 32, "sha512:" + "0" * 64])
def test_a_digest_that_is_not_a_registered_one_is_refused(tmp_path: Path, outside: Path,
                                                          digest: str) -> None:
    desc = {"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": digest, "size": 10}
    layout = write_oci(tmp_path / "lay", [layer_bytes(PKG)], layer_descs=[desc])
    _fails(tmp_path, f"oci:{layout}", "malformed digest")
    assert _OPENED == []


def test_an_index_entry_with_a_traversal_digest_is_refused(tmp_path: Path, outside: Path) -> None:
    index = {"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "../..:outside/secret",
         "size": 17}]}
    layout = write_oci(tmp_path / "lay", [layer_bytes(PKG)], index=index)
    _fails(tmp_path, f"oci:{layout}", "malformed digest")
    assert _OPENED == []


def _legacy_folder(tmp_path: Path, names: list[str]) -> Path:
    """A folder-form ``docker save`` archive whose manifest names ``names`` as its layers."""
    folder = tmp_path / "save"
    folder.mkdir()
    layer = layer_bytes(PKG)
    (folder / "l0").mkdir()
    (folder / "l0" / "layer.tar").write_bytes(layer)
    cfg = json.dumps({"os": "linux", "architecture": "amd64",
                      "rootfs": {"type": "layers", "diff_ids": [_sha(layer)] * len(names)}}).encode()
    (folder / "c.json").write_bytes(cfg)
    (folder / "manifest.json").write_text(json.dumps([{"Config": "c.json", "Layers": names}]))
    return folder


@pytest.mark.parametrize("name", ["../../outside/secret", "../outside/secret.tar", "l0/../../outside/secret"])
def test_a_manifest_naming_a_file_outside_the_folder_is_refused(tmp_path: Path, outside: Path,
                                                                name: str) -> None:
    folder = _legacy_folder(tmp_path, [name])
    _fails(tmp_path, f"docker-archive:{folder}", "outside the archive", repr(name))
    assert _OPENED == []


def test_an_absolute_layer_name_is_refused(tmp_path: Path, outside: Path) -> None:
    folder = _legacy_folder(tmp_path, [str(outside / "secret.tar")])
    _fails(tmp_path, f"docker-archive:{folder}", "outside the archive")
    assert _OPENED == []


@pytest.mark.parametrize("relative", [False, True])
def test_a_symlink_out_of_the_folder_is_not_followed(tmp_path: Path, outside: Path,
                                                     relative: bool) -> None:
    folder = _legacy_folder(tmp_path, ["l1/layer.tar"])
    (folder / "l1").mkdir()
    target = os.path.relpath(outside / "secret.tar", folder / "l1") if relative else str(outside / "secret.tar")
    (folder / "l1" / "layer.tar").symlink_to(target)
    _fails(tmp_path, f"docker-archive:{folder}", "l1/layer.tar")
    assert _OPENED == []


def test_a_symlinked_folder_out_of_the_layout_is_not_followed(tmp_path: Path, outside: Path) -> None:
    layout = write_oci(tmp_path / "lay", [layer_bytes(PKG)])
    blob = next((layout / "blobs" / "sha256").iterdir())
    (outside / blob.name).write_bytes(blob.read_bytes())
    os.replace(layout / "blobs" / "sha256", layout / "blobs" / "moved")
    (layout / "blobs" / "sha256").symlink_to(outside)
    _OPENED.clear()
    _fails(tmp_path, f"oci:{layout}", "link")
    assert _OPENED == []


def test_a_symlink_inside_the_folder_is_followed(tmp_path: Path) -> None:
    """``docker save`` links a repeated layer to its first copy: that stays readable."""
    folder = _legacy_folder(tmp_path, ["l0/layer.tar", "l1/layer.tar"])
    (folder / "l1").mkdir()
    (folder / "l1" / "layer.tar").symlink_to("../l0/layer.tar")
    assert "vllm/__init__.py" in _ok(tmp_path, f"docker-archive:{folder}")


def test_a_fifo_blob_is_refused_without_blocking(tmp_path: Path) -> None:
    folder = _legacy_folder(tmp_path, ["l1/layer.tar"])
    (folder / "l1").mkdir()
    os.mkfifo(folder / "l1" / "layer.tar")
    _fails(tmp_path, f"docker-archive:{folder}", "not a regular file")


# --- 2. digests verified while streaming ----------------------------------------------------

def _swap_blob(layout: Path, desc_digest: str, data: bytes) -> None:
    (layout / "blobs" / "sha256" / desc_digest.split(":")[1]).write_bytes(data)


def _tampered(layer: bytes) -> bytes:
    """The same tar with one byte changed inside a member the squash never reads (seek-skipped)."""
    pos = layer.index(b"#!\n")
    return layer[:pos] + b"#?\n" + layer[pos + 3:]


@pytest.mark.parametrize("compress", [False, True])
def test_a_blob_that_does_not_match_its_descriptor(tmp_path: Path, compress: bool) -> None:
    layer = layer_bytes(PKG)
    stored = gzip.compress(layer, mtime=0) if compress else layer
    layout = write_oci(tmp_path / "lay", [layer_bytes({"etc/a": b"a"}), stored])
    bad = gzip.compress(_tampered(layer), mtime=0) if compress else _tampered(layer)
    _swap_blob(layout, _sha(stored), bad)
    _fails(tmp_path, f"oci:{layout}", _sha(stored), "layer 1", "corrupt or tampered", kind=DigestMismatch)


def test_a_layer_whose_diff_id_is_wrong(tmp_path: Path) -> None:
    layer = layer_bytes(PKG)
    stored = gzip.compress(layer, mtime=0)
    wrong = _sha(_tampered(layer))
    layout = write_oci(tmp_path / "lay", [stored], diff_ids=[wrong])
    _fails(tmp_path, f"oci:{layout}", f"diff_id {wrong}", "layer 0", kind=DigestMismatch)


def test_a_blob_longer_than_its_descriptor_says(tmp_path: Path) -> None:
    layer = layer_bytes(PKG)
    d = put_blob(tmp_path / "lay", layer)
    desc = {"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": d["digest"],
            "size": d["size"] - 512}
    layout = write_oci(tmp_path / "lay", [layer], layer_descs=[desc])
    _fails(tmp_path, f"oci:{layout}", "longer than", kind=DigestMismatch)


def test_an_oci_archive_with_a_tampered_blob(tmp_path: Path) -> None:
    layer = layer_bytes(PKG)
    stored = zstandard.ZstdCompressor().compress(layer)
    layout = write_oci(tmp_path / "lay", [stored])
    _swap_blob(layout, _sha(stored), zstandard.ZstdCompressor().compress(_tampered(layer)))
    archive = tar_folder(layout, tmp_path / "lay.tar")
    _fails(tmp_path, f"oci-archive:{archive}", _sha(stored), kind=DigestMismatch)


@pytest.mark.parametrize("compress", [False, True])
def test_a_docker_archive_layer_that_is_not_its_diff_id(tmp_path: Path, compress: bool) -> None:
    (tmp_path / "l.tar").write_bytes(layer_bytes(PKG))
    raw = _tampered(layer_bytes(PKG))
    archive = write_docker_archive(tmp_path / "img.tar", [tmp_path / "l.tar"],
                                   raw_layers={0: gzip.compress(raw) if compress else raw})
    _fails(tmp_path, f"docker-archive:{archive}", "diff_id sha256:", "layer 0", kind=DigestMismatch)


def test_a_config_that_is_not_its_digest(tmp_path: Path) -> None:
    layout = write_oci(tmp_path / "lay", [layer_bytes(PKG)])
    m = json.loads((layout / "index.json").read_text())["manifests"][0]
    manifest = json.loads((layout / "blobs" / "sha256" / m["digest"][7:]).read_bytes())
    cfg = manifest["config"]["digest"]
    (layout / "blobs" / "sha256" / cfg[7:]).write_bytes(b'{"rootfs": {"diff_ids": []}}')
    _fails(tmp_path, f"oci:{layout}", "image config", cfg, kind=DigestMismatch)


# --- 3. bombs -------------------------------------------------------------------------------

def _members(files: dict[str, bytes]) -> bytes:
    """Tar members (headers, data, padding) with no end-of-archive blocks, so more can follow."""
    out = b""
    for name, data in files.items():
        ti = tarfile.TarInfo(name)
        ti.size = len(data)
        out += ti.tobuf(format=tarfile.PAX_FORMAT) + data + bytes(-len(data) % 512)
    return out


def _bomb_header(size: int) -> bytes:
    ti = tarfile.TarInfo(f"{SITE}/vllm/big.py")
    ti.size = size
    return ti.tobuf(format=tarfile.GNU_FORMAT)


def test_a_4_gib_gzip_bomb_is_refused_quickly(tmp_path: Path) -> None:
    zeros = gzip.compress(bytes(64 << 20), compresslevel=9, mtime=0)  # one member, 64 MiB of zeros
    bomb = gzip.compress(_members(PKG) + _bomb_header(4 << 30), mtime=0) + zeros * 64
    assert len(bomb) < 5 << 20
    layout = write_oci(tmp_path / "lay", [bomb], diff_ids=[_sha(b"bomb")])
    t = time.monotonic()
    _fails(tmp_path, f"oci:{layout}", "--max-ratio", "big.py", kind=UnsafeArchiveError)
    assert time.monotonic() - t < 20


def test_a_32_gib_zstd_bomb_is_refused_quickly(tmp_path: Path) -> None:
    frame = zstandard.ZstdCompressor(level=19).compress(bytes(64 << 20))
    head = zstandard.ZstdCompressor().compress(_members(PKG) + _bomb_header(32 << 30))
    bomb = head + frame * 512
    layout = write_oci(tmp_path / "lay", [bomb], diff_ids=[_sha(b"bomb")])
    t = time.monotonic()
    _fails(tmp_path, f"oci:{layout}", "--max-ratio", kind=UnsafeArchiveError)
    assert time.monotonic() - t < 20


def test_many_small_files_past_the_ratio_are_refused(tmp_path: Path) -> None:
    """Each file is under every per-file cap; their sum passes the ratio floor (1 GiB)."""
    zeros = zstandard.ZstdCompressor(level=3).compress(bytes(100 << 20))  # a member's data, one frame
    bomb = b""
    for i in range(12):
        ti = tarfile.TarInfo(f"opt/zeros{i}")
        ti.size = 100 << 20
        bomb += zstandard.ZstdCompressor().compress(ti.tobuf(format=tarfile.GNU_FORMAT)) + zeros
    layout = write_oci(tmp_path / "lay", [bomb], diff_ids=[_sha(b"x")])
    _fails(tmp_path, f"oci:{layout}", "--max-ratio", "opt/zeros10", kind=UnsafeArchiveError)


def test_the_ratio_cap_can_be_lifted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``RECON_MAX_RATIO=0`` (what ``--max-ratio 0`` sets) reads the same layer to its end."""
    zeros = zstandard.ZstdCompressor(level=3).compress(bytes(100 << 20))
    ti = tarfile.TarInfo("opt/zeros")
    ti.size = 100 << 20
    member = zstandard.ZstdCompressor().compress(ti.tobuf(format=tarfile.GNU_FORMAT)) + zeros
    pkg = zstandard.ZstdCompressor().compress(layer_bytes(PKG))
    layer = member * 11 + pkg
    plain = hashlib.sha256()  # the uncompressed stream's digest, 1.1 GB never held in memory
    for _ in range(11):
        plain.update(ti.tobuf(format=tarfile.GNU_FORMAT))
        for _ in range(100):
            plain.update(bytes(1 << 20))
    plain.update(layer_bytes(PKG))
    layout = write_oci(tmp_path / "lay", [layer], diff_ids=["sha256:" + plain.hexdigest()])
    _fails(tmp_path, f"oci:{layout}", "--max-ratio", kind=UnsafeArchiveError)
    cli = subprocess.run([sys.executable, "-m", "recon", "snapshot", f"oci:{layout}", "--out",
                          str(tmp_path / "cli"), "--max-ratio", "0", "--quiet"],
                         capture_output=True, text=True, timeout=300, check=False)
    assert cli.returncode == 0, cli.stderr  # the flag the error names lifts the cap
    monkeypatch.setenv("RECON_MAX_RATIO", "0")
    assert "vllm/__init__.py" in _ok(tmp_path, f"oci:{layout}")


def test_a_wheel_bomb_is_refused_before_decompressing(tmp_path: Path) -> None:
    """The central directory declares 2 GiB for a member of a 1 KiB wheel."""
    whl = _wheel(tmp_path)
    _, central = _member_offsets(whl, "vllm/mod.py")
    _patch(whl, central + 24, struct.pack("<I", 0x7FFFFFFF))
    _fails(tmp_path, f"wheel:{whl}", "--max-ratio", kind=UnsafeArchiveError)


# --- 4. crash classes: one line each ------------------------------------------------------------

def test_a_truncated_outer_tar(tmp_path: Path) -> None:
    (tmp_path / "l.tar").write_bytes(layer_bytes(PKG))
    archive = write_docker_archive(tmp_path / "img.tar", [tmp_path / "l.tar"])
    data = archive.read_bytes()
    manifest_at = data.index(b"manifest.json")
    for cut in (700, len(data) // 2, manifest_at + 100, manifest_at + 600):
        archive.write_bytes(data[:cut])
        _fails(tmp_path, f"docker-archive:{archive}", "truncated")


@pytest.mark.parametrize(("config", "words"), [
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "is a JSON array, not an object"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (json.dumps({"config": {"Labels": ["a", "b"]}}).encode(), "Labels"),
    (json.dumps({"config": {"Env": "PATH=/bin"}}).encode(), "Env"),
    (json.dumps({"config": [], "rootfs": {"diff_ids": "x"}}).encode(), "diff_ids"),
])
def test_a_config_of_the_wrong_shape(tmp_path: Path, config: bytes, words: str) -> None:
    layer = layer_bytes(PKG)
    if b"rootfs" not in config and config.startswith(b"{\""):
        doc = json.loads(config)
        doc["rootfs"] = {"type": "layers", "diff_ids": [_sha(layer)]}
        config = json.dumps(doc).encode()
    layout = write_oci(tmp_path / "lay", [layer], config=config)
    _fails(tmp_path, f"oci:{layout}", words)


@pytest.mark.parametrize(("manifest", "words"), [
    ([1, "x"], "an image entry"),
    ([{"Layers": []}], "no Config name"),
    (b"[" * 50_000, "nested too deeply"),
    ({"Config": "c.json"}, "lists no images"),
])
def test_a_legacy_manifest_of_the_wrong_shape(tmp_path: Path, manifest: Any, words: str) -> None:
    folder = _legacy_folder(tmp_path, ["l0/layer.tar"])
    (folder / "manifest.json").write_bytes(manifest if isinstance(manifest, bytes)
                                           else json.dumps(manifest).encode())
    _fails(tmp_path, f"docker-archive:{folder}", words)


def test_manifest_without_config_and_layer_without_digest(tmp_path: Path) -> None:
    layer = layer_bytes(PKG)
    layout = write_oci(tmp_path / "a", [layer], manifest={"schemaVersion": 2, "layers": []})
    _fails(tmp_path, f"oci:{layout}", "no config")
    layout = write_oci(tmp_path / "b", [layer], layer_descs=[{"size": len(layer)}])
    _fails(tmp_path, f"oci:{layout}", "layer 0 descriptor has no digest")
    layout = write_oci(tmp_path / "c", [layer], layer_descs=["sha256:00"])  # type: ignore[list-item]
    _fails(tmp_path, f"oci:{layout}", "not a JSON object")
    d = put_blob(tmp_path / "d", layer)
    layout = write_oci(tmp_path / "d", [layer], layer_descs=[{**d, "size": "12"}])
    _fails(tmp_path, f"oci:{layout}", "bad size")


def test_a_missing_layer_blob(tmp_path: Path) -> None:
    layer = layer_bytes(PKG)
    layout = write_oci(tmp_path / "lay", [layer])
    (layout / "blobs" / "sha256" / _sha(layer)[7:]).unlink()
    _fails(tmp_path, f"oci:{layout}", "missing blob")
    archive = tar_folder(layout, tmp_path / "lay.tar")
    _fails(tmp_path, f"oci-archive:{archive}", "missing blob")


def test_diff_ids_that_do_not_count_the_layers(tmp_path: Path) -> None:
    layer = layer_bytes(PKG)
    layout = write_oci(tmp_path / "lay", [layer], diff_ids=[_sha(layer)] * 2)
    _fails(tmp_path, f"oci:{layout}", "2 diff_ids for 1 layers")


def _index_chain(layout: Path, depth: int, bottom: dict[str, Any]) -> dict[str, Any]:
    """``depth`` nested indexes above the manifest descriptor ``bottom``; the top descriptor."""
    desc = bottom
    for _ in range(depth):
        doc = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
               "manifests": [desc]}
        desc = {"mediaType": "application/vnd.oci.image.index.v1+json",
                **put_blob(layout, json.dumps(doc).encode())}
    return desc


def test_indexes_nested_3000_deep(tmp_path: Path) -> None:
    layout = write_oci(tmp_path / "lay", [layer_bytes(PKG)])
    manifest = json.loads((layout / "index.json").read_text())["manifests"][0]
    top = _index_chain(layout, 3000, manifest)
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [top]}))
    _fails(tmp_path, f"oci:{layout}", "nested more than")


def test_an_index_cycle(tmp_path: Path) -> None:
    """Content addressing makes a true cycle impossible; a blob claiming to be its own parent
    is a digest mismatch, and a cycle of indexes whose digests are not checked is cut."""
    layout = write_oci(tmp_path / "lay", [layer_bytes(PKG)])
    fake = "sha256:" + "ab" * 32
    doc = {"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.index.v1+json", "digest": fake, "size": 10}]}
    (layout / "blobs" / "sha256" / fake[7:]).write_text(json.dumps(doc))
    (layout / "index.json").write_text(json.dumps(doc))
    _fails(tmp_path, f"oci:{layout}", fake)

    from recon.acquire.sources.oci import pick_manifest

    with pytest.raises(ReconError, match="contains itself"):
        pick_manifest(doc, None, "test", lambda d: doc)


def test_index_entries_of_the_wrong_shape(tmp_path: Path) -> None:
    layout = write_oci(tmp_path / "a", [layer_bytes(PKG)], index={"manifests": [[1]]})
    _fails(tmp_path, f"oci:{layout}", "index entry 0 descriptor is not a JSON object")
    layout = write_oci(tmp_path / "b", [layer_bytes(PKG)], index={"manifests": {"a": 1}})
    _fails(tmp_path, f"oci:{layout}", "no manifests list")
    layout = write_oci(tmp_path / "c", [layer_bytes(PKG)], index=b"\xff\xfe")
    _fails(tmp_path, f"oci:{layout}", "index.json is not valid JSON")


# --- wheels -------------------------------------------------------------------------------------

def _wheel(tmp_path: Path, data: bytes = b"x = 1\n" * 200, method: int = zipfile.ZIP_DEFLATED) -> Path:
    whl = tmp_path / "vllm-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w", method) as zf:
        zf.writestr("vllm/__init__.py", b"__version__ = '1.0'\n")
        zf.writestr("vllm/mod.py", data)
    return whl


def _member_offsets(whl: Path, name: str) -> tuple[int, int]:
    """(local header offset, central directory header offset) of ``name``."""
    data = whl.read_bytes()
    with zipfile.ZipFile(whl) as zf:
        local = zf.getinfo(name).header_offset
    central = data.index(b"PK\x01\x02")
    while data[central + 46:central + 46 + len(name)] != name.encode():
        central = data.index(b"PK\x01\x02", central + 4)
    return local, central


def _patch(whl: Path, at: int, new: bytes) -> None:
    data = bytearray(whl.read_bytes())
    data[at:at + len(new)] = new
    whl.write_bytes(bytes(data))


def test_a_wheel_with_a_bad_local_header(tmp_path: Path) -> None:
    whl = _wheel(tmp_path)
    local, _ = _member_offsets(whl, "vllm/mod.py")
    _patch(whl, local, b"XXXX")
    _fails(tmp_path, f"wheel:{whl}", "vllm/mod.py", "corrupt member")


def test_a_wheel_with_a_bad_crc(tmp_path: Path) -> None:
    whl = _wheel(tmp_path)
    local, central = _member_offsets(whl, "vllm/mod.py")
    _patch(whl, local + 14, b"\0\0\0\0")
    _patch(whl, central + 16, b"\0\0\0\0")
    _fails(tmp_path, f"wheel:{whl}", "vllm/mod.py", "CRC")


def test_a_wheel_with_an_unknown_compression(tmp_path: Path) -> None:
    whl = _wheel(tmp_path)
    local, central = _member_offsets(whl, "vllm/mod.py")
    _patch(whl, local + 8, struct.pack("<H", 99))
    _patch(whl, central + 10, struct.pack("<H", 99))
    _fails(tmp_path, f"wheel:{whl}", "vllm/mod.py", "compression method 99")


def test_an_encrypted_wheel_member(tmp_path: Path) -> None:
    whl = _wheel(tmp_path)
    local, central = _member_offsets(whl, "vllm/mod.py")
    _patch(whl, local + 6, struct.pack("<H", 1))
    _patch(whl, central + 8, struct.pack("<H", 1))
    _fails(tmp_path, f"wheel:{whl}", "vllm/mod.py", "encrypted")


@pytest.mark.parametrize(("delta", "words"), [(+100, "corrupt member"), (-100, "more data")])
def test_a_wheel_member_whose_size_lies(tmp_path: Path, delta: int, words: str) -> None:
    """The header says N bytes; the data holds more or fewer (the CRC is made to match N)."""
    data = bytes(range(256)) * 40
    whl = _wheel(tmp_path, data)
    local, central = _member_offsets(whl, "vllm/mod.py")
    size = len(data) + delta
    claimed = (data + bytes(max(0, delta)))[:size]
    crc = struct.pack("<I", zipfile.crc32(claimed))
    for at in (local + 14, central + 16):
        _patch(whl, at, crc)
    _patch(whl, local + 22, struct.pack("<I", size))
    _patch(whl, central + 24, struct.pack("<I", size))
    _fails(tmp_path, f"wheel:{whl}", "vllm/mod.py", words)


def test_a_stored_wheel_member_whose_sizes_disagree(tmp_path: Path) -> None:
    whl = _wheel(tmp_path, b"y" * 1000, method=zipfile.ZIP_STORED)
    local, central = _member_offsets(whl, "vllm/mod.py")
    _patch(whl, local + 22, struct.pack("<I", 900))
    _patch(whl, central + 24, struct.pack("<I", 900))
    _fails(tmp_path, f"wheel:{whl}", "vllm/mod.py", "says 900 bytes but holds 1000")


def test_a_wheel_that_is_not_a_zip(tmp_path: Path) -> None:
    whl = tmp_path / "vllm-1.0-py3-none-any.whl"
    whl.write_bytes(b"PK\x05\x06" + b"\xff" * 18)
    _fails(tmp_path, f"wheel:{whl}", "not a readable wheel")


# --- tar headers: PAX, long names -----------------------------------------------------------------

def _pax_layer(pax: dict[str, str], size_field: int | None = None) -> bytes:
    ti = tarfile.TarInfo(f"{SITE}/vllm/x.py")
    ti.pax_headers = pax
    raw = bytearray(ti.tobuf(format=tarfile.PAX_FORMAT))
    if size_field is not None:  # the PAX header's own size field (the first header block)
        raw[124:136] = b"%011o\0" % size_field
        chk = sum(raw[:148]) + 256 + sum(raw[156:512])
        raw[148:156] = b"%06o\0 " % chk
    return _members(PKG) + bytes(raw) + bytes(1024)


def test_a_pax_header_of_huge_size(tmp_path: Path) -> None:
    layout = write_oci(tmp_path / "lay", [gzip.compress(_pax_layer({"comment": "x"}, 4 << 30))],
                       diff_ids=[_sha(b"")])
    _fails(tmp_path, f"oci:{layout}", "PAX header of", "cap", kind=UnsafeArchiveError)


def test_an_80_kib_pax_path_is_refused_at_path_max(tmp_path: Path) -> None:
    path = f"{SITE}/vllm/" + "a/" * 40_000 + "x.py"
    layer = _pax_layer({"path": path})
    layout = write_oci(tmp_path / "lay", [layer])
    _fails(tmp_path, f"oci:{layout}", "PATH_MAX 4096", kind=UnsafeArchiveError)


def test_a_300_byte_name_component_is_refused_at_name_max(tmp_path: Path) -> None:
    layer = _pax_layer({"path": f"{SITE}/vllm/{'n' * 300}.py"})
    layout = write_oci(tmp_path / "lay", [layer])
    _fails(tmp_path, f"oci:{layout}", "NAME_MAX 255", kind=UnsafeArchiveError)


def test_many_pax_headers_for_one_member_are_capped(tmp_path: Path) -> None:
    one = _pax_layer({"comment": "c" * 900_000})[len(_members(PKG)):-1024]
    header_only = one[:len(one) - 512]  # the PAX header and its records, not the member after it
    layer = _members(PKG) + header_only * 3 + one + bytes(1024)
    layout = write_oci(tmp_path / "lay", [layer], diff_ids=[_sha(layer)])
    _fails(tmp_path, f"oci:{layout}", "PAX headers of more than", kind=UnsafeArchiveError)


# --- registry: the uncompressed stream against the config's diff_id ------------------------------

@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A real registry (``docker-registry``), a private blob cache, plain HTTP on loopback."""
    from tests.registrykit import Registry, need

    need("docker-registry")
    monkeypatch.setenv("RECON_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RECON_REGISTRY_INSECURE", "1")
    reg = Registry(tmp_path / "registry").start()
    yield reg
    reg.stop()


def _push(registry: Any, tmp_path: Path, name: str, diff_id: str | None) -> str:
    """Push one gzip layer of PKG whose config names ``diff_id`` (None: the right one)."""
    from tests.registrykit import gzip_layer, image_manifest, skopeo_copy, write_oci_layout

    d = tmp_path / name
    d.mkdir()
    (d / "l.tar").write_bytes(layer_bytes(PKG))
    desc, path, right = gzip_layer(d / "l.tar", d / "l.tgz")
    layout = d / "oci"
    write_oci_layout(layout, [image_manifest(layout, [(desc, path, diff_id or right)])])
    skopeo_copy(f"oci:{layout}:latest", f"docker://{registry.host}/recon/{name}:1", "--preserve-digests")
    return f"registry:{registry.host}/recon/{name}:1"


def test_a_registry_layer_that_is_not_its_diff_id(registry: Any, tmp_path: Path) -> None:
    wrong = _sha(b"not this layer")
    ref = _push(registry, tmp_path, "wrongdiff", wrong)
    for _ in range(2):  # the second run reads the cached blob: still checked, no listing was kept
        _fails(tmp_path, ref, f"diff_id {wrong}", "layer 0", kind=DigestMismatch)


def test_a_verified_listing_does_not_vouch_for_another_diff_id(registry: Any, tmp_path: Path) -> None:
    """The same layer blob, verified once under its true diff_id, then claimed by a config
    with another one: the cached listing names the diff_id it was checked against."""
    good = _push(registry, tmp_path, "good", None)
    assert "vllm/__init__.py" in _ok(tmp_path, good)
    wrong = _sha(b"another")
    bad = _push(registry, tmp_path, "same-blob-other-diff", wrong)
    _fails(tmp_path, bad, f"diff_id {wrong}", kind=DigestMismatch)


def test_a_wheel_declaring_millions_of_members(tmp_path: Path) -> None:
    """A zip64 end record claims 5 million entries: refused before zipfile builds any of them."""
    whl = _wheel(tmp_path)
    data = whl.read_bytes()
    at = data.rfind(b"PK\x05\x06")
    cd_size, cd_offset = struct.unpack("<II", data[at + 12:at + 20])
    z64 = b"PK\x06\x06" + struct.pack("<QHHIIQQQQ", 44, 45, 45, 0, 0, 5_000_000, 5_000_000,
                                        cd_size, cd_offset)
    locator = b"PK\x06\x07" + struct.pack("<IQI", 0, at, 1)
    eocd = bytearray(data[at:])
    eocd[8:12] = struct.pack("<HH", 0xFFFF, 0xFFFF)
    whl.write_bytes(data[:at] + z64 + locator + bytes(eocd))
    assert _fails(tmp_path, f"wheel:{whl}", "5000000 members").exit_code == 3


def test_an_image_of_too_many_layers(tmp_path: Path) -> None:
    layer = layer_bytes(PKG)
    d = put_blob(tmp_path / "lay", layer)
    descs = [{"mediaType": "application/vnd.oci.image.layer.v1.tar", **d}] * 1001
    layout = write_oci(tmp_path / "lay", [layer] * 1001, layer_descs=descs)
    _fails(tmp_path, f"oci:{layout}", "1001 layers")
