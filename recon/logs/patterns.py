"""THE table of engine log line formats: one entry per format, one test per entry.

Engines reword their lines between releases (vLLM 0.10 prints ``GPU KV cache
size`` and ``Maximum concurrency`` on two lines, 0.29 on one, 0.30 names the
device; SGLang added ``dtype:`` to its KV line and rewrote its CUDA graph
lines). Every format recon reads is a row here, so a new wording is one new
row plus one test in ``tests/test_logs_patterns.py`` (a test checks that every
row has one). Named groups are quantity names from
:data:`recon.logs.quantities.QUANTITIES`, which types and labels them; a row with ``convert`` reads its groups itself.

``releases`` says where the wording was checked: "source" means the format
string was read in that release's own code (the wheels recon's tests
download); "public logs" means it was seen in logs pasted in public issues.
Rows are tried in order and the first match wins, so a specific wording must
come before a looser one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .pyrepr import (
    MAX_DIGITS,
    as_int_list,
    as_typed,
    enum_members,
    parse_call,
    parse_value,
    split_kv,
    too_many_digits,
)
from .quantities import QUANTITIES


@dataclass(frozen=True)
class LinePattern:
    """One wording of one engine line."""

    id: str
    engine: str  # vllm / sglang / any
    kind: str  # version / args / config / startup / runtime / spec / marker
    regex: re.Pattern[str]
    releases: str  # where the wording was checked (see module docstring)
    convert: Callable[[re.Match[str]], dict[str, Any]] | None = None
    #: observed quantities of this row are series (one per window), not start-up facts
    series: bool = False
    tags: tuple[str, ...] = field(default_factory=tuple)


_DECIMAL = re.compile(r"[-+]?\d+(?:\.\d*)?")


def exact_int(text: str) -> int:
    """A printed number as an exact int (``965,793`` -> 965793, ``12.7`` -> 12), read as
    decimal text, never through a float; more than :data:`MAX_DIGITS` digits is refused."""
    t = text.strip().replace(",", "")
    if not _DECIMAL.fullmatch(t):
        raise ValueError(f"not a decimal number: {t[:40]!r}")
    if sum(map(str.isdigit, t)) > MAX_DIGITS:
        raise too_many_digits()
    return int(t.partition(".")[0])


def bounded_float(text: str) -> float:
    """A printed number as a float; more than :data:`MAX_DIGITS` digits is refused."""
    t = text.strip().replace(",", "")
    if sum(map(str.isdigit, t)) > MAX_DIGITS:
        raise too_many_digits()
    return float(t)


def _num(text: str, kind: str) -> Any:
    t = text.strip()
    if kind == "int":
        return exact_int(t)
    if kind == "float":
        return bounded_float(t)
    if kind == "bool":
        return t.lower() in ("true", "1", "yes", "by default") or bool(t)
    if kind == "ints":
        return as_int_list(t if t.startswith(("[", "(")) else f"[{t}]")
    return t


def convert_groups(m: re.Match[str]) -> dict[str, Any]:
    """Named groups -> typed quantities; groups that did not take part are left out."""
    out: dict[str, Any] = {}
    for name, text in m.groupdict().items():
        if text is None:
            continue
        q = QUANTITIES[name]
        try:
            out[name] = _num(text, q.kind)
        except ValueError:
            out[name] = text.strip()
    return out


def _per_position(m: re.Match[str]) -> dict[str, Any]:
    out = convert_groups(m)
    if "spec_per_position" in out:
        out["spec_per_position"] = [bounded_float(x) for x in re.findall(r"\d+(?:\.\d+)?|nan", m["spec_per_position"])]
    return out


def _graph_end(m: re.Match[str]) -> dict[str, Any]:
    """A capture-end line: a draft model's graphs are its own quantities, not the target's."""
    out = convert_groups(m)
    if str(out.get("cuda_graph_role", "")).startswith("draft"):
        for key in ("cuda_graph_bs", "cuda_graph_secs", "cuda_graph_mem_gb"):
            if key in out:
                out[f"{key}_draft"] = out.pop(key)
    return out


def _args_dict(m: re.Match[str]) -> dict[str, Any]:
    """The argument dict; an enum member in it (a sub-config dumped whole, such as
    ``compilation_config``) as the command line takes it, so that it can be given again."""
    value = parse_value(m["args"])
    if not isinstance(value, dict):
        return {"args": {"__raw__": m["args"]}}
    return {"args": as_typed(value, enum_members(m["args"]))}


def _args_call(m: re.Match[str]) -> dict[str, Any]:
    _, kwargs = parse_call(m["args"])
    return {"args": kwargs or {"__raw__": m["args"]}}


def _vllm_config(m: re.Match[str]) -> dict[str, Any]:
    """The resolved-config line: capture sizes, mode, spec config, prefix caching, max len."""
    cfg = split_kv(m["resolved"])
    out: dict[str, Any] = {"version": m["version"], "resolved": cfg}
    comp = cfg.get("compilation_config")
    if isinstance(comp, str):
        comp = parse_value(comp)
    if isinstance(comp, dict):
        sizes = as_int_list(comp.get("cudagraph_capture_sizes"))
        if sizes is not None:
            out["cudagraph_capture_sizes"] = sorted(sizes)
        mx = comp.get("max_cudagraph_capture_size", comp.get("max_capture_size"))
        if isinstance(mx, int):
            out["max_cudagraph_capture_size"] = mx
        elif sizes:
            out["max_cudagraph_capture_size"] = max(sizes)
        mode = comp.get("cudagraph_mode")
        if mode is not None:
            out["cudagraph_mode"] = _mode_name(mode)
    spec = cfg.get("speculative_config")
    if isinstance(spec, str) and spec not in ("None", ""):
        spec = parse_call(spec)[1] or parse_value(spec)
    if isinstance(spec, dict):
        k = spec.get("num_spec_tokens", spec.get("num_speculative_tokens"))
        if isinstance(k, int):
            out["num_speculative_tokens"] = k
        if isinstance(spec.get("method"), str):
            out["speculative_method"] = spec["method"]
    for key, name in (("max_seq_len", "max_model_len"), ("enable_prefix_caching",
                                                         "enable_prefix_caching"),
                      ("tensor_parallel_size", "tensor_parallel_size"), ("model", "model"),
                      ("kv_cache_dtype", "kv_cache_dtype")):
        if key in cfg and cfg[key] is not None:
            out[name] = cfg[key]
    return out


#: vLLM 0.10 prints cudagraph_mode as its JSON value; names of those values.
_MODES = {0: "NONE", 1: "PIECEWISE", 2: "FULL", (2, 0): "FULL_DECODE_ONLY",
          (2, 1): "FULL_AND_PIECEWISE"}


def _mode_name(mode: Any) -> str:
    if isinstance(mode, list):
        mode = tuple(mode)
    if mode in _MODES:
        return _MODES[mode]
    return str(mode).removeprefix("CUDAGraphMode.")


_SG_FIELDS = {
    "#running-req": "decode_running_reqs", "token usage": "token_usage",
    "full token usage": "token_usage", "mamba usage": "mamba_usage",
    "accept len": "spec_accept_length", "accept rate": "spec_accept_rate",
    "gen throughput (token/s)": "gen_throughput", "#new-seq": "prefill_new_seqs",
    "#new-token": "prefill_new_tokens", "#cached-token": "prefill_cached_tokens",
}


def _graph_count(m: re.Match[str]) -> dict[str, Any]:
    """How many graphs the capture progress bar finished, per phase."""
    key = m["phase"] or m["mode"]
    name = {"decode": "cudagraph_graphs_decode", "mixed prefill-decode": "cudagraph_graphs_mixed",
            "FULL": "cudagraph_graphs_full", "PIECEWISE": "cudagraph_graphs_piecewise"}.get(
        key, "cudagraph_graphs")
    return {name: exact_int(m["n"])}


def _graphs_profiled(m: re.Match[str]) -> dict[str, Any]:
    """``PIECEWISE=49 (largest=512), FULL=49 (largest=512)``: graphs per mode and the largest.

    The V1 model runner lists the graphs it is about to capture, by mode, before it profiles
    their memory; they are the graphs the capture bars then count.
    """
    out: dict[str, Any] = {}
    for mode, count, largest in re.findall(r"\b([A-Z_]+)=(\d+) \(largest=(\d+)\)", m["groups"]):
        if mode in ("FULL", "PIECEWISE"):
            name = f"cudagraph_graphs_{mode.lower()}"
            out[name], out[f"{name}_max"] = exact_int(count), exact_int(largest)
    return out


def _sglang_batch(m: re.Match[str]) -> dict[str, Any]:
    """``key: value, key: value`` fields of SGLang's batch lines, whatever their order."""
    out: dict[str, Any] = {}
    for part in m["fields"].split(","):
        key, sep, value = part.strip().rpartition(": ")
        name = _SG_FIELDS.get(key.strip()) if sep else None
        if name is None:
            continue
        try:
            out[name] = _num(value, QUANTITIES[name].kind)
        except ValueError:
            continue
    return out


def _r(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _first(words: str) -> str:
    """The start of a row that is tried once, at the first occurrence of ``words``: a
    lookahead holds what it matched and gives none of it back (Python 3.10's atomic group;
    ``(?>...)`` came in 3.11). A line that repeats ``words`` costs one pass, not one per
    occurrence. Must open the expression: the lookahead's group is group 1."""
    return rf"^(?=(.*?{words}))\1"


_F = r"(?:\d[\d,]*(?:\.\d+)?)"  # a printed number (thousands separators allowed)

#: The table. Order matters: first match wins.
PATTERNS: list[LinePattern] = [
    # ---- vLLM: identity and arguments ---------------------------------------------------
    LinePattern("vllm.version.api_server", "vllm", "version",
                _r(r"vLLM API server version (?P<version>\d[\w.+-]*)"),
                "source 0.10.2; public logs 0.6-0.2x"),
    LinePattern("vllm.version.server", "vllm", "version",
                _r(r"vLLM server version (?P<version>\d[\w.+-]*), serving model (?P<model>\S+)"),
                "source 0.29.0-0.33.0 (VLLM_DISABLE_LOG_LOGO=1 or no colour formatter)"),
    LinePattern("vllm.version.logo", "vllm", "version",
                _r(r"^[^█▀▄]*[█▀▄].*\bversion\s+(?P<version>\d[\w.+-]*)\s*$"),
                "source 0.29.0-0.33.0 (the start-up logo)"),
    LinePattern("vllm.args.non_default", "vllm", "args",
                _r(_first(r"non-default args: ") + r"(?P<args>\{.*\})\s*$"),
                "source 0.10.2 (utils.py), 0.29.0 (api_utils.py), 0.33.0 (startup.py)",
                convert=_args_dict),
    LinePattern("vllm.args.namespace", "vllm", "args",
                _r(r"^args: (?P<args>Namespace\(.*\))\s*$"),
                "public logs 0.4-0.8 (api_server printed the argparse Namespace)",
                convert=_args_call),
    LinePattern("vllm.config.v1", "vllm", "config",
                _r(_first(r"Initializing a V1 LLM engine \(v") + r"(?P<version>[^)]+)\) with config: "
                   r"(?P<resolved>.*)$"),
                "source 0.10.2 (compilation_config as JSON), 0.29.0-0.33.0 (as a dict repr)",
                convert=_vllm_config),
    LinePattern("vllm.config.v0", "vllm", "config",
                _r(_first(r"Initializing an LLM engine \(v") + r"(?P<version>[^)]+)\) with config: "
                   r"(?P<resolved>.*)$"),
                "public logs 0.4-0.8 (V0 engine)", convert=_vllm_config),
    LinePattern("vllm.max_model_len", "vllm", "startup",
                _r(r"Using max model len (?P<max_model_len>\d+)"), "public logs 0.10.2"),
    # ---- vLLM: hybrid attention/mamba ---------------------------------------------------
    LinePattern("vllm.hybrid.prefix_caching_disabled", "vllm", "startup",
                _r(r"Hybrid or mamba-based model detected: disabling prefix caching"),
                "public logs 0.10.2 (before mamba prefix caching existed)",
                convert=lambda m: {"hybrid_prefix_caching_disabled": True}),
    LinePattern("vllm.mamba_mode.set", "vllm", "startup",
                _r(r"Mamba cache mode is set to '(?P<mamba_cache_mode>\w+)' for "
                   r"(?P<mamba_cache_mode_arch>\w+)(?P<mamba_cache_mode_implicit> by default)?"),
                "source 0.29.0-0.33.0 (model_executor/models/config.py)"),
    LinePattern("vllm.mamba_mode.none", "vllm", "startup",
                _r(r"Mamba cache mode is set to '(?P<mamba_cache_mode>none)' when prefix caching "
                   r"is disabled"),
                "source 0.29.0-0.33.0"),
    LinePattern("vllm.attn_block.quantized", "vllm", "startup",
                _r(r"Setting attention block size to (?P<attention_block_size_quantized>\d+) "
                   r"tokens so the quantized"),
                "source 0.29.0-0.33.0 (platforms/interface.py)"),
    LinePattern("vllm.attn_block.mamba", "vllm", "startup",
                _r(r"(?<!\[XPU\])Setting attention block size to (?P<attention_block_size>\d+) "
                   r"tokens"),
                "source 0.10.2 (models/config.py), 0.29.0-0.33.0 (platforms/interface.py)"),
    LinePattern("vllm.mamba_padding", "vllm", "startup",
                _r(r"Padding mamba page size by (?P<mamba_padding_pct>\d+(?:\.\d+)?)%"),
                "source 0.10.2, 0.29.0-0.33.0"),
    # ---- vLLM: the torch.compile cache ---------------------------------------------------
    LinePattern("vllm.compile_cache.dir", "vllm", "startup",
                _r(r"Using cache directory: (?P<compile_cache_path>\S*?torch_compile_cache/"
                   r"(?P<compile_cache_hash>[0-9a-f]{6,64})/\S*) for vLLM's torch\.compile"),
                "source 0.26.0 (VllmBackend.__call__); real H100/H200 logs"),
    LinePattern("vllm.compile_cache.disabled", "vllm", "startup",
                _r(r"(?P<compile_cache_disabled>vLLM's torch\.compile cache is disabled)"),
                "source 0.26.0 (VllmBackend.__call__)", convert=lambda m: {
                    "compile_cache_disabled": True}),
    LinePattern("vllm.compile_cache.aot", "vllm", "startup",
                _r(r"(?P<aot_compile_action>saved AOT compiled function to|Directly load AOT "
                   r"compilation from path) \S*?torch_aot_compile/(?P<aot_compile_hash>[0-9a-f]{64})/"),
                "source 0.26.0 (decorators: the AOT save and load lines); real H100/H200 logs",
                convert=lambda m: {"aot_compile_hash": m.group("aot_compile_hash"),
                                   "aot_compile_loaded": m.group("aot_compile_action") != "saved AOT "
                                   "compiled function to"}),
    LinePattern("vllm.compile_cache.graphs_loaded", "vllm", "startup",
                _r(r"Directly load the compiled graph\(s\) for (?:compile range|shape) "
                   r"(?P<compile_graphs_loaded_range>\S+(?: \d+\))?) from the cache"),
                "source 0.26.0 (CompilerManager.load); real H100/H200 logs"),
    LinePattern("vllm.compile_cache.factors", "vllm", "startup",
                _r(r"torch\.compile cache factors: env=(?P<compile_env_hash>[0-9a-f]+) "
                   r"cfg=(?P<compile_config_hash>[0-9a-f]+) comp=(?P<compile_compiler_hash>[0-9a-f]+) "
                   r"code=(?P<compile_code_hash>[0-9a-f]+)"),
                "source 0.26.0 (VllmBackend.__call__, at VLLM_LOGGING_LEVEL=DEBUG); real H100 logs"),
    # ---- vLLM: memory, KV capacity ------------------------------------------------------
    LinePattern("vllm.model_load", "vllm", "startup",
                _r(r"Model loading took (?P<model_load_gib>\d+(?:\.\d+)?) GiB(?: memory)? and "
                   r"(?P<model_load_secs>\d+(?:\.\d+)?) s"),
                "public logs 0.10.2 ('GiB and N seconds'), a user's log ('GiB memory and')"),
    LinePattern("vllm.chunked_prefill", "vllm", "startup",
                _r(r"Chunked prefill is enabled with max_num_batched_tokens="
                   r"(?P<max_num_batched_tokens>\d+)"),
                "source 0.26.0 (scheduler config); real H200 logs"),
    LinePattern("vllm.mamba_ssm_dtype", "vllm", "startup",
                _r(r"Updating mamba_ssm_cache_dtype to '(?P<mamba_ssm_cache_dtype>\w+)' for "
                   r"(?P<mamba_ssm_cache_dtype_arch>\w+) model"),
                "source 0.26.0 (model config hooks: NemotronH); real H200 logs"),
    LinePattern("vllm.device.memory", "vllm", "startup",
                _r(r"Free memory on device(?: \S+)? \((?P<gpu_free_gib>\d+(?:\.\d+)?)/"
                   r"(?P<gpu_total_gib>\d+(?:\.\d+)?) GiB\) on startup"
                   r"(?:\. Desired GPU memory utilization is \((?P<gpu_util_current>\d+(?:\.\d+)?), "
                   r"(?P<gpu_memory_requested_gib>\d+(?:\.\d+)?) GiB\))?"),
                "source 0.26.0 (the worker's memory summary, and its 'less than desired' error), "
                "0.29.0-0.34.0 (the share in effect and its GiB); a public 0.31.0 log"),
    LinePattern("vllm.device.name", "vllm", "startup",
                _r(r"device_name=(?P<gpu_device_name>[A-Za-z][\w-]*)[,.]"),
                "source 0.26.0 (kernel config file names: fused MoE, fp8/int8 block GEMM, "
                "mamba SSM); real H200 logs"),
    LinePattern("vllm.kv_memory", "vllm", "startup",
                _r(r"Available KV cache memory: (?P<available_kv_cache_memory_gib>\d+(?:\.\d+)?) GiB"),
                "source 0.10.2 (%.2f), 0.29.0-0.33.0 (format_gib)"),
    LinePattern("vllm.kv_tokens.joined", "vllm", "startup",
                _r(rf"(?<![A-Z])(?P<kv_cache_pool>[A-Z]+(?: \+ host)?) KV cache size: (?P<kv_cache_tokens>{_F}) "
                   rf"tokens, Maximum concurrency for (?P<max_concurrency_len>{_F}) tokens per "
                   rf"request: (?P<max_concurrency>\d+(?:\.\d+)?)x"),
                "source 0.29.0 ('GPU'), 0.30.0-0.33.0 (device name, '+ host')"),
    LinePattern("vllm.kv_tokens.split", "vllm", "startup",
                _r(rf"GPU KV cache size: (?P<kv_cache_tokens>{_F}) tokens\s*$"),
                "source 0.10.2 (its own line; Maximum concurrency follows)"),
    LinePattern("vllm.max_concurrency.split", "vllm", "startup",
                _r(rf"Maximum concurrency for (?P<max_concurrency_len>{_F}) tokens per request: "
                   rf"(?P<max_concurrency>\d+(?:\.\d+)?)x"),
                "source 0.10.2 (V1 and V0 executor)"),
    LinePattern("vllm.gpu_blocks.v0", "vllm", "startup",
                _r(r"# (?:GPU|cuda) blocks: (?P<num_gpu_blocks>\d+), # CPU blocks: "
                   r"(?P<num_cpu_blocks>\d+)"),
                "public logs 0.4-0.8 (V0 engine)"),
    # ---- vLLM: CUDA graphs --------------------------------------------------------------
    LinePattern("vllm.cudagraph.estimate", "vllm", "startup",
                _r(r"Estimated CUDA graph memory: (?P<cudagraph_memory_estimated_gib>\d+(?:\.\d+)?) GiB"),
                "source 0.29.0-0.33.0"),
    LinePattern("vllm.cudagraph.util_hint", "vllm", "startup",
                _r(_first(r"current --gpu-memory-utilization=") + r"(?P<gpu_util_current>\d+(?:\.\d+)?) is equivalent "
                   r"to --gpu-memory-utilization=(?P<gpu_util_equivalent>\d+(?:\.\d+)?) without CUDA graph"
                   r".*?increase --gpu-memory-utilization to (?P<gpu_util_suggested>\d+(?:\.\d+)?)"),
                "source 0.33.0; public logs 0.2x"),
    LinePattern("vllm.cudagraph.pool", "vllm", "startup",
                _r(r"CUDA graph pool memory: (?P<cudagraph_pool_actual_gib>\d+(?:\.\d+)?) GiB \(actual\), "
                   r"(?P<cudagraph_pool_estimated_gib>\d+(?:\.\d+)?) GiB \(estimated\), difference: "
                   r"\d+(?:\.\d+)? GiB \((?P<cudagraph_pool_diff_pct>\d+(?:\.\d+)?)%\)"),
                "source 0.29.0-0.33.0; a user's log"),
    LinePattern("vllm.cudagraph.progress", "vllm", "startup",
                _r(r"Capturing CUDA graphs \((?:(?P<phase>decode|mixed prefill-decode), )?"
                   r"(?P<mode>\w+)\):\s*100%\|[^|]*\|\s*(?P<n>\d+)/(?P=n)\b"),
                "source 0.29.0-0.33.0 (V1 runner: phase and mode; V2 runner: mode only); "
                "public logs 0.10.2 (the tqdm bar's final state)", convert=_graph_count),
    LinePattern("vllm.cudagraph.profiled", "vllm", "startup",
                _r(r"Profiling CUDA graph memory: (?P<groups>[A-Z_]+=\d+ \(largest=\d+\)"
                   r"(?:, [A-Z_]+=\d+ \(largest=\d+\))*)"),
                "source 0.26.0 (V1 GPU model runner; the V2 runner does not print it)",
                convert=_graphs_profiled),
    LinePattern("vllm.cudagraph.captured", "vllm", "startup",
                _r(r"Graph capturing finished in (?P<graph_capture_secs>\d+) secs?, took "
                   r"(?P<graph_capture_gib>\d+(?:\.\d+)?) GiB"),
                "source 0.10.2, 0.29.0-0.33.0"),
    # ---- vLLM: speculative decoding -----------------------------------------------------
    LinePattern("vllm.spec.v1", "vllm", "spec",
                _r(r"SpecDecoding metrics: Mean acceptance length: (?P<spec_mean_acceptance_length>"
                   r"\d+(?:\.\d+)?|nan), Accepted throughput: (?P<spec_accepted_throughput>\d+(?:\.\d+)?) tokens/s, "
                   r"Drafted throughput: (?P<spec_drafted_throughput>\d+(?:\.\d+)?) tokens/s, Accepted: "
                   r"(?P<spec_accepted_tokens>\d+) tokens, Drafted: (?P<spec_drafted_tokens>\d+) "
                   r"tokens, Per-position acceptance rate: (?P<spec_per_position>[\d., na]*?), "
                   r"Avg Draft acceptance rate: (?P<spec_draft_acceptance_pct>\d+(?:\.\d+)?|nan)%"),
                "source 0.10.2, 0.29.0-0.33.0 (v1/spec_decode/metrics.py)",
                convert=_per_position, series=True),
    LinePattern("vllm.spec.v1_early", "vllm", "spec",
                _r(r"SpecDecoding metrics: Draft acceptance rate: (?P<spec_draft_acceptance_pct>"
                   r"\d+(?:\.\d+)?|nan)%, Mean acceptance length: (?P<spec_mean_acceptance_length>\d+(?:\.\d+)?), "
                   r"Accepted: (?P<spec_accepted_tokens>\d+) tokens, Drafted: "
                   r"(?P<spec_drafted_tokens>\d+) tokens(?:, Per-position acceptance rate: "
                   r"(?P<spec_per_position>[\d., ]+))?"),
                "public logs 0.8-0.9", convert=_per_position, series=True),
    LinePattern("vllm.spec.v0", "vllm", "spec",
                _r(r"Speculative metrics: Draft acceptance rate: (?P<spec_draft_acceptance_pct>"
                   r"\d+(?:\.\d+)?|nan), System efficiency: (?P<spec_system_efficiency>\d+(?:\.\d+)?|nan), Number "
                   r"of speculative tokens: (?P<num_speculative_tokens>\d+), Number of accepted "
                   r"tokens: (?P<spec_accepted_tokens>\d+), Number of draft tokens: "
                   r"(?P<spec_drafted_tokens>\d+), Number of emitted tokens: "
                   r"(?P<spec_emitted_tokens>\d+)"),
                "public logs 0.5-0.7 (V0; the rate is a fraction, not %)", series=True),
    LinePattern("vllm.engine_stats", "vllm", "runtime",
                _r(_first(r"Avg prompt throughput: ") + r"(?P<prompt_throughput>\d+(?:\.\d+)?) tokens/s, Avg generation "
                   r"throughput: (?P<generation_throughput>\d+(?:\.\d+)?) tokens/s, Running: "
                   r"(?P<running_reqs>\d+) reqs, Waiting: (?P<waiting_reqs>\d+) reqs,.*?KV cache "
                   r"usage: (?P<kv_cache_usage_pct>\d+(?:\.\d+)?)%(?:, Prefix cache hit rate: "
                   r"(?P<prefix_cache_hit_pct>\d+(?:\.\d+)?)%)?"),
                "source 0.10.2, 0.33.0 (metrics/loggers.py)", series=True),
    # ---- SGLang -------------------------------------------------------------------------
    LinePattern("sglang.args.dataclass", "sglang", "args",
                _r(_first(r"server_args=") + r"(?P<args>ServerArgs\(.*\))\s*$"),
                "public logs 0.4-0.5.x (the ServerArgs dataclass repr)", convert=_args_call),
    LinePattern("sglang.args.dict", "sglang", "args",
                _r(_first(r"server_args=") + r"(?P<args>\{.*\})\s*$"),
                "source 0.5.23 (resolved_dict())", convert=_args_dict),
    LinePattern("sglang.load_weight_begin", "sglang", "startup",
                _r(r"Load weight begin\. avail mem=(?P<avail_mem_before_weights_gb>\d+(?:\.\d+)?) GB"),
                "source 0.5.23 (model_runner.py); public logs 2025-2026"),
    LinePattern("sglang.load_weight", "sglang", "startup",
                _r(_first(r"Load weight end\. ") + r"(?:elapsed=(?P<weight_load_secs>\d+(?:\.\d+)?) s, )?"
                   r"type=(?P<model_class>\w+),.*?avail mem=(?P<avail_mem_after_weights_gb>\d+(?:\.\d+)?) "
                   r"GB, mem usage=(?P<weight_load_gb>\d+(?:\.\d+)?) GB"),
                "source 0.5.23; public logs 2025-2026"),
    LinePattern("sglang.mamba_alloc", "sglang", "startup",
                _r(r"Mamba Cache is allocated\. (?:max_mamba_cache_size: "
                   r"(?P<max_mamba_cache_size>\d+), )?conv_state size: (?P<conv_state_gb>\d+(?:\.\d+)?) ?GB,"
                   r" ssm_state size: (?P<ssm_state_gb>\d+(?:\.\d+)?) ?GB,?(?: intermediate_ssm_state_cache "
                   r"size: (?P<intermediate_ssm_gb>\d+(?:\.\d+)?) ?GB,?)?(?: intermediate_conv_window_cache "
                   r"size: (?P<intermediate_conv_window_gb>\d+(?:\.\d+)?) ?GB)?"),
                "source 0.5.23 (mem_cache/memory_pool.py); public logs 2026-04"),
    LinePattern("sglang.kv_alloc.dtype", "sglang", "startup",
                _r(rf"KV Cache is allocated\. dtype: (?P<kv_dtype>\S+), #tokens: "
                   rf"(?P<kv_pool_tokens>{_F}), (?:K size: (?P<k_size_gb>\d+(?:\.\d+)?) GB, V size: "
                   rf"(?P<v_size_gb>\d+(?:\.\d+)?) GB|KV size: (?P<kv_size_gb>\d+(?:\.\d+)?) GB)"),
                "source 0.5.23; public logs 0.5.6 (2026-06)"),
    LinePattern("sglang.kv_alloc.plain", "sglang", "startup",
                _r(rf"KV Cache is allocated\. #tokens: (?P<kv_pool_tokens>{_F}), (?:K size: "
                   rf"(?P<k_size_gb>\d+(?:\.\d+)?) GB, V size: (?P<v_size_gb>\d+(?:\.\d+)?) GB|KV size: "
                   rf"(?P<kv_size_gb>\d+(?:\.\d+)?) GB)"),
                "public logs 0.4-0.5.x (2025-10, 2026-04: no dtype field)"),
    LinePattern("sglang.memory_pool_end", "sglang", "startup",
                _r(r"Memory pool end\. avail mem=(?P<avail_mem_after_pool_gb>\d+(?:\.\d+)?) GB"),
                "source 0.5.23; public logs 2025-2026"),
    LinePattern("sglang.mamba_cap", "sglang", "startup",
                _r(r"max_running_requests is capped to (?P<mamba_capped_running_requests>\d+) by "
                   r"the mamba state cache \(max_mamba_cache_size=(?P<max_mamba_cache_size>\d+), "
                   r"(?P<mamba_slots_per_request>\d+) state slots per request\)"),
                "source 0.5.23 (kv_cache_configurator.py)"),
    LinePattern("sglang.scheduler_limits", "sglang", "startup",
                _r(r"max_total_num_tokens=(?P<max_total_num_tokens>\d+), chunked_prefill_size="
                   r"(?P<chunked_prefill_size>-?\d+), max_prefill_tokens=(?P<max_prefill_tokens>\d+),"
                   r" max_running_requests=(?P<max_running_requests>\d+), context_len="
                   r"(?P<context_len>\d+)(?:, available_(?:gpu|cpu)_mem=(?P<available_gpu_mem_gb>"
                   r"\d+(?:\.\d+)?) GB)?"),
                "source 0.5.23 (managers/scheduler.py); public logs 0.4-0.5"),
    LinePattern("sglang.cuda_graph.bs_old", "sglang", "startup",
                _r(r"Capture cuda graph bs (?P<cuda_graph_bs>\[[\d, ]*\])"),
                "public logs 2025-10 .. 2026-06"),
    LinePattern("sglang.cuda_graph.end_old", "sglang", "startup",
                _r(r"Capture cuda graph end\. Time elapsed: (?P<cuda_graph_secs>\d+(?:\.\d+)?) s\. mem "
                   r"usage=(?P<cuda_graph_mem_gb>\d+(?:\.\d+)?) GB\."),
                "public logs 2025-10 .. 2026-06"),
    LinePattern("sglang.cuda_graph.end", "sglang", "startup",
                _r(r"Capture (?P<cuda_graph_role>(?:target|draft) (?:decode|verify)) \w+ graph end\. "
                   r"bs=(?P<cuda_graph_bs>\([\d, ]*\)), elapsed=(?P<cuda_graph_secs>\d+(?:\.\d+)?) s, mem "
                   r"usage=(?P<cuda_graph_mem_gb>\d+(?:\.\d+)?) GB"),
                "source 0.5.23 (cuda_graph_setup.py)", convert=_graph_end),
    LinePattern("sglang.decode.dot", "sglang", "spec",
                _r(r"Decode batch\. (?P<fields>#running-req: .*)$"),
                "public logs 0.4-0.5.x ('Decode batch.', accept len without rate)",
                convert=_sglang_batch, series=True),
    LinePattern("sglang.decode.comma", "sglang", "spec",
                _r(r"Decode batch(?: \[\d+\])?, (?P<fields>#running-req: .*)$"),
                "source 0.5.23 (metrics_reporter.py: accept len and accept rate)",
                convert=_sglang_batch, series=True),
    LinePattern("sglang.prefill", "sglang", "runtime",
                _r(r"Prefill batch(?: \[\d+\])?[.,] (?P<fields>#new-seq: .*)$"),
                "source 0.5.23; a user's log; public logs", convert=_sglang_batch, series=True),
    LinePattern("sglang.ready", "sglang", "marker",
                _r(r"The server is fired up and ready to roll!"),
                "source 0.5.23; public logs", convert=lambda m: {"ready": True}),
    # ---- both (uvicorn) -----------------------------------------------------------------
    LinePattern("any.startup_complete", "any", "marker",
                _r(r"Application startup complete\."),
                "uvicorn, printed by both engines' HTTP servers",
                convert=lambda m: {"ready": True}),
]

BY_ID: dict[str, LinePattern] = {p.id: p for p in PATTERNS}
assert len(BY_ID) == len(PATTERNS), "duplicate pattern id"


@dataclass
class Match:
    """A row that matched: its typed values and the numbers exactly as printed."""

    pattern: LinePattern
    values: dict[str, Any]
    printed: dict[str, str]


#: A line longer than this is matched only against the argument and config rows, whose
#: expressions run in linear time (one start, at the first occurrence of their words); the
#: other rows' lines are a few hundred characters, and their expressions may backtrack.
SHORT_LINE = 8 << 10
_LONG_KINDS = ("args", "config")


def match_line(text: str, engine: str | None = None) -> Match | None:
    """The first row that matches ``text`` (restricted to ``engine`` when known)."""
    if not _PREFILTER.search(text):
        return None
    long = len(text) > SHORT_LINE
    for pat in PATTERNS:
        if (engine and pat.engine not in (engine, "any")) or (long and pat.kind not in _LONG_KINDS):
            continue
        m = pat.regex.search(text)
        if m:
            printed = {k: v for k, v in m.groupdict().items() if v is not None and k in QUANTITIES}
            return Match(pat, (pat.convert or convert_groups)(m), printed)
    return None


#: Cheap first test: a line with none of these words cannot match any row (most lines).
_PREFILTER = re.compile(
    r"version|args|Initializing|max model len|Hybrid|Mamba|attention block|Padding|Model loading|"
    r"KV cache|concurrency|blocks:|CUDA graph|Graph capturing|Capturing|gpu-memory-utilization|"
    r"SpecDecoding|Speculative metrics|throughput|Load weight|Cache is allocated|Memory pool|"
    r"max_running_requests|max_total_num_tokens|cuda graph|graph end|batch|fired up|startup complete|"
    r"Free memory on device|device_name=|Chunked prefill|mamba_ssm_cache_dtype|torch\.compile|"
    r"AOT compil|from the cache"
)
