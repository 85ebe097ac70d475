"""Compare engine releases and images: ``recon diff``, and the parts bisect and has reuse.

Public API::

    from recon.diffing import diff
    result = diff("pip:vllm==0.32.0", "pip:vllm==0.33.0")          # snapshots or any SOURCE
    result.functions.summary()         # "12 code changes (...); 3 docstring-only; 40 moved only; ..."
    for c in result.functions.changes:  # FunctionChange: kind, old, new, parts, signature
        print(c.kind, c.qualname, c.where(), c.detail())
    result.distributions.changed       # {"torch": ("2.9.0", "2.10.0")}
    result.to_json()

    diff(a, b, focus="MambaHybridModelState.add_request", depth=2, show=True)

Lower-level pieces: :func:`diff_functions` (two indexes), :func:`compare_signatures`
(griffe's rules and names), :func:`open_side` / :func:`open_sides` (SOURCE -> cached
snapshot), :func:`resolve_range` (PyPI release ranges), :func:`unified` (one
function's unified diff).
"""

from __future__ import annotations

from .core import diff, fill_diff, parse_sections, side_of
from .functions import diff_functions
from .meta import diff_distributions, diff_files, diff_image
from .model import (
    ALL_KINDS,
    CODE_KINDS,
    SECTIONS,
    DiffResult,
    FileDiff,
    FunctionChange,
    FunctionDiff,
    ImageDiff,
    KeyedDiff,
    Side,
    SignatureChange,
)
from .releases import previous_release, pypi_versions, resolve_range
from .sides import normalize_ref, open_side, open_sides
from .signature import compare_signatures
from .textdiff import highlighted, unified

__all__ = [
    "ALL_KINDS",
    "CODE_KINDS",
    "SECTIONS",
    "DiffResult",
    "FileDiff",
    "FunctionChange",
    "FunctionDiff",
    "ImageDiff",
    "KeyedDiff",
    "Side",
    "SignatureChange",
    "compare_signatures",
    "diff",
    "diff_distributions",
    "diff_files",
    "diff_functions",
    "diff_image",
    "fill_diff",
    "highlighted",
    "normalize_ref",
    "open_side",
    "open_sides",
    "parse_sections",
    "previous_release",
    "pypi_versions",
    "resolve_range",
    "side_of",
    "unified",
]
