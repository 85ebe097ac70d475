"""One pass over one file's AST: definitions, imports, type hints and normalized hashes.

This is the hot loop of indexing (about 6 million AST nodes for a vLLM
release), so it is written for speed rather than elegance: a single
recursive walk that serializes every node into a flat token list (the
normalized form used for hashing) and, on the few node types that matter,
records definitions, imports, calls and attribute types on the way. Nested
definitions reuse their parent's tokens: a function's normalized form is a
slice of the list, so nothing is serialized twice.

The output is a plain JSON-able dict, the file's cache record (see
:mod:`recon.index.cache` for how records are stored). It depends only on the
file's bytes, never on its path or module name, so one record serves every
snapshot that ships the same file.
"""

from __future__ import annotations

import ast
import hashlib
import json
import sys
import threading
from collections.abc import Callable
from typing import Any

from .normalize import serializers

#: The largest module recon parses (index and slicer, in recon's own unsandboxed processes).
#: The largest module of the vLLM wheels 0.10-0.33 and SGLang 0.5.23 is 344 KiB
#: (vllm/v1/worker/gpu_model_runner.py, 0.27.0); parsing costs ~200x the file size in memory,
#: so 2 MiB keeps a process near 400 MB on a hostile file and leaves 6x headroom.
MAX_MODULE_BYTES = 2 << 20

#: Bump when the record layout or the normalization changes: old cache entries are ignored.
#: 6: classes carry ``fields`` (class-body assignments, for ``recon diff``).
#: 7: modules carry ``constants`` (module-body assignments, for ``recon diff``).
RECORD_VERSION = 7

#: A function's row in the record: FunctionInfo's fields after (qualname, module, path),
#: except that ``params`` is JSON text and ``calls`` one space-separated string: signatures
#: and call lists repeat, so the loader decodes each distinct one once and shares it.
FUNCTION_ROW = ("name", "lineno", "def_lineno", "end_lineno", "col", "kind", "is_async", "params",
                "returns", "decorators", "class_name", "ast_hash", "body_hash", "doc_hash", "calls")
_DEF, _END, _HASH, _BODY, _DOC, _CALLS = (FUNCTION_ROW.index(f) for f in (
    "def_lineno", "end_lineno", "ast_hash", "body_hash", "doc_hash", "calls"))
_PROPERTY_DECORATORS = frozenset({"property", "cached_property", "functools.cached_property",
                                  "abc.abstractproperty", "abstractproperty"})


_local = threading.local()  # one reusable visitor per thread


def digest(text: str) -> str:
    """The hash used for every normalized form: 128-bit BLAKE2b, hex."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def split_lines(text: str) -> list[str]:
    """Split source the way Python's tokenizer counts lines (``\\r\\n``, ``\\r``, ``\\n`` only).

    ``str.splitlines`` also splits on form feeds and other separators, which
    would shift every later line number of files that contain them.
    """
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text.split("\n")


def decode_source(data: bytes) -> str:
    """Bytes -> text, the way :meth:`Snapshot.read_text` does, minus a leading BOM."""
    text = data.decode("utf-8", errors="surrogateescape")
    return text[1:] if text.startswith("\ufeff") else text


class _Frame:
    """A scope being walked: the module, a class body or a function body."""

    __slots__ = ("kind", "name", "record", "calls", "self_name")

    def __init__(self, kind: str, name: str, record: Any,
                 calls: set[str], self_name: str | None = None) -> None:
        self.kind = kind  # "module" | "class" | "function"
        self.name = name  # module-local qualname ("" for the module)
        self.record = record
        self.calls = calls
        self.self_name = self_name  # first parameter of a method ("self"/"cls"), for attributes


class FileVisitor:
    """Walks one module's AST once and fills a raw record (see :func:`index_source`)."""

    def __init__(self, lines: list[str]) -> None:
        self.out: list[str] = []
        self.reset(lines)
        self.dispatch, self.base = serializers(self.out.append)
        self.dispatch.update({
            ast.FunctionDef: self._function,
            ast.AsyncFunctionDef: self._function,
            ast.ClassDef: self._class,
            ast.Import: self._import,
            ast.ImportFrom: self._import,
            ast.Call: self._call,
            ast.Assign: self._assign,
            ast.AnnAssign: self._assign,
        })

    def reset(self, lines: list[str]) -> None:
        """Start on another file, keeping the (costly to build) serializers."""
        self.lines = lines
        self.out.clear()
        self.functions: list[list[Any]] = []
        self.classes: list[dict[str, Any]] = []
        self.imports: list[list[Any]] = []
        self.variables: dict[str, str | None] = {}
        self.constants: dict[str, list[Any]] = {}
        self.module_calls: set[str] = set()
        self.seen: dict[str, int] = {}
        self.frames: list[_Frame] = [_Frame("module", "", None, self.module_calls)]
        self.warnings: list[str] = []

    # -- source text -----------------------------------------------------------
    def seg(self, node: ast.AST) -> str:
        """Source text of ``node`` from the pre-split lines (col offsets are UTF-8 bytes)."""
        lines = self.lines
        l0, c0 = node.lineno - 1, node.col_offset  # type: ignore[attr-defined]
        l1, c1 = node.end_lineno - 1, node.end_col_offset  # type: ignore[attr-defined]
        if l0 == l1:
            line = lines[l0]
            if line.isascii():
                return line[c0:c1]
            return line.encode("utf-8", "surrogateescape")[c0:c1].decode("utf-8", "surrogateescape")
        first = lines[l0].encode("utf-8", "surrogateescape")[c0:].decode("utf-8", "surrogateescape")
        last = lines[l1].encode("utf-8", "surrogateescape")[:c1].decode("utf-8", "surrogateescape")
        return "\n".join([first, *lines[l0 + 1:l1], last])

    # -- the walk ----------------------------------------------------------------
    def visit(self, node: ast.AST) -> None:
        """Serialize ``node`` into ``self.out``, firing hooks on the node types that matter."""
        self.dispatch[node.__class__](node)

    def visit_body(self, body: list[ast.stmt]) -> None:
        out = self.out
        dispatch = self.dispatch
        out.append("[")
        for stmt in body:
            dispatch[stmt.__class__](stmt)
        out.append("]")

    def run(self, tree: ast.Module) -> None:
        """Walk the module; a statement too deep to walk is skipped with a warning."""
        dispatch = self.dispatch
        for stmt in tree.body:
            mark = len(self.out)
            try:
                dispatch[stmt.__class__](stmt)
            except RecursionError:
                self._recursion_failed(stmt, mark)
            # Module-level tokens are not hashed: drop them to keep memory flat.
            del self.out[mark:]
        self.constants = _module_constants(tree.body, self.seg)

    def _recursion_failed(self, stmt: ast.stmt, mark: int) -> None:
        del self.frames[1:]
        del self.out[mark:]
        line = getattr(stmt, "lineno", 0)
        self.warnings.append(f"line {line}: too deeply nested to normalize; hashes left empty")
        for rec in self.functions:
            if rec[_DEF] >= line and rec[_END] <= getattr(stmt, "end_lineno", line):
                rec[_HASH] = rec[_BODY] = None

    # -- scopes --------------------------------------------------------------------
    def _local_name(self, name: str) -> str:
        top = self.frames[-1]
        if top.kind == "module":
            return name
        if top.kind == "class":
            return f"{top.name}.{name}"
        return f"{top.name}.<locals>.{name}"

    def _unique(self, local: str) -> str:
        count = self.seen.get(local, 0) + 1
        self.seen[local] = count
        return local if count == 1 else f"{local}#{count}"

    # -- hooks ---------------------------------------------------------------------
    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        parent = self.frames[-1]
        local = self._unique(self._local_name(node.name))
        decorators = [self.seg(d) for d in node.decorator_list]
        in_class = parent.kind == "class"
        kind = _function_kind(decorators) if in_class else "function"
        params = self._params(node.args)
        lineno = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        rec: list[Any] = [
            local, lineno, node.lineno, node.end_lineno, node.col_offset, kind,
            isinstance(node, ast.AsyncFunctionDef), json.dumps(params, separators=(",", ":")),
            self.seg(node.returns) if node.returns else None, decorators,
            parent.name if in_class else None, None, None, None, None,
        ]
        self.functions.append(rec)
        if in_class and parent.record is not None:
            parent.record["methods"].append(node.name)
        self_name = None
        if in_class and kind in ("method", "classmethod", "property") and params:
            self_name = params[0][0]
        calls: set[str] = set()
        # Decorators and defaults run in the enclosing scope: their calls belong to it.
        out = self.out
        start = len(out)
        out.append(type(node).__name__)
        out.append("#" + node.name)
        self.visit(node.args)
        for tp in getattr(node, "type_params", None) or ():
            self.visit(tp)
        self.visit_body(node.decorator_list)  # type: ignore[arg-type]
        if node.returns is not None:
            self.visit(node.returns)
        body = node.body
        doc = _docstring(body)
        if doc is not None:
            cleaned = _clean_doc(doc)
            rec[_DOC] = digest(cleaned)
            out.append(repr(cleaned))
            body = body[1:]
        self.frames.append(_Frame("function", local, rec, calls, self_name))
        try:
            body_start = len(out)
            self.visit_body(body)
        finally:
            self.frames.pop()
        rec[_CALLS] = " ".join(sorted(calls))
        sep = "\x00"
        rec[_BODY] = digest(sep.join(out[body_start:]))
        rec[_HASH] = digest(sep.join(out[start:]))

    def _params(self, args: ast.arguments) -> list[list[Any]]:
        seg = self.seg
        out: list[list[Any]] = []
        positional = [*args.posonlyargs, *args.args]
        defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
        defaults += list(args.defaults)
        for i, arg in enumerate(positional):
            kind = "POSITIONAL_ONLY" if i < len(args.posonlyargs) else "POSITIONAL_OR_KEYWORD"
            dflt = defaults[i]
            out.append([arg.arg, kind, seg(arg.annotation) if arg.annotation else None,
                        seg(dflt) if dflt is not None else None])
        if args.vararg is not None:
            a = args.vararg
            out.append([a.arg, "VAR_POSITIONAL", seg(a.annotation) if a.annotation else None, None])
        for arg, dflt in zip(args.kwonlyargs, args.kw_defaults, strict=True):
            out.append([arg.arg, "KEYWORD_ONLY", seg(arg.annotation) if arg.annotation else None,
                        seg(dflt) if dflt is not None else None])
        if args.kwarg is not None:
            a = args.kwarg
            out.append([a.arg, "VAR_KEYWORD", seg(a.annotation) if a.annotation else None, None])
        return out

    def _class(self, node: ast.ClassDef) -> None:
        local = self._unique(self._local_name(node.name))
        seg = self.seg
        rec: dict[str, Any] = {
            "name": local,
            "lineno": min([node.lineno, *(d.lineno for d in node.decorator_list)]),
            "def": node.lineno, "end": node.end_lineno, "col": node.col_offset,
            "bases": [seg(b) for b in node.bases],
            "keywords": {k.arg or "**": seg(k.value) for k in node.keywords},
            "decorators": [seg(d) for d in node.decorator_list],
            "methods": [], "attrs": {}, "fields": _class_fields(node.body, seg),
        }
        self.classes.append(rec)
        # The class body runs at import time, in the enclosing scope's call set.
        frame = _Frame("class", local, rec, self.frames[-1].calls)
        out = self.out
        out.append("ClassDef")
        out.append("#" + node.name)
        for part in (node.bases, node.keywords, node.decorator_list):
            self.visit_body(part)  # type: ignore[arg-type]
        self.frames.append(frame)
        try:
            self.visit_body(node.body)
        finally:
            self.frames.pop()

    def _import(self, node: ast.Import | ast.ImportFrom) -> None:
        scope = ""
        for frame in reversed(self.frames):
            if frame.kind == "function":
                scope = frame.name
                break
        if isinstance(node, ast.Import):
            for alias in node.names:
                self.imports.append([alias.name, None, alias.asname, node.lineno, 0, scope])
        else:
            for alias in node.names:
                self.imports.append([node.module or "", alias.name, alias.asname, node.lineno,
                                     node.level, scope])
        self.base[node.__class__](node)

    def _call(self, node: ast.Call) -> None:
        func = node.func
        tp = type(func)
        if tp is ast.Attribute:
            self.frames[-1].calls.add(func.attr)  # type: ignore[attr-defined]
        elif tp is ast.Name:
            self.frames[-1].calls.add(func.id)  # type: ignore[attr-defined]
        self.base[node.__class__](node)

    def _assign(self, node: ast.Assign | ast.AnnAssign) -> None:
        frame = self.frames[-1]
        kind = frame.kind
        if kind == "function" and frame.self_name is None:
            self.base[node.__class__](node)  # the common case: a local assignment, nothing to record
            return
        annotated = node.__class__ is ast.AnnAssign
        targets = [node.target] if annotated else node.targets  # type: ignore[union-attr]
        if kind == "function":
            self_name = frame.self_name
            hits = [t.attr for t in targets if t.__class__ is ast.Attribute
                    and t.value.__class__ is ast.Name and t.value.id == self_name]  # type: ignore[attr-defined]
            owner = self._owner_class() if hits else None
            hint = self._hint(node, annotated) if owner is not None else None
            if owner is not None and hint is not None:
                attrs = owner["attrs"]
                for attr in hits:
                    if attr not in attrs or (annotated and not _is_annotation(attrs[attr])):
                        attrs[attr] = hint
        else:
            names = [t.id for t in targets if t.__class__ is ast.Name]  # type: ignore[attr-defined]
            hint = self._hint(node, annotated) if names else None
            if kind == "module":
                variables = self.variables
                for name in names:
                    if (annotated or name not in variables
                            or (hint is not None and not _is_annotation(variables[name]))):
                        variables[name] = hint
            elif frame.record is not None and hint is not None:
                attrs = frame.record["attrs"]
                for name in names:
                    if name not in attrs or annotated:
                        attrs[name] = hint
        self.base[node.__class__](node)

    def _hint(self, node: ast.Assign | ast.AnnAssign, annotated: bool) -> str | None:
        if annotated:
            return self.seg(node.annotation)  # type: ignore[union-attr]
        return value_hint(node.value, self.seg)  # type: ignore[arg-type]

    def _owner_class(self) -> dict[str, Any] | None:
        if len(self.frames) >= 2 and self.frames[-2].kind == "class":
            return self.frames[-2].record
        return None


def _class_fields(body: list[ast.stmt], seg: Any) -> dict[str, list[Any]]:
    """``{name: [annotation, value, lineno]}`` for the assignments directly in a class body.

    ``x: T = v``, ``x: T`` and ``x = v`` (each name of ``a = b = v`` too);
    tuple targets, attribute targets, augmented assignments and statements
    nested in ``if``/``try`` blocks are left out. Annotation and value are
    normalized source (:func:`ast.unparse`: quotes, spacing, comments and
    line breaks do not matter); ``field(default=...)`` stays a call. A name
    assigned twice keeps the last value, and the last annotation: what
    Python's class namespace and ``__annotations__`` end up holding.
    """
    return _body_assignments(body, seg, skip_dunder=False)


def _module_constants(body: list[ast.stmt], seg: Any) -> dict[str, list[Any]]:
    """``{name: [annotation, value, lineno]}`` for the assignments directly in a module body.

    The same rules as :func:`_class_fields` (``NAME = v``, ``NAME: T = v``,
    ``NAME: T``; the last assignment of a name wins), and the same things
    left out: tuple/attribute/subscript targets (``a, b = ...``,
    ``os.environ[k] = ...``), augmented assignments (``X += ...``) and
    anything nested in ``if``/``try``/``with``/``for`` blocks, functions or
    classes (``if TYPE_CHECKING:`` declarations, import fallbacks), whose
    value depends on the running machine. Dunder names (``__all__``,
    ``__version__``, ``__doc__``...) are left out too: re-export lists and
    version stamps, not settings. Aliases (``Alias = other.Name``) are kept:
    they are assignments like any other and cost nothing to record.
    """
    return _body_assignments(body, seg, skip_dunder=True)


def _body_assignments(body: list[ast.stmt], seg: Any, *, skip_dunder: bool) -> dict[str, list[Any]]:
    fields: dict[str, list[Any]] = {}
    for stmt in body:
        tp = stmt.__class__
        if tp is ast.AnnAssign:
            target = stmt.target  # type: ignore[attr-defined]
            if target.__class__ is not ast.Name or (skip_dunder and _is_dunder(target.id)):
                continue
            value = stmt.value  # type: ignore[attr-defined]
            prev = fields.get(target.id)
            fields[target.id] = [
                _unparse(stmt.annotation, seg),  # type: ignore[attr-defined]
                _unparse(value, seg) if value is not None else (prev[1] if prev else None),
                stmt.lineno]
        elif tp is ast.Assign:
            names = [t.id for t in stmt.targets if t.__class__ is ast.Name  # type: ignore[attr-defined]
                     and not (skip_dunder and _is_dunder(t.id))]  # type: ignore[attr-defined]
            if not names:
                continue
            value_text = _unparse(stmt.value, seg)  # type: ignore[attr-defined]
            for name in names:
                prev = fields.get(name)
                fields[name] = [prev[0] if prev else None, value_text, stmt.lineno]
    return fields


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__") and len(name) > 4


def _unparse(node: ast.expr, seg: Any) -> str:
    """Normalized source of an expression; the raw text if it is too deep to unparse."""
    try:
        return ast.unparse(node)
    except RecursionError:
        return str(seg(node))


def _is_annotation(hint: str | None) -> bool:
    return hint is not None and not hint.startswith("=") and not hint.endswith("()")


def value_hint(value: ast.expr, text: Callable[[ast.expr], str | None]) -> str | None:
    """``f(...)`` -> ``"f()"``, a plain name ``x.y`` -> ``"=x.y"``; anything else: None.

    The hint of what a local holds, for the index (``text``: the source segment) and
    the call graph (``text``: the dotted name); one reading for both.
    """
    tp = type(value)
    if tp is ast.Call:
        func = value.func  # type: ignore[attr-defined]
        if type(func) in (ast.Name, ast.Attribute):
            name = text(func)
            return name + "()" if name else None
        return None
    if tp in (ast.Name, ast.Attribute):
        name = text(value)
        return "=" + name if name else None
    return None


def _clean_doc(doc: str) -> str:
    """Docstring text without indentation: moving a function between nesting levels
    re-indents its docstring, which must not change its identity."""
    return "\n".join([line.strip() for line in doc.strip().split("\n")])


def _docstring(body: list[ast.stmt]) -> str | None:
    if body and type(body[0]) is ast.Expr:
        value = body[0].value  # type: ignore[attr-defined]
        if type(value) is ast.Constant and isinstance(value.value, str):
            return value.value
    return None


def _function_kind(decorators: list[str]) -> str:
    for dec in decorators:
        if dec == "staticmethod":
            return "staticmethod"
        if dec == "classmethod":
            return "classmethod"
        if dec in _PROPERTY_DECORATORS or dec.endswith((".setter", ".getter", ".deleter")):
            return "property"
    return "method"


def index_source(data: bytes) -> dict[str, Any]:
    """Parse one file's bytes and return its raw record (the per-file cache entry).

    A file that does not parse (syntax this Python does not know, truncated
    file, a literal nested past the parser's limits) gives a record with
    ``error`` set and no definitions: never an exception.
    """
    if len(data) > MAX_MODULE_BYTES:  # a hostile file must not cost the parser gigabytes
        return {"v": RECORD_VERSION, "lines": 0, "error": (
            f"{len(data) / (1 << 20):.1f} MiB, over the {MAX_MODULE_BYTES >> 20} MiB cap on a "
            "module recon parses: not indexed")}
    text = decode_source(data)
    lines = split_lines(text)
    record: dict[str, Any] = {"v": RECORD_VERSION, "lines": len(lines) - (lines[-1] == ""),
                              "error": None}
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as err:
        record["error"] = _describe(err)
        return record
    visitor = getattr(_local, "visitor", None)
    if visitor is None:
        visitor = _local.visitor = FileVisitor(lines)
    else:
        visitor.reset(lines)
    limit = sys.getrecursionlimit()
    if limit < 10_000:
        sys.setrecursionlimit(10_000)
    try:
        visitor.run(tree)
    finally:
        sys.setrecursionlimit(limit)
    record.update(
        functions=visitor.functions,
        classes=visitor.classes,
        # Kept as JSON text inside the record: decoded only for the modules a query reads.
        imports=json.dumps(visitor.imports, separators=(",", ":")),
        variables=visitor.variables,
        constants=visitor.constants,
        calls=sorted(visitor.module_calls),
        warnings=visitor.warnings,
    )
    return record


def _describe(err: BaseException) -> str:
    name = type(err).__name__
    if isinstance(err, SyntaxError):
        where = f" (line {err.lineno})" if err.lineno else ""
        return f"{name}: {err.msg}{where}"
    if isinstance(err, RecursionError):
        return f"{name}: nested too deeply for the parser"
    return f"{name}: {err}"
