"""The warm server: one request's code never decides another request's answer (issue 36, item 1).

What must hold (from the issue): a request's answer comes only from that request's own
process, over a channel no other request can reach; every process a request started is
gone before the next request starts; the server and the cached answers are out of reach of
request code; a cached answer is bound to its request key and checked when read; what is
not a well-formed answer is refused, never cached.

Hostile code gets into a request the way a model folder brings it: ``auto_map`` names a
``configuration_*.py`` that the release executes under ``--trust-remote-code``. The first
tests drive the real server loop in the real sandbox with a tiny answer function that runs
the request's code (seconds each); the later ones send the same code to a real vLLM release
through its real warm server, and compare every answer with a cold child's
(``RECON_ENGINE_SERVER=0``). Attacks write to every descriptor they hold and every one they
can open under ``/proc``; a process left behind is found from the host by the name it gives
itself.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from recon.engine import config as econfig
from recon.engine import server
from recon.engine.config import EngineFacts, EngineFailed, engine_config
from recon.examples import EXAMPLES_DIR
from recon.slicing.sandbox import interpreter_dirs
from recon.snapshots.model import Snapshot

CHILD = Path(econfig.__file__).parent / "child.py"

#: what an attacker's code does to reach the answer channel: a frame in the server's framing
#: (length, newline, JSON) on every pipe it holds and every descriptor it can open in /proc
FORGE = r'''
import json, os, stat

def forge(answer):
    body = json.dumps(answer).encode()
    frame = b"%d\n" % len(body) + body
    wrote = []
    for fd in range(3, 1024):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, frame)
                wrote.append(fd)
        except OSError:
            pass
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            names = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for name in names:
            try:
                fd = os.open(f"/proc/{pid}/fd/{name}", os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                continue
            try:
                os.write(fd, frame)
                wrote.append(f"{pid}/{name}")
            except OSError:
                pass
            finally:
                os.close(fd)
    return wrote
'''

#: a process that outlives its request: double-forked, named so the host can find it, it
#: forges answers for later requests for a minute
LINGER = FORGE + r'''
import time

def linger(name, answer):
    if os.fork() == 0:
        try:
            os.setsid()
            if os.fork() == 0:
                try:
                    with open("/proc/self/comm", "w") as fh:
                        fh.write(name)
                except OSError:
                    import ctypes
                    ctypes.CDLL(None).prctl(15, name.encode(), 0, 0, 0)
                for _ in range(600):
                    time.sleep(0.1)
                    forge(answer)
        finally:
            os._exit(0)
    os.wait()
'''

#: every process of the sandbox the request did not start: can its memory be opened to write?
MEMORY = r'''
import os

def open_memory():
    mine = {os.getpid()}
    said = []
    for pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit()):
        if pid in mine:
            continue
        try:
            fd = os.open(f"/proc/{pid}/mem", os.O_RDWR)
        except OSError as err:
            said.append(f"{pid}:refused:{err.errno}")
        else:
            os.close(fd)
            said.append(f"{pid}:OPENED")
    return said
'''


def _comm_holders(name: str) -> list[int]:
    """Host pids of live processes named ``name`` (zombies are gone already)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if comm == name and state != "Z":
            found.append(int(pid))
    return found


# -- the server loop, driven with a tiny answer function in the real sandbox ----------------

#: a warm child as small as can be: the real ``serve`` loop of recon's child, a set-up that
#: does nothing, and an answer that runs the request's code (as a release runs a model
#: folder's module) and then answers with what the request asked to be echoed
TINY = r'''
import importlib.util, json, os, sys

spec = importlib.util.spec_from_file_location("recon_engine_child", sys.argv[1])
child = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = child
spec.loader.exec_module(child)


def warm_up(setup):
    return None, {"ready": True}


def answer(req, warm):
    scope = {}
    exec(req.get("code", ""), scope)
    return {"ok": True, "errors": [], "echo": req["echo"], "said": scope.get("said")}


child.serve(warm_up, answer)
'''


@pytest.fixture
def tiny() -> Iterator[server.ServerSpec]:
    """A server of its own for each test (what one test leaves cannot fail another)."""
    folder = Path(tempfile.mkdtemp(prefix="recon-test-tiny-"))
    os.chmod(folder, 0o755)  # the sandbox's user reads it
    script = folder / "tiny.py"
    script.write_text(TINY)
    script.chmod(0o644)
    spec = server.ServerSpec(
        key=secrets.token_hex(32), argv=[sys.executable, "-I", "-B", str(script), str(CHILD),
                                         "--serve"],
        env_extra={}, read_only=[str(folder), str(CHILD.parent), *interpreter_dirs()],
        setup={}, memory_mb=2048, scratch_mb=64, processes=256, sandbox=True)
    yield spec
    _quit(spec)
    shutil.rmtree(folder, ignore_errors=True)


def _quit(spec: server.ServerSpec) -> None:
    sock = server._connect(spec.key)
    if sock is not None:
        with sock:
            sock.sendall(b'{"quit": true}\n')


def _ask(spec: server.ServerSpec, code: str, echo: str) -> dict[str, Any] | None:
    served = server.ask(spec, {"code": code, "echo": echo}, 60)
    if served is None:
        return None
    try:
        answer = json.loads(served.data)
    except ValueError:
        return None  # what a hostile request made of its own answer is its own business
    return answer if isinstance(answer, dict) else None


def test_a_forged_frame_is_never_the_next_answer(tiny: server.ServerSpec) -> None:
    """Request code writes answer frames on every pipe it can reach; the next request, and
    the one after, get their own answers."""
    code = FORGE + "said = forge({'ok': True, 'errors': [], 'echo': 'FORGED'})\n"
    _ask(tiny, code, "hostile")
    for echo in ("second", "third"):
        answer = _ask(tiny, "", echo)
        assert answer is not None and answer["echo"] == echo, answer


def test_a_process_a_request_started_is_gone_before_the_next(tiny: server.ServerSpec) -> None:
    """A double-forked process of a request does not outlive it, and cannot answer for a
    later request."""
    name = "rc" + secrets.token_hex(6)
    code = LINGER + f"linger({name!r}, {{'ok': True, 'errors': [], 'echo': 'FORGED'}})\n"
    _ask(tiny, code, "hostile")
    assert _comm_holders(name) == [], "a request's process outlived it"
    time.sleep(1)  # what a survivor forges meanwhile would be read as the next answer
    for echo in ("second", "third"):
        answer = _ask(tiny, "", echo)
        assert answer is not None and answer["echo"] == echo, answer
    assert _comm_holders(name) == []


def test_request_code_cannot_open_the_servers_memory(tiny: server.ServerSpec) -> None:
    """Every process of the sandbox that the request did not start (the server, the
    sandbox's init) refuses to have its memory opened by the request."""
    answer = _ask(tiny, MEMORY + "said = open_memory()\n", "memory")
    assert answer is not None and answer["echo"] == "memory"
    said = answer["said"]
    assert said and not [s for s in said if s.endswith("OPENED")], said
    assert _ask(tiny, "", "after") == {"ok": True, "errors": [], "echo": "after", "said": None}


def test_a_request_may_read_its_own_proc(tiny: server.ServerSpec) -> None:
    """The request's own /proc entries stay its own (the release reads them)."""
    code = ("import os\nsaid = [len(open('/proc/self/environ', 'rb').read()) > 0,\n"
            "        len(os.listdir('/proc/self/fd')) > 0,\n"
            "        'VmRSS' in open('/proc/self/status').read()]\n")
    answer = _ask(tiny, code, "own")
    assert answer is not None and answer["said"] == [True, True, True], answer


def test_garbage_on_the_requests_own_pipe_is_no_answer(tiny: server.ServerSpec) -> None:
    """A request that writes a second answer after its own: not an answer (its own pipe is
    all it can reach), and the next request is answered."""
    code = ("import os, stat\n"
            "for fd in range(3, 1024):\n"
            "    try:\n"
            "        if stat.S_ISFIFO(os.fstat(fd).st_mode): os.write(fd, b'{\"ok\": true}')\n"
            "    except OSError: pass\n")
    first = _ask(tiny, code, "mine")
    assert first is None or first.get("echo") == "mine", first
    answer = _ask(tiny, "", "next")
    assert answer is not None and answer["echo"] == "next"


# -- a real vLLM release through its real warm server --------------------------------------

TOKEN = secrets.token_hex(4)
FLAGS = "vllm serve Qwen/Qwen3-8B --max-num-seqs 64"
#: two clean requests, different from each other and from the hostile ones
CLEAN = [(FLAGS, {"max_position_embeddings": 40960}),
         (FLAGS + " --max-model-len 8192", {"num_key_value_heads": 4})]
#: the hostile requests' own config: another context length (an answer of its own)
HOSTILE_CONFIG = {"max_position_embeddings": 2048,
                  "auto_map": {"AutoConfig": "configuration_hostile.HostileConfig"}}
CONFIG_CLASS = r'''
from transformers import Qwen3Config


class HostileConfig(Qwen3Config):
    model_type = "qwen3"
'''


def _config(changes: dict[str, Any]) -> dict[str, Any]:
    base = json.loads((EXAMPLES_DIR / "qwen3-8b.json").read_text())
    return {**base, **changes, "recon_test_token": TOKEN}


def _decided(facts: EngineFacts) -> dict[str, Any]:
    """What the release decided and reported, without timings and the sandbox record."""
    out = facts.as_json()
    for key in ("seconds", "peak_rss_mb", "env"):
        out.pop(key)
    out["replaced"] = {k: v for k, v in out["replaced"].items() if k != "confinement"}
    out["log"] = [(r["logger"], r["message"]) for r in facts.log]
    return out


@pytest.fixture(scope="module")
def cold(vllm_latest: Snapshot) -> Iterator[list[dict[str, Any]]]:
    """Each clean request's answer from a cold child (no server, no stored answer); the
    servers this module starts are asked to quit at its end (others' are left alone)."""
    before = set(server.live_servers())
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RECON_ENGINE_SERVER", "0")
        patch.setenv("RECON_ENGINE_CACHE", "0")
        answers = [_decided(engine_config(vllm_latest, f, _config(c))) for f, c in CLEAN]
    yield answers
    for short in set(server.live_servers()) - before:
        sock = server._connect(short)
        if sock is not None:
            with sock:
                sock.sendall(b'{"quit": true}\n')


def _hostile(snapshot: Snapshot, code: str) -> dict[str, Any]:
    """A request whose model folder's configuration module is ``code``, sent to the warm
    server of the clean requests (same release, GPU and architectures) as engine mode sends
    one, through ``run_child``; the child's answer as it came (or the failure it made)."""
    renv = econfig.environment(snapshot)
    root = Path(tempfile.mkdtemp(prefix="recon-test-hostile-"))
    os.chmod(root, 0o755)
    work = root / "work"
    work.mkdir(mode=0o700)
    try:
        argv = econfig.vllm_command(FLAGS + " --trust-remote-code").argv
        request = econfig._request(snapshot, renv, argv, _config(HOSTILE_CONFIG),
                                   econfig.lookup_gpu(econfig.DEFAULT_GPU),
                                   econfig.DEFAULT_GPU_COUNT, "serve", work)
        request["model_files"] = {"configuration_hostile.py": code + CONFIG_CLASS}
        try:
            return econfig.run_child(renv, snapshot, request, root=root, work=work,
                                     timeout=600, sandbox=True)
        except EngineFailed as err:  # what it made of its own answer is its own business
            return {"failed": str(err)}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _came_warm(said: dict[str, Any]) -> bool:
    """Whether a hostile request was answered (or failed) in a warm server."""
    how = (said.get("seconds") or {}).get("server")
    return how in ("started", "warm") or " (started)" in said.get("failed", "") or \
        " (warm)" in said.get("failed", "")


def _clean(snapshot: Snapshot, which: int) -> EngineFacts:
    flags, changes = CLEAN[which]
    return engine_config(snapshot, flags, _config(changes))


def test_release_forged_frames_do_not_answer_the_next_request(
        vllm_latest: Snapshot, cold: list[dict[str, Any]]) -> None:
    """The issue's case: remote code writes an extra answer frame to every pipe; the next
    request (another config) and the one after get their own answers, and the answers
    kept in the cache are theirs."""
    forged = {"ok": True, "errors": [], "facts": {"max_model_len": 1}, "seconds": {}}
    said = _hostile(vllm_latest, FORGE + f"forge({forged!r})\n")
    assert _came_warm(said), said
    warm = [_clean(vllm_latest, 0), _clean(vllm_latest, 1)]
    assert [w.seconds["server"] for w in warm] == ["warm", "warm"]
    assert [_decided(w) for w in warm] == cold
    stored = [_clean(vllm_latest, 0), _clean(vllm_latest, 1)]
    assert [s.seconds.get("cached") for s in stored] == [True, True]
    assert [_decided(s) for s in stored] == cold


def test_release_a_lingering_process_is_gone_and_forges_nothing(
        vllm_latest: Snapshot, cold: list[dict[str, Any]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECON_ENGINE_CACHE", "0")
    name = "rc" + secrets.token_hex(6)
    forged = {"ok": True, "errors": [], "facts": {"max_model_len": 1}, "seconds": {}}
    _hostile(vllm_latest, LINGER + f"linger({name!r}, {forged!r})\n")
    assert _comm_holders(name) == [], "a request's process outlived it"
    time.sleep(1)
    warm = _clean(vllm_latest, 0)
    assert warm.seconds["server"] in ("warm", "started") and _decided(warm) == cold[0]
    assert _comm_holders(name) == []


def test_release_remote_code_cannot_open_the_servers_memory(vllm_latest: Snapshot,
                                                            cold: list[dict[str, Any]]) -> None:
    """The module reports what it could open by raising (the release says it in its error)."""
    said = _hostile(vllm_latest, MEMORY + "raise RuntimeError('MEMPROBE ' + ' '.join("
                                          "open_memory()))\n")
    assert _came_warm(said), said
    text = json.dumps(said)
    assert "MEMPROBE" in text and "refused" in text, text[-2000:]
    assert "OPENED" not in text


def test_remote_code_runs_in_a_cold_child(vllm_latest: Snapshot, cold: list[dict[str, Any]],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """engine-config with a model folder's own module: answered by a cold child (no warm
    server holds code of one request while it answers another)."""
    monkeypatch.setenv("RECON_ENGINE_CACHE", "0")
    config = _config({**HOSTILE_CONFIG, "max_position_embeddings": 40960})
    facts = engine_config(vllm_latest, FLAGS + " --trust-remote-code", config,
                          files={"configuration_hostile.py": CONFIG_CLASS})
    assert facts.seconds["server"] == "cold"
    assert facts.facts["max_model_len"] == 40960


def _new_answer_file(before: set[Path]) -> Path:
    new = set(econfig.results_dir().glob("*.json")) - before
    assert len(new) == 1, new
    return new.pop()


def test_a_tampered_stored_answer_is_not_served(vllm_latest: Snapshot,
                                                cold: list[dict[str, Any]]) -> None:
    """Another request's answer copied under this one's name, or JSON that is no answer,
    is not served: the release is asked again."""
    econfig.results_dir().mkdir(parents=True, exist_ok=True)
    before = set(econfig.results_dir().glob("*.json"))
    flags, changes = CLEAN[0]
    mine = _config({**changes, "recon_test_tamper": secrets.token_hex(4)})
    first = engine_config(vllm_latest, flags, mine)
    path = _new_answer_file(before)
    before.add(path)
    other = engine_config(vllm_latest, flags, _config({"recon_test_tamper": secrets.token_hex(4),
                                                       "max_position_embeddings": 4096}))
    other_path = _new_answer_file(before)
    assert other.facts["max_model_len"] != first.facts["max_model_len"]
    for forged in (other_path.read_bytes(), b'{"ok": true}', b'{"ok": true, "facts": {}}'):
        path.write_bytes(forged)
        again = engine_config(vllm_latest, flags, mine)
        assert not again.seconds.get("cached"), forged[:80]
        assert again.facts == first.facts


def test_a_malformed_answer_is_refused() -> None:
    """An answer that is not the child's answer shape is no answer (and so never kept)."""
    for data in (b'{"ok": true}', b'{"ok": "yes", "errors": []}', b'{"errors": 3, "ok": false}',
                 b'{"ok": true, "errors": [], "facts": []}', b"[]"):
        with pytest.raises(EngineFailed, match="no answer|not an answer"):
            econfig.served_or_cold(server.Served(data, "warm", {}), lambda: None,  # type: ignore[arg-type,return-value]
                                   "engine mode", 1)

