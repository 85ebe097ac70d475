"""vllm-dflash-layers on real releases, against values worked out by hand.

The rules (quoted from vLLM 0.33.0's qwen3_dflash.py and eagle3_utils.py):

* causal(i): config.is_causal if set, else dflash_config["causal"] if set, else False
  without layer_types, else layer_types[i] == "sliding_attention";
* sliding(i): use_swa when layer_types is None (or use_swa and no sliding layer), else
  layer_types[i] == "sliding_attention"; window = dflash_config["swa_window_size"] or
  config.sliding_window; mixed sliding/full layers need the V2 model runner;
* aux layers = [id + 1 for id in dflash_config["target_layer_ids"]];
* fc input = (target_hidden_size or hidden_size) x number of aux layers.
"""

from __future__ import annotations

import pytest

from recon.examples import EXAMPLES_DIR
from recon.recipes import run_recipe
from recon.snapshots.model import Snapshot

NAME = "vllm-dflash-layers"
Z_LAB = EXAMPLES_DIR / "qwen3-8b-dflash-b16.json"


def _run(snap: Snapshot, config: object, **options: object):  # noqa: ANN202
    res = run_recipe(NAME, snap, config=config, options=options)
    assert res.applicable, res.reason
    return res


def _layers(res) -> list[list[object]]:  # noqa: ANN001
    table = next(t for t in res.tables if t.title == "draft layers")
    return [row[:3] for row in table.rows]


def test_standard_dflash_draft(vllm_latest: Snapshot) -> None:
    res = _run(vllm_latest, Z_LAB)
    # all five layers "full_attention", nothing set -> causal = ("full" == "sliding") = False
    assert _layers(res) == [[i, "non-causal", "none (full attention)"] for i in range(5)]
    assert res.values["any layer non-causal"] is True
    # target_layer_ids [1, 9, 17, 25, 33] -> +1 each
    assert res.values["aux hidden-state layers of the target"] == [2, 10, 18, 26, 34]
    # 4096 (no target_hidden_size) x 5 aux layers = 20480
    assert res.values["fc input size (target hidden x aux layers)"] == 20480
    # 36 target layers: 0 <= every id < 36
    assert ("ok", "every target layer id is a layer of the 36-layer target") in \
        [(f.level, f.text) for f in res.findings]
    # the runner is never consulted for a draft without sliding layers (forbidden stub unused)
    assert any(f.level == "ok" and "never reached" in f.text for f in res.findings)
    assert any("outside packages touched by the run: none" in n for n in res.notes)


def test_use_swa_and_causal_override(vllm_latest: Snapshot) -> None:
    swa = {"num_hidden_layers": 2, "hidden_size": 1024,
           "dflash_config": {"use_swa": True, "swa_window_size": 512, "target_layer_ids": [0, 5]}}
    res = _run(vllm_latest, swa)
    # no layer_types + use_swa -> every layer sliding, window 512; causal: no layer_types -> False
    assert _layers(res) == [[0, "non-causal", 512], [1, "non-causal", 512]]
    assert res.values["aux hidden-state layers of the target"] == [1, 6]
    assert res.values["fc input size (target hidden x aux layers)"] == 1024 * 2
    # dflash_config.causal = true overrides every layer -> nothing non-causal
    causal = {**swa, "dflash_config": {**swa["dflash_config"], "causal": True}}
    res = _run(vllm_latest, causal)
    assert _layers(res) == [[0, "causal", 512], [1, "causal", 512]]
    assert res.values["any layer non-causal"] is False


MIXED = {"num_hidden_layers": 3, "hidden_size": 5376, "sliding_window": 2048,
         "layer_types": ["sliding_attention", "full_attention", "full_attention"],
         "dflash_config": {"target_layer_ids": [1, 30, 61]}}


def test_mixed_layers_need_the_v2_runner(vllm_latest: Snapshot) -> None:
    v2 = _run(vllm_latest, MIXED, v2_model_runner=True, target_layers=60)
    # layer 0 sliding (window from the top-level 2048) and causal; 1-2 full and non-causal
    assert _layers(v2) == [[0, "causal", 2048], [1, "non-causal", "none (full attention)"],
                           [2, "non-causal", "none (full attention)"]]
    found = [(f.level, f.text) for f in v2.findings]
    assert any(level == "info" and "qwen3_dflash.py:131" in text for level, text in found)
    # 61 is not a layer of a 60-layer target (ids run 0..59)
    assert ("error", "target layer ids [61] do not exist in a 60-layer target") in found
    v1 = _run(vllm_latest, MIXED)  # default: the V1 runner
    assert any(f.level == "error" and "NotImplementedError" in f.text
               and "VLLM_USE_V2_MODEL_RUNNER=1" in f.text for f in v1.findings)


def test_across_releases(vllm_latest: Snapshot, pip_snapshot) -> None:  # noqa: ANN001
    old = _run(pip_snapshot("vllm==0.25.0"), Z_LAB)
    new = _run(vllm_latest, Z_LAB)
    assert _layers(old) == _layers(new)
    # 0.25.0 has no dflash_has_any_non_causal: the answer combines its per-layer answers
    assert old.values["any layer non-causal"] is True
    assert any("combines the per-layer answers" in n for n in old.notes)
    assert old.values["aux hidden-state layers of the target"] == [2, 10, 18, 26, 34]
    assert "fc input size (target hidden x aux layers)" not in old.values
    assert {p.qualname.rpartition(":")[2] for p in new.provenance} >= {
        "_resolve_layer_attention", "dflash_has_any_non_causal", "_get_dflash_fc_input_size"}


@pytest.mark.parametrize(("version", "why"), [
    ("0.19.1", "no vllm/model_executor/models/qwen3_dflash.py"),
    # 0.20.0 is the first release with qwen3_dflash.py, but builds the layers in __init__
    ("0.20.0", "no config-level functions"),
])
def test_not_applicable_before_the_functions(pip_snapshot, version: str, why: str) -> None:  # noqa: ANN001
    res = run_recipe(NAME, pip_snapshot(f"vllm=={version}"), config=Z_LAB)
    assert not res.applicable
    assert why in (res.reason or "")
