"""``pip:SPEC``: ``pip download --no-deps`` into recon's cache, then the wheel source.

An exact pin (``vllm==0.33.0``) already in the cache is reused without asking
pip anything, so repeated snapshots and CI runs download each release once.
An open spec (``vllm``, ``vllm>=0.30``) asks PyPI for the newest release; when
PyPI cannot be reached, the newest cached wheel the spec allows is used and a
warning line says so, with pip's own error (``recon demo`` offline).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from ..errors import ReconError
from ..paths import cache_dir
from .base import Image
from .wheel import open_wheel


def wheels_dir() -> Path:
    d = cache_dir() / "wheels"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _cached(name: str, version: str) -> Path | None:
    want = canonicalize_name(name)
    for whl in sorted(wheels_dir().glob("*.whl")):
        try:
            wname, wver, _, _ = parse_wheel_filename(whl.name)
        except Exception:
            continue
        if wname == want and str(wver) == version:
            return whl
    return None


def pip_failure(stderr: str) -> str:
    """pip's own words for a failed download: its ERROR line, and the connection error behind
    it when there is one (offline, pip only says "from versions: none")."""
    lines = stderr.splitlines()
    errors = [ln.strip() for ln in lines if ln.startswith("ERROR")]
    network = []
    for ln in lines:
        m = re.search(r"(Failed to establish a new connection: [^'\")]+|ConnectTimeoutError\([^)]*\)|"
                      r"Temporary failure in name resolution|Network is unreachable|ProxyError|"
                      r"SSLError\([^)]*\))", ln)
        if m:
            network.append(m.group(1).strip())
    said = errors[:1] + network[-1:]
    return "; ".join(said) if said else stderr.strip()[-300:]


def newest_cached(req: Requirement) -> Path | None:
    """The newest wheel of ``req``'s project in the cache that ``req`` allows (None if none)."""
    want = canonicalize_name(req.name)
    found = {}
    for whl in wheels_dir().glob("*.whl"):
        try:
            wname, wver, _, _ = parse_wheel_filename(whl.name)
        except Exception:
            continue
        if wname == want:
            found[wver] = whl
    allowed = list(req.specifier.filter(found))  # pip's rule: pre-releases only if nothing else
    return found[max(allowed)] if allowed else None


def fetch_wheel(spec: str) -> Path:
    """Return the cached wheel for ``spec``, downloading it once if needed."""
    try:
        req = Requirement(spec)
    except InvalidRequirement as err:
        raise ReconError(f"not a pip requirement: {spec!r} ({err})") from err
    pins = [s.version for s in req.specifier if s.operator in ("==", "===")]
    if len(pins) == 1 and "*" not in pins[0] and (hit := _cached(req.name, pins[0])):
        return hit
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
           "--disable-pip-version-check", "-d", str(wheels_dir()), spec]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        why = pip_failure(proc.stderr)
        newest = None if len(pins) == 1 else newest_cached(req)
        if newest is None:
            raise ReconError(f"pip could not download {spec}: {why}")
        version = parse_wheel_filename(newest.name)[1]
        print(f"recon: warning: PyPI unreachable for {spec} ({why}); using the newest cached "
              f"release, {req.name} {version}", file=sys.stderr, flush=True)
        return newest
    found = re.findall(r"(?:Saved|File was already downloaded) (\S+\.whl)", proc.stdout)
    if not found:
        raise ReconError(f"pip download {spec} gave no wheel (sdist only?)")
    return Path(found[-1])


def open_pip(spec: str) -> Image:
    whl = fetch_wheel(spec)
    img = open_wheel(str(whl))
    img.ref = f"pip:{spec}"
    img.scheme = "pip"
    img.extra["wheel_path"] = str(whl)
    return img
