"""Shared plumbing of the hybrid-model recipes (page alignment, SGLang track indices, DFlash).

Why this module exists: these recipes run *several* functions of a release in
one sandboxed child (``recon.slicing.run_calls``), and part of what they must
report is not a return value. vLLM's page alignment, for instance, returns
``None``: its answer is what it writes into ``cache_config`` and what it logs.
recon/slicing reports mutations of ``self`` only, so the child gets a small
helper file (passed as ``stub_file``; its names are visible to ``Py(...)``
expressions) that

* builds the engine objects the functions read (real classes of the slice,
  instantiated without ``__init__``, via :data:`CHILD_HELPERS`'s ``instance``),
* wraps config sections in ``Watched`` namespaces that report every write,
* forwards the release's own log records (``Setting attention block size to
  ...``) and the locals of a chosen function at its return,

all as marker lines on the child's stdout, which :func:`child_events` parses.
Nothing here computes an engine quantity: the numbers come from the release.

The static readers (:func:`module_dict`, :func:`registry_model_class`) read
*data* tables of a release (model registries) from its source with ``ast``,
so a recipe can pick the right class for an architecture without importing
the engine.
"""

from __future__ import annotations

import ast
import json
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..acquire.writer import write_text
from ..errors import ReconError
from .base import Provenance, RecipeContext

#: prefix of the marker lines the child helpers print
MARK = "@@recon-hybrid@@ "

#: Code run in the child (standard library + whatever ``real`` names); see the module docstring.
CHILD_HELPERS = r'''
import json as _json
import logging as _logging
import sys as _sys

_MARK = "@@recon-hybrid@@ "


def _plain(value):
    """JSON-able picture of a value (dtypes and enums by repr)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return repr(value)


def emit(kind, **data):
    """One marker line on stdout: the parent parses these (recipes/hybrid_common.py)."""
    print(_MARK + _json.dumps({"kind": kind, **{k: _plain(v) for k, v in data.items()}}),
          flush=True)


class _ToMarkers(_logging.Handler):
    def emit(self, record):
        try:
            emit("log", logger=record.name, level=record.levelname, message=record.getMessage())
        except Exception:  # a log line must never break the run
            pass


_root = _logging.getLogger()
_root.addHandler(_ToMarkers())
_root.setLevel(_logging.INFO)


def mod(name):
    """A module of the slice (or a real package) by dotted name."""
    return __import__(name, fromlist=["_"])


def attr(qual):
    """``pkg.mod:Class.attr`` -> the object, from the slice."""
    module, _, path = qual.partition(":")
    obj = mod(module)
    for part in path.split(".") if path else ():
        obj = getattr(obj, part)
    return obj


def instance(qual, **attrs):
    """An instance of a slice class without running its ``__init__`` (which needs the engine)."""
    cls = attr(qual)
    obj = object.__new__(cls)
    obj.__dict__.update(attrs)
    return obj


class Watched:
    """A config section (``cache_config`` ...): every write is reported, unknown reads are named."""

    def __init__(self, _name, **values):
        object.__setattr__(self, "_name", _name)
        self.__dict__.update(values)

    def __setattr__(self, key, value):
        emit("set", obj=self._name, attr=key, value=value)
        object.__setattr__(self, key, value)

    def __getattr__(self, key):
        if key.startswith("__") and key.endswith("__"):
            raise AttributeError(key)
        raise AttributeError(f"{self._name}.{key} is not modelled by recon for this release")

    def __repr__(self):
        return f"<{self._name}>"


def watch_locals(qualname, value=None):
    """Report the simple locals of the next frame of ``qualname`` (``Cls.meth``) at its return."""
    def local(frame, event, arg):
        if event == "return":
            values = {}
            for key, val in frame.f_locals.items():
                if val is None or isinstance(val, (bool, int, float, str)):
                    values[key] = val
                elif type(val).__name__ == "dtype":
                    values[key] = repr(val)
                elif type(val).__name__ == "Tensor" and val.numel() <= 4096:
                    values[key] = val.tolist()
            emit("locals", function=qualname, values=values)
            _sys.settrace(None)
        return local

    def start(frame, event, arg):
        code = frame.f_code
        if event == "call" and getattr(code, "co_qualname", code.co_name) == qualname:
            return local
        return None

    _sys.settrace(start)
    return value


def emit_globals(module, names, value=None):
    """Report module-level constants of a slice module (e.g. a kernel's chunk size); pass ``value`` on."""
    m = mod(module)
    emit("globals", module=module, values={n: getattr(m, n, None) for n in names
                                           if isinstance(getattr(m, n, None), (int, float, str))})
    return value


class NullContext:
    """Stands for ``set_current_vllm_config(...)``: the recipes pass every input explicitly."""

    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class ModelInfo:
    """Stands for ``ModelConfig._model_info``: the model class's interface flags (else False,
    as the registry's ``getattr(model, flag, False)``)."""

    def __init__(self, **flags):
        self.__dict__.update(flags)

    def __getattr__(self, key):
        if key.startswith("__") and key.endswith("__"):
            raise AttributeError(key)
        return False


class AssumedCudaGPU:
    """Stands for ``current_platform``: a CUDA GPU of compute capability ``cap`` (e.g. 90).

    The recipes state this assumption; anything else the code asks the platform
    is an error naming the attribute, never a silent guess.
    """

    device_name = "cuda"
    device_type = "cuda"

    def __init__(self, cap):
        self.cap = int(cap)

    def is_cuda(self):
        return True

    def is_cuda_alike(self):
        return True

    def is_rocm(self):
        return False

    def is_xpu(self):
        return False

    def is_cpu(self):
        return False

    def is_tpu(self):
        return False

    def is_out_of_tree(self):
        return False

    def _as_int(self, capability):
        if isinstance(capability, int):
            return capability
        major, minor = capability
        return major * 10 + minor

    def get_device_capability(self, device_id=0):
        cap = self.cap
        return ns(major=cap // 10, minor=cap % 10, to_int=lambda: cap,
                  as_version_str=lambda: f"{cap // 10}.{cap % 10}")

    def has_device_capability(self, capability, device_id=0):
        return self.cap >= self._as_int(capability)

    def is_device_capability(self, capability, device_id=0):
        return self.cap == self._as_int(capability)

    def is_device_capability_family(self, capability, device_id=0):
        return self.cap // 10 == self._as_int(capability) // 10

    def __getattr__(self, key):
        if key.startswith("__") and key.endswith("__"):
            raise AttributeError(key)
        raise AttributeError(f"current_platform.{key} is not modelled by recon (assumed CUDA "
                             f"sm{self.cap}); see the recipe's --set options")


LAYERS = {}


def layers_of(vllm_config, layer_type=None, layer_names=None):
    """Stands for ``get_layers_from_vllm_config``: the layers a recipe declared, by base class."""
    for klass in getattr(layer_type, "__mro__", (layer_type,)):
        name = getattr(klass, "__name__", "")
        if name in LAYERS:
            return dict(LAYERS[name])
    return {}
'''


@contextmanager
def child_helpers(params: Mapping[str, Any], extra: str = "") -> Iterator[Path]:
    """A temporary helper file for ``run_calls(stub_file=...)``: the helpers, ``PARAMS`` and ``extra``."""
    with tempfile.TemporaryDirectory(prefix="recon-recipe-") as tmp:
        path = Path(tmp) / "recipe_helpers.py"
        text = (CHILD_HELPERS + f"\nPARAMS = _json.loads({json.dumps(json.dumps(dict(params)))})\n"
                + extra)
        write_text(path, text)
        yield path


def child_events(stdout: str) -> list[dict[str, Any]]:
    """The marker records a run printed (in order)."""
    out = []
    for line in stdout.splitlines():
        if line.startswith(MARK):
            try:
                out.append(json.loads(line[len(MARK):]))
            except ValueError:
                continue
    return out


# -- static readers of a release's data tables ---------------------------------------------

def _module_tree(ctx: RecipeContext, module: str) -> ast.Module | None:
    """A module of the snapshot parsed with ``ast`` (None when absent or unparsable)."""
    info = ctx.index.modules.get(module)
    if info is None:
        return None
    try:
        return ast.parse(ctx.snapshot.read_text(info.path))
    except (SyntaxError, ValueError):
        return None


def module_dict(ctx: RecipeContext, module: str, name: str) -> dict[str, ast.expr] | None:
    """Entries (string key -> value node) of the module-level dict literal ``name``."""
    tree = _module_tree(ctx, module)
    if tree is None:
        return None
    for node in tree.body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == name for t in targets) \
                and isinstance(value, ast.Dict):
            return {k.value: v for k, v in zip(value.keys, value.values, strict=True)
                    if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    return None


def class_constant(ctx: RecipeContext, class_qualname: str, name: str) -> Any:
    """A literal class-level constant (``DEFAULT_BLOCK_SIZE: ClassVar[int] = 16``), else None."""
    try:
        info = ctx.index.classes[class_qualname]
    except KeyError:
        return None
    lines = ctx.snapshot.read_text(info.path).splitlines()
    try:
        tree = ast.parse("\n".join(lines[info.def_lineno - 1: info.end_lineno]).strip("\n")
                         if info.col == 0 else
                         "if 1:\n" + "\n".join(lines[info.def_lineno - 1: info.end_lineno]))
    except SyntaxError:
        return None
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        for node in cls.body:
            target = node.target if isinstance(node, ast.AnnAssign) else (
                node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
            value = getattr(node, "value", None)
            if isinstance(target, ast.Name) and target.id == name and value is not None:
                try:
                    return ast.literal_eval(value)
                except ValueError:
                    return None
        break
    return None


def _class_body(ctx: RecipeContext, class_qualname: str) -> list[ast.stmt]:
    info = ctx.index.classes.get(class_qualname)
    if info is None:
        return []
    lines = ctx.snapshot.read_text(info.path).splitlines()
    text = "\n".join(lines[info.def_lineno - 1: info.end_lineno])
    try:
        tree = ast.parse("if 1:\n" + text if info.col else text)
    except SyntaxError:
        return []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            return node.body
    return []


def class_defaults(ctx: RecipeContext, class_qualname: str) -> dict[str, Any]:
    """Literal field defaults of a (pydantic/dataclass) config class, as the release writes them.

    ``x: T = 3``, ``x: T = Field(default=3)`` and ``field(default=3)``; fields without a
    literal default are left out. Recipes start a modelled config section from these, so
    a field a new release adds is present with its default instead of missing.
    """
    out: dict[str, Any] = {}
    for node in _class_body(ctx, class_qualname):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and node.value is not None):
            continue
        value = node.value
        if isinstance(value, ast.Call) and getattr(value.func, "id", getattr(
                value.func, "attr", "")) in ("Field", "field"):
            kw = {k.arg: k.value for k in value.keywords}
            if "default" not in kw:
                continue
            value = kw["default"]
        try:
            out[node.target.id] = ast.literal_eval(value)
        except (ValueError, TypeError, SyntaxError, RecursionError):
            continue
    return out


def class_flags(ctx: RecipeContext, class_qualname: str) -> dict[str, bool]:
    """Boolean class constants along the static MRO (``is_hybrid: ClassVar[...] = True``).

    vLLM's model registry derives a model's ``_ModelInfo`` from these interface flags.
    """
    out: dict[str, bool] = {}
    for klass in mro(ctx, class_qualname):
        for node in _class_body(ctx, klass):
            target = node.target if isinstance(node, ast.AnnAssign) else (
                node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
            value = getattr(node, "value", None)
            if isinstance(target, ast.Name) and isinstance(value, ast.Constant) \
                    and isinstance(value.value, bool):
                out.setdefault(target.id, value.value)
    return out


def registry_model_class(ctx: RecipeContext, arch: str) -> str | None:
    """``module:Class`` the release's model registry maps ``arch`` to (vLLM), else None."""
    registry = "vllm.model_executor.models.registry"
    tree = _module_tree(ctx, registry)
    if tree is None:
        return None
    for node in ast.walk(tree):
        if not isinstance(node, ast.Dict):
            continue
        for key, value in zip(node.keys, node.values, strict=True):
            if isinstance(key, ast.Constant) and key.value == arch and isinstance(value, ast.Tuple) \
                    and len(value.elts) == 2 \
                    and all(isinstance(e, ast.Constant) and isinstance(e.value, str)
                            for e in value.elts):
                mod_name, cls_name = (e.value for e in value.elts)  # type: ignore[attr-defined]
                if not mod_name.startswith("vllm."):
                    mod_name = f"vllm.model_executor.models.{mod_name}"
                return registry_class(ctx, mod_name, cls_name)
    return None


def registry_class(ctx: RecipeContext, module: str, name: str) -> str:
    """``module:name`` where the class is defined (following package re-exports)."""
    direct = f"{module}:{name}"
    if direct in ctx.index.classes:
        return direct
    from ..index.resolve import Resolver

    ref = Resolver(ctx.index).resolve_dotted(f"{module}.{name}")
    return ref.name if ref is not None and ref.kind == "class" else direct


def mro(ctx: RecipeContext, class_qualname: str) -> tuple[str, ...]:
    """The class's MRO inside the package (static, via the index)."""
    from ..index.resolve import Resolver

    return Resolver(ctx.index).mro(class_qualname)


def find_method(ctx: RecipeContext, class_qualname: str, name: str) -> str | None:
    """Qualname of the definition ``Class.name`` resolves to (inherited ones included)."""
    from ..index.resolve import Resolver

    fn = Resolver(ctx.index).find_method(class_qualname, name)
    return fn.qualname if fn is not None else None


def functions_named(ctx: RecipeContext, local_name: str, *, module: str | None = None) -> list[str]:
    """Qualnames whose local part is ``local_name`` (optionally in ``module`` only)."""
    out = []
    for q in ctx.index.functions:
        mod_name, _, local = q.partition(":")
        if local == local_name and (module is None or mod_name == module):
            out.append(q)
    return sorted(out)


# -- options and provenance -----------------------------------------------------------------


def provenance_of(ctx: RecipeContext, qualnames: list[str]) -> list[Provenance]:
    """Provenance (file:line, sha256 of the definition) of each qualname, in order, once."""
    out: list[Provenance] = []
    seen: set[str] = set()
    for q in qualnames:
        if q in seen or q not in ctx.index.functions:
            continue
        seen.add(q)
        out.append(ctx.provenance(q))
    return out


def config_dtype(cfg: Mapping[str, Any]) -> str | None:
    """The checkpoint's dtype as written in config.json (``torch_dtype`` or ``dtype``)."""
    for scope in (cfg, cfg.get("text_config") or {}):
        for key in ("torch_dtype", "dtype"):
            value = scope.get(key)
            if isinstance(value, str):
                return value
    return None


_DTYPE_NAMES = {"half": "float16", "float16": "float16", "fp16": "float16",
                "bfloat16": "bfloat16", "bf16": "bfloat16", "float": "float32",
                "float32": "float32", "fp32": "float32"}


def model_dtype(flag: str | None, cfg: Mapping[str, Any]) -> tuple[str, str | None]:
    """``--dtype`` -> torch dtype name, with a note when ``auto`` had to decide.

    vLLM's ``auto`` takes the checkpoint dtype, except that float32 checkpoints
    are served in a 16-bit type (bfloat16 on GPUs that support it); that choice
    depends on the GPU, so it is stated as an assumption.
    """
    want = (flag or "auto").lower()
    if want != "auto":
        if want not in _DTYPE_NAMES:
            raise ReconError(f"--dtype {flag}: expected auto, half, float16, bfloat16, float or float32")
        return _DTYPE_NAMES[want], None
    found = config_dtype(cfg)
    if found is None:
        return "bfloat16", "--dtype auto and no torch_dtype in config.json: assumed bfloat16"
    name = _DTYPE_NAMES.get(found.lower().replace("torch.", ""))
    if name is None:
        raise ReconError(f"config.json dtype {found!r} is not a float type recon knows")
    if name == "float32":
        return "bfloat16", ("--dtype auto with a float32 checkpoint: assumed bfloat16 (what vLLM "
                            "picks on GPUs that support it; pass --dtype to choose)")
    return name, None
