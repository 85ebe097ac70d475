"""The index's data model: what other parts of recon (slicing, probes, diff) build on.

Everything here is plain data: slotted dataclasses and named tuples of
strings and ints, picklable and convertible to JSON, so the per-file cache
can store it and other tools can consume it without importing ``ast``.

Names follow one convention everywhere:

* a **module** is its dotted import name (``vllm.platforms.interface``);
* a **qualname** is ``module:local`` where ``local`` is Python's own
  ``__qualname__`` inside the module (``Platform._align_hybrid_block_size``,
  ``outer.<locals>.inner``). The colon removes any doubt about where the
  module ends. A second definition with the same local name (a property's
  setter, a conditional redefinition) gets ``#2``, ``#3``... appended, so
  every definition of the file keeps its own entry and the first keeps the
  plain name.

Type hints recorded for variables and attributes (``ModuleInfo.variables``,
``ClassInfo.attributes``) are source text with a one-character convention:
``"T"`` is an annotation (an instance of ``T``), ``"f()"`` is the result of
calling ``f`` and ``"=x.y"`` is another name for the object ``x.y``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

#: Parameter kinds, named as :class:`inspect.Parameter` names them.
POSITIONAL_ONLY = "POSITIONAL_ONLY"
POSITIONAL_OR_KEYWORD = "POSITIONAL_OR_KEYWORD"
VAR_POSITIONAL = "VAR_POSITIONAL"
KEYWORD_ONLY = "KEYWORD_ONLY"
VAR_KEYWORD = "VAR_KEYWORD"

#: Function kinds. ``is_async`` is recorded separately: an async method is a method.
FUNCTION_KINDS = ("function", "method", "classmethod", "staticmethod", "property")


def split_qualname(qualname: str) -> tuple[str, str]:
    """``"pkg.mod:Cls.meth"`` -> ``("pkg.mod", "Cls.meth")``."""
    module, _, local = qualname.partition(":")
    return module, local


def split_dotted(name: str, is_module: Callable[[str], bool]) -> tuple[str, str] | None:
    """``"pkg.mod.Cls.meth"`` -> ``("pkg.mod", "Cls.meth")``: the longest prefix that
    ``is_module`` accepts is the module (None: no prefix is). The one reading of the
    dotted form for every verb; each passes the module table it has at hand."""
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module = ".".join(parts[:cut])
        if is_module(module):
            return module, ".".join(parts[cut:])
    return None


class Param(NamedTuple):
    """One parameter of a signature, as written in the source."""

    name: str
    kind: str  # one of the inspect.Parameter kind names above
    annotation: str | None  # source text, e.g. "int | None" (None: not annotated)
    default: str | None  # source text of the default expression (None: no default)

    def render(self) -> str:
        star = {VAR_POSITIONAL: "*", VAR_KEYWORD: "**"}.get(self.kind, "")
        text = star + self.name
        if self.annotation is not None:
            text += f": {self.annotation}"
        if self.default is not None:
            text += f" = {self.default}" if self.annotation is not None else f"={self.default}"
        return text


class ImportInfo(NamedTuple):
    """One imported name (``import a.b as c`` or ``from a import b as c``).

    ``module`` is absolute even for relative imports (resolved against the
    importing module). ``resolved`` is the module *of this snapshot* the
    import reaches (``from a import b`` -> ``a.b`` when that is a module,
    else ``a``), or None when it leaves the package (torch, stdlib, ...).
    ``scope`` is the module-local qualname of the function holding a lazy
    import, ``""`` for a module-level one.
    """

    module: str
    name: str | None  # None for "import module"
    asname: str | None
    lineno: int
    level: int  # 0 absolute, 1 for "from . import", ...
    scope: str
    resolved: str | None

    @property
    def bound_name(self) -> str:
        """The local name the import binds (``import a.b`` binds ``a``)."""
        if self.asname:
            return self.asname
        if self.name is not None:
            return self.name
        return self.module.split(".", 1)[0]

    @property
    def target(self) -> str:
        """The absolute dotted name the bound name refers to."""
        if self.name is None:
            return self.module if self.asname else self.module.split(".", 1)[0]
        return f"{self.module}.{self.name}" if self.module else self.name


class FunctionInfo(NamedTuple):
    """A function or method of the snapshot (nested functions included).

    ``lineno`` is the first decorator's line so that a source segment cut
    from ``lineno`` to ``end_lineno`` is the whole definition, decorators
    included; ``def_lineno`` is the ``def`` line itself (what tracebacks show).

    The three hashes identify code across releases whatever its position:
    ``ast_hash`` covers the whole normalized AST (name, parameters,
    decorators, docstring and body; no line/column numbers, no comments, no
    formatting), ``body_hash`` the statements without the docstring, and
    ``doc_hash`` the docstring alone (None when there is none). A hash is
    None only when the function was too deeply nested to normalize.

    A named tuple rather than a class: a vLLM release has 40,000 of them and
    building them straight from the cached rows keeps a warm index load fast.
    """

    qualname: str
    module: str
    path: str  # relative to the snapshot's src/
    name: str  # module-local qualname, e.g. "Platform._align_hybrid_block_size"
    lineno: int
    def_lineno: int
    end_lineno: int
    col: int  # column of the def (its indentation)
    kind: str  # one of FUNCTION_KINDS
    is_async: bool
    params: tuple[Param, ...]
    returns: str | None  # return annotation, source text
    decorators: tuple[str, ...]  # source text, without "@"
    class_name: str | None  # module-local qualname of the owning class, for methods
    ast_hash: str | None
    body_hash: str | None
    doc_hash: str | None
    #: Terminal names this function calls (``f`` for ``f()``, ``m`` for ``x.y.m()``).
    #: The call graph uses it to find candidate callers without parsing everything.
    calls: tuple[str, ...] = ()

    @property
    def short(self) -> str:
        """Last component of the name (``_align_hybrid_block_size``)."""
        return self.name.rsplit(".", 1)[-1].split("#", 1)[0]

    @property
    def signature(self) -> str:
        """``(cls, vllm_config: "VllmConfig") -> None``, rebuilt from the parameters."""
        parts: list[str] = []
        kinds = [p.kind for p in self.params]
        for i, p in enumerate(self.params):
            if p.kind == KEYWORD_ONLY and VAR_POSITIONAL not in kinds and (
                    i == 0 or self.params[i - 1].kind not in (KEYWORD_ONLY,)):
                parts.append("*")
            parts.append(p.render())
            if p.kind == POSITIONAL_ONLY and (i + 1 == len(self.params)
                                              or self.params[i + 1].kind != POSITIONAL_ONLY):
                parts.append("/")
        text = "(" + ", ".join(parts) + ")"
        return text + (f" -> {self.returns}" if self.returns is not None else "")

    @property
    def location(self) -> str:
        """``path:def_lineno``, the way editors and tracebacks point at it."""
        return f"{self.path}:{self.def_lineno}"


class ClassField(NamedTuple):
    """One assignment directly in a class body: a dataclass/pydantic field or a class constant.

    Module constants (:attr:`ModuleInfo.constants`, assignments directly in a
    module body) use the same record.

    ``max_num_seqs: int = 256`` is ``("int", "256", line)``; ``X = 4`` is
    ``(None, "4", line)``; ``name: str`` is ``("str", None, line)``. Text is
    normalized source (:func:`ast.unparse`), so two releases that differ in
    formatting, quotes or comments only give equal fields;
    ``field(default=...)`` and ``Field(default=..., ge=1)`` are kept as the
    call. ``lineno`` is the assignment's line (the last one, for a name
    assigned twice).
    """

    annotation: str | None
    value: str | None
    lineno: int

    def render(self) -> str:
        """``int = 256``, ``= 4`` (no annotation), ``str`` (no value)."""
        if self.annotation is None:
            return f"= {self.value}" if self.value is not None else ""
        return self.annotation + (f" = {self.value}" if self.value is not None else "")


class ClassInfo(NamedTuple):
    """A class of the snapshot. ``bases`` are source text; resolve them with the index."""

    qualname: str
    module: str
    path: str
    name: str
    lineno: int  # first decorator line
    def_lineno: int
    end_lineno: int
    col: int
    bases: tuple[str, ...]
    keywords: dict[str, str]  # metaclass=..., other class keywords (source text)
    decorators: tuple[str, ...]
    methods: tuple[str, ...]  # short names of the functions defined in the class body
    #: Instance/class attributes with a type hint (see the module docstring's convention):
    #: class-level annotations, ``self.x: T = ...`` and ``self.x = f(...)`` in methods.
    attributes: dict[str, str]
    #: The assignments directly in the class body, in source order (see :class:`ClassField`):
    #: dataclass and pydantic fields with their defaults, class constants.
    fields: dict[str, ClassField]

    @property
    def short(self) -> str:
        return self.name.rsplit(".", 1)[-1]

    @property
    def location(self) -> str:
        return f"{self.path}:{self.def_lineno}"


class ModuleInfo:
    """One ``.py`` file of the snapshot.

    ``bindings`` maps every module-level imported name to the absolute dotted
    name it stands for (``{"CacheConfig": "vllm.config.cache.CacheConfig",
    "np": "numpy"}``); ``imports`` lists every import statement, lazy ones in
    functions included, with the snapshot module each one reaches.
    ``constants`` are the assignments directly in the module body
    (``NAME = value``, ``NAME: T = value``), with the same record and
    normalization as class fields (:class:`ClassField`); dunder names
    (``__all__``, ``__version__``) and assignments nested in ``if``/``try``
    blocks are not among them.

    Imports are decoded on first use: a vLLM release has 50,000 of them and
    most queries read the imports of a few modules only. Everything else is
    a plain attribute.
    """

    __slots__ = ("name", "path", "sha256", "is_package", "line_count", "classes", "functions",
                 "variables", "constants", "calls", "error", "_rows", "_known", "_imports")

    def __init__(self, name: str, path: str, sha256: str, is_package: bool, line_count: int, *,
                 classes: tuple[str, ...] = (), functions: tuple[str, ...] = (),
                 variables: dict[str, str | None] | None = None,
                 constants: dict[str, ClassField] | None = None, calls: tuple[str, ...] = (),
                 error: str | None = None, import_rows: str | list[list[Any]] = "[]",
                 known: frozenset[str] | set[str] = frozenset()) -> None:
        self.name = name
        self.path = path
        self.sha256 = sha256
        self.is_package = is_package
        self.line_count = line_count
        self.classes = classes  # qualnames, in file order
        self.functions = functions  # qualnames, in file order (methods and nested included)
        self.variables = variables if variables is not None else {}  # name -> type hint text
        self.constants = constants if constants is not None else {}  # name -> ClassField
        self.calls = calls  # names called at import time (module and class bodies)
        self.error = error  # why the file could not be parsed (then it defines nothing)
        self._rows = import_rows  # raw rows (JSON text from the cache, or lists)
        self._known = known  # every module name of the snapshot, to resolve imports
        self._imports: tuple[tuple[ImportInfo, ...], dict[str, str], tuple[str, ...]] | None = None

    def _decode(self) -> tuple[tuple[ImportInfo, ...], dict[str, str], tuple[str, ...]]:
        if self._imports is None:
            rows = json.loads(self._rows) if isinstance(self._rows, str) else self._rows
            known = self._known
            imports = []
            bindings: dict[str, str] = {}
            stars = []
            for module, name, asname, lineno, level, scope in rows:
                absmod = absolute_module(self.name, self.is_package, module, level)
                if name is not None and f"{absmod}.{name}" in known:
                    resolved: str | None = f"{absmod}.{name}"
                elif absmod in known:
                    resolved = absmod
                else:
                    resolved = None
                imp = ImportInfo(absmod, name, asname, lineno, level, scope, resolved)
                imports.append(imp)
                if not scope:
                    if name == "*":
                        stars.append(absmod)
                    else:
                        bindings[imp.bound_name] = imp.target
            self._imports = (tuple(imports), bindings, tuple(stars))
        return self._imports

    @property
    def imports(self) -> tuple[ImportInfo, ...]:
        return self._decode()[0]

    @property
    def bindings(self) -> dict[str, str]:
        return self._decode()[1]

    @property
    def star_imports(self) -> tuple[str, ...]:
        """Absolute modules of ``from x import *`` at module level."""
        return self._decode()[2]

    @property
    def imported_modules(self) -> tuple[str, ...]:
        """Snapshot modules this module imports (anywhere in the file), sorted, no duplicates."""
        return tuple(sorted({i.resolved for i in self.imports if i.resolved}))

    def _key(self) -> tuple[Any, ...]:
        return (self.name, self.path, self.sha256, self.is_package, self.line_count, self.classes,
                self.functions, self.variables, self.constants, self.calls, self.error, self.imports)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ModuleInfo) and self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ModuleInfo({self.name!r}, path={self.path!r}, error={self.error!r})"

    def __getstate__(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            setattr(self, k, v)


def as_json(record: Any) -> Any:
    """Plain JSON data for any index record (FunctionInfo, ClassInfo, ModuleInfo, ImportInfo, Param)."""
    if isinstance(record, ModuleInfo):
        return {"name": record.name, "path": record.path, "sha256": record.sha256,
                "is_package": record.is_package, "line_count": record.line_count,
                "imports": [as_json(i) for i in record.imports], "bindings": dict(record.bindings),
                "star_imports": list(record.star_imports), "classes": list(record.classes),
                "functions": list(record.functions), "variables": dict(record.variables),
                "constants": {k: as_json(v) for k, v in record.constants.items()},
                "calls": list(record.calls), "error": record.error}
    if isinstance(record, tuple) and hasattr(record, "_asdict"):
        return {k: as_json(v) for k, v in record._asdict().items()}
    if isinstance(record, (list, tuple)):
        return [as_json(v) for v in record]
    if isinstance(record, dict):
        return {k: as_json(v) for k, v in record.items()}
    return record


def absolute_module(importer: str, is_package: bool, module: str, level: int) -> str:
    """Resolve ``from ..x import y`` written in ``importer`` to an absolute module name."""
    if level == 0:
        return module
    parts = importer.split(".")
    if not is_package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)] if level - 1 <= len(parts) else []
    base = ".".join(parts)
    if module:
        return f"{base}.{module}" if base else module
    return base


@dataclass(slots=True)
class IndexStats:
    """How an index was obtained: the benchmark and ``recon index`` report it."""

    files: int = 0  # .py files indexed
    parsed: int = 0  # parsed now (cache misses)
    cached: int = 0  # taken from the per-file cache
    errors: int = 0  # files that failed to parse
    workers: int = 0  # processes used for parsing (0: parsed in this process)
    seconds: float = 0.0
