"""Parent side of SGLang engine mode: ``server_args(snapshot, flags, config_json, gpu=...)``.

"What will my server actually run with?" SGLang resolves much of its
configuration at start-up (chunked prefill size, page size,
``mem_fraction_static``, CUDA graph batch sizes, whether the overlap scheduler
stays on, speculative and mamba defaults), from the command line, the model's
``config.json`` and the GPU. Here the release decides: the command line as
typed goes through the release's own ``prepare_server_args`` and resolution
(:mod:`recon.engine.sglang_child`), in the same OS sandbox and kind of release
environment as vLLM engine mode (:mod:`recon.engine.config`), on a declared
GPU. recon types no flag names and no defaults; it states what it assumes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from .. import progress
from ..errors import ReconError
from ..slicing.sandbox import Limits, Outcome, interpreter_dirs, launch
from ..snapshots.model import Snapshot
from . import server
from .command import container_run, container_said, python_module, typed_environment, words
from .config import (
    DEFAULT_GPU_COUNT,
    EngineFailed,
    EngineUsageError,
    cached_result,
    compiled_modules,
    served_or_cold,
    snapshot_metadata,
    snapshot_wheel,
    store_result,
)
from .env import ReleaseEnv, gpu_only_modules, release_env, said_of, wheel_metadata
from .gpus import DEFAULT_GPU, GPU
from .gpus import gpu as lookup_gpu

CHILD = Path(__file__).with_name("sglang_child.py")
#: the standard-library-only files the child loads by path (their bytes are part of the cache key)
HELPERS = (Path(__file__).with_name("child.py"),
           Path(__file__).parent.parent / "slicing" / "stubs.py",
           Path(__file__).with_name("sglang_pools.py"))
#: ``torch.version.cuda`` of the CUDA torch build the server runs (the CPU torch here has none);
#: the releases compare it with 11.0, 12.3 and 12.8 (``_check_cuda_device_version``)
DEFAULT_CUDA = "12.8"
#: how the user may start the server: ``python -m MODULE`` modules and the ``sglang`` command
LAUNCH_MODULES = ("sglang.launch_server",)


class SglangNotApplicable(ReconError):
    """The release lacks what engine mode runs (its message says what is missing)."""

    exit_code = 6


@dataclass
class ServerArgsFacts:
    """What the release resolved for one command line on one declared GPU."""

    release: str
    gpu: GPU
    gpu_count: int
    entry: str
    argv: list[str]
    server_args: dict[str, Any]
    changed: dict[str, dict[str, Any]]
    decisions: dict[str, list[dict[str, Any]]]
    resolution: str
    launch_check: dict[str, Any]
    assumptions: list[str]
    replaced: dict[str, Any]
    ran: list[dict[str, Any]]
    warnings: list[dict[str, Any]]
    seconds: dict[str, Any]
    env: dict[str, Any]
    peak_rss_mb: float = 0.0
    log: list[dict[str, Any]] = field(repr=False, default_factory=list)
    #: the release's pool sizing per memory point (``memory=`` asked for it), else None
    pools: dict[str, Any] | None = None

    def as_json(self) -> dict[str, Any]:
        """Identifier keys, numbers as numbers (``--json``)."""
        return {"release": self.release, "gpu": self.gpu.as_json(), "gpu_count": self.gpu_count,
                "entry": self.entry, "argv": self.argv, "resolution": self.resolution,
                "server_args": self.server_args, "changed": self.changed,
                "decisions": self.decisions,
                "launch_check": self.launch_check, "assumptions": self.assumptions,
                "replaced": self.replaced, "warnings": self.warnings, "seconds": self.seconds,
                "peak_rss_mb": self.peak_rss_mb, "env": self.env, "ran": self.ran,
                **({"pools": self.pools} if self.pools is not None else {})}


@dataclass(frozen=True)
class MemoryFigures:
    """Free GPU memory, in GB as SGLang prints it, at the two points its pool sizing reads.

    ``available_gb``: after the weights are loaded (the log's ``Load weight end.
    ... avail mem=``); ``pre_load_gb``: before (the release measures it when its
    process group starts; the log's ``Load weight begin. avail mem=`` is the
    nearest printed figure). One pair per point; ``graphs`` also asks for the
    decode CUDA graph batch sizes; ``without_draft``, for a speculative command
    line, the same line without its speculative options (the release's parser
    names them) at the first figure (``pools["without_draft"]``).
    """

    available_gb: tuple[float, ...]
    pre_load_gb: tuple[float, ...]
    graphs: bool = False
    #: also size the command line without its speculative options, at the first figure
    without_draft: bool = False

    def __post_init__(self) -> None:
        if not self.available_gb or len(self.available_gb) != len(self.pre_load_gb):
            raise ReconError("memory figures: one pre-load figure for each available figure")
        for a, p in zip(self.available_gb, self.pre_load_gb, strict=True):
            if not (0 < a <= p):
                raise ReconError(f"memory figures: free memory after the weights ({a} GB) must "
                                 f"be positive and at most the free memory before ({p} GB)")

    def as_request(self) -> dict[str, Any]:
        return {"available_gb": list(self.available_gb), "pre_load_gb": list(self.pre_load_gb),
                "graphs": self.graphs, "without_draft": self.without_draft}


def launcher_argv(flags: str | list[str]) -> tuple[str, list[str], dict[str, str]]:
    """How the command starts the server, its arguments, and the environment typed before it.

    ``python -m sglang.launch_server ARGS`` (any ``python``), ``sglang serve ARGS``,
    or bare ``ARGS``; leading ``NAME=VALUE`` words are the engine's environment,
    as the shell would pass them. In a ``docker run``, the words after the image, with
    its ``-e`` settings as the environment.
    """
    env, tokens = typed_environment(words(flags))
    run = container_run(tokens)
    if run is not None:  # the image's own command follows it (lmsysorg/sglang has no entry point)
        env, tokens = {**env, **run.env}, run.args
    module, rest = python_module(tokens)
    if module is not None:
        if module not in LAUNCH_MODULES:
            raise ReconError(f"python -m {module}: engine mode reads the server's command "
                             f"line ({', '.join(LAUNCH_MODULES)} or sglang serve)")
        return "launch_server", rest, env
    if tokens[:2] == ["sglang", "serve"]:
        return "serve", tokens[2:], env
    if not tokens or tokens[0].startswith("-"):
        return "launch_server", tokens, env
    raise ReconError(f"not an SGLang server command line: {shlex.join(tokens[:3])} ... "
                     "(expected python -m sglang.launch_server ..., sglang serve ..., or flags)")


def environment(snapshot: Snapshot) -> ReleaseEnv:
    """The SGLang release's environment (built once, cached)."""
    if snapshot.package != "sglang" or not snapshot.version:
        raise ReconError(f"SGLang engine mode reads SGLang releases; {snapshot.label} is "
                         f"{snapshot.package} {snapshot.version}")
    wheel = snapshot_wheel(snapshot)
    return release_env(snapshot.package, snapshot.version, wheel_metadata(wheel), wheel)


def _assumptions(gpu: GPU, explicit: bool, count: int, cuda: str) -> list[str]:
    memory = f"{gpu.memory_bytes / 2**30:.1f} GiB, nvidia-smi {gpu.memory_bytes >> 20} MiB"
    return [f"GPU: {gpu.name} (sm{gpu.major}{gpu.minor}, {memory})"
            + ("" if explicit else f" -- not given, {DEFAULT_GPU} assumed"),
            f"{count} such GPUs visible",
            f"CUDA {cuda} (torch.version.cuda of the server's CUDA build of torch)"]


def _digest() -> str:
    """The child's code and the helper files it loads: a change invalidates cached answers."""
    h = hashlib.sha256()
    for path in (CHILD, *HELPERS):
        h.update(path.read_bytes())
    return h.hexdigest()


def result_key(snapshot: Snapshot, renv: ReleaseEnv, request: dict[str, Any],
               sandbox: bool) -> str | None:
    """The key of an answer: the snapshot's bytes on disk, the environment, the child, the request."""
    from ..snapshots.cache import tree_key

    tree = tree_key(snapshot.src)
    if tree is None or "unsettled" in tree:
        return None
    parts = {"engine": "sglang", "tree": tree, "env": renv.root.name, "child": _digest(),
             "request": request, "sandbox": sandbox}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def server_args(snapshot: Snapshot, flags: str | list[str], config_json: dict[str, Any], *,
                gpu: str | None = None, gpu_count: int = DEFAULT_GPU_COUNT,
                env: dict[str, str] | None = None, cuda_version: str = DEFAULT_CUDA,
                draft_config: dict[str, Any] | None = None,
                memory: MemoryFigures | None = None,
                timeout: float = 600.0, sandbox: bool = True) -> ServerArgsFacts:
    """What ``snapshot``'s SGLang resolves for ``flags`` and ``config_json`` on ``gpu``.

    ``flags`` is the command line as typed (``python -m sglang.launch_server
    --model-path M ...`` or ``sglang serve M ...``); the model path stands for
    a scratch folder holding ``config_json`` (and ``--speculative-draft-model-path``
    one holding ``draft_config``, where given). With ``memory``, the release
    also sizes its KV and mamba pools and its decode CUDA graph batch sizes
    for each pair of free-memory figures (``ServerArgsFacts.pools``). Answers are kept under
    :func:`result_key` (``RECON_ENGINE_CACHE=0`` turns that off).

    Raises :class:`EngineUsageError` where the release's parser refuses the
    command line (its message, exit 2), :class:`SglangNotApplicable` where the
    release lacks ``prepare_server_args``, :class:`EngineFailed` where it raises.
    """
    start = time.monotonic()
    board = lookup_gpu(gpu or DEFAULT_GPU)
    renv = environment(snapshot)
    env_seconds = time.monotonic() - start
    entry, argv, typed_env = launcher_argv(flags)
    request = {"entry": entry, "argv": argv, "config": config_json, "draft_config": draft_config,
               "gpu": {**board.as_json(), "count": gpu_count}, "cuda_version": cuda_version,
               "env": {**typed_env, **(env or {})},
               "memory": memory.as_request() if memory is not None else None}
    key = result_key(snapshot, renv, request, sandbox)
    result = cached_result(key)
    if result is None:
        with progress.step(f"importing {snapshot.package} {snapshot.version} in the sandbox: "
                           f"its parser and ServerArgs resolution decide on {board.name}"):
            result = _run(snapshot, renv, dict(request), timeout, sandbox)
        if result.get("ok") or "usage_error" in result or "not_applicable" in result:
            store_result(key, result)
    else:
        result["seconds"] = {**result.get("seconds", {}), "cached": True}
    return _facts(snapshot, result, board, gpu is not None, gpu_count, entry, argv, cuda_version,
                  renv, {"env": round(env_seconds, 2),
                         "total": round(time.monotonic() - start, 2)},
                  [said for said in [container_said(flags)] if said])


def _run(snapshot: Snapshot, renv: ReleaseEnv, request: dict[str, Any], timeout: float,
         sandbox: bool) -> dict[str, Any]:
    """The child's JSON answer (an object): from a warm server where one can give it, else
    from a cold child on a scratch folder. ``seconds.server`` says which way it came."""
    extra = request.pop("env")
    request.update(src=str(snapshot.src), compiled=compiled_modules(snapshot),
                   gpu_modules=gpu_only_modules(
                       cast(dict[str, str], renv.record.get("not_installed", {}))),
                   package=snapshot.package, version=snapshot.version,
                   metadata=snapshot_metadata(snapshot))
    limits = Limits(timeout=timeout, memory_mb=16384, file_mb=64, sandbox=sandbox,
                    scratch_mb=512, processes=512)
    read_only = [str(snapshot.src), str(renv.root), str(CHILD.parent),
                 str(HELPERS[1].parent), *interpreter_dirs()]
    argv = [str(renv.python), "-I", "-B", str(CHILD)]
    served = _ask_server(snapshot, renv, request, extra, argv, read_only, limits) \
        if server.enabled() else None

    def cold() -> Outcome:
        root = Path(tempfile.mkdtemp(prefix="recon-sglang-"))
        os.chmod(root, 0o755)  # the sandbox may start as nobody
        try:
            work = root / "work"
            work.mkdir(mode=0o700)
            request["model_dir"] = str(work / "model")
            return launch(argv, request, root=root, work=work, limits=limits,
                          env=server.child_env(work, extra, "sglang"), slice_files=set(),
                          read_only=read_only)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    return served_or_cold(served, cold, "SGLang engine mode", timeout)


#: what a warm SGLang server is set up with (the rest of a request is the request)
SETUP_KEYS = ("src", "compiled", "gpu_modules", "gpu", "cuda_version", "package", "version",
              "metadata")


def _ask_server(snapshot: Snapshot, renv: ReleaseEnv, request: dict[str, Any],
                extra: dict[str, str], argv: list[str], read_only: list[str],
                limits: Limits) -> server.Served | None:
    """A warm server's answer (:mod:`recon.engine.server`), or None: run a cold child.

    A server is keyed by what its set-up and imports depend on: the snapshot's
    bytes, the environment, the child's code, the variables typed before the
    command, the declared GPU and CUDA version.
    """
    from ..snapshots.cache import tree_key

    tree = tree_key(snapshot.src)
    if tree is None or "unsettled" in tree:
        return None
    setup = {k: request[k] for k in SETUP_KEYS}
    key = server.server_key({"engine": "sglang", "tree": tree, "env": renv.root.name,
                             "child": _digest(), "environ": extra, "gpu": setup["gpu"],
                             "cuda_version": setup["cuda_version"], "sandbox": limits.sandbox,
                             "python": str(renv.python)})
    spec = server.ServerSpec(key=key, argv=[*argv, "--serve"], env_extra=dict(extra),
                             read_only=read_only, setup=setup, memory_mb=limits.memory_mb,
                             scratch_mb=2048, processes=limits.processes,
                             sandbox=limits.sandbox, engine="sglang")
    try:
        return server.ask(spec, request, limits.timeout)
    except server.ServerTimedOut as err:
        raise EngineFailed(f"SGLang engine mode ran past {limits.timeout:.0f} s (warm server); "
                           f"stderr tail: {err}") from None


def _with_digests(snapshot: Snapshot, ran: list[dict[str, Any]]) -> list[dict[str, Any]]:
    files = snapshot.files
    for fn in ran:
        rec = files.get(fn["file"])
        fn["sha256"] = rec.sha256 if rec is not None else None
    return ran


def _failure(snapshot: Snapshot, result: dict[str, Any]) -> ReconError:
    """The release's refusal or error as one readable line."""
    if "usage_error" in result:
        return EngineUsageError(f"{snapshot.label}: " + str(result["usage_error"]["message"]))
    if "not_applicable" in result:
        return SglangNotApplicable(f"not applicable to {snapshot.package} {snapshot.version}: "
                                   f"{result['not_applicable']}")
    err = (result.get("errors") or [{"error": "no answer"}])[-1]
    what = "size its memory pools" if err.get("stage") == "pools" else "resolve its ServerArgs"
    frames = re.findall(r'File "([^"]+)", line (\d+)', str(err.get("traceback", "")))
    where = f" (at {frames[-1][0]}:{frames[-1][1]})" if frames else ""
    lines = [ln.strip() for ln in str(err.get("error")).splitlines() if ln.strip()]
    hint = ""
    if "huggingface.co" in str(err.get("error")) or "offline" in str(err.get("error")).lower():
        hint = ("; engine mode is offline: a model the release loads must be given as a "
                "config.json (the model's --config; a draft model's --draft-config)")
    return EngineFailed(f"{snapshot.label} did not {what}: "
                        f"{(lines or ['no answer'])[0][:600]}{where}{hint}")


def _pools(result: dict[str, Any]) -> dict[str, Any] | None:
    """The pools of the answer, with the draft-less line's beside them where asked."""
    pools = result.get("pools")
    if pools is not None and result.get("pools_without_draft") is not None:
        pools = {**pools, "without_draft": result["pools_without_draft"]}
    return pools


def _facts(snapshot: Snapshot, result: dict[str, Any], board: GPU, explicit: bool, count: int,
           entry: str, argv: list[str], cuda: str, renv: ReleaseEnv,
           seconds: dict[str, float], typed: list[str]) -> ServerArgsFacts:
    if not result.get("ok"):
        raise _failure(snapshot, result)
    replaced = dict(result.get("replaced", {}))
    replaced["not_installed"] = renv.record.get("not_installed", {})
    replaced["confinement"] = result.get("confinement")
    check = result.get("launch_check") or {}
    warnings = list(result.get("errors", []))
    if check.get("ok") is False:
        warnings.append({"stage": "check_server_args (the engine's launch check)",
                         "error": check.get("error")})
    return ServerArgsFacts(
        release=f"{snapshot.package} {snapshot.version}", gpu=board, gpu_count=count,
        entry=entry, argv=argv, server_args=result.get("server_args", {}),
        changed=result.get("changed", {}), decisions=result.get("decisions", {}),
        resolution=str(result.get("resolution", "")), launch_check=check,
        assumptions=_assumptions(board, explicit, count, cuda) + typed + said_of(renv.record),
        replaced=replaced,
        ran=_with_digests(snapshot, result.get("ran", [])), warnings=warnings,
        seconds={**seconds, **result.get("seconds", {}), "env_built": renv.built_seconds},
        env={"root": str(renv.root),
             "installed": len(cast(list[str], renv.record.get("installed", [])))},
        peak_rss_mb=float(result.get("peak_rss_mb") or 0.0), log=result.get("log", []),
        pools=_pools(result))
