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

from ...errors import ReconError
from ..blobcache import check_digest

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


#: More layers than this is no image an engine can run (overlayfs stacks 128 at most).
MAX_LAYERS = 1000
#: Nested indexes followed at most this deep (real images nest one level; a cycle is caught sooner).
MAX_INDEX_DEPTH = 8


def platform_of(desc: dict[str, Any]) -> str:
    """``os/arch[/variant]`` of an index entry (``?`` for a missing part)."""
    p = desc.get("platform")
    p = p if isinstance(p, dict) else {}
    s = f"{p.get('os', '?')}/{p.get('architecture', '?')}"
    return f"{s}/{p['variant']}" if p.get("variant") else s


def media_type_of(doc: dict[str, Any]) -> str:
    """A document's or descriptor's ``mediaType``, or "" when absent or not a string."""
    mt = doc.get("mediaType")
    return mt if isinstance(mt, str) else ""


def is_index(doc: dict[str, Any], media_type: str | None = None) -> bool:
    """True for an OCI index or a Docker manifest list (media type, or shape when untyped)."""
    mt = media_type or media_type_of(doc)
    return mt in INDEX_TYPES or (mt not in MANIFEST_TYPES and "manifests" in doc and "layers" not in doc)


def descriptor(desc: Any, what: str, *, where: str | None = None) -> tuple[str, int | None]:
    """(digest, size) of a descriptor from an image, both checked; one line if it is malformed.

    Why: a descriptor is the only thing a blob path or a range request is
    built from, so the digest must be a registered algorithm with the right
    hex length before it goes near a path, and a size that is not a
    non-negative integer must not reach a comparison or an HTTP header.
    """
    if not isinstance(desc, dict):
        raise ReconError(f"{what} descriptor is not a JSON object", where=where)
    digest = desc.get("digest")
    if digest is None:
        raise ReconError(f"{what} descriptor has no digest", where=where)
    check_digest(digest, where=where)
    size = desc.get("size")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
        raise ReconError(f"{what} {digest} has a bad size {size!r}", where=where)
    return digest, size


def _listed(index: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """An index's image entries, attestations left out; every one checked for shape."""
    raw = index.get("manifests")
    if not isinstance(raw, list):
        raise ReconError("the OCI index has no manifests list", where=where)
    for i, m in enumerate(raw):
        descriptor(m, f"index entry {i}", where=where)
        for key in ("annotations", "platform"):
            if m.get(key) is not None and not isinstance(m[key], dict):
                raise ReconError(f"index entry {i}: {key} is not a JSON object", where=where)
    return [m for m in raw
            if (m.get("annotations") or {}).get("vnd.docker.reference.type") != "attestation-manifest"]


def check_platform(asked: str | None, cfg_os: str, cfg_arch: str, where: str) -> None:
    """Refuse an image whose own config names another platform than ``--platform`` asked for.

    An index entry without a ``platform`` (one-image layouts, ``docker save``)
    says nothing, so the image config's ``os``/``architecture`` decide; an image
    that names neither is taken, as there is nothing to compare.
    """
    if not asked or not cfg_os:
        return
    have = f"{cfg_os}/{cfg_arch}" if cfg_arch else cfg_os
    if have != asked and not asked.startswith(have + "/") and not have.startswith(asked + "/"):
        raise ReconError(f"platform {asked} was asked for, but this image is {have} "
                         "(its only image; drop --platform to take it)", where=where)


def pick_manifest(index: dict[str, Any], platform: str | None, where: str,
                  load: Callable[[dict[str, Any]], dict[str, Any]], *,
                  _seen: frozenset[str] = frozenset()) -> tuple[dict[str, Any], str | None]:
    """Follow an index (possibly nested) down to one image manifest descriptor.

    ``load(descriptor)`` returns a nested index document (its digest
    checked). Returns the chosen descriptor and its platform (``None`` when
    the index does not say). A cycle of indexes, or nesting deeper than
    ``MAX_INDEX_DEPTH``, is one error line instead of a recursion crash.
    """
    manifests = _listed(index, where)
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
    if media_type_of(chosen) in INDEX_TYPES:
        digest = str(chosen["digest"])
        if digest in _seen:
            raise ReconError(f"the OCI index {digest} contains itself (a cycle of indexes)", where=where)
        if len(_seen) >= MAX_INDEX_DEPTH:
            raise ReconError(f"OCI indexes nested more than {MAX_INDEX_DEPTH} deep", where=where)
        return pick_manifest(load(chosen), platform, where, load, _seen=_seen | {digest})
    return chosen, platform_of(chosen) if chosen.get("platform") else None


def diff_ids_of(config: dict[str, Any], count: int, where: str) -> list[str]:
    """The config's ``rootfs.diff_ids``, validated, one per layer (the engine refuses otherwise)."""
    rootfs = config.get("rootfs")
    raw = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
    if not isinstance(raw, list):
        raise ReconError("image config has no rootfs.diff_ids list", where=where)
    if len(raw) != count:
        raise ReconError(f"image config lists {len(raw)} diff_ids for {count} layers", where=where)
    if count > MAX_LAYERS:
        raise ReconError(f"the image has {count} layers (over {MAX_LAYERS})", where=where)
    return [check_digest(d, where=where) for d in raw]
