"""Probe bundles: confirm at runtime, in every worker of the engine, without risk.

Library API (the CLI ``recon probe new/check/read`` is a thin layer over it)::

    from recon.probes import build_spec, new_bundle, check_bundle, read_logs
    spec = build_spec(["vllm.config.compilation:CompilationConfig.adjust_cudagraph_sizes_for_spec_decode"],
                      log=["args", "return"], env=["VLLM_USE_V1"])
    bundle = new_bundle("probes/capture-sizes", spec, snapshot="vllm-0.33.0")
    check_bundle(bundle.path).targets
    read_logs("probe-logs/").targets

:mod:`recon.probes.runtime` is the stdlib-only code that runs inside the
container; nothing else in this package is imported there.
"""

from __future__ import annotations

from .bundle import Bundle, load_bundle, new_bundle
from .check import CheckResult, check_bundle
from .logread import LogSummary, ProcessLog, TargetLog, read_logs
from .spec import ProbeSpec, TargetSpec, build_spec
from .validate import TargetCheck, validate_targets

__all__ = [
    "Bundle",
    "CheckResult",
    "LogSummary",
    "ProbeSpec",
    "ProcessLog",
    "TargetCheck",
    "TargetLog",
    "TargetSpec",
    "build_spec",
    "check_bundle",
    "load_bundle",
    "new_bundle",
    "read_logs",
    "validate_targets",
]
