"""Known traps, recognised in a parsed log (shared/field-notes.md).

Each check reads only what the engine printed: the argument line (what the
user asked for), the resolved lines (what the engine did) and the errors. A
trap is "the engine did something other than what the arguments say" or "the
green lines do not prove what people take them to prove"; each names the
field story and, where one exists, the recon command that answers it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .models import ServerLog, Trap
from .pyrepr import as_int_list, parse_value


def arg(log: ServerLog, *names: str) -> Any:
    """The first of ``names`` in the log's argument line (vLLM dest or SGLang field name)."""
    for n in names:
        if n in log.args and log.args[n] is not None:
            return log.args[n]
    return None


def spec_tokens(log: ServerLog) -> int | None:
    """Speculative tokens per step, from the resolved config, else from the arguments."""
    k = log.value("num_speculative_tokens")
    if isinstance(k, int):
        return k
    spec = arg(log, "speculative_config")
    if isinstance(spec, str):
        spec = parse_value(spec)
    if isinstance(spec, dict) and isinstance(spec.get("num_speculative_tokens"), int):
        return spec["num_speculative_tokens"]
    k = arg(log, "num_speculative_tokens", "speculative_num_steps")
    return k if isinstance(k, int) else None


def spec_method(log: ServerLog) -> str:
    """``"ngram, "``: the speculative method the log names (resolved, else asked for), or ""."""
    method = log.value("speculative_method")
    if not isinstance(method, str):
        spec = arg(log, "speculative_config")
        spec = parse_value(spec) if isinstance(spec, str) else spec
        method = spec.get("method") if isinstance(spec, dict) else None
    method = method or arg(log, "speculative_algorithm")
    return f"{method}, " if isinstance(method, str) and method else ""


def requested_capture_sizes(log: ServerLog) -> list[int] | None:
    """Capture sizes the user asked for: --compilation-config or --cuda-graph-sizes."""
    comp = arg(log, "compilation_config")
    if isinstance(comp, str):
        comp = parse_value(comp)
    if isinstance(comp, dict):
        sizes = as_int_list(comp.get("cudagraph_capture_sizes"))
        if sizes:
            return sorted(sizes)
    sizes = as_int_list(arg(log, "cuda_graph_sizes", "cudagraph_capture_sizes"))
    return sorted(sizes) if sizes else None


def _align_implicit(log: ServerLog) -> list[Trap]:
    mode = log.observed.get("mamba_cache_mode")
    if mode is None or mode.value != "align":
        return []
    implicit = bool(log.value("mamba_cache_mode_implicit")) and arg(log, "mamba_cache_mode") is None
    block = log.value("attention_block_size")
    where = f" (mamba block size = attention block size {block} tokens)" if block else ""
    if not implicit:
        return [Trap("mamba-align", "info", f"mamba cache mode 'align' was asked for{where}.",
                     [mode.line], "recon recipe run vllm-mamba-align-column")]
    return [Trap(
        "mamba-align-implicit", "warn",
        "mamba cache mode 'align' was switched on implicitly: prefix caching is on and no "
        f"--mamba-cache-mode was given{where}. In align mode a resumed prefix's running-state "
        "column is (num_computed_tokens - 1) // mamba_block_size; a release that divides by the "
        "attention block size instead indexes past the block table on long prefixes (a 101,376-token "
        "prefix gave column ~6335 in a row ~88 wide, CUDA illegal memory access, Xid 13/31).",
        [mode.line], "recon recipe run vllm-mamba-align-column --snapshot <this release>")]


def _capture_rounded(log: ServerLog) -> list[Trap]:
    """Spec decode: the runner rounds capture sizes to multiples of k+1 after the config line."""
    k = spec_tokens(log)
    obs = log.observed.get("cudagraph_capture_sizes")
    sizes = list(obs.value) if obs is not None and obs.value else requested_capture_sizes(log)
    if not k or not sizes:
        return []
    q = k + 1
    top = log.value("max_cudagraph_capture_size") or max(sizes)
    off = [s for s in sizes if s % q]
    where = f"the engine config line (line {obs.line})" if obs is not None else "the arguments"
    text = (f"{spec_method(log)}{k} speculative tokens: every decode step is a multiple of {q} "
            "tokens, and the model runner (adjust_cudagraph_sizes_for_spec_decode) rounds "
            f"cudagraph_capture_sizes up to multiples of {q}, dropping those above the max, after "
            "the config line is printed")
    if off:
        text += f"; {where} still lists {off}, which are not multiples of {q}"
    counts = [(QUANT, log.value(name)) for name, QUANT in (
        ("cudagraph_graphs_decode", "uniform decode"), ("cudagraph_graphs_mixed", "mixed"),
        ("cudagraph_graphs_full", "FULL"), ("cudagraph_graphs_piecewise", "PIECEWISE"),
        ("cudagraph_graphs", "all")) if log.value(name) is not None]
    if counts:
        text += f"; {len(sizes)} sizes configured, graphs captured: " + ", ".join(
            f"{n} ({what})" for what, n in counts)
    text += (f". Decode steps of more than {top} tokens ({top // q} running requests x {q} "
             "tokens) run without CUDA graphs.")
    lines = [x for x in (obs.line if obs is not None else None, log.args_line) if x]
    return [Trap("capture-sizes-rounded", "warn" if off else "info", text, lines,
                 "recon recipe run vllm-capture-sizes --snapshot <this release> (exact sizes and "
                 "which steps run eager)")]


def _oom_errors(log: ServerLog) -> list[int]:
    return [e.line for e in log.errors
            if "out of memory" in f"{e.headline} {e.exception}".lower()
            or "OutOfMemoryError" in f"{e.headline} {e.exception}"]


def _long_context(log: ServerLog) -> list[Trap]:
    mml = arg(log, "max_model_len", "context_length")
    green = [log.observed[n].line for n in ("available_kv_cache_memory_gib", "kv_cache_tokens",
                                            "max_concurrency", "max_total_num_tokens")
             if n in log.observed]
    ooms = _oom_errors(log)
    out: list[Trap] = []
    if ooms and green:
        out.append(Trap(
            "oom-after-green-startup", "error",
            "CUDA out of memory after the start-up capacity lines were printed: those lines count "
            "weights + KV pool + CUDA graphs, not a prefill's activation peak (a 93K-token "
            "prefill crashed a server whose three KV lines were green).",
            green[:1] + ooms[:3]))
    if mml is not None and green:
        out.append(Trap(
            "max-model-len-unchecked", "warn" if ooms else "info",
            f"--max-model-len {mml} was set explicitly. 'Available KV cache memory', 'GPU KV cache "
            "size' and 'Maximum concurrency' do not account for prefill activation peaks; serve "
            f"one prompt near {mml} tokens before trusting it (raising it alone "
            "once crashed a 93K-token prefill).", ([log.args_line] if log.args_line else []) + green[:1]))
    return out


def _util_hint(log: ServerLog) -> list[Trap]:
    obs = log.observed.get("gpu_util_suggested")
    if obs is None:
        return []
    cur = log.value("gpu_util_current")
    return [Trap(
        "util-suggestion", "info",
        f"the engine suggests --gpu-memory-utilization {obs.value} (now {cur}) to keep the KV pool "
        "of a release without CUDA graph profiling; the difference is what the graphs really "
        "use, and taking it back spends the prefill headroom.", [obs.line])]


def _prefix_caching_ignored(log: ServerLog) -> list[Trap]:
    obs = log.observed.get("hybrid_prefix_caching_disabled")
    if obs is None or not arg(log, "enable_prefix_caching"):
        return []
    return [Trap("prefix-caching-ignored", "warn",
                 "--enable-prefix-caching was given but this release disables prefix caching for "
                 "hybrid models.", [obs.line])]


def _spec_collapse(log: ServerLog) -> list[Trap]:
    wins = [w for w in log.spec_windows
            if w.get("spec_mean_acceptance_length") is not None
            or w.get("spec_accept_length") is not None]
    k = spec_tokens(log)
    if not wins or not k:
        return []
    seen = [w.get("spec_mean_acceptance_length", w.get("spec_accept_length")) for w in wins]
    lengths: list[float] = [x for x in seen if isinstance(x, float) and x == x and x > 0]
    if not lengths:
        return []
    mean = sum(lengths) / len(lengths)
    rates = [w["spec_per_position"] for w in wins if w.get("spec_per_position")]
    dead = sorted({i for r in rates for i, p in enumerate(r) if p < 0.05})
    if mean >= 1 + 0.25 * k and not dead:
        return []
    text = (f"speculative decoding accepts {mean:.2f} tokens/step on average over {len(lengths)} "
            f"windows with {k} drafted")
    if dead:
        text += f"; positions {dead} are near zero"
    text += (" (windowed metric). Once, a collapse like this was a shared compile cache "
             "poisoned by a failed run; rerun with a clean cache directory before blaming kernels.")
    loaded = _loaded_from_cache(log)
    if loaded:
        text += f" This run did load its compiled model from the cache: {loaded}."
    return [Trap("spec-acceptance-low", "warn", text, [wins[0]["line"], wins[-1]["line"]])]


def _loaded_from_cache(log: ServerLog) -> str | None:
    """Where this run loaded compiled artefacts another run wrote (None: it compiled its own)."""
    aot = log.observed.get("aot_compile_loaded")
    graphs = log.observed.get("compile_graphs_loaded_range")
    if not (aot and aot.value) and graphs is None:
        return None
    folder = log.observed.get("compile_cache_path")
    where = f"{folder.value} (line {folder.line})" if folder else "its cache folder"
    return f"{where}, written by an earlier run"


def _compile_cache_loaded(log: ServerLog) -> list[Trap]:
    loaded = _loaded_from_cache(log)
    if loaded is None:
        return []
    obs = log.observed.get("aot_compile_loaded") or log.observed.get("compile_graphs_loaded_range")
    return [Trap("compile-cache-loaded", "info",
                 f"this run loaded its compiled model from {loaded}, not compiling its own: "
                 "runs whose settings differ only where the release's key leaves them out "
                 "share it. If outputs or speculative acceptance look wrong, rerun with a fresh "
                 "VLLM_CACHE_ROOT; `recon logs DIR` on the runs' logs names the run that wrote it "
                 "and what differed.", [obs.line] if obs else [])]


def _mamba_cap(log: ServerLog) -> list[Trap]:
    obs = log.observed.get("mamba_capped_running_requests")
    if obs is None:
        return []
    asked = arg(log, "max_running_requests")
    return [Trap("mamba-cache-caps-requests", "warn",
                 f"max_running_requests is capped to {obs.value} by the mamba state cache"
                 + (f" (asked for {asked})" if asked else "")
                 + ": the state pool, not the KV pool, bounds concurrency.", [obs.line])]


def _restarts(log: ServerLog) -> list[Trap]:
    if log.starts <= 1:
        return []
    return [Trap("several-starts", "warn",
                 f"this log holds {log.starts} engine start-ups; the tables show the last one. "
                 "Check which process served the requests you measured (a stale server reused by "
                 "a start script silently invalidated two experiments, field notes).", [])]


def _ranks_disagree(log: ServerLog) -> list[Trap]:
    odd = [o for o in log.observed.values()
           if o.disagrees_across_lines and o.name not in ("version", "model") and o.unit != "s"]
    if not odd or log.starts > 1:
        return []
    return [Trap("values-differ", "info",
                 "; ".join(f"{o.label}: " + ", ".join(f"{s['value']} (line {s['line']})"
                                                      for s in o.seen) for o in odd[:4]),
                 [s["line"] for o in odd[:4] for s in o.seen])]


CHECKS: list[Callable[[ServerLog], list[Trap]]] = [
    _align_implicit, _capture_rounded, _long_context, _util_hint, _prefix_caching_ignored,
    _spec_collapse, _mamba_cap, _restarts, _ranks_disagree, _compile_cache_loaded,
]


def find_traps(log: ServerLog) -> list[Trap]:
    """Run every check; the result is also stored on ``log.traps``."""
    traps = [t for check in CHECKS for t in check(log)]
    order = {"error": 0, "warn": 1, "info": 2}
    traps.sort(key=lambda t: order.get(t.level, 3))
    log.traps = traps
    return traps
