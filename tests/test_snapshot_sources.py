"""Wheel, pip and folder sources; the snapshot CLI's output and errors."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from recon.acquire.sources.pip import fetch_wheel
from recon.errors import ReconError
from recon.snapshots.model import Snapshot, list_snapshots
from recon.snapshots.take import take_snapshot


@pytest.mark.wheels  # real releases from PyPI
def test_pip_snapshot_matches_the_wheel(tmp_path: Path) -> None:
    whl = fetch_wheel("sglang==0.5.23")
    snap = take_snapshot("pip:sglang==0.5.23", out=tmp_path)
    with zipfile.ZipFile(whl) as zf:
        members = {i.filename: i for i in zf.infolist() if i.filename.startswith("sglang/") and not i.is_dir()}
        # Compiled artefacts, by name or by content (an ELF executable with no suffix).
        binaries = {n for n in members if n.endswith(".so") or ".so." in n
                    or zf.open(n).read(4) == b"\x7fELF"}
        assert set(snap.files) == set(members) - binaries
        assert set(snap.manifest.skipped) == binaries
        for rel in ("sglang/srt/layers/attention/hybrid_linear_attn_backend.py", "sglang/version.py"):
            assert snap.files[rel].sha256 == hashlib.sha256(zf.read(rel)).hexdigest()
            assert (snap.src / rel).read_bytes() == zf.read(rel)
    assert snap.version == "0.5.23"
    assert snap.manifest.source["digest"] == "sha256:" + hashlib.sha256(whl.read_bytes()).hexdigest()
    assert snap.name == "sglang-0.5.23"


@pytest.mark.wheels  # real releases from PyPI
def test_include_glob_keeps_a_subset(tmp_path: Path) -> None:
    snap = take_snapshot("pip:vllm==0.33.0", out=tmp_path, include=["vllm/config/*.py"])
    assert snap.files and all(p.startswith("vllm/config/") and p.endswith(".py") for p in snap.files)
    assert "vllm/config/compilation.py" in snap.files


def test_wheel_with_zip_slip_member(tmp_path: Path) -> None:
    whl = tmp_path / "evil-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as zf:
        zf.writestr("vllm/__init__.py", "")
        zf.writestr("vllm/../../../../evil.py", "owned = True")
    with pytest.raises(ReconError, match="path traversal"):
        take_snapshot(f"wheel:{whl}", out=tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []


def test_dir_source_lists_links_out_of_the_package_and_never_writes_them(tmp_path: Path) -> None:
    site = tmp_path / "site"
    pkg = site / "vllm"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("__version__ = '1.2.3'\n")
    (pkg / "a.py").write_text("A = 1\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("host file that must not be copied")
    os.symlink(secret, pkg / "leak.py")
    snap = take_snapshot(f"dir:{site}", out=tmp_path / "out")
    assert snap.version == "1.2.3"
    # a link leaving the package is recorded with its target, never written: no later reader of
    # the snapshot can reach the host file through it
    assert "vllm/leak.py" not in snap.files
    assert snap.manifest.skipped["vllm/leak.py"].target == str(secret)
    assert snap.manifest.skipped["vllm/leak.py"].reason == "points outside the package"
    assert not (snap.src / "vllm/leak.py").is_symlink() and not (snap.src / "vllm/leak.py").exists()
    assert snap.files["vllm/a.py"].sha256 == hashlib.sha256(b"A = 1\n").hexdigest()
    # the package folder itself works too
    snap2 = take_snapshot(f"dir:{pkg}", out=tmp_path / "out", name="again")
    assert set(snap2.files) == set(snap.files)
    assert [s.name for s in list_snapshots(tmp_path / "out")] == ["again", "vllm-1.2.3-dir"]


def test_existing_snapshot_is_not_replaced_without_force(tmp_path: Path) -> None:
    site = tmp_path / "site" / "vllm"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("")
    take_snapshot(f"dir:{site.parent}", out=tmp_path / "out", name="s")
    with pytest.raises(ReconError, match="already exists"):
        take_snapshot(f"dir:{site.parent}", out=tmp_path / "out", name="s")
    take_snapshot(f"dir:{site.parent}", out=tmp_path / "out", name="s", force=True)
    assert Snapshot.open(tmp_path / "out" / "s").name == "s"


def test_the_api_returns_the_same_snapshot_when_run_again(tmp_path: Path) -> None:
    """``recon.snapshot(...)`` twice (a notebook cell run again) gives the snapshot it wrote;
    a changed source under the same name is refused as before, and nothing half-written stays."""
    import recon

    site = tmp_path / "site" / "vllm"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("A = 1\n")
    first = recon.snapshot(f"dir:{site.parent}", out=tmp_path / "out", name="s")
    again = recon.snapshot(f"dir:{site.parent}", out=tmp_path / "out", name="s")
    assert again.root == first.root and again.manifest.created == first.manifest.created
    (site / "__init__.py").write_text("A = 2\n")
    with pytest.raises(ReconError, match="already exists"):
        recon.snapshot(f"dir:{site.parent}", out=tmp_path / "out", name="s")
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["s"]
    assert Snapshot.open(tmp_path / "out" / "s").files["vllm/__init__.py"].sha256 == \
        hashlib.sha256(b"A = 1\n").hexdigest()


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "recon", *args], capture_output=True, text=True, cwd=cwd)


def test_cli_json_and_errors(tmp_path: Path) -> None:
    site = tmp_path / "site" / "sglang"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("__version__ = '0.0.1'\n")
    res = _cli("snapshot", f"dir:{site.parent}", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["package"] == "sglang" and data["files"] == 1
    assert (tmp_path / "snapshots" / data["name"] / "manifest.json").is_file()
    listed = json.loads(_cli("snapshot", "ls", "--json", cwd=tmp_path).stdout)
    assert [s["name"] for s in listed] == [data["name"]]
    shown = json.loads(_cli("snapshot", "show", data["name"], "--json", cwd=tmp_path).stdout)
    assert shown["files"]["sglang/__init__.py"]["size"] == len("__version__ = '0.0.1'\n")
    bad = _cli("snapshot", "docker-archive:/nonexistent.tar", cwd=tmp_path)
    assert bad.returncode != 0
    assert bad.stderr.strip().count("\n") == 0
    assert bad.stderr.startswith("recon: error: archive not found")


def _read_until(fd: int, marker: bytes, seen: bytearray, timeout: float = 60) -> None:
    import select
    import time

    deadline = time.monotonic() + timeout
    while marker not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"never saw {marker!r}; got {bytes(seen)!r}"
        if select.select([fd], [], [], left)[0]:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the other side closed
                chunk = b""
            assert chunk, f"output ended before {marker!r}; got {bytes(seen)!r}"
            seen += chunk


def test_missing_package_asks_on_a_terminal(tmp_path: Path) -> None:
    """Neither vllm nor sglang: on a real terminal (a pty) recon lists what is there and asks;
    a wrong answer is refused, a right one snapshots that package."""
    import pty

    site = tmp_path / "site"
    for pkg in ("torch", "transformers"):
        (site / pkg).mkdir(parents=True)
        (site / pkg / "__init__.py").write_text(f"__version__ = '1.{len(pkg)}'\n")
    out = tmp_path / "out"
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "recon", "snapshot", f"dir:{site}", "-o", str(out)],
                            stdin=slave, stdout=slave, stderr=slave, cwd=tmp_path,
                            env={**os.environ, "COLUMNS": "200", "TERM": "xterm"})
    os.close(slave)
    seen = bytearray()
    try:
        _read_until(master, b"package to snapshot", seen)
        assert b"neither vllm nor sglang found" in seen and b"torch, transformers" in seen
        os.write(master, b"tensorflow\n")
        _read_until(master, b"is not one of the packages found", seen)
        os.write(master, b"torch\n")
        assert proc.wait(timeout=60) == 0, bytes(seen)
    finally:
        proc.kill()
        os.close(master)
    (snap,) = list_snapshots(out)
    assert snap.package == "torch" and snap.version == "1.5"
    assert set(snap.files) == {"torch/__init__.py"}
