"""``recon bisect`` over real vLLM releases; the answers were read in the releases' files.

``MambaHybridModelState.add_request`` (``vllm/v1/worker/gpu/model_states/mamba_hybrid.py``),
read in each release: 0.27.0 line 97, 0.29.0 and 0.30.0 line 115, 0.31.0
line 111, all with the same nine lines of code; 0.32.0 line 112 divides by
``mamba_block_size`` instead of ``self.cache_config.block_size``; 0.33.0 is
byte-identical to 0.32.0. So the first change is 0.32.0 and the other steps
are moves or nothing.

``vllm/tokenizers/detokenizer_utils.py:66`` defines ``_get_leading_space_marker``
in 0.29.0-0.31.0 and ``get_leading_space_marker`` in 0.32.0 and 0.33.0.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from recon.cli import main
from recon.diffing import resolve_range
from recon.diffing.bisect import bisect, resolve_versions
from recon.errors import ReconError
from recon.snapshots.model import Snapshot

ADD_REQUEST = "vllm.v1.worker.gpu.model_states.mamba_hybrid:MambaHybridModelState.add_request"
MAMBA_PATH = "vllm/v1/worker/gpu/model_states/mamba_hybrid.py"
RELEASES = ("0.27.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0")


@pytest.fixture(scope="module")
def snaps(pip_snapshot: Callable[..., Snapshot]) -> list[str]:
    return [str(pip_snapshot(f"vllm=={v}").root) for v in RELEASES]


@pytest.mark.wheels  # real releases from PyPI
def test_range_resolves_to_real_releases_in_order() -> None:
    assert resolve_range("vllm==0.28.0..0.33.0") == (
        "vllm", ["0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0"])
    # post releases in between, ordered as versions (not as strings)
    assert resolve_range("vllm==0.20.0..0.22.1")[1] == [
        "0.20.0", "0.20.1", "0.20.2", "0.21.0", "0.22.0", "0.22.1"]
    assert resolve_range("vllm>=0.31,<0.34")[1] == ["0.31.0", "0.32.0", "0.33.0"]
    assert resolve_versions("vllm==0.32.0..0.33.0") == ["pip:vllm==0.32.0", "pip:vllm==0.33.0"]
    assert resolve_versions(["vllm==0.31.0,vllm==0.33.0"]) == ["pip:vllm==0.31.0", "pip:vllm==0.33.0"]
    with pytest.raises(ReconError, match="0.28.5 is not a release"):
        resolve_range("vllm==0.28.5..0.33.0")


def test_first_change_of_add_request(snaps: list[str]) -> None:
    res = bisect("MambaHybridModelState.add_request", snaps)
    assert res.qualname == ADD_REQUEST
    table = [(r.version, r.function.def_lineno if r.function else None, r.status) for r in res.rows]
    assert table == [("0.27.0", 97, "first"), ("0.29.0", 115, "moved"), ("0.30.0", 115, "same"),
                     ("0.31.0", 111, "moved"), ("0.32.0", 112, "body"), ("0.33.0", 112, "same")]
    assert res.first is not None and res.first.version == "0.32.0"
    assert res.changes == [4]
    assert res.diff[:2] == [f"--- 0.31.0/{MAMBA_PATH}:111", f"+++ 0.32.0/{MAMBA_PATH}:112"]
    assert "+                (new_req_data.num_computed_tokens - 1) // mamba_block_size" in res.diff
    assert len({r.function.ast_hash for r in res.rows[:4]}) == 1  # type: ignore[union-attr]
    assert "first changed (body) in 0.32.0" in res.verdict()


def test_appeared_and_disappeared(snaps: list[str]) -> None:
    new = bisect("vllm.tokenizers.detokenizer_utils:get_leading_space_marker", snaps[1:])
    assert [r.status for r in new.rows] == ["absent", "absent", "absent", "appeared", "same"]
    assert new.first is not None and new.first.version == "0.32.0"
    assert new.diff[0] == "--- /dev/null"
    old = bisect("vllm.tokenizers.detokenizer_utils:_get_leading_space_marker", snaps[1:])
    assert [r.status for r in old.rows] == ["first", "same", "same", "disappeared", "absent"]
    assert old.first is not None and old.first.version == "0.32.0"


@pytest.mark.wheels  # real releases from PyPI
def test_pypi_range_through_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    """The user's path: a PyPI range, downloaded (cached) and snapshotted in parallel."""
    try:
        main(["bisect", ADD_REQUEST, "--versions", "vllm==0.29.0..0.33.0", "--json"])
    except SystemExit as ex:
        assert not ex.code
    data = json.loads(capsys.readouterr().out)
    assert [r["version"] for r in data["rows"]] == ["0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0"]
    assert data["first_change"] == "0.32.0"
    assert [r["status"] for r in data["rows"]] == ["first", "same", "moved", "body", "same"]
    assert all(r["location"].startswith(MAMBA_PATH) for r in data["rows"])
    assert "mamba_block_size" in data["diff"]
