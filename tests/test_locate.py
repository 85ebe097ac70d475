"""Which copy of the package the image's own Python imports, rebuilt from the image alone.

Each image is read twice: as a ``docker save`` archive (every layer listed) and
through the real Docker engine (``docker:``, where folders cannot be listed
cheaply and interpreters are found by stat), and both must agree.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from recon.errors import ReconError
from recon.snapshots.take import take_snapshot
from tests.imagekit import LayerBuilder, write_docker_archive
from tests.kit import run_cli

_tags = itertools.count()


@pytest.fixture(params=["docker-archive", "docker", "docker-engine-view"])
def source(request: pytest.FixtureRequest,
           monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Path], str]]:
    """``source(archive)`` -> the SOURCE to snapshot: the archive itself, or the image
    loaded into the real engine (removed afterwards), read from the engine's storage folders
    or through its archive API."""
    loaded: list[str] = []
    if request.param == "docker-engine-view":
        monkeypatch.setenv("RECON_DOCKER_READ", "engine")

    def make(archive: Path) -> str:
        if request.param == "docker-archive":
            return f"docker-archive:{archive}"
        client = request.getfixturevalue("docker_client")
        with open(archive, "rb") as fh:
            (image,) = client.images.load(fh.read())
        tag = f"recon-test/locate:{next(_tags)}"
        image.tag(tag)
        loaded.append(tag)
        return f"docker:{tag}"

    yield make
    if loaded:
        client = request.getfixturevalue("docker_client")
        for tag in loaded:
            client.images.remove(tag, force=True)

SYS = "usr/local/lib/python3.12/site-packages"
VENV = "opt/venv/lib/python3.12/site-packages"


def _image(tmp_path: Path, build, env: list[str]) -> Path:  # noqa: ANN001
    """One layer: a python3.12 with a python3 link in /usr/local/bin, then what ``build`` adds."""
    lb = LayerBuilder(tmp_path / "l.tar")
    lb.file("usr/local/bin/python3.12", b"#!\n", mode=0o755).symlink("usr/local/bin/python3", "python3.12")
    build(lb)
    lb.close()
    return write_docker_archive(tmp_path / "img.tar", [tmp_path / "l.tar"], env=env)


def _pkg(lb: LayerBuilder, site: str, version: str) -> None:
    lb.file(f"{site}/vllm/__init__.py", f"__version__ = '{version}'\n".encode())
    lb.file(f"{site}/vllm-{version}.dist-info/METADATA", f"Name: vllm\nVersion: {version}\n".encode())


PATH_SYS = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PATH_VENV = "PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def test_venv_first_on_path_wins(tmp_path: Path, source: Callable[[Path], str],
                                 capsys: pytest.CaptureFixture[str]) -> None:
    def build(lb: LayerBuilder) -> None:
        _pkg(lb, SYS, "0.32.0")
        _pkg(lb, VENV, "0.33.0")
        lb.symlink("opt/venv/bin/python3", "/usr/local/bin/python3.12")
        lb.file("opt/venv/pyvenv.cfg", b"home = /usr/local/bin\ninclude-system-site-packages = false\nversion = 3.12.3\n")

    ref = source(_image(tmp_path, build, [PATH_VENV]))
    snap = take_snapshot(ref, out=tmp_path / "o")
    assert snap.version == "0.33.0"
    assert snap.manifest.package.import_root == f"/{VENV}/vllm"
    assert snap.manifest.package.other_copies == [f"/{SYS}/vllm"]
    assert snap.manifest.python.venv == "/opt/venv"
    assert snap.manifest.python.executable == "/opt/venv/bin/python3"
    assert snap.manifest.python.version == "3.12"
    # the same image with the system python first on PATH takes the system copy
    snap2 = take_snapshot(ref, out=tmp_path / "o2", python="/usr/local/bin/python3")
    assert snap2.version == "0.32.0"
    # the CLI says so on stderr, and --json carries the other copies for scripts
    code, out, err = run_cli(capsys, "snapshot", ref, "-o", str(tmp_path / "o3"), "--json")
    assert code == 0
    assert json.loads(out)["other_copies"] == [f"/{SYS}/vllm"]
    assert " ".join(err.split()) == (
        f"note: 1 other copy of vllm in the image (/{SYS}/vllm); took /{VENV}/vllm, the one "
        "/opt/venv/bin/python3 imports; --python picks another interpreter")


def test_pythonpath_beats_site_packages(tmp_path: Path, source: Callable[[Path], str]) -> None:
    def build(lb: LayerBuilder) -> None:
        _pkg(lb, SYS, "0.32.0")
        lb.file("workspace/vllm-src/vllm/__init__.py", b"__version__ = '0.34.0.dev0'\n")

    img = _image(tmp_path, build, [PATH_SYS, "PYTHONPATH=/workspace/vllm-src"])
    snap = take_snapshot(source(img), out=tmp_path / "o")
    assert snap.manifest.package.import_root == "/workspace/vllm-src/vllm"
    assert snap.version == "0.34.0.dev0"  # its own __init__, not the other copy's dist-info
    assert "/" + SYS + "/vllm" in snap.manifest.package.other_copies


def test_editable_install_through_a_pth_file(tmp_path: Path, source: Callable[[Path], str]) -> None:
    """SGLang's images install it editable: site-packages only holds a .pth pointing at the checkout."""
    def build(lb: LayerBuilder) -> None:
        lb.file("sgl-workspace/sglang/python/sglang/__init__.py", b"")
        lb.file("sgl-workspace/sglang/python/sglang/version.py", b"__version__ = '0.5.23'\n")
        lb.file(f"{SYS}/sglang.pth", b"/sgl-workspace/sglang/python\n")
        lb.file(f"{SYS}/sglang-0.5.23.dist-info/METADATA", b"Name: sglang\nVersion: 0.5.23\n")

    ref = source(_image(tmp_path, build, [PATH_SYS]))
    reads = ["site", "package"] if ref.startswith("docker:") else ["site"]
    for read in reads:  # --package-only finds no package folder by name: it reads the site folder
        snap = take_snapshot(ref, out=tmp_path / read, docker_read=read)
        assert snap.package == "sglang"
        assert snap.manifest.package.import_root == "/sgl-workspace/sglang/python/sglang"
        assert set(snap.files) == {"sglang/__init__.py", "sglang/version.py"}
        assert snap.version == "0.5.23"


def test_package_folder_that_is_a_symlink(tmp_path: Path, source: Callable[[Path], str]) -> None:
    def build(lb: LayerBuilder) -> None:
        lb.file("opt/engine/vllm/__init__.py", b"__version__ = '1.0'\n")
        lb.file("opt/engine/vllm/envs.py", b"X = 1\n")
        lb.symlink(f"{SYS}/vllm", "/opt/engine/vllm")

    snap = take_snapshot(source(_image(tmp_path, build, [PATH_SYS])), out=tmp_path / "o")
    assert set(snap.files) == {"vllm/__init__.py", "vllm/envs.py"}
    assert snap.manifest.package.real_path == "/opt/engine/vllm"


def test_two_copies_off_the_path_need_python(tmp_path: Path, source: Callable[[Path], str]) -> None:
    def build(lb: LayerBuilder) -> None:
        _pkg(lb, "opt/a/lib/python3.12/site-packages", "0.1.0")
        _pkg(lb, "opt/b/lib/python3.12/site-packages", "0.2.0")

    ref = source(_image(tmp_path, build, [PATH_SYS]))
    if ref.startswith("docker-archive:"):  # every folder is listed: both copies are seen
        with pytest.raises(ReconError, match="2 copies of vllm .* pick the interpreter with --python"):
            take_snapshot(ref, out=tmp_path / "o")
    else:  # the engine is asked for known folders only: neither prefix is one
        with pytest.raises(ReconError, match="neither vllm nor sglang found"):
            take_snapshot(ref, out=tmp_path / "o")
    snap = take_snapshot(ref, out=tmp_path / "o", python="/opt/b/bin/python3")
    assert snap.version == "0.2.0"
