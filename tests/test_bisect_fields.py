"""``recon bisect`` of a class field or module constant over real vLLM releases.

The answers were read in the wheels (``unzip -p vllm-X.whl vllm/config/...``):

``vllm/config/cache.py``: ``MambaCacheMode = Literal["all", "align", "none"]``
at line 62 in 0.30.0 and 0.31.0; ``Literal["align", "none"]`` at line 63 in
0.32.0 and line 176 in 0.33.0. So the constant first changes (value) in 0.32.0.

``vllm/config/engram.py`` is not in 0.29.0. ``EngramConfig.cpu_offload`` is
``bool = Field(default_factory=_default_cpu_offload)`` at line 44 in 0.30.0,
``bool = True`` at line 38 in 0.31.0 and line 37 in 0.32.0: it appears in
0.30.0 and its default changes in 0.31.0.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from recon.cli import main
from recon.diffing.bisect import bisect
from recon.errors import ReconError
from recon.snapshots.model import Snapshot

MAMBA_MODE = "vllm.config.cache:MambaCacheMode"
CPU_OFFLOAD = "vllm.config.engram:EngramConfig.cpu_offload"


@pytest.fixture(scope="module")
def snaps(pip_snapshot: Callable[..., Snapshot]) -> dict[str, str]:
    return {v: str(pip_snapshot(f"vllm=={v}").root)
            for v in ("0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0")}


def test_module_constant_first_changes_in_0_32(snaps: dict[str, str]) -> None:
    res = bisect(MAMBA_MODE, [snaps[v] for v in ("0.30.0", "0.31.0", "0.32.0", "0.33.0")])
    assert res.target == "constant"
    table = [(r.version, r.location, r.assignment.text() if r.assignment else None, r.status)
             for r in res.rows]
    old, new = "Literal['all', 'align', 'none']", "Literal['align', 'none']"
    assert table == [
        ("0.30.0", "vllm/config/cache.py:62", f"MambaCacheMode = {old}", "first"),
        ("0.31.0", "vllm/config/cache.py:62", f"MambaCacheMode = {old}", "same"),
        ("0.32.0", "vllm/config/cache.py:63", f"MambaCacheMode = {new}", "value"),
        ("0.33.0", "vllm/config/cache.py:176", f"MambaCacheMode = {new}", "same")]
    assert res.first is not None and res.first.version == "0.32.0"
    assert res.changes == [2]
    assert res.verdict() == f"{MAMBA_MODE} first changed (value) in 0.32.0 (previous: 0.31.0)"
    assert res.diff == ["--- 0.31.0/vllm/config/cache.py:62", "+++ 0.32.0/vllm/config/cache.py:63",
                        "@@ -1 +1 @@", f"-MambaCacheMode = {old}", f"+MambaCacheMode = {new}"]


def test_class_field_appears_then_default_changes(snaps: dict[str, str]) -> None:
    res = bisect(CPU_OFFLOAD, [snaps[v] for v in ("0.29.0", "0.30.0", "0.31.0", "0.32.0")])
    assert res.target == "field"
    table = [(r.version, r.present, r.location, r.assignment.key if r.assignment else None,
              r.status) for r in res.rows]
    assert table == [
        ("0.29.0", False, None, None, "absent"),
        ("0.30.0", True, "vllm/config/engram.py:44",
         ("bool", "Field(default_factory=_default_cpu_offload)"), "appeared"),
        ("0.31.0", True, "vllm/config/engram.py:38", ("bool", "True"), "default"),
        ("0.32.0", True, "vllm/config/engram.py:37", ("bool", "True"), "same")]
    assert res.rows[0].note == "no module vllm.config.engram"
    assert res.first is not None and res.first.version == "0.30.0"
    assert res.diff[0] == "--- /dev/null"
    # from the first release that has it, the first change is the default
    later = bisect(CPU_OFFLOAD, [snaps[v] for v in ("0.30.0", "0.31.0", "0.32.0")])
    assert later.first is not None and later.first.version == "0.31.0"
    assert later.first.parts == ("default",)
    assert later.verdict() == f"{CPU_OFFLOAD} first changed (default) in 0.31.0 (previous: 0.30.0)"
    assert later.diff[3:] == ["-cpu_offload: bool = Field(default_factory=_default_cpu_offload)",
                              "+cpu_offload: bool = True"]
    # the dotted form names the same field
    assert bisect("vllm.config.engram.EngramConfig.cpu_offload",
                  [snaps["0.31.0"], snaps["0.32.0"]]).qualname == CPU_OFFLOAD


def test_json_carries_the_rows(snaps: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    try:
        main(["bisect", MAMBA_MODE, "--versions",
              ",".join(snaps[v] for v in ("0.31.0", "0.32.0")), "--json"])
    except SystemExit as ex:
        assert not ex.code
    data = json.loads(capsys.readouterr().out)
    assert data["target"] == "constant" and data["first_change"] == "0.32.0"
    assert [(r["version"], r["present"], r["location"], r["annotation"], r["value"], r["text"],
             r["status"], r["parts"]) for r in data["rows"]] == [
        ("0.31.0", True, "vllm/config/cache.py:62", None, "Literal['all', 'align', 'none']",
         "MambaCacheMode = Literal['all', 'align', 'none']", "first", []),
        ("0.32.0", True, "vllm/config/cache.py:63", None, "Literal['align', 'none']",
         "MambaCacheMode = Literal['align', 'none']", "value", ["value"])]
    assert "+MambaCacheMode = Literal['align', 'none']" in data["diff"]


def test_terminal_table(snaps: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    try:
        main(["bisect", CPU_OFFLOAD, "--versions",
              ",".join(snaps[v] for v in ("0.30.0", "0.31.0"))])
    except SystemExit as ex:
        assert not ex.code
    out = capsys.readouterr().out
    assert "class field" in out and "first change" in out
    assert f"{CPU_OFFLOAD} first changed (default) in 0.31.0" in " ".join(out.split())


def test_neither_function_field_nor_constant(snaps: dict[str, str],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    two = [snaps["0.31.0"], snaps["0.32.0"]]
    with pytest.raises(ReconError, match=r"no function, class field or module constant "
                       r"'vllm.config.engram:EngramConfig.cpu_ofload' in any of the 2 releases; "
                       r"did you mean: vllm.config.engram:EngramConfig.cpu_offload"):
        bisect("vllm.config.engram:EngramConfig.cpu_ofload", two)
    with pytest.raises(ReconError, match="no module 'vllm.config.nothing_here'"):
        bisect("vllm.config.nothing_here:X", two)
    with pytest.raises(SystemExit) as ex:
        main(["bisect", "vllm.config.cache:MambaCacheModes", "--versions", ",".join(two)])
    assert ex.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "did you mean: vllm.config.cache:MambaCacheMode?" in err
