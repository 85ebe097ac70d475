"""``recon probe new / check / read``: thin commands over :mod:`recon.probes`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from ..errors import ReconError
from ..paste import quote
from .output import console, emit_json

probe_app = typer.Typer(
    help="Probe bundles: a sitecustomize folder that logs chosen functions in every process "
         "of a running engine, and the tools to check it and read its logs.",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    app.add_typer(probe_app, name="probe")


@probe_app.command("new")
def new(
    out: Path = typer.Option(..., "-o", "--output", "--out", help="Bundle folder to write (probes/NAME)."),
    target: list[str] = typer.Option(..., "--target", "-t",
                                     help="QUALNAME 'package.module:Class.method' (repeatable)."),
    log: str = typer.Option("shapes,return", "--log",
                            help="What each call record holds: args (values), shapes "
                                 "(metadata only), return."),
    self_attr: list[str] = typer.Option([], "--self-attr",
                                        help="Attribute path of self to log, e.g. "
                                             "cache_config.block_size; QUALNAME::PATH for one target."),
    expr: list[str] = typer.Option([], "--expr",
                                   help="NAME=EXPR over the parameters, e.g. n=len(x) (uses "
                                        "'result': at exit); QUALNAME::NAME=EXPR for one target."),
    env: list[str] = typer.Option([], "--env", help="Environment variable to record per process."),
    first: int = typer.Option(10, "--first", help="Log the first N calls per process and target."),
    every: int = typer.Option(0, "--every", help="Then every Nth call (0: none)."),
    max_bytes: int = typer.Option(64 << 20, "--max-bytes", help="Size cap of each process's log."),
    max_files: int = typer.Option(256, "--max-files",
                                  help="Cap on log files in the folder (one per process)."),
    log_dir: str = typer.Option("/tmp/recon-probe-logs", "--log-dir",
                                help="Writable log folder inside the container."),
    only_argv: str | None = typer.Option(None, "--only-argv",
                                         help="Probe only processes whose command line matches."),
    skip_argv: str | None = typer.Option(None, "--skip-argv",
                                         help="Skip processes whose command line matches."),
    snapshot: str | None = typer.Option(None, "--snapshot",
                                        help="Validate targets against this snapshot and patch "
                                             "their 'from module import name' copies."),
    unchecked: bool = typer.Option(False, "--unchecked",
                                   help="Write the bundle without --snapshot: targets not checked "
                                        "against the release (a typo then logs nothing, silently)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing bundle folder."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Write a probe bundle: mount it read-only and put it on PYTHONPATH."""
    from rich.table import Table

    from ..errors import ReconError
    from ..probes import build_spec, new_bundle

    spec = build_spec(list(target), log=[x.strip() for x in log.split(",") if x.strip()],
                      self_attrs=list(self_attr), exprs=list(expr), env=list(env), first=first,
                      every=every, max_bytes=max_bytes, log_dir=log_dir, only_argv=only_argv,
                      skip_argv=skip_argv, max_files=max_files)
    from ..snapshots.cache import ensure_snapshot  # a snapshot name, or any SOURCE (pip:vllm==X)

    if snapshot is None and not unchecked:
        raise ReconError("a bundle's targets are checked against the release the engine runs: pass "
                         "--snapshot SOURCE (pip:vllm==0.33.0, docker:IMAGE, a snapshot name), or "
                         "--unchecked to write it without checking")

    mount = quote(f"{Path(out).resolve()}:/opt/recon-probe:ro", "the bundle folder")  # refused first
    bundle = new_bundle(out, spec, snapshot=ensure_snapshot(snapshot) if snapshot else None,
                        force=force)
    if as_json:
        emit_json({"bundle": str(bundle.path), "spec": spec.to_json(),
                   "checks": [c.to_json() for c in bundle.checks]})
        return
    table = Table("target", "kind", "signature", "copies patched", title=f"bundle {bundle.path}")
    for t in spec.targets:
        table.add_row(escape(t.qualname), t.kind or "(not checked)", escape(t.signature or ""),
                      escape(", ".join(t.copies)))
    console.print(table)
    console.print(f"Mount it: -v {escape(mount)} -e PYTHONPATH=/opt/recon-probe "
                  f"(see {escape(str(bundle.path / 'README.md'))})", soft_wrap=True)


@probe_app.command("check")
def check(
    bundle: Path = typer.Argument(..., help="Bundle folder."),
    python: str | None = typer.Option(None, "--python",
                                      help="Interpreter to run (default: this one)."),
    import_targets: bool = typer.Option(False, "--import",
                                        help="Also import the targets' modules (they must be "
                                             "installed for that interpreter)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Run the bundle in a fresh interpreter, the way the container will; report what loaded."""
    from rich.table import Table

    from ..probes import check_bundle

    result = check_bundle(bundle, python=python, import_targets=import_targets)
    if as_json:
        emit_json(result.to_json())
    else:
        status = "[green]loaded[/]" if result.ok else "[red]NOT OK[/]"
        console.print(f"{status}: {escape(result.python)} (Python {escape(result.python_version or '?')}), "
                      f"exit {result.returncode}, {result.elapsed_ms:.0f} ms")
        console.print(f"chained sitecustomize: {escape(result.chained_sitecustomize or 'none')}")
        if result.unprivileged:
            console.print(f"unprivileged user: {escape(result.unprivileged)}")
        if result.log_error:
            console.print(f"[red]log directory not writable[/]: {escape(result.log_error)}")
        table = Table("target", "status")
        for q, status_text in result.targets.items():
            table.add_row(escape(q), escape(status_text))
        console.print(table)
        for failure in result.import_failed:
            console.print(f"[red]cannot import[/] {escape(failure)}")
        if result.stderr.strip():
            console.print("[yellow]stderr:[/]")
            console.print(result.stderr.strip(), markup=False, highlight=False)
    if result.import_failed and result.loaded:
        raise ReconError(f"the bundle loaded, but {len(result.import_failed)} target module(s) could not "
                         f"be imported by {result.python} (--python names the engine's interpreter): "
                         f"{result.import_failed[0]}")
    if not result.ok:
        raise ReconError("the bundle did not load cleanly (see above)")


@probe_app.command("read")
def read(
    logdir: Path = typer.Argument(..., help="Folder holding the probe logs."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    markdown: bool = typer.Option(False, "--markdown", help="Print the summary as Markdown."),
) -> None:
    """Summarise probe logs per process (VERIFY) and per target (calls, shapes, values)."""
    from rich.table import Table

    from ..probes import read_logs
    from ..probes.logread import compact, short_argv, short_env

    summary = read_logs(logdir)
    if not summary.processes:
        raise NoRecords(_no_records(logdir, summary.unreadable_note()))
    if as_json:
        emit_json(summary.to_json())
        return
    if markdown:
        typer.echo(summary.to_markdown(), nl=False)
        return
    procs = Table("pid", "parent", "argv", "python", "env", "patched", "calls", "errors", "exit",
                  title=f"{len(summary.processes)} processes")
    for p in summary.processes:
        patched = sum(s == "patched" for s in p.targets.values())
        procs.add_row(str(p.pid), str(p.forked_from or p.ppid or ""), escape(short_argv(p.argv)),
                      escape(p.python or "?"), escape(short_env(p.env)), f"{patched}/{len(p.targets)}", str(sum(p.calls.values())),
                      str(p.errors), "yes" if p.exited else "no")
    console.print(procs)
    if summary.cap_note():
        console.print(summary.cap_note(), markup=False)
    for t in summary.targets:  # one block per target: qualnames are too long for a table column
        console.rule(escape(t.qualname), align="left")
        console.print(f"patched in {t.patched_in} processes, calls {_calls(t)}, logged {t.logged}"
                      f" ({t.meta_only} metadata-only), raised {t.raised}, errors {t.errors}",
                      markup=False)
        for sig, n in list(t.shapes.items())[:8]:
            console.print(f"  shapes {sig}  x{n}", markup=False)
        console.print(f"  first  {compact(t.first, 200)}", markup=False)
        console.print(f"  last   {compact(t.last, 200)}", markup=False)
    if summary.unreadable_note():
        console.print(summary.unreadable_note(), style="yellow", markup=False, soft_wrap=True)


class NoRecords(ReconError):
    """A folder of probe logs with no record in it: not an answer (exit 1), and most often
    a folder the engine's processes could not write."""

    exit_code = 1


def _no_records(logdir: Path, unreadable: str | None) -> str:
    found = (f"its probe-*.jsonl files hold no record: {unreadable}"
             if unreadable else "no probe-*.jsonl file there or one folder down holds a record")
    return (f"no records in {logdir}: {found}; was the folder writable by the engine's user? "
            "(`recon probe check BUNDLE` says whether a process can write its log directory)")


def _calls(t: Any) -> str:
    return str(t.calls) if t.calls_exact else f">={t.calls}"
