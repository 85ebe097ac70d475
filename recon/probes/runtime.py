"""recon probe runtime: the only code of recon that runs inside the investigated engine.

The bundle's ``sitecustomize.py`` imports this file (copied into the bundle as
``_recon_probe_runtime.py``) in every Python process that has the bundle on
``PYTHONPATH``. Its promise is that the host program cannot tell, so:

* **the probed function is instrumented in place**: its ``__code__`` is
  replaced by a code object compiled from the function's own source (stdlib
  ``ast``), checked first to compile to exactly the loaded bytecode, with a
  prologue that asks the runtime whether to log this call. A logged call runs
  an instrumented copy of the body (``return x`` becomes ``return ret(x)``,
  the body sits in ``try/except BaseException: exc(); raise``); every other
  call runs the original body. The function object, and so its identity, its
  ``from x import f`` copies, registries, pickling, ``__defaults__``,
  annotations, decorators and ``inspect`` answers, stays as it was, and no
  frame is added: tracebacks, ``sys._getframe``, ``warnings`` stack levels and
  the usable recursion depth are unchanged. The hooks are reached through one
  name in ``builtins`` (``__recon_probe__``, set when the runtime starts) so no
  module namespace changes; where that name does not resolve (the code sent by
  value, cloudpickle or marshal, into a process without the runtime, or rebuilt
  with other builtins) the prologue does nothing and the body runs as its own;
* what cannot be instrumented that way (builtins, C functions, code whose
  source is missing or no longer matches) is left alone with a ``VERIFY``
  note, never wrapped;
* standard library only; it never imports torch, and looks at values only
  through their type (``type(v).__dict__``, C getters), never by calling code
  of the host (no ``repr``, ``str``, ``hasattr`` on arguments), except for the
  ``--self-attr`` paths and ``--expr`` expressions the user asked for;
* every hook fails open with an error budget (kept across ``fork``); inside
  ``torch.compile`` tracing the prologue folds to nothing; while a CUDA graph
  is captured only metadata is logged;
* one JSONL file per process, opened by the runtime on a high descriptor
  (``O_APPEND | O_CLOEXEC``, near the top of the soft ``RLIMIT_NOFILE``), its
  identity re-checked with ``fstat`` before every write so a host that closed
  it and reused the number is never written into; one unbuffered ``os.write``
  per record. A forked child opens its file with its first record (a fork that
  logs nothing leaves nothing), and a folder holds at most ``max_files`` files
  (its ``probe-files.count`` gets one byte per process; those past the cap log
  nothing). Nothing is ever written to stderr: when the log folder cannot be
  written, records are dropped and counted;
* nothing a host's audit hook or ``builtins.__import__`` wrapper could see, where
  it can be helped: every import happens while the runtime loads (before host
  code), calls raise no audit event (frames are reached through ``f_back``, not
  ``sys._getframe``; no ``id()``, no ``f_code``). What remains (patching a module
  imported after the host's hook, a forked child opening its file) is counted in
  docs/guide.md.

What a host can still observe, per Python version, is listed in docs/guide.md
("What the probes change in the engine, and what they do not"), and measured by
the host-program matrix of tests/test_probe_invisible.py.

Record kinds: ``VERIFY`` (start of every process), ``patched`` (a target patched
after start), ``call``, ``error`` (a swallowed error), ``cap`` / ``disabled``
(the runtime stopped logging) and ``EXIT`` (call counts, targets never fired).
"""

# Everything the runtime uses is imported here, while it loads and before any host
# code runs: an import made later is one a host's __import__ wrapper or audit hook sees.
import __future__

import _ast
import fcntl
import itertools
import json
import os
import resource
import sys
import threading
import time

RUNTIME_VERSION = 2
HOOK = "__recon_probe__"  # the one name the instrumented code loads (from builtins)
STDERR_PREFIX = "recon-probe "  # how runtime version 1 marked records on stderr (logread)
_EXIT_RESERVE = 8192  # bytes kept free under the cap for the EXIT record

# Captured once, so a probe on os.write, json.dumps or time.time cannot recurse.
_write = os.write
_fstat = os.fstat
_dumps = json.dumps
_now = time.time
_perf = time.perf_counter
_ident = threading.get_ident
_getpid = os.getpid
_getframe = sys._getframe  # audited (sys._getframe): only a fallback, see _probed_frame
_frame_key = object.__hash__  # unique among live frames, like id() (which is audited)
_FunctionType = type(lambda: None)  # types.FunctionType, without importing types
# Held by the import system while a module is imported (importlib.util.find_spec does
# not take it): how the finder tells an import from a look-up, with no frame to read.
_module_locks = getattr(sys.modules.get("_frozen_importlib"), "_module_locks", None)
COUNT_FILE = "probe-files.count"  # one byte per process that claimed a log file
_CO_VARARGS, _CO_VARKEYWORDS = 0x04, 0x08
_CO_ASYNC_GENERATOR = 0x200
_MISSING = object()
# Static (descriptor-level) reads: no __getattribute__, __getattr__ or metaclass runs.
_type_dict = type.__dict__["__dict__"].__get__
_type_mro = type.__dict__["__mro__"].__get__
_type_qualname = type.__dict__["__qualname__"].__get__
_exc_args = BaseException.__dict__["args"].__get__
_C_GETTERS = (type(type.__dict__["__dict__"]), type(type.__dict__["__basicsize__"]))
_SCALARS = (type(None), bool, int, float)

# torch.compiler.is_compiling once the host has imported torch (else None). A
# module global on purpose: dynamo folds a call to it into a constant.
_compiling = None


class _Local(threading.local):
    """Per-thread ``busy`` flag, set while the runtime itself runs (its own calls of a
    probed function pass through)."""

    busy = False


class _Verdict:
    """Where the gate leaves ``(thread, call number)`` of a call to log, for the next
    line of the prologue. A slot of a plain object, not a ``threading.local``: on
    3.10/3.11 reading a thread-local costs a level of the recursion limit."""

    __slots__ = ("d",)

    def __init__(self):
        self.d = None


class _Target:
    """One probed function: its options, its counters and what happened to it."""

    __slots__ = ("qualname", "module", "attr", "log", "self_attrs", "entry_exprs", "exit_exprs",
                 "counter", "tick", "logged", "status", "globals", "bound", "params", "errors",
                 "first", "every")

    def __init__(self, raw):
        self.qualname = raw["qualname"]
        self.module, _, self.attr = self.qualname.partition(":")
        self.log = set(raw.get("log") or ())
        self.self_attrs = list(raw.get("self_attrs") or ())
        self.entry_exprs, self.exit_exprs = [], []
        for name, src in (raw.get("exprs") or {}).items():
            code = compile(src, f"<probe expr {name}>", "eval")
            (self.exit_exprs if "result" in code.co_names else self.entry_exprs).append((name, code))
        self.reset()
        self.errors = 0
        self.status = "pending"
        self.bound = 0
        self.params = []
        self.first = self.every = 0

    def reset(self):
        """Fresh per-process counters (``tick`` is a bound method: no builtin ``next``)."""
        self.counter = itertools.count()
        self.tick = self.counter.__next__
        self.logged = 0


class _State:
    """Per-process state; :func:`_after_fork` renews what a forked child must not share."""

    def __init__(self):
        self.enabled = False
        self.spec = {}
        self.targets = []
        self.watched = set()
        self.bundle = None
        self.log_dir = None
        self.fd = -1
        self.fd_id = None
        self.path = None
        self.written = 0
        self.max_bytes = 64 << 20
        self.max_files = 256  # log files per folder, over every process of the bundle
        self.file_number = None  # this process's place under max_files
        self.log_state = "pending"  # "open" once this process tried to open its file
        self.forked_from = None
        self.inherited = None  # (descriptor, identity) of the parent's log, in a fork
        self.capped = False
        self.dropped = 0
        self.errors = 0
        self.error_budget = 50
        self.pid = _getpid()
        self.lock = threading.Lock()
        self.tls = _Local()
        self.calls = {}  # frame's hash (its address) -> state of a logged call in flight
        self.exited_pid = None
        self.chained = None
        self.torch_cuda = None
        self.trees = {}  # file -> parsed module, while one module's targets are patched


_S = _State()


# -- writing -------------------------------------------------------------------
def _fd_floor():
    """Where the runtime keeps its descriptor: the top of the soft limit (below 1024),
    which a host that takes its numbers from 3 upwards reaches last."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    top = 1024 if soft < 0 or soft > 1024 else soft
    return max(3, top - (64 if top >= 256 else 8))


def _high_fd(fd):
    """Move ``fd`` to a high number so the host's own descriptors keep their numbers."""
    try:
        floor = _fd_floor()
        if fd >= floor:
            return fd
        new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor)
    except Exception:  # no number free up there: a low one is better than no log
        return fd
    os.close(fd)
    return new


def _own(fd):
    """Adopt ``fd`` as the log: remember its identity for the check before each write."""
    fd = _high_fd(fd)
    st = _fstat(fd)
    _S.fd, _S.fd_id = fd, (st.st_dev, st.st_ino)


def _claim():
    """This process's number among those that opened a log in the folder: one byte
    appended to its count file (``O_APPEND`` makes the offset after it ours alone)."""
    path = os.path.join(_S.log_dir, COUNT_FILE)
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except FileNotFoundError:
        os.makedirs(_S.log_dir, exist_ok=True)
        fd = os.open(path, flags, 0o644)
    try:
        if _write(fd, b"\n") != 1:
            return None
        return os.lseek(fd, 0, os.SEEK_CUR)
    finally:
        os.close(fd)


def _open_log():
    """Create this process's own JSONL file, unless the folder already holds the
    bundle's cap of files; returns why there is none (never raises, never stderr)."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f".{int(_now() * 1e6) % 1000000:06d}"
    _S.written, _S.capped, _S.fd, _S.fd_id, _S.path = 0, False, -1, None, None
    _S.log_state = "open"
    _close_inherited()
    try:
        _S.file_number = _claim()
    except OSError:  # another user's count file: logged uncounted; no folder: fails below
        _S.file_number = None
    if _S.file_number is not None and _S.file_number > _S.max_files:
        _S.enabled = False  # no record is built for a file that does not exist
        return f"over the cap of {_S.max_files} log files in the folder: nothing logged"
    try:
        path = os.path.join(_S.log_dir, f"probe-{_S.pid}-{stamp}.jsonl")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
        _own(os.open(path, flags, 0o644))
        _S.path = path
        return None
    except Exception as exc:  # read-only mount, missing volume, disk full
        return _exc_text(exc)


def _close_inherited():
    """Close the parent's log descriptor a forked child inherited, if it still is that
    file: the child's own then takes the same number, and it holds one, like its parent."""
    inherited, _S.inherited = _S.inherited, None
    if inherited is not None:
        try:
            st = _fstat(inherited[0])
            if (st.st_dev, st.st_ino) == inherited[1]:
                os.close(inherited[0])
        except OSError:
            pass


def _start_log():
    """The first record of a process (the caller holds the lock): open its file, lead
    with its VERIFY record. A forked child gets here at its first record only, so a
    fork that logs nothing opens nothing and takes no place under the cap."""
    error = _open_log()
    _write_all(_encode(_verify_record(log_error=error)))


def _log_fd():
    """The log's descriptor if it is still ours, else reopen the file; -1 when impossible.

    A host that closes every descriptor (daemons, ``closerange``) and opens its
    own file can get our number back: the ``(st_dev, st_ino)`` check sees that
    and the runtime leaves that descriptor alone (it is the host's now).
    """
    if _S.fd >= 0:
        try:
            st = _fstat(_S.fd)
            if (st.st_dev, st.st_ino) == _S.fd_id:
                return _S.fd
        except OSError:
            pass
        _S.fd = -1
        if _S.path is not None:
            try:
                _own(os.open(_S.path, os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)))
            except Exception:
                _S.path = None
    return _S.fd


def _encode(rec):
    return (_dumps(rec, default=_json_default, separators=(",", ":")) + "\n").encode(
        "utf-8", "replace")


def _emit(rec):
    """Write one record as one line; never raises. Runs with the re-entrancy flag set,
    so a probed function it uses (``json.dumps``...) passes straight through."""
    tls = _S.tls
    was, tls.busy = tls.busy, True
    try:
        data = _encode(rec)
        with _S.lock:
            if _S.log_state == "pending":
                _start_log()
            final = rec.get("kind") == "EXIT"
            if _S.capped and not final:
                _S.dropped += 1
                return
            if not final and _S.written + len(data) > _S.max_bytes - _EXIT_RESERVE:
                _S.capped = True
                _S.dropped += 1
                note = {"kind": "cap", "t": _now(), "pid": _S.pid, "max_bytes": _S.max_bytes}
                data = (_dumps(note) + "\n").encode()
            _write_all(data)
    except Exception:
        pass
    finally:
        tls.busy = was


def _write_all(data):
    """``os.write`` until done (caller holds the lock); a failing file is given up."""
    fd = _log_fd()
    if fd < 0:
        _S.dropped += 1
        return
    while data:
        try:
            n = _write(fd, data)
        except OSError:  # disk full, file size limit: stop writing, keep counting
            _S.dropped += 1
            _S.path = None
            _S.fd = -1
            try:  # noqa: SIM105 - the runtime does not import contextlib
                os.close(fd)
            except OSError:
                pass
            return
        _S.written += n
        data = data[n:]


def _json_default(obj):
    return "<" + _tname(type(obj)) + ">"


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


# -- describing values (through their type only) -------------------------------
def _short(text, limit):
    return text if len(text) <= limit else text[:limit] + f"...({len(text)} chars)"


def _tname(tp):
    try:
        return _type_qualname(tp)
    except Exception:
        return "?"


def _static(tp, name):
    """``name`` as found in the class dictionaries of ``tp``'s MRO (no descriptor runs)."""
    for klass in _type_mro(tp):
        found = _type_dict(klass).get(name, _MISSING)
        if found is not _MISSING:
            return found
    return _MISSING


def _c_get(value, name):
    """An attribute read only through a C-level getter of the type (getset or member)."""
    desc = _static(type(value), name)
    if type(desc) not in _C_GETTERS:
        return _MISSING
    return desc.__get__(value, type(value))


def _exc_text(exc):
    """``Type: message`` of an exception, from its arguments when they are plain strings
    or numbers (``str(exc)`` could run the host's ``__str__``)."""
    name = _tname(type(exc))
    try:
        args = _exc_args(exc)
    except Exception:
        return name
    if type(args) is tuple and len(args) == 1 and type(args[0]) is str:
        return f"{name}: {_short(args[0], 300)}"
    if type(args) is tuple and args and all(type(a) in (str, int, float, bool) for a in args):
        return f"{name}: {_short(str(args), 300)}"
    return name


def _describe(value, full, depth=0):
    """A small JSON-able picture of ``value``; an error becomes an error entry."""
    try:
        return _picture(value, full, depth)
    except Exception as exc:
        return {"type": _tname(type(value)), "error": _exc_text(exc)}


def _picture(value, full, depth):
    """Scalars, strings and containers by value (base-class methods only), tensors and
    array-likes as metadata, dataclasses by field, anything else by its type name."""
    tp = type(value)
    if tp in _SCALARS:
        return value
    if tp is str:
        return _short(value, 200)
    torch = sys.modules.get("torch")
    if torch is not None and issubclass(tp, torch.Tensor):
        return _tensor(torch, value, tp, full)
    for base in (list, tuple, dict, set, frozenset):
        if issubclass(tp, base):
            return _container(value, tp, base, full, depth)
    for base in (bool, int, float, str):
        if issubclass(tp, base):  # enums, IntFlag, str subclasses: the base value
            raw = str.__str__(value) if base is str else base.__repr__(value)
            return {"type": _tname(tp), "value": _short(raw, 200)}
    for base in (bytes, bytearray):
        if issubclass(tp, base):
            return {"type": _tname(tp), "len": base.__len__(value)}
    return _object(value, tp, full, depth)


def _container(value, tp, base, full, depth):
    out = {"type": _tname(tp), "len": base.__len__(value)}
    if depth < 3:
        if base is dict:
            out["items"] = {_key(k): _describe(v, full, depth + 1)
                            for k, v in itertools.islice(dict.items(value), 8)}
        else:
            out["items"] = [_describe(v, full, depth + 1)
                            for v in itertools.islice(base.__iter__(value), 8)]
    return out


def _key(key):
    tp = type(key)
    if tp is str:
        return _short(key, 80)
    if tp in _SCALARS:
        return repr(key)
    return "<" + _tname(tp) + ">"


def _tensor(torch, value, tp, full):
    """Tensor metadata; values only for a small CPU ``torch.Tensor`` outside capture."""
    out = {"type": "Tensor" if tp is torch.Tensor else _tname(tp)}
    if tp is not torch.Tensor and tp is not torch.nn.Parameter:
        return out  # a subclass's getters may run its __torch_function__
    out.update(shape=list(value.shape), dtype=str(value.dtype).replace("torch.", ""),
               device=str(value.device))
    if full and tp is torch.Tensor and value.device.type == "cpu" and value.numel() <= 16:
        out["values"] = value.tolist()
    return out


def _object(value, tp, full, depth):
    """Array-likes through C getters (numpy), dataclasses through their fields."""
    name = _tname(tp)
    shape = _c_get(value, "shape")
    if type(shape) is tuple and all(type(n) is int for n in shape):
        out = {"type": name, "shape": list(shape)}
        dtype = _c_get(value, "dtype")
        dname = _c_get(dtype, "name") if dtype is not _MISSING else _MISSING
        if type(dname) is str:
            out["dtype"] = dname
        return out
    fields = _static(tp, "__dataclass_fields__")
    if type(fields) is dict and depth < 3:
        attrs = _c_get(value, "__dict__")
        attrs = attrs if type(attrs) is dict else {}
        out = {}
        for f in itertools.islice(fields, 16):
            got = attrs.get(f, _MISSING) if f in attrs else _c_get(value, f)
            out[f] = _describe(got, full, depth + 1) if got is not _MISSING else {"type": "?"}
        return {"type": name, "fields": out}
    return {"type": name}


def _capturing():
    """True while the current CUDA stream captures a graph (never initialises CUDA)."""
    cuda = _S.torch_cuda
    if cuda is None:
        return False
    try:
        return bool(cuda.is_initialized() and cuda.is_current_stream_capturing())
    except Exception:
        return True  # unsure: metadata only


# -- the hooks the instrumented code calls ---------------------------------------
def _untrace(exc):
    """Drop the runtime's frames from ``exc``'s traceback before it is re-raised. From
    3.11 a bare ``raise`` uses ``exc.__traceback__``: none is left. On 3.10 it re-raises
    the traceback held by the handler, whose first entry (this hook) cannot go."""
    tb = exc.__traceback__
    if tb is not None:
        tb.tb_next = None
    exc.__traceback__ = None


def _gate(k):
    """First statement of every call of a probed function: decide whether to log it.

    Kept tiny (it is the whole cost of a call that is not logged) and free of
    module globals it cannot do without, so it still answers at interpreter
    shutdown. A call to log leaves its thread and number in ``r.d`` for the
    next line of the prologue (no local variable of the host's frame is used).
    """
    ic = _compiling
    if ic is not None and ic():
        return
    try:
        if _S.tls.busy:
            return
        t = _S.targets[k]
        n = t.tick()  # counted even once switched off: EXIT's counts stay exact
        if not _S.enabled:
            return
        if n < t.first or (t.every and not (n + 1 - t.first) % t.every):
            _gate.r.d = (_ident(), n)
    except Exception:
        pass
    except BaseException as exc:  # a signal handler's: raise it as if from the caller
        _untrace(exc)
        raise


def _frame_source():
    """A generator that yields the frame of the probed function whose hook asked.

    While it runs, its own frame's ``f_back`` is :func:`_probed_frame`, then the hook
    (``enter``, ``ret`` or ``exc``), then the probed function. ``f_back`` raises no audit
    event where ``sys._getframe`` raises one per call; the generator's frame is read
    once, while the runtime loads, before any host code. Nothing is kept between
    calls (the yielded frame is not a local).
    """
    while True:
        try:
            yield _FRAMES[1].f_back.f_back.f_back
        except Exception:
            yield None


_FRAMES = [_frame_source()]
_FRAMES.append(_FRAMES[0].gi_frame)
_next_frame = _FRAMES[0].__next__


def _probed_frame():
    """The frame of the probed function that called the hook calling this. Another
    thread running the generator at this moment gets ``sys._getframe`` instead."""
    try:
        frame = _next_frame()
    except Exception:  # ValueError: generator already executing (another thread)
        frame = None
    return frame if frame is not None else _getframe(2)


def _enter(k):
    """A logged call begins: build its record from the frame's own arguments.

    The verdict is taken before any call: near the recursion limit a nested
    call may fail, and a verdict left behind would send the next call of the
    deepest frame down the logged path.
    """
    verdict = _gate.r
    mine, verdict.d = verdict.d, None
    try:
        if mine is not None:
            if mine[0] == _ident():
                _begin(k, mine[1], _probed_frame())
            else:
                verdict.d = mine  # another thread's verdict: that thread takes it
    except Exception:
        pass
    except BaseException as exc:  # a signal handler's: raise it as if from the caller
        _untrace(exc)
        raise


def _begin(k, n, frame):
    """Open the record of call ``n`` of target ``k``, keyed by its frame (generators and
    coroutines interleave, so no stack)."""
    r = _S.tls
    if r.busy:
        return
    r.busy = True
    t = None
    try:
        t = _S.targets[k]
        _S.calls[_frame_key(frame)] = _open_call(t, n, frame)
    except Exception as exc:
        _swallow("enter", t, exc)
    finally:
        r.busy = False


def _ret(k, value):
    """``return value`` of a logged call: finish its record; hands ``value`` back."""
    try:
        _end(k, _probed_frame(), value, None)
    except Exception:
        pass
    except BaseException as exc:  # a signal handler's: raise it as if from the caller
        _untrace(exc)
        raise
    return value


def _exc(k):
    """A logged call raises: finish its record with the exception (re-raised after)."""
    try:
        _end(k, _probed_frame(), None, sys.exc_info()[1])
    except Exception:
        pass
    except BaseException as exc:  # a signal handler's: raise it as if from the caller
        _untrace(exc)
        raise


def _end(k, frame, value, exc):
    """Close the record of the logged call running in ``frame``, if there is one."""
    r = _S.tls
    if r.busy:
        return
    r.busy = True
    t = None
    try:
        state = _S.calls.pop(_frame_key(frame), None)
        if state is not None:
            t = _S.targets[k]
            _close_call(t, state, value, exc)
    except Exception as err:
        _swallow("leave", t, err)
    finally:
        r.busy = False


def _hooks():
    """The object behind ``builtins.__recon_probe__``: the gate, with the rest attached."""
    _gate.r = _Verdict()
    _gate.enter, _gate.ret, _gate.exc = _enter, _ret, _exc
    _gate.RE, _gate.BE = RecursionError, BaseException
    return _gate


def _eval_exprs(t, exprs, ns, rec, full, glb):
    """``glb``: the namespace of the call's own frame (the runtime keeps neither the function
    nor its module's namespace: a reference would keep them alive past the host's last one)."""
    out = rec.setdefault("expr", {})
    for name, code in exprs:
        try:
            out[name] = _describe(eval(code, glb, ns), full)
        except Exception as exc:
            out[name] = {"error": _exc_text(exc)}
            _swallow("expr " + name, t, exc)


def _open_call(t, n, frame):
    """The call record so far (arguments, self attributes, entry expressions)."""
    capturing = _capturing()
    full = "args" in t.log and not capturing
    rec = {"kind": "call", "t": _now(), "pid": _S.pid, "tid": _ident(), "target": t.qualname,
           "n": n}
    if capturing:
        rec["mode"] = "meta"
    ns = _arguments(frame)
    if "args" in t.log or "shapes" in t.log:
        rec["args"] = {p: _describe(ns[p], full) for p in t.params[t.bound:] if p in ns}
    if t.self_attrs and t.bound and t.params and t.params[0] in ns:
        rec["self"] = {path: _self_attr(ns[t.params[0]], path, full) for path in t.self_attrs}
    if capturing and (t.entry_exprs or t.exit_exprs):
        rec["expr"] = {"skipped": "CUDA graph capture"}
    elif t.entry_exprs:
        _eval_exprs(t, t.entry_exprs, ns, rec, full, frame.f_globals)
    glb = frame.f_globals if t.exit_exprs else None
    return rec, ns if t.exit_exprs else None, capturing, _perf(), glb


def _arguments(frame):
    """A copy of the frame's locals at entry (its arguments, its closure cells).

    Up to 3.12 ``f_locals`` is a snapshot dict kept on the frame: left filled, it
    would keep an argument the body ``del``s alive until the frame ends (a later
    ``__del__``, a later weakref callback). It is emptied again; Python refills it
    whenever it is asked for (``locals()``, a tracer). From 3.13 it is a view.
    """
    loc = frame.f_locals
    ns = dict(loc)
    if type(loc) is dict and loc is not frame.f_globals:  # a function's (f_code is audited)
        loc.clear()
    return ns


def _self_attr(obj, path, full):
    """A ``--self-attr`` path: plain ``getattr``, because the user asked for it."""
    try:
        for part in path.split("."):
            obj = getattr(obj, part)
        return _describe(obj, full)
    except Exception as exc:
        return {"error": _exc_text(exc)}


def _close_call(t, state, result, exc):
    """Finish and write the call record after the call."""
    rec, ns, capturing, t0, glb = state
    rec["wall_us"] = round((_perf() - t0) * 1e6, 1)
    rec["pid"] = _S.pid
    full = "args" in t.log and not capturing
    if exc is not None:
        rec["raised"] = _exc_text(exc)
    elif "return" in t.log:
        rec["return"] = _describe(result, full)
    if t.exit_exprs and not capturing and exc is None:
        ns["result"] = result
        _eval_exprs(t, t.exit_exprs, ns, rec, full, glb)
    t.logged += 1
    _emit(rec)


# -- instrumenting a code object in place ---------------------------------------
class _Refuse(Exception):
    """The target is left alone; the message goes to the VERIFY record."""


def _children(node):
    """``ast.iter_child_nodes``."""
    for name in node._fields:
        value = getattr(node, name, None)
        if isinstance(value, _ast.AST):
            yield value
        elif type(value) is list:
            for item in value:
                if isinstance(item, _ast.AST):
                    yield item


def _walk(node):
    """``ast.walk``: ``node`` and every node below it."""
    todo = [node]
    while todo:
        node = todo.pop()
        todo.extend(_children(node))
        yield node


def _copy_location(new, old):
    """``ast.copy_location``."""
    for attr in ("lineno", "col_offset", "end_lineno", "end_col_offset"):
        if attr in old._attributes and attr in new._attributes:
            value = getattr(old, attr, None)
            if value is not None or (hasattr(old, attr) and attr.startswith("end_")):
                setattr(new, attr, value)
    return new


def _fix_locations(node, where=(1, 0, 1, 0)):
    """``ast.fix_missing_locations``: a node without a position takes its parent's."""
    here = list(where)
    for i, attr in enumerate(("lineno", "col_offset", "end_lineno", "end_col_offset")):
        if attr not in node._attributes:
            continue
        missing = getattr(node, attr, None) is None if i >= 2 else not hasattr(node, attr)
        if missing:
            setattr(node, attr, here[i])
        else:
            here[i] = getattr(node, attr)
    for child in _children(node):
        _fix_locations(child, here)
    return node


def _clone(value, deep=True):
    """A copy of an AST node (or list of them), deep by default: ``copy.deepcopy``
    without its memo (the memo's ``id()`` calls are audit events)."""
    if type(value) is list:
        return [_clone(v, deep) for v in value]
    if not isinstance(value, _ast.AST):
        return value
    fields = {f: getattr(value, f) for f in value._fields if hasattr(value, f)}
    if deep:
        fields = {f: _clone(v) for f, v in fields.items()}
    new = type(value)(**fields)
    for attr in value._attributes:
        if hasattr(value, attr):
            setattr(new, attr, getattr(value, attr))
    return new


class _AstKit:
    """The part of the ``ast`` module the runtime uses: the node classes of ``_ast``
    (built into the interpreter) and the helpers above. Importing ``ast.py`` when a
    target's module loads would be an import the host's ``__import__`` and audit hooks
    see; importing it with the runtime would cost every process its start-up time."""

    def __init__(self):
        self.__dict__.update((k, v) for k, v in vars(_ast).items() if not k.startswith("__"))
        self.iter_child_nodes, self.walk = _children, _walk
        self.copy_location, self.fix_missing_locations = _copy_location, _fix_locations

    def parse(self, source, filename):
        return compile(source, filename, "exec", _ast.PyCF_ONLY_AST)


_AST = _AstKit()


def _source(fn, code):
    """The text the function was compiled from: its file, or its zip/loader's source."""
    filename = code.co_filename
    glb = fn.__globals__
    loader, name = glb.get("__loader__"), glb.get("__name__")
    if filename.startswith("<frozen "):
        filename = glb.get("__file__") or filename
    try:
        with open(filename, "rb") as fh:
            return fh.read()
    except OSError:
        pass
    get_source = getattr(loader, "get_source", None) if loader is not None else None
    try:
        text = get_source(name) if get_source is not None and type(name) is str else None
    except Exception:
        text = None
    if text is None:
        raise _Refuse("no source for its code (the runtime instruments only what it can "
                      "compile back to the same bytecode)")
    return text


def _find_def(ast, tree, code):
    """The ``def`` whose code is ``code`` (name and first line), with its enclosing scopes."""
    scopes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    stack = [(tree, [])]
    while stack:
        node, path = stack.pop()
        for child in ast.iter_child_nodes(node):
            inner = path + [child] if isinstance(child, scopes) else path
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    child.name == code.co_name:
                first = child.decorator_list[0].lineno if child.decorator_list else child.lineno
                if first == code.co_firstlineno:
                    return child, path
            stack.append((child, inner))
    raise _Refuse("its definition is not in the source file (edited since it was imported?)")


def _shell(ast, node, inner):
    """A copy of scope ``node`` holding only ``inner`` (names and nesting kept)."""
    fields = {f: getattr(node, f) for f in node._fields}
    fields.update(body=[inner], decorator_list=[])
    if isinstance(node, ast.ClassDef):
        fields.update(bases=[], keywords=[])
    shell = type(node)(**fields)
    return ast.copy_location(shell, node)


def _compile_def(ast, fdef, path, code, imports):
    """Compile ``fdef`` in a skeleton of its real scopes; return the code object for it.

    The enclosing classes keep their names (private-name mangling, the
    ``__class__`` cell of ``super()``); one outer function binds the code's free
    variables so they compile as closure loads, in the same order.
    """
    node = fdef
    for scope in reversed(path):
        node = _shell(ast, scope, node)
    free = [v for v in code.co_freevars if v not in ("__class__", "__classdict__")]
    if free:
        bind = ast.Assign(targets=[ast.Name(v, ast.Store()) for v in free],
                          value=ast.Constant(None))
        outer = _shell(ast, ast.FunctionDef(**{f: getattr(fdef, f) for f in fdef._fields}), bind)
        outer.name = "__recon_outer__"
        outer.args = ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[],
                                   kw_defaults=[], kwarg=None, defaults=[])
        outer.returns = None
        if "type_params" in outer._fields:
            outer.type_params = []
        outer.body.append(node)
        node = outer
    module = ast.Module(body=imports + [node], type_ignores=[])
    ast.fix_missing_locations(module)
    top = compile(module, code.co_filename, "exec", _future_flags(code.co_flags), True)
    level = [top]
    while level:
        for c in level:
            if c.co_name == code.co_name and c.co_firstlineno == code.co_firstlineno:
                return c
        level = [k for c in level for k in c.co_consts if type(k) is type(code)]
    raise _Refuse("its code was not found in the compiled source")


def _future_flags(flags):
    mask = 0
    for name in __future__.all_feature_names:
        mask |= getattr(__future__, name).compiler_flag
    return flags & mask


def _same_code(a, b):
    """Same bytecode, names, constants (recursively), layout and line table."""
    keys = ("co_code", "co_names", "co_varnames", "co_freevars", "co_cellvars", "co_argcount",
            "co_kwonlyargcount", "co_posonlyargcount", "co_flags", "co_firstlineno",
            "co_linetable")
    if any(getattr(a, key, None) != getattr(b, key, None) for key in keys):
        return False
    if len(a.co_consts) != len(b.co_consts):
        return False
    for x, y in zip(a.co_consts, b.co_consts):  # noqa: B905 - same length checked above
        if type(x) is not type(y):
            return False
        if type(x) is type(a):
            if not _same_code(x, y):
                return False
        elif x != y and not (x != x and y != y):  # NaN constants
            return False
    return True


def _instrument(fn, code, k):
    """A code object for ``fn`` (whose code is ``code``: each read of ``__code__`` is an
    audit event) that behaves exactly like its own, plus the probe prologue."""
    ast = _AST
    if getattr(fn, "__builtins__", None) is not _builtins_dict():
        raise _Refuse("its module runs with its own builtins")
    tree = _S.trees.get(code.co_filename)
    if tree is None:  # targets of one module share its parse (the costly step)
        tree = _S.trees[code.co_filename] = ast.parse(_source(fn, code), code.co_filename)
    fdef, path = _find_def(ast, tree, code)
    imports = _module_imports(ast, tree)
    if not _same_code(_compile_def(ast, fdef, path, code, imports), code):
        raise _Refuse("its source no longer compiles to the loaded code (edited since import?)")
    new = _clone(fdef, deep=False)
    new.body = _probed_body(ast, fdef.body, k, code.co_flags & _CO_ASYNC_GENERATOR)
    probed = _compile_def(ast, new, path, code, imports)
    qualname = getattr(code, "co_qualname", None)  # 3.11+; differs for a closure's skeleton
    if qualname is not None and probed.co_qualname != qualname:
        probed = probed.replace(co_qualname=qualname)  # a code.__new__ audit event
    return probed


def _module_imports(ast, tree):
    """``import`` statements of the module scope (into if/try/with blocks, not defs)."""
    found, stack = [], list(tree.body)
    while stack:
        node = stack.pop(0)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stack.extend(c for c in ast.iter_child_nodes(node)
                         if isinstance(c, (ast.stmt, ast.ExceptHandler)))
    return found


def _builtins_dict():
    return sys.modules["builtins"].__dict__


def _probed_body(ast, body, k, async_gen):
    """``[docstring] globals; <prologue: gate(k), and when the call is logged: enter(k);
    try: <copy, returns through ret> except BaseException: exc(k); raise>
    <original body>``, every new node on the first statement's line."""
    doc = body[:1] if (isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                       and type(body[0].value.value) is str) else []
    body = body[len(doc):] or [ast.Pass()]
    decls = []
    original = _hoist_decls(ast, body, decls)
    twin = _hoist_decls(ast, _clone(body), [])
    where = body[0]

    def hook(attr=None):
        node = ast.Name(HOOK, ast.Load())
        return ast.Attribute(node, attr, ast.Load()) if attr else node

    def call(func, *args):
        return ast.Call(func, list(args), [])

    k_node = ast.Constant(k)
    twin = _route_returns(ast, twin, hook, call, k, async_gen)
    tail = ([ast.Expr(call(hook("ret"), k_node, ast.Constant(None))), ast.Return(None)]
            if async_gen else [ast.Return(call(hook("ret"), k_node, ast.Constant(None)))])
    logged = ast.Try(body=twin + tail, orelse=[], finalbody=[], handlers=[ast.ExceptHandler(
        type=hook("BE"), name=None, body=[ast.Expr(call(hook("exc"), k_node)), ast.Raise()])])
    prologue = [_prologue(ast, hook, call(hook(), k_node), ast.If(
        test=ast.Compare(ast.Attribute(hook("r"), "d", ast.Load()), [ast.IsNot()],
                         [ast.Constant(None)]),
        body=[ast.Expr(call(hook("enter"), k_node)), logged], orelse=[]))]
    for node in decls + prologue:
        for sub in ast.walk(node):
            if "lineno" in sub._attributes and not hasattr(sub, "lineno"):
                ast.copy_location(sub, where)
    return doc + decls + prologue + original


def _prologue(ast, hook, gate, if_logged):
    """The gate's call, run so that the function behaves as its own body wherever it
    runs, even where ``__recon_probe__`` does not resolve (a function sent by value,
    cloudpickle or marshal, to a process without the runtime; one rebuilt with other
    builtins): ``try: gate except: <swallowed when the hook is missing, or when it is a
    RecursionError of the gate's call itself; anything else (a signal handler's) is
    re-raised> else: if_logged``. No name but the hook's is looked up (a bare
    ``except`` and a bare ``raise``), and nothing is called in the handler, which may
    run at the recursion limit::

        try: __recon_probe__(k)
        except:
            try: __recon_probe__.RE
            except: pass
            else:
                try: raise
                except __recon_probe__.RE: pass
        else: <if_logged>
    """
    reraise = ast.Try(body=[ast.Raise()], orelse=[], finalbody=[], handlers=[
        ast.ExceptHandler(type=hook("RE"), name=None, body=[ast.Pass()])])
    handler = ast.Try(body=[ast.Expr(hook("RE"))], orelse=[reraise], finalbody=[], handlers=[
        ast.ExceptHandler(type=None, name=None, body=[ast.Pass()])])
    return ast.Try(body=[ast.Expr(gate)], orelse=[if_logged], finalbody=[], handlers=[
        ast.ExceptHandler(type=None, name=None, body=[handler])])


def _own_scope(ast, node):
    """Child nodes of ``node`` in the same function scope (not nested defs or classes)."""
    nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
    return [c for c in ast.iter_child_nodes(node) if not isinstance(c, nested)]


def _own_blocks(ast, body):
    """Every statement list of the function's own scope (bodies, ``else``/``finally``
    blocks, handlers), each yielded before its children are visited, so a caller may
    rewrite it in place."""
    stack = [ast.Module(body=body, type_ignores=[])]
    while stack:
        node = stack.pop()
        for field in ("body", "orelse", "finalbody", "handlers"):
            block = getattr(node, field, None)
            if type(block) is list:
                yield block
        stack.extend(_own_scope(ast, node))


def _hoist_decls(ast, body, decls):
    """Replace ``global``/``nonlocal`` statements by ``pass`` (collected in ``decls``):
    the body appears twice, and a declaration may not follow a use of its name."""
    for block in _own_blocks(ast, body):
        for i, stmt in enumerate(block):
            if isinstance(stmt, (ast.Global, ast.Nonlocal)):
                decls.append(stmt)
                block[i] = ast.copy_location(ast.Pass(), stmt)
    return body


def _route_returns(ast, body, hook, call, k, async_gen):
    """Every ``return x`` of the function's own scope becomes ``return ret(k, x)``."""
    for block in _own_blocks(ast, body):
        for i in range(len(block) - 1, -1, -1):
            stmt = block[i]
            if not isinstance(stmt, ast.Return):
                continue
            wrapped = call(hook("ret"), ast.Constant(k), stmt.value or ast.Constant(None))
            if async_gen:
                block[i:i + 1] = [ast.copy_location(ast.Expr(wrapped), stmt), stmt]
            else:
                stmt.value = wrapped
    return body


# -- finding and patching targets ---------------------------------------------
def _namespace(obj):
    """The attribute dictionary of a module or class, read without running its code."""
    if isinstance(obj, type):
        return _type_dict(obj)
    found = _c_get(obj, "__dict__")
    return found if type(found) is dict else {}


def _lookup(owner, name):
    if isinstance(owner, type):
        return _static(owner, name)
    return _namespace(owner).get(name, _MISSING)


def _unwrap(raw):
    """The plain function behind a class attribute or decorator chain (``__wrapped__``)."""
    tp = type(raw)
    for kind in (staticmethod, classmethod):
        if issubclass(tp, kind):
            raw = kind.__dict__["__func__"].__get__(raw)
            break
    else:
        if issubclass(tp, property):
            raw = property.__dict__["fget"].__get__(raw)
        elif _tname(tp) == "cached_property" and type(_c_get(raw, "__dict__")) is dict:
            raw = _c_get(raw, "__dict__").get("func", raw)
    for _ in range(16):
        # Only through wrappers that call the inner function as Python code: a Python
        # function (functools.wraps) or functools' C lru_cache. A compiler's dispatcher
        # (numba, torch.jit) that also sets __wrapped__ would compile our prologue.
        if type(raw) is not _FunctionType and _tname(type(raw)) != "_lru_cache_wrapper":
            break
        inner = _namespace(raw).get("__wrapped__", _MISSING)
        if inner is _MISSING:
            break
        raw = inner
    if type(raw) is not _FunctionType:
        raise _Refuse(f"a {_tname(type(raw))}, not a Python function: left alone (a Python "
                      "wrapper would change its identity and how it binds)")
    return raw


def _patch(t, k):
    """Instrument one target whose module is imported; returns its new status."""
    mod = sys.modules.get(t.module)
    if mod is None:
        return "pending"
    owner = mod
    parts = t.attr.split(".")
    for part in parts[:-1]:
        owner = _lookup(owner, part)
        if owner is _MISSING:
            return f"not found: {t.module} has no {part}"
    raw = _lookup(owner, parts[-1])
    if raw is _MISSING:
        return f"not found: no attribute {t.attr}"
    try:
        fn = _unwrap(raw)
        code = fn.__code__
        if HOOK in code.co_names:  # a second name for a function instrumented already
            return "skipped: the same function as another target (its calls log there)"
        new = _instrument(fn, code, k)
    except _Refuse as why:
        return "skipped: " + str(why)
    t.bound = int(isinstance(owner, type) and not issubclass(type(raw), staticmethod))
    n = code.co_argcount + code.co_kwonlyargcount
    n += bool(code.co_flags & _CO_VARARGS) + bool(code.co_flags & _CO_VARKEYWORDS)
    t.params = list(code.co_varnames[:n])
    t.first, t.every = int(_S.spec.get("first", 10)), int(_S.spec.get("every", 0))
    fn.__code__ = new
    return "patched"


def _on_loaded(name):
    """Called after a watched module finished executing (and once at start)."""
    tls = _S.tls
    was, tls.busy = tls.busy, True
    try:
        if name == "torch" or (name is None and "torch" in sys.modules):
            _learn_torch()
        for k, t in enumerate(_S.targets):
            if t.status == "pending" and (name is None or t.module == name):
                try:
                    t.status = _patch(t, k)
                except Exception as exc:
                    t.status = "error: " + _exc_text(exc)
                if name is not None and t.status != "pending":
                    _emit({"kind": "patched", "t": _now(), "pid": _S.pid, "target": t.qualname,
                           "status": t.status})
    except Exception as exc:
        _swallow("import hook", None, exc)
    finally:
        _S.trees.clear()
        tls.busy = was


def _learn_torch():
    """Keep references to torch's own 'am I compiling / capturing' questions."""
    global _compiling
    compiler = sys.modules.get("torch.compiler")
    _compiling = _namespace(compiler).get("is_compiling") if compiler is not None else None
    cuda = sys.modules.get("torch.cuda")
    if cuda is not None and "is_current_stream_capturing" in _namespace(cuda):
        _S.torch_cuda = cuda


def _as_import_machinery(cls):
    """Label the stand-in's methods as import-machinery frames. They sit between
    importlib's own frames while a module executes; labelled this way, tracebacks of
    a failing import are trimmed exactly as without them (import.c cuts importlib's
    chunk of frames), and ``warnings`` skips them when it counts ``stacklevel``."""
    for name in ("__getattr__", "create_module", "exec_module"):
        fn = cls.__dict__[name]
        fn.__code__ = fn.__code__.replace(co_filename="<frozen importlib._bootstrap_external>")
    return cls


@_as_import_machinery
class _Loader:
    """Stands in for one spec's loader until its module has executed, then tells the
    runtime. The real loader (often a class shared by every import, such as
    ``BuiltinImporter``) is never modified, and is put back on the spec and the
    module before the module's own code runs."""

    def __init__(self, spec, real):
        self._spec, self._real = spec, real

    def __getattr__(self, name):
        return getattr(self._real, name)

    def create_module(self, spec):
        return self._real.create_module(spec)

    def exec_module(self, module):
        spec, real = self._spec, self._real
        spec.loader = real
        try:  # noqa: SIM105 - the runtime does not import contextlib
            module.__loader__ = real
        except Exception:
            pass
        real.exec_module(module)
        _on_loaded(spec.name)


def _importing(name):
    """True when the import statement (or ``import_module``) asks, not
    ``importlib.util.find_spec``: a spec the host only looks at keeps its own loader.
    The import system holds the module's lock while it looks (``_module_locks``);
    without that table, the caller's frame tells (``sys._getframe``: an audit event)."""
    if type(_module_locks) is dict:
        return name in _module_locks
    try:
        return _getframe(3).f_code.co_name == "_find_and_load_unlocked"
    except Exception:
        return False


class _Finder:
    """Meta-path entry: for watched modules only, the spec the other finders return,
    with its loader stood in for (see :class:`_Loader`); ``None`` for everything else."""

    def find_spec(self, name, path=None, target=None):
        if name not in _S.watched or _S.tls.busy or not _importing(name):
            return None
        tls = _S.tls
        tls.busy = True
        try:
            spec = None
            for finder in sys.meta_path:
                find = getattr(finder, "find_spec", None) if finder is not self else None
                if find is not None:
                    spec = find(name, path, target)
                    if spec is not None:
                        break
            real = getattr(spec, "loader", None)
            if real is not None and hasattr(real, "exec_module") and hasattr(real, "create_module"):
                spec.loader = _Loader(spec, real)
            return spec
        except Exception:
            return None  # let the normal machinery find (or fail to find) it
        finally:
            tls.busy = False


# -- process life --------------------------------------------------------------
def _verify_record(log_error=None):
    env = {k: os.environ.get(k) for k in _S.spec.get("env") or ()}
    return {"kind": "VERIFY", "t": _now(), "pid": _S.pid, "ppid": os.getppid(),
            "forked_from": _S.forked_from, "argv": list(getattr(sys, "orig_argv", sys.argv)),
            "python": sys.version.split()[0], "executable": sys.executable,
            "runtime": RUNTIME_VERSION, "bundle": _S.bundle, "log": _S.path,
            "log_error": log_error, "env": env, "chained_sitecustomize": _S.chained,
            "targets": {t.qualname: t.status for t in _S.targets},
            "errors_so_far": _S.errors, "max_files": _S.max_files,
            "file_number": _S.file_number}


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
        if _S.log_state == "pending" and not any(calls.values()):
            return  # a fork that never called a target: no file, no place under the cap
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
    """In a forked child: own lock, own counters, and its own file and VERIFY record
    from its first record on (:func:`_start_log`). The error budget already spent is
    kept: a fork does not earn a new one."""
    tls = _S.tls
    try:
        _S.forked_from = _S.pid
        _S.pid, _S.lock = _getpid(), threading.Lock()
        tls.busy = True
        # The parent's descriptor: not ours to write; closed when this process opens its
        # own, if it is still the parent's log then (a host may have reused the number).
        _S.inherited = (_S.fd, _S.fd_id) if _S.fd >= 0 else None
        _S.fd, _S.fd_id, _S.path, _S.file_number = -1, None, None, None
        _S.log_state = "pending"
        for t in _S.targets:
            t.reset()
        _S.dropped = 0
        _S.enabled = _S.errors < _S.error_budget
    except Exception:
        pass
    finally:
        tls.busy = False


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

    Returns True when the runtime is active in this process. Never raises,
    never writes to stderr.
    """
    tls = _S.tls
    was, tls.busy = tls.busy, True
    try:
        if _S.enabled or _S.targets or os.environ.get("RECON_PROBE_DISABLE"):
            return _S.enabled
        if spec is None:
            with open(os.path.join(bundle_dir, "probe.json"), encoding="utf-8") as fh:
                spec = json.load(fh)
        if not _selected(spec):
            return False
        _configure(bundle_dir, spec, chained)
        _S.enabled = True
        error = _open_log()
        _builtins_dict()[HOOK] = _hooks()  # before any patch, so code sent by value logs too
        _on_loaded(None)  # targets already imported (a .pth file, the image's sitecustomize)
        _emit(_verify_record(log_error=error))
        sys.meta_path.insert(0, _Finder())
        os.register_at_fork(after_in_child=_after_fork)
        register = getattr(threading, "_register_atexit", None)  # runs in mp workers too
        if register is not None:
            register(_exit)
        import atexit

        atexit.register(_exit)
        return True
    except Exception:
        return False
    finally:
        tls.busy = was


def _configure(bundle_dir, spec, chained):
    _S.spec, _S.bundle, _S.chained = spec, bundle_dir, chained
    _S.max_bytes = int(spec.get("max_bytes", _S.max_bytes))
    _S.max_files = int(spec.get("max_files", _S.max_files))
    _S.error_budget = int(spec.get("error_budget", _S.error_budget))
    _S.log_dir = (os.environ.get("RECON_PROBE_LOG_DIR") or spec.get("log_dir")
                  or "/tmp/recon-probe-logs")
    _S.targets = [_Target(raw) for raw in spec.get("targets") or ()]
    _S.watched = {t.module for t in _S.targets} | {"torch"}
    _keep_on_pythonpath(bundle_dir)


def _keep_on_pythonpath(bundle_dir):
    """Spawned workers find the bundle only through ``PYTHONPATH``: make sure it is there."""
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    real = os.path.realpath(bundle_dir)
    if not any(os.path.realpath(p) == real for p in parts):
        os.environ["PYTHONPATH"] = os.pathsep.join([bundle_dir] + parts)
