"""Build a Docker image of production size from real wheels, layer by layer, without a copy on disk.

A vLLM image as shipped holds 8-12 GB of site-packages: a CUDA torch build,
NVIDIA's runtime libraries, triton, flashinfer's kernels, vLLM itself, and on
top, in the case that matters here, a small hot-fix layer. This builds the same
shape from the real wheels (torch 2.14.1 CUDA and the NVIDIA wheels lie on this
machine's disk under ``/opt/pypi-more/files``; triton, flashinfer and vLLM come
from PyPI or recon's wheelhouse), one ``docker build`` per layer. Each build's
context is a tar streamed from the wheels' zip members straight into ``docker
build -``, so the unpacked files never sit on this machine's disk outside the
engine.

    python bench/production_image.py            # builds recon-bench/production:1 if missing
"""

from __future__ import annotations

import argparse
import glob
import io
import os
import subprocess
import sys
import tarfile
import threading
import zipfile
from pathlib import Path

TAG = "recon-bench/production:1"
SITE = "usr/local/lib/python3.12/site-packages"
DISK = "/opt/pypi-more/files"
WHEELS = Path.home() / ".cache" / "recon" / "wheels"
DOWNLOADS = Path(__file__).resolve().parent / "out" / "production-wheels"
HOTFIX = "vllm/config/compilation.py"

#: layer name -> the wheels it unpacks (globs on this disk, or PyPI requirements)
LAYERS: list[tuple[str, list[str]]] = [
    ("torch and triton", [f"{DISK}/torch-2.14.1-*.whl", "pypi:triton==3.9.0"]),
    ("NVIDIA runtime libraries", [f"{DISK}/nvidia_*.whl", f"{DISK}/cuda_*.whl"]),
    ("flashinfer", ["pypi:flashinfer-python==0.7.4", "pypi:flashinfer-cubin==0.6.13"]),
    ("vLLM and transformers", [f"{WHEELS}/vllm-0.33.0-*.whl", "pypi:transformers==5.24.0"]),
]


def _wheels(specs: list[str]) -> list[Path]:
    out: list[Path] = []
    for spec in specs:
        if spec.startswith("pypi:"):
            req = spec[5:]
            DOWNLOADS.mkdir(parents=True, exist_ok=True)
            name = req.split("==")[0].replace("-", "_")
            have = sorted(DOWNLOADS.glob(f"{name}-{req.split('==')[1]}-*.whl"))
            if not have:
                subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d",
                                str(DOWNLOADS), req], check=True)
                have = sorted(DOWNLOADS.glob(f"{name}-{req.split('==')[1]}-*.whl"))
            out += have
        else:
            found = sorted(Path(p) for p in glob.glob(spec))
            if not found:
                raise SystemExit(f"no wheel matches {spec}")
            out += found
    return out


def _context(out: io.BufferedWriter, dockerfile: str, wheels: list[Path],
             extra: dict[str, bytes]) -> None:
    """Stream a build context: the Dockerfile, then every wheel member under ``site/``."""
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        def add(name: str, data: bytes | io.IOBase, size: int, mode: int = 0o644) -> None:
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode, ti.mtime = size, mode, 1_700_000_000
            tar.addfile(ti, io.BytesIO(data) if isinstance(data, bytes) else data)

        add("Dockerfile", dockerfile.encode(), len(dockerfile))
        for name, data in extra.items():
            add(name, data, len(data), 0o755)
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as zf:
                for info in zf.infolist():
                    if info.is_dir():
                        continue
                    with zf.open(info) as member:
                        add(f"site/{info.filename}", member, info.file_size)  # type: ignore[arg-type]
    out.close()


def _build(tag: str, dockerfile: str, wheels: list[Path], extra: dict[str, bytes] | None = None) -> None:
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}
    proc = subprocess.Popen(["docker", "build", "-q", "-t", tag, "-"], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, env=env)
    assert proc.stdin is not None
    feeder = threading.Thread(target=_context, args=(proc.stdin, dockerfile, wheels, extra or {}))
    feeder.start()
    feeder.join()
    if proc.wait() != 0:
        raise SystemExit(f"docker build of {tag} failed")


def build(tag: str = TAG) -> str:
    """Build ``tag`` unless the engine has it; returns the tag."""
    if subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0:
        return tag
    base = f"{tag}-part0"
    _build(base, "FROM scratch\nCOPY usr /usr\nENV PATH=/usr/local/bin:/usr/bin:/bin\n", [],
           {"usr/local/bin/python3.12": b"", "usr/bin/true": b""})
    prev = base
    for i, (label, specs) in enumerate(LAYERS, start=1):
        wheels = _wheels(specs)
        print(f"layer {i}: {label} ({len(wheels)} wheels)", flush=True)
        step = f"{tag}-part{i}"
        _build(step, f"FROM {prev}\nCOPY site /{SITE}/\n", wheels)
        prev = step
    # the hot-fix: one file of vLLM replaced, as a person patching a running image would
    with zipfile.ZipFile(next(iter(_wheels(LAYERS[-1][1][:1])))) as zf:
        fixed = zf.read(HOTFIX) + b"\n# hot-fix: recon production benchmark\n"
    dockerfile = f"FROM {prev}\nCOPY fix.py /{SITE}/{HOTFIX}\n"
    _build(tag, dockerfile, [], {"fix.py": fixed})
    for i in range(len(LAYERS) + 1):
        subprocess.run(["docker", "rmi", f"{tag}-part{i}"], capture_output=True, check=False)
    return tag


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tag", default=TAG)
    args = ap.parse_args()
    tag = build(args.tag)
    size = int(subprocess.run(["docker", "image", "inspect", "-f", "{{.Size}}", tag], check=True,
                              capture_output=True, text=True).stdout)
    print(f"{tag}: {size / 1e9:.2f} GB in the engine")


if __name__ == "__main__":
    main()
