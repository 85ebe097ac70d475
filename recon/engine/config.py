"""Parent side of engine mode: ``engine_config(snapshot, flags, config_json, gpu=...)``.

The release decides: the user's command line goes, as typed, through the
release's own ``vllm serve`` parser, ``from_cli_args`` and
``create_engine_config`` (and, where the release has it, the worker's
``update_block_size_for_backend`` over the model's layers built on the meta
device), in a child started through the same OS sandbox as ``recon run``
(:mod:`recon.slicing.sandbox`), under the release's own environment
(:mod:`recon.engine.env`). recon states only what it must assume (the GPU, the
usage context) and prints it; what the release could not decide is an error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from .. import progress
from ..acquire.writer import write_json
from ..errors import ReconError
from ..paths import cache_dir
from ..slicing.sandbox import Limits, Outcome, interpreter_dirs, launch
from ..snapshots.model import Snapshot
from . import compile_cache, server
from .command import container_run, python_module, typed_environment, words
from .compile_cache import CompileCache
from .env import ReleaseEnv, gpu_only_modules, release_env, said_of, wheel_metadata
from .gpus import DEFAULT_GPU, GPU, HOST_MEMORY_GIB
from .gpus import gpu as lookup_gpu

CHILD = Path(__file__).with_name("child.py")
#: the standard-library-only file the child loads by path (its bytes are part of the cache key)
STUBS = Path(__file__).parent.parent / "slicing" / "stubs.py"
#: the memory phase the child loads by path (beside it, so the sandbox already shows it)
MEMORY_CHILD = Path(__file__).parent / "memory_child.py"
#: the compile-cache phase the child loads by path (beside it too)
COMPILE_CHILD = Path(__file__).parent / "compile_child.py"
#: the virtual machine's GPU count (the release checks world size against it)
DEFAULT_GPU_COUNT = 8


class EngineUsageError(ReconError):
    """The release's own parser refused the command line (its message, argparse's exit 2)."""

    exit_code = 2


class EngineFailed(ReconError):
    """The release raised while deciding, or the child did not answer: no numbers."""

    exit_code = 7


@dataclass
class EngineFacts:
    """What the release decided for one command line on one declared GPU."""

    release: str
    gpu: GPU
    usage: str
    facts: dict[str, Any]
    logged: dict[str, Any]
    assumptions: list[str]
    replaced: dict[str, Any]
    ran: list[dict[str, Any]]
    attention_backends: dict[str, str]
    block_size_stage: str
    warnings: list[dict[str, Any]]
    seconds: dict[str, float]
    env: dict[str, Any]
    peak_rss_mb: float = 0.0
    log: list[dict[str, Any]] = field(repr=False, default_factory=list)
    #: the compile cache the engine will use (None: the release or the run gave none)
    compile_cache: CompileCache | None = None

    def as_json(self) -> dict[str, Any]:
        """Identifier keys, numbers as numbers (``--json``)."""
        return {"release": self.release, "gpu": self.gpu.as_json(), "usage": self.usage,
                **self.facts, **self.logged,
                "attention_backends": self.attention_backends,
                "block_size_stage": self.block_size_stage,
                "assumptions": self.assumptions, "replaced": self.replaced,
                "warnings": self.warnings, "seconds": self.seconds, "peak_rss_mb": self.peak_rss_mb,
                "env": self.env,
                "compile_cache": self.compile_cache.as_json() if self.compile_cache else None,
                "ran": self.ran}


#: the usage contexts a command can be run in, as recon says them
USAGES = {"serve": "vllm serve", "llm": "LLM(...) (offline)",
          "engine": "an engine from (Async)EngineArgs in your code "
                    "((Async)LLMEngine.from_engine_args)"}

#: ``python -m`` modules that start vLLM's OpenAI server with their own parser
#: (the vllm-openai images before ``vllm serve`` became their entry point)
SERVER_MODULES = ("vllm.entrypoints.openai.api_server",)


@dataclass(frozen=True)
class VllmCommand:
    """A vLLM command line as typed: which entry point parses it, its arguments, its environment.

    ``entry`` is ``serve`` (``vllm serve ARGS`` or bare ``ARGS``) or the module a
    ``python -m MODULE ARGS`` runs; the release's own parser of that entry reads
    ``argv`` (``vllm serve`` refuses ``--model`` in some releases, the API server
    module takes it). ``env``: the ``NAME=VALUE`` words typed before the program.
    """

    entry: str
    argv: list[str]
    env: dict[str, str]
    assumed: str = ""
    #: the container image a ``docker run`` command ran ("" for none)
    image: str = ""


def vllm_command(flags: str | list[str]) -> VllmCommand:
    """How the user's command line starts vLLM (see :class:`VllmCommand`)."""
    env, tokens = typed_environment(words(flags))
    run = container_run(tokens)
    if run is not None:
        env, tokens = {**env, **run.env}, run.args
    command = _vllm_entry(tokens, env)
    if run is None:
        return command
    return dataclasses.replace(command, assumed="; ".join(
        filter(None, [run.said(), command.assumed])), image=run.image)


def _vllm_entry(tokens: list[str], env: dict[str, str]) -> VllmCommand:
    module, rest = python_module(tokens)
    if module == "vllm.entrypoints.cli.main":
        module, tokens = None, ["vllm", *rest]
    if module is not None:
        if module not in SERVER_MODULES:
            raise EngineUsageError(f"python -m {module}: engine mode reads a vLLM server's "
                                   f"command line (vllm serve ..., python -m "
                                   f"{' or '.join(SERVER_MODULES)} ..., or flags)")
        return VllmCommand(module, rest, env)
    if tokens[:1] == ["vllm"]:
        tokens = tokens[1:]
        if tokens[:1] != ["serve"]:
            raise EngineUsageError(f"vllm {' '.join(tokens[:1])}: engine mode reads the "
                                   "server's command line (vllm serve ...)")
    if tokens[:1] == ["serve"]:
        tokens = tokens[1:]
    elif any(t == "--model" or t.startswith("--model=") for t in tokens):
        # arguments alone, as given to a vllm-openai image: the images whose entry point is
        # the API server module take --model, which `vllm serve` refuses in some releases
        return VllmCommand(SERVER_MODULES[0], tokens, env,
                           f"arguments without a program, with --model: read by python -m "
                           f"{SERVER_MODULES[0]} (the vllm-openai image's entry point before "
                           "vllm serve); type `vllm serve ...` if that is what ran")
    return VllmCommand("serve", tokens, env)


def image_release(image: str, snapshot: Snapshot) -> str:
    """What to say when a ``docker run`` image's tag names another release than the snapshot's."""
    tag = image.rpartition(":")[2] if ":" in image.rpartition("/")[2] else ""
    found = re.match(r"v?(\d+\.\d+\.\d+(?:\.post\d+)?)", tag)
    if not found or found.group(1) == snapshot.version:
        return ""
    return (f"the command runs {image} (vLLM {found.group(1)}); these are "
            f"{snapshot.package} {snapshot.version}'s numbers: give --snapshot "
            f"pip:vllm=={found.group(1)} (or the image) for that release's own")


def compiled_modules(snapshot: Snapshot) -> list[str]:
    """Dotted names of the compiled modules the snapshot lists but does not hold."""
    names = set()
    listed = list(snapshot.manifest.skipped)
    listed += [p for p in snapshot.manifest.files if p.endswith(".so")]
    for path in listed:
        if not path.endswith(".so"):
            continue
        folder, _, base = path.rpartition("/")
        mod = base.split(".", 1)[0]
        names.add(".".join([*folder.split("/"), mod]) if folder else mod)
    return sorted(names)


def snapshot_wheel(snapshot: Snapshot) -> Path:
    """The wheel the snapshot's release came from (downloaded once when not cached)."""
    from ..acquire.sources.pip import fetch_wheel, wheels_dir

    src = snapshot.manifest.source
    candidates = [Path(src["wheel_path"])] if src.get("wheel_path") else []
    candidates += sorted(wheels_dir().glob(f"{snapshot.package}-{snapshot.version}-*.whl"))
    for wheel in candidates:
        if wheel.is_file():
            return wheel
    return fetch_wheel(f"{snapshot.package}=={snapshot.version}")


def snapshot_metadata(snapshot: Snapshot) -> str:
    """The release's ``METADATA`` (its ``Requires-Dist``): from the wheel it came from."""
    return wheel_metadata(snapshot_wheel(snapshot))


def environment(snapshot: Snapshot, own_day: bool = False) -> ReleaseEnv:
    """The release's environment (built once, cached): its libraries as of the days it was
    the newest release, or (``own_day``) as of its own release day."""
    if snapshot.package != "vllm" or not snapshot.version:
        raise ReconError(f"engine mode reads vLLM releases; {snapshot.label} is "
                         f"{snapshot.package} {snapshot.version}")
    wheel = snapshot_wheel(snapshot)
    return release_env(snapshot.package, snapshot.version, wheel_metadata(wheel), wheel,
                       own_day)


def _request(snapshot: Snapshot, renv: ReleaseEnv, argv: list[str], config_json: dict[str, Any],
             gpu: GPU, gpu_count: int, usage: str, work: Path) -> dict[str, Any]:
    not_installed = cast(dict[str, str], renv.record.get("not_installed", {}))
    return {"src": str(snapshot.src), "compiled": compiled_modules(snapshot), "argv": argv,
            "gpu_modules": gpu_only_modules(not_installed),
            "config": config_json, "model_dir": str(work / "model"), "usage": usage,
            "gpu": {**gpu.as_json(), "count": gpu_count,
                    "host_memory_bytes": HOST_MEMORY_GIB << 30}, "package": snapshot.package,
            "version": snapshot.version, "metadata": snapshot_metadata(snapshot),
            "kv_memory_bytes": None}


def run_child(env: ReleaseEnv, snapshot: Snapshot, request: dict[str, Any], *, root: Path,
              work: Path, timeout: float, sandbox: bool, warm: bool = True) -> dict[str, Any]:
    """The release's answer to ``request`` as a JSON object (the bytes are untrusted).

    From a warm server (:mod:`recon.engine.server`) when one can give it (and ``warm``),
    else from a cold child; ``seconds.server`` says which: ``warm``, ``started``
    (this request started the server), ``cold`` or ``off``.
    """
    extra = request.pop("env", None)
    limits = Limits(timeout=timeout, memory_mb=16384, file_mb=64, sandbox=sandbox,
                    scratch_mb=512, processes=512)
    read_only = [str(snapshot.src), str(env.root), str(CHILD.parent), str(STUBS.parent),
                 *interpreter_dirs()]
    argv = [str(env.python), "-I", "-B", str(CHILD)]
    served = _ask_server(snapshot, env, request, extra, argv, read_only, limits) \
        if warm and server.enabled() else None
    return served_or_cold(served, lambda: launch(
        argv, request, root=root, work=work, limits=limits, env=server.child_env(work, extra),
        slice_files=set(), read_only=read_only), "engine mode", timeout)


def served_or_cold(served: server.Served | None, cold: Callable[[], Outcome], what: str,
                   timeout: float) -> dict[str, Any]:
    """The child's answer as a JSON object: the server's bytes, else those of ``cold()``.

    Either way the bytes are untrusted: anything but a JSON object is :class:`EngineFailed`.
    ``seconds.server`` records the way it came (``warm``, ``started``, ``cold``, ``off``).
    """
    stderr = ""
    if served is not None:
        data, how, confinement = served.data, served.how, served.confinement
    else:
        outcome = cold()
        if outcome.timed_out:
            raise EngineFailed(f"{what} ran past {timeout:.0f} s; stderr tail: "
                               f"{outcome.stderr[-400:]}")
        data, confinement, stderr = outcome.result, outcome.confinement, outcome.stderr
        how = "cold" if server.enabled() else "off"
    try:
        result = json.loads(data.decode("utf-8"))
    except ValueError:
        result = None
    if not isinstance(result, dict):
        raise EngineFailed(f"{what}: the child gave no answer ({how}); "
                           f"stderr tail: {stderr[-600:].strip()}")
    problem = answer_problem(result)
    if problem is not None:
        raise EngineFailed(f"{what}: what the child gave ({how}) is not an answer: {problem}")
    result["confinement"] = confinement
    if isinstance(result.get("seconds"), dict):
        result["seconds"]["server"] = how
    return result


#: fields of a child's answer and the JSON type each has where present (see :func:`answer_problem`)
_ANSWER_FIELDS: dict[str, type] = {
    "facts": dict, "logged": dict, "replaced": dict, "seconds": dict, "kv": dict,
    "layers": dict, "pools": dict, "server_args": dict, "usage_error": dict,
    "log": list, "ran": list, "not_applicable": str}


def answer_problem(result: Any) -> str | None:
    """Why ``result`` is not an engine-mode child's answer (None when it is one).

    Every answer is a JSON object with ``ok`` (true or false) and ``errors`` (a list of
    objects); the fields an answer may have are of their types (or null); a decided answer
    (``ok``) carries its timings, log and what was replaced; a refusal (``usage_error``) its
    exit code and message. The check is of shape only: the numbers are the child's.
    """
    if not isinstance(result, dict):
        return "not a JSON object"
    if not isinstance(result.get("ok"), bool):
        return "no ok (true or false)"
    errors = result.get("errors")
    if not isinstance(errors, list) or not all(isinstance(e, dict) for e in errors):
        return "no errors (a list of objects)"
    for name, kind in _ANSWER_FIELDS.items():
        if result.get(name) is not None and not isinstance(result[name], kind):
            return f"{name} is not a JSON {'object' if kind is dict else kind.__name__}"
    if result["ok"] and not all(name in result for name in ("seconds", "log", "replaced")):
        return "a decided answer without its timings, log or replacements"
    usage = result.get("usage_error")
    if usage is not None and not (isinstance(usage.get("exit_code"), int) and
                                  isinstance(usage.get("message"), str)):
        return "a refusal without its exit code and message"
    return None


def _ask_server(snapshot: Snapshot, renv: ReleaseEnv, request: dict[str, Any],
                extra: dict[str, str] | None, argv: list[str], read_only: list[str],
                limits: Limits) -> server.Served | None:
    """A warm server's answer (see :mod:`recon.engine.server`), or None: run a cold child."""
    from ..snapshots.cache import tree_key

    tree = tree_key(snapshot.src)
    if tree is None or "unsettled" in tree:
        return None
    gpu = dict(request["gpu"])
    architectures = request["config"].get("architectures") \
        if isinstance(request.get("config"), dict) else None
    key = server.server_key({"tree": tree, "env": renv.root.name, "child": _child_digest(),
                             "environ": extra or {}, "gpu": gpu,
                             "sandbox": limits.sandbox, "python": str(renv.python),
                             "programs": server.VIRTUAL_PROGRAMS,
                             "architectures": architectures})
    setup = {k: request[k] for k in ("src", "compiled", "gpu_modules", "gpu", "package",
                                     "version", "metadata")}
    setup["architectures"] = architectures if isinstance(architectures, list) else []
    spec = server.ServerSpec(key=key, argv=[*argv, "--serve"], env_extra=dict(extra or {}),
                             read_only=read_only, setup=setup, memory_mb=limits.memory_mb,
                             scratch_mb=2048, processes=limits.processes,
                             sandbox=limits.sandbox)
    try:
        return server.ask(spec, request, limits.timeout)
    except server.ServerTimedOut as err:
        raise EngineFailed(f"engine mode ran past {limits.timeout:.0f} s (warm server); "
                           f"stderr tail: {err}") from None


def _with_digests(snapshot: Snapshot, ran: list[dict[str, Any]]) -> list[dict[str, Any]]:
    files = snapshot.files
    for fn in ran:
        rec = files.get(fn["file"])
        fn["sha256"] = rec.sha256 if rec is not None else None
    return ran


def _assumptions(gpu: GPU, explicit_gpu: bool, count: int, usage: str) -> list[str]:
    memory = (f"{gpu.memory_bytes / 2**30:.1f} GiB" if gpu.memory_query else
              f"{gpu.memory_bytes / 2**30:.1f} GiB unified; its memory query fails as NVML's does")
    said = [f"GPU: {gpu.name} (sm{gpu.major}{gpu.minor}, {memory})"
            + ("" if explicit_gpu else f" -- not given, {DEFAULT_GPU} assumed"),
            f"{count} such GPUs visible",
            f"host memory: {HOST_MEMORY_GIB} GiB (a GPU server's, not this machine's; releases "
            "up to 0.16 check --swap-space against it)",
            "usage context: " + USAGES[usage]]
    if gpu.platform == "rocm":
        said.append(f"a ROCm build of the release: its Python code is this snapshot's, on the "
                    f"release's own ROCm platform class ({gpu.arch or 'no architecture stated'}); "
                    "a ROCm image's own vLLM may carry patches of its own (snapshot that image "
                    "to use its code)")
    return said


def _planned(result: dict[str, Any]) -> list[str]:
    planned = result.get("kv_planned_for_cudagraphs_bytes")
    if not planned:
        return []
    capacity = "the KV capacity is the memory plan's" if result.get("memory") else \
        "no KV capacity without --kv-memory-gib or the memory plan"
    return [f"KV cache of {planned / 2**30:.1f} GiB (the GPU's memory share) when resolving "
            f"CUDA graphs; {capacity}"]


def _trimmed(result: dict[str, Any]) -> list[str]:
    return [f"{name}: the log printed the whole object; the fields that differ from the "
            f"release's defaults were given: {', '.join(kept) or 'none'}"
            for name, kept in (result.get("trimmed_configs") or {}).items()]


#: files of a model's folder a release reads while it builds the model, beside config.json
#: (0.28's Qwen2.5-VL builds its input normalisation from the processor's configuration)
MODEL_FILES = ("preprocessor_config.json", "processor_config.json",
               "video_preprocessor_config.json")
_MODEL_FILE_CAP = 1 << 20
_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def remote_code_modules(config_json: dict[str, Any]) -> list[str]:
    """The ``.py`` files of the model's folder its ``auto_map`` names (remote code).

    A model whose configuration class ships with it (``"AutoConfig":
    "configuration_nemotron_h.NemotronHConfig"``) is read, with
    ``--trust-remote-code``, through that file; a class of another repository
    (``repo--module.Class``) is not in the folder and is not named.
    """
    names: list[str] = []
    auto_map = config_json.get("auto_map")
    for value in (auto_map.values() if isinstance(auto_map, dict) else ()):
        for ref in (value if isinstance(value, list) else [value]):
            if not isinstance(ref, str) or "--" in ref or "." not in ref:
                continue
            module = ref.rsplit(".", 1)[0]
            if _MODULE_NAME.fullmatch(module) and f"{module}.py" not in names:
                names.append(f"{module}.py")
    return names


def is_model_file(name: str) -> bool:
    """Whether ``name`` is a file of a model folder a request may carry (a plain name)."""
    return name in MODEL_FILES or (name.endswith(".py") and
                                   _MODULE_NAME.fullmatch(name[:-3]) is not None)


def model_files(config: str | Path | None) -> dict[str, str]:
    """The model folder's files beside ``config`` (a config.json or its folder), by name.

    The :data:`MODEL_FILES` and the configuration modules of its ``auto_map``
    (:func:`remote_code_modules`). The user's model folder holds them next to
    config.json; engine mode writes them into the model folder the release reads.
    ``example:NAME`` configs have none.
    """
    if config is None or str(config).startswith("example:"):
        return {}
    path = Path(config)
    folder = path if path.is_dir() else path.parent
    config_file = path / "config.json" if path.is_dir() else path
    try:
        config_json = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config_json = {}  # the config's own reader says what is wrong with it
    found = {}
    for name in (*MODEL_FILES, *remote_code_modules(config_json
                                                    if isinstance(config_json, dict) else {})):
        candidate = folder / name
        try:
            if candidate.is_file() and candidate.stat().st_size <= _MODEL_FILE_CAP:
                found[name] = candidate.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise ReconError(f"cannot read {candidate}: {err}") from err
    return found


def engine_config(snapshot: Snapshot, flags: str | list[str], config_json: dict[str, Any], *,
                  gpu: str | None = None, usage: str = "serve",
                  gpu_count: int = DEFAULT_GPU_COUNT, env: dict[str, str] | None = None,
                  kv_memory_gib: float | None = None, kv_memory_precision_gib: float = 0.005,
                  attention_backend: str | None = None, logged_args: bool = False,
                  files: dict[str, str] | None = None, memory_plan: bool = False,
                  prompt_tokens: int | None = None, timeout: float = 600.0,
                  sandbox: bool = True, draft_config: dict[str, Any] | None = None,
                  transformers_version: str | None = None) -> EngineFacts:
    """What ``snapshot``'s release decides for ``flags`` and ``config_json`` on ``gpu``.

    ``kv_memory_precision_gib``: how far the true memory may be from ``kv_memory_gib``
    (vLLM prints it to 0.01 GiB): KV tokens and concurrency are also given at both ends
    (``kv_cache_tokens_range``), since one block more or less is within the log's rounding.
    ``attention_backend`` is a backend the user forced outside the command line
    (the child gives it as the release's own ``--attention-backend`` where its
    parser has that flag, else as ``VLLM_ATTENTION_BACKEND``). ``logged_args``: ``flags``
    was rebuilt from a log's argument line, whose config objects are printed whole; the
    child keeps only the fields that differ from the release's defaults (and says so).
    ``files``: the model folder's other files the release reads (:func:`model_files`); its
    own modules (remote code) are run by a cold child, never by a warm server.
    ``memory_plan`` (without ``kv_memory_gib``): the worker's memory plan before it starts
    (weights, activation peak, CUDA graphs, memory outside torch, available KV memory and
    the KV cache that leaves), or the release's refusal to start (:func:`memory_facts`).
    ``prompt_tokens`` (with the plan): one prompt of that many tokens, cut into chunks by
    the release's scheduler, each chunk's activation peak through the release's forward on
    the planned KV cache, against what is free then (:func:`prefill_facts`).
    ``draft_config``: the draft model's config.json, for a ``--speculative-config`` whose
    ``model`` is a hub id or a folder this machine lacks (the release reads it from a
    scratch folder of its own; ``replaced['arguments']`` names what was typed).
    ``transformers_version``: the transformers installed where the engine runs, which the
    compile cache's config hash holds (default: the release environment's, said so).
    Answers are kept
    under :func:`result_key` (``RECON_ENGINE_CACHE=0`` turns that off).

    Raises :class:`EngineUsageError` where the release's parser refuses the
    command line and :class:`EngineFailed` where it raises while deciding.
    """
    if usage not in USAGES:
        raise ReconError(f"usage context {usage!r}: one of {', '.join(USAGES)}")
    start = time.monotonic()
    board = lookup_gpu(gpu or DEFAULT_GPU)
    release_environment = environment(snapshot)
    env_seconds = time.monotonic() - start
    kv_bytes = None if kv_memory_gib is None else int(kv_memory_gib * (1 << 30))
    kv_range = None if kv_memory_gib is None or not kv_memory_precision_gib else \
        [int((kv_memory_gib + d) * (1 << 30)) for d in (-kv_memory_precision_gib,
                                                         kv_memory_precision_gib)]
    command = vllm_command(flags)
    ask = _Ask(snapshot, release_environment, command.argv, config_json, board, gpu_count,
               usage, {**command.env, **(env or {})}, [kv_bytes, kv_range], timeout, sandbox,
               {"attention_backend": attention_backend, "logged_args": logged_args,
                "model_files": {k: v for k, v in (files or {}).items() if is_model_file(k)},
                "entry": "" if command.entry == "serve" else command.entry,
                "memory_plan": memory_plan and kv_bytes is None,
                "prompt_tokens": prompt_tokens if memory_plan and kv_bytes is None else None,
                "draft_config": draft_config, "transformers_version": transformers_version})
    result, release_environment = _release_day_if_broken(_answered(ask, config_json), ask,
                                                         config_json)
    said = [command.assumed, image_release(command.image, snapshot)]
    if any(said):
        result = {**result, "assumed": [*filter(None, said), *(result.get("assumed") or [])]}
    if ask.options["model_files"]:
        result = {**result, "assumed": [*(result.get("assumed") or []), "the model folder's "
                                        + ", ".join(sorted(ask.options["model_files"]))
                                        + " beside config.json, as the release reads them"]}
    return _facts(snapshot, result, board, gpu is not None, gpu_count, usage, release_environment,
                  {"env": round(env_seconds, 2), "total": round(time.monotonic() - start, 2)},
                  config_json)


def _answered(ask: _Ask, config_json: dict[str, Any]) -> dict[str, Any]:
    """The release's answer to ``ask``; where it failed on what recon cannot give it (a
    quantization without the checkpoint's config, a tokenizer-built parser), asked again
    without that, each left-out said. A failed retry gives the first answer's error."""
    result = first = ask.answer()
    left_out: list[str] = []
    for option, reason in (("without_quantization", _unbacked_quantization),
                           ("without_reasoning_parser", _tokenizer_bound)):
        why = reason(result, config_json)
        if why:  # asked again without what recon cannot give the release (each said)
            ask = _Ask(**{**vars(ask), "options": {**ask.options, option: True}})
            left_out.append(why)
            result = ask.answer()
            if result.get("ok"):
                break
    if not result.get("ok"):  # the user's own command's error, and what the retry met after it
        later = _error_text((result.get("errors") or [{}])[-1])
        if left_out and later != _error_text((first.get("errors") or [{}])[-1]):
            where = _where(ask.snapshot, str((result.get("errors") or [{}])[-1]
                                             .get("traceback", "")))
            return {**first, "then": f"asked again without {left_out[-1].split(' was left out')[0]}"
                                     f", the release failed later: {later[:300]}{where}"}
        return first
    return {**result, "assumed": left_out} if left_out else result


def _release_day_if_broken(result: dict[str, Any], ask: _Ask, config_json: dict[str, Any],
                           ) -> tuple[dict[str, Any], ReleaseEnv]:
    """The answer, and the environment that gave it: where a library of the environment
    raised the release's error (a later library broke the release for this model), the
    answer of the release day's libraries instead, said; else ``result`` as it is."""
    failed_in = library_failure(result, ask.renv)
    if not failed_in:
        return result, ask.renv
    own = environment(ask.snapshot, own_day=True)
    if own.root == ask.renv.root:  # one date: nothing else to ask
        return result, ask.renv
    again = _answered(_Ask(**{**vars(ask), "renv": own}), config_json)
    if not again.get("ok"):  # the first error is the one reported
        return result, ask.renv
    said = _libraries_said(result, ask.renv, own, failed_in)
    return {**again, "assumed": [said, *(again.get("assumed") or [])]}, own


#: libraries that are the same in every environment (this machine's CPU torch)
_SAME_EVERYWHERE = ("torch", "torchvision", "torchaudio", "triton")


def library_failure(result: dict[str, Any], renv: ReleaseEnv) -> str | None:
    """The library of the environment whose code raised the release's error (None: the
    release's own code or torch did, or it did not fail)."""
    if result.get("ok") or "usage_error" in result:
        return None
    if unknown_model_type(str((result.get("errors") or [{}])[-1].get("error") or "")):
        return None  # an older transformers knows no newer model: no second environment to build
    trace = str((result.get("errors") or [{}])[-1].get("traceback") or "")
    frames = re.findall(r'File "([^"]+)", line \d+', trace)
    site = str(renv.site).rstrip("/") + "/"
    if not frames or not frames[-1].startswith(site):
        return None
    top = frames[-1][len(site):].split("/")[0]
    return None if top in _SAME_EVERYWHERE else top


def _libraries_said(failed: dict[str, Any], renv: ReleaseEnv, own: ReleaseEnv,
                    library: str) -> str:
    """The assumption line of an answer given with the release day's libraries."""
    def dated(record: dict[str, object]) -> str:
        when = str(record.get("resolved_as_of") or "")[:10]
        pins = [i for i in cast(list[str], record.get("installed") or [])
                if i.split("==")[0].lower().replace("_", "-") == library.replace("_", "-")]
        return f"as of {when}" + (f" ({pins[0]})" if pins else "")
    err = _error_text((failed.get("errors") or [{}])[-1])
    return (f"the libraries of the release's own day were used: with those {dated(renv.record)} "
            f"the release fails inside {library} ({err[:160]}), with those {dated(own.record)}, "
            "as its container image has them, it answers; a server that ran had libraries "
            "that worked")


def _unbacked_quantization(result: dict[str, Any], config_json: dict[str, Any]) -> str | None:
    """Why a failed answer is asked again without ``--quantization`` (None: it is not).

    A ``--quantization`` method is built from the checkpoint's ``quantization_config``;
    a config.json without one (a config written by hand, or the stand-in model) cannot
    give the release what it needs. The method the release parsed is in the answer.
    """
    method = result.get("quantization")
    if result.get("ok") or "usage_error" in result or not method:
        return None
    if "quantization_config" in config_json or "quantization_config" in (
            config_json.get("text_config") or {}):
        return None
    err = _error_text((result.get("errors") or [{}])[-1])
    return (f"--quantization {method} was left out: the config.json has no quantization_config, "
            f"and the release needs the checkpoint's to build it ({err[:200]}); the answer is "
            "the unquantized model's (a KV-cache scheme the checkpoint may set is not known)")


def _tokenizer_bound(result: dict[str, Any], config_json: dict[str, Any]) -> str | None:
    """Why a failed answer is asked again without ``--reasoning-parser`` (None: it is not).

    The release builds the reasoning parser from the model's tokenizer while it
    builds its config (0.20 and later); engine mode loads no tokenizer
    (``skip_tokenizer_init``), so the construction fails there, never on a server.
    The parser reads generated text: it sizes no cache and no graph.
    """
    parser = result.get("reasoning_parser")
    if result.get("ok") or "usage_error" in result or not parser:
        return None
    err = _error_text((result.get("errors") or [{}])[-1])
    return (f"--reasoning-parser {parser} was left out: the release builds it from the model's "
            f"tokenizer, which engine mode does not load ({err[:160]}); it reads generated "
            "text and sizes no cache or graph")


@dataclass
class _Ask:
    """One engine-mode request: its cache key, a stored answer or a child's."""

    snapshot: Snapshot
    renv: ReleaseEnv
    argv: list[str]
    config_json: dict[str, Any]
    board: GPU
    gpu_count: int
    usage: str
    env: dict[str, str]
    kv: list[Any]
    timeout: float
    sandbox: bool
    options: dict[str, Any]

    def answer(self) -> dict[str, Any]:
        extra = {**self.env, **{f"recon:{k}": str(v) for k, v in self.options.items() if v}}
        key = result_key(self.snapshot, self.renv, self.argv, self.config_json, self.board,
                         self.gpu_count, self.usage, extra, self.kv, self.sandbox)
        result = cached_result(key)
        if result is not None:
            result["seconds"] = {**result.get("seconds", {}), "cached": True}
            return result
        with progress.step(f"importing {self.snapshot.package} {self.snapshot.version} in the "
                           f"sandbox: its parser, config classes and {self.board.name}'s "
                           "backends decide"):
            result = self._run()
        if result.get("ok") or "usage_error" in result:  # the release's answer: the same next time
            store_result(key, result)
        return result

    def _run(self) -> dict[str, Any]:
        root = Path(tempfile.mkdtemp(prefix="recon-engine-"))
        os.chmod(root, 0o755)  # the sandbox may start as nobody (recon run's layout does the same)
        try:
            work = root / "work"
            work.mkdir(mode=0o700)
            request = _request(self.snapshot, self.renv, self.argv, self.config_json, self.board,
                               self.gpu_count, self.usage, work)
            request["env"] = self.env or None
            request["declared_env"] = dict(self.env)
            request["kv_memory_bytes"], request["kv_memory_range_bytes"] = self.kv
            request.update(self.options)
            # a model folder's own code runs in a cold child of its own, never in a warm
            # server that goes on to answer other requests
            remote_code = any(name.endswith(".py") for name in self.options["model_files"])
            return run_child(self.renv, self.snapshot, request, root=root, work=work,
                             timeout=self.timeout, sandbox=self.sandbox, warm=not remote_code)
        finally:
            shutil.rmtree(root, ignore_errors=True)


def results_dir() -> Path:
    """Where engine-mode answers are kept: one file per :func:`result_key`."""
    return cache_dir() / "engine-results"


def result_key(snapshot: Snapshot, renv: ReleaseEnv, argv: list[str], config_json: dict[str, Any],
               board: GPU, gpu_count: int, usage: str, env: dict[str, str] | None,
               kv_bytes: Any, sandbox: bool) -> str | None:
    """The one key of an engine-mode answer: everything the child's answer depends on.

    The snapshot's bytes on disk (its tree key), the release environment, the child's
    own code, and the request (command, config, GPU, usage, environment variables,
    KV memory). A tree that changed moments ago has no stable key: no caching.
    """
    from ..snapshots.cache import tree_key

    tree = tree_key(snapshot.src)
    if tree is None or "unsettled" in tree:
        return None
    parts = {"tree": tree, "env": renv.root.name, "child": _child_digest(), "argv": argv,
             "config": config_json, "gpu": board.as_json(), "count": gpu_count, "usage": usage,
             "environ": env or {}, "kv": kv_bytes, "sandbox": sandbox,
             "programs": server.VIRTUAL_PROGRAMS}
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def _child_digest() -> str:
    """The child's code and the files it loads: a change invalidates answers and servers."""
    return hashlib.sha256(b"".join(path.read_bytes() for path in
                                   (CHILD, STUBS, MEMORY_CHILD, COMPILE_CHILD))).hexdigest()


def cached_result(key: str | None) -> dict[str, Any] | None:
    """The answer stored for ``key``, or None: missing, unreadable, stored under another key
    (the file names the key it was stored for) or not an answer (:func:`answer_problem`)."""
    if key is None or os.environ.get("RECON_ENGINE_CACHE") == "0":
        return None
    try:
        data = json.loads((results_dir() / f"{key}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or set(data) != {"key", "answer"} or data["key"] != key:
        return None
    answer = data["answer"]
    return answer if answer_problem(answer) is None else None


def store_result(key: str | None, result: dict[str, Any]) -> None:
    """Keep an answer under ``key``, with the key inside (a failure to write only costs the
    next call its speed); what is not an answer is never kept."""
    if key is None or os.environ.get("RECON_ENGINE_CACHE") == "0" or answer_problem(result):
        return
    with contextlib.suppress(ReconError, OSError):
        write_json(results_dir() / f"{key}.json", {"key": key, "answer": result})


def _kv_facts(kv: dict[str, Any] | None) -> dict[str, Any]:
    """KV numbers under their identifiers (absent keys: the release did not give them)."""
    if not kv:
        return {}
    out: dict[str, Any] = {k: kv[k] for k in ("kv_cache_tokens", "max_concurrency", "kv_cache_tokens_range",
                              "max_concurrency_range") if k in kv}
    out["kv_num_blocks"] = kv.get("num_blocks")
    out["kv_spec_kinds"] = kv.get("spec_kinds")
    out["kv_layers"] = kv.get("layers_with_kv")
    return out


#: the memory plan's figures: child key (bytes) -> fact key (GiB, as the engine prints them)
MEMORY_KEYS = (("total_bytes", "total_memory_gib"), ("requested_bytes", "requested_memory_gib"),
               ("weights_bytes", "weights_gib"), ("activation_peak_bytes", "activation_peak_gib"),
               ("non_torch_bytes", "non_torch_gib"), ("cudagraph_bytes", "cudagraph_memory_gib"),
               ("available_kv_bytes", "available_kv_gib"))


def memory_facts(result: dict[str, Any]) -> dict[str, Any]:
    """The memory plan under identifiers: each figure in GiB, whether the engine starts, and
    what was not predicted (absent when no plan was asked for)."""
    plan = result.get("memory")
    refused = result.get("will_not_start")
    missing = result.get("memory_not_predicted")
    if plan is None and refused is None and missing is None:
        return {}
    out: dict[str, Any] = {"starts": None if missing and not refused else refused is None,
                           "startup_error": (refused or {}).get("error"),
                           "startup_error_where": (refused or {}).get("where"),
                           "memory_not_predicted": missing}
    for key, fact in MEMORY_KEYS:
        if plan and plan.get(key) is not None:
            out[fact] = round(int(plan[key]) / (1 << 30), 3)
    if plan:
        out["memory_model_runner"] = plan.get("model_runner")
        out["memory_replaced"] = plan.get("replaced", [])
        out["kernels_not_launched"] = plan.get("kernels_not_launched", [])
        out["ops_run_on_meta"] = plan.get("ops_run", [])
        out["ops_faked_on_meta"] = plan.get("ops_faked", [])
        out["activation_peak_holders"] = plan.get("peak_holders", [])
        limits = [int(v) for v in ((result.get("facts") or {}).get("max_model_len"),
                                    (result.get("kv") or {}).get("kv_cache_tokens")) if v]
        # a prompt leaves room for one output token (the release refuses one of max_model_len)
        out.update(prefill_facts(plan, min(limits) - 1 if limits else None))
    return out


def prefill_facts(plan: dict[str, Any], limit: int | None) -> dict[str, Any]:
    """One prompt's chunks against the memory free while it runs (empty without a prompt).

    Free while serving: torch's total less the CUDA context and the memory outside torch
    (the plan's assumptions), the CUDA graphs' pool, and what stands allocated once the KV
    cache is (weights, KV cache, the runner's buffers). A chunk fits where its activation
    peak does not pass that. The largest prompt that fits: the KV pool's and max_model_len's
    limit (``limit``) where every chunk fits; otherwise the largest first chunk that fits, its peak
    taken as linear in its tokens (an estimate, said as such).
    """
    prefill = plan.get("prefill")
    if prefill and prefill.get("error"):
        return {"prompt_fits": None, "prefill_not_predicted": prefill["error"]}
    if prefill and prefill.get("rejected"):
        return {"prompt_tokens": prefill.get("prompt_tokens"), "prompt_fits": False,
                "prompt_rejected": prefill["rejected"], "max_prompt_tokens_that_fit": limit}
    if not prefill or not prefill.get("chunks"):
        return {}
    gib = 1 << 30
    free = int(plan["total_bytes"]) - int(plan.get("context_bytes") or 0) \
        - int(plan.get("non_torch_bytes") or 0) - int(plan.get("cudagraph_bytes") or 0) \
        - int(prefill["standing_bytes"])
    chunks = prefill["chunks"]
    worst = max(chunks, key=lambda row: int(row["peak_bytes"]))
    peak = int(worst["peak_bytes"])
    cut = prefill.get("cut") or []
    out: dict[str, Any] = {
        "prompt_tokens": prefill.get("prompt_tokens"),
        "prompt_chunks": len(cut), "prompt_chunk_tokens": max((c[0] for c in cut), default=0),
        "prefill_peak_gib": round(peak / gib, 3),
        "prefill_peak_chunk": {"tokens": worst["tokens"], "context": worst["context"]},
        "prefill_peak_holders": worst.get("peak_holders", []),
        "prefill_free_gib": round(free / gib, 3),
        "prefill_headroom_gib": round((free - peak) / gib, 3),
        "kv_pool_holds_prompt": prefill.get("kv_pool_holds_prompt"),
        "prompt_fits": peak <= free and bool(prefill.get("kv_pool_holds_prompt")),
        "prefill_context_modelled": prefill.get("context_modelled"),
        "prefill_fused_custom_ops": prefill.get("fused_custom_ops", 0)}
    if peak <= free:
        out["max_prompt_tokens_that_fit"] = limit
    else:
        per_token = peak / max(int(worst["tokens"]), 1)
        out["max_prompt_tokens_that_fit"] = max(int(free / per_token), 0)
        out["max_prompt_tokens_estimated"] = "a chunk's peak taken as linear in its tokens"
    return out


def _printed_block(result: dict[str, Any]) -> dict[str, Any]:
    """The attention block size the release printed wins over its config's field.

    Some releases set the block size on the cache config, others log
    "Setting attention block size to N" and keep the aligned size elsewhere
    (the config's ``block_size`` stays the backend's); the line is what the engine
    uses and prints, the field is kept as ``attention_block_size_config``.
    """
    logged = (result.get("logged") or {}).get("attention_block_size_logged")
    field_value = (result.get("facts") or {}).get("attention_block_size")
    if logged is None or logged == field_value:
        return {}
    return {"attention_block_size": logged, "attention_block_size_config": field_value}


def _error_text(err: dict[str, Any]) -> str:
    """The release's error in one line: its first line plus the detail lines pydantic adds,
    without a library's advice to upgrade itself (the release's environment is the release's)."""
    lines = [without_upgrade_advice(ln.strip()) for ln in str(err.get("error")).splitlines()]
    lines = [ln for ln in lines if ln]
    detail = [ln for ln in lines[1:4] if not ln.startswith("For further information")]
    return " / ".join([lines[0] if lines else "no answer", *detail])[:800]


#: the sentences of a library's advice to install or upgrade something (transformers' for a
#: model type it lacks: "You can update Transformers with the command `pip install ...`")
_ADVICE = ("pip install", "If this does not work, and the checkpoint is very new")
#: transformers' words for a ``model_type`` it has no configuration class for
_UNKNOWN_TYPE = re.compile(r"has model type `([^`]*)` but Transformers does not recognize")


def without_upgrade_advice(text: str) -> str:
    """``text`` without the sentences that tell the reader to pip-install or upgrade a package."""
    sentences = re.split(r"(?<=\.)\s+(?=[A-Z])", text)
    return " ".join(x for x in sentences if not any(a in x for a in _ADVICE)).strip()


def unknown_model_type(error: str) -> str | None:
    """The ``model_type`` the release's transformers does not know, where that is the error."""
    found = _UNKNOWN_TYPE.search(error)
    return found.group(1) if found else None


def _stood_in(result: dict[str, Any]) -> str:
    """Which stand-ins of GPU-only packages the release used before it failed (they hold no values)."""
    used = (result.get("replaced") or {}).get("gpu_package_names_used") or []
    if not used:
        return ""
    return ("; the release used GPU-only packages it requires, which are not installed here and "
            "stand in without values: " + ", ".join(used[:12]) + (" ..." if len(used) > 12 else ""))


def _model_file_hint(error: str, config_json: dict[str, Any]) -> str:
    """What to give when the release wanted a file of the model's folder recon was not given."""
    modules = remote_code_modules(config_json)
    if modules and (any(name in error for name in modules)
                    or "does not recognize this architecture" in error
                    or "execute the configuration file" in error or "trust_remote_code" in error):
        return (f"; the model's auto_map names {', '.join(modules)}: put the file beside the "
                "config.json you give and add --trust-remote-code, as the engine needs")
    unknown = unknown_model_type(error)
    if unknown is not None:
        return (f"; model type {unknown!r} (config.json's model_type) has no configuration class in "
                "this release's libraries: a model newer than the release, or a misspelt type. Give "
                "the model's configuration_*.py beside config.json (with auto_map) and add "
                "--trust-remote-code, or ask a later release")
    wanted = [name for name in MODEL_FILES if name in error]
    if not wanted and "image processor" not in error:
        return ""
    name = wanted[0] if wanted else "preprocessor_config.json"
    return (f"; the release builds this model from its folder's {name}: put that file beside "
            "the config.json you give (or give --config the model's folder)")


def _where(snapshot: Snapshot, trace: str) -> str:
    """Where a failure happened: the release's last own line, then the innermost frame.

    The innermost frame is often torch's or a dependency's; the user needs the
    line of the release that reached it (a file of the snapshot, named as in it).
    """
    frames = re.findall(r'File "([^"]+)", line (\d+)', trace)
    if not frames:
        return ""
    own = None
    for path, line in reversed(frames):
        sep = f"/{snapshot.package}/"
        parts = path.split(sep)
        rels = [sep.lstrip("/") + sep.join(parts[i:]) for i in range(1, len(parts))]
        rel = next((r for r in rels if r in snapshot.files), None)
        if rel:
            own = f"{rel}:{line}"
            break
    last = f"{frames[-1][0]}:{frames[-1][1]}"
    if own is None or own.endswith(last.rsplit("/", 1)[-1]) and own.split(":")[0] in last:
        return f" (at {own or last})"
    return f" (at {own}, in {last})"


def _facts(snapshot: Snapshot, result: dict[str, Any], board: GPU, explicit: bool, count: int,
           usage: str, renv: ReleaseEnv, seconds: dict[str, float],
           config_json: dict[str, Any]) -> EngineFacts:
    if "usage_error" in result:
        raise EngineUsageError(f"{snapshot.label}: " + str(result["usage_error"]["message"]))
    if not result.get("ok"):
        err = (result.get("errors") or [{"error": "no answer"}])[-1]
        where = _where(snapshot, str(err.get("traceback", "")))
        errors = [r for r in result.get("log", []) if r.get("level") == "ERROR"]
        said = ""
        if errors:  # the release's own account (e.g. why a model class failed to import)
            logged = without_upgrade_advice(str(errors[-1]["message"]).strip().splitlines()[-1])
            said = f"; the release logged: {logged}" if logged else ""
            cause = str(errors[-1].get("exception") or "").strip().splitlines()
            if cause:
                said += f" ({cause[-1][:300]})"
        then = f"; {result['then']}" if result.get("then") else ""
        raise EngineFailed(f"{snapshot.label} did not decide: {_error_text(err)}{where}{said}"
                           + then + _stood_in(result)
                           + _model_file_hint(str(err.get("error", "")), config_json))
    cache = compile_cache.from_child(result.get("compile_cache"))
    replaced = dict(result.get("replaced", {}))
    replaced["not_installed"] = renv.record.get("not_installed", {})
    replaced["confinement"] = result.get("confinement")
    if result.get("layers"):
        replaced["process_groups"] = result["layers"].get("groups", [])
    return EngineFacts(
        release=f"{snapshot.package} {snapshot.version}", gpu=board, usage=usage,
        facts={**result.get("facts", {}), **_kv_facts(result.get("kv")), **memory_facts(result),
               **_printed_block(result),
               "draft_layers": ((result.get("layers") or {}).get("draft") or {}).get("layers")},
        logged=result.get("logged", {}),
        assumptions=_assumptions(board, explicit, count, usage) + said_of(renv.record) + _planned(result)
        + _trimmed(result) + list(result.get("assumed") or [])
        + list((result.get("memory") or {}).get("assumptions") or [])
        + (cache.assumptions() if cache else []) + [f"a GPU-only package's stand-in answered true: {what}"
                              for what in replaced.get("gpu_package_assumptions", [])],
        replaced=replaced,
        ran=_with_digests(snapshot, result.get("ran", [])),
        attention_backends=result.get("attention_backends", {}),
        block_size_stage=str(result.get("block_size_stage", "")),
        warnings=result.get("errors", []),
        seconds={**seconds, **result.get("seconds", {}),
                 "env_built": renv.built_seconds},
        peak_rss_mb=float(result.get("peak_rss_mb") or 0.0),
        env={"root": str(renv.root), "installed": len(cast(list, renv.record.get("installed", [])))},
        log=result.get("log", []), compile_cache=cache)
