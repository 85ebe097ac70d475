"""A bounded, seeded mutation fuzzer over every reader, driven through the real snapshot path.

Seeds are small valid inputs built here: a layer tar (inside a ``docker
save`` archive whose config is rewritten to the mutant's diff_id, so a
mutant that still parses goes all the way to a committed snapshot), a gzip
layer in an OCI layout (blob digest rewritten likewise), a whole ``docker
save`` archive, an OCI layout tarred as ``oci-archive:``, and a wheel. Each
mutant applies one to three byte mutations (flip, overwrite, insert,
delete, splice, truncate, a big number written into a tar/zip header field
with its checksum fixed) chosen by ``random.Random(f"{SEED}/{kind}/{i}")``,
so any mutant is rebuilt from its kind and index alone.

Each mutant is snapshotted with :func:`recon.snapshots.take.take_snapshot` in
worker processes whose address space is capped (``RLIMIT_AS``) and whose
every mutant has a wall-clock alarm. A mutant passes when the snapshot
succeeds or raises :class:`ReconError`; anything else (another exception,
``MemoryError``, a hang, a slow mutant) is a failure printed with its seed,
kind and index and the last lines of its traceback. Reproduce one with::

    python -c "from tests.test_fuzz_readers import reproduce; reproduce('wheel', 17)"
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import multiprocessing
import os
import random
import resource
import shutil
import signal
import tarfile
import tempfile
import time
import traceback
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from recon.errors import ReconError
from recon.snapshots.take import take_snapshot
from tests.imagekit import SITE, LayerBuilder, tar_folder, write_oci

SEED = int(os.environ.get("RECON_FUZZ_SEED", "20261201"))
PER_KIND = int(os.environ.get("RECON_FUZZ_PER_KIND", "450"))
WORKERS = 2
MEMORY_CAP = 3 << 30  # address space of a worker (Python, two read-ahead threads, zstd)
ALARM_S = 15  # a mutant running longer than this is a hang
SLOW_S = 5.0  # ... and one longer than this is too slow
_BIG_TAR = (b"77777777777\0", b"\x80" + b"\xff" * 11, b"\xff" * 12, b"\x80\0\0\0\0\0\0\x01\0\0\0\0",
            b"00000000000\0", b"            ", b"-1\0\0\0\0\0\0\0\0\0\0")
_NAMES = (b"", b"/", b".", b"..", b"../../../x", b"/etc/passwd", b"./" * 40, b"a/" * 49 + b"x",
          SITE.encode() + b"/vllm", SITE.encode() + b"/vllm/", SITE.encode() + b"/vllm/__init__.py",
          SITE.encode() + b"/vllm/../vllm/envs.py", SITE.encode() + b"/vllm/.wh..wh..opq",
          SITE.encode() + b"/.wh.vllm", b"usr/local/bin/python3", b"x" * 99, b"\xff\xfe")
_FLAGS = b"0125346 7xgLKSV"
_BIG_ZIP = (b"\xff\xff\xff\xff", b"\0\0\0\x80", b"\xff\xff", b"\0\0\0\0")


# --- seeds --------------------------------------------------------------------------------

def _layer(path: Path) -> bytes:
    """A small engine-like layer: package files, metadata, a link, a hardlink, a whiteout."""
    (LayerBuilder(path)
     .file("usr/local/bin/python3", b"#!\n", mode=0o755)
     .dir(f"{SITE}/vllm")
     .file(f"{SITE}/vllm/__init__.py", b"__version__ = '1.0'\n")
     .file(f"{SITE}/vllm/envs.py", b"X = 1\n" * 40)
     .file(f"{SITE}/vllm-1.0.dist-info/METADATA", b"Name: vllm\nVersion: 1.0\n")
     .symlink(f"{SITE}/vllm/link.py", "envs.py")
     .hardlink(f"{SITE}/vllm/hard.py", f"{SITE}/vllm/envs.py")
     .whiteout(f"{SITE}/vllm/gone.py")
     .close())
    return _trimmed(path.read_bytes())


def _trimmed(tar: bytes) -> bytes:
    """The tar up to its two end-of-archive blocks (tarfile pads to 10 KiB; mutating zeros is waste)."""
    with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
        end = max(m.offset_data + m.size + (-m.size % 512) for m in tf.getmembers())
    return tar[:end + 1024]


def _docker_archive(layers: list[bytes]) -> bytes:
    """A legacy ``docker save`` archive of ``layers`` (diff_ids computed from them), in memory."""
    diff_ids = ["sha256:" + hashlib.sha256(layer).hexdigest() for layer in layers]
    cfg = json.dumps({"os": "linux", "architecture": "amd64",
                      "config": {"Env": ["PATH=/usr/local/bin:/usr/bin"], "Labels": {"a": "b"}},
                      "rootfs": {"type": "layers", "diff_ids": diff_ids}}).encode()
    members = [("c.json", cfg)] + [(f"l{i}/layer.tar", layer) for i, layer in enumerate(layers)]
    members.append(("manifest.json", json.dumps(
        [{"Config": "c.json", "RepoTags": ["t:1"], "Layers": [n for n, _ in members[1:]]}]).encode()))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members:
            ti = tarfile.TarInfo(name)
            ti.size, ti.mtime = len(data), 1_700_000_000
            tar.addfile(ti, io.BytesIO(data))
    return _trimmed(buf.getvalue())


def _wheel() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("vllm/__init__.py", b"__version__ = '1.0'\n")
        zf.writestr("vllm/envs.py", b"X = 1\n" * 40)
        zf.writestr("vllm/sub/", b"")
        zf.writestr("vllm-1.0.dist-info/METADATA", b"Name: vllm\nVersion: 1.0\n")
        zf.writestr("vllm/raw.txt", b"stored" * 10, compress_type=zipfile.ZIP_STORED)
    return buf.getvalue()


_BASE_LAYER = b""  # set by _seeds: the base layer under the JSON mutants' package layer


def _seeds(work: Path) -> dict[str, bytes]:
    global _BASE_LAYER
    layer = _layer(work / "seed-layer.tar")
    base = _trimmed(LayerBuilder(work / "seed-base.tar").file("etc/os-release", b"ID=x\n").close()
                    .read_bytes())
    _BASE_LAYER = base
    layout = write_oci(work / "seed-layout", [gzip.compress(base, mtime=0), gzip.compress(layer, mtime=0)])
    return {
        "oci-json": layer,
        "docker-json": layer,
        "layer": layer,
        "gzlayer": gzip.compress(layer, mtime=0),
        "docker-archive": _docker_archive([base, layer]),
        "oci-archive": tar_folder(layout, work / "seed-layout.tar").read_bytes(),
        "wheel": _wheel(),
    }


# --- mutations ------------------------------------------------------------------------------

def _header_offsets(data: bytes) -> list[int]:
    """Where tar headers (``ustar`` magic) and zip headers (``PK\\1\\2``, ``PK\\3\\4``) start."""
    out = []
    for magic, back in ((b"ustar", 257), (b"PK\x01\x02", 0), (b"PK\x03\x04", 0)):
        pos = data.find(magic)
        while pos >= 0:
            if pos - back >= 0:
                out.append(pos - back)
            pos = data.find(magic, pos + 1)
    return out


def _fix_checksum(data: bytearray, at: int) -> None:
    block = data[at:at + 512]
    if len(block) == 512:
        chk = sum(block[:148]) + 256 + sum(block[156:])
        data[at + 148:at + 156] = b"%06o\0 " % (chk & 0o777777)


def _rewrite_header(rng: random.Random, data: bytearray) -> None:
    """A tar header's name, link target or type replaced by a hostile one, its checksum fixed:
    what reaches the squash and the writer (duplicates, links, markers, traversal, kinds)."""
    heads = [h for h in _header_offsets(bytes(data)) if data[h:h + 2] != b"PK"]
    if not heads:
        data[rng.randrange(len(data))] ^= 0x20
        return
    at = rng.choice(heads)
    field = rng.randrange(3)
    if field == 0:
        data[at:at + 100] = rng.choice(_NAMES)[:100].ljust(100, b"\0")
    elif field == 1:
        data[at + 156] = rng.choice(_FLAGS)
    else:
        data[at + 157:at + 257] = rng.choice(_NAMES)[:100].ljust(100, b"\0")
    _fix_checksum(data, at)


def _big_number(rng: random.Random, data: bytearray) -> None:
    """A big (or negative, or blank) number in a header field, the tar checksum fixed after."""
    heads = _header_offsets(bytes(data))
    if not heads:
        data[rng.randrange(len(data))] ^= 0xFF
        return
    at = rng.choice(heads)
    if data[at:at + 2] == b"PK":
        field = rng.choice((8, 10, 14, 18, 20, 22, 24, 26, 28, 30, 42))
        value = rng.choice(_BIG_ZIP)
        data[at + field:at + field + len(value)] = value
        return
    field = rng.choice((124, 124, 124, 100, 0, 157, 345))
    value = rng.choice(_BIG_TAR)
    data[at + field:at + field + len(value)] = value
    _fix_checksum(data, at)


def mutate(seed: bytes, kind: str, index: int) -> bytes:
    """Mutant ``index`` of ``kind``: one to three mutations, all drawn from one seeded generator."""
    rng = random.Random(f"{SEED}/{kind}/{index}")
    data = bytearray(seed)
    for _ in range(rng.choice((1, 1, 2, 3))):
        op = rng.randrange(9)
        n = len(data)
        if n == 0:
            break
        pos = rng.randrange(n)
        if op == 0:
            data[pos] ^= 1 << rng.randrange(8)
        elif op == 1:
            data[pos] = rng.randrange(256)
        elif op == 2:
            data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif op == 3:
            del data[pos:pos + rng.randint(1, 64)]
        elif op == 4:
            src = rng.randrange(n)
            chunk = data[src:src + rng.randint(1, 512)]
            data[pos:pos + len(chunk)] = chunk
        elif op == 5:
            del data[pos:]
        elif op == 6:
            _big_number(rng, data)
        else:
            _rewrite_header(rng, data)
    return bytes(data)


# --- structure-aware mutants of the JSON documents (digests kept consistent) -------------------

_ODD = (None, True, -1, 0, 2 ** 64, 1.5, "", "x", "../../etc/passwd", "/etc/passwd",
        "sha256:" + "0" * 64, "../..:x", [], [1], {}, {"a": []}, ["a", {"b": None}])


_DEEP = "\x00deep"  # stands for 5000 nested arrays, spliced in as text (json.dumps would recurse)


def _odd(rng: random.Random) -> Any:
    if rng.random() < 0.05:
        return _DEEP if rng.random() < 0.5 else [[[[[]]]]]
    return rng.choice(_ODD)


def _dumps(doc: Any) -> bytes:
    return json.dumps(doc).replace(json.dumps(_DEEP), "[" * 5000 + "]" * 5000).encode()


def _poke(rng: random.Random, doc: Any) -> Any:
    """Replace, delete or retype one value somewhere in ``doc`` (a random path down from the top)."""
    if not isinstance(doc, (dict, list)) or not doc or rng.random() < 0.2:
        return _odd(rng)
    key: Any = rng.choice(list(doc)) if isinstance(doc, dict) else rng.randrange(len(doc))
    if isinstance(doc, dict) and rng.random() < 0.15:
        del doc[key]
        return doc
    doc[key] = _poke(rng, doc[key])
    return doc


def _json_mutant(kind: str, index: int, layers: list[bytes], work: Path) -> str:
    """An OCI layout or a folder ``docker save`` archive with one JSON document poked."""
    rng = random.Random(f"{SEED}/{kind}/{index}")
    diff_ids = ["sha256:" + hashlib.sha256(layer).hexdigest() for layer in layers]
    config: Any = {"os": "linux", "architecture": "amd64",
                   "config": {"Env": ["PATH=/usr/bin"], "Labels": {"a": "b"}, "Cmd": ["x"]},
                   "rootfs": {"type": "layers", "diff_ids": diff_ids}}
    which = rng.choice(("config", "manifest", "index") if kind == "oci-json" else ("config", "manifest"))
    folder = work / "json"
    shutil.rmtree(folder, ignore_errors=True)
    if kind == "docker-json":
        folder.mkdir()
        for i, layer in enumerate(layers):
            (folder / f"l{i}").mkdir()
            (folder / f"l{i}" / "layer.tar").write_bytes(layer)
        manifest: Any = [{"Config": "c.json", "RepoTags": ["t:1"],
                          "Layers": [f"l{i}/layer.tar" for i in range(len(layers))]}]
        config = _poke(rng, config) if which == "config" else config
        manifest = _poke(rng, manifest) if which == "manifest" else manifest
        (folder / "c.json").write_bytes(_dumps(config))
        (folder / "manifest.json").write_bytes(_dumps(manifest))
        return f"docker-archive:{folder}"
    from tests.imagekit import put_blob

    descs = [{"mediaType": "application/vnd.oci.image.layer.v1.tar", **put_blob(folder, layer)}
             for layer in layers]
    config = _poke(rng, config) if which == "config" else config
    config = _dumps(config)
    cfg = put_blob(folder, config)
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **cfg},
                "layers": descs}
    manifest = _poke(rng, manifest) if which == "manifest" else manifest
    manifest = _dumps(manifest)
    m = put_blob(folder, manifest)
    index: Any = {"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", **m,
         "platform": {"os": "linux", "architecture": "amd64"}}]}
    index = _dumps(_poke(rng, index) if which == "index" else index)
    write_oci(folder, layers, config=config, manifest=manifest, index=index)
    return f"oci:{folder}"


# --- one mutant through the real path -------------------------------------------------------------

def _source(kind: str, data: bytes, work: Path) -> str:
    """Write the mutant where its scheme reads it; the reference to snapshot."""
    if kind == "layer":  # the config follows the mutant, so a parseable one is accepted whole
        path = work / "m.tar"
        path.write_bytes(_docker_archive([data]))
        return f"docker-archive:{path}"
    if kind == "gzlayer":
        layout = work / "layout"
        shutil.rmtree(layout, ignore_errors=True)
        try:
            diff = "sha256:" + hashlib.sha256(gzip.decompress(data)).hexdigest()
        except Exception:  # the mutant does not decompress: any diff_id, recon must say why
            diff = "sha256:" + "0" * 64
        write_oci(layout, [data], diff_ids=[diff])
        return f"oci:{layout}"
    suffix = {"docker-archive": ".tar", "oci-archive": ".tar", "wheel": "-1.0-py3-none-any.whl"}[kind]
    path = work / f"vllm{suffix}"
    path.write_bytes(data)
    return f"{kind}:{path}"


class _Alarm(BaseException):
    """Raised by SIGALRM in the worker: the mutant hung."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise _Alarm


def run_one(kind: str, seed: bytes, index: int, work: Path) -> str | None:
    """Snapshot mutant ``index``: "" when it succeeded, None when it raised ReconError, else
    what went wrong."""
    out = work / "out"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    start = time.monotonic()
    signal.alarm(ALARM_S)
    try:
        take_snapshot(_mutant_source(kind, seed, index, work), out=out, name="m")
        ok = True
    except ReconError as err:
        ok = False
        if "\n" in str(err):
            return f"multi-line ReconError: {str(err)[:300]!r}"
    except _Alarm:
        return f"hang: still running after {ALARM_S} s"
    except BaseException as err:  # noqa: BLE001 - the point: anything but ReconError is a finding
        tb = traceback.format_exception(type(err), err, err.__traceback__)
        return f"{type(err).__name__}: {str(err)[:200]} | " + " | ".join(
            line.strip().replace("\n", " ") for line in tb[-4:-1])
    finally:
        signal.alarm(0)
    took = time.monotonic() - start
    return f"slow: {took:.1f} s" if took > SLOW_S else ("" if ok else None)


def _address_space() -> int:
    """This process's mapped address space now (``VmSize``), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) << 10
    return 0


def _worker(kinds: list[str], shard: int, shards: int, conn: Any) -> None:
    """A forked worker: capped address space, its share of every kind's mutants; results by pipe."""
    # on top of what the fork inherits: pytest's address space has grown by whatever earlier
    # tests loaded (torch alone maps gigabytes it never touches)
    cap = _address_space() + MEMORY_CAP
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    signal.signal(signal.SIGALRM, _on_alarm)
    work = Path(tempfile.mkdtemp(prefix=f"recon-fuzz-{shard}-"))
    failures: list[tuple[str, int, str]] = []
    done = 0
    succeeded: dict[str, int] = {}
    try:
        seeds = _seeds(work)
        for kind in kinds:
            for index in range(shard, PER_KIND, shards):
                what = run_one(kind, seeds[kind], index, work)
                done += 1
                if what == "":
                    succeeded[kind] = succeeded.get(kind, 0) + 1
                elif what is not None:
                    failures.append((kind, index, what))
    except BaseException as err:  # noqa: BLE001 - reported, not swallowed
        failures.append(("worker", -1, f"{type(err).__name__}: {err}"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
    conn.send((done, failures, maxrss, succeeded))
    conn.close()


def _mutant_source(kind: str, seed: bytes, index: int, work: Path) -> str:
    """Build mutant ``index`` of ``kind`` under ``work``; the SOURCE reference to snapshot."""
    if kind.endswith("-json"):
        return _json_mutant(kind, index, [_BASE_LAYER, seed], work)
    return _source(kind, mutate(seed, kind, index), work)


def reproduce(kind: str, index: int) -> None:
    """Re-run one mutant in this process, raising whatever it raises (for a debugger)."""
    work = Path(tempfile.mkdtemp(prefix="recon-fuzz-repro-"))
    out = work / "out"
    out.mkdir()
    source = _mutant_source(kind, _seeds(work)[kind], index, work)
    print(f"mutant {kind}/{index}: {source}")
    take_snapshot(source, out=out, name="m")


def _run_all(kinds: list[str]) -> tuple[int, list[tuple[str, int, str]], int, dict[str, int]]:
    ctx = multiprocessing.get_context("fork")
    jobs: list[tuple[Any, Any]] = []
    for shard in range(WORKERS):
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_worker, args=(kinds, shard, WORKERS, send))
        proc.start()
        jobs.append((proc, recv))
    total, failures, peak, succeeded = 0, [], 0, {}
    for proc, recv in jobs:
        done, fails, maxrss, ok = recv.recv()
        proc.join()
        total += done
        failures += fails
        peak = max(peak, maxrss)
        for kind, n in ok.items():
            succeeded[kind] = succeeded.get(kind, 0) + n
    return total, failures, peak, succeeded


def test_every_mutant_succeeds_or_fails_in_one_line(capsys: Any) -> None:
    kinds = ["layer", "gzlayer", "docker-archive", "oci-archive", "wheel", "oci-json", "docker-json"]
    start = time.monotonic()
    total, failures, peak, succeeded = _run_all(kinds)
    took = time.monotonic() - start
    with capsys.disabled():
        print(f"\nfuzz: {total} mutants (seed {SEED}) in {took:.1f} s, peak RSS {peak >> 20} MiB, "
              f"{len(failures)} failures; snapshots that succeeded: {succeeded}")
        classes: dict[str, list[str]] = {}
        for kind, index, what in failures:  # one line per class: exception and innermost frame
            key = what.split(" | ")[0].split(":")[0] + " @ " + what.rsplit(" | ", 1)[-1][:160]
            classes.setdefault(key, []).append(f"{kind}/{index}")
        for key, which in classes.items():
            print(f"  {len(which)}x seed {SEED} {', '.join(which[:6])}: {key}")
    assert total == PER_KIND * len(kinds)
    assert not failures, f"{len(failures)} mutants crashed; first: {failures[0]}"
    assert peak < MEMORY_CAP


def test_mutants_are_reproducible() -> None:
    """The same kind and index always give the same bytes (so a printed failure can be re-run)."""
    seed = _wheel()
    assert mutate(seed, "wheel", 5) == mutate(seed, "wheel", 5)
    assert mutate(seed, "wheel", 5) != mutate(seed, "wheel", 6)


_: Callable[..., Any] = reproduce  # documented entry point
