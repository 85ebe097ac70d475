"""Engine mode latency and memory: first use of a release, a cold child, a warm server.

    python bench/bench_engine_mode.py [--release 0.33.0] [--cold]

Every request is new (``RECON_ENGINE_CACHE=0``: no stored answer is used). In one run:
a cold child per request (``RECON_ENGINE_SERVER=0``, what recon did before the warm
server), the request that starts a warm server, then new requests to the warm
server; the same through the CLI (``recon recipe run vllm-hybrid-page-align``,
process start included), cold and warm. ``--cold`` first moves the release's cached
environment aside (the shared wheelhouse stays, so "first use" means: environment
built from cached wheels). Prints one JSON object per row and the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from recon.engine import server  # noqa: E402
from recon.engine.config import engine_config, environment  # noqa: E402
from recon.examples import EXAMPLES_DIR  # noqa: E402
from recon.paths import cache_dir  # noqa: E402
from recon.snapcache import ensure_snapshot  # noqa: E402

CONFIG = EXAMPLES_DIR / "qwen3-next-80b-a3b-instruct.json"
FLAGS = "vllm serve Qwen/Qwen3-Next-80B-A3B-Instruct --tensor-parallel-size {tp} --max-num-seqs {seqs}"
#: one new command line per request (nothing answered twice)
_ASKS = iter((tp, seqs) for seqs in (64, 96, 128, 160, 192, 224, 256) for tp in (1, 2, 4, 8))


def one(snap: object, label: str) -> dict[str, object]:
    tp, seqs = next(_ASKS)
    start = time.monotonic()
    facts = engine_config(snap, FLAGS.format(tp=tp, seqs=seqs),  # type: ignore[arg-type]
                          json.loads(CONFIG.read_text()), gpu="h100", kv_memory_gib=40.0)
    return {"run": label, "wall_s": round(time.monotonic() - start, 2), **facts.seconds,
            "peak_rss_mb": facts.peak_rss_mb, "attention_block_size": facts.facts.get(
                "attention_block_size"), "functions_ran": len(facts.ran)}


def cli(snap: object, label: str) -> dict[str, object]:
    """The recipe as a user runs it: a new ``recon`` process, its own import included."""
    tp, seqs = next(_ASKS)
    argv = [sys.executable, "-m", "recon", "recipe", "run", "vllm-hybrid-page-align",
            "--snapshot", str(snap.root), "--config", str(CONFIG),  # type: ignore[attr-defined]
            "--flags", FLAGS.format(tp=tp, seqs=seqs), "--json"]
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, check=False)
    wall = round(time.monotonic() - start, 2)
    if done.returncode != 0:
        raise SystemExit(f"{label}: exit {done.returncode}: {done.stderr[-500:]}")
    return {"run": label, "wall_s": wall}


def _server_rss_mb() -> float:
    """Resident memory of every process of the warm servers (supervisor, bwrap, child)."""
    total = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        if b"recon.engine.server" in cmd or b"--serve" in cmd:
            total += int(next(ln.split()[1] for ln in status.splitlines()
                              if ln.startswith("VmRSS")))
    return round(total / 1024, 1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--release", default="0.33.0")
    parser.add_argument("--cold", action="store_true")
    args = parser.parse_args()
    snap = ensure_snapshot(f"pip:vllm=={args.release}")
    rows = []
    if args.cold:
        env = environment(snap).root
        aside = cache_dir() / "envs" / (env.name + ".bench-aside")
        shutil.rmtree(aside, ignore_errors=True)
        env.rename(aside)
        rows.append(one(snap, "first use (env from cached wheels)"))
        shutil.rmtree(aside, ignore_errors=True)
    os.environ["RECON_ENGINE_CACHE"] = "0"
    server.stop_all()
    os.environ["RECON_ENGINE_SERVER"] = "0"
    cold = [one(snap, "cold child") for _ in range(2)]
    cold_cli = [cli(snap, "CLI, cold child") for _ in range(2)]
    del os.environ["RECON_ENGINE_SERVER"]
    rows += [*cold, *cold_cli, one(snap, "starts the warm server")]
    warm = [one(snap, "warm server") for _ in range(4)]
    warm_cli = [cli(snap, "CLI, warm server") for _ in range(4)]
    rows += [*warm, *warm_cli]
    rss = _server_rss_mb()
    server.stop_all()

    def median(part: list[dict[str, object]]) -> float:
        return statistics.median(float(r["wall_s"]) for r in part)  # type: ignore[arg-type]

    summary = {"cold_child_s": median(cold), "warm_server_s": median(warm),
               "cli_cold_s": median(cold_cli), "cli_warm_s": median(warm_cli),
               "cold_over_warm": round(median(cold) / median(warm), 1),
               "cli_cold_over_warm": round(median(cold_cli) / median(warm_cli), 1),
               "warm_server_rss_mb": rss}
    print(json.dumps({"rows": rows, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
