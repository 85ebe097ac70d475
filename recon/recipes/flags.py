"""Turn a user's real serve command line into typed values recipes can read.

Accepts what people paste: ``vllm serve MODEL --max-num-seqs 256
--speculative-config '{"method": "mtp", "num_speculative_tokens": 3}'`` or
``python -m sglang.launch_server --model-path M --tp 4``. Known flags are
typed by the table below (one place, so engine renames are one-line edits);
unknown flags are kept and reported as ignored; a malformed value (bad JSON,
a word where a number belongs) is a :class:`ReconError` naming the flag.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import re
import shlex
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import ReconError

INT, FLOAT, BOOL, JSON, STR, INTS = "int", "float", "bool", "json", "str", "ints"

#: flag name (underscored, no dashes) -> (type, engine-neutral key it feeds)
FLAGS: dict[str, tuple[str, str]] = {
    # vLLM
    "max_num_seqs": (INT, "max_num_seqs"),
    "max_model_len": (INT, "max_model_len"),
    "max_num_batched_tokens": (INT, "max_num_batched_tokens"),
    "block_size": (INT, "block_size"),
    "tensor_parallel_size": (INT, "tensor_parallel_size"),
    "tp": (INT, "tensor_parallel_size"),
    "pipeline_parallel_size": (INT, "pipeline_parallel_size"),
    "dtype": (STR, "dtype"),
    "kv_cache_dtype": (STR, "kv_cache_dtype"),
    "mamba_ssm_cache_dtype": (STR, "mamba_ssm_cache_dtype"),
    "mamba_cache_dtype": (STR, "mamba_cache_dtype"),
    "mamba_cache_mode": (STR, "mamba_cache_mode"),
    "mamba_block_size": (INT, "mamba_block_size"),
    "enable_prefix_caching": (BOOL, "enable_prefix_caching"),
    "enforce_eager": (BOOL, "enforce_eager"),
    "speculative_config": (JSON, "speculative_config"),
    "compilation_config": (JSON, "compilation_config"),
    "cuda_graph_sizes": (INTS, "cuda_graph_sizes"),
    "num_speculative_tokens": (INT, "num_speculative_tokens"),
    "gpu_memory_utilization": (FLOAT, "gpu_memory_utilization"),
    "hf_overrides": (JSON, "hf_overrides"),
    "model": (STR, "model"),
    # SGLang
    "model_path": (STR, "model"),
    "tp_size": (INT, "tensor_parallel_size"),
    "page_size": (INT, "page_size"),
    "max_running_requests": (INT, "max_num_seqs"),
    "chunked_prefill_size": (INT, "chunked_prefill_size"),
    "mem_fraction_static": (FLOAT, "mem_fraction_static"),
    "mamba_ssm_dtype": (STR, "mamba_ssm_cache_dtype"),
    "speculative_algorithm": (STR, "speculative_algorithm"),
    "speculative_num_steps": (INT, "speculative_num_steps"),
    "speculative_num_draft_tokens": (INT, "speculative_num_draft_tokens"),
    "speculative_eagle_topk": (INT, "speculative_eagle_topk"),
    "disable_radix_cache": (BOOL, "disable_radix_cache"),
    "context_length": (INT, "max_model_len"),
}
#: things that start a command line and are not flags
_PROGRAMS = {"vllm", "serve", "python", "python3", "-m", "sglang.launch_server",
             "vllm.entrypoints.openai.api_server"}


@dataclass
class ServeFlags:
    """Typed serve flags plus what was ignored; ``get`` reads engine-neutral keys."""

    values: dict[str, Any] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)
    raw: list[str] = field(default_factory=list)
    #: rebuilt from a log's argument line (config objects there are printed whole)
    from_log: bool = False
    #: ``recon logs --memory-plan``: the memory the log printed is predicted, not given
    memory_planned: bool = False

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def __contains__(self, key: str) -> bool:
        return key in self.values

    def to_json(self) -> dict[str, Any]:
        return {"values": self.values, "ignored": self.ignored}


def _convert(flag: str, kind: str, text: str | None) -> Any:
    if kind == BOOL:
        if text is None:
            return True
        low = text.lower()
        if low in ("true", "1", "yes", "on"):
            return True
        if low in ("false", "0", "no", "off"):
            return False
        raise ReconError(f"--{flag.replace('_', '-')}: expected true/false, got {text!r}")
    if text is None:
        raise ReconError(f"--{flag.replace('_', '-')} needs a value")
    try:
        if kind == INT:
            return int(text)
        if kind == FLOAT:
            return float(text)
        if kind == JSON:
            value = json.loads(text)
            if not isinstance(value, dict):
                raise ValueError("not a JSON object")
            return value
    except ValueError as err:
        raise ReconError(f"--{flag.replace('_', '-')}: malformed value {text!r} ({err})") from err
    return text


def parse_flags(command: str | Iterable[str] | None) -> ServeFlags:
    """Parse a serve command line (a string as typed, or argv)."""
    if command is None:
        return ServeFlags()
    try:
        argv = shlex.split(command) if isinstance(command, str) else list(command)
    except ValueError as err:
        raise ReconError(f"--flags: cannot split the command line ({err})") from err
    out = ServeFlags(raw=list(argv))
    i = 0
    positional_seen = False
    while i < len(argv):
        tok = argv[i]
        i += 1
        if tok in _PROGRAMS or tok.endswith("/vllm"):
            continue
        if not tok.startswith("-"):
            if not positional_seen:  # `vllm serve MODEL`
                out.values.setdefault("model", tok)
                positional_seen = True
            else:
                out.ignored.append(tok)
            continue
        name, eq, inline = tok.lstrip("-").partition("=")
        name = name.replace("-", "_")
        negated = False
        if name.startswith("no_") and name[3:] in FLAGS and FLAGS[name[3:]][0] == BOOL:
            name, negated = name[3:], True
        spec = FLAGS.get(name)
        if spec is None:
            # unknown: swallow its value too when the next token is not a flag
            if not eq and i < len(argv) and not argv[i].startswith("-"):
                out.ignored.append(f"{tok} {argv[i]}")
                i += 1
            else:
                out.ignored.append(tok)
            continue
        kind, key = spec
        if kind == BOOL:
            value: Any = _convert(name, kind, inline if eq else None)
            if negated:
                value = not value
        elif kind == INTS:
            items = [inline] if eq else []
            while not eq and i < len(argv) and not argv[i].startswith("-"):
                items.append(argv[i])
                i += 1
            try:
                value = [int(x) for part in items for x in part.replace(",", " ").split()]
            except ValueError as err:
                raise ReconError(f"--{name.replace('_', '-')}: expected integers, got {items}") from err
        else:
            text = inline if eq else (argv[i] if i < len(argv) else None)
            if not eq:
                i += 1
            value = _convert(name, kind, text)
        out.values[key] = value
    return out


#: files where releases declare their serve flags (vLLM's EngineArgs and front end, SGLang's
#: ServerArgs): their dataclass fields and ``"--flag"`` literals are the flags a parser knows
_FLAG_FILES = ("arg_utils.py", "cli_args.py", "server_args.py")
_FIELD = re.compile(r"^ {4}([a-z][a-z0-9_]*)\s*:", re.MULTILINE)
_LITERAL = re.compile(r"[\"'](--[a-z][a-z0-9-]*)[\"']")


def release_flags(snapshot: Any) -> set[str]:
    """The ``--flags`` a release's own parser declares, read from its source (no import)."""
    flags: set[str] = set()
    for rel in snapshot.files:
        if rel.rpartition("/")[2] in _FLAG_FILES:
            try:
                text = snapshot.read_text(rel)
            except (OSError, ReconError, UnicodeDecodeError):
                continue
            flags |= {"--" + f.replace("_", "-") for f in _FIELD.findall(text)}
            flags |= set(_LITERAL.findall(text))
    return flags


def flag_typo_hint(snapshot: Any, message: str) -> str:
    """``; did you mean --max-num-seqs (for --max-num-seqss)?`` for the flags an argparse
    refusal names (``unrecognized arguments: ...``), or "" when none is close to a known one."""
    _, found, rest = message.rpartition("unrecognized arguments:")
    if not found:
        return ""
    known = sorted(release_flags(snapshot))
    said = []
    for word in rest.split():
        typed = word.split("=", 1)[0]
        if not typed.startswith("--"):
            continue
        close = difflib.get_close_matches(typed, known, n=3, cutoff=0.75)
        if close:
            said.append(f"{' or '.join(close)} (for {typed})")
    return f"; did you mean {'; '.join(said)}?" if said else ""


@contextlib.contextmanager
def flag_hints(snapshot: Any) -> Iterator[None]:
    """The release's parser refusing a flag: its own last line, and the close flags it knows."""
    try:
        yield
    except ReconError as err:
        text = str(err)
        hint = flag_typo_hint(snapshot, text)
        if not hint:
            raise
        label, _, said = text.partition(": ")
        last = [ln for ln in said.splitlines() if ln.strip()][-1:] or [said]
        new = type(err)(f"{label}: {last[0].strip()}{hint}")
        new.where = err.where
        raise new from err
