"""Shared fixtures: real engine releases from PyPI and a real Docker engine.

Engine wheels are downloaded once into recon's cache (``$RECON_CACHE``,
default ``~/.cache/recon``) and every test shares the snapshots made from
them. Tests that need the Docker engine skip on a laptop without one, but
fail in CI (``CI=true``), where ``.ci/run`` starts the engine.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from recon.paths import cache_dir
from recon.snapshots.model import Snapshot
from recon.snapshots.take import take_snapshot

#: The releases tests use. Latest first; older ones for cross-release checks.
VLLM_LATEST = "0.33.0"
SGLANG_LATEST = "0.5.23"


def pytest_configure(config: pytest.Config) -> None:
    """The suite asks engine mode about four releases, several boards and model shapes, one
    warm server each; with the user default of 3 they would evict each other and start
    again (about 35 s a start). Six idle servers hold about 6 GB."""
    os.environ.setdefault("RECON_ENGINE_SERVERS", "6")
    # a piped step says "started ... done after N s" after 3 s; tests that read stderr whole
    # would see those lines on a slow machine (tests/test_first_hour.py sets its own value)
    os.environ.setdefault("RECON_PROGRESS_SECONDS", "3600")


#: marker -> the fixtures that make a test need it (anywhere in the test's fixture closure)
NEEDS = {
    # engine wheels from PyPI (cached after the first run); doc_runs runs the docs' commands
    # and the fixtures that build images, registries and offline caches from release wheels
    "wheels": {"pip_snapshot", "wheels_dir", "doc_runs", "images", "patched", "built", "pushed",
               "offline"},
    "docker": {"docker_client"},  # a Docker engine at $DOCKER_HOST
    "registry": {"registry"},  # a local registry (Debian's docker-registry)
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Markers from what a test uses, so that ``-m "not wheels and not docker"`` is the fast
    suite without anyone having to remember to mark a test."""
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        for marker, fixtures in NEEDS.items():
            if used & fixtures:
                item.add_marker(marker)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Warm engine servers the tests started do not outlive the test run."""
    from recon.engine import server

    server.stop_all()


def _key(spec: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", spec)


@pytest.fixture(scope="session")
def pip_snapshot() -> Callable[..., Snapshot]:
    """``pip_snapshot("vllm==0.33.0")`` -> a Snapshot of that release (made once, cached).

    Snapshots hold the package's non-binary files; they live in
    ``$RECON_CACHE/test-snapshots`` so reruns and other tests reuse them.
    """
    base = cache_dir() / "test-snapshots"

    def make(spec: str, **kwargs: object) -> Snapshot:
        name = _key(spec) + ("" if not kwargs else "-" + _key(repr(sorted(kwargs.items()))))
        dest = base / name
        if (dest / "manifest.json").is_file():
            return Snapshot.open(dest)
        return take_snapshot(f"pip:{spec}", name=name, out=base, force=True, **kwargs)  # type: ignore[arg-type]

    return make


@pytest.fixture(scope="session")
def vllm_latest(pip_snapshot: Callable[..., Snapshot]) -> Snapshot:
    return pip_snapshot(f"vllm=={VLLM_LATEST}")


@pytest.fixture(scope="session")
def sglang_latest(pip_snapshot: Callable[..., Snapshot]) -> Snapshot:
    return pip_snapshot(f"sglang=={SGLANG_LATEST}")


@pytest.fixture(scope="session")
def docker_client():  # noqa: ANN201 - docker.DockerClient
    """A client for the real Docker engine at $DOCKER_HOST (CI starts one)."""
    import docker

    try:
        client = docker.from_env(timeout=300)
        client.ping()
    except Exception as err:  # pragma: no cover - depends on the machine
        msg = f"no Docker engine at {os.environ.get('DOCKER_HOST', 'the default socket')}: {err}"
        if os.environ.get("CI"):
            pytest.fail("CI must provide a Docker engine (.ci/run starts one); " + msg)
        pytest.skip(msg)
    return client


@pytest.fixture(scope="session")
def wheels_dir() -> Path:
    from recon.acquire.sources.pip import wheels_dir

    return wheels_dir()
