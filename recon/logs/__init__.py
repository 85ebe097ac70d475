"""Read an engine's server log and set what it printed beside what recon computes.

    from recon.logs import analyze
    report = analyze("server.log")                      # timeline, numbers, traps
    report = analyze("server.log", snapshot="pip:vllm==0.33.0",
                     config="config.json")              # + predicted vs observed
    print(render_markdown(report))

Investigators trust the engine's own numbers over their arithmetic (field
notes); this closes the loop: every number the engine printed, the trap it
hints at, and, given the release, whether recon's answer agrees.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ReconError
from .compare import LINKS, run_predictions, same
from .models import Comparison, ErrorReport, Event, LogReport, Observed, ServerLog, Trap
from .parse import parse_text, read_log
from .patterns import PATTERNS, match_line
from .quantities import QUANTITIES
from .report import render_console, render_markdown
from .setting import settings_from_log, with_logged_memory
from .traps import find_traps


def analyze(path: str | Path | None = None, *, text: str | None = None,
            snapshot: Any = None, config: str | Path | dict[str, Any] | None = None,
            flags: str | list[str] | None = None, options: dict[str, Any] | None = None,
            engine: str | None = None, memory_plan: bool | None = None) -> LogReport:
    """Parse a log, find traps, and (with ``snapshot``) compare with the recipes' answers.

    ``snapshot`` is a :class:`~recon.snapshots.model.Snapshot`, a snapshot name/path or
    any SOURCE (``pip:vllm==0.33.0``); with ``config`` or ``flags`` and no
    snapshot, the release the log names is fetched (``pip:vllm==<its version>``) and
    the report says so. Without ``flags`` the flags come from the log's own argument
    line; the GPU and the entry point come from the log where it tells them
    (:mod:`recon.logs.setting`), and ``options`` (``--set``) override both.
    ``memory_plan`` (vLLM): the memory section (weights, available KV memory and what
    follows) is predicted from the command line alone, not taken from the log. ``None`` (the
    default) plans where the release allows it and otherwise takes the log's available KV
    memory, saying why; ``False`` takes the log's; ``True`` plans or reports no prediction.
    ``report.memory_from`` says which it did.
    """
    if text is not None:
        log = parse_text(text, engine=engine)
    elif path is not None:
        log = read_log(path, engine=engine)
    else:
        raise ReconError("analyze() needs a log: a path or its text")
    find_traps(log)
    report = LogReport(log)
    if snapshot is None and (config is not None or flags is not None):
        snapshot = release_of(log)
        report.notes.append(f"release from the log: {snapshot} (line {log.observed['version'].line})"
                            if "version" in log.observed else f"release from the log: {snapshot}")
    if options and snapshot is None:
        raise ReconError("--set is a recipe option: it needs --snapshot or --config (the release "
                         "to predict with)")
    if snapshot is None:
        return report
    from ..recipes.base import options_read
    from ..snapshots.cache import ensure_snapshot
    from ..snapshots.model import Snapshot

    snap = snapshot if isinstance(snapshot, Snapshot) else ensure_snapshot(str(snapshot))
    report.snapshot = snap.name
    report.release = f"{snap.package} {snap.version or '?'}"
    fl = _flags_for(log, flags, report)
    report.flags = fl.values
    if log.engine and log.engine != snap.package:
        report.notes.append(f"the log is from {log.engine}, the snapshot holds {snap.package}")
    if log.version and snap.version and log.version.split("+")[0] != snap.version.split("+")[0]:
        report.notes.append(f"the log's engine is {log.engine} {log.version}, the snapshot is "
                            f"{snap.version}: predictions are for the snapshot's release")
    if config is None:
        report.notes.append("no --config: recipes that need the model's config.json say so")
    settings, unsettled = settings_from_log(log)
    report.notes += unsettled
    if options and "gpu" in options:
        gpu, said = with_logged_memory(options["gpu"], log)
        options = {**options, "gpu": gpu}
        report.notes += [said] if said else []
    # the plan is engine mode's: recipes sliced by recon (--set mode=slice) take the log's figure
    planned = memory_plan is not False and snap.package == "vllm" \
        and str((options or {}).get("mode", "engine")) != "slice"
    with options_read(options or {}, "the recipes this log ran"):
        _predict(report, snap, config=config, flags=fl, options=options, settings=settings,
                 planned=planned, fall_back=memory_plan is None)
    say_missing_once(report)
    return report


def _predict(report: LogReport, snap: Any, *, config: Any, flags: Any, options: Any,
             settings: Any, planned: bool, fall_back: bool) -> None:
    """The recipes' predictions, from the memory plan where ``planned``; a plan the release
    does not allow is said, and with ``fall_back`` the log's own figure is used instead."""
    flags.memory_planned = planned
    run_predictions(report, snap, config=config, flags=flags, options=options,
                    settings=settings, memory_plan=planned)
    unplanned = report.recipes.pop("memory plan", None) if planned else None
    if unplanned and fall_back:
        report.comparisons, report.inputs, report.checks, report.recipes = [], [], [], {}
        flags.memory_planned = False
        run_predictions(report, snap, config=config, flags=flags, options=options,
                        settings=settings, memory_plan=False)
    report.memory_from = None if snap.package != "vllm" else "log" if not planned or (
        unplanned and fall_back) else "plan"
    note = memory_note(planned, snap.package, unplanned)
    if note:
        report.notes.append(note)


def _flags_for(log: ServerLog, flags: str | list[str] | None, report: LogReport) -> Any:
    """The command line the recipes run with: ``--flags``, else the log's argument line (one
    recon cannot read is said as such, never taken as no flags), else the defaults."""
    from ..recipes import parse_flags

    if flags is not None:
        report.flags_from = "--flags"
        return parse_flags(flags)
    if "__raw__" in log.args:
        report.flags_from = (f"none: the log's argument line (line {log.args_line}) could not "
                             "be read")
        report.notes.append(f"the argument line (line {log.args_line}) is not a value recon can "
                            "read: recipes ran with the engine's defaults, so a mismatch may be "
                            "a flag recon did not see (give the command line with --flags)")
        return parse_flags(None)
    if log.args:
        from .argline import args_to_argv

        fl = parse_flags(args_to_argv(log.args, log.engine))
        fl.from_log = True
        report.flags_from = f"the log's argument line (line {log.args_line})"
        return fl
    report.flags_from = "none (no --flags and no argument line in the log)"
    report.notes.append("no argument line in the log and no --flags: recipes ran with the "
                        "engine's defaults")
    return parse_flags(None)


def memory_note(planned: bool, package: str, unplanned: str | None = None) -> str | None:
    """Which memory the predictions started from: the plan, or the engine's own figure."""
    if package != "vllm":
        return (f"memory: no memory plan for {package} yet; its free-memory figures are taken "
                "from the log")
    if planned and not unplanned:
        return ("memory: predicted from the command line alone (the memory plan: weights, "
                "activations, CUDA graphs, available KV memory), then compared with the log's")
    if unplanned:
        return (f"memory: no memory plan for this release ({unplanned}); the KV cache's "
                "available memory is the log's own figure")
    return ("memory: the KV cache's available memory is the log's own figure (--memory-from-log;"
            " the default predicts it from the command line)")


def say_missing_once(report: LogReport) -> None:
    """A package the recipes need and this Python lacks (torch) is one note with its install
    line; each recipe and each row it could not predict only points at that note."""
    from ..errors import require_package
    from ..recipes import get

    missing: dict[str, list[str]] = {}  # package -> recipes that need it
    for name in report.recipes:
        for package in _needs(get, name):
            try:
                require_package(package, "")
            except ReconError:
                missing.setdefault(package, []).append(name)
    for package, names in missing.items():
        try:
            require_package(package, f"recipe {names[0]}" if len(names) == 1 else
                            f"each of the recipes {', '.join(names)}")
        except ReconError as err:
            report.notes.append(str(err).strip())
        short = f"not run: needs {package} (see the note)"
        for name in names:
            report.recipes[name] = short
        for row in report.comparisons:
            if row.recipe in names and row.status == "no prediction":
                row.note = short


def _needs(get: Any, name: str) -> tuple[str, ...]:
    try:
        return tuple(get(name).needs)
    except ReconError:  # a recipe the log names that this recon lacks
        return ()


def release_of(log: ServerLog) -> str:
    """The PyPI release a log's engine version names (``pip:vllm==0.26.0``), for --config
    or --flags without --snapshot; a version PyPI cannot have is an error that says so."""
    if not log.engine or not log.version:
        raise ReconError("--config/--flags need a release to predict with, and this log prints "
                         "no engine version: pass --snapshot SOURCE (the image or wheel it ran)")
    version = log.version.split("+")[0]
    if "dev" in version or "+" in log.version:
        raise ReconError(f"the log's engine is a development build ({log.engine} {log.version}), "
                         "which PyPI does not have: pass --snapshot SOURCE (the image it ran)")
    return f"pip:{log.engine}=={version}"


__all__ = ["LINKS", "PATTERNS", "QUANTITIES", "Comparison", "ErrorReport", "Event", "LogReport",
           "Observed", "ServerLog", "Trap", "analyze", "find_traps", "match_line", "parse_text",
           "read_log", "release_of", "render_console", "render_markdown", "same"]
