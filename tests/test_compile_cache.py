"""The compile cache a real vLLM engine used, named by recon from the command line alone.

Expected values are the engine's own lines: ``Using cache directory``, ``saved AOT compiled
function to`` / ``Directly load AOT compilation from path`` and, at DEBUG logging, the
``torch.compile cache factors`` line, in logs of real vLLM 0.26.0 engines
(``tests/data/logs/real-compile-cache/``: an H100, seven runs sharing two cache roots;
``tests/data/logs/real/``: an H200). recon reads only each log's argument line, the model's
config.json, the environment the runs had (their README) and the transformers they had.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from recon.logs import analyze
from recon.snapshots.model import Snapshot

DATA = Path(__file__).parent / "data" / "logs"
CC = DATA / "real-compile-cache"
LLAMA = DATA / "real" / "configs" / "llama.json"
#: the environment of every run (the READMEs): the device image's CUDA_HOME and the driver's
#: sampler switch; the H100 runs logged at DEBUG
H200_ENV = "VLLM_USE_FLASHINFER_SAMPLER=0,CUDA_HOME=/usr/local/cuda"
H100_ENV = H200_ENV + ",VLLM_LOGGING_LEVEL=DEBUG"
CASE_ENV = {"cc_f32high": ",VLLM_FLOAT32_MATMUL_PRECISION=high"}
CC_CASES = sorted(p.stem for p in CC.glob("*.log"))


@pytest.fixture(scope="module")
def v026(pip_snapshot: Callable[..., Snapshot]) -> Snapshot:
    return pip_snapshot("vllm==0.26.0")


def _engine_lines(path: Path) -> dict[str, str]:
    """The cache lines the engine printed, read here with a regex of the test's own."""
    text = path.read_text(encoding="utf-8")
    out = {}
    for key, pattern in (("aot", r"torch_aot_compile/([0-9a-f]{64})/"),
                         ("folder", r"torch_compile_cache/([0-9a-f]{10})/rank_0_0/backbone"),
                         ("env", r"cache factors: env=([0-9a-f]+)"),
                         ("cfg", r"cache factors: env=[0-9a-f]+ cfg=([0-9a-f]+)")):
        found = re.search(pattern, text)
        if found:
            out[key] = found.group(1)
    return out


def _report(path: Path, snapshot: Snapshot, env: str, gpu: str) -> dict[str, tuple[object, object, str]]:
    report = analyze(path, snapshot=snapshot, config=LLAMA,
                     options={"gpu": gpu, "usage": "llm", "engine_env": env,
                              "engine_transformers": "5.17.0"})
    return {c.quantity: (c.observed, c.predicted, c.status) for c in report.comparisons}


@pytest.mark.parametrize("case", CC_CASES)
def test_each_factor_and_the_aot_folder_are_the_engines(case: str, v026: Snapshot) -> None:
    engine = _engine_lines(CC / f"{case}.log")
    rows = _report(CC / f"{case}.log", v026, H100_ENV + CASE_ENV.get(case, ""), "h100")
    assert rows["compile_env_hash"][:2] == (engine["env"], engine["env"])
    assert rows["compile_config_hash"][:2] == (engine["cfg"], engine["cfg"])
    if "aot" in engine:  # the killed run never saved one
        assert rows["aot_compile_hash"] == (engine["aot"], engine["aot"], "match")
    else:  # recon names the folder the run would have saved; the log has none to compare
        assert rows["aot_compile_hash"][0] is None and rows["aot_compile_hash"][2] == "not in log"


#: the H200 runs' AOT folders (tests/data/logs/real) are checked by
#: tests/test_logs_real.py::test_recon_logs_predicts_every_number_from_the_log_alone, with the
#: same environment


H100 = DATA / "real-h100"
#: one served run per model and one in process (D8_serve: tests/test_memory_plan.py; all six
#: matched when checked by hand on 2026-12-07)
H100_RUNS = {"D8_u95_b16k": "llama8b", "H36_seqs64": "qwen36moe", "P36_b8k": "qwen36moe"}


@pytest.mark.parametrize("case", sorted(H100_RUNS))
def test_the_aot_folder_of_full_size_h100_runs(case: str, v026: Snapshot) -> None:
    """Llama-3.1-8B and the Qwen3.6-35B-A3B hybrid MoE (``--language-model-only``), served and
    in process: the folder the engine saved its compiled model in, from the log's flags."""
    report = analyze(H100 / f"{case}.log", snapshot=v026,
                     config=H100 / "configs" / f"{H100_RUNS[case]}.json",
                     options={"engine_env": H200_ENV, "engine_transformers": "5.17.0"})
    row = next(c for c in report.comparisons if c.quantity == "aot_compile_hash")
    assert (row.observed, row.status) == (_engine_lines(H100 / f"{case}.log")["aot"], "match"), \
        row.note


def test_runs_share_a_folder_exactly_when_recon_says_so(v026: Snapshot) -> None:
    """Every pair of the H100 runs with an AOT folder: same predicted folder iff same logged."""
    predicted, logged = {}, {}
    for case in CC_CASES:
        engine = _engine_lines(CC / f"{case}.log")
        if "aot" not in engine:
            continue
        rows = _report(CC / f"{case}.log", v026, H100_ENV + CASE_ENV.get(case, ""), "h100")
        predicted[case], logged[case] = rows["aot_compile_hash"][1], engine["aot"]
    pairs = list(itertools.combinations(sorted(predicted), 2))
    assert len(pairs) >= 10
    shared = [(a, b) for a, b in pairs if logged[a] == logged[b]]
    assert shared and len(shared) < len(pairs)  # both kinds of pair are in the data
    for a, b in pairs:
        assert (predicted[a] == predicted[b]) == (logged[a] == logged[b]), (a, b)


#: the H100 runs' own kwargs as `vllm serve` flags (their CASE lines)
FLAGS = {"cc_base": "", "cc_gmu05": "--gpu-memory-utilization 0.5",
         "cc_seqs64": "--max-num-seqs 64",
         "cc_ngram3": "--speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 3, "
                      "\"prompt_lookup_max\": 4, \"prompt_lookup_min\": 2}'"}
BASE = ("vllm serve /work/main/bench/gpu_engine/models/llama --load-format dummy "
        "--skip-tokenizer-init --max-model-len 4096 ")


@pytest.mark.parametrize("other", ["cc_gmu05", "cc_seqs64", "cc_ngram3"])
def test_two_command_lines_share_a_folder_exactly_when_the_engines_did(other: str,
                                                                       v026: Snapshot) -> None:
    from recon.recipes import run_recipe

    res = run_recipe("vllm-compile-cache", v026, config=LLAMA, flags=BASE + FLAGS["cc_base"],
                     options={"gpu": "h100", "usage": "llm", "engine_env": H100_ENV,
                              "engine_transformers": "5.17.0",
                              "other_flags": BASE + FLAGS[other]})
    engine_same = _engine_lines(CC / f"{other}.log")["aot"] == _engine_lines(CC / "cc_base.log")["aot"]
    assert res.values["shares_compile_cache"] is engine_same
    assert res.values["other_aot_compile_hash"] == _engine_lines(CC / f"{other}.log")["aot"]
    if engine_same:  # the setting that differs is one each part's hash leaves out
        assert res.values["differing_config_parts"] == []
        assert "gpu_memory_utilization" in res.values["differing_settings"]
        assert any(f.level == "warn" and "share one compile cache" in f.text for f in res.findings)
    else:
        assert res.values["differing_config_parts"]


#: what each release's own source says (read by hand): 0.10.2 hashes a listed set of variables
#: (envs.compute_hash) and has no AOT cache (no vllm/compilation/caching.py); 0.19.0 pins torch
#: 2.10.0, where AOT compile is on by default and the "mega" artifact (torch >= 2.12) is not;
#: 0.33.0 pins torch 2.14.0, where the mega artifact is on and its AOT key holds Inductor's
#: hash of the board's build, which only the engine's machine has
RELEASES = {"0.10.2": ("no vllm.compilation.caching", False),
            "0.19.0": (None, True),
            "0.33.0": ("VLLM_USE_MEGA_AOT_ARTIFACT", False)}


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_each_release_its_own_key(release: str, pip_snapshot: Callable[..., Snapshot]) -> None:
    from recon.engine.config import engine_config

    facts = engine_config(pip_snapshot(f"vllm=={release}"), "vllm serve /m/llama --max-model-len 4096",
                          json.loads(LLAMA.read_text()), gpu="h100")
    cache = facts.compile_cache
    assert cache is not None and cache.unavailable is None
    assert cache.env_hash and cache.config_hash
    missing, has_aot = RELEASES[release]
    assert bool(cache.aot) is has_aot
    if missing:
        assert missing in (cache.aot_missing or "")
    assert not [w for w in facts.warnings if w.get("stage") == "compile_cache"]
