"""Registry credentials and the auth handshake, the way ``docker pull`` does it.

Credentials come from where the user already keeps them, in Docker's order:
a per-registry credential helper (``credHelpers``), the default helper
(``credsStore``), then ``auths`` entries (``auth`` = base64 ``user:password``
or an ``identitytoken``). Docker's ``config.json`` (``$DOCKER_CONFIG`` or
``~/.docker``) is read first, then the containers ``auth.json`` that skopeo
and podman write. Secrets never reach a log line, an exception message or a
``repr``: :class:`Credentials` masks itself and errors name only the file.

The handshake: an anonymous request gets ``401`` with ``WWW-Authenticate``;
``Bearer`` means "get a token from ``realm`` for ``service`` and ``scope``"
(with the user's credentials if there are any, anonymously otherwise),
``Basic`` means "send the credentials with each request". Credentials are
sent only over HTTPS or to a registry on this machine (loopback).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import ReconError

DOCKER_HUB = "docker.io"
_HUB_ALIASES = {"docker.io", "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com"}
_HUB_KEY = "https://index.docker.io/v1/"  # the key Docker writes for Docker Hub


@dataclass(frozen=True)
class Credentials:
    """A username and secret (password or token); never printed."""

    username: str
    password: str = field(repr=False)
    identity_token: str = field(default="", repr=False)
    origin: str = ""  # which file or helper they came from (safe to show)

    def __repr__(self) -> str:
        return f"Credentials(username={self.username!r}, secret=***, origin={self.origin!r})"

    def basic(self) -> str:
        return "Basic " + base64.b64encode(f"{self.username}:{self.password}".encode()).decode()


def _norm_host(key: str) -> str:
    """``https://index.docker.io/v1/`` -> ``docker.io``; ``http://host:5000/x`` -> ``host:5000``."""
    host = key.strip()
    if "://" in host:
        host = host.split("://", 1)[1]
    host = host.split("/", 1)[0].lower()
    return DOCKER_HUB if host in _HUB_ALIASES else host


def config_files() -> list[Path]:
    """The auth files to read, Docker's first."""
    out: list[Path] = []
    docker_dir = os.environ.get("DOCKER_CONFIG")
    out.append(Path(docker_dir) / "config.json" if docker_dir else Path.home() / ".docker" / "config.json")
    if os.environ.get("REGISTRY_AUTH_FILE"):
        out.append(Path(os.environ["REGISTRY_AUTH_FILE"]))
    if os.environ.get("XDG_RUNTIME_DIR"):
        out.append(Path(os.environ["XDG_RUNTIME_DIR"]) / "containers" / "auth.json")
    out.append(Path.home() / ".config" / "containers" / "auth.json")
    return out


def _run_helper(helper: str, host: str, origin: str) -> Credentials | None:
    """``docker-credential-HELPER get`` with the server URL on stdin (Docker's protocol)."""
    exe = shutil.which(f"docker-credential-{helper}")
    if exe is None:
        raise ReconError(f"credential helper docker-credential-{helper} (named in {origin}) is not on PATH")
    server = _HUB_KEY if host == DOCKER_HUB else host
    try:
        proc = subprocess.run([exe, "get"], input=server.encode(), capture_output=True, timeout=60,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ReconError(f"credential helper docker-credential-{helper} failed to run "
                         f"({type(err).__name__})") from err
    if proc.returncode != 0:
        # "credentials not found" is the helper's way of saying: no entry; go anonymous.
        if b"not found" in proc.stdout.lower() + proc.stderr.lower():
            return None
        raise ReconError(f"credential helper docker-credential-{helper} exited with status "
                         f"{proc.returncode} for {host}")
    try:
        data = json.loads(proc.stdout)
        user, secret = str(data.get("Username") or ""), str(data.get("Secret") or "")
    except (ValueError, AttributeError) as err:
        raise ReconError(f"credential helper docker-credential-{helper} printed no valid JSON") from err
    if not secret:
        return None
    if user == "<token>":  # Docker's marker for an identity (refresh) token
        return Credentials("", "", identity_token=secret, origin=f"docker-credential-{helper}")
    return Credentials(user, secret, origin=f"docker-credential-{helper}")


def _from_file(path: Path, host: str) -> Credentials | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise ReconError(f"cannot read credentials file {path} ({type(err).__name__})") from err
    if not isinstance(data, dict):
        return None
    helpers = data.get("credHelpers") or {}
    for key, helper in helpers.items():
        if _norm_host(key) == host and helper:
            return _run_helper(str(helper), host, str(path))
    auths = data.get("auths") or {}
    entry = next((v for k, v in auths.items() if _norm_host(k) == host and isinstance(v, dict)), None)
    if data.get("credsStore"):
        found = _run_helper(str(data["credsStore"]), host, str(path))
        if found is not None or entry is None:
            return found
    if entry is None:
        return None
    if entry.get("identitytoken"):
        return Credentials(str(entry.get("username") or ""), "",
                           identity_token=str(entry["identitytoken"]), origin=str(path))
    if entry.get("auth"):
        try:
            user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
        except (ValueError, UnicodeDecodeError) as err:
            raise ReconError(f"the auth entry for {host} in {path} is not base64 'user:password'") from err
        return Credentials(user, password, origin=str(path))
    if entry.get("username") and entry.get("password"):
        return Credentials(str(entry["username"]), str(entry["password"]), origin=str(path))
    return None


def find_credentials(host: str) -> Credentials | None:
    """The user's credentials for ``host`` (``host[:port]``), or None for anonymous access."""
    want = _norm_host(host)
    for path in config_files():
        creds = _from_file(path, want)
        if creds is not None:
            return creds
    return None


_CHALLENGE_RE = re.compile(r'([A-Za-z][A-Za-z0-9_-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))')


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """``Bearer realm="...",service="...",scope="..."`` -> ("bearer", {...})."""
    scheme, _, rest = header.strip().partition(" ")
    params = {m.group(1).lower(): (m.group(2) if m.group(2) is not None else m.group(3))
              for m in _CHALLENGE_RE.finditer(rest)}
    return scheme.lower(), params


def is_loopback(host: str) -> bool:
    """True for ``localhost``, ``127.x.y.z`` and ``::1`` (with or without a port)."""
    import ipaddress

    name = host
    if name.startswith("["):
        name = name[1:].split("]", 1)[0]
    elif name.count(":") == 1:
        name = name.split(":", 1)[0]
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


#: ``send(method, url, headers, body) -> (status, headers, body)`` for the token endpoint.
Sender = Callable[[str, str, dict[str, str], bytes | None], tuple[int, dict[str, str], bytes]]


class Authenticator:
    """Answers a registry's 401 challenges and remembers tokens per scope."""

    def __init__(self, host: str, send: Sender, *,
                 lookup: Callable[[str], Credentials | None] = find_credentials) -> None:
        self.host = host
        self._send = send
        self._lookup = lookup
        self._creds: Credentials | None = None
        self._looked = False
        self._tokens: dict[str, tuple[str, float]] = {}  # scope -> (header value, expiry)
        self._basic = False
        self._lock = threading.Lock()

    @property
    def credentials(self) -> Credentials | None:
        if not self._looked:
            self._creds = self._lookup(self.host)
            self._looked = True
        return self._creds

    def header(self, scope: str) -> str | None:
        """The ``Authorization`` value to send for ``scope`` now, if any is known."""
        with self._lock:
            tok = self._tokens.get(scope)
            if tok and tok[1] > time.time() + 5:
                return tok[0]
            if self._basic and self.credentials is not None and self.credentials.password:
                return self.credentials.basic()
        return None

    def challenge(self, www_authenticate: str, scope: str, *, secure: bool) -> None:
        """Act on a 401: fetch a bearer token or switch to basic auth, else raise."""
        scheme, params = parse_challenge(www_authenticate or "")
        creds = self.credentials
        if scheme == "basic":
            if creds is None or not creds.password:
                raise ReconError(f"registry {self.host} wants a username and password and none "
                                 "was found (docker login, or an auths entry in ~/.docker/config.json)")
            if not secure:
                raise ReconError(f"refusing to send credentials for {self.host} over plain HTTP")
            with self._lock:
                if self._basic:
                    raise ReconError(f"registry {self.host} refused the credentials from "
                                     f"{creds.origin} (authentication failed)")
                self._basic = True
            return
        if scheme != "bearer" or not params.get("realm"):
            raise ReconError(f"registry {self.host} answered 401 with an auth scheme recon does not "
                             f"speak ({scheme or 'none'})")
        token, expires = self._fetch_token(params, scope, creds)
        with self._lock:
            self._tokens[scope] = (f"Bearer {token}", time.time() + expires)

    def _fetch_token(self, params: dict[str, str], scope: str,
                     creds: Credentials | None) -> tuple[str, float]:
        realm = params["realm"]
        parsed = urllib.parse.urlsplit(realm)
        if parsed.scheme not in ("https", "http"):
            raise ReconError(f"registry {self.host} sent a token realm that is not a URL")
        secure_realm = parsed.scheme == "https" or is_loopback(parsed.netloc)
        scopes = [s for s in (params.get("scope"), scope) if s]
        query: list[tuple[str, str]] = []
        if params.get("service"):
            query.append(("service", params["service"]))
        for s in dict.fromkeys(scopes):
            query.append(("scope", s))
        headers = {"Accept": "application/json"}
        body: bytes | None = None
        method = "GET"
        if creds is not None and (creds.password or creds.identity_token):
            if not secure_realm:
                raise ReconError(f"refusing to send credentials for {self.host} to a plain-HTTP "
                                 f"token service ({parsed.netloc})")
            if creds.identity_token:  # OAuth2 refresh-token grant, as docker does
                method = "POST"
                form = [("grant_type", "refresh_token"), ("refresh_token", creds.identity_token),
                        ("client_id", "recon"), *query]
                body = urllib.parse.urlencode(form).encode()
                headers["Content-Type"] = "application/x-www-form-urlencoded"
            else:
                headers["Authorization"] = creds.basic()
        url = realm + ("&" if "?" in realm else "?") + urllib.parse.urlencode(query) \
            if method == "GET" else realm
        status, _, data = self._send(method, url, headers, body)
        if status in (401, 403):
            who = f"the credentials from {creds.origin}" if creds else "anonymous access"
            raise ReconError(f"the token service of {self.host} refused {who} "
                             f"(HTTP {status}: authentication failed)")
        if status != 200:
            raise ReconError(f"the token service of {self.host} answered HTTP {status}")
        try:
            doc: Any = json.loads(data)
            token = doc.get("token") or doc.get("access_token")
            expires = float(doc.get("expires_in") or 60)
        except (ValueError, AttributeError, TypeError) as err:
            raise ReconError(f"the token service of {self.host} sent no valid token") from err
        if not token or not isinstance(token, str):
            raise ReconError(f"the token service of {self.host} sent no token")
        return token, max(expires, 10.0)
