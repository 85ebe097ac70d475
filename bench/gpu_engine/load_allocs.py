"""Device side: what the engine's "Model loading took" counts, allocation by allocation.

argv: CASE MODEL_DIR [KWARGS_JSON]
Records torch's CUDA allocation history (Python stacks) while ``vllm.LLM`` starts in this
process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, dummy weights, no tokenizer, eager), then lists
the blocks still allocated whose stack passes through the runner's ``load_model``, grouped by
the innermost vLLM (or torch) frame that made them. Prints ``LOADALLOC {json}`` lines: one per
group (bytes, blocks, frame) and one total, to set beside the log's ``Model loading took``.
"""
import json
import os
import sys
from collections import defaultdict

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"


def _where(frames: list[dict]) -> str:
    for f in frames:  # innermost first
        name = f.get("filename", "")
        if "/vllm/" in name or "/torch/" in name:
            return f"{name.split('site-packages/')[-1]}:{f.get('line')} {f.get('name')}"
    return "?"


def main() -> None:
    case, model = sys.argv[1], sys.argv[2]
    extra = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    import torch

    torch.cuda.memory._record_memory_history(max_entries=500000, stacks="python")
    from vllm import LLM

    LLM(model=model, load_format="dummy", skip_tokenizer_init=True, max_model_len=4096,
        enforce_eager=True, **extra)
    snap = torch.cuda.memory._snapshot()
    groups: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for seg in snap["segments"]:
        for block in seg["blocks"]:
            frames = block.get("frames") or []
            if block["state"] != "active_allocated" or not any(
                    f.get("name") == "load_model" for f in frames):
                continue
            g = groups[_where(frames)]
            g[0] += block["size"]
            g[1] += 1
    for where, (size, n) in sorted(groups.items(), key=lambda kv: -kv[1][0])[:25]:
        print("LOADALLOC " + json.dumps({"case": case, "bytes": size, "blocks": n, "at": where}))
    print("LOADALLOC " + json.dumps({"case": case, "total": sum(g[0] for g in groups.values())}),
          flush=True)


if __name__ == "__main__":
    main()
