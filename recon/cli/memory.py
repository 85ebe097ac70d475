"""The memory plan on a terminal: one sentence in the user's terms, then the budget table."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from .output import console, err_console

#: the table's rows: fact key, what the engine's own log calls it
ROWS = (("total_memory_gib", "GPU memory torch sees"),
        ("requested_memory_gib", "requested (x gpu_memory_utilization)"),
        ("weights_gib", "weights (Model loading took)"),
        ("activation_peak_gib", "activation peak of the profile run"),
        ("non_torch_gib", "memory outside torch"),
        ("cudagraph_memory_gib", "CUDA graph estimate"),
        ("available_kv_gib", "Available KV cache memory"))


def memory_sentence(data: dict[str, Any]) -> str:
    """What the plan means for the user, in one sentence."""
    gpu = (data.get("gpu") or {}).get("name", "the GPU")
    if data.get("starts") is False:
        return (f"This engine will not start on the {gpu}, because the release says: "
                f"{data.get('startup_error')} ({data.get('startup_error_where')}).")
    if data.get("memory_not_predicted"):
        return f"recon could not predict the memory plan: {data['memory_not_predicted']}"
    if data.get("prefill_not_predicted"):
        return (f"recon could not predict the prompt's activation peak: "
                f"{data['prefill_not_predicted']}")
    if data.get("prompt_fits") is not None:
        return prompt_sentence(data)
    tokens, conc = data.get("kv_cache_tokens"), data.get("max_concurrency")
    tail = f": {tokens:,} KV tokens, {conc:.2f}x concurrency at max_model_len " \
           f"{data.get('max_model_len'):,}" if tokens is not None and conc is not None else ""
    return (f"On the {gpu} at gpu_memory_utilization {data.get('gpu_memory_utilization')}, the "
            f"engine will start with {data.get('available_kv_gib'):.2f} GiB for the KV "
            f"cache{tail}.")


def prompt_sentence(data: dict[str, Any]) -> str:
    """Whether the user's prompt runs, in one sentence."""
    n, chunk = data.get("prompt_tokens") or 0, data.get("prefill_peak_chunk") or {}
    peak, free = data.get("prefill_peak_gib") or 0.0, data.get("prefill_free_gib") or 0.0
    where = (f"its costliest chunk ({chunk.get('tokens', 0):,} tokens, one of "
             f"{data.get('prompt_chunks')})")
    if data.get("prompt_rejected"):
        return f"A {n:,}-token prompt will be refused, because the release says: " \
               f"{data['prompt_rejected']}"
    if data.get("kv_pool_holds_prompt") is False:
        return (f"A {n:,}-token prompt will not run: the KV cache pool holds "
                f"{data.get('kv_cache_tokens') or 0:,} tokens.")
    if data.get("prompt_fits"):
        return (f"A {n:,}-token prompt fits: {where} needs {peak:.2f} GiB of activations with "
                f"{free:.2f} GiB free while serving ({free - peak:.2f} GiB to spare).")
    most = data.get("max_prompt_tokens_that_fit")
    return (f"A {n:,}-token prompt will run out of GPU memory: {where} needs {peak:.2f} GiB of "
            f"activations with {free:.2f} GiB free while serving; about {most or 0:,} tokens "
            f"fit (estimated).")


def print_memory_plan(data: dict[str, Any], *, sentence: bool = True) -> None:
    """The sentence, the budget table, and what recon stood in for (stderr)."""
    if sentence:
        console.print(memory_sentence(data), markup=False)
    if data.get("weights_gib") is None:
        return
    table = Table(title="memory plan (GiB, as the engine prints them)", title_justify="left")
    table.add_column("part")
    table.add_column("GiB", justify="right")
    for key, label in ROWS:
        if data.get(key) is not None:
            table.add_row(label, f"{data[key]:.2f}")
    console.print(table)
    if data.get("prefill_peak_gib") is not None:
        print_prompt(data)
    err_console.print(f"recon: memory counted on meta by recon's allocator model; kernels not "
                      f"launched: {', '.join(data.get('kernels_not_launched') or []) or 'none'}",
                      markup=False)
    faked = data.get("ops_faked_on_meta") or []
    if faked:
        err_console.print(f"recon: the release's own Python did not run on meta for "
                          f"{', '.join(faked)} (at least once): its registered fake counted the "
                          "outputs only", markup=False)


def print_prompt(data: dict[str, Any]) -> None:
    """The prompt's chunks against the memory free while serving."""
    table = Table(title=f"a {data.get('prompt_tokens') or 0:,}-token prompt (GiB)",
                  title_justify="left")
    table.add_column("part")
    table.add_column("value", justify="right")
    chunk = data.get("prefill_peak_chunk") or {}
    rows = (("chunks the scheduler cuts", f"{data.get('prompt_chunks')}"),
            ("the costliest chunk: tokens", f"{chunk.get('tokens', 0):,}"),
            ("its context before it", f"{chunk.get('context', 0):,}"),
            ("activation peak of a chunk", f"{data.get('prefill_peak_gib'):.2f}"),
            ("free while serving", f"{data.get('prefill_free_gib'):.2f}"),
            ("headroom", f"{data.get('prefill_headroom_gib'):.2f}"))
    for label, value in rows:
        table.add_row(label, value)
    console.print(table)
    holders = data.get("prefill_peak_holders") or []
    if holders:
        top = ", ".join(f"{h['op']} {h['bytes'] / (1 << 20):,.0f} MiB" for h in holders[:3])
        err_console.print(f"recon: largest tensors at the chunk's peak: {top}", markup=False)
