"""A server command line as the user typed it: the environment before it, the program, its words.

Both engines are started in the same few ways: ``NAME=VALUE`` words the shell
passes as environment, then the engine's own program (``vllm serve``,
``sglang serve``) or ``python -m MODULE`` (any ``python``), then the arguments;
or a container run (``docker run [OPTIONS] IMAGE [ARGS]``), whose ``-e``
settings are the engine's environment and whose words after the image are the
image's entry point's arguments, or a command of their own.
Which program or module a command names decides which of the release's parsers
reads it; that choice is each engine module's (:func:`recon.engine.config.vllm_command`,
:func:`recon.engine.sglang.launcher_argv`), the reading of the words is here.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field

from recon.errors import ReconError

_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def words(flags: str | list[str]) -> list[str]:
    """The words of a command line (a string as typed, with shell line continuations, or argv).

    A string the shell could not split either (an unclosed quote) is the user's input error.
    """
    if isinstance(flags, list):
        return list(flags)
    try:
        return shlex.split(flags.replace("\\\n", " "))
    except ValueError as err:  # what the shell would refuse too
        raise ReconError(f"--flags: the shell cannot split this command line ({err}): "
                         f"{flags[:120]!r}") from err


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


#: options of ``docker run`` / ``podman run`` that take no value (any other takes one,
#: attached with ``=`` or as the next word)
_RUN_SWITCHES = {"--detach", "--interactive", "--tty", "--rm", "--privileged", "--init",
                 "--read-only", "--no-healthcheck", "--oom-kill-disable", "--publish-all",
                 "--sig-proxy", "--disable-content-trust", "--quiet", "--help"}
_SHORT_SWITCHES = set("ditPq")
_RUNNERS = {"docker", "podman", "nvidia-docker"}


@dataclass
class ContainerRun:
    """A ``docker run`` (``podman run``) command: the image, what it runs, its environment."""

    image: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    #: settings whose values recon cannot see (``-e NAME`` takes the host's, ``--env-file``)
    unseen: list[str] = field(default_factory=list)

    def said(self) -> str:
        text = (f"a container run of {self.image}: its words after the image are the command "
                "(after the image's entry point when they are arguments)"
                + (f", its -e settings the environment ({', '.join(sorted(self.env))})"
                   if self.env else ""))
        if self.unseen:
            text += f"; not seen: {', '.join(self.unseen)} (their values are not in the command)"
        return text


def container_run(tokens: list[str]) -> ContainerRun | None:
    """``docker run [OPTIONS] IMAGE [ARGS]`` (``podman``, ``docker container run``) read, or None."""
    rest = list(tokens)
    if not rest or os.path.basename(rest[0]) not in _RUNNERS:
        return None
    rest = rest[1:]
    if rest[:1] == ["container"]:
        rest = rest[1:]
    if rest[:1] != ["run"]:
        return None
    rest = rest[1:]
    run = ContainerRun("", [])
    entrypoint: list[str] = []
    while rest:
        word = rest.pop(0)
        if word == "--" or not word.startswith("-"):
            if word == "--" and rest:
                word = rest.pop(0)
            run.image = word
            run.args = entrypoint + rest
            return run if word and word != "--" else None
        name, value = _run_option(word, rest)
        if name in ("-e", "--env") and value is not None:
            key, eq, val = value.partition("=")
            if eq:
                run.env[key] = val
            else:
                run.unseen.append(f"-e {key}")
        elif name == "--env-file":
            run.unseen.append(f"--env-file {value}")
        elif name == "--entrypoint" and value:
            entrypoint = [value]
    return None


def _run_option(word: str, rest: list[str]) -> tuple[str, str | None]:
    """One option of ``docker run`` and its value (taken from ``rest`` when it is the next word)."""
    if word.startswith("--"):
        name, eq, value = word.partition("=")
        if eq:
            return name, value
        if name in _RUN_SWITCHES:
            return name, None
        return name, rest.pop(0) if rest else None
    letters = word[1:]
    if letters and set(letters) <= _SHORT_SWITCHES:
        return word, None  # -d, -it, -dit
    if len(letters) == 1:
        return word, rest.pop(0) if rest else None
    return word[:2], letters[1:]  # -p8000:8000, -eNAME=VALUE


def container_said(flags: str | list[str]) -> str:
    """The assumption line of a command typed as a container run ("" for any other)."""
    run = container_run(typed_environment(words(flags))[1])
    return run.said() if run is not None else ""
