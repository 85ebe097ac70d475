"""``recon cache`` and ``recon cache prune``: a real recon process over a cache folder laid out here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

DAY = 86_400


def _recon(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "recon", *args], capture_output=True, text=True,
                          env={**os.environ, "RECON_CACHE": str(cache)}, timeout=120, check=False)


def _age(path: Path, days: float) -> None:
    when = time.time() - days * DAY
    for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.utime(p, (when, when), follow_symlinks=False)


def _lay_out(tmp_path: Path) -> tuple[Path, Path]:
    cache, outside = tmp_path / "cache", tmp_path / "precious.txt"
    outside.write_text("not recon's")
    (cache / "wheels").mkdir(parents=True)
    (cache / "wheels" / "old-1.0-py3-none-any.whl").write_bytes(b"w" * 3000)
    (cache / "wheels" / "new-2.0-py3-none-any.whl").write_bytes(b"w" * 500)
    env = cache / "envs" / "vllm-0.1.0-old"
    (env / "lib" / "deep").mkdir(parents=True)
    (env / "lib" / "deep" / "mod.py").write_bytes(b"x" * 1200)
    (env / "lib" / "out").symlink_to(outside)  # a link out of the cache: unlinked, never followed
    _age(cache / "wheels" / "old-1.0-py3-none-any.whl", 40)
    _age(env, 40)
    return cache, outside


def test_listing_counts_entries_and_bytes(tmp_path: Path) -> None:
    cache, _ = _lay_out(tmp_path)
    res = _recon(cache, "cache", "ls", "--json")
    assert res.returncode == 0, res.stderr
    kinds = {k["kind"]: k for k in json.loads(res.stdout)["kinds"]}
    assert (kinds["wheels"]["entries"], kinds["wheels"]["bytes"]) == (2, 3500)
    env_bytes = 1200 + len(str(tmp_path / "precious.txt"))  # the file and the link itself
    assert kinds["envs"]["entries"] == 1 and kinds["envs"]["bytes"] == env_bytes
    assert kinds["snapshots"]["entries"] == 0
    assert _recon(cache, "cache").returncode == 0  # no subcommand: the listing


def test_prune_removes_only_old_entries_and_never_follows_links(tmp_path: Path) -> None:
    cache, outside = _lay_out(tmp_path)
    dry = _recon(cache, "cache", "prune", "--older-than", "30", "--dry-run", "--json")
    assert dry.returncode == 0 and json.loads(dry.stdout)["bytes"] > 0
    assert (cache / "envs" / "vllm-0.1.0-old").exists()  # a dry run removes nothing
    res = _recon(cache, "cache", "prune", "--older-than", "30", "--json")
    gone = {(e["kind"], e["name"]) for e in json.loads(res.stdout)["entries"]}
    assert gone == {("wheels", "old-1.0-py3-none-any.whl"), ("envs", "vllm-0.1.0-old")}
    assert [p.name for p in (cache / "wheels").iterdir()] == ["new-2.0-py3-none-any.whl"]
    assert not (cache / "envs" / "vllm-0.1.0-old").exists()
    assert outside.read_text() == "not recon's"


def test_prune_refuses_what_it_does_not_know(tmp_path: Path) -> None:
    cache, _ = _lay_out(tmp_path)
    res = _recon(cache, "cache", "prune", "--older-than", "1", "--kind", "wheel")
    assert res.returncode != 0 and "unknown cache kind wheel" in res.stderr
    assert _recon(cache, "cache", "prune", "--older-than", "-1").returncode != 0
    assert len(list((cache / "wheels").iterdir())) == 2
