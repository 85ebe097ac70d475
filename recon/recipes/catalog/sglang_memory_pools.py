"""sglang-memory-pools: how many KV tokens and mamba state slots the SGLang server will have.

"How big are my pools?" SGLang sizes them at start-up from the free GPU
memory it measures before and after loading the weights: the KV byte budget
(``mem_fraction_static`` of the memory before, charged against what is free
after), the mamba state pool of hybrid models and its share of that budget,
the draft model's KV layers under speculative decoding, and
``max_running_requests`` from the pools. This recipe runs the release's own
sizing (``KVCacheConfigurator``, :mod:`recon.engine.sglang_pools`) for the
command line as typed, the model's ``config.json`` and the memory figures of
the user's log, and shows the lines the engine would print.

Options (``--set``): ``available_gb`` (free memory after the weights, as the
log's ``Load weight end`` prints it; a list sweeps it) or ``weights_gb``;
``pre_load_gb`` (the log's ``Load weight begin``; default the GPU's whole
memory, said); ``gpu``, ``gpu_count``, ``draft_config`` as in
``sglang-server-args``.
"""

from __future__ import annotations

from typing import Any

from ...engine.sglang import ServerArgsFacts
from ..base import Finding, Provenance, Recipe, RecipeContext, RecipeResult, Table, count
from ..registry import register
from ..sglang_common import DEMO_OPTIONS, DEMOS, pools_run

NAME = "sglang-memory-pools"

#: the quantities of one memory point, as identifiers (``--json``), first the headline ones
QUANTITIES = ("max_total_num_tokens", "logical_max_total_num_tokens", "max_running_requests",
              "max_mamba_cache_size",
              "full_max_total_num_tokens", "swa_max_total_num_tokens", "kv_cache_dtype",
              "mem_fraction_static", "req_to_token_pool_size", "context_len", "page_size")
#: the functions of the release whose provenance a write-up cites
CITED = ("_resolve_memory_pool_config", "_profile_available_bytes", "_handle_max_mamba_cache",
         "resolve_max_num_reqs", "calculate_pool_sizes", "config_from_budget", "configure",
         "get_batch_sizes_to_capture")


def point_values(point: dict[str, Any]) -> dict[str, Any]:
    """One memory point's quantities (present ones), the figures it was sized for first."""
    out = {"available_gb": point["available_gb"], "pre_load_gb": point["pre_load_gb"]}
    out.update({k: point[k] for k in QUANTITIES if point.get(k) is not None})
    return out


def point_findings(point: dict[str, Any]) -> list[Finding]:
    """What a reader must know about one point: unbuilt pools, post-capture resizing, caps."""
    out = []
    if point.get("post_capture_resize"):
        out.append(Finding("warn", "post-capture KV sizing is on: the engine resizes the KV pool "
                                    "after capturing its CUDA graphs, from the memory then free, "
                                    "which recon cannot know; the sizes shown are the pre-capture "
                                    "ones"))
    if point.get("pools_built") is False:
        out.append(Finding("info", "the pools' sizes come from the release's sizing alone "
                                   "(_resolve_memory_pool_config): building the KV pool object "
                                   "needs a GPU kernel here ("
                                   + str(point.get("pools_not_built", ""))[:160] + "), so its "
                                   "'KV Cache is allocated' line is not shown"))
    return out


def logged(point: dict[str, Any]) -> list[Finding]:
    """The lines the release's own code printed while sizing (``recon logs`` reads them too)."""
    out = []
    for line in point.get("log", []):
        level = "warn" if any(w in line for w in ("capped", "reduced", "Not enough")) else "info"
        out.append(Finding(level, "the release logged: " + line))
    return out


def draft_share(first: dict[str, Any], plain: dict[str, Any] | None
                ) -> tuple[dict[str, Any], Finding] | None:
    """The same command line without its speculative options, at the same free memory."""
    if not plain:
        return None
    if "point" not in plain:
        return ({"draft_options_left_out": plain["dropped"]},
                Finding("info", "the same command line without its speculative options was not "
                                f"sized: {plain.get('error')}"))
    other = point_values(plain["point"])
    with_draft, without = first.get("max_total_num_tokens"), other.get("max_total_num_tokens")
    values = {"without_draft": {k: other.get(k) for k in ("max_total_num_tokens",
                                                          "max_running_requests",
                                                          "max_mamba_cache_size")},
              "draft_options_left_out": plain["dropped"]}
    if not isinstance(with_draft, int) or not isinstance(without, int) or without <= 0:
        return values, Finding("info", "without its speculative options the release sized no "
                                       "KV pool to compare with")
    change = with_draft - without
    text = (f"speculative decoding changes the KV pool by {change:+,} tokens ({change / without:+.0%})"
            f": {without:,} without {' '.join(plain['dropped'])}, {with_draft:,} with it, at the "
            "same free memory (the draft's weights also take memory: compare the two logs' "
            "'Load weight end' figures)")
    if other.get("max_running_requests") != first.get("max_running_requests"):
        text += (f"; max_running_requests {other.get('max_running_requests')} -> "
                 f"{first.get('max_running_requests')}")
    return values, Finding("info", text)


def ranges(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """``*_range`` values: the least and most the release answers across the first figure's
    printed precision (sampled: the answer is not monotone in the memory)."""
    out = {}
    for key in ("max_total_num_tokens", "logical_max_total_num_tokens", "max_mamba_cache_size",
                "max_running_requests"):
        seen = [b[key] for b in samples if isinstance(b.get(key), int)]
        if seen and len(seen) == len(samples):
            out[f"{key}_range"] = [min(seen), max(seen)]
    return out


def undecided(points: list[dict[str, Any]]) -> str | None:
    """Why the final pool is not what recon shows, where the engine resizes it after capture."""
    if any(p.get("post_capture_resize") for p in points):
        return ("the engine resizes its KV pool after capturing CUDA graphs (post-capture KV "
                "sizing), from memory free then; the sizes shown are before that")
    return None


def provenance(facts: ServerArgsFacts) -> list[Provenance]:
    """The pool-sizing functions of the snapshot that ran, with file and sha256."""
    out = []
    for fn in facts.ran:
        name = str(fn.get("qualname", "")).rsplit(".", 1)[-1]
        if name in CITED:
            out.append(Provenance(fn["qualname"], fn["file"], int(fn["first_line"]),
                                  str(fn.get("sha256") or "")))
    return out


def replaced_note(facts: ServerArgsFacts) -> str:
    """What engine mode answered in place of the GPU, in one line."""
    pools = facts.replaced.get("pools", [])
    return ("engine mode: no GPU and no weights; the runner is made without its __init__ and the "
            "model is absent (its no-model reads: layer range from the config, no checkpoint KV "
            "scales); replaced: " + "; ".join(pools) + f"; device queries answered for "
            f"{facts.gpu.name}")


def run(ctx: RecipeContext) -> RecipeResult:
    """The release's pools for each memory figure given."""
    run_ = pools_run(ctx, NAME, graphs=False, without_draft=True)
    res, facts, points, bounds = run_.res, run_.facts, run_.points, run_.samples
    first = point_values(points[0])
    res.values = dict(first) if len(points) == 1 else {"points": [point_values(p)
                                                                  for p in points]}
    res.values.update(ranges([points[0], *bounds]))
    columns = ["available_gb", "pre_load_gb", "max_total_num_tokens", "max_running_requests",
               "max_mamba_cache_size"]
    res.tables.append(Table("pools per memory figure", columns,
                            [[point_values(p).get(c) for c in columns] for p in points]))
    for point in points:
        res.findings += [f for f in point_findings(point) if f not in res.findings]
    res.findings += logged(points[0])
    if facts.server_args.get("speculative_algorithm"):
        res.findings.append(Finding("info", "with a draft model, available_gb is the free memory "
                                            "printed right before the pools: the draft's own "
                                            "'Load weight end' (its weights load first)"))
    draft = draft_share(first, (facts.pools or {}).get("without_draft"))
    if draft:
        res.values.update(draft[0])
        res.findings.append(draft[1])
    return finish(res, facts, points, run_.said)


def finish(res: RecipeResult, facts: ServerArgsFacts, points: list[dict[str, Any]],
           said: list[str]) -> RecipeResult:
    """What every pools-based answer ends with: exit 7 where the engine resizes later, the
    assumptions, the functions that ran and what engine mode replaced."""
    res.undecided = undecided(points)
    res.findings += [Finding("info", "assumed " + line) for line in [*facts.assumptions, *said]]
    res.provenance = provenance(facts)
    res.ran = facts.ran
    res.notes.append(replaced_note(facts))
    return res


def summary(res: RecipeResult) -> str | None:
    """The KV pool in tokens and how many requests run at once, for the (first) memory figure."""
    v = res.values
    points = v.get("points")
    first = points[0] if isinstance(points, list) and points else v
    tokens = first.get("max_total_num_tokens")
    if not isinstance(tokens, int):
        return None
    most = first.get("max_running_requests")
    mamba = first.get("max_mamba_cache_size")
    out = f"With {first.get('available_gb')} GB free, the KV pool holds {tokens:,} tokens"
    if isinstance(most, int):
        out += f" and at most {count(most, 'request')} run at once"
    if isinstance(mamba, int):
        out += f" ({count(mamba, 'mamba state')})"
    if isinstance(points, list) and len(points) > 1:
        out += f"; {count(len(points) - 1, 'more memory figure')} in the table"
    return out + "."


register(Recipe(
    name=NAME,
    engine="sglang",
    title="SGLang's KV cache and mamba state pools for your memory, and max_running_requests",
    why=("The pool size decides whether two long requests run together or queue (turning a "
         "DFLASH draft on shrank one user's pool from 610,050 to 364,655 tokens); the release's "
         "own sizing runs here for your command line, config.json and the free memory of your "
         "log, and prints the engine's own 'KV Cache is allocated' line. Options: --set "
         "available_gb=X pre_load_gb=Y (or weights_gb=W), gpu, gpu_count, draft_config."),
    reads_flags=["tp_size", "mem_fraction_static", "page_size", "max_running_requests",
                 "max_total_tokens", "kv_cache_dtype", "mamba_full_memory_ratio",
                 "max_mamba_cache_size", "speculative_algorithm"],
    reads_config=["all of config.json, through the release's own model config"],
    run=run,
    example="--config example:qwen3-next-80b-a3b-instruct --set available_gb=60 "
            "--set pre_load_gb=78 --flags \"python -m sglang.launch_server --model-path "
            "Qwen/Qwen3-Next-80B-A3B-Instruct --tp 4\"",
    demos=list(DEMOS),
    demo_options=dict(DEMO_OPTIONS),
    needs=("torch",),
    summarize=summary,
))
