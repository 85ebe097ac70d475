"""vllm-capture-sizes: the CUDA graph capture sizes a release really uses under speculative decoding.

Field story (seed 000, section 9): with MTP and ``num_speculative_tokens=3``,
``CompilationConfig.adjust_cudagraph_sizes_for_spec_decode`` rounds every
capture size up to a multiple of k+1 = 4 and drops those above
``max_cudagraph_capture_size``: ``[1,2,4,8,16,32,64]`` becomes
``[4,8,16,32,64]``, so a decode step of more than 16 requests (16 x 4 = 64
tokens) falls back to eager mode. This recipe runs the release's own method
on the user's ``--compilation-config`` and ``--speculative-config`` and
lays out, per number of running requests, graph or eager.

The graph/eager rule used for the table is the one the release documents
next to its default-size logic: a batch above the largest capture size runs
eager; otherwise it is padded up to the next captured size.
"""

from __future__ import annotations

from typing import Any

from ...slicing import Py, run_function
from ..base import Finding, NotApplicable, Recipe, RecipeContext, RecipeResult, Table
from ..registry import register

NAME = "vllm-capture-sizes"
METHOD = "vllm.config.compilation:CompilationConfig.adjust_cudagraph_sizes_for_spec_decode"


def _spec_tokens(ctx: RecipeContext) -> int:
    spec = ctx.flags.get("speculative_config") or {}
    k = spec.get("num_speculative_tokens", ctx.flags.get("num_speculative_tokens", 0))
    return int(k or 0)


def _sizes(ctx: RecipeContext) -> tuple[list[int], int]:
    comp = ctx.flags.get("compilation_config") or {}
    sizes = comp.get("cudagraph_capture_sizes") or ctx.flags.get("cuda_graph_sizes")
    if not sizes:
        raise NotApplicable("this recipe needs the configured sizes: pass --compilation-config "
                            "'{\"cudagraph_capture_sizes\": [...]}' (the release's default list is "
                            "not computed here)")
    sizes = sorted({int(x) for x in sizes})
    return sizes, int(comp.get("max_cudagraph_capture_size") or max(sizes))


def run(ctx: RecipeContext) -> RecipeResult:
    target = ctx.first_existing([METHOD])
    if target is None:
        raise NotApplicable(f"{ctx.release} has no {METHOD.split(':')[1]} (the spec-decode "
                            "rounding of capture sizes is not in this release)")
    sizes, max_size = _sizes(ctx)
    k = _spec_tokens(ctx)
    q = k + 1
    res = RecipeResult(NAME, ctx.snapshot.name, ctx.release,
                       inputs={"cudagraph_capture_sizes": sizes, "max_cudagraph_capture_size": max_size,
                               "num_speculative_tokens": k, "uniform_decode_query_len": q})
    if k == 0:
        final, final_max = sizes, max_size
        res.notes.append("no speculative decoding: the method is not called, sizes stay as configured")
    else:
        params = {p.name for p in ctx.index.functions[target].params}
        args: dict[str, Any] = {"uniform_decode_query_len": q}
        self_attrs: dict[str, Any] = {"cudagraph_capture_sizes": sizes,
                                      "max_cudagraph_capture_size": max_size}
        if "tensor_parallel_size" in params:  # releases up to 0.31 also align to TP under SP
            args["tensor_parallel_size"] = int(ctx.flags.get("tensor_parallel_size") or 1)
            comp = ctx.flags.get("compilation_config") or {}
            enable_sp = bool((comp.get("pass_config") or {}).get("enable_sp", False))
            self_attrs["pass_config"] = Py(f"ns(enable_sp={enable_sp!r})")
            res.inputs["tensor_parallel_size"] = args["tensor_parallel_size"]
        # in_wsl() (reached at import in some releases) asks platform.uname(), which starts a
        # process; the sandbox refuses that, and the answer does not matter for this method.
        out = run_function(ctx.snapshot, target, self_attrs=self_attrs, args=args, timeout=60,
                           stubs={"in_wsl": "lambda: False"})
        if out.error is not None:
            res.findings.append(Finding("error", f"the release raises for these sizes: {out.error.line()}"))
            res.provenance.append(ctx.provenance(target))
            return res
        after: dict[str, Any] = out.self_after
        final = list(after.get("cudagraph_capture_sizes", sizes))
        final_max = int(after.get("max_cudagraph_capture_size", max_size))
        res.provenance.append(ctx.provenance(target))
    res.values = {"configured sizes": sizes, "resolved sizes": final,
                  "max capture size": final_max, "tokens per decode step": f"requests x {q}"}
    dropped = [s for s in sizes if s not in final]
    if dropped:
        res.findings.append(Finding("warn", f"sizes changed by the release: {sizes} -> {final}"))
    max_seqs = int(ctx.flags.get("max_num_seqs") or max(1, final_max // q * 2))
    rows: list[list[Any]] = []
    prev: list[Any] | None = None
    for reqs in range(1, max_seqs + 1):
        tokens = reqs * q
        pad = next((s for s in final if s >= tokens), None)
        row = [reqs, tokens, "eager" if pad is None else "graph", "-" if pad is None else pad]
        switched = prev is not None and prev[2] != row[2]
        if switched and rows and rows[-1] is not prev:
            rows.append(prev)  # the last request count before the mode changes
        if reqs in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, max_seqs) or switched:
            rows.append(row)
        prev = row
    res.tables.append(Table(f"decode step per running requests (k+1 = {q} tokens each)",
                            ["requests", "tokens", "mode", "padded to"], rows))
    first_eager = next((r[0] for r in rows if r[2] == "eager"), None)
    if first_eager is not None:
        res.findings.append(Finding("warn", f"{first_eager} or more running requests fall back to eager "
                                    f"(more than {final_max} tokens per decode step)"))
    else:
        res.findings.append(Finding("ok", f"every decode step up to {max_seqs} requests runs in a graph"))
    return res


register(Recipe(
    name=NAME, engine="vllm",
    title="CUDA graph capture sizes after spec-decode rounding; graph or eager per running requests",
    why=("Seed 000: with MTP k=3, [1,2,4,8,16,32,64] silently became [4,8,16,32,64]; more than 16 "
         "requests per decode step ran eager. Runs the release's own adjust_cudagraph_sizes_for_spec_decode."),
    reads_flags=["compilation_config", "speculative_config", "num_speculative_tokens", "max_num_seqs"],
    reads_config=[], run=run,
    example=("--flags \"vllm serve M --max-num-seqs 32 --speculative-config "
             "'{\\\"method\\\": \\\"mtp\\\", \\\"num_speculative_tokens\\\": 3}' --compilation-config "
             "'{\\\"cudagraph_capture_sizes\\\": [1,2,4,8,16,32,64]}'\""),
    demos=[(None, "vllm serve Qwen/Qwen3-Next-80B-A3B-Instruct --max-num-seqs 32 "
                  "--speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 3}' "
                  "--compilation-config '{\"cudagraph_capture_sizes\": [1,2,4,8,16,32,64]}'")],
))
