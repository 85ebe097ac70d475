"""Engine mode: the release's own parser, config and worker decisions, on a declared GPU.

Expected numbers come from the engine itself: the real vLLM 0.26.0 engine's
logs on an H200 (``tests/data/logs/real``), public start-up logs
(``tests/data/public-logs``) and, for the MTP capture-size rounding, the
release's own ``adjust_cudagraph_sizes_for_spec_decode`` result quoted in the
field notes. Real wheels, real imports, a real sandboxed child. The release
environments and snapshots are built once (session fixtures, recon's cache).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path

import pytest

from recon.engine import child, env
from recon.engine.child import SMALL_INTEGER_TENSOR as SMALL
from recon.engine.command import words
from recon.engine.config import (
    SERVER_MODULES,
    EngineFacts,
    EngineUsageError,
    VllmCommand,
    compiled_modules,
    engine_config,
    image_release,
    model_files,
    remote_code_modules,
    vllm_command,
)
from recon.engine.env import requirements, skip_reason
from recon.engine.gpus import GPUS, UnknownGPU, board_for, gpu
from recon.errors import ReconError
from recon.examples import EXAMPLES_DIR
from recon.snapshots.model import Snapshot

DATA = Path(__file__).parent / "data"
REAL = DATA / "logs" / "real"
EXAMPLES = EXAMPLES_DIR


def _json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


# -- the child module, without the sandbox or vLLM -----------------------------------------

def test_empty_extensions_answer_only_listed_names() -> None:
    finder = child.EmptyExtensions(["pkg._C"])
    assert finder.find_spec("pkg._C") is not None
    assert finder.find_spec("pkg.other") is None
    module = finder.create_module(finder.find_spec("pkg._C"))
    assert module.__name__ == "pkg._C" and finder.hits == ["pkg._C"]


def test_gpu_packages_stand_in_last_and_only_for_listed_names() -> None:
    import importlib
    import importlib.util
    import sys

    stand_in = child.GpuPackages(["recon_test_gpu_pkg", "json"])
    sys.meta_path.append(stand_in)
    try:
        assert importlib.util.find_spec("recon_test_gpu_other") is None
        module = importlib.import_module("recon_test_gpu_pkg.utils")
        size = module.sm_count(0)  # any attribute works, and its use is recorded
        with pytest.raises(TypeError):  # but it has no value to compute with
            int(size)
        import json as real_json  # an installed package of a listed name wins (finder last)
        assert hasattr(real_json, "dumps") and "json" not in stand_in.hits
        report = stand_in.report()
        assert report["gpu_packages"] == ["recon_test_gpu_pkg"]
        assert "recon_test_gpu_pkg.utils.sm_count" in report["gpu_package_names_used"]
    finally:
        sys.meta_path.remove(stand_in)
        for name in [n for n in sys.modules if n.startswith("recon_test_gpu_pkg")]:
            del sys.modules[name]


def test_gpu_only_modules_name_what_vllm_requires() -> None:
    from recon.engine.env import gpu_only_modules

    required = ["flashinfer-python", "flashinfer-cubin", "humming-kernels", "nvidia-cublas",
                "nvidia-ml-py", "torch", "cuda-bindings"]
    assert gpu_only_modules(required) == ["cuda", "flashinfer", "flashinfer_cubin", "humming"]


def test_torch_device_queries_answer_the_declared_board(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    for name in ("get_device_capability", "get_device_name", "get_device_properties"):
        monkeypatch.setattr(torch.cuda, name, getattr(torch.cuda, name))  # restored afterwards
    board = {**gpu("l40s").as_json(), "count": 2}
    replaced = child.torch_cuda_queries(board)
    assert torch.cuda.get_device_capability(0) == (8, 9)
    assert torch.cuda.get_device_name() == gpu("l40s").name
    assert torch.cuda.get_device_properties(0).total_memory == gpu("l40s").memory_bytes
    # the vendor's SM count (kernels size grids by it); a property the table lacks is an error
    assert torch.cuda.get_device_properties(0).multi_processor_count == 142
    with pytest.raises(AttributeError, match="L2_cache_size"):  # not in recon's table
        _ = torch.cuda.get_device_properties(0).L2_cache_size
    assert "torch.cuda.get_device_capability" in replaced
    assert torch.cuda.device_count() == 0  # availability stays this machine's


def test_quantization_is_left_out_only_where_the_config_cannot_back_it() -> None:
    from recon.engine.config import _unbacked_quantization

    failed = {"ok": False, "quantization": "compressed-tensors",
              "errors": [{"error": "TypeError: CompressedTensorsConfig.__init__() missing 3"}]}
    said = _unbacked_quantization(failed, {"architectures": ["X"]})
    assert said is not None and said.startswith("--quantization compressed-tensors was left out")
    assert "missing 3" in said
    assert _unbacked_quantization(failed, {"quantization_config": {"quant_method": "x"}}) is None
    assert _unbacked_quantization(failed, {"text_config": {"quantization_config": {}}}) is None
    assert _unbacked_quantization({**failed, "ok": True}, {}) is None
    assert _unbacked_quantization({**failed, "usage_error": {}}, {}) is None
    assert _unbacked_quantization({**failed, "quantization": None}, {}) is None


def test_layout_arguments_follow_the_releases_signature() -> None:
    """0.29-0.32 pass the layout alone, 0.33 also the CP interleave size; a parameter recon
    cannot fill is an error that names it, never a guess."""
    config = types.SimpleNamespace(parallel_config=types.SimpleNamespace(
        cp_kv_cache_interleave_size=1))

    def old(self: object, kv_cache_layout: str) -> None: ...
    def new(self: object, kv_cache_layout: str, cp_kv_cache_interleave_size: int) -> None: ...
    def other(self: object, kv_cache_layout: str, ranks: int) -> None: ...

    assert child.layout_arguments(old, "LBNHC", config) == {"kv_cache_layout": "LBNHC"}
    assert child.layout_arguments(new, "LBNHC", config) == {
        "kv_cache_layout": "LBNHC", "cp_kv_cache_interleave_size": 1}
    with pytest.raises(RuntimeError, match=r"takes \['ranks'\]"):
        child.layout_arguments(other, "LBNHC", config)


def test_log_records_keep_the_engine_numbers() -> None:
    import logging

    handler = child.LogRecords()
    record = logging.LogRecord("vllm.platforms.interface", logging.INFO, "f", 1,
                               "Padding mamba page size by %.2f%% to ensure ...", (1.4925,), None)
    handler.emit(record)
    assert handler.numbers() == {"mamba_padding_pct": 1.4925}


def test_jsonable_keeps_numbers_and_names_enums() -> None:
    import enum

    class Mode(enum.Enum):
        FULL = 2

    assert child.jsonable({"a": [1, 2.5, Mode.FULL, None]}) == {"a": [1, 2.5, "FULL", None]}


def test_provenance_sees_only_calls_under_the_root(tmp_path: Path) -> None:
    src = tmp_path / "mod_prov.py"
    src.write_text("def f():\n    return 1\n")
    code = compile(src.read_text(), str(src), "exec")
    ns: dict = {}
    exec(code, ns)  # noqa: S102 - our own two lines
    prov = child.Provenance(str(tmp_path))
    with prov.active():
        ns["f"]()
        len([1])
    assert [(f["file"], f["qualname"], f["first_line"]) for f in prov.functions()] == \
        [("mod_prov.py", "f", 1)]


def test_single_rank_group_sizes_and_refuses_communication() -> None:
    import torch

    group = child.SingleRankGroup("tp", 4)
    assert (group.world_size, group.rank_in_group, group.device_group.size()) == (4, 0, 4)
    with pytest.raises(RuntimeError, match="broadcast"):
        group.broadcast  # noqa: B018
    # the memory phase's forward: collectives give a tensor of the result's shape, no values
    part = torch.empty(3, 8, device="meta")
    assert group.all_reduce(part).shape == (3, 8) and group.all_reduce(part) is not part
    assert group.all_gather(part, dim=-1).shape == (3, 32)
    assert group.reduce_scatter(torch.empty(8, 8, device="meta"), dim=0).shape == (2, 8)
    assert child.SingleRankGroup("tp", 1).all_reduce(part) is part
    parallel = types.SimpleNamespace(tensor_parallel_size=2, pipeline_parallel_size=1,
                                     data_parallel_size=1)
    assert child.group_sizes(parallel)["_TP"] == 2


def test_gpu_methods_answer_for_the_declared_board() -> None:
    methods = child._gpu_methods({**GPUS["l40s"].as_json(), "count": 8},
                                 lambda major, minor: (major, minor))
    cls = type("P", (), methods)
    assert cls.get_device_capability() == (8, 9)
    assert cls.has_device_capability(89) and not cls.has_device_capability(90)
    assert cls.get_device_total_memory() == 46068 << 20
    assert cls.device_count() == 8


@pytest.mark.parametrize(("platform", "active"), [("cuda", "nvidia"), ("rocm", "amd")])
def test_triton_sees_the_declared_boards_driver(platform: str, active: str) -> None:
    backends = pytest.importorskip("triton.backends").backends
    saved = {name: b.driver.__dict__["is_active"] for name, b in backends.items()}
    try:
        assert not any(b.driver.is_active() for b in backends.values())  # no GPU here
        said = child.triton_driver({"platform": platform})
        assert {name: b.driver.is_active() for name, b in backends.items()} == \
            {name: name == active for name in backends}
        assert f"triton.backends.{active} driver active: True" in said
    finally:
        for name, fn in saved.items():
            backends[name].driver.is_active = fn


def test_tensors_put_on_the_gpu_are_made_on_meta() -> None:
    import torch

    placed: list[str] = []
    with child.gpu_tensors_on_meta(torch, placed):
        made = torch.zeros(4, 2, device="cuda", dtype=torch.float16)
        by_index = torch.empty(3, device=0)
        moved = torch.ones(2).cuda()
        sent = torch.ones(2).to("cuda:1")
        pinned = torch.empty(8, pin_memory=True)
        kept = torch.ones(2)
    assert [t.device.type for t in (made, by_index, moved, sent)] == ["meta"] * 4
    assert made.shape == (4, 2) and made.dtype == torch.float16
    assert pinned.device.type == "cpu" and not pinned.is_pinned()
    assert kept.device.type == "cpu" and kept.sum().item() == 2.0  # host tensors untouched
    assert {f"torch.{n} on the GPU -> meta" for n in ("zeros", "empty", "cuda", "to")} \
        <= set(placed)
    assert "pin_memory ignored (meta has no pages)" in placed


def test_small_integer_tensors_on_the_default_device_hold_their_values() -> None:
    """Under the loader's device (meta here) an expert map keeps values to read; weights do not.

    0.10's FusedMoE builds its expert map with ``torch.full`` and ``torch.arange`` on the
    default device and logs it with ``torch.where`` and ``.item()``.
    """
    import torch

    placed: list[str] = []
    with torch.device("meta"), child.gpu_tensors_on_meta(torch, placed):
        expert_map = torch.full((8,), -1, dtype=torch.int32)
        expert_map[2:4] = torch.arange(0, 2, dtype=torch.int32)
        where = torch.where(expert_map != -1)[0]
        weight = torch.empty(1024, 1024, dtype=torch.bfloat16)
        positions = torch.arange(SMALL + 1)
        asked = torch.zeros(4, dtype=torch.int64, device="cuda")
        into = torch.arange(4, out=torch.empty(4, dtype=torch.int64))  # out= decides the device
        big = torch.arange(SMALL + 1, out=torch.empty(SMALL + 1, dtype=torch.int64))
    assert [int(i) for i in where] == [2, 3] and int(expert_map[3].item()) == 1
    assert weight.device.type == "meta"  # a weight is never made for real
    assert positions.device.type == "meta"  # nor a large index
    assert asked.device.type == "meta"  # a GPU the release names is meta, as before
    assert [int(i) for i in into] == [0, 1, 2, 3]  # a small one written in place keeps values
    assert big.device.type == "meta"
    assert "torch.full: small integer tensors on the CPU, not meta" in placed


def test_remote_code_modules_are_plain_names_of_the_models_folder(tmp_path: Path) -> None:
    """auto_map's modules beside config.json travel with it; another repository's class, a path,
    or a name that is not a module's does not, and the child writes nothing else."""
    config = {"auto_map": {"AutoConfig": "configuration_toy.ToyConfig",
                           "AutoModel": ["modeling_toy.ToyModel", None],
                           "AutoTokenizer": ["other/repo--tokenization_toy.ToyTokenizer", None],
                           "AutoProcessor": "../escape.Evil", "Bad": 3}}
    assert remote_code_modules(config) == ["configuration_toy.py", "modeling_toy.py"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "configuration_toy.py").write_text("X = 1\n")
    (tmp_path / "preprocessor_config.json").write_text("{}")
    assert sorted(model_files(tmp_path / "config.json")) == ["configuration_toy.py",
                                                             "preprocessor_config.json"]
    model = tmp_path / "model"
    child.write_model({"model_dir": str(model), "config": config, "model_files": {
        "configuration_toy.py": "X = 1\n", "../escape.py": "", "sub/x.py": "", "a.sh": ""}})
    assert sorted(p.name for p in model.iterdir()) == ["config.json", "configuration_toy.py"]
    assert not (tmp_path / "escape.py").exists()


def test_gpu_table() -> None:
    assert gpu("A100") is GPUS["a100-80"]
    assert gpu("mi300x").platform == "rocm"
    props = child.DeviceProperties(gpu("mi300x").as_json())
    assert props.gcnArchName.split(":")[0] == "gfx942"  # ROCm's platform module reads it
    with pytest.raises(AttributeError, match="gcnArchName"):
        _ = child.DeviceProperties(gpu("h100").as_json()).gcnArchName  # CUDA boards have none
    with pytest.raises(UnknownGPU):
        gpu("tpu")


def test_vllm_command_keeps_the_command_as_typed() -> None:
    typed = "vllm serve M --tensor_parallel 2 -O0 --speculative-config.method mtp"
    assert vllm_command(typed) == VllmCommand(
        "serve", ["M", "--tensor_parallel", "2", "-O0", "--speculative-config.method", "mtp"], {})


API = SERVER_MODULES[0]


@pytest.mark.parametrize(("typed", "entry", "argv", "env"), [
    # the environment typed before the program is the engine's, as the shell passes it
    ("VLLM_USE_V1=1 CUDA_VISIBLE_DEVICES=6,7 vllm serve M --tp 2", "serve", ["M", "--tp", "2"],
     {"VLLM_USE_V1": "1", "CUDA_VISIBLE_DEVICES": "6,7"}),
    # the API server module: its own parser takes --model
    (f"python3 -m {API} --model /m --port 8000", API, ["--model", "/m", "--port", "8000"], {}),
    (f"CUDA_VISIBLE_DEVICES=0 /usr/bin/python3.12 -m {API} --model /m", API, ["--model", "/m"],
     {"CUDA_VISIBLE_DEVICES": "0"}),
    ("python -m vllm.entrypoints.cli.main serve M", "serve", ["M"], {}),
    ("M --max-num-seqs 8", "serve", ["M", "--max-num-seqs", "8"], {}),
    (["vllm", "serve", "M"], "serve", ["M"], {}),
])
def test_vllm_command_entry_points(typed: str | list[str], entry: str, argv: list[str],
                                   env: dict[str, str]) -> None:
    got = vllm_command(typed)
    assert (got.entry, got.argv, got.env) == (entry, argv, env)
    assert got.assumed == ""


def test_bare_arguments_with_model_are_the_image_entry_point_and_say_so() -> None:
    got = vllm_command("--model /models/Q --tensor_parallel_size 4")
    assert (got.entry, got.argv) == (API, ["--model", "/models/Q", "--tensor_parallel_size", "4"])
    assert API in got.assumed and "vllm-openai image" in got.assumed
    # typed with vllm serve, the release's own serve parser decides (some refuse --model)
    assert vllm_command("vllm serve --model /m").entry == "serve"


@pytest.mark.parametrize(("typed", "image", "entry", "argv", "env", "unseen"), [
    # the arguments after the image go to its entry point; -e settings are the environment
    ("docker run --gpus '\"device=2\"' --ipc=host -p 8000:8000 -v /c:/root/.cache -e HF_TOKEN=t "
     "vllm/vllm-openai:v0.31.0-ubuntu2404 --model meta-llama/Llama-3.1-8B-Instruct",
     "vllm/vllm-openai:v0.31.0-ubuntu2404", API, ["--model", "meta-llama/Llama-3.1-8B-Instruct"],
     {"HF_TOKEN": "t"}, []),
    # switches take no value (-d, -it, --rm); a host-valued -e and an env file are not seen
    ("VLLM_LOGGING_LEVEL=DEBUG docker run -d --rm -it --runtime nvidia --gpus all "
     "-eVLLM_USE_V1=1 -e HF_TOKEN --env-file .env --shm-size=16g vllm/vllm-openai:latest "
     "Qwen/Qwen3-8B -tp 2", "vllm/vllm-openai:latest", "serve", ["Qwen/Qwen3-8B", "-tp", "2"],
     {"VLLM_LOGGING_LEVEL": "DEBUG", "VLLM_USE_V1": "1"}, ["-e HF_TOKEN", "--env-file .env"]),
    # an entry point of the user's, and podman
    (f"podman run --entrypoint python3 img -m {API} --model m", "img", API, ["--model", "m"],
     {}, []),
    (f"docker container run img python3 -m {API} --model m", "img", API, ["--model", "m"], {}, []),
])
def test_a_container_run_is_read_as_the_container_runs_it(
        typed: str, image: str, entry: str, argv: list[str], env: dict[str, str],
        unseen: list[str]) -> None:
    got = vllm_command(typed)
    assert (got.image, got.entry, got.argv, got.env) == (image, entry, argv, env)
    assert f"a container run of {image}" in got.assumed
    for item in unseen:
        assert item in got.assumed


def test_a_container_image_of_another_release_is_said() -> None:
    snap = types.SimpleNamespace(package="vllm", version="0.33.0")
    said = image_release("vllm/vllm-openai:v0.31.0-ubuntu2404", snap)  # type: ignore[arg-type]
    assert "vLLM 0.31.0" in said and "pip:vllm==0.31.0" in said
    assert image_release("vllm/vllm-openai:v0.33.0", snap) == ""  # type: ignore[arg-type]
    assert image_release("vllm/vllm-openai:latest", snap) == ""  # type: ignore[arg-type]
    assert image_release("registry:5000/vllm", snap) == ""  # a port is not a tag


@pytest.mark.parametrize("typed", ["python -m vllm.entrypoints.api_server --model m",
                                   "vllm bench throughput --model m"])
def test_other_programs_are_usage_errors(typed: str) -> None:
    with pytest.raises(EngineUsageError):
        vllm_command(typed)


def _tiny_wheel(folder: Path, name: str) -> None:
    """A real (empty) wheel, so pip handles it as it would any other."""
    import zipfile

    info = f"{name}-1.0.dist-info"
    files = {f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{f},,\n" for f in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(folder / f"{name}-1.0-py3-none-any.whl", "w") as zf:
        for arc, text in files.items():
            zf.writestr(arc, text)


def test_one_unavailable_wheel_costs_one_more_pip_call(tmp_path: Path) -> None:
    """pip names the spec that stopped the batch; the rest go in one more call, not one each."""
    index, dest, log = tmp_path / "index", tmp_path / "dest", tmp_path / "pip.log"
    index.mkdir()
    for name in ("alpha", "beta", "gamma"):
        _tiny_wheel(index, name)
    args = ["download", "--no-deps", "--no-index", "--find-links", str(index), "-d", str(dest)]

    def download(specs: list[str]) -> subprocess.CompletedProcess[str]:
        return env._pip([*args, *specs], log)

    env._batch(download, ["alpha", "no-such-project>=1", "beta", "gamma[x]"])
    assert sorted(p.name.split("-")[0] for p in dest.iterdir()) == ["alpha", "beta", "gamma"]
    assert log.read_text().count("$ ") == 2
    # a failure pip does not pin on one spec: each spec alone, so the others still arrive
    env._batch(lambda specs: env._pip([*args, "--no-such-option", *specs], log), ["alpha"])
    assert log.read_text().count("$ ") == 4


@pytest.mark.parametrize("uv", [True, False], ids=["uv", "pip"])
def test_installer_installs_what_the_wheelhouse_has(tmp_path: Path, uv: bool,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Both installers put the wheels the wheelhouse has into the environment (bytecode
    compiled, as pip does), skip the one it lacks after one retry, and touch nothing else."""
    if not uv:
        monkeypatch.setattr(env, "_uv", lambda: None)
    elif env._uv() is None:
        pytest.fail("uv is a dependency of recon and must be installed")
    house, venv, log = tmp_path / "wheelhouse", tmp_path / "venv", tmp_path / "pip.log"
    house.mkdir()
    for name in ("alpha", "beta"):
        _tiny_wheel(house, name)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    inst = env._Installer(venv / "bin" / "python", house, log)
    assert inst.run(["alpha", "no-such-project", "beta"]).returncode != 0
    env._batch(inst.run, ["alpha", "no-such-project", "beta"])
    site = next(venv.glob("lib/python*/site-packages"))
    assert sorted(p.name for p in site.glob("*.dist-info")) == ["alpha-1.0.dist-info",
                                                               "beta-1.0.dist-info"]
    assert log.read_text().count("$ ") == 3
    assert (log.read_text().count("uv pip install") > 0) == uv
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["wheelhouse", "venv", "pip.log"] + (["uv-cache"] if uv else []))


def test_requirements_follow_markers_and_skip_gpu_only() -> None:
    meta = ("Metadata-Version: 2.1\nName: x\nRequires-Dist: regex\n"
            "Requires-Dist: torch==2.14.0\nRequires-Dist: flashinfer-python==0.7\n"
            "Requires-Dist: pandas; extra == \"bench\"\n"
            "Requires-Dist: six; python_version > \"3.99\"\n")
    names = [r.name for r in requirements(meta)]
    assert names == ["regex", "torch", "flashinfer-python"]
    assert skip_reason("torch") and skip_reason("flashinfer-python") and not skip_reason("regex")


# -- the real releases ------------------------------------------------------------------------

@pytest.fixture(scope="session")
def vllm_026(pip_snapshot: Callable[..., Snapshot]) -> Snapshot:
    return pip_snapshot("vllm==0.26.0")


def _flags(kwargs: dict) -> str:
    """LLM(...) keyword arguments of a real run as the equivalent command line."""
    out = ["vllm", "serve", "MODEL"]
    for key, value in kwargs.items():
        if key in ("model", "load_format", "skip_tokenizer_init"):
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
        else:
            out += [flag, "'" + json.dumps(value) + "'" if isinstance(value, dict) else str(value)]
    return " ".join(out)


def _real_case(name: str) -> tuple[dict, dict]:
    """(LLM kwargs, what the engine logged) of one real H200 run of vLLM 0.26.0."""
    text = (REAL / f"{name}.log").read_text(encoding="utf-8", errors="replace")
    kwargs = json.loads(re.search(r"^CASE \S+ LLM kwargs (\{.*\})$", text, re.M).group(1))
    logged: dict = {}
    if m := re.search(r"Setting attention block size to (\d+) tokens", text):
        logged["block"] = int(m.group(1))
    if m := re.search(r"Padding mamba page size by ([\d.]+)%", text):
        logged["padding"] = float(m.group(1))
    if m := re.search(r"'cudagraph_capture_sizes': (\[[\d, ]*\])", text):
        logged["sizes"] = json.loads(m.group(1))
    if m := re.search(r"enable_prefix_caching=(True|False)", text):
        logged["prefix"] = m.group(1) == "True"
    if m := re.search(r"max_num_batched_tokens=(\d+)", text):
        logged["batched"] = int(m.group(1))
    if m := re.search(r"Mamba cache mode is set to '(\w+)'", text):
        logged["mamba_mode"] = m.group(1)
    if m := re.search(r"Available KV cache memory: ([\d.]+) GiB", text):
        logged["kv_gib"] = float(m.group(1))
    if m := re.search(r"GPU KV cache size: ([\d,]+) tokens", text):
        logged["tokens"] = int(m.group(1).replace(",", ""))
    if m := re.search(r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x", text):
        logged["concurrency"] = float(m.group(1))
    return kwargs, logged


def _model_config(kwargs: dict) -> dict:
    return _json(REAL / "configs" / (Path(kwargs["model"]).name + ".json"))


# every real log goes through `recon logs` in tests/test_logs_real.py (flags read off the log);
# these two ask engine mode directly with the LLM(...) kwargs as typed, a command line's form
@pytest.mark.parametrize("case", ["Q_prefix", "N_prefix"])
def test_real_h200_runs_of_026(vllm_026: Snapshot, case: str) -> None:
    kwargs, logged = _real_case(case)
    facts = engine_config(vllm_026, _flags(kwargs), _model_config(kwargs), gpu="h200",
                          usage="llm", kv_memory_gib=logged["kv_gib"])
    got = facts.as_json()
    # the log rounds the available memory to 0.01 GiB: tokens agree to that precision
    assert got["kv_cache_tokens"] == pytest.approx(logged["tokens"], rel=2e-4)
    assert got["max_concurrency"] == pytest.approx(logged["concurrency"], rel=2e-4)
    if "block" in logged:
        assert got["attention_block_size_logged"] == logged["block"]
        assert round(got["mamba_padding_pct"], 2) == logged["padding"]
    assert got["cudagraph_capture_sizes"] == logged["sizes"]
    assert got["enable_prefix_caching"] is logged["prefix"]
    assert got["max_num_batched_tokens"] == logged["batched"]
    if "mamba_mode" in logged:  # 'align' for Qwen3-Next, 'all' for Nemotron-H (0.26.0)
        assert got["mamba_cache_mode"] == logged["mamba_mode"]
    assert any(f["file"] == "vllm/engine/arg_utils.py" and f["sha256"] for f in facts.ran)


def test_026_fp8_kv_on_h200(vllm_026: Snapshot) -> None:
    # the real engine on the H200 (shared/gpu-engine README): 1072 and no padding with fp8 KV
    facts = engine_config(vllm_026, "vllm serve M --gdn-prefill-backend triton "
                          "--max-model-len 4096 --kv-cache-dtype fp8",
                          _json(REAL / "configs" / "qwen3next.json"), gpu="h200", usage="llm")
    assert facts.facts["attention_block_size"] == 1072
    assert "mamba_padding_pct" not in facts.logged


@pytest.fixture(scope="session")
def qwen3_next_033(vllm_latest: Snapshot) -> Callable[[str], EngineFacts]:
    cache: dict[str, EngineFacts] = {}
    cfg = _json(EXAMPLES / "qwen3-next-80b-a3b-instruct.json")

    def run(flags: str) -> EngineFacts:
        if flags not in cache:
            cache[flags] = engine_config(vllm_latest, "vllm serve Qwen/Qwen3-Next " + flags, cfg)
        return cache[flags]

    return run


def test_033_argparse_forms_are_the_engines(qwen3_next_033: Callable[[str], EngineFacts]) -> None:
    facts = qwen3_next_033("--tensor_parallel 2 -O0")
    assert facts.facts["tensor_parallel_size"] == 2
    assert facts.facts["compilation_mode"] == 0
    assert facts.facts["cudagraph_mode"] == "NONE"
    assert "GPU: NVIDIA H100 80GB HBM3 (sm90, 79.6 GiB) -- not given, h100 assumed" \
        in facts.assumptions


def test_033_a_reasoning_parser_is_left_out_and_said(
        qwen3_next_033: Callable[[str], EngineFacts]) -> None:
    # the release builds the parser from the tokenizer engine mode does not load: without
    # the retry there is no answer at all (0.20 and later); with it, the same numbers
    plain = qwen3_next_033("--max-num-seqs 8")
    parsed = qwen3_next_033("--max-num-seqs 8 --reasoning-parser qwen3 --enable-auto-tool-choice "
                            "--tool-call-parser hermes")
    keys = ("cudagraph_capture_sizes", "attention_block_size", "max_num_seqs",
            "max_num_batched_tokens", "enable_prefix_caching")
    assert {k: parsed.facts[k] for k in keys} == {k: plain.facts[k] for k in keys}
    said = [a for a in parsed.assumptions if a.startswith("--reasoning-parser qwen3 was left out")]
    assert len(said) == 1 and "tokenizer" in said[0]
    assert not any("reasoning" in a for a in plain.assumptions)


def test_019_api_server_module_takes_model_and_serve_agrees(
        pip_snapshot: Callable[..., Snapshot]) -> None:
    # python -m vllm.entrypoints.openai.api_server: that module's own parser (it takes
    # --model); bare arguments with --model are read the same way and said so
    snap = pip_snapshot("vllm==0.19.0")
    cfg = _json(EXAMPLES / "qwen3-next-80b-a3b-instruct.json")
    rest = "--max-num-seqs 40 --max-num-batched-tokens 8192"
    module = engine_config(snap, f"python3 -m {API} --model=/m/Qwen3-Next {rest}", cfg)
    served = engine_config(snap, f"vllm serve /m/Qwen3-Next {rest}", cfg)
    bare = engine_config(snap, f"--model /m/Qwen3-Next {rest}", cfg)
    keys = ("max_num_seqs", "cudagraph_capture_sizes", "max_num_batched_tokens",
            "attention_block_size", "mamba_cache_mode")
    assert module.facts["max_num_seqs"] == 40
    assert {k: module.facts[k] for k in keys} == {k: served.facts[k] for k in keys} \
        == {k: bare.facts[k] for k in keys}
    assert any(API in a for a in bare.assumptions)
    assert not any(API in a for a in module.assumptions + served.assumptions)


def test_033_on_b200_flashinfer_is_picked_and_without_its_values_there_is_no_answer(
        vllm_latest: Snapshot) -> None:
    """On sm100 the release's backend priority puts FlashInfer first (its package is a
    requirement, so it is there on a server). Building FlashInfer's attention sizes a buffer
    with a value from the flashinfer package, which only stands in here: no block size, not
    create_engine_config's 16 with exit 0."""
    from recon.engine.config import EngineFailed

    with pytest.raises(EngineFailed, match="stand in without values: .*flashinfer") as err:
        engine_config(vllm_latest, "vllm serve M -tp 2",
                      _json(EXAMPLES / "qwen3-next-80b-a3b-instruct.json"), gpu="b200")
    assert err.value.exit_code == 7
    assert "v1/attention/backends/flashinfer.py" in str(err.value)


def test_033_unknown_flag_is_the_releases_error(vllm_latest: Snapshot) -> None:
    with pytest.raises(EngineUsageError, match="unrecognized arguments: --no-such-flag") as err:
        engine_config(vllm_latest, "vllm serve M --no-such-flag 3",
                      _json(EXAMPLES / "qwen3-next-80b-a3b-instruct.json"))
    assert err.value.exit_code == 2


def test_033_mtp_dotted_and_short_forms(qwen3_next_033: Callable[[str], EngineFacts]) -> None:
    facts = qwen3_next_033("--max-num-seqs 16 --speculative-config.method mtp "
                           "--speculative-config.num_speculative_tokens 3 "
                           "-cc '{\"cudagraph_capture_sizes\": [1,2,4,8,16,32,64]}'")
    assert facts.facts["speculative_method"] == "mtp"
    assert facts.facts["num_speculative_tokens"] == 3
    assert facts.facts["max_num_seqs"] == 16
    # the config line's sizes; 0.33.0 picks its V2 model runner here (its own
    # use_v2_model_runner), whose graph set-up also reads the compiled model, the adaptive
    # verification and the microbatch runner it builds: each from the release's own function
    assert facts.facts["cudagraph_capture_sizes"] == [1, 2, 4, 8, 16, 32, 64]
    assert facts.facts["model_runner"] == "V2"
    assert facts.facts["cudagraph_stage"].startswith("V2 model runner: ")
    assert facts.facts["cudagraph_mode_resolved"] == "FULL_AND_PIECEWISE"
    # one piecewise graph per capture size; full graphs only for uniform decode batches of
    # 1 + 3 tokens a request: sizes rounded up to a multiple of 4, at most 16 requests (64)
    assert facts.facts["cudagraph_graphs_piecewise"] == 7
    assert facts.facts["cudagraph_graphs_full"] == len({-(-n // 4) * 4 for n in [1, 2, 4, 8, 16, 32, 64]
                                                       if -(-n // 4) * 4 <= 16 * 4}) == 5


def _decode_steps_by_hand(sizes: list[int], k: int, max_num_seqs: int) -> list[list]:
    """The field notes' rule, written out: with k speculative tokens a decode step of N
    requests is N x (k+1) tokens; the capture sizes are rounded up to multiples of k+1 (those
    past the largest typed size dropped); a step runs in the smallest graph that holds it, or
    eager past the largest."""
    q = k + 1
    rounded = sorted({-(-s // q) * q for s in sizes if -(-s // q) * q <= max(sizes)})
    rows = []
    for n in range(1, max_num_seqs + 1):
        fits = [size for size in rounded if size >= n * q]
        rows.append([n, fits[0] if fits else None])
    return rows


MTP3 = ("--max-num-seqs 32 --speculative-config '{\"method\": \"mtp\", "
        "\"num_speculative_tokens\": 3}' -cc '{\"cudagraph_capture_sizes\": [1,2,4,8,16,32,64]}'")


SIZES = "--compilation-config '{\"cudagraph_capture_sizes\": [1,2,4,8,16,32,64]}'"
MTP3 = "--speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 3}'"


@pytest.mark.parametrize(("release", "flags", "k", "seqs"), [
    ("0.10.2", f"--max-num-seqs 80 {SIZES}", 0, 80),
    ("0.26.0", f"--max-num-seqs 32 {MTP3} {SIZES}", 3, 32),
    ("0.33.0", f"--max-num-seqs 32 {MTP3} {SIZES}", 3, 32)])
def test_each_decode_step_is_the_runners_own_dispatch(
        release: str, flags: str, k: int, seqs: int,
        pip_snapshot: Callable[..., Snapshot]) -> None:
    """Issue 38, class 4: the headline question in engine mode. Qwen3-Next with capture sizes
    [1..64]: for every N running requests, the graph the model runner's own dispatcher
    picks pads the decode step to the size the rule gives, and past the largest the step
    runs eager (with MTP k=3: from N=17 on). 0.10.2: the old V1 runner (it pads, then asks
    its dispatcher with a descriptor); 0.26.0: the V1 runner's CudagraphDispatcher (the
    hybrid's runner); 0.33.0: the V2 runner's CudaGraphManager."""
    snap = pip_snapshot(f"vllm=={release}")
    cfg = _json(EXAMPLES / "qwen3-next-80b-a3b-instruct.json")
    facts = engine_config(snap, "vllm serve Qwen/Qwen3-Next " + flags, cfg).facts
    steps = facts["cudagraph_decode_steps"]
    assert facts["uniform_decode_query_len"] == k + 1
    assert [[n, padded] for n, _mode, padded in steps] == \
        _decode_steps_by_hand([1, 2, 4, 8, 16, 32, 64], k, seqs)
    assert all((mode == "NONE") == (padded is None) for _n, mode, padded in steps)


EAGLE3 = ("vllm serve meta-llama/Llama-3.1-8B-Instruct --speculative-config '{\"method\": "
          "\"eagle3\", \"model\": \"yuhuili/EAGLE3-LLaMA3.1-Instruct-8B\", "
          "\"num_speculative_tokens\": 3}'")


def test_a_vllm_draft_named_by_hub_id_takes_its_config(vllm_026: Snapshot) -> None:
    """Issue 38: a draft named by a hub id cannot be read offline. Without its config.json
    the answer names that missing input (not the release's repository error); with it
    (``draft_config``, an EAGLE3 head's config written here) the release builds its
    speculative config from it."""
    from recon.engine.config import EngineFailed

    llama = _json(REAL.parent / "real-h100" / "configs" / "llama8b.json")
    with pytest.raises(EngineFailed, match="draft model 'yuhuili/EAGLE3-LLaMA3.1-Instruct-8B' "
                                           "is not a folder here .* --draft-config"):
        engine_config(vllm_026, EAGLE3, llama)
    head = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
            "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
            "num_key_value_heads": 8, "num_hidden_layers": 1, "vocab_size": 128256,
            "draft_vocab_size": 32000, "max_position_embeddings": 2048,
            "rms_norm_eps": 1e-05, "torch_dtype": "bfloat16", "hidden_act": "silu"}
    answer = engine_config(vllm_026, EAGLE3, llama, draft_config=head)
    facts = answer.facts
    assert facts["speculative_method"] == "eagle3" and facts["num_speculative_tokens"] == 3
    assert answer.replaced["arguments"]["speculative_model"] == \
        "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"


def test_a_decode_step_table_reads_as_runs() -> None:
    """The recipe's table and finding from (N, mode, padded) rows (written here by hand)."""
    from recon.recipes.catalog.vllm_capture_sizes import first_eager, steps_table

    rows = [[1, "FULL", 4], [2, "FULL", 8], [3, "FULL", 16], [4, "FULL", 16],
            [5, "PIECEWISE", 24], [6, "NONE", None], [7, "NONE", None]]
    table = steps_table({"V2": rows}, 4, 3, 7)
    assert table.rows == [["1-4", "4-16", "FULL graph, padded to 4..16 tokens"],
                          ["5", "20", "PIECEWISE graph, padded to 24 tokens"],
                          ["6-7", "24-28", "eager (no graph)"]]
    said = first_eager("V2", rows, 4, 24, 7)
    assert said is not None and said.level == "warn"
    assert "with 6 or more running requests (24+ tokens per decode step)" in said.text
    every = first_eager("V1", rows[:2], 4, 8, 2)
    assert every is not None and every.level == "ok"


@pytest.mark.skipif(os.environ.get("RECON_ENGINE_ALL") != "1",
                    reason="vLLM 0.34.0 is one more release environment (RECON_ENGINE_ALL=1 runs it)")
def test_034_graphs_from_request_sizes(pip_snapshot: Callable[..., Snapshot]) -> None:
    """0.34.0's V2 runner builds its graph manager from the config's decode query lengths.

    Expected from the release's documented rule (``CompilationConfig``: given capture sizes are
    the prefill token counts and, rounded up to whole requests of ``1 + num_speculative_tokens``
    tokens, the decode request counts, up to ``max_num_seqs``): 7 piecewise graphs up to 64
    tokens, FULL decode graphs for 1, 2, 4, 8 and 16 requests of 4 tokens (64 at most).
    """
    facts = engine_config(pip_snapshot("vllm==0.34.0"),
                          "vllm serve Qwen/Qwen3-Next --max-num-seqs 16 "
                          "--speculative-config.method mtp "
                          "--speculative-config.num_speculative_tokens 3 "
                          "-cc '{\"cudagraph_capture_sizes\": [1,2,4,8,16,32,64]}'",
                          _json(EXAMPLES / "qwen3-next-80b-a3b-instruct.json"))
    assert facts.facts["model_runner"] == "V2"
    assert facts.facts["cudagraph_stage"].startswith("V2 model runner: ")
    assert facts.facts["cudagraph_graphs_piecewise"] == 7
    assert facts.facts["cudagraph_graphs_piecewise_max"] == 64
    requests = {-(-n // 4) for n in [1, 2, 4, 8, 16, 32, 64] if -(-n // 4) <= 16}
    assert facts.facts["cudagraph_graphs_full"] == len(requests) == 5
    assert facts.facts["cudagraph_graphs_full_max"] == max(requests) * 4 == 64


def test_033_graphs_without_torch_compile(qwen3_next_033: Callable[[str], EngineFacts]) -> None:
    """No compiled submodule in the model (compilation mode 0): the release's V2 runner has no
    piecewise capture, and its own resolution keeps the full decode graphs alone."""
    facts = qwen3_next_033("--max-num-seqs 64 -cc '{\"mode\": 0, \"cudagraph_mode\": "
                           "\"FULL_AND_PIECEWISE\"}'")
    assert facts.facts["cudagraph_mode_resolved"] == "FULL_DECODE_ONLY"
    assert "cudagraph_graphs_piecewise" not in facts.facts
    # decode graphs for the capture sizes up to max_num_seqs x 1 token
    sizes = facts.facts["cudagraph_capture_sizes_resolved"]
    assert facts.facts["cudagraph_graphs_full"] == len([n for n in sizes if n <= 64])


def test_033_prefix_caching_and_fp8(qwen3_next_033: Callable[[str], EngineFacts]) -> None:
    on, off = qwen3_next_033(""), qwen3_next_033("--no-enable-prefix-caching")
    assert on.facts["enable_prefix_caching"] is True and on.facts["mamba_cache_mode"] == "align"
    assert off.facts["enable_prefix_caching"] is False
    fp8 = qwen3_next_033("--no-enable-prefix-caching --kv-cache-dtype fp8")
    assert fp8.facts["kv_cache_dtype"] == "fp8"
    assert fp8.facts["attention_block_size"] != off.facts["attention_block_size"]
    assert on.replaced["compiled_modules"] and on.replaced["confinement"]["os_sandbox"] == "bwrap"


def test_compiled_modules_from_the_manifest(vllm_latest: Snapshot) -> None:
    names = compiled_modules(vllm_latest)
    assert "vllm.vllm_flash_attn._vllm_fa3_C" in names and "vllm._C_stable_libtorch" in names


# -- public start-up logs (tests/data/public-logs: numbers vLLM printed, commands as typed) ----

def _dev_case(case_id: str) -> dict:
    cases = _json(DATA / "public-logs" / "cases-dev.json")["cases"]
    return next(c for c in cases if c["id"] == case_id)


@pytest.fixture(scope="session")
def granite_019(pip_snapshot: Callable[..., Snapshot]) -> EngineFacts:
    """PA1 and KV1: one log of vLLM 0.19.0 (FA2: an sm8x board, declared as an A100)."""
    case = _dev_case("KV1")
    cfg = _json(DATA / "public-logs" / "configs" / case["config"])
    return engine_config(pip_snapshot("vllm==0.19.0"), case["flags"], cfg, gpu="a100-80",
                         kv_memory_gib=case["logged"]["available_kv_gib"])


def test_public_log_pa1_page_alignment_019(granite_019: EngineFacts) -> None:
    logged = _dev_case("PA1")["logged"]
    assert granite_019.logged["attention_block_size_logged"] == logged["block"]
    assert f"{granite_019.logged['mamba_padding_pct']:.2f}%" == logged["padding"]


def test_public_log_kv1_capacity_019(granite_019: EngineFacts) -> None:
    logged = _dev_case("KV1")["logged"]
    block = granite_019.logged["attention_block_size_logged"]
    # the log rounds the available memory to 0.01 GiB (here about a third of a block)
    assert abs(granite_019.logged["kv_cache_tokens_logged"] - logged["tokens"]) <= block
    assert granite_019.logged["max_concurrency_logged"] == pytest.approx(logged["concurrency"],
                                                                         rel=1e-2)
    assert granite_019.facts["max_model_len"] == logged["max_model_len"]


def test_a_command_line_the_shell_cannot_split_is_the_users_error() -> None:
    """An unclosed quote (a pasted line cut short) is one line naming --flags, not a traceback."""
    with pytest.raises(ReconError, match=r"--flags: the shell cannot split .*No closing quotation"):
        words("vllm serve m --speculative-config '{\"method\": \"mtp\"}")
    assert words("vllm serve m \\\n --x 'a b'") == ["vllm", "serve", "m", "--x", "a b"]


def test_a_vendored_packages_compiled_part_imports_its_names() -> None:
    """The release's own compiled modules are empty; the compiled part of a package it vendors
    answers any name, as ``from ._C import ...`` needs for the package's trial import."""
    import importlib.machinery

    finder = child.EmptyExtensions(["vllm._C", "vllm.third_party.deep_gemm._C"])
    own = finder.create_module(importlib.machinery.ModuleSpec("vllm._C", finder))
    vendored = finder.create_module(
        importlib.machinery.ModuleSpec("vllm.third_party.deep_gemm._C", finder))
    assert not hasattr(own, "init")  # the release's own: empty, as before
    vendored.init("/opt/include", "nvcc")  # a call works, and is recorded, not run
    assert vendored.get_num_sms is not None
    assert finder.hits == ["vllm._C", "vllm.third_party.deep_gemm._C"]


def test_a_board_is_read_from_how_people_write_it() -> None:
    """A device name as the driver prints it, or an alias, is that board; a spelling that
    needs reading (spaces, dashes, no vendor words) is read and the reading is said; two
    boards it could be, or none, are the user's to name."""
    assert board_for("NVIDIA GeForce RTX 4090") == ("rtx4090", "")
    assert board_for("NVIDIA H100 80GB HBM3") == ("h100", "")
    assert board_for("h100-sxm") == ("h100", "") and board_for("dgx-spark") == ("gb10", "")
    key, how = board_for("RTX 4090")
    assert key == "rtx4090" and how.startswith("GPU 'RTX 4090' read as rtx4090: NVIDIA GeForce")
    assert board_for("a6000")[0] == "rtx-a6000" and board_for("rtx_3090")[0] == "rtx3090"
    with pytest.raises(UnknownGPU, match="could be v100-16, v100-32"):
        board_for("v100")
    with pytest.raises(UnknownGPU, match="unknown GPU 'h300'"):
        board_for("h300")


@pytest.mark.parametrize(("spec", "capability", "gib"), [
    # compute capabilities from NVIDIA's CUDA GPU list and AMD's ROCm support matrix
    ("NVIDIA GeForce RTX 5060 Ti,memory=16GiB", (12, 0), 16.0),
    ("NVIDIA GeForce RTX 5070 Ti,memory=16303MiB", (12, 0), 16303 / 1024),
    ("NVIDIA GeForce RTX 4070 Laptop GPU,memory=8GiB,sms=36", (8, 9), 8.0),
    ("NVIDIA GeForce RTX 2080 Ti,memory=11GiB", (7, 5), 11.0),
    ("AMD Instinct MI355X,memory=288GB", (9, 5), 288e9 / 2**30),
    ("sm=8.6,memory=12GiB", (8, 6), 12.0),
    ("My Board,sm=sm120,memory=96GiB", (12, 0), 96.0),
])
def test_a_board_the_table_lacks_is_described(spec: str, capability: tuple[int, int],
                                              gib: float) -> None:
    """A board the table lacks (every month brings one): its name's family gives the compute
    capability (or sm= does), memory= its memory; what recon assumed (the SM count unless
    sms= is given) is said."""
    key, how = board_for(spec)
    board = gpu(key)
    assert (board.major, board.minor) == capability
    assert abs(board.memory_bytes / 2**30 - gib) < 0.01
    assert "not in recon's table" in how
    assert ("SMs as given" in how) == ("sms=" in spec)
    # the table stays the table: a described board is found by its key only
    assert key not in GPUS and gpu(key) is board
    if "," in spec and "=" not in spec.split(",")[0]:
        with pytest.raises(UnknownGPU):
            gpu(spec.split(",")[0])


@pytest.mark.parametrize(("spec", "names"), [
    ("NVIDIA GeForce RTX 5060 Ti", "its memory is not known here"),
    ("Some Board,memory=8GiB", "its compute capability is not known here"),
    ("NVIDIA GeForce RTX 5060 Ti,memory=lots", "is not a size"),
    ("NVIDIA GeForce RTX 5060 Ti,memory=16GiB,clock=2GHz", "'clock' is not a property"),
])
def test_a_board_that_cannot_be_described_names_what_is_missing(spec: str, names: str) -> None:
    with pytest.raises(UnknownGPU, match=names):
        board_for(spec)


def test_the_release_decides_on_a_described_board(vllm_026: Snapshot) -> None:
    """An RTX 5060 Ti (16 GiB, not in the table) described by name and memory: the release's
    own defaults follow its memory. vLLM 0.26.0 gives `vllm serve` 1,024 sequences and 8,192
    batched tokens on a board of 70 GiB or more and 256 / 2,048 below (its
    `EngineArgs._set_default_max_num_seqs_and_batched_tokens`, read by hand; the real H100
    log tests/data/logs/real-h100/D8_serve.log prints 8,192 there)."""
    cfg = _json(EXAMPLES / "llama-3.1-8b-instruct.json")
    answer = engine_config(vllm_026, "vllm serve m --max-model-len 4096", cfg,
                           gpu=board_for("NVIDIA GeForce RTX 5060 Ti,memory=16GiB")[0])
    small = answer.facts
    assert (small["max_num_seqs"], small["max_num_batched_tokens"]) == (256, 2048)
    assert (answer.as_json()["gpu"]["major"], answer.as_json()["gpu"]["minor"]) == (12, 0)
    large = engine_config(vllm_026, "vllm serve m --max-model-len 4096", cfg, gpu="h100").facts
    assert large["max_num_batched_tokens"] == 8192
