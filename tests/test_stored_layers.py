"""Reading an image's layers in place, from folders laid out as the engine's overlay2 stores them.

The expected view comes from the kernel: the same layer folders are mounted
with overlayfs (read-only, the top layer first in ``lowerdir``), and the merged
mount is what every process in a container of that image would see. Whiteouts
are real character devices 0/0 and opaque folders carry the real
``trusted.overlay.opaque`` attribute, as dockerd writes them; both need root,
and the mount needs a kernel with overlayfs, so the tests say so and skip
elsewhere. The engine end to end (dockerd laying out the folders itself) is in
``tests/test_snapshot_images.py``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from recon.acquire.layers import Squasher
from recon.acquire.sources.base import Image
from recon.acquire.sources.stored import (
    InPlaceRefused,
    Selection,
    StoredLayers,
    clean_path,
    find_stored,
    selection,
    stored_layer_list,
)
from recon.acquire.writer import TreeWriter
from recon.errors import ReconError
from tests.imagekit import SITE, tree_fingerprint

PKG = f"{SITE}/vllm"


def _cannot(why: str) -> None:
    """Skip where this machine cannot do it; in CI, which runs as root with overlayfs, fail."""
    if os.environ.get("CI"):
        pytest.fail(f"CI must run this ({why})")
    pytest.skip(why)


def _whiteout(path: Path) -> None:
    os.mknod(path, 0o600 | 0o020000, os.makedev(0, 0))


def _opaque(path: Path) -> None:
    os.setxattr(path, "trusted.overlay.opaque", b"y")


def _write(root: Path, rel: str, data: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(data)


@pytest.fixture
def layer_folders(tmp_path: Path) -> list[Path]:
    """Three layer folders, bottom first, with every overlay rule a layer can use."""
    if os.geteuid() != 0:
        _cannot("whiteouts (mknod) and trusted.* attributes need root")
    l0, l1, l2 = (tmp_path / f"layer{i}" for i in range(3))
    for f in ("__init__.py", "envs.py", "gone.py", "opaque/old.py", "opaque/deep/x.py",
              "dir_to_file/a.py", "file_to_dir", "whited_dir/a.py", "kept/k.py"):
        if f == "file_to_dir":
            _write(l0, f"{PKG}/{f}", "a file below\n")
        else:
            _write(l0, f"{PKG}/{f}", f"# {f} in layer 0\n")
    _write(l0, f"{SITE}/vllm-0.1.dist-info/METADATA", "Name: vllm\nVersion: 0.1\n")
    _write(l0, f"{SITE}/torch/huge.py", "# never read\n")
    _write(l0, "usr/local/bin/python3.12", "")
    os.symlink("python3.12", l0 / "usr/local/bin/python3")
    # layer 1: a whiteout, an opaque folder, a folder replaced by a file and the other way round
    _write(l1, f"{PKG}/envs.py", "# envs.py in layer 1\n")
    _whiteout(l1 / PKG / "gone.py")
    (l1 / PKG / "opaque").mkdir()
    _opaque(l1 / PKG / "opaque")
    _write(l1, f"{PKG}/opaque/new.py", "# new in layer 1\n")
    _write(l1, f"{PKG}/dir_to_file", "now a file\n")
    _write(l1, f"{PKG}/file_to_dir/inner.py", "# a folder now\n")
    _whiteout(l1 / PKG / "whited_dir")
    os.symlink("envs.py", l1 / PKG / "link.py")
    os.symlink("/etc/passwd", l1 / PKG / "host_link.py")  # listed, never followed
    # the namespace a root engine's overlayfs does not read: the kernel ignores it, so must recon
    (l1 / PKG / "kept").mkdir()
    os.setxattr(l1 / PKG / "kept", "user.overlay.opaque", b"y")
    # layer 2: the hot-fix, and a whiteout of the old distribution for a new one
    _write(l2, f"{PKG}/__init__.py", "# hot-fix in layer 2\n")
    _whiteout(_mk(l2 / SITE) / "vllm-0.1.dist-info")
    _write(l2, f"{SITE}/vllm-0.2.dist-info/METADATA", "Name: vllm\nVersion: 0.2\n")
    return [l0, l1, l2]


def _mk(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p


@contextlib.contextmanager
def _mounted(folders: list[Path], at: Path) -> Iterator[Path]:
    at.mkdir()
    lower = ":".join(str(f) for f in reversed(folders))
    res = subprocess.run(["mount", "-t", "overlay", "overlay", "-o", f"ro,lowerdir={lower}", str(at)],
                         capture_output=True, text=True, check=False)
    if res.returncode != 0:
        _cannot(f"the kernel would not mount overlayfs here: {res.stderr.strip()}")
    try:
        yield at
    finally:
        subprocess.run(["umount", str(at)], check=False)


def _squash(folders: list[Path], out: Path, sel: Selection | None = None) -> tuple[Path, object]:
    stored = StoredLayers("overlay2", [str(f) for f in folders],
                          [f"sha256:{i:064x}" for i in range(len(folders))], merged=False)
    sel = sel or selection(stored, [SITE], ["vllm"], ["usr/local/bin/python3"])
    image = Image(ref="test", scheme="docker", digest=None, layers=stored_layer_list(stored, sel))
    with TreeWriter(out) as writer:
        result = Squasher(writer, packages=["vllm"], all_files=True).run(image)
    return out / PKG, result


def test_the_squash_of_layer_folders_is_the_kernels_overlay_view(layer_folders: list[Path],
                                                                  tmp_path: Path) -> None:
    with _mounted(layer_folders, tmp_path / "merged") as merged:
        expected = tree_fingerprint(merged / PKG)
        dists = sorted(p.name for p in (merged / SITE).iterdir() if p.name.endswith(".dist-info"))
    assert "gone.py" not in expected and "opaque/new.py" in expected  # the oracle saw the rules
    got_root, result = _squash(layer_folders, tmp_path / "out")
    # links pointing out of the package are written to the staging tree as links (never
    # followed); the fingerprint compares their targets, as the kernel shows them
    assert tree_fingerprint(got_root) == expected
    seen = sorted(n.rsplit("/", 2)[-2] for n in result.metadata  # type: ignore[attr-defined]
                  if n.endswith("/METADATA"))
    assert seen == dists == ["vllm-0.2.dist-info"]


def test_each_file_keeps_the_layer_it_came_from(layer_folders: list[Path], tmp_path: Path) -> None:
    _, result = _squash(layer_folders, tmp_path / "out")
    layer = {n[len(PKG) + 1:]: c.layer for n, c in result.captured.items()}  # type: ignore[attr-defined]
    assert layer["__init__.py"] == 2
    assert layer["envs.py"] == 1
    assert layer["kept/k.py"] == 0
    assert layer["opaque/new.py"] == 1


def test_only_the_package_and_the_metadata_are_opened(layer_folders: list[Path], tmp_path: Path) -> None:
    """The rest of a site folder is listed, never descended into or read: a folder of the
    same size as CUDA's libraries costs one directory entry."""
    for i in range(200):
        _write(layer_folders[0], f"{SITE}/nvidia/lib{i}/x.so", "x" * 1000)
    stored = StoredLayers("overlay2", [str(f) for f in layer_folders], ["a", "b", "c"], merged=False)
    layers = stored_layer_list(stored, selection(stored, [SITE], ["vllm"], []))
    names = [e.name for layer in layers for e in layer.entries()]
    assert f"{SITE}/nvidia" in names and f"{SITE}/torch" in names
    assert not [n for n in names if n.startswith((f"{SITE}/nvidia/", f"{SITE}/torch/"))]
    assert f"{SITE}/vllm-0.2.dist-info/METADATA" in names


def test_a_fifo_in_a_layer_is_never_opened(layer_folders: list[Path], tmp_path: Path) -> None:
    """A FIFO named like a package file would block a plain open() forever."""
    os.mkfifo(layer_folders[2] / PKG / "pipe.py")
    done = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            _squash(layer_folders, tmp_path / "out")
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)
        done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(30), "reading a layer folder with a FIFO in it hung"
    assert errors and "device file, FIFO or socket inside the package" in str(errors[0])


def test_a_layer_folder_swapped_for_a_symlink_is_not_followed(layer_folders: list[Path],
                                                             tmp_path: Path) -> None:
    """Inside a layer, a folder on the way to the package that is a symlink (to the host's
    /etc, say) is reported as a link; nothing under it is read from the host."""
    secret = tmp_path / "host" / "vllm"
    secret.mkdir(parents=True)
    (secret / "secret.py").write_text("TOKEN = 'host'\n")
    top = tmp_path / "layer3"
    (top / SITE).parent.mkdir(parents=True)
    os.symlink(str(tmp_path / "host"), top / SITE)
    root, result = _squash([*layer_folders, top], tmp_path / "out")
    assert not [n for n in result.captured if "secret" in n]  # type: ignore[attr-defined]
    assert not (root / "secret.py").exists()


def test_storage_that_is_not_here_is_said_in_words(tmp_path: Path) -> None:
    """What the engine reports about its storage decides; folders this machine does not
    have (a remote engine, Docker Desktop's VM) send recon through the engine instead."""
    attrs = {"RootFS": {"Layers": ["sha256:" + "a" * 64, "sha256:" + "b" * 64]},
             "GraphDriver": {"Name": "overlay2", "Data": {
                 "LowerDir": str(tmp_path / "nowhere/l0/diff"), "UpperDir": str(tmp_path / "nowhere/l1/diff")}}}
    stored, why = find_stored(attrs, str(tmp_path))
    assert stored is None and "not readable here" in why
    attrs["GraphDriver"]["Data"]["LowerDir"] = ""  # type: ignore[index]
    assert "names 1 overlay2 folders for 2 layers" in find_stored(attrs, str(tmp_path))[1]
    attrs["GraphDriver"] = {"Name": "overlayfs", "Data": None}  # the containerd image store
    assert "(overlayfs) is not read in place" in find_stored(attrs, str(tmp_path))[1]
    attrs["GraphDriver"] = {"Name": "vfs", "Data": None}
    assert "layer database is not readable here" in find_stored(attrs, str(tmp_path))[1]


def test_a_file_that_vanishes_is_one_line(layer_folders: list[Path], tmp_path: Path) -> None:
    """The engine removing the image while recon reads it: one line naming the file."""
    stored = StoredLayers("overlay2", [str(f) for f in layer_folders], ["a", "b", "c"], merged=False)
    (layer,) = stored_layer_list(stored, selection(stored, [SITE], ["vllm"], []))[2:]
    entry = next(e for e in layer.entries() if e.name.endswith("vllm/__init__.py"))
    (layer_folders[2] / PKG / "__init__.py").unlink()
    assert entry.open is not None
    with pytest.raises(ReconError, match="cannot read the engine's storage"):
        entry.open()


@pytest.fixture(scope="module")
def vfs_engine() -> Iterator[str]:
    """A second private engine with vfs storage (the CI engine runs overlay2 where it can):
    its DOCKER_HOST, for the one test that reads vfs's layer copies in place."""
    import shutil
    import tempfile
    import time

    if shutil.which("dockerd") is None or os.geteuid() != 0:
        _cannot("a second Docker engine needs dockerd and root")
    base = Path(tempfile.mkdtemp(prefix="recon-vfs-", dir="/tmp"))
    sock = base / "d.sock"
    log = open(base / "dockerd.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(["dockerd", "--storage-driver=vfs", "--iptables=false", "--ip6tables=false",
                             "--bridge=none", "-H", f"unix://{sock}", "--data-root", str(base / "data"),
                             "--exec-root", str(base / "exec"), "--pidfile", str(base / "pid")],
                            stdout=log, stderr=subprocess.STDOUT)
    host = f"unix://{sock}"
    try:
        deadline = time.monotonic() + 60
        while subprocess.run(["docker", "-H", host, "version"], capture_output=True).returncode != 0:
            if proc.poll() is not None or time.monotonic() > deadline:
                _cannot(f"dockerd with vfs storage did not start: {(base / 'dockerd.log').read_text()[-300:]}")
            time.sleep(0.3)
        yield host
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(30)
        log.close()
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.docker
def test_vfs_storage_is_read_in_place_as_the_merged_view(vfs_engine: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """vfs keeps one whole copy of the filesystem per layer; the engine's layer database
    names the top one, which is read as the merged view: the same files as the archive the
    image was loaded from (whiteout, opaque folder and hot-fix applied), no container."""
    from recon.snapshots.take import take_snapshot
    from tests.imagekit import LayerBuilder, snapshot_fingerprint, write_docker_archive

    base = LayerBuilder(tmp_path / "l0.tar")
    base.file("usr/local/bin/python3", b"")
    for f in ("__init__.py", "envs.py", "gone.py", "old/a.py"):
        base.file(f"{PKG}/{f}", f"# {f}\n".encode())
    base.file(f"{SITE}/vllm-1.0.dist-info/METADATA", b"Name: vllm\nVersion: 1.0\n")
    top = LayerBuilder(tmp_path / "l1.tar").whiteout(f"{PKG}/gone.py").opaque(f"{PKG}/old")
    top.file(f"{PKG}/old/b.py", b"# b\n").file(f"{PKG}/envs.py", b"# fixed\n")
    archive = write_docker_archive(tmp_path / "img.tar", [base.close(), top.close()], tag="recon-test/vfs:1")
    subprocess.run(["docker", "-H", vfs_engine, "load", "-q", "-i", str(archive)], check=True,
                   capture_output=True)
    monkeypatch.setenv("DOCKER_HOST", vfs_engine)
    snap = take_snapshot("docker:recon-test/vfs:1", out=tmp_path / "vfs", package="vllm")
    ref = take_snapshot(f"docker-archive:{archive}", out=tmp_path / "archive", package="vllm")
    assert snapshot_fingerprint(snap) == snapshot_fingerprint(ref)
    assert set(snap.files) == {"vllm/__init__.py", "vllm/envs.py", "vllm/old/b.py"}
    assert snap.manifest.source["read"] == "layer folders in place (vfs, merged view)"
    assert [d["name"] for d in snap.manifest.distributions] == ["vllm"]
    listed = subprocess.run(["docker", "-H", vfs_engine, "ps", "-aq"], capture_output=True, text=True)
    assert listed.stdout.strip() == ""


def test_overlay_attributes_recon_does_not_apply_send_it_through_the_engine(
        layer_folders: list[Path], tmp_path: Path) -> None:
    """A layer can carry any overlayfs attribute (the engine copies a layer's xattr records);
    a redirect, metacopy or an opaque value other than "y" changes what the kernel shows in
    ways recon does not apply: refused, so the caller reads through the engine instead."""
    os.setxattr(layer_folders[1] / PKG / "opaque", "trusted.overlay.redirect", b"/elsewhere")
    with pytest.raises(InPlaceRefused, match="trusted.overlay.redirect"):
        _squash(layer_folders, tmp_path / "a")
    os.removexattr(layer_folders[1] / PKG / "opaque", "trusted.overlay.redirect")
    os.setxattr(layer_folders[2] / PKG / "__init__.py", "trusted.overlay.metacopy", b"")
    with pytest.raises(InPlaceRefused, match="trusted.overlay.metacopy"):
        _squash(layer_folders, tmp_path / "b")
    os.removexattr(layer_folders[2] / PKG / "__init__.py", "trusted.overlay.metacopy")
    (layer_folders[2] / PKG / ".wh.sneaky").write_text("")  # a name the engine never writes
    with pytest.raises(InPlaceRefused, match=r"\.wh\."):
        _squash(layer_folders, tmp_path / "c")


def test_paths_from_the_image_never_climb_out_of_a_layer_folder(layer_folders: list[Path],
                                                                tmp_path: Path) -> None:
    """PYTHONPATH, VIRTUAL_ENV, .pth lines and link targets come from the image: ".." is taken
    back at the image root, as the kernel does in a container, never on the host."""
    assert clean_path("../../../../etc/./passwd") == "etc/passwd"
    assert clean_path("/opt/venv/../x/") == "opt/x"
    host = tmp_path / "host-site" / "vllm"
    host.mkdir(parents=True)
    (host / "secret.py").write_text("TOKEN = 'host'\n")
    climb = "../" * 12 + str(tmp_path / "host-site").lstrip("/")
    stored = StoredLayers("overlay2", [str(f) for f in layer_folders], ["a", "b", "c"], merged=False)
    sel = selection(stored, [climb, SITE], ["vllm"], [climb + "/python3"])
    names = [e.name for layer in stored_layer_list(stored, sel) for e in layer.entries()]
    assert not [n for n in names if "secret" in n or n.startswith("..")]


def test_a_venv_behind_a_symlinked_folder_is_followed(tmp_path: Path) -> None:
    """VIRTUAL_ENV=/opt/venv where /opt/venv -> venvs/py312 (a lower layer) and the venv's
    site folder is in an upper one: the link is reported and the folder it names is read,
    as the engine's own lookups follow it."""
    if os.geteuid() != 0:
        _cannot("layer folders with root-owned modes need root")
    l0, l1 = tmp_path / "l0", tmp_path / "l1"
    (l0 / "opt" / "venvs" / "py312" / "bin").mkdir(parents=True)
    os.symlink("venvs/py312", l0 / "opt" / "venv")
    venv_site = "opt/venvs/py312/lib/python3.12/site-packages"
    _write(l1, f"{venv_site}/vllm/__init__.py", "# the venv's\n")
    _write(l1, "opt/venvs/py312/bin/python3", "")
    stored = StoredLayers("overlay2", [str(l0), str(l1)], ["a", "b"], merged=False)
    sel = selection(stored, ["opt/venv/lib/python3.12/site-packages"], ["vllm"],
                    ["opt/venv/bin/python3"])
    assert sel.sites == [venv_site]
    assert "opt/venv" in sel.points and "opt/venvs/py312/bin/python3" in sel.points
    names = {e.name for layer in stored_layer_list(stored, sel) for e in layer.entries()}
    assert f"{venv_site}/vllm/__init__.py" in names and "opt/venv" in names


def test_a_chain_of_links_is_followed_a_bounded_number_of_times(tmp_path: Path) -> None:
    """Links that go round end the chain (no answer for that path), and each chain has its
    own budget: many candidate names do not starve the last ones."""
    l0 = tmp_path / "l0"
    (l0 / "usr" / "bin").mkdir(parents=True)
    os.symlink("b", l0 / "usr" / "bin" / "a")
    os.symlink("a", l0 / "usr" / "bin" / "b")
    _write(l0, "opt/py/bin/python3", "")
    stored = StoredLayers("overlay2", [str(l0)], ["a"], merged=False)
    many = [f"usr/bin/missing{i}" for i in range(200)]
    sel = selection(stored, [], [], ["usr/bin/a", *many, "opt/py/bin/python3"])
    assert "opt/py/bin/python3" in sel.points
    # the two links of the loop are reported as links (the squash sees them as the image has
    # them); no path past them is kept, and the call came back
    assert {"usr/bin/a", "usr/bin/b"} <= set(sel.points)
    assert len(sel.points) == 3


@pytest.mark.docker
def test_a_layer_the_engine_applied_with_a_redirect_is_read_through_the_engine(
        docker_client, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001
    """The engine copies a layer's xattr records onto its folders, overlayfs attributes
    included: a layer whose package folder carries ``trusted.overlay.redirect`` is not read
    in place (recon does not apply redirects); one line says so and the snapshot comes
    through the engine's archive API, whose mounted view the kernel resolved: the package
    folder shows the lower folder the redirect names, not the lower ``vllm``."""
    import tarfile

    from recon.snapshots.take import take_snapshot
    from tests.imagekit import LayerBuilder, write_docker_archive

    if docker_client.info().get("Driver") != "overlay2":
        _cannot("this engine does not store layers as overlay2 folders")
    base = LayerBuilder(tmp_path / "l0.tar")
    base.file("usr/local/bin/python3", b"").file(f"{PKG}/__init__.py", b"# base\n")
    base.file("opt/other/__init__.py", b"# redirected\n")
    base.file(f"{SITE}/vllm-1.0.dist-info/METADATA", b"Name: vllm\nVersion: 1.0\n")
    top = tmp_path / "l1.tar"
    with tarfile.open(top, "w", format=tarfile.PAX_FORMAT) as tar:
        ti = tarfile.TarInfo(PKG)
        ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, 1_700_000_000
        ti.pax_headers = {"SCHILY.xattr.trusted.overlay.redirect": "/opt/other"}
        tar.addfile(ti)
    tag = "recon-test/redirect:1"
    archive = write_docker_archive(tmp_path / "img.tar", [base.close(), top], tag=tag)
    with open(archive, "rb") as fh:
        docker_client.images.load(fh.read())
    try:
        image = docker_client.images.get(tag)
        upper = image.attrs["GraphDriver"]["Data"]["UpperDir"]
        try:
            copied = os.getxattr(f"{upper}/{PKG}", "trusted.overlay.redirect")
        except OSError:
            copied = b""
        if copied != b"/opt/other":
            _cannot("the engine did not copy the layer's xattr record")
        before = {c["Id"] for c in docker_client.api.containers(all=True)}
        snap = take_snapshot(f"docker:{tag}", out=tmp_path / "out", package="vllm")
        err = capfd.readouterr().err
        assert "trusted.overlay.redirect" in err and "reading through the engine's archive API" in err
        assert snap.manifest.source["read"] == "site folders"
        assert (snap.src / "vllm" / "__init__.py").read_bytes() == b"# redirected\n"
        assert {c["Id"] for c in docker_client.api.containers(all=True)} == before
    finally:
        docker_client.images.remove(tag, force=True)
