"""``recon chain``: the code path around one function, and the files that hold it.

Given a target (and optionally a starting function), walk the on-demand call
graph (:mod:`recon.index.graph`) up to its callers and down to its callees, find
the paths from the start to the target, and rank the snapshot's files by
how many chain functions they hold. The ranking is what ``--keep N`` uses
to write the investigation's reference snapshot: the N most relevant files,
byte-exact, with a manifest that points to the parent snapshot and keeps
each file's provenance. The chain can also be drawn (Graphviz dot, SVG
through Graphviz, or Mermaid).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx

from ..acquire.writer import TreeWriter, commit, staging, write_json, write_text
from ..errors import ReconError
from ..paths import snapshots_dir
from ..snapshots.cache import is_recon_snapshot
from ..snapshots.model import MANIFEST, FileRecord, Manifest, Snapshot
from .graph import Budget, CallGraph, CallSite
from .models import FunctionInfo, split_qualname
from .snapshot_index import SnapshotIndex

#: How many paths from --from to --to are listed (shortest first).
MAX_PATHS = 20


@dataclass
class FileRank:
    """One file of the chain: how many chain functions it holds and how close they are."""

    path: str
    functions: list[str]
    distance: int  # fewest call edges between one of its functions and the target

    @property
    def count(self) -> int:
        return len(self.functions)


@dataclass
class ChainResult:
    """The answer to one chain query (plain data; ``to_json`` for scripts)."""

    snapshot: str
    target: str
    source: str | None
    depth: int
    callers: dict[str, int]  # qualname -> distance above the target (1: direct caller)
    callees: dict[str, int]  # qualname -> distance below the target
    paths: list[list[str]]  # from source to target, shortest first
    files: list[FileRank]
    edges: list[tuple[str, str, str, list[int]]]  # (caller, callee, kind, call lines) in the chain
    unresolved: list[CallSite]  # unresolved call sites of the chain's functions
    external: int  # call sites that leave the package
    partial: bool
    reason: str | None
    seconds: float
    graph: nx.DiGraph = field(repr=False)

    @property
    def nodes(self) -> list[str]:
        return list(self.graph.nodes)

    def to_json(self) -> dict[str, Any]:
        return {
            "snapshot": self.snapshot, "target": self.target, "source": self.source,
            "depth": self.depth, "partial": self.partial, "reason": self.reason,
            "seconds": round(self.seconds, 3),
            "callers": self.callers, "callees": self.callees, "paths": self.paths,
            "files": [{"path": f.path, "count": f.count, "distance": f.distance,
                       "functions": f.functions} for f in self.files],
            "edges": [{"caller": a, "callee": b, "kind": k, "lines": lines}
                      for a, b, k, lines in self.edges],
            "unresolved": [{"caller": s.caller, "line": s.lineno, "call": s.text, "why": s.detail}
                           for s in self.unresolved],
            "unresolved_count": len(self.unresolved), "external_count": self.external,
        }


def chain(index: SnapshotIndex, to: str, *, source: str | None = None, depth: int = 3,
          callers: bool = True, callees: bool = True, budget: Budget | None = None,
          graph: CallGraph | None = None) -> ChainResult:
    """Callers and callees of ``to`` up to ``depth`` edges, and paths from ``source`` to it.

    ``to``/``source`` accept any form :meth:`SnapshotIndex.lookup` accepts
    (a wrong name raises one ReconError line with close matches). Paths
    from ``source`` are searched ``max(depth, 6)`` edges deep. The answer is
    marked ``partial`` when the budget ran out.
    """
    start = time.perf_counter()
    budget = budget or Budget()
    target = index.lookup(to).qualname
    src = index.lookup(source).qualname if source else None
    cg = graph or CallGraph(index)
    g = cg.graph
    cg.add_node(target)
    if src is not None:
        cg.add_node(src)
    up = _walk(cg, target, depth, "up", budget) if callers else {target: 0}
    down = _walk(cg, target, depth, "down", budget) if callees else {target: 0}
    paths: list[list[str]] = []
    if src is not None:
        _walk(cg, src, max(depth, 6), "down", budget, stop=target)
        paths = _paths(g, src, target)
    members: dict[str, int] = {}
    for table in (up, down):
        for q, d in table.items():
            members[q] = min(d, members.get(q, d))
    for path in paths:
        for i, q in enumerate(path):
            members.setdefault(q, len(path) - 1 - i)
    sub = g.subgraph(members).copy()
    edges = [(a, b, d["kind"], sorted(d["lines"])) for a, b, d in sub.edges(data=True)
             if _in_chain(a, b, up, down, paths)]
    keep = nx.DiGraph()
    keep.add_nodes_from((q, g.nodes[q]) for q in members)
    keep.add_edges_from((a, b, g.edges[a, b]) for a, b, _, _ in edges)
    unresolved = [s for q in members for s in cg.sites.get(q, ()) if s.status == "unresolved"]
    external = sum(1 for q in members for s in cg.sites.get(q, ()) if s.status == "external")
    return ChainResult(
        snapshot=index.snapshot.name, target=target, source=src, depth=depth,
        callers={q: d for q, d in up.items() if q != target},
        callees={q: d for q, d in down.items() if q != target},
        paths=paths, files=rank_files(index, members, target), edges=edges,
        unresolved=unresolved, external=external, partial=budget.reason is not None,
        reason=budget.reason, seconds=time.perf_counter() - start, graph=keep)


def _in_chain(a: str, b: str, up: dict[str, int], down: dict[str, int], paths: list[list[str]]) -> bool:
    """An edge belongs to the chain if it leads toward the target or away from it along the walk."""
    if a in up and b in up and up[a] == up[b] + 1:
        return True
    if a in down and b in down and down[b] == down[a] + 1:
        return True
    return any(a in p and b in p and p.index(b) == p.index(a) + 1 for p in paths)


def _walk(cg: CallGraph, start: str, depth: int, direction: str, budget: Budget,
          stop: str | None = None) -> dict[str, int]:
    """Breadth-first distances from ``start`` (callers when ``up``), expanding on demand."""
    dist = {start: 0}
    frontier = [start]
    for level in range(1, depth + 1):
        nxt = []
        for q in frontier:
            if budget.exhausted(cg.graph):
                return dist
            if q == stop:
                continue
            neighbours = cg.callers(q, budget) if direction == "up" else cg.successors(q)
            for n in neighbours:
                if n not in dist:
                    dist[n] = level
                    nxt.append(n)
        frontier = nxt
        if not frontier:
            break
    return dist


def _paths(g: nx.DiGraph, src: str, dst: str) -> list[list[str]]:
    if src not in g or dst not in g or not nx.has_path(g, src, dst):
        return []
    out = []
    for path in nx.shortest_simple_paths(g, src, dst):
        out.append(list(path))
        if len(out) >= MAX_PATHS:
            break
    return out


def rank_files(index: SnapshotIndex, members: dict[str, int], target: str) -> list[FileRank]:
    """Files by relevance: the target's file first, then by chain functions held, then closeness."""
    by_file: dict[str, FileRank] = {}
    for q, d in members.items():
        fn = index.functions.get(q)
        path = fn.path if fn is not None else (index.modules[split_qualname(q)[0]].path
                                               if split_qualname(q)[0] in index.modules else None)
        if path is None:
            continue
        rank = by_file.setdefault(path, FileRank(path, [], d))
        rank.functions.append(q)
        rank.distance = min(rank.distance, d)
    target_path = index.lookup(target).path
    for r in by_file.values():
        r.functions.sort()
    return sorted(by_file.values(), key=lambda r: (r.path != target_path, -r.count, r.distance, r.path))


# -- the pruned reference snapshot ------------------------------------------------------
def kept_name(parent: str, target: str) -> str:
    """``<parent>--<Class.method>``: the default name of a kept snapshot, safe as one folder name.

    Anything but letters, digits and ``_.+=-`` becomes ``_`` (a snapshot
    name from the cache or a ``<locals>`` qualname cannot smuggle a slash or
    a leading dot), and long names are cut with a hash so two targets never
    share a folder.
    """
    short = split_qualname(target)[1].replace(".<locals>.", ".").replace("#", "-")
    name = re.sub(r"[^A-Za-z0-9_.+=-]+", "_", f"{parent}--{short}").lstrip(".") or "kept"
    if len(name) > 200:
        name = name[:188] + "-" + hashlib.sha256(name.encode()).hexdigest()[:11]
    return name


def kept_dest(parent: Snapshot, target: str, *, out: Path | None = None, name: str | None = None,
              force: bool = False) -> Path:
    """Where ``--keep`` writes: a new folder ``name`` inside ``out`` (default: ``snapshots/``).

    ``out`` is the folder that holds snapshots, never the snapshot itself,
    so ``--out snapshots --force`` can only ever replace one kept snapshot of
    that name. ``--force`` replaces an existing folder only when it is a
    snapshot recon wrote under that name (:func:`recon.snapshots.cache.is_recon_snapshot`);
    anything else there is refused, whatever the flags.
    """
    holder = Path(out) if out is not None else snapshots_dir()
    if (holder / MANIFEST).exists():
        raise ReconError(f"--out {holder} is itself a snapshot; give the folder that holds snapshots "
                         "(the kept one is written inside it)")
    if name is None:
        name = kept_name(parent.name, target)
    elif not name or "/" in name or "\x00" in name or name.startswith(".") or len(name.encode()) > 255:
        raise ReconError(f"bad snapshot name {name!r}: one folder name, not starting with a dot")
    dest = holder / name
    _check_replaceable(dest, parent, force)
    return dest


def _check_replaceable(dest: Path, parent: Snapshot, force: bool) -> None:
    """Refuse to write over anything but a kept snapshot of that name, and then only with ``force``."""
    if not (dest.exists() or dest.is_symlink()):
        return
    if dest.resolve() == parent.root:
        raise ReconError(f"{dest} is the snapshot being read; choose another --name or --out")
    if not is_recon_snapshot(dest):
        raise ReconError(f"{dest} already exists and is not a snapshot recon wrote under that name; "
                         "recon never replaces it (choose another --name or --out)")
    if not force:
        raise ReconError(f"{dest} already exists (a snapshot; use --force to replace it)")


def keep_files(index: SnapshotIndex, result: ChainResult, count: int, *, out: Path | None = None,
               name: str | None = None, dest: Path | None = None, force: bool = False) -> Snapshot:
    """Write a snapshot holding the ``count`` most relevant files of ``result``.

    The snapshot is a new folder inside ``out`` (:func:`kept_dest`), or
    exactly ``dest`` when given; either way ``force`` replaces only a
    snapshot recon wrote under that name. Files are copied byte-exact (and
    checked against the parent's sha256); the manifest is the parent's with
    only those files, ``parent`` pointing to the parent snapshot, and the
    chain query recorded under ``selection``.
    """
    if count < 1:
        raise ReconError("--keep needs at least 1 file")
    parent = index.snapshot
    if dest is None:
        dest = kept_dest(parent, result.target, out=out, name=name, force=force)
    else:
        dest = Path(dest)
        _check_replaceable(dest, parent, force)
    chosen = [f.path for f in result.files[:count]]
    records = parent.manifest.files
    with staging(dest.parent, dest.name) as tmp:
        _copy_files(parent, chosen, tmp / "src")
        files = {rel: records[rel] for rel in chosen}
        write_json(tmp / MANIFEST, _kept_manifest(parent, result, count, dest.name, files).to_json())
        _check_replaceable(dest, parent, force)  # again: the folder may have appeared meanwhile
        commit(tmp, dest, replace=force)
    return Snapshot.open(dest)


def _copy_files(parent: Snapshot, chosen: list[str], src: Path) -> None:
    """Copy ``chosen`` byte-exact, refusing a file whose bytes no longer match the manifest."""
    records = parent.manifest.files
    with TreeWriter(src) as writer:
        for rel in chosen:
            data = parent.read_bytes(rel)
            want = records[rel].sha256
            if want and hashlib.sha256(data).hexdigest() != want:
                raise ReconError(f"{rel} changed on disk since the snapshot was taken "
                                 "(sha256 differs from the manifest)", where=str(parent.root))
            writer.write_bytes(rel, data)


def _kept_manifest(parent: Snapshot, result: ChainResult, count: int, name: str,
                   files: dict[str, FileRecord]) -> Manifest:
    """The parent's manifest with only ``files``, pointing back to the parent and the chain query."""
    return parent.manifest.derived(
        name, files=files, skipped={},
        parent={"name": parent.name, "path": str(parent.root),
                "source": parent.manifest.source.get("ref"),
                "digest": parent.manifest.source.get("digest"),
                "files": len(parent.manifest.files)},
        selection={"chain": {"target": result.target, "source": result.source,
                             "depth": result.depth, "partial": result.partial,
                             "files": [{"path": f.path, "count": f.count, "distance": f.distance}
                                       for f in result.files[:count]]}},
        stats={"files": len(files), "bytes": sum(r.size for r in files.values())})


# -- pictures -----------------------------------------------------------------------------
def _label(index: SnapshotIndex, q: str) -> tuple[str, str]:
    module, local = split_qualname(q)
    fn = index.functions.get(q)
    where = f"{fn.path}:{fn.def_lineno}" if fn is not None else index.modules[module].path \
        if module in index.modules else module
    return local, where


_EDGE_STYLE = {"call": "", "constructor": ' [style=bold, label="new"]',
               "override": ' [style=dashed, label="override"]'}


def to_dot(index: SnapshotIndex, result: ChainResult) -> str:
    """Graphviz source of the chain: target filled, start outlined, override edges dashed."""
    ids = {q: f"n{i}" for i, q in enumerate(sorted(result.graph.nodes))}
    lines = ["digraph chain {", "  rankdir=LR;",
             '  node [shape=box, fontname="Helvetica", fontsize=10];']
    for q, nid in ids.items():
        local, where = _label(index, q)
        attrs = [f'label="{_esc(local)}\\n{_esc(where)}"', f'tooltip="{_esc(q)}"']
        if q == result.target:
            attrs.append('style=filled, fillcolor="#ffd27f"')
        elif q == result.source:
            attrs.append('penwidth=2, color="#1f77b4"')
        lines.append(f"  {nid} [{', '.join(attrs)}];")
    for a, b, kind, _ in result.edges:
        lines.append(f"  {ids[a]} -> {ids[b]}{_EDGE_STYLE.get(kind, '')};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_mermaid(index: SnapshotIndex, result: ChainResult) -> str:
    """Mermaid flowchart of the chain (renders in GitHub markdown)."""
    ids = {q: f"n{i}" for i, q in enumerate(sorted(result.graph.nodes))}
    lines = ["flowchart LR"]
    for q, nid in ids.items():
        local, where = _label(index, q)
        text = f"{local}<br/><small>{where}</small>".replace('"', "#quot;")
        lines.append(f'  {nid}["{text}"]')
    arrows = {"call": "-->", "constructor": "==>", "override": "-.->"}
    for a, b, kind, _ in result.edges:
        label = "" if kind == "call" else f"|{kind}|"
        lines.append(f"  {ids[a]} {arrows.get(kind, '-->')}{label} {ids[b]}")
    lines.append(f"  style {ids[result.target]} fill:#ffd27f")
    return "\n".join(lines) + "\n"


def to_svg(index: SnapshotIndex, result: ChainResult) -> str:
    """SVG through Graphviz's ``dot`` (ReconError if Graphviz is not installed)."""
    exe = shutil.which("dot")
    if exe is None:
        raise ReconError("Graphviz 'dot' is not installed; use --format dot or mermaid instead")
    proc = subprocess.run([exe, "-Tsvg"], input=to_dot(index, result), capture_output=True,
                          text=True, timeout=120)
    if proc.returncode != 0:
        raise ReconError(f"dot failed: {proc.stderr.strip()[:200]}")
    return proc.stdout


def render(index: SnapshotIndex, result: ChainResult, fmt: str) -> str:
    """``dot``, ``mermaid`` or ``svg`` text of the chain."""
    makers = {"dot": to_dot, "mermaid": to_mermaid, "svg": to_svg}
    if fmt not in makers:
        raise ReconError(f"unknown format {fmt!r}: use one of {', '.join(makers)}")
    return makers[fmt](index, result)


def write_picture(text: str, path: Path) -> None:
    write_text(Path(path), text)


def _esc(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def describe(fn: FunctionInfo) -> str:
    return f"{fn.qualname}  {fn.path}:{fn.def_lineno}"
