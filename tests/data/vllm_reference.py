"""The test's own reference for vLLM engine mode: ``EngineArgs`` to ``VllmConfig``, directly.

Run by tests/test_engine_grid.py under a release environment's Python, without
recon's child or sandbox; it shares no code with ``recon/engine/child.py`` and
takes the other documented route through the release:
``FlexibleArgumentParser`` + ``EngineArgs.add_cli_args`` (not the ``vllm serve``
subcommand), ``AsyncEngineArgs.from_cli_args`` and ``create_engine_config`` for
the OpenAI server's usage context.

What cannot run on this CPU machine is answered by plain patches: the release's
CUDA platform class gets the declared board's device queries set on it in place
(no subclass) and is made the current platform; ``torch.cuda`` answers the same
board; the snapshot's compiled extension modules are empty modules; the model
registry's inspection subprocess runs in this process; custom ops of those
absent libraries resolve to a function returning None.

Request on stdin (JSON): ``src``, ``compiled`` (dotted module names),
``metadata`` (the wheel's METADATA text), ``gpu`` (name, major, minor,
memory_bytes, count), ``cases`` (each: ``argv`` after the model, ``config``), ``out`` (a
file). Writes one JSON list to ``out`` (the release logs to stdout): per case the fields
below as the release set them, or its error.
Each case runs in a forked copy of the process, so no case sees another's state.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import json
import os
import sys
import tempfile
import traceback
import types
from typing import Any

FIELDS = {
    "cache_config": {"block_size": "attention_block_size", "mamba_block_size": "mamba_block_size",
                     "mamba_page_size_padded": "mamba_page_size_padded",
                     "enable_prefix_caching": "enable_prefix_caching",
                     "cache_dtype": "kv_cache_dtype",
                     "mamba_ssm_cache_dtype": "mamba_ssm_cache_dtype",
                     "mamba_cache_mode": "mamba_cache_mode"},
    "scheduler_config": {"max_num_seqs": "max_num_seqs",
                         "max_num_batched_tokens": "max_num_batched_tokens"},
    "model_config": {"max_model_len": "max_model_len"},
    "compilation_config": {"cudagraph_capture_sizes": "cudagraph_capture_sizes",
                           "max_cudagraph_capture_size": "max_cudagraph_capture_size",
                           "cudagraph_mode": "cudagraph_mode", "mode": "compilation_mode"},
    "parallel_config": {"tensor_parallel_size": "tensor_parallel_size"},
    "speculative_config": {"method": "speculative_method",
                           "num_speculative_tokens": "num_speculative_tokens"},
}


class EmptyCompiled(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """The listed compiled modules import as empty modules."""

    def __init__(self, names: list[str]) -> None:
        self.names = set(names)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname in self.names:
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec: Any) -> Any:
        return types.ModuleType(spec.name)

    def exec_module(self, module: Any) -> None:
        return None


def patch_torch(gpu: dict[str, Any]) -> None:
    """torch.cuda's device queries answer the board (its device count stays this machine's
    0, so Triton looks for no driver); ops of the absent libraries are no-op functions."""
    import torch
    import torch._ops

    props = types.SimpleNamespace(name=gpu["name"], major=gpu["major"], minor=gpu["minor"],
                                  total_memory=gpu["memory_bytes"], multi_processor_count=132)
    torch.cuda.get_device_capability = lambda device=None: (gpu["major"], gpu["minor"])
    torch.cuda.get_device_name = lambda device=None: gpu["name"]
    torch.cuda.get_device_properties = lambda device=None: props
    lookup = torch._ops._OpNamespace.__getattr__

    def op(namespace: Any, name: str) -> Any:
        try:
            return lookup(namespace, name)
        except AttributeError:
            if str(namespace.name).startswith("_") and not name.startswith("__"):
                return lambda *args, **kwargs: None
            raise

    torch._ops._OpNamespace.__getattr__ = op
    for name in ("register_fake", "impl_abstract"):
        original = getattr(torch.library, name, None)
        if original is None:
            continue

        def fake(qualname: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            if str(qualname).startswith("_"):
                try:
                    torch._C._dispatch_find_schema_or_throw(str(qualname), "")
                except Exception:  # noqa: BLE001 - the op's library is not loaded here
                    func = args[0] if args and callable(args[0]) else kwargs.get("func")
                    return func if func is not None else (lambda f: f)
            return _original(qualname, *args, **kwargs)

        setattr(torch.library, name, fake)


def patch_host(gpu: dict[str, Any]) -> None:
    """The host's memory is the declared server's (releases check --swap-space against it)."""
    import psutil

    measured = psutil.virtual_memory
    total = int(gpu["host_memory_bytes"])
    psutil.virtual_memory = lambda: measured()._replace(total=total, available=total, free=total)


def patch_platform(gpu: dict[str, Any]) -> None:
    """The release's own CUDA platform class, its device queries set in place, made current."""
    import vllm.platforms as platforms
    from vllm.platforms import cuda
    from vllm.platforms.interface import DeviceCapability

    cls = getattr(cuda, "CudaPlatform", None) or cuda.CudaPlatformBase
    board = {
        "get_device_capability": lambda c, device_id=0: DeviceCapability(gpu["major"], gpu["minor"]),
        "get_device_name": lambda c, device_id=0: gpu["name"],
        "get_device_total_memory": lambda c, device_id=0: gpu["memory_bytes"],
        "get_device_uuid": lambda c, device_id=0: f"GPU-ref-{device_id}",
        "device_count": lambda c: gpu["count"],
        "is_fully_connected": lambda c, ids: True,
    }
    for name, func in board.items():
        setattr(cls, name, classmethod(func))

    def has_capability(c: Any, wanted: Any, device_id: int = 0) -> bool:
        own = (gpu["major"], gpu["minor"])
        return own >= tuple(wanted) if isinstance(wanted, tuple) else \
            own[0] * 10 + own[1] >= wanted

    def is_capability(c: Any, wanted: Any, device_id: int = 0) -> bool:
        own = (gpu["major"], gpu["minor"])
        return own == tuple(wanted) if isinstance(wanted, tuple) else \
            own[0] * 10 + own[1] == wanted

    cls.has_device_capability = classmethod(has_capability)
    cls.is_device_capability = classmethod(is_capability)
    platforms._current_platform = cls()
    for module in ("vllm.utils.torch_utils", "vllm.utils"):
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        if hasattr(mod, "_cuda_device_count_stateless"):
            mod._cuda_device_count_stateless = lambda *a, **k: gpu["count"]
    from vllm.model_executor.models import registry

    registry._run_in_subprocess = lambda fn: fn()


def plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    name = getattr(value, "name", None)
    return name if isinstance(name, str) else str(value)


def decide(argv: list[str], config: dict[str, Any]) -> dict[str, Any]:
    """The release's VllmConfig for ``argv`` on a folder holding ``config``; the fields."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.usage.usage_lib import UsageContext

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser

    folder = tempfile.mkdtemp()
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as fh:
        json.dump(config, fh)
    parser = AsyncEngineArgs.add_cli_args(FlexibleArgumentParser())
    args = parser.parse_args(["--model", folder, *argv, "--load-format", "dummy",
                              "--skip-tokenizer-init"])
    vllm_config = AsyncEngineArgs.from_cli_args(args).create_engine_config(
        usage_context=UsageContext.OPENAI_API_SERVER)
    out: dict[str, Any] = {}
    for part, fields in FIELDS.items():
        obj = getattr(vllm_config, part, None)
        for attr, key in fields.items():
            if obj is not None and hasattr(obj, attr):
                out[key] = plain(getattr(obj, attr))
    return out


def in_fork(argv: list[str], config: dict[str, Any]) -> dict[str, Any]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            result = {"ok": True, "fields": decide(argv, config)}
        except BaseException as err:  # noqa: BLE001 - reported to the test
            result = {"ok": False, "error": f"{type(err).__name__}: {err}",
                      "traceback": traceback.format_exc()[-3000:]}
        with os.fdopen(write, "w", encoding="utf-8") as fh:
            json.dump(result, fh)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, encoding="utf-8") as fh:
        data = fh.read()
    os.waitpid(pid, 0)
    return json.loads(data) if data else {"ok": False, "error": "the case's process died"}


def main() -> None:
    request = json.loads(sys.stdin.read())
    # no device is visible on this machine: the release then keeps Triton on (lenient check)
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    sys.path.insert(0, request["src"])
    sys.meta_path.insert(0, EmptyCompiled(request["compiled"]))
    dist = tempfile.mkdtemp()
    info = os.path.join(dist, "vllm-0.dist-info")
    os.makedirs(info)
    with open(os.path.join(info, "METADATA"), "w", encoding="utf-8") as fh:
        fh.write(request["metadata"])
    sys.path.insert(1, dist)
    patch_torch(request["gpu"])
    patch_host(request["gpu"])
    patch_platform(request["gpu"])
    import vllm.engine.arg_utils  # noqa: F401 - imported once, before the cases fork

    results = [in_fork(case["argv"], case["config"]) for case in request["cases"]]
    with open(request["out"], "w", encoding="utf-8") as fh:
        json.dump(results, fh)


if __name__ == "__main__":
    main()
