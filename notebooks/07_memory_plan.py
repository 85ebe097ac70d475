# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Where the GPU's memory goes, before the engine starts
#
# Field notes, KV capacity and the 93K-token prefill: every start-up log prints
# `Model loading took X GiB` and `Available KV cache memory: Y GiB`, and a long prompt
# can still run out of memory after a clean start. recon's memory plan runs the
# release's own start-up (its `request_memory`, `load_model`, `profile_run` and
# `determine_available_memory`) on meta tensors and counts what each part takes, so the
# budget is known before the engine runs. Here: Llama-3.1-8B on vLLM 0.26.0, the two
# questions of the README (an RTX 4090 at 8,192 context; an H100 at 131,072 context with
# a 93,199-token prompt).

# %%
# ruff: noqa: E402  (a notebook imports in the cell that first needs a module)
import json
import tempfile
from pathlib import Path

from recon import examples
from recon.engine.config import engine_config
from recon.snapshots.cache import ensure_snapshot

snap = ensure_snapshot("pip:vllm==0.26.0")
CONFIG = json.loads(examples.path("llama-3.1-8b-instruct").read_text())
SERVE = "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len {}"
CASES = {  # label: (board, max_model_len, prompt tokens or None)
    "RTX 4090, 8,192 context": ("rtx4090", 8192, None),
    "H100, 131,072 context, 93,199-token prompt": ("h100", 131072, 93199),
}
FIGURES = Path(tempfile.gettempdir())   # a copy of the figure lands here too
print(snap.name)

# %% [markdown]
# ## The plans
#
# Each answer is the release's own arithmetic on what the count found; the assumptions
# recon made (memory outside torch, the CUDA context, the CUDA graph estimate) are
# printed with their sources.

# %%
plans = {}
for label, (board, context, prompt) in CASES.items():
    facts = engine_config(snap, SERVE.format(context), CONFIG, gpu=board, memory_plan=True,
                          prompt_tokens=prompt)
    plans[label] = facts.facts
    print(f"{label}: starts={facts.facts['starts']}")
    for line in facts.assumptions:
        print("   assumed:", line[:150])
KEYS = ["total_memory_gib", "requested_memory_gib", "weights_gib", "activation_peak_gib",
        "non_torch_gib", "cudagraph_memory_gib", "available_kv_gib", "kv_cache_tokens",
        "prompt_fits", "prefill_peak_gib", "prefill_free_gib"]
for key in KEYS:
    print(f"{key:22s}", "  ".join(f"{str(p.get(key)):>12s}" for p in plans.values()))

# %% [markdown]
# ## The budget, stacked
#
# One bar per question: the weights, the profile run's activation peak, memory outside
# torch, the CUDA graphs, and the KV cache the rest leaves, up to the share the engine
# asks for (`--gpu-memory-utilization` x total); the grey end is what it leaves to the
# rest of the device. The marker on the second bar: the prompt's costliest chunk against
# what is free while serving.

# %%
import matplotlib.pyplot as plt

PARTS = [("weights_gib", "weights"), ("activation_peak_gib", "activation peak (profile)"),
         ("non_torch_gib", "outside torch"), ("cudagraph_memory_gib", "CUDA graphs"),
         ("available_kv_gib", "KV cache")]
fig, ax = plt.subplots(figsize=(10, 2.8))
for row, plan in enumerate(plans.values()):
    left = 0.0
    for key, name in PARTS:
        width = max(float(plan.get(key) or 0), 0.0)
        bar = ax.barh(row, width, left=left, label=name if row == 0 else None,
                      color=f"C{PARTS.index((key, name))}")
        if width > 1.5:
            ax.bar_label(bar, labels=[f"{width:.1f}"], label_type="center", fontsize=7)
        left += width
    rest = float(plan["total_memory_gib"]) - left
    ax.barh(row, rest, left=left, color="0.85", label="not asked for" if row == 0 else None)
    if plan.get("prefill_peak_gib") is not None:
        serving_free = float(plan["prefill_free_gib"])
        peak = float(plan["prefill_peak_gib"])
        ax.annotate(f"prompt: {peak:.2f} GiB peak, {serving_free:.2f} GiB free",
                    (float(plan["total_memory_gib"]) - serving_free, row),
                    xytext=(0, 14), textcoords="offset points", fontsize=7, ha="center",
                    arrowprops={"arrowstyle": "->", "lw": 0.6})
ax.set_yticks(range(len(plans)), list(plans))
ax.set_xlabel("GiB (torch's total for the board)")
ax.legend(fontsize=7, ncols=3, loc="lower right")
ax.set_title(f"memory plan, Llama-3.1-8B, vllm {snap.version}", fontsize=10)
fig.tight_layout()
fig.savefig(FIGURES / "memory_plan_budget.png")
plt.show()
