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
# # KV cache pool size against GPU memory
#
# Field notes, KV capacity: at start-up vLLM logs `Available KV cache memory: X GiB`,
# then `GPU KV cache size: N tokens` and `Maximum concurrency for L tokens per
# request: Cx`. The last two follow from `config.json`, the serve flags and X by the
# release's own code (KV cache specs per layer, `get_kv_cache_configs`, the
# scheduler's block pool), so they can be predicted before a restart: what a longer
# `--max-model-len` or a smaller GPU costs. The `kv-capacity` recipe runs that code;
# here we run it for a dense and a hybrid model over a range of KV memory.
#
# These numbers are not proof of safety: prefill activation peaks are outside them.

# %%
# ruff: noqa: E402  (a notebook imports in the cell that first needs a module)
import tempfile
from pathlib import Path

from recon.recipes import run_recipe
from recon.snapshots.cache import ensure_snapshot

snap = ensure_snapshot("pip:vllm==0.33.0")
RELEASE = f"{snap.package} {snap.version}"
# `example:NAME` is a config.json shipped with recon (package data), found from any folder.
# Slicing mode reads prefix caching from the flags only; vLLM 0.33.0 turns it on by
# default for Qwen3-Next (mamba align mode, a different block size: notebook 03), so the
# hybrid model's command line says --no-enable-prefix-caching and both modes agree.
MODELS = {
    "Llama-3.1-8B (TP 1, 128K)": (
        "example:llama-3.1-8b-instruct",
        "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 131072"),
    "Qwen3-Next-80B-A3B (TP 4, 256K)": (
        "example:qwen3-next-80b-a3b-instruct",
        "vllm serve Qwen/Qwen3-Next-80B-A3B-Instruct --tensor-parallel-size 4 "
        "--max-model-len 262144 --no-enable-prefix-caching"),
}
KV_GIB = [10, 20, 40]   # the 'Available KV cache memory' per GPU
FIGURES = Path(tempfile.gettempdir())   # a copy of each figure lands here too
print(snap.name)

# %% [markdown]
# ## The sweep (slicing mode)
#
# Slicing mode runs the release's spec classes and start-up chain as functions in
# recon's sandbox, with CPU torch for the dtype sizes; `--set available_kv_gib=X`
# (here `options={"available_kv_gib": X}`) is the memory line of your log. When the
# memory cannot hold one request of `--max-model-len` tokens, the release's
# `get_kv_cache_configs` raises, as the server would at start-up, and says which
# model length would fit.

# %%
from recon import ReconError

REFUSAL = "To serve at least one request"   # the start of the release's own error


def concurrency(values: dict) -> float:
    return next(v for k, v in values.items() if k.startswith("maximum concurrency"))


capacity = {}   # model -> [(GiB, tokens, max concurrency)]
refused = {}    # model -> [GiB at which the release refuses to start]
print(f"{'model':32} {'KV GiB':>6} {'blocks':>7} {'tokens':>9} {'tokens/GiB':>10} {'concurrency':>11}")
for model, (config, flags) in MODELS.items():
    capacity[model], refused[model] = [], []
    for gib in KV_GIB:
        try:
            r = run_recipe("kv-capacity", snap, config=config, flags=flags,
                           options={"available_kv_gib": gib, "mode": "slice"})
        except ReconError as err:
            if REFUSAL not in str(err):
                raise
            refused[model].append(gib)
            print(f"{model:32} {gib:>6}  the release refuses to start: "
                  + str(err)[str(err).index(REFUSAL):].split(". Try")[0])
            continue
        v = r.values
        tokens, conc = v["GPU KV cache size (tokens)"], concurrency(v)
        capacity[model].append((gib, tokens, conc))
        print(f"{model:32} {gib:>6} {v['KV cache blocks (num_blocks)']:>7} {tokens:>9} "
              f"{v['tokens per GiB of KV memory']:>10} {conc:>10}x")
    per_layer = next(t for t in r.tables if t.title.startswith("KV cache per layer"))
    print("   " + " | ".join(per_layer.columns))
    for row in per_layer.rows:
        print("   " + " | ".join(str(c) for c in row))

# %% [markdown]
# A dense model spends its KV memory per token on every layer; the hybrid model only
# on its few full-attention layers (its mamba layers hold a fixed state per request),
# so it fits an order of magnitude more tokens per GiB.
#
# ## One point again, with the whole release deciding (engine mode)
#
# Engine mode (the default, docs/engine-mode.md) runs the release's own argument
# parsing and start-up path, one environment per release.

# %%
model = "Llama-3.1-8B (TP 1, 128K)"
gib = 40
tokens, conc = {g: (t, c) for g, t, c in capacity[model]}[gib]
config, flags = MODELS[model]
engine = run_recipe("kv-capacity", snap, config=config, flags=flags,
                    options={"available_kv_gib": gib}).values
print(f"{model} at {gib} GiB: slicing mode {tokens} tokens, {conc}x; "
      f"engine mode {engine['kv_cache_tokens']} tokens, {engine['max_concurrency']:.2f}x")
assert engine["kv_cache_tokens"] == tokens and round(engine["max_concurrency"], 2) == conc

# %% [markdown]
# ## Picture: tokens in the KV pool and full-length requests against KV memory
#
# Left: `GPU KV cache size` (tokens). Right: `Maximum concurrency` at
# `--max-model-len` tokens per request. A cross on the axis: the release refuses
# to start with that much KV memory.

# %%
import matplotlib.pyplot as plt

fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
for model, rows in capacity.items():
    gibs = [g for g, _, _ in rows]
    line, = left.plot(gibs, [t / 1e6 for _, t, _ in rows], marker="o", label=model)
    right.plot(gibs, [c for _, _, c in rows], marker="o", color=line.get_color(), label=model)
    for g, t, c in rows:
        left.annotate(f"{t / 1e6:.2f}M", (g, t / 1e6), textcoords="offset points", xytext=(-8, 6),
                      fontsize=7)
        right.annotate(f"{c:g}x", (g, c), textcoords="offset points", xytext=(-8, 6), fontsize=7)
    for ax in (left, right):
        ax.scatter(refused[model], [0] * len(refused[model]), marker="x", s=80, clip_on=False,
                   color=line.get_color(), transform=ax.get_xaxis_transform(), zorder=3)
right.axhline(1, color="r", ls="--", lw=0.8, label="one request of --max-model-len")
for ax in (left, right):
    ax.set_xlim(0, max(KV_GIB) * 1.08)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("available KV cache memory per GPU (GiB)")
left.set_ylabel("GPU KV cache size (million tokens)")
left.set_title("KV pool size", fontsize=10)
right.set_ylabel("maximum concurrency (requests)")
right.set_title("full-length requests that fit (x: refuses to start)", fontsize=10)
right.legend(fontsize=7)
fig.suptitle(f"kv-capacity, {RELEASE}", fontsize=10)
fig.tight_layout()
fig.savefig(FIGURES / "kv_capacity_vs_memory.png")
plt.show()
