"""``pip:NAME`` when PyPI cannot be reached: the newest cached release the spec allows, said so.

pip itself runs (a real subprocess) against an index on a closed local port, which refuses the
connection as an unplugged network would; the cache holds wheels of a project named here
(their contents are not read by this step).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from recon.acquire.sources.pip import fetch_wheel
from recon.errors import ReconError


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RECON_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # port 9: nothing listens
    monkeypatch.setenv("PIP_RETRIES", "1")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    wheels = tmp_path / "cache" / "wheels"
    wheels.mkdir(parents=True)
    for version in ("0.9.0", "1.2.0", "2.0.0rc1"):
        with zipfile.ZipFile(wheels / f"recon_offline_demo-{version}-py3-none-any.whl", "w") as z:
            z.writestr("recon_offline_demo/__init__.py", f"__version__ = {version!r}\n")
    return wheels


def test_an_open_spec_takes_the_newest_cached_release_and_says_why(
        offline: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert fetch_wheel("recon-offline-demo").name.startswith("recon_offline_demo-1.2.0-")
    said = capsys.readouterr().err
    assert "PyPI unreachable for recon-offline-demo" in said and "1.2.0" in said
    assert "Failed to establish a new connection" in said  # pip's own reason, kept


def test_the_spec_still_decides_which_cached_release(offline: Path) -> None:
    # as pip: a pre-release only when asked for, an upper bound respected
    assert fetch_wheel("recon-offline-demo>=2.0.0rc1").name.startswith("recon_offline_demo-2.0.0rc1-")
    assert fetch_wheel("recon-offline-demo<1").name.startswith("recon_offline_demo-0.9.0-")


def test_an_exact_pin_not_in_the_cache_is_an_error_with_pips_words(offline: Path) -> None:
    with pytest.raises(ReconError, match=r"pip could not download recon-offline-demo==3\.0\.0: "
                                         r"ERROR: .*Failed to establish a new connection"):
        fetch_wheel("recon-offline-demo==3.0.0")
    with pytest.raises(ReconError, match="could not download recon-offline-demo>5"):
        fetch_wheel("recon-offline-demo>5")  # nothing cached that the spec allows
