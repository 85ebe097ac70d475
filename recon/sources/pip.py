"""``pip:SPEC``: ``pip download --no-deps`` into recon's cache, then the wheel source.

An exact pin (``vllm==0.33.0``) already in the cache is reused without asking
pip anything, so repeated snapshots and CI runs download each release once.
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
        last = [ln for ln in proc.stderr.splitlines() if ln.startswith("ERROR")]
        raise ReconError(f"pip could not download {spec}: " + (last[0] if last else proc.stderr[-300:]))
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
