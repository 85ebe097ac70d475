"""Execute every notebook in notebooks/ through nbclient, the way Jupyter runs it.

Each notebook is committed as a jupytext pair: the percent-format ``.py`` (the
reviewed source) and its ``.ipynb`` without outputs. The pair must be in sync and
the ``.ipynb`` free of outputs. The ``.py`` is read with jupytext and executed top
to bottom in a fresh ``python3`` kernel running this interpreter, with a
temporary folder as its working directory, so a notebook that reaches files
through relative paths fails here. A cell that raises fails the test with its
source and the error; a notebook that imports matplotlib must show a figure (an
``image/png`` output). The notebooks use real releases from PyPI (wheels cached in
~/.cache/recon after the first download).

They need the ``notebooks`` extra (``pip install -e '.[notebooks]'``); without it
these tests skip, except under CI (``CI`` set), where they fail.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.py"))
INSTALL = "pip install -e '.[notebooks]'"
CELL_TIMEOUT = 300  # seconds per cell: a first run downloads wheels and builds environments
FORMATS = "ipynb,py:percent"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _on_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _require(*modules: str) -> None:
    """Skip (fail under CI) when a module of the notebooks extra is missing."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if not missing:
        return
    why = f"the notebook tests need {', '.join(missing)}: {INSTALL}"
    if _on_ci():
        pytest.fail(f"{why} (CI is set: these tests must run, not skip)", pytrace=False)
    pytest.skip(why)


def _cells(nb: Any) -> list[tuple[str, str]]:
    return [(c.cell_type, c.source) for c in nb.cells]


def test_there_are_notebooks() -> None:
    assert NOTEBOOKS, "no notebooks/*.py found"


def test_every_ipynb_has_its_py() -> None:
    orphans = [p.name for p in NOTEBOOK_DIR.glob("*.ipynb") if not p.with_suffix(".py").exists()]
    assert not orphans, f"notebooks without their jupytext .py source: {orphans}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_pair_in_sync(notebook: Path) -> None:
    _require("jupytext")
    import jupytext

    rel = notebook.relative_to(NOTEBOOK_DIR.parent)
    ipynb = notebook.with_suffix(".ipynb")
    assert ipynb.exists(), f"{ipynb.name} missing: jupytext --set-formats {FORMATS} {rel}"
    source = jupytext.read(notebook)
    paired = jupytext.read(ipynb)
    formats = source.metadata.get("jupytext", {}).get("formats")
    assert formats == FORMATS, f"{rel} is not paired (formats {formats!r}): " \
                               f"jupytext --set-formats {FORMATS} {rel}"
    a, b = _cells(source), _cells(paired)
    first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    assert a == b, (f"{ipynb.name} is out of sync with {notebook.name} from cell {first} "
                    f"({len(a)} cells against {len(b)}): jupytext --sync {rel}")
    dirty = [i for i, c in enumerate(paired.cells)
             if c.cell_type == "code" and (c.get("outputs") or c.get("execution_count"))]
    assert not dirty, (f"{ipynb.name} is committed with outputs (cells {dirty}): "
                       f"jupyter nbconvert --clear-output --inplace {ipynb.relative_to(NOTEBOOK_DIR.parent)}")


@pytest.fixture
def kernel_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder outside the repository, and a ``python3`` kernel that is this interpreter.

    The kernelspec is written under ``JUPYTER_PATH``, which Jupyter searches first, so a
    user-wide ``python3`` kernel of another interpreter cannot stand in for this one.
    """
    spec = tmp_path / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3", "language": "python"}), encoding="utf-8")
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's inline backend: image/png outputs
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "mpl"))
    work = tmp_path / "work"
    work.mkdir()
    return work


def _failure(notebook: Path, nb: Any, err: BaseException) -> str:
    """The failing cell's source and its error, else what nbclient said."""
    for i, cell in enumerate(nb.cells):
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if cell.cell_type == "code" and errors:
            e = errors[0]
            trace = ANSI.sub("", "\n".join(e.get("traceback", [])))
            return (f"{notebook.name}: cell {i} raised {e.get('ename')}: {e.get('evalue')}\n"
                    f"--- cell {i} source\n{cell.source}\n--- traceback\n{trace[-6000:]}")
    return f"{notebook.name}: {type(err).__name__}: {ANSI.sub('', str(err))[-6000:]}"


@pytest.mark.timeout(900)
@pytest.mark.wheels  # the notebooks take real releases from PyPI
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(notebook: Path, kernel_home: Path,
                           record_property: pytest.RecordProperty) -> None:
    _require("jupytext", "nbclient", "ipykernel", "matplotlib")
    import jupytext
    from nbclient import NotebookClient

    nb = jupytext.read(notebook)
    client = NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3",
                            resources={"metadata": {"path": str(kernel_home)}})
    start = time.monotonic()
    failure = None
    try:
        client.execute()
    except Exception as err:  # CellExecutionError, CellTimeoutError, DeadKernelError, ...
        failure = _failure(notebook, nb, err)
    if failure:  # raised here, not in the handler: the report is the cell, not nbclient's text
        pytest.fail(failure, pytrace=False)
    seconds = time.monotonic() - start
    record_property("seconds", round(seconds, 1))
    print(f"{notebook.name}: {seconds:.1f} s")
    if "import matplotlib" in notebook.read_text(encoding="utf-8"):
        images = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                  if "image/png" in o.get("data", {})]
        assert images, f"{notebook.name} imports matplotlib but showed no figure (no image/png output)"
