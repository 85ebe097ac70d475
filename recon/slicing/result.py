"""What a run returns: the value, the mutated ``self``, stub use and provenance.

Plain dataclasses with ``to_json()``, the same object for the CLI (``--json``
prints it), notebooks and recipes.

:func:`parse_report` is where the parent reads what the child wrote. The child
runs untrusted code in its own interpreter, so its report is untrusted data:
it is size-capped by the reader, then checked field by field against the
schema below (types, known kinds, one entry per requested call, in order,
string and list lengths); anything else fails the run with one line. What the
parent reports about the *sandbox* (OS sandbox in force, user, limits, exit
status, timeout) comes from the parent, never from the report.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import ReconError
from .closure import DEFAULT_BUDGET, cut_hint

#: exception types a slice cut at its budget typically produces (a global the
#: slice lacks, an import of a dropped name, a member of a shell left out)
CUT_SYMPTOMS = frozenset({"NameError", "ImportError", "ModuleNotFoundError", "AttributeError"})


@dataclass
class RunError:
    """An exception raised by the engine code (or by a stub) during the call."""

    kind: str  # exception | forbidden | config_key | stub_value | undefined | memory | sandbox | load | arguments
    type: str
    message: str
    site: str  # innermost file:line of the slice on the traceback ("" when none)
    traceback: str = field(repr=False, default="")

    def line(self) -> str:
        at = f" at {self.site}" if self.site else ""
        return f"{self.type}{at}: {self.message}"


@dataclass
class Mutation:
    """How one attribute of ``self`` changed during the call."""

    attr: str
    change: str  # changed | added | deleted
    before: Any
    after: Any


@dataclass
class StubTouch:
    """A stub the run used: how often, how, and the first slice line that did."""

    name: str
    kind: str  # outside | package (in-package name not in the slice) | forbidden | broken
    count: int
    ops: dict[str, int]
    first: str


@dataclass
class PieceRun:
    """A piece of the slice whose code ran during the call (provenance)."""

    module: str
    file: str
    start: int
    end: int
    sha256: str
    what: str

    @property
    def where(self) -> str:
        return f"{self.file}:{self.start}"


@dataclass
class RunResult:
    """The outcome of calling one target in a child process."""

    target: str
    ok: bool
    value: Any = None
    value_type: str = ""
    value_repr: str = ""
    error: RunError | None = None
    mutations: list[Mutation] = field(default_factory=list)
    self_before: dict[str, Any] = field(default_factory=dict)
    self_after: dict[str, Any] = field(default_factory=dict)
    stub_touches: list[StubTouch] = field(default_factory=list)
    assumptions: list[dict[str, Any]] = field(default_factory=list)
    provenance: list[PieceRun] = field(default_factory=list)
    definition_failures: list[dict[str, Any]] = field(default_factory=list)
    snapshot: dict[str, Any] = field(default_factory=dict)
    slice_sha256: str = ""
    #: pieces the slice's budget left out (empty: the closure is complete); see Slice.cut
    slice_cut: list[str] = field(default_factory=list)
    slice_budget: int = DEFAULT_BUDGET
    #: how the child was confined (set by the parent, never by the child): os_sandbox
    #: ("bwrap" or "none"), user inside ("nobody"/"caller"), host_user (who bwrap ran as),
    #: network (False in the sandbox), process_cap, timeout, memory_mb
    sandbox: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    wall_seconds: float = 0.0
    stdout: str = field(default="", repr=False)
    stderr: str = field(default="", repr=False)

    @property
    def mutated(self) -> dict[str, Any]:
        """attr -> value after the call, for every attribute the call changed or added."""
        return {m.attr: m.after for m in self.mutations if m.change != "deleted"}

    def touched(self, name: str) -> int:
        """How many times the stub ``name`` was used (0 when never)."""
        return sum(t.count for t in self.stub_touches if t.name == name)

    def cut_hint(self) -> str:
        """``the slice was cut at the budget ...; try --budget M`` ("" when nothing was cut)."""
        return cut_hint(len(self.slice_cut), self.slice_budget) if self.slice_cut else ""

    def error_from_cut(self) -> bool:
        """Whether the error may well come from the budget cut rather than the engine.

        True when the slice was cut and the call failed the way missing code
        fails: NameError/ImportError/AttributeError, a piece that could not be
        defined or loaded, or a stub standing for an in-package name asked for a value.
        """
        err = self.error
        if err is None or not self.slice_cut:
            return False
        if err.kind in ("undefined", "load"):
            return True
        if err.kind == "stub_value":
            return any(t.kind == "package" for t in self.stub_touches)
        return err.kind == "exception" and err.type in CUT_SYMPTOMS

    def raise_for_error(self) -> RunResult:
        """Raise :class:`RunFailed` when the engine code raised; return self otherwise."""
        if self.error is not None:
            hint = f"; {self.cut_hint()}" if self.error_from_cut() else ""
            raise RunFailed(f"{self.target} raised {self.error.line()}{hint}", results=[self])
        return self

    def to_json(self) -> dict[str, Any]:
        """Plain JSON-able data (the ``--json`` output)."""
        return asdict(self)


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str, cap: int = 2000) -> str:
    """``text`` with control characters shown as escapes, capped: one safe terminal line.

    Strings that come from the child (sites, messages, names) could carry
    terminal escape sequences that rewrite or hide what the user reads.
    """
    text = text if len(text) <= cap else text[: cap - 3] + "..."
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


class RunFailed(ReconError):
    """The run could not produce a trustworthy answer (timeout, forbidden stub, sandbox ...)."""

    exit_code = 4

    def __init__(self, message: str, *, results: list[RunResult] | None = None,
                 detail: str = "") -> None:
        super().__init__(printable(message))
        self.results = results or []
        self.detail = detail
        #: what the slice's budget left out (set by run_calls once the slice is built)
        self.slice_cut: list[str] = list(self.results[0].slice_cut) if self.results else []
        self.slice_budget: int = self.results[0].slice_budget if self.results \
            else DEFAULT_BUDGET


#: what a child's report may contain (anything else is a malformed report)
ERROR_KINDS = frozenset({"exception", "forbidden", "config_key", "stub_value", "undefined",
                         "memory", "recursion", "sandbox", "file_size", "load", "exit",
                         "internal", "arguments"})
_STR_CAP = 1 << 20
_LIST_CAP = 100_000
_REFUSAL = {"event": str, "what": str, "detail": str, "site": str}
_ERROR = {"kind": str, "type": str, "message": str, "site": str, "traceback": str}
_TOUCH = {"name": str, "kind": str, "count": int, "ops": dict, "first": str}
_FAILURE = {"module": str, "where": str, "names": list, "error": str}
_MUTATION = {"attr": str, "change": str}


class MalformedReport(RunFailed):
    """The child's report does not follow the schema: it was tampered with or truncated."""


def _bad(path: str, why: str) -> MalformedReport:
    return MalformedReport(f"the run's report is malformed at {path}: {why} (the code under "
                           "test may have written it; nothing of it is used)")


def _check(value: Any, kind: type, path: str) -> Any:
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok:
        raise _bad(path, f"expected {kind.__name__}, got {type(value).__name__}")
    if isinstance(value, str) and len(value) > _STR_CAP:
        raise _bad(path, "string too long")
    if isinstance(value, (list, dict)) and len(value) > _LIST_CAP:
        raise _bad(path, "too many items")
    return value


def _record(value: Any, fields: Mapping[str, type], path: str, *, required: bool = True) -> dict:
    _check(value, dict, path)
    for key, kind in fields.items():
        if key in value:
            _check(value[key], kind, f"{path}.{key}")
        elif required:
            raise _bad(path, f"missing {key}")
    return value


def _records(value: Any, fields: Mapping[str, type], path: str, **kw: bool) -> list:
    for i, item in enumerate(_check(value, list, path)):
        _record(item, fields, f"{path}[{i}]", **kw)
    return value


def _error_record(value: Any, path: str) -> None:
    if value is None:
        return
    _record(value, _ERROR, path, required=False)
    if value.get("kind", "exception") not in ERROR_KINDS:
        raise _bad(f"{path}.kind", f"unknown kind {str(value.get('kind'))[:40]!r}")


def _call_record(call: Any, target: str, path: str) -> None:
    _record(call, {"target": str, "ok": bool}, path)
    if call["target"] != target:
        raise _bad(f"{path}.target", f"expected {target}")
    _record(call, {"value_type": str, "value_repr": str, "seconds": float,
                   "self_before": dict, "self_after": dict}, path, required=False)
    _error_record(call.get("error"), f"{path}.error")
    for i, mut in enumerate(_records(call.get("mutations", []), _MUTATION, f"{path}.mutations")):
        if mut["change"] not in ("changed", "added", "deleted"):
            raise _bad(f"{path}.mutations[{i}].change", "unknown change")
    for i, ran in enumerate(_check(call.get("ran", []), list, f"{path}.ran")):
        where = f"{path}.ran[{i}]"
        if not (isinstance(ran, list) and len(ran) == 3):
            raise _bad(where, "expected [file, line, name]")
        _check(ran[0], str, where)
        _check(ran[1], int, where)
        _check(ran[2], str, where)


def _events(events: bytes) -> list[dict[str, str]]:
    """The guard's refusals as they were written, one JSON line each (bad lines kept as such)."""
    out = []
    for line in events.decode("utf-8", "replace").splitlines():
        try:
            rec = json.loads(line)
            _record(rec, _REFUSAL, "event")
        except (ValueError, RunFailed):
            rec = {"event": "?", "what": "an action (unreadable refusal record)",
                   "detail": line[:200], "site": "?"}
        out.append({k: rec[k] for k in _REFUSAL})
    return out


def parse_report(data: bytes, events: bytes, targets: list[str]) -> dict[str, Any] | None:
    """The child's report, validated; None when it wrote none (it died first).

    ``targets``: the canonical qualname of each requested call, in order. The
    refusals are the union of the guard's event pipe (written as they happened,
    so a later forged report cannot hide them) and the report's own list.
    """
    if not data:
        report: dict[str, Any] | None = None
    else:
        try:
            report = json.loads(data.decode("utf-8"))
        except (ValueError, RecursionError) as err:
            raise _bad("the top", f"not JSON ({type(err).__name__})") from None
        _record(report, {"calls": list, "sandbox": list, "definition_failures": list,
                         "stubs": dict}, "report", required=False)
        calls = report.get("calls", [])
        if len(calls) > len(targets) or (calls and len(calls) != len(targets)):
            raise _bad("report.calls", f"{len(calls)} results for {len(targets)} calls")
        for i, (call, target) in enumerate(zip(calls, targets, strict=False)):
            _call_record(call, target, f"report.calls[{i}]")
        _error_record(report.get("setup_error"), "report.setup_error")
        _records(report.get("sandbox", []), _REFUSAL, "report.sandbox")
        _records(report.get("definition_failures", []), _FAILURE, "report.definition_failures")
        stubs = report.get("stubs") or {}
        _records(stubs.get("touches", []), _TOUCH, "report.stubs.touches")
        _records(stubs.get("assumptions", []), {"what": str, "site": str, "count": int},
                 "report.stubs.assumptions")
        _records(stubs.get("forbidden", []), {"name": str, "site": str}, "report.stubs.forbidden")
    seen = _events(events)
    if report is None:
        return {"calls": [], "sandbox": seen, "died": True} if seen else None
    merged = seen + [r for r in report.get("sandbox", []) if r not in seen]
    report["sandbox"] = merged
    return report
