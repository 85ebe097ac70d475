"""Shared output helpers for the verbs: JSON for scripts, rich for people.

A verb builds a plain-data result (dicts/lists), then calls :func:`emit_json`
when ``--json`` is given, or renders rich tables with :data:`console`.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import sys
from collections.abc import Iterable, Iterator
from typing import IO, Any

from rich.console import Console, RenderableType
from rich.errors import MarkupError
from rich.measure import Measurement
from rich.segment import Segment
from rich.table import Table
from rich.text import Span, Text

from ..safetext import safe_text, unsafe_spans

#: Width when a stream is not a terminal: whole lines (``recon find ... | grep`` must see every
#: name), not rich's 80-column default. ``COLUMNS`` still wins when set.
PIPE_WIDTH = 100_000
#: ... except for tables, drawn no wider than this when piped: a long cell folds onto more lines
#: at its spaces, and only a word longer than its column (a qualname) widens the table, whole.
PIPE_TABLE_WIDTH = 120


class _Console(Console):
    """Rich's console, except that it never sends a control character it was given, and a
    reader closing the pipe is an exception the verb sees.

    Every string and :class:`~rich.text.Text` is escaped (:func:`~recon.safetext.safe_text`)
    before layout, so widths stay right, and the text of every segment is escaped again as it
    is written, whatever renderable made it: styles are rich's (generated), text is data. Only
    rich's own control segments (a live display's cursor moves) pass, and no hyperlink does
    (recon prints none; one would come from markup inside data). Markup that data broke is
    printed as plain text instead of a traceback.

    Rich turns a closed pipe into ``SystemExit(1)``, which made ``recon has ... | head -1``
    answer "no" (exit 1) whatever the answer was.
    """

    def on_broken_pipe(self) -> None:
        quiet_stdout()
        raise BrokenPipeError

    @property
    def file(self) -> IO[str]:
        """The stream underneath rich's redirection (a live display's) and :class:`SafeStream`:
        this console escapes its own text and must not have its colours escaped."""
        stream: Any = self._file or (sys.stderr if self.stderr else sys.stdout)
        for _ in range(8):
            inner = getattr(stream, "rich_proxied_file", None)
            if inner is None or inner is stream:
                break
            stream = inner
        return stream  # type: ignore[no-any-return]

    @file.setter
    def file(self, new_file: IO[str]) -> None:
        self._file = new_file

    def render_str(self, text: str, **kwargs: Any) -> Text:
        try:
            return super().render_str(safe_text(text), **kwargs)
        except MarkupError:  # a name like "[/x]" inside an f-string: show it, do not crash
            return super().render_str(safe_text(text), **{**kwargs, "markup": False})

    def render(self, renderable: RenderableType, options: Any = None) -> Iterable[Segment]:
        if isinstance(renderable, Text):
            renderable = safe_rich_text(renderable)
        return super().render(renderable, options)

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(_safe_segments(buffer))


class _PipeConsole(_Console):
    """A console for pipes and files: no line breaks inside a line of text; a table at most
    :data:`PIPE_TABLE_WIDTH` wide unless a word in it is longer; a rule is one short line."""

    def rule(self, title: Any = "", *args: Any, **kwargs: Any) -> None:
        self.print(f"── {title} ──" if title else "──", soft_wrap=True)

    def print(self, *objects: Any, **kwargs: Any) -> None:
        if len(objects) == 1 and isinstance(objects[0], Table) and kwargs.get("width") is None:
            # a width someone set on this console (a notebook, a test) wins over the pipe's 120
            most = PIPE_TABLE_WIDTH if self.width >= PIPE_WIDTH else self.width
            kwargs["width"] = table_width(self, objects[0], most)
        super().print(*objects, **kwargs)


def table_width(console: Console, table: Table, most: int) -> int:
    """The width to draw ``table`` at: its content's, at most ``most`` where that keeps every
    word whole; a table that cannot (a name wider than the rest leaves it) keeps its content's
    width, each row on one line, so a name is never cut (``recon find ... | grep``).

    A column with nothing to wrap (every cell one word: names, numbers) is marked ``no_wrap``,
    so that narrowing the table wraps the prose columns instead of cutting a name; a column
    whose renderer chose ``overflow="fold"`` may fold its long words.
    """
    narrowest = table._extra_width
    for column in table.columns:
        span = table._measure_column(console, console.options, column)
        if column.width is None and not column.no_wrap:
            column.no_wrap = span.minimum == span.maximum
        folds = column.overflow == "fold" and not column.no_wrap
        narrowest += min(span.maximum, 12) if folds else span.minimum
    fits = Measurement.get(console, console.options, table)
    return min(fits.maximum, most) if narrowest <= most else fits.maximum


def _console(*, stderr: bool) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    if tty or os.environ.get("COLUMNS"):
        return _Console(stderr=stderr)
    return _PipeConsole(stderr=stderr, width=PIPE_WIDTH)


def safe_rich_text(text: Text) -> Text:
    """``text`` with control characters escaped, its styles moved onto the escaped offsets."""
    plain = text.plain
    moves = unsafe_spans(plain)
    if not moves:
        return text
    ends = [end for end, _ in moves]

    def at(i: int) -> int:
        k = bisect.bisect_right(ends, i)
        return i + (moves[k - 1][1] if k else 0)

    out = text.blank_copy(safe_text(plain))
    out.spans = [Span(at(s.start), at(s.end), s.style) for s in text.spans]
    return out


def _safe_segments(buffer: Iterable[Segment]) -> Iterator[Segment]:
    """The last line of defence: whatever renderable made a segment, its text is escaped."""
    for seg in buffer:
        if seg.control:
            yield seg
            continue
        text, style = safe_text(seg.text), seg.style
        if style is not None and style.link:
            style = style.update_link(None)
        yield seg if text is seg.text and style is seg.style else Segment(text, style)


class SafeStream:
    """``sys.stdout``/``sys.stderr`` while the CLI runs: every string written is escaped.

    ``print``, ``typer.echo``, click's usage errors, warnings and tracebacks all write here,
    so no verb can send raw text by forgetting to escape it. Rich consoles write to the
    stream underneath (``rich_proxied_file``): recon's escape the text of their segments
    themselves, and keep their colours.
    """

    def __init__(self, raw: Any) -> None:
        self._raw = raw

    @property
    def rich_proxied_file(self) -> Any:
        return self._raw

    def write(self, text: str) -> int:
        if not isinstance(text, str):  # a text stream refuses bytes (click probes for this)
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self._raw.write(safe_text(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


@contextlib.contextmanager
def safe_streams() -> Iterator[None]:
    """Escape everything written to ``sys.stdout`` and ``sys.stderr`` for the duration."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = SafeStream(sys.stdout), SafeStream(sys.stderr)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


console = _console(stderr=False)
err_console = _console(stderr=True)


def emit_json(obj: Any) -> None:
    """Print ``obj`` as JSON on stdout (nothing else goes to stdout with --json); ASCII only,
    so every control character in a string is a JSON escape (``\u001b``), never a raw byte."""
    sys.stdout.write(json.dumps(obj, indent=2, default=str, ensure_ascii=True) + "\n")
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
