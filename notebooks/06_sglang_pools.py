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
# # SGLang's KV pool with and without a speculative draft
#
# Field notes, the SGLang DFLASH thread: on a 27B hybrid model, turning DFLASH on
# shrank the KV pool from 610,050 to 364,655 tokens. Two requests of 200K tokens
# (400K together) fit the first pool and not the second: they queued. The pool is
# what SGLang sizes at start-up from the free GPU memory it measures before and
# after loading the weights (`Load weight begin/end. avail mem=...`), the
# `mem_fraction_static` it resolved, the per-token KV bytes of every attention
# layer, the draft model's own KV layers, and, for hybrid models, the mamba state
# slots that share the budget.
#
# The recipe `sglang-memory-pools` runs the release's own sizing
# (`KVCacheConfigurator`) for a command line, a `config.json` and those memory
# figures. The thread's model config was not published, so this notebook asks the
# same question on public configs: Qwen3-8B with its DFlash draft
# (`z-lab/Qwen3-8B-DFlash-b16`), and the Qwen3-Next hybrid with its NEXTN (MTP)
# draft, over a range of free memory.

# %%
# ruff: noqa: E402  (a notebook imports in the cell that first needs a module)
import tempfile
from pathlib import Path

from recon.recipes import run_recipe
from recon.snapshots.cache import ensure_snapshot

snap = ensure_snapshot("pip:sglang==0.5.23")
RELEASE = f"{snap.package} {snap.version}"
PRE_LOAD_GB = 78.0                   # 'Load weight begin. avail mem=' on an 80 GB H100
AVAILABLE_GB = [30, 40, 50, 60, 70]  # 'Load weight end. avail mem=' after the weights
FIGURES = Path(tempfile.gettempdir())
LAUNCH = "python -m sglang.launch_server --model-path "
CASES = {
    "Qwen3-8B": ("example:qwen3-8b", LAUNCH + "Qwen/Qwen3-8B", None,
                 " --speculative-algorithm DFLASH --speculative-draft-model-path "
                 "z-lab/Qwen3-8B-DFlash-b16", "example:qwen3-8b-dflash-b16", "DFLASH"),
    "Qwen3-Next-80B-A3B (TP 4)": ("example:qwen3-next-80b-a3b-instruct",
                                  LAUNCH + "Qwen/Qwen3-Next-80B-A3B-Instruct --tp 4", None,
                                  " --speculative-algorithm NEXTN", None, "NEXTN"),
}
print(snap.name)

# %% [markdown]
# ## The sweep
#
# One recipe run per command line answers every memory figure (`available_gb` is a
# list); the release's own log lines come back as findings.

# %%
pools = {}   # (model, draft on?) -> [(available GB, tokens, running requests, mamba slots)]
for model, (config, flags, _, spec, draft, name) in CASES.items():
    for on in (False, True):
        options = {"gpu": "h100", "available_gb": AVAILABLE_GB, "pre_load_gb": PRE_LOAD_GB}
        if on and draft:
            options["draft_config"] = draft
        res = run_recipe("sglang-memory-pools", snap, config=config,
                         flags=flags + (spec if on else ""), options=options)
        rows = [(p["available_gb"], p["max_total_num_tokens"], p["max_running_requests"],
                 p.get("max_mamba_cache_size")) for p in res.values["points"]]
        pools[(model, on)] = rows
        print(f"{model:28} {name + ' on ' if on else 'no draft':>9}: "
              + ", ".join(f"{a:g} GB -> {t:,} tokens" for a, t, _, _ in rows))

# %% [markdown]
# ## What the draft costs at the same free memory
#
# The draft also loads weights, so on a real server its free memory after loading is
# lower than without it (the log shows both figures); the ratio below is at the same
# figure, the KV and state cost alone.

# %%
for model in CASES:
    off, on = pools[(model, False)], pools[(model, True)]
    for (a, t0, r0, m0), (_, t1, r1, m1) in zip(off, on, strict=True):
        slots = f", mamba slots {m0} -> {m1}" if m0 is not None else ""
        print(f"{model:28} {a:>4g} GB: {t0:>9,} -> {t1:>9,} tokens ({t1 / t0:.0%}), "
              f"running requests {r0} -> {r1}{slots}")

# %% [markdown]
# The dense model loses the draft's share of every token (5 DFlash layers beside 36).
# The hybrid model shows the other side of speculative decoding in this release: the
# speculative defaults cap `max_running_requests` (48 here), the mamba state pool is
# solved for fewer slots (with room for the per-step intermediate states), and the
# KV pool gets the rest; the NEXTN draft's own KV layer is allocated afterwards by
# the draft worker, at the target's token count, out of what is left.
#
# ## Picture: pool size against free memory, draft off and on
#
# The dashed line is two 200K-token requests: below it they cannot run together.

# %%
import matplotlib.pyplot as plt

fig, axes = plt.subplots(1, len(CASES), figsize=(11, 3.8))
for ax, model in zip(axes, CASES, strict=True):
    draft_name = CASES[model][5]
    for on, style in ((False, "o-"), (True, "s--")):
        rows = pools[(model, on)]
        ax.plot([a for a, *_ in rows], [t / 1e6 for _, t, _, _ in rows], style,
                label=f"{draft_name} on" if on else "no draft")
    ax.axhline(0.4, color="r", lw=0.8, ls=":", label="2 x 200K tokens")
    ax.set_xlabel("free memory after the weights (GB, per GPU)")
    ax.set_ylabel("KV pool (million tokens)")
    ax.set_title(model, fontsize=10)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7)
fig.suptitle(f"sglang-memory-pools, {RELEASE}, H100, {PRE_LOAD_GB:g} GB free before the weights",
             fontsize=10)
fig.tight_layout()
fig.savefig(FIGURES / "sglang_pools_vs_memory.png")
plt.show()

# %% [markdown]
# For your own server: take the two `avail mem=` figures from its log and run
#
# ```bash
# recon recipe run sglang-memory-pools --snapshot pip:sglang==0.5.23 --config config.json \
#   --set available_gb=X --set pre_load_gb=Y [--set draft_config=draft.json] \
#   --flags "python -m sglang.launch_server ..."
# ```
#
# or `recon logs server.log --config config.json`, which takes them from the log and
# compares every pool line it printed.
