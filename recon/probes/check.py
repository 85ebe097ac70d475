"""``recon probe check``: load a bundle in a fresh interpreter, as the container will.

The bundle is put on ``PYTHONPATH`` of a new ``python`` process (``--python``
picks the interpreter, e.g. a venv with the engine installed); optionally the
targets' modules are imported so patching is exercised. The logs go to a
temporary folder and are read back with :func:`recon.probes.read_logs`, so the
check uses exactly the path the real run will use.
"""

from __future__ import annotations

import os
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


@dataclass
class CheckResult:
    """What loaded when the bundle ran in a fresh interpreter."""

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

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.loaded and not self.log_error

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def check_bundle(bundle: str | Path, *, python: str | None = None, import_targets: bool = False,
                 timeout: float = 120.0) -> CheckResult:
    """Run ``python -c ...`` with the bundle on ``PYTHONPATH`` and report what it did."""
    loaded = load_bundle(bundle)
    exe = python or sys.executable
    modules = sorted({t.module for t in loaded.spec.targets}) if import_targets else []
    code = ("import importlib, sys\n"
            f"for m in {modules!r}:\n"
            "    try:\n        importlib.import_module(m)\n"
            "    except Exception as e:\n        print('recon-check: cannot import', m, e,"
            " file=sys.stderr)\n")
    with tempfile.TemporaryDirectory(prefix="recon-probe-check-") as logdir:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(loaded.path)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        env["RECON_PROBE_LOG_DIR"] = logdir
        env.pop("RECON_PROBE_DISABLE", None)
        start = time.perf_counter()
        try:
            proc = subprocess.run([exe, "-c", code], env=env, capture_output=True, text=True,
                                  timeout=timeout, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise ReconError(f"could not run {exe}: {err}") from err
        elapsed = (time.perf_counter() - start) * 1000
        summary = read_logs(logdir)
    result = CheckResult(bundle=str(loaded.path), python=exe, returncode=proc.returncode,
                         loaded=False, imported=modules, stderr=proc.stderr[-4000:],
                         elapsed_ms=round(elapsed, 1))
    mine = [p for p in summary.processes if p.verified]
    if mine:
        first = mine[0]
        result.loaded = True
        result.python_version = first.python
        result.chained_sitecustomize = first.chained_sitecustomize
        result.log_error = first.log_error
        result.targets = dict(first.targets)
    return result
