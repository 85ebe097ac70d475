"""The typed manifest: what recon writes reads back whole, and a bad field is named.

Expected values are independent of the model: file digests come from hashing
the files on disk here, sizes from ``os.stat``, and the JSON from reading
``manifest.json`` with the standard library.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from recon.errors import ReconError
from recon.snapshots import Manifest, Snapshot
from recon.snapshots.manifest import ManifestError
from recon.snapshots.take import take_snapshot


@pytest.fixture
def snap(tmp_path: Path) -> Snapshot:
    site = tmp_path / "site"
    (site / "vllm" / "sub").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("__version__ = '9.1.0'\n")
    (site / "vllm" / "sub" / "a.py").write_text("def f():\n    return 1\n")
    (site / "vllm" / "fast.so").write_bytes(b"\x7fELF" + b"\0" * 60)
    (site / "vllm" / "alias.py").symlink_to("sub/a.py")
    return take_snapshot(f"dir:{site}", out=tmp_path / "out", name="s")


def test_records_match_the_files_on_disk(snap: Snapshot) -> None:
    m = snap.manifest
    assert m.package.name == "vllm" and m.package.version == "9.1.0"
    for rel in ("vllm/__init__.py", "vllm/sub/a.py"):
        data = (snap.src / rel).read_bytes()
        rec = m.files[rel]
        assert (rec.kind, rec.sha256, rec.size) == ("file", hashlib.sha256(data).hexdigest(),
                                                    len(data))
    link = m.files["vllm/alias.py"]
    assert (link.kind, link.target, link.sha256) == ("symlink", "sub/a.py", None)
    assert set(m.skipped) == {"vllm/fast.so"} and m.skipped["vllm/fast.so"].size == 64
    assert m.stats["files"] == len(m.files) == 3


def test_what_is_written_reads_back_whole(snap: Snapshot) -> None:
    on_disk = json.loads((snap.root / "manifest.json").read_text())
    assert Manifest.from_json(on_disk).to_json() == on_disk
    assert Manifest.from_json(on_disk) == snap.manifest


def test_an_older_manifest_without_optional_parts_still_opens(snap: Snapshot) -> None:
    on_disk = json.loads((snap.root / "manifest.json").read_text())
    for key in ("python", "skipped", "distributions", "selection", "stats", "parent", "image"):
        on_disk.pop(key)
    older = Manifest.from_json(on_disk)
    assert older.python.executable is None and older.skipped == {} and older.parent is None
    assert older.files == snap.manifest.files


@pytest.mark.parametrize(("path", "value", "named"), [
    (("files", "vllm/sub/a.py", "size"), "12", "files['vllm/sub/a.py'].size"),
    (("files", "vllm/sub/a.py", "layer"), True, "files['vllm/sub/a.py'].layer"),
    (("package", "name"), None, "package.name"),
    (("python",), ["not", "an", "object"], "python"),
    (("files",), [], "files"),
])
def test_a_bad_field_is_named(snap: Snapshot, path: tuple[str, ...], value: object,
                              named: str) -> None:
    data = json.loads((snap.root / "manifest.json").read_text())
    holder = data
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = value
    with pytest.raises(ManifestError, match=named.replace("[", r"\[").replace("]", r"\]")):
        Manifest.from_json(data)


def test_the_cli_says_which_field_of_an_edited_manifest(snap: Snapshot) -> None:
    path = snap.root / "manifest.json"
    data = json.loads(path.read_text())
    data["files"]["vllm/sub/a.py"]["sha256"] = 7
    path.write_text(json.dumps(data))
    with pytest.raises(ReconError, match=r"files\['vllm/sub/a.py'\]\.sha256: expected str"):
        Snapshot.open(snap.root)
    done = subprocess.run([sys.executable, "-m", "recon", "snapshot", "show", str(snap.root)],
                          capture_output=True, text=True, check=False)
    assert done.returncode != 0
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "sha256" in lines[0] and "manifest.json" in lines[0], done.stderr
