"""Several runs' logs side by side: which runs shared a torch.compile cache, and who wrote it.

The field case: a speculative-decoding deployment lost two thirds of its acceptance
rate because later runs loaded compiled artefacts an earlier, failed run had written
into the cache folder they shared. Each run's log names the folder it used
(``Using cache directory``), and says whether it compiled and saved or loaded
(``Directly load ... from the cache``). This module reads a folder of logs (or one
log holding several start-ups), orders the runs by their first time stamp, and for
every run that loaded says which earlier run wrote that folder and which settings
of theirs differ although the key left them out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ReconError
from .models import ServerLog
from .parse import parse_lines, read_log

#: at most this many log files of a folder are read (a folder of anything else is refused)
MAX_RUNS = 200
#: the file names read from a folder
LOG_SUFFIXES = (".log", ".txt", ".out")
#: how much of a log's top is read for its first time stamp
HEAD_BYTES = 1 << 20
_STAMP = re.compile(r"(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")
#: arguments that name where a run is, not what it computes (never reported as a difference)
_PLACES = {"model", "model_tag", "served_model_name", "port", "host", "tokenizer"}


@dataclass
class Run:
    """One engine start-up and what it did with the compile cache."""

    name: str
    log: ServerLog
    stamp: str | None  # MM-DD HH:MM:SS of its first time-stamped line
    folder: str | None  # the graphs' folder (torch_compile_cache/<hash>) it used
    aot: str | None  # the AOT-compiled function's folder name
    loaded: bool  # it loaded compiled graphs or the AOT function from the cache
    disabled: bool

    @property
    def args(self) -> dict[str, Any]:
        return self.log.args


@dataclass
class Reuse:
    """``loader`` loaded what ``writer`` (None: no run of these logs) compiled into ``folder``."""

    loader: str
    writer: str | None
    folder: str
    differ: dict[str, tuple[Any, Any]] = field(default_factory=dict)


def _run(name: str, log: ServerLog, first_stamp: str | None) -> Run:
    folder = log.value("compile_cache_hash")
    return Run(name, log, first_stamp, folder, log.value("aot_compile_hash"),
               bool(log.value("aot_compile_loaded") or log.value("compile_graphs_loaded_range")),
               bool(log.value("compile_cache_disabled")))


def _first_stamp(lines: list[str]) -> str | None:
    for line in lines[:2000]:
        m = _STAMP.search(line)
        if m:
            return m.group(0)
    return None


def _split_starts(name: str, lines: list[str]) -> list[tuple[str, list[str]]]:
    """One text holding several start-ups (a concatenation): one piece per start-up."""
    whole = parse_lines(lines, path=name)
    marks = sorted({e.line for e in whole.events if e.pattern.startswith(("vllm.args", "vllm.version"))})
    starts: list[int] = []
    for line in marks:  # an args line and its version line belong to one start-up
        if not starts or line - starts[-1] > 50:
            starts.append(line)
    if len(starts) < 2:
        return [(name, lines)]
    cuts = [max(s - 1, 0) for s in starts[1:]]
    bounds = [0, *cuts, len(lines)]
    return [(f"{name}#{i + 1}", lines[a:b]) for i, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False))]


def read_runs(path: str | Path) -> list[Run]:
    """The runs of a folder of logs, or of one log with several start-ups, in time order."""
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.is_file() and f.suffix in LOG_SUFFIXES)
        if len(files) > MAX_RUNS:
            raise ReconError(f"{p}: {len(files)} log files; at most {MAX_RUNS} are compared")
        pieces = []
        for f in files:
            log = read_log(f)
            with open(f, "rb") as fh:  # the first time stamp is near the top: read only that
                head = fh.read(HEAD_BYTES).decode("utf-8", errors="replace").split("\n")
            pieces.append(_run(f.name, log, _first_stamp(head)))
        runs = pieces
    else:
        text = sys_text(p)
        runs = [_run(n, parse_lines(ls, path=n), _first_stamp(ls))
                for n, ls in _split_starts(p.name if str(p) != "-" else "<stdin>", text)]
    return sorted(runs, key=lambda r: (r.stamp is None, r.stamp or "", r.name))


def sys_text(p: Path) -> list[str]:
    """A log's lines (``-``: standard input)."""
    import sys

    if str(p) == "-":
        return sys.stdin.read().split("\n")
    return p.read_text(encoding="utf-8", errors="replace").split("\n")


def _differences(a: dict[str, Any], b: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    keys = (set(a) | set(b)) - _PLACES
    return {k: (a.get(k), b.get(k)) for k in sorted(keys) if a.get(k) != b.get(k)}


def reuses(runs: list[Run]) -> list[Reuse]:
    """Every run that loaded from the cache, with the earlier run that wrote the folder."""
    out = []
    for i, run in enumerate(runs):
        if not run.loaded or not run.folder:
            continue
        writers = [r for r in runs[:i] if r.folder == run.folder and not r.loaded]
        writer = writers[-1] if writers else None
        out.append(Reuse(run.name, writer.name if writer else None, run.folder,
                         _differences(writer.args, run.args) if writer else {}))
    return out


def shared_folders(runs: list[Run]) -> dict[str, list[str]]:
    """Folder -> the runs that used it, for folders more than one run used."""
    by: dict[str, list[str]] = {}
    for run in runs:
        if run.folder:
            by.setdefault(run.folder, []).append(run.name)
    return {k: v for k, v in by.items() if len(v) > 1}


def story(runs: list[Run]) -> list[str]:
    """The compile cache across these runs, in a few lines."""
    if not any(r.folder or r.disabled for r in runs):
        return ["No run logged a torch.compile cache folder (eager runs, or a release that "
                "does not say)."]
    lines = []
    for reuse in reuses(runs):
        if reuse.writer is None:
            lines.append(f"{reuse.loader} loaded compiled artefacts from {reuse.folder} that no "
                         "run of these logs wrote (an earlier run, or another machine's copy).")
            continue
        said = f"{reuse.loader} loaded the compiled model {reuse.writer} wrote ({reuse.folder})"
        if reuse.differ:
            diff = "; ".join(f"{k}: {_show(a)} -> {_show(b)}" for k, (a, b) in reuse.differ.items())
            said += (f", although their settings differ ({diff}): the release leaves those out "
                     "of its compile cache key")
        lines.append(said + ".")
    for folder, names in shared_folders(runs).items():
        if not any(r.folder == folder and r.loaded for r in runs):
            lines.append(f"{', '.join(names)} used one folder ({folder}) without loading from it.")
    return lines or ["No run loaded a folder another run wrote: each compiled its own."]


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def run_rows(runs: list[Run]) -> list[list[str]]:
    """One row per run: name, first time stamp, folder, AOT folder, compiled or loaded."""
    rows = []
    for run in runs:
        what = "cache off" if run.disabled else "loaded" if run.loaded else \
            "compiled" if run.folder else "no cache line"
        rows.append([run.name, run.stamp or "-", run.folder or "-",
                     (run.aot or "-")[:12], what])
    return rows


def runs_json(runs: list[Run]) -> dict[str, Any]:
    """``recon logs DIR --json``: the runs, who loaded what whom wrote, the story."""
    return {"runs": [{"name": r.name, "first_stamp": r.stamp, "compile_cache_hash": r.folder,
                      "aot_compile_hash": r.aot, "loaded": r.loaded, "disabled": r.disabled,
                      "args": r.args} for r in runs],
            "reuses": [{"loader": u.loader, "writer": u.writer, "compile_cache_hash": u.folder,
                        "differ": {k: list(v) for k, v in u.differ.items()}}
                       for u in reuses(runs)],
            "shared": shared_folders(runs), "story": story(runs), "fix": FIX}


FIX = ("to keep runs apart, give each its own cache root (VLLM_CACHE_ROOT=<a folder per run>) "
       "or turn the cache off for a suspect run (VLLM_DISABLE_COMPILE_CACHE=1); to check what "
       "a folder holds: recon compile-cache inspect DIR")

