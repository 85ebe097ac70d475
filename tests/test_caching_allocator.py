"""recon's emulation of torch's CUDA caching allocator (``Heap`` in recon/engine/memory_child.py).

Expected values are derived by hand from the allocator's rules as torch documents and
implements them (c10/cuda/CUDACachingAllocator.cpp): requests rounded up to 512 bytes;
requests of at most 1 MiB from 2 MiB segments, those under 10 MiB from 20 MiB segments,
larger ones from a segment of their own rounded up to 2 MiB; the smallest free block that
fits; a block split only when what would be left is at least 512 bytes (small pool) or more
than 1 MiB (large pool); freed blocks merged with free neighbours; ``empty_cache`` returns
the segments wholly free. The engine-side check (the real allocator's record of a model's
load) is tests/test_memory_plan.py's.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

MIB = 1 << 20


@pytest.fixture()
def heap() -> Any:
    path = Path(__file__).parents[1] / "recon" / "engine" / "memory_child.py"
    spec = importlib.util.spec_from_file_location("memory_child_under_test", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Heap()


def test_a_large_request_takes_the_whole_block_when_too_little_would_be_left(heap: Any) -> None:
    # 5 MiB: a 20 MiB segment, split (15 MiB left > 1 MiB)
    assert heap.malloc(5 * MIB)[1] == 5 * MIB
    # 14.5 MiB: best fit is the 15 MiB free block; 0.5 MiB would be left: not split
    assert heap.malloc(int(14.5 * MIB))[1] == 15 * MIB
    # 11.5 MiB: nothing free; its own segment of 12 MiB (2 MiB steps), 0.5 MiB left: whole
    assert heap.malloc(int(11.5 * MIB))[1] == 12 * MIB
    # 10.5 MiB: a 12 MiB segment, 1.5 MiB left: split
    assert heap.malloc(int(10.5 * MIB))[1] == int(10.5 * MIB)
    assert heap.reserved == (20 + 12 + 12) * MIB


def test_small_requests_round_to_512_bytes_in_2_mib_segments(heap: Any) -> None:
    assert heap.malloc(1)[1] == 512
    assert heap.malloc(1000)[1] == 1024
    assert heap.malloc(MIB)[1] == MIB  # the small pool's largest request
    assert heap.reserved == 2 * MIB
    assert heap.malloc(MIB)[1] == MIB  # 1 MiB - 1,536 bytes left: a new small segment
    assert heap.reserved == 4 * MIB


def test_freed_blocks_merge_and_empty_cache_returns_whole_segments(heap: Any) -> None:
    a, _ = heap.malloc(4 * MIB)
    b, _ = heap.malloc(4 * MIB)
    c, _ = heap.malloc(30 * MIB)  # its own 30 MiB segment
    heap.release_block(a)
    heap.release_block(b)
    # a, b and the 12 MiB tail merged again: one 20 MiB free block, reused best fit
    assert heap.malloc(19 * MIB) == (a, 20 * MIB)  # 1 MiB left is not more than 1 MiB
    heap.release_block(c)
    heap.release()
    assert heap.reserved == 20 * MIB  # the 30 MiB segment went back; the used one stays
