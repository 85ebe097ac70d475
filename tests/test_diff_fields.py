"""``recon diff``'s class fields: dataclass/pydantic defaults, annotations and class constants.

Real releases: every expected field below is a line of the wheel's own
source, read by hand (``zipfile`` + ``grep`` of ``vllm/config/*.py`` and the
OpenAI protocol module of each pair) and checked here again against the
wheel's bytes, independently of recon:

* 0.30.0 -> 0.31.0, ``vllm/config/engram.py`` ``EngramConfig``:
  ``cpu_offload`` went from ``Field(default_factory=_default_cpu_offload)``
  (the ``VLLM_PLE_CPU_OFFLOAD`` environment variable) to a plain ``True``;
  ``dp_shared_memory: bool = False`` became ``bool | None = None`` (default
  and annotation); ``use_thp: bool = False`` is new. Nothing else of the
  class body changed.
  ``vllm/entrypoints/openai/chat_completion/protocol.py`` ``ChatCompletionRequest``
  (line 218 and 229 in both): ``frequency_penalty`` and ``presence_penalty``
  defaults went from ``0.0`` to ``None``.
* 0.31.0 -> 0.32.0, ``vllm/config/kv_transfer.py`` ``KVTransferConfig``:
  ``kv_buffer_size``, ``kv_rank``, ``kv_parallel_size`` and ``kv_ip`` removed,
  nothing else; ``vllm/config/scheduler.py`` ``SchedulerConfig``:
  ``max_num_scheduled_tokens`` ``Field(default=None, ge=0)`` -> ``ge=1``, nothing else.
* 0.32.0 -> 0.33.0, ``vllm/config/attention.py`` ``AttentionConfig``:
  ``indexer_kv_dtype: IndexerKVDType`` -> ``IndexerKVDType | str`` (annotation
  only), and ``trtllm_ragged_backend``, ``indexer_tp_shard_min_rows``,
  ``minimax_m3_indexer_cp`` new; nothing else.
"""

from __future__ import annotations

import ast
import json
import zipfile
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest

from recon.cli import main
from recon.diffing import DiffResult, diff
from recon.index import load_index
from recon.snapshots.model import Snapshot
from tests.kit import change_rows, demo_pair

#: (kind, source line on A or None, source line on B or None, parts) per field.
Expect = dict[str, tuple[str, str | None, str | None, tuple[str, ...]]]

#: (A, B) -> {(path, class qualname): (exactly these changes?, fields)}.
REAL: dict[tuple[str, str], dict[tuple[str, str], tuple[bool, Expect]]] = {
    ("0.30.0", "0.31.0"): {
        ("vllm/config/engram.py", "vllm.config.engram:EngramConfig"): (True, {
            "cpu_offload": ("default",
                            "    cpu_offload: bool = Field(default_factory=_default_cpu_offload)",
                            "    cpu_offload: bool = True", ("default",)),
            "dp_shared_memory": ("default", "    dp_shared_memory: bool = False",
                                 "    dp_shared_memory: bool | None = None",
                                 ("default", "annotation")),
            "use_thp": ("added", None, "    use_thp: bool = False", ()),
        }),
        ("vllm/entrypoints/openai/chat_completion/protocol.py",
         "vllm.entrypoints.openai.chat_completion.protocol:ChatCompletionRequest"): (False, {
            "frequency_penalty": ("default", "    frequency_penalty: float | None = 0.0",
                                  "    frequency_penalty: float | None = None", ("default",)),
            "presence_penalty": ("default", "    presence_penalty: float | None = 0.0",
                                 "    presence_penalty: float | None = None", ("default",)),
        }),
    },
    ("0.31.0", "0.32.0"): {
        ("vllm/config/kv_transfer.py", "vllm.config.kv_transfer:KVTransferConfig"): (True, {
            "kv_buffer_size": ("removed", "    kv_buffer_size: float = 1e9", None, ()),
            "kv_rank": ("removed", "    kv_rank: int | None = None", None, ()),
            "kv_parallel_size": ("removed", "    kv_parallel_size: int = 1", None, ()),
            "kv_ip": ("removed", '    kv_ip: str = "127.0.0.1"', None, ()),
        }),
        ("vllm/config/scheduler.py", "vllm.config.scheduler:SchedulerConfig"): (True, {
            "max_num_scheduled_tokens": (
                "default", "    max_num_scheduled_tokens: int | None = Field(default=None, ge=0)",
                "    max_num_scheduled_tokens: int | None = Field(default=None, ge=1)", ("default",)),
        }),
    },
    ("0.32.0", "0.33.0"): {
        ("vllm/config/attention.py", "vllm.config.attention:AttentionConfig"): (True, {
            "indexer_kv_dtype": ("annotation", '    indexer_kv_dtype: IndexerKVDType = "auto"',
                                 '    indexer_kv_dtype: IndexerKVDType | str = "auto"',
                                 ("annotation",)),
            "trtllm_ragged_backend": (
                "added", None,
                '    trtllm_ragged_backend: Literal["trtllm-gen", "cute-dsl"] = "trtllm-gen"', ()),
            "indexer_tp_shard_min_rows": (
                "added", None, "    indexer_tp_shard_min_rows: int = Field(default=65536, ge=1)", ()),
            "minimax_m3_indexer_cp": ("added", None, "    minimax_m3_indexer_cp: bool = False", ()),
        }),
    },
}


@cache
def _wheel_lines(version: str, path: str) -> list[str]:
    """The file as the wheel ships it (not through recon's snapshot or index)."""
    from recon.acquire.sources.pip import fetch_wheel

    with zipfile.ZipFile(fetch_wheel(f"vllm=={version}")) as zf:
        return zf.read(path).decode().split("\n")


def _line_of(version: str, path: str, qualname: str, line: str) -> int:
    """1-based line of ``line`` in the file, the first one after ``class Name``."""
    lines = _wheel_lines(version, path)
    name = qualname.rsplit(":", 1)[1]
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"class {name}(")
                 or ln.startswith(f"class {name}:"))
    return lines.index(line, start) + 1


def _normalized(line: str) -> tuple[str | None, str | None]:
    """``    x: T = v`` -> (T, v) the way the index normalizes them (ast.unparse)."""
    stmt = ast.parse(line.strip()).body[0]
    assert isinstance(stmt, ast.AnnAssign)
    return ast.unparse(stmt.annotation), ast.unparse(stmt.value) if stmt.value else None


@pytest.fixture(scope="module")
def real(pip_snapshot: Callable[..., Snapshot]) -> dict[tuple[str, str], DiffResult]:
    return {(a, b): diff(pip_snapshot(f"vllm=={a}"), pip_snapshot(f"vllm=={b}"),
                         sections=["functions"]) for a, b in REAL}


@pytest.mark.parametrize("pair", list(REAL), ids=lambda p: "->".join(p))
def test_real_release_field_changes(real: dict[tuple[str, str], DiffResult],
                                    pair: tuple[str, str]) -> None:
    va, vb = pair
    fl = real[pair].fields
    assert fl is not None
    for (path, cls), (exact, fields) in REAL[pair].items():
        got = {c.name: c for c in fl.changes if c.cls_new.qualname == cls}
        if exact:
            assert set(got) == set(fields), cls
        for name, (kind, line_a, line_b, parts) in fields.items():
            c = got[name]
            assert (c.kind, c.parts) == (kind, parts), f"{cls}.{name}"
            assert c.cls_old.qualname == cls and c.old_class is None
            for version, line, side in ((va, line_a, c.old), (vb, line_b, c.new)):
                if line is None:
                    assert side is None, f"{cls}.{name} on {version}"
                    continue
                assert side is not None, f"{cls}.{name} on {version}"
                assert (side.annotation, side.value) == _normalized(line)
                assert side.lineno == _line_of(version, path, cls, line)


def test_real_values_are_normalized_source(real: dict[tuple[str, str], DiffResult]) -> None:
    fl = real[("0.31.0", "0.32.0")].fields
    assert fl is not None
    by_name = {c.name: c for c in fl.changes
               if c.cls_new.qualname == "vllm.config.kv_transfer:KVTransferConfig"}
    # 1e9 and "127.0.0.1" as ast.unparse writes them: the same in every release
    assert by_name["kv_buffer_size"].side("a") == "float = 1000000000.0"
    assert by_name["kv_ip"].side("a") == "str = '127.0.0.1'" and by_name["kv_ip"].side("b") == "-"
    assert by_name["kv_ip"].where() == "vllm/config/kv_transfer.py:87"
    sched = next(c for c in fl.changes if c.name == "max_num_scheduled_tokens")
    assert sched.detail() == "default Field(default=None, ge=0) -> Field(default=None, ge=1)"


# -- a small pair written here ------------------------------------------------------------------
OLD = {
    "conf.py": '''
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pydantic import Field


@dataclass
class EngineConfig:
    """Settings."""

    max_num_seqs: int = 256
    """How many sequences."""
    block_size: int | None = None
    dropped: bool = False
    shape: tuple[int, int] = (1,2)
    name: str = "engine"
    opts: list[str] = field(default_factory=list)
    ratio: float = Field(default=0.5, ge=0)
    LIMIT = 4
    if TYPE_CHECKING:
        hidden: int = 1

    def scaled(self) -> int:
        self.cache = {}
        return self.max_num_seqs * 2

    def untouched(self) -> int:
        return self.LIMIT
''',
    "old_home.py": '''
class Moved:
    a: int = 1
    b: int = 2
    c = 3

    def get(self):
        return self.a


class Options:
    x = 1
    y = 2
''',
}
NEW = {
    "conf.py": '''
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from pydantic import Field


@dataclass
class EngineConfig:
    """Settings."""

    max_num_seqs: int = 512
    """How many sequences."""
    block_size: Optional[BlockSize] = None
    shape: tuple[int, int] = (
        1, 2,  # the same tuple
    )
    name: str = 'engine'
    opts: list[str] = field(
        default_factory=list
    )
    ratio: float = Field(default = 0.5, ge = 0)
    added_flag: bool = True
    LIMIT = 8
    if TYPE_CHECKING:
        hidden: int = 2

    def scaled(self) -> int:
        self.cache = {"x": 1}
        return self.max_num_seqs * 3

    def untouched(self) -> int:
        return self.LIMIT
''',
    "new_home.py": '''
class Moved:
    a: int = 1
    b: int = 5
    c = 3

    def get(self):
        return self.a


class Options:
    p = 1
    q = 2
''',
}
CONF = "demo.conf:EngineConfig"


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return demo_pair(tmp_path_factory, "fields", OLD, NEW)


@pytest.fixture(scope="module")
def small(trees: tuple[Path, Path]) -> DiffResult:
    return diff(*trees, sections=["functions"])


def test_index_records_class_body_assignments(trees: tuple[Path, Path], tmp_path: Path) -> None:
    snap = Snapshot.open(trees[0])
    idx = load_index(snap, cache_root=tmp_path)
    fields = idx.classes[CONF].fields
    assert list(fields) == ["max_num_seqs", "block_size", "dropped", "shape", "name", "opts",
                            "ratio", "LIMIT"]  # not "hidden" (inside an if), not self.cache
    assert tuple(fields["max_num_seqs"]) == ("int", "256", 11)
    assert tuple(fields["shape"]) == ("tuple[int, int]", "(1, 2)", 15)
    assert tuple(fields["opts"]) == ("list[str]", "field(default_factory=list)", 17)
    assert tuple(fields["LIMIT"]) == (None, "4", 19)
    assert idx.classes[CONF].attributes["block_size"] == "int | None"  # type hints: as before
    warm = load_index(snap, cache_root=tmp_path)  # the same fields from the per-file cache
    assert warm.stats.cached and warm.classes == idx.classes


def test_small_pair_field_changes(small: DiffResult) -> None:
    fl = small.fields
    assert fl is not None
    conf = [c for c in fl.changes if c.cls_new.qualname == CONF]
    assert change_rows(conf) == [
        ("default", f"{CONF}.max_num_seqs", "int = 256", "int = 512"),
        ("annotation", f"{CONF}.block_size", "int | None = None", "Optional[BlockSize] = None"),
        ("added", f"{CONF}.added_flag", "-", "bool = True"),
        ("default", f"{CONF}.LIMIT", "= 4", "= 8"),
        ("removed", f"{CONF}.dropped", "bool = False", "-"),
    ]  # shape, name, opts, ratio: formatting only; hidden: not in the class body itself
    assert conf[0].where() == "demo/conf.py:11" and conf[0].parts == ("default",)
    assert conf[1].detail() == "annotation int | None -> Optional[BlockSize]"
    # a class moved to another module is followed; a same-named class with other fields is not
    moved = [c for c in fl.changes if c.cls_new.qualname != CONF]
    assert change_rows(moved) == [("default", "demo.new_home:Moved.b", "int = 2", "int = 5")]
    assert moved[0].old_class == "demo.old_home:Moved"
    assert moved[0].where() == "demo/old_home.py:3 -> demo/new_home.py:3"
    assert fl.counts() == {"added": 1, "removed": 1, "default": 3, "annotation": 1,
                           "classes_changed": 2, "classes_compared": 2}
    assert fl.summary() == ("6 field changes in 2 classes (1 added, 1 removed, 3 default, "
                            "1 annotation); 2 classes compared")


def test_methods_still_reported_as_before(small: DiffResult) -> None:
    fd = small.functions
    assert fd is not None
    by_name = {c.qualname: c for c in fd.changes}
    assert by_name[f"{CONF}.scaled"].kind == "body"
    assert f"{CONF}.untouched" not in by_name
    assert [c.kind for c in fd.moved if c.qualname == "demo.new_home:Moved.get"] == ["moved"]
    assert set(fd.to_json()) == {"summary", "counts", "files_compared", "changes", "moved",
                                 "formatting"}  # the function JSON has no new keys


def test_cli_json_markdown_terminal(trees: tuple[Path, Path], tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from recon.cli.output import console

    monkeypatch.setattr(console, "width", 200)
    a, b = (str(t) for t in trees)
    md, page = tmp_path / "r.md", tmp_path / "r.html"

    def run(*argv: str) -> str:
        try:
            main(list(argv))
        except SystemExit as ex:
            assert not ex.code
        return capsys.readouterr().out

    out = run("diff", a, b, "--section", "functions", "--json", "--markdown", str(md), "--html", str(page))
    data = json.loads(out[out.index("{"):])
    limit = next(c for c in data["fields"]["changes"] if c["field"] == "LIMIT")
    assert limit == {
        "kind": "default", "qualname": f"{CONF}.LIMIT", "class": CONF, "old_class": None,
        "field": "LIMIT", "parts": ["default"],
        "old": {"annotation": None, "value": "4", "path": "demo/conf.py", "line": 19,
                "class": CONF, "text": "LIMIT = 4"},
        "new": {"annotation": None, "value": "8", "path": "demo/conf.py", "line": 23,
                "class": CONF, "text": "LIMIT = 8"}}
    assert data["fields"]["counts"]["default"] == 3
    assert "fields" not in data["functions"]
    text = md.read_text()
    assert "## Class fields" in text and text.index("## Class fields") < text.index("## Functions")
    assert ("| default | `demo.conf:EngineConfig.max_num_seqs` | `int = 256` | `int = 512` | "
            "demo/conf.py:11 |") in text
    assert "| removed | `demo.conf:EngineConfig.dropped` | `bool = False` | - |" in text
    assert "(class was `demo.old_home:Moved`)" in text
    assert "<h2>Class fields and module constants</h2>" in page.read_text()
    out = run("diff", a, b, "--section", "functions")
    assert "class fields" in out and "Optional[BlockSize] = None" in out  # not eaten as markup
    assert "class fields: 6 field changes in 2 classes" in out


def test_long_values_are_clipped_around_the_difference() -> None:
    from recon.diffing.render import clip_pair

    a = "{" + ", ".join(f"'k{i}': {i}" for i in range(200)) + "}"
    b = a.replace("'k100': 100", "'k100': 101")
    ca, cb = clip_pair(a, b)
    assert ca.startswith("...") and ca.endswith("...") and len(ca) < 100
    assert "'k100': 100" in ca and "'k100': 101" in cb
    assert clip_pair("int = 1", "int = 2") == ("int = 1", "int = 2")


def test_focus_keeps_the_classes_on_the_chain(trees: tuple[Path, Path]) -> None:
    res = diff(*trees, focus="EngineConfig.scaled", depth=1)
    fl = res.fields
    assert fl is not None and fl.focus and fl.classes_compared == 1
    assert {c.cls_new.qualname for c in fl.changes} == {CONF} and len(fl.changes) == 5
