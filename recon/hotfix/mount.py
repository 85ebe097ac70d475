"""Where the patched file goes in the image, and the lines that mount, check and remove it.

The path comes from the snapshot's manifest: the folder the image's Python
imports the package from (``package.real_path``, the real folder when the
import root is a link) and the interpreter recon found on the image's
``PATH`` (``python.executable``). A snapshot of a wheel, a pip release or a
folder does not know where an image installs the package: the lines then
carry ``SITE`` (``--site`` gives it), and ``verify_hotfix.py --where`` run in
the image prints it.

What is true about stale bytecode (checked by tests/test_hotfix.py, in a
container): pip writes *timestamp* ``.pyc`` files, whose header records the
source's mtime (whole seconds) and size; the import system compares both with
the file it finds and compiles from source when either differs, so a
bind-mounted file (the host file's mtime and size) makes the image's stale
``.pyc`` of the original unused. ``PYTHONDONTWRITEBYTECODE`` only stops
Python from *writing* a new ``.pyc``; it never stops it from reading one. An
*unchecked* hash-based ``.pyc`` (PEP 552; ``compileall --invalidation-mode
unchecked-hash``) is never compared with its source: with one of those the
mount has no effect, which ``verify_hotfix.py`` reports (exit 2), and a
tmpfs over that ``__pycache__`` folder is the remedy.
"""

from __future__ import annotations

import posixpath
from typing import Any

from ..paste import check, here, quote, yaml_str
from ..snapshots.model import Snapshot

VERIFY = "verify_hotfix.py"
SITE = "SITE"
_SITELESS = frozenset({"pip", "wheel", "dir"})


def in_image(snap: Snapshot, rel: str, site: str | None) -> tuple[str, bool]:
    """(absolute path of ``rel`` inside the image, whether the manifest knew it)."""
    if site is not None:
        return posixpath.join("/" + site.strip("/"), rel), True
    package = snap.manifest.package
    scheme = snap.manifest.source.get("parent_scheme") or snap.manifest.source.get("scheme")
    real = package.real_path or package.import_root
    if scheme in _SITELESS or not real:
        return posixpath.join(SITE, rel), False
    inside = rel.split("/", 1)[1] if "/" in rel else ""
    return posixpath.join(real, inside) if inside else real, True


def interpreter(snap: Snapshot, python: str | None) -> str:
    """The image's Python (the manifest's), else ``python3`` on the image's PATH."""
    return python or snap.manifest.python.executable or "python3"


def verify_args(module: str, sha256: str, pieces: dict[str, int]) -> list[str]:
    """The arguments of ``verify_hotfix.py`` for this hotfix (without ``--import``)."""
    out = ["--module", module, "--sha256", sha256]
    for name, line in pieces.items():
        out += ["--piece", f"{name}={line}"]
    return out


def mount_plan(snap: Snapshot, *, rel: str, module: str, sha256: str, size_changed: bool,
               pieces: dict[str, int], folder: str, site: str | None,
               python: str | None) -> dict[str, Any]:
    """Every line the README shows, as data (``hotfix.json``'s ``mount``).

    Every value from outside (the image's folders and Python, the module, piece
    and folder names) is checked and quoted by :mod:`recon.paste`: one that
    cannot be pasted safely is refused here, before anything is proven or written.
    """
    target, known = in_image(snap, rel, site)
    target = check(target, "the package file's path in the image")
    name = check(posixpath.basename(rel), "the patched file's name")
    py = quote(interpreter(snap, python), "the image's Python")
    folder = check(folder, "the hotfix folder's name")
    args = " ".join(quote(a, "a verify argument (module or piece)")
                    for a in verify_args(module, sha256, pieces))
    pycache = posixpath.join(posixpath.dirname(target), "__pycache__")
    mount = here(f"{folder}/{name}", tail=f":{target}:ro")
    config_map = f"recon-hotfix-{sha256[:12]}"
    script = quote(f"{folder}/{VERIFY}")
    return {
        "target": target, "site_known": known, "file": name,
        "python": interpreter(snap, python), "pycache": pycache, "size_changed": size_changed,
        "docker_run": f"-v {mount}",
        "compose": "- " + yaml_str(f"./{folder}/{name}:{target}:ro"),
        "configmap": config_map,
        "kubectl_create": (f"kubectl create configmap {config_map} "
                           + quote(f"--from-file={name}={folder}/{name}")),
        "verify_args": args,
        "verify_exec": f"docker exec -i ENGINE {py} - {args} --import < {script}",
        "verify_run": (f"docker run --rm --entrypoint {py} -v {mount} "
                       f"-v {here(f'{folder}/{VERIFY}')}:/tmp/{VERIFY}:ro IMAGE /tmp/{VERIFY} {args}"),
        "verify_kubectl": f"kubectl exec -i POD -c engine -- {py} - {args} --import < {script}",
        "where": (f"docker run --rm -i --entrypoint {py} IMAGE - --module "
                  f"{quote(module, 'the module name')} --where < {script}"),
        "tmpfs": f"--tmpfs {quote(pycache)}",
        "compose_tmpfs": f"tmpfs: [{yaml_str(pycache)}]",
    }
