"""``recon index``, ``recon find``, ``recon chain``: thin layers over recon.index/find/chain."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape

from ..errors import ReconError
from .output import console, emit_json, err_console

if TYPE_CHECKING:
    from rich.text import Text

    from ..index import ClassInfo, FunctionInfo, SnapshotIndex
    from ..index.chain import ChainResult
    from ..index.find import Hit


def _load(snapshot: str, workers: int | None = None, cache: bool = True) -> SnapshotIndex:
    """Index a snapshot name or path, or any SOURCE (snapshotted once and cached, as every verb does)."""
    from ..index import load_index
    from ..snapshots.cache import ensure_snapshot

    return load_index(ensure_snapshot(snapshot), workers=workers, cache=cache)


def index_cmd(
    snapshot: str = typer.Argument(..., help="Snapshot name or folder, or any SOURCE (pip:vllm==0.33.0, dir:PATH, ...)."),
    workers: int = typer.Option(None, "--jobs", "-j", "--workers", help="Parsing processes (default: all CPUs; 0: none)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Neither read nor write the per-file cache."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Index a snapshot (parse every .py file once; later commands reuse the cache)."""
    from rich.table import Table

    idx = _load(snapshot, workers, not no_cache)
    data = idx.summary()
    if as_json:
        emit_json(data)
        return
    st = idx.stats
    console.print(f"[bold]{escape(idx.label)}[/]: {len(idx.modules)} modules, {len(idx.classes)} classes, "
                  f"{len(idx.functions)} functions")
    console.print(f"{st.files} files: {st.parsed} parsed ({st.workers or 'no'} worker processes), "
                  f"{st.cached} from cache, in {st.seconds:.2f}s")
    if idx.edited:
        err_console.print(f"[yellow]{len(idx.edited)} files differ from the snapshot's manifest "
                          f"(edited since it was taken; indexed as they are now), e.g. "
                          f"{escape(idx.edited[0])}[/]")
    if idx.errors:
        table = Table("file", "error", title=f"{len(idx.errors)} files failed to parse")
        for path, msg in sorted(idx.errors.items()):
            table.add_row(escape(path), escape(msg))
        console.print(table)


def find_cmd(
    snapshot: str = typer.Argument(..., help="Snapshot name or folder, or any SOURCE (pip:vllm==0.33.0, dir:PATH, ...)."),
    name: str = typer.Argument(None, help="Qualname glob, e.g. '*:*.add_request' or 'vllm.config.*:CompilationConfig.*'."),
    regex: str = typer.Option(None, "--regex", "-e", help="Functions whose source matches this regex."),
    pattern: str = typer.Option(None, "--pattern", "-p", help="Structural pattern, e.g. '$X // self.cache_config.block_size'."),
    classes: bool = typer.Option(False, "--classes", help="Name search: list classes too."),
    limit: int = typer.Option(200, "--limit", help="Show at most this many results."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Find functions by name glob, by regex over their source, or by code structure.

    With --regex or --pattern, NAME (if given) restricts the search to the functions it matches.
    """
    from rich.table import Table

    from ..index import FunctionInfo
    from ..index.find import find_names, find_pattern, find_regex

    if not (name or regex or pattern):
        raise ReconError("give a name glob, --regex or --pattern")
    if regex and pattern:
        raise ReconError("give --regex or --pattern, not both")
    idx = _load(snapshot)
    if regex or pattern:
        hits = find_regex(idx, regex, within=name) if regex else find_pattern(idx, pattern, within=name)
        if as_json:
            emit_json({"snapshot": idx.snapshot.name, "query": regex or pattern, "count": len(hits),
                       "hits": [h.to_json() for h in hits[:limit]]})
            return
        _print_hits(hits, limit)
        return
    infos = find_names(idx, name, classes=classes)
    if as_json:
        emit_json({"snapshot": idx.snapshot.name, "query": name, "count": len(infos),
                   "results": [_info_json(i) for i in infos[:limit]]})
        return
    table = Table("qualname", "where", "signature / bases", title=f"{len(infos)} matches in {idx.label}")
    for info in infos[:limit]:
        detail = info.signature if isinstance(info, FunctionInfo) else "(" + ", ".join(info.bases) + ")"
        table.add_row(escape(info.qualname), escape(f"{info.path}:{info.def_lineno}"), escape(detail))
    console.print(table)
    if len(infos) > limit:
        console.print(f"... {len(infos) - limit} more (raise --limit)")


def _info_json(info: FunctionInfo | ClassInfo) -> dict[str, object]:
    from ..index import FunctionInfo

    if isinstance(info, FunctionInfo):
        return {"type": "function", "qualname": info.qualname, "path": info.path,
                "lineno": info.lineno, "def_lineno": info.def_lineno, "end_lineno": info.end_lineno,
                "kind": info.kind, "async": info.is_async, "signature": info.signature,
                "decorators": list(info.decorators), "ast_hash": info.ast_hash}
    return {"type": "class", "qualname": info.qualname, "path": info.path, "lineno": info.lineno,
            "def_lineno": info.def_lineno, "end_lineno": info.end_lineno, "bases": list(info.bases)}


def _print_hits(hits: list[Hit], limit: int) -> None:
    from rich.text import Text

    for hit in hits[:limit]:
        console.print(Text.assemble((hit.qualname, "bold cyan"), "  ", (f"{hit.path}:{hit.lineno}", "dim")))
        for m in hit.lines:
            line = Text(m.text.rstrip())
            for a, b in m.spans:
                line.stylize("bold black on yellow", a, b)
            console.print(Text.assemble((f"  {m.lineno:>6} | ", "dim"), line))
    console.print(f"{len(hits)} functions matched" + (f" (showing {limit})" if len(hits) > limit else ""))


def chain_cmd(
    snapshot: str = typer.Argument(..., help="Snapshot name or folder, or any SOURCE (pip:vllm==0.33.0, dir:PATH, ...)."),
    to: str = typer.Option(..., "--to", help="Target function (qualname, dotted name or unique suffix)."),
    source: str = typer.Option(None, "--from", help="Also list the call paths from this function to the target."),
    depth: int = typer.Option(3, "--depth", "-d", help="Caller and callee levels to walk."),
    direction: str = typer.Option("both", "--direction", help="callers, callees or both."),
    keep: int = typer.Option(None, "--keep", help="Write a pruned snapshot with the N most relevant files."),
    out: Path = typer.Option(None, "--out", help="Folder that holds snapshots: --keep writes a new one "
                             "inside it, named <parent>--<target> (default: snapshots/)."),
    name: str = typer.Option(None, "--name", help="Name of the --keep snapshot (default: <parent>--<target>)."),
    force: bool = typer.Option(False, "--force", help="Replace a kept snapshot of that name (only a "
                               "snapshot recon wrote there; nothing else is ever replaced)."),
    fmt: str = typer.Option("tree", "--format", help="tree, dot, mermaid or svg."),
    output: Path = typer.Option(None, "--output", "-o", help="Write the dot/mermaid/svg picture to this file."),
    budget: float = typer.Option(10.0, "--budget", help="Seconds before the answer is returned as partial."),
    max_nodes: int = typer.Option(5000, "--max-nodes", help="Graph size before the answer is returned as partial."),
    show_unresolved: bool = typer.Option(False, "--unresolved", help="List the calls that could not be resolved."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Callers, callees and call paths of a function, and the files they live in."""
    from ..index.chain import chain, keep_files, render, write_picture
    from ..index.graph import Budget

    if direction not in ("both", "callers", "callees"):
        raise ReconError("--direction must be callers, callees or both")
    idx = _load(snapshot)
    result = chain(idx, to, source=source, depth=depth, budget=Budget(seconds=budget, max_nodes=max_nodes),
                   callers=direction != "callees", callees=direction != "callers")
    kept = keep_files(idx, result, keep, out=out, name=name, force=force) if keep else None
    picture = render(idx, result, fmt) if fmt != "tree" else None
    if picture is not None:
        if output is not None:
            write_picture(picture, output)
        elif not as_json:
            sys.stdout.write(picture)
            return
    if as_json:
        data = result.to_json()
        if kept is not None:
            data["kept"] = {"path": str(kept.root), "files": sorted(kept.files)}
        if picture is not None:
            data["picture"] = str(output) if output is not None else picture
        emit_json(data)
        return
    _print_chain(idx, result, show_unresolved)
    if output is not None:
        console.print(f"picture written to {output}", markup=False)
    if kept is not None:
        console.print(f"pruned snapshot with {len(kept.files)} files written to [bold]{escape(str(kept.root))}[/]")


def _short(idx: SnapshotIndex, q: str) -> Text:
    from rich.text import Text

    from ..index import split_qualname

    module, local = split_qualname(q)
    fn = idx.functions.get(q)
    where = f"{fn.path}:{fn.def_lineno}" if fn else idx.modules[module].path if module in idx.modules else ""
    return Text.assemble((local, "bold"), "  ", (module, "cyan"), "  ", (where, "dim"))


def _print_chain(idx: SnapshotIndex, r: ChainResult, show_unresolved: bool) -> None:
    from rich.table import Table
    from rich.text import Text
    from rich.tree import Tree

    from ..index import split_qualname

    g = r.graph
    root = Tree(Text.assemble(("target ", "yellow"), _short(idx, r.target)))
    kinds = {(a, b): k for a, b, k, _ in r.edges}

    def grow(branch: Tree, q: str, up: bool, seen: set[str], level: int) -> None:
        nbrs = sorted(g.predecessors(q) if up else g.successors(q))
        for n in nbrs:
            if (r.callers if up else r.callees).get(n) != level:
                continue
            kind = kinds.get((n, q) if up else (q, n), "call")
            label = _short(idx, n)
            if kind != "call":
                label = Text.assemble((f"[{kind}] ", "magenta"), label)
            if n in seen:
                branch.add(Text.assemble(label, (" (above)", "dim")))
                continue
            seen.add(n)
            grow(branch.add(label), n, up, seen, level + 1)

    if r.callers:
        grow(root.add(Text("callers", style="green")), r.target, True, {r.target}, 1)
    if r.callees:
        grow(root.add(Text("callees", style="green")), r.target, False, {r.target}, 1)
    console.print(root)
    for path in r.paths:
        console.print(Text.assemble(("path: ", "green"), " -> ".join(split_qualname(q)[1] for q in path)))
    if r.source and not r.paths:
        console.print(f"[yellow]no path from {escape(r.source)} found within the depth[/]")
    table = Table("#", "file", "chain functions", "distance", title="files on the chain")
    for i, f in enumerate(r.files, 1):
        table.add_row(str(i), escape(f.path), str(f.count), str(f.distance))
    console.print(table)
    console.print(f"{len(r.unresolved)} unresolved calls, {r.external} calls leaving the package, "
                  f"{r.seconds:.2f}s" + (" (--unresolved lists them)" if r.unresolved and not show_unresolved else ""))
    if show_unresolved:
        t = Table("caller", "line", "call", "why", title="unresolved calls")
        for s in r.unresolved:
            t.add_row(escape(split_qualname(s.caller)[1]), str(s.lineno), escape(s.text), escape(s.detail))
        console.print(t)
    if r.partial:
        err_console.print(f"[yellow]partial answer: {escape(str(r.reason))}[/]")


def register(app: typer.Typer) -> None:
    app.command("index")(index_cmd)
    app.command("find")(find_cmd)
    app.command("chain")(chain_cmd)
