"""The host-program matrix of the probe runtime: small programs that must not notice it.

Each :class:`Host` is a program (``main.py``, with ``eng.py`` from this folder
and any extra files beside it), the targets and options of its bundle, and a
check of what the probe log must hold. ``tests/test_probe_invisible.py`` runs
every program twice in real interpreters, without and with the bundle on
``PYTHONPATH``, and asserts the exit code, stdout and stderr are identical;
the expected output is always the program's own output without the bundle.
Every class of change listed in issue 17 has at least one program here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Records = list[dict[str, Any]]


@dataclass
class Host:
    name: str
    main: str
    targets: list[str]
    expect: Callable[[Records], None]
    options: dict[str, Any] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    # plain, nobody, ro-mount, full-mount, fsize, two-copies, isolated, image-site, disabled
    mode: str = "plain"
    torch: bool = False
    core: bool = False  # also run on every other Python version found
    # compare only the last N lines of stderr (a traceback whose middle lines depend
    # on where a timer signal lands, with or without the bundle)
    stderr_tail: int | None = None
    timeout: float = 90


# -- what the log must hold ------------------------------------------------------
def of(recs: Records, kind: str, target: str | None = None) -> Records:
    return [r for r in recs if r["kind"] == kind and (target is None or r.get("target") == target)]


def statuses(recs: Records) -> dict[str, str]:
    out: dict[str, str] = {}
    for r in of(recs, "VERIFY"):
        out.update(r["targets"])
    for r in of(recs, "patched"):
        out[r["target"]] = r["status"]
    return out


def calls(recs: Records) -> dict[str, int]:
    """Call counts summed over every process's EXIT record."""
    out: dict[str, int] = {}
    for r in of(recs, "EXIT"):
        for q, n in r["calls"].items():
            out[q] = out.get(q, 0) + (n or 0)
    return out


def expect(*, patched: tuple[str, ...] = (), skipped: tuple[str, ...] = (),
           counts: dict[str, int] | None = None, errors: int | None = 0,
           check: Callable[[Records], Any] | None = None) -> Callable[[Records], None]:
    """A checker: these targets patched / skipped, these call counts, no swallowed errors."""
    def run(recs: Records) -> None:
        st = statuses(recs)
        for q in patched:
            assert st.get(q) == "patched", (q, st.get(q))
        for q in skipped:
            assert (st.get(q) or "").startswith("skipped:"), (q, st.get(q))
        if counts is not None:
            got = calls(recs)
            assert {q: got.get(q) for q in counts} == counts, got
        if errors is not None:
            assert of(recs, "error") == [], of(recs, "error")
        if check is not None:
            result = check(recs)
            assert result is None or result is True, result
    return run


def nothing_logged(recs: Records) -> None:
    assert recs == [], recs[:3]


def first_call(recs: Records, target: str) -> dict[str, Any]:
    found = of(recs, "call", target)
    assert found, f"no call record for {target}"
    return found[0]


H: list[Host] = []


def host(name: str, main: str, targets: list[str], expect_: Callable[[Records], None],
         **kw: Any) -> None:
    H.append(Host(name, main, targets, expect_, **kw))


ARGS = {"log": ["args", "return"]}

# -- frames: no frame is added ---------------------------------------------------
host("traceback_uncaught", "import eng\neng.fail(3)\n", ["eng:fail"],
     expect(patched=("eng:fail",), check=lambda r: first_call(r, "eng:fail")["raised"]
            == "ValueError: bad 3"), core=True)
host("traceback_printed", """
import sys, traceback, eng
try:
    eng.fail(4)
except ValueError:
    traceback.print_exc(file=sys.stdout)
    print([(f.name, f.lineno) for f in traceback.extract_tb(sys.exc_info()[2])])
""", ["eng:fail"], expect(counts={"eng:fail": 1}), core=True)
host("exception_chain", """
import eng
def outer():
    try:
        eng.fail(1)
    except ValueError as exc:
        raise KeyError("again")
outer()
""", ["eng:fail"], expect(counts={"eng:fail": 1}))
host("warnings_stacklevel", """
import warnings, eng
eng.warn()
with warnings.catch_warnings(record=True) as got:
    warnings.simplefilter("always")
    eng.warn()
print([(w.filename.rsplit('/', 1)[-1], w.lineno) for w in got])
""", ["eng:warn"], expect(counts={"eng:warn": 2}), core=True)
host("getframe_caller", """
import eng
def main():
    return eng.caller()
print(main(), eng.caller())
""", ["eng:caller"], expect(counts={"eng:caller": 2}), core=True)
host("recursion_depth", "import eng\nprint(eng.rec(0))\n", ["eng:rec"],
     expect(patched=("eng:rec",)), core=True)
host("recursion_depth_all_logged", "import eng\nprint(eng.rec(0))\n", ["eng:rec"],
     expect(patched=("eng:rec",), errors=None, check=lambda r: len(of(r, "call")) > 900),
     options={"first": 10**6})
host("recursion_raised_limit", """
import sys, eng
n = 100000 if sys.version_info >= (3, 11) else 8000
sys.setrecursionlimit(n + 1000)
print(eng.deep(n))
""", ["eng:deep"], expect(patched=("eng:deep",)), core=True)
host("inspect_stack", """
import inspect, sys, cb
def inner():
    print([f.function for f in inspect.stack()[:3]], sys._getframe(2).f_code.co_name)
def main():
    cb.probe_me(inner)
main()
""", ["cb:probe_me"], expect(counts={"cb:probe_me": 1}),
     files={"cb.py": "def probe_me(fn):\n    return fn()\n"})
host("logging_funcname", """
import logging, sys, lg
logging.basicConfig(stream=sys.stdout, format="%(funcName)s:%(lineno)d:%(module)s %(message)s",
                    level=logging.INFO)
lg.work()
""", ["lg:work"], expect(counts={"lg:work": 1}),
     files={"lg.py": "import logging\n\ndef work():\n    logging.getLogger().info('hi')\n"})
host("locals_in_target", "import loc\nprint(loc.f(1, 2))\n", ["loc:f"],
     expect(counts={"loc:f": 1}),
     files={"loc.py": "def f(a, b):\n    c = a + b\n    return sorted(locals()), c\n"})

# -- builtins, C extensions, builtin and frozen modules: left alone --------------
host("builtin_as_class_attribute", """
import time
class A:
    pc = time.perf_counter
print(type(A().pc()).__name__, type(time.perf_counter).__name__, A.pc is time.perf_counter)
""", ["time:perf_counter"], expect(skipped=("time:perf_counter",)), core=True)
host("builtin_len", "print(len('abc'), len([1, 2]), type(len).__name__)\n", ["builtins:len"],
     expect(skipped=("builtins:len",)))
host("builtin_module_target", """
import pwd, grp
print(pwd.getpwuid(0).pw_name, grp.getgrgid(0).gr_name)
import _csv, _struct, xxsubtype, _symtable
print("imports fine")
""", ["pwd:getpwuid", "_csv:reader"], expect(skipped=("pwd:getpwuid", "_csv:reader")),
     core=True)
host("frozen_module_target", """
import __hello__
__hello__.main()
import __phello__
print("frozen imports fine")
""", ["__hello__:main"], expect(errors=0))
host("frozen_stdlib_target", """
import os.path
print(os.path.join("a", "b"), os.path.join("/x", "y", "z"))
""", ["posixpath:join"], expect(patched=("posixpath:join",), counts={"posixpath:join": 2}))
host("c_extension_target", """
import math, _json
class A:
    s = math.sqrt
print(A().s(16.0), _json.encode_basestring_ascii("é"))
""", ["math:sqrt", "_json:encode_basestring_ascii"],
     expect(skipped=("math:sqrt", "_json:encode_basestring_ascii")))
host("os_getpid", "import os\nprint(os.getpid() > 0)\n", ["os:getpid"],
     expect(skipped=("os:getpid",)))
host("json_dumps_used_by_runtime", """
import json
print(json.dumps({"a": [1, 2]}), json.dumps(3))
""", ["json:dumps"], expect(patched=("json:dumps",), counts={"json:dumps": 2}), options=ARGS)

# -- identity: the function object is the one the host has ----------------------
host("registry_and_copies", """
import eng, user
print(user.REG[eng.total], user.total is eng.total, eng.total in user.REG)
print(user.use())
""", ["eng:total"], expect(counts={"eng:total": 1}),
     files={"user.py": "from eng import total\nREG = {total: 't'}\n\ndef use():\n"
                       "    return total([1, 2])\n"}, core=True)
host("pickle_function_and_method", """
import pickle, eng
print(pickle.loads(pickle.dumps(eng.total)) is eng.total,
      pickle.loads(pickle.dumps(eng.Engine.step)) is eng.Engine.step,
      pickle.loads(pickle.dumps(eng.Engine.make)) == eng.Engine.make)
""", ["eng:total", "eng:Engine.step", "eng:Engine.make"],
     expect(patched=("eng:total", "eng:Engine.step", "eng:Engine.make")), core=True)
host("type_hints_and_annotations", """
import typing, eng
print(typing.get_type_hints(eng.total), eng.total.__annotations__)
print(typing.get_type_hints(eng.Engine.step))
""", ["eng:total", "eng:Engine.step"], expect(patched=("eng:total",)))
host("defaults_and_kwdefaults", """
import eng
print(eng.total.__defaults__, eng.total.__kwdefaults__)
eng.total.__defaults__ = (10,)
eng.total.__kwdefaults__ = {"bonus": 5}
print(eng.total([1]))
""", ["eng:total"], expect(check=lambda r: first_call(r, "eng:total")["args"]
                           == {"xs": {"type": "list", "len": 1, "items": [1]}, "start": 10,
                               "bonus": 5}), options=ARGS, core=True)
host("inspect_answers", """
import inspect, eng
print(inspect.getfile(eng.total).rsplit('/', 1)[-1], inspect.getsourcelines(eng.total)[1])
print(inspect.signature(eng.total), inspect.signature(eng.Worker.determine_available_memory))
print(inspect.iscoroutinefunction(eng.fetch), inspect.isgeneratorfunction(eng.count))
print(inspect.getsource(eng.Engine.step).splitlines()[0].strip(), eng.Engine.step.__doc__)
""", ["eng:total", "eng:fetch", "eng:count", "eng:Engine.step"],
     expect(patched=("eng:total", "eng:fetch", "eng:count", "eng:Engine.step")), core=True)
host("property_subclass", """
import props
print(type(vars(props.C)["x"]).__name__, props.C().x, props.C.x.__class__.__name__)
""", ["props:C.x"], expect(counts={"props:C.x": 1}), files={"props.py": """
class loud(property):
    def __get__(self, obj, tp=None):
        print("loud get")
        return super().__get__(obj, tp)

class C:
    @loud
    def x(self):
        return 5
"""})
host("decorated_method_expression", """
import eng
w = eng.Worker()
print(w.determine_available_memory(100), eng.Worker.determine_available_memory.__wrapped__.__name__)
""", ["eng:Worker.determine_available_memory"],
     expect(check=lambda r: first_call(r, "eng:Worker.determine_available_memory")["expr"]
            == {"util": 0.9, "b": 100}),
     options={"exprs": ["util=self.gpu_memory_utilization", "b=budget"]}, core=True)
host("compiler_dispatcher_left_alone", """
import disp
print(disp.jitted(3), disp.cached(3), disp.cached(3), disp.cached.cache_info().hits)
""", ["disp:jitted", "disp:cached"], expect(skipped=("disp:jitted",), patched=("disp:cached",),
                                             counts={"disp:cached": 1}),
     files={"disp.py": """
import functools

class Dispatcher:  # like numba's: sets __wrapped__, then compiles py_func's bytecode itself
    def __init__(self, fn):
        functools.update_wrapper(self, fn)
        self.code = fn.__code__

    def __call__(self, x):
        assert self.code is self.__wrapped__.__code__, "bytecode changed under the compiler"
        return self.__wrapped__(x)

@Dispatcher
def jitted(x):
    return x * 2

@functools.lru_cache(maxsize=None)
def cached(x):
    return x + 1
"""})
host("function_attributes", """
import eng
eng.total.tag = "t"
print(vars(eng.total), eng.total.tag, eng.total([1]))
""", ["eng:total"], expect(counts={"eng:total": 1}))
host("names_and_code_shape", """
import eng
f = eng.total
c = f.__code__
print(f.__qualname__, f.__module__, f.__name__, c.co_varnames, c.co_argcount,
      c.co_kwonlyargcount, c.co_filename.rsplit('/', 1)[-1], c.co_firstlineno, c.co_name)
print(eng.Engine.step.__qualname__, eng.add3.__qualname__, eng.add3.__code__.co_freevars)
""", ["eng:total", "eng:Engine.step", "eng:add3"],
     expect(patched=("eng:total", "eng:Engine.step", "eng:add3")))
host("singledispatch_registry", """
import sd
print(sd.show(1), sd.show("a"), sd.show(2.5), sorted(t.__name__ for t in sd.show.registry))
""", ["sd:show"], expect(patched=("sd:show",), counts={"sd:show": 2}), files={"sd.py": """
import functools

@functools.singledispatch
def show(x):
    return f"obj {x}"

@show.register
def _(x: int):
    return f"int {x}"
"""})
host("weakref_copy_identity", """
import copy, weakref, eng
r = weakref.ref(eng.total)
print(r() is eng.total, copy.deepcopy(eng.total) is eng.total, copy.copy(eng.total) is eng.total)
print(eng.total in {eng.total}, hash(eng.total) == hash(r()))
""", ["eng:total"], expect(patched=("eng:total",)))
host("argument_freed_when_the_body_drops_it", """
import fin
fin.consume(fin.Noisy("a"))
print("after call")
print(fin.keep_locals(1, 2))
""", ["fin:consume", "fin:keep_locals"],
     expect(counts={"fin:consume": 1, "fin:keep_locals": 1}), options=ARGS, core=True,
     files={"fin.py": """
class Noisy:
    def __init__(self, name):
        self.name = name

    def __del__(self):
        print("freed", self.name)

def consume(obj):
    del obj
    print("body goes on")
    return 1

def keep_locals(a, b):
    c = a + b
    return sorted(locals().items())
"""})
host("refcount_and_collection", """
import gc, sys, weakref, eng
print(sys.getrefcount(eng.total))
gone = []
r = weakref.ref(eng.bump, lambda _: gone.append(True))
print(eng.bump())
del eng.bump
gc.collect()
print(gone, r() is None)
""", ["eng:total", "eng:bump"], expect(patched=("eng:total", "eng:bump")), core=True)
host("class_dict_kinds", """
import eng
d = vars(eng.Engine)
print([type(d[k]).__name__ for k in ("step", "make", "helper", "size")])
print(d["step"] is eng.Engine.step, d["helper"].__func__ is eng.Engine.helper)
e = eng.Engine()
print(e.step(3), e.make(1), eng.Engine.make(2), e.helper(1, 2, k=3), e.size)
""", ["eng:Engine.step", "eng:Engine.make", "eng:Engine.helper", "eng:Engine.size"],
     expect(counts={"eng:Engine.step": 1, "eng:Engine.make": 2, "eng:Engine.helper": 1,
                    "eng:Engine.size": 1},
            check=lambda r: first_call(r, "eng:Engine.step")["args"] == {"n": 3, "scale": 2}),
     options=ARGS, core=True)
host("two_names_one_function", "import eng, user\nprint(user.total([1]), eng.total([2]))\n",
     ["eng:total", "user:total"], expect(patched=("eng:total",), skipped=("user:total",),
                                         counts={"eng:total": 2}),
     files={"user.py": "from eng import total\n"})
host("circular_import_copy", "import tgt, helper\nprint(helper.g(2), tgt.f(3))\n", ["tgt:f"],
     expect(check=lambda r: [c["args"]["x"] for c in of(r, "call")] == [2, 3]),
     files={"tgt.py": "def f(x):\n    return x * 10\nimport helper  # noqa\n",
            "helper.py": "from tgt import f\n\ndef g(x):\n    return f(x) + 1\n"}, options=ARGS)
host("abstract_method", """
import ab
print(ab.Base.run.__isabstractmethod__, ab.Impl().run())
try:
    ab.Base()
except TypeError as exc:
    print("TypeError", "abstract" in str(exc))
""", ["ab:Base.run", "ab:Impl.run"], expect(patched=("ab:Base.run", "ab:Impl.run")),
     files={"ab.py": """
import abc

class Base(abc.ABC):
    @abc.abstractmethod
    def run(self):
        return 0

class Impl(Base):
    def run(self):
        return super().run() + 1
"""})
host("closure_global_super_mangled", """
import eng
e = eng.Engine()
print(eng.add3(4), eng.add3.__closure__[0].cell_contents, eng.bump(), eng.bump(), eng.COUNTER)
print(e.parent(), e.secret())
""", ["eng:add3", "eng:bump", "eng:Engine.parent", "eng:Engine.secret"],
     expect(counts={"eng:add3": 1, "eng:bump": 2, "eng:Engine.parent": 1,
                    "eng:Engine.secret": 1}), core=True)
host("exec_defined_function", "import dyn\nprint(dyn.g(1))\n", ["dyn:g"],
     expect(skipped=("dyn:g",)),
     files={"dyn.py": "exec('def g(x):\\n    return x + 1', globals())\n"})
host("module_getattr_not_called", """
import lazy
print(lazy.real(2), lazy.CALLS)
""", ["lazy:real", "lazy:missing"], expect(patched=("lazy:real",)), files={"lazy.py": """
CALLS = []

def __getattr__(name):
    CALLS.append(name)
    raise AttributeError(name)

def real(x):
    return x * 2
"""})
host("metaclass_getattribute_not_called", """
import meta
print(meta.K().m(), meta.SEEN)
""", ["meta:K.m"], expect(counts={"meta:K.m": 1}), files={"meta.py": """
SEEN = []

class Meta(type):
    def __getattribute__(cls, name):
        SEEN.append(name)
        return super().__getattribute__(name)

class K(metaclass=Meta):
    def m(self):
        return 1
"""})
host("dataclass_and_enum_methods", """
import dc
print(dc.P(1, 2), dc.Color.RED.describe())
""", ["dc:P.__post_init__", "dc:Color.describe"],
     expect(counts={"dc:P.__post_init__": 1, "dc:Color.describe": 1}), files={"dc.py": """
import dataclasses, enum

@dataclasses.dataclass
class P:
    x: int
    y: int

    def __post_init__(self):
        self.y += 1

class Color(enum.Enum):
    RED = 1

    def describe(self):
        return self.name.lower()
"""})

host("target_module_fails_to_import", "import eng\nimport broken\n", ["broken:f"],
     expect(check=lambda r: statuses(r) == {"broken:f": "pending"}),
     files={"broken.py": "def f():\n    return 1\n\nraise RuntimeError('module is broken')\n"},
     core=True)
host("import_time_warning_stacklevel", """
import warnings
warnings.simplefilter("always")
import deprecated_mod
print(deprecated_mod.f())
""", ["deprecated_mod:f"], expect(counts={"deprecated_mod:f": 1}),
     files={"deprecated_mod.py": "import warnings\nwarnings.warn('old module', "
                                 "DeprecationWarning, stacklevel=2)\n\ndef f():\n"
                                 "    return 1\n"}, core=True)
host("find_spec_keeps_loader", """
import importlib.util, eng_spec_probe
spec = importlib.util.find_spec("later")
print(type(spec.loader).__name__)
import later
print(type(later.__spec__.loader).__name__, later.__loader__ is later.__spec__.loader, later.f(1))
""", ["later:f"], expect(patched=("later:f",), counts={"later:f": 1}),
     files={"later.py": "def f(x):\n    return x + 1\n", "eng_spec_probe.py": ""}, core=True)
host("cached_property_target", """
import cp
c = cp.C()
print(c.value, c.value, vars(c), type(vars(cp.C)["value"]).__name__)
""", ["cp:C.value"], expect(counts={"cp:C.value": 1}), files={"cp.py": """
import functools

class C:
    @functools.cached_property
    def value(self):
        return 42
"""})

# -- arguments are looked at through their type only -----------------------------
HOSTILE = """
import threading
LOCK = threading.Lock()
SEEN = []

class Getattr:
    def __getattr__(self, name):
        SEEN.append("getattr " + name)
        raise AttributeError(name)

class Getattribute:
    def __getattribute__(self, name):
        SEEN.append("getattribute " + name)
        return object.__getattribute__(self, name)

class Locked:
    def __repr__(self):
        with LOCK:
            return "Locked()"
    __str__ = __repr__

class BadList(list):
    def __len__(self):
        SEEN.append("len")
        return 99
    def __iter__(self):
        SEEN.append("iter")
        return iter([])

class BadDict(dict):
    def items(self):
        SEEN.append("items")
        return []
    def __iter__(self):
        SEEN.append("dict iter")
        return iter([])

class LiesAboutClass:
    @property
    def __class__(self):
        SEEN.append("__class__")
        return int

class ShapeLike:
    @property
    def shape(self):
        SEEN.append("shape")
        return (2, 3)
    @property
    def dtype(self):
        SEEN.append("dtype")
        return "f4"

class Key:
    def __hash__(self):
        return 1
    def __eq__(self, other):
        SEEN.append("eq")
        return self is other
    def __str__(self):
        SEEN.append("key str")
        return "k"

class Loud(Exception):
    def __str__(self):
        SEEN.append("exc str")
        return "loud"

def raise_loud():
    raise Loud(Getattr())
"""
for _name, _arg in [("getattr", "h.Getattr()"), ("getattribute", "h.Getattribute()"),
                    ("bad_list", "h.BadList([1, 2])"), ("bad_dict", "h.BadDict(a=1)"),
                    ("lies_about_class", "h.LiesAboutClass()"), ("shape_property", "h.ShapeLike()"),
                    ("dict_keys", "{h.Key(): 1, 'plain': h.Getattr()}")]:
    host(f"arg_{_name}", f"""
import eng, h
print(eng.echo({_arg}, k={_arg}), h.SEEN)
""", ["eng:echo"], expect(counts={"eng:echo": 1}), files={"h.py": HOSTILE}, options=ARGS)
host("arg_repr_takes_held_lock", """
import eng, h
with h.LOCK:
    print(eng.echo(h.Locked(), {h.Locked(): h.Locked()}, [h.Locked()]))
print("no hang")
""", ["eng:echo"], expect(counts={"eng:echo": 1}), files={"h.py": HOSTILE}, options=ARGS,
     timeout=30, core=True)
host("arg_lazy_module_not_loaded", """
import importlib.util, sys, eng
spec = importlib.util.find_spec("heavy")
spec.loader = importlib.util.LazyLoader(spec.loader)
mod = importlib.util.module_from_spec(spec)
sys.modules["heavy"] = mod
spec.loader.exec_module(mod)
print(eng.echo(mod), "executed" if "LOADED" in vars(mod) else "still lazy")
""", ["eng:echo"], expect(counts={"eng:echo": 1}),
     files={"heavy.py": "print('heavy module executed')\nLOADED = True\n"}, options=ARGS)
host("exception_str_not_called", """
import h
try:
    h.raise_loud()
except h.Loud:
    print("caught", h.SEEN)
""", ["h:raise_loud"], expect(check=lambda r: first_call(r, "h:raise_loud")["raised"] == "Loud"),
     files={"h.py": HOSTILE})
host("self_attr_and_expr_user_asked", """
import eng
print(eng.Engine().step(3), eng.total([1, 2, 3], start=4))
""", ["eng:Engine.step", "eng:total"],
     expect(check=lambda r: (first_call(r, "eng:Engine.step")["self"] == {"cfg.block_size": 1152}
                            and first_call(r, "eng:total")["expr"] == {"n": 3, "twice": 20})),
     options={"log": ["args", "return"], "self_attrs": ["eng:Engine.step::cfg.block_size"],
              "exprs": ["eng:total::n=len(xs)", "eng:total::twice=result * 2"]})
host("enum_and_subclass_values", """
import enum, collections, eng
class Mode(enum.IntEnum):
    A = 3
P = collections.namedtuple("P", "x y")
print(eng.echo(Mode.A, P(1, 2), collections.OrderedDict(a=1), b"xy", 1.5, None, True))
""", ["eng:echo"], expect(check=lambda r: first_call(r, "eng:echo")["args"]["args"]["items"][:2]
                         == [{"type": "Mode", "value": "3"},
                             {"type": "P", "len": 2, "items": [1, 2]}]), options=ARGS)

# -- the log file: the runtime's own descriptor, never stderr -------------------
host("host_closes_fds_and_reuses", """
import os, eng
eng.total([1])
os.closerange(3, 4096)
fd = os.open("host.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
for n in range(900, 1024):
    os.dup2(fd, n)
for i in range(5):
    eng.total([i])
    os.write(fd, b"host line\\n")
os.close(fd)
print(fd, open("host.txt").read().count("host line"), "kind" in open("host.txt").read())
""", ["eng:total"], expect(check=lambda r: len(of(r, "call")) == 6), core=True)
host("fd_numbers_unchanged", """
import os, eng
eng.total([1])
a = os.open("a.txt", os.O_WRONLY | os.O_CREAT, 0o644)
b = open("b.txt", "w")
print(a, b.fileno(), os.dup(a))
""", ["eng:total"], expect(counts={"eng:total": 1}), core=True)
host("unwritable_log_dir_parent_reads_stdout_first", """
import subprocess, sys
child = "import eng\\nfor i in range(100000):\\n    eng.total([i])\\nprint('child done')\\n"
p = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE)
out = p.stdout.read()
err = p.stderr.read()
print(p.wait(), out.decode().strip(), len(err))
""", ["eng:total"], nothing_logged, options={"first": 10**9, "log_dir": "@blocked"},
     timeout=120)
host("file_size_limit_reached", """
import eng
for i in range(3000):
    eng.total([i])
print("done")
""", ["eng:total"], expect(errors=None), options={"first": 10**9}, mode="fsize")
host("read_only_log_mount", """
import eng
print([eng.total([i]) for i in range(50)][-1])
""", ["eng:total"], nothing_logged, options={"first": 10**9}, mode="ro-mount")
host("full_log_folder", """
import eng
print([eng.total([i]) for i in range(2000)][-1])
""", ["eng:total"], nothing_logged, options={"first": 10**9}, mode="full-mount")
host("size_cap", """
import eng
print(sum(eng.total([i]) for i in range(3000)))
""", ["eng:total"], expect(check=lambda r: len(of(r, "cap")) == 1 and of(r, "EXIT")[0]["calls"]
                           == {"eng:total": 3000}), options={"first": 10**6, "max_bytes": 16384})

# -- the bundle: loads once, readable by anyone, budget kept across fork ---------
host("two_copies_on_pythonpath", "import eng\nprint(eng.total([2]))\n", ["eng:total"],
     expect(check=lambda r: len(of(r, "VERIFY")) == 1 and calls(r) == {"eng:total": 1}),
     mode="two-copies", core=True)
host("fork_keeps_error_budget", """
import os, eng
for i in range(5):
    eng.total([i])
pid = os.fork()
if pid == 0:
    for i in range(5):
        eng.total([i])
    os._exit(0)
os.waitpid(pid, 0)
print("ok")
""", ["eng:total"], expect(errors=None, check=lambda r: len(of(r, "error")) == 3
                           and len(of(r, "VERIFY")) == 1),  # the child, switched off, writes
     options={"first": 100, "error_budget": 3, "exprs": ["bad=xs[99]"]})  # nothing (issue 36)
host("unprivileged_user", "import eng\nprint(eng.total([1, 2]))\n", ["eng:total"],
     expect(counts={"eng:total": 1}), mode="nobody")
host("isolated_mode_not_probed", "import sys\nsys.path.insert(0, '.')\nimport eng\n"
     "print(eng.total([1]))\n", ["eng:total"], nothing_logged, mode="isolated")
host("image_sitecustomize_chained", """
import eng, sitecustomize
print(eng.total([1]), sitecustomize.MARKER)
""", ["eng:total"], expect(check=lambda r: statuses(r) == {"eng:total": "patched"}
                           and calls(r) == {"eng:total": 1}), mode="image-site")
host("disabled_by_env", "import eng\nprint(eng.total([1]))\n", ["eng:total"], nothing_logged,
     mode="disabled")

# -- processes, threads, coroutines, generators, signals, shutdown -------------
host("threads", """
import threading, eng
out = []
gate = threading.Barrier(8)
def run(k):
    gate.wait()
    for i in range(150):
        out.append(eng.total([k, i]))
ts = [threading.Thread(target=run, args=(k,)) for k in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
print(len(out), sum(out))
""", ["eng:total"], expect(check=lambda r: sorted(c["n"] for c in of(r, "call"))
                           == list(range(1200))), options={"first": 10**6}, core=True)
host("raw_fork", """
import os, eng
eng.total([1])
pid = os.fork()
if pid == 0:
    eng.total([2]); eng.total([3])
    os._exit(0)
os.waitpid(pid, 0)
eng.total([4])
print("ok")
""", ["eng:total"], expect(check=lambda r: len(of(r, "VERIFY")) == 2 and len(of(r, "call")) == 4))
for _method in ("spawn", "fork", "forkserver"):
    host(f"pool_{_method}", f"""
import multiprocessing as mp
import eng

def work(i):
    return eng.total([i, i])

if __name__ == "__main__":
    with mp.get_context("{_method}").Pool(2) as pool:
        print(sorted(pool.map(work, range(8))))
""", ["eng:total"], expect(check=lambda r: sorted(c["args"]["xs"]["items"][0]
                                                  for c in of(r, "call")) == list(range(8))),
         options=ARGS, timeout=120)
host("subprocess_child", """
import subprocess, sys
r = subprocess.run([sys.executable, "-c", "import eng; print(eng.total([5]))"],
                   capture_output=True, text=True)
print(r.returncode, r.stdout.strip(), r.stderr)
""", ["eng:total"], expect(check=lambda r: len(of(r, "VERIFY")) == 2 and len(of(r, "call")) == 1))
host("asyncio_gather", """
import asyncio, eng
async def main():
    return await asyncio.gather(*(eng.fetch(i) for i in range(5)))
print(asyncio.run(main()))
""", ["eng:fetch"], expect(check=lambda r: sorted((c["args"]["x"], c["return"])
                                                  for c in of(r, "call"))
                           == [(i, i + 1) for i in range(5)]), options=ARGS, core=True)
host("coroutine_cancelled", """
import asyncio, cor
async def main():
    t = asyncio.ensure_future(cor.slow())
    await asyncio.sleep(0.01)
    t.cancel()
    try:
        await t
    except asyncio.CancelledError:
        print("cancelled", cor.STATE)
asyncio.run(main())
""", ["cor:slow"], expect(check=lambda r: first_call(r, "cor:slow")["raised"]
                          .startswith("CancelledError")), files={"cor.py": """
import asyncio
STATE = []

async def slow():
    try:
        await asyncio.sleep(10)
    finally:
        STATE.append("finally ran")
"""})
host("async_generator", """
import asyncio, agen
async def main():
    return [x async for x in agen.ticks(3)]
print(asyncio.run(main()))
""", ["agen:ticks"], expect(counts={"agen:ticks": 1}), files={"agen.py": """
async def ticks(n):
    for i in range(n):
        yield i
        if i == 5:
            return
"""})
host("generators", """
import eng
g = eng.count(5)
print(next(g), next(g))
g.close()
def outer():
    result = yield from eng.count(2)
    print("returned", result)
print(list(outer()), list(eng.count(0)))
""", ["eng:count"], expect(check=lambda r: [c.get("return", c.get("raised"))
                                            for c in of(r, "call")]
                           == ["GeneratorExit", "done", "done"]), options=ARGS, core=True)
host("generator_send_throw", """
import gen
g = gen.acc()
next(g)
print(g.send(2), g.send(3))
try:
    g.throw(KeyError("x"))
except StopIteration as stop:
    print("stopped", stop.value)
h = gen.acc()
next(h)
h.close()
print(gen.LOG)
""", ["gen:acc"], expect(counts={"gen:acc": 2}), files={"gen.py": """
LOG = []

def acc():
    total = 0
    try:
        while True:
            total += yield total
    except KeyError:
        return total
    except GeneratorExit:
        LOG.append("closed")
        raise
"""})
host("signals_during_logging", """
import signal, eng
hits = []
def handler(signum, frame):
    hits.append(eng.total([1]))
signal.signal(signal.SIGALRM, handler)
signal.setitimer(signal.ITIMER_REAL, 0.0005, 0.0005)
s = sum(eng.total([i]) for i in range(20000))
signal.setitimer(signal.ITIMER_REAL, 0, 0)
print(s, all(h == 1 for h in hits))
""", ["eng:total"], expect(check=lambda r: of(r, "EXIT")[0]["calls"]["eng:total"] >= 20000),
     options={"first": 10**6}, timeout=120)
host("signal_handler_raises", """
import signal, sig
class Stop(Exception):
    pass
def handler(signum, frame):
    raise Stop()
signal.signal(signal.SIGUSR1, handler)
try:
    sig.work()
except Stop:
    print("stopped")
""", ["sig:work"], expect(check=lambda r: first_call(r, "sig:work")["raised"] == "Stop"),
     files={"sig.py": "import os, signal\n\ndef work():\n    os.kill(os.getpid(), "
                      "signal.SIGUSR1)\n    for _ in range(1000):\n        pass\n    return 1\n"})
host("keyboard_interrupt_while_logging", """
import os, signal, sys, eng
def handler(signum, frame):
    raise KeyboardInterrupt
signal.signal(signal.SIGALRM, handler)
signal.setitimer(signal.ITIMER_REAL, 0.2)
print("start", flush=True)
while True:
    eng.total([1, 2, 3])
""", ["eng:total"], expect(errors=None), options={"first": 10**9}, timeout=60,
     stderr_tail=1)
host("interpreter_shutdown", """
import atexit, threading, time, eng
class Late:
    def __del__(self):
        print("del", eng.total([2]))
keep = Late()
atexit.register(lambda: print("atexit", eng.total([3])))
def spin():
    while True:
        eng.total([1])
        time.sleep(0.0001)
threading.Thread(target=spin, daemon=True).start()
time.sleep(0.05)
print("main done")
""", ["eng:total"], expect(errors=None), core=True)
host("exit_codes", """
import sys, eng
print(eng.total([1]))
sys.exit(3)
""", ["eng:total"], expect(counts={"eng:total": 1}))
host("os_exit", "import os, eng\nprint(eng.total([1]), flush=True)\nos._exit(5)\n",
     ["eng:total"], expect(check=lambda r: len(of(r, "call")) == 1))
host("zip_imported_module", """
import sys
sys.path.insert(0, "lib.zip")
import zmod
print(zmod.f(2), zmod.__loader__.__class__.__name__, zmod.__spec__.loader is zmod.__loader__)
""", ["zmod:f"], expect(patched=("zmod:f",), counts={"zmod:f": 1}),
     files={"@zip:lib.zip/zmod.py": "def f(x):\n    return x + 40\n"})

# -- torch (CPU): tensors, torch.compile(fullgraph=True), decorated methods -----
TORCH_MOD = """
import torch

def scale(x, factor):
    return x * factor

def shapes(a, b, n=0):
    return tuple(a.shape), float(b.sum()), n

SEEN = []

class Traced(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        SEEN.append(getattr(func, "__name__", "?"))
        return super().__torch_function__(func, types, args, kwargs or {})

class Worker:
    def __init__(self):
        self.gpu_memory_utilization = 0.5

    @torch.inference_mode()
    def determine_available_memory(self, budget):
        return int(budget * self.gpu_memory_utilization)
"""
host("torch_compile_fullgraph", """
import torch, tens
@torch.compile(fullgraph=True, backend="eager", dynamic=False)
def f(x):
    return tens.scale(x, 2.0) + 1
x = torch.ones(4)
print(f(x).tolist(), f(x + 1).tolist(), tens.scale(x, 3.0).tolist())
""", ["tens:scale"], expect(check=lambda r: calls(r) == {"tens:scale": 1}), options=ARGS,
     files={"tens.py": TORCH_MOD}, torch=True)
host("tensor_arguments", """
import torch, tens
small = torch.arange(6, dtype=torch.float32).reshape(2, 3)
print(tens.shapes(torch.empty(1 << 20, dtype=torch.uint8), small, n=3))
t = small.as_subclass(tens.Traced)
tens.SEEN.clear()
print(tens.shapes(small, small), len(tens.SEEN))
""", ["tens:shapes"], expect(check=lambda r: first_call(r, "tens:shapes")["args"]["b"]["values"]
                             == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]), options=ARGS,
     files={"tens.py": TORCH_MOD}, torch=True)
host("tensor_subclass_torch_function", """
import torch, tens
t = torch.ones(3).as_subclass(tens.Traced)
tens.SEEN.clear()
print(tens.scale(t, 2.0).sum().item(), sorted(set(tens.SEEN)))
""", ["tens:scale"], expect(check=lambda r: first_call(r, "tens:scale")["args"]["x"]
                            == {"type": "Traced"}), options=ARGS,
     files={"tens.py": TORCH_MOD}, torch=True)
host("inference_mode_method_expression", """
import tens
print(tens.Worker().determine_available_memory(100))
""", ["tens:Worker.determine_available_memory"],
     expect(check=lambda r: first_call(r, "tens:Worker.determine_available_memory")["expr"]
            == {"util": 0.5}), options={"exprs": ["util=self.gpu_memory_utilization"]},
     files={"tens.py": TORCH_MOD}, torch=True)

HOSTS = {h.name: h for h in H}
assert len(HOSTS) == len(H), "host names must be unique"
