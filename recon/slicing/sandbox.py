"""Start the child inside an operating-system sandbox (bubblewrap), with limits and a timeout.

The code a run executes comes from an image, so it is treated as untrusted.
Containment does not rely on code inside the untrusted interpreter: the
kernel enforces it. Layers, from the outside in:

* **bubblewrap** (``bwrap``, Debian package ``bubblewrap``) builds a fresh
  mount tree from explicit binds: ``/usr`` (and the ``/bin``/``/lib*`` links),
  the interpreter's prefixes and the folders of ``--real`` packages, the slice
  runtime and the snapshot, all **read-only**; the dynamic linker's cache from
  ``/etc`` and nothing else of it (no ``/etc/shadow``, no ``/root``, no home);
  ``/proc`` of the new PID namespace only; a minimal, read-only ``/dev``; a
  size-capped private **tmpfs** as the scratch ``work`` folder and another as
  ``/dev/shm`` (a server has one, and releases write there at import), the only
  writable places (the root of the tree is remounted read-only). New user, mount, PID, network,
  IPC, UTS and cgroup namespaces (``--unshare-all --unshare-user``): no network
  at all (only a down loopback), no other process visible. Inside, the code is
  uid/gid 65534 with no capabilities (``--cap-drop ALL``) and cannot create
  further user namespaces (``--disable-userns``); ``--new-session`` (no
  terminal injection) and ``--die-with-parent``. bwrap's own PID 1 reaps, and
  when the child exits (or is killed at the timeout) PID 1 exits and the kernel
  kills every process left in the namespace: nothing outlives the run.
* bwrap never runs as root. When recon runs as root, the child moves into a
  mount namespace of its own, binds the folders ``nobody`` cannot reach (an
  interpreter under a 0700 ``/root``) onto world-reachable staging folders
  there (the host never sees those mounts), drops to ``nobody`` and only then
  starts bwrap, unprivileged: the sandbox's 65534 is the host's 65534. (Started
  by root, a user namespace maps its 65534 to the host's root, which owns
  ``/proc/sys``: such a sandbox could write host sysctls, ``core_pattern``
  included, without any capability.) A caller that is not root is mapped as
  bwrap always does, to itself outside.
* ``RLIMIT_AS`` (memory), ``RLIMIT_CPU``, ``RLIMIT_FSIZE`` (no huge files),
  ``RLIMIT_NOFILE``, ``RLIMIT_NPROC``, no core dumps, ``PR_SET_NO_NEW_PRIVS``.
  ``RLIMIT_NPROC`` counts every process of the user, so when recon is root the
  run also gets its own ``pids`` cgroup (``pids.max``), removed afterwards;
  ``process_cap`` in the ``sandbox`` record says which caps held;
  a trimmed environment; a wall-clock timeout after which the whole sandbox is
  killed (after a ``SIGUSR1`` that makes ``faulthandler`` say where it was).
* The child's environment (recon's choice plus what the user typed before the
  engine's program or as ``docker run -e``) is the child's alone: bwrap itself
  starts with :data:`BWRAP_ENV` and hands the child its whole environment by
  ``--clearenv`` and ``--setenv``, after every namespace exists. A typed
  ``LD_PRELOAD`` therefore never loads into ``bwrap`` on the host. Without the
  sandbox there is no such wall: the variables that make the loader or the
  interpreter load code (:func:`loads_code`) are left out and named.
* Inside the child, the audit-hook guard (``guard.py``): the layer that makes a
  refusal *readable* (a line of the slice), not the one that enforces it.

Why bubblewrap rather than ``unshare(1)``: ``unshare`` creates namespaces but
leaves the whole host file system visible; building a read-only tree from
explicit binds, a tmpfs, a private ``/proc``, dropping capabilities and mapping
to an unprivileged id would need a hand-written setup stage (more code, run as
root, inside the namespace). bwrap does exactly that, declaratively, from one
argv, is what Flatpak relies on, starts in a few milliseconds and is one apt
package. Where it is missing or namespaces are not allowed (some containers)
the run refuses with one line unless the caller passes ``sandbox=False``
(``--no-sandbox``); there is no silent fallback. :func:`sandbox_problem` tries
a real ``bwrap ... true`` once per process to know.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ReconError

NOBODY = 65534
RESULT_CAP = 16 << 20  # bytes of the child's report brought back
_EVENTS_CAP = 1 << 20
_TAIL = 20000
#: host folders the dynamic linker and the interpreter need from /etc (nothing else of /etc)
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime")
_TOP_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


@dataclass
class Limits:
    """Resource limits of one run (and whether the OS sandbox is used).

    ``drop_privileges`` matters only without the sandbox (run as nobody when
    root); inside it the code is always 65534, and bwrap never runs as root.
    """

    timeout: float = 60.0
    memory_mb: int = 4096
    file_mb: int = 64
    drop_privileges: bool = True
    sandbox: bool = True
    scratch_mb: int = 256  # size of the private tmpfs (the only writable folder)
    processes: int = 512
    pid_1: bool = False  # the child is its PID namespace's init (bwrap --as-pid-1)


@dataclass
class Outcome:
    """What came back from the child, whatever happened to it."""

    returncode: int | None
    result: bytes
    events: bytes  # the guard's refusal records, written as they happen
    stdout: str
    stderr: str
    timed_out: bool
    wall_seconds: float
    stuck_at: str  # file:line of the slice where a timed-out child was (when known)
    confinement: dict[str, object]


class SandboxUnavailable(ReconError):
    """The OS sandbox cannot be started here, and the caller did not waive it."""

    exit_code = 4


#: the whole environment of bwrap itself (recon's choice; the child's goes in by ``--setenv``)
BWRAP_ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}
#: variables that make the dynamic loader, the interpreter or a library load code from a path
#: or module they name (``LD_*`` too): never given to a process on the host (:func:`loads_code`).
#: Those that only tune the interpreter (``PYTHONHASHSEED``, ``PYTHONIOENCODING``,
#: ``PYTHONUNBUFFERED`` ...) are not among them
CODE_LOADERS = frozenset({
    "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONINSPECT",
    "PYTHONPLATLIBDIR", "PYTHONPYCACHEPREFIX", "PYTHONBREAKPOINT", "PYTHONWARNINGS",
    "PYTHONEXECUTABLE", "GCONV_PATH", "OPENSSL_CONF", "OPENSSL_ENGINES", "OPENSSL_MODULES"})


def loads_code(name: str) -> bool:
    """True for a variable that makes a process load code it names (``LD_*``, :data:`CODE_LOADERS`)."""
    return name.startswith("LD_") or name in CODE_LOADERS


def _checked_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` as given, or one line naming the variable no process can be given."""
    for name, value in env.items():
        if not name or "=" in name or "\0" in name or "\0" in value:
            raise ReconError(f"the engine's environment names a variable no process can be "
                             f"given: {name[:80]!r}={value[:80]!r} (a name is non-empty, "
                             "without '=' or NUL; a value has no NUL)")
    return dict(env)


def base_env(work: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The child's whole environment."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(work),
        "TMPDIR": str(work),
        "USER": "nobody",
        "LOGNAME": "nobody",
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


def _preexec(limits: Limits, cgroup: Path | None = None,
             become_nobody: list[tuple[str, str]] | None = None) -> None:
    """Runs in the child between fork and exec: process cgroup, limits, user, parent death.

    ``become_nobody`` (root only): the (source, staging folder) binds to make
    in a mount namespace of this process alone, before dropping to nobody.
    """
    _join_cgroup(cgroup)
    mem = limits.memory_mb << 20
    cpu = int(limits.timeout) + 10
    fsize = limits.file_mb << 20
    for what, value in ((resource.RLIMIT_AS, mem), (resource.RLIMIT_CPU, cpu),
                        (resource.RLIMIT_FSIZE, fsize), (resource.RLIMIT_CORE, 0),
                        (resource.RLIMIT_NOFILE, 256),
                        (resource.RLIMIT_NPROC, limits.processes)):
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(what, (value, value))
    if become_nobody is not None:
        _stage_and_drop(become_nobody)
    _prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    _prctl(38, 1)  # PR_SET_NO_NEW_PRIVS


_CLONE_NEWNS = 0x00020000
_MS_BIND, _MS_REC, _MS_PRIVATE = 4096, 16384, 1 << 18


def _stage_and_drop(binds: list[tuple[str, str]]) -> None:
    """Bind what nobody cannot reach (an interpreter under 0700 ``/root``) onto folders it can.

    The binds live in a new mount namespace of this child only (the host never
    sees them); then the child becomes nobody, so bwrap starts unprivileged and
    the sandbox's 65534 is the host's 65534, never the host's root.
    """
    if binds:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        if libc.unshare(_CLONE_NEWNS) != 0 or \
                libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
            raise OSError(ctypes.get_errno(), "cannot make a private mount namespace")
        for source, stage in binds:
            if libc.mount(os.fsencode(source), os.fsencode(stage), None,
                          _MS_BIND | _MS_REC, None) != 0:
                raise OSError(ctypes.get_errno(), f"cannot stage {source}")
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


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


def can_drop_privileges(extra: Iterable[str | Path] = ()) -> bool:
    """Root, and the interpreter, its libraries and ``extra`` usable by ``nobody``."""
    if os.geteuid() != 0:
        return False
    paths = [sys.executable, sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
             *extra]
    return all(_world_usable(p) for p in paths)


def interpreter_dirs() -> list[str]:
    """Folders the interpreter runs from: its prefixes and the real executable's folder."""
    dirs = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                          sys.base_exec_prefix)}
    dirs.add(os.path.dirname(os.path.realpath(sys.executable)))
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        with contextlib.suppress(KeyError):
            dirs.add(os.path.realpath(sysconfig.get_paths()[key]))
    return _outermost(d for d in dirs if os.path.isdir(d))


def package_dirs(names: Iterable[str]) -> list[str]:
    """The ``site-packages`` folder of each importable ``--real`` package (found, not imported).

    The whole folder is bound because a real package imports its own
    dependencies from beside it (torch: numpy, sympy, typing_extensions ...).
    """
    import importlib.util

    out = []
    for name in names:
        top = name.split(".")[0]
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            continue
        locations = list(spec.submodule_search_locations or []) if spec else []
        if spec is not None and spec.origin and not locations:
            locations = [spec.origin]
        for loc in locations:
            out.append(os.path.dirname(os.path.realpath(loc)))
    return _outermost(d for d in out if os.path.isdir(d))


def _outermost(dirs: Iterable[str]) -> list[str]:
    """Drop folders that lie inside another folder of the list (one bind covers them)."""
    result: list[str] = []
    for d in sorted(set(dirs), key=len):
        if not any(d == r or d.startswith(r.rstrip("/") + "/") for r in result):
            result.append(d)
    return result


def _system_binds() -> list[str]:
    """``/usr``, the top-level links into it (or folders where not links), the linker's /etc."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in _TOP_LINKS:
        top = Path("/") / name
        if top.is_symlink():
            args += ["--symlink", os.readlink(top), str(top)]
        elif top.is_dir():
            args += ["--ro-bind", str(top), str(top)]
    for name in _ETC:
        if (Path("/etc") / name).exists():
            args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    return args


def bwrap_argv(inner: list[str], *, read_only: Iterable[str], work: Path,
               limits: Limits, staged: dict[str, str] | None = None,
               env: Mapping[str, str] | None = None) -> list[str]:
    """The bwrap command line around ``inner`` (see the module docstring for each choice).

    ``staged``: bind destination -> the folder bwrap reads it from instead. ``env``: the
    child's whole environment (``--clearenv``, then one ``--setenv`` each): bwrap
    applies it to the child alone, never to itself.
    """
    staged = staged or {}
    args = [_bwrap_path(), "--unshare-all", "--unshare-user", "--disable-userns",
            "--uid", str(NOBODY), "--gid", str(NOBODY), "--hostname", "recon-run",
            "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    args += ["--as-pid-1"] if limits.pid_1 else []
    args += _system_binds()
    for path in _outermost(read_only):
        if path != "/usr" and not path.startswith("/usr/"):
            args += ["--ro-bind", staged.get(path, path), path]
    # /dev/shm: a private tmpfs of its own, capped like the scratch, as on any server (a
    # release's module writes there at import: 0.11.2's API server, through its SageMaker
    # helper); the rest of /dev stays read-only
    args += ["--proc", "/proc", "--dev", "/dev",
             "--size", str(limits.scratch_mb << 20), "--perms", "1777", "--tmpfs", "/dev/shm",
             "--remount-ro", "/dev",
             "--size", str(limits.scratch_mb << 20), "--perms", "0700", "--tmpfs", str(work),
             "--remount-ro", "/", "--chdir", str(work), "--clearenv"]
    for name, value in (env or {}).items():
        args += ["--setenv", name, value]
    return [*args, "--", *inner]


def _bwrap_path() -> str:
    return shutil.which("bwrap") or "bwrap"


@functools.lru_cache(maxsize=4)
def sandbox_problem(as_nobody: bool = False) -> str | None:
    """Why the OS sandbox cannot start here (None when it can): one real ``bwrap ... true``."""
    if shutil.which("bwrap") is None:
        return "bwrap (Debian package bubblewrap) is not installed"
    probe = Path("/")
    argv = bwrap_argv(["/usr/bin/true"], read_only=[], work=probe / "tmp", limits=Limits())
    kwargs: dict[str, object] = {}
    if as_nobody:
        kwargs.update(user=NOBODY, group=NOBODY, extra_groups=[])
    try:
        done = subprocess.run(argv, capture_output=True, timeout=20, check=False,  # noqa: S603
                              cwd="/", env=BWRAP_ENV, **kwargs)  # type: ignore[call-overload]
    except (OSError, subprocess.SubprocessError) as err:
        return f"bwrap did not start: {err}"
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no message"]
        return (f"a trial bwrap --unshare-all ... true failed: {said[0][:200]}; recon needs "
                "bubblewrap 0.8 or later and user namespaces allowed")
    return None


def require_sandbox(as_nobody: bool = False) -> None:
    """Raise :class:`SandboxUnavailable` (one line) when the OS sandbox cannot start."""
    why = sandbox_problem(as_nobody)
    if why is not None:
        raise SandboxUnavailable(
            f"the OS sandbox of recon run is not available here ({why}); refusing to run "
            "untrusted code without it: pass --no-sandbox (sandbox=False) to run with "
            "resource limits and the in-process guard only")


def _read_capped(fd: int, cap: int, sink: list[bytes]) -> None:
    """Drain ``fd`` to EOF, keeping at most ``cap`` bytes (the writer is untrusted)."""
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


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (host pids, from ``/proc/*/task/*/children``)."""
    out: list[int] = []
    todo = [pid]
    while todo:
        current = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{current}/task/{tid}/children", encoding="ascii") as fh:
                    kids = [int(k) for k in fh.read().split()]
            except (OSError, ValueError):
                continue
            out.extend(kids)
            todo.extend(kids)
    return out


def _is_interpreter(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            first = fh.read().split(b"\0", 1)[0]
    except OSError:
        return False
    return first == os.fsencode(sys.executable)


def _interrupt_and_kill(proc: subprocess.Popen[bytes], timed_out: bool) -> None:
    """Ask the interpreter where it is (on a timeout), then kill the sandbox and its group."""
    below = descendants(proc.pid)
    if timed_out:
        targets = [p for p in below if _is_interpreter(p)][:1] or [proc.pid]
        for pid in targets:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGUSR1)  # faulthandler: where is it stuck?
        time.sleep(0.3)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    for pid in below:  # bwrap's PID 1 takes the namespace down; this is belt and braces
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


_CGROUP_SEQ = iter(range(1 << 62))


def _own_cgroup() -> Path | None:
    """This process's folder of a pids hierarchy (cgroup v1 ``pids``, or v2 with pids on)."""
    try:
        lines = Path("/proc/self/cgroup").read_text(encoding="ascii").splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):
            return Path("/sys/fs/cgroup/pids") / path.lstrip("/")
    for line in lines:
        if line.startswith("0::"):
            base = Path("/sys/fs/cgroup") / line[3:].lstrip("/")
            with contextlib.suppress(OSError):
                if "pids" in (base / "cgroup.subtree_control").read_text().split():
                    return base
    return None


def pids_cgroup(limit: int) -> Path | None:
    """A fresh cgroup capped at ``limit`` processes, or None where recon cannot make one.

    ``RLIMIT_NPROC`` of nobody is shared by every nobody process of the host;
    the cgroup caps this run alone.
    """
    base = _own_cgroup()
    if base is None or os.geteuid() != 0:
        return None
    group = base / f"recon-run-{os.getpid()}-{next(_CGROUP_SEQ)}"
    try:
        group.mkdir()
        (group / "pids.max").write_text(str(limit), encoding="ascii")
    except OSError:
        with contextlib.suppress(OSError):
            group.rmdir()
        return None
    return group


def _join_cgroup(group: Path | None) -> None:
    """In the child before exec: move into ``group`` (every descendant inherits it)."""
    if group is not None:
        with contextlib.suppress(OSError):
            (group / "cgroup.procs").write_text(str(os.getpid()), encoding="ascii")


def _remove_cgroup(group: Path | None) -> None:
    """Remove the run's cgroup once the killed processes have left it (a second at most)."""
    if group is None:
        return
    for _ in range(50):
        try:
            group.rmdir()
            return
        except OSError:
            time.sleep(0.02)


def _returncode(code: int | None, sandboxed: bool) -> int | None:
    """bwrap reports a child killed by signal N as exit 128+N: back to ``-N``."""
    if sandboxed and code is not None and code > 128 and \
            (code - 128) in signal.Signals._value2member_map_:
        return -(code - 128)
    return code


@dataclass
class _Plan:
    argv: list[str]
    popen: dict[str, object]
    confinement: dict[str, object]
    cgroup: Path | None = None
    staged: dict[str, str] = field(default_factory=dict)


def _plan(inner: list[str], *, root: Path, work: Path, limits: Limits,
          read_only: list[str], env: Mapping[str, str]) -> _Plan:
    """How to start the child: the OS sandbox (bwrap), or, when waived, rlimits only.

    ``env`` is the child's whole environment; ``popen["env"]`` is what the process
    Popen starts gets: :data:`BWRAP_ENV` for bwrap (the child's goes in by
    ``--setenv``), or without the sandbox ``env`` less the variables that load code.
    """
    env = _checked_env(env)
    if limits.sandbox:
        return _sandbox_plan(inner, root=root, work=work, limits=limits, read_only=read_only,
                             env=env)
    drop = limits.drop_privileges and can_drop_privileges()
    ignored = sorted(name for name in env if loads_code(name))
    popen: dict[str, object] = {"cwd": str(work), "env": {
        k: v for k, v in env.items() if k not in ignored}}
    if drop:
        os.chown(work, NOBODY, NOBODY)
        popen.update(user=NOBODY, group=NOBODY, extra_groups=[])
    user = "nobody" if drop else "caller"
    confinement: dict[str, object] = {"os_sandbox": "none", "user": user, "host_user": user,
                                      "network": True,
                                      "process_cap": f"RLIMIT_NPROC={limits.processes}"}
    if ignored:
        confinement["environment_ignored"] = ignored
        print(f"recon: warning: --no-sandbox: {', '.join(ignored)} in the engine's environment "
              "not passed on: without the sandbox it would make a process on this host load "
              "the code it names (the sandbox hands it to the engine inside)",
              file=sys.stderr, flush=True)
    return _Plan(inner, popen, confinement)


def _sandbox_plan(inner: list[str], *, root: Path, work: Path, limits: Limits,
                  read_only: list[str], env: dict[str, str]) -> _Plan:
    """bwrap, started as nobody when recon is root (never as root: see ``_stage_and_drop``).

    Root owns ``/proc/sys`` and ``/proc/sysrq-trigger`` outside any namespace,
    so a sandbox whose user is root outside could write host sysctls; hence
    the drop, and folders nobody cannot reach are staged rather than bound as root.
    """
    as_root = os.geteuid() == 0
    require_sandbox(as_nobody=as_root)
    popen: dict[str, object] = {"cwd": "/", "env": dict(BWRAP_ENV)}
    staged = _stage(read_only) if as_root else {}
    group = pids_cgroup(limits.processes) if as_root else None
    if as_root:
        popen["become_nobody"] = list(staged.items())
    cap = f"RLIMIT_NPROC={limits.processes}"
    if group is not None:
        cap = f"cgroup pids.max={limits.processes}, {cap}"
    return _Plan(bwrap_argv(inner, read_only=read_only, work=work, limits=limits,
                            staged=staged, env=env), popen,
                 {"os_sandbox": "bwrap", "user": "nobody",
                  "host_user": "nobody" if as_root else "caller", "network": False,
                  "process_cap": cap}, group, staged)


def _stage(read_only: list[str]) -> dict[str, str]:
    """An empty staging folder for each bind source nobody cannot reach (see ``_stage_and_drop``).

    They live in the first temporary folder nobody can reach (``TMPDIR`` may
    sit in a private folder); the mounts onto them exist only in the child's
    mount namespace, the host sees empty folders.
    """
    hidden = [p for p in _outermost(read_only) if not _parents_searchable(p)]
    if not hidden:
        return {}
    places = [tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm"]  # noqa: S108
    reachable = [p for p in places if os.path.isdir(p) and _parents_searchable(p + "/x")]
    if not reachable:
        raise SandboxUnavailable("no temporary folder nobody can reach (TMPDIR, /tmp, "
                                 "/var/tmp) to stage the interpreter's folders in")
    stage_root = Path(tempfile.mkdtemp(prefix="recon-binds-", dir=reachable[0]))
    os.chmod(stage_root, 0o755)
    staged = {}
    for i, path in enumerate(hidden):
        (stage_root / str(i)).mkdir(mode=0o755)
        staged[path] = str(stage_root / str(i))
    return staged


def _unstage(staged: dict[str, str]) -> None:
    """Remove the (empty on the host: the binds lived in the child's namespace) staging folders."""
    for stage in staged.values():
        with contextlib.suppress(OSError):
            os.rmdir(stage)
    if staged:
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(next(iter(staged.values()))))


def _parents_searchable(path: str) -> bool:
    """True when every folder above ``path`` lets others through (nobody can reach it)."""
    try:
        return all(parent.stat().st_mode & 0o001 for parent in Path(path).parents)
    except OSError:
        return False


@dataclass
class Running:
    """A started child: its process, the read ends of its two pipes, where its output goes.

    ``fds`` are the numbers the child knows its write ends by (they go into its
    request as ``result_fd`` and ``events_fd``). :meth:`stop` kills the whole
    sandbox and undoes what starting it made (cgroup, staging folders).
    """

    proc: subprocess.Popen[bytes]
    plan: _Plan
    result_fd: int
    events_fd: int
    fds: dict[str, int]
    out_path: Path
    err_path: Path
    start: float
    stopped: bool = False

    def stop(self, timed_out: bool = False) -> None:
        """Kill and clean up, once (a second call must not signal a reused process id)."""
        if self.stopped:
            return
        self.stopped = True
        _interrupt_and_kill(self.proc, timed_out)
        self.proc.wait()
        _remove_cgroup(self.plan.cgroup)
        _unstage(self.plan.staged)

    def stderr(self) -> str:
        return _tail(self.err_path)


def spawn(inner: list[str], *, root: Path, work: Path, limits: Limits, env: dict[str, str],
          read_only: list[str]) -> Running:
    """Start ``inner`` (sandboxed unless waived) with a stdin pipe and two report pipes.

    ``env`` is the child's whole environment, never bwrap's (see :func:`_plan`).
    :func:`launch` is one request and a wait; the warm engine server
    (:mod:`recon.engine.server`) keeps the child and writes to its stdin again.
    """
    plan = _plan(inner, root=root, work=work, limits=limits, read_only=read_only, env=env)
    become = plan.popen.pop("become_nobody", None)
    rfd, wfd = os.pipe()
    efd_r, efd_w = os.pipe()
    out_path, err_path = root / "stdout.txt", root / "stderr.txt"
    start = time.monotonic()
    with open(out_path, "wb") as out_fh, open(err_path, "wb") as err_fh:
        if plan.popen.get("user") == NOBODY or become is not None:
            os.fchown(out_fh.fileno(), NOBODY, NOBODY)
            os.fchown(err_fh.fileno(), NOBODY, NOBODY)
        try:
            proc = subprocess.Popen(  # noqa: S603 - argv is ours
                plan.argv, stdin=subprocess.PIPE, stdout=out_fh, stderr=err_fh,
                pass_fds=(wfd, efd_w), start_new_session=True, close_fds=True,
                preexec_fn=lambda: _preexec(limits, plan.cgroup, become),  # type: ignore[arg-type]
                **plan.popen)  # type: ignore[call-overload]
        except subprocess.SubprocessError as err:  # the preexec step failed (staging, uid)
            _remove_cgroup(plan.cgroup)
            _unstage(plan.staged)
            os.close(rfd)
            os.close(efd_r)
            raise SandboxUnavailable(f"could not prepare the sandbox's user: {err}") from err
        except BaseException:
            _remove_cgroup(plan.cgroup)
            _unstage(plan.staged)
            os.close(rfd)
            os.close(efd_r)
            raise
        finally:
            os.close(wfd)
            os.close(efd_w)
    return Running(proc, plan, rfd, efd_r, {"result_fd": wfd, "events_fd": efd_w},
                   out_path, err_path, start)


def launch(inner: list[str], request: Mapping[str, object], *, root: Path, work: Path,
           limits: Limits, env: dict[str, str], slice_files: set[str],
           read_only: list[str]) -> Outcome:
    """Run ``inner`` (sandboxed unless waived) with ``request`` as JSON on stdin.

    The child gets two pipes: ``result_fd`` for its report and ``events_fd``
    for the guard's refusals, written as each happens. Both are read capped;
    what they hold is untrusted data (the runner validates it).
    """
    import json

    running = spawn(inner, root=root, work=work, limits=limits, env=env, read_only=read_only)
    data = json.dumps({**request, **running.fds}).encode()
    chunks: list[bytes] = []
    events: list[bytes] = []
    readers = [threading.Thread(target=_read_capped, args=(fd, cap, sink), daemon=True)
               for fd, cap, sink in ((running.result_fd, RESULT_CAP, chunks),
                                     (running.events_fd, _EVENTS_CAP, events))]
    for reader in readers:
        reader.start()
    timed_out = _feed_and_wait(running.proc, data, limits.timeout)
    running.stop(timed_out)
    for reader in readers:
        reader.join(timeout=5)
    stderr = running.stderr()
    return Outcome(returncode=_returncode(running.proc.returncode, limits.sandbox),
                   result=b"".join(chunks), events=b"".join(events),
                   stdout=_tail(running.out_path), stderr=stderr, timed_out=timed_out,
                   wall_seconds=time.monotonic() - running.start,
                   stuck_at=stuck_site(stderr, slice_files) if timed_out else "",
                   confinement=running.plan.confinement)


def _feed_and_wait(proc: subprocess.Popen[bytes], data: bytes, timeout: float) -> bool:
    """Write the request, wait for the child; True when it ran past ``timeout``."""
    assert proc.stdin is not None
    try:
        proc.stdin.write(data)
        proc.stdin.close()
    except BrokenPipeError:
        pass
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return True
    return False


def python_argv(runtime: Path) -> list[str]:
    """``python -I -B -c <bootstrap>``: isolated mode, no bytecode files written."""
    boot = (f"import sys; sys.path.insert(0, {str(runtime)!r}); "
            "from recon_runtime.child import main; main()")
    return [sys.executable, "-I", "-B", "-c", boot]
