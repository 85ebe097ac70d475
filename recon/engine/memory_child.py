"""Engine mode's memory phase: the release loads and profiles its model on meta, recon keeps count.

Loaded by path by ``child.py`` (standard library only at import; torch and the
release are imported inside the functions, in the release's environment). What
the release runs here is its own code: the worker's ``request_memory``, the model
runner's ``load_model`` (its loader, the dummy weights, ``process_weights_after_loading``,
the drafter), its ``profile_run`` (the dummy forward of ``max_num_batched_tokens`` and
the sampler's pass) and the worker's ``determine_available_memory`` arithmetic.
What recon supplies, each listed in the answer:

* **the device's memory**: every tensor the release makes on the GPU is a meta
  tensor; a dispatch mode counts their storages as the CUDA caching allocator
  counts allocated bytes (each block rounded up to 512 bytes), frees them when
  the last tensor of a storage goes, and answers ``torch.cuda``/``torch.accelerator``
  memory queries (allocated, peak, reserved, free, total) from that count;
* **what the allocator count cannot see**, as assumptions with their source:
  the memory outside torch (CUDA context, cuBLAS/NCCL workspaces) and, for the
  V1 model runner, its CUDA graph estimate (the release captures sample graphs
  on the GPU to measure it);
* **a prompt's chunks** (when asked): the runner allocates the KV cache the release planned,
  and each chunk the release's scheduler cut runs the dummy forward as one request with
  attention metadata (:func:`prefill_peaks`);
* **kernels**: Triton kernels are not launched (their Python, which allocates
  outputs and workspaces, runs); the release's splitting ops (attention, GDN and Mamba
  mixers) run their own Python, the other ``vllm::`` ops their registered fakes; the
  model runs eagerly (no ``torch.compile``). The profile counts what eager PyTorch holds
  (it matched the engine's own profile line on every real run); a prompt's chunks count
  what the compiled graph holds where the engine compiles with Inductor: each CustomOp in
  the graph one fused kernel (:func:`fused_custom_ops`).
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import importlib
import inspect
import itertools
import math
import os
import sys
import time
import traceback
import weakref
from collections.abc import Callable, Iterator
from typing import Any

#: the CUDA caching allocator's constants (c10/cuda/CUDACachingAllocator.cpp, torch 2.x, no
#: PYTORCH_CUDA_ALLOC_CONF): every request is rounded up to BLOCK; requests up to SMALL come
#: from 2 MiB segments (SMALL_SEGMENT), those under MIN_LARGE from 20 MiB ones (LARGE_SEGMENT),
#: larger ones get a segment of their own in 2 MiB steps (ROUND_LARGE); a block is split
#: only when what would be left is at least BLOCK (small pool) or more than SMALL (large pool)
BLOCK = 512
SMALL = 1 << 20
SMALL_SEGMENT = 2 << 20
LARGE_SEGMENT = 20 << 20
MIN_LARGE = 10 << 20
ROUND_LARGE = 2 << 20
GIB = 1 << 30

#: memory outside torch a worker adds while it profiles (CUDA context excluded): the
#: engine's own "non-torch memory" figure on 30 of 30 real vLLM 0.26.0 runs on an H200 at
#: TP 1 was 0.22-0.23 GiB (tests/data/logs/real); taken as the larger
NON_TORCH_BYTES = int(0.23 * GIB)
NON_TORCH_SOURCE = ("0.23 GiB: the engine's own non-torch figure on real vLLM 0.26.0 runs at "
                    "TP 1 (0.22-0.23 GiB on 30 H200 runs, 0.22-0.26 on H100; "
                    "tests/data/logs/real, real-h100)")
#: per graph the V1 runner will capture: the engine's "Estimated CUDA graph memory" over its
#: graph count on a full-size model at its defaults (the 40-layer Qwen3.6-35B-A3B shape on an
#: H100: 0.64 GiB for 102 graphs, tests/data/logs/real-h100/H36_serve.log); the real runs
#: ranged from 1.9 to 9.6 MiB a graph (fewer graphs cost more each: the first capture's pool)
GRAPH_BYTES = int(6.4 * (1 << 20))
GRAPH_SOURCE = ("6.4 MiB per CUDA graph: a full-size 40-layer model's estimate at its defaults "
                "on an H100 (0.64 GiB for 102 graphs; real runs ranged 1.9-9.6 MiB a graph); "
                "the release measures it by capturing graphs on the GPU")
#: what the CUDA context holds before the worker's first snapshot (the real H200 runs print
#: 139.29 of 139.8 GiB free at start-up, the H100 runs 78.66 of 79.18)
CONTEXT_BYTES = int(0.51 * GIB)


def rounded(nbytes: int) -> int:
    """The bytes the caching allocator is asked for by one allocation of ``nbytes``."""
    return max(BLOCK, -(-int(nbytes) // BLOCK) * BLOCK) if nbytes else 0


class Heap:
    """The CUDA caching allocator's blocks and segments, on addresses nothing backs.

    ``malloc`` gives the bytes torch's ``memory_allocated()`` counts: whole blocks, so a
    request whose best-fitting free block would leave too little to split takes all of it
    (up to 1 MiB more than asked in the large pool). Free blocks are chosen best fit
    (smallest, then lowest address) in their pool and merged with free neighbours of their
    segment; ``release`` gives back the segments wholly free (``empty_cache``).
    """

    def __init__(self) -> None:
        self.free: dict[bool, list[tuple[int, int]]] = {True: [], False: []}  # small -> (size, addr)
        self.blocks: dict[int, list[Any]] = {}  # start -> [size, segment, in use, small]
        self.ends: dict[int, int] = {}  # end -> start, of every block
        self.segments: dict[int, int] = {}  # start -> size
        self.top = 0
        self.reserved = 0

    def _put(self, start: int, size: int, segment: int, small: bool, used: bool) -> None:
        self.blocks[start] = [size, segment, used, small]
        self.ends[start + size] = start
        if not used:
            bisect.insort(self.free[small], (size, start))

    def _take(self, start: int) -> list[Any]:
        block = self.blocks.pop(start)
        del self.ends[start + block[0]]
        if not block[2]:
            self.free[block[3]].remove((block[0], start))
        return block

    def malloc(self, nbytes: int) -> tuple[int, int]:
        """The address and the counted bytes of the block serving a request of ``nbytes``."""
        size = rounded(nbytes)
        small = size <= SMALL
        pool = self.free[small]
        at = bisect.bisect_left(pool, (size, -1))
        if at < len(pool):
            start = pool[at][1]
            block_size, segment = self._take(start)[:2]
        else:
            block_size = SMALL_SEGMENT if small else LARGE_SEGMENT if size < MIN_LARGE \
                else -(-size // ROUND_LARGE) * ROUND_LARGE
            start = segment = self.top
            self.top += block_size
            self.segments[start] = block_size
            self.reserved += block_size
        left = block_size - size
        if left >= BLOCK if small else left > SMALL:
            self._put(start + size, left, segment, small, used=False)
            block_size = size
        self._put(start, block_size, segment, small, used=True)
        return start, block_size

    def release_block(self, start: int) -> None:
        """Free the block at ``start``, merged with the free blocks beside it."""
        size, segment, _, small = self._take(start)
        after = self.blocks.get(start + size)
        if after is not None and not after[2] and after[1] == segment:
            size += self._take(start + size)[0]
        before = self.ends.get(start)
        if before is not None and not self.blocks[before][2] \
                and self.blocks[before][1] == segment:
            size += self._take(before)[0]
            start = before
        self._put(start, size, segment, small, used=False)

    def release(self) -> None:
        """``empty_cache``: the segments no block of which is in use go back to the device."""
        for start, size in list(self.segments.items()):
            block = self.blocks.get(start)
            if block is not None and not block[2] and block[0] == size:
                self._take(start)
                del self.segments[start]
                self.reserved -= size


class Ledger:
    """Live GPU storages and the counters torch's allocator statistics report."""

    def __init__(self) -> None:
        self.heap = Heap()
        self.sizes: dict[int, int] = {}
        self.addresses: dict[int, int] = {}
        self.holders: dict[int, int] = {}
        self.names: dict[int, str] = {}
        self.allocated = 0
        self.peak = 0
        self._top: list[tuple[int, str]] = []
        self._stale = False  # a new peak whose largest holders are not yet listed
        self.fresh: set[int] = set()  # storages made since the last peak reset (listed)
        self.ran: set[str] = set()  # the release's ops whose own Python ran
        self.faked: set[str] = set()  # ... and those its registered fake answered instead
        self.opaque = 0  # how deep inside ops whose own Python runs (outside a compiled graph)

    def add(self, key: int, nbytes: int, name: str) -> None:
        if key not in self.sizes:
            if not nbytes:  # an empty storage: torch allocates nothing
                return
            self.addresses[key], self.sizes[key] = self.heap.malloc(nbytes)
            self.names[key], self.holders[key] = name, 0
            self.fresh.add(key)
            self.allocated += self.sizes[key]
            if self.allocated > self.peak:
                self.peak, self._stale = self.allocated, True
        self.holders[key] += 1

    @property
    def top(self) -> list[tuple[int, str]]:
        """The five largest storages (made since the last reset) at the peak. Listed when
        first asked for or before the first storage leaves after a new peak: until then
        only storages were added, so what stands is what stood at the peak (listing them
        at every new peak costs seconds for a model's thousands of weights)."""
        if self._stale:
            self._top = sorted(((self.sizes[k], self.names[k]) for k in self.fresh),
                               reverse=True)[:5]
            self._stale = False
        return self._top

    @top.setter
    def top(self, value: list[tuple[int, str]]) -> None:
        self._top, self._stale = value, False

    def drop(self, key: int) -> None:
        if key not in self.holders:
            return
        self.holders[key] -= 1
        if self.holders[key] <= 0:
            if self._stale:
                self.top  # noqa: B018 - listed before the peak's storages start to leave
            self.allocated -= self.sizes.pop(key)
            self.heap.release_block(self.addresses.pop(key))
            del self.holders[key], self.names[key]
            self.fresh.discard(key)

    @property
    def reserved(self) -> int:
        return self.heap.reserved

    def settle(self, peak: int, top: list[tuple[int, str]]) -> None:
        """A fused kernel ran: what it made and dropped inside never stood at once with the
        rest, so the peak is the one before it, or what stands after it if that is more."""
        self.peak, self.top = peak, top
        if self.allocated > peak:
            self.peak, self._stale = self.allocated, True

    def reset_peak(self) -> None:
        self.peak = self.allocated
        self.fresh = set()
        self.top = []

    def empty_cache(self) -> None:
        self.heap.release()


def counting_mode(torch: Any, ledger: Ledger, inside: frozenset[str] = frozenset()) -> Any:
    """A dispatch mode that enters every meta storage an op makes into ``ledger``.

    A storage is counted once, at its size, from the first op that returns a tensor of it,
    and leaves when the last of those tensors is gone. Random generators passed to ops
    are dropped (meta tensors draw no numbers). The ops named in ``inside`` (the release's
    splitting ops: attention, the GDN and Mamba mixers, which its compiled graph runs
    eagerly) run their own Python, where they allocate before launching kernels; one whose
    Python cannot run on meta (a compiled library's stand-in returns nothing) is answered by
    its registered fake. ``ledger`` names which ran and which were faked.
    """
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    def enter(tensor: Any, name: str) -> None:
        if tensor.device.type != "meta":
            return
        storage = tensor.untyped_storage()
        key = storage._cdata
        ledger.add(key, storage.nbytes(), name)
        weakref.finalize(tensor, ledger.drop, key)

    cuda = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)
    has_cuda = torch._C._dispatch_has_kernel_for_dispatch_key

    class Counting(TorchDispatchMode):  # type: ignore[misc]
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            kwargs = {k: v for k, v in (kwargs or {}).items() if k != "generator"}
            if func.name() in inside and has_cuda(func.name(), "CUDA"):
                try:
                    ledger.opaque += 1
                    try:
                        with self:  # the op's own Python, its tensors counted
                            made = func.redispatch(cuda, *args, **kwargs)
                    finally:
                        ledger.opaque -= 1
                    ledger.ran.add(func.name())
                    return made
                except Exception:  # noqa: BLE001 - said: its registered fake answers
                    ledger.faked.add(func.name())
            made = func(*args, **kwargs)
            for item in tree_flatten(made)[0]:
                if isinstance(item, torch.Tensor):
                    enter(item, str(func))
            return made

    return Counting()


class VirtualMemory:
    """The declared GPU's memory as torch reports it, from the ledger and the assumptions."""

    def __init__(self, ledger: Ledger, total: int) -> None:
        self.ledger = ledger
        self.total = total
        self.outside = CONTEXT_BYTES  # memory outside torch: the context, then workspaces

    def stats(self, *args: Any, **kwargs: Any) -> dict[str, int]:
        ledger = self.ledger
        return {"allocated_bytes.all.current": ledger.allocated,
                "allocated_bytes.all.peak": ledger.peak,
                "reserved_bytes.all.current": ledger.reserved,
                "reserved_bytes.all.peak": ledger.reserved,
                "num_alloc_retries": 0, "num_ooms": 0}

    def info(self, *args: Any, **kwargs: Any) -> tuple[int, int]:
        used = self.outside + self.ledger.reserved
        return max(self.total - used, 0), self.total

    def answers(self) -> dict[str, Callable[..., Any]]:
        ledger = self.ledger

        def nothing(*args: Any, **kwargs: Any) -> None:
            return None

        return {"memory_stats": self.stats, "mem_get_info": self.info,
                "get_memory_info": self.info,
                "memory_allocated": lambda *a, **k: ledger.allocated,
                "max_memory_allocated": lambda *a, **k: ledger.peak,
                "memory_reserved": lambda *a, **k: ledger.reserved,
                "max_memory_reserved": lambda *a, **k: ledger.reserved,
                "reset_peak_memory_stats": lambda *a, **k: ledger.reset_peak(),
                "empty_cache": lambda *a, **k: ledger.empty_cache(),
                "synchronize": nothing}


@contextlib.contextmanager
def replaced(pairs: list[tuple[Any, str, Any]], said: list[str], why: str) -> Iterator[None]:
    """Set each ``(owner, name, value)`` for the block, restore after; name each in ``said``."""
    before = [(owner, name, getattr(owner, name, None)) for owner, name, _ in pairs]
    for owner, name, value in pairs:
        setattr(owner, name, value)
        label = f"{getattr(owner, '__name__', type(owner).__name__)}.{name} ({why})"
        if label not in said:
            said.append(label)
    try:
        yield
    finally:
        for owner, name, value in before:
            setattr(owner, name, value)


def device_answers(torch: Any, memory: VirtualMemory) -> list[tuple[Any, str, Any]]:
    """torch's memory queries on both of its front doors, answered by ``memory``."""
    answers = memory.answers()
    pairs = []
    for owner in (torch.cuda, getattr(torch, "accelerator", None)):
        if owner is None:
            continue
        pairs += [(owner, name, fn) for name, fn in answers.items()
                  if name == "synchronize" or hasattr(owner, name)]
    return pairs


def dynamo_off(torch: Any) -> list[tuple[Any, str, Any]]:
    """The functions the release compiles with ``torch.compile`` run as written: under
    recon's counting mode dynamo cannot trace them and falls back to running them eagerly,
    after inspecting each frame (1.5 s of a plan)."""
    config = getattr(getattr(torch, "_dynamo", None), "config", None)
    return [(config, "disable", True)] if hasattr(config, "disable") else []


def cpu_generator(torch: Any) -> Any:
    """``torch.Generator(device="cuda")`` answered with a CPU generator (meta draws nothing)."""
    original = torch.Generator

    class Generator(original):  # type: ignore[misc, valid-type]
        def __new__(cls, device: Any = None) -> Any:
            return original()

    return Generator


def launches_skipped(skipped: list[str]) -> list[tuple[Any, str, Any]]:
    """Triton kernel launches as no-ops (the Python around them, which allocates, runs)."""
    try:
        jit = importlib.import_module("triton.runtime.jit")
        tuner = importlib.import_module("triton.runtime.autotuner")
    except ImportError:
        return []

    def skip(kernel: Any) -> None:
        name = str(getattr(kernel, "__name__", None)
                   or getattr(getattr(kernel, "fn", None), "__name__", "?"))
        if name not in skipped:
            skipped.append(name)

    return [(jit.JITFunction, "run", lambda self, *a, **k: skip(self)),
            (tuner.Autotuner, "run", lambda self, *a, **k: skip(self))]


def uva_views(torch: Any) -> list[tuple[Any, str, Any]]:
    """The release's GPU view of pinned host memory (a compiled op): a meta tensor alike."""
    def view(tensor: Any) -> Any:
        return torch.empty_like(tensor, device="meta")

    pairs = []
    for name, module in list(sys.modules.items()):
        if name.startswith("vllm.") and module is not None and \
                hasattr(module, "get_accelerator_view_from_cpu_tensor"):
            pairs.append((module, "get_accelerator_view_from_cpu_tensor", view))
    return pairs


def eager(model: Any) -> int:
    """Every ``support_torch_compile`` module of the model runs uncompiled; how many."""
    count = 0
    for module in model.modules():
        if hasattr(module, "do_not_compile"):
            module.do_not_compile = True
            count += 1
    return count


def by_inductor(config: Any) -> bool:
    """Whether the engine compiles the model with Inductor (it fuses what it compiles)."""
    comp = config.compilation_config
    mode = getattr(comp, "mode", None)
    mode = getattr(comp, "level", 0) if mode is None else mode
    backend = str(getattr(comp, "backend", "") or "inductor")
    return int(mode or 0) in (1, 3) and backend == "inductor"


def fused_custom_ops(model: Any, ledger: Ledger) -> int:
    """Every CustomOp of the model counted as one fused kernel; how many.

    Inside its compiled graph the engine's Inductor fuses a CustomOp's native form, and a
    CustomOp on its CUDA form is one kernel: only the tensors it returns outlive it, so its
    temporaries do not raise the peak. Inside an op the graph leaves to run eagerly (a
    splitting op, whose Python runs here) a native form runs op by op, as the release runs
    it there (it compiles one on its own only where asked: ``CustomOp.maybe_compile``).
    """
    base = importlib.import_module("vllm.model_executor.custom_op").CustomOp
    count = 0
    for module in model.modules():
        method = getattr(module, "_forward_method", None)
        if isinstance(module, base) and method is not None:
            native = getattr(method, "__func__", None) is type(module).forward_native
            module._forward_method = _as_one_kernel(method, ledger, native)
            count += 1
    return count


def _as_one_kernel(method: Callable[..., Any], ledger: Ledger,
                   native: bool) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        if native and ledger.opaque:  # inside an op that runs its Python: op by op
            return method(*args, **kwargs)
        peak, top = ledger.peak, ledger.top
        made = method(*args, **kwargs)
        ledger.settle(peak, top)
        return made
    return call


def graph_assumption(cudagraph: dict[str, Any] | None) -> tuple[int, str | None]:
    """The V1 runner's CUDA graph estimate recon assumes: bytes, and the line that says so."""
    graphs = (cudagraph or {}).get("graphs", {})
    count = sum(int(graphs.get(mode, {}).get("count", 0)) for mode in ("PIECEWISE", "FULL"))
    if not count:
        return 0, None
    return count * GRAPH_BYTES, f"CUDA graph estimate for {count} graphs: {GRAPH_SOURCE}"


def worker_view(worker_cls: Any, config: Any, runner: Any, device: Any) -> Any:
    """The release's GPU worker, as far as its memory methods read it (no process, no device)."""
    worker = worker_cls.__new__(worker_cls)
    worker.__dict__.update(vllm_config=config, cache_config=config.cache_config,
                           model_config=config.model_config,
                           parallel_config=config.parallel_config,
                           scheduler_config=config.scheduler_config,
                           compilation_config=config.compilation_config,
                           device_config=getattr(config, "device_config", None),
                           device=device, model_runner=runner, rank=0, local_rank=0)
    return worker


def fresh_runner(runner_cls: Any, attributes: dict[str, Any]) -> Any:
    """A model runner holding what the release's own ``__init__`` set on meta."""
    runner = runner_cls.__new__(runner_cls)
    runner.__dict__.update(attributes)
    return runner


#: what a prompt's chunks need from the child once the plan is known: the release's KV cache
#: config for the available bytes, and the chunks its scheduler cuts (tokens, context before)
Chunking = Callable[[Any], list[tuple[int, int]]]


def plan(config: Any, runner_cls: Any, attributes: dict[str, Any], total: int,
         graph_bytes: int, v1: bool, gpu_to_meta: Callable[[list[str]], Any],
         kv_for: Callable[[int], Any], chunking: Chunking | None = None) -> dict[str, Any]:
    """The worker's memory plan for ``config``: the release loads, profiles and subtracts.

    ``total``: the device memory torch reports; ``graph_bytes``: the CUDA graph estimate to
    answer for the V1 runner (which measures it by capturing); ``gpu_to_meta``: the child's
    mode that makes GPU tensors on meta (its argument collects what it redirected);
    ``kv_for``: the release's KV cache config for the available memory, which the runner
    then initialises (``initialize_kv_cache``: the KV tensors, and the checks of its CUDA
    graphs against them, where a release refuses to start: "max_num_seqs exceeds available
    Mamba cache blocks"); ``chunking``: given, the prompt's chunks for that config, which
    then run on it (:func:`prefill_peaks`).
    """
    import torch

    worker_mod = importlib.import_module("vllm.v1.worker.gpu_worker")
    snapshot_cls = importlib.import_module("vllm.utils.mem_utils").MemorySnapshot
    request = _request_memory()
    ledger = Ledger()
    memory = VirtualMemory(ledger, total)
    said: list[str] = []
    skipped: list[str] = []
    placed: list[str] = []
    runner = fresh_runner(runner_cls, attributes)
    device = torch.device("cuda", 0)
    # what stands now (the release's modules, its config) is never garbage the plan frees:
    # frozen, the collections the plan and the release's profiler make skip it (0.45 s each)
    gc.freeze()
    pairs = device_answers(torch, memory) + launches_skipped(skipped) + uva_views(torch) \
        + [(torch, "Generator", cpu_generator(torch))] + dynamo_off(torch)
    if v1:
        pairs.append((runner, "profile_cudagraph_memory", lambda: graph_bytes))
    profile = runner.profile_run

    def profiled() -> None:
        eager(runner.model)
        memory.outside += NON_TORCH_BYTES  # the workspaces the first forward creates
        profile()

    pairs.append((runner, "profile_run", profiled))
    config.compilation_config.static_forward_context.clear()  # the load registers them again
    with replaced(pairs, said, "recon's memory count"), torch.device("meta"), \
            gpu_to_meta(placed), counting_mode(torch, ledger, splitting_ops(config)):
        worker = worker_view(worker_mod.Worker, config, runner, device)
        worker.init_snapshot = snapshot_cls(device=device)
        worker.requested_memory = request(worker.init_snapshot, config.cache_config)
        _workspaces(config, torch.device("meta"))
        laps = [time.monotonic()]
        runner.load_model(load_dummy_weights=True)
        laps.append(time.monotonic())
        available = int(worker.determine_available_memory())
        gc.collect()
        laps.append(time.monotonic())
        kv = kv_for(available)
        unready = kv_cache_ready(runner, kv)
        prefill = None
        if chunking is not None:
            chunks = chunking(kv)
            try:
                if unready:
                    raise RuntimeError(f"the runner's initialize_kv_cache on meta: {unready}")
                prefill = prefill_peaks(config, runner, chunks, ledger, v1)
            except Exception as err:  # noqa: BLE001 - said: the plan stands without it
                prefill = {"error": f"{type(err).__name__}: {err}"[:800]}
        laps.append(time.monotonic())
    seconds = dict(zip(("load", "profile", "prompt"),
                       (round(b - a, 2) for a, b in itertools.pairwise(laps)), strict=True))
    return {"prefill": prefill, "seconds": seconds, "total_bytes": total, "context_bytes": CONTEXT_BYTES, "requested_bytes": int(worker.requested_memory),
            "free_at_start_bytes": int(worker.init_snapshot.free_memory),
            "weights_bytes": int(runner.model_memory_usage),
            "activation_peak_bytes": int(getattr(worker, "peak_activation_memory", 0)),
            "non_torch_bytes": int(getattr(worker, "non_torch_memory", 0)),
            "cudagraph_bytes": int(getattr(worker, "cudagraph_memory_estimate", 0)),
            "available_kv_bytes": available,
            "peak_holders": [{"bytes": b, "op": n} for b, n in ledger.top],
            "kv_cache_not_initialized": unready,
            "replaced": said + placed, "kernels_not_launched": sorted(skipped),
            "ops_run": sorted(ledger.ran), "ops_faked": sorted(ledger.faked)}


def splitting_ops(config: Any) -> frozenset[str]:
    """The release's splitting ops for ``config`` (``vllm::name``, as its compilation config
    lists them): the ops its compiled graph leaves to run eagerly, their own Python."""
    names = getattr(config.compilation_config, "splitting_ops", None) or []
    return frozenset(str(name).replace(".", "::", 1) if "::" not in str(name) else str(name)
                     for name in names)


def kv_cache_ready(runner: Any, kv: Any) -> str | None:
    """The runner's own ``initialize_kv_cache`` for the planned config; None when it ran.

    A ``ValueError`` the release raises there is its refusal to start and propagates; any
    other failure (a step meta tensors cannot take) is returned, said, and the plan stands.
    """
    try:
        runner.initialize_kv_cache(kv)
    except Exception as err:  # noqa: BLE001 - said in the answer
        last = traceback.extract_tb(err.__traceback__)[-1].filename
        if isinstance(err, ValueError) and f"{os.sep}vllm{os.sep}" in last:
            raise
        return f"{type(err).__name__}: {err}"[:400]
    return None


def prefill_peaks(config: Any, runner: Any, chunks: list[tuple[int, int]],
                  ledger: Ledger, v1: bool) -> dict[str, Any]:
    """Each distinct chunk of one prompt through the release's forward, on the planned KV cache.

    On the KV cache the runner allocated (:func:`kv_cache_ready`), it runs its dummy forward as a batch of one request of the chunk's tokens with attention
    metadata (the backends' own prefill paths, GDN/Mamba included) and the sampler's pass
    for its one row. The peak over what stood before each chunk (weights, KV cache, buffers)
    is the chunk's activation peak, as ``max_memory_allocated`` minus ``memory_allocated``
    reads it on the GPU.
    """
    fused = fused_custom_ops(runner.model, ledger) if by_inductor(config) else 0
    gc.collect()
    standing = ledger.allocated
    rows: list[dict[str, Any]] = []
    done: set[tuple[int, int]] = set()
    for tokens, context in chunks:
        key = (tokens, context if v1 else 0)
        if key in done:
            continue
        done.add(key)
        ledger.reset_peak()
        base = ledger.allocated  # what a chunk before left (a workspace made once) stands
        standing = max(standing, base)
        with _one_request(config, runner, v1):
            if v1:
                seq = {"profile_seq_lens": context + tokens} if "profile_seq_lens" in \
                    inspect.signature(runner._dummy_run).parameters else {}
                _, last = runner._dummy_run(tokens, force_attention=True, is_profile=True,
                                            **seq)
            else:
                _, last = runner._dummy_run(tokens, is_profile=True)
            runner._dummy_sampler_run(last)
            del last
        gc.collect()
        rows.append({"tokens": tokens, "context": context,
                     "peak_bytes": ledger.peak - base,
                     "peak_holders": [{"bytes": b, "op": n} for b, n in ledger.top]})
    return {"standing_bytes": standing, "chunks": rows, "fused_custom_ops": fused,
            "context_modelled": v1 and "profile_seq_lens" in
            inspect.signature(runner._dummy_run).parameters}


@contextlib.contextmanager
def _one_request(config: Any, runner: Any, v1: bool) -> Iterator[None]:
    """The runner's dummy batch as one request: its request cap set to 1 for the block."""
    owner, name = (config.scheduler_config, "max_num_seqs") if v1 else (runner, "max_num_reqs")
    before = getattr(owner, name)
    setattr(owner, name, 1)
    try:
        yield
    finally:
        setattr(owner, name, before)


def _workspaces(config: Any, device: Any) -> None:
    """The release's workspace manager (where fused MoE keeps its buffers, grown by the
    profile run and kept), made as the worker's ``init_device`` makes it."""
    with contextlib.suppress(ImportError, AttributeError):
        init = importlib.import_module("vllm.v1.worker.workspace").init_workspace_manager
        init(device, 2 if getattr(config.parallel_config, "enable_dbo", False) else 1)


def _request_memory() -> Callable[[Any, Any], int]:
    """The release's own ``request_memory`` (the share of the device the worker asks for)."""
    for name in ("vllm.v1.worker.utils", "vllm.v1.worker.gpu_worker"):
        with contextlib.suppress(ImportError, AttributeError):
            found = importlib.import_module(name).request_memory
            return found  # type: ignore[no-any-return]
    raise LookupError("this release has no request_memory: recon cannot read its memory share")


def gib(value: int) -> float:
    return round(value / GIB, 2) if not math.isnan(value) else value
