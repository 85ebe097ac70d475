"""sglang-track-ssm on real SGLang releases, against values worked out by hand.

The gated-delta-net branch of ``_init_track_ssm_indices`` (quoted, 0.5.23):

    num_h_states = (extend_seq_lens - 1) // chunk + 1
    offset[0] = 0; offset[1:] = cumsum(num_h_states[:-1])
    lens = mamba_track_seqlens - prefix_lens            (of the tracked sequences)
    aligned (lens % chunk == 0): final_src = cache slot, final_dst = track slot
    else: h_src = offset + lens // chunk, h_dst = track slot

and ``h`` has NT = sum(ceil(extend_len / chunk)) rows (``prepare_chunk_offsets``).
"""

from __future__ import annotations

import pytest

from recon.examples import EXAMPLES_DIR
from recon.recipes import run_recipe
from recon.snapshots.model import Snapshot

NAME = "sglang-track-ssm"
QWEN3_NEXT = EXAMPLES_DIR / \
    "qwen3-next-80b-a3b-instruct.json"

pytest.importorskip("torch")


def _run(snap: Snapshot, config: object = None, **options: object):  # noqa: ANN202
    res = run_recipe(NAME, snap, config=config, options=options)
    assert res.applicable, res.reason
    return res


def _levels(res) -> list[tuple[str, str]]:  # noqa: ANN001
    return [(f.level, f.text) for f in res.findings]


def test_seed_003_batch(sglang_latest: Snapshot) -> None:
    res = _run(sglang_latest, QWEN3_NEXT, extend_lens=[4957, 127])
    v = res.values
    # num_h_states = [4956 // 64 + 1, 126 // 64 + 1] = [77 + 1, 1 + 1] = [78, 2]; offsets [0, 78]
    # 4957 % 64 = 29, 127 % 64 = 63: both unaligned -> h_src = [0 + 4957 // 64, 78 + 127 // 64]
    #                                                         = [77, 79]
    # NT = ceil(4957 / 64) + ceil(127 / 64) = 78 + 2 = 80 -> both rows exist (79 is the last)
    assert v["chunk size"] == 64  # Qwen3-Next's config has no mamba_chunk_size: the default
    assert v["track_ssm_h_src"] == [77, 79]
    assert v["chunk rows of h (NT)"] == 80
    assert v["chunk offsets per sequence"] == [0, 78, 80]
    assert v["track_ssm_h_dst"] == [2, 3]  # default track slots B..2B-1
    assert v["track_ssm_final_src"] == [] and v["track_ssm_final_dst"] == []
    assert v["track_chunk_idx"] == [77, 1]
    assert ("ok", "seq 0: h_src 77 in range (NT = 80)") in _levels(res)
    assert ("ok", "seq 1: h_src 79 in range (NT = 80)") in _levels(res)
    assert any(level == "ok" and "CPU-metadata path" in text and "agrees" in text
               for level, text in _levels(res))
    locals_table = next(t for t in res.tables if t.title.startswith("locals of"))
    assert ["num_h_states", [78, 2]] in locals_table.rows
    assert ["track_ssm_src_offset", [0, 78]] in locals_table.rows


def test_prefix_and_aligned_sequences(sglang_latest: Snapshot) -> None:
    res = _run(sglang_latest, None, extend_lens=[128, 100, 64], prefix_lens=[64, 0, 0],
               cache_slots=[7, 8, 9], track_slots=[3, 4, 5], slots=5)
    v = res.values
    # track lens default to prefix + extend = [192, 100, 64] -> lens = [128, 100, 64]
    # 128 % 64 == 0 and 64 % 64 == 0: seqs 0 and 2 copy the final state (cache slots 7, 9)
    assert v["track_ssm_final_src"] == [7, 9]
    assert v["track_ssm_final_dst"] == [3, 5]
    # num_h_states = [127 // 64 + 1, 99 // 64 + 1, 63 // 64 + 1] = [2, 2, 1]; offsets [0, 2, 4]
    # seq 1: h_src = 2 + 100 // 64 = 3;  NT = 2 + 2 + 1 = 5
    assert v["track_ssm_h_src"] == [3] and v["track_ssm_h_dst"] == [4]
    assert v["chunk rows of h (NT)"] == 5
    levels = _levels(res)
    assert ("ok", "seq 1: h_src 3 in range (NT = 5)") in levels
    # pool of 5 slots: track slot 5 and cache slots 7 and 9 do not exist
    assert ("error", "seq 2: destination slot 5 >= pool size 5") in levels
    assert ("error", "seq 0: final-state source slot 7 >= pool size 5") in levels
    assert ("ok", "seq 1: destination slot 4 < pool size 5") in levels


def test_untracked_sequence_and_chunk_from_config(sglang_latest: Snapshot) -> None:
    cfg = {"architectures": ["Qwen3NextForCausalLM"], "mamba_chunk_size": 128}
    res = _run(sglang_latest, cfg, extend_lens=[4957, 127, 300], track=[True, True, False])
    v = res.values
    # chunk 128 from the config: num_h_states = [4956 // 128 + 1, 126 // 128 + 1, 299 // 128 + 1]
    #                                         = [39, 1, 3]; offsets [0, 39, 40]
    # tracked seqs 0, 1: h_src = [0 + 4957 // 128, 39 + 127 // 128] = [38, 39]
    # NT = ceil(4957/128) + ceil(127/128) + ceil(300/128) = 39 + 1 + 3 = 43
    assert v["chunk size"] == 128
    assert v["track_ssm_h_src"] == [38, 39]
    assert v["chunk rows of h (NT)"] == 43
    assert v["track_chunk_idx"] == [38, 0, -1]
    row = next(r for r in res.tables[0].rows if r[0] == 2)
    assert row[-1] == "not tracked"


def test_same_batch_across_releases(sglang_latest: Snapshot, pip_snapshot) -> None:  # noqa: ANN001
    old = _run(pip_snapshot("sglang==0.5.10"), QWEN3_NEXT, extend_lens=[4957, 127])
    new = _run(sglang_latest, QWEN3_NEXT, extend_lens=[4957, 127])
    for res in (old, new):
        assert res.values["track_ssm_h_src"] == [77, 79]
        assert res.values["chunk rows of h (NT)"] == 80
    # 0.5.10 returns four tensors and takes the chunk from the FLA kernel's constant;
    # 0.5.23 returns nine and reads mamba_chunk_size from the model config
    assert "track_chunk_idx" not in old.values and "track_chunk_idx" in new.values
    assert old.provenance[0].line != new.provenance[0].line
    assert old.provenance[0].sha256 != new.provenance[0].sha256


def test_release_without_tracking_is_not_applicable(pip_snapshot) -> None:  # noqa: ANN001
    res = run_recipe(NAME, pip_snapshot("sglang==0.5.5"), options={"extend_lens": [10]})
    assert not res.applicable
    assert "no _init_track_ssm_indices" in (res.reason or "")


def test_command_line_decides_the_prefill_chunk(sglang_latest: Snapshot) -> None:
    """With the server's command line, the release's resolved chunked_prefill_size bounds
    the batch (seed 003: 5084 new tokens fit 8192, not 4096)."""
    flags = ("python -m sglang.launch_server --model-path Qwen/Qwen3-Next-80B-A3B-Instruct "
             "--tp 2 --chunked-prefill 4096")  # an abbreviation: the release's parser decides
    res = run_recipe(NAME, sglang_latest, config=QWEN3_NEXT, flags=flags,
                     options={"extend_lens": [4957, 127]})
    warned = [text for level, text in _levels(res) if level == "warn"]
    assert any("extends 5084 tokens" in t and "chunked_prefill_size to 4096" in t
               for t in warned), warned
    assert res.values["track_ssm_h_src"] == [77, 79]
