"""``recon diff``'s module constants: assignments directly in a module body.

Real releases: every expected constant below was found by comparing the
module-body assignments of each pair of vLLM wheels with a throwaway script
of ``zipfile`` + :func:`ast.parse` + :func:`ast.unparse` (not recon), then
read in the wheel's source; the lines are checked here again against the
wheel's bytes:

* 0.31.0 -> 0.32.0, ``vllm/config/cache.py``: ``MambaCacheMode`` went from
  ``Literal["all", "align", "none"]`` (line 62) to ``Literal["align", "none"]``
  (line 63), so ``CacheConfig.mamba_cache_mode: MambaCacheMode = "none"``
  lost the ``"all"`` mode with its own text unchanged (no class field change);
  ``CacheDType`` gained ``"ultraquant_4bit"``. Nothing else of the module body
  changed.
* 0.32.0 -> 0.33.0, ``vllm/distributed/kv_transfer/kv_connector/v1/nixl/metadata.py``:
  ``NIXL_CONNECTOR_VERSION: int = 14`` (line 54) became ``= 15`` (line 55), and
  nothing else. ``vllm/transformers_utils/config.py``:
  ``_SPECULATIVE_DECODING_CONFIGS`` lost ``"medusa"``, ``_CONFIG_REGISTRY``
  changed, ``CONFIG_FIELD_ALIASES`` and ``_ST_TRANSFORMER_MODULE_TYPES`` are
  new, nothing else. ``vllm/entrypoints/serve/utils/api_utils.py``:
  ``_SENSITIVE_ARG_FIELDS`` and ``VLLM_SUBCMD_PARSER_EPILOG`` (a multi-line
  string) removed, ``_ERROR_REF`` new, nothing else.
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

#: (kind, source line on A or None, source line on B or None, parts); a line of None on a
#: side that has the constant: a multi-line assignment, checked by kind only.
Expect = dict[str, tuple[str, str | None, str | None, tuple[str, ...]]]

#: (A, B) -> {path: every constant change of that module}.
REAL: dict[tuple[str, str], dict[str, Expect]] = {
    ("0.31.0", "0.32.0"): {
        "vllm/config/cache.py": {
            "MambaCacheMode": ("value", 'MambaCacheMode = Literal["all", "align", "none"]',
                               'MambaCacheMode = Literal["align", "none"]', ("value",)),
            "CacheDType": ("value", None, None, ("value",)),
        },
    },
    ("0.32.0", "0.33.0"): {
        "vllm/distributed/kv_transfer/kv_connector/v1/nixl/metadata.py": {
            "NIXL_CONNECTOR_VERSION": ("value", "NIXL_CONNECTOR_VERSION: int = 14",
                                       "NIXL_CONNECTOR_VERSION: int = 15", ("value",)),
        },
        "vllm/transformers_utils/config.py": {
            "_SPECULATIVE_DECODING_CONFIGS": (
                "value", '_SPECULATIVE_DECODING_CONFIGS: set[str] = {"eagle", "speculators", "medusa"}',
                '_SPECULATIVE_DECODING_CONFIGS: set[str] = {"eagle", "speculators"}', ("value",)),
            "_CONFIG_REGISTRY": ("value", None, None, ("value",)),
            "CONFIG_FIELD_ALIASES": ("added", None, None, ()),
            "_ST_TRANSFORMER_MODULE_TYPES": ("added", None, None, ()),
        },
        "vllm/entrypoints/serve/utils/api_utils.py": {
            "_SENSITIVE_ARG_FIELDS": (
                "removed", '_SENSITIVE_ARG_FIELDS = frozenset({"api_key", "hf_token", "watermark_config"})',
                None, ()),
            "_ERROR_REF": ("added", None, '_ERROR_REF = {"$ref": "#/components/schemas/ErrorResponse"}',
                           ()),
            "VLLM_SUBCMD_PARSER_EPILOG": ("removed", None, None, ()),
        },
    },
}


@cache
def _wheel_lines(version: str, path: str) -> list[str]:
    """The file as the wheel ships it (not through recon's snapshot or index)."""
    from recon.acquire.sources.pip import fetch_wheel

    with zipfile.ZipFile(fetch_wheel(f"vllm=={version}")) as zf:
        return zf.read(path).decode().split("\n")


def _normalized(line: str) -> tuple[str | None, str | None]:
    """``X: T = v`` / ``X = v`` -> (T, v) the way the index normalizes them (ast.unparse)."""
    stmt = ast.parse(line).body[0]
    if isinstance(stmt, ast.AnnAssign):
        return ast.unparse(stmt.annotation), ast.unparse(stmt.value) if stmt.value else None
    assert isinstance(stmt, ast.Assign)
    return None, ast.unparse(stmt.value)


@pytest.fixture(scope="module")
def real(pip_snapshot: Callable[..., Snapshot]) -> dict[tuple[str, str], DiffResult]:
    return {(a, b): diff(pip_snapshot(f"vllm=={a}"), pip_snapshot(f"vllm=={b}"),
                         sections=["functions"]) for a, b in REAL}


@pytest.mark.parametrize("pair", list(REAL), ids=lambda p: "->".join(p))
def test_real_release_constant_changes(real: dict[tuple[str, str], DiffResult],
                                       pair: tuple[str, str]) -> None:
    va, vb = pair
    fl = real[pair].fields
    assert fl is not None
    for path, consts in REAL[pair].items():
        got = {c.name: c for c in fl.constants if c.mod_new.path == path}
        assert set(got) == set(consts), path  # exactly these, nothing else of the module
        for name, (kind, line_a, line_b, parts) in consts.items():
            c = got[name]
            assert (c.kind, c.parts) == (kind, parts), f"{path}:{name}"
            assert c.mod_old.path == path and c.qualname == f"{c.mod_new.name}:{name}"
            for version, line, side in ((va, line_a, c.old), (vb, line_b, c.new)):
                if side is None:
                    assert kind == ("added" if version == va else "removed")
                    continue
                if line is None:  # a multi-line value: where it starts is still checked
                    assert _wheel_lines(version, path)[side.lineno - 1].startswith(name)
                    continue
                assert (side.annotation, side.value) == _normalized(line)
                assert side.lineno == _wheel_lines(version, path).index(line) + 1


def test_real_values_read_as_written(real: dict[tuple[str, str], DiffResult]) -> None:
    fl = real[("0.32.0", "0.33.0")].fields
    assert fl is not None
    nixl = next(c for c in fl.constants if c.name == "NIXL_CONNECTOR_VERSION")
    assert nixl.qualname == "vllm.distributed.kv_transfer.kv_connector.v1.nixl.metadata:NIXL_CONNECTOR_VERSION"
    assert (nixl.side("a"), nixl.side("b")) == ("int = 14", "int = 15")
    assert nixl.where() == "vllm/distributed/kv_transfer/kv_connector/v1/nixl/metadata.py:54 -> 55"
    assert nixl.detail() == "value 14 -> 15"
    fl = real[("0.31.0", "0.32.0")].fields
    assert fl is not None
    mamba = next(c for c in fl.constants if c.name == "MambaCacheMode")
    assert (mamba.side("a"), mamba.side("b")) == ("= Literal['all', 'align', 'none']",
                                                  "= Literal['align', 'none']")
    dtype = next(c for c in fl.constants if c.qualname == "vllm.config.cache:CacheDType")
    assert "'ultraquant_4bit'" not in dtype.old.value and "'ultraquant_4bit'" in dtype.new.value  # type: ignore[union-attr]
    # the field that uses it reads the same on both sides: only the constant shows the change
    assert not [c for c in fl.changes if c.qualname == "vllm.config.cache:CacheConfig.mamba_cache_mode"]


# -- a small pair written here ------------------------------------------------------------------
OLD = {
    "defaults.py": '''
from typing import TYPE_CHECKING, Literal

__all__ = ["DEFAULT_MAX_NUM_SEQS"]
__version__ = "1.0"

DEFAULT_MAX_NUM_SEQS = 256
DEFAULT_BLOCK_SIZE: int = 16
TIMEOUT_S: int = 30
GONE = "bye"
MODES = Literal["all", "align"]
SIZES = {"a":1,"b":2}
first, second = 1, 2
COUNTER = 0
COUNTER += 1
table = {}
table["x"] = 1

if TYPE_CHECKING:
    HIDDEN = 1
try:
    import fastpath
    BACKEND = "fast"
except ImportError:
    BACKEND = "slow"


def helper():
    LOCAL = 1
    return DEFAULT_MAX_NUM_SEQS + LOCAL


class EngineConfig:
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS
    block_size: int = 16

    def scaled(self) -> int:
        return self.max_num_seqs * 2
''',
    "other.py": '''
LIMIT = 1


def other_fn():
    return LIMIT
''',
    "same.py": "KEEP = 1\n",
    "old_home.py": "MOVED = 1\n",
}
NEW = {
    "defaults.py": '''
from typing import TYPE_CHECKING, Literal

__all__ = ["DEFAULT_MAX_NUM_SEQS", "NEW_FLAG"]
__version__ = "2.0"

DEFAULT_MAX_NUM_SEQS = 512
DEFAULT_BLOCK_SIZE: int | None = 16
TIMEOUT_S: float = 60.0
MODES = Literal[
    'all', 'align',  # the same two modes
]
SIZES = {'a': 1, 'b': 2}
NEW_FLAG: bool = True
first, second = 3, 4
COUNTER = 0
COUNTER += 2
table = {}
table["x"] = 2

if TYPE_CHECKING:
    HIDDEN = 2
try:
    import fastpath
    BACKEND = "faster"
except ImportError:
    BACKEND = "slower"


def helper():
    LOCAL = 2
    return DEFAULT_MAX_NUM_SEQS + LOCAL


class EngineConfig:
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS
    block_size: int = 32

    def scaled(self) -> int:
        return self.max_num_seqs * 3
''',
    "other.py": '''
LIMIT = 2


def other_fn():
    return LIMIT
''',
    "same.py": "KEEP = 1\n",
    "new_home.py": "MOVED = 2\n",
}
MOD = "demo.defaults"


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return demo_pair(tmp_path_factory, "constants", OLD, NEW)


@pytest.fixture(scope="module")
def small(trees: tuple[Path, Path]) -> DiffResult:
    return diff(*trees, sections=["functions"])


def test_index_records_module_body_assignments(trees: tuple[Path, Path], tmp_path: Path) -> None:
    snap = Snapshot.open(trees[0])
    idx = load_index(snap, cache_root=tmp_path)
    consts = idx.modules[MOD].constants
    # not __all__/__version__ (dunders), first/second (tuple target), table["x"] (subscript),
    # HIDDEN/BACKEND (inside if/try), LOCAL (a function's), the class body's names
    assert list(consts) == ["DEFAULT_MAX_NUM_SEQS", "DEFAULT_BLOCK_SIZE", "TIMEOUT_S", "GONE",
                            "MODES", "SIZES", "COUNTER", "table"]
    assert tuple(consts["DEFAULT_MAX_NUM_SEQS"]) == (None, "256", 6)
    assert tuple(consts["DEFAULT_BLOCK_SIZE"]) == ("int", "16", 7)
    assert tuple(consts["SIZES"]) == (None, "{'a': 1, 'b': 2}", 11)
    assert tuple(consts["COUNTER"]) == (None, "0", 13)  # COUNTER += 1 is not an assignment here
    assert idx.modules["demo.same"].constants == {"KEEP": (None, "1", 1)}
    assert idx.modules["demo"].constants == {}
    # what was recorded before is untouched
    assert list(idx.classes[f"{MOD}:EngineConfig"].fields) == ["max_num_seqs", "block_size"]
    assert idx.modules[MOD].variables["DEFAULT_BLOCK_SIZE"] == "int"
    warm = load_index(snap, cache_root=tmp_path)  # the same constants from the per-file cache
    assert warm.stats.cached and warm.modules == idx.modules


def test_small_pair_constant_changes(small: DiffResult) -> None:
    fl = small.fields
    assert fl is not None
    assert change_rows(fl.constants) == [
        ("value", f"{MOD}:DEFAULT_MAX_NUM_SEQS", "= 256", "= 512"),
        ("annotation", f"{MOD}:DEFAULT_BLOCK_SIZE", "int = 16", "int | None = 16"),
        ("value", f"{MOD}:TIMEOUT_S", "int = 30", "float = 60.0"),
        ("added", f"{MOD}:NEW_FLAG", "-", "bool = True"),
        ("removed", f"{MOD}:GONE", "= 'bye'", "-"),
        ("value", "demo.other:LIMIT", "= 1", "= 2"),
    ]  # MODES, SIZES: formatting only; HIDDEN, BACKEND: nested; same.py: same bytes;
    # old_home -> new_home: a moved module is not followed
    assert fl.constants[2].parts == ("value", "annotation")
    assert fl.constants[2].detail() == "value 30 -> 60.0; annotation int -> float"
    assert fl.constants[0].where() == "demo/defaults.py:6"
    assert fl.constants[4].where() == "demo/defaults.py:9"
    assert fl.modules_compared == 2
    assert fl.constant_counts() == {"added": 1, "removed": 1, "value": 3, "annotation": 1,
                                    "modules_changed": 2, "modules_compared": 2}
    assert fl.constant_summary() == ("6 module constant changes in 2 modules (1 added, 1 removed, "
                                     "3 value, 1 annotation); 2 modules compared")


def test_class_fields_and_functions_still_reported(small: DiffResult) -> None:
    fl, fd = small.fields, small.functions
    assert fl is not None and fd is not None
    assert [(c.kind, c.qualname, c.side("a"), c.side("b")) for c in fl.changes] == [
        ("default", f"{MOD}:EngineConfig.block_size", "int = 16", "int = 32")]
    assert fl.summary() == "1 field change in 1 class (1 default); 1 class compared"
    kinds = {c.qualname: c.kind for c in fd.changes}
    assert kinds == {f"{MOD}:helper": "body", f"{MOD}:EngineConfig.scaled": "body"}


def test_cli_json_markdown_html_terminal(trees: tuple[Path, Path], tmp_path: Path,
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
    consts = data["fields"]["constants"]
    timeout = next(c for c in consts["changes"] if c["name"] == "TIMEOUT_S")
    assert timeout == {
        "kind": "value", "qualname": f"{MOD}:TIMEOUT_S", "module": MOD, "name": "TIMEOUT_S",
        "parts": ["value", "annotation"],
        "old": {"annotation": "int", "value": "30", "path": "demo/defaults.py", "line": 8,
                "module": MOD, "text": "TIMEOUT_S: int = 30"},
        "new": {"annotation": "float", "value": "60.0", "path": "demo/defaults.py", "line": 8,
                "module": MOD, "text": "TIMEOUT_S: float = 60.0"}}
    assert consts["counts"]["value"] == 3 and consts["summary"].startswith("6 module constant")
    assert [c["field"] for c in data["fields"]["changes"]] == ["block_size"]  # class fields apart
    text = md.read_text()
    assert "## Class fields and module constants" in text
    assert "**Module constants**: 6 module constant changes in 2 modules" in text
    assert "| value | `demo.defaults:DEFAULT_MAX_NUM_SEQS` | `= 256` | `= 512` | demo/defaults.py:6 |" in text
    assert "| removed | `demo.defaults:GONE` | `= 'bye'` | - | demo/defaults.py:9 |" in text
    html = page.read_text()
    assert "<h3>Module constants</h3>" in html and "<code>demo.other:LIMIT</code>" in html
    out = run("diff", a, b, "--section", "functions")
    assert "module constants" in out and "int | None = 16" in out  # not eaten as markup
    assert "module constants: 6 module constant changes in 2 modules" in out
    assert "class fields: 1 field change in 1 class" in out


def test_focus_keeps_the_modules_on_the_chain(trees: tuple[Path, Path]) -> None:
    res = diff(*trees, focus="EngineConfig.scaled", depth=1)
    fl = res.fields
    assert fl is not None and fl.focus and fl.modules_compared == 1
    assert {c.mod_new.name for c in fl.constants} == {MOD} and len(fl.constants) == 5
    res = diff(*trees, focus="other_fn", depth=1)
    fl = res.fields
    assert fl is not None
    assert change_rows(fl.constants) == [("value", "demo.other:LIMIT", "= 1", "= 2")]
