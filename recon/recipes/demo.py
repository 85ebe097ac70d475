"""``recon demo``: the README's main job, on built-in defaults.

Snapshots the latest vLLM and SGLang releases from PyPI (cached after the
first run), runs every recipe on the example configs shipped in ``recon/examples``
with the serve flags each recipe declares as typical, and writes one Markdown
report. Everything it prints comes from running the releases' own code.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any

from ..examples import path as example_path
from ..snapshots.cache import ensure_snapshot
from ..snapshots.model import Snapshot
from . import RecipeResult, all_recipes, require_needs, run_recipe


@dataclass
class DemoReport:
    snapshots: dict[str, Snapshot]
    results: list[tuple[str, str, RecipeResult]] = field(default_factory=list)  # (config, flags, result)

    def to_markdown(self) -> str:
        when = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        out = ["# recon demo", "", f"Generated {when}. Releases:", ""]
        for engine, snap in self.snapshots.items():
            out.append(f"- {engine} {snap.version} (`{snap.manifest.source.get('ref')}`, "
                       f"{snap.manifest.source.get('digest', '')})")
        out.append("")
        for cfg, flags, res in self.results:
            out += [f"## {res.recipe} — `{cfg or 'no config'}`", "", f"Flags: `{flags or '(none)'}`", "",
                    res.to_markdown(), ""]
        return "\n".join(out)

    def to_json(self) -> dict[str, Any]:
        return {"snapshots": {k: v.name for k, v in self.snapshots.items()},
                "results": [{"config": c, "flags": f, "result": r.to_json()} for c, f, r in self.results]}


def run_demo(*, vllm: str = "vllm", sglang: str = "sglang", only: list[str] | None = None,
             on_result: Any = None) -> DemoReport:
    """Snapshot both engines from PyPI and run every recipe's demo cases."""
    for recipe in all_recipes():
        if not only or recipe.name in only:
            require_needs(recipe.name)
    snaps = {"vllm": ensure_snapshot(f"pip:{vllm}"), "sglang": ensure_snapshot(f"pip:{sglang}")}
    report = DemoReport(snaps)
    for recipe in all_recipes():
        if only and recipe.name not in only:
            continue
        engine = recipe.engine if recipe.engine != "any" else "vllm"
        for cfg_name, flags in recipe.demos or [(None, recipe.example)]:
            cfg = example_path(cfg_name) if cfg_name else None
            res = run_recipe(recipe.name, snaps[engine], config=cfg, flags=flags,
                             options=dict(recipe.demo_options))
            report.results.append((cfg_name or "", flags, res))
            if on_result is not None:
                on_result(cfg_name, flags, res)
    return report
