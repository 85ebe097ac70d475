"""Small helpers several test files share: the CLI in-process, and hand-written package trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from recon.cli import main
from recon.snapshots.take import take_snapshot


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


def demo_pair(tmp_path_factory: pytest.TempPathFactory, label: str,
              old: dict[str, str], new: dict[str, str]) -> tuple[Path, Path]:
    """Two snapshots of the ``demo`` package, before and after, for diff tests."""
    base = tmp_path_factory.mktemp(label)
    return demo_tree(base / "old", old), demo_tree(base / "new", new)


def change_rows(changes: list) -> list[tuple[str, str, str, str]]:  # type: ignore[type-arg]
    """(kind, qualname, A, B) of diff value changes (class fields or module constants)."""
    return [(c.kind, c.qualname, c.side("a"), c.side("b")) for c in changes]
