"""recon's engine mode on every real H200 run of vLLM 0.26.0 in tests/data/logs/real/.

    python3 bench/gpu_engine/compare_engine_mode.py [--out results.json]

For each log: the run's own ``LLM(...)`` kwargs (its ``CASE`` line) as a command line, its
config.json, ``gpu="h200"``, and the ``Available KV cache memory`` it printed; prints the
engine's numbers beside recon's. The log reading and kwargs translation are the ones
``tests/test_engine_mode.py`` asserts with, so this script and the tests cannot drift apart.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from recon.engine.config import engine_config  # noqa: E402
from recon.snapcache import ensure_snapshot  # noqa: E402
from tests.test_engine_mode import REAL, _flags, _model_config, _real_case  # noqa: E402

KEYS = ("attention_block_size_logged", "mamba_padding_pct", "mamba_cache_mode",
        "cudagraph_capture_sizes", "enable_prefix_caching", "max_num_batched_tokens",
        "kv_cache_tokens", "max_concurrency")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write every case's numbers as JSON here")
    args = ap.parse_args()
    snap = ensure_snapshot("pip:vllm==0.26.0")
    results = {}
    for log in sorted(REAL.glob("*.log")):
        kwargs, logged = _real_case(log.stem)
        start = time.perf_counter()
        facts = engine_config(snap, _flags(kwargs), _model_config(kwargs), gpu="h200",
                              usage="llm", kv_memory_gib=logged.get("kv_gib"))
        got = facts.as_json()
        results[log.stem] = {"logged": logged, "got": {k: got.get(k) for k in KEYS},
                             "secs": round(time.perf_counter() - start, 1)}
        print(log.stem, json.dumps(results[log.stem]), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
