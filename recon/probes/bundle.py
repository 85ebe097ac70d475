"""Write a probe bundle: the folder an investigator mounts read-only into the container.

Layout::

    <bundle>/
        sitecustomize.py        bootstrap: chains the image's own, then loads the runtime
        _recon_probe_runtime.py the runtime (stdlib only), copied from recon.probes.runtime
        probe.json              the spec
        README.md               ready lines for docker run, docker compose and Kubernetes

Everything goes through :mod:`recon.acquire.writer` (staged folder, renamed into place
when complete), so a failed ``recon probe new`` never leaves half a bundle.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..acquire.writer import staged_dir, write_json, write_text
from ..errors import ReconError
from ..snapshots.model import Snapshot
from .readme import render_readme
from .spec import ProbeSpec
from .validate import TargetCheck, validate_targets

SITECUSTOMIZE = "sitecustomize.py"
RUNTIME = "_recon_probe_runtime.py"
SPEC = "probe.json"
README = "README.md"
BUNDLE_FILES = (SITECUSTOMIZE, RUNTIME, SPEC, README)
_HERE = Path(__file__).parent


@dataclass
class Bundle:
    """A written bundle: where it is, its spec, and what the snapshot said of each target."""

    path: Path
    spec: ProbeSpec
    checks: list[TargetCheck] = field(default_factory=list)

    @property
    def files(self) -> list[Path]:
        return [self.path / name for name in BUNDLE_FILES]


def runtime_source() -> str:
    """The runtime's text, exactly as it runs in the container."""
    return (_HERE / "runtime.py").read_text(encoding="utf-8")


def bootstrap_source() -> str:
    return (_HERE / "bootstrap.py").read_text(encoding="utf-8")


def new_bundle(out: str | Path, spec: ProbeSpec, *, snapshot: Snapshot | str | Path | None = None,
               force: bool = False) -> Bundle:
    """Validate ``spec`` (against ``snapshot`` when given) and write the bundle at ``out``.

    With a snapshot, every target must exist there with a supported kind, its
    expressions must name real parameters, and the modules that copy it with
    ``from module import name`` are added to the spec so the runtime patches
    those copies too. Raises :class:`ReconError` listing every problem at once.
    """
    spec.check()
    checks: list[TargetCheck] = []
    if snapshot is not None:
        snap = snapshot if isinstance(snapshot, Snapshot) else Snapshot.open(snapshot)
        checks = validate_targets(spec, snap)
        problems = [f"{c.qualname}: {p}" for c in checks for p in c.problems]
        if problems:
            raise ReconError("targets do not match snapshot " + snap.label + ": "
                             + "; ".join(problems))
        for target, check in zip(spec.targets, checks, strict=True):
            target.kind, target.signature = check.kind, check.signature
            target.copies = sorted(set(target.copies) | set(check.copies))
        spec.snapshot = {"name": snap.name, "package": snap.package, "version": snap.version}
    out = Path(out)
    readme = render_readme(out.name, spec)  # refuses a name no pasted line can hold, first
    with staged_dir(out, replace=force) as tmp:
        write_text(tmp / SITECUSTOMIZE, bootstrap_source())
        write_text(tmp / RUNTIME, runtime_source())
        write_json(tmp / SPEC, spec.to_json())
        write_text(tmp / README, readme)
        _world_readable(tmp)
    return Bundle(path=out.resolve(), spec=spec, checks=checks)


def _world_readable(folder: Path) -> None:
    """Files 0644, the folder 0755: the engine in the container often runs as another,
    unprivileged user, and a spec it cannot read means no probe at all."""
    os.chmod(folder, 0o755)
    for name in BUNDLE_FILES:
        os.chmod(folder / name, 0o644)


def load_bundle(path: str | Path) -> Bundle:
    """Open a bundle folder and parse its spec (checks that the files are all there)."""
    import json

    path = Path(path)
    missing = [name for name in BUNDLE_FILES[:3] if not (path / name).is_file()]
    if missing:
        raise ReconError(f"not a probe bundle (missing {', '.join(missing)})", where=str(path))
    try:
        spec = ProbeSpec.from_json(json.loads((path / SPEC).read_text(encoding="utf-8")))
    except (ValueError, TypeError) as err:
        raise ReconError(f"unreadable {SPEC}: {err}", where=str(path)) from err
    spec.check()
    return Bundle(path=path.resolve(), spec=spec)
