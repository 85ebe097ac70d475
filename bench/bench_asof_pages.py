"""Time to date a release's requirements: its index pages read on a machine's first use.

    python bench/bench_asof_pages.py [--release vllm==0.33.0]

Reads, into an empty folder, the index page of every distribution the release's
built environment holds (eight at a time, as an environment build does), then
chooses each one's version as of the release. Needs the release's environment
built once (any engine-mode request for it) and the network.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from packaging.specifiers import SpecifierSet

from recon.engine.asof import AsOf, IndexTimes, current_until
from recon.paths import cache_dir


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--release", default="vllm==0.33.0")
    args = ap.parse_args()
    name, _, version = args.release.partition("==")
    built = sorted((cache_dir() / "envs").glob(f"{name}-{version}-*/env.json"))
    if not built:
        raise SystemExit(f"no environment of {args.release} yet: run an engine-mode request first")
    names = [item.split("==")[0] for item in json.loads(built[-1].read_text())["installed"]]
    with tempfile.TemporaryDirectory() as tmp:
        times = IndexTimes(Path(tmp))
        start = time.monotonic()
        cutoff, how, _ = current_until(times, name, version, None)
        dated = time.monotonic()
        asof = AsOf(times, cutoff, how)
        asof.prefetch(names)
        fetched = time.monotonic()
        chosen = {n: asof.choose(n, SpecifierSet()) for n in names}
        done = time.monotonic()
    print(json.dumps({"release": args.release, "as_of": str(cutoff), "pages": len(names),
                      "release_page_s": round(dated - start, 2),
                      "pages_s": round(fetched - dated, 2), "choose_s": round(done - fetched, 2),
                      "undated": sorted(n for n, v in chosen.items() if v is None)}))


if __name__ == "__main__":
    main()
