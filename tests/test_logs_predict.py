"""Predicted vs observed: the recipes run on real vLLM releases from PyPI against a log.

The 0.10.2 log's alignment numbers (544 tokens, 1.49%) and its 67 capture
sizes are what a public run of that release printed for Qwen3-Next-80B at
TP 2, so a match there is checked against the engine itself. The 0.33.0 log
printed what FlashInfer's GDN prefill on Hopper leads to (checkpoints every 64
tokens): recon's default assumption disagrees, and says so, until the
assumption is changed with ``--set``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

import recon.logs
from recon.cli import main
from recon.examples import EXAMPLES_DIR
from recon.logs import analyze, compare, render_markdown
from recon.logs.compare import Link
from recon.snapshots.model import Snapshot

#: recon's reading of the flags (engine mode: tests/test_engine_recipes.py)
SLICE = {"mode": "slice"}

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "logs"
CONFIG = EXAMPLES_DIR / "qwen3-next-80b-a3b-instruct.json"
V0102 = DATA / "vllm-0.10.2-qwen3-next-tp2.log"
V033 = DATA / "vllm-0.33.0-prediction-mismatch.log"
ALL_LINKS = list(compare.LINKS)


@pytest.fixture(scope="module")
def vllm_026_logs(pip_snapshot: Callable[..., Snapshot]) -> Snapshot:
    return pip_snapshot("vllm==0.26.0")


@pytest.fixture(scope="module")
def vllm_0102(pip_snapshot: Callable[..., Snapshot]) -> Snapshot:
    return pip_snapshot("vllm==0.10.2")


def only(monkeypatch: pytest.MonkeyPatch, *recipes: str) -> None:
    """Run just these recipes (a test about one link need not pay for all of them)."""
    monkeypatch.setattr(compare, "LINKS", [lk for lk in ALL_LINKS if lk.recipe in recipes])
    monkeypatch.setattr(compare, "CHECKS", {})


def by_quantity(report: object) -> dict[str, object]:
    return {c.quantity: c for c in report.comparisons}  # type: ignore[attr-defined]


def test_public_run_matches_prediction(vllm_0102: Snapshot) -> None:
    report = analyze(V0102, snapshot=vllm_0102, config=CONFIG, options=SLICE)
    assert report.flags_from == "the log's argument line (line 3)"
    assert report.flags["tensor_parallel_size"] == 2
    rows = by_quantity(report)
    assert (rows["attention_block_size"].status, rows["attention_block_size"].predicted) == \
        ("match", 544)
    assert rows["mamba_padding_pct"].status == "match"
    assert rows["mamba_padding_pct"].predicted == pytest.approx(1.49)
    assert rows["cudagraph_capture_sizes"].status == "match"  # all 67 sizes
    assert rows["max_cudagraph_capture_size"].status == "match"
    assert rows["hybrid_prefix_caching_disabled"].status == "match"  # what the release logged
    assert report.recipes["vllm-hybrid-page-align"] == "ran"
    # KV capacity: the engine's own "Available KV cache memory" is the recipe's input, and its
    # "GPU KV cache size" / "Maximum concurrency" (973,760 tokens, 14.77x, from the public run)
    # are what it must predict; a recipe that cannot run says why instead of a number
    assert report.inputs == [{"recipe": "kv-capacity", "option": "available_kv_gib",
                              "quantity": "available_kv_cache_memory_gib", "value": 44.59,
                              "line": 22}]
    assert (rows["kv_cache_tokens"].status, rows["kv_cache_tokens"].predicted) == \
        ("match", 973760)
    assert rows["max_concurrency"].status == "match"
    assert rows["max_concurrency"].predicted == pytest.approx(14.77)
    assert report.mismatches == []


def test_observed_disagrees_with_prediction(vllm_latest: Snapshot,
                                            capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    report = analyze(V033, snapshot=vllm_latest, config=CONFIG, options=SLICE)
    rows = by_quantity(report)
    block = rows["attention_block_size"]
    assert (block.status, block.observed, block.observed_line) == ("mismatch", 320, 9)
    assert isinstance(block.predicted, int) and block.predicted != 320
    assert rows["mamba_padding_pct"].status == "mismatch"
    assert rows["mamba_cache_mode"].status == "match"  # align, switched on by prefix caching
    assert rows["cudagraph_capture_sizes"].status == "match"
    assert {"attention_block_size", "mamba_padding_pct"} <= {c.quantity for c in report.mismatches}
    # align mode is on: the column check runs with the engine's own mamba block size
    assert {"recipe": "vllm-mamba-align-column", "option": "mamba_block_size",
            "quantity": "attention_block_size", "value": 320, "line": 9} in report.inputs
    assert report.checks and {c["recipe"] for c in report.checks} == {"vllm-mamba-align-column"}
    assert all("column" in c["text"] for c in report.checks)
    md = render_markdown(report)
    assert md.index("### Predicted vs observed") < md.index("### The release's code on this") \
        < md.index("### What the engine said")
    assert "| attention block size (hybrid alignment) | 320 (line 9) |" in md
    assert "MISMATCH" in md and f"{len(report.mismatches)} mismatches" in md
    # the CLI says it with its exit status too (the report is reused: no second recipe run)
    seen: dict[str, object] = {}

    def reuse(path: Path, **kwargs: object) -> object:
        seen.update(kwargs, path=path)
        return report

    monkeypatch.setattr(recon.logs, "analyze", reuse)
    try:
        main(["logs", str(V033), "--snapshot", str(vllm_latest.root), "--config", str(CONFIG),
              "--set", "gpu=sm90", "--markdown", "-"])
        rc = 0
    except SystemExit as ex:
        rc = int(ex.code or 0)
    assert rc == 1
    assert seen["snapshot"] == str(vllm_latest.root) and seen["options"] == {"gpu": "sm90"}
    assert seen["flags"] is None and seen["config"] == CONFIG
    assert capsys.readouterr().out.strip() == md.strip()


def test_changed_assumption_explains_the_mismatch(vllm_latest: Snapshot) -> None:
    """Every prediction (alignment, capture sizes, KV capacity) agrees once it is right."""
    report = analyze(V033, snapshot=vllm_latest, config=CONFIG,
                     options={**SLICE, "mamba_checkpoint_alignment": 64})
    rows = by_quantity(report)
    assert (rows["attention_block_size"].status, rows["attention_block_size"].predicted) == \
        ("match", 320)
    assert rows["mamba_padding_pct"].status == "match"
    assert report.mismatches == []


def test_flags_given_replace_the_argument_line(vllm_latest: Snapshot,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Flags other than the engine's show up as mismatches (here: no prefix caching)."""
    only(monkeypatch, "vllm-hybrid-page-align", "vllm-capture-sizes")
    report = analyze(V033, snapshot=vllm_latest, config=CONFIG,
                     flags="vllm serve m --tensor-parallel-size 4",
                     options={**SLICE, "mamba_checkpoint_alignment": 64})
    assert report.flags_from == "--flags" and report.flags == {"model": "m",
                                                               "tensor_parallel_size": 4}
    rows = by_quantity(report)
    assert (rows["mamba_cache_mode"].status, rows["mamba_cache_mode"].predicted) == \
        ("mismatch", "none")
    assert rows["max_cudagraph_capture_size"].status == "mismatch"


def test_missing_recipe_or_config_gives_no_prediction(vllm_0102: Snapshot,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compare, "LINKS", [
        Link("attention_block_size", "no-such-recipe", ("attention block size (tokens)",))])
    report = analyze(V0102, snapshot=vllm_0102, config=CONFIG)  # no recipe runs: no options
    row = by_quantity(report)["attention_block_size"]
    assert (row.status, row.predicted) == ("no prediction", None)
    assert row.note == "recipe no-such-recipe not available"
    assert report.recipes["no-such-recipe"] == "recipe no-such-recipe not available"

    only(monkeypatch, "vllm-hybrid-page-align")
    report = analyze(V0102, snapshot=vllm_0102)  # no --config: engine mode needs one too
    row = by_quantity(report)["attention_block_size"]
    assert row.status == "no prediction" and "needs a model config" in row.note
    assert any("no --config" in n for n in report.notes)


def test_sglang_log_with_sglang_snapshot(sglang_latest: Snapshot) -> None:
    """The pools are predicted from the memory figures the log printed (its numbers are
    invented: only the flow is checked here; tests/test_sglang_pools.py checks values)."""
    report = analyze(DATA / "sglang-0.5.23-qwen3-next-nextn.log", snapshot=sglang_latest,
                     config=CONFIG)
    assert report.flags["tensor_parallel_size"] == 2 and report.flags["max_num_seqs"] == 48
    row = by_quantity(report)["max_total_num_tokens"]
    assert row.observed == 1318912 and row.recipe == "sglang-memory-pools"
    assert row.status in ("match", "mismatch") and isinstance(row.predicted, int)
    used = {(i["option"], i["value"], i["line"]) for i in report.inputs}
    assert ("available_gb", 40.96, 4) in used and ("pre_load_gb", 78.98, 3) in used


PUBLIC_031 = DATA / "public" / "vllm-0.31.0-llama-3.1-8b-a100.log"
LLAMA = EXAMPLES_DIR / "llama-3.1-8b-instruct.json"


@pytest.mark.wheels
def test_public_031_default_share_and_kv_pool(pip_snapshot: Callable[..., Snapshot],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A public vLLM 0.31.0 start-up (Llama-3.1-8B, one A100 80GB, no flag but the model).

    Expected, from the log alone: the share in effect 0.92 (the release's default: the user
    gave none), 460,496 KV tokens from 56.21 GiB (Llama-3.1-8B keeps 32 layers x 8 KV heads x
    128 x K and V x 2 bytes = 128 KiB a token; 56.21 GiB, printed to 0.01, holds 460,431 to
    460,513 of them), and 3.51x at 131,072 tokens a request.
    """
    only(monkeypatch, "kv-capacity")
    snap = pip_snapshot("vllm==0.31.0")
    report = analyze(PUBLIC_031, snapshot=snap, config=LLAMA,
                     flags="vllm serve meta-llama/Llama-3.1-8B-Instruct",
                     options={"gpu": "a100-80"})
    rows = by_quantity(report)
    per_token = 32 * 8 * 128 * 2 * 2
    low, high = (int((56.21 + d) * (1 << 30)) // per_token for d in (-0.005, 0.005))
    assert low <= 460496 <= high
    assert (rows["gpu_util_current"].status, rows["gpu_util_current"].predicted) == ("match", 0.92)
    assert rows["kv_cache_tokens"].status == "match"
    assert low <= rows["kv_cache_tokens"].predicted <= high
    assert rows["max_concurrency"].status == "match"
    assert report.mismatches == []
    # a share the user did not run is a mismatch, not a match by rounding
    other = analyze(PUBLIC_031, snapshot=snap, config=LLAMA,
                    flags="vllm serve meta-llama/Llama-3.1-8B-Instruct "
                          "--gpu-memory-utilization 0.9", options={"gpu": "a100-80"})
    assert by_quantity(other)["gpu_util_current"].status == "mismatch"
    assert other.mismatches


DUMP = DATA / "vllm-0.26.0-args-compilation-dump.log"


def test_an_argument_line_with_a_dumped_sub_config_is_given_back_to_the_release(
        vllm_026_logs: Snapshot, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 38, class 7: the line vLLM 0.26.0 itself printed for ``vllm serve m
    --gpu-memory-utilization 0.5 --max-num-seqs 32 --compilation-config
    '{"cudagraph_capture_sizes":[1,2,4,8],"mode":3}'`` (the whole CompilationConfig dumped,
    enum reprs and all) is read as those flags, and the release takes them back: its capture
    sizes are the four typed."""
    from recon.engine.config import engine_config
    from recon.logs.argline import args_to_argv
    from recon.logs.parse import read_log

    only(monkeypatch, "vllm-capture-sizes")
    llama = ROOT / "tests" / "data" / "logs" / "real-h100" / "configs" / "llama8b.json"
    report = analyze(DUMP, snapshot=vllm_026_logs, config=llama)
    assert report.flags_from == "the log's argument line (line 2)"
    assert report.flags["max_num_seqs"] == 32 and report.flags["gpu_memory_utilization"] == 0.5
    argv = args_to_argv(read_log(DUMP).args, "vllm")
    facts = engine_config(vllm_026_logs, argv, json.loads(llama.read_text()), gpu="h100",
                          kv_memory_gib=40.0, logged_args=True).as_json()
    assert facts["cudagraph_capture_sizes"] == [1, 2, 4, 8]
    assert facts["max_num_seqs"] == 32


def test_an_argument_line_recon_cannot_read_is_named_as_the_cause(
        vllm_026_logs: Snapshot, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A line that is no value recon can read is never taken as \"no flags\" silently."""
    only(monkeypatch, "vllm-capture-sizes")
    log = tmp_path / "cut.log"
    head = DUMP.read_text().splitlines()[0]
    log.write_text(head + "\nINFO 12-07 17:58:35 [api_utils.py:273] non-default args: "
                   "{'model_tag': 'm', 'max_num_seqs': 32, 'x': [1, 2}\n")
    report = analyze(log, snapshot=vllm_026_logs)
    assert report.flags_from == "none: the log's argument line (line 2) could not be read"
    assert any("not a value recon can read" in n for n in report.notes)
