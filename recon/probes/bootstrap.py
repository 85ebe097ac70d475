"""The bundle's ``sitecustomize.py`` (this file is copied there verbatim).

Python imports ``sitecustomize`` once at start-up in every process whose
``PYTHONPATH`` holds the bundle: that is how the probes reach workers that
``vllm serve`` spawns or forks, with no change to the command line. This file
first runs the ``sitecustomize`` the image already had (Debian's Python ships
one), exactly as ``site.py`` would have, then hands over to the runtime.
Standard library only; nothing here may raise or write to stderr (beyond the
message ``site.py`` itself prints for a failing image ``sitecustomize``).
"""

import os
import sys


def _recon_chain_sitecustomize(here):
    """Run the next ``sitecustomize`` on ``sys.path`` (not ours); return its path."""
    try:
        import importlib.machinery
        import importlib.util

        # Every bundle folder is skipped, not only this one: with two copies of the
        # bundle on PYTHONPATH each would otherwise run the other, forever.
        paths = [p for p in sys.path
                 if not os.path.isfile(os.path.join(p or ".", "_recon_probe_runtime.py"))]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", paths)
        if spec is None or spec.loader is None:
            return None
        module = importlib.util.module_from_spec(spec)
    except Exception as exc:
        return f"lookup failed: {type(exc).__name__}: {exc}"
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # the same message site.py prints for a failing sitecustomize
        sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
                         f"{err.__class__.__name__}: {err}\n")
    # `import sitecustomize` elsewhere still finds the original's names.
    globals().update((k, v) for k, v in vars(module).items() if not k.startswith("__"))
    return spec.origin


def _recon_import_runtime(log_dir):
    """Import the runtime with its bytecode cached under the log folder.

    The bundle is mounted read-only, so Python cannot cache the compiled
    runtime beside it and would compile it again in every process (about
    4 ms). The log folder is writable and ours: keep the cache there.
    """
    prefix, dont_write = sys.pycache_prefix, sys.dont_write_bytecode
    sys.pycache_prefix, sys.dont_write_bytecode = os.path.join(log_dir, ".pycache"), False
    try:
        import _recon_probe_runtime
    finally:
        sys.pycache_prefix, sys.dont_write_bytecode = prefix, dont_write
    return _recon_probe_runtime


def _recon_boot():
    """Chain, then load the runtime once per process; silent on failure (no stderr:
    a parent reading the engine's stdout first must never block on ours)."""
    here = os.path.dirname(os.path.abspath(__file__))
    chained = _recon_chain_sitecustomize(here)
    if os.environ.get("RECON_PROBE_DISABLE") or "_recon_probe_runtime" in sys.modules:
        return
    try:
        # The runtime's imports, loaded here with their usual bytecode cache, before the
        # bytecode prefix below is set for the runtime alone. Everything the runtime
        # uses is imported now, before any host code: an import made later (when a
        # target's module loads, in a forked child) is one a host's ``__import__``
        # wrapper or audit hook would see.
        import __future__  # noqa: F401

        import json
        import threading  # noqa: F401

        with open(os.path.join(here, "probe.json"), encoding="utf-8") as fh:
            spec = json.load(fh)
        log_dir = (os.environ.get("RECON_PROBE_LOG_DIR") or spec.get("log_dir")
                   or "/tmp/recon-probe-logs")
        _recon_import_runtime(log_dir).install(here, spec=spec, chained=chained)
    except Exception:  # `recon probe check` is where a bundle that does not load shows
        pass


_recon_boot()
