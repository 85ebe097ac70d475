"""The OS sandbox of ``recon run`` holds when the in-process guard does not.

Real bwrap, real child processes: the attacks live in tests/data/sandbox/escapepkg
(snapshotted with ``dir:``), most of them disarm the audit guard first, and every
test checks the *host* (files, processes, a listening socket), not what the
hostile code says. Two control tests run the same attacks with ``sandbox=False``
and see them succeed, so the attacks are real.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from recon.errors import ReconError
from recon.slicing import RunFailed, run_function
from recon.slicing import sandbox as sandbox_mod
from recon.slicing.result import MalformedReport
from recon.snapshots.model import Snapshot
from recon.snapshots.take import take_snapshot

DATA = Path(__file__).parent / "data" / "sandbox"
ESC = "escapepkg.escapes"

_PROBLEM = sandbox_mod.sandbox_problem(as_nobody=os.geteuid() == 0)
if _PROBLEM is not None and os.environ.get("CI"):  # .ci/run installs bubblewrap: fail there
    raise RuntimeError(f"CI must provide the OS sandbox of recon run: {_PROBLEM}")
pytestmark = pytest.mark.skipif(_PROBLEM is not None, reason=f"no OS sandbox here: {_PROBLEM}")


@pytest.fixture(scope="module")
def snap(tmp_path_factory: pytest.TempPathFactory) -> Snapshot:
    out = tmp_path_factory.mktemp("escape-snap")
    return take_snapshot(f"dir:{DATA / 'escapepkg'}", package="escapepkg", out=out)


def _value(qual: str, snap: Snapshot, **args: object) -> object:
    res = run_function(snap, f"{ESC}:{qual}", args=args, timeout=30)
    assert res.ok, res.error
    assert res.sandbox["os_sandbox"] == "bwrap"
    return res.value


def _alive(marker: str) -> list[str]:
    """Host processes whose command line holds ``marker``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmd:
            found.append(f"{name}: {cmd}")
    return found


def test_secret_files_are_not_readable(snap: Snapshot) -> None:
    host = Path("/etc/shadow")
    got = _value("read_file", snap, path=str(host))
    assert isinstance(got, str) and got.startswith("error: FileNotFoundError")
    if host.exists() and os.access(host, os.R_OK):  # the host file is there, just not inside
        assert host.read_text().splitlines()[0] not in got
    home = Path.home() / ".bash_history"
    assert _value("read_file", snap, path=str(home)).startswith("error: ")


def test_other_processes_environment_is_not_readable(snap: Snapshot,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    token = secrets.token_hex(16)
    monkeypatch.setenv("RECON_TEST_SECRET", token)
    for got in (_value("read_file", snap, path="/proc/1/environ"),
                _value("read_parent_environ", snap),
                _value("read_file", snap, path=f"/proc/{os.getpid()}/environ")):
        assert token not in str(got)
    seen = _value("processes", snap)
    assert isinstance(seen, dict)
    # the PID namespace: bwrap's init (1), the interpreter (2); the host's processes are not there
    assert set(seen) <= {"1", "2", "3"} and "bwrap" in seen["1"]
    assert str(os.getpid()) not in seen or "pytest" not in seen[str(os.getpid())]


def test_write_through_a_directory_descriptor(snap: Snapshot, tmp_path: Path) -> None:
    got = _value("write_via_dir_fd", snap, folder=str(tmp_path), name="pwned.txt")
    assert str(got).startswith("error: ")
    assert not (tmp_path / "pwned.txt").exists()
    # a folder that *is* visible (read-only) inside: the kernel refuses the write
    got = _value("write_via_dir_fd", snap, folder=str(snap.src / "escapepkg"), name="x.py")
    assert "Read-only file system" in str(got)
    assert not (snap.src / "escapepkg" / "x.py").exists()


def test_write_through_the_parent_cwd(snap: Snapshot, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _value("write_via_parent_cwd", snap, name="pwned.txt")
    assert list(tmp_path.iterdir()) == []


def test_shell_started_after_disarming_cannot_touch_the_host(snap: Snapshot) -> None:
    target = Path(f"/tmp/recon-escape-{secrets.token_hex(6)}")
    got = _value("shell_touch", snap, path=str(target))
    assert got != "ok: 0"  # touch failed inside: /tmp is the read-only root there
    assert not target.exists()


def test_write_after_clearing_the_guard(snap: Snapshot, tmp_path: Path) -> None:
    target = tmp_path / "pwned.txt"
    got = _value("write_after_disarming", snap, path=str(target))
    assert str(got).startswith("error: ")
    assert not target.exists()
    # nothing else is writable inside either: the tree's root, /dev, /tmp, $HOME's parent
    for inside in ("/x", "/dev/x", "/tmp/x", "/etc/x"):
        assert "Read-only file system" in str(_value("write_after_disarming", snap, path=inside))
    # /dev/shm is a private tmpfs of the run's own (as on a server): a write there stays inside
    name = f"recon-escape-{secrets.token_hex(6)}"
    assert not str(_value("write_after_disarming", snap, path=f"/dev/shm/{name}")).startswith("error")
    assert not (Path("/dev/shm") / name).exists()


def test_snapshot_is_read_only(snap: Snapshot) -> None:
    victim = snap.src / "escapepkg" / "escapes.py"
    before = hashlib.sha256(victim.read_bytes()).hexdigest()
    got = _value("write_snapshot_file", snap, path=str(victim))
    assert "Read-only file system" in str(got)
    assert hashlib.sha256(victim.read_bytes()).hexdigest() == before


def test_processes_started_natively_die_with_the_run(snap: Snapshot) -> None:
    seconds = f"{40 + secrets.randbelow(10**6) / 10**6:.6f}"  # a marker no other sleep has
    started = _value("fork_many", snap, count=50, seconds=seconds)
    assert isinstance(started, int) and 0 < started <= 50
    time.sleep(0.5)
    assert _alive(f"sleep {seconds}") == []


def test_fork_bomb_is_bounded(snap: Snapshot) -> None:
    """More processes than the run's cap (512): the kernel stops the rest (cgroup or rlimit)."""
    seconds = f"{40 + secrets.randbelow(10**6) / 10**6:.6f}"
    res = run_function(snap, f"{ESC}:fork_many", args={"count": 700, "seconds": seconds},
                       timeout=60)
    cap = res.sandbox["process_cap"]
    if cap.startswith("none"):
        pytest.skip(f"no process cap on this host: {cap}")
    assert cap.endswith("=512") and isinstance(res.value, int) and 400 < res.value < 512
    time.sleep(0.5)
    assert _alive(f"sleep {seconds}") == []


def test_setsid_daemon_does_not_outlive_the_run(snap: Snapshot, tmp_path: Path) -> None:
    target = tmp_path / "late.txt"
    got = _value("daemon_writes_later", snap, path=str(target), seconds=2)
    assert str(got).startswith("ok: ")  # it did start
    assert _alive(f"echo late > {target}") == []
    time.sleep(3)
    assert not target.exists()


def test_no_network(snap: Snapshot) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(0.5)
        got = _value("connect", snap, port=server.getsockname()[1])
        assert str(got).startswith("error: ")
        with pytest.raises(TimeoutError):
            server.accept()


def test_not_root_inside(snap: Snapshot) -> None:
    who = _value("identity", snap)
    assert isinstance(who, dict)
    assert who["uid"] == who["euid"] == who["gid"] == 65534
    assert all(int(v, 16) == 0 for k, v in who["caps"].items() if k != "CapBnd") or \
        int(who["caps"]["CapEff"], 16) == 0
    assert int(who["caps"]["CapEff"], 16) == 0 and who["hostname"] == "recon-run"


def test_forged_report_cannot_hide_a_refusal(snap: Snapshot, tmp_path: Path) -> None:
    target = tmp_path / "pwned.txt"
    with pytest.raises(RunFailed, match=r"tried a write outside the scratch folder .*pwned"):
        run_function(snap, f"{ESC}:forge_report",
                     args={"path": str(target), "target": f"{ESC}:forge_report"})
    assert not target.exists()


def test_malformed_report_is_one_line(snap: Snapshot) -> None:
    with pytest.raises(MalformedReport, match=r"report is malformed at report.calls\[0\].ok: "
                                              r"expected bool, got str"):
        run_function(snap, f"{ESC}:forge_malformed", args={"target": f"{ESC}:forge_malformed"})


def test_control_without_the_sandbox_the_attacks_work(snap: Snapshot, tmp_path: Path) -> None:
    """sandbox=False: the same code really writes on the host (so the tests above mean it)."""
    res = run_function(snap, f"{ESC}:write_via_dir_fd", sandbox=False,
                       args={"folder": str(tmp_path), "name": "pwned.txt"})
    assert res.sandbox["os_sandbox"] == "none"
    if res.sandbox["user"] == "caller":  # as nobody, tmp_path (0700) is out of reach anyway
        assert (tmp_path / "pwned.txt").read_text() == "pwned"


def test_missing_sandbox_refuses_with_one_line(snap: Snapshot,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    sandbox_mod.sandbox_problem.cache_clear()
    try:
        with pytest.raises(ReconError, match=r"OS sandbox of recon run is not available here "
                                             r"\(bwrap .* not installed\); .*--no-sandbox"):
            run_function(snap, f"{ESC}:identity")
        res = run_function(snap, f"{ESC}:identity", sandbox=False)  # waived explicitly
        assert res.ok and res.sandbox["os_sandbox"] == "none"
    finally:
        sandbox_mod.sandbox_problem.cache_clear()


def test_cli_no_sandbox_flag(snap: Snapshot, tmp_path: Path) -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:/nonexistent"}
    base = [sys.executable, "-m", "recon", "run", str(snap.root), f"{ESC}:identity", "--json"]
    refused = subprocess.run(base, capture_output=True, text=True, env=env, timeout=120,
                             check=False)
    assert refused.returncode != 0
    assert "not available here" in refused.stderr and "Traceback" not in refused.stderr
    waived = subprocess.run([*base, "--no-sandbox"], capture_output=True, text=True, env=env,
                            timeout=120, check=False)
    assert waived.returncode == 0, waived.stderr
    assert '"os_sandbox": "none"' in waived.stdout


def test_oversized_module_is_refused_before_parsing(tmp_path: Path) -> None:
    pkg = tmp_path / "bigpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    # 3 MB of valid Python in the module of the target: the slicer would parse it
    (pkg / "huge.py").write_text("def f():\n    return 1\n" + "X = 1\n" * 500_000)
    big = take_snapshot(f"dir:{pkg}", package="bigpkg", out=tmp_path / "snap")
    with pytest.raises(ReconError, match=r"^bigpkg/huge.py is 2.9 MiB, over the 2 MiB cap"):
        run_function(big, "bigpkg.huge:f")
    done = subprocess.run([sys.executable, "-m", "recon", "slice", str(big.root), "bigpkg.huge:f"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "bigpkg/huge.py is 2.9 MiB, over the 2 MiB cap" in done.stderr


def _host_uids_of(marker: str, deadline: float) -> list[str]:
    """The host's view (``Uid:`` of /proc/PID/status) of the process running ``marker``."""
    while time.monotonic() < deadline:
        for line in _alive(marker):
            pid = line.split(":")[0]
            with contextlib.suppress(OSError):
                status = Path(f"/proc/{pid}/status").read_text()
                return next(ln for ln in status.splitlines() if ln.startswith("Uid:")).split()[1:]
        time.sleep(0.02)
    return []


@pytest.mark.skipif(os.geteuid() != 0, reason="bwrap as nobody is what root does")
def test_root_starts_bwrap_as_nobody_when_it_can(tmp_path: Path) -> None:
    """Every source usable by nobody (here /usr/bin/sleep): the sandbox's 65534 is the host's."""
    assert sandbox_mod.sandbox_problem(as_nobody=True) is None
    root = tmp_path / "root"
    root.mkdir()
    marker = f"{1 + secrets.randbelow(10**6) / 10**6:.6f}"
    seen: list[list[str]] = []
    watcher = threading.Thread(target=lambda: seen.append(
        _host_uids_of(f"sleep {marker}", time.monotonic() + 10)))
    watcher.start()
    out = sandbox_mod.launch(["/usr/bin/sleep", marker], {}, root=root, work=root / "work",
                             limits=sandbox_mod.Limits(timeout=20), env={"PATH": "/usr/bin"},
                             slice_files=set(), read_only=[])
    watcher.join()
    assert out.confinement["host_user"] == "nobody" and out.returncode == 0
    assert out.confinement["process_cap"].endswith("RLIMIT_NPROC=512")
    assert seen == [["65534"] * 4]  # real, effective, saved, fs uid as the host sees them


def test_root_is_nobody_on_the_host_too(snap: Snapshot) -> None:
    """Started by root with the interpreter under a 0700 home: still nobody outside."""
    marker = f"{1 + secrets.randbelow(10**6) / 10**6:.6f}"
    seen: list[list[str]] = []
    watcher = threading.Thread(target=lambda: seen.append(
        _host_uids_of(f"sleep {marker}", time.monotonic() + 20)))
    watcher.start()
    res = run_function(snap, f"{ESC}:run_and_wait", args={"seconds": marker})
    watcher.join()
    assert res.value == 0
    expected = "65534" if os.geteuid() == 0 else str(os.getuid())
    assert seen == [[expected] * 4]
    assert res.sandbox["host_user"] == ("nobody" if os.geteuid() == 0 else "caller")


def test_host_sysctls_are_not_writable(snap: Snapshot) -> None:
    """Writing back the current vm.swappiness (harmless if it went through) must fail."""
    got = _value("write_back", snap, path="/proc/sys/vm/swappiness")
    assert str(got).startswith("error: ")
    assert _value("write_back", snap, path="/proc/sysrq-trigger").startswith("error: ")


def test_terminal_escapes_from_the_run_are_shown_not_sent(snap: Snapshot) -> None:
    done = subprocess.run([sys.executable, "-m", "recon", "run", str(snap.root),
                           f"{ESC}:terminal_escapes"], capture_output=True, text=True,
                          timeout=120, check=False, env={**os.environ, "COLUMNS": "400"})
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout
    assert "\\x1b[2J\\x1b]0;pwned\\x07 all good" in done.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="staging is what root does")
def test_private_tmpdir_still_runs(snap: Snapshot, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """TMPDIR inside a 0700 folder: the scratch root is staged like the interpreter."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    monkeypatch.setenv("TMPDIR", str(private))
    monkeypatch.setattr("tempfile.tempdir", None)
    res = run_function(snap, f"{ESC}:identity")
    assert res.ok and res.value["uid"] == 65534 and res.sandbox["host_user"] == "nobody"
    assert list(private.iterdir()) == []  # scratch root removed afterwards


def test_oversized_module_is_not_indexed(tmp_path: Path) -> None:
    """The index parses every module in recon's own processes: the cap holds there too."""
    from recon.index import load_index

    pkg = tmp_path / "bigpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("def small():\n    return 1\n")
    (pkg / "huge.py").write_text("def f():\n    return 1\n" + "X = 1\n" * 500_000)
    snap = take_snapshot(f"dir:{pkg}", package="bigpkg", out=tmp_path / "snap")
    idx = load_index(snap)
    assert "over the 2 MiB cap" in idx.errors["bigpkg/huge.py"]
    assert "bigpkg:small" in idx.functions


def test_a_report_over_the_cap_says_so(tmp_path: Path) -> None:
    """A 200 MiB return value is cut at the report cap: the error names the cap, not tampering."""
    pkg = tmp_path / "hugepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('def f():\n    return "x" * (200 << 20)\n')
    snap = take_snapshot(f"dir:{pkg}", package="hugepkg", out=tmp_path / "snap")
    with pytest.raises(ReconError, match=r"reached the 16 MiB cap on what a run brings back"):
        run_function(snap, "hugepkg:f")
