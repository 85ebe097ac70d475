"""One test per engine log format (recon.logs.patterns.PATTERNS), plus the line prefixes.

Every row of the pattern table has a case here: a line in that row's wording
(written for this test from the format strings in the releases' source or
from public logs, see each row's ``releases``) and the values it must give.
A row without a case, or a case for a row that no longer exists, fails
``test_every_format_has_a_case``.
"""

from __future__ import annotations

from typing import Any

import pytest

from recon.logs.parse import parse_text, split_prefix
from recon.logs.patterns import BY_ID, PATTERNS, match_line
from recon.logs.pyrepr import parse_call, parse_value, split_kv

#: pattern id -> (message, values that must come out (a subset of all values))
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "vllm.version.api_server": ("vLLM API server version 0.10.2", {"version": "0.10.2"}),
    "vllm.version.server": ("vLLM server version 0.29.0, serving model /m/Qwen3-Next",
                            {"version": "0.29.0", "model": "/m/Qwen3-Next"}),
    "vllm.version.logo": (" ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.33.0", {"version": "0.33.0"}),
    "vllm.args.non_default": (
        "non-default args: {'model_tag': 'm', 'max_model_len': 131072, 'enable_prefix_caching': "
        "True, 'speculative_config': {'method': 'mtp', 'num_speculative_tokens': 3}}",
        {"args": {"model_tag": "m", "max_model_len": 131072, "enable_prefix_caching": True,
                  "speculative_config": {"method": "mtp", "num_speculative_tokens": 3}}}),
    "vllm.args.namespace": (
        "args: Namespace(subparser='serve', model_tag='m', host=None, port=8000, "
        "tensor_parallel_size=2, enable_prefix_caching=None, dispatch_function=<function "
        "ServeSubcommand.cmd at 0x7f00>)",
        {"args": {"subparser": "serve", "model_tag": "m", "host": None, "port": 8000,
                  "tensor_parallel_size": 2, "enable_prefix_caching": None,
                  "dispatch_function": "<function ServeSubcommand.cmd at 0x7f00>"}}),
    "vllm.config.v1": (
        "Initializing a V1 LLM engine (v0.33.0) with config: model='/m/x', speculative_config="
        "SpeculativeConfig(method='mtp', model='/m/x', num_spec_tokens=3), dtype=torch.bfloat16, "
        "max_seq_len=272000, served_model_name=/m/x, enable_prefix_caching=True, "
        "compilation_config={'mode': <CompilationMode.VLLM_COMPILE: 3>, 'cudagraph_mode': "
        "<CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>, 'cudagraph_capture_sizes': [1, 2, 4, 8], "
        "'max_cudagraph_capture_size': 8, 'pass_config': {}}, kernel_config=KernelConfig("
        "moe_backend='auto')",
        {"version": "0.33.0", "cudagraph_capture_sizes": [1, 2, 4, 8],
         "max_cudagraph_capture_size": 8, "cudagraph_mode": "FULL_AND_PIECEWISE",
         "num_speculative_tokens": 3, "speculative_method": "mtp", "max_model_len": 272000,
         "enable_prefix_caching": True, "model": "/m/x"}),
    "vllm.config.v0": (
        'Initializing an LLM engine (v0.6.4) with config: model=\'m\', speculative_config=None, '
        'max_seq_len=32768, tensor_parallel_size=1, enable_prefix_caching=False, '
        'compilation_config=CompilationConfig(level=0, backend=\'\', custom_ops=[])',
        {"version": "0.6.4", "max_model_len": 32768, "tensor_parallel_size": 1,
         "enable_prefix_caching": False}),
    "vllm.max_model_len": ("Using max model len 262144", {"max_model_len": 262144}),
    "vllm.hybrid.prefix_caching_disabled": (
        "Hybrid or mamba-based model detected: disabling prefix caching since it is not yet "
        "supported.", {"hybrid_prefix_caching_disabled": True}),
    "vllm.mamba_mode.set": (
        "Mamba cache mode is set to 'align' for Qwen3NextForCausalLM by default when prefix "
        "caching is enabled",
        {"mamba_cache_mode": "align", "mamba_cache_mode_arch": "Qwen3NextForCausalLM",
         "mamba_cache_mode_implicit": True}),
    "vllm.mamba_mode.none": ("Mamba cache mode is set to 'none' when prefix caching is disabled",
                             {"mamba_cache_mode": "none"}),
    "vllm.attn_block.quantized": (
        "Setting attention block size to 64 tokens so the quantized primary KV page covers the "
        "higher-precision padded-spec page.", {"attention_block_size_quantized": 64}),
    "vllm.attn_block.mamba": (
        "Setting attention block size to 1152 tokens to ensure that attention page size is >= "
        "mamba page size.", {"attention_block_size": 1152}),
    "vllm.mamba_padding": (
        "Padding mamba page size by 5.11% to ensure that mamba page size and attention page "
        "size are exactly equal.", {"mamba_padding_pct": 5.11}),
    "vllm.model_load": ("Model loading took 8.07 GiB memory and 165.696784 seconds",
                        {"model_load_gib": 8.07, "model_load_secs": 165.696784}),
    "vllm.kv_memory": ("Available KV cache memory: 7.98 GiB",
                       {"available_kv_cache_memory_gib": 7.98}),
    "vllm.kv_tokens.joined": (
        "GPU + host KV cache size: 855,417 tokens, Maximum concurrency for 262,144 tokens per "
        "request: 3.26x",
        {"kv_cache_pool": "GPU + host", "kv_cache_tokens": 855417, "max_concurrency_len": 262144,
         "max_concurrency": 3.26}),
    "vllm.kv_tokens.split": ("GPU KV cache size: 965,793 tokens", {"kv_cache_tokens": 965793}),
    "vllm.max_concurrency.split": (
        "Maximum concurrency for 262,144 tokens per request: 3.68x",
        {"max_concurrency_len": 262144, "max_concurrency": 3.68}),
    "vllm.gpu_blocks.v0": ("# GPU blocks: 27689, # CPU blocks: 2048",
                           {"num_gpu_blocks": 27689, "num_cpu_blocks": 2048}),
    "vllm.cudagraph.estimate": ("Estimated CUDA graph memory: 0.44 GiB total",
                                {"cudagraph_memory_estimated_gib": 0.44}),
    "vllm.cudagraph.util_hint": (
        "CUDA graph memory profiling is enabled (default since v0.21.0). The current "
        "--gpu-memory-utilization=0.9100 is equivalent to --gpu-memory-utilization=0.8760 "
        "without CUDA graph memory profiling. To maintain the same effective KV cache size as "
        "before, increase --gpu-memory-utilization to 0.9440. To disable, set "
        "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.",
        {"gpu_util_current": 0.91, "gpu_util_equivalent": 0.876, "gpu_util_suggested": 0.944}),
    "vllm.cudagraph.pool": (
        "CUDA graph pool memory: 0.61 GiB (actual), 0.67 GiB (estimated), difference: 0.05 GiB "
        "(8.6%).", {"cudagraph_pool_actual_gib": 0.61, "cudagraph_pool_estimated_gib": 0.67,
                    "cudagraph_pool_diff_pct": 8.6}),
    "vllm.cudagraph.progress": (
        "Capturing CUDA graphs (decode, FULL): 100%|██████████| 67/67 [00:17<00:00,  3.77it/s]",
        {"cudagraph_graphs_decode": 67}),
    # the compile cache lines of real vLLM 0.26.0 runs (tests/data/logs/real-compile-cache)
    "vllm.compile_cache.dir": (
        "Using cache directory: /tmp/ccA/torch_compile_cache/a7497f03a4/rank_0_0/backbone for "
        "vLLM's torch.compile",
        {"compile_cache_path": "/tmp/ccA/torch_compile_cache/a7497f03a4/rank_0_0/backbone",
         "compile_cache_hash": "a7497f03a4"}),
    "vllm.compile_cache.disabled": ("vLLM's torch.compile cache is disabled.",
                                    {"compile_cache_disabled": True}),
    "vllm.compile_cache.aot": (
        "Directly load AOT compilation from path /tmp/ccA/torch_compile_cache/torch_aot_compile/"
        "0ee49f3694577d325a3c19e9569094070e0929fbdf8a23b0b61dcb50ece75e23/rank_0_0/model",
        {"aot_compile_hash": "0ee49f3694577d325a3c19e9569094070e0929fbdf8a23b0b61dcb50ece75e23",
         "aot_compile_loaded": True}),
    "vllm.compile_cache.graphs_loaded": (
        "Directly load the compiled graph(s) for compile range (1, 16384) from the cache, took "
        "0.455 s", {"compile_graphs_loaded_range": "(1, 16384)"}),
    "vllm.compile_cache.factors": (
        "torch.compile cache factors: env=c7c8575c1e5efecd3bc5bb3b320636c6883266d16d3603f7a4aa834"
        "004c70007 cfg=b9c4f76d4b comp=5574fa5d0f code=694972090ee02f437f11a84902b3c02b1a7610cb4f"
        "b9a0076dcb859f22cd23f9 dir=/tmp/ccA/torch_compile_cache/a7497f03a4/rank_0_0/backbone",
        {"compile_env_hash": "c7c8575c1e5efecd3bc5bb3b320636c6883266d16d3603f7a4aa834004c70007",
         "compile_config_hash": "b9c4f76d4b", "compile_compiler_hash": "5574fa5d0f",
         "compile_code_hash": "694972090ee02f437f11a84902b3c02b1a7610cb4fb9a0076dcb859f22cd23f9"}),
    "vllm.chunked_prefill": ("Chunked prefill is enabled with max_num_batched_tokens=16384.",
                             {"max_num_batched_tokens": 16384}),
    "vllm.mamba_ssm_dtype": ("Updating mamba_ssm_cache_dtype to 'float32' for NemotronH model",
                             {"mamba_ssm_cache_dtype": "float32",
                              "mamba_ssm_cache_dtype_arch": "NemotronH"}),
    "vllm.device.memory": (
        "Free memory on device (139.29/139.8 GiB) on startup. Desired GPU memory utilization is "
        "(0.92, 128.62 GiB). Actual usage is 1.61 GiB for weight",
        {"gpu_free_gib": 139.29, "gpu_total_gib": 139.8, "gpu_util_current": 0.92,
         "gpu_memory_requested_gib": 128.62}),
    "vllm.device.name": (
        "Using default MoE config. Performance might be sub-optimal! Config file not found at "
        "/x/fused_moe/configs/E=8,N=512,device_name=NVIDIA_H200.json",
        {"gpu_device_name": "NVIDIA_H200"}),
    "vllm.cudagraph.profiled": (
        "Profiling CUDA graph memory: PIECEWISE=49 (largest=512), FULL=49 (largest=512), "
        "ENCODER=3 (largest=4096)",
        {"cudagraph_graphs_piecewise": 49, "cudagraph_graphs_piecewise_max": 512,
         "cudagraph_graphs_full": 49, "cudagraph_graphs_full_max": 512}),
    "vllm.cudagraph.captured": ("Graph capturing finished in 25 secs, took 2.37 GiB",
                                {"graph_capture_secs": 25, "graph_capture_gib": 2.37}),
    "vllm.spec.v1": (
        "SpecDecoding metrics: Mean acceptance length: 2.26, Accepted throughput: 40.10 "
        "tokens/s, Drafted throughput: 112.50 tokens/s, Accepted: 401 tokens, Drafted: 1125 "
        "tokens, Per-position acceptance rate: 0.520, 0.311, 0.098, 0.031, 0.008, Avg Draft "
        "acceptance rate: 35.6%",
        {"spec_mean_acceptance_length": 2.26, "spec_accepted_tokens": 401,
         "spec_drafted_tokens": 1125, "spec_per_position": [0.52, 0.311, 0.098, 0.031, 0.008],
         "spec_draft_acceptance_pct": 35.6}),
    "vllm.spec.v1_early": (
        "SpecDecoding metrics: Draft acceptance rate: 38.8%, Mean acceptance length: 2.16, "
        "Accepted: 150 tokens, Drafted: 387 tokens, Per-position acceptance rate: 0.543, 0.357, "
        "0.264", {"spec_draft_acceptance_pct": 38.8, "spec_mean_acceptance_length": 2.16,
                  "spec_per_position": [0.543, 0.357, 0.264]}),
    "vllm.spec.v0": (
        "Speculative metrics: Draft acceptance rate: 0.651, System efficiency: 0.570, Number of "
        "speculative tokens: 4, Number of accepted tokens: 6891, Number of draft tokens: 10584, "
        "Number of emitted tokens: 9025.",
        {"spec_draft_acceptance_pct": 0.651, "num_speculative_tokens": 4,
         "spec_emitted_tokens": 9025}),
    "vllm.engine_stats": (
        "Engine 000: Avg prompt throughput: 1841.2 tokens/s, Avg generation throughput: 96.3 "
        "tokens/s, Running: 3 reqs, Waiting: 0 reqs, Preemptions: 2, GPU KV cache usage: 2.1%, "
        "Prefix cache hit rate: 61.5%",
        {"running_reqs": 3, "kv_cache_usage_pct": 2.1, "prefix_cache_hit_pct": 61.5}),
    "sglang.args.dataclass": (
        "server_args=ServerArgs(model_path='/m/q', tp_size=4, mem_fraction_static=0.82, "
        "speculative_algorithm='EAGLE3', disable_radix_cache=False, context_length=None)",
        {"args": {"model_path": "/m/q", "tp_size": 4, "mem_fraction_static": 0.82,
                  "speculative_algorithm": "EAGLE3", "disable_radix_cache": False,
                  "context_length": None}}),
    "sglang.args.dict": ("server_args={'model_path': '/m/q', 'tp_size': 2, 'page_size': 1}",
                         {"args": {"model_path": "/m/q", "tp_size": 2, "page_size": 1}}),
    "sglang.load_weight_begin": ("Load weight begin. avail mem=78.98 GB",
                                 {"avail_mem_before_weights_gb": 78.98}),
    "sglang.load_weight": (
        "Load weight end. elapsed=5.46 s, type=Qwen3_5ForConditionalGeneration, avail mem=14.08 "
        "GB, mem usage=8.85 GB.",
        {"weight_load_secs": 5.46, "model_class": "Qwen3_5ForConditionalGeneration",
         "avail_mem_after_weights_gb": 14.08, "weight_load_gb": 8.85}),
    "sglang.mamba_alloc": (
        "Mamba Cache is allocated. max_mamba_cache_size: 186, conv_state size: 0.10GB, "
        "ssm_state size: 4.38GB ",
        {"max_mamba_cache_size": 186, "conv_state_gb": 0.10, "ssm_state_gb": 4.38}),
    "sglang.kv_alloc.dtype": (
        "KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: 10,097,100, K size: 19.26 "
        "GB, V size: 19.26 GB",
        {"kv_dtype": "torch.float8_e4m3fn", "kv_pool_tokens": 10097100, "k_size_gb": 19.26}),
    "sglang.kv_alloc.plain": ("KV Cache is allocated. #tokens: 327310, K size: 2.50 GB, V size: "
                              "2.50 GB", {"kv_pool_tokens": 327310, "v_size_gb": 2.5}),
    "sglang.memory_pool_end": ("Memory pool end. avail mem=4.49 GB",
                               {"avail_mem_after_pool_gb": 4.49}),
    "sglang.mamba_cap": (
        "max_running_requests is capped to 8 by the mamba state cache (max_mamba_cache_size=40, "
        "5 state slots per request). To raise it: increase --mamba-full-memory-ratio",
        {"mamba_capped_running_requests": 8, "max_mamba_cache_size": 40,
         "mamba_slots_per_request": 5}),
    "sglang.scheduler_limits": (
        "max_total_num_tokens=327310, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=186, context_len=262144, available_gpu_mem=4.31 GB",
        {"max_total_num_tokens": 327310, "max_running_requests": 186, "context_len": 262144,
         "available_gpu_mem_gb": 4.31}),
    "sglang.cuda_graph.bs_old": ("Capture cuda graph bs [1, 2, 4, 8, 10]",
                                 {"cuda_graph_bs": [1, 2, 4, 8, 10]}),
    "sglang.cuda_graph.end_old": (
        "Capture cuda graph end. Time elapsed: 5.37 s. mem usage=1.44 GB. avail mem=38.05 GB.",
        {"cuda_graph_secs": 5.37, "cuda_graph_mem_gb": 1.44}),
    "sglang.cuda_graph.end": (
        "Capture draft decode CUDA graph end. bs=(1,), elapsed=3.02 s, mem usage=0.21 GB, "
        "avail mem=6.10 GB.",
        {"cuda_graph_role": "draft decode", "cuda_graph_bs_draft": [1],
         "cuda_graph_mem_gb_draft": 0.21}),
    "sglang.decode.dot": (
        "Decode batch. #running-req: 1, #token: 54, token usage: 0.00, accept len: 3.21, cuda "
        "graph: True, gen throughput (token/s): 35.12, #queue-req: 0,",
        {"decode_running_reqs": 1, "spec_accept_length": 3.21, "gen_throughput": 35.12}),
    "sglang.decode.comma": (
        "Decode batch [812], #running-req: 8, #full token: 9120, full token usage: 0.31, mamba "
        "num: 32, mamba usage: 0.80, accept len: 2.50, accept rate: 0.50, cuda graph: True, gen "
        "throughput (token/s): 301.20, #queue-req: 3, ",
        {"decode_running_reqs": 8, "token_usage": 0.31, "mamba_usage": 0.8,
         "spec_accept_length": 2.5, "spec_accept_rate": 0.5}),
    "sglang.prefill": (
        "Prefill batch, #new-seq: 2, #new-token: 5084, #cached-token: 0, full token usage: 0.21, "
        "mamba usage: 0.20, #running-req: 0, #queue-req: 0, ",
        {"prefill_new_seqs": 2, "prefill_new_tokens": 5084, "mamba_usage": 0.2}),
    "sglang.ready": ("The server is fired up and ready to roll!", {"ready": True}),
    "any.startup_complete": ("Application startup complete.", {"ready": True}),
}


@pytest.mark.parametrize("pid", list(CASES))
def test_format(pid: str) -> None:
    """The case line is read by exactly its own row, with the expected values."""
    line, expected = CASES[pid]
    engine = BY_ID[pid].engine
    hit = match_line(line, None if engine == "any" else engine)
    assert hit is not None, f"{pid}: no row matched"
    assert hit.pattern.id == pid, f"{pid}: read by {hit.pattern.id} (table order?)"
    for key, want in expected.items():
        got = hit.values.get(key)
        if isinstance(want, float):
            assert got == pytest.approx(want), key
        else:
            assert got == want, key


def test_every_format_has_a_case() -> None:
    assert set(CASES) == {p.id for p in PATTERNS}
    assert all(p.releases for p in PATTERNS)


def test_other_lines_match_nothing() -> None:
    for line in ("[XPU]Setting attention block size to 64 tokens to ensure multiple of 64.",
                 "Loading safetensors checkpoint shards:  41% Completed | 17/41",
                 "GPU KV cache size: 100 tokens and more text",
                 "Capturing CUDA graphs (decode, FULL):  40%|████      | 27/67",
                 "Mamba cache mode is set to 'none' when prefix caching is off",
                 ""):
        assert match_line(line) is None, line


@pytest.mark.parametrize("raw, want", [
    ("(Worker_TP0 pid=577) ERROR 09-10 19:50:45 [multiproc_executor.py:1004]   File \"x.py\"",
     ("Worker_TP0 pid=577", "ERROR", "09-10 19:50:45", "multiproc_executor.py:1004",
      "  File \"x.py\"", "vllm")),
    ("INFO 01-23 10:00:00 llm_engine.py:234] Initializing an LLM engine (v0.6.4) with config: m",
     (None, "INFO", "01-23 10:00:00", "llm_engine.py:234",
      "Initializing an LLM engine (v0.6.4) with config: m", "vllm-old")),
    ("[2025-10-16 09:06:22 DP0 TP5] KV Cache is allocated. #tokens: 1",
     ("DP0 TP5", None, "2025-10-16 09:06:22", None, "KV Cache is allocated. #tokens: 1",
      "sglang")),
    ("2026-09-10T19:45:11.1234Z (APIServer pid=1) INFO 09-10 19:45:11 [api.py:1] hi",
     ("APIServer pid=1", "INFO", "09-10 19:45:11", "api.py:1", "hi", "vllm")),
    ("2026-05-01 19:08:28.357 | (EngineCore pid=187) WARNING 05-01 17:08:28 [x.py:9] w",
     ("EngineCore pid=187", "WARNING", "05-01 17:08:28", "x.py:9", "w", "vllm")),
    ("\x1b[32mINFO\x1b[0m 09-10 19:45:11 [api.py:1] coloured",
     (None, "INFO", "09-10 19:45:11", "api.py:1", "coloured", "vllm")),
    ("Capturing CUDA graphs (FULL):  50%|█   | 1/2\rCapturing CUDA graphs (FULL): 100%|██| 2/2",
     (None, None, None, None, "Capturing CUDA graphs (FULL): 100%|██| 2/2", "bare")),
    ("(APIServer pid=1) INFO:     Application startup complete.",
     ("APIServer pid=1", None, None, None, "INFO:     Application startup complete.",
      "vllm-proc")),
])
def test_prefix(raw: str, want: tuple[Any, ...]) -> None:
    ln = split_prefix(1, raw)
    assert (ln.process, ln.level, ln.time, ln.source, ln.text, ln.style) == want


def test_docker_collector_prefix_is_stripped() -> None:
    """``2026-05-01 19:08:28.357 | `` (a log collector's stamp) comes off before the engine's."""
    assert split_prefix(1, "2026-05-01 19:08:28.357 | plain text").text == "plain text"


def test_line_numbers_follow_newlines_not_carriage_returns() -> None:
    text = ("INFO 01-01 00:00:00 [a.py:1] start\n"
            "Capturing CUDA graphs (decode, FULL):  0%| | 0/3\rCapturing CUDA graphs (decode, "
            "FULL): 100%|██| 3/3\n"
            "INFO 01-01 00:00:01 [a.py:2] Available KV cache memory: 1.50 GiB\n")
    log = parse_text(text, engine="vllm")
    assert log.lines == 3
    assert log.observed["cudagraph_graphs_decode"].line == 2
    assert log.observed["available_kv_cache_memory_gib"].line == 3


def test_pyrepr_is_lenient() -> None:
    """Engines print reprs ast.literal_eval refuses; recon keeps what it cannot read as text."""
    assert parse_value("{'m': <CUDAGraphMode.FULL: 2>, 'x': torch.bfloat16}") == \
        {"m": "CUDAGraphMode.FULL", "x": "torch.bfloat16"}
    assert parse_value('{"level":3,"ok":true,"n":null}') == {"level": 3, "ok": True, "n": None}
    assert parse_value("not { valid") == "not { valid"


def test_object_reprs_are_read_as_their_text_and_strings_stay_strings() -> None:
    """Issue 38, class 7: one repr no literal reader takes (a function, in older releases'
    namespace) no longer makes the whole argument dict unreadable; ``<`` inside a quoted
    string is left alone, and an enum's quoted value does not end a string."""
    line = ("{'dispatch_function': <function ServeSubcommand.cmd at 0x7f3a2c>, "
            "'s': 'a<b>', 'q': \"it's\", 'd': {'type': <DynamicShapesType.BACKED: 'backed'>}}")
    assert parse_value(line) == {
        "dispatch_function": "<function ServeSubcommand.cmd at 0x7f3a2c>", "s": "a<b>",
        "q": "it's", "d": {"type": "DynamicShapesType.BACKED"}}
    kv = split_kv("a=/path/with, b=1, c={\"j\": [1, 2]}, d='s, t', e=SpeculativeConfig(k=3)")
    assert kv == {"a": "/path/with", "b": 1, "c": {"j": [1, 2]}, "d": "s, t", "e": {"k": 3}}
    assert parse_call("ServerArgs(model_path='m', tp_size=2)") == \
        ("ServerArgs", {"model_path": "m", "tp_size": 2})
