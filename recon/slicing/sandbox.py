"""Start the child: its own session, resource limits, trimmed environment, timeout.

The code a run executes comes from an image, so it is treated as untrusted.
Layers, from the outside in:

* a separate process in a new session, killed as a group at the timeout (after
  a ``SIGUSR1`` that makes ``faulthandler`` print where it was stuck);
* ``RLIMIT_AS`` (memory), ``RLIMIT_CPU``, ``RLIMIT_FSIZE`` (no huge files),
  ``RLIMIT_NOFILE``, ``RLIMIT_NPROC``, no core dumps, ``PR_SET_PDEATHSIG``
  (dies with the caller) and ``PR_SET_NO_NEW_PRIVS``;
* when recon runs as root, the child runs as ``nobody`` and can write only to
  its own scratch ``work`` folder (the runtime folder is read-only to it);
* a trimmed environment (``HOME``/``TMPDIR`` in scratch, no proxies or tokens,
  one CPU thread, no visible GPUs) and the scratch folder as working directory;
* inside the child, the audit-hook guard (``guard.py``).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

NOBODY = 65534
_RESULT_CAP = 64 << 20
_OUTPUT_CAP = 64 << 20
_TAIL = 20000


@dataclass
class Limits:
    """Resource limits of one run."""

    timeout: float = 60.0
    memory_mb: int = 4096
    file_mb: int = 64
    drop_privileges: bool = True


@dataclass
class Outcome:
    """What came back from the child, whatever happened to it."""

    returncode: int | None
    result: bytes
    stdout: str
    stderr: str
    timed_out: bool
    wall_seconds: float
    stuck_at: str  # file:line of the slice where a timed-out child was (when known)
    dropped_privileges: bool = False


def base_env(work: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The child's whole environment."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(work),
        "TMPDIR": str(work),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONIOENCODING": "utf-8",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "CUDA_VISIBLE_DEVICES": "",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "NO_PROXY": "*",
    }
    env.update(extra or {})
    return env


def _prctl(option: int, arg: int) -> None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(option, arg, 0, 0, 0)
    except OSError:
        pass


def _preexec(limits: Limits) -> None:
    """Runs in the child between fork and exec: limits and parent-death signal."""
    mem = limits.memory_mb << 20
    cpu = int(limits.timeout) + 10
    fsize = limits.file_mb << 20
    for what, value in ((resource.RLIMIT_AS, mem), (resource.RLIMIT_CPU, cpu),
                        (resource.RLIMIT_FSIZE, fsize), (resource.RLIMIT_CORE, 0),
                        (resource.RLIMIT_NOFILE, 256), (resource.RLIMIT_NPROC, 512)):
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(what, (value, value))
    _prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    _prctl(38, 1)  # PR_SET_NO_NEW_PRIVS


def _world_usable(path: str | Path) -> bool:
    """True when user ``nobody`` can reach and read ``path`` (every parent searchable)."""
    p = Path(os.path.realpath(path))
    try:
        if not p.stat().st_mode & 0o004:
            return False
        for parent in p.parents:
            if not parent.stat().st_mode & 0o001:
                return False
    except OSError:
        return False
    return True


def can_drop_privileges() -> bool:
    """Root, and the interpreter and its libraries usable by ``nobody``."""
    import sysconfig

    if os.geteuid() != 0:
        return False
    paths = [sys.executable, sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"]]
    return all(_world_usable(p) for p in paths)


def _read_capped(fd: int, cap: int, sink: list[bytes]) -> None:
    total = 0
    with os.fdopen(fd, "rb", buffering=0) as fh:
        while True:
            block = fh.read(1 << 16)
            if not block:
                return
            if total < cap:
                sink.append(block[: cap - total])
            total += len(block)


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - _TAIL))
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def stuck_site(stderr: str, slice_files: set[str]) -> str:
    """The innermost slice frame of a faulthandler dump (``File "x", line N``)."""
    last_dump = stderr.rsplit("Stack (most recent call first)", 1)[-1]
    for fname, line in re.findall(r'File "([^"]+)", line (\d+)', last_dump):
        if fname in slice_files:
            return f"{fname}:{line}"
    return ""


def launch(argv: list[str], request: bytes, *, root: Path, work: Path, limits: Limits,
           env: dict[str, str], slice_files: set[str]) -> Outcome:
    """Run ``argv`` with ``request`` on stdin; the child writes its result on fd ``result_fd``.

    ``request`` must contain the placeholder ``"result_fd": -1`` which is
    replaced with the real descriptor number.
    """
    rfd, wfd = os.pipe()
    request = request.replace(b'"result_fd": -1', f'"result_fd": {wfd}'.encode(), 1)
    out_path, err_path = root / "stdout.txt", root / "stderr.txt"
    drop = limits.drop_privileges and can_drop_privileges()
    kwargs: dict[str, object] = {}
    if drop:
        os.chown(work, NOBODY, NOBODY)
        kwargs.update(user=NOBODY, group=NOBODY, extra_groups=[])
    start = time.monotonic()
    with open(out_path, "wb") as out_fh, open(err_path, "wb") as err_fh:
        if drop:
            os.fchown(out_fh.fileno(), NOBODY, NOBODY)
            os.fchown(err_fh.fileno(), NOBODY, NOBODY)
        try:
            proc = subprocess.Popen(  # noqa: S603 - argv is ours
                argv, stdin=subprocess.PIPE, stdout=out_fh, stderr=err_fh, cwd=work, env=env,
                pass_fds=(wfd,), start_new_session=True, close_fds=True,
                preexec_fn=lambda: _preexec(limits), **kwargs)  # type: ignore[arg-type]
        finally:
            os.close(wfd)
        chunks: list[bytes] = []
        reader = threading.Thread(target=_read_capped, args=(rfd, _RESULT_CAP, chunks),
                                  daemon=True)
        reader.start()
        timed_out = False
        try:
            assert proc.stdin is not None
            try:
                proc.stdin.write(request)
                proc.stdin.close()
            except BrokenPipeError:
                pass
            proc.wait(timeout=limits.timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.kill(proc.pid, signal.SIGUSR1)  # faulthandler: where is it stuck?
                time.sleep(0.3)
            except ProcessLookupError:
                pass
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # the child and anything it started
            proc.wait()
        reader.join(timeout=5)
    stderr = _tail(err_path)
    return Outcome(returncode=proc.returncode, result=b"".join(chunks), stdout=_tail(out_path),
                   stderr=stderr, timed_out=timed_out, wall_seconds=time.monotonic() - start,
                   stuck_at=stuck_site(stderr, slice_files) if timed_out else "",
                   dropped_privileges=drop)


def python_argv(runtime: Path) -> list[str]:
    """``python -I -B -c <bootstrap>``: isolated mode, no bytecode files written."""
    boot = (f"import sys; sys.path.insert(0, {str(runtime)!r}); "
            "from recon_runtime.child import main; main()")
    return [sys.executable, "-I", "-B", "-c", boot]
