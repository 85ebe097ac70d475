"""Progress of long steps: the library says what it is doing, the CLI decides whether to show it.

Library code (a ``pip download``, building a release's environment, indexing,
each release of a bisect) opens a :func:`task` or a :func:`step` and updates it;
by default nothing is shown, so the Python API and tests stay silent. The CLI
calls :func:`show_on` with its stderr console when that is a terminal and
neither ``--quiet`` nor ``--json`` was given; then every open task is one rich
progress line (bytes for downloads, counts for the rest, elapsed time for all),
and the display is live only while a task is open, so tables printed between
steps are never drawn over.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

_lock = threading.Lock()
_bar: Any = None  # a rich Progress while the CLI shows steps, else None
_open = 0


class Task:
    """One line of progress; every method is a no-op when nothing is shown."""

    def __init__(self, description: str, total: float | None, unit: str) -> None:
        self.unit = unit
        self.total = total
        self.completed = 0.0
        self._bar, self._id = _start(description, total, self._amount())

    def _amount(self) -> str:
        if self.unit == "bytes":
            done = f"{self.completed / 1e6:.1f}"
            return f"{done}/{self.total / 1e6:.1f} MB" if self.total else f"{done} MB"
        if self.total:
            return f"{self.completed:.0f}/{self.total:.0f} {self.unit}"
        return f"{self.completed:.0f} {self.unit}" if self.completed else ""

    def update(self, *, completed: float | None = None, advance: float = 0.0,
               total: float | None = None, description: str | None = None) -> None:
        """Set or advance what is done, and optionally a new total or description."""
        self.completed = completed if completed is not None else self.completed + advance
        self.total = total if total is not None else self.total
        if self._bar is None:
            return
        extra = {"description": description} if description is not None else {}
        self._bar.update(self._id, completed=self.completed, total=self.total,
                         amount=self._amount(), **extra)

    def close(self) -> None:
        """Draw the line's last state once (a step shorter than the refresh interval would
        otherwise never show its total), then remove it; the display stops when no task
        is left."""
        global _open
        if self._bar is None:
            return
        with _lock:
            self._bar.refresh()
            self._bar.remove_task(self._id)
            _open -= 1
            if _open == 0:
                self._bar.stop()
        self._bar = None


def _start(description: str, total: float | None, amount: str) -> tuple[Any, Any]:
    """Add a line to the shown progress (starting it): (bar, task id), or Nones when nothing is shown."""
    global _open
    with _lock:
        bar = _bar
        if bar is None:
            return None, None
        if _open == 0:
            from rich.errors import LiveError

            try:
                bar.start()
            except LiveError:  # another live display (a caller's own bar) owns the terminal
                return None, None
        tid = bar.add_task(description, total=total, amount=amount)
        _open += 1
        return bar, tid


def task(description: str, total: float | None = None, unit: str = "") -> Task:
    """A progress line for a step the caller ends with :meth:`Task.close`."""
    return Task(description, total, unit)


@contextlib.contextmanager
def step(description: str, total: float | None = None, unit: str = "") -> Iterator[Task]:
    """A progress line for the duration of a ``with`` block."""
    t = Task(description, total, unit)
    try:
        yield t
    finally:
        t.close()


def show_on(console: Any) -> None:
    """Show every task from now on, on ``console`` (the CLI's stderr), transient."""
    global _bar
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    # a description names packages and snapshots (data): shown as text, never read as markup
    _bar = Progress(SpinnerColumn(), TextColumn("{task.description}", markup=False), BarColumn(),
                    TextColumn("{task.fields[amount]}"), TimeElapsedColumn(),
                    console=console, transient=True)


def hide() -> None:
    """Stop showing tasks (the state a library user gets)."""
    global _bar, _open
    with _lock:
        if _bar is not None and _open:
            _bar.stop()
        _bar, _open = None, 0
