"""recon's own tar reader against two independent ones: Python's ``tarfile`` and GNU tar.

Archives are written by ``tarfile`` in all three formats it knows (ustar,
GNU, PAX) and by GNU tar itself (including a sparse file), then read three
ways: recon seeking over member data (how ``docker save`` layers are read),
recon reading forwards through gzip (how registry and OCI layers are read),
and the independent reader. Names, kinds, sizes, link targets, modes, data
offsets and content hashes must agree. Headers recon must refuse are crafted
byte by byte from a valid one.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from recon.acquire.sources.base import tar_entries
from recon.acquire.sources.tarstream import tar_members
from recon.errors import ReconError, UnsafeArchiveError

LONG_DIR = "usr/local/lib/python3.12/site-packages/vllm/model_executor/layers/" + "very_long_folder_name/" * 6
KIND = {tarfile.REGTYPE: "file", tarfile.AREGTYPE: "file", tarfile.DIRTYPE: "dir", tarfile.SYMTYPE: "symlink",
        tarfile.LNKTYPE: "hardlink", tarfile.FIFOTYPE: "other", tarfile.CHRTYPE: "other"}


def _members() -> list[tuple[tarfile.TarInfo, bytes | None]]:
    """Every member shape a layer can hold, with names that need each format's long-name rule."""
    rnd = os.urandom(70_000)
    out: list[tuple[tarfile.TarInfo, bytes | None]] = []

    def add(name: str, type_: bytes = tarfile.REGTYPE, data: bytes | None = None, link: str = "",
            mode: int = 0o644) -> None:
        ti = tarfile.TarInfo(name)
        ti.type, ti.mode, ti.linkname = type_, mode, link
        ti.size = len(data) if data is not None else 0
        ti.mtime = 1_700_000_000
        out.append((ti, data))

    add("usr", tarfile.DIRTYPE, mode=0o755)
    add("usr/local/bin/python3", data=b"#!/bin/sh\n", mode=0o755)
    add("usr/local/bin/python", tarfile.SYMTYPE, link="python3")
    add(f"{LONG_DIR}fused_moe_kernel_configuration_for_hopper.py", data=rnd[:12_345])  # > 100: prefix/long
    add(f"{LONG_DIR}x" * 1 + "y" * 180, data=b"short")  # a leaf name longer than ustar's 100
    add("usr/share/empty", data=b"")
    add("usr/share/exact-block", data=rnd[:512])
    add("usr/share/big", data=rnd)
    add("usr/share/hard", tarfile.LNKTYPE, link="usr/share/big")
    add("usr/share/abs-link", tarfile.SYMTYPE, link="/usr/share/big")
    add("usr/share/" + "l" * 120, tarfile.SYMTYPE, link="../" * 40 + "target")  # long link target
    add("dev/fifo", tarfile.FIFOTYPE)
    add("dev/null", tarfile.CHRTYPE)
    add("usr/share/ünïcödé-名前.py", data="x = 'ü'\n".encode())
    add("usr/share/setuid", data=b"s", mode=0o4755)
    return out


def _write(path: Path, fmt: int, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w", format=fmt) as tf:
        for ti, data in members:
            try:
                tf.addfile(ti, io.BytesIO(data) if data is not None else None)
            except ValueError:  # a name or link ustar cannot hold at all
                assert fmt == tarfile.USTAR_FORMAT

    return path


def _theirs(path: Path) -> list[tuple[Any, ...]]:
    """What Python's tarfile reads: the independent answer."""
    rows = []
    with tarfile.open(path, "r:") as tf:
        for m in tf:
            data = tf.extractfile(m).read() if m.isreg() else None  # type: ignore[union-attr]
            rows.append((m.name.rstrip("/"), KIND.get(m.type, "file"), m.size if m.isreg() else 0,
                         m.linkname if (m.issym() or m.islnk()) else None, m.mode & 0o7777,
                         m.offset_data, hashlib.sha256(data).hexdigest() if data is not None else None))
    return rows


def _ours(stream: io.BufferedIOBase, *, seekable: bool) -> list[tuple[Any, ...]]:
    rows = []
    offsets: list[int] = []
    for e in tar_members(stream, where="test", seekable=seekable, on_offset=offsets.append):
        digest = None
        if e.kind == "file":
            assert e.open is not None
            digest = hashlib.sha256(e.open().read()).hexdigest()
        rows.append((e.name, e.kind, e.size, e.linkname, e.mode, offsets[-1], digest))
    return rows


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT],
                         ids=["ustar", "gnu", "pax"])
def test_reads_what_tarfile_reads(tmp_path: Path, fmt: int) -> None:
    path = _write(tmp_path / "l.tar", fmt, _members())
    want = _theirs(path)
    assert len(want) >= (13 if fmt == tarfile.USTAR_FORMAT else 15)
    if fmt == tarfile.USTAR_FORMAT:  # the name that only fits split into prefix + name
        assert any(r[0].endswith("fused_moe_kernel_configuration_for_hopper.py") for r in want)
    with open(path, "rb") as fh:
        assert _ours(fh, seekable=True) == want
    with open(path, "rb") as fh:
        assert _ours(io.BufferedReader(fh), seekable=False) == want  # type: ignore[arg-type]
    gz = tmp_path / "l.tar.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    with open(gz, "rb") as fh:
        got = [(e.name, e.kind, e.size, e.linkname, e.mode) for e in tar_entries(fh, where="test")]
    assert got == [row[:5] for row in want]


def test_skipping_unread_data_lands_on_the_next_header(tmp_path: Path) -> None:
    """Reading only part of a member (a 4-byte magic-number peek) must not derail the walk."""
    path = _write(tmp_path / "l.tar", tarfile.PAX_FORMAT, _members())
    names = []
    with open(path, "rb") as fh:
        for e in tar_members(fh, where="t", seekable=True):
            if e.kind == "file" and e.open is not None:
                e.open().read(4)
            names.append(e.name)
    assert names == [row[0] for row in _theirs(path)]


@pytest.mark.skipif(shutil.which("tar") is None, reason="GNU tar not installed")
def test_gnu_tar_archive_with_a_sparse_file(tmp_path: Path) -> None:
    """GNU tar's own output: names agree with `tar --list`; a sparse member is listed but refused."""
    root = tmp_path / "root"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_bytes(b"A = 1\n" * 1000)
    with open(root / "pkg" / "holes.bin", "wb") as fh:  # mostly holes: GNU tar stores it sparse
        fh.seek(5 << 20)
        fh.write(b"end")
    (root / "pkg" / "after.py").write_bytes(b"B = 2\n")
    for fmt in ("gnu", "posix"):
        path = tmp_path / f"{fmt}.tar"
        subprocess.run(["tar", f"--format={fmt}", "--sparse", "-cf", str(path), "-C", str(root), "pkg"],
                       check=True)
        listed = subprocess.run(["tar", "--list", "--quoting-style=literal", "-f", str(path)], check=True,
                                capture_output=True, text=True).stdout.split()
        seen: dict[str, bytes | str] = {}
        with open(path, "rb") as fh:
            for e in tar_members(fh, where="t", seekable=True):
                if e.kind == "file" and e.open is not None:
                    try:
                        seen[e.name] = e.open().read()
                    except ReconError as err:
                        seen[e.name] = str(err)
                else:
                    seen[e.name] = e.kind
        assert sorted(seen) == sorted(n.rstrip("/") for n in listed), fmt
        assert seen["pkg/mod.py"] == b"A = 1\n" * 1000
        assert seen["pkg/after.py"] == b"B = 2\n"  # the walk got past the sparse map intact
        assert "GNU sparse" in str(seen["pkg/holes.bin"]), fmt


# --- headers recon must refuse -----------------------------------------------------------

def _one_file(data: bytes = b"hello\n", name: str = "a.py") -> bytearray:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        ti = tarfile.TarInfo(name)
        ti.size = len(data)
        tf.addfile(ti, io.BytesIO(data))
    return bytearray(buf.getvalue())


def _rechecksum(hdr: bytearray) -> None:
    hdr[148:156] = b" " * 8
    hdr[148:155] = f"{sum(hdr[:512]):06o}\0".encode()


def _walk(raw: bytes, *, seekable: bool = True, max_size: int | None = None) -> list[tuple[str, bytes]]:
    out = []
    for e in tar_members(io.BytesIO(raw), where="layer 7 (sha256:abc)", seekable=seekable, max_size=max_size):
        out.append((e.name, e.open().read() if e.kind == "file" and e.open else b""))
    return out


def test_base256_size_is_read(tmp_path: Path) -> None:
    """GNU base-256 numbers (used for members over 8 GiB), checked on a small one."""
    raw = _one_file(b"x" * 700)
    raw[124:136] = b"\x80" + (700).to_bytes(11, "big")
    _rechecksum(raw)
    assert _walk(bytes(raw)) == [("a.py", b"x" * 700)]


def test_old_v7_directory_with_trailing_slash() -> None:
    raw = _one_file(b"", name="olddir/")
    raw[156:157] = b"\0"
    _rechecksum(raw)
    got = list(tar_members(io.BytesIO(bytes(raw)), where="t", seekable=True))
    assert [(e.name, e.kind) for e in got] == [("olddir", "dir")]


def test_bad_checksum_names_layer_and_offset() -> None:
    raw = _one_file() + _one_file(name="b.py")
    raw[512 * 2 + 0] ^= 0x01  # second header's first name byte: "a.py" data block then header at 1024
    with pytest.raises(ReconError, match=r"layer 7 \(sha256:abc\): bad tar header checksum at offset 1024"):
        _walk(bytes(raw))


@pytest.mark.parametrize("seekable", [True, False])
def test_truncated_data_is_an_error_not_a_short_file(seekable: bool) -> None:
    raw = _one_file(b"y" * 5000) + _one_file(name="b.py")
    cut = bytes(raw[: 512 + 3000])
    with pytest.raises(ReconError, match=r"layer ends inside 'a.py' \(truncated\)"):
        _walk(cut, seekable=seekable)
    with pytest.raises(ReconError, match=r"layer ends inside 'a.py' \(truncated\)"):
        list(tar_members(io.BytesIO(cut), where="t", seekable=seekable))  # skipped, not read


def test_truncated_header() -> None:
    with pytest.raises(ReconError, match="ends inside a tar header at offset 0"):
        _walk(bytes(_one_file()[:300]))


def test_size_cap_refuses_before_reading() -> None:
    """A header claiming a terabyte is refused at once (a bomb), not after decompressing it."""
    raw = _one_file(b"z")
    raw[124:136] = b"\x80" + (1 << 40).to_bytes(11, "big")
    _rechecksum(raw)
    with pytest.raises(UnsafeArchiveError, match="decompression bomb"):
        list(tar_members(io.BytesIO(bytes(raw)), where="t", seekable=False, max_size=1 << 30))


def test_oversized_pax_header_is_refused() -> None:
    raw = _one_file()
    raw[156:157] = b"x"
    raw[124:136] = f"{(2 << 20):011o}\0".encode()
    _rechecksum(raw)
    with pytest.raises(UnsafeArchiveError, match="PAX header of 2097152 bytes"):
        _walk(bytes(raw[:512]) + bytes(2 << 20))


def test_negative_base256_size_is_refused() -> None:
    raw = _one_file()
    raw[124:136] = b"\xff" * 12
    _rechecksum(raw)
    with pytest.raises(ReconError, match="negative size"):
        _walk(bytes(raw))


def test_missing_end_blocks_are_tolerated() -> None:
    """Some writers stop after the last member; tarfile and Go's reader accept that too."""
    raw = _one_file()
    assert _walk(bytes(raw[: 1024])) == [("a.py", b"hello\n")]


def test_negative_pax_size_is_refused() -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        ti = tarfile.TarInfo("a.py")
        ti.size = 1
        ti.pax_headers = {"size": "-5"}
        tf.addfile(ti, io.BytesIO(b"x"))
    with pytest.raises(ReconError, match="bad PAX size record '-5'"):
        _walk(buf.getvalue())


def test_a_walk_stopped_early_stops_its_read_ahead_thread(tmp_path: Path) -> None:
    """A squash that stops reading a compressed layer (an error, a hardlink found) must not
    leave the decompression thread blocked on its queue, holding 16 MiB and the file."""
    import threading

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name in ("a.py", "big.bin"):  # 48 MiB: more than the 16 blocks the thread may queue
            data = b"x = 1\n" if name == "a.py" else bytes(48 << 20)
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    gz = tmp_path / "l.tar.gz"
    gz.write_bytes(gzip.compress(buf.getvalue(), compresslevel=1))
    with open(gz, "rb") as fh:
        walk = tar_entries(fh, where="t")
        next(walk)
        assert any(t.name == "recon-readahead" for t in threading.enumerate())
        walk.close()
    assert not any(t.name == "recon-readahead" and t.is_alive() for t in threading.enumerate())
