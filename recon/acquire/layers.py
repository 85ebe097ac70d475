"""Squash image layers the way the Docker engine does, keeping only the package we want.

Each layer is streamed once, top layer first (compressed layers several at
once). The rule is the engine's: the first layer from the top to mention a
path owns it; lower layers only fill in what no upper layer mentioned, whited
out (``.wh.NAME``), made opaque (``.wh..wh..opq``) or replaced with a
non-directory above it. A layer writes its package files only once every
layer above it is scanned, so it writes exactly the files that stay visible,
straight into the final tree. The whole filesystem is never materialised and
memory stays bounded whatever the image size; every write goes through
:class:`recon.acquire.writer.TreeWriter`, which cannot escape its root.

Inside one layer the last entry of a name wins, as umoci and containerd apply
a layer entry by entry (the Docker engine refuses such a layer): a non-folder
taking a folder's name removes what was below it, lower layers included.
Names beyond the kernel's limits are refused (:func:`recon.acquire.writer.clean_relpath`),
and a package symlink that leaves the package is written to the staged tree
(so entries through it are still refused) but never kept in the snapshot
(:func:`link_stays_inside`).

Along the way the pass records the small facts needed to decide which copy of
the package the image's own Python would import: top-level names per
site-packages folder, distribution metadata, interpreters, ``pyvenv.cfg``
files, ``.pth`` files, and every symlink (resolved virtually, never on the host).
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import re
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from email.parser import HeaderParser
from typing import IO, cast

from ..errors import ReconError, UnsafeArchiveError
from .sources.base import Image, Layer
from .sources.entry import DIR, FILE, HARDLINK, OTHER, SYMLINK, Entry
from .sources.streams import Prefixed
from .writer import TreeWriter, check_link_target, clean_relpath, short

DEFAULT_PACKAGES = ("vllm", "sglang")
#: Compiled artefacts skipped unless ``--all-files``: they are most of an engine
#: wheel's bytes and no investigation reads them. They are still listed.
BINARY_GLOBS = ("*.so", "*.so.*", "*.cubin", "*.fatbin", "*.a", "*.o", "*.dll", "*.dylib")
ELF_MAGIC = b"\x7fELF"  # ... and so are executables, whatever their name
SITE_RE = re.compile(r"^(?P<site>(?:.*?/)?(?:site-packages|dist-packages))/(?P<rest>[^/].*)$")
PYTHON_BIN_RE = re.compile(r"(?:^|/)bin/python(?:3(?:\.\d+)?)?$")
SMALL_FILE = 1 << 20  # metadata files read into memory are capped at this size
MAX_SYMLINK_HOPS = 40
_CODES = {FILE: 0, DIR: 1, SYMLINK: 2, HARDLINK: 3, OTHER: 4}  # a layer's listing packs kind and order
_KINDS = {v: k for k, v in _CODES.items()}
_MEMO_CHARS = 32 << 20  # Hider's folder memo is dropped past this many characters of folder names

ProgressFn = Callable[[Layer, str], None]


@dataclass
class CaptureLimits:
    """Caps against hostile archives (each one is a CLI flag; see docs/security.md)."""

    max_file_size: int = 512 << 20
    max_total_size: int = 16 << 30
    max_layer_size: int = 64 << 30
    #: a compressed layer or wheel may expand this many times (never capped below 1 GiB);
    #: None: ``RECON_MAX_RATIO`` or 100; 0: no ratio cap
    max_ratio: float | None = None


@dataclass
class Captured:
    """A file (or link) written under the work tree, with where it came from."""

    path: str  # image-root-relative
    kind: str  # "file" | "symlink"
    size: int
    sha256: str | None
    layer: int
    target: str | None = None
    outside: bool = False  # a symlink that leaves the package (see link_stays_inside): never kept


@dataclass
class ScanResult:
    """What one squash pass saw and wrote."""

    captured: dict[str, Captured] = field(default_factory=dict)
    skipped: dict[str, dict[str, object]] = field(default_factory=dict)
    tops: dict[str, set[str]] = field(default_factory=dict)  # site dir -> top-level names
    metadata: dict[str, tuple[str, int]] = field(default_factory=dict)  # path -> (text, layer)
    symlinks: dict[str, str] = field(default_factory=dict)  # visible symlinks, whole image
    pythons: set[str] = field(default_factory=set)
    duplicates: int = 0
    entries_seen: int = 0


def _add_folders(name: str, seen: set[int]) -> None:
    """Record the folders above ``name`` as paths of its layer.

    A layer holding ``x/y`` makes ``x`` a directory in that layer even when the
    tar has no entry for ``x`` (as overlayfs sees the layer's folder), so a
    file or symlink ``x`` in a lower layer is hidden. Stops at the first folder
    already seen, so it costs one lookup per entry in the usual tar order.
    """
    folder = name.rpartition("/")[0]
    while folder:
        h = hash(folder)
        if h in seen:
            return
        seen.add(h)
        folder = folder.rpartition("/")[0]


@dataclass
class LayerScan:
    """Phase one's view of one layer.

    ``names`` maps every entry's name (markers excluded) to its kind and the
    position of its *last* entry in the tar (``position << 3 | kind code``):
    the engine applies a layer entry by entry, so of duplicate names the last
    one wins, and a non-folder that takes a folder's name removes what was
    below it (``replaced``: name -> position). The package files it wrote (the
    visible ones) are listed in ``captured``; small metadata files are kept in
    memory.
    """

    index: int
    names: dict[str, int] = field(default_factory=dict)
    replaced: dict[str, int] = field(default_factory=dict)
    linked: dict[str, str] = field(default_factory=dict)  # pending hardlink name -> target
    seen: int = 0  # entries, duplicates included
    dups: int = 0
    markers: int = 0  # whiteouts and opaque markers
    whiteouts: set[str] = field(default_factory=set)
    opaques: set[str] = field(default_factory=set)
    captured: dict[str, Captured] = field(default_factory=dict)
    skipped: dict[str, dict[str, object]] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    symlinks: dict[str, str] = field(default_factory=dict)
    written: int = 0
    paths: set[int] = field(default_factory=set)  # hashes of every entry's path
    nondirs: set[int] = field(default_factory=set)  # hashes of non-directory paths


@dataclass
class Hider:
    """What a set of upper layers hides: the visibility rule, in one place.

    A path is hidden if an upper layer has an entry at that very path (or a
    folder it implies), whites it out, or whites out / makes opaque / replaces
    with a non-directory any folder above it. The folder part is memoised per
    folder (tens of thousands of files share a few thousand folders). The scan
    asks it before writing a file, the merge before recording one.
    """

    paths: set[int] = field(default_factory=set)
    nondirs: set[int] = field(default_factory=set)
    whiteouts: set[str] = field(default_factory=set)
    opaques: set[str] = field(default_factory=set)
    _folders: dict[str, bool] = field(default_factory=dict)
    _chars: int = 0  # characters held by ``_folders`` (bounded: see _MEMO_CHARS)

    def add(self, paths: set[int], nondirs: set[int], whiteouts: set[str], opaques: set[str]) -> None:
        """Take in one more upper layer."""
        self.paths |= paths
        self.nondirs |= nondirs
        self.whiteouts |= whiteouts
        self.opaques |= opaques
        self._folders.clear()
        self._chars = 0

    def hides(self, name: str) -> bool:
        if hash(name) in self.paths or name in self.whiteouts or "" in self.opaques:
            return True  # ("" is the image root: an opaque marker there hides every lower layer)
        folder = name.rpartition("/")[0]
        return bool(folder) and self._folder_hidden(folder)

    def _folder_hidden(self, folder: str) -> bool:
        """Whether anything inside ``folder`` is hidden (iterative: names can be deep)."""
        memo = self._folders
        known = memo.get(folder)
        if known is not None:
            return known
        if self._chars > _MEMO_CHARS:  # deep hostile names: memory stays bounded, not per folder
            memo.clear()
            self._chars = 0
        chain = []
        path = folder
        while path and path not in memo:
            chain.append(path)
            path = path.rpartition("/")[0]
        hidden = memo.get(path, False) if path else False
        for path in reversed(chain):  # outermost first
            hidden = hidden or (path in self.whiteouts or path in self.opaques
                                or hash(path) in self.nondirs)
            memo[path] = hidden
            self._chars += len(path)
        return hidden


def default_workers(layers: list[Layer]) -> int:
    """How many layers to scan at once when nobody said.

    Measured (docs/benchmarks/snapshot.md): uncompressed layers are walked
    fastest one at a time, top first (header parsing holds the GIL, and each
    layer then writes straight into the final tree); compressed layers gain from
    decompressing side by side, because zlib and zstd release the GIL. Capped
    at 4: each scan holds a read-ahead buffer of 16 MiB.
    """
    compressed = sum(1 for layer in layers if layer.compressed)
    if compressed < 2:
        return 1
    return max(1, min(4, os.cpu_count() or 1, compressed))


class _Abandoned(Exception):
    """A layer scan stopping because another one failed (the first failure is what is raised)."""


class Squasher:
    """Squash an image's layers, keeping the files of the named packages.

    Phase one scans layers (top first, compressed ones side by side: decompress,
    parse, and once the layers above are known write the visible package files).
    Phase two walks the scans **top-down** and records the visible symlinks,
    interpreters, metadata and top-level names the locator needs.

    ``roots`` are folders (image-root-relative) whose children are top-level
    importable names: every ``site-packages``/``dist-packages`` is found by
    pattern; extra roots (``PYTHONPATH``, ``.pth`` targets, resolved package
    symlinks) are given. ``packages`` names the top-level packages to capture.
    """

    def __init__(self, writer: TreeWriter, *, packages: Iterable[str], extra_roots: Iterable[str] = (),
                 include: Iterable[str] = (), all_files: bool = False,
                 limits: CaptureLimits | None = None, only_roots: bool = False,
                 progress: ProgressFn | None = None, workers: int | None = None) -> None:
        self.writer = writer
        self.packages = set(packages)
        self.extra_roots = sorted({r.strip("/") for r in extra_roots if r.strip("/")}, key=len,
                                  reverse=True)
        self.include = list(include)
        self.all_files = all_files
        self.limits = limits or CaptureLimits()
        self.only_roots = only_roots  # second pass: capture only under extra_roots
        self.progress = progress
        # RECON_LAYER_WORKERS=N scans N layers at once; by default see default_workers().
        self.workers = workers or int(os.environ.get("RECON_LAYER_WORKERS") or 0)
        self._indices: list[int] = []
        self.result = ScanResult()
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # signalled when a layer's scan finishes
        self._failed = False
        self._total = 0
        self._finished: dict[int, LayerScan] = {}  # scans done so far, by layer index

    # -- classification ------------------------------------------------------
    def _split(self, path: str) -> tuple[str, str] | None:
        """(root, rest) when ``path`` lies under an importable root."""
        for root in self.extra_roots:
            if path.startswith(root + "/"):
                return root, path[len(root) + 1:]
        if self.only_roots:
            return None
        m = SITE_RE.match(path)
        if m:
            return m.group("site"), m.group("rest")
        return None

    def _wanted(self, rest: str) -> bool:
        if self.include:
            return any(fnmatch.fnmatchcase(rest, g) for g in self.include)
        if self.all_files:
            return True
        base = posixpath.basename(rest)
        return not any(fnmatch.fnmatchcase(base, g) for g in BINARY_GLOBS)

    def _is_metadata(self, rest: str, kind: str) -> bool:
        top = rest.split("/", 1)[0]
        if top.endswith((".dist-info", ".egg-info")):
            return rest.endswith(("/METADATA", "/PKG-INFO")) or ("/" not in rest and kind == FILE)
        if "/" not in rest and rest.endswith(".pth"):
            return kind == FILE
        return rest.startswith("__editable__") and rest.endswith(".py") and kind == FILE

    # -- the pass ------------------------------------------------------------
    def run(self, image: Image) -> ScanResult:
        self._indices = [layer.index for layer in image.layers]
        workers = self.workers or default_workers(image.layers)
        order = list(reversed(image.layers))  # the top layer first: the others wait on it
        if workers > 1 and len(order) > 1:
            with ThreadPoolExecutor(workers) as pool:
                futures = [pool.submit(self._scan, layer) for layer in order]
                try:
                    wait(futures, return_when=FIRST_EXCEPTION)
                    scans = [f.result() for f in futures]
                except BaseException:
                    with self._cond:
                        self._failed = True  # layers waiting on the one that failed give up
                        self._cond.notify_all()
                    for f in futures:
                        f.cancel()
                    raise
        else:
            scans = [self._scan(layer) for layer in order]
        self._merge(scans)
        return self.result

    def _scan(self, layer: Layer) -> LayerScan:
        """Phase one for one layer: list every entry, keep the small metadata files, and
        write the package files it contributes straight into the final tree.

        Writing waits until every layer above has been scanned, because only then is it
        known which of this layer's files stay visible. Layers scanned side by side thus
        decompress and list in parallel but write one after the other, top first, and a
        file that an upper layer hides is never written (no scratch copies, no renames).
        """
        where = f"layer {layer.index} ({layer.digest[:19]})"
        scan = LayerScan(layer.index)
        pending: dict[str, list[str]] = {}
        if self.progress:
            self.progress(layer, "start")
        hider: Hider | None = None

        def upper() -> Hider:
            nonlocal hider
            if hider is None:
                hider = self._wait_for_upper(layer.index)
            return hider

        entries = layer.entries_under(self.extra_roots) if self.only_roots else layer.entries()
        for n, entry in enumerate(entries):
            if n % 512 == 0 and self.progress:
                self.progress(layer, "advance")
            name = entry.name
            if name.startswith("/"):
                raise UnsafeArchiveError(f"absolute path in layer: {short(name)!r}", where=where)
            if not name:
                continue
            name = clean_relpath(name, where=where)
            base = name.rpartition("/")[2]
            if base.startswith(".wh."):
                parent = name.rpartition("/")[0]
                scan.markers += 1
                if base == ".wh..wh..opq":
                    scan.opaques.add(parent)
                elif not base.startswith(".wh..wh."):
                    scan.whiteouts.add(f"{parent}/{base[4:]}" if parent else base[4:])
                continue
            if entry.kind == SYMLINK:
                check_link_target(name, entry.linkname or "", where=where)
            self._enter(name, entry.kind, n, scan)
            if entry.kind != DIR:
                self._take(entry, name, layer, scan, where, pending, upper)
        if scan.replaced:
            self._purge(scan)
        if pending:
            self._resolve_hardlinks(layer, scan, pending, where)
        with self._cond:
            self._finished[layer.index] = scan
            self._cond.notify_all()
        if self.progress:
            self.progress(layer, "done")
        return scan

    def _enter(self, name: str, kind: str, seq: int, scan: LayerScan) -> None:
        """List one entry; a name already in this layer is replaced, as the engine replaces it.

        Docker and umoci apply a layer entry by entry: an entry removes what is
        at its name unless both are folders, so the last entry of a name wins,
        and a non-folder taking a folder's name removes the folder with all
        below it, also what lower layers had there (it is made opaque here).
        """
        h = hash(name)
        scan.seen += 1
        if h in scan.paths:  # an entry of that name, or a folder implied by one, came before
            prev = scan.names.get(name)
            if prev is not None:
                scan.dups += 1
                self._drop(name, scan)
                if kind == DIR and prev & 7 != _CODES[DIR]:
                    scan.opaques.add(name)  # the non-folder before removed the lower layers' folder
            if kind != DIR and (prev is None or prev & 7 == _CODES[DIR]):
                scan.replaced[name] = seq
                scan.opaques.add(name)  # what was below goes at the end of the layer (_purge)
        scan.names[name] = seq << 3 | _CODES[kind]
        scan.paths.add(h)
        _add_folders(name, scan.paths)
        if kind == DIR:
            scan.nondirs.discard(h)
        else:
            scan.nondirs.add(h)

    def _drop(self, name: str, scan: LayerScan) -> None:
        """Forget what an earlier entry of ``name`` left in this layer (a later one replaces it).

        Only a file this layer wrote is removed from the tree: what is on disk
        around it may belong to upper layers.
        """
        if scan.captured.pop(name, None) is not None:
            self.writer.remove(name)
        scan.skipped.pop(name, None)
        scan.metadata.pop(name, None)
        scan.symlinks.pop(name, None)
        scan.linked.pop(name, None)

    def _purge(self, scan: LayerScan) -> None:
        """Drop the entries that a later non-folder of the same layer removed with its folder.

        One pass over the listing, run only for a layer where a folder was
        replaced: an entry is gone if a folder above it was replaced after it.
        """
        dead = []
        for name, code in scan.names.items():
            seq = code >> 3
            folder = name.rpartition("/")[0]
            while folder:
                when = scan.replaced.get(folder)
                if when is not None and when > seq:
                    dead.append(name)
                    break
                folder = folder.rpartition("/")[0]
        for name in dead:
            del scan.names[name]
            self._drop(name, scan)

    def _wait_for_upper(self, index: int) -> Hider:
        """Block until every layer above ``index`` is scanned; return what they hide."""
        with self._cond:
            while not all(i in self._finished for i in self._indices if i > index):
                if self._failed:
                    raise _Abandoned
                self._cond.wait(0.2)
            done = [s for i, s in self._finished.items() if i > index]
        hider = Hider()
        for s in done:
            hider.add(s.paths, s.nondirs, s.whiteouts, s.opaques)
        return hider

    def _take(self, entry: Entry, name: str, layer: Layer, scan: LayerScan, where: str,
              pending: dict[str, list[str]], upper: Callable[[], Hider]) -> None:
        if entry.kind == SYMLINK:
            scan.symlinks[name] = entry.linkname or ""
        if name.endswith("/pyvenv.cfg") and entry.kind == FILE:
            self._remember(entry, name, scan)
        split = self._split(name)
        if split is None:
            return
        root, rest = split
        if self._is_metadata(rest, entry.kind):
            self._remember(entry, name, scan)
            return
        if rest.split("/", 1)[0] not in self.packages:
            return
        if entry.kind == OTHER:
            raise UnsafeArchiveError(f"device file, FIFO or socket inside the package: {name!r}",
                                     where=where)
        if not self._wanted(rest):
            if entry.kind in (FILE, HARDLINK):
                scan.skipped[name] = {"size": entry.size, "layer": layer.index}
            return
        if upper().hides(name):
            return  # an upper layer hides it: never written
        out = self.writer
        if entry.kind == SYMLINK:
            # written even when it points out: the staged tree must refuse entries through it;
            # the snapshotter lists such a link as skipped and removes it before the move
            out.symlink(name, entry.linkname or "", where=where)
            scan.captured[name] = Captured(name, "symlink", 0, None, layer.index, entry.linkname,
                                           outside=not link_stays_inside(rest, entry.linkname or ""))
            return
        if entry.kind == HARDLINK:
            target = clean_relpath(entry.linkname or "", where=where)
            src = out.open_read(target) if target in scan.captured else None
            if src is None:
                pending.setdefault(target, []).append(name)
                scan.linked[name] = target
                return
            with src:
                self._write(out, name, src, layer, scan, where)
            return
        if entry.size > self.limits.max_file_size:
            raise UnsafeArchiveError(
                f"entry {name!r} is {entry.size} bytes, over the size cap of "
                f"{self.limits.max_file_size} (raise it with --max-file-size)", where=where)
        assert entry.open is not None
        src = entry.open()
        with src:
            if not (self.all_files or self.include) and entry.size >= len(ELF_MAGIC):
                head = src.read(len(ELF_MAGIC))
                if head == ELF_MAGIC:  # a compiled executable without a telling name (vllm/vllm-rs)
                    scan.skipped[name] = {"size": entry.size, "layer": layer.index}
                    return
                src = cast(IO[bytes], Prefixed(head, src))
            self._write(out, name, src, layer, scan, where)

    def _write(self, out: TreeWriter, name: str, src: IO[bytes], layer: Layer, scan: LayerScan,
               where: str) -> None:
        size, sha = out.write_stream(name, src, where=where, limit=self.limits.max_file_size)
        self._count(size, scan, where)
        scan.captured[name] = Captured(name, "file", size, sha, layer.index)

    def _count(self, size: int, scan: LayerScan, where: str) -> None:
        """Add to the running total of package bytes; refuse past ``max_total_size``."""
        scan.written += size
        with self._lock:
            self._total += size
            over = self._total > self.limits.max_total_size
        if over:
            raise UnsafeArchiveError(
                f"package files add up to more than {self.limits.max_total_size} bytes "
                "(raise the cap with --max-total-size)", where=where)

    def _remember(self, entry: Entry, name: str, scan: LayerScan) -> None:
        if entry.kind != FILE or entry.open is None or entry.size > SMALL_FILE:
            return
        with entry.open() as fh:
            data = fh.read(SMALL_FILE)
        scan.metadata[name] = data.decode("utf-8", "replace")

    def _resolve_hardlinks(self, layer: Layer, scan: LayerScan, pending: dict[str, list[str]],
                           where: str) -> None:
        """Fetch hardlink targets that were out of scope by reading the layer again."""
        out = self.writer
        for entry in layer.entries():
            if entry.kind != FILE or not entry.name:
                continue
            name = clean_relpath(entry.name, where=where)
            links = [link for link in pending.pop(name, ()) if scan.linked.get(link) == name]
            if not links:
                if not pending:
                    break
                continue
            if entry.size > self.limits.max_file_size:
                raise UnsafeArchiveError(f"hardlink target {name!r} is over the size cap", where=where)
            assert entry.open is not None
            first, *rest = links
            self._write(out, first, entry.open(), layer, scan, where)
            for other in rest:
                src = out.open_read(first)
                if src is not None:
                    with src:
                        self._write(out, other, src, layer, scan, where)
            if not pending:
                break
        live = [(t, link) for t, links in pending.items() for link in links if scan.linked.get(link) == t]
        if live:
            target, link = live[0]
            raise UnsafeArchiveError(f"hardlink {short(link)!r} points to {short(target)!r}, which is not "
                                     "in the same layer", where=where)

    def _merge(self, scans: list[LayerScan]) -> None:
        """Phase two: top-down visibility of every entry; record what the image shows.

        Package files are already in place (each scan wrote only what stays
        visible); this pass collects the facts the locator needs (symlinks,
        interpreters, metadata, top-level names) from the visible entries.
        """
        res = self.result
        upper = Hider()
        for scan in scans:  # top layer first
            res.entries_seen += scan.seen + scan.markers
            res.duplicates += scan.dups
            for name, code in scan.names.items():  # one per name: the last entry of it
                kind = _KINDS[code & 7]
                if kind == DIR:
                    continue
                if upper.hides(name):
                    assert name not in scan.captured, f"wrote {name}, hidden by an upper layer"
                    continue
                self._visible(name, kind, scan)
            # what this layer hides below it: the sets its scan built (paths with implied folders)
            upper.add(scan.paths, scan.nondirs, scan.whiteouts, scan.opaques)

    def _visible(self, name: str, kind: str, scan: LayerScan) -> None:
        res = self.result
        if kind == SYMLINK and name in scan.symlinks:
            res.symlinks[name] = scan.symlinks[name]
        if PYTHON_BIN_RE.search(name) and kind in (FILE, SYMLINK, HARDLINK):
            res.pythons.add(name)
        if name in scan.metadata:
            res.metadata[name] = (scan.metadata[name], scan.index)
        split = self._split(name)
        if split is None:
            return
        root, rest = split
        res.tops.setdefault(root, set()).add(rest.split("/", 1)[0])
        if name in scan.skipped:
            res.skipped[name] = scan.skipped[name]
        cap = scan.captured.get(name)
        if cap is not None:
            res.captured[name] = cap


def link_stays_inside(rest: str, target: str) -> bool:
    """Whether a link at ``rest`` (``pkg/...``, relative to its site folder) stays inside ``pkg``
    however it is resolved, on the host as in the image.

    Only such links are kept in a snapshot; the others are listed (with their
    target) as skipped, so no later reader of the snapshot (index, slicer,
    run) can follow one to a host file. The rule is lexical and needs
    no other entry: the target is relative, its ``..`` come first (they climb
    the link's own folders, which the writer made as real folders, never
    links) and do not climb out of ``pkg``; what follows only descends, so
    another link reached on the way obeys the same rule.
    """
    if not target or target.startswith("/"):
        return False
    parts = [p for p in target.split("/") if p not in ("", ".")]
    ups = 0
    while ups < len(parts) and parts[ups] == "..":
        ups += 1
    if ".." in parts[ups:]:
        return False
    return rest.count("/") - ups >= 1


# --- virtual symlink resolution ------------------------------------------------

def resolve_virtual(path: str, symlinks: dict[str, str], *, max_hops: int = MAX_SYMLINK_HOPS) -> str:
    """Resolve ``path`` against the *image* root using recorded symlinks.

    Absolute targets restart at the image root; ``..`` never climbs above it
    (as inside a chroot). Loops and long chains raise instead of hanging.
    """
    parts = [p for p in path.split("/") if p not in ("", ".")]
    done: list[str] = []
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if done:
                done.pop()
            continue
        cand = "/".join([*done, part])
        target = symlinks.get(cand)
        if target is None:
            done.append(part)
            continue
        hops += 1
        if hops > max_hops:
            raise ReconError(f"too many symlink hops (a loop?) resolving /{path}")
        if target.startswith("/"):
            done = []
        parts = [p for p in target.split("/") if p not in ("", ".")] + parts
    return "/".join(done)


def parse_metadata(text: str) -> tuple[str, str] | None:
    """(name, version) from a METADATA / PKG-INFO file."""
    try:
        msg = HeaderParser().parsestr(text, headersonly=True)
    except Exception:
        return None
    name, version = msg.get("Name"), msg.get("Version")
    if not name or not version:
        return None
    return str(name).strip(), str(version).strip()
