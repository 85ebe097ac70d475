"""Cached snapshots under concurrent use, and four small things a new user hit (issue 39).

Major 2: two terminals, a notebook beside a CLI, or CI beside a user share one
``$RECON_CACHE``. Readers here are real recon processes (the CLI, and the
Python API a notebook uses) that read one cached snapshot of a real wheel in a
loop while a third process makes the snapshot be taken again (the wheel is
replaced, so every process sees a cache miss at once) or ``recon cache prune``
clears the cache. Neither reader may ever fail, and every file a reader reads
must hash (hashlib, here) to the sha256 in the manifest of the snapshot it
opened.

Minors: an interrupted or failed ``recon snapshot`` leaves no empty
``./snapshots/`` it created; the download line of a real ``pip download`` (from
an HTTP index served here) never shows more done than its total nor goes back;
recon's own slicing failure is not reported as bad input (exit 2).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import pty
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

#: files of the wheel's package: a few hundred, so a snapshot is taken in well under a second
N_MODULES = 300

#: a reader (a real process using the Python API, as a notebook does): open the cached
#: snapshot of SOURCE through ensure_snapshot and keep it a while: hold its folder open (as the
#: sandbox's bind mount of a snapshot does for a run or an engine-mode server) and read every
#: file through it and through Snapshot.read_bytes, 3 times, hashing each; again until STOP
READER = r"""
import hashlib, json, os, sys
from recon.snapshots.cache import ensure_snapshot
source, stop, report = sys.argv[1], sys.argv[2], sys.argv[3]
rounds, roots = 0, set()
while not os.path.exists(stop) or rounds < 3:
    snap = ensure_snapshot(source)
    roots.add(str(snap.root))
    held = os.open(snap.src, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(3):
        for rel, rec in snap.files.items():
            if rec.kind != "file":
                continue
            fd = os.open(rel, os.O_RDONLY, dir_fd=held)
            with os.fdopen(fd, "rb") as fh:
                data = fh.read()
            for got in (data, snap.read_bytes(rel)):
                if hashlib.sha256(got).hexdigest() != rec.sha256:
                    sys.exit(f"{rel} in {snap.root}: not the bytes its manifest records")
    os.close(held)
    rounds += 1
    del snap
json.dump({"rounds": rounds, "roots": sorted(roots)}, open(report, "w"))
"""

#: the process that makes the snapshot be taken again: replace the wheel (a new inode, so a
#: new freshness key) and take it through the same path every verb uses
RETAKER = r"""
import os, shutil, sys
from recon.snapshots.cache import ensure_snapshot
whl, spare, times, builds = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
for i in range(times):
    shutil.copyfile(builds[i % len(builds)], spare)
    os.replace(spare, whl)
    ensure_snapshot("wheel:" + whl)
"""


def _env(cache: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "RECON_CACHE": str(cache), "PYTHONUNBUFFERED": "1", **extra}


def _project(root: Path, factor: int, version: str) -> Path:
    """A small ``vllm`` project (N_MODULES modules) whose functions multiply by ``factor``."""
    pkg = root / "vllm"
    for sub in range(N_MODULES // 20):
        folder = pkg / f"part{sub}"
        folder.mkdir(parents=True)
        (folder / "__init__.py").write_text(f"PART = {sub}\n")
        for i in range(19):
            (folder / f"mod{i}.py").write_text(f"def f{i}(x):\n    return x * {factor + i}\n"
                                               + "# padding\n" * (20 + i))
    (pkg / "__init__.py").write_text(f'__version__ = "{version}"\n')
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "vllm"\nversion = "{version}"\n'
        '[tool.setuptools.packages.find]\ninclude = ["vllm*"]\n')
    return root


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two real wheels of a ``vllm`` project built by ``pip wheel``: the same files, different
    bytes (what a user gets when the wheel at one path is rebuilt)."""
    projects = [_project(tmp_path_factory.mktemp(f"project{v}"), f, v)
                for f, v in ((100, "0.0.7"), (200, "0.0.8"))]
    out = tmp_path_factory.mktemp("dist")
    builds = [subprocess.Popen([sys.executable, "-m", "pip", "wheel", "--no-deps",  # side by side
                                "--no-build-isolation", "--no-index", "-q",
                                "--disable-pip-version-check", "-w", str(out), str(project)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
              for project in projects]
    for build in builds:
        _, err = build.communicate(timeout=300)
        assert build.returncode == 0, err
    built = (out / "vllm-0.0.7-py3-none-any.whl", out / "vllm-0.0.8-py3-none-any.whl")
    for whl in built:
        with zipfile.ZipFile(whl) as zf:
            assert sum(n.endswith(".py") for n in zf.namelist()) >= N_MODULES
    return built


def _cli_reader(cache: Path, source: str, stop: Path, report: Path) -> subprocess.Popen[str]:
    """A reader that is the CLI: ``recon index --no-cache --json SOURCE`` in a loop (each run
    parses every file of the snapshot it opened and says which differ from its manifest)."""
    loop = (f'n=0; while [ ! -e "{stop}" ] || [ $n -lt 2 ]; do '
            f'"{sys.executable}" -m recon index --no-cache -j 0 --json "{source}" '
            f'> "{report}.$n" || exit $?; n=$((n+1)); done; echo $n > "{report}"')
    return subprocess.Popen(["bash", "-c", loop], env=_env(cache), stderr=subprocess.PIPE,
                            text=True)


def _api_reader(cache: Path, source: str, stop: Path, report: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", READER, source, str(stop), str(report)],
                            env=_env(cache), stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen[str], what: str) -> None:
    try:
        _, err = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    assert proc.returncode == 0, f"{what} failed (exit {proc.returncode}): {err[-3000:]}"


def _check_cli_reports(report: Path, files: int) -> int:
    rounds = int(report.read_text())
    for n in range(rounds):
        data = json.loads(Path(f"{report}.{n}").read_text())
        assert data["errors"] == {} and data["edited"] == [], data
        assert data["stats"]["files"] >= files
    return rounds


def _readers(cache: Path, source: str, tmp_path: Path) -> tuple[list[subprocess.Popen[str]], Path]:
    stop = tmp_path / "stop"
    procs = [_api_reader(cache, source, stop, tmp_path / "api.json"),
             _cli_reader(cache, source, stop, tmp_path / "cli.txt")]
    return procs, stop


def test_readers_never_see_a_snapshot_taken_again_under_them(wheels: tuple[Path, Path],
                                                              tmp_path: Path) -> None:
    """Two readers (API and CLI) on one ``wheel:`` SOURCE while a third process rebuilds the
    wheel again and again and takes it: at every rebuild every process misses the cache at
    once and takes the snapshot, and none may swap a folder another one reads."""
    cache, whl = tmp_path / "cache", tmp_path / "vllm-0.0.7-py3-none-any.whl"
    shutil.copyfile(wheels[0], whl)
    source = f"wheel:{whl}"
    procs, stop = _readers(cache, source, tmp_path)
    time.sleep(1.5)  # both readers are reading before the first replacement
    retaker = subprocess.Popen([sys.executable, "-c", RETAKER, str(whl), str(tmp_path / "spare"),
                                "8", *map(str, wheels)], env=_env(cache), stderr=subprocess.PIPE, text=True)
    try:
        _finish(retaker, "the process taking the snapshot again")
    finally:
        stop.touch()
        for proc, what in zip(procs, ("the API reader", "the CLI reader"), strict=True):
            _finish(proc, what)
    api = json.loads((tmp_path / "api.json").read_text())
    assert api["rounds"] >= 3 and len(api["roots"]) >= 2  # it did read across re-takes
    assert _check_cli_reports(tmp_path / "cli.txt", N_MODULES) >= 2


def test_prune_never_removes_a_snapshot_a_reader_holds(wheels: tuple[Path, Path],
                                                       tmp_path: Path) -> None:
    """``recon cache prune --older-than 0`` in a loop beside two readers: what a reader holds
    stays; what nobody holds goes."""
    cache, whl = tmp_path / "cache", tmp_path / "vllm-0.0.7-py3-none-any.whl"
    shutil.copyfile(wheels[0], whl)
    old = tmp_path / "old.whl"  # an entry nobody reads: prune must still remove it
    shutil.copyfile(wheels[1], old)
    subprocess.run([sys.executable, "-m", "recon", "index", "-j", "0", f"wheel:{old}"],
                   env=_env(cache), check=True, capture_output=True, timeout=120)
    before = {p.name for p in (cache / "snapshots").iterdir() if not p.name.startswith(".")}
    assert len(before) == 1
    procs, stop = _readers(cache, f"wheel:{whl}", tmp_path)
    removed: set[str] = set()
    try:
        time.sleep(1.0)
        for _ in range(5):
            res = subprocess.run([sys.executable, "-m", "recon", "cache", "prune", "--older-than",
                                  "0", "--kind", "snapshots", "--json"], env=_env(cache),
                                 capture_output=True, text=True, timeout=120)
            assert res.returncode == 0, res.stderr
            removed |= {e["name"] for e in json.loads(res.stdout)["entries"]}
    finally:
        stop.touch()
        for proc, what in zip(procs, ("the API reader", "the CLI reader"), strict=True):
            _finish(proc, what)
    assert before <= removed  # prune did remove what nobody held
    _check_cli_reports(tmp_path / "cli.txt", N_MODULES)


HOLDER = r"""
import sys
from recon.snapshots.cache import ensure_snapshot
snap = ensure_snapshot(sys.argv[1])
print("holding", flush=True)
sys.stdin.read()
"""


def test_force_never_replaces_a_snapshot_another_process_holds(wheels: tuple[Path, Path],
                                                               tmp_path: Path) -> None:
    """``recon snapshot --force`` over a snapshot a notebook (another process) has open is
    refused in one line and the folder stays as it was; once that process is done, it works."""
    out, env = tmp_path / "snaps", _env(tmp_path / "cache")
    take = [sys.executable, "-m", "recon", "snapshot", f"wheel:{wheels[1]}", "-o", str(out),
            "--name", "s", "--force", "--quiet"]
    subprocess.run([sys.executable, "-m", "recon", "snapshot", f"wheel:{wheels[0]}", "-o",
                    str(out), "--name", "s", "--quiet"], env=env, check=True, timeout=300)
    manifest = (out / "s" / "manifest.json").read_bytes()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out / "s")], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "holding\n"
        refused = subprocess.run(take, env=env, capture_output=True, text=True, timeout=300)
        assert refused.returncode == 2 and "in use" in refused.stderr, refused.stderr
        assert refused.stderr.count("\n") == 1, refused.stderr
        assert (out / "s" / "manifest.json").read_bytes() == manifest
    finally:
        holder.communicate("", timeout=60)
    done = subprocess.run(take, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "s" / "manifest.json").read_text())["package"]["version"] == "0.0.8"


# -- minor: the download line of a real pip download ----------------------------------------------

#: the project the local index serves: a wheel of a few MB that pip fetches in a couple of seconds
DEMO, DEMO_VERSION = "recon_dl_demo", "1.0"
AMOUNT = re.compile(r"(\d+\.\d) ?/ ?(\d+\.\d) MB|(?<![\d./])(\d+\.\d) MB")


def _demo_wheel(folder: Path, size: int) -> Path:
    whl = folder / f"{DEMO}-{DEMO_VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as zf:
        zf.writestr(f"{DEMO}/__init__.py", f"__version__ = {DEMO_VERSION!r}\n")
        zf.writestr(f"{DEMO}/blob.bin", os.urandom(size), compress_type=zipfile.ZIP_STORED)
        zf.writestr(f"{DEMO}-{DEMO_VERSION}.dist-info/METADATA",
                    f"Metadata-Version: 2.1\nName: {DEMO}\nVersion: {DEMO_VERSION}\n")
        zf.writestr(f"{DEMO}-{DEMO_VERSION}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\n"
                    "Tag: py3-none-any\n")
        zf.writestr(f"{DEMO}-{DEMO_VERSION}.dist-info/RECORD", "")
    return whl


class _Index(http.server.BaseHTTPRequestHandler):
    """A PEP 503 index of one wheel, sent slowly (64 kB every 20 ms) as a real network would."""

    wheel: Path
    hang: threading.Event | None = None

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        if self.hang is not None:  # an index that accepts and never answers (a stalled network)
            self.hang.set()
            time.sleep(60)
            return
        name = self.wheel.name
        if self.path.rstrip("/").endswith("/files/" + name):
            data = self.wheel.read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            for at in range(0, len(data), 1 << 16):
                self.wfile.write(data[at:at + (1 << 16)])
                time.sleep(0.02)
            return
        page = f'<html><body><a href="/files/{name}">{name}</a></body></html>'.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)


@contextlib.contextmanager
def _index(wheel: Path | None, hang: threading.Event | None = None) -> Iterator[str]:
    handler = type("Handler", (_Index,), {"wheel": wheel, "hang": hang})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
        server.server_close()


def _pip_env(tmp_path: Path, url: str) -> dict[str, str]:
    return {**os.environ, "RECON_CACHE": str(tmp_path / "cache"), "PIP_INDEX_URL": url,
            "PIP_NO_CACHE_DIR": "1", "PIP_CONFIG_FILE": "/dev/null", "PIP_RETRIES": "0",
            "PIP_TIMEOUT": "60", "COLUMNS": "160"}


def _on_terminal(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str]:
    """Exit status and what ``argv`` drew on its stderr, a pseudo-terminal (a user's shell)."""
    master, slave = pty.openpty()
    with subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=slave, env=env,
                          cwd=cwd) as proc:
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        rc = proc.wait(timeout=300)
    os.close(master)
    return rc, b"".join(chunks).decode(errors="replace")


def test_the_download_line_never_shows_more_than_its_total_nor_goes_back(tmp_path: Path) -> None:
    """``recon snapshot pip:...`` on a terminal, a real pip fetching a 6 MB wheel over HTTP: every
    amount the download line draws is at most its total (pip's "(6.0 MB)", the wheel's real size), the
    bytes done only grow, and the line ends at the whole wheel."""
    whl = _demo_wheel(tmp_path, 6_000_000)
    with _index(whl) as url:
        rc, err = _on_terminal([sys.executable, "-m", "recon", "snapshot",
                                f"pip:{DEMO}=={DEMO_VERSION}", "--package", DEMO, "-o",
                                str(tmp_path / "snaps")], _pip_env(tmp_path, url), tmp_path)
    assert rc == 0, err[-3000:]
    frames = [f for f in re.split(r"[\r\n]", err) if f"downloading {DEMO}" in f]
    shown = [(float(m[0] or m[2]), float(m[1]) if m[1] else None)
             for frame in frames for m in AMOUNT.findall(frame)]
    total = round(whl.stat().st_size / 1e6, 1)
    assert len({done for done, _ in shown}) >= 3, err[-3000:]  # it did draw the bytes coming
    for done, of in shown:
        assert of is None or of == total, (of, total)  # a total only when known, and the right one
        assert done <= (of if of is not None else total), shown
    dones = [done for done, _ in shown]
    assert dones == sorted(dones), dones  # never back to 0.0
    assert shown[-1] == (total, total), shown


# -- minor: Ctrl-C leaves no empty ./snapshots/ ---------------------------------------------------

def test_an_interrupted_snapshot_leaves_no_snapshots_folder_it_made(tmp_path: Path) -> None:
    """Ctrl-C while pip waits on the network (the longest wait before anything is written):
    no ``./snapshots/`` is left behind; a ``./snapshots/`` the user had stays."""
    hang = threading.Event()
    for had in (False, True):
        work = tmp_path / f"work-{had}"
        (work / "snapshots" if had else work).mkdir(parents=True)
        hang.clear()
        with _index(None, hang) as url:
            env = {k: v for k, v in _pip_env(tmp_path, url).items() if k != "RECON_SNAPSHOTS"}
            proc = subprocess.Popen([sys.executable, "-m", "recon", "snapshot",
                                     f"pip:{DEMO}=={DEMO_VERSION}", "--package", DEMO], cwd=work,
                                    env=env, stderr=subprocess.PIPE, text=True,
                                    start_new_session=True)
            try:
                assert hang.wait(120), "pip never asked the index"
                os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the group
                _, err = proc.communicate(timeout=120)
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
        assert proc.returncode == 130, err
        assert os.listdir(work) == (["snapshots"] if had else []), err
        assert not had or os.listdir(work / "snapshots") == []


# -- minor: recon's own slicing failure is not "bad input" ----------------------------------------

def test_recons_own_slicing_failure_is_not_exit_2(tmp_path: Path) -> None:
    """A qualname that names a real function of the release, which recon cannot slice (its
    module is in syntax this Python cannot parse, or the closure reaches a module over the
    slicer's size cap): not exit 2 ("bad input"), which stays for a misspelt qualname."""
    site = tmp_path / "site" / "vllm"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text('__version__ = "0.0.9"\n')
    newer = "def g[T](x: T) -> T:\n    return x\n" if sys.version_info < (3, 12) else \
        "def g(x):\n    return x\n\x00\n"  # 3.12 generics; a NUL byte no Python parses
    (site / "newer.py").write_text(newer)
    (site / "big.py").write_text("def h(x):\n    return x\n" + "# padding\n" * 300_000)
    (site / "uses.py").write_text("from vllm.big import h\n\n\ndef k(x):\n    return h(x)\n")
    env = _env(tmp_path / "cache")

    def sliced(qualname: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "recon", "slice", f"dir:{site.parent}",
                               qualname], env=env, capture_output=True, text=True, timeout=300)

    for qualname, why in (("vllm.newer:g", "cannot parse vllm.newer"),
                          ("vllm.uses:k", "over the 2 MiB cap")):
        res = sliced(qualname)
        assert res.returncode == 8, (qualname, res.returncode, res.stderr)
        assert res.stderr.startswith("recon: error:") and why in res.stderr, res.stderr
        assert res.stderr.count("\n") == 1, res.stderr
    typo = sliced("vllm.uses:kk")
    assert typo.returncode == 2 and "kk" in typo.stderr, typo.stderr
