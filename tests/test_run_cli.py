"""``recon slice`` / ``recon run`` from the command line: files, tables, JSON, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recon.snapshots.model import Snapshot
from tests.kit import run_cli

ADJUST = "vllm.config.compilation:CompilationConfig.adjust_cudagraph_sizes_for_spec_decode"
DFLASH = "vllm.model_executor.models.qwen3_dflash"


def test_slice_writes_a_module(vllm_latest: Snapshot, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "adjust.py"
    code, stdout, _ = run_cli(capsys, "slice", str(vllm_latest.root), ADJUST, "-o", str(out))
    assert code == 0
    assert out.read_text().startswith("# recon slice of vllm 0.33.0")
    assert "round_up" in stdout  # the pieces table
    code, stdout, _ = run_cli(capsys, "slice", str(vllm_latest.root), ADJUST)  # to stdout
    assert stdout == out.read_text()
    code, stdout, _ = run_cli(capsys, "slice", str(vllm_latest.root), ADJUST, "--json")
    meta = json.loads(stdout)
    assert meta["targets"][0]["line"] == 1537 and len(meta["sha256"]) == 64


def test_run_json(vllm_latest: Snapshot, capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run_cli(capsys, "run", str(vllm_latest.root), ADJUST,
                           "--self", "cudagraph_capture_sizes=[1,2,4,8,16,32,64]",
                           "--self", "max_cudagraph_capture_size=64",
                           "--arg", "uniform_decode_query_len=4", "--json")
    assert code == 0
    res = json.loads(stdout)
    assert res["ok"] and res["mutations"] == [{
        "attr": "cudagraph_capture_sizes", "change": "changed",
        "before": [1, 2, 4, 8, 16, 32, 64], "after": [4, 8, 16, 32, 64]}]
    assert {p["file"] for p in res["provenance"]} == {"vllm/config/compilation.py",
                                                     "vllm/utils/math_utils.py"}


def test_run_tables_config_and_check(vllm_latest: Snapshot, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"num_hidden_layers": 2, "layer_types": ["sliding_attention"] * 2}))
    code, stdout, _ = run_cli(capsys, "run", str(vllm_latest.root),
                           f"{DFLASH}:dflash_has_any_non_causal", "--config", str(cfg))
    assert code == 0
    assert "returned" in stdout and "false" in stdout and "qwen3_dflash.py" in stdout
    # the error path of the release: shown, and --check turns it into a failure
    code, stdout, err = run_cli(capsys, "run", str(vllm_latest.root), ADJUST,
                           "--self", "cudagraph_capture_sizes=[1,2]",
                           "--self", "max_cudagraph_capture_size=2",
                           "--arg", "uniform_decode_query_len=4", "--check")
    assert code == 4 and "ValueError" in stdout
    assert "raised ValueError at vllm/config/compilation.py:1556" in err


def test_run_forbid_exit_code_and_message(vllm_latest: Snapshot, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"num_hidden_layers": 2,
                               "layer_types": ["sliding_attention", "full_attention"]}))
    code, _, err = run_cli(capsys, "run", str(vllm_latest.root), f"{DFLASH}:_resolve_layer_attention",
                        "--config", str(cfg), "--arg", "layer_idx=0",
                        "--forbid", "get_current_vllm_config")
    assert code == 4
    assert err.startswith("recon: error: forbidden stub")
    assert "qwen3_dflash.py:131" in err
    # the same with a stub that answers: the V2 runner is on
    code, stdout, _ = run_cli(capsys, "run", str(vllm_latest.root),
                           f"{DFLASH}:_resolve_layer_attention", "--config", str(cfg),
                           "--arg", "layer_idx=1", "--json",
                           "--stub", "get_current_vllm_config=lambda: ns(use_v2_model_runner=1)")
    assert code == 0 and json.loads(stdout)["value"] == [None, False]


def test_run_usage_errors(vllm_latest: Snapshot, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "run", str(vllm_latest.root), ADJUST, "--arg", "x=[1,")
    assert code == 2 and "--arg x: '[1,' is not JSON" in err and "--arg-py" in err
    code, _, err = run_cli(capsys, "run", str(vllm_latest.root), ADJUST, "--stub", "novalue")
    assert code == 2 and "expected NAME=VALUE" in err
    code, _, err = run_cli(capsys, "run", str(vllm_latest.root), f"{DFLASH}:dflash_has_any",
                        "--config", "/nonexistent/config.json")
    assert code == 2 and "did you mean dflash_has_any_non_causal" in err
