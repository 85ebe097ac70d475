"""A release's environment resolved as of the release (recon.engine.asof).

The index is a real HTTP server on this machine answering PEP 691 JSON pages,
with upload times written here; each expected version follows from those
pages by reading them, not from recon. The closure walk is checked on real
``.dist-info`` folders, and the wheel-date fallback on a real wheel file.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from recon.engine import env
from recon.engine.asof import AsOf, IndexTimes, current_until, release_day, released
from recon.engine.config import library_failure

UTC = dt.timezone.utc
CUTOFF = dt.datetime(2025, 9, 13, 23, 0, tzinfo=UTC)

#: project -> [(filename, upload time, yanked, requires-python)]
PAGES: dict[str, list[tuple[str, str, bool, str | None]]] = {
    "lib": [("lib-1.0-py3-none-any.whl", "2025-01-01T00:00:00Z", False, None),
            ("lib-1.1-py3-none-any.whl", "2025-08-01T00:00:00Z", False, None),
            ("lib-1.2-py3-none-any.whl", "2025-09-10T00:00:00Z", True, None),  # yanked
            ("lib-1.3.tar.gz", "2025-09-11T00:00:00Z", False, None),  # no wheel
            ("lib-1.4-py3-none-any.whl", "2025-09-12T00:00:00Z", False, ">=3.99"),
            ("lib-1.5rc1-py3-none-any.whl", "2025-09-12T12:00:00Z", False, None),
            ("lib-2.0-py3-none-any.whl", "2025-10-01T00:00:00Z", False, None)],  # after
    "native": [("native-3.0-cp27-cp27mu-manylinux1_x86_64.whl", "2025-05-01T00:00:00Z",
                False, None)],
    "engine": [("engine-0.9-py3-none-any.whl", "2025-09-13T23:00:00Z", False, None),
               ("engine-0.9.tar.gz", "2025-09-13T23:05:00Z", False, None),
               ("engine-0.8.2-py3-none-any.whl", "2025-09-20T00:00:00Z", False, None),  # a fix
               ("engine-0.10rc1-py3-none-any.whl", "2025-10-01T00:00:00Z", False, None),
               ("engine-0.10.tar.gz", "2025-10-20T00:00:00Z", False, None),
               ("engine-0.10-py3-none-any.whl", "2025-10-20T00:05:00Z", False, None)],
}


@pytest.fixture
def index() -> Iterator[tuple[str, list[str]]]:
    """A PEP 691 index on 127.0.0.1 (its URL, and the paths it was asked for)."""
    asked: list[str] = []

    class Pages(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server hook
            asked.append(self.path)
            name = self.path.strip("/").split("/")[-1]
            if name not in PAGES or "vnd.pypi.simple.v1+json" not in self.headers.get("Accept", ""):
                self.send_error(404)
                return
            files = [{"filename": f, "upload-time": t, "yanked": y, "requires-python": rp,
                      "url": f"../../files/{f}", "hashes": {}} for f, t, y, rp in PAGES[name]]
            body = json.dumps({"meta": {"api-version": "1.1"}, "name": name,
                               "files": files}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/simple", asked
    finally:
        server.shutdown()
        server.server_close()


def test_the_newest_wheel_uploaded_before_the_release_is_chosen(index: tuple[str, list[str]],
                                                                  tmp_path: Path) -> None:
    """1.2 is yanked, 1.3 has no wheel, 1.4 needs another Python, 1.5rc1 is a pre-release
    and 2.0 came after: 1.1 is what the release's users got."""
    url, _ = index
    asof = AsOf(IndexTimes(tmp_path, url), CUTOFF, "test")
    assert asof.choose("lib", SpecifierSet(">=1.0")) == "1.1"
    assert asof.choose("lib", SpecifierSet("<1.1")) == "1.0"
    # the first specifier met by any version wins; an impossible one is recorded
    assert asof.choose("lib", SpecifierSet(">=1.0,<1.0"), SpecifierSet(">=1.0")) == "1.1"
    assert asof.choose("lib", SpecifierSet(">=2.0")) is None
    assert "no version meeting '>=2.0'" in asof.undated["lib"]
    assert asof.choose("native", SpecifierSet()) is None  # only a wheel for another interpreter
    assert asof.choose("unknown", SpecifierSet()) is None
    assert "404" in asof.undated["unknown"] or "Not Found" in asof.undated["unknown"]
    # a name that is not a project's asks the index nothing and names no file
    assert asof.choose("../../etc/x", SpecifierSet()) is None
    assert not list(tmp_path.glob("**/x.json")) and not (tmp_path.parent / "etc").exists()


def test_pages_are_cached_until_a_later_date_is_needed(index: tuple[str, list[str]],
                                                       tmp_path: Path) -> None:
    url, asked = index
    AsOf(IndexTimes(tmp_path, url), CUTOFF, "test").choose("lib", SpecifierSet())
    AsOf(IndexTimes(tmp_path, url), CUTOFF, "test").choose("lib", SpecifierSet())
    assert asked == ["/simple/lib/"]  # the second read came from the cache
    later = dt.datetime.now(UTC) + dt.timedelta(days=1)  # read before this date could pass
    assert AsOf(IndexTimes(tmp_path, url), later, "test").choose("lib", SpecifierSet()) == "2.0"
    assert asked == ["/simple/lib/", "/simple/lib/"]
    # another index's page is not this one's
    other = AsOf(IndexTimes(tmp_path, "http://127.0.0.1:9/simple"), CUTOFF, "test")
    assert other.choose("lib", SpecifierSet()) is None


def test_a_release_is_dated_by_its_first_upload_else_by_its_wheel(index: tuple[str, list[str]],
                                                                 tmp_path: Path) -> None:
    url, _ = index
    when, how = released(IndexTimes(tmp_path / "a", url), "engine", "0.9", None)
    assert when == dt.datetime(2025, 9, 13, 23, 0, tzinfo=UTC)
    assert how == f"its upload to {url}"
    wheel = tmp_path / "engine-0.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(zipfile.ZipInfo("engine/__init__.py", (2025, 9, 13, 17, 17, 36)), "")
        z.writestr(zipfile.ZipInfo("engine-0.9.dist-info/METADATA", (2025, 9, 13, 16, 57, 14)), "")
    when, how = released(IndexTimes(tmp_path / "b", "http://127.0.0.1:9/simple"), "engine",
                         "0.9", wheel)
    assert when == dt.datetime(2025, 9, 13, 17, 17, 36, tzinfo=UTC)
    assert how.startswith("its wheel's build time (http://127.0.0.1:9/simple/engine/")
    with zipfile.ZipFile(wheel, "w") as z:  # a build that zeroed its timestamps dates nothing
        z.writestr(zipfile.ZipInfo("engine/__init__.py", (1980, 1, 1, 0, 0, 0)), "")
    assert released(IndexTimes(tmp_path / "c", "http://127.0.0.1:9/simple"), "engine", "0.9",
                    wheel)[0] is None


def _dist(site: Path, name: str, version: str, requires: list[str]) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    (info / "METADATA").write_text("\n".join(lines + [f"Requires-Dist: {r}" for r in requires]) + "\n")


def test_the_walk_follows_the_releases_closure_only(index: tuple[str, list[str]],
                                                     tmp_path: Path) -> None:
    """Only what the release needs is resolved: a package the machine happens to have (here
    ``other``, requiring ``stray``) is not the release's concern, and an installed version
    other than the dated one is replaced by it."""
    url, _ = index
    site = tmp_path / "site"
    _dist(site, "app", "1.0", ["lib>=1.0", "mid"])
    _dist(site, "mid", "1.0", ["lib<3"])
    _dist(site, "lib", "2.0", [])  # newer than the release: the dated 1.1 is wanted
    _dist(site, "other", "1.0", ["stray"])
    asof = AsOf(IndexTimes(tmp_path / "pages", url), CUTOFF, "test")
    missing = env._missing([str(site)], [Requirement("app")], {}, asof)
    assert [str(r) for r in missing] == ["lib==1.1"]
    plain = env._missing([str(site)], [Requirement("app")], {})  # undated: 2.0 meets >=1.0
    assert plain == []


def test_a_release_is_current_until_a_later_release_replaces_it(index: tuple[str, list[str]],
                                                                tmp_path: Path) -> None:
    """Its users install it, and the libraries beside it, until the next release comes out:
    not a fix of an older line, not a release candidate; the newest is current today."""
    url, asked = index
    times = IndexTimes(tmp_path, url)
    until, why, key = current_until(times, "engine", "0.9", None)
    assert until == dt.datetime(2025, 10, 20, 0, 5, tzinfo=UTC)  # 0.10's first wheel
    assert why == f"when engine 0.10 replaced it on {url}; it came out 2025-09-13"
    assert key == until.isoformat()
    before = dt.datetime.now(UTC)
    until, why, key = current_until(times, "engine", "0.10", None)
    # the newest release: as of now, as a fresh install resolves it, under one key until replaced
    assert until is not None and before <= until <= dt.datetime.now(UTC) and key == "current"
    assert why.startswith(f"engine 0.10 is its newest release on {url}")
    assert asked == ["/simple/engine/"]  # the page this process read is not read again
    # a later process reads a cached page that names no later release once more
    assert current_until(IndexTimes(tmp_path, url), "engine", "0.10", None)[2] == "current"
    assert asked == ["/simple/engine/"] * 2
    # an index that cannot be read: the wheel's build time, as before
    wheel = tmp_path / "engine-0.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(zipfile.ZipInfo("engine/__init__.py", (2025, 9, 13, 17, 17, 36)), "")
    until, why, key = current_until(IndexTimes(tmp_path / "x", "http://127.0.0.1:9/simple"),
                                    "engine", "0.9", wheel)
    assert until == dt.datetime(2025, 9, 13, 17, 17, 36, tzinfo=UTC)
    assert why.startswith("its wheel's build time") and key == until.isoformat()
    until, why, key = current_until(IndexTimes(tmp_path / "y", "http://127.0.0.1:9/simple"),
                                    "engine", "0.9", None)
    assert until is None and key == "newest" and why.startswith("the release could not be dated")


def test_the_release_day_is_the_fallback_date(index: tuple[str, list[str]],
                                              tmp_path: Path) -> None:
    """The release's own day (its first upload) is what its container image was built with:
    the date of the fallback environment, keyed apart from the days it was the newest."""
    url, _ = index
    times = IndexTimes(tmp_path, url)
    day, why, key = release_day(times, "engine", "0.9", None)
    assert day == dt.datetime(2025, 9, 13, 23, 0, tzinfo=UTC)
    assert why.startswith(f"its own release day (its upload to {url})")
    assert key == day.isoformat() != current_until(times, "engine", "0.9", None)[2]
    assert release_day(IndexTimes(tmp_path / "y", "http://127.0.0.1:9/simple"),
                       "engine", "0.9", None)[2] == "newest"


def test_only_a_librarys_own_failure_asks_the_release_days_libraries(tmp_path: Path) -> None:
    """A failure raised inside a library of the environment (not torch, the same everywhere;
    not the release's own code; not the user's command) is the one an older library may not
    have: that and nothing else is asked again with the release day's libraries."""
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    renv = env.ReleaseEnv(tmp_path, tmp_path / "bin" / "python", site, {}, 0.0)

    def failed(*files: str) -> dict[str, object]:
        trace = "".join(f'  File "{f}", line 3, in f\n' for f in files)
        return {"ok": False, "errors": [{"error": "E", "traceback": trace}]}

    release = "/tmp/run/src/vllm/config/model.py"
    assert library_failure(failed(release, f"{site}/transformers/configuration_utils.py"),
                            renv) == "transformers"
    assert library_failure(failed(release, f"{site}/torch/nn/modules/module.py"), renv) is None
    assert library_failure(failed(f"{site}/transformers/x.py", release), renv) is None
    assert library_failure({"ok": False, "usage_error": {"message": "bad"}}, renv) is None
    assert library_failure({"ok": True}, renv) is None
