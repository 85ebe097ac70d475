"""``pip:SPEC``: ``pip download --no-deps`` into recon's cache, then the wheel source.

An exact pin (``vllm==0.33.0``) already in the cache is reused without asking
pip anything, so repeated snapshots and CI runs download each release once.
An open spec (``vllm``, ``vllm>=0.30``) asks PyPI for the newest release; when
PyPI cannot be reached, the newest cached wheel the spec allows is used and a
warning line says so, with pip's own error (``recon demo`` offline).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from ...errors import ReconError
from ...paths import cache_dir
from .base import Image
from .wheel import open_wheel

if TYPE_CHECKING:
    from ...progress import Task


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
    proc = _download(cmd, spec)
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


#: pip's "Downloading NAME.whl (330.2 MB)" line: the size of the wheel it is about to fetch
#: (not a ".whl.metadata" file pip may fetch first, nor a size in bytes too small to matter)
_SIZE = re.compile(r"Downloading \S+\.whl \((\d+(?:\.\d+)?) (kB|MB|GB)\)")
_UNITS = {"kB": 1e3, "MB": 1e6, "GB": 1e9}


class _Meter:
    """What the download line says, honestly: a total only once pip has said the wheel's
    size, the bytes done never above it and never going back.

    The bytes come from the largest file in pip's temporary folder (the wheel being
    written; pip may copy it, or drop it once it is saved, so neither the sum nor the
    current size of that folder is the download). pip rounds the size it prints, so
    what is done is capped at the total until pip has finished.
    """

    def __init__(self, line: Task) -> None:
        self.line = line
        self.total: float | None = None
        self.done = 0.0
        self._lock = threading.Lock()

    def said(self, text: str) -> None:
        if m := _SIZE.search(text):
            with self._lock:
                self.total = float(m.group(1)) * _UNITS[m.group(2)]
                self._show()

    def saw(self, nbytes: float) -> None:
        with self._lock:
            self.done = max(self.done, float(nbytes))
            self._show()

    def finished(self) -> None:
        """pip saved the wheel: done is the whole of it."""
        with self._lock:
            if self.total is not None:
                self.done = max(self.done, self.total)
            self._show()

    def _show(self) -> None:
        done = self.done if self.total is None else min(self.done, self.total)
        self.line.update(completed=done, total=self.total)


def _download(cmd: list[str], spec: str) -> subprocess.CompletedProcess[str]:
    """Run ``pip download``, showing its bytes as a progress line (when the CLI shows progress).

    pip draws its own bar only on a terminal it owns; here its output is read, so
    the total comes from its "Downloading NAME (SIZE)" line and the bytes so far
    from the file growing in a temporary folder of recon's own, given as TMPDIR
    (:class:`_Meter`).
    """
    import shutil
    import tempfile

    from ... import progress

    (cache_dir() / "tmp").mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="pip-", dir=cache_dir() / "tmp"))
    # unbuffered: pip's size line arrives when pip prints it, before the bytes, not at its exit
    env = dict(os.environ, TMPDIR=str(scratch), PYTHONUNBUFFERED="1")
    out: list[str] = []
    try:
        with progress.step(f"downloading {spec}", unit="bytes") as line, \
                subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=env) as proc:
            stdout, stderr = proc.stdout, proc.stderr
            assert stdout is not None and stderr is not None
            meter = _Meter(line)
            err: list[str] = []
            reader = threading.Thread(target=lambda: err.append(stderr.read()), daemon=True)
            reader.start()
            done = threading.Event()

            def poll() -> None:
                while not done.wait(0.25):
                    meter.saw(_largest_file(scratch))

            poller = threading.Thread(target=poll, daemon=True)
            poller.start()
            for text in stdout:
                out.append(text)
                meter.said(text)
            proc.wait()
            done.set()
            reader.join()
            poller.join()
            if proc.returncode == 0:
                meter.finished()
        return subprocess.CompletedProcess(cmd, proc.returncode, "".join(out), "".join(err))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _largest_file(root: Path) -> int:
    """Bytes of the largest regular file under ``root`` (files may vanish while pip works)."""
    largest = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                largest = max(largest, os.lstat(os.path.join(folder, name)).st_size)
    return largest


def open_pip(spec: str) -> Image:
    whl = fetch_wheel(spec)
    img = open_wheel(str(whl))
    img.ref = f"pip:{spec}"
    img.scheme = "pip"
    img.extra["wheel_path"] = str(whl)
    return img
