"""``recon probe check``: load a bundle in a fresh interpreter, as the container will.

The bundle is put on ``PYTHONPATH`` of a new ``python`` process (``--python``
picks the interpreter, e.g. a venv with the engine installed); optionally the
targets' modules are imported so patching is exercised. The logs go to a
temporary folder and are read back with :func:`recon.probes.read_logs`, so the
check uses exactly the path the real run will use.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ReconError
from .bundle import load_bundle
from .logread import read_logs

NOBODY = 65534  # the unprivileged uid/gid of the second run (``nobody`` on Debian)


@dataclass
class CheckResult:
    """What loaded when the bundle ran in a fresh interpreter (and as an unprivileged user)."""

    bundle: str
    python: str
    returncode: int
    loaded: bool  # a VERIFY record was written
    python_version: str | None = None
    chained_sitecustomize: str | None = None
    log_error: str | None = None
    targets: dict[str, str] = field(default_factory=dict)
    imported: list[str] = field(default_factory=list)
    stderr: str = ""
    elapsed_ms: float = 0.0
    #: "module: ErrorType message" for each target module ``--import`` could not import
    import_failed: list[str] = field(default_factory=list)
    # the same check as uid 65534 (when run as root): "loaded", "NOT loaded: ...", or
    # "not run: ..." when that user cannot start the interpreter at all
    unprivileged: str | None = None

    @property
    def ok(self) -> bool:
        return (self.returncode == 0 and self.loaded and not self.log_error
                and not self.import_failed and not (self.unprivileged or "").startswith("NOT"))

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


#: what the check runs: import the modules named on its command line, one line per failure
#: (a fixed program: the module names travel as arguments, never inside the code)
CHECK_PROGRAM = """\
import importlib, sys
failed = False
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception as err:
        failed = True
        print("recon-check: cannot import", name + ":", type(err).__name__, err, file=sys.stderr)
sys.exit(3 if failed else 0)
"""
IMPORT_FAILED = "recon-check: cannot import "


def _run(cmd: list[str], bundle: Path, logdir: str, timeout: float, cwd: str | None = None
         ) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(bundle)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["RECON_PROBE_LOG_DIR"] = logdir
    env.pop("RECON_PROBE_DISABLE", None)
    try:
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ReconError(f"could not run {cmd[0]}: {err}") from err


def check_bundle(bundle: str | Path, *, python: str | None = None, import_targets: bool = False,
                 timeout: float = 120.0, unprivileged: bool = True) -> CheckResult:
    """Run ``python -c ...`` with the bundle on ``PYTHONPATH`` and report what it did.

    As root, the same run is repeated as uid/gid 65534 on a copy of the bundle
    (modes kept) with a log folder that user can write: a container's engine
    often runs unprivileged, and a file it cannot read means no probe there.
    """
    loaded = load_bundle(bundle)
    exe = python or sys.executable
    modules = sorted({t.module for t in loaded.spec.targets}) if import_targets else []
    code = ["-c", CHECK_PROGRAM, *modules]
    with tempfile.TemporaryDirectory(prefix="recon-probe-check-") as logdir:
        start = time.perf_counter()
        proc = _run([exe, *code], loaded.path, logdir, timeout)
        elapsed = (time.perf_counter() - start) * 1000
        summary = read_logs(logdir)
    result = CheckResult(bundle=str(loaded.path), python=exe, returncode=proc.returncode,
                         loaded=False, imported=modules, stderr=proc.stderr[-4000:],
                         elapsed_ms=round(elapsed, 1),
                         import_failed=[ln[len(IMPORT_FAILED):] for ln in proc.stderr.splitlines()
                                        if ln.startswith(IMPORT_FAILED)])
    mine = [p for p in summary.processes if p.verified]
    if mine:
        first = mine[0]
        result.loaded = True
        result.python_version = first.python
        result.chained_sitecustomize = first.chained_sitecustomize
        result.log_error = first.log_error
        result.targets = dict(first.targets)
    if unprivileged and os.geteuid() == 0:
        result.unprivileged = _check_unprivileged(loaded.path, exe, code, timeout)
    return result


def _check_unprivileged(bundle: Path, exe: str, code: list[str], timeout: float) -> str:
    """The check again as uid 65534: a copy of the bundle (modes kept), a log folder of its own."""
    with tempfile.TemporaryDirectory(prefix="recon-probe-check-nobody-") as work:
        os.chmod(work, 0o755)
        copy = Path(work) / "bundle"
        shutil.copytree(bundle, copy)  # copy2: the files keep their modes
        logdir = Path(work) / "logs"
        logdir.mkdir()
        os.chown(logdir, NOBODY, NOBODY)
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            return "not run: setpriv (util-linux) is not installed"
        cmd = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--",
               exe, *code]
        proc = _run(cmd, copy, str(logdir), timeout, cwd=work)
        summary = read_logs(logdir) if os.access(logdir, os.R_OK) else None
        verified = [p for p in summary.processes if p.verified] if summary else []
    if proc.returncode in (126, 127) or (proc.returncode and "ermission denied" in proc.stderr
                                          and not verified):
        return f"not run: uid {NOBODY} cannot start {exe} ({proc.stderr.strip()[-200:]})"
    if not verified:
        return f"NOT loaded as uid {NOBODY} (exit {proc.returncode}): the bundle or its log " \
               "folder is not readable/writable by an unprivileged user"
    if verified[0].log_error:
        return f"NOT loaded as uid {NOBODY}: {verified[0].log_error}"
    return f"loaded as uid {NOBODY}"
