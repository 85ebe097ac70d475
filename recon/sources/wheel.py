"""``wheel:PATH``: a wheel is one layer whose root is a site-packages folder.

Only the members the snapshot keeps are decompressed (zip allows random
access), which is why a 330 MB vLLM wheel snapshots in seconds.
"""

from __future__ import annotations

import hashlib
import zipfile
from collections.abc import Iterator
from pathlib import Path

from ..errors import ReconError
from .base import DIR, FILE, Entry, Image, Layer

SITE = "site-packages"


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 22):
            h.update(block)
    return "sha256:" + h.hexdigest()


class WheelLayer(Layer):
    def __init__(self, path: Path, digest: str) -> None:
        super().__init__(0, digest, media_type="application/zip", size=path.stat().st_size)
        self.path = path

    def entries(self) -> Iterator[Entry]:
        try:
            zf = zipfile.ZipFile(self.path)
        except (zipfile.BadZipFile, OSError) as err:
            raise ReconError(f"not a readable wheel ({err})", where=str(self.path)) from err
        with zf:
            for info in zf.infolist():
                name = info.filename
                if name.startswith("./"):
                    name = name[2:]
                full = f"{SITE}/{name.rstrip('/')}" if not name.startswith("/") else name
                if info.is_dir():
                    yield Entry(full, DIR)
                    continue
                yield Entry(full, FILE, info.file_size, None, 0o644,
                            lambda info=info: zf.open(info))  # type: ignore[misc]
                self.bytes_read += info.compress_size


def open_wheel(path: str) -> Image:
    p = Path(path)
    if not p.is_file():
        raise ReconError(f"wheel not found: {path}")
    digest = file_sha256(p)
    return Image(ref=f"wheel:{path}", scheme="wheel", digest=digest,
                 layers=[WheelLayer(p, digest)], config=None,
                 extra={"wheel": p.name, "site_dirs": [SITE]})
