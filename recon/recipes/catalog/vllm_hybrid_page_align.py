"""vllm-hybrid-page-align: the attention block size and mamba padding a release will pick.

For hybrid attention/mamba models vLLM raises the attention block size until
one attention page holds at least one mamba state, then pads the mamba page to
the attention page (log lines ``Setting attention block size to N tokens`` and
``Padding mamba page size by X%``; two of the field investigations). This recipe
runs, in one sandboxed child and in the engine's own order:

1. the model's ``MODELS_CONFIG_MAP`` hook (e.g. NemotronH's float32 SSM cache
   default) and ``HybridAttentionMambaModelConfig.verify_and_update_config``
   (turns on ``align`` mamba cache mode with prefix caching; in vLLM <= 0.23 it
   *is* the alignment);
2. the model class's own ``get_mamba_state_shape_from_config`` /
   ``get_mamba_state_dtype_from_config`` (what the alignment reads);
3. the function that logs ``Setting attention block size to`` (found by that
   message: ``Platform._align_hybrid_block_size`` from 0.24 on).

Inputs are a modelled ``VllmConfig``: a real ``ModelConfig`` instance of the
release (its ``get_num_kv_heads`` / ``get_head_size`` / ``use_mla`` run for
real over the release's architecture convertor) and recorded namespaces for
the cache, parallel, scheduler and speculative sections. What the release
writes into them, what it logs and the locals of the alignment function at its
return are read back (``hybrid_common``).

Assumptions (each overridable with ``--set``):

* the attention backend is FLASH_ATTN on CUDA, whose kernel block sizes are
  read from the release's ``FlashAttentionBackend.get_supported_kernel_block_sizes``
  default branch (``--set attention_backend=NAME`` reads another backend's;
  ``--set kernel_block_sizes=[16,32]`` / ``--set kernel_block_multiple=64``
  give them explicitly);
* no mamba layer exports in-prefill checkpoints (Triton GDN prefill);
  ``--set mamba_checkpoint_alignment=64`` models FlashInfer's GDN prefill on
  Hopper, which matters in ``align`` mode;
* the block size before alignment is ``--block-size`` or the release's
  ``CacheConfig`` default (the platform's earlier per-backend preference is not run);
* the GPU is CUDA sm90 (``--set gpu=sm80``): ``current_platform`` answers
  capability questions for it and raises on anything else.

Not modelled: ``--kv-cache-dtype-skip-layers`` and the heterogeneous-KV pass that
follows the alignment (``_align_heterogeneous_kv_block_size``), which is why a TurboQuant
deployment (8192 tokens / 167.69%) cannot be replayed from the
facts it publishes. The lines of a GLM-5.3-Flash crash report (1152 tokens / 5.11%, align mode) are
reproduced by the tests with a GLM-5.3-Flash-shaped config.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any

from ...errors import ReconError
from ...slicing import Call, Py, RunFailed, RunResult, run_calls
from ..base import Finding, NotApplicable, Recipe, RecipeContext, RecipeResult, Table, value_of
from ..engine import engine_facts
from ..engine import result as engine_result
from ..hybrid_common import (
    child_events,
    child_helpers,
    class_constant,
    class_defaults,
    class_flags,
    find_method,
    functions_named,
    model_dtype,
    module_dict,
    mro,
    provenance_of,
    registry_class,
    registry_model_class,
)
from ..options import opt_int, opt_ints
from ..registry import register

NAME = "vllm-hybrid-page-align"
LOG_BLOCK = r"Setting attention block size to"
LOG_PAD = r"Padding mamba page size by"
CONVERTORS = "vllm.transformers_utils.model_arch_config_convertor"
MODEL_HOOKS = "vllm.model_executor.models.config"

#: What the child builds: a VllmConfig made of a real ModelConfig and recorded sections.
_CHILD = r'''
_VC = None


def _arch_config():
    p = PARAMS
    if not p["convertor"]:
        return None
    conv = instance(p["convertor"], hf_config=config, hf_text_config=config.get_text_config(),
                    revision=None)
    return Watched("model_arch_config", head_size=conv.get_head_size(),
                   total_num_kv_heads=conv.get_total_num_kv_heads(),
                   is_deepseek_mla=conv.is_deepseek_mla())


_MC_ATTRS = None


def model_config_attrs():
    global _MC_ATTRS
    if _MC_ATTRS is not None:
        return _MC_ATTRS
    p = PARAMS
    attrs = dict(hf_config=config, hf_text_config=config.get_text_config(),
                 dtype=getattr(torch, p["dtype"]), _architecture=p["arch"], architecture=p["arch"],
                 max_model_len=p["max_model_len"], max_seq_len_to_capture=p["max_model_len"],
                 using_transformers_backend=lambda: False, enforce_eager=False,
                 config_updated=False, _model_info=ModelInfo(**p["model_info"]))
    # ModelConfig's interface properties (is_hybrid, supports_mamba_prefix_caching, ...) only
    # forward to _model_info; where the slice does not hold one, the instance answers it
    for flag, value in p["model_info"].items():
        attrs.setdefault(flag, value)
    arch_config = _arch_config()
    if arch_config is not None:
        attrs["model_arch_config"] = arch_config
    _MC_ATTRS = attrs
    return attrs


def vc():
    global _VC
    if _VC is None:
        p = PARAMS
        spec = None
        if p["num_speculative_tokens"]:
            spec = Watched("speculative_config", num_speculative_tokens=p["num_speculative_tokens"],
                           method=p["spec_method"], kv_cache_dtype=None)
        _VC = Watched(
            "vllm_config",
            model_config=instance(p["model_config_cls"], **model_config_attrs()),
            cache_config=Watched("cache_config", **p["cache"]),
            parallel_config=Watched("parallel_config", **p["parallel"]),
            scheduler_config=Watched("scheduler_config", **p["scheduler"]),
            compilation_config=Watched("compilation_config", cudagraph_mode=None),
            attention_config=Watched("attention_config", backend=None),
            speculative_config=spec,
            num_speculative_tokens=p["num_speculative_tokens"],
            additional_config={},
        )
    return _VC


_BACKEND = None


def backend():
    global _BACKEND
    if _BACKEND is None:
        b = PARAMS["backend"]
        base = attr(b["base"])
        multiple = attr(b["multiple"]) if b["multiple"] else None
        sizes = [multiple(n) if kind == "multiple" and multiple else n for kind, n in b["sizes"]]
        _BACKEND = type(b["name"], (base,), {
            "get_supported_kernel_block_sizes": staticmethod(lambda kv_cache_spec=None: list(sizes)),
            "get_name": staticmethod(lambda: b["name"]),
            "is_ssm": staticmethod(lambda: False),
        })
        align = PARAMS["checkpoint_alignment"]
        LAYERS["MambaBase"] = {"model.layers.0.mixer": ns(get_prefill_checkpoint_alignment=lambda: align)}
        LAYERS["AttentionLayerBase"] = {"model.layers.1.attn": ns(get_attn_backend=lambda: _BACKEND)}
    return _BACKEND
'''


#: the ModelConfig fields the child sets (mirrored onto the instances the calls build)
_MC_KEYS = ("hf_config", "hf_text_config", "dtype", "_architecture", "architecture",
            "max_model_len", "max_seq_len_to_capture", "using_transformers_backend",
            "enforce_eager", "config_updated", "_model_info")


def _architecture(cfg: dict[str, Any]) -> str:
    """vLLM picks the model class by ``architectures[0]`` (of the text config for wrappers)."""
    for scope in (cfg, cfg.get("text_config") or {}):
        archs = scope.get("architectures")
        if isinstance(archs, list) and archs and isinstance(archs[0], str):
            return archs[0]
    raise ReconError("the model config has no architectures list: vLLM picks the model class by it")


def _align_function(ctx: RecipeContext) -> str:
    """The alignment, found by its two log messages (its qualname moves between releases)."""
    padders = set(ctx.functions_with_text(LOG_PAD))
    found = [q for q in ctx.functions_with_text(LOG_BLOCK) if q in padders and (
        q.startswith("vllm.platforms.interface:") or q.startswith(MODEL_HOOKS + ":"))]
    if not found:
        others = ctx.functions_with_text(LOG_BLOCK)
        raise NotApplicable("no function logs 'Setting attention block size to' (the hybrid "
                            "attention/mamba page alignment)"
                            + (f"; only platform-specific copies: {', '.join(others)}" if others else ""))
    return found[0]


def _kernel_sizes(ctx: RecipeContext, backend_name: str) -> tuple[list[list[Any]], str]:
    """The assumed backend's kernel block sizes and where they come from."""
    multiple = opt_int(ctx.options, "kernel_block_multiple")
    exact = opt_ints(ctx.options, "kernel_block_sizes")
    if multiple is not None:
        return [["multiple", multiple]], f"--set kernel_block_multiple={multiple}"
    if exact:
        return [["exact", n] for n in exact], f"--set kernel_block_sizes={exact}"
    for qual in ctx.index.functions:
        if not qual.endswith(".get_name"):
            continue
        src = ctx.index.source(qual)
        if f'return "{backend_name}"' not in src and f"return '{backend_name}'" not in src:
            continue
        owner = qual.rsplit(".", 1)[0]
        sizes_fn = find_method(ctx, owner, "get_supported_kernel_block_sizes")
        if sizes_fn is None:
            continue
        fn = ctx.index.function_ast(sizes_fn)
        ret = fn.body[-1] if fn is not None and fn.body else None
        if isinstance(ret, ast.Return) and isinstance(ret.value, ast.List):
            out: list[list[Any]] = []
            for elt in ret.value.elts:
                if isinstance(elt, ast.Constant) and isinstance(elt.value, int):
                    out.append(["exact", elt.value])
                elif isinstance(elt, ast.Call) and getattr(elt.func, "id", "") == "MultipleOf" \
                        and elt.args and isinstance(elt.args[0], ast.Constant):
                    out.append(["multiple", elt.args[0].value])
            if out:
                info = ctx.index.functions[sizes_fn]
                return out, f"{backend_name} default branch of {info.name} ({info.path}:{ret.lineno})"
    raise ReconError(f"cannot read the kernel block sizes of attention backend {backend_name} from "
                     f"this release; give them with --set kernel_block_sizes=[16] or "
                     f"--set kernel_block_multiple=16")


def _hook_for(ctx: RecipeContext, arch: str) -> str | None:
    """The architecture's ``MODELS_CONFIG_MAP`` hook (it may change cache dtypes first)."""
    table = module_dict(ctx, MODEL_HOOKS, "MODELS_CONFIG_MAP") or {}
    node = table.get(arch)
    if node is None:
        return None
    if isinstance(node, ast.Tuple) and len(node.elts) == 1:
        node = node.elts[0]
    name = node.id if isinstance(node, ast.Name) else None
    if name is None:
        return None
    return find_method(ctx, f"{MODEL_HOOKS}:{name}", "verify_and_update_config")


def _convertor_for(ctx: RecipeContext, cfg: dict[str, Any]) -> str | None:
    """The architecture convertor the release picks by ``model_type`` (0.2x on), else None."""
    if CONVERTORS not in ctx.index.modules:
        return None
    table = module_dict(ctx, CONVERTORS, "MODEL_ARCH_CONFIG_CONVERTORS") or {}
    node = table.get(str(cfg.get("model_type")))
    name = node.id if isinstance(node, ast.Name) else "ModelArchConfigConvertorBase"
    qual = f"{CONVERTORS}:{name}"
    return qual if qual in ctx.index.classes else None


def _model_config_class(ctx: RecipeContext) -> str:
    """``ModelConfig`` moved from ``vllm.config`` to ``vllm.config.model``: find it by method."""
    found = [q.rsplit(".", 1)[0] for q in functions_named(ctx, "ModelConfig.get_num_kv_heads")]
    if not found:
        raise NotApplicable("no ModelConfig.get_num_kv_heads in this release")
    return found[0]


def _info_properties(ctx: RecipeContext, mc_cls: str) -> list[str]:
    """ModelConfig properties that only forward to ``self._model_info.<flag>``."""
    out = []
    for name, fn in ctx.index.methods_of(mc_cls).items():
        if fn.kind == "property" and re.search(rf"return self\._model_info\.{name}\b",
                                               ctx.index.source(fn.qualname)):
            out.append(name)
    return out


def _model_config_methods(ctx: RecipeContext, mc_cls: str, functions: list[str]) -> list[str]:
    """ModelConfig methods the given functions call on ``model_config`` (to slice them too).

    The slicer cannot know that ``vllm_config.model_config`` is a ModelConfig, so methods
    called on it (``get_mamba_chunk_size()`` ...) are named as extra targets.
    """
    names: list[str] = []
    for q in functions:
        for name in re.findall(r"model_config\.(\w+)\(", ctx.index.source(q)):
            fn = find_method(ctx, mc_cls, name)
            if fn is not None and ctx.index.functions[fn].kind == "method" and name not in names:
                names.append(name)
    return names


def _default_block_size(ctx: RecipeContext) -> int | None:
    """``CacheConfig.DEFAULT_BLOCK_SIZE`` when the release has one (None: unset until aligned)."""
    for qual in ctx.index.classes:
        if qual.endswith(":CacheConfig"):
            value = class_constant(ctx, qual, "DEFAULT_BLOCK_SIZE")
            if isinstance(value, int):
                return value
    return None


def _follow_delegation(ctx: RecipeContext, model_cls: str) -> tuple[str, str | None]:
    """The class whose mamba-state functions really run, and a note when it is not ``model_cls``.

    Multimodal wrappers forward verbatim (``from .model import X; return X.f(vllm_config)``)
    to their text model. Running the wrapper would slice the whole text model (the slicer's
    budget is spent on its ``__init__``/``forward``), so when *both* functions are such
    one-statement forwards to the same class, recon runs that class's functions instead:
    the same code, proven by the AST.
    """
    targets = set()
    for name in ("get_mamba_state_shape_from_config", "get_mamba_state_dtype_from_config"):
        qual = find_method(ctx, model_cls, name)
        fn = ctx.index.function_ast(qual) if qual else None
        if fn is None:
            return model_cls, None
        body = [b for b in fn.body if not (isinstance(b, ast.Expr)
                                           and isinstance(b.value, ast.Constant))]
        imports = [b for b in body if isinstance(b, ast.ImportFrom)]
        rest = [b for b in body if not isinstance(b, ast.ImportFrom)]
        if len(rest) != 1 or not isinstance(rest[0], ast.Return):
            return model_cls, None
        call = rest[0].value
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr == name and isinstance(call.func.value, ast.Name)
                and [a.id for a in call.args if isinstance(a, ast.Name)] == ["vllm_config"]
                and len(call.args) == 1 and not call.keywords):
            return model_cls, None
        cls_name = call.func.value.id
        module = ctx.index.functions[qual].module
        source = None
        for imp in imports:
            if any((a.asname or a.name) == cls_name for a in imp.names):
                base = module.split(".")
                base = base[: len(base) - imp.level] if imp.level else []
                source = ".".join(base + ([imp.module] if imp.module else []))
        if source is None:
            return model_cls, None
        targets.add(registry_class(ctx, source, cls_name))
    if len(targets) != 1:
        return model_cls, None
    target = targets.pop()
    if target == model_cls or target not in ctx.index.classes:
        return model_cls, None
    return target, (f"{model_cls.rpartition(':')[2]}'s mamba-state functions forward verbatim to "
                    f"{target}; recon runs those (same code, smaller slice)")


def _gpu(ctx: RecipeContext) -> int:
    """``--set gpu=sm90`` (default: Hopper) -> 90."""
    raw = str(ctx.options.get("gpu", "sm90")).lower().removeprefix("sm").replace(".", "")
    if not raw.isdigit():
        raise ReconError(f"--set gpu: expected a CUDA compute capability such as sm80, sm90, "
                         f"sm100, got {ctx.options.get('gpu')!r}")
    return int(raw)


def _section_defaults(ctx: RecipeContext, class_name: str) -> dict[str, Any]:
    """The release's literal field defaults of ``vllm.config``'s ``class_name`` (JSON-able only)."""
    for qual in sorted(ctx.index.classes):
        if qual.startswith("vllm.config") and qual.endswith(f":{class_name}"):
            out = {}
            for key, value in class_defaults(ctx, qual).items():
                try:
                    json.dumps(value)
                except (TypeError, ValueError):
                    continue
                out[key] = value
            return out
    return {}


def _spec(ctx: RecipeContext) -> tuple[int, str | None]:
    """Speculative tokens enlarge conv states (``num_spec``), so they are an input."""
    spec = ctx.flags.get("speculative_config") or {}
    k = spec.get("num_speculative_tokens", ctx.flags.get("num_speculative_tokens"))
    return (int(k) if k else 0), spec.get("method")


def run_engine(ctx: RecipeContext) -> RecipeResult:
    """Engine mode: the release's own config, layers and ``update_block_size_for_backend``."""
    facts, said = engine_facts(ctx)
    res = engine_result(NAME, ctx, facts, said, PAGE_KEYS)
    if not facts.facts.get("is_hybrid"):
        res.findings.insert(0, Finding("info", "not a hybrid attention/mamba model: the block "
                                       "size is the attention backend's, nothing is padded"))
    return res


#: what this recipe shows of the release's answer (identifiers of ``--json``)
PAGE_KEYS = ("attention_block_size", "attention_block_size_logged", "mamba_padding_pct",
             "mamba_cache_mode", "mamba_block_size", "mamba_page_size_padded",
             "enable_prefix_caching", "kv_cache_dtype", "mamba_ssm_cache_dtype",
             "tensor_parallel_size", "attention_backends", "block_size_stage")


def run(ctx: RecipeContext) -> RecipeResult:
    """Engine mode by default; ``--set mode=slice`` for recon's own reading of the flags."""
    if str(ctx.options.get("mode", "engine")) == "slice":
        return run_sliced(ctx)
    return run_engine(ctx)


@dataclass
class _Model:
    """What the release's registry and index say about the model, before any flag is read."""

    arch: str
    align: str  # the alignment function, found by its log messages
    align_name: str
    platform_style: bool  # ``Platform._align_hybrid_block_size(vllm_config, backend_cls)``
    model_cls: str
    mc_cls: str  # ModelConfig's qualname
    model_info: dict[str, Any]
    hybrid: bool


@dataclass
class _Inputs:
    """The flags and ``--set`` assumptions of one run, and the PARAMS the child reads."""

    state_cls: str  # the class whose mamba-state functions run (after delegation)
    delegation_note: str | None
    dtype: str
    dtype_note: str | None
    tp: Any
    prefix: bool
    user_block: Any
    default_block: int | None
    block: Any
    k: int
    spec_method: str | None
    backend_name: str
    gpu: int
    sizes: list[list[Any]]
    sizes_from: str
    base: str | None  # AttentionBackend, the base of the assumed backend
    multiple: str | None  # MultipleOf
    convertor: str | None
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Calls:
    """The child's calls in the engine's order, and where their answers are."""

    calls: list[Call]
    hooks: list[str]
    extra_targets: set[str]  # in the slice only: their answers and errors are not reported
    first_shape_call: int


@dataclass
class _ReadBack:
    """What the run left: the cache section as the release wrote it, the locals, the logs."""

    results: list[RunResult]
    events: list[dict[str, Any]]
    cache: dict[str, Any]
    local_vals: dict[str, Any]
    logs: list[str]


def run_sliced(ctx: RecipeContext) -> RecipeResult:
    """Run the hooks, the mamba-state functions and the alignment in one child; read back."""
    cfg = ctx.require_config()
    model = _model(ctx, cfg)
    res = RecipeResult(NAME, ctx.snapshot.name, ctx.release)
    res.values["architecture"] = model.arch
    res.values["model class"] = model.model_cls
    res.values["hybrid attention/mamba model"] = model.hybrid
    if not model.hybrid:
        res.findings.append(Finding("info", f"{model.arch} ({model.model_cls}) is not a hybrid "
                                            "attention/mamba model in this release (no IsHybrid "
                                            "in its bases): vLLM does not align its block size, "
                                            "so no 'Setting attention block size' / 'Padding "
                                            "mamba page size' lines."))
        return res
    inp = _inputs(ctx, cfg, model)
    if inp.delegation_note:
        res.values["mamba-state functions run from"] = inp.state_cls
    plan = _build_calls(ctx, model, inp)
    rb = _read_back(plan, _run_child(ctx, cfg, inp, plan), inp.params)
    _values(res, model, inp, plan, rb)
    _tables(res, model, inp, rb)
    _findings(res, inp, rb)
    res.provenance = provenance_of(ctx, [model.align] + plan.hooks + [
        q for q in (find_method(ctx, inp.state_cls, "get_mamba_state_shape_from_config"),
                    find_method(ctx, inp.state_cls, "get_mamba_state_dtype_from_config")) if q]
        + [f"{model.mc_cls}.get_num_kv_heads", f"{model.mc_cls}.get_head_size"])
    _notes(res, model, inp, rb)
    return res


def _model(ctx: RecipeContext, cfg: dict[str, Any]) -> _Model:
    """The alignment function, the model class and what the registry derives from it."""
    arch = _architecture(cfg)
    align = _align_function(ctx)
    align_info = ctx.index.functions[align]
    platform_style = any(p.name == "backend_cls" for p in align_info.params)
    model_cls = registry_model_class(ctx, arch)
    if model_cls is None or model_cls not in ctx.index.classes:
        raise NotApplicable(f"the release's model registry has no architecture {arch}")
    bases = mro(ctx, model_cls)
    hybrid = any(q.endswith(":IsHybrid") for q in bases)
    # what the release's registry derives from the class's interfaces (_ModelInfo)
    model_info: dict[str, Any] = {**class_flags(ctx, model_cls), "is_hybrid": hybrid,
                                  "architecture": model_cls.rpartition(":")[2]}
    mc_cls = _model_config_class(ctx)
    for name in _info_properties(ctx, mc_cls):
        model_info.setdefault(name, False)  # the registry's getattr(model, flag, False)
    return _Model(arch=arch, align=align, align_name=align_info.name,
                  platform_style=platform_style, model_cls=model_cls, mc_cls=mc_cls,
                  model_info=model_info, hybrid=hybrid)


def _inputs(ctx: RecipeContext, cfg: dict[str, Any], model: _Model) -> _Inputs:
    """The flags and assumptions a hybrid model's run stands on (errors in reading order)."""
    state_cls, delegation_note = _follow_delegation(ctx, model.model_cls)
    dtype, dtype_note = model_dtype(ctx.flags.get("dtype"), cfg)
    user_block = ctx.flags.get("block_size")
    default_block = _default_block_size(ctx)
    k, spec_method = _spec(ctx)
    kv_dtype = str(ctx.flags.get("kv_cache_dtype") or "auto")
    # vLLM serves TurboQuant KV caches with its TURBOQUANT backend
    backend_name = str(ctx.options.get("attention_backend", "TURBOQUANT" if
                                       kv_dtype.startswith("turboquant_") else "FLASH_ATTN"))
    gpu = _gpu(ctx)
    sizes, sizes_from = _kernel_sizes(ctx, backend_name) if model.platform_style else ([], "")
    base = next((q for q in ctx.index.classes if q.endswith(":AttentionBackend")
                 and find_method(ctx, q, "get_supported_kernel_block_sizes")), None)
    multiple = next((q for q in ctx.index.classes if q.endswith(":MultipleOf")), None)
    if model.platform_style and base is None:
        raise NotApplicable("no AttentionBackend.get_supported_kernel_block_sizes in this release")
    inp = _Inputs(state_cls=state_cls, delegation_note=delegation_note, dtype=dtype,
                  dtype_note=dtype_note, tp=ctx.flags.get("tensor_parallel_size") or 1,
                  prefix=bool(ctx.flags.get("enable_prefix_caching", False)),
                  user_block=user_block, default_block=default_block,
                  block=user_block if user_block is not None else default_block, k=k,
                  spec_method=spec_method, backend_name=backend_name, gpu=gpu, sizes=sizes,
                  sizes_from=sizes_from, base=base, multiple=multiple,
                  convertor=_convertor_for(ctx, cfg))
    inp.params = _params(ctx, cfg, model, inp)
    return inp


def _params(ctx: RecipeContext, cfg: dict[str, Any], model: _Model,
            inp: _Inputs) -> dict[str, Any]:
    """The child's PARAMS: the modelled VllmConfig sections and the assumed backend."""
    cache_defaults = _section_defaults(ctx, "CacheConfig")
    params: dict[str, Any] = {
        "arch": model.arch, "dtype": inp.dtype, "model_info": model.model_info,
        "model_cls": inp.state_cls, "model_config_cls": model.mc_cls,
        "convertor": inp.convertor, "max_model_len": ctx.flags.get("max_model_len")
        or cfg.get("max_position_embeddings") or 8192,
        "num_speculative_tokens": inp.k, "spec_method": inp.spec_method,
        "checkpoint_alignment": opt_int(ctx.options, "mamba_checkpoint_alignment"),
        "gpu": inp.gpu,
        "cache": {
            **cache_defaults,
            "block_size": inp.block, "user_specified_mamba_block_size":
            ctx.flags.get("mamba_block_size") is not None,
            "user_specified_block_size": inp.user_block is not None,
            "cache_dtype": ctx.flags.get("kv_cache_dtype") or "auto",
            "enable_prefix_caching": inp.prefix,
            "mamba_cache_mode": ctx.flags.get("mamba_cache_mode") or "none",
            "mamba_block_size": ctx.flags.get("mamba_block_size"),
            "mamba_page_size_padded": None,
            "mamba_cache_dtype": ctx.flags.get("mamba_cache_dtype") or "auto",
            "mamba_ssm_cache_dtype": ctx.flags.get("mamba_ssm_cache_dtype") or "auto",
            "kv_cache_dtype_skip_layers": [], "use_replayssm": False, "prefix_match_unit": None,
        },
        "parallel": {**_section_defaults(ctx, "ParallelConfig"), "tensor_parallel_size": inp.tp,
                     "pipeline_parallel_size": ctx.flags.get("pipeline_parallel_size") or 1,
                     "decode_context_parallel_size": 1, "data_parallel_size": 1},
        "scheduler": {**_section_defaults(ctx, "SchedulerConfig"), "enable_chunked_prefill": True,
                      "max_num_batched_tokens": ctx.flags.get("max_num_batched_tokens") or 8192,
                      "max_num_seqs": ctx.flags.get("max_num_seqs") or 256},
        "backend": {"base": inp.base, "multiple": inp.multiple, "name": inp.backend_name,
                    "sizes": inp.sizes},
    }
    if cache_defaults and "mamba_cache_mode" not in cache_defaults:
        del params["cache"]["mamba_cache_mode"]  # the release has no such field
    return params


def _build_calls(ctx: RecipeContext, model: _Model, inp: _Inputs) -> _Calls:
    """The calls in the engine's order: geometry, hooks, mamba-state functions, alignment."""
    mc_cls, convertor = model.mc_cls, inp.convertor
    vc = Py("vc()")
    calls: list[Call] = []
    if convertor:
        conv_self = {"hf_config": Py("config"), "hf_text_config": Py("config.get_text_config()"),
                     "revision": None}
        calls += [Call(f"{convertor}.{m}", self_attrs=conv_self)
                  for m in ("get_head_size", "get_total_num_kv_heads", "is_deepseek_mla")]
    mc_attrs = {name: Py(f"model_config_attrs()[{name!r}]") for name in _MC_KEYS
                + (("model_arch_config",) if convertor else ())}
    calls.append(Call(f"{mc_cls}.get_num_kv_heads", self_attrs=mc_attrs,
                      args={"parallel_config": Py("vc().parallel_config")}))
    calls.append(Call(f"{mc_cls}.get_head_size", self_attrs=mc_attrs))
    # the engine's order: the architecture's MODELS_CONFIG_MAP hook, the hybrid hook (which
    # is the alignment itself up to vLLM 0.23), then the platform's alignment (0.24 on)
    hooks = [h for h in (_hook_for(ctx, model.arch),
                         find_method(ctx, f"{MODEL_HOOKS}:HybridAttentionMambaModelConfig",
                                     "verify_and_update_config")) if h and h != model.align]
    # targets only so that the slice holds them (their answers are not reported)
    extra = [Call(f"{mc_cls}.{m}", self_attrs=mc_attrs)
             for m in _model_config_methods(ctx, mc_cls, hooks + [model.align])
             if m not in ("get_num_kv_heads", "get_head_size")]
    if model.platform_style:
        extra.append(Call(f"{inp.base}.get_supported_kernel_block_sizes"))
    calls += extra
    calls += [Call(h, args={"vllm_config": vc}) for h in hooks]
    first_shape_call = len(calls)
    calls += [Call(f"{inp.state_cls}.{m}", args={"vllm_config": vc})
              for m in ("get_mamba_state_shape_from_config", "get_mamba_state_dtype_from_config")]
    watch = Py(f"watch_locals({model.align_name!r}, vc())")
    align_args: dict[str, Any] = {"vllm_config": watch}
    if model.platform_style:
        align_args["backend_cls"] = Py("backend()")
    calls.append(Call(model.align, args=align_args))
    return _Calls(calls=calls, hooks=hooks, extra_targets={c.target for c in extra},
                  first_shape_call=first_shape_call)


def _run_child(ctx: RecipeContext, cfg: dict[str, Any], inp: _Inputs,
               plan: _Calls) -> list[RunResult]:
    """One sandboxed child with real torch; any reported call that raised is an error."""
    stubs = {"get_layers_from_vllm_config": "layers_of",
             "ModelRegistry": "ns(resolve_model_cls=lambda arch, model_config=None: "
                              "(attr(PARAMS['model_cls']), arch), "
                              "_normalize_arch=lambda arch, model_config=None: arch)",
             "set_current_vllm_config": "NullContext",
             "current_platform": "AssumedCudaGPU(PARAMS['gpu'])"}
    with child_helpers(inp.params, _CHILD) as helpers:
        try:
            results = run_calls(ctx.snapshot, plan.calls, config=cfg, stubs=stubs,
                                stub_file=helpers, real=["torch"], timeout=120)
        except RunFailed as err:
            raise RunFailed(f"{NAME}: {err}", results=err.results, detail=err.detail) from err  # its exit code
    for c, r in zip(plan.calls, results, strict=True):
        if r.error is not None and c.target not in plan.extra_targets:
            raise ReconError(f"{NAME}: {r.target} raised {r.error.line()}")
    return results


def _read_back(plan: _Calls, results: list[RunResult], params: dict[str, Any]) -> _ReadBack:
    """The alignment's events: config writes applied to the cache section, locals, logs."""
    events = child_events(results[-1].stdout)
    cache = dict(params["cache"])
    for ev in events:
        if ev["kind"] == "set" and ev["obj"] == "cache_config":
            cache[ev["attr"]] = ev["value"]
    local_vals: dict[str, Any] = next((ev["values"] for ev in events if ev["kind"] == "locals"), {})
    logs = [ev["message"] for ev in events if ev["kind"] == "log"]
    return _ReadBack(results=results, events=events, cache=cache, local_vals=local_vals,
                     logs=logs)


def _values(res: RecipeResult, model: _Model, inp: _Inputs, plan: _Calls,
            rb: _ReadBack) -> None:
    """Block size, page sizes and padding as the release computed them, then the geometry."""
    cache, local_vals, results = rb.cache, rb.local_vals, rb.results
    by_target = {c.target: r for c, r in zip(plan.calls, results, strict=True)}
    v = res.values
    v["attention block size (tokens)"] = cache["block_size"]
    if "mamba_page_size" in local_vals:
        v["mamba page size (bytes)"] = local_vals["mamba_page_size"]
    if "attn_page_size_1_token" in local_vals:
        v["attention page per token (bytes)"] = local_vals["attn_page_size_1_token"]
    if "attn_page_size" in local_vals:
        v["attention page size (bytes)"] = local_vals["attn_page_size"]
    padded = cache.get("mamba_page_size_padded")
    if padded is not None:
        v["mamba page padded to (bytes)"] = padded
    if "mamba_padding_pct" in local_vals:
        v["mamba padding"] = f"{local_vals['mamba_padding_pct']:.2f}%"
    elif "attn_page_size" in local_vals and local_vals.get("attn_page_size") == \
            local_vals.get("mamba_page_size"):
        v["mamba padding"] = "0.00% (pages already equal)"
    for key in ("kernel_block_alignment_size", "backend_block_alignment"):
        if key in local_vals:
            v[key.replace("_", " ")] = local_vals[key]
    if "mamba_cache_mode" in cache:
        v["mamba cache mode"] = cache["mamba_cache_mode"]
    v["mamba block size"] = cache.get("mamba_block_size")
    v["mamba state shapes (per GPU)"] = results[plan.first_shape_call].value
    v["mamba state dtypes"] = results[plan.first_shape_call + 1].value
    v["KV heads per GPU"] = by_target[f"{model.mc_cls}.get_num_kv_heads"].value
    v["head size"] = by_target[f"{model.mc_cls}.get_head_size"].value
    if cache.get("mamba_ssm_cache_dtype") != inp.params["cache"]["mamba_ssm_cache_dtype"]:
        v["mamba ssm cache dtype (set by the release)"] = cache["mamba_ssm_cache_dtype"]


def _tables(res: RecipeResult, model: _Model, inp: _Inputs, rb: _ReadBack) -> None:
    """The inputs used, what the release wrote into the config, and the alignment's locals."""
    res.inputs = {"dtype": inp.dtype, "kv_cache_dtype": inp.params["cache"]["cache_dtype"],
                  "tensor_parallel_size": inp.tp, "enable_prefix_caching": inp.prefix,
                  "block_size (before alignment)": inp.block, "num_speculative_tokens": inp.k}
    writes = [[ev["obj"], ev["attr"], ev["value"]] for ev in rb.events if ev["kind"] == "set"]
    if writes:
        res.tables.append(Table("what the release wrote into the config", ["section", "field",
                                                                          "value"], writes))
    if rb.local_vals:
        res.tables.append(Table(f"locals of {model.align_name} at return", ["name", "value"],
                                [[k2, val] for k2, val in rb.local_vals.items()
                                 if not k2.startswith("_")]))


def _findings(res: RecipeResult, inp: _Inputs, rb: _ReadBack) -> None:
    """Overridden block size, shared pool, heavy padding, align mode and the release's logs."""
    cache, local_vals = rb.cache, rb.local_vals
    padded = cache.get("mamba_page_size_padded")
    if inp.user_block is not None and cache["block_size"] != inp.user_block:
        res.findings.append(Finding("info", f"--block-size {inp.user_block} is overridden: the "
                                            f"release raises it to {cache['block_size']} tokens"))
    attn_page = local_vals.get("attn_page_size")
    if attn_page is not None and (padded == attn_page or attn_page == local_vals.get("mamba_page_size")):
        res.findings.append(Finding("ok", f"attention page {attn_page} bytes == (padded) mamba page: "
                                          "the two layer types share one block pool"))
    pct = local_vals.get("mamba_padding_pct")
    if isinstance(pct, (int, float)) and pct > 50:
        res.findings.append(Finding("warn", f"{pct:.2f}% of each mamba page is padding: every mamba "
                                            "state takes a full attention page of KV pool"))
    if cache.get("mamba_cache_mode") == "align":
        res.findings.append(Finding("info", f"align mode: mamba_block_size = {cache.get('mamba_block_size')} "
                                            "tokens, the divisor of the running-state column "
                                            "(see vllm-mamba-align-column)"))
    res.findings += [Finding("info", f"the release logged: {m}") for m in rb.logs]
    if not rb.logs:
        res.findings.append(Finding("info", "the release logged nothing: pages already aligned"))


def _notes(res: RecipeResult, model: _Model, inp: _Inputs, rb: _ReadBack) -> None:
    """The assumptions the answer stands on: GPU, backend, checkpoints, block size, stubs."""
    res.notes.append(f"GPU assumed: CUDA sm{inp.gpu} (what current_platform answers; --set "
                     "gpu=sm80 for A100, sm100 for B200)")
    if model.platform_style:
        shown = [f"MultipleOf({n})" if kind == "multiple" else n for kind, n in inp.sizes]
        res.notes.append(f"attention backend assumed: {inp.backend_name}, kernel block sizes "
                         f"{shown} from {inp.sizes_from}")
        alignment = inp.params["checkpoint_alignment"]
        res.notes.append("mamba layers export prefill checkpoints every "
                         f"{alignment} tokens" if alignment
                         else "mamba layers assumed not to export in-prefill checkpoints (Triton "
                              "GDN prefill); --set mamba_checkpoint_alignment=N for FlashInfer's")
    if inp.user_block is None:
        res.notes.append("block size before alignment: the release's CacheConfig default "
                         + (f"({inp.default_block})" if inp.default_block is not None else
                            "(unset: the alignment picks it)"))
    if inp.dtype_note:
        res.notes.append(inp.dtype_note)
    if inp.delegation_note:
        res.notes.append(inp.delegation_note)
    assumptions = {a["what"] + " at " + a["site"] for r in rb.results for a in r.assumptions}
    res.notes += sorted(f"stub assumption: {a}" for a in assumptions)


def summary(res: RecipeResult) -> str | None:
    """The attention block size the release settles on and how much of a mamba page is padding."""
    v = res.values
    block = value_of(res, "attention_block_size", "attention block size (tokens)")
    if block is None:
        return None
    hybrid = v.get("hybrid attention/mamba model")
    if hybrid is None:
        hybrid = any(k in v for k in ("mamba_padding_pct", "mamba_page_size_padded",
                                      "mamba padding"))
    if not hybrid:
        return (f"Not a hybrid attention/mamba model: the attention block size is {block} tokens "
                "(the attention backend's) and nothing is padded.")
    pct = value_of(res, "mamba_padding_pct", "mamba padding")
    padded = f"{pct:.2f}%" if isinstance(pct, (int, float)) else str(pct or "0%").split(" ")[0]
    out = (f"The attention block size is {block} tokens and each mamba page is padded by "
           f"{padded}, so attention and mamba pages share one block pool")
    mode = value_of(res, "mamba_cache_mode", "mamba cache mode")
    if mode == "align":
        out += (f"; align mode: the mamba block size is "
                f"{value_of(res, 'mamba_block_size', 'mamba block size')} tokens")
    return out + "."


register(Recipe(
    name=NAME,
    engine="vllm",
    title="Attention block size, mamba/attention page sizes and mamba padding of a hybrid model",
    why=("vLLM silently raises the attention block size of hybrid attention/mamba models "
         "(Qwen3-Next, Nemotron-H, Jamba, ...) and pads the mamba page; the block size then "
         "drives prefix caching and align-mode state columns, and a user who assumed 16 "
         "indexes the wrong state column."),
    reads_flags=["dtype", "kv_cache_dtype", "mamba_cache_dtype", "mamba_ssm_cache_dtype",
                 "block_size", "tensor_parallel_size", "enable_prefix_caching",
                 "mamba_cache_mode", "speculative_config", "max_model_len"],
    reads_config=["architectures", "model_type", "torch_dtype", "num_key_value_heads", "head_dim",
                  "(the model class's mamba state keys)"],
    run=run,
    engine_mode=True,
    example="--config example:qwen3-next-80b-a3b-instruct "
            "--flags 'vllm serve Qwen/Qwen3-Next-80B-A3B-Instruct --tensor-parallel-size 4'",
    demos=[
        ("qwen3-next-80b-a3b-instruct.json",
         "vllm serve Qwen/Qwen3-Next-80B-A3B-Instruct --tensor-parallel-size 4"),
        ("nemotron-h-8b-base-8k.json",
         "vllm serve nvidia/Nemotron-H-8B-Base-8K --enable-prefix-caching"),
        ("jamba-1.5-mini.json", "vllm serve ai21labs/AI21-Jamba-1.5-Mini --tensor-parallel-size 2"),
    ],
    needs=("torch",),
    summarize=summary,
))
