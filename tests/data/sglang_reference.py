"""The test's own reference for SGLang engine mode: the release's ServerArgs, built directly.

Run by tests/test_sglang_engine.py under a release environment's Python, without
recon's child or sandbox: it shares no code with ``recon/engine/sglang_child.py``.
The device is answered by plain monkeypatching (``torch.cuda`` and the release's
``nvidia-smi`` probes give the same board), the GPU-only packages are
``unittest.mock.MagicMock`` modules. Request on stdin (JSON): ``src`` (the
snapshot's source folder), ``gpu`` (name, major, minor, memory_bytes, count),
``cases`` (each: ``argv`` after ``--model-path``, ``config``, ``draft``: the
draft model's config, whose folder stands for ``@draft`` in ``argv``). Prints one JSON
list: per case, the release's resolved fields or its error.

The GPU-only packages are absent here; each of their modules answers any name
with a fresh class (importable, subclassable, usable in ``isinstance``, a
pass-through when used as a decorator), which is all the release does with
them while it builds ServerArgs.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
import tempfile
import types
from typing import Any

GPU_ONLY = {"sgl_kernel", "flashinfer", "flash_attn", "deep_gemm", "deep_ep", "flash_mla",
            "cutlass", "quack", "tilelang", "humming", "cuda", "torch_memory_saver", "nvshmem"}


class Anything(type):
    """A class whose attributes are classes; called with a function, it returns the function."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return Anything(name, (), {})

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return Anything(cls.__name__, (), {})


class AbsentModule(types.ModuleType):
    """A module of an absent GPU-only package: every name is an :class:`Anything` class."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return Anything(name, (), {})


class MockPackages(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Every module of a GPU-only package is an :class:`AbsentModule`."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname.partition(".")[0] in GPU_ONLY:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> Any:
        module = AbsentModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: Any) -> None:
        return None


def patch_torch(gpu: dict[str, Any]) -> None:
    """The same board as the declared GPU, through plain attribute patches."""
    import torch

    props = types.SimpleNamespace(name=gpu["name"], major=gpu["major"], minor=gpu["minor"],
                                  total_memory=gpu["memory_bytes"], is_integrated=False,
                                  uuid="GPU-reference")
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: gpu["count"]
    torch.cuda.get_device_capability = lambda device=None: (gpu["major"], gpu["minor"])
    torch.cuda.get_device_name = lambda device=None: gpu["name"]
    torch.cuda.get_device_properties = lambda device=None: props
    torch.cuda.mem_get_info = lambda device=None: (gpu["memory_bytes"], gpu["memory_bytes"])
    torch.cuda.current_device = lambda: 0
    try:  # its import-time check pairs it with torch's own CUDA, before the version is set
        import torchvision  # noqa: F401
    except Exception:  # noqa: BLE001, S110 - not in this environment, or fails as the release would see
        pass
    torch.version.cuda = "12.8"
    register = torch.library.register_fake

    def tolerant(name: Any, *args: Any, **kwargs: Any) -> Any:
        # ops of libraries that are not loaded here: torchvision's C ops (a CPU torch) and
        # the absent GPU-only packages' kernels
        if str(name).partition("::")[0] in {"torchvision", *GPU_ONLY}:
            return args[0] if args and callable(args[0]) else (lambda fn: fn)
        return register(name, *args, **kwargs)

    torch.library.register_fake = tolerant


def patch_release(gpu: dict[str, Any]) -> None:
    """The release's nvidia-smi probes answer the same board."""
    from sglang.srt.utils import common

    common.get_nvgpu_memory_capacity = lambda: float(gpu["memory_bytes"] >> 20)
    if hasattr(common, "get_device_sm_nvidia_smi"):
        common.get_device_sm_nvidia_smi = lambda: (gpu["major"], gpu["minor"])


def _folder(root: str, name: str, config: dict[str, Any]) -> str:
    path = os.path.join(root, name)
    os.makedirs(path)
    with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as fh:
        json.dump(config, fh)
    return path


def resolve(argv: list[str], config: dict[str, Any], draft: dict[str, Any] | None) -> dict[str, Any]:
    """prepare_server_args, then resolve_once where the release has it; the fields.

    ``@draft`` in ``argv`` is the folder holding the draft model's config.
    """
    from sglang.srt.server_args import prepare_server_args

    with tempfile.TemporaryDirectory() as root:
        model = _folder(root, "model", config)
        if draft is not None:
            argv = [_folder(root, "draft", draft) if a == "@draft" else a for a in argv]
        args = prepare_server_args(["--model-path", model, *argv])
        if hasattr(args, "resolve_once"):
            args.resolve_once()
        if hasattr(args, "resolved_dict"):
            return args.resolved_dict()
        return dict(vars(args))


def main() -> None:
    request = json.loads(sys.stdin.read())
    sys.path.insert(0, request["src"])
    sys.meta_path.append(MockPackages())
    patch_torch(request["gpu"])
    patch_release(request["gpu"])
    out = []
    for case in request["cases"]:
        environ = dict(os.environ)
        try:
            out.append({"ok": True, "fields": resolve(case["argv"], case["config"],
                                                     case.get("draft"))})
        except (Exception, SystemExit) as err:  # noqa: BLE001 - the case's answer is the error
            out.append({"ok": False, "error": f"{type(err).__name__}: {err}"})
        os.environ.clear()
        os.environ.update(environ)
    sys.stdout.write("\nRECON-REFERENCE " + json.dumps(out, default=str) + "\n")


if __name__ == "__main__":
    main()
