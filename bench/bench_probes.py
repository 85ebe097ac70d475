"""Benchmark the probe runtime: per-call overhead and interpreter start-up cost.

Usage (repository root)::

    python bench/bench_probes.py [--quick] [--json bench/out/probes.json]

Every number comes from real interpreters with a real bundle on ``PYTHONPATH``
(the way the container runs it), all in one run:

* per call, in one process per scenario: the plain function, the same function
  probed (instrumented in place: its ``__code__`` gains the runtime's
  prologue) and *sampled out* (``--first 0``), probed and *logged* (``shapes``
  and ``return`` of a small list and, with torch, a CPU tensor, written to a
  JSONL file), and the function wrapped by a do-nothing ``wrapt`` decorator
  (the usual way to wrap functions in Python, for scale);
* sampled-out again with torch imported, which adds torch's own
  ``torch.compiler.is_compiling()`` check to every call (what lets the
  prologue fold away under ``torch.compile``);
* start-up: ``python -c pass`` with and without the bundle, interleaved runs,
  median; the first process compiles the runtime (about 4 ms), later ones load
  the bytecode the bootstrap cached in the log folder.

Targets from issue 6: sampled-out overhead under 1 us, logged under 20 us,
start-up under 10 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from recon.probes import build_spec, new_bundle  # noqa: E402

TARGET_MODULE = """
def plain(x, y=None):
    return x

def probed(x, y=None):
    return x

def wrapped(x, y=None):
    return x
"""

MEASURE = """
import json, sys, timeit
with_torch = sys.argv[1] == "torch"
if with_torch:
    import torch
    arg = torch.zeros(4, 8)
else:
    arg = [1, 2, 3]
import benchmod, wrapt

@wrapt.decorator
def passthrough(wrapped, instance, args, kwargs):
    return wrapped(*args, **kwargs)

benchmod.wrapped = passthrough(benchmod.wrapped)
number = int(sys.argv[2])
out = {}
for name in ("plain", "probed", "wrapped"):
    fn = getattr(benchmod, name)
    times = timeit.repeat(lambda: fn(arg, y=3), number=number, repeat=7)
    out[name] = min(times) / number * 1e6
empty = min(timeit.repeat(lambda: None, number=number, repeat=7)) / number * 1e6
out["lambda_floor"] = empty
print(json.dumps(out))
"""


def env_with(paths: list[Path], **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k != "PYTHONPATH" and not k.startswith("RECON_PROBE")}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in paths)
    env.update(extra)
    return env


def per_call(work: Path, app: Path, first: int, torch_mode: str, number: int) -> dict[str, float]:
    name = f"b-first{first}-{torch_mode}"
    spec = build_spec(["benchmod:probed"], log=["shapes", "return"], first=first,
                      max_bytes=1 << 34, log_dir=str(work / f"logs-{name}"))
    bundle = new_bundle(work / name, spec).path
    out = subprocess.run([sys.executable, "-c", MEASURE, torch_mode, str(number)], cwd=app,
                         env=env_with([bundle, app]), capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def startup(work: Path, app: Path, runs: int) -> dict[str, float]:
    spec = build_spec(["vllm.v1.worker.gpu_model_runner:GPUModelRunner.execute_model",
                       "vllm.config.compilation:CompilationConfig.post_init_cudagraph_sizes"],
                      env=["VLLM_USE_V1", "CUDA_VISIBLE_DEVICES"], log_dir=str(work / "logs-start"))
    bundle = new_bundle(work / "b-start", spec).path
    # Bytecode is not written next to sources here (PYTHONDONTWRITEBYTECODE, and in a
    # container the bundle is read-only): the bootstrap caches the runtime's bytecode in
    # the log folder. "first process" gets a fresh log folder every run, so it compiles.
    cases = {"plain": env_with([app]), "bundle, later processes": env_with([bundle, app]),
             "bundle, first process": env_with([bundle, app])}
    subprocess.run([sys.executable, "-c", "pass"], env=cases["bundle, later processes"],
                   check=True)  # fills the log folder's bytecode cache
    samples: dict[str, list[float]] = {k: [] for k in cases}
    for i in range(runs):
        cases["bundle, first process"]["RECON_PROBE_LOG_DIR"] = str(work / f"fresh-logs-{i}")
        for key, env in cases.items():
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
            samples[key].append((time.perf_counter() - start) * 1000)
    assert not (bundle / "__pycache__").exists()
    return {k: statistics.median(v) for k, v in samples.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations (smoke run)")
    parser.add_argument("--json", type=Path, help="also write the raw numbers here")
    args = parser.parse_args()
    number = 20_000 if args.quick else 200_000
    work = Path(tempfile.mkdtemp(prefix="recon-bench-probes-"))
    app = work / "app"
    app.mkdir()
    (app / "benchmod.py").write_text(textwrap.dedent(TARGET_MODULE))
    try:
        import torch  # noqa: F401

        torch_modes = ["notorch", "torch"]
    except ImportError:
        torch_modes = ["notorch"]
    results: dict[str, dict[str, float]] = {}
    for mode in torch_modes:
        results[f"sampled_out_{mode}"] = per_call(work, app, 0, mode, number)
        results[f"logged_{mode}"] = per_call(work, app, 10**9, mode, number // 10)
    start = startup(work, app, 10 if args.quick else 40)
    shutil.rmtree(work, ignore_errors=True)

    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
          f"torch: {'yes' if 'torch' in torch_modes else 'no'}")
    print()
    print("| scenario | arg | plain us | probed us | probed / plain | overhead us "
          "| wrapt us | wrapt / plain | probed / wrapt |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key, r in results.items():
        kind, _, mode = key.rpartition("_")
        arg = "CPU tensor 4x8" if mode == "torch" else "list of 3"
        label = kind.replace("_", "-") + (" (torch imported)" if mode == "torch" else "")
        print(f"| {label} | {arg} | {r['plain']:.3f} | {r['probed']:.3f} | "
              f"{r['probed'] / r['plain']:.1f}x | {r['probed'] - r['plain']:.3f} | "
              f"{r['wrapped']:.3f} | {r['wrapped'] / r['plain']:.1f}x | "
              f"{r['probed'] / r['wrapped']:.2f}x |")
    print()
    print("| start-up (`python -c pass`, median) | ms | added ms | ratio |")
    print("|---|---|---|---|")
    for key, ms in start.items():
        print(f"| {key} | {ms:.1f} | {ms - start['plain']:+.1f} | {ms / start['plain']:.2f}x |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"per_call_us": results, "startup_ms": start}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
