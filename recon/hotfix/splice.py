"""Replace named functions, methods or classes in a file's bytes with other versions of them.

The splice is done on a concrete syntax tree (:mod:`libcst`), not on text:

* the image's file is parsed whole and must print back byte for byte
  (``parse_module(data).bytes == data``), or nothing is done;
* each named definition is found by its module-local qualname
  (``Class.method``, ``f#2`` for a second definition, as the index names
  them) and replaced as a node: decorators come with it, and the body is
  re-indented structurally, so a piece taken from a release that nests it
  deeper or shallower keeps the contents of its multi-line strings;
* the blank lines and comments just above the definition
  (``leading_lines``) and the comments after its last statement (the
  block's ``footer``) stay the image's: they are outside the definition's
  span as the index records it (decorator line to last statement), and the
  check below holds the splice to that span.

:func:`outside_identical` then proves, on the bytes, that every line outside
the replaced spans is the image's own, in order.
"""

from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from ..errors import ReconError

Definition = cst.FunctionDef | cst.ClassDef
_BLOCKS = (cst.If, cst.Else, cst.Try, cst.ExceptHandler, cst.Finally, cst.With, cst.For,
           cst.While)


def parse_file(data: bytes, label: str) -> cst.Module:
    """The image's file as a CST that prints back to exactly ``data``."""
    try:
        module = cst.parse_module(data)
    except cst.ParserSyntaxError as err:
        raise ReconError(f"libcst cannot parse {label} ({str(err).splitlines()[0]}); "
                         "no hotfix is written") from err
    if module.bytes != data:
        raise ReconError(f"libcst does not print {label} back byte for byte; no hotfix is written")
    return module


def parse_piece(segment: bytes, indented: bool, label: str) -> Definition:
    """One definition cut from a file (decorator line to last line) as a CST node.

    An indented segment (a method) is parsed under an ``if 1:`` line, the
    way :meth:`recon.index.SnapshotIndex.function_ast` parses it, so any
    nesting level parses without re-indenting text.
    """
    text = (b"if 1:\n" if indented else b"") + segment
    try:
        module = cst.parse_module(text)
    except cst.ParserSyntaxError as err:
        raise ReconError(f"libcst cannot parse {label} ({str(err).splitlines()[0]})") from err
    stmt: cst.CSTNode = module.body[0]
    if indented:
        assert isinstance(stmt, cst.If) and isinstance(stmt.body, cst.IndentedBlock)
        stmt = stmt.body.body[0]
    if not isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
        raise ReconError(f"{label} is not a function or class definition")
    return stmt


def _definitions(body: Iterable[cst.CSTNode]) -> list[Definition]:
    """Definitions of one scope in source order, looking into if/try/with blocks, not into defs."""
    out: list[Definition] = []
    for node in body:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            out.append(node)
        elif isinstance(node, _BLOCKS):
            out.extend(_definitions(_children_blocks(node)))
    return out


def _children_blocks(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The statements inside a compound statement and its else/except/finally parts."""
    out: list[cst.CSTNode] = []
    for part in (getattr(node, "body", None), getattr(node, "orelse", None),
                 getattr(node, "finalbody", None)):
        if isinstance(part, cst.IndentedBlock):
            out.extend(part.body)
        elif isinstance(part, _BLOCKS):
            out.append(part)
    for handler in getattr(node, "handlers", ()) or ():
        out.append(handler)
    return out


def find_definition(module: cst.Module, local: str) -> Definition:
    """The node of ``local`` (``Class.method``, ``f#2``) in ``module``; ReconError if absent."""
    if ".<locals>." in local:
        raise ReconError(f"{local} is nested inside a function: name the enclosing function")
    scope: Iterable[cst.CSTNode] = module.body
    node: Definition | None = None
    for part in local.split("."):
        name, _, nth = part.partition("#")
        hits = [d for d in _definitions(scope) if d.name.value == name]
        index = int(nth) - 1 if nth.isdigit() else 0
        if index >= len(hits):
            raise ReconError(f"no definition {local} found in the file's syntax tree")
        node = hits[index]
        body = node.body
        scope = body.body if isinstance(body, cst.IndentedBlock) else ()
    assert node is not None
    return node


def splice(module: cst.Module, replacements: dict[str, Definition]) -> bytes:
    """``module`` with each ``local -> new node`` replaced; the image's leading lines and
    trailing comments of each replaced definition are kept (see the module docstring)."""
    for local, new in replacements.items():
        old = find_definition(module, local)
        if type(old) is not type(new):
            raise ReconError(f"{local} is a {_kind(old)} in the image and a {_kind(new)} in the fix")
        new = new.with_changes(leading_lines=old.leading_lines)
        if isinstance(old.body, cst.IndentedBlock) and isinstance(new.body, cst.IndentedBlock):
            new = new.with_changes(body=new.body.with_changes(footer=old.body.footer))
        replaced = module.deep_replace(old, new)  # type: ignore[arg-type]
        assert isinstance(replaced, cst.Module)
        module = replaced
    return module.bytes


def _kind(node: cst.CSTNode) -> str:
    return "class" if isinstance(node, cst.ClassDef) else "function"


def lines_of(data: bytes) -> list[bytes]:
    """Lines with their ends, split the way Python counts lines (``\\r\\n``, ``\\r``, ``\\n``)."""
    return data.splitlines(keepends=True)


def outside_identical(original: bytes, patched: bytes,
                      spans: list[tuple[tuple[int, int], tuple[int, int]]]) -> bool:
    """True when the lines outside the replaced spans are the same bytes, in the same order.

    ``spans`` holds, per piece, ``((first, last) in the original, (first, last) in the
    patched file)``, 1-based and inclusive.
    """
    def outside(data: bytes, ranges: list[tuple[int, int]]) -> list[bytes]:
        keep = lines_of(data)
        drop = {n for first, last in ranges for n in range(first, last + 1)}
        return [ln for n, ln in enumerate(keep, start=1) if n not in drop]

    return outside(original, [a for a, _ in spans]) == outside(patched, [b for _, b in spans])
