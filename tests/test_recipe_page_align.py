"""vllm-hybrid-page-align on real releases, against values worked out by hand.

The formulas (quoted from the releases, so the arithmetic below can be checked):

* mamba page = sum(prod(shape) * dtype bytes) over the model's mamba state
  shapes (``MambaSpec.page_size_bytes``);
  gated delta net: conv (conv_dim / tp, kernel - 1 + k_spec) with
  conv_dim = 2 * key_heads * key_dim + value_heads * value_dim, temporal
  (value_heads / tp, value_dim, key_dim); Mamba2: conv_dim = heads * head_dim
  + 2 * n_groups * state, temporal (heads / tp, head_dim, state); Mamba1:
  conv (expand * hidden / tp, kernel - 1), temporal (expand * hidden / tp, state);
* attention page per token = 2 (K and V) * max(1, kv_heads // tp) * head_dim * bytes
  (MLA: 1 * (kv_lora_rank + rope_dim) * bytes);
* block = align * cdiv(mamba page, align * attention page per token), align = 16 for
  FlashAttention (0.33: max(kernel minimum, block size), 128 for MLA, lcm with the
  prefill checkpoint alignment in ``align`` mode);
* padding % = 100 * (block * attention page per token - mamba page) / mamba page.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from recon.examples import EXAMPLES_DIR
from recon.recipes import run_recipe
from recon.snapshots.model import Snapshot


def run_sliced(name: str, snapshot: Any, *, options: dict[str, Any] | None = None,
               **kwargs: Any) -> Any:
    """The recipe's slicing mode (recon's reading of the flags; engine mode is tested in
    tests/test_engine_recipes.py)."""
    return run_recipe(name, snapshot, options={"mode": "slice", **(options or {})}, **kwargs)


NAME = "vllm-hybrid-page-align"
CONFIGS = EXAMPLES_DIR
QWEN3_NEXT = CONFIGS / "qwen3-next-80b-a3b-instruct.json"
NEMOTRON_H = CONFIGS / "nemotron-h-8b-base-8k.json"
JAMBA = CONFIGS / "jamba-1.5-mini.json"
LLAMA = CONFIGS / "llama-3.1-8b-instruct.json"


@pytest.fixture(scope="module")
def vllm_0102(pip_snapshot) -> Snapshot:  # noqa: ANN001
    return pip_snapshot("vllm==0.10.2")


def _run(snap: Snapshot, config: Path | dict, flags: str, **options: object):  # noqa: ANN202
    res = run_sliced(NAME, snap, config=config, flags=flags, options=options)
    assert res.applicable, res.reason
    return res


def _logged(res) -> list[str]:  # noqa: ANN001
    prefix = "the release logged: "
    return [f.text[len(prefix):] for f in res.findings if f.text.startswith(prefix)]


def test_qwen3_next_tp4(vllm_latest: Snapshot) -> None:
    res = _run(vllm_latest, QWEN3_NEXT, "vllm serve Qwen/Qwen3-Next-80B-A3B-Instruct "
                                        "--tensor-parallel-size 4")
    v = res.values
    # conv_dim = 2*16*128 + 32*128 = 8192 -> 8192/4 = 2048 rows x (4-1) = 6144 el x 2 B = 12288
    # temporal = (32/4) x 128 x 128 = 131072 el x 2 B = 262144;  mamba page = 274432
    assert v["mamba state shapes (per GPU)"] == [[3, 2048], [8, 128, 128]]
    assert v["mamba state dtypes"] == ["torch.bfloat16", "torch.bfloat16"]
    assert v["mamba page size (bytes)"] == 12288 + 262144 == 274432
    # 2 KV heads // 4 -> max(1, 0) = 1 head: 2 x 1 x 256 x 2 B = 1024 bytes per token
    assert v["KV heads per GPU"] == 1 and v["head size"] == 256
    assert v["attention page per token (bytes)"] == 1024
    # 16 x cdiv(274432, 16 x 1024) = 16 x cdiv(16.75) = 16 x 17 = 272 tokens
    assert v["attention block size (tokens)"] == 272
    assert v["attention page size (bytes)"] == 272 * 1024 == 278528
    assert v["mamba page padded to (bytes)"] == 278528
    # 100 x (278528 - 274432) / 274432 = 100 x 4096 / 274432 = 1.4925...%
    assert v["mamba padding"] == "1.49%"
    assert v["mamba cache mode"] == "none"
    logged = _logged(res)
    assert "Setting attention block size to 272 tokens to ensure that attention page size is " \
           ">= mamba page size." in logged
    assert any(m.startswith("Padding mamba page size by 1.49%") for m in logged)
    where = {p.qualname: (p.file, len(p.sha256)) for p in res.provenance}
    assert where["vllm.platforms.interface:Platform._align_hybrid_block_size"] == \
        ("vllm/platforms/interface.py", 64)
    assert "vllm.model_executor.models.qwen3_next:Qwen3NextForCausalLM." \
           "get_mamba_state_shape_from_config" in where
    assert any("MultipleOf(16)" in n and "flash_attn.py" in n for n in res.notes)


def test_qwen3_next_fp8_kv_halves_the_token_page(vllm_latest: Snapshot) -> None:
    res = _run(vllm_latest, QWEN3_NEXT, "vllm serve m --tp 4 --kv-cache-dtype fp8 --block-size 16")
    v = res.values
    # fp8: 1 byte -> 2 x 1 x 256 x 1 = 512 bytes per token; 16 x cdiv(274432, 8192) = 16 x 34 = 544
    assert v["attention page per token (bytes)"] == 512
    assert v["attention block size (tokens)"] == 544
    # same attention page (544 x 512 = 278528) and so the same padding
    assert v["attention page size (bytes)"] == 278528 and v["mamba padding"] == "1.49%"
    assert any("--block-size 16 is overridden" in f.text for f in res.findings)


def test_qwen3_next_prefix_caching_align_mode(vllm_latest: Snapshot) -> None:
    flags = "vllm serve m --tp 4 --enable-prefix-caching"
    plain = _run(vllm_latest, QWEN3_NEXT, flags)
    # prefix caching -> the release's hybrid hook switches the mamba cache to 'align';
    # no checkpoint alignment: block stays 272 and mamba_block_size follows it
    assert plain.values["mamba cache mode"] == "align"
    assert plain.values["attention block size (tokens)"] == 272
    assert plain.values["mamba block size"] == 272
    assert any("Mamba cache mode is set to 'align'" in m for m in _logged(plain))
    # FlashInfer GDN prefill exports checkpoints every 64 tokens: align = lcm(16, 64) = 64
    # 64 x cdiv(274432, 64 x 1024) = 64 x cdiv(4.1875) = 64 x 5 = 320 tokens
    # padding = 100 x (320 x 1024 - 274432) / 274432 = 100 x 53248 / 274432 = 19.40%
    fi = _run(vllm_latest, QWEN3_NEXT, flags, mamba_checkpoint_alignment=64)
    assert fi.values["kernel block alignment size"] == 64
    assert fi.values["attention block size (tokens)"] == 320
    assert fi.values["mamba block size"] == 320
    assert fi.values["mamba padding"] == "19.40%"


def test_nemotron_h_across_releases(vllm_latest: Snapshot, vllm_0102: Snapshot) -> None:
    flags = "vllm serve nvidia/Nemotron-H-8B-Base-8K"
    # intermediate = 128 heads x 64 = 8192; n_groups 8 (8 % 1 == 0: no extra groups)
    # conv_dim = 8192 + 2 x 8 x 128 = 10240 -> (3, 10240) = 30720 el x 2 B = 61440
    # attention: 2 x 8 x 128 x 2 B = 4096 bytes per token
    new = _run(vllm_latest, NEMOTRON_H, flags)
    # 0.33.0: NemotronH's config hook sets the SSM cache to float32 (no value in config.json)
    # temporal (128, 64, 128) = 1048576 el x 4 B = 4194304 -> mamba page = 4255744
    # 16 x cdiv(4255744, 65536) = 16 x cdiv(64.94) = 16 x 65 = 1040 -> page 4259840
    # padding = 100 x 4096 / 4255744 = 0.096% -> "0.10%"
    assert new.values["mamba ssm cache dtype (set by the release)"] == "float32"
    assert new.values["mamba state dtypes"] == ["torch.bfloat16", "torch.float32"]
    assert new.values["mamba page size (bytes)"] == 61440 + 4194304 == 4255744
    assert new.values["attention block size (tokens)"] == 1040
    assert new.values["attention page size (bytes)"] == 1040 * 4096 == 4259840
    assert new.values["mamba padding"] == "0.10%"
    # 0.10.2: no NemotronH hook, the SSM cache follows the model dtype (bfloat16)
    # temporal = 1048576 x 2 B = 2097152 -> mamba page = 2158592
    # 16 x cdiv(2158592, 65536) = 16 x cdiv(32.94) = 16 x 33 = 528 -> page 2162688
    # padding = 100 x 4096 / 2158592 = 0.1898% -> "0.19%"
    old = _run(vllm_0102, NEMOTRON_H, flags)
    assert old.values["mamba state dtypes"] == ["torch.bfloat16", "torch.bfloat16"]
    assert old.values["mamba page size (bytes)"] == 61440 + 2097152 == 2158592
    assert old.values["attention block size (tokens)"] == 528
    assert old.values["attention page size (bytes)"] == 528 * 4096 == 2162688
    assert old.values["mamba padding"] == "0.19%"
    # the two releases keep the alignment in different places, found by its log message
    assert old.provenance[0].qualname == "vllm.model_executor.models.config:" \
                                         "HybridAttentionMambaModelConfig.verify_and_update_config"
    assert new.provenance[0].qualname == "vllm.platforms.interface:Platform._align_hybrid_block_size"


def test_jamba_tp2_mamba1(vllm_latest: Snapshot) -> None:
    res = _run(vllm_latest, JAMBA, "vllm serve ai21labs/AI21-Jamba-1.5-Mini --tensor-parallel-size 2")
    v = res.values
    # expand x hidden = 2 x 4096 = 8192 -> 4096 per GPU; conv (3, 4096) = 12288 el x 2 B = 24576
    # temporal (4096, 16) = 65536 el x 2 B = 131072 -> mamba page = 155648
    assert v["mamba state shapes (per GPU)"] == [[3, 4096], [4096, 16]]
    assert v["mamba page size (bytes)"] == 24576 + 131072 == 155648
    # attention: 2 x (8 // 2 = 4) x 128 x 2 B = 2048 per token
    # 16 x cdiv(155648, 32768) = 16 x cdiv(4.75) = 16 x 5 = 80 -> page 163840
    # padding = 100 x (163840 - 155648) / 155648 = 100 x 8192 / 155648 = 5.263% -> "5.26%"
    assert v["attention page per token (bytes)"] == 2048
    assert v["attention block size (tokens)"] == 80
    assert v["mamba padding"] == "5.26%"


# GLM-5.3-Flash's config is not published; this is its *shape* as the numbers in seed 000
# pin it down: KDA linear attention with 64 heads x 128, conv kernel 4, MLA with
# kv_lora_rank 448 + rope 64, served with TP 4, MTP 3 and prefix caching on A100.
GLM53_FLASH_SHAPE = {
    "architectures": ["Glm5NextForConditionalGeneration"], "model_type": "glm5_next",
    "torch_dtype": "bfloat16",
    "text_config": {"model_type": "glm5_next_text", "hidden_size": 4096,
                    "num_attention_heads": 64, "num_key_value_heads": 64, "num_hidden_layers": 45,
                    "kv_lora_rank": 448, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
                    "v_head_dim": 128, "linear_num_heads": 64, "linear_head_dim": 128,
                    "linear_conv_kernel_dim": 4, "max_position_embeddings": 524288,
                    "layer_types": ["linear_attention", "full_attention"]},
}


def test_seed_000_log_lines_reproduced(vllm_latest: Snapshot) -> None:
    flags = ("vllm serve GLM-5.3-Flash --tensor-parallel-size=4 --enable-prefix-caching "
             "--speculative-config='{\"method\":\"mtp\",\"num_speculative_tokens\":3}'")
    res = _run(vllm_latest, GLM53_FLASH_SHAPE, flags, gpu="sm80")
    v = res.values
    # KDA: conv_dim = 3 x 64 x 128 = 24576 -> 6144 per GPU x (4 - 1 + 3 MTP) = 36864 el x 2 B
    #      = 73728; recurrent (64/4 = 16, 128, 128) fp32 = 262144 el x 4 B = 1048576
    assert v["mamba state shapes (per GPU)"] == [[6, 6144], [16, 128, 128]]
    assert v["mamba page size (bytes)"] == 73728 + 1048576 == 1122304
    # MLA: 1 head x (448 + 64) x 2 B = 1024 per token; MLA and align mode -> alignment 128
    # 128 x cdiv(1122304, 128 x 1024) = 128 x cdiv(8.56) = 128 x 9 = 1152 tokens
    # padding = 100 x (1152 x 1024 - 1122304) / 1122304 = 100 x 57344 / 1122304 = 5.109%
    assert v["attention page per token (bytes)"] == 1024
    assert v["attention block size (tokens)"] == 1152
    assert v["mamba padding"] == "5.11%"
    logged = _logged(res)
    assert logged[0] == ("Mamba cache mode is set to 'align' for Glm5NextForConditionalGeneration "
                         "by default when prefix caching is enabled")
    assert logged[1].startswith("Setting attention block size to 1152 tokens")
    assert logged[2].startswith("Padding mamba page size by 5.11%")
    assert any("forward verbatim" in n for n in res.notes)


def test_dense_model_is_not_aligned(vllm_latest: Snapshot) -> None:
    res = _run(vllm_latest, LLAMA, "vllm serve meta-llama/Llama-3.1-8B-Instruct")
    assert res.values["hybrid attention/mamba model"] is False
    assert "not a hybrid" in res.findings[0].text
    assert "attention block size (tokens)" not in res.values


def test_unknown_architecture_is_not_applicable(vllm_latest: Snapshot, tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"architectures": ["NoSuchHybridForCausalLM"]}))
    res = run_sliced(NAME, vllm_latest, config=cfg, flags="vllm serve x")
    assert not res.applicable
    assert "no architecture NoSuchHybridForCausalLM" in (res.reason or "")


def test_nemotron_h_prefix_caching_all_vs_align_mode(vllm_latest: Snapshot,
                                                     pip_snapshot) -> None:  # noqa: ANN001
    flags = "vllm serve nvidia/Nemotron-H-8B-Base-8K --enable-prefix-caching"
    # 0.25.0: prefix caching puts Mamba2 models in 'all' mode, where the block is a multiple
    # of the SSD chunk (config chunk_size 128, lcm with the kernel's 16 = 128):
    # tokens per mamba state = cdiv(4255744, 4096) = cdiv(1038.99) = 1039
    # 128 x cdiv(1039, 128) = 128 x 9 = 1152 -> page 1152 x 4096 = 4718592
    # padding = 100 x (4718592 - 4255744) / 4255744 = 100 x 462848 / 4255744 = 10.876%
    old = _run(pip_snapshot("vllm==0.25.0"), NEMOTRON_H, flags)
    assert old.values["mamba cache mode"] == "all"
    assert old.values["attention block size (tokens)"] == 1152
    assert old.values["mamba block size"] == 1152
    assert old.values["mamba padding"] == "10.88%"
    # 0.33.0: 'align' mode, the minimum block (16 x 65 = 1040, as without prefix caching)
    new = _run(vllm_latest, NEMOTRON_H, flags)
    assert new.values["mamba cache mode"] == "align"
    assert new.values["attention block size (tokens)"] == 1040
    assert new.values["mamba block size"] == 1040
