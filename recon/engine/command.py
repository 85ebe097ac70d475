"""A server command line as the user typed it: the environment before it, the program, its words.

Both engines are started in the same few ways: ``NAME=VALUE`` words the shell
passes as environment, then the engine's own program (``vllm serve``,
``sglang serve``) or ``python -m MODULE`` (any ``python``), then the arguments.
Which program or module a command names decides which of the release's parsers
reads it; that choice is each engine module's (:func:`recon.engine.config.vllm_command`,
:func:`recon.engine.sglang.launcher_argv`), the reading of the words is here.
"""

from __future__ import annotations

import os
import re
import shlex

_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def words(flags: str | list[str]) -> list[str]:
    """The words of a command line (a string as typed, with shell line continuations, or argv)."""
    return list(flags) if isinstance(flags, list) else shlex.split(flags.replace("\\\n", " "))


def typed_environment(tokens: list[str]) -> tuple[dict[str, str], list[str]]:
    """The ``NAME=VALUE`` words before the program (the engine's environment), and the rest."""
    env: dict[str, str] = {}
    rest = list(tokens)
    while rest and _ASSIGNMENT.match(rest[0]) and not rest[0].startswith("-"):
        name, _, value = rest.pop(0).partition("=")
        env[name] = value
    return env, rest


def python_module(tokens: list[str]) -> tuple[str | None, list[str]]:
    """``python -m MODULE ARGS`` (any ``python``, ``python3.12``, a path to one) as
    ``(MODULE, ARGS)``; anything else as ``(None, tokens)``."""
    rest = list(tokens)
    if rest and os.path.basename(rest[0]).startswith("python"):
        rest = rest[1:]
        if rest[:1] == ["-m"] and len(rest) > 1:
            return rest[1], rest[2:]
        return None, tokens
    if rest[:1] == ["-m"] and len(rest) > 1:
        return rest[1], rest[2:]
    return None, tokens
