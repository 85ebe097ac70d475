"""``recon diff --html/--markdown`` reports stay a size a person can open, and fit a laptop screen.

A release pair such as vLLM 0.32.0 -> 0.33.0 changes about 7,300 functions; the reports
once rendered every one of them (31 MB of HTML, with Pygments' inline styles on every
token) and a long class-field default pushed the page sideways. Here two small synthetic
releases with 600 changed functions and very long values go through the real ``recon``
command in a subprocess, and the HTML is laid out by headless Chromium at 1366x768.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(30)

#: Changed functions in the synthetic pair (``MODULES`` modules of ``PER_MODULE`` each).
MODULES, PER_MODULE = 6, 100
CHANGED = MODULES * PER_MODULE
LIMIT = 50

#: Where Debian's ``chromium-headless-shell`` package puts the browser (and its wrapper).
BROWSERS = ("chromium-headless-shell", "/usr/lib/chromium/chromium-headless-shell", "chromium")


def _long_value(word: str) -> str:
    """A value with no place a browser may break a line (no spaces, no hyphens)."""
    return "_".join([word] * 80)


def _release(root: Path, version: str, step: int, word: str) -> Path:
    """A ``vllm`` package folder: every function's body depends on ``step``, values on ``word``."""
    pkg = root / "vllm"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f'__version__ = "{version}"\n')
    for m in range(MODULES):
        defs = [f"def f_{m}_{i}(x):\n    return x * {i} + {step}\n\n\n" for i in range(PER_MODULE)]
        if m == 0:  # one diff line far wider than the page: its <pre> must scroll, not the page
            defs[0] = f"def f_0_0(x):\n    return {_long_value(word)!r} * x + {step}\n\n\n"
        (pkg / f"mod_{m}.py").write_text("".join(defs))
    (pkg / "config.py").write_text(
        "from dataclasses import dataclass\n\n"
        f"ENDPOINTS = {_long_value(word)!r}\n\n\n"
        "@dataclass\nclass Config:\n"
        f"    endpoint: str = {_long_value(word)!r}\n")
    return root


@dataclass(frozen=True)
class Report:
    """One ``recon diff`` run's HTML and Markdown reports."""

    html: str
    markdown: str
    html_path: Path


def _diff(a: Path, b: Path, out: Path, limit: int, env: dict[str, str]) -> Report:
    html_path, md_path = out / f"limit{limit}.html", out / f"limit{limit}.md"
    res = subprocess.run(
        [sys.executable, "-m", "recon", "diff", f"dir:{a}", f"dir:{b}", "--html", str(html_path),
         "--markdown", str(md_path), "--limit", str(limit)],
        capture_output=True, env=env, timeout=120, check=False)
    assert res.returncode == 0, res.stderr.decode()
    return Report(html_path.read_text(), md_path.read_text(), html_path)


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Report]:
    """The pair's reports with ``--limit 50`` and with ``--limit 0`` (no limit)."""
    root = tmp_path_factory.mktemp("report")
    a = _release(root / "a", "1.0", 1, "alpha")
    b = _release(root / "b", "1.1", 2, "omega")
    env = {**{k: v for k, v in os.environ.items() if k != "COLUMNS"},
           "RECON_CACHE": str(root / "cache")}
    return {limit: _diff(a, b, root, limit, env) for limit in (LIMIT, 0)}


def _left_out(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if "left out" in ln]


def test_limit_caps_the_function_sections(reports: dict[int, Report]) -> None:
    short = reports[LIMIT]
    assert short.html.count('<pre class="diff">') == LIMIT
    assert short.markdown.count("```diff") == LIMIT
    assert short.markdown.count("<details>") == LIMIT
    for text in (short.html, short.markdown):
        lines = _left_out(text)
        assert lines and all(f"{CHANGED - LIMIT} more" in ln and "--limit 0" in ln
                             for ln in lines), lines
    full = reports[0]
    assert full.html.count('<pre class="diff">') == CHANGED
    assert full.markdown.count("```diff") == CHANGED
    assert not _left_out(full.html) and not _left_out(full.markdown)


def test_report_size_follows_the_limit(reports: dict[int, Report]) -> None:
    """Fifty sections cost a fraction of six hundred: the page no longer grows with the release."""
    assert len(reports[LIMIT].html) * 4 < len(reports[0].html)
    assert len(reports[LIMIT].markdown) * 4 < len(reports[0].markdown)
    assert len(reports[LIMIT].html) < 200_000


def test_one_stylesheet_no_inline_styles_no_scripts(reports: dict[int, Report]) -> None:
    for report in reports.values():
        page = report.html
        assert page.count("<style>") == 1
        # counts, not `in`: pytest would diff a half-megabyte page against the needle
        assert page.count('style="') == page.count("style='") == 0
        assert page.count("<script") == 0
        assert page.count('<span class="k">return</span>') > 0  # colours by CSS class


def _browser() -> str:
    """The headless Chromium binary; in CI its absence is a failure, elsewhere a skip."""
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    msg = "headless Chromium not found (apt-get install -y chromium-headless-shell)"
    if os.environ.get("CI"):
        pytest.fail("CI must provide a browser; " + msg)
    pytest.skip(msg)


#: Appended to the test's copy of a report (the report itself has no scripts): open every
#: folded section, then record the page's width and the window's on the root element.
MEASURE = ("<script>for (const d of document.querySelectorAll('details')) d.open = true;"
           "const r = document.documentElement;"
           "r.dataset.widths = r.scrollWidth + ' ' + window.innerWidth;</script>")


def _laid_out_widths(browser: str, page: Path, tmp: Path) -> tuple[int, int]:
    """``(page width, window width)`` in CSS pixels, as Chromium lays the page out at 1366x768."""
    probe = tmp / "measure.html"
    probe.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    res = subprocess.run(
        [browser, "--no-sandbox", "--headless", "--disable-gpu", "--window-size=1366,768",
         "--virtual-time-budget=2000", "--dump-dom", probe.as_uri()],
        capture_output=True, text=True, timeout=25, check=False)
    found = re.search(r'data-widths="(\d+) (\d+)"', res.stdout)
    assert found, f"no widths in the dumped page (exit {res.returncode}): {res.stderr[-800:]}"
    return int(found[1]), int(found[2])


def test_html_never_scrolls_sideways_on_a_laptop(reports: dict[int, Report],
                                                 tmp_path: Path) -> None:
    """Long field and constant values wrap, wide diff lines scroll inside their own box."""
    browser = _browser()
    page = reports[0]
    assert "alpha_alpha" in page.html and "omega_omega" in page.html  # the long values are there
    width, window = _laid_out_widths(browser, page.html_path, tmp_path)
    assert window == 1366
    assert width <= window, f"the page is {width} px wide in a {window} px window"
