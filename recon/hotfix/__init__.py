"""``recon hotfix``: the one-file fix, built from the release that has it, proven, and mounted read-only.

Library API (the CLI ``recon hotfix`` is a thin layer over it)::

    from recon.hotfix import make_hotfix
    res = make_hotfix("pip:vllm==0.29.0", fixed_in="pip:vllm==0.32.0",
                      functions=["MambaHybridModelState.add_request"],
                      recipe="vllm-mamba-align-column",
                      options={"prefix_tokens": 101376, "cache_block_size": 16,
                               "mamba_block_size": 1152, "max_model_len": 262144},
                      output="hotfixes/mamba-column")
    res.mount["docker_run"], res.proof.recipe.fixed, res.to_json()

The image's file gets exactly the named functions, methods or classes of the
release with the fix (or the hunks of a ``--patch``), spliced on a concrete
syntax tree (:mod:`recon.hotfix.splice`); every other byte stays the image's.
It refuses (:class:`HotfixRefused`, one line) when the new code needs names the
image's release does not have, when the change touches compiled code or a
file that is not Python source, and when more than the named pieces would
change. The proof runs on a real patched snapshot (:mod:`recon.hotfix.proof`),
and ``verify_hotfix.py`` checks in the container that the mounted file is
what the interpreter runs. Design notes: ``docs/hotfix.md``.
"""

from __future__ import annotations

from .build import make_hotfix, unified_diff
from .bundle import is_hotfix_folder, write_hotfix
from .model import HotfixRefused, HotfixResult, NeedRow, Piece, Proof, RecipeProof

__all__ = [
    "HotfixRefused",
    "HotfixResult",
    "NeedRow",
    "Piece",
    "Proof",
    "RecipeProof",
    "is_hotfix_folder",
    "make_hotfix",
    "unified_diff",
    "write_hotfix",
]
