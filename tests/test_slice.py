"""``recon slice``: byte-exact pieces, origin comments, the dependency closure, listings.

Real releases (vLLM 0.33.0, SGLang 0.5.23 from PyPI) for the closure facts
that matter to investigations; the small ``demopkg`` under tests/data/slice
for the shapes of code the walker must handle, each checked by reading it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from recon.errors import ReconError
from recon.slicing import build_slice
from recon.snapshots.model import Snapshot
from recon.snapshots.take import take_snapshot

DATA = Path(__file__).parent / "data" / "slice"
ADJUST = "vllm.config.compilation:CompilationConfig.adjust_cudagraph_sizes_for_spec_decode"
DFLASH = "vllm.model_executor.models.qwen3_dflash"
TRACK = "sglang.srt.layers.attention.linear.gdn_backend:GDNAttnBackend._init_track_ssm_indices"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Snapshot:
    out = tmp_path_factory.mktemp("demo-snap")
    return take_snapshot(f"dir:{DATA / 'demopkg'}", package="demopkg", out=out)


def _load_modules(text: str, tmp: Path) -> dict[str, Any]:
    """The MODULES table of an emitted slice, imported without installing its finder."""
    path = tmp / "slice_under_test.py"
    path.write_text(text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("slice_under_test", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.MODULES


def test_pieces_are_byte_exact_with_origin_and_sha256(vllm_latest: Snapshot, tmp_path: Path) -> None:
    sl = build_slice(vllm_latest, ADJUST)
    modules = _load_modules(sl.text, tmp_path)
    checked = 0
    for name, info in modules.items():
        lines = (vllm_latest.src / info["file"]).read_bytes().decode().splitlines(keepends=True)
        for unit in info["units"]:
            for start, end, sha, text in unit["segments"]:
                original = "".join(lines[start - 1:end])
                assert text[1:] == original, f"{name}:{start}"
                assert hashlib.sha256(original.encode()).hexdigest() == sha
                # the comment above each piece names file:lines and the same sha256
                assert f"# {info['file']}:{start}-{end} sha256={sha}" in sl.text
                checked += 1
    # the method, its class line, the two fields it reads, the class docstring, round_up
    # and the import that binds it in compilation.py
    assert checked == 7
    whats = {(p["module"], p["what"]) for p in sl.pieces}
    assert ("vllm.utils.math_utils", "def round_up") in whats
    assert ("vllm.config.compilation", "import round_up") in whats
    assert ("vllm.config.compilation",
            "CompilationConfig.adjust_cudagraph_sizes_for_spec_decode") in whats
    target = sl.targets[0]
    assert (target["file"], target["line"], target["kind"]) == ("vllm/config/compilation.py",
                                                                1537, "method")


def test_method_class_is_a_shell_without_decorators(vllm_latest: Snapshot) -> None:
    sl = build_slice(vllm_latest, ADJUST)
    head = next(p for p in sl.pieces if p["what"].startswith("class CompilationConfig"))
    # line 382 is `@config` (pydantic dataclass machinery): a shell starts at the class line
    assert vllm_latest.read_text("vllm/config/compilation.py").splitlines()[381] == "@config"
    assert (head["start"], head["end"]) == (383, 383)
    assert "shell" in head["what"]
    # nothing from pydantic, envs or the platform: the method does not need them
    assert sl.outside == {}
    assert not any(p["module"].startswith("vllm.platforms") for p in sl.pieces)


def test_annotations_are_lazy(vllm_latest: Snapshot, tmp_path: Path) -> None:
    """`def dflash_has_any_non_causal(config: Qwen3Config)` must not need Qwen3Config."""
    sl = build_slice(vllm_latest, f"{DFLASH}:dflash_has_any_non_causal")
    assert "transformers.Qwen3Config" not in sl.outside
    assert [p["what"] for p in sl.pieces] == ["assign _SLIDING_ATTENTION",
                                              "def _dflash_layer_causal",
                                              "def dflash_has_any_non_causal"]
    path = sl.write(tmp_path / "dflash_slice.py")
    # load in this process, no stubs at all: the def runs without transformers
    spec = importlib.util.spec_from_file_location("dflash_slice", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    finder = mod.install()
    try:
        _, fn = finder.load(f"{DFLASH}:dflash_has_any_non_causal")
        assert fn.__annotations__ == {"config": "Qwen3Config", "return": "bool"}
        assert fn.__code__.co_filename == "vllm/model_executor/models/qwen3_dflash.py"
        assert fn.__code__.co_firstlineno == 76
        assert fn.__module__ == DFLASH
    finally:
        finder.remove()
    assert DFLASH not in sys.modules


def test_closure_crosses_modules_and_keeps_decorators(sglang_latest: Snapshot) -> None:
    sl = build_slice(sglang_latest, "sglang.kernels.ops.attention.fla.index:prepare_chunk_offsets")
    whats = [(p["file"], p["what"]) for p in sl.pieces]
    # @tensor_cache is defined in the package: its definition comes along
    assert ("sglang/kernels/ops/attention/fla/utils.py", "def tensor_cache") in whats
    piece = next(p for p in sl.pieces if p["what"] == "def prepare_chunk_offsets")
    text = sglang_latest.read_text(piece["file"]).splitlines()
    assert text[piece["start"] - 1] == "@tensor_cache"  # the piece starts at its decorator
    assert set(sl.outside) == {"torch", "torch.cat", "triton", "triton.cdiv"}


def test_inherited_method_and_outside_names(sglang_latest: Snapshot) -> None:
    sl = build_slice(sglang_latest, TRACK)
    t = sl.targets[0]
    # found on the base class, reached from the subclass the user named
    assert t["defined_in"] == ("sglang.srt.layers.attention.hybrid_linear_attn_backend:"
                               "MambaAttnBackendBase")
    assert (t["file"], t["line"]) == ("sglang/srt/layers/attention/hybrid_linear_attn_backend.py",
                                      445)
    whats = {p["what"] for p in sl.pieces}
    # self.mamba_chunk_size (a property) and self._has_cpu_prefill_track_metadata come along
    assert {"MambaAttnBackendBase.mamba_chunk_size",
            "MambaAttnBackendBase._has_cpu_prefill_track_metadata"} <= whats
    # isinstance(self, Mamba2AttnBackend): the class is there, as a shell
    assert any(w.startswith("class Mamba2AttnBackend (shell") for w in whats)
    for name in ("torch", "torch.cumsum", "torch.zeros_like", "torch.full"):
        assert name in sl.outside, name
    assert "abc.ABC" not in sl.outside  # the standard library is real, not listed


def test_demo_closure_shapes(demo: Snapshot) -> None:
    # re-export through the package __init__, relative imports, a default value
    sl = build_slice(demo, "demopkg.core:uses_default")
    got = [(p["module"], p["start"], p["what"]) for p in sl.pieces]
    assert got == [("demopkg", 3, "import scale"), ("demopkg.core", 9, "import scale"),
                   ("demopkg.core", 24, "assign DEFAULTS"), ("demopkg.core", 27, "def uses_default"),
                   ("demopkg.sub.helpers", 3, "assign FACTOR"), ("demopkg.sub.helpers", 7,
                                                                 "def scale")]
    assert sl.outside == {}  # PretrainedConfig is only an annotation (and under TYPE_CHECKING)
    # a class used as a value is kept whole; methods only when their name is read
    sl = build_slice(demo, "demopkg.core:make_layer")
    whats = [p["what"] for p in sl.pieces if p["module"] == "demopkg.core"]
    assert "Layer._twice" in whats and "Layer.__init__" in whats
    assert "Layer.unrelated" not in whats
    assert set(sl.outside) == {"torch.nn", "torch.nn.Module"}
    # try/except ImportError around an optional dependency: listed as outside
    sl = build_slice(demo, "demopkg.core:has_flash")
    assert "flash_attn_missing" in sl.outside


def test_unresolved_names_listed_by_line(demo: Snapshot) -> None:
    sl = build_slice(demo, "demopkg.core:broken")
    assert sl.unresolved == [{"file": "demopkg/core.py", "line": 70,
                              "name": "demopkg.core.not_defined_anywhere",
                              "why": "not defined in the package"}]
    assert "#   demopkg/core.py:70  demopkg.core.not_defined_anywhere" in sl.text


def test_stubbed_names_stop_the_walk(vllm_latest: Snapshot) -> None:
    full = build_slice(vllm_latest, f"{DFLASH}:_resolve_layer_attention")
    assert any(p["what"] == "def get_current_vllm_config" for p in full.pieces)
    cut = build_slice(vllm_latest, f"{DFLASH}:_resolve_layer_attention",
                      stubs=["get_current_vllm_config"])
    assert not any("get_current_vllm_config" in p["what"] for p in cut.pieces)
    assert cut.meta["stub_points"] == [[DFLASH, "get_current_vllm_config",
                                        "get_current_vllm_config"]]


def test_qualname_forms_and_errors(vllm_latest: Snapshot) -> None:
    dotted = build_slice(vllm_latest, ADJUST.replace(":", "."))
    short = build_slice(vllm_latest, "CompilationConfig.adjust_cudagraph_sizes_for_spec_decode")
    assert dotted.targets[0]["qualname"] == short.targets[0]["qualname"] == ADJUST
    with pytest.raises(ReconError, match="did you mean dflash_has_any_non_causal"):
        build_slice(vllm_latest, f"{DFLASH}:dflash_has_any_non_causl")
    with pytest.raises(ReconError, match="did you mean vllm.config.compilation"):
        build_slice(vllm_latest, "vllm.config.compilaton:CompilationConfig.x")
    with pytest.raises(ReconError, match="no member 'adjust'"):
        build_slice(vllm_latest, "vllm.config.compilation:CompilationConfig.adjust")


def test_slice_cache_and_edit_detection(vllm_latest: Snapshot, tmp_path: Path) -> None:
    a = build_slice(vllm_latest, ADJUST)
    assert build_slice(vllm_latest, ADJUST) is a  # cached
    assert a.meta["edited_files"] == []


def test_written_slice_runs_standalone(demo: Snapshot, tmp_path: Path) -> None:
    """`python slice.py` loads every target (recording stubs come from recon when installed)."""
    out = tmp_path / "layer_slice.py"
    build_slice(demo, ["demopkg.core:make_layer", "demopkg.core:Counter.bump"]).write(out)
    text = out.read_text()
    assert re.search(r"^# recon slice of demopkg", text, re.M)
    proc = subprocess.run([sys.executable, str(out)], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "demopkg.core:make_layer: <function make_layer" in proc.stdout
    assert "demopkg.core:Counter.bump: <function Counter.bump" in proc.stdout
