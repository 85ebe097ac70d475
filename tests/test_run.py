"""``recon run`` on real releases: the engine's own code, byte-exact, against hand-worked values.

Every expected value below is worked out by hand from the code quoted in the
test, so a change of behaviour in a release (or in recon) shows up here.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from recon.slicing import Call, Py, RunFailed, build_slice, run_calls, run_function
from recon.snapshots.model import Snapshot

ADJUST = "vllm.config.compilation:CompilationConfig.adjust_cudagraph_sizes_for_spec_decode"
DFLASH = "vllm.model_executor.models.qwen3_dflash"
GDN = "sglang.srt.layers.attention.linear.gdn_backend:GDNAttnBackend"


def _adjust(snap: Snapshot, sizes: list[int], max_size: int, q_len: int):  # noqa: ANN202
    return run_function(snap, ADJUST, args={"uniform_decode_query_len": q_len},
                        self_attrs={"cudagraph_capture_sizes": sizes,
                                    "max_cudagraph_capture_size": max_size})


# -- vLLM: CompilationConfig.adjust_cudagraph_sizes_for_spec_decode ------------------------
# multiple_of = uniform_decode_query_len = num_speculative_tokens + 1
# rounded = sorted({round_up(s, m) for s in sizes if round_up(s, m) <= max})
# if not rounded and m <= max: rounded = [m];  if still empty: ValueError
# then max = rounded[-1], sizes = rounded


def test_capture_sizes_rounded_for_three_speculative_tokens(vllm_latest: Snapshot) -> None:
    # The field-notes case: 3 speculative tokens -> the method receives 4.
    # round_up(1,4)=4, 2->4, 4->4, 8->8, 16, 32, 64 (all <= 64) -> {4, 8, 16, 32, 64}
    res = _adjust(vllm_latest, [1, 2, 4, 8, 16, 32, 64], 64, 4)
    assert res.ok and res.value is None
    assert res.mutated == {"cudagraph_capture_sizes": [4, 8, 16, 32, 64]}
    # max stays 64 (= rounded[-1]): unchanged, so not reported as a mutation
    assert res.self_after["max_cudagraph_capture_size"] == 64
    ran = {(p.file, p.start, p.what) for p in res.provenance}
    assert ran == {("vllm/config/compilation.py", 1537,
                    "CompilationConfig.adjust_cudagraph_sizes_for_spec_decode"),
                   ("vllm/utils/math_utils.py", 27, "def round_up")}
    piece = next(p for p in res.provenance if p.what == "def round_up")
    assert len(piece.sha256) == 64
    assert res.stub_touches == []  # nothing outside the package is used


@pytest.mark.parametrize(("sizes", "max_size", "q_len", "want_sizes", "want_max"), [
    # 64 rounds to 64 > 60: dropped; 1,2,4 -> 4, 8, 16, 32 -> max becomes 32
    ([1, 2, 4, 8, 16, 32, 64], 60, 4, [4, 8, 16, 32], 32),
    # 2 speculative tokens (m=3): 1,2->3, 4->6, 8->9, 16->18, 32->33, 64->66 > 64 dropped
    ([1, 2, 4, 8, 16, 32, 64], 64, 3, [3, 6, 9, 18, 33], 33),
    # nothing survives rounding (5->8 > 6) but m=4 <= 6: the method keeps [4]
    ([5, 6], 6, 4, [4], 4),
])
def test_capture_sizes_more_cases(vllm_latest: Snapshot, sizes: list[int], max_size: int,
                                  q_len: int, want_sizes: list[int], want_max: int) -> None:
    res = _adjust(vllm_latest, sizes, max_size, q_len)
    assert res.self_after["cudagraph_capture_sizes"] == want_sizes
    assert res.self_after["max_cudagraph_capture_size"] == want_max


def test_capture_sizes_untouched_without_spec_decode(vllm_latest: Snapshot) -> None:
    # multiple_of <= 1 returns at once: no mutation at all
    res = _adjust(vllm_latest, [1, 2, 4], 4, 1)
    assert res.ok and res.mutations == []


def test_capture_sizes_error_path(vllm_latest: Snapshot) -> None:
    # m=4: round_up(1,4)=4 > 2 and round_up(2,4)=4 > 2; and 4 > max=2 -> ValueError
    res = _adjust(vllm_latest, [1, 2], 2, 4)
    assert not res.ok and res.error is not None
    assert res.error.type == "ValueError"
    assert "No valid cudagraph sizes after rounding to multiple of 4" in res.error.message
    assert "num_speculative_tokens (3)" in res.error.message
    assert res.error.site == "vllm/config/compilation.py:1556"  # the `raise` line
    assert res.mutations == []
    with pytest.raises(RunFailed, match="raised ValueError at vllm/config/compilation.py:1556"):
        res.raise_for_error()


# -- vLLM: DFlash draft config -----------------------------------------------------------
# _dflash_layer_causal(config, i): config.is_causal if set, else dflash_config["causal"] if
# set, else False without layer_types, else layer_types[i] == "sliding_attention".
# dflash_has_any_non_causal = not all(_dflash_layer_causal(config, i) for i in layers)

DFLASH_CASES = [
    # standard DFlash: no layer_types, nothing set -> every layer non-causal
    ({"num_hidden_layers": 5}, True),
    # every layer sliding -> every layer causal -> no non-causal layer
    ({"num_hidden_layers": 2, "layer_types": ["sliding_attention"] * 2}, False),
    # mixed: layer 1 is full attention -> non-causal
    ({"num_hidden_layers": 2, "layer_types": ["sliding_attention", "full_attention"]}, True),
    # dflash_config.causal overrides the layer types for every layer
    ({"num_hidden_layers": 2, "layer_types": ["full_attention"] * 2,
      "dflash_config": {"causal": True}}, False),
    # a top-level is_causal wins over everything
    ({"num_hidden_layers": 3, "is_causal": False, "dflash_config": {"causal": True}}, True),
]


def test_dflash_has_any_non_causal(vllm_latest: Snapshot) -> None:
    # one child process for all five configs: each call builds its own HF-like config
    results = run_calls(vllm_latest,
                        [Call(f"{DFLASH}:dflash_has_any_non_causal",
                              args={"config": Py(f"HFConfig({cfg!r})")})
                         for cfg, _ in DFLASH_CASES])
    assert [r.value for r in results] == [want for _, want in DFLASH_CASES]


def test_dflash_from_config_file(vllm_latest: Snapshot, tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"architectures": ["DFlashDraftModel"], "num_hidden_layers": 1}))
    res = run_function(vllm_latest, f"{DFLASH}:dflash_has_any_non_causal", config=cfg)
    assert res.value is True  # one layer, no layer_types -> non-causal


def test_dflash_config_missing_key_is_a_clear_error(vllm_latest: Snapshot) -> None:
    with pytest.raises(RunFailed, match=r"config is missing key 'num_hidden_layers' \(needed at "
                                        r"vllm/model_executor/models/qwen3_dflash.py:80\)"):
        run_function(vllm_latest, f"{DFLASH}:dflash_has_any_non_causal", config={})


# _resolve_layer_attention(config, i) -> (sliding_window, causal):
#   use_swa = dflash_config.get("use_swa", False)
#   mixed sliding/full layer_types -> needs get_current_vllm_config().use_v2_model_runner
#   is_sliding = use_swa if layer_types is None (or use_swa and no sliding layer)
#                else layer_types[i] == "sliding_attention"
#   window = dflash_config.get("swa_window_size", config.sliding_window) when sliding


def _layers(snap: Snapshot, cfg: dict, n: int, **kw: object) -> list:  # noqa: ANN401
    res = run_calls(snap, [Call(f"{DFLASH}:_resolve_layer_attention", args={"layer_idx": i})
                           for i in range(n)], config=cfg, **kw)  # type: ignore[arg-type]
    return [r.value for r in res]


def test_dflash_per_layer_resolution(vllm_latest: Snapshot) -> None:
    # use_swa, no layer_types: every layer sliding with window 512, causal False (no types)
    cfg = {"num_hidden_layers": 2, "dflash_config": {"use_swa": True, "swa_window_size": 512}}
    assert _layers(vllm_latest, cfg, 2, forbid=["get_current_vllm_config"]) == \
        [[512, False], [512, False]]
    # all full attention: window None; causal from layer_types[i] == sliding -> False
    cfg = {"num_hidden_layers": 2, "layer_types": ["full_attention"] * 2}
    assert _layers(vllm_latest, cfg, 2, forbid=["get_current_vllm_config"]) == \
        [[None, False], [None, False]]
    # mixed types with the V2 runner: layer 0 sliding (window from the top-level 2048, causal),
    # layers 1-2 full attention (no window, non-causal)
    cfg = {"num_hidden_layers": 3, "sliding_window": 2048,
           "layer_types": ["sliding_attention", "full_attention", "full_attention"]}
    v2 = {"get_current_vllm_config": "lambda: ns(use_v2_model_runner=True)"}
    assert _layers(vllm_latest, cfg, 3, stubs=v2) == [[2048, True], [None, False], [None, False]]


def test_dflash_mixed_layers_without_v2_runner_raise(vllm_latest: Snapshot) -> None:
    cfg = {"num_hidden_layers": 2, "layer_types": ["sliding_attention", "full_attention"]}
    res = run_function(vllm_latest, f"{DFLASH}:_resolve_layer_attention", args={"layer_idx": 0},
                       config=cfg,
                       stubs={"get_current_vllm_config": "lambda: ns(use_v2_model_runner=False)"})
    assert res.error is not None and res.error.type == "NotImplementedError"
    assert "VLLM_USE_V2_MODEL_RUNNER=1" in res.error.message


# -- forbid: proving a branch is (not) taken ----------------------------------------------

def test_forbid_on_a_taken_branch_fails_naming_the_line(vllm_latest: Snapshot) -> None:
    cfg = {"num_hidden_layers": 2, "layer_types": ["sliding_attention", "full_attention"]}
    with pytest.raises(RunFailed) as info:
        run_function(vllm_latest, f"{DFLASH}:_resolve_layer_attention", args={"layer_idx": 0},
                     config=cfg, forbid=["get_current_vllm_config"])
    msg = str(info.value)
    assert "forbidden stub" in msg and "get_current_vllm_config" in msg
    where = "vllm/model_executor/models/qwen3_dflash.py:131"
    assert f"reached at {where}" in msg
    line = vllm_latest.read_text(where.split(":")[0]).splitlines()[130]
    assert "get_current_vllm_config().use_v2_model_runner" in line


def test_forbid_on_an_untaken_branch_passes(vllm_latest: Snapshot) -> None:
    cfg = {"num_hidden_layers": 2, "layer_types": ["sliding_attention"] * 2,
           "sliding_window": 4096}
    res = run_function(vllm_latest, f"{DFLASH}:_resolve_layer_attention", args={"layer_idx": 1},
                       config=cfg, forbid=["get_current_vllm_config"])
    assert res.ok and res.value == [4096, True]
    assert res.touched(f"{DFLASH}.get_current_vllm_config") == 0


def test_forbid_an_outside_decorator_fails_at_definition(vllm_latest: Snapshot) -> None:
    with pytest.raises(RunFailed, match=r"forbidden stub torch.compile reached at "
                                        r"vllm/v1/sample/ops/logprobs.py:10"):
        run_function(vllm_latest, "vllm.v1.sample.ops.logprobs:batched_count_greater_than",
                     args={"x": 1, "values": 2}, forbid=["torch.compile"],
                     stubs={"current_platform": "ns(simple_compile_backend='inductor')"})


def test_stubbed_decorator_passes_the_real_body_through(vllm_latest: Snapshot,
                                                        tmp_path: Path) -> None:
    """`@torch.compile(backend=...)` stubbed: the real body runs (x >= values).sum(-1)."""
    helper = tmp_path / "vec.py"
    helper.write_text(
        "class Vec:\n"
        "    '''Just enough of a 2-D tensor for (x >= values).sum(-1).'''\n"
        "    def __init__(self, rows):\n"
        "        self.rows = rows\n"
        "        self.shape = (len(rows), len(rows[0]))\n"
        "    def __ge__(self, other):\n"
        "        return Vec([[int(a >= b[0]) for a in row] for row, b in zip(self.rows, other.rows)])\n"
        "    def sum(self, dim):\n"
        "        return [sum(r) for r in self.rows]\n")
    res = run_function(vllm_latest, "vllm.v1.sample.ops.logprobs:batched_count_greater_than",
                       args={"x": Py("Vec([[1, 5, 3], [2, 2, 9]])"), "values": Py("Vec([[3], [2]])")},
                       stub_file=helper,
                       stubs={"current_platform": "ns(simple_compile_backend='inductor')"})
    # row 0: [1,5,3] >= 3 -> [0,1,1] -> 2;  row 1: [2,2,9] >= 2 -> [1,1,1] -> 3
    assert res.ok, res.error
    assert res.value == [2, 3]
    assert res.touched("torch.compile()") == 1  # used once: as the decorator
    assert next(t for t in res.stub_touches if t.name == "torch.compile()").ops == {"decorate": 1}


def test_stub_class_can_be_subclassed_by_engine_code(vllm_latest: Snapshot) -> None:
    """DFlashQwen3ForCausalLM -> Qwen3ForCausalLM(nn.Module, ...): nn.Module is a stub."""
    res = run_function(
        vllm_latest, f"{DFLASH}:DFlashQwen3ForCausalLM.get_draft_attn_causal",
        self_attrs={"model": Py("ns(layers=[ns(self_attn=ns(causal=c)) for c in (True, False)])")})
    assert res.value == [True, False]
    assert res.touched("torch.nn.Module") >= 1
    assert any(t.name == "torch.nn.Module" and "subclass" in t.ops for t in res.stub_touches)


# -- fidelity: the answer follows the code of the snapshot --------------------------------

def test_editing_the_function_in_a_copy_changes_the_result(vllm_latest: Snapshot,
                                                           tmp_path: Path) -> None:
    copy = tmp_path / "vllm-edited"
    shutil.copytree(vllm_latest.root, copy, copy_function=os.link)  # hard links: fast
    rel = "vllm/config/compilation.py"
    target = copy / "src" / rel
    text = target.read_text()
    os.unlink(target)  # never write through a hard link into the cached release
    old = "if round_up(size, multiple_of) <= self.max_cudagraph_capture_size"
    assert text.count(old) == 1
    target.write_text(text.replace(old, old.replace("<=", "<")))
    edited = Snapshot.open(copy)
    before = _adjust(vllm_latest, [1, 2, 4, 8, 16, 32, 64], 64, 4)
    after = _adjust(edited, [1, 2, 4, 8, 16, 32, 64], 64, 4)
    # with `<`, 64 (== max) is dropped: [4, 8, 16, 32] and the max follows to 32
    assert before.self_after["cudagraph_capture_sizes"] == [4, 8, 16, 32, 64]
    assert after.self_after["cudagraph_capture_sizes"] == [4, 8, 16, 32]
    assert after.self_after["max_cudagraph_capture_size"] == 32
    sha = {p.what: p.sha256 for p in before.provenance}
    sha_after = {p.what: p.sha256 for p in after.provenance}
    key = "CompilationConfig.adjust_cudagraph_sizes_for_spec_decode"
    assert sha[key] != sha_after[key]
    assert sha["def round_up"] == sha_after["def round_up"]
    assert build_slice(edited, ADJUST).meta["edited_files"] == [rel]


# -- SGLang: _init_track_ssm_indices with real CPU torch ----------------------------------
# Extend lengths [4957, 127], no prefix, chunk 64, both tracked (track length = extend length):
#   num_h_states = (len - 1) // 64 + 1 = [4956 // 64 + 1, 126 // 64 + 1] = [77 + 1, 1 + 1] = [78, 2]
#   offsets = [0, 78];  rows of h (NT) = 78 + 2 = 80
#   4957 % 64 = 29 and 127 % 64 = 63: both unaligned, so both come from h:
#   h_src = offset + len // 64 = [0 + 77, 78 + 1] = [77, 79]   (< 80: in range)
#   track_chunk_idx = len // 64 = [77, 1];  h_dst = the track slots [5, 9]; no final-state copy

FORWARD_BATCH = (
    "ns(forward_mode=ns(is_extend=lambda: True, is_target_verify=lambda: False), batch_size=2,"
    " mamba_track_mask=torch.tensor([True, True]), extend_seq_lens=torch.tensor([4957, 127]),"
    " mamba_track_indices=torch.tensor([5, 9]), mamba_track_seqlens=torch.tensor([4957, 127]),"
    " extend_prefix_lens=torch.tensor([0, 0]), {cpu})")
NO_CPU_PLAN = ("mamba_prefill_track_mask_cpu=None, mamba_track_seqlens_cpu=None,"
               " extend_seq_lens_cpu=None, extend_prefix_lens_cpu=None")
CPU_PLAN = ("mamba_prefill_track_mask_cpu=[True, True], mamba_track_seqlens_cpu=[4957, 127],"
            " extend_seq_lens_cpu=[4957, 127], extend_prefix_lens_cpu=[0, 0]")


def test_sglang_track_ssm_indices_real_torch(sglang_latest: Snapshot) -> None:
    pytest.importorskip("torch")
    calls = [
        Call(f"{GDN}._init_track_ssm_indices",
             args={"mamba_cache_indices": Py("torch.tensor([3, 4])"),
                   "forward_batch": Py(FORWARD_BATCH.format(cpu=cpu))},
             self_attrs={"_mamba_chunk_size": 64, "device": "cpu"})
        for cpu in (NO_CPU_PLAN, CPU_PLAN)
    ]
    # the chunk rows of h, by the release's own chunk-offset helper: cu_seqlens [0, 4957, 5084]
    calls.append(Call("sglang.kernels.ops.attention.fla.index:prepare_chunk_offsets",
                      args={"cu_seqlens": Py("torch.tensor([0, 4957, 5084])"), "chunk_size": 64}))
    legacy, cpu_path, offsets = run_calls(
        sglang_latest, calls, real=["torch"],
        stubs={"triton.cdiv": "lambda a, b: (a + b - 1) // b"})  # triton.cdiv's definition
    chunk_idx, h_src, h_dst, tracked, final_src, final_dst, seq_idx, end_locs, recompute = \
        legacy.value
    assert h_src == [77, 79]
    assert chunk_idx == [77, 1] and h_dst == [5, 9] and tracked == [0, 1]
    assert final_src == [] and final_dst == [] and seq_idx is None
    assert legacy.value_type.startswith("tuple[Tensor[int32, (2,)], Tensor[int64, (2,)]")
    # offsets [0, 78, 80]: 80 chunk rows, and every h_src is below it
    assert offsets.value == [0, 78, 80]
    assert max(h_src) < offsets.value[-1]
    # the CPU-metadata path of the same release agrees on every index it returns
    assert cpu_path.value[:6] == legacy.value[:6]
    whats = {p.what for p in cpu_path.provenance}
    assert "def build_prefill_track_plan" in whats
    assert "MambaAttnBackendBase._init_track_ssm_indices_from_cpu" in whats
    assert "MambaAttnBackendBase._init_track_ssm_indices" in {p.what for p in legacy.provenance}


def test_stub_file_supplies_values_and_forbids(vllm_latest: Snapshot, tmp_path: Path) -> None:
    cfg = {"num_hidden_layers": 2, "sliding_window": 1024,
           "layer_types": ["sliding_attention", "full_attention"]}
    values = tmp_path / "v2_stubs.py"
    values.write_text("V2 = ns(use_v2_model_runner=True)  # ns: types.SimpleNamespace\n"
                      "STUBS = {'get_current_vllm_config': lambda: V2}\n")
    res = run_function(vllm_latest, f"{DFLASH}:_resolve_layer_attention", args={"layer_idx": 0},
                       config=cfg, stub_file=values)
    assert res.value == [1024, True]  # layer 0 is sliding: window 1024, causal
    forbids = tmp_path / "forbid_stubs.py"
    forbids.write_text("FORBID = ['get_current_vllm_config']\n")
    with pytest.raises(RunFailed, match="qwen3_dflash.py:131"):
        run_function(vllm_latest, f"{DFLASH}:_resolve_layer_attention", args={"layer_idx": 0},
                     config=cfg, stub_file=forbids)
