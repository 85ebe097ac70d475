"""Progress lines: shown on a terminal for every step that takes a while, never when piped.

The real ``recon`` command runs in a subprocess whose stderr is a pseudo-terminal
(what a user's shell gives it) or a pipe (what a script gets).
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest


def _recon(args: list[str], env: dict[str, str], tty: bool) -> tuple[int, str]:
    """Exit status and stderr of ``recon ARGS``, with stderr on a pseudo-terminal or a pipe."""
    full = {**os.environ, **env, "COLUMNS": "160"}
    argv = [sys.executable, "-m", "recon", *args]
    if not tty:
        proc = subprocess.run(argv, capture_output=True, env=full, timeout=600, check=False)
        return proc.returncode, proc.stderr.decode(errors="replace")
    master, slave = pty.openpty()
    with subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=slave, env=full) as proc:
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        rc = proc.wait(timeout=600)
    os.close(master)
    return rc, b"".join(chunks).decode(errors="replace")


@pytest.fixture()
def many_files(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    site = tmp_path / "site" / "vllm"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text('__version__ = "1.0"\n')
    for i in range(200):
        (site / f"m{i}.py").write_text(f"def f{i}(x):\n    return x + {i}\n")
    env = {"RECON_CACHE": str(tmp_path / "cache")}
    rc, err = _recon(["snapshot", f"dir:{tmp_path / 'site'}", "-o", str(tmp_path / "snaps"),
                      "--name", "s", "--quiet"], env, tty=False)
    assert rc == 0, err
    return tmp_path / "snaps" / "s", env


def test_index_shows_progress_on_a_terminal(many_files: tuple[Path, dict[str, str]]) -> None:
    snap, env = many_files
    rc, err = _recon(["index", str(snap)], env, tty=True)
    assert rc == 0, err
    assert "indexing s" in err and "/201 files" in err, err[-2000:]


def test_no_progress_when_piped(many_files: tuple[Path, dict[str, str]]) -> None:
    snap, env = many_files
    rc, err = _recon(["index", str(snap)], env, tty=False)
    assert rc == 0, err
    assert "indexing" not in err and "\x1b[" not in err


@pytest.mark.slow
@pytest.mark.wheels  # a real download from PyPI
def test_pip_download_shows_bytes(tmp_path: Path) -> None:
    """A real download from PyPI: pip's own size line gives the total, the bytes come as it runs."""
    # pip's own HTTP cache would answer a second run without a size line: a real download
    env = {"RECON_CACHE": str(tmp_path / "cache"), "PIP_NO_CACHE_DIR": "1"}
    rc, err = _recon(["snapshot", "pip:packaging==24.0", "--package", "packaging",
                      "-o", str(tmp_path / "snaps")], env, tty=True)
    assert rc == 0, err[-3000:]
    # the total comes from pip's "(53.5 kB)": packaging 24.0's wheel, 0.1 MB
    assert "downloading packaging==24.0" in err and "/0.1 MB" in err, err[-3000:]
    rc, err = _recon(["snapshot", "pip:packaging==24.0", "--package", "packaging", "--force",
                      "-o", str(tmp_path / "snaps"), "--quiet"], env, tty=True)
    assert rc == 0 and "downloading" not in err
