"""vllm-compile-cache: the torch.compile cache folder a vLLM engine will load, named before it runs.

The release's own functions compute every factor in engine mode
(:mod:`recon.engine.compile_child`): ``envs.compile_factors()`` for the environment,
``VllmConfig.compute_hash()`` for the config, and the AOT key
(``aot_compile_hash_factors`` plus ``_model_hash_key`` of each compiled module's
``forward``). Two runs whose folder is the same load each other's compiled artefacts:
the field case behind this recipe lost two thirds of its speculative-decoding
acceptance to a cache a failed run had written.

Options (``--set``): ``engine_env`` (the engine's environment: a JSON object or
``NAME=VALUE,NAME=VALUE``; every vLLM variable it sets is hashed, and
``VLLM_LOGGING_LEVEL=DEBUG`` turns Inductor's runtime asserts on before torch 2.12,
which changes the config hash), ``engine_transformers`` (the transformers version
where the engine runs: the model config's JSON, which the config hash holds, names it),
``other_flags`` (a second command line for the same model, board and environment: do
the two share a folder, and what differs between them), ``gpu``, ``usage``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ...engine.compile_cache import CompileCache
from ..base import Finding, NotApplicable, Recipe, RecipeContext, RecipeResult, Table
from ..engine import engine_facts
from ..engine import result as engine_result
from ..registry import register

NAME = "vllm-compile-cache"
#: the answer's values, as ``recon logs`` and ``--json`` read them
KEYS = ("aot_compile_hash", "aot_compile_folder", "compile_env_hash", "compile_config_hash",
        "compile_cache_disabled")


def values_of(cache: CompileCache) -> dict[str, Any]:
    """The compile cache as a recipe's values (the backbone's AOT folder, the factors)."""
    backbone = cache.aot_for("backbone")
    out: dict[str, Any] = {"compile_env_hash": cache.env_hash,
                           "compile_config_hash": cache.config_hash,
                           "compile_cache_disabled": cache.disabled}
    if backbone is not None:
        out["aot_compile_hash"] = backbone.hash
        out["aot_compile_folder"] = backbone.folder
    for key in cache.aot:
        if key.tag != "backbone":
            out[f"aot_compile_hash_{key.tag}"] = key.hash
    return {k: v for k, v in out.items() if v is not None}


#: what each value depends on besides the command line, the config and the release
NEEDS = {"compile_env_hash": ("engine_env",),
         "compile_config_hash": ("engine_env", "engine_transformers"),
         "aot_compile_hash": ("engine_env", "engine_transformers")}
WHY = {"engine_env": "the engine's environment was not given (--set engine_env=NAME=VALUE,... "
                     "or engine_env={} for none; the release hashes every vLLM variable it sets, "
                     "and VLLM_LOGGING_LEVEL=DEBUG changes the config before torch 2.12)",
       "engine_transformers": "the engine's transformers version was not given (--set "
                              "engine_transformers=X: the config hash holds the model config "
                              "as that version writes it)"}


def unpredicted(options: dict[str, Any], values: dict[str, Any]) -> dict[str, str]:
    """The values that rest on an input recon assumed: shown, never counted as predictions.

    They move to ``<key>_assumed``; the reason is kept under ``unpredicted`` for ``recon logs``.
    """
    out = {}
    for key, needs in NEEDS.items():
        missing = [WHY[n] for n in needs if n not in options]
        if missing and key in values:
            values[f"{key}_assumed"] = values.pop(key)
            out[key] = "; ".join(missing)
    return out


def table_of(cache: CompileCache) -> Table:
    rows = [["environment", cache.env_hash or "-", "envs.compile_factors()"],
            ["config", cache.config_hash or "-", "VllmConfig.compute_hash()"]]
    rows += [[f"AOT: {k.tag}", k.hash, f"aot_compile_hash_factors + {k.module}.forward"]
             for k in cache.aot]
    rows += [[name, "-", f"not here: {why}"] for name, why in cache.not_computed.items()]
    return Table("what the release hashes into its compile cache's folder names",
                 ["factor", "hash", "from"], rows)


def left_out_table(cache: CompileCache) -> Table:
    rows = [[part, ", ".join(fields)] for part, fields in sorted(cache.left_out.items()) if fields]
    return Table("left out of each config part's own hash (the release asked, field by field); "
                 "such a field still changes the key where it changes a hashed one "
                 "(max_num_seqs -> capture sizes)", ["part", "fields"], rows)


def compare_with(ctx: RecipeContext, cache: CompileCache, facts: Any,
                 res: RecipeResult) -> None:
    """``--set other_flags=...``: the same model, board and environment, another command line."""
    other_ctx = dataclasses.replace(ctx, given=str(ctx.options["other_flags"]))
    other_facts, _ = engine_facts(other_ctx)
    other = other_facts.compile_cache
    if other is None:
        raise NotApplicable("the other command line gave no compile-cache answer")
    ours, theirs = cache.aot_for("backbone"), other.aot_for("backbone")
    same = ours is not None and theirs is not None and ours.hash == theirs.hash
    parts = sorted(k for k in set(cache.parts) | set(other.parts)
                   if cache.parts.get(k) != other.parts.get(k))
    settings = {k: (facts.facts.get(k), other_facts.facts.get(k)) for k in sorted(facts.facts)
                if k in other_facts.facts and facts.facts.get(k) != other_facts.facts.get(k)
                and not k.endswith(("_logged", "_resolved", "_stage"))}
    res.values["shares_compile_cache"] = same
    res.values["other_aot_compile_hash"] = theirs.hash if theirs else None
    res.values["differing_config_parts"] = parts
    res.values["differing_settings"] = {k: list(v) for k, v in settings.items()}
    said = ", ".join(f"{k} {_short(a)} vs {_short(b)}" for k, (a, b) in list(settings.items())[:6]) \
        or "nothing the release reports"
    if same:
        res.findings.append(Finding("warn", f"the two command lines share one compile cache "
                                            f"folder although they differ ({said}): the release "
                                            "leaves those out of its key"))
    else:
        res.findings.append(Finding("info", f"the two command lines use different folders: "
                                            f"their {', '.join(parts) or 'environment'} hash "
                                            f"differs ({said})"))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 32 else text[:29] + "..."


def run(ctx: RecipeContext) -> RecipeResult:
    facts, said = engine_facts(ctx)
    cache = facts.compile_cache
    if cache is None:
        raise NotApplicable("the release gave no compile-cache answer (engine mode's cache "
                            "phase did not run: see the warnings)")
    res = engine_result(NAME, ctx, facts, said, ())
    if cache.unavailable:
        raise NotApplicable(cache.unavailable)
    values = values_of(cache)
    assumed = unpredicted(ctx.options, values)
    res.values.update(values)
    if assumed:
        res.values["unpredicted"] = assumed
        res.findings.append(Finding("info", "not predictions, computed with what recon assumed: "
                                    + ", ".join(sorted(assumed)) + " (" +
                                    "; ".join(sorted(set(assumed.values()))) + ")"))
    res.tables.append(table_of(cache))
    if cache.left_out:
        res.tables.append(left_out_table(cache))
    if ctx.options.get("other_flags"):
        compare_with(ctx, cache, facts, res)
    if cache.disabled:
        res.findings.append(Finding("info", f"the engine will not use a compile cache: "
                                            f"{cache.disabled}"))
    if cache.aot_missing:
        res.findings.append(Finding("info", f"no AOT folder: {cache.aot_missing}"))
    res.findings.append(Finding("info", "the graphs' folder (torch_compile_cache/<10 hex>) also "
                                        "hashes " + " and ".join(sorted(cache.not_computed))
                                + ", which only the engine's machine has: two runs share it "
                                  "when the environment and config hashes above are equal on "
                                  "the same image and board"))
    return res


def summary(res: RecipeResult) -> str | None:
    folder = res.values.get("aot_compile_folder")
    if "aot_compile_hash_assumed" in res.values:
        return (f"With the environment and transformers recon assumed, the engine would keep its "
                f"compiled model in $VLLM_CACHE_ROOT/{folder}; give both to name it.")
    if res.values.get("compile_cache_disabled"):
        return f"The engine will not use a compile cache: {res.values['compile_cache_disabled']}."
    if not folder:
        return None
    return (f"The engine will keep and load its compiled model in $VLLM_CACHE_ROOT/{folder}; "
            "any run with the same folder loads what another wrote there.")


register(Recipe(
    name=NAME,
    engine="vllm",
    title="The torch.compile cache folder an engine will load, and what its key holds",
    why=("A speculative-decoding deployment lost two thirds of its acceptance rate to a shared "
         "compile cache that a failed run had written; nothing said which folder a run used or "
         "that two different runs mapped to the same one. The release's own hash functions name "
         "it before the engine starts."),
    reads_flags=[],
    reads_config=[],
    run=run,
    engine_mode=True,
    example=("--config example:llama-3.1-8b-instruct --flags 'vllm serve "
             "meta-llama/Llama-3.1-8B-Instruct' --set engine_env=CUDA_HOME=/usr/local/cuda"),
    demos=[("llama-3.1-8b-instruct.json", "vllm serve meta-llama/Llama-3.1-8B-Instruct")],
    needs=("torch",),
    summarize=summary,
))
