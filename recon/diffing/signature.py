"""Signature comparison, with the names and rules of ``griffe check``.

griffe (``griffe._internal.diff._function_incompatibilities``, 2.x) reports,
per parameter of the old signature: removed (unless ``*args``/``**kwargs``
of the new one swallow it), now required, moved (a positional parameter at
another index), kind changed (only the incompatible kind changes), default
changed (both optional, neither variadic); then every new parameter added
as required, and a return annotation that disappeared. recon applies the
same rules with the same names, so its output reads like griffe's. griffe
stays silent on what cannot break a caller; recon still reports that, under
its own names and with ``breaking=False``: an optional parameter added, a
parameter swallowed by ``*args``/``**kwargs``, a compatible kind change, an
annotation changed, ``async`` added or removed.

Defaults and annotations are compared by their normalized AST, not their
text, so ``(1,2)`` and ``(1, 2)`` are the same default.
"""

from __future__ import annotations

import ast
import functools

from ..index.models import (
    KEYWORD_ONLY,
    POSITIONAL_ONLY,
    POSITIONAL_OR_KEYWORD,
    VAR_KEYWORD,
    VAR_POSITIONAL,
    FunctionInfo,
    Param,
)
from .model import SignatureChange

_POSITIONAL = (POSITIONAL_ONLY, POSITIONAL_OR_KEYWORD)
_VARIADIC = (VAR_POSITIONAL, VAR_KEYWORD)

#: griffe's BreakageKind values (griffe 2.4), so reports use its exact words.
GRIFFE_TEXT = {
    "PARAMETER_MOVED": "Positional parameter was moved",
    "PARAMETER_REMOVED": "Parameter was removed",
    "PARAMETER_CHANGED_KIND": "Parameter kind was changed",
    "PARAMETER_CHANGED_DEFAULT": "Parameter default was changed",
    "PARAMETER_CHANGED_REQUIRED": "Parameter is now required",
    "PARAMETER_ADDED_REQUIRED": "Parameter was added as required",
    "RETURN_CHANGED_TYPE": "Return types are incompatible",
}
#: Differences griffe does not report (they break no caller); recon's names for them.
RECON_TEXT = {
    "PARAMETER_ADDED_OPTIONAL": "Parameter was added as optional",
    "PARAMETER_ADDED_VARIADIC": "Variadic parameter (*args/**kwargs) was added",
    "PARAMETER_SWALLOWED": "Parameter was removed, now taken by *args/**kwargs",
    "PARAMETER_CHANGED_KIND_COMPATIBLE": "Parameter kind was changed (compatibly)",
    "PARAMETER_CHANGED_ANNOTATION": "Parameter annotation was changed",
    "RETURN_CHANGED_ANNOTATION": "Return annotation was changed",
    "FUNCTION_CHANGED_ASYNC": "Function was made async or sync",
    "PARAMETERS_REORDERED": "Keyword parameters were reordered",
}


@functools.lru_cache(maxsize=4096)
def normalized_expr(text: str | None) -> str | None:
    """An expression's identity: its AST dump (no positions), or its text if it does not parse."""
    if text is None:
        return None
    try:
        return ast.dump(ast.parse(text.strip(), mode="eval").body)
    except (SyntaxError, ValueError, RecursionError):
        return " ".join(text.split())


def same_expr(a: str | None, b: str | None) -> bool:
    """Equal source text, or (only then parsed) equal normalized AST."""
    if a == b:
        return True
    if a is None or b is None:
        return False
    return normalized_expr(a) == normalized_expr(b)


def _required(p: Param) -> bool:
    return p.default is None and p.kind not in _VARIADIC


def _griffe(kind: str, param: str | None = None, old: str | None = None,
            new: str | None = None) -> SignatureChange:
    return SignatureChange(kind, GRIFFE_TEXT[kind], param, old, new, True, "griffe")


def _recon(kind: str, param: str | None = None, old: str | None = None,
           new: str | None = None) -> SignatureChange:
    return SignatureChange(kind, RECON_TEXT[kind], param, old, new, False, "recon")


def compare_signatures(old: FunctionInfo, new: FunctionInfo) -> list[SignatureChange]:
    """Every difference between the two signatures, griffe's rules first (see module docstring)."""
    out: list[SignatureChange] = []
    new_params: dict[str, tuple[int, Param]] = {}
    for i, p in enumerate(new.params):
        new_params.setdefault(p.name, (i, p))
    old_names = {p.name for p in old.params}
    kinds = {p.kind for p in new.params}
    has_args, has_kwargs = VAR_POSITIONAL in kinds, VAR_KEYWORD in kinds
    for old_index, op in enumerate(old.params):
        hit = new_params.get(op.name)
        if hit is None:
            swallowed = ((op.kind == KEYWORD_ONLY and has_kwargs)
                         or (op.kind == POSITIONAL_ONLY and has_args)
                         or (op.kind == POSITIONAL_OR_KEYWORD and has_args and has_kwargs))
            out.append(_recon("PARAMETER_SWALLOWED", op.name, op.render(), None) if swallowed
                       else _griffe("PARAMETER_REMOVED", op.name, op.render(), None))
            continue
        new_index, np_ = hit
        if _required(np_) and not _required(op):
            out.append(_griffe("PARAMETER_CHANGED_REQUIRED", op.name, op.default, None))
        if op.kind in _POSITIONAL and np_.kind in _POSITIONAL and new_index != old_index:
            out.append(_griffe("PARAMETER_MOVED", op.name, f"position {old_index}",
                               f"position {new_index} ({new_index - old_index:+})"))
        if op.kind != np_.kind:
            incompatible = (
                (op.kind == POSITIONAL_ONLY and np_.kind == KEYWORD_ONLY)
                or (op.kind == KEYWORD_ONLY and np_.kind == POSITIONAL_ONLY)
                or (op.kind == POSITIONAL_OR_KEYWORD and np_.kind in (POSITIONAL_ONLY, KEYWORD_ONLY))
                or (np_.kind == VAR_KEYWORD and op.kind != KEYWORD_ONLY and not has_args)
                or (np_.kind == VAR_POSITIONAL and op.kind != POSITIONAL_ONLY and not has_kwargs))
            make = _griffe if incompatible else _recon
            out.append(make("PARAMETER_CHANGED_KIND" if incompatible
                            else "PARAMETER_CHANGED_KIND_COMPATIBLE", op.name, op.kind, np_.kind))
        if (not _required(op) and not _required(np_) and op.kind not in _VARIADIC
                and np_.kind not in _VARIADIC
                and not same_expr(op.default, np_.default)):
            out.append(_griffe("PARAMETER_CHANGED_DEFAULT", op.name, op.default, np_.default))
        if not same_expr(op.annotation, np_.annotation):
            out.append(_recon("PARAMETER_CHANGED_ANNOTATION", op.name, op.annotation,
                              np_.annotation))
    for np_ in new.params:
        if np_.name not in old_names:
            if _required(np_):
                out.append(_griffe("PARAMETER_ADDED_REQUIRED", np_.name, None, np_.render()))
            else:
                out.append(_recon("PARAMETER_ADDED_VARIADIC" if np_.kind in _VARIADIC
                                  else "PARAMETER_ADDED_OPTIONAL", np_.name, None, np_.render()))
    if old.returns is not None and new.returns is None:
        out.append(_griffe("RETURN_CHANGED_TYPE", None, old.returns, None))
    elif not same_expr(old.returns, new.returns):
        out.append(_recon("RETURN_CHANGED_ANNOTATION", None, old.returns, new.returns))
    if old.is_async != new.is_async:
        out.append(_recon("FUNCTION_CHANGED_ASYNC", None, "async" if old.is_async else "sync",
                          "async" if new.is_async else "sync"))
    if not out and [(p.name, p.kind) for p in old.params] != [(p.name, p.kind) for p in new.params]:
        out.append(_recon("PARAMETERS_REORDERED", None, ", ".join(p.name for p in old.params),
                          ", ".join(p.name for p in new.params)))
    return out


def decorators_differ(old: FunctionInfo, new: FunctionInfo) -> bool:
    """Decorators compared by normalized AST, in order."""
    if len(old.decorators) != len(new.decorators):
        return True
    return not all(same_expr(a, b) for a, b in zip(old.decorators, new.decorators, strict=True))
