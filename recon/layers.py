"""Squash image layers the way the Docker engine does, keeping only the package we want.

Layers are read **top-down** (newest first) in one streaming pass. The first
layer to mention a path owns it; lower layers only fill in what no upper
layer mentioned, whited out (``.wh.NAME``), made opaque (``.wh..wh..opq``) or
replaced with a non-directory above it. This gives the engine's result
without ever materialising the whole filesystem, so memory stays bounded
whatever the image size, and only files under candidate package folders are
written (through :class:`recon.writer.TreeWriter`, which cannot escape its root).

Along the way the pass records the small facts needed to decide which copy of
the package the image's own Python would import: top-level names per
site-packages folder, distribution metadata, interpreters, ``pyvenv.cfg``
files, ``.pth`` files, and every symlink (resolved virtually, never on the host).
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from email.parser import HeaderParser
from typing import IO

from .errors import ReconError, UnsafeArchiveError
from .sources.base import DIR, FILE, HARDLINK, OTHER, SYMLINK, Entry, Image, Layer
from .writer import TreeWriter, clean_relpath

DEFAULT_PACKAGES = ("vllm", "sglang")
#: Compiled artefacts skipped unless ``--all-files``: they are most of an engine
#: wheel's bytes and no investigation reads them. They are still listed.
BINARY_GLOBS = ("*.so", "*.so.*", "*.cubin", "*.fatbin", "*.a", "*.o", "*.dll", "*.dylib")
SITE_RE = re.compile(r"^(?P<site>(?:.*?/)?(?:site-packages|dist-packages))/(?P<rest>[^/].*)$")
PYTHON_BIN_RE = re.compile(r"(?:^|/)bin/python(?:3(?:\.\d+)?)?$")
SMALL_FILE = 1 << 20  # metadata files read into memory are capped at this size
MAX_SYMLINK_HOPS = 40

ProgressFn = Callable[[Layer, str], None]


@dataclass
class CaptureLimits:
    max_file_size: int = 512 << 20
    max_total_size: int = 16 << 30
    max_layer_size: int = 256 << 30


@dataclass
class Captured:
    """A file (or link) written under the work tree, with where it came from."""

    path: str  # image-root-relative
    kind: str  # "file" | "symlink"
    size: int
    sha256: str | None
    layer: int
    target: str | None = None


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


def _ancestors(path: str) -> Iterable[str]:
    i = path.rfind("/")
    while i > 0:
        path = path[:i]
        yield path
        i = path.rfind("/")


class Squasher:
    """One top-down pass over an image's layers.

    ``roots`` are folders (image-root-relative) whose children are top-level
    importable names: every ``site-packages``/``dist-packages`` is found by
    pattern, extra roots (``PYTHONPATH``, ``.pth`` targets, resolved package
    symlinks) are given. ``packages`` names the top-level packages to capture.
    """

    def __init__(self, writer: TreeWriter, *, packages: Iterable[str], extra_roots: Iterable[str] = (),
                 include: Iterable[str] = (), all_files: bool = False,
                 limits: CaptureLimits | None = None, only_roots: bool = False,
                 progress: ProgressFn | None = None) -> None:
        self.writer = writer
        self.packages = set(packages)
        self.extra_roots = sorted({r.strip("/") for r in extra_roots if r.strip("/")}, key=len,
                                  reverse=True)
        self.include = list(include)
        self.all_files = all_files
        self.limits = limits or CaptureLimits()
        self.only_roots = only_roots  # second pass: capture only under extra_roots
        self.progress = progress
        self.result = ScanResult()
        self._total = 0

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

    # -- the pass ------------------------------------------------------------
    def run(self, image: Image) -> ScanResult:
        upper_paths: set[int] = set()
        upper_nondirs: set[int] = set()
        upper_whiteouts: set[str] = set()
        upper_opaques: set[str] = set()
        for layer in reversed(image.layers):
            where = f"layer {layer.index} ({layer.digest[:19]})"
            cur_paths: set[int] = set()
            cur_nondirs: set[int] = set()
            cur_wh: set[str] = set()
            cur_opq: set[str] = set()
            pending_links: dict[str, list[str]] = {}
            written_here: set[str] = set()
            if self.progress:
                self.progress(layer, "start")
            for n, entry in enumerate(layer.entries()):
                self.result.entries_seen += 1
                if self.progress and n % 512 == 0:
                    self.progress(layer, "advance")
                name = entry.name
                if name.startswith("/"):
                    raise UnsafeArchiveError(f"absolute path in layer: {name!r}", where=where)
                if not name:
                    continue
                name = clean_relpath(name, where=where)
                base = posixpath.basename(name)
                parent = posixpath.dirname(name)
                if base.startswith(".wh."):
                    if base == ".wh..wh..opq":
                        cur_opq.add(parent)
                    elif not base.startswith(".wh..wh."):
                        cur_wh.add(posixpath.join(parent, base[4:]))
                    continue
                h = hash(name)
                if h in cur_paths:
                    self.result.duplicates += 1
                cur_paths.add(h)
                if entry.kind != DIR:
                    cur_nondirs.add(h)
                if entry.kind == DIR:
                    continue
                if h in upper_paths or name in upper_whiteouts or any(
                    a in upper_whiteouts or a in upper_opaques or hash(a) in upper_nondirs
                    for a in _ancestors(name)
                ):
                    continue  # hidden by an upper layer
                self._visible(entry, name, layer, where, pending_links, written_here)
            if pending_links:
                self._resolve_hardlinks(layer, pending_links, where)
            if self.progress:
                self.progress(layer, "done")
            upper_paths |= cur_paths
            upper_nondirs |= cur_nondirs
            upper_whiteouts |= cur_wh
            upper_opaques |= cur_opq
        return self.result

    def _visible(self, entry: Entry, name: str, layer: Layer, where: str,
                 pending_links: dict[str, list[str]], written_here: set[str]) -> None:
        res = self.result
        if entry.kind == SYMLINK:
            res.symlinks[name] = entry.linkname or ""
        if PYTHON_BIN_RE.search(name) and entry.kind in (FILE, SYMLINK, HARDLINK):
            res.pythons.add(name)
        if name.endswith("/pyvenv.cfg") and entry.kind == FILE:
            self._remember(entry, name, layer, where)
        split = self._split(name)
        if split is None:
            return
        root, rest = split
        top = rest.split("/", 1)[0]
        res.tops.setdefault(root, set()).add(top)
        if top.endswith((".dist-info", ".egg-info")):
            if rest.endswith(("/METADATA", "/PKG-INFO")) or ("/" not in rest and entry.kind == FILE):
                self._remember(entry, name, layer, where)
            return
        if "/" not in rest and rest.endswith(".pth") and entry.kind == FILE:
            self._remember(entry, name, layer, where)
            return
        if rest.startswith("__editable__") and rest.endswith(".py") and entry.kind == FILE:
            self._remember(entry, name, layer, where)
            return
        if top not in self.packages:
            return
        if entry.kind == OTHER:
            raise UnsafeArchiveError(f"device file, FIFO or socket inside the package: {name!r}",
                                     where=where)
        if not self._wanted(rest):
            if entry.kind in (FILE, HARDLINK):
                res.skipped[name] = {"size": entry.size, "layer": layer.index}
            return
        if entry.kind == SYMLINK:
            self.writer.symlink(name, entry.linkname or "", where=where)
            res.captured[name] = Captured(name, "symlink", 0, None, layer.index, entry.linkname)
            return
        if entry.kind == HARDLINK:
            target = clean_relpath(entry.linkname or "", where=where)
            src = self.writer.open_read(target) if target in written_here else None
            if src is None:
                pending_links.setdefault(target, []).append(name)
                return
            with src:
                self._write(name, src, layer, where)
            written_here.add(name)
            return
        if entry.size > self.limits.max_file_size:
            raise UnsafeArchiveError(
                f"entry {name!r} is {entry.size} bytes, over the size cap of "
                f"{self.limits.max_file_size} (raise it with --max-file-size)", where=where)
        assert entry.open is not None
        self._write(name, entry.open(), layer, where)
        written_here.add(name)

    def _write(self, name: str, src: IO[bytes], layer: Layer, where: str) -> None:
        size, sha = self.writer.write_stream(name, src, where=where, limit=self.limits.max_file_size)
        self._total += size
        if self._total > self.limits.max_total_size:
            raise UnsafeArchiveError(
                f"package files add up to more than {self.limits.max_total_size} bytes "
                "(raise the cap with --max-total-size)", where=where)
        self.result.captured[name] = Captured(name, "file", size, sha, layer.index)

    def _remember(self, entry: Entry, name: str, layer: Layer, where: str) -> None:
        if entry.kind != FILE or entry.open is None or entry.size > SMALL_FILE:
            return
        with entry.open() as fh:
            data = fh.read(SMALL_FILE)
        self.result.metadata[name] = (data.decode("utf-8", "replace"), layer.index)

    def _resolve_hardlinks(self, layer: Layer, pending: dict[str, list[str]], where: str) -> None:
        """Fetch hardlink targets that were hidden or out of scope by reading the layer again."""
        for entry in layer.entries():
            if entry.kind != FILE or not entry.name:
                continue
            name = clean_relpath(entry.name, where=where)
            links = pending.pop(name, None)
            if not links:
                continue
            if entry.size > self.limits.max_file_size:
                raise UnsafeArchiveError(f"hardlink target {name!r} is over the size cap", where=where)
            assert entry.open is not None
            first, *rest = links
            self._write(first, entry.open(), layer, where)
            for other in rest:
                src = self.writer.open_read(first)
                if src is not None:
                    with src:
                        self._write(other, src, layer, where)
            if not pending:
                break
        if pending:
            target, links = next(iter(pending.items()))
            raise UnsafeArchiveError(f"hardlink {links[0]!r} points to {target!r}, which is not in "
                                     "the same layer", where=where)


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
