"""Real releases of a PyPI package, in order: what ``bisect --versions vllm==A..B`` walks.

The list comes from ``pip index versions`` through the machine's own pip
configuration (index URL, mirrors, find-links), so it names exactly the
releases ``pip download`` can fetch here, yanked ones excluded. Versions
are ordered with :mod:`packaging.version`, never as strings (``0.10`` comes
after ``0.9``); pre-releases are left out unless a bound is one.
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from ..errors import ReconError

_RANGE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^.\s][^\s]*?)?\s*\.\.\s*([^\s]*)\s*$")
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(.*)$")


@functools.lru_cache(maxsize=32)
def pypi_versions(name: str) -> tuple[Version, ...]:
    """Every release of ``name`` that pip can install here, oldest first."""
    cmd = [sys.executable, "-m", "pip", "index", "versions", name, "--pre",
           "--disable-pip-version-check"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"^Available versions:\s*(.+)$", proc.stdout, re.M)
    if proc.returncode != 0 or not m:
        errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("ERROR")]
        raise ReconError(f"cannot list the releases of {name!r} on PyPI: "
                         + (errors[0] if errors else (proc.stderr.strip()[-200:] or "no answer")))
    out = []
    for text in m.group(1).split(","):
        try:
            out.append(Version(text.strip()))
        except InvalidVersion:
            continue
    return tuple(sorted(set(out)))


def is_range(spec: str) -> bool:
    """``vllm==0.28.0..0.33.0`` or ``vllm>=0.28,<0.34`` (a specifier set), not a list of pins."""
    if _RANGE.match(spec):
        return True
    m = _NAME.match(spec)
    return m is not None and re.match(r"^(>=|<=|>|<|~=|!=)", m.group(2).strip()) is not None


def resolve_range(spec: str) -> tuple[str, list[str]]:
    """``vllm==0.28.0..0.33.0`` -> ``("vllm", ["0.28.0", ..., "0.33.0"])``: real releases, in order.

    Both bounds are inclusive and either may be left out (``vllm==0.30.0..``
    runs to the latest release). A PEP 440 specifier set
    (``vllm>=0.28,<0.34``) is accepted too.
    """
    m = _RANGE.match(spec)
    if m:
        name, lo_text, hi_text = m.group(1), m.group(2) or "", m.group(3) or ""
        try:
            lo = Version(lo_text) if lo_text else None
            hi = Version(hi_text) if hi_text else None
        except InvalidVersion as err:
            raise ReconError(f"bad version range {spec!r}: {err}") from err
        if lo is not None and hi is not None and lo > hi:
            raise ReconError(f"bad version range {spec!r}: {lo} comes after {hi}")
        pre = bool((lo and lo.is_prerelease) or (hi and hi.is_prerelease))
        chosen = [v for v in pypi_versions(name)
                  if (lo is None or v >= lo) and (hi is None or v <= hi)
                  and (pre or not v.is_prerelease)]
        missing = [str(b) for b in (lo, hi) if b is not None and b not in pypi_versions(name)]
    else:
        nm = _NAME.match(spec)
        if not nm:
            raise ReconError(f"not a version range: {spec!r}")
        name = nm.group(1)
        try:
            specifier = SpecifierSet(nm.group(2).strip())
        except InvalidSpecifier as err:
            raise ReconError(f"bad version specifier in {spec!r}: {err}") from err
        chosen = [v for v in pypi_versions(name) if v in specifier]
        missing = []
    if missing:
        raise ReconError(f"{name} {', '.join(missing)} is not a release pip can fetch here "
                         f"(releases: {_near(name, missing[0])})")
    if not chosen:
        raise ReconError(f"no release of {name} matches {spec!r}")
    return name, [str(v) for v in chosen]


def previous_release(name: str, version: str) -> str | None:
    """The release just before ``version`` (same pre-release policy), or None for the first one."""
    want = Version(version)
    older = [v for v in pypi_versions(name) if v < want and (want.is_prerelease or not v.is_prerelease)]
    return str(older[-1]) if older else None


def _near(name: str, version: str) -> str:
    """The releases around ``version``, to show in an error message."""
    import bisect

    allv = pypi_versions(name)
    try:
        at = bisect.bisect_left(allv, Version(version))
    except InvalidVersion:
        at = len(allv)
    return ", ".join(str(v) for v in allv[max(0, at - 3): at + 3])
