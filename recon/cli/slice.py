"""``recon slice`` and ``recon run``: thin commands over :mod:`recon.slicing`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from ..errors import ReconError
from .output import console, emit_json, err_console

if TYPE_CHECKING:
    from ..slicing import RunResult

SLICE_HELP = """Cut target functions out of a snapshot into one standalone Python module.

QUALNAME is 'package.module:Class.method' (or dotted). The module holds each
target byte-exact plus its dependency closure inside the package, every piece
with its origin file:line and sha256. Without -o the module goes to stdout.
When the closure outgrows --budget, what was left out is named on stderr
(and under "cut" with --json)."""

RUN_HELP = """Execute a function of a snapshot in a sandboxed child process.

Outside names become recording stubs; --config loads a model config.json as a
Hugging Face-like object (passed to a parameter named config/hf_config);
--arg/--self give other inputs as JSON (--arg-py/--self-py: Python
expressions evaluated in the run, seeing ns=SimpleNamespace, config, stub(name),
--real packages and --stub-file names)."""


#: kept in step with recon.slicing.closure.DEFAULT_BUDGET (a test checks); not imported
#: here so that every verb's start-up does not pay for the slicing package
_BUDGET_HELP = ("Most pieces (statements, class members) the slice may keep "
                "(default 4000); past it the rest is dropped and named on stderr.")


def _budget_option() -> Any:
    return typer.Option(None, "--budget", min=1, help=_BUDGET_HELP)


def _warn_cut(cut: list[str], budget: int) -> None:
    """One line on stderr when the budget cut the slice."""
    from ..slicing.slicer import cut_warning

    line = cut_warning(cut, budget)
    if line:
        import sys

        print(f"recon: warning: {line}", file=sys.stderr, flush=True)


def _budget(value: int | None) -> int:
    from ..slicing.closure import DEFAULT_BUDGET

    return DEFAULT_BUDGET if value is None else value


def register(app: typer.Typer) -> None:
    app.command("slice", help=SLICE_HELP)(slice_cmd)
    app.command("run", help=RUN_HELP)(run_cmd)


def _pairs(items: list[str], flag: str) -> list[tuple[str, str]]:
    out = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ReconError(f"{flag} {item!r}: expected NAME=VALUE")
        out.append((name.strip(), value))
    return out


def _json_values(items: list[str], flag: str, py_flag: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, raw in _pairs(items, flag):
        try:
            out[name] = json.loads(raw)
        except json.JSONDecodeError as err:
            raise ReconError(f"{flag} {name}: {raw!r} is not JSON ({err.msg}); use {py_flag} "
                             "for a Python expression") from err
    return out


def slice_cmd(
    snapshot: str = typer.Argument(..., help="Snapshot name or folder, or any SOURCE (pip:vllm==0.33.0)."),
    qualnames: list[str] = typer.Argument(..., help="Targets: package.module:Class.method"),
    out: Path | None = typer.Option(None, "-o", "--output", "--out", help="Write the module here."),
    stub: list[str] = typer.Option([], "--stub", help="Name supplied at run time: do not walk "
                                                      "into it (repeatable)."),
    as_json: bool = typer.Option(False, "--json", help="Print the slice's metadata as JSON."),
    budget: int | None = _budget_option(),
) -> None:
    from ..slicing import build_slice
    from ..snapshots.cache import ensure_snapshot

    snap = ensure_snapshot(snapshot)
    sl = build_slice(snap, qualnames, stubs=stub, budget=_budget(budget))
    _warn_cut(sl.cut, sl.budget)
    if out is not None:
        sl.write(out)
    if as_json:
        data = sl.to_json()
        data["written"] = str(out) if out else None
        emit_json(data)
        return
    if out is None:
        import sys

        sys.stdout.write(sl.text)
        return
    _slice_tables(sl.to_json(), out)


def _slice_tables(meta: dict[str, Any], out: Path) -> None:
    from rich.table import Table

    t = Table(title=escape(f"slice of {meta['snapshot']['label']} -> {out}"))
    t.add_column("file", overflow="fold")
    t.add_column("lines", justify="right")
    t.add_column("sha256")
    t.add_column("what", overflow="fold")
    for p in meta["pieces"]:
        t.add_row(escape(p["file"]), f"{p['start']}-{p['end']}", p["sha256"][:12], escape(p["what"]))
    console.print(t)
    if meta["outside"]:
        o = Table(title="names from outside the package (stubbed by recon run)")
        o.add_column("name")
        o.add_column("kind")
        o.add_column("first use")
        for name, info in meta["outside"].items():
            o.add_row(escape(name), escape(info["kind"]), escape((info["sites"] or [""])[0]))
        console.print(o)
    if meta["unresolved"]:
        u = Table(title="unresolved names")
        u.add_column("where")
        u.add_column("name")
        u.add_column("why")
        for item in meta["unresolved"]:
            u.add_row(escape(f"{item['file']}:{item['line']}"), escape(item["name"]), escape(item["why"]))
        console.print(u)


def run_cmd(
    snapshot: str = typer.Argument(..., help="Snapshot name or folder, or any SOURCE (pip:vllm==0.33.0)."),
    qualname: str = typer.Argument(..., help="Target: package.module:Class.method"),
    config: Path | None = typer.Option(None, "--config", help="Model config.json (or its folder), or example:NAME for one shipped with recon."),
    arg: list[str] = typer.Option([], "--arg", help="NAME=JSON argument (repeatable)."),
    arg_py: list[str] = typer.Option([], "--arg-py", help="NAME=PYTHON_EXPR argument."),
    self_attr: list[str] = typer.Option([], "--self", help="ATTR=JSON attribute of self."),
    self_py: list[str] = typer.Option([], "--self-py", help="ATTR=PYTHON_EXPR attribute of self."),
    stub: list[str] = typer.Option([], "--stub", help="NAME=PYTHON_EXPR value for a name."),
    stub_file: Path | None = typer.Option(None, "--stub-file",
                                          help="Python file defining STUBS={name: value}, "
                                               "FORBID=[...] and helpers."),
    forbid: list[str] = typer.Option([], "--forbid", help="NAME whose use fails the run."),
    real: list[str] = typer.Option([], "--real", help="Installed package to use for real."),
    absent: list[str] = typer.Option([], "--absent",
                                     help="Outside module whose import fails (not installed)."),
    env: list[str] = typer.Option([], "--env", help="KEY=VALUE in the run's environment."),
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds before the run is killed."),
    memory: int = typer.Option(4096, "--memory", help="Memory limit in MiB."),
    no_sandbox: bool = typer.Option(False, "--no-sandbox",
                                    help="Run without the OS sandbox (bubblewrap namespaces) "
                                         "where it is not available: resource limits and the "
                                         "in-process guard only. Never implied."),
    check: bool = typer.Option(False, "--check", help="Exit non-zero (4) when the function raises."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    budget: int | None = _budget_option(),
) -> None:
    from ..slicing import Py, RunFailed, run_function
    from ..snapshots.cache import ensure_snapshot

    args: dict[str, Any] = _json_values(arg, "--arg", "--arg-py")
    args.update({k: Py(v) for k, v in _pairs(arg_py, "--arg-py")})
    attrs: dict[str, Any] = _json_values(self_attr, "--self", "--self-py")
    attrs.update({k: Py(v) for k, v in _pairs(self_py, "--self-py")})
    try:
        res = run_function(ensure_snapshot(snapshot), qualname, args=args, self_attrs=attrs,
                           config=config, stubs=dict(_pairs(stub, "--stub")),
                           stub_file=stub_file, forbid=forbid, real=real, absent=absent,
                           env=dict(_pairs(env, "--env")), timeout=timeout, memory_mb=memory,
                           sandbox=not no_sandbox, budget=_budget(budget))
    except RunFailed as err:
        _warn_cut(err.slice_cut, err.slice_budget)
        if as_json:
            emit_json({"ok": False, "failed": str(err), "slice_cut": err.slice_cut,
                       "slice_budget": err.slice_budget,
                       "results": [r.to_json() for r in err.results]})
        raise
    _warn_cut(res.slice_cut, res.slice_budget)
    if as_json:
        emit_json(res.to_json())
    else:
        show_result(res)
    if check:
        res.raise_for_error()  # RunFailed: one line on stderr, exit code 4


def _short(value: Any, width: int = 120) -> str:
    text = json.dumps(value, default=str)  # JSON escapes control characters
    return escape(text if len(text) <= width else text[: width - 3] + "...")


def _safe(text: str) -> str:
    """A string the run reported, made safe for the terminal (no markup, no escapes)."""
    from ..slicing.result import printable

    return escape(printable(text))


def show_result(res: RunResult) -> None:
    """The rich tables of ``recon run``."""
    from rich.table import Table

    snap = res.snapshot
    head = Table(title=_safe(f"{res.target}  ({snap.get('package')} {snap.get('version')})"),
                 show_header=False)
    head.add_column("key", style="bold cyan")
    head.add_column("value", overflow="fold")
    if res.ok:
        head.add_row("returned", _short(res.value, 400))
        head.add_row("type", _safe(res.value_type))
    else:
        assert res.error is not None
        head.add_row("raised", f"[red]{_safe(res.error.line())}[/red]")
    head.add_row("time", f"{res.seconds:.4f} s in the call, {res.wall_seconds:.2f} s in all")
    console.print(head)
    if res.mutations:
        m = Table(title="self attributes changed by the call")
        for col in ("attr", "change", "before", "after"):
            m.add_column(col, overflow="fold")
        for mut in res.mutations:
            m.add_row(_safe(mut.attr), _safe(mut.change), _short(mut.before, 60), _short(mut.after, 60))
        console.print(m)
    if res.stub_touches:
        s = Table(title="stubs touched")
        for col in ("name", "kind", "count", "how", "first at"):
            s.add_column(col, overflow="fold")
        for t in res.stub_touches:
            s.add_row(_safe(t.name), _safe(t.kind), str(t.count),
                      _safe(", ".join(f"{k}×{v}" for k, v in t.ops.items())), _safe(t.first))
        console.print(s)
    for a in res.assumptions:
        err_console.print(f"[yellow]assumed[/yellow] {_safe(str(a['what']))} at "
                          f"{_safe(str(a['site']))} (×{a['count']})")
    for f in res.definition_failures:
        err_console.print(f"[yellow]not defined in the slice[/yellow] {_safe(f['where'])} "
                          f"{_safe(', '.join(map(str, f['names'])))}: {_safe(f['error'])}")
    p = Table(title="code that ran (provenance)")
    for col in ("file:lines", "sha256", "piece"):
        p.add_column(col, overflow="fold")
    for piece in res.provenance:
        p.add_row(escape(f"{piece.file}:{piece.start}-{piece.end}"), piece.sha256[:16], escape(piece.what))
    console.print(p)
