"""vllm-capture-sizes on real releases; expected sizes worked out by hand below."""

from __future__ import annotations

from recon.recipes import run_recipe

FLAGS = ("vllm serve M --max-num-seqs {seqs} --speculative-config "
         "'{{\"method\": \"mtp\", \"num_speculative_tokens\": {k}}}' "
         "--compilation-config '{{\"cudagraph_capture_sizes\": [1,2,4,8,16,32,64]}}'")


def test_seed_000_mtp3_rounds_to_multiples_of_4(vllm_latest) -> None:  # noqa: ANN001
    # k=3 -> query length 4: round_up(1,4)=4, round_up(2,4)=4, 4, 8, 16, 32, 64 -> unique [4,8,16,32,64]
    res = run_recipe("vllm-capture-sizes", vllm_latest, flags=FLAGS.format(seqs=32, k=3))
    assert res.values["resolved sizes"] == [4, 8, 16, 32, 64]
    assert res.values["max capture size"] == 64
    rows = {r[0]: r for r in res.tables[0].rows}
    assert rows[16][2:] == ["graph", 64]   # 16 x 4 = 64 tokens, the largest size
    assert rows[17][2] == "eager"          # 17 x 4 = 68 > 64
    assert any("17 or more running requests" in f.text for f in res.findings)
    assert res.provenance[0].file == "vllm/config/compilation.py"


def test_k2_drops_sizes_above_the_max(vllm_latest) -> None:  # noqa: ANN001
    # k=2 -> q=3: 1->3, 2->3, 4->6, 8->9, 16->18, 32->33, 64->66 > 64 dropped -> [3,6,9,18,33], max 33
    res = run_recipe("vllm-capture-sizes", vllm_latest, flags=FLAGS.format(seqs=16, k=2))
    assert res.values["resolved sizes"] == [3, 6, 9, 18, 33]
    assert res.values["max capture size"] == 33
    rows = {r[0]: r for r in res.tables[0].rows}
    assert rows[11][2:] == ["graph", 33]   # 11 x 3 = 33
    assert rows[12][2] == "eager"          # 12 x 3 = 36 > 33


def test_same_answer_on_an_older_release(pip_snapshot) -> None:  # noqa: ANN001
    res = run_recipe("vllm-capture-sizes", pip_snapshot("vllm==0.31.0"), flags=FLAGS.format(seqs=32, k=3))
    assert res.applicable
    assert res.values["resolved sizes"] == [4, 8, 16, 32, 64]


def test_without_sizes_it_says_what_it_needs(vllm_latest) -> None:  # noqa: ANN001
    res = run_recipe("vllm-capture-sizes", vllm_latest, flags="vllm serve M --max-num-seqs 8")
    assert not res.applicable and "cudagraph_capture_sizes" in res.reason
