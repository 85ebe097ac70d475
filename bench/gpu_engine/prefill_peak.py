"""Device side: the real activation peak of single long prompts, in-process.

argv: CASE MODEL_DIR MAX_MODEL_LEN MAX_NUM_BATCHED_TOKENS N [N ...]
Runs ``vllm.LLM`` in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) with dummy weights and
no tokenizer, prefix caching off, then for each prompt length N one request of N token ids
(one output token), with ``torch.cuda.reset_peak_memory_stats()`` before and
``max_memory_allocated()`` after. Prints one ``PEAK {json}`` line per prompt: the bytes
allocated before the request, the peak during it and the difference (the prompt's
activation peak over the engine's standing memory: weights, KV cache, graphs' pools).
A prompt that runs out of memory prints its error instead and the run goes on.
``PEAK_KWARGS`` (JSON) adds keyword arguments to ``LLM(...)``.
``PEAK_SQUEEZE="WEIGHTS_GIB,LEAVE_GIB"`` squeezes the engine: ``kv_cache_memory_bytes`` is set to
the GPU's free memory before the engine starts, less the weights and LEAVE_GIB, so that little is
left for a prompt's activations; the chosen figure and the free memory after start-up are printed
(``SQUEEZE`` and ``SERVING`` lines), and the prompts find the first length that runs out of memory.
"""
import json
import os
import sys
import time

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"


def main() -> None:
    case, model, max_len, batched = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    lengths = [int(n) for n in sys.argv[5:]]
    import torch
    from vllm import LLM, SamplingParams

    kwargs = {"model": model, "load_format": "dummy", "skip_tokenizer_init": True,
              "max_model_len": max_len, "max_num_batched_tokens": batched,
              "enable_prefix_caching": False,
              **json.loads(os.environ.get("PEAK_KWARGS", "{}"))}
    squeeze = os.environ.get("PEAK_SQUEEZE")
    if squeeze:
        weights_gib, leave_gib = (float(x) for x in squeeze.split(","))
        free, total = torch.cuda.mem_get_info()
        kwargs["kv_cache_memory_bytes"] = int(free - (weights_gib + leave_gib) * 2**30)
        print("SQUEEZE " + json.dumps({"free_before": free, "total": total,
                                       "kv_cache_memory_bytes": kwargs["kv_cache_memory_bytes"]}))
    print(f"CASE {case} LLM kwargs {json.dumps(kwargs)}", flush=True)
    t_init = time.time()
    llm = LLM(**kwargs)
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    print("SERVING " + json.dumps({"init_seconds": round(time.time() - t_init, 1), "free": free,
                                   "allocated": torch.cuda.memory_allocated(),
                                   "reserved": torch.cuda.memory_reserved()}), flush=True)
    params = SamplingParams(max_tokens=1, temperature=0.0, detokenize=False)
    for n in lengths:
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        t0 = time.time()
        try:
            llm.generate([{"prompt_token_ids": [(7 * i) % 30000 + 100 for i in range(n)]}],
                         params, use_tqdm=False)
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated()
            row = {"case": case, "prompt_tokens": n, "allocated_before": before,
                   "peak": peak, "prompt_peak_increase": peak - before,
                   "seconds": round(time.time() - t0, 2)}
        except Exception as err:  # noqa: BLE001 - the failure is the measurement
            row = {"case": case, "prompt_tokens": n, "error": f"{type(err).__name__}: "
                                                             f"{str(err)[:400]}"}
        print("PEAK " + json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
