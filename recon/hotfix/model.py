"""The plain data a hotfix run produces: pieces, the closure rows, the proof, the result.

Everything here converts to JSON with identifier keys (``--json``, ``hotfix.json``)
and holds no open files or indexes, so a result can be kept and printed later.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import ReconError

#: Closure statuses: what the patched file sees for one name the new code reads.
SAME, CHANGED, MISSING, NEW_IMPORT, COMPILED, UNKNOWN, LOCAL = (
    "same", "changed", "missing", "new-import", "compiled", "unknown", "in-file")


class HotfixRefused(ReconError):
    """The change is not a one-file, named-pieces, pure-Python hotfix; ``rule`` says which rule.

    ``rule`` is ``names`` (the new code needs names the image's release does
    not have), ``compiled`` (the change touches compiled code or a file that
    is not Python source) or ``scope`` (more than the named pieces would
    change: another file, module-level lines, a new definition).
    """

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(f"refused ({rule}): {message}")
        self.rule = rule


@dataclass
class Piece:
    """One function, method or class replaced in the image's file."""

    qualname: str
    kind: str  # function | method | ... | class
    image_lines: tuple[int, int]  # first (decorator) line and last line in the image's file
    patched_lines: tuple[int, int] = (0, 0)  # the same in the patched file
    fixed_location: str | None = None  # path:line in the release with the fix (None for --patch)

    def to_json(self) -> dict[str, Any]:
        return {"qualname": self.qualname, "kind": self.kind,
                "image_lines": list(self.image_lines), "patched_lines": list(self.patched_lines),
                "fixed_location": self.fixed_location}


@dataclass
class NeedRow:
    """One name the new code reads, and what it is in the patched image and in the fix."""

    name: str  # what the code writes: BlockTables, self.cache_config.mamba_block_size
    target: str  # the qualname or dotted name it stands for
    status: str  # one of the statuses above
    used_at: str  # file:line in the new code
    image: str | None = None  # where the patched image defines it
    fixed: str | None = None  # where the release with the fix defines it
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def sentence(self) -> str:
        """One clause for a refusal line."""
        where = f" (used at {self.used_at}" + (f"; the fix's release has it at {self.fixed}"
                                                if self.fixed else "") + ")"
        return f"{self.target}{where}" + (f": {self.detail}" if self.detail else "")


@dataclass
class RecipeProof:
    """The recipe that shows the bug, run on the image's release and on the patched one."""

    recipe: str
    options: dict[str, Any]
    before: dict[str, Any]  # RecipeResult.to_json() on the image's snapshot
    after: dict[str, Any]  # ... on the patched snapshot

    @staticmethod
    def errors(result: dict[str, Any]) -> list[str]:
        return [f["text"] for f in result.get("findings", []) if f.get("level") == "error"]

    @property
    def fixed(self) -> bool:
        """True when the recipe reports an error before the patch and none after."""
        return bool(self.errors(self.before)) and not self.errors(self.after)

    def to_json(self) -> dict[str, Any]:
        return {"recipe": self.recipe, "options": self.options,
                "errors_before": self.errors(self.before), "errors_after": self.errors(self.after),
                "fixed": self.fixed, "before": self.before, "after": self.after}


@dataclass
class Proof:
    """What was checked on the patched snapshot."""

    reindexed: dict[str, Any]  # per piece: ast hash in the patched file vs the fix
    verify: list[dict[str, Any]] = field(default_factory=list)  # verify_hotfix.py's checks
    has: list[dict[str, Any]] = field(default_factory=list)  # recon has, per piece
    recipe: RecipeProof | None = None
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"reindexed": self.reindexed, "verify": self.verify, "has": self.has,
                "recipe": self.recipe.to_json() if self.recipe else None,
                "warnings": self.warnings}


@dataclass
class HotfixResult:
    """Everything ``recon hotfix`` found, built and checked (see :func:`recon.hotfix.make_hotfix`)."""

    snapshot: dict[str, Any]
    fixed_in: dict[str, Any] | None
    patch: dict[str, Any] | None
    file: str
    module: str
    pieces: list[Piece]
    original: dict[str, Any]
    patched: dict[str, Any]
    diff: str
    closure: list[NeedRow]
    proof: Proof
    mount: dict[str, Any]
    patched_snapshot: dict[str, str]
    output: str | None = None
    seconds: float = 0.0
    patched_bytes: bytes = field(default=b"", repr=False)

    def to_json(self) -> dict[str, Any]:
        return {"output": self.output, "snapshot": self.snapshot, "fixed_in": self.fixed_in,
                "patch": self.patch, "file": self.file, "module": self.module,
                "pieces": [p.to_json() for p in self.pieces], "original": self.original,
                "patched": self.patched, "diff": self.diff,
                "closure": [r.to_json() for r in self.closure], "proof": self.proof.to_json(),
                "mount": self.mount, "patched_snapshot": self.patched_snapshot,
                "seconds": round(self.seconds, 3)}
