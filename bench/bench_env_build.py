"""First use of a release: its environment built from the cached wheelhouse, uv vs pip.

    python bench/bench_env_build.py [--release vllm==0.33.0] [--runs 2]

A release's first use in engine mode installs its pure-Python requirements (about a
hundred wheels for vLLM) into an environment of its own. The wheels come from the
shared wheelhouse (filled by ``pip download`` on the first release ever, or by the
runs here); what is timed is recon's whole build (venv, install rounds, the torch
companions, ``env.json``) with uv as the installer and with pip (what recon used
before, and what it falls back to without uv), alternating, into a temporary folder.
Prints one JSON object per build and the median ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from recon.acquire.sources.pip import wheels_dir  # noqa: E402
from recon.engine import env  # noqa: E402
from recon.paths import cache_dir  # noqa: E402


def _wheel(spec: str) -> Path:
    name, _, version = spec.partition("==")
    found = sorted(wheels_dir().glob(f"{name}-{version}-*.whl"))
    if not found:
        sys.exit(f"no cached wheel of {spec} in {wheels_dir()}: run `recon snapshot pip:{spec}` "
                 "first")
    return found[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--release", default="vllm==0.33.0")
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args()
    wheel = _wheel(args.release)
    reqs = env.requirements(env.wheel_metadata(wheel))
    name, _, version = args.release.partition("==")
    asof = env.as_of_release(name, version, wheel)
    house = cache_dir() / "envs" / "wheelhouse"
    uv = env._uv
    times: dict[str, list[float]] = {"uv": [], "pip": []}
    with tempfile.TemporaryDirectory(dir=cache_dir() / "tmp") as tmp:
        for i in range(args.runs):
            for label in ("pip", "uv"):
                env._uv = uv if label == "uv" else (lambda: None)  # type: ignore[assignment]
                start = time.monotonic()
                built = env._build(Path(tmp) / f"{label}-{i}", reqs, house, asof)
                seconds = time.monotonic() - start
                times[label].append(seconds)
                print(json.dumps({"release": args.release, "installer": label, "run": i,
                                  "seconds": round(seconds, 1),
                                  "installed": len(built.record["installed"])}), flush=True)
    ratio = statistics.median(times["pip"]) / statistics.median(times["uv"])
    print(json.dumps({"pip_median_s": round(statistics.median(times["pip"]), 1),
                      "uv_median_s": round(statistics.median(times["uv"]), 1),
                      "pip_over_uv": round(ratio, 2), "installer": env.installer()}))


if __name__ == "__main__":
    main()
