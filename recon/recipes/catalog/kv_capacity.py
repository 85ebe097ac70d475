"""kv-capacity: KV bytes per token per layer type, tokens per GiB and maximum concurrency, by the release's own code.

Field story: the engine's three green start-up lines (``Available
KV cache memory``, ``GPU KV cache size: N tokens``, ``Maximum concurrency for
L tokens per request: Cx``) are cheap to predict offline, and knowing them
before a restart tells you what ``--max-model-len`` costs (they are not proof
of safety: prefill activation peaks are not in them).

What runs, in one sandboxed child with real torch (for dtype sizes):

1. the model's KV geometry: the release's architecture convertor
   (``get_head_size``, ``get_total_num_kv_heads``) and
   ``ModelConfig.get_num_kv_heads`` for the per-GPU KV heads under
   ``--tensor-parallel-size`` (old releases: the ``ModelConfig`` methods alone);
2. one KV cache spec per layer, built from the release's spec classes
   (``FullAttentionSpec``, ``SlidingWindowSpec``, ``MambaSpec``), whose
   ``page_size_bytes`` and ``max_memory_usage_bytes`` are the release's;
3. the engine's own start-up chain for a given available memory:
   ``get_global_kv_cache_groups`` -> ``get_kv_cache_configs`` ->
   ``generate_scheduler_kv_cache_config`` -> ``update_kv_cache_capacity``
   (which logs ``GPU KV cache size`` / ``Maximum concurrency``); older
   releases: ``get_kv_cache_configs`` or ``get_kv_cache_config``, whichever
   the release has, and the function that logs the concurrency line.

For hybrid attention/mamba models the block size after page alignment, the
padded mamba page and the mamba state shapes come from the
vllm-hybrid-page-align recipe (same snapshot, config and flags). Which layers
are attention and which are mamba comes from ``layer_types`` in config.json,
else from the model family's pattern keys (stated in a note), else
``--set attention_layers=N mamba_layers=M``.

Options: ``--set available_kv_gib=N`` (the ``Available KV cache memory`` of your log;
without it, engine mode makes the worker's memory plan before the engine runs and slicing
mode refuses), ``--set prompt_tokens=N`` (with the plan: one prompt of N tokens in the
chunks the release's scheduler cuts, against the memory free while serving),
``--set attention_layers=``, ``--set mamba_layers=``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from ...engine.config import EngineFailed
from ...errors import ReconError
from ...slicing import Call, Py, run_calls
from ..base import Finding, NotApplicable, Recipe, RecipeContext, RecipeResult, Table, value_of
from ..engine import engine_facts
from ..engine import result as engine_result
from ..hybrid_common import (
    class_constant,
    class_flags,
    model_dtype,
    module_dict,
    registry_model_class,
)
from ..options import opt_float, opt_int
from ..registry import register
from ..vllm_common import (
    BASE_STUBS,
    defaulted,
    helper_file,
    logged,
    params_of,
    ran_provenance,
    speculative_tokens,
    stub_notes,
)

NAME = "kv-capacity"
GIB = 1 << 30
CONVERTORS = "vllm.transformers_utils.model_arch_config_convertor"
SPECS = "vllm.v1.kv_cache_interface"


# -- which layer is what ----------------------------------------------------------------------
@dataclass
class LayerPlan:
    kinds: list[str]  # per layer: "full" | "sliding" | "mamba" | "none"
    source: str
    sliding_window: int | None = None


def _key(cfg: dict[str, Any], name: str) -> Any:
    for scope in (cfg, cfg.get("text_config") or {}):
        if name in scope and scope[name] is not None:
            return scope[name]
    return None


def _layer_plan(ctx: RecipeContext, cfg: dict[str, Any], hybrid: bool) -> LayerPlan:
    """Per-layer KV kind from config.json keys (overridable with --set)."""
    n = _key(cfg, "num_hidden_layers")
    attn_o = opt_int(ctx.options, "attention_layers")
    mamba_o = opt_int(ctx.options, "mamba_layers")
    if attn_o is not None or mamba_o is not None:
        kinds = ["full"] * (attn_o or 0) + ["mamba"] * (mamba_o or 0)
        return LayerPlan(kinds, "--set attention_layers / mamba_layers")
    window = _key(cfg, "sliding_window")
    types = _key(cfg, "layer_types")
    if isinstance(types, list) and types:
        table = {"full_attention": "full", "attention": "full", "sliding_attention": "sliding",
                 "linear_attention": "mamba", "mamba": "mamba", "mamba2": "mamba"}
        unknown = sorted({t for t in types if t not in table})
        if unknown:
            raise ReconError(f"config.json layer_types has kinds recon does not map: {unknown}; "
                             "use --set attention_layers=N mamba_layers=M")
        return LayerPlan([table[t] for t in types], "config.json layer_types", window)
    if not isinstance(n, int) or n < 1:
        raise ReconError("config.json has no num_hidden_layers")
    if not hybrid:
        return LayerPlan(["full"] * n, "num_hidden_layers (every layer full attention)")
    interval = _key(cfg, "full_attention_interval")
    if isinstance(interval, int) and interval > 0:
        return LayerPlan(["full" if (i + 1) % interval == 0 else "mamba" for i in range(n)],
                         f"full_attention_interval={interval} (layer i is full attention when "
                         "(i+1) % interval == 0: the layer_types transformers derives for "
                         "Qwen3-Next-style configs)")
    pattern = _key(cfg, "hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        kinds = [{"M": "mamba", "*": "full"}.get(c, "none") for c in pattern]
        return LayerPlan(kinds, "hybrid_override_pattern ('M' mamba, '*' attention, other "
                                "characters no KV: the Nemotron-H convention)")
    period, offset = _key(cfg, "attn_layer_period"), _key(cfg, "attn_layer_offset")
    if isinstance(period, int) and isinstance(offset, int) and period > 0:
        return LayerPlan(["full" if i % period == offset else "mamba" for i in range(n)],
                         f"attn_layer_period={period}, attn_layer_offset={offset} (the Jamba "
                         "convention)")
    raise ReconError("cannot tell the hybrid model's attention layers from config.json (no "
                     "layer_types, full_attention_interval, hybrid_override_pattern or "
                     "attn_layer_period): pass --set attention_layers=N mamba_layers=M")


# -- inputs ------------------------------------------------------------------------------------
@dataclass
class Inputs:
    arch: str
    model_cls: str | None
    tp: int
    max_model_len: int
    available_bytes: int
    available_gib: float
    dtype: str
    kv_cache_dtype: str
    block_size: int
    k: int
    hybrid: bool
    cache_cls: str
    layout: str
    prefix_caching: bool
    aligned: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)


def _aligned(ctx: RecipeContext) -> dict[str, Any]:
    """The page-align recipe's answer (block size, mamba page, shapes) for hybrid models."""
    from .. import get, run_recipe

    try:
        get("vllm-hybrid-page-align")
    except ReconError:
        return {}
    res = run_recipe("vllm-hybrid-page-align", ctx.snapshot, config=ctx.config, flags=ctx.flags,
                     options={**{k: v for k, v in ctx.options.items()
                                 if k not in ("available_kv_gib", "attention_layers",
                                              "mamba_layers")}, "mode": "slice"})
    if not res.applicable:
        return {"_reason": res.reason}
    return res.values


def _inputs(ctx: RecipeContext) -> Inputs:
    cfg = ctx.require_config()
    archs = _key(cfg, "architectures") or []
    if not archs:
        raise ReconError("config.json has no architectures")
    arch = str(archs[0])
    notes: list[str] = []
    sources: dict[str, str] = {}
    tp = ctx.flags.get("tensor_parallel_size") or 1
    max_len = ctx.flags.get("max_model_len")
    if max_len is None:
        max_len = _key(cfg, "max_position_embeddings")
        if not isinstance(max_len, int):
            raise ReconError("give --max-model-len (config.json has no max_position_embeddings)")
        sources["max_model_len"] = "config.json max_position_embeddings (no --max-model-len)"
    gib = opt_float(ctx.options, "available_kv_gib")
    if gib is None:
        raise ReconError("slicing mode needs --set available_kv_gib=N (the log line 'Available "
                         "KV cache memory: N GiB'); engine mode (the default) plans it itself")
    if gib <= 0:
        raise ReconError("--set available_kv_gib must be positive")
    dtype, dnote = model_dtype(ctx.flags.get("dtype"), cfg)
    if dnote:
        notes.append(dnote)
    k, _method = speculative_tokens(ctx)
    aligned = _aligned(ctx)
    hybrid = bool(aligned.get("hybrid attention/mamba model"))
    block = ctx.flags.get("block_size")
    if hybrid and aligned.get("attention block size (tokens)"):
        block = aligned["attention block size (tokens)"]
        sources["block_size"] = "the attention block size after page alignment (vllm-hybrid-page-align)"
    elif block is None:
        cache_q = next((q for q in ctx.index.classes if q.endswith(":CacheConfig")), None)
        default = class_constant(ctx, cache_q, "DEFAULT_BLOCK_SIZE") if cache_q else None
        block = default if isinstance(default, int) else 16
        sources["block_size"] = ("CacheConfig.DEFAULT_BLOCK_SIZE" if isinstance(default, int)
                                 else "16 (the CUDA default; the release keeps no constant)")
    else:
        sources["block_size"] = "--block-size"
    cache_cls = next((q for q in ctx.index.classes if q.endswith(":CacheConfig")), None)
    if cache_cls is None:
        raise NotApplicable("no CacheConfig class in this release")
    layout = str(ctx.options.get("kv_cache_layout", "NHD"))
    if "kv_cache_layout" not in ctx.options and \
            f"{cache_cls}.get_resolved_kv_cache_layout" in ctx.index.functions:
        notes.append("KV cache layout assumed NHD (the engine resolves it from the attention "
                     "backend; --set kv_cache_layout=HND for FlashInfer-style layouts)")
    return Inputs(arch=arch, model_cls=registry_model_class(ctx, arch), tp=int(tp),
                  cache_cls=cache_cls, layout=layout,
                  prefix_caching=bool(ctx.flags.get("enable_prefix_caching")),
                  max_model_len=int(max_len), available_bytes=int(gib * GIB), available_gib=gib,
                  dtype=dtype, kv_cache_dtype=str(ctx.flags.get("kv_cache_dtype") or "auto"),
                  block_size=int(block), k=k, hybrid=hybrid, aligned=aligned, notes=notes,
                  sources=sources)


# -- the child ---------------------------------------------------------------------------------
def _find(ctx: RecipeContext, suffix: str) -> str | None:
    """The qualname ending in ``suffix`` (modules move between releases)."""
    hits = sorted(q for q in ctx.index.functions if q.endswith(suffix))
    return hits[0] if hits else None


def _convertor(ctx: RecipeContext, cfg: dict[str, Any]) -> str | None:
    if CONVERTORS not in ctx.index.modules:
        return None
    table = module_dict(ctx, CONVERTORS, "MODEL_ARCH_CONFIG_CONVERTORS") or {}
    node = table.get(str(_key(cfg, "model_type")))
    name = node.id if isinstance(node, ast.Name) else "ModelArchConfigConvertorBase"
    qual = f"{CONVERTORS}:{name}"
    return qual if qual in ctx.index.classes else None


def _dtype_table(ctx: RecipeContext) -> str | None:
    """``module:STR_DTYPE_TO_TORCH_DTYPE``: the release's cache-dtype names."""
    for mod in ("vllm.utils.torch_utils", "vllm.utils"):
        info = ctx.index.modules.get(mod)
        if info is not None and "STR_DTYPE_TO_TORCH_DTYPE" in ctx.snapshot.read_text(info.path):
            return f"{mod}:STR_DTYPE_TO_TORCH_DTYPE"
    return None


def _call_args(ctx: RecipeContext, qual: str, table: dict[str, Any]) -> dict[str, Any]:
    """Arguments for ``qual`` by its parameter names (releases rename and add parameters)."""
    out: dict[str, Any] = {}
    for name in params_of(ctx, qual):
        if name in table:
            out[name] = table[name]
    return out


def _model_config_cls(ctx: RecipeContext) -> str:
    q = _find(ctx, ":ModelConfig.get_num_kv_heads")
    if q is None:
        raise NotApplicable("no ModelConfig.get_num_kv_heads in this release")
    return q.rpartition(".")[0]


@dataclass
class Chain:
    calls: list[Call]
    idx: dict[str, int]
    extra_code: str
    slice_only: set[int]


def _build(ctx: RecipeContext, inp: Inputs, plan: LayerPlan) -> Chain:
    """The child's calls: KV geometry, one spec per layer kind, the engine's start-up chain."""
    chain = Chain(calls=[], idx={}, extra_code="", slice_only=set())
    _geometry_calls(ctx, inp, chain)
    spec_exprs = _spec_exprs(ctx, inp, plan)
    specs = _spec_calls(ctx, inp, plan, spec_exprs, chain)
    record = _startup_calls(ctx, inp, specs, chain)
    for q in _slice_only_targets(ctx, inp, spec_exprs):
        chain.slice_only.add(len(chain.calls))
        chain.calls.append(Call(q))
    chain.extra_code = "\n".join(f"record({q!r}, {key!r})" for q, key in record)
    return chain


def _geometry_calls(ctx: RecipeContext, inp: Inputs, chain: Chain) -> None:
    """1. the KV geometry of one attention layer: head size and KV heads per GPU."""
    cfg = ctx.require_config()
    calls, idx = chain.calls, chain.idx
    mc = _model_config_cls(ctx)
    conv = _convertor(ctx, cfg)
    pc = f"ns(tensor_parallel_size={inp.tp}, pipeline_parallel_size=1, decode_context_parallel_size=1)"
    if conv is not None:
        obj = (f"keep('conv', instance({conv!r}, hf_config=config, "
               "hf_text_config=config.get_text_config(), revision=None))")
        idx["head"] = len(calls)
        calls.append(Call(f"{conv}.get_head_size", self_attrs={"_recon": Py(
            f"bind({conv + '.get_head_size'!r}, {obj}, 'head')")}))
        idx["total_kvh"] = len(calls)
        calls.append(Call(f"{conv}.get_total_num_kv_heads", self_attrs={"_recon": Py(
            f"bind({conv + '.get_total_num_kv_heads'!r}, R['conv'], 'total_kvh')")}))
        mc_obj = (f"instance({mc!r}, use_mla=False, hf_config=config, "
                  "hf_text_config=config.get_text_config(), model_arch_config=ns("
                  "total_num_kv_heads=R['total_kvh'], head_size=R['head'], is_deepseek_mla=False))")
    else:
        info = {k: v for k, v in (class_flags(ctx, inp.model_cls) if inp.model_cls else {}).items()
                if k.isidentifier()}
        info.setdefault("is_attention_free", False)
        info.setdefault("is_hybrid", inp.hybrid)
        mc_obj = (f"keep('mc', instance({mc!r}, use_mla=False, hf_config=config, "
                  "hf_text_config=config, is_deepseek_mla=False, "
                  f"_model_info=Lenient('model_info', **{info!r})))")
        idx["head"] = len(calls)
        calls.append(Call(f"{mc}.get_head_size", self_attrs={"_recon": Py(
            f"bind({mc + '.get_head_size'!r}, {mc_obj}, 'head')")}))
        mc_obj = "R['mc']"
    idx["kvh"] = len(calls)
    calls.append(Call(f"{mc}.get_num_kv_heads", args={"parallel_config": Py(pc)},
                      self_attrs={"_recon": Py(f"bind({mc + '.get_num_kv_heads'!r}, {mc_obj}, 'kvh')")}))


def _spec_exprs(ctx: RecipeContext, inp: Inputs, plan: LayerPlan) -> dict[str, str]:
    """2. specs: one object per layer kind, shared by its layers (the engine builds equal specs)."""
    if inp.kv_cache_dtype == "auto":
        dtype_expr = f"getattr(torch, {inp.dtype!r})"
    else:
        dtypes = _dtype_table(ctx)
        if dtypes is None:
            raise NotApplicable("no STR_DTYPE_TO_TORCH_DTYPE table in this release")
        dtype_expr = f"attr({dtypes!r})[{inp.kv_cache_dtype!r}]"
    full_cls = f"{SPECS}:FullAttentionSpec"
    spec_exprs: dict[str, str] = {
        "full": (f"make({full_cls!r}, {{'use_mla': False}}, block_size={inp.block_size}, "
                 f"num_kv_heads=R['kvh'], head_size=R['head'], dtype={dtype_expr})"),
    }
    if "sliding" in plan.kinds:
        if not plan.sliding_window:
            raise ReconError("sliding-window layers but no sliding_window in config.json")
        spec_exprs["sliding"] = (f"make({SPECS + ':SlidingWindowSpec'!r}, {{'use_mla': False}}, "
                                 f"block_size={inp.block_size}, "
                                 f"num_kv_heads=R['kvh'], head_size=R['head'], dtype={dtype_expr}, "
                                 f"sliding_window={plan.sliding_window})")
    if "mamba" in plan.kinds:
        spec_exprs["mamba"] = _mamba_spec_expr(inp)
    return spec_exprs


def _mamba_spec_expr(inp: Inputs) -> str:
    """The MambaSpec of the page-align recipe's shapes, dtypes, mode and padded page."""
    a = inp.aligned
    shapes = a.get("mamba state shapes (per GPU)")
    dtypes = a.get("mamba state dtypes")
    if not shapes or not dtypes:
        raise NotApplicable("mamba layers but vllm-hybrid-page-align gave no mamba state shapes"
                            + (f": {a['_reason']}" if a.get("_reason") else ""))
    dt = "(" + ", ".join(f"getattr(torch, {str(d).replace('torch.', '')!r})" for d in dtypes) + ",)"
    sh = "(" + ", ".join(f"tuple({list(s)!r})" for s in shapes) + ",)"
    mode = a.get("mamba cache mode") or "none"
    mamba_block = a.get("mamba block size") or inp.max_model_len
    return (f"make({SPECS + ':MambaSpec'!r}, None, shapes={sh}, dtypes={dt}, "
            f"block_size={mamba_block}, page_size_padded="
            f"{a.get('mamba page padded to (bytes)')!r}, "
            f"mamba_cache_mode={mode!r}, num_speculative_blocks={inp.k})")


def _spec_calls(ctx: RecipeContext, inp: Inputs, plan: LayerPlan, spec_exprs: dict[str, str],
                chain: Chain) -> str:
    """Each spec's ``max_memory_usage_bytes``; returns the layer -> spec mapping's expression."""
    vc = _vllm_config_expr(inp, plan)
    for kind, expr in spec_exprs.items():
        q = _find(ctx, {"full": ":FullAttentionSpec.max_memory_usage_bytes",
                        "sliding": ":SlidingWindowSpec.max_memory_usage_bytes",
                        "mamba": ":MambaSpec.max_memory_usage_bytes"}[kind])
        if q is None:
            q = _find(ctx, ":AttentionSpec.max_memory_usage_bytes") if kind != "mamba" else None
        if q is None:
            raise NotApplicable(f"no max_memory_usage_bytes for {kind} layers in this release")
        chain.idx[f"spec_{kind}"] = len(chain.calls)
        chain.calls.append(Call(q, args={"vllm_config": Py("R['vc']")}, self_attrs={
            "_recon_vc": Py(f"keep('vc', {vc})"),
            "_recon": Py(f"bind({q!r}, keep('spec_{kind}', {expr}))"),
            "_recon_page": Py(f"ns(page_size_bytes=R['spec_{kind}'].page_size_bytes, "
                              f"block_size=R['spec_{kind}'].block_size)")}))
    names = [_layer_name(i, kind) for i, kind in enumerate(plan.kinds) if kind != "none"]
    return ("{" + ", ".join(f"{name!r}: R['spec_{kind}']" for name, kind in
                            zip(names, [k for k in plan.kinds if k != "none"], strict=True)) + "}")


def _startup_calls(ctx: RecipeContext, inp: Inputs, specs: str,
                   chain: Chain) -> list[tuple[str, str]]:
    """3. the engine's start-up chain, as far as this release has it; returns what to record."""
    calls, idx = chain.calls, chain.idx
    record: list[tuple[str, str]] = []
    groups_q = _find(ctx, ":get_global_kv_cache_groups")
    configs_q = _find(ctx, ":get_kv_cache_configs")
    config_q = _find(ctx, ":get_kv_cache_config")
    sched_q = _find(ctx, ":generate_scheduler_kv_cache_config")
    cap_q = _find(ctx, ":update_kv_cache_capacity") or _find(ctx, ":get_kv_cache_capacity")
    conc_q = _find(ctx, ":get_max_concurrency_for_kv_cache_config")
    table: dict[str, Any] = {
        "vllm_config": Py("R['vc']"),
        "kv_cache_specs": Py(f"[keep('specs', {specs})]"),
        "kv_cache_spec": Py(f"keep('specs', {specs})"),
        "available_memory": [inp.available_bytes] if configs_q else inp.available_bytes,
        "global_kv_cache_groups": Py("R['groups']"),
        "kv_cache_configs": Py("R['configs']"),
        "kv_cache_config": Py("R['sched']"),
    }
    if groups_q and configs_q:
        record.append((groups_q, "groups"))
        idx["groups"] = len(calls)
        calls.append(Call(groups_q, args=_call_args(ctx, groups_q, table)))
    if configs_q:
        table["available_memory"] = [inp.available_bytes]
        record.append((configs_q, "configs"))
        idx["configs"] = len(calls)
        calls.append(Call(configs_q, args=_call_args(ctx, configs_q, table)))
        if sched_q:
            record.append((sched_q, "sched"))
            idx["sched"] = len(calls)
            calls.append(Call(sched_q, args=_call_args(ctx, sched_q, table)))
        else:
            table["kv_cache_config"] = Py("R['configs'][0]")
    elif config_q:
        table["available_memory"] = inp.available_bytes
        record.append((config_q, "sched"))
        idx["sched"] = len(calls)
        calls.append(Call(config_q, args=_call_args(ctx, config_q, table)))
    else:
        raise NotApplicable("no get_kv_cache_configs / get_kv_cache_config in this release")
    if cap_q and (configs_q or cap_q.endswith("get_kv_cache_capacity")):
        idx["capacity"] = len(calls)
        calls.append(Call(cap_q, args=_call_args(ctx, cap_q, table)))
    if conc_q:
        idx["concurrency"] = len(calls)
        calls.append(Call(conc_q, args=_call_args(ctx, conc_q, table)))
    return record


def _slice_only_targets(ctx: RecipeContext, inp: Inputs, spec_exprs: dict[str, str]) -> list[str]:
    """Targets only so that the slice holds classes the chain names or builds at run time."""
    # the builder the platform names by qualname, and CacheConfig (built here, read by the chain)
    wanted = sorted(q for q in ctx.index.functions
                    if any(f":{cls}." in q for cls in ("DefaultKVCacheConfigBuilder",
                                                       "KVCacheConfigBuilder")))
    wanted += [q for q in (f"{inp.cache_cls}.get_resolved_kv_cache_layout",)
               if q in ctx.index.functions] or \
        [q for q in sorted(ctx.index.functions) if q.startswith(inp.cache_cls + ".")][:1]
    # a spec class is kept whole (decorators: it stays a dataclass) only when kept code calls
    # it: add the smallest function of the release that does, for each spec class used
    for kind in spec_exprs:
        cls = {"full": "FullAttentionSpec", "sliding": "SlidingWindowSpec", "mamba": "MambaSpec"}[kind]
        wanted += _smallest_user(ctx, rf"\b{cls}\(\s*$|\b{cls}\(\w")
    if inp.kv_cache_dtype != "auto":  # the release's cache-dtype table, read by name in the child
        wanted += _smallest_user(ctx, r"STR_DTYPE_TO_TORCH_DTYPE\[")
    return wanted


def _smallest_user(ctx: RecipeContext, pattern: str) -> list[str]:
    """The shortest function matching ``pattern`` (a slice target keeps what it uses whole)."""
    hits = [q for q in ctx.functions_with_text(pattern) if q in ctx.index.functions]
    hits.sort(key=lambda q: ctx.index.functions[q].end_lineno - ctx.index.functions[q].lineno)
    return hits[:1]


def _layer_name(i: int, kind: str) -> str:
    return f"model.layers.{i}.{'linear_attn' if kind == 'mamba' else 'self_attn.attn'}"


def _vllm_config_expr(inp: Inputs, plan: LayerPlan) -> str:
    a = inp.aligned
    mode = a.get("mamba cache mode") or "none"
    spec = "None" if inp.k == 0 else (
        f"Lenient('speculative_config', num_speculative_tokens={inp.k}, "
        "use_eagle_block_drop=lambda: False, use_eagle=lambda: False)")
    return (
        "Lenient('vllm_config', "
        f"model_config=Lenient('model_config', max_model_len={inp.max_model_len}, "
        f"original_max_model_len={inp.max_model_len}, supports_kv_cache_grouping=False, "
        "use_mla=False), "
        f"cache_config=instance({inp.cache_cls!r}, 'cache_config', block_size={inp.block_size}, "
        f"num_gpu_blocks_override=None, mamba_cache_mode={mode!r}, "
        f"mamba_block_size={a.get('mamba block size')!r}, cache_dtype={inp.kv_cache_dtype!r}, "
        f"kv_sharing_fast_prefill=False, enable_prefix_caching={inp.prefix_caching!r}, "
        f"kv_cache_layout={inp.layout!r}, num_cpu_blocks=None), "
        f"parallel_config=Lenient('parallel_config', tensor_parallel_size={inp.tp}, "
        "pipeline_parallel_size=1, decode_context_parallel_size=1, "
        "prefill_context_parallel_size=1, data_parallel_size=1), "
        "scheduler_config=Lenient('scheduler_config', disable_hybrid_kv_cache_manager=False), "
        f"speculative_config={spec}, num_speculative_tokens={inp.k}, "
        "num_prefill_lookahead_tokens=0, kv_transfer_config=None, kv_events_config=None, "
        "attention_config=Lenient('attention_config', hisparse_config=None), "
        "device_config=ns(device_type='cuda'))")


def _stubs() -> dict[str, str]:
    return {**BASE_STUBS, "in_wsl": "lambda: False",
            "current_platform": ("Answers('current_platform', get_kv_cache_config_builder_cls="
                                 "lambda *a, **k: 'vllm.v1.core.kv_cache_planning."
                                 "DefaultKVCacheConfigBuilder', is_cuda=lambda: True, "
                                 "is_cuda_alike=lambda: True, is_rocm=lambda: False, "
                                 "is_tpu=lambda: False, is_cpu=lambda: False, "
                                 "is_xpu=lambda: False, device_type='cuda')")}


# -- the recipe --------------------------------------------------------------------------------
def run_engine(ctx: RecipeContext) -> RecipeResult:
    """Engine mode: the release's KV cache specs, ``get_kv_cache_configs`` and capacity."""
    planned = ctx.options.get("available_kv_gib") is None
    if planned and getattr(ctx.given, "from_log", False) \
            and not getattr(ctx.given, "memory_planned", False):
        # recon logs compares with what the engine measured: the log's figure, or nothing
        raise ReconError("kv-capacity needs the KV memory the engine had: --set "
                         "available_kv_gib=N (its 'Available KV cache memory' line)")
    if not planned and ctx.options.get("prompt_tokens") is not None:
        raise ReconError("--set prompt_tokens runs on the memory plan: leave out "
                         "available_kv_gib (the plan makes that figure before the engine runs)")
    facts, said = engine_facts(ctx, memory_plan=planned)
    res = engine_result(NAME, ctx, facts, said, KV_KEYS + (MEMORY_KEYS if planned else ())
                        + (PROMPT_KEYS if ctx.options.get("prompt_tokens") else ()))
    if planned and facts.facts.get("starts") is False:
        res.findings.append(Finding("error", "the engine will not start: "
                                    f"{facts.facts.get('startup_error')} "
                                    f"({facts.facts.get('startup_error_where')})"))
        return res
    if planned and facts.facts.get("memory_not_predicted"):
        res.undecided = ("no memory plan (give --set available_kv_gib=N, the engine's "
                         "'Available KV cache memory'): " + str(facts.facts["memory_not_predicted"]))
        return res
    if facts.facts.get("prefill_not_predicted"):
        res.undecided = "no prompt peak: " + str(facts.facts["prefill_not_predicted"])
    if facts.facts.get("prompt_fits") is False:
        f = facts.facts
        why = f.get("prompt_rejected") or (
            f"its costliest chunk needs {f.get('prefill_peak_gib')} GiB of activations with "
            f"{f.get('prefill_free_gib')} GiB free while serving")
        res.findings.append(Finding("error", f"a {f.get('prompt_tokens')}-token prompt will not "
                                    f"run: {why}"))
    if planned and facts.facts.get("memory_model_runner") == "V1":
        res.values["unpredicted"] = dict.fromkeys(GRAPH_LINE, GRAPH_WHY)
    if planned:
        res.notes.append("available KV memory: the memory plan's, made before the engine runs "
                         "(its parts and assumptions above); --set available_kv_gib=N takes "
                         "a log's figure instead")
    if facts.facts.get("kv_cache_tokens") is None:
        raise EngineFailed(f"{ctx.release} gave no KV capacity for this command: "
                         + "; ".join(str(w.get("error")) for w in facts.warnings)[:600])
    return res


#: the utilisations the V1 worker suggests from its CUDA graph estimate (a log's quantities)
GRAPH_LINE = ("cudagraph_memory_estimated_gib", "gpu_util_equivalent", "gpu_util_suggested")
GRAPH_WHY = ("the release measures its CUDA graph estimate by capturing graphs on the GPU "
             "(and suggests utilisations from it); the memory plan assumed that estimate")

#: what this recipe shows of the release's answer (identifiers of ``--json``)
KV_KEYS = ("kv_cache_tokens", "kv_cache_tokens_range", "max_concurrency",
           "max_concurrency_range", "kv_num_blocks", "kv_layers", "kv_spec_kinds",
           "attention_block_size", "max_model_len", "kv_cache_dtype", "enable_prefix_caching",
           "tensor_parallel_size", "num_speculative_tokens", "draft_layers",
           "gpu_memory_utilization")
#: the memory plan's figures, shown when the recipe made one (no available_kv_gib given)
MEMORY_KEYS = ("starts", "weights_gib", "activation_peak_gib", "non_torch_gib",
               "cudagraph_memory_gib", "requested_memory_gib", "available_kv_gib")

#: one prompt against the memory free while serving (``--set prompt_tokens=N``)
PROMPT_KEYS = ("prompt_tokens", "prompt_fits", "prompt_chunks", "prefill_peak_gib",
               "prefill_free_gib", "prefill_headroom_gib", "max_prompt_tokens_that_fit",
               "prompt_rejected")


def run(ctx: RecipeContext) -> RecipeResult:
    """Engine mode by default; ``--set mode=slice`` for recon's own reading of the flags."""
    if str(ctx.options.get("mode", "engine")) == "slice":
        return run_sliced(ctx)
    return run_engine(ctx)


def run_sliced(ctx: RecipeContext) -> RecipeResult:
    inp = _inputs(ctx)
    cfg = ctx.require_config()
    plan = _layer_plan(ctx, cfg, inp.hybrid)
    chain = _build(ctx, inp, plan)
    with helper_file(chain.extra_code) as helpers:
        results = run_calls(ctx.snapshot, chain.calls, config=cfg, stubs=_stubs(),
                            stub_file=helpers, real=["torch"], timeout=120)
    for i, r in enumerate(results):
        if r.error is not None and i not in chain.slice_only:
            raise ReconError(f"{r.target} raised {r.error.line()}")
    real = [r for i, r in enumerate(results) if i not in chain.slice_only]
    res = RecipeResult(NAME, ctx.snapshot.name, ctx.release)
    res.inputs = {"architecture": inp.arch, "tensor_parallel_size": inp.tp,
                  "max_model_len": inp.max_model_len, "available_kv_gib": inp.available_gib,
                  "dtype": inp.dtype, "kv_cache_dtype": inp.kv_cache_dtype,
                  "block_size": inp.block_size, "num_speculative_tokens": inp.k}
    _present(ctx, inp, plan, chain, results, res)
    res.notes += [f"{k} from {v}" for k, v in inp.sources.items()]
    res.notes.append(f"layer kinds from {plan.source}")
    res.notes += inp.notes
    unset = defaulted(results)
    if unset:
        res.notes.append("engine fields recon does not model, read as unset: " + ", ".join(unset))
    res.notes += stub_notes(real)
    res.notes.append("draft-model (MTP/EAGLE) layers are not counted; their KV shares the pool")
    res.provenance = ran_provenance(ctx, real)
    return res


def _present(ctx: RecipeContext, inp: Inputs, plan: LayerPlan, chain: Chain,
             results: list[Any], res: RecipeResult) -> None:
    """Geometry, per-layer KV bytes, the release's blocks and groups, then its capacity."""
    v = res.values
    idx = chain.idx
    head = results[idx["head"]].value
    kvh = results[idx["kvh"]].value
    v["KV heads per GPU"] = kvh
    v["head size"] = head
    table, per_token_total = _layer_table(inp, plan, idx, results)
    res.tables.append(table)
    if per_token_total:
        v["attention KV bytes per token (all attention layers, per GPU)"] = int(per_token_total) \
            if per_token_total == int(per_token_total) else per_token_total
    _blocks_and_groups(idx, results, res)
    _capacity(inp, idx, results, res)
    res.findings.append(Finding("warn", "KV capacity is not proof of safety: prefill activation "
                                        "peaks are outside these numbers (raising "
                                        "--max-model-len alone once crashed a 93K-token prefill)"))


def _layer_table(inp: Inputs, plan: LayerPlan, idx: dict[str, int],
                 results: list[Any]) -> tuple[Table, float]:
    """Per layer kind: the release's page and per-request bytes; and attention bytes per token."""
    counts = {kind: plan.kinds.count(kind) for kind in ("full", "sliding", "mamba")}
    rows = []
    per_token_total = 0.0
    for kind in ("full", "sliding", "mamba"):
        if f"spec_{kind}" not in idx or not counts[kind]:
            continue
        r = results[idx[f"spec_{kind}"]]
        page = r.self_before.get("_recon_page", {})
        page_bytes, block = page.get("page_size_bytes"), page.get("block_size")
        per_req = r.value
        label = {"full": "full attention", "sliding": "sliding window", "mamba": "mamba state"}[kind]
        if kind == "mamba":
            rows.append([label, counts[kind], block, page_bytes, "- (fixed per request)", per_req])
        else:
            per_token = page_bytes / block
            per_token_total += per_token * counts[kind]
            rows.append([label, counts[kind], block, page_bytes, f"{per_token:g}", per_req])
    cols = ["layer type", "layers", "block size (tokens)", "page bytes per block",
            "bytes per token", f"bytes per request at {inp.max_model_len} tokens"]
    return Table("KV cache per layer (per GPU)", cols, rows), per_token_total


def _blocks_and_groups(idx: dict[str, int], results: list[Any], res: RecipeResult) -> None:
    """The scheduler's KV cache config: number of blocks and the release's grouping."""
    sched = results[idx["sched"]].value if "sched" in idx else None
    if isinstance(sched, list):
        sched = sched[0]
    if isinstance(sched, dict):
        res.values["KV cache blocks (num_blocks)"] = sched.get("num_blocks")
        groups = sched.get("kv_cache_groups") or []
        res.values["KV cache groups"] = len(groups)
        if groups:
            res.tables.append(Table("KV cache groups (the release's grouping)",
                                    ["group", "layers", "spec", "block size"],
                                    [[i, len(g.get("layer_names") or []),
                                      _spec_name(g.get("kv_cache_spec")),
                                      (g.get("kv_cache_spec") or {}).get("block_size")]
                                     for i, g in enumerate(groups)]))


def _capacity(inp: Inputs, idx: dict[str, int], results: list[Any], res: RecipeResult) -> None:
    """Tokens and concurrency, from the release's answer or its log lines, with a verdict."""
    v = res.values
    tokens = conc = None
    if "capacity" in idx and results[idx["capacity"]].ok:
        val = results[idx["capacity"]].value
        if isinstance(val, list) and len(val) == 2:
            tokens, conc = val
    if conc is None and "concurrency" in idx:
        conc = results[idx["concurrency"]].value
    lines = [m for m in logged(results) if "KV cache size" in m or "Maximum concurrency" in m]
    for m in lines:
        res.findings.append(Finding("info", f"the release logs: {m}"))
    if tokens is None:
        tokens = _tokens_from_log(lines)
    if tokens is not None:
        v["GPU KV cache size (tokens)"] = tokens
        v["tokens per GiB of KV memory"] = round(tokens / inp.available_gib, 1)
    if conc is not None:
        v[f"maximum concurrency at {inp.max_model_len} tokens per request"] = round(float(conc), 2)
        if conc < 1:
            res.findings.append(Finding("error", f"the KV cache cannot hold one request of "
                                                 f"{inp.max_model_len} tokens ({conc:.2f}x)"))
        else:
            res.findings.append(Finding("ok", f"{conc:.2f} requests of {inp.max_model_len} tokens "
                                              "fit in the KV cache at once"))


def _spec_name(spec: Any) -> str:
    if isinstance(spec, dict):
        if "shapes" in spec:
            return "MambaSpec"
        if spec.get("sliding_window"):
            return "SlidingWindowSpec"
        return "FullAttentionSpec"
    return str(spec)[:40]


def _tokens_from_log(lines: list[str]) -> int | None:
    import re

    for m in lines:
        hit = re.search(r"KV cache size: ([\d,]+) tokens", m)
        if hit:
            return int(hit.group(1).replace(",", ""))
    return None


def summary(res: RecipeResult) -> str | None:
    """How many tokens the KV cache holds and how many full-context requests fit at once."""
    if res.values.get("starts") is False:
        return "The engine will not start: " + next(
            (f.text.split(": ", 1)[1] for f in res.findings if f.level == "error"), "see below")
    tokens = value_of(res, "kv_cache_tokens", "GPU KV cache size (tokens)")
    if not isinstance(tokens, int):
        return None
    conc = value_of(res, "max_concurrency", *[k for k in res.values
                                              if k.startswith("maximum concurrency at")])
    mml = value_of(res, "max_model_len") or res.inputs.get("max_model_len")
    held = f"The GPU KV cache holds {tokens:,} tokens"
    if not isinstance(conc, (int, float)) or not isinstance(mml, int):
        return held + "."
    if conc < 1:
        return f"{held}: not one request of the full {mml:,}-token context fits ({conc:.2f}x)."
    return f"{held}: {conc:.2f} requests of the full {mml:,}-token context fit at once."


register(Recipe(
    name=NAME,
    engine="vllm",
    title="KV bytes per token per layer type, tokens per GiB and maximum concurrency",
    why=("The start-up lines 'GPU KV cache size' and 'Maximum concurrency' follow from config, "
         "flags and the available KV memory by the release's own formula; predict them before "
         "a restart (a server whose three KV lines were green crashed on a 93K-token prefill). "
         "--set available_kv_gib=N takes the 'Available KV cache memory' line."),
    reads_flags=["max_model_len", "tensor_parallel_size", "dtype", "kv_cache_dtype", "block_size",
                 "speculative_config", "enable_prefix_caching", "mamba_cache_mode",
                 "mamba_ssm_cache_dtype"],
    reads_config=["architectures", "model_type", "num_hidden_layers", "num_key_value_heads",
                  "head_dim", "layer_types", "full_attention_interval", "hybrid_override_pattern",
                  "sliding_window", "max_position_embeddings", "torch_dtype"],
    run=run,
    engine_mode=True,
    example=("--config example:llama-3.1-8b-instruct --flags 'vllm serve "
             "meta-llama/Llama-3.1-8B-Instruct --max-model-len 131072' --set available_kv_gib=60"),
    demo_options={"available_kv_gib": 40},
    demos=[
        ("llama-3.1-8b-instruct.json",
         "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 131072"),
        ("qwen3-next-80b-a3b-instruct.json",
         "vllm serve Qwen/Qwen3-Next-80B-A3B-Instruct --tensor-parallel-size 4 "
         "--max-model-len 262144"),
    ],
    needs=("torch",),
    summarize=summary,
))
