"""Text from outside, made safe to show: control characters become visible escapes.

Names, source lines, log lines and error bodies come from images, packages, servers and
registries; a terminal (or a Markdown/HTML page later ``cat``-ed to one) obeys the escape
sequences they may carry: window titles, hyperlinks, cursor moves that rewrite what was
printed above, bidirectional overrides that reorder what is read. :func:`safe_text` writes
every such character as a readable escape (``\\x1b``, ``\\u009b``, ``\\u202e``), so the text
is shown, never obeyed. The CLI's consoles and streams apply it to everything they print
(``recon.cli.output``); the Markdown and HTML writers apply it to the documents they write.
"""

from __future__ import annotations

import re

#: C0 controls but newline and tab, DEL, the C1 controls (U+0080-U+009F: CSI, OSC, DCS, NEL ...),
#: the bidirectional marks, embeddings, overrides and isolates, and lone surrogates (bytes that
#: were not UTF-8, which a POSIX-locale stream would write back as raw C1 bytes).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
                     "\ud800-\udfff]")
#: the same, and newline and tab too: for text that must stay one line
_UNSAFE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
                          "\ud800-\udfff]")


def escape_char(ch: str) -> str:
    """One character as Python writes it in a string literal: ``\\x1b``, ``\\u009b``, ``\\u202e``."""
    code = ord(ch)
    if ch == "\n":
        return "\\n"
    if ch == "\t":
        return "\\t"
    return f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}"


def _escaped(match: re.Match[str]) -> str:
    return escape_char(match.group())


def safe_text(text: str, *, one_line: bool = False) -> str:
    """``text`` with every control character written as an escape (newlines and tabs kept,
    unless ``one_line``). Text without one comes back unchanged (the same object)."""
    pattern = _UNSAFE_LINE if one_line else _UNSAFE
    if pattern.search(text) is None:
        return text
    return pattern.sub(_escaped, text)


def unsafe_spans(text: str) -> list[tuple[int, int]]:
    """Where :func:`safe_text` changes ``text``: (end of each unsafe character, characters
    added so far), for moving style offsets onto the escaped text."""
    spans, added = [], 0
    for m in _UNSAFE.finditer(text):
        added += len(escape_char(m.group())) - 1
        spans.append((m.end(), added))
    return spans
