"""Read a server log: take each line's prefix apart, match the table, collect errors.

Logs arrive as ``docker logs`` / ``kubectl logs`` output, with or without
their timestamps, with colour codes, with worker lines interleaved, with
tracebacks whose every line carries a vLLM worker prefix. Nothing in a log is
trusted to be well formed: a line recon cannot read is skipped, never fatal.

Lines repeated by every tensor-parallel rank are folded into one event (with a
count), and a quantity that differs between ranks or between start-ups keeps
every distinct value, so disagreement is visible rather than averaged away.
"""

from __future__ import annotations

import bisect
import re
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from ..errors import ReconError
from .models import ErrorReport, Event, LogLine, Observed, ServerLog
from .patterns import BY_ID, match_line
from .pyrepr import BoundExceeded
from .quantities import QUANTITIES

_SNIFF = 8192  # bytes looked at for NUL bytes before a file is read as a log
#: The longest line recon reads, in bytes (characters for text): engines' longest lines (the
#: argument and resolved-config lines) are tens of KiB; a longer one is refused, unread.
MAX_LINE = 1 << 20
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
#: Terminal commands a log can carry (window titles, hyperlinks: OSC ... BEL/ST), dropped like colours.
_OSC = re.compile(r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?")
#: Other control characters are shown, never sent: a log is untrusted input to a terminal.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# stamps added outside the engine: `docker logs -t` / `kubectl logs --timestamps` (ISO), and
# collectors that write "2026-05-01 19:08:28.357 | " before each line
_OUTER_TS = re.compile(r"^\d{4}-\d\d-\d\d(?:T\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?\s+|"
                       r" \d\d:\d\d:\d\d(?:\.\d+)?\s*\|\s?)")
_VLLM = re.compile(
    r"^(?:\((?P<proc>[^()]+)\)\s+)?(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+"
    r"(?P<time>\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)?\s+"
    r"(?:\[(?P<src>[^\]]+)\]|(?P<src_old>[\w./-]+\.py:\d+)\])\s?(?P<msg>.*)$")
_SGLANG = re.compile(
    r"^(?:\((?P<proc>[^()]+)\)\s+)?\[(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,]\d+)?"
    r"(?P<ranks>(?:\s+[A-Z_]+\d+)*)\]\s?(?:(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+)?"
    r"(?P<msg>.*)$")
_PROC_ONLY = re.compile(r"^\((?P<proc>[\w ]+ pid=\d+(?:, ip=[\d.]+)?)\)\s?(?P<msg>.*)$")
_UVICORN = re.compile(r"^(?P<level>INFO|WARNING|ERROR):\s+(?P<msg>.*)$")

_TB_START = "Traceback (most recent call last):"
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
_EXC = re.compile(r"^(?:[A-Za-z_][\w]*\.)*(?:[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Fault)|"
                  r"AssertionError|KeyboardInterrupt|StopIteration)\b(?::.*)?$")
_CONTINUED = ("GPU ", "Including non-PyTorch", "Of the allocated", "CUDA kernel errors",
              "For debugging", "Compile with", "Search for `cudaError", "If reserved but")
_CHAIN = ("During handling of the above exception", "The above exception was the direct cause")


def split_prefix(no: int, raw: str) -> LogLine:
    """Take the engine's prefix (process, level, time, file:line) off one line."""
    text = _ANSI.sub("", raw.rstrip("\r\n")).rsplit("\r", 1)[-1]  # a progress bar's last state
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", _OSC.sub("", text))
    text = _OUTER_TS.sub("", text)
    m = _VLLM.match(text)
    if m:
        return LogLine(no, m["msg"], raw, m["level"], m["time"], m["proc"],
                       m["src"] or m["src_old"], "vllm" if m["src"] else "vllm-old")
    m = _SGLANG.match(text)
    if m:
        ranks = (m["ranks"] or "").strip() or None
        proc = " ".join(x for x in (m["proc"], ranks) if x) or None
        return LogLine(no, m["msg"], raw, m["level"], m["time"], proc, None, "sglang")
    m = _PROC_ONLY.match(text)
    if m:
        return LogLine(no, m["msg"], raw, None, None, m["proc"], None, "vllm-proc")
    m = _UVICORN.match(text)
    if m:
        return LogLine(no, m["msg"], raw, m["level"], None, None, None, "uvicorn")
    return LogLine(no, text, raw, None, None, None, None, "bare")


class _Tracebacks:
    """Per-process traceback state: vLLM workers interleave theirs line by line."""

    def __init__(self) -> None:
        self.open: dict[str, ErrorReport] = {}
        self.last_error: dict[str, tuple[int, ErrorReport]] = {}
        self.done: list[ErrorReport] = []
        self.recent = ""

    def feed(self, ln: LogLine) -> bool:
        """True when the line belonged to an error (so it is not matched as anything else)."""
        key = ln.process or ""
        msg = ln.text.strip()
        if key not in self.open and ln.style == "bare" and self.recent in self.open:
            key = self.recent  # SGLang logs a traceback as one message: its lines carry no prefix
        tb = self.open.get(key)
        if tb is not None:
            self.recent = key
            fm = _FRAME.match(msg)
            if fm:
                frame = f"{fm['file']}:{fm['line']} in {fm['func']}"
                tb.first_frame = tb.first_frame or frame
                tb.last_frame = frame
                return True
            if msg.startswith(_CHAIN) or msg == _TB_START or not msg:
                return True
            if _EXC.match(msg):
                if tb.exception and tb.exception != msg:  # chained: keep the root cause too
                    tb.cause = tb.cause or tb.exception
                tb.exception = msg
                return True
            if ln.text[:1].isspace():
                return True  # a source line quoted by the traceback
            if tb.exception and msg.startswith(_CONTINUED):
                return True  # the exception message goes on (CUDA OOM prints four lines)
            # anything else ends it (the exception line may have been cut off)
            self._close(key)
        if msg.endswith(_TB_START):
            recent = self.last_error.get(key)
            head = msg[: -len(_TB_START)].strip().rstrip(":") or None
            if recent and ln.no - recent[0] <= 3:
                err = recent[1]
            else:
                err = ErrorReport(ln.no, head or "traceback", process=ln.process, time=ln.time)
                self.done.append(err)
            self.open[key] = err
            self.recent = key
            return True
        if ln.level in ("ERROR", "CRITICAL") or (ln.style == "bare" and _EXC.match(msg)):
            err = ErrorReport(ln.no, msg, exception=msg if _EXC.match(msg) else None,
                              process=ln.process, time=ln.time)
            self.done.append(err)
            self.last_error[key] = (ln.no, err)
            return True
        return False

    def _close(self, key: str) -> None:
        err = self.open.pop(key, None)
        if err is not None and err.headline == "traceback" and err.exception:
            err.headline = err.exception

    def finish(self) -> list[ErrorReport]:
        for key in list(self.open):
            self._close(key)
        folded: dict[tuple[str, str | None], ErrorReport] = {}
        for err in self.done:
            k = (err.headline, err.exception)
            if k in folded:
                folded[k].count += 1
            else:
                folded[k] = err
        return list(folded.values())


def read_log(path: str | Path, *, engine: str | None = None) -> ServerLog:
    """Parse a server log file, or standard input for ``-`` (``kubectl logs POD | recon logs -``).

    Line numbers are the file's (or the stream's), so they match ``grep -n``. A file with
    NUL bytes near its start is not a log (a core dump, an archive): one line says so.
    """
    if str(path) == "-":
        return _read_stream(sys.stdin.buffer, "<stdin>", engine)
    p = Path(path)
    try:
        fh = open(p, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError as err:
        raise ReconError(f"log not found: {p}") from err
    except IsADirectoryError as err:
        raise ReconError(f"{p} is a folder; pass the log file") from err
    with fh:
        return _read_stream(fh, str(p), engine)


def _read_stream(fh: IO[bytes], name: str, engine: str | None) -> ServerLog:
    """Line by line: a long-running server's log can be gigabytes; only matches are kept."""
    head = fh.peek(_SNIFF)[:_SNIFF] if hasattr(fh, "peek") else b""
    if b"\x00" in head:
        raise ReconError(f"{name} is not a text log: NUL byte at offset {head.index(0)} "
                         "(binary data; pass the engine's stdout/stderr log)")
    return parse_lines(_bounded_lines(fh, name), path=name, engine=engine)


def _bounded_lines(fh: IO[bytes], name: str) -> Iterable[str]:
    """The stream's lines, none read past :data:`MAX_LINE` bytes (a 1 GiB line is never held)."""
    n = 0
    while raw := fh.readline(MAX_LINE + 1):
        n += 1
        if len(raw) > MAX_LINE and not raw.endswith(b"\n"):
            raise _too_long(name, n)
        yield raw.rstrip(b"\n").decode("utf-8", errors="replace")


def _too_long(name: str, no: int) -> ReconError:
    return ReconError(f"line {no} is longer than {MAX_LINE >> 20} MiB without a line break: not "
                      f"an engine's log line (recon reads lines of at most {MAX_LINE} bytes)",
                      where=name)


def parse_text(text: str, *, path: str = "<text>", engine: str | None = None) -> ServerLog:
    """Parse log text: events, observed quantities, arguments, errors."""
    parts = text.split("\n")
    if text.endswith("\n"):
        parts.pop()  # a final newline ends a line, it starts none
    return parse_lines(parts, path=path, engine=engine)


def parse_lines(lines: Iterable[str], *, path: str = "<text>", engine: str | None = None) -> ServerLog:
    """Parse log lines (split on "\\n" only): events, observed quantities, arguments, errors."""
    if engine not in (None, "vllm", "sglang"):
        raise ReconError(f"--engine must be vllm or sglang, got {engine!r}")
    tbs = _Tracebacks()
    events: list[Event] = []
    printed: dict[int, dict[str, str]] = {}
    votes: Counter[str] = Counter()
    n = 0
    # split on "\n" only: a tqdm bar's "\r" updates stay one line, so numbers match `grep -n`
    for n, raw in enumerate(lines, 1):
        if len(raw) > MAX_LINE:
            raise _too_long(path, n)
        ln = split_prefix(n, raw)
        if tbs.feed(ln):
            continue
        try:
            hit = match_line(ln.text, engine)
        except BoundExceeded as err:
            raise ReconError(f"line {n}: {err}", where=path) from None
        if hit is None:
            continue
        pat = hit.pattern
        if pat.engine != "any":
            votes[pat.engine] += 1
        events.append(Event(n, pat.id, pat.engine, hit.values, ln.text.strip(), ln.time,
                            ln.process, ln.level))
        printed[n] = hit.printed
    found = engine or (votes.most_common(1)[0][0] if votes else None)
    log = ServerLog(path=path, engine=found, version=None, lines=n)
    log.errors = tbs.finish()
    _collect(log, events, printed)
    return log


def _start_boundaries(events: list[Event]) -> list[int]:
    """Line numbers where an engine start-up begins (its argument line, else its version line)."""
    for kind in ("args", "version", "config"):
        lines = [e.line for e in events if BY_ID[e.pattern].kind == kind]
        if lines:
            return lines
    return [events[0].line] if events else []


def _collect(log: ServerLog, events: list[Event], printed: dict[int, dict[str, str]]) -> None:
    starts = _start_boundaries(events)
    log.starts = len(starts)
    last_start = starts[-1] if starts else 0
    def seg_of(line: int) -> int:  # which start-up a line belongs to (starts are in line order)
        return bisect.bisect_right(starts, line)

    folded: dict[tuple[int, str, str], Event] = {}
    formats: list[str] = []
    for ev in events:
        pat = BY_ID[ev.pattern]
        if ev.pattern not in formats:
            formats.append(ev.pattern)
        if pat.series:
            if pat.kind == "spec" and _is_spec_window(ev):
                log.spec_windows.append({"line": ev.line, "time": ev.time, "process": ev.process,
                                         "pattern": ev.pattern, **ev.values})
            log.events.append(ev)
            continue
        key = (seg_of(ev.line), ev.pattern, _fold_key(ev.values))
        if key in folded:
            folded[key].repeats += 1
            continue
        folded[key] = ev
        log.events.append(ev)
        if pat.kind == "args":
            log.args, log.args_line = ev.values.get("args", {}), ev.line
            continue
        for name, value in ev.values.items():
            if name == "resolved":
                log.resolved, log.resolved_line = value, ev.line
                continue
            if name == "args":
                continue
            _observe(log, name, value, ev, printed.get(ev.line, {}).get(name), last_start)
    log.formats = formats
    if "version" in log.observed:
        log.version = str(log.observed["version"].value)


def _fold_key(values: dict[str, Any]) -> str:
    """What makes two rank lines "the same": their values, timings aside (ranks differ by ms)."""
    return repr(sorted((k, v) for k, v in values.items()
                       if not (k in QUANTITIES and QUANTITIES[k].unit == "s")))


def _is_spec_window(ev: Event) -> bool:
    return any(k.startswith("spec_") for k in ev.values)


def _observe(log: ServerLog, name: str, value: Any, ev: Event, raw: str | None,
             last_start: int) -> None:
    q = QUANTITIES.get(name)
    obs = log.observed.get(name)
    seen = {"value": value, "line": ev.line, "process": ev.process}
    if obs is None:
        log.observed[name] = Observed(name, value, ev.line, raw, q.label if q else name,
                                      q.unit if q else "", [seen])
        return
    if all(repr(s["value"]) != repr(value) for s in obs.seen):
        obs.seen.append(seen)
    # the last start-up's value is the one that describes the running server (its first, for a
    # quantity a drafter prints again after the main model)
    if q is not None and q.first and obs.line >= last_start:
        return
    if ev.line >= last_start or obs.line < last_start:
        obs.value, obs.line, obs.raw = value, ev.line, raw
