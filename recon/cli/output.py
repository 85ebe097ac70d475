"""Shared output helpers for the verbs: JSON for scripts, rich for people.

A verb builds a plain-data result (dicts/lists), then calls :func:`emit_json`
when ``--json`` is given, or renders rich tables with :data:`console`.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console

console = Console()
err_console = Console(stderr=True)


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
