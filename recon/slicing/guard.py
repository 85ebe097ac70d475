"""In-process guard of the child: an audit hook that refuses what slice code must not do.

Standard library only; runs inside the child. It is one layer of several (the
runner also uses a separate process, a new session, resource limits, an
unprivileged user when started as root, a trimmed environment and a timeout),
and the one that makes refusals *readable*: each refusal raises
``PermissionError`` at the offending line and is recorded, so the run reports
"write outside the scratch folder refused at vllm/x.py:12" instead of a
mystery. Audit hooks cannot be removed once added, but code running in the
same interpreter can still reach the guard's tables, its descriptors and
native code: the guard is a second layer that explains, the OS sandbox
(``sandbox.py``) is the one that enforces.

Each refusal is also written at once, as one JSON line, on ``events_fd``, a
pipe the parent reads: what was refused before the code tampered with the
guard cannot be taken back by rewriting the final report (the parent takes
the union of both).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable
from typing import Any

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

#: events refused outright once sealed (processes, signals, network, native code)
_REFUSED = {
    "subprocess.Popen": "starting a process",
    "os.system": "starting a process",
    "os.exec": "replacing the process",
    "os.posix_spawn": "starting a process",
    "os.spawn": "starting a process",
    "os.fork": "forking",
    "os.forkpty": "forking",
    "os.kill": "sending a signal",
    "os.killpg": "sending a signal",
    "signal.pthread_kill": "sending a signal",
    "socket.connect": "network access",
    "socket.bind": "network access",
    "socket.sendto": "network access",
    "socket.sendmsg": "network access",
    "ctypes.dlopen": "loading native code",
    "ctypes.dlsym": "calling native code",
    "ctypes.dlsym/handle": "calling native code",
    "ctypes.call_function": "calling native code",
    "os.chroot": "changing the root",
    "os.setuid": "changing the user",
}
#: events whose first argument is a path that may be changed only inside the scratch folder
_PATH_EVENTS = {"os.remove", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.symlink",
                "os.link", "os.truncate", "os.utime", "shutil.rmtree", "os.chflags",
                "os.setxattr", "os.removexattr", "os.mkfifo", "os.mknod"}
_TWO_PATH_EVENTS = {"os.rename", "shutil.copyfile", "shutil.copytree", "shutil.move"}


class Guard:
    """Records refusals; :meth:`seal` installs the hook."""

    def __init__(self, scratch: str, site: Callable[[], str], events_fd: int | None = None) -> None:
        self.scratch = os.path.realpath(scratch)
        self.site = site
        self.events_fd = events_fd
        self.refusals: list[dict[str, str]] = []
        self.sealed = False

    def _inside(self, path: Any) -> bool:
        if isinstance(path, int) or path is None:
            return True  # an already open descriptor (checked when it was opened)
        try:
            real = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return False
        return real == self.scratch or real.startswith(self.scratch + os.sep) \
            or real == os.devnull

    def _refuse(self, event: str, what: str, detail: str) -> None:
        site = self.site()
        record = {"event": event, "what": what, "detail": detail[:500], "site": site}
        self.refusals.append(record)
        if self.events_fd is not None:
            # os.write raises no audit event (no recursion into the hook); an fd the
            # code under test closed is not fatal: the OS sandbox still holds
            with contextlib.suppress(OSError):
                os.write(self.events_fd, json.dumps(record).encode() + b"\n")
        raise PermissionError(f"recon sandbox refused {what} ({detail}) at {site}")

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                (isinstance(flags, int) and flags & _WRITE_FLAGS)
            if writing and not self._inside(path):
                self._refuse(event, "a write outside the scratch folder", repr(path))
            return
        what = _REFUSED.get(event)
        if what is not None:
            self._refuse(event, what, event)
        if event in _PATH_EVENTS and args and not self._inside(args[0]):
            self._refuse(event, "a change outside the scratch folder", f"{event} {args[0]!r}")
        if event in _TWO_PATH_EVENTS and len(args) >= 2 and not (
                self._inside(args[1]) and (event.startswith("shutil.copy") or
                                           self._inside(args[0]))):
            self._refuse(event, "a change outside the scratch folder",
                         f"{event} {args[0]!r} -> {args[1]!r}")

    def seal(self) -> None:
        """From now on refuse; call after real packages (which load native code) are imported."""
        if not self.sealed:
            sys.addaudithook(self.hook)
            self.sealed = True
