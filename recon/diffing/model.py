"""The diff's data model: plain dataclasses, rendered by the CLI and :mod:`recon.diffing.render`.

Function change kinds (``FunctionChange.kind``), in the order reports list them:

``added`` / ``removed``
    only on one side (after moves and renames were matched).
``renamed``
    a different name with the identical normalized body (parameters,
    docstring or place may differ too: ``parts`` says which).
``signature``
    parameters, return annotation or ``async`` changed (``signature`` lists
    each change, named as ``griffe check`` names it); the body may have
    changed too (then ``"body"`` is in ``parts``).
``body``
    the statements changed (docstring excluded), the signature did not.
``decorators``
    only the decorators changed.
``docstring``
    only the docstring changed: its own kind, not a code change.
``moved``
    the identical normalized AST at another line, in another file or class
    (``old`` and ``new`` say where). Not a change.
``formatting``
    same place, same normalized AST, different text: formatting or comments
    only. Not a change; counted.

A pair whose container changed (a class or module renamed, a file moved)
keeps its content kind and says ``"moved"`` in ``parts``.

Class field change kinds (``FieldChange.kind``), for the assignments
directly in a class body (dataclass and pydantic fields, class constants;
see :class:`recon.index.models.ClassField`), compared on normalized source:

``added`` / ``removed``
    the name is assigned in the class body on one side only.
``default``
    the assigned value changed (``256`` -> ``512``, ``False`` -> ``None``,
    ``Field(default_factory=f)`` -> ``True``); the annotation may have
    changed too (then ``"annotation"`` is in ``parts``).
``annotation``
    only the annotation changed (``bool`` -> ``bool | None``).

Module constant change kinds (``ConstantChange.kind``), for the assignments
directly in a module body (``DEFAULT_MAX_NUM_SEQS = 256``,
``NIXL_CONNECTOR_VERSION: int = 15``; see
:attr:`recon.index.models.ModuleInfo.constants`), listed with the class
fields under ``module:NAME``, compared on normalized source:

``added`` / ``removed``
    the name is assigned in the module body on one side only.
``value``
    the assigned value changed; the annotation may have changed too (then
    ``"annotation"`` is in ``parts``).
``annotation``
    only the annotation changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..index.models import ClassField, ClassInfo, FunctionInfo, ModuleInfo

CODE_KINDS = ("added", "removed", "renamed", "signature", "body", "decorators")
LISTED_KINDS = (*CODE_KINDS, "docstring")
QUIET_KINDS = ("moved", "formatting")
ALL_KINDS = (*LISTED_KINDS, *QUIET_KINDS)
SECTIONS = ("image", "distributions", "files", "functions")
FIELD_KINDS = ("added", "removed", "default", "annotation")
CONSTANT_KINDS = ("added", "removed", "value", "annotation")


@dataclass(frozen=True)
class SignatureChange:
    """One difference between two signatures.

    ``kind`` is griffe's ``BreakageKind`` name when griffe reports the same
    thing (``source == "griffe"``), else recon's own name for a difference
    griffe leaves out because it does not break callers (an optional
    parameter added, an annotation changed): ``source == "recon"``.
    """

    kind: str
    text: str
    param: str | None = None
    old: str | None = None
    new: str | None = None
    breaking: bool = True
    source: str = "griffe"

    def describe(self) -> str:
        where = f"({self.param})" if self.param else ""
        values = ""
        if self.old is not None or self.new is not None:
            values = f": {self.old if self.old is not None else '-'} -> " \
                     f"{self.new if self.new is not None else '-'}"
        return f"{self.text}{where}{values}"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "text": self.text, "param": self.param, "old": self.old,
                "new": self.new, "breaking": self.breaking, "source": self.source}


def function_json(fn: FunctionInfo | None) -> dict[str, Any] | None:
    """The few fields of a FunctionInfo a report needs."""
    if fn is None:
        return None
    return {"qualname": fn.qualname, "path": fn.path, "line": fn.def_lineno,
            "lines": [fn.lineno, fn.end_lineno], "kind": fn.kind, "signature": fn.signature,
            "ast_hash": fn.ast_hash, "body_hash": fn.body_hash, "doc_hash": fn.doc_hash}


@dataclass
class FunctionChange:
    """One function's fate between side A (``old``) and side B (``new``)."""

    kind: str
    old: FunctionInfo | None
    new: FunctionInfo | None
    parts: tuple[str, ...] = ()  # body, signature, decorators, docstring, async, name, moved, text
    signature: tuple[SignatureChange, ...] = ()
    diff: list[str] | None = None  # unified diff lines, filled when asked for (--show)

    @property
    def qualname(self) -> str:
        """The name to list it under: the new one, or the old one for a removal."""
        return (self.new or self.old).qualname  # type: ignore[union-attr]

    @property
    def old_name(self) -> str | None:
        """The old qualname when it differs from the new one (moved or renamed)."""
        if self.old is not None and self.new is not None and self.old.qualname != self.new.qualname:
            return self.old.qualname
        return None

    def where(self) -> str:
        """``path:line -> path:line`` (one side only for additions and removals)."""
        a = self.old.location if self.old else None
        b = self.new.location if self.new else None
        if a and b:
            if a == b:
                return a
            if self.old.path == self.new.path:  # type: ignore[union-attr]
                return f"{a} -> {self.new.def_lineno}"  # type: ignore[union-attr]
            return f"{a} -> {b}"
        return a or b or ""

    def detail(self) -> str:
        """One line: what differs, in words."""
        bits = []
        if self.old_name:
            bits.append(f"was {self.old_name}")
        if self.signature:
            bits.append("; ".join(s.describe() for s in self.signature))
        extra = [p for p in self.parts if p not in (self.kind, "name", "signature")]
        if extra:
            bits.append("also " + ", ".join(extra))
        return "; ".join(bits)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "qualname": self.qualname,
                               "old_qualname": self.old_name, "parts": list(self.parts),
                               "old": function_json(self.old), "new": function_json(self.new),
                               "signature": [s.to_json() for s in self.signature]}
        if self.diff is not None:
            out["diff"] = "\n".join(self.diff)
        return out


@dataclass
class FunctionDiff:
    """The function section: every change, and counts of what is not a change."""

    changes: list[FunctionChange]  # LISTED_KINDS, in report order
    moved: list[FunctionChange]
    formatting: list[FunctionChange]
    files_compared: int  # changed, added and removed .py files whose functions were compared
    unchanged: int  # functions of those files with identical text at the same place
    focus: dict[str, Any] | None = None  # target, depth, members (when --focus)
    note: str | None = None

    def counts(self) -> dict[str, int]:
        out = {k: 0 for k in ALL_KINDS}
        for c in self.changes:
            out[c.kind] += 1
        out["moved"] = len(self.moved)
        out["formatting"] = len(self.formatting)
        out["unchanged"] = self.unchanged
        return out

    def summary(self) -> str:
        """``7 code changes (2 added, ...); 1 docstring-only; 40 moved only; 3 formatting/comment-only (not changes)``."""
        c = self.counts()
        code = sum(c[k] for k in CODE_KINDS)
        detail = ", ".join(f"{c[k]} {k}" for k in CODE_KINDS if c[k])
        return (f"{code} code change{'s' if code != 1 else ''}" + (f" ({detail})" if detail else "")
                + f"; {c['docstring']} docstring-only; {c['moved']} moved only; "
                f"{c['formatting']} formatting/comment-only (not changes)")

    def to_json(self) -> dict[str, Any]:
        """Changes in full; moves as ``{qualname, old_qualname, old, new, text_differs}`` with
        ``path:line`` places (a release pair has thousands); formatting-only as names."""
        out: dict[str, Any] = {"summary": self.summary(), "counts": self.counts(),
                               "files_compared": self.files_compared,
                               "changes": [c.to_json() for c in self.changes],
                               "moved": [{"qualname": c.qualname, "old_qualname": c.old_name,
                                          "old": c.old.location if c.old else None,
                                          "new": c.new.location if c.new else None,
                                          "text_differs": "text" in c.parts} for c in self.moved],
                               "formatting": [c.qualname for c in self.formatting]}
        if self.focus is not None:
            out["focus"] = self.focus
        if self.note:
            out["note"] = self.note
        return out


def field_json(cls: ClassInfo, name: str, f: ClassField | None) -> dict[str, Any] | None:
    """One side of a field change: normalized annotation and value, and where it is."""
    if f is None:
        return None
    return {"annotation": f.annotation, "value": f.value, "path": cls.path, "line": f.lineno,
            "class": cls.qualname, "text": f"{name}: {f.render()}" if f.annotation is not None
            else f"{name} {f.render()}".rstrip()}


@dataclass
class FieldChange:
    """One class-body field that differs between the two versions of a class."""

    kind: str  # one of FIELD_KINDS
    cls_old: ClassInfo
    cls_new: ClassInfo
    name: str
    old: ClassField | None
    new: ClassField | None
    parts: tuple[str, ...] = ()  # "default", "annotation": what differs for a changed field

    @property
    def qualname(self) -> str:
        """``module:Class.field``, under the new class name."""
        return f"{self.cls_new.qualname}.{self.name}"

    @property
    def old_class(self) -> str | None:
        """The old class qualname when the class moved to another module."""
        return self.cls_old.qualname if self.cls_old.qualname != self.cls_new.qualname else None

    def where(self) -> str:
        """``path:line`` of the assignment (B's; A's for a removal; both when it moved files)."""
        return _where(self.cls_old.path, self.cls_new.path, self.old, self.new)

    def side(self, which: str) -> str:
        """What one side says, ``int = 256`` (``-`` when the field is absent there)."""
        return _side(self.old if which == "a" else self.new)

    def detail(self) -> str:
        """One line: what differs, in words."""
        bits = _differs(self.old, self.new, self.parts, value_part="default")
        if self.old_class:
            bits.append(f"class was {self.old_class}")
        return "; ".join(bits)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "qualname": self.qualname, "class": self.cls_new.qualname,
                "old_class": self.old_class, "field": self.name, "parts": list(self.parts),
                "old": field_json(self.cls_old, self.name, self.old),
                "new": field_json(self.cls_new, self.name, self.new)}


def _change_summary(what: str, n: int, counts: dict[str, int], kinds: tuple[str, ...],
                    owner: tuple[str, str], changed: int, compared: int) -> str:
    """``N WHATs in K OWNERS (a kind, b kind); M OWNERS compared``, plurals right."""
    def many(k: int, words: tuple[str, str]) -> str:
        return f"{k} {words[0] if k == 1 else words[1]}"

    detail = ", ".join(f"{counts[k]} {k}" for k in kinds if counts[k])
    return (many(n, (what, what + "s"))
            + (f" in {many(changed, owner)} ({detail})" if n else "")
            + f"; {many(compared, owner)} compared")


def _or_none(text: str | None) -> str:
    return "(none)" if text is None else text


# Class fields and module constants are both assignments: one way to place and describe them.

def _where(path_old: str, path_new: str, old: ClassField | None, new: ClassField | None) -> str:
    """``path:line`` of an assignment (B's; A's for a removal; both when it moved)."""
    a = f"{path_old}:{old.lineno}" if old else None
    b = f"{path_new}:{new.lineno}" if new else None
    if a and b and a != b:
        if path_old == path_new:
            return f"{a} -> {new.lineno}"  # type: ignore[union-attr]
        return f"{a} -> {b}"
    return b or a or ""


def _side(f: ClassField | None) -> str:
    return f.render() if f is not None else "-"


def _differs(old: ClassField | None, new: ClassField | None, parts: tuple[str, ...], *,
             value_part: str) -> list[str]:
    """``default 1 -> 2``, ``annotation int -> str``: what differs between two assignments."""
    bits = []
    if old and new:
        if value_part in parts:
            bits.append(f"{value_part} {_or_none(old.value)} -> {_or_none(new.value)}")
        if "annotation" in parts:
            bits.append(f"annotation {_or_none(old.annotation)} -> {_or_none(new.annotation)}")
    return bits


def constant_json(mod: ModuleInfo, name: str, f: ClassField | None) -> dict[str, Any] | None:
    """One side of a module constant change: normalized annotation and value, and where it is."""
    if f is None:
        return None
    return {"annotation": f.annotation, "value": f.value, "path": mod.path, "line": f.lineno,
            "module": mod.name, "text": f"{name}: {f.render()}" if f.annotation is not None
            else f"{name} {f.render()}".rstrip()}


@dataclass
class ConstantChange:
    """One module-body assignment that differs between the two versions of a module."""

    kind: str  # one of CONSTANT_KINDS
    mod_old: ModuleInfo
    mod_new: ModuleInfo
    name: str
    old: ClassField | None
    new: ClassField | None
    parts: tuple[str, ...] = ()  # "value", "annotation": what differs for a changed constant

    @property
    def qualname(self) -> str:
        """``module:NAME`` (no class in between: that is how a constant reads apart from a field)."""
        return f"{self.mod_new.name}:{self.name}"

    def where(self) -> str:
        """``path:line`` of the assignment (B's; A's for a removal; both when the file moved)."""
        return _where(self.mod_old.path, self.mod_new.path, self.old, self.new)

    def side(self, which: str) -> str:
        """What one side says, ``int = 15`` or ``= 'x'`` (``-`` when the name is absent there)."""
        return _side(self.old if which == "a" else self.new)

    def detail(self) -> str:
        """One line: what differs, in words."""
        return "; ".join(_differs(self.old, self.new, self.parts, value_part="value"))

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "qualname": self.qualname, "module": self.mod_new.name,
                "name": self.name, "parts": list(self.parts),
                "old": constant_json(self.mod_old, self.name, self.old),
                "new": constant_json(self.mod_new, self.name, self.new)}


@dataclass
class FieldDiff:
    """The class fields of the classes present on both sides (compared with the functions),
    and the module constants of the modules present on both sides.

    ``classes_compared`` counts the class pairs whose fields were compared
    (classes of the changed files, matched by qualname, plus classes that
    moved to another module: see :mod:`recon.diffing.fields`);
    ``modules_compared`` the module pairs whose constants were compared
    (changed files, matched by module name; a module that moved is left out).
    :meth:`summary` and :meth:`counts` are about class fields,
    :meth:`constant_summary` and :meth:`constant_counts` about module constants.
    """

    changes: list[FieldChange]
    classes_compared: int
    focus: bool = False  # only the classes/modules owning a function of the --focus chain
    constants: list[ConstantChange] = field(default_factory=list)
    modules_compared: int = 0

    def counts(self) -> dict[str, int]:
        out = {k: 0 for k in FIELD_KINDS}
        for c in self.changes:
            out[c.kind] += 1
        out["classes_changed"] = len({c.cls_new.qualname for c in self.changes})
        out["classes_compared"] = self.classes_compared
        return out

    def summary(self) -> str:
        """``5 field changes in 2 classes (1 added, 1 removed, 3 default); 40 classes compared``."""
        c = self.counts()
        return _change_summary("field change", len(self.changes), c, FIELD_KINDS,
                               ("class", "classes"), c["classes_changed"], self.classes_compared)

    def constant_counts(self) -> dict[str, int]:
        out = {k: 0 for k in CONSTANT_KINDS}
        for c in self.constants:
            out[c.kind] += 1
        out["modules_changed"] = len({c.mod_new.name for c in self.constants})
        out["modules_compared"] = self.modules_compared
        return out

    def constant_summary(self) -> str:
        """``3 module constant changes in 2 modules (1 added, 2 value); 12 modules compared``."""
        c = self.constant_counts()
        return _change_summary("module constant change", len(self.constants), c, CONSTANT_KINDS,
                               ("module", "modules"), c["modules_changed"], self.modules_compared)

    def to_json(self) -> dict[str, Any]:
        return {"summary": self.summary(), "counts": self.counts(),
                "changes": [c.to_json() for c in self.changes], "focus": self.focus,
                "constants": {"summary": self.constant_summary(), "counts": self.constant_counts(),
                              "changes": [c.to_json() for c in self.constants]}}


@dataclass
class KeyedDiff:
    """Added / removed / changed entries of a keyed table (env vars, labels, distributions)."""

    added: dict[str, Any] = field(default_factory=dict)
    removed: dict[str, Any] = field(default_factory=dict)
    changed: dict[str, tuple[Any, Any]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)

    def to_json(self) -> dict[str, Any]:
        return {"added": self.added, "removed": self.removed,
                "changed": {k: {"old": a, "new": b} for k, (a, b) in self.changed.items()}}


@dataclass
class ImageDiff:
    """The image section: config fields that differ (env and labels key by key)."""

    env: KeyedDiff
    labels: KeyedDiff
    fields: dict[str, tuple[Any, Any]]  # entrypoint, cmd, working_dir, user, python, ... (old, new)
    note: str | None = None  # e.g. "neither side is an image"
    #: the image's layers (diff ids) only A has (removed) or only B has (added): "layer N"
    layers: KeyedDiff = field(default_factory=KeyedDiff)

    def __bool__(self) -> bool:
        return bool(self.env or self.labels or self.fields or self.layers)

    def to_json(self) -> dict[str, Any]:
        return {"env": self.env.to_json(), "labels": self.labels.to_json(),
                "layers": self.layers.to_json(),
                "fields": {k: {"old": a, "new": b} for k, (a, b) in self.fields.items()},
                "note": self.note}


@dataclass
class FileDiff:
    """The files section: the package's files by sha256 (symlinks by target)."""

    added: list[str]
    removed: list[str]
    changed: list[str]
    unchanged: int
    sizes: dict[str, tuple[int | None, int | None]]  # path -> (old size, new size)

    def to_json(self) -> dict[str, Any]:
        return {"added": self.added, "removed": self.removed, "changed": self.changed,
                "unchanged": self.unchanged,
                "counts": {"added": len(self.added), "removed": len(self.removed),
                           "changed": len(self.changed), "unchanged": self.unchanged}}


@dataclass
class Side:
    """Which snapshot one side is, for report headers."""

    label: str
    name: str
    path: str
    ref: str | None
    digest: str | None
    package: str
    version: str | None

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "name": self.name, "path": self.path, "ref": self.ref,
                "digest": self.digest, "package": self.package, "version": self.version}


@dataclass
class DiffResult:
    """Everything ``recon diff A B`` found; sections not asked for are None."""

    a: Side
    b: Side
    sections: tuple[str, ...]
    image: ImageDiff | None = None
    distributions: KeyedDiff | None = None
    files: FileDiff | None = None
    functions: FunctionDiff | None = None
    #: Class-body fields (defaults, annotations) and module constants: computed with the
    #: functions section.
    fields: FieldDiff | None = None
    seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"a": self.a.to_json(), "b": self.b.to_json(), "sections": list(self.sections),
                "image": self.image.to_json() if self.image is not None else None,
                "distributions": self.distributions.to_json() if self.distributions is not None
                else None,
                "files": self.files.to_json() if self.files is not None else None,
                "functions": self.functions.to_json() if self.functions is not None else None,
                "fields": self.fields.to_json() if self.fields is not None else None,
                "seconds": round(self.seconds, 3),
                "timings": {k: round(v, 3) for k, v in self.timings.items()}}
