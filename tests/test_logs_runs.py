"""``recon logs DIR``: which real runs shared a torch.compile cache, and who wrote what another loaded.

Expected values are the engine's own lines, as the data READMEs record them: in
``tests/data/logs/real-compile-cache/`` (seven runs on an H100, two cache roots) the second run
(``gpu_memory_utilization=0.5``) loaded what the first wrote; in ``tests/data/logs/real/`` (an
H200) the n-gram run with 3 tokens loaded the 1-token run's folder, ``max_num_seqs=1024`` loaded
the default run's, and the probed serve run loaded the first serve run's.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from recon.logs.runs import read_runs, reuses

DATA = Path(__file__).parent / "data" / "logs"
CC = DATA / "real-compile-cache"


def test_the_run_that_loaded_another_runs_folder_is_named_with_its_writer() -> None:
    runs = read_runs(CC)
    assert [r.name for r in runs][:2] == ["cc_base.log", "cc_gmu05.log"]  # time order
    found = reuses(runs)
    assert [(u.loader, u.writer, u.folder) for u in found] == \
        [("cc_gmu05.log", "cc_base.log", "a7497f03a4")]
    assert found[0].differ == {"gpu_memory_utilization": (None, 0.5)}
    killed = next(r for r in runs if r.name == "cc_killed.log")
    assert killed.folder == "a7497f03a4" and killed.aot is None and not killed.loaded


def test_h200_runs_that_shared_a_folder(tmp_path: Path) -> None:
    for name in ("L_default", "L_seqs1024", "L_ngram1", "L_ngram3", "L_serve", "L_serve_probe",
                 "L_fp8kv", "L_eager"):
        shutil.copy(DATA / "real" / f"{name}.log", tmp_path / f"{name}.log")
    found = {(u.loader, u.writer): u for u in reuses(read_runs(tmp_path))}
    assert set(found) == {("L_ngram3.log", "L_ngram1.log"), ("L_seqs1024.log", "L_default.log"),
                          ("L_serve_probe.log", "L_serve.log")}
    assert set(found[("L_ngram3.log", "L_ngram1.log")].differ) == {"speculative_config"}
    assert set(found[("L_seqs1024.log", "L_default.log")].differ) == {"max_num_seqs"}


def test_a_concatenation_on_stdin_is_split_into_its_runs() -> None:
    text = "".join((CC / f"{n}.log").read_text() for n in ("cc_base", "cc_gmu05", "cc_seqs64"))
    done = subprocess.run([sys.executable, "-m", "recon", "logs", "-", "--runs", "--json"],
                          input=text, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-600:]
    data = json.loads(done.stdout)
    assert [r["compile_cache_hash"] for r in data["runs"]] == ["a7497f03a4", "a7497f03a4",
                                                                 "6326f05d84"]
    assert [(u["loader"], u["writer"]) for u in data["reuses"]] == [("<stdin>#2", "<stdin>#1")]
    assert "VLLM_CACHE_ROOT" in data["fix"]


def test_one_log_that_loaded_from_the_cache_says_so() -> None:
    from recon.logs import analyze

    loaded = analyze(CC / "cc_gmu05.log").log
    trap = next(t for t in loaded.traps if t.code == "compile-cache-loaded")
    text = (CC / "cc_gmu05.log").read_text().splitlines()
    assert "Directly load" in text[trap.lines[0] - 1]  # the engine's own line
    assert "a7497f03a4" in trap.text and "VLLM_CACHE_ROOT" in trap.text
    for own in ("cc_base", "cc_seqs64", "cc_after_kill"):  # they compiled their own
        assert all(t.code != "compile-cache-loaded" for t in analyze(CC / f"{own}.log").log.traps)
