"""``recon snapshot verify``: a snapshot's files against its own manifest.

The real vLLM release is copied (the shared cached snapshot is never touched)
and then edited the ways investigators edit snapshots: a print added, a file
deleted, a scratch file left behind, a link pointed elsewhere, a file replaced
by a link. Each edit must be named, and nothing else.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from recon import Snapshot, verify_snapshot
from recon.snapshots.take import take_snapshot
from tests.kit import run_cli


@pytest.fixture
def vllm_copy(vllm_latest: Snapshot, tmp_path: Path) -> Snapshot:
    dest = tmp_path / "snaps" / "vllm-copy"
    shutil.copytree(vllm_latest.root, dest, symlinks=True)
    return Snapshot.open(dest)


def test_an_untouched_release_verifies(vllm_copy: Snapshot) -> None:
    found = verify_snapshot(vllm_copy)
    assert found.ok, found.problems()[:5]
    # every recorded file was hashed; binaries the snapshot skipped are not expected on disk
    assert found.checked == len(vllm_copy.files) > 3000
    assert vllm_copy.manifest.skipped, "the wheel's compiled files are listed as skipped"


def test_each_kind_of_edit_is_named(vllm_copy: Snapshot) -> None:
    src = vllm_copy.src
    with open(src / "vllm/envs.py", "a") as fh:  # the classic: a debugging print
        fh.write("\nprint('debug')\n")
    os.remove(src / "vllm/config/compilation.py")
    (src / "vllm/scratch.py").write_text("x = 1\n")
    (src / "vllm/__pycache__").mkdir(exist_ok=True)
    (src / "vllm/__pycache__/envs.cpython-311.pyc").write_bytes(b"\0")
    # same size, one byte changed: the size alone would not catch it
    version = src / "vllm/version.py"
    text = version.read_bytes()
    version.write_bytes(text[:-2] + bytes([text[-2] ^ 1]) + text[-1:])
    os.remove(src / "vllm/logger.py")
    os.symlink("envs.py", src / "vllm/logger.py")

    found = verify_snapshot(vllm_copy)
    assert not found.ok
    assert found.modified == ["vllm/envs.py", "vllm/version.py"]
    assert found.missing == ["vllm/config/compilation.py"]
    assert found.extra == ["vllm/__pycache__/envs.cpython-311.pyc", "vllm/scratch.py"]
    assert found.changed_kind == ["vllm/logger.py"]
    assert found.retargeted == []


def test_a_link_pointed_elsewhere(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "demo").mkdir(parents=True)
    (site / "demo/__init__.py").write_text("")
    (site / "demo/real.py").write_text("A = 1\n")
    (site / "demo/other.py").write_text("A = 2\n")
    os.symlink("real.py", site / "demo/alias.py")
    snap = take_snapshot(f"dir:{site}", out=tmp_path / "out", package="demo")
    assert verify_snapshot(snap).ok
    os.remove(snap.src / "demo/alias.py")
    os.symlink("other.py", snap.src / "demo/alias.py")
    found = verify_snapshot(snap)
    assert found.retargeted == ["demo/alias.py"]
    assert found.modified == found.missing == found.extra == found.changed_kind == []


def test_cli_exit_status_and_json(vllm_copy: Snapshot, capsys: pytest.CaptureFixture[str]) -> None:
    base = str(vllm_copy.root.parent)
    code, out, _ = run_cli(capsys, "snapshot", "verify", "vllm-copy", "-o", base)
    assert code == 0
    assert f"all {len(vllm_copy.files)} files match" in out
    (vllm_copy.src / "vllm/scratch.py").write_text("x = 1\n")
    code, out, _ = run_cli(capsys, "snapshot", "verify", "vllm-copy", "-o", base, "--json")
    assert code == 1
    assert json.loads(out)["extra"] == ["vllm/scratch.py"]
    assert json.loads(out)["ok"] is False
    code, out, err = run_cli(capsys, "snapshot", "verify", "no-such-snapshot", "-o", base)
    assert code != 0 and "no-such-snapshot" in err and len(err.strip().splitlines()) == 1
