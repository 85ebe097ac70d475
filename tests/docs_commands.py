"""The commands README.md and docs/guide.md show, read out of their Markdown (tests/test_docs.py).

:func:`extract` yields one :class:`DocCommand` per shell command in a code block:

* ```` ```bash ```` / ```` ```sh ```` blocks (the README, some of the guide): every line that
  is not a comment is a command. Comment lines right under a command (no blank line between)
  are taken as its documented output (the README writes ``#  ran vllm/...`` that way).
* ```` ```console ```` blocks, and bare ```` ``` ```` blocks whose lines start with ``$ ``
  (the guide): the ``$ `` lines are commands, the lines after one, up to the next ``$ `` or the
  end of the block, are its documented output.

A line ending in ``\\`` continues on the next one: the backslash and the newline are removed,
inside double quotes too, as the shell does. A trailing ``# comment`` is dropped (only a ``#``
that starts a word outside quotes, as the shell reads it; ``shlex`` with ``comments=True``
splits the words). ``a && b``, ``a; b``, ``a || b`` and ``a | b`` are separate commands of one
line; ``recon has ...; echo "exit $?"`` records the status the output shows on its ``exit N``
line. Leading ``NAME=value`` words are the command's environment.

Optional parts written ``[--json]``, ``[--kind envs]`` or ``[--json | --markdown]`` (a ``[``
that starts a word outside quotes, up to the ``]`` that ends one) are expanded: the plain
form without any of them, then one form per combination of the parts (each alternative of a
``|`` group on its own). Every form is a DocCommand with ``variant`` naming what it added
(``""`` for the plain form).
"""

from __future__ import annotations

import itertools
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

_FENCE = re.compile(r"^(\s*)```+\s*([\w+-]*)")
_ENV_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_EXIT_LINE = re.compile(r"^exit (\d+)\s*$")
_SHELL_BLOCKS = {"bash", "sh", "shell", "zsh"}
_CONSOLE_BLOCKS = {"console", "shell-session", ""}


@dataclass(frozen=True)
class DocCommand:
    """One documented command line (one form of it, when it has optional parts)."""

    file: str  #: the document's name, e.g. ``guide.md``
    line: int  #: 1-based line of the command's first line in that document
    text: str  #: this command as it would be typed (continuations joined, no comment, no prompt)
    words: tuple[str, ...]  #: shlex words, environment assignments removed
    env: tuple[tuple[str, str], ...] = ()  #: leading ``NAME=value`` assignments
    variant: str = ""  #: the optional parts this form adds ("" for the plain form)
    line_text: str = ""  #: the whole line (all its ``;``/``&&`` commands), comment removed
    output: tuple[str, ...] = ()  #: the documented output lines under it
    shown_exit: int | None = None  #: the status an ``echo "exit $?"`` after it printed
    index: int = 0  #: which command of its line (0 for the first)
    extra: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def program(self) -> str:
        return self.words[0] if self.words else ""

    @property
    def args(self) -> tuple[str, ...]:
        return self.words[1:]

    @property
    def shows_error(self) -> bool:
        """The documented output has recon's one-line error."""
        return any(ln.lstrip().startswith("recon: error:") for ln in self.output)

    @property
    def id(self) -> str:
        where = f"{self.file}:{self.line}" + (f"#{self.index + 1}" if self.index else "")
        return where + (f"[{self.variant}]" if self.variant else "")


# --- one line of shell, read as the shell reads it (enough of it for documentation) ----------


@dataclass
class _Group:
    """``[a | b]``: an optional part, with its alternatives."""

    alternatives: list[str]


def _split_line(text: str) -> list[list[str | _Group]]:
    """``text`` -> its commands (split at ``;``, ``&&``, ``||``, ``|``), each a list of literal
    text pieces and optional groups; a comment ends the scan."""
    commands: list[list[str | _Group]] = [[]]
    buf: list[str] = []
    group: list[str] | None = None  # alternatives of the open [ ... ] group
    quote = ""
    i, n = 0, len(text)

    def word_start(k: int) -> bool:
        return k == 0 or text[k - 1].isspace()

    def flush() -> None:
        if buf:
            commands[-1].append("".join(buf))
            buf.clear()

    while i < n:
        c = text[i]
        if quote == "'":
            buf.append(c)
            quote = "" if c == "'" else quote
        elif quote == '"':
            buf.append(c)
            if c == "\\" and i + 1 < n:
                buf.append(text[i + 1])
                i += 1
            elif c == '"':
                quote = ""
        elif c == "\\" and i + 1 < n:
            buf.append(text[i : i + 2])
            i += 1
        elif c in "'\"":
            quote = c
            buf.append(c)
        elif c == "#" and word_start(i):
            break
        elif c == "[" and group is None and word_start(i):
            flush()
            group = []
        elif c == "]" and group is not None and (i + 1 == n or text[i + 1].isspace()):
            group.append("".join(buf).strip())
            buf.clear()
            commands[-1].append(_Group([a for a in group if a]))
            group = None
        elif c == "|" and group is not None:
            group.append("".join(buf).strip())
            buf.clear()
        elif c in ";|&" and group is None:
            two = text[i : i + 2]
            if c == "&" and two != "&&":  # a lone & (background) is not used in the docs
                buf.append(c)
            else:
                flush()
                commands.append([])
                i += 1 if two in ("&&", "||") else 0
        else:
            buf.append(c)
        i += 1
    if group is not None:  # an unclosed [: literal text after all
        buf[:0] = ["[", " | ".join(group)]
    flush()
    return [cmd for cmd in commands if any(p.strip() if isinstance(p, str) else True for p in cmd)]


def _forms(pieces: list[str | _Group]) -> Iterator[tuple[str, str]]:
    """(variant, text) of each form: the plain one first, then every combination of parts."""
    groups = [p for p in pieces if isinstance(p, _Group)]
    choices = [[None, *g.alternatives] for g in groups]
    for pick in itertools.product(*choices):
        out, added, k = [], [], 0
        for p in pieces:
            if isinstance(p, _Group):
                if pick[k] is not None:
                    out.append(f" {pick[k]} ")
                    added.append(pick[k])
                k += 1
            else:
                out.append(p)
        yield " ".join(added), _squeeze("".join(out))


def _squeeze(text: str) -> str:
    """Runs of blanks outside quotes made one space (inside quotes they are the value)."""
    out: list[str] = []
    quote, i = "", 0
    while i < len(text):
        c = text[i]
        if quote:
            out.append(c)
            if c == "\\" and quote == '"' and i + 1 < len(text):
                out.append(text[i + 1])
                i += 1
            elif c == quote:
                quote = ""
        elif c == "\\" and i + 1 < len(text):
            out.append(text[i : i + 2])
            i += 1
        elif c.isspace():
            if out and out[-1] != " ":
                out.append(" ")
        else:
            quote = c if c in "'\"" else ""
            out.append(c)
        i += 1
    return "".join(out).strip()


def split_commands(text: str) -> list[list[tuple[str, str]]]:
    """Each command of one shell line, as its forms: ``[[(variant, text), ...], ...]``."""
    return [list(_forms(pieces)) for pieces in _split_line(text)]


def _strip_comment(text: str) -> str:
    """``text`` up to a comment that starts a word outside quotes."""
    quote, i = "", 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\" and quote == '"':
                i += 1
            elif c == quote:
                quote = ""
        elif c == "\\":
            i += 1
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or text[i - 1].isspace()):
            return text[:i].rstrip()
        i += 1
    return text.rstrip()


# --- Markdown --------------------------------------------------------------------------------


def _commands_of(file: str, line: int, text: str, output: list[str]) -> Iterator[DocCommand]:
    line_text = _strip_comment(text)
    commands = split_commands(text)
    shown_exit = None
    if any(forms[0][1].startswith("echo") and "$?" in forms[0][1] for forms in commands[1:]):
        for out in output:
            m = _EXIT_LINE.match(out.strip())
            if m:
                shown_exit = int(m.group(1))
    for index, forms in enumerate(commands):
        if forms[0][1].startswith("echo") and "$?" in forms[0][1]:
            continue
        for variant, form in forms:
            words = shlex.split(form, comments=True)
            env = []
            while words and _ENV_WORD.match(words[0]):
                name, _, value = words.pop(0).partition("=")
                env.append((name, value))
            if not words:
                continue
            yield DocCommand(file=file, line=line, text=form, words=tuple(words), env=tuple(env),
                             variant=variant, line_text=line_text, output=tuple(output),
                             shown_exit=shown_exit if index == 0 else None, index=index)


def _join(lines: list[str], i: int) -> tuple[str, int]:
    """The logical line starting at ``lines[i]`` (backslash-newline removed) and the next index."""
    text = lines[i]
    i += 1
    while text.endswith("\\") and not text.endswith("\\\\") and i < len(lines):
        text = text[:-1] + lines[i]
        i += 1
    return text, i


def extract(markdown: str, file: str) -> Iterator[DocCommand]:
    """Every command in ``markdown``'s shell and console code blocks, in order."""
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        lang = m.group(2).lower()
        start = i + 1
        end = start
        while end < len(lines) and not lines[end].lstrip().startswith("```"):
            end += 1
        body = lines[start:end]
        if lang in _SHELL_BLOCKS:
            yield from _shell_block(body, start, file)
        elif lang in _CONSOLE_BLOCKS:
            yield from _console_block(body, start, file)
        i = end + 1


def _shell_block(body: list[str], offset: int, file: str) -> Iterator[DocCommand]:
    i = 0
    while i < len(body):
        stripped = body[i].strip()
        if not stripped or stripped.startswith("#"):
            i += 1
            continue
        first = i
        text, i = _join(body, i)
        output = []
        while i < len(body) and body[i].lstrip().startswith("#"):
            output.append(body[i].lstrip()[1:].strip())
            i += 1
        yield from _commands_of(file, offset + first + 1, text.strip(), output)


def _console_block(body: list[str], offset: int, file: str) -> Iterator[DocCommand]:
    i = 0
    while i < len(body):
        if not body[i].startswith("$ "):
            i += 1
            continue
        first = i
        text, i = _join(body, i)
        output = []
        while i < len(body) and not body[i].startswith("$ "):
            output.append(body[i])
            i += 1
        yield from _commands_of(file, offset + first + 1, text[2:].strip(), output)


def extract_file(path: Path) -> list[DocCommand]:
    return list(extract(path.read_text(encoding="utf-8"), path.name))
