"""Serve-flag parsing: what people paste, typed; malformed values are clear errors naming the flag."""

from __future__ import annotations

import pytest

from recon.errors import ReconError
from recon.recipes import parse_flags

SEED_000 = """vllm serve zai-org/GLM-5.3-Flash --tensor-parallel-size=4 --max-model-len=272000
 --gpu-memory-utilization=0.92 --max-num-seqs=16 --max-num-batched-tokens=8192
 --enable-prefix-caching
 --speculative-config='{"method":"mtp","num_speculative_tokens":3}'
 --compilation-config='{"cudagraph_mode":"FULL_AND_PIECEWISE",
   "cudagraph_capture_sizes":[1,2,4,8,16,32,64], "max_cudagraph_capture_size":64}'
 --enable-auto-tool-choice --tool-call-parser=glm47 --reasoning-parser=glm45
 --disable-custom-all-reduce --enable-prompt-tokens-details"""


def test_seed_000_command_line() -> None:
    fl = parse_flags(SEED_000)
    assert fl.get("model") == "zai-org/GLM-5.3-Flash"
    assert fl.get("tensor_parallel_size") == 4
    assert fl.get("max_model_len") == 272000
    assert fl.get("gpu_memory_utilization") == 0.92
    assert fl.get("max_num_seqs") == 16
    assert fl.get("max_num_batched_tokens") == 8192
    assert fl.get("enable_prefix_caching") is True
    assert fl.get("speculative_config") == {"method": "mtp", "num_speculative_tokens": 3}
    assert fl.get("compilation_config") == {"cudagraph_mode": "FULL_AND_PIECEWISE",
                                            "cudagraph_capture_sizes": [1, 2, 4, 8, 16, 32, 64],
                                            "max_cudagraph_capture_size": 64}
    assert fl.ignored == ["--enable-auto-tool-choice", "--tool-call-parser=glm47",
                          "--reasoning-parser=glm45", "--disable-custom-all-reduce",
                          "--enable-prompt-tokens-details"]


def test_separate_values_argv_and_negation() -> None:
    fl = parse_flags(["vllm", "serve", "m", "--max-num-seqs", "256", "--no-enable-prefix-caching",
                      "--speculative-config", '{"num_speculative_tokens": 2}',
                      "--unknown-flag", "value", "--dtype", "bfloat16"])
    assert fl.get("max_num_seqs") == 256
    assert fl.get("enable_prefix_caching") is False
    assert fl.get("speculative_config") == {"num_speculative_tokens": 2}
    assert fl.get("dtype") == "bfloat16"
    assert fl.ignored == ["--unknown-flag value"]


def test_int_lists_and_sglang_names() -> None:
    fl = parse_flags("vllm serve m --cuda-graph-sizes 1 2 4,8 --enforce-eager")
    assert fl.get("cuda_graph_sizes") == [1, 2, 4, 8] and fl.get("enforce_eager") is True
    sg = parse_flags("python -m sglang.launch_server --model-path Q --tp 4 --context-length 4096 "
                     "--max-running-requests 32 --mamba-ssm-dtype float32")
    assert sg.get("model") == "Q" and sg.get("tensor_parallel_size") == 4
    assert sg.get("max_model_len") == 4096 and sg.get("max_num_seqs") == 32
    assert sg.get("mamba_ssm_cache_dtype") == "float32"


@pytest.mark.parametrize(("line", "message"), [
    # truncated JSON
    ("vllm serve m --speculative-config '{\"method\": \"mtp\", '",
     r"--speculative-config: malformed value"),
    # single quotes inside: not JSON
    ("vllm serve m --compilation-config \"{'cudagraph_capture_sizes': [1, 2]}\"",
     r"--compilation-config: malformed value"),
    # valid JSON but not an object
    ("vllm serve m --speculative-config '[3]'", r"--speculative-config: .*not a JSON object"),
    ("vllm serve m --max-num-seqs sixteen", r"--max-num-seqs: malformed value 'sixteen'"),
    ("vllm serve m --gpu-memory-utilization high", r"--gpu-memory-utilization: malformed value"),
    ("vllm serve m --enable-prefix-caching=maybe", r"--enable-prefix-caching: expected true/false"),
    ("vllm serve m --cuda-graph-sizes 1 two", r"--cuda-graph-sizes: expected integers"),
    ("vllm serve m --max-model-len", r"--max-model-len needs a value"),
    ("vllm serve m --speculative-config '{\"a\": 1}", r"cannot split the command line"),
])
def test_malformed_values_are_clear_errors(line: str, message: str) -> None:
    with pytest.raises(ReconError, match=message):
        parse_flags(line)


def test_integer_options_read_one_way_in_every_recipe() -> None:
    """``--set k=8`` and ``k=8.0`` are the same integer for every recipe; anything else is a
    clear error (two readings once disagreed on ``"2.0"``)."""
    from recon.errors import ReconError
    from recon.recipes.options import opt_int

    assert [opt_int({"k": v}, "k") for v in (8, "8", "8.0", 8.0)] == [8, 8, 8, 8]
    assert opt_int({}, "k", 3) == 3 and opt_int({"k": None}, "k", 3) == 3
    for bad in ("2.5", 2.5, True, "eight", [8]):
        with pytest.raises(ReconError, match="--set k: expected an integer"):
            opt_int({"k": bad}, "k")


def test_importing_one_recipe_module_first_still_finds_every_recipe() -> None:
    """A test (or a user's code) that imports one recipe's module before asking the registry
    once left the registry holding that recipe alone: every other name was "no recipe named"
    for the rest of the process (the CI run of 2026-12-07: 47 failures). A fresh interpreter
    imports one module first, then asks for another recipe."""
    import subprocess
    import sys

    code = ("from recon.recipes.catalog.vllm_capture_sizes import steps_table\n"
            "from recon.recipes.registry import all_recipes, get\n"
            "print(get('kv-capacity').name, len(all_recipes()) > 1)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-800:]
    assert done.stdout.split() == ["kv-capacity", "True"]
