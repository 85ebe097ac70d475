"""Time limits for registry connections that a slow or hostile server cannot stretch.

A socket timeout alone bounds one wait, not a request: a server that sends one
byte every 20 seconds never trips a 60-second timeout and keeps recon waiting
for as long as it likes. Every registry request therefore has a :class:`Deadline`:

* the response head (status line and headers) and any body shorter than
  ``min_rate * timeout`` bytes must arrive within ``timeout`` seconds of the
  request;
* a longer body must keep coming at ``min_rate`` bytes per second on average over
  every ``timeout`` seconds: each ``timeout``-second window must bring
  ``min_rate * timeout`` bytes, so a stall or a trickle ends within one window
  and a body of N bytes takes at most ``N / min_rate + timeout`` seconds.

``RECON_REGISTRY_TIMEOUT`` (seconds, default 60; also the connect and per-read
socket timeout) and ``RECON_REGISTRY_MIN_RATE`` (bytes per second, default
10240; 0 turns the rate check off: then only a stall of ``timeout`` seconds
ends a body) set them.

One watchdog thread (started when a request is in flight, gone when none is)
enforces the windows: when one runs out it shuts the connection's socket down,
which wakes the blocked read; the reader sees :attr:`Deadline.expired` and
raises one line instead of treating the cut as the end of the body.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import threading
import time

from ...errors import ReconError

DEFAULT_TIMEOUT = 60.0
DEFAULT_MIN_RATE = 10 << 10
_TICK = 0.1  # how often the watchdog looks (seconds)


def limits_from_env() -> tuple[float, int]:
    """``(timeout seconds, minimum bytes per second)`` from the environment, or the defaults."""
    return (_env_number("RECON_REGISTRY_TIMEOUT", DEFAULT_TIMEOUT, float, minimum=0.1),
            int(_env_number("RECON_REGISTRY_MIN_RATE", DEFAULT_MIN_RATE, int, minimum=0)))


def _env_number(name: str, default: float, kind: type, *, minimum: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(kind(raw))
    except ValueError:
        raise ReconError(f"{name} must be a number, got {raw[:40]!r}") from None
    if not minimum <= value < float("inf"):
        raise ReconError(f"{name} must be at least {minimum:g}, got {raw[:40]!r}")
    return value


class Deadline:
    """One request's time limits on one connection (see the module's docstring)."""

    def __init__(self, conn: http.client.HTTPConnection, netloc: str, timeout: float,
                 min_rate: int) -> None:
        self.conn, self.netloc = conn, netloc
        #: the socket once connected (a response that closes its connection takes it over,
        #: and the connection forgets it)
        self.sock: socket.socket | None = None
        self.timeout, self.min_rate = timeout, min_rate
        self.window_end = time.monotonic() + timeout
        self.window_bytes = 0
        self.in_body = False
        self.expired = False
        _WATCHDOG.add(self)

    def sent(self) -> None:
        """The request is out: remember its socket, which the response may take over."""
        self.sock = self.conn.sock

    def head_read(self) -> None:
        """The status line and headers are in: what is left is the body."""
        self.in_body = True

    def piece(self) -> int:
        """How many body bytes to ask for per read, so progress is seen within a window."""
        return max(4096, min(64 << 10, int(self.min_rate * self.timeout / 2)))

    def fed(self, n: int) -> None:
        """``n`` body bytes arrived: a window that has brought its share starts a new one."""
        self.window_bytes += n
        if self.window_bytes >= max(1.0, self.min_rate * self.timeout):
            self.window_bytes = 0
            self.window_end = time.monotonic() + self.timeout

    def done(self) -> None:
        """The request is over (its body read, or abandoned): stop watching it."""
        _WATCHDOG.remove(self)

    def expire(self) -> bool:
        """Cut the connection; True once its socket was shut down (or it has none left)."""
        self.expired = True
        sock = self.conn.sock or self.sock
        if sock is None:
            return False  # still connecting (the connect timeout bounds that): look again
        with contextlib.suppress(OSError):
            socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the plain socket's, also under TLS
        return True

    def message(self, what: str = "") -> str:
        """The one line that says which limit ran out (``what``: the URL asked for)."""
        if not self.in_body:
            return (f"registry {self.netloc} sent no complete answer{' to ' + what if what else ''}"
                    f" within {self.timeout:g} s (RECON_REGISTRY_TIMEOUT sets the limit)")
        return (f"registry {self.netloc} sent {what or 'a response body'} slower than "
                f"{self.min_rate} bytes/s over {self.timeout:g} s (stalled or trickling; "
                "RECON_REGISTRY_MIN_RATE and RECON_REGISTRY_TIMEOUT set the limits)")

    def error(self, what: str = "") -> ReconError:
        return ReconError(self.message(what))


class _Watchdog:
    """One thread that cuts the connections whose window ran out; it exits when idle."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watched: set[Deadline] = set()
        self._thread: threading.Thread | None = None

    def add(self, deadline: Deadline) -> None:
        with self._lock:
            self._watched.add(deadline)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="recon-registry-deadline",
                                                daemon=True)
                self._thread.start()

    def remove(self, deadline: Deadline) -> None:
        with self._lock:
            self._watched.discard(deadline)

    def _run(self) -> None:
        while True:
            time.sleep(_TICK)
            now = time.monotonic()
            with self._lock:
                if not self._watched:
                    self._thread = None
                    return
                due = [d for d in self._watched if d.window_end <= now]
            for d in due:
                if d.expire():
                    self.remove(d)


_WATCHDOG = _Watchdog()
