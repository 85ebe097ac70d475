"""``find`` by name glob, regex and structural pattern, on real vLLM releases.

Expected hits are confirmed by reading the files directly (plain text search).
"""

from __future__ import annotations

import ast
import re

import pytest
from typer.testing import CliRunner

from recon.cli import app
from recon.errors import ReconError
from recon.index import FunctionInfo, SnapshotIndex, load_index
from recon.index.find import Pattern, find_names, find_pattern, find_regex
from recon.snapshots.model import Snapshot

MAMBA_FILE = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"
ADD_REQUEST = "vllm.v1.worker.gpu.model_states.mamba_hybrid:MambaHybridModelState.add_request"
FLOORDIV = "$X // self.cache_config.block_size"


@pytest.fixture(scope="module")
def vidx(vllm_latest: Snapshot) -> SnapshotIndex:
    return load_index(vllm_latest)


@pytest.fixture(scope="module")
def v31(pip_snapshot) -> SnapshotIndex:
    """0.31.0: the release whose add_request still divides by the attention block size."""
    return load_index(pip_snapshot("vllm==0.31.0"))


def test_glob_over_qualnames(vidx: SnapshotIndex, vllm_latest: Snapshot) -> None:
    hits = find_names(vidx, "*:*.add_request")
    assert ADD_REQUEST in {h.qualname for h in hits}
    assert all(h.qualname.endswith(".add_request") for h in hits)
    # every "def add_request" in the release's text is found, and nothing else
    count = sum(len(re.findall(r"^\s+(?:async\s+)?def add_request\(", vllm_latest.read_text(f.path), re.M))
                for f in vllm_latest.python_files())
    assert len(hits) == count

    cc = find_names(vidx, "vllm.config.*:CompilationConfig.*")
    names = {h.qualname for h in cc}
    assert "vllm.config.compilation:CompilationConfig.adjust_cudagraph_sizes_for_spec_decode" in names
    assert all(h.path.startswith("vllm/config/") for h in cc)
    text = vllm_latest.read_text("vllm/config/compilation.py")
    assert "    def adjust_cudagraph_sizes_for_spec_decode(" in text
    # without a colon the glob also matches the module-local name
    local = find_names(vidx, "MambaHybridModelState.*")
    assert ADD_REQUEST in {h.qualname for h in local}
    assert all(isinstance(h, FunctionInfo) for h in local)
    assert any(h.qualname == "vllm.platforms.interface:Platform"
               for h in find_names(vidx, "vllm.platforms.interface:Platform", classes=True))


def test_regex_reports_function_and_lines(v31: SnapshotIndex) -> None:
    hits = find_regex(v31, r"//\s*self\.cache_config\.block_size")
    by_q = {h.qualname: h for h in hits}
    assert ADD_REQUEST in by_q
    text = v31.snapshot.read_text(MAMBA_FILE).split("\n")
    want = [n for n, line in enumerate(text, 1) if re.search(r"//\s*self\.cache_config\.block_size", line)]
    got = by_q[ADD_REQUEST].lines
    assert [m.lineno for m in got] == want
    (a, b), = got[0].spans
    assert got[0].text[a:b].startswith("//") and got[0].text[a:b].endswith("block_size")
    # restricted to one function by name
    only = find_regex(v31, r"cache_config", within="*:MambaHybridModelState.add_request")
    assert [h.qualname for h in only] == [ADD_REQUEST]


def test_structural_pattern_finds_the_bug_and_its_absence(v31: SnapshotIndex, vidx: SnapshotIndex) -> None:
    before = find_pattern(v31, FLOORDIV)
    assert ADD_REQUEST in {h.qualname for h in before}
    hit = next(h for h in before if h.qualname == ADD_REQUEST)
    line = hit.lines[0]
    assert "(new_req_data.num_computed_tokens - 1) // self.cache_config.block_size" in line.text
    (a, b), = line.spans
    assert line.text[a:b] == "(new_req_data.num_computed_tokens - 1) // self.cache_config.block_size"
    after = find_pattern(vidx, FLOORDIV)
    assert ADD_REQUEST not in {h.qualname for h in after}
    assert "// self.cache_config.block_size" not in vidx.source(ADD_REQUEST)
    # the regex and the pattern agree on a whole release (formatting aside)
    regex = {h.qualname for h in find_regex(v31, r"//\s*self\.cache_config\.block_size\b")}
    assert regex <= {h.qualname for h in before}


def test_pattern_metavariables_and_ellipsis(vidx: SnapshotIndex) -> None:
    q = "vllm.platforms.interface:Platform._align_hybrid_block_size"
    fn = vidx.lookup(q)
    text = vidx.snapshot.read_text(fn.path)
    # independently: the stdlib parser's cdiv(a, b) calls inside that def, all their lines
    node = next(n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef)
                and n.name == "_align_hybrid_block_size")
    calls = [c for c in ast.walk(node) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
             and c.func.id == "cdiv" and len(c.args) == 2]
    want = sorted({ln for c in calls for ln in range(c.lineno, c.end_lineno + 1)})
    assert calls and all("cdiv(" in text.split("\n")[c.lineno - 1] for c in calls)
    hits = find_pattern(vidx, "cdiv($A, $B)", within=q)
    assert [h.qualname for h in hits] == [q]
    assert [m.lineno for m in hits[0].lines] == want
    assert find_pattern(vidx, "cdiv(...)", within=q)[0].lines == hits[0].lines
    # $A twice must bind the same expression: no cdiv(x, x) in that function
    assert find_pattern(vidx, "cdiv($A, $A)", within=q) == []
    with pytest.raises(ReconError):
        Pattern("def (")


def test_cli_find(vllm_latest: Snapshot) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["find", str(vllm_latest.root), "*:MambaHybridModelState.add_request", "--json"])
    assert res.exit_code == 0, res.output
    assert f'"qualname": "{ADD_REQUEST}"' in res.output
    res = runner.invoke(app, ["find", str(vllm_latest.root), "-p", "cdiv($A, $B)",
                              "vllm.platforms.interface:Platform._align_hybrid_block_size"])
    assert res.exit_code == 0 and "_align_hybrid_block_size" in res.output and "cdiv(" in res.output
