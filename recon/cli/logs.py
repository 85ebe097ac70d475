"""``recon logs SERVERLOG [--snapshot S --config C --flags "..."]``: read what the engine said.

Without a snapshot: the timeline, the numbers and the known traps. With one:
the matching recipes run on that release and every number the engine printed
is set beside recon's prediction. Exit status 1 when a prediction disagrees,
6 when none disagrees but a printed number has no prediction, so a script can gate on it.
"""

from __future__ import annotations

from pathlib import Path

import typer

from .output import console, emit_json
from .recipe import parse_sets

#: Exit status when no prediction disagrees but some number the engine printed has none:
#: "0 mismatches" over numbers recon did not compute is not an agreement.
UNPREDICTED_EXIT = 6


def logs_cmd(
    serverlog: Path = typer.Argument(..., help="The engine's log (docker/kubectl logs output; - reads stdin)."),
    snapshot: str | None = typer.Option(None, "--snapshot", "-s",
                                        help="Snapshot name/path, or any SOURCE (pip:vllm==0.33.0): "
                                             "compare with recon's predictions for this release."),
    config: Path | None = typer.Option(None, "--config", "-c", help="The model's config.json, or example:NAME for one shipped with recon."),
    flags: str | None = typer.Option(None, "--flags",
                                     help="The serve command line, quoted (default: recovered "
                                          "from the log's own argument line)."),
    sets: list[str] = typer.Option([], "--set", help="Recipe option KEY=VALUE, for every recipe."),
    engine: str | None = typer.Option(None, "--engine", help="vllm or sglang (default: detected)."),
    memory_plan: bool | None = typer.Option(
        None, "--memory-plan/--memory-from-log",
        help="vLLM: predict the memory section (weights, available KV memory, KV tokens) from "
             "the command line alone and compare it with the log's (the default, where the "
             "release allows a plan: otherwise the log's figure, said); --memory-plan insists "
             "(no plan: no prediction, exit 6); --memory-from-log starts from the log's "
             "'Available KV cache memory'."),
    runs: bool = typer.Option(False, "--runs",
                              help="The log holds several start-ups (a concatenation): compare "
                                   "their torch.compile caches (a folder of logs always is)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    markdown: Path | None = typer.Option(None, "--markdown",
                                         help="Also write the report as Markdown to this file "
                                              "('-' prints it instead of the tables)."),
) -> None:
    """Parse a vLLM/SGLang server log; with --snapshot, predicted vs observed (exit 1: a mismatch;
    6: a number the engine printed that recon could not predict)."""
    from ..acquire.writer import write_text
    from ..logs import analyze, render_console, render_markdown

    if runs or serverlog.is_dir():
        _runs(serverlog, as_json)
        return
    report = analyze(serverlog, snapshot=snapshot, config=config, flags=flags,
                     options=parse_sets(sets), engine=engine, memory_plan=memory_plan)
    if as_json:
        emit_json(report.to_json())
    elif markdown is None or str(markdown) != "-":
        render_console(report, console)
    if markdown is not None:
        if str(markdown) == "-":
            print(render_markdown(report))
        else:
            write_text(markdown, render_markdown(report))
    if report.mismatches:
        raise typer.Exit(1)
    if report.unpredicted:
        raise typer.Exit(UNPREDICTED_EXIT)


def _runs(path: Path, as_json: bool) -> None:
    """Several runs: which shared a compile cache folder, and who loaded what another wrote."""
    from rich.markup import escape
    from rich.table import Table

    from ..logs.runs import FIX, read_runs, reuses, run_rows, runs_json, story

    found = read_runs(path)
    if as_json:
        emit_json(runs_json(found))
        return
    loaded = reuses(found)
    console.print(f"{len(found)} runs; {len(loaded)} loaded a compile cache folder another run "
                  "had written." if loaded else f"{len(found)} runs; none loaded a compile cache "
                  "folder another run of these logs wrote.", markup=False)
    table = Table(title="the torch.compile cache of each run, in time order")
    for col in ("run", "first line", "graphs' folder", "AOT folder", "compile cache"):
        table.add_column(col)
    for row in run_rows(found):
        table.add_row(*(escape(c) for c in row))
    console.print(table)
    for line in story(found):
        console.print(line, markup=False)
    if loaded:
        console.print("fix: " + FIX, markup=False)


def register(app: typer.Typer) -> None:
    app.command("logs")(logs_cmd)
