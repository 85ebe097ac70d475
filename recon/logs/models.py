"""What reading a server log produces: events, observed quantities, errors, warnings.

Everything here is plain data with ``to_json`` so the CLI, a notebook and the
Markdown writer all read the same objects. Every observation keeps the line
number it came from: a person checks recon's reading against the log itself.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class LogLine:
    """One physical line with the engine's prefix taken apart."""

    no: int  # 1-based line number in the file
    text: str  # the message, prefix removed, colours stripped
    raw: str
    level: str | None = None  # INFO / WARNING / ERROR ...
    time: str | None = None  # as printed: "10-23 15:10:22" or "2025-10-16 09:06:22"
    process: str | None = None  # "Worker_TP0 pid=577", "EngineCore_DP0 pid=1", "TP3"
    source: str | None = None  # "interface.py:1109" (vLLM prints file:line)
    style: str | None = None  # which prefix matched: vllm, vllm-old, sglang, bare


@dataclass
class Event:
    """A line that matched a pattern of the table, with the values it carries."""

    line: int
    pattern: str  # id in recon.logs.patterns.PATTERNS
    engine: str
    values: dict[str, Any]
    text: str
    time: str | None = None
    process: str | None = None
    level: str | None = None
    repeats: int = 1  # identical events from other ranks folded into this one


@dataclass
class Observed:
    """One quantity the engine printed, as last printed, with every distinct value seen."""

    name: str
    value: Any
    line: int
    raw: str | None = None  # the number as printed (its precision sets the compare tolerance)
    label: str = ""
    unit: str = ""
    seen: list[dict[str, Any]] = field(default_factory=list)  # [{"value", "line", "process"}]

    @property
    def disagrees_across_lines(self) -> bool:
        return len({repr(s["value"]) for s in self.seen}) > 1


@dataclass
class ErrorReport:
    """An error the engine logged: its headline, the exception and the frames around it."""

    line: int
    headline: str  # the ERROR message, or the exception line when there is no message
    exception: str | None = None  # "torch.OutOfMemoryError: CUDA out of memory. ..."
    cause: str | None = None  # the first exception of a chained traceback, when different
    first_frame: str | None = None  # first 'File ..., line N, in f' of the traceback
    last_frame: str | None = None  # innermost frame: where it was raised
    process: str | None = None
    time: str | None = None
    count: int = 1  # same exception from other ranks/processes


@dataclass
class Trap:
    """A known trap recognised in the log (field notes): what, why, and the lines."""

    code: str
    level: str  # info / warn / error
    text: str
    lines: list[int] = field(default_factory=list)
    hint: str | None = None  # the recon command that answers it


@dataclass
class ServerLog:
    """A parsed server log: the timeline, the numbers, the errors, the traps."""

    path: str
    engine: str | None
    version: str | None
    lines: int
    events: list[Event] = field(default_factory=list)
    observed: dict[str, Observed] = field(default_factory=dict)
    args: dict[str, Any] = field(default_factory=dict)  # the argument line, as logged
    args_line: int | None = None
    resolved: dict[str, Any] = field(default_factory=dict)  # the resolved-config line
    resolved_line: int | None = None
    spec_windows: list[dict[str, Any]] = field(default_factory=list)
    errors: list[ErrorReport] = field(default_factory=list)
    traps: list[Trap] = field(default_factory=list)
    starts: int = 0  # engine start-ups seen in this file
    formats: list[str] = field(default_factory=list)  # pattern ids that matched at least once

    def value(self, name: str, default: Any = None) -> Any:
        obs = self.observed.get(name)
        return default if obs is None else obs.value

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["observed"] = {k: asdict(v) for k, v in self.observed.items()}
        return out


@dataclass
class Comparison:
    """Predicted vs observed for one quantity."""

    quantity: str
    label: str
    observed: Any
    observed_line: int | None
    predicted: Any = None
    recipe: str | None = None
    value_key: str | None = None  # which key of the recipe's values
    status: str = "no prediction"  # match / mismatch / no prediction / not observed
    note: str = ""


@dataclass
class LogReport:
    """A parsed log plus, when a snapshot was given, the comparison with recon's answers."""

    log: ServerLog
    snapshot: str | None = None
    release: str | None = None
    flags_from: str | None = None  # "--flags" / "the log's argument line (line N)"
    flags: dict[str, Any] = field(default_factory=dict)
    comparisons: list[Comparison] = field(default_factory=list)
    recipes: dict[str, str] = field(default_factory=dict)  # recipe -> ran / why not
    #: observed values handed to recipes as inputs: {recipe, option, quantity, value, line}
    inputs: list[dict[str, Any]] = field(default_factory=list)
    #: verdicts of check recipes on the configuration the log reveals: {recipe, level, text}
    checks: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: where the KV cache's available memory came from: "plan" (the command line alone),
    #: "log" (the engine's own line), None (no snapshot, or an engine without a plan)
    memory_from: str | None = None

    @property
    def mismatches(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.status == "mismatch"]

    @property
    def unpredicted(self) -> list[Comparison]:
        """Numbers the engine printed that a recipe covers, but recon gave no value for
        (the recipe failed, was not applicable, or lacked an input): not an agreement."""
        return [c for c in self.comparisons if c.status == "no prediction" and c.recipe]

    def to_json(self) -> dict[str, Any]:
        return {"log": self.log.to_json(), "snapshot": self.snapshot, "release": self.release,
                "flags_from": self.flags_from, "flags": self.flags,
                "comparisons": [asdict(c) for c in self.comparisons],
                "recipes": self.recipes, "inputs": self.inputs, "checks": self.checks,
                "notes": self.notes, "memory_from": self.memory_from,
                "mismatches": len(self.mismatches)}
