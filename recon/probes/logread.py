"""Read what a probe bundle logged: per process and per target.

Input is a folder of per-process ``probe-*.jsonl`` files, plus any other text
file in it (e.g. saved ``docker logs`` output) whose lines carry the runtime's
stderr fallback records (``recon-probe {...}``). Unreadable lines are counted,
never fatal: a worker killed mid-write leaves half a line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from ..errors import ReconError
from ..logs.pyrepr import BoundExceeded, check_bounds
from .runtime import COUNT_FILE, STDERR_PREFIX

#: longest record line read (the runtime's records are a few KiB: it cuts strings at 200
#: characters and containers at 8 items); a longer line is skipped, never held whole
MAX_LINE = 1 << 20


@dataclass
class ProcessLog:
    """One process: its VERIFY record and what it logged."""

    pid: int
    file: str
    ppid: int | None = None
    forked_from: int | None = None
    argv: list[str] = field(default_factory=list)
    python: str | None = None
    env: dict[str, str | None] = field(default_factory=dict)
    targets: dict[str, str] = field(default_factory=dict)  # qualname -> status
    verified: bool = False
    log_error: str | None = None
    chained_sitecustomize: str | None = None
    calls: dict[str, int] = field(default_factory=dict)  # from EXIT, else seen so far
    logged: dict[str, int] = field(default_factory=dict)
    exited: bool = False
    never_fired: list[str] = field(default_factory=list)
    errors: int = 0
    capped: bool = False
    disabled: str | None = None
    max_files: int | None = None


@dataclass
class TargetLog:
    """One target over all processes."""

    qualname: str
    patched_in: int = 0  # processes where the target was patched
    calls: int = 0  # exact when every process wrote EXIT, else a lower bound
    calls_exact: bool = True
    logged: int = 0
    meta_only: int = 0  # records taken during CUDA graph capture
    raised: int = 0
    errors: int = 0
    shapes: dict[str, int] = field(default_factory=dict)  # distinct shape signature -> calls
    first: dict[str, Any] | None = None
    last: dict[str, Any] | None = None


@dataclass
class LogSummary:
    """``recon probe read``'s answer; plain data for notebooks, tables for people."""

    logdir: str
    files: list[str]
    processes: list[ProcessLog]
    targets: list[TargetLog]
    bad_lines: int = 0
    unreadable: dict[str, int] = field(default_factory=dict)  # file -> its unreadable lines
    errors: list[dict[str, Any]] = field(default_factory=list)
    max_files: int | None = None  # the bundle's cap on log files per folder (from VERIFY)
    unlogged_processes: int = 0  # processes beyond that cap: they wrote nothing

    def cap_note(self) -> str | None:
        """The line that says records were dropped because the folder was full."""
        if not self.unlogged_processes:
            return None
        return (f"{self.unlogged_processes} more processes wrote no log: the bundle's cap of "
                f"{self.max_files} log files per folder was reached (their records were "
                "dropped; `recon probe new --max-files` sets the cap).")

    def unreadable_note(self) -> str | None:
        """One line: how many lines of which files were not records (torn, wrong shape)."""
        if not self.bad_lines:
            return None
        files = ", ".join(f"{name} {n}" for name, n in list(self.unreadable.items())[:5])
        more = len(self.unreadable) - 5
        return (f"{self.bad_lines} unreadable lines skipped ({files}"
                f"{f' and {more} more files' if more > 0 else ''})")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def to_markdown(self) -> str:
        lines = [f"# Probe logs: `{self.logdir}`", "",
                 f"{len(self.processes)} processes, {len(self.files)} files, "
                 f"{self.bad_lines} unreadable lines.", "",
                 *([self.cap_note() or "", ""] if self.unlogged_processes else []),
                 "## Processes", "",
                 "| pid | parent | argv | python | env | patched | calls | errors | exit |",
                 "|---|---|---|---|---|---|---|---|---|"]
        for p in self.processes:
            patched = sum(s == "patched" for s in p.targets.values())
            lines.append(f"| {p.pid} | {p.forked_from or p.ppid or ''} | `{short_argv(p.argv)}` | "
                         f"{p.python or '?'} | {short_env(p.env)} | {patched}/{len(p.targets)} | "
                         f"{sum(p.calls.values())} | {p.errors} | {'yes' if p.exited else 'no'} |")
        lines += ["", "## Targets", "",
                  "| target | processes | calls | logged | shapes | first | last | errors |",
                  "|---|---|---|---|---|---|---|---|"]
        for t in self.targets:
            calls = f"{t.calls}" if t.calls_exact else f">={t.calls}"
            shapes = "; ".join(f"{k} x{n}" for k, n in list(t.shapes.items())[:5])
            lines.append(f"| `{t.qualname}` | {t.patched_in} | {calls} | {t.logged} | {shapes} | "
                         f"`{compact(t.first)}` | `{compact(t.last)}` | {t.errors} |")
        return "\n".join(lines) + "\n"


def short_argv(argv: list[str], limit: int = 60) -> str:
    """The command line without the interpreter's directory, cut to ``limit``."""
    text = " ".join([Path(argv[0]).name, *argv[1:]] if argv else [])
    return text if len(text) <= limit else text[: limit - 3] + "..."


def short_env(env: dict[str, str | None]) -> str:
    """``VAR=value`` pairs; an unset variable shows as ``VAR unset``."""
    return ", ".join(f"{k}={v}" if v is not None else f"{k} unset" for k, v in env.items())


def compact(rec: dict[str, Any] | None, limit: int = 120) -> str:
    """The interesting part of a call record on one line."""
    if not rec:
        return ""
    parts = {k: rec[k] for k in ("args", "self", "expr", "return", "raised") if k in rec}
    text = json.dumps(parts, separators=(",", ":"), default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def shape_signature(rec: dict[str, Any]) -> str:
    """Tensor shapes and sequence lengths of a call, values left out (they vary every call)."""
    parts = []
    named = [(k, v) for key in ("args", "self") for k, v in (rec.get(key) or {}).items()]
    if "return" in rec:
        named.append(("return", rec["return"]))
    for name, value in named:
        sig = _shape_of(value)
        if sig:
            parts.append(f"{name}={sig}")
    return ", ".join(parts) or "-"


def _shape_of(v: Any) -> str | None:
    if not isinstance(v, dict):
        return None
    if "shape" in v:
        return f"{v.get('dtype', '')}{list(v['shape']) if isinstance(v['shape'], list) else v['shape']}"
    if "len" in v:
        return f"{v.get('type', 'seq')}[{v['len']}]"
    return None


def iter_records(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Records of one file and the count of lines that looked like records but were not:
    torn or over-long lines, bad JSON, or a record whose fields have the wrong types."""
    records, bad = [], 0
    with open(path, "rb") as fh:
        for raw in _capped_lines(fh):
            if raw is None:
                bad += 1
                continue
            line = raw.decode("utf-8", errors="replace")
            at = line.find(STDERR_PREFIX + "{")
            text = line[at + len(STDERR_PREFIX):] if at >= 0 else line
            if not text.startswith("{"):
                continue
            rec = _record(text)
            if rec is None:
                bad += 1
            else:
                records.append(rec)
    return records, bad


def _capped_lines(fh: IO[bytes]) -> Iterator[bytes | None]:
    """The file's lines; ``None`` for one over :data:`MAX_LINE` bytes, read past in pieces."""
    while raw := fh.readline(MAX_LINE + 1):
        if len(raw) <= MAX_LINE or raw.endswith(b"\n"):
            yield raw
            continue
        while (rest := fh.readline(MAX_LINE)) and not rest.endswith(b"\n"):
            pass
        yield None


def _record(text: str) -> dict[str, Any] | None:
    """A record of the runtime's shape, or ``None``. Nesting and digit runs are bounded
    before the JSON parser sees the text (a 100,000-deep ``[`` would exhaust its stack)."""
    try:
        check_bounds(text)
        rec = json.loads(text)
    except (ValueError, RecursionError, BoundExceeded):
        return None
    if not isinstance(rec, dict) or not _is_str(rec.get("kind")):
        return None
    fields = {**_COMMON, **_FIELDS.get(rec["kind"], {})}
    return rec if all(ok(rec.get(key)) for key, ok in fields.items()) else None


def _is_int(v: Any) -> bool:
    return type(v) is int  # not bool, not a float (1e999 and Infinity read as floats)


def _is_str(v: Any) -> bool:
    return type(v) is str


def _opt(ok: Callable[[Any], bool]) -> Callable[[Any], bool]:
    """``ok`` or absent (``null``)."""
    return lambda v: v is None or ok(v)


def _list_of(ok: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, list) and all(ok(x) for x in v)


def _dict_of(ok: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, dict) and all(ok(x) for x in v.values())


#: the fields the reader uses, by record kind, with the types the runtime writes
#: (runtime.py: _verify_record, _open_call, _swallow, _exit); other fields are kept as data
_COMMON: dict[str, Callable[[Any], bool]] = {"pid": _opt(_is_int)}
_FIELDS: dict[str, dict[str, Callable[[Any], bool]]] = {
    "VERIFY": {"ppid": _opt(_is_int), "forked_from": _opt(_is_int), "python": _opt(_is_str),
               "log_error": _opt(_is_str), "chained_sitecustomize": _opt(_is_str),
               "max_files": _opt(_is_int), "argv": _opt(_list_of(_is_str)),
               "env": _opt(_dict_of(_opt(_is_str))), "targets": _opt(_dict_of(_is_str))},
    "patched": {"target": _is_str, "status": _opt(_is_str)},
    "call": {"target": _opt(_is_str), "n": _opt(_is_int), "args": _opt(_dict_of(lambda v: True)),
             "self": _opt(_dict_of(lambda v: True))},
    "error": {"target": _opt(_is_str)},
    "disabled": {"reason": _opt(_is_str)},
    "EXIT": {"calls": _opt(_dict_of(_opt(_is_int))), "never_fired": _opt(_list_of(_is_str))},
}


#: the names the runtime gives its logs (runtime.py: probe-PID-STAMP.jsonl)
LOG_GLOB = "probe-*.jsonl"


def read_logs(logdir: str | Path) -> LogSummary:
    """Summarise every probe log in ``logdir`` (and in its immediate subfolders).

    Only the runtime's own files (``probe-PID-STAMP.jsonl``) are read, in the folder
    and one level down (logs gathered per host or container); pointing at ``/tmp``
    does not walk the whole tree, and links are not followed.
    """
    root = Path(logdir)
    if not root.is_dir():
        raise ReconError(f"{root} is not a folder of probe logs")
    files = sorted(p for p in [*root.glob(LOG_GLOB), *root.glob(f"*/{LOG_GLOB}")]
                   if not p.is_symlink() and p.is_file()
                   and not any(part.startswith(".") for part in p.relative_to(root).parts))
    procs: dict[tuple[str, int], ProcessLog] = {}
    targets: dict[str, TargetLog] = {}
    summary = LogSummary(logdir=str(root), files=[], processes=[], targets=[])
    for path in files:
        records, bad = iter_records(path)
        summary.bad_lines += bad
        if bad:
            summary.unreadable[str(path.relative_to(root))] = bad
        if not records:
            continue
        summary.files.append(str(path.relative_to(root)))
        for rec in records:
            _take(rec, path, procs, targets, summary)
    summary.processes = sorted(procs.values(), key=lambda p: (p.file, p.pid))
    for proc in summary.processes:
        for qualname, status in proc.targets.items():
            tl = targets.setdefault(qualname, TargetLog(qualname))
            tl.patched_in += status == "patched"
        for qualname, n in proc.calls.items():
            tl = targets.setdefault(qualname, TargetLog(qualname))
            tl.calls += n
            tl.calls_exact = tl.calls_exact and proc.exited
    summary.targets = sorted(targets.values(), key=lambda t: t.qualname)
    _count_unlogged(root, summary)
    return summary


def _count_unlogged(root: Path, summary: LogSummary) -> None:
    """Processes over the cap: each process that tried to log appended one byte to its
    folder's count file (runtime.py: ``probe-files.count``); those past the cap made
    no file."""
    caps = [p.max_files for p in summary.processes if isinstance(p.max_files, int)]
    if not caps:
        return
    summary.max_files = max(caps)
    subfolders = [p for p in root.iterdir()
                  if p.is_dir() and not p.is_symlink() and not p.name.startswith(".")]
    for folder in [root, *subfolders]:
        count = folder / COUNT_FILE
        if count.is_file() and not count.is_symlink():
            summary.unlogged_processes += max(0, count.stat().st_size - summary.max_files)


def _take(rec: dict[str, Any], path: Path, procs: dict[tuple[str, int], ProcessLog],
          targets: dict[str, TargetLog], summary: LogSummary) -> None:
    pid = int(rec.get("pid") or 0)
    proc = procs.setdefault((str(path), pid), ProcessLog(pid=pid, file=path.name))
    kind = rec["kind"]
    if kind == "VERIFY":
        proc.verified = True
        for key in ("ppid", "forked_from", "python", "log_error", "chained_sitecustomize",
                    "max_files"):
            setattr(proc, key, rec.get(key))
        proc.argv = list(rec.get("argv") or [])
        proc.env = dict(rec.get("env") or {})
        proc.targets.update(rec.get("targets") or {})
    elif kind == "patched":
        proc.targets[rec["target"]] = rec.get("status", "patched")
    elif kind == "call":
        q = rec.get("target", "?")
        tl = targets.setdefault(q, TargetLog(q))
        tl.logged += 1
        tl.meta_only += rec.get("mode") == "meta"
        tl.raised += "raised" in rec
        sig = shape_signature(rec)
        tl.shapes[sig] = tl.shapes.get(sig, 0) + 1
        tl.first = tl.first or rec
        tl.last = rec
        proc.logged[q] = proc.logged.get(q, 0) + 1
        if not proc.exited:
            proc.calls[q] = max(proc.calls.get(q, 0), int(rec.get("n", 0)) + 1)
    elif kind == "error":
        proc.errors += 1
        q = rec.get("target")
        if q:
            targets.setdefault(q, TargetLog(q)).errors += 1
        summary.errors.append(rec)
    elif kind == "cap":
        proc.capped = True
    elif kind == "disabled":
        proc.disabled = rec.get("reason")
    elif kind == "EXIT":
        proc.exited = True
        proc.calls = {q: int(n or 0) for q, n in (rec.get("calls") or {}).items()}
        proc.never_fired = list(rec.get("never_fired") or [])
