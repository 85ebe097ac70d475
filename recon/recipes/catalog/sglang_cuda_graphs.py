"""sglang-cuda-graphs: which decode batch sizes the SGLang server captures as CUDA graphs.

A running batch whose size has a captured graph replays it; a smaller one is
padded up to the next captured size; a larger one than the largest runs
eagerly. The captured sizes are the release's configured list
(``cuda_graph_config.decode.bs`` or ``cuda_graph_bs``) filtered by the
attention-TP alignment and clamped to the request pool, whose size comes from
the memory pools (a hybrid model's mamba pool often caps it well below the
list). Under speculative decoding the same sizes carry the target-verify
width (tokens per request). This recipe runs the release's own
``get_batch_sizes_to_capture`` on the request pool its own sizing built
(:mod:`recon.engine.sglang_pools`), so it needs the memory figures of
``sglang-memory-pools``.

Options (``--set``): as ``sglang-memory-pools`` (``available_gb`` or
``weights_gb``, ``pre_load_gb``, ``gpu``, ``gpu_count``, ``draft_config``),
and ``batch`` (running batch sizes to place: captured, padded or eager).
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

from ...errors import ReconError
from ..base import Finding, Recipe, RecipeContext, RecipeResult, Table, count
from ..options import opt_ints
from ..registry import register
from ..sglang_common import DEMO_OPTIONS, DEMOS, pools_run
from .sglang_memory_pools import finish, point_findings

NAME = "sglang-cuda-graphs"


def placement(batch: int, captured: list[int], most: int | None,
              padding: bool = True) -> tuple[str, int | None]:
    """How the runner serves a running batch of ``batch`` requests, given the captured sizes
    (``padding``: the release pads a batch up to the next captured size, unless
    ``--disable-cuda-graph-padding``)."""
    if most is not None and batch > most:
        return f"never runs (above max_running_requests {most})", None
    if not captured:
        return "eager (no decode CUDA graphs)", None
    at = bisect_left(captured, batch)
    if at == len(captured):
        return "eager (larger than the largest captured size)", None
    if captured[at] == batch:
        return "captured", batch
    if not padding:
        return "eager (not a captured size, and padding is disabled)", None
    return f"padded to {captured[at]}", captured[at]


def run(ctx: RecipeContext) -> RecipeResult:
    """The release's decode capture sizes for the first memory figure (and each given)."""
    batches = opt_ints(ctx.options, "batch") or []
    if any(b < 1 for b in batches):
        raise ReconError(f"--set batch: positive batch sizes, got {batches}")
    run_ = pools_run(ctx, NAME, graphs=True)
    res, facts, points = run_.res, run_.facts, run_.points
    rows = []
    for point in points:
        graphs: dict[str, Any] = point["graphs"]
        rows.append([point["available_gb"], point.get("max_running_requests"),
                     point.get("req_to_token_pool_size"), len(graphs["capture_bs"]),
                     max(graphs["capture_bs"], default=None)])
    graphs = points[0]["graphs"]
    captured = list(graphs["capture_bs"])
    res.values = {"cuda_graph_capture_bs": captured,
                  "cuda_graph_max_bs": max(captured, default=None),
                  "tokens_per_request": graphs["tokens_per_request"],
                  "decode_backend": graphs["decode_backend"],
                  "configured_bs": graphs["configured_bs"],
                  "compile_bs": graphs.get("compile_bs", []),
                  "max_running_requests": points[0].get("max_running_requests"),
                  "available_gb": points[0]["available_gb"]}
    res.tables.append(Table("capture sizes per memory figure",
                            ["available_gb", "max_running_requests", "req_to_token_pool_size",
                             "captured sizes", "largest"], rows))
    if batches:
        places = [[b, *placement(b, captured, points[0].get("max_running_requests"),
                                  bool(graphs.get("padding", True)))] for b in batches]
        res.values["batches"] = {str(b): {"served": how_, "graph_bs": bs}
                                 for b, how_, bs in places}
        res.tables.append(Table("running batches", ["batch", "served", "graph bs"], places))
    dropped = sorted(set(graphs["configured_bs"]) - set(captured))
    if dropped:
        res.findings.append(Finding("info", f"{len(dropped)} configured sizes are not captured "
                                            f"(above the request pool of "
                                            f"{points[0].get('req_to_token_pool_size')}, or not "
                                            f"aligned to the attention TP size): "
                                            f"{dropped[:12]}{' ...' if len(dropped) > 12 else ''}"))
    if graphs["tokens_per_request"] > 1:
        res.findings.append(Finding("info", f"speculative decoding: each captured size verifies "
                                            f"{graphs['tokens_per_request']} tokens per request "
                                            "(target-verify graphs); the draft model's own graphs "
                                            "are not listed here"))
    if not graphs["captured"]:
        res.findings.append(Finding("warn", "no decode CUDA graph is captured ("
                                            f"{graphs.get('not_captured_because')}): every "
                                            "batch runs eagerly"))
    res.findings += point_findings(points[0])
    return finish(res, facts, points[:1], run_.said)


def summary(res: RecipeResult) -> str | None:
    """Which running batches decode in a CUDA graph and from which size on they run eager."""
    v = res.values
    captured = v.get("cuda_graph_capture_bs")
    if not isinstance(captured, list):
        return None
    per = v.get("tokens_per_request")
    step = f" (each request verifies {per} tokens per step)" if isinstance(per, int) and per > 1 \
        else ""
    if not captured:
        return f"No decode CUDA graph is captured: every running batch decodes eager{step}."
    top = max(captured)
    most = v.get("max_running_requests")
    if isinstance(most, int) and most <= top:
        return (f"Every running batch decodes in a CUDA graph{step}: {count(len(captured), 'size')} "
                f"are captured, up to {top}, and max_running_requests is {most}.")
    return (f"Running batches of up to {count(top, 'request')} decode in a CUDA graph "
            f"({count(len(captured), 'captured size')}){step}; batches of {top + 1} or more run eager"
            + (f" (max_running_requests {most})." if isinstance(most, int) else "."))


register(Recipe(
    name=NAME,
    engine="sglang",
    title="SGLang's decode CUDA graph batch sizes, and which running batches fall back to eager",
    why=("A hybrid model's mamba pool can cap the request pool far below the configured graph "
         "sizes, and speculative decoding changes what each graph verifies; the release's own "
         "get_batch_sizes_to_capture runs here on the pools its sizing built for your memory. "
         "Options: --set available_gb=X pre_load_gb=Y batch=1,64,300, gpu, draft_config."),
    reads_flags=["cuda_graph_max_bs", "cuda_graph_bs", "disable_cuda_graph", "tp_size",
                 "max_running_requests", "speculative_algorithm",
                 "speculative_num_draft_tokens"],
    reads_config=["all of config.json, through the release's own model config"],
    run=run,
    example="--config example:qwen3-next-80b-a3b-instruct --set available_gb=60 "
            "--set pre_load_gb=78 --set batch=64,300 --flags \"python -m "
            "sglang.launch_server --model-path Qwen/Qwen3-Next-80B-A3B-Instruct --tp 4\"",
    demos=list(DEMOS),
    demo_options=dict(DEMO_OPTIONS),
    needs=("torch",),
    summarize=summary,
))
