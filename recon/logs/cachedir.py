"""An offline look at a vLLM torch.compile cache folder: its entries, who wrote them, what is broken.

The folder is someone else's (copied or mounted read-only) and is read as data: nothing
is imported or unpickled, nothing is written, symbolic links are listed and never
followed, every file read is size-capped and the walk is bounded. What vLLM (0.26)
leaves under ``VLLM_CACHE_ROOT/torch_compile_cache``:

* ``<10 hex>/rank_<r>_<dp>/<prefix>/``: the compiled graphs of one model part
  (``backbone``, ``eagle_head``): ``cache_key_factors.json`` (the four factors of the
  folder's name, written first), ``vllm_compile_cache.py`` (the index: compile range,
  subgraph, backend -> artefact file; a Python literal, read with ``ast.literal_eval``),
  the ``artifact_*`` files it names, ``computation_graph.py``;
* ``torch_aot_compile/<64 hex>/rank_<r>_<dp>/model``: the AOT-compiled function, with
  ``inductor_cache/`` beside the ranks.

An entry is **incomplete** where its index names an artefact that is missing or empty, or
where it has artefacts but no index (a writer that stopped before it saved it); it is
**foreign or edited** where the factors it stores do not hash to its own name (the release's
rule: ``sha256(str([env, config, code, compiler]))[:10]``, the environment hashed as
``sha256(json.dumps(env, sort_keys=True))``).
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ReconError

#: the walk stops after this many entries (a cache of one engine holds a few thousand)
MAX_ENTRIES = 200_000
#: the largest index or factors file read
MAX_TEXT = 1 << 20
GRAPHS = re.compile(r"^[0-9a-f]{10}$")
AOT = re.compile(r"^[0-9a-f]{64}$")
RANK = re.compile(r"^rank_\d+_\d+$")


@dataclass
class Entry:
    """One compiled model part (graphs) or one AOT-compiled function in the folder."""

    kind: str  # graphs / aot
    name: str  # the hash folder's name
    rank: str
    prefix: str  # backbone, eagle_head ('' for AOT)
    path: str  # relative to the folder inspected
    newest: float = 0.0  # the newest modification time inside (epoch seconds)
    files: int = 0
    factors: dict[str, Any] = field(default_factory=dict)  # config/code/compiler/env hashes
    ranges: list[str] = field(default_factory=list)  # compile ranges the index holds
    problems: list[str] = field(default_factory=list)
    written_at: str | None = None  # the cache root the index's artefact paths name

    @property
    def state(self) -> str:
        return "incomplete" if any(p.startswith("incomplete") for p in self.problems) else \
            "foreign or edited" if self.problems else "complete"


@dataclass
class CacheDir:
    root: str
    entries: list[Entry]
    links: list[str]  # symbolic links met (never followed)
    truncated: bool = False


def _read_text(path: Path) -> str | None:
    """A small regular file's text, or None (missing, a link, too large, unreadable)."""
    try:
        st = path.lstat()
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_TEXT:
            return None
        with open(path, "rb") as fh:
            return fh.read(MAX_TEXT).decode("utf-8", errors="replace")
    except OSError:
        return None


def graphs_name(factors: dict[str, Any]) -> str | None:
    """The folder name the release gives these stored factors (None: not all four are there)."""
    env = factors.get("env")
    parts = [factors.get(k) for k in ("config_hash", "code_hash", "compiler_hash")]
    if not isinstance(env, dict) or not all(isinstance(p, str) for p in parts):
        return None
    env_hash = hashlib.sha256(json.dumps(env, sort_keys=True).encode()).hexdigest()
    return hashlib.sha256(str([env_hash, *parts]).encode()).hexdigest()[:10]


def env_hash(factors: dict[str, Any]) -> str | None:
    env = factors.get("env")
    if not isinstance(env, dict):
        return None
    return hashlib.sha256(json.dumps(env, sort_keys=True).encode()).hexdigest()


def _factors(entry: Entry, folder: Path) -> None:
    text = _read_text(folder / "cache_key_factors.json")
    if text is None:
        entry.problems.append("no readable cache_key_factors.json (its factors are unknown)")
        return
    try:
        data = json.loads(text)
    except ValueError:
        entry.problems.append("cache_key_factors.json is not JSON")
        return
    if not isinstance(data, dict):
        entry.problems.append("cache_key_factors.json is not an object")
        return
    entry.factors = {k: data.get(k) for k in ("config_hash", "code_hash", "compiler_hash")
                     if isinstance(data.get(k), str)}
    entry.factors["env_hash"] = env_hash(data)
    name = graphs_name(data)
    if name is not None and name != entry.name:
        entry.problems.append(f"its stored factors hash to {name}, not to its own name: "
                              "copied under another name, or edited")


def _index(entry: Entry, folder: Path, names: set[str]) -> None:
    text = _read_text(folder / "vllm_compile_cache.py")
    artefacts = {n for n in names if n.startswith("artifact_")}
    if text is None:
        if artefacts:
            entry.problems.append("incomplete: compiled artefacts but no index "
                                  "(vllm_compile_cache.py): its writer stopped before saving it")
        return
    try:
        index = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        entry.problems.append("incomplete: vllm_compile_cache.py is not a literal the release "
                              "can read")
        return
    if not isinstance(index, dict):
        entry.problems.append("incomplete: vllm_compile_cache.py is not a dict")
        return
    ranges = set()
    for key, value in index.items():
        if isinstance(key, tuple) and key:
            ranges.add(str(key[0]))
        handle = value.get("graph_handle") if isinstance(value, dict) else None
        if not (isinstance(handle, tuple) and len(handle) == 2 and isinstance(handle[0], str)):
            continue
        name, where = handle
        if name not in names or _size(folder / name) == 0:
            entry.problems.append(f"incomplete: the index names {name}, which is missing or empty")
        if isinstance(where, str) and "/torch_compile_cache/" in where:
            entry.written_at = where.split("/torch_compile_cache/")[0]
    entry.ranges = sorted(ranges)


def _size(path: Path) -> int:
    try:
        st = path.lstat()
    except OSError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def _graphs(cache: Path, root: Path, name: str, out: CacheDir) -> None:
    for rank in _dirs(cache / name, out):
        if not RANK.match(rank):
            continue
        for prefix in _dirs(cache / name / rank, out):
            folder = cache / name / rank / prefix
            entry = Entry("graphs", name, rank, prefix, str(folder.relative_to(root)))
            names = _scan(entry, folder, out)
            _factors(entry, folder)
            _index(entry, folder, names)
            out.entries.append(entry)


def _aot(cache: Path, root: Path, name: str, out: CacheDir) -> None:
    folder = cache / "torch_aot_compile" / name
    for rank in _dirs(folder, out):
        if not RANK.match(rank):
            continue
        entry = Entry("aot", name, rank, "", str((folder / rank).relative_to(root)))
        names = _scan(entry, folder / rank, out)
        if "model" not in names or _size(folder / rank / "model") == 0:
            entry.problems.append("incomplete: no AOT-compiled function (model) in it")
        out.entries.append(entry)


def _dirs(folder: Path, out: CacheDir) -> list[str]:
    """Sub-folders (links are listed in ``out.links``, never entered)."""
    found = []
    try:
        with os.scandir(folder) as it:
            for item in it:
                if item.is_symlink():
                    out.links.append(str(Path(item.path)))
                elif item.is_dir(follow_symlinks=False):
                    found.append(item.name)
    except OSError:
        return []
    return sorted(found)


def _scan(entry: Entry, folder: Path, out: CacheDir) -> set[str]:
    """The entry's file count and newest time (bounded walk); its top-level names."""
    top: set[str] = set()
    for base, dirs, files in os.walk(folder, followlinks=False):
        for name in dirs + files:
            path = os.path.join(base, name)
            if os.path.islink(path):
                out.links.append(path)
        if base == str(folder):
            top = set(files) | set(dirs)
        for name in files:
            entry.files += 1
            with contextlib.suppress(OSError):
                entry.newest = max(entry.newest, os.lstat(os.path.join(base, name)).st_mtime)
        if entry.files > MAX_ENTRIES:
            out.truncated = True
            break
    return top


def inspect_dir(path: str | Path) -> CacheDir:
    """Every entry of a compile cache folder: ``VLLM_CACHE_ROOT`` or its ``torch_compile_cache``."""
    root = Path(path)
    if not root.is_dir() or root.is_symlink():
        raise ReconError(f"{root}: not a folder (give VLLM_CACHE_ROOT or its torch_compile_cache)")
    cache = root / "torch_compile_cache" if (root / "torch_compile_cache").is_dir() else root
    out = CacheDir(str(root), [], [])
    names = _dirs(cache, out)
    if not any(GRAPHS.match(n) for n in names) and "torch_aot_compile" not in names:
        raise ReconError(f"{root}: no torch.compile cache here (no torch_compile_cache/<hash> "
                         "folders)")
    for name in names:
        if GRAPHS.match(name):
            _graphs(cache, root, name, out)
    for name in _dirs(cache / "torch_aot_compile", out):
        if AOT.match(name):
            _aot(cache, root, name, out)
    return out


def would_load(found: CacheDir, aot_hashes: list[str], env: str | None, config: str | None
               ) -> list[tuple[Entry, str]]:
    """The entries a run with these hashes would load, and why each matches."""
    out = []
    for entry in found.entries:
        if entry.kind == "aot" and entry.name in aot_hashes:
            out.append((entry, "its AOT key: the same environment, config and compiled module"))
        elif entry.kind == "graphs" and env and config and \
                entry.factors.get("env_hash") == env and entry.factors.get("config_hash") == config:
            out.append((entry, "the same environment and config hashes; it loads it where the "
                               f"image and board give code {entry.factors.get('code_hash', '?')[:12]}"
                               f" and compiler {entry.factors.get('compiler_hash', '?')}"))
    return out


def entries_json(found: CacheDir) -> list[dict[str, Any]]:
    return [{"kind": e.kind, "name": e.name, "rank": e.rank, "prefix": e.prefix, "path": e.path,
             "state": e.state, "problems": e.problems, "files": e.files, "newest": e.newest,
             "factors": e.factors, "compile_ranges": e.ranges, "written_at": e.written_at}
            for e in found.entries]
