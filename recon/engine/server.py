"""A warm engine-mode child that stays up between requests, so a new request takes seconds.

Almost all of a cold engine-mode request is the release importing itself
(``vllm.entrypoints.cli.serve`` alone is 7-11 s on two cores). A warm server is
that same sandboxed child (:mod:`recon.engine.child`, ``--serve``), which
prepares and imports once and then answers each request in a forked copy of
itself, so no request sees what another changed.

Three processes, two trust levels:

* the **client** (any recon command asking the engine): connects to the
  server's socket, sends the request, reads the answer as untrusted bytes
  (capped, then validated exactly as a cold child's answer);
* the **supervisor** (this module run as ``python -m recon.engine.server``,
  recon's own code, detached): owns the sandboxed child and a socket in the
  abstract namespace that only the same user may use (``SO_PEERCRED``),
  relays one request at a time, kills the whole sandbox when a request runs
  past its timeout, and exits after ``RECON_ENGINE_SERVER_IDLE`` seconds
  (default 600) without a request;
* the **child** in the OS sandbox, as for a cold request (:mod:`recon.engine.child`, or
  :mod:`recon.engine.sglang_child` for SGLang: ``ServerSpec.engine``).

A request's code (the release's, and a model folder's module where one is given) never
decides another request's answer, and the kernel holds that, not the request's code:

* the child is its PID namespace's init (``bwrap --as-pid-1``), not dumpable (a request's
  process, the same user, cannot open its ``/proc/<pid>/mem`` or descriptors, nor trace
  it), and each request runs in a process forked from it that first closes the child's
  channels to this supervisor (stdin, the frame and event pipes) and writes its answer to
  a pipe of its own;
* when that process ends, the child kills and reaps every process left in the sandbox
  before it frames the answer, so nothing of one request runs when the next starts;
* each frame carries the nonce this supervisor drew for that request (a secret the next
  request cannot know); a frame without it, or bytes waiting before a request or after its
  frame, stop the server, and the client asks a cold child.

A server is keyed by what its imports depend on: the snapshot's bytes, the
release environment, the child's code, the process environment of the
request, the declared GPU (module bodies ask it while importing) and the
model's architectures (their modules are imported ahead). Each request gets
its own scratch folders, as a cold child does. Anything unusual (no server
could start, the release failed to import, the server died) sends the client
back to a cold child, and the answer says which way it came
(``seconds.server``). ``RECON_ENGINE_SERVER=0`` turns servers off. At most
``RECON_ENGINE_SERVERS`` (default 3) run per user: starting another asks the
idle others to quit.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import secrets
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..paths import cache_dir
from ..slicing.sandbox import RESULT_CAP, Limits, Running, base_env, spawn

#: the longest a server lives, busy or not (its CPU limit follows from it)
LIFETIME_S = 4 * 3600
#: the most bytes of a request the supervisor reads (a config.json, a command line, METADATA)
REQUEST_CAP = 16 << 20
_PREFIX = "recon-engine"


#: the programs the virtual server has on its PATH: the CUDA compiler, as vLLM's images (CUDA
#: ``devel`` bases) have it. The release asks only whether it is there (``has_flashinfer``: no
#: FlashInfer cubin package and no ``nvcc`` means no FlashInfer); processes are never started.
VIRTUAL_PROGRAMS = ("nvcc",)


def child_env(work: Path, extra: dict[str, str] | None, engine: str = "vllm") -> dict[str, str]:
    """The sandbox's environment plus what keeps the release off the network and the home.

    For vLLM, ``PATH`` is one folder of the child's own with :data:`VIRTUAL_PROGRAMS`
    in it, so what the release finds there is the same on every machine, not
    this host's tools. SGLang's child gets its caches and logging kept in the scratch folder.
    """
    if engine == "sglang":
        return base_env(work, {"HF_HOME": str(work / "hf"), "HF_HUB_OFFLINE": "1",
                               "TRANSFORMERS_OFFLINE": "1", "DO_NOT_TRACK": "1",
                               "SGLANG_LOGGING_CONFIG_PATH": "", **(extra or {})})
    programs = work / "programs"
    programs.mkdir(exist_ok=True)
    for name in VIRTUAL_PROGRAMS:
        path = programs / name
        path.write_text("#!/bin/sh\n# recon engine mode: present, never run\nexit 127\n")
        path.chmod(0o755)
    quiet = {"HF_HOME": str(work / "hf"), "VLLM_CONFIG_ROOT": str(work / "vllm-config"),
             "VLLM_CACHE_ROOT": str(work / "vllm-cache"), "VLLM_NO_USAGE_STATS": "1",
             "DO_NOT_TRACK": "1", "VLLM_LOGGING_LEVEL": "INFO", "PATH": str(programs)}
    return base_env(work, {**quiet, **(extra or {})})


def enabled() -> bool:
    return os.environ.get("RECON_ENGINE_SERVER") != "0"


def idle_seconds() -> float:
    try:
        return max(1.0, float(os.environ.get("RECON_ENGINE_SERVER_IDLE", "600")))
    except ValueError:
        return 600.0


def most_servers() -> int:
    try:
        return max(1, int(os.environ.get("RECON_ENGINE_SERVERS", "3")))
    except ValueError:
        return 3


@dataclass
class ServerSpec:
    """How to start one server: the child's argv, its environment, binds and limits."""

    key: str
    argv: list[str]
    env_extra: dict[str, str]
    read_only: list[str]
    setup: dict[str, Any]
    memory_mb: int
    scratch_mb: int
    processes: int
    sandbox: bool
    engine: str = "vllm"


def server_key(parts: dict[str, Any]) -> str:
    """The one key of a server: a digest of what its imports depend on, and of this module
    (a supervisor of another recon version speaks another protocol)."""
    own = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    blob = json.dumps({**parts, "supervisor": own}, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def _address(key: str) -> bytes:
    """An abstract socket name (no file to leave behind or to be replaced by a link)."""
    return f"\0{_PREFIX}-{os.getuid()}-{key[:32]}".encode()


def _servers_dir() -> Path:
    folder = cache_dir() / "engine-servers"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def live_servers() -> list[str]:
    """Keys (shortened) of this user's servers now listening (from ``/proc/net/unix``)."""
    mark = f"@{_PREFIX}-{os.getuid()}-"
    try:
        lines = Path("/proc/net/unix").read_text(encoding="ascii", errors="replace").splitlines()
    except OSError:
        return []
    return sorted({ln.split()[-1][len(mark):] for ln in lines[1:]
                   if ln.split() and ln.split()[-1].startswith(mark)})


def _connect(key: str) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(_address(key))
    except OSError:
        sock.close()
        return None
    return sock


# -- client -------------------------------------------------------------------------------

class ServerTimedOut(Exception):
    """The request ran past its timeout; the supervisor killed its sandbox."""


@dataclass
class Served:
    """A server's answer: the child's bytes (untrusted), how it came, the sandbox it ran in."""

    data: bytes
    how: str
    confinement: dict[str, object]


def ask(spec: ServerSpec, request: dict[str, Any], timeout: float) -> Served | None:
    """The warm server's answer to ``request``.

    None when no server could answer (the caller runs a cold child); raises
    :class:`ServerTimedOut` when the request itself ran past ``timeout``.
    """
    sock = _connect(spec.key)
    how = "warm"
    if sock is None:
        sock, how = _start(spec), "started"
    if sock is None:
        return None
    with sock:
        sock.settimeout(timeout + 900)  # a server that is starting imports first
        try:
            sock.sendall(json.dumps({"timeout": timeout, "request": request}).encode() + b"\n")
            reader = sock.makefile("rb")
            status = json.loads(reader.readline(1 << 16) or b"{}")
            if not isinstance(status, dict):
                return None
            if status.get("status") == "timed_out":
                raise ServerTimedOut(str(status.get("stderr", ""))[-600:])
            length = status.get("length")
            if status.get("status") != "answer" or not isinstance(length, int) or \
                    not 0 <= length <= RESULT_CAP:
                return None
            data = reader.read(length)
        except (OSError, ValueError):
            return None
    if len(data) != length:
        return None
    return Served(data, how, {**dict(status.get("confinement") or {}), "warm_server": True})


def _start(spec: ServerSpec) -> socket.socket | None:
    """Start the supervisor for ``spec`` (or wait for the one another process is starting)."""
    lock_path = _servers_dir() / f"{spec.key[:32]}.lock"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # a supervisor holds it: starting up, or about to listen
            os.close(fd)
            time.sleep(0.1)
            sock = _connect(spec.key)
            if sock is not None:
                return sock
            continue
        try:
            _make_room()
            proc = _launch_supervisor(spec, fd)
        finally:
            os.close(fd)  # the supervisor's copy of the descriptor keeps the lock
        while proc.poll() is None and time.monotonic() < deadline:  # it listens, then imports
            sock = _connect(spec.key)
            if sock is not None:
                return sock
            time.sleep(0.05)
        return None
    return None


def _launch_supervisor(spec: ServerSpec, lock_fd: int) -> subprocess.Popen[bytes]:
    package_root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [package_root, *filter(None, [os.environ.get("PYTHONPATH")])])}
    log = _servers_dir() / f"{spec.key[:32]}.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(  # noqa: S603 - argv is ours
            [sys.executable, "-m", "recon.engine.server"], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=err, env=env, cwd="/", close_fds=True,
            pass_fds=(lock_fd,), start_new_session=True)
    assert proc.stdin is not None
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.write(json.dumps({"spec": asdict(spec), "lock_fd": lock_fd,
                                     "idle": idle_seconds()}).encode())
        proc.stdin.close()
    return proc


def _make_room() -> None:
    """Ask this user's idle servers to quit when starting one more would pass the cap."""
    live = live_servers()
    if len(live) < most_servers():
        return
    for short in live:
        sock = _connect(short)
        if sock is not None:
            with sock, contextlib.suppress(OSError):
                sock.sendall(b'{"quit": true}\n')


def stop_all() -> int:
    """Ask every server of this user to quit (``recon cache`` and the tests use it)."""
    count = 0
    for short in live_servers():
        sock = _connect(short)
        if sock is not None:
            with sock, contextlib.suppress(OSError):
                sock.sendall(b'{"quit": true}\n')
                count += 1
    return count


# -- supervisor ---------------------------------------------------------------------------

class _Frames:
    """Length-prefixed frames from the child's result pipe, each within a deadline."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = b""

    def _fill(self, deadline: float) -> bool:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([self.fd], [], [], left)[0]:
            raise TimeoutError
        block = os.read(self.fd, 1 << 16)
        self.buf += block
        return bool(block)

    def read(self, deadline: float) -> bytes | None:
        """One frame; None when the child closed the pipe or broke the framing."""
        while b"\n" not in self.buf[:24]:
            if len(self.buf) >= 24 or not self._fill(deadline):
                return None
        head, _, self.buf = self.buf.partition(b"\n")
        if not head.isdigit() or int(head) > RESULT_CAP:
            return None
        length = int(head)
        while len(self.buf) < length:
            if not self._fill(deadline):
                return None
        data, self.buf = self.buf[:length], self.buf[length:]
        return data

    def pending(self) -> bool:
        """Whether bytes wait past the last frame read (or the pipe ended): never an answer."""
        return bool(self.buf) or bool(select.select([self.fd], [], [], 0)[0])


def _opened(frame: bytes | None, nonce: str) -> bytes | None:
    """The answer in ``frame`` when the frame carries ``nonce`` (the request's own), else None."""
    if frame is None:
        return None
    head, newline, data = frame.partition(b"\n")
    if not newline or not hmac.compare_digest(head, nonce.encode("ascii")):
        return None
    return data


class Supervisor:
    """Owns one sandboxed warm child and relays requests to it (see the module docstring)."""

    def __init__(self, spec: ServerSpec, idle: float) -> None:
        self.spec = spec
        self.idle = idle
        self.root = Path(tempfile.mkdtemp(prefix="recon-engine-server-"))
        os.chmod(self.root, 0o755)  # the sandbox may start as nobody
        self.work = self.root / "work"
        self.work.mkdir(mode=0o700)
        self.running: Running | None = None
        self.frames: _Frames | None = None
        self.ready: dict[str, Any] = {}
        self.count = 0

    def start(self) -> bool:
        # pid_1: the child is its PID namespace's init, so no other process of the sandbox
        # is left for a request to reach, and every process a request starts is its own
        limits = Limits(timeout=LIFETIME_S, memory_mb=self.spec.memory_mb, file_mb=64,
                        sandbox=self.spec.sandbox, scratch_mb=self.spec.scratch_mb,
                        processes=self.spec.processes, pid_1=True)
        env = child_env(self.work, self.spec.env_extra, self.spec.engine)
        self.running = spawn(self.spec.argv, root=self.root, work=self.work, limits=limits,
                             env=env, read_only=self.spec.read_only)
        self.frames = _Frames(self.running.result_fd)
        nonce = secrets.token_hex(16)
        setup = {**self.spec.setup, **self.running.fds, "nonce": nonce,
                 "model_dir": str(self.work / "setup" / "model")}
        try:
            self._send(setup)
            frame = _opened(self.frames.read(time.monotonic() + 900), nonce)
            ready = json.loads(frame) if frame else None
        except (OSError, ValueError, TimeoutError):
            ready = None
        self.ready = ready if isinstance(ready, dict) else {}
        print(json.dumps({"ready": self.ready}), file=sys.stderr, flush=True)  # the server's log
        return bool(self.ready.get("ready"))

    def _send(self, obj: dict[str, Any]) -> None:
        assert self.running is not None and self.running.proc.stdin is not None
        self.running.proc.stdin.write(json.dumps(obj).encode() + b"\n")
        self.running.proc.stdin.flush()

    def answer(self, envelope: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        """Status and answer for one client envelope; the sandbox is gone after a failure.

        The answer is the one frame that carries this request's nonce (a secret drawn now,
        known only to the server and this request's process), and nothing may follow it:
        bytes waiting before a request or after its frame stop the server.
        """
        assert self.frames is not None and self.running is not None
        request = dict(envelope.get("request") or {})
        self.count += 1
        nonce = request["nonce"] = secrets.token_hex(16)
        folder = f"request-{self.count}-{secrets.token_hex(8)}"  # no request names the next's
        request["model_dir"] = str(self.work / folder / "model")
        timeout = float(envelope.get("timeout") or 600)
        try:
            data = None
            if not self.frames.pending():
                self._send(request)
                data = _opened(self.frames.read(time.monotonic() + timeout), nonce)
            if data is not None and self.frames.pending():
                data = None
        except TimeoutError:
            self.running.stop(timed_out=True)
            return {"status": "timed_out", "stderr": self.running.stderr()[-600:]}, b""
        except OSError:
            data = None
        if data is None:
            self.running.stop()
            return {"status": "died", "stderr": self.running.stderr()[-600:]}, b""
        return {"status": "answer", "length": len(data),
                "confinement": self.running.plan.confinement}, data

    def serve(self, listener: socket.socket) -> None:
        listener.settimeout(self.idle)
        while self.running is not None and self.running.proc.poll() is None:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                return
            with conn:
                if not self._same_user(conn):
                    continue
                conn.settimeout(30)
                try:
                    line = conn.makefile("rb").readline(REQUEST_CAP)
                    envelope = json.loads(line)
                except (OSError, ValueError):
                    continue
                if not isinstance(envelope, dict) or envelope.get("quit"):
                    return
                status, data = self.answer(envelope)
                conn.settimeout(None)
                with contextlib.suppress(OSError):
                    conn.sendall(json.dumps(status).encode() + b"\n" + data)
                if status["status"] not in ("answer", "cold"):
                    return

    @staticmethod
    def _same_user(conn: socket.socket) -> bool:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _, uid, _ = struct.unpack("3i", creds)
        return uid == os.getuid()

    def close(self) -> None:
        if self.running is not None:
            with contextlib.suppress(OSError, ValueError):
                self._send({"quit": True})
            self.running.stop()
            os.close(self.running.result_fd)
            os.close(self.running.events_fd)
        shutil.rmtree(self.root, ignore_errors=True)


def supervise(spec: ServerSpec, idle: float) -> None:
    """Listen first (clients queue while the child imports), then answer until idle."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(_address(spec.key))
    except OSError:  # another supervisor listens under this key
        return
    listener.listen(16)
    supervisor = Supervisor(spec, idle)
    try:
        if supervisor.start():
            supervisor.serve(listener)
        else:
            _turn_away(listener, supervisor.ready.get("error") or "the warm child did not start")
    finally:
        listener.close()
        supervisor.close()


def _turn_away(listener: socket.socket, why: str) -> None:
    """Send the clients already queued back to a cold child."""
    listener.settimeout(0.2)
    while True:
        try:
            conn, _ = listener.accept()
        except (TimeoutError, OSError):
            return
        with conn, contextlib.suppress(OSError):
            conn.sendall(json.dumps({"status": "cold", "why": str(why)[:300]}).encode() + b"\n")


def main() -> None:
    """``python -m recon.engine.server``: the supervisor, its spec on stdin (from the client)."""
    message = json.loads(sys.stdin.read())
    spec = ServerSpec(**message["spec"])
    lock_fd = int(message["lock_fd"])
    try:
        supervise(spec, float(message["idle"]))
    finally:
        os.close(lock_fd)


if __name__ == "__main__":
    main()
