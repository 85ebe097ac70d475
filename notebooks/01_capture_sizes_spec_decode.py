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
# recon's sandbox, for two releases, instead of re-typing it: first the one method
# with `recon.slicing.run_function` (`self_attrs` as in the README), then the whole
# path from the serve command line with the `vllm-capture-sizes` recipe, and a
# picture of which batch sizes get a CUDA graph and which run eager.

# %%
# ruff: noqa: E402  (a notebook imports in the cell that first needs a module)
import tempfile
from pathlib import Path

from recon.slicing import RunFailed, run_function
from recon.snapshots.cache import ensure_snapshot

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
from recon.recipes import run_recipe

MAX_NUM_SEQS = 32


def serve_flags(k: int) -> str:
    """The thread's serve command with `num_speculative_tokens=k`."""
    return (f"vllm serve Qwen/Qwen3-Next-80B-A3B-Instruct --max-num-seqs {MAX_NUM_SEQS} "
            f"--speculative-config '{{\"method\": \"mtp\", \"num_speculative_tokens\": {k}}}' "
            f"--compilation-config '{{\"cudagraph_capture_sizes\": {CONFIGURED}, "
            f"\"max_cudagraph_capture_size\": {MAX_CAPTURE}}}'")


recipe_results = {}
for release in RELEASES:
    # slicing mode: the size logic and dispatcher as functions; engine mode (the default,
    # docs/engine-mode.md) lets the whole release decide, one environment per release
    r = run_recipe("vllm-capture-sizes", ensure_snapshot(f"pip:{release}"),
                   flags=serve_flags(NUM_SPEC_TOKENS), options={"mode": "slice"})
    recipe_results[(release, NUM_SPEC_TOKENS)] = r
    print(f"== {release}" + ("" if r.applicable else f": not applicable: {r.reason}"))
    for key, value in r.values.items():
        if "capture sizes" in key or "largest N" in key:
            print(f"   {key:32} {value}")
    for f in r.findings:
        print(f"   {f.level:>5} {f.text}")

# %% [markdown]
# ## An older release: did the method change?
#
# `recon.diffing.bisect` compares the method across releases by normalized AST hash. In
# 0.31.0 it also took `tensor_parallel_size` and, with sequence parallelism on,
# rounded to `max(uniform_decode_query_len, tensor_parallel_size)` instead.

# %%
from recon.diffing.bisect import bisect

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
#
# The list as configured, and as each release's method resolved it above.

# %%
import matplotlib.pyplot as plt

FIGURES = Path(tempfile.gettempdir())   # a copy of each figure lands here too

fig, ax = plt.subplots(figsize=(7, 2.5))
rows = [("configured", CONFIGURED)] + [(r, resolved[r]) for r in RELEASES]
for y, (_label, sizes) in enumerate(rows):
    ax.scatter(sizes, [y] * len(sizes), s=60)
ax.set_yticks(range(len(rows)), [label for label, _ in rows])
ax.set_xscale("log", base=2)
ax.set_xticks(CONFIGURED, [str(c) for c in CONFIGURED])
ax.set_xlabel("captured batch size (tokens)")
ax.set_title(f"cudagraph_capture_sizes with num_speculative_tokens={NUM_SPEC_TOKENS}")
fig.tight_layout()
fig.savefig(FIGURES / "capture_sizes.png")
plt.show()

# %% [markdown]
# ## Picture: which batch sizes get a CUDA graph, before and after the rounding
#
# The recipe's *per N* table says, for every number `N` of running (decoding)
# requests up to `--max-num-seqs`, what the release does with a decode step of
# `N x (k+1)` tokens: replay a FULL or PIECEWISE CUDA graph padded to some captured
# size, or run eager. *As written* is what the configured list would give if the
# release used it unchanged (the smallest configured size that holds the step).
#
# With `num_speculative_tokens=3` the rounding is harmless: only 1 and 2 are
# dropped, and steps are multiples of 4 anyway. With 2, the sizes are rounded up
# to multiples of 3 and 64 becomes 66, above `max_cudagraph_capture_size`, so it is
# dropped: the V1 runner's last graph holds 33 tokens, 11 requests instead of 21.
# The V2 runner keeps the configured list as its capture sizes and replays a
# PIECEWISE graph of 64 tokens for the steps the V1 runner runs eagerly.

# %%
SPEC_K = [NUM_SPEC_TOKENS, 2]
PICTURE_RELEASE = RELEASES[-1]
MODE_COLORS = {"FULL": "tab:green", "PIECEWISE": "gold", "eager": "tab:red"}


def as_written(n: int, k: int) -> tuple[str, int | None]:
    fits = [s for s in CONFIGURED if s >= n * (k + 1)]
    return ("FULL", min(fits)) if fits else ("eager", None)


def parse(cell: str) -> tuple[str, int | None]:
    mode, _, size = str(cell).partition(" ")   # "FULL 64", "PIECEWISE 64", "eager"
    return mode, int(size) if size else None


dispatch = {}   # k -> {row label: [(mode, padded tokens) for N = 1..MAX_NUM_SEQS]}
for k in SPEC_K:
    r = recipe_results.get((PICTURE_RELEASE, k)) or run_recipe(
        "vllm-capture-sizes", ensure_snapshot(f"pip:{PICTURE_RELEASE}"),
        flags=serve_flags(k), options={"mode": "slice"})
    table = next(t for t in r.tables if t.title.startswith("per N"))
    runners = [c for c in table.columns if c.endswith("runner")]
    ns = [row[0] for row in table.rows]
    assert ns == list(range(1, MAX_NUM_SEQS + 1)), ns
    dispatch[k] = {"as written": [as_written(n, k) for n in ns]}
    for col in runners:
        dispatch[k][col] = [parse(row[table.columns.index(col)]) for row in table.rows]
    for label, cells in dispatch[k].items():
        graphed = [n for n, (mode, _) in zip(ns, cells, strict=True) if mode != "eager"]
        print(f"k={k} {label:>10}: graphs up to N={max(graphed) if graphed else 0}, "
              f"eager from N={max(graphed, default=0) + 1}")

# %%
from matplotlib.patches import Patch

ns = list(range(1, MAX_NUM_SEQS + 1))
fig, axes = plt.subplots(2, len(SPEC_K), figsize=(11, 5.5), sharex=True, squeeze=False,
                         gridspec_kw={"height_ratios": [3, 1.2]})
for col, k in enumerate(SPEC_K):
    top, strip = axes[0][col], axes[1][col]
    top.plot(ns, [n * (k + 1) for n in ns], ":", color="grey", label="step needs N x (k+1)")
    for (label, cells), width in zip(dispatch[k].items(), [6, 2.5, 1.2], strict=False):
        top.step(ns, [size if size else float("nan") for _, size in cells], where="mid",
                 lw=width, alpha=0.6 if label == "as written" else 1, label=label)
    top.axhline(MAX_CAPTURE, color="k", lw=0.6, ls="--", label="max_cudagraph_capture_size")
    top.set_title(f"{PICTURE_RELEASE}, num_speculative_tokens={k}", fontsize=10)
    top.set_ylabel("CUDA graph size (tokens)")
    top.legend(fontsize=7, loc="upper left")
    labels = list(dispatch[k])
    for y, label in enumerate(labels):
        strip.bar(ns, 0.8, bottom=y - 0.4, width=1.0,
                  color=[MODE_COLORS[mode] for mode, _ in dispatch[k][label]])
    strip.set_yticks(range(len(labels)), labels, fontsize=8)
    strip.set_xlabel("running requests N (decode batch size)")
axes[1][-1].legend(handles=[Patch(color=c, label=m) for m, c in MODE_COLORS.items()],
                   fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
fig.tight_layout()
fig.savefig(FIGURES / "capture_sizes_vs_batch.png")
plt.show()
