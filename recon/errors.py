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
