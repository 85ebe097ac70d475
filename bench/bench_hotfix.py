"""Time ``recon hotfix`` on the field case against the hand way (``patch``), in the same run.

By hand, the upstream change of ``mamba_hybrid.py`` (vLLM 0.29.0 -> 0.32.0, ``diff -u``) is
applied with ``patch``, which says only whether the hunks fit the file. ``recon hotfix``
takes the one method from 0.32.0, checks the closure and proves it (re-index, ``recon has``,
``verify_hotfix.py``, optionally the recipe before and after). The whole upstream change
given to ``recon hotfix --patch`` is refused, with the reason, where ``patch`` applies it.

It also prices the splice: libcst (parse the image's file, replace the node, print it)
against replacing the index's line range with bytes, on the field case's file and on
vLLM's largest module.

    python bench/bench_hotfix.py [--runs 3] [--recipe]
"""

from __future__ import annotations

import argparse
import difflib
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from recon.errors import ReconError
from recon.hotfix import make_hotfix
from recon.hotfix.sides import Side
from recon.hotfix.splice import lines_of, parse_file, parse_piece, splice
from recon.paths import cache_dir
from recon.snapshots.model import Snapshot
from recon.snapshots.take import take_snapshot

REL = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"
FIELD = {"prefix_tokens": 101376, "cache_block_size": 16, "mamba_block_size": 1152,
         "max_model_len": 262144}


def release(spec: str) -> Snapshot:
    """The test suite's cached snapshot of a PyPI release (made once)."""
    base = cache_dir() / "test-snapshots"
    name = spec.replace("==", "_")
    if (base / name / "manifest.json").is_file():
        return Snapshot.open(base / name)
    return take_snapshot(f"pip:{spec}", name=name, out=base, force=True)


def best(fn, runs: int) -> tuple[float, object]:  # noqa: ANN001
    out, times = None, []
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def by_hand(old: Snapshot, new: Snapshot, work: Path) -> tuple[float, str]:
    """``patch`` with the whole upstream diff of the file: exit status and its own words."""
    diff = "".join(difflib.unified_diff(old.read_text(REL).splitlines(keepends=True),
                                        new.read_text(REL).splitlines(keepends=True),
                                        f"a/{REL}", f"b/{REL}"))
    (work / "whole.diff").write_text(diff)
    target = work / "site" / REL
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(old.read_bytes(REL))
    t0 = time.perf_counter()
    res = subprocess.run(["patch", "-p1", "-d", str(work / "site"), "-i", str(work / "whole.diff")],
                         capture_output=True, text=True, check=False)
    return time.perf_counter() - t0, f"exit {res.returncode}: {res.stdout.strip()}"


def splice_costs(old: Side, new: Side, rel: str, qualname: str, runs: int) -> tuple[float, float]:
    """(libcst parse + splice + print, line-range replacement) for one method, best of runs."""
    data, fixed = old.snapshot.read_bytes(rel), lines_of(new.snapshot.read_bytes(rel))
    info_old, info_new = old.definition(qualname), new.definition(qualname)
    segment = b"".join(fixed[info_new.lineno - 1: info_new.end_lineno])  # type: ignore[union-attr]

    def with_libcst() -> bytes:
        piece = parse_piece(segment, info_new.col > 0, qualname)  # type: ignore[union-attr]
        return splice(parse_file(data, rel), {qualname.partition(":")[2]: piece})

    def by_lines() -> bytes:
        lines = lines_of(data)
        return b"".join([*lines[:info_old.lineno - 1], segment, *lines[info_old.end_lineno:]])  # type: ignore[union-attr]

    return best(with_libcst, runs)[0], best(by_lines, runs)[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--recipe", action="store_true", help="also time the run with the recipe")
    args = ap.parse_args()
    old, new = release("vllm==0.29.0"), release("vllm==0.32.0")
    work = Path(tempfile.mkdtemp(prefix="bench-hotfix-"))
    try:
        hand_s, hand = by_hand(old, new, work)
        print(f"| patch -p1 (whole upstream diff of the file) | {hand_s:.3f} s | {hand} |")
        t, res = best(lambda: make_hotfix(old, fixed_in=new, functions=[
            "MambaHybridModelState.add_request"]), args.runs)
        print(f"| recon hotfix --function (warm) | {t:.2f} s | {len(res.closure)} names "  # type: ignore[attr-defined]
              "resolved, has yes, verify ok |")
        if args.recipe:
            t, res = best(lambda: make_hotfix(old, fixed_in=new, functions=[
                "MambaHybridModelState.add_request"], recipe="vllm-mamba-align-column",
                options=dict(FIELD)), 1)
            rec = res.proof.recipe  # type: ignore[attr-defined]
            print(f"| ... with --recipe vllm-mamba-align-column | {t:.2f} s | column "
                  f"{rec.before['values']['running-state column']} -> "
                  f"{rec.after['values']['running-state column']} |")
        t0 = time.perf_counter()
        try:
            make_hotfix(old, patch=work / "whole.diff")
            refused = "accepted"
        except ReconError as err:
            refused = str(err)[:160] + "..."
        print(f"| recon hotfix --patch (whole upstream diff) | {time.perf_counter() - t0:.2f} s "
              f"| {refused} |")
        sides = Side.load(old), Side.load(new)
        big = max((p for p in new.python_files() if p.path in old.files),
                  key=lambda rec: rec.size).path
        module = sides[1].index.by_path[big]
        changed = next(q for q in sides[1].index.modules[module].functions
                       if q in sides[0].index.functions and "<locals>" not in q
                       and sides[0].index.functions[q].ast_hash != sides[1].index.functions[q].ast_hash)
        for rel, q in ((REL, f"{sides[1].index.by_path[REL]}:MambaHybridModelState.add_request"),
                       (big, changed)):
            cst_s, lines_s = splice_costs(*sides, rel, q, args.runs)
            size = len(old.read_bytes(rel)) >> 10
            print(f"| splice {q.partition(':')[2]} in {rel} ({size} KiB) | libcst {cst_s:.3f} s | "
                  f"line range {lines_s * 1e3:.2f} ms |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
