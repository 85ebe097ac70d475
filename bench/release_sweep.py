"""Every vLLM release, every engine-backed recipe: an answer, "not applicable", or a stated failure.

    python bench/release_sweep.py [--releases 0.10.2,0.11.2,...] [--out sweep.jsonl]
    python bench/release_sweep.py --render sweep.jsonl > docs/release-sweep.md

For each release (default: the newest patch of each minor release from 0.10.2 to
0.34.0, and 0.22.0 which the public-log cases use) the three engine-backed recipes run as a user runs them: the ``recon`` CLI in
a subprocess, ``--snapshot pip:vllm==V``, the Qwen3-Next 80B example config, ``vllm
serve`` with TP 2, the default H100. Each row records the exit code, the numbers
(``--json``) or recon's one-line reason, and the wall time. The first recipe of a
release pays for its snapshot and environment (from cached wheels, else PyPI).

This is a sweep of outcomes, not of correctness: the numbers are checked against real
engine logs in the tests (tests/test_engine_recipes.py, tests/test_logs_real.py).
Rows are appended as they finish, so an interrupted sweep resumes where it stopped.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

RELEASES = ("0.10.2", "0.11.2", "0.12.0", "0.13.0", "0.14.1", "0.15.1", "0.16.0", "0.17.1",
            "0.18.1", "0.19.1", "0.20.2", "0.21.0", "0.22.0", "0.23.0", "0.24.0", "0.25.1",
            "0.26.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0",
            "0.34.0")
CONFIG = "example:qwen3-next-80b-a3b-instruct"
FLAGS = "vllm serve Qwen/Qwen3-Next-80B-A3B-Instruct --tensor-parallel-size 2"
#: recipe, extra --set, the values shown in the table
RECIPES = (
    ("vllm-hybrid-page-align", [], ("attention_block_size", "mamba_padding_pct")),
    ("vllm-capture-sizes", [], ("max_cudagraph_capture_size", "cudagraph_graphs_piecewise",
                                "cudagraph_graphs_full")),
    ("kv-capacity", ["--set", "available_kv_gib=40"], ("kv_cache_tokens", "max_concurrency")),
)


def run_one(release: str, recipe: str, extra: list[str], keys: tuple[str, ...]) -> dict[str, Any]:
    """One recipe on one release through the CLI: exit code, numbers or reason, seconds."""
    cmd = [sys.executable, "-m", "recon", "recipe", "run", recipe, "--snapshot",
           f"pip:vllm=={release}", "--config", CONFIG, "--flags", FLAGS, "--json", *extra]
    start = time.monotonic()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        code, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired:
        code, out, err = -1, "", "timed out after 1800 s"
    row: dict[str, Any] = {"release": release, "recipe": recipe, "exit": code,
                           "seconds": round(time.monotonic() - start, 1)}
    if code == 0:
        values = json.loads(out).get("values", {})
        row["values"] = {k: values.get(k) for k in keys}
    else:
        lines = [ln for ln in err.strip().splitlines() if ln.strip()]
        row["reason"] = lines[-1][:400] if lines else "(nothing on stderr)"
    return row


#: the sweep stops before a release when less disk than this is free (each one keeps an
#: environment of about 1 GB and its wheel in recon's cache)
MIN_FREE_BYTES = 12 << 30


def sweep(releases: list[str], out: Path) -> None:
    done = set()
    if out.is_file():
        for line in out.read_text().splitlines():
            row = json.loads(line)
            done.add((row["release"], row["recipe"]))
    for release in releases:
        if shutil.disk_usage(Path.home()).free < MIN_FREE_BYTES:
            print(f"stopped before {release}: less than 12 GiB of disk free", file=sys.stderr)
            return
        for recipe, extra, keys in RECIPES:
            if (release, recipe) in done:
                continue
            row = run_one(release, recipe, extra, keys)
            print(json.dumps(row), flush=True)
            with out.open("a") as fh:
                fh.write(json.dumps(row) + "\n")


def _cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "not run"
    if row["exit"] == 0:
        return ", ".join(f"{k} {v}" if not isinstance(v, float) else f"{k} {v:.2f}"
                         for k, v in row["values"].items() if v is not None) or "answered"
    reason = row["reason"].removeprefix("recon: error: ").replace("|", "/")
    return f"exit {row['exit']}: {reason[:160]}"


def render(path: Path) -> str:
    """The sweep as a Markdown table: one row per release, one column per recipe."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        rows[(row["release"], row["recipe"])] = row
    releases = sorted({r for r, _ in rows}, key=lambda v: tuple(int(p) for p in v.split(".")))
    names = [name for name, _, _ in RECIPES]
    lines = ["| release | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for release in releases:
        cells = [_cell(rows.get((release, name))) for name in names]
        lines.append(f"| {release} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", default=",".join(RELEASES))
    parser.add_argument("--out", type=Path, default=Path("release-sweep.jsonl"))
    parser.add_argument("--render", type=Path, help="print the Markdown table of a sweep file")
    args = parser.parse_args()
    if args.render:
        sys.stdout.write(render(args.render))
        return
    sweep([r for r in args.releases.split(",") if r], args.out)


if __name__ == "__main__":
    main()
