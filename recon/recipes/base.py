"""What a recipe is, what it is given, and what it returns.

A recipe is a named, tested investigation: it turns a model ``config.json``
plus the user's serve flags into the inputs of **the release's own
functions**, runs them from the snapshot (``recon.slicing``), checks
invariants, and presents the answer. recon never re-implements engine logic:
the numbers come from running the snapshot's code.

Recipes find their targets by what the code does (a log message it emits, a
structural pattern), not by one hard-coded qualname, and report "not
applicable to <release>: <what changed>" instead of crashing when a release
lacks the logic.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from ..errors import ReconError
from ..snapshots.model import Snapshot
from .flags import ServeFlags


class NotApplicable(ReconError):
    """The release lacks the logic a recipe needs (raised inside ``Recipe.run``)."""


#: The ``--set`` keys some recipe looked at, while :func:`options_read` is open.
_READ: contextvars.ContextVar[set[str] | None] = contextvars.ContextVar("recon_options_read",
                                                                        default=None)


class Options(dict[str, Any]):
    """``--set`` options that remember which keys a recipe looked up.

    A key nobody looked up was a typo or an option of another recipe: the caller says so
    instead of answering as if it had been used. Looking a key up (``get``, ``[]``, ``in``)
    counts; copying the whole mapping does not.
    """

    def __getitem__(self, key: str) -> Any:
        _note(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        _note(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        _note(key)
        return super().__contains__(key)


#: the keys looked up inside each open :func:`looked_up` block
_INNER: contextvars.ContextVar[tuple[set[str], ...]] = contextvars.ContextVar(
    "recon_options_inner", default=())


def _note(key: object) -> None:
    if not isinstance(key, str):
        return
    seen = _READ.get()
    if seen is not None:
        seen.add(key)
    for inner in _INNER.get():
        inner.add(key)


@contextlib.contextmanager
def looked_up() -> Iterator[set[str]]:
    """The ``--set`` keys recipes look up inside the block (e.g. which inputs one recipe used)."""
    mine: set[str] = set()
    token = _INNER.set((*_INNER.get(), mine))
    try:
        yield mine
    finally:
        _INNER.reset(token)


@contextlib.contextmanager
def options_read(given: Iterable[str], where: str) -> Iterator[None]:
    """Run recipes inside the block; after it, :func:`unused_options` on what they looked up.

    Only the outermost block checks: a recipe that runs another one with part of its
    options (the inner one never sees the outer one's keys) is checked as a whole.
    """
    if _READ.get() is not None:
        yield
        return
    seen: set[str] = set()
    token = _READ.set(seen)
    try:
        yield
    finally:
        _READ.reset(token)
    unused_options(given, seen, where)


def unused_options(given: Iterable[str], seen: set[str], where: str) -> None:
    """One error line for ``--set`` keys that no recipe of ``where`` looked up."""
    unused = sorted(set(given) - seen)
    if unused:
        known = ", ".join(sorted(seen)) or "none"
        raise ReconError(f"--set {', '.join(unused)}: not an option of {where} (options it "
                         f"looked up: {known}); see `recon recipe show NAME`")


@dataclass
class Finding:
    """One verdict line: ``ok``, ``info``, ``warn`` or ``error``."""

    level: str
    text: str


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[Any]]


@dataclass
class Provenance:
    """Which function of which file ran (cite it in a write-up)."""

    qualname: str
    file: str
    line: int
    sha256: str


@dataclass
class RecipeResult:
    recipe: str
    snapshot: str
    release: str
    #: the answer in one sentence, in the user's terms, shown before everything else: set by
    #: :func:`recon.recipes.run_recipe` from the recipe's :attr:`Recipe.summarize`
    summary: str = ""
    applicable: bool = True
    reason: str | None = None
    inputs: dict[str, Any] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)
    tables: list[Table] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    provenance: list[Provenance] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: every function of the snapshot that ran (engine mode), with file, lines and sha256
    ran: list[dict[str, Any]] = field(default_factory=list)
    #: why part of the answer is not what the engine would print (shown, then exit 7), or None
    undecided: str | None = None

    @property
    def answer(self) -> str:
        """The one-sentence answer (:attr:`summary`), for callers that ask for it by that name."""
        return self.summary

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def to_markdown(self) -> str:
        """A section a person can paste into an incident write-up: the answer's sentence first."""
        out = [f"### {self.recipe} — {self.release}", ""]
        if not self.applicable:
            out += [self.summary or f"Not applicable to {self.release}: {self.reason}", ""]
            return "\n".join(out)
        if self.summary:
            out += [self.summary, ""]
        if self.inputs:
            out += ["Inputs: " + ", ".join(f"`{k}={_short(v)}`" for k, v in self.inputs.items()), ""]
        if self.values:
            out += ["| quantity | value |", "|---|---|"]
            out += [f"| {k} | {_short(v, 200)} |" for k, v in self.values.items()]
            out.append("")
        for t in self.tables:
            out += [f"**{t.title}**", "", "| " + " | ".join(t.columns) + " |",
                    "|" + "---|" * len(t.columns)]
            out += ["| " + " | ".join(_short(c, 80) for c in row) + " |" for row in t.rows]
            out.append("")
        for f in self.findings:
            out.append(f"- **{f.level}**: {f.text}")
        if self.findings:
            out.append("")
        if self.provenance:
            out.append("Code run (from the snapshot):")
            out += [f"- `{p.qualname}` at `{p.file}:{p.line}` sha256 `{p.sha256[:16]}`"
                    for p in self.provenance]
            out.append("")
        if self.notes:
            out += [f"_Note: {n}_" for n in self.notes]
            out.append("")
        return "\n".join(out)

    def render(self, console: Any) -> None:
        """Rich tables on a terminal."""
        from rich.markup import escape
        from rich.panel import Panel
        from rich.table import Table as RTable
        from rich.text import Text

        head = f"[bold]{escape(self.recipe)}[/] on {escape(self.release)}"
        if not self.applicable:
            console.print(Panel(Text(self.summary or f"not applicable: {self.reason}"), title=head,
                                border_style="yellow", expand=False))
            return
        if self.summary:
            console.print(Text(self.summary, style="bold"))
        if self.values:
            vt = RTable(title=head, show_header=False)
            vt.add_column("quantity", style="cyan")
            vt.add_column("value")
            for k, v in self.values.items():
                vt.add_row(Text(k), Text(_short(v, 300)))
            console.print(vt)
        for t in self.tables:
            rt = RTable(title=Text(t.title))
            for c in t.columns:
                rt.add_column(Text(c))
            for row in t.rows:
                rt.add_row(*[Text(_short(c, 80)) for c in row])
            console.print(rt)
        colours = {"ok": "green", "info": "blue", "warn": "yellow", "error": "red"}
        for f in self.findings:
            console.print(f"[{colours.get(f.level, 'white')}]{escape(f'{f.level:>5}')}[/] {escape(f.text)}")
        for p in self.provenance:
            console.print(Text(f"ran {p.qualname} ({p.file}:{p.line}, sha256 {p.sha256[:12]})", style="dim"))
        for n in self.notes:
            console.print(Text(f"note: {n}", style="dim"))


def _short(v: Any, width: int = 120) -> str:
    text = v if isinstance(v, str) else json.dumps(v, default=str)
    return text if len(text) <= width else text[: width - 3] + "..."


@dataclass
class RecipeContext:
    """Everything a recipe run gets: the snapshot, the model config, the command line.

    ``given`` is the command line as the user typed it (a string or argv) or
    already-parsed flags. Engine-backed recipes hand it to the release's own
    parser untouched (:attr:`command`); slicing recipes read recon's reading of
    it (:attr:`flags`), parsed only when they ask.
    """

    snapshot: Snapshot
    config: dict[str, Any] | None
    given: str | list[str] | ServeFlags | None
    config_path: str | None = None
    options: dict[str, Any] = field(default_factory=dict)  # recipe-specific extras (--set k=v)

    @cached_property
    def flags(self) -> ServeFlags:
        """recon's own reading of the command line (slicing recipes only)."""
        from .flags import parse_flags

        return self.given if isinstance(self.given, ServeFlags) else parse_flags(self.given)

    @property
    def command(self) -> str | list[str] | None:
        """The command line as typed, for the release's own parser."""
        if isinstance(self.given, ServeFlags):
            return list(self.given.raw) or None
        return self.given

    @cached_property
    def index(self) -> Any:
        from ..index import load_index

        return load_index(self.snapshot)

    @property
    def release(self) -> str:
        return f"{self.snapshot.package} {self.snapshot.version or '?'}"

    def require_config(self) -> dict[str, Any]:
        if self.config is None:
            raise ReconError("this recipe needs a model config: pass --config config.json")
        return self.config

    def functions_with_text(self, pattern: str, *, within: str | None = None) -> list[str]:
        """Qualnames of functions whose source matches ``pattern`` (a regex), e.g. a log message."""
        from ..index.find import find_regex

        hits = find_regex(self.index, pattern, within=within)
        names: list[str] = []
        for h in hits:
            q = getattr(h, "qualname", None) or (h.get("qualname") if isinstance(h, dict) else None)
            if q and q not in names:
                names.append(q)
        return names

    def first_existing(self, candidates: Iterable[str]) -> str | None:
        """The first qualname of ``candidates`` that this release defines."""
        funcs = self.index.functions
        for q in candidates:
            if q in funcs:
                return q
        return None

    def provenance(self, qualname: str) -> Provenance:
        fn = self.index.functions[qualname]
        text = self.snapshot.read_text(fn.path).splitlines(keepends=True)
        seg = "".join(text[fn.lineno - 1: fn.end_lineno])
        import hashlib

        return Provenance(qualname, fn.path, fn.lineno, hashlib.sha256(seg.encode()).hexdigest())


@dataclass
class Recipe:
    """A named investigation. ``run`` does the work; the rest is for ``list``/``show``."""

    name: str
    engine: str  # "vllm" | "sglang" | "any"
    title: str
    why: str  # the field story behind it, one or two sentences
    reads_flags: list[str]
    reads_config: list[str]
    run: Callable[[RecipeContext], RecipeResult]
    example: str = ""  # a typical --flags line for the docs
    #: (a shipped example config's file name (recon/examples) or None, --flags line) pairs for ``recon demo``
    demos: list[tuple[str | None, str]] = field(default_factory=list)
    #: ``--set`` options every demo case of this recipe runs with (a KV memory, say)
    demo_options: dict[str, Any] = field(default_factory=dict)
    #: optional packages the recipe imports for real (``torch``): checked before it runs, so a
    #: missing one is an install line, and shown by ``recipe list``
    needs: tuple[str, ...] = ()
    #: answered in engine mode: the release's own parser reads the whole command line, and
    #: ``reads_flags``/``reads_config`` are what ``--set mode=slice`` (recon's reading) reads
    engine_mode: bool = False
    #: the answer's one sentence, built from the result's own fields (values, inputs, tables,
    #: verdicts), or None where they do not hold it: then :func:`summarize` says the gravest verdict
    summarize: Callable[[RecipeResult], str | None] | None = None

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "engine": self.engine, "title": self.title, "why": self.why,
                "reads_flags": self.reads_flags, "reads_config": self.reads_config,
                "example": self.example, "needs": list(self.needs),
                "engine_mode": self.engine_mode}


def load_model_config(path: str | Path | None) -> dict[str, Any] | None:
    """A model ``config.json`` as a dict: the same loader (and errors) as ``recon run --config``."""
    from ..slicing.runner import load_config

    return load_config(path)


def config_key(cfg: dict[str, Any], *keys: str, default: Any = ..., nested: str = "text_config") -> Any:
    """The first of ``keys`` in the config (or its ``text_config``); clear error if none."""
    for scope in (cfg, cfg.get(nested) or {}):
        for k in keys:
            if k in scope and scope[k] is not None:
                return scope[k]
    if default is not ...:
        return default
    raise ReconError(f"the model config has none of {', '.join(keys)}")


_SAFE = re.compile(r"^[A-Za-z0-9_.-]+$")


#: findings that state what recon assumed or quoted, not a verdict (never an answer's sentence)
_NOT_VERDICTS = ("assumed ", "the release logged: ", "the release logs: ")


def summarize(recipe: Recipe | None, res: RecipeResult) -> str:
    """The one sentence that opens ``res``: the recipe's own, else its gravest verdict, else its
    first value; for a release without the logic, why not."""
    if not res.applicable:
        return f"{res.recipe} does not apply to {res.release}: {res.reason}"
    said = recipe.summarize(res) if recipe is not None and recipe.summarize is not None else None
    if said:
        return said
    for level in ("error", "warn", "ok"):
        for f in res.findings:
            if f.level == level and not f.text.startswith(_NOT_VERDICTS):
                return f.text
    if res.values:
        key, value = next(iter(res.values.items()))
        return f"{key}: {_short(value, 200)}"
    return f"{res.recipe} ran on {res.release} (see the tables)"


def value_of(res: RecipeResult, *keys: str) -> Any:
    """The first of ``keys`` that ``res.values`` holds (not None): engine mode and
    ``--set mode=slice`` name the same quantity differently."""
    for key in keys:
        if res.values.get(key) is not None:
            return res.values[key]
    return None


def count(n: int, what: str) -> str:
    """``1 request``, ``3 requests``."""
    return f"{n:,} {what}" if n == 1 else f"{n:,} {what}s"
