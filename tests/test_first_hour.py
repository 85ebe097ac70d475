"""A new user's first hour (issue 39), through the real ``recon`` command in a subprocess.

Each test is one finding of the issue: answers that open with a sentence in the user's terms
(major 4), a line per long step when stderr is piped (major 5), and the minors: piped tables
at 120 columns, ``probe read`` of an empty folder, the guide's claim about
``vllm.utils.math_utils``, an exception with no message, ``logs`` without torch, typo
suggestions, the spec-decode trap on an ngram log, and the README's ``seconds.server``.

Slicing-mode recipes answer in seconds; the few engine-mode tests run the release in its
sandbox (its environment is built once and cached, as for tests/test_engine_recipes.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from recon.snapshots.model import Snapshot

REPO = Path(__file__).resolve().parents[1]
LOGS = REPO / "tests" / "data" / "logs"
NGRAM_LOG = LOGS / "real" / "L_ngram3.log"

#: MTP with 3 speculative tokens: every decode step of a request is 4 tokens
MTP3 = "--speculative-config '{\"method\":\"mtp\",\"num_speculative_tokens\":3}'"


def _recon(*args: str, env: dict[str, str] | None = None,
           cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``recon ARGS`` with stdout and stderr piped (what a script or ``| tee`` gives it)."""
    full = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "RECON_PROGRESS_SECONDS")}
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "recon", *args], capture_output=True, text=True,
                          env=full, cwd=cwd, timeout=900, check=False)


def _capture_flags(sizes: list[int], seqs: int) -> str:
    return (f"vllm serve m --max-num-seqs {seqs} {MTP3} --compilation-config "
            f"'{{\"cudagraph_capture_sizes\":{json.dumps(sizes)},"
            f"\"max_cudagraph_capture_size\":{max(sizes)}}}'")


def _no_torch(tmp_path: Path) -> dict[str, str]:
    """An environment in which torch cannot be imported, as on a machine without it."""
    hide = tmp_path / "hide"
    hide.mkdir(exist_ok=True)
    (hide / "sitecustomize.py").write_text(
        "import sys\n"
        "class _NoTorch:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'torch':\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, _NoTorch())\n")
    return {"PYTHONPATH": f"{hide}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


# ------------------------------------------------------------------ major 4: answers in words

def test_capture_sizes_answer_opens_with_requests_and_tokens(vllm_latest: Snapshot) -> None:
    """'with MTP k=3, decode batches of 17 or more requests run eager': graphs up to 64 tokens
    hold 64 / (3 + 1) = 16 requests. The sentence comes first in the terminal, the Markdown
    and --json (``summary``)."""
    args = ("recipe", "run", "vllm-capture-sizes", "--snapshot", str(vllm_latest.root),
            "--set", "mode=slice", "--flags", _capture_flags([1, 2, 4, 8, 16, 32, 64], 32))
    shown = _recon(*args)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    first = lines[0]
    assert "17 or more requests" in first and "eager" in first and "k=3" in first, first
    assert "68+ tokens" in first  # 17 requests x 4 tokens: the unit of each number is said
    assert not any(c in first for c in "┏┌│")  # a sentence, before any table
    as_json = json.loads(_recon(*args, "--json").stdout)
    assert as_json["summary"] == first
    markdown = _recon(*args, "--markdown", "-").stdout.splitlines()
    assert markdown[0].startswith("### vllm-capture-sizes") and markdown[2] == first


@pytest.mark.slow
def test_engine_mode_answer_says_which_batches_run_eager(vllm_latest: Snapshot) -> None:
    """Engine mode (the release's own runner): graphs up to 32 tokens with 4 tokens a request
    hold 8 requests, so 9 or more run eager, and --max-num-seqs 16 reaches them."""
    res = _recon("recipe", "run", "vllm-capture-sizes", "--snapshot", str(vllm_latest.root),
                 "--config", "example:qwen3-next-80b-a3b-instruct",
                 "--flags", _capture_flags([1, 2, 4, 8, 16, 32], 16).replace(
                     "vllm serve m", "vllm serve Qwen/Qwen3-Next-80B-A3B-Instruct"), "--json")
    assert res.returncode == 0, res.stderr[-2000:]
    summary = json.loads(res.stdout)["summary"]
    assert "MTP k=3" in summary and "9 or more requests" in summary and "eager" in summary, summary


def test_the_two_capture_size_demo_cases_answer_differently(vllm_latest: Snapshot) -> None:
    """The demo's two capture-sizes cases (graphs up to 64 and up to 32 tokens) read the same
    under one heading; their sentences say what differs."""
    from recon.examples import path as example_path
    from recon.recipes import get, run_recipe

    said = []
    for config, flags in get("vllm-capture-sizes").demos[:2]:
        assert config is not None
        res = run_recipe("vllm-capture-sizes", vllm_latest, config=example_path(config),
                         flags=flags, options={"mode": "slice"})
        said.append(res.summary)
    assert said[0] != said[1]
    assert "every decode batch runs in a CUDA graph" in said[0]  # 16 requests x 4 = 64 tokens
    assert "9 or more requests" in said[1], said[1]  # 8 requests x 4 = 32 tokens


def test_every_recipe_opens_with_a_sentence_of_its_own() -> None:
    from recon.recipes import all_recipes

    assert all(r.summarize is not None for r in all_recipes()), \
        [r.name for r in all_recipes() if r.summarize is None]


def test_not_applicable_answer_is_a_sentence_too(vllm_latest: Snapshot) -> None:
    res = _recon("recipe", "run", "sglang-track-ssm", "--snapshot", str(vllm_latest.root), "--json")
    assert res.returncode == 5
    summary = json.loads(res.stdout)["summary"]
    assert summary.startswith("sglang-track-ssm does not apply to vllm 0.33.0"), summary


# ------------------------------------------------------------------ major 5: no long silence

@pytest.fixture()
def small_snapshot(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    site = tmp_path / "site" / "vllm"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text('__version__ = "1.0"\n')
    for i in range(20):
        (site / f"m{i}.py").write_text(f"def f{i}(x):\n    return x + {i}\n")
    env = {"RECON_CACHE": str(tmp_path / "cache")}
    made = _recon("snapshot", f"dir:{tmp_path / 'site'}", "-o", str(tmp_path / "snaps"),
                  "--name", "s", "--quiet", env=env)
    assert made.returncode == 0, made.stderr
    return tmp_path / "snaps" / "s", env


def test_piped_steps_say_start_done_and_seconds(small_snapshot: tuple[Path, dict[str, str]]) -> None:
    """Piped stderr gets plain lines for a step: when it started and when it was done, with its
    seconds (RECON_PROGRESS_SECONDS=0: every step, however short)."""
    snap, env = small_snapshot
    res = _recon("index", str(snap), env={**env, "RECON_PROGRESS_SECONDS": "0"})
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    started = [ln for ln in lines if "indexing s" in ln and "started" in ln]
    done = [ln for ln in lines if "indexing s" in ln and re.search(r"done after \d+\.\d s", ln)]
    assert started and done and lines.index(started[0]) < lines.index(done[0]), res.stderr
    assert "\x1b[" not in res.stderr and "\r" not in res.stderr  # lines for a log, not a bar


def test_piped_quick_step_prints_nothing(small_snapshot: tuple[Path, dict[str, str]]) -> None:
    """By default only a step that takes a while speaks (a quick one would be noise)."""
    snap, env = small_snapshot
    res = _recon("index", str(snap), env=env)
    assert res.returncode == 0 and "indexing" not in res.stderr, res.stderr


# ------------------------------------------------------------------ minors

def _widths(text: str) -> list[int]:
    return [len(line) for line in text.splitlines()]


def test_piped_tables_are_at_most_120_columns() -> None:
    """The log report's tables used to be drawn at content width (756-character lines)."""
    res = _recon("logs", str(NGRAM_LOG))
    assert res.returncode == 0, res.stderr
    tables = [ln for ln in res.stdout.splitlines() if ln[:1] in "┏┃┡│└"]
    assert tables and max(len(ln) for ln in tables) <= 120
    # nothing was cut: every word of the event column is still there
    words = "".join(res.stdout.split())
    assert '"num_speculative_tokens":3,' in words and "models/llama" in words


def test_columns_still_sets_the_width() -> None:
    res = _recon("logs", str(NGRAM_LOG), env={"COLUMNS": "200"})
    assert res.returncode == 0, res.stderr
    assert 120 < max(_widths(res.stdout)) <= 200


def test_a_long_name_stays_whole_in_a_piped_table(tmp_path: Path) -> None:
    """A name wider than 120 columns widens its table rather than being cut (``| grep``)."""
    name = "a_function_whose_name_is_long_enough_to_be_cut_at_one_hundred_and_twenty_columns_" * 2
    site = tmp_path / "site" / "vllm"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text('__version__ = "1.0"\n')
    (site / "m.py").write_text(f"def {name}():\n    return 1\n")
    env = {"RECON_CACHE": str(tmp_path / "cache")}
    assert _recon("snapshot", f"dir:{tmp_path / 'site'}", "-o", str(tmp_path / "snaps"),
                  "--name", "s", "--quiet", env=env).returncode == 0
    res = _recon("find", str(tmp_path / "snaps" / "s"), f"*:{name}", env=env)
    assert res.returncode == 0, res.stderr
    assert any(name in line for line in res.stdout.splitlines()), res.stdout


def test_probe_read_of_a_folder_without_records_is_an_error(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    res = _recon("probe", "read", str(logs))
    assert res.returncode != 0
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and "no records" in err[0] and str(logs) in err[0]
    assert "was the folder writable by the engine's user?" in err[0]
    assert res.stdout == ""  # no empty table


def test_guide_says_math_utils_needs_torch(vllm_latest: Snapshot, tmp_path: Path) -> None:
    """Importing vllm.utils.math_utils runs vllm/__init__, which imports torch: the guide's
    round trip needs torch, and says so."""
    env = _no_torch(tmp_path)
    env["PYTHONPATH"] += os.pathsep + str(vllm_latest.src)
    probe = subprocess.run([sys.executable, "-c", "import vllm.utils.math_utils"],
                           capture_output=True, text=True, env={**os.environ, **env}, timeout=120,
                           check=False)
    assert probe.returncode != 0 and "torch" in probe.stderr
    guide = " ".join((REPO / "docs" / "guide.md").read_text().split())
    at = guide.index("Without a GPU, the same round trip")  # the sentence before its transcript
    said = guide[at: guide.index("logging to a local folder", at)]
    assert "math_utils" in said
    assert "stdlib alone" not in said and "standard library alone" not in said
    assert "torch" in said


def test_an_exception_without_a_message_is_said_in_words() -> None:
    """The release raising ``AssertionError()`` showed as ``warn ...: AssertionError: ``."""
    import traceback

    from recon.recipes.engine import raised

    def check(n: int) -> None:
        if n <= 1:
            raise AssertionError  # as a release's bare ``assert`` does (no message)

    try:
        check(0)
    except AssertionError as err:
        warn = {"stage": "cudagraph_phase", "error": f"{type(err).__name__}: {err}",
                "traceback": traceback.format_exc()}
    said = raised(warn)
    assert not said.rstrip().endswith(":")
    assert said.startswith("AssertionError with no message") and "in check" in said, said
    assert raised({"error": "ValueError: bad size 3"}) == "ValueError: bad size 3"


@pytest.mark.slow
def test_v1_runner_drafter_step_is_not_a_stray_warning(vllm_latest: Snapshot) -> None:
    """The V1 runner's drafter keys (not counted in the answer) raise a bare AssertionError:
    it was shown as ``warn cudagraph_phase (drafter keys, not counted): AssertionError: ``."""
    flags = _capture_flags([1, 2, 4, 8, 16, 32], 16).replace(
        "vllm serve m", "VLLM_USE_V2_MODEL_RUNNER=0 vllm serve Qwen/Qwen3-Next-80B-A3B-Instruct")
    res = _recon("recipe", "run", "vllm-capture-sizes", "--snapshot", str(vllm_latest.root),
                 "--config", "example:qwen3-next-80b-a3b-instruct", "--flags", flags, "--json")
    assert res.returncode == 0, res.stderr[-2000:]
    answer = json.loads(res.stdout)
    assert answer["values"]["cudagraph_stage"].startswith("model runner")  # the V1 path
    texts = [f["text"] for f in answer["findings"]]
    assert not [t for t in texts if re.search(r"Error: *$", t)], texts
    assert not [f for f in answer["findings"] if f["level"] == "warn" and "not counted" in f["text"]]
    assert "9 or more requests" in answer["summary"]


def test_logs_without_torch_say_the_install_line_once(vllm_latest: Snapshot, tmp_path: Path) -> None:
    res = _recon("logs", str(NGRAM_LOG), "--snapshot", str(vllm_latest.root), "--json",
                 env=_no_torch(tmp_path))
    assert res.returncode in (0, 6), res.stderr
    report = json.loads(res.stdout)
    text = json.dumps(report)
    assert text.count("cannot import") == 1 and "inference-recon[torch]" in text
    rows = [c for c in report["comparisons"] if c["status"] == "no prediction"]
    assert rows and all(len(c["note"]) < 60 and "torch" in c["note"] for c in rows)
    shown = _recon("logs", str(NGRAM_LOG), "--snapshot", str(vllm_latest.root),
                   env=_no_torch(tmp_path))
    assert "".join(shown.stdout.split()).count("cannotimport") == 1
    assert "'inference-recon[torch]'" in " ".join(shown.stdout.split())


@pytest.fixture()
def engine_core(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A small release whose EngineCore has add_request, abort_requests and a few others."""
    pkg = tmp_path / "site" / "vllm"
    (pkg / "v1" / "engine").mkdir(parents=True)
    (pkg / "__init__.py").write_text('__version__ = "1.0"\n')
    (pkg / "v1" / "__init__.py").write_text("")
    (pkg / "v1" / "engine" / "__init__.py").write_text("")
    (pkg / "v1" / "engine" / "core.py").write_text(
        "class EngineCore:\n"
        "    def add_request(self, request):\n        return request\n"
        "    def abort_requests(self, ids):\n        return ids\n"
        "    def preprocess_add_request(self, request):\n        return request\n"
        "    def step(self):\n        return None\n\n"
        "class DPEngineCoreProc(EngineCore):\n"
        "    def add_request(self, request):\n        return request\n")
    env = {"RECON_CACHE": str(tmp_path / "cache")}
    made = _recon("snapshot", f"dir:{tmp_path / 'site'}", "-o", str(tmp_path / "snaps"),
                  "--name", "s", "--quiet", env=env)
    assert made.returncode == 0, made.stderr
    return tmp_path / "snaps" / "s", env


def _suggested(line: str) -> list[str]:
    hint = re.search(r"did you mean:? (.*?)\??\)?$", line)
    assert hint, line
    return [s.strip() for s in hint.group(1).split(",")]


@pytest.mark.parametrize("verb", ["probe", "has", "run"])
def test_a_typo_suggests_the_close_names(engine_core: tuple[Path, dict[str, str]], verb: str,
                                         tmp_path: Path) -> None:
    """``add_requests`` for ``add_request``: each verb names the close names, not one or none."""
    snap, env = engine_core
    typo = "vllm.v1.engine.core:EngineCore.add_requests"
    argv = {"probe": ["probe", "new", "-o", str(tmp_path / "bundle"), "--snapshot", str(snap),
                      "-t", typo],
            "has": ["has", typo, "--in", str(snap), "--fixed-in", str(snap)],
            "run": ["run", str(snap), "vllm.v1.engine.core:add_requests"]}[verb]
    res = _recon(*argv, env=env)
    assert res.returncode == 2, res.stdout + res.stderr
    err = res.stderr.strip().splitlines()
    assert len(err) == 1, res.stderr
    names = _suggested(err[0])
    assert len(names) >= 2, err[0]
    assert any(n.endswith("EngineCore.add_request") for n in names), err[0]


@pytest.mark.slow
def test_a_serve_flag_typo_suggests_the_flag(vllm_latest: Snapshot) -> None:
    """The release's own parser refuses ``--max-num-seqss``; recon names the flag it knows."""
    res = _recon("engine-config", str(vllm_latest.root), "--config", "example:llama-3.1-8b-instruct",
                 "--flags", "vllm serve m --max-num-seqss 16")
    assert res.returncode == 2, res.stderr[-2000:]
    err = [ln for ln in res.stderr.splitlines() if ln.startswith("recon: error:")]
    assert len(err) == 1 and "unrecognized arguments: --max-num-seqss 16" in err[0], res.stderr
    assert "did you mean --max-num-seqs" in err[0] and "\\n" not in err[0], err[0]


def test_capture_sizes_trap_on_an_ngram_log_gives_no_mtp_example() -> None:
    res = _recon("logs", str(NGRAM_LOG), "--json")
    trap = next(t for t in json.loads(res.stdout)["log"]["traps"]
                if t["code"] == "capture-sizes-rounded")
    assert "MTP" not in trap["text"] and "mtp" not in trap["text"], trap["text"]
    assert trap["text"].startswith("ngram, 3 speculative tokens")


@pytest.mark.slow
def test_seconds_server_is_where_the_readme_says(vllm_latest: Snapshot) -> None:
    """The README pointed at recipe --json for seconds.server; only engine-config has it."""
    readme = " ".join((REPO / "README.md").read_text().split())
    said = readme[readme.index("`seconds.server`") - 10: readme.index("`seconds.server`") + 80]
    assert "recon engine-config --json" in said, said
    flags = "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 131072"
    config = _recon("engine-config", str(vllm_latest.root), "--config",
                    "example:llama-3.1-8b-instruct", "--flags", flags, "--json")
    assert config.returncode == 0, config.stderr[-2000:]
    assert json.loads(config.stdout)["seconds"]["server"] in ("warm", "started", "cold", "off")
    recipe = _recon("recipe", "run", "vllm-capture-sizes", "--snapshot", str(vllm_latest.root),
                    "--config", "example:llama-3.1-8b-instruct", "--flags", flags, "--json")
    assert recipe.returncode == 0, recipe.stderr[-2000:]
    assert "seconds" not in json.loads(recipe.stdout)
