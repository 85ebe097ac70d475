"""Bundle writer, spec checks, snapshot validation, and the ``recon probe`` commands.

The snapshot here is a real snapshot folder (manifest + src/) of a small
package written for the test; the commands run through ``recon.cli.main``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from test_probe_support import kind, make_bundle, records, run_both, write

from recon.cli import main
from recon.errors import ReconError
from recon.probes import build_spec, check_bundle, load_bundle, new_bundle, read_logs
from recon.probes.lookup import AstLookup, IndexLookup
from recon.snapshots.model import Snapshot

CORE = """
    import functools
    import math

    class Engine:
        def step(self, n, *, scale=2):
            return n * scale

        @classmethod
        def make(cls, k):
            return k + 1

        @staticmethod
        def util(a):
            return a

        @property
        def size(self):
            return 4

        @functools.cached_property
        def cached(self):
            return 5

        def gen(self):
            yield 1

        class Inner:
            async def deep(self, x):
                return x

    def helper_fn(xs, start=0):
        return start + sum(xs)

    try:
        def maybe(x):
            return math.ceil(x)
    except ImportError:
        pass
"""


@pytest.fixture(autouse=True)
def _private_index_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The snapshot index caches per file hash under $RECON_CACHE: keep it in the test."""
    monkeypatch.setenv("RECON_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def snap_dir(tmp_path: Path) -> Path:
    """A real snapshot folder of package ``pkg`` (manifest with sha256 per file)."""
    root = tmp_path / "snap"
    src = root / "src"
    write(src, "pkg/__init__.py", "from .core import helper_fn\n")
    write(src, "pkg/core.py", CORE)
    write(src, "pkg/sub/__init__.py", "")
    write(src, "pkg/sub/user.py", "from ..core import helper_fn as hf\n\ndef use():\n    return hf([1])\n")
    write(src, "pkg/other.py", "from pkg import helper_fn\n")
    write(src, "pkg/unrelated.py", "import os  # helper_fn is only mentioned here\n")
    files = {}
    for path in sorted(src.rglob("*.py")):
        data = path.read_bytes()
        files[path.relative_to(src).as_posix()] = {"kind": "file", "size": len(data),
                                                   "sha256": hashlib.sha256(data).hexdigest()}
    manifest = {"name": "pkg-1.0", "package": {"name": "pkg", "version": "1.0"}, "files": files}
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


@pytest.mark.parametrize("use_index", [True, False], ids=["index", "ast"])
def test_validation_kinds_signatures_and_copies(snap_dir: Path, use_index: bool) -> None:
    from recon.probes import validate_targets

    spec = build_spec(["pkg.core:Engine.step", "pkg.core:Engine.make", "pkg.core:Engine.util",
                       "pkg.core:Engine.size", "pkg.core:helper_fn", "pkg.core:Engine.Inner.deep",
                       "pkg.core:maybe"],
                      exprs=["pkg.core:maybe::up=math.ceil(x)"])
    checks = {c.qualname: c for c in validate_targets(spec, Snapshot.open(snap_dir),
                                                      use_index=use_index)}
    assert all(c.ok for c in checks.values()), [c.problems for c in checks.values()]
    assert {c.source for c in checks.values()} == {"index" if use_index else "ast"}
    assert {q: c.kind for q, c in checks.items()} == {
        "pkg.core:Engine.step": "method", "pkg.core:Engine.make": "classmethod",
        "pkg.core:Engine.util": "staticmethod", "pkg.core:Engine.size": "property",
        "pkg.core:helper_fn": "function", "pkg.core:Engine.Inner.deep": "method",
        "pkg.core:maybe": "function"}
    assert checks["pkg.core:Engine.step"].signature == "(self, n, *, scale=2)"
    assert checks["pkg.core:Engine.step"].file == "pkg/core.py"
    assert checks["pkg.core:Engine.step"].params == ["self", "n", "scale"]
    assert checks["pkg.core:helper_fn"].copies == ["pkg", "pkg.other", "pkg.sub.user"]
    assert checks["pkg.core:Engine.step"].copies == []


@pytest.mark.parametrize("use_index", [True, False], ids=["index", "ast"])
def test_validation_problems_are_all_reported(snap_dir: Path, tmp_path: Path,
                                              use_index: bool) -> None:
    from recon.probes import validate_targets

    spec = build_spec(["pkg.core:Engine.cached", "pkg.core:Engine.gen", "pkg.core:nothing",
                       "pkg.absent:f", "pkg.core:helper_fn", "pkg.core:Engine"],
                      self_attrs=["pkg.core:helper_fn::block_size"],
                      exprs=["pkg.core:helper_fn::n=len(ys)"])
    checks = validate_targets(spec, Snapshot.open(snap_dir), use_index=use_index)
    text = "; ".join(p for c in checks for p in c.problems)
    by_name = {c.qualname: c for c in checks}
    assert by_name["pkg.core:Engine.gen"].ok and by_name["pkg.core:Engine.cached"].ok  # in place
    for fragment in ("nothing is not defined in pkg/core.py", "module pkg.absent is not in snapshot",
                     "--self-attr needs a method", "uses ys", "Engine in pkg/core.py is a class, not a function"):
        assert fragment in text
    if not use_index:
        return
    with pytest.raises(ReconError, match="targets do not match snapshot pkg 1.0") as err:
        new_bundle(tmp_path / "b", spec, snapshot=snap_dir)
    assert "uses ys" in str(err.value) and "Engine.gen" not in str(err.value)
    assert not (tmp_path / "b").exists()


def test_bundle_with_snapshot_records_copies_and_runs(snap_dir: Path, tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path, ["pkg.core:helper_fn", "pkg.core:Engine.step"],
                         snapshot=snap_dir, log=["args", "return"],
                         self_attrs=["pkg.core:Engine.step::missing_attr"])
    spec = json.loads((bundle / "probe.json").read_text())
    assert spec["snapshot"] == {"name": "pkg-1.0", "package": "pkg", "version": "1.0"}
    assert spec["targets"][0]["copies"] == ["pkg", "pkg.other", "pkg.sub.user"]
    assert spec["targets"][1]["signature"] == "(self, n, *, scale=2)"
    readme = (bundle / "README.md").read_text()
    assert "snapshot `pkg-1.0` (pkg 1.0)" in readme and "copies patched in pkg" in readme
    app = tmp_path / "app"
    write(app, "main.py", "import pkg.sub.user as u, pkg.core as c\n"
                          "print(u.use(), c.Engine().step(2))\n")
    run_both(["main.py"], cwd=app, bundle=bundle, pythonpath=(snap_dir / "src",))
    recs = records(tmp_path / "logs")
    assert kind(recs, "call", "pkg.core:helper_fn")[0]["return"] == 1
    step = kind(recs, "call", "pkg.core:Engine.step")[0]
    assert step["self"]["missing_attr"]["error"].startswith("AttributeError")


def test_both_lookups_agree_on_copies(snap_dir: Path) -> None:
    snap = Snapshot.open(snap_dir)
    for lookup in (IndexLookup(snap), AstLookup(snap)):
        assert lookup.copies("pkg.core", "helper_fn") == ["pkg", "pkg.other", "pkg.sub.user"]
        assert lookup.copies("pkg.core", "maybe") == []


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"targets": ["no_colon.func"]}, "package.module:Class.method"),
    ({"targets": ["m:f"], "log": ["values"]}, "unknown --log item"),
    ({"targets": ["m:f"], "exprs": ["n=len(("]}, "not a Python expression"),
    ({"targets": ["m:f"], "self_attrs": ["a..b"]}, "not a dotted attribute path"),
    ({"targets": ["m:f"], "only_argv": "("}, "--only-argv"),
    ({"targets": ["m:f"], "log_dir": "relative/logs"}, "must be absolute"),
    ({"targets": ["m:f"], "max_bytes": 100}, "--max-bytes"),
    ({"targets": ["m:f"], "env": ["A=1"]}, "variable name"),
    ({"targets": ["m:f", "m:f"]}, "given twice"),
    ({"targets": []}, "at least one --target"),
])
def test_spec_errors(kwargs: dict, message: str) -> None:
    targets = kwargs.pop("targets")
    with pytest.raises(ReconError, match=message):
        build_spec(targets, **kwargs)


def test_scoped_options_and_expr_names() -> None:
    spec = build_spec(["m:f", "m:g"], exprs=["n=len(x)", "m:g::x[::2]", "m:f::a==b"],
                      self_attrs=["m:g::cfg.size"])
    f, g = spec.targets
    assert f.exprs == {"n": "len(x)", "a_b": "a==b"} and f.self_attrs == []
    assert g.exprs == {"n": "len(x)", "x_2": "x[::2]"} and g.self_attrs == ["cfg.size"]


def test_bundle_files_readme_and_replace(tmp_path: Path) -> None:
    spec = build_spec(["m:f"], log_dir="/var/log/probes", env=["VLLM_USE_V1"])
    bundle = new_bundle(tmp_path / "probes" / "b1", spec)
    names = sorted(p.name for p in bundle.path.iterdir())
    assert names == ["README.md", "_recon_probe_runtime.py", "probe.json", "sitecustomize.py"]
    readme = (bundle.path / "README.md").read_text()
    for line in ('-v "$PWD/b1":/opt/recon-probe:ro', "-e PYTHONPATH=/opt/recon-probe",
                 "./b1:/opt/recon-probe:ro", "/var/log/probes", "readOnly: true",
                 "kubectl create configmap recon-probe --from-file=b1/", "RECON_PROBE_DISABLE=1"):
        assert line in readme
    assert load_bundle(bundle.path).spec == spec
    with pytest.raises(ReconError, match="already exists"):
        new_bundle(tmp_path / "probes" / "b1", spec)
    new_bundle(tmp_path / "probes" / "b1", build_spec(["m:g"]), force=True)
    assert load_bundle(bundle.path).spec.targets[0].qualname == "m:g"
    assert [p.name for p in (tmp_path / "probes").iterdir()] == ["b1"]  # no partial folders left


def test_check_bundle_reports_patched_targets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    app = tmp_path / "app"
    write(app, "mod.py", "def f(x):\n    return x\n")
    monkeypatch.setenv("PYTHONPATH", str(app))
    bundle = make_bundle(tmp_path, ["mod:f", "mod:missing"])
    result = check_bundle(bundle, import_targets=True)
    assert result.ok and result.loaded and result.imported == ["mod"]
    assert result.targets == {"mod:f": "patched", "mod:missing": "not found: no attribute missing"}
    plain = check_bundle(bundle)
    assert plain.ok and plain.targets == {"mod:f": "pending", "mod:missing": "pending"}
    assert not (tmp_path / "logs").exists()  # check logs to a temporary folder


def test_check_bundle_reports_a_broken_runtime(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path, ["mod:f"])
    (bundle / "_recon_probe_runtime.py").write_text("def broken(:\n")
    result = check_bundle(bundle)
    assert not result.ok and not result.loaded and result.returncode == 0
    assert result.stderr == ""  # the bundle never writes to the engine's stderr


def test_bundle_files_readable_by_any_user(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path, ["mod:f"])
    assert oct(bundle.stat().st_mode & 0o777) == "0o755"
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in bundle.iterdir()} == {
        name: "0o644" for name in ("README.md", "_recon_probe_runtime.py", "probe.json",
                                   "sitecustomize.py")}


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/bin/python3.11"),
                    reason="the unprivileged run needs root (setpriv) and a system Python")
def test_check_runs_as_unprivileged_user_too(tmp_path: Path) -> None:
    """As root, check repeats the run as uid 65534: a spec readable only by root fails."""
    bundle = make_bundle(tmp_path, ["mod:f"])
    good = check_bundle(bundle, python="/usr/bin/python3.11")
    assert good.ok and good.unprivileged == "loaded as uid 65534"
    (bundle / "probe.json").chmod(0o600)
    bad = check_bundle(bundle, python="/usr/bin/python3.11")
    assert bad.loaded and not bad.ok and bad.unprivileged.startswith("NOT loaded as uid 65534")


def test_cli_new_check_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                            capsys: pytest.CaptureFixture[str], snap_dir: Path) -> None:
    out = tmp_path / "probes" / "cli"
    main(["probe", "new", "-o", str(out), "-t", "pkg.core:helper_fn", "--log", "args,return",
          "--expr", "n=len(xs)", "--env", "HOME", "--first", "2", "--every", "3",
          "--log-dir", str(tmp_path / "logs"), "--snapshot", str(snap_dir), "--json"])
    made = json.loads(capsys.readouterr().out)
    assert made["checks"][0]["kind"] == "function" and made["spec"]["every"] == 3
    monkeypatch.setenv("PYTHONPATH", str(snap_dir / "src"))
    main(["probe", "check", str(out), "--import", "--json"])
    assert json.loads(capsys.readouterr().out)["targets"] == {"pkg.core:helper_fn": "patched"}
    app = tmp_path / "app"
    write(app, "main.py", "from pkg import helper_fn\nprint(sum(helper_fn([i]) for i in range(9)))\n")
    run_both(["main.py"], cwd=app, bundle=out, pythonpath=(snap_dir / "src",))
    main(["probe", "read", str(tmp_path / "logs"), "--json"])
    summary = json.loads(capsys.readouterr().out)
    (target,) = summary["targets"]
    assert (target["calls"], target["logged"], target["calls_exact"]) == (9, 4, True)
    assert target["first"]["expr"] == {"n": 1}
    main(["probe", "read", str(tmp_path / "logs"), "--markdown"])
    markdown = capsys.readouterr().out
    assert "| `pkg.core:helper_fn` | 1 | 9 | 4 |" in markdown and "HOME=" in markdown
    main(["probe", "read", str(tmp_path / "logs")])
    assert "pkg.core:helper_fn" in capsys.readouterr().out


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["probe", "new", "-o", str(tmp_path / "x"), "-t", "not-a-qualname"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("recon: error: not-a-qualname:") and "\n" not in err
    with pytest.raises(SystemExit):
        main(["probe", "read", str(tmp_path / "nowhere")])


def test_read_logs_tolerates_torn_lines_and_groups_processes(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    verify = {"kind": "VERIFY", "pid": 7, "ppid": 1, "argv": ["python", "-m", "vllm"],
              "python": "3.12.3", "targets": {"m:f": "pending"}, "env": {}}
    lines = [verify, {"kind": "patched", "pid": 7, "target": "m:f", "status": "patched"},
             {"kind": "call", "pid": 7, "target": "m:f", "n": 0,
              "args": {"x": {"type": "Tensor", "shape": [2, 3], "dtype": "float16"}}},
             {"kind": "call", "pid": 7, "target": "m:f", "n": 4, "mode": "meta",
              "args": {"x": {"type": "Tensor", "shape": [8, 3], "dtype": "float16"}}}]
    text = "\n".join(json.dumps(x) for x in lines) + '\n{"kind": "call", "pid": 7, "tar'
    (logs / "probe-7-x.jsonl").write_text(text)
    summary = read_logs(logs)
    assert summary.bad_lines == 1
    (proc,) = summary.processes
    assert proc.targets == {"m:f": "patched"} and not proc.exited
    (t,) = summary.targets
    assert (t.calls, t.calls_exact, t.logged, t.meta_only) == (5, False, 2, 1)
    assert t.shapes == {"x=float16[2, 3]": 1, "x=float16[8, 3]": 1}


@pytest.mark.parametrize(("src", "reads"), [
    ("[c.num_blocks for c in result]", {"result"}),
    ("[[g.size for g in c.groups] for c in result if c.n > limit]", {"result", "limit"}),
    ("sorted(xs, key=lambda v, *a, k=1, **kw: v + off)", {"sorted", "xs", "off"}),
    ("(y := n + 1) * y", {"n"}),
    ("{k: v for k, v in d.items()}", {"d"}),
])
def test_expr_free_names_leave_out_its_own_bindings(src: str, reads: set[str]) -> None:
    """Names an expression binds itself are not asked of the target (the check that gives
    '--expr ... uses c, which is neither a parameter ...')."""
    import ast

    from recon.probes.validate import free_names

    assert free_names(ast.parse(src, mode="eval")) == reads
