"""The memory plan before the engine starts, against real vLLM 0.26.0 start-ups on an H200.

Expected values are the engine's own lines in ``tests/data/logs/real/`` (``Model loading
took``, ``Available KV cache memory``, ``GPU KV cache size``), read here with plain regular
expressions; recon is given only what existed before each engine ran: the command line
(or the ``LLM(...)`` keyword arguments of the run's ``CASE`` line), the model's config.json,
the board and the release. The real runs had no FlashInfer installed, so they sampled
without it (``VLLM_USE_FLASHINFER_SAMPLER=0`` here says the same to the release).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from recon.engine.config import engine_config
from recon.snapshots.model import Snapshot

REAL = Path(__file__).parent / "data" / "logs" / "real"
MODEL = {"L": "llama", "Q": "qwen3next", "E": "qwen3next", "N": "nemotronh"}
#: one per runner and memory shape: V2 runner (serve), V1 hybrid MoE with CUDA graphs,
#: V1 Mamba hybrid eager with eight sequences (the forward, not the sampler, peaks)
CASES = ["L_serve", "E_probe", "N_eager_seqs8"]
#: LLM(...) keyword arguments a case line may carry beyond the common ones, as flags
FLAGS = {"max_num_seqs": "--max-num-seqs", "kv_cache_dtype": "--kv-cache-dtype",
         "enforce_eager": "--enforce-eager", "gdn_prefill_backend": "--gdn-prefill-backend"}


def _engine_lines(case: str) -> dict[str, float]:
    text = (REAL / f"{case}.log").read_text()

    def number(pattern: str) -> float:
        found = re.search(pattern, text)
        assert found, f"{case}: no line matching {pattern!r}"
        return float(found.group(1).replace(",", ""))

    return {"weights": number(r"Model loading took ([\d.]+) GiB"),
            "available": number(r"Available KV cache memory: (-?[\d.]+) GiB"),
            "tokens": number(r"GPU KV cache size: ([\d,]+) tokens")}


def _command(case: str) -> tuple[str, str]:
    """The run's command line as a user types it, and its usage context."""
    line = next(ln for ln in (REAL / f"{case}.log").read_text().splitlines()
                if ln.startswith("CASE "))
    if " command " in line:
        argv = line.split(" command ", 1)[1].split()
        serve = argv.index("serve")
        return "vllm serve m " + " ".join(argv[serve + 2:]), "serve"
    kwargs: dict[str, Any] = json.loads(line.split(" LLM kwargs ", 1)[1])
    flags = ["vllm serve m --load-format dummy --skip-tokenizer-init",
             f"--max-model-len {kwargs['max_model_len']}"]
    for key, flag in FLAGS.items():
        if key in kwargs:
            flags.append(flag if kwargs[key] is True else f"{flag} {kwargs[key]}")
    unknown = set(kwargs) - set(FLAGS) - {"model", "load_format", "skip_tokenizer_init",
                                          "max_model_len"}
    assert not unknown, f"{case}: kwargs this test does not translate: {unknown}"
    return " ".join(flags), "llm"


@pytest.fixture(scope="module")
def v026(pip_snapshot: Callable[..., Snapshot]) -> Snapshot:
    return pip_snapshot("vllm==0.26.0")


@pytest.mark.parametrize("case", CASES)
def test_memory_plan_matches_the_engine(case: str, v026: Snapshot) -> None:
    flags, usage = _command(case)
    config = json.loads((REAL / "configs" / f"{MODEL[case[0]]}.json").read_text())
    facts = engine_config(v026, flags, config, gpu="h200", usage=usage, memory_plan=True,
                          env={"VLLM_USE_FLASHINFER_SAMPLER": "0"}).facts
    engine = _engine_lines(case)
    assert facts["starts"] is True, facts.get("memory_not_predicted") or facts["startup_error"]
    # weights: within 1% or the log's 0.01 GiB rounding
    assert abs(facts["weights_gib"] - engine["weights"]) <= max(0.01 * engine["weights"], 0.005)
    # available KV memory and the KV tokens it gives: within 3%
    assert abs(facts["available_kv_gib"] - engine["available"]) <= 0.03 * engine["available"]
    assert abs(facts["kv_cache_tokens"] - engine["tokens"]) <= 0.03 * engine["tokens"]
    # every part is the sum the release's own arithmetic subtracts from its share
    parts = facts["weights_gib"] + facts["activation_peak_gib"] + facts["non_torch_gib"] \
        + facts["cudagraph_memory_gib"]
    assert abs(facts["requested_memory_gib"] - parts - facts["available_kv_gib"]) < 0.01


def test_a_share_above_the_free_memory_will_not_start(v026: Snapshot) -> None:
    """gpu_memory_utilization 0.999 of an H200 asks for more than is free at start-up (the
    CUDA context holds 0.51 GiB on the real runs): the release's own check refuses."""
    config = json.loads((REAL / "configs" / "llama.json").read_text())
    facts = engine_config(v026, "vllm serve m --max-model-len 4096 --gpu-memory-utilization "
                          "0.999", config, gpu="h200", memory_plan=True).facts
    assert facts["starts"] is False
    assert "less than desired GPU memory utilization" in facts["startup_error"]
    assert str(facts["startup_error_where"]).startswith("vllm/")
