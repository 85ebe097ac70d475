"""OCI / Docker v2 manifest logic shared by every source that reads manifests itself.

An OCI layout on disk (``oci:``, ``oci-archive:``, the OCI form of ``docker
save``) and a registry (``registry:``) hold the same JSON documents; only the
way a document is fetched by digest differs. The rules for walking an index
down to one image manifest (platform choice, attestation manifests skipped,
nested indexes) live here once, with the fetch passed in as ``load``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ReconError

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_SCHEMA1 = ("application/vnd.docker.distribution.manifest.v1+json",
                  "application/vnd.docker.distribution.manifest.v1+prettyjws")

INDEX_TYPES = {OCI_INDEX, DOCKER_LIST}
MANIFEST_TYPES = {OCI_MANIFEST, DOCKER_MANIFEST}

#: The platform recon picks from a multi-platform index when none is asked for.
DEFAULT_PLATFORM = "linux/amd64"


def platform_of(desc: dict[str, Any]) -> str:
    """``os/arch[/variant]`` of an index entry (``?`` for a missing part)."""
    p = desc.get("platform") or {}
    s = f"{p.get('os', '?')}/{p.get('architecture', '?')}"
    return f"{s}/{p['variant']}" if p.get("variant") else s


def is_index(doc: dict[str, Any], media_type: str | None = None) -> bool:
    """True for an OCI index or a Docker manifest list (media type, or shape when untyped)."""
    mt = media_type or doc.get("mediaType")
    return mt in INDEX_TYPES or (mt not in MANIFEST_TYPES and "manifests" in doc and "layers" not in doc)


def pick_manifest(index: dict[str, Any], platform: str | None, where: str,
                  load: Callable[[str], dict[str, Any]]) -> tuple[dict[str, Any], str | None]:
    """Follow an index (possibly nested) down to one image manifest descriptor.

    ``load(digest)`` returns a nested index document. Returns the chosen
    descriptor and its platform (``None`` when the index does not say).
    """
    manifests = [m for m in index.get("manifests") or []
                 if (m.get("annotations") or {}).get("vnd.docker.reference.type") != "attestation-manifest"]
    if not manifests:
        raise ReconError("the OCI index lists no manifests", where=where)
    images = [m for m in manifests if m.get("platform")]
    want = platform or DEFAULT_PLATFORM
    if len(manifests) == 1 and not platform:
        chosen = manifests[0]
    elif images:
        match = [m for m in images if platform_of(m) == want or platform_of(m).startswith(want + "/")]
        if not match:
            choices = ", ".join(sorted({platform_of(m) for m in images}))
            raise ReconError(f"platform {want} is not in this image; choose one with --platform: {choices}",
                             where=where)
        chosen = match[0]
    else:
        chosen = manifests[0]
    if chosen.get("mediaType") in INDEX_TYPES:
        return pick_manifest(load(chosen["digest"]), platform, where, load)
    return chosen, platform_of(chosen) if chosen.get("platform") else None
