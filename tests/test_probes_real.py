"""A probe bundle inside a real vLLM 0.26.0 engine on an H200: what it logged, beside the engine.

``tests/data/logs/real/probes/<case>/`` is what the bundle wrote in the runs ``E_probe``
(``LLM(...)``, Qwen3-Next-shaped) and ``L_serve_probe`` (``vllm serve``, Llama-shaped), mounted
the way the README says (a read-only folder first on ``PYTHONPATH``). The expected values are
the engine's own log lines of the same run and the tokens of the same run without the bundle
(``Q_default``, ``L_serve``); nothing here is recon's prediction.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from recon.logs import read_log
from recon.probes.logread import iter_records, read_logs

REAL = Path(__file__).parent / "data" / "logs" / "real"
ALIGN = "vllm.platforms.interface:Platform._align_hybrid_block_size"
MEMORY = "vllm.v1.worker.gpu_worker:Worker.determine_available_memory"
KV = "vllm.v1.core.kv_cache_utils:get_kv_cache_configs"
SIZES = "vllm.config.vllm:VllmConfig._set_cudagraph_sizes"


def _calls(case: str) -> dict[str, list[dict[str, Any]]]:
    """target -> its call records, over every process of the run."""
    out: dict[str, list[dict[str, Any]]] = {}
    for path in sorted((REAL / "probes" / case).glob("*.jsonl")):
        records, bad = iter_records(path)
        assert bad == 0, path
        for rec in records:
            if rec.get("kind") == "call":
                out.setdefault(rec["target"], []).append(rec)
    return out


def _engine_pids(case: str) -> dict[str, int]:
    """The engine's processes as its own log names them: ``(EngineCore pid=N)`` prefixes."""
    text = (REAL / f"{case}.log").read_text(encoding="utf-8")
    return {name: int(pid) for name, pid in re.findall(r"^\((\w+) pid=(\d+)\)", text, re.M)}


def _items(value: Any) -> list[Any]:
    """A list as the runtime logs it: plain, or ``{"type": "list", "len", "items"}``."""
    return value["items"] if isinstance(value, dict) and "items" in value else value


@pytest.mark.parametrize("case", ["E_probe", "L_serve_probe"])
def test_every_engine_process_loaded_the_bundle(case: str) -> None:
    summary = read_logs(REAL / "probes" / case)
    by_pid = {p.pid: p for p in summary.processes}
    pids = _engine_pids(case)
    assert "EngineCore" in pids and (case != "L_serve_probe" or "APIServer" in pids)
    for name, pid in pids.items():
        proc = by_pid.get(pid)
        assert proc is not None and proc.verified, f"{name} pid {pid}: no VERIFY record"
        assert proc.errors == 0 and proc.log_error is None
        assert proc.env.get("PYTHONPATH", "").startswith("/opt/recon-probe:")
    core = by_pid[pids["EngineCore"]]  # the targets behind the numbers run in EngineCore
    assert {core.targets[t] for t in (MEMORY, KV, SIZES, ALIGN)} == {"patched"}
    assert summary.bad_lines == 0 and all(p.errors == 0 for p in summary.processes)


@pytest.mark.parametrize(("case", "block"), [("E_probe", True), ("L_serve_probe", False)])
def test_probed_values_are_the_logged_ones(case: str, block: bool) -> None:
    seen = read_log(REAL / f"{case}.log").observed
    calls = _calls(case)
    (memory,) = calls[MEMORY]
    free = memory["return"]
    assert round(free / 2**30, 2) == seen["available_kv_cache_memory_gib"].value
    (kv,) = calls[KV]
    assert _items(kv["expr"]["available_memory"]) == [free]
    sizes = {json.dumps(c["expr"], sort_keys=True) for c in calls[SIZES]}
    assert len(sizes) == 1  # every process resolved the same sizes
    expr = calls[SIZES][0]["expr"]
    assert expr["cudagraph_capture_sizes"]["len"] == len(seen["cudagraph_capture_sizes"].value)
    assert expr["max_cudagraph_capture_size"] == seen["max_cudagraph_capture_size"].value
    if block:
        (align,) = calls[ALIGN]
        assert align["expr"]["block_size"] == seen["attention_block_size"].value
    else:  # one attention group: the tokens the engine printed are its blocks x block size
        (blocks,), (sizes_of,) = _items(kv["expr"]["num_blocks"]), _items(kv["expr"]["block_sizes"])
        assert ALIGN not in calls
        assert blocks * _items(sizes_of)[0] == seen["kv_cache_tokens"].value


def _outputs(case: str) -> list[str]:
    text = (REAL / f"{case}.log").read_text(encoding="utf-8")
    return [re.sub(r"^(OUT2?) \S+ ", r"\1 ", line) for line in text.splitlines()
            if line.startswith(("OUT ", "OUT2 "))]


def test_the_engine_generates_the_same_tokens_with_the_bundle() -> None:
    with_bundle, without = _outputs("E_probe"), _outputs("Q_default")
    assert len(with_bundle) == 6 and with_bundle == without


def test_vllm_serve_answers_the_same_with_the_bundle() -> None:
    """The completion of the serve runs (0.26.0 returns no token ids unless asked, which
    these two runs did not: the answer's text, finish reason and token counts are compared)."""
    def answer(case: str) -> dict[str, Any]:
        (line,) = _outputs(case)
        body = json.loads(line.split(" ", 1)[1])
        return {"choices": body["choices"], "usage": body["usage"]}

    assert answer("L_serve_probe") == answer("L_serve")
    assert answer("L_serve")["usage"]["completion_tokens"] == 8


def test_vllm_serve_and_llm_generate_the_same_ids() -> None:
    """``L_serve2`` asked for its token ids: the same 8 as ``LLM(...)`` gave the same prompt."""
    (line,) = _outputs("L_serve2")
    ids = json.loads(line.split(" ", 1)[1])["choices"][0]["token_ids"]
    offline = next(o for o in _outputs("L_default") if o.startswith("OUT prompt_len=8 "))
    assert ids == json.loads(offline.split("tokens=", 1)[1])

