"""``recon demo`` section by section (issue 39, major 1), through the real CLI on real releases.

Written from the issue's text: each section stands alone (a failure is one line in its
section and in a summary, the exit status is non-zero at the end), the report is written as
it goes (a kill keeps what finished), a summary table opens the output and the report, and
the recipes that need no torch run without torch. The sections are the cheapest that prove
it: ``vllm-dflash-layers`` (no torch, about 10 s on the cached vLLM 0.33.0) beside an SGLang
section whose release cannot be had, and a vLLM snapshot with one file made unreadable.

The expected answer is computed from the example config, not from recon: Qwen3-8B's DFlash
draft reads target layers ``target_layer_ids`` + 1 (the hidden state after each layer), and
its fc input is hidden_size x their count. Warm cache: about 60 s for the file.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from recon.snapshots.model import Snapshot

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "recon" / "examples" / "qwen3-8b-dflash-b16.json"
VLLM = "vllm==0.33.0"
#: a release PyPI does not have: the SGLang section cannot get its source
NO_SGLANG = "sglang==0.0.0.1"
DFLASH = "vllm-dflash-layers"

pytestmark = pytest.mark.timeout(600)


def _expected_dflash() -> tuple[str, str]:
    """(aux layers, fc input size) as the example config implies them."""
    cfg = json.loads(EXAMPLE.read_text())
    ids = cfg["dflash_config"]["target_layer_ids"]
    return str([i + 1 for i in ids]), str(cfg.get("target_hidden_size", cfg["hidden_size"]) * len(ids))


def _demo(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
          **popen: object) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "recon", "demo", *args, "--report", str(tmp_path / "reports" / "demo.md")]
    return subprocess.Popen(cmd, cwd=tmp_path, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, **(env or {})}, **popen)  # type: ignore[call-overload]


def _finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=500)
    return proc.returncode, out, err


def _summary(report: str) -> list[str]:
    """The report's first table: its rows (the lines between the title and the first blank)."""
    lines = report.splitlines()
    assert lines[0] == "# recon demo" and lines[1] == "", lines[:3]
    table = []
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        table.append(line)
    return table[2:]  # header and separator off


def _row(rows: list[str], recipe: str) -> str:
    found = [r for r in rows if recipe in r]
    assert len(found) == 1, rows
    return found[0]


def test_a_failed_section_is_one_line_and_the_next_sections_run(tmp_path: Path) -> None:
    """The SGLang section comes first and fails (its release does not exist); the vLLM one
    after it still answers; the report on disk has both, the summary first; exit non-zero."""
    started = time.monotonic()
    proc = _demo(tmp_path, "--only", "sglang-server-args", "--only", DFLASH,
                 "--vllm", VLLM, "--sglang", NO_SGLANG)
    code, out, err = _finish(proc)
    assert code != 0, out + err
    assert "Traceback" not in err, err
    report = (tmp_path / "reports" / "demo.md").read_text()
    rows = _summary(report)
    assert len(rows) == 2, rows
    failed = _row(rows, "sglang-server-args")
    assert "0.0.0.1" in failed and "fail" in failed.lower(), failed
    aux, fc = _expected_dflash()
    assert "vllm 0.33.0" in _row(rows, DFLASH) and "fail" not in _row(rows, DFLASH).lower()
    assert aux in report and fc in report, report  # the dflash section's own answer, below the table
    # the failure is one line on stderr too, as it happens
    assert len([ln for ln in err.splitlines() if "sglang-server-args" in ln and "0.0.0.1" in ln]) == 1, err
    # the summary opens stdout: both rows come before the first section's output
    first_flags = out.index("flags:")
    assert out.index("sglang-server-args") < first_flags and out.index(DFLASH) < first_flags, out[:2000]
    print(f"demo with a failed section: {time.monotonic() - started:.1f} s")


def _damaged_copy(snap: Snapshot, dest: Path, rel: str) -> Path:
    """A copy of ``snap`` whose file ``rel`` cannot be read as a file any more (a folder stands
    where it was: what a reader meets when the snapshot is replaced under it)."""
    shutil.copytree(snap.root, dest, symlinks=True)
    target = dest / "src" / rel
    assert target.is_file(), target
    target.unlink()
    target.mkdir()
    return dest


def test_a_section_that_breaks_while_reading_its_snapshot(tmp_path: Path,
                                                          vllm_latest: Snapshot) -> None:
    """A file of the vLLM snapshot is unreadable while the section reads it: that section is
    one failure line (no traceback), the report holds it in the summary, exit non-zero."""
    broken = _damaged_copy(vllm_latest, tmp_path / "vllm-damaged",
                           "vllm/model_executor/models/qwen3_dflash.py")
    started = time.monotonic()
    code, out, err = _finish(_demo(tmp_path, "--only", DFLASH, "--vllm", str(broken)))
    assert code != 0 and "Traceback" not in err, out + err
    report = (tmp_path / "reports" / "demo.md").read_text()
    row = _row(_summary(report), DFLASH)
    assert "fail" in row.lower() and "directory" in row.lower(), row  # what reading a folder says
    said = [ln for ln in err.splitlines() if DFLASH in ln]
    assert len(said) == 1 and "directory" in said[0].lower(), err
    print(f"demo on a damaged snapshot: {time.monotonic() - started:.1f} s")


def test_a_killed_demo_keeps_the_sections_that_finished(tmp_path: Path) -> None:
    """SIGKILL once the first section is done (the second has started): no clean-up code runs,
    and reports/demo.md still has the first section and a summary that says what did not run."""
    report = tmp_path / "reports" / "demo.md"
    aux, fc = _expected_dflash()
    started = time.monotonic()
    proc = _demo(tmp_path, "--only", DFLASH, "--only", "vllm-hybrid-page-align", "--vllm", VLLM,
                 start_new_session=True)
    try:
        while fc not in (report.read_text() if report.is_file() else ""):
            assert proc.poll() is None, f"the demo ended before its first section was in the report: " \
                                        f"{proc.communicate()}"
            assert time.monotonic() - started < 300, "no first section after 300 s"
            time.sleep(0.05)
        assert proc.poll() is None, "the demo finished before the kill: nothing was tested"
    finally:
        if proc.poll() is None:  # the demo and what it started (a warm server is detached: it lives on)
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    text = report.read_text()
    rows = _summary(text)
    assert len(rows) == 4, rows  # dflash, then the three hybrid-page-align configs
    assert "vllm 0.33.0" in _row(rows, DFLASH) and aux in text and fc in text, text
    hybrid = [r for r in rows if "vllm-hybrid-page-align" in r]
    assert len(hybrid) == 3 and all("not run" in r for r in hybrid), hybrid
    print(f"killed demo: {time.monotonic() - started:.1f} s")


@pytest.fixture()
def no_torch(tmp_path: Path) -> dict[str, str]:
    """The environment of a Python where ``import torch`` fails, as on a machine without it."""
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(
        "import sys\n"
        "class _NoTorch:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'torch':\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, _NoTorch())\n")
    env = {"PYTHONPATH": f"{hide}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    check = subprocess.run([sys.executable, "-c", "import torch"], env={**os.environ, **env},
                           capture_output=True, text=True)
    assert check.returncode != 0 and "torch" in check.stderr
    return env


def test_without_torch_the_torch_free_recipes_run(tmp_path: Path, no_torch: dict[str, str]) -> None:
    """``--only`` a torch-free recipe answers (exit 0); the whole demo runs it and says, one line
    a section and before any download, that the others need torch; one that needs it alone is
    refused in one line."""
    started = time.monotonic()
    aux, fc = _expected_dflash()
    for name in ("only", "all", "one"):
        (tmp_path / name).mkdir()
    code, out, err = _finish(_demo(tmp_path / "only", "--only", DFLASH, "--vllm", VLLM, env=no_torch))
    assert code == 0, out + err
    report = (tmp_path / "only" / "reports" / "demo.md").read_text()
    assert aux in report and fc in report, report
    code, out, err = _finish(_demo(tmp_path / "all", "--vllm", VLLM, "--sglang", NO_SGLANG, env=no_torch))
    assert code != 0 and "Traceback" not in err, out + err
    rows = _summary((tmp_path / "all" / "reports" / "demo.md").read_text())
    assert len(rows) > 2 and "fail" not in _row(rows, DFLASH).lower(), rows
    others = [r for r in rows if DFLASH not in r]
    assert all("needs torch" in r for r in others), others
    # no SGLang section tried to get its release (a non-existent one would say "could not download")
    assert not [r for r in others if "could not" in r], others
    code, out, err = _finish(_demo(tmp_path / "one", "--only", "vllm-capture-sizes", "--vllm", VLLM,
                                   env=no_torch))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "needs torch" in lines[0], err
    print(f"demo without torch: {time.monotonic() - started:.1f} s")
