"""The README written into each hotfix folder: what changed, the proof, and copy-paste lines.

Like a probe bundle's README it is written for the person who owns the
deployment, who may not have run recon: one read-only mount, how to check in
the running container that it took, and how to take it out again.
"""

from __future__ import annotations

from typing import Any

from ..paste import code_block, code_span, quote, yaml_str
from ..safetext import safe_text
from .model import CHANGED, HotfixResult
from .mount import VERIFY


def render_readme(result: HotfixResult, folder: str) -> str:
    """Markdown text for ``README.md``; ``folder`` is the hotfix folder's name."""
    m = result.mount
    return safe_text("\n".join([  # names and source from the image: control characters escaped
        f"# recon hotfix {code_span(folder)}",
        "",
        _summary(result, folder),
        "",
        _proof(result),
        "## docker run",
        code_block(["docker run ... \\", f"  {m['docker_run']} \\", "  IMAGE COMMAND..."]),
        "",
        "## docker compose",
        code_block(["services:", "  engine:", "    volumes:", f"      {m['compose']}"], "yaml"),
        "",
        "## Kubernetes (ConfigMap + subPath)",
        code_block([m["kubectl_create"]]),
        code_block([
            "spec:",
            "  containers:",
            "    - name: engine",
            "      volumeMounts:",
            "        - name: recon-hotfix",
            f"          mountPath: {yaml_str(m['target'])}",
            f"          subPath: {yaml_str(m['file'])}",
            "          readOnly: true",
            "  volumes:",
            "    - name: recon-hotfix",
            "      configMap:",
            f"        name: {yaml_str(m['configmap'])}",
        ], "yaml"),
        "A subPath mount does not follow later edits of the ConfigMap: recreate the pods.",
        "",
        _verify(m, folder),
        _pycache(m),
        _rollback(m),
        _files(result, folder),
    ]))


def _summary(result: HotfixResult, folder: str) -> str:
    snap, fixed, patch = result.snapshot, result.fixed_in, result.patch
    source = (f"the release {code_span(fixed['label'])} ({fixed['ref']})" if fixed else
              f"the patch {code_span(patch['path'])} (sha256 {patch['sha256'][:16]})" if patch
              else "?")
    pieces = "\n".join(f"- {code_span(p.qualname)} ({p.kind}): image lines {p.image_lines[0]}-"
                       f"{p.image_lines[1]}, patched lines {p.patched_lines[0]}-"
                       f"{p.patched_lines[1]}" for p in result.pieces)
    m = result.mount
    site = "" if m["site_known"] else (
        f"\n\n`SITE` is the folder that holds {code_span(snap['package'])} in your image: the "
        f"snapshot ({snap['source']}) does not say. This prints it (or give `--site` to recon):\n"
        + code_block([m["where"]]))
    return (f"{code_span(result.file)} of {snap['label']} (snapshot {code_span(snap['name'])}), "
            f"with exactly these pieces replaced by {source}; every other line is the image's "
            f"own:\n\n{pieces}\n\nMount {code_span(m['file'])} read-only over "
            f"{code_span(m['target'])}. Run the lines below from the folder that holds "
            f"{code_span(folder)}.{site}\n\n"
            f"- original: sha256 `{result.original['sha256']}`, {result.original['size']} bytes\n"
            f"- patched:  sha256 `{result.patched['sha256']}`, {result.patched['size']} bytes")


def _proof(result: HotfixResult) -> str:
    proof = result.proof
    lines = ["## Proof (recon, on the patched snapshot)", ""]
    for qualname, row in proof.reindexed.items():
        lines.append(f"- re-indexed: {code_span(qualname)} has {row['verdict']}")
    if proof.verify:
        checks = ", ".join(c["check"] for c in proof.verify)
        lines.append(f"- `{VERIFY}` on the patched snapshot's file: ok ({checks})")
    for row in proof.has:
        command = f"recon has {quote(row['qualname'])} --fixed-in {quote(row['fixed'])}"
        lines.append(f"- {code_span(command)}: **{row['answer']}** ({row['why']})")
    if proof.recipe is not None:
        lines += _recipe_lines(proof.recipe.to_json())
    changed = [r for r in result.closure if r.status == CHANGED]
    for row in changed:
        lines.append(f"- warning: the new code uses {code_span(row.name)} ({row.target}), which differs "
                     "between the two releases: the patched file calls the image's version")
    lines += [f"- warning: {w}" for w in proof.warnings if "differs between" not in w]
    lines.append(f"- closure: {len(result.closure)} names the new code reads were resolved in "
                 "both releases (`hotfix.json`, key `closure`)")
    return "\n".join(lines) + "\n"


def _recipe_lines(recipe: dict[str, Any]) -> list[str]:
    opts = "".join(f" --set {quote(f'{k}={v}')}" for k, v in recipe["options"].items())
    lines = [f"- {code_span('recon recipe run ' + quote(recipe['recipe']) + opts)}:"]
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
        code_block([m["verify_run"]]),
        "In the running container (docker, then Kubernetes):",
        code_block([m["verify_exec"], m["verify_kubectl"]]),
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
        f"({code_span(m['tmpfs'])}; compose {code_span(m['compose_tmpfs'])}; Kubernetes an",
        f"`emptyDir` mounted at {code_span(m['pycache'])}): its modules are compiled from source "
        "at start.",
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
        f"  {code_span('kubectl delete configmap ' + quote(m['configmap']))}.",
        "",
        "Afterwards the verify step exits 1 (the image's own file is imported): that is the",
        "rolled-back state.",
        "",
    ])


def _files(result: HotfixResult, folder: str) -> str:
    name = result.patched_snapshot["name"]
    return "\n".join([
        "## Files",
        f"- {code_span(result.mount['file'])}: the patched file",
        "- `hotfix.diff`: the unified diff against the image's file (`patch -p1` in the site folder)",
        "- `hotfix.json`: sha256 of both files, the pieces, the release with the fix, the closure,",
        "  the proof and these lines, as data",
        f"- `{VERIFY}`: the check above",
        f"- the patched snapshot recon proved it on: {code_span(name)}",
        f"  ({code_span('recon recipe run NAME --snapshot ' + quote(name, 'the snapshot name'))})",
        "",
    ])
