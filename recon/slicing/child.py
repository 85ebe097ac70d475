"""The child process of ``recon run``: load the slice, build inputs, call, report.

Standard library only (plus whatever ``--real`` names). The runner copies this
package's runtime files (this file, ``stubs.py``, ``hfconfig.py``,
``guard.py``) next to the slice in a read-only folder and starts
``python -I -B`` on :func:`main` with the request as JSON on stdin, inside the
OS sandbox (``sandbox.py``). The result goes back as JSON on a dedicated pipe
(``result_fd``), never on stdout, which belongs to the slice's own prints; the
guard's refusals go out as they happen on a second pipe (``events_fd``). The
parent treats both as untrusted data: the slice runs in this same process and
could write either.

Order matters: real packages are imported *before* the guard is sealed (they
load native code), the slice's pieces run *after* it (they are untrusted).
"""

from __future__ import annotations

import dataclasses
import enum
import errno
import faulthandler
import importlib
import importlib.util
import inspect
import json
import math
import os
import signal
import sys
import time
import traceback
import types
from typing import Any

from .guard import Guard
from .hfconfig import ConfigKeyError, HFConfig
from .stubs import (
    RECORDER,
    ForbiddenStubReached,
    SliceDefinitionError,
    Stub,
    StubFactory,
    StubValueError,
    install,
)

_MAX_ITEMS = 2000


# -- turning results into JSON ------------------------------------------------------
def jsonable(obj: Any, depth: int = 0) -> Any:
    """A JSON-able picture of ``obj``: tensors become nested lists, enums their name."""
    if depth > 8:
        return repr(obj)[:200]
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else repr(obj)
    if isinstance(obj, Stub):
        return repr(obj)
    if isinstance(obj, enum.Enum):
        return f"{type(obj).__name__}.{obj.name}"
    if isinstance(obj, HFConfig):
        return obj.to_dict()
    if isinstance(obj, (list, tuple)):
        return [jsonable(x, depth + 1) for x in list(obj)[:_MAX_ITEMS]]
    if isinstance(obj, (set, frozenset)):
        items = [jsonable(x, depth + 1) for x in list(obj)[:_MAX_ITEMS]]
        try:
            return sorted(items)
        except TypeError:
            return items
    if isinstance(obj, dict):
        return {str(k): jsonable(v, depth + 1) for k, v in list(obj.items())[:_MAX_ITEMS]}
    tolist = getattr(type(obj), "tolist", None)
    if tolist is not None and hasattr(obj, "shape") and hasattr(obj, "dtype"):
        try:
            return jsonable(obj.tolist(), depth + 1)
        except Exception:  # a meta tensor, a stub ...
            return repr(obj)[:200]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: jsonable(getattr(obj, f.name, None), depth + 1)
                for f in dataclasses.fields(obj)}
    if isinstance(obj, types.SimpleNamespace):
        return {k: jsonable(v, depth + 1) for k, v in vars(obj).items()}
    if isinstance(obj, (types.FunctionType, types.MethodType, type, types.ModuleType)):
        return repr(obj)
    return repr(obj)[:500]


def describe(obj: Any) -> str:
    """Type description shown next to a value: ``Tensor[int64, (2,)]``, ``list``, ..."""
    if isinstance(obj, Stub):
        return "stub"
    shape = getattr(obj, "shape", None)
    dtype = getattr(obj, "dtype", None)
    if shape is not None and dtype is not None and hasattr(type(obj), "tolist"):
        return f"{type(obj).__name__}[{str(dtype).replace('torch.', '')}, {tuple(shape)}]"
    if isinstance(obj, (tuple, list)):
        return f"{type(obj).__name__}[{', '.join(describe(x) for x in list(obj)[:12])}]"
    return type(obj).__name__


# -- errors -----------------------------------------------------------------------
def _slice_site(tb: Any) -> str:
    site = ""
    for frame, line in traceback.walk_tb(tb):
        if frame.f_code.co_filename in RECORDER.slice_files:
            site = f"{frame.f_code.co_filename}:{line}"
    return site


def _error(err: BaseException) -> dict[str, Any]:
    kind = "exception"
    if isinstance(err, ForbiddenStubReached):
        kind = "forbidden"
    elif isinstance(err, ConfigKeyError):
        kind = "config_key"
    elif isinstance(err, StubValueError):
        kind = "stub_value"
    elif isinstance(err, SliceDefinitionError):
        kind = "undefined"
    elif isinstance(err, MemoryError):
        kind = "memory"
    elif isinstance(err, RecursionError):
        kind = "recursion"
    elif isinstance(err, PermissionError) and "recon sandbox" in str(err):
        kind = "sandbox"
    elif isinstance(err, OSError) and err.errno == errno.EFBIG:
        kind = "file_size"
    out = {"kind": kind, "type": type(err).__name__, "message": str(err)[:4000],
           "site": _slice_site(err.__traceback__),
           "traceback": "".join(traceback.format_exception(err))[-8000:]}
    if isinstance(err, ConfigKeyError):
        out["key"] = err.key
        out["where"] = err.where
    return out


# -- inputs -------------------------------------------------------------------------
class Inputs:
    """Evaluates ``{"json": v}`` / ``{"py": "expr"}`` values in one shared namespace."""

    def __init__(self, namespace: dict[str, Any]) -> None:
        self.ns = namespace

    def value(self, spec: dict[str, Any]) -> Any:
        if "py" in spec:
            return eval(compile(spec["py"], "<recon input>", "eval"), self.ns)  # noqa: S307 - the user's own expression
        return spec["json"]


def _build_self(owner: Any, attrs: dict[str, Any]) -> Any:
    """A minimal instance: no ``__init__`` (it would need the whole engine), then attrs."""
    abstract = getattr(owner, "__abstractmethods__", None)
    if abstract:
        owner.__abstractmethods__ = frozenset()
    inst: Any
    try:
        inst = object.__new__(owner)
    except TypeError:
        inst = owner.__new__(owner)
    finally:
        if abstract:
            owner.__abstractmethods__ = abstract
    for name, value in attrs.items():
        if hasattr(inst, "__dict__"):
            inst.__dict__[name] = value
        else:
            object.__setattr__(inst, name, value)
    return inst


def _self_picture(inst: Any) -> dict[str, Any]:
    try:
        data = dict(vars(inst))
    except TypeError:
        return {}
    return {k: jsonable(v) for k, v in data.items()}


def _mutations(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for key in sorted(set(before) | set(after)):
        if key not in after:
            out.append({"attr": key, "change": "deleted", "before": before[key], "after": None})
        elif key not in before:
            out.append({"attr": key, "change": "added", "before": None, "after": after[key]})
        elif before[key] != after[key]:
            out.append({"attr": key, "change": "changed", "before": before[key],
                        "after": after[key]})
    return out


class _Tracer:
    """Which functions of the slice ran (``sys.setprofile``, calls only)."""

    def __init__(self) -> None:
        self.ran: set[tuple[str, int, str]] = set()

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            if code.co_filename in RECORDER.slice_files:
                self.ran.add((code.co_filename, code.co_firstlineno,
                              getattr(code, "co_qualname", code.co_name)))


def _unknown_names(sig: inspect.Signature | None, args: dict[str, Any]) -> list[str]:
    """Keyword arguments ``sig`` cannot take (none when it has ``**kwargs`` or is unknown).

    Only names are checked: a missing argument stays the function's own TypeError,
    as some calls are made only so that the slice holds their code.
    """
    if sig is None or any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        return []
    takes = {n for n, p in sig.parameters.items() if p.kind is not p.POSITIONAL_ONLY}
    return sorted(a for a in args if a not in takes)


def _bound_callable(owner: Any, obj: Any, method_name: str,
                    self_attrs: dict[str, Any]) -> tuple[Any, Any]:
    """(instance or None, what to call): a method runs on a minimal instance of its class."""
    if owner is not None and (self_attrs or not isinstance(obj, (staticmethod, classmethod))):
        inst = _build_self(owner, self_attrs)
        return inst, getattr(inst, method_name)
    if owner is not None:
        return None, getattr(owner, method_name)
    return None, obj


def _call_one(finder: Any, call: dict[str, Any], inputs: Inputs,
              config: HFConfig | None) -> dict[str, Any]:
    qualname = call["target"]
    out: dict[str, Any] = {"target": qualname, "ok": False}
    try:
        owner, obj = finder.load(qualname)
    except BaseException as err:
        out["error"] = _error(err)
        out["error"]["kind"] = "load" if out["error"]["kind"] == "exception" \
            else out["error"]["kind"]
        return out
    self_attrs = {k: inputs.value(v) for k, v in call.get("self", {}).items()}
    inst, func = _bound_callable(owner, obj, qualname.rpartition(".")[2], self_attrs)
    args = {k: inputs.value(v) for k, v in call.get("args", {}).items()}
    positional = [inputs.value(v) for v in call.get("positional", [])]
    try:
        sig: inspect.Signature | None = inspect.signature(func)
    except (TypeError, ValueError):
        sig = None
    params = sig.parameters if sig is not None else {}
    if config is not None:
        for name in ("config", "hf_config"):
            if name in params and name not in args and not positional:
                args[name] = config
    unknown = _unknown_names(sig, args)
    if unknown:  # a name the function does not take is the caller's typo, not the function's error
        refused = TypeError(f"no parameter named {', '.join(map(repr, unknown))}")
        out["error"] = {**_error(refused), "kind": "arguments", "message": f"{refused}; it takes {sig}"}
        return out
    before = _self_picture(inst) if inst is not None else {}
    tracer = _Tracer()
    start = time.perf_counter()
    sys.setprofile(tracer)
    try:
        value = func(*positional, **args)
    except BaseException as err:
        sys.setprofile(None)
        out["error"] = _error(err)
        if isinstance(err, (KeyboardInterrupt, SystemExit)):
            out["error"]["kind"] = "exit"
    else:
        sys.setprofile(None)
        out["ok"] = True
        out["value"] = jsonable(value)
        out["value_type"] = describe(value)
        out["value_repr"] = repr(value)[:4000]
    out["seconds"] = round(time.perf_counter() - start, 6)
    if inst is not None:
        after = _self_picture(inst)
        out["self_before"] = before
        out["self_after"] = after
        out["mutations"] = _mutations(before, after)
    out["ran"] = sorted([list(r) for r in tracer.ran])
    return out


def _patch_real(values: dict[str, Any], real: set[str]) -> None:
    """``--real torch --stub torch.cuda.is_available=...``: set the value on the real module."""
    for dotted, value in values.items():
        parts = dotted.split(".")
        if len(parts) < 2 or parts[0] not in {r.split(".")[0] for r in real}:
            continue
        obj: Any = importlib.import_module(parts[0])
        for i, part in enumerate(parts[1:-1], start=1):
            try:
                obj = getattr(obj, part)
            except AttributeError:
                obj = importlib.import_module(".".join(parts[: i + 1]))
        setattr(obj, parts[-1], value)


def _load_slice(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("_recon_slice", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(request: dict[str, Any]) -> dict[str, Any]:
    """Everything the child does, as a function (the result dict)."""
    result: dict[str, Any] = {"calls": [], "setup_error": None}
    work = request["work_dir"]
    events_fd = request.get("events_fd")
    guard = Guard(work, RECORDER.site, events_fd if isinstance(events_fd, int) else None)
    result_refs = {"guard": guard}
    try:
        real_mods: dict[str, Any] = {}
        for name in request.get("real", []):
            try:
                real_mods[name] = importlib.import_module(name)
            except ImportError as err:
                raise RuntimeError(f"--real {name}: not importable in this Python ({err})") \
                    from err
        config = HFConfig(request["config"]) if request.get("config") is not None else None
        slice_mod = _load_slice(request["slice_file"])
        files = {info["file"] for info in slice_mod.MODULES.values()}
        factory: StubFactory = install(package=slice_mod.SLICE["package"], slice_files=files,
                                       real=set(request.get("real", [])),
                                       forbid=set(request.get("forbid", [])),
                                       absent=set(request.get("absent", [])))
        finder = slice_mod.install(factory)
        result_refs["finder"] = finder
        guard.seal()
        ns: dict[str, Any] = {"ns": types.SimpleNamespace, "config": config, "HFConfig": HFConfig,
                              "stub": factory.child, "__builtins__": __builtins__}
        ns.update({name.split(".")[0]: importlib.import_module(name.split(".")[0])
                   for name in real_mods})
        if request.get("stub_file"):
            path = request["stub_file"]
            with open(path, encoding="utf-8") as fh:
                code = compile(fh.read(), path, "exec")
            file_ns: dict[str, Any] = dict(ns)
            exec(code, file_ns)  # noqa: S102 - the user's own stub file
            ns.update({k: v for k, v in file_ns.items() if not k.startswith("__")})
            factory.values.update(file_ns.get("STUBS", {}) or {})
            factory.forbid.update(file_ns.get("FORBID", []) or [])
        inputs = Inputs(ns)
        for name, expr in request.get("stubs", {}).items():
            factory.values[name] = inputs.value({"py": expr})
        _patch_real(factory.values, set(real_mods))
    except BaseException as err:
        result["setup_error"] = _error(err)
        _finish(result, result_refs)
        return result
    for call in request["calls"]:
        try:
            result["calls"].append(_call_one(finder, call, inputs, config))
        except BaseException as err:  # building inputs failed
            result["calls"].append({"target": call["target"], "ok": False,
                                    "error": _error(err)})
    _finish(result, result_refs)
    return result


def _finish(result: dict[str, Any], refs: dict[str, Any]) -> None:
    result["stubs"] = RECORDER.report()
    guard = refs.get("guard")
    result["sandbox"] = guard.refusals if guard is not None else []
    finder = refs.get("finder")
    result["definition_failures"] = finder.failures if finder is not None else []


def main() -> None:
    """Entry point: request on stdin, result on ``result_fd``, exit without atexit hooks."""
    request = json.loads(sys.stdin.read())
    result_fd = int(request["result_fd"])
    faulthandler.enable()
    faulthandler.register(signal.SIGUSR1, all_threads=False)
    os.chdir(request["work_dir"])
    try:
        result = run(request)
        data = json.dumps(result, default=repr).encode()
    except BaseException as err:  # noqa: BLE001 - the report must go out
        data = json.dumps({"setup_error": {"kind": "internal", "type": type(err).__name__,
                                           "message": str(err),
                                           "traceback": traceback.format_exc()}}).encode()
    sys.stdout.flush()
    sys.stderr.flush()
    with os.fdopen(result_fd, "wb") as fh:
        fh.write(data)
    os._exit(0)
