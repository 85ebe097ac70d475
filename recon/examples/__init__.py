"""Model ``config.json`` files shipped with recon, for ``recon demo`` and the docs' examples.

They are package data, so an installed recon (a wheel, ``pipx``, ``uv tool``)
has them too. On the command line, ``--config example:NAME`` names one of them
from any folder; a real path always wins, and an unknown name is an error that
lists the names there are. ``README.md`` beside this file gives each file's
public source.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ReconError

#: the folder holding the shipped configs
EXAMPLES_DIR = Path(__file__).resolve().parent

#: how a command line names a shipped config
PREFIX = "example:"


def names() -> list[str]:
    """The shipped configs' names (file names without ``.json``), sorted."""
    return sorted(p.stem for p in EXAMPLES_DIR.glob("*.json"))


def path(name: str) -> Path:
    """The file of the shipped config ``name`` (with or without ``.json``)."""
    stem = name[:-5] if name.endswith(".json") else name
    if stem in names():
        return EXAMPLES_DIR / f"{stem}.json"
    raise ReconError(f"no example config named {name!r}; there are: {', '.join(names())}")


def resolve(config: str | Path) -> Path:
    """``example:NAME`` -> the shipped file; anything else is a path, returned as given."""
    text = str(config)
    if text.startswith(PREFIX) and not Path(text).exists():
        return path(text[len(PREFIX):])
    return Path(config)
