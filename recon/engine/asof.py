"""A release's dependencies as they stood while it was the newest release.

A release's ``Requires-Dist`` mostly names lower bounds (vLLM 0.10.2:
``transformers >= 4.56.0``). Resolved today, an old release gets today's
libraries: transformers 5.x for a release tested on 4.56, whose config classes
then reject the release's own model configurations (gpt-oss's ``rope_theta``,
Gemma-3's ``rope_scaling``). Resolved as of the release's own upload, it misses
what its users installed beside it in the weeks after: 0.11.0 came out a day
after transformers 4.57.0 (since yanked), and its users served Qwen3-VL, which
needs 4.57, with it. So each requirement is resolved to the newest version on the
index **uploaded before a later release replaced this one** (the newest release:
the newest of each) that has a wheel for this interpreter.

The dates come from the index's own JSON pages (PEP 691, with PEP 700 upload
times): one page per project, kept under recon's cache and re-read only when a
later date is needed (the release's own page: once a process, when the cached one
names no later release). A release's date is its first file's upload; where the
index cannot be read it is the newest entry of the release's wheel (its build
time, hours before the upload), and no later release is known. A requirement the
index cannot date is resolved as before, to the newest version, and that is
recorded and printed.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import re
import ssl
import sys
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.tags import sys_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

#: PEP 691's JSON form of the simple index (with PEP 700's ``upload-time``)
_JSON = "application/vnd.pypi.simple.v1+json"
_TIMEOUT = 30.0
#: a project page is at most this large (the biggest on PyPI are a few MB)
_PAGE_LIMIT = 64 << 20
#: a normalized project name (PEP 503), the only thing a page's URL and cache file are named by
_PROJECT = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")


def index_url() -> str:
    """The index whose upload times are read: pip's own index setting, else PyPI."""
    return (os.environ.get("RECON_INDEX_URL") or os.environ.get("PIP_INDEX_URL")
            or "https://pypi.org/simple").rstrip("/")


def _when(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(dt.timezone.utc)


@dataclass
class IndexTimes:
    """Projects' files and their upload times, from the index, cached per project."""

    folder: Path
    index: str = field(default_factory=index_url)
    errors: dict[str, str] = field(default_factory=dict)
    #: pages read in this process, with the time they were fetched (a build reads each often)
    read: dict[str, tuple[dt.datetime, list[dict[str, object]]]] = field(default_factory=dict)
    #: pages fetched from the index by this process (not from the cache)
    fetched: set[str] = field(default_factory=set)

    def _path(self, name: str) -> Path:
        """The page's cache file; a name that is not a project name never names a file."""
        canonical = canonicalize_name(name)
        if not _PROJECT.fullmatch(canonical):
            raise ValueError(f"not a project name: {name!r}")
        return self.folder / f"{canonical}.json"

    def _cached(self, name: str, needed: dt.datetime | None) -> list[dict[str, object]] | None:
        """The cached page, when it was read after ``needed`` (None: whenever it was read)."""
        name = canonicalize_name(name)
        if name not in self.read:
            try:
                page = json.loads(self._path(name).read_text())
                if page.get("index") != self.index:
                    return None
                self.read[name] = (_when(str(page["fetched"])), list(page["files"]))
            except (OSError, ValueError, KeyError, TypeError):
                return None
        fetched, files = self.read[name]
        if needed is not None and fetched < needed:
            return None  # read before files of the date asked for could exist
        return files

    def _fetch(self, name: str) -> list[dict[str, object]] | None:
        name = canonicalize_name(name)
        url = f"{self.index}/{name}/"
        if not _PROJECT.fullmatch(name):
            self.errors[name] = f"not a project name: {name!r}"
            return None
        request = urllib.request.Request(url, headers={"Accept": _JSON})
        context = ssl.create_default_context(cafile=os.environ.get("PIP_CERT") or None)
        try:
            with urllib.request.urlopen(request, timeout=_TIMEOUT, context=context) as res:  # noqa: S310
                kind = res.headers.get("Content-Type", "")
                body = res.read(_PAGE_LIMIT + 1)
        except (urllib.error.URLError, OSError, ValueError) as err:
            self.errors[name] = f"{url}: {getattr(err, 'reason', err)}"
            return None
        if _JSON not in kind or len(body) > _PAGE_LIMIT:
            self.errors[name] = f"{url} gives no upload times (answered {kind or 'no type'})"
            return None
        try:
            files = [{"filename": str(f["filename"]), "upload-time": f.get("upload-time"),
                      "yanked": bool(f.get("yanked")), "requires-python": f.get("requires-python")}
                     for f in json.loads(body)["files"]]
        except (ValueError, KeyError, TypeError) as err:
            self.errors[name] = f"{url}: not an index page ({err})"
            return None
        self.folder.mkdir(parents=True, exist_ok=True)
        now = dt.datetime.now(dt.timezone.utc)
        page = {"index": self.index, "fetched": now.isoformat(), "files": files}
        self.read[name] = (now, files)
        self.fetched.add(name)
        tmp = self._path(name).with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(page))
        tmp.replace(self._path(name))
        return files

    def files(self, name: str, needed: dt.datetime | None) -> list[dict[str, object]] | None:
        """The project's files (None: the index could not be read)."""
        cached = self._cached(name, needed)
        return cached if cached is not None else self._fetch(name)

    def error(self, name: str) -> str:
        return self.errors.get(canonicalize_name(name), "the index was not read")

    def prefetch(self, names: Iterable[str], needed: dt.datetime) -> None:
        """Read the pages of ``names`` not cached yet, several at a time."""
        todo = sorted({canonicalize_name(n) for n in names} - set(self.errors))
        todo = [n for n in todo if self._cached(n, needed) is None]
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(self._fetch, todo))


def released(times: IndexTimes, package: str, version: str, wheel: Path | None,
             ) -> tuple[dt.datetime | None, str]:
    """When ``package`` ``version`` came out, and how that is known.

    Upload times never change, so a cached page that lists the release answers; a
    page read before the release is read again.
    """
    def uploads(files: list[dict[str, object]] | None) -> list[dt.datetime]:
        return [_when(str(f["upload-time"])) for f in files or [] if f.get("upload-time")
                and _file_version(str(f["filename"])) == Version(version)]

    found = uploads(times.files(package, None)) or uploads(times._fetch(package))
    if found:
        return min(found), f"its upload to {times.index}"
    if wheel is not None and wheel.is_file():
        with zipfile.ZipFile(wheel) as z:
            stamps = [i.date_time for i in z.infolist()]
        if stamps and max(stamps)[0] > 1980:  # 1980: a build that zeroed its timestamps
            built = dt.datetime(*max(stamps), tzinfo=dt.timezone.utc)
            why = times.errors.get(canonicalize_name(package), f"the index lists no {version}")
            return built, f"its wheel's build time ({why})"
    return None, times.errors.get(canonicalize_name(package),
                                  f"the index lists no file of {package} {version}")


def replaced(times: IndexTimes, package: str, version: str, since: dt.datetime,
             ) -> tuple[dt.datetime | None, str]:
    """When a later final release of ``package`` first came out after ``since`` (None: none
    has yet), and which. A cached page that names none is read again, once a process."""
    def later(files: list[dict[str, object]] | None) -> tuple[dt.datetime, Version] | None:
        firsts: dict[Version, dt.datetime] = {}
        for f in files or []:
            v = _file_version(str(f["filename"]))
            if v is None or not f.get("upload-time") or v.is_prerelease or v <= Version(version):
                continue
            stamp = _when(str(f["upload-time"]))
            firsts[v] = min(stamp, firsts.get(v, stamp))
        after = [(stamp, v) for v, stamp in firsts.items() if stamp > since]
        return min(after) if after else None

    found = later(times.files(package, None))
    if found is None and canonicalize_name(package) not in times.fetched:
        found = later(times._fetch(package) or [])
    if found is None:
        return None, f"{package} {version} is its newest release on {times.index}"
    return found[0], f"when {package} {found[1]} replaced it on {times.index}"


def current_until(times: IndexTimes, package: str, version: str, wheel: Path | None,
                  ) -> tuple[dt.datetime | None, str, str]:
    """The date the release's requirements are resolved as of, why, and the date's key.

    The day a later release replaced it. A release not replaced yet: now, as a fresh
    install today resolves it (pinned like the others, so a library beside recon that
    meets a loose lower bound is not taken for the one a user gets), keyed "current"
    so that its environment is built once until a later release replaces it. A
    release the index cannot date: its wheel's build time; else None ("newest").
    """
    released_at, how = released(times, package, version, wheel)
    if released_at is None:
        return None, f"the release could not be dated: {how}", "newest"
    if not how.startswith("its upload"):
        return released_at, how, released_at.isoformat()
    until, why = replaced(times, package, version, released_at)
    if until is None:
        return (dt.datetime.now(dt.timezone.utc), f"{why}; it came out {released_at:%Y-%m-%d}",
                "current")
    return until, f"{why}; it came out {released_at:%Y-%m-%d}", until.isoformat()


def release_day(times: IndexTimes, package: str, version: str, wheel: Path | None,
                ) -> tuple[dt.datetime | None, str, str]:
    """The release's own day, why, and its key: the libraries its container image was built
    with (an image is built when the release is made). The fallback of :func:`current_until`,
    for a model that a later library broke for this release (a user's engine that ran had
    libraries that worked)."""
    released_at, how = released(times, package, version, wheel)
    if released_at is None:
        return None, f"the release could not be dated: {how}", "newest"
    return (released_at, f"its own release day ({how}), as its container image has them",
            released_at.isoformat())


def _file_version(filename: str) -> Version | None:
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
    except (InvalidWheelFilename, InvalidVersion):
        return None
    return None


@dataclass
class AsOf:
    """Chooses each requirement's version as of one date."""

    times: IndexTimes
    cutoff: dt.datetime | None
    source: str
    #: what the environment's key holds for the date ("current": the newest release's)
    key: str = "newest"
    #: project -> why it was resolved to today's newest instead
    undated: dict[str, str] = field(default_factory=dict)
    #: project -> its versions with a wheel for this interpreter by the cutoff
    dated: dict[str, set[Version]] = field(default_factory=dict)

    def prefetch(self, names: Iterable[str]) -> None:
        if self.cutoff is not None:
            self.times.prefetch(names, self.cutoff)

    def choose(self, name: str, *specs: SpecifierSet) -> str | None:
        """The newest version meeting the first of ``specs`` that any meets, with a wheel for
        this interpreter uploaded by the cutoff; None when there is none (then the newest is
        installed, and that is recorded)."""
        if self.cutoff is None:
            return None
        versions = self._versions(name, self.cutoff)
        if versions is None:
            self.undated[canonicalize_name(name)] = self.times.error(name)
            return None
        for spec in specs:
            best = max(spec.filter(versions), default=None)
            if best is not None:
                return str(best)
        self.undated[canonicalize_name(name)] = (
            f"no version meeting '{(str(specs[0]) if specs else '') or 'any'}' had a wheel for this "
            f"interpreter on the index by {self.cutoff:%Y-%m-%d}")
        return None


    def _versions(self, name: str, cutoff: dt.datetime) -> set[Version] | None:
        key = canonicalize_name(name)
        if key not in self.dated:
            files = self.times.files(name, cutoff)
            if files is None:
                return None
            self.dated[key] = _dated(files, cutoff)
        return self.dated[key]


def _dated(files: list[dict[str, object]], cutoff: dt.datetime) -> set[Version]:
    """Versions with a wheel for this interpreter, not yanked, uploaded by ``cutoff``."""
    ours = _our_tags()
    python = Version(".".join(map(str, sys.version_info[:3])))
    versions = set()
    for f in files:
        stamp, filename = f.get("upload-time"), str(f["filename"])
        if f.get("yanked") or not stamp or _when(str(stamp)) > cutoff:
            continue
        if not _fits(filename, ours) or not _python_ok(f.get("requires-python"), python):
            continue
        v = _file_version(filename)
        if v is not None:
            versions.add(v)
    return versions


@functools.lru_cache(maxsize=1)
def _our_tags() -> frozenset[str]:
    return frozenset(str(t) for t in sys_tags())


def _fits(filename: str, ours: frozenset[str]) -> bool:
    try:
        tags = parse_wheel_filename(filename)[3] if filename.endswith(".whl") else None
    except (InvalidWheelFilename, InvalidVersion):
        return False
    return bool(tags) and any(str(t) in ours for t in tags or ())


def _python_ok(requires: object, python: Version) -> bool:
    if not requires:
        return True
    try:
        return SpecifierSet(str(requires)).contains(python, prereleases=True)
    except InvalidSpecifier:
        return True  # an unreadable marker: pip ignores it too
