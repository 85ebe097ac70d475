"""The README written into each hotfix folder: what changed, the proof, and copy-paste lines.

Like a probe bundle's README it is written for the person who owns the
deployment, who may not have run recon: one read-only mount, how to check in
the running container that it took, and how to take it out again.
"""

from __future__ import annotations

from typing import Any

from .model import CHANGED, HotfixResult
from .mount import VERIFY


def render_readme(result: HotfixResult, folder: str) -> str:
    """Markdown text for ``README.md``; ``folder`` is the hotfix folder's name."""
    m = result.mount
    return "\n".join([
        f"# recon hotfix `{folder}`",
        "",
        _summary(result, folder),
        "",
        _proof(result),
        "## docker run",
        "```",
        "docker run ... \\",
        f"  {m['docker_run']} \\",
        "  IMAGE COMMAND...",
        "```",
        "",
        "## docker compose",
        "```yaml",
        "services:",
        "  engine:",
        "    volumes:",
        f"      {m['compose']}",
        "```",
        "",
        "## Kubernetes (ConfigMap + subPath)",
        "```",
        m["kubectl_create"],
        "```",
        "```yaml",
        "spec:",
        "  containers:",
        "    - name: engine",
        "      volumeMounts:",
        "        - name: recon-hotfix",
        f"          mountPath: {m['target']}",
        f"          subPath: {m['file']}",
        "          readOnly: true",
        "  volumes:",
        "    - name: recon-hotfix",
        "      configMap:",
        f"        name: {m['configmap']}",
        "```",
        "A subPath mount does not follow later edits of the ConfigMap: recreate the pods.",
        "",
        _verify(m, folder),
        _pycache(m),
        _rollback(m),
        _files(result, folder),
    ])


def _summary(result: HotfixResult, folder: str) -> str:
    snap, fixed, patch = result.snapshot, result.fixed_in, result.patch
    source = (f"the release `{fixed['label']}` ({fixed['ref']})" if fixed else
              f"the patch `{patch['path']}` (sha256 {patch['sha256'][:16]})" if patch else "?")
    pieces = "\n".join(f"- `{p.qualname}` ({p.kind}): image lines {p.image_lines[0]}-"
                       f"{p.image_lines[1]}, patched lines {p.patched_lines[0]}-"
                       f"{p.patched_lines[1]}" for p in result.pieces)
    m = result.mount
    site = "" if m["site_known"] else (
        f"\n\n`SITE` is the folder that holds `{snap['package']}` in your image: the snapshot "
        f"({snap['source']}) does not say. This prints it (or give `--site` to recon):\n"
        f"```\n{m['where']}\n```")
    return (f"`{result.file}` of {snap['label']} (snapshot `{snap['name']}`), with exactly these "
            f"pieces replaced by {source}; every other line is the image's own:\n\n{pieces}\n\n"
            f"Mount `{m['file']}` read-only over `{m['target']}`. Run the lines below from the "
            f"folder that holds `{folder}`.{site}\n\n"
            f"- original: sha256 `{result.original['sha256']}`, {result.original['size']} bytes\n"
            f"- patched:  sha256 `{result.patched['sha256']}`, {result.patched['size']} bytes")


def _proof(result: HotfixResult) -> str:
    proof = result.proof
    lines = ["## Proof (recon, on the patched snapshot)", ""]
    for qualname, row in proof.reindexed.items():
        lines.append(f"- re-indexed: `{qualname}` has {row['verdict']}")
    if proof.verify:
        checks = ", ".join(c["check"] for c in proof.verify)
        lines.append(f"- `{VERIFY}` on the patched snapshot's file: ok ({checks})")
    for row in proof.has:
        lines.append(f"- `recon has {row['qualname']} --fixed-in {row['fixed']}`: "
                     f"**{row['answer']}** ({row['why']})")
    if proof.recipe is not None:
        lines += _recipe_lines(proof.recipe.to_json())
    changed = [r for r in result.closure if r.status == CHANGED]
    for row in changed:
        lines.append(f"- warning: the new code uses `{row.name}` ({row.target}), which differs "
                     "between the two releases: the patched file calls the image's version")
    lines += [f"- warning: {w}" for w in proof.warnings if "differs between" not in w]
    lines.append(f"- closure: {len(result.closure)} names the new code reads were resolved in "
                 "both releases (`hotfix.json`, key `closure`)")
    return "\n".join(lines) + "\n"


def _recipe_lines(recipe: dict[str, Any]) -> list[str]:
    opts = " ".join(f"--set {k}={v}" for k, v in recipe["options"].items())
    lines = [f"- `recon recipe run {recipe['recipe']} {opts}`:"]
    for side in ("before", "after"):
        res = recipe[side]
        label = "image" if side == "before" else "patched"
        errors = recipe[f"errors_{side}"]
        values = "; ".join(f"{k} = {v}" for k, v in list(res.get("values", {}).items())[:4])
        lines.append(f"  - {label} ({res.get('snapshot')}): {values}"
                     + (f"; **{len(errors)} error(s)**: {errors[0]}" if errors else "; no error"))
    return lines


def _verify(m: dict[str, Any], folder: str) -> str:
    return "\n".join([
        "## Verify",
        f"`{VERIFY}` (standard library only) runs with the image's Python and checks that the",
        "file the import system finds is this one (sha256), that the bytecode Python will run is",
        "compiled from it (no stale `.pyc`), and that each replaced piece is defined at its",
        "patched line; `--import` also imports the module the way the engine does.",
        "",
        "Before rolling out, on a throw-away container of the image:",
        "```",
        m["verify_run"],
        "```",
        "In the running container (docker, then Kubernetes):",
        "```",
        m["verify_exec"],
        m["verify_kubectl"],
        "```",
        "Exit 0: the hotfix is what runs. 1: another file is imported (no mount, wrong path).",
        "2: stale bytecode would run (see below). 3: the module is not found or is compiled.",
        "4: `--import` failed or imported another file. 5: a piece is not the hotfix's.",
        "",
    ])


def _pycache(m: dict[str, Any]) -> str:
    same_size = "" if m["size_changed"] else (
        "\n**The patched file has the same size as the original**: a timestamp `.pyc` is then "
        "ignored only because the mtime differs. Do not copy the file with its mtime kept "
        "(`cp -p`, `rsync -t`), and run the verify step.\n")
    return "\n".join([
        "## Stale `__pycache__`",
        "pip installs timestamp `.pyc` files: each records its source's mtime (whole seconds)",
        "and size, and Python compiles from the source when either differs from the file it",
        "finds. The mounted file has the host file's mtime and size, so the image's `.pyc` of",
        "the original is not used. `PYTHONDONTWRITEBYTECODE=1` only stops Python writing new",
        "`.pyc` files; it does not stop it reading old ones. An image built with *unchecked*",
        "hash-based `.pyc` files (PEP 552) never compares them with the source: the mount then",
        "has no effect and verify exits 2. Remedy: a tmpfs over that folder's `__pycache__`",
        f"(`--tmpfs {m['pycache']}`; compose `tmpfs: [{m['pycache']}]`; Kubernetes an",
        f"`emptyDir` mounted at `{m['pycache']}`): its modules are compiled from source at start.",
        same_size,
    ])


def _rollback(m: dict[str, Any]) -> str:
    return "\n".join([
        "## Rollback",
        "A container's mounts are fixed when it is created: rollback is recreating it without",
        "the mount.",
        "- docker: remove the `-v` line above, `docker rm -f ENGINE`, run it again.",
        "- compose: remove the volume line, `docker compose up -d engine` (recreates it).",
        "- Kubernetes: remove the volumeMount and the volume (or `kubectl rollout undo "
        "deployment/NAME`), then",
        f"  `kubectl delete configmap {m['configmap']}`.",
        "",
        "Afterwards the verify step exits 1 (the image's own file is imported): that is the",
        "rolled-back state.",
        "",
    ])


def _files(result: HotfixResult, folder: str) -> str:
    return "\n".join([
        "## Files",
        f"- `{result.mount['file']}`: the patched file",
        "- `hotfix.diff`: the unified diff against the image's file (`patch -p1` in the site folder)",
        "- `hotfix.json`: sha256 of both files, the pieces, the release with the fix, the closure,",
        "  the proof and these lines, as data",
        f"- `{VERIFY}`: the check above",
        f"- the patched snapshot recon proved it on: `{result.patched_snapshot['name']}`",
        f"  (`recon recipe run NAME --snapshot {result.patched_snapshot['name']}`)",
        "",
    ])
