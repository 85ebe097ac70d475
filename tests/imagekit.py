"""Build real image layers and ``docker save``-format archives for tests and benchmarks.

Layers are ordinary tar files written with :mod:`tarfile`; whiteouts, opaque
markers, links, devices and hostile names are written exactly as a layer
would carry them, so the Docker engine, skopeo and umoci can load the same
bytes recon reads.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

SITE = "usr/local/lib/python3.12/site-packages"


class LayerBuilder:
    """Write one layer tar (uncompressed) entry by entry."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.tar = tarfile.open(self.path, "w", format=tarfile.PAX_FORMAT)

    def _info(self, name: str, kind: bytes, **kw: Any) -> tarfile.TarInfo:
        ti = tarfile.TarInfo(name)
        ti.type = kind
        ti.mtime = 1_700_000_000
        ti.mode = kw.pop("mode", 0o644 if kind == tarfile.REGTYPE else 0o755)
        for k, v in kw.items():
            setattr(ti, k, v)
        return ti

    def file(self, name: str, data: bytes, mode: int = 0o644) -> LayerBuilder:
        ti = self._info(name, tarfile.REGTYPE, mode=mode, size=len(data))
        self.tar.addfile(ti, io.BytesIO(data))
        return self

    def dir(self, name: str) -> LayerBuilder:
        self.tar.addfile(self._info(name, tarfile.DIRTYPE))
        return self

    def symlink(self, name: str, target: str) -> LayerBuilder:
        self.tar.addfile(self._info(name, tarfile.SYMTYPE, linkname=target, mode=0o777))
        return self

    def hardlink(self, name: str, target: str) -> LayerBuilder:
        self.tar.addfile(self._info(name, tarfile.LNKTYPE, linkname=target))
        return self

    def fifo(self, name: str) -> LayerBuilder:
        self.tar.addfile(self._info(name, tarfile.FIFOTYPE))
        return self

    def chardev(self, name: str) -> LayerBuilder:
        self.tar.addfile(self._info(name, tarfile.CHRTYPE, devmajor=1, devminor=3))
        return self

    def whiteout(self, path: str) -> LayerBuilder:
        parent, _, base = path.rpartition("/")
        return self.file(f"{parent}/.wh.{base}" if parent else f".wh.{base}", b"")

    def opaque(self, folder: str) -> LayerBuilder:
        return self.file(f"{folder}/.wh..wh..opq", b"")

    def from_wheel(self, wheel: Path, prefix: str = SITE,
                   keep: Callable[[str], bool] = lambda n: n.endswith(".py")) -> LayerBuilder:
        """Copy the members of a real wheel that ``keep`` accepts, plus its METADATA."""
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                name = info.filename
                if info.is_dir():
                    continue
                if keep(name) or name.endswith(".dist-info/METADATA"):
                    self.file(f"{prefix}/{name}", zf.read(info))
        return self

    def close(self) -> Path:
        self.tar.close()
        return self.path


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def write_docker_archive(dest: Path, layers: Iterable[Path], *, tag: str = "recon-test/img:1",
                         env: list[str] | None = None, entrypoint: list[str] | None = None,
                         cmd: list[str] | None = None, labels: dict[str, str] | None = None,
                         working_dir: str = "", compress: bool = False,
                         raw_layers: dict[int, bytes] | None = None) -> Path:
    """Write a legacy ``docker save`` archive (``manifest.json`` + ``<id>/layer.tar``).

    ``compress`` gzips the layer files (``docker load`` accepts both);
    ``raw_layers`` replaces a layer's bytes verbatim (for corrupt-layer tests).
    """
    layers = list(layers)
    diff_ids, names = [], []
    blobs: list[tuple[str, bytes | Path]] = []
    for i, lp in enumerate(layers):
        diff = sha256_file(lp)
        diff_ids.append(f"sha256:{diff}")
        name = f"{diff}/layer.tar"
        names.append(name)
        if raw_layers and i in raw_layers:
            blobs.append((name, raw_layers[i]))
        elif compress:
            blobs.append((name, gzip.compress(lp.read_bytes(), compresslevel=1)))
        else:
            blobs.append((name, lp))
    config = {
        "architecture": "amd64", "os": "linux",
        "config": {"Env": env or ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                   "Entrypoint": entrypoint, "Cmd": cmd, "Labels": labels or {},
                   "WorkingDir": working_dir},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [{"created_by": f"layer {i}"} for i in range(len(layers))],
    }
    cfg_bytes = json.dumps(config).encode()
    cfg_name = hashlib.sha256(cfg_bytes).hexdigest() + ".json"
    manifest = [{"Config": cfg_name, "RepoTags": [tag], "Layers": names}]
    with tarfile.open(dest, "w") as out:
        def add(name: str, data: bytes | Path) -> None:
            if isinstance(data, Path):
                out.add(str(data), arcname=name)
            else:
                ti = tarfile.TarInfo(name)
                ti.size = len(data)
                out.addfile(ti, io.BytesIO(data))
        add(cfg_name, cfg_bytes)
        for name, data in blobs:
            add(name, data)
        add("manifest.json", json.dumps(manifest).encode())
    return Path(dest)


def tree_fingerprint(root: Path) -> dict[str, tuple[str, str]]:
    """{relpath: ("file", sha256) | ("symlink", target)} of a folder, links not followed."""
    out: dict[str, tuple[str, str]] = {}
    root = Path(root)
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_symlink():
            import os

            out[rel] = ("symlink", os.readlink(p))
        elif p.is_file():
            out[rel] = ("file", sha256_file(p))
    return out


def snapshot_fingerprint(snap: Any) -> dict[str, tuple[str, str]]:
    """The same fingerprint, from a snapshot's manifest (package-relative names)."""
    pkg = snap.package
    out = {}
    for rel, rec in snap.files.items():
        key = rel[len(pkg) + 1:]
        out[key] = ("symlink", rec.target) if rec.kind == "symlink" else ("file", rec.sha256)
    return out


# --- OCI layouts with every byte under the test's control ---------------------------------

def put_blob(layout: Path, data: bytes) -> dict[str, Any]:
    """Store ``data`` under ``blobs/sha256/<its digest>``; return its descriptor (digest, size)."""
    digest = hashlib.sha256(data).hexdigest()
    p = Path(layout) / "blobs" / "sha256" / digest
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def write_oci(layout: Path, layers: list[bytes], *, diff_ids: list[str] | None = None,
              config: Any = None, manifest: Any = None, index: Any = None,
              layer_descs: list[dict[str, Any]] | None = None) -> Path:
    """An OCI image layout of ``layers`` (stored bytes, gzip/zstd or plain tar).

    Each document can be replaced whole (``config``, ``manifest``, ``index``:
    any JSON value, or ``bytes`` written verbatim) so a test can break exactly
    one thing; ``diff_ids`` defaults to the sha256 of each layer decompressed.
    """
    layout = Path(layout)
    layout.mkdir(parents=True, exist_ok=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    descs = layer_descs or [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                             **put_blob(layout, data)} for data in layers]
    if diff_ids is None:
        diff_ids = ["sha256:" + hashlib.sha256(_plain_bytes(data)).hexdigest() for data in layers]
    if config is None:
        config = {"architecture": "amd64", "os": "linux", "config": {"Env": ["PATH=/usr/bin"]},
                  "rootfs": {"type": "layers", "diff_ids": diff_ids}}
    cfg = put_blob(layout, config if isinstance(config, bytes) else json.dumps(config).encode())
    if manifest is None:
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **cfg},
                    "layers": descs}
    m = put_blob(layout, manifest if isinstance(manifest, bytes) else json.dumps(manifest).encode())
    if index is None:
        index = {"schemaVersion": 2, "manifests": [
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", **m}]}
    (layout / "index.json").write_bytes(index if isinstance(index, bytes) else json.dumps(index).encode())
    return layout


def _plain_bytes(data: bytes) -> bytes:
    if data[:2] == b"\x1f\x8b":
        return gzip.decompress(data)
    if data[:4] == b"\x28\xb5\x2f\xfd":
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True).read()
    return data


def tar_folder(folder: Path, dest: Path) -> Path:
    """A folder (an OCI layout) as an uncompressed tar, members relative to it (oci-archive:)."""
    with tarfile.open(dest, "w") as out:
        for p in sorted(Path(folder).rglob("*")):
            out.add(str(p), arcname=p.relative_to(folder).as_posix(), recursive=False)
    return Path(dest)


def layer_bytes(files: dict[str, bytes]) -> bytes:
    """An uncompressed layer tar of ``{name: data}`` (PAX format, fixed times), in memory."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            ti = tarfile.TarInfo(name)
            ti.size, ti.mtime, ti.mode = len(data), 1_700_000_000, 0o644
            tar.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def snapshot_listed_fingerprint(snap: Any) -> dict[str, tuple[str, str]]:
    """:func:`snapshot_fingerprint` plus the links listed as skipped because they leave the
    package (never written into a snapshot): what an unpacked image shows for the package."""
    pkg = snap.package
    out = snapshot_fingerprint(snap)
    for rel, rec in snap.manifest.skipped.items():
        if rec.kind == "symlink":
            out[rel[len(pkg) + 1:]] = ("symlink", rec.target)
    return out
