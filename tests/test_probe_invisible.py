"""The probe runtime changes nothing in the host program: the matrix of issue 17.

Every program of :mod:`probe_hosts.hosts` runs twice in a real interpreter,
without and with a real bundle (``sitecustomize.py`` on ``PYTHONPATH``, as the
README tells users), and must give the same exit code, stdout and stderr; the
expected output is the program's own output without the bundle. Then the
probe log must hold what the host's check says. The programs marked ``core``
also run on every other CPython 3.10+ found (pyenv, or ``$RECON_PROBE_PYTHONS``),
since the runtime's instrumentation depends on the compiler of each version;
``RECON_PROBE_ALL_VERSIONS=1`` runs the whole matrix on each. A program whose
traceback depends on where a timer signal lands compares its last lines only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
from test_probe_support import PY, clean_env, make_bundle, write

sys.path.insert(0, str(Path(__file__).parent))
from probe_hosts.hosts import HOSTS, Host  # noqa: E402

HERE = Path(__file__).parent / "probe_hosts"
NOBODY = 65534
SYSTEM_PY = "/usr/bin/python3.11"


def _other_pythons() -> list[str]:
    """CPython 3.10+ interpreters besides this one ($RECON_PROBE_PYTHONS, else pyenv's)."""
    listed = os.environ.get("RECON_PROBE_PYTHONS")
    found = listed.split(os.pathsep) if listed else [
        str(p) for p in sorted(Path.home().glob(".pyenv/versions/3.1[0-9]*/bin/python"))]
    mine = os.path.realpath(PY)
    return [p for p in found if os.path.exists(p) and os.path.realpath(p) != mine]


def _has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


CASES = [pytest.param(h, PY, id=h.name) for h in HOSTS.values()]
_EVERY = bool(os.environ.get("RECON_PROBE_ALL_VERSIONS"))  # the whole matrix on each version
CASES += [pytest.param(h, other, id=f"{h.name}-py{Path(other).parents[1].name}")
          for other in _other_pythons() for h in HOSTS.values() if h.core or _EVERY]


def _lay_out(h: Host, app: Path) -> None:
    shutil.copy(HERE / "eng.py", app / "eng.py")
    write(app, "main.py", h.main)
    for name, text in h.files.items():
        if name.startswith("@zip:"):
            archive, _, member = name[5:].partition("/")
            with zipfile.ZipFile(app / archive, "w") as zf:
                zf.writestr(member, text)
        else:
            write(app, name, text)


def _records(logdir: Path) -> list[dict[str, Any]]:
    """Every complete record (a file size limit may cut the last line of a file)."""
    out = []
    for path in sorted(logdir.glob("probe-*.jsonl")) if logdir.is_dir() else []:
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            try:
                out.append(json.loads(line))
            except ValueError:  # only a file's last line can be torn (it may end in "}" too)
                assert i == len(lines) - 1, line
    return out


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float,
         **popen: Any) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL, **popen)
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"{cmd} hung (more than {timeout} s): {err.stdout!r} {err.stderr!r}")


def _limit_file_size() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))


def _ro_mount_cmd(logs: Path, python: str) -> list[str]:
    steps = f"mount --bind {logs} {logs} && mount -o remount,bind,ro {logs} && exec {python} main.py"
    return ["unshare", "-m", "sh", "-c", steps]


def _full_mount_cmd(logs: Path, python: str) -> list[str]:
    """A 4 KiB tmpfs as the log folder: full after the first records."""
    steps = f"mount -t tmpfs -o size=4k tmpfs {logs} && exec {python} main.py"
    return ["unshare", "-m", "sh", "-c", steps]


def _can_ro_mount(tmp: Path) -> bool:
    d = tmp / "mount-check"
    d.mkdir()
    steps = f"mount --bind {d} {d} && mount -o remount,bind,ro {d}"
    return subprocess.run(["unshare", "-m", "sh", "-c", steps], capture_output=True).returncode == 0


def _setup(h: Host, tmp: Path, python: str) -> tuple[Path, Path, Path, str]:
    """Folder, bundle, log folder and interpreter for one host program."""
    if h.mode == "nobody":
        if os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists(SYSTEM_PY):
            pytest.skip("needs root, setpriv and /usr/bin/python3.11 to run as uid 65534")
        tmp = Path(tempfile.mkdtemp(prefix="recon-probe-nobody-"))
        os.chmod(tmp, 0o755)
        python = SYSTEM_PY
    app = tmp / "app"
    app.mkdir(parents=True)
    _lay_out(h, app)
    options = dict(h.options)
    logs = tmp / "logs"
    if options.get("log_dir") == "@blocked":
        (tmp / "a-file").write_text("not a folder")
        options["log_dir"] = str(tmp / "a-file" / "logs")
    options.setdefault("log_dir", str(logs))
    bundle = make_bundle(tmp, h.targets, **options)
    if h.mode == "nobody":
        logs.mkdir()
        os.chown(logs, NOBODY, NOBODY)
        for path in app.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        app.chmod(0o777)
    if h.mode in ("ro-mount", "full-mount"):
        if not _can_ro_mount(tmp):
            pytest.skip("needs CAP_SYS_ADMIN for a read-only bind mount (unshare -m)")
        logs.mkdir()
    return app, bundle, logs, python


def _both(h: Host, app: Path, bundle: Path, logs: Path, python: str, tmp: Path
          ) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    cmd = [python, *(["-I"] if h.mode == "isolated" else []), "main.py"]
    popen: dict[str, Any] = {}
    extra: list[str] = []
    if h.mode == "fsize":
        popen["preexec_fn"] = _limit_file_size
    if h.mode == "nobody":
        cmd = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--", *cmd]
    if h.mode == "ro-mount":
        cmd = _ro_mount_cmd(logs, python)
    if h.mode == "full-mount":
        cmd = _full_mount_cmd(logs, python)
    if h.mode == "image-site":
        site = tmp / "image-site"
        write(site, "sitecustomize.py", "import sys\nprint('image sitecustomize ran', "
              "file=sys.stderr)\nimport eng\nMARKER = 42\n")
        extra = [str(site)]
    env = clean_env(PYTHONPATH=os.pathsep.join(extra + [str(app)]))
    plain = _run(cmd, app, env, h.timeout, **popen)
    first = [str(bundle)]
    if h.mode == "two-copies":
        twin = tmp / "bundle-copy"
        shutil.copytree(bundle, twin)
        first.append(str(twin))
    env = clean_env(PYTHONPATH=os.pathsep.join(first + extra + [str(app)]))
    if h.mode == "disabled":
        env["RECON_PROBE_DISABLE"] = "1"
    probed = _run(cmd, app, env, h.timeout, **popen)
    return plain, probed


@pytest.mark.parametrize(("h", "python"), CASES)
def test_host_program_unchanged(h: Host, python: str, tmp_path: Path) -> None:
    if h.torch and (python != PY or not _has_torch()):
        pytest.skip("needs torch in this interpreter")
    app, bundle, logs, python = _setup(h, tmp_path, python)
    try:
        plain, probed = _both(h, app, bundle, logs, python, tmp_path)
        assert probed.returncode == plain.returncode, (plain.stderr, probed.stderr)
        assert probed.stdout == plain.stdout
        if h.stderr_tail is None:
            assert probed.stderr == plain.stderr
        else:  # the traceback's last lines; and no frame of the runtime in it (3.10: one)
            tail = slice(-h.stderr_tail, None)
            assert probed.stderr.splitlines()[tail] == plain.stderr.splitlines()[tail]
            frames = probed.stderr.count("_recon_probe_runtime")
            assert frames <= (1 if "/3.10" in python else 0), probed.stderr
        assert plain.stdout or plain.stderr, "the host program printed nothing"
        h.expect(_records(logs))
    finally:
        if h.mode == "nobody":
            shutil.rmtree(app.parent, ignore_errors=True)


def test_matrix_covers_the_issue() -> None:
    """At least 60 programs, and every class of issue 17 is represented."""
    assert len(HOSTS) >= 60
    for name in ("traceback_uncaught", "warnings_stacklevel", "getframe_caller",
                 "recursion_depth", "recursion_raised_limit", "builtin_as_class_attribute",
                 "builtin_module_target", "frozen_module_target", "registry_and_copies",
                 "pickle_function_and_method", "type_hints_and_annotations",
                 "defaults_and_kwdefaults", "inspect_answers", "property_subclass",
                 "arg_getattr", "arg_lazy_module_not_loaded", "arg_dict_keys",
                 "arg_repr_takes_held_lock", "host_closes_fds_and_reuses",
                 "unwritable_log_dir_parent_reads_stdout_first", "two_copies_on_pythonpath",
                 "fork_keeps_error_budget", "unprivileged_user", "decorated_method_expression",
                 "threads", "pool_spawn", "pool_fork", "pool_forkserver", "asyncio_gather",
                 "generators", "signals_during_logging", "interpreter_shutdown",
                 "zip_imported_module", "frozen_stdlib_target", "c_extension_target",
                 "file_size_limit_reached", "read_only_log_mount"):
        assert name in HOSTS, name
