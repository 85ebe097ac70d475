"""What the release day's libraries cost when a later library broke a release for a model.

    python bench/bench_release_day.py

One run, through the CLI as a user runs it: the kv-capacity recipe on vLLM 0.26.0 for
Gemma-4-31B (transformers 5.15, of the weeks 0.26.0 was the newest, cannot load it;
the release day's 5.14.1 can), against the same recipe for a model that needs no
second environment (the Gemma-3 shape of tests/data/logs/real). Results are not
reused (RECON_ENGINE_CACHE=0). Three timings: the fallback with its environment built
now from cached wheels and both servers started (first use), the fallback again (warm:
both environments and their servers are there), and the plain request (warm). It stops
this user's warm servers first: run it alone. Needs both environments'
wheels cached once (any earlier run) and the network for nothing else.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from recon.engine.server import stop_all
from recon.paths import cache_dir

ROOT = Path(__file__).resolve().parents[1]
GEMMA4 = ROOT / "tests" / "data" / "public-logs" / "configs" / "gemma-4-31b-it.json"
GEMMA3 = ROOT / "tests" / "data" / "logs" / "real" / "configs" / "gemma3.json"
FLAGS = "vllm serve google/gemma-4-31B-it --dtype bfloat16 --max-model-len 16384"


def _run(config: Path, flags: str) -> float:
    """Seconds of one ``recon recipe run kv-capacity`` on 0.26.0 (exit 0 required)."""
    cmd = [sys.executable, "-m", "recon", "recipe", "run", "kv-capacity", "--snapshot",
           "pip:vllm==0.26.0", "--config", str(config), "--flags", flags, "--set", "gpu=b300",
           "--set", "available_kv_gib=182.37", "--json"]
    start = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False,  # noqa: S603
                          env={**os.environ, "RECON_ENGINE_CACHE": "0"})
    if done.returncode != 0:
        raise SystemExit(done.stderr[-800:])
    return time.monotonic() - start


def _release_day_envs() -> list[Path]:
    """The 0.26.0 environments resolved as of its own upload (2026-07-25)."""
    return [p.parent for p in (cache_dir() / "envs").glob("vllm-0.26.0-*/env.json")
            if json.loads(p.read_text()).get("resolved_as_of", "").startswith("2026-07-25")]


def main() -> None:
    stop_all()  # no server may hold an environment removed below
    for env in _release_day_envs():
        shutil.rmtree(env)
    first = _run(GEMMA4, FLAGS)
    warm = _run(GEMMA4, FLAGS)
    _run(GEMMA3, "vllm serve m --max-model-len 4096")  # its own server (another architecture)
    plain = _run(GEMMA3, "vllm serve m --max-model-len 4096")
    print(json.dumps({"fallback_first_use_s": round(first, 1), "fallback_warm_s": round(warm, 1),
                      "plain_warm_s": round(plain, 1),
                      "fallback_warm_vs_plain": round(warm / plain, 2)}))


if __name__ == "__main__":
    main()
