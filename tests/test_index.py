"""The index on real vLLM and SGLang releases: names, lines, signatures, imports, hashes, cache.

Every expected value is checked against the release's own files, read here
independently of the index (text search, or the stdlib ``ast`` directly).
"""

from __future__ import annotations

import ast
import hashlib
import re
from pathlib import Path

import pytest

from recon.errors import ReconError
from recon.index import SnapshotIndex, index_source, load_index
from recon.index.resolve import Resolver
from recon.slicing.modules import ModuleSet
from recon.snapshots.model import Snapshot
from recon.snapshots.take import take_snapshot

ALIGN = "vllm.platforms.interface:Platform._align_hybrid_block_size"
MAMBA_FILE = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"
ADD_REQUEST = "vllm.v1.worker.gpu.model_states.mamba_hybrid:MambaHybridModelState.add_request"
DEF_RE = re.compile(r"^(\s*)(async\s+)?def\s+(\w+)\s*[(\[]")


@pytest.fixture(scope="module")
def vidx(vllm_latest: Snapshot) -> SnapshotIndex:
    return load_index(vllm_latest)


def _line_of(text: str, needle: str) -> int:
    """1-based line of the first line containing ``needle`` (independent of the index)."""
    for n, line in enumerate(text.split("\n"), 1):
        if needle in line:
            return n
    raise AssertionError(f"{needle!r} not in file")


def test_whole_release_parses(vidx: SnapshotIndex, vllm_latest: Snapshot) -> None:
    py = [f.path for f in vllm_latest.python_files()]
    assert vidx.errors == {}
    assert len(vidx.modules) == len(py) == vidx.stats.files
    assert len(vidx.functions) > 30_000 and len(vidx.classes) > 5_000
    assert vidx.modules["vllm.platforms"].is_package
    assert vidx.modules["vllm.platforms"].path == "vllm/platforms/__init__.py"


def test_qualname_and_lines_match_the_file(vidx: SnapshotIndex, vllm_latest: Snapshot) -> None:
    fn = vidx.lookup(ALIGN)
    text = vllm_latest.read_text("vllm/platforms/interface.py")
    lines = text.split("\n")
    def_line = _line_of(text, "    def _align_hybrid_block_size(")
    assert (fn.path, fn.def_lineno, fn.name) == ("vllm/platforms/interface.py", def_line,
                                                  "Platform._align_hybrid_block_size")
    assert lines[def_line - 2].strip() == "@classmethod"
    assert fn.lineno == def_line - 1 and fn.kind == "classmethod" and fn.decorators == ("classmethod",)
    # end line: the stdlib parser's own answer for that def
    node = next(n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef)
                and n.name == "_align_hybrid_block_size")
    assert fn.end_lineno == node.end_lineno
    src = vidx.source(ALIGN)
    assert src.startswith("    @classmethod\n    def _align_hybrid_block_size(\n")
    assert src == "\n".join(lines[fn.lineno - 1: fn.end_lineno]) + "\n"
    assert ast.get_source_segment(text, node) in src


def test_every_def_of_a_file_is_indexed(vidx: SnapshotIndex, vllm_latest: Snapshot) -> None:
    """Scan cuda.py's text for def lines; each is a function of the index, decorators counted."""
    path = "vllm/platforms/cuda.py"
    lines = vllm_latest.read_text(path).split("\n")
    by_def = {f.def_lineno: f for f in vidx.functions.values() if f.path == path}
    seen = 0
    for n, line in enumerate(lines, 1):
        m = DEF_RE.match(line)
        if not m:
            continue
        seen += 1
        fn = by_def[n]
        assert fn.short == m.group(3) and fn.is_async == bool(m.group(2)) and fn.col == len(m.group(1))
        if fn.decorators:
            assert lines[fn.lineno - 1].strip().startswith("@") and fn.lineno < n
        else:
            assert fn.lineno == n and not lines[n - 2].strip().startswith("@")
        above = [ln.strip() for ln in lines[fn.lineno - 1: n - 1]]
        if "@property" in above:
            assert fn.kind == "property"
        if "@staticmethod" in above:
            assert fn.kind == "staticmethod"
        if "@classmethod" in above:
            assert fn.kind == "classmethod"
    assert seen == len(by_def) > 40


def test_signature_and_kinds(vidx: SnapshotIndex, vllm_latest: Snapshot) -> None:
    fn = vidx.lookup(ADD_REQUEST)
    text = vllm_latest.read_text(MAMBA_FILE)
    def_line = text.split("\n")[fn.def_lineno - 1]
    assert def_line.strip() == "def add_request(self, req_index: int, new_req_data: NewRequestData) -> None:"
    assert [(p.name, p.kind, p.annotation, p.default) for p in fn.params] == [
        ("self", "POSITIONAL_OR_KEYWORD", None, None),
        ("req_index", "POSITIONAL_OR_KEYWORD", "int", None),
        ("new_req_data", "POSITIONAL_OR_KEYWORD", "NewRequestData", None)]
    assert fn.returns == "None" and fn.kind == "method"
    assert fn.signature == "(self, req_index: int, new_req_data: NewRequestData) -> None"
    # a property, from the text: "@property" right above "def supported_dtypes"
    prop = vidx.lookup("vllm.platforms.cuda:CudaPlatformBase.supported_dtypes")
    lines = vllm_latest.read_text("vllm/platforms/cuda.py").split("\n")
    assert lines[prop.def_lineno - 2].strip() == "@property" and prop.kind == "property"


def test_imports_bindings_and_lazy_imports(vidx: SnapshotIndex, vllm_latest: Snapshot) -> None:
    text = vllm_latest.read_text("vllm/platforms/cuda.py")
    assert "from .interface import DeviceCapability, Platform, PlatformEnum, in_wsl" in text
    assert "import vllm.envs as envs" in text
    cuda = vidx.modules["vllm.platforms.cuda"]
    assert cuda.bindings["Platform"] == "vllm.platforms.interface.Platform"
    assert cuda.bindings["envs"] == "vllm.envs"
    rel = next(i for i in cuda.imports if i.name == "Platform")
    assert (rel.module, rel.level, rel.resolved, rel.scope) == (
        "vllm.platforms.interface", 1, "vllm.platforms.interface", "")
    assert "vllm.platforms.interface" in cuda.imported_modules
    # lazy imports inside _align_hybrid_block_size, as the file shows them
    src = vidx.source(ALIGN)
    assert "from vllm.utils.math_utils import cdiv" in src
    lazy = [i for i in vidx.modules["vllm.platforms.interface"].imports
            if i.scope == "Platform._align_hybrid_block_size"]
    assert any(i.name == "cdiv" and i.resolved == "vllm.utils.math_utils" for i in lazy)
    assert "cdiv" not in vidx.modules["vllm.platforms.interface"].bindings


def test_class_bases_and_mro(vidx: SnapshotIndex, vllm_latest: Snapshot) -> None:
    text = vllm_latest.read_text("vllm/platforms/cpu.py")
    assert "class CpuPlatform(Platform):" in text
    cls = vidx.lookup_class("vllm.platforms.cpu:CpuPlatform")
    assert cls.bases == ("Platform",) and cls.def_lineno == _line_of(text, "class CpuPlatform(Platform):")
    res = Resolver(vidx)
    assert res.mro(cls.qualname)[:2] == (cls.qualname, "vllm.platforms.interface:Platform")
    assert "update_block_size_for_backend" in cls.methods
    assert "vllm.platforms.cpu:CpuPlatform" in res.subclasses("vllm.platforms.interface:Platform")
    # a module-level annotation under TYPE_CHECKING gives current_platform its type
    assert "current_platform: Platform" in vllm_latest.read_text("vllm/platforms/__init__.py")
    assert vidx.modules["vllm.platforms"].variables["current_platform"] == "Platform"
    ref = res.resolve_dotted("vllm.platforms.current_platform")
    assert ref is not None and (ref.kind, ref.name) == ("instance", "vllm.platforms.interface:Platform")


def test_lookup_forms_and_errors(vidx: SnapshotIndex) -> None:
    assert vidx.lookup("vllm.platforms.interface.Platform._align_hybrid_block_size").qualname == ALIGN
    assert vidx.lookup("Platform._align_hybrid_block_size").qualname == ALIGN
    with pytest.raises(ReconError) as err:
        vidx.lookup("vllm.platforms.interface:Platform._align_hybrid_blocksize")
    msg = str(err.value)
    assert "\n" not in msg and "did you mean" in msg and ALIGN in msg
    with pytest.raises(ReconError, match="matches .* functions"):
        vidx.lookup("add_request")


def test_function_at(vidx: SnapshotIndex) -> None:
    fn = vidx.lookup(ALIGN)
    assert vidx.function_at(fn.path, fn.def_lineno + 5).qualname == ALIGN
    assert vidx.function_at(fn.path, fn.lineno).qualname == ALIGN  # the decorator line
    assert vidx.function_at(fn.path, 1) is None


# -- normalized hashes across releases ----------------------------------------------------
def _add_request(pip_snapshot, version: str) -> tuple[int, object]:
    snap = pip_snapshot(f"vllm=={version}")
    idx = load_index(snap, paths=[MAMBA_FILE])
    text = snap.read_text(MAMBA_FILE)
    return _line_of(text, "    def add_request("), idx.lookup(ADD_REQUEST)


def test_hash_equal_when_only_position_changed(pip_snapshot) -> None:
    """0.30.0 -> 0.31.0: add_request moved (115 -> 111 in the files) with the same code."""
    line30, fn30 = _add_request(pip_snapshot, "0.30.0")
    line31, fn31 = _add_request(pip_snapshot, "0.31.0")
    assert (fn30.def_lineno, fn31.def_lineno) == (line30, line31) and line30 != line31
    assert fn30.ast_hash == fn31.ast_hash and fn30.body_hash == fn31.body_hash


def test_hash_differs_when_body_changed(pip_snapshot) -> None:
    """0.31.0 -> 0.32.0: the resumed-state column stops dividing by the attention block size."""
    _, fn31 = _add_request(pip_snapshot, "0.31.0")
    _, fn32 = _add_request(pip_snapshot, "0.32.0")
    snap31, snap32 = pip_snapshot("vllm==0.31.0"), pip_snapshot("vllm==0.32.0")
    seg31 = "\n".join(snap31.read_text(MAMBA_FILE).split("\n")[fn31.lineno - 1: fn31.end_lineno])
    seg32 = "\n".join(snap32.read_text(MAMBA_FILE).split("\n")[fn32.lineno - 1: fn32.end_lineno])
    assert "// self.cache_config.block_size" in seg31 and "// self.cache_config.block_size" not in seg32
    assert fn31.ast_hash != fn32.ast_hash and fn31.body_hash != fn32.body_hash
    assert fn31.params == fn32.params


def test_hash_ignores_comments_formatting_and_docstring_indent(vidx: SnapshotIndex) -> None:
    """Re-index the real function's text with comments, blank lines and a re-wrapped call added."""
    fn = vidx.lookup(ALIGN)
    lines = vidx.source(ALIGN).split("\n")
    assert all(ln.startswith("    ") or not ln.strip() for ln in lines)
    body = [ln[4:] for ln in lines]  # dedent one level: a module-level function now
    edited = []
    for ln in body:
        edited.append(ln)
        if ln.strip().startswith("from ") and ln.rstrip().endswith("import cdiv"):
            edited.append("    # a comment the normalized form must not see")
            edited.append("")
    rec = index_source(("\n".join(edited)).encode())
    assert rec["error"] is None
    row = rec["functions"][0]
    assert row[0] == "_align_hybrid_block_size"
    assert (row[11], row[12], row[13]) == (fn.ast_hash, fn.body_hash, fn.doc_hash)
    # a real change of one constant changes the body hash but not the docstring hash
    changed = index_source("\n".join(edited).replace("import lcm", "import gcd as lcm", 1).encode())
    assert changed["functions"][0][12] != fn.body_hash and changed["functions"][0][13] == fn.doc_hash


# -- cache, pool, failures ----------------------------------------------------------------
def test_cache_shared_across_snapshots(vllm_latest: Snapshot, pip_snapshot, tmp_path: Path) -> None:
    older = pip_snapshot("vllm==0.32.0")
    paths = sorted(p for p in (f.path for f in vllm_latest.python_files())
                   if p.startswith("vllm/platforms/") and p in older.files)
    first = load_index(vllm_latest, paths=paths, cache_root=tmp_path, workers=0)
    assert (first.stats.parsed, first.stats.cached) == (len(paths), 0)
    again = load_index(vllm_latest, paths=paths, cache_root=tmp_path, workers=0)
    assert (again.stats.parsed, again.stats.cached) == (0, len(paths))
    same = sum(vllm_latest.files[p].sha256 == older.files[p].sha256 for p in paths)
    other = load_index(older, paths=paths, cache_root=tmp_path, workers=0)
    assert other.stats.cached == same and other.stats.parsed == len(paths) - same
    assert 0 < same < len(paths)


def test_pool_gives_the_same_records(vllm_latest: Snapshot) -> None:
    paths = sorted(f.path for f in vllm_latest.python_files() if f.path.startswith("vllm/config/"))
    assert len(paths) > 24  # above the pool threshold
    pooled = load_index(vllm_latest, paths=paths, cache=False, workers=2)
    serial = load_index(vllm_latest, paths=paths, cache=False, workers=0)
    assert pooled.stats.workers == 2 and serial.stats.workers == 0
    assert pooled.functions == serial.functions and pooled.classes == serial.classes
    assert pooled.modules == serial.modules


def test_files_that_do_not_parse_are_listed(tmp_path: Path) -> None:
    pkg = tmp_path / "pkgsrc" / "brokenpkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("def ok():\n    return 1\n")
    (pkg / "syntax.py").write_text("def f(:\n")
    (pkg / "truncated.py").write_text("def g():\n    return [1,\n")
    (pkg / "bom.py").write_bytes(b"\xef\xbb\xbfdef bom():\n    return 2\n")
    (pkg / "parens.py").write_text("x = " + "(" * 300 + "1" + ")" * 300 + "\n")
    (pkg / "huge.py").write_text("def fine():\n    return 3\n\n\ndef big():\n    return "
                                 + "+".join(["a"] * 20000) + "\n")
    (pkg / "latin1.py").write_bytes(b'def h():\n    return "caf\xe9"\n')
    snap = take_snapshot(f"dir:{pkg}", package="brokenpkg", out=tmp_path / "snaps")
    idx = load_index(snap, cache_root=tmp_path / "cache")
    assert set(idx.errors) == {f"brokenpkg/{n}.py" for n in ("syntax", "truncated", "parens", "huge", "latin1")}
    assert idx.errors["brokenpkg/truncated.py"].startswith("SyntaxError: '[' was never closed")
    assert idx.errors["brokenpkg/huge.py"].startswith("RecursionError")
    assert "nested parentheses" in idx.errors["brokenpkg/parens.py"]
    assert sorted(idx.functions) == ["brokenpkg.bom:bom", "brokenpkg:ok"]
    assert idx.source("brokenpkg.bom:bom") == "def bom():\n    return 2\n"
    assert idx.modules["brokenpkg.huge"].error == idx.errors["brokenpkg/huge.py"]


def test_sglang_track_indices(sglang_latest: Snapshot) -> None:
    idx = load_index(sglang_latest)
    assert idx.errors == {} or all(p.startswith("sglang/") for p in idx.errors)
    path = "sglang/srt/layers/attention/hybrid_linear_attn_backend.py"
    fn = next(f for f in idx.functions.values() if f.path == path and f.short == "_init_track_ssm_indices")
    text = sglang_latest.read_text(path)
    assert fn.def_lineno == _line_of(text, "    def _init_track_ssm_indices(")
    assert fn.qualname.startswith("sglang.srt.layers.attention.hybrid_linear_attn_backend:")
    assert "num_h_states" in idx.source(fn.qualname) or "chunk" in idx.source(fn.qualname)
    assert fn.ast_hash and len(fn.ast_hash) == 32
    sha = hashlib.sha256(sglang_latest.read_bytes(path)).hexdigest()
    assert idx.modules[fn.module].sha256 == sha


def test_records_pickle_and_json(vllm_latest: Snapshot) -> None:
    import json
    import pickle

    from recon.index import as_json

    idx = load_index(vllm_latest, paths=["vllm/platforms/interface.py", "vllm/platforms/cpu.py"])
    back = pickle.loads(pickle.dumps(idx))
    assert back.functions == idx.functions and back.modules == idx.modules
    assert back.source(ALIGN) == idx.source(ALIGN)
    data = json.loads(json.dumps(as_json(idx.lookup(ALIGN))))
    assert data["qualname"] == ALIGN and data["params"][0]["name"] == "cls"
    mod = json.loads(json.dumps(as_json(idx.modules["vllm.platforms.cpu"])))
    assert mod["bindings"]["Platform"] == "vllm.platforms.interface.Platform"


def test_older_cache_versions_are_pruned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new record format starts a new cache folder; the older one for the same Python goes,
    a newer one (another recon side by side) and other Pythons' stay."""
    import sys

    from recon.index.visitor import RECORD_VERSION

    monkeypatch.setenv("RECON_CACHE", str(tmp_path / "cache"))
    py = f"{sys.version_info[0]}.{sys.version_info[1]}"
    base = tmp_path / "cache" / "index"
    old, newer, other = (base / f"r{RECORD_VERSION - 1}-py{py}", base / f"r{RECORD_VERSION + 1}-py{py}",
                         base / f"r{RECORD_VERSION - 1}-py2.7")
    for d in (old, newer, other):
        (d / "packs").mkdir(parents=True)
        (d / "catalog.json").write_text("{}")
    pkg = tmp_path / "src" / "vllm"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("__version__ = '0.0.1'\n\ndef f():\n    return 1\n")
    snap = take_snapshot(f"dir:{tmp_path / 'src'}", out=tmp_path / "snaps")
    assert load_index(snap).lookup_any("vllm:f").name == "f"
    assert not old.exists()
    assert newer.exists() and other.exists()
    assert (base / f"r{RECORD_VERSION}-py{py}" / "catalog.json").is_file()


def test_a_package_shadows_a_module_of_its_name_everywhere(tmp_path: Path) -> None:
    """``pkg/x.py`` beside ``pkg/x/__init__.py``: Python imports the package, and so does every
    verb (the index, and the snapshot's own module lookup used by bisect, probes, hot-fixes)."""
    pkg = tmp_path / "src" / "shadowpkg"
    (pkg / "x").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "x.py").write_text("def f():\n    return 'module'\n")
    (pkg / "x" / "__init__.py").write_text("def f():\n    return 'package'\n")
    snap = take_snapshot(f"dir:{pkg}", package="shadowpkg", out=tmp_path / "snaps")
    idx = load_index(snap, cache_root=tmp_path / "cache")
    assert idx.modules["shadowpkg.x"].path == "shadowpkg/x/__init__.py"
    assert snap.module_path("shadowpkg.x") == idx.modules["shadowpkg.x"].path
    assert "return 'package'" in idx.source("shadowpkg.x:f")
    # the slicer reads the same table; the shadowed file is said, not indexed
    assert ModuleSet(snap).names["shadowpkg.x"] == ("shadowpkg/x/__init__.py", True)
    assert {m: i.path for m, i in idx.modules.items()} == {m: p for m, (p, _) in snap.modules.items()}
    assert any("shadowed by the package shadowpkg.x" in w for w in idx.warnings["shadowpkg/x.py"])


def test_dotted_names_split_at_the_longest_module() -> None:
    from recon.index.models import split_dotted

    modules = {"pkg", "pkg.mod", "pkg.mod.sub"}.__contains__
    assert split_dotted("pkg.mod.sub.Cls.meth", modules) == ("pkg.mod.sub", "Cls.meth")
    assert split_dotted("pkg.mod.Cls", modules) == ("pkg.mod", "Cls")
    assert split_dotted("other.Cls", modules) is None and split_dotted("pkg", modules) is None


def test_normalized_form_is_exactly_ast_dump_without_positions(vllm_latest: Snapshot) -> None:
    """Two statements hash alike exactly when ``ast.dump`` (positions, ``ctx``, ``kind`` and
    type comments left out) says they are alike: over every eighth file of a release (about
    67,000 statements), no two different trees share a normalized form and no tree has two."""
    import ast

    from recon.index.normalize import SKIP_FIELDS, normalized_tokens

    tokens: list[str] = []
    dumps: list[str] = []
    for rec in sorted(vllm_latest.python_files(), key=lambda r: r.path)[::8]:
        try:
            tree = ast.parse(vllm_latest.read_bytes(rec.path))
        except (SyntaxError, ValueError):
            continue
        statements = [n for n in ast.walk(tree) if isinstance(n, ast.stmt)]
        tokens += ["\0".join(normalized_tokens(s)) for s in statements]
        for node in ast.walk(tree):  # ast.dump leaves out fields that are None
            for name in SKIP_FIELDS & set(node._fields):
                setattr(node, name, None)
        dumps += [ast.dump(s) for s in statements]
    pairs = set(zip(tokens, dumps, strict=True))
    assert len(tokens) > 50_000
    assert len(set(tokens)) == len(pairs) == len(set(dumps))
