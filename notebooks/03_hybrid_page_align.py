# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Hybrid attention/mamba page alignment for two real model configs
#
# Field notes, seeds 000 and 004: for hybrid models vLLM raises the attention block
# size until an attention page is at least a mamba page, then pads the mamba page so
# both are equal, and logs `Setting attention block size to N tokens` and
# `Padding mamba page size by X%`. Those numbers follow from `config.json` and the
# serve flags through `Platform._align_hybrid_block_size` and the model class's
# mamba state-shape functions. The `vllm-hybrid-page-align` recipe runs exactly
# that code from the release; here we predict the two log lines for two configs
# from `examples/configs/`, then sweep `--block-size`.

# %%
# ruff: noqa: E402  (a notebook imports in the cell that first needs a module)
import os
import tempfile
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")

from recon.recipes import run_recipe
from recon.snapcache import ensure_snapshot

CONFIGS = Path(__file__).resolve().parent.parent / "examples" / "configs" if "__file__" in globals() \
    else Path("../examples/configs").resolve()
MODELS = {
    "Qwen3-Next-80B-A3B (TP 4)": ("qwen3-next-80b-a3b-instruct.json", "--tensor-parallel-size 4"),
    "Nemotron-H-8B (TP 1)": ("nemotron-h-8b-base-8k.json", ""),
}
snap = ensure_snapshot("pip:vllm==0.33.0")
print(snap.name)

# %% [markdown]
# ## What the release will log at startup, with default flags

# %%
for label, (cfg, extra) in MODELS.items():
    # slicing mode shows the page arithmetic step by step; engine mode (the default,
    # docs/engine-mode.md) gives the release's own numbers under identifier keys
    r = run_recipe("vllm-hybrid-page-align", snap, config=CONFIGS / cfg,
                   flags=f"vllm serve model {extra}", options={"mode": "slice"})
    v = r.values
    print(f"== {label}: {v['architecture']}")
    for key in ["attention block size (tokens)", "mamba page size (bytes)",
                "attention page size (bytes)", "mamba padding", "mamba state shapes (per GPU)"]:
        print(f"   {key:32} {v[key]}")
    for f in r.findings:
        if "logged" in f.text:
            print(f"   {f.text}")
    p = r.provenance[0]
    print(f"   ran {p.qualname} at {p.file}:{p.line} sha256 {p.sha256[:12]}")

# %% [markdown]
# ## Padding percentage against the requested block size
#
# `--block-size` is the starting point; the release rounds the attention block size
# up (in multiples of the kernel alignment) until the attention page covers the
# mamba page, and pads the mamba page by the rest.

# %%
BLOCK_SIZES = [16, 32, 64, 128]
sweep = {}
print(f"{'model':28} {'--block-size':>12} {'attn block':>10} {'padding':>8}")
for label, (cfg, extra) in MODELS.items():
    sweep[label] = []
    for bs in BLOCK_SIZES:
        r = run_recipe("vllm-hybrid-page-align", snap, config=CONFIGS / cfg,
                       flags=f"vllm serve model {extra} --block-size {bs}",
                       options={"mode": "slice"})
        attn = r.values["attention block size (tokens)"]
        pad = float(str(r.values["mamba padding"]).rstrip("%"))
        sweep[label].append((bs, attn, pad))
        print(f"{label:28} {bs:>12} {attn:>10} {pad:>7.2f}%")

# %%
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(6, 3.5))
for label, rows in sweep.items():
    ax.plot([b for b, _, _ in rows], [p for _, _, p in rows], marker="o", label=label)
    for b, attn, p in rows:
        ax.annotate(str(attn), (b, p), textcoords="offset points", xytext=(4, 4), fontsize=7)
ax.set_xscale("log", base=2)
ax.set_xlabel("--block-size (tokens); labels: resulting attention block size")
ax.set_ylabel("mamba page padding (%)")
ax.set_title(f"hybrid page alignment, {snap.manifest['package']['name']} "
             f"{snap.manifest['package']['version']}")
ax.legend(fontsize=8)
fig.tight_layout()
out = Path(tempfile.gettempdir()) / "hybrid_page_align.png"
fig.savefig(out)
print("figure:", out)
