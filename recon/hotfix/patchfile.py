"""``--patch FILE.diff``: an upstream change (``git diff``, ``diff -u``) applied to the image's file.

The patch must be about one Python file of the package. It is applied with
no fuzz: every hunk's context and removed lines must be the image's bytes,
at the line the hunk names or at exactly one other place (an offset, as
``patch`` allows). A hunk that does not apply means the image's file is not
the one the change was made against, and nothing is written.

A path in the patch is a repository path (``vllm/v1/...``, ``python/sglang/srt/...``,
with or without git's ``a/``/``b/``); the package file it means is the longest
tail of it that is a file of the snapshot.

The patch file is read by :func:`read_patch`: a regular file of at most
:data:`MAX_PATCH` bytes (8 MiB: a patch of one source file is kilobytes; vLLM's
largest Python file is under 1 MiB). It is opened without blocking and checked
on the open descriptor, so a FIFO, a device (``/dev/zero``), a socket or a
folder is refused in one line instead of hanging recon or filling its memory.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ReconError
from ..snapshots.model import Snapshot
from .model import HotfixRefused
from .splice import lines_of

_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
#: the largest --patch file read (a unified diff of one Python file)
MAX_PATCH = 8 << 20
_GIT_ONLY = (b"new file mode", b"deleted file mode", b"rename from", b"rename to",
             b"copy from", b"copy to", b"GIT binary patch", b"Binary files ")


@dataclass
class Hunk:
    old_start: int
    new_start: int
    lines: list[tuple[bytes, bytes]] = field(default_factory=list)  # (b" " | b"-" | b"+", line)

    @property
    def old(self) -> list[bytes]:
        return [text for tag, text in self.lines if tag in (b" ", b"-")]

    @property
    def new(self) -> list[bytes]:
        return [text for tag, text in self.lines if tag in (b" ", b"+")]


@dataclass
class FilePatch:
    old_path: str | None
    new_path: str | None
    hunks: list[Hunk] = field(default_factory=list)
    special: list[str] = field(default_factory=list)  # git headers a text patch cannot apply

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or "?"


def read_patch(path: Path) -> bytes:
    """The bytes of the ``--patch`` file: a regular file of at most :data:`MAX_PATCH` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as err:
        raise ReconError(f"cannot open the --patch file: {err.strerror}", where=str(path)) from err
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ReconError("the --patch file is not a regular file (a FIFO, device, socket or "
                             "folder): give a diff saved to a file", where=str(path))
        if st.st_size > MAX_PATCH:
            raise ReconError(f"the --patch file is {st.st_size} bytes, over the {MAX_PATCH >> 20} "
                             "MiB a patch of one source file can be", where=str(path))
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(MAX_PATCH + 1)
    except OSError as err:
        raise ReconError(f"cannot read the --patch file: {err.strerror}", where=str(path)) from err
    finally:
        os.close(fd)
    if len(data) > MAX_PATCH:  # it grew while it was read
        raise ReconError(f"the --patch file is over the {MAX_PATCH >> 20} MiB a patch of one "
                         "source file can be", where=str(path))
    return data


def parse_patch(data: bytes) -> list[FilePatch]:
    """The files of a unified diff, with their hunks (line ends kept, ``\\ No newline`` honoured).

    A hunk takes exactly the number of lines its ``@@`` header counts, so a
    removed line that reads ``--- x`` is a line, not the next file's header.
    """
    files: list[FilePatch] = []
    cur: FilePatch | None = None
    hunk: Hunk | None = None
    left = [0, 0]  # old and new lines the current hunk still holds
    for raw in lines_of(data):
        if hunk is not None and (left[0] or left[1]) and raw in (b"\n", b"\r\n"):
            raw = b" " + raw  # a blank context line whose leading space a mailer dropped
        if hunk is not None and (left[0] or left[1]) and raw[:1] in (b" ", b"-", b"+"):
            tag = raw[:1]
            hunk.lines.append((tag, raw[1:]))
            left[0] -= tag != b"+"
            left[1] -= tag != b"-"
        elif raw.startswith(b"\\") and hunk is not None and hunk.lines:
            tag, text = hunk.lines[-1]  # "\ No newline at end of file" belongs to the line above
            hunk.lines[-1] = (tag, text.rstrip(b"\r\n"))
        elif raw.startswith(b"diff --git "):
            cur, hunk = FilePatch(None, None), None
            files.append(cur)
        elif raw.startswith(_GIT_ONLY) and cur is not None:
            cur.special.append(raw.decode("utf-8", "replace").strip())
        elif raw.startswith(b"--- "):
            if cur is None or cur.hunks or cur.old_path is not None:
                cur = FilePatch(None, None)
                files.append(cur)
            cur.old_path, hunk = _patch_path(raw[4:]), None
        elif raw.startswith(b"+++ ") and cur is not None:
            cur.new_path = _patch_path(raw[4:])
        elif (m := _HUNK.match(raw)) and cur is not None:
            hunk = Hunk(int(m.group(1)), int(m.group(3)))
            left = [int(m.group(2) or 1), int(m.group(4) or 1)]
            cur.hunks.append(hunk)
    if not files or not any(f.hunks or f.special for f in files):
        raise ReconError("the --patch file holds no unified diff (no '--- / +++ / @@' hunks)")
    return files


def _patch_path(raw: bytes) -> str | None:
    text = raw.split(b"\t", 1)[0].strip().decode("utf-8", "surrogateescape")
    return None if text in ("/dev/null", "") else text


def package_path(snap: Snapshot, path: str) -> str | None:
    """The snapshot file a repository path names (its longest tail that is a file there)."""
    files = snap.manifest.files
    skipped = snap.manifest.skipped
    parts = path.split("/")
    for cut in range(len(parts)):
        tail = "/".join(parts[cut:])
        if tail in files or tail in skipped:
            return tail
    return None


def check_files(snap: Snapshot, patches: list[FilePatch]) -> tuple[FilePatch, str]:
    """The one Python file the patch changes, or the refusal that says why it is more."""
    paths = [p.path for p in patches]
    not_python = [p for p in paths if not p.endswith(".py")]
    if not_python:
        raise HotfixRefused("compiled", "the patch changes files that are not Python source ("
                            + ", ".join(not_python) + "): a one-file Python hotfix cannot carry "
                            "compiled code, kernels or build files")
    if len(patches) > 1:
        raise HotfixRefused("scope", f"the patch changes {len(patches)} files ("
                            + ", ".join(paths) + "): a hotfix is one file")
    patch = patches[0]
    if patch.special or patch.old_path is None or patch.new_path is None:
        what = "; ".join(patch.special) or "a new or deleted file"
        raise HotfixRefused("scope", f"the patch is not an edit of one existing file ({what})")
    rel = package_path(snap, patch.old_path)
    if rel is None:
        raise ReconError(f"{patch.old_path} is not a file of {snap.label} (no tail of its path is)")
    if rel in snap.manifest.skipped:
        raise HotfixRefused("compiled", f"{rel} is not kept in {snap.label} (compiled or too big)")
    return patch, rel


def apply_patch(data: bytes, patch: FilePatch, label: str) -> bytes:
    """``data`` with every hunk applied exactly (context must match; an offset is allowed)."""
    lines = lines_of(data)
    out: list[bytes] = []
    pos = 0  # next line of ``lines`` not yet copied
    for n, hunk in enumerate(patch.hunks, start=1):
        at = _locate(lines, hunk, pos)
        if at is None:
            raise ReconError(f"hunk {n} of the patch (@@ -{hunk.old_start}) does not apply to "
                             f"{label}: its context or removed lines are not the image's (the "
                             "image's file is not the one the change was made against)")
        out.extend(lines[pos:at])
        out.extend(hunk.new)
        pos = at + len(hunk.old)
    out.extend(lines[pos:])
    return b"".join(out)


def _locate(lines: list[bytes], hunk: Hunk, start: int) -> int | None:
    """Where the hunk's old lines are: at its stated line, else the one other place they are."""
    old = hunk.old
    stated = max(hunk.old_start - 1, 0) if old else hunk.old_start
    if stated >= start and lines[stated:stated + len(old)] == old:
        return stated
    hits = [i for i in range(start, len(lines) - len(old) + 1) if lines[i:i + len(old)] == old]
    return hits[0] if len(hits) == 1 else None
