"""Benchmark: snapshot the vLLM package straight from a registry on loopback.

The image is bench_snapshot's >2 GB engine image (torch CPU, transformers,
vLLM 0.32.0, SGLang, vLLM 0.33.0 as an upgrade layer), pushed to Debian's
docker-registry (distribution 2.8) on 127.0.0.1 in three layer formats:

* gzip (skopeo's OCI layout, pushed with ``--preserve-digests``);
* zstd:chunked (``skopeo copy --dest-compress-format zstd:chunked`` when it can;
  skopeo 1.9.3 fails on this image, so tests/registrykit.py writes the format);
* eStargz (each layer converted by tests/registrykit.py, gzip level 1).

For each it times ``recon snapshot registry:... --package vllm`` with a cold
blob cache and again warm, and reads the bytes the registry says it sent
(``http.response.written`` in its own log). The reference is ``skopeo copy
docker://... oci:`` + ``umoci unpack`` of the gzip image. Run::

    python bench/bench_registry.py          # builds/pushes once into bench/out/registry

and paste the Markdown it prints into docs/benchmarks/registry.md.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_snapshot import OUT as SNAP_OUT  # noqa: E402
from bench_snapshot import build, timed  # noqa: E402

from tests.registrykit import (  # noqa: E402
    Registry,
    estargz_layer,
    image_manifest,
    skopeo_copy,
    write_oci_layout,
    zstd_chunked_layer,
)

OUT = ROOT / "bench" / "out" / "registry"
REPO = "bench/engines"


def _layers_of(layout: Path) -> list[dict[str, object]]:
    idx = json.loads((layout / "index.json").read_text())
    man = json.loads((layout / "blobs/sha256" / idx["manifests"][0]["digest"].split(":")[1]).read_text())
    return man["layers"]


def converted_layout(archive: Path, dest: Path, convert: Callable[[Path, Path], Any]) -> Path:
    """Convert every layer of the docker-save archive (``convert(tar, out)``); an OCI layout."""
    if (dest / "index.json").exists():
        return dest
    work = OUT / "convert-work"
    work.mkdir(parents=True, exist_ok=True)
    layers = []
    with tarfile.open(archive) as tf:
        manifest = json.load(tf.extractfile("manifest.json"))[0]  # type: ignore[arg-type]
        for i, name in enumerate(manifest["Layers"]):
            t0 = time.time()
            tar = work / f"l{i}.tar"
            with tf.extractfile(name) as src, open(tar, "wb") as out:  # type: ignore[union-attr]
                shutil.copyfileobj(src, out, 1 << 22)
            conv = convert(tar, work / f"l{i}.blob")
            tar.unlink()
            layers.append((conv.descriptor(), conv.path, conv.diff_id))
            print(f"  {dest.name} layer {i}: {conv.size / 1e6:.0f} MB ({time.time() - t0:.0f} s)", flush=True)
    write_oci_layout(dest, [image_manifest(dest, layers)])
    shutil.rmtree(work)
    return dest


def push_all(reg: Registry, archive: Path, gzip_layout: Path) -> dict[str, Path]:
    """gzip as skopeo wrote it; zstd:chunked by skopeo if it can, else to the format's layout
    (skopeo 1.9.3 stops with "short write" on this image); eStargz converted here."""
    layouts = {"gzip": gzip_layout}
    zc = OUT / "oci-zstd-chunked"
    if not (zc / "index.json").exists():
        t0 = time.time()
        try:
            skopeo_copy(f"oci:{gzip_layout}:latest", f"oci:{zc}:latest", "--dest-compress-format", "zstd:chunked")
            print(f"  zstd:chunked by skopeo: {time.time() - t0:.0f} s", flush=True)
        except subprocess.CalledProcessError as err:
            print(f"  skopeo could not write zstd:chunked ({err.stderr.decode().strip()[-200:]}); "
                  "converting with tests/registrykit.py", flush=True)
            shutil.rmtree(zc, ignore_errors=True)
            converted_layout(archive, zc, zstd_chunked_layer)
    layouts["zstd:chunked"] = zc
    layouts["estargz"] = converted_layout(archive, OUT / "oci-estargz",
                                          lambda tar, out: estargz_layer(tar, out, level=1))
    for fmt, layout in layouts.items():
        t0 = time.time()
        skopeo_copy(f"oci:{layout}:latest", f"docker://{reg.host}/{REPO}:{fmt.replace(':', '-')}",
                    "--preserve-digests")
        print(f"  pushed {fmt}: {time.time() - t0:.0f} s", flush=True)
    return layouts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3, help="runs per row; the fastest is reported")
    args = ap.parse_args()
    archive, gzip_layout = build(SNAP_OUT)
    OUT.mkdir(parents=True, exist_ok=True)
    reg = Registry(OUT / "registry", port=args.port).start()
    try:
        layouts = push_all(reg, archive, gzip_layout)
        rows = []
        scratch = OUT / "scratch"
        env = {**os.environ, "RECON_REGISTRY_INSECURE": "1"}
        for fmt, layout in layouts.items():
            total = sum(int(ly["size"]) for ly in _layers_of(layout))  # type: ignore[call-overload]
            ref = f"registry:{reg.host}/{REPO}:{fmt.replace(':', '-')}"
            best: dict[str, tuple[float, int, int]] = {}
            for _ in range(args.repeat):
                shutil.rmtree(scratch, ignore_errors=True)
                env["RECON_CACHE"] = str(scratch / "cache")
                for run in ("cold", "warm"):
                    before = reg.bytes_served()
                    wall, rss = timed([sys.executable, "-m", "recon", "snapshot", ref, "--package", "vllm",
                                       "--out", str(scratch / run), "--name", "s", "-q"], env=env)
                    sent = reg.bytes_served() - before
                    print(f"  recon {fmt} {run}: {wall:.1f} s, {rss} MiB, {sent / 1e6:.1f} MB of "
                          f"{total / 1e6:.0f} MB (load {os.getloadavg()[0]:.1f})", flush=True)
                    if run not in best or wall < best[run][0]:
                        best[run] = (wall, rss, sent)
            for run in ("cold", "warm"):
                rows.append((fmt, run, *best[run], total))
        t_copy = t_all = float("inf")
        for _ in range(args.repeat):
            shutil.rmtree(scratch, ignore_errors=True)
            scratch.mkdir(parents=True)
            before = reg.bytes_served()
            t0 = time.perf_counter()
            subprocess.run(["skopeo", "copy", "-q", "--src-tls-verify=false",
                            f"docker://{reg.host}/{REPO}:gzip", f"oci:{scratch / 'oci'}:latest"], check=True)
            copy = time.perf_counter() - t0
            subprocess.run(["umoci", "unpack", "--image", f"{scratch / 'oci'}:latest", str(scratch / "bundle")],
                           check=True, capture_output=True)
            both = time.perf_counter() - t0
            sent = reg.bytes_served() - before
            print(f"  skopeo copy + umoci unpack: {both:.1f} s (copy {copy:.1f} s), {sent / 1e6:.1f} MB "
                  f"(load {os.getloadavg()[0]:.1f})", flush=True)
            if both < t_all:
                t_copy, t_all = copy, both
        gz_total = sum(int(ly["size"]) for ly in _layers_of(layouts["gzip"]))  # type: ignore[call-overload]
        shutil.rmtree(scratch, ignore_errors=True)
        print("\n| layer format | run | recon snapshot (s) | peak RSS (MiB) | bytes from registry | "
              "image layers | read |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for fmt, run, wall, rss, sent_b, total in rows:
            print(f"| {fmt} | {run} | {wall:.1f} | {rss} | {sent_b / 1e6:.1f} MB | {total / 1e6:.0f} MB | "
                  f"{100 * sent_b / total:.2f} % |")
        print(f"| gzip | skopeo copy + umoci unpack | {t_all:.1f} (copy {t_copy:.1f}) | - | "
              f"{sent / 1e6:.1f} MB | {gz_total / 1e6:.0f} MB | {100 * sent / gz_total:.2f} % |")
    finally:
        reg.stop()


if __name__ == "__main__":
    main()
