"""Lines recon tells the user to paste run nothing of the image's (issue 36, item 4).

The hot-fix README and CLI print ``docker``/``kubectl``/compose lines built from the
image's own package and Python folders (its ``PYTHONPATH``/``PATH``), and a probe
bundle's README builds them from the folder and log-folder names. Here those names
are hostile -- ``$(...)``, backticks, ``;``, quotes, spaces -- in a real image
(a ``docker save`` archive) snapshotted and hot-fixed by the real ``recon`` CLI.
Every printed or written shell line is then pasted into ``bash -c`` in a scratch
HOME, with ``docker``, ``kubectl`` and ``recon`` replaced by a stub on ``PATH`` that
records its argv: no marker file may appear, and each command must receive the
hostile folder verbatim inside one argument. A name with a newline or another
control character is refused in one line; a ``--patch`` that is a FIFO, a device or
too big is refused promptly in one line (exit 2).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.imagekit import LayerBuilder, write_docker_archive

#: a folder name that runs four commands if a line holding it is pasted unquoted, and that a
#: YAML plain scalar would cut at " #" (a flow mapping at "," and "{")
HOSTILE = "h $(touch M1);touch M2;`touch M3`|touch M4&x 'q' \"d\" *! #c,{y}"
MARKERS = ("M1", "M2", "M3", "M4", "M5", "M6")
#: the -o folder of the hotfix: hostile too (it is the user's, but goes into the lines)
OUT_NAME = "fix $(touch M5);`touch M6`"
SITE = f"opt/{HOSTILE}"
PY = f"/usr/{HOSTILE}/bin/python3"
ORIGINAL = b"def f(x):\n    return x + 1\n"
PATCHED = b"def f(x):\n    return x + 2\n"
FIX = (b"--- a/vllm/ops.py\n+++ b/vllm/ops.py\n@@ -1,2 +1,2 @@\n def f(x):\n"
       b"-    return x + 1\n+    return x + 2\n")
STUB = """#!{python}
import json, os, sys
with open(os.environ["ARGV_LOG"], "a") as fh:
    fh.write(json.dumps([os.path.basename(sys.argv[0]), *sys.argv[1:]]) + "\\n")
"""
_FENCE = re.compile(r"^(`{3,})(\w*)\n(.*?)\n\1$", re.M | re.S)
_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # a runaway read ends, not the host


def recon(tmp: Path, *args: str, cwd: Path | None = None, timeout: float = 120
          ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(tmp / "home"), "RECON_CACHE": str(tmp / "cache"),
           "RECON_SNAPSHOTS": str(tmp / "snapshots"), "COLUMNS": "100"}
    (tmp / "home").mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-m", "recon", *args], capture_output=True, text=True,
                          cwd=cwd or tmp, env=env, timeout=timeout, check=False,
                          stdin=subprocess.DEVNULL, preexec_fn=_limits)


def image(tmp: Path, folder: str, name: str) -> Path:
    """A real image: the package in ``/opt/FOLDER`` (on PYTHONPATH), python3 in ``/usr/FOLDER/bin``."""
    work = tmp / f"img-{name}"
    work.mkdir()
    site = f"opt/{folder}"
    layer = (LayerBuilder(work / "layer.tar")
             .file(f"{site}/vllm/__init__.py", b"")
             .file(f"{site}/vllm/ops.py", ORIGINAL)
             .file(f"{site}/vllm-0.1.0.dist-info/METADATA",
                   b"Metadata-Version: 2.1\nName: vllm\nVersion: 0.1.0\n")
             .file(f"usr/{folder}/bin/python3", b"#!/bin/sh\n", mode=0o755)
             .close())
    env = [f"PATH=/usr/{folder}/bin:/usr/bin:/bin", f"PYTHONPATH=/{site}"]
    return write_docker_archive(work / "image.tar", [layer], env=env, tag=f"recon-test/{name}:1")


def snapshot(tmp: Path, source: str, name: str) -> Path:
    res = recon(tmp, "snapshot", "take", source, "-o", str(tmp / "snapshots"), "--name", name)
    assert res.returncode == 0, res.stderr
    return tmp / "snapshots" / name


def scratch(tmp: Path) -> tuple[Path, dict[str, str]]:
    """Stub docker/kubectl/recon on PATH that record their argv; a scratch HOME."""
    bin_dir = tmp / "stub-bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("docker", "kubectl", "recon"):
        (bin_dir / tool).write_text(STUB.format(python=sys.executable))
        (bin_dir / tool).chmod(0o755)
    (tmp / "paste-home").mkdir(exist_ok=True)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp / "paste-home"),
           "ARGV_LOG": str(tmp / "argv.jsonl"), "LANG": "C.UTF-8"}
    return bin_dir, env


def paste(tmp: Path, text: str, cwd: Path) -> list[list[str]]:
    """Paste ``text`` into bash as a user would; the argv of each stubbed command it ran."""
    _bin, env = scratch(tmp)
    log = Path(env["ARGV_LOG"])
    log.unlink(missing_ok=True)
    subprocess.run(["bash", "--noprofile", "--norc", "-c", text], cwd=cwd, env=env, timeout=60,
                   check=False, stdin=subprocess.DEVNULL, capture_output=True)
    calls = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    for root in (cwd, tmp / "paste-home", tmp):
        assert not [m for m in MARKERS if (root / m).exists()], (text, sorted(os.listdir(root)))
    for argv in calls:  # a hostile value is never split over arguments
        for arg in argv:
            assert "touch" not in arg or HOSTILE in arg or OUT_NAME in arg, (text, argv)
    return calls


def blocks(markdown: str) -> list[tuple[str, str]]:
    """The fenced code blocks: (language, content)."""
    return [(m.group(2), m.group(3)) for m in _FENCE.finditer(markdown)]


def spans(markdown: str) -> list[str]:
    """The inline code spans outside fenced blocks, as CommonMark reads them."""
    prose = _FENCE.sub("", markdown)
    out = []
    for m in _SPAN.finditer(prose):
        text = m.group(2).replace("\n", " ")
        if text.startswith(" ") and text.endswith(" ") and text.strip():
            text = text[1:-1]
        out.append(text)
    return out


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The real image, its snapshot, and ``recon hotfix --patch`` run on it with ``-o``."""
    tmp = tmp_path_factory.mktemp("shell")
    snap = snapshot(tmp, f"docker-archive:{image(tmp, HOSTILE, 'hostile')}", "hostile")
    (tmp / "fix.diff").write_bytes(FIX)
    work = tmp / "work"
    work.mkdir()
    res = recon(tmp, "hotfix", str(snap), "--patch", str(tmp / "fix.diff"), "-o", OUT_NAME,
                cwd=work)
    assert res.returncode == 0, res.stderr
    return {"tmp": tmp, "work": work, "out": work / OUT_NAME, "stdout": res.stdout,
            "snap": snap}


def test_the_image_and_hotfix_are_what_the_lines_name(hostile: dict) -> None:
    """The snapshot took the hostile folders as the image has them (the premise of the rest)."""
    manifest = json.loads((hostile["snap"] / "manifest.json").read_text())
    assert manifest["package"]["real_path"] == f"/{SITE}/vllm"
    assert manifest["python"]["executable"] == PY
    assert (hostile["out"] / "ops.py").read_bytes() == PATCHED


def test_readme_shell_blocks_pasted_run_nothing(hostile: dict) -> None:
    tmp, work, out = hostile["tmp"], hostile["work"], hostile["out"]
    readme = (out / "README.md").read_text()
    sha = hashlib.sha256(PATCHED).hexdigest()
    target = f"/{SITE}/vllm/ops.py"
    mount = f"{work}/{OUT_NAME}/ops.py:{target}:ro"
    verify = ["--module", "vllm.ops", "--sha256", sha, "--piece", "f=1"]
    expected = [
        ["docker", "run", "...", "-v", mount, "IMAGE", "COMMAND..."],
        ["kubectl", "create", "configmap", f"recon-hotfix-{sha[:12]}",
         f"--from-file=ops.py={OUT_NAME}/ops.py"],
        ["docker", "run", "--rm", "--entrypoint", PY, "-v", mount, "-v",
         f"{work}/{OUT_NAME}/verify_hotfix.py:/tmp/verify_hotfix.py:ro", "IMAGE",
         "/tmp/verify_hotfix.py", *verify],
        ["docker", "exec", "-i", "ENGINE", PY, "-", *verify, "--import"],
        ["kubectl", "exec", "-i", "POD", "-c", "engine", "--", PY, "-", *verify, "--import"],
    ]
    shell = [text for lang, text in blocks(readme) if lang != "yaml"]
    calls = [argv for text in shell for argv in paste(tmp, text, work)]
    assert calls == expected


def test_readme_yaml_blocks_hold_the_folder_as_one_string(hostile: dict) -> None:
    readme = (hostile["out"] / "README.md").read_text()
    docs = [yaml.safe_load(text) for lang, text in blocks(readme) if lang == "yaml"]
    target = f"/{SITE}/vllm/ops.py"
    compose, pod = docs
    assert compose["services"]["engine"]["volumes"] == [f"./{OUT_NAME}/ops.py:{target}:ro"]
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    assert mounts[0]["mountPath"] == target and mounts[0]["subPath"] == "ops.py"


def test_readme_inline_commands_pasted_run_nothing(hostile: dict) -> None:
    """The inline remedy and rollback lines: pasted after ``docker run``/as they are."""
    tmp, work = hostile["tmp"], hostile["work"]
    readme = (hostile["out"] / "README.md").read_text()
    inline = spans(readme)
    tmpfs = [s for s in inline if s.startswith("--tmpfs")]
    assert len(tmpfs) == 1
    assert paste(tmp, f"docker run {tmpfs[0]}", work) == [
        ["docker", "run", "--tmpfs", f"/{SITE}/vllm/__pycache__"]]
    compose = [s for s in inline if s.startswith("tmpfs:")]
    assert yaml.safe_load(compose[0]) == {"tmpfs": [f"/{SITE}/vllm/__pycache__"]}
    delete = [s for s in inline if s.startswith("kubectl delete")]
    sha = hashlib.sha256(PATCHED).hexdigest()
    assert paste(tmp, delete[0], work) == [["kubectl", "delete", "configmap",
                                            f"recon-hotfix-{sha[:12]}"]]


def test_cli_mount_line_pasted_runs_nothing(hostile: dict) -> None:
    tmp, work = hostile["tmp"], hostile["work"]
    lines = [ln.strip() for ln in hostile["stdout"].splitlines()
             if ln.strip().startswith("docker run")]
    assert len(lines) == 1, hostile["stdout"]
    assert paste(tmp, lines[0], work) == [
        ["docker", "run", "...", "-v", f"{work}/{OUT_NAME}/ops.py:/{SITE}/vllm/ops.py:ro",
         "IMAGE", "..."]]


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("plain")
    pkg = tmp / "src"
    (pkg / "vllm").mkdir(parents=True)
    (pkg / "vllm" / "__init__.py").write_bytes(b"")
    (pkg / "vllm" / "ops.py").write_bytes(ORIGINAL)
    (tmp / "fix.diff").write_bytes(FIX)
    return tmp, snapshot(tmp, f"dir:{pkg}", "plain")


def test_site_unknown_lines_quote_the_python_and_where(plain: tuple[Path, Path]) -> None:
    """A folder snapshot: SITE placeholders, ``--python`` and the 'where' line, all quoted."""
    tmp_path, snap = plain
    work = tmp_path / "where"
    work.mkdir()
    res = recon(tmp_path, "hotfix", str(snap), "--patch", str(tmp_path / "fix.diff"), "--python",
                PY, "-o", OUT_NAME, cwd=work)
    assert res.returncode == 0, res.stderr
    readme = (work / OUT_NAME / "README.md").read_text()
    calls = [argv for lang, text in blocks(readme) if lang != "yaml"
             for argv in paste(tmp_path, text, work)]
    assert ["docker", "run", "--rm", "-i", "--entrypoint", PY, "IMAGE", "-", "--module",
            "vllm.ops", "--where"] in calls
    assert ["docker", "run", "...", "-v", f"{work}/{OUT_NAME}/ops.py:SITE/vllm/ops.py:ro",
            "IMAGE", "COMMAND..."] in calls
    assert all(PY in argv for argv in calls if "--module" in argv)


def test_probe_bundle_lines_pasted_run_nothing(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    logs = f"/var/log/{HOSTILE}"
    res = recon(tmp_path, "probe", "new", "-o", HOSTILE, "-t", "m:f", "--unchecked",
                "--log-dir", logs, cwd=work)
    assert res.returncode == 0, res.stderr
    readme = (work / HOSTILE / "README.md").read_text()
    calls = [argv for lang, text in blocks(readme) if lang != "yaml"
             for argv in paste(tmp_path, text, work)]
    assert ["docker", "run", "...", "-v", f"{work}/{HOSTILE}:/opt/recon-probe:ro", "-v",
            f"{work}/probe-logs:{logs}", "-e", "PYTHONPATH=/opt/recon-probe", "IMAGE",
            "COMMAND..."] in calls
    assert ["kubectl", "create", "configmap", "recon-probe", f"--from-file={HOSTILE}/"] in calls
    compose, pod = [yaml.safe_load(text) for lang, text in blocks(readme) if lang == "yaml"]
    assert compose["services"]["engine"]["volumes"] == [f"./{HOSTILE}:/opt/recon-probe:ro",
                                                        f"./probe-logs:{logs}"]
    assert pod["spec"]["containers"][0]["volumeMounts"][1]["mountPath"] == logs
    mount = res.stdout.partition("Mount it: ")[2].partition(" (see")[0]
    assert paste(tmp_path, f"docker run {mount}", work) == [
        ["docker", "run", "-v", f"{work}/{HOSTILE}:/opt/recon-probe:ro", "-e",
         "PYTHONPATH=/opt/recon-probe"]]


# -- refusals: one line, non-zero exit, nothing written ------------------------------------------
def _one_line_refusal(res: subprocess.CompletedProcess[str], code: int = 2) -> str:
    err = res.stderr.strip().splitlines()
    assert res.returncode == code and len(err) == 1, (res.returncode, res.stderr)
    assert err[0].startswith("recon: error: ") and "Traceback" not in res.stderr
    return err[0]


def test_image_folder_with_a_newline_is_refused(tmp_path: Path) -> None:
    folder = "nl\n$(touch M1)"
    snap = snapshot(tmp_path, f"docker-archive:{image(tmp_path, folder, 'newline')}", "newline")
    (tmp_path / "fix.diff").write_bytes(FIX)
    work = tmp_path / "work"
    work.mkdir()
    res = recon(tmp_path, "hotfix", str(snap), "--patch", str(tmp_path / "fix.diff"), "-o", "out",
                cwd=work)
    line = _one_line_refusal(res)
    assert "\\n" in line and "control" in line
    assert os.listdir(work) == [] and not res.stdout
    cache = tmp_path / "cache" / "snapshots"
    assert not cache.exists() or not [p for p in os.listdir(cache) if "hotfix" in p]


def test_a_newline_in_any_typed_value_is_refused(plain: tuple[Path, Path]) -> None:
    """The same rule for what the user types (--site, --python, -o) and for a probe bundle."""
    tmp, snap = plain
    work = tmp / "typed"
    work.mkdir()
    base = ["hotfix", str(snap), "--patch", str(tmp / "fix.diff")]
    for extra in (["--site", "/usr/a\nb", "-o", "o1"], ["--python", "/usr/p\ny", "-o", "o2"],
                  ["-o", "o\n3"]):
        _one_line_refusal(recon(tmp, *base, *extra, cwd=work))
    for extra in (["-o", "b\n1"], ["-o", "b2", "--log-dir", "/var/l\ng"]):
        _one_line_refusal(recon(tmp, "probe", "new", "-t", "m:f", "--unchecked", *extra, cwd=work))
    assert os.listdir(work) == []


@pytest.mark.parametrize("char", ["\r", "\x1b", "\x7f", "\u0085", "\u009b", "\u2028", "\u202e",
                                  "\u200b"])
def test_every_control_character_is_refused(plain: tuple[Path, Path], char: str) -> None:
    """C0, DEL, C1, line separator, bidi override, zero-width space: no line holds one."""
    tmp, snap = plain
    work = tmp / f"ctl-{ord(char):x}"
    work.mkdir()
    line = _one_line_refusal(recon(tmp, "hotfix", str(snap), "--patch", str(tmp / "fix.diff"),
                                   "--site", f"/usr/a{char}b", "-o", "out", cwd=work))
    assert f"U+{ord(char):04X}" in line and char not in line
    assert os.listdir(work) == []


# -- --patch: a regular file of bounded size, read without blocking -----------------------------
def _patch_refused(tmp: Path, snap: Path, patch: str) -> str:
    start = time.monotonic()
    try:
        res = recon(tmp, "hotfix", str(snap), "--patch", patch, "-o", str(tmp / "never"),
                    timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"recon hotfix --patch {patch} did not return within 30 s")
    assert time.monotonic() - start < 30
    line = _one_line_refusal(res)
    assert not (tmp / "never").exists()
    return line


def test_patch_fifo_is_refused_promptly(plain: tuple[Path, Path]) -> None:
    tmp, snap = plain
    fifo = tmp / "fix.fifo"
    os.mkfifo(fifo)
    assert "regular file" in _patch_refused(tmp, snap, str(fifo))


def test_patch_dev_zero_is_refused_promptly(plain: tuple[Path, Path]) -> None:
    tmp, snap = plain
    assert "regular file" in _patch_refused(tmp, snap, "/dev/zero")


def test_patch_folder_is_refused(plain: tuple[Path, Path]) -> None:
    tmp, snap = plain
    assert "regular file" in _patch_refused(tmp, snap, str(tmp))


def test_oversize_patch_is_refused(plain: tuple[Path, Path]) -> None:
    """Over 8 MiB (a sparse file: no disk used) is refused before it is read."""
    tmp, snap = plain
    big = tmp / "big.diff"
    with open(big, "wb") as fh:
        fh.write(FIX)
        fh.truncate((8 << 20) + 1)
    line = _patch_refused(tmp, snap, str(big))
    assert "8 MiB" in line


def test_patch_of_normal_size_still_works(plain: tuple[Path, Path]) -> None:
    """A real patch just under the cap is read (the cap is not an off-by-one on valid input)."""
    tmp, snap = plain
    padded = tmp / "padded.diff"
    padded.write_bytes(b"x" * ((8 << 20) - len(FIX) - 1) + b"\n" + FIX)
    res = recon(tmp, "hotfix", str(snap), "--patch", str(padded), "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["patched"]["sha256"] == hashlib.sha256(PATCHED).hexdigest()


def test_probe_env_takes_only_variable_names(tmp_path: Path) -> None:
    """A `--env` value is written into the bundle's README: one that is not a variable name
    (a newline and a code fence in it would end the README's block) is refused in one line."""
    bad = "X\n```\ndocker run evil\n```"
    done = subprocess.run([sys.executable, "-m", "recon", "probe", "new", "-o", str(tmp_path / "b"),
                           "-t", "m:f", "--unchecked", "--env", bad],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert [ln for ln in done.stderr.splitlines() if ln.startswith("recon: error:")]
    assert not (tmp_path / "b").exists()
