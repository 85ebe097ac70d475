"""Hostile slice code is contained: a clear error for the caller, the caller unharmed.

The attacks live in tests/data/slice/hostilepkg (a package snapshotted with
``dir:``), so the run executes them exactly as it would engine code.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from recon.slicing import RunFailed, run_function
from recon.snapshots.model import Snapshot
from recon.snapshots.take import take_snapshot

DATA = Path(__file__).parent / "data" / "slice"
ATTACKS = "hostilepkg.attacks"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Snapshot:
    out = tmp_path_factory.mktemp("hostile-snap")
    return take_snapshot(f"dir:{DATA / 'hostilepkg'}", package="hostilepkg", out=out)


def _scratch_dirs() -> set[str]:
    import tempfile

    base = Path(tempfile.gettempdir())
    return {p.name for p in base.glob("recon-run-*")}


def test_infinite_loop_times_out_naming_the_line(hostile: Snapshot) -> None:
    start = time.monotonic()
    with pytest.raises(RunFailed, match=r"run timed out after 2 s at hostilepkg/attacks.py:1[67]"):
        run_function(hostile, f"{ATTACKS}:spin", timeout=2)
    assert time.monotonic() - start < 15


def test_memory_hog_hits_the_limit(hostile: Snapshot) -> None:
    with pytest.raises(RunFailed, match=r"exceeded its memory limit \(512 MiB\) at "
                                        r"hostilepkg/attacks.py:24"):
        run_function(hostile, f"{ATTACKS}:hog", memory_mb=512, timeout=30)


def test_os_exit_is_reported(hostile: Snapshot) -> None:
    with pytest.raises(RunFailed, match="exited with code 7 before reporting"):
        run_function(hostile, f"{ATTACKS}:exit_now")


def test_writes_outside_scratch_are_refused(hostile: Snapshot, tmp_path: Path) -> None:
    target = tmp_path / "pwned.txt"
    before = _scratch_dirs()
    for fn in ("write_outside", "write_outside_quietly"):  # the second one hides the failure
        with pytest.raises(RunFailed, match=r"tried a write outside the scratch folder .*pwned"
                                            r".* at hostilepkg/attacks.py:\d+; refused"):
            run_function(hostile, f"{ATTACKS}:{fn}", args={"path": str(target)})
        assert not target.exists()
    home = Path(os.path.expanduser("~")) / "recon-pwned.txt"
    with pytest.raises(RunFailed, match="refused"):
        run_function(hostile, f"{ATTACKS}:write_outside", args={"path": str(home)})
    assert not home.exists()
    assert _scratch_dirs() - before == set()  # scratch folders are removed afterwards


def test_writes_inside_scratch_work(hostile: Snapshot) -> None:
    res = run_function(hostile, f"{ATTACKS}:write_scratch")
    assert res.ok and res.value == "ok"


def test_processes_are_refused(hostile: Snapshot) -> None:
    with pytest.raises(RunFailed, match=r"tried starting a process \(subprocess.Popen\) at "
                                        r"hostilepkg/attacks.py:\d+"):
        run_function(hostile, f"{ATTACKS}:start_process")


def test_output_flood_hits_the_file_size_limit(hostile: Snapshot) -> None:
    with pytest.raises(RunFailed, match=r"wrote more than its file size limit \(64 MiB\)"):
        run_function(hostile, f"{ATTACKS}:flood", timeout=30)


def test_environment_is_trimmed(hostile: Snapshot, monkeypatch: pytest.MonkeyPatch) -> None:
    """Secrets of the caller's environment do not reach the slice; --env does."""
    monkeypatch.setenv("HF_TOKEN", "secret-token")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-key")
    res = run_function(hostile, f"{ATTACKS}:environment", env={"VLLM_USE_V2_MODEL_RUNNER": "1"})
    seen = res.value
    assert "HF_TOKEN" not in seen["keys"] and "AWS_SECRET_ACCESS_KEY" not in seen["keys"]
    assert seen["v2"] == "1"
    # HOME and the working folder are the run's own scratch folder
    assert seen["cwd"] == seen["home"]
    assert Path(seen["cwd"]).name == "work" and Path(seen["cwd"]).parent.name.startswith(
        "recon-run-")
    assert not Path(seen["cwd"]).exists()  # and it is gone after the run
    # inside the OS sandbox the code is uid 65534, whoever started recon
    assert seen["uid"] == 65534 and res.sandbox["user"] == "nobody"
    assert res.sandbox["os_sandbox"] == "bwrap" and res.sandbox["network"] is False
    # bwrap never runs as root: started by root, the sandbox is nobody on the host as well
    assert res.sandbox["host_user"] == ("nobody" if os.geteuid() == 0 else "caller")
