"""Squash and locate edge cases worked out by hand, plus the CLI's face for bad input.

Each image is a real ``docker save`` archive built here; the expected trees
follow from the OCI layer rules: only an entry named exactly ``.wh..wh..opq``
makes a folder opaque (anything else starting ``.wh.`` whites out the one
name after the prefix), a whiteout with nothing below it removes nothing and
is never written, links are resolved against the image root with loops and
long chains refused.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from recon.errors import ReconError
from recon.snapshots.take import take_snapshot
from tests.imagekit import (
    SITE,
    LayerBuilder,
    snapshot_fingerprint,
    tree_fingerprint,
    write_docker_archive,
)
from tests.kit import run_cli

V = f"{SITE}/vllm"


def _archive(d: Path, *layers: LayerBuilder) -> Path:
    return write_docker_archive(d / "img.tar", [lb.close() for lb in layers])


def _umoci(archive: Path, d: Path) -> dict[str, tuple[str, str]]:
    """The vllm folder as skopeo + umoci see the same archive: the second opinion."""
    for tool in ("skopeo", "umoci"):
        if shutil.which(tool) is None:
            if os.environ.get("CI"):
                pytest.fail(f"{tool} is required in CI (.ci/run installs it)")
            pytest.skip(f"{tool} not installed")
    subprocess.run(["skopeo", "copy", "-q", f"docker-archive:{archive}", f"oci:{d}/oci:x"], check=True)
    subprocess.run(["umoci", "unpack", "--image", f"{d}/oci:x", str(d / "bundle")], check=True,
                   capture_output=True)
    return tree_fingerprint(d / "bundle/rootfs" / V)


def _base(d: Path) -> LayerBuilder:
    return (LayerBuilder(d / "l0.tar").file("usr/local/bin/python3", b"#!\n", mode=0o755)
            .file(f"{V}/__init__.py", b"__version__ = '1.0'\n")
            .file(f"{V}/sub/keep.py", b"KEEP = 1\n")
            .file(f"{V}/sub/other.py", b"OTHER = 1\n"))


def test_only_the_exact_opaque_marker_makes_a_folder_opaque(tmp_path: Path) -> None:
    top = (LayerBuilder(tmp_path / "l1.tar").file(f"{V}/sub/.wh..wh..opq2", b"")  # near miss
           .whiteout(f"{V}/sub/other.py"))
    archive = _archive(tmp_path, _base(tmp_path), top)
    snap = take_snapshot(f"docker-archive:{archive}", out=tmp_path / "o")
    assert snapshot_fingerprint(snap) == _umoci(archive, tmp_path)
    # the near miss whites out a name (".wh..opq2") that is not there; the folder is not emptied,
    # only the one file whited out by name goes
    assert set(snap.files) == {"vllm/__init__.py", "vllm/sub/keep.py"}
    assert not list(snap.src.rglob(".wh.*"))


def test_the_exact_marker_empties_the_folder_below(tmp_path: Path) -> None:
    top = (LayerBuilder(tmp_path / "l1.tar").file(f"{V}/sub/.wh..wh..opq", b"")
           .file(f"{V}/sub/new.py", b"NEW = 1\n"))
    snap = take_snapshot(f"docker-archive:{_archive(tmp_path, _base(tmp_path), top)}", out=tmp_path / "o")
    assert set(snap.files) == {"vllm/__init__.py", "vllm/sub/new.py"}


def test_whiteouts_in_the_base_layer_are_not_carried(tmp_path: Path) -> None:
    """A whiteout in the lowest layer hides nothing: it is neither written nor a file."""
    base = _base(tmp_path).file(f"{V}/.wh.ghost.py", b"").file(f"{V}/sub/.wh..wh..opq", b"")
    archive = _archive(tmp_path, base)
    snap = take_snapshot(f"docker-archive:{archive}", out=tmp_path / "o")
    assert set(snap.files) == {"vllm/__init__.py", "vllm/sub/keep.py", "vllm/sub/other.py"}
    assert snapshot_fingerprint(snap) == _umoci(archive, tmp_path)
    assert not (snap.src / "vllm/.wh.ghost.py").exists()


def test_a_package_folder_link_loop_is_one_clear_error(tmp_path: Path) -> None:
    base = (LayerBuilder(tmp_path / "l0.tar").file("usr/local/bin/python3", b"#!\n", mode=0o755)
            .symlink(f"{V}", "/opt/a").symlink("opt/a", "/opt/b").symlink("opt/b", f"/{V}"))
    out = tmp_path / "o"
    with pytest.raises(ReconError, match=r"too many symlink hops \(a loop\?\) resolving /.*vllm"):
        take_snapshot(f"docker-archive:{_archive(tmp_path, base)}", out=out)
    assert list(out.iterdir()) == []


def test_a_long_chain_of_links_is_followed_up_to_the_cap(tmp_path: Path) -> None:
    def chain(n: int) -> Path:
        d = tmp_path / f"chain{n}"
        d.mkdir()
        lb = LayerBuilder(d / "l0.tar").file("usr/local/bin/python3", b"#!\n", mode=0o755)
        lb.file("opt/real/vllm/__init__.py", b"__version__ = '2.0'\n").symlink(f"{V}", "/opt/l0/vllm")
        for i in range(n):  # /opt/l{i} -> /opt/l{i+1}, the last one -> /opt/real
            lb.symlink(f"opt/l{i}", f"/opt/l{i + 1}" if i + 1 < n else "/opt/real")
        return _archive(d, lb)

    snap = take_snapshot(f"docker-archive:{chain(10)}", out=tmp_path / "o")
    assert snap.manifest.package.real_path == "/opt/real/vllm" and snap.version == "2.0"
    with pytest.raises(ReconError, match="too many symlink hops"):
        take_snapshot(f"docker-archive:{chain(60)}", out=tmp_path / "o2")


def test_version_from_an_egg_info(tmp_path: Path) -> None:
    """``setup.py develop``/old installs leave PKG-INFO in an .egg-info folder, not a dist-info."""
    base = (LayerBuilder(tmp_path / "l0.tar").file("usr/local/bin/python3", b"#!\n", mode=0o755)
            .file(f"{V}/__init__.py", b"")
            .file(f"{SITE}/vllm-0.4.0.egg-info/PKG-INFO", b"Metadata-Version: 2.1\nName: vllm\nVersion: 0.4.0\n"))
    snap = take_snapshot(f"docker-archive:{_archive(tmp_path, base)}", out=tmp_path / "o")
    assert snap.version == "0.4.0"
    assert {"name": "vllm", "version": "0.4.0", "location": f"/{SITE}", "layer": 0} in snap.manifest.distributions


def test_cli_hostile_archive_names_layer_and_entry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    top = LayerBuilder(tmp_path / "l1.tar").file(f"{V}/../../../../../../../../tmp/pwn.py", b"x")
    archive = _archive(tmp_path, _base(tmp_path), top)
    digest = hashlib.sha256((tmp_path / "l1.tar").read_bytes()).hexdigest()
    out = tmp_path / "o"
    code, stdout, err = run_cli(capsys, "snapshot", f"docker-archive:{archive}", "-o", str(out))
    assert code == 3
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("recon: error: layer 1 (sha256:" + digest[:12])
    assert "path traversal" in lines[0] and "tmp/pwn.py" in lines[0]
    assert not out.exists() or list(out.iterdir()) == []


def test_cli_size_caps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    top = LayerBuilder(tmp_path / "l1.tar").file(f"{V}/big.py", b"#" * 5000)
    archive = _archive(tmp_path, _base(tmp_path), top)
    out = tmp_path / "o"
    code, _, err = run_cli(capsys, "snapshot", f"docker-archive:{archive}", "-o", str(out),
                           "--max-file-size", "4K")
    assert code == 3 and "big.py" in err and len(err.strip().splitlines()) == 1
    assert not out.exists() or list(out.iterdir()) == []
    code, _, err = run_cli(capsys, "snapshot", f"docker-archive:{archive}", "-o", str(out),
                           "--max-file-size", "5K")  # 5000 bytes fit under 5 KiB
    assert code == 0, err
    code, _, err = run_cli(capsys, "snapshot", f"docker-archive:{archive}", "-o", str(out),
                           "--max-file-size", "lots")
    assert code == 2 and "'lots' is not a size" in err and "--max-file-size" in err
    assert "Traceback" not in err


def test_cli_no_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A socket nobody listens on: a real connection failure, not a mock."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    code, _, err = run_cli(capsys, "snapshot", "docker:vllm/vllm-openai:latest", "-o", str(tmp_path / "o"))
    assert code == 2
    assert err.strip().splitlines() == [
        f"recon: error: no Docker engine answers at unix://{tmp_path}/no-engine.sock (start dockerd or set "
        "DOCKER_HOST); docker-archive:/oci: sources need no engine"]


def test_progress_follows_each_layer_in_bytes(tmp_path: Path) -> None:
    """What the per-layer progress bars are drawn from: every layer starts, advances in bytes
    and ends having read at least all its members (the reader stops at the end-of-archive
    marker, before the tar's zero padding) and at most the layer's size."""
    import tarfile

    top = LayerBuilder(tmp_path / "l1.tar")
    for i in range(600):  # enough entries for several progress updates
        top.file(f"{V}/gen/m{i}.py", b"x = %d\n" % i)
    archive = _archive(tmp_path, _base(tmp_path), top)
    events: dict[int, list[tuple[str, int]]] = {}
    take_snapshot(f"docker-archive:{archive}", out=tmp_path / "o",
                  progress=lambda layer, ev: events.setdefault(layer.index, []).append((ev, layer.bytes_read)))
    assert sorted(events) == [0, 1]
    for index in (0, 1):
        evs = events[index]
        assert evs[0][0] == "start" and evs[-1][0] == "done"
        seen = [b for _, b in evs]
        assert seen == sorted(seen)
        with tarfile.open(tmp_path / f"l{index}.tar") as tf:
            last = tf.getmembers()[-1]
        end_of_members = last.offset_data + -(-last.size // 512) * 512
        assert end_of_members <= evs[-1][1] <= (tmp_path / f"l{index}.tar").stat().st_size
    assert sum(ev == "advance" for ev, _ in events[1]) >= 2


def test_ls_and_show_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    top = LayerBuilder(tmp_path / "l1.tar").file(f"{V}/hotfix.py", b"FIX = 1\n")
    archive = _archive(tmp_path, _base(tmp_path), top)
    out = tmp_path / "o"
    take_snapshot(f"docker-archive:{archive}", out=out, name="img")
    code, text, _ = run_cli(capsys, "snapshot", "ls", "-o", str(out))
    assert code == 0
    row = next(line for line in text.splitlines() if "img" in line)
    assert [c.strip() for c in row.strip("│ ").split("│")][:4] == ["img", "vllm", "1.0", "4"]
    code, text, _ = run_cli(capsys, "snapshot", "show", "img", "-o", str(out))
    assert code == 0
    assert f"vllm 1.0 at /{V}" in text
    # the layers table: three files from layer 0, the hot-fix from layer 1
    lines = text.splitlines()
    below = lines[next(i for i, line in enumerate(lines) if "package files" in line) + 1:]
    counts = [line.split("│")[-2].strip() for line in below if "sha256:" in line]
    assert counts == ["3", "1"]
