"""Engine mode latency and memory: first use of a release, a cold child, a warm server.

    python bench/bench_engine_mode.py [--release 0.33.0] [--cold]
    python bench/bench_engine_mode.py --engine sglang [--release 0.5.23]

Every request is new (``RECON_ENGINE_CACHE=0``: no stored answer is used). In one run:
a cold child per request (``RECON_ENGINE_SERVER=0``, what recon did before the warm
server), the request that starts a warm server, then new requests to the warm
server; the same through the CLI (``recon recipe run vllm-hybrid-page-align``,
process start included), cold and warm. ``--cold`` first moves the release's cached
environment aside (the shared wheelhouse stays, so "first use" means: environment
built from cached wheels). ``--engine sglang`` times SGLang's pool sizing
(``server_args`` with two free-memory figures; the CLI runs ``sglang-memory-pools``)
the same way. Prints one JSON object per row and the ratios.
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
from recon.engine.sglang import MemoryFigures, server_args  # noqa: E402
from recon.examples import EXAMPLES_DIR  # noqa: E402
from recon.paths import cache_dir  # noqa: E402
from recon.snapshots.cache import ensure_snapshot  # noqa: E402

CONFIG = EXAMPLES_DIR / "qwen3-next-80b-a3b-instruct.json"
FLAGS = "vllm serve Qwen/Qwen3-Next-80B-A3B-Instruct --tensor-parallel-size {tp} --max-num-seqs {seqs}"
#: one new command line per request (nothing answered twice)
_ASKS = iter((tp, seqs) for seqs in (64, 96, 128, 160, 192, 224, 256) for tp in (1, 2, 4, 8))
SGLANG_FLAGS = ("python -m sglang.launch_server --model-path Qwen/Qwen3-Next-80B-A3B-Instruct "
                "--tp {tp} --max-running-requests {seqs}")
ENGINE = "vllm"


def one(snap: object, label: str) -> dict[str, object]:
    tp, seqs = next(_ASKS)
    config = json.loads(CONFIG.read_text())
    start = time.monotonic()
    if ENGINE == "sglang":
        sized = server_args(snap, SGLANG_FLAGS.format(tp=tp, seqs=seqs),  # type: ignore[arg-type]
                            config, gpu="h100", memory=MemoryFigures((60.0, 61.0), (78.0, 78.0)))
        point = (sized.pools or {}).get("points", [{}])[0]
        return {"run": label, "wall_s": round(time.monotonic() - start, 2), **sized.seconds,
                "peak_rss_mb": sized.peak_rss_mb,
                "max_total_num_tokens": point.get("max_total_num_tokens"),
                "functions_ran": len(sized.ran)}
    facts = engine_config(snap, FLAGS.format(tp=tp, seqs=seqs),  # type: ignore[arg-type]
                          config, gpu="h100", kv_memory_gib=40.0)
    return {"run": label, "wall_s": round(time.monotonic() - start, 2), **facts.seconds,
            "peak_rss_mb": facts.peak_rss_mb, "attention_block_size": facts.facts.get(
                "attention_block_size"), "functions_ran": len(facts.ran)}


def cli(snap: object, label: str) -> dict[str, object]:
    """The recipe as a user runs it: a new ``recon`` process, its own import included."""
    tp, seqs = next(_ASKS)
    if ENGINE == "sglang":
        recipe, flags = "sglang-memory-pools", SGLANG_FLAGS.format(tp=tp, seqs=seqs)
        extra = ["--set", "available_gb=60", "--set", "pre_load_gb=78"]
    else:
        recipe, flags, extra = "vllm-hybrid-page-align", FLAGS.format(tp=tp, seqs=seqs), []
    argv = [sys.executable, "-m", "recon", "recipe", "run", recipe,
            "--snapshot", str(snap.root), "--config", str(CONFIG),  # type: ignore[attr-defined]
            "--flags", flags, "--json", *extra]
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
    parser.add_argument("--engine", choices=("vllm", "sglang"), default="vllm")
    parser.add_argument("--release", default=None)
    parser.add_argument("--cold", action="store_true")
    args = parser.parse_args()
    global ENGINE
    ENGINE = args.engine
    release = args.release or ("0.5.23" if ENGINE == "sglang" else "0.33.0")
    snap = ensure_snapshot(f"pip:{ENGINE}=={release}")
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
