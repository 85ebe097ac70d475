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
# # SGLang track-index math for a mixed prefill batch
#
# Field notes, SGLang track-index math: `_init_track_ssm_indices` in
# `sglang/srt/layers/attention/hybrid_linear_attn_backend.py` decides which chunk row
# of the intermediate state `h` each prefilling sequence snapshots:
# `num_h_states = (extend_seq_lens - 1) // chunk + 1`, offsets are the cumulative sum
# over the batch, `h_src = offset + len // chunk`. The investigator misread `h`'s
# dimensions three times. Here the release's own function runs on CPU torch with
# the batch's numbers (recipe `sglang-track-ssm`), and we check every index
# against `NT`, the number of chunk rows of `h`.

# %%
# ruff: noqa: E402  (a notebook imports in the cell that first needs a module)
import tempfile
from pathlib import Path

from recon import examples
from recon.recipes import run_recipe
from recon.snapshots.cache import ensure_snapshot

# a config.json shipped with recon (package data): found from any working directory;
# on the command line it is `--config example:qwen3-next-80b-a3b-instruct`
CONFIG = examples.path("qwen3-next-80b-a3b-instruct")
snap = ensure_snapshot("pip:sglang==0.5.23")
print(snap.name)

# %% [markdown]
# ## The batch from the thread: 4957 and 127 new tokens, chunk 64

# %%
res = run_recipe("sglang-track-ssm", snap, config=CONFIG, options={"extend_lens": [4957, 127]})
for key in ["chunk size", "chunk rows of h (NT)", "chunk offsets per sequence",
            "track_ssm_h_src", "track_ssm_h_dst"]:
    print(f"{key:28} {res.values[key]}")
for f in res.findings:
    print(f"{f.level:>5} {f.text}")
for p in res.provenance:
    print(f"ran {p.qualname} at {p.file}:{p.line} sha256 {p.sha256[:12]}")

assert res.values["track_ssm_h_src"] == [77, 79] and res.values["chunk rows of h (NT)"] == 80

# %% [markdown]
# ## Bounds table for a few mixed batches
#
# Each row: one sequence of one batch; `h_src` must be `< NT`.

# %%
BATCHES = [[4957, 127], [64, 65, 1, 300]]
results = {}
print(f"{'batch':>22} {'seq':>3} {'extend':>6} {'from':>11} {'src':>5} {'NT':>4}  verdict")
for lens in BATCHES:
    r = res if lens == [4957, 127] else run_recipe(
        "sglang-track-ssm", snap, config=CONFIG, options={"extend_lens": lens})
    results[tuple(lens)] = r
    nt = r.values["chunk rows of h (NT)"]
    per_seq = next(t for t in r.tables if t.title == "per sequence")
    for row in per_seq.rows:
        # columns: seq, extend, prefix, tracked, state from, src index, dst slot, verdict
        seq, extend, origin, src = row[0], row[1], row[4], row[5]
        verdict = "ok" if origin != "h" or src < nt else "OUT OF RANGE"
        print(f"{str(lens):>22} {seq:>3} {extend:>6} {origin:>11} {str(src):>5} {nt:>4}  {verdict}")

# %% [markdown]
# ## Picture: which chunk rows of `h` each sequence owns
#
# Sequence *i* owns rows `offset[i] .. offset[i+1]-1`; the dot is the row it snapshots.
# A sequence whose length is a multiple of the chunk takes its state from the final
# state instead (`track_ssm_final_src`), so it has no dot.

# %%
import matplotlib.pyplot as plt

fig, axes = plt.subplots(len(results), 1, figsize=(8, 1.4 * len(results) + 0.6))
for ax, (lens, r) in zip(axes, results.items(), strict=True):
    offsets = r.values["chunk offsets per sequence"]
    srcs = r.values["track_ssm_h_src"]
    for i in range(len(lens)):
        ax.broken_barh([(offsets[i], offsets[i + 1] - offsets[i])], (i - 0.4, 0.8), alpha=0.5)
    ax.scatter(srcs, r.values["tracked_seqs"], color="k", zorder=3, label="h_src")
    ax.axvline(r.values["chunk rows of h (NT)"], color="r", ls="--", label="NT")
    ax.set_yticks(range(len(lens)), [f"seq {i} ({n})" for i, n in enumerate(lens)])
    ax.set_title(f"batch {list(lens)}", fontsize=9)
axes[-1].set_xlabel("chunk row of h")
axes[0].legend(loc="upper left", fontsize=8)
fig.tight_layout()
fig.savefig(Path(tempfile.gettempdir()) / "sglang_track_ssm.png")   # a copy, beside the inline one
plt.show()
