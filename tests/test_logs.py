"""``recon logs`` without a snapshot: what the engine said, its errors, the known traps.

The logs under tests/data/logs are excerpts written in the wording of vLLM
0.10.2, 0.29.0, 0.33.0 and of two SGLang releases (see their README).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recon.cli import main
from recon.errors import ReconError
from recon.logs import analyze, parse_text, render_markdown

DATA = Path(__file__).parent / "data" / "logs"
V0102 = DATA / "vllm-0.10.2-qwen3-next-tp2.log"
V029 = DATA / "vllm-0.29.0-align-implicit-mtp.log"
V033 = DATA / "vllm-0.33.0-prediction-mismatch.log"
SG523 = DATA / "sglang-0.5.23-qwen3-next-nextn.log"
SGOLD = DATA / "sglang-0.5.x-old-eagle3.log"


def cli(args: list[str]) -> int:
    """Run ``recon ARGS``; its exit status."""
    try:
        main(args)
    except SystemExit as ex:
        return int(ex.code or 0)
    return 0


def traps(path: Path) -> dict[str, str]:
    return {t.code: t.level for t in analyze(path).log.traps}


@pytest.mark.parametrize("path, engine, version", [
    (V0102, "vllm", "0.10.2"), (V029, "vllm", "0.29.0"), (V033, "vllm", "0.33.0"),
    (SG523, "sglang", None), (SGOLD, "sglang", None)])
def test_engine_and_version(path: Path, engine: str, version: str | None) -> None:
    log = analyze(path).log
    assert (log.engine, log.version, log.starts) == (engine, version, 1)


def test_vllm_0_10_2_split_kv_lines_and_json_config() -> None:
    log = analyze(V0102).log
    assert log.value("kv_cache_tokens") == 973760
    assert log.value("max_concurrency") == pytest.approx(14.77)
    assert log.value("max_concurrency_len") == 262144 == log.value("max_model_len")
    assert log.value("attention_block_size") == 544
    sizes = log.value("cudagraph_capture_sizes")
    assert len(sizes) == 67 and sizes[0] == 1 and sizes[-1] == 512
    assert log.value("max_cudagraph_capture_size") == 512
    assert log.value("cudagraph_mode") == "FULL_AND_PIECEWISE"  # printed as [2, 1]
    assert log.args["tensor_parallel_size"] == 2 and log.args_line == 3
    # the KV lines are printed twice by the same process, the memory line once per rank
    kv = next(e for e in log.events if e.pattern == "vllm.kv_tokens.split")
    mem = next(e for e in log.events if e.pattern == "vllm.kv_memory")
    assert (kv.repeats, mem.repeats) == (2, 2)
    assert traps(V0102) == {"prefix-caching-ignored": "warn"}  # max len is the model's own


def test_vllm_0_29_align_switched_on_implicitly() -> None:
    report = analyze(V029)
    log = report.log
    assert log.value("mamba_cache_mode") == "align"
    assert "mamba_cache_mode" not in log.args
    trap = next(t for t in log.traps if t.code == "mamba-align-implicit")
    assert trap.level == "warn" and trap.lines == [6]
    assert "288 tokens" in trap.text and "vllm-mamba-align-column" in trap.hint


def test_vllm_0_29_capture_sizes_rounded_for_mtp() -> None:
    log = analyze(V029).log
    assert log.value("cudagraph_capture_sizes") == [1, 2, 4, 8, 16, 32, 64]
    assert log.value("num_speculative_tokens") == 3
    assert (log.value("cudagraph_graphs_decode"), log.value("cudagraph_graphs_mixed")) == (5, 5)
    trap = next(t for t in log.traps if t.code == "capture-sizes-rounded")
    assert trap.level == "warn"
    assert "[1, 2]" in trap.text and "more than 64 tokens (16 running requests x 4" in trap.text


def test_vllm_0_29_spec_windows_and_crash() -> None:
    log = analyze(V029).log
    lengths = [w["spec_mean_acceptance_length"] for w in log.spec_windows]
    assert lengths == [2.95, 2.30]
    assert log.spec_windows[1]["spec_per_position"] == [0.712, 0.384, 0.211]
    crash = log.errors[0]
    assert crash.count == 2  # TP2 and TP3, same exception
    assert crash.headline == "WorkerProc hit an exception."
    assert crash.exception == ("torch.AcceleratorError: CUDA error: an illegal memory access was "
                               "encountered")
    assert crash.first_frame.endswith("multiproc_executor.py:858 in worker_busy_loop")
    assert crash.last_frame.endswith("model_states/mamba_hybrid.py:115 in add_request")
    assert [e.line for e in log.errors] == [27, 44, 45]
    assert "RPC call to sample_tokens aborted" in log.errors[1].headline


def test_vllm_0_33_logo_stamps_and_oom_after_green_startup() -> None:
    log = analyze(V033).log
    assert log.observed["version"].value == "0.33.0"
    assert log.value("kv_cache_tokens") == 2740134
    assert log.value("gpu_util_suggested") == pytest.approx(0.9487)
    assert (log.value("cudagraph_graphs_piecewise"), log.value("cudagraph_graphs_full")) == (19, 10)
    oom = log.errors[0]
    assert oom.exception.startswith("torch.OutOfMemoryError: CUDA out of memory.")
    assert oom.last_frame.endswith("chunk_delta_h.py:357 in chunk_gated_delta_rule_fwd_h")
    got = traps(V033)
    assert got["oom-after-green-startup"] == "error"
    assert got["max-model-len-unchecked"] == "warn"
    assert got["mamba-align-implicit"] == "warn"
    assert "capture-sizes-rounded" not in got  # no speculative decoding here


def test_sglang_0_5_23_pools_cap_and_scheduler_traceback() -> None:
    log = analyze(SG523).log
    assert log.value("max_total_num_tokens") == 1318912
    assert log.value("kv_pool_tokens") == 1318912 and log.value("kv_dtype") == "torch.bfloat16"
    assert log.value("max_mamba_cache_size") == 144
    assert log.value("ssm_state_gb") == pytest.approx(18.56)
    assert log.value("intermediate_ssm_gb") == pytest.approx(3.09)
    assert log.value("cuda_graph_bs") == [1, 2, 4, 8, 12, 16, 24, 32, 36]
    assert log.value("max_running_requests") == 36 and log.args["max_running_requests"] == 48
    assert [w["spec_accept_length"] for w in log.spec_windows] == [2.61, 2.48]
    assert traps(SG523) == {"mamba-cache-caps-requests": "warn"}
    err = log.errors[0]
    assert (err.headline, err.exception) == ("Scheduler hit an exception",
                                             "IndexError: pop from an empty deque")
    assert err.last_frame.endswith("result_queue.py:88 in pop_and_process")


def test_sglang_old_format() -> None:
    log = analyze(SGOLD).log
    assert log.args["tp_size"] == 4 and log.args["speculative_algorithm"] == "EAGLE3"
    assert log.value("kv_pool_tokens") == 2795207 and "kv_dtype" not in log.observed
    assert log.value("cuda_graph_bs") == [1, 2, 4, 8, 12, 16, 24, 32]
    assert log.value("cuda_graph_secs") == pytest.approx(4.41)
    assert [w["spec_accept_length"] for w in log.spec_windows] == [3.21, 3.02, 1.18]
    assert log.errors == [] and log.traps == []


def test_chained_traceback_keeps_root_cause_and_frames() -> None:
    text = "\n".join([
        "ERROR 09-10 19:44:46 [core.py:1233] EngineCore encountered a fatal error.",
        "Traceback (most recent call last):",
        '  File "/v/shm_broadcast.py", line 705, in acquire_read',
        "    raise TimeoutError",
        "TimeoutError",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        '  File "/v/core.py", line 1233, in run_engine_core',
        "    raise RuntimeError(msg) from e",
        "RuntimeError: RPC call to sample_tokens timed out",
        "INFO 09-10 19:44:47 [api.py:1] Application startup complete.",
    ])
    log = parse_text(text)
    assert len(log.errors) == 1
    err = log.errors[0]
    assert err.headline == "EngineCore encountered a fatal error."
    assert (err.cause, err.exception) == ("TimeoutError",
                                          "RuntimeError: RPC call to sample_tokens timed out")
    assert err.first_frame == "/v/shm_broadcast.py:705 in acquire_read"
    assert err.last_frame == "/v/core.py:1233 in run_engine_core"
    assert log.value("ready") is True  # the traceback ended; normal lines are read again


def test_spec_collapse_is_a_warning() -> None:
    """Seed 002's signature: acceptance far below k, late positions near zero."""
    text = "\n".join(
        f"INFO 09-01 10:00:{i:02d} [metrics.py:120] SpecDecoding metrics: Mean acceptance "
        f"length: 1.75, Accepted throughput: 7.50 tokens/s, Drafted throughput: 70.00 tokens/s, "
        f"Accepted: 75 tokens, Drafted: 700 tokens, Per-position acceptance rate: 0.500, 0.200, "
        f"0.030, 0.010, 0.000, 0.000, 0.000, Avg Draft acceptance rate: 10.7%" for i in range(3))
    text = ("INFO 09-01 09:59:00 [api.py:1] non-default args: {'speculative_config': "
            "{'method': 'dflash', 'num_speculative_tokens': 7}}\n" + text)
    log = analyze(text=text).log
    trap = next(t for t in log.traps if t.code == "spec-acceptance-low")
    assert "1.75 tokens/step" in trap.text and "[2, 3, 4, 5, 6]" in trap.text


def test_two_starts_in_one_file() -> None:
    once = V0102.read_text()
    log = parse_text(once + once.replace("Available KV cache memory: 44.59",
                                         "Available KV cache memory: 40.02"))
    assert log.starts == 2
    obs = log.observed["available_kv_cache_memory_gib"]
    assert obs.value == pytest.approx(40.02) and obs.line > 38  # the last start-up wins
    assert {s["value"] for s in obs.seen} == {44.59, 40.02}
    assert any(t.code == "several-starts" for t in analyze(text=once + once).log.traps)


def test_unknown_text_is_not_an_error() -> None:
    report = analyze(text="hello\nworld\n")
    assert report.log.engine is None and report.log.events == []
    assert "No engine line recognised" in render_markdown(report)


def test_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["logs", str(V029), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["log"]["engine"] == "vllm" and data["snapshot"] is None
    assert data["log"]["observed"]["attention_block_size"]["value"] == 288
    assert {t["code"] for t in data["log"]["traps"]} >= {"mamba-align-implicit",
                                                         "capture-sizes-rounded"}


def test_cli_markdown_file_and_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.md"
    assert cli(["logs", str(SG523), "--markdown", str(out)]) == 0
    md = out.read_text()
    assert md.startswith("## Server log")
    assert "| 11 | 2026-08-14 10:21:45 | TP0 | running requests capped by mamba cache to 36" in md
    assert "mamba-cache-caps-requests" in md
    assert "What the engine said" in capsys.readouterr().out  # tables were printed too


def test_cli_missing_log(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["logs", "/nonexistent/server.log"]) == ReconError.exit_code
    assert "log not found" in capsys.readouterr().err
