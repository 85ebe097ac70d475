"""Recipes: the questions investigators keep asking, answered by running the release's own code.

    from recon.recipes import run_recipe
    res = run_recipe("vllm-capture-sizes", "vllm-0.33.0",
                     flags="vllm serve m --max-num-seqs 16 --speculative-config '{...}'")
    print(res.to_markdown())
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import require_package
from ..snapshots.model import Snapshot
from .base import (
    Finding,
    NotApplicable,
    Options,
    Provenance,
    Recipe,
    RecipeContext,
    RecipeResult,
    Table,
    config_key,
    load_model_config,
    options_read,
    summarize,
)
from .flags import ServeFlags, parse_flags
from .registry import all_recipes, get, register


def require_needs(name: str) -> Recipe:
    """Recipe ``name``, once the optional packages it imports are known to be here.

    Callers that fetch a release first (the CLI, ``recon demo``) call this before
    the download, so a missing torch is said before minutes of work, not after.
    """
    recipe = get(name)
    for package in recipe.needs:
        require_package(package, f"recipe {recipe.name}")
    return recipe


def run_recipe(name: str, snapshot: Snapshot | str | Path, *, config: str | Path | dict[str, Any] | None = None,
               flags: str | list[str] | ServeFlags | None = None,
               options: dict[str, Any] | None = None) -> RecipeResult:
    """Run recipe ``name`` on a snapshot with a model config and serve flags."""
    recipe = require_needs(name)
    snap = snapshot if isinstance(snapshot, Snapshot) else Snapshot.open(snapshot)
    cfg = config if isinstance(config, dict) else load_model_config(config)
    ctx = RecipeContext(snap, cfg, flags, config_path=None if isinstance(config, dict) else
                        (str(config) if config else None), options=Options(options or {}))
    if recipe.engine not in ("any", snap.package):
        res = RecipeResult(recipe.name, snap.name, ctx.release, applicable=False,
                           reason=f"this recipe reads {recipe.engine}, the snapshot holds {snap.package}")
        res.summary = summarize(recipe, res)
        return res
    try:
        with options_read(ctx.options, f"recipe {recipe.name}"):
            res = recipe.run(ctx)
    except NotApplicable as err:  # the release lacks the logic: its options are moot
        res = RecipeResult(recipe.name, snap.name, ctx.release, applicable=False, reason=str(err))
        res.summary = summarize(recipe, res)
        return res
    if "flags" in vars(ctx) and ctx.flags.ignored:  # a slicing recipe read recon's flag table
        res.notes.append("flags not used by this recipe's table were ignored: "
                         + " ".join(ctx.flags.ignored))
    res.summary = res.summary or summarize(recipe, res)
    return res


__all__ = ["Finding", "NotApplicable", "Options", "Provenance", "Recipe", "RecipeContext", "RecipeResult",
           "ServeFlags", "Table", "all_recipes", "config_key", "get", "load_model_config",
           "options_read", "parse_flags", "register", "require_needs", "run_recipe"]
