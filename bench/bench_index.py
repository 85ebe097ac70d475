"""Benchmark the index, the chain query and other Python call-graph tools on one vLLM release.

Run::

    python bench/bench_index.py                       # vllm 0.33.0 from the shared test snapshots
    python bench/bench_index.py --snapshot PATH --runs 5 --markdown /tmp/results.md

What it measures (each in a fresh process, wall time and peak RSS from
``/usr/bin/time``; for the index the largest process, a worker or the parent):

* ``ast.parse`` of every file on one core: the floor a one-core indexer cannot beat;
* ``recon index`` cold (empty cache: parse everything in the process pool) and warm;
* ``chain`` to ``Platform._align_hybrid_block_size`` (depth 3), and with ``--from``;
* pyan3, code2flow and PyCG on the same files (the whole package and a ~600-file
  subset: vllm/*.py, vllm/config, vllm/platforms, vllm/v1), each with a time limit;
  whether they finish, and whether their graph holds seven call edges checked by
  hand in the source (inheritance, aliases, super(), constructors, a typed module
  variable).

PyCG 0.0.8 on PyPI does not import (its package is named ``PyCG`` but imports
``pycg``) and 0.0.7 needs ``pkg_resources``: give ``--pycg-python`` a venv with
``pip install pycg==0.0.7 'setuptools<81'`` (default: ``~/.cache/recon/bench-venv``).
Targets (issue 3): cold under 5 s, warm under 0.5 s, chain under 1 s. Never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from recon.acquire.writer import write_text  # noqa: E402
from recon.paths import cache_dir  # noqa: E402
from recon.snapshots.model import Snapshot  # noqa: E402

ALIGN = "vllm.platforms.interface:Platform._align_hybrid_block_size"
FROM = "vllm.v1.executor.uniproc_executor:UniProcExecutor._init_executor"
SUBSET = ("vllm/config/", "vllm/platforms/", "vllm/v1/")

#: (what it exercises, caller, callee): each read in the 0.33.0 source by hand.
EDGES = [
    ("cls. call, method inherited from the base class",
     "vllm.platforms.cpu:CpuPlatform.update_block_size_for_backend", ALIGN),
    ("self. call, method inherited from the base class",
     "vllm.platforms.cuda:CudaPlatformBase.supported_dtypes",
     "vllm.platforms.interface:Platform.has_device_capability"),
    ("from x import f as g; g()",
     "vllm.v1.worker.gpu.model_runner:GPUModelRunner.profile_cudagraph_memory",
     "vllm.v1.worker.gpu.cudagraph_utils:profile_cudagraph_memory"),
    ("call through a module variable typed under TYPE_CHECKING", FROM,
     "vllm.platforms.interface:Platform.update_block_size_for_backend"),
    ("cls. call in the same class",
     "vllm.platforms.interface:Platform.update_block_size_for_backend", ALIGN),
    ("super().m()", "vllm.platforms.xpu:XPUPlatform.update_block_size_for_backend",
     "vllm.platforms.interface:Platform.update_block_size_for_backend"),
    ("constructor Foo(...) -> Foo.__init__", FROM,
     "vllm.v1.worker.worker_base:WorkerWrapperBase.__init__"),
]


def timed(cmd: list[str], *, cwd: Path | None = None, timeout: float = 300,
          env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``cmd`` under /usr/bin/time: finished?, seconds, peak RSS (MiB), stdout."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        full = ["/usr/bin/time", "-f", "%e %M %U %S", "-o", tf.name, *cmd]
        # Own process group: on timeout the tool itself is killed, not only /usr/bin/time.
        proc = subprocess.Popen(full, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env={**os.environ, **(env or {})}, start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return {"finished": False, "seconds": timeout, "rss_mib": None, "rc": None, "stdout": "",
                    "error": f"killed at the {timeout:g} s time limit"}
        parts = (tf.read().strip().splitlines() or ["0 0 0 0"])[-1].split()
        secs, rss, cpu = float(parts[0]), int(parts[1]) / 1024, float(parts[2]) + float(parts[3])
    errs = [ln.strip() for ln in stderr.splitlines() if ln.strip() and not ln.startswith((" ", "^"))]
    return {"finished": proc.returncode == 0, "seconds": secs, "rss_mib": round(rss), "cpu_s": cpu,
            "rc": proc.returncode, "stdout": stdout, "stderr": stderr[-2000:],
            "error": (errs[-1][:160] if errs else "") if proc.returncode else ""}


def py(code: str, **kw: Any) -> dict[str, Any]:
    """Run a Python snippet in a fresh interpreter; its last stdout line is JSON."""
    res = timed([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, **kw)
    lines = [ln for ln in res["stdout"].splitlines() if ln.startswith("{")]
    res["data"] = json.loads(lines[-1]) if lines else None
    if not res["finished"]:
        print(res.get("stderr", ""), file=sys.stderr)
    return res


def bench_recon(snap: Path, runs: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    floor = py(f"""
        import ast, json, time
        from recon.snapshots.model import Snapshot
        s = Snapshot.open({str(snap)!r})
        data = [s.path(f.path).read_bytes() for f in s.python_files()]
        t = time.perf_counter()
        for b in data:
            ast.parse(b)
        print(json.dumps({{"seconds": time.perf_counter() - t, "files": len(data)}}))
        """)
    out["ast_parse_one_core"] = floor["data"]["seconds"]
    out["files"] = floor["data"]["files"]
    cold, warm, cold_rss, warm_rss, cold_cpu = [], [], [], [], []
    for _ in range(runs):
        tmp = tempfile.mkdtemp(prefix="recon-bench-cache-")
        try:
            code = f"""
                import json, time
                from pathlib import Path
                t = time.perf_counter()
                from recon.index import load_index
                idx = load_index({str(snap)!r}, cache_root=Path({tmp!r}))
                print(json.dumps({{"seconds": idx.stats.seconds, "parsed": idx.stats.parsed,
                                  "cached": idx.stats.cached, "workers": idx.stats.workers,
                                  "functions": len(idx.functions)}}))
                """
            c = py(code)
            w = py(code)
            assert c["data"]["parsed"] == out["files"] and w["data"]["cached"] == out["files"]
            cold.append(c["data"]["seconds"])
            warm.append(w["data"]["seconds"])
            cold_rss.append(c["rss_mib"])
            cold_cpu.append(c["cpu_s"])  # whole process (imports included), workers included
            warm_rss.append(w["rss_mib"])
            out["functions"] = c["data"]["functions"]
            out["workers"] = c["data"]["workers"]
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    out["cold_index"] = {"median": statistics.median(cold), "min": min(cold), "runs": cold,
                         "rss_mib": max(cold_rss), "cpu_s": statistics.median(cold_cpu)}
    out["warm_index"] = {"median": statistics.median(warm), "min": min(warm), "runs": warm,
                         "rss_mib": max(warm_rss)}
    # end to end: `recon index` in a new process, warm (interpreter start and imports included)
    cli = [timed([sys.executable, "-c", "from recon.cli import main; main()", "index", str(snap)],
                 cwd=ROOT) for _ in range(runs)]
    out["warm_cli_end_to_end"] = statistics.median(r["seconds"] for r in cli)
    chains = py(f"""
        import json, time
        from recon.index import load_index
        from recon.index.chain import chain
        from recon.index.graph import CallGraph
        idx = load_index({str(snap)!r})
        res = {{}}
        for key, kw in (("to", {{}}), ("from_to", {{"source": {FROM!r}}})):
            times = []
            for _ in range({runs}):
                t = time.perf_counter()
                r = chain(idx, {ALIGN!r}, depth=3, **kw)
                times.append(time.perf_counter() - t)
            res[key] = {{"seconds": sorted(times)[len(times) // 2], "nodes": len(r.nodes),
                        "files": len(r.files), "unresolved": len(r.unresolved),
                        "external": r.external, "partial": r.partial, "paths": len(r.paths)}}
        g = CallGraph(idx)
        edges = []
        for _, a, b in {EDGES!r}:
            g.callees(a)
            edges.append(g.graph.has_edge(a, b))
        res["edges"] = edges
        print(json.dumps(res))
        """)
    out["chain"] = chains["data"]
    return out


# -- other tools ------------------------------------------------------------------------------
def _dotted(q: str) -> str:
    return q.replace(":", ".")


def edges_pyan(dot: str) -> set[tuple[str, str]]:
    ids = dict(re.findall(r'^\s*"([^"]+)" \[label=.*?tooltip="([^"\\]+)', dot, re.M))
    return {(ids.get(a, a), ids.get(b, b)) for a, b in re.findall(r'^\s*"([^"]+)" -> "([^"]+)"', dot, re.M)}


def edges_code2flow(data: dict[str, Any]) -> set[tuple[str, str]]:
    nodes = {k: v["name"] for k, v in data["graph"]["nodes"].items()}
    return {(nodes[e["source"]], nodes[e["target"]]) for e in data["graph"]["edges"]}


def _c2f_name(q: str) -> str:
    module, local = q.split(":")
    base = module.rsplit(".", 1)[-1]
    return f"{base}::{local}"


def edges_pycg(data: dict[str, list[str]]) -> set[tuple[str, str]]:
    return {(a, b) for a, targets in data.items() for b in targets}


def bench_tools(snap: Path, files: list[str], label: str, timeout: float,
                pycg_python: str | None) -> dict[str, Any]:
    src = snap / "src"
    work = Path(tempfile.mkdtemp(prefix=f"recon-bench-{label}-"))
    out: dict[str, Any] = {"files": len(files)}
    try:
        r = timed(["pyan3", *files, "--uses", "--no-defines", "--dot", "--file", str(work / "p.dot")],
                  cwd=src, timeout=timeout)
        if r["finished"]:
            got = edges_pyan((work / "p.dot").read_text())
            r["edges"] = [(_dotted(a), _dotted(b)) in got for _, a, b in EDGES]
        out["pyan3"] = r
        r = timed(["code2flow", *files, "--language", "py", "-o", str(work / "c.json"), "-q",
                   "--skip-parse-errors"], cwd=src, timeout=timeout)
        if r["finished"]:
            got = edges_code2flow(json.loads((work / "c.json").read_text()))
            r["edges"] = [(_c2f_name(a), _c2f_name(b)) in got for _, a, b in EDGES]
        out["code2flow"] = r
        if pycg_python:
            r = timed([pycg_python, "-m", "pycg", "--package", str(src), *[str(src / f) for f in files],
                       "-o", str(work / "g.json")], cwd=src, timeout=timeout)
            if r["finished"]:
                got = edges_pycg(json.loads((work / "g.json").read_text()))
                r["edges"] = [(_dotted(a), _dotted(b)) in got for _, a, b in EDGES]
            out["pycg"] = r
        for res in out.values():
            if isinstance(res, dict):
                res.pop("stdout", None)
                res.pop("stderr", None)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def markdown(res: dict[str, Any]) -> str:
    r = res["recon"]
    ch = r["chain"]
    lines = [
        f"Snapshot: `{res['snapshot']}` ({r['files']} .py files, {r['functions']} functions), "
        f"{res['cpus']} CPUs, Python {res['python']}, {res['runs']} runs (median).",
        "",
        "| measure | result | target |",
        "|---|---|---|",
        f"| `ast.parse` of every file, one core | {r['ast_parse_one_core']:.2f} s | (floor for one core) |",
        f"| cold index ({r['workers']} worker processes, empty cache) | {r['cold_index']['median']:.2f} s "
        f"(min {r['cold_index']['min']:.2f}, CPU {r['cold_index']['cpu_s']:.1f} s, peak RSS "
        f"{r['cold_index']['rss_mib']} MiB) | < 5 s |",
        f"| warm index (`load_index`, every file cached) | {r['warm_index']['median']:.2f} s "
        f"(min {r['warm_index']['min']:.2f}, peak RSS {r['warm_index']['rss_mib']} MiB) | < 0.5 s |",
        f"| `recon index` end to end, warm (interpreter start + imports) | {r['warm_cli_end_to_end']:.2f} s | |",
        f"| chain to `Platform._align_hybrid_block_size`, depth 3 | {ch['to']['seconds']:.2f} s "
        f"({ch['to']['nodes']} functions, {ch['to']['files']} files, {ch['to']['unresolved']} unresolved, "
        f"partial={ch['to']['partial']}) | < 1 s |",
        f"| same, `--from UniProcExecutor._init_executor` | {ch['from_to']['seconds']:.2f} s "
        f"({ch['from_to']['paths']} paths) | |",
        "",
        "| tool | files | finished | time | peak RSS | " + " | ".join(f"E{i + 1}" for i in range(len(EDGES))) + " |",
        "|---|---|---|---|---|" + "---|" * len(EDGES),
    ]
    marks = lambda flags: " | ".join("yes" if f else "no" for f in flags)  # noqa: E731
    lines.append(f"| recon (whole package) | {r['files']} | yes | {r['cold_index']['median']:.1f} s cold index "
                 f"+ {ch['to']['seconds']:.2f} s query | {r['cold_index']['rss_mib']} MiB | {marks(ch['edges'])} |")
    for label in ("subset", "whole"):
        block = res.get(f"tools_{label}")
        if not block:
            continue
        for tool in ("pyan3", "code2flow", "pycg"):
            t = block.get(tool)
            if t is None:
                continue
            fin = "yes" if t["finished"] else ("no (time limit)" if t["rc"] is None
                                                else f"no, crashed: `{t['error']}`")
            edges = marks(t["edges"]) if "edges" in t else " | ".join("-" for _ in EDGES)
            rss = f"{t['rss_mib']} MiB" if t["rss_mib"] is not None else "-"
            lines.append(f"| {tool} ({label}) | {block['files']} | {fin} | {t['seconds']:.1f} s | {rss} | {edges} |")
    lines += ["", "Edges (each read in the source by hand):", ""]
    lines += [f"- E{i + 1}: {what}: `{a}` -> `{b}`" for i, (what, a, b) in enumerate(EDGES)]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--snapshot", default=str(cache_dir() / "test-snapshots" / "vllm_0.33.0"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tool-timeout", type=float, default=300)
    ap.add_argument("--pycg-python", default=str(cache_dir() / "bench-venv" / "bin" / "python"))
    ap.add_argument("--skip-tools", action="store_true")
    ap.add_argument("--skip-whole", action="store_true", help="run the other tools on the subset only")
    ap.add_argument("--markdown", type=Path, help="also write the result tables here")
    args = ap.parse_args()
    snap = Snapshot.open(args.snapshot)
    res: dict[str, Any] = {"snapshot": snap.label, "cpus": len(os.sched_getaffinity(0)),
                           "python": sys.version.split()[0], "runs": args.runs}
    res["recon"] = bench_recon(snap.root, args.runs)
    pycg = args.pycg_python if Path(args.pycg_python).exists() else None
    if not args.skip_tools:
        all_files = [f.path for f in snap.python_files()]
        subset = [p for p in all_files if p.startswith(SUBSET) or p.count("/") == 1]
        res["tools_subset"] = bench_tools(snap.root, subset, "subset", args.tool_timeout, pycg)
        if not args.skip_whole:
            res["tools_whole"] = bench_tools(snap.root, all_files, "whole", args.tool_timeout, pycg)
    print(json.dumps(res, indent=2))
    md = markdown(res)
    print(md)
    if args.markdown:
        write_text(args.markdown, md)


if __name__ == "__main__":
    main()
