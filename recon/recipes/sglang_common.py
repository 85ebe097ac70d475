"""Shared plumbing of the SGLang recipes: one engine-mode run per request, and its memory options.

``sglang-server-args``, ``sglang-memory-pools`` and ``sglang-cuda-graphs`` ask
the same release the same question with more or less of it answered (the
resolved ``ServerArgs``; then the pools; then the graph batch sizes). One run
in a process answers all of them (:func:`facts_for` keeps it), and the memory
figures the pools read are taken from ``--set`` here, in one wording.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..engine.config import DEFAULT_GPU_COUNT
from ..engine.gpus import board_for
from ..engine.gpus import gpu as lookup_gpu
from ..engine.sglang import MemoryFigures, ServerArgsFacts, SglangNotApplicable, server_args
from ..errors import ReconError
from .base import NotApplicable, RecipeContext, RecipeResult, load_model_config
from .flags import flag_hints
from .options import opt_float

_MEMO: dict[str, ServerArgsFacts] = {}

#: how a user names the memory figures, as the SGLang log prints them
MEMORY_HELP = ("--set available_gb=X (the log's 'Load weight end. ... avail mem=X GB': free GPU "
               "memory after the weights; a list sweeps it) or --set weights_gb=W (free memory "
               "before minus W), and --set pre_load_gb=Y (the log's 'Load weight begin. avail "
               "mem=Y GB'; default: the declared GPU's whole memory)")


def lookup(values: dict[str, Any], path: str) -> tuple[bool, Any]:
    """(present, value) of a field or a dotted path into a field's resolved value."""
    head, *rest = path.split(".")
    if head not in values:
        return False, None
    value = values[head]
    for part in rest:
        if not isinstance(value, dict) or part not in value:
            return False, None
        value = value[part]
    return True, value


def _floats(ctx: RecipeContext, key: str) -> list[float] | None:
    value = ctx.options.get(key)
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        items: list[Any] = list(value)
    elif isinstance(value, str):
        items = [v for v in value.replace(",", " ").split() if v]
    else:
        items = [value]
    return [float(opt_float({key: item}, key) or 0.0) for item in items]


#: ``recon demo`` for the pools-based recipes: the hybrid example at TP 4, with the two
#: 'avail mem=' figures of an H100 log (before and after the weights)
DEMOS = (("qwen3-next-80b-a3b-instruct.json",
          "python -m sglang.launch_server --model-path Qwen/Qwen3-Next-80B-A3B-Instruct --tp 4"),)
DEMO_OPTIONS = {"available_gb": 60, "pre_load_gb": 78}

#: the log prints free memory to 0.01 GB: the true figure is within half of that
PRINTED_PRECISION_GB = 0.005
#: points across that precision: the answer is a sawtooth in the budget (one mamba slot
#: more takes its bytes from the KV pool), so its ends alone do not bound it
PRECISION_SAMPLES = 9


def memory_figures(ctx: RecipeContext, graphs: bool,
                   without_draft: bool = False) -> tuple[MemoryFigures, list[str]]:
    """The free-memory figures of ``--set``, and what recon assumed to complete them.

    Free memory after the weights is the user's (their log, or their weights'
    size): recon cannot know what else holds GPU memory on their machine, and a
    guess would be a plausible number the engine would not print. More
    points follow the given ones: the first figure across its printed precision
    (``--set memory_precision_gb``, default 0.005), least memory first, for the
    ``*_range`` values a log comparison uses.
    """
    said = []
    board_key, _ = board_for(ctx.options.get("gpu"))
    board = lookup_gpu(board_key or "h100")
    pre = _floats(ctx, "pre_load_gb")
    if pre is None:
        total = board.memory_bytes / 2**30
        pre = [total]
        said.append(f"free GPU memory before the weights: {total:.2f} GB, the whole of the "
                    f"{board.name} (no CUDA context or other process counted; give --set "
                    "pre_load_gb=Y, your log's 'Load weight begin. avail mem=Y GB')")
    available = _floats(ctx, "available_gb")
    weights = _floats(ctx, "weights_gb")
    if available is None and weights is None:
        raise ReconError("this recipe needs the GPU's free memory: " + MEMORY_HELP)
    if available is not None and weights is not None:
        raise ReconError("--set available_gb and --set weights_gb: give one of them")
    if available is None:
        assert weights is not None
        available = [pre[0] - w for w in weights]
        said.append("free GPU memory after the weights: " + ", ".join(
            f"{pre[0]:.2f} - {w:g} = {a:.2f} GB" for w, a in zip(weights, available, strict=True))
            + " (nothing else allocated between the two points)")
    if len(pre) == 1:
        pre = pre * len(available)
    if len(pre) != len(available):
        raise ReconError("--set pre_load_gb: one figure, or one for each available_gb figure")
    step = opt_float(ctx.options, "memory_precision_gb", PRINTED_PRECISION_GB) or 0.0
    if step < 0:
        raise ReconError(f"--set memory_precision_gb: not negative, got {step}")
    shifts = [step * (2 * i / (PRECISION_SAMPLES - 1) - 1) for i in range(PRECISION_SAMPLES)]
    return MemoryFigures((*available, *(available[0] + d for d in shifts)),
                         (*pre, *(pre[0] - d for d in shifts)), graphs=graphs,
                         without_draft=without_draft), said


def given_points(facts: ServerArgsFacts) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The points of the figures given, and those across the first one's printed precision."""
    points = list((facts.pools or {}).get("points", []))
    return points[:-PRECISION_SAMPLES], points[-PRECISION_SAMPLES:]


#: where a release sizes its pools in one object engine mode can run (module, qualname)
SIZING = ("sglang.srt.mem_cache.kv_cache_configurator",
          "KVCacheConfigurator._resolve_memory_pool_config")


def require_pool_sizing(ctx: RecipeContext) -> None:
    """Refuse, from the snapshot's index and before any environment is built, a release
    whose pool sizing is not a ``KVCacheConfigurator`` (the child checks again)."""
    if ctx.snapshot.package != "sglang":
        raise NotApplicable(f"SGLang engine mode reads SGLang; the snapshot holds "
                            f"{ctx.snapshot.package}")
    module, qualname = SIZING
    if f"{module}:{qualname}" not in ctx.index.functions:
        raise NotApplicable(f"this release has no {module}.{qualname}: it sizes its pools "
                            "inside ModelRunner, from the layer range ModelRunner.load_model "
                            "sets while loading the weights onto a GPU")


def facts_for(ctx: RecipeContext, memory: MemoryFigures | None = None
              ) -> tuple[ServerArgsFacts, list[str]]:
    """The release's resolved ServerArgs (and pools, with ``memory``), once per request."""
    if ctx.snapshot.package != "sglang":
        raise NotApplicable(f"SGLang engine mode reads SGLang; the snapshot holds "
                            f"{ctx.snapshot.package}")
    config = ctx.require_config()
    if ctx.command is None:
        raise ReconError("this recipe needs the server's command line: --flags \"python -m "
                         "sglang.launch_server --model-path M ...\"")
    count = ctx.options.get("gpu_count", DEFAULT_GPU_COUNT)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ReconError(f"--set gpu_count: a positive integer, got {count!r}")
    board, how = board_for(ctx.options.get("gpu"))
    draft_path = ctx.options.get("draft_config")
    draft = load_model_config(str(draft_path)) if draft_path is not None else None
    asked = memory.as_request() if memory is not None else None
    key = json.dumps([ctx.snapshot.src.as_posix(), ctx.command, config, board, count, draft,
                      asked], sort_keys=True, default=str)
    if key not in _MEMO:
        try:
            with flag_hints(ctx.snapshot):
                _MEMO[key] = server_args(ctx.snapshot, ctx.command, config, gpu=board,
                                         gpu_count=count, draft_config=draft, memory=memory)
        except SglangNotApplicable as err:
            raise NotApplicable(str(err).partition(": ")[2] or str(err)) from err
    return _MEMO[key], [how] if how else []


@dataclass
class PoolsRun:
    """One pools-based recipe's engine-mode answer: the result to fill, the points."""

    res: RecipeResult
    facts: ServerArgsFacts
    points: list[dict[str, Any]]  # one per figure given
    samples: list[dict[str, Any]]  # across the first figure's printed precision
    said: list[str]  # what recon assumed to complete the figures and the GPU


def pools_run(ctx: RecipeContext, name: str, *, graphs: bool,
              without_draft: bool = False) -> PoolsRun:
    """Refuse a release without the sizing, read the figures, run the release once."""
    require_pool_sizing(ctx)
    memory, said = memory_figures(ctx, graphs=graphs, without_draft=without_draft)
    facts, how = facts_for(ctx, memory)
    points, samples = given_points(facts)
    res = RecipeResult(name, ctx.snapshot.name, ctx.release)
    res.inputs = {"command": ctx.command, "config": ctx.config_path or "given",
                  "gpu": facts.gpu.key, "gpu_count": facts.gpu_count,
                  "available_gb": [p["available_gb"] for p in points],
                  "pre_load_gb": [p["pre_load_gb"] for p in points]}
    return PoolsRun(res, facts, points, samples, [*said, *how])
