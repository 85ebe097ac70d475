"""kv-capacity on real vLLM releases; every expected value worked out by hand.

The formulas, read from the releases' code:

* ``FullAttentionSpec.page_size_bytes`` = block_size x 2 (K and V) x kv_heads_per_gpu x
  head_size x dtype bytes; kv_heads_per_gpu = max(1, num_key_value_heads // tp).
* ``get_kv_cache_configs``: num_blocks = available // (bytes one block id takes in the pool
  = the largest group's layers x page bytes).
* ``get_max_concurrency_for_kv_cache_config`` = num_blocks / sum over groups of
  cdiv(max_memory_usage_bytes, page) (attention: cdiv(max_model_len, block_size) blocks;
  a mamba group without prefix caching: 1 block).
* 0.33.0 logs ``GPU KV cache size`` = int(concurrency x max_model_len); 0.10.2 logs
  num_blocks // number_of_groups x block_size.
"""

from __future__ import annotations

from typing import Any

import pytest

from recon.errors import ReconError
from recon.examples import EXAMPLES_DIR
from recon.recipes import run_recipe
from recon.snapshots.model import Snapshot


def run_sliced(name: str, snapshot: Any, *, options: dict[str, Any] | None = None,
               **kwargs: Any) -> Any:
    """The recipe's slicing mode (recon's reading of the flags; engine mode is tested in
    tests/test_engine_recipes.py)."""
    return run_recipe(name, snapshot, options={"mode": "slice", **(options or {})}, **kwargs)


NAME = "kv-capacity"
CONFIGS = EXAMPLES_DIR
LLAMA = CONFIGS / "llama-3.1-8b-instruct.json"
QWEN_NEXT = CONFIGS / "qwen3-next-80b-a3b-instruct.json"
GIB = 1 << 30


def test_dense_llama_tp2(vllm_latest: Snapshot) -> None:
    # Llama-3.1-8B: 32 layers, 8 KV heads, head 128, bf16; TP 2 -> 4 KV heads per GPU.
    # per token per layer: 2 x 4 x 128 x 2 B = 2048 B; block 16 -> page 32768 B;
    # pool bytes per block = 32 x 32768 = 1 MiB -> 40 GiB / 1 MiB = 40960 blocks;
    # a 131072-token request: 131072 / 16 = 8192 blocks -> 40960 / 8192 = 5.0;
    # GPU KV cache size = int(5.0 x 131072) = 655360 tokens = 16384 per GiB.
    res = run_sliced(NAME, vllm_latest, config=LLAMA,
                     flags="vllm serve L --tensor-parallel-size 2 --max-model-len 131072",
                     options={"available_kv_gib": 40})
    v = res.values
    assert v["KV heads per GPU"] == 4 and v["head size"] == 128
    assert v["attention KV bytes per token (all attention layers, per GPU)"] == 32 * 2048
    assert v["KV cache blocks (num_blocks)"] == 40 * GIB // (32 * 32768) == 40960
    assert v["maximum concurrency at 131072 tokens per request"] == 5.0
    assert v["GPU KV cache size (tokens)"] == 655360
    assert v["tokens per GiB of KV memory"] == 16384.0
    row = res.tables[0].rows[0]
    assert row[:5] == ["full attention", 32, 16, 32768, "2048"]
    assert row[5] == 8192 * 32768          # max_memory_usage_bytes of one layer
    assert any("Maximum concurrency for 131,072 tokens per request: 5.00x" in f.text
               for f in res.findings)


def test_dense_llama_fp8_kv_cache(vllm_latest: Snapshot) -> None:
    # TP 1 -> 8 KV heads; fp8 -> 1 byte: 2 x 8 x 128 x 1 = 2048 B per token per layer again;
    # page 32768 B, 1 MiB per block id -> 20 GiB = 20480 blocks; 8192 / 16 = 512 blocks per
    # request -> 20480 / 512 = 40.0; tokens = 40 x 8192 = 327680.
    res = run_sliced(NAME, vllm_latest, config=LLAMA,
                     flags="vllm serve L --kv-cache-dtype fp8 --max-model-len 8192",
                     options={"available_kv_gib": 20})
    v = res.values
    assert v["KV heads per GPU"] == 8
    assert v["KV cache blocks (num_blocks)"] == 20480
    assert v["maximum concurrency at 8192 tokens per request"] == 40.0
    assert v["GPU KV cache size (tokens)"] == 327680


def test_hybrid_qwen3_next_across_two_releases(pip_snapshot, vllm_latest: Snapshot) -> None:  # noqa: ANN001
    # Qwen3-Next, TP 4, no prefix caching: 12 full-attention layers (every 4th of 48),
    # 36 GDN layers. Attention: 1 KV head per GPU x 256 x 2 x 2 B = 1024 B per token.
    # GDN state per GPU: conv 3 x 2048 bf16 = 12288 B + ssm 8 x 128 x 128 bf16 = 262144 B
    # = 274432 B -> block = 16 * cdiv(274432, 16 * 1024) = 16 * 17 = 272, page 272 * 1024
    # = 278528 B (mamba padded to it). Groups of 12 layers: 3 mamba + 1 attention;
    # pool bytes per block = 12 x 278528 = 3342336 -> 40 GiB // 3342336 = 12850 blocks.
    # per request: cdiv(262144, 272) = 964 attention blocks + 3 x 1 mamba = 967
    # -> 12850 / 967 = 13.2885 -> 13.29.
    flags = "vllm serve Q --tensor-parallel-size 4 --max-model-len 262144"
    latest = run_sliced(NAME, vllm_latest, config=QWEN_NEXT, flags=flags,
                        options={"available_kv_gib": 40})
    old = run_sliced(NAME, pip_snapshot("vllm==0.10.2"), config=QWEN_NEXT, flags=flags,
                     options={"available_kv_gib": 40})
    for res in (latest, old):
        v = res.values
        assert v["attention KV bytes per token (all attention layers, per GPU)"] == 12 * 1024
        assert v["KV cache blocks (num_blocks)"] == 40 * GIB // (12 * 278528) == 12850
        assert v["KV cache groups"] == 4
        assert v["maximum concurrency at 262144 tokens per request"] == round(12850 / 967, 2)
        rows = {r[0]: r for r in res.tables[0].rows}
        assert rows["full attention"][1:5] == [12, 272, 278528, "1024"]
        assert rows["mamba state"][1] == 36 and rows["mamba state"][3] == 278528
    # the logged token count changed meaning between the releases:
    # 0.33.0: int(12850 / 967 * 262144) = 3483506; 0.10.2: 12850 // 4 * 272 = 873664
    assert latest.values["GPU KV cache size (tokens)"] == int(12850 / 967 * 262144) == 3483506
    assert old.values["GPU KV cache size (tokens)"] == 12850 // 4 * 272 == 873664


def test_needs_a_config(vllm_latest: Snapshot) -> None:
    with pytest.raises(ReconError, match="needs a model config"):
        run_sliced(NAME, vllm_latest, flags="vllm serve L")
    with pytest.raises(ReconError, match="available_kv_gib must be positive"):
        run_sliced(NAME, vllm_latest, config=LLAMA, flags="vllm serve L --max-model-len 8192",
                   options={"available_kv_gib": -1})
