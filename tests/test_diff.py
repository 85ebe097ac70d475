"""``recon diff`` on real vLLM releases from PyPI; every expected answer was read in the source.

Hand checks (``src/vllm/v1/worker/gpu/model_states/mamba_hybrid.py``):

* 0.30.0 -> 0.31.0: ``MambaHybridModelState.add_request`` moves from line 115
  to 111 with an identical body; ``MambaHybridAttnMetadata.get_extra_common_attn_kwargs``
  stays at line 45 but its parameters went from one per line to one line
  (formatting only); ``get_extra_attn_kwargs`` got the same reformat and
  moved 52 -> 50; ``MambaHybridModelState.prepare_attn`` gained the optional
  parameter ``model_specific_attn_metadata: ModelSpecificAttnMetadata | None = None``
  (last, after ``ubatch_idx``) and new statements.
* 0.31.0 -> 0.32.0: ``add_request`` divides by ``mamba_block_size`` instead of
  ``self.cache_config.block_size`` (the align-mode fix of the field notes);
  ``vllm/tokenizers/detokenizer_utils.py:66`` ``_get_leading_space_marker``
  became ``get_leading_space_marker``, body identical;
  ``WeightTransferEngine.shutdown`` (``vllm/distributed/weight_transfer/base.py:516``)
  only got a new docstring.
"""

from __future__ import annotations

import base64
import json
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from recon.cli import main
from recon.diffing import DiffResult, diff
from recon.diffing.model import FunctionChange
from recon.snapshots.model import Snapshot

MAMBA = "vllm.v1.worker.gpu.model_states.mamba_hybrid"
ADD_REQUEST = f"{MAMBA}:MambaHybridModelState.add_request"
MAMBA_PATH = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"


@pytest.fixture(scope="module")
def d30_31(pip_snapshot: Callable[..., Snapshot]) -> DiffResult:
    return diff(pip_snapshot("vllm==0.30.0"), pip_snapshot("vllm==0.31.0"), sections=["functions"])


@pytest.fixture(scope="module")
def d31_32(pip_snapshot: Callable[..., Snapshot]) -> DiffResult:
    return diff(pip_snapshot("vllm==0.31.0"), pip_snapshot("vllm==0.32.0"), show=True)


def _find(changes: list[FunctionChange], qualname: str) -> FunctionChange:
    hits = [c for c in changes if qualname in (c.qualname, c.old_name)]
    assert len(hits) == 1, f"{qualname}: {[c.kind for c in hits]}"
    return hits[0]


def test_moved_function_is_not_a_change(d30_31: DiffResult) -> None:
    fd = d30_31.functions
    assert fd is not None
    assert ADD_REQUEST not in {c.qualname for c in fd.changes}
    moved = _find(fd.moved, ADD_REQUEST)
    assert (moved.old.def_lineno, moved.new.def_lineno) == (115, 111)  # type: ignore[union-attr]
    assert moved.parts == ("moved",)  # byte-identical text, only the place changed
    assert moved.where() == f"{MAMBA_PATH}:115 -> 111"


def test_formatting_only_is_counted_not_changed(d30_31: DiffResult) -> None:
    fd = d30_31.functions
    assert fd is not None
    fmt = _find(fd.formatting, f"{MAMBA}:MambaHybridAttnMetadata.get_extra_common_attn_kwargs")
    assert fmt.old.def_lineno == fmt.new.def_lineno == 45  # type: ignore[union-attr]
    reformatted_and_moved = _find(fd.moved, f"{MAMBA}:MambaHybridAttnMetadata.get_extra_attn_kwargs")
    assert reformatted_and_moved.parts == ("moved", "text")
    assert (reformatted_and_moved.old.def_lineno, reformatted_and_moved.new.def_lineno) == (52, 50)  # type: ignore[union-attr]
    counts = fd.counts()
    assert counts["formatting"] == len(fd.formatting) > 0
    assert "formatting/comment-only (not changes)" in fd.summary()


def test_signature_change_named_as_griffe_names_it(d30_31: DiffResult) -> None:
    fd = d30_31.functions
    assert fd is not None
    c = _find(fd.changes, f"{MAMBA}:MambaHybridModelState.prepare_attn")
    assert c.kind == "signature" and "body" in c.parts
    assert [(s.kind, s.param, s.breaking, s.source) for s in c.signature] == [
        ("PARAMETER_ADDED_OPTIONAL", "model_specific_attn_metadata", False, "recon")]
    assert c.signature[0].new == "model_specific_attn_metadata: ModelSpecificAttnMetadata | None = None"


def test_body_change_with_its_diff(d31_32: DiffResult) -> None:
    fd = d31_32.functions
    assert fd is not None
    c = _find(fd.changes, ADD_REQUEST)
    assert c.kind == "body" and c.parts == ("body",) and not c.signature
    assert c.diff is not None
    assert c.diff[:2] == [f"--- a/{MAMBA_PATH}:111", f"+++ b/{MAMBA_PATH}:112"]
    assert "-                (new_req_data.num_computed_tokens - 1) // self.cache_config.block_size" in c.diff
    assert "+                (new_req_data.num_computed_tokens - 1) // mamba_block_size" in c.diff
    assert "+            mamba_block_size = self.cache_config.mamba_block_size" in c.diff
    assert c.diff[2].startswith("@@ -114,6 +115,11 @@")  # the files' own line numbers


def test_rename_and_docstring_only(d31_32: DiffResult) -> None:
    fd = d31_32.functions
    assert fd is not None
    r = _find(fd.changes, "vllm.tokenizers.detokenizer_utils:get_leading_space_marker")
    assert r.kind == "renamed" and r.old_name == "vllm.tokenizers.detokenizer_utils:_get_leading_space_marker"
    assert r.parts == ("name",) and r.where() == "vllm/tokenizers/detokenizer_utils.py:66"
    doc = _find(fd.changes, "vllm.distributed.weight_transfer.base:WeightTransferEngine.shutdown")
    assert doc.kind == "docstring" and doc.parts == ("docstring",)
    assert fd.counts()["docstring"] >= 1 and "docstring-only" in fd.summary()


def _record_sha(version: str) -> dict[str, str]:
    """The wheel's own RECORD (urlsafe-base64 sha256 per file): an independent opinion."""
    from recon.acquire.sources.pip import fetch_wheel

    with zipfile.ZipFile(fetch_wheel(f"vllm=={version}")) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/RECORD"))
        out = {}
        for line in zf.read(name).decode().splitlines():
            path, digest, _ = line.rsplit(",", 2)
            if path.startswith("vllm/") and path.endswith(".py") and digest.startswith("sha256="):
                out[path] = digest[7:]
        return out


def test_files_section_agrees_with_the_wheels_record(d31_32: DiffResult) -> None:
    f = d31_32.files
    assert f is not None
    a, b = _record_sha("0.31.0"), _record_sha("0.32.0")
    py = lambda paths: {p for p in paths if p.endswith(".py")}  # noqa: E731
    assert py(f.added) == set(b) - set(a)
    assert py(f.removed) == set(a) - set(b)
    assert py(f.changed) == {p for p in set(a) & set(b) if a[p] != b[p]}
    assert MAMBA_PATH in f.changed
    # and the snapshot's hex sha256 is the RECORD's base64 one
    hexsha = bytes.fromhex(Snapshot.open(d31_32.b.path).files[MAMBA_PATH].sha256 or "")
    assert base64.urlsafe_b64encode(hexsha).rstrip(b"=").decode() == b[MAMBA_PATH]
    assert d31_32.distributions is not None
    assert d31_32.distributions.changed == {"vllm": ("0.31.0", "0.32.0")}
    assert d31_32.image is not None and d31_32.image.note and not d31_32.image


def test_focus_keeps_the_chain_only(pip_snapshot: Callable[..., Snapshot]) -> None:
    res = diff(pip_snapshot("vllm==0.31.0"), pip_snapshot("vllm==0.32.0"),
               focus="MambaHybridModelState.add_request", depth=1)
    fd = res.functions
    assert fd is not None and fd.focus is not None
    members = fd.focus["members"]
    assert members[ADD_REQUEST] == 0
    # its direct callee on both sides: super().add_request (read in the source)
    assert members["vllm.v1.worker.gpu.model_states.default:DefaultModelState.add_request"] == 1
    assert res.sections == ("image", "distributions", "functions")
    assert ADD_REQUEST in [c.qualname for c in fd.changes if c.kind == "body"]
    for c in (*fd.changes, *fd.moved, *fd.formatting):
        assert (c.old and c.old.qualname in members) or (c.new and c.new.qualname in members)


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = 0
    try:
        main(list(argv))
    except SystemExit as ex:
        code = int(ex.code or 0)
    return code, capsys.readouterr().out


def test_cli_json_markdown_html(pip_snapshot: Callable[..., Snapshot], tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    a, b = str(pip_snapshot("vllm==0.31.0").root), str(pip_snapshot("vllm==0.32.0").root)
    md, page = tmp_path / "r.md", tmp_path / "r.html"
    code, out = _cli(capsys, "diff", a, b, "--focus", ADD_REQUEST, "--depth", "1", "--json",
                     "--markdown", str(md), "--html", str(page))
    assert code == 0
    data = json.loads(out[out.index("{"):])
    change = next(c for c in data["functions"]["changes"] if c["qualname"] == ADD_REQUEST)
    assert change["kind"] == "body" and change["old"]["line"] == 111 and change["new"]["line"] == 112
    assert "// mamba_block_size" in change["diff"]
    text = md.read_text()
    assert "## Functions" in text and "```diff" in text and f"`{ADD_REQUEST}`" in text
    html = page.read_text()
    assert html.startswith("<!doctype html>") and "<details>" in html and 'class="add"' in html
    code, out = _cli(capsys, "diff", a, b, "--focus", ADD_REQUEST, "--depth", "1", "--show")
    assert code == 0
    assert "body" in out and "mamba_block_size = self.cache_config.mamba_block_size" in out
    code, out = _cli(capsys, "diff", a, b, "--section", "bogus")
    assert code == 2


def test_terminal_table_keeps_brackets_of_annotations(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Rich reads ``[int]`` as markup; a signature change must print its brackets as written."""
    for side, hint in (("a", "list[int]"), ("b", "list[str]")):
        pkg = tmp_path / side / "vllm"
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text("__version__ = '1.0'\n")
        (pkg / "sizes.py").write_text(f"def pad(sizes: {hint}) -> {hint}:\n    return sizes\n")
    monkeypatch.setenv("COLUMNS", "200")
    code, out = _cli(capsys, "diff", f"dir:{tmp_path / 'a'}", f"dir:{tmp_path / 'b'}")
    assert code == 0
    assert "vllm.sizes:pad" in out
    assert "list[int]" in out and "list[str]" in out
