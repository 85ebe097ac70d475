"""Shared output helpers for the verbs: JSON for scripts, rich for people.

A verb builds a plain-data result (dicts/lists), then calls :func:`emit_json`
when ``--json`` is given, or renders rich tables with :data:`console`.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from rich.console import Console

#: Width when a stream is not a terminal: whole lines (``recon find ... | grep`` must see every
#: name), not rich's 80-column default. ``COLUMNS`` still wins when set.
PIPE_WIDTH = 100_000


class _Console(Console):
    """Rich's console, except that a reader closing the pipe is an exception the verb sees.

    Rich turns it into ``SystemExit(1)``, which made ``recon has ... | head -1`` answer
    "no" (exit 1) whatever the answer was.
    """

    def on_broken_pipe(self) -> None:
        quiet_stdout()
        raise BrokenPipeError


class _PipeConsole(_Console):
    """A console for pipes and files: no line breaks inside a row; a rule is one short line."""

    def rule(self, title: Any = "", *args: Any, **kwargs: Any) -> None:
        self.print(f"── {title} ──" if title else "──", soft_wrap=True)


def _console(*, stderr: bool) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    if tty or os.environ.get("COLUMNS"):
        return _Console(stderr=stderr)
    return _PipeConsole(stderr=stderr, width=PIPE_WIDTH)


console = _console(stderr=False)
err_console = _console(stderr=True)


def emit_json(obj: Any) -> None:
    """Print ``obj`` as JSON on stdout (nothing else goes to stdout with --json)."""
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")
    sys.stdout.flush()


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def quiet_stdout() -> None:
    """After the reader of a pipe went away: send what is left to /dev/null, so the
    interpreter's final flush raises no second BrokenPipeError."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
