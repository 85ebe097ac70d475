"""``registry:`` against a real registry on loopback (Debian's docker-registry, distribution 2.8).

One image, built from real vLLM source (a slice of the 0.33.0 wheel) plus a
crafted layer with the cases layer squashing gets wrong (hot-fix, whiteout,
opaque folder, file replacing a folder, links, a hardlink whose target an
upper layer deletes), is pushed by skopeo in four layer formats: gzip,
zstd, zstd:chunked (skopeo writes it) and eStargz (built here to the spec).
Every ``registry:`` snapshot must equal the ``docker-archive:`` snapshot of
the same image file by file (content, kind, layer of origin), and the
eStargz one must also equal umoci's unpack of the same blobs. Then: what is
read (lazy formats fetch a fraction; a warm cache fetches nothing), resume,
tampered blobs, platforms, and one readable error per bad input.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from recon.acquire.blobcache import BlobCache
from recon.acquire.layers import ELF_MAGIC
from recon.acquire.sources import open_source
from recon.acquire.sources.lazy import BIG_FILE
from recon.acquire.sources.pip import fetch_wheel
from recon.acquire.sources.registry import parse_reference, reset_transfers
from recon.errors import ReconError
from recon.snapshots.take import take_snapshot
from tests.imagekit import (
    SITE,
    LayerBuilder,
    snapshot_fingerprint,
    snapshot_listed_fingerprint,
    tree_fingerprint,
    write_docker_archive,
)
from tests.registrykit import (
    Registry,
    estargz_layer,
    free_port,
    gzip_layer,
    image_manifest,
    need,
    skopeo_copy,
    write_oci_layout,
    zstd_chunked_layer,
)

V = f"{SITE}/vllm"
KEEP_DIRS = ("vllm/config/", "vllm/v1/", "vllm/entrypoints/")
HOTFIX = b"\n# hot-fix applied in layer 2\n"
HL = b"HARDLINK_TARGET = 'kept through the link'\n"
FORMATS = ("docker-v2", "gzip", "zstd", "zstd:chunked", "estargz")


def _keep(name: str) -> bool:
    return name.endswith(".py") and (name.count("/") == 1 or name.startswith(KEEP_DIRS))


pytestmark = pytest.mark.wheels  # every test fetches a release wheel first (_private_cache)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts with an empty blob cache of its own and may use plain HTTP on loopback."""
    fetch_wheel("vllm==0.33.0")  # from the shared cache, before it is redirected
    monkeypatch.setenv("RECON_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RECON_REGISTRY_INSECURE", "1")


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Registry:
    need("docker-registry")
    reg = Registry(tmp_path_factory.mktemp("registry")).start()
    yield reg
    reg.stop()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The layer tars, a docker-save archive of them, and what the crafted layer should give."""
    d = tmp_path_factory.mktemp("img")
    whl = fetch_wheel("vllm==0.33.0")
    with zipfile.ZipFile(whl) as zf:
        compilation = zf.read("vllm/config/compilation.py")
        entrypoints = sorted(n for n in zf.namelist() if n.startswith("vllm/entrypoints/") and n.endswith(".py"))
    rnd = random.Random(0).randbytes(3 << 20)  # 3 MB no compressor can shrink
    big = b"".join(b"TABLE_%06d = %r\n" % (i, hashlib.md5(b"%d" % i).hexdigest()) for i in range(200_000))
    layers = [
        (LayerBuilder(d / "l0.tar").dir("usr").dir("usr/local").dir("usr/local/bin")
         .file("usr/local/bin/python3.12", b"#!not python\n", mode=0o755)
         .symlink("usr/local/bin/python3", "python3.12")
         .dir("usr/local/lib").dir("usr/local/lib/python3.12").dir(SITE)
         .file(f"{SITE}/other/__init__.py", b"")
         .file(f"{SITE}/other/blob.bin", rnd)  # another package's bytes: lazy reads skip them
         .close()),
        LayerBuilder(d / "l1.tar").from_wheel(whl, keep=_keep).close(),
        (LayerBuilder(d / "l2.tar")
         .file(f"{V}/config/compilation.py", compilation + HOTFIX)
         .whiteout(f"{V}/envs.py")
         .opaque(f"{V}/entrypoints")
         .file(f"{V}/entrypoints/only.py", b"ONLY = True\n")
         .file(f"{V}/v1", b"a file where a folder was\n")
         .symlink(f"{V}/abs_link.py", f"/{V}/version.py")
         .symlink(f"{V}/rel_link.py", "version.py")
         .file(f"{V}/hl_target.py", HL)
         .hardlink(f"{V}/hl_link.py", f"{V}/hl_target.py")
         .file(f"{V}/_fake.abi3.so", rnd[: 1 << 20])  # a binary: skipped by default, never fetched
         .file(f"{V}/big_table.py", big)  # > 8 MB: streamed on its own, several eStargz chunks
         .close()),
        LayerBuilder(d / "l3.tar").whiteout(f"{V}/hl_target.py").close(),
    ]
    env = ["PATH=/usr/local/bin:/usr/bin:/bin", "VLLM_USE_V1=1"]
    archive = write_docker_archive(d / "image.tar", layers, tag="recon-test/registry:1", env=env,
                                   entrypoint=["python3", "-m", "vllm.entrypoints.openai.api_server"])
    return {"dir": d, "layers": layers, "archive": archive, "env": env, "compilation": compilation,
            "entrypoints": entrypoints, "big": big}


@pytest.fixture(scope="module")
def pushed(registry: Registry, built: dict[str, Any]) -> dict[str, Any]:
    """The image in each layer format, pushed with skopeo (``--preserve-digests``: exact blobs)."""
    need("skopeo")
    d: Path = built["dir"]
    refs: dict[str, str] = {}
    layouts: dict[str, Path] = {}
    # a Docker v2 schema 2 manifest, gzip layers compressed by skopeo; pushed first, before any
    # other compression of the same layers exists in this registry for skopeo to substitute
    skopeo_copy(f"docker-archive:{built['archive']}", f"docker://{registry.host}/recon/vllm:docker-v2",
                "--format", "v2s2")
    refs["docker-v2"] = f"registry:{registry.host}/recon/vllm:docker-v2"
    for fmt in ("gzip", "zstd", "zstd:chunked"):
        layout = d / f"oci-{fmt.replace(':', '-')}"
        skopeo_copy(f"docker-archive:{built['archive']}", f"oci:{layout}:latest",
                    "--dest-compress-format", fmt)
        layouts[fmt] = layout
    es_layers = []
    for i, tar in enumerate(built["layers"]):
        es = estargz_layer(tar, d / f"l{i}.esgz", chunk_size=1 << 20)
        es_layers.append((es.descriptor(), es.path, es.diff_id))
    layouts["estargz"] = write_oci_layout(d / "oci-estargz", [image_manifest(d / "oci-estargz", es_layers,
                                                                             env=built["env"])])
    for fmt, layout in layouts.items():
        tag = fmt.replace(":", "-")
        skopeo_copy(f"oci:{layout}:latest", f"docker://{registry.host}/recon/vllm:{tag}",
                    "--preserve-digests")
        refs[fmt] = f"registry:{registry.host}/recon/vllm:{tag}"
    return {"refs": refs, "layouts": layouts}


def _manifest_layers(layout: Path) -> list[dict[str, Any]]:
    idx = json.loads((layout / "index.json").read_text())
    digest = idx["manifests"][0]["digest"].split(":")[1]
    return json.loads((layout / "blobs/sha256" / digest).read_text())["layers"]


def _files(snap: Any) -> dict[str, tuple[str, int, str | None, int]]:
    return {k: (r.kind, r.size, r.sha256 or r.target, r.layer) for k, r in snap.files.items()}


def test_reference_parsing() -> None:
    r = parse_reference("127.0.0.1:5000/recon/vllm:1")
    assert (r.registry, r.repository, r.tag, r.digest) == ("127.0.0.1:5000", "recon/vllm", "1", None)
    r = parse_reference("localhost/vllm@sha256:" + "a" * 64)
    assert (r.registry, r.repository, r.tag, r.reference) == ("localhost", "vllm", None, "sha256:" + "a" * 64)
    r = parse_reference("vllm/vllm-openai")
    assert (r.registry, r.api_host, r.repository, r.tag) == ("docker.io", "registry-1.docker.io",
                                                            "vllm/vllm-openai", "latest")
    assert parse_reference("ubuntu").repository == "library/ubuntu"
    for bad in ("127.0.0.1:5000/UPPER:1", "h.io/repo:bad tag", "h.io/r@sha256:abc", "h.io/:1"):
        with pytest.raises(ReconError):
            parse_reference(bad)


def test_every_format_equals_the_archive_file_by_file(pushed: dict[str, Any], built: dict[str, Any],
                                                      tmp_path: Path) -> None:
    want = take_snapshot(f"docker-archive:{built['archive']}", out=tmp_path / "archive")
    files = want.files
    # the crafted cases came out as worked out by hand
    assert files["vllm/config/compilation.py"].sha256 == hashlib.sha256(
        built["compilation"] + HOTFIX).hexdigest()
    assert files["vllm/config/compilation.py"].layer == 2
    assert "vllm/envs.py" not in files
    assert [p for p in files if p.startswith("vllm/entrypoints/")] == ["vllm/entrypoints/only.py"]
    assert len(built["entrypoints"]) > 100
    assert files["vllm/v1"].kind == "file" and not [p for p in files if p.startswith("vllm/v1/")]
    # an absolute link would resolve on the host: listed with its target, never written
    assert "vllm/abs_link.py" not in files
    assert want.manifest.skipped["vllm/abs_link.py"].target == f"/{V}/version.py"
    assert (want.src / "vllm/hl_link.py").read_bytes() == HL and "vllm/hl_target.py" not in files
    assert "vllm/_fake.abi3.so" not in files and "vllm/_fake.abi3.so" in want.manifest.skipped
    assert want.version == "0.33.0"
    for fmt in FORMATS:
        reset_transfers()
        snap = take_snapshot(pushed["refs"][fmt], out=tmp_path / fmt.replace(":", "-"))
        assert _files(snap) == _files(want), fmt
        assert snapshot_fingerprint(snap) == tree_fingerprint(snap.src / "vllm"), fmt
        assert snap.version == "0.33.0", fmt
        m = snap.manifest
        assert m.image["env"] == built["env"], fmt
        assert m.source["scheme"] == "registry" and m.source["repository"] == "recon/vllm"
        assert m.source["digest"].startswith("sha256:")
        media = {"docker-v2": "application/vnd.docker.image.rootfs.diff.tar.gzip"}.get(fmt)
        if media:
            assert {ly["media_type"] for ly in m.layers} == {media}
        assert m.distributions == want.manifest.distributions, fmt
        assert len(m.layers) == 4
        lazy = {ly.get("format") for ly in m.layers}
        assert lazy == ({fmt} if fmt in ("estargz", "zstd:chunked") else {None}), fmt


def test_estargz_agrees_with_umoci_and_the_oci_layout(pushed: dict[str, Any], tmp_path: Path) -> None:
    """The same eStargz blobs: read whole by umoci and by ``oci:``, lazily by ``registry:``."""
    need("umoci")
    layout = pushed["layouts"]["estargz"]
    bundle = tmp_path / "bundle"
    subprocess.run(["umoci", "unpack", "--image", f"{layout}:latest", str(bundle)], check=True,
                   capture_output=True)
    umoci = tree_fingerprint(bundle / "rootfs" / V)
    assert (bundle / "rootfs/stargz.index.json").is_file()  # a whole read sees the TOC entry too
    lazy = take_snapshot(pushed["refs"]["estargz"], out=tmp_path / "lazy", all_files=True)
    whole = take_snapshot(f"oci:{layout}", out=tmp_path / "whole", all_files=True)
    assert snapshot_listed_fingerprint(lazy) == umoci  # links out of the package: listed only
    assert _files(lazy) == _files(whole)


def test_zstd_chunked_written_to_the_format(pushed: dict[str, Any], built: dict[str, Any],
                                          registry: Registry, tmp_path: Path) -> None:
    """zstd:chunked as containers/storage lays it out (the benchmark's fallback writer): read
    lazily from the registry, and whole (skippable frames, one frame per file) by ``oci:``."""
    d = tmp_path
    layers = []
    for i, tar in enumerate(built["layers"]):
        zc = zstd_chunked_layer(tar, d / f"l{i}.zc")
        layers.append((zc.descriptor(), zc.path, zc.diff_id))
    layout = write_oci_layout(d / "oci-zc", [image_manifest(d / "oci-zc", layers, env=built["env"])])
    skopeo_copy(f"oci:{layout}:latest", f"docker://{registry.host}/recon/vllm:zc-spec", "--preserve-digests")
    want = take_snapshot(f"docker-archive:{built['archive']}", out=d / "archive")
    lazy = take_snapshot(f"registry:{registry.host}/recon/vllm:zc-spec", out=d / "lazy")
    whole = take_snapshot(f"oci:{layout}", out=d / "whole")
    assert _files(lazy) == _files(want) == _files(whole)
    assert {ly.get("read") for ly in lazy.manifest.layers} == {"lazy"}


@pytest.mark.parametrize("fmt", ["estargz", "zstd:chunked"])
def test_lazy_formats_read_a_fraction_and_the_warm_cache_nothing(
        fmt: str, pushed: dict[str, Any], registry: Registry, tmp_path: Path) -> None:
    layers = _manifest_layers(pushed["layouts"][fmt])
    total = sum(ly["size"] for ly in layers)
    reset_transfers()
    snap = take_snapshot(pushed["refs"][fmt], out=tmp_path / "cold")
    cold = reset_transfers()
    # the other package (3 MB hardly compressible), the .so, the whited-out and opaque-hidden
    # files are never fetched: the TOCs plus the package's kept files only
    kept = sum(r.size for r in snap.files.values())
    assert cold.bytes < total - (3 << 20), (cold, total)
    assert cold.bytes < 0.75 * total
    cache = BlobCache()
    assert not any(cache.has(ly["digest"]) for ly in layers)  # no layer blob was pulled whole
    assert kept > 8 << 20
    reset_transfers()
    again = take_snapshot(pushed["refs"][fmt], out=tmp_path / "warm")
    warm = reset_transfers()
    assert warm.requests == 1 and warm.bytes < 4096, warm  # the tag's manifest, nothing else
    assert _files(again) == _files(snap)
    # pinned by digest: the manifest comes from the cache too; not one request
    pinned = f"{pushed['refs'][fmt]}@{snap.manifest.source['digest']}".replace(
        ":" + fmt.replace(":", "-") + "@", "@")
    third = take_snapshot(pinned, out=tmp_path / "pinned")
    assert reset_transfers().requests == 0
    assert _files(third) == _files(snap)


def test_tee_keeps_only_whole_verified_copies(tmp_path: Path) -> None:
    import io

    from recon.acquire.blobcache import DigestMismatch, Tee

    cache = BlobCache(tmp_path / "c")
    data = os.urandom(300_000)
    want = "sha512:" + hashlib.sha512(data).hexdigest()
    kept: list[str] = []
    with io.BufferedReader(Tee(io.BytesIO(data), len(data), cache, expect=want, on_kept=kept.append)) as fh:
        assert fh.read() == data
    assert kept == [want] and cache.read(want) == data
    src, early = io.BytesIO(data), BlobCache(tmp_path / "early")
    with Tee(src, len(data), early, expect=want) as tee:
        assert tee.read(4) == data[:4]
    assert src.closed and not early.has(want) and not list(early.partial.iterdir())
    liar = "sha256:" + hashlib.sha256(data[:-1] + bytes([data[-1] ^ 1])).hexdigest()  # always a different last byte
    tee = Tee(io.BytesIO(data), len(data), cache, expect=liar, where="f")
    assert tee.read(len(data) - 10) == data[:-10]
    with pytest.raises(DigestMismatch, match="f: content does not match its digest"):
        tee.read(100)
    with pytest.raises(DigestMismatch):
        tee.read(100)  # reading on never hands over the rest
    tee.close()
    assert not cache.has(liar) and not list(cache.partial.glob("tee-*"))


@pytest.mark.parametrize("fmt", ["estargz", "zstd:chunked"])
def test_a_big_executable_is_peeked_at_not_fetched(fmt: str, registry: Registry, tmp_path: Path) -> None:
    """A big ELF file without a telling name (vLLM's ``vllm-rs``): the squash reads its first
    four bytes and skips it, and only those bytes' neighbourhood travels, not the file; with
    ``--all-files`` it streams through whole, is kept in the cache, and a warm run fetches nothing."""
    d = tmp_path
    elf = ELF_MAGIC + random.Random(1).randbytes(8 * BIG_FILE)  # compresses to about its own size
    elf_digest = "sha256:" + hashlib.sha256(elf).hexdigest()
    mods = {f"{V}/mod_{i}.py": b"X_%d = %r\n" % (i, b"v" * 200) for i in range(40)}
    lb = LayerBuilder(d / "l.tar").file(f"{V}/__init__.py", b"__version__ = '3.0.0'\n")
    for name, data in list(mods.items())[:20]:
        lb.file(name, data)
    lb.file(f"{V}/vllm-rs", elf, mode=0o755)
    for name, data in list(mods.items())[20:]:
        lb.file(name, data)
    tar = lb.close()
    if fmt == "estargz":
        es = estargz_layer(tar, d / "l.esgz", level=1)
        layer = (es.descriptor(), es.path, es.diff_id)
    else:
        zc = zstd_chunked_layer(tar, d / "l.zc", level=1)
        layer = (zc.descriptor(), zc.path, zc.diff_id)
    assert layer[0]["size"] > 8 * BIG_FILE
    layout = d / "oci"
    write_oci_layout(layout, [image_manifest(layout, [layer])])
    tag = fmt.replace(":", "-")
    skopeo_copy(f"oci:{layout}:latest", f"docker://{registry.host}/recon/elf-{tag}:1", "--preserve-digests")
    ref = f"registry:{registry.host}/recon/elf-{tag}:1"

    reset_transfers()
    served = registry.bytes_served()
    snap = take_snapshot(ref, out=d / "default")
    cold = reset_transfers()
    assert "vllm/vllm-rs" not in snap.files and "vllm/vllm-rs" in snap.manifest.skipped
    assert snap.version == "3.0.0"
    for name, data in mods.items():
        assert (snap.src / "vllm" / name.rpartition("/")[2]).read_bytes() == data
    assert cold.bytes < 1 << 20, cold  # the TOC, the .py files, a peek at vllm-rs: not 64 MB
    # the registry's own count: it sent no more than the first range of vllm-rs either (one
    # request for all of it would have filled the socket buffers, megabytes, before the close)
    assert registry.bytes_served() - served < 1 << 20
    cache = BlobCache()
    assert not cache.has(elf_digest)  # a file not read to the end is not kept ...
    assert not list(cache.partial.glob("tee-*"))  # ... nor left half-written

    reset_transfers()
    full = take_snapshot(ref, out=d / "all", all_files=True)
    first = reset_transfers()
    assert (full.src / "vllm/vllm-rs").read_bytes() == elf
    assert full.files["vllm/vllm-rs"].sha256 == elf_digest.split(":")[1]
    assert first.bytes > len(elf)
    assert cache.path(elf_digest).read_bytes() == elf  # kept, under the digest the TOC gives
    again = take_snapshot(ref, out=d / "warm", all_files=True)
    warm = reset_transfers()
    assert warm.requests == 1 and warm.bytes < 4096, warm  # the tag's manifest, nothing else
    assert (again.src / "vllm/vllm-rs").read_bytes() == elf
    assert _files(again) == _files(full)


def test_a_big_file_that_lies_fails_when_read_whole(registry: Registry, tmp_path: Path) -> None:
    """A streamed file whose bytes do not match the TOC fails the snapshot with the usual error,
    and nothing of it is kept; skipped after a peek at its first bytes, it is never used."""
    d = tmp_path
    elf = ELF_MAGIC + random.Random(2).randbytes(2 * BIG_FILE)
    tar = (LayerBuilder(d / "l.tar").file(f"{V}/__init__.py", b"__version__ = '3.0.1'\n")
           .file(f"{V}/vllm-rs", elf, mode=0o755).close())
    liar = estargz_layer(tar, d / "liar.esgz", level=1, tamper=lambda name, data: (
        data[:-1] + bytes([data[-1] ^ 1]) if name.endswith("vllm-rs") else data))
    layout = d / "oci"
    write_oci_layout(layout, [image_manifest(layout, [(liar.descriptor(), liar.path, liar.diff_id)])])
    skopeo_copy(f"oci:{layout}:latest", f"docker://{registry.host}/recon/elf-liar:1", "--preserve-digests")
    ref = f"registry:{registry.host}/recon/elf-liar:1"
    snap = take_snapshot(ref, out=d / "default")
    assert "vllm/vllm-rs" in snap.manifest.skipped and snap.version == "3.0.1"
    out = d / "all"
    with pytest.raises(ReconError, match="vllm-rs: content does not match its digest") as err:
        take_snapshot(ref, out=out, all_files=True)
    assert "\n" not in str(err.value)
    assert not out.exists() or not list(out.iterdir())
    cache = BlobCache()
    assert not cache.has("sha256:" + hashlib.sha256(elf).hexdigest())
    assert not [p for p in (cache.root / "sha256").iterdir() if p.stat().st_size == len(elf)]
    assert not list(cache.partial.glob("tee-*"))


def test_plain_layers_are_cached_verified_and_shared(pushed: dict[str, Any], registry: Registry,
                                                     built: dict[str, Any], tmp_path: Path) -> None:
    layers = _manifest_layers(pushed["layouts"]["gzip"])
    reset_transfers()
    served_before = registry.bytes_served()
    first = take_snapshot(pushed["refs"]["gzip"], out=tmp_path / "a")
    cold = reset_transfers()
    total = sum(ly["size"] for ly in layers)
    assert total <= cold.bytes < total + 64 << 10
    assert registry.bytes_served() - served_before == cold.bytes  # the registry's own count agrees
    cache = BlobCache()
    for ly in layers:
        data = cache.path(ly["digest"]).read_bytes()
        assert "sha256:" + hashlib.sha256(data).hexdigest() == ly["digest"]
    assert not [p for p in cache.partial.iterdir() if p.suffix == ".part"]
    second = take_snapshot(pushed["refs"]["gzip"], out=tmp_path / "b")
    assert reset_transfers().bytes < 4096
    # the warm run listed every layer from its cached listing and decompressed only up to
    # the files it opened: the same result; a layer listed without opening reads nothing
    assert _files(second) == _files(first)
    img = open_source(pushed["refs"]["gzip"], packages=["vllm"])
    try:
        for layer in img.layers:
            assert len(list(layer.entries())) > 0 and layer.bytes_read == 0
        # files the first snapshot read were kept in the cache: opening them decompresses nothing
        top_vllm = img.layers[1]
        opened = 0
        for e in top_vllm.entries():
            rec = first.files.get("vllm/" + e.name[len(V) + 1:]) if e.name.startswith(V + "/") else None
            if e.kind == "file" and rec is not None and rec.layer == 1 and e.open is not None:
                with e.open() as fh:
                    assert hashlib.sha256(fh.read()).hexdigest() == rec.sha256
                opened += 1
        assert opened > 10 and top_vllm.bytes_read == 0
        # a file never read before comes from the blob, decompressed only as far as needed
        base = img.layers[0]
        blob = next(e for e in base.entries() if e.name.endswith("other/blob.bin"))
        with blob.open() as fh:  # type: ignore[misc]
            assert len(fh.read()) == 3 << 20
        assert 0 < base.bytes_read <= base.size
    finally:
        img.close()
    # another image sharing the four layers plus one of its own: only the new layer travels
    d = built["dir"]
    extra = LayerBuilder(d / "extra.tar").file(f"{V}/added.py", b"ADDED = 1\n").close()
    plus = gzip_layer(extra, d / "extra.tar.gz")
    layout = d / "oci-plus"
    src = pushed["layouts"]["gzip"]
    shared = [(ly, src / "blobs/sha256" / ly["digest"].split(":")[1], diff)
              for ly, diff in zip(layers, _diff_ids(src), strict=True)]
    write_oci_layout(layout, [image_manifest(layout, [*shared, plus], env=built["env"])])
    skopeo_copy(f"oci:{layout}:latest", f"docker://{registry.host}/recon/plus:1", "--preserve-digests")
    reset_transfers()
    snap = take_snapshot(f"registry:{registry.host}/recon/plus:1", out=tmp_path / "plus")
    got = reset_transfers()
    assert plus[0]["size"] <= got.bytes < plus[0]["size"] + 8192, got
    assert (snap.src / "vllm/added.py").read_bytes() == b"ADDED = 1\n"
    assert _files(first).items() <= _files(snap).items()


def _diff_ids(layout: Path) -> list[str]:
    idx = json.loads((layout / "index.json").read_text())
    man = json.loads((layout / "blobs/sha256" / idx["manifests"][0]["digest"].split(":")[1]).read_text())
    cfg = json.loads((layout / "blobs/sha256" / man["config"]["digest"].split(":")[1]).read_text())
    return cfg["rootfs"]["diff_ids"]


def test_download_resumes_from_a_partial_file(pushed: dict[str, Any], registry: Registry,
                                             tmp_path: Path) -> None:
    layers = _manifest_layers(pushed["layouts"]["gzip"])
    big = max(layers, key=lambda ly: ly["size"])
    blob = registry.blob_file(big["digest"]).read_bytes()
    cache = BlobCache()
    part = cache.partial / (big["digest"].replace(":", "-") + ".part")
    half = len(blob) // 2
    part.write_bytes(blob[:half])  # as an interrupted run leaves it
    reset_transfers()
    take_snapshot(pushed["refs"]["gzip"], out=tmp_path / "a")
    got = reset_transfers()
    total = sum(ly["size"] for ly in layers)
    assert total - half <= got.bytes < total - half + 64 << 10, (got, total, half)
    assert cache.path(big["digest"]).read_bytes() == blob and not part.exists()
    # a partial file with wrong bytes is detected by the digest, dropped, fetched again whole
    cache2 = BlobCache(tmp_path / "c2")
    part2 = cache2.partial / part.name
    part2.write_bytes(b"\0" * half)
    path = cache2.fetch(big["digest"], big["size"],
                        lambda off: __import__("io").BytesIO(blob[off:]))
    assert path.read_bytes() == blob and not part2.exists()


def test_tampered_blobs_are_refused_and_nothing_is_kept(registry: Registry, tmp_path: Path) -> None:
    """Wrong bytes for real: the registry's storage altered on disk, and a TOC that lies."""
    d = tmp_path / "t"
    d.mkdir()
    tar = (LayerBuilder(d / "l.tar").file(f"{V}/__init__.py", b"__version__ = '1.0'\n")
           .file(f"{V}/core.py", os.urandom(1 << 16).hex().encode()).close())
    plain = gzip_layer(tar, d / "l.tgz")
    es = estargz_layer(tar, d / "l.esgz")
    liar = estargz_layer(tar, d / "liar.esgz",  # payload changed after its digest was taken
                         tamper=lambda name, data: data.replace(b"0", b"1", 1) if name.endswith("core.py") else data)
    cases = {"plain": (plain, "blob does not match its digest"),
             "lazy": ((es.descriptor(), es.path, es.diff_id), "truncated or corrupt|match its digest"),
             "liar": ((liar.descriptor(), liar.path, liar.diff_id), "core.py: content does not match its digest")}
    for name, (layer, pattern) in cases.items():
        layout = d / f"oci-{name}"
        write_oci_layout(layout, [image_manifest(layout, [layer])])
        skopeo_copy(f"oci:{layout}:latest", f"docker://{registry.host}/recon/tampered-{name}:1",
                    "--preserve-digests")
        if name != "liar":
            stored = registry.blob_file(layer[0]["digest"])
            data = bytearray(stored.read_bytes())
            data[len(data) // 2] ^= 0xFF  # the middle of core.py's payload in both layouts
            stored.write_bytes(bytes(data))
        out = tmp_path / f"out-{name}"
        with pytest.raises(ReconError, match=pattern) as err:
            take_snapshot(f"registry:{registry.host}/recon/tampered-{name}:1", out=out)
        assert "\n" not in str(err.value)
        assert not out.exists() or not list(out.iterdir())
        cache = BlobCache()
        assert not cache.has(layer[0]["digest"])
        assert not [p for p in cache.partial.iterdir() if p.suffix == ".part"]
        assert not [p for p in (cache.root / "sha256").iterdir()
                    if p.stat().st_size == 1 << 17], name  # core.py's bytes were never cached


def test_platform_choice_from_an_index(registry: Registry, tmp_path: Path) -> None:
    d = tmp_path
    manifests = []
    for arch in ("amd64", "arm64"):
        tar = (LayerBuilder(d / f"{arch}.tar").file(f"{V}/__init__.py", b"__version__ = '2.0'\n")
               .file(f"{V}/arch.py", f"ARCH = {arch!r}\n".encode()).close())
        manifests.append(image_manifest(d / "oci-multi", [gzip_layer(tar, d / f"{arch}.tgz")], arch=arch))
    write_oci_layout(d / "oci-multi", manifests, as_index=True)
    skopeo_copy(f"oci:{d / 'oci-multi'}:latest", f"docker://{registry.host}/recon/multi:1", "--all",
                "--preserve-digests")
    ref = f"registry:{registry.host}/recon/multi:1"
    amd = take_snapshot(ref, out=d / "a")
    assert (amd.src / "vllm/arch.py").read_text() == "ARCH = 'amd64'\n"
    assert amd.manifest.source["platform"] == "linux/amd64"
    assert amd.manifest.source["index_digest"].startswith("sha256:")
    arm = take_snapshot(ref, out=d / "b", platform="linux/arm64")
    assert (arm.src / "vllm/arch.py").read_text() == "ARCH = 'arm64'\n"
    with pytest.raises(ReconError, match="linux/s390x is not in this image.*linux/amd64, linux/arm64"):
        take_snapshot(ref, out=d / "c", platform="linux/s390x")


def test_bad_input_is_one_readable_line(pushed: dict[str, Any], registry: Registry, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    dead = f"127.0.0.1:{free_port()}"
    cases = {
        f"registry:{registry.host}/recon/vllm:no-such-tag": r"tag 'no-such-tag' .* not found .*MANIFEST_UNKNOWN",
        f"registry:{registry.host}/recon/nope:1": r"recon/nope not found \(HTTP 404",
        f"registry:{registry.host}/recon/vllm@sha256:{'0' * 64}": r"manifest sha256:0+ .* not found",
        f"registry:{dead}/recon/vllm:1": r"cannot reach registry 127\.0\.0\.1:\d+ \(connection refused\)",
        "registry:registry.invalid/x:1@sha256:12": r"malformed digest",
    }
    for ref, pattern in cases.items():
        with pytest.raises(ReconError, match=pattern) as err:
            take_snapshot(ref, out=out)
        assert "\n" not in str(err.value), ref
    monkeypatch.setenv("RECON_REGISTRY_INSECURE", "")
    with pytest.raises(ReconError, match=r"TLS with 127\.0\.0\.1:\d+ failed.*--insecure"):
        take_snapshot(pushed["refs"]["gzip"], out=out)
    monkeypatch.setenv("RECON_REGISTRY_INSECURE", "registry.example.com")
    with pytest.raises(ReconError, match="only allowed to a registry on this machine"):
        take_snapshot("registry:registry.example.com/x/y:1", out=out)
    assert not out.exists() or not list(out.iterdir())
    # the CLI prints it as one line and exits non-zero
    env = {**os.environ, "RECON_REGISTRY_INSECURE": "1"}
    proc = subprocess.run([sys.executable, "-m", "recon", "snapshot", f"registry:{dead}/recon/vllm:1",
                           "--out", str(out)], capture_output=True, text=True, env=env)
    assert proc.returncode == 2
    assert "connection refused" in proc.stderr and "Traceback" not in proc.stderr


def test_cached_snapshot_follows_a_moved_tag(tmp_path: Path) -> None:
    """ensure_snapshot keys registry: sources by the digest the tag points to now: a tag pushed
    again gets a new snapshot; with the registry gone, the newest snapshot of it is used."""
    from recon.snapshots.cache import ensure_snapshot

    reg = Registry(tmp_path / "reg").start()
    try:
        ref = f"registry:{reg.host}/recon/moving:stable"
        versions = []
        for version in ("1.0.0", "1.0.1"):
            d = tmp_path / version
            d.mkdir()
            tar = (LayerBuilder(d / "l.tar").file("usr/local/bin/python3", b"#!\n", mode=0o755)
                   .file(f"{V}/__init__.py", f"__version__ = '{version}'\n".encode()).close())
            layout = d / "oci"
            write_oci_layout(layout, [image_manifest(layout, [gzip_layer(tar, d / "l.tgz")])])
            skopeo_copy(f"oci:{layout}:latest", f"docker://{ref[9:]}")
            versions.append(ensure_snapshot(ref).version)
            assert ensure_snapshot(ref).version == version  # reused while the tag stays put
        assert versions == ["1.0.0", "1.0.1"]
    finally:
        reg.stop()
    assert ensure_snapshot(ref).version == "1.0.1"  # offline: the newest one taken
