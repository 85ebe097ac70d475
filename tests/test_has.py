"""``recon has``: does an image or release contain a fix? Checked on real releases.

The fix is the one of the field notes, read in the source: from vLLM 0.32.0
on, ``MambaHybridModelState.add_request`` seeds the align-mode state column
with ``(num_computed_tokens - 1) // mamba_block_size`` instead of
``// self.cache_config.block_size``; 0.31.0 (and 0.29.0, 0.30.0) still divide
by the attention block size. In SGLang 0.5.23,
``MambaAttnBackendBase._init_track_ssm_indices`` computes
``num_h_states = (extend_seq_lens - 1) // state_chunk_size + 1`` at line 504
of ``sglang/srt/layers/attention/hybrid_linear_attn_backend.py``.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from recon.acquire.sources.pip import fetch_wheel
from recon.cli import main
from recon.diffing.has import has_fix
from recon.snapshots.model import Snapshot
from recon.snapshots.take import take_snapshot

ADD_REQUEST = "vllm.v1.worker.gpu.model_states.mamba_hybrid:MambaHybridModelState.add_request"
MAMBA_PATH = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"
FIXED = "pip:vllm==0.32.0"


@pytest.mark.wheels  # real releases from PyPI
def test_fixed_in_release() -> None:
    yes = has_fix("MambaHybridModelState.add_request", "pip:vllm==0.33.0", fixed_in=FIXED)
    assert yes.answer == "yes" and "same code as in vllm 0.32.0" in yes.why
    no = has_fix(ADD_REQUEST, "pip:vllm==0.30.0", fixed_in=FIXED)
    assert no.answer == "no"
    assert no.unfixed is not None and no.unfixed.snapshot.version == "0.31.0"  # the release before
    assert "before the fix" in no.why
    assert no.fix_lines == [("mamba_block_size = self.cache_config.mamba_block_size", False),
                            ("assert mamba_block_size is not None", False),
                            ("(new_req_data.num_computed_tokens - 1) // mamba_block_size", False)]
    assert "+                (new_req_data.num_computed_tokens - 1) // mamba_block_size" in no.diff


@pytest.fixture(scope="module")
def patched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A snapshot of a folder install of vLLM 0.31.0's model_states with a hand-made
    backport of the fix (snapshotted into the test's own folder, not recon's cache)."""
    root = tmp_path_factory.mktemp("patched") / "site"
    with zipfile.ZipFile(fetch_wheel("vllm==0.31.0")) as zf:
        for name in zf.namelist():
            if name == "vllm/__init__.py" or name.startswith("vllm/v1/worker/gpu/model_states/"):
                dest = root / name
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(zf.read(name))
    path = root / MAMBA_PATH
    text = path.read_text()
    old = "(new_req_data.num_computed_tokens - 1) // self.cache_config.block_size"
    assert text.count(old) == 1
    path.write_text(text.replace(old, "(new_req_data.num_computed_tokens - 1)\n"
                                      "                // self.cache_config.mamba_block_size"))
    return take_snapshot(f"dir:{root}", out=root.parent / "snapshots", name="patched").root


def test_backport_is_different(patched: Path) -> None:
    res = has_fix(ADD_REQUEST, str(patched), fixed_in=FIXED)
    assert res.answer == "different"
    # the backport divides by the mamba block size without the local variable of 0.32.0
    assert res.fix_lines == [("mamba_block_size = self.cache_config.mamba_block_size", False),
                             ("assert mamba_block_size is not None", False),
                             ("(new_req_data.num_computed_tokens - 1) // mamba_block_size", False)]
    assert "differs from vllm 0.32.0 (body) and from vllm 0.31.0" in res.why
    # the structural pattern sees through the line break of the backport
    pat = has_fix(ADD_REQUEST, str(patched), pattern="$N // self.cache_config.mamba_block_size")
    assert pat.answer == "yes" and pat.mode == "structure"
    assert [n for n, _ in pat.matches] == [118, 119]


@pytest.mark.wheels  # real releases from PyPI
def test_pattern_modes() -> None:
    frag = has_fix(ADD_REQUEST, "pip:vllm==0.33.0", pattern="// mamba_block_size")
    assert frag.answer == "yes" and frag.mode == "tokens" and [n for n, _ in frag.matches] == [124]
    assert has_fix(ADD_REQUEST, "pip:vllm==0.31.0", pattern="// mamba_block_size").answer == "no"
    # words that only occur in a comment of the fixed body are not code
    assert has_fix(ADD_REQUEST, "pip:vllm==0.33.0", pattern="mamba blocks").answer == "no"
    rx = has_fix(ADD_REQUEST, "pip:vllm==0.31.0", pattern=r"//\s*self\.cache_config\.block_size$",
                 regex=True)
    assert rx.answer == "yes" and rx.mode == "regex" and [n for n, _ in rx.matches] == [118]


def test_sglang_track_index_math(sglang_latest: Snapshot) -> None:
    res = has_fix("MambaAttnBackendBase._init_track_ssm_indices", str(sglang_latest.root),
                  pattern="($LENS - 1) // $CHUNK + 1")
    assert res.answer == "yes" and res.mode == "structure"
    assert [n for n, _ in res.matches] == [504]
    assert "num_h_states = (extend_seq_lens - 1) // state_chunk_size + 1" in res.matches[0][1]
    assert has_fix("MambaAttnBackendBase._init_track_ssm_indices", str(sglang_latest.root),
                   pattern="chunk boundary").answer == "no"  # docstring words are not code


@pytest.mark.wheels  # real releases from PyPI
def test_cli_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    def run(*argv: str) -> tuple[int, str]:
        try:
            main(list(argv))
        except SystemExit as ex:
            return int(ex.code or 0), capsys.readouterr().out
        return 0, capsys.readouterr().out

    code, out = run("has", ADD_REQUEST, "--in", "pip:vllm==0.33.0", "--fixed-in", FIXED)
    assert code == 0 and out.startswith("yes")
    code, out = run("has", ADD_REQUEST, "--in", "pip:vllm==0.31.0", "--fixed-in", FIXED, "--json")
    assert code == 1 and json.loads(out)["answer"] == "no"
    code, _ = run("has", ADD_REQUEST, "--in", "pip:vllm==0.31.0")
    assert code == 2  # neither --fixed-in nor --pattern: a usage error
