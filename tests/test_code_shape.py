"""The package's shape, measured as a reviewer would: import cycles and function length.

An import inside a function still makes a cycle (it only moves the failure to the
call), so every ``import`` anywhere in a module counts. ``from pkg import sub`` where
``sub`` is a submodule is an edge to the submodule alone.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parent.parent / "recon"
#: the longest function a reader should have to hold in their head
MAX_LINES = 80


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imported(name: str, path: Path, tree: ast.Module, modules: dict[str, Path]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base) + ("." + node.module if node.module else "")
            else:
                module = node.module or ""
            subs = {f"{module}.{a.name}" for a in node.names} & modules.keys()
            found |= subs if len(subs) == len(node.names) else subs | {module}
    return (found & modules.keys()) - {name}


def test_no_import_cycles() -> None:
    modules = _modules()
    graph = nx.DiGraph()
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        graph.add_edges_from((name, dep) for dep in _imported(name, path, tree, modules))
    cycles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert len(graph) > 100 and not cycles, cycles


def test_the_graph_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    """The check above would find a cycle hidden in a function body (it once existed)."""
    code = "def f():\n    from .tarstream import tar_members\n"
    tree = ast.parse(code)
    modules = {"recon.acquire.sources.base": tmp_path / "base.py",
               "recon.acquire.sources.tarstream": tmp_path / "tarstream.py"}
    assert _imported("recon.acquire.sources.base", modules["recon.acquire.sources.base"], tree,
                     modules) == {"recon.acquire.sources.tarstream"}


def test_no_function_over_80_lines() -> None:
    long = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_LINES:
                    long.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} "
                                f"{node.name} ({lines} lines)")
    assert not long, long
