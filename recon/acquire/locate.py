"""Decide which copy of a package the image's own Python would import.

An image can hold the engine several times (system site-packages, a venv, a
``PYTHONPATH`` checkout, an editable install). This module rebuilds the
interpreter's ``sys.path`` from the image alone: ``PYTHONPATH``, the first
``python3`` on the image's ``PATH`` (symlinks resolved virtually), its venv
(``pyvenv.cfg``) or prefix, Debian's ``dist-packages`` and the user site, then
ranks the copies by it. No interpreter is run.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import TypedDict

from packaging.utils import canonicalize_name

from ..errors import ReconError
from .layers import ScanResult, parse_metadata, resolve_virtual
from .sources.base import ImageConfig

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_PYVER = re.compile(r"python(3\.\d+)")


@dataclass
class Copy:
    """One copy of the package: ``root`` is the folder on ``sys.path`` that holds it."""

    package: str
    root: str
    path: str  # the folder with the files (differs from root/package if that is a symlink)
    rank: int | None = None  # position of ``root`` on the reconstructed sys.path


@dataclass
class Interpreter:
    path: str | None
    version: str | None
    sys_path: list[str]
    venv: str | None = None


def extra_roots_from(scan: ScanResult, packages: list[str]) -> list[str]:
    """Roots discovered late: ``.pth`` path lines, editable-install maps, package symlinks."""
    out: list[str] = []
    for name, (text, _layer) in scan.metadata.items():
        if name.endswith(".pth"):
            for line in text.splitlines():
                line = line.strip()
                if line and not line.startswith(("#", "import ", "import\t")) and line.startswith("/"):
                    out.append(line.strip("/"))
        elif "__editable__" in name and name.endswith(".py"):
            for pkg, target in re.findall(r"'([\w.]+)':\s*'(/[^']+)'", text):
                if pkg in packages:
                    out.append(posixpath.dirname(target.strip("/")))
    for root in list(scan.tops):
        for pkg in packages:
            link = f"{root}/{pkg}"
            if link in scan.symlinks:
                real = resolve_virtual(link, scan.symlinks)
                out.append(posixpath.dirname(real))
    return sorted(set(out))


def find_copies(scan: ScanResult, packages: list[str]) -> list[Copy]:
    copies: list[Copy] = []
    for root, tops in scan.tops.items():
        for pkg in packages:
            if pkg not in tops:
                continue
            path = f"{root}/{pkg}"
            if path in scan.symlinks:
                path = resolve_virtual(path, scan.symlinks)
            if any(c.startswith(path + "/") for c in scan.captured):
                copies.append(Copy(pkg, root, path))
    return copies


def interpreter(scan: ScanResult, config: ImageConfig | None, python: str | None) -> Interpreter:
    env = config.env_dict() if config else {}
    sys_path = [p.strip("/") for p in (env.get("PYTHONPATH") or "").split(":") if p.strip("/")]
    interp = python.strip("/") if python else None
    if interp is None:
        for d in (env.get("PATH") or DEFAULT_PATH).split(":"):
            for exe in ("python3", "python"):
                cand = f"{d.strip('/')}/{exe}"
                if cand in scan.pythons:
                    interp = cand
                    break
            if interp:
                break
    if interp is None:
        return Interpreter(None, None, sys_path)
    try:
        real = resolve_virtual(interp, scan.symlinks)
    except ReconError:
        real = interp
    prefix = posixpath.dirname(posixpath.dirname(interp))
    base = posixpath.dirname(posixpath.dirname(real))
    cfg = scan.metadata.get(f"{prefix}/pyvenv.cfg")
    m = _PYVER.search(posixpath.basename(real)) or _PYVER.search(real)
    version = m.group(1) if m else None
    venv = None
    include_system = True
    if cfg:
        venv = prefix
        kv = dict(line.split("=", 1) for line in cfg[0].splitlines() if "=" in line)
        kv = {k.strip(): v.strip() for k, v in kv.items()}
        include_system = kv.get("include-system-site-packages", "false").lower() == "true"
        vm = re.match(r"(3\.\d+)", kv.get("version", kv.get("version_info", "")))
        version = version or (vm.group(1) if vm else None)
        if kv.get("home"):
            base = posixpath.dirname(kv["home"].strip("/"))
    if version is None:
        # fall back to the lib/pythonX.Y folders the image has
        vers = sorted({m.group(1) for r in scan.tops for m in [_PYVER.search(r)] if m})
        version = vers[-1] if len(vers) == 1 else None
    if venv:
        sys_path.append(f"{venv}/lib/python{version}/site-packages")
    sys_path.append(f"root/.local/lib/python{version}/site-packages")
    if include_system:
        sys_path += [f"{base}/lib/python{version}/site-packages",
                     f"{base}/local/lib/python{version}/dist-packages",
                     f"{base}/lib/python3/dist-packages",
                     f"{base}/lib/python{version}/dist-packages"]
    return Interpreter("/" + interp, version, sys_path, venv and "/" + venv)


def choose(copies: list[Copy], interp: Interpreter) -> tuple[Copy, list[Copy]]:
    """The copy that wins on ``sys.path``; raises if that cannot be decided."""
    for c in copies:
        c.rank = interp.sys_path.index(c.root) if c.root in interp.sys_path else None
    ranked = sorted(copies, key=lambda c: (c.rank is None, c.rank if c.rank is not None else 0, c.root))
    if len(ranked) > 1 and ranked[0].rank is None:
        where = ", ".join("/" + c.path for c in ranked)
        raise ReconError(f"{len(ranked)} copies of {ranked[0].package} ({where}) and none is on the "
                         "path of the image's Python: pick the interpreter with --python")
    return ranked[0], ranked[1:]


class DistInfo(TypedDict):
    """One installed distribution found in the image (``*.dist-info``/``*.egg-info``)."""

    name: str
    version: str
    location: str  # the folder holding it, absolute in the image
    layer: int | None  # the layer its metadata came from (None: not known)


def distributions(scan: ScanResult) -> list[DistInfo]:
    out: list[DistInfo] = []
    for name, (text, layer) in sorted(scan.metadata.items()):
        if name.endswith(("/METADATA", "/PKG-INFO")) or name.endswith(".egg-info"):
            meta = parse_metadata(text)
            if meta:
                out.append({"name": meta[0], "version": meta[1],
                            "location": "/" + name.split(".dist-info")[0].split(".egg-info")[0]
                            .rsplit("/", 1)[0], "layer": layer})
    return out


def package_version(scan: ScanResult, copy: Copy, dists: list[DistInfo],
                    src_files: dict[str, bytes | None]) -> str | None:
    want = canonicalize_name(copy.package)
    same_root = [d for d in dists if canonicalize_name(d["name"]) == want and d["location"] == "/" + copy.root]
    if same_root:
        return same_root[0]["version"]
    # the copy's own source says best what it is (a checkout on PYTHONPATH, an editable install)
    for data in src_files.values():
        if data:
            # `__version__ = "1.0"`, `__version__: str = "1.0"`, and setuptools-scm's
            # `__version__ = version = '0.33.0'` (vLLM's and SGLang's _version.py)
            m = re.search(rb"""__version__\s*(?::\s*str\s*)?=\s*(?:\w+\s*=\s*)?['"]([^'"]+)['"]""", data)
            if m:
                return m.group(1).decode()
    anywhere = [d for d in dists if canonicalize_name(d["name"]) == want]
    return anywhere[0]["version"] if anywhere else None
