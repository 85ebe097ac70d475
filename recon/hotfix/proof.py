"""The proof, run on the patched snapshot before anything is handed out.

1. **re-indexed**: the patched file is indexed from the patched snapshot on disk
   (not the in-memory overlay) and each piece's normalized AST is the fix's;
2. **has**: :func:`recon.diffing.has.has_fix` (what ``recon has QUALNAME --in PATCHED
   --fixed-in SOURCE`` runs) answers yes for each piece, with the image's
   release as the unfixed side;
3. **verify**: ``verify_hotfix.py`` itself, run by this Python on the patched
   snapshot's file (standard library only, ``-S``: no installed copy of the
   engine can answer instead), finds the file, its sha256, fresh bytecode and
   every piece at its patched line: the same check that runs in the container;
4. **recipe** (optional): the recipe that shows the bug, on the image's
   snapshot and on the patched one; an error after the patch refuses the hotfix.

A failed step raises :class:`~recon.errors.ReconError`: the hotfix folder is
only written after all of them pass.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..errors import ReconError
from ..index import load_index
from ..snapshots.model import Snapshot
from .model import RecipeProof
from .mount import VERIFY, verify_args
from .pieces import same_code
from .sides import Side

VERIFY_SOURCE = Path(__file__).with_name(VERIFY)


def reindexed(patched: Snapshot, rel: str, pieces: list[str], reference: Side,
              label: str) -> dict[str, Any]:
    """Per piece: the patched snapshot's code is ``reference``'s (the fix, or the patch applied)."""
    side = Side(patched, load_index(patched, paths=[rel], workers=0), "patched")
    out = {}
    for q in pieces:
        info = side.definition(q)
        if info is None or not same_code(side, reference, q):
            raise ReconError(f"proof failed: after re-indexing, {q} in the patched snapshot is not "
                             f"the code of {label}")
        out[q] = {"path": info.path, "lines": [info.lineno, info.end_lineno],
                  "ast_hash": getattr(info, "ast_hash", None),
                  "verdict": f"the same code as {label} (normalized AST)"}
    return out


def has_checks(patched: Snapshot, image: Snapshot, fixed: Snapshot, fixed_label: str,
               qualnames: list[str]) -> list[dict[str, Any]]:
    """``recon has Q --in PATCHED --fixed-in FIXED --unfixed IMAGE`` for each function; all yes."""
    from ..diffing.has import has_fix

    out = []
    for q in qualnames:
        res = has_fix(q, str(patched.root), fixed_in=str(fixed.root), unfixed=str(image.root))
        if res.answer != "yes":
            raise ReconError(f"proof failed: recon has {q} on the patched snapshot answers "
                             f"{res.answer}: {res.why}")
        out.append({"qualname": q, "answer": res.answer, "why": res.why, "fixed": fixed_label})
    return out


def run_verify(patched: Snapshot, module: str, sha256: str, pieces: dict[str, int]) -> list[dict]:
    """``verify_hotfix.py`` on the patched snapshot, in a fresh interpreter without site-packages."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PYTHON")},
           "PYTHONPATH": str(patched.src), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([sys.executable, "-S", str(VERIFY_SOURCE),
                           *verify_args(module, sha256, pieces), "--json"],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    try:
        report = json.loads(proc.stdout)
    except ValueError as err:
        raise ReconError(f"proof failed: {VERIFY} did not answer ({proc.stderr.strip()[-200:]})") \
            from err
    if not report.get("ok"):
        bad = next(c for c in report["checks"] if not c["ok"])
        raise ReconError(f"proof failed: {VERIFY} on the patched snapshot: {bad['check']}: "
                         f"{bad['detail']}")
    return report["checks"]


def recipe_proof(name: str, image: Snapshot, patched: Snapshot, *, config: Any = None,
                 flags: Any = None, options: dict[str, Any] | None = None) -> RecipeProof:
    """The recipe on the image's release and on the patched one; an error after refuses."""
    from ..recipes import run_recipe

    before = run_recipe(name, image, config=config, flags=flags, options=dict(options or {}))
    after = run_recipe(name, patched, config=config, flags=flags, options=dict(options or {}))
    for side, res in (("image", before), ("patched snapshot", after)):
        if not res.applicable:
            raise ReconError(f"recipe {name} does not apply to the {side}: {res.reason}")
    proof = RecipeProof(name, dict(options or {}), before.to_json(), after.to_json())
    errors = RecipeProof.errors(proof.after)
    if errors:
        raise ReconError(f"proof failed: recipe {name} still reports the bug on the patched "
                         f"snapshot: {errors[0]}")
    return proof
