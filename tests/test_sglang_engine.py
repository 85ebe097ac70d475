"""SGLang engine mode: the release's own ServerArgs, against the release imported without recon.

Differential: for a grid of models (a gated-delta-net hybrid, a Mamba2 hybrid,
a dense model) and command lines, recon's answer (sandboxed child, the release's
``prepare_server_args`` and resolution, a declared H100) is compared field by
field with ``tests/data/sglang_reference.py``, an independent script that builds
the same release's ServerArgs directly in the release environment's Python
with the device monkeypatched to the same board. Both answers are kept on disk
(recon's engine-result cache; the reference under ``test-sglang-reference`` in
recon's cache, keyed by the snapshot, the environment and the script), so a
warm run only compares.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from recon.engine import sglang_child
from recon.engine.config import EngineUsageError
from recon.engine.env import gpu_only_modules
from recon.engine.gpus import gpu as lookup_gpu
from recon.engine.sglang import ServerArgsFacts, environment, launcher_argv, server_args
from recon.examples import EXAMPLES_DIR
from recon.paths import cache_dir
from recon.snapshots.model import Snapshot

DATA = Path(__file__).parent / "data"
REFERENCE = DATA / "sglang_reference.py"
LOGS = DATA / "logs" / "sglang"
LAUNCH = "python -m sglang.launch_server --model-path {model} "
MODELS = {"qwen3next": ("qwen3-next-80b-a3b-instruct", "Qwen/Qwen3-Next-80B-A3B-Instruct"),
          "nemotronh": ("nemotron-h-8b-base-8k", "nvidia/Nemotron-H-8B-Base-8K"),
          "llama": ("llama-3.1-8b-instruct", "meta-llama/Llama-3.1-8B-Instruct")}
#: (release, model, flags after the model path, draft config) -- the differential grid
GRID = [
    ("0.5.23", "qwen3next", "--tp 4", None),
    ("0.5.23", "qwen3next", "--tp 4 --speculative-algorithm NEXTN --speculative-num-steps 3 "
                            "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4", None),
    ("0.5.23", "qwen3next", "--tp 1 --page-size 64", None),
    ("0.5.23", "nemotronh", "--tp 1 --max-running-requests 64 --chunked-prefill-size 4096", None),
    ("0.5.23", "llama", "--tp 1", None),
    ("0.5.23", "llama", "--tp 4 --page-size 16 --chunked-prefill 16384", None),  # abbreviation
    ("0.5.23", "llama", "--speculative-algorithm EAGLE --speculative-draft-model-path "
                        "lmsys/sglang-EAGLE-LLaMA3-Instruct-8B --speculative-num-steps 3 "
                        "--speculative-eagle-topk 4 --speculative-num-draft-tokens 8", "eagle"),
    ("0.5.10", "qwen3next", "--tp 4", None),
    ("0.5.10", "llama", "--tp 1", None),
    ("0.5.5", "qwen3next", "--tp 4", None),
]
#: the resolved values compared (a field, or a path into one; absent in a release: skipped)
COMPARED = ("chunked_prefill_size", "page_size", "mem_fraction_static", "cuda_graph_max_bs",
            "cuda_graph_config.decode.max_bs", "cuda_graph_config.decode.bs", "cuda_graph_bs",
            "disable_overlap_schedule", "attention_backend", "speculative_algorithm",
            "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
            "max_running_requests", "mamba_scheduler_strategy", "mamba_radix_cache_strategy",
            "tp_size", "sampling_backend")
BOARD = lookup_gpu("h100")


def _config(name: str) -> dict[str, Any]:
    return json.loads((EXAMPLES_DIR / f"{MODELS[name][0]}.json").read_text(encoding="utf-8"))


def _draft(kind: str | None) -> dict[str, Any] | None:
    """An EAGLE draft head for the Llama example: its own one-layer config, as EAGLE ships."""
    if kind is None:
        return None
    base = _config("llama")
    return {**base, "architectures": ["LlamaForCausalLMEagle"], "num_hidden_layers": 1}


def _value(fields: dict[str, Any], path: str) -> tuple[bool, Any]:
    head, *rest = path.split(".")
    if head not in fields:
        return False, None
    value = fields[head]
    for part in rest:
        if not isinstance(value, dict) or part not in value:
            return False, None
        value = value[part]
    return True, value


@pytest.fixture(scope="module")
def snapshots(pip_snapshot: Callable[..., Snapshot]) -> dict[str, Snapshot]:
    return {v: pip_snapshot(f"sglang=={v}") for v in sorted({case[0] for case in GRID})}


def _reference(snap: Snapshot, cases: list[tuple[str, str, str | None]]) -> list[dict[str, Any]]:
    """The reference script's answers for ``cases`` (model, flags, draft), kept on disk."""
    from recon.snapshots.cache import tree_key

    renv = environment(snap)
    request = {"src": str(snap.src), "gpu": {**BOARD.as_json(), "count": 8},
               "cases": [{"argv": _reference_argv(flags, draft), "config": _config(model),
                          "draft": _draft(draft)} for model, flags, draft in cases]}
    key = hashlib.sha256(json.dumps([tree_key(snap.src), renv.root.name, request,
                                     REFERENCE.read_bytes().decode()], sort_keys=True,
                                    default=str).encode()).hexdigest()
    stored = cache_dir() / "test-sglang-reference" / f"{key}.json"
    if stored.is_file():
        return json.loads(stored.read_text(encoding="utf-8"))
    env = {"PATH": os.environ.get("PATH", ""), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "HOME": str(stored.parent)}
    stored.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([str(renv.python), "-I", str(REFERENCE)],  # noqa: S603 - ours
                          input=json.dumps(request), capture_output=True, text=True, env=env,
                          timeout=900, check=False)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RECON-REFERENCE ")]
    assert lines, f"the reference script gave no answer: {done.stderr[-2000:]}"
    answers = json.loads(lines[-1].removeprefix("RECON-REFERENCE "))
    stored.write_text(json.dumps(answers), encoding="utf-8")
    return answers


def _reference_argv(flags: str, draft: str | None) -> list[str]:
    """The flags the reference passes after its own ``--model-path`` (a draft: its folder)."""
    words = flags.split()
    if draft and "--speculative-draft-model-path" in words:
        words[words.index("--speculative-draft-model-path") + 1] = "@draft"
    return words


@pytest.fixture(scope="module")
def references(snapshots: dict[str, Snapshot]) -> dict[tuple[str, str, str], dict[str, Any]]:
    out = {}
    for release, snap in snapshots.items():
        cases = [(m, f, d) for r, m, f, d in GRID if r == release]
        for (model, flags, _), answer in zip(cases, _reference(snap, cases), strict=True):
            out[(release, model, flags)] = answer
    return out


def _recon(snap: Snapshot, model: str, flags: str, draft: str | None) -> ServerArgsFacts:
    return server_args(snap, LAUNCH.format(model=MODELS[model][1]) + flags, _config(model),
                       gpu="h100", draft_config=_draft(draft))


@pytest.mark.parametrize(("release", "model", "flags", "draft"), GRID,
                         ids=[f"{r}-{m}-{f[:40]}" for r, m, f, _ in GRID])
def test_resolved_values_match_the_release_built_directly(
        snapshots: dict[str, Snapshot], references: dict[tuple[str, str, str], dict[str, Any]],
        release: str, model: str, flags: str, draft: str | None) -> None:
    ref = references[(release, model, flags)]
    assert ref["ok"], f"the reference could not build ServerArgs: {ref.get('error')}"
    facts = _recon(snapshots[release], model, flags, draft)
    compared = 0
    for path in COMPARED:
        present, expected = _value(ref["fields"], path)
        if not present:
            continue
        got_present, got = _value(facts.server_args, path)
        assert got_present, f"{path} missing from recon's answer"
        assert got == expected, f"{path}: recon {got!r}, the release built directly {expected!r}"
        compared += 1
    assert compared >= 8
    assert facts.launch_check.get("ok") is not False


def test_overlap_scheduler_off_is_attributed_to_the_release_function(
        snapshots: dict[str, Snapshot]) -> None:
    """0.5.10 turns the overlap scheduler off for Qwen3-Next's mamba cache (field notes)."""
    facts = _recon(snapshots["0.5.10"], "qwen3next", "--tp 4", None)
    change = facts.changed["disable_overlap_schedule"]
    assert change["value"] is True and change["changed_by"] == ["resolution"]
    assert change["decided_by"]["by"] == "ServerArgs._handle_mamba_radix_cache"
    assert change["decided_by"]["file"] == "sglang/srt/server_args.py"
    assert facts.changed["tp_size"]["changed_by"] == ["flag"]


def test_declared_decisions_name_their_source(snapshots: dict[str, Snapshot]) -> None:
    """0.5.23 declares each decision with a source: recon names it and where it is defined."""
    facts = _recon(snapshots["0.5.23"], "qwen3next", "--tp 4", None)
    chunk = facts.changed["chunked_prefill_size"]["decided_by"]
    assert chunk["by"] == "_handle_gpu_memory_settings" and chunk["file"].endswith(".py")
    assert facts.changed["page_size"]["decided_by"]["by"] == "_page_size_default"
    assert facts.resolution == "ServerArgs.resolve_once"
    assert facts.server_args["model_path"] == MODELS["qwen3next"][1]
    replaced = facts.replaced
    assert "sgl_kernel" in replaced["gpu_packages"]
    assert any("get_nvgpu_memory_capacity" in d for d in replaced["device"])
    assert all(r.startswith("subprocess.Popen") for r in replaced["refused"])


def test_unknown_flag_is_the_release_parser_error_exit_2(snapshots: dict[str, Snapshot]) -> None:
    with pytest.raises(EngineUsageError) as err:
        _recon(snapshots["0.5.23"], "llama", "--no-such-flag 3", None)
    assert err.value.exit_code == 2
    assert "unrecognized arguments: --no-such-flag" in str(err.value)


def test_ambiguous_abbreviation_is_refused_as_the_release_refuses_it(
        snapshots: dict[str, Snapshot]) -> None:
    with pytest.raises(EngineUsageError) as err:
        _recon(snapshots["0.5.23"], "llama", "--speculative-draft 4", None)
    assert "ambiguous option: --speculative-draft could match" in str(err.value)


def test_abbreviation_resolves_as_the_full_flag(snapshots: dict[str, Snapshot]) -> None:
    facts = _recon(snapshots["0.5.23"], "llama", "--tp 4 --page-size 16 --chunked-prefill 16384",
                   None)
    assert facts.server_args["chunked_prefill_size"] == 16384
    assert facts.changed["chunked_prefill_size"]["changed_by"] == ["flag"]


def test_cli_engine_config_dispatches_to_sglang(snapshots: dict[str, Snapshot]) -> None:
    snap = snapshots["0.5.23"]
    cmd = [sys.executable, "-m", "recon", "engine-config", str(snap.root), "--flags",
           LAUNCH.format(model=MODELS["llama"][1]) + "--tp 1", "--config",
           "example:llama-3.1-8b-instruct", "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)  # noqa: S603
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["server_args"]["chunked_prefill_size"] == 8192
    assert data["changed"]["chunked_prefill_size"]["decided_by"]["by"]
    bad = subprocess.run([*cmd[:6], LAUNCH.format(model="M") + "--no-such-flag"] + cmd[7:],
                         capture_output=True, text=True, timeout=600, check=False)  # noqa: S603
    assert bad.returncode == 2 and "unrecognized arguments: --no-such-flag" in bad.stderr


def test_recipe_json_keys(snapshots: dict[str, Snapshot]) -> None:
    from recon.recipes import run_recipe

    res = run_recipe("sglang-server-args", snapshots["0.5.23"],
                     config=str(EXAMPLES_DIR / "qwen3-next-80b-a3b-instruct.json"),
                     flags=LAUNCH.format(model=MODELS["qwen3next"][1]) + "--tp 4").to_json()
    values = res["values"]
    assert {"chunked_prefill_size", "page_size", "mem_fraction_static", "cuda_graph_max_bs",
            "cuda_graph_bs", "max_running_requests", "disable_overlap_schedule",
            "attention_backend", "decided_by", "resolution"} <= set(values)
    assert all(k.isidentifier() for k in values) and isinstance(values["page_size"], int)
    assert values["decided_by"]["chunked_prefill_size"] == "_handle_gpu_memory_settings"
    assert [t["title"] for t in res["tables"]] == ["resolved values",
                                                   "speculative and mamba fields"]


def test_recipe_is_not_applicable_to_vllm(vllm_latest: Snapshot) -> None:
    from recon.recipes import run_recipe

    res = run_recipe("sglang-server-args", vllm_latest, config=None,
                     flags="python -m sglang.launch_server --model-path M")
    assert not res.applicable and "sglang" in str(res.reason)


# -- the pieces, without the sandbox or SGLang -----------------------------------------------

@pytest.mark.parametrize(("typed", "entry", "argv", "env"), [
    ("python -m sglang.launch_server --model-path M --tp 2", "launch_server",
     ["--model-path", "M", "--tp", "2"], {}),
    ("python3 -m sglang.launch_server --model-path M", "launch_server", ["--model-path", "M"], {}),
    ("SGLANG_X=1 sglang serve M --tp 2", "serve", ["M", "--tp", "2"], {"SGLANG_X": "1"}),
    ("--model-path M", "launch_server", ["--model-path", "M"], {}),
    # a container run: the image's own command follows it, -e settings are the environment
    ("docker run --gpus all --shm-size 32g -p 30000:30000 -e SGLANG_X=1 --ipc=host "
     "lmsysorg/sglang:latest python3 -m sglang.launch_server --model-path M --tp 2",
     "launch_server", ["--model-path", "M", "--tp", "2"], {"SGLANG_X": "1"}),
])
def test_launcher_argv(typed: str, entry: str, argv: list[str], env: dict[str, str]) -> None:
    assert launcher_argv(typed) == (entry, argv, env)


def test_launcher_argv_refuses_other_programs() -> None:
    from recon.errors import ReconError

    with pytest.raises(ReconError, match="not an SGLang server command line"):
        launcher_argv("vllm serve M")


def test_changes_name_flag_and_resolution() -> None:
    final = {"a": 1, "b": 8192, "c": True, "d": None}
    given = {"a": 1, "b": None, "c": True, "d": None}
    defaults = {"a": 0, "b": None, "c": False, "d": None}
    decided = {"b": [{"by": "f", "value": 4096}, {"by": "g", "value": 8192}]}
    out = sglang_child.changes(final, given, defaults, decided)
    assert out["a"]["changed_by"] == ["flag"] and "decided_by" not in out["a"]
    assert out["b"]["changed_by"] == ["resolution"] and out["b"]["decided_by"]["by"] == "g"
    assert "d" not in out


def test_gpu_only_modules_cover_sglang_kernels() -> None:
    names = gpu_only_modules(["sglang-kernel", "flashinfer-python", "nvidia-ml-py", "torch"])
    assert names == ["flashinfer", "sgl_kernel"]


def test_refused_process_fails_as_a_missing_program() -> None:
    guard = sglang_child.NoProcesses()
    with pytest.raises(FileNotFoundError):
        guard.hook("subprocess.Popen", ("nvidia-smi", ["nvidia-smi"]))
    guard.hook("open", ("x",))
    assert guard.refused == ["subprocess.Popen nvidia-smi"]
