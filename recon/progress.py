"""Progress of long steps: the library says what it is doing, the CLI decides whether to show it.

Library code (a ``pip download``, building a release's environment, indexing,
each release of a bisect) opens a :func:`task` or a :func:`step` and updates it;
by default nothing is shown, so the Python API and tests stay silent. The CLI
calls :func:`show_on` with its stderr console unless ``--quiet`` or ``--json``
was given. On a terminal every open task is one rich progress line (bytes for
downloads, counts for the rest, elapsed time for all), and the display is live
only while a task is open, so tables printed between steps are never drawn over.
Piped (a log file, CI), a step that runs longer than :data:`QUIET_SECONDS` gets
plain lines instead: when it started, every :data:`EVERY_SECONDS` while it runs,
and when it ended, with its seconds; a quick step prints nothing.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
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

    def close(self, *, failed: bool = False) -> None:
        """Draw the line's last state once (a step shorter than the refresh interval would
        otherwise never show its total), then remove it; the display stops when no task
        is left. ``failed``: the step ended by an exception (piped: said so, not "done")."""
        global _open
        if self._bar is None:
            return
        with _lock:
            self._bar.refresh()
            if isinstance(self._bar, Lines):
                self._bar.end(self._id, failed=failed)
            else:
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
    except BaseException:
        t.close(failed=True)
        raise
    t.close()


#: piped: a step says nothing until it has run this long (a quick step prints no line;
#: ``RECON_PROGRESS_SECONDS`` sets another, 0 for a line for every step) ...
QUIET_SECONDS = 3.0
#: ... then a line every this many seconds while it runs, and one when it ends
EVERY_SECONDS = 30.0


@dataclass
class _Line:
    description: str
    amount: str
    started: float = field(default_factory=time.monotonic)
    said: float | None = None  # when its last line was printed (None: none yet)


class Lines:
    """Steps as plain lines on a console that is not a terminal: the part of rich's
    ``Progress`` that :class:`Task` uses, each line printed whole (a log keeps them all)."""

    def __init__(self, console: Any) -> None:
        self.console = console
        self.tasks: dict[int, _Line] = {}
        self._ids = 0
        self._stop = threading.Event()
        self.quiet = quiet_seconds()

    def start(self) -> None:
        """Watch the open steps (one thread, until :meth:`stop`)."""
        self._stop = threading.Event()
        threading.Thread(target=self._watch, args=(self._stop,), name="recon-progress",
                         daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def add_task(self, description: str, *, total: float | None, amount: str) -> int:
        self._ids += 1
        self.tasks[self._ids] = line = _Line(description, amount)
        if self.quiet <= 0:
            self._say(line, "started")
        return self._ids

    def update(self, tid: int, *, amount: str, description: str | None = None,
               **_: Any) -> None:
        line = self.tasks.get(tid)
        if line is not None:
            line.amount = amount
            line.description = description or line.description

    def refresh(self) -> None:
        """Nothing to redraw: lines are printed as time passes (:meth:`_watch`)."""

    def end(self, tid: int, *, failed: bool) -> None:
        """The step's last line, if it said it started."""
        line = self.tasks.pop(tid, None)
        if line is not None and line.said is not None:
            self._say(line, f"{'stopped' if failed else 'done'} after {_seconds(line)}")

    def _watch(self, stop: threading.Event) -> None:
        while not stop.wait(0.25):
            with _lock:
                for line in list(self.tasks.values()):
                    self._tick(line)

    def _tick(self, line: _Line) -> None:
        now = time.monotonic()
        if line.said is None and now - line.started >= self.quiet:
            self._say(line, f"started {_seconds(line)} ago")
        elif line.said is not None and now - line.said >= EVERY_SECONDS:
            self._say(line, f"{_seconds(line)} so far")

    def _say(self, line: _Line, what: str) -> None:
        line.said = time.monotonic()
        amount = f", {line.amount}" if line.amount else ""
        self.console.print(f"recon: {line.description}: {what}{amount}", markup=False,
                           highlight=False, soft_wrap=True)


def quiet_seconds() -> float:
    """How long a piped step runs before it says so: ``RECON_PROGRESS_SECONDS``, else the default."""
    raw = os.environ.get("RECON_PROGRESS_SECONDS", "").strip()
    try:
        return max(0.0, float(raw)) if raw else QUIET_SECONDS
    except ValueError:
        return QUIET_SECONDS


def _seconds(line: _Line) -> str:
    return f"{time.monotonic() - line.started:.1f} s"


def show_on(console: Any) -> None:
    """Show every task from now on, on ``console`` (the CLI's stderr): a transient bar on a
    terminal, plain lines for steps that take a while elsewhere."""
    global _bar
    if not console.is_terminal:
        _bar = Lines(console)
        return
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
