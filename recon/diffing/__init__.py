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
    result.fields.constant_summary()   # "1 module constant change in 1 module (1 value); 9 modules compared"
    for c in result.fields.constants:  # ConstantChange: module-body assignments, "module:NAME"
        print(c.kind, c.qualname, c.side("a"), "->", c.side("b"))   # value ...metadata:NIXL_CONNECTOR_VERSION ...
    result.to_json()

    diff(a, b, focus="MambaHybridModelState.add_request", depth=2, show=True)

Lower-level pieces: :func:`diff_functions` (two indexes), :func:`diff_fields` (class
fields and module constants of two indexes), :func:`diff_constants` (module constants
only), :func:`compare_signatures`
(griffe's rules and names), :func:`open_side` / :func:`open_sides` (SOURCE -> cached
snapshot), :func:`resolve_range` (PyPI release ranges), :func:`unified` (one
function's unified diff).
"""

from __future__ import annotations

from .constants import compare_constants, diff_constants
from .core import diff, fill_diff, parse_sections, side_of
from .fields import compare_fields, diff_fields
from .functions import diff_functions
from .meta import diff_distributions, diff_files, diff_image
from .model import (
    ALL_KINDS,
    CODE_KINDS,
    CONSTANT_KINDS,
    FIELD_KINDS,
    SECTIONS,
    ConstantChange,
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
    "CONSTANT_KINDS",
    "FIELD_KINDS",
    "SECTIONS",
    "ConstantChange",
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
    "compare_constants",
    "compare_fields",
    "compare_signatures",
    "diff",
    "diff_constants",
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
