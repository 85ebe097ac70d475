"""``recon chain --keep``: a new snapshot inside ``--out``; ``--force`` replaces only a recon
snapshot of that name, never the folder that holds snapshots, nor anything recon did not write.

The parent is a real ``dir:`` snapshot of a small package whose call chain is
known by construction (``engine.run`` calls ``kernels.step``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recon.cli import app
from recon.errors import ReconError
from recon.index import load_index
from recon.index.chain import chain, keep_files, kept_name
from recon.snapshots.model import Snapshot
from recon.snapshots.take import take_snapshot

TARGET = "vllm.kernels:step"
KEPT = "parent--step"


@pytest.fixture()
def holder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``snapshots/`` holding the parent, another snapshot, and a file of the user's."""
    monkeypatch.setenv("RECON_CACHE", str(tmp_path / "cache"))
    site = tmp_path / "site"
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text('__version__ = "0.0.1"\n')
    (site / "vllm" / "kernels.py").write_text("def step(x):\n    return x + 1\n")
    (site / "vllm" / "engine.py").write_text("from vllm.kernels import step\n\n\n"
                                             "def run(x):\n    return step(x)\n")
    (site / "vllm" / "unrelated.py").write_text("def other():\n    return 0\n")
    snaps = tmp_path / "snapshots"
    take_snapshot(f"dir:{site}", out=snaps, name="parent")
    take_snapshot(f"dir:{site}", out=snaps, name="other")
    (snaps / "notes.txt").write_text("mine\n")
    return snaps


def _keep(holder: Path, *extra: str) -> tuple[int, str]:
    """Exit code and output of ``chain --keep 2 --out HOLDER``; a ReconError's one line on failure."""
    res = CliRunner().invoke(app, ["chain", str(holder / "parent"), "--to", "step", "--json",
                                   "--keep", "2", "--out", str(holder), *extra])
    if isinstance(res.exception, ReconError):
        return 1, str(res.exception)
    return res.exit_code, res.output


def _listing(root: Path) -> list[tuple[str, bytes | str | None]]:
    """Every path under ``root`` (the index cache aside) with its bytes or link target."""
    out: list[tuple[str, bytes | str | None]] = []
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if rel.startswith("cache"):
            continue
        out.append((rel, str(p.readlink()) if p.is_symlink() else
                    p.read_bytes() if p.is_file() else None))
    return out


def _untouched(holder: Path) -> None:
    assert (holder / "notes.txt").read_text() == "mine\n"
    assert Snapshot.open(holder / "other").name == "other"
    assert sorted(Snapshot.open(holder / "parent").files) == [
        "vllm/__init__.py", "vllm/engine.py", "vllm/kernels.py", "vllm/unrelated.py"]


def test_keep_out_writes_a_new_snapshot_inside_and_force_spares_the_rest(holder: Path) -> None:
    code, out = _keep(holder, "--force")  # the README's line plus the --force the error suggests
    assert code == 0, out
    kept = Snapshot.open(holder / KEPT)
    assert sorted(kept.files) == ["vllm/engine.py", "vllm/kernels.py"]
    assert kept.manifest.parent["name"] == "parent"
    assert json.loads(out)["kept"]["path"] == str(kept.root)
    _untouched(holder)
    code, out = _keep(holder)
    assert code != 0 and "already exists" in out and "--force" in out
    code, out = _keep(holder, "--force")  # replaces the kept snapshot, and only it
    assert code == 0, out
    assert Snapshot.open(holder / KEPT).manifest.created
    _untouched(holder)
    assert sorted(p.name for p in holder.iterdir()) == ["notes.txt", "other", "parent", KEPT]


@pytest.mark.parametrize("kind", ["folder", "foreign-manifest", "renamed-snapshot", "link"])
def test_force_never_replaces_what_recon_did_not_write_there(holder: Path, tmp_path: Path,
                                                             kind: str) -> None:
    dest = holder / KEPT
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("x")
    if kind == "folder":
        dest.mkdir()
        (dest / "work.txt").write_text("x")
    elif kind == "foreign-manifest":  # a manifest.json of another tool
        dest.mkdir()
        (dest / "manifest.json").write_text('{"name": "parent--step", "tool": {"name": "npm"}}')
    elif kind == "renamed-snapshot":  # a recon snapshot, but written under another name
        take_snapshot(f"dir:{Snapshot.open(holder / 'parent').src}", out=tmp_path / "s", name="real")
        (tmp_path / "s" / "real").rename(dest)
    else:  # a link to a snapshot elsewhere: replacing it would follow the user's link
        take_snapshot(f"dir:{Snapshot.open(holder / 'parent').src}", out=elsewhere, name=KEPT)
        dest.symlink_to(elsewhere / KEPT)
    before = _listing(tmp_path)
    code, out = _keep(holder, "--force")
    assert code != 0 and "not a snapshot recon wrote" in out, out
    assert _listing(tmp_path) == before
    _untouched(holder)


def test_out_that_is_a_snapshot_is_refused(holder: Path) -> None:
    res = CliRunner().invoke(app, ["chain", str(holder / "parent"), "--to", "step", "--keep", "1",
                                   "--out", str(holder / "parent"), "--force"])
    assert res.exit_code != 0 and "is itself a snapshot" in str(res.exception)
    _untouched(holder)


def test_keep_into_the_parent_itself_is_refused(holder: Path) -> None:
    idx = load_index(holder / "parent", workers=0)
    res = chain(idx, TARGET, depth=1)
    with pytest.raises(ReconError, match="being read"):
        keep_files(idx, res, 1, out=holder, name="parent", force=True)
    _untouched(holder)


@pytest.mark.parametrize("bad", ["../escape", ".hidden", "a/b", ""])
def test_bad_names_are_refused(holder: Path, bad: str) -> None:
    idx = load_index(holder / "parent", workers=0)
    with pytest.raises(ReconError, match="bad snapshot name"):
        keep_files(idx, chain(idx, TARGET, depth=1), 1, out=holder, name=bad)
    assert not (holder.parent / "escape").exists()


def test_kept_names_are_one_safe_folder_name() -> None:
    assert kept_name("vllm-0.33.0", "vllm.platforms.interface:Platform._align_hybrid_block_size") == \
        "vllm-0.33.0--Platform._align_hybrid_block_size"
    assert kept_name("p", "m:outer.<locals>.inner") == "p--outer.inner"
    assert kept_name(".p", "m:f") == "p--f"
    assert kept_name("a b/c", "m:f") == "a_b_c--f"
    long_a, long_b = kept_name("p" * 300, "m:f"), kept_name("p" * 301, "m:f")
    assert len(long_a) == 200 and long_a != long_b
