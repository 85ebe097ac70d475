"""recon hotfix verify: is the file Python imports for MODULE the hotfix, and is it what runs?

This file is copied verbatim into every hotfix folder. Run it with the
engine's own interpreter, inside the container (standard library only,
Python 3.8 or later)::

    docker exec -i ENGINE python3 - --module MODULE --sha256 HEX --import < verify_hotfix.py

Checks, in order (the first failure sets the exit status):

1. where (exit 3): the file the import system finds for MODULE, searched the
   way ``import`` searches (``sys.meta_path``, ``sys.path``, each package's
   ``__path__``) without running any package's ``__init__``. A compiled
   extension or a bytecode-only module found there is a failure: a mounted
   ``.py`` would have no effect.
2. bytes (exit 1): that file's sha256 is the hotfix's.
3. bytecode (exit 2): the code object the interpreter's own loader returns
   for that file (from ``__pycache__`` when it accepts the cached ``.pyc``,
   else compiled from the file) equals the code compiled from the file now.
   A stale ``.pyc`` the loader still accepts (an unchecked hash-based one, or
   a timestamp one whose recorded mtime and size happen to match) fails here.
4. pieces (exit 5): each ``--piece QUALNAME=LINE`` is defined in that code at
   the hotfix's line.
5. ``--import`` (exit 4): imports MODULE for real (runs the package as the
   engine does) and checks that ``module.__file__`` is the same file and that
   each piece's running ``__code__`` is the one checked above.

Exit status 0 when every check passes. ``--where`` prints the file found and
stops (to learn where an image installs the package). ``--json`` prints one
JSON object instead of lines.
"""

import hashlib
import importlib
import importlib.machinery
import importlib.util
import json
import os
import sys

EXIT_NOT_HOTFIX, EXIT_STALE, EXIT_NOT_FOUND, EXIT_IMPORT, EXIT_PIECE = 1, 2, 3, 4, 5
EXIT_USAGE = 64
_CO_OPTIMIZED = 0x0001  # set on function code, not on module or class bodies


def parse_args(argv):
    """``--module M --sha256 HEX [--piece Q=LINE ...] [--import] [--where] [--json]``."""
    opts = {"module": None, "sha256": None, "pieces": {}, "import": False, "where": False,
            "json": False}
    it = iter(argv)
    for arg in it:
        if arg in ("--module", "--sha256"):
            opts[arg[2:]] = next(it, None)
        elif arg == "--piece":
            name, _, line = (next(it, None) or "").partition("=")
            opts["pieces"][name] = int(line) if line.isdigit() else None
        elif arg in ("--import", "--where", "--json"):
            opts[arg[2:]] = True
        else:
            usage(f"unknown argument {arg!r}")
    if not opts["module"] or (not opts["where"] and not opts["sha256"]):
        usage("--module and --sha256 are required")
    return opts


def usage(message):
    sys.stderr.write(f"verify_hotfix: {message}\n")
    raise SystemExit(EXIT_USAGE)


def find_spec(module):
    """The module's spec as the import system would find it, without executing any package."""
    path = None
    spec = None
    parts = module.split(".")
    for i in range(len(parts)):
        name = ".".join(parts[: i + 1])
        spec = _spec_from_meta_path(name, path)
        if spec is None:
            return None
        if i < len(parts) - 1:
            path = _search_path(spec)
            if not path:
                return None
    return spec


def _search_path(spec):
    """A package's ``__path__`` as a plain list (what its submodules are searched in)."""
    locations = spec.submodule_search_locations
    return None if locations is None else list(locations)


def _spec_from_meta_path(name, path):
    for finder in sys.meta_path:
        if finder is importlib.machinery.PathFinder:
            spec = path_find(name, sys.path if path is None else path)
        else:
            try:
                spec = finder.find_spec(name, path)
            except (ImportError, ValueError, AttributeError, KeyError):
                continue
        if spec is not None:
            return spec
    return None


def path_find(name, path):
    """``PathFinder.find_spec`` without its one dependency on imported parents.

    A namespace package's spec built by ``PathFinder`` asks ``sys.modules`` for
    its parent, which this script never imports; so the path entries' own
    finders are asked, in order, as ``PathFinder`` asks them: a module or a
    regular package wins, namespace portions are gathered until then.
    """
    portions = []
    for entry in path:
        finder = _entry_finder(entry)
        spec = finder.find_spec(name) if finder is not None else None
        if spec is None:
            continue
        if spec.loader is not None:
            return spec
        portions.extend(spec.submodule_search_locations or [])
    if not portions:
        return None
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = portions
    return spec


def _entry_finder(entry):
    finder = sys.path_importer_cache.get(entry)
    if finder is not None:
        return finder
    for hook in sys.path_hooks:
        try:
            return hook(entry)
        except ImportError:
            continue
    return None


def sha256_of(path):
    """The file's sha256, read once (what ``hotfix.json`` records as ``patched.sha256``)."""
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def pyc_state(origin):
    """What the cached ``.pyc`` next to the file says, and whether the loader would accept it."""
    try:
        cache = importlib.util.cache_from_source(origin)
    except (NotImplementedError, ValueError):
        return {"pyc": None, "state": "no bytecode cache in use"}
    try:
        with open(cache, "rb") as fh:
            head = fh.read(16)
    except OSError:
        return {"pyc": cache, "state": "no .pyc there yet: compiled from the file"}
    if head[:4] != importlib.util.MAGIC_NUMBER:
        return {"pyc": cache, "state": "a .pyc of another Python version: ignored"}
    flags = int.from_bytes(head[4:8], "little")
    if flags & 1:
        kind = "checked" if flags & 2 else "unchecked"
        return {"pyc": cache, "state": f"{kind} hash-based .pyc"}
    st = os.stat(origin)
    same = (int.from_bytes(head[8:12], "little") == int(st.st_mtime) & 0xFFFFFFFF
            and int.from_bytes(head[12:16], "little") == st.st_size & 0xFFFFFFFF)
    verdict = "match" if same else "differ from"
    return {"pyc": cache, "state": f"timestamp .pyc, recorded mtime and size {verdict} the file's"}


def loaded_code(spec):
    """(code the loader returns, code compiled from the file now); the loader writes nothing."""
    loader = spec.loader
    sys.dont_write_bytecode = True
    code = loader.get_code(spec.name)
    fresh = loader.source_to_code(loader.get_data(spec.origin), spec.origin)
    return code, fresh


def code_objects(code, prefix=""):
    """``{qualname: [code, ...]}`` of every function and class body defined in ``code``."""
    out = {}
    for const in code.co_consts:
        if not hasattr(const, "co_code"):
            continue
        if const.co_name.startswith("<") and const.co_name != "<lambda>":
            continue  # comprehensions and generator expressions
        qual = getattr(const, "co_qualname", prefix + const.co_name)
        out.setdefault(qual, []).append(const)
        inner = qual + (".<locals>." if const.co_flags & _CO_OPTIMIZED else ".")
        for name, codes in code_objects(const, inner).items():
            out.setdefault(name, []).extend(codes)
    return out


def check_pieces(code, pieces):
    """``{qualname: (ok, detail, code)}``: each piece defined at its hotfix line."""
    found = code_objects(code)
    out = {}
    for name, line in pieces.items():
        codes = [c for c in found.get(name, []) if c.co_flags & _CO_OPTIMIZED]
        match = [c for c in codes if line is None or c.co_firstlineno == line]
        if match:
            reads = ", ".join(sorted(set(match[0].co_names))[:16]) or "(none)"
            out[name] = (True, f"defined at line {match[0].co_firstlineno}; the names its "
                               f"bytecode reads: {reads}", match[0])
        elif codes:
            lines = ", ".join(str(c.co_firstlineno) for c in codes)
            out[name] = (False, f"defined at line {lines}, not {line}", None)
        else:
            out[name] = (False, "not defined in this module's code", None)
    return out


def running_code(module, qualname):
    """The ``__code__`` that runs for ``module.<qualname>`` after import (decorators unwrapped)."""
    obj = module
    for part in qualname.split("."):
        holder = obj
        obj = vars(holder).get(part) if hasattr(holder, "__dict__") else None
        if obj is None:
            obj = getattr(holder, part)
    obj = getattr(obj, "fget", obj)
    obj = getattr(obj, "__func__", obj)
    while hasattr(obj, "__wrapped__"):
        obj = obj.__wrapped__
    return getattr(obj, "__code__", None)


def check_import(opts, origin, pieces):
    """Import the module for real; (ok, detail)."""
    try:
        module = importlib.import_module(opts["module"])
    except Exception as err:  # the engine's own import failed: say so, do not hide it
        return False, f"import failed: {type(err).__name__}: {err}"
    where = os.path.realpath(getattr(module, "__file__", "") or "")
    if where != os.path.realpath(origin):
        return False, f"imported from {where}, not {origin}"
    for name, (_ok, _detail, code) in pieces.items():
        try:
            running = running_code(module, name)
        except AttributeError:
            return False, f"{name} is not an attribute of the imported module"
        if code is not None and running is not None and running != code:
            return False, f"{name} runs other code than the hotfix's (replaced at import?)"
    return True, f"imported {opts['module']} from {where}"


class Report:
    """The checks done so far; the first failure decides the exit status."""

    def __init__(self):
        self.rows = []
        self.status = 0

    def add(self, check, ok, detail, status):
        self.rows.append({"check": check, "ok": bool(ok), "detail": detail})
        if not ok and not self.status:
            self.status = status

    def emit(self, as_json):
        if as_json:
            print(json.dumps({"ok": self.status == 0, "status": self.status, "checks": self.rows}))
            return
        for row in self.rows:
            mark = "ok  " if row["ok"] else "FAIL"
            print(f"{mark} {row['check']:<8} {row['detail']}")


def run(opts):
    """Every check in order; a later check still runs after a failure (the report says all)."""
    report = Report()
    spec = find_spec(opts["module"])
    if spec is None or not spec.origin or not os.path.isfile(spec.origin):
        report.add("where", False, f"{opts['module']} is not found by this interpreter "
                   f"({sys.executable})", EXIT_NOT_FOUND)
        return report
    source_loader = isinstance(spec.loader, importlib.machinery.SourceFileLoader)
    report.add("where", source_loader, spec.origin if source_loader else
               f"{spec.origin} is loaded by {type(spec.loader).__name__}, not from Python "
               "source: a mounted .py has no effect", EXIT_NOT_FOUND)
    if opts["where"] or not source_loader:
        return report
    digest = sha256_of(spec.origin)
    report.add("bytes", digest == opts["sha256"],
               f"sha256 {digest[:16]} (hotfix: {opts['sha256'][:16]})", EXIT_NOT_HOTFIX)
    code, fresh = loaded_code(spec)
    cache = pyc_state(spec.origin)
    where = f" ({cache['pyc']})" if cache["pyc"] else ""
    report.add("bytecode", code == fresh, ("the code that runs is compiled from this file; "
               if code == fresh else "STALE: the loader returns bytecode that is not this file's; ")
               + cache["state"] + where, EXIT_STALE)
    pieces = check_pieces(code, opts["pieces"])
    for name, (ok, detail, _code) in pieces.items():
        report.add("piece", ok, f"{name} {detail}", EXIT_PIECE)
    if opts["import"]:
        ok, detail = check_import(opts, spec.origin, pieces)
        report.add("import", ok, detail, EXIT_IMPORT)
    return report


def main(argv=None):
    """Parse the arguments, run the checks, print the report; the exit status is the first failure's."""
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    report = run(opts)
    report.emit(opts["json"])
    return report.status


if __name__ == "__main__":
    sys.exit(main())
