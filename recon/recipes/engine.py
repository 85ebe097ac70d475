"""Recipes answered in engine mode: the release builds its own config, recipes read it.

The vLLM recipes that predict start-up numbers (block size and mamba padding,
CUDA graph sizes, KV capacity) all read one engine-mode answer
(:func:`recon.engine.config.engine_config`): the user's command line as typed,
through the release's own parser and config classes, on a declared GPU. A
recipe here only chooses which of the release's numbers it shows and what it
says about them; nothing is re-typed from the engine.

The options every engine-backed recipe shares (``--set``):

* ``gpu``: a board of :mod:`recon.engine.gpus` (``h100``, ``l40s``, ...) or a
  compute capability (``sm86``: the first board of that capability, said so);
* ``attention_backend``: the backend the user forced, given to the release as
  its own ``--attention-backend`` flag where its parser has one, else as
  ``VLLM_ATTENTION_BACKEND`` (the child looks);
* ``available_kv_gib``: the engine's ``Available KV cache memory`` line, for
  KV tokens and concurrency;
* ``usage``: ``serve`` (default, ``vllm serve``), ``llm`` (``LLM(...)``) or ``engine``
  (an engine built from ``(Async)EngineArgs`` in the user's code);
* ``gpu_count``: GPUs visible on the virtual machine (default 8);
* ``prompt_tokens``: with the memory plan, one prompt of N tokens against the memory free
  while serving (``kv-capacity``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..engine.command import words
from ..engine.config import DEFAULT_GPU_COUNT, USAGES, EngineFacts, engine_config, model_files
from ..engine.gpus import board_for
from ..errors import ReconError
from .base import (
    Finding,
    NotApplicable,
    Provenance,
    RecipeContext,
    RecipeResult,
    load_model_config,
)
from .flags import flag_hints

#: the options :func:`engine_facts` reads (every engine-backed recipe accepts them all)
ENGINE_OPTIONS = ("gpu", "attention_backend", "available_kv_gib", "usage", "gpu_count",
                  "prompt_tokens", "draft_config", "engine_env", "engine_transformers",
                  "other_flags")

#: the model assumed when no config.json is given (capture sizes need a model, not its size)
ASSUMED_MODEL = Path(__file__).with_name("assumed_model.json")

#: the functions that decide each recipe's numbers, cited first in provenance
DECIDERS = ("create_engine_config", "update_block_size_for_backend", "get_kv_cache_spec",
            "get_kv_cache_configs", "get_kv_cache_capacity", "_check_and_update_cudagraph_mode",
            "resolve_cudagraph_mode_and_sizes", "initialize_cudagraph_keys",
            "_set_cudagraph_sizes", "post_init_cudagraph_sizes")

_MEMO: dict[str, EngineFacts] = {}


def engine_request(ctx: RecipeContext) -> dict[str, Any]:
    """The engine-mode request a recipe context stands for (options validated)."""
    opts = ctx.options
    usage = str(opts.get("usage", "serve")).lower()
    if usage not in USAGES:
        raise ReconError(f"--set usage: 'serve' (vllm serve), 'llm' (LLM(...)) or 'engine' "
                         f"((Async)LLMEngine.from_engine_args), got {usage!r}")
    gib = opts.get("available_kv_gib")
    if gib is not None and (isinstance(gib, bool) or not isinstance(gib, (int, float)) or gib <= 0):
        raise ReconError(f"--set available_kv_gib: a positive number of GiB, got {gib!r}")
    count = opts.get("gpu_count", DEFAULT_GPU_COUNT)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ReconError(f"--set gpu_count: a positive integer, got {count!r}")
    backend = opts.get("attention_backend")
    if backend is not None and not isinstance(backend, str):
        raise ReconError(f"--set attention_backend: a backend name such as FLASH_ATTN, "
                         f"got {backend!r}")
    prompt = opts.get("prompt_tokens")
    if prompt is not None and (isinstance(prompt, bool) or not isinstance(prompt, int)
                               or prompt < 1):
        raise ReconError(f"--set prompt_tokens: a positive number of tokens, got {prompt!r}")
    draft = opts.get("draft_config")
    transformers = opts.get("engine_transformers")
    if transformers is not None and not isinstance(transformers, (str, int, float)):
        raise ReconError(f"--set engine_transformers: a version such as 5.17.0, got {transformers!r}")
    return {"gpu": opts.get("gpu"), "usage": usage, "kv_memory_gib": gib, "gpu_count": count,
            "attention_backend": backend, "prompt_tokens": prompt,
            "draft_config": load_model_config(str(draft)) if draft is not None else None,
            "env": engine_env(opts.get("engine_env")),
            "transformers": None if transformers is None else str(transformers)}


def engine_env(value: Any) -> dict[str, str]:
    """``--set engine_env``: a JSON object, or ``NAME=VALUE`` pairs split by commas."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    pairs = [p.strip() for p in str(value).split(",") if p.strip()]
    if not isinstance(value, str) or any("=" not in p or p.startswith("=") for p in pairs):
        raise ReconError(f"--set engine_env: NAME=VALUE pairs split by commas, or a JSON object, "
                         f"got {value!r}")
    return dict(p.split("=", 1) for p in pairs)


def engine_facts(ctx: RecipeContext, *, assume_model: bool = False, memory_plan: bool = False
                 ) -> tuple[EngineFacts, list[str]]:
    """The release's answer for this context (one child per distinct request in a process).

    Returns the facts and the assumptions recon made to ask (the model, when no
    config was given and ``assume_model`` allows it: only answers that do not depend on
    the model's layers; the board a compute capability stood for).
    """
    if ctx.snapshot.package != "vllm":
        raise NotApplicable(f"engine mode reads vLLM; the snapshot holds {ctx.snapshot.package}")
    req = engine_request(ctx)
    said: list[str] = []
    config = ctx.config
    if config is None and not assume_model:
        ctx.require_config()
    if config is None:
        config = json.loads(ASSUMED_MODEL.read_text(encoding="utf-8"))
        said.append(f"no config.json given: a small dense decoder "
                    f"({config['architectures'][0]}, {config['num_hidden_layers']} layers) "
                    "stands for the model; numbers that depend on its layers need --config")
    board, how = board_for(req["gpu"])
    if how:
        said.append(how)
    command = ctx.command if ctx.command is not None else "vllm serve model"
    words(command)  # a command line the shell cannot split is the user's error, said as such
    logged = bool(getattr(ctx.given, "from_log", False))
    key = json.dumps([ctx.snapshot.src.as_posix(), command, config, ctx.config_path, board, req,
                      logged, memory_plan],
                     sort_keys=True, default=str)
    if key not in _MEMO:
        try:
            with flag_hints(ctx.snapshot):
                _MEMO[key] = engine_config(ctx.snapshot, command, config, gpu=board,
                                           usage=req["usage"], files=model_files(ctx.config_path),
                                           gpu_count=req["gpu_count"],
                                           kv_memory_gib=req["kv_memory_gib"],
                                           attention_backend=req["attention_backend"],
                                           logged_args=logged, memory_plan=memory_plan,
                                           prompt_tokens=req["prompt_tokens"]
                                           if memory_plan else None,
                                           draft_config=req["draft_config"], env=req["env"],
                                           transformers_version=req["transformers"])
        except ReconError as err:
            if ctx.config is not None:
                raise
            # the same kind of error (its exit code says which), with what may have caused it
            raise type(err)(f"{err} -- with no --config, a small dense decoder stood for the "
                            "model and this command line needs more of one (MTP layers, a "
                            "hybrid...): give --config your model's config.json (or "
                            "example:NAME)") from err
    return _MEMO[key], said


def result(recipe: str, ctx: RecipeContext, facts: EngineFacts, said: list[str],
           keys: Iterable[str]) -> RecipeResult:
    """A recipe result holding ``keys`` of the release's answer, with its assumptions."""
    data = facts.as_json()
    values = {k: data[k] for k in keys if data.get(k) is not None}
    res = RecipeResult(recipe, ctx.snapshot.name, ctx.release, values=values)
    res.inputs = {"command": ctx.command, "config": ctx.config_path or ("given" if ctx.config
                                                                        else "assumed"),
                  "gpu": facts.gpu.key, "usage": facts.usage}
    for line in [*facts.assumptions, *said]:
        res.findings.append(Finding("info", "assumed " + line))
    for warn in facts.warnings:
        # a step whose failure the answer leaves out ("not counted") is said, not warned about
        level = "info" if "not counted" in str(warn.get("stage")) else "warn"
        res.findings.append(Finding(level, f"{warn.get('stage')}: {raised(warn)}"))
    for rec in facts.log:
        if rec.get("level") in ("INFO", "WARNING") and _worth_quoting(rec.get("message", "")):
            res.findings.append(Finding("info", "the release logged: " + rec["message"]))
    res.provenance = _provenance(facts.ran)
    res.ran = facts.ran
    res.notes.append(f"engine mode: {len(facts.ran)} functions of the snapshot ran "
                     f"(--json lists them); replaced: {replaced_note(facts)}")
    return res


#: the release's own start-up lines worth quoting beside a recipe's numbers
_QUOTE = ("Setting attention block size", "Padding mamba page size", "GPU KV cache size",
          "Maximum concurrency", "Add ", "Setting kv cache block size", "cudagraph",
          "CUDA graph", "max_num_batched_tokens", "Mamba cache mode", "Chunked prefill")


def raised(warn: dict[str, Any]) -> str:
    """What a step of the release raised, readable when the exception has no message
    (``AssertionError: `` becomes ``AssertionError with no message, at vllm/x.py:12 in f``)."""
    error = str(warn.get("error") or "an error")
    kind, sep, message = error.partition(":")
    if sep and message.strip() or " " in kind.strip():
        return error
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', str(warn.get("traceback") or ""))
    where = ""
    if frames:
        path, line, func = frames[-1]
        where = f", at {re.sub(r'^.*?/(?=vllm/|sglang/)', '', path)}:{line} in {func}"
    return f"{kind.strip()} with no message{where}"


def replaced_note(facts: EngineFacts) -> str:
    """What engine mode replaced for this answer, in one line (the full lists are in --json)."""
    rep = facts.replaced
    parts = [", ".join(rep.get("compiled_modules", [])) + " (empty modules)"]
    if rep.get("gpu_packages"):
        parts.append(" ".join(rep["gpu_packages"]) + " (GPU-only packages the release "
                     "requires: stand-ins)")
    parts.append(f"device queries ({facts.gpu.name})")
    on_meta = [str(x).split(" ")[0] for x in rep.get("cuda_objects", []) if "-> meta" in str(x)]
    if on_meta:
        parts.append(", ".join(on_meta) + " (GPU tensors made on the meta device)")
    parts += [str(x) for x in rep.get("model_runner_init", [])]
    return "; ".join(parts)


def _worth_quoting(message: str) -> bool:
    return any(q in message for q in _QUOTE) and len(message) < 600


def _provenance(ran: list[dict[str, Any]]) -> list[Provenance]:
    out = []
    for fn in ran:
        name = str(fn.get("qualname", "")).rsplit(".", 1)[-1]
        if name in DECIDERS:
            out.append(Provenance(fn["qualname"], fn["file"], int(fn["first_line"]),
                                  str(fn.get("sha256") or "")))
    return out
