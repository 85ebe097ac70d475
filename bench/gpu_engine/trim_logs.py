"""CPU side: trim the engine logs brought back from the GPU machine into test data.

python3 bench/gpu_engine/trim_logs.py IN_DIR OUT_DIR
Keeps every line vLLM's loggers printed (API/LLM process and EngineCore), the CASE line
(exact LLM kwargs or serve command), the OUT/OUT2 generation lines and TIMING. A tqdm progress
bar (carriage-return frames) becomes its last frame; the c10d "hostname of the client socket"
warning is dropped. Prints one summary row per log (the key numbers) as JSON lines.
"""
import json
import pathlib
import re
import sys

NOISE = re.compile(r"socket\.cpp:\d+\] \[c10d\] The hostname of the client socket cannot be retrieved")
KEYS = {
    "block_size": re.compile(r"Setting attention block size to (\d+) tokens"),
    "padding_pct": re.compile(r"Padding mamba page size by ([\d.]+)%"),
    "mamba_cache_mode": re.compile(r"Mamba cache mode is set to '(\w+)'"),
    "ssm_dtype_update": re.compile(r"Updating mamba_ssm_cache_dtype to '(\w+)'"),
    "capture_profile": re.compile(r"Profiling CUDA graph memory: (.*)$"),
    "kv_memory_gib": re.compile(r"Available KV cache memory: ([\d.]+) GiB"),
    "kv_tokens": re.compile(r"GPU KV cache size: ([\d,]+) tokens"),
    "max_concurrency": re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x"),
    "graph_estimated_gib": re.compile(r"Estimated CUDA graph memory: ([\d.]+) GiB total"),
    "graph_took_gib": re.compile(r"Graph capturing finished in \d+ secs, took ([\d.]+) GiB"),
    "graph_pool": re.compile(r"CUDA graph pool memory: (.*)$"),
    "gpu_util": re.compile(r"Desired GPU memory utilization is \(([\d.]+),"),
    "runner": re.compile(r"Using (V2 Model Runner)"),
}
SIZES = re.compile(r"'cudagraph_capture_sizes': \[([\d, ]*)\]")
MAXSIZE = re.compile(r"'max_cudagraph_capture_size': (\w+)")


def trim(text: str) -> list[str]:
    out = []
    for line in text.split("\n"):
        if NOISE.search(line):
            continue
        if "\r" in line:
            prefix = line.split("\r", 1)[0]
            line = prefix + line.rsplit("\r", 1)[1]
        out.append(line.rstrip())
    while out and not out[-1]:
        out.pop()
    return out


def summary(case: str, lines: list[str]) -> dict:
    row: dict = {"case": case}
    for line in lines:
        for k, rx in KEYS.items():
            m = rx.search(line)
            if m and k not in row:
                row[k] = m.group(1) if rx.groups == 1 else list(m.groups())
        if "Initializing a V1 LLM engine" in line:
            m = SIZES.search(line)
            if m:
                sizes = [int(x) for x in m.group(1).split(",") if x.strip()]
                row["capture_sizes_n"] = len(sizes)
                row["capture_sizes_max"] = max(sizes) if sizes else None
            m = MAXSIZE.search(line)
            if m:
                row["max_cudagraph_capture_size"] = m.group(1)
        if line.startswith("ModuleNotFoundError") or line.startswith("RuntimeError"):
            row.setdefault("error", line)
    return row


def main() -> None:
    src, dst = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    dst.mkdir(parents=True, exist_ok=True)
    for p in sorted(src.glob("*.log")):
        with open(p, newline="", errors="replace") as f:  # keep the bars' \r frames
            lines = trim(f.read())
        (dst / p.name).write_text("\n".join(lines) + "\n")
        print(json.dumps(summary(p.stem, lines)))


if __name__ == "__main__":
    main()
