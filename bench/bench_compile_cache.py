"""Which torch.compile cache folder a run will load: recon beside starting the engine to see.

    python bench/bench_compile_cache.py [--runs 3]

What a user does instead is start the engine on a GPU and read its ``Using cache
directory`` line (or look for the folder it wrote). That time is read from the real
engines' own logs in ``tests/data/logs/`` (first time-stamped line to the cache line: the
engine's start to the moment it names the folder, on an idle H100/H200). recon's time is
measured here through the CLI, in one run: each request is new (a ``--max-num-seqs``
recon has not answered), the first one may start a warm server. Prints one JSON object
per row and the ratios.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "logs"
ENGINE_LOGS = {"H100 tiny Llama, LLM(...)": DATA / "real-compile-cache" / "cc_base.log",
               "H200 tiny Llama, LLM(...)": DATA / "real" / "L_default.log",
               "H100 Llama-3.1-8B, vllm serve": DATA / "real-h100" / "D8_serve.log"}
STAMP = re.compile(r"\b(\d\d):(\d\d):(\d\d)\b")


def engine_seconds(log: Path) -> int:
    """Seconds from the log's first time stamp to its ``Using cache directory`` line."""
    lines = log.read_text(encoding="utf-8").splitlines()
    stamps = [m for m in (STAMP.search(line) for line in lines) if m]
    cache = next(STAMP.search(line) for line in lines if "Using cache directory" in line)

    def secs(m: re.Match[str]) -> int:
        return int(m.group(1)) * 3600 + int(m.group(2)) * 60 + int(m.group(3))

    return secs(cache) - secs(stamps[0])  # type: ignore[arg-type]


def recon_seconds(seqs: int) -> float:
    cmd = [sys.executable, "-m", "recon", "engine-config", "pip:vllm==0.26.0", "--config",
           str(DATA / "real" / "configs" / "llama.json"), "--gpu", "h100", "--llm", "--json",
           "--env", "CUDA_HOME=/usr/local/cuda", "--engine-transformers", "5.17.0", "--flags",
           f"vllm serve /m/llama --max-model-len 4096 --max-num-seqs {seqs}"]
    start = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=True)
    took = time.monotonic() - start
    assert json.loads(done.stdout)["compile_cache"]["aot"], "no AOT folder in the answer"
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    base = 1000 + int(time.time()) % 5000  # a --max-num-seqs no earlier run has asked
    times = [recon_seconds(base + i) for i in range(args.runs + 1)]
    first, warm = times[0], sorted(times[1:])[len(times[1:]) // 2]
    print(json.dumps({"recon_first_s": round(first, 2), "recon_warm_median_s": round(warm, 2),
                      "recon_warm_s": [round(t, 2) for t in times[1:]]}))
    for name, log in ENGINE_LOGS.items():
        engine = engine_seconds(log)
        print(json.dumps({"engine": name, "engine_to_cache_line_s": engine,
                          "ratio_warm": round(engine / warm, 1),
                          "ratio_first": round(engine / first, 1)}))


if __name__ == "__main__":
    main()
