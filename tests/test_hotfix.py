"""``recon hotfix`` on real releases: the align-mode column fix taken from vLLM 0.32.0 into 0.29.0.

The field case: 0.29.0's ``MambaHybridModelState.add_request`` divides the resumed
prefix by ``cache_config.block_size`` (16 when a drafter group keeps 16-token
blocks), so a 101,376-token prefix seeds the running mamba state at column 6335 of
a 228-wide block-table row (the align-mode column crash); 0.32.0 divides by
``mamba_block_size`` (1152). ``recon bisect`` names 0.32.0 as the release that
changed the function. Here the hotfix must replace exactly that method, be proven
by re-indexing, ``recon has``, the in-container check and the recipe before and
after (column 6335 out of range -> 87 in range), refuse what is not a one-file
fix (names the image's release lacks, compiled code, more than the named pieces),
work for SGLang the same way, and -- in a real container built from the wheel,
with the patched file mounted read-only over the installed one -- be the code
the interpreter runs, stale ``__pycache__`` or not.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from recon.diffing.has import has_fix
from recon.errors import ReconError
from recon.hotfix import HotfixRefused, HotfixResult, is_hotfix_folder, make_hotfix, write_hotfix
from recon.hotfix.patchfile import apply_patch, parse_patch
from recon.hotfix.splice import lines_of
from recon.snapshots.model import Snapshot
from recon.snapshots.take import take_snapshot
from recon.snapshots.verify import verify_snapshot

REL = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"
MODULE = "vllm.v1.worker.gpu.model_states.mamba_hybrid"
ADD = f"{MODULE}:MambaHybridModelState.add_request"
#: the field numbers: a 101,376-token prefix, a 16-token drafter block, 1152-token mamba blocks
FIELD = {"prefix_tokens": 101376, "cache_block_size": 16, "mamba_block_size": 1152,
         "max_model_len": 262144}
VERIFY = Path(__file__).resolve().parent.parent / "recon" / "hotfix" / "verify_hotfix.py"


@pytest.fixture(scope="module")
def v029(pip_snapshot: Callable[..., Snapshot]) -> Snapshot:
    return pip_snapshot("vllm==0.29.0")


@pytest.fixture(scope="module")
def v032(pip_snapshot: Callable[..., Snapshot]) -> Snapshot:
    return pip_snapshot("vllm==0.32.0")


@pytest.fixture(scope="module")
def field(v029: Snapshot, v032: Snapshot, tmp_path_factory: pytest.TempPathFactory) -> HotfixResult:
    """The field hotfix, with the recipe that shows the align-mode column crash as its proof."""
    out = tmp_path_factory.mktemp("hotfix") / "mamba-column"
    return make_hotfix(v029, fixed_in=v032, functions=["MambaHybridModelState.add_request"],
                       recipe="vllm-mamba-align-column", options=dict(FIELD), output=out)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- the field case --------------------------------------------------------------------------
def test_field_hotfix_replaces_exactly_add_request(field: HotfixResult, v029: Snapshot,
                                                   v032: Snapshot) -> None:
    out = Path(field.output or "")
    original = v029.read_bytes(REL)
    patched = (out / "mamba_hybrid.py").read_bytes()
    assert [p.qualname for p in field.pieces] == [ADD] and field.file == REL
    (a1, a2), (b1, b2) = field.pieces[0].image_lines, field.pieces[0].patched_lines
    old, new = lines_of(original), lines_of(patched)
    # every line outside the method is the image's own, byte for byte
    assert old[:a1 - 1] == new[:b1 - 1] and old[a2:] == new[b2:]
    # the method is 0.32.0's, byte for byte (same indentation: nothing re-indented)
    fixed = lines_of(v032.read_bytes(REL))
    start = fixed.index(b"    def add_request(self, req_index: int, new_req_data: NewRequestData) -> None:\n")
    assert new[b1 - 1:b2] == fixed[start:start + (b2 - b1 + 1)]
    assert (a1, a2, b1, b2) == (115, 123, 115, 128)
    manifest = json.loads((out / "hotfix.json").read_text())
    assert manifest["kind"] == "recon-hotfix"
    assert manifest["original"] == {"sha256": _sha(original), "size": len(original)}
    assert manifest["patched"]["sha256"] == _sha(patched) == field.patched["sha256"]
    assert [p["qualname"] for p in manifest["pieces"]] == [ADD]
    assert manifest["fixed_in"]["version"] == "0.32.0" and manifest["snapshot"]["version"] == "0.29.0"
    diff = (out / "hotfix.diff").read_text()
    assert diff == field.diff and diff.startswith(f"--- a/{REL}\n+++ b/{REL}\n")
    assert "+                (new_req_data.num_computed_tokens - 1) // mamba_block_size" in diff
    assert apply_patch(original, parse_patch(diff.encode())[0], REL) == patched
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "hotfix.diff", "hotfix.json",
                                                     "mamba_hybrid.py", "verify_hotfix.py"]
    assert (out / "verify_hotfix.py").read_bytes() == VERIFY.read_bytes()
    assert oct((out / "mamba_hybrid.py").stat().st_mode & 0o777) == "0o644"


def test_field_hotfix_proof_before_and_after(field: HotfixResult) -> None:
    """The recipe shows the align-mode column crash on 0.29.0 and not on the patched release."""
    proof = field.proof
    assert proof.reindexed[ADD]["verdict"].startswith("the same code as vllm 0.32.0")
    assert [c["check"] for c in proof.verify] == ["where", "bytes", "bytecode", "piece"]
    assert all(c["ok"] for c in proof.verify)
    assert [(h["qualname"], h["answer"]) for h in proof.has] == [(ADD, "yes")]
    recipe = proof.recipe
    assert recipe is not None and recipe.fixed
    before, after = recipe.before["values"], recipe.after["values"]
    assert before["running-state column"] == 6335 and before["mamba block-table row width"] == 228
    assert after["running-state column"] == 87 and after["mamba block-table row width"] == 228
    assert "= 16" in before["divisor"] and "= 1152" in after["divisor"]
    assert len(recipe.errors(recipe.before)) == 1 and "column 6335" in recipe.errors(recipe.before)[0]
    assert recipe.errors(recipe.after) == []
    readme = (Path(field.output or "") / "README.md").read_text()
    assert "running-state column = 6335" in readme and "running-state column = 87" in readme


def test_patched_snapshot_is_a_real_snapshot(field: HotfixResult, v029: Snapshot,
                                             v032: Snapshot) -> None:
    snap = Snapshot.open(field.patched_snapshot["name"])  # by name, as the README says
    assert snap.root == Path(field.patched_snapshot["path"])
    assert snap.manifest.parent["name"] == v029.name
    assert snap.manifest.source["scheme"] == "hotfix"
    assert snap.manifest.files[REL].hotfix is True
    assert snap.manifest.files[REL].sha256 == field.patched["sha256"]
    assert len(snap.files) == len(v029.files)
    assert verify_snapshot(snap).ok
    # the library behind `recon has`: yes on the patched snapshot, no on the image
    assert has_fix("MambaHybridModelState.add_request", str(snap.root), fixed_in=str(v032.root),
                   unfixed=str(v029.root)).answer == "yes"
    assert has_fix("MambaHybridModelState.add_request", str(v029.root), fixed_in=str(v032.root),
                   unfixed=str(v029.root)).answer == "no"


def test_readme_lines(field: HotfixResult) -> None:
    readme = (Path(field.output or "") / "README.md").read_text()
    sha = field.patched["sha256"]
    for text in ("## docker run", '-v "$PWD/mamba-column/mamba_hybrid.py":SITE/' + REL + ":ro",
                 "## docker compose", "## Kubernetes (ConfigMap + subPath)",
                 f"kubectl create configmap recon-hotfix-{sha[:12]}", "subPath: \"mamba_hybrid.py\"",
                 "readOnly: true", "## Verify", f"--sha256 {sha}",
                 "--piece MambaHybridModelState.add_request=115 --import < mamba-column/verify_hotfix.py",
                 "PYTHONDONTWRITEBYTECODE", "## Rollback",
                 f"kubectl delete configmap recon-hotfix-{sha[:12]}",
                 "--module vllm.v1.worker.gpu.model_states.mamba_hybrid --where"):
        assert text in readme, text
    assert not field.mount["site_known"]  # a wheel does not say where an image installs it


def test_the_diff_as_a_patch_through_the_cli(field: HotfixResult, v029: Snapshot, v032: Snapshot,
                                             tmp_path: Path) -> None:
    """``--patch hotfix.diff`` gives the same file as ``--function``; ``--json`` has identifier keys."""
    res = subprocess.run([sys.executable, "-m", "recon", "hotfix", str(v029.root), "--patch",
                          str(Path(field.output or "") / "hotfix.diff"), "--from", str(v032.root),
                          "--site", "/usr/local/lib/python3.12/dist-packages", "-o",
                          str(tmp_path / "again"), "--json"],
                         capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["kind"] == "recon-hotfix" and got["patched"]["sha256"] == field.patched["sha256"]
    assert [p["qualname"] for p in got["pieces"]] == [ADD] and got["patch"]["file"] == f"b/{REL}"
    assert [h["answer"] for h in got["proof"]["has"]] == ["yes"]
    assert got["mount"]["target"] == f"/usr/local/lib/python3.12/dist-packages/{REL}"
    assert got["mount"]["site_known"] is True
    assert all(k.isidentifier() for k in got) and all(k.isidentifier() for k in got["mount"])


# -- refusals: each rule, on the real releases ------------------------------------------------
def _refused(rule: str, *args: object, **kwargs: object) -> str:
    with pytest.raises(HotfixRefused) as err:
        make_hotfix(*args, **kwargs)  # type: ignore[arg-type]
    assert err.value.rule == rule, str(err.value)
    return str(err.value)


def test_refuses_names_the_image_release_lacks(v029: Snapshot, v032: Snapshot,
                                                tmp_path: Path) -> None:
    """0.32.0's prepare_attn reads InputBatch.prefill_runs_as_decode_np, a field 0.29.0 lacks."""
    msg = _refused("names", v029, fixed_in=v032, functions=["MambaHybridModelState.prepare_attn"],
                   output=tmp_path / "out")
    assert "vllm.v1.worker.gpu.input_batch:InputBatch.prefill_runs_as_decode_np" in msg
    assert "input_batch.py:124" in msg and "mamba_hybrid.py:266" in msg
    assert not (tmp_path / "out").exists() and not list(tmp_path.iterdir())


def test_refuses_state_kept_by_a_method_the_image_lacks(v029: Snapshot, v032: Snapshot) -> None:
    """0.32.0's preprocess_state reads self._mamba_ctx, which 0.32.0 sets in initialize_kv_cache."""
    msg = _refused("names", v029, fixed_in=v032,
                   functions=["MambaHybridModelState.preprocess_state"])
    assert "MambaHybridModelState._mamba_ctx" in msg and "initialize_kv_cache" in msg


def test_refuses_new_imports_and_new_definitions(v029: Snapshot, v032: Snapshot) -> None:
    whole = _refused("names", v029, fixed_in=v032, functions=["MambaHybridModelState"])
    assert "vllm.v1.worker.gpu.block_table:BlockTables" in whole and "new imports" in whole
    assert "from vllm.v1.worker.gpu.block_table import BlockTables" in whole
    added = _refused("scope", v029, fixed_in=v032,
                     functions=["MambaHybridModelState.initialize_kv_cache"])
    assert "is not in vllm 0.29.0" in added and "name the class MambaHybridModelState" in added


def test_refuses_a_call_the_image_callee_cannot_take(v029: Snapshot, v032: Snapshot) -> None:
    """0.32.0's get_rope_state builds RopeState without has_delta, which 0.29.0's requires."""
    msg = _refused("names", v029, fixed_in=v032,
                   functions=["vllm.v1.worker.gpu.mm.rope:get_rope_state"])
    assert "vllm.v1.worker.gpu.mm.rope:RopeState.__init__" in msg and "called without has_delta" in msg
    assert "ModelConfig.mrope_num_dims" in msg  # and a config field 0.29.0 does not have


def test_refuses_more_than_the_named_pieces_through_the_cli(v029: Snapshot, v032: Snapshot,
                                                           tmp_path: Path) -> None:
    """Two files; a signature its callers in the image would break on (exit 6, one line)."""
    def recon(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "recon", "hotfix", str(v029.root), "--from",
                               str(v032.root), *args, "-o", str(tmp_path / "out")],
                              capture_output=True, text=True, timeout=600, check=False)

    res = recon("--function", "MambaHybridModelState.add_request", "--function",
                "vllm.v1.worker.gpu.input_batch:InputBatch.make_dummy")
    err = res.stderr.strip().splitlines()
    assert res.returncode == 6 and len(err) == 1, res.stderr
    assert "refused (scope)" in err[0] and "2 files" in err[0]
    res = recon("--function", "vllm._custom_ops:gptq_shuffle")
    assert res.returncode == 6 and "Parameter was removed(q_perm)" in res.stderr
    assert "its callers would have to change too" in res.stderr
    assert not (tmp_path / "out").exists() and not res.stdout


def test_refuses_compiled_code(v029: Snapshot, v032: Snapshot, field: HotfixResult,
                               tmp_path: Path) -> None:
    """A compiled module of the release, and a patch that also touches a kernel source."""
    msg = _refused("compiled", v029, fixed_in=v032,
                   functions=["vllm._C_stable_libtorch:anything"])
    assert "_C_stable_libtorch.abi3.so" in msg
    kernel = (field.diff + "--- a/csrc/mamba/causal_conv1d.cu\n+++ b/csrc/mamba/causal_conv1d.cu\n"
              "@@ -1,1 +1,1 @@\n-int x;\n+int y;\n")
    (tmp_path / "fix.diff").write_text(kernel)
    msg = _refused("compiled", v029, patch=tmp_path / "fix.diff")
    assert "csrc/mamba/causal_conv1d.cu" in msg


def test_refuses_a_patch_beyond_the_pieces(v029: Snapshot, v032: Snapshot, field: HotfixResult,
                                          tmp_path: Path) -> None:
    """The whole upstream change of the file, and one hunk plus an import line, are refused."""
    def text(snap: Snapshot) -> list[str]:
        return snap.read_text(REL).splitlines(keepends=True)

    whole = "".join(difflib.unified_diff(text(v029), text(v032), f"a/{REL}", f"b/{REL}"))
    (tmp_path / "whole.diff").write_text(whole)
    msg = _refused("scope", v029, patch=tmp_path / "whole.diff")
    assert "(MambaHybridModelState)" in msg and "line 24," in msg  # the new BlockTables import
    header = f"--- a/{REL}\n+++ b/{REL}\n"
    import_hunk = "".join(difflib.unified_diff(
        text(v029)[:22], [*text(v029)[:21], "import os\n", text(v029)[21]], f"a/{REL}",
        f"b/{REL}"))[len(header):]
    (tmp_path / "import.diff").write_text(header + import_hunk + field.diff[len(header):])
    msg = _refused("scope", v029, patch=tmp_path / "import.diff")
    assert "(MambaHybridModelState.add_request)" in msg and "line 22 " in msg


def test_a_patch_for_another_file_version_does_not_apply(v029: Snapshot, v032: Snapshot,
                                                         field: HotfixResult,
                                                         tmp_path: Path) -> None:
    (tmp_path / "fix.diff").write_text(field.diff)
    with pytest.raises(ReconError, match="hunk 1 of the patch .* does not apply"):
        make_hotfix(v032, patch=tmp_path / "fix.diff")  # 0.32.0 already reads differently there


# -- small packages for what no release pair shows ------------------------------------------
def _release(root: Path, files: dict[str, bytes]) -> Snapshot:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return take_snapshot(f"dir:{root}", out=root.parent / "snaps", name=root.name)


def test_refuses_compiled_code_the_new_version_reaches(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECON_CACHE", str(tmp_path / "cache"))
    so = b"\x7fELF" + bytes(64)
    old = _release(tmp_path / "old", {"vllm/__init__.py": b"", "vllm/ops.py":
                                      b"def f(x):\n    return x + 1\n",
                                      "vllm/_kern.cpython-311-x86_64-linux-gnu.so": so})
    new = _release(tmp_path / "new", {"vllm/__init__.py": b"", "vllm/ops.py":
                                      b"def f(x):\n    from vllm import _kern\n\n"
                                      b"    return _kern.fast(x)\n",
                                      "vllm/_kern.cpython-311-x86_64-linux-gnu.so": so})
    msg = _refused("compiled", old, fixed_in=new, functions=["vllm.ops:f"])
    assert "vllm._kern" in msg and "compiled" in msg


def test_splice_reindents_structurally_and_keeps_strings(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A method taken from a deeper nesting keeps its multi-line string's bytes."""
    monkeypatch.setenv("RECON_CACHE", str(tmp_path / "cache"))
    old_src = (b"# header comment\nimport os\n\n\nclass A:\n    # before f\n    def f(self):\n"
               b"        return 'old'\n    # trailing comment of f\n\n    def g(self):\n"
               b"        return os.sep\n")
    new_src = (b"import os\n\nif True:\n    class A:\n        @staticmethod\n"
               b"        def helper():\n            return 1\n\n"
               b"        def f(self):\n            text = '''line one\n    kept as is'''\n"
               b"            return text  # why\n")
    old = _release(tmp_path / "old", {"vllm/__init__.py": b"", "vllm/m.py": old_src})
    new = _release(tmp_path / "new", {"vllm/__init__.py": b"", "vllm/m.py": new_src})
    res = make_hotfix(old, fixed_in=new, functions=["vllm.m:A.f"])
    patched = res.patched_bytes.decode()
    assert patched == old_src.decode().replace(
        "    def f(self):\n        return 'old'\n",
        "    def f(self):\n        text = '''line one\n    kept as is'''\n        return text  # why\n")
    scope: dict[str, object] = {}
    exec(compile(patched, "m.py", "exec"), scope)  # noqa: S102 - the spliced module runs
    assert scope["A"]().f() == "line one\n    kept as is"  # type: ignore[operator]


# -- the output folder ------------------------------------------------------------------------
def test_output_folder_is_guarded(field: HotfixResult, tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(ReconError, match="not a hotfix folder recon wrote"):
        write_hotfix(field, mine, force=True)
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    snap = tmp_path / "snap"
    snap.mkdir()
    (snap / "manifest.json").write_text('{"format": 1}')
    with pytest.raises(ReconError, match="not a hotfix folder"):
        write_hotfix(field, snap, force=True)
    dest = tmp_path / "fix"
    write_hotfix(field, dest)
    with pytest.raises(ReconError, match="already exists"):
        write_hotfix(field, dest)
    assert is_hotfix_folder(dest)
    write_hotfix(field, dest, force=True)
    assert is_hotfix_folder(dest)
    assert not [p.name for p in tmp_path.iterdir() if ".partial-" in p.name]


# -- SGLang, the same way ---------------------------------------------------------------------
def test_sglang_hotfix_runs_the_new_code(pip_snapshot: Callable[..., Snapshot]) -> None:
    """SGLang 0.5.23's _alloc_swa_page_table (it checks the SWA pool itself) into 0.5.10."""
    from recon.slicing import run_function

    old, new = pip_snapshot("sglang==0.5.10"), pip_snapshot("sglang==0.5.23")
    site = "/usr/local/lib/python3.12/dist-packages"
    res = make_hotfix(old, fixed_in=new, functions=["TRTLLMHAAttnBackend._alloc_swa_page_table"],
                      site=site)
    q = "sglang.srt.layers.attention.trtllm_mha_backend:TRTLLMHAAttnBackend._alloc_swa_page_table"
    assert [p.qualname for p in res.pieces] == [q]
    assert res.mount["target"] == f"{site}/sglang/srt/layers/attention/trtllm_mha_backend.py"
    assert [h["answer"] for h in res.proof.has] == ["yes"] and all(c["ok"] for c in res.proof.verify)
    patched = Snapshot.open(res.patched_snapshot["path"])
    runs = [run_function(s, q, args={"max_bs": 2, "max_num_pages": 3}, real=["torch"],
                         self_attrs={"use_sliding_window_kv_pool": True, "_swa_kv_pool": None,
                                     "device": "cpu"}) for s in (old, patched)]
    assert runs[0].value == [[0, 0, 0], [0, 0, 0]] and runs[1].value is None


# -- verify_hotfix.py and stale bytecode, on this machine ----------------------------------------
def _verify(root: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    full.update({"PYTHONPATH": str(root), **(env or {})})
    res = subprocess.run([sys.executable, "-S", str(VERIFY), *args, "--json"], env=full,
                         capture_output=True, text=True, timeout=60, check=False)
    return res.returncode, json.loads(res.stdout)


def _compile(path: Path, mode: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SOURCE_DATE_EPOCH"}
    subprocess.run([sys.executable, "-m", "compileall", "-q", "--invalidation-mode", mode,
                    str(path)], check=True, env=env, timeout=60)


def test_verify_tells_stale_bytecode_from_the_mounted_file(tmp_path: Path) -> None:
    """What the README says about __pycache__, checked with this interpreter's own loader."""
    pkg = tmp_path / "site" / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('no package code runs in verify')\n")
    module = pkg / "m.py"
    original, patched = b"def f():\n    return 1\n", b"def f():\n    return 22\n"
    module.write_bytes(original)
    os.utime(module, (1_700_000_000, 1_700_000_000))
    _compile(module, "timestamp")
    args = ("--module", "pkg.m", "--sha256", _sha(patched), "--piece", "f=1")
    status, report = _verify(tmp_path / "site", *args)
    assert status == 1 and report["checks"][1]["check"] == "bytes"  # the image's own file
    module.write_bytes(patched)  # other size, other mtime: the timestamp .pyc is ignored
    status, report = _verify(tmp_path / "site", *args)
    assert status == 0, report
    assert "recorded mtime and size differ" in report["checks"][2]["detail"]
    same_size = b"def f():\n    return 2\n"
    module.write_bytes(same_size)  # same size as the original, mtime put back: stale
    os.utime(module, (1_700_000_000, 1_700_000_000))
    status, report = _verify(tmp_path / "site", "--module", "pkg.m", "--sha256", _sha(same_size))
    assert status == 2 and "STALE" in report["checks"][2]["detail"]
    module.write_bytes(original)
    _compile(module, "unchecked-hash")
    module.write_bytes(patched)  # never compared with an unchecked hash-based .pyc
    status, report = _verify(tmp_path / "site", *args, env={"PYTHONDONTWRITEBYTECODE": "1"})
    assert status == 2 and "unchecked hash-based" in report["checks"][2]["detail"]
    shutil.rmtree(pkg / "__pycache__")  # what a tmpfs over __pycache__ does
    assert _verify(tmp_path / "site", *args)[0] == 0


# -- a real container: the patched file mounted read-only over the installed one ----------------
SYSTEM_PY = "/usr/bin/python3.11"
IMAGE_SITE = "usr/local/lib/python3.11/dist-packages"
#: what the import of the module needs from the wheel: the package folders on its path
PACKAGE_FILES = {"vllm/__init__.py", "vllm/v1/__init__.py", "vllm/v1/worker/__init__.py",
                 "vllm/v1/worker/gpu/__init__.py", "vllm/v1/worker/gpu/model_states/__init__.py", REL}
_STDLIB_SKIP = {"test", "tests", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3",
                "__pycache__", "site-packages", "dist-packages", "pydoc_data"}


def _python_layer(path: Path) -> Path:
    """The machine's Debian Python 3.11 (binary, shared libraries, standard library) as a layer."""
    from tests.imagekit import LayerBuilder

    layer = LayerBuilder(path)
    layer.file(SYSTEM_PY.lstrip("/"), Path(SYSTEM_PY).read_bytes(), mode=0o755)
    layer.symlink("usr/bin/python3", "python3.11")
    ldd = subprocess.run(["ldd", SYSTEM_PY], capture_output=True, text=True, check=True).stdout
    for lib in {w for w in ldd.split() if w.startswith("/")}:
        layer.file(lib.lstrip("/"), Path(lib).resolve().read_bytes(), mode=0o755)
    stdlib = Path("/usr/lib/python3.11")
    for root, dirs, files in os.walk(stdlib):
        dirs[:] = sorted(d for d in dirs if d not in _STDLIB_SKIP and not d.startswith("config-"))
        for name in sorted(files):
            src = Path(root) / name
            if name == "sitecustomize.py" or name.endswith(".pyc") or src.is_symlink():
                continue
            layer.file(str(src).lstrip("/"), src.read_bytes(), mode=0o644)
    return layer.close()


def _vllm_layer(path: Path, wheel: Path, original: bytes, mode: str, work: Path) -> Path:
    """The package files the import path needs, plus the image's own .pyc of the original
    (compiled by the image's Python for the file's in-image mtime, 1,700,000,000)."""
    from tests.imagekit import LayerBuilder

    src = work / mode / "mamba_hybrid.py"
    src.parent.mkdir(parents=True)
    src.write_bytes(original)
    os.utime(src, (1_700_000_000, 1_700_000_000))  # LayerBuilder's mtime for every entry
    env = {k: v for k, v in os.environ.items() if k != "SOURCE_DATE_EPOCH"}
    subprocess.run([SYSTEM_PY, "-m", "compileall", "-q", "--invalidation-mode", mode, str(src)],
                   check=True, env=env, timeout=60)
    pyc = next((src.parent / "__pycache__").glob("mamba_hybrid.*.pyc"))
    layer = LayerBuilder(path).from_wheel(wheel, prefix=IMAGE_SITE,
                                          keep=lambda n: n in PACKAGE_FILES)
    folder = f"{IMAGE_SITE}/{REL.rpartition('/')[0]}/__pycache__"
    return layer.file(f"{folder}/{pyc.name}", pyc.read_bytes()).close()


@pytest.fixture(scope="module")
def hotfix_images(v029: Snapshot, docker_client, tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN001, ANN201
    """Two images of vLLM 0.29.0's files on Debian's Python: timestamp and unchecked-hash .pyc."""
    from recon.acquire.sources.pip import fetch_wheel
    from tests.imagekit import write_docker_archive

    if not Path(SYSTEM_PY).is_file() or shutil.which("ldd") is None:
        pytest.skip(f"needs {SYSTEM_PY} and ldd to build a Python image offline")
    work = tmp_path_factory.mktemp("hotfix-image")
    wheel = fetch_wheel("vllm==0.29.0")
    python = _python_layer(work / "python.tar")
    tags = {}
    for mode in ("timestamp", "unchecked-hash"):
        tag = f"recon-test/hotfix-{mode}:1"
        layer = _vllm_layer(work / f"{mode}.tar", wheel, v029.read_bytes(REL), mode, work)
        archive = write_docker_archive(work / f"{mode}-image.tar", [python, layer], tag=tag,
                                       env=["PATH=/usr/local/bin:/usr/bin:/bin"])
        with open(archive, "rb") as fh:
            docker_client.images.load(fh.read())
        tags[mode] = tag
    yield tags
    for tag in tags.values():
        docker_client.images.remove(tag, force=True)


def _in_container(client, image: str, python: str, args: list[str], *,  # noqa: ANN001
                  mounts: dict[str, str], env: dict[str, str] | None = None,
                  tmpfs: dict[str, str] | None = None) -> tuple[int, str]:
    volumes = {host: {"bind": target, "mode": "ro"} for host, target in mounts.items()}
    box = client.containers.run(image, command=args, entrypoint=[python], volumes=volumes,
                                environment=env or {}, tmpfs=tmpfs or {}, network_mode="none",
                                detach=True)
    try:
        status = box.wait(timeout=120)["StatusCode"]
        return status, box.logs().decode()
    finally:
        box.remove(force=True)


@pytest.mark.docker
@pytest.mark.slow
def test_mounted_hotfix_is_what_the_container_runs(hotfix_images: dict[str, str], v032: Snapshot,
                                                   docker_client, tmp_path: Path) -> None:  # noqa: ANN001
    """A snapshot of the real image (docker:), the hotfix from 0.32.0, and the mount it prints."""
    snap = take_snapshot(f"docker:{hotfix_images['timestamp']}", out=tmp_path / "snaps")
    assert snap.version == "0.29.0"
    res = make_hotfix(snap, fixed_in=v032, functions=["MambaHybridModelState.add_request"],
                      output=tmp_path / "mamba-column")
    target = f"/{IMAGE_SITE}/{REL}"
    assert res.mount["site_known"] and res.mount["target"] == target  # from the manifest
    readme = (tmp_path / "mamba-column" / "README.md").read_text()
    assert f":{target}:ro" in readme and res.mount["python"] in readme
    folder = tmp_path / "mamba-column"
    verify = {str(folder / "verify_hotfix.py"): "/tmp/verify_hotfix.py"}
    hotfix = {str(folder / "mamba_hybrid.py"): target, **verify}
    args = ["/tmp/verify_hotfix.py", *res.mount["verify_args"].split()]
    py, image = res.mount["python"], hotfix_images["timestamp"]
    status, out = _in_container(docker_client, image, py, args, mounts=verify)
    assert status == 1, out  # not mounted: the image's own file, its own (valid) .pyc
    assert "FAIL bytes" in out and "recorded mtime and size match" in out
    assert "cache_config" in out and "mamba_block_size" not in out  # the old divisor
    status, out = _in_container(docker_client, image, py, args, mounts=hotfix)
    assert status == 0, out  # mounted: the stale timestamp .pyc is not used
    assert f"ok   where    {target}" in out and "recorded mtime and size differ" in out
    assert "MambaHybridModelState.add_request defined at line 115" in out
    assert "mamba_block_size" in out  # the bytecode that runs reads the fixed divisor
    image = hotfix_images["unchecked-hash"]
    for env in ({}, {"PYTHONDONTWRITEBYTECODE": "1"}):
        status, out = _in_container(docker_client, image, py, args, mounts=hotfix, env=env)
        assert status == 2 and "STALE" in out and "unchecked hash-based" in out, out
    status, out = _in_container(docker_client, image, py, args, mounts=hotfix,
                                tmpfs={res.mount["pycache"]: ""})  # the README's remedy
    assert status == 0, out
