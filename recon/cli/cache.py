"""``recon cache [ls]`` and ``recon cache prune --older-than DAYS``: what recon keeps, and clearing it."""

from __future__ import annotations

import datetime as _dt

import typer
from rich.markup import escape
from rich.table import Table

from .output import console, emit_json

cache_app = typer.Typer(help="What recon keeps in its cache folder (wheels, snapshots, "
                             "environments, ...), and removing old entries.",
                        no_args_is_help=False, invoke_without_command=True)


def _when(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M")


@cache_app.callback()
def _default(ctx: typer.Context) -> None:
    """With no subcommand: the same as ``recon cache ls``."""
    if ctx.invoked_subcommand is None:
        ls_cmd(kind=[], as_json=False)


@cache_app.command("ls")
def ls_cmd(
    kind: list[str] = typer.Option([], "--kind", "-k", help="Only this kind (repeatable)."),
    as_json: bool = typer.Option(False, "--json", help="Print the listing as JSON."),
) -> None:
    """Each kind of cached thing: how many entries, how many bytes, oldest and newest change."""
    from ..cache import human, usage
    from ..paths import cache_dir

    rows = usage(kind or None)
    if as_json:
        emit_json({"cache": str(cache_dir()), "bytes": sum(r.bytes for r in rows),
                   "kinds": [r.to_json() for r in rows]})
        return
    table = Table(title=escape(f"recon cache: {cache_dir()}"))
    for col in ("kind", "entries", "size", "oldest change", "newest change", "what"):
        table.add_column(col, justify="right" if col in ("entries", "size") else "left")
    for r in rows:
        times = [e.modified for e in r.entries]
        table.add_row(r.kind, str(len(r.entries)), human(r.bytes),
                      _when(min(times)) if times else "", _when(max(times)) if times else "",
                      r.what)
    table.add_row("total", str(sum(len(r.entries) for r in rows)),
                  human(sum(r.bytes for r in rows)), "", "", "")
    console.print(table)


@cache_app.command("prune")
def prune_cmd(
    older_than: float = typer.Option(..., "--older-than", metavar="DAYS",
                                     help="Remove entries not changed for this many days (0: all)."),
    kind: list[str] = typer.Option([], "--kind", "-k", help="Only this kind (repeatable)."),
    dry_run: bool = typer.Option(False, "--dry-run", "-n", help="Say what would go; remove nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print what was removed as JSON."),
) -> None:
    """Remove cached entries (one wheel, one environment, one snapshot) not changed for DAYS.

    A snapshot another recon process is reading, and a folder being written, stay (listed
    as in use). An engine-mode environment in use by a running server is not tracked:
    prune those while no engine-mode recon runs.
    """
    from ..cache import Entry, human, prune

    in_use: list[tuple[str, Entry]] = []
    gone = prune(older_than_days=older_than, kinds=kind or None, dry_run=dry_run,
                 in_use=in_use)
    freed = sum(e.bytes for _, e in gone)
    if as_json:
        emit_json({"dry_run": dry_run, "bytes": freed,
                   "entries": [{"kind": k, "name": e.name, "bytes": e.bytes,
                                "modified": e.modified} for k, e in gone],
                   "in_use": [{"kind": k, "name": e.name, "bytes": e.bytes} for k, e in in_use]})
        return
    verb = "would remove" if dry_run else "removed"
    for k, e in gone:
        console.print(f"{verb} {k}/{e.name} ({human(e.bytes)}, changed {_when(e.modified)})",
                      soft_wrap=True, highlight=False, markup=False)
    for k, e in in_use:
        console.print(f"kept {k}/{e.name} ({human(e.bytes)}): in use by a running recon",
                      soft_wrap=True, highlight=False, markup=False)
    console.print(f"{verb} {len(gone)} entr{'y' if len(gone) == 1 else 'ies'}, {human(freed)}",
                  highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(cache_app, name="cache")
