"""The index of a snapshot: every module, class and function, by name, with code hashes.

Public API (other parts of recon build on these names)::

    from recon.index import load_index
    idx = load_index(snapshot)                    # cached per file sha256, process pool
    fn = idx.lookup("vllm.platforms.interface:Platform._align_hybrid_block_size")
    fn.path, fn.lineno, fn.def_lineno, fn.end_lineno, fn.kind, fn.params, fn.ast_hash
    idx.source(fn.qualname)                       # decorators included
    idx.modules["vllm.platforms"].bindings        # {"Platform": "vllm.platforms.interface.Platform", ...}
    idx.errors                                    # {path: "SyntaxError: ... (line 3)"}
    idx.function_at(path, lineno)                 # innermost function holding a line
    idx.function_ast(qualname)                    # just that def, parsed, file line numbers
    idx.classes[q].fields["max_num_seqs"]         # ClassField("int", "256", 88): class-body assignments
    idx.modules[m].constants["NIXL_CONNECTOR_VERSION"]  # ClassField("int", "15", 55): module-body ones

Name resolution (imports, re-exports, MRO, annotations) is
:class:`recon.index.resolve.Resolver`; the call graph is :mod:`recon.index.graph`.
"""

from __future__ import annotations

from ..snapshots.model import module_name
from .build import load_index
from .models import (
    FUNCTION_KINDS,
    ClassField,
    ClassInfo,
    FunctionInfo,
    ImportInfo,
    IndexStats,
    ModuleInfo,
    Param,
    absolute_module,
    as_json,
    split_qualname,
)
from .snapshot_index import SnapshotIndex
from .visitor import index_source

__all__ = [
    "FUNCTION_KINDS",
    "ClassField",
    "ClassInfo",
    "FunctionInfo",
    "ImportInfo",
    "IndexStats",
    "ModuleInfo",
    "Param",
    "SnapshotIndex",
    "absolute_module",
    "as_json",
    "index_source",
    "load_index",
    "module_name",
    "split_qualname",
]
