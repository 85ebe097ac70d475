"""``recon demo``: the whole job on built-in defaults (latest vLLM and SGLang, example configs)."""

from __future__ import annotations

from pathlib import Path

import typer

from .output import console, emit_json


def demo_cmd(
    vllm: str = typer.Option("vllm", help="pip spec of the vLLM release (default: latest)."),
    sglang: str = typer.Option("sglang", help="pip spec of the SGLang release (default: latest)."),
    only: list[str] = typer.Option([], "--only", help="Run only these recipes."),
    report: Path = typer.Option(Path("reports/demo.md"), "--report", help="Markdown report path."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Snapshot the latest vLLM and SGLang from PyPI and run every recipe on the example configs."""
    from ..acquire.writer import write_text
    from ..recipes.demo import run_demo

    if not as_json:
        console.print("[bold]recon demo[/]: snapshotting vLLM and SGLang from PyPI (cached after the first run)")

    def show(cfg: str | None, flags: str, res) -> None:  # noqa: ANN001
        if not as_json:
            console.rule(f"{res.recipe} · {cfg or 'no config'}")
            console.print(f"[dim]flags: {flags}[/]")
            res.render(console)

    rep = run_demo(vllm=vllm, sglang=sglang, only=only or None, on_result=show)
    write_text(report, rep.to_markdown())
    if as_json:
        emit_json(rep.to_json())
    else:
        console.print(f"\n[green]report written:[/] {report}")


def register(app: typer.Typer) -> None:
    app.command("demo")(demo_cmd)
