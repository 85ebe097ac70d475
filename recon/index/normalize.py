"""Normalized serialization of Python ASTs: the basis of every code-identity hash.

A function's identity across releases is its AST with positions, comments
and formatting removed. :func:`ast.dump` computes such a form but costs
about as much as parsing; walking ~6 million nodes per vLLM release in
Python is the single largest cost of indexing. So the serializer is
generated once per process from the grammar that CPython documents in each
node class's docstring (``BinOp(expr left, operator op, expr right)``): one
small function per node type, fields unrolled, no ``getattr`` loop and no
type tests on the fast path.

The token stream is a prefix encoding: the node type name, then each
field in grammar order; lists are bracketed with ``[``/``]``, identifiers
are written ``#name`` and every other non-node value with ``repr``
(strings are quoted), so no token of one kind can be read as another. Skipped fields carry no meaning for identity:
``ctx`` (implied by the tree shape), ``kind`` (the ``u`` prefix of a string)
and ``type_comment`` (a comment).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from typing import Any

Serializer = Callable[[Any], None]

#: Fields dropped from the normalized form.
SKIP_FIELDS = frozenset({"ctx", "kind", "type_comment"})
_PRIMITIVES = frozenset({"identifier", "string", "constant", "int", "bytes", "object"})
#: Operator fields: their value is a field-less singleton, written as its type name inline.
_OPERATORS = frozenset({"operator", "boolop", "unaryop", "cmpop"})
_FIELD_RE = re.compile(r"(\w+)([*?]?) (\w+)")


def _node_classes() -> list[type]:
    """Concrete AST node classes that the parser can produce (those with a grammar docstring)."""
    out = []
    for obj in vars(ast).values():
        if (isinstance(obj, type) and issubclass(obj, ast.AST) and obj.__module__ == "ast"
                and obj.__doc__ and obj.__doc__.split("(", 1)[0] == obj.__name__):
            out.append(obj)
    return out


def _field_spec(cls: type) -> list[tuple[str, str]]:
    """``[(field, category)]`` with category ``prim``, ``node`` or ``list``, in grammar order."""
    doc = cls.__doc__ or ""
    if "(" not in doc:
        return []
    spec = []
    for tp, mod, name in _FIELD_RE.findall(doc.split("(", 1)[1]):
        if name in SKIP_FIELDS or name not in cls._fields:  # type: ignore[attr-defined]
            continue
        if tp == "identifier" and mod == "":
            spec.append((name, "ident"))
        elif tp == "identifier" and mod == "?":
            spec.append((name, "ident?"))
        elif tp in _PRIMITIVES:
            spec.append((name, "prim"))  # a list of identifiers is written as one repr too
        elif tp in _OPERATORS:
            spec.append((name, "ops" if mod == "*" else "op"))
        elif mod == "*":
            spec.append((name, "list"))
        else:
            spec.append((name, "node"))
    return spec


def _factory_source(classes: list[type]) -> str:
    lines = ["def factory(append, D, repr=repr):", "    base = {}"]
    for cls in classes:
        name = cls.__name__
        lines.append(f"    def s_{name}(node):")
        lines.append(f"        append({name!r})")
        for field, cat in _field_spec(cls):
            if cat == "prim":
                lines.append(f"        append(repr(node.{field}))")
            elif cat == "ident":
                lines.append(f"        append('#' + node.{field})")
            elif cat == "ident?":
                lines.append(f"        v = node.{field}")
                lines.append("        append('None' if v is None else '#' + v)")
            elif cat == "op":
                lines.append(f"        append(node.{field}.__class__.__name__)")
            elif cat == "ops":
                lines.append("        append('[')")
                lines.append(f"        for v in node.{field}:")
                lines.append("            append(v.__class__.__name__)")
                lines.append("        append(']')")
            elif cat == "node":
                lines.append(f"        v = node.{field}")
                lines.append("        D[v.__class__](v)")
            else:
                lines.append("        append('[')")
                lines.append(f"        for v in node.{field}:")
                lines.append("            D[v.__class__](v)")
                lines.append("        append(']')")
        lines.append(f"    base[_{name}] = s_{name}")
    lines.append("    return base")
    return "\n".join(lines) + "\n"


def _build() -> Callable[..., dict[type, Serializer]]:
    classes = _node_classes()
    namespace: dict[str, Any] = {f"_{c.__name__}": c for c in classes}
    exec(compile(_factory_source(classes), "<recon.index.normalize>", "exec"), namespace)  # noqa: S102
    return namespace["factory"]  # type: ignore[no-any-return]


_FACTORY = _build()


class _Dispatch(dict):  # type: ignore[type-arg]
    """Type -> serializer; a type the grammar did not list falls back to a generic walk."""

    def __init__(self, append: Callable[[str], None]) -> None:
        super().__init__()
        self.append = append

    def __missing__(self, tp: type) -> Serializer:
        append = self.append

        def generic(node: Any) -> None:
            if node is None or not isinstance(node, ast.AST):
                append(repr(node))
                return
            append(type(node).__name__)
            for name, value in ast.iter_fields(node):
                if name in SKIP_FIELDS:
                    continue
                if isinstance(value, list):
                    append("[")
                    for item in value:
                        self[item.__class__](item)
                    append("]")
                elif isinstance(value, ast.AST):
                    self[value.__class__](value)
                else:
                    append(repr(value))

        self[tp] = generic
        return generic


def serializers(append: Callable[[str], None]) -> tuple[dict[type, Serializer], dict[type, Serializer]]:
    """Return ``(dispatch, base)`` writing tokens through ``append``.

    ``dispatch`` is what the serializers call for children: a caller may
    replace entries with hooks (that record something, then call the
    matching ``base`` serializer), and the whole walk goes through them.
    """
    dispatch = _Dispatch(append)
    base = _FACTORY(append, dispatch)
    dispatch.update(base)
    none_repr = repr(None)
    dispatch[type(None)] = lambda _node: append(none_repr)  # Dict keys for **x, kw_defaults
    return dispatch, base


def normalized_tokens(node: ast.AST) -> list[str]:
    """The normalized token list of any AST node (what the index hashes, minus hooks)."""
    out: list[str] = []
    dispatch, _ = serializers(out.append)
    dispatch[node.__class__](node)
    return out
