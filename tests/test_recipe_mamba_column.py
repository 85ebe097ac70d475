"""vllm-mamba-align-column on real vLLM releases; every expected value worked out by hand.

``MambaHybridModelState.add_request`` in align mode seeds the running state at column
``(num_computed_tokens - 1) // divisor``; vLLM 0.29-0.31 divide by ``cache_config.block_size``,
0.32 and later by ``cache_config.mamba_block_size``. The mamba group's block-table row is
``MambaSpec.max_num_blocks_per_req`` in align mode: ``cdiv(max_model_len, mamba_block_size)
+ num_speculative_blocks`` (= num_speculative_tokens).
"""

from __future__ import annotations

import pytest

from recon.errors import ReconError
from recon.examples import EXAMPLES_DIR
from recon.recipes import run_recipe
from recon.snapshots.model import Snapshot

NAME = "vllm-mamba-align-column"
CONFIGS = EXAMPLES_DIR
FIELD_FLAGS = ("vllm serve M --enable-prefix-caching --max-model-len 272000 "
               "--speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 3}'")
# seed 000: a 101,376-token prefix, mamba block 1152, a 16-token block size in cache_config
FIELD = {"prefix_tokens": 101376, "mamba_block_size": 1152, "cache_block_size": 16}


def test_fixed_and_unfixed_release_side_by_side(pip_snapshot) -> None:  # noqa: ANN001
    # 0.32.0 divides by mamba_block_size: (101376 - 1) // 1152 = 87  (1152 * 87 = 100224)
    # 0.31.0 divides by block_size:       (101376 - 1) // 16 = 6335  (16 * 6335 = 101360)
    # row width: cdiv(272000, 1152) = 237 (1152 * 236 = 271872 < 272000) + 3 spec blocks = 240
    fixed = pip_snapshot("vllm==0.32.0")
    unfixed = pip_snapshot("vllm==0.31.0")
    res = run_recipe(NAME, fixed, flags=FIELD_FLAGS, options={**FIELD, "compare": unfixed})
    v = res.values
    assert v["running-state column"] == 87
    assert v["running-state column (vllm 0.31.0)"] == 6335
    assert v["mamba block-table row width"] == 240
    assert v["mamba block-table row width (vllm 0.31.0)"] == 240
    assert v["divisor"] == "mamba_block_size (= cache_config.mamba_block_size) = 1152"
    assert v["divisor (vllm 0.31.0)"] == "self.cache_config.block_size = 16"
    row = res.tables[0].rows[0]
    assert row == [101376, 87, 1152, 240, "in range", 6335, 16, 240, "OUT OF RANGE"]
    errors = [f.text for f in res.findings if f.level == "error"]
    assert len(errors) == 1 and "vllm 0.31.0" in errors[0] and "column 6335" in errors[0]
    files = {p.file for p in res.provenance}
    assert "vllm/v1/worker/gpu/model_states/mamba_hybrid.py" in files


def test_latest_release_with_equal_block_sizes(vllm_latest: Snapshot) -> None:
    # both fields 1152: (4096 - 1) // 1152 = 3; (272000 - 1) // 1152 = 236 (1152 * 236 = 271872)
    # -> both in a 240-wide row (237 + 3)
    res = run_recipe(NAME, vllm_latest, flags=FIELD_FLAGS,
                     options={"prefix_tokens": [4096, 271999], "mamba_block_size": 1152,
                              "cache_block_size": 1152})
    rows = {r[0]: r for r in res.tables[0].rows}
    assert rows[4096][1:] == [3, 1152, 240, "in range"]
    assert rows[271999][1:] == [236, 1152, 240, "in range"]
    assert all(f.level == "ok" for f in res.findings)
    assert any("releases that divide by either field agree" in n for n in res.notes)


def test_block_sizes_from_the_page_align_recipe(vllm_latest: Snapshot) -> None:
    # Qwen3-Next, TP 4, 3 MTP tokens, prefix caching (align mode), no block sizes given:
    # per GPU the GDN state is conv (3 + 3) x 2048 bf16 = 24576 B + ssm 8 x 128 x 128 bf16
    # = 262144 B -> 286720 B; one attention token = 2 (K,V) x 1 head x 256 x 2 B = 1024 B;
    # align mode: block = 16 * cdiv(286720, 16 * 1024) = 16 * 18 = 288 = mamba block size.
    # column: (101376 - 1) // 288 = 351 (288 * 351 = 101088);
    # row: cdiv(262144, 288) = 911 (288 * 910 = 262080) + 3 = 914.
    res = run_recipe(NAME, vllm_latest, config=CONFIGS / "qwen3-next-80b-a3b-instruct.json",
                     flags="vllm serve Q --tensor-parallel-size 4 --enable-prefix-caching "
                           "--max-model-len 262144 --speculative-config "
                           "'{\"method\": \"mtp\", \"num_speculative_tokens\": 3}'",
                     options={"prefix_tokens": 101376})
    assert res.inputs["cache_config.mamba_block_size"] == 288
    assert res.inputs["cache_config.block_size"] == 288
    assert res.values["running-state column"] == 351
    assert res.values["mamba block-table row width"] == 914


def test_not_applicable_before_align_mode(pip_snapshot) -> None:  # noqa: ANN001
    res = run_recipe(NAME, pip_snapshot("vllm==0.10.2"), flags=FIELD_FLAGS, options=FIELD)
    assert not res.applicable
    assert "no mamba 'align' cache mode" in res.reason


def test_inputs_it_cannot_guess(vllm_latest: Snapshot) -> None:
    with pytest.raises(ReconError, match="give the block sizes"):
        run_recipe(NAME, vllm_latest, flags=FIELD_FLAGS, options={"prefix_tokens": 5})
    with pytest.raises(ReconError, match="prefix_tokens: positive integers"):
        run_recipe(NAME, vllm_latest, flags=FIELD_FLAGS, options={**FIELD, "prefix_tokens": "x"})
