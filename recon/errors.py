"""One exception type that the CLI turns into one readable line and a non-zero exit.

Library code raises :class:`ReconError` for every problem a user can cause or fix
(bad archive, missing image, wrong qualname, missing config key). Anything else
is a bug in recon and keeps its traceback.
"""

from __future__ import annotations


class ReconError(Exception):
    """A user-facing failure: ``str(err)`` is the whole message, one line."""

    exit_code = 2

    def __init__(self, message: str, *, where: str | None = None) -> None:
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)


class UnsafeArchiveError(ReconError):
    """A layer or archive tried something hostile (escape, device file, bomb)."""

    exit_code = 3


class PackageNotFound(ReconError):
    """The package asked for (or vllm/sglang by default) is not in the image.

    ``candidates`` are the top-level packages that are there, so a caller on a
    terminal can offer them instead of only printing them.
    """

    def __init__(self, message: str, candidates: list[str]) -> None:
        super().__init__(message)
        self.candidates = candidates


#: how a user gets the extra a recon feature needs (the distribution's name, not the import's)
DISTRIBUTION = "inference-recon"


def require_package(name: str, needed_for: str) -> None:
    """Refuse, in one line that says how to install it, when ``name`` cannot be imported here.

    recon keeps heavy packages optional (torch is gigabytes); the features that
    need one call this first, so a user sees the install line instead of a
    ``ModuleNotFoundError`` from inside a sandboxed child.
    """
    import importlib.util

    try:
        found = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        found = False
    if found:
        return
    hint = f"pip install '{DISTRIBUTION}[{name}]'" if name == "torch" else f"pip install {name}"
    extra = " (a CPU build is enough: see the README's Install section)" if name == "torch" else ""
    raise ReconError(f"{needed_for} needs {name}, which this Python cannot import: {hint}{extra}")
