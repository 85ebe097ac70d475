"""``SnapshotIndex``: every module, class and function of one snapshot, by name.

Built by :func:`recon.index.load_index` from per-file records; this module
only assembles records into the public model and answers lookups. Source
segments are cut from lines split once per file (``ast.get_source_segment``
re-splits the whole file on every call, about 18x slower over a few thousand
definitions) and include decorators.
"""

from __future__ import annotations

import ast
import bisect
import difflib
import json
from dataclasses import dataclass, field
from typing import Any

from ..errors import ReconError
from ..snapshots.model import Snapshot, module_name
from .models import (
    ClassField,
    ClassInfo,
    FunctionInfo,
    IndexStats,
    ModuleInfo,
    Param,
    split_dotted,
    split_qualname,
)
from .visitor import split_lines


@dataclass
class SnapshotIndex:
    """The index of one snapshot (see :mod:`recon.index.models` for the records).

    ``functions`` and ``classes`` are keyed by qualname (``pkg.mod:Local``),
    ``modules`` by dotted module name, ``errors`` by file path (the files
    that failed to parse, with the parser's message: listed, never fatal).
    """

    snapshot: Snapshot = field(repr=False)
    modules: dict[str, ModuleInfo]
    functions: dict[str, FunctionInfo] = field(repr=False)
    classes: dict[str, ClassInfo] = field(repr=False)
    errors: dict[str, str]
    warnings: dict[str, list[str]] = field(repr=False)
    stats: IndexStats
    by_path: dict[str, str] = field(repr=False)  # file path -> module name
    #: files whose bytes on disk differ from the manifest's sha256 (edited since the snapshot was
    #: taken): indexed as they are now, listed so that a reader knows the snapshot is not pristine
    edited: list[str] = field(default_factory=list)
    _lines: dict[str, list[str]] = field(default_factory=dict, repr=False, compare=False)
    _spans: dict[str, tuple[list[int], list[tuple[int, int, str]]]] = field(
        default_factory=dict, repr=False, compare=False)
    _by_short: dict[str, list[str]] | None = field(default=None, repr=False, compare=False)

    # -- identity ------------------------------------------------------------------
    @property
    def package(self) -> str:
        return self.snapshot.package

    @property
    def label(self) -> str:
        return self.snapshot.label

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_lines"], state["_spans"], state["_by_short"] = {}, {}, None
        return state

    # -- source --------------------------------------------------------------------
    def lines(self, path: str) -> list[str]:
        """The file's lines (no line ends), split once and kept: ``lines[n - 1]`` is line n."""
        got = self._lines.get(path)
        if got is None:
            text = self.snapshot.read_text(path)
            if text.startswith("\ufeff"):
                text = text[1:]
            got = self._lines[path] = split_lines(text)
        return got

    def source(self, qualname: str) -> str:
        """The definition's source text, decorators included, as in the file (``\\n`` line ends)."""
        info = self.lookup_any(qualname)
        return "\n".join(self.lines(info.path)[info.lineno - 1: info.end_lineno]) + "\n"

    def function_ast(self, qualname: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """Parse just this function's source segment; line and column numbers match the file.

        An indented segment (a method) is parsed under an ``if 1:`` line, so
        any nesting level parses without re-indenting (which would break
        multi-line strings). None if the segment does not parse.
        """
        fn = self.lookup(qualname) if qualname not in self.functions else self.functions[qualname]
        lines = self.lines(fn.path)[fn.lineno - 1: fn.end_lineno]
        indented = fn.col > 0
        text = ("if 1:\n" if indented else "") + "\n".join(lines) + "\n"
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
        body = tree.body[0].body if indented and tree.body else tree.body  # type: ignore[attr-defined]
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                ast.increment_lineno(stmt, fn.lineno - 1 - (1 if indented else 0))
                return stmt
        return None

    # -- lookups ---------------------------------------------------------------------
    def lookup(self, qualname: str) -> FunctionInfo:
        """The function named ``qualname``; ReconError with close matches otherwise.

        Accepts ``pkg.mod:Cls.meth``, the dotted ``pkg.mod.Cls.meth``, or a
        unique suffix such as ``Platform._align_hybrid_block_size``.
        """
        got = self._find(qualname, self.functions)
        if isinstance(got, FunctionInfo):
            return got
        raise self._not_found(qualname, "function", self.functions, got)

    def lookup_class(self, qualname: str) -> ClassInfo:
        """The class named ``qualname`` (same forms as :meth:`lookup`)."""
        got = self._find(qualname, self.classes)
        if isinstance(got, ClassInfo):
            return got
        raise self._not_found(qualname, "class", self.classes, got)

    def lookup_any(self, qualname: str) -> FunctionInfo | ClassInfo:
        """A function, else a class, by qualname (exact or any accepted form)."""
        if qualname in self.functions:
            return self.functions[qualname]
        if qualname in self.classes:
            return self.classes[qualname]
        got = self._find(qualname, self.functions)
        if isinstance(got, FunctionInfo):
            return got
        got2 = self._find(qualname, self.classes)
        if isinstance(got2, ClassInfo):
            return got2
        raise self._not_found(qualname, "function or class", {**self.classes, **self.functions},
                              [*(got or []), *(got2 or [])])

    def _find(self, name: str, table: dict[str, Any]) -> Any:
        """Exact hit -> the record; otherwise the list of ambiguous candidates (maybe empty)."""
        if name in table:
            return table[name]
        if ":" not in name:
            dotted = split_dotted(name, self.modules.__contains__)
            if dotted is not None and ":".join(dotted) in table:
                return table[":".join(dotted)]
            # a suffix of the local name
            short = name.rsplit(".", 1)[-1]
            tail = "." + name
            hits = [q for q in self._short_index().get(short, ())
                    if q in table and (split_qualname(q)[1] == name or q.endswith(tail))]
            if len(hits) == 1:
                return table[hits[0]]
            return hits
        return []

    def _short_index(self) -> dict[str, list[str]]:
        if self._by_short is None:
            idx: dict[str, list[str]] = {}
            for table in (self.functions, self.classes):
                for q in table:
                    idx.setdefault(q.rsplit(".", 1)[-1].rsplit(":", 1)[-1], []).append(q)
            self._by_short = idx
        return self._by_short

    def _not_found(self, name: str, what: str, table: dict[str, Any], ambiguous: list[str]) -> ReconError:
        if ambiguous:
            shown = ", ".join(sorted(ambiguous)[:8]) + (" ..." if len(ambiguous) > 8 else "")
            return ReconError(f"{name!r} matches {len(ambiguous)} {what}s in {self.label}: {shown}; "
                              "give the full qualname (module:Local)")
        return ReconError(f"no {what} {name!r} in {self.label}" + self._suggest(name, table))

    def _suggest(self, name: str, table: dict[str, Any]) -> str:
        module, local = split_qualname(name) if ":" in name else ("", name)
        short = local.rsplit(".", 1)[-1]
        shorts = self._short_index()
        close = difflib.get_close_matches(short, list(shorts), n=6, cutoff=0.75)
        cands = [q for s in close for q in shorts[s] if q in table]
        if module:
            # a right name in the wrong module, or a close module name
            cands.sort(key=lambda q: (split_qualname(q)[1] != local,
                                      -difflib.SequenceMatcher(None, q, name).ratio()))
        else:
            cands.sort(key=lambda q: -difflib.SequenceMatcher(None, q.split(":")[-1], local).ratio())
        if module and module not in self.modules:
            mods = difflib.get_close_matches(module, list(self.modules), n=2, cutoff=0.8)
            if mods and not cands:
                return f" (no module {module!r}; did you mean {' or '.join(mods)}?)"
        if not cands:
            return ""
        return "; did you mean: " + ", ".join(cands[:5]) + "?"

    def module_for_path(self, path: str) -> ModuleInfo | None:
        name = self.by_path.get(path)
        return self.modules.get(name) if name else None

    def function_at(self, path: str, lineno: int) -> FunctionInfo | None:
        """The innermost function whose lines (decorators included) contain ``lineno``."""
        spans = self._spans.get(path)
        if spans is None:
            mod = self.module_for_path(path)
            items = sorted(((f.lineno, f.end_lineno, f.qualname)
                            for f in (self.functions[q] for q in (mod.functions if mod else ()))),
                           key=lambda t: (t[0], -t[1]))
            spans = self._spans[path] = ([s for s, _, _ in items], items)
        starts, items = spans
        # Spans nest, so scanning leftwards from the last start <= lineno, the first span
        # that still contains the line is the innermost one.
        for i in range(bisect.bisect_right(starts, lineno) - 1, -1, -1):
            _, end, qualname = items[i]
            if end >= lineno:
                return self.functions[qualname]
        return None

    def methods_of(self, class_qualname: str) -> dict[str, FunctionInfo]:
        """Functions defined directly in the class body, by short name (first definition wins)."""
        cls = self.classes[class_qualname]
        module, local = split_qualname(class_qualname)
        out: dict[str, FunctionInfo] = {}
        for name in cls.methods:
            info = self.functions.get(f"{module}:{local}.{name}")
            if info is not None and name not in out:
                out[name] = info
        return out

    def summary(self) -> dict[str, Any]:
        """Plain-data summary (what ``recon index --json`` prints)."""
        return {
            "snapshot": self.snapshot.name, "package": self.package, "version": self.snapshot.version,
            "modules": len(self.modules), "classes": len(self.classes),
            "functions": len(self.functions),
            "stats": {"files": self.stats.files, "parsed": self.stats.parsed,
                      "cached": self.stats.cached, "errors": self.stats.errors,
                      "workers": self.stats.workers, "seconds": round(self.stats.seconds, 3)},
            "errors": dict(sorted(self.errors.items())),
            "edited": sorted(self.edited),
        }


def assemble(snapshot: Snapshot, records: list[tuple[str, str, dict[str, Any]]],
             stats: IndexStats) -> SnapshotIndex:
    """Turn ``(path, sha256, raw record)`` triples into a :class:`SnapshotIndex`."""
    names, known, warnings = _module_owners(snapshot, records)
    all_files = snapshot.manifest.files
    modules: dict[str, ModuleInfo] = {}
    functions: dict[str, FunctionInfo] = {}
    classes: dict[str, ClassInfo] = {}
    errors: dict[str, str] = {}
    by_path: dict[str, str] = {}
    shared = _Shared()
    make_field = ClassField._make
    for path, sha, rec in records:
        if path not in names:
            continue
        mod, is_pkg = names[path]
        by_path[path] = mod
        if rec.get("warnings"):
            warnings.setdefault(path, []).extend(rec["warnings"])
        if rec.get("error"):
            errors[path] = rec["error"]
            modules[mod] = ModuleInfo(mod, path, sha, is_pkg, rec.get("lines", 0), error=rec["error"])
            continue
        fn_names = _add_functions(rec["functions"], mod, path, shared, functions)
        cls_names = _add_classes(rec["classes"], mod, path, classes)
        recorded = all_files.get(path)
        sha = sha or (recorded.sha256 if recorded is not None else None) or ""
        modules[mod] = ModuleInfo(mod, path, sha, is_pkg,
                                  rec["lines"], classes=tuple(cls_names), functions=tuple(fn_names),
                                  variables=rec["variables"],
                                  constants={k: make_field(v) for k, v in rec["constants"].items()},
                                  calls=tuple(rec["calls"]),
                                  import_rows=rec["imports"], known=known)
    stats.errors = len(errors)
    return SnapshotIndex(snapshot=snapshot, modules=modules, functions=functions, classes=classes,
                         errors=errors, warnings=warnings, stats=stats, by_path=by_path)


def _module_owners(snapshot: Snapshot, records: list[tuple[str, str, dict[str, Any]]]
                   ) -> tuple[dict[str, tuple[str, bool]], frozenset[str], dict[str, list[str]]]:
    """(path -> (module, is package), every module name, warnings): one file per module,
    the one the snapshot's module table (:attr:`Snapshot.modules`) names."""
    table = snapshot.modules
    names: dict[str, tuple[str, bool]] = {}
    warnings: dict[str, list[str]] = {}
    for path, _, _ in records:
        mod, is_pkg = module_name(path)
        if table.get(mod, ("", False))[0] == path:
            names[path] = (mod, is_pkg)
        else:  # "pkg/x.py" beside "pkg/x/__init__.py": the package wins
            warnings.setdefault(path, []).append(f"shadowed by the package {mod}; not indexed")
    return names, frozenset(mod for mod, _ in names.values()), warnings


@dataclass
class _Shared:
    """Most signatures repeat ((self), (self, x)...): sharing them saves memory and GC work."""

    #: params text -> its parameters
    params: dict[str, tuple[Param, ...]] = field(default_factory=dict)
    #: calls text -> its call names
    calls: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: one parameter row -> its Param
    one: dict[tuple[Any, ...], Param] = field(default_factory=dict)


def _add_functions(rows: list[Any], mod: str, path: str, shared: _Shared,
                   functions: dict[str, FunctionInfo]) -> list[str]:
    """Add one file's function rows to ``functions``; their qualnames, in file order."""
    prefix = mod + ":"
    fn_names = []
    interned, call_sets, one = shared.params, shared.calls, shared.one
    make_param = Param._make
    make_function = FunctionInfo._make
    # Rows are read, never modified: files with the same bytes share one record.
    for (name, lineno, def_lineno, end_lineno, col, kind, is_async, params_text, returns,
         decorators, class_name, ast_hash, body_hash, doc_hash, calls_text) in rows:
        q = prefix + name
        fn_names.append(q)
        params = interned.get(params_text)
        if params is None:
            params = interned[params_text] = tuple([
                one.get(key) or one.setdefault(key, make_param(key))
                for key in map(tuple, json.loads(params_text))])
        calls = call_sets.get(calls_text)
        if calls is None:
            calls = call_sets[calls_text] = tuple(calls_text.split())
        functions[q] = make_function((
            q, mod, path, name, lineno, def_lineno, end_lineno, col, kind, is_async, params,
            returns, tuple(decorators) if decorators else (), class_name, ast_hash, body_hash,
            doc_hash, calls))
    return fn_names


def _add_classes(rows: list[dict[str, Any]], mod: str, path: str,
                 classes: dict[str, ClassInfo]) -> list[str]:
    """Add one file's class records to ``classes``; their qualnames, in file order."""
    prefix = mod + ":"
    make_field = ClassField._make
    cls_names = []
    for r in rows:
        q = prefix + r["name"]
        cls_names.append(q)
        classes[q] = ClassInfo(q, mod, path, r["name"], r["lineno"], r["def"], r["end"], r["col"],
                               tuple(r["bases"]), r["keywords"], tuple(r["decorators"]),
                               tuple(r["methods"]), r["attrs"],
                               {k: make_field(v) for k, v in r["fields"].items()})
    return cls_names
