"""Small helpers several test files share: the CLI in-process, and hand-written package trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from recon.cli import main
from recon.snapshotter import take_snapshot


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``recon ARGV`` in this process: (exit code, stdout, stderr)."""
    code = 0
    try:
        main(list(argv))
    except SystemExit as ex:
        code = int(ex.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def demo_tree(root: Path, files: dict[str, str]) -> Path:
    """A ``demo`` package of ``files`` under ``root``, snapshotted; returns the snapshot folder."""
    pkg = root / "demo"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for name, text in files.items():
        (pkg / name).write_text(text.lstrip("\n"))
    return take_snapshot(f"dir:{root}", out=root.parent / "snaps", name=root.name,
                         package="demo").root
