"""Caches never serve stale data: the snapshot cache (one freshness key) and the index cache.

Every test builds real folders and real wheels, snapshots them through the
real sources into a private ``$RECON_CACHE``, changes something under them
the way a user would (an edit that keeps the size and restores the mtime,
a replaced wheel, a link retargeted) and checks what the next verb serves
against what is on disk now.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recon.cli import app
from recon.diffing.sides import open_side
from recon.index import load_index
from recon.snapshots.cache import ensure_snapshot, freshness, open_snapshot, tree_key
from recon.snapshots.take import take_snapshot

MOD = "vllm/engine/step.py"


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private recon cache and snapshots folder, so nothing here touches ~/.cache/recon."""
    root = tmp_path / "cache"
    monkeypatch.setenv("RECON_CACHE", str(root))
    monkeypatch.setenv("RECON_SNAPSHOTS", str(tmp_path / "snapshots"))
    return root


def _site(root: Path, body: str = "def step():\n    return 1\n") -> Path:
    """A site-packages-like folder holding a small ``vllm`` package."""
    (root / "vllm" / "engine").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text('__version__ = "0.0.1"\n')
    (root / "vllm" / "engine" / "__init__.py").write_text("")
    (root / MOD).write_text(body)
    return root


def _edit_keeping_stamp(path: Path, old: str, new: str) -> None:
    """Replace ``old`` by ``new`` (same length) and put the mtime back: size and mtime unchanged."""
    assert len(old) == len(new)
    st = path.stat()
    path.write_text(path.read_text().replace(old, new))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns


def test_dir_source_is_snapshotted_again_when_a_file_under_it_changes(cache: Path, tmp_path: Path) -> None:
    site = _site(tmp_path / "site")
    first = ensure_snapshot(f"dir:{site}")
    assert first.read_text(MOD) == "def step():\n    return 1\n"
    again = ensure_snapshot(f"dir:{site}")
    assert again.root == first.root  # nothing changed: reused, not taken again
    assert again.manifest.created == first.manifest.created

    # a nested edit leaves the top folder's size and mtime alone (the old key) and, here, the
    # file's own size and mtime too
    _edit_keeping_stamp(site / MOD, "return 1", "return 2")
    fresh = ensure_snapshot(f"dir:{site}")
    assert fresh.root != first.root
    assert fresh.read_text(MOD) == "def step():\n    return 2\n"
    assert fresh.files[MOD].sha256 == hashlib.sha256((site / MOD).read_bytes()).hexdigest()


def test_dir_source_new_file_deep_inside_is_seen(cache: Path, tmp_path: Path) -> None:
    site = _site(tmp_path / "site")
    first = ensure_snapshot(f"dir:{site}")
    (site / "vllm" / "engine" / "extra.py").write_text("X = 1\n")
    fresh = ensure_snapshot(f"dir:{site}")
    assert "vllm/engine/extra.py" in fresh.files and "vllm/engine/extra.py" not in first.files


def test_diff_sides_and_every_other_verb_share_one_cache_entry(cache: Path, tmp_path: Path) -> None:
    site = _site(tmp_path / "site")
    assert open_side(f"dir:{site}").root == ensure_snapshot(f"dir:{site}").root
    _edit_keeping_stamp(site / MOD, "return 1", "return 3")
    side = open_side(f"dir:{site}")
    assert side.read_text(MOD).endswith("return 3\n")
    assert side.root == ensure_snapshot(f"dir:{site}").root


def test_tree_key_records_links_and_never_follows_them(tmp_path: Path) -> None:
    outside = tmp_path / "host"
    outside.mkdir()
    (outside / "secret.txt").write_text("a")
    other = tmp_path / "host2"
    other.mkdir()
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "link").symlink_to(outside)
    before = tree_key(tree)
    (outside / "secret.txt").write_text("bb")  # behind the link: not part of the tree
    (outside / "new.txt").write_text("c")
    assert tree_key(tree) == before
    (tree / "link").unlink()
    (tree / "link").symlink_to(other)  # the link itself changed: a different tree
    assert tree_key(tree) != before
    assert tree_key(tmp_path / "missing") is None


def _wheel(path: Path, version: str) -> Path:
    """A real, installable wheel of a one-module ``vllm`` (METADATA, WHEEL, RECORD)."""
    init = f'__version__ = "{version}"\n'.encode()
    dist = f"vllm-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n".encode()
    wheel = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files = {"vllm/__init__.py": init, f"{dist}/METADATA": meta, f"{dist}/WHEEL": wheel}
    record = "".join(f"{n},,{len(d)}\n" for n, d in files.items()) + f"{dist}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as zf:
        for n, d in files.items():
            zf.writestr(n, d)
        zf.writestr(f"{dist}/RECORD", record)
    return path


def test_wheel_replaced_with_same_size_and_mtime_is_seen(cache: Path, tmp_path: Path) -> None:
    whl = _wheel(tmp_path / "vllm-1.0.1-py3-none-any.whl", "1.0.1")
    assert ensure_snapshot(f"wheel:{whl}").version == "1.0.1"
    st = whl.stat()
    replacement = _wheel(tmp_path / "new.whl", "1.0.2")
    assert replacement.stat().st_size == st.st_size
    os.replace(replacement, whl)  # how a download tool swaps a file in: new inode, new ctime
    os.utime(whl, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert ensure_snapshot(f"wheel:{whl}").version == "1.0.2"


def test_freshness_is_keyed_by_the_absolute_path(cache: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """``dir:site`` from two working folders names two trees: never one cache entry."""
    for sub in ("a", "b"):
        _site(tmp_path / sub / "site")
    monkeypatch.chdir(tmp_path / "a")
    one = freshness("dir:site")
    monkeypatch.chdir(tmp_path / "b")
    two = freshness("dir:site")
    assert one.source == f"dir:{tmp_path / 'a' / 'site'}" and one.key != two.key


def test_index_reads_an_edited_snapshot_file_as_it_is(tmp_path: Path, cache: Path) -> None:
    site = _site(tmp_path / "site")
    snap = take_snapshot(f"dir:{site}", out=tmp_path / "snaps", name="s")
    idx = load_index(snap, workers=0)
    assert "vllm.engine.step:step" in idx.functions
    path = snap.path(MOD)
    path.write_text(path.read_text() + "\n\ndef added():\n    return 4\n")
    again = load_index(snap, workers=0)
    assert "vllm.engine.step:added" in again.functions  # the cache keyed by the manifest missed this
    assert idx.edited == [] and again.edited == [MOD]
    assert again.modules["vllm.engine.step"].sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert again.stats.parsed == 1 and again.stats.cached == 2
    # the CLI sees it too, and says the snapshot is no longer what the manifest records
    res = CliRunner().invoke(app, ["find", str(snap.root), "*:added", "--json"])
    assert res.exit_code == 0, res.output
    assert [r["qualname"] for r in json.loads(res.stdout)["results"]] == ["vllm.engine.step:added"]


def test_index_records_keyed_by_the_bytes_parsed_in_workers(tmp_path: Path, cache: Path) -> None:
    """Through the process pool (more files than the pool threshold): each record is stored
    under the sha256 of the bytes parsed, so the original bytes still get the original record."""
    site = _site(tmp_path / "site")
    for i in range(30):
        (site / "vllm" / f"m{i}.py").write_text(f"def f{i}():\n    return {i}\n")
    snap = take_snapshot(f"dir:{site}", out=tmp_path / "snaps", name="s")
    (snap.path("vllm/m7.py")).write_text("def g7():\n    return 7\n")
    idx = load_index(snap, workers=2)
    assert idx.stats.workers >= 1
    assert "vllm.m7:g7" in idx.functions and "vllm.m7:f7" not in idx.functions
    pristine = take_snapshot(f"dir:{site}", out=tmp_path / "snaps", name="t")
    clean = load_index(pristine, workers=2)
    assert clean.stats.parsed == 1  # only the original m7.py: every other record is shared
    assert "vllm.m7:f7" in clean.functions and "vllm.m7:g7" not in clean.functions


def test_cached_snapshot_opens_by_name_from_anywhere(cache: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    site = _site(tmp_path / "site")
    snap = ensure_snapshot(f"dir:{site}")
    monkeypatch.chdir(tmp_path)
    assert open_snapshot(snap.name).root == snap.root
    res = CliRunner().invoke(app, ["find", snap.name, "*:step", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["count"] == 1
    with pytest.raises(Exception, match="no snapshot named"):
        open_snapshot("../cache/snapshots/" + snap.name + "x")


def test_index_verbs_take_any_source(cache: Path, tmp_path: Path) -> None:
    """``recon index/find/chain SOURCE`` snapshot the source once, as the guide says every verb does."""
    site = _site(tmp_path / "site")
    runner = CliRunner()
    res = runner.invoke(app, ["index", f"dir:{site}", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["functions"] == 1
    res = runner.invoke(app, ["find", f"dir:{site}", "*:step", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["results"][0]["path"] == MOD
    res = runner.invoke(app, ["chain", f"dir:{site}", "--to", "step", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["target"] == "vllm.engine.step:step"


@pytest.mark.usefixtures("vllm_latest")
def test_find_takes_a_pip_release() -> None:
    """The README's own line: ``recon find pip:vllm==0.33.0 ...`` (the release the fixtures cache)."""
    from tests.conftest import VLLM_LATEST

    res = CliRunner().invoke(app, ["find", f"pip:vllm=={VLLM_LATEST}",
                                   "*:Platform._align_hybrid_block_size", "--json"])
    assert res.exit_code == 0, res.output
    hits = json.loads(res.stdout)["results"]
    assert [h["path"] for h in hits] == ["vllm/platforms/interface.py"]


def test_a_tree_still_being_written_is_never_served_from_the_cache(tmp_path: Path) -> None:
    """Timestamps are one kernel tick coarse: while files keep changing, no key is trusted."""
    import threading

    tree = tmp_path / "tree"
    tree.mkdir()
    stop = threading.Event()

    def writer() -> None:
        n = 0
        while not stop.is_set():
            (tree / "busy.py").write_text(f"X = {n}\n")
            n += 1
            time.sleep(0.005)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        first, second = tree_key(tree), tree_key(tree)
    finally:
        stop.set()
        thread.join()
    assert first is not None and second is not None
    assert "unsettled" in first and first != second
    time.sleep(0.1)  # quiet again: a settled key, stable across walks
    assert tree_key(tree) == tree_key(tree) and "unsettled" not in (tree_key(tree) or "")
