"""Where and how the logged engine ran, as far as its own lines tell: the GPU and the entry point.

The release decides many numbers from the device (batch defaults below 70 GiB,
attention backends per compute capability) and from how it was started
(``vllm serve`` and ``LLM(...)`` have different usage contexts and defaults). A
log that came from an H200 must not be predicted for recon's default H100, so
``recon logs`` reads both from the log and says which line it took them from.

* GPU: a device name the release printed (``device_name=NVIDIA_H200`` in a
  kernel-config path), else the total memory of the worker's ``Free memory on
  device (free/total GiB)`` line, taken only when exactly one board of
  :data:`recon.engine.gpus.GPUS` is that size; several boards of one size are
  named and none is taken.
* Entry point: an API-server version line (``vllm serve``) or an argument line
  without one (``LLM(...)``, whose engine logs the same argument line).

A user's ``--set gpu=`` / ``--set usage=`` always wins over the log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..engine.gpus import GPUS, TABLE_KEYS, family_of, lacks_memory
from .models import ServerLog

#: how far a printed total may sit from a board's memory: the driver keeps some of it
#: (an H200's 143,771 MiB is printed as 139.8 GiB, 0.4% less)
MEMORY_TOLERANCE = 0.015

#: version-line patterns that only the API server prints
SERVER_VERSION_PATTERNS = ("vllm.version.api_server", "vllm.version.server", "vllm.version.logo")


@dataclass(frozen=True)
class FromLog:
    """One recipe option read off the log: its value, the line, and what was read there."""

    option: str
    value: Any
    line: int | None
    why: str


def settings_from_log(log: ServerLog) -> tuple[list[FromLog], list[str]]:
    """The options the log settles, and notes on what it could not settle.

    vLLM: the GPU and the entry point. SGLang: the two free-memory figures its pool
    sizing reads (:func:`sglang_memory`).
    """
    if log.engine == "sglang":
        return sglang_memory(log), []
    if log.engine != "vllm":
        return [], []
    taken: list[FromLog] = []
    notes: list[str] = []
    board = _board(log, notes)
    if board is not None:
        taken.append(board)
    usage = _usage(log)
    if usage is not None:
        taken.append(usage)
    return taken, notes


def board_by_name(name: str) -> str | None:
    """The table key of a device name as the release prints it (spaces may be underscores).

    The whole name, or the first words of exactly one board's name (a MoE config
    file names an RTX PRO 6000 ``NVIDIA_RTX_PRO_6000``); a prefix that several boards
    share (``NVIDIA H100``) names none.
    """
    want = name.replace("_", " ").strip().lower()
    for board in GPUS.values():
        if board.name.lower() == want:
            return board.key
    starts = [b.key for b in GPUS.values() if b.name.lower().startswith(want + " ")]
    return starts[0] if len(starts) == 1 else None


def boards_by_memory(total_gib: float) -> list[str]:
    """Boards whose memory the printed total can be (within :data:`MEMORY_TOLERANCE`)."""
    return [b.key for b in GPUS.values()
            if b.memory_query and abs(b.memory_bytes / 2**30 - total_gib)
            <= MEMORY_TOLERANCE * b.memory_bytes / 2**30]


def _board(log: ServerLog, notes: list[str]) -> FromLog | None:
    named = log.observed.get("gpu_device_name")
    if named is not None:
        key = board_by_name(str(named.value))
        if key is not None:
            return FromLog("gpu", key, named.line, f"the release named the device {named.value}")
        described = _described(str(named.value), log)
        if described is not None:
            return described
        notes.append(f"the log names the device {named.value} (line {named.line}), which is not "
                     f"a board recon knows ({', '.join(TABLE_KEYS)}) nor one whose family its "
                     "name tells with its memory printed: pass --set gpu='NAME,sm=X.Y,memory=NGiB'")
    total = log.observed.get("gpu_total_gib")
    if total is None:
        return None
    keys = boards_by_memory(float(total.value))
    if len(keys) == 1:
        return FromLog("gpu", keys[0], total.line,
                       f"the device's total memory, {total.value} GiB, is that board's")
    if keys:
        notes.append(f"the device's total memory, {total.value} GiB (line {total.line}), fits "
                     f"{' and '.join(keys)}: pass --set gpu=KEY to say which")
    else:
        notes.append(f"no board recon knows has {total.value} GiB (line {total.line}); pass "
                     f"--set gpu=KEY or a compute capability (--set gpu=sm90)")
    return None


def _described(name: str, log: ServerLog) -> FromLog | None:
    """A board the table lacks, described from the log alone: the name it printed (its family
    gives the compute capability) and the total memory it printed, or None."""
    total = log.observed.get("gpu_total_gib")
    clean = " ".join(name.replace("_", " ").replace(",", " ").replace("=", " ").split())[:100]
    if total is None or family_of(clean) is None:
        return None
    return FromLog("gpu", f"{clean},memory={float(total.value)}GiB", total.line,
                   f"the release named the device {clean}, not in recon's table: its family "
                   f"gives the compute capability, its total memory ({total.value} GiB) this line")


def with_logged_memory(spec: Any, log: ServerLog) -> tuple[Any, str | None]:
    """A user's ``--set gpu`` naming a board the table lacks, completed with the total memory
    the log printed, and the note that says so (the value unchanged and None otherwise)."""
    total = log.observed.get("gpu_total_gib")
    if not isinstance(spec, str) or total is None or not lacks_memory(spec):
        return spec, None
    return (f"{spec},memory={float(total.value)}GiB",
            f"--set gpu={spec}: its memory from the log, {total.value} GiB (line {total.line})")


def _usage(log: ServerLog) -> FromLog | None:
    server = next((e for e in log.events if e.pattern in SERVER_VERSION_PATTERNS), None)
    if server is not None:
        return FromLog("usage", "serve", server.line, "an API-server version line (vllm serve)")
    if log.args_line is not None:
        return FromLog("usage", "llm", log.args_line,
                       "an argument line with no API-server version line (LLM(...))")
    return None


#: quantities of the lines SGLang prints once its pools exist
POOL_QUANTITIES = {"kv_pool_tokens", "max_mamba_cache_size"}


def sglang_memory(log: ServerLog) -> list[FromLog]:
    """SGLang's free-memory figures as its pool sizing reads them, from the last start-up.

    Before the weights: each process's first ``Load weight begin`` (the target's;
    a draft model loads later), the smallest over processes, as the engine takes
    the minimum over its ranks. After: each process's last ``Load weight end``
    before the first pool line (the draft's, where a draft loads before the
    pools), the smallest over processes.
    """
    start = log.args_line or 0
    events = [ev for ev in log.events if ev.line >= start]
    pools = min((ev.line for ev in events if POOL_QUANTITIES & ev.values.keys()),
                default=None)
    begins: dict[str | None, Any] = {}
    ends: dict[str | None, Any] = {}
    for ev in events:
        if "avail_mem_before_weights_gb" in ev.values:
            begins.setdefault(ev.process, ev)
        if "avail_mem_after_weights_gb" in ev.values and (pools is None or ev.line < pools):
            ends[ev.process] = ev
    out = []
    for option, quantity, found, why in (
            ("pre_load_gb", "avail_mem_before_weights_gb", begins,
             "free memory before the weights: each process's first 'Load weight begin', the "
             "smallest"),
            ("available_gb", "avail_mem_after_weights_gb", ends,
             "free memory after the weights: each process's last 'Load weight end' before the "
             "pools, the smallest")):
        if found:
            ev = min(found.values(), key=lambda e: float(e.values[quantity]))
            out.append(FromLog(option, float(ev.values[quantity]), ev.line, why))
    return out
