"""``make_hotfix``: from a snapshot and a fix (a release, or a patch) to a proven, mountable file.

The order is the order of the guarantees: everything that can refuse runs
before anything is written (which pieces, one file, Python source, the
closure); the patched snapshot is then written into recon's cache and the
proof runs on it; only when the proof passes is the hotfix folder written,
staged and renamed into place.
"""

from __future__ import annotations

import difflib
import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import progress
from ..diffing.sides import open_side
from ..errors import ReconError
from ..index.models import ClassInfo, split_qualname
from ..paste import check
from ..snapshots.model import Snapshot
from . import proof as proving
from .derived import patched_snapshot
from .model import (
    CHANGED,
    COMPILED,
    MISSING,
    NEW_IMPORT,
    HotfixRefused,
    HotfixResult,
    NeedRow,
    Piece,
    Proof,
)
from .mount import mount_plan
from .needs import Context, closure
from .patchfile import apply_patch, check_files, parse_patch, read_patch
from .pieces import changed_definitions, same_code, span
from .sides import Side, module_file, overlay, resolve_piece
from .splice import lines_of, outside_identical, parse_file, parse_piece, splice


@dataclass
class Plan:
    """What is about to be patched: one file of the image, its bytes before and after."""

    module: str
    rel: str
    original: bytes
    patched: bytes
    named: list[str]  # the pieces asked for (empty with --patch: the patch decides)
    patch: dict[str, Any] | None = None


def make_hotfix(snapshot: str | Path | Snapshot, *, fixed_in: str | Path | Snapshot | None = None,
                functions: list[str] | tuple[str, ...] = (), patch: str | Path | None = None,
                recipe: str | None = None, config: Any = None, flags: Any = None,
                options: dict[str, Any] | None = None, site: str | None = None,
                python: str | None = None, package: str | None = None,
                output: str | Path | None = None, force: bool = False) -> HotfixResult:
    """Patch one file of ``snapshot``, prove it, and (with ``output``) write the hotfix folder.

    ``functions`` are qualnames taken from ``fixed_in`` (a release or
    snapshot with the fix); ``patch`` is a unified diff instead. ``recipe``
    (with ``config``/``flags``/``options``) is run before and after as the
    behavioural proof. Raises :class:`HotfixRefused` when the change is not a
    one-file, named-pieces, pure-Python fix, and ReconError when a proof step fails.
    """
    start = time.perf_counter()
    if bool(functions) == (patch is not None):
        raise ReconError("give either --function QUALNAME (with --from) or --patch FILE.diff")
    if functions and fixed_in is None:
        raise ReconError("--function takes the fixed version from a release: add --from SOURCE")
    patch_data = read_patch(Path(patch)) if patch is not None else None
    if output is not None:  # the line recon prints holds its absolute path: refuse before any work
        check(str(Path(output).resolve()), "the hotfix folder (-o)")
    image_snap = open_side(snapshot, package=package)
    fixed_snap = open_side(fixed_in, package=package) if fixed_in is not None else None
    if fixed_snap is not None and fixed_snap.package != image_snap.package:
        raise ReconError(f"--from holds {fixed_snap.package}, the snapshot {image_snap.package}")
    with progress.step("indexing the image's release and the fix's (cached per file)"):
        image = Side.load(image_snap)
        fixed = Side.load(fixed_snap) if fixed_snap is not None else None
    plan = _from_functions(image, fixed, list(functions)) if functions else \
        _from_patch(image, str(patch), patch_data or b"")
    patched = overlay(image, plan.rel, plan.patched, f"{image.label} (patched)")
    pieces = _pieces(plan, image, patched, fixed)
    _same_calls(image, patched, pieces)
    rows = closure(Context(patched, fixed or patched, image, plan.module, plan.rel),
                   [p.qualname for p in pieces])
    _refuse_on(rows, image.label, pieces)
    mount = _mount(plan, image, pieces, output, site, python)  # refuses before any proof
    result = _prove_and_describe(plan, image, patched, fixed, pieces, rows, mount, recipe=recipe,
                                 config=config, flags=flags, options=options, fixed_ref=fixed_in)
    result.seconds = time.perf_counter() - start
    if output is not None:
        from .bundle import write_hotfix

        result.output = str(write_hotfix(result, Path(output), force=force))
    return result


# -- what to patch ---------------------------------------------------------------------------
def _from_functions(image: Side, fixed: Side | None, names: list[str]) -> Plan:
    assert fixed is not None
    qualnames = _outermost(list(dict.fromkeys(resolve_piece(n, [fixed, image]) for n in names)))
    modules = sorted({split_qualname(q)[0] for q in qualnames})
    if len(modules) > 1:
        raise HotfixRefused("scope", f"the named pieces live in {len(modules)} files ("
                            + ", ".join(modules) + "): a hotfix is one file; make one per file")
    module = modules[0]
    rel_fixed = module_file(fixed, module, qualnames[0])
    rel = module_file(image, module, qualnames[0])
    for q in qualnames:
        _check_named(image, fixed, q)
    original = image.snapshot.read_bytes(rel)
    fixed_lines = lines_of(fixed.snapshot.read_bytes(rel_fixed))
    tree = parse_file(original, f"{rel} of {image.label}")
    replacements = {}
    for q in qualnames:
        info = fixed.definition(q)
        assert info is not None
        segment = b"".join(fixed_lines[info.lineno - 1: info.end_lineno])
        replacements[split_qualname(q)[1]] = parse_piece(segment, info.col > 0,
                                                         f"{q} of {fixed.label}")
    return Plan(module, rel, original, splice(tree, replacements), qualnames)


def _outermost(qualnames: list[str]) -> list[str]:
    """Drop a named method when its class is named too (the class brings it)."""
    def inside(q: str, other: str) -> bool:
        return split_qualname(q)[0] == split_qualname(other)[0] and \
            split_qualname(q)[1].startswith(split_qualname(other)[1] + ".")
    return [q for q in qualnames if not any(inside(q, o) for o in qualnames if o != q)]


def _check_named(image: Side, fixed: Side, q: str) -> None:
    if "<locals>" in q:
        raise ReconError(f"{q} is nested inside a function: name the enclosing function")
    if fixed.definition(q) is None:
        raise ReconError(f"{q} is not in {fixed.label}, so it cannot be taken from there")
    if image.definition(q) is None:
        owner = split_qualname(q)[1].rpartition(".")[0]
        hint = f"; name the class {owner} to take it whole" if owner else ""
        raise HotfixRefused("scope", f"{q} is not in {image.label}: adding a definition is more "
                                     f"than replacing the named pieces{hint}")
    if same_code(image, fixed, q):
        raise ReconError(f"{q} already has the code of {fixed.label} in {image.label} (comments "
                         "and formatting aside): nothing to patch")


def _from_patch(image: Side, path: str, data: bytes) -> Plan:
    patch, rel = check_files(image.snapshot, parse_patch(data))
    module = image.index.by_path.get(rel)
    if module is None:
        raise ReconError(f"{rel} is not an indexed Python module of {image.label}")
    module_file(image, module, module)
    original = image.snapshot.read_bytes(rel)
    patched = apply_patch(original, patch, f"{rel} of {image.label}")
    info = {"path": path, "sha256": hashlib.sha256(data).hexdigest(), "file": patch.path}
    return Plan(module, rel, original, patched, [], info)


# -- the pieces and their spans ----------------------------------------------------------------
def _pieces(plan: Plan, image: Side, patched: Side, fixed: Side | None) -> list[Piece]:
    """The replaced pieces, after checking that nothing else in the file changed."""
    changes = changed_definitions(image, patched, plan.module)
    extra = changes.added + changes.removed
    if extra:
        what = ", ".join(f"adds {q}" for q in changes.added) + ", ".join(
            f"removes {q}" for q in changes.removed)
        raise HotfixRefused("scope", f"the change {what} in {plan.rel}: more than replacing "
                                     "existing definitions (a new method: take its class whole)")
    qualnames = plan.named or changes.changed
    if not qualnames:
        raise ReconError(f"the patch changes no definition's code in {plan.rel} (comments or "
                         "formatting only)")
    stray = [q for q in changes.changed if not any(q == n or q.startswith(n + ".") for n in qualnames)]
    spans = [(span(image, q), span(patched, q)) for q in qualnames]
    if stray or not outside_identical(plan.original, plan.patched, spans):
        raise HotfixRefused("scope", _outside_message(plan, qualnames, spans, stray))
    out = []
    for q, (before, after) in zip(qualnames, spans, strict=True):
        info = patched.definition(q)
        kind = "class" if isinstance(info, ClassInfo) else getattr(info, "kind", "function")
        fixed_info = fixed.definition(q) if fixed is not None and plan.named else None
        out.append(Piece(q, kind, before, after, f"{fixed_info.path}:{fixed_info.def_lineno}"
                         if fixed_info is not None else None))
    return out


def _outside_message(plan: Plan, qualnames: list[str],
                     spans: list[tuple[tuple[int, int], tuple[int, int]]], stray: list[str]) -> str:
    if stray:
        return f"the change also changes {', '.join(stray)}: more than the named pieces"
    inside = {n for (a, b), _ in spans for n in range(a, b + 1)}
    old, new = lines_of(plan.original), lines_of(plan.patched)
    touched = sorted({n + 1 for tag, i1, i2, _j1, _j2 in
                      difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes()
                      if tag != "equal" for n in range(i1, max(i2, i1 + 1))} - inside)
    shown = ", ".join(str(n) for n in touched[:8]) + (" ..." if len(touched) > 8 else "")
    pieces = ", ".join(q.partition(":")[2] for q in qualnames)
    return (f"the change also edits lines outside the definitions it replaces ({pieces}): "
            f"{plan.rel} line {shown} (module-level code such as imports, other definitions' "
            "comments or layout): more than the named pieces")


def _same_calls(image: Side, patched: Side, pieces: list[Piece]) -> None:
    """Refuse a signature change that breaks a caller (griffe's rules, as ``recon diff`` names
    them): the image's callers are not among the replaced pieces, so they would break."""
    from ..diffing.functions import compare

    broken = []
    for p in pieces:
        names = [p.qualname] if p.kind != "class" else [
            f"{p.qualname}.{m}" for m in image.index.classes[p.qualname].methods]
        for q in names:
            old, new = image.index.functions.get(q), patched.index.functions.get(q)
            if old is None or new is None:
                continue
            change = compare(image.index, old, patched.index, new)
            broken += [f"{q.partition(':')[2]}: {s.describe()}" for s in change.signature
                       if s.breaking]
    if broken:
        raise HotfixRefused("scope", "the change alters how the image's code calls it ("
                            + "; ".join(broken) + "): its callers would have to change too")


def _refuse_on(rows: list[NeedRow], image_label: str, pieces: list[Piece]) -> None:
    """One refusal line naming every name the new code needs that the patched image lacks."""
    names = ", ".join(p.qualname.partition(":")[2] for p in pieces)
    groups = [
        ("compiled", [r for r in rows if r.status == COMPILED],
         f"the new {names} reaches compiled code"),
        ("names", [r for r in rows if r.status == MISSING],
         f"the new {names} needs names {image_label} does not have"),
        ("scope", [r for r in rows if r.status == NEW_IMPORT],
         f"the new {names} needs module-level names the image's file does not bind (new "
         "imports are more than the named pieces)"),
    ]
    found = [(rule, bad, text) for rule, bad, text in groups if bad]
    if not found:
        return
    parts = [f"{text}: " + "; ".join(r.sentence() for r in bad) for _rule, bad, text in found]
    raise HotfixRefused(found[0][0], " | also ".join(parts))


def _mount(plan: Plan, image: Side, pieces: list[Piece], output: str | Path | None,
           site: str | None, python: str | None) -> dict[str, Any]:
    """The mount, verify and rollback lines; a value they cannot quote is refused here."""
    return mount_plan(image.snapshot, rel=plan.rel, module=plan.module,
                      sha256=hashlib.sha256(plan.patched).hexdigest(),
                      size_changed=len(plan.patched) != len(plan.original),
                      pieces={split_qualname(p.qualname)[1]: p.patched_lines[0] for p in pieces},
                      folder=Path(output).name if output is not None else "HOTFIX", site=site,
                      python=python)


# -- proof and description ---------------------------------------------------------------------
def _prove_and_describe(plan: Plan, image: Side, patched: Side, fixed: Side | None,
                        pieces: list[Piece], rows: list[NeedRow], mount: dict[str, Any], *,
                        recipe: str | None, config: Any, flags: Any,
                        options: dict[str, Any] | None, fixed_ref: Any) -> HotfixResult:
    sha = hashlib.sha256(plan.patched).hexdigest()
    qualnames = [p.qualname for p in pieces]
    with progress.step("writing the patched snapshot (once per patched file, in recon's cache)"):
        snap = patched_snapshot(image.snapshot, plan.rel, plan.patched,
                                {"file": plan.rel, "pieces": qualnames,
                                 "fixed_in": fixed.snapshot.name if fixed else None,
                                 "patch": plan.patch})
    line_of = {split_qualname(p.qualname)[1]: p.patched_lines[0] for p in pieces}
    reference = fixed if fixed is not None and plan.named else patched
    label = reference.label if reference is fixed else "the patch as applied"
    proof = Proof(proving.reindexed(snap, plan.rel, qualnames, reference, label))
    proof.verify = proving.run_verify(snap, plan.module, sha, line_of)
    if fixed is not None:
        proof.has = _has(snap, image, fixed, pieces, plan)
    if recipe is not None:
        with progress.step(f"running {recipe} on the image's release and on the patched one"):
            proof.recipe = proving.recipe_proof(recipe, image.snapshot, snap, config=config,
                                                flags=flags, options=options)
        if not proof.recipe.errors(proof.recipe.before):
            proof.warnings.append(f"{recipe} reports no error on the image either: these inputs "
                                  "do not show the bug, so the recipe proves no change")
    proof.warnings += [f"{r.name} ({r.target}) differs between the two releases: the patched "
                       "code uses the image's version" for r in rows if r.status == CHANGED]
    return HotfixResult(
        snapshot=_describe(image.snapshot),
        fixed_in={**_describe(fixed.snapshot), "ref": fixed_ref if isinstance(fixed_ref, str)
                  else str(fixed.snapshot.root)} if fixed else None,
        patch=plan.patch, file=plan.rel, module=plan.module, pieces=pieces,
        original=_digest(plan.original), patched={**_digest(plan.patched), "file": mount["file"]},
        diff=unified_diff(plan.original, plan.patched, plan.rel), closure=rows, proof=proof,
        mount=mount, patched_snapshot={"name": snap.name, "path": str(snap.root)},
        patched_bytes=plan.patched)


def _has(snap: Snapshot, image: Side, fixed: Side, pieces: list[Piece], plan: Plan) -> list[dict]:
    """``recon has`` for every function the fix changed (the methods of a replaced class)."""
    functions = []
    for p in pieces:
        if p.kind != "class":
            functions.append(p.qualname)
            continue
        methods = fixed.index.classes[p.qualname].methods
        functions += [f"{p.qualname}.{m}" for m in methods
                      if image.definition(f"{p.qualname}.{m}") is not None
                      and not same_code(image, fixed, f"{p.qualname}.{m}")]
    if not plan.named:  # --patch with --from: a backport may differ; "no" is the failure
        return _has_lenient(snap, image, fixed, functions)
    return proving.has_checks(snap, image.snapshot, fixed.snapshot, fixed.label, functions)


def _has_lenient(snap: Snapshot, image: Side, fixed: Side, functions: list[str]) -> list[dict]:
    from ..diffing.has import has_fix

    out = []
    for q in functions:
        res = has_fix(q, str(snap.root), fixed_in=str(fixed.snapshot.root),
                      unfixed=str(image.snapshot.root))
        if res.answer == "no":
            raise ReconError(f"proof failed: the patch does not bring {fixed.label}'s fix of {q}: "
                             f"{res.why}")
        out.append({"qualname": q, "answer": res.answer, "why": res.why, "fixed": fixed.label})
    return out


def _describe(snap: Snapshot) -> dict[str, Any]:
    src = snap.manifest.source
    return {"name": snap.name, "label": f"{snap.package} {snap.version}", "package": snap.package,
            "version": snap.version, "source": src.get("ref"), "digest": src.get("digest"),
            "path": str(snap.root)}


def _digest(data: bytes) -> dict[str, Any]:
    return {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}


def unified_diff(original: bytes, patched: bytes, rel: str) -> str:
    """``--- a/REL`` / ``+++ b/REL`` and hunks: applies with ``patch -p1`` in the site folder."""
    def text(data: bytes) -> list[str]:
        lines = [ln.decode("utf-8", "surrogateescape") for ln in lines_of(data)]
        if lines and not lines[-1].endswith(("\n", "\r")):
            lines[-1] += "\n\\ No newline at end of file\n"
        return lines

    return "".join(difflib.unified_diff(text(original), text(patched), f"a/{rel}", f"b/{rel}"))
