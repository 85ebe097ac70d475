"""Containment of snapshot writing: no host path is ever followed, renamed, read or deleted.

Every case is a real ``docker save``-format archive (tests/imagekit.py) read by
the real code into a real folder; the host side is a real folder next to the
output whose every entry (kind, bytes, link target, mode) is compared before
and after. Full disks and read-only folders are real too: a tiny tmpfs or a
read-only bind mount in a private mount namespace (``unshare --mount``), and a
0555 folder written to by an unprivileged user (``setpriv``).
"""

from __future__ import annotations

import multiprocessing
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from recon.acquire.writer import TreeWriter, remove_tree_at, staging, write_json
from recon.errors import PackageNotFound, ReconError, UnsafeArchiveError
from recon.snapshots.take import take_snapshot
from tests.imagekit import SITE, LayerBuilder, write_docker_archive
from tests.kit import run_cli

V = f"{SITE}/vllm"
REPO = Path(__file__).resolve().parents[1]


def host_state(root: Path) -> dict[str, tuple[str, str, int]]:
    """Every entry under ``root``, links not followed: kind, bytes or target, permission bits."""
    out: dict[str, tuple[str, str, int]] = {}
    for folder, dirs, files in os.walk(root, followlinks=False):
        for name in [*dirs, *files]:
            p = Path(folder) / name
            st = p.lstat()
            rel = p.relative_to(root).as_posix()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p), 0)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", "", stat.S_IMODE(st.st_mode))
            else:
                out[rel] = ("file", p.read_bytes().hex(), stat.S_IMODE(st.st_mode))
    return out


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Path]:
    """A folder of the "host" that a hostile image names; it must never change."""
    h = tmp_path / "host"
    (h / "vllm").mkdir(parents=True)
    (h / "vllm" / "__init__.py").write_text("__version__ = 'HOST'\n")
    (h / "precious.txt").write_text("the user's data\n")
    before = host_state(h)
    yield h
    assert h.is_dir() and not h.is_symlink(), "the host folder was moved or removed"
    assert host_state(h) == before, "the host folder changed"


def _base(d: Path, version: str = "1.0") -> LayerBuilder:
    return (LayerBuilder(d / "l0.tar").file("usr/local/bin/python3", b"#!\n", mode=0o755)
            .file(f"{V}/__init__.py", f"__version__ = '{version}'\n".encode())
            .file(f"{V}/sub/keep.py", b"KEEP = 1\n"))


def _archive(d: Path, *layers: LayerBuilder, env: list[str] | None = None) -> Path:
    return write_docker_archive(d / "img.tar", [lb.close() for lb in layers], env=env)


def _empty(folder: Path) -> bool:
    return not folder.exists() or list(folder.iterdir()) == []


# --- the package root through a link (the escape of the issue) ------------------------------

def _link_image(tmp_path: Path, host: Path, version: str) -> Path:
    top = (LayerBuilder(tmp_path / "l1.tar")
           .file(f"{V}/link/vllm/__init__.py", b"__version__ = '6.6.6'\n")
           .symlink(f"{V}/link", str(host)))
    env = ["PATH=/usr/local/bin:/usr/bin:/bin", f"PYTHONPATH=/{V}/link"]
    return _archive(tmp_path, _base(tmp_path, version), top, env=env)


def test_a_package_root_through_a_link_moves_no_host_folder(tmp_path: Path, host: Path) -> None:
    """The link replaces the folder in the same layer (last entry wins), so the files under
    it are gone, as in the engine; the site copy is taken and the link is kept as a link."""
    out = tmp_path / "out"
    snap = take_snapshot(f"docker-archive:{_link_image(tmp_path, host, '1.0')}", out=out)
    assert snap.version == "1.0"
    assert snap.manifest.package.real_path == f"/{V}"
    assert set(snap.files) == {"vllm/__init__.py", "vllm/sub/keep.py"}
    # a link out of the package is listed, never written: no later reader can follow it
    assert {p: r.to_json() for p, r in snap.manifest.skipped.items()} == {
        "vllm/link": {"size": 0, "layer": 1, "kind": "symlink", "target": str(host),
                      "reason": "points outside the package"}}
    assert not os.path.lexists(snap.src / "vllm/link")
    assert [p.name for p in out.iterdir()] == [snap.name]


@pytest.mark.parametrize("version", ["9" * 300, "1.0/../../x", "1.0\nrecon: fine"])
def test_a_bad_version_string_moves_and_deletes_nothing(tmp_path: Path, host: Path, version: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    archive = _link_image(tmp_path, host, version)
    out = tmp_path / "out"
    code, _, err = run_cli(capsys, "snapshot", f"docker-archive:{archive}", "-o", str(out))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "is not a version string that can name a folder; name the snapshot with --name" in err
    assert "Traceback" not in err and _empty(out)
    # --name takes over; the version stays what the image says, as data
    snap = take_snapshot(f"docker-archive:{archive}", out=out, name="named")
    assert snap.version == version and snap.name == "named"


@pytest.mark.parametrize("name", ["x" * 256, "a/b", ".hidden", "new\nline", ""])
def test_a_bad_name_is_refused_before_the_source_is_read(tmp_path: Path, name: str) -> None:
    with pytest.raises(ReconError, match="bad snapshot name"):
        take_snapshot(f"docker-archive:{tmp_path}/not-even-there.tar", out=tmp_path / "o", name=name)


def test_moving_a_folder_never_goes_through_a_link(tmp_path: Path, host: Path) -> None:
    """The rename of the chosen copy opens every folder with O_NOFOLLOW from the tree's root."""
    tree = tmp_path / "tree"
    dst = tmp_path / "dst"
    dst.mkdir()
    with TreeWriter(tree) as w:
        w.write_bytes("site/real/vllm/__init__.py", b"")
        w.symlink("site/link", str(host))
        w.symlink("site/pkg", str(host / "vllm"))
        fd = os.open(dst, os.O_RDONLY | os.O_DIRECTORY)
        try:
            with pytest.raises(UnsafeArchiveError, match="goes through the symlink 'link'"):
                w.move_dir("site/link/vllm", fd, "vllm")
            with pytest.raises(UnsafeArchiveError, match="/site/pkg is a symlink"):
                w.move_dir("site/pkg", fd, "vllm")
            w.move_dir("site/real/vllm", fd, "vllm")
        finally:
            os.close(fd)
    assert (dst / "vllm/__init__.py").is_file()


@pytest.mark.parametrize(("target", "kept"), [
    ("sub/keep.py", True), ("../sub/keep.py", True), ("..", True), (".", True), ("../..", False),
    ("../../x", False), ("../../vllm/sub/keep.py", False),
    ("sub/../../x", False), ("/usr/local/lib/python3.12/site-packages/vllm/sub/keep.py", False),
    ("sub/./keep.py", True),
])
def test_only_links_that_stay_inside_the_package_are_written(tmp_path: Path, target: str,
                                                             kept: bool) -> None:
    """vllm/a/l -> TARGET. Absolute targets are host paths once written; ``..`` after a name can
    climb out through a link (``sub/../..``); ``..`` first climbs real folders only."""
    top = LayerBuilder(tmp_path / "l1.tar").symlink(f"{V}/a/l", target).file(f"{V}/a/x.py", b"")
    snap = take_snapshot(f"docker-archive:{_archive(tmp_path, _base(tmp_path), top)}", out=tmp_path / "o")
    assert ("vllm/a/l" in snap.files) is kept and ("vllm/a/l" in snap.manifest.skipped) is not kept
    assert os.path.lexists(snap.src / "vllm/a/l") is kept
    if kept:
        assert os.readlink(snap.src / "vllm/a/l") == target


def test_removal_never_follows_a_link_and_survives_any_depth(tmp_path: Path, host: Path) -> None:
    tree = tmp_path / "tree"
    deep = "/".join(["d"] * 1500)  # deeper than any descriptor budget
    with TreeWriter(tree) as w:
        w.symlink("a/to-host", str(host))
        w.symlink("a/to-file", str(host / "precious.txt"))
        w.symlink("a/up", "../../host")
    fd = os.open(tree, os.O_RDONLY | os.O_DIRECTORY)
    try:
        here = fd
        for _ in range(1500):
            os.mkdir("d", dir_fd=here)
            nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=here)
            if here != fd:
                os.close(here)
            here = nxt
        os.symlink(str(host), "bottom", dir_fd=here)
        os.close(here)
    finally:
        os.close(fd)
    assert deep  # the chain above is that deep
    parent = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        remove_tree_at(parent, "tree")
    finally:
        os.close(parent)
    assert not tree.exists()


# --- names the kernel could not hold ----------------------------------------------------------

def _cli_one_line(capsys: pytest.CaptureFixture[str], archive: Path, out: Path, *extra: str) -> str:
    code, _, err = run_cli(capsys, "snapshot", f"docker-archive:{archive}", "-o", str(out), *extra)
    assert code != 0, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert _empty(out)
    return err.strip()


@pytest.mark.parametrize("where", [V, "opt/elsewhere"])
def test_a_component_over_name_max(tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str) -> None:
    top = LayerBuilder(tmp_path / "l1.tar").file(f"{where}/{'n' * 300}.py", b"x")
    err = _cli_one_line(capsys, _archive(tmp_path, _base(tmp_path), top), tmp_path / "o")
    assert "layer 1 (sha256:" in err and "NAME_MAX" in err and "303" not in err[:20]


@pytest.mark.parametrize(("name", "message"), [
    ("a/" + "n" * 256, "a component of 256 bytes, over the limit of 255 (NAME_MAX)"),
    ("a/" + "\u00e9" * 128, "a component of 256 bytes"),  # bytes, not characters
    ("d/" * 513 + "x", "514 folders deep, over the depth limit of 512"),
    ("p/" * 2047 + "xy", "entry name is 4096 bytes, over the path limit of 4095 (PATH_MAX)"),
])
def test_the_writer_holds_names_to_the_kernel_limits(tmp_path: Path, name: str, message: str) -> None:
    """The writer's own check, whatever the source (tar, wheel, folder, engine) parsed."""
    with TreeWriter(tmp_path / "t") as w, pytest.raises(UnsafeArchiveError, match=re.escape(message)) as info:
        w.write_bytes(name, b"x", where="layer 7 (sha256:abc)")
    assert str(info.value).startswith("layer 7 (sha256:abc): entry name") and len(str(info.value)) < 400
    assert list((tmp_path / "t").iterdir()) == []


def test_a_path_1200_deep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    top = LayerBuilder(tmp_path / "l1.tar").file(f"{V}/" + "d/" * 1200 + "x.py", b"x")
    err = _cli_one_line(capsys, _archive(tmp_path, _base(tmp_path), top), tmp_path / "o")
    assert "layer 1 (sha256:" in err and "over the depth limit of 512" in err


@pytest.mark.parametrize("size", [80 << 10, 1 << 20])
def test_a_long_pax_path_is_one_line_in_bounded_memory(tmp_path: Path, size: int) -> None:
    """Before: an 80 KiB PAX path cost 1.5 GiB and a 1 MiB one 18 GiB. Measured in a real
    child process (its peak resident size), through the CLI."""
    top = LayerBuilder(tmp_path / "l1.tar").file(f"{V}/" + "p/" * (size // 2) + "x.py", b"x")
    archive = _archive(tmp_path, _base(tmp_path), top)
    out = tmp_path / "o"
    status, peak, stderr = _run_measured([sys.executable, "-m", "recon", "snapshot",
                                          f"docker-archive:{archive}", "-o", str(out)], tmp_path)
    assert status != 0
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    assert "layer 1" in lines[0] and len(lines[0]) < 600
    assert _empty(out)
    assert peak < 400 << 20, f"peak resident size {peak >> 20} MiB"


def _run_measured(argv: list[str], tmp: Path) -> tuple[int, int, str]:
    """(exit status, peak resident bytes of that command alone, stderr), through
    ``tests/peak_rss.py`` (a child of this large process would report this process's peak)."""
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("peak_rss.py")), *argv],
                          capture_output=True, text=True, timeout=300, cwd=REPO, check=False)
    return done.returncode, int(done.stdout.strip().splitlines()[-1]), done.stderr


def test_a_symlink_with_an_empty_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    top = LayerBuilder(tmp_path / "l1.tar").symlink(f"{V}/empty", "")
    err = _cli_one_line(capsys, _archive(tmp_path, _base(tmp_path), top), tmp_path / "o")
    assert "layer 1 (sha256:" in err and "symlink" in err and "has an empty target" in err


def test_names_at_the_limits_are_kept(tmp_path: Path) -> None:
    """Just under every limit: a 255-byte component, 500 folders deep; written, hashed, cleaned up."""
    long_name = "n" * 252 + ".py"
    deep = "d/" * 499 + "x.py"
    top = (LayerBuilder(tmp_path / "l1.tar").file(f"{V}/{long_name}", b"LONG = 1\n")
           .file(f"{V}/{deep}", b"DEEP = 1\n"))
    snap = take_snapshot(f"docker-archive:{_archive(tmp_path, _base(tmp_path), top)}", out=tmp_path / "o")
    assert {f"vllm/{long_name}", f"vllm/{deep}"} <= set(snap.files)
    fd = os.open(snap.src, os.O_RDONLY | os.O_DIRECTORY)
    try:
        here = fd
        for part in f"vllm/{deep}".split("/")[:-1]:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=here)
            if here != fd:
                os.close(here)
            here = nxt
        with os.fdopen(os.open("x.py", os.O_RDONLY, dir_fd=here), "rb") as fh:
            assert fh.read() == b"DEEP = 1\n"
        os.close(here)
    finally:
        os.close(fd)
    assert [p.name for p in (tmp_path / "o").iterdir()] == [snap.name]  # staging (1000 deep) removed


# --- the output folder ---------------------------------------------------------------------

def test_an_output_folder_that_is_a_symlink_is_refused(tmp_path: Path, host: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    archive = _archive(tmp_path, _base(tmp_path))
    link = tmp_path / "snapshots"
    link.symlink_to(host)
    code, _, err = run_cli(capsys, "snapshot", f"docker-archive:{archive}", "-o", str(link))
    assert code == 2 and err.strip().splitlines() == [
        f"recon: error: the output folder {link} is a symlink (to {host}); recon does not follow it: "
        "give the folder itself"]
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(ReconError, match="is a symlink"):
        take_snapshot(f"docker-archive:{archive}", out=dangling)
    assert not (tmp_path / "nowhere").exists()
    # links above the folder are the user's layout and are followed
    snap = take_snapshot(f"docker-archive:{archive}", out=link / "inner")
    assert snap.root == (host / "inner" / snap.name).resolve()
    shutil.rmtree(host / "inner")


def _unshare() -> list[str]:
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) not installed")
    cmd = ["unshare", "--mount", "--propagation", "private"] + ([] if os.geteuid() == 0
                                                               else ["--map-root-user"])
    if subprocess.run([*cmd, "true"], capture_output=True).returncode != 0:
        if os.environ.get("CI"):
            pytest.fail("CI needs mount namespaces (unshare --mount)")
        pytest.skip("no mount namespaces here")
    return cmd


def _in_namespace(mount: str, folder: Path, archive: Path) -> subprocess.CompletedProcess[str]:
    """Mount ``mount`` over ``folder`` in a private mount namespace, snapshot into it, list it."""
    script = (f'{mount} && "$0" -m recon snapshot "docker-archive:$2" -o "$1/snaps"; rc=$?; '
              'echo "left: $(ls -A "$1/snaps" 2>/dev/null | tr "\\n" " ")"; exit $rc')
    return subprocess.run([*_unshare(), "sh", "-c", script, sys.executable, str(folder), str(archive)],
                          capture_output=True, text=True, timeout=300, cwd=REPO)


def test_a_full_disk_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    top = LayerBuilder(tmp_path / "l1.tar").file(f"{V}/big.py", os.urandom(400 << 10))
    archive = _archive(tmp_path, _base(tmp_path), top)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = _in_namespace('mount -t tmpfs -o size=128k tmpfs "$1" && mkdir "$1/snaps"', mnt, archive)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"recon: error: cannot write to the output folder {mnt}/snaps: No space left on device (ENOSPC)"]
    assert proc.stdout.strip() == "left:"


def test_a_read_only_mount_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    archive = _archive(tmp_path, _base(tmp_path))
    ro = tmp_path / "ro"
    (ro / "snaps").mkdir(parents=True)
    proc = _in_namespace('mount --bind "$1" "$1" && mount -o remount,bind,ro "$1"', ro, archive)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"recon: error: cannot write to the output folder {ro}/snaps: Read-only file system (EROFS)"]
    assert proc.stdout.strip() == "left:" and _empty(ro / "snaps")


def test_a_folder_without_write_permission_is_one_line(tmp_path: Path) -> None:
    """A 0555 folder, and a folder to be made in it. Root writes anywhere, so as root the run
    drops every capability first (``setpriv --bounding-set=-all``): still uid 0, but the
    folder's permission bits now apply to it, as they do to any user."""
    prefix: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("setpriv not installed")
        prefix = ["setpriv", "--bounding-set=-all", "--"]
    archive = _archive(tmp_path, _base(tmp_path))
    locked = tmp_path / "locked"
    locked.mkdir()
    os.chmod(locked, 0o555)
    try:
        for out in (locked, locked / "new"):
            proc = subprocess.run([*prefix, sys.executable, "-m", "recon", "snapshot",
                                   f"docker-archive:{archive}", "-o", str(out)],
                                  capture_output=True, text=True, timeout=300, cwd=REPO)
            assert proc.returncode == 2, proc.stderr
            assert proc.stderr.strip().splitlines() == [
                f"recon: error: cannot write to the output folder {out}: Permission denied (EACCES)"]
        assert list(locked.iterdir()) == []
    finally:
        os.chmod(locked, 0o755)


# --- stale staging folders -----------------------------------------------------------------

def _hold_staging(out: str, conn: Connection) -> None:
    """In a child process: open a staging folder, write into it, report its name, wait to be killed."""
    with staging(Path(out), "snapshot") as tmp:
        (tmp / "half-written").write_bytes(b"x" * 1000)
        conn.send(tmp.name)
        signal.pause()


def _staging_child(out: Path) -> tuple[multiprocessing.process.BaseProcess, str]:
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_hold_staging, args=(str(out), child))
    proc.start()
    assert parent.poll(60), "the child did not report its staging folder"
    return proc, parent.recv()


def test_a_killed_runs_staging_is_removed_by_the_next_run_a_live_one_never(tmp_path: Path,
                                                                         host: Path) -> None:
    archive = _archive(tmp_path, _base(tmp_path))
    out = tmp_path / "o"
    out.mkdir()
    live, live_name = _staging_child(out)
    killed, killed_name = _staging_child(out)
    assert re.fullmatch(rf"\.snapshot\.partial-{killed.pid}-[0-9a-f]{{8}}", killed_name)
    os.kill(killed.pid, signal.SIGKILL)
    killed.join(30)
    assert (out / killed_name / "half-written").is_file()  # SIGKILL runs no clean-up
    # not recon's, or not provably dead: left alone
    (out / ".snapshot.partial-abcd1234").mkdir()  # an older recon's name (no pid)
    (out / f".x.partial-{killed.pid}-deadbeef").symlink_to(host)  # a link is never a staging folder
    (out / f".y.partial-{killed.pid}-0123456789").mkdir()  # not the name recon makes
    try:
        snap = take_snapshot(f"docker-archive:{archive}", out=out, name="next")
        assert not (out / killed_name).exists()
        assert (out / live_name / "half-written").is_file()  # pid alive and lock held
        assert sorted(p.name for p in out.iterdir()) == sorted(
            [snap.name, live_name, ".snapshot.partial-abcd1234", f".x.partial-{killed.pid}-deadbeef",
             f".y.partial-{killed.pid}-0123456789"])
    finally:
        live.terminate()
        live.join(30)


def test_a_held_lock_protects_a_folder_whose_pid_is_not_ours_to_see(tmp_path: Path) -> None:
    """A run in another pid namespace sharing the folder: its pid looks dead here, its lock is held."""
    import fcntl

    out = tmp_path / "o"
    out.mkdir()
    name = ".snapshot.partial-999999999-0123abcd"  # over pid_max: no such process here
    (out / name).mkdir()
    fd = os.open(out / name, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with staging(out, "snapshot"):
            pass
        assert (out / name).is_dir()
    finally:
        os.close(fd)
    with staging(out, "snapshot"):
        pass
    assert list(out.iterdir()) == []


# --- --force ---------------------------------------------------------------------------------

def _force(tmp_path: Path, archive: Path, out: Path) -> ReconError:
    with pytest.raises(ReconError) as info:
        take_snapshot(f"docker-archive:{archive}", out=out, name="img", force=True)
    return info.value


def test_force_replaces_only_a_snapshot(tmp_path: Path, host: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    archive = _archive(tmp_path, _base(tmp_path))
    out = tmp_path / "o"
    out.mkdir()
    dest = out / "img"
    refused = "is not a snapshot recon made, so --force does not replace it"
    cases = {
        "a user's folder": lambda: (dest.mkdir(), (dest / "notes.txt").write_text("mine\n")),
        "a file": lambda: dest.write_text("mine\n"),
        "a link to a folder": lambda: dest.symlink_to(host),
        "a manifest that is not JSON": lambda: (dest.mkdir(), (dest / "manifest.json").write_text("{")),
        "a manifest that is a list": lambda: (dest.mkdir(), (dest / "manifest.json").write_text("[1]")),
        "a manifest without the format key": lambda: (dest.mkdir(),
                                                      (dest / "manifest.json").write_text('{"a": 1}')),
        "a probe bundle": lambda: (dest.mkdir(), (dest / "probe.json").write_text('{"targets": []}'),
                                   (dest / "_recon_probe_runtime.py").write_text("")),
    }
    for what, make in cases.items():
        make()
        before = host_state(out)
        err = _force(tmp_path, archive, out)
        assert refused in str(err), what
        assert host_state(out) == before, what
        if dest.is_symlink() or dest.is_file():
            dest.unlink()
        else:
            shutil.rmtree(dest)
    code, _, err_text = run_cli(capsys, "snapshot", f"docker-archive:{archive}", "-o", str(out),
                                "--name", "img", "--force")
    assert code == 0, err_text
    first = (dest / "manifest.json").read_text()
    (dest / "src/vllm/extra.py").write_text("edited\n")
    snap = take_snapshot(f"docker-archive:{archive}", out=out, name="img", force=True)
    assert not (snap.src / "vllm/extra.py").exists() and (dest / "manifest.json").read_text() != ""
    assert first
    assert [p.name for p in out.iterdir()] == ["img"]  # the old one gone, no staging folder left


def test_write_json_into_a_read_only_folder_is_one_line(tmp_path: Path) -> None:
    """The report writers (write_json/write_text) say which folder, as the snapshot writer does."""
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere; the EACCES case above runs without capabilities")
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o555)
    with pytest.raises(ReconError, match=f"cannot write to the output folder {folder}: Permission denied"):
        write_json(folder / "x.json", {})


def test_a_link_replacing_the_package_folder_finds_no_host_files(tmp_path: Path, host: Path) -> None:
    """vllm/__init__.py, then DIR vllm, then SYMLINK vllm -> a host folder, all in one layer: the
    link wins, and inside the image it points at nothing (tests/test_squash_duplicates.py
    checks the same rule against the Docker engine and umoci)."""
    top = (LayerBuilder(tmp_path / "l0.tar").file("usr/local/bin/python3", b"#!\n", mode=0o755)
           .file(f"{V}/__init__.py", b"").dir(V).symlink(V, str(host / "vllm")))
    out = tmp_path / "o"
    with pytest.raises(PackageNotFound):
        take_snapshot(f"docker-archive:{_archive(tmp_path, top)}", out=out)
    assert _empty(out)


def test_an_opaque_marker_at_the_image_root_hides_every_lower_layer(tmp_path: Path) -> None:
    """``.wh..wh..opq`` at the top of a layer makes the root opaque (umoci empties the root)."""
    top = LayerBuilder(tmp_path / "l1.tar").file(".wh..wh..opq", b"").file("usr/local/bin/python3", b"#!\n")
    with pytest.raises(PackageNotFound):
        take_snapshot(f"docker-archive:{_archive(tmp_path, _base(tmp_path), top)}", out=tmp_path / "o")
