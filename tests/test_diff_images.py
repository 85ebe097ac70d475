"""``recon diff`` between two images built with different packages and environment.

The images are real ``docker save`` archives (no engine needed for
``docker-archive:`` sources) made from real wheels: image A carries a slice
of vLLM 0.31.0 and transformers 5.24.0 on Python 3.11, image B the same
slice of vLLM 0.32.0 and sglang 0.5.23 on Python 3.12, with different
environment, entrypoint, labels and working directory. Every expected
difference below is written into the images by this file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from recon.acquire.sources.pip import fetch_wheel
from recon.cli import main
from recon.diffing import DiffResult, diff
from tests.imagekit import LayerBuilder, write_docker_archive

KEEP = ("vllm/__init__.py", "vllm/v1/worker/gpu/model_states/")
ADD_REQUEST = "vllm.v1.worker.gpu.model_states.mamba_hybrid:MambaHybridModelState.add_request"
PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _image(d: Path, name: str, py: str, vllm: str, other: str, **config: object) -> Path:
    site = f"usr/local/lib/python{py}/site-packages"
    base = (LayerBuilder(d / f"{name}-base.tar").dir("usr").dir("usr/local").dir("usr/local/bin")
            .file(f"usr/local/bin/python{py}", b"#!not really python\n", mode=0o755)
            .symlink("usr/local/bin/python3", f"python{py}")
            .dir("usr/local/lib").dir(f"usr/local/lib/python{py}").dir(site).close())
    engine = LayerBuilder(d / f"{name}-vllm.tar").from_wheel(
        fetch_wheel(f"vllm=={vllm}"), prefix=site,
        keep=lambda n: n.endswith(".py") and n.startswith(KEEP)).close()
    # only the other distribution's metadata: what `pip list` in the image would show
    extra = LayerBuilder(d / f"{name}-extra.tar").from_wheel(
        fetch_wheel(other), prefix=site, keep=lambda n: False).close()
    return write_docker_archive(d / f"{name}.tar", [base, engine, extra], tag=f"recon-test/{name}:1",
                                **config)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    d = tmp_path_factory.mktemp("diff-images")
    a = _image(d, "a", "3.11", "0.31.0", "transformers==5.24.0",
               env=[PATH, "VLLM_USE_V1=1", "HF_HOME=/data/hf"],
               entrypoint=["python3", "-m", "vllm.entrypoints.openai.api_server"],
               labels={"org.opencontainers.image.version": "0.31.0"}, working_dir="/workspace")
    b = _image(d, "b", "3.12", "0.32.0", "sglang==0.5.23",
               env=[PATH, "HF_HOME=/models", "VLLM_ATTENTION_BACKEND=FLASHINFER"],
               entrypoint=["vllm", "serve"],
               labels={"org.opencontainers.image.version": "0.32.0", "maintainer": "ops"},
               working_dir="/app")
    # snapshots of these throwaway archives go to a private cache, not the user's
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RECON_CACHE", str(d / "cache"))
        yield a, b


@pytest.fixture(scope="module")
def result(images: tuple[Path, Path]) -> DiffResult:
    a, b = images
    return diff(f"docker-archive:{a}", f"docker-archive:{b}", show=True)


def test_image_config_differences(result: DiffResult) -> None:
    img = result.image
    assert img is not None and img.note is None
    assert img.env.added == {"VLLM_ATTENTION_BACKEND": "FLASHINFER"}
    assert img.env.removed == {"VLLM_USE_V1": "1"}
    assert img.env.changed == {"HF_HOME": ("/data/hf", "/models")}
    assert img.labels.added == {"maintainer": "ops"}
    assert img.labels.changed == {"org.opencontainers.image.version": ("0.31.0", "0.32.0")}
    assert img.fields["entrypoint"] == (["python3", "-m", "vllm.entrypoints.openai.api_server"],
                                        ["vllm", "serve"])
    assert img.fields["working_dir"] == ("/workspace", "/app")
    assert img.fields["python"] == ("3.11", "3.12")
    assert "cmd" not in img.fields  # both None


def test_distribution_differences(result: DiffResult) -> None:
    dists = result.distributions
    assert dists is not None
    assert dists.added == {"sglang": "0.5.23"}
    assert dists.removed == {"transformers": "5.24.0"}
    assert dists.changed == {"vllm": ("0.31.0", "0.32.0")}


def test_code_differences_inside_the_images(result: DiffResult) -> None:
    assert result.a.version == "0.31.0" and result.b.version == "0.32.0"
    assert result.files is not None
    assert "vllm/v1/worker/gpu/model_states/mamba_hybrid.py" in result.files.changed
    assert all(p.startswith(KEEP) for p in result.files.changed + result.files.added)
    fd = result.functions
    assert fd is not None
    change = next(c for c in fd.changes if c.qualname == ADD_REQUEST)
    assert change.kind == "body" and change.diff is not None
    assert any("// mamba_block_size" in ln for ln in change.diff if ln.startswith("+"))


def test_cached_snapshot_is_reused_and_invalidated(images: tuple[Path, Path]) -> None:
    from recon.diffing import open_side

    a, _ = images
    first = open_side(f"docker-archive:{a}")
    assert open_side(f"docker-archive:{a}").root == first.root  # reused
    stat = a.stat()
    import os

    os.utime(a, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # "rebuilt" archive
    assert open_side(f"docker-archive:{a}").root != first.root


def test_cli_tables_and_json(images: tuple[Path, Path], capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch) -> None:
    from recon.cli.output import console

    monkeypatch.setattr(console, "width", 160)  # a terminal wide enough for whole cells
    a, b = images
    try:
        main(["diff", f"docker-archive:{a}", f"docker-archive:{b}", "--section", "image,distributions"])
    except SystemExit as ex:
        assert not ex.code
    out = capsys.readouterr().out
    for text in ("VLLM_ATTENTION_BACKEND", "FLASHINFER", "transformers", "sglang", "0.5.23", "/app"):
        assert text in out
    try:
        main(["diff", f"docker-archive:{a}", f"docker-archive:{b}", "--section", "dist", "--json"])
    except SystemExit as ex:
        assert not ex.code
    data = json.loads(capsys.readouterr().out)
    assert data["sections"] == ["distributions"] and data["functions"] is None
    assert data["distributions"]["changed"] == {"vllm": {"old": "0.31.0", "new": "0.32.0"}}
