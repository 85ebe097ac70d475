"""``recon logs`` on logs of a real vLLM 0.26.0 engine (an H200, dummy weights), not invented ones.

The expected numbers are the README table of ``tests/data/logs/real/``, which was written
from the engine's own lines when the logs were captured; recon's reading of the same logs
and recon's predictions for the same release, config and flags are checked against it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from recon.logs import analyze
from recon.snapshots.model import Snapshot

REAL = Path(__file__).parent / "data" / "logs" / "real"
CONFIGS = {"Q": "qwen3next.json", "N": "nemotronh.json", "L": "llama.json",
           "M": "deepseekv2.json", "O": "gptoss.json", "G": "gemma3.json"}


def _table() -> dict[str, dict[str, str]]:
    """The README's runs table: case -> {column: cell}."""
    rows = [ln for ln in (REAL / "README.md").read_text().splitlines() if ln.startswith("| `")]
    head = next(ln for ln in (REAL / "README.md").read_text().splitlines()
                if ln.startswith("| case |"))
    cols = [c.strip() for c in head.strip("|").split("|")]
    out = {}
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        out[cells[0].strip("`")] = dict(zip(cols, cells, strict=True))
    return out


TABLE = _table()


def _number(cell: str) -> float | None:
    m = re.match(r"^([\d,]+(?:\.\d+)?)", cell)
    return float(m.group(1).replace(",", "")) if m else None


def test_every_captured_log_has_a_row() -> None:
    logs = {p.stem for p in REAL.glob("*.log")}
    assert len(logs) >= 12 and logs == set(TABLE)


@pytest.mark.parametrize("case", sorted(TABLE))
def test_reads_every_number_the_engine_printed(case: str) -> None:
    row, seen = TABLE[case], analyze(REAL / f"{case}.log").log
    got = {k: v.value for k, v in seen.observed.items()}
    assert seen.engine == "vllm" and seen.version == "0.26.0"
    assert got["available_kv_cache_memory_gib"] == _number(row["Available KV cache memory"])
    assert got["kv_cache_tokens"] == _number(row["GPU KV cache size"])
    assert got["max_concurrency"] == _number(row["max concurrency (4,096 tok)"])
    count, _, largest = row["capture sizes: n / max (config line)"].partition(" / ")
    if "eager" in largest:
        assert not got.get("cudagraph_capture_sizes")
    else:
        assert len(got["cudagraph_capture_sizes"]) == int(count)
        assert got["max_cudagraph_capture_size"] == int(largest)
    if row["block size"] != "—":
        assert got["attention_block_size"] == int(row["block size"])
    if row["padding"] != "—":
        assert got["mamba_padding_pct"] == _number(row["padding"])
    else:  # the block fits the mamba page exactly (fp8 KV, speculative decoding): no line
        assert "mamba_padding_pct" not in got
    mode = row["mamba cache mode"].split(";")[0].strip()
    if mode in ("align", "all", "none"):
        assert got["mamba_cache_mode"] == mode
    else:
        assert "mamba_cache_mode" not in got


#: Hybrid runs: the page-alignment numbers recon must predict from the release's own code.
HYBRID = ["N_default", "N_prefix", "Q_default", "Q_prefix"]


@pytest.fixture(scope="module")
def v026(pip_snapshot: Callable[..., Snapshot]) -> Snapshot:
    return pip_snapshot("vllm==0.26.0")


@pytest.mark.parametrize("case", HYBRID)
def test_page_alignment_predicted_as_the_engine_printed(case: str, v026: Snapshot) -> None:
    # as the runs were made: LLM(...) on an H200 (README of tests/data/logs/real)
    report = analyze(REAL / f"{case}.log", snapshot=v026, config=REAL / "configs" / CONFIGS[case[0]],
                     options={"gpu": "h200", "usage": "llm"}, memory_plan=False)
    rows = {c.quantity: c for c in report.comparisons}
    row = TABLE[case]
    for quantity, expected in (("attention_block_size", int(row["block size"])),
                               ("mamba_padding_pct", _number(row["padding"]))):
        assert rows[quantity].observed == expected
        predicted = rows[quantity].predicted  # the release's number; the log prints 2 decimals
        assert (round(predicted, 2), rows[quantity].status) == (expected, "match"), \
            rows[quantity].note
    mode = row["mamba cache mode"].split(";")[0].strip()
    if mode in ("align", "all"):
        assert (rows["mamba_cache_mode"].predicted, rows["mamba_cache_mode"].status) == \
            (mode, "match")
    assert report.mismatches == [], [(c.quantity, c.observed, c.predicted) for c in report.mismatches]


def _exit_for(report: dict[str, Any]) -> int:
    statuses = [c["status"] for c in report["comparisons"]]
    if "mismatch" in statuses:
        return 1
    if any(c["status"] == "no prediction" and c["recipe"] for c in report["comparisons"]):
        return 6
    return 0


def test_exit_status_says_what_was_not_predicted(v026: Snapshot) -> None:
    """A printed number without a prediction is never "0 mismatches, exit 0"."""
    cmd = [sys.executable, "-m", "recon", "logs", str(REAL / "N_prefix.log"), "--snapshot",
           str(v026.root), "--config", str(REAL / "configs" / CONFIGS["N"]), "--json"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    report = json.loads(res.stdout)
    assert res.returncode == _exit_for(report), res.stderr
    unpredicted = [c for c in report["comparisons"] if c["status"] == "no prediction"]
    assert all(c["note"] for c in unpredicted)  # each says why


def _config_of(case: str) -> Path:
    """The config.json of a run: the model folder its own argument line names."""
    log = analyze(REAL / f"{case}.log").log
    return REAL / "configs" / f"{Path(str(log.args['model'])).name}.json"


#: what the runs' environment held that no log line says (README): the compile cache key hashes it
RUN_ENV = ["--set", "engine_env=VLLM_USE_FLASHINFER_SAMPLER=0,CUDA_HOME=/usr/local/cuda",
           "--set", "engine_transformers=5.17.0"]


@pytest.mark.parametrize("case", sorted(TABLE))
def test_recon_logs_predicts_every_number_from_the_log_alone(case: str, v026: Snapshot) -> None:
    """``recon logs LOG --snapshot S --config C --memory-from-log`` and the runs' environment
    (README), nothing else: the flags, the GPU and the entry point come from the log itself,
    every number the engine printed that a recipe covers is predicted (the AOT compile folder
    too), and every prediction matches (the CLI's exit status 0). The KV chain starts from
    the log's available memory here; the memory plan (the default) is test_memory_plan's."""
    cmd = [sys.executable, "-m", "recon", "logs", str(REAL / f"{case}.log"), "--snapshot",
           str(v026.root), "--config", str(_config_of(case)), "--json", "--memory-from-log",
           *RUN_ENV]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    report = json.loads(res.stdout)
    rows = {c["quantity"]: c for c in report["comparisons"]}
    wrong = {q: (c["observed"], c["predicted"], c["status"], c["note"][:200])
             for q, c in rows.items() if c["status"] not in ("match", "not in log")}
    assert (res.returncode, wrong) == (0, {}), res.stderr[-600:]
    row = TABLE[case]
    must = ["kv_cache_tokens", "max_concurrency", "enable_prefix_caching", "tensor_parallel_size"]
    if "eager" not in row["capture sizes: n / max (config line)"]:
        must += ["cudagraph_capture_sizes", "max_cudagraph_capture_size", "aot_compile_hash"]
        must += (["cudagraph_graphs_piecewise", "cudagraph_graphs_full"]
                 if "V2" in row["graphs profiled"] else
                 ["cudagraph_graphs_mixed", "cudagraph_graphs_decode"])
    if row["block size"] != "—":
        must += ["attention_block_size"] + (["mamba_padding_pct"] if row["padding"] != "—" else [])
    assert all(rows[q]["status"] == "match" for q in must), {q: rows.get(q) for q in must}
    taken = {(i["option"], i["value"]) for i in report["inputs"]}
    usage = "serve" if "serve" in case else "llm"
    assert {("gpu", "h200"), ("usage", usage)} <= taken, report["inputs"]
    assert report["flags_from"].startswith("the log's argument line")

