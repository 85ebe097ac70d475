"""Run every notebook in notebooks/ (jupytext percent-format .py) top to bottom as a script.

This is how CI executes them: a fresh interpreter per notebook, matplotlib's Agg
backend, 300 s each; a cell that raises fails the test. The notebooks use real
releases from PyPI (wheels cached in ~/.cache/recon after the first download).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.py"))


def test_there_are_notebooks() -> None:
    assert NOTEBOOKS, "no notebooks/*.py found"


@pytest.mark.timeout(330)
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(notebook: Path, tmp_path: Path) -> None:
    env = dict(os.environ, MPLBACKEND="Agg", MPLCONFIGDIR=str(tmp_path / "mpl"))
    proc = subprocess.run([sys.executable, str(notebook)], cwd=notebook.parent, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (
        f"{notebook.name} exited {proc.returncode}\n--- stdout (tail)\n{proc.stdout[-3000:]}"
        f"\n--- stderr (tail)\n{proc.stderr[-5000:]}")
