"""Refuse a model ``config.json`` no real model has, before anything is built or run.

A release's config classes and engine take a config's numbers at their word: a
``num_hidden_layers`` of 10^30 keeps engine mode building layers for as long as it is
allowed to run, and a ``NaN`` (which Python's ``json`` reads, though JSON has no such
value) makes the release fail in a way that looks like a broken environment. So every
``--config`` is read here first (standard library only):

* ``NaN``, ``Infinity``, ``-Infinity`` and numbers that overflow a float (``1e400``)
  are refused, naming the field;
* counts and sizes a model's code loops over or allocates by are held to bounds far
  above every published model (:data:`BOUNDS`; the deepest has about 130 layers, the
  widest MoE 512 experts, the longest context 10 M positions), in the config and in
  its nested sub-configs (``text_config``, ``vision_config``, ...);
* the file must be a regular file of at most :data:`MAX_CONFIG_BYTES` (a FIFO or
  ``/dev/zero`` is refused without blocking or filling memory).

Each refusal is one line naming the file and the field, with the bound.
"""

from __future__ import annotations

import math
import os
import stat
from pathlib import Path
from typing import Any

from ..errors import ReconError

#: the largest config.json read (published ones are at most a few hundred KiB)
MAX_CONFIG_BYTES = 64 << 20

_LAYERS = 1024  # deepest published model: about 130 layers
_COUNT = 65536  # heads, experts, groups: at most a few hundred in published models
_SIZE = 2**31 - 1  # widths, vocabularies, positions: at most 10 M in published models

#: bound -> the fields it holds, wherever they are in the config (sub-configs too)
_FIELDS: dict[int, tuple[str, ...]] = {
    _LAYERS: ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "num_decoder_layers",
              "num_encoder_layers", "encoder_layers", "decoder_layers", "depth",
              "num_nextn_predict_layers", "first_k_dense_replace", "max_window_layers",
              "num_mtp_layers", "attn_layer_period", "expert_layer_period"),
    _COUNT: ("num_attention_heads", "num_key_value_heads", "n_head", "num_heads", "num_kv_heads",
             "n_head_kv", "multi_query_group_num", "num_experts", "num_local_experts",
             "n_routed_experts", "n_shared_experts", "num_shared_experts", "num_experts_per_tok",
             "moe_topk", "n_group", "topk_group", "n_groups", "mamba_n_heads", "mamba_n_groups",
             "linear_num_key_heads", "linear_num_value_heads", "ssm_num_heads",
             "num_experts_per_token", "moe_num_experts"),
    _SIZE: ("hidden_size", "n_embd", "d_model", "intermediate_size", "ffn_hidden_size",
            "moe_intermediate_size", "shared_expert_intermediate_size", "head_dim",
            "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
            "vocab_size", "max_position_embeddings", "n_positions", "max_seq_len",
            "seq_length", "sliding_window", "ssm_state_size",
            "mamba_d_state", "mamba_d_conv", "conv_kernel", "mamba_head_dim", "mamba_expand",
            "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim",
            "num_labels", "image_size", "patch_size", "block_size"),
}
#: field name -> the largest value recon accepts for it
BOUNDS: dict[str, int] = {name: bound for bound, names in _FIELDS.items() for name in names}


class _NonFinite:
    """Stands for a NaN/Infinity while the JSON is read, so the check can name its field."""

    def __init__(self, text: str) -> None:
        self.text = text


def _constant(text: str) -> _NonFinite:
    return _NonFinite(text)


def _float(text: str) -> float | _NonFinite:
    value = float(text)
    return value if math.isfinite(value) else _NonFinite(text)


#: ``json.loads(text, **JSON_HOOKS)``: NaN, Infinity and overflowing floats become markers
JSON_HOOKS: dict[str, Any] = {"parse_constant": _constant, "parse_float": _float}


def read_config_text(path: Path) -> str:
    """A config file's text: a regular file of at most :data:`MAX_CONFIG_BYTES`, never blocking
    (a FIFO or a device is refused before it is read)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ReconError(f"{path} is not a regular file (a config.json is a file)")
        data = fh.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise ReconError(f"{path} is over {MAX_CONFIG_BYTES >> 20} MiB: not a model config.json "
                         "(published ones are at most a few hundred KiB)")
    return data.decode("utf-8")


def check_model_config(config: Any, where: str) -> None:
    """Refuse non-finite numbers and counts and sizes past :data:`BOUNDS` anywhere in
    ``config``; ``where`` names the file in the one-line error."""
    stack: list[tuple[str, Any]] = [("", config)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            stack.extend((f"{path}.{key}" if path else str(key), v) for key, v in value.items())
        elif isinstance(value, (list, tuple)):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(value))
        else:
            _check_number(path, value, where)


def _check_number(path: str, value: Any, where: str) -> None:
    field = path.rpartition(".")[2]
    if isinstance(value, _NonFinite) or (isinstance(value, float) and not math.isfinite(value)):
        text = value.text if isinstance(value, _NonFinite) else repr(value)
        raise ReconError(f"{path} is {text}: a model config holds finite numbers only (JSON has "
                         "no NaN or Infinity)", where=where)
    bound = BOUNDS.get(field)
    if bound is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if abs(value) > bound:
        raise ReconError(f"{path} is {_shown(value)}, over {bound:,} (far above every published "
                         "model): recon refuses it before anything is built or run", where=where)


def _shown(value: int | float) -> str:
    text = str(value) if isinstance(value, int) else f"{value:g}"
    return text if len(text) <= 24 else f"a {len(str(int(abs(value))))}-digit number"
