"""SOURCE references (``scheme:rest``) and the function that opens any of them.

Every scheme returns a :class:`recon.acquire.sources.base.Image`, the one layer
abstraction the rest of recon works on.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ...errors import ReconError
from .base import Image, ImageConfig, Layer
from .entry import Entry

SCHEMES = ("docker", "docker-archive", "oci", "oci-archive", "registry", "wheel", "pip", "dir")


def split_ref(ref: str) -> tuple[str, str]:
    scheme, sep, rest = ref.partition(":")
    if not sep or scheme not in SCHEMES or not rest:
        raise ReconError(f"unknown SOURCE {ref!r}: use one of "
                         + ", ".join(f"{s}:..." for s in SCHEMES))
    return scheme, rest


def open_source(ref: str, *, packages: list[str], platform: str | None = None,
                max_layer_size: int | None = None, insecure: bool | None = None,
                docker_read: str = "site", engine_view: bool = False, python: str | None = None,
                progress: Callable[[Layer, str], None] | None = None,
                max_ratio: float | None = None) -> Image:
    """Open ``ref`` without starting anything; the caller must ``close()`` the image.

    ``insecure`` (``registry:`` only) allows plain HTTP to a loopback registry;
    ``None`` defers to ``RECON_REGISTRY_INSECURE``. ``docker_read``
    (``docker:`` only, see :func:`recon.acquire.sources.daemon.open_daemon`) is
    ``"site"`` (the layer folders in place where the engine's storage is
    readable here, else the engine's merged view with site folders read
    whole), ``"package"`` (in place, else package folders only) or
    ``"layers"`` (through ``docker save``, so each file's layer is known;
    ``progress`` then follows the export as a stand-in layer of index -1).
    ``engine_view`` (or ``RECON_DOCKER_READ=engine``) reads the merged view
    even where the storage is readable.
    ``python`` (``docker:`` only) is ``--python``: its prefix is searched too.
    ``max_ratio`` caps a compressed layer's (or wheel's) uncompressed size at
    that many times its compressed size, above a 1 GiB floor; ``None`` is
    ``RECON_MAX_RATIO`` or 100, and 0 turns the ratio cap off. ``max_layer_size``
    ``None`` is 64 GiB (``DEFAULT_MAX_LAYER_SIZE``).
    """
    scheme, rest = split_ref(ref)
    engine_view = engine_view or os.environ.get("RECON_DOCKER_READ", "") == "engine"
    if max_layer_size is None:
        from .base import DEFAULT_MAX_LAYER_SIZE

        max_layer_size = DEFAULT_MAX_LAYER_SIZE
    if (docker_read != "site" or engine_view) and scheme != "docker":
        flag = {"layers": "--layers", "package": "--package-only"}.get(docker_read, "--engine-view")
        raise ReconError(f"{flag} is for docker: sources ({scheme}: reads its layers directly)")
    if scheme == "registry":
        from .registry import open_registry

        return open_registry(rest, platform=platform, max_layer_size=max_layer_size,
                             insecure=insecure, max_ratio=max_ratio)
    if scheme == "docker":
        from .daemon import open_daemon

        return open_daemon(rest, packages=packages, platform=platform, read=docker_read, engine_view=engine_view,
                           max_layer_size=max_layer_size, python=python, progress=progress)
    if scheme == "docker-archive":
        from .archive import open_docker_archive

        return open_docker_archive(rest, platform=platform, max_layer_size=max_layer_size,
                                   max_ratio=max_ratio)
    if scheme in ("oci", "oci-archive"):
        from .archive import open_oci

        return open_oci(rest, archive=scheme == "oci-archive", platform=platform,
                        max_layer_size=max_layer_size, max_ratio=max_ratio)
    if scheme == "wheel":
        from .wheel import open_wheel

        return open_wheel(rest, max_ratio=max_ratio)
    if scheme == "pip":
        from .pip import open_pip

        return open_pip(rest)
    from .folder import open_folder

    return open_folder(rest)


__all__ = ["SCHEMES", "Entry", "Image", "ImageConfig", "Layer", "open_source", "split_ref"]
