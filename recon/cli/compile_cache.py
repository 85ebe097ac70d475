"""``recon compile-cache inspect DIR``: an offline look at a vLLM torch.compile cache folder."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape
from rich.table import Table

from ..errors import ReconError
from .output import console, emit_json

if TYPE_CHECKING:
    from ..engine.compile_cache import CompileCache
    from ..logs.cachedir import CacheDir, Entry

compile_cache_app = typer.Typer(help="A vLLM torch.compile cache folder, read as data: its "
                                     "entries, the broken or foreign ones, and which one a "
                                     "command line would load.", no_args_is_help=True)

#: exit status when an entry is incomplete, foreign or edited, or a link was met
DAMAGED_EXIT = 1


def _when(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M") if ts \
        else "-"


@compile_cache_app.command("inspect")
def inspect_cmd(
    folder: Path = typer.Argument(..., help="VLLM_CACHE_ROOT (or its torch_compile_cache), "
                                            "copied or mounted read-only; nothing is written."),
    snapshot: str | None = typer.Option(None, "--snapshot", "-s", help="With --config and "
                                        "--flags: the release whose key says which entry loads."),
    config: Path | None = typer.Option(None, "--config", help="The model's config.json."),
    flags: str | None = typer.Option(None, "--flags", help="The command line as typed."),
    env: list[str] = typer.Option([], "--env", help="NAME=VALUE in the engine's environment."),
    gpu: str | None = typer.Option(None, "--gpu", help="Declared GPU (default h100)."),
    llm: bool = typer.Option(False, "--llm", help="Usage context LLM(...)."),
    engine_transformers: str | None = typer.Option(None, "--engine-transformers",
                                                   help="The transformers where the engine runs."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Every entry of the folder (graphs and AOT functions): complete, incomplete, foreign."""
    from ..logs.cachedir import entries_json, inspect_dir, would_load

    found = inspect_dir(folder)
    loads = []
    if snapshot or flags or config:
        if not (snapshot and flags and config):
            raise ReconError("which entry loads needs --snapshot, --config and --flags together")
        cache = _key(snapshot, config, flags, env, gpu, llm, engine_transformers)
        loads = would_load(found, [k.hash for k in cache.aot], cache.env_hash, cache.config_hash)
    bad = [e for e in found.entries if e.problems]
    if as_json:
        emit_json({"root": found.root, "entries": entries_json(found), "links": found.links,
                   "truncated": found.truncated,
                   "would_load": [{"path": e.path, "why": why} for e, why in loads]})
    else:
        _show(found, bad, loads)
    if bad or found.links:
        raise typer.Exit(DAMAGED_EXIT)


def _key(snapshot: str, config: Path, flags: str, env: list[str], gpu: str | None, llm: bool,
         transformers: str | None) -> CompileCache:
    from ..engine.config import engine_config
    from ..slicing.runner import load_config
    from ..snapshots.cache import ensure_snapshot

    extra = dict(item.split("=", 1) for item in env if "=" in item)
    facts = engine_config(ensure_snapshot(snapshot), flags, load_config(config) or {}, gpu=gpu,
                          usage="llm" if llm else "serve", env=extra,
                          transformers_version=transformers)
    if facts.compile_cache is None:
        raise ReconError("the release gave no compile-cache key for this command line")
    return facts.compile_cache


def _show(found: CacheDir, bad: list[Entry], loads: list[tuple[Entry, str]]) -> None:
    graphs = sum(e.kind == "graphs" for e in found.entries)
    first = (f"{len(found.entries)} entries ({graphs} compiled-graph folders, "
             f"{len(found.entries) - graphs} AOT functions); ")
    first += f"{len(bad)} incomplete, foreign or edited." if bad else "all complete."
    console.print(first, markup=False)
    table = Table(title=f"torch.compile cache in {escape(found.root)}")
    for col in ("entry", "rank", "part", "compile ranges", "files", "newest write", "state"):
        table.add_column(col)
    for e in found.entries:
        table.add_row(escape(f"{e.kind} {e.name[:12]}"), escape(e.rank), escape(e.prefix or "-"),
                      escape(", ".join(e.ranges) or "-"), str(e.files), _when(e.newest),
                      escape(e.state))
    console.print(table)
    for e in bad:
        for problem in e.problems:
            console.print(f"{e.path}: {problem}", markup=False)
    for link in found.links:
        console.print(f"{link}: a symbolic link, not followed", markup=False)
    for e, why in loads:
        console.print(f"this command line would load {e.path}: {why}", markup=False)
    if found.truncated:
        console.print("the walk stopped early: more files than recon reads", markup=False)


def register(app: typer.Typer) -> None:
    app.add_typer(compile_cache_app, name="compile-cache")
