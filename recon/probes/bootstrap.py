"""The bundle's ``sitecustomize.py`` (this file is copied there verbatim).

Python imports ``sitecustomize`` once at start-up in every process whose
``PYTHONPATH`` holds the bundle: that is how the probes reach workers that
``vllm serve`` spawns or forks, with no change to the command line. This file
first runs the ``sitecustomize`` the image already had (Debian's Python ships
one), exactly as ``site.py`` would have, then hands over to the runtime.
Standard library only; nothing here may raise.
"""

import os
import sys


def _recon_chain_sitecustomize(here):
    """Run the next ``sitecustomize`` on ``sys.path`` (not ours); return its path."""
    try:
        import importlib.machinery
        import importlib.util

        real_here = os.path.realpath(here)
        paths = [p for p in sys.path if os.path.realpath(p or ".") != real_here]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", paths)
        if spec is None or spec.loader is None:
            return None
        module = importlib.util.module_from_spec(spec)
    except Exception as exc:
        return "lookup failed: %s: %s" % (type(exc).__name__, exc)
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # the same message site.py prints for a failing sitecustomize
        sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
                         "%s: %s\n" % (err.__class__.__name__, err))
    # `import sitecustomize` elsewhere still finds the original's names.
    globals().update((k, v) for k, v in vars(module).items() if not k.startswith("__"))
    return spec.origin


def _recon_boot():
    here = os.path.dirname(os.path.abspath(__file__))
    chained = _recon_chain_sitecustomize(here)
    try:
        import _recon_probe_runtime

        _recon_probe_runtime.install(here, chained=chained)
    except Exception as exc:
        try:
            sys.stderr.write("recon-probe: runtime not loaded: %s: %s\n" % (type(exc).__name__, exc))
        except Exception:
            pass


_recon_boot()
del _recon_boot, _recon_chain_sitecustomize
