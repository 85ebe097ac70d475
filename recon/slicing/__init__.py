"""Slice and run: execute the real function of a release, offline, against a real config.

``build_slice`` cuts target functions plus their dependency closure out of a
snapshot into one standalone module (byte-exact pieces with file:line and
sha256); ``run_function`` / ``run_calls`` execute it in a sandboxed child with
recording stubs for everything outside the package::

    from recon.slicing import Py, run_function
    res = run_function("vllm-0.33.0",
                       "vllm.config.compilation:CompilationConfig.adjust_cudagraph_sizes_for_spec_decode",
                       self_attrs={"cudagraph_capture_sizes": [1, 2, 4, 8, 16, 32, 64],
                                   "max_cudagraph_capture_size": 64},
                       args={"uniform_decode_query_len": 4})
    res.mutated["cudagraph_capture_sizes"]  # [4, 8, 16, 32, 64]
"""

from __future__ import annotations

from .modules import SliceFailed
from .result import Mutation, PieceRun, RunError, RunFailed, RunResult, StubTouch
from .runner import Call, Py, load_config, run_calls, run_function
from .slicer import Slice, build_slice

__all__ = [
    "Call", "Mutation", "PieceRun", "Py", "RunError", "RunFailed", "RunResult", "Slice",
    "SliceFailed", "StubTouch", "build_slice", "load_config", "run_calls", "run_function",
]
