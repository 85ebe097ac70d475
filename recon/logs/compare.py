"""Predicted vs observed: run the recipes for the log's release, config and flags.

Two ways a recipe's answer becomes a prediction of a logged quantity:

* :data:`LINKS` maps an observed quantity to the recipe (and the ``values``
  key) that computes it; keys are listed newest wording first, so a recipe
  renaming a key is one edit here;
* a recipe that runs the release's own code reports the messages the release
  logged while it ran (findings ``the release logged: ...``); those messages
  go through the same pattern table as the server log, so the prediction and
  the observation are read by the same rows.

A recipe that is not installed, not applicable, or fails gives "no
prediction" with the reason, never a made-up number. A mismatch is either a
recon bug or a configuration the user did not expect; both are worth a line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ReconError
from .models import Comparison, LogReport, ServerLog
from .patterns import match_line
from .quantities import QUANTITIES
from .setting import FromLog


@dataclass(frozen=True)
class Link:
    """Observed quantity ``quantity`` is predicted by ``recipe`` under one of ``keys``."""

    quantity: str
    recipe: str
    keys: tuple[str, ...]
    engine: str = "vllm"


LINKS: list[Link] = [
    Link("attention_block_size", "vllm-hybrid-page-align",
         ("attention block size (tokens)", "attention_block_size")),
    Link("mamba_padding_pct", "vllm-hybrid-page-align", ("mamba padding", "mamba_padding_pct")),
    Link("mamba_cache_mode", "vllm-hybrid-page-align", ("mamba cache mode", "mamba_cache_mode")),
    # the config line is printed before the model runner rounds sizes for spec decode
    Link("cudagraph_capture_sizes", "vllm-capture-sizes",
         ("sizes after the release's size logic", "cudagraph_capture_sizes")),
    Link("max_cudagraph_capture_size", "vllm-capture-sizes",
         ("max size after the release's size logic", "max_cudagraph_capture_size")),
    # the capture progress bars: one graph per key of the release's own dispatcher
    Link("cudagraph_graphs_piecewise", "vllm-capture-sizes", ("cudagraph_graphs_piecewise",)),
    Link("cudagraph_graphs_full", "vllm-capture-sizes", ("cudagraph_graphs_full",)),
    Link("cudagraph_graphs_piecewise_max", "vllm-capture-sizes",
         ("cudagraph_graphs_piecewise_max",)),
    Link("cudagraph_graphs_full_max", "vllm-capture-sizes", ("cudagraph_graphs_full_max",)),
    Link("cudagraph_graphs_mixed", "vllm-capture-sizes", ("cudagraph_graphs_mixed",)),
    Link("cudagraph_graphs_decode", "vllm-capture-sizes", ("cudagraph_graphs_decode",)),
    Link("mamba_ssm_cache_dtype", "vllm-hybrid-page-align", ("mamba_ssm_cache_dtype",)),
    Link("max_num_batched_tokens", "vllm-capture-sizes", ("max_num_batched_tokens",)),
    Link("enable_prefix_caching", "kv-capacity", ("enable_prefix_caching",)),
    Link("tensor_parallel_size", "kv-capacity", ("tensor_parallel_size",)),
    Link("kv_cache_dtype", "kv-capacity", ("kv_cache_dtype",)),
    # the share the release's CacheConfig defaults to (0.92 from 0.26.0 on) or was given
    Link("gpu_util_current", "kv-capacity", ("gpu_memory_utilization",)),
    Link("kv_cache_tokens", "kv-capacity", ("GPU KV cache size (tokens)", "kv_cache_tokens")),
    Link("max_concurrency", "kv-capacity", ("maximum concurrency at *", "max_concurrency")),
    # the compile cache: the release's own hash functions name the folders the engine logs
    Link("aot_compile_hash", "vllm-compile-cache", ("aot_compile_hash",)),
    Link("compile_env_hash", "vllm-compile-cache", ("compile_env_hash",)),
    Link("compile_config_hash", "vllm-compile-cache", ("compile_config_hash",)),
    # SGLang: the release's own pool sizing for the free memory its log printed
    # the scheduler's line counts request tokens (the runner's logical capacity), the pool's
    # line per-rank rows: the same number unless decode context parallelism widens the first
    Link("max_total_num_tokens", "sglang-memory-pools",
         ("logical_max_total_num_tokens", "max_total_num_tokens"), engine="sglang"),
    Link("kv_pool_tokens", "sglang-memory-pools", ("max_total_num_tokens",), engine="sglang"),
    Link("max_mamba_cache_size", "sglang-memory-pools", ("max_mamba_cache_size",),
         engine="sglang"),
    Link("max_running_requests", "sglang-memory-pools", ("max_running_requests",),
         engine="sglang"),
    Link("cuda_graph_bs", "sglang-cuda-graphs", ("cuda_graph_capture_bs",), engine="sglang"),
    Link("chunked_prefill_size", "sglang-server-args", ("chunked_prefill_size",),
         engine="sglang"),
]

#: With ``recon logs --memory-plan`` (vLLM): the memory section is predicted from the command
#: line alone (kv-capacity's memory plan) instead of taken from the log
MEMORY_LINKS: list[Link] = [
    Link("model_load_gib", "kv-capacity", ("weights_gib",)),
    Link("available_kv_cache_memory_gib", "kv-capacity", ("available_kv_gib",)),
    Link("cudagraph_memory_estimated_gib", "kv-capacity", ("cudagraph_memory_gib",)),
]
#: what follows from the planned memory, compared within the plan's measured accuracy (its
#: available KV memory within 3% of the engine's on every real run, tests/test_memory_plan.py)
PLANNED = ("available_kv_cache_memory_gib", "kv_cache_tokens", "max_concurrency")
PLAN_TOLERANCE = 0.03

#: What a recipe is *given* from the log rather than asked to predict: recipe -> option ->
#: observed quantity. The engine's own measurement (free memory after profiling) cannot be
#: computed offline; the capacity that follows from it can. A ``--set`` of the same option wins.
INPUTS: dict[str, dict[str, str]] = {
    # the engine-backed recipes share one engine-mode answer: give them all the same memory
    name: {"available_kv_gib": "available_kv_cache_memory_gib"}
    for name in ("kv-capacity", "vllm-hybrid-page-align", "vllm-capture-sizes")
}

#: Recipes that predict nothing the log prints but check the configuration the log reveals,
#: run when the log shows their situation; their verdicts become ``report.checks``. The engine's
#: own numbers are their inputs (INPUTS), so the check is about *this* server.
CHECKS: dict[str, Callable[[ServerLog], bool]] = {
    # align mode's running-state column, with the mamba block size the engine chose
    "vllm-mamba-align-column": lambda log: log.value("mamba_cache_mode") == "align",
}
# SGLang's free-memory figures are settled from its lines by recon.logs.setting.sglang_memory
# (first and last of each process, the smallest: not simply the last line printed)
INPUTS["vllm-mamba-align-column"] = {"mamba_block_size": "attention_block_size",
                                     "max_model_len": "max_model_len"}

#: How recipes word "the release's code printed this" in their findings.
_LOGGED = ("the release logged: ", "the release logs: ")


def recipes_for(log: ServerLog, engine: str, links: list[Link] = LINKS) -> list[str]:
    """Recipes worth running: those predicting something this log printed, in table order."""
    out: list[str] = []
    for link in links:
        if link.engine == engine and link.quantity in log.observed and link.recipe not in out:
            out.append(link.recipe)
    return out


def run_predictions(report: LogReport, snapshot: Any, *, config: Any, flags: Any,
                    options: dict[str, Any] | None, settings: list[FromLog] | None = None,
                    memory_plan: bool = False) -> None:
    """Run the recipes and fill ``report.comparisons`` and ``report.recipes``.

    ``settings`` are options the log itself settles (its GPU, its entry point): each
    recipe gets them unless the user's ``--set`` names the option, and
    ``report.inputs`` says which recipe used which, from which line. ``memory_plan``:
    the memory section too is predicted (:data:`MEMORY_LINKS`), the log's available KV
    memory compared rather than given.
    """
    from ..recipes import all_recipes, run_recipe
    from ..recipes.base import looked_up

    log = report.log
    engine = snapshot.package
    known = {r.name for r in all_recipes()}
    predicted: dict[str, tuple[Any, str, str]] = {}  # quantity -> (value, recipe, key)
    why_not: dict[str, str] = {}
    #: quantity -> (low, high): the same release's answer at both ends of an input the log
    #: rounded (the available KV memory is printed to 0.01 GiB)
    ranges: dict[str, tuple[float, float]] = {}
    checks = [name for name, applies in CHECKS.items() if applies(log)]
    links = LINKS + (MEMORY_LINKS if memory_plan else [])
    for name in recipes_for(log, engine, links) + checks:
        if name not in known:
            why_not[name] = f"recipe {name} not available"
            continue
        opts, given = _recipe_options(name, log, options, settings, memory_plan)
        try:
            with looked_up() as used:
                res = run_recipe(name, snapshot, config=config, flags=flags, options=opts)
            # an input counts where the recipe read it (slicing recipes read fewer)
            report.inputs += [row for option, row in given.items() if option in used]
        except ReconError as err:
            why_not[name] = f"recipe {name} failed: {err}"
            continue
        except Exception as err:  # noqa: BLE001 - one broken recipe must not hide the others
            why_not[name] = (f"recipe {name} crashed (a recon bug, please report): "
                             f"{type(err).__name__}: {err}")
            continue
        if not res.applicable:
            why_not[name] = f"recipe {name} not applicable: {res.reason}"
            continue
        report.recipes[name] = "ran"
        if memory_plan and name == "kv-capacity" and (res.undecided or "").startswith(
                "no memory plan"):
            report.recipes["memory plan"] = res.undecided.split("): ", 1)[-1]  # type: ignore[union-attr]
        unpredicted = res.values.get("unpredicted") or {}
        for q, reason in unpredicted.items():
            why_not[f"{name}:{q}"] = f"recipe {name}: not a prediction: {reason}"
        if name in checks:
            report.checks += [{"recipe": name, "level": f.level, "text": f.text}
                              for f in res.findings if f.level != "info"]
            continue
        for q, (value, key) in _predictions_of(res, name, engine, links).items():
            if q in unpredicted:
                continue  # made from a figure recon assumed: said, never compared
            if memory_plan and q in PLANNED and name != "kv-capacity":
                continue  # another recipe's child had no memory figure: the plan decides
            predicted.setdefault(q, (value, name, key))
            bounds = res.values.get(f"{key}_range")
            if memory_plan and q in PLANNED and isinstance(value, (int, float)):
                bounds = [value * (1 - PLAN_TOLERANCE), value * (1 + PLAN_TOLERANCE)]
                ranges.pop(q, None)  # the plan's accuracy, not the log's rounding
            if isinstance(bounds, list) and len(bounds) == 2:
                ranges.setdefault(q, (float(min(bounds)), float(max(bounds))))
    report.recipes.update({k: v for k, v in why_not.items()
                           if k not in report.recipes and ":" not in k})
    report.comparisons = _compare(log, predicted, why_not, engine, ranges, links, memory_plan)


def _recipe_options(name: str, log: ServerLog, options: dict[str, Any] | None,
                    settings: list[FromLog] | None,
                    memory_plan: bool) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """A recipe's options: the user's ``--set``, then what the log gives it (its measured
    inputs, and the settings its lines settle); ``given`` says which came from which line."""
    opts = dict(options or {})
    given: dict[str, dict[str, Any]] = {}
    for option, quantity in INPUTS.get(name, {}).items():
        if memory_plan and option == "available_kv_gib":
            continue  # predicted, then compared with the log's figure
        if option not in opts and quantity in log.observed:
            opts[option] = log.observed[quantity].value
            given[option] = {"recipe": name, "option": option, "quantity": quantity,
                             "value": opts[option], "line": log.observed[quantity].line}
    for s in settings or []:
        if s.option not in opts:
            opts[s.option] = s.value
            given[s.option] = {"recipe": name, "option": s.option, "quantity": s.why,
                               "value": s.value, "line": s.line}
    return opts, given


def _predictions_of(res: Any, name: str, engine: str,
                    links: list[Link]) -> dict[str, tuple[Any, str]]:
    out: dict[str, tuple[Any, str]] = {}
    for link in links:
        if link.recipe != name or link.engine != engine:
            continue
        for key in link.keys:
            found = [k for k in res.values if (k.startswith(key[:-1]) if key.endswith("*")
                                                else k == key) and res.values[k] is not None]
            if found:
                out[link.quantity] = (normalise(res.values[found[0]]), found[0])
                break
    for f in res.findings:
        prefix = next((p for p in _LOGGED if f.text.startswith(p)), None)
        if prefix is not None:
            hit = match_line(f.text[len(prefix):], engine)
            if hit is None:
                continue
            for q, v in hit.values.items():
                if q in QUANTITIES and q not in ("args", "resolved"):
                    out.setdefault(q, (v, "logged by the release's code"))
    return out


def _compare(log: ServerLog, predicted: dict[str, tuple[Any, str, str]],
             why_not: dict[str, str], engine: str,
             ranges: dict[str, tuple[float, float]] | None = None,
             links: list[Link] = LINKS, planned: bool = False) -> list[Comparison]:
    rows: list[Comparison] = []
    names = [lk.quantity for lk in links if lk.engine == engine]
    names += [q for q in predicted if q not in names]
    # a line a recipe said it gives no value for (made from a figure recon assumed)
    names += [k.split(":", 1)[1] for k in why_not if ":" in k and k.split(":", 1)[1] not in names]
    for q in names:
        obs = log.observed.get(q)
        label = QUANTITIES[q].label if q in QUANTITIES else q
        if q in predicted:
            value, recipe, key = predicted[q]
            if obs is None:
                rows.append(Comparison(q, label, None, None, value, recipe, key, "not in log",
                                       "predicted, but the log does not print it"))
                continue
            exact = same(obs.value, value, obs.raw)
            bounds = (ranges or {}).get(q)
            ok = exact or within(bounds, obs.value)
            note = "" if exact else f"within {bounds[0]:.6g}-{bounds[1]:.6g}" if ok and bounds \
                else _mismatch_note(recipe)
            if ok and not exact and planned and q in PLANNED:
                note += f" (the memory plan's {PLAN_TOLERANCE:.0%})"
            rows.append(Comparison(q, label, obs.value, obs.line, value, recipe, key,
                                   "match" if ok else "mismatch", note))
        elif obs is not None:
            link = next((lk for lk in links if lk.quantity == q and lk.engine == engine), None)
            why = (why_not.get(f"{link.recipe}:{q}") or why_not.get(link.recipe)) if link else None
            by: str | None = link.recipe if link else None
            if link is None:  # a recipe that said why it gives no value for a line it logs
                by, why = next(((k.split(":")[0], v) for k, v in why_not.items()
                                if k.endswith(f":{q}")), (None, None))
            note = why or (f"recipe {by} gave no value for it" if by else "")
            rows.append(Comparison(q, label, obs.value, obs.line, None, by, None,
                                   "no prediction", note))
    return rows


def _mismatch_note(recipe: str) -> str:
    return (f"recon bug, or config/flags/GPU other than given: see the assumptions in "
            f"`recon recipe run {recipe}` notes")


_PCT = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*%")


def normalise(value: Any) -> Any:
    """Recipe values as logs print them: ``"2.86%"`` -> 2.86, tuples -> lists."""
    if isinstance(value, str):
        m = _PCT.match(value)
        if m:
            return float(m.group(1))
        try:
            return json.loads(value)
        except ValueError:
            return value
    if isinstance(value, tuple):
        return list(value)
    return value


def within(bounds: tuple[float, float] | None, observed: Any) -> bool:
    """``observed`` lies in the predicted range (both ends of a rounded input)."""
    if bounds is None or isinstance(observed, bool) or not isinstance(observed, (int, float)):
        return False
    return bounds[0] - 1e-9 <= float(observed) <= bounds[1] + 1e-9


def same(observed: Any, predicted: Any, printed: str | None = None) -> bool:
    """Equal as far as the log's printed precision can tell."""
    if isinstance(observed, bool) or isinstance(predicted, bool):
        return bool(observed) == bool(predicted)
    if isinstance(observed, (int, float)) and isinstance(predicted, (int, float)):
        tol = 1e-9
        if printed and "." in printed:
            tol += 0.5 * 10 ** -len(printed.rsplit(".", 1)[1])
        elif isinstance(observed, float) or isinstance(predicted, float):
            tol += 1e-6 * max(abs(observed), abs(predicted))
        return abs(float(observed) - float(predicted)) <= tol
    if isinstance(observed, list) and isinstance(predicted, list):
        try:
            return sorted(observed) == sorted(predicted)
        except TypeError:
            return observed == predicted
    if isinstance(observed, str) and isinstance(predicted, str):
        return observed.strip().casefold() == predicted.strip().casefold()
    return observed == predicted
