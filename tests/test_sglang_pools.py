"""SGLang's memory pools and decode CUDA graph sizes, from the release's own sizing.

The expected values are computed here from the model's public config facts
(layer counts, heads, state shapes) and SGLang's start-up arithmetic as its
documentation and logs describe it: the KV budget is the free memory after the
weights minus ``(1 - mem_fraction_static)`` of the memory before; a hybrid
model gives ``mamba_full_memory_ratio / (1 + ratio)`` of it to mamba state
slots (one padding slot besides); the rest divided by the per-token KV bytes is
``#tokens``. recon's answer comes from the release's code in the sandbox; a
wrong TP size, dtype, layer count, memory figure or ratio breaks the equality.
The release's own log lines (``KV Cache is allocated``, ``Mamba Cache is
allocated``) are checked against the same arithmetic.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from recon.engine.sglang import MemoryFigures, ServerArgsFacts, SglangNotApplicable, server_args
from recon.errors import ReconError
from recon.examples import EXAMPLES_DIR
from recon.snapshots.model import Snapshot

pytestmark = pytest.mark.wheels  # real SGLang releases from PyPI, imported in the sandbox

GIB = 1 << 30
LAUNCH = "python -m sglang.launch_server --model-path {model} "
QWEN = ("qwen3-next-80b-a3b-instruct", "Qwen/Qwen3-Next-80B-A3B-Instruct")
LLAMA = ("llama-3.1-8b-instruct", "meta-llama/Llama-3.1-8B-Instruct")


def _config(name: str) -> dict[str, Any]:
    return json.loads((EXAMPLES_DIR / f"{name}.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def sglang(pip_snapshot: Callable[..., Snapshot]) -> Snapshot:
    return pip_snapshot("sglang==0.5.23")


def _pools(snap: Snapshot, model: tuple[str, str], flags: str, available: tuple[float, ...],
           pre: float = 78.0, graphs: bool = False) -> ServerArgsFacts:
    return server_args(snap, LAUNCH.format(model=model[1]) + flags, _config(model[0]),
                       gpu="h100", memory=MemoryFigures(available, (pre,) * len(available),
                                                        graphs=graphs))


def _kv_budget_gib(available: float, pre: float, fraction: float) -> float:
    return available - pre * (1 - fraction)


def _kv_bytes_per_token(cfg: dict[str, Any], tp: int, layers: int) -> int:
    """K and V of every attention layer, the KV heads split over TP (at least one per rank)."""
    heads = max(1, cfg["num_key_value_heads"] // tp)
    return 2 * heads * cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"]) \
        * layers * 2  # bfloat16


def _gdn_state_bytes_per_request(cfg: dict[str, Any], tp: int) -> int:
    """Qwen3-Next's linear-attention state per request: conv window (bf16) + SSM state (fp32)."""
    key_dim = cfg["linear_num_key_heads"] * cfg["linear_key_head_dim"]
    value_dim = cfg["linear_num_value_heads"] * cfg["linear_value_head_dim"]
    conv = (2 * key_dim + value_dim) // tp * (cfg["linear_conv_kernel_dim"] - 1) * 2
    ssm = cfg["linear_num_value_heads"] // tp * cfg["linear_key_head_dim"] \
        * cfg["linear_value_head_dim"] * 4
    linear_layers = cfg["num_hidden_layers"] - cfg["num_hidden_layers"] \
        // cfg["full_attention_interval"]
    return (conv + ssm) * linear_layers


@pytest.mark.parametrize("tp", [1, 4])
def test_dense_kv_tokens_follow_the_memory_arithmetic(sglang: Snapshot, tp: int) -> None:
    cfg = _config(LLAMA[0])
    facts = _pools(sglang, LLAMA, f"--tp {tp}", (60.0,))
    point = facts.pools["points"][0]  # type: ignore[index]
    cell = _kv_bytes_per_token(cfg, tp, cfg["num_hidden_layers"])
    budget = _kv_budget_gib(60.0, 78.0, point["mem_fraction_static"])
    assert point["max_total_num_tokens"] == int(budget * GIB) // cell
    assert point["pools_built"] is True and point["kv_cache_dtype"] == "bfloat16"
    half = point["max_total_num_tokens"] * cell / 2 / GIB
    assert f"#tokens: {point['max_total_num_tokens']}, K size: {half:.2f} GB, " \
           f"V size: {half:.2f} GB" in "\n".join(point["log"])
    # no mamba, no cap: the release's own estimate bounds the request slots
    assert point["max_mamba_cache_size"] is None
    assert 2048 <= point["max_running_requests"] <= point["max_total_num_tokens"] // 2
    assert point["req_to_token_pool_size"] == point["max_running_requests"]


def test_hybrid_mamba_slots_and_kv_tokens(sglang: Snapshot) -> None:
    cfg = _config(QWEN[0])
    facts = _pools(sglang, QWEN, "--tp 4", (60.0, 40.0))
    ratio = float(facts.server_args["mamba_full_memory_ratio"])
    per_request = _gdn_state_bytes_per_request(cfg, 4)
    cell = _kv_bytes_per_token(cfg, 4, cfg["num_hidden_layers"] // cfg["full_attention_interval"])
    points = facts.pools["points"]  # type: ignore[index]
    for point, available in zip(points, (60.0, 40.0), strict=True):
        budget = _kv_budget_gib(available, 78.0, point["mem_fraction_static"])
        mamba_bytes = budget * ratio / (1 + ratio) * GIB
        slots = int((mamba_bytes - per_request) // per_request)
        assert point["max_mamba_cache_size"] == slots
        rest = budget - (slots + 1) * per_request / GIB
        assert point["max_total_num_tokens"] == int(rest * GIB) // cell
        log = "\n".join(point["log"])
        assert f"Mamba Cache is allocated. max_mamba_cache_size: {slots}," in log
        # five state slots per running request here: the release logs the cap
        assert point["max_running_requests"] == slots // 5
        assert "capped to" in log
    assert points[1]["max_total_num_tokens"] < points[0]["max_total_num_tokens"]


def _mamba2_state_bytes_per_request(cfg: dict[str, Any], tp: int) -> int:
    """Nemotron-H's Mamba2 state per request: conv window (bf16) + SSM state (fp32)."""
    inner = cfg["mamba_num_heads"] * cfg["mamba_head_dim"]
    conv = (inner + 2 * cfg["n_groups"] * cfg["ssm_state_size"]) // tp \
        * (cfg["conv_kernel"] - 1) * 2
    ssm = cfg["mamba_num_heads"] // tp * cfg["mamba_head_dim"] * cfg["ssm_state_size"] * 4
    return (conv + ssm) * cfg["hybrid_override_pattern"].count("M")


def test_mamba2_hybrid_with_a_request_cap(sglang: Snapshot) -> None:
    """Nemotron-H: Mamba2 state slots, 4 attention layers, --max-running-requests 64."""
    model = ("nemotron-h-8b-base-8k", "nvidia/Nemotron-H-8B-Base-8K")
    cfg = _config(model[0])
    facts = _pools(sglang, model, "--tp 1 --max-running-requests 64", (60.0,))
    point = facts.pools["points"][0]  # type: ignore[index]
    ratio = float(facts.server_args["mamba_full_memory_ratio"])
    per_request = _mamba2_state_bytes_per_request(cfg, 1)
    budget = _kv_budget_gib(60.0, 78.0, point["mem_fraction_static"])
    slots = int((budget * ratio / (1 + ratio) * GIB - per_request) // per_request)
    assert point["max_mamba_cache_size"] == slots
    cell = _kv_bytes_per_token(cfg, 1, cfg["hybrid_override_pattern"].count("*"))
    rest = budget - (slots + 1) * per_request / GIB
    assert point["max_total_num_tokens"] == int(rest * GIB) // cell
    # the state pool, not the flag, bounds the running requests: the release says by how much
    per = re.search(r"(\d+) state slots per request", "\n".join(point["log"]))
    assert per is not None
    assert point["max_running_requests"] == min(64, slots // int(per.group(1))) < 64


def test_page_size_aligns_the_pool(sglang: Snapshot) -> None:
    cfg = _config(LLAMA[0])
    point = _pools(sglang, LLAMA, "--tp 1 --page-size 64", (60.0,)).pools[  # type: ignore[index]
        "points"][0]
    cell = _kv_bytes_per_token(cfg, 1, cfg["num_hidden_layers"])
    tokens = int(_kv_budget_gib(60.0, 78.0, point["mem_fraction_static"]) * GIB) // cell
    assert point["page_size"] == 64
    assert point["max_total_num_tokens"] == tokens // 64 * 64


def test_speculative_pool_is_sized_without_building_the_kv_pool(sglang: Snapshot) -> None:
    """NEXTN's KV pool warms a copy kernel up at construction: the sizing alone answers."""
    facts = _pools(sglang, QWEN, "--tp 4 --speculative-algorithm NEXTN", (60.0,), graphs=True)
    point = facts.pools["points"][0]  # type: ignore[index]
    assert point["pools_built"] is False and "meta" in point["pools_not_built"]
    assert point["max_running_requests"] == facts.server_args["max_running_requests"] == 48
    assert point["req_to_token_pool_size"] == 48
    graphs = point["graphs"]
    draft_tokens = facts.server_args["speculative_num_draft_tokens"]
    assert graphs["tokens_per_request"] == draft_tokens
    assert graphs["capture_bs"] == [b for b in graphs["configured_bs"] if b <= 48]


def test_dflash_draft_layers_share_the_kv_budget(sglang: Snapshot) -> None:
    """DFLASH's draft keeps its own KV per token: 5 layers of the same heads beside the 36."""
    target, draft = _config("qwen3-8b"), _config("qwen3-8b-dflash-b16")
    flags = ("--speculative-algorithm DFLASH --speculative-draft-model-path "
             "z-lab/Qwen3-8B-DFlash-b16")
    facts = server_args(sglang, LAUNCH.format(model="Qwen/Qwen3-8B") + flags, target,
                        gpu="h100", draft_config=draft,
                        memory=MemoryFigures((60.0,), (78.0,)))
    point = facts.pools["points"][0]  # type: ignore[index]
    per_layer = _kv_bytes_per_token(target, 1, 1)
    cell = per_layer * (target["num_hidden_layers"] + draft["num_hidden_layers"])
    budget = _kv_budget_gib(60.0, 78.0, point["mem_fraction_static"])
    assert point["max_total_num_tokens"] == int(budget * GIB) // cell
    assert point["max_running_requests"] == facts.server_args["max_running_requests"]


def test_eagle_draft_layer_is_charged_per_token(sglang: Snapshot) -> None:
    """EAGLE with a one-layer draft config: its layer joins every token's KV cost."""
    target = _config(LLAMA[0])
    draft = {**target, "architectures": ["LlamaForCausalLMEagle"], "num_hidden_layers": 1}
    flags = ("--speculative-algorithm EAGLE --speculative-draft-model-path "
             "lmsys/sglang-EAGLE-LLaMA3-Instruct-8B --speculative-num-steps 3 "
             "--speculative-eagle-topk 4 --speculative-num-draft-tokens 8")
    facts = server_args(sglang, LAUNCH.format(model=LLAMA[1]) + flags, target, gpu="h100",
                        draft_config=draft, memory=MemoryFigures((60.0,), (78.0,)))
    point = facts.pools["points"][0]  # type: ignore[index]
    per_layer = _kv_bytes_per_token(target, 1, 1)
    cell = per_layer * (target["num_hidden_layers"] + draft["num_hidden_layers"])
    budget = _kv_budget_gib(60.0, 78.0, point["mem_fraction_static"])
    assert point["max_total_num_tokens"] == int(budget * GIB) // cell


def test_capture_sizes_are_clamped_to_the_request_pool(sglang: Snapshot) -> None:
    facts = _pools(sglang, QWEN, "--tp 4", (60.0,), graphs=True)
    point = facts.pools["points"][0]  # type: ignore[index]
    slots = point["req_to_token_pool_size"]
    configured = facts.server_args["cuda_graph_config"]["decode"]["bs"]
    assert point["graphs"]["configured_bs"] == configured
    # the largest configured sizes exceed the pool: the pool's own size is captured instead
    assert max(configured) > slots
    assert point["graphs"]["capture_bs"] == sorted({*(b for b in configured if b <= slots), slots})
    assert point["graphs"]["tokens_per_request"] == 1


def test_older_release_is_not_applicable_and_says_why(pip_snapshot: Callable[..., Snapshot]
                                                      ) -> None:
    snap = pip_snapshot("sglang==0.5.10")
    with pytest.raises(SglangNotApplicable, match="no sglang.srt.mem_cache.kv_cache_configurator.KVCacheConfigurator"):
        _pools(snap, LLAMA, "--tp 1", (60.0,))


def test_pipeline_stages_are_refused(sglang: Snapshot) -> None:
    with pytest.raises(SglangNotApplicable, match="pipeline stage"):
        _pools(sglang, LLAMA, "--tp 1 --pp-size 2", (60.0,))


def test_memory_figures_are_checked() -> None:
    with pytest.raises(ReconError, match="at most the free memory before"):
        MemoryFigures((80.0,), (78.0,))
    with pytest.raises(ReconError, match="one pre-load figure"):
        MemoryFigures((60.0, 50.0), (78.0,))


def _recipe(snap: Snapshot, name: str, flags: str, *sets: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "recon", "recipe", "run", name, "--snapshot", str(snap.root),
           "--config", f"example:{LLAMA[0]}", "--flags", flags, "--json"]
    for item in sets:
        cmd += ["--set", item]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)  # noqa: S603


def test_recipe_json_and_the_missing_figure(sglang: Snapshot) -> None:
    flags = LAUNCH.format(model=LLAMA[1]) + "--tp 1"
    done = _recipe(sglang, "sglang-memory-pools", flags, "available_gb=60", "pre_load_gb=78")
    assert done.returncode == 0, done.stderr
    values = json.loads(done.stdout)["values"]
    assert all(k.isidentifier() for k in values)
    assert isinstance(values["max_total_num_tokens"], int) and values["available_gb"] == 60.0
    missing = _recipe(sglang, "sglang-memory-pools", flags)
    assert missing.returncode == 2 and "Load weight end" in missing.stderr


def test_post_capture_resizing_is_not_answered_with_exit_0(sglang: Snapshot) -> None:
    """With post-capture KV sizing the engine's final pool depends on memory after capture."""
    flags = "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=1 " + LAUNCH.format(model=LLAMA[1])
    done = _recipe(sglang, "sglang-memory-pools", flags, "available_gb=60", "pre_load_gb=78")
    assert done.returncode == 7, done.stderr
    assert json.loads(done.stdout)["undecided"].startswith("the engine resizes its KV pool")


def test_cuda_graph_recipe_places_running_batches(sglang: Snapshot) -> None:
    flags = LAUNCH.format(model=LLAMA[1]) + "--tp 1 --max-running-requests 100"
    done = _recipe(sglang, "sglang-cuda-graphs", flags, "available_gb=60", "pre_load_gb=78",
                   "batch=1,3,100,101")
    assert done.returncode == 0, done.stderr
    values = json.loads(done.stdout)["values"]
    captured = values["cuda_graph_capture_bs"]
    assert values["max_running_requests"] == 100 and max(captured) == 100
    served = {b: v["served"] for b, v in values["batches"].items()}
    assert served["1"] == "captured" and served["100"] == "captured"
    assert served["3"] in ("captured", f"padded to {min(b for b in captured if b >= 3)}")
    assert served["101"].startswith("never runs")


def _llama_log(tokens: int, slots_line: str = "") -> str:
    """An SGLang 0.5.23 start-up log of Llama-3.1-8B at TP 1 (its own line formats).

    The scheduler's request slots follow the release's estimate: 512 per context length of
    pool tokens, kept within 2048..4096, at most half the pool.
    """
    half = tokens * _kv_bytes_per_token(_config(LLAMA[0]), 1, 32) / 2 / GIB
    context = _config(LLAMA[0])["max_position_embeddings"]
    slots = min(max(min(int(tokens / context * 512), 4096), 2048), tokens // 2)
    return "\n".join([
        "[2026-12-03 10:00:00 TP0] Load weight begin. avail mem=78.00 GB",
        "[2026-12-03 10:00:09 TP0] Load weight end. elapsed=9.10 s, type=LlamaForCausalLM, "
        "dtype=torch.bfloat16, avail mem=60.00 GB, mem usage=18.00 GB.",
        f"[2026-12-03 10:00:09 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: "
        f"{tokens}, K size: {half:.2f} GB, V size: {half:.2f} GB",
        "[2026-12-03 10:00:09 TP0] Memory pool end. avail mem=13.00 GB",
        f"[2026-12-03 10:00:30 TP0] max_total_num_tokens={tokens}, chunked_prefill_size=8192, "
        f"max_prefill_tokens=16384, max_running_requests={slots}, context_len={context}, "
        "available_gpu_mem=11.50 GB", slots_line, ""])


def test_logs_predict_the_pool_from_the_logged_memory(sglang: Snapshot) -> None:
    """`recon logs`: the free memory the log printed goes in, the pool the log printed comes out.

    The log's #tokens is SGLang's arithmetic on the printed figures (computed here from the
    config, at H100's mem_fraction_static for TP 1 as the release resolves it); one token
    off in the other direction than rounding allows, and the row says mismatch.
    """
    from recon.logs import analyze

    fraction = _pools(sglang, LLAMA, "--tp 1", (60.0,)).pools["points"][0][  # type: ignore[index]
        "mem_fraction_static"]
    cell = _kv_bytes_per_token(_config(LLAMA[0]), 1, 32)
    tokens = int(_kv_budget_gib(60.0, 78.0, fraction) * GIB) // cell
    flags = LAUNCH.format(model=LLAMA[1]) + "--tp 1"
    config = EXAMPLES_DIR / f"{LLAMA[0]}.json"
    report = analyze(text=_llama_log(tokens), snapshot=sglang, config=config, flags=flags,
                     options={"gpu": "h100"})
    rows = {c.quantity: c for c in report.comparisons}
    assert rows["kv_pool_tokens"].status == "match", rows["kv_pool_tokens"]
    assert rows["kv_pool_tokens"].recipe == "sglang-memory-pools"
    assert rows["k_size_gb"].status == "match"
    assert rows["max_total_num_tokens"].status == "match", rows["max_total_num_tokens"]
    assert rows["max_running_requests"].status == "match", rows["max_running_requests"]
    assert {(i["option"], i["value"]) for i in report.inputs} >= {("available_gb", 60.0),
                                                                 ("pre_load_gb", 78.0)}
    # every number the log printed is predicted and agrees (a line printing free memory is
    # recon's own figure echoed back, and is not taken for the engine's)
    assert report.mismatches == [], [(c.quantity, c.observed, c.predicted)
                                     for c in report.mismatches]
    # a pool far outside what 0.005 GB of rounding can move
    off = analyze(text=_llama_log(tokens + 2000), snapshot=sglang, config=config, flags=flags,
                  options={"gpu": "h100"})
    row = {c.quantity: c for c in off.comparisons}["kv_pool_tokens"]
    assert row.status == "mismatch" and row.predicted == tokens


@pytest.mark.skipif(os.environ.get("RECON_ENGINE_ALL") != "1",
                    reason="each older release is a first-use environment of about two minutes "
                           "(RECON_ENGINE_ALL=1 runs it)")
@pytest.mark.parametrize("release", ["0.5.21", "0.5.22"])
def test_the_last_three_releases_size_alike(pip_snapshot: Callable[..., Snapshot],
                                            release: str) -> None:
    """0.5.21 and 0.5.22 have the same KVCacheConfigurator: the same arithmetic holds."""
    cfg = _config(QWEN[0])
    facts = _pools(pip_snapshot(f"sglang=={release}"), QWEN, "--tp 4", (60.0,))
    point = facts.pools["points"][0]  # type: ignore[index]
    ratio = float(facts.server_args["mamba_full_memory_ratio"])
    per_request = _gdn_state_bytes_per_request(cfg, 4)
    budget = _kv_budget_gib(60.0, 78.0, point["mem_fraction_static"])
    slots = int((budget * ratio / (1 + ratio) * GIB - per_request) // per_request)
    cell = _kv_bytes_per_token(cfg, 4, cfg["num_hidden_layers"] // cfg["full_attention_interval"])
    assert point["max_mamba_cache_size"] == slots
    assert point["max_total_num_tokens"] == int((budget - (slots + 1) * per_request / GIB)
                                                * GIB) // cell


def test_recipe_sizes_the_same_line_without_the_draft(sglang: Snapshot) -> None:
    """The DFLASH question of the field notes: the pool with and without the draft."""
    from recon.recipes import run_recipe

    target = _config("qwen3-8b")
    flags = (LAUNCH.format(model="Qwen/Qwen3-8B") + "--speculative-algo DFLASH "
             "--speculative-draft-model-path z-lab/Qwen3-8B-DFlash-b16")
    res = run_recipe("sglang-memory-pools", sglang, config=str(EXAMPLES_DIR / "qwen3-8b.json"),
                     flags=flags, options={"draft_config": "example:qwen3-8b-dflash-b16",
                                           "available_gb": 60, "pre_load_gb": 78})
    values = res.values
    assert values["draft_options_left_out"] == ["--speculative-algo", "DFLASH",
                                                "--speculative-draft-model-path",
                                                "z-lab/Qwen3-8B-DFlash-b16"]
    budget = _kv_budget_gib(60.0, 78.0, values["mem_fraction_static"])
    per_layer = _kv_bytes_per_token(target, 1, 1)
    assert values["without_draft"]["max_total_num_tokens"] == \
        int(budget * GIB) // (per_layer * target["num_hidden_layers"])
    assert values["max_total_num_tokens"] == int(budget * GIB) // (per_layer * (36 + 5))
    assert any(f.text.startswith("speculative decoding changes the KV pool by -")
               for f in res.findings)


def test_speculative_options_are_found_by_the_parser() -> None:
    """Abbreviations, ``=`` values and store_true flags, as argparse resolves them."""
    import argparse

    from recon.engine.sglang_child import without_speculative

    parser = argparse.ArgumentParser()
    parser.add_argument("--model-path")
    parser.add_argument("--speculative-algorithm")
    parser.add_argument("--speculative-num-steps", type=int)
    parser.add_argument("--speculative-adaptive", action="store_true")
    parser.add_argument("--tp-size")
    argv = ["--model-path", "M", "--speculative-algo", "EAGLE", "--speculative-num-steps=3",
            "--speculative-adaptive", "--tp-size", "2"]
    kept, dropped = without_speculative(parser, argv)
    assert kept == ["--model-path", "M", "--tp-size", "2"]
    assert dropped == ["--speculative-algo", "EAGLE", "--speculative-num-steps=3",
                       "--speculative-adaptive"]


def test_public_log_of_an_older_release_gets_no_number(pip_snapshot: Callable[..., Snapshot]
                                                       ) -> None:
    """A real 0.5.9 server's pool lines (public thread): no prediction, the reason, exit 6."""
    from pathlib import Path

    log = Path(__file__).parent / "data" / "logs" / "public" / "sglang-0.5.9-qwen3.5-397b-tp2.log"
    snap = pip_snapshot("sglang==0.5.9")
    done = subprocess.run([sys.executable, "-m", "recon", "logs", str(log), "--snapshot",  # noqa: S603
                           str(snap.root), "--json"], capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 6, done.stderr
    rows = {r["quantity"]: r for r in json.loads(done.stdout)["comparisons"]}
    for quantity in ("kv_pool_tokens", "max_total_num_tokens", "max_mamba_cache_size"):
        assert rows[quantity]["status"] == "no prediction"
        assert rows[quantity]["predicted"] is None
        assert "KVCacheConfigurator" in rows[quantity]["note"]
    assert rows["kv_pool_tokens"]["observed"] == 580364


def test_memory_figures_of_a_speculative_tp_log() -> None:
    """Two ranks and a draft model: the target's first 'begin' and the last 'end' before the
    pools, each the smallest over the ranks, as the engine reduces them."""
    from recon.logs import parse_text
    from recon.logs.setting import sglang_memory

    log = parse_text("\n".join([
        "[2026-12-03 10:00:00 TP0] Load weight begin. avail mem=78.50 GB",
        "[2026-12-03 10:00:00 TP1] Load weight begin. avail mem=78.40 GB",
        "[2026-12-03 10:00:09 TP0] Load weight end. elapsed=9.10 s, type=LlamaForCausalLM, "
        "avail mem=60.50 GB, mem usage=18.00 GB.",
        "[2026-12-03 10:00:09 TP1] Load weight end. elapsed=9.10 s, type=LlamaForCausalLM, "
        "avail mem=60.40 GB, mem usage=18.00 GB.",
        "[2026-12-03 10:00:10 TP0] Load weight begin. avail mem=60.50 GB",
        "[2026-12-03 10:00:11 TP0] Load weight end. elapsed=1.00 s, type=LlamaForCausalLMEagle, "
        "avail mem=59.70 GB, mem usage=0.80 GB.",
        "[2026-12-03 10:00:11 TP1] Load weight end. elapsed=1.00 s, type=LlamaForCausalLMEagle, "
        "avail mem=59.60 GB, mem usage=0.80 GB.",
        "[2026-12-03 10:00:12 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1000, "
        "K size: 0.10 GB, V size: 0.10 GB",
        "[2026-12-03 10:00:13 TP0] Load weight end. elapsed=1.00 s, type=X, avail mem=1.00 GB, "
        "mem usage=0.10 GB.", ""]), engine="sglang")
    taken = {s.option: (s.value, s.line) for s in sglang_memory(log)}
    assert taken == {"pre_load_gb": (78.4, 2), "available_gb": (59.6, 7)}


def test_a_refusal_of_the_release_is_not_an_answer(sglang: Snapshot) -> None:
    """The engine stops at start-up where its pool code refuses: no number, its error."""
    from recon.engine.config import EngineFailed

    with pytest.raises(EngineFailed, match="did not size its memory pools: ValueError"):
        _pools(sglang, LLAMA, "--tp 1 --enable-unified-memory", (60.0,))


def test_breakable_decode_graphs_are_captured(sglang: Snapshot) -> None:
    facts = _pools(sglang, QWEN, "--tp 4 --cuda-graph-backend-decode breakable", (60.0,),
                   graphs=True)
    graphs = facts.pools["points"][0]["graphs"]  # type: ignore[index]
    assert graphs["decode_backend"] == "breakable" and graphs["captured"] is True
    assert graphs["capture_bs"][-1] == facts.pools["points"][0]["req_to_token_pool_size"]  # type: ignore[index]
