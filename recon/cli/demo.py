"""``recon demo``: the whole job on built-in defaults (latest vLLM and SGLang, example configs).

Each section stands alone: a failure is one line (in the section, in the summary, and on
stderr as it happens) and the exit status is 1 at the end. stderr gets a line per finished
section; the report is rewritten after each one; stdout opens with the summary table.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape

from .output import console, emit_json, err_console

if TYPE_CHECKING:
    from ..recipes.demo import DemoReport, Section


def demo_cmd(
    vllm: str = typer.Option("vllm", help="pip spec of the vLLM release (default: latest), "
                             "or any SOURCE (docker:..., wheel:...) or snapshot folder."),
    sglang: str = typer.Option("sglang", help="pip spec of the SGLang release (default: latest), "
                               "or any SOURCE or snapshot folder."),
    only: list[str] = typer.Option([], "--only", help="Run only these recipes."),
    report: Path = typer.Option(Path("reports/demo.md"), "--report",
                                help="Markdown report path (rewritten after every section)."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Snapshot the latest vLLM and SGLang from PyPI and run every recipe on the example configs."""
    from ..recipes.demo import check_runnable, plan_demo, run_demo

    total = len(sections := plan_demo(only or None))
    check_runnable(sections)
    err_console.print(f"recon demo: {total} section{'s' if total != 1 else ''}; releases from PyPI (cached after the first run); "
                      f"the report is written as it goes: {report}", markup=False, soft_wrap=True)

    def said(section: Section, n: int, of: int) -> None:
        err_console.print(f"[{n}/{of}] {section.label} ({section.release}, {section.seconds or 0:.0f} s): "
                          f"{section.answer}", markup=False, soft_wrap=True)

    rep = run_demo(vllm=vllm, sglang=sglang, only=only or None, report=report, on_section=said)
    if as_json:
        emit_json(rep.to_json())
    else:
        show(rep)
        console.print(f"\n[green]report written:[/] {escape(str(report))}")
    if rep.failed:
        err_console.print(f"recon demo: {rep.tally()}", markup=False, soft_wrap=True)
        raise typer.Exit(1)


def show(rep: DemoReport) -> None:
    """The summary table, then every section as it answered (or its failure line)."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"recon demo: {rep.tally()}")
    for column in ("#", "section", "release", "answer", "seconds"):
        table.add_column(column, justify="right" if column in ("#", "seconds") else "left")
    for row in rep.summary_rows():
        table.add_row(*(Text(cell) for cell in row))
    console.print(table)
    for section in rep.sections:
        if section.seconds is None:
            continue
        console.rule(section.label)
        console.print(f"flags: {section.flags}", style="dim", markup=False)
        if section.result is None:
            console.print(f"failed: {section.failure}", style="red", markup=False)
        else:
            section.result.render(console)


def register(app: typer.Typer) -> None:
    app.command("demo")(demo_cmd)
