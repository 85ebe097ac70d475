"""Benchmark ``recon diff`` and ``recon bisect`` against ``git diff --stat`` and griffe.

Run::

    python bench/bench_diff.py                      # vLLM 0.32.0 vs 0.33.0, from the test snapshots
    python bench/bench_diff.py --runs 5 --markdown docs/benchmarks/diff.md

What it measures, every run in a fresh process (wall time, median of ``--runs``):

* ``git diff --no-index --stat`` of the two ``src/`` trees: the text-level baseline;
* ``recon diff -s functions`` as a library call (time inside the process,
  imports excluded) cold (an empty recon cache, so every changed file is
  parsed) and warm (the per-file index cache filled), and the whole CLI
  command warm (interpreter start, imports and table output included);
* griffe (``griffe.load`` of both trees + ``find_breaking_changes``, what
  ``griffe check`` runs; griffe ignores bodies), once, with a time limit,
  and how many of griffe's parameter findings recon reports with the same
  name on the same parameter;
* ``recon bisect`` of ``MambaHybridModelState.add_request`` over six cached
  releases: the CLI with the PyPI range ``vllm==0.28.0..0.33.0`` (which
  asks pip for the release list) and the library call on the same six
  snapshots;
* report writing: the whole ``recon diff A B`` command with and without
  ``--html`` and ``--markdown`` (default ``--limit``), warm (the snapshots and
  their index cached, one untimed run first); writing is the difference of
  the two medians, and the two files' sizes are given (``--reports-only``
  times this alone).

Targets (issue 7): warm under 1.5x git's time, cold under 10 s, bisect
under 5 s; report writing under 5 s, HTML under 3 MB, Markdown under
1.5 MB. Never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from recon.acquire.writer import write_text  # noqa: E402
from recon.paths import cache_dir  # noqa: E402

ADD_REQUEST = "vllm.v1.worker.gpu.model_states.mamba_hybrid:MambaHybridModelState.add_request"
SIX = ("0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0")


def wall(cmd: list[str], *, env: dict[str, str] | None = None, timeout: float = 600) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                   timeout=timeout, cwd=ROOT, check=False)
    return time.perf_counter() - start


def py(code: str, *, env: dict[str, str] | None = None, timeout: float = 900) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter; it prints one JSON line last."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


DIFF_CODE = """
import json, time
from recon.diffing import diff
t = time.perf_counter()
r = diff({a!r}, {b!r}, sections=["functions"])
s = time.perf_counter() - t
print(json.dumps({{"seconds": s, "timings": r.timings, "summary": r.functions.summary(),
                  "counts": r.functions.counts(), "files": r.functions.files_compared}}))
"""

BISECT_CODE = """
import json, time
from recon.diffing.bisect import bisect
t = time.perf_counter()
r = bisect({q!r}, {refs!r})
print(json.dumps({{"seconds": time.perf_counter() - t, "verdict": r.verdict()}}))
"""

GRIFFE_CODE = """
import json, time, griffe
t = time.perf_counter()
kw = dict(resolve_aliases=False, allow_inspection=False)
old = griffe.load("vllm", search_paths=[{a!r}], **kw)
new = griffe.load("vllm", search_paths=[{b!r}], **kw)
t1 = time.perf_counter()
found = list(griffe.find_breaking_changes(old, new))
t2 = time.perf_counter()
rows = []
for br in found:
    obj = br.obj
    param = getattr(br.old_value, "name", None) or getattr(br.new_value, "name", None)
    rows.append([obj.module.path, obj.path[len(obj.module.path) + 1:], br.kind.name, param])
print(json.dumps({{"load": t1 - t, "check": t2 - t1, "seconds": t2 - t, "rows": rows}}))
"""


def snapshots(versions: tuple[str, ...]) -> dict[str, Path]:
    """The shared test snapshots (what ``tests/conftest.py`` makes), made here if missing."""
    from recon.snapshots.model import Snapshot
    from recon.snapshots.take import take_snapshot

    base = cache_dir() / "test-snapshots"
    out = {}
    for v in versions:
        dest = base / f"vllm_{v}"
        if not (dest / "manifest.json").is_file():
            take_snapshot(f"pip:vllm=={v}", name=dest.name, out=base, force=True)
        out[v] = Snapshot.open(dest).root
    return out


def med(xs: list[float]) -> float:
    return round(statistics.median(xs), 3)


def timed(cmd: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, the command's processes together) of one run.

    On a machine other jobs share, CPU time barely moves while wall time doubles.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    seconds = wall(cmd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return seconds, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def time_reports(a: Path, b: Path, runs: int) -> dict[str, Any]:
    """``recon diff A B`` with and without ``--html``/``--markdown``, and the reports' sizes.

    Both commands run the same diff, so the difference of their medians is
    what the reports cost: filling every function's diff, rendering, writing.
    The runs alternate, so a neighbour's load falls on both alike.
    """
    plain = [sys.executable, "-m", "recon", "diff", str(a), str(b)]
    with tempfile.TemporaryDirectory(prefix="recon-report-") as tmp:
        page, md = Path(tmp) / "d.html", Path(tmp) / "d.md"
        both = [*plain, "--html", str(page), "--markdown", str(md)]
        wall(both)  # fills the index cache; the files prove the command worked
        sections = page.read_text().count('<pre class="diff">')
        pairs = [(timed(plain), timed(both)) for _ in range(runs)]
        out = {"html_mb": round(page.stat().st_size / 1e6, 2),
               "markdown_mb": round(md.stat().st_size / 1e6, 2), "sections": sections}
    for i, key in enumerate(("", "_cpu")):
        plain_s, both_s = med([p[i] for p, _ in pairs]), med([r[i] for _, r in pairs])
        out |= {f"plain{key}": plain_s, f"with_reports{key}": both_s,
                f"writing{key}": round(both_s - plain_s, 3)}
    return out


def compare_with_griffe(rows: list[list[Any]], a: Path, b: Path) -> dict[str, Any]:
    """How many of griffe's parameter findings recon names the same way on the same parameter."""
    from recon.diffing import diff
    from recon.index import load_index

    res = diff(a, b, sections=["functions"])
    assert res.functions is not None
    recon_sig: dict[str, set[tuple[str, str | None]]] = {}
    for c in res.functions.changes:
        recon_sig.setdefault(c.qualname, set()).update((s.kind, s.param) for s in c.signature)
    known = set(load_index(a).functions) | set(load_index(b).functions)
    params = [r for r in rows if r[2].startswith("PARAMETER_")]
    same = missing_fn = other = 0
    examples: list[str] = []
    synth: list[str] = []
    for module, local, kind, param in params:
        q = f"{module}:{local}"
        if (kind, param) in recon_sig.get(q, set()):
            same += 1
        elif q not in known:
            missing_fn += 1  # e.g. dataclass __init__ griffe synthesizes: no `def` in the source
            if len(synth) < 3:
                synth.append(q)
        else:
            other += 1
            if len(examples) < 5:
                examples.append(f"{q} {kind}({param})")
    return {"griffe_findings": len(rows), "griffe_parameter_findings": len(params),
            "recon_same": same, "not_a_def_in_source": missing_fn,
            "not_a_def_examples": synth, "disagree": other, "disagree_examples": examples}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cold-runs", type=int, default=3)
    ap.add_argument("--no-griffe", action="store_true")
    ap.add_argument("--markdown", type=Path, help="write the results as a Markdown table here")
    ap.add_argument("--json", type=Path, help="write the raw results here")
    ap.add_argument("--reports-only", action="store_true",
                    help="time report writing (--html, --markdown) alone")
    args = ap.parse_args()

    snaps = snapshots(("0.32.0", "0.33.0") if args.reports_only else SIX)
    a, b = snaps["0.32.0"], snaps["0.33.0"]
    out: dict[str, Any] = {"a": str(a), "b": str(b), "cpus": os.cpu_count(),
                           "python": sys.version.split()[0]}
    if args.reports_only:
        out["reports"] = time_reports(a, b, args.runs)
        finish(out, args)
        return

    out["git_stat"] = med([wall(["git", "diff", "--no-index", "--stat", str(a / "src"),
                                 str(b / "src")]) for _ in range(args.runs)])
    cold = []
    for _ in range(args.cold_runs):
        tmp = tempfile.mkdtemp(prefix="recon-cold-")
        try:
            cold.append(py(DIFF_CODE.format(a=str(a), b=str(b)), env={**os.environ, "RECON_CACHE": tmp}))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    out["diff_cold"] = med([r["seconds"] for r in cold])
    py(DIFF_CODE.format(a=str(a), b=str(b)))  # fill the cache
    warm = [py(DIFF_CODE.format(a=str(a), b=str(b))) for _ in range(args.runs)]
    out["diff_warm"] = med([r["seconds"] for r in warm])
    out["diff_warm_timings"] = {k: med([r["timings"][k] for r in warm]) for k in warm[0]["timings"]}
    out["summary"], out["counts"], out["files_compared"] = (
        warm[0]["summary"], warm[0]["counts"], warm[0]["files"])
    cli = [sys.executable, "-m", "recon", "diff", str(a), str(b), "--section", "functions"]
    out["diff_cli_warm"] = med([wall(cli) for _ in range(args.runs)])
    out["python_start_and_imports"] = med([wall([sys.executable, "-c", "import recon.cli"])
                                           for _ in range(args.runs)])

    refs = [str(snaps[v]) for v in SIX]
    py(BISECT_CODE.format(q=ADD_REQUEST, refs=refs))
    bis = [py(BISECT_CODE.format(q=ADD_REQUEST, refs=refs)) for _ in range(args.runs)]
    out["bisect_lib_six"] = med([r["seconds"] for r in bis])
    out["bisect_verdict"] = bis[0]["verdict"]
    bcli = [sys.executable, "-m", "recon", "bisect", ADD_REQUEST, "--versions", "vllm==0.28.0..0.33.0"]
    wall(bcli)  # make sure the pip: snapshots exist
    out["bisect_cli_range_six"] = med([wall(bcli) for _ in range(args.runs)])

    if not args.no_griffe:
        try:
            g = py(GRIFFE_CODE.format(a=str(a / "src"), b=str(b / "src")), timeout=600)
            out["griffe"] = {"seconds": round(g["seconds"], 2), "load": round(g["load"], 2),
                             "check": round(g["check"], 2),
                             **compare_with_griffe(g["rows"], a, b)}
        except (RuntimeError, subprocess.TimeoutExpired, ModuleNotFoundError) as err:
            out["griffe"] = {"error": str(err)[-300:]}

    git = out["git_stat"]
    out["ratios"] = {"warm/git": round(out["diff_warm"] / git, 2),
                     "cold/git": round(out["diff_cold"] / git, 2),
                     "cli_warm/git": round(out["diff_cli_warm"] / git, 2)}
    if "seconds" in out.get("griffe", {}):
        out["ratios"]["griffe/warm"] = round(out["griffe"]["seconds"] / out["diff_warm"], 1)
    out["reports"] = time_reports(a, b, args.runs)
    finish(out, args)


def finish(out: dict[str, Any], args: argparse.Namespace) -> None:
    """Print the results and write them where ``--json`` and ``--markdown`` say."""
    print(json.dumps(out, indent=2))
    if args.json:
        write_text(args.json, json.dumps(out, indent=2) + "\n")
    if args.markdown:
        write_text(args.markdown, to_markdown(out))


def to_markdown(o: dict[str, Any]) -> str:
    head = ["| what | seconds | vs git diff --stat | target |", "|---|---|---|---|"]
    rows = diff_rows(o) if "git_stat" in o else []
    return "\n".join(head + rows + report_rows(o["reports"])) + "\n"


def report_rows(r: dict[str, Any]) -> list[str]:
    """The report-writing rows: both commands, their difference, the files' sizes (wall, CPU)."""
    return [
        f"| `recon diff A B` CLI, warm (the same diff, no reports) | {r['plain']} "
        f"(CPU {r['plain_cpu']}) | | |",
        f"| `recon diff A B --html F --markdown F` CLI, warm | {r['with_reports']} "
        f"(CPU {r['with_reports_cpu']}) | | |",
        f"| (of which report writing: {r['sections']} function diffs, HTML {r['html_mb']} MB, "
        f"Markdown {r['markdown_mb']} MB) | {r['writing']} (CPU {r['writing_cpu']}) | | "
        "< 5 s, < 3 MB, < 1.5 MB |",
    ]


def diff_rows(o: dict[str, Any]) -> list[str]:
    g = o.get("griffe", {})
    lines = [
        f"| `git diff --no-index --stat` (same two trees) | {o['git_stat']} | 1.0 | |",
        f"| recon diff, functions, warm (library call) | {o['diff_warm']} | "
        f"{o['ratios']['warm/git']}x | < 1.5x |",
        f"| recon diff, functions, cold (empty cache, library call) | {o['diff_cold']} | "
        f"{o['ratios']['cold/git']}x | < 10 s |",
        f"| `recon diff -s functions` CLI, warm (process start, imports, tables) | "
        f"{o['diff_cli_warm']} | {o['ratios']['cli_warm/git']}x | |",
        f"| (of which `python -c 'import recon.cli'`) | {o['python_start_and_imports']} | | |",
    ]
    if "seconds" in g:
        lines.append(f"| griffe load + find_breaking_changes (what `griffe check` runs) | "
                     f"{g['seconds']} | {round(g['seconds'] / o['git_stat'], 1)}x | |")
    lines += [
        f"| recon bisect, 6 cached releases, library call | {o['bisect_lib_six']} | | < 5 s |",
        f"| `recon bisect --versions vllm==0.28.0..0.33.0` CLI (asks pip for the list) | "
        f"{o['bisect_cli_range_six']} | | < 5 s |",
    ]
    return lines


if __name__ == "__main__":
    main()
