"""GPU check of the probe runtime: CUDA graph capture and torch.compile(fullgraph=True).

Run on a machine with a CUDA GPU and torch, from the repository root::

    python bench/gpu_probe_check.py [--out report.md]

It writes a probe bundle for three small functions, then runs one "engine"
program twice (without and with the bundle on PYTHONPATH) that calls them
eagerly on the GPU, while a CUDA graph is captured (then replays it), and
inside a ``torch.compile(fullgraph=True)`` region (inductor). It checks that:

* the program's output is byte-identical with and without the probes;
* capture and compile complete, and replay/compiled results match eager;
* records taken during capture are metadata-only (``mode: meta``: shapes and
  dtypes, no values, expressions skipped; ``x.sum().item()`` would have
  broken the capture), eager records of device tensors hold no values either;
* calls inside the compiled region pass through (no records, not counted);
* every target was instrumented in place (status ``patched``): the runtime
  compiles the function's own source into its ``__code__``, so dynamo traces
  the prologue, which folds away under ``torch.compiler.is_compiling()``.

Without CUDA it still runs the compile part on CPU (backend ``eager``) so the
script itself can be tried anywhere; the report says which mode ran.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from recon.probes import build_spec, new_bundle, read_logs  # noqa: E402

MODULE = """
import torch

def scale(x, factor):
    return x * factor

def add_bias(x, bias):
    return x + bias

class Block(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = torch.nn.Linear(n, n)

    def forward(self, x):
        return add_bias(scale(self.lin(x), 0.5), 1.0)
"""

ENGINE = """
import sys, torch, gpumod
cuda = torch.cuda.is_available()
dev = "cuda" if cuda else "cpu"
torch.manual_seed(0)
block = gpumod.Block(64).to(dev)
x = torch.randn(8, 64, device=dev)
with torch.no_grad():
    eager = block(x)
    print("eager", tuple(eager.shape), eager.dtype)
    if cuda:
        static_x = x.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                block(static_x)  # warm-up on a side stream, as capture requires
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = block(static_x)
        graph.replay()
        torch.cuda.synchronize()
        print("cuda graph replay matches eager:", torch.allclose(static_out, eager, atol=1e-5))
    backend = "inductor" if cuda else "eager"
    compiled = torch.compile(block, fullgraph=True, backend=backend)
    out = compiled(x)
    out2 = compiled(x * 2)
    print("compile fullgraph", backend, "matches eager:", torch.allclose(out, eager, atol=1e-4),
          torch.allclose(out2, block(x * 2), atol=1e-4))
print("done")
"""

TARGETS = ["gpumod:scale", "gpumod:add_bias", "gpumod:Block.forward"]


def run(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=420)
    return proc, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="also write the report (Markdown) here")
    args = parser.parse_args()
    report: list[str] = []

    def say(line: str = "") -> None:
        print(line, flush=True)
        report.append(line)

    import torch

    cuda = torch.cuda.is_available()
    say(f"torch {torch.__version__}, CUDA available: {cuda}"
        + (f", device: {torch.cuda.get_device_name(0)}" if cuda else ""))
    say(f"python {sys.version.split()[0]}")
    work = Path(tempfile.mkdtemp(prefix="recon-gpu-check-"))
    app = work / "app"
    app.mkdir()
    (app / "gpumod.py").write_text(textwrap.dedent(MODULE))
    (app / "engine.py").write_text(textwrap.dedent(ENGINE))
    spec = build_spec(TARGETS, log=["args", "return"], first=1000,
                      exprs=["gpumod:scale::total=x.sum().item()"],
                      log_dir=str(work / "logs"))
    bundle = new_bundle(work / "bundle", spec).path
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("RECON_PROBE")}
    plain_env = dict(base_env, PYTHONPATH=str(app))
    probed_env = dict(base_env, PYTHONPATH=f"{bundle}{os.pathsep}{app}")
    plain, t_plain = run([sys.executable, "engine.py"], app, plain_env)
    probed, t_probed = run([sys.executable, "engine.py"], app, probed_env)
    say("")
    say(f"plain run: exit {plain.returncode}, {t_plain:.1f} s; probed run: exit "
        f"{probed.returncode}, {t_probed:.1f} s")
    say("program output (probed run):")
    say("```")
    say(probed.stdout.rstrip())
    say("```")
    failures = []
    if plain.returncode or probed.returncode:
        failures.append("a run failed:\n" + plain.stderr[-3000:] + "\n" + probed.stderr[-3000:])
    if plain.stdout != probed.stdout:
        failures.append("program output differs with the probes")
    if "False" in probed.stdout:
        failures.append("a result did not match eager")

    summary = read_logs(work / "logs")
    calls = [json.loads(line) for p in sorted((work / "logs").glob("*.jsonl"))
             for line in p.read_text().splitlines()]
    call_recs = [r for r in calls if r["kind"] == "call"]
    meta = [r for r in call_recs if r.get("mode") == "meta"]
    full = [r for r in call_recs if r.get("mode") != "meta"]
    engine_pids = {r["pid"] for r in calls
                   if r["kind"] == "VERIFY" and r["argv"][1:] == ["engine.py"]}
    # other processes (inductor's compile workers) load the bundle too; they call nothing
    exits = [r for r in calls if r["kind"] == "EXIT" and r["pid"] in engine_pids]
    say("")
    say(f"records: {len(call_recs)} calls ({len(meta)} metadata-only during capture, "
        f"{len(full)} eager), errors swallowed: {sum(p.errors for p in summary.processes)}")
    say(f"processes that loaded the bundle: {len(summary.processes)} (engine: {len(exits)})")
    say(f"engine EXIT call counts: {exits[-1]['calls'] if exits else 'missing'}")
    # the engine's own processes: inductor's compile workers load the bundle but never import the
    # targets' module, so theirs stay "pending" (the first GPU run read theirs and failed so)
    statuses = {q: s for p in summary.processes if p.pid in engine_pids
                for q, s in p.targets.items()}
    if any(statuses.get(q) != "patched" for q in TARGETS):
        failures.append(f"targets not instrumented in place: {statuses}")
    if cuda and not meta:
        failures.append("no metadata-only records from the CUDA graph capture")
    for rec in meta:
        wanted = {"skipped": "CUDA graph capture"} if rec["target"] == "gpumod:scale" else None
        if rec.get("expr") != wanted:
            failures.append(f"capture record evaluated expressions: {rec}")
        if "values" in json.dumps(rec):
            failures.append(f"capture record holds values: {rec}")
    for rec in full:
        if rec["target"] == "gpumod:scale" and "total" not in rec.get("expr", {}):
            failures.append(f"eager record lacks its expression: {rec}")
        if cuda and "values" in json.dumps(rec.get("args", {})):
            failures.append(f"device tensor values were read: {rec}")
    # eager: block(x) once (+ two warm-ups on CUDA) and block(x*2) for the comparison; the
    # capture adds one; compiled calls add nothing.
    expected = {q: (1 + 2 + 1 + 1) if cuda else (1 + 1) for q in TARGETS}
    if exits and exits[-1]["calls"] != expected:
        failures.append(f"call counts {exits[-1]['calls']} != expected {expected} "
                        "(compiled calls must pass through uncounted)")
    say("")
    say("one eager record and one capture record:")
    say("```")
    for rec in (full[:1] + meta[:1]):
        say(json.dumps({k: v for k, v in rec.items() if k not in ("t", "tid", "pid")}))
    say("```")
    say("")
    say(summary.to_markdown().replace("# Probe logs", "### Probe logs"))
    say("RESULT: " + ("PASS" if not failures else "FAIL"))
    for failure in failures:
        say("- " + failure)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(report) + "\n")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
