"""``dir:PATH``: a site-packages folder or a package's source tree, as one layer.

Symlinks are reported as links (never followed), so a folder cannot smuggle
in files from elsewhere on the host.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

from ...errors import ReconError
from .base import Image, Layer
from .entry import DIR, FILE, OTHER, SYMLINK, Entry

SITE = "site-packages"


class FolderLayer(Layer):
    def __init__(self, root: Path, only: str | None) -> None:
        super().__init__(0, f"dir:{root}", media_type="inode/directory")
        self.root = root
        self.only = only  # a single package folder name, when PATH was the package itself

    def entries(self) -> Iterator[Entry]:
        start = self.root / self.only if self.only else self.root
        base = len(str(self.root)) + 1
        stack = [start]
        while stack:
            folder = stack.pop()
            try:
                items = sorted(os.scandir(folder), key=lambda e: e.name)
            except OSError as err:
                raise ReconError(f"cannot read folder ({err.strerror})", where=str(folder)) from err
            for item in items:
                rel = item.path[base:]
                name = f"{SITE}/{rel}"
                st = item.stat(follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    yield Entry(name, SYMLINK, 0, os.readlink(item.path))
                elif stat.S_ISDIR(st.st_mode):
                    yield Entry(name, DIR)
                    stack.append(Path(item.path))
                elif stat.S_ISREG(st.st_mode):
                    yield Entry(name, FILE, st.st_size, None, st.st_mode & 0o777,
                                lambda p=item.path: open(p, "rb"))  # type: ignore[misc]
                    self.bytes_read += st.st_size
                else:
                    yield Entry(name, OTHER)


def open_folder(path: str) -> Image:
    p = Path(path).resolve()
    if not p.is_dir():
        raise ReconError(f"folder not found: {path}")
    only = None
    root = p
    if (p / "__init__.py").is_file():  # PATH is the package itself
        root, only = p.parent, p.name
    return Image(ref=f"dir:{path}", scheme="dir", digest=None,
                 layers=[FolderLayer(root, only)], config=None,
                 extra={"site_dirs": [SITE], "folder": str(p)})
