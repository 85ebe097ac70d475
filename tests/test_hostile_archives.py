"""A corpus of hostile and broken archives: one clear error each, nothing written outside.

Each case is a real ``docker save``-format archive whose base layer holds a
small ``vllm`` package and whose second layer does one hostile or broken
thing. After the failure the output folder must hold nothing (no snapshot,
no partial folder) and the decoy folder outside must be untouched.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from recon.acquire.layers import CaptureLimits
from recon.errors import ReconError, UnsafeArchiveError
from recon.snapshots.take import take_snapshot
from tests.imagekit import SITE, LayerBuilder, write_docker_archive

V = f"{SITE}/vllm"


def _base(d: Path) -> Path:
    return (LayerBuilder(d / "base.tar")
            .file("usr/local/bin/python3", b"#!\n", mode=0o755)
            .file(f"{V}/__init__.py", b"__version__ = '9.9.9'\n")
            .file(f"{V}/envs.py", b"X = 1\n")
            .close())


def _run(tmp_path: Path, build: Callable[[LayerBuilder], object], *, limits: CaptureLimits | None = None,
         raw: bytes | None = None, compress: bool = False) -> tuple[Exception, Path, Path]:
    src = tmp_path / "src"
    src.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    top = LayerBuilder(src / "top.tar")
    build(top)
    top.close()
    archive = write_docker_archive(src / "img.tar", [_base(src), src / "top.tar"], compress=compress,
                                   raw_layers={1: raw} if raw is not None else None)
    out = tmp_path / "out"
    with pytest.raises(ReconError) as info:
        take_snapshot(f"docker-archive:{archive}", out=out, limits=limits)
    assert list(out.iterdir()) == [], "a failed snapshot left something in the output folder"
    assert list(outside.iterdir()) == [], "something was written outside the output folder"
    assert "\n" not in str(info.value)
    return info.value, out, outside


def test_path_traversal(tmp_path: Path) -> None:
    err, *_ = _run(tmp_path, lambda t: t.file(f"{V}/../../../../../../../outside/pwn.py", b"x"))
    assert isinstance(err, UnsafeArchiveError)
    assert "path traversal" in str(err) and "layer 1" in str(err)


def test_absolute_path(tmp_path: Path) -> None:
    err, *_ = _run(tmp_path, lambda t: t.file(f"{tmp_path}/outside/pwn.py", b"x"))
    assert "absolute path" in str(err)


def test_symlink_then_entry_through_it(tmp_path: Path) -> None:
    def build(t: LayerBuilder) -> None:
        t.symlink(f"{V}/evil", str(tmp_path / "outside"))
        t.file(f"{V}/evil/pwn.py", b"owned = True\n")

    err, *_ = _run(tmp_path, build)
    assert "goes through the symlink 'evil'" in str(err)
    assert f"{V}/evil/pwn.py" in str(err)


def test_relative_symlink_escape(tmp_path: Path) -> None:
    def build(t: LayerBuilder) -> None:
        t.symlink(f"{V}/up", "../" * 12 + str(tmp_path / "outside").lstrip("/"))
        t.file(f"{V}/up/pwn.py", b"owned = True\n")

    err, *_ = _run(tmp_path, build)
    assert "goes through the symlink" in str(err)


def test_symlink_replacing_a_directory_in_the_same_layer(tmp_path: Path) -> None:
    """Duplicate names: a directory, then a symlink of the same name, then a file through it."""
    def build(t: LayerBuilder) -> None:
        t.dir(f"{V}/sub")
        t.symlink(f"{V}/sub", str(tmp_path / "outside"))
        t.file(f"{V}/sub/pwn.py", b"owned = True\n")

    err, *_ = _run(tmp_path, build)
    assert "goes through the symlink 'sub'" in str(err)


def test_hardlink_escape(tmp_path: Path) -> None:
    err, *_ = _run(tmp_path, lambda t: t.hardlink(f"{V}/hl.py", "../../../../../../etc/passwd"))
    assert "path traversal" in str(err)


def test_hardlink_to_a_target_outside_the_layer(tmp_path: Path) -> None:
    err, *_ = _run(tmp_path, lambda t: t.hardlink(f"{V}/hl.py", "etc/shadow"))
    assert "points to 'etc/shadow', which is not in the same layer" in str(err)


@pytest.mark.parametrize("kind", ["chardev", "fifo"])
def test_device_files_in_the_package(tmp_path: Path, kind: str) -> None:
    err, *_ = _run(tmp_path, lambda t: getattr(t, kind)(f"{V}/{kind}"))
    assert "device file, FIFO or socket" in str(err)


def test_entry_over_the_size_cap(tmp_path: Path) -> None:
    err, *_ = _run(tmp_path, lambda t: t.file(f"{V}/big.py", b"#" * (2 << 20)),
                   limits=CaptureLimits(max_file_size=1 << 20))
    assert "size cap" in str(err) and "--max-file-size" in str(err)


def test_total_over_the_cap(tmp_path: Path) -> None:
    def build(t: LayerBuilder) -> None:
        for i in range(5):
            t.file(f"{V}/part{i}.py", b"#" * 300_000)

    err, *_ = _run(tmp_path, build, limits=CaptureLimits(max_total_size=1 << 20))
    assert "--max-total-size" in str(err)


def test_decompression_bomb(tmp_path: Path) -> None:
    """64 MiB of zeros gzip to ~64 KiB: past a 16 MiB layer cap it must stop, not churn."""
    bomb_tar = tmp_path / "bomb.tar"
    t = LayerBuilder(bomb_tar)
    t.file("zeros.bin", bytes(64 << 20))
    t.close()
    raw = gzip.compress(bomb_tar.read_bytes(), compresslevel=9)
    os.unlink(bomb_tar)
    assert len(raw) < 1 << 20
    err, *_ = _run(tmp_path, lambda t: None, raw=raw, limits=CaptureLimits(max_layer_size=16 << 20))
    assert "decompression bomb" in str(err)


def _truncated_gzip_layer(tmp_path: Path) -> bytes:
    """Half of a gzip layer holding 50 package files of random bytes."""
    full = tmp_path / "full.tar"
    t = LayerBuilder(full)
    for i in range(50):
        t.file(f"{V}/mod{i}.py", os.urandom(20_000))
    t.close()
    raw = gzip.compress(full.read_bytes())
    return raw[: len(raw) // 2]


def test_truncated_gzip_layer(tmp_path: Path) -> None:
    err, *_ = _run(tmp_path, lambda t: None, raw=_truncated_gzip_layer(tmp_path))
    assert "truncated or corrupt" in str(err)
    assert "layer 1" in str(err)


def test_failing_upper_layer_stops_lower_layers_scanned_side_by_side(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two compressed layers scanned at once: the base layer waits for the top one before it
    writes; when the top one turns out truncated, the wait ends and the top's error is raised."""
    import time

    monkeypatch.setenv("RECON_LAYER_WORKERS", "2")
    raw = _truncated_gzip_layer(tmp_path)
    start = time.monotonic()
    err, *_ = _run(tmp_path, lambda t: None, raw=raw, compress=True)
    assert "truncated or corrupt" in str(err) and "layer 1" in str(err)
    assert time.monotonic() - start < 30


def test_layer_that_is_not_a_tar(tmp_path: Path) -> None:
    err, *_ = _run(tmp_path, lambda t: None, raw=b"this is not a tar archive at all" * 40)
    assert "layer 1" in str(err)


def test_duplicate_entries_last_one_wins(tmp_path: Path) -> None:
    """Benign duplicates behave like the engine: the later entry replaces the earlier one."""
    src = tmp_path / "src"
    src.mkdir()
    top = LayerBuilder(src / "top.tar")
    top.file(f"{V}/dup.py", b"first\n").symlink(f"{V}/dup.py", "/etc/passwd").file(f"{V}/dup.py", b"last\n")
    top.close()
    archive = write_docker_archive(src / "img.tar", [_base(src), src / "top.tar"])
    snap = take_snapshot(f"docker-archive:{archive}", out=tmp_path / "out")
    assert (snap.src / "vllm/dup.py").read_bytes() == b"last\n"
    assert snap.manifest.stats["duplicate_entries"] == 2


def test_missing_archive(tmp_path: Path) -> None:
    with pytest.raises(ReconError, match="archive not found"):
        take_snapshot(f"docker-archive:{tmp_path}/nope.tar", out=tmp_path / "out")


def test_unreadable_archive(tmp_path: Path) -> None:
    bad = tmp_path / "bad.tar"
    bad.write_bytes(b"\x00garbage" * 10)
    with pytest.raises(ReconError, match="no manifest.json|not a readable image archive"):
        take_snapshot(f"docker-archive:{bad}", out=tmp_path / "out")


def test_missing_package_lists_what_is_there(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    layer = LayerBuilder(src / "l.tar").file(f"{SITE}/torch/__init__.py", b"").file(
        f"{SITE}/transformers/__init__.py", b"").close()
    archive = write_docker_archive(src / "img.tar", [layer])
    with pytest.raises(ReconError, match=r"neither vllm nor sglang found .*torch, transformers"):
        take_snapshot(f"docker-archive:{archive}", out=tmp_path / "out")
    with pytest.raises(ReconError, match=r"package 'flashinfer' not found"):
        take_snapshot(f"docker-archive:{archive}", out=tmp_path / "out", package="flashinfer")


def test_unknown_scheme() -> None:
    with pytest.raises(ReconError, match="unknown SOURCE"):
        take_snapshot("ftp://example/image")
