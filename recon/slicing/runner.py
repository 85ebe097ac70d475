"""``run_function`` / ``run_calls``: execute real functions of a snapshot, in a child.

The parent side of ``recon run``: slice (cached), lay out a scratch folder
(read-only runtime + slice; ``work`` becomes the sandbox's private tmpfs),
start the child in the OS sandbox (``sandbox.py``), and turn what it reports,
validated as untrusted data (:func:`~recon.slicing.result.parse_report`), into
:class:`RunResult` objects. ``sandbox=False`` waives the OS sandbox (rlimits and
the in-process guard only); it is never waived silently.

Failures that make an answer untrustworthy raise :class:`RunFailed` (a
:class:`~recon.errors.ReconError`, one readable line): a timeout, the memory
limit, a ``--forbid`` stub reached, a sandbox refusal, a config key the code
needed and the config lacks, a child that died. An exception raised by the
engine code itself is an *answer* (e.g. the release rejects the config) and
comes back as ``RunResult.error`` (``check=True`` raises it instead).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import signal
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..acquire.writer import write_text
from ..errors import ReconError, require_package
from ..snapshots.model import Snapshot
from .closure import DEFAULT_BUDGET
from .result import (
    Mutation,
    PieceRun,
    RunError,
    RunFailed,
    RunResult,
    StubTouch,
    parse_report,
)
from .sandbox import (
    RESULT_CAP,
    Limits,
    base_env,
    interpreter_dirs,
    launch,
    package_dirs,
    python_argv,
)
from .slicer import Slice, build_slice

_RUNTIME_FILES = ("child.py", "stubs.py", "hfconfig.py", "guard.py")
@dataclass(frozen=True)
class Py:
    """A Python expression evaluated *in the child* (``Py("torch.tensor([1, 2])")``).

    The expression sees ``ns`` (``types.SimpleNamespace``), ``config`` (the
    HF-like config), ``HFConfig`` (to build more configs from dicts),
    ``stub(name)`` (a recording stub), each ``--real``
    package by name, and the names a ``--stub-file`` defines.
    """

    expr: str


@dataclass
class Call:
    """One call of a target in a run."""

    target: str
    args: Mapping[str, Any] = field(default_factory=dict)
    self_attrs: Mapping[str, Any] = field(default_factory=dict)
    positional: list[Any] = field(default_factory=list)


def encode_value(value: Any, what: str) -> dict[str, Any]:
    """``{"py": expr}`` for :class:`Py`, ``{"json": value}`` for JSON-able data."""
    if isinstance(value, Py):
        return {"py": value.expr}
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise ReconError(f"{what}: {value!r} is not JSON data; pass Py('...') for a Python "
                         f"expression evaluated in the run") from err
    return {"json": value}


def load_config(config: str | Path | Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A config.json path (or ``example:NAME``) or dict -> dict (checked here, so errors name the file)."""
    if config is None:
        return None
    from ..engine.modelcheck import JSON_HOOKS, check_model_config, read_config_text

    if isinstance(config, Mapping):
        check_model_config(config, "the model config")
        return dict(config)
    from ..examples import resolve

    path = resolve(config)
    if path.is_dir():
        path = path / "config.json"
    try:
        data = json.loads(read_config_text(path), **JSON_HOOKS)
    except OSError as err:
        raise ReconError(f"cannot read config {path}: {err.strerror}") from err
    except ValueError as err:
        raise ReconError(f"{path} is not valid JSON: {err}") from err
    except RecursionError:
        raise ReconError(f"{path}: JSON nested too deeply to read") from None
    if not isinstance(data, dict):
        raise ReconError(f"{path}: a config.json holds a JSON object")
    check_model_config(data, str(path))
    return data


def stub_file_names(path: Path) -> tuple[set[str], set[str]]:
    """Keys of ``STUBS = {...}`` and items of ``FORBID = [...]`` in a stub file, statically.

    The slicer needs them before the run (to stop the walk there), so they
    must be string literals.
    """
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError) as err:
        raise ReconError(f"cannot read stub file {path}: {err}") from err
    stubs: set[str] = set()
    forbid: set[str] = set()
    for node in tree.body:
        if not isinstance(node, ast.Assign) or len(node.targets) != 1 \
                or not isinstance(node.targets[0], ast.Name):
            continue
        name = node.targets[0].id
        if name == "STUBS" and isinstance(node.value, ast.Dict):
            for key in node.value.keys:
                if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                    raise ReconError(f"{path}:{node.lineno}: STUBS keys must be string literals")
                stubs.add(key.value)
        elif name == "FORBID" and isinstance(node.value, (ast.List, ast.Tuple, ast.Set)):
            for elt in node.value.elts:
                if not (isinstance(elt, ast.Constant) and isinstance(elt.value, str)):
                    raise ReconError(f"{path}:{node.lineno}: FORBID items must be string literals")
                forbid.add(elt.value)
    return stubs, forbid


def _layout(sl: Slice, stub_file: Path | None) -> tuple[Path, Path, Path, Path | None]:
    """Scratch root with a read-only runtime folder and a writable work folder."""
    root = Path(tempfile.mkdtemp(prefix="recon-run-"))
    os.chmod(root, 0o755)
    runtime = root / "runtime"
    here = Path(__file__).parent
    write_text(runtime / "recon_runtime" / "__init__.py", "")
    for name in _RUNTIME_FILES:
        write_text(runtime / "recon_runtime" / name, (here / name).read_text(encoding="utf-8"))
    write_text(runtime / "slice.py", sl.text)
    user_stubs = None
    if stub_file is not None:
        user_stubs = runtime / "user_stubs.py"
        write_text(user_stubs, stub_file.read_text(encoding="utf-8"))
    for dirpath in (runtime, runtime / "recon_runtime"):
        os.chmod(dirpath, 0o755)
    work = root / "work"
    work.mkdir(mode=0o700)
    return root, runtime, work, user_stubs


def _error(data: dict[str, Any] | None) -> RunError | None:
    if not data:
        return None
    return RunError(kind=data.get("kind", "exception"), type=data.get("type", ""),
                    message=data.get("message", ""), site=data.get("site", ""),
                    traceback=data.get("traceback", ""))


def _provenance(sl: Slice, ran: list[list[Any]]) -> list[PieceRun]:
    """The pieces whose code objects were called (functions, methods, lambdas inside them)."""
    pieces = [p for p in sl.pieces if not p["synthetic"]]
    hit: list[PieceRun] = []
    seen: set[tuple[str, int]] = set()
    for fname, first, _qual in ran:
        for p in pieces:
            if p["file"] == fname and p["start"] <= first <= p["end"] \
                    and (p["file"], p["start"]) not in seen:
                seen.add((p["file"], p["start"]))
                hit.append(PieceRun(p["module"], p["file"], p["start"], p["end"], p["sha256"],
                                    p["what"]))
    return sorted(hit, key=lambda p: (p.file, p.start))


def _raise_for_sandbox(report: dict[str, Any], results: list[RunResult], limits: Limits) -> None:
    """Turn untrustworthy outcomes into one readable :class:`RunFailed`."""
    for refusal in report.get("sandbox", []):
        raise RunFailed(f"the slice tried {refusal['what']} ({refusal['detail'][:300]}) at "
                        f"{refusal['site']}; refused by the sandbox", results=results)
    forbidden = (report.get("stubs") or {}).get("forbidden", [])
    if forbidden:
        hit = forbidden[0]
        raise RunFailed(f"forbidden stub {hit['name']} reached at {hit['site']}: the branch "
                        "it guards is taken", results=results)
    setup = report.get("setup_error")
    if setup:
        err = _error(setup)
        assert err is not None
        if err.kind == "memory":
            raise RunFailed(f"the run exceeded its memory limit ({limits.memory_mb} MiB)"
                            + (f" at {err.site}" if err.site else ""), results=results)
        raise RunFailed(f"run setup failed: {err.line()}", results=results, detail=err.traceback)
    for res in results:
        err = res.error
        if err is None:
            continue
        if err.kind == "config_key":
            raise RunFailed(f"config is missing key {err.message.split('key ')[-1]} "
                            f"(needed at {err.site or res.target})", results=results)
        if err.kind == "memory":
            raise RunFailed(f"the run exceeded its memory limit ({limits.memory_mb} MiB)"
                            + (f" at {err.site}" if err.site else ""), results=results)
        if err.kind == "file_size":
            raise RunFailed(f"the run wrote more than its file size limit ({limits.file_mb} MiB)"
                            + (f" at {err.site}" if err.site else ""), results=results)
        if err.kind == "load":
            hint = f"; {res.cut_hint()}" if res.slice_cut else ""
            raise RunFailed(f"cannot load {res.target} from the slice: {err.line()}{hint}",
                            results=results, detail=err.traceback)
        if err.kind == "exit":
            raise RunFailed(f"{res.target} tried to exit the process ({err.line()})",
                            results=results)
    for res in results:
        # missing code, not the engine's answer: the budget left out what the call needed
        if res.error_from_cut():
            res.raise_for_error()


def run_calls(snapshot: Snapshot | str | Path, calls: Iterable[Call], *,
              config: str | Path | Mapping[str, Any] | None = None,
              stubs: Mapping[str, str] | None = None,
              stub_file: str | Path | None = None,
              forbid: Iterable[str] = (),
              real: Iterable[str] = (),
              absent: Iterable[str] = (),
              env: Mapping[str, str] | None = None,
              timeout: float = 60.0,
              memory_mb: int = 4096,
              drop_privileges: bool = True,
              sandbox: bool = True,
              check: bool = False,
              keep_scratch: bool = False,
              budget: int = DEFAULT_BUDGET) -> list[RunResult]:
    """Run several calls of one snapshot in one child process (one slice, one start-up).

    ``stubs``: name -> Python expression (evaluated in the child) replacing an
    outside name (``"torch.cuda.is_available": "lambda: False"``) or an
    in-package one (``"get_current_vllm_config": "lambda: ns(...)"``; a bare
    name matches that name in any module). ``forbid``: names whose use fails
    the run. ``real``: importable packages used for real (``["torch"]``).
    ``absent``: outside modules whose import fails (the engine's "not installed" branch).
    Stub touches are counted over the whole run.
    ``budget``: the slice's piece budget (:func:`build_slice`). When the slice
    was cut, every result carries ``slice_cut``, and an error that missing code
    explains (NameError, ImportError, AttributeError, a piece not defined)
    raises :class:`RunFailed` naming the budget instead of passing as an answer.
    ``sandbox=False`` runs without the OS sandbox (where namespaces are not
    available); with it on and unavailable, :class:`SandboxUnavailable` is raised.
    """
    snap = snapshot if isinstance(snapshot, Snapshot) else Snapshot.open(snapshot)
    calls = list(calls)
    if not calls:
        raise ReconError("nothing to run")
    stub_exprs = dict(stubs or {})
    forbid = list(forbid)
    sfile = Path(stub_file) if stub_file is not None else None
    file_stubs, file_forbid = stub_file_names(sfile) if sfile else (set(), set())
    stop_at = frozenset(stub_exprs) | frozenset(forbid) | file_stubs | file_forbid
    targets = list(dict.fromkeys(c.target for c in calls))
    sl = build_slice(snap, targets, stubs=stop_at, budget=budget)
    try:
        return _run_slice(snap, sl, calls, targets, config=config, stub_exprs=stub_exprs,
                          sfile=sfile, forbid=forbid, real=real, absent=absent, env=env,
                          limits=Limits(timeout=timeout, memory_mb=memory_mb,
                                        drop_privileges=drop_privileges, sandbox=sandbox),
                          check=check, keep_scratch=keep_scratch)
    except RunFailed as err:
        err.slice_cut, err.slice_budget = sl.cut, sl.budget
        raise


def _run_slice(snap: Snapshot, sl: Slice, calls: list[Call], targets: list[str], *,
               config: str | Path | Mapping[str, Any] | None, stub_exprs: dict[str, str],
               sfile: Path | None, forbid: list[str], real: Iterable[str],
               absent: Iterable[str], env: Mapping[str, str] | None, limits: Limits,
               check: bool, keep_scratch: bool) -> list[RunResult]:
    canonical = {q: t["qualname"] for q, t in zip(targets, sl.targets, strict=True)}
    cfg = load_config(config)
    request_calls = []
    for c in calls:
        request_calls.append({
            "target": canonical[c.target],
            "args": {k: encode_value(v, f"argument {k}") for k, v in c.args.items()},
            "self": {k: encode_value(v, f"self.{k}") for k, v in c.self_attrs.items()},
            "positional": [encode_value(v, "positional argument") for v in c.positional],
        })
    real = list(real)
    for name in real:
        require_package(name.split(".")[0], f"running {', '.join(canonical.values())} with --real {name}")
    root, runtime, work, user_stubs = _layout(sl, sfile)
    try:
        request = {
            "slice_file": str(runtime / "slice.py"),
            "work_dir": str(work),
            "real": real,
            "absent": list(absent),
            "stubs": stub_exprs,
            "forbid": forbid,
            "stub_file": str(user_stubs) if user_stubs else None,
            "config": cfg,
            "calls": request_calls,
        }
        files = {p["file"] for p in sl.pieces}
        read_only = [str(runtime), str(snap.root), *interpreter_dirs(), *package_dirs(real)]
        outcome = launch(python_argv(runtime), request, root=root, work=work, limits=limits,
                         env=base_env(work, dict(env or {})), slice_files=files,
                         read_only=read_only)
    finally:
        if not keep_scratch:
            shutil.rmtree(root, ignore_errors=True)
    return _results(snap, sl, outcome, limits, check, [rc["target"] for rc in request_calls])


def _results(snap: Snapshot, sl: Slice, outcome: Any, limits: Limits, check: bool,
             targets: list[str]) -> list[RunResult]:
    """The child's validated report -> results; one :class:`RunFailed` when untrustworthy.

    ``targets``: the canonical target of each requested call, in order.
    """
    where = f" at {outcome.stuck_at}" if outcome.stuck_at else ""
    if outcome.timed_out:
        raise RunFailed(f"run timed out after {limits.timeout:g} s{where} (limit: timeout)")
    if len(outcome.result) >= RESULT_CAP:  # cut at the cap: say so, not "malformed"
        raise RunFailed(f"the run's report reached the {RESULT_CAP >> 20} MiB cap on what a run "
                        "brings back (a return value or argument that large); return a smaller "
                        "value, e.g. its length or a slice")
    report = parse_report(outcome.result, outcome.events, targets)
    if report is None:
        raise RunFailed(_death(outcome.returncode, limits, outcome.stderr))
    if report.get("died"):  # refused, then died before reporting: the refusal is the news
        _raise_for_sandbox(report, [], limits)
    results = [_result(sl, snap, c, outcome) for c in report.get("calls", [])]
    confined = {**outcome.confinement, "timeout": limits.timeout, "memory_mb": limits.memory_mb}
    for res in results:
        res.sandbox = confined
        res.definition_failures = report.get("definition_failures", [])
        touches = (report.get("stubs") or {})
        res.stub_touches = [StubTouch(t["name"], t["kind"], t["count"], t["ops"], t["first"])
                            for t in touches.get("touches", [])]
        res.assumptions = touches.get("assumptions", [])
    _raise_for_sandbox(report, results, limits)
    for res in results:
        if res.error is not None and res.error.kind == "arguments":
            raise ReconError(f"{res.target}: the arguments given do not fit: {res.error.message}")
    if check:
        for res in results:
            res.raise_for_error()
    return results


def _death(code: int | None, limits: Limits, stderr: str) -> str:
    last = stderr.strip().splitlines()[-1:] or [""]
    if code is not None and code < 0:
        sig = -code
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        why = {"SIGXCPU": "CPU time limit", "SIGXFSZ": f"file size limit ({limits.file_mb} MiB)",
               "SIGKILL": "killed (memory or limits)", "SIGSEGV": "crashed in native code"}
        return f"the run died with {name} ({why.get(name, 'signal')}) before reporting"
    return (f"the run exited with code {code} before reporting (os._exit or a crash)"
            + (f": {last[0][:300]}" if last[0] else ""))


def _result(sl: Slice, snap: Snapshot, call: dict[str, Any], outcome: Any) -> RunResult:
    return RunResult(
        target=call["target"], ok=bool(call.get("ok")), value=call.get("value"),
        value_type=call.get("value_type", ""), value_repr=call.get("value_repr", ""),
        error=_error(call.get("error")),
        mutations=[Mutation(m["attr"], m["change"], m["before"], m["after"])
                   for m in call.get("mutations", [])],
        self_before=call.get("self_before", {}), self_after=call.get("self_after", {}),
        provenance=_provenance(sl, call.get("ran", [])),
        snapshot={"name": snap.name, "package": snap.package, "version": snap.version,
                  "path": str(snap.root)},
        slice_sha256=sl.sha256, slice_cut=sl.cut, slice_budget=sl.budget,
        seconds=float(call.get("seconds", 0.0)),
        wall_seconds=round(outcome.wall_seconds, 3), stdout=outcome.stdout,
        stderr=outcome.stderr)


def run_function(snapshot: Snapshot | str | Path, qualname: str, *,
                 args: Mapping[str, Any] | None = None,
                 self_attrs: Mapping[str, Any] | None = None,
                 positional: list[Any] | None = None,
                 config: str | Path | Mapping[str, Any] | None = None,
                 stubs: Mapping[str, str] | None = None,
                 stub_file: str | Path | None = None,
                 forbid: Iterable[str] = (),
                 real: Iterable[str] = (),
                 absent: Iterable[str] = (),
                 env: Mapping[str, str] | None = None,
                 timeout: float = 60.0,
                 memory_mb: int = 4096,
                 sandbox: bool = True,
                 check: bool = False,
                 budget: int = DEFAULT_BUDGET) -> RunResult:
    """Call ``qualname`` from ``snapshot`` once, in a sandboxed child; see :func:`run_calls`.

    ``args`` / ``self_attrs`` values are JSON data or :class:`Py` expressions.
    A parameter named ``config`` or ``hf_config`` that ``args`` leaves out
    receives the HF-like config object built from ``config``.
    """
    call = Call(qualname, dict(args or {}), dict(self_attrs or {}), list(positional or []))
    return run_calls(snapshot, [call], config=config, stubs=stubs, stub_file=stub_file,
                     forbid=forbid, real=real, absent=absent, env=env, timeout=timeout,
                     memory_mb=memory_mb, sandbox=sandbox, check=check, budget=budget)[0]
