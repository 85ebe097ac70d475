"""CLI conventions a new user relies on, through the real ``recon`` command in a subprocess.

``--version``/``-V`` answer without a command; piped output keeps whole lines (rich's
80-column default cut names, so ``recon ... | grep`` found nothing); a reader that closes
the pipe early changes no exit status (``recon has``'s answer is its status); ``recon logs -``
reads standard input, and a binary file is refused in one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from recon import __version__
from recon.snapshot import Snapshot


def _recon(*args: str, env: dict[str, str] | None = None, stdin: bytes | None = None,
           cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    full = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "recon", *args], input=stdin, capture_output=True,
                          env=full, cwd=cwd, timeout=300, check=False)


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(flag: str) -> None:
    res = _recon(flag)
    assert res.returncode == 0, res.stderr
    assert res.stdout.decode().strip() == f"recon {__version__}"


def _package(root: Path, version: str, body: str) -> Path:
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text(f'__version__ = "{version}"\n')
    (root / "vllm" / "m.py").write_text(body)
    return root


@pytest.fixture()
def releases(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    old = _package(tmp_path / "old", "1.0", "def f(n, b):\n    return (n - 1) // b\n")
    new = _package(tmp_path / "new", "1.1", "def f(n, b):\n    return (n - 1) // (b * 2)\n")
    return old, new, {"RECON_CACHE": str(tmp_path / "cache")}


def test_piped_lines_are_whole(tmp_path: Path) -> None:
    """A qualname far longer than 80 columns comes through a pipe on one line."""
    name = "a_function_whose_name_is_long_enough_to_be_cut_by_an_eighty_column_terminal_" * 2
    _package(tmp_path / "site", "1.0", f"def {name}():\n    return 1\n")
    env = {"RECON_CACHE": str(tmp_path / "cache")}
    made = _recon("snapshot", f"dir:{tmp_path / 'site'}", "--out", str(tmp_path / "snaps"),
                  "--name", "s", "--quiet", env=env)
    assert made.returncode == 0, made.stderr
    res = _recon("find", str(tmp_path / "snaps" / "s"), f"*:{name}", env=env)
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stdout.decode().splitlines() if name in ln]
    assert lines, res.stdout.decode()


@pytest.mark.parametrize(("which", "status"), [("new", 0), ("old", 1)])
def test_has_answer_survives_a_closed_pipe(releases: tuple[Path, Path, dict[str, str]],
                                          which: str, status: int) -> None:
    old, new, env = releases
    ref = new if which == "new" else old
    argv = [sys.executable, "-m", "recon", "has", "vllm.m:f", "--in", f"dir:{ref}",
            "--fixed-in", f"dir:{new}", "--unfixed", f"dir:{old}"]
    full = {**os.environ, **env}
    # the reader exits at once, so every write after that meets a closed pipe
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == status, err
    assert "Traceback" not in err


def test_logs_from_stdin() -> None:
    line = (b"INFO 12-01 10:00:00 [kv_cache_utils.py:1] GPU KV cache size: 23,399,703 tokens\n")
    res = _recon("logs", "-", "--json", stdin=line)
    assert res.returncode == 0, res.stderr
    assert b"23399703" in res.stdout and b"<stdin>" in res.stdout


def test_logs_binary_file_is_refused(tmp_path: Path) -> None:
    blob = tmp_path / "core"
    blob.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(4096))
    res = _recon("logs", str(blob))
    assert res.returncode != 0
    err = res.stderr.decode().strip().splitlines()
    assert len(err) == 1 and "not a text log" in err[0] and str(blob) in err[0]


def test_recipe_unknown_set_key_is_an_error(vllm_latest: Snapshot) -> None:
    """A --set key no recipe looked up was a typo: one line naming it, not a silent answer."""
    flags = "vllm serve m --max-num-seqs 16"
    ok = _recon("recipe", "run", "vllm-capture-sizes", "--snapshot", str(vllm_latest.root),
                "--flags", flags, "--set", "gpu=h100", "--json")
    assert ok.returncode == 0, ok.stderr
    bad = _recon("recipe", "run", "vllm-capture-sizes", "--snapshot", str(vllm_latest.root),
                 "--flags", flags, "--set", "gpuu=h100", "--json")
    assert bad.returncode == 2
    err = bad.stderr.decode().strip().splitlines()
    assert len(err) == 1 and "gpuu" in err[0] and "gpu" in err[0].split("looked up")[1]


def test_recipe_not_applicable_is_not_exit_zero(vllm_latest: Snapshot) -> None:
    res = _recon("recipe", "run", "sglang-track-ssm", "--snapshot", str(vllm_latest.root), "--json")
    assert res.returncode == 5, res.stderr
    assert json.loads(res.stdout)["applicable"] is False


def test_logs_set_without_snapshot_is_an_error(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("INFO 12-01 10:00:00 [kv_cache_utils.py:1] GPU KV cache size: 1,000 tokens\n")
    res = _recon("logs", str(log), "--set", "gpu=sm90")
    assert res.returncode == 2 and b"--snapshot" in res.stderr
