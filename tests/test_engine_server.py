"""The warm engine server: the same answers as a cold child, in seconds, and it contains itself.

The reference for "the same answer" is a cold child of the same release run
by the same code path with servers off: the release's own numbers are checked
against real engine logs in tests/test_engine_mode.py and
tests/test_engine_recipes.py; here the point is that keeping the release
imported between requests changes nothing it decides. Real wheels, the real
sandbox, real processes.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from recon.engine import server
from recon.engine.config import EngineFacts, EngineFailed, engine_config
from recon.engine.sglang import MemoryFigures, ServerArgsFacts
from recon.engine.sglang import server_args as sglang_server_args
from recon.examples import EXAMPLES_DIR
from recon.snapshots.model import Snapshot

CONFIG = json.loads((EXAMPLES_DIR / "qwen3-next-80b-a3b-instruct.json").read_text())
FLAGS = "vllm serve Qwen/Qwen3-Next-80B-A3B-Instruct -tp 2 --max-num-seqs 64"


@pytest.fixture(scope="module")
def no_stored_answers() -> Iterator[None]:
    """Every request is computed (no stored answers); no server left when the module ends."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RECON_ENGINE_CACHE", "0")
        patch.delenv("RECON_ENGINE_SERVER", raising=False)
        server.stop_all()
        _wait_gone()
        yield
        server.stop_all()
        _wait_gone()


def _wait_gone(seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while server.live_servers() and time.monotonic() < deadline:
        time.sleep(0.1)


def _decided(facts: EngineFacts) -> dict[str, Any]:
    """Everything the release decided and reported, without timings and the sandbox record."""
    out = facts.as_json()
    for key in ("seconds", "peak_rss_mb", "env"):
        out.pop(key)
    out["replaced"] = {k: v for k, v in out["replaced"].items() if k != "confinement"}
    out["log"] = [(r["logger"], r["message"]) for r in facts.log]
    return out


# The tests below run in order and share the servers the first one starts.

def test_warm_answers_equal_a_cold_child(vllm_latest: Snapshot, no_stored_answers: None,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Two command lines on one server, and another GPU (another server, since module bodies
    ask the GPU while importing): each answer equals a cold child's."""
    asks = [(FLAGS, "h100"), (FLAGS.replace("-tp 2", "-tp 4"), "h100"), (FLAGS, "a100-80")]
    monkeypatch.setenv("RECON_ENGINE_SERVER", "0")
    cold = [engine_config(vllm_latest, flags, CONFIG, gpu=board) for flags, board in asks]
    monkeypatch.delenv("RECON_ENGINE_SERVER")
    warm = [engine_config(vllm_latest, flags, CONFIG, gpu=board) for flags, board in asks]
    assert [f.seconds["server"] for f in cold] == ["off"] * 3
    assert [f.seconds["server"] for f in warm] == ["started", "warm", "started"]
    for c, w in zip(cold, warm, strict=True):
        assert _decided(w) == _decided(c)
    # the answers differ where the release decides differently (not one answer replayed)
    assert warm[0].facts["attention_block_size"] != warm[1].facts["attention_block_size"]
    assert warm[0].gpu.name != warm[2].gpu.name and warm[0].facts != warm[2].facts
    assert warm[1].seconds["import"] < 0.5 and warm[1].replaced["confinement"]["warm_server"]
    assert warm[1].replaced["confinement"]["os_sandbox"] == "bwrap"
    assert len(server.live_servers()) == 2


@pytest.mark.wheels  # it talks to the servers the first test started from a release
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another user")
def test_another_user_gets_nothing(no_stored_answers: None) -> None:
    live = server.live_servers()
    assert live, "the servers of the first test"
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # another user on the same host asks a server to quit
        os.close(read)
        reply = b""
        try:
            os.setgid(65534)
            os.setuid(65534)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(20)
                sock.connect(f"\0recon-engine-0-{live[0]}".encode())
                sock.sendall(b'{"quit": true}\n')
                reply = sock.recv(100) or b"closed"
        except OSError as err:
            reply = f"error {err}".encode()
        os.write(write, reply)
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read, "rb") as fh:
        got = fh.read()
    # hung up on (at once, or as it wrote), never answered
    assert got == b"closed" or got.startswith((b"error [Errno 32]", b"error [Errno 104]")), got
    time.sleep(0.5)
    assert server.live_servers() == live  # its quit was not obeyed


def test_a_request_past_its_timeout_takes_the_server_down(vllm_latest: Snapshot,
                                                           no_stored_answers: None) -> None:
    before = set(server.live_servers())
    with pytest.raises(EngineFailed, match="ran past"):
        engine_config(vllm_latest, FLAGS + " --max-num-seqs 32", CONFIG, timeout=0.2)
    _wait_gone_from(before, 1)
    assert len(server.live_servers()) == len(before) - 1


def _wait_gone_from(before: set[str], count: int, seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds
    while len(before - set(server.live_servers())) < count and time.monotonic() < deadline:
        time.sleep(0.1)


def test_an_idle_server_exits(vllm_latest: Snapshot, no_stored_answers: None,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    server.stop_all()
    _wait_gone()
    monkeypatch.setenv("RECON_ENGINE_SERVER_IDLE", "2")
    assert engine_config(vllm_latest, FLAGS, CONFIG).seconds["server"] == "started"
    assert len(server.live_servers()) == 1
    _wait_gone(15)
    assert server.live_servers() == []


def _pipe_with(data: bytes) -> int:
    read, write = os.pipe()
    os.write(write, data)
    os.close(write)
    return read


@pytest.mark.parametrize("data", [b"", b"12\nshort", b"x1\n{}", b"9" * 40, b"%d\n" % (1 << 30)])
def test_a_broken_frame_from_the_child_is_no_answer(data: bytes) -> None:
    fd = _pipe_with(data)
    try:
        assert server._Frames(fd).read(time.monotonic() + 5) is None
    finally:
        os.close(fd)


def test_frames_are_read_whole_and_in_order() -> None:
    fd = _pipe_with(b"2\n{}7\n[1,2,3]")
    try:
        frames = server._Frames(fd)
        assert [frames.read(time.monotonic() + 5) for _ in range(3)] == [b"{}", b"[1,2,3]", None]
    finally:
        os.close(fd)


def test_a_silent_child_times_out() -> None:
    read, write = os.pipe()
    try:
        with pytest.raises(TimeoutError):
            server._Frames(read).read(time.monotonic() + 0.2)
    finally:
        os.close(read)
        os.close(write)


def test_the_servers_folder_is_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECON_CACHE", str(tmp_path))
    assert (server._servers_dir().stat().st_mode & 0o777) == 0o700


def _sglang_decided(facts: ServerArgsFacts) -> dict[str, Any]:
    """What SGLang resolved and sized, without timings, the sandbox record, the seed it draws
    at random, and what the warm server's imports add to the lists of what ran and was
    replaced (the release reached them while importing, before this request)."""
    out = {"server_args": {k: v for k, v in facts.server_args.items() if k != "random_seed"},
           "changed": {k: v for k, v in facts.changed.items() if k != "random_seed"},
           "launch_check": facts.launch_check, "assumptions": facts.assumptions}
    points = (facts.pools or {}).get("points", [])
    out["points"] = [{k: v for k, v in p.items() if k != "log"} for p in points]
    out["pool_lines"] = [[line for line in p.get("log", []) if "is allocated" in line]
                         for p in points]
    return out


@pytest.mark.wheels
def test_sglang_warm_answers_equal_a_cold_child(sglang_latest: Snapshot, no_stored_answers: None,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """SGLang's server: a paged pool, then a draft model's config (each request writes it into
    its own scratch folder); each answer equals a cold child's."""
    target = json.loads((EXAMPLES_DIR / "qwen3-8b.json").read_text())
    draft = json.loads((EXAMPLES_DIR / "qwen3-8b-dflash-b16.json").read_text())
    launch = "python -m sglang.launch_server --model-path Qwen/Qwen3-8B "
    memory = MemoryFigures((60.0, 61.5), (78.0, 78.0), graphs=True)
    asks = [(launch + "--page-size 64", None),
            (launch + "--speculative-algorithm DFLASH --speculative-draft-model-path "
             "z-lab/Qwen3-8B-DFlash-b16", draft)]

    def run() -> list[ServerArgsFacts]:
        return [sglang_server_args(sglang_latest, flags, target, gpu="h100", memory=memory,
                                   draft_config=d) for flags, d in asks]

    monkeypatch.setenv("RECON_ENGINE_SERVER", "0")
    cold = run()
    monkeypatch.delenv("RECON_ENGINE_SERVER")
    warm = run()
    assert [f.seconds["server"] for f in cold] == ["off"] * 2
    assert [f.seconds["server"] for f in warm] == ["started", "warm"]
    for c, w in zip(cold, warm, strict=True):
        assert _sglang_decided(w) == _sglang_decided(c)
    tokens = [f.pools["points"][0]["max_total_num_tokens"] for f in warm]  # type: ignore[index]
    assert len(set(tokens)) == 2  # each line sized apart (not one answer replayed)
    assert warm[1].server_args["speculative_draft_model_path"] == "z-lab/Qwen3-8B-DFlash-b16"
    assert warm[1].seconds["import"] < 0.5 and warm[1].replaced["confinement"]["warm_server"]
    assert warm[1].seconds["total"] < cold[1].seconds["total"] / 3
