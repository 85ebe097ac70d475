"""Registry auth for real: distribution 2.8 with htpasswd (basic) and with token auth.

Credentials come the way a user already has them: a Docker ``config.json``
``auths`` entry, or a credential helper named in ``credHelpers`` (a real
executable on ``PATH`` speaking the helper protocol). The token service is
:class:`tests.registrykit.TokenServer`, which signs JWTs the registry
verifies against the certificate in its config. No secret may show up in
an error message, a ``repr`` or a snapshot manifest.
"""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest

from recon.acquire.sources.auth import Credentials, find_credentials, parse_challenge
from recon.errors import ReconError
from recon.snapshots.take import take_snapshot
from tests.imagekit import SITE, LayerBuilder
from tests.registrykit import (
    Registry,
    TokenServer,
    gzip_layer,
    htpasswd_auth,
    image_manifest,
    need,
    self_signed,
    skopeo_copy,
    write_oci_layout,
)

BASIC_USER, BASIC_PW = "alice", "s3cret-basic-PW"
TOKEN_USER, TOKEN_PW = "bob", "t0ken-PW-xyz"


@pytest.fixture(autouse=True)
def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECON_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RECON_REGISTRY_INSECURE", "1")
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))  # no credentials unless a test writes some
    for var in ("REGISTRY_AUTH_FILE", "XDG_RUNTIME_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("auth-img")
    tar = (LayerBuilder(d / "l.tar").file(f"{SITE}/vllm/__init__.py", b"__version__ = '7.7.7'\n")
           .file(f"{SITE}/vllm/envs.py", b"SECRET_FREE = True\n").close())
    return write_oci_layout(d / "oci", [image_manifest(d / "oci", [gzip_layer(tar, d / "l.tgz")])])


@pytest.fixture(scope="module")
def basic(tmp_path_factory: pytest.TempPathFactory, layout: Path) -> Registry:
    need("docker-registry")
    need("htpasswd")
    need("skopeo")
    root = tmp_path_factory.mktemp("reg-basic")
    reg = Registry(root, auth=htpasswd_auth(root, {BASIC_USER: BASIC_PW})).start()
    skopeo_copy(f"oci:{layout}:latest", f"docker://{reg.host}/team/vllm:1", "--preserve-digests",
                "--dest-creds", f"{BASIC_USER}:{BASIC_PW}")
    yield reg
    reg.stop()


@pytest.fixture(scope="module")
def token(tmp_path_factory: pytest.TempPathFactory, layout: Path) -> tuple[Registry, TokenServer]:
    need("docker-registry")
    need("skopeo")
    pytest.importorskip("cryptography")
    root = tmp_path_factory.mktemp("reg-token")
    server = TokenServer(root, {TOKEN_USER: TOKEN_PW})
    reg = Registry(root, auth=server.auth_config()).start()
    for repo in ("public/vllm", "private/vllm"):
        skopeo_copy(f"oci:{layout}:latest", f"docker://{reg.host}/{repo}:1", "--preserve-digests",
                    "--dest-creds", f"{TOKEN_USER}:{TOKEN_PW}")
    yield reg, server
    reg.stop()
    server.stop()


def _docker_config(path: Path, host: str, user: str, password: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    (path / "config.json").write_text(json.dumps({"auths": {host: {"auth": auth}}}))


def _no_secret(text: str) -> None:
    for secret in (BASIC_PW, TOKEN_PW):
        assert secret not in text


def test_basic_auth_with_docker_config(basic: Registry, tmp_path: Path) -> None:
    ref = f"registry:{basic.host}/team/vllm:1"
    with pytest.raises(ReconError, match="wants a username and password and none was found"):
        take_snapshot(ref, out=tmp_path / "o")
    _docker_config(tmp_path / "docker", basic.host, BASIC_USER, "wrong-" + BASIC_PW)
    with pytest.raises(ReconError, match="authentication failed") as err:
        take_snapshot(ref, out=tmp_path / "o")
    _no_secret(str(err.value))
    assert "\n" not in str(err.value)
    assert not (tmp_path / "o").exists() or not list((tmp_path / "o").iterdir())
    _docker_config(tmp_path / "docker", f"http://{basic.host}/v2/", BASIC_USER, BASIC_PW)  # key as a URL
    snap = take_snapshot(ref, out=tmp_path / "o")
    assert snap.version == "7.7.7"
    _no_secret((snap.root / "manifest.json").read_text())


def test_credential_helper(basic: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    asked = tmp_path / "asked"
    helper = bindir / "docker-credential-recontest"
    helper.write_text(f"""#!/bin/sh
[ "$1" = get ] || exit 1
read server
printf '%s' "$server" > {asked}
printf '{{"ServerURL":"%s","Username":"{BASIC_USER}","Secret":"{BASIC_PW}"}}' "$server"
""")
    helper.chmod(helper.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    (tmp_path / "docker").mkdir()
    (tmp_path / "docker/config.json").write_text(json.dumps({"credHelpers": {basic.host: "recontest"}}))
    creds = find_credentials(basic.host)
    assert creds is not None and creds.username == BASIC_USER and creds.origin == "docker-credential-recontest"
    assert BASIC_PW not in repr(creds) and BASIC_PW not in str(creds)
    snap = take_snapshot(f"registry:{basic.host}/team/vllm:1", out=tmp_path / "o")
    assert snap.version == "7.7.7"
    assert asked.read_text() == basic.host
    # a helper that is not installed is a clear error, not an anonymous attempt
    (tmp_path / "docker/config.json").write_text(json.dumps({"credHelpers": {basic.host: "absent"}}))
    with pytest.raises(ReconError, match="docker-credential-absent .* is not on PATH"):
        take_snapshot(f"registry:{basic.host}/team/vllm:1", out=tmp_path / "p")


def test_token_auth(token: tuple[Registry, TokenServer], tmp_path: Path) -> None:
    reg, server = token
    # anonymous: a token for public/ is granted; private/ is denied
    snap = take_snapshot(f"registry:{reg.host}/public/vllm:1", out=tmp_path / "pub")
    assert snap.version == "7.7.7"
    assert any(r["user"] is None and r["ok"] for r in server.requests)
    with pytest.raises(ReconError, match="access to private/vllm denied anonymously"):
        take_snapshot(f"registry:{reg.host}/private/vllm:1", out=tmp_path / "priv")
    # the user's credentials go to the token service, which grants the private repository
    _docker_config(tmp_path / "docker", reg.host, TOKEN_USER, TOKEN_PW)
    server.requests.clear()
    snap = take_snapshot(f"registry:{reg.host}/private/vllm:1", out=tmp_path / "priv")
    assert snap.version == "7.7.7"
    assert [r["user"] for r in server.requests] == [TOKEN_USER]  # one token for the whole pull
    assert server.requests[0]["scope"] == ["repository:private/vllm:pull"]
    _no_secret((snap.root / "manifest.json").read_text())
    _docker_config(tmp_path / "docker", reg.host, TOKEN_USER, "nope")
    with pytest.raises(ReconError, match="refused the credentials from .*config.json .*authentication failed") as err:
        take_snapshot(f"registry:{reg.host}/private/vllm:1", out=tmp_path / "again")
    _no_secret(str(err.value))


def test_https_is_the_default(tmp_path_factory: pytest.TempPathFactory, layout: Path, tmp_path: Path,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A registry serving TLS with basic auth: verified against the CA the user trusts, or refused."""
    need("docker-registry")
    need("skopeo")
    pytest.importorskip("cryptography")
    root = tmp_path_factory.mktemp("reg-tls")
    cert, key = self_signed(root)
    reg = Registry(root, tls=(cert, key), auth=htpasswd_auth(root, {BASIC_USER: BASIC_PW})).start()
    try:
        skopeo_copy(f"oci:{layout}:latest", f"docker://{reg.host}/team/vllm:1", "--preserve-digests",
                    "--dest-creds", f"{BASIC_USER}:{BASIC_PW}")
        monkeypatch.delenv("RECON_REGISTRY_INSECURE")
        _docker_config(tmp_path / "docker", reg.host, BASIC_USER, BASIC_PW)
        ref = f"registry:{reg.host}/team/vllm:1"
        with pytest.raises(ReconError, match=r"TLS with 127\.0\.0\.1:\d+ failed \(CERTIFICATE_VERIFY_FAILED"):
            take_snapshot(ref, out=tmp_path / "o")
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the user's trust store names this CA
        snap = take_snapshot(ref, out=tmp_path / "o")
        assert snap.version == "7.7.7"
        # --insecure means plain HTTP; a TLS-only registry then fails clearly
        monkeypatch.setenv("RECON_REGISTRY_INSECURE", "1")
        with pytest.raises(ReconError, match=f"{reg.host}"):
            take_snapshot(ref, out=tmp_path / "p")
    finally:
        reg.stop()


def test_challenge_parsing_and_masking() -> None:
    scheme, params = parse_challenge(
        'Bearer realm="https://auth.example/token",service="reg.example",scope="repository:a/b:pull,push"')
    assert scheme == "bearer"
    assert params == {"realm": "https://auth.example/token", "service": "reg.example",
                      "scope": "repository:a/b:pull,push"}
    assert parse_challenge('Basic realm="x"') == ("basic", {"realm": "x"})
    c = Credentials("u", "p4ss", origin="f")
    assert "p4ss" not in repr(c) and "p4ss" not in f"{c}"
