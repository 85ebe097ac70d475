"""vllm-capture-sizes: the CUDA-graph capture sizes a release really uses, and which decode steps fall back to eager.

The chain, all of it the release's own code run in one child:

1. ``VllmConfig._set_cudagraph_sizes`` (default sizes from ``--max-num-seqs``,
   the spec-decode query length and ``--max-num-batched-tokens`` when the user
   gave none; filtering and the max-size check when they did), which ends in
   ``CompilationConfig.post_init_cudagraph_sizes`` (``init_with_cudagraph_sizes``
   in old releases);
2. per model runner, what the runner does once the attention backend is known:
   ``CompilationConfig.resolve_cudagraph_mode_and_sizes`` (V1 runner: it calls
   ``adjust_cudagraph_sizes_for_spec_decode``, which rounds every size up to a
   multiple of k+1 and drops those above the max; V2 runner: sizes kept, the
   graph manager rounds per decode query length instead). Releases without
   ``resolve`` but with ``adjust`` get ``adjust`` directly;
3. per number of running requests N up to ``--max-num-seqs``, the runtime
   dispatcher's verdict for a uniform decode step of N x (k+1) tokens: the V1
   ``CudagraphDispatcher`` (``initialize_cudagraph_keys`` then ``dispatch``),
   the V2 ``CudaGraphManager`` (``_init_candidates`` then ``dispatch``), or in
   old releases ``VllmConfig.pad_for_cudagraph`` + ``CudagraphDispatcher.dispatch``.

Assumptions the user can change with ``--set``: the attention backend's
CUDA-graph support (``attn_cg_support=UNIFORM_BATCH``: what FlashAttention 3
and FlashInfer report for spec decode), the GPU (``gpu=sm90``: Blackwell
raises the default ceiling), the cudagraph mode (``--compilation-config``'s,
else the release's O2 default ``FULL_AND_PIECEWISE``).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

from ...engine.config import EngineFailed
from ...errors import ReconError
from ...slicing import Call, Py, RunResult, run_calls
from ..base import (
    Finding,
    NotApplicable,
    Recipe,
    RecipeContext,
    RecipeResult,
    Table,
    count,
    value_of,
)
from ..engine import engine_facts
from ..engine import result as engine_result
from ..registry import register
from ..vllm_common import (
    BASE_STUBS,
    defaulted,
    gpu_family,
    has,
    helper_file,
    params_of,
    ran_provenance,
    ranges,
    source_of,
    speculative_tokens,
    stub_notes,
)

NAME = "vllm-capture-sizes"
_V1_DISP = "vllm.v1.cudagraph_dispatcher:CudagraphDispatcher"
_V2_MGR = "vllm.v1.worker.gpu.cudagraph_utils:CudaGraphManager"
_SUPPORT = "vllm.v1.attention.backend:AttentionCGSupport"
_SUPPORT_OLD = "vllm.v1.attention.backends.utils:AttentionCGSupport"
_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
_SUPPORTS = ("ALWAYS", "UNIFORM_BATCH", "UNIFORM_SINGLE_TOKEN_DECODE", "NEVER")


@dataclass
class Targets:
    """Where this release keeps each step (qualnames), found by what the code does."""

    set_sizes: str
    cc: str  # module:CompilationConfig
    mode_enum: str  # module:CUDAGraphMode
    vllm_config: str  # module:VllmConfig
    modern: bool  # max_cudagraph_capture_size + post_init (else init_with_cudagraph_sizes)
    resolve: str | None = None
    adjust: str | None = None
    v1_dispatcher: bool = False
    v2_manager: bool = False
    v2_features: str | None = None
    batch_defaults: str | None = None
    support_enum: str | None = None
    scheduler_post_init: str | None = None  # old releases: cuda_graph_sizes default lives there


def _targets(ctx: RecipeContext) -> Targets:
    funcs = ctx.index.functions
    set_sizes = next((q for q in funcs if q.endswith(":VllmConfig._set_cudagraph_sizes")), None)
    if set_sizes is None:
        hits = [q for q in ctx.functions_with_text(r"cudagraph_capture_sizes")
                if q.endswith("._set_cudagraph_sizes")]
        if not hits:
            raise NotApplicable("no VllmConfig._set_cudagraph_sizes: this release decides its "
                                "CUDA graph sizes elsewhere (or has no CUDA graphs)")
        set_sizes = hits[0]
    vc_mod = set_sizes.partition(":")[0]
    post = next((q for q in funcs if q.endswith(":CompilationConfig.post_init_cudagraph_sizes")), None)
    init_old = next((q for q in funcs if q.endswith(":CompilationConfig.init_with_cudagraph_sizes")),
                    None)
    anchor = post or init_old
    if anchor is None:
        raise NotApplicable("CompilationConfig has neither post_init_cudagraph_sizes nor "
                            "init_with_cudagraph_sizes in this release")
    cc_mod = anchor.partition(":")[0]
    mode_mod = next((q.partition(":")[0] for q in funcs
                     if q.endswith(":CUDAGraphMode.decode_mode")), cc_mod)
    t = Targets(set_sizes=set_sizes, cc=f"{cc_mod}:CompilationConfig",
                mode_enum=f"{mode_mod}:CUDAGraphMode", vllm_config=f"{vc_mod}:VllmConfig",
                modern=post is not None)
    if "scheduler_config.cuda_graph_sizes" in source_of(ctx, set_sizes):
        t.scheduler_post_init = next((q for q in funcs
                                      if q.endswith(":SchedulerConfig.__post_init__")), None)
    t.resolve = ctx.first_existing([f"{cc_mod}:CompilationConfig.resolve_cudagraph_mode_and_sizes"])
    t.adjust = ctx.first_existing([f"{cc_mod}:CompilationConfig.adjust_cudagraph_sizes_for_spec_decode"])
    t.v1_dispatcher = has(ctx, f"{_V1_DISP}.dispatch") and has(ctx, f"{_V1_DISP}.initialize_cudagraph_keys")
    t.v2_manager = has(ctx, f"{_V2_MGR}._init_candidates") and has(ctx, f"{_V2_MGR}.dispatch")
    t.v2_features = ctx.first_existing([f"{vc_mod}:VllmConfig._get_v2_model_runner_unsupported_features"])
    t.batch_defaults = ctx.first_existing(["vllm.engine.arg_utils:EngineArgs.get_batch_defaults"])
    t.support_enum = next((q for q in (_SUPPORT, _SUPPORT_OLD) if q in ctx.index.classes), None)
    return t


# -- inputs ---------------------------------------------------------------------------------
@dataclass
class Inputs:
    k: int
    q: int  # uniform decode query length k + 1
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    sizes: list[int] | None
    max_size: int | None
    mode: str
    mode_from: str
    tp: int
    spec_method: str | None
    support: str
    gpu: int
    scheduler_sizes: list[int] = field(default_factory=list)  # old releases: --cuda-graph-sizes
    notes: list[str] = field(default_factory=list)


def _inputs(ctx: RecipeContext) -> Inputs:
    k, method = speculative_tokens(ctx)
    cc = ctx.flags.get("compilation_config") or {}
    sizes = cc.get("cudagraph_capture_sizes")
    if sizes is None and ctx.flags.get("cuda_graph_sizes"):
        sizes = ctx.flags.get("cuda_graph_sizes")
    if sizes is not None and (not isinstance(sizes, list) or not all(
            isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes)):
        raise ReconError(f"--compilation-config: cudagraph_capture_sizes must be a list of "
                         f"positive integers, got {sizes!r}")
    max_size = cc.get("max_cudagraph_capture_size")
    if max_size is not None and (isinstance(max_size, bool) or not isinstance(max_size, int)):
        raise ReconError(f"--compilation-config: max_cudagraph_capture_size must be an integer, "
                         f"got {max_size!r}")
    mode = cc.get("cudagraph_mode")
    mode_from = "--compilation-config"
    if ctx.options.get("cudagraph_mode"):
        mode, mode_from = str(ctx.options["cudagraph_mode"]), "--set cudagraph_mode"
    if mode is None:
        mode, mode_from = "", ""  # filled from the release by _default_mode
    mode = str(mode).upper()
    if mode and mode not in _MODES:
        raise ReconError(f"cudagraph_mode {mode!r}: expected one of {', '.join(_MODES)}")
    if ctx.flags.get("enforce_eager"):
        mode, mode_from = "NONE", "--enforce-eager"
    support = str(ctx.options.get("attn_cg_support", "UNIFORM_BATCH")).upper()
    if support not in _SUPPORTS:
        raise ReconError(f"--set attn_cg_support={support}: expected one of {', '.join(_SUPPORTS)}")
    return Inputs(k=k, q=k + 1, max_num_seqs=ctx.flags.get("max_num_seqs"),
                  max_num_batched_tokens=ctx.flags.get("max_num_batched_tokens"),
                  sizes=sizes, max_size=max_size, mode=mode, mode_from=mode_from,
                  tp=ctx.flags.get("tensor_parallel_size") or 1, spec_method=method,
                  support=support,
                  gpu=gpu_family(ctx), scheduler_sizes=list(ctx.flags.get("cuda_graph_sizes") or []))


_PLATFORM = ("ns(is_device_capability_family=lambda fam, *a, **k: fam == {gpu} // 10 * 10, "
             "is_device_capability=lambda cap, *a, **k: False, is_cuda=lambda: True, "
             "is_cuda_alike=lambda: True, is_rocm=lambda: False, is_tpu=lambda: False, "
             "is_cpu=lambda: False, is_xpu=lambda: False, is_unspecified=lambda: False, "
             "get_device_total_memory=lambda *a, **k: {mem}, "
             "get_device_name=lambda *a, **k: {name!r})")
#: what --set gpu=smNN stands for when the release's defaults ask the device
_GPUS = {80: (80 * 2**30, "NVIDIA A100-SXM4-80GB"), 90: (80 * 2**30, "NVIDIA H100 80GB HBM3"),
         100: (180 * 2**30, "NVIDIA B200")}


def _default_mode(ctx: RecipeContext, t: Targets) -> tuple[str, str]:
    """The cudagraph mode a release picks when the user sets none, read from its source.

    Recent releases: the ``cudagraph_mode`` of the default optimization level's table
    (``optimization_level: OptimizationLevel = OptimizationLevel.O2`` ->
    ``OPTIMIZATION_LEVEL_02["compilation_config"]["cudagraph_mode"]``). Old ones: the
    first ``CUDAGraphMode.X`` assigned under ``if ...cudagraph_mode is None:`` in
    ``VllmConfig.__post_init__`` (the V1-engine, piecewise-compilation branch).
    """
    path = ctx.index.functions[t.set_sizes].path
    text = ctx.snapshot.read_text(path)
    level = re.search(r"optimization_level:\s*OptimizationLevel\s*=\s*OptimizationLevel\.O(\d)", text)
    if level:
        tree = ast.parse(text)
        table = f"OPTIMIZATION_LEVEL_0{level.group(1)}"
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(isinstance(x, ast.Name) and x.id == table
                                                    for x in node.targets):
                found = _dict_path(node.value, ["compilation_config", "cudagraph_mode"])
                if isinstance(found, ast.Attribute):
                    line = f"{path}:{node.lineno}"
                    return found.attr, (f"the release's default: optimization level "
                                        f"O{level.group(1)} ({table} at {line})")
    post = f"{t.vllm_config}.__post_init__"
    if post in ctx.index.functions:
        body = source_of(ctx, post)
        m = re.search(r"cudagraph_mode is None:\s*(?:#[^\n]*\n\s*)*(?:.*\n)*?.*?cudagraph_mode\s*=\s*"
                      r"\\?\s*CUDAGraphMode\.(\w+)", body)
        if m:
            return m.group(1), (f"the release's default for the V1 engine with piecewise "
                                f"compilation ({ctx.index.functions[post].location})")
    return "FULL_AND_PIECEWISE", "assumed (the release's default was not found)"


def _dict_path(node: ast.AST, keys: list[str]) -> ast.AST | None:
    for key in keys:
        if not isinstance(node, ast.Dict):
            return None
        nxt = None
        for k, v in zip(node.keys, node.values, strict=True):
            if isinstance(k, ast.Constant) and k.value == key:
                nxt = v
        if nxt is None:
            return None
        node = nxt
    return node


def _batch_defaults(ctx: RecipeContext, t: Targets, inp: Inputs) -> None:
    """Fill --max-num-seqs / --max-num-batched-tokens the user left out from the release's defaults."""
    if inp.max_num_seqs is not None and inp.max_num_batched_tokens is not None:
        return
    mem, name = _GPUS.get(inp.gpu, _GPUS[90])
    got: dict[str, int] = {}
    if t.batch_defaults is not None and "world_size" in params_of(ctx, t.batch_defaults):
        res = run_calls(ctx.snapshot, [Call(t.batch_defaults, args={"world_size": inp.tp})],
                        stubs={**BASE_STUBS, "current_platform": _PLATFORM.format(
                            gpu=inp.gpu, mem=mem, name=name)}, timeout=60)[0]
        if res.ok and isinstance(res.value, list) and len(res.value) == 2:
            tokens, seqs = res.value
            key = next((k for k in tokens if k.endswith("OPENAI_API_SERVER")), None)
            if key is not None:
                got = {"max_num_batched_tokens": tokens[key], "max_num_seqs": seqs[key]}
    for key, fallback in (("max_num_seqs", 256), ("max_num_batched_tokens", 8192)):
        if getattr(inp, key) is not None:
            continue
        if key in got:
            setattr(inp, key, int(got[key]))
            inp.notes.append(f"--{key.replace('_', '-')} not given: {got[key]}, the release's "
                             f"`vllm serve` default for {name} (EngineArgs.get_batch_defaults)")
        else:
            setattr(inp, key, fallback)
            inp.notes.append(f"--{key.replace('_', '-')} not given: assumed {fallback}")


# -- the run -----------------------------------------------------------------------------
def _spec_expr(inp: Inputs) -> str:
    if inp.k == 0:
        return "None"
    return (f"Lenient('speculative_config', num_speculative_tokens={inp.k}, "
            f"method={inp.spec_method!r}, uses_dynamic_speculative_decoding=lambda: False, "
            "parallel_drafting=False, num_speculative_tokens_per_batch_size=None, "
            "draft_model_config=None, enable_adaptive_verification=False, "
            "use_eagle=lambda: False, use_dspark=lambda: False, is_xpress=lambda: False)")


def _vllm_config_attrs(t: Targets, inp: Inputs, *, scheduler: str) -> dict[str, Any]:
    """``self`` of ``VllmConfig`` methods: the sections they read (unmodelled fields read None)."""
    return {
        "model_config": Py("Lenient('model_config', enforce_eager=False, is_diffusion=False, "
                           "architecture='', architectures=[])"),
        "compilation_config": Py("R['cc']"),
        "scheduler_config": Py(scheduler),
        "speculative_config": Py(_spec_expr(inp)),
        "diffusion_config": None,
        "performance_mode": "balanced",
        "parallel_config": Py(f"Lenient('parallel_config', tensor_parallel_size={inp.tp}, "
                              "pipeline_parallel_size=1, data_parallel_size=1, "
                              "prefill_context_parallel_size=1, decode_context_parallel_size=1)"),
        "attention_config": Py("Lenient('attention_config')"),
        "lora_config": None,
        "cache_config": Py("Lenient('cache_config', use_kda_recoverssm=False)"),
    }


def _compilation_expr(t: Targets, inp: Inputs) -> str:
    return (f"keep('cc', instance({t.cc!r}, cudagraph_mode=attr({t.mode_enum!r} + '.' + "
            f"{inp.mode!r}), cudagraph_capture_sizes={inp.sizes!r}, "
            f"max_cudagraph_capture_size={inp.max_size!r}, compile_sizes=None, "
            "pass_config=Lenient('pass_config', enable_sp=False, "
            "enable_sequence_parallelism=False)))")


def _vc_expr(inp: Inputs, cc_key: str) -> str:
    """The ``vllm_config`` a dispatcher / graph manager reads."""
    return (f"Lenient('vllm_config', scheduler_config=ns(max_num_seqs={inp.max_num_seqs}, "
            f"max_num_batched_tokens={inp.max_num_batched_tokens}), "
            f"speculative_config={_spec_expr(inp)}, num_speculative_tokens={inp.k}, "
            "lora_config=None, cache_config=Lenient('cache_config', use_kda_recoverssm=False), "
            f"parallel_config=Lenient('parallel_config', tensor_parallel_size={inp.tp}, "
            f"data_parallel_size=1, pipeline_parallel_size=1), compilation_config=R[{cc_key!r}])")


def _resolve_args(ctx: RecipeContext, t: Targets, inp: Inputs, v2: bool) -> dict[str, Any]:
    """What the model runner passes to ``resolve_cudagraph_mode_and_sizes`` (this release's names)."""
    values: dict[str, Any] = {
        "min_cg_support": Py(f"attr({(t.support_enum or _SUPPORT)!r} + '.' + {inp.support!r})"),
        "min_cg_attn_backend": "the assumed attention backend",
        "uniform_decode_query_len": inp.q,
        "use_v2_model_runner": v2,
        "kv_cache_config": None,
        "max_num_reqs": inp.max_num_seqs,
        "is_profiling": False,
        "piecewise_capture_available": True,
        "tensor_parallel_size": inp.tp,
    }
    return {n: values[n] for n in params_of(ctx, t.resolve or "") if n in values}


@dataclass
class Chain:
    after_config: dict[str, Any]
    per_runner: dict[str, dict[str, Any]]
    verdicts: dict[str, list[tuple[int, str, int | None]]]  # runner -> [(N, mode, padded tokens)]
    v2_unsupported: list[str] | None
    results: list[Any]
    defaulted: list[str]
    notes: list[str]


def _stubs(inp: Inputs) -> dict[str, str]:
    mem, name = _GPUS.get(inp.gpu, _GPUS[90])
    return {**BASE_STUBS,
            "current_platform": _PLATFORM.format(gpu=inp.gpu, mem=mem, name=name),
            "vllm.envs.VLLM_USE_V1": "True",
            "vllm.envs.VLLM_DISABLE_PAD_FOR_CUDAGRAPH": "False",
            "in_wsl": "lambda: False",
            "is_breakable_cudagraph_enabled": "lambda *a, **k: False",
            "get_captured_lora_counts": "lambda *a, **k: []",
            "get_pp_group": "lambda: ns(is_first_rank=True, is_last_rank=True)"}


def _keys_expr(mode_cls: str) -> str:
    return (f"Opaque({{attr({mode_cls!r} + '.PIECEWISE'): set(), "
            f"attr({mode_cls!r} + '.FULL'): set()}}, 'keys')")


def _cc_state(key: str, *names: str) -> Py:
    return Py(f"state(R[{key!r}], " + ", ".join(repr(n) for n in names) + ")")


@dataclass
class _Built:
    """The chain's calls, and where each step's answer sits among them."""

    calls: list[Call] = field(default_factory=list)
    after_at: int = 0  # the call whose self shows the state after the size logic
    state_at: dict[str, int] = field(default_factory=dict)  # runner -> call reading its state
    first_dispatch: dict[str, int] = field(default_factory=dict)  # runner -> its N=1 dispatch
    features_at: int | None = None  # VllmConfig._get_v2_model_runner_unsupported_features


def _size_names(t: Targets) -> tuple[str, str, str]:
    """The CompilationConfig fields each step's state is read from (names vary by release)."""
    return ("cudagraph_capture_sizes", "max_cudagraph_capture_size" if t.modern
            else "max_capture_size", "cudagraph_mode")


def _chain(ctx: RecipeContext, t: Targets, inp: Inputs, runners: list[str]) -> Chain:
    """Run the whole chain in one child; return what each step left behind."""
    built = _Built()
    scheduler = _size_calls(ctx, t, inp, runners, built)
    for runner in runners:
        key = f"cc_{runner}" if (t.resolve or (t.adjust and runner == "V1")) else "cc"
        if runner == "V1" and not t.v1_dispatcher:
            continue  # no V1 dispatcher to ask: sizes only (see run())
        if runner == "V1" and t.modern:
            _v1_dispatch_calls(ctx, t, inp, key, built)
        elif runner == "V1":
            _v1_old_dispatch_calls(t, inp, key, built)
        else:  # V2
            _v2_dispatch_calls(t, inp, key, built)
    if t.v2_features is not None:
        built.features_at = len(built.calls)
        built.calls.append(Call(t.v2_features,
                                self_attrs=_vllm_config_attrs(t, inp, scheduler=scheduler)))
    with helper_file() as helpers:
        results = run_calls(ctx.snapshot, built.calls, stubs=_stubs(inp), stub_file=helpers,
                            timeout=120)
    for i, r in enumerate(results):
        if r.error is not None and i != built.features_at:
            raise ReconError(f"{r.target} raised {r.error.line()} (the release rejects this "
                             "configuration, or recon models an input it needs wrongly)")
    return _read_chain(t, inp, runners, built, results)


def _size_calls(ctx: RecipeContext, t: Targets, inp: Inputs, runners: list[str],
                built: _Built) -> str:
    """The size logic, then each runner's resolution; returns the scheduler section's expression."""
    calls = built.calls
    size_names = _size_names(t)
    scheduler = (f"ns(max_num_seqs={inp.max_num_seqs}, max_num_batched_tokens="
                 f"{inp.max_num_batched_tokens}, async_scheduling=False)")
    if t.scheduler_post_init is not None:
        # old releases keep --cuda-graph-sizes (and its default) in the scheduler config
        sched_cls = t.scheduler_post_init.rpartition(".")[0]
        obj = (f"keep('sched', instance({sched_cls!r}, max_model_len=8192, max_num_seqs="
               f"{inp.max_num_seqs}, max_num_batched_tokens={inp.max_num_batched_tokens}, "
               f"enable_chunked_prefill=True, runner_type='generate', is_multimodal_model=False, "
               f"max_num_partial_prefills=1, cuda_graph_sizes={inp.scheduler_sizes!r}, "
               "async_scheduling=False))")
        calls.append(Call(t.scheduler_post_init,
                          self_attrs={"_recon": Py(f"bind({t.scheduler_post_init!r}, {obj})")}))
        scheduler = "R['sched']"
    attrs = _vllm_config_attrs(t, inp, scheduler=scheduler)
    attrs["compilation_config"] = Py(_compilation_expr(t, inp))
    calls.append(Call(t.set_sizes, self_attrs=attrs))
    built.after_at = len(calls)  # the next call's self shows the state after the size logic
    for runner in runners:
        key = f"cc_{runner}"
        before = {"_recon_cc": _cc_state("cc", *size_names)}
        if t.resolve is not None:
            calls.append(Call(t.resolve, args=_resolve_args(ctx, t, inp, runner == "V2"),
                              self_attrs={**before, "_recon": Py(
                                  f"bind({t.resolve!r}, keep({key!r}, clone(R['cc'])))")}))
        elif t.adjust is not None and runner == "V1":
            args: dict[str, Any] = {"uniform_decode_query_len": inp.q}
            if "tensor_parallel_size" in params_of(ctx, t.adjust):
                args["tensor_parallel_size"] = inp.tp
            calls.append(Call(t.adjust, args=args, self_attrs={**before, "_recon": Py(
                f"bind({t.adjust!r}, keep({key!r}, clone(R['cc'])))")}))
    return scheduler


def _v1_dispatch_calls(ctx: RecipeContext, t: Targets, inp: Inputs, key: str,
                       built: _Built) -> None:
    """V1 runner: the dispatcher's keys, then one uniform decode dispatch per N."""
    calls, mode_cls, n_max = built.calls, t.mode_enum, inp.max_num_seqs or 0
    disp = (f"keep('d', instance({_V1_DISP!r}, vllm_config={_vc_expr(inp, key)}, "
            f"compilation_config=R[{key!r}], uniform_decode_query_len={inp.q}, "
            f"cudagraph_keys={_keys_expr(mode_cls)}, keys_initialized=False, "
            "specialize_lora_count=False, captured_lora_counts=[], "
            f"cudagraph_mode=attr({mode_cls!r} + '.NONE')))")
    init_args: dict[str, Any] = {"cudagraph_mode": Py(f"R[{key!r}].cudagraph_mode")}
    if "uniform_decode_query_len" in params_of(ctx, f"{_V1_DISP}.initialize_cudagraph_keys"):
        init_args["uniform_decode_query_len"] = inp.q
    built.state_at["V1"] = len(calls)
    calls.append(Call(f"{_V1_DISP}.initialize_cudagraph_keys", args=init_args,
                      self_attrs={"_recon_cc": _cc_state(key, *_size_names(t)), "_recon": Py(
                          f"bind({_V1_DISP + '.initialize_cudagraph_keys'!r}, {disp})")}))
    d_params = params_of(ctx, f"{_V1_DISP}.dispatch")
    if "num_tokens" not in d_params:
        raise NotApplicable(f"CudagraphDispatcher.dispatch takes ({', '.join(d_params)}) "
                            "in this release; recon does not model that dispatcher")
    built.first_dispatch["V1"] = len(calls)
    for n in range(1, n_max + 1):
        calls.append(Call(f"{_V1_DISP}.dispatch",
                          args={"num_tokens": n * inp.q, "uniform_decode": True},
                          self_attrs={"_recon": Py(f"bind({_V1_DISP + '.dispatch'!r}, R['d'])")}))


def _v1_old_dispatch_calls(t: Targets, inp: Inputs, key: str, built: _Built) -> None:
    """Old V1 runner: per N, ``pad_for_cudagraph`` then the dispatcher's verdict."""
    # old releases: the runner pads with VllmConfig.pad_for_cudagraph when the step fits
    # under the largest size, then asks the dispatcher for (num_tokens, uniform_decode)
    calls, mode_cls, n_max = built.calls, t.mode_enum, inp.max_num_seqs or 0
    disp = (f"keep('d', instance({_V1_DISP!r}, vllm_config={_vc_expr(inp, key)}, "
            f"compilation_config=R[{key!r}], cudagraph_keys={_keys_expr(mode_cls)}, "
            f"keys_initialized=False, cudagraph_mode=R[{key!r}].cudagraph_mode))")
    built.state_at["V1"] = len(calls)
    calls.append(Call(f"{_V1_DISP}.initialize_cudagraph_keys",
                      args={"cudagraph_mode": Py(f"R[{key!r}].cudagraph_mode"),
                            "uniform_decode_query_len": inp.q},
                      self_attrs={"_recon_cc": _cc_state(key, *_size_names(t)), "_recon": Py(
                          f"bind({_V1_DISP + '.initialize_cudagraph_keys'!r}, {disp})")}))
    built.first_dispatch["V1"] = len(calls)
    vc = f"instance({t.vllm_config!r}, compilation_config=R[{key!r}])"
    for n in range(1, n_max + 1):
        # a step above the largest size is never padded (the runner's check; the
        # verdict below marks it eager): ask for 0 tokens instead of indexing past the end
        tokens = n * inp.q
        calls.append(Call(f"{t.vllm_config}.pad_for_cudagraph",
                          args={"batch_size": Py(f"{tokens} if {tokens} <= "
                                                 f"R[{key!r}].max_capture_size else 0")},
                          self_attrs={"_recon": Py(f"bind({t.vllm_config + '.pad_for_cudagraph'!r}, "
                                                   f"{vc}, 'pad')")}))
        calls.append(Call(f"{_V1_DISP}.dispatch", args={"batch_descriptor": Py(
            "attr('vllm.forward_context:BatchDescriptor')(num_tokens=R['pad'], "
            "uniform_decode=True)")},
            self_attrs={"_recon": Py(f"bind({_V1_DISP + '.dispatch'!r}, R['d'])")}))


def _v2_dispatch_calls(t: Targets, inp: Inputs, key: str, built: _Built) -> None:
    """V2 runner: the graph manager's candidates, then one dispatch per N."""
    calls, n_max = built.calls, inp.max_num_seqs or 0
    mgr = (f"keep('m', instance({_V2_MGR!r}, vllm_config={_vc_expr(inp, key)}, "
           f"compilation_config=R[{key!r}], cudagraph_mode=R[{key!r}].cudagraph_mode, "
           f"decode_query_len={inp.q}, max_num_reqs={n_max}, varlen_decode=False, "
           "lora_capture_cases=[0], ubatch_runner=None, "
           "_candidates=Opaque({}, 'candidates'), _capture_descs=Opaque({}, 'descs'), "
           f"_lora_dispatch_map={{}}, _max_lora_case=0, _graphs_captured=True, "
           f"tp_size={inp.tp}, use_breakable_cg=False))")
    built.state_at["V2"] = len(calls)
    calls.append(Call(f"{_V2_MGR}._init_candidates",
                      self_attrs={"_recon_cc": _cc_state(key, *_size_names(t)), "_recon": Py(
                          f"bind({_V2_MGR + '._init_candidates'!r}, {mgr})")}))
    built.first_dispatch["V2"] = len(calls)
    for n in range(1, n_max + 1):
        calls.append(Call(f"{_V2_MGR}.dispatch",
                          args={"num_reqs": n, "num_tokens": n * inp.q,
                                "uniform_token_count": inp.q, "num_active_loras": 0,
                                "max_query_len": inp.q},
                          self_attrs={"_recon": Py(f"bind({_V2_MGR + '.dispatch'!r}, R['m'])")}))


def _read_chain(t: Targets, inp: Inputs, runners: list[str], built: _Built,
                results: list[RunResult]) -> Chain:
    """What each step left: sizes after the config, each runner's state and its verdicts."""
    after_at = built.after_at
    chain = Chain(after_config=results[after_at].self_before.get("_recon_cc", {})
                  if after_at < len(results) else {}, per_runner={}, verdicts={},
                  v2_unsupported=None, results=results, defaulted=defaulted(results),
                  notes=stub_notes(results))
    for runner in runners:
        if runner not in built.state_at:
            chain.per_runner[runner] = chain.after_config
            continue
        chain.per_runner[runner] = results[built.state_at[runner]].self_before.get("_recon_cc", {})
        chain.verdicts[runner] = _runner_verdicts(t, inp, runner, chain.per_runner[runner],
                                                  results, built.first_dispatch[runner])
    if built.features_at is not None:
        r = results[built.features_at]
        chain.v2_unsupported = r.value if r.ok and isinstance(r.value, list) else None
        if not r.ok and r.error is not None:
            chain.notes.append(f"could not tell the default model runner: "
                               f"{r.target.rpartition(':')[2]} raised {r.error.line()}")
    return chain


def _runner_verdicts(t: Targets, inp: Inputs, runner: str, state: dict[str, Any],
                     results: list[RunResult], start: int) -> list[tuple[int, str, int | None]]:
    """(N, runtime mode, padded tokens) per N, from the runner's dispatches from ``start`` on."""
    n_max = inp.max_num_seqs or 0
    rows: list[tuple[int, str, int | None]] = []
    if runner == "V1" and not t.modern:
        largest = state.get("max_capture_size") or 0
        for n in range(1, n_max + 1):
            padded, dispatched = results[start + 2 * (n - 1)], results[start + 2 * (n - 1) + 1]
            if n * inp.q > largest:  # the runner's check: eager without asking
                rows.append((n, "NONE", None))
            else:
                verdict, _ = _verdict(dispatched.value)
                rows.append((n, verdict, padded.value))
    else:
        for n, r in enumerate(results[start: start + n_max], start=1):
            rows.append((n, *_verdict(r.value)))
    return rows


def _verdict(value: Any) -> tuple[str, int | None]:
    """(runtime mode, padded tokens) from a dispatcher's return value."""
    if isinstance(value, list) and len(value) == 2:  # V1: (mode, BatchDescriptor)
        mode, desc = value
        padded = None
        if isinstance(desc, dict):
            padded = desc.get("num_tokens")
        elif isinstance(desc, list) and desc:  # a NamedTuple descriptor
            padded = desc[0]
        name = str(mode).rpartition(".")[2]
        return name, (padded if name != "NONE" else None)
    if isinstance(value, dict):  # V2: BatchExecutionDescriptor
        name = str(value.get("cg_mode")).rpartition(".")[2]
        return name, (value.get("num_tokens") if name != "NONE" else None)
    return "?", None


def run_engine(ctx: RecipeContext) -> RecipeResult:
    """Engine mode: the release's config, then its model runner's resolution and dispatcher."""
    facts, said = engine_facts(ctx, assume_model=True)
    failed = [w for w in facts.warnings if w.get("stage") in RUNNER_STAGES]
    if failed:  # the config line's sizes are not what the runner captures: no answer
        raise EngineFailed(f"{ctx.release} did not decide its CUDA graphs: the worker's "
                         f"{failed[0].get('stage')} raised {failed[0].get('error')}"[:800])
    res = engine_result(NAME, ctx, facts, said, CAPTURE_KEYS)
    data = facts.facts
    printed, used = data.get("cudagraph_capture_sizes"), data.get("cudagraph_capture_sizes_resolved")
    if printed and used is not None and list(printed) != list(used):
        dropped = sorted(set(printed) - set(used))
        res.findings.insert(0, Finding("warn", f"the model runner changed the capture sizes the "
                                       f"config line prints: {_brief(printed)} -> {_brief(used)}"
                                       + (f" (dropped {_brief(dropped)})" if dropped else "")))
    stage = str(data.get("cudagraph_stage") or "")
    if "V2 model runner" in stage and stage.startswith("create_engine_config ("):
        res.findings.insert(0, Finding("warn", "the CUDA graphs the V2 model runner captures are "
                                       "not predicted (" + stage.partition("(")[2].rstrip(")")
                                       + "): the sizes shown are the config line's"))
    steps = data.get("cudagraph_decode_steps")
    if steps:
        q = int(data.get("uniform_decode_query_len") or 1)
        runner = str(data.get("model_runner") or "V1")  # the one the release picked
        res.tables.append(steps_table({runner: steps}, q, data.get("num_speculative_tokens"),
                                      len(steps)))
        eager = first_eager(runner, steps, q, data.get("max_cudagraph_capture_size_resolved"),
                            data.get("max_num_seqs"))
        if eager is not None:
            res.findings.append(eager)
    if data.get("cudagraph_mode_resolved") not in (None, data.get("cudagraph_mode")):
        res.findings.insert(0, Finding("warn", f"cudagraph mode {data.get('cudagraph_mode')} "
                                       f"became {data['cudagraph_mode_resolved']} once the "
                                       "attention backends were known"))
    return res


def _brief(sizes: Any) -> str:
    """A list of capture sizes short enough for one line: ``[1, 2, 4, ..., 496, 512] (51)``."""
    items = [int(x) for x in sizes]
    if len(items) <= 8:
        return str(items)
    return f"[{', '.join(map(str, items[:3]))}, ..., {', '.join(map(str, items[-2:]))}] ({len(items)})"


#: the worker steps before the model runner resolves its graphs (a failure there: no answer)
RUNNER_STAGES = ("worker_phase", "kv_phase", "cudagraph_phase")

#: what this recipe shows of the release's answer (identifiers of ``--json``)
CAPTURE_KEYS = ("cudagraph_capture_sizes", "max_cudagraph_capture_size", "cudagraph_mode",
                "compilation_mode", "cudagraph_mode_resolved", "cudagraph_capture_sizes_resolved",
                "max_cudagraph_capture_size_resolved", "cudagraph_graphs_piecewise",
                "cudagraph_graphs_piecewise_max", "cudagraph_graphs_full",
                "cudagraph_graphs_full_max", "cudagraph_graphs_mixed", "cudagraph_graphs_decode",
                "max_num_seqs", "max_num_batched_tokens", "speculative_method",
                "num_speculative_tokens", "attention_backends", "cudagraph_stage")


def run(ctx: RecipeContext) -> RecipeResult:
    """Engine mode by default; ``--set mode=slice`` for recon's own reading of the flags."""
    if str(ctx.options.get("mode", "engine")) == "slice":
        return run_sliced(ctx)
    return run_engine(ctx)


def run_sliced(ctx: RecipeContext) -> RecipeResult:
    """Resolve the sizes, then ask each model runner's dispatcher about every N."""
    t = _targets(ctx)
    inp = _inputs(ctx)
    if not inp.mode:
        inp.mode, inp.mode_from = _default_mode(ctx, t)
    _batch_defaults(ctx, t, inp)
    res = RecipeResult(NAME, ctx.snapshot.name, ctx.release)
    res.inputs = {"cudagraph_capture_sizes": inp.sizes, "max_cudagraph_capture_size": inp.max_size,
                  "cudagraph_mode": inp.mode, "max_num_seqs": inp.max_num_seqs,
                  "max_num_batched_tokens": inp.max_num_batched_tokens,
                  "num_speculative_tokens": inp.k, "tensor_parallel_size": inp.tp}
    runners = ["V1"] + (["V2"] if t.v2_manager and t.resolve is not None else [])
    if inp.mode == "NONE":
        runners = runners[:1]
    chain = _chain(ctx, t, inp, runners)
    res.notes += inp.notes
    _present(ctx, t, inp, runners, chain, res)
    return res


def _present(ctx: RecipeContext, t: Targets, inp: Inputs, runners: list[str], chain: Chain,
             res: RecipeResult) -> None:
    """Values, the per-N tables, findings and notes of one chain."""
    max_key = "max_cudagraph_capture_size" if t.modern else "max_capture_size"
    _size_values(t, inp, runners, chain, max_key, res)
    if chain.verdicts:
        res.tables.append(_runs_table(inp, runners, chain))
        if (inp.max_num_seqs or 0) <= 64:
            res.tables.append(_per_n_table(inp, runners, chain))
    _size_findings(inp, runners, chain, max_key, res)
    res.notes.append(f"cudagraph mode {inp.mode} from {inp.mode_from}")
    if t.resolve:
        res.notes.append(f"attention backend CUDA-graph support assumed {inp.support} "
                         "(--set attn_cg_support=ALWAYS|UNIFORM_BATCH|"
                         "UNIFORM_SINGLE_TOKEN_DECODE|NEVER)")
    res.notes.append(f"GPU assumed sm{inp.gpu} (--set gpu=sm100 for Blackwell: larger default "
                     "ceiling)")
    if "V2" in runners:
        res.notes.append("V2 runner verdicts assume its graphs were captured "
                         "(CudaGraphManager._graphs_captured=True, as after warm-up)")
    if not t.modern:
        res.notes.append("old release: a step pads to a captured size only when its token count "
                         "is <= the largest one (gpu_model_runner's check before "
                         "pad_for_cudagraph); larger steps run eager")
    res.notes += chain.notes
    if chain.defaulted:
        res.notes.append("config fields recon does not model, read as unset: "
                         + ", ".join(chain.defaulted))
    res.provenance = ran_provenance(ctx, chain.results)


def _size_values(t: Targets, inp: Inputs, runners: list[str], chain: Chain, max_key: str,
                 res: RecipeResult) -> None:
    """The sizes after the config's logic, the default runner, and each runner's sizes."""
    v = res.values
    size_key = "cudagraph_capture_sizes"
    after = chain.after_config
    v["uniform decode query length (k+1)"] = inp.q
    v["sizes after the release's size logic"] = after.get(size_key)
    v["max size after the release's size logic"] = after.get(max_key)
    default_runner = _default_runner(t, chain)
    if default_runner:
        v["default model runner"] = default_runner
    for runner in runners:
        st = chain.per_runner.get(runner) or {}
        label = f"{runner} runner"
        v[f"{label}: capture sizes"] = st.get(size_key)
        v[f"{label}: max capture size"] = st.get(max_key)
        if st.get("cudagraph_mode") is not None:
            v[f"{label}: cudagraph mode"] = str(st.get("cudagraph_mode")).rpartition(".")[2]
        rows = chain.verdicts.get(runner) or []
        in_graph = [n for n, mode, _ in rows if mode != "NONE"]
        if rows:
            v[f"{label}: largest N in a graph"] = max(in_graph) if in_graph else 0


def _runs_table(inp: Inputs, runners: list[str], chain: Chain) -> Table:
    """Runs of N with the same verdict for every runner, with the span they pad to."""
    return steps_table({r: chain.verdicts[r] for r in runners if r in chain.verdicts},
                       inp.q, inp.k, inp.max_num_seqs or 0)


def steps_table(verdicts: dict[str, Any], q: int, k: int | None, max_n: int) -> Table:
    """Runs of N running requests whose decode step (N x ``q`` tokens) has the same verdict
    in every runner (``verdicts``: runner -> ``(N, runtime mode, padded tokens)`` per N)."""
    table_rows = []
    keyed = [(n, tuple(str(verdicts[r][n - 1][1]) for r in verdicts))
             for n in range(1, max_n + 1)]
    for lo, hi, modes in ranges(keyed):
        row: list[Any] = [f"{lo}" if lo == hi else f"{lo}-{hi}",
                          f"{lo * q}" if lo == hi else f"{lo * q}-{hi * q}"]
        for r_i, runner in enumerate(verdicts):
            pads = sorted({p for _n, _m, p in verdicts[runner][lo - 1: hi] if p is not None})
            mode = modes[r_i]
            if mode == "NONE":
                row.append("eager (no graph)")
            else:
                span = ((f"{pads[0]}" if len(pads) == 1 else f"{pads[0]}..{pads[-1]}")
                        if pads else "?")
                row.append(f"{mode} graph, padded to {span} tokens")
        table_rows.append(row)
    cols = ["running requests N", "decode tokens N x (k+1)"] + [f"{r} runner" for r in verdicts]
    return Table(f"decode step per number of running requests (k={k or 0})", cols, table_rows)


def first_eager(runner: str, rows: list[Any], q: int, largest: Any,
                max_num_seqs: int | None) -> Finding | None:
    """The first N whose decode step runs eager (a warning), or that none does (ok)."""
    if not rows:
        return None
    eager = [n for n, mode, _ in rows if mode == "NONE"]
    if eager:
        return Finding("warn", f"{runner} runner: with {eager[0]} or more running requests "
                               f"({eager[0] * q}+ tokens per decode step) the step runs eager, "
                               f"outside any CUDA graph (largest graph: {largest} tokens)")
    return Finding("ok", f"{runner} runner: every decode step up to --max-num-seqs "
                         f"{max_num_seqs} runs in a graph")


def _per_n_table(inp: Inputs, runners: list[str], chain: Chain) -> Table:
    """Every N on its own row (small --max-num-seqs only): mode and padded token count."""
    shown = [r for r in runners if r in chain.verdicts]
    detail = []
    for n in range(1, (inp.max_num_seqs or 0) + 1):
        row: list[Any] = [n, n * inp.q]
        for runner in shown:
            _, mode, padded = chain.verdicts[runner][n - 1]
            row.append("eager" if mode == "NONE" else f"{mode} {padded}")
        detail.append(row)
    return Table("per N: runtime mode and padded token count",
                 ["N", "tokens"] + [f"{r} runner" for r in shown], detail)


def _size_findings(inp: Inputs, runners: list[str], chain: Chain, max_key: str,
                   res: RecipeResult) -> None:
    """Sizes the release changed, the first N that runs eager, and an eager-only mode."""
    size_key = "cudagraph_capture_sizes"
    if inp.sizes is not None:
        for runner in runners:
            final = (chain.per_runner.get(runner) or {}).get(size_key)
            if final is not None and sorted(set(inp.sizes)) != sorted(final):
                dropped = sorted(set(inp.sizes) - set(final))
                added = sorted(set(final) - set(inp.sizes))
                res.findings.append(Finding("warn", f"{runner} runner: the release changed your "
                                                    f"cudagraph_capture_sizes {inp.sizes} to {final}"
                                            + (f" (no longer captured: {dropped}" if dropped else "")
                                            + (f"; new: {added})" if added else (")" if dropped else ""))))
    for runner in runners:
        said = first_eager(runner, chain.verdicts.get(runner) or [], inp.q,
                           (chain.per_runner.get(runner) or {}).get(max_key), inp.max_num_seqs)
        if said is not None:
            res.findings.append(said)
    if inp.mode == "NONE":
        res.findings.append(Finding("info", f"cudagraph mode NONE ({inp.mode_from}): every step is eager"))


def _mode_only(row: tuple[int, str, int | None]) -> str:
    return row[1]


def _default_runner(t: Targets, chain: Chain) -> str | None:
    if t.v2_features is None:
        return "V1 (the only GPU model runner with CUDA graphs here)" if not t.v2_manager else None
    if chain.v2_unsupported is None:
        return None
    if chain.v2_unsupported:
        return f"V1 (V2 lacks: {', '.join(chain.v2_unsupported)})"
    return "V2 (VllmConfig.use_v2_model_runner with VLLM_USE_V2_MODEL_RUNNER unset; =0 selects V1)"


def summary(res: RecipeResult) -> str | None:
    """Which decode batches run in a CUDA graph and from how many requests on they run eager,
    in requests and tokens (engine mode's answer, or the default runner's of slicing mode)."""
    v = res.values
    runner = "V2" if str(v.get("default model runner", "")).startswith("V2") else "V1"
    k = v.get("num_speculative_tokens")
    if k is None and isinstance(v.get("uniform decode query length (k+1)"), int):
        k = v["uniform decode query length (k+1)"] - 1
    top = value_of(res, "max_cudagraph_capture_size_resolved", f"{runner} runner: max capture size",
                   "max_cudagraph_capture_size")
    mode = value_of(res, "cudagraph_mode_resolved", f"{runner} runner: cudagraph mode", "cudagraph_mode")
    seqs = value_of(res, "max_num_seqs") or res.inputs.get("max_num_seqs")
    q = int(k or 0) + 1
    method = v.get("speculative_method")
    spec = (f"With {str(method).upper() + ' ' if method else ''}k={k} ({q} tokens per request "
            "per decode step), " if k else "Without speculative decoding (1 token per request "
            "per decode step), ")
    if str(mode).upper() == "NONE":
        return f"{spec}every decode step runs eager: the cudagraph mode is NONE."
    if not isinstance(top, int):
        return None
    fit = top // q
    if fit < 1:
        return (f"{spec}every decode step runs eager: the largest CUDA graph ({top} tokens) is "
                "smaller than one request's step.")
    holds = f"the largest CUDA graph holds {top} tokens" + (
        f" = {count(fit, 'request')} x {q}" if q > 1 else "")
    if isinstance(seqs, int) and seqs <= fit:
        return (f"{spec}every decode batch runs in a CUDA graph, up to --max-num-seqs "
                f"{count(seqs, 'request')} ({holds}).")
    return (f"{spec}decode batches of {fit + 1} or more requests ({(fit + 1) * q}+ tokens) run "
            f"eager, outside any CUDA graph ({holds}).")


register(Recipe(
    name=NAME,
    engine="vllm",
    title="CUDA-graph capture sizes the release really uses, and which decode steps run eager",
    why=("With MTP and num_speculative_tokens=3, vLLM silently rounds every capture size up to a "
         "multiple of 4 and drops those above the max: [1,2,4,8,16,32,64] becomes [4,8,16,32,64], "
         "and a decode step of more than 16 requests (64 tokens) runs eager."),
    reads_flags=["compilation_config", "max_num_seqs", "max_num_batched_tokens",
                 "speculative_config", "tensor_parallel_size", "enforce_eager", "cuda_graph_sizes"],
    reads_config=[],
    run=run,
    engine_mode=True,
    example=("--config example:qwen3-next-80b-a3b-instruct --flags 'vllm serve M --max-num-seqs 16 --speculative-config "
             "\"{\\\"method\\\":\\\"mtp\\\",\\\"num_speculative_tokens\\\":3}\" --compilation-config "
             "\"{\\\"cudagraph_capture_sizes\\\":[1,2,4,8,16,32,64],\\\"max_cudagraph_capture_size\\\":64}\"'"),
    demos=[
        ("qwen3-next-80b-a3b-instruct.json", "vllm serve Qwen/Qwen3-Next-80B-A3B-Instruct --max-num-seqs 16 --max-num-batched-tokens 8192 "
               "--speculative-config '{\"method\":\"mtp\",\"num_speculative_tokens\":3}' "
               "--compilation-config '{\"cudagraph_mode\":\"FULL_AND_PIECEWISE\","
               "\"cudagraph_capture_sizes\":[1,2,4,8,16,32,64],\"max_cudagraph_capture_size\":64}'"),
        # the same deployment before: graphs up to 32 tokens, i.e. 8 requests of 4 tokens
        ("qwen3-next-80b-a3b-instruct.json", "vllm serve Qwen/Qwen3-Next-80B-A3B-Instruct --max-num-seqs 16 --max-num-batched-tokens 8192 "
               "--speculative-config '{\"method\":\"mtp\",\"num_speculative_tokens\":3}' "
               "--compilation-config '{\"cudagraph_mode\":\"FULL_AND_PIECEWISE\","
               "\"cudagraph_capture_sizes\":[1,2,4,8,16,32],\"max_cudagraph_capture_size\":32}'"),
        (None, "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-num-seqs 256 "
               "--max-num-batched-tokens 8192"),
    ],
    needs=("torch",),
    summarize=summary,
))
