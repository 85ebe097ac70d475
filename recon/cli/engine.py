"""``recon engine-config SNAPSHOT --flags "vllm serve ..." --config c.json --gpu h100``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from ..errors import ReconError
from .output import console, emit_json, err_console

#: labels for the terminal; ``--json`` keys are the identifiers themselves
LABELS = (
    ("attention_block_size", "attention block size (tokens)"),
    ("attention_block_size_logged", "logged: Setting attention block size to"),
    ("mamba_padding_pct", "logged: Padding mamba page size by (%)"),
    ("mamba_cache_mode", "mamba cache mode"),
    ("mamba_block_size", "mamba block size"),
    ("enable_prefix_caching", "prefix caching"),
    ("kv_cache_dtype", "KV cache dtype"),
    ("max_num_seqs", "max_num_seqs"),
    ("max_num_batched_tokens", "max_num_batched_tokens"),
    ("max_model_len", "max_model_len"),
    ("cudagraph_mode", "cudagraph mode"),
    ("max_cudagraph_capture_size", "max cudagraph capture size"),
    ("cudagraph_capture_sizes", "cudagraph capture sizes"),
    ("block_size_stage", "block size decided in"),
    ("kv_cache_tokens", "KV cache tokens"),
    ("max_concurrency", "max concurrency"),
    ("kv_spec_kinds", "KV cache specs"),
)

HELP = """Let the release build its own VllmConfig for your command line, on a declared GPU.

The snapshot's vLLM is imported for real (its own environment, built once),
inside the OS sandbox; the command goes through the release's own `vllm serve`
parser and create_engine_config(). Prints what the release decided, the
assumptions recon made (GPU, usage context) and what it replaced.

An SGLang snapshot takes the server's command line (`python -m
sglang.launch_server ...` or `sglang serve ...`): the release's own
prepare_server_args and start-up resolution decide, and each field that
differs from its default is printed with the flag or the function
of the release that changed it."""


def engine_config_cmd(
    snapshot: str = typer.Argument(..., help="Snapshot name or folder, or a SOURCE (pip:vllm==0.33.0)."),
    flags: str = typer.Option(..., "--flags", help="The command line as typed: 'vllm serve MODEL ...'."),
    config: Path = typer.Option(..., "--config", help="The model's config.json (or its folder; the processor files beside it are read too), or example:NAME for one shipped with recon."),
    gpu: str | None = typer.Option(None, "--gpu", help="Declared GPU (h100, h200, a100-80, l40s, ..., a device name, sm86, or one the table lacks: 'NAME,memory=16GiB[,sm=12.0][,sms=N]'); default h100."),
    llm: bool = typer.Option(False, "--llm", help="Usage context LLM(...) instead of vllm serve."),
    engine_context: bool = typer.Option(False, "--engine-context", help="Usage context of an engine built from (Async)EngineArgs in your code ((Async)LLMEngine.from_engine_args)."),
    env: list[str] = typer.Option([], "--env", help="NAME=VALUE in the engine's environment."),
    kv_memory_gib: float | None = typer.Option(None, "--kv-memory-gib", help="Available KV cache memory (the engine's 'Available KV cache memory' line): KV tokens and concurrency."),
    memory_plan: bool | None = typer.Option(None, "--memory-plan/--no-memory-plan", help="vLLM: the worker's memory plan before it starts (weights, activation peak, CUDA graphs, available KV memory, KV tokens), or the release's refusal to start. On by default without --kv-memory-gib; given, a plan that cannot be made exits 6."),
    prompt_tokens: int | None = typer.Option(None, "--prompt-tokens", min=1, help="With the memory plan: one prompt of N tokens, in the chunks the release's scheduler cuts, each chunk's activation peak against what is free while serving: fits, or by how much not (exit 1)."),
    draft_config: Path | None = typer.Option(None, "--draft-config", help="The draft model's config.json, where the command names the draft by a hub id (vLLM: --speculative-config's model; SGLang: --speculative-draft-model-path)."),
    engine_transformers: str | None = typer.Option(None, "--engine-transformers", help="The transformers version installed where the engine runs (the compile cache's config hash holds it); default: the release environment's, said as an assumption."),
    no_sandbox: bool = typer.Option(False, "--no-sandbox", help="Run without the OS sandbox."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """``recon engine-config``."""
    from ..engine.config import engine_config, model_files
    from ..engine.gpus import board_for
    from ..recipes.flags import flag_hints
    from ..slicing.runner import load_config
    from ..snapshots.cache import ensure_snapshot

    extra = _env_pairs(env)
    cfg = load_config(config) or {}  # a path always gives a dict; None only for no config
    gpu, read_as = board_for(gpu)  # a board, an alias, a device name or a compute capability
    if read_as:
        err_console.print(f"recon: assumed {read_as}", markup=False)
    snap = ensure_snapshot(snapshot)
    if snap.package == "sglang":
        if llm or engine_context or kv_memory_gib is not None:
            raise ReconError("--llm, --engine-context and --kv-memory-gib are vLLM options; SGLang engine mode "
                             "resolves the server's ServerArgs")
        if memory_plan or prompt_tokens is not None:
            err_console.print("recon: no memory plan for SGLang yet: --memory-plan and "
                              "--prompt-tokens were not used", markup=False)
        _sglang(snap, flags, cfg, gpu, extra, draft=load_config(draft_config) if draft_config
                else None, sandbox=not no_sandbox, as_json=as_json)
        if memory_plan or prompt_tokens is not None:
            raise typer.Exit(6)
        return
    if llm and engine_context:
        raise ReconError("--llm and --engine-context are two usage contexts: give one")
    usage = "llm" if llm else "engine" if engine_context else "serve"
    memory_plan, asked = _memory_plan_on(memory_plan, prompt_tokens, kv_memory_gib)
    with flag_hints(snap):
        facts = engine_config(snap, flags, cfg, gpu=gpu, usage=usage, files=model_files(config),
                              env=extra, kv_memory_gib=kv_memory_gib, sandbox=not no_sandbox,
                              memory_plan=memory_plan, prompt_tokens=prompt_tokens,
                              draft_config=load_config(draft_config) if draft_config else None,
                              transformers_version=engine_transformers)
    data = facts.as_json()
    if memory_plan and not asked and data.get("memory_not_predicted"):
        # the plan was on by default: say it could not be made, without failing the answer
        err_console.print(f"recon: no memory plan: {data['memory_not_predicted']}", markup=False)
        data["memory_plan_default"] = True
    if as_json:
        emit_json(data)
    else:
        _print_answer(facts, data)
    _memory_exit(data)


def _env_pairs(env: list[str]) -> dict[str, str]:
    """``--env NAME=VALUE`` words as a mapping (a word without ``=`` is refused)."""
    extra = {}
    for item in env:
        name, eq, value = item.partition("=")
        if not eq:
            raise ReconError(f"--env wants NAME=VALUE, got {item!r}")
        extra[name] = value
    return extra


def _memory_plan_on(memory_plan: bool | None, prompt_tokens: int | None,
                    kv_memory_gib: float | None) -> tuple[bool, bool]:
    """Whether the memory plan runs, and whether the user asked for it (then a plan that
    cannot be made exits 6): on by default, off where ``--kv-memory-gib`` gives the figure."""
    asked = memory_plan is True or prompt_tokens is not None
    if prompt_tokens is not None and memory_plan is False:
        raise ReconError("--prompt-tokens runs on the memory plan: leave out --no-memory-plan")
    if kv_memory_gib is not None and asked:
        raise ReconError("--memory-plan makes the available KV memory that --kv-memory-gib "
                         "gives: give one of them")
    return memory_plan is not False and kv_memory_gib is None, asked


def _print_answer(facts: Any, data: dict[str, Any]) -> None:
    """The answer on a terminal: the sentence, the release's decisions, then the plan."""
    for line in facts.assumptions:
        err_console.print(f"recon: assumed {line}", markup=False)
    if "starts" in data and not data.get("memory_plan_default"):
        # the answer people asked for first: will it start, with what KV
        from .memory import memory_sentence

        console.print(memory_sentence(data), markup=False)
    for key, label in LABELS:
        if data.get(key) is not None:
            console.print(f"{label:45} {data[key]}", markup=False)
    for name, backend in facts.attention_backends.items():
        console.print(f"{'attention backend ' + name.split(':')[0]:45} {backend}", markup=False)
    _compile_cache_lines(facts)
    console.print(f"replaced: {', '.join(facts.replaced.get('compiled_modules', []))} "
                  f"(empty modules); device queries ({facts.gpu.key}); "
                  f"{', '.join(facts.replaced.get('in_process', []))} (in process)", markup=False)
    console.print(f"ran {len(facts.ran)} functions of the snapshot; seconds {facts.seconds}")
    if "starts" in data and not data.get("memory_plan_default"):
        from .memory import print_memory_plan

        print_memory_plan(data, sentence=False)


def _compile_cache_lines(facts: Any) -> None:
    """Where the engine will keep its compiled model (the release's own key), in a few lines."""
    cache = facts.compile_cache
    if cache is None or cache.unavailable:
        return
    if cache.disabled:
        console.print(f"{'torch.compile cache':45} off: {cache.disabled}", markup=False)
        return
    for key in cache.aot:  # $VLLM_CACHE_ROOT/torch_compile_cache/torch_aot_compile/<hash>
        console.print(f"{'torch_aot_compile/ folder (' + key.tag + ')':45} {key.hash}", markup=False)
    console.print(f"{'torch.compile key: environment, config':45} {(cache.env_hash or '-')[:16]}, "
                  f"{cache.config_hash} (recipe vllm-compile-cache)", markup=False)


def _memory_exit(data: dict[str, Any]) -> None:
    """Exit 1 when the release will not start or the prompt asked about will not fit, 6 when
    no memory plan could be made."""
    if data.get("starts") is False or data.get("prompt_fits") is False:
        raise typer.Exit(1)
    if (data.get("memory_not_predicted") and not data.get("memory_plan_default")) \
            or data.get("prefill_not_predicted"):
        raise typer.Exit(6)


def _short(value: object, width: int = 100) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _sglang(snap: object, flags: str, cfg: dict[str, Any] | None, gpu: str | None,
            env: dict[str, str], *, draft: dict[str, Any] | None, sandbox: bool,
            as_json: bool) -> None:
    """SGLang: the release's resolved ServerArgs, each changed field with what changed it."""
    from ..engine.sglang import server_args
    from ..recipes.flags import flag_hints

    with flag_hints(snap):
        facts = server_args(snap, flags, cfg or {}, gpu=gpu, env=env,  # type: ignore[arg-type]
                            draft_config=draft, sandbox=sandbox)
    if as_json:
        emit_json(facts.as_json())
        return
    for line in facts.assumptions:
        err_console.print(f"recon: assumed {line}", markup=False)
    console.print(f"{facts.release}: {len(facts.changed)} fields differ from their "
                  f"defaults (resolved by {facts.resolution})", markup=False)
    for name, change in facts.changed.items():
        by = change.get("decided_by") or {}
        how = " + ".join(change.get("changed_by", []))
        who = f"{by['by']} ({by['file']}:{by['line']})" if by.get("file") else by.get("by", "")
        console.print(f"{name:45} {_short(change.get('value'))}", markup=False)
        console.print(f"{'':45} {how}{': ' + who if who else ''}", markup=False, style="dim")
    check = facts.launch_check
    if check.get("ok") is False:
        err_console.print(f"recon: the release refuses to launch: {check.get('error')}", markup=False)
    rep = facts.replaced
    console.print(f"replaced: device queries ({facts.gpu.key}); GPU-only packages "
                  f"{', '.join(rep.get('gpu_packages', [])) or 'none'} (recording stand-ins); "
                  f"refused: {', '.join(rep.get('refused', [])) or 'nothing'}", markup=False)
    console.print(f"ran {len(facts.ran)} functions of the snapshot; seconds {facts.seconds}")


def register(app: typer.Typer) -> None:
    app.command("engine-config", help=HELP)(engine_config_cmd)
