"""Engine mode latency and memory: first use of a release (environment built) and warm use.

    python bench/bench_engine_mode.py [--release 0.33.0] [--cold]

``--cold`` moves the release's cached environment aside first (the shared
wheelhouse stays, so "first use" means: environment built from cached wheels).
Prints one JSON object: seconds for the environment, the child's import and
decision phases, the whole call, and the child's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from recon.engine.config import engine_config, environment  # noqa: E402
from recon.paths import cache_dir  # noqa: E402
from recon.snapcache import ensure_snapshot  # noqa: E402

CONFIG = ROOT / "examples" / "configs" / "qwen3-next-80b-a3b-instruct.json"
FLAGS = "vllm serve Qwen/Qwen3-Next-80B-A3B-Instruct --tensor-parallel-size 2"


def one(snap: object, label: str) -> dict[str, object]:
    start = time.monotonic()
    facts = engine_config(snap, FLAGS, json.loads(CONFIG.read_text()), gpu="h100",  # type: ignore[arg-type]
                          kv_memory_gib=40.0)
    return {"run": label, "wall_s": round(time.monotonic() - start, 2), **facts.seconds,
            "peak_rss_mb": facts.peak_rss_mb, "attention_block_size": facts.facts.get(
                "attention_block_size"), "functions_ran": len(facts.ran)}


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
    rows.append(one(snap, "warm"))
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
