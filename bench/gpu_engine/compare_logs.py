"""`recon logs` on every real run in tests/data/logs/real/: the engine's numbers beside recon's.

    python3 bench/gpu_engine/compare_logs.py [--folder real-h100] [--memory-from-log]
                                             [--json results.json] > table.md

Each log goes through ``recon.logs.analyze`` as a user would run ``recon logs LOG --snapshot
pip:vllm==0.26.0 --config CONFIG`` plus what the runs' environment held that no log line says
(``--set engine_env=VLLM_USE_FLASHINFER_SAMPLER=0,CUDA_HOME=/usr/local/cuda --set
engine_transformers=5.17.0``, the README's: the compile cache key holds them): the flags, the GPU
and the entry point come from the log itself; the memory section is recon's memory plan (the
default), or with ``--memory-from-log`` the available KV memory is the log's. Prints one Markdown row per run (engine | recon for each
quantity, the verdict, the seconds it took) and, with ``--json``, every comparison.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from recon.logs import analyze  # noqa: E402
from recon.snapshots.cache import ensure_snapshot  # noqa: E402

REAL = Path(__file__).resolve().parents[2] / "tests" / "data" / "logs" / "real"
#: the runs' environment and transformers (tests/data/logs/real/README.md)
RUN_ENV = {"engine_env": "VLLM_USE_FLASHINFER_SAMPLER=0,CUDA_HOME=/usr/local/cuda",
           "engine_transformers": "5.17.0"}
COLUMNS = [("block / padding", ("attention_block_size", "mamba_padding_pct")),
           ("capture sizes n / max", ("cudagraph_capture_sizes", "max_cudagraph_capture_size")),
           ("graphs (mixed+decode or PIECEWISE+FULL)", ("cudagraph_graphs_mixed",
                                                      "cudagraph_graphs_decode",
                                                      "cudagraph_graphs_piecewise",
                                                      "cudagraph_graphs_full")),
           ("batched tokens", ("max_num_batched_tokens",)),
           ("weights GiB", ("model_load_gib",)),
           ("available KV GiB", ("available_kv_cache_memory_gib",)),
           ("KV tokens", ("kv_cache_tokens",)), ("concurrency", ("max_concurrency",))]


def _show(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, list):
        return str(len(value))
    if isinstance(value, float):
        return f"{value:.2f}"
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def _cell(rows: dict[str, Any], keys: tuple[str, ...], side: str) -> str:
    shown = [_show(rows[k][side]) for k in keys if k in rows and rows[k][side] is not None]
    return " / ".join(shown) or "—"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write every comparison here")
    ap.add_argument("--folder", default="real", help="real (H200, small shapes) or real-h100")
    ap.add_argument("--memory-from-log", action="store_true",
                    help="give the recipes the log's available KV memory (no memory plan)")
    args = ap.parse_args()
    folder = REAL.parent / args.folder
    snap = ensure_snapshot("pip:vllm==0.26.0")
    head = ["case", "GPU / entry point (from the log)"]
    for label, _ in COLUMNS:
        head += [f"{label}: engine", "recon"]
    print("| " + " | ".join(head + ["verdict", "recon time"]) + " |")
    print("|" + "---|" * (len(head) + 2))
    everything = {}
    for log in sorted(folder.glob("*.log")):
        args_line = analyze(log).log.args
        if "model" not in args_line:
            continue
        model = Path(str(args_line["model"])).name
        start = time.perf_counter()
        report = analyze(log, snapshot=snap, config=folder / "configs" / f"{model}.json",
                         options=RUN_ENV, memory_plan=False if args.memory_from_log else None)
        secs = time.perf_counter() - start
        rows = {c.quantity: {"engine": c.observed, "recon": c.predicted, "status": c.status}
                for c in report.comparisons}
        taken = {i["option"]: i["value"] for i in report.inputs}
        cells = [f"`{log.stem}`", f"{taken.get('gpu', '?')} / {taken.get('usage', '?')}"]
        for _, keys in COLUMNS:
            cells += [_cell(rows, keys, "engine"), _cell(rows, keys, "recon")]
        matched = sum(r["status"] == "match" for r in rows.values())
        verdict = (f"{matched} match" + (f", {len(report.mismatches)} mismatch"
                                         if report.mismatches else "")
                   + (f", {len(report.unpredicted)} not predicted" if report.unpredicted else ""))
        print("| " + " | ".join(cells + [verdict, f"{secs:.1f} s"]) + " |", flush=True)
        everything[log.stem] = {"rows": rows, "inputs": report.inputs, "secs": round(secs, 1)}
    if args.json:
        args.json.write_text(json.dumps(everything, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
