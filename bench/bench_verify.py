"""Time ``recon snapshot verify`` against ``sha256sum -c`` on the same snapshot.

A user without recon would check a snapshot with coreutils: a checksum list
made from the manifest, then ``sha256sum -c``. That covers content only (not
missing links, retargeted links or files added since), so it is the floor for
the hashing part of verify. Both are timed as fresh processes with the files
in the page cache (a first untimed run of each warms it), best of ``--runs``.

    python bench/bench_verify.py [--spec vllm==0.33.0] [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time

from recon.paths import cache_dir
from recon.snapshots.model import Snapshot
from recon.snapshots.take import take_snapshot


def best_of(argv: list[str], runs: int, cwd: str | None = None) -> float:
    subprocess.run(argv, cwd=cwd, check=True, capture_output=True)  # warm the page cache
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, cwd=cwd, check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default="vllm==0.33.0")
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()

    base = cache_dir() / "bench-snapshots"
    name = args.spec.replace("==", "-")
    snap = Snapshot.open(base / name) if (base / name / "manifest.json").is_file() else \
        take_snapshot(f"pip:{args.spec}", out=base, name=name)
    files = {p: r for p, r in snap.files.items() if r.kind == "file"}
    with tempfile.NamedTemporaryFile("w", suffix=".sha256", delete=False) as fh:
        fh.writelines(f"{r.sha256}  {p}\n" for p, r in sorted(files.items()))
        checklist = fh.name
    total = sum(r.size for r in files.values())

    recon = [sys.executable, "-m", "recon", "snapshot", "verify", str(snap.root), "--json"]
    floor = ["sha256sum", "-c", "--quiet", checklist]
    t_recon = best_of(recon, args.runs)
    t_floor = best_of(floor, args.runs, cwd=str(snap.src))
    t_import = best_of([sys.executable, "-c", "import recon.cli"], args.runs)
    out = json.loads(subprocess.run(recon, check=True, capture_output=True, text=True).stdout)
    assert out["ok"], out

    print(f"snapshot {snap.name}: {len(snap.files)} recorded files, {len(files)} regular, "
          f"{total / 2**20:.1f} MiB; best of {args.runs}, page cache warm")
    print("| run | seconds | ratio to sha256sum -c |")
    print("|---|---:|---:|")
    print(f"| sha256sum -c --quiet (content only) | {t_floor:.3f} | 1.00x |")
    print(f"| recon snapshot verify --json | {t_recon:.3f} | {t_recon / t_floor:.2f}x |")
    print(f"| of which: python -c 'import recon.cli' | {t_import:.3f} | {t_import / t_floor:.2f}x |")


if __name__ == "__main__":
    main()
