"""The piece budget of a slice: a cut is reported, never silent.

Real vLLM 0.33.0 functions, sliced with budgets too small for their closure:
the slice, ``recon slice`` (stderr warning, ``--json``) and ``recon run``
(warning, and a failure message that names the budget) must all say so; the
same functions under the default budget must say nothing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from recon.errors import ReconError
from recon.slicing import RunFailed, build_slice, run_function
from recon.slicing.closure import DEFAULT_BUDGET, suggest_budget
from recon.snapshots.model import Snapshot
from tests.kit import run_cli

ADJUST = "vllm.config.compilation:CompilationConfig.adjust_cudagraph_sizes_for_spec_decode"
ADJUST_SELF = {"cudagraph_capture_sizes": [1, 2, 4, 8, 16, 32, 64],
               "max_cudagraph_capture_size": 64}
ADJUST_ARGS = {"uniform_decode_query_len": 4}
LAYER = "vllm.model_executor.models.qwen3_dflash:_resolve_layer_attention"
LAYER_CFG = {"num_hidden_layers": 2, "layer_types": ["sliding_attention"] * 2,
             "sliding_window": 4096}
SYMPTOMS = ("NameError", "ImportError", "AttributeError", "StubValueError")


def _hint(budget: int, dropped: int) -> str:
    return (f"the slice was cut at the budget of {budget} piece{'s' if budget != 1 else ''} "
            f"(at least {dropped} piece{'s' if dropped != 1 else ''} dropped); "
            f"try --budget {suggest_budget(budget)}")


def _where(cut: str) -> tuple[str, int]:
    loc = cut.split(" ", 1)[0]
    file, _, line = loc.rpartition(":")
    return file, int(line)


def test_default_budget_keeps_the_whole_closure(vllm_latest: Snapshot) -> None:
    for target in (ADJUST, LAYER):
        sl = build_slice(vllm_latest, target)
        assert sl.budget == DEFAULT_BUDGET
        assert sl.cut == [] and sl.meta["cut"] == []
        assert sl.cut_hint() == "" and sl.cut_warning() == ""
        assert "# CUT:" not in sl.text
    res = run_function(vllm_latest, ADJUST, self_attrs=ADJUST_SELF, args=ADJUST_ARGS)
    assert res.ok and res.slice_cut == [] and res.slice_budget == DEFAULT_BUDGET
    assert res.to_json()["slice_cut"] == []


def test_tiny_budget_reports_what_it_cut(vllm_latest: Snapshot) -> None:
    full = build_slice(vllm_latest, ADJUST)
    full_at = {(p["file"], p["start"]) for p in full.pieces}
    small = build_slice(vllm_latest, ADJUST, budget=2)
    assert small.budget == 2 and small.cut
    assert len(small.cut) == len(set(small.cut))  # each dropped piece listed once
    # every dropped piece is one the complete slice holds, and the small slice does not
    small_at = {(p["file"], p["start"]) for p in small.pieces}
    for entry in small.cut:
        assert _where(entry) in full_at - small_at, entry
    # the slice itself says so at the top, and the metadata carries the list
    header = small.text.split('"""A recon slice', 1)[0]
    assert "# CUT: the closure budget (2 pieces) was reached" in header
    assert all(f"#   {entry}" in header for entry in small.cut)
    assert small.to_json()["cut"] == small.cut and small.to_json()["budget"] == 2
    assert small.cut_hint() == _hint(2, len(small.cut))
    warning = small.cut_warning()
    assert "\n" not in warning and f"--budget {suggest_budget(2)}" in warning
    assert small.cut[0] in warning
    with pytest.raises(ReconError, match="budget must be a positive"):
        build_slice(vllm_latest, ADJUST, budget=0)


def test_running_a_cut_slice_fails_naming_the_budget(vllm_latest: Snapshot) -> None:
    full = run_function(vllm_latest, ADJUST, self_attrs=ADJUST_SELF, args=ADJUST_ARGS)
    assert full.ok
    with pytest.raises(RunFailed) as info:
        run_function(vllm_latest, ADJUST, self_attrs=ADJUST_SELF, args=ADJUST_ARGS, budget=2)
    err = info.value
    cut = build_slice(vllm_latest, ADJUST, budget=2).cut
    msg = str(err)
    assert msg.endswith(_hint(2, len(cut)))
    assert any(s in msg for s in SYMPTOMS)
    assert err.slice_cut == cut and err.slice_budget == 2
    assert err.results and err.results[0].slice_cut == cut


@pytest.mark.parametrize("target, kwargs", [
    (ADJUST, {"self_attrs": ADJUST_SELF, "args": ADJUST_ARGS}),
    (LAYER, {"config": LAYER_CFG, "args": {"layer_idx": 1}}),
])
def test_every_budget_short_of_the_closure(vllm_latest: Snapshot, target: str,
                                           kwargs: dict) -> None:
    """From budget 1 up to the first complete slice: each run either fails naming the
    budget, or answers as the complete slice does while carrying the cut list."""
    answer = run_function(vllm_latest, target, **kwargs)
    assert answer.ok and answer.slice_cut == []
    failures = 0
    budget = 1
    while build_slice(vllm_latest, target, budget=budget).cut:
        cut = build_slice(vllm_latest, target, budget=budget).cut
        try:
            res = run_function(vllm_latest, target, budget=budget, **kwargs)
        except RunFailed as err:
            failures += 1
            assert str(err).endswith(_hint(budget, len(cut))), (budget, str(err))
            assert err.slice_cut == cut
        else:
            # the dropped code was not on this path: same answer, but the cut is on record
            assert res.ok and res.value == answer.value and res.mutated == answer.mutated
            assert res.slice_cut == cut and res.slice_budget == budget
        budget += 1
        assert budget < 100, "the closure of these targets is small"
    assert failures > 0
    res = run_function(vllm_latest, target, budget=budget, **kwargs)
    assert res.ok and res.value == answer.value and res.slice_cut == []


def test_cli_slice_warns_and_json_lists_the_cut(vllm_latest: Snapshot, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    cut = build_slice(vllm_latest, ADJUST, budget=2).cut
    code, stdout, err = run_cli(capsys, "slice", str(vllm_latest.root), ADJUST, "--budget", "2",
                             "--json")
    assert code == 0
    meta = json.loads(stdout)
    assert meta["cut"] == cut and meta["budget"] == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("recon: warning: ")
    assert f"at least {len(cut)} pieces" in lines[0] and cut[0] in lines[0]
    assert f"--budget {suggest_budget(2)}" in lines[0]
    # with -o and tables: the same one line; the written module carries the CUT comment
    out = tmp_path / "small.py"
    code, _, err = run_cli(capsys, "slice", str(vllm_latest.root), ADJUST, "--budget", "2",
                        "-o", str(out))
    assert code == 0 and len(err.strip().splitlines()) == 1 and "warning" in err
    assert "# CUT:" in out.read_text()
    # the default budget: nothing on stderr, an empty cut list
    code, stdout, err = run_cli(capsys, "slice", str(vllm_latest.root), ADJUST, "--json")
    assert code == 0 and err == ""
    meta = json.loads(stdout)
    assert meta["cut"] == [] and meta["budget"] == DEFAULT_BUDGET
    # a budget below one piece is a usage error
    code, _, _ = run_cli(capsys, "slice", str(vllm_latest.root), ADJUST, "--budget", "0")
    assert code == 2


def test_cli_run_fails_naming_the_budget(vllm_latest: Snapshot,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    cut = build_slice(vllm_latest, ADJUST, budget=2).cut
    argv = ["run", str(vllm_latest.root), ADJUST,
            "--self", "cudagraph_capture_sizes=[1,2,4,8,16,32,64]",
            "--self", "max_cudagraph_capture_size=64", "--arg", "uniform_decode_query_len=4"]
    code, _, err = run_cli(capsys, *argv, "--budget", "2")
    assert code == 4
    lines = err.strip().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("recon: warning: ") and f"--budget {suggest_budget(2)}" in lines[0]
    assert lines[1].startswith("recon: error: ") and lines[1].endswith(_hint(2, len(cut)))
    code, stdout, err = run_cli(capsys, *argv, "--budget", "2", "--json")
    assert code == 4
    data = json.loads(stdout)
    assert data["ok"] is False and data["slice_cut"] == cut and data["slice_budget"] == 2
    assert data["failed"].endswith(_hint(2, len(cut)))
    assert data["results"][0]["slice_cut"] == cut
    # the default budget: the answer, no warning, an empty cut list in the JSON
    code, stdout, err = run_cli(capsys, *argv, "--json")
    assert code == 0 and "warning" not in err
    data = json.loads(stdout)
    assert data["ok"] and data["slice_cut"] == [] and data["slice_budget"] == DEFAULT_BUDGET


def test_cli_run_that_succeeds_despite_a_cut_still_warns(vllm_latest: Snapshot, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(LAYER_CFG))
    # the largest budget that still cuts leaves out only what the last kept piece needs:
    # the get_current_vllm_config machinery, which layer 1 of an all-sliding config never
    # reaches (test_run.py: test_forbid_on_an_untaken_branch_passes), so the run answers
    budget = 1
    while build_slice(vllm_latest, LAYER, budget=budget + 1).cut:
        budget += 1
    cut = build_slice(vllm_latest, LAYER, budget=budget).cut
    code, stdout, err = run_cli(capsys, "run", str(vllm_latest.root), LAYER, "--config", str(cfg),
                             "--arg", "layer_idx=1", "--budget", str(budget), "--json")
    warnings = [ln for ln in err.splitlines() if ln.startswith("recon: warning: ")]
    assert len(warnings) == 1 and f"at least {len(cut)} piece" in warnings[0]
    assert code == 0, err
    data = json.loads(stdout)
    assert data["ok"] and data["value"] == [4096, True] and data["slice_cut"] == cut
    assert data["slice_budget"] == budget


def test_budget_option_documents_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    for verb in ("slice", "run"):
        code, stdout, _ = run_cli(capsys, verb, "--help")
        assert code == 0
        text = re.sub(r"[\s│]+", " ", stdout)
        assert f"(default {DEFAULT_BUDGET})" in text, verb


@pytest.mark.parametrize("target", [ADJUST, LAYER])
def test_targets_are_kept_whatever_the_budget(vllm_latest: Snapshot, target: str) -> None:
    """A target was asked for by name: even at a budget of one piece its definition is in the
    slice (only what it needs is cut), so the failure is about a missing dependency."""
    name = target.rpartition(".")[2].rpartition(":")[2]
    sl = build_slice(vllm_latest, target, budget=1)
    assert sl.cut, "a budget of one piece must cut something"
    assert re.search(rf"^\s*def {re.escape(name)}\(", sl.text, re.M), sl.text[:2000]
    assert not any(c.endswith(f" {name}") for c in sl.cut)
