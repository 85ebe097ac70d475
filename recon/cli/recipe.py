"""``recon recipe list | show NAME | run NAME``."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape

from ..errors import DISTRIBUTION, ReconError
from .output import console, emit_json, err_console

#: ``recon recipe run``'s exit status when the release lacks the logic the recipe reads:
#: no answer is not a zero-status answer.
NOT_APPLICABLE_EXIT = 5
#: ... and when part of the answer is one the release cannot decide here (the rest is shown):
#: the status engine mode gives where it has no number (``EngineFailed``)
UNDECIDED_EXIT = 7
#: ... and when the answer is "no": an error finding (the engine will not start, the prompt will
#: not run, the release refuses the flags), as engine-config answers the same question
REFUSED_EXIT = 1

recipe_app = typer.Typer(help="Named investigations, answered by running the release's own code.",
                         no_args_is_help=True)


def parse_sets(items: list[str]) -> dict[str, object]:
    """``--set key=JSON`` (plain words are kept as strings)."""
    out: dict[str, object] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ReconError(f"--set wants KEY=VALUE, got {item!r}")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


@recipe_app.command("list")
def list_cmd(as_json: bool = typer.Option(False, "--json")) -> None:
    """Every recipe, with what it answers."""
    from rich.table import Table

    from ..recipes import all_recipes

    rows = [r.describe() for r in all_recipes()]
    if as_json:
        emit_json(rows)
        return
    t = Table(title="recipes")
    for col in ("name", "engine", "needs", "answers"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["name"], r["engine"], ", ".join(r["needs"]) or "-", r["title"])
    console.print(t)
    if any(r["needs"] for r in rows):
        console.print("needs: optional packages a recipe imports for real "
                      f"(torch: pip install '{DISTRIBUTION}[torch]', a CPU build is enough)", markup=False)


@recipe_app.command("show")
def show_cmd(name: str, as_json: bool = typer.Option(False, "--json")) -> None:
    """What a recipe reads, why it exists, and an example command line."""
    from ..recipes import get

    r = get(name).describe()
    if as_json:
        emit_json(r)
        return
    console.print(f"[bold]{r['name']}[/] ({r['engine']}): {r['title']}\n")
    console.print(r["why"] + "\n")
    read = ", ".join("--" + f.replace("_", "-") for f in r["reads_flags"]) or "none"
    if r["engine_mode"]:
        from ..recipes.engine import ENGINE_OPTIONS

        console.print("flags read:  all of them, by the release's own parser (engine mode); "
                      f"--set mode=slice reads {read} with recon's reading")
        console.print("config:      the whole config.json, through the release's config classes")
        console.print("options:     " + ", ".join(f"--set {o}=..." for o in ENGINE_OPTIONS))
    else:
        console.print("flags read:  " + read)
        console.print("config keys: " + (", ".join(r["reads_config"]) or "none"))
    if r["example"]:
        engine = "sglang" if r["engine"] == "sglang" else "vllm"
        console.print(f"example:     recon recipe run {r['name']} --snapshot pip:{engine} {r['example']}")


@recipe_app.command("run")
def run_cmd(
    name: str,
    snapshot: str = typer.Option(..., "--snapshot", "-s", help="Snapshot name/path, or any SOURCE (pip:vllm==0.33.0)."),
    config: Path | None = typer.Option(None, "--config", "-c", help="The model's config.json, or example:NAME for one shipped with recon."),
    flags: str | None = typer.Option(None, "--flags", help="Your serve command line, quoted."),
    sets: list[str] = typer.Option([], "--set", help="Recipe option KEY=VALUE (see recipe show)."),
    as_json: bool = typer.Option(False, "--json"),
    markdown: Path | None = typer.Option(None, "--markdown", help="Also write a Markdown section to this file ('-' prints it)."),
) -> None:
    """Run one recipe on a snapshot with your config and flags (exit 1: the answer is no, e.g. the
    engine will not start; 5: not applicable to that release; 7: not decided here)."""
    from ..acquire.writer import write_text
    from ..recipes import require_needs, run_recipe
    from ..snapshots.cache import ensure_snapshot

    require_needs(name)
    snap = ensure_snapshot(snapshot)
    res = run_recipe(name, snap, config=config, flags=flags, options=parse_sets(sets))
    if as_json:
        emit_json(res.to_json())
    elif markdown is None or str(markdown) != "-":
        res.render(console)
    if markdown is not None:
        if str(markdown) == "-":
            print(res.to_markdown())
        else:
            write_text(markdown, res.to_markdown())
    if not res.applicable:
        raise typer.Exit(NOT_APPLICABLE_EXIT)
    if res.undecided:
        err_console.print(f"[red]recon: not decided here:[/] {escape(str(res.undecided))}")
        raise typer.Exit(UNDECIDED_EXIT)
    refused = [f.text for f in res.findings if f.level == "error"]
    if refused:
        err_console.print(f"[red]recon: the answer is no:[/] {escape(refused[0])}")
        raise typer.Exit(REFUSED_EXIT)


def register(app: typer.Typer) -> None:
    app.add_typer(recipe_app, name="recipe")
