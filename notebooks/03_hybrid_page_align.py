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
# # Hybrid attention/mamba page alignment for two real model configs
#
# Field notes, seeds 000 and 004: for hybrid models vLLM raises the attention block
# size until an attention page is at least a mamba page, then pads the mamba page so
# both are equal, and logs `Setting attention block size to N tokens` and
# `Padding mamba page size by X%`. Those numbers follow from `config.json` and the
# serve flags through `Platform._align_hybrid_block_size` and the model class's
# mamba state-shape functions. The `vllm-hybrid-page-align` recipe runs exactly
# that code from the release. Here, for two configs shipped with recon
# (`recon.examples`), we predict the two log lines, then see how the attention
# block size moves with `--tensor-parallel-size` and with prefix caching, and
# sweep `--block-size`.

# %%
# ruff: noqa: E402  (a notebook imports in the cell that first needs a module)
import tempfile
from pathlib import Path

from recon.recipes import run_recipe
from recon.snapshots.cache import ensure_snapshot

snap = ensure_snapshot("pip:vllm==0.33.0")
RELEASE = f"{snap.package} {snap.version}"
# `example:NAME` is a config.json shipped with recon (package data), found from any folder.
# checkpoint_alignment: the token alignment of the prefill checkpoints the model's mamba
# layers export in align mode (Qwen3-Next's GDN layers under FlashInfer's prefill on
# Hopper: 64; Nemotron-H's mamba2 layers: none). prefix_caching: the settings swept below
# (Nemotron-H's block size is the same with and without it)
MODELS = {
    "Qwen3-Next-80B-A3B": {"config": "example:qwen3-next-80b-a3b-instruct", "tp": 4,
                           "checkpoint_alignment": 64, "prefix_caching": [True, False]},
    "Nemotron-H-8B": {"config": "example:nemotron-h-8b-base-8k", "tp": 1,
                      "checkpoint_alignment": None, "prefix_caching": [True]},
}
FIGURES = Path(tempfile.gettempdir())   # a copy of each figure lands here too
print(snap.name)

# %% [markdown]
# ## What the release logs at startup, with default flags (engine mode)
#
# Engine mode (the default, docs/engine-mode.md) lets the whole release decide:
# its own argument parsing, defaults and start-up path, one environment per release.
# This is the Qwen3-Next deployment of the field notes, at TP 4 and otherwise
# default flags.

# %%
engine = run_recipe("vllm-hybrid-page-align", snap, config=MODELS["Qwen3-Next-80B-A3B"]["config"],
                    flags="vllm serve Qwen/Qwen3-Next-80B-A3B-Instruct --tensor-parallel-size 4")
for key in ["attention_block_size", "mamba_padding_pct", "enable_prefix_caching",
            "mamba_cache_mode", "mamba_page_size_padded"]:
    print(f"{key:24} {engine.values[key]}")
for f in engine.findings:
    if "logged" in f.text:
        print(f.text)

# %% [markdown]
# The release turned prefix caching on by default, and with it the mamba cache's
# `align` mode, in which the block size must also be a multiple of the mamba
# layers' prefill checkpoint alignment.
#
# ## The arithmetic step by step, across tensor-parallel sizes (slicing mode)
#
# Slicing mode runs the alignment function itself on recon's reading of the flags,
# and shows the pages it compares. It reads prefix caching from the flags only
# (so we spell out `--enable-prefix-caching` / `--no-enable-prefix-caching`) and
# takes the checkpoint alignment from `--set mamba_checkpoint_alignment`.

# %%
TP_SIZES = [1, 2, 4, 8]


def page_align(model: str, tp: int, prefix_caching: bool, block_size: int | None = None):
    m = MODELS[model]
    flags = (f"vllm serve model --tensor-parallel-size {tp} "
             + ("--enable-prefix-caching" if prefix_caching else "--no-enable-prefix-caching")
             + (f" --block-size {block_size}" if block_size else ""))
    options = {"mode": "slice"}
    if prefix_caching and m["checkpoint_alignment"]:
        options["mamba_checkpoint_alignment"] = m["checkpoint_alignment"]
    return run_recipe("vllm-hybrid-page-align", snap, config=m["config"], flags=flags,
                      options=options)


def padding(r) -> float:
    return float(str(r.values["mamba padding"]).rstrip("%"))


by_tp = {}   # (model, prefix caching on?) -> [(tp, attention block size, padding %)]
print(f"{'model':19} {'prefix cache':>12} {'TP':>2} {'KV heads/GPU':>12} {'mamba page':>10} "
      f"{'attn page/token':>15} {'attn block':>10} {'padding':>8}  mamba state shapes (per GPU)")
for model in MODELS:
    for pc in MODELS[model]["prefix_caching"]:
        rows = by_tp[(model, pc)] = []
        for tp in TP_SIZES:
            r = page_align(model, tp, pc)
            v = r.values
            rows.append((tp, v["attention block size (tokens)"], padding(r)))
            print(f"{model:19} {'on' if pc else 'off':>12} {tp:>2} {v['KV heads per GPU']:>12} "
                  f"{v['mamba page size (bytes)']:>10} {v['attention page per token (bytes)']:>15} "
                  f"{v['attention block size (tokens)']:>10} {v['mamba padding']:>8}  "
                  f"{v['mamba state shapes (per GPU)']}")
            if model == "Qwen3-Next-80B-A3B" and tp == 4 and pc:
                sliced = r

# %% [markdown]
# Both ways agree on the deployment of the field notes (a check, not a given: the
# slicing mode's reading of the flags is recon's own):

# %%
pair = [(engine.values["attention_block_size"], round(engine.values["mamba_padding_pct"], 2)),
        (sliced.values["attention block size (tokens)"], padding(sliced))]
print("engine mode:", pair[0], " slicing mode:", pair[1])
assert pair[0] == pair[1], pair
p = sliced.provenance[0]
print(f"ran {p.qualname} at {p.file}:{p.line} sha256 {p.sha256[:12]}")

# %% [markdown]
# ## Picture: attention block size against tensor-parallel size
#
# Each GPU holds `1/TP` of the mamba heads, so the mamba page halves with every
# doubling of TP. The attention page per token halves too only while the KV heads
# can still be split: Qwen3-Next has 2 KV heads, one per GPU at TP 2, and beyond
# that the one KV head is replicated, so the attention page per token stops
# shrinking while the mamba page keeps halving, and the block size that covers it
# falls. Nemotron-H-8B has 8 KV heads and keeps the same block size up to TP 8.
# Labels: mamba page padding.

# %%
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(7, 4))
for (model, pc), rows in by_tp.items():
    ax.plot([tp for tp, _, _ in rows], [b for _, b, _ in rows], marker="o", ls="-" if pc else "--",
            label=f"{model}, prefix caching {'on (align)' if pc else 'off'}")
    for tp, b, pad in rows:
        ax.annotate(f"{pad:.1f}%", (tp, b), textcoords="offset points", xytext=(4, 4), fontsize=7)
ax.set_xscale("log", base=2)
ax.set_xticks(TP_SIZES, [str(t) for t in TP_SIZES])
ax.set_xlabel("--tensor-parallel-size")
ax.set_ylabel("attention block size (tokens)")
ax.set_title(f"hybrid page alignment across TP, {RELEASE}")
ax.legend(fontsize=7)
fig.tight_layout()
fig.savefig(FIGURES / "hybrid_block_size_vs_tp.png")
plt.show()

# %% [markdown]
# ## Padding percentage against the requested block size
#
# `--block-size` is the starting point; the release rounds the attention block size
# up (in multiples of the kernel alignment) until the attention page covers the
# mamba page, and pads the mamba page by the rest. Prefix caching off, each model
# at its TP above.

# %%
BLOCK_SIZES = [16, 32, 64, 128]
sweep = {}
print(f"{'model':28} {'--block-size':>12} {'attn block':>10} {'padding':>8}")
for model, m in MODELS.items():
    label = f"{model} (TP {m['tp']})"
    sweep[label] = []
    for bs in BLOCK_SIZES:
        r = page_align(model, m["tp"], False, block_size=bs)
        attn = r.values["attention block size (tokens)"]
        sweep[label].append((bs, attn, padding(r)))
        print(f"{label:28} {bs:>12} {attn:>10} {padding(r):>7.2f}%")

# %%
fig, ax = plt.subplots(figsize=(6, 3.5))
for label, rows in sweep.items():
    ax.plot([b for b, _, _ in rows], [p for _, _, p in rows], marker="o", label=label)
    for b, attn, p in rows:
        ax.annotate(str(attn), (b, p), textcoords="offset points", xytext=(4, 4), fontsize=7)
ax.set_xscale("log", base=2)
ax.set_xticks(BLOCK_SIZES, [str(b) for b in BLOCK_SIZES])
ax.set_xlabel("--block-size (tokens); labels: resulting attention block size")
ax.set_ylabel("mamba page padding (%)")
ax.set_title(f"hybrid page alignment, {RELEASE}")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(FIGURES / "hybrid_page_align.png")
plt.show()
