"""Helpers shared by the probe tests: real bundles, real interpreters, real log files.

Every probed program is run twice, without and with the bundle on
``PYTHONPATH``, so each test can assert that the program's own output did not
change, then read what the probes wrote.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from recon.probes import build_spec, new_bundle

PY = sys.executable


def make_bundle(tmp_path: Path, targets: list[str], name: str = "bundle", **options: Any) -> Path:
    """Write a bundle with :func:`recon.probes.new_bundle`; logs go to ``tmp_path/logs``."""
    options.setdefault("log_dir", str(tmp_path / "logs"))
    snapshot = options.pop("snapshot", None)
    copies = options.pop("copies", None)
    spec = build_spec(targets, **options)
    if copies:
        for t in spec.targets:
            t.copies = list(copies.get(t.qualname, []))
    return new_bundle(tmp_path / name, spec, snapshot=snapshot).path


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k != "PYTHONPATH" and not k.startswith("RECON_PROBE")}
    env.update(extra)
    return env


def run_py(args: list[str], *, cwd: Path, bundle: Path | None = None,
           pythonpath: tuple[Path, ...] = (), env: dict[str, str] | None = None,
           flags: tuple[str, ...] = (), timeout: float = 90,
           **popen: Any) -> subprocess.CompletedProcess[str]:
    """``python [flags] args...`` with the bundle (if any) first on PYTHONPATH."""
    paths = ([str(bundle)] if bundle else []) + [str(p) for p in pythonpath] + [str(cwd)]
    full_env = clean_env(**(env or {}))
    full_env["PYTHONPATH"] = os.pathsep.join(paths)
    return subprocess.run([PY, *flags, *args], cwd=cwd, env=full_env, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL, **popen)


def run_both(args: list[str], *, cwd: Path, bundle: Path, **kw: Any
             ) -> subprocess.CompletedProcess[str]:
    """Run without and with the bundle; assert same exit code and stdout; return the probed run."""
    plain = run_py(args, cwd=cwd, **kw)
    probed = run_py(args, cwd=cwd, bundle=bundle, **kw)
    assert plain.returncode == 0, plain.stderr
    assert probed.returncode == plain.returncode, probed.stderr
    assert probed.stdout == plain.stdout, (plain.stdout, probed.stdout, probed.stderr)
    return probed


def records(logdir: Path) -> list[dict[str, Any]]:
    """Every record of every log file; each line must be one complete JSON object."""
    out = []
    for path in sorted(logdir.glob("probe-*.jsonl")):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            rec["_file"] = path.name
            out.append(rec)
    return out


def kind(recs: list[dict[str, Any]], name: str, target: str | None = None) -> list[dict[str, Any]]:
    return [r for r in recs if r["kind"] == name and (target is None or r.get("target") == target)]
