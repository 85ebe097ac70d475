"""Benchmark: ``recon snapshot docker:`` on an image already in the Docker engine.

The image is the snapshot benchmark's (torch CPU, transformers, vLLM, SGLang in
one site-packages, 2.57 GB; built by ``bench/bench_snapshot.py`` into
``bench/out/``), loaded once. With the image in the engine, what a user would
otherwise type is ``docker create`` + ``docker cp`` of the package folder +
``docker rm``: that is the reference here. Timed, best of ``--repeat`` fresh
processes, each into a fresh folder after a ``sync``:

* the reference, ``docker cp`` of the vllm folder (every file, binaries too);
* recon through the engine's merged view (default: source files only), and
  with ``--all-files`` (the same bytes as ``docker cp``);
* recon with ``--package-only`` (the package folder alone, no distributions list);
* recon with ``--layers`` (through ``docker save``: per-layer provenance);
* ``docker create`` + ``docker rm`` alone: both the reference and recon's
  engine view pay it, and with the vfs storage driver (the private engine
  here) it copies the whole image, so the table also gives each ratio
  beyond that shared cost.

Run (with the private engine from ``.ci/dockerd`` and ``DOCKER_HOST`` set)::

    python bench/bench_engine.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_snapshot import OUT, TAG, build, fresh, timed  # noqa: E402
from tests.imagekit import SITE  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--phases", action="store_true", help="only the read phases, on one created container")
    args = ap.parse_args()
    if args.phases:
        phases(args.repeat)
        return
    archive, _ = build(OUT)
    have = subprocess.run(["docker", "image", "inspect", TAG], capture_output=True).returncode == 0
    if not have:
        subprocess.run(["docker", "load", "-q", "-i", str(archive)], check=True, stdout=subprocess.DEVNULL)
    size = int(subprocess.run(["docker", "image", "inspect", "-f", "{{.Size}}", TAG], check=True,
                              capture_output=True, text=True).stdout)
    work = OUT / "engine-work"
    shutil.rmtree(work, ignore_errors=True)
    results: dict[str, tuple[float, int]] = {}

    def best(label: str, make: Callable[[], list[str]]) -> None:
        runs = []
        for _ in range(args.repeat):
            cmd = make()
            subprocess.run(["sync"], check=True)
            runs.append(timed(cmd))
        results[label] = min(runs)
        print(f"{label}: {results[label][0]:.2f} s, {results[label][1]} MiB", flush=True)

    def recon(dest: str, *extra: str) -> Callable[[], list[str]]:
        return lambda: [sys.executable, "-m", "recon", "snapshot", "-q", "--package", "vllm",
                        "-o", str(fresh(work / dest)), "--name", "v", *extra, f"docker:{TAG}"]

    def docker_cp() -> list[str]:
        dest = fresh(work / "cp")
        dest.mkdir(parents=True)
        return ["bash", "-c", f"set -e; c=$(docker create {TAG} /x); docker cp -q $c:/{SITE}/vllm {dest}/; "
                              "docker rm $c >/dev/null"]

    best("docker create + docker rm alone (what the engine itself costs both)",
         lambda: ["bash", "-c", f"set -e; c=$(docker create {TAG} /x); docker rm $c >/dev/null"])
    best("docker create + docker cp of the vllm folder + docker rm", docker_cp)
    best("recon docker: (engine view, source files)", recon("a"))
    best("recon docker: --all-files (engine view, same bytes as docker cp)", recon("b", "--all-files"))
    best("recon docker: --package-only (engine view, the vllm folder alone)", recon("d", "--package-only"))
    best("recon docker: --layers (docker save, per-layer provenance)", recon("c", "--layers"))
    shutil.rmtree(work, ignore_errors=True)

    ref = results["docker create + docker cp of the vllm folder + docker rm"][0]
    alone = "docker create + docker rm alone (what the engine itself costs both)"
    engine = results[alone][0]
    print(f"\nImage {TAG}: {size / 1e9:.2f} GB in the engine.\n")
    print("| run | seconds | peak RSS MiB | ratio to docker cp | beyond create + rm, ratio |")
    print("|---|---:|---:|---:|---:|")
    for label, (sec, mem) in results.items():
        beyond = f"{(sec - engine) / (ref - engine):.2f}x" if label != alone and ref > engine else ""
        print(f"| {label} | {sec:.2f} | {mem} | {sec / ref:.2f}x | {beyond} |")


def phases(repeat: int) -> None:
    """What reading costs once the container exists (creating it is the engine's business and,
    with vfs, dominates and varies): the vllm folder alone, the whole site folder the engine
    view reads for the installed-distributions list, and recon's own read of that view."""
    from recon.sources.daemon import DaemonLayer, _client

    client = _client()
    cid = subprocess.run(["docker", "create", TAG, "/x"], check=True, capture_output=True, text=True).stdout.strip()
    try:
        rows = {}
        for label, path in (("docker cp of the vllm folder, to a pipe", f"{SITE}/vllm"),
                            ("docker cp of the whole site folder, to a pipe", SITE)):
            rows[label] = min(timed(["bash", "-c", f"docker cp {cid}:/{path} - > /dev/null"])[0]
                              for _ in range(repeat))
        for label, path in (("the site folder (default)", SITE), ("the vllm folder (--package-only)", f"{SITE}/vllm")):
            best = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                n = sum(1 for _ in DaemonLayer(client, cid, [path], "x").entries())
                best.append(time.perf_counter() - t0)
            rows[f"recon's engine-view read of {label}: {n} entries, nothing written"] = min(best)
    finally:
        subprocess.run(["docker", "rm", "-f", cid], check=True, capture_output=True)
    ref = rows["docker cp of the vllm folder, to a pipe"]
    print("| read phase (container already created) | seconds | ratio to the vllm folder alone |")
    print("|---|---:|---:|")
    for label, sec in rows.items():
        print(f"| {label} | {sec:.2f} | {sec / ref:.2f}x |")


if __name__ == "__main__":
    main()
