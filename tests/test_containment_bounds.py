"""Hostile input ends in one line, in bounded time and memory (issue 36, item 6).

Written from the issue's text: ``recon logs`` on a 100,000-deep JSON argument line, a
5,000-digit number, a 1 GiB line and a 17 MiB argument line; a ``registry:`` source whose
server sends a bad status line, a header over 64 KiB, 150 headers, or its answer one byte at
a time; a model config with ``num_hidden_layers`` 10^30 or NaN/Infinity. Each runs the real
CLI as a subprocess on real files (the registry is a real TCP server on loopback speaking raw
HTTP), under a memory limit and a wall-clock limit, and must exit non-zero with one
``recon: error:`` line that names the file (or server) and what is wrong, and no traceback.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

#: address space for the CLI under test: recon needs about 300 MiB; a 1 GiB line does not fit
MEMORY = 768 << 20
VLLM = "INFO 05-01 19:08:28 [api_server.py:1000] "


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def recon(*args: str, env: dict[str, str] | None = None, timeout: float = 60,
          cwd: Path | None = None) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run the real CLI under the memory limit; (result, seconds). A run past ``timeout`` fails."""
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "recon", *args], capture_output=True,
                              text=True, env={**os.environ, **(env or {})}, timeout=timeout,
                              preexec_fn=_limit_memory, cwd=cwd)
    except subprocess.TimeoutExpired:
        pytest.fail(f"recon {' '.join(a[:60] for a in args)} still ran after {timeout} s")
    return proc, time.monotonic() - start


def refused(proc: subprocess.CompletedProcess[str], *words: str) -> str:
    """Non-zero exit, no traceback, exactly one ``recon: error:`` line holding ``words``."""
    assert proc.returncode != 0, proc.stdout[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("recon: error:")]
    assert len(lines) == 1, proc.stderr[-3000:]
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


# --- recon logs ------------------------------------------------------------------------

def test_a_100000_deep_json_argument_line_is_one_line(tmp_path: Path) -> None:
    log = tmp_path / "deep.log"
    log.write_text(VLLM + 'non-default args: {"model": "m", "x": ' + "[" * 100_000 + "]" * 100_000
                   + "}\n")
    proc, seconds = recon("logs", str(log), cwd=tmp_path)
    line = refused(proc, "deep.log", "line 1", "nested")
    assert seconds < 30, line


@pytest.mark.parametrize("where", ["quantity", "argument"])
def test_a_5000_digit_number_is_one_line(tmp_path: Path, where: str) -> None:
    log = tmp_path / "digits.log"
    number = "9" * 5000
    text = f"GPU KV cache size: {number} tokens" if where == "quantity" else \
        f"non-default args: {{'model': 'm', 'max_model_len': {number}}}"
    log.write_text(VLLM + "vLLM API server version 0.10.2\n" + VLLM + text + "\n")
    proc, seconds = recon("logs", str(log), cwd=tmp_path)
    refused(proc, "digits.log", "line 2", "digits")
    assert seconds < 30


def test_large_numbers_keep_every_digit(tmp_path: Path) -> None:
    """A 20-digit count is read exactly (a float would give ...567168)."""
    log = tmp_path / "big.log"
    log.write_text(VLLM + "GPU KV cache size: 12,345,678,901,234,567,891 tokens\n")
    proc, _ = recon("logs", str(log), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    observed = json.loads(proc.stdout)["log"]["observed"]["kv_cache_tokens"]
    assert observed["value"] == 12345678901234567891


def _write_line(path: Path, head: str, mib: int, chunk: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(head.encode())
        for _ in range(mib):
            fh.write(chunk)
        fh.write(b"\n")


def test_a_1_gib_line_is_never_held_whole(tmp_path: Path) -> None:
    log = tmp_path / "huge.log"
    _write_line(log, VLLM + "non-default args: {'model': '", 1024, b"x" * (1 << 20))
    try:
        assert log.stat().st_size > 1 << 30
        proc, seconds = recon("logs", str(log), cwd=tmp_path)
    finally:
        log.unlink()
    refused(proc, "huge.log", "line 1", "MiB")
    assert seconds < 30


def test_a_17_mib_argument_line_ends_fast(tmp_path: Path) -> None:
    log = tmp_path / "args.log"
    entries = ", ".join(f"'key_{i}': 'value_{i}'" for i in range(700_000))
    log.write_text(VLLM + "non-default args: {" + entries + "}\n")
    assert log.stat().st_size > 17 << 20
    proc, seconds = recon("logs", str(log), timeout=40, cwd=tmp_path)
    refused(proc, "args.log", "line 1")
    assert seconds < 30


def test_a_long_line_of_the_logs_own_words_costs_linear_time(tmp_path: Path) -> None:
    """Under the line cap, a line built so a backtracking pattern would retry at every
    character (the start-up logo's blocks, none followed by a version) still reads fast."""
    log = tmp_path / "logo.log"
    log.write_text(VLLM + "version 1 " + "█ " * 150_000 + "\n")
    proc, seconds = recon("logs", str(log), "--json", timeout=40, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["log"]["lines"] == 1
    assert seconds < 30


# --- registry: a raw HTTP server on loopback ------------------------------------------

Handler = Callable[[socket.socket, str], None]


@pytest.fixture
def raw_server() -> Iterator[Callable[[Handler], str]]:
    """``start(handler)`` -> ``127.0.0.1:PORT``; ``handler(conn, request_path)`` answers."""
    servers: list[socket.socket] = []
    stop = threading.Event()

    def start(handler: Handler) -> str:
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(16)
        srv.settimeout(0.2)
        servers.append(srv)

        def serve(conn: socket.socket) -> None:
            with conn:
                conn.settimeout(30)
                data = b""
                try:
                    while b"\r\n\r\n" not in data:
                        got = conn.recv(65536)
                        if not got:
                            return
                        data += got
                    handler(conn, data.split(b" ", 2)[1].decode())
                except OSError:
                    pass

        def loop() -> None:
            while not stop.is_set():
                try:
                    conn, _ = srv.accept()
                except OSError:
                    continue
                threading.Thread(target=serve, args=(conn,), daemon=True).start()

        threading.Thread(target=loop, daemon=True).start()
        return f"127.0.0.1:{srv.getsockname()[1]}"

    yield start
    stop.set()
    for srv in servers:
        srv.close()


def _drip(conn: socket.socket, data: bytes, every: float) -> None:
    for i in range(len(data)):
        conn.sendall(data[i:i + 1])
        time.sleep(every)


def _snapshot(host: str, tmp_path: Path, timeout: float = 60) -> tuple[
        subprocess.CompletedProcess[str], float]:
    env = {"RECON_REGISTRY_INSECURE": "1", "RECON_CACHE": str(tmp_path / "cache"),
           "RECON_REGISTRY_TIMEOUT": "2"}
    return recon("snapshot", "take", f"registry:{host}/recon/hostile:1", "--out",
                 str(tmp_path / "out"), env=env, timeout=timeout, cwd=tmp_path)


ANSWERS = {
    "bad status line": b"HTTP/1.1 two hundred OK\r\nContent-Length: 0\r\n\r\n",
    "a header over 64 KiB": b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (70 << 10) + b"\r\n\r\n",
    "150 headers": b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(150))
    + b"\r\n",
}


@pytest.mark.parametrize("case", sorted(ANSWERS))
def test_a_malformed_answer_is_one_line(case: str, raw_server: Callable[[Handler], str],
                                        tmp_path: Path) -> None:
    host = raw_server(lambda conn, _path: conn.sendall(ANSWERS[case]))
    proc, seconds = _snapshot(host, tmp_path)
    refused(proc, host, "malformed")
    assert seconds < 30


def test_a_head_sent_one_byte_at_a_time_meets_a_deadline(
        raw_server: Callable[[Handler], str], tmp_path: Path) -> None:
    head = b"HTTP/1.1 200 OK\r\n" + b"X-Slow: yes\r\n" * 200 + b"\r\n"
    host = raw_server(lambda conn, _path: _drip(conn, head, 1.0))
    proc, seconds = _snapshot(host, tmp_path, timeout=45)
    refused(proc, host, "within 2 s")
    assert seconds < 20


def test_a_body_sent_one_byte_at_a_time_meets_a_deadline(
        raw_server: Callable[[Handler], str], tmp_path: Path) -> None:
    def answer(conn: socket.socket, _path: str) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1"
                     b"+json\r\nContent-Length: 2000\r\n\r\n")
        _drip(conn, b" " * 2000, 1.0)

    host = raw_server(answer)
    proc, seconds = _snapshot(host, tmp_path, timeout=45)
    refused(proc, host, "bytes/s")
    assert seconds < 20


def test_a_layer_sent_one_byte_at_a_time_meets_a_deadline(
        raw_server: Callable[[Handler], str], tmp_path: Path) -> None:
    """The manifest and config come at once; the layer's download (streamed into the blob
    cache, resumed after a drop) trickles: each try ends at the rate limit, the tries are few."""
    layer = b"\0" * 4096
    layer_digest = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                         "rootfs": {"type": "layers", "diff_ids": [layer_digest]}}).encode()
    config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": config_digest, "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": layer_digest, "size": len(layer)}]}).encode()

    def answer(conn: socket.socket, path: str) -> None:
        body = manifest if "/manifests/" in path else config if config_digest in path else layer
        kind = b"application/vnd.oci.image.manifest.v1+json" if body is manifest else \
            b"application/octet-stream"
        conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: " + kind
                     + b"\r\nContent-Length: %d\r\n\r\n" % len(body))
        if body is layer:
            _drip(conn, body, 1.0)
        else:
            conn.sendall(body)

    host = raw_server(answer)
    proc, seconds = _snapshot(host, tmp_path, timeout=60)
    refused(proc, host, "bytes/s")
    assert seconds < 40


# --- model configs ---------------------------------------------------------------------

def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "model" / "config.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


BASE = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
        "intermediate_size": 12288, "num_attention_heads": 32, "num_key_value_heads": 8,
        "num_hidden_layers": 36, "vocab_size": 151936, "max_position_embeddings": 40960,
        "rms_norm_eps": 1e-06, "torch_dtype": "bfloat16"}

CONFIGS = {
    "num_hidden_layers 10^30": (json.dumps({**BASE, "num_hidden_layers": 10**30}),
                                "num_hidden_layers"),
    "NaN": (json.dumps(BASE).replace('"rms_norm_eps": 1e-06', '"rms_norm_eps": NaN'),
            "rms_norm_eps"),
    "Infinity": (json.dumps(BASE).replace('"hidden_size": 4096', '"hidden_size": Infinity'),
                 "hidden_size"),
    "1e999": (json.dumps(BASE).replace('"rms_norm_eps": 1e-06', '"rms_norm_eps": 1e999'),
              "rms_norm_eps"),
    "nested 10^12 heads": (json.dumps({**BASE, "text_config": {"num_attention_heads": 10**12}}),
                           "text_config.num_attention_heads"),
}


@pytest.mark.parametrize("case", sorted(CONFIGS))
def test_an_impossible_config_is_refused_before_anything_is_built(case: str,
                                                                  tmp_path: Path) -> None:
    text, field = CONFIGS[case]
    config = _config(tmp_path, text)
    cache = tmp_path / "cache"
    cache.mkdir()
    env = {"RECON_CACHE": str(cache), "PIP_CONFIG_FILE": "/dev/null",  # no index: no download
           "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "UV_INDEX_URL": "http://127.0.0.1:9/simple",
           "UV_OFFLINE": "1", "PIP_RETRIES": "0", "PIP_TIMEOUT": "2"}
    proc, seconds = recon("engine-config", "pip:vllm==0.10.2", "--flags", "vllm serve m",
                          "--config", str(config), env=env, cwd=tmp_path)
    refused(proc, "config.json", field)
    assert proc.returncode == 2
    assert seconds < 20
    assert not any(cache.iterdir()), sorted(p.name for p in cache.rglob("*"))[:10]


def test_a_published_config_still_reads(tmp_path: Path) -> None:
    """The bounds leave real configs alone: the same path reads this one and goes on (to the
    snapshot, which the closed index cannot give)."""
    config = _config(tmp_path, json.dumps(BASE))
    env = {"RECON_CACHE": str(tmp_path / "cache"), "PIP_CONFIG_FILE": "/dev/null",
           "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_RETRIES": "0", "PIP_TIMEOUT": "2"}
    proc, _ = recon("engine-config", "pip:vllm==0.10.2", "--flags", "vllm serve m",
                    "--config", str(config), env=env, cwd=tmp_path)
    assert "config.json" not in proc.stderr, proc.stderr[-2000:]


# --- recon probe read: hostile probe logs ----------------------------------------------

#: a VERIFY record as the probe runtime writes it (one process, one target)
GOOD_RECORD = {"kind": "VERIFY", "t": 1.0, "pid": 7, "ppid": 1, "forked_from": None,
               "argv": ["python", "-m", "vllm"], "python": "3.12.3", "log_error": None,
               "env": {}, "chained_sitecustomize": None, "targets": {"m:f": "patched"},
               "max_files": 64}

#: one crafted line each: a shape the runtime never writes
BAD_RECORDS = {
    "100,000-deep nesting": '{"kind": "call", "pid": 7, "args": ' + "[" * 100_000 + "}",
    "pid a string": '{"kind": "VERIFY", "pid": "abc"}',
    "pid an object": '{"kind": "VERIFY", "pid": {}}',
    "target a list": '{"kind": "patched", "pid": 7, "target": ["a"]}',
    "n Infinity": '{"kind": "call", "pid": 7, "target": "m:f", "n": Infinity}',
    "patched without target": '{"kind": "patched", "pid": 7, "status": "patched"}',
    "argv a number": '{"kind": "VERIFY", "pid": 7, "argv": 5}',
}


def _probe_dir(tmp_path: Path, *lines: str) -> Path:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "probe-7-20260101T000000.jsonl").write_text("".join(ln + "\n" for ln in lines))
    return logs


def _one_unreadable_line(proc: subprocess.CompletedProcess[str]) -> str:
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out[-3000:]
    lines = [ln for ln in out.splitlines() if "unreadable" in ln]
    assert len(lines) == 1, out[-3000:]
    assert "probe-7-20260101T000000.jsonl" in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("case", sorted(BAD_RECORDS))
def test_a_crafted_probe_record_is_skipped_and_counted(case: str, tmp_path: Path) -> None:
    """Beside a good record the crafted one is one counted line, the rest reads (exit 0)."""
    logs = _probe_dir(tmp_path, json.dumps(GOOD_RECORD), BAD_RECORDS[case])
    proc, seconds = recon("probe", "read", str(logs), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "1 unreadable" in _one_unreadable_line(proc)
    assert "1 processes" in proc.stdout
    assert seconds < 30


@pytest.mark.parametrize("case", sorted(BAD_RECORDS))
def test_a_log_of_only_crafted_records_is_one_error_line(case: str, tmp_path: Path) -> None:
    logs = _probe_dir(tmp_path, BAD_RECORDS[case])
    proc, _ = recon("probe", "read", str(logs), cwd=tmp_path)
    line = refused(proc, "no record", "probe-7-20260101T000000.jsonl")
    assert "1 unreadable" in line


def test_a_200_mib_probe_record_is_skipped_in_bounded_memory(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "probe-7-20260101T000000.jsonl"
    with open(log, "wb") as fh:
        fh.write(json.dumps(GOOD_RECORD).encode() + b"\n")
        fh.write(b'{"kind": "call", "pid": 7, "target": "m:f", "n": 0, "x": "')
        for _ in range(200):
            fh.write(b"x" * (1 << 20))
        fh.write(b'"}\n')
    try:
        proc, seconds = recon("probe", "read", str(logs), cwd=tmp_path)
    finally:
        log.unlink()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "1 unreadable" in _one_unreadable_line(proc)
    assert seconds < 20


# --- recon logs: lines built to make a row's expression backtrack -----------------------

#: per row that was quadratic in a line's length: a line under the 8 KiB line limit that
#: makes it retry at every start (or every repeat of its words), and how many such lines
SLOW_LINES = {
    "kv_tokens.joined": ("A" * 8000 + " KV cache", 15),
    "load_weight": (("Load weight end. type=A," * 400)[:8000], 1000),
    "util_hint": (("current --gpu-memory-utilization=1 is equivalent to "
                   "--gpu-memory-utilization=1 without CUDA graph" * 90)[:8000], 3000),
    "engine_stats": (("Avg prompt throughput: 1 tokens/s, Avg generation throughput: 1 tokens/s,"
                      " Running: 1 reqs, Waiting: 0 reqs," * 70)[:8000], 3000),
}


@pytest.mark.parametrize("case", sorted(SLOW_LINES))
def test_a_line_built_to_backtrack_reads_fast(case: str, tmp_path: Path) -> None:
    """Linear rows read these logs (at most 24 MB) within a small factor of a log of plain lines of the
    same size (measured beside it, so a loaded machine slows both alike)."""
    line, count = SLOW_LINES[case]
    plain = tmp_path / "plain.log"
    plain.write_text(("INFO 01-01 00:00:00 [x.py:1] " + "x" * len(line) + "\n") * count)
    _, baseline = recon("logs", str(plain), "--json", timeout=120, cwd=tmp_path)
    log = tmp_path / "r.log"
    log.write_text(("INFO 01-01 00:00:00 [x.py:1] " + line + "\n") * count)
    proc, seconds = recon("logs", str(log), "--json", timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["log"]["lines"] == count
    assert seconds < 10 * baseline + 3, (seconds, baseline)  # the old rows: 16-25 s against ~1
