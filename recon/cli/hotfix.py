"""``recon hotfix``: a thin layer over :func:`recon.hotfix.make_hotfix`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape

from ..paste import host
from .output import console, emit_json

if TYPE_CHECKING:
    from ..hotfix import HotfixResult

#: Exit status when the change is refused as a hotfix (other errors keep ReconError's 2).
REFUSED_EXIT = 6
_STATUS_STYLE = {"same": "green", "in-file": "green", "changed": "yellow", "missing": "red",
                 "new-import": "red", "compiled": "red", "unknown": "dim"}


def hotfix_cmd(
    snapshot: str = typer.Argument(..., help="The image's snapshot: a name or folder, or any SOURCE (docker:IMAGE, pip:vllm==0.29.0)."),
    fixed_in: str = typer.Option(None, "--from", help="A release or snapshot that has the fix, e.g. pip:vllm==0.32.0."),
    function: list[str] = typer.Option([], "--function", help="Function, method or class to take from --from: module:Class.method or a unique suffix (repeatable; all in one file)."),
    patch: Path = typer.Option(None, "--patch", help="A unified diff (git diff, diff -u) of one Python file of the package, instead of --function."),
    out: Path = typer.Option(None, "-o", "--output", "--out", help="Hotfix folder to write (without it: prove only, write nothing there)."),
    recipe: str = typer.Option(None, "--recipe", help="A recipe that shows the bug, run on the image's release and on the patched one."),
    config: Path = typer.Option(None, "--config", "-c", help="The model's config.json for --recipe, or example:NAME."),
    flags: str = typer.Option(None, "--flags", help="Your serve command line for --recipe, quoted."),
    sets: list[str] = typer.Option([], "--set", help="Option KEY=VALUE of --recipe (see recon recipe show NAME)."),
    site: str = typer.Option(None, "--site", help="The folder that holds the package inside the image, when the snapshot does not say (wheel, pip, dir)."),
    python: str = typer.Option(None, "--python", help="The image's Python for the verify lines (default: the one the manifest names, else python3)."),
    package: str = typer.Option(None, "--package", help="Package to take from images holding several."),
    force: bool = typer.Option(False, "--force", help="Replace an existing hotfix folder recon wrote (never anything else)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """The one-file fix, built from the release that has it, proven, and mounted read-only.

    Replaces exactly the named functions, methods or classes of the image's file
    with the fixed release's (or applies --patch), everything else byte-identical;
    refuses (exit 6) when the new code needs names the image's release lacks,
    touches compiled code, or changes more than the named pieces; proves it on a
    patched snapshot (re-indexed, recon has, verify_hotfix.py, --recipe before and
    after); writes the patched file, the diff, hotfix.json and a README with
    docker run / compose / Kubernetes mount, verify and rollback lines.
    """
    from ..hotfix import HotfixRefused, make_hotfix
    from .recipe import parse_sets

    if recipe is not None:
        from ..recipes import require_needs

        require_needs(recipe)
    try:
        result = make_hotfix(snapshot, fixed_in=fixed_in, functions=list(function), patch=patch,
                             recipe=recipe, config=config, flags=flags,
                             options=parse_sets(list(sets)), site=site, python=python,
                             package=package, output=out, force=force)
    except HotfixRefused as err:
        typer.echo(f"recon: error: {err}", err=True)
        raise typer.Exit(REFUSED_EXIT) from err
    if as_json:
        emit_json({"kind": "recon-hotfix", **result.to_json()})
        return
    _print(result)


def _print(result: HotfixResult) -> None:
    from rich.table import Table

    from ..diffing import highlighted

    snap = result.snapshot
    source = result.fixed_in["label"] if result.fixed_in else (result.patch or {}).get("path")
    console.print(f"[bold]hotfix[/] {escape(result.file)} of {escape(snap['label'])} "
                  f"(snapshot {escape(snap['name'])}), pieces from {escape(str(source))}")
    pieces = Table("piece", "kind", "image lines", "patched lines", "fixed in")
    for p in result.pieces:
        pieces.add_row(escape(p.qualname), p.kind, f"{p.image_lines[0]}-{p.image_lines[1]}",
                       f"{p.patched_lines[0]}-{p.patched_lines[1]}", escape(p.fixed_location or "-"))
    console.print(pieces)
    console.print(highlighted(result.diff.splitlines()), end="", soft_wrap=True)
    _print_closure(result)
    _print_proof(result)
    m = result.mount
    console.print(f"mount read-only over [bold]{escape(m['target'])}[/]"
                  + ("" if m["site_known"] else " (SITE: give --site, or run the README's 'where' "
                                                "line in the image)"))
    line = (f"-v {host(result.output + '/' + m['file'], tail=':' + m['target'] + ':ro')}"
            if result.output else m["docker_run"])  # the folder's own path; the README's: relative
    console.print(f"  docker run ... {escape(line)} IMAGE ...", soft_wrap=True)
    if result.output:
        console.print(f"written: [bold]{escape(result.output)}[/] (README.md: compose, "
                      "Kubernetes, verify, rollback)")
    else:
        console.print("no -o: nothing written but the patched snapshot "
                      f"{escape(result.patched_snapshot['name'])}")
    console.print(f"[dim]{result.seconds:.1f}s[/]")


def _print_closure(result: HotfixResult) -> None:
    from rich.table import Table

    rows = [r for r in result.closure if r.status != "same" or r.detail]
    same = len(result.closure) - len(rows)
    table = Table("name read", "status", "in the patched image", "in the fix's release", "detail",
                  title=f"what the new code reads ({same} more the same on both sides)")
    for r in rows:
        style = _STATUS_STYLE.get(r.status, "")
        table.add_row(escape(r.name), f"[{style}]{r.status}[/]", escape(r.image or "-"),
                      escape(r.fixed or "-"), escape(r.detail))
    if rows:
        console.print(table)
    else:
        console.print(f"what the new code reads: {same} names, all the same on both sides")


def _print_proof(result: HotfixResult) -> None:
    proof = result.proof
    for q, row in proof.reindexed.items():
        console.print(f"[green]   ok[/] {escape(q)}: {escape(row['verdict'])}", soft_wrap=True)
    if proof.verify:
        checks = ", ".join(c["check"] for c in proof.verify)
        console.print(f"[green]   ok[/] verify_hotfix.py on the patched snapshot's file ({checks})")
    for row in proof.has:
        style = "green" if row["answer"] == "yes" else "yellow"
        console.print(f"[{style}]{row['answer']:>5}[/] recon has {escape(row['qualname'])} "
                      f"--fixed-in {escape(row['fixed'])}", soft_wrap=True)
    if proof.recipe is not None:
        _print_recipe(proof.recipe.to_json())
    for w in proof.warnings:
        console.print(f"[yellow] warn[/] {escape(w)}", soft_wrap=True)


def _print_recipe(recipe: dict) -> None:
    from rich.table import Table

    keys = list(dict.fromkeys([*recipe["before"].get("values", {}),
                               *recipe["after"].get("values", {})]))
    table = Table("", "image", "patched", title=f"{recipe['recipe']} before and after")
    for key in keys:
        table.add_row(escape(key), escape(str(recipe["before"]["values"].get(key, "-"))),
                      escape(str(recipe["after"]["values"].get(key, "-"))))
    table.add_row("errors", str(len(recipe["errors_before"])), str(len(recipe["errors_after"])))
    console.print(table)
    for text in recipe["errors_before"]:
        console.print(f"[red]error[/] image: {escape(text)}", soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("hotfix")(hotfix_cmd)
