"""Call graph and ``chain`` on real releases: edges checked against the code they come from."""

from __future__ import annotations

import ast
import hashlib
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recon.cli import app
from recon.index import SnapshotIndex, load_index
from recon.index.chain import chain, keep_files, render
from recon.index.graph import Budget, CallGraph
from recon.snapshots.model import Snapshot

ALIGN = "vllm.platforms.interface:Platform._align_hybrid_block_size"
UPDATE = "vllm.platforms.interface:Platform.update_block_size_for_backend"
CPU_UPDATE = "vllm.platforms.cpu:CpuPlatform.update_block_size_for_backend"


@pytest.fixture(scope="module")
def vidx(vllm_latest: Snapshot) -> SnapshotIndex:
    return load_index(vllm_latest)


@pytest.fixture(scope="module")
def cg(vidx: SnapshotIndex) -> CallGraph:
    return CallGraph(vidx)


def _call_line(idx: SnapshotIndex, caller: str, needle: str) -> int:
    """The file line inside ``caller``'s source that contains ``needle`` (read from the file)."""
    fn = idx.lookup(caller)
    lines = idx.snapshot.read_text(fn.path).split("\n")
    hits = [n for n in range(fn.lineno, fn.end_lineno + 1) if needle in lines[n - 1]]
    assert hits, f"{needle!r} not in {caller}"
    return hits[0]


def _edge(cg: CallGraph, a: str, b: str) -> dict:
    cg.callees(a)
    assert cg.graph.has_edge(a, b), f"no edge {a} -> {b}; callees: {sorted(cg.graph.successors(a))}"
    return cg.graph.edges[a, b]


def test_chain_to_align_contains_its_config_time_caller(vidx: SnapshotIndex) -> None:
    res = chain(vidx, "Platform._align_hybrid_block_size", depth=3)
    assert res.target == ALIGN and not res.partial
    # Platform.update_block_size_for_backend calls it (read from interface.py), and is in the chain
    line = _call_line(vidx, UPDATE, "cls._align_hybrid_block_size(")
    assert res.callers[UPDATE] == 1
    edge = next(e for e in res.edges if e[0] == UPDATE and e[1] == ALIGN)
    assert edge[2] == "call" and line in edge[3]
    # ... which the executors call through the typed module variable current_platform
    line = _call_line(vidx, "vllm.v1.executor.uniproc_executor:UniProcExecutor._init_executor",
                      "current_platform.update_block_size_for_backend(")
    assert res.callers["vllm.v1.executor.uniproc_executor:UniProcExecutor._init_executor"] == 2
    assert res.files[0].path == "vllm/platforms/interface.py"
    assert {"vllm/platforms/cpu.py", "vllm/v1/executor/uniproc_executor.py"} <= {f.path for f in res.files}
    assert line > 0


def test_cls_call_resolved_through_base_class(vidx: SnapshotIndex, cg: CallGraph) -> None:
    """CpuPlatform(Platform) calls cls._align_hybrid_block_size, which only Platform defines."""
    text = vidx.snapshot.read_text("vllm/platforms/cpu.py")
    assert "class CpuPlatform(Platform):" in text and "def _align_hybrid_block_size" not in text
    line = _call_line(vidx, CPU_UPDATE, "cls._align_hybrid_block_size(")
    assert line in _edge(cg, CPU_UPDATE, ALIGN)["lines"]
    assert CPU_UPDATE in cg.callers(ALIGN)


def test_self_call_resolved_through_base_class(vidx: SnapshotIndex, cg: CallGraph) -> None:
    caller = "vllm.platforms.cuda:CudaPlatformBase.supported_dtypes"
    text = vidx.snapshot.read_text("vllm/platforms/cuda.py")
    cls = vidx.lookup_class("vllm.platforms.cuda:CudaPlatformBase")
    body = "\n".join(text.split("\n")[cls.lineno - 1: cls.end_lineno])
    assert body.startswith("class CudaPlatformBase(Platform):") and "def has_device_capability" not in body
    line = _call_line(vidx, caller, "self.has_device_capability(")
    edge = _edge(cg, caller, "vllm.platforms.interface:Platform.has_device_capability")
    assert line in edge["lines"]


def test_call_through_import_alias(vidx: SnapshotIndex, cg: CallGraph) -> None:
    caller = "vllm.entrypoints.cli.collect_env:CollectEnvSubcommand.cmd"
    text = vidx.snapshot.read_text("vllm/entrypoints/cli/collect_env.py")
    assert "from vllm.collect_env import main as collect_env_main" in text
    line = _call_line(vidx, caller, "collect_env_main(")
    assert line in _edge(cg, caller, "vllm.collect_env:main")["lines"]


def test_super_constructor_and_override_edges(vidx: SnapshotIndex, cg: CallGraph) -> None:
    xpu = "vllm.platforms.xpu:XPUPlatform.update_block_size_for_backend"
    line = _call_line(vidx, xpu, "super().update_block_size_for_backend(")
    assert line in _edge(cg, xpu, UPDATE)["lines"]
    # WorkerWrapperBase(...) in UniProcExecutor._init_executor -> WorkerWrapperBase.__init__
    init = "vllm.v1.executor.uniproc_executor:UniProcExecutor._init_executor"
    line = _call_line(vidx, init, "WorkerWrapperBase(")
    edge = _edge(cg, init, "vllm.v1.worker.worker_base:WorkerWrapperBase.__init__")
    assert edge["kind"] == "constructor" and line in edge["lines"]
    # VllmConfig.__post_init__ -> Platform.check_and_update_config -> every platform's override
    post = "vllm.config.vllm:VllmConfig.__post_init__"
    _call_line(vidx, post, "current_platform.check_and_update_config(self)")
    _edge(cg, post, "vllm.platforms.interface:Platform.check_and_update_config")
    over = _edge(cg, "vllm.platforms.interface:Platform.check_and_update_config",
                 "vllm.platforms.cuda:CudaPlatformBase.check_and_update_config")
    assert over["kind"] == "override"


def test_every_call_site_is_accounted_for(vidx: SnapshotIndex, cg: CallGraph) -> None:
    fn = vidx.lookup(UPDATE)
    text = vidx.snapshot.read_text(fn.path)
    node = next(n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef)
                and n.name == "update_block_size_for_backend" and n.lineno == fn.def_lineno)
    calls = [c for c in ast.walk(node) if isinstance(c, ast.Call)]
    sites = cg.callees(UPDATE)
    assert len(sites) == len(calls)
    assert sorted(s.lineno for s in sites) == sorted(c.lineno for c in calls)
    unresolved = [s for s in sites if s.status == "unresolved"]
    assert all(s.detail for s in unresolved)
    # "b" is the comprehension variable in "b.get_name() for b in backend_classes": untyped
    assert any(s.text == "b.get_name" for s in unresolved)
    assert set(cg.unresolved()) >= set(unresolved)


def test_paths_from_a_start(vidx: SnapshotIndex) -> None:
    src = "vllm.v1.executor.uniproc_executor:UniProcExecutor._init_executor"
    res = chain(vidx, ALIGN, source=src, depth=2)
    assert [src, UPDATE, ALIGN] in res.paths
    assert res.paths[0] == [src, UPDATE, ALIGN]


def test_budget_gives_partial_answer(vidx: SnapshotIndex) -> None:
    res = chain(vidx, ALIGN, depth=6, budget=Budget(seconds=0.0))
    assert res.partial and "time budget" in (res.reason or "")
    res = chain(vidx, ALIGN, depth=6, budget=Budget(max_nodes=5))
    assert res.partial and "node budget" in (res.reason or "")


def test_keep_writes_a_pruned_snapshot(vidx: SnapshotIndex, tmp_path: Path) -> None:
    res = chain(vidx, ALIGN, depth=2)
    kept = keep_files(vidx, res, 3, dest=tmp_path / "ref")
    parent = vidx.snapshot
    assert sorted(kept.files) == sorted(f.path for f in res.files[:3])
    assert "vllm/platforms/interface.py" in kept.files
    for rel, rec in kept.files.items():
        data = (kept.src / rel).read_bytes()
        assert data == parent.read_bytes(rel)
        assert hashlib.sha256(data).hexdigest() == rec.sha256 == parent.files[rel].sha256
        assert rec.layer == parent.files[rel].layer
    assert kept.manifest.parent["name"] == parent.name
    assert kept.manifest.parent["path"] == str(parent.root)
    assert kept.manifest.selection["chain"]["target"] == ALIGN
    assert kept.manifest.source == parent.manifest.source
    # the pruned snapshot is a snapshot: it indexes, and the target is there
    small = load_index(kept)
    assert small.lookup(ALIGN).ast_hash == vidx.lookup(ALIGN).ast_hash


def test_pictures(vidx: SnapshotIndex) -> None:
    res = chain(vidx, ALIGN, depth=1)
    dot = render(vidx, res, "dot")
    assert dot.startswith("digraph chain {") and "_align_hybrid_block_size" in dot
    assert dot.count("->") == len(res.edges)
    mer = render(vidx, res, "mermaid")
    assert mer.startswith("flowchart LR") and "Platform.update_block_size_for_backend" in mer
    if shutil.which("dot") is None:
        pytest.skip("Graphviz not installed")
    svg = render(vidx, res, "svg")
    root = ET.fromstring(svg[svg.index("<svg"):])
    assert root.tag.endswith("svg") and "_align_hybrid_block_size" in svg


def test_cli_chain(vllm_latest: Snapshot, tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["chain", str(vllm_latest.root), "--to", ALIGN, "--depth", "1", "--json",
                              "--keep", "2", "--out", str(tmp_path / "k")])
    assert res.exit_code == 0, res.output
    assert UPDATE in res.output and (tmp_path / "k" / "vllm_0.33.0--Platform._align_hybrid_block_size" / "manifest.json").is_file()
    res = runner.invoke(app, ["chain", str(vllm_latest.root), "--to", "Platform._align_hybrid_blocksize"])
    assert res.exit_code != 0
    from recon.cli import main

    with pytest.raises(SystemExit) as ex:
        main(["chain", str(vllm_latest.root), "--to", "Platform._align_hybrid_blocksize"])
    assert ex.value.code == 2


def test_sglang_chain(sglang_latest: Snapshot) -> None:
    idx = load_index(sglang_latest)
    target = next(f for f in idx.functions.values()
                  if f.path == "sglang/srt/layers/attention/hybrid_linear_attn_backend.py"
                  and f.short == "_init_track_ssm_indices")
    res = chain(idx, target.qualname, depth=1)
    callers = set(res.callers)
    assert callers
    for q in callers:  # each caller's own source names the method
        assert "_init_track_ssm_indices(" in idx.source(q) or res.graph.edges[q, target.qualname]["kind"] == "override"


def test_name_bound_differently_on_two_branches(vidx: SnapshotIndex, cg: CallGraph) -> None:
    """Worker._make_model_runner imports a different class as GPUModelRunnerV2 on each branch."""
    caller = "vllm.v1.worker.gpu_worker:Worker._make_model_runner"
    src = vidx.source(caller)
    assert "MMEncoderModelRunner as GPUModelRunnerV2" in src
    assert "GPUModelRunner as GPUModelRunnerV2" in src
    line = _call_line(vidx, caller, "return GPUModelRunnerV2(")
    site = next(s for s in cg.callees(caller) if s.lineno == line and s.text == "GPUModelRunnerV2")
    assert set(site.targets) == {"vllm.v1.worker.mm_encoder_model_runner:MMEncoderModelRunner.__init__",
                                 "vllm.v1.worker.gpu.model_runner:GPUModelRunner.__init__"}
    assert site.kind == "constructor"


def test_common_name_stops_at_the_budget(vidx: SnapshotIndex) -> None:
    """Callers of a `forward` method (called as module(x)): the answer comes back partial."""
    target = next(q for q in vidx.functions if q.endswith(":ColumnParallelLinear.forward"))
    g = CallGraph(vidx)
    assert len(g._candidates(vidx.functions[target])) > 500
    res = chain(vidx, target, depth=4, budget=Budget(max_nodes=1000), callees=False, graph=g)
    assert res.partial and res.reason and "node budget" in res.reason
    assert res.target == target and res.callers  # what was found so far is kept
    # a caller found is a real one: its source calls an attribute typed ColumnParallelLinear
    first = next(iter(res.callers))
    assert res.graph.has_edge(first, target) or res.callers[first] > 1
