"""The compile cache a vLLM engine will use: the child's answer, typed and checked.

The child (``compile_child.py``) lets the release compute its own factors; this
module turns that untrusted JSON into :class:`CompileCache`, which the recipes,
``recon logs`` and ``recon cache`` read as attributes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

HEX = re.compile(r"[0-9a-f]{8,64}")


@dataclass(frozen=True)
class AotKey:
    """One compiled module's AOT folder: ``torch_compile_cache/torch_aot_compile/<hash>``."""

    tag: str  # backbone, eagle_head
    module: str  # the compiled class (LlamaModel)
    hash: str

    @property
    def folder(self) -> str:
        return f"torch_compile_cache/torch_aot_compile/{self.hash}"


@dataclass(frozen=True)
class CompileCache:
    """What the release's own hash functions give for one command line, config and environment."""

    env_hash: str | None
    config_hash: str | None
    aot: tuple[AotKey, ...]
    #: why there is no AOT key (None where there is one)
    aot_missing: str | None
    #: why the engine will not use its compile cache (None: it will)
    disabled: str | None
    #: why nothing could be computed (a release without the functions)
    unavailable: str | None
    #: the torch version the defaults were read with (the release's pin), None: this machine's
    torch_version: str | None
    env: dict[str, str] = field(default_factory=dict)
    #: the transformers version the model config's JSON names in the config hash
    transformers_version: str | None = None
    transformers_assumed: bool = True
    #: the engine's HOME recon assumed (None: the environment declared one)
    home_assumed: str | None = None
    model_paths: tuple[str, ...] = ()
    #: the factors of the graphs' folder (``torch_compile_cache/<10 hex>``) not computed here
    not_computed: dict[str, str] = field(default_factory=dict)
    #: each config part's own hash (``<part>.compute_hash()``)
    parts: dict[str, str] = field(default_factory=dict)
    #: per part, the fields its hash leaves out (the release asked, field by field)
    left_out: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def aot_for(self, tag: str = "backbone") -> AotKey | None:
        return next((k for k in self.aot if k.tag == tag), None)

    def assumptions(self) -> list[str]:
        said = []
        if self.torch_version is None:
            said.append("compile cache: the release pins no exact torch; the defaults that "
                        "depend on it were read with this machine's torch")
        if not self.env:
            said.append("compile cache: the engine's environment is taken to set no variable "
                        "the release hashes (engine-config --env NAME=VALUE, recipes --set "
                        "engine_env=...)")
        if self.transformers_assumed:
            said.append(f"compile cache: the engine's transformers is {self.transformers_version} "
                        "(the release environment's); the config hash holds the model config "
                        "as it writes it (--engine-transformers / --set engine_transformers)")
        if self.home_assumed:
            said.append(f"compile cache: the engine's HOME is {self.home_assumed} (hashed "
                        "defaults follow it: VLLM_CONFIG_ROOT)")
        return said

    def as_json(self) -> dict[str, Any]:
        return {"env_hash": self.env_hash, "config_hash": self.config_hash,
                "aot": [{"tag": k.tag, "module": k.module, "hash": k.hash, "folder": k.folder}
                        for k in self.aot],
                "aot_missing": self.aot_missing, "disabled": self.disabled,
                "unavailable": self.unavailable, "torch_version": self.torch_version,
                "env": self.env, "transformers_version": self.transformers_version,
                "transformers_assumed": self.transformers_assumed,
                "home_assumed": self.home_assumed, "model_paths": list(self.model_paths),
                "not_computed": self.not_computed, "parts": self.parts,
                "left_out": {k: list(v) for k, v in self.left_out.items()}}


def _text(value: Any, limit: int = 400) -> str | None:
    return value[:limit] if isinstance(value, str) else None


def _hex(value: Any) -> str | None:
    return value if isinstance(value, str) and HEX.fullmatch(value) else None


def _of(value: Any, kind: type) -> Any:
    return value if isinstance(value, kind) else kind()


def from_child(data: Any) -> CompileCache | None:
    """The child's ``compile_cache`` object, every field checked (None: not an answer)."""
    if not isinstance(data, dict):
        return None
    aot = data.get("aot")
    keys = tuple(AotKey(str(k.get("tag"))[:40], str(k.get("module"))[:200], k["hash"])
                 for k in (aot if isinstance(aot, list) else [])
                 if isinstance(k, dict) and _hex(k.get("hash")))
    env = _of(data.get("env"), dict)
    not_computed = _of(data.get("not_computed"), dict)
    paths = _of(data.get("model_paths"), list)
    return CompileCache(
        env_hash=_hex(data.get("env_hash")), config_hash=_hex(data.get("config_hash")),
        aot=keys, aot_missing=_text(aot), disabled=_text(data.get("disabled")),
        unavailable=_text(data.get("unavailable")), torch_version=_text(data.get("torch_version"), 40),
        env={str(k)[:200]: str(v)[:2000] for k, v in env.items()},
        transformers_version=_text(data.get("transformers_version"), 40),
        transformers_assumed=data.get("transformers_assumed") is not False,
        home_assumed=_text(data.get("home_assumed"), 400),
        model_paths=tuple(str(p)[:1000] for p in paths),
        not_computed={str(k)[:40]: str(v)[:400] for k, v in not_computed.items()},
        parts={str(k)[:60]: h for k, v in _of(data.get("config_parts"), dict).items()
               if (h := _hex(v))},
        left_out={str(k)[:60]: tuple(str(f)[:80] for f in _of(v.get("left_out"), list))
                  for k, v in _of(data.get("excluded"), dict).items() if isinstance(v, dict)})
