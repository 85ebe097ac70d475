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
# # CUDA graph capture sizes under speculative decoding, across releases
#
# Field notes, "capture-size rounding": with MTP speculative
# decoding and `num_speculative_tokens=3`, vLLM's
# `CompilationConfig.adjust_cudagraph_sizes_for_spec_decode` rounds every
# `cudagraph_capture_sizes` entry up to a multiple of 4 (= 1 + 3 draft tokens) and
# drops those above `max_cudagraph_capture_size`. A decode step whose token count is
# larger than the largest captured size runs eagerly.
#
# Here we run the release's *own* method (byte-exact, from the wheel on PyPI) in
# recon's sandbox, for two releases, instead of re-typing it.
#
# There is no `vllm-capture-sizes` recipe in `recon/recipes/catalog/`, so this uses
# `recon.slicing.run_function` directly, with `self_attrs` as in the README.

# %%
# ruff: noqa: E402  (a notebook imports in the cell that first needs a module)
import os
import tempfile

os.environ.setdefault("MPLBACKEND", "Agg")

from recon.slicing import RunFailed, run_function
from recon.snapcache import ensure_snapshot

QUALNAME = "vllm.config.compilation:CompilationConfig.adjust_cudagraph_sizes_for_spec_decode"
CONFIGURED = [1, 2, 4, 8, 16, 32, 64]    # --compilation-config '{"cudagraph_capture_sizes": [...]}'
MAX_CAPTURE = 64                         # max_cudagraph_capture_size
NUM_SPEC_TOKENS = 3                      # --speculative-config '{"method": "mtp", "num_speculative_tokens": 3}'
QUERY_LEN = 1 + NUM_SPEC_TOKENS          # uniform_decode_query_len: tokens per request per decode step
RELEASES = ["vllm==0.32.0", "vllm==0.33.0"]

# %% [markdown]
# ## Run the release's method on our configured list

# %%
resolved = {}
for release in RELEASES:
    snap = ensure_snapshot(f"pip:{release}")   # cached in ~/.cache/recon after the first download
    res = run_function(
        snap, QUALNAME,
        args={"uniform_decode_query_len": QUERY_LEN},
        self_attrs={"cudagraph_capture_sizes": list(CONFIGURED),
                    "max_cudagraph_capture_size": MAX_CAPTURE},
    ).raise_for_error()
    sizes = res.mutated.get("cudagraph_capture_sizes", CONFIGURED)
    resolved[release] = sizes
    print(f"{release}: {CONFIGURED} -> {sizes}")
    for piece in res.provenance:
        print(f"    ran {piece.file}:{piece.start}-{piece.end}  sha256 {piece.sha256[:16]}  {piece.what}")

# %% [markdown]
# ## Which concurrency levels fall back to eager?
#
# With `QUERY_LEN` tokens per request per decode step, a batch of `n` decoding
# requests needs a graph of at least `n * QUERY_LEN` tokens; beyond the largest
# captured size the step runs eagerly.

# %%
print(f"{'requests':>8} {'tokens':>6} " + " ".join(f"{r:>14}" for r in RELEASES))
for n in [1, 2, 4, 8, 12, 16, 17, 24, 32]:
    tokens = n * QUERY_LEN
    cells = []
    for release in RELEASES:
        fits = [s for s in resolved[release] if s >= tokens]
        cells.append(f"graph {min(fits)}" if fits else "EAGER")
    print(f"{n:>8} {tokens:>6} " + " ".join(f"{c:>14}" for c in cells))

# %%
for release in RELEASES:
    largest = max(resolved[release])
    print(f"{release}: more than {largest // QUERY_LEN} concurrent decoding requests "
          f"(> {largest} tokens per step) run without CUDA graphs")
same = resolved[RELEASES[0]] == resolved[RELEASES[1]]
print("both releases resolve the list the same way" if same else "the releases differ")

# %% [markdown]
# ## The whole path, from the serve command line: recipe `vllm-capture-sizes`
#
# `run_function` above answers for one method. The `vllm-capture-sizes` recipe runs
# the release's size logic, the spec-decode rounding and the CUDA graph dispatcher
# from your real serve flags, for both model runners.

# %%
from recon.recipes import all_recipes, run_recipe

FLAGS = ("vllm serve Qwen/Qwen3-Next-80B-A3B-Instruct --max-num-seqs 32 "
         "--speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 3}' "
         "--compilation-config '{\"cudagraph_capture_sizes\": [1,2,4,8,16,32,64], "
         "\"max_cudagraph_capture_size\": 64}'")
if "vllm-capture-sizes" in {r.name for r in all_recipes()}:
    for release in RELEASES:
        # slicing mode: the size logic and dispatcher as functions; engine mode (the default,
        # docs/engine-mode.md) lets the whole release decide, one environment per release
        r = run_recipe("vllm-capture-sizes", ensure_snapshot(f"pip:{release}"), flags=FLAGS,
                       options={"mode": "slice"})
        print(f"== {release}" + ("" if r.applicable else f": not applicable: {r.reason}"))
        for key, value in r.values.items():
            if "capture sizes" in key or "largest N" in key:
                print(f"   {key:32} {value}")
        for f in r.findings:
            print(f"   {f.level:>5} {f.text}")
else:
    print("this recon has no vllm-capture-sizes recipe")

# %% [markdown]
# ## An older release: did the method change?
#
# `recon.bisect` compares the method across releases by normalized AST hash. In
# 0.31.0 it also took `tensor_parallel_size` and, with sequence parallelism on,
# rounded to `max(uniform_decode_query_len, tensor_parallel_size)` instead.

# %%
from recon.bisect import bisect

b = bisect(QUALNAME, ["vllm==0.31.0", "vllm==0.32.0", "vllm==0.33.0"])
for row in b.rows:
    fn = row.function
    print(f"{row.label:8} {row.status:12} {fn.location if fn else '-'}")
print(b.verdict())
print("\n".join(line for line in b.diff if line.startswith(("-    def", "+    def", "-        if tensor"))))

# %% [markdown]
# Running 0.31.0's method does not work in recon's sandbox today: its slice reaches
# `vllm/platforms/interface.py`, whose `in_wsl()` calls `platform.uname()`, and the
# standard library starts a subprocess for that, which the sandbox refuses. The run
# fails with one readable line rather than giving a wrong answer:

# %%
try:
    run_function(ensure_snapshot("pip:vllm==0.31.0"), QUALNAME,
                 args={"uniform_decode_query_len": QUERY_LEN, "tensor_parallel_size": 1},
                 self_attrs={"cudagraph_capture_sizes": list(CONFIGURED),
                             "max_cudagraph_capture_size": MAX_CAPTURE})
    print("vllm 0.31.0 ran (the sandbox limitation is gone)")
except RunFailed as err:
    print("vllm 0.31.0:", err)

# %% [markdown]
# ## Picture: captured sizes per release

# %%
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(7, 2.5))
rows = [("configured", CONFIGURED)] + [(r, resolved[r]) for r in RELEASES]
for y, (_label, sizes) in enumerate(rows):
    ax.scatter(sizes, [y] * len(sizes), s=60)
ax.set_yticks(range(len(rows)), [label for label, _ in rows])
ax.set_xscale("log", base=2)
ax.set_xlabel("captured batch size (tokens)")
ax.set_title(f"cudagraph_capture_sizes with num_speculative_tokens={NUM_SPEC_TOKENS}")
fig.tight_layout()
out = os.path.join(tempfile.gettempdir(), "capture_sizes.png")
fig.savefig(out)
print("figure:", out)
