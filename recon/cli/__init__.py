"""The ``recon`` command: a thin Typer layer over the library.

Each verb lives in its own module under ``recon.cli`` and exposes
``register(app)``; this file only assembles them and turns
:class:`~recon.errors.ReconError` into one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

import typer

from ..errors import ReconError

app = typer.Typer(
    name="recon",
    help="Offline source reconnaissance for LLM inference engines (vLLM, SGLang).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)



@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", help="Print recon's version and exit."),
) -> None:
    """Offline source reconnaissance for LLM inference engines (vLLM, SGLang)."""
    if version:
        from .. import __version__

        typer.echo(f"recon {__version__}")
        raise typer.Exit(0)


# Verb modules, in the order their commands appear in --help.
VERB_MODULES = ("demo", "snapshot", "index", "slice", "recipe", "probe", "diff", "logs")

for _name in VERB_MODULES:
    if importlib.util.find_spec(f"{__name__}.{_name}") is not None:
        importlib.import_module(f"{__name__}.{_name}").register(app)


def main(argv: list[str] | None = None) -> None:
    """Console entry point."""
    try:
        rc = app(args=argv, standalone_mode=False)
        if isinstance(rc, int) and rc:  # typer.Exit(n) comes back as a return value here
            sys.exit(rc)
    except ReconError as err:
        typer.echo(f"recon: error: {err}", err=True)
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        typer.echo("recon: interrupted", err=True)
        sys.exit(130)
    except typer.Exit as ex:
        sys.exit(ex.exit_code)
    except Exception as ex:  # usage errors and aborts (typer vendors its own click)
        if hasattr(ex, "show") and hasattr(ex, "exit_code"):
            ex.show()
            sys.exit(ex.exit_code)
        if type(ex).__name__ == "Abort":
            typer.echo("recon: aborted", err=True)
            sys.exit(1)
        raise
