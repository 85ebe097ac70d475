"""Lines recon writes for a person to paste: shell commands, compose and pod-spec YAML, Markdown.

The hot-fix README and a probe bundle's README (and the lines ``recon hotfix``
and ``recon probe new`` print) are built from values recon did not choose: an
image's package folder and Python (from its ``PYTHONPATH``/``PATH``), file,
module and snapshot names, the folder given to ``-o``. Every such value goes
through this module, and nowhere else is one put into a line:

- :func:`quote` makes it one shell word (:func:`shlex.quote`: single quotes, so
  ``$(...)``, backticks, ``;``, ``!`` and globs are plain characters);
  :func:`here` and :func:`host` do the same for a path that starts at ``$PWD``
  or is a host path, keeping the ``"$PWD/DIR/FILE"`` form when it needs no quoting;
- :func:`yaml_str` makes it a YAML double-quoted string (JSON's string syntax is
  YAML's);
- :func:`code_span` and :func:`code_block` put text in Markdown code whose
  fence is longer than any run of backticks in it.

A value holding a control character (newline, carriage return, ESC, C1), a Unicode
line or paragraph separator, an invisible format character (bidi override,
zero-width space) or an undecodable byte is refused in one line
(:func:`check`): no quoting makes a pasted newline safe, and an invisible
character makes the line a reader checks differ from the one the shell runs.
"""

from __future__ import annotations

import json
import re
import shlex
import unicodedata

from .errors import ReconError

#: the Unicode categories refused, and how the refusal names them
_REFUSED = {"Cc": "a control character", "Cf": "an invisible format character",
            "Cs": "an undecodable byte", "Zl": "a line separator", "Zp": "a paragraph separator"}
_SAFE = re.compile(r"[\w@%+=:,./-]+", re.ASCII)  # what shlex.quote leaves as it is
_TICKS = re.compile(r"`+")


def check(value: str, what: str) -> str:
    """``value``, or a one-line refusal when it cannot go into a line a person pastes."""
    bad = next((c for c in value if unicodedata.category(c) in _REFUSED), None)
    if bad is not None:
        kind = _REFUSED[unicodedata.category(bad)]
        raise ReconError(f"{what} {value[:200]!r} holds {kind} (U+{ord(bad):04X}): a line with "
                         "it cannot be pasted into a terminal or a YAML file safely, so recon "
                         "writes none (rename it)")
    return value


def quote(value: str, what: str = "a value of a pasted line") -> str:
    """One shell word that is exactly ``value``."""
    return shlex.quote(check(value, what))


def here(rel: str, what: str = "a path of a pasted line", tail: str = "") -> str:
    """``$PWD/rel`` then ``tail`` (the rest of a ``-v`` value, ``:PATH:ro``) as one shell word."""
    return _word("$PWD/", rel, tail, what)


def host(path: str, what: str = "a host path of a pasted line", tail: str = "") -> str:
    """A host path then ``tail`` as one shell word."""
    return _word("", path, tail, what)


def _word(lead: str, path: str, tail: str, what: str) -> str:
    """``"LEADpath"tail`` when neither needs quotes (the form the docs show), else
    ``"LEAD"'path tail'``: ``lead`` is recon's own text, expanded by the shell."""
    check(path, what)
    check(tail, "a path of a pasted line")
    if _SAFE.fullmatch(path) and (not tail or _SAFE.fullmatch(tail)):
        return f'"{lead}{path}"{tail}'
    return (f'"{lead}"' if lead else "") + shlex.quote(path + tail)


def yaml_str(value: str, what: str = "a value of a pasted YAML line") -> str:
    """A YAML double-quoted scalar that is exactly ``value`` (a JSON string is one)."""
    return json.dumps(check(value, what), ensure_ascii=False)


def _fence(text: str, least: int) -> str:
    longest = max((len(m) for m in _TICKS.findall(text)), default=0)
    return "`" * max(least, longest + 1)


def code_span(text: str) -> str:
    """Inline Markdown code showing ``text`` verbatim (CommonMark: a longer fence, padded)."""
    fence = _fence(text, 1)
    pad = " " if text.startswith("`") or text.endswith("`") or fence != "`" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def code_block(lines: list[str], lang: str = "") -> str:
    """A fenced Markdown block holding ``lines`` verbatim."""
    fence = _fence("\n".join(lines), 3)
    return "\n".join([fence + lang, *lines, fence])
