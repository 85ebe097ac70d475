"""The ``recon`` command: a thin Typer layer over the library.

Each verb lives in its own module under ``recon.cli`` and exposes
``register(app)``; this file only assembles them and turns
:class:`~recon.errors.ReconError` into one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import signal
import sys
from types import FrameType, TracebackType
from typing import Any

import typer
import typer.main

from ..errors import ReconError
from ..safetext import safe_text
from .output import safe_streams

app = typer.Typer(
    name="recon",
    help="Offline source reconnaissance for LLM inference engines (vLLM, SGLang).",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)



def _print_version(value: bool) -> None:
    """Eager, so ``recon --version`` answers before Typer asks for a command."""
    if value:
        from ..version import __version__

        typer.echo(f"recon {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", "-V", is_eager=True, callback=_print_version,
                                 help="Print recon's version and exit."),
) -> None:
    """Offline source reconnaissance for LLM inference engines (vLLM, SGLang)."""


# Verb modules, in the order their commands appear in --help.
VERB_MODULES = ("demo", "snapshot", "index", "slice", "recipe", "probe", "diff", "hotfix", "logs",
                "engine", "compile_cache", "cache")

for _name in VERB_MODULES:
    if importlib.util.find_spec(f"{__name__}.{_name}") is not None:
        importlib.import_module(f"{__name__}.{_name}").register(app)


def main(argv: list[str] | None = None) -> None:
    """Console entry point.

    Ctrl-C and SIGTERM (``docker stop``, a CI timeout, ``kill``) both unwind as
    KeyboardInterrupt, so the same clean-up runs for either (staging folders,
    containers, temporary ``docker save`` copies); the exit status is 128 + the signal.
    Typer turns the interruption into a silent exit 130, so the signal is recorded here.
    """
    received: list[int] = []

    def interrupt(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        raise KeyboardInterrupt

    old: dict[int, Any] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError):  # not the main thread (embedded use): leave them alone
            old[sig] = signal.signal(sig, interrupt)
    if sys.excepthook is sys.__excepthook__:  # a bug's traceback quotes data too: escaped as well
        sys.excepthook = _safe_excepthook
    try:
        with safe_streams():  # whatever a verb prints, control characters arrive escaped
            _run(argv)
    except (SystemExit, KeyboardInterrupt):
        if not received:
            raise
        typer.echo("recon: interrupted" if received[0] == signal.SIGINT else "recon: terminated", err=True)
        sys.exit(128 + received[0])
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)


def _safe_excepthook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    """Python's traceback, with the control characters its messages may quote escaped."""
    import traceback

    sys.stderr.write(safe_text("".join(traceback.format_exception(kind, value, tb))))


#: how help names a value's type, docker-style (``--format string``); switches show none
_TYPE_WORDS = {"str": "string", "int": "int", "float": "float", "path": "path", "Path": "path"}


def command() -> Any:
    """The click command tree of ``recon``, with help in the docker CLI's conventions.

    Typer labels every option with its Python type (``<bool>`` on a plain
    switch, ``<list[str]>`` on a repeatable one) and arguments as ``{a}``; here
    a switch shows no value, a value shows one word (``string``, ``int``,
    ``list``) and an argument its upper-case name, as ``docker --help`` does.
    """
    cmd = typer.main.get_command(app)
    _conventions(cmd)
    return cmd


def _conventions(cmd: Any) -> None:
    for sub in getattr(cmd, "commands", {}).values():
        _conventions(sub)
    made = cmd.get_help_option

    def help_option(ctx: Any) -> Any:
        opt = made(ctx)
        if opt is not None:
            opt.metavar = ""
        return opt

    cmd.get_help_option = help_option
    for param in cmd.params:
        if param.metavar is not None:
            continue
        if getattr(param, "is_flag", False) or getattr(param, "is_bool_flag", False):
            param.metavar = ""
        elif param.param_type_name == "argument":
            _plain_argument(param)
        else:
            shown = param.display_type_rich(None) if hasattr(param, "display_type_rich") else None
            word = str(shown or "").strip("<>").removesuffix("...")
            param.metavar = "list" if word.startswith("list[") or param.multiple else \
                _TYPE_WORDS.get(word, word or "value")


def _plain_argument(param: Any) -> None:
    """``SOURCE`` / ``[NAME]`` in usage (Typer writes ``{SOURCE}``) and no type column."""
    name = param.name.upper()
    param.metavar = name
    shown = name if param.required else f"[{name}]"
    shown += "..." if param.nargs != 1 else ""
    param._usage_display_name = lambda: shown
    param.display_type_rich = lambda ctx=None: None


def _show_progress(argv: list[str]) -> None:
    """Progress on stderr (a bar on a terminal, lines for long steps when piped), unless
    ``--quiet``/``-q`` or ``--json``."""
    from .. import progress
    from .output import err_console

    progress.hide()
    if not {"--quiet", "-q", "--json"} & set(argv):
        progress.show_on(err_console)


def _run(argv: list[str] | None) -> None:
    """Run the app; every way out becomes an exit status and at most one line on stderr."""
    _show_progress(sys.argv[1:] if argv is None else argv)
    try:
        rc = command().main(args=argv, prog_name="recon", standalone_mode=False)
        if isinstance(rc, int) and rc:  # typer.Exit(n) comes back as a return value here
            sys.exit(rc)
    except ReconError as err:
        typer.echo(f"recon: error: {safe_text(str(err), one_line=True)}", err=True)
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        typer.echo("recon: interrupted", err=True)
        sys.exit(130)
    except BrokenPipeError:  # `recon find ... | head`: the reader left; no traceback, SIGPIPE's status
        from .output import quiet_stdout

        quiet_stdout()
        sys.exit(128 + signal.SIGPIPE)
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
