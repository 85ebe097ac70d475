"""Nothing typed or downloaded runs on the host (issue 36, items 2 and 3).

Item 2: the variables a user types before the engine's program (``LD_PRELOAD=/x.so vllm
serve ...``) or as ``docker run -e`` belong to the engine inside the sandbox, never to the
sandbox's own process (``bwrap`` on the host). Without the sandbox, the variables that make
the loader or the interpreter load code are not passed on, and that is said.

Item 3: building a release's environment never starts the environment's own interpreter on
the host, so a wheel's ``.pth`` (run at every interpreter start) does not run there.

The payloads are real: a shared library compiled here whose constructor writes a marker
file, and a wheel whose ``.pth`` writes one. The markers live in a scratch HOME that user
``nobody`` can reach, since recon started as root runs bwrap as ``nobody``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from importlib.metadata import version as metadata_version
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from recon.engine import env as env_mod
from recon.engine.asof import AsOf, IndexTimes
from recon.engine.command import container_run, typed_environment, words
from recon.errors import ReconError
from recon.slicing import sandbox
from recon.snapshots.take import take_snapshot

# a constructor that runs when the dynamic loader maps the library into any process
LIBRARY = r"""
#include <stdio.h>
#include <unistd.h>
#include <limits.h>
__attribute__((constructor)) static void marker(void) {
    char exe[PATH_MAX] = {0}, path[PATH_MAX];
    if (readlink("/proc/self/exe", exe, sizeof exe - 1) < 0) exe[0] = '?';
    snprintf(path, sizeof path, "%s/loaded-%d", MARKER_DIR, (int)getpid());
    FILE *f = fopen(path, "w");
    if (f) { fputs(exe, f); fclose(f); }
}
"""
FUNCTION = """import os

NAMES = ("LD_PRELOAD", "PYTHONPATH", "PYTHONHASHSEED", "RECON_TYPED")


def seen():
    return {k: os.environ.get(k) for k in NAMES}
"""
# the sandboxed program of the unit tests: its environment, once its stdin closes
SHOW_ENV = "import json, os, sys; sys.stdin.read(); print(json.dumps(dict(os.environ)))"


@pytest.fixture
def home() -> Iterator[Path]:
    """A scratch HOME that ``nobody`` can reach and write (the markers land here)."""
    folder = Path(tempfile.mkdtemp(prefix="recon-hostenv-", dir="/tmp"))  # noqa: S108
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _markers(folder: Path) -> list[str]:
    return sorted(f"{p.name}: {p.read_text()}" for p in folder.glob("loaded-*"))


@pytest.fixture
def library(home: Path) -> Path:
    """A real shared library whose constructor writes ``home/loaded-PID`` (proved here)."""
    assert shutil.which("gcc"), "gcc is needed to build the LD_PRELOAD payload"
    src, lib = home / "marker.c", home / "libmarker.so"
    src.write_text(LIBRARY)
    subprocess.run(["gcc", "-shared", "-fPIC", f'-DMARKER_DIR="{home}"', "-o", str(lib),
                    str(src)], check=True, capture_output=True)
    lib.chmod(0o755)
    subprocess.run(["/usr/bin/true"], env={"LD_PRELOAD": str(lib)}, check=True)
    assert _markers(home), "the payload must work: it writes its marker when preloaded"
    for marker in home.glob("loaded-*"):
        marker.unlink()
    return lib


@pytest.fixture
def snapshot_dir(home: Path) -> Path:
    pkg = home / "src" / "envpkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(FUNCTION)
    snap = take_snapshot(f"dir:{pkg}", package="envpkg", out=home / "snaps")
    return Path(snap.root)


def _recon_run(snapshot: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "HOME": str(home), "RECON_CACHE": str(home / "cache")}
    return subprocess.run([sys.executable, "-m", "recon", "run", str(snapshot), "envpkg:seen",
                           "--json", *args], capture_output=True, text=True, env=environ,
                          timeout=120, check=False)


# -- item 2: typed variables --------------------------------------------------------------

def test_typed_ld_preload_reaches_only_the_sandboxed_engine(library: Path, home: Path,
                                                           snapshot_dir: Path) -> None:
    """``recon run --env`` (the cheapest real path from typed words to the sandbox): the
    library is never loaded on the host; the engine inside sees the variable."""
    done = _recon_run(snapshot_dir, home, "--env", f"LD_PRELOAD={library}",
                      "--env", "RECON_TYPED=1")
    assert done.returncode == 0, done.stderr
    assert _markers(home) == []
    result = json.loads(done.stdout)
    assert result["sandbox"]["os_sandbox"] == "bwrap"
    assert result["value"]["LD_PRELOAD"] == str(library)
    assert result["value"]["RECON_TYPED"] == "1"


def test_without_the_sandbox_code_loading_variables_are_named_and_left_out(
        library: Path, home: Path, snapshot_dir: Path) -> None:
    """``--no-sandbox``: no wall between the engine and the host, so ``LD_*`` and the
    interpreter's code paths are not passed on, in one line naming them; the others are."""
    done = _recon_run(snapshot_dir, home, "--no-sandbox", "--env", f"LD_PRELOAD={library}",
                      "--env", "PYTHONPATH=/nowhere", "--env", "PYTHONHASHSEED=5",
                      "--env", "RECON_TYPED=1")
    assert done.returncode == 0, done.stderr
    assert _markers(home) == []
    said = [line for line in done.stderr.splitlines() if "LD_PRELOAD" in line]
    assert len(said) == 1 and said[0].startswith("recon: warning:"), done.stderr
    assert "PYTHONPATH" in said[0] and "PYTHONHASHSEED" not in said[0]
    result = json.loads(done.stdout)
    assert result["sandbox"]["os_sandbox"] == "none"
    assert result["value"] == {"LD_PRELOAD": None, "PYTHONPATH": None, "PYTHONHASHSEED": "5",
                               "RECON_TYPED": "1"}


@pytest.mark.parametrize("typed", [
    "LD_PRELOAD={lib} RECON_TYPED=1 vllm serve org/model --tensor-parallel-size 2",
    "docker run --gpus all -e LD_PRELOAD={lib} -e RECON_TYPED=1 vllm/vllm-openai:v0.33.0 "
    "--model org/model"], ids=["shell", "docker-e"])
def test_engine_flags_environment_goes_in_by_setenv(typed: str, library: Path,
                                                    home: Path) -> None:
    """A server command line's environment, read as engine mode reads it, handed to the
    sandbox as engine mode hands it (its child environment): the host never loads it."""
    env, tokens = typed_environment(words(typed.format(lib=library)))
    run = container_run(tokens)
    env = {**env, **(run.env if run else {})}
    assert env["LD_PRELOAD"] == str(library)
    root = Path(tempfile.mkdtemp(prefix="recon-hostenv-run-", dir="/tmp"))  # noqa: S108
    root.chmod(0o755)
    try:
        outcome = sandbox.launch(
            [sys.executable, "-I", "-c", SHOW_ENV], {}, root=root, work=root / "work",
            limits=sandbox.Limits(timeout=30),
            env=sandbox.base_env(root / "work", {"HF_HUB_OFFLINE": "1", **env}),
            slice_files=set(), read_only=sandbox.interpreter_dirs())
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert _markers(home) == []
    inside = json.loads(outcome.stdout)
    assert inside["LD_PRELOAD"] == str(library) and inside["RECON_TYPED"] == "1"


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.decode().partition("=")[::2] for item in raw.split(b"\0") if item)


def test_bwrap_itself_starts_with_none_of_the_typed_variables(tmp_path: Path) -> None:
    """The environment of the process Popen starts (bwrap, on the host) holds no typed name
    and no loader variable; the child inside gets every one of them."""
    typed = {"LD_PRELOAD": "/nowhere/x.so", "LD_LIBRARY_PATH": "/nowhere",
             "PYTHONPATH": "/nowhere", "RECON_TYPED": "secret-typed-value"}
    root = Path(tempfile.mkdtemp(prefix="recon-hostenv-spawn-", dir="/tmp"))  # noqa: S108
    root.chmod(0o755)
    running = sandbox.spawn([sys.executable, "-I", "-c", SHOW_ENV], root=root,
                            work=root / "work", limits=sandbox.Limits(timeout=30),
                            env=sandbox.base_env(root / "work", typed),
                            read_only=sandbox.interpreter_dirs())
    try:
        outside = _environ(running.proc.pid)
        assert os.path.basename(os.readlink(f"/proc/{running.proc.pid}/exe")) == "bwrap"
        assert running.proc.stdin is not None
        running.proc.stdin.close()
        running.proc.wait(timeout=30)
    finally:
        running.stop()
    inside = json.loads((root / "stdout.txt").read_text())
    shutil.rmtree(root, ignore_errors=True)
    assert not set(typed) & set(outside), outside
    assert not [k for k in outside if k.startswith(("LD_", "PYTHON"))], outside
    assert "secret-typed-value" not in json.dumps(outside)
    assert {k: inside.get(k) for k in typed} == typed


def test_a_name_no_process_can_take_is_one_line() -> None:
    env, tokens = typed_environment(words("docker run -e =x vllm/vllm-openai --model m"))
    run = container_run(tokens)
    assert run is not None and run.env == {"": "x"}
    work = Path(tempfile.mkdtemp(prefix="recon-hostenv-bad-", dir="/tmp"))  # noqa: S108
    try:
        with pytest.raises(ReconError, match=r"^the engine's environment names a variable "
                                             r"no process can be given: ''='x'"):
            sandbox.spawn(["/usr/bin/true"], root=work, work=work / "work",
                          limits=sandbox.Limits(timeout=5), env={**env, **run.env},
                          read_only=[])
    finally:
        shutil.rmtree(work, ignore_errors=True)


# -- item 3: building a release's environment ---------------------------------------------

def _wheel(folder: Path, name: str, files: dict[str, str], requires: tuple[str, ...] = ()) -> Path:
    """A real wheel (hashed RECORD), as any index would serve it."""
    info = f"{name}-1.0.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n" + \
        "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {**files, f"{info}/METADATA": meta,
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n"}

    def digest(text: str) -> str:
        raw = hashlib.sha256(text.encode()).digest()
        return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    record = "".join(f"{n},{digest(t)},{len(t.encode())}\n" for n, t in files.items())
    files[f"{info}/RECORD"] = record + f"{info}/RECORD,,\n"
    path = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for arc, text in files.items():
            zf.writestr(arc, text)
    return path


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_building_an_environment_never_runs_its_packages_on_the_host(
        installer: str, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """recon's own build (``_build``: the requirement list -> wheelhouse -> environment) of a
    wheel carrying ``evil.pth``: built and byte-compiled, the marker never written."""
    if installer == "pip":
        monkeypatch.setattr(env_mod, "_uv", lambda: None)
    else:
        assert env_mod._uv() is not None, "uv is a dependency of recon"
    marker = home / "pth-ran"
    house = home / "envs" / "wheelhouse"
    house.mkdir(parents=True)
    _wheel(house, "evilpkg", {
        "evil.pth": f"import os; open({str(marker)!r}, 'w').write('ran')\n",
        "evilpkg/__init__.py": "VALUE = 1\n"})
    # nothing reachable beyond the wheelhouse: the index is a closed port, no pip config
    for name, value in {"PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": "http://127.0.0.1:9/",
                        "PIP_FIND_LINKS": "", "PIP_RETRIES": "0", "PIP_TIMEOUT": "2"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    asof = AsOf(IndexTimes(home / "envs" / "index-times", "http://127.0.0.1:9/simple"),
                None, "test")
    start = time.monotonic()
    built = env_mod._build(home / "envs" / "release", [Requirement("evilpkg")], house, asof)
    assert time.monotonic() - start < 120
    assert not marker.exists(), "a .pth of a downloaded wheel ran on the host"
    assert "evilpkg==1.0" in built.record["installed"]
    assert (built.site / "evil.pth").is_file()
    assert list((built.site / "evilpkg" / "__pycache__").glob("__init__.*.pyc"))
    # the environment works: its interpreter (run here by the test, not by recon) imports it
    # and runs the .pth, which proves the payload would have fired
    subprocess.run([str(built.python), "-c", "import evilpkg"], check=True)
    assert marker.exists()


#: run in recon's interpreter of a virtual environment: build a release environment there
_BUILD_FROM_VENV = """import json, sys
from pathlib import Path
from packaging.requirements import Requirement
from recon.engine import env
from recon.engine.asof import AsOf, IndexTimes
home = Path(sys.argv[1])
asof = AsOf(IndexTimes(home / "envs" / "index-times"), None, "test")
built = env._build(home / "envs" / "release", [Requirement("needsext")],
                   home / "envs" / "wheelhouse", asof)
print(json.dumps({"python": str(built.python), "key": env.env_key("x", "1", [])}))
"""
#: run in the built environment's interpreter: what it imports, and from where
_IMPORTS = """import importlib.metadata as m, importlib.util as u, json, torch, typing_extensions
print(json.dumps({"typing_extensions": [m.version("typing_extensions"), typing_extensions.__file__],
                  "torch": torch.__version__, "pytest": u.find_spec("pytest") is not None}))
"""


def test_a_release_environment_sees_its_own_packages_and_only_the_torch(home: Path) -> None:
    """Issue 38, class 2: recon run from a virtual environment whose ``typing_extensions``
    differs from its base Python's. The release (here a wheel pinning the virtual
    environment's version) gets an environment that installs what it asks for and imports
    that, not the base's; of recon's interpreter it sees torch and nothing else (pytest is
    installed beside recon, the release does not ask for it)."""
    import torch
    base = metadata_version("typing_extensions")
    pinned = "4.12.2" if base != "4.12.2" else "4.13.2"
    venv = home / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, capture_output=True)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    f"typing_extensions=={pinned}"], check=True, capture_output=True)
    house = home / "envs" / "wheelhouse"
    house.mkdir(parents=True)
    _wheel(house, "needsext", {"needsext/__init__.py": "import typing_extensions\n"},
           requires=(f"typing-extensions=={pinned}",))
    done = subprocess.run([str(python), "-c", _BUILD_FROM_VENV, str(home)], check=True,
                          capture_output=True, text=True)
    built = json.loads(done.stdout.splitlines()[-1])
    assert built["key"] != env_mod.env_key("x", "1", []), "one folder for two interpreters"
    # the environment's interpreter, run here by the test (recon never starts it on the host)
    seen = json.loads(subprocess.run([built["python"], "-I", "-c", _IMPORTS], check=True,
                                     capture_output=True, text=True).stdout)
    version, origin = seen["typing_extensions"]
    assert version == pinned, f"the environment imports typing_extensions {version} ({origin})"
    assert origin.startswith(str(home / "envs" / "release"))
    assert seen["torch"] == torch.__version__
    assert seen["pytest"] is False, "recon's interpreter's packages leak into the environment"
