"""The probe runtime with real (CPU) torch: huge tensors and torch.compile(fullgraph=True).

CUDA graph capture needs a GPU: ``bench/gpu_probe_check.py`` covers it on the
device machine (output in ``docs/probes-gpu.md``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_probe_support import kind, make_bundle, records, run_both, write

pytest.importorskip("torch")

TENSOR_MODULE = """
    def shapes(a, b, n=0):
        return tuple(a.shape), float(b.sum()), n

    def scale(x, factor):
        return x * factor
"""


def test_huge_and_small_tensors(tmp_path: Path) -> None:
    """A 1 GiB tensor is logged as metadata in constant time; a tiny CPU one with values."""
    app = tmp_path / "app"
    write(app, "tens.py", TENSOR_MODULE)
    write(app, "main.py", """
        import time, torch, tens
        big = torch.empty(1 << 30, dtype=torch.uint8)  # never touched: no pages committed
        small = torch.arange(6, dtype=torch.float32).reshape(2, 3)
        print(tens.shapes(big, small, n=3), tens.shapes(big[::2], small.t()))
    """)
    bundle = make_bundle(tmp_path, ["tens:shapes"], log=["args", "return"],
                         exprs=["numel=a.numel()"])
    run_both(["main.py"], cwd=app, bundle=bundle)
    logs = tmp_path / "logs"
    first, second = kind(records(logs), "call")
    assert first["args"]["a"] == {"type": "Tensor", "shape": [1 << 30], "dtype": "uint8",
                                  "device": "cpu"}
    assert first["args"]["b"]["values"] == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert first["expr"]["numel"] == 1 << 30 and first["args"]["n"] == 3
    assert second["args"]["a"]["shape"] == [1 << 29] and second["args"]["b"]["shape"] == [3, 2]
    assert max(len(line) for p in logs.glob("*.jsonl") for line in p.read_text().splitlines()) < 2000


def test_compile_fullgraph_through_a_probed_function(tmp_path: Path) -> None:
    """Inside dynamo tracing the wrapper is a pass-through, so fullgraph=True still compiles."""
    app = tmp_path / "app"
    write(app, "tens.py", TENSOR_MODULE)
    write(app, "main.py", """
        import torch, tens

        @torch.compile(fullgraph=True, backend="eager", dynamic=False)
        def f(x):
            return tens.scale(x, 2.0) + 1

        x = torch.ones(4)
        print(f(x).tolist(), f(x + 1).tolist(), tens.scale(x, 3.0).tolist())
    """)
    bundle = make_bundle(tmp_path, ["tens:scale"], log=["args", "return"])
    run_both(["main.py"], cwd=app, bundle=bundle)
    recs = records(tmp_path / "logs")
    (call,) = kind(recs, "call")  # the compiled calls pass through without a record
    assert call["args"]["factor"] == 3.0 and call["return"]["shape"] == [4]
    assert kind(recs, "EXIT")[0]["calls"] == {"tens:scale": 1}
