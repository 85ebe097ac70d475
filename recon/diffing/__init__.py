"""Compare engine releases and images: ``recon diff``, and the parts bisect and has reuse.

Public API::

    from recon.diffing import diff
    result = diff("pip:vllm==0.32.0", "pip:vllm==0.33.0")          # snapshots or any SOURCE
    result.functions.summary()         # "12 code changes (...); 3 docstring-only; 40 moved only; ..."
    for c in result.functions.changes:  # FunctionChange: kind, old, new, parts, signature
        print(c.kind, c.qualname, c.where(), c.detail())
    result.distributions.changed       # {"torch": ("2.9.0", "2.10.0")}
    result.fields.summary()            # "3 field changes in 1 class (1 added, 2 default); 52 classes compared"
    for f in result.fields.changes:    # FieldChange: class-body fields (dataclass defaults, constants)
        print(f.kind, f.qualname, f.side("a"), "->", f.side("b"))   # default ...EngramConfig.use_thp ...
    result.to_json()

    diff(a, b, focus="MambaHybridModelState.add_request", depth=2, show=True)

Lower-level pieces: :func:`diff_functions` (two indexes), :func:`diff_fields` (class
fields of two indexes), :func:`compare_signatures`
(griffe's rules and names), :func:`open_side` / :func:`open_sides` (SOURCE -> cached
snapshot), :func:`resolve_range` (PyPI release ranges), :func:`unified` (one
function's unified diff).
"""

from __future__ import annotations

from .core import diff, fill_diff, parse_sections, side_of
from .fields import compare_fields, diff_fields
from .functions import diff_functions
from .meta import diff_distributions, diff_files, diff_image
from .model import (
    ALL_KINDS,
    CODE_KINDS,
    FIELD_KINDS,
    SECTIONS,
    DiffResult,
    FieldChange,
    FieldDiff,
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
    "FIELD_KINDS",
    "SECTIONS",
    "DiffResult",
    "FieldChange",
    "FieldDiff",
    "FileDiff",
    "FunctionChange",
    "FunctionDiff",
    "ImageDiff",
    "KeyedDiff",
    "Side",
    "SignatureChange",
    "compare_fields",
    "compare_signatures",
    "diff",
    "diff_distributions",
    "diff_fields",
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
