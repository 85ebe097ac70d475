"""``recon demo``: the README's main job, on built-in defaults.

Snapshots the latest vLLM and SGLang releases from PyPI (cached after the
first run), runs every recipe on the example configs shipped in ``recon/examples``
with the serve flags each recipe declares as typical, and writes one Markdown
report. Everything it prints comes from running the releases' own code.

Each case is a :class:`Section` that stands alone: a failure (a release that
cannot be snapshotted, a recipe that needs torch where there is none, an error
while the recipe ran) is one line in that section and in the summary, and the
next section runs. The report is rewritten (atomically) after every section, so
a demo that is killed keeps what finished; its summary table opens it.
"""

from __future__ import annotations

import datetime as _dt
import json
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..acquire.sources import SCHEMES
from ..acquire.writer import write_text
from ..errors import ReconError, require_package
from ..examples import path as example_path
from ..snapshots.cache import ensure_snapshot
from ..snapshots.model import MANIFEST, Snapshot
from . import RecipeResult, all_recipes, get, run_recipe

#: how long an answer or a failure line may be in the summary table
SENTENCE = 200


@dataclass
class Section:
    """One demo case: a recipe on one shipped example config with one serve command line."""

    recipe: str
    engine: str  #: the release it reads: ``vllm`` or ``sglang``
    config: str  #: the example config's file name ("" for none)
    flags: str
    options: dict[str, Any] = field(default_factory=dict)
    needs: tuple[str, ...] = ()
    release: str = ""  #: what it ran on (``vllm 0.33.0``), or the spec asked for
    result: RecipeResult | None = None
    failure: str | None = None  #: the one line a failure is
    seconds: float | None = None  #: None: not run (yet)
    #: what sets this case apart from the recipe's other cases on the same config ("" if none)
    case: str = ""

    @property
    def label(self) -> str:
        head = f"{self.recipe} · {self.config or 'no config'}"
        return f"{head} · {self.case}" if self.case else head

    @property
    def answer(self) -> str:
        """The answer in one sentence, or the failure line, or why there is neither."""
        if self.failure is not None:
            return f"failed: {self.failure}"
        if self.result is None:
            return "not run (the demo stopped before this section)"
        return one_sentence(self.result)

    def to_markdown(self) -> str:
        case = f" ({self.case})" if self.case else ""
        out = [f"## {self.recipe} — `{self.config or 'no config'}`{case}", "",
               f"Flags: `{self.flags or '(none)'}`", ""]
        if self.failure is not None:
            return "\n".join(out + [f"**Failed** after {self.seconds or 0:.1f} s: {self.failure}", ""])
        assert self.result is not None
        if self.result.summary or not self.result.applicable:  # its Markdown opens with the sentence
            out.append(f"Answered in {self.seconds or 0:.1f} s.")
        else:
            out.append(f"**Answer** ({self.seconds or 0:.1f} s): {self.answer}")
        return "\n".join(out + ["", self.result.to_markdown(), ""])

    def to_json(self) -> dict[str, Any]:
        return {"recipe": self.recipe, "config": self.config, "flags": self.flags,
                "release": self.release, "answer": self.answer, "failure": self.failure,
                "seconds": self.seconds, "result": self.result.to_json() if self.result else None}


def one_sentence(res: RecipeResult) -> str:
    """A recipe result's answer in one line: its first error or warning, else its first value."""
    if not res.applicable:
        return _clip(f"not applicable: {res.reason}")
    said = getattr(res, "answer", None)  # a recipe that states its answer in one sentence
    if isinstance(said, str) and said:
        return _clip(said)
    graver = [f for level in ("error", "warn") for f in res.findings if f.level == level]
    if graver:
        return _clip(graver[0].text)
    if res.values:
        key, value = next(iter(res.values.items()))
        return _clip(f"{key}: {value}")
    return _clip(res.findings[0].text) if res.findings else "answered (see the section)"


def _clip(text: str, width: int = SENTENCE) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _failure_line(err: Exception) -> str:
    """One line for a failed section; an error recon did not foresee keeps its type."""
    if isinstance(err, ReconError):
        return _clip(str(err))
    return (_clip(f"{type(err).__name__}: {err}", SENTENCE // 2) + " (not an error recon foresaw: "
            "`recon snapshot verify` shows a damaged snapshot; else please report it)")


def source_of(spec: str) -> str:
    """``--vllm``/``--sglang``: a pip spec, or any SOURCE (``docker:...``), or a snapshot folder."""
    scheme, sep, _ = spec.partition(":")
    if sep and scheme in SCHEMES:
        return spec
    if (Path(spec) / MANIFEST).is_file():
        return spec
    return f"pip:{spec}"


@dataclass
class Releases:
    """The release each engine's sections read, snapshotted when the first one needs it."""

    specs: dict[str, str]
    snapshots: dict[str, Snapshot] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)

    def get(self, engine: str) -> Snapshot:
        """The engine's snapshot; a release that could not be had fails every section of it."""
        if engine in self.failures:
            raise ReconError(self.failures[engine])
        if engine not in self.snapshots:
            try:
                self.snapshots[engine] = ensure_snapshot(source_of(self.specs[engine]))
            except Exception as err:
                self.failures[engine] = f"{engine} release {self.specs[engine]!r}: {_failure_line(err)}"
                raise ReconError(self.failures[engine]) from err
        return self.snapshots[engine]


@dataclass
class DemoReport:
    sections: list[Section]
    releases: Releases
    started: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc)
                         .isoformat(timespec="seconds"))

    @property
    def snapshots(self) -> dict[str, Snapshot]:
        return self.releases.snapshots

    @property
    def results(self) -> list[tuple[str, str, RecipeResult]]:
        """(config, flags, result) of every section that answered."""
        return [(s.config, s.flags, s.result) for s in self.sections if s.result is not None]

    @property
    def failed(self) -> list[Section]:
        return [s for s in self.sections if s.failure is not None]

    def tally(self) -> str:
        done = sum(s.seconds is not None for s in self.sections)
        out = f"{done - len(self.failed)} of {len(self.sections)} sections answered"
        out += f", {len(self.failed)} failed" if self.failed else ""
        left = len(self.sections) - done
        return out + (f", {left} not run yet" if left else "")

    def summary_rows(self) -> list[list[str]]:
        """One row per section: #, section, release, answer (or failure line), seconds."""
        return [[str(i), s.label, s.release, s.answer, "" if s.seconds is None else f"{s.seconds:.1f}"]
                for i, s in enumerate(self.sections, 1)]

    def to_markdown(self) -> str:
        out = ["# recon demo", "", "| # | section | release | answer | seconds |", "|---|---|---|---|---|"]
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in self.summary_rows()]
        out += ["", f"{self.tally()}. Started {self.started}. Releases:", ""]
        for engine, snap in self.snapshots.items():
            out.append(f"- {engine} {snap.version} (`{snap.manifest.source.get('ref')}`, "
                       f"{snap.manifest.source.get('digest', '')})")
        out += [f"- {engine}: {why}" for engine, why in self.releases.failures.items()]
        out.append("")
        out += [s.to_markdown() for s in self.sections if s.seconds is not None]
        return "\n".join(out)

    def to_json(self) -> dict[str, Any]:
        return {"snapshots": {k: v.name for k, v in self.snapshots.items()},
                "summary": self.tally(), "failed": len(self.failed),
                "results": [s.to_json() for s in self.sections]}


def plan_demo(only: list[str] | None = None) -> list[Section]:
    """The demo's sections, in catalog order (``only``: these recipes; an unknown name is an error)."""
    for name in only or []:
        get(name)  # one line with the close matches
    out = []
    for recipe in all_recipes():
        if only and recipe.name not in only:
            continue
        engine = recipe.engine if recipe.engine != "any" else "vllm"
        for cfg_name, flags in recipe.demos or [(None, recipe.example)]:
            out.append(Section(recipe.name, engine, cfg_name or "", flags, dict(recipe.demo_options),
                               tuple(recipe.needs)))
    _name_cases(out)
    return out


def _name_cases(sections: list[Section]) -> None:
    """Give sections of one recipe on one config a ``case``: the flags that differ between them."""
    groups: dict[tuple[str, str], list[Section]] = {}
    for s in sections:
        groups.setdefault((s.recipe, s.config), []).append(s)
    for group in (g for g in groups.values() if len(g) > 1):
        parsed = [_options(s.flags) for s in group]
        for n, (s, opts) in enumerate(zip(group, parsed, strict=True), 1):
            s.case = ", ".join(_differences(opts, [p for p in parsed if p is not opts])) or f"case {n}"


def _options(flags: str) -> dict[str, Any]:
    """``--name value`` pairs of a command line (JSON values decoded; a bare flag is True)."""
    try:
        words = shlex.split(flags)
    except ValueError:
        return {}
    out: dict[str, Any] = {}
    for i, word in enumerate(words):
        if not word.startswith("--"):
            continue
        name, eq, value = word.partition("=")
        if not eq:
            nxt = words[i + 1] if i + 1 < len(words) else "--"
            value = nxt if not nxt.startswith("--") else ""
        out[name] = _decoded(value) if value else True
    return out


def _decoded(value: str) -> Any:
    try:
        return json.loads(value) if value[:1] in "{[" else value
    except ValueError:
        return value


def _differences(opts: dict[str, Any], others: list[dict[str, Any]]) -> list[str]:
    """What in ``opts`` is not the same in every one of ``others``: ``key=value`` or ``--flag value``."""
    out = []
    for name in sorted(set(opts).union(*others)):
        mine = opts.get(name)
        if all(o.get(name) == mine for o in others):
            continue
        if mine is None:
            out.append(f"without {name}")
        elif isinstance(mine, dict):
            keys = [k for k in mine if any(not isinstance(o.get(name), dict) or o[name].get(k) != mine[k]
                                            for o in others)]
            out += [f"{k}={json.dumps(mine[k], separators=(',', ':'))}" for k in keys]
        else:
            out.append(name if mine is True else f"{name} {mine}")
    return out


def _missing(section: Section) -> str | None:
    """The install line for a package the section's recipe needs and this Python lacks."""
    for package in section.needs:
        try:
            require_package(package, f"recipe {section.recipe}")
        except ReconError as err:
            return str(err)
    return None


def check_runnable(sections: list[Section]) -> None:
    """Refuse, before any download, when no section can run here (each needs a missing package)."""
    missing = [why for s in sections if (why := _missing(s)) is not None]
    if sections and len(missing) == len(sections):
        raise ReconError(missing[0])


def run_section(section: Section, releases: Releases) -> None:
    """Run one section; raises what made it fail (a missing package: before any download)."""
    why = _missing(section)
    if why is not None:
        raise ReconError(why)
    snap = releases.get(section.engine)
    section.release = f"{snap.package} {snap.version or '?'}"
    cfg = example_path(section.config) if section.config else None
    section.result = run_recipe(section.recipe, snap, config=cfg, flags=section.flags,
                                options=dict(section.options))


def run_demo(*, vllm: str = "vllm", sglang: str = "sglang", only: list[str] | None = None,
             on_result: Any = None, report: Path | None = None,
             on_section: Callable[[Section, int, int], None] | None = None) -> DemoReport:
    """Snapshot the engines the sections need and run every recipe's demo cases, each on its own.

    ``report``: a Markdown file rewritten after every section. ``on_section(section, n, total)``
    is called when a section is done (answered or failed); ``on_result(config, flags, result)``
    for each answer. Only when no section can run here (all need a package this Python lacks)
    does it refuse, before any download.
    """
    sections = plan_demo(only)
    check_runnable(sections)
    specs = {"vllm": vllm, "sglang": sglang}
    rep = DemoReport(sections, Releases(specs))
    for s in sections:
        s.release = specs[s.engine]
    if report is not None:
        write_text(report, rep.to_markdown())
    for n, section in enumerate(sections, 1):
        _timed(section, rep, report)
        if on_section is not None:
            on_section(section, n, len(sections))
        if on_result is not None and section.result is not None:
            on_result(section.config or None, section.flags, section.result)
    return rep


def _timed(section: Section, rep: DemoReport, report: Path | None) -> None:
    """Run one section, then write the report: an interruption is recorded, then goes on up."""
    started = time.monotonic()
    try:
        run_section(section, rep.releases)
    except Exception as err:  # each section stands alone: its failure is its one line
        section.failure = _failure_line(err)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the report says where, then recon exits
        section.failure = "interrupted"
        raise
    finally:
        section.seconds = time.monotonic() - started
        if report is not None:
            write_text(report, rep.to_markdown())
