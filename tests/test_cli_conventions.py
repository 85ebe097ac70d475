"""CLI conventions a new user relies on, through the real ``recon`` command in a subprocess.

``--version``/``-V`` answer without a command; piped output keeps whole lines (rich's
80-column default cut names, so ``recon ... | grep`` found nothing); a reader that closes
the pipe early changes no exit status (``recon has``'s answer is its status); ``recon logs -``
reads standard input, and a binary file is refused in one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from recon import __version__
from recon.snapshots.model import Snapshot


def _recon(*args: str, env: dict[str, str] | None = None, stdin: bytes | None = None,
           cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    full = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "recon", *args], input=stdin, capture_output=True,
                          env=full, cwd=cwd, timeout=300, check=False)


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(flag: str) -> None:
    res = _recon(flag)
    assert res.returncode == 0, res.stderr
    assert res.stdout.decode().strip() == f"recon {__version__}"


def _package(root: Path, version: str, body: str) -> Path:
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text(f'__version__ = "{version}"\n')
    (root / "vllm" / "m.py").write_text(body)
    return root


@pytest.fixture()
def releases(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    old = _package(tmp_path / "old", "1.0", "def f(n, b):\n    return (n - 1) // b\n")
    new = _package(tmp_path / "new", "1.1", "def f(n, b):\n    return (n - 1) // (b * 2)\n")
    return old, new, {"RECON_CACHE": str(tmp_path / "cache")}


def test_piped_lines_are_whole(tmp_path: Path) -> None:
    """A qualname far longer than 80 columns comes through a pipe on one line."""
    name = "a_function_whose_name_is_long_enough_to_be_cut_by_an_eighty_column_terminal_" * 2
    _package(tmp_path / "site", "1.0", f"def {name}():\n    return 1\n")
    env = {"RECON_CACHE": str(tmp_path / "cache")}
    made = _recon("snapshot", f"dir:{tmp_path / 'site'}", "--out", str(tmp_path / "snaps"),
                  "--name", "s", "--quiet", env=env)
    assert made.returncode == 0, made.stderr
    res = _recon("find", str(tmp_path / "snaps" / "s"), f"*:{name}", env=env)
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stdout.decode().splitlines() if name in ln]
    assert lines, res.stdout.decode()


@pytest.mark.parametrize(("which", "status"), [("new", 0), ("old", 1)])
def test_has_answer_survives_a_closed_pipe(releases: tuple[Path, Path, dict[str, str]],
                                          which: str, status: int) -> None:
    old, new, env = releases
    ref = new if which == "new" else old
    argv = [sys.executable, "-m", "recon", "has", "vllm.m:f", "--in", f"dir:{ref}",
            "--fixed-in", f"dir:{new}", "--unfixed", f"dir:{old}"]
    full = {**os.environ, **env}
    # the reader exits at once, so every write after that meets a closed pipe
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == status, err
    assert "Traceback" not in err


def test_logs_from_stdin() -> None:
    line = (b"INFO 12-01 10:00:00 [kv_cache_utils.py:1] GPU KV cache size: 23,399,703 tokens\n")
    res = _recon("logs", "-", "--json", stdin=line)
    assert res.returncode == 0, res.stderr
    assert b"23399703" in res.stdout and b"<stdin>" in res.stdout


def test_logs_binary_file_is_refused(tmp_path: Path) -> None:
    blob = tmp_path / "core"
    blob.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(4096))
    res = _recon("logs", str(blob))
    assert res.returncode != 0
    err = res.stderr.decode().strip().splitlines()
    assert len(err) == 1 and "not a text log" in err[0] and str(blob) in err[0]


def test_recipe_unknown_set_key_is_an_error(vllm_latest: Snapshot) -> None:
    """A --set key no recipe looked up was a typo: one line naming it, not a silent answer.

    In slicing mode (seconds); engine mode's own check is tests/test_engine_recipes.py's."""
    flags = "vllm serve m --max-num-seqs 16"
    ok = _recon("recipe", "run", "vllm-capture-sizes", "--snapshot", str(vllm_latest.root),
                "--flags", flags, "--set", "mode=slice", "--set", "gpu=sm90", "--json")
    assert ok.returncode == 0, ok.stderr
    bad = _recon("recipe", "run", "vllm-capture-sizes", "--snapshot", str(vllm_latest.root),
                 "--flags", flags, "--set", "mode=slice", "--set", "gpuu=sm90", "--json")
    assert bad.returncode == 2
    err = bad.stderr.decode().strip().splitlines()
    assert len(err) == 1 and "gpuu" in err[0] and "gpu" in err[0].split("looked up")[1]


def test_recipe_not_applicable_is_not_exit_zero(vllm_latest: Snapshot) -> None:
    res = _recon("recipe", "run", "sglang-track-ssm", "--snapshot", str(vllm_latest.root), "--json")
    assert res.returncode == 5, res.stderr
    assert json.loads(res.stdout)["applicable"] is False


def test_logs_set_without_snapshot_is_an_error(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("INFO 12-01 10:00:00 [kv_cache_utils.py:1] GPU KV cache size: 1,000 tokens\n")
    res = _recon("logs", str(log), "--set", "gpu=sm90")
    assert res.returncode == 2 and b"--snapshot" in res.stderr


# ---------------------------------------------------------------- help and flag conventions

def _commands(cmd: object, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], object]]:
    out = [(path, cmd)]
    for name, sub in getattr(cmd, "commands", {}).items():
        out += _commands(sub, (*path, name))
    return out


def test_a_short_flag_means_one_thing_everywhere() -> None:
    """``-f`` was --force in one verb and --format in another, ``-s`` --section and --snapshot."""
    from recon.cli import command

    meaning: dict[str, set[str]] = {}
    for _path, cmd in _commands(command()):
        for param in cmd.params:  # type: ignore[attr-defined]
            longs = sorted(o for o in param.opts + param.secondary_opts if o.startswith("--"))
            for short in (o for o in param.opts if len(o) == 2 and o[0] == "-"):
                # an option's aliases (--out for --output) are one meaning
                name = "--output" if "--output" in longs else longs[0] if longs else short
                meaning.setdefault(short, set()).add(name)
    assert meaning, "no short flags found: the walk is wrong"
    clashes = {s: m for s, m in meaning.items() if len(m) > 1}
    assert not clashes, clashes


def test_help_shows_docker_style_value_words() -> None:
    """No ``<bool>`` on a switch, no ``<list[str]>``, no ``{SOURCE}`` in usage lines."""
    from recon.cli import command

    root = command()
    seen = 0
    for path, _cmd in _commands(root):
        if not path:
            continue
        res = _recon(*path, "--help", env={"COLUMNS": "200"})
        assert res.returncode == 0, (path, res.stderr)
        text = res.stdout.decode()
        seen += 1
        for bad in ("<bool>", "<list[", "<str>"):
            assert bad not in text, (path, bad, text)
        usage = next(ln for ln in text.splitlines() if "Usage:" in ln)
        assert "{" not in usage, (path, usage)
    assert seen > 20


def test_snapshot_ls_show_verify_are_subcommands(tmp_path: Path) -> None:
    """``recon snapshot SOURCE`` still takes one; ls/show/verify have their own help and options."""
    _package(tmp_path / "site", "1.0", "def f():\n    return 1\n")
    env = {"RECON_CACHE": str(tmp_path / "cache")}
    snaps = str(tmp_path / "snaps")
    took = _recon("snapshot", f"dir:{tmp_path / 'site'}", "-o", snaps, "--name", "s", "--quiet", env=env)
    assert took.returncode == 0, took.stderr
    listed = _recon("snapshot", "ls", "--out", snaps, "--json", env=env)
    assert listed.returncode == 0 and [s["name"] for s in json.loads(listed.stdout)] == ["s"]
    shown = _recon("snapshot", "show", "s", "-o", snaps, "--json", env=env)
    assert shown.returncode == 0 and json.loads(shown.stdout)["package"]["name"] == "vllm"
    assert _recon("snapshot", "verify", "s", "-o", snaps, "--quiet", env=env).returncode == 0
    helped = _recon("snapshot", "verify", "--help").stdout.decode()
    assert "Usage: recon snapshot verify [OPTIONS] NAME" in " ".join(helped.split())


def test_shell_completion_answers() -> None:
    res = _recon(env={"_RECON_COMPLETE": "complete_bash", "COMP_WORDS": "recon snaps", "COMP_CWORD": "1"})
    assert res.returncode == 0 and res.stdout.decode().split() == ["snapshot"]


# ---------------------------------------------------------------- install and package data

def test_recipe_needing_torch_says_how_to_install_it(tmp_path: Path) -> None:
    """Without torch the recipe answers with the install line, before any snapshot is read."""
    hide = tmp_path / "hide"
    hide.mkdir()
    # a sitecustomize that makes torch unimportable, the way a machine without it behaves
    (hide / "sitecustomize.py").write_text(
        "import sys\n"
        "class _NoTorch:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'torch':\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, _NoTorch())\n")
    env = {"PYTHONPATH": f"{hide}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    res = _recon("recipe", "run", "vllm-capture-sizes", "--snapshot", str(tmp_path / "none"), env=env)
    assert res.returncode == 2, res.stderr
    err = res.stderr.decode().strip().splitlines()
    assert len(err) == 1 and "needs torch" in err[0] and "pip install 'inference-recon[torch]'" in err[0]
    listed = _recon("recipe", "list", "--json", env=env)
    needs = {r["name"]: r["needs"] for r in json.loads(listed.stdout)}
    assert needs["vllm-capture-sizes"] == ["torch"] and needs["vllm-dflash-layers"] == []


def test_example_configs_by_name() -> None:
    from recon.examples import names, path
    from recon.slicing.runner import load_config

    assert "qwen3-next-80b-a3b-instruct" in names()
    assert load_config("example:qwen3-next-80b-a3b-instruct")["model_type"] == "qwen3_next"
    assert path("jamba-1.5-mini.json").is_file()
    res = _recon("engine-config", "pip:vllm==0.33.0", "--flags", "vllm serve m", "--config", "example:nope")
    assert res.returncode == 2
    err = res.stderr.decode().strip()
    assert "no example config named 'nope'" in err and "llama-3.1-8b-instruct" in err


@pytest.mark.timeout(300)
def test_wheel_ships_what_demo_needs(tmp_path: Path) -> None:
    """A wheel built from the checkout holds the example configs, and installs the name it says."""
    import zipfile

    root = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path), str(root)], check=True, capture_output=True, timeout=280)
    wheel = next(tmp_path.glob("*.whl"))
    assert wheel.name.startswith("inference_recon-")
    names = set(zipfile.ZipFile(wheel).namelist())
    from recon.examples import names as shipped

    for stem in shipped():
        assert f"recon/examples/{stem}.json" in names
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("/METADATA"))).decode()
    torch_lines = [ln for ln in meta.splitlines() if ln.startswith("Requires-Dist: torch")]
    assert torch_lines and not any("torch==" in ln for ln in torch_lines), torch_lines


# ---------------------------------------------------------------- silent successes a new user met

@pytest.fixture()
def small_snap(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    _package(tmp_path / "site", "1.0", "def f(n, b=2):\n    return (n - 1) // b\n")
    env = {"RECON_CACHE": str(tmp_path / "cache")}
    made = _recon("snapshot", f"dir:{tmp_path / 'site'}", "-o", str(tmp_path / "snaps"),
                  "--name", "s", "--quiet", env=env)
    assert made.returncode == 0, made.stderr
    return tmp_path / "snaps" / "s", env


def test_run_with_an_argument_the_function_does_not_take(small_snap: tuple[Path, dict[str, str]]) -> None:
    """Was 'raised TypeError' and exit 0: the user's --arg is wrong, not the function."""
    snap, env = small_snap
    ok = _recon("run", str(snap), "vllm.m:f", "--arg", "n=9", "--json", env=env)
    assert ok.returncode == 0 and json.loads(ok.stdout)["value"] == 4, ok.stderr
    bad = _recon("run", str(snap), "vllm.m:f", "--arg", "n=9", "--arg", "nope=4", env=env)
    assert bad.returncode == 2, bad.stdout
    err = bad.stderr.decode().strip().splitlines()
    assert len(err) == 1 and "nope" in err[0] and "no parameter named 'nope'" in err[0] and "it takes (n, b=2)" in err[0], err


def test_probe_bundle_without_a_snapshot_needs_unchecked(tmp_path: Path) -> None:
    res = _recon("probe", "new", "-o", str(tmp_path / "b"), "-t", "vllm.nope:Nope.nope")
    assert res.returncode == 2 and b"--unchecked" in res.stderr
    assert not (tmp_path / "b").exists()
    res = _recon("probe", "new", "-o", str(tmp_path / "b"), "-t", "vllm.nope:Nope.nope", "--unchecked")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "b" / "sitecustomize.py").is_file()


def test_probe_check_import_failure_is_an_error(small_snap: tuple[Path, dict[str, str]],
                                                tmp_path: Path) -> None:
    snap, env = small_snap
    made = _recon("probe", "new", "-o", str(tmp_path / "b"), "-t", "vllm.m:f", "--snapshot", str(snap),
                  env=env)
    assert made.returncode == 0, made.stderr
    # this Python has no `vllm` on its path: the target module cannot be imported
    res = _recon("probe", "check", str(tmp_path / "b"), "--import", env={**env, "PYTHONPATH": ""})
    assert res.returncode == 2
    out = res.stdout.decode()
    assert "[yellow]" not in out and "cannot import vllm.m" in out
    assert b"could not be imported" in res.stderr
    with_path = _recon("probe", "check", str(tmp_path / "b"), "--import",
                       env={**env, "PYTHONPATH": str(snap / "src")})
    assert with_path.returncode == 0, with_path.stdout.decode() + with_path.stderr.decode()


def test_probe_read_reads_probe_logs_only_one_level_down(tmp_path: Path) -> None:
    record = json.dumps({"kind": "verify", "pid": 7, "ts": 1.0, "python": "3.12", "targets": {}})
    logs = tmp_path / "logs"
    (logs / "host-a").mkdir(parents=True)
    (logs / "host-a" / "probe-7-x.jsonl").write_text(record + "\n")
    deep = logs / "host-b" / "old" / "more"
    deep.mkdir(parents=True)
    (deep / "probe-8-x.jsonl").write_text(record.replace('"pid": 7', '"pid": 8') + "\n")
    (logs / "notes.jsonl").write_text(record + "\n")  # not a probe log's name
    res = _recon("probe", "read", str(logs), "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["files"] == ["host-a/probe-7-x.jsonl"]
