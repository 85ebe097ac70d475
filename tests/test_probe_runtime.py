"""The probe runtime in real interpreters: every case from issues 6 and 17, no mocks.

Each test runs a small program without and with the bundle on ``PYTHONPATH``
(asserting the program's own output is unchanged), then reads the log files
the runtime wrote and checks they hold what the spec asked for.
"""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_probe_support import clean_env, kind, make_bundle, records, run_both, run_py, write

MODULE = """
    class Engine:
        block = 16

        def __init__(self):
            self.cfg = type("Cfg", (), {"block_size": 1152})()

        def step(self, n, *, scale=2):
            return n * scale

        @classmethod
        def make(cls, k):
            return k + 1

        @staticmethod
        def helper(a, *rest, **kw):
            return (a, rest, sorted(kw))

        @property
        def size(self):
            return self.block * 2

    def total(xs, start=0):
        return start + sum(xs)

    async def fetch(x):
        return x + 1

    def count(n):
        yield from range(n)

    def fail(x):
        raise ValueError(f"bad {x}")
"""


@pytest.fixture
def app(tmp_path: Path) -> Path:
    folder = tmp_path / "app"
    write(folder, "eng.py", MODULE)
    return folder


def test_kinds_bound_and_logged(tmp_path: Path, app: Path) -> None:
    """Methods, classmethods, staticmethods, properties, async: same results, right records."""
    write(app, "main.py", """
        import asyncio, inspect
        import eng
        e = eng.Engine()
        print(e.step(3), e.step(4, scale=5), eng.Engine.make(1), e.make(2))
        print(eng.Engine.helper(1, 2, k=3), e.helper(0), e.size, eng.total([1, 2, 3], start=4))
        print(asyncio.run(eng.fetch(1)), list(eng.count(3)))
        print(inspect.iscoroutinefunction(eng.fetch), inspect.isgeneratorfunction(eng.count))
        print(eng.total.__name__, eng.Engine.step.__qualname__, inspect.signature(eng.total))
        import sys  # the runtime itself imports neither torch nor multiprocessing
        print([m for m in ("torch", "multiprocessing", "numpy") if m in sys.modules])
        try:
            eng.fail(7)
        except ValueError as exc:
            print("caught", exc)
    """)
    targets = ["eng:Engine.step", "eng:Engine.make", "eng:Engine.helper", "eng:Engine.size",
               "eng:total", "eng:fetch", "eng:count", "eng:fail"]
    bundle = make_bundle(tmp_path, targets, log=["args", "return"], env=["HOME", "NOT_SET_X"],
                         self_attrs=["eng:Engine.step::cfg.block_size"],
                         exprs=["eng:total::n=len(xs)", "eng:total::twice=result * 2"])
    run_both(["main.py"], cwd=app, bundle=bundle)
    recs = records(tmp_path / "logs")
    (verify,) = kind(recs, "VERIFY")
    assert verify["env"] == {"HOME": str(Path.home()), "NOT_SET_X": None}
    assert set(verify["targets"]) == set(targets)
    patched = {r["target"]: r["status"] for r in kind(recs, "patched")}
    assert all(patched[t] == "patched" for t in targets)  # generators too, in place
    step = kind(recs, "call", "eng:Engine.step")
    assert [(r["args"], r["return"]) for r in step] == [({"n": 3, "scale": 2}, 6),
                                                          ({"n": 4, "scale": 5}, 20)]
    assert step[0]["self"] == {"cfg.block_size": 1152}
    assert [r["args"] for r in kind(recs, "call", "eng:Engine.make")] == [{"k": 1}, {"k": 2}]
    helper = kind(recs, "call", "eng:Engine.helper")[0]
    assert helper["args"]["a"] == 1 and helper["args"]["rest"]["len"] == 1
    assert kind(recs, "call", "eng:Engine.size")[0]["return"] == 32
    (total,) = kind(recs, "call", "eng:total")
    assert total["expr"] == {"n": 3, "twice": 20} and total["args"]["start"] == 4
    assert kind(recs, "call", "eng:fetch")[0]["return"] == 2
    assert kind(recs, "call", "eng:fail")[0]["raised"] == "ValueError: bad 7"
    assert kind(recs, "call", "eng:count")[0]["args"] == {"n": 3}
    (exit_rec,) = kind(recs, "EXIT")
    assert exit_rec["calls"]["eng:Engine.step"] == 2
    assert exit_rec["never_fired"] == []


POOL_PROGRAM = """
    import multiprocessing as mp, sys
    import eng

    def work(i):
        return eng.total([i, i])

    if __name__ == "__main__":
        ctx = mp.get_context(sys.argv[1])
        pool = ctx.Pool(2)
        print(sorted(pool.map(work, range(8))))
        pool.close()
        pool.join()
"""


@pytest.mark.parametrize("method", ["spawn", "fork", "forkserver"])
def test_process_pools(tmp_path: Path, app: Path, method: str) -> None:
    """Every pool worker writes its own VERIFY and logs the calls made in it."""
    write(app, "pool.py", POOL_PROGRAM)
    bundle = make_bundle(tmp_path, ["eng:total"], log=["args", "return"])
    run_both(["pool.py", method], cwd=app, bundle=bundle)
    recs = records(tmp_path / "logs")
    verify = {r["pid"]: r for r in kind(recs, "VERIFY")}
    main_pid = next(pid for pid, r in verify.items() if r["argv"][1:] == ["pool.py", method])
    calls = kind(recs, "call", "eng:total")
    assert sorted(r["args"]["xs"]["items"][0] for r in calls) == list(range(8))
    workers = {r["pid"] for r in calls}
    assert main_pid not in workers and workers <= set(verify)
    for pid in workers:
        assert {r["_file"] for r in recs if r["pid"] == pid} == {verify[pid]["_file"]}
        if method == "fork":
            assert verify[pid]["forked_from"] == main_pid
        elif method == "forkserver":  # forked from the forkserver, itself a probed process
            assert verify[pid]["forked_from"] in verify
        else:
            assert verify[pid]["forked_from"] is None and verify[pid]["ppid"] == main_pid
    exits = {r["pid"]: r for r in kind(recs, "EXIT")}
    assert workers <= set(exits)  # pool workers exit through mp's own path, not atexit
    assert sum(exits[pid]["calls"]["eng:total"] for pid in workers) == 8


def test_threads_do_not_interleave(tmp_path: Path, app: Path) -> None:
    write(app, "threads.py", """
        import threading, eng
        out = []
        gate = threading.Barrier(8)  # all eight alive at once (idents are reused otherwise)
        def run(k):
            gate.wait()
            for i in range(150):
                out.append(eng.total([k, i]))
        ts = [threading.Thread(target=run, args=(k,)) for k in range(8)]
        [t.start() for t in ts]; [t.join() for t in ts]
        print(len(out), sum(out))
    """)
    bundle = make_bundle(tmp_path, ["eng:total"], first=100000)
    run_both(["threads.py"], cwd=app, bundle=bundle)
    recs = records(tmp_path / "logs")  # json.loads of every line: no torn records
    calls = kind(recs, "call", "eng:total")
    assert len(calls) == 1200
    assert sorted(r["n"] for r in calls) == list(range(1200))
    assert len({r["tid"] for r in calls}) == 8


def test_preexisting_sitecustomize_and_already_imported_target(tmp_path: Path, app: Path) -> None:
    """The image's sitecustomize still runs (first); what it imported is patched, copies too."""
    orig = tmp_path / "image-site"
    write(orig, "sitecustomize.py", """
        import sys
        print("image sitecustomize ran", file=sys.stderr)
        import eng, user_of_total  # a target imported before the probe runtime starts
        MARKER = 42
    """)
    write(app, "user_of_total.py", """
        from eng import total as summed
        def use():
            return summed([5, 6])
    """)
    write(app, "main.py", """
        import eng, user_of_total, sitecustomize
        print(user_of_total.use(), eng.total([1]), sitecustomize.MARKER)
    """)
    bundle = make_bundle(tmp_path, ["eng:total"], log=["args", "return"])
    probed = run_both(["main.py"], cwd=app, bundle=bundle, pythonpath=(orig,))
    assert "image sitecustomize ran" in probed.stderr
    recs = records(tmp_path / "logs")
    (verify,) = kind(recs, "VERIFY")
    assert verify["chained_sitecustomize"] == str(orig / "sitecustomize.py")
    assert verify["targets"] == {"eng:total": "patched"}
    assert [r["return"] for r in kind(recs, "call", "eng:total")] == [11, 1]


def test_failing_image_sitecustomize_reported_as_site_does(tmp_path: Path, app: Path) -> None:
    orig = tmp_path / "image-site"
    write(orig, "sitecustomize.py", "raise RuntimeError('image is broken')\n")
    write(app, "main.py", "import eng\nprint(eng.total([2]))\n")
    bundle = make_bundle(tmp_path, ["eng:total"])
    plain = run_py(["main.py"], cwd=app, pythonpath=(orig,))
    probed = run_both(["main.py"], cwd=app, bundle=bundle, pythonpath=(orig,))
    message = "Error in sitecustomize; set PYTHONVERBOSE for traceback:\nRuntimeError: image is broken\n"
    assert message in plain.stderr and message in probed.stderr
    assert len(kind(records(tmp_path / "logs"), "call", "eng:total")) == 1


def test_from_import_copy_made_during_circular_import(tmp_path: Path) -> None:
    """A copy taken while the target module is half-imported is the same function object:
    instrumented in place, it logs with or without ``copies`` in the spec."""
    app = tmp_path / "app"
    write(app, "tgt.py", """
        def f(x):
            return x * 10
        import helper  # helper does `from tgt import f` while tgt is still executing
    """)
    write(app, "helper.py", "from tgt import f\ndef g(x):\n    return f(x) + 1\n")
    write(app, "main.py", "import tgt, helper\nprint(helper.g(2), tgt.f(3))\n")
    with_copies = make_bundle(tmp_path, ["tgt:f"], copies={"tgt:f": ["helper"]})
    run_both(["main.py"], cwd=app, bundle=with_copies)
    assert [r["args"]["x"] for r in kind(records(tmp_path / "logs"), "call")] == [2, 3]
    without = make_bundle(tmp_path, ["tgt:f"], name="nocopies", log_dir=str(tmp_path / "logs2"))
    run_both(["main.py"], cwd=app, bundle=without)
    assert [r["args"]["x"] for r in kind(records(tmp_path / "logs2"), "call")] == [2, 3]


def _ro_bind(src: Path, dst: Path) -> list[str]:
    """Shell steps that bind-mount ``src`` read-only at ``dst`` (private mount namespace)."""
    dst.mkdir(parents=True, exist_ok=True)
    return [f"mount --bind {src} {dst}", f"mount -o remount,bind,ro {dst}"]


def _can_mount(tmp_path: Path) -> bool:
    src = tmp_path / "mount-check"
    src.mkdir()
    steps = " && ".join(_ro_bind(src, tmp_path / "mount-check-dst"))
    probe = subprocess.run(["unshare", "-m", "sh", "-c", steps], capture_output=True)
    return probe.returncode == 0


def test_read_only_bundle_and_read_only_log_dir(tmp_path: Path, app: Path) -> None:
    """Bundle on a read-only mount (no __pycache__ possible); logs on one too -> dropped,
    never written to stderr."""
    if not _can_mount(tmp_path):
        pytest.skip("needs root with CAP_SYS_ADMIN for a read-only bind mount (unshare -m)")
    write(app, "main.py", "import eng\nprint(eng.total([1, 2]), eng.total([3]))\n")
    ro_logs = tmp_path / "ro-logs"
    ro_logs.mkdir()
    bundle = make_bundle(tmp_path, ["eng:total"], log=["args", "return"])
    bundle2 = make_bundle(tmp_path, ["eng:total"], name="b2", log_dir=str(ro_logs))
    mnt, mnt2 = tmp_path / "mnt", tmp_path / "mnt2"
    env = f"PYTHONPATH={mnt}:{app}"
    script = "; ".join(_ro_bind(bundle, mnt) + _ro_bind(bundle2, mnt2) + _ro_bind(ro_logs, ro_logs)
                       + [f"cd {app}", f"{env} {sys.executable} main.py",
                          f"PYTHONPATH={mnt2}:{app} {sys.executable} main.py"])
    out = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True,
                         timeout=60, env=clean_env())
    assert out.returncode == 0, out.stderr
    assert out.stdout == "3 3\n3 3\n"
    assert not (bundle / "__pycache__").exists()
    assert [r["return"] for r in kind(records(tmp_path / "logs"), "call")] == [3, 3]
    assert list(ro_logs.iterdir()) == []
    assert out.stderr == ""


def test_unwritable_log_dir_drops_records_never_stderr(tmp_path: Path, app: Path) -> None:
    """No log folder: nothing is written anywhere (a stderr fallback can block the host)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    write(app, "main.py", "import eng\nprint(eng.total([4]))\n")
    bundle = make_bundle(tmp_path, ["eng:total"], log_dir=str(blocker / "logs"))
    probed = run_both(["main.py"], cwd=app, bundle=bundle)
    assert probed.stderr == ""
    assert blocker.read_text() == "not a folder"


def test_log_file_that_stops_growing_drops_records(tmp_path: Path, app: Path) -> None:
    """A write error mid-run (here: RLIMIT_FSIZE, as a full disk would) stops the log;
    the program runs on, nothing goes to stderr."""
    write(app, "main.py", "import eng\nfor i in range(400):\n    eng.total([i])\nprint('done')\n")
    bundle = make_bundle(tmp_path, ["eng:total"], first=10**6)

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))

    probed = run_both(["main.py"], cwd=app, bundle=bundle, preexec_fn=limit)
    assert probed.stderr == ""
    (log,) = (tmp_path / "logs").glob("probe-*.jsonl")
    assert log.stat().st_size == 20000
    *whole, torn = log.read_text().splitlines()  # the limit cut the last line
    ns = [r["n"] for r in kind([json.loads(line) for line in whole], "call")]
    assert ns == list(range(len(ns))) and 0 < len(ns) < 400
    with pytest.raises(ValueError):  # torn: not a whole record (it may still end in a "}")
        json.loads(torn)


def test_errors_in_logging_path_are_swallowed_then_budget_stops_logging(tmp_path: Path,
                                                                       app: Path) -> None:
    write(app, "main.py", """
        import eng
        print([eng.total([i]) for i in range(30)])
        try:
            eng.fail(1)
        except ValueError as exc:
            print("still raises", exc)
    """)
    bundle = make_bundle(tmp_path, ["eng:total", "eng:fail"], first=1000, error_budget=5,
                         exprs=["eng:total::bad=xs[99]", "eng:total::ok=len(xs)"])
    run_both(["main.py"], cwd=app, bundle=bundle)
    recs = records(tmp_path / "logs")
    errors = kind(recs, "error")
    assert len(errors) == 5 and all("IndexError" in e["error"] for e in errors)
    calls = kind(recs, "call", "eng:total")
    assert len(calls) == 5 and calls[0]["expr"]["ok"] == 1
    assert calls[0]["expr"]["bad"] == {"error": "IndexError: list index out of range"}
    assert kind(recs, "disabled")[0]["reason"] == "error budget of 5 reached"
    assert kind(recs, "call", "eng:fail") == []  # switched off: passes straight through
    assert kind(recs, "EXIT")[0]["calls"]["eng:total"] == 30


def test_hostile_objects(tmp_path: Path, app: Path) -> None:
    """repr raises, __getattr__ raises, __len__ lies: the call and the program are unaffected."""
    write(app, "main.py", """
        import eng
        class BadRepr:
            def __repr__(self):
                raise RuntimeError("no repr for you")
        class Weird:
            def __getattr__(self, name):
                raise KeyError(name)
        class BadLen(list):
            def __len__(self):
                raise OSError("len")
        r = eng.Engine.helper(BadRepr(), Weird(), BadLen())
        print(type(r[0]).__name__, type(r[1][1]).__name__, r[2])
    """)
    bundle = make_bundle(tmp_path, ["eng:Engine.helper"], log=["args", "return"])
    run_both(["main.py"], cwd=app, bundle=bundle)
    (call,) = kind(records(tmp_path / "logs"), "call")
    assert call["args"]["a"] == {"type": "BadRepr"}  # the runtime never calls repr
    rest = call["args"]["rest"]["items"]
    assert rest[0] == {"type": "Weird"}
    assert rest[1] == {"type": "BadLen", "len": 0, "items": []}  # list's own length


def test_probe_on_functions_the_runtime_uses(tmp_path: Path, app: Path) -> None:
    """json.dumps is probed (no recursion, the runtime's own calls uncounted); builtins
    are left alone with a VERIFY note."""
    write(app, "main.py", """
        import json, os
        print(json.dumps({"a": [1, 2]}), len("abc"), repr((1,)), os.getpid() > 0)
    """)
    bundle = make_bundle(tmp_path, ["json:dumps", "builtins:len", "builtins:repr", "os:getpid"],
                         log=["args", "return"], first=3)
    run_both(["main.py"], cwd=app, bundle=bundle)
    recs = records(tmp_path / "logs")
    verify = kind(recs, "VERIFY")[0]
    assert verify["targets"]["json:dumps"] == "patched"
    for q in ("builtins:len", "builtins:repr", "os:getpid"):
        assert verify["targets"][q].startswith("skipped: a builtin_function_or_method"), q
    dumps = kind(recs, "call", "json:dumps")
    assert any(r["args"].get("obj") == {"type": "dict", "len": 1,
                                        "items": {"a": {"type": "list", "len": 2, "items": [1, 2]}}}
               for r in dumps)
    assert kind(recs, "EXIT")[0]["calls"]["json:dumps"] == 1
    assert kind(recs, "error") == []


def test_isolated_mode_is_not_probed(tmp_path: Path, app: Path) -> None:
    """python -I (and -E, -S) ignore PYTHONPATH / site: no probes, no VERIFY, same output."""
    write(app, "main.py", "import sys\nsys.path.insert(0, '.')\nimport eng\nprint(eng.total([1]))\n")
    bundle = make_bundle(tmp_path, ["eng:total"])
    for flag in ("-I", "-E", "-S"):
        out = run_py(["main.py"], cwd=app, bundle=bundle, flags=(flag,))
        assert out.returncode == 0 and out.stdout == "1\n", out.stderr
    assert not (tmp_path / "logs").exists()
    run_py(["main.py"], cwd=app, bundle=bundle)
    assert len(records(tmp_path / "logs")) > 0  # the same bundle works without the flag


def test_process_selection_and_disable(tmp_path: Path, app: Path) -> None:
    write(app, "a.py", "import eng\nprint(eng.total([1]))\n")
    write(app, "b.py", "import eng\nprint(eng.total([2]))\n")
    bundle = make_bundle(tmp_path, ["eng:total"], only_argv=r"\ba\.py", skip_argv="never-matches")
    run_both(["a.py"], cwd=app, bundle=bundle)
    run_both(["b.py"], cwd=app, bundle=bundle)
    run_py(["a.py"], cwd=app, bundle=bundle, env={"RECON_PROBE_DISABLE": "1"})
    recs = records(tmp_path / "logs")
    assert [r["argv"][-1] for r in kind(recs, "VERIFY")] == ["a.py"]


def test_sampling_and_size_cap(tmp_path: Path, app: Path) -> None:
    write(app, "main.py", "import eng\nprint(sum(eng.total([i]) for i in range(3000)))\n")
    sampled = make_bundle(tmp_path, ["eng:total"], first=3, every=5)
    run_both(["main.py"], cwd=app, bundle=sampled)
    recs = records(tmp_path / "logs")
    assert [r["n"] for r in kind(recs, "call")][:6] == [0, 1, 2, 7, 12, 17]
    assert kind(recs, "EXIT")[0]["calls"]["eng:total"] == 3000

    capped = make_bundle(tmp_path, ["eng:total"], name="capped", first=10**6, max_bytes=16384,
                         log_dir=str(tmp_path / "capped-logs"))
    run_both(["main.py"], cwd=app, bundle=capped)
    (log,) = (tmp_path / "capped-logs").glob("*.jsonl")
    assert log.stat().st_size <= 16384
    recs = records(tmp_path / "capped-logs")
    assert len(kind(recs, "cap")) == 1
    (exit_rec,) = kind(recs, "EXIT")
    assert exit_rec["calls"]["eng:total"] == 3000
    assert exit_rec["dropped"] == 3000 - len(kind(recs, "call"))


def test_raw_fork_child_gets_own_file(tmp_path: Path, app: Path) -> None:
    write(app, "main.py", """
        import os, eng
        eng.total([1])
        pid = os.fork()
        if pid == 0:
            eng.total([2]); eng.total([3])
            os._exit(0)
        os.waitpid(pid, 0)
        eng.total([4])
        print("ok")
    """)
    bundle = make_bundle(tmp_path, ["eng:total"], log=["args"])
    run_both(["main.py"], cwd=app, bundle=bundle)
    recs = records(tmp_path / "logs")
    parent = next(r for r in kind(recs, "VERIFY") if r["forked_from"] is None)
    child = next(r for r in kind(recs, "VERIFY") if r["forked_from"] == parent["pid"])
    by_pid = {pid: [(r["n"], r["args"]["xs"]["items"][0]) for r in kind(recs, "call")
                    if r["pid"] == pid] for pid in (parent["pid"], child["pid"])}
    assert by_pid == {parent["pid"]: [(0, 1), (1, 4)], child["pid"]: [(0, 2), (1, 3)]}
