"""Benchmark: snapshot the vLLM package out of a >2 GB multi-layer image.

The image is built from real PyPI wheels (torch CPU, transformers, vLLM
0.32.0, SGLang, then vLLM 0.33.0 as an upgrade layer with whiteouts for the
files 0.33.0 dropped), written as a ``docker save`` archive and converted by
skopeo to a gzip OCI layout. In one run it times, as ratios:

* recon on the docker archive and on the OCI layout (``--all-files``, so the
  output is the same bytes the other tools write), and recon's default
  (source only);
* (a) ``skopeo copy`` + ``umoci unpack``;
* (b) ``docker load`` + ``docker create`` + ``docker cp`` through the engine;
* (c) the floor: reading (and for gzip, decompressing with the fastest
  decompressor here) every layer once, writing nothing.

Every timed run is a fresh process writing into a fresh folder after a
``sync``; the best of ``--repeat`` runs is kept. recon is timed twice per
source: writing to tmpfs (its own work, independent of the disk) and to the
disk; the "write floor" row copies the same source tree from tmpfs to the
disk with ``cp -r``, which is what the disk alone costs for those files (on
these virtual machines, creating a few thousand files varies from 0.2 s to
1.5 s from one minute to the next). Peak memory is GNU time's maximum RSS.
Run::

    python bench/bench_snapshot.py            # builds the image once into bench/out/
    python bench/bench_snapshot.py --skip-docker

and paste the Markdown it prints into docs/benchmarks/snapshot.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from recon.acquire.sources.pip import fetch_wheel  # noqa: E402
from tests.imagekit import SITE, LayerBuilder, write_docker_archive  # noqa: E402

OUT = ROOT / "bench" / "out" / "snapshot"
TAG = "recon-bench/engines:1"


def build(out: Path) -> tuple[Path, Path]:
    archive, layout = out / "image.tar", out / "oci-gzip"
    if archive.exists() and (layout / "index.json").exists():
        return archive, layout
    out.mkdir(parents=True, exist_ok=True)
    everything = lambda n: True  # noqa: E731
    wheels = {k: fetch_wheel(k) for k in ("torch==2.13.0", "transformers==5.24.0", "vllm==0.32.0",
                                            "sglang==0.5.23", "vllm==0.33.0")}
    layers = [LayerBuilder(out / "l0.tar").file("usr/local/bin/python3.12", b"#!\n", mode=0o755)
              .symlink("usr/local/bin/python3", "python3.12").dir(SITE).close()]
    for i, (spec, whl) in enumerate(wheels.items(), start=1):
        t0 = time.time()
        lb = LayerBuilder(out / f"l{i}.tar")
        if spec == "vllm==0.33.0":  # pip upgrade: whiteouts for files the new release dropped
            with zipfile.ZipFile(wheels["vllm==0.32.0"]) as old, zipfile.ZipFile(whl) as new:
                gone = {n for n in old.namelist() if n.startswith("vllm/")} - set(new.namelist())
            for name in sorted(gone):
                lb.whiteout(f"{SITE}/{name}")
        lb.from_wheel(whl, keep=everything)
        layers.append(lb.close())
        print(f"layer {i} {spec}: {layers[-1].stat().st_size / 1e6:.0f} MB ({time.time() - t0:.0f} s)")
    write_docker_archive(archive, layers, tag=TAG)
    for lp in layers:
        lp.unlink()
    subprocess.run(["skopeo", "copy", "-q", "--dest-compress", "--dest-compress-format", "gzip",
                    f"docker-archive:{archive}", f"oci:{layout}:latest"], check=True)
    return archive, layout


def timed(cmd: list[str], **kw: object) -> tuple[float, int]:
    """Wall seconds and peak RSS (MiB, from GNU time: the exec'd command, not our fork)."""
    import tempfile

    with tempfile.NamedTemporaryFile("r") as rss:
        t0 = time.perf_counter()
        proc = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss.name, *cmd],
                              stdout=subprocess.DEVNULL, **kw)  # type: ignore[call-overload]
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"failed: {' '.join(cmd)}")
        return wall, int(rss.read().strip().splitlines()[-1]) // 1024


FLOOR = r"""
import sys, tarfile, json
from isal import igzip_threaded
path, kind = sys.argv[1], sys.argv[2]
n = 0
def drain(fh):
    global n
    while b := fh.read(1 << 20):
        n += len(b)
if kind == "archive":
    with tarfile.open(path) as tf:
        man = json.load(tf.extractfile("manifest.json"))[0]
        for layer in man["Layers"]:
            drain(tf.extractfile(layer))
else:
    idx = json.load(open(f"{path}/index.json"))
    mdig = idx["manifests"][0]["digest"].split(":")[1]
    man = json.load(open(f"{path}/blobs/sha256/{mdig}"))
    for ld in man["layers"]:
        with igzip_threaded.open(f"{path}/blobs/sha256/" + ld["digest"].split(":")[1], "rb", threads=1) as fh:
            drain(fh)
print(n)
"""


def gzip_floor_choice(layout: Path) -> dict[str, float]:
    """Which decompressor is fastest here, on the largest layer (decides the floor's tool)."""
    idx = json.loads((layout / "index.json").read_text())
    man = json.loads((layout / "blobs/sha256" / idx["manifests"][0]["digest"].split(":")[1]).read_text())
    big = max(man["layers"], key=lambda ld: ld["size"])
    blob = layout / "blobs/sha256" / big["digest"].split(":")[1]
    out = {}
    for label, code in (
        ("zlib (gzip module)", "import gzip as g; f=g.open(p,'rb')"),
        ("zlib-ng", "from zlib_ng import gzip_ng as g; f=g.open(p,'rb')"),
        ("isal igzip", "from isal import igzip as g; f=g.open(p,'rb')"),
        ("isal igzip_threaded", "from isal import igzip_threaded as g; f=g.open(p,'rb',threads=1)"),
    ):
        script = f"import sys; p=sys.argv[1]; {code}\nwhile f.read(1<<20): pass"
        try:
            out[label] = timed([sys.executable, "-c", script, str(blob)])[0]
        except SystemExit:
            continue
    return out


def fresh(base: Path) -> Path:
    """A new, empty output folder for one timed run (outputs are deleted after all runs)."""
    base.mkdir(parents=True, exist_ok=True)
    n = sum(1 for _ in base.iterdir())
    return base / f"run{n}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-docker", action="store_true")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    archive, layout = build(OUT)
    work = OUT / "work"
    shm = Path("/dev/shm") / "recon-bench"
    for p in (work, shm):
        shutil.rmtree(p, ignore_errors=True)
    results: dict[str, tuple[float, int]] = {}

    def best(label: str, make: Callable[[], list[str]], repeat: int | None = None, **kw: object) -> None:
        """Best of N: each run in a fresh process and a fresh output folder, after a sync."""
        runs = []
        for _ in range(repeat or args.repeat):
            cmd = make()
            subprocess.run(["sync"], check=True)  # the previous run's writeback is not this run's cost
            runs.append(timed(cmd, **kw))
        results[label] = min(runs)
        print(f"{label}: {results[label][0]:.2f} s, {results[label][1]} MiB", flush=True)

    def recon(dest: Path, source: str, *extra: str) -> Callable[[], list[str]]:
        return lambda: [sys.executable, "-m", "recon", "snapshot", "-q", "--package", "vllm",
                        "-o", str(fresh(dest)), "--name", "v", *extra, source]

    da, oci = f"docker-archive:{archive}", f"oci:{layout}"
    best("floor: read every layer of the docker archive",
         lambda: [sys.executable, "-c", FLOOR, str(archive), "archive"])
    best("recon docker-archive, to tmpfs", recon(shm / "a", da))
    best("recon docker-archive, to disk", recon(work / "a", da))
    best("recon docker-archive --all-files, to disk", recon(work / "b", da, "--all-files"))
    tree = next((shm / "a").glob("run*/v*/src"))
    best("write floor: cp -r of the same source tree from tmpfs to disk",
         lambda: ["cp", "-r", str(tree), str(fresh(work / "cp"))])
    choice = gzip_floor_choice(layout)
    print("decompressors on the largest layer:", choice)
    best("floor: decompress every gzip layer (isal)", lambda: [sys.executable, "-c", FLOOR, str(layout), "oci"])
    best("recon oci gzip, to tmpfs", recon(shm / "c", oci))
    best("recon oci gzip, to disk", recon(work / "c", oci))
    best("recon oci gzip --all-files, to disk", recon(work / "d", oci, "--all-files"))
    best("recon oci gzip, to tmpfs, one layer at a time (RECON_LAYER_WORKERS=1)", recon(shm / "e", oci),
         env={**os.environ, "RECON_LAYER_WORKERS": "1"})
    best("recon docker-archive, to tmpfs, 2 layers at once (RECON_LAYER_WORKERS=2)", recon(shm / "f", da),
         env={**os.environ, "RECON_LAYER_WORKERS": "2"})
    shutil.rmtree(shm, ignore_errors=True)
    bundle = work / "bundle"
    oci2 = work / "oci-from-archive"
    tmp_layout = ["skopeo", "copy", "-q", f"docker-archive:{archive}", f"oci:{oci2}:latest"]
    unpack = ["umoci", "unpack", "--image", f"{oci2}:latest", str(bundle)]
    t_copy, t_unpack, mem = [], [], 0
    for _ in range(min(args.repeat, 3)):
        for p in (bundle, oci2):
            if p.exists():
                shutil.rmtree(p)
        subprocess.run(["sync"], check=True)
        a = timed(tmp_layout)
        b = timed(unpack)
        t_copy.append(a[0])
        t_unpack.append(b[0])
        mem = max(mem, a[1], b[1])
    results["(a) skopeo copy + umoci unpack (docker archive)"] = (min(map(sum, zip(t_copy, t_unpack, strict=True))), mem)
    print("(a)", results["(a) skopeo copy + umoci unpack (docker archive)"], flush=True)
    shutil.rmtree(bundle, ignore_errors=True)
    shutil.rmtree(oci2, ignore_errors=True)
    best("(a') umoci unpack (gzip OCI layout)",
         lambda: ["umoci", "unpack", "--image", f"{layout}:latest", str(fresh(work / "umoci"))],
         repeat=min(args.repeat, 3))
    if not args.skip_docker:
        dest = work / "dcp"
        script = (f"set -e; docker rmi -f {TAG} >/dev/null 2>&1 || true; docker load -q -i {archive} >/dev/null; "
                  f"c=$(docker create {TAG} /x); d=$(mktemp -d -p {dest}); "
                  f"docker cp $c:/{SITE}/vllm $d/; docker rm $c >/dev/null")
        dest.mkdir(parents=True, exist_ok=True)
        best("(b) docker load + create + docker cp", lambda: ["bash", "-c", script], repeat=min(args.repeat, 3))
        print("DOCKER_HOST", os.environ.get("DOCKER_HOST"))
    shutil.rmtree(work, ignore_errors=True)
    report(archive, layout, results, choice)


def report(archive: Path, layout: Path, results: dict[str, tuple[float, int]], choice: dict[str, float]) -> None:
    sizes = {"docker archive": archive.stat().st_size,
             "gzip OCI layout": sum(p.stat().st_size for p in (layout / "blobs").rglob("*") if p.is_file())}
    print("\n## Results\n")
    print(f"Image: {sizes['docker archive'] / 1e9:.2f} GB as a docker save archive (uncompressed layers), "
          f"{sizes['gzip OCI layout'] / 1e9:.2f} GB as a gzip OCI layout; 6 layers.\n")
    print("| run | seconds | peak RSS MiB | ratio to its floor |")
    print("|---|---:|---:|---:|")
    floors = {"archive": results["floor: read every layer of the docker archive"][0],
              "oci": results["floor: decompress every gzip layer (isal)"][0]}
    for label, (sec, mem) in results.items():
        ref = floors["oci"] if "gzip" in label else floors["archive"]  # (not "oci": umoci has it)
        print(f"| {label} | {sec:.2f} | {mem} | {sec / ref:.2f}x |")
    print("\ndecompressor comparison (largest layer, seconds):", json.dumps(choice))
    ra = results["(a) skopeo copy + umoci unpack (docker archive)"][0]
    rr = results["recon docker-archive --all-files, to disk"][0]
    print(f"\nrecon vs (a) on the docker archive (--all-files, to disk): {ra / rr:.1f}x faster")
    ru = results["(a') umoci unpack (gzip OCI layout)"][0]
    print(f"recon vs (a') on the gzip layout (--all-files, to disk): "
          f"{ru / results['recon oci gzip --all-files, to disk'][0]:.1f}x faster")
    if "(b) docker load + create + docker cp" in results:
        print(f"recon vs (b): {results['(b) docker load + create + docker cp'][0] / rr:.1f}x faster")
    _ = tarfile  # used in FLOOR


if __name__ == "__main__":
    main()
