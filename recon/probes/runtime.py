"""recon probe runtime: the only code of recon that runs inside the investigated engine.

The bundle's ``sitecustomize.py`` imports this file (copied into the bundle as
``_recon_probe_runtime.py``) in every Python process that has the bundle on
``PYTHONPATH``: the API server, every spawned or forked worker, compile workers.
That is why it is written the way it is:

* standard library only, and it never imports torch, multiprocessing or the
  targets; it looks at tensors only when the host already imported torch;
* every entry point fails open: a hook or wrapper that hits an error logs it
  and carries on; after ``error_budget`` errors the runtime switches itself
  off. Arguments and return values are never changed, exceptions of the
  target pass through untouched, ``sys.exit`` is never called;
* device-safe: inside ``torch.compile`` tracing the wrapper is a plain
  pass-through (anything else breaks ``fullgraph=True`` or is skipped anyway);
  while a CUDA graph is being captured only metadata is logged; a device
  tensor is never ``.item()``-ed, ``.tolist()``-ed, ``.cpu()``-ed or ``repr``-ed;
* one JSONL file per process (pid and start time in the name), written with
  one unbuffered ``os.write`` per record so a worker killed with ``os._exit``
  or SIGKILL loses nothing already logged; size-capped; re-opened in the child
  after ``fork``; stderr when the log directory cannot be written.

Record kinds: ``VERIFY`` (start of every process), ``patched`` (a target patched
after start), ``call``, ``error`` (a swallowed error), ``cap`` / ``disabled``
(the runtime stopped logging) and ``EXIT`` (call counts, targets never fired).
"""

import itertools
import json
import os
import sys
import threading
import time

RUNTIME_VERSION = 1
STDERR_PREFIX = "recon-probe "
_EXIT_RESERVE = 8192  # bytes kept free under the cap for the EXIT record

# Captured once, so a probe on os.write, json.dumps or time.time cannot recurse.
_write = os.write
_dumps = json.dumps
_now = time.time
_perf = time.perf_counter
_ident = threading.get_ident
_getpid = os.getpid

_CO_VARARGS, _CO_VARKEYWORDS = 0x04, 0x08
_CO_COROUTINE, _CO_GENERATOR, _CO_ASYNC_GENERATOR = 0x80, 0x20, 0x200
_FUNC_TYPES = (type(lambda: None), type(len))  # plain Python functions and builtins

# torch.compiler.is_compiling once the host has imported torch (else None). A
# module global on purpose: dynamo folds a call to it into a constant.
_compiling = None


class _Local(threading.local):
    """Per-thread re-entrancy flag; a class attribute so reading it calls no builtin."""

    busy = False


class _Target:
    """One probed callable: its options, its counters and what happened to it."""

    __slots__ = ("qualname", "module", "attr", "log", "self_attrs", "entry_exprs", "exit_exprs",
                 "copies", "counter", "tick", "logged", "status", "original", "wrapper", "bound",
                 "params", "npos", "varargs", "varkw", "defaults", "errors")

    def __init__(self, raw):
        self.qualname = raw["qualname"]
        self.module, _, self.attr = self.qualname.partition(":")
        self.log = set(raw.get("log") or ())
        self.self_attrs = list(raw.get("self_attrs") or ())
        self.entry_exprs, self.exit_exprs = [], []
        for name, src in (raw.get("exprs") or {}).items():
            code = compile(src, f"<probe expr {name}>", "eval")
            (self.exit_exprs if "result" in code.co_names else self.entry_exprs).append((name, code))
        self.copies = list(raw.get("copies") or ())
        self.reset()
        self.logged = 0
        self.errors = 0
        self.status = "pending"
        self.original = self.wrapper = None
        self.bound = False
        self.params, self.npos, self.varargs, self.varkw, self.defaults = [], 0, None, None, {}

    def reset(self):
        """Fresh per-process counters (``tick`` is a bound method: no builtin ``next``)."""
        self.counter = itertools.count()
        self.tick = self.counter.__next__
        self.logged = 0


class _State:
    """Per-process state; :func:`_after_fork` rebuilds it in a forked child."""

    def __init__(self):
        self.enabled = False
        self.spec = {}
        self.targets = []
        self.watched = set()
        self.bundle = None
        self.log_dir = None
        self.fd = -1
        self.path = None
        self.written = 0
        self.max_bytes = 64 << 20
        self.capped = False
        self.dropped = 0
        self.errors = 0
        self.error_budget = 50
        self.first, self.every = 10, 0
        self.pid = _getpid()
        self.lock = threading.Lock()
        self.tls = _Local()
        self.exited_pid = None
        self.chained = None
        self.torch_cuda = None


_S = _State()


# -- writing -------------------------------------------------------------------
def _open_log():
    """Open this process's own JSONL file; fall back to stderr (fd 2) when it cannot."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f".{int(_now() * 1e6) % 1000000:06d}"
    _S.written, _S.capped, _S.dropped = 0, False, 0
    try:
        os.makedirs(_S.log_dir, exist_ok=True)
        path = os.path.join(_S.log_dir, f"probe-{_S.pid}-{stamp}.jsonl")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
        _S.fd, _S.path = os.open(path, flags, 0o644), path
        return None
    except Exception as exc:  # read-only mount, missing volume, disk full
        _S.fd, _S.path = 2, None
        return _exc_text(exc)


def _emit(rec):
    """Write one record as one line; never raises. Runs with the re-entrancy flag set,
    so a probed builtin it uses (``len``, ``repr``...) passes straight through."""
    tls = _S.tls
    was, tls.busy = tls.busy, True
    try:
        line = _dumps(rec, default=_json_default, separators=(",", ":")) + "\n"
        if _S.fd == 2:
            line = STDERR_PREFIX + line
        data = line.encode("utf-8", "replace")
        with _S.lock:
            final = rec.get("kind") == "EXIT"
            if _S.capped and not final:
                _S.dropped += 1
                return
            if not final and _S.written + len(data) > _S.max_bytes - _EXIT_RESERVE:
                _S.capped = True
                _S.dropped += 1
                note = {"kind": "cap", "t": _now(), "pid": _S.pid, "max_bytes": _S.max_bytes}
                data = ((STDERR_PREFIX if _S.fd == 2 else "") + _dumps(note) + "\n").encode()
            _write_all(data)
    except Exception:
        pass
    finally:
        tls.busy = was


def _write_all(data):
    """``os.write`` until done; on failure switch to stderr once, then give up.

    After a failed (possibly partial) write the whole record is repeated on
    stderr; the file may end in a torn line, which readers skip.
    """
    whole = data
    while data:
        try:
            n = _write(_S.fd, data)
            _S.written += n
            data = data[n:]
        except OSError as exc:
            if _S.fd == 2:
                _S.enabled = False
                return
            try:  # noqa: SIM105 - the runtime does not import contextlib
                os.close(_S.fd)
            except OSError:
                pass
            _S.fd, _S.path = 2, None
            note = {"kind": "error", "t": _now(), "pid": _S.pid, "where": "log write",
                    "error": _exc_text(exc)}
            data = (STDERR_PREFIX + _dumps(note) + "\n").encode() + STDERR_PREFIX.encode() + whole


def _json_default(obj):
    return _short(_safe_repr(obj), 200)


def _swallow(where, target, exc):
    """Count an error of our own; after the budget, switch the runtime off."""
    try:
        _S.errors += 1
        if target is not None:
            target.errors += 1
        if _S.errors <= _S.error_budget:
            _emit({"kind": "error", "t": _now(), "pid": _S.pid, "where": where,
                   "target": target.qualname if target is not None else None,
                   "error": _exc_text(exc)})
        if _S.errors >= _S.error_budget and _S.enabled:
            _S.enabled = False
            _emit({"kind": "disabled", "t": _now(), "pid": _S.pid,
                   "reason": f"error budget of {_S.error_budget} reached"})
    except Exception:
        pass


# -- describing values ---------------------------------------------------------
def _short(text, limit):
    return text if len(text) <= limit else text[:limit] + f"...({len(text)} chars)"


def _exc_text(exc):
    """``Type: message`` of an exception, even when its ``str`` raises."""
    try:
        return f"{type(exc).__name__}: {_short(str(exc), 300)}"
    except Exception:
        return type(exc).__name__


def _safe_repr(obj):
    try:
        return repr(obj)
    except Exception as exc:
        return f"<repr raised {type(exc).__name__}>"


def _describe(value, full, depth=0):
    """A small JSON-able picture of ``value``; an object that fights back gets an error entry."""
    try:
        return _picture(value, full, depth)
    except Exception as exc:
        return {"type": type(value).__qualname__, "error": _exc_text(exc)}


def _picture(value, full, depth):
    """A small JSON-able picture of ``value``.

    ``full=False`` (shapes mode, CUDA graph capture) never calls ``repr`` on
    unknown objects. Tensors are always metadata; only small CPU tensors of the
    exact ``torch.Tensor`` type get their values, never a device tensor.
    """
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return _short(value, 200)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        out = {"type": "Tensor", "shape": list(value.shape),
               "dtype": str(value.dtype).replace("torch.", ""), "device": str(value.device)}
        if (full and type(value) is torch.Tensor and value.device.type == "cpu"
                and value.numel() <= 16):
            out["values"] = value.tolist()
        return out
    kind = type(value)
    name = kind.__qualname__
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        out = {"type": name, "len": len(value)}
        if depth < 3:
            if isinstance(value, dict):
                out["items"] = {_short(str(k), 80): _describe(v, full, depth + 1)
                                for k, v in itertools.islice(value.items(), 8)}
            else:
                out["items"] = [_describe(v, full, depth + 1) for v in itertools.islice(value, 8)]
        return out
    if hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, type):
        return {"type": name, "shape": _safe_repr(value.shape), "dtype": str(value.dtype)}
    fields = getattr(kind, "__dataclass_fields__", None)
    if fields is not None and depth < 3:
        return {"type": name, "fields": {f: _describe(getattr(value, f, None), full, depth + 1)
                                         for f in itertools.islice(fields, 16)}}
    if not full:
        return {"type": name}
    return {"type": name, "repr": _short(_safe_repr(value), 200)}


def _capturing():
    """True while the current CUDA stream captures a graph (never initialises CUDA)."""
    cuda = _S.torch_cuda
    if cuda is None:
        return False
    try:
        return bool(cuda.is_initialized() and cuda.is_current_stream_capturing())
    except Exception:
        return True  # unsure: metadata only


# -- the wrapper ---------------------------------------------------------------
def _bind(t, args, kwargs):
    """Map call arguments to parameter names (no ``inspect``: it is slow to import)."""
    ns = {}
    for i, name in enumerate(t.params):
        if i < t.npos and i < len(args):
            ns[name] = args[i]
        elif name in kwargs:
            ns[name] = kwargs[name]
        elif name in t.defaults:
            ns[name] = t.defaults[name]
    rest = args[t.npos:]
    if t.varargs:
        ns[t.varargs] = tuple(rest)
    else:
        for i, value in enumerate(rest, t.npos):
            ns[f"arg{i}"] = value
    extra = {k: v for k, v in kwargs.items() if k not in ns}
    if t.varkw:
        ns[t.varkw] = extra
    else:
        ns.update(extra)
    return ns


def _eval_exprs(t, exprs, fn, ns, rec, full):
    out = rec.setdefault("expr", {})
    for name, code in exprs:
        try:
            out[name] = _describe(eval(code, getattr(fn, "__globals__", {}), ns), full)
        except Exception as exc:
            out[name] = {"error": _exc_text(exc)}
            _swallow("expr " + name, t, exc)


def _enter(t, n, fn, args, kwargs):
    """Build the call record before the call; ``None`` when not logging."""
    tls = _S.tls
    if not _S.enabled or tls.busy:
        return None
    tls.busy = True
    try:
        capturing = _capturing()
        full = "args" in t.log and not capturing
        rec = {"kind": "call", "t": _now(), "pid": _S.pid, "tid": _ident(), "target": t.qualname,
               "n": n}
        if capturing:
            rec["mode"] = "meta"
        ns = _bind(t, args, kwargs)
        if "args" in t.log or "shapes" in t.log:
            skip = t.params[0] if t.bound and t.params else None
            rec["args"] = {k: _describe(v, full) for k, v in ns.items() if k != skip}
        if t.self_attrs and t.bound and args:
            rec["self"] = {}
            for path in t.self_attrs:
                try:
                    obj = args[0]
                    for part in path.split("."):
                        obj = getattr(obj, part)
                    rec["self"][path] = _describe(obj, full)
                except Exception as exc:
                    rec["self"][path] = {"error": _exc_text(exc)}
        if capturing and (t.entry_exprs or t.exit_exprs):
            rec["expr"] = {"skipped": "CUDA graph capture"}
        elif t.entry_exprs:
            _eval_exprs(t, t.entry_exprs, fn, ns, rec, full)
        return rec, ns, capturing, _perf()
    except Exception as exc:
        _swallow("enter", t, exc)
        return None
    finally:
        tls.busy = False


def _leave(t, state, fn, result, exc):
    """Finish and write the call record after the call; never raises."""
    tls = _S.tls
    if tls.busy:
        return
    tls.busy = True
    try:
        rec, ns, capturing, t0 = state
        rec["wall_us"] = round((_perf() - t0) * 1e6, 1)
        full = "args" in t.log and not capturing
        if exc is not None:
            rec["raised"] = _exc_text(exc)
        elif "return" in t.log:
            rec["return"] = _describe(result, full)
        if t.exit_exprs and not capturing and exc is None:
            ns["result"] = result
            _eval_exprs(t, t.exit_exprs, fn, ns, rec, full)
        t.logged += 1
        _emit(rec)
    except Exception as err:
        _swallow("leave", t, err)
    finally:
        tls.busy = False


def _make_wrapper(t, fn):
    """A wrapper with the same calling convention as ``fn`` (async stays async)."""
    first, every = _S.first, _S.every

    if getattr(fn, "__code__", None) is not None and fn.__code__.co_flags & _CO_COROUTINE:
        async def wrapper(*args, **kwargs):
            ic = _compiling
            if ic is not None and ic():
                return await fn(*args, **kwargs)
            n = t.tick()
            if n >= first and (not every or (n + 1 - first) % every):
                return await fn(*args, **kwargs)
            state = _enter(t, n, fn, args, kwargs)
            if state is None:
                return await fn(*args, **kwargs)
            try:
                result = await fn(*args, **kwargs)
            except BaseException as exc:
                _leave(t, state, fn, None, exc)
                raise
            _leave(t, state, fn, result, None)
            return result
    else:
        def wrapper(*args, **kwargs):
            ic = _compiling
            if ic is not None and ic():
                return fn(*args, **kwargs)
            n = t.tick()
            if n >= first and (not every or (n + 1 - first) % every):
                return fn(*args, **kwargs)
            state = _enter(t, n, fn, args, kwargs)
            if state is None:
                return fn(*args, **kwargs)
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                _leave(t, state, fn, None, exc)
                raise
            _leave(t, state, fn, result, None)
            return result

    try:  # noqa: SIM105 - the runtime does not import contextlib
        for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
            setattr(wrapper, attr, getattr(fn, attr))
        wrapper.__dict__.update(getattr(fn, "__dict__", {}))
    except Exception:
        pass
    wrapper.__wrapped__ = fn
    wrapper.__recon_probe__ = t.qualname
    return wrapper


# -- patching ------------------------------------------------------------------
def _learn_signature(t, fn):
    code = getattr(fn, "__code__", None)
    if code is None:
        return
    npos, nkw = code.co_argcount, code.co_kwonlyargcount
    t.params, t.npos = list(code.co_varnames[:npos + nkw]), npos
    i = npos + nkw
    if code.co_flags & _CO_VARARGS:
        t.varargs, i = code.co_varnames[i], i + 1
    if code.co_flags & _CO_VARKEYWORDS:
        t.varkw = code.co_varnames[i]
    defaults = fn.__defaults__ or ()
    names = code.co_varnames[npos - len(defaults):npos]  # as long as defaults, by construction
    t.defaults = dict(zip(names, defaults))  # noqa: B905 - strict= needs 3.10; engines may be older
    t.defaults.update(fn.__kwdefaults__ or {})


def _patch(t):
    """Patch one target whose module is imported; returns its new status."""
    mod = sys.modules.get(t.module)
    if mod is None:
        return "pending"
    owner = mod
    parts = t.attr.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part, None)
        if owner is None:
            return f"not found: {t.module} has no {part}"
    name = parts[-1]
    if isinstance(owner, type):
        raw = next((k.__dict__[name] for k in owner.__mro__ if name in k.__dict__), None)
    else:
        raw = getattr(owner, name, None)
    if raw is None:
        return f"not found: no attribute {t.attr}"
    if getattr(raw, "__recon_probe__", None) or getattr(
            getattr(raw, "__func__", getattr(raw, "fget", None)), "__recon_probe__", None):
        return "patched"
    if isinstance(raw, staticmethod):
        fn, rewrap = raw.__func__, staticmethod
    elif isinstance(raw, classmethod):
        fn, rewrap, t.bound = raw.__func__, classmethod, True
    elif isinstance(raw, property):
        fn, t.bound = raw.fget, True

        def rewrap(w, p=raw):
            return property(w, p.fset, p.fdel, p.__doc__)
    else:
        fn, t.bound = raw, isinstance(owner, type)

        def rewrap(w):
            return w
    if not isinstance(fn, _FUNC_TYPES):
        return f"skipped: {t.attr} is a {type(fn).__name__}, not a plain function"
    code = getattr(fn, "__code__", None)
    if code is not None and code.co_flags & (_CO_GENERATOR | _CO_ASYNC_GENERATOR):
        return "skipped: generator function (left alone)"
    _learn_signature(t, fn)
    t.original, t.wrapper = fn, _make_wrapper(t, fn)
    setattr(owner, name, rewrap(t.wrapper))
    if owner is mod:
        _fix_copies(t, t.copies)
    return "patched"


def _fix_copies(t, modules):
    """Point ``from module import name`` copies (same object) at the wrapper."""
    for modname in modules:
        mod = sys.modules.get(modname)
        namespace = getattr(mod, "__dict__", None)
        if not namespace or t.original is None:
            continue
        try:
            for key, value in list(namespace.items()):
                if value is t.original:
                    namespace[key] = t.wrapper
        except Exception as exc:
            _swallow("copies in " + modname, t, exc)


def _on_loaded(name):
    """Called after a watched module finished executing (and once at start)."""
    tls = _S.tls
    was, tls.busy = tls.busy, True
    try:
        if name == "torch" or (name is None and "torch" in sys.modules):
            _learn_torch()
        for t in _S.targets:
            if t.status == "pending" and (name is None or t.module == name):
                try:
                    t.status = _patch(t)
                except Exception as exc:
                    t.status = "error: " + _exc_text(exc)
                if name is not None and t.status != "pending":
                    _emit({"kind": "patched", "t": _now(), "pid": _S.pid, "target": t.qualname,
                           "status": t.status})
            elif name is not None and name in t.copies and t.wrapper is not None:
                _fix_copies(t, [name])
    except Exception as exc:
        _swallow("import hook", None, exc)
    finally:
        tls.busy = was


def _learn_torch():
    """Keep references to torch's own 'am I compiling / capturing' questions."""
    global _compiling
    compiler = sys.modules.get("torch.compiler")
    _compiling = getattr(compiler, "is_compiling", None)
    cuda = sys.modules.get("torch.cuda")
    if cuda is not None and hasattr(cuda, "is_current_stream_capturing"):
        _S.torch_cuda = cuda


class _Finder:
    """Meta-path hook: for watched modules only, run ``_on_loaded`` after they execute."""

    def find_spec(self, name, path=None, target=None):
        if name not in _S.watched:
            return None
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
            loader = getattr(spec, "loader", None)
            if loader is None or not hasattr(loader, "exec_module"):
                return spec
            real_exec = loader.exec_module
            real_exec = getattr(real_exec, "recon_real", real_exec)

            def exec_module(module):
                try:
                    real_exec(module)
                finally:
                    if getattr(loader, "__dict__", {}).get("exec_module") is exec_module:
                        del loader.exec_module
                if getattr(module, "__name__", None) == name:  # a shared loader (zip) serves others
                    _on_loaded(name)

            exec_module.recon_real = real_exec
            loader.exec_module = exec_module  # this loader instance only; its class untouched
            return spec
        except Exception:
            return None  # let the normal machinery find (or fail to find) it


# -- process life --------------------------------------------------------------
def _verify_record(forked_from=None, log_error=None):
    env = {k: os.environ.get(k) for k in _S.spec.get("env") or ()}
    return {"kind": "VERIFY", "t": _now(), "pid": _S.pid, "ppid": os.getppid(),
            "forked_from": forked_from, "argv": list(getattr(sys, "orig_argv", sys.argv)),
            "python": sys.version.split()[0], "executable": sys.executable,
            "runtime": RUNTIME_VERSION, "bundle": _S.bundle, "log": _S.path,
            "log_error": log_error, "env": env, "chained_sitecustomize": _S.chained,
            "targets": {t.qualname: t.status for t in _S.targets}}


def _exit():
    """EXIT record: call counts, and the targets that never fired in this process."""
    if _S.exited_pid == _S.pid or not _S.targets:
        return
    _S.exited_pid = _S.pid
    tls = _S.tls
    was, tls.busy = tls.busy, True
    try:
        calls = {}
        for t in _S.targets:
            text = repr(t.counter)  # "count(5)": reading a count without advancing it
            calls[t.qualname] = int(text[6:-1]) if text.startswith("count(") else None
        _emit({"kind": "EXIT", "t": _now(), "pid": _S.pid, "calls": calls,
               "logged": {t.qualname: t.logged for t in _S.targets},
               "never_fired": [q for q, n in calls.items() if not n],
               "never_patched": [t.qualname for t in _S.targets if t.status != "patched"],
               "errors": _S.errors, "dropped": _S.dropped})
    except Exception:
        pass
    finally:
        tls.busy = was


def _after_fork():
    """In a forked child: own lock, own file, own counters, own VERIFY record."""
    try:
        parent = _S.pid
        if _S.fd > 2:
            os.close(_S.fd)
        _S.pid, _S.lock, _S.tls = _getpid(), threading.Lock(), _Local()
        _S.tls.busy = True
        for t in _S.targets:
            t.reset()
        _S.errors = 0
        _S.enabled = True
        error = _open_log()
        _emit(_verify_record(forked_from=parent, log_error=error))
    except Exception:
        pass
    finally:
        _S.tls.busy = False


def _selected(spec):
    """``only_argv`` / ``skip_argv``: regular expressions over the full command line."""
    only, skip = spec.get("only_argv"), spec.get("skip_argv")
    if not only and not skip:
        return True
    import re

    argv = " ".join(getattr(sys, "orig_argv", sys.argv))
    return (not only or re.search(only, argv)) and not (skip and re.search(skip, argv))


def install(bundle_dir, spec=None, chained=None):
    """Read the spec, open the log, patch what is imported, hook the rest.

    Returns True when the runtime is active in this process. Never raises.
    """
    tls = _S.tls
    was, tls.busy = tls.busy, True
    try:
        if _S.enabled or os.environ.get("RECON_PROBE_DISABLE"):
            return _S.enabled
        if spec is None:
            with open(os.path.join(bundle_dir, "probe.json"), encoding="utf-8") as fh:
                spec = json.load(fh)
        if not _selected(spec):
            return False
        _S.spec, _S.bundle, _S.chained = spec, bundle_dir, chained
        _S.first, _S.every = int(spec.get("first", 10)), int(spec.get("every", 0))
        _S.max_bytes = int(spec.get("max_bytes", _S.max_bytes))
        _S.error_budget = int(spec.get("error_budget", _S.error_budget))
        _S.log_dir = (os.environ.get("RECON_PROBE_LOG_DIR") or spec.get("log_dir")
                      or "/tmp/recon-probe-logs")
        _S.targets = [_Target(raw) for raw in spec.get("targets") or ()]
        _S.watched = {t.module for t in _S.targets} | {"torch"}
        _S.watched.update(m for t in _S.targets for m in t.copies)
        _keep_on_pythonpath(bundle_dir)
        error = _open_log()
        _S.enabled = True
        _on_loaded(None)  # targets already imported (a .pth file, the image's sitecustomize)
        for t in _S.targets:  # their copies may sit in any module imported so far
            if t.wrapper is not None:
                _fix_copies(t, [m for m, mod in list(sys.modules.items()) if mod is not None])
        _emit(_verify_record(log_error=error))
        sys.meta_path.insert(0, _Finder())
        os.register_at_fork(after_in_child=_after_fork)
        register = getattr(threading, "_register_atexit", None)  # runs in mp workers too
        if register is not None:
            register(_exit)
        import atexit

        atexit.register(_exit)
        return True
    except Exception as exc:
        try:
            note = {"kind": "error", "where": "install", "error": _exc_text(exc)}
            _write(2, (STDERR_PREFIX + _dumps(note) + "\n").encode())
        except Exception:
            pass
        return False
    finally:
        tls.busy = was


def _keep_on_pythonpath(bundle_dir):
    """Spawned workers find the bundle only through ``PYTHONPATH``: make sure it is there."""
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    real = os.path.realpath(bundle_dir)
    if not any(os.path.realpath(p) == real for p in parts):
        os.environ["PYTHONPATH"] = os.pathsep.join([bundle_dir] + parts)

