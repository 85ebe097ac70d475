"""Engine mode's compile-cache phase: the folder names the release's torch.compile cache will use.

Loaded by path by ``child.py`` (standard library only at import; the release is
imported inside the functions, in the release's environment). The release's own
functions compute every factor: ``envs.compile_factors()`` (the environment),
``VllmConfig.compute_hash()`` (the config), and, for the AOT-compiled function
(``torch_compile_cache/torch_aot_compile/<sha256>``), ``aot_compile_hash_factors``
with ``_model_hash_key`` of each compiled module's ``forward``. What recon sets
while they run, each said in the answer:

* **the environment** the engine will have: the ``--env`` the user declared, and
  nothing of this machine's (the factors read only the process environment);
* **the model path** the engine will be given (the config hash includes it);
  recon's scratch folder holds the config meanwhile;
* **the torch version** the engine's image holds (defaults read it: AOT compile
  on from 2.10, the "mega" artifact from 2.12): the release's own exact torch pin,
  else this machine's torch, said as an assumption.

The folder of the compiled graphs (``torch_compile_cache/<10 hex>``) adds two
factors that only exist on the engine's machine: the hash of the source files
Dynamo traced and the compiler's hash (the board's torch, Triton and CUDA build).
They are named as not computed here; the three factors that are computed are given.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
import re
from collections.abc import Iterator
from typing import Any

#: what the release's AOT key hashes besides its factors (``decorators._model_hash_key``)
AOT_KEY = "_model_hash_key"
#: the engine's home folder where the declared environment names none (a container's root
#: user); the defaults of VLLM_CONFIG_ROOT and VLLM_XLA_CACHE_PATH, both hashed, follow it
DEFAULT_HOME = "/root"
#: the two factors of the graphs' folder that only the engine's machine has
NOT_HERE = {
    "code_hash": "the source files Dynamo traces while it compiles, read on the engine's machine",
    "compiler_hash": "Inductor's hash of the board's torch, Triton and CUDA build "
                     "(CacheBase.get_system, torch_key)",
}


def _installed(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def torch_pin(metadata: str | None) -> str | None:
    """The exact torch version the release's wheel pins (``Requires-Dist: torch==X``)."""
    for line in (metadata or "").splitlines():
        m = re.match(r"Requires-Dist:\s*torch\s*==\s*([0-9][^\s;,]*)\s*(;.*)?$", line.strip())
        if m and not (m.group(2) and "extra" in m.group(2)):
            return m.group(1)
    return None


@contextlib.contextmanager
def engine_process(env: dict[str, str]) -> Iterator[None]:
    """The engine process's environment, while the release hashes."""
    saved_env = dict(os.environ)
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in env.items()})
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved_env)


@contextlib.contextmanager
def transformers_version(version: str | None) -> Iterator[None]:
    """The transformers version the engine's machine has: a model config's JSON, which the
    config hash holds, names it (``transformers_version``)."""
    module: Any = importlib.import_module("transformers.configuration_utils")
    saved = getattr(module, "__version__", None)
    if version:
        module.__version__ = version
    try:
        yield
    finally:
        module.__version__ = saved


@contextlib.contextmanager
def model_paths(config: Any, typed: dict[str, str]) -> Iterator[None]:
    """Each model path as the engine gets it (``typed``: recon's scratch folder -> the name
    typed); the config hash includes it, and recon's scratch folders hold the configs meanwhile."""
    spec = getattr(config, "speculative_config", None)
    models = [getattr(config, "model_config", None), getattr(spec, "draft_model_config", None)]
    saved = [(m, m.model) for m in models if m is not None and getattr(m, "model", None) in typed]
    for model, path in saved:
        object.__setattr__(model, "model", typed[path])
    try:
        yield
    finally:
        for model, path in saved:
            object.__setattr__(model, "model", path)


def compiled_modules(*roots: Any) -> list[tuple[str, Any]]:
    """Each module the release compiles as one unit (``@support_torch_compile``), with its tag."""
    decorators = importlib.import_module("vllm.compilation.decorators")
    wrapper = getattr(decorators, "TorchCompileWithNoGuardsWrapper", None)
    found: list[tuple[str, Any]] = []
    for tag, root in zip(("backbone", "eagle_head"), roots, strict=False):
        if root is None or wrapper is None:
            continue
        for module in root.modules():
            if isinstance(module, wrapper) and not getattr(module, "do_not_compile", False):
                found.append((tag, module))
    return found


def aot_keys(config: Any, modules: list[tuple[str, Any]]) -> list[dict[str, Any]] | str:
    """The AOT-compiled function's folder per compiled module, as the release names it."""
    envs = importlib.import_module("vllm.envs")
    try:
        caching = importlib.import_module("vllm.compilation.caching")
    except ImportError:
        return "this release has no AOT compile cache (no vllm.compilation.caching)"
    decorators = importlib.import_module("vllm.compilation.decorators")
    factors_of = getattr(caching, "aot_compile_hash_factors", None)
    key_of = getattr(decorators, AOT_KEY, None)
    if factors_of is None or key_of is None:
        return "this release has no AOT compile cache (no aot_compile_hash_factors)"
    if not envs.VLLM_USE_AOT_COMPILE:
        return "AOT compile is off (VLLM_USE_AOT_COMPILE, or its default for this torch)"
    if envs.VLLM_USE_MEGA_AOT_ARTIFACT:
        return ("the AOT key holds Inductor's hash of the board's torch, Triton and CUDA build "
                "(VLLM_USE_MEGA_AOT_ARTIFACT)")
    base = list(factors_of(config))
    keys = []
    for tag, module in modules:
        digest = hashlib.sha256(str([*base, key_of(module.forward)]).encode()).hexdigest()
        keys.append({"tag": tag, "module": type(module).__qualname__,
                     "folder": f"torch_compile_cache/torch_aot_compile/{digest}",
                     "hash": digest})
    return keys


def cache_disabled(config: Any) -> str | None:
    """Why the release will not use its compile cache (None: it will)."""
    envs = importlib.import_module("vllm.envs")
    compilation = config.compilation_config
    mode = getattr(compilation, "mode", getattr(compilation, "level", None))
    if mode is not None and int(getattr(mode, "value", mode)) != 3:
        return f"the model is not compiled by vLLM (compilation mode {getattr(mode, 'name', mode)})"
    if getattr(envs, "VLLM_DISABLE_COMPILE_CACHE", False):
        return "VLLM_DISABLE_COMPILE_CACHE=1"
    spec = getattr(config, "speculative_config", None)
    use_ngram_gpu = getattr(spec, "use_ngram_gpu", None)
    if callable(use_ngram_gpu) and use_ngram_gpu():
        return "n-gram speculative decoding on the GPU (the release turns the cache off)"
    return None


def config_parts(config: Any) -> dict[str, str]:
    """Each part of the config the release hashes on its own (``<part>.compute_hash()``)."""
    parts = {}
    for name in sorted(getattr(config, "__dataclass_fields__", {})):
        part = getattr(config, name, None)
        method = getattr(part, "compute_hash", None)
        if callable(method):
            with contextlib.suppress(Exception):  # a part that cannot hash is left out, listed
                parts[name] = str(method())
    return parts


#: stands for "no other value to try" (the field's type is not one recon perturbs)
_SAME = object()


def _other(value: Any) -> Any:
    """Another value of the same kind, to see whether the release's hash reads the field."""
    import enum

    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 0.5
    if isinstance(value, str):
        return value + "~"
    if isinstance(value, enum.Enum):
        others = [m for m in type(value) if m is not value]
        return others[0] if others else _SAME
    if isinstance(value, list):
        return [*value, value[-1]] if value else [1]
    if isinstance(value, dict):
        return {**value, "~": 1}
    return _SAME


def excluded_fields(config: Any, parts: dict[str, str]) -> dict[str, dict[str, list[str]]]:
    """Per config part, the fields its ``compute_hash`` leaves out, found by asking it.

    Each field of each part is given another value on a copy, and the part's own
    ``compute_hash`` says whether that changes its hash: the release's rule, read by
    running it, never typed. Fields with no value to try (objects, None) are ``untested``.
    """
    import copy
    import dataclasses

    out: dict[str, dict[str, list[str]]] = {}
    for name, base in parts.items():
        part = getattr(config, name, None)
        if part is None or not dataclasses.is_dataclass(part):
            continue
        left, untested = [], []
        for f in dataclasses.fields(part):
            other = _other(getattr(part, f.name, None))
            if other is _SAME:
                untested.append(f.name)
                continue
            probe: Any = copy.copy(part)
            try:
                object.__setattr__(probe, f.name, other)
                changed = str(probe.compute_hash()) != base
            except Exception:  # noqa: BLE001 - a value the part cannot hash: not known
                untested.append(f.name)
                continue
            if not changed:
                left.append(f.name)
        out[name] = {"left_out": left, "untested": untested}
    return out


def compile_cache(config: Any, req: dict[str, Any], typed: dict[str, str],
                  roots: tuple[Any, ...]) -> dict[str, Any]:
    """The compile cache's factors and folder names for this engine (see the module docstring).

    ``typed``: each scratch folder recon gave the release -> the model name the user typed.
    """
    envs = importlib.import_module("vllm.envs")
    pin = torch_pin(req.get("metadata"))
    declared = dict(req.get("declared_env") or {})
    out: dict[str, Any] = {"torch_version": pin, "env": declared,
                           "home_assumed": None if "HOME" in declared else DEFAULT_HOME,
                           "model_paths": sorted(set(typed.values())),
                           "not_computed": dict(NOT_HERE)}
    if not hasattr(envs, "compile_factors") and not hasattr(envs, "compute_hash"):
        out["unavailable"] = ("this release has neither envs.compile_factors nor envs.compute_hash "
                              "(its key is not known here)")
        return out
    engine_transformers = req.get("transformers_version")
    out["transformers_version"] = engine_transformers or _installed("transformers")
    out["transformers_assumed"] = not engine_transformers
    with engine_process({"HOME": DEFAULT_HOME, **declared}), model_paths(config, typed), \
            transformers_version(engine_transformers):
        out["disabled"] = cache_disabled(config)
        if hasattr(envs, "compile_factors"):  # 0.11 on: every variable, minus a list
            out["env_factors"] = envs.compile_factors()
            utils = importlib.import_module("vllm.config.utils")
            out["env_hash"] = utils.hash_factors(out["env_factors"])
        else:  # 0.10: the variables the release lists, hashed its own way
            out["env_hash"] = envs.compute_hash()
        out["config_hash"] = config.compute_hash()
        out["config_parts"] = config_parts(config)
        out["excluded"] = excluded_fields(config, out["config_parts"])
        out["aot"] = aot_keys(config, compiled_modules(*roots))
    return out
