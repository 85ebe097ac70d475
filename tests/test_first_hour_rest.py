"""Issue 39, the rest of the first hour: a demo whose sections each have their own heading and
say their answer once, and a recipe whose run failed keeps the run's exit status.

Written from the issue's text. The headings are checked against what the demo's cases
themselves say (their serve flags, parsed here with shlex and json), not against recon's
output; the answer and the exit status come from real recipe runs on the cached vLLM 0.33.0
snapshot (``vllm-dflash-layers`` needs no torch: a few seconds a run).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from recon.examples import path as example_path
from recon.recipes import get, run_recipe
from recon.recipes.demo import Section, plan_demo
from recon.snapshots.model import Snapshot

CAPTURE = "vllm-capture-sizes"
DFLASH = "vllm-dflash-layers"
#: the module and function vllm-dflash-layers runs in vLLM 0.33.0
EAGLE3 = "vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py"
SIGNATURE = ") -> tuple[int, ...] | None:\n"


def _json_options(flags: str) -> dict[str, dict]:
    """``--option '{json}'`` pairs of a serve command line."""
    words = shlex.split(flags)
    return {w: json.loads(words[i + 1]) for i, w in enumerate(words[:-1])
            if w.startswith("--") and words[i + 1].startswith("{")}


def test_every_demo_section_has_its_own_heading() -> None:
    """No two sections share a heading, in the summary table or in the report."""
    sections = plan_demo()
    labels = [s.label for s in sections]
    assert len(set(labels)) == len(labels), labels
    heads = [_heading(s) for s in sections]
    assert len(set(heads)) == len(heads), heads


def _heading(section: Section) -> str:
    """The section's heading in the report (a section not run here: as a failed one shows it)."""
    section.failure, section.seconds = "not run in this test", 0.0
    return section.to_markdown().splitlines()[0]


def test_the_two_capture_size_cases_are_named_by_the_flags_that_differ() -> None:
    """The vllm-capture-sizes cases on one config differ in their compilation config: each
    heading names the keys whose values differ, with that case's values."""
    demos = [(cfg, flags) for cfg, flags in get(CAPTURE).demos if cfg]
    by_config: dict[str, list[str]] = {}
    for cfg, flags in demos:
        by_config.setdefault(cfg, []).append(flags)
    twins = [flags for flags in by_config.values() if len(flags) > 1]
    assert twins, "the issue's case: two capture-sizes cases on one config"
    sections = [s for s in plan_demo([CAPTURE]) if s.config]
    for flags in twins:
        parsed = [_json_options(f) for f in flags]
        for mine, f in zip(parsed, flags, strict=True):
            other = next(p for p in parsed if p is not mine)
            differ = {k: v for opt, value in mine.items() for k, v in value.items()
                      if other.get(opt, {}).get(k) != v}
            assert differ, f
            section = next(s for s in sections if s.flags == f)
            head = _heading(section)
            for key, value in differ.items():
                said = f"{key}={json.dumps(value, separators=(',', ':'))}"
                assert said in section.label and said in head, (said, section.label, head)


def test_a_section_says_its_answer_once(vllm_latest: Snapshot) -> None:
    """The one-sentence answer opens the section once, not as "Answer" and again below it."""
    result = run_recipe(DFLASH, vllm_latest, config=example_path("qwen3-8b-dflash-b16.json"),
                        flags="", options={})
    assert result.summary, result
    section = Section(DFLASH, "vllm", "qwen3-8b-dflash-b16.json", "", result=result, seconds=1.0)
    text = section.to_markdown()
    assert text.count(result.summary) == 1, text


def test_a_failed_recipe_run_keeps_its_exit_status(tmp_path: Path, vllm_latest: Snapshot) -> None:
    """The function the recipe runs exits the process: the run cannot answer (exit 4, as
    ``recon run`` says for the same failure), which is not bad input (exit 2)."""
    snap = tmp_path / "vllm"
    shutil.copytree(vllm_latest.root, snap, symlinks=True)
    target = snap / "src" / EAGLE3
    text = target.read_text()
    assert text.count(SIGNATURE) == 1, "vLLM 0.33.0's get_eagle3_aux_layers_from_config moved"
    target.chmod(0o644)
    target.write_text(text.replace(SIGNATURE, SIGNATURE + "    raise SystemExit(3)\n"))
    proc = subprocess.run([sys.executable, "-m", "recon", "recipe", "run", DFLASH, "-s", str(snap),
                           "--config", "example:qwen3-8b-dflash-b16"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 4, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    line = [ln for ln in proc.stderr.splitlines() if ln.startswith("recon: error:")]
    assert len(line) == 1 and "exit" in line[0] and EAGLE3 in line[0], proc.stderr


# -- docker: images on the engine's vfs storage (a private engine: .ci/dockerd, vfs) --------

PKG = "usr/local/lib/python3.12/site-packages"
VERSION = "9.9.9"


def _docker_image(d: Path, tag: str, hotfix: bool) -> tuple[str, list[str]]:
    """A tiny image (a base, a package layer, a hot-fix layer when ``hotfix``) loaded into the
    engine; returns its tag and its layers' diff ids as the archive lists them."""
    from tests.imagekit import LayerBuilder, write_docker_archive

    d.mkdir()
    base = (LayerBuilder(d / "l0.tar").dir("usr").dir("usr/local").dir("usr/local/bin")
            .file("usr/local/bin/python3.12", b"#!not really python\n", mode=0o755)
            .symlink("usr/local/bin/python3", "python3.12")
            .dir("usr/local/lib").dir("usr/local/lib/python3.12").dir(PKG).close())
    pkg = (LayerBuilder(d / "l1.tar").dir(f"{PKG}/vllm")
           .file(f"{PKG}/vllm/__init__.py", f"__version__ = '{VERSION}'\n".encode())
           .file(f"{PKG}/vllm/config.py", b"SIZE = 1\n")
           .dir(f"{PKG}/vllm-{VERSION}.dist-info")
           .file(f"{PKG}/vllm-{VERSION}.dist-info/METADATA",
                 f"Metadata-Version: 2.1\nName: vllm\nVersion: {VERSION}\n".encode()).close())
    layers = [base, pkg]
    if hotfix:
        layers.append(LayerBuilder(d / "l2.tar").file(f"{PKG}/vllm/config.py", b"SIZE = 2\n").close())
    archive = write_docker_archive(d / "image.tar", layers, tag=tag)
    manifest = json.loads(subprocess.run(["tar", "-xOf", str(archive), "manifest.json"],
                                         capture_output=True, check=True).stdout)
    config = json.loads(subprocess.run(["tar", "-xOf", str(archive), manifest[0]["Config"]],
                                       capture_output=True, check=True).stdout)
    return tag, config["rootfs"]["diff_ids"]


def _recon(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "recon", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})


@pytest.fixture(scope="module")
def images(docker_client, tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN001, ANN201
    """The image without and with a hot-fix layer, loaded: {name: (tag, diff ids)}."""
    d = tmp_path_factory.mktemp("images")
    sides = {}
    try:
        for name, hotfix in (("plain", False), ("hotfix", True)):
            tag, diff_ids = _docker_image(d / name, f"recon-test/minors-{name}:1", hotfix)
            with open(d / name / "image.tar", "rb") as fh:
                docker_client.images.load(fh.read())
            sides[name] = (tag, diff_ids)
        yield sides
    finally:
        for tag, _ in sides.values():
            docker_client.images.remove(tag, force=True)


def test_a_vfs_snapshot_does_not_credit_every_file_to_the_top_layer(
        tmp_path: Path, images: dict[str, tuple[str, list[str]]], docker_client) -> None:  # noqa: ANN001
    """On vfs the engine keeps the top layer as the whole filesystem (the manifest says
    "merged view"): the table credits no file to a layer, says why and names --layers."""
    if docker_client.info().get("Driver") != "vfs":
        pytest.skip("needs an engine on vfs storage (RECON_DOCKER_DRIVER=vfs .ci/dockerd start)")
    snap = _recon(tmp_path, "snapshot", "take", f"docker:{images['hotfix'][0]}", "-o", str(tmp_path),
                  "--name", "s")
    assert snap.returncode == 0, snap.stdout + snap.stderr
    manifest = json.loads((tmp_path / "s" / "manifest.json").read_text())
    assert "merged view" in manifest["source"]["read"], manifest["source"]
    shown = _recon(tmp_path, "snapshot", "show", str(tmp_path / "s"))
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "merged view" in shown.stdout and "--layers" in shown.stdout, shown.stdout
    assert "package files" not in shown.stdout, shown.stdout  # no per-layer file counts
    for diff_id in images["hotfix"][1]:  # every layer of the image is listed, not only the top
        assert diff_id[:27] in shown.stdout, shown.stdout


def test_diff_of_two_images_lists_the_added_layer(
        tmp_path: Path, images: dict[str, tuple[str, list[str]]]) -> None:
    """``recon diff`` of the image without and with the hot-fix layer lists that layer as added
    (and not the layers both share), in --json and in the table."""
    plain, hotfix = images["plain"], images["hotfix"]
    added = hotfix[1][-1]
    assert added not in plain[1] and hotfix[1][:-1] == plain[1]
    refs = (f"docker:{plain[0]}", f"docker:{hotfix[0]}")
    diff = _recon(tmp_path, "diff", *refs, "--section", "image", "--json")
    assert diff.returncode in (0, 1), diff.stdout + diff.stderr
    text = json.dumps(json.loads(diff.stdout)["image"])
    assert added in text and "added" in text, text
    assert not any(d in text for d in plain[1]), text
    table = _recon(tmp_path, "diff", *refs, "--section", "image")
    assert added in table.stdout, table.stdout + table.stderr
