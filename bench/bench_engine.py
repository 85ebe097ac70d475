"""Benchmark: ``recon snapshot docker:`` on an image already in the Docker engine.

Two images (``--image``): ``snapshot``, the snapshot benchmark's (torch CPU,
transformers, vLLM, SGLang in one site-packages, 2.5 GB; built by
``bench/bench_snapshot.py``), and ``production``, a production-size vLLM image
built from real wheels by ``bench/production_image.py`` (CUDA torch, NVIDIA's
libraries, triton, flashinfer, vLLM, a hot-fix layer: 9 GB of site-packages).
With the image in the engine, what a user would otherwise type is ``docker
create`` + ``docker cp`` of the package folder + ``docker rm``: that is the
reference. Timed, best of ``--repeat`` fresh processes, each into a fresh folder
after a ``sync``, with peak RSS:

* the reference, ``docker cp`` of the vllm folder (every file, binaries too);
* recon's default, which reads the layer folders in the engine's storage in
  place where it can (source files only), and with ``--all-files`` (the same
  bytes as ``docker cp``);
* recon through the engine's archive API (``--engine-view``): the site folder
  whole (the distributions list), and ``--package-only``;
* recon with ``--layers`` (through ``docker save``: per-layer provenance);
* ``docker create`` + ``docker rm`` alone: the reference and the engine view
  pay it (with vfs it copies the whole image), so the table also gives each
  ratio beyond that shared cost.

Run (with the private engine from ``.ci/dockerd`` and ``DOCKER_HOST`` set)::

    python bench/bench_engine.py --image production [--repeat 3]
    python bench/bench_engine.py --image production --phases   # the reads alone
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


def _image(which: str) -> str:
    """The benchmark image's tag, built and in the engine."""
    if which == "production":
        from bench.production_image import build as build_production

        return build_production()
    archive, _ = build(OUT)
    if subprocess.run(["docker", "image", "inspect", TAG], capture_output=True).returncode != 0:
        subprocess.run(["docker", "load", "-q", "-i", str(archive)], check=True, stdout=subprocess.DEVNULL)
    return TAG


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--layers-repeat", type=int, default=1,
                    help="runs of --layers (it writes the whole image to a temporary file)")
    ap.add_argument("--image", choices=["snapshot", "production"], default="snapshot")
    ap.add_argument("--phases", action="store_true", help="only the read phases")
    args = ap.parse_args()
    tag = _image(args.image)
    if args.phases:
        phases(tag, args.repeat)
        return
    inspect = subprocess.run(["docker", "image", "inspect", "-f", "{{.Size}} {{.GraphDriver.Name}}", tag],
                             check=True, capture_output=True, text=True).stdout.split()
    size, driver = int(inspect[0]), inspect[1]
    work = OUT.parent / "engine-work"
    shutil.rmtree(work, ignore_errors=True)
    results: dict[str, tuple[float, int]] = {}

    def best(label: str, make: Callable[[], list[str]], repeat: int | None = None) -> None:
        runs = []
        for _ in range(repeat or args.repeat):
            cmd = make()
            subprocess.run(["sync"], check=True)
            runs.append(timed(cmd))
        results[label] = min(runs)
        print(f"{label}: {results[label][0]:.2f} s, {results[label][1]} MiB", flush=True)

    def recon(dest: str, *extra: str) -> Callable[[], list[str]]:
        return lambda: [sys.executable, "-m", "recon", "snapshot", "-q", "--package", "vllm",
                        "-o", str(fresh(work / dest)), "--name", "v", *extra, f"docker:{tag}"]

    def docker_cp() -> list[str]:
        dest = fresh(work / "cp")
        dest.mkdir(parents=True)
        return ["bash", "-c", f"set -e; c=$(docker create {tag} /x); docker cp -q $c:/{SITE}/vllm {dest}/; "
                              "docker rm $c >/dev/null"]

    alone = "docker create + docker rm alone (what the engine itself costs both)"
    reference = "docker create + docker cp of the vllm folder + docker rm"
    best(alone, lambda: ["bash", "-c", f"set -e; c=$(docker create {tag} /x); docker rm $c >/dev/null"])
    best(reference, docker_cp)
    best(f"recon docker: (default: layer folders in place, {driver}; source files)", recon("a"))
    best("recon docker: --all-files (in place, the same bytes as docker cp)", recon("b", "--all-files"))
    best("recon docker: --engine-view (archive API, the site folder whole)", recon("e", "--engine-view"))
    best("recon docker: --engine-view --package-only (archive API, the vllm folder alone)",
         recon("d", "--engine-view", "--package-only"))
    best("recon docker: --layers (docker save, per-layer provenance)", recon("c", "--layers"),
         repeat=args.layers_repeat)
    shutil.rmtree(work, ignore_errors=True)

    ref, engine = results[reference][0], results[alone][0]
    print(f"\nImage {tag}: {size / 1e9:.2f} GB in the engine ({driver}).\n")
    print("| run | seconds | peak RSS MiB | ratio to docker cp | beyond create + rm, ratio |")
    print("|---|---:|---:|---:|---:|")
    for label, (sec, mem) in results.items():
        beyond = f"{(sec - engine) / (ref - engine):.2f}x" if label != alone and ref > engine else ""
        print(f"| {label} | {sec:.2f} | {mem} | {sec / ref:.2f}x | {beyond} |")


def phases(tag: str, repeat: int) -> None:
    """What reading costs once the container exists (creating it is the engine's business and,
    with vfs, dominates and varies): the vllm folder alone, the whole site folder the engine
    view reads for the installed-distributions list, recon's own read of that view, and
    recon's in-place listing of the layer folders (no container at all)."""
    from recon.acquire.sources.base import ImageConfig
    from recon.acquire.sources.daemon import (
        DaemonLayer,
        _client,
        candidate_roots,
        interpreter_names,
    )
    from recon.acquire.sources.stored import find_stored, selection, stored_layer_list

    client = _client()
    image = client.images.get(tag)
    cid = subprocess.run(["docker", "create", tag, "/x"], check=True, capture_output=True, text=True).stdout.strip()
    try:
        rows = {}
        for label, path in (("docker cp of the vllm folder, to a pipe", f"{SITE}/vllm"),
                            ("docker cp of the whole site folder, to a pipe", SITE)):
            rows[label] = min(timed(["bash", "-c", f"docker cp {cid}:/{path} - > /dev/null"])[0]
                              for _ in range(repeat))
        for label, path in (("the site folder (--engine-view)", SITE),
                            ("the vllm folder (--engine-view --package-only)", f"{SITE}/vllm")):
            best = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                n = sum(1 for _ in DaemonLayer(client, cid, [path], "x").entries())
                best.append(time.perf_counter() - t0)
            rows[f"recon's engine-view read of {label}: {n} entries, nothing written"] = min(best)
    finally:
        subprocess.run(["docker", "rm", "-f", cid], check=True, capture_output=True)
    stored, why = find_stored(image.attrs, client.info().get("DockerRootDir"))
    if stored is not None:
        config = ImageConfig.from_image_json(image.attrs)
        best = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            names, cfgs = interpreter_names(config, None)
            sel = selection(stored, candidate_roots(config), ["vllm"], [*names, *cfgs])
            n = 0
            for layer in stored_layer_list(stored, sel):
                for entry in layer.entries():
                    n += 1
                    if entry.open is not None and entry.name.endswith(".py"):
                        with entry.open() as fh:
                            while fh.read(1 << 20):
                                pass
            best.append(time.perf_counter() - t0)
        rows[f"recon's in-place read ({stored.driver}): {n} entries listed, every .py read, "
             "no container"] = min(best)
    else:
        print(f"no in-place row: {why}")
    ref = rows["docker cp of the vllm folder, to a pipe"]
    print("| read phase | seconds | ratio to the vllm folder alone |")
    print("|---|---:|---:|")
    for label, sec in rows.items():
        print(f"| {label} | {sec:.2f} | {sec / ref:.2f}x |")


if __name__ == "__main__":
    main()
