# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # A probe bundle: written, checked, run, and its logs read back
#
# Field notes, probes: the safe way to watch an engine at runtime is a
# `sitecustomize.py` on `PYTHONPATH`, imported by every process, workers included;
# each target is instrumented in place, logs and returns the original result unchanged, and never raises.
#
# In production the bundle is mounted into the container
# (`-v bundle:/opt/recon-probe:ro -e PYTHONPATH=/opt/recon-probe`). Here there is no
# GPU and no engine, so we run the *release's own module* from a snapshot in a plain
# subprocess: `vllm.utils.math_utils:round_up`, the helper that
# `adjust_cudagraph_sizes_for_spec_decode` uses to round capture sizes (notebook 01).
# `vllm/utils/math_utils.py` imports with the standard library alone.

# %%
# ruff: noqa: E402  (a notebook imports in the cell that first needs a module)
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from recon.probes import build_spec, check_bundle, new_bundle, read_logs
from recon.snapshots.cache import ensure_snapshot

snap = ensure_snapshot("pip:vllm==0.33.0")
TARGET = "vllm.utils.math_utils:round_up"
work = Path(tempfile.mkdtemp(prefix="recon-nb-probe-"))
logdir = work / "logs"
print(snap.name, "->", work)

# %% [markdown]
# ## Write the bundle
#
# Validated against the snapshot: the target must exist with a supported kind, and
# modules that copy it with `from ... import round_up` get patched too.

# %%
spec = build_spec([TARGET], log=["args", "return"], env=["VLLM_USE_V1"], log_dir=str(logdir))
bundle = new_bundle(work / "bundle", spec, snapshot=snap)
print("bundle:", bundle.path)
print(sorted(p.name for p in Path(bundle.path).iterdir()))

# %% [markdown]
# ## Check it the way the container will load it
#
# A fresh interpreter with the bundle on `PYTHONPATH`; the target's module is not
# imported yet, so its status is `pending`.

# %%
check = check_bundle(bundle.path)
print("loaded:", check.loaded, "exit", check.returncode, f"{check.elapsed_ms:.0f} ms")
print(check.targets)
assert check.loaded and check.returncode == 0

# %% [markdown]
# ## Run the release's code under the probe
#
# The "engine" here is a two-process script: the parent and one child (as a worker
# would be) each import `vllm.utils.math_utils` from the snapshot and round the
# configured capture sizes to multiples of 4.

# %%
script = work / "fake_engine.py"
script.write_text(
    "import subprocess, sys\n"
    "from vllm.utils.math_utils import round_up\n"
    "sizes = [round_up(s, 4) for s in [1, 2, 4, 8, 16, 32, 64]]\n"
    "print('child' if 'child' in sys.argv else 'parent', sizes)\n"
    "if 'child' not in sys.argv:\n"
    "    subprocess.run([sys.executable, __file__, 'child'], check=True)\n"
)
env = dict(os.environ, VLLM_USE_V1="1",
           PYTHONPATH=os.pathsep.join([str(bundle.path), str(snap.root / "src")]))
proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                      timeout=120)
print(proc.stdout, proc.stderr[-2000:])
assert proc.returncode == 0

# %% [markdown]
# ## Read the logs back
#
# One JSONL file per process, each starting with a `VERIFY` record (pid, argv, the
# environment variables asked for, targets found and patched).

# %%
summary = read_logs(logdir)
for p in summary.processes:
    print(f"pid {p.pid} argv {p.argv[-1:]} env {p.env} verified={p.verified} targets={p.targets} "
          f"calls={p.calls}")
for t in summary.targets:
    print(f"{t.qualname}: patched in {t.patched_in} processes, {t.calls} calls, {t.logged} logged, "
          f"{t.raised} raised, {t.errors} probe errors")
    print("first record:", json.dumps(t.first)[:400])
assert summary.targets and summary.targets[0].calls == 14 and summary.bad_lines == 0

# %%
import shutil

shutil.rmtree(work, ignore_errors=True)
