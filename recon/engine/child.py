"""The sandboxed side of engine mode: import the release for real and let it decide.

This file runs inside the OS sandbox (``recon.slicing.sandbox``) as a script,
under the release's own environment (``recon.engine.env``), with the
snapshot's source folder first on ``sys.path``. It depends on the standard
library only (and on recon's standard-library-only ``../slicing/stubs.py``,
loaded by path), so it can be imported and unit-tested outside the sandbox too.

What it replaces, and nothing else (every replacement is reported):

* the compiled extension modules the snapshot lists but does not hold
  (``vllm._C`` ...): empty modules, through a meta-path finder;
* the GPU-only packages the release requires and the environment leaves out
  (``flashinfer``, ``humming``, ...): recording stand-in modules, as on a
  server where they are installed (their use is listed);
* the device: ``current_platform`` is a subclass of the release's own CUDA
  (or ROCm) platform class that answers name, capability, memory and count
  for the declared GPU; everything else of the platform is the release's;
* the distributed process groups, when the release must build the model's
  layers before it decides the block size: single-rank views of groups of the
  configured sizes (the layers read their sizes and rank, nothing else).

The command line goes through the release's own ``vllm serve`` parser, the
config through ``from_cli_args`` and ``create_engine_config``; numbers are
read from the objects the release built and from the log records it emitted.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import enum
import functools
import gc
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import io
import json
import logging
import os
import re
import resource
import runpy
import select
import shutil
import signal
import sys
import time
import traceback
import types
import typing
from collections.abc import Callable, Iterator
from typing import Any, cast

#: log templates whose first argument is a number the engine printed (key, template prefix)
LOGGED = (("attention_block_size_logged", "Setting attention block size to"),
          ("mamba_padding_pct", "Padding mamba page size by"),
          ("kv_block_size_logged", "Setting kv cache block size to"),
          ("kv_cache_tokens_logged", "GPU KV cache size:"))


#: where a release vendors a package whose Python imports names from its own compiled part
#: (``vllm/third_party/deep_gemm``: ``from ._C import ...``, then ``_C.init(...)``)
VENDORED = ("vllm.third_party.",)


class EmptyExtensions(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers imports of the listed compiled modules with empty modules, recording each.

    The compiled part of a package the release vendors is a recording stub module
    instead (every name works, its use is listed), so the vendored package imports
    as on a server: 0.25's sparse-attention indexer asks ``has_deep_gemm()``, a
    trial import of ``vllm.third_party.deep_gemm``, and refuses to build without it.
    """

    def __init__(self, names: list[str]) -> None:
        self.names = set(names)
        self.hits: list[str] = []

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in self.names:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=False)

    def create_module(self, spec: Any) -> Any:
        self.hits.append(spec.name)
        if spec.name.startswith(VENDORED):
            return _stubs().StubFactory().module(spec.name, {}, kind="vendored compiled")
        return types.ModuleType(spec.name, "recon engine mode: compiled extension replaced")

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def _stubs() -> types.ModuleType:
    """recon's recording stubs (``../slicing/stubs.py``, standard library only), loaded by path.

    Never through ``sys.path``: the snapshot's folder comes first there. The SGLang
    child loads the same file under the same name, so there is one recorder.
    """
    return _by_path("recon_engine_stubs", os.path.join("slicing", "stubs.py"))


def _memory() -> types.ModuleType:
    """The memory phase (``memory_child.py`` beside this file), loaded by path like the stubs."""
    return _by_path("recon_engine_memory", os.path.join("engine", "memory_child.py"))


def _compile() -> types.ModuleType:
    """The compile-cache phase (``compile_child.py`` beside this file), loaded by path."""
    return _by_path("recon_engine_compile", os.path.join("engine", "compile_child.py"))


def _by_path(name: str, relative: str) -> types.ModuleType:
    """A standard-library-only file of recon (``relative`` to ``recon/``), loaded once by path."""
    if name not in sys.modules:
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            relative)
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


class GpuPackages(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers imports of the GPU-only packages the release requires but the environment left out.

    On a server these packages are installed (they are in the release's
    ``Requires-Dist``): the release imports them at module level (0.22.0's
    compressed-tensors imports ``humming``; SGLang ``from sgl_kernel import ...``)
    and asks ``find_spec`` whether they are there (``has_flashinfer``), and what
    it decides follows (backends on Blackwell, the all-reduce fusion pass).
    Each module here is a recording stub module (``recon/slicing/stubs.py``):
    every attribute works and its use is counted, a truth test is recorded as an
    assumption; the finder sits last on ``sys.meta_path``, so an installed
    package of the same name always wins.
    """

    def __init__(self, names: list[str]) -> None:
        self.names = set(names)
        self.factory = _stubs().StubFactory()
        self.hits: list[str] = []

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname.partition(".")[0] not in self.names:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: Any) -> Any:
        self.hits.append(spec.name)
        return self.factory.module(spec.name, {}, kind="gpu-only")

    def exec_module(self, module: types.ModuleType) -> None:
        return None

    def touched(self) -> list[str]:
        """The stand-ins' attributes the release used (names only)."""
        return sorted({r["name"] for r in _stubs().RECORDER.touches.values()})

    def report(self) -> dict[str, Any]:
        """What ``replaced`` lists: the packages imported, the names used, the truth tests."""
        return {"gpu_packages": sorted({n.partition(".")[0] for n in self.hits}),
                "gpu_package_names_used": self.touched(),
                "gpu_package_assumptions": [a["what"] for a in
                                            _stubs().RECORDER.report()["assumptions"]]}


def _exception_tail(record: logging.LogRecord) -> str | None:
    """The end of the traceback a record carries (``logger.exception``), if any."""
    if not record.exc_info:
        return None
    return "".join(traceback.format_exception(*record.exc_info))[-1500:]


class LogRecords(logging.Handler):
    """Keeps the release's own log records (template, arguments, rendered line)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            args = record.args if isinstance(record.args, tuple) else ()
            self.records.append({"logger": record.name, "level": record.levelname,
                                 "template": str(record.msg), "args": [jsonable(a) for a in args],
                                 "message": record.getMessage()[:2000],
                                 "exception": _exception_tail(record)})

    def install(self) -> None:
        """See every record of the release's loggers, whatever handlers it configures later.

        vLLM (re)configures its ``vllm`` logger (``propagate`` off, handlers
        replaced), so a handler added to it can be dropped; wrapping
        ``Logger.handle`` keeps the records without touching its output.
        """
        original = logging.Logger.handle
        keep = self

        def handle(logger: logging.Logger, record: logging.LogRecord) -> None:
            if record.name == "vllm" or record.name.startswith("vllm."):
                keep.emit(record)
            original(logger, record)

        logging.Logger.handle = handle  # type: ignore[method-assign, assignment]

    def numbers(self, since: int = 0) -> dict[str, Any]:
        """The numbers of :data:`LOGGED` templates, last emission wins (as in the log)."""
        out: dict[str, Any] = {}
        for rec in self.records[since:]:
            for key, prefix in LOGGED:
                if rec["template"].startswith(prefix) and rec["args"]:
                    value = rec["args"][0]
                    out[key] = int(value.replace(",", "")) if isinstance(value, str) else value
            if rec["template"].startswith("Maximum concurrency for") and len(rec["args"]) > 1:
                out["max_concurrency_logged"] = rec["args"][1]
        return out


def jsonable(value: Any) -> Any:
    """A JSON-safe form: numbers stay numbers, enums their name, the rest ``str``."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value) if isinstance(value, (set, frozenset)) else value
        return [jsonable(v) for v in items]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    name = getattr(value, "name", None)
    if isinstance(name, str) and type(value).__module__ != "builtins":
        return name
    return str(value)


class Provenance:
    """The snapshot's functions that ran: the code objects seen starting, via ``sys.settrace``.

    A global trace function is called once per Python call (never for C calls,
    returns or lines: it returns None, so no frame is traced line by line). That
    measured cheaper than a ``sys.setprofile`` hook, which runs on every call,
    return and C call, and than ``cProfile``, which times every call and whose
    statistics take seconds to read back. What it saw accumulates over every
    ``active`` window and survives a fork (a warm server's imports count for
    each request forked from it).
    """

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/") + "/"
        self.codes: set[types.CodeType] = set()

    def _hook(self, frame: types.FrameType, event: str, arg: Any) -> None:
        self.codes.add(frame.f_code)

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        sys.settrace(self._hook)
        try:
            yield
        finally:
            sys.settrace(None)

    def seen(self) -> set[types.CodeType]:
        """Every code object called while active."""
        return self.codes

    def functions(self) -> list[dict[str, Any]]:
        out = []
        for code in self.seen():
            if not code.co_filename.startswith(self.root) or code.co_name == "<module>":
                continue
            lines = [ln for _, _, ln in code.co_lines() if ln is not None]
            out.append({"file": code.co_filename[len(self.root):],
                        "qualname": getattr(code, "co_qualname", code.co_name),
                        "first_line": code.co_firstlineno,
                        "last_line": max(lines, default=code.co_firstlineno)})
        return sorted(out, key=lambda f: (f["file"], f["first_line"]))


def _gpu_methods(gpu: dict[str, Any], capability: Callable[..., Any]) -> dict[str, Any]:
    """Device queries of the declared GPU, as classmethods for the platform subclass."""

    def get_device_capability(cls: Any, device_id: int = 0) -> Any:
        return capability(major=gpu["major"], minor=gpu["minor"])

    def has_device_capability(cls: Any, capability_: Any, device_id: int = 0) -> bool:
        if isinstance(capability_, tuple):
            return (gpu["major"], gpu["minor"]) >= tuple(capability_)
        return gpu["major"] * 10 + gpu["minor"] >= capability_

    def is_device_capability(cls: Any, capability_: Any, device_id: int = 0) -> bool:
        if isinstance(capability_, tuple):
            return (gpu["major"], gpu["minor"]) == tuple(capability_)
        return gpu["major"] * 10 + gpu["minor"] == capability_

    def get_device_name(cls: Any, device_id: int = 0) -> str:
        return str(gpu["name"])

    def get_device_total_memory(cls: Any, device_id: int = 0) -> int:
        if not gpu.get("memory_query", True):  # NVML answers "Not Supported" on this board
            raise RuntimeError(f"NVML: memory query not supported on {gpu['name']}")
        return int(gpu["memory_bytes"])

    def device_count(cls: Any) -> int:
        return int(gpu["count"])

    def get_device_uuid(cls: Any, device_id: int = 0) -> str:
        return f"GPU-recon-virtual-{device_id}"

    def is_fully_connected(cls: Any, physical_device_ids: Any) -> bool:
        return True

    def current_device(cls: Any) -> Any:
        import torch  # the layers are built on the meta device: no memory, no CUDA

        return torch.device("meta")

    funcs = (get_device_capability, has_device_capability, is_device_capability,
             get_device_name, get_device_total_memory, device_count, get_device_uuid,
             is_fully_connected, current_device)
    return {f.__name__: classmethod(f) for f in funcs}


class DeviceProperties:
    """What ``torch.cuda.get_device_properties`` answers for the declared GPU.

    Only what recon's GPU table states; any other property is an error naming
    it, so a release decision that needs more is visible instead of guessed.
    """

    def __init__(self, gpu: dict[str, Any]) -> None:
        self.name = str(gpu["name"])
        self.major, self.minor = int(gpu["major"]), int(gpu["minor"])
        self.total_memory = int(gpu["memory_bytes"])
        self.is_integrated = not gpu.get("memory_query", True)
        self.uuid = "GPU-recon-virtual"
        if gpu.get("sms"):  # kernels size their grids and workspaces by it
            self.multi_processor_count = int(gpu["sms"])
        if gpu.get("arch"):  # ROCm boards: the architecture torch reports (gfx942 ...)
            self.gcnArchName = str(gpu["arch"])

    def __getattr__(self, item: str) -> Any:
        raise AttributeError(f"recon engine mode: the declared GPU's {item!r} is not known "
                             "(recon/engine/gpus.py)")


def torch_cuda_queries(gpu: dict[str, Any]) -> list[str]:
    """``torch.cuda``'s device queries answer for the declared GPU (the names replaced).

    Some releases ask torch directly, not the platform (0.13.0's FlashAttention
    version check calls ``torch.cuda.get_device_capability`` while the layers are
    built; 0.10.2's Qwen3-Next allocates on ``torch.cuda.current_device()``). Availability and the device count stay this machine's (no CUDA, 0),
    so nothing looks for a driver; the platform answers those for the release.
    """
    import torch  # the installed CPU torch

    props = DeviceProperties(gpu)
    answers = {"get_device_capability": lambda device=None: (props.major, props.minor),
               "get_device_name": lambda device=None: props.name,
               "get_device_properties": lambda device=None: props,
               # the device index a layer allocates on (0.10.2's Qwen3-Next passes it as
               # ``device=``): rank 0's; what is made there is made on meta (build_layers)
               "current_device": lambda: 0}
    for name, fn in answers.items():
        setattr(torch.cuda, name, fn)
    return [f"torch.cuda.{name}" for name in answers]


def triton_driver(gpu: dict[str, Any]) -> list[str]:
    """Triton's driver check answers as on the declared GPU's server: its backend is active.

    Releases decide whether Triton is usable by asking each installed Triton
    backend's driver ``is_active()`` (exactly one must be), and replace Triton
    with a placeholder otherwise; kernels then fail at import (0.10.2's Qwen3-Next
    reads ``triton.language.exp``). On the server the GPU's backend is the active
    one: NVIDIA's, or AMD's for a ROCm board. The names answered are returned.
    """
    try:
        backends = importlib.import_module("triton.backends").backends
    except Exception:  # noqa: BLE001 - no usable Triton here: the release decides without it
        return []
    want = "amd" if gpu.get("platform") == "rocm" else "nvidia"
    done = []
    for name, backend in backends.items():
        driver = getattr(backend, "driver", None)
        if driver is not None:
            active = name == want
            driver.is_active = staticmethod(lambda active=active: active)
            done.append(f"triton.backends.{name} driver active: {active}")
    with contextlib.suppress(ImportError, AttributeError):
        importlib.import_module("triton.runtime").driver.set_active(VirtualTritonDriver(gpu))
        done.append("triton.runtime.driver.active (the declared GPU's target)")
    return done


class VirtualTritonDriver:
    """Triton's active driver as the declared GPU's server would have it: its target only.

    The real driver loads the CUDA driver library when it is made; what a
    release asks of it while deciding (the target's backend and architecture)
    comes from the table. Anything else is an error naming it.
    """

    def __init__(self, gpu: dict[str, Any]) -> None:
        self.gpu = gpu

    def get_current_target(self) -> Any:
        target = importlib.import_module("triton.backends.compiler").GPUTarget
        if self.gpu.get("platform") == "rocm":
            raise RuntimeError("recon engine mode: the ROCm board's Triton target (gfx name) "
                               "is not in recon/engine/gpus.py")
        return target("cuda", int(self.gpu["major"]) * 10 + int(self.gpu["minor"]), 32)

    def get_current_device(self) -> int:
        return 0

    def is_active(self) -> bool:
        return True

    def __getattr__(self, item: str) -> Any:
        raise AttributeError(f"recon engine mode: the virtual Triton driver has no {item!r}")


def virtual_platform(gpu: dict[str, Any]) -> Any:
    """An instance of a subclass of the release's own platform class for ``gpu``."""
    interface = importlib.import_module("vllm.platforms.interface")
    if gpu.get("platform") == "rocm":
        base = importlib.import_module("vllm.platforms.rocm").RocmPlatform
    else:
        cuda = importlib.import_module("vllm.platforms.cuda")
        base = getattr(cuda, "CudaPlatform", None) or cuda.CudaPlatformBase
    methods = _gpu_methods(gpu, interface.DeviceCapability)
    cls = type(f"ReconVirtual{base.__name__}", (base,), methods)
    platforms = importlib.import_module("vllm.platforms")
    instance = cls()
    platforms._current_platform = instance  # type: ignore[attr-defined]
    instance.recon_counted = replace_device_count(int(gpu["count"]))  # type: ignore[attr-defined]
    return instance


def replace_device_count(count: int) -> list[str]:
    """The release's own stateless CUDA device count (config checks call it, not the platform).

    ``cuda_device_count_stateless`` asks NVML through a cached helper,
    ``_cuda_device_count_stateless``; that helper answers the declared count.
    """
    done = []
    for name in ("vllm.utils.torch_utils", "vllm.utils"):
        with contextlib.suppress(ImportError):
            mod = importlib.import_module(name)
            if callable(getattr(mod, "_cuda_device_count_stateless", None)):
                mod._cuda_device_count_stateless = lambda *a, **k: count  # type: ignore[attr-defined]
                done.append(f"{name}._cuda_device_count_stateless")
    return done


def _find(modules: tuple[str, ...], attr: str) -> Any:
    """The first of ``modules`` that defines ``attr`` (releases move things)."""
    for name in modules:
        with contextlib.suppress(ImportError):
            mod = importlib.import_module(name)
            if hasattr(mod, attr):
                return getattr(mod, attr)
    raise LookupError(f"{attr} not found in {', '.join(modules)}")


class UsageError(Exception):
    """The release's parser refused the command line (argparse exit status and message)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def parse_serve(argv: list[str], backend: str | None = None, entry: str = "serve") -> Any:
    """The command's arguments through the release's own parser of its entry point; the namespace.

    ``entry``: ``serve`` (``vllm serve ARGV``: the serve subcommand's parser) or a
    module the user ran with ``python -m`` (its own ``__main__`` builds its parser;
    see :func:`parse_module`). ``backend``: an attention backend forced outside the
    command line, given as the parser's own ``--attention-backend`` where it has
    one, else through ``VLLM_ATTENTION_BACKEND`` (how older releases take it).
    """
    parser_cls = _find(("vllm.utils.argparse_utils", "vllm.utils"), "FlexibleArgumentParser")
    if entry != "serve":
        return parse_module(parser_cls, entry, argv, backend)
    serve = importlib.import_module("vllm.entrypoints.cli.serve").ServeSubcommand()
    top = parser_cls(prog="vllm")
    subparsers = top.add_subparsers(required=False, dest="subparser")
    sub = serve.subparser_init(subparsers)
    argv = with_backend(sub, argv, backend)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = top.parse_args(["serve", *argv])
    except SystemExit as exc:
        raise UsageError(int(exc.code or 0) if not isinstance(exc.code, str) else 2,
                         err.getvalue().strip()) from None
    if getattr(args, "model_tag", None) is not None:
        args.model = args.model_tag
    return args


def with_backend(parser: Any, argv: list[str], backend: str | None) -> list[str]:
    """``argv`` with a backend forced outside the command line, the way this release takes it."""
    if not backend:
        return argv
    if "--attention-backend" in getattr(parser, "_option_string_actions", {}):
        if not any(a.split("=", 1)[0] == "--attention-backend" for a in argv):
            return [*argv, "--attention-backend", backend]
        return argv
    os.environ["VLLM_ATTENTION_BACKEND"] = backend
    return argv


class Parsed(Exception):
    """Raised by the release's parser once it has parsed: its entry point goes no further."""

    def __init__(self, args: Any) -> None:
        super().__init__("parsed")
        self.namespace = args


def parse_module(parser_cls: Any, module: str, argv: list[str], backend: str | None) -> Any:
    """``python -m MODULE ARGV``: the module's own ``__main__`` builds its parser and parses.

    The module runs as ``__main__`` (what ``python -m`` does) with ``sys.argv`` set;
    its first parse through the release's ``FlexibleArgumentParser`` returns the
    namespace here and stops the entry point before it starts a server.
    """
    original = parser_cls.parse_args

    def parse_args(self: Any, args: Any = None, namespace: Any = None) -> Any:
        given = list(sys.argv[1:] if args is None else args)
        raise Parsed(original(self, with_backend(self, given, backend), namespace))

    saved = sys.argv
    sys.argv = [module, *argv]
    parser_cls.parse_args = parse_args
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            runpy.run_module(module, run_name="__main__")
    except Parsed as done:
        return done.namespace
    except SystemExit as exc:
        raise UsageError(int(exc.code or 0) if not isinstance(exc.code, str) else 2,
                         err.getvalue().strip()) from None
    finally:
        parser_cls.parse_args = original
        sys.argv = saved
    raise RuntimeError(f"python -m {module} did not parse a command line in this release")


def trim_logged_configs(argv: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """Config objects a log's argument line printed whole, cut to what differs from defaults.

    vLLM's ``non-default args`` line prints a config flag (``compilation_config``) as
    the whole object the release built from it: every field, its init=False fields,
    enums as reprs. Given back as is, the release's own parser refuses it. Each such
    JSON value keeps only the fields the release's config class takes in ``__init__``
    and whose value differs from that class's own default instance; which ones were
    kept is returned per flag and reported.
    """
    hints = _engine_arg_types()
    out: list[str] = []
    kept: dict[str, list[str]] = {}
    i = 0
    while i < len(argv):
        tok = argv[i]
        out.append(tok)
        i += 1
        if not (tok.startswith("--") and i < len(argv) and argv[i].lstrip().startswith("{")):
            continue
        name = tok[2:].replace("-", "_")
        cls = _config_class(hints.get(name))
        try:
            value = json.loads(argv[i])
        except ValueError:
            continue
        if cls is None or not isinstance(value, dict):
            continue
        value = _not_default(value, cls)
        kept[name] = sorted(value)
        out.append(json.dumps(value))
        i += 1
    return out, kept


def _engine_arg_types() -> dict[str, Any]:
    arg_utils = importlib.import_module("vllm.engine.arg_utils")
    try:
        return typing.get_type_hints(arg_utils.EngineArgs)
    except Exception:  # noqa: BLE001 - a release whose hints do not resolve: raw annotations
        return dict(getattr(arg_utils.EngineArgs, "__annotations__", {}))


def _config_class(hint: Any) -> type | None:
    """The dataclass a ``*_config`` field of ``EngineArgs`` holds (inside a Union too)."""
    for tp in (hint, *typing.get_args(hint)):
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            return tp
    return None


def _not_default(value: dict[str, Any], cls: type) -> dict[str, Any]:
    default = cls()
    init = {f.name for f in dataclasses.fields(cls) if f.init}
    return {k: v for k, v in value.items()
            if k in init and as_logged(getattr(default, k, dataclasses.MISSING)) != v}


def as_logged(value: Any) -> Any:
    """A default value in the form a log's argument line shows it (after recon reads it).

    Enums read back as ``Class.NAME`` (their repr's head), config objects as the
    dict of their fields, tuples as lists.
    """
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: as_logged(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [as_logged(v) for v in value]
    if isinstance(value, dict):
        return {k: as_logged(v) for k, v in value.items()}
    return value


def build_config(args: Any, model_dir: str, usage: str) -> tuple[Any, dict[str, Any]]:
    """The release's ``VllmConfig`` for the parsed command, on the scratch model folder."""
    arg_utils = importlib.import_module("vllm.engine.arg_utils")
    usage_lib = importlib.import_module("vllm.usage.usage_lib")
    given = {"model": getattr(args, "model", None), "tokenizer": getattr(args, "tokenizer", None),
             "load_format": getattr(args, "load_format", None)}
    args.model = model_dir
    given.update(draft_model(args, os.path.join(os.path.dirname(model_dir), "draft"),
                             given["model"], model_dir))
    args.tokenizer = None
    args.skip_tokenizer_init = True
    args.load_format = "dummy"
    if usage == "llm":
        engine_args, context = arg_utils.EngineArgs.from_cli_args(args), "LLM_CLASS"
    else:  # the API server, or (Async)LLMEngine.from_engine_args' default context
        engine_args = arg_utils.AsyncEngineArgs.from_cli_args(args)
        context = "ENGINE_CONTEXT" if usage == "engine" else "OPENAI_API_SERVER"
    config = engine_args.create_engine_config(usage_context=getattr(usage_lib.UsageContext,
                                                                    context))
    return config, {"usage_context": context, "replaced_args": given}


def draft_model(args: Any, draft: str, target: Any, model_dir: str) -> dict[str, Any]:
    """The speculative config's draft ``model`` made the scratch folder holding the
    ``--draft-config`` given (returned: the name typed), or the model's own folder where it
    names the target model; a draft named by a hub id or a folder this machine lacks,
    without one, is the user's missing input, said as such."""
    spec = getattr(args, "speculative_config", None)
    if not isinstance(spec, dict):
        return {}
    name = spec.get("model")
    if not isinstance(name, str) or not name:
        return {}
    if name == target:
        args.speculative_config = {**spec, "model": model_dir}
        return {"speculative_model": name}
    if os.path.isdir(draft):
        args.speculative_config = {**spec, "model": draft}
        return {"speculative_model": name}
    if not os.path.isdir(name):
        raise DraftMissing(f"the speculative config's draft model {name!r} is not a folder "
                           "here and recon downloads nothing: give the draft model's "
                           "config.json with --draft-config (recipes: --set draft_config=PATH)")
    return {}


class DraftMissing(RuntimeError):
    """A draft model named on the command line whose config.json recon was not given."""


class GroupHandle:
    """What ``torch.distributed`` group handles answer here: their size and our rank."""

    def __init__(self, world_size: int) -> None:
        self._size = world_size

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return 0


class SingleRankGroup:
    """Rank 0's view of a process group of ``world_size`` ranks (no communication).

    Model layers read a group's size and this rank's position while they are
    built (heads per rank, experts per rank); a collective is never needed for
    that, so any other attribute is an explicit error naming it.
    """

    def __init__(self, name: str, world_size: int) -> None:
        self.unique_name = name
        self.world_size = world_size
        self.rank_in_group = 0
        self.rank = 0
        self.local_rank = 0
        self.ranks = list(range(world_size))
        self.is_first_rank = True
        self.is_last_rank = world_size == 1
        self.use_custom_op_call = False
        self.device_group = GroupHandle(world_size)
        self.cpu_group = GroupHandle(world_size)
        self.device_communicator = None

    def all_reduce(self, tensor: Any) -> Any:
        """The memory phase's forward: the sum's shape (a new tensor past one rank, as the
        release's out-of-place all-reduce returns)."""
        return tensor if self.world_size == 1 else tensor.new_empty(tensor.shape)

    def all_gather(self, tensor: Any, dim: int = -1) -> Any:
        if self.world_size == 1:
            return tensor
        shape = list(tensor.shape)
        shape[dim] *= self.world_size
        return tensor.new_empty(shape)

    def reduce_scatter(self, tensor: Any, dim: int = -1) -> Any:
        if self.world_size == 1:
            return tensor
        shape = list(tensor.shape)
        shape[dim] //= self.world_size
        return tensor.new_empty(shape)

    def __getattr__(self, item: str) -> Any:
        raise RuntimeError(f"recon engine mode: process group {self.unique_name!r} "
                           f"has no {item!r} (no communication in engine mode)")


def group_sizes(parallel: Any) -> dict[str, int]:
    """Group name (``parallel_state`` global) -> size, from the release's ParallelConfig."""
    def size(attr: str) -> int:
        return int(getattr(parallel, attr, 1) or 1)

    tp, pp, dp = size("tensor_parallel_size"), size("pipeline_parallel_size"), \
        size("data_parallel_size")
    ep = tp * dp * size("prefill_context_parallel_size")
    return {"_WORLD": tp * pp, "_TP": tp, "_PP": pp, "_DP": dp,
            "_DCP": size("decode_context_parallel_size"),
            "_PCP": size("prefill_context_parallel_size"),
            "_EP": ep if getattr(parallel, "enable_expert_parallel", False) else ep,
            "_EPLB": ep, "_ETP": 1, "_INNER_DP_WORLD": tp * pp}


def install_groups(parallel: Any) -> list[str]:
    """Set the release's unset group globals to single-rank views; the names set."""
    state = importlib.import_module("vllm.distributed.parallel_state")
    sizes = group_sizes(parallel)
    done = []
    for name, value in vars(state).copy().items():
        if name.startswith("_") and name.isupper() and value is None and name in sizes:
            setattr(state, name, SingleRankGroup(name.strip("_").lower(), sizes[name]))
            done.append(name)
    return done


class NoStream:
    """A CUDA stream or event the layers keep for later kernels: nothing runs here."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args

    def __getattr__(self, item: str) -> Any:
        return lambda *a, **k: None


def replace_cuda_objects(torch: Any) -> list[str]:
    """``torch.cuda.Stream``/``Event``/``current_stream`` of a CPU torch raise; layers make them."""
    done = []
    for name in ("Stream", "Event", "ExternalStream"):
        setattr(torch.cuda, name, NoStream)
        done.append(f"torch.cuda.{name}")
    for name in ("current_stream", "default_stream"):
        setattr(torch.cuda, name, lambda *a, **k: NoStream())
        done.append(f"torch.cuda.{name}")
    return done


def _is_gpu(device: Any) -> bool:
    """Whether a ``device=`` argument names a GPU (``"cuda"``, ``"cuda:1"``, a device, an index)."""
    if isinstance(device, int) and not isinstance(device, bool):
        return True
    return str(getattr(device, "type", device)).split(":")[0] == "cuda"


#: the most elements a bookkeeping tensor made on the default device may have to be made
#: on the CPU instead of meta (an expert map has one per expert); weights never qualify
SMALL_INTEGER_TENSOR = 1 << 16


def gpu_tensors_on_meta(torch: Any, placed: list[str]) -> Any:
    """A torch function mode that makes the tensors the release puts on the GPU on meta.

    Layers and the backends they import allocate on the GPU by name
    (``torch.zeros(..., device="cuda")``: FlashInfer MLA's workspace at import in
    0.19.0), which a CPU torch refuses. Under this mode such a call makes a meta
    tensor (shape and dtype, no memory), and ``.cuda()``/``.to("cuda")`` move to
    meta. Small integer tensors made on the default device (the loader's GPU, meta
    here) are made on the CPU instead: they are bookkeeping whose values the release
    reads while it builds the model (0.10's ``FusedMoE`` logs its expert map with
    ``torch.where`` and ``.item()``), and a meta tensor has no values. What this
    mode redirected is said once each in ``placed``.
    """
    from torch.overrides import TorchFunctionMode

    factories = {f.__name__ for f in importlib.import_module("torch.utils._device")
                 ._device_constructors()}

    def said(text: str) -> None:
        if text not in placed:
            placed.append(text)

    def small_integer(made: Any) -> bool:
        return (isinstance(made, torch.Tensor) and made.device.type == "meta"
                and not made.is_floating_point() and not made.is_complex()
                and made.numel() <= SMALL_INTEGER_TENSOR)

    class GpuToMeta(TorchFunctionMode):  # type: ignore[misc]
        def __torch_function__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            kwargs = dict(kwargs or {})
            name = getattr(func, "__name__", str(func))
            if kwargs.get("pin_memory"):  # page-locking needs the driver; meta has no pages
                kwargs["pin_memory"] = False
                said("pin_memory ignored (meta has no pages)")
            if name == "pin_memory" and args:
                return args[0]
            if "device" in kwargs and _is_gpu(kwargs["device"]):
                kwargs["device"] = "meta"
            elif name == "cuda" and args:
                func, args, kwargs = torch.Tensor.to, (args[0], "meta"), {}
            elif name == "to" and len(args) > 1 and _is_gpu(args[1]):
                args = (args[0], "meta", *args[2:])
            elif name in factories and isinstance(kwargs.get("out"), torch.Tensor):
                # a tensor written in place: made where it lives (a small one is on the CPU)
                return func(*args, **{**kwargs, "device": kwargs["out"].device})
            elif name in factories and "device" not in kwargs:
                made = func(*args, **kwargs)
                if not small_integer(made):
                    return made
                said(f"torch.{name}: small integer tensors on the CPU, not meta")
                return func(*args, **{**kwargs, "device": "cpu"})
            else:
                return func(*args, **kwargs)
            said(f"torch.{name} on the GPU -> meta")
            return func(*args, **kwargs)

    return GpuToMeta()


#: the model :func:`build_layers` built last (the V2 runner's graph inputs read it)
BUILT: dict[str, Any] = {}


def build_layers(config: Any) -> dict[str, Any]:
    """The model's layers on the meta device (no memory), as the worker's model loader does.

    The loader's own steps: ``set_default_torch_dtype(model_config.dtype)``,
    the target device (meta here, instead of the GPU) and ``initialize_model``.
    Attention layers register themselves in the config's static forward
    context; that is what the release reads to pick backends and block sizes.
    """
    import torch  # the installed CPU torch

    loader_utils = "vllm.model_executor.model_loader.utils"
    initialize = _find((loader_utils, "vllm.model_executor.model_loader"), "initialize_model")
    default_dtype = _find(("vllm.utils.torch_utils", loader_utils), "set_default_torch_dtype")
    groups = install_groups(config.parallel_config)
    cuda_objects = replace_cuda_objects(torch)
    model_config = config.model_config
    placed: list[str] = []
    with default_dtype(model_config.dtype), torch.device("meta"), \
            gpu_tensors_on_meta(torch, placed):
        model = initialize(vllm_config=config, model_config=model_config, prefix="")
        BUILT["draft"] = None
        draft = build_draft_layers(config, initialize)
    BUILT["model"] = model
    layers = config.compilation_config.static_forward_context
    return {"architecture": type(model).__name__, "groups": groups, "layers": len(layers),
            "cuda_objects": cuda_objects + placed,
            "draft": draft}


def build_draft_layers(config: Any, initialize: Callable[..., Any]) -> dict[str, Any] | None:
    """The draft model of MTP/EAGLE speculative decoding, built as its proposer loads it.

    The proposer's ``load_model`` builds the draft from the speculative config's
    own ``draft_model_config`` into the same forward context, so its attention
    layers join the KV cache pool (the engine's "Add N padding layers" line).
    Draft-model methods (``draft_model``) and n-gram have no such layers.
    """
    spec = getattr(config, "speculative_config", None)
    draft_config = getattr(spec, "draft_model_config", None)
    uses = getattr(spec, "use_eagle", None)
    if spec is None or draft_config is None or not callable(uses) or not uses():
        return None
    before = len(config.compilation_config.static_forward_context)
    tag = contextlib.nullcontext()
    with contextlib.suppress(ImportError, AttributeError):
        tag = importlib.import_module("vllm.compilation.backends").set_model_tag("eagle_head")
    with tag:
        draft = initialize(vllm_config=config, model_config=draft_config, prefix="")
    BUILT["draft"] = draft
    return {"architecture": type(draft).__name__,
            "layers": len(config.compilation_config.static_forward_context) - before}


class RunnerView:
    """The model runner as its ``get_kv_cache_spec`` sees it: the config and two registries.

    The release's own method is called unbound on this view (the GPU model
    runner itself allocates device buffers in ``__init__``); an attribute the
    method needs and this view lacks is an error naming it.
    """

    def __init__(self, config: Any, runner: Any = None) -> None:
        self.vllm_config = config
        self.shared_kv_cache_layers: dict[str, str] = {}
        self.runner_only_attn_layers: set[str] = set()
        self.__dict__["_runner_cls"] = runner

    def __getattr__(self, item: str) -> Any:
        config = self.__dict__["vllm_config"]
        if item.endswith("_config") and hasattr(config, item):
            return getattr(config, item)
        state = runner_state(config, self.__dict__.get("_runner_cls") or v1_runner())
        if item in state.attributes:
            return state.attributes[item]
        stopped = f" (the release's model runner __init__ stopped first: {state.stopped})" \
            if state.stopped else ""
        raise AttributeError(f"recon engine mode: the model runner view has no {item!r}{stopped}")


@dataclasses.dataclass
class RunnerState:
    """What the release's own model runner ``__init__`` set, as far as it got on meta."""

    config: Any
    attributes: dict[str, Any]
    stopped: str | None


#: the state of the last request's runner (one config at a time; a new config replaces it)
BUILT_RUNNER: list[RunnerState] = []


def runner_state(config: Any, runner: Any) -> RunnerState:
    """The attributes the release's model runner sets in ``__init__``, for the view's lookups.

    The view answers what it was given; any other attribute a method of the
    release reads (``attention_chunk_size``, ``kv_cache_dtype``, ...) is the one
    the runner's own ``__init__`` computes. That ``__init__`` runs once per config
    on a bare instance, on the meta device with GPU tensors made on meta; where it
    raises (a buffer it cannot make here), the attributes it set before stay, and
    a lookup of a later one names where it stopped.
    """
    if BUILT_RUNNER and BUILT_RUNNER[0].config is config:
        return BUILT_RUNNER[0]
    import torch  # the installed CPU torch

    bare = runner.__new__(runner) if runner is not None else None
    stopped = None if bare is not None else "the release has no model runner class here"
    if bare is not None:
        placed: list[str] = []
        try:
            mem = _memory()
            with torch.device("meta"), gpu_tensors_on_meta(torch, placed), \
                    mem.replaced(mem.uva_views(torch), placed, "GPU views of host memory: meta"):
                runner.__init__(bare, config, torch.device("cuda", 0))
        except Exception as err:  # noqa: BLE001 - what it set before stays usable
            stopped = f"{type(err).__name__}: {str(err)[:200]}"
    state = RunnerState(config, dict(vars(bare)) if bare is not None else {}, stopped)
    BUILT_RUNNER[:] = [state]
    return state


def resolve_layout(config: Any, spec: dict[str, Any]) -> Callable[[Any], str] | None:
    """Where the release resolves one KV cache layout in the engine core, do the same.

    The core's ``resolve_kv_cache_layout`` over the worker's
    ``get_supported_kv_cache_layouts`` (called on the runner view: it reads only the
    config), now; what it returns publishes the layout to the worker
    (``set_kv_cache_layout``) once the core has grouped the specs (``groups``, on
    releases whose planning takes them: the config's interleave adjustment runs
    first, as the core runs it). Releases without these skip both steps (None).
    """
    try:
        utils = importlib.import_module("vllm.v1.attention.backends.utils")
        worker = importlib.import_module("vllm.v1.worker.worker_base").WorkerBase
        resolve = utils.resolve_kv_cache_layout
        supported, assign = worker.get_supported_kv_cache_layouts, worker.set_kv_cache_layout
    except (ImportError, AttributeError):
        return None
    view = RunnerView(config)
    layout = resolve(config, [supported(view)], list(spec.values()))

    def publish(groups: Any) -> str:
        adjust = getattr(config, "adjust_dcp_kv_cache_interleave_size", None)
        if groups is not None and adjust is not None:
            adjust(groups)
        assign(view, **layout_arguments(assign, layout.name, config))
        return str(layout.name)

    return publish


def layout_arguments(assign: Any, layout: str, config: Any) -> dict[str, Any]:
    """What the engine core passes to the worker's ``set_kv_cache_layout``, by the names the
    release's own signature has (the layout alone, or with the CP interleave size)."""
    known = {"kv_cache_layout": layout, "layout_name": layout,
             "cp_kv_cache_interleave_size": getattr(config.parallel_config,
                                                    "cp_kv_cache_interleave_size", None)}
    names = [p.name for p in inspect.signature(assign).parameters.values()][1:]
    unknown = [n for n in names if known.get(n) is None]
    if unknown:
        raise RuntimeError(f"this release's WorkerBase.set_kv_cache_layout takes {unknown}: "
                           "recon does not know what its engine core passes there")
    return {n: known[n] for n in names}


def v1_runner() -> Any:
    """The V1 GPU model runner class, or None in releases that removed it (0.34: V2 only)."""
    try:
        return importlib.import_module("vllm.v1.worker.gpu_model_runner").GPUModelRunner
    except ModuleNotFoundError as err:
        if err.name != "vllm.v1.worker.gpu_model_runner":
            raise
        return None


def kv_cache_spec(config: Any) -> dict[str, Any]:
    """The worker's KV cache spec per layer, from the model runner the release has.

    The V1 runner's ``get_kv_cache_spec`` runs unbound on a view; where the release
    has only the V2 runner, its ``get_kv_cache_spec`` does, on a view without a
    draft model speculator (the one case it adjusts: a draft at DCP 1 under a DCP
    target; such a command is refused here, not answered).
    """
    runner = v1_runner()
    if runner is not None:
        return cast(dict[str, Any], runner.get_kv_cache_spec(RunnerView(config)))
    v2 = importlib.import_module("vllm.v1.worker.gpu.model_runner").GPUModelRunner
    dcp = int(getattr(config.parallel_config, "decode_context_parallel_size", 1) or 1)
    spec = getattr(config, "speculative_config", None)
    if dcp > 1 and getattr(spec, "method", None) == "draft_model":
        raise RuntimeError("a draft model under decode context parallelism: the V2 runner's "
                           "KV spec depends on the built speculator, which engine mode lacks")
    view = RunnerView(config, v2)
    view.__dict__.update(speculator=None, dcp_size=dcp)
    return cast(dict[str, Any], v2.get_kv_cache_spec(view))


def kv_phase(config: Any, kv_bytes: int, out: dict[str, Any], *, report: bool) -> Any:
    """KV cache specs per layer and the release's KV cache config for ``kv_bytes``.

    ``report``: the memory is the user's (the engine's logged available memory), so
    the token capacity is an answer; otherwise the config only feeds the CUDA graph
    resolution, and no capacity is reported.
    """
    spec = kv_cache_spec(config)
    planning = ("vllm.v1.core.kv_cache_planning", "vllm.v1.core.kv_cache_utils")
    try:
        get_configs = _find(planning, "get_kv_cache_configs")
    except LookupError:  # 0.10.2: the engine core plans each worker, then unifies
        get_configs = per_worker_planning(_find(planning, "get_kv_cache_config"),
                                          _find(planning, "unify_kv_cache_configs"))
    args: list[Any] = [config, [spec], [int(kv_bytes)]]
    publish = resolve_layout(config, spec)
    groups = None
    if "global_kv_cache_groups" in inspect.signature(get_configs).parameters:
        # newer releases: the engine core first groups the specs of all workers
        groups = _find(planning, "get_global_kv_cache_groups")(config, [spec])
        args.append(groups)
    if publish is not None:
        out["kv_cache_layout"] = publish(groups)
    forget_logged_once()
    mark = len(LOG_RECORDS.records)
    kv = get_configs(*args)[0]
    printed = LOG_RECORDS.numbers(since=mark)  # releases that print capacity while planning
    if not report:
        return kv
    out["printed"] = {k: v for k, v in printed.items() if k.startswith(("kv_", "max_conc"))}
    per_token = sum(s.page_size_bytes / s.block_size for s in spec.values()
                    if getattr(s, "block_size", None))
    out["kv"] = {"num_blocks": int(kv.num_blocks), "layers_with_kv": len(spec),
                 "spec_kinds": sorted({type(s).__name__ for s in spec.values()}),
                 "page_bytes_per_token_all_layers": per_token,
                 "kv_cache_groups": len(kv.kv_cache_groups)}
    try:
        capacity = _find(("vllm.v1.core.kv_cache_utils",), "get_kv_cache_capacity")
    except LookupError:  # older releases compute it inside the planning they log from
        if "kv_cache_tokens_logged" in printed:
            out["kv"]["kv_cache_tokens"] = printed["kv_cache_tokens_logged"]
        if "max_concurrency_logged" in printed:
            out["kv"]["max_concurrency"] = float(printed["max_concurrency_logged"])
        out["kv"]["capacity_from"] = "the release's own log lines while planning"
        return kv
    tokens, concurrency = capacity(config, kv)
    out["kv"].update(kv_cache_tokens=int(tokens), max_concurrency=float(concurrency))
    return kv


def per_worker_planning(plan_one: Callable[..., Any], unify: Callable[..., Any]) -> Any:
    """The engine core's planning in releases without ``get_kv_cache_configs`` (0.10.2):
    the release's ``get_kv_cache_config`` for each worker's specs and memory, then its
    ``unify_kv_cache_configs`` over them, as ``EngineCore._initialize_kv_caches`` does."""
    def get_kv_cache_configs(config: Any, specs: list[Any], memory: list[int]) -> list[Any]:
        configs = [plan_one(config, spec, mem) for spec, mem in zip(specs, memory, strict=True)]
        unify(configs)
        return configs

    return get_kv_cache_configs


def forget_logged_once() -> None:
    """Let the release print its once-only lines again (each planning call prints its own).

    The release's logger keeps "print once" helpers behind ``lru_cache``; a second
    planning call whose line equals an earlier one would be silent otherwise.
    """
    with contextlib.suppress(ImportError):
        for value in vars(importlib.import_module("vllm.logger")).values():
            clear = getattr(value, "cache_clear", None)
            if callable(clear):
                clear()


def kv_range(config: Any, bounds: list[int]) -> dict[str, Any]:
    """Capacity at both ends of the memory the log's rounding allows ("4.09 GiB" is +-0.005)."""
    tokens, concurrency = [], []
    mark = len(LOG_RECORDS.records)
    for nbytes in bounds:
        side: dict[str, Any] = {}
        kv_phase(config, int(nbytes), side, report=True)
        tokens.append(side["kv"].get("kv_cache_tokens"))
        concurrency.append(side["kv"].get("max_concurrency"))
    del LOG_RECORDS.records[mark:]  # recon's own extra calls: not lines the engine printed
    if not bounds or None in tokens or None in concurrency:
        return {}
    return {"kv_cache_tokens_range": tokens, "max_concurrency_range": concurrency}


def group_backends(config: Any, kv: Any) -> list[set[Any]]:
    """The attention backend classes of each KV cache group's layers (the runner's groups)."""
    layers = config.compilation_config.static_forward_context
    out = []
    for group in kv.kv_cache_groups:
        found = set()
        for name in group.layer_names:
            getter = getattr(layers.get(name), "get_attn_backend", None)
            if getter is not None:
                found.add(getter())
        out.append(found)
    return out


def cudagraph_phase(config: Any, kv: Any, out: dict[str, Any]) -> None:
    """The model runner's CUDA graph resolution and its dispatcher's keys, as it captures them.

    ``GPUModelRunner._check_and_update_cudagraph_mode`` (found by looking) runs
    unbound on a view holding the config, the KV cache config, the release's own
    ``CudagraphDispatcher`` and the uniform decode length that dispatcher computes:
    the backends' CUDA graph support downgrades the mode and rounds the sizes
    (spec decode), then the dispatcher makes one key per graph the engine captures.
    """
    runner = v1_runner()
    check = getattr(runner, "_check_and_update_cudagraph_mode", None)
    # before 0.11.1: the same resolution in initialize_cudagraph_capture, which capture_model
    # calls first; its dispatcher keys are the sizes capture_model then captures
    legacy = getattr(runner, "initialize_cudagraph_capture", None) if check is None else None
    if check is None and legacy is None and (runner is not None or model_runner(config) != "V2"):
        out["cudagraph_stage"] = "create_engine_config (the release's model runner has neither " \
                                 "_check_and_update_cudagraph_mode nor initialize_cudagraph_capture)"
        return
    if model_runner(config) == "V2":
        try:
            v2_cudagraph_phase(config, kv, out)
        except Exception as err:  # noqa: BLE001 - graph counts only: the other numbers stand
            out["errors"].append({"stage": "cudagraph_phase (V2 model runner's graph manager)",
                                  "error": f"{type(err).__name__}: {err}"})
            out["cudagraph_stage"] = ("create_engine_config (the release's V2 model runner: "
                                      f"its graph manager raised {type(err).__name__})")
        return
    if check is None and legacy is None:  # V1 picked in a release without it: its error would say
        raise RuntimeError("the release picks the V1 model runner, which it does not have")
    dispatcher_cls = _find(("vllm.v1.cudagraph_dispatcher",), "CudagraphDispatcher")
    view = RunnerView(config)
    dispatcher = dispatcher_cls(config)
    spec = getattr(config, "speculative_config", None)
    uniform = getattr(dispatcher, "uniform_decode_query_len", None)
    if uniform is None:
        uniform = 1 + int(getattr(spec, "num_speculative_tokens", 0) or 0)
    view.__dict__.update(cudagraph_dispatcher=dispatcher, kv_cache_config=kv,
                         uniform_decode_query_len=uniform,
                         max_num_reqs=config.scheduler_config.max_num_seqs,
                         speculative_config=spec, drafter=NoDrafter())
    comp = config.compilation_config
    if legacy is not None:
        view.__dict__.update(
            attn_groups=[[BuiltGroup(b) for b in sorted(found, key=lambda c: c.__name__)]
                         for found in group_backends(config, kv)],
            _attn_group_iterator=types.MethodType(runner._attn_group_iterator, view))
        if jsonable(comp.cudagraph_mode) != "NONE":  # capture_model skips capture altogether
            legacy(view)
        dispatcher.__dict__["cudagraph_mode"] = comp.cudagraph_mode  # as resolved
    elif check is not None:
        try:
            check(view, group_backends(config, kv), list(kv.kv_cache_groups))
        except Exception as err:  # noqa: BLE001 - after the target's keys: the drafter's part
            if not getattr(dispatcher, "keys_initialized", False) or \
                    dispatcher.cudagraph_mode is None:
                raise
            out["errors"].append({"stage": "cudagraph_phase (drafter keys, not counted)",
                                  "error": f"{type(err).__name__}: {err}"})
    graphs: dict[str, dict[str, int]] = {}
    for mode, keys in getattr(dispatcher, "cudagraph_keys", {}).items():
        for key in keys:
            decode = bool(getattr(key, "uniform", getattr(key, "uniform_decode", False)))
            for name in (jsonable(mode), "decode" if decode else "mixed"):
                slot = graphs.setdefault(name, {"count": 0, "max": 0})
                slot["count"] += 1
                slot["max"] = max(slot["max"], int(key.num_tokens))
    out["cudagraph"] = {"mode_resolved": jsonable(dispatcher.cudagraph_mode),
                        "capture_sizes_resolved": jsonable(comp.cudagraph_capture_sizes),
                        "max_capture_size_resolved": _attr(comp, "max_cudagraph_capture_size",
                                                           "max_capture_size"),
                        "uniform_decode_query_len": uniform, "graphs": graphs,
                        "decode_steps": decode_steps(dispatcher, config, uniform)}
    out["cudagraph_stage"] = "model runner: " + ("initialize_cudagraph_capture (its attention "
                                                 "groups: each backend's builder class, not "
                                                 "built)" if legacy is not None
                                                 else "_check_and_update_cudagraph_mode")


def decode_steps(dispatcher: Any, config: Any, uniform: int) -> list[list[Any]] | None:
    """``[N, runtime mode, tokens padded to]`` for a decode step of each N running requests
    up to ``max_num_seqs`` (N x ``uniform`` tokens, a uniform batch): the dispatcher's own
    ``dispatch``, asked as the V1 runner asks it at TP 1 without LoRA (None where its
    ``dispatch`` takes something else: releases before 0.19)."""
    dispatch: Any = getattr(dispatcher, "dispatch", None)
    params = inspect.signature(dispatch).parameters if dispatch is not None else {}
    ask: Callable[[int], Any]
    if "num_tokens" in params:
        ask = functools.partial(dispatch, uniform_decode=True)
    elif "batch_descriptor" in params:
        ask = legacy_dispatch(dispatcher, config)
    else:
        return None
    rows: list[list[Any]] = []
    for n in range(1, int(config.scheduler_config.max_num_seqs) + 1):
        mode, desc = ask(n * uniform)
        name = jsonable(mode)
        rows.append([n, name, None if name == "NONE" or desc is None else int(desc.num_tokens)])
    return rows


def legacy_dispatch(dispatcher: Any, config: Any) -> Callable[[int], Any]:
    """Before 0.19 the V1 runner pads a step itself: with graphs on, a step up to the largest
    capture size goes to the config's ``pad_for_cudagraph``, then the dispatcher is asked
    with a ``BatchDescriptor`` of the padded tokens (``_prepare_inputs`` / ``execute_model``)."""
    descriptor = _find(("vllm.forward_context",), "BatchDescriptor")
    sizes = sorted(config.compilation_config.cudagraph_capture_sizes or [])
    graphs_on = jsonable(config.compilation_config.cudagraph_mode) != "NONE"

    def ask(tokens: int) -> Any:
        if graphs_on and sizes and tokens <= sizes[-1]:
            tokens = config.pad_for_cudagraph(tokens)
        return dispatcher.dispatch(descriptor(num_tokens=tokens, uniform_decode=True))
    return ask


def v2_cudagraph_phase(config: Any, kv: Any, out: dict[str, Any]) -> None:
    """The V2 model runner's graphs: its mode resolution, then its graph manager's candidates.

    As the V2 runner does at KV-cache set-up: the lowest CUDA graph support of the
    attention backends (each builder class's own ``get_cudagraph_support``), the
    config's ``resolve_cudagraph_mode_and_sizes(..., use_v2_model_runner=True)``, then
    ``CudaGraphManager._init_candidates`` on a view (no device, no graph pool), whose
    ``_capture_descs`` are the graphs the capture bars count, per mode.
    """
    cg = importlib.import_module("vllm.v1.worker.gpu.cudagraph_utils")
    manager: Any = getattr(cg, "CudaGraphManager", None)
    if getattr(manager, "_init_candidates", None) is None or config.lora_config is not None:
        out["cudagraph_stage"] = ("create_engine_config (the release's V2 model runner: "
                                  + ("LoRA graph cases not modelled)" if manager is not None
                                     else "no CudaGraphManager._init_candidates)"))
        return
    passed = v2_runner_keywords()
    unknown = sorted(set().union(*(passed[n] - V2_MODELLED[n] for n in passed)))
    if unknown:
        out["cudagraph_stage"] = ("create_engine_config (the release's V2 model runner also "
                                  f"passes {', '.join(unknown)}, which engine mode does not model)")
        return
    inputs, refused = v2_runner_inputs(config, kv)
    if refused:
        out["cudagraph_stage"] = f"create_engine_config (the release's V2 model runner: {refused})"
        return
    lowest, lowest_backend = lowest_graph_support(config, kv)
    spec = getattr(config, "speculative_config", None)
    decode_len = 1 + int(getattr(spec, "num_speculative_tokens", 0) or 0)
    comp = config.compilation_config
    resolve = comp.resolve_cudagraph_mode_and_sizes
    wanted = inspect.signature(resolve).parameters
    extra = {k: v for k, v in (("use_v2_model_runner", True),
                               ("tensor_parallel_size",
                                config.parallel_config.tensor_parallel_size),
                               ("kv_cache_config", kv),
                               ("max_num_reqs", config.scheduler_config.max_num_seqs),
                               ("is_profiling", False),
                               ("piecewise_capture_available",
                                inputs["piecewise_capture_available"]))
             if k in wanted and (k in passed["resolve_cudagraph_mode_and_sizes"]
                                 or k not in RUNNER_STATE)}
    mode = resolve(lowest, lowest_backend, decode_len, **extra)
    if "decode_query_lens" in passed["ModelCudaGraphManager"]:
        view = v2_graph_manager(cg, config, mode, decode_len, inputs)
    else:
        view = object.__new__(manager)
        view.__dict__.update(vllm_config=config, compilation_config=comp, cudagraph_mode=mode,
                             decode_query_len=decode_len, lora_capture_cases=[0],
                             max_num_reqs=config.scheduler_config.max_num_seqs,
                             dp_size=config.parallel_config.data_parallel_size,
                             tp_size=config.parallel_config.tensor_parallel_size,
                             varlen_decode=inputs["varlen_decode"],
                             ubatch_runner=inputs["ubatch_runner"],
                             use_breakable_cg=False, _candidates={}, _capture_descs={})
        manager._init_candidates(view)
    out["cudagraph"] = {"mode_resolved": jsonable(mode),
                        "capture_sizes_resolved": jsonable(comp.cudagraph_capture_sizes),
                        "max_capture_size_resolved": _attr(comp, "max_cudagraph_capture_size",
                                                           "max_capture_size"),
                        "uniform_decode_query_len": decode_len,
                        "graphs": {jsonable(m): {"count": len(descs),
                                                 "max": max(int(d.num_tokens) for d in descs)}
                                   for m, descs in view._capture_descs.items() if descs},
                        "decode_steps": v2_decode_steps(view, config, decode_len, out)}
    out["cudagraph_stage"] = "V2 model runner: resolve_cudagraph_mode_and_sizes, " \
                             "CudaGraphManager._init_candidates"


def lowest_graph_support(config: Any, kv: Any) -> tuple[Any, str | None]:
    """The lowest CUDA graph support among the attention backends of the KV cache's layers
    (each builder class's own ``get_cudagraph_support``), and the backend that has it."""
    support_cls = _find(("vllm.v1.attention.backend", "vllm.v1.attention.backends.utils"),
                        "AttentionCGSupport")
    lowest, lowest_backend = support_cls.ALWAYS, None
    layers = config.compilation_config.static_forward_context
    for group in kv.kv_cache_groups:
        per_layer = getattr(group.kv_cache_spec, "kv_cache_specs", None)
        for name in group.layer_names:
            getter = getattr(layers.get(name), "get_attn_backend", None)
            if getter is None:
                continue
            backend = getter()
            spec = per_layer[name] if per_layer else group.kv_cache_spec
            support = backend.get_builder_cls().get_cudagraph_support(config, spec)
            if support.value < lowest.value:
                lowest, lowest_backend = support, backend.__name__
    return lowest, lowest_backend


def v2_decode_steps(view: Any, config: Any, q: int, out: dict[str, Any]) -> list[list[Any]] | None:
    """:func:`decode_steps` for the V2 runner: its graph manager's own ``dispatch``, asked for
    a uniform decode batch of N requests of ``q`` tokens each, as after capture (None, and
    the reason in ``errors``, where its ``dispatch`` asks for more than that)."""
    dispatch = getattr(view, "dispatch", None)
    if dispatch is None:
        return None
    asked = {"num_reqs": lambda n: n, "num_tokens": lambda n: n * q,
             "uniform_token_count": lambda n: q, "num_active_loras": lambda n: 0,
             "max_query_len": lambda n: q, "num_ubatches": lambda n: 1}
    params = inspect.signature(dispatch).parameters
    needed = {k for k, v in params.items() if v.default is inspect.Parameter.empty}
    if not needed <= set(asked):
        out["errors"].append({"stage": "cudagraph_phase (decode steps, not asked)",
                              "error": f"the graph manager's dispatch also needs "
                                       f"{', '.join(sorted(needed - set(asked)))}"})
        return None
    view.__dict__["_graphs_captured"] = True  # dispatch answers as after capture
    rows: list[list[Any]] = []
    try:
        for n in range(1, int(config.scheduler_config.max_num_seqs) + 1):
            desc = dispatch(**{k: make(n) for k, make in asked.items() if k in params})
            name = jsonable(desc.cg_mode)
            rows.append([n, name, None if name == "NONE" else int(desc.num_tokens)])
    except Exception as err:  # noqa: BLE001 - said: the graph counts stand without it
        out["errors"].append({"stage": "cudagraph_phase (decode steps, not asked)",
                              "error": f"{type(err).__name__}: {err}"[:400]})
        return None
    return rows


def v2_graph_manager(cg: Any, config: Any, mode: Any, decode_len: int,
                     inputs: dict[str, Any]) -> Any:
    """The release's own ``ModelCudaGraphManager``, built as the V2 runner builds it (0.34.0).

    Its decode query lengths come from the config's own
    ``get_decode_cudagraph_query_lens`` (dynamic speculative decoding maps each
    length to the batch sizes that draft it). The constructor runs whole; the one
    thing it would reach on a GPU, the platform's global graph pool, is None here
    (no graph is captured), and the pipeline group is the single-rank view.
    """
    lens = config.get_decode_cudagraph_query_lens(decode_len)
    platform = importlib.import_module("vllm.platforms").current_platform
    pool = getattr(type(platform), "get_global_graph_pool", None)
    type(platform).get_global_graph_pool = lambda self: None
    try:
        return cg.ModelCudaGraphManager(config, None, mode, decode_query_lens=lens,
                                        lora_capture_cases=[0],
                                        varlen_decode=inputs["varlen_decode"],
                                        ubatch_runner=inputs["ubatch_runner"])
    finally:
        if pool is not None:
            type(platform).get_global_graph_pool = pool


#: what :func:`v2_cudagraph_phase` gives the V2 runner's two calls, beyond the positional ones
V2_MODELLED = {"resolve_cudagraph_mode_and_sizes": {"use_v2_model_runner", "tensor_parallel_size",
                                                    "kv_cache_config", "max_num_reqs",
                                                    "is_profiling", "piecewise_capture_available"},
               "ModelCudaGraphManager": {"decode_query_len", "decode_query_lens",
                                         "lora_capture_cases", "varlen_decode", "ubatch_runner"}}


def v2_runner_inputs(config: Any, kv: Any) -> tuple[dict[str, Any], str]:
    """What the V2 runner computes for its graph calls (0.33.0's ``initialize_kv_cache``),
    each from the release's own function, or the reason engine mode cannot say.

    * ``is_profiling``: False; the graphs are captured after the final KV cache
      initialization, not the profiling one.
    * ``piecewise_capture_available``: the runner's ``VLLM_USE_BREAKABLE_CUDAGRAPH`` (the
      release's ``envs``) or ``has_compiled_submodule`` of the model built on the meta device.
    * ``ubatch_runner``: the release's ``maybe_build_ubatch_runner``, which returns None
      unless dual batch overlap is on; with it on, the microbatched graphs are not modelled.
    * ``varlen_decode``: whether an adaptive verification manager exists. It exists only
      when the speculator asks for it, and the speculator clears that flag from its
      checkpoint (which engine mode does not load): asked for, the answer is refused.
    """
    cg = importlib.import_module("vllm.v1.worker.gpu.cudagraph_utils")
    envs = importlib.import_module("vllm.envs")
    compiled = getattr(cg, "has_compiled_submodule", None)
    model = BUILT.get("model")
    breakable = bool(getattr(envs, "VLLM_USE_BREAKABLE_CUDAGRAPH", False))
    piecewise = breakable or bool(compiled is not None and model is not None and compiled(model))
    inputs: dict[str, Any] = {"piecewise_capture_available": piecewise, "varlen_decode": False,
                              "ubatch_runner": None}
    spec = getattr(config, "speculative_config", None)
    if spec is not None and getattr(spec, "enable_adaptive_verification", False):
        return inputs, ("adaptive verification depends on the draft checkpoint's confidence "
                        "head, which engine mode does not load")
    try:
        build = importlib.import_module("vllm.v1.worker.gpu.ubatch_utils").maybe_build_ubatch_runner
    except (ImportError, AttributeError):
        return inputs, ""
    try:
        runner = build(config, None, None, None, kv, config.scheduler_config.max_num_seqs)
    except Exception as err:  # noqa: BLE001 - it began to build one: dual batch overlap is on
        return inputs, f"dual batch overlap's microbatched graphs are not modelled ({type(err).__name__})"
    if runner is not None:
        return inputs, "dual batch overlap's microbatched graphs are not modelled"
    return inputs, ""


#: keywords computed from the runner's own state: given only where the runner gives them
RUNNER_STATE = {"is_profiling", "piecewise_capture_available"}


def v2_runner_keywords() -> dict[str, set[str]]:
    """The keywords the release's V2 runner gives its two graph calls.

    Found by reading the runner's own source (``vllm.v1.worker.gpu.model_runner``): a
    keyword engine mode does not model (:data:`V2_MODELLED`) means the release decides
    its graphs from state engine mode does not build, so its graph counts are not
    predicted rather than guessed.
    """
    module = importlib.import_module("vllm.v1.worker.gpu.model_runner")
    tree = ast.parse(inspect.getsource(module))
    passed: dict[str, set[str]] = {name: set() for name in V2_MODELLED}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name in passed:
            passed[name] |= {k.arg for k in node.keywords if k.arg}
    return passed


def model_runner(config: Any) -> str:
    """Which GPU model runner the release picks for this config (its own property)."""
    pick = getattr(type(config), "use_v2_model_runner", None)
    if pick is None:  # no choice: the one runner the release has (0.34 removed V1)
        return "V1" if v1_runner() is not None else "V2"
    value = config.use_v2_model_runner
    return "V2" if (value() if callable(value) else value) else "V1"


class BuiltGroup:
    """An attention group as ``initialize_cudagraph_capture`` (0.10, 0.11.0) reads it: its
    backend and metadata builder, whose CUDA graph support is a class attribute; the builder
    is a bare instance (its ``__init__`` allocates on the GPU and is not needed here)."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        builder = backend.get_builder_cls()
        self.metadata_builder = builder.__new__(builder)
        self.layer_names: list[str] = []

    def get_metadata_builder(self, ubatch_id: int = 0) -> Any:
        return self.metadata_builder


class NoDrafter:
    """The proposer the view does not build (its own graph keys are not counted)."""

    def __getattr__(self, item: str) -> Any:
        raise RuntimeError("recon engine mode: the speculative proposer is not built")


def backends(config: Any) -> dict[str, str]:
    """Attention backend per layer class, as the layers the release built report them."""
    out: dict[str, str] = {}
    for layer in config.compilation_config.static_forward_context.values():
        getter = getattr(layer, "get_attn_backend", None)
        if getter is None:
            continue
        with contextlib.suppress(Exception):
            backend = getter()
            out.setdefault(type(layer).__name__ + ":" + backend.get_name(), backend.get_name())
    return dict(sorted(out.items()))


def _attr(obj: Any, *names: str) -> Any:
    for name in names:
        if obj is not None and hasattr(obj, name):
            return jsonable(getattr(obj, name))
    return None


def facts(config: Any) -> dict[str, Any]:
    """The numbers the release decided, read from its own config objects."""
    cache, sched = config.cache_config, config.scheduler_config
    comp, model = config.compilation_config, config.model_config
    spec = getattr(config, "speculative_config", None)
    return {
        "attention_block_size": _attr(cache, "block_size"),
        "mamba_block_size": _attr(cache, "mamba_block_size"),
        "mamba_page_size_padded": _attr(cache, "mamba_page_size_padded"),
        "mamba_cache_mode": _attr(cache, "mamba_cache_mode"),
        "enable_prefix_caching": _attr(cache, "enable_prefix_caching"),
        "kv_cache_dtype": _attr(cache, "cache_dtype"),
        "gpu_memory_utilization": memory_share(cache),
        "mamba_ssm_cache_dtype": _attr(cache, "mamba_ssm_cache_dtype"),
        "max_num_seqs": _attr(sched, "max_num_seqs"),
        "max_num_batched_tokens": _attr(sched, "max_num_batched_tokens"),
        "max_model_len": _attr(model, "max_model_len"),
        "is_hybrid": _attr(model, "is_hybrid"),
        "cudagraph_capture_sizes": _attr(comp, "cudagraph_capture_sizes"),
        "max_cudagraph_capture_size": _attr(comp, "max_cudagraph_capture_size",
                                            "max_capture_size"),
        "cudagraph_mode": _attr(comp, "cudagraph_mode"),
        "compilation_mode": _attr(comp, "mode", "level"),
        "tensor_parallel_size": _attr(config.parallel_config, "tensor_parallel_size"),
        "speculative_method": _attr(spec, "method"),
        "num_speculative_tokens": _attr(spec, "num_speculative_tokens"),
        "architecture": (_attr(model, "architectures") or [None])[0],
    }


#: facts read as ``create_engine_config`` left them (what the engine's config line prints)
CONFIG_LINE = ("cudagraph_capture_sizes", "max_cudagraph_capture_size", "cudagraph_mode")


def resolved_graphs(cudagraph: dict[str, Any] | None) -> dict[str, Any]:
    """The runner's resolved mode and sizes and the graphs per mode, under identifiers."""
    if not cudagraph:
        return {}
    graphs = cudagraph.get("graphs", {})
    out = {"cudagraph_mode_resolved": cudagraph.get("mode_resolved"),
           "cudagraph_capture_sizes_resolved": cudagraph.get("capture_sizes_resolved"),
           "max_cudagraph_capture_size_resolved": cudagraph.get("max_capture_size_resolved"),
           "cudagraph_decode_steps": cudagraph.get("decode_steps"),
           "uniform_decode_query_len": cudagraph.get("uniform_decode_query_len")}
    for mode, key in (("PIECEWISE", "piecewise"), ("FULL", "full"), ("mixed", "mixed"),
                      ("decode", "decode")):
        if mode in graphs:
            out[f"cudagraph_graphs_{key}"] = graphs[mode]["count"]
            out[f"cudagraph_graphs_{key}_max"] = graphs[mode]["max"]
    return out


def memory_share(cache: Any) -> float:
    """The GPU memory share the release plans with: its resolved value where the field may be
    unset (0.34: ``resolved_gpu_memory_utilization``), else the field."""
    resolved = getattr(type(cache), "resolved_gpu_memory_utilization", None)
    if isinstance(resolved, property):
        return float(cache.resolved_gpu_memory_utilization)
    return float(cache.gpu_memory_utilization)


def worker_phase(config: Any, platform: Any, out: dict[str, Any],
                 req: dict[str, Any] | None = None) -> None:
    """What the worker does before it captures: layers, block sizes, KV cache, CUDA graphs.

    Each step only where the release has it (found by looking): the block-size
    update (``update_block_size_for_backend``; older releases decide in
    ``create_engine_config``), the KV cache specs and config, and the runner's
    CUDA graph resolution. The CUDA graph step needs a KV cache config: with
    no memory given it is planned for the declared GPU's whole memory share
    (``gpu_memory_utilization``), which only bounds sizes, and is said so.
    """
    update = getattr(type(platform), "update_block_size_for_backend", None)
    out["block_size_stage"] = "create_engine_config"
    lap = time.monotonic()
    try:
        out["layers"] = build_layers(config)
        out["phases"]["layers"] = round(time.monotonic() - lap, 2)
        if update is not None:
            update(config)
            out["block_size_stage"] = "worker: update_block_size_for_backend"
        if req is not None:
            cache_phase(config, req, out)
    except Exception as err:  # noqa: BLE001 - reported, the caller says it cannot answer
        if update is not None:
            # the release decides block sizes, KV and CUDA graphs in this phase: without it
            # there is no answer (the block size of create_engine_config is not the engine's)
            out["stage"] = "worker_phase"
            raise
        out["block_size_stage"] = "create_engine_config (worker phase failed)"
        out["errors"].append({"stage": "worker_phase", "error": f"{type(err).__name__}: {err}",
                              "traceback": traceback.format_exc()[-3000:]})
        return
    out["attention_backends"] = backends(config)
    given = out.get("kv_memory_bytes")
    planned = int(given or out["gpu_memory_bytes"] * memory_share(config.cache_config))
    lap = time.monotonic()
    try:
        kv = kv_phase(config, planned, out, report=bool(given))
        if given:
            out["kv"].update(kv_range(config, list(out.get("kv_memory_range_bytes") or [])))
        out["phases"]["kv"] = round(time.monotonic() - lap, 2)
    except Exception as err:  # noqa: BLE001 - reported: no KV numbers
        out["errors"].append({"stage": "kv_phase", "error": f"{type(err).__name__}: {err}",
                              "traceback": traceback.format_exc()[-3000:]})
        return
    if not given:
        out["kv_planned_for_cudagraphs_bytes"] = planned
    lap = time.monotonic()
    try:
        # the worker initializes the KV cache, where the runner resolves its graphs, inside
        # the release's current-config context (``WorkerWrapperBase.initialize_from_config``);
        # backends read it there (FlashInfer's builder: ``force_use_trtllm_attention``)
        with _current_config(config):
            cudagraph_phase(config, kv, out)
        out["phases"]["cudagraphs"] = round(time.monotonic() - lap, 2)
    except Exception as err:  # noqa: BLE001 - reported: sizes stay create_engine_config's
        out["errors"].append({"stage": "cudagraph_phase", "error": f"{type(err).__name__}: "
                              f"{err}", "traceback": traceback.format_exc()[-3000:]})


def cache_phase(config: Any, req: dict[str, Any], out: dict[str, Any]) -> None:
    """The compile cache's folder names, as the model loader leaves the config (reported)."""
    lap = time.monotonic()
    try:
        given = out.get("replaced_args") or {}
        scratch = os.path.dirname(req["model_dir"])
        typed = {req["model_dir"]: given.get("model"),
                 os.path.join(scratch, "draft"): given.get("speculative_model")}
        typed = {k: str(v) for k, v in typed.items() if v}
        roots = (BUILT.get("model"), BUILT.get("draft"))
        out["compile_cache"] = _compile().compile_cache(config, req, typed, roots)
    except Exception as err:  # noqa: BLE001 - reported: no compile-cache answer
        out["errors"].append({"stage": "compile_cache", "error": f"{type(err).__name__}: {err}",
                              "traceback": traceback.format_exc()[-3000:]})
    out["phases"]["compile_cache"] = round(time.monotonic() - lap, 2)


def runner_class(config: Any) -> Any:
    """The model runner class the release's worker makes for ``config`` (V1 or V2)."""
    if model_runner(config) == "V2":
        return importlib.import_module("vllm.v1.worker.gpu.model_runner").GPUModelRunner
    return v1_runner()


def memory_phase(config: Any, req: dict[str, Any], out: dict[str, Any]) -> None:
    """The worker's memory plan (``memory_child.plan``), then the KV cache it leaves.

    The model runner's ``__init__`` must have run whole (its ``load_model`` and
    ``profile_run`` read what it sets); the figures recon assumes are said in
    ``memory.assumptions``; the KV planning that follows is the release's, for the
    available memory its own arithmetic gave.
    """
    import torch  # the installed CPU torch

    mem = _memory()
    said = flashinfer_sampler_off(req)
    cls = runner_class(config)
    BUILT_RUNNER.clear()
    state = runner_state(config, cls)
    if state.stopped:
        raise RuntimeError(f"the release's model runner __init__ stopped on meta: {state.stopped}")
    v1 = cls is v1_runner()
    graph_bytes, graph_line = mem.graph_assumption(out.get("cudagraph")) if v1 else (0, None)
    gpu = req["gpu"]
    total = int(gpu.get("torch_total_bytes") or gpu["memory_bytes"])
    assumptions = [f"memory outside torch while profiling: {mem.NON_TORCH_SOURCE}",
                   f"CUDA context before the worker's first snapshot: "
                   f"{mem.CONTEXT_BYTES / mem.GIB:.2f} GiB (the real H200 runs' start-up)"]
    if not gpu.get("torch_total_bytes"):
        assumptions.append(f"torch's total memory of the {gpu['name']}: its nvidia-smi total "
                           f"({total / mem.GIB:.2f} GiB); data-center boards report 0.3-0.7 "
                           "GiB less")
    if graph_line:
        assumptions.append(graph_line)
    assumptions += said
    lap = time.monotonic()
    prompt = int(req.get("prompt_tokens") or 0)
    scheduled: dict[str, Any] = {}

    def chunking(kv: Any) -> list[tuple[int, int]]:
        scheduled.update(prompt_chunks(config, kv, prompt))
        return list(scheduled["cut"])

    plan = mem.plan(config, cls, state.attributes, total, graph_bytes, v1,
                    lambda placed: gpu_tensors_on_meta(torch, placed),
                    lambda available: kv_phase(config, available, out, report=True),
                    chunking if prompt else None)
    plan["assumptions"] = assumptions
    plan["model_runner"] = "V1" if v1 else "V2"
    if plan.get("kv_cache_not_initialized"):
        assumptions.append("the runner's initialize_kv_cache did not run on meta "
                           f"({plan['kv_cache_not_initialized']}): its checks of the CUDA "
                           "graphs against the KV cache were not made")
    if plan.get("prefill"):
        plan["prefill"].update(prompt_tokens=prompt, **scheduled)
        assumptions.append(PREFILL_FUSED if plan["prefill"].get("fused_custom_ops")
                           else PREFILL_EAGER)
        if not v1:
            assumptions.append("each chunk without the context before it: the V2 runner's "
                               "dummy batch has none (attention reads the context from the "
                               "KV cache in place)")
    out["memory"] = plan
    out["phases"]["memory"] = round(time.monotonic() - lap, 2)
    out["phases"].update({f"memory_{k}": v for k, v in plan.pop("seconds", {}).items()})


#: how the prompt's chunks are counted, with what the real engine measured
PREFILL_FUSED = ("a chunk's activation peak as the compiled graph holds it: each CustomOp in "
                 "the graph one fused kernel (only what it returns is counted), the ops the "
                 "graph leaves to run eagerly op by op; 7% above the real engine's in-process "
                 "peak for Llama-3.1-8B and 10% above it for Qwen3.6-35B-A3B at 8,192-token "
                 "chunks (H100, tests/data/logs/real-h100/P8_b8k, P36_b8k)")
PREFILL_EAGER = ("a chunk's activation peak as the eager engine runs it (no compiled graph: "
                 "every op by op); no prompt peak of an eager engine was measured yet")


def prompt_refusal(config: Any, tokens: int) -> str | None:
    """The release's own check of a prompt's length (``InputProcessor._validate_prompt_len``,
    run unbound on a view of the config): its message where it refuses, else None."""
    try:
        check = importlib.import_module("vllm.v1.engine.input_processor") \
            .InputProcessor._validate_prompt_len
    except (ImportError, AttributeError):
        return None
    view = types.SimpleNamespace(skip_prompt_length_check=False, model_config=config.model_config,
                           supports_mm_inputs=False, mm_encoder_cache_size=0)
    try:
        check(view, tokens, "decoder")
    except ValueError as err:
        return str(err)
    return None


def _block_hasher(config: Any, hash_block_size: int | None) -> dict[str, Any]:
    """The request's prefix-cache block hasher, made as the engine core makes it (with
    prefix caching on); none where caching is off or the release has no such argument."""
    if not config.cache_config.enable_prefix_caching or hash_block_size is None:
        return {}
    utils = importlib.import_module("vllm.v1.core.kv_cache_utils")
    hashing = importlib.import_module("vllm.utils.hashing")
    hash_fn = hashing.get_hash_fn_by_name(config.cache_config.prefix_caching_hash_algo)
    utils.init_none_hash(hash_fn)
    return {"block_hasher": utils.get_request_block_hasher(hash_block_size, hash_fn)}


def prompt_chunks(config: Any, kv: Any, tokens: int) -> dict[str, Any]:
    """The chunks the release's scheduler cuts one prompt of ``tokens`` into, alone in the engine.

    The release's ``Scheduler`` on the planned KV cache, one request of ``tokens`` prompt
    tokens and one output token, stepped until its prompt is computed (its own budget,
    ``long_prefill_token_threshold``, the Mamba block alignment, the block pool). Where it
    stops scheduling before the end, the KV pool cannot hold the prompt.
    """
    refused = prompt_refusal(config, tokens)
    if refused:
        return {"cut": [], "scheduled_tokens": 0, "kv_pool_holds_prompt": None,
                "rejected": refused}
    sched_mod = importlib.import_module("vllm.v1.core.sched.scheduler")
    request_cls = importlib.import_module("vllm.v1.request").Request
    params = importlib.import_module("vllm.sampling_params").SamplingParams(max_tokens=1)
    manager = importlib.import_module("vllm.v1.structured_output").StructuredOutputManager
    kwargs: dict[str, Any] = {"vllm_config": config, "kv_cache_config": kv,
                              "structured_output_manager": manager(config)}
    wanted = inspect.signature(sched_mod.Scheduler).parameters
    if "block_size" in wanted:
        sizes = _find(("vllm.v1.core.kv_cache_utils",), "resolve_kv_cache_block_sizes")
        kwargs["block_size"], hashed = sizes(kv, config)
        if "hash_block_size" in wanted:
            kwargs["hash_block_size"] = hashed
    config.cache_config.num_gpu_blocks = kv.num_blocks  # as the engine core sets it
    scheduler = sched_mod.Scheduler(**kwargs)
    request = request_cls(request_id="recon-prompt", prompt_token_ids=[1] * tokens,
                          sampling_params=params, pooling_params=None,
                          **_block_hasher(config, kwargs.get("hash_block_size")))
    scheduler.add_request(request)
    chunks: list[tuple[int, int]] = []
    computed = 0
    while computed < tokens and len(chunks) < 100_000:
        step = int(scheduler.schedule().num_scheduled_tokens.get("recon-prompt", 0))
        if step <= 0:
            break
        chunks.append((step, computed))
        computed += step
    return {"cut": chunks, "scheduled_tokens": computed,
            "kv_pool_holds_prompt": computed >= tokens}


def flashinfer_sampler_off(req: dict[str, Any]) -> list[str]:
    """Where FlashInfer is a stand-in here, the sampler's profile pass samples without it.

    Its kernels cannot run on meta and a stand-in returns no tensor; the release's own
    PyTorch/Triton path (``VLLM_USE_FLASHINFER_SAMPLER=0``) allocates at least what
    FlashInfer's does, so the peak is an upper bound there, and said so.
    """
    stood_in = any(str(m).split(".")[0] == "flashinfer" for m in req.get("gpu_modules", []))
    if not stood_in or "VLLM_USE_FLASHINFER_SAMPLER" in os.environ:
        return []
    os.environ["VLLM_USE_FLASHINFER_SAMPLER"] = "0"
    return ["the sampler's profile pass without FlashInfer (a stand-in here): the release's "
            "PyTorch path, at least the memory FlashInfer's kernels take"]


def planned_memory(config: Any, req: dict[str, Any], out: dict[str, Any]) -> None:
    """:func:`memory_phase`, its outcome said in ``out``: a plan, the release's refusal to start
    (a ``ValueError`` its own code raised: "will not start, because ..."), or no plan (why)."""
    try:
        memory_phase(config, req, out)
    except ValueError as err:
        frames = traceback.extract_tb(err.__traceback__)
        if frames and frames[-1].filename.startswith(str(req["src"])):
            out["will_not_start"] = {"error": f"{type(err).__name__}: {err}"[:1500],
                                     "where": f"{frames[-1].filename[len(req['src']):].lstrip('/')}"
                                              f":{frames[-1].lineno}"}
            return
        out["memory_not_predicted"] = f"{type(err).__name__}: {err}"[:800]
    except Exception as err:  # noqa: BLE001 - said: the other answers stand
        out["memory_not_predicted"] = f"{type(err).__name__}: {err}"[:800]
        out["memory_traceback"] = traceback.format_exc()[-3000:]


def _current_config(config: Any) -> Any:
    """The release's ``set_current_vllm_config(config)`` context, where it has one."""
    try:
        setter = _find(("vllm.config", "vllm.config.vllm"), "set_current_vllm_config")
    except LookupError:
        return contextlib.nullcontext()
    return setter(config)


class MissingOp:
    """One op of a replaced library: calls (and its overloads, ``.default``) return None."""

    def __init__(self, name: str, called: list[str]) -> None:
        self.name = name
        self.called = called

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self.called.append(self.name)

    def __getattr__(self, item: str) -> Any:
        if item.startswith("__"):
            raise AttributeError(item)
        return self


#: torch's own operator namespaces: a fake registration there is never tolerated
TORCH_NAMESPACES = ("aten", "prims", "prim", "quantized", "profiler", "inductor")


class MissingOps:
    """Custom ops of the replaced compiled modules (``torch.ops._C.x``): calls return None.

    Only namespaces that start with ``_`` (the release's own libraries, never
    torch's ``aten``/``prims``) and only ops that are not registered; each name
    called is recorded and listed in the result.
    """

    def __init__(self) -> None:
        self.called: list[str] = []

    def install(self) -> None:
        import torch._ops  # the installed CPU torch

        original = torch._ops._OpNamespace.__getattr__
        called = self.called

        def getattr_(ns: Any, op_name: str) -> Any:
            try:
                return original(ns, op_name)
            except AttributeError:
                if not str(ns.name).startswith("_") or op_name.startswith("__"):
                    raise
                return MissingOp(f"torch.ops.{ns.name}.{op_name}", called)

        torch._ops._OpNamespace.__getattr__ = getattr_  # type: ignore[method-assign]
        self._tolerate_fakes(torch)

    def _tolerate_fakes(self, torch: Any) -> None:
        """``register_fake("_C::op")`` for an op the replaced library never defined: a no-op."""
        called = self.called
        for name in ("register_fake", "impl_abstract"):
            original = getattr(torch.library, name, None)
            if original is None:
                continue

            def tolerant(qualname: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
                ns, _, op = str(qualname).partition("::")
                if ns not in TORCH_NAMESPACES and op and not _op_exists(torch, ns, op):
                    called.append(f"torch.library fake of {qualname} (op absent)")
                    func = args[0] if args and callable(args[0]) else kwargs.get("func")
                    return func if func is not None else (lambda f: f)
                return _original(qualname, *args, **kwargs)

            setattr(torch.library, name, tolerant)


def _op_exists(torch: Any, ns: str, op: str) -> bool:
    try:
        return bool(torch._C._dispatch_has_kernel(f"{ns}::{op}")) or \
            torch._C._dispatch_find_schema_or_throw(f"{ns}::{op}", "") is not None
    except Exception:  # noqa: BLE001 - absent
        return False


def _in_process(fn: Callable[[], Any]) -> Any:
    """Stands in for the model registry's ``_run_in_subprocess`` (same result, no process)."""
    return fn()


def replace_subprocess_probes() -> list[str]:
    """The release's process-spawning probes, run in this process instead (listed)."""
    done = []
    with contextlib.suppress(ImportError):
        registry = importlib.import_module("vllm.model_executor.models.registry")
        if callable(getattr(registry, "_run_in_subprocess", None)):
            registry._run_in_subprocess = _in_process  # type: ignore[attr-defined]
            done.append("vllm.model_executor.models.registry._run_in_subprocess")
    return done


def install_metadata(req: dict[str, Any]) -> None:
    """The release's own dist-info ``METADATA`` (from its wheel), so ``version("vllm")`` works.

    The snapshot holds the package folder only; the release asks importlib.metadata
    for its version (platform and Triton detection), as it would when installed.
    """
    text = req.get("metadata")
    if not text:
        return
    dist = os.path.join(os.path.dirname(req["model_dir"]), "dist")
    info = os.path.join(dist, f"{req.get('package', 'vllm')}-{req.get('version', '0')}.dist-info")
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w", encoding="utf-8") as fh:
        fh.write(text)
    sys.path.insert(1, dist)


def declared_host_memory(gpu: dict[str, Any]) -> list[str]:
    """``psutil.virtual_memory`` answers the declared server's memory, not this machine's.

    Releases check the swap space against the host's total (0.10-0.16: refused above 70%);
    the machine recon runs on is not the engine's server. Nothing is returned when the
    request declares none or psutil is not installed.
    """
    total = gpu.get("host_memory_bytes")
    try:
        import psutil
    except ImportError:
        return []
    if not total:
        return []
    measured = psutil.virtual_memory

    def virtual_memory() -> Any:
        here = measured()
        used = here.total - here.available
        return here._replace(total=int(total), available=max(int(total) - used, 0),
                             free=max(int(total) - used, 0))

    psutil.virtual_memory = virtual_memory
    return [f"psutil.virtual_memory (the declared server's {int(total) >> 30} GiB)"]


def release_torch(req: dict[str, Any]) -> list[str]:
    """``torch.__version__`` reads as the torch the release pins (``Requires-Dist: torch==X``).

    The release checks the version it runs on (``is_torch_equal_or_newer``: Inductor's
    runtime asserts before 2.12, AOT compile from 2.10) and hashes what follows into its
    compile cache key; this machine's torch is another. Nothing changes where the release
    pins none, or pins the version this torch already is.
    """
    import torch

    pin = _compile().torch_pin(req.get("metadata"))
    here = str(torch.__version__)
    version, plus, local = here.partition("+")
    if not pin or pin == version:
        return []
    torch.__version__ = type(torch.__version__)(pin + plus + local)
    return [f"torch.__version__ reads {pin + plus + local} (the release's own pin; this "
            f"machine's torch is {here})"]


def prepare(req: dict[str, Any]) -> tuple[EmptyExtensions, GpuPackages, LogRecords, Any]:
    """Import hooks, the release's metadata, the torch it pins, log capture, the virtual platform."""
    MISSING_OPS.install()
    pinned = release_torch(req)
    finder = EmptyExtensions(list(req.get("compiled", [])))
    sys.meta_path.insert(0, finder)
    gpu_packages = GpuPackages(list(req.get("gpu_modules", [])))
    sys.meta_path.append(gpu_packages)
    sys.path.insert(0, req["src"])
    install_metadata(req)
    handler = LOG_RECORDS
    handler.install()
    # torch's device queries answer before the release's platform module is imported:
    # ROCm's reads the board's architecture when imported (``gcnArchName``, 0.17)
    queries = torch_cuda_queries(dict(req["gpu"])) + triton_driver(dict(req["gpu"])) \
        + declared_host_memory(dict(req["gpu"])) + pinned
    platform = virtual_platform(dict(req["gpu"]))
    platform.recon_torch_queries = queries
    return finder, gpu_packages, handler, platform


#: the other files of a model folder a request may carry: these names, and the Python
#: modules of its remote code (a plain module name; nothing with a path)
MODEL_FILES = ("preprocessor_config.json", "processor_config.json",
               "video_preprocessor_config.json")
MODULE_FILE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\.py")


def write_model(req: dict[str, Any]) -> None:
    """The user's config.json, and the folder's other files given, in the scratch model folder."""
    os.makedirs(req["model_dir"], exist_ok=True)
    with open(os.path.join(req["model_dir"], "config.json"), "w", encoding="utf-8") as fh:
        json.dump(req["config"], fh)
    for name, text in (req.get("model_files") or {}).items():
        if name in MODEL_FILES or MODULE_FILE.fullmatch(name):
            with open(os.path.join(req["model_dir"], name), "w", encoding="utf-8") as fh:
                fh.write(str(text))
    if req.get("draft_config") is not None:  # the draft model's folder, beside the model's
        draft = os.path.join(os.path.dirname(req["model_dir"]), "draft")
        os.makedirs(draft, exist_ok=True)
        with open(os.path.join(draft, "config.json"), "w", encoding="utf-8") as fh:
            json.dump(req["draft_config"], fh)


@dataclasses.dataclass
class Prepared:
    """What a child sets up before it reads the command line (a warm server keeps it)."""

    finder: EmptyExtensions
    gpu_packages: GpuPackages
    handler: LogRecords
    platform: Any
    provenance: Provenance
    probes: list[str]


def prepared(req: dict[str, Any]) -> Prepared:
    finder, gpu_packages, handler, platform = prepare(req)
    return Prepared(finder, gpu_packages, handler, platform, Provenance(req["src"]),
                    replace_subprocess_probes())


def answer(req: dict[str, Any], warm: Prepared | None = None) -> dict[str, Any]:
    """The whole engine-mode run for one request (see the module docstring).

    ``warm``: what a warm server prepared and imported before forking this
    request's process; without it the request prepares and imports itself.
    """
    start = time.monotonic()
    out: dict[str, Any] = {"ok": False, "errors": [], "phases": {},
                           "kv_memory_bytes": req.get("kv_memory_bytes"),
                           "kv_memory_range_bytes": req.get("kv_memory_range_bytes"),
                           "gpu_memory_bytes": int(req["gpu"]["memory_bytes"])}
    if warm is None:
        warm = prepared(req)
    else:
        own_scratch(os.path.dirname(req["model_dir"]))
    write_model(req)
    finder, handler, platform, prov = warm.finder, warm.handler, warm.platform, warm.provenance
    imported = time.monotonic()
    try:
        with prov.active():
            argv = list(req["argv"])
            if req.get("logged_args"):
                argv, out["trimmed_configs"] = trim_logged_configs(argv)
            args = parse_serve(argv, req.get("attention_backend"), req.get("entry") or "serve")
            out["quantization"] = getattr(args, "quantization", None)
            out["reasoning_parser"] = getattr(args, "reasoning_parser", None)
            if req.get("without_quantization"):  # the parent says why (the config has none)
                args.quantization = None
            if req.get("without_reasoning_parser"):  # the parent says why (no tokenizer here)
                args.reasoning_parser = None
            out["phases"]["parse"] = round(time.monotonic() - imported, 2)
            config, how = build_config(args, req["model_dir"], req.get("usage", "serve"))
            out["phases"]["config"] = round(time.monotonic() - imported - out["phases"]["parse"], 2)
            out.update(how)
            # the engine prints its config line here, before the runner resolves graphs
            printed = {k: v for k, v in facts(config).items() if k in CONFIG_LINE}
            worker_phase(config, platform, out, req)
            if req.get("memory_plan") and not out["errors"]:
                planned_memory(config, req, out)
        out["facts"] = {**facts(config), **printed, **resolved_graphs(out.get("cudagraph")),
                        "model_runner": model_runner(config),
                        "cudagraph_stage": out.get("cudagraph_stage", "create_engine_config")}
        out["ok"] = True
    except UsageError as err:
        out["usage_error"] = {"exit_code": err.code, "message": str(err)}
    except Exception as err:  # noqa: BLE001 - the release's own error, reported whole
        out["errors"].append({"stage": out.pop("stage", "config"),
                              "error": f"{type(err).__name__}: {err}",
                              "traceback": traceback.format_exc()[-4000:]})
    # the KV lines of the main planning call (the range's calls print their own after it)
    out["logged"] = {**handler.numbers(), **out.pop("printed", {})}
    out["log"] = [r for r in handler.records if r["level"] != "DEBUG"][-300:]
    out["replaced"] = {"compiled_modules": sorted(set(finder.hits)), "in_process": warm.probes,
                       "arguments": out.get("replaced_args") or {},
                       **warm.gpu_packages.report(),
                       "custom_ops_called": sorted(set(MISSING_OPS.called)),
                       "cuda_objects": (out.get("layers") or {}).get("cuda_objects", []),
                       "model_runner_init": [
                           "the release's model runner __init__ (for the attributes its "
                           "methods read) ran on meta "
                           + (f"until it raised {st.stopped}" if st.stopped else "whole")
                           for st in BUILT_RUNNER],
                       "device_count": getattr(platform, "recon_counted", []),
                       "torch_device_queries": getattr(platform, "recon_torch_queries", []),
                       "platform": f"{type(platform).__mro__[1].__module__}."
                                   f"{type(platform).__mro__[1].__name__} (device queries)"}
    decided = time.monotonic()
    out["ran"] = prov.functions()
    out["seconds"] = {"import": round(imported - start, 2),
                      "decide": round(decided - imported, 2), **out.pop("phases"),
                      "provenance": round(time.monotonic() - decided, 2)}
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return out


#: what every request imports first (``parse_serve``): a warm server imports it once
WARM_IMPORTS = ("vllm.entrypoints.cli.serve",)
#: the modules this file imports for a request's config and worker phases, where the release
#: has them: a warm server imports them once too (each request would import them itself)
WORKER_IMPORTS = ("vllm.engine.arg_utils", "vllm.usage.usage_lib",
                  "vllm.distributed.parallel_state", "vllm.model_executor.model_loader.utils",
                  "vllm.model_executor.model_loader", "vllm.v1.worker.gpu_model_runner",
                  "vllm.v1.worker.worker_base", "vllm.v1.core.kv_cache_utils",
                  "vllm.v1.core.kv_cache_planning", "vllm.v1.cudagraph_dispatcher",
                  "vllm.v1.attention.backends.utils")
#: the environment variables that name the scratch folders the release writes caches in
SCRATCH_VARS = {"HOME": "", "TMPDIR": "", "HF_HOME": "hf", "VLLM_CONFIG_ROOT": "vllm-config",
                "VLLM_CACHE_ROOT": "vllm-cache"}


def own_scratch(folder: str, names: dict[str, str] | None = None) -> None:
    """A forked request's own scratch folders, as a cold child's are its own.

    The release caches what it learned in them (the model registry's
    ``modelinfos``); shared, a later request would take another path than a cold one.
    ``names``: the variables and sub-folders (default :data:`SCRATCH_VARS`).
    """
    import tempfile

    for name, sub in (SCRATCH_VARS if names is None else names).items():
        os.environ[name] = os.path.join(folder, sub) if sub else folder
    tempfile.tempdir = None


def _model_modules(architectures: list[str]) -> list[str]:
    """The modules the release's model registry names for ``architectures`` (not imported)."""
    registry = importlib.import_module("vllm.model_executor.models.registry")
    models = getattr(getattr(registry, "ModelRegistry", None), "models", {})
    names = [getattr(models.get(arch), "module_name", None) for arch in architectures]
    return [n for n in names if isinstance(n, str)]


def warm_up(setup: dict[str, Any]) -> tuple[Prepared, dict[str, Any]]:
    """Prepare and import what every request needs, as a request would, under provenance.

    The imports run with the log capture and the provenance hook on, as in a
    request's own child, so a forked request reports the same records and
    functions. Module bodies ask the declared GPU while importing (0.33.0
    asks its capability), so a server serves one GPU (part of its key).
    """
    start = time.monotonic()
    warm = prepared(setup)
    with warm.provenance.active():
        _find(("vllm.utils.argparse_utils", "vllm.utils"), "FlexibleArgumentParser")
        for name in WARM_IMPORTS:
            importlib.import_module(name)
    models = []
    with contextlib.suppress(Exception):  # a request imports them itself (and says why not)
        models = _model_modules(list(setup.get("architectures") or []))
    with warm.provenance.active():
        for name in (*WORKER_IMPORTS, *models):
            with contextlib.suppress(Exception):  # absent in this release, or a request says why
                importlib.import_module(name)
    return warm, {"ready": True, "model_modules": models,
                  "seconds": round(time.monotonic() - start, 2)}


#: the most bytes of one request's answer the server takes from the request's process
ANSWER_CAP = (16 << 20) - 64
_PR_SET_DUMPABLE, _PR_GET_DUMPABLE, _PR_SET_CHILD_SUBREAPER = 4, 3, 36


def _frame(out: Any, nonce: str, data: bytes) -> None:
    """One frame to the supervisor: its length, a newline, then the request's nonce, a
    newline and the answer (only this server holds ``out``: see :func:`_forked_answer`)."""
    payload = nonce.encode("ascii", "replace") + b"\n" + data
    out.write(b"%d\n" % len(payload) + payload)
    out.flush()


def _prctl(option: int, value: int) -> int:
    import ctypes

    return int(ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0))


def _walls() -> None:
    """The server's own walls, before any request runs (a warm server refuses without them).

    Not dumpable: a request's process (the same user) can neither open this process's
    ``/proc/<pid>/mem`` or descriptors nor trace it. A child subreaper: what a request
    double-forks is re-parented here (in the sandbox this process is its PID namespace's
    init anyway), so :func:`_end_all` finds it. ``SIGINT`` ignored: as init, the only
    signal a request could stop it with (a request's process takes the default back).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _prctl(_PR_SET_DUMPABLE, 0)
    if _prctl(_PR_GET_DUMPABLE, 0) != 0:
        raise OSError("the warm server could not make itself undumpable")
    if _prctl(_PR_SET_CHILD_SUBREAPER, 1) != 0:
        raise OSError("the warm server could not become a child subreaper")


def _children() -> list[int]:
    """The processes whose parent is this one (from ``/proc/<pid>/stat``)."""
    me, kids = os.getpid(), []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == me:
            kids.append(int(name))
    return kids


def _end_all() -> None:
    """Kill and reap every process below this one, until none is left.

    Orphans come back to this process (the sandbox's init, or a subreaper), so a process
    that double-forked is a child here once its parent is dead: each round kills the
    children listed and waits for them, and the next round finds what they left.
    """
    while True:
        kids = _children()
        if not kids:
            return
        for pid in kids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in kids:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def _into_request(closing: tuple[int, ...]) -> None:
    """What the forked request's process does before any of its code runs.

    It keeps nothing of the server's channels (the supervisor's request pipe on stdin, the
    frame and event pipes), so what it writes reaches only its own answer pipe; and it
    makes itself dumpable again, so its own ``/proc`` entries are its own, as in a cold
    child (the server stays undumpable).
    """
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    # the release logs to stdout; its records are in the answer, and the server's
    # output file would otherwise grow with every request
    os.dup2(null, 1)
    os.close(null)
    for fd in closing:
        with contextlib.suppress(OSError):
            os.close(fd)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _prctl(_PR_SET_DUMPABLE, 1)


def _forked_answer(req: dict[str, Any], warm: Any,
                   answer_fn: Callable[[dict[str, Any], Any], dict[str, Any]],
                   fork: Callable[[Any], int], closing: tuple[int, ...] = ()) -> bytes:
    """One request in a forked copy of the warm server: nothing it changes outlives it.

    The answer comes only from the request's own pipe; every process the request started
    is killed and reaped before this returns; its scratch folder is removed.
    """
    rfd, wfd = os.pipe()
    pid = fork(warm)
    if pid == 0:
        code = 0
        try:
            os.close(rfd)
            _into_request(closing)
            try:
                result = answer_fn(req, warm)
            except BaseException as err:  # noqa: BLE001 - the parent must always get an answer
                result = _setup_failure(err)
            with os.fdopen(wfd, "wb") as fh:
                fh.write(json.dumps(result, default=str).encode())
        except BaseException:  # noqa: BLE001 - a child never returns into the server loop
            code = 1
        finally:
            os._exit(code)
    os.close(wfd)
    try:
        data, status = _collect(rfd, pid)
    finally:
        os.close(rfd)
        _end_all()
    if req.get("model_dir"):
        shutil.rmtree(os.path.dirname(str(req["model_dir"])), ignore_errors=True)
    if data is None or not data:
        why = "an answer over the cap" if data is None else "no answer"
        data = json.dumps(_setup_failure(RuntimeError(
            f"the request's process ended with status {status} and {why}"))).encode()
    return data


def _collect(rfd: int, pid: int) -> tuple[bytes | None, int]:
    """The request's answer (None: over :data:`ANSWER_CAP`) and its process's exit status.

    The pipe is read while the process runs (an answer may exceed the pipe's buffer); once
    the process is gone, what it left behind is killed, so a process that kept the pipe
    open cannot hold the server, and the pipe ends.
    """
    chunks: list[bytes] = []
    size, status = 0, None
    while True:
        if select.select([rfd], [], [], 0.05)[0]:
            block = os.read(rfd, 1 << 16)
            if not block:
                break
            size += len(block)
            if size <= ANSWER_CAP:
                chunks.append(block)
        if status is None:
            done, code = os.waitpid(pid, os.WNOHANG)
            if done:
                status = code
                _end_all()
    if status is None:
        status = os.waitpid(pid, 0)[1]
    return (b"".join(chunks) if size <= ANSWER_CAP else None), status


def _setup_failure(err: BaseException) -> dict[str, Any]:
    return {"ok": False, "errors": [{"stage": "setup", "error": f"{type(err).__name__}: {err}",
                                     "traceback": traceback.format_exc()[-4000:]}]}


def _fork(warm: Any) -> int:
    return os.fork()


def serve(warm_up_fn: Callable[[dict[str, Any]], tuple[Any, dict[str, Any]]] | None = None,
          answer_fn: Callable[[dict[str, Any], Any], dict[str, Any]] | None = None,
          fork: Callable[[Any], int] = _fork) -> None:
    """Warm mode: the first stdin line sets up and imports; each next line is one request.

    Every answer (and the set-up's own report first) goes to ``result_fd`` as a frame
    (:func:`_frame`) carrying the nonce the supervisor sent with the request. The SGLang
    child serves through the same loop with its own ``warm_up_fn``, ``answer_fn`` and
    ``fork`` (its process guard lets only the loop's own fork through).
    """
    warm_up_fn = warm_up_fn or warm_up
    answer_fn = answer_fn or answer
    setup = json.loads(sys.stdin.readline())
    closing = tuple(fd for fd in (setup.get("result_fd"), setup.get("events_fd"))
                    if isinstance(fd, int))
    with os.fdopen(int(setup["result_fd"]), "wb") as out:
        try:
            warm, ready = warm_up_fn(setup)
            _end_all()  # what the imports started (nothing is left when a request starts)
            _walls()
            gc.freeze()  # each request's collections skip what the imports made
        except BaseException as err:  # noqa: BLE001 - a cold child will give the error
            _frame(out, str(setup.get("nonce", "")), json.dumps(
                {"ready": False, "error": f"{type(err).__name__}: {err}"}, default=str).encode())
            return
        _frame(out, str(setup.get("nonce", "")), json.dumps(ready).encode())
        for line in sys.stdin:
            req = json.loads(line)
            if not isinstance(req, dict) or req.get("quit"):
                return
            nonce = str(req.pop("nonce", ""))
            _frame(out, nonce, _forked_answer(req, warm, answer_fn, fork, closing))


MISSING_OPS = MissingOps()
LOG_RECORDS = LogRecords()


def main() -> None:
    """Read the request on stdin, write the result as JSON on ``result_fd``."""
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0]) == here:
        sys.path.pop(0)  # run as a script: its folder is not an import root
    if sys.argv[1:] == ["--serve"]:
        serve()
        return
    req = json.loads(sys.stdin.read())
    try:
        result = answer(req)
    except BaseException as err:  # noqa: BLE001 - the parent must always get an answer
        result = _setup_failure(err)
    data = json.dumps(result, default=str).encode()
    with os.fdopen(int(req["result_fd"]), "wb") as fh:
        fh.write(data)


if __name__ == "__main__":
    main()
