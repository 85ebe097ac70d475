"""Every quantity an engine log line can carry: its label, unit and type.

One dictionary, shared by the pattern table (named groups are these names),
the report (labels, units) and the comparison (which quantity a recipe
predicts). Names are engine-neutral where the meaning is the same.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Quantity:
    label: str
    unit: str = ""
    kind: str = "float"  # int / float / str / ints / bool / raw
    #: a start-up's first value is the one it describes (a drafter prints the same line after
    #: the main model: its own compile cache folders)
    first: bool = False


#: Every quantity a pattern can fill: name -> label, unit, type.
QUANTITIES: dict[str, Quantity] = {
    # identity and arguments
    "version": Quantity("engine version", kind="str"),
    "model": Quantity("model", kind="str"),
    "max_model_len": Quantity("max model len", "tokens", "int"),
    # hybrid attention/mamba alignment (vLLM)
    "attention_block_size": Quantity("attention block size (hybrid alignment)", "tokens", "int"),
    "attention_block_size_quantized": Quantity("attention block size (quantized KV page)",
                                               "tokens", "int"),
    "mamba_padding_pct": Quantity("mamba page padding", "%"),
    "mamba_cache_mode": Quantity("mamba cache mode", kind="str"),
    "mamba_cache_mode_arch": Quantity("mamba cache mode set for", kind="str"),
    "mamba_cache_mode_implicit": Quantity("mamba cache mode set by default", kind="bool"),
    "hybrid_prefix_caching_disabled": Quantity("prefix caching disabled for hybrid model",
                                               kind="bool"),
    # CUDA graphs (vLLM), resolved-config line and memory lines
    # the engine-config line prints the sizes after VllmConfig's size logic, *before* the
    # model runner rounds them for speculative decoding (adjust_cudagraph_sizes_for_spec_decode)
    "cudagraph_capture_sizes": Quantity("cudagraph capture sizes (engine config line)", "tokens",
                                        "ints"),
    "max_cudagraph_capture_size": Quantity("max cudagraph capture size (engine config line)",
                                           "tokens", "int"),
    "cudagraph_graphs_decode": Quantity("CUDA graphs captured (uniform decode)", kind="int"),
    "cudagraph_graphs_mixed": Quantity("CUDA graphs captured (mixed prefill-decode)", kind="int"),
    "cudagraph_graphs_full": Quantity("CUDA graphs captured (FULL)", kind="int"),
    "cudagraph_graphs_piecewise": Quantity("CUDA graphs captured (PIECEWISE)", kind="int"),
    "cudagraph_graphs": Quantity("CUDA graphs captured", kind="int"),
    "gpu_device_name": Quantity("device name", kind="str"),
    "max_num_batched_tokens": Quantity("max batched tokens per step", "tokens", "int"),
    "mamba_ssm_cache_dtype": Quantity("mamba SSM state dtype", kind="str"),
    "mamba_ssm_cache_dtype_arch": Quantity("mamba SSM state dtype set for", kind="str"),
    "kv_cache_dtype": Quantity("KV cache dtype", kind="str"),
    "gpu_total_gib": Quantity("device memory, total", "GiB"),
    "gpu_free_gib": Quantity("device memory free at start", "GiB"),
    "cudagraph_graphs_full_max": Quantity("largest FULL CUDA graph", "tokens", "int"),
    "cudagraph_graphs_piecewise_max": Quantity("largest PIECEWISE CUDA graph", "tokens", "int"),
    "cudagraph_mode": Quantity("cudagraph mode", kind="str"),
    "num_speculative_tokens": Quantity("speculative tokens per step", kind="int"),
    "speculative_method": Quantity("speculative method", kind="str"),
    "enable_prefix_caching": Quantity("prefix caching (resolved)", kind="bool"),
    "tensor_parallel_size": Quantity("tensor parallel size", kind="int"),
    "cudagraph_memory_estimated_gib": Quantity("CUDA graph memory, estimated", "GiB"),
    "cudagraph_pool_actual_gib": Quantity("CUDA graph pool, actual", "GiB"),
    "cudagraph_pool_estimated_gib": Quantity("CUDA graph pool, estimated", "GiB"),
    "cudagraph_pool_diff_pct": Quantity("CUDA graph pool, estimate error", "%"),
    "graph_capture_secs": Quantity("graph capture time", "s"),
    "graph_capture_gib": Quantity("graph capture memory", "GiB"),
    "gpu_util_current": Quantity("--gpu-memory-utilization in effect"),
    "gpu_memory_requested_gib": Quantity("device memory the share asks for", "GiB"),
    "gpu_util_equivalent": Quantity("same KV without CUDA graph profiling"),
    "gpu_util_suggested": Quantity("utilization the engine suggests"),
    "model_load_gib": Quantity("model weights", "GiB"),
    "model_load_secs": Quantity("model load time", "s"),
    # the torch.compile cache (vLLM)
    "compile_cache_path": Quantity("torch.compile cache folder", kind="str", first=True),
    "compile_cache_hash": Quantity("torch.compile cache folder name", kind="str", first=True),
    "compile_cache_disabled": Quantity("torch.compile cache disabled", kind="bool"),
    "aot_compile_hash": Quantity("AOT-compiled model folder name", kind="str", first=True),
    "aot_compile_loaded": Quantity("AOT-compiled model loaded from the cache", kind="bool", first=True),
    "compile_graphs_loaded_range": Quantity("compiled graphs loaded from the cache", kind="str"),
    "compile_env_hash": Quantity("compile cache: environment hash", kind="str", first=True),
    "compile_config_hash": Quantity("compile cache: config hash", kind="str", first=True),
    "compile_compiler_hash": Quantity("compile cache: compiler hash", kind="str", first=True),
    "compile_code_hash": Quantity("compile cache: traced code hash", kind="str", first=True),
    # KV capacity (vLLM)
    "available_kv_cache_memory_gib": Quantity("available KV cache memory", "GiB"),
    "kv_cache_tokens": Quantity("KV cache size", "tokens", "int"),
    "kv_cache_pool": Quantity("KV cache pool", kind="str"),
    "max_concurrency": Quantity("maximum concurrency", "x"),
    "max_concurrency_len": Quantity("maximum concurrency at", "tokens/request", "int"),
    "num_gpu_blocks": Quantity("GPU blocks", kind="int"),
    "num_cpu_blocks": Quantity("CPU blocks", kind="int"),
    # speculative decoding windows (vLLM)
    "spec_mean_acceptance_length": Quantity("mean acceptance length (window)", "tokens/step"),
    "spec_accepted_throughput": Quantity("accepted throughput", "tokens/s"),
    "spec_drafted_throughput": Quantity("drafted throughput", "tokens/s"),
    "spec_accepted_tokens": Quantity("accepted tokens (window)", kind="int"),
    "spec_drafted_tokens": Quantity("drafted tokens (window)", kind="int"),
    "spec_per_position": Quantity("per-position acceptance rate", kind="raw"),
    "spec_draft_acceptance_pct": Quantity("draft acceptance rate", "%"),
    "spec_system_efficiency": Quantity("system efficiency (v0)"),
    "spec_emitted_tokens": Quantity("emitted tokens (v0)", kind="int"),
    # runtime stats (vLLM)
    "prompt_throughput": Quantity("avg prompt throughput", "tokens/s"),
    "generation_throughput": Quantity("avg generation throughput", "tokens/s"),
    "running_reqs": Quantity("running requests", kind="int"),
    "waiting_reqs": Quantity("waiting requests", kind="int"),
    "kv_cache_usage_pct": Quantity("KV cache usage", "%"),
    "prefix_cache_hit_pct": Quantity("prefix cache hit rate", "%"),
    # SGLang pools
    "max_total_num_tokens": Quantity("max_total_num_tokens (KV pool)", "tokens", "int"),
    "chunked_prefill_size": Quantity("chunked prefill size", "tokens", "int"),
    "max_prefill_tokens": Quantity("max prefill tokens", "tokens", "int"),
    "max_running_requests": Quantity("max running requests", kind="int"),
    "context_len": Quantity("context length", "tokens", "int"),
    "available_gpu_mem_gb": Quantity("available GPU memory after start-up", "GB"),
    "kv_dtype": Quantity("KV cache dtype", kind="str"),
    "kv_pool_tokens": Quantity("KV pool size", "tokens", "int"),
    "k_size_gb": Quantity("K cache size", "GB"),
    "v_size_gb": Quantity("V cache size", "GB"),
    "kv_size_gb": Quantity("KV cache size", "GB"),
    "max_mamba_cache_size": Quantity("mamba cache size", "slots", "int"),
    "conv_state_gb": Quantity("mamba conv state", "GB"),
    "ssm_state_gb": Quantity("mamba ssm state", "GB"),
    "intermediate_ssm_gb": Quantity("mamba intermediate ssm cache (spec)", "GB"),
    "intermediate_conv_window_gb": Quantity("mamba intermediate conv window (spec)", "GB"),
    "mamba_capped_running_requests": Quantity("running requests capped by mamba cache to",
                                              kind="int"),
    "mamba_slots_per_request": Quantity("mamba state slots per request", kind="int"),
    "weight_load_gb": Quantity("weights loaded", "GB"),
    "weight_load_secs": Quantity("weight load time", "s"),
    "model_class": Quantity("model class", kind="str"),
    "avail_mem_before_weights_gb": Quantity("free memory before weights", "GB"),
    "avail_mem_after_weights_gb": Quantity("free memory after weights", "GB"),
    "avail_mem_after_pool_gb": Quantity("free memory after memory pool", "GB"),
    "cuda_graph_bs": Quantity("CUDA graph batch sizes", kind="ints"),
    "cuda_graph_secs": Quantity("CUDA graph capture time", "s"),
    "cuda_graph_mem_gb": Quantity("CUDA graph memory", "GB"),
    "cuda_graph_role": Quantity("CUDA graph captured for", kind="str"),
    "cuda_graph_bs_draft": Quantity("CUDA graph batch sizes (draft model)", kind="ints"),
    "cuda_graph_secs_draft": Quantity("CUDA graph capture time (draft model)", "s"),
    "cuda_graph_mem_gb_draft": Quantity("CUDA graph memory (draft model)", "GB"),
    "spec_accept_length": Quantity("accept length (window)", "tokens/step"),
    "spec_accept_rate": Quantity("accept rate (window)"),
    "decode_running_reqs": Quantity("running requests (batch line)", kind="int"),
    "token_usage": Quantity("token usage"),
    "mamba_usage": Quantity("mamba usage"),
    "gen_throughput": Quantity("generation throughput", "tokens/s"),
    "prefill_new_seqs": Quantity("new sequences (prefill)", kind="int"),
    "prefill_new_tokens": Quantity("new tokens (prefill)", kind="int"),
    "prefill_cached_tokens": Quantity("cached tokens (prefill)", kind="int"),
    # markers
    "ready": Quantity("server ready", kind="bool"),
    "args": Quantity("arguments", kind="raw"),
    "resolved": Quantity("resolved config", kind="raw"),
}
