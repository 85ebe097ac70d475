"""The sandboxed side of SGLang's memory pools and CUDA graph batch sizes.

Loaded by path by :mod:`recon.engine.sglang_child` after the release has
resolved its ``ServerArgs``; standard library only (the release and its
environment provide the rest). For each declared memory figure it runs the
release's own start-up sizing, in the order its scheduler process does:

1. ``runtime_context.publish(server_args, role="scheduler", ranks=...)``: the
   config bags every sizing function reads (rank 0 of the declared widths);
2. ``ModelConfig.from_server_args``: the model config, from the user's
   ``config.json``;
3. the runner's own steps that feed the pools: ``init_spec_aux_hidden_state``,
   ``resolve_layer_indices``, ``resolve_sliding_window_size``,
   ``configure_kv_cache_dtype``, ``init_kv_cache_configurator``;
4. ``KVCacheConfigurator.configure``: the KV byte budget from free memory, the
   mamba state pool, ``max_running_requests``, and the pools themselves, built
   on the meta device (no memory), whose constructors print the engine's own
   ``KV Cache is allocated`` and ``Mamba Cache is allocated`` lines. Where a
   pool's constructor needs a GPU kernel (the KV copy warm-up of speculative
   decoding), the sizing alone runs (``_resolve_memory_pool_config``), and that
   is said;
5. ``get_batch_sizes_to_capture``: the decode CUDA graph batch sizes, as the
   runner's own start-up sizing asks (``decode_num_tokens_per_req``,
   ``decode_graph_gather_requirements``), for the request pool just built.

What is replaced, and listed in the answer: the runner is made without its
``__init__`` (which loads weights onto a GPU), with the attributes its
``__init__`` sets from the record; the model itself is absent (``None``), so
the release's ``getattr(model, ...)`` reads take their no-model answers, and
the cases where the built model would decide (pipeline stages, a model's own
sliding window, a checkpoint's KV cache quantization) are refused;
``get_available_gpu_memory`` and the runner's pre-load measurement answer the
declared figures; the pools' device is ``meta``; the process groups nothing
built are one-rank stand-ins.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
import types
from typing import Any


class Lacking(Exception):
    """The release lacks what this stage runs, or the model itself would decide (the message)."""


class NoWork:
    """A stream, event or device call of the meta device: nothing runs here."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args

    def __getattr__(self, item: str) -> Any:
        return lambda *a, **k: NoWork()

    def __enter__(self) -> NoWork:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


class OneRank:
    """Rank 0's view of a process group of ``world_size`` ranks (no communication)."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.rank_in_group = 0
        self.is_first_rank = True
        self.is_last_rank = world_size == 1
        self.cpu_group = None
        self.device_group = None


def meta_device_module() -> str:
    """``torch.get_device_module("meta")``: pools ask their device for streams; none run here."""
    import torch  # the installed CPU torch

    module = types.ModuleType("torch.meta")
    module.__getattr__ = lambda name: (lambda *a, **k: NoWork())  # type: ignore[method-assign]
    torch.meta = module  # type: ignore[attr-defined]
    return "torch.meta (streams and device calls of the pools' meta device: no-ops)"


def answer_free_memory(figures: dict[str, float]) -> list[str]:
    """The release's ``get_available_gpu_memory`` answers ``figures["now"]`` wherever it is bound.

    The release imports the function by name into many modules: the original in
    ``sglang.srt.utils.common`` is replaced first (modules imported later bind
    the answer), then every binding already made. The sizing, the pools' log
    lines and the "Memory pool end" line all read the declared figure.
    """
    common = importlib.import_module("sglang.srt.utils.common")
    original = getattr(common, "get_available_gpu_memory", None)
    if original is None:
        raise Lacking("this release has no sglang.srt.utils.common.get_available_gpu_memory")

    def available(*args: Any, **kwargs: Any) -> float:
        return float(figures["now"])

    done = []
    for name, module in list(sys.modules.items()):
        if name.startswith("sglang") and getattr(module, "get_available_gpu_memory", None) \
                is original:
            module.get_available_gpu_memory = available  # type: ignore[attr-defined]
            done.append(name)
    return done


def answer_pre_load(figures: dict[str, float]) -> str:
    """The runner's own pre-load measurement (``bootstrap.measure_pre_model_load_memory``,
    which also waits for a gated launch and reduces over the WORLD group) answers the
    declared figure."""
    bootstrap = _module("sglang.srt.distributed.bootstrap")
    _attr(bootstrap, "measure_pre_model_load_memory")

    def measured(*args: Any, **kwargs: Any) -> float:
        return float(figures["pre_load_gb"])

    bootstrap.measure_pre_model_load_memory = measured  # type: ignore[attr-defined]
    return ("sglang.srt.distributed.bootstrap.measure_pre_model_load_memory: the declared free "
            "memory before the weights")


def _module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as err:
        raise Lacking(f"this release has no {name} ({err})") from err


def _attr(module: Any, name: str) -> Any:
    value = getattr(module, name, None)
    if value is None:
        raise Lacking(f"this release has no {module.__name__}.{name}")
    return value


def sizing() -> None:
    """Refuse a release whose pool sizing is not a ``KVCacheConfigurator`` (found by looking)."""
    try:
        module = importlib.import_module("sglang.srt.mem_cache.kv_cache_configurator")
    except ImportError:
        module = None
    found = getattr(getattr(module, "KVCacheConfigurator", None), "_resolve_memory_pool_config",
                    None)
    if not callable(found):
        raise Lacking("this release has no sglang.srt.mem_cache.kv_cache_configurator."
                      "KVCacheConfigurator: it sizes its pools inside ModelRunner, from the layer "
                      "range ModelRunner.load_model sets while loading the weights onto a GPU")


def publish(server_args: Any) -> Any:
    """The scheduler process's config bags for rank 0 (the release's own ``publish``).

    The process groups a launcher would build are one-rank stand-ins of the
    declared widths: the WORLD group and each group of the release's own
    ``_WIDTH_AND_GROUP`` table that nothing wrote.
    """
    rc = _module("sglang.srt.runtime_context")
    spawn = _attr(rc, "SpawnRanks")
    _attr(rc, "publish")(server_args, role="scheduler",
                         ranks=spawn(world_rank=0, dp_rank=None, gpu_id=0))
    parallel = rc.get_parallel()
    groups = [("launch_world_size", "world_group"),
              *getattr(rc, "_WIDTH_AND_GROUP", ())]
    for width, group in groups:
        try:
            getattr(parallel, group)
        except RuntimeError:  # not written: no launcher built it here
            parallel.override_permanently(**{group: OneRank(int(getattr(parallel, width)))})
    return rc


def model_decides(server_args: Any, model_config: Any, rc: Any) -> None:
    """Refuse where the built model (absent here) would change the pools' sizes."""
    if int(rc.get_parallel().pp_size) > 1:
        raise Lacking("a pipeline stage's layer range comes from the built model "
                      "(model.start_layer/end_layer); engine mode answers --pp-size 1")
    registry = _module("sglang.srt.models.registry")
    cls, _arch = registry.ModelRegistry.resolve_model_cls(model_config.hf_config.architectures)
    if hasattr(cls, "get_attention_sliding_window_size"):
        raise Lacking(f"{cls.__name__} decides its sliding window itself "
                      "(get_attention_sliding_window_size of the built model)")
    kv_quant = kv_cache_quantization(model_config.hf_config)
    if kv_quant and str(rc.get_model().kv_cache_dtype) == "auto":
        raise Lacking(f"the checkpoint quantizes the KV cache ({json.dumps(kv_quant, default=str)}):"
                      " the built model's quant_config decides the KV dtype; give --kv-cache-dtype")
    if getattr(server_args, "lora_paths", None) or getattr(server_args, "enable_lora", False):
        raise Lacking("LoRA: the engine allocates its adapter buffers between the weights and the "
                      "pools, which engine mode does not build")


def kv_cache_quantization(hf_config: Any) -> dict[str, Any]:
    """Every ``kv_cache*`` entry of the config's quantization or compression settings, nested
    ones included (ModelOpt's ``quantization.kv_cache_quant_algo``)."""
    found: dict[str, Any] = {}

    def walk(value: Any, path: str) -> None:
        if not isinstance(value, dict):
            value = getattr(value, "__dict__", None)
            if not isinstance(value, dict):
                return
        for key, item in value.items():
            where = f"{path}.{key}"
            if "kv_cache" in str(key) and item:
                found[where] = item
            walk(item, where)

    for name in ("quantization_config", "compression_config"):
        walk(getattr(hf_config, name, None), name)
    return found


def bare_runner(server_args: Any, model_config: Any, rc: Any) -> Any:
    """A ``ModelRunner`` holding what its pool sizing reads, made without ``__init__``.

    ``__init__`` loads the weights onto a GPU; the attributes the pools read are
    set here from the same sources ``__init__`` uses (the record, the published
    bags, the model config), and the runner's own methods fill the rest.
    """
    mr = _module("sglang.srt.model_executor.model_runner")
    layers = _module("sglang.srt.model_executor.model_runner_components.layer_setup")
    load_utils = _module("sglang.srt.model_executor.model_runner_components.load_model_utils")
    spec_info = _module("sglang.srt.speculative.spec_info")
    cls = _attr(mr, "ModelRunner")
    for method in ("init_kv_cache_configurator", "configure_kv_cache_dtype",
                   "init_spec_aux_hidden_state", "init_torch_distributed"):
        if not callable(getattr(cls, method, None)):
            raise Lacking(f"this release's ModelRunner has no {method}: its pools are sized "
                          "inside ModelRunner.__init__, which needs the weights on a GPU")
    runner = object.__new__(cls)
    schedule = rc.get_schedule()
    runner.model_config = model_config
    runner.server_args = server_args
    runner.is_draft_worker = False
    runner.gpu_id = 0
    runner.draft_model_idx = None
    runner.mem_fraction_static = schedule.mem_fraction_static
    runner.device = "meta"
    resolve_draft = getattr(mr, "resolve_draft_attention_backend", None)
    runner.draft_attention_backend = (resolve_draft(draft_attention_backend=None,
                                                    is_draft_worker=False)
                                      if callable(resolve_draft) else None)
    runner.spec_algorithm = spec_info.SpeculativeAlgorithm.from_string(
        rc.get_spec().speculative_algorithm)
    runner.page_size = schedule.page_size
    runner.req_to_token_pool = None
    runner.token_to_kv_pool_allocator = None
    runner.memory_pool_config = None
    runner.is_hybrid_swa = model_config.is_hybrid_swa
    runner.is_hybrid_swa_compress = getattr(model_config, "is_hybrid_swa_compress", False)
    runner.use_mla_backend = model_config.attention_arch == mr.AttentionArch.MLA
    runner.model = None
    runner.forward_stream = None
    runner.lora_manager = None
    runner.init_spec_aux_hidden_state()
    runner.init_torch_distributed()  # its own copy of the placement (pre-load memory: ours)
    runner.layer_info = layers.resolve_layer_indices(
        model=None, model_config=model_config, is_draft_worker=False, draft_model_idx=None)
    legacy = getattr(load_utils, "maybe_downgrade_dtype_for_legacy_gpu", None)
    if callable(legacy):  # load_model does it on CUDA: below sm80 the model runs float16
        legacy(model_config=model_config)
    runner.dtype = model_config.dtype
    runner.sliding_window_size = load_utils.resolve_sliding_window_size(None, model_config)
    runner.configure_kv_cache_dtype()
    runner.init_kv_cache_configurator()
    return runner


def _size(pool: Any) -> int | None:
    size = getattr(pool, "size", None)
    return int(size) if isinstance(size, int) else None


#: what torch says when a pool's constructor needs a real device (the meta device or the absent
#: CUDA driver): only these fall back to the sizing alone; any other error is the release's
DEVICE_ONLY = ("meta tensor", "NVIDIA driver", "Torch not compiled with CUDA")


def sized(runner: Any, pre_load_gb: float) -> dict[str, Any]:
    """The release's ``configure`` on the meta device, or its sizing alone where a pool needs a GPU.

    Only a device error falls back (:data:`DEVICE_ONLY`); the release's own refusals
    (a ``ValueError`` of an unsupported combination, say) are raised: the engine stops there.
    """
    kvc = runner.kv_cache_configurator
    out: dict[str, Any] = {"post_capture_resize": bool(getattr(kvc, "post_capture_kv_active",
                                                               False))}
    try:
        result = kvc.configure(pre_model_load_memory=pre_load_gb)
    except RuntimeError as err:
        if not any(mark in str(err) for mark in DEVICE_ONLY):
            raise
        out["pools_built"] = False
        out["pools_not_built"] = f"{type(err).__name__}: {err}"[:400]
        return out
    out["pools_built"] = True
    out["config"] = result.memory_pool_config
    runner.req_to_token_pool = result.req_to_token_pool
    out["req_to_token_pool_size"] = _size(result.req_to_token_pool)
    out["token_to_kv_pool_size"] = _size(result.token_to_kv_pool)
    out["token_to_kv_pool_class"] = type(result.token_to_kv_pool).__name__
    return out


def no_capture(runner: Any, rc: Any, graph_config: Any) -> str | None:
    """Why the engine captures no decode graph here, by the conditions its capture step checks
    (``capture_decode_graph``: speculative PD prefill, non-generation models, MindSpore, a
    disabled decode backend); None where it captures."""
    disagg = getattr(rc, "get_disagg", None)
    if runner.spec_algorithm.is_speculative() and callable(disagg) and \
            str(disagg().disaggregation_mode) == "prefill":
        return "a speculative prefill server (PD disaggregation) never replays decode graphs"
    if not runner.model_config.is_generation:
        return "not a generation model: decode graphs exist only for generation"
    if str(rc.get_model().model_impl).lower() == "mindspore":
        return "the MindSpore model implementation captures none"
    if graph_config.check_cuda_graph_backend(graph_config.Phase.DECODE,
                                             graph_config.Backend.DISABLED):
        return "the decode CUDA graph backend is disabled"
    return None


def capture_sizes(runner: Any, rc: Any) -> dict[str, Any]:
    """Decode CUDA graph batch sizes, as the runner's own start-up sizing asks for them."""
    runner_mod = _module("sglang.srt.model_executor.runner.base_cuda_graph_runner")
    graph_config = _module("sglang.srt.model_executor.cuda_graph_config")
    graph = rc.get_exec().graph
    decode = getattr(graph.cuda_graph_config, "decode", None)
    none = no_capture(runner, rc, graph_config)
    out: dict[str, Any] = {"decode_backend": str(getattr(decode, "backend", "")),
                           "captured": none is None, "not_captured_because": none,
                           "padding": not bool(getattr(graph, "disable_cuda_graph_padding",
                                                       False))}
    if getattr(rc.get_exec(), "moe", None) is not None and \
            getattr(rc.get_exec().moe, "enable_paged_experts", False):
        raise Lacking("--enable-paged-experts caps the decode graph sizes inside the built "
                      "model's constructor, which engine mode does not build")
    width = int(runner.decode_num_tokens_per_req())
    gathers = [bool(g) for g in runner.decode_graph_gather_requirements()]
    out.update(tokens_per_request=width, gathered_buffer_required=any(gathers),
               configured_bs=[int(b) for b in getattr(decode, "bs", []) or []])
    if none is not None:
        out["capture_bs"] = []
        return out
    capture, compile_bs = runner_mod.get_batch_sizes_to_capture(
        runner, width, gathered_buffer_required=any(gathers))
    out["capture_bs"] = [int(b) for b in capture]
    out["compile_bs"] = [int(b) for b in compile_bs]
    return out


#: the release's own line when recon publishes again for the next point (its overrides go)
REPUBLISHED = "publish(role="
#: a line printing free memory prints recon's declared figure back ("Memory pool end. avail
#: mem=..."): not what the engine prints after its pools, so it is not shown as the release's
MEASURED = "avail mem="


def one_point(server_args: Any, figures: dict[str, float], want_graphs: bool,
              logs: Any) -> dict[str, Any]:
    """Pools (and graphs) for one pair of memory figures, from a freshly published context."""
    first = len(logs.records)
    rc = publish(server_args)
    model_config_mod = _module("sglang.srt.configs.model_config")
    model_config = model_config_mod.ModelConfig.from_server_args(server_args)
    model_decides(server_args, model_config, rc)
    runner = bare_runner(server_args, model_config, rc)
    point = sized(runner, float(runner.pre_model_load_memory))
    if not point["pools_built"]:
        first = len(logs.records)
        rc = publish(server_args)  # a fresh context: configure() may have written overrides
        runner = bare_runner(server_args, model_config, rc)
        point["config"] = runner.kv_cache_configurator._resolve_memory_pool_config(  # noqa: SLF001
            float(runner.pre_model_load_memory))
        config = point["config"]
        kvc = runner.kv_cache_configurator
        req_pool = kvc._build_req_to_token_pool(max_num_reqs=config.max_running_requests)  # noqa: SLF001
        runner.req_to_token_pool = req_pool
        point["req_to_token_pool_size"] = _size(req_pool)
    config = point.pop("config")
    schedule = rc.get_schedule()
    point.update({
        "max_total_num_tokens": int(config.max_total_num_tokens),
        "max_running_requests": None if config.max_running_requests is None
        else int(config.max_running_requests),
        "full_max_total_num_tokens": config.full_max_total_num_tokens,
        "swa_max_total_num_tokens": config.swa_max_total_num_tokens,
        "max_mamba_cache_size": getattr(schedule, "max_mamba_cache_size", None),
        "mem_fraction_static": float(schedule.mem_fraction_static),
        "kv_cache_dtype": str(getattr(runner, "kv_cache_dtype", "")).replace("torch.", ""),
        "context_len": int(model_config.context_len),
        "page_size": int(schedule.page_size),
        "mamba": runner.kv_cache_configurator.mambaish_config is not None,
    })
    runner.max_total_num_tokens = point["max_total_num_tokens"]
    runner.max_running_requests = point["max_running_requests"]
    if isinstance(getattr(type(runner), "logical_max_total_num_tokens", None), property):
        # what the scheduler logs as max_total_num_tokens (request tokens, not per-rank rows)
        point["logical_max_total_num_tokens"] = int(runner.logical_max_total_num_tokens)
    if want_graphs:
        point["graphs"] = capture_sizes(runner, rc)
    point["log"] = [r["message"] for r in logs.records[first:]
                    if r["level"] in ("INFO", "WARNING", "ERROR")
                    and not r["message"].startswith(REPUBLISHED)
                    and MEASURED not in r["message"]][-40:]
    return point


def pools(server_args: Any, memory: dict[str, Any], logs: Any) -> dict[str, Any]:
    """Every requested memory point: the release's pools, and its graph sizes where asked."""
    start = time.monotonic()
    sizing()
    figures = {"now": 0.0, "pre_load_gb": 0.0}
    replaced = [meta_device_module()]
    patched = answer_free_memory(figures)
    replaced.append(f"get_available_gpu_memory (bound in {len(patched)} modules, and in those "
                    "imported later): the declared free memory after the weights")
    replaced.append(answer_pre_load(figures))
    points = []
    for available, pre_load in zip(memory["available_gb"], memory["pre_load_gb"], strict=True):
        figures.update(now=float(available), pre_load_gb=float(pre_load))
        point = one_point(server_args, figures, bool(memory.get("graphs")), logs)
        point["available_gb"] = float(available)
        point["pre_load_gb"] = float(pre_load)
        points.append(point)
    return {"points": points, "replaced": replaced, "seconds": round(time.monotonic() - start, 2)}
