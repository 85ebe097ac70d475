"""Differential: recon's engine mode against the release's VllmConfig built directly, case for case.

For a grid of models (a gated-delta-net hybrid shaped like Qwen3-Next, a Mamba2
hybrid shaped like Nemotron-H, a dense Llama) and command lines (TP 1/2/4/8, fp8
KV, float32 SSM state, prefix caching on and off, MTP) on three releases (0.10.2, 0.26.0, 0.33.0), recon's
answer (the sandboxed child, the ``vllm serve`` parser, the declared H100) is
compared field by field with ``tests/data/vllm_reference.py``: an independent
script that builds the same release's config through ``EngineArgs.add_cli_args``
and ``create_engine_config`` in the release environment's Python, the device
patched in place to the same board. A command line the release refuses must be
refused by both. CI runs 17 of the 36 cases: the Qwen3-Next-shaped model on the three
releases (TP 1/2/4/8 on 0.33.0, every flag on 0.26.0 and 0.33.0, the TP 2 ones on 0.10.2, where
``create_engine_config`` also decides the block size); ``RECON_ENGINE_ALL=1`` runs all of them.

The block-size fields are compared only where the release decides them in
``create_engine_config`` (0.10.2: its hybrid config hook). 0.26.0 and 0.33.0 decide
them later, in the worker (``update_block_size_for_backend``, over the model's
layers), which the reference does not run: the real-engine logs of
tests/test_engine_mode.py and tests/test_engine_recipes.py judge those.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from recon.engine.config import EngineFailed, EngineUsageError, engine_config, environment
from recon.engine.gpus import HOST_MEMORY_GIB
from recon.engine.gpus import gpu as lookup_gpu
from recon.examples import EXAMPLES_DIR
from recon.paths import cache_dir
from recon.snapshots.model import Snapshot

REFERENCE = Path(__file__).parent / "data" / "vllm_reference.py"
MODELS = {"qwen3next": "qwen3-next-80b-a3b-instruct", "nemotronh": "nemotron-h-8b-base-8k",
          "llama": "llama-3.1-8b-instruct"}
MTP = '--speculative-config {"method":"mtp","num_speculative_tokens":2}'
GRID = [("qwen3next", f"-tp {tp}") for tp in (1, 2, 4, 8)] + [
    ("qwen3next", "-tp 2 --kv-cache-dtype fp8"),
    ("qwen3next", "-tp 2 --mamba-ssm-cache-dtype float32"),
    ("qwen3next", "-tp 2 --no-enable-prefix-caching"),
    ("qwen3next", "-tp 4 " + MTP),
    ("nemotronh", "-tp 1"),
    ("nemotronh", "-tp 8"),
    ("nemotronh", "-tp 1 --enable-prefix-caching"),
    ("llama", "-tp 4 --kv-cache-dtype fp8"),
]
RELEASES = ("0.10.2", "0.26.0", "0.33.0")
#: the cases CI runs (one model shape per release: one warm server each); the whole grid, all
#: releases, with RECON_ENGINE_ALL=1 (24 of 24 equal on 0.26.0 and 0.33.0 when last run,
#: docs/engine-mode.md; on 0.10.2 the Qwen3-Next and Llama cases, 9 of 9)
IN_CI = {("0.33.0", "qwen3next"), ("0.26.0", "qwen3next"), ("0.10.2", "qwen3next")}
ALL = os.environ.get("RECON_ENGINE_ALL") == "1"
BOARD = lookup_gpu("h100")
BLOCK_FIELDS = {"attention_block_size", "mamba_block_size", "mamba_page_size_padded"}


def _config(model: str) -> dict[str, Any]:
    return json.loads((EXAMPLES_DIR / f"{MODELS[model]}.json").read_text())


def _argv(flags: str) -> list[str]:
    # the JSON value of --speculative-config is one argument (split here, not by a shell)
    head, sep, spec = flags.partition("--speculative-config ")
    return head.split() + (["--speculative-config", spec] if sep else [])


def _compiled(snapshot: Snapshot) -> list[str]:
    """The snapshot's compiled modules, from its manifest: every ``.so`` listed or skipped."""
    paths = [*snapshot.manifest.files, *snapshot.manifest.skipped]
    names = []
    for path in paths:
        if path.endswith(".so"):
            folder, _, base = path.rpartition("/")
            names.append(".".join([*folder.split("/"), base.split(".")[0]]).lstrip("."))
    return sorted(set(names))


def _metadata(snapshot: Snapshot) -> str:
    from recon.engine.config import snapshot_metadata

    return snapshot_metadata(snapshot)


def _selected(release: str) -> list[tuple[str, str]]:
    return [(model, flags) for model, flags in GRID if _runs(release, model, flags)]


@pytest.fixture(scope="module")
def reference(pip_snapshot: Callable[..., Snapshot]) -> Callable[[str], list[dict[str, Any]]]:
    """The reference script's answers for a release's cases that run (kept in recon's cache)."""
    answers: dict[str, list[dict[str, Any]]] = {}

    def run(release: str) -> list[dict[str, Any]]:
        if release in answers:
            return answers[release]
        snap = pip_snapshot(f"vllm=={release}")
        env = environment(snap)
        request = {"src": str(snap.src), "compiled": _compiled(snap),
                   "metadata": _metadata(snap),
                   "gpu": {**BOARD.as_json(), "count": 8, "host_memory_bytes": HOST_MEMORY_GIB << 30},
                   "cases": [{"argv": _argv(flags), "config": _config(model)}
                             for model, flags in _selected(release)]}
        key = hashlib.sha256(REFERENCE.read_bytes() + json.dumps(
            [request, env.root.name], sort_keys=True).encode()).hexdigest()
        stored = cache_dir() / "test-vllm-reference" / f"{key}.json"
        if not stored.is_file():
            with tempfile.TemporaryDirectory() as work:
                out = Path(work) / "out.json"
                done = subprocess.run([str(env.python), "-I", "-B", str(REFERENCE)],
                                      input=json.dumps({**request, "out": str(out)}),
                                      capture_output=True, text=True, timeout=1200,
                                      cwd=work, env={**os.environ, "HOME": work})
                assert out.is_file(), done.stdout[-2000:] + done.stderr[-2000:]
                stored.parent.mkdir(parents=True, exist_ok=True)
                stored.write_text(out.read_text())
        answers[release] = json.loads(stored.read_text())
        return answers[release]

    return run


def _runs(release: str, model: str, flags: str) -> bool:
    if ALL:
        return True
    if release == "0.33.0":
        return (release, model) in IN_CI
    if release == "0.10.2":  # the oldest release of the range: its TP 2 command lines
        return (release, model) in IN_CI and "-tp 2" in flags
    return (release, model) in IN_CI and ("-tp 2" in flags or "mtp" in flags)


def _cases() -> list[Any]:
    skip = pytest.mark.skip(reason="the whole grid runs with RECON_ENGINE_ALL=1")
    return [pytest.param(release, model, flags, marks=[] if _runs(release, model, flags) else [skip],
                         id=f"{release}-{model}:{flags[:40]}")
            for release in RELEASES for model, flags in GRID]


@pytest.mark.parametrize(("release", "model", "flags"), _cases())
def test_recon_equals_the_release_built_directly(
        release: str, model: str, flags: str, pip_snapshot: Callable[..., Snapshot],
        reference: Callable[[str], list[dict[str, Any]]]) -> None:
    expected = reference(release)[_selected(release).index((model, flags))]
    snap = pip_snapshot(f"vllm=={release}")
    try:
        facts = engine_config(snap, ["vllm", "serve", "MODEL", *_argv(flags)], _config(model),
                              gpu="h100")
    except (EngineUsageError, EngineFailed) as err:
        assert not expected["ok"], f"recon refused ({err}) where the release answered"
        return
    assert expected["ok"], f"recon answered where the release refused: {expected['error']}"
    fields = expected["fields"]
    compared = {k for k in fields if k not in BLOCK_FIELDS
                or facts.block_size_stage.startswith("create_engine_config")}
    assert compared >= {"max_num_seqs", "tensor_parallel_size", "cudagraph_capture_sizes"}
    got = {k: facts.facts.get(k) for k in compared}
    if "attention_block_size_config" in facts.facts and "attention_block_size" in compared:
        got["attention_block_size"] = facts.facts["attention_block_size_config"]
    assert got == {k: fields[k] for k in compared}
