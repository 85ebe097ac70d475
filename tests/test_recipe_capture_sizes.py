"""vllm-capture-sizes on real vLLM releases from PyPI; every expected value worked out by hand.

The rules used for the hand arithmetic, read from the releases' code:

* ``CompilationConfig.adjust_cudagraph_sizes_for_spec_decode`` (V1 model runner, decode mode
  FULL, q = k + 1 > 1): sizes -> sorted({round_up(s, q) for s if round_up(s, q) <= max}),
  max -> the last of them.
* ``VllmConfig._set_cudagraph_sizes`` (0.33.0) when no sizes are given: max = min(
  max_num_seqs * q * 2, 512 on sm90), then min(max_num_batched_tokens, max); sizes =
  [1, 2, 4] + range(8, min(max + 1, 256), 8) + range(256, max + 1, 16) (+ max_num_batched_tokens
  when it fits, + uniform decode sizes).
* V1 ``CudagraphDispatcher.dispatch``: a step of T tokens above the max runs eager; else it is
  padded to the smallest captured size >= T, FULL when a uniform-decode key exists.
* V2 ``CudaGraphManager``: FULL decode graphs at round_up(s, q) for each size s (<= max and
  <= max_num_seqs * q); PIECEWISE graphs at every size; a step takes the smallest compatible one.
"""

from __future__ import annotations

from typing import Any

import pytest

from recon.errors import ReconError
from recon.recipes import run_recipe
from recon.snapshots.model import Snapshot


def run_sliced(name: str, snapshot: Any, *, options: dict[str, Any] | None = None,
               **kwargs: Any) -> Any:
    """The recipe's slicing mode (recon's reading of the flags; engine mode is tested in
    tests/test_engine_recipes.py)."""
    return run_recipe(name, snapshot, options={"mode": "slice", **(options or {})}, **kwargs)


NAME = "vllm-capture-sizes"
SIZES = "[1,2,4,8,16,32,64]"


def _flags(seqs: int, k: int | None, sizes: str | None = SIZES, max_size: int | None = 64,
           tokens: int | None = 8192) -> str:
    line = f"vllm serve M --max-num-seqs {seqs}"
    if tokens is not None:
        line += f" --max-num-batched-tokens {tokens}"
    if k is not None:
        line += f" --speculative-config '{{\"method\": \"mtp\", \"num_speculative_tokens\": {k}}}'"
    if sizes is not None:
        cc = f'"cudagraph_capture_sizes": {sizes}'
        if max_size is not None:
            cc += f', "max_cudagraph_capture_size": {max_size}'
        line += f" --compilation-config '{{{cc}}}'"
    return line


def _per_n(res, runner: str) -> dict[int, str]:  # noqa: ANN001
    table = next(t for t in res.tables if t.title.startswith("per N"))
    col = table.columns.index(f"{runner} runner")
    return {row[0]: row[col] for row in table.rows}


def test_field_case_mtp3_on_latest(vllm_latest: Snapshot) -> None:
    # seed 000 section 9: k=3 -> q=4. V1: round_up(1,4)=4, 2->4, 4, 8, 16, 32, 64 (all <= 64)
    # -> [4, 8, 16, 32, 64], max 64. V2 keeps the configured sizes.
    res = run_sliced(NAME, vllm_latest, flags=_flags(seqs=20, k=3))
    v = res.values
    assert v["uniform decode query length (k+1)"] == 4
    assert v["sizes after the release's size logic"] == [1, 2, 4, 8, 16, 32, 64]
    assert v["V1 runner: capture sizes"] == [4, 8, 16, 32, 64]
    assert v["V1 runner: max capture size"] == 64
    assert v["V2 runner: capture sizes"] == [1, 2, 4, 8, 16, 32, 64]
    assert v["V1 runner: cudagraph mode"] == "FULL_AND_PIECEWISE"  # the release's O2 default
    # N=3: 12 tokens -> smallest size >= 12 is 16; N=5: 20 -> 32; N=16: 64 -> 64;
    # N=17: 68 > 64 -> eager. The same for both runners (V2's decode graphs are 4,8,16,32,64).
    for runner in ("V1", "V2"):
        per_n = _per_n(res, runner)
        assert per_n[1] == "FULL 4" and per_n[3] == "FULL 16" and per_n[5] == "FULL 32"
        assert per_n[16] == "FULL 64" and per_n[17] == "eager" and per_n[20] == "eager"
        assert v[f"{runner} runner: largest N in a graph"] == 16
    assert any("17 or more running requests" in f.text for f in res.findings)
    assert any("[1, 2, 4, 8, 16, 32, 64] to [4, 8, 16, 32, 64]" in f.text for f in res.findings)
    ran = {p.qualname.rpartition(":")[2] for p in res.provenance}
    assert {"VllmConfig._set_cudagraph_sizes", "CompilationConfig.resolve_cudagraph_mode_and_sizes",
            "CompilationConfig.adjust_cudagraph_sizes_for_spec_decode",
            "CudagraphDispatcher.dispatch", "CudaGraphManager.dispatch"} <= ran
    assert all(len(p.sha256) == 64 for p in res.provenance)


def test_k2_the_two_model_runners_differ(vllm_latest: Snapshot) -> None:
    # k=2 -> q=3. V1: 1->3, 2->3, 4->6, 8->9, 16->18, 32->33, 64->66 > 64 dropped
    # -> [3, 6, 9, 18, 33], max 33: N <= 11 (33 tokens) in a graph, N=12 (36) eager.
    # V2: sizes stay [1..64]; FULL decode graphs at 3, 6, 9, 18, 33 (66 > 64 dropped);
    # PIECEWISE graphs at every size up to 64, so N=12..21 (36..63 tokens) -> PIECEWISE 64,
    # N=22 (66 > 64) eager.
    res = run_sliced(NAME, vllm_latest, flags=_flags(seqs=24, k=2))
    v = res.values
    assert v["V1 runner: capture sizes"] == [3, 6, 9, 18, 33]
    assert v["V1 runner: max capture size"] == 33
    assert v["V2 runner: max capture size"] == 64
    v1, v2 = _per_n(res, "V1"), _per_n(res, "V2")
    assert v1[4] == "FULL 18" and v2[4] == "FULL 18"      # 12 tokens -> 18
    assert v1[11] == "FULL 33" and v2[11] == "FULL 33"
    assert v1[12] == "eager" and v2[12] == "PIECEWISE 64"
    assert v2[21] == "PIECEWISE 64" and v2[22] == "eager"
    assert v["V1 runner: largest N in a graph"] == 11
    assert v["V2 runner: largest N in a graph"] == 21


def test_default_sizes_without_spec_decode(vllm_latest: Snapshot) -> None:
    # no sizes, k=0 (q=1), max_num_seqs=256, no --max-num-batched-tokens: the release's
    # `vllm serve` default for an 80 GiB H100 is 8192 (EngineArgs.get_batch_defaults).
    # max = min(256*1*2, 512) = 512; min(8192, 512) = 512.
    # sizes = [1,2,4] + range(8, 256, 8) (31 sizes) + range(256, 513, 16) (17 sizes)
    # (+ uniform decode size max_num_seqs=256, already there) -> 51 sizes, max 512.
    res = run_sliced(NAME, vllm_latest, flags=_flags(seqs=256, k=None, sizes=None, tokens=None))
    v = res.values
    want = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 513, 16))
    assert len(want) == 51
    assert v["sizes after the release's size logic"] == want
    assert v["V1 runner: capture sizes"] == want        # q=1: nothing to round
    assert v["max size after the release's size logic"] == 512
    assert v["V1 runner: largest N in a graph"] == 256
    assert res.inputs["max_num_batched_tokens"] == 8192
    assert any("8192, the release's `vllm serve` default" in n for n in res.notes)
    assert any(f.level == "ok" and "every decode step up to --max-num-seqs 256" in f.text
               for f in res.findings)


def test_two_releases_old_and_recent(pip_snapshot) -> None:  # noqa: ANN001
    # vLLM 0.31.0 rounds like 0.33.0 (V1: [4, 8, 16, 32, 64]).
    recent = run_sliced(NAME, pip_snapshot("vllm==0.31.0"), flags=_flags(seqs=20, k=3))
    assert recent.values["V1 runner: capture sizes"] == [4, 8, 16, 32, 64]
    assert _per_n(recent, "V1")[17] == "eager"
    # vLLM 0.10.2 has no spec-decode rounding: init_with_cudagraph_sizes keeps the sizes
    # (sorted descending there), max 64; its default mode is PIECEWISE (V1 engine,
    # piecewise compilation). N=3: 12 tokens -> pad_for_cudagraph -> 16; N=16: 64;
    # N=17: 68 > 64 -> eager (the runner's check before padding).
    old = run_sliced(NAME, pip_snapshot("vllm==0.10.2"), flags=_flags(seqs=20, k=3))
    assert old.values["V1 runner: capture sizes"] == [64, 32, 16, 8, 4, 2, 1]
    assert old.values["V1 runner: cudagraph mode"] == "PIECEWISE"
    per_n = _per_n(old, "V1")
    assert per_n[1] == "PIECEWISE 4" and per_n[3] == "PIECEWISE 16" and per_n[16] == "PIECEWISE 64"
    assert per_n[17] == "eager"
    assert "V2 runner: capture sizes" not in old.values
    # 0.10.2 without sizes: the scheduler default cuda_graph_sizes = [min(8 * 2, 512)] = [16]
    # -> [1, 2, 4] + range(8, 17, 8) = [1, 2, 4, 8, 16], kept descending.
    old_default = run_sliced(NAME, pip_snapshot("vllm==0.10.2"),
                             flags=_flags(seqs=8, k=None, sizes=None))
    assert old_default.values["V1 runner: capture sizes"] == [16, 8, 4, 2, 1]


def test_malformed_compilation_config(vllm_latest: Snapshot) -> None:
    with pytest.raises(ReconError, match="--compilation-config: malformed value"):
        run_sliced(NAME, vllm_latest, flags="vllm serve M --compilation-config '{\"sizes\": [1,'")
    with pytest.raises(ReconError, match="cudagraph_capture_sizes must be a list of positive"):
        run_sliced(NAME, vllm_latest,
                   flags="vllm serve M --compilation-config '{\"cudagraph_capture_sizes\": \"64\"}'")
