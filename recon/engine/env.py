"""The release's environment: its own pure-Python requirements, built once per release.

Engine mode imports the snapshot's package for real, so the package's own
dependencies must be importable (transformers at the version the release pins,
pydantic, msgspec, ...). They come from the wheel's ``Requires-Dist`` (the
release's word, not recon's), into a virtual environment of its own. It sees its own
packages and, of recon's interpreter, only the **installed CPU torch** (its folders linked
into the environment: :func:`_reuse_torch`), whose own requirements (sympy,
typing_extensions, ...) are installed beside the release's like any other: a CUDA torch is
never installed, and nothing else of the interpreter running recon (a virtual
environment's packages, or its base Python's) is seen, so what is installed is decided
from exactly what the environment will import.

What is left out, and why (listed in ``env.json`` and in every result):

* the torch family (``torch``, ``torchvision``, ``torchaudio``, ``torchcodec``):
  the installed CPU build is used;
* packages that only make sense with a GPU (CUDA kernels, their compilers and
  runtimes: ``GPU_ONLY`` below). Measured on vLLM 0.26.0 and 0.33.0: none of
  them is imported on the path that builds a ``VllmConfig`` and reads its
  decisions, and several (triton, flashinfer) would pull CUDA wheels of
  hundreds of MB.

Nothing a downloaded package ships runs on the host while the environment is
built: the environment's own interpreter is never started here (a wheel's
``.pth`` runs whenever it starts). The installer runs under recon's interpreter
and writes into the environment's folder (``--prefix``), the bytecode is
compiled by recon's interpreter with site processing off (compiling reads a
file, it never runs it), and the version of torchvision that fits the
installed torch is asked of recon's own pip. The environment's interpreter
first starts inside the sandbox, as the engine.

Requirements are installed with ``--no-deps`` and the closure is walked by
recon (each installed distribution's own ``Requires-Dist``, same exclusions),
so pip never resolves a CUDA torch or triton in behind the table. Each is
pinned to the version its users had when the release came out
(:mod:`recon.engine.asof`), not to today's newest. Wheels are
downloaded once into a shared wheelhouse and installed with ``--no-index``
from it (by uv where installed, else pip), so a second release is fast and an
offline machine with the wheels cached works.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from email.parser import Parser
from importlib import metadata
from pathlib import Path
from typing import cast

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from .. import progress
from ..errors import ReconError, require_package
from ..paths import cache_dir
from .asof import AsOf, IndexTimes, current_until, release_day

#: the installed CPU torch is imported instead (never a CUDA build)
TORCH_FAMILY = ("torch", "torchvision", "torchaudio", "torchcodec")
#: name prefixes of packages that only run with a GPU (kernels, CUDA runtimes, their compilers)
GPU_ONLY = ("nvidia-", "cuda-", "cupy", "flashinfer", "xformers", "tilelang",
            "quack-kernels", "tokenspeed", "humming-kernels",
            "pynvvideocodec", "fastsafetensors", "instanttensor", "nvtx", "deep-gemm",
            "flash-attn", "vllm-flash-attn", "pynvml", "amdsmi", "ray", "mooncake",
            "nixl", "lmcache", "cutlass", "b12x", "helion", "zentorch", "intel-",
            # SGLang's kernels and CUDA-only helpers (measured on 0.5.5, 0.5.10, 0.5.23)
            "sgl-kernel", "sglang-kernel", "sgl-deep-ep", "sgl-deep-gemm", "sgl-flash-mla",
            "nvshmem4py", "torch-memory-saver")
#: the import names of GPU-only distributions (matched by name prefix, as in GPU_ONLY), so
#: that engine mode can stand in for the ones a release requires: on a CUDA server they are
#: installed, the release imports them at module level (SGLang: ``from sgl_kernel import
#: ...``; vLLM 0.22.0's compressed-tensors: ``humming``) and decides by their presence
#: (``has_flashinfer``). NVML (``nvidia-ml-py``) is not among them: without it the release
#: asks ``torch.cuda``, which answers for the declared GPU
GPU_ONLY_MODULES: dict[str, tuple[str, ...]] = {
    "sgl-kernel": ("sgl_kernel",), "sglang-kernel": ("sgl_kernel",),
    "flashinfer": ("flashinfer",), "flash-attn": ("flash_attn",),
    "sgl-deep-gemm": ("deep_gemm",), "deep-gemm": ("deep_gemm",), "sgl-deep-ep": ("deep_ep",),
    "sgl-flash-mla": ("flash_mla",), "nvidia-cutlass-dsl": ("cutlass",),
    "quack-kernels": ("quack",), "tilelang": ("tilelang",), "humming-kernels": ("humming",),
    "cuda-python": ("cuda",), "cuda-bindings": ("cuda",),
    "torch-memory-saver": ("torch_memory_saver",), "nvshmem4py": ("nvshmem",),
    "xformers": ("xformers",), "flashinfer-cubin": ("flashinfer_cubin",),
    "tokenspeed-mla": ("tokenspeed_mla",), "fastsafetensors": ("fastsafetensors",),
    "instanttensor": ("instanttensor",), "nvtx": ("nvtx",),
    "nvidia-cudnn-frontend": ("cudnn",)}
#: what the release's torch (a CUDA build on Linux) brings along and vLLM imports at module
#: level even without a GPU (measured on 0.33.0: mamba ops build ``triton.Config`` lists);
#: the CPU torch does not bring it, so it is added, unpinned, and listed in ``env.json``
TORCH_COMPANIONS = ("triton",)
_ROUNDS = 6
#: bumped when the way an environment is built changes (old ones are then rebuilt)
ENV_FORMAT = "8"
#: torch-family packages the release's dependencies import for some models (transformers'
#: image processors import torchvision for vision-language configs): installed at the
#: version pip resolves *for the installed torch*, without dependencies, and listed
TORCH_MATCHED = ("torchvision",)
#: not resolved as of the release: they go with the installed torch, not with the release
_UNDATED = {canonicalize_name(n) for n in (*TORCH_COMPANIONS, *TORCH_MATCHED)}


class EnvError(ReconError):
    """The release's environment could not be built (pip failed, no metadata)."""

    exit_code = 6


@dataclass
class ReleaseEnv:
    """A built environment: its interpreter, site folder and what it holds or left out."""

    root: Path
    python: Path
    site: Path
    record: dict[str, object]
    built_seconds: float  # 0.0 when it came from the cache


def skip_reason(name: str) -> str | None:
    """Why a requirement is not installed (None: it is)."""
    n = canonicalize_name(name)
    if n in TORCH_FAMILY:
        return "torch family: the installed CPU torch is used"
    if n.startswith(GPU_ONLY):
        return "GPU-only (kernels or CUDA runtime)"
    return None


def gpu_only_modules(not_installed: Iterable[str]) -> list[str]:
    """Import names of the GPU-only distributions an environment left out (``GPU_ONLY_MODULES``)."""
    names: set[str] = set()
    for dist in not_installed:
        n = canonicalize_name(dist)
        for prefix, modules in GPU_ONLY_MODULES.items():
            if n.startswith(prefix):
                names.update(modules)
    return sorted(names)


def wheel_metadata(wheel: Path) -> str:
    """The ``METADATA`` text of a wheel's dist-info."""
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
        if not names:
            raise EnvError(f"{wheel.name} has no dist-info/METADATA")
        return zf.read(names[0]).decode("utf-8", "replace")


def requirements(metadata_text: str, extras: Iterable[str] = ()) -> list[Requirement]:
    """``Requires-Dist`` entries that apply to this interpreter (markers evaluated)."""
    msg = Parser().parsestr(metadata_text, headersonly=True)
    return applicable(msg.get_all("Requires-Dist") or [], extras)


def applicable(lines: Iterable[str], extras: Iterable[str] = ()) -> list[Requirement]:
    """The requirement lines whose markers hold here, for the base and the given extras."""
    out = []
    for line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is not None:
            envs = [{**default_environment(), "extra": e} for e in ("", *extras)]
            if not any(req.marker.evaluate(env) for env in envs):  # type: ignore[arg-type]
                continue
        out.append(req)
    return out


def _plain(req: Requirement) -> str:
    """The requirement without its marker (already evaluated) and without extras."""
    return f"{req.name}{req.specifier}"


def env_key(package: str, version: str, reqs: list[Requirement], as_of: str = "newest") -> str:
    """One folder per release, requirement list, interpreter (which one, not only its
    version: two virtual environments of one Python hold different torches), torch and
    resolution date."""
    torch_version = _dist_version("torch") or "none"
    text = "\n".join(sorted(str(r) for r in reqs)) + sys.version + torch_version + ENV_FORMAT
    text += os.path.realpath(sys.executable) + sys.prefix
    text += as_of
    return f"{package}-{version}-py{sys.version_info[0]}{sys.version_info[1]}-" + \
        hashlib.sha256(text.encode()).hexdigest()[:10]


def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _pip(args: list[str], log: Path) -> subprocess.CompletedProcess[str]:
    return _logged([sys.executable, "-m", "pip", "--disable-pip-version-check", *args], log)


def _logged(cmd: list[str], log: Path, env: dict[str, str] | None = None,
            ) -> subprocess.CompletedProcess[str]:
    """Run one installer command; its whole output goes to the environment's ``pip.log``."""
    done = subprocess.run(cmd, capture_output=True, text=True, check=False,  # noqa: S603
                          env=None if env is None else {**os.environ, **env})
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(f"$ {' '.join(cmd)}\n{done.stdout}\n{done.stderr}\n")
    return done


def _uv() -> str | None:
    """uv's binary, when the ``uv`` package is installed beside recon.

    It installs a release's hundred wheels from the wheelhouse, bytecode compiled, in
    about a third of pip's time (docs/benchmarks.md), which is most of a first use.
    pip stays the downloader (uv has no download-only mode) and the fallback.
    """
    try:
        from uv import find_uv_bin
    except ImportError:
        return None
    with contextlib.suppress(FileNotFoundError):
        return str(find_uv_bin())
    return None


def installer() -> str:
    """What installs the environments' wheels: ``uv <version>`` or ``pip``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"uv {version('uv')}" if _uv() else "pip"
    except PackageNotFoundError:
        return "pip"


class _Installer:
    """Installs into one environment from the wheelhouse alone, never from the index.

    The environment's interpreter (``python``) is never started: uv and pip run
    under recon's interpreter (the one the environment was made from: the same
    tags and layout). uv installs under the environment's folder (``--prefix``),
    where it sees the environment's packages alone and replaces an installed
    version itself. pip with ``--prefix`` would uninstall from recon's own
    packages (and Debian's pip writes under ``local/``), so pip installs into an
    empty folder (``--target``) that :func:`_merge` moves into the environment,
    after :func:`_uninstall` removed the version there.
    """

    def __init__(self, python: Path, wheelhouse: Path, log: Path) -> None:
        self.wheelhouse, self.log = wheelhouse, log
        self.prefix = python.parent.parent
        flags = ["--no-deps", "--no-index", "--find-links", str(wheelhouse), "--only-binary",
                 ":all:"]
        uv = _uv()
        self.pip = uv is None
        if uv is None:
            self.cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", "install",
                        "--no-compile", "--no-warn-script-location", *flags]
            self.env: dict[str, str] | None = None
        else:  # its cache under recon's own folder, no user configuration read
            self.cmd = [uv, "pip", "install", "--python", sys.executable, "--prefix",
                        str(self.prefix), *flags]
            self.env = {"UV_CACHE_DIR": str(wheelhouse.parent / "uv-cache"), "UV_NO_CONFIG": "1",
                        "UV_PYTHON_DOWNLOADS": "never"}

    def run(self, specs: list[str]) -> subprocess.CompletedProcess[str]:
        if not self.pip:
            return _logged([*self.cmd, *specs], self.log, self.env)
        site = _site(self.prefix)
        _uninstall(site, specs)
        with tempfile.TemporaryDirectory(dir=self.prefix) as target:
            done = _logged([*self.cmd, "--target", target, *specs], self.log)
            _merge(Path(target), site)
        return done

    def install(self, specs: list[str]) -> None:
        """Install ``specs``; download into the wheelhouse only what it lacks."""
        if not specs or self.run(specs).returncode == 0:
            return
        download = ["download", "--no-deps", "--only-binary", ":all:", "-d", str(self.wheelhouse)]
        _batch(lambda some: _pip([*download, *some], self.log), specs)
        _batch(self.run, specs)


#: the words pip and uv use for the one requirement that stopped a whole batch
_NO_MATCH = re.compile(r"No matching distribution found for (\S+)"
                       r"|Because (?:there is no version of )?([A-Za-z0-9][\w.-]*)")


def _batch(call: Callable[[list[str]], subprocess.CompletedProcess[str]],
           specs: list[str]) -> None:
    """``call`` over all ``specs`` at once; a spec named as unavailable is dropped and the rest
    retried, so one missing wheel neither blocks the batch nor costs a call per spec (a pip
    call asks the index again: seconds each, for a hundred specs on a fresh machine)."""
    left = list(specs)
    while left:
        done = call(left)
        if done.returncode == 0:
            return
        named = [a or b for a, b in _NO_MATCH.findall(done.stderr)]
        failed = {canonicalize_name(_name_of(n)) for n in named}
        keep = [s for s in left if canonicalize_name(_name_of(s)) not in failed]
        if not named or len(keep) == len(left):
            break  # a failure not pinned on one spec: one by one below
        left = keep
    for spec in left:
        call([spec])


def _uninstall(site: Path, specs: list[str]) -> None:
    """Remove from ``site`` the installed distributions ``specs`` name: the files their
    ``RECORD`` lists (those inside the environment only), then the folders left empty."""
    names = {canonicalize_name(_name_of(spec)) for spec in specs}
    root = Path(os.path.realpath(site.parents[2]))
    folders: set[Path] = set()
    for dist in metadata.distributions(path=[str(site)]):
        if not dist.name or canonicalize_name(dist.name) not in names:
            continue
        for file in dist.files or []:
            path = Path(os.path.normpath(site / file))
            real = Path(os.path.realpath(path.parent)) / path.name
            if real.is_relative_to(root) and not real.is_dir():
                real.unlink(missing_ok=True)
                folders.update(p for p in real.parents if p.is_relative_to(site) and p != site)
    for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            folder.rmdir()


def _merge(target: Path, site: Path) -> None:
    """Move what pip installed into ``target`` (``--target``) into ``site`` file by file (a
    namespace folder shared with another distribution keeps that one's files); scripts stay out."""
    for path in sorted(target.rglob("*")):
        rel = path.relative_to(target)
        if rel.parts[0] == "bin" or (path.is_dir() and not path.is_symlink()):
            continue
        dest = site / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, dest)


def _compile_bytecode(site: Path, log: Path) -> None:
    """Byte-compile the environment's packages with recon's interpreter, site processing off
    (``-I -S``: nothing of either environment is imported; compiling never runs a file)."""
    _logged([sys.executable, "-I", "-S", "-m", "compileall", "-q", "-j", "0",
             "--invalidation-mode", "timestamp", str(site)], log)


def _name_of(spec: str) -> str:
    """The project name of a requirement as pip prints it (``name[extra]>=1`` -> ``name``)."""
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", spec)
    return match.group(0) if match else spec


def _installed(paths: list[str]) -> dict[str, metadata.Distribution]:
    found: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions(path=paths):
        name = dist.name  # its METADATA's Name (None when the file lacks it)
        if name:
            found.setdefault(canonicalize_name(name), dist)
    return found


def _missing(paths: list[str], wanted: list[Requirement], skipped: dict[str, str],
             asof: AsOf | None = None, reused: set[str] | None = None) -> list[Requirement]:
    """Requirements (top level and of what is installed, extras followed) not installed.

    A ``reused`` distribution (linked with the installed torch) is never one of them: it is
    not the environment's to replace.

    With ``asof``, each is pinned to the version it chooses for all its requirers' specifiers
    together, and a version installed (the system's, or a round's) other than that is missing.
    """
    have = _installed(paths)
    first: dict[str, Requirement] = {}
    together: dict[str, SpecifierSet] = {}
    walked: dict[str, set[str]] = {}  # the extras each installed dist was walked with
    queue = list(wanted)
    while queue:  # the release's closure only: the system's other packages are not its concern
        req = queue.pop(0)
        n = canonicalize_name(req.name)
        why = skip_reason(n)
        if why or n in (reused or ()):
            if why:
                skipped.setdefault(n, why)
            continue
        first.setdefault(n, req)
        together[n] = together.get(n, SpecifierSet()) & req.specifier
        if n in have and (n not in walked or not set(req.extras) <= walked[n]):
            walked[n] = walked.get(n, set()) | set(req.extras)
            queue += applicable(have[n].requires or [], sorted(walked[n]))
    if asof is not None:  # what it could not date is said of the last round only
        asof.undated.clear()
        asof.prefetch(n for n in first if n not in _UNDATED)
    out: list[Requirement] = []
    for name, req in first.items():
        pin = None if asof is None or name in _UNDATED else \
            asof.choose(name, together[name], req.specifier)
        # undated: what all its requirers ask for together, not only the first one's
        spec = SpecifierSet(f"=={pin}") if pin else together[name]
        if name not in have or (spec and not spec.contains(have[name].version,
                                                           prereleases=True)):
            # absent, or the installed version (e.g. the system's) is not the one wanted
            out.append(Requirement(f"{req.name}{spec}"))
    return out


def _of_pins(paths: list[str], wanted: list[Requirement], asof: AsOf,
             reused: set[str]) -> list[Requirement]:
    """Unmet requirements of the distributions the release pins (``==``) itself.

    When two requirers want incompatible versions of one package (sglang 0.5.5:
    its pinned transformers 4.57.1 wants huggingface-hub<1.0, the newest datasets
    >=1.31), the rounds install one then the other and stop on whichever came
    last; recon does not backtrack as pip's resolver would. The pinned
    distribution is the one the release was built and tested with, so its
    requirements are installed last; the other side is listed under ``unavailable``.
    """
    have = _installed(paths)
    out: dict[str, Requirement] = {}
    for req in wanted:
        dist = have.get(canonicalize_name(req.name))
        if dist is None or not any(s.operator == "==" for s in req.specifier):
            continue
        for dep in applicable(dist.requires or [], sorted(req.extras)):
            n = canonicalize_name(dep.name)
            if skip_reason(n) or n in out or n in reused:
                continue
            if n in have and dep.specifier and not dep.specifier.contains(have[n].version,
                                                                          prereleases=True):
                pin = None if n in _UNDATED else asof.choose(n, dep.specifier)
                out[n] = Requirement(f"{dep.name}=={pin}") if pin else dep
    return list(out.values())


def _site(root: Path) -> Path:
    return root / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def as_of_release(package: str, version: str, wheel: Path | None,
                  own_day: bool = False) -> AsOf:
    """Resolution as of the release's days as the newest, or (``own_day``) as of its own
    release day (cached index pages under ``envs/``)."""
    times = IndexTimes(cache_dir() / "envs" / "index-times")
    cutoff, source, key = (release_day if own_day else current_until)(times, package, version,
                                                                        wheel)
    return AsOf(times, cutoff, source, key=key)


def release_env(package: str, version: str, metadata_text: str,
                wheel: Path | None = None, own_day: bool = False) -> ReleaseEnv:
    """The environment of one release: from the cache, or built now (once).

    Its requirements are resolved as of the release (:mod:`recon.engine.asof`): the days
    it was the newest, or with ``own_day`` its own release day; ``wheel`` dates the
    release when the index cannot.
    """
    require_package("torch", f"importing {package} {version} (engine mode)")
    reqs = requirements(metadata_text)
    base = cache_dir() / "envs"
    asof = as_of_release(package, version, wheel, own_day)
    cutoff = asof.cutoff
    root = base / env_key(package, version, reqs, asof.key)
    with _locked(base / f".{root.name}.lock"):
        if (root / "env.json").is_file():
            record = json.loads((root / "env.json").read_text())
            return ReleaseEnv(root, root / "bin" / "python", _site(root), record, 0.0)
        when = f" as of {cutoff:%Y-%m-%d}" if cutoff else ""
        with progress.step(f"first use of {package} {version}: installing its "
                           f"{len(reqs)} requirements{when} into an environment of its own"):
            return _build(root, reqs, base / "wheelhouse", asof)


def _build(root: Path, reqs: list[Requirement], wheelhouse: Path, asof: AsOf) -> ReleaseEnv:
    start = time.monotonic()
    staging = root.with_name(root.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    wheelhouse.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(staging)],  # noqa: S603
                   check=True, capture_output=True)
    site = _site(staging)
    reused, torch_needs = _reuse_torch(site)
    paths = [str(site)]  # what the environment will see: its own packages and the torch linked
    log = staging / "pip.log"
    inst = _Installer(staging / "bin" / "python", wheelhouse, log)
    skipped: dict[str, str] = {}
    wanted = []
    for req in reqs:
        why = skip_reason(req.name)
        if why:
            skipped[canonicalize_name(req.name)] = why
        else:
            wanted.append(req)
    wanted += [Requirement(name) for name in TORCH_COMPANIONS
               if canonicalize_name(name) not in {canonicalize_name(r.name) for r in wanted}]
    wanted = [r for r in wanted if canonicalize_name(r.name) not in reused] + torch_needs
    missing: list[Requirement] = []
    for _ in range(_ROUNDS):
        missing = _missing(paths, wanted, skipped, asof, set(reused))
        if not missing:
            break
        inst.install([_plain(r) for r in missing])
    if missing:  # rounds ran out on a conflict: the requirements of the release's pins win
        inst.install([_plain(r) for r in _of_pins(paths, wanted, asof, set(reused))])
    matched = _torch_matched(log)
    inst.install(matched)
    _compile_bytecode(site, log)
    installed = sorted(f"{d.metadata['Name']}=={d.version}" for d in
                       metadata.distributions(path=[str(site)])
                       if canonicalize_name(d.metadata["Name"] or "") not in reused)
    record: dict[str, object] = {
        "requirements": [str(r) for r in reqs], "installed": installed,
        "torch_companions": list(TORCH_COMPANIONS), "torch_matched": matched,
        "not_installed": dict(sorted(skipped.items())),
        "unavailable": sorted(str(r) for r in _missing(paths, wanted, {}, None, set(reused))),
        "torch": _dist_version("torch"),
        "reused": [f"{n}=={v}" for n, v in sorted(reused.items())],
        "python": sys.version.split()[0],
        "installer": installer(),
        "resolved_as_of": asof.cutoff.isoformat() if asof.cutoff else None,
        "as_of_source": asof.source,
        "newest_instead": dict(sorted(asof.undated.items())),
        "built_seconds": round(time.monotonic() - start, 1)}
    (staging / "env.json").write_text(json.dumps(record, indent=1))
    _relocate(staging, root)
    return ReleaseEnv(root, root / "bin" / "python", _site(root), record,
                      float(record["built_seconds"]))  # type: ignore[arg-type]


def _reuse_torch(site: Path) -> tuple[dict[str, str], list[Requirement]]:
    """Link the installed torch into ``site``: the one thing of recon's interpreter the
    environment sees.

    The torch distribution, and of its requirements (extras followed) those it brings as
    binaries: the GPU runtimes the skip table names (``nvidia-*``, ``cuda-*``: a CUDA torch
    loads them when imported) and :data:`TORCH_COMPANIONS`. Each one's top-level folders
    and files (as its ``RECORD`` lists them; scripts outside the site folder are left out)
    and its ``.dist-info`` are linked. Returns the distributions linked (name -> version)
    and torch's other requirements (sympy, typing_extensions, ...), which the environment
    installs like any other: the versions recon's interpreter holds are not its business.
    """
    reused: dict[str, str] = {}
    pure: list[Requirement] = []
    queue: list[tuple[str, list[str]]] = [("torch", [])]
    companions = {canonicalize_name(n) for n in TORCH_COMPANIONS}
    while queue:
        name, extras = queue.pop(0)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        if canonicalize_name(name) in reused:
            continue
        reused[canonicalize_name(name)] = dist.version
        _link_tops(dist, site)
        for req in applicable(dist.requires or [], extras):
            n = canonicalize_name(req.name)
            if n in companions or (skip_reason(n) or "").startswith("GPU-only"):
                queue.append((req.name, sorted(req.extras)))
            elif not skip_reason(n):
                pure.append(req)
    return reused, pure


def _link_tops(dist: metadata.Distribution, site: Path) -> None:
    """Link each top-level entry of ``dist``'s files into ``site`` (once: a folder two
    distributions share, such as ``nvidia``, is linked whole by the first)."""
    for top in sorted({Path(str(f)).parts[0] for f in dist.files or []}):
        if top in ("..", "__pycache__") or os.path.lexists(site / top):
            continue
        origin = Path(os.path.realpath(str(dist.locate_file(top))))
        if origin.exists():
            (site / top).symlink_to(origin, target_is_directory=origin.is_dir())


def said_of(record: dict[str, object]) -> list[str]:
    """What a result says of its environment: the date its requirements were resolved as of
    (and the transformers that gave), and what could not be dated."""
    installed: dict[str, str] = {canonicalize_name(i.split("==")[0]): i.split("==")[-1]
                 for i in cast(list[str], record.get("installed", []))}
    lib = f" (transformers {installed['transformers']})" if "transformers" in installed else ""
    when = record.get("resolved_as_of")
    if when:
        out = [f"the release's requirements as of {str(when)[:10]}{lib}: {record.get('as_of_source')}"]
    else:
        out = [f"the release's requirements resolved to the newest on the index{lib}: "
               f"{record.get('as_of_source')}"]
    newest = cast(dict[str, str], record.get("newest_instead") or {})
    if newest:
        out.append(f"{len(newest)} of them resolved to the newest instead: "
                   + "; ".join(f"{k} ({v})" for k, v in sorted(newest.items())[:5])
                   + (" ..." if len(newest) > 5 else ""))
    return out


def _torch_matched(log: Path) -> list[str]:
    """``name==version`` of :data:`TORCH_MATCHED`, as pip resolves them beside the installed torch.

    pip's own resolver (a dry run, with the installed torch pinned) chooses the
    version whose ``torch`` requirement the installed CPU torch meets; offline, or
    when none fits, nothing is added (the model classes that need it then fail with
    the release's own error, and ``env.json`` says so under ``unavailable``). It is
    recon's own pip, beside the torch the environment imports: the environment's
    interpreter is not started (see the module docstring).
    """
    torch_version = _dist_version("torch")
    if not torch_version:
        return []
    out = []
    for name in TORCH_MATCHED:
        with tempfile.TemporaryDirectory() as tmp:
            report = Path(tmp) / "report.json"
            done = _pip(["install", "--dry-run", "--quiet",
                         "--only-binary", ":all:", "--report", str(report), name,
                         f"torch=={torch_version}"], log)
            if done.returncode != 0 or not report.is_file():
                continue
            with contextlib.suppress(ValueError, KeyError, TypeError):
                for item in json.loads(report.read_text())["install"]:
                    meta = item["metadata"]
                    if canonicalize_name(meta["name"]) == canonicalize_name(name):
                        out.append(f"{meta['name']}=={meta['version']}")
    return out


def _relocate(staging: Path, root: Path) -> None:
    """Move the finished env in place; the venv's paths name the staging folder, so fix them."""
    for cfg in (staging / "pyvenv.cfg",):
        cfg.write_text(cfg.read_text().replace(str(staging), str(root)))
    shutil.rmtree(root, ignore_errors=True)
    staging.rename(root)
