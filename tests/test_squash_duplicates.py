"""Duplicate names inside one layer: the expected tree comes from umoci and the Docker engine.

Each case is a real ``docker save`` archive whose top layer names one path
several times (a file, then a folder, then a link of the same name, ...) or
replaces a folder with a file or a link. umoci (``skopeo copy`` to an OCI
layout, ``umoci unpack``) applies a layer entry by entry: an entry replaces
what is at its name unless both are folders, so the last entry wins, and a
non-folder replacing a folder takes what was below it, lower layers' files
included. recon's snapshot must show exactly that tree for the package: the
same files with the same bytes, the same links, or no package at all when
``vllm`` ends as a link to nothing in the image.

The real Docker engine (``docker load``, ``docker create``, ``docker export``:
the container's filesystem, never started) is held to the same tree where it
loads the image; it refuses a layer that names a path twice (``ApplyLayer
duplicates of file paths not supported``, its tar-split layer store), and the
test checks that it does.
"""

from __future__ import annotations

import hashlib
import io
import os
import posixpath
import shutil
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from recon.errors import PackageNotFound
from recon.snapshots.take import take_snapshot
from tests.imagekit import (
    SITE,
    LayerBuilder,
    snapshot_fingerprint,
    tree_fingerprint,
    write_docker_archive,
)

V = f"{SITE}/vllm"
#: kind, then sha256 for files or the target for links; folders are ("dir", "")
View = dict[str, tuple[str, str]]
Fingerprint = dict[str, tuple[str, str]]

Build = Callable[[LayerBuilder, Path], object]
#: name -> (top layer, whether it names one path twice). The Docker engine refuses a layer
#: that names a path twice ("duplicates of file paths not supported", its tar-split layer
#: store); umoci (and containerd's applier) apply it entry by entry. Cases without a
#: duplicate name are held to the engine's tree as well.
CASES: dict[str, tuple[Build, bool]] = {
    # the escape of issue 14: the package folder ends as a link (here to a folder of the image)
    "file, dir, link": (lambda t, h: t.file(f"{V}/__init__.py", b"TOP = 1\n").dir(V)
                        .symlink(V, "/opt/real/vllm"), True),
    # ... and to a host folder: inside the image that is nothing
    "file, dir, link to the host": (lambda t, h: t.file(f"{V}/__init__.py", b"TOP = 1\n").dir(V)
                                    .symlink(V, str(h)), True),
    "the package folder replaced by a link": (lambda t, h: t.file(f"{V}/__init__.py", b"TOP = 1\n")
                                              .symlink(V, "/opt/real/vllm"), False),
    "a folder replaced by a link to the host": (lambda t, h: t.file(f"{V}/sub/new.py", b"NEW = 1\n")
                                                .symlink(f"{V}/sub", str(h)), False),
    "a folder replaced by a file": (lambda t, h: t.file(f"{V}/sub/new.py", b"NEW = 1\n")
                                    .file(f"{V}/sub", b"now a file\n"), False),
    "a link, then a folder, then a file in it": (lambda t, h: t.symlink(f"{V}/sub", "/etc").dir(f"{V}/sub")
                                                 .file(f"{V}/sub/new.py", b"NEW = 1\n"), True),
    "a file, then a link of its name": (lambda t, h: t.file(f"{V}/x.py", b"one\n")
                                        .symlink(f"{V}/x.py", "sub/keep.py"), True),
    "a link, then a file of its name": (lambda t, h: t.symlink(f"{V}/x.py", "/etc/passwd")
                                        .file(f"{V}/x.py", b"two\n"), True),
    "a folder twice, files between": (lambda t, h: t.dir(f"{V}/sub").file(f"{V}/sub/a.py", b"A = 1\n")
                                      .dir(f"{V}/sub").file(f"{V}/sub/b.py", b"B = 1\n"), True),
    "a file three times": (lambda t, h: t.file(f"{V}/x.py", b"1\n").file(f"{V}/x.py", b"2\n")
                           .file(f"{V}/x.py", b"3\n"), True),
    "a file, then a folder of its name": (lambda t, h: t.file(f"{V}/x.py", b"one\n").dir(f"{V}/x.py")
                                          .file(f"{V}/x.py/inner.py", b"IN = 1\n"), True),
}


def _base(d: Path) -> LayerBuilder:
    return (LayerBuilder(d / "l0.tar").file("usr/local/bin/python3", b"#!\n", mode=0o755)
            .file(f"{V}/__init__.py", b"__version__ = '1.0'\n")
            .file(f"{V}/sub/keep.py", b"KEEP = 1\n")
            .file(f"{V}/sub/other.py", b"OTHER = 1\n")
            .file("opt/real/vllm/__init__.py", b"__version__ = '2.0'\n")
            .file("opt/real/vllm/mod.py", b"MOD = 1\n"))


def _need(tool: str) -> None:
    if shutil.which(tool) is None:
        if os.environ.get("CI"):
            pytest.fail(f"{tool} is required in CI (.ci/run installs it)")
        pytest.skip(f"{tool} not installed")


def _package(view: View) -> Fingerprint | None:
    """The package folder of an image's filesystem (links resolved inside it), or None."""
    path = V
    for _ in range(40):
        kind, data = view.get(path, ("", ""))
        if kind != "symlink":
            break
        path = posixpath.normpath(data.lstrip("/") if data.startswith("/")
                                  else posixpath.join(posixpath.dirname(path), data))
    if view.get(path, ("", ""))[0] != "dir":
        return None
    prefix = path + "/"
    return {k[len(prefix):]: v for k, v in view.items() if k.startswith(prefix) and v[0] != "dir"}


def _engine_view(docker_client, archive: Path, tag: str) -> View | str:  # noqa: ANN001
    """The container filesystem the Docker engine builds from ``archive`` (created, never started),
    or the engine's reason for refusing to load it."""
    import docker

    with open(archive, "rb") as fh:
        try:
            docker_client.images.load(fh.read())
        except docker.errors.ImageLoadError as err:
            return str(err)
    container = docker_client.containers.create(tag, command=["/none"])
    try:
        data = b"".join(container.export())
    finally:
        container.remove(force=True)
        docker_client.images.remove(tag, force=True)
    view: View = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        for m in tf:
            name = m.name.strip("/").removeprefix("./")
            if m.issym():
                view[name] = ("symlink", m.linkname)
            elif m.isdir():
                view[name] = ("dir", "")
            elif m.isfile():
                body = tf.extractfile(m)
                assert body is not None
                view[name] = ("file", hashlib.sha256(body.read()).hexdigest())
    return view


def _umoci_view(archive: Path, d: Path) -> View:
    """The root filesystem umoci unpacks from the same archive (via skopeo's OCI layout)."""
    d.mkdir()
    subprocess.run(["skopeo", "copy", "-q", f"docker-archive:{archive}", f"oci:{d}/oci:x"], check=True)
    subprocess.run(["umoci", "unpack", "--image", f"{d}/oci:x", str(d / "bundle")], check=True,
                   capture_output=True)
    root = d / "bundle/rootfs"
    view: View = {}
    for folder, dirs, files in os.walk(root, followlinks=False):
        for name in [*dirs, *files]:
            p = Path(folder) / name
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                view[rel] = ("symlink", os.readlink(p))
            elif p.is_dir():
                view[rel] = ("dir", "")
            else:
                view[rel] = ("file", hashlib.sha256(p.read_bytes()).hexdigest())
    return view


def _recon(archive: Path, out: Path) -> Fingerprint | None:
    try:
        snap = take_snapshot(f"docker-archive:{archive}", out=out)
    except PackageNotFound:
        assert not out.exists() or list(out.iterdir()) == []
        return None
    on_disk = tree_fingerprint(snap.src / "vllm")
    assert snapshot_fingerprint(snap) == on_disk, "the manifest and the files disagree"
    # links out of the package are listed, not written (tests/test_containment_tree.py)
    listed = {rel[len("vllm/"):]: ("symlink", rec.target) for rel, rec in snap.manifest.skipped.items()
              if rec.kind == "symlink"}
    assert not any(os.path.lexists(snap.src / "vllm" / rel) for rel in listed)
    return {**on_disk, **listed}


@pytest.mark.docker
@pytest.mark.parametrize("case", list(CASES))
def test_duplicate_names_in_one_layer_as_the_engine_and_umoci_apply_them(
        case: str, tmp_path: Path, docker_client) -> None:  # noqa: ANN001
    _need("skopeo")
    _need("umoci")
    host = tmp_path / "host"
    (host / "sub").mkdir(parents=True)
    (host / "__init__.py").write_text("HOST = 1\n")
    top = LayerBuilder(tmp_path / "l1.tar")
    build, duplicate = CASES[case]
    build(top, host)
    tag = f"recon-test/dups:{hashlib.sha256(case.encode()).hexdigest()[:12]}"
    archive = write_docker_archive(tmp_path / "img.tar", [_base(tmp_path).close(), top.close()], tag=tag)
    umoci = _package(_umoci_view(archive, tmp_path / "umoci"))
    engine = _engine_view(docker_client, archive, tag)
    if duplicate:
        # refused: "duplicates of file paths not supported", or the folder's deferred time
        # stamp failing on what the link points to ("chtimes ...: no such file or directory");
        # vfs says "ApplyLayer ...", overlay2 "Error processing tar file ..."
        assert isinstance(engine, str), engine
        assert engine.startswith(("ApplyLayer", "Error processing tar file")), engine
    else:
        assert not isinstance(engine, str), engine
        assert _package(engine) == umoci, "the engine and umoci disagree; the rule is not settled"
    assert _recon(archive, tmp_path / "out") == umoci
    assert sorted(p.name for p in host.iterdir()) == ["__init__.py", "sub"]  # the host folder untouched
