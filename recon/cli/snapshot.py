"""``recon snapshot SOURCE`` (``take``), ``recon snapshot ls``, ``show NAME``, ``verify NAME``.

Taking a snapshot is what the verb is for, so ``recon snapshot SOURCE`` stays the
short form: a first word that is not one of the subcommands is a SOURCE and goes
to ``take`` (``docker image ls`` / ``docker image inspect`` are the model for the rest).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape
from typer.core import TyperGroup

from .output import console, emit_json, err_console, human_bytes

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.progress import Progress

    from ..acquire.sources.base import Layer
    from ..errors import PackageNotFound
    from ..snapshots.manifest import Manifest
    from ..snapshots.model import Snapshot

HELP = """Get a package's exact source out of an image without starting it.

`recon snapshot SOURCE` takes one (the `take` command; see `recon snapshot take --help`).
SOURCE is one of: docker:REF, docker-archive:PATH, oci:DIR, oci-archive:PATH,
registry:REF, wheel:PATH, pip:SPEC, dir:PATH."""

TAKE_HELP = """Take a snapshot of SOURCE: docker:REF, docker-archive:PATH, oci:DIR,
oci-archive:PATH, registry:REF, wheel:PATH, pip:SPEC or dir:PATH."""

OUT_HELP = "Folder that holds snapshots (default ./snapshots, or RECON_SNAPSHOTS)."


class _SourceFirst(TyperGroup):
    """A group whose first word, when it is not a subcommand, is a SOURCE for ``take``."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["take", *args]
        return super().parse_args(ctx, args)


snapshot_app = typer.Typer(cls=_SourceFirst, no_args_is_help=True, help=HELP)


def _parse_size(text: str, option: str) -> int:
    """``512M``, ``16G``, ``1.5GiB``, ``4096`` -> bytes; anything else is a usage error."""
    import re

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", text, re.IGNORECASE)
    if not m:
        raise typer.BadParameter(f"{text!r} is not a size (examples: 4096, 512M, 16G, 1.5GiB)",
                                 param_hint=option)
    units = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    return int(float(m.group(1)) * units[m.group(2).lower()])


def summary(snap: Snapshot) -> dict[str, Any]:
    """The short, JSON-able description used by ``ls`` and after a snapshot."""
    m = snap.manifest
    return {
        "name": snap.name, "path": str(snap.root), "package": snap.package, "version": snap.version,
        "source": m.source.get("ref"), "digest": m.source.get("digest"),
        "files": m.stats.get("files"), "bytes": m.stats.get("bytes"),
        "python": m.python.version, "created": m.created,
        "parent": (m.parent or {}).get("name"),
        "import_root": m.package.import_root, "other_copies": m.package.other_copies,
    }


def _show(snap: Snapshot, as_json: bool) -> None:
    from rich.table import Table

    m = snap.manifest
    if as_json:
        emit_json(m.to_json())
        return
    t = Table(title=f"snapshot {escape(snap.name)}", show_header=False)
    t.add_column("key", style="bold cyan")
    t.add_column("value")
    pkg = m.package
    t.add_row("package", escape(f"{pkg.name} {pkg.version or '?'} at {pkg.import_root}"))
    if pkg.other_copies:
        t.add_row("other copies", escape("\n".join(pkg.other_copies)))
    t.add_row("source", escape(str(m.source.get("ref"))))
    t.add_row("digest", escape(str(m.source.get("digest"))))
    if m.source.get("platform"):
        t.add_row("platform", escape(str(m.source["platform"])))
    py = m.python
    t.add_row("python", escape(f"{py.version or '?'} ({py.executable or 'no interpreter found'})"))
    img = m.image
    if img:
        t.add_row("entrypoint", escape(str(img.get("entrypoint"))))
        t.add_row("cmd", escape(str(img.get("cmd"))))
        t.add_row("workdir", escape(img.get("working_dir") or ""))
        t.add_row("env", escape("\n".join(img.get("env") or [])))
        if img.get("labels"):
            t.add_row("labels", escape("\n".join(f"{k}={v}" for k, v in img["labels"].items())))
    t.add_row("files", f"{m.stats.get('files')} ({human_bytes(int(m.stats.get('bytes') or 0))}); "
              f"{m.selection.get('skipped_files', len(m.skipped))} skipped (binaries or --include)")
    t.add_row("distributions", str(len(m.distributions)))
    t.add_row("created", escape(f"{m.created} by recon {m.tool.get('version')}"))
    console.print(t)
    _show_layers(m)


def _show_layers(m: Manifest) -> None:
    """The layers table: per layer, the package files it provides, where the files say it."""
    from rich.table import Table

    from ..acquire.sources.daemon import is_merged_view

    layers = m.layers
    if not layers:
        return
    if any(is_merged_view(layer) for layer in layers):
        ids = m.source.get("layer_diff_ids") or []
        lt = Table(title=f"layers ({len(ids)} in the image; files not credited to a layer)")
        for col in ("#", "diff id"):
            lt.add_column(col, justify="right" if col == "#" else "left")
        for i, diff_id in enumerate(ids):
            lt.add_row(str(i), escape(str(diff_id)[:27]))
        console.print(lt)
        console.print(f"The files were read from the engine's merged view of the image (read: "
                      f"{escape(str(m.source.get('read')))}), so none says which layer it came from; "
                      "`recon snapshot take docker:REF --layers` reads the layers through "
                      "`docker save` and records each file's layer.")
        return
    counts: dict[int, int] = {}
    for rec in m.files.values():
        if rec.layer is not None:
            counts[rec.layer] = counts.get(rec.layer, 0) + 1
    lt = Table(title="layers (files of the package each one provides)")
    for col in ("#", "digest", "size", "package files"):
        lt.add_column(col, justify="right" if col != "digest" else "left")
    for layer in layers:
        lt.add_row(escape(str(layer["index"])), escape(str(layer["digest"])[:27]), human_bytes(layer.get("size", 0)),
                   str(counts.get(layer["index"], 0)))
    console.print(lt)


def _verify(snap: Snapshot, as_json: bool, quiet: bool) -> None:
    """Print what ``verify`` found; exit 1 when the files differ from the manifest."""
    from rich.progress import Progress
    from rich.table import Table

    from ..snapshots.verify import verify_snapshot

    with Progress(console=err_console, transient=True,
                  disable=as_json or quiet or not err_console.is_terminal) as bar:
        task = bar.add_task(f"hashing {escape(snap.name)}", total=None)
        found = verify_snapshot(snap, progress=lambda done, total: bar.update(task, completed=done, total=total))
    if as_json:
        emit_json(found.to_json())
    elif found.ok:
        if not quiet:
            console.print(f"[green]{escape(snap.name)}: all {found.checked} files match the manifest[/]")
    else:
        t = Table(title=f"{escape(snap.name)} differs from its manifest",
                  caption=f"{found.checked} recorded files checked")
        t.add_column("what")
        t.add_column("path")
        for what, path in found.problems():
            t.add_row(what, escape(path))
        console.print(t)
    if not found.ok:
        raise typer.Exit(1)


def _open(name: str, out: Path | None) -> Snapshot:
    from ..snapshots.model import Snapshot

    return Snapshot.open(str(out / name) if out is not None and not Path(name).exists() else name)


def ls_cmd(
    out: Path | None = typer.Option(None, "--out", "-o", "--output", help=OUT_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print JSON for scripts."),
) -> None:
    """List the snapshots in a folder."""
    from rich.table import Table

    from ..snapshots.model import list_snapshots

    snaps = [summary(s) for s in list_snapshots(out)]
    if as_json:
        emit_json(snaps)
        return
    t = Table(title=f"snapshots in {escape(str(out or 'snapshots/'))}")
    for col in ("name", "package", "version", "files", "size", "source"):
        t.add_column(col)
    for s in snaps:
        t.add_row(escape(str(s["name"])), escape(str(s["package"])), escape(str(s["version"])),
                  str(s["files"]), human_bytes(s["bytes"]), escape(str(s["source"])))
    console.print(t)


def show_cmd(
    name: str = typer.Argument(..., help="Snapshot name or folder."),
    out: Path | None = typer.Option(None, "--out", "-o", "--output", help=OUT_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the manifest as JSON."),
) -> None:
    """Print a snapshot's manifest as tables: source, package, interpreter, image config, layers."""
    _show(_open(name, out), as_json)


def verify_cmd(
    name: str = typer.Argument(..., help="Snapshot name or folder."),
    out: Path | None = typer.Option(None, "--out", "-o", "--output", help=OUT_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print JSON for scripts."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar; nothing printed when all match."),
) -> None:
    """Re-hash a snapshot's files against its manifest (exit 1 on any edit, deletion or addition)."""
    _verify(_open(name, out), as_json, quiet)


def snapshot_cmd(
    source: str = typer.Argument(..., help="Where the package comes from (see above)."),
    package: str | None = typer.Option(None, "--package", help="Top-level package (default: vllm, then sglang)."),
    out: Path | None = typer.Option(None, "--out", "-o", "--output", help=OUT_HELP),
    snap_name: str | None = typer.Option(None, "--name", help="Snapshot name (default PACKAGE-VERSION[-SCHEME-DIGEST])."),
    include: list[str] = typer.Option([], "--include", help="Keep only package files matching GLOB (repeatable), e.g. 'vllm/**.py'."),
    all_files: bool = typer.Option(False, "--all-files", help="Also keep compiled binaries (.so, .cubin, ELF executables...)."),
    platform: str | None = typer.Option(None, "--platform", help="os/arch in a multi-platform index (default linux/amd64)."),
    python: str | None = typer.Option(None, "--python", help="The image's interpreter to decide among several copies."),
    max_file_size: str = typer.Option("512M", "--max-file-size", help="Refuse package files larger than this."),
    max_total_size: str = typer.Option("16G", "--max-total-size", help="Refuse packages larger than this in total."),
    max_layer_size: str = typer.Option("64G", "--max-layer-size", help="Refuse layers that decompress past this."),
    max_ratio: float = typer.Option(None, "--max-ratio", min=0.0, help="Refuse a compressed layer or wheel that expands past this many times its size (never below 1 GiB; default 100, or RECON_MAX_RATIO; 0: no ratio cap)."),
    force: bool = typer.Option(False, "--force", "-f", help="Replace a snapshot of the same name."),
    insecure: bool = typer.Option(False, "--insecure", help="registry: plain HTTP, loopback registries only."),
    layers: bool = typer.Option(False, "--layers", help="docker: read the layers through `docker save` (a temporary copy of the image under the cache) to record the layer each file came from."),
    package_only: bool = typer.Option(False, "--package-only", help="docker: where the engine's storage is not readable here, read only the package folder through the engine, not the whole site folder (no installed-distributions list)."),
    engine_view: bool = typer.Option(False, "--engine-view", help="docker: read through the engine's archive API (a created, never started container) even where its storage folders are readable here (RECON_DOCKER_READ=engine does the same)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON for scripts."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars or tables."),
) -> None:
    from ..acquire.layers import CaptureLimits
    from ..errors import PackageNotFound
    from ..snapshots.take import take_snapshot

    if layers and (package_only or engine_view):
        raise typer.BadParameter("--layers reads through `docker save`: it takes neither "
                                 "--package-only nor --engine-view")
    docker_read = "layers" if layers else "package" if package_only else "site"
    if insecure:
        os.environ["RECON_REGISTRY_INSECURE"] = "1"
    limits = CaptureLimits(_parse_size(max_file_size, "--max-file-size"),
                           _parse_size(max_total_size, "--max-total-size"),
                           _parse_size(max_layer_size, "--max-layer-size"), max_ratio=max_ratio)
    progress, on_layer = _layer_progress(as_json, quiet)

    def take(pkg: str | None) -> Snapshot:
        with progress:
            return take_snapshot(source, name=snap_name, out=out, package=pkg, python=python,
                                 include=include, all_files=all_files, platform=platform,
                                 limits=limits, force=force, progress=on_layer, docker_read=docker_read,
                                 engine_view=engine_view)

    try:
        snap = take(package)
    except PackageNotFound as err:
        choice = _ask_package(err, as_json, quiet)
        if choice is None:
            raise
        snap = take(choice)
    _note_other_copies(snap, quiet)
    if as_json:
        emit_json(summary(snap))
    elif not quiet:
        _show(snap, False)
        console.print(f"[green]snapshot written:[/] {escape(str(snap.root))}")


def _layer_progress(as_json: bool, quiet: bool) -> tuple[Progress, Callable[[Layer, str], None]]:
    """Download bars (one per layer, on a terminal) and the callback that drives them."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    show_progress = not (as_json or quiet) and err_console.is_terminal
    progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                        TransferSpeedColumn(), console=err_console, transient=True,
                        disable=not show_progress)
    tasks: dict[int, Any] = {}

    def on_layer(layer: Layer, event: str) -> None:
        if layer.index not in tasks:
            label = "docker save" if layer.index < 0 else escape(f"layer {layer.index} {layer.digest[:19]}")
            tasks[layer.index] = progress.add_task(label, total=layer.size or None)
        progress.update(tasks[layer.index], completed=layer.bytes_read if event != "done" else layer.size or layer.bytes_read)

    return progress, on_layer


def _ask_package(err: PackageNotFound, as_json: bool, quiet: bool) -> str | None:
    """Which found package to take, asked on a terminal; None where the error is the answer."""
    # On a terminal, ask which of the packages found to take (then read the image again);
    # anywhere else the error, which lists them, is the answer.
    if not (err.candidates and sys.stdin.isatty() and err_console.is_terminal and not (as_json or quiet)):
        return None
    err_console.print(escape(str(err)))
    for _attempt in range(3):
        choice = typer.prompt("package to snapshot", err=True).strip()
        if choice in err.candidates:
            return choice
        err_console.print(f"{escape(repr(choice))} is not one of the packages found")
    return None


def _note_other_copies(snap: Snapshot, quiet: bool) -> None:
    """Say which copy was taken when the image holds more than one (--python picks another)."""
    pkg, py = snap.manifest.package, snap.manifest.python
    if pkg.other_copies and not quiet:  # say so: the image holds more than one copy
        by = f"the one {py.executable} imports" if py.executable else "by search order"
        n = len(pkg.other_copies)
        err_console.print(f"note: {n} other {'copy' if n == 1 else 'copies'} of {escape(pkg.name)} in the image "
                          f"({escape(', '.join(pkg.other_copies))}); took {escape(str(pkg.real_path))}, "
                          f"{escape(by)}; --python picks another interpreter")


def register(app: typer.Typer) -> None:
    snapshot_app.command("take", help=TAKE_HELP)(snapshot_cmd)  # listed first: it is the verb's job
    snapshot_app.command("ls")(ls_cmd)
    snapshot_app.command("show")(show_cmd)
    snapshot_app.command("verify")(verify_cmd)
    app.add_typer(snapshot_app, name="snapshot")
