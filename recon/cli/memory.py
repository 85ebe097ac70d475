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
    tokens, conc = data.get("kv_cache_tokens"), data.get("max_concurrency")
    tail = f": {tokens:,} KV tokens, {conc:.2f}x concurrency at max_model_len " \
           f"{data.get('max_model_len'):,}" if tokens is not None and conc is not None else ""
    return (f"On the {gpu} at gpu_memory_utilization {data.get('gpu_memory_utilization')}, the "
            f"engine will start with {data.get('available_kv_gib'):.2f} GiB for the KV "
            f"cache{tail}.")


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
    err_console.print(f"recon: memory counted on meta by recon's allocator model; kernels not "
                      f"launched: {', '.join(data.get('kernels_not_launched') or []) or 'none'}",
                      markup=False)
