"""``recon compile-cache inspect``: a real engine's cache folder read as data, and damaged copies of it.

``tests/data/compile-cache/h100-ccB/`` is what a real vLLM 0.26.0 engine left in its
``VLLM_CACHE_ROOT`` on an H100 (``bench/gpu_engine/compile_cache.sh``, runs ``cc_killed`` and
``cc_after_kill``): ``listing.tsv`` (every path, size, time and kind, from ``find``) and the two
small files recon reads, as the engine wrote them (``cache_key_factors.json``,
``vllm_compile_cache.py``). The compiled artefacts (2-3 MB each of Inductor output, which recon
only checks for presence and size) are rebuilt as sparse files of their listed sizes: that part
stands in for the real bytes, and says so here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from recon.logs.cachedir import graphs_name, inspect_dir
from recon.snapshots.model import Snapshot

DATA = Path(__file__).parent / "data" / "compile-cache" / "h100-ccB"
GRAPHS = "torch_compile_cache/a7497f03a4/rank_0_0/backbone"
AOT_NAME = "0ee49f3694577d325a3c19e9569094070e0929fbdf8a23b0b61dcb50ece75e23"


def _tree(dst: Path) -> Path:
    for line in (DATA / "listing.tsv").read_text().splitlines():
        rel, size, mtime, kind = line.split("\t")
        path = dst / rel
        if kind == "d":
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if (DATA / "files" / rel).is_file():
            shutil.copy(DATA / "files" / rel, path)
        else:
            with open(path, "wb") as fh:
                fh.truncate(int(size))
        os.utime(path, (float(mtime), float(mtime)))
    return dst


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "recon", "compile-cache", "inspect", *args],
                          capture_output=True, text=True, timeout=300)


def _snapshot_of(root: Path) -> list[tuple[str, int, float]]:
    return sorted((str(p.relative_to(root)), p.lstat().st_size, p.lstat().st_mtime)
                  for p in root.rglob("*"))


def test_the_engines_folder_reads_complete_and_its_name_is_its_factors(tmp_path: Path) -> None:
    root = _tree(tmp_path / "cache")
    found = inspect_dir(root)
    by = {(e.kind, e.name): e for e in found.entries}
    graphs, aot = by[("graphs", "a7497f03a4")], by[("aot", AOT_NAME)]
    assert (graphs.state, aot.state) == ("complete", "complete")
    assert graphs.prefix == "backbone" and graphs.ranges == ["(1, 16384)"]
    assert graphs.written_at == "/tmp/ccB"  # the root the engine's index names
    factors = json.loads((DATA / "files" / GRAPHS / "cache_key_factors.json").read_text())
    assert graphs_name(factors) == "a7497f03a4"
    # the engine's own DEBUG line for this run printed these (tests/data/logs/real-compile-cache)
    assert graphs.factors["env_hash"].startswith("c7c8575c1e5e")
    assert graphs.factors["config_hash"] == "b9c4f76d4b"
    done = _cli(str(root), "--json")
    assert done.returncode == 0, done.stderr[-400:]
    assert {e["state"] for e in json.loads(done.stdout)["entries"]} == {"complete"}


def test_a_missing_artefact_a_missing_index_and_a_renamed_folder(tmp_path: Path) -> None:
    root = _tree(tmp_path / "cache")
    (root / GRAPHS / "artifact_compile_range_1_16384_subgraph_1").unlink()
    found = {e.name: e for e in inspect_dir(root).entries}
    assert found["a7497f03a4"].state == "incomplete"
    assert "subgraph_1" in found["a7497f03a4"].problems[0]
    (root / GRAPHS / "vllm_compile_cache.py").unlink()  # a writer killed before its index
    found = {e.name: e for e in inspect_dir(root).entries}
    assert "no index" in " ".join(found["a7497f03a4"].problems)
    other = _tree(tmp_path / "other")
    (other / "torch_compile_cache" / "a7497f03a4").rename(other / "torch_compile_cache" / "0123456789")
    renamed = {e.name: e for e in inspect_dir(other).entries}["0123456789"]
    assert renamed.state == "foreign or edited" and "a7497f03a4" in renamed.problems[0]
    done = _cli(str(other))
    assert done.returncode == 1 and "foreign" in done.stdout


def test_hostile_content_is_data_and_nothing_is_written(tmp_path: Path) -> None:
    root = _tree(tmp_path / "cache")
    marker = tmp_path / "outside.txt"
    marker.write_text("not to be read")
    os.symlink(marker, root / GRAPHS / "cache_key_factors.json.link")
    os.symlink(tmp_path, root / "torch_compile_cache" / "ffffffffff")  # a folder link
    index = root / GRAPHS / "vllm_compile_cache.py"
    index.write_text("(" * 200_000 + ")" * 200_000)  # nests past any parser
    big = root / "torch_compile_cache" / "eeeeeeeeee" / "rank_0_0" / "backbone"
    big.mkdir(parents=True)
    (big / "vllm_compile_cache.py").write_text("__import__('os').system('touch " +
                                               str(tmp_path / "pwned") + "')")
    with open(big / "cache_key_factors.json", "wb") as fh:
        fh.truncate(8 << 20)  # larger than recon reads
    before = _snapshot_of(tmp_path)
    done = _cli(str(root), "--json")
    assert done.returncode == 1, done.stderr[-400:]
    data = json.loads(done.stdout)
    assert any(link.endswith("ffffffffff") for link in data["links"])
    states = {e["name"]: e["state"] for e in data["entries"]}
    assert states["a7497f03a4"] == "incomplete" and states["eeeeeeeeee"] == "incomplete"
    assert not (tmp_path / "pwned").exists()
    assert _snapshot_of(tmp_path) == before


def test_what_is_not_a_cache_folder_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    done = _cli(str(tmp_path / "x"))
    assert done.returncode != 0 and "no torch.compile cache here" in done.stderr
    done = _cli(str(tmp_path / "missing"))
    assert done.returncode != 0 and "not a folder" in done.stderr


def test_the_entry_a_command_line_would_load(tmp_path: Path,
                                             pip_snapshot: Callable[..., Snapshot]) -> None:
    snap = pip_snapshot("vllm==0.26.0")
    root = _tree(tmp_path / "cache")
    done = _cli(str(root), "--json", "-s", str(snap.root), "--config",
                str(Path(__file__).parent / "data" / "logs" / "real" / "configs" / "llama.json"),
                "--flags", "vllm serve /work/main/bench/gpu_engine/models/llama --load-format "
                "dummy --skip-tokenizer-init --max-model-len 4096", "--llm", "--gpu", "h100",
                "--env", "VLLM_USE_FLASHINFER_SAMPLER=0", "--env", "CUDA_HOME=/usr/local/cuda",
                "--env", "VLLM_LOGGING_LEVEL=DEBUG", "--engine-transformers", "5.17.0")
    assert done.returncode == 0, done.stderr[-600:]
    paths = {w["path"] for w in json.loads(done.stdout)["would_load"]}
    assert paths == {GRAPHS, f"torch_compile_cache/torch_aot_compile/{AOT_NAME}/rank_0_0"}
