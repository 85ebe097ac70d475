"""A snapshot's manifest, typed: read from JSON and written to JSON here and nowhere else.

``manifest.json`` says where every file of a snapshot came from. Three places
make one (a new snapshot, a chain's kept files, a hot-fix's patched copy) and
every verb reads one, so its shape lives in one model: what recon decides by
name (the package, the interpreter, the file and skipped records) is typed;
what a source reports as it found it (the source's own fields, the image
config, the layers, the distributions, the selection and statistics, the
parent) is kept as the JSON object it is.

A manifest on disk may have been edited by anyone: :meth:`Manifest.from_json`
checks each typed field and raises :class:`ManifestError` naming the field.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from dataclasses import dataclass, field
from typing import Any

from ..version import __version__

MANIFEST = "manifest.json"
FORMAT_VERSION = 1


#: who wrote a manifest (recorded in each one)
TOOL = {"name": "recon", "version": __version__}


def now() -> str:
    """A manifest's ``created`` time: UTC, to the second."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class ManifestError(ValueError):
    """A manifest field of the wrong shape (its name is in the message)."""


def _typed(data: dict[str, Any], key: str, kind: type | tuple[type, ...], default: Any,
           where: str) -> Any:
    value = data.get(key, default)
    if value is not None and not isinstance(value, kind) or isinstance(value, bool) and \
            kind is int:
        raise ManifestError(f"{where}{key}: expected {getattr(kind, '__name__', kind)}, "
                            f"found {type(value).__name__}")
    return value


def _object(data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ManifestError(f"{where}: expected an object, found {type(data).__name__}")
    return data


def _fields(cls: type, data: Any, where: str,
            kinds: dict[str, type | tuple[type, ...]]) -> dict[str, Any]:
    """The values of ``cls``'s fields named in ``kinds`` from the object ``data``, each
    checked against its kind (a missing one takes the field's default)."""
    data = _object(data, where)
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in kinds:
            default = f.default if f.default is not dataclasses.MISSING else \
                f.default_factory() if f.default_factory is not dataclasses.MISSING else None
            values[f.name] = _typed(data, f.name, kinds[f.name], default, f"{where}.")
    if "size" in values:
        values["size"] = values["size"] or 0  # older records of links had none
    return values


@dataclass(frozen=True)
class FileRecord:
    """One file of the snapshot, as the manifest records it."""

    path: str  # relative to src/, e.g. "vllm/config/compilation.py"
    sha256: str | None  # None for symlinks
    size: int
    layer: int | None  # index into Manifest.layers; None when the source has no layers
    kind: str = "file"  # "file" | "symlink"
    target: str | None = None  # symlink target, as stored in the image
    hotfix: bool = False  # the one file a hot-fix snapshot replaced

    @classmethod
    def from_json(cls, path: str, rec: Any) -> FileRecord:
        return cls(path=path, **_fields(cls, rec, f"files[{path!r}]", {
            "sha256": str, "size": int, "layer": int, "kind": str, "target": str,
            "hotfix": bool}))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "size": self.size}
        if self.layer is not None:
            out["layer"] = self.layer
        if self.sha256 is not None:
            out["sha256"] = self.sha256
        if self.target is not None:
            out["target"] = self.target
        if self.hotfix:
            out["hotfix"] = True
        return out


@dataclass(frozen=True)
class SkippedRecord:
    """A file of the package that is listed but not copied (binaries, links leaving it)."""

    size: int
    layer: int | None
    kind: str = "file"
    target: str | None = None
    reason: str | None = None

    @classmethod
    def from_json(cls, path: str, rec: Any) -> SkippedRecord:
        return cls(**_fields(cls, rec, f"skipped[{path!r}]", {
            "size": int, "layer": int, "kind": str, "target": str, "reason": str}))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"size": self.size, "layer": self.layer}
        if self.kind != "file":
            out["kind"] = self.kind
        if self.target is not None:
            out["target"] = self.target
        if self.reason is not None:
            out["reason"] = self.reason
        return out


@dataclass(frozen=True)
class PackageInfo:
    """The package the snapshot holds, and which copy of it the image's Python imports."""

    name: str
    version: str | None = None
    import_root: str | None = None  # the folder on sys.path it is imported from
    real_path: str | None = None  # the chosen copy's folder in the image
    other_copies: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: Any) -> PackageInfo:
        values = _fields(cls, data, "package", {"name": str, "version": str, "import_root": str,
                                                "real_path": str, "other_copies": list})
        if not values["name"]:
            raise ManifestError("package.name: missing")
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class PythonInfo:
    """The interpreter the image runs the package with, and its ``sys.path``."""

    executable: str | None = None
    version: str | None = None
    venv: str | None = None
    sys_path: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: Any) -> PythonInfo:
        return cls(**_fields(cls, data or {}, "python", {
            "executable": str, "version": str, "venv": str, "sys_path": list}))

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Manifest:
    """Everything ``manifest.json`` records (see the module docstring for what is typed)."""

    name: str
    created: str
    package: PackageInfo
    files: dict[str, FileRecord]
    skipped: dict[str, SkippedRecord] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)  # ref, scheme, digest, platform, ...
    tool: dict[str, Any] = field(default_factory=dict)
    python: PythonInfo = field(default_factory=PythonInfo)
    image: dict[str, Any] | None = None  # the image config, where the source has one
    layers: list[dict[str, Any]] = field(default_factory=list)
    distributions: list[dict[str, Any]] = field(default_factory=list)
    selection: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    parent: dict[str, Any] | None = None  # the snapshot a chain or a hot-fix was made from
    format: int = FORMAT_VERSION

    @classmethod
    def from_json(cls, data: Any) -> Manifest:
        """The manifest of ``data`` (parsed JSON); :class:`ManifestError` names a bad field."""
        data = _object(data, "manifest")
        files = _object(data.get("files", {}), "files")
        skipped = _object(data.get("skipped") or {}, "skipped")
        return cls(
            name=str(_typed(data, "name", str, "", "")),
            created=str(_typed(data, "created", str, "", "")),
            package=PackageInfo.from_json(data.get("package")),
            files={p: FileRecord.from_json(p, r) for p, r in files.items()},
            skipped={p: SkippedRecord.from_json(p, r) for p, r in skipped.items()},
            source=_object(data.get("source") or {}, "source"),
            tool=_object(data.get("tool") or {}, "tool"),
            python=PythonInfo.from_json(data.get("python")),
            image=_typed(data, "image", dict, None, ""),
            layers=list(_typed(data, "layers", list, [], "")),
            distributions=list(_typed(data, "distributions", list, [], "") or []),
            selection=_object(data.get("selection") or {}, "selection"),
            stats=_object(data.get("stats") or {}, "stats"),
            parent=_typed(data, "parent", dict, None, ""),
            format=int(_typed(data, "format", int, FORMAT_VERSION, "")))

    def to_json(self) -> dict[str, Any]:
        """The JSON object written as ``manifest.json`` (files and skipped in path order)."""
        return {"format": self.format, "name": self.name, "tool": self.tool,
                "created": self.created, "source": self.source, "image": self.image,
                "layers": self.layers, "package": self.package.to_json(),
                "python": self.python.to_json(), "distributions": self.distributions,
                "selection": self.selection, "stats": self.stats,
                "files": {p: r.to_json() for p, r in sorted(self.files.items())},
                "skipped": {p: r.to_json() for p, r in sorted(self.skipped.items())},
                "parent": self.parent}

    def derived(self, name: str, **changes: Any) -> Manifest:
        """A new snapshot's manifest made from this one (a chain's kept files, a hot-fix's
        patched copy): ``changes`` applied, named ``name``, stamped now by this recon."""
        return dataclasses.replace(self, name=name, created=now(), tool=TOOL, **changes)

    def layer_of(self, rel: str) -> dict[str, Any] | None:
        """The layer record ``rel`` came from, where the source has layers."""
        rec = self.files.get(rel)
        if rec is None or rec.layer is None or not 0 <= rec.layer < len(self.layers):
            return None
        layer = self.layers[rec.layer]
        return layer if isinstance(layer, dict) else None
