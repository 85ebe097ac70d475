"""The sandboxed side of SGLang engine mode: the release builds its own ``ServerArgs``.

This file runs inside the OS sandbox (``recon.slicing.sandbox``) as a script,
under the release's own environment (``recon.engine.env``), with the
snapshot's source folder first on ``sys.path``. It depends on the standard
library and on two standard-library-only files of recon, loaded by path
(``child.py`` beside it, which loads ``../slicing/stubs.py``): never through ``sys.path``,
because this folder also holds recon's ``sglang.py``, which would hide the
release's package.

The command line goes through the release's own ``prepare_server_args`` (its
parser, ``--config`` merging, abbreviations, then ``ServerArgs.from_cli_args``);
the release resolves the record the way its launcher does (``__post_init__`` in
the dataclass releases, ``resolve_once`` where the release has it) and checks
it as its engine does at launch (``check_server_args``). Numbers are read from
the record the release built; each decision is attributed to the code that
made it (an assignment during ``__post_init__``, or a ``declare_resolution``
call with the release's own source name).

What it replaces, and nothing else (every replacement is reported):

* the compiled modules the snapshot lists but does not hold: empty modules;
* the GPU-only packages the environment leaves out (``sgl_kernel``,
  ``flashinfer``, ...): recording stand-in modules, as on a server where they
  are installed (their use is listed);
* the device, where the release's code reaches it: ``torch.cuda``'s device
  queries and ``torch.version.cuda`` answer for the declared GPU, and the
  release's own probes that would start ``nvidia-smi`` answer the same numbers;
* processes and connections: refused (listed), never started.

Run with ``--serve`` it is a warm server's child (:mod:`recon.engine.server`):
it prepares and imports once, then forks each request through ``child.serve``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import io
import json
import logging
import os
import resource
import sys
import time
import traceback
import types
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

HERE = os.path.dirname(os.path.abspath(__file__))


def _load(name: str, path: str) -> types.ModuleType:
    """A standard-library-only helper file of recon, loaded by path under a private name."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


if TYPE_CHECKING:  # the same files, as the type checker finds them in the package
    from . import child as vchild
    from . import sglang_pools as vpools
else:
    vchild = _load("recon_engine_child", os.path.join(HERE, "child.py"))
    vpools = _load("recon_engine_sglang_pools", os.path.join(HERE, "sglang_pools.py"))


def jsonable(value: Any) -> Any:
    """A JSON-safe form in which records (dataclasses, msgspec Structs) are dicts of fields.

    The releases keep nested configuration records (``CudaGraphConfig``); as dicts
    a decision's value compares equal to the resolved value it produced.
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    fields = getattr(type(value), "__struct_fields__", None)
    if isinstance(fields, tuple) and not isinstance(value, type):
        return {name: jsonable(getattr(value, name, None)) for name in fields}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return vchild.jsonable(value)


#: audit events refused in engine mode: the release's answer must not depend on them
REFUSED = {"subprocess.Popen": "process", "os.system": "process", "os.posix_spawn": "process",
           "os.spawn": "process", "os.exec": "process", "os.fork": "process",
           "os.forkpty": "process", "socket.connect": "network", "socket.getaddrinfo": "network"}


class NoProcesses:
    """An audit hook: starting a process or opening a connection fails, and is recorded.

    A process start fails as a missing program does (``FileNotFoundError``), so
    the release takes the branch it takes on a machine without ``nvidia-smi``;
    which ones were refused is part of the answer. A warm server's own loop
    forks each request through :meth:`fork`, the one fork let through.

    The hook makes a refusal readable; it does not contain a request (``ctypes`` forks
    past it). What contains one is the warm server's loop (``child.serve``): every
    process a request started, however, is killed before the next request starts.
    """

    def __init__(self) -> None:
        self.refused: list[str] = []
        self.serving = False

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        kind = REFUSED.get(event)
        if kind is None or (self.serving and event == "os.fork"):
            return
        what = event if not args else f"{event} {str(args[0])[:160]}"
        self.refused.append(what)
        if kind == "process":
            raise FileNotFoundError(2, f"recon engine mode starts no process ({what})")
        raise OSError(f"recon engine mode opens no connection ({what})")

    def install(self) -> None:
        sys.addaudithook(self.hook)

    def fork(self) -> int:
        """The warm server's fork of one request (the request's own forks stay refused)."""
        self.serving = True
        try:
            pid = os.fork()
        finally:
            self.serving = False
        return pid


def virtual_cuda(gpu: dict[str, Any], cuda_version: str) -> list[str]:
    """``torch.cuda``'s device queries answer for the declared GPU (the names replaced).

    These are the calls where the release's own probes (``is_cuda``,
    ``get_device_sm``, ``get_device_capability``, the platform classes) reach the
    driver; replacing them here, before the release is imported, makes every
    probe and every ``lru_cache`` of one answer for the same board.
    """
    import torch  # the installed CPU torch

    props = vchild.DeviceProperties(gpu)
    count = int(gpu["count"])
    total = int(gpu["memory_bytes"])
    answers = {
        "is_available": lambda: True,
        "device_count": lambda: count,
        "get_device_capability": lambda device=None: (props.major, props.minor),
        "get_device_name": lambda device=None: props.name,
        "get_device_properties": lambda device=None: props,
        "mem_get_info": lambda device=None: (total, total),
        "current_device": lambda: 0,
    }
    for name, fn in answers.items():
        setattr(torch.cuda, name, fn)
    # torchvision checks once, on import, that it was built for torch's CUDA: let it check
    # the pair as installed, before torch reports the declared version
    with contextlib.suppress(Exception):
        importlib.import_module("torchvision")
    torch.version.cuda = cuda_version
    return [f"torch.cuda.{name}" for name in answers] + [f"torch.version.cuda = {cuda_version!r}"]


def replace_smi_probes(gpu: dict[str, Any]) -> list[str]:
    """The release's probes that start ``nvidia-smi``, answering the declared GPU (found by name).

    ``get_nvgpu_memory_capacity`` returns the smallest ``memory.total`` in MiB of
    the visible GPUs; ``get_device_sm_nvidia_smi`` the first GPU's compute
    capability. Releases without them are left alone.
    """
    common = importlib.import_module("sglang.srt.utils.common")
    mib = float(int(gpu["memory_bytes"]) >> 20)
    done = []
    if callable(getattr(common, "get_nvgpu_memory_capacity", None)):
        common.get_nvgpu_memory_capacity = lambda: mib  # type: ignore[attr-defined]
        done.append(f"sglang.srt.utils.common.get_nvgpu_memory_capacity (nvidia-smi): {mib:.0f} MiB")
    if callable(getattr(common, "get_device_sm_nvidia_smi", None)):
        cap = (int(gpu["major"]), int(gpu["minor"]))
        common.get_device_sm_nvidia_smi = lambda: cap  # type: ignore[attr-defined]
        done.append(f"sglang.srt.utils.common.get_device_sm_nvidia_smi (nvidia-smi): {cap}")
    return done


class SglangLogs(vchild.LogRecords):
    """The release's log records (``sglang`` loggers), whatever handlers it sets up."""

    def install(self) -> None:
        original = logging.Logger.handle
        keep = self

        def handle(logger: logging.Logger, record: logging.LogRecord) -> None:
            if record.name == "sglang" or record.name.startswith(("sglang.", "__main__")):
                keep.emit(record)
            original(logger, record)

        logging.Logger.handle = handle  # type: ignore[method-assign, assignment]


class Decisions(vchild.Provenance):
    """The functions that ran, plus every ``declare_resolution`` call with its caller.

    Releases with a resolution pipeline record each decision as
    ``declare_resolution(server_args, source, **fields)``; the trace hook sees
    that call (its arguments and the line that made it) without changing it.
    """

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.watched: set[types.CodeType] = set()
        self.declared: list[dict[str, Any]] = []

    def watch(self, fn: Any) -> None:
        code = getattr(fn, "__code__", None)
        if code is not None:
            self.watched.add(code)

    def _hook(self, frame: types.FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        self.codes.add(code)
        if code in self.watched:
            local = frame.f_locals
            caller = frame.f_back
            self.declared.append({
                "source": str(local.get("source")),
                "fields": {k: jsonable(v) for k, v in dict(local.get("fields") or {}).items()},
                "at": self.site(caller)})

    def site(self, frame: types.FrameType | None) -> dict[str, Any]:
        """``file`` (relative to the snapshot), ``line`` and ``function`` of a frame."""
        if frame is None:
            return {}
        name = frame.f_code.co_filename
        return {"file": name[len(self.root):] if name.startswith(self.root) else name,
                "line": frame.f_lineno,
                "function": getattr(frame.f_code, "co_qualname", frame.f_code.co_name)}

    def defined(self, qualname: str) -> dict[str, Any] | None:
        """Where a function that ran is defined (by qualname or its last part)."""
        for code in self.codes:
            name = getattr(code, "co_qualname", code.co_name)
            if (name == qualname or name.endswith("." + qualname)) and \
                    code.co_filename.startswith(self.root):
                return {"file": code.co_filename[len(self.root):], "line": code.co_firstlineno,
                        "function": name}
        return None


class Assignments:
    """Assignments to a dataclass ``ServerArgs``'s fields during ``__post_init__``.

    The class's ``__setattr__`` is wrapped while the release resolves (dataclass
    releases decide by assigning to ``self``); each change of value is kept
    with the function and line that made it.
    """

    def __init__(self, cls: type, fields: set[str], where: Decisions) -> None:
        self.cls, self.fields, self.where = cls, fields, where
        self.records: list[dict[str, Any]] = []
        self.given: dict[str, Any] = {}
        self.active = False

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        cls, keep = self.cls, self
        setattr_before, post_before = cls.__dict__.get("__setattr__"), cls.__dict__["__post_init__"]
        inherited: Any = cls.__setattr__

        def __setattr__(obj: Any, name: str, value: Any) -> None:  # noqa: N807 - the hook's own name
            if keep.active and name in keep.fields:
                old = jsonable(obj.__dict__.get(name))
                new = jsonable(value)
                if old != new:
                    keep.records.append({"field": name, "from": old, "to": new,
                                         "at": keep.where.site(sys._getframe(1))})
            inherited(obj, name, value)

        def __post_init__(obj: Any) -> None:  # noqa: N807
            keep.given = {name: jsonable(obj.__dict__.get(name)) for name in keep.fields}
            keep.active = True
            try:
                post_before(obj)
            finally:
                keep.active = False

        cls.__setattr__ = __setattr__  # type: ignore[method-assign, assignment]
        cls.__post_init__ = __post_init__  # type: ignore[attr-defined]
        try:
            yield
        finally:
            cls.__post_init__ = post_before  # type: ignore[attr-defined]
            if setattr_before is None:
                del cls.__setattr__
            else:
                cls.__setattr__ = setattr_before  # type: ignore[method-assign]


class UsageError(vchild.UsageError):
    """The release's parser refused the command line."""


class Lacking(Exception):
    """The release lacks what engine mode runs (not an error of the release)."""


@contextlib.contextmanager
def parsed_namespace(model_dir: str, seen: dict[str, Any],
                     draft_dir: str | None = None) -> Iterator[None]:
    """See the namespace the release's parser returns; its model path becomes the scratch folder.

    The first ``parse_args`` whose namespace has ``model_path`` is the server's
    (``prepare_server_args`` builds one parser): its parser, a copy of the
    namespace as parsed, and the model the user named are kept; with a draft
    model's config given, the draft model path becomes its scratch folder too. A
    parser that exits (an unknown flag, a bad value) is the release's usage error.
    """
    original = argparse.ArgumentParser.parse_args

    def parse_args(parser: argparse.ArgumentParser, args: Any = None, namespace: Any = None) -> Any:
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                ns = original(parser, args, namespace)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
            raise UsageError(code, err.getvalue().strip()) from None
        if hasattr(ns, "model_path") and "namespace" not in seen:
            seen.update(parser=parser, namespace=copy.deepcopy(vars(ns)), model=ns.model_path)
            ns.model_path = model_dir
            if draft_dir and getattr(ns, "speculative_draft_model_path", None):
                seen["draft"] = ns.speculative_draft_model_path
                ns.speculative_draft_model_path = draft_dir
        return ns

    argparse.ArgumentParser.parse_args = parse_args  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        argparse.ArgumentParser.parse_args = original  # type: ignore[method-assign]


def _option_of(parser: argparse.ArgumentParser, word: str) -> argparse.Action | None:
    """The action the release's parser gives an option word (abbreviations as it resolves them)."""
    if not word.startswith("-") or word == "-":
        return None
    try:
        found: Any = parser._parse_optional(word)  # noqa: SLF001 - the parser's own resolution
    except SystemExit:  # an ambiguous abbreviation: the first parse would have refused it
        return None
    if isinstance(found, list):  # Python 3.12+: every match
        found = found[0] if len(found) == 1 else None
    return found[0] if isinstance(found, tuple) and found[0] is not None else None


def without_speculative(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[list[str],
                                                                                 list[str]]:
    """``argv`` without the options whose destination is a ``speculative_*`` field, and those.

    The release's parser names the options and their arities: the same command
    line with speculative decoding left out, for the pools without the draft.
    """
    out: list[str] = []
    dropped: list[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        action = _option_of(parser, word.split("=", 1)[0])
        if action is None or not action.dest.startswith("speculative_"):
            out.append(word)
            i += 1
            continue
        dropped.append(word)
        i += 1
        if "=" in word:
            continue
        nargs = action.nargs
        if nargs is None:
            takes = 1
        elif isinstance(nargs, int):
            takes = nargs
        elif nargs == "?":
            takes = 1 if i < len(argv) and not argv[i].startswith("-") else 0
        else:  # "*", "+": up to the next option
            takes = next((j for j in range(i, len(argv)) if argv[j].startswith("-")),
                         len(argv)) - i
        dropped += argv[i:i + takes]
        i += takes
    return out, dropped


def server_argv(entry: str, argv: list[str]) -> list[str]:
    """The arguments ``prepare_server_args`` gets, as the release's own entry point passes them.

    ``launch_server``: as typed. ``serve``: through the release's own ``sglang
    serve`` steps where it has them (the ``--model-type`` selector taken out, a
    positional model turned into ``--model-path``).
    """
    if entry != "serve":
        return list(argv)
    serve = importlib.import_module("sglang.cli.serve")
    extract = getattr(serve, "_extract_model_type_override", None)
    if callable(extract):
        model_type, argv = extract(list(argv))
        if str(model_type) not in ("auto", "llm", "None"):
            raise UsageError(2, f"--model-type {model_type}: engine mode answers the language "
                                "model server only")
    normalize = getattr(serve, "_normalize_positional_model_path", None)
    if callable(normalize):
        argv, _ = normalize(list(argv))
    return list(argv)


def field_names(cls: type) -> list[str]:
    """The record's fields: a dataclass's, or a msgspec Struct's ``__struct_fields__``."""
    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls)]
    return list(getattr(cls, "__struct_fields__", ()))


def build(req: dict[str, Any], dec: Decisions) -> tuple[Any, dict[str, Any], Assignments | None]:
    """The release's ``ServerArgs`` for the command, resolved as its launcher resolves it.

    Returns the record, what the parser saw (parser, namespace, model) and, for
    dataclass releases, the assignments made while it resolved.
    """
    module = importlib.import_module("sglang.srt.server_args")
    cls: type = module.ServerArgs
    prepare = getattr(module, "prepare_server_args", None)
    if not callable(prepare):
        raise Lacking("this release has no sglang.srt.server_args.prepare_server_args")
    overrides = sys.modules.get("sglang.srt.arg_groups.overrides") or \
        _optional("sglang.srt.arg_groups.overrides")
    if overrides is not None:
        dec.watch(getattr(overrides, "declare_resolution", None))
    argv = server_argv(req.get("entry", "launch_server"), list(req["argv"]))
    seen: dict[str, Any] = {}
    fields = set(field_names(cls))
    assigned = Assignments(cls, fields, dec) if "__post_init__" in cls.__dict__ and \
        dataclasses.is_dataclass(cls) else None
    with parsed_namespace(req["model_dir"], seen, req.get("draft_dir")), \
            (assigned.installed() if assigned else contextlib.nullcontext()):
        server_args = prepare(argv)
        resolve = getattr(server_args, "resolve_once", None)
        if callable(resolve):
            resolve()
    return server_args, seen, assigned


def _optional(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def launch_check(server_args: Any) -> dict[str, Any]:
    """The release's ``check_server_args``, which its engine runs before it starts anything."""
    check = getattr(server_args, "check_server_args", None)
    if not callable(check):
        return {"ran": False}
    try:
        check()
    except Exception as err:  # noqa: BLE001 - the release refuses to launch: reported
        return {"ran": True, "ok": False, "error": f"{type(err).__name__}: {err}"[:1000]}
    return {"ran": True, "ok": True}


def resolved_values(server_args: Any) -> dict[str, Any]:
    """Every field as the release resolved it (its own ``resolved_dict`` where it has one)."""
    own = getattr(server_args, "resolved_dict", None)
    if callable(own):
        return {k: jsonable(v) for k, v in own().items()}
    return {name: jsonable(getattr(server_args, name, None))
            for name in field_names(type(server_args))}


def parser_defaults(parser: argparse.ArgumentParser | None, fields: list[str]) -> dict[str, Any]:
    """The parser's default of each field that has a flag of its name (SUPPRESS: none)."""
    if parser is None:
        return {}
    dests = {a.dest for a in parser._actions}  # noqa: SLF001 - argparse keeps them here
    return {name: jsonable(parser.get_default(name)) for name in fields
            if name in dests and parser.get_default(name) is not argparse.SUPPRESS}


def declared_defaults(cls: type) -> dict[str, Any]:
    """The record's own field defaults (dataclass fields, or a msgspec Struct's).

    A flag whose destination is not the field's name (0.5.10's
    ``--tensor-parallel-size`` fills ``tp_size`` in ``from_cli_args``) has no parser
    default under the field; the class's declared default stands for it.
    """
    if dataclasses.is_dataclass(cls):
        out = {}
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                out[f.name] = jsonable(f.default)
            elif f.default_factory is not dataclasses.MISSING:
                out[f.name] = jsonable(f.default_factory())
        return out
    names = tuple(getattr(cls, "__struct_fields__", ()))
    values = tuple(getattr(cls, "__struct_defaults__", ()))
    out = {}
    for name, value in zip(names[len(names) - len(values):], values, strict=True):
        factory = getattr(value, "factory", None)
        if callable(factory):
            out[name] = jsonable(factory())
        elif type(value).__name__ != "NoDefaultType":
            out[name] = jsonable(value)
    return out


def deciders(dec: Decisions, assigned: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per field, the release's decisions in order: who decided, where, and the value."""
    out: dict[str, list[dict[str, Any]]] = {}
    for rec in assigned:
        at = rec["at"]
        out.setdefault(rec["field"], []).append(
            {"by": at.get("function"), "file": at.get("file"), "line": at.get("line"),
             "value": rec["to"]})
    for rec in dec.declared:
        where = dec.defined(rec["source"]) or rec["at"]
        for name, value in rec["fields"].items():
            out.setdefault(name, []).append(
                {"by": rec["source"], "file": where.get("file"), "line": where.get("line"),
                 "value": value, "declared_at": rec["at"]})
    return out


def declared_fallbacks(cls: type) -> dict[str, Any]:
    """Fields whose ``None`` reads as a declared fallback value (releases that declare them).

    Such a field changes without any decision: the release's ``resolution_result``
    reads the fallback its field declaration names (``arg_utils.fallbacks_of``).
    """
    arg_utils = _optional("sglang.srt.arg_groups.arg_utils")
    find = getattr(arg_utils, "fallbacks_of", None)
    if not callable(find):
        return {}
    try:
        return {k: jsonable(v) for k, v in find(cls).items()}
    except Exception:  # noqa: BLE001 - a release whose hints do not resolve: no fallbacks named
        return {}


def changes(final: dict[str, Any], given: dict[str, Any], defaults: dict[str, Any],
            decided: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """The fields whose value differs from its default, and what changed each.

    ``flag``: the command line gave a value other than the default; ``resolution``:
    the release changed the value it was given while resolving (the last decision
    whose value is the final one is named).
    """
    out: dict[str, dict[str, Any]] = {}
    for name, value in final.items():
        base = defaults.get(name, given.get(name))
        start = given.get(name, base)
        if value == base and start == base:
            continue
        how = []
        if name in defaults and start != defaults[name]:
            how.append("flag")
        entry: dict[str, Any] = {"value": value, "default": base, "given": start}
        if value != start:
            how.append("resolution")
            made = [d for d in decided.get(name, []) if d["value"] == value]
            if made:
                entry["decided_by"] = made[-1]
        entry["changed_by"] = how or ["resolution"]
        out[name] = entry
    return out


def given_values(server_args: Any, assigned: Assignments | None,
                 namespace: dict[str, Any]) -> dict[str, Any]:
    """Each field as the release received it, before it resolved anything.

    The release's own record of it where it keeps one (``_raw_input``), else the
    fields as ``__post_init__`` found them, else the parsed namespace.
    """
    raw = getattr(server_args, "_raw_input", None)
    if isinstance(raw, dict):
        return {k: jsonable(v) for k, v in raw.items()}
    if assigned is not None and assigned.given:
        return dict(assigned.given)
    return {k: jsonable(v) for k, v in namespace.items()}


@dataclasses.dataclass
class Prepared:
    """What a child sets up before it reads the command line (a warm server keeps it).

    The import hooks, the log capture, the virtual device, the process guard,
    the release's ``nvidia-smi`` probes answered, and the recorder of decisions
    and functions (on while a warm server imports, as a cold child's imports run
    under it too).
    """

    finder: Any
    gpu_packages: Any
    logs: SglangLogs
    device: list[str]
    guard: NoProcesses
    probes: list[str]
    decisions: Decisions


def prepare(setup: dict[str, Any]) -> Prepared:
    """Import hooks, logs, the virtual device and the process refusal (no command line yet)."""
    vchild.MISSING_OPS.install()
    finder = vchild.EmptyExtensions(list(setup.get("compiled", [])))
    sys.meta_path.insert(0, finder)
    gpu_packages = vchild.GpuPackages(list(setup.get("gpu_modules", [])))
    sys.meta_path.append(gpu_packages)
    sys.path.insert(0, setup["src"])
    vchild.install_metadata(setup)
    logs = SglangLogs()
    logs.install()
    device = virtual_cuda(dict(setup["gpu"]), str(setup.get("cuda_version") or "12.8"))
    guard = NoProcesses()
    guard.install()
    probes = replace_smi_probes(dict(setup["gpu"]))
    return Prepared(finder, gpu_packages, logs, device, guard, probes, Decisions(setup["src"]))


def write_models(req: dict[str, Any]) -> None:
    """The user's ``config.json`` (and the draft's) in the request's scratch model folders.

    The draft's folder lies beside the model's (``draft``), for a cold child
    and for each request of a warm server alike.
    """
    os.makedirs(req["model_dir"], exist_ok=True)
    with open(os.path.join(req["model_dir"], "config.json"), "w", encoding="utf-8") as fh:
        json.dump(req["config"], fh)
    if req.get("draft_config") is not None:
        req["draft_dir"] = os.path.join(os.path.dirname(req["model_dir"]), "draft")
        os.makedirs(req["draft_dir"], exist_ok=True)
        with open(os.path.join(req["draft_dir"], "config.json"), "w", encoding="utf-8") as fh:
            json.dump(req["draft_config"], fh)
    else:
        req["draft_dir"] = None


#: what a request imports while it decides (the parser and ``ServerArgs``; the pools' model
#: config and runner): a warm server imports them once, under the same recorder
WARM_IMPORTS = ("sglang.srt.server_args", "sglang.srt.arg_groups.overrides",
                "sglang.srt.configs.model_config", "sglang.srt.runtime_context",
                "sglang.srt.distributed.bootstrap", "sglang.srt.models.registry",
                "sglang.srt.model_executor.model_runner",
                "sglang.srt.model_executor.model_runner_components.layer_setup",
                "sglang.srt.model_executor.model_runner_components.load_model_utils",
                "sglang.srt.speculative.spec_info", "sglang.srt.mem_cache.kv_cache_configurator",
                "sglang.srt.model_executor.runner.base_cuda_graph_runner",
                "sglang.srt.model_executor.cuda_graph_config")
#: the scratch variables of a forked request (see ``child.own_scratch``)
SCRATCH_VARS = {"HOME": "", "TMPDIR": "", "HF_HOME": "hf"}


def warm_up(setup: dict[str, Any]) -> tuple[Prepared, dict[str, Any]]:
    """Prepare and import what requests need, as a cold child would, under the recorder."""
    start = time.monotonic()
    warm = prepare(setup)
    imported = []
    with warm.decisions.active():
        for name in WARM_IMPORTS:
            with contextlib.suppress(Exception):  # absent in this release: a request says why
                importlib.import_module(name)
                imported.append(name)
    return warm, {"ready": True, "imported": imported,
                  "seconds": round(time.monotonic() - start, 2)}


def _restore_model(value: Any, scratch: str, model: Any) -> Any:
    """The user's model name where the release wrote the scratch folder's path."""
    if isinstance(value, str) and scratch in value:
        return value.replace(scratch, str(model))
    if isinstance(value, list):
        return [_restore_model(v, scratch, model) for v in value]
    if isinstance(value, dict):
        return {k: _restore_model(v, scratch, model) for k, v in value.items()}
    return value


def decide(req: dict[str, Any], out: dict[str, Any],
           dec: Decisions) -> tuple[Any, argparse.ArgumentParser | None]:
    """Parse, resolve and check; the resolved fields and what changed them go into ``out``.

    Returns the record and the release's parser (None where it built none).
    """
    lap = time.monotonic()
    server_args, seen, assigned = build(req, dec)
    out["phases"]["resolve"] = round(time.monotonic() - lap, 2)
    out["launch_check"] = launch_check(server_args)
    scratch, model = req["model_dir"], seen.get("model")
    names = field_names(type(server_args))
    final = _restore_model(resolved_values(server_args), scratch, model)
    given = _restore_model(given_values(server_args, assigned, seen.get("namespace", {})),
                           scratch, model)
    if seen.get("draft"):
        final = _restore_model(final, str(req["draft_dir"]), seen["draft"])
        given = _restore_model(given, str(req["draft_dir"]), seen["draft"])
    given = {k: v for k, v in given.items() if k in names}
    defaults = {**declared_defaults(type(server_args)), **parser_defaults(seen.get("parser"), names)}
    decided = _restore_model(deciders(dec, assigned.records if assigned else []), scratch, model)
    for name, value in declared_fallbacks(type(server_args)).items():
        if name not in decided and final.get(name) == value and given.get(name) is None:
            decided[name] = [{"by": "the field's declared fallback (arg_utils.fallbacks_of)",
                              "value": value}]
    out["server_args"] = final
    out["changed"] = changes(final, given, defaults, decided)
    out["decisions"] = {k: v for k, v in decided.items() if k in out["changed"]}
    out["resolution"] = ("ServerArgs.resolve_once" if callable(getattr(server_args, "resolve_once",
                                                                       None))
                         else "ServerArgs.__post_init__")
    out["record_class"] = f"{type(server_args).__module__}.{type(server_args).__qualname__}"
    return server_args, seen.get("parser")


def pools_without_draft(req: dict[str, Any], parser: argparse.ArgumentParser, dec: Decisions,
                        logs: Any) -> dict[str, Any]:
    """The same command line without its speculative options, sized at the first figure."""
    argv, dropped = without_speculative(parser, list(req["argv"]))
    if not dropped:
        return {"argv": argv, "dropped": [], "error": "no option of the command line sets a "
                "speculative_* field (speculative decoding comes from elsewhere)"}
    try:
        plain, _, _ = build({**req, "argv": argv, "draft_dir": None}, dec)
        if getattr(plain, "speculative_algorithm", None):
            raise Lacking(f"without {' '.join(dropped)} the release still resolves "
                          f"speculative_algorithm={plain.speculative_algorithm}")
        memory = req["memory"]
        first = {"available_gb": memory["available_gb"][:1],
                 "pre_load_gb": memory["pre_load_gb"][:1]}
        sized = vpools.pools(plain, first, logs)
    except (Exception, UsageError) as err:  # noqa: BLE001 - the derived line, not the user's
        return {"argv": argv, "dropped": dropped,
                "error": f"{type(err).__name__}: {err}"[:600]}
    return {"argv": argv, "dropped": dropped, "point": sized["points"][0]}


def answer(req: dict[str, Any], warm: Prepared | None = None) -> dict[str, Any]:
    """The whole SGLang engine-mode run for one request (see the module docstring).

    ``warm``: what a warm server prepared and imported before forking this
    request's process; without it the request prepares and imports itself.
    """
    start = time.monotonic()
    out: dict[str, Any] = {"ok": False, "errors": [], "phases": {}}
    if warm is None:
        warm = prepare(req)
    else:
        vchild.own_scratch(os.path.dirname(req["model_dir"]), SCRATCH_VARS)
    write_models(req)
    imported = time.monotonic()
    dec, logs = warm.decisions, warm.logs
    stage = "server_args"
    try:
        with dec.active():
            server_args, parser = decide(req, out, dec)
            if req.get("memory"):
                stage = "pools"
                out["pools"] = vpools.pools(server_args, req["memory"], logs)
                if req["memory"].get("without_draft") and parser is not None and \
                        getattr(server_args, "speculative_algorithm", None):
                    out["pools_without_draft"] = pools_without_draft(req, parser, dec, logs)
        out["ok"] = True
    except UsageError as err:
        out["usage_error"] = {"exit_code": err.code, "message": str(err)}
    except (Lacking, vpools.Lacking) as err:
        out["not_applicable"] = str(err)
    except Exception as err:  # noqa: BLE001 - the release's own error, reported whole
        out["errors"].append({"stage": stage, "error": f"{type(err).__name__}: {err}",
                              "traceback": traceback.format_exc()[-4000:]})
    out["log"] = [r for r in logs.records if r["level"] != "DEBUG"][-300:]
    out["replaced"] = {
        "compiled_modules": sorted(set(warm.finder.hits)),
        **warm.gpu_packages.report(),
        "custom_ops_called": sorted(set(vchild.MISSING_OPS.called)),
        "device": warm.device + warm.probes,
        "refused": sorted(set(warm.guard.refused)),
        "pools": out.get("pools", {}).pop("replaced", [])}
    out.get("pools_without_draft", {}).pop("replaced", None)
    out["ran"] = dec.functions()
    out["seconds"] = {"import": round(imported - start, 2),
                      "decide": round(time.monotonic() - imported, 2), **out.pop("phases")}
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return out


def main() -> None:
    """Read the request on stdin, write the result as JSON on ``result_fd``."""
    if sys.path and os.path.abspath(sys.path[0]) == HERE:
        sys.path.pop(0)  # run as a script: this folder (recon's sglang.py) is no import root
    if sys.argv[1:] == ["--serve"]:
        vchild.serve(warm_up, answer, fork=lambda warm: warm.guard.fork())
        return
    req = json.loads(sys.stdin.read())
    try:
        result = answer(req)
    except BaseException as err:  # noqa: BLE001 - the parent must always get an answer
        result = {"ok": False, "errors": [{"stage": "setup", "error": f"{type(err).__name__}: "
                                           f"{err}", "traceback": traceback.format_exc()[-4000:]}]}
    data = json.dumps(result, default=str).encode()
    with os.fdopen(int(req["result_fd"]), "wb") as fh:
        fh.write(data)


if __name__ == "__main__":
    main()
