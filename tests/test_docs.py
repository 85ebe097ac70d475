"""The README's and docs/guide.md's commands, run by the test suite as written.

The commands come out of the Markdown itself (tests/docs_commands.py: continuations joined,
comments dropped, ``$ `` prompts, ``; echo "exit $?"``, and ``[--opt]`` optional parts
expanded into the plain form plus every form with them), so a renamed flag or a changed
number in the docs is a failing test here, named ``README.md:LINE`` or ``guide.md:LINE``.

* ``test_parses`` (every documented ``recon`` command, every form; fast, no network): the
  command line goes through the real CLI's parser (``typer.main.get_command(recon.cli.app)``,
  walked down to the subcommand, ``make_context`` with its parent context) without running
  anything. A removed or renamed option or verb is a usage error here. Placeholders
  (``SNAP``, ``QUALNAME``, ``config.json``) are only values to the parser.
* ``test_runs_as_written`` (slow: real wheels): the commands whose inputs exist offline here
  run for real, ``python -m recon ARGS`` in a subprocess, in document order, in one temporary
  folder per document (so the guide's own ``recon snapshot`` commands make the snapshots its
  later commands name, and ``./snapshots`` is under the test's temporary folder). Inputs:
  ``pip:`` releases the rest of the suite downloads anyway (:data:`SUITE_RELEASES`), engine-mode
  recipes only on releases whose environment the suite builds anyway (``IN_CI`` of
  tests/test_engine_recipes.py), shipped example configs (``--config example:NAME``), files of
  this repository named by a repo-relative path (copied into the folder at the same path), and
  what earlier documented commands wrote. The exit status must be the documented one: the
  ``exit N`` line of an ``; echo "exit $?"``, non-zero when the output shown is a
  ``recon: error:`` line, the one the prose states for a few (:data:`STATUS_FROM_PROSE`), else 0.
  Where the docs show output, a few stable values in it (numbers the release's code computes,
  hashes of its source, names; never timings, dates or paths) must be in what recon printed
  (:data:`KEYS`); each key must also be in the documented output, so a stale key fails too.
* Every other command is parsed only; :func:`not_run_because` says why (a Docker engine or
  registry, a placeholder, a release the suite does not download, a change to the shared
  cache...). ``test_enough_commands_run`` keeps the executed count above a floor, so the docs
  test cannot quietly run nothing.

The guide's transcript also runs its few shell steps (``echo >>``, ``touch``, ``head``, ``ls``,
``python engine.py``; ``cat engine.py`` writes the file it shows when it is not there yet),
and reads ``/tmp/g``, the folder the guide's transcript was recorded in, as the test's folder.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.main

import recon.cli
from tests.docs_commands import DocCommand, extract, extract_file, split_commands
from tests.test_engine_recipes import IN_CI as ENGINE_ENVS

REPO = Path(__file__).resolve().parents[1]
DOCS = (REPO / "README.md", REPO / "docs" / "guide.md")
COMMANDS = [c for doc in DOCS for c in extract_file(doc)]
RECON = [c for c in COMMANDS if c.program == "recon"]

#: Releases the rest of the suite downloads anyway (tests/conftest.py ``pip_snapshot`` users and
#: the engine-mode tests); a documented ``pip:`` source outside these is parsed, not run.
SUITE_RELEASES = {
    "vllm": {"0.10.2", "0.19.0", "0.25.0", "0.26.0", "0.27.0", "0.28.0", "0.29.0", "0.30.0",
             "0.31.0", "0.32.0", "0.33.0"},
    "sglang": {"0.5.5", "0.5.10", "0.5.23"},
}
#: Words the docs use as stand-ins for the reader's own things.
PLACEHOLDERS = {"SNAP", "QUALNAME", "config.json", "server.log", "qwen3.5-0.8b.json"}
#: The folder the guide's transcript was recorded in; the test's own folder stands for it.
GUIDE_CWD = "/tmp/g"
#: Shell steps of the guide's transcript that the test runs too (through bash, in its folder).
SHELL_STEPS = {"echo", "touch", "head", "ls", "cat", "python"}
#: Statuses the prose states where the transcript does not show them: (file, command start).
STATUS_FROM_PROSE: dict[tuple[str, str], tuple[int, str]] = {
    ("guide.md", "recon snapshot verify vllm-0.33.0"):
        (1, "verify 're-hashes every file against the manifest and exits 1 when anything differs'"),
    ("guide.md", "recon run pip:vllm==0.31.0 vllm.config.compilation:"):
        (4, "the sandbox refusal: '(exit 4.)' under the transcript"),
}
#: What the prose says to do next, run after the command: (file, command start) -> (argv, why).
AFTER: dict[tuple[str, str], tuple[list[str], str]] = {
    ("guide.md", "recon snapshot verify vllm-0.33.0"): (
        ["snapshot", "pip:vllm==0.33.0", "--include", "vllm/**.py", "--force"],
        "'Re-take it with --force to get the engine's source back.'"),
}
#: At least this many documented commands (all forms, shell steps too) run in test B, and at
#: least this many recon command forms parse in test A.
MIN_EXECUTED = 65
MIN_PARSED = 90


# --- the extractor ---------------------------------------------------------------------------

SAMPLE = '''\
Text.

```bash
recon snapshot show vllm-0.33.0 [--json]       # the manifest (or JSON)
recon cache prune --older-than 30 [--kind envs] [-n]
recon probe read logs [--json | --markdown]
recon run pip:vllm==0.33.0 \\
  mod:f --self 'x=[1,2]' --flags "a \\
     b # not a comment"   # a comment
#  x  changed  [1, 2] -> [2]

apt-get update && pip install -e '.[torch]' && recon demo  # first
```

```console
$ recon has f --in pip:vllm==0.31.0; echo "exit $?"
no: f
exit 1
$ recon snapshot pip:vllm==0.99.0
recon: error: pip could not download vllm==0.99.0
$ DOCKER_HOST=unix:///x.sock recon snapshot docker:a
```

```python
recon.snapshot("pip:vllm==0.33.0")
```
'''


def test_extractor_on_a_sample() -> None:
    got = list(extract(SAMPLE, "s.md"))
    assert [(c.id, c.text) for c in got] == [
        ("s.md:4", "recon snapshot show vllm-0.33.0"),
        ("s.md:4[--json]", "recon snapshot show vllm-0.33.0 --json"),
        ("s.md:5", "recon cache prune --older-than 30"),
        ("s.md:5[-n]", "recon cache prune --older-than 30 -n"),
        ("s.md:5[--kind envs]", "recon cache prune --older-than 30 --kind envs"),
        ("s.md:5[--kind envs -n]", "recon cache prune --older-than 30 --kind envs -n"),
        ("s.md:6", "recon probe read logs"),
        ("s.md:6[--json]", "recon probe read logs --json"),
        ("s.md:6[--markdown]", "recon probe read logs --markdown"),
        ("s.md:7", "recon run pip:vllm==0.33.0 mod:f --self 'x=[1,2]' --flags \"a      b # not a comment\""),
        ("s.md:12", "apt-get update"),
        ("s.md:12#2", "pip install -e '.[torch]'"),
        ("s.md:12#3", "recon demo"),
        ("s.md:16", "recon has f --in pip:vllm==0.31.0"),
        ("s.md:19", "recon snapshot pip:vllm==0.99.0"),
        ("s.md:21", "DOCKER_HOST=unix:///x.sock recon snapshot docker:a"),
    ]
    by_id = {c.id: c for c in got}
    run = by_id["s.md:7"]
    assert run.args == ("run", "pip:vllm==0.33.0", "mod:f", "--self", "x=[1,2]", "--flags",
                        "a      b # not a comment")  # backslash-newline removed, indent kept
    assert run.output == ("x  changed  [1, 2] -> [2]",)  # comment lines right under it
    assert by_id["s.md:4"].output == () and by_id["s.md:12#3"].args == ("demo",)
    assert (by_id["s.md:16"].shown_exit, by_id["s.md:16"].shows_error) == (1, False)
    assert (by_id["s.md:19"].shown_exit, by_id["s.md:19"].shows_error) == (None, True)
    docker = by_id["s.md:21"]
    assert docker.env == (("DOCKER_HOST", "unix:///x.sock"),) and docker.program == "recon"
    # '|' inside [ ] separates alternatives; outside, it separates commands
    assert [f for f, _ in split_commands("recon a [--x | --y] | head")[0]] == ["", "--x", "--y"]
    assert split_commands("recon a '[--x]'")[0] == [("", "recon a '[--x]'")]


def test_docs_have_commands() -> None:
    files = {c.file for c in RECON}
    assert files == {"README.md", "guide.md"}, files
    ids = [c.id for c in COMMANDS]
    assert len(ids) == len(set(ids)), "two commands with one id"


# --- test A: every documented recon command parses ------------------------------------------

_USAGE_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


def parse_problem(args: tuple[str, ...]) -> str | None:
    """Why ``recon ARGS`` would be a usage error, or None; nothing runs.

    Each group parses its own part the way ``recon`` does when it runs (``make_context``:
    options, and routing such as ``recon snapshot SOURCE`` -> ``take``), then names the
    subcommand (``resolve_command``), whose context is made with the group's as parent.
    """
    root = typer.main.get_command(recon.cli.app)
    if args and args[0].startswith("-"):
        # `recon --opt`: only check the option names; the root's eager callbacks (shell
        # completion installs itself into the user's shell) must not run in a test.
        try:
            ctx = root.context_class(root, info_name="recon")
            root.make_parser(ctx).parse_args(args=list(args))
        except _USAGE_ERROR as err:
            return f"{type(err).__name__}: {err.format_message()}"
        return None
    cmd, name, parent, rest = root, "recon", None, list(args)
    try:
        while True:
            with cmd.make_context(name, rest, parent=parent, resilient_parsing=False) as ctx:
                if not hasattr(cmd, "commands"):
                    return None
                pending = [*(getattr(ctx, "_protected_args", None)
                             or getattr(ctx, "protected_args", [])), *ctx.args]
                if not pending:
                    return None if cmd.invoke_without_command else f"{name}: missing command"
                sub_name, sub, rest = cmd.resolve_command(ctx, pending)
                parent, cmd, name = ctx, sub, sub_name
    except _USAGE_ERROR as err:
        if type(err).__name__ == "NoArgsIsHelpError":  # its message is the whole help text
            return f"{name}: no arguments (prints its help)"
        return f"{type(err).__name__}: {err.format_message()}"


@pytest.mark.parametrize("cmd", RECON, ids=lambda c: c.id)
def test_parses(cmd: DocCommand) -> None:
    problem = parse_problem(cmd.args)
    assert problem is None, f"{cmd.id}: `{cmd.text}`: {problem}"


# --- which commands run, and what they must print --------------------------------------------


def _pins(word: str) -> list[tuple[str, str]] | None:
    """``pip:vllm==0.33.0`` / ``vllm==0.28.0..0.33.0`` / ``vllm==0.31.0,vllm==0.32.0`` ->
    [(project, version), ...] (a range by its bounds); None when ``word`` is no such spec."""
    spec = word[4:] if word.startswith("pip:") else word
    m = re.fullmatch(r"([A-Za-z][\w.-]*)==([\w.]+?)\.\.([\w.]+)", spec)
    if m:
        return [(m.group(1), m.group(2)), (m.group(1), m.group(3))]
    parts = [re.fullmatch(r"([A-Za-z][\w.-]*)==([\w.]+)", p) for p in spec.split(",")]
    return [(p.group(1), p.group(2)) for p in parts if p] if all(parts) else None


def _option(cmd: DocCommand, *names: str) -> str | None:
    for i, word in enumerate(cmd.args[:-1]):
        if word in names:
            return cmd.args[i + 1]
    return None


def _engine_release(cmd: DocCommand) -> str | None:
    """The vLLM release whose engine-mode environment the command builds (None: none)."""
    verb = cmd.args[:2]
    if verb == ("recipe", "run"):
        if cmd.args[2].startswith("sglang") or "mode=slice" in cmd.args:
            return None
        snap = _option(cmd, "--snapshot", "-s") or ""
    elif verb[:1] == ("logs",):
        if _option(cmd, "--snapshot", "-s") is None and _option(cmd, "--config", "-c") is None:
            return None
        snap = _option(cmd, "--snapshot", "-s") or "(the release the log names)"
    elif verb[:1] == ("demo",):
        snap = _option(cmd, "--vllm") or "(the latest release)"
    else:
        return None
    pins = _pins(snap)
    return pins[0][1] if pins else snap


def not_run_because(cmd: DocCommand) -> str | None:
    """Why test B only parses ``cmd`` (None: it runs)."""
    if cmd.program != "recon":
        if cmd.file == "guide.md" and cmd.program in SHELL_STEPS:
            return None
        return f"not recon ({cmd.program}): installs or starts things"
    args = cmd.args
    if "--install-completion" in args:
        return "installs shell completion into the reader's shell start-up files"
    if args[:1] == ("demo",) and not (_option(cmd, "--vllm") and _option(cmd, "--sglang")):
        return "recon demo without pins takes the latest releases from PyPI"
    if args[:2] == ("cache", "prune") and not {"-n", "--dry-run"} & set(args):
        return "would remove entries from the shared cache"
    for word in args:
        if word in PLACEHOLDERS:
            return f"placeholder {word}"
        if word.startswith(("docker:", "registry:")):
            return f"needs a Docker engine or a registry holding the image ({word})"
        if (word.startswith(("docker-archive:", "oci:", "oci-archive:", "wheel:", "dir:"))
                and not cmd.shows_error):  # the error examples name files that are not there
            return f"an image, wheel or folder of the reader's ({word})"
        if word.startswith("/") and not word.startswith(GUIDE_CWD):
            return f"a path on the reader's machine ({word})"
        pins = _pins(word) if (word.startswith("pip:") or "==" in word) else None
        for project, version in pins or []:
            if version in SUITE_RELEASES.get(project, ()):
                continue
            if cmd.shows_error and f"could not download {word[4:]}" in "\n".join(cmd.output):
                continue  # the error example itself: no such release, pip only asks the index
            return f"{project} {version}: a release the suite does not download"
    release = _engine_release(cmd)
    if release is not None and release not in ENGINE_ENVS:
        return f"engine mode on vllm {release}: an environment the suite does not build"
    return None


EXECUTED = [c for c in COMMANDS if not_run_because(c) is None]
PARSE_ONLY = {c.id: not_run_because(c) for c in RECON if not_run_because(c) is not None}

#: Stable values of the documented output that the command must print: (file, command start)
#: -> keys; each must be in the documented output too. Compared with runs of whitespace made
#: one space, on stdout and stderr together (piped, recon's tables are not wrapped).
R, G = "README.md", "guide.md"
KEYS: dict[tuple[str, str], list[str]] = {
    (R, "recon run pip:vllm==0.33.0 vllm.config.compilation:"): [
        "[4, 8, 16, 32, 64]", "vllm/config/compilation.py:1537-1565", "2c71794122eef7a9",
        "vllm/utils/math_utils.py:27-29"],
    # snapshot
    (G, "recon snapshot pip:vllm==0.33.0 --include"): [
        "3231 (47.7 MiB); 2565 skipped (binaries or --include)",
        "sha256:4b6bdec4ab269990bf70d45a3c1e94c3760a27064513760193b26d6f0da883aa"],
    (G, "recon snapshot ls"): [
        "│ sglang-0.5.23 │ sglang │ 0.5.23 │ 4719 │ 65.1 MiB │ pip:sglang==0.5.23 │",
        "│ vllm-0.33.0 │ vllm │ 0.33.0 │ 3231 │ 47.7 MiB │ pip:vllm==0.33.0 │"],
    (G, "recon snapshot verify vllm-0.33.0"): [
        "vllm-0.33.0 differs from its manifest", "│ modified │ vllm/envs.py │",
        "│ extra │ vllm/scratch.py │", "3231 recorded files checked"],
    # index, find, chain
    (G, "recon index vllm-0.33.0"): ["3231 modules, 7225 classes, 42119 functions"],
    (G, "recon find vllm-0.33.0 '*:*.adjust"): [
        "1 matches in vllm 0.33.0 (vllm-0.33.0)", "vllm/config/compilation.py:1537",
        "(self, uniform_decode_query_len: int)"],
    (G, "recon find vllm-0.33.0 -e"): [
        "vllm.v1.worker.gpu.model_states.mamba_hybrid:MambaHybridModelState.add_request "
        "vllm/v1/worker/gpu/model_states/mamba_hybrid.py:112",
        "124 | (new_req_data.num_computed_tokens - 1) // mamba_block_size",
        "3 functions matched"],
    (G, "recon chain vllm-0.33.0"): [
        "CompilationConfig.resolve_cudagraph_mode_and_sizes vllm.config.compilation "
        "vllm/config/compilation.py:1376",
        "0 unresolved calls, 6 calls leaving the package", "pruned snapshot with 1 files written"],
    # slice, run
    (G, "recon run pip:vllm==0.33.0 vllm.config.compilation:"): [
        "│ cudagraph_capture_sizes │ changed │ [1, 2, 4, 8, 16, 32, 64] │ [4, 8, 16, 32, 64] │",
        "│ vllm/config/compilation.py:1537-1565 │ 2c71794122eef7a9 │",
        "│ vllm/utils/math_utils.py:27-29 │ 857d9b9774645e68 │"],
    (G, "recon run vllm-0.33.0 vllm.model_executor.models.qwen3_dflash:"): [
        "│ returned │ true │",
        "│ vllm/model_executor/models/qwen3_dflash.py:62-73 │ 9481ce11d2b7fc57 │",
        "│ vllm/model_executor/models/qwen3_dflash.py:76-81 │ 51548b3f630bbe14 │"],
    (G, "recon slice vllm-0.33.0"): [
        "│ vllm/model_executor/models/qwen3_dflash.py │ 59-59 │ 0fcd4a37c881 │ assign _SLIDING_ATTENTION │",
        "│ vllm/model_executor/models/qwen3_dflash.py │ 76-81 │ 51548b3f630b │ def dflash_has_any_non_causal │"],
    (G, "head -4 slice.py"): [
        "# recon slice of vllm 0.33.0 (vllm-0.33.0)",
        "#   vllm.model_executor.models.qwen3_dflash:dflash_has_any_non_causal  "
        "(vllm/model_executor/models/qwen3_dflash.py:76, function)"],
    # recipe, demo
    (G, "recon recipe list"): [
        "sglang-track-ssm", "kv-capacity", "vllm-capture-sizes", "vllm-dflash-layers",
        "vllm-hybrid-page-align", "vllm-mamba-align-column"],
    (G, "recon recipe show sglang-track-ssm"): [
        "flags read: --page-size", "config keys: mamba_chunk_size (else the release's default)"],
    (G, "recon recipe run vllm-capture-sizes --snapshot pip:vllm==0.33.0"): [
        "│ V1 runner: capture sizes │ [4, 8, 16, 32, 64] │",
        "│ V2 runner: capture sizes │ [1, 2, 4, 8, 16, 32, 64] │",
        "│ 17-32 │ 68-128 │ eager (no graph) │ eager (no graph) │",
        "the release changed your cudagraph_capture_sizes [1, 2, 4, 8, 16, 32, 64] to "
        "[4, 8, 16, 32, 64]"],
    (G, "recon recipe run sglang-track-ssm"): [
        "│ chunk offsets per sequence │ [0, 78, 80] │", "│ track_ssm_h_src │ [77, 79] │",
        "│ track_ssm_h_dst │ [2, 3] │", "│ 1 │ 127 │ 0 │ true │ h │ 79 │ 3 │ h row 79 < NT 80 │",
        "ok seq 0: h_src 77 in range (NT = 80)"],
    (G, "recon recipe run vllm-hybrid-page-align --snapshot pip:vllm==0.33.0 "
        "--config example:qwen3-next"): [
        "Mamba cache mode is set to 'align' for Qwen3NextForCausalLM by default when prefix "
        "caching is enabled",
        "Setting attention block size to 576 tokens"],
    (G, "recon recipe run vllm-hybrid-page-align --snapshot pip:vllm==0.33.0 "
        "--config example:llama"): ["not a hybrid attention/mamba model"],
    (G, "recon demo"): [
        "flags: vllm serve Qwen/Qwen3-Next-80B-A3B-Instruct --tensor-parallel-size 4",
        "Setting attention block size to 320 tokens", "Padding mamba page size by 19.40%"],
    (G, "head -11 demo.md"): [
        "# recon demo", "| 1 | vllm-hybrid-page-align · qwen3-next-80b-a3b-instruct.json | vllm 0.33.0 |",
        "sha256:4b6bdec4ab269990bf70d45a3c1e94c3760a27064513760193b26d6f0da883aa"],
    # probe
    (G, "recon probe new -o probes/capture"): [
        "│ method │ (self, uniform_decode_query_len: int) │"],
    (G, "ls probes/capture"): ["README.md _recon_probe_runtime.py probe.json sitecustomize.py"],
    (G, "recon probe check probes/capture"): [
        "chained sitecustomize: none",
        "│ vllm.config.compilation:CompilationConfig.adjust_cudagraph_sizes_for_spec_decode │ pending │"],
    (G, "PYTHONPATH="): ["[4, 4, 4, 8, 16, 32, 64]"],
    (G, "recon probe read logs --markdown"): [
        "1 processes, 1 files, 0 unreadable lines.",
        '| `vllm.utils.math_utils:round_up` | 1 | 7 | 7 | - x7 | `{"args":{"x":1,"y":4},"return":4}` '
        '| `{"args":{"x":64,"y":4},"return":64}` | 0 |'],
    (G, "recon probe read logs"): [
        "patched in 1 processes, calls 7, logged 7 (0 metadata-only), raised 0, errors 0",
        'first {"args":{"x":1,"y":4},"return":4}', 'last {"args":{"x":64,"y":4},"return":64}'],
    # diff, bisect, has
    (G, "recon bisect MambaHybridModelState.add_request"): [
        "vllm.v1.worker.gpu.model_states.mamba_hybrid:MambaHybridModelState.add_request first "
        "changed (body) in 0.32.0 (previous: 0.31.0)", "956e3e6c97", "86dbb0fbcd",
        "+ (new_req_data.num_computed_tokens - 1) // mamba_block_size"],
    (G, "recon has MambaHybridModelState.add_request --in pip:vllm==0.31.0"): [
        "no: vllm.v1.worker.gpu.model_states.mamba_hybrid:MambaHybridModelState.add_request at "
        "vllm/v1/worker/gpu/model_states/mamba_hybrid.py:111",
        "missing mamba_block_size = self.cache_config.mamba_block_size",
        "missing (new_req_data.num_computed_tokens - 1) // mamba_block_size"],
    (G, "recon has MambaHybridModelState.add_request --in pip:vllm==0.33.0 --fixed-in"): [
        "yes: vllm.v1.worker.gpu.model_states.mamba_hybrid:MambaHybridModelState.add_request at "
        "vllm/v1/worker/gpu/model_states/mamba_hybrid.py:112",
        "present assert mamba_block_size is not None"],
    (G, "recon has MambaHybridModelState.add_request --in pip:vllm==0.33.0 -p"): [
        "yes: the pattern is in vllm.v1.worker.gpu.model_states.mamba_hybrid:"
        "MambaHybridModelState.add_request at vllm/v1/worker/gpu/model_states/mamba_hybrid.py:112",
        "124 | (new_req_data.num_computed_tokens - 1) // mamba_block_size"],
    (G, "recon diff pip:vllm==0.31.0 pip:vllm==0.32.0 --section functions --focus Mamba"): [
        "(3 functions on the chain)",
        "functions: 1 code change (1 body); 0 docstring-only; 1 moved only",
        "class fields: 0 field changes; 2 classes compared"],
    (G, "recon diff pip:vllm==0.30.0 pip:vllm==0.31.0"): [
        "functions: 0 code changes; 0 docstring-only; 1 moved only",
        "class fields: 3 field changes in 1 class (1 added, 2 default)"],
    (G, "recon diff pip:vllm==0.31.0 pip:vllm==0.32.0 --section functions --focus vllm.config"): [
        "class fields: 3 field changes in 1 class (2 added, 1 removed)",
        "module constants: 2 module constant changes in 1 module (2 value)"],
    # hotfix: the field case, before and after, and a refusal that names what is missing
    (G, "recon hotfix pip:vllm==0.29.0 --from pip:vllm==0.32.0 --function "
        "MambaHybridModelState.add_request"): [
        "│ running-state column        │ 6335                              │ 87", "(README.md: compose, Kubernetes, verify, rollback)"],
    (G, "recon hotfix pip:vllm==0.29.0 --from pip:vllm==0.32.0 --function "
        "MambaHybridModelState.prepare_attn"): ["refused (names)", "InputBatch.prefi"],
    (G, "recon diff pip:vllm==0.32.0 pip:vllm==0.33.0"): [
        "│ vllm │ changed │ 0.32.0 │ 0.33.0 │",
        "files: 387 added, 29 removed, 905 changed, 4490 unchanged (by sha256)"],
    (G, "recon bisect CompilationConfig.adjust_cudagraph_sizes_for_spec_decode"): [
        "6742e4fc1b", "6a60b2802d", "(self, uniform_decode_query_len: int, tensor_parallel_size: int)",
        "signature <- first change"],
    # logs
    (G, "recon logs tests/data/logs/vllm-0.29.0-align-implicit-mtp.log"): [
        "vLLM 0.29.0, 45 lines, 1 start-up, 3 errors, 4 warnings",
        "attention block size (hybrid alignment) 288 tokens", "mamba page padding 2.86%",
        "KV cache size 1,892,160 tokens"],
    # troubleshooting: the error lines
    (G, "recon snapshot docker-archive:./no-such-image.tar"): [
        "recon: error: archive not found: ./no-such-image.tar"],
    (G, "recon snapshot oci:./no-such-layout"): [
        "recon: error: OCI layout folder not found: ./no-such-layout"],
    (G, "recon snapshot pip:no-such-engine-pkg-xyz==1.0"): [
        "recon: error: pip could not download no-such-engine-pkg-xyz==1.0"],
    (G, "recon snapshot pip:vllm==0.99.0"): ["recon: error: pip could not download vllm==0.99.0"],
    (G, "recon find vllm-0.99.0"): ["recon: error: no snapshot named 'vllm-0.99.0'"],
    (G, "recon run vllm-0.33.0 vllm.v1.worker.gpu.model_states.mamba_hybrid:"): [
        "class MambaHybridModelState (vllm/v1/worker/gpu/model_states/mamba_hybrid.py:74) and "
        "its bases in the package have no member 'no_such_method'"],
    (G, "recon run pip:vllm==0.31.0 vllm.config.compilation:"): [
        "recon: error: the slice tried starting a process (subprocess.Popen) at "
        "vllm/platforms/interface.py:66; refused by the sandbox"],
}


def test_enough_commands_run() -> None:
    """The docs test runs real commands, and parses every documented one."""
    listing = "\n".join(f"  {k}: {v}" for k, v in PARSE_ONLY.items())
    assert len(EXECUTED) >= MIN_EXECUTED, f"only {len(EXECUTED)} run; parse-only:\n{listing}"
    assert len(RECON) >= MIN_PARSED, len(RECON)
    assert all(PARSE_ONLY.values())


def test_keys_name_one_command_each() -> None:
    """Every KEYS / STATUS_FROM_PROSE / AFTER entry is the entry of exactly one command, and a
    key is in the output the docs show for it (so a stale key fails here, not silently)."""
    for table in (KEYS, STATUS_FROM_PROSE, AFTER):
        for entry in table:
            hits = [c for c in EXECUTED if not c.variant and _entry(table, c) == entry]
            assert len(hits) == 1, f"{entry} is the entry of {[c.id for c in hits]}"
            if table is KEYS:
                shown = _norm("\n".join(hits[0].output))
                missing = [k for k in KEYS[entry] if _norm(k) not in shown]
                assert not missing, f"{hits[0].id}: keys not in the documented output: {missing}"


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _entry(table: dict[tuple[str, str], Any], cmd: DocCommand) -> tuple[str, str] | None:
    """The entry of ``table`` for ``cmd``: its file, and the longest start of its text."""
    found = [k for k in table if k[0] == cmd.file and cmd.text.startswith(k[1])]
    return max(found, key=lambda k: len(k[1])) if found else None


def _lookup(table: dict[tuple[str, str], Any], cmd: DocCommand) -> Any:
    entry = _entry(table, cmd)
    return None if entry is None else table[entry]


# --- test B: run them ------------------------------------------------------------------------


@dataclass
class Ran:
    status: int
    out: str
    seconds: float


class DocRun:
    """One document's executable commands, run in order in one folder, each once."""

    def __init__(self, file: str, cwd: Path) -> None:
        self.file, self.cwd = file, cwd
        self.steps = [c for c in EXECUTED if c.file == file]
        self.done: dict[str, Ran] = {}
        self.after: dict[str, Ran] = {}  # what AFTER ran, by the id of the step it follows
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "RECON_SNAPSHOTS")}
        # the docs show tables whole, as a wide terminal draws them (piped, recon folds a table
        # at 120 columns, which would split a documented row over lines)
        env["COLUMNS"] = "400"
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        self.env = env
        for cmd in self.steps:  # this repository's test data, by the relative path the doc names
            for word in cmd.args if cmd.program == "recon" else ():
                if word.startswith("tests/") and (REPO / word).is_file():
                    (cwd / word).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(REPO / word, cwd / word)

    def _here(self, text: str) -> str:
        return text.replace(GUIDE_CWD, str(self.cwd))

    def _run(self, cmd: DocCommand) -> Ran:
        start = time.monotonic()
        env = {**self.env, **{k: self._here(v) for k, v in cmd.env}}
        if cmd.program == "recon":
            argv = [sys.executable, "-m", "recon", *(self._here(a) for a in cmd.args)]
            proc = subprocess.run(argv, cwd=self.cwd, env=env, capture_output=True, text=True,
                                  timeout=900, check=False)
        else:
            if cmd.program == "cat" and not (self.cwd / cmd.args[0]).exists():
                (self.cwd / cmd.args[0]).write_text("\n".join(cmd.output) + "\n")
            proc = subprocess.run(["bash", "-c", self._here(cmd.text)], cwd=self.cwd, env=env,
                                  capture_output=True, text=True, timeout=300, check=False)
        return Ran(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start)

    def through(self, cmd: DocCommand) -> Ran:
        """Run every step up to ``cmd`` that has not run yet; ``cmd``'s result."""
        for step in self.steps:
            if step.id not in self.done:
                self.done[step.id] = self._run(step)
                after = _lookup(AFTER, step) if not step.variant else None
                if after is not None:
                    proc = subprocess.run([sys.executable, "-m", "recon", *after[0]], cwd=self.cwd,
                                          env=self.env, capture_output=True, text=True,
                                          timeout=900, check=False)
                    self.after[step.id] = Ran(proc.returncode, proc.stdout + proc.stderr, 0.0)
            if step.id == cmd.id:
                return self.done[step.id]
        raise KeyError(cmd.id)


@pytest.fixture(scope="module")
def doc_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, DocRun]]:
    runs = {f: DocRun(f, tmp_path_factory.mktemp(f.replace(".", "-"))) for f in
            sorted({c.file for c in EXECUTED})}
    yield runs
    took = sorted(((r.seconds, i) for run in runs.values() for i, r in run.done.items()),
                  reverse=True)
    total = sum(s for s, _ in took)
    print(f"\ndocs test: {len(took)} commands run in {total:.0f} s; slowest: "
          + ", ".join(f"{i} {s:.1f}s" for s, i in took[:5]))


def expected_status(cmd: DocCommand) -> int | str:
    """The documented exit status: stated in the prose, shown by ``echo "exit $?"``, any
    non-zero one under a ``recon: error:`` line, else 0."""
    said = _lookup(STATUS_FROM_PROSE, cmd)
    if said is not None:
        return int(said[0])
    if cmd.shown_exit is not None:
        return cmd.shown_exit
    return "non-zero" if cmd.shows_error else 0


@pytest.mark.slow
@pytest.mark.timeout(1800)  # run alone (-k), a command first runs the steps before it
@pytest.mark.parametrize("cmd", EXECUTED, ids=lambda c: c.id)
def test_runs_as_written(cmd: DocCommand, doc_runs: dict[str, DocRun]) -> None:
    run = doc_runs[cmd.file]
    ran = run.through(cmd)
    problems = []
    want = expected_status(cmd)
    if (ran.status == 0) if want == "non-zero" else (ran.status != want):
        problems.append(f"exited {ran.status}, the docs say {want}")
    keys: list[str] = (_lookup(KEYS, cmd) or []) if not cmd.variant else []
    missing = [k for k in keys if _norm(k) not in _norm(ran.out)]
    if missing:
        problems.append(f"did not print {missing}")
    after = run.after.get(cmd.id)
    if after is not None and after.status != 0:
        problems.append(f"the step the prose says comes next failed: {after.out[-500:]}")
    assert not problems, f"{cmd.id}: `{cmd.text}`: " + "; ".join(problems) + f"\n{ran.out[-1500:]}"
