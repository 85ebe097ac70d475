"""What a run returns: the value, the mutated ``self``, stub use and provenance.

Plain dataclasses with ``to_json()``, the same object for the CLI (``--json``
prints it), notebooks and recipes.
"""

from __future__ import annotations

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

    kind: str  # exception | forbidden | config_key | stub_value | undefined | memory | sandbox | load
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
    #: how the child was confined: user ("nobody" or "caller"), timeout, memory_mb
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


class RunFailed(ReconError):
    """The run could not produce a trustworthy answer (timeout, forbidden stub, sandbox ...)."""

    exit_code = 4

    def __init__(self, message: str, *, results: list[RunResult] | None = None,
                 detail: str = "") -> None:
        super().__init__(message)
        self.results = results or []
        self.detail = detail
        #: what the slice's budget left out (set by run_calls once the slice is built)
        self.slice_cut: list[str] = list(self.results[0].slice_cut) if self.results else []
        self.slice_budget: int = self.results[0].slice_budget if self.results \
            else DEFAULT_BUDGET
