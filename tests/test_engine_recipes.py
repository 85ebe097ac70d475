"""The recipes in engine mode, checked against numbers real vLLM engines printed.

Expected values are the engines' own: the public start-up logs of
``tests/data/public-logs/cases-dev.json`` and ``cases-found.json`` (the command as the
user typed it, the config written from public facts) and the real H200 runs of vLLM 0.26.0 in
``tests/data/logs/real``. Everything runs as a user would: the ``recon`` CLI in a
subprocess, the release's own code in the sandbox.

Releases whose environment the rest of the suite does not build (0.11.1, 0.13.0,
0.20.0, 0.22.0) run with ``RECON_ENGINE_ALL=1``: each one costs a first-use
environment of about a minute, which CI's 30 minutes do not hold.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest

from recon.examples import EXAMPLES_DIR

DATA = Path(__file__).parent / "data"
CASES = json.loads((DATA / "public-logs" / "cases-dev.json").read_text())["cases"]
#: more public logs, found beyond the development set (sources in the file): other releases,
#: boards, entry points (the API server module, an engine from AsyncEngineArgs), parsers
FOUND = json.loads((DATA / "public-logs" / "cases-found.json").read_text())["cases"]
CONFIGS = DATA / "public-logs" / "configs"
REAL = DATA / "logs" / "real"
RECIPE = {"page-align": "vllm-hybrid-page-align", "kv": "kv-capacity",
          "capture": "vllm-capture-sizes"}
#: releases whose engine-mode environment the suite builds anyway (tests/test_engine_mode.py)
IN_CI = {"0.10.2", "0.19.0", "0.26.0", "0.28.0", "0.33.0"}
ALL = os.environ.get("RECON_ENGINE_ALL") == "1"
#: cases recon cannot answer yet, and why (strict: an answer makes the test say so)
NOT_YET: dict[str, str] = {}

pytestmark = pytest.mark.wheels  # the recipes run on real releases from PyPI, through the CLI


def recon(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "recon", *args], capture_output=True,
                          text=True, timeout=900)


def kv_answer(release: str, config: str, flags: str, gib: float, *sets: str) -> dict[str, Any]:
    """The kv-capacity recipe's JSON answer for a command at ``gib`` of KV memory (exit 0)."""
    args = ["recipe", "run", "kv-capacity", "--snapshot", f"pip:vllm=={release}", "--config",
            str(CONFIGS / config), "--flags", flags, "--set", f"available_kv_gib={gib}", "--json"]
    for item in sets:
        args += ["--set", item]
    done = recon(*args)
    assert done.returncode == 0, done.stderr[-1500:]
    return cast(dict[str, Any], json.loads(done.stdout))


def holds_tokens(out: dict[str, Any], gib: float, bytes_per_token: int) -> bool:
    """Whether the answer's token range holds the config's own arithmetic (16-token blocks)."""
    low, high = out["values"]["kv_cache_tokens_range"]
    return bool(low <= int(gib * 2**30) // bytes_per_token // 16 * 16 <= high)


def case_command(case: dict[str, Any]) -> list[str]:
    """``recon recipe run`` for a case: its flags as given, its --set, its logged KV memory."""
    cmd = ["recipe", "run", RECIPE[case["kind"]], "--snapshot", f"pip:vllm=={case['release']}",
           "--flags", case["flags"], "--json"]
    if case.get("config"):
        cmd += ["--config", str(CONFIGS / case["config"])]
    for item in case["set"]:
        cmd += ["--set", item]
    if "available_kv_gib" in case["logged"]:
        cmd += ["--set", f"available_kv_gib={case['logged']['available_kv_gib']}"]
    return cmd


def _marks(case: dict[str, Any]) -> list[Any]:
    marks = []
    if case["release"] not in IN_CI and not ALL:
        marks.append(pytest.mark.skip(reason=f"vLLM {case['release']}: RECON_ENGINE_ALL=1"))
    if case["id"] in NOT_YET:
        marks.append(pytest.mark.xfail(reason=NOT_YET[case["id"]], strict=True))
    return marks


@pytest.mark.parametrize("case", [pytest.param(c, id=c["id"], marks=_marks(c))
                                  for c in CASES + FOUND])
def test_public_log_case(case: dict[str, Any]) -> None:
    """Each number the engine printed, from the command line exactly as the user typed it."""
    done = recon(*case_command(case))
    assert done.returncode == 0, done.stderr[-1500:]
    values = json.loads(done.stdout)["values"]
    logged = case["logged"]
    if case["kind"] == "page-align":
        assert values["attention_block_size"] == logged["block"]
        if logged["padding"] is None:  # no padding line: the pages were equal already
            assert not values.get("mamba_padding_pct")
        else:
            assert f"{values['mamba_padding_pct']:.2f}%" == logged["padding"]
    elif case["kind"] == "kv":
        low, high = values["kv_cache_tokens_range"]
        assert low <= logged["tokens"] <= high
        low_c, high_c = values["max_concurrency_range"]
        if logged["concurrency"] is not None:  # a source that quotes only the KV lines
            assert round(low_c, 2) <= logged["concurrency"] <= round(high_c, 2)
    else:  # what the log printed: a release before 0.11.1 prints no largest size of a kind
        if logged["sizes"] is not None:
            assert values["cudagraph_capture_sizes"] == logged["sizes"]
        for kind in ("piecewise", "full"):
            if logged[kind] is None:  # the log printed no capture of that kind: none was made
                assert values.get(f"cudagraph_graphs_{kind}", 0) == 0, kind
                continue
            count, largest = logged[kind]
            assert values[f"cudagraph_graphs_{kind}"] == count, kind
            if largest is not None:
                assert values[f"cudagraph_graphs_{kind}_max"] == largest, kind


def test_unknown_option_and_flag_are_errors() -> None:
    """A --set key no engine-backed recipe reads, and a flag the release does not know."""
    base = ["recipe", "run", "vllm-capture-sizes", "--snapshot", "pip:vllm==0.26.0"]
    bad_set = recon(*base, "--flags", "vllm serve m", "--set", "gpus=h100")
    assert bad_set.returncode != 0 and "gpus" in bad_set.stderr
    bad_flag = recon(*base, "--flags", "vllm serve m --max-num-seqz 8")
    assert bad_flag.returncode == 2 and "--max-num-seqz" in bad_flag.stderr


def test_compute_capability_names_a_board_and_says_so() -> None:
    from recon.engine.gpus import UnknownGPU, board_for

    assert board_for("sm89")[0] == "l40s" and "first board" in board_for("sm89")[1]
    assert board_for("h200") == ("h200", "")
    with pytest.raises(UnknownGPU):
        board_for("sm77")


def test_a_rounded_log_value_inside_the_predicted_range_matches() -> None:
    from recon.logs.compare import within

    assert within((53200.0, 53600.0), 53200) and within((66.9, 67.05), 66.95)
    assert not within((53200.0, 53600.0), 54000) and not within(None, 53200)
    assert not within((0.0, 1.0), True)


def test_the_printed_block_size_wins_over_the_config_field() -> None:
    from recon.engine.config import _printed_block

    result = {"logged": {"attention_block_size_logged": 400},
              "facts": {"attention_block_size": 16}}
    assert _printed_block(result) == {"attention_block_size": 400,
                                      "attention_block_size_config": 16}
    assert _printed_block({"logged": {}, "facts": {"attention_block_size": 16}}) == {}


def test_fake_registration_of_an_absent_op_is_tolerated_outside_torch() -> None:
    """A library whose compiled ops cannot load on a CPU torch (torchvision's) still imports."""
    import torch

    from recon.engine import child

    ops = child.MissingOps()
    before = {n: getattr(torch.library, n) for n in ("register_fake", "impl_abstract")
              if hasattr(torch.library, n)}
    try:
        ops._tolerate_fakes(torch)

        def fake(x):  # noqa: ANN001, ANN202
            return x

        assert torch.library.register_fake("recon_absent_lib::nms", fake) is fake
        assert any("recon_absent_lib::nms" in c for c in ops.called)
        with pytest.raises(Exception):  # noqa: B017 - torch's own namespace: torch decides
            torch.library.register_fake("aten::recon_absent_op", fake)
    finally:
        for name, original in before.items():
            setattr(torch.library, name, original)


def test_an_older_release_runs_with_the_libraries_of_its_day() -> None:
    """0.10.2 requires ``transformers >= 4.55.2``; resolved today it got transformers 5, whose
    config class refuses gpt-oss's rope settings, and there was no answer. Resolved as of the
    day 0.11.0 replaced it (2025-10-04) it answers, with the KV arithmetic of the config itself:
    36 layers x (K and V) x 8 heads x 64 x 2 bytes = 73,728 bytes a token, 16-token blocks."""
    out = kv_answer("0.10.2", "gpt-oss-120b.json",
                    "vllm serve openai/gpt-oss-120b --max-model-len 8192", 20, "gpu=h100")
    assert holds_tokens(out, 20, 73_728)
    said = [f["text"] for f in out["findings"] if "requirements as of" in f["text"]]
    assert len(said) == 1 and "as of 2025-10-04" in said[0], said
    assert "when vllm 0.11.0 replaced it" in said[0] and "it came out 2025-09-13" in said[0]
    assert re.search(r"\(transformers 4\.\d+\.\d+\)", said[0]), said[0]


def test_a_model_a_later_library_broke_runs_with_the_libraries_of_its_release_day() -> None:
    """Gemma 4 on 0.26.0: with the libraries of the weeks it was the newest release
    (transformers 5.15.0) the release's own config code reads ``head_dim``, which that
    transformers refuses for a model whose layers differ; a public B300 log shows the engine
    ran. With the libraries of its release day (transformers 5.14.1, as its image has them)
    it answers, and says which it used and why."""
    out = kv_answer("0.26.0", "gemma-4-31b-it.json",
                    "vllm serve google/gemma-4-31B-it --dtype bfloat16 --max-model-len 16384",
                    182.37, "gpu=b300")
    texts = [f["text"] for f in out["findings"]]
    said = [t for t in texts if "libraries of the release's own day" in t]
    assert len(said) == 1 and "fails inside transformers" in said[0], texts
    assert "transformers==5.15.0" in said[0] and "transformers==5.14.1" in said[0], said[0]
    assert any("requirements as of 2026-07-25 (transformers 5.14.1)" in t for t in texts), texts
    low, high = out["values"]["kv_cache_tokens_range"]
    assert low <= 217_116 <= high  # the engine's own line in that log


def test_expert_parallel_on_an_older_release_builds_its_expert_map() -> None:
    """0.10.2's ``FusedMoE`` logs its expert map (``torch.where`` and ``.item()``) while the
    model is built; on meta that had no values and expert parallelism had no answer. Now:
    Qwen3-30B-A3B at TP 4 has 4 KV heads, one a GPU: 48 layers x (K and V) x 1 x 128 x
    2 bytes = 24,576 bytes a token, 16-token blocks."""
    out = kv_answer("0.10.2", "qwen3-30b-a3b.json",
                    "vllm serve Qwen/Qwen3-30B-A3B -tp 4 --enable-expert-parallel", 10, "gpu=l40s")
    assert holds_tokens(out, 10, 24_576)


#: a configuration module of the kind a model folder ships for ``--trust-remote-code`` (written
#: for this test): its class changes the context length, so an answer shows it was executed
REMOTE_CONFIG_MODULE = '''"""A model's own configuration class, as a remote-code model folder ships one."""
from transformers import PretrainedConfig


class ToyHybridConfig(PretrainedConfig):
    model_type = "nemotron_h"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.max_position_embeddings = 3072
'''


def test_a_remote_code_configuration_is_read_from_the_model_folder(tmp_path: Path) -> None:
    """0.19.0 registers no configuration class for ``nemotron_h`` and its transformers has none:
    the engine reads the model folder's own module, which ``auto_map`` names, under
    ``--trust-remote-code``. config.json alone is refused with what to give; with the module the
    release executes it (its class sets a 3,072-token context; config.json says 8,192);
    without ``--trust-remote-code`` the release refuses as the engine does."""
    config = json.loads((EXAMPLES_DIR / "nemotron-h-8b-base-8k.json").read_text())
    config["auto_map"] = {"AutoConfig": "configuration_toy_hybrid.ToyHybridConfig"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    flags = "vllm serve nvidia/Nemotron-H-8B-Base-8K --trust-remote-code"

    def ask(command: str) -> subprocess.CompletedProcess[str]:
        return recon("engine-config", "pip:vllm==0.19.0", "--config", str(tmp_path),
                     "--flags", command, "--json")

    alone = ask(flags)
    assert alone.returncode != 0
    assert "auto_map names configuration_toy_hybrid.py" in alone.stderr, alone.stderr[-800:]
    (tmp_path / "configuration_toy_hybrid.py").write_text(REMOTE_CONFIG_MODULE)
    done = ask(flags)
    assert done.returncode == 0, done.stderr[-1500:]
    out = json.loads(done.stdout)
    assert out["max_model_len"] == 3072
    assert any("configuration_toy_hybrid.py" in a for a in out["assumptions"]), out["assumptions"]
    untrusted = ask(flags.replace(" --trust-remote-code", ""))
    assert untrusted.returncode != 0 and "trust_remote_code" in untrusted.stderr


def test_a_rocm_board_runs_the_releases_rocm_platform() -> None:
    """An MI300X: the release's own ROCm platform class, whose module asks torch for the
    board's architecture when imported (before, no ROCm board had an answer: "Found no NVIDIA
    driver"). Qwen2.5-14B: 48 layers x (K and V) x 8 heads x 128 x 2 bytes = 196,608 bytes a
    token, 16-token blocks; the answer says whose code ran."""
    out = kv_answer("0.33.0", "qwen2.5-14b-instruct.json", "vllm serve Qwen/Qwen2.5-14B-Instruct",
                    100, "gpu=mi300x")
    assert holds_tokens(out, 100, 196_608)
    said = [f["text"] for f in out["findings"] if "ROCm" in f["text"]]
    assert len(said) == 1 and "gfx942" in said[0], said


def test_a_docker_run_command_is_read_as_the_container_runs_it() -> None:
    """A command pasted as ``docker run ... IMAGE ARGS``: the arguments go to the image's entry
    point, its ``-e`` settings are the environment, and an image of another release is said.
    Llama-3.1-8B: 32 layers x (K and V) x 8 heads x 128 x 2 bytes = 131,072 bytes a token."""
    typed = ("docker run --gpus all --ipc=host -p 8000:8000 -e VLLM_LOGGING_LEVEL=INFO "
             "vllm/vllm-openai:v0.31.0 --model meta-llama/Llama-3.1-8B-Instruct "
             "--max-model-len 8192")
    out = kv_answer("0.33.0", "llama-3.1-8b-instruct.json", typed, 10)
    assert holds_tokens(out, 10, 131_072)
    assert out["values"]["max_model_len"] == 8192
    said = " ".join(f["text"] for f in out["findings"])
    assert "a container run of vllm/vllm-openai:v0.31.0" in said
    assert "pip:vllm==0.31.0" in said  # the image's release is not the snapshot's


def test_the_server_not_this_machine_holds_the_swap_space() -> None:
    """0.10.2 refuses a command whose swap space (4 GiB a GPU) times TP is over 70% of the
    host's memory; read from this machine (24 GiB here), every TP 8 command failed where the
    server started. The host is the declared server's, and the answer says so."""
    done = recon("engine-config", "pip:vllm==0.10.2", "--json",
                 "--config", str(CONFIGS / "qwen3-next-80b-a3b-instruct.json"),
                 "--flags", "vllm serve Qwen/Qwen3-Next-80B-A3B-Instruct -tp 8")
    assert done.returncode == 0, done.stderr[-1500:]
    out = json.loads(done.stdout)
    assert out["tensor_parallel_size"] == 8
    assert any(a.startswith("host memory: 1024 GiB") for a in out["assumptions"])


def test_a_model_folders_processor_file_is_read_beside_its_config(tmp_path: Path) -> None:
    """0.28.0 builds Qwen2.5-VL's input normalisation from the processor's configuration, so
    config.json alone gives the release's own error, with what to give; the file beside it
    (as in the model's folder) gives the answer: the language model's 28 layers x (K and V) x
    4 heads x 128 x 2 bytes a token, 16-token blocks."""
    folder = CONFIGS / "qwen2.5-vl-7b-instruct"
    alone = tmp_path / "config.json"
    alone.write_bytes((folder / "config.json").read_bytes())
    args = ["recipe", "run", "kv-capacity", "--snapshot", "pip:vllm==0.28.0", "--flags",
            "vllm serve Qwen/Qwen2.5-VL-7B-Instruct --max-model-len 32768",
            "--set", "available_kv_gib=20", "--json"]
    refused = recon(*args, "--config", str(alone))
    assert refused.returncode == 7, refused.stderr[-800:]
    assert "put that file beside the config.json" in refused.stderr
    done = recon(*args, "--config", str(folder / "config.json"))
    assert done.returncode == 0, done.stderr[-1500:]
    out = json.loads(done.stdout)
    low, high = out["values"]["kv_cache_tokens_range"]
    assert low <= 20 * 2**30 // 57_344 // 16 * 16 <= high
    assert any("preprocessor_config.json beside config.json" in f["text"] for f in out["findings"])
