"""A model ``config.json`` as an object that behaves like a Hugging Face config.

Standard library only (it is loaded inside the child process, and the whole
point is not needing Transformers). It holds exactly the keys of the file:

* attribute access (``cfg.num_hidden_layers``), assignment, ``hasattr``;
* a missing key raises :class:`ConfigKeyError`, an ``AttributeError``, so
  ``getattr(cfg, "sliding_window", None)`` returns the default as with a
  ``PretrainedConfig``; the runner turns an *uncaught* one into
  "config is missing key X (needed at file:line)";
* nested sub-configs (``text_config``, ``vision_config``, ...) become config
  objects, as Transformers makes them; other dict values (``rope_scaling``,
  ``quantization_config``, ``dflash_config``) stay plain dicts, as they do there;
* ``to_dict()``, ``to_json_string()``, ``get_text_config()``, ``update()``,
  ``==``, ``in``, ``repr``.

Model-class defaults (what ``Qwen3Config.__init__`` fills in when a key is
absent) are *not* applied: the object says what the file says.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

#: keys whose dict value Transformers turns into a nested config object
SUB_CONFIG_KEYS = frozenset({
    "text_config", "vision_config", "audio_config", "speech_config", "language_config",
    "llm_config", "thinker_config", "talker_config", "vision_tower_config", "encoder_config",
    "decoder_config", "perceiver_config", "qformer_config", "code2wav_config",
})


class ConfigKeyError(AttributeError):
    """The config has no such key (an AttributeError, so getattr defaults work)."""

    def __init__(self, key: str, where: str) -> None:
        self.key = key
        self.where = where
        super().__init__(f"config{where} has no key {key!r}")


class HFConfig:
    """Attribute view of one config dict (see the module docstring)."""

    def __init__(self, data: dict[str, Any] | None = None, *, where: str = "") -> None:
        object.__setattr__(self, "_where", where)
        object.__setattr__(self, "_keys", [])
        for key, value in (data or {}).items():
            self.__setattr__(key, value)

    @classmethod
    def from_file(cls, path: str | Path) -> HFConfig:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        if not isinstance(data, dict):
            raise ValueError(f"{path}: a config.json holds a JSON object, not {type(data).__name__}")
        return cls(data)

    def __setattr__(self, key: str, value: Any) -> None:
        if key in SUB_CONFIG_KEYS and isinstance(value, dict):
            value = HFConfig(value, where=f"{self._where}.{key}")
        if key not in self._keys:
            self._keys.append(key)
        object.__setattr__(self, key, value)

    def __delattr__(self, key: str) -> None:
        object.__delattr__(self, key)
        self._keys.remove(key)

    def __getattr__(self, key: str) -> Any:  # only called when the key is absent
        if key.startswith("__") and key.endswith("__"):
            raise AttributeError(key)
        raise ConfigKeyError(key, self._where)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HFConfig) and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]  # mutable, like PretrainedConfig

    def __repr__(self) -> str:
        return f"HFConfig {self.to_json_string()}"

    def keys(self) -> list[str]:
        return list(self._keys)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in self._keys:
            value = self.__dict__[key]
            out[key] = value.to_dict() if isinstance(value, HFConfig) else copy.deepcopy(value)
        return out

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, default=repr)

    def update(self, values: dict[str, Any]) -> None:
        for key, value in values.items():
            setattr(self, key, value)

    def get_text_config(self, decoder: bool = False) -> HFConfig:
        """The text sub-config when there is one, else this config (as Transformers does)."""
        for key in ("text_config", "language_config", "llm_config", "thinker_config"):
            sub = self.__dict__.get(key)
            if isinstance(sub, HFConfig):
                return sub
        return self
