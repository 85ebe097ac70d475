"""Independent hostile-input corpus for issue 14 (containment).

Written from README.md, docs/guide.md, `recon --help` and issue 14 only; it never reads recon's code or
its other tests.  Every case builds a hostile or broken input with the stdlib (+ zstandard), plants
canaries in a per-case "host" folder that links and paths in the input aim at, runs the real CLI in a
subprocess (4 GiB address-space limit, 60 s timeout) and checks:

(a) exit 0 or a documented non-zero status, never a traceback;
(b) on failure one readable error line ("recon: ..." / "error ...") and at most a few warnings;
(c) the host canaries are byte-identical, still present, and nothing new appeared next to them
    (nor in the case folder, the working folder, /tmp or $HOME);
(d) on failure nothing is left in the out folder (no manifest.json, no files);
(e) on success every entry under the out folder is a folder, a regular file or a symlink recorded as such
    in the manifest, no symlink resolves outside the out folder, and no host bytes were copied in;
(f) bounded time and memory.

`recon run` of untrusted code gets its own smaller corpus at the end.
(MARKER: this line proves the work tree was read)
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import os
import resource
import secrets
import shutil
import socket
import stat
import struct
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostile_gen as hg  # noqa: E402
from hostile_gen import PKG, SITE, E, Image  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 60
MEM = 4 << 30
OK_CODES = {0, 1, 2, 3, 4}  # guide: 2 bad input, 4 code under test; 3 seen for hostile archives


# --------------------------------------------------------------------------- harness

@dataclass
class Ctx:
    root: Path
    token: str

    @property
    def host(self) -> Path:
        return self.root / "host"

    @property
    def inp(self) -> Path:
        return self.root / "in"

    @property
    def out(self) -> Path:
        return self.root / "out"

    @property
    def cwd(self) -> Path:
        return self.root / "cwd"

    @property
    def H(self) -> str:  # host folder, absolute
        return str(self.host)

    @property
    def up(self) -> str:  # the host folder reached from anywhere by ../ (no leading slash)
        return "../" * 40 + str(self.host)[1:]

    @property
    def evil_tmp(self) -> str:
        return f"/tmp/recon_evil_{self.token}"


@dataclass
class Case:
    id: str
    cls: str
    build: Callable[[Ctx], dict]
    expect: str = "any"  # fail | ok | any
    check: Callable[[Ctx, Path], None] | None = None


CASES: list[Case] = []


def case(cls: str, cid: str, expect: str = "any", check=None):
    def deco(fn):
        CASES.append(Case(f"{cls}-{cid}", cls, fn, expect, check))
        return fn
    return deco


def add(cls: str, cid: str, build, expect: str = "any", check=None) -> None:
    CASES.append(Case(f"{cls}-{cid}", cls, build, expect, check))


def plant_host(c: Ctx) -> None:
    h = c.host
    (h / "sub").mkdir(parents=True)
    (h / "emptydir").mkdir()
    (h / "canary.txt").write_text(f"canary {c.token}\n")
    (h / "secret.txt").write_text(f"secret {c.token}\n")
    (h / "sub" / "deep.txt").write_text(f"deep {c.token}\n")
    for d in (h / PKG, h / "pkgdir" / PKG):
        d.mkdir(parents=True)
        (d / "__init__.py").write_text(f"HOST = '{c.token}'\n")
        (d / "mod.py").write_text(f"def f():\n    return '{c.token}'\n")
    (h / "link_to_sub").symlink_to("sub")
    # a valid layer and config on the host: an input that manages to read them shows the token
    layer = hg.tar_bytes(hg.pkg_entries([E(f"{SITE}/{PKG}/host.py", data=f"T = '{c.token}'\n".encode())]))
    (h / "layer.tar").write_bytes(layer)
    (h / "config.json").write_bytes(json.dumps(hg.image_config([hg.sha(layer)])).encode())
    (h / "manifest.json").write_bytes(json.dumps(
        [{"Config": "config.json", "RepoTags": ["h:1"], "Layers": ["layer.tar"]}]).encode())


def tree_state(p: Path) -> dict:
    st: dict = {}
    if not os.path.lexists(p):
        return st
    for dirpath, dirnames, filenames in os.walk(p, followlinks=False):
        for n in dirnames + filenames:
            full = os.path.join(dirpath, n)
            rel = os.path.relpath(full, p)
            s = os.lstat(full)
            if stat.S_ISLNK(s.st_mode):
                st[rel] = ("link", os.readlink(full))
            elif stat.S_ISDIR(s.st_mode):
                st[rel] = ("dir", stat.S_IMODE(s.st_mode))
            elif stat.S_ISREG(s.st_mode):
                with open(full, "rb") as f:
                    st[rel] = ("file", hashlib.sha256(f.read()).hexdigest(), stat.S_IMODE(s.st_mode), s.st_nlink)
            else:
                st[rel] = ("other", s.st_mode)
    return st


def diff_state(before: dict, after: dict) -> list[str]:
    out = []
    for k in sorted(set(before) | set(after)):
        if k not in after:
            out.append(f"removed {k}")
        elif k not in before:
            out.append(f"new {k} {after[k][0]}")
        elif before[k] != after[k]:
            out.append(f"changed {k}: {before[k]} -> {after[k]}")
    return out


def limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEM, MEM))
    os.setsid()


def log_result(cid: str, rc, se: str, problems: list[str]) -> None:
    """RECON_HOSTILE_LOG=FILE: one JSON line per case (for reports)."""
    path = os.environ.get("RECON_HOSTILE_LOG")
    if path:
        lines = [ln for ln in se.splitlines() if ln.strip()]
        with open(path, "a") as f:
            f.write(json.dumps({"id": cid, "rc": rc, "stderr": lines[:3], "problems": problems}) + "\n")


def run_cli(args: list[str], cwd: Path, env: dict, timeout: int = TIMEOUT, wrap: list[str] | None = None,
            extra_limit=None) -> tuple[int | None, str, str, float]:
    def pre():
        limits()
        if extra_limit:
            extra_limit()
    cmd = list(wrap or []) + [sys.executable, "-c", "import sys; from recon.cli import main; sys.exit(main())"] + args
    t = time.monotonic()
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=pre)
    try:
        out, err = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        out, err = p.communicate()
        rc = None
    return rc, out.decode(errors="replace"), err.decode(errors="replace"), time.monotonic() - t


def base_env(c: Ctx) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECON")}
    env["RECON_CACHE"] = str(c.root / "cache")
    env["PYTHONPATH"] = str(REPO)
    env["COLUMNS"] = "200"
    env["HOME"] = os.environ.get("HOME", "/root")
    env["RECON_HOSTILE_SECRET"] = f"envsecret{c.token}"
    return env


def check_error_output(rc, err: str, problems: list[str]) -> None:
    if "Traceback (most recent call last)" in err:
        tb = [ln for ln in err.splitlines() if ln.strip()]
        problems.append("traceback on stderr: " + " | ".join(tb[-3:])[:600])
        return
    if rc == 0:
        return
    lines = [ln for ln in err.splitlines() if ln.strip()]
    errs = [ln for ln in lines if ln.startswith("recon:") or ln.lower().startswith("error")]
    if not errs:
        problems.append(f"no one-line error on stderr (rc={rc}): {' | '.join(lines[-3:])[:400]!r}")
    elif len(lines) > 5:
        problems.append(f"stderr has {len(lines)} lines: {' | '.join(lines[:3])[:400]}")


def snapshot_checks(c: Ctx, out: Path, problems: list[str], before: dict | None = None) -> None:
    """(e): on success everything under out is contained, recorded, and holds no host bytes.

    Entries planted by the test before the run (`before`, a tree_state) and left as they were are skipped."""
    tok = c.token.encode()
    outr = os.path.realpath(out)
    before = before or {}
    for dirpath, dirnames, filenames in os.walk(out, followlinks=False):
        for n in dirnames + filenames:
            full = os.path.join(dirpath, n)
            if os.path.relpath(full, out) in before:
                continue
            s = os.lstat(full)
            if stat.S_ISLNK(s.st_mode):
                real = os.path.realpath(full)
                if os.path.commonpath([real, outr]) != outr:
                    ex = "exists on host" if os.path.exists(real) else "dangling"
                    problems.append(f"symlink in snapshot resolves outside: {os.path.relpath(full, out)} -> "
                                    f"{os.readlink(full)[:120]} ({ex})")
            elif stat.S_ISREG(s.st_mode):
                if s.st_size < (64 << 20):
                    with open(full, "rb") as f:
                        if tok in f.read():
                            problems.append(f"host bytes copied into snapshot: {os.path.relpath(full, out)}")
            elif not stat.S_ISDIR(s.st_mode):
                problems.append(f"special file in snapshot: {os.path.relpath(full, out)} mode {oct(s.st_mode)}")
    # every file under <snap>/src recorded with its kind
    for man in Path(out).rglob("manifest.json"):
        snap = man.parent
        try:
            files = json.loads(man.read_text()).get("files", {})
        except Exception as e:  # noqa: BLE001
            problems.append(f"manifest unreadable: {e}")
            continue
        for key in files:
            parts = key.split("/")
            if key.startswith("/") or ".." in parts or "" in parts:
                problems.append(f"manifest file key is not a clean relative path: {key[:200]!r}")
        src = snap / "src"
        if not src.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(src, followlinks=False):
            for n in dirnames + filenames:
                full = Path(dirpath) / n
                rel = full.relative_to(src).as_posix()
                s = os.lstat(full)
                if stat.S_ISDIR(s.st_mode):
                    continue
                rec = files.get(rel)
                if rec is None:
                    problems.append(f"file not in manifest: {rel[:200]}")
                    continue
                if stat.S_ISLNK(s.st_mode):
                    if rec.get("kind") != "symlink" or rec.get("target") != os.readlink(full):
                        problems.append(f"symlink not recorded as such: {rel[:200]} {rec}")
                elif (stat.S_ISREG(s.st_mode) and rec.get("sha256") and s.st_size < (64 << 20)
                      and hashlib.sha256(full.read_bytes()).hexdigest() != rec["sha256"]):
                        problems.append(f"file bytes differ from manifest: {rel[:200]}")


def leftover(out: Path) -> list[str]:
    """(d): after a failure, no folder that looks complete and no half-written snapshot or staging folder.

    Hidden empty files at the top (locks) are tolerated."""
    bad = []
    if not os.path.isdir(out) or os.path.islink(out):
        return bad
    for top in os.listdir(out):
        full = os.path.join(out, top)
        if os.path.islink(full):
            bad.append(f"{top} (symlink)")
            continue
        if not os.path.isdir(full):
            if not (top.startswith(".") and os.path.getsize(full) == 0):
                bad.append(top)
            continue
        for dirpath, dirnames, filenames in os.walk(full, followlinks=False):
            for n in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
                rel = os.path.relpath(os.path.join(dirpath, n), out)
                bad.append(rel + (" (looks complete)" if n == "manifest.json" else ""))
    return bad


def snap_dir(c: Ctx) -> Path:
    return c.out / "n"


def fresh_ctx(tmp_path: Path) -> Ctx:
    c = Ctx(tmp_path, secrets.token_hex(8))
    plant_host(c)
    c.inp.mkdir()
    c.cwd.mkdir()
    return c


def run_case(cs: Case, tmp_path: Path) -> None:
    c = fresh_ctx(tmp_path)
    spec = cs.build(c)
    src = spec["src"]
    out = Path(spec.get("out", c.out))
    args = ["snapshot", src, "--package", spec.get("package", PKG), "--out", str(out)]
    if not spec.get("loud"):
        args.append("--quiet")
    if not spec.get("noname"):
        args += ["--name", spec.get("name", "n")]
    args += spec.get("args", [])
    host_before = tree_state(c.host)
    inp_before = tree_state(c.inp)
    out_before = tree_state(out)
    top_before = set(os.listdir(c.root))
    home = Path(os.environ.get("HOME", "/root"))
    home_before = set(os.listdir(home))
    rc, so, se, dt = run_cli(args, c.cwd, base_env(c), wrap=spec.get("wrap"), extra_limit=spec.get("limit"))
    problems: list[str] = []
    if rc is None:
        problems.append(f"hang: no exit within {TIMEOUT}s")
    elif rc < 0:
        problems.append(f"killed by signal {-rc} (memory/time bound?)")
    elif rc not in OK_CODES:
        problems.append(f"undocumented exit status {rc}")
    check_error_output(rc, se, problems)
    if cs.expect == "fail" and rc == 0:
        problems.append("accepted (exit 0) but the docs say this input stops with one line")
    if cs.expect == "ok" and rc != 0:
        problems.append(f"refused a legitimate input (rc={rc})")
    # (c) host unchanged
    problems += [f"HOST CHANGED: {d}" for d in diff_state(host_before, tree_state(c.host))]
    problems += [f"input changed: {d}" for d in diff_state(inp_before, tree_state(c.inp))]
    new_top = set(os.listdir(c.root)) - top_before - {"out", "cache"}
    if new_top:
        problems.append(f"HOST CHANGED: new entries next to the canaries: {sorted(new_top)}")
    if os.listdir(c.cwd):
        problems.append(f"HOST CHANGED: files in the working folder: {os.listdir(c.cwd)[:5]}")
    for p in (c.evil_tmp, f"/recon_evil_{c.token}"):
        if os.path.lexists(p):
            problems.append(f"HOST CHANGED: {p} created")
            shutil.rmtree(p, ignore_errors=True) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)
    new_home = {n for n in set(os.listdir(home)) - home_before if c.token in n}
    if new_home:
        problems.append(f"HOST CHANGED: new in $HOME: {sorted(new_home)}")
    for extra in spec.get("watch", []):
        if os.path.lexists(extra):
            problems.append(f"HOST CHANGED: {extra} created")
    if rc is not None and rc != 0:
        # (d) nothing half-written left
        real_out = out
        left = leftover(real_out) if not spec.get("skip_leftover") else []
        if left:
            problems.append(f"left behind in out after failure: {left[:4]}")
    elif rc == 0:
        snapshot_checks(c, out, problems, out_before)
        if cs.check:
            try:
                cs.check(c, out)
            except AssertionError as e:
                problems.append(f"functional check: {e}")
    if spec.get("post"):
        problems += spec["post"](c, rc, so, se)
    if rc == 0 and spec.get("followup"):
        for fargs in spec["followup"](c):
            frc, fso, fse, _ = run_cli(fargs, c.cwd, base_env(c))
            check_error_output(frc, fse, problems)
            if c.token in fso + fse:
                problems.append(f"`recon {fargs[0]}` on the snapshot read a host file through a kept link "
                                f"(token printed; rc={frc})")
            problems += [f"HOST CHANGED after `recon {fargs[0]}`: {d}"
                         for d in diff_state(host_before, tree_state(c.host))]
    log_result(cs.id, rc, se, problems)
    first = " | ".join([ln for ln in se.splitlines() if ln.strip()][:2])[:300]
    summary = f"rc={rc} t={dt:.1f}s stderr: {first!r}"
    assert not problems, summary + "\n  - " + "\n  - ".join(problems)


# --------------------------------------------------------------------------- sources

def img(c: Ctx, layers: list[bytes], kind: str = "da", **kw) -> str:
    compress = {"oci": "gzip", "ociz": "zstd", "ocin": "none", "ocia": "gzip"}.get(kind, "gzip")
    im = Image(layers=layers, compress=compress, **kw)
    if kind == "da":
        return hg.docker_archive(str(c.inp / "img.tar"), im)
    if kind == "dad":
        return hg.docker_archive(str(c.inp / "imgdir"), im, as_dir=True)
    if kind in ("oci", "ociz", "ocin"):
        return hg.oci_layout(str(c.inp / "oci"), im)
    if kind == "ocia":
        return hg.oci_archive(str(c.inp / "img.oci.tar"), im)
    raise ValueError(kind)


def layer(extra: list[E], dirs: bool = True, fmt=tarfile.PAX_FORMAT) -> bytes:
    return hg.tar_bytes(hg.pkg_entries(extra, dirs=dirs), fmt=fmt)


def site_dirs() -> list[E]:
    parts = SITE.split("/")
    return [E("/".join(parts[:i]) + "/", "dir") for i in range(1, len(parts) + 1)]


def P(rest: str) -> str:
    return f"{SITE}/{PKG}/{rest}"


def wheel_path(c: Ctx) -> Path:
    return c.inp / f"{PKG}-1.0-py3-none-any.whl"


def wheel(c: Ctx, raw: bytes) -> str:
    wp = wheel_path(c)
    wp.write_bytes(raw)
    return "wheel:" + str(wp)


def has_file(rel: str, content: bytes | None = None):
    def chk(c: Ctx, out: Path) -> None:
        p = snap_dir(c) / "src" / rel
        assert p.is_file(), f"{rel} missing from the snapshot"
        if content is not None:
            assert p.read_bytes() == content, f"{rel} has the wrong bytes"
    return chk


def lacks_file(rel: str):
    def chk(c: Ctx, out: Path) -> None:
        assert not os.path.lexists(snap_dir(c) / "src" / rel), f"{rel} should be gone"
    return chk


CONTAINERS = ["da", "dad", "oci", "ociz", "ocia"]

# ============================================================================ T: path traversal
TRAV = {
    "dotdot": lambda c: "../evil.py",
    "up-to-host": lambda c: c.up + "/evil.txt",
    "absolute": lambda c: c.H + "/abs_evil.txt",
    "dot-dotdot": lambda c: "./../evil2.py",
    "pkg-then-up": lambda c: P("../" * 45 + c.H[1:] + "/evil3.txt"),
    "pkg-up-tmp": lambda c: P("../" * 12 + f"tmp/recon_evil_{c.token}"),
    "dir-up-to-host": lambda c: c.up + "/newdir/",
    "pkg-zigzag": lambda c: P("../pkg/" + "../" * 40 + c.H[1:] + "/evil4.py"),
}
for tname, fn in TRAV.items():
    kinds = CONTAINERS if tname in ("dotdot", "up-to-host", "absolute") else ["da", "oci"]
    for k in kinds:
        def b(c, fn=fn, k=k):
            n = fn(c)
            return {"src": img(c, [layer([E(n, "dir" if n.endswith("/") else "file", b"x = 1\n")])], k)}
        add("traversal", f"{tname}-{k}", b, "fail")


def _trav_nested(k):
    def b(c):
        mid = hg.tar_bytes([E(c.up + "/nested_evil.txt", data=b"x")])
        top = hg.tar_bytes([E(P("top.py"), data=b"t = 1\n")])
        return {"src": img(c, [hg.base_layer(), mid, top], k)}
    return b


for k in ("da", "oci", "ociz"):
    add("traversal", f"nested-layer2-{k}", _trav_nested(k), "fail")
add("traversal", "gnu-longlink-up", lambda c: {"src": img(c, [layer(
    [E(c.up + "/" + "x" * 90 + "/long_evil.txt", data=b"x")], fmt=tarfile.GNU_FORMAT)])}, "fail")
add("traversal", "hardlink-name-up", lambda c: {"src": img(c, [layer(
    [E(c.up + "/hl_evil.txt", "hard", link=P("mod.py"))])])}, "fail")
add("traversal", "symlink-name-up", lambda c: {"src": img(c, [layer(
    [E(c.up + "/sl_evil", "sym", link="/etc/passwd")])])}, "fail")
add("traversal", "backslash-name", lambda c: {"src": img(c, [layer(
    [E(P("..\\..\\..\\bs.py"), data=b"x = 1\n")])])}, "any")

# ============================================================================ S: symlink escapes


def sym_case(extra_fn, kinds=("da",), expect="any", env_fn=None, layers_fn=None):
    def make(k):
        def b(c):
            layers = layers_fn(c) if layers_fn else [layer(extra_fn(c))]
            env = env_fn(c) if env_fn else None
            return {"src": img(c, layers, k, env=env)}
        return b
    return {k: make(k) for k in kinds}


SYM = {
    "abs-dir-then-file": (lambda c: [E(P("link"), "sym", link=c.H), E(P("link/x.py"), data=b"x=1\n")],
                          ("da", "dad", "oci", "ociz")),
    "rel-up-dir-then-file": (lambda c: [E(P("link"), "sym", link="../../../../../../../../../../" + c.H[1:]),
                                        E(P("link/x.py"), data=b"x=1\n")], ("da", "oci")),
    "chain-then-file": (lambda c: [E(P("a"), "sym", link="b"), E(P("b"), "sym", link="c"),
                                   E(P("c"), "sym", link=c.H), E(P("a/x.py"), data=b"x=1\n")], ("da", "oci")),
    "abs-file-link": (lambda c: [E(P("data.py"), "sym", link=c.H + "/canary.txt")], ("da",)),
    "root-link": (lambda c: [E(P("root"), "sym", link="/")], ("da",)),
    "up-link-then-deep-file": (lambda c: [E(P("up"), "sym", link="../" * 12),
                                          E(P("up/" + c.H[1:] + "/up_evil.txt"), data=b"x")], ("da",)),
    "link-then-dir": (lambda c: [E(P("l"), "sym", link=c.H), E(P("l/newdir/"), "dir")], ("da",)),
    "link-then-hardlink": (lambda c: [E(P("l"), "sym", link=c.H), E(P("l/hl.txt"), "hard", link=P("mod.py"))],
                           ("da",)),
    "link-then-symlink": (lambda c: [E(P("l"), "sym", link=c.H), E(P("l/sl"), "sym", link="/etc/passwd")], ("da",)),
    "loop": (lambda c: [E(P("a"), "sym", link="b"), E(P("b"), "sym", link="a"), E(P("a/x.py"), data=b"1")], ("da",)),
    "empty-target": (lambda c: [E(P("empty"), "sym", link="")], ("da", "oci")),
    "long-target": (lambda c: [E(P("longt"), "sym", link="a/" * 40000)], ("da",)),
}
for sname, (fn, kinds) in SYM.items():
    for k, b in sym_case(fn, kinds).items():
        add("symlink", f"{sname}-{k}", b)


def _pkg_is_link(rel: bool):
    def lay(c):
        tgt = ("../" * 12 + c.H[1:] + "/" + PKG) if rel else c.H + "/" + PKG
        return [hg.tar_bytes(site_dirs() + [E(f"{SITE}/{PKG}", "sym", link=tgt)])]
    return lay


for rel in (False, True):
    for k in ("da", "oci"):
        add("symlink", f"pkg-root-is-link-{'rel' if rel else 'abs'}-{k}",
            sym_case(None, (k,), layers_fn=_pkg_is_link(rel))[k])


def _issue_case(version: str | None):
    def lay(c):
        low = hg.base_layer()
        ents = [E(P(f"link/{PKG}/__init__.py"), data=b"A = 1\n"), E(P("link"), "sym", link=c.H + "/pkgdir")]
        if version is not None:
            ents.append(E(f"{SITE}/{PKG}-1.0.dist-info/METADATA",
                          data=f"Metadata-Version: 2.1\nName: {PKG}\nVersion: {version}\n\n".encode()))
        return [low, hg.tar_bytes(ents)]
    return lay


for k in ("da", "oci", "ociz"):
    add("symlink", f"issue-pythonpath-through-link-{k}",
        sym_case(None, (k,), layers_fn=_issue_case(None), env_fn=lambda c: [f"PYTHONPATH=/{SITE}/{PKG}/link"])[k])


def _issue_badver(c):
    return {"src": img(c, _issue_case("9" * 300)(c), "da", env=[f"PYTHONPATH=/{SITE}/{PKG}/link"]), "noname": True}


add("symlink", "issue-pythonpath-link-300char-version-noname", _issue_badver)


def _pp_link(with_pkg: bool):
    def lay(c):
        ents = [E("opt/", "dir"), E("opt/hostlink", "sym", link=c.H + "/pkgdir")]
        base = hg.pkg_entries() if with_pkg else []
        return [hg.tar_bytes(base + ents)]
    return lay


for wp in (False, True):
    add("symlink", f"pythonpath-abs-link-to-host{'-and-site-pkg' if wp else ''}",
        sym_case(None, ("da",), layers_fn=_pp_link(wp), env_fn=lambda c: ["PYTHONPATH=/opt/hostlink"])["da"])
add("symlink", "pythonpath-self-loop", sym_case(lambda c: [E(P("self"), "sym", link="self")], ("da",),
                                                 env_fn=lambda c: [f"PYTHONPATH=/{SITE}/{PKG}/self"])["da"])
add("symlink", "site-is-link-then-files", sym_case(None, ("da",), layers_fn=lambda c: [
    hg.tar_bytes([E("usr/", "dir"), E("usr/local/", "dir"), E("usr/local/lib/", "dir"),
                  E("usr/local/lib/python3.11/", "dir"), E(SITE, "sym", link=c.H)]),
    hg.tar_bytes([E(P("__init__.py"), data=b"x=1\n")])])["da"])
add("symlink", "usr-local-is-link-same-layer", sym_case(None, ("da", "oci"), layers_fn=lambda c: [
    hg.tar_bytes([E("usr/", "dir"), E("usr/local", "sym", link=c.H)] + hg.pkg_entries(dirs=False))])["da"])
add("symlink", "link-lower-file-upper", sym_case(None, ("da",), layers_fn=lambda c: [
    layer([E(P("sub"), "sym", link=c.H)]), hg.tar_bytes([E(P("sub/upper_evil.py"), data=b"x=1\n")])])["da"])
add("symlink", "link-lower-file-upper-oci", sym_case(None, ("oci",), layers_fn=lambda c: [
    layer([E(P("sub"), "sym", link=c.H)]), hg.tar_bytes([E(P("sub/upper_evil.py"), data=b"x=1\n")])])["oci"])

# ============================================================================ D: duplicate names, kinds in every order


def _dup(order, target_fn, name_fn, kinds=("da",)):
    def make(k):
        def b(c):
            name = name_fn()
            ents = site_dirs() + [E(P("__init__.py"), data=b"x=1\n"), E(P("mod.py"), data=b"y=2\n")]
            for kind in order:
                if kind == "file":
                    ents.append(E(name, data=b"FILE = 1\n"))
                elif kind == "dir":
                    ents.append(E(name + "/", "dir"))
                else:
                    ents.append(E(name, "sym", link=target_fn(c)))
            return {"src": img(c, [hg.tar_bytes(ents)], k)}
        return b
    return make


for order in itertools.permutations(["file", "dir", "sym"]):
    for k in ("da", "oci"):
        add("duplicate", f"pkgroot-{'-'.join(order)}-{k}",
            _dup(order, lambda c: c.H + "/" + PKG, lambda: f"{SITE}/{PKG}")(k))
for order in [("file", "sym"), ("sym", "file"), ("dir", "sym"), ("sym", "dir"), ("file", "dir"), ("dir", "file"),
              ("sym", "sym")]:
    add("duplicate", f"inside-{'-'.join(order)}", _dup(order, lambda c: c.H, lambda: P("sub"))("da"))


def _dup_cross(c):
    low = hg.tar_bytes(site_dirs() + [E(f"{SITE}/{PKG}", "sym", link=c.H + "/" + PKG)])
    up = hg.tar_bytes(hg.pkg_entries(dirs=False))
    return {"src": img(c, [low, up], "da")}


add("duplicate", "lower-link-upper-dir", _dup_cross)


def _dup_cross2(c):
    low = hg.base_layer()
    up = hg.tar_bytes([E(f"{SITE}/{PKG}", "sym", link=c.H + "/" + PKG), E(P("late.py"), data=b"z=1\n")])
    return {"src": img(c, [low, up], "da")}


add("duplicate", "lower-dir-upper-link-then-file", _dup_cross2)

# ============================================================================ H: hardlinks
HARD = {
    "abs-host": (lambda c: [E(P("hl.py"), "hard", link=c.H + "/canary.txt")], ("da", "oci"), "any"),
    "up-host": (lambda c: [E(P("hl.py"), "hard", link=c.up + "/canary.txt")], ("da", "oci"), "any"),
    "missing-target": (lambda c: [E(P("hl.py"), "hard", link=P("missing.py"))], ("da",), "any"),
    "to-symlink-to-host": (lambda c: [E(P("l"), "sym", link=c.H + "/canary.txt"), E(P("h.py"), "hard", link=P("l"))],
                           ("da",), "any"),
    "to-directory": (lambda c: [E(P("hd"), "hard", link=f"{SITE}/{PKG}")], ("da",), "any"),
    "to-itself": (lambda c: [E(P("self.py"), "hard", link=P("self.py"))], ("da",), "any"),
    "forward-ref": (lambda c: [E(P("fw.py"), "hard", link=P("later.py")), E(P("later.py"), data=b"l=1\n")],
                    ("da",), "any"),
    "through-symlinked-dir": (lambda c: [E(P("l"), "sym", link=c.H), E(P("h.py"), "hard", link=P("l/canary.txt"))],
                              ("da", "oci"), "any"),
    "dotdot-target": (lambda c: [E(P("h2.py"), "hard", link=P("../" * 12 + c.H[1:] + "/canary.txt"))], ("da",),
                      "any"),
    "empty-target": (lambda c: [E(P("h3.py"), "hard", link="")], ("da",), "any"),
}
for hname, (fn, kinds, ex) in HARD.items():
    for k in kinds:
        add("hardlink", f"{hname}-{k}", lambda c, fn=fn, k=k: {"src": img(c, [layer(fn(c))], k)}, ex)


def _hl_whited_upper(c):
    low = layer([E(P("old.py"), data=b"OLD = 1\n"), E(P("hl.py"), "hard", link=P("old.py"))])
    up = hg.tar_bytes([E(P(".wh.old.py"))])
    return {"src": img(c, [low, up], "da")}


add("hardlink", "target-whited-out-by-upper", _hl_whited_upper, "ok",
    lambda c, o: (has_file(f"{PKG}/hl.py", b"OLD = 1\n")(c, o), lacks_file(f"{PKG}/old.py")(c, o)))


def _hl_whited_same(c):
    low = layer([E(P("old.py"), data=b"OLD = 1\n")])
    up = hg.tar_bytes([E(P(".wh.old.py")), E(P("hl.py"), "hard", link=P("old.py"))])
    return {"src": img(c, [low, up], "da")}


add("hardlink", "to-whited-out-in-same-layer", _hl_whited_same)

# ============================================================================ W: whiteouts


def wh_case(up_fn, low_fn=None, env_fn=None, k="da"):
    def b(c):
        low = low_fn(c) if low_fn else hg.base_layer()
        return {"src": img(c, [low, hg.tar_bytes(up_fn(c))], k, env=env_fn(c) if env_fn else None)}
    return b


for k in ("da", "oci"):
    add("whiteout", f"up-to-host-{k}", wh_case(lambda c: [E(c.up + "/.wh.canary.txt")], k=k))
    add("whiteout", f"through-link-{k}", wh_case(lambda c: [E(P("l/.wh.canary.txt")), E(P("l/.wh..wh..opq"))],
                                                 low_fn=lambda c: layer([E(P("l"), "sym", link=c.H)]), k=k))
add("whiteout", "absolute-host", wh_case(lambda c: [E(c.H + "/.wh.canary.txt"), E(c.H + "/sub/.wh..wh..opq")]))
add("whiteout", "opaque-up-to-host", wh_case(lambda c: [E(c.up + "/sub/.wh..wh..opq")]))
add("whiteout", "pkg-root-whited-out", wh_case(lambda c: [E(f"{SITE}/.wh.{PKG}")]), "fail")
add("whiteout", "pkg-opaque-upper", wh_case(lambda c: [E(P(".wh..wh..opq")), E(P("__init__.py"), data=b"NEW=1\n")]),
    "ok", lambda c, o: (has_file(f"{PKG}/__init__.py", b"NEW=1\n")(c, o), lacks_file(f"{PKG}/mod.py")(c, o)))
add("whiteout", "root-opaque", wh_case(lambda c: [E(".wh..wh..opq")]), "fail")
add("whiteout", "whiteout-dotdot-name", wh_case(lambda c: [E(P(".wh.."))]))
add("whiteout", "whiteout-dotdotdot", wh_case(lambda c: [E(P(".wh..."))]))
add("whiteout", "whiteout-empty-name", wh_case(lambda c: [E(P(".wh."))]))
add("whiteout", "whiteout-as-symlink", wh_case(lambda c: [E(P(".wh.mod.py"), "sym", link=c.H + "/canary.txt")]))
add("whiteout", "whiteout-as-dir-with-child", wh_case(lambda c: [E(P(".wh.mod.py/"), "dir"),
                                                                 E(P(".wh.mod.py/x"), data=b"x")]))
add("whiteout", "whiteout-in-lowest-layer", lambda c: {"src": img(c, [
    hg.tar_bytes([E(c.up + "/.wh.secret.txt")] + hg.pkg_entries())], "da")})
add("whiteout", "opaque-through-pythonpath-link", wh_case(
    lambda c: [E("opt/l/.wh..wh..opq"), E("opt/l/.wh.canary.txt")],
    low_fn=lambda c: hg.tar_bytes(hg.pkg_entries() + [E("opt/", "dir"), E("opt/l", "sym", link=c.H)]),
    env_fn=lambda c: ["PYTHONPATH=/opt/l"]))
add("whiteout", "same-layer-opaque-after-files", lambda c: {"src": img(c, [
    hg.tar_bytes(hg.pkg_entries() + [E(P(".wh..wh..opq"))])], "da")}, "any")
add("whiteout", "whiteout-then-hostlink-same-name", wh_case(
    lambda c: [E(P(".wh.mod.py")), E(P("mod.py"), "sym", link=c.H + "/canary.txt")]))

# ============================================================================ X: special entries
SPECIAL = {
    "fifo-in-pkg": ([E(P("fifo"), "fifo")], "any"),
    "chr-in-pkg": ([E(P("null.py"), "chr")], "fail"),
    "blk-in-pkg": ([E(P("blk"), "blk")], "fail"),
    "chr-outside": ([E("dev/", "dir"), E("dev/evil", "chr")], "any"),
    "fifo-outside": ([E("tmp/", "dir"), E("tmp/f", "fifo")], "any"),
    "contiguous-in-pkg": ([E(P("cont.py"), "cont", b"c=1\n")], "any"),
    "unknown-type-Z": ([E(P("z.py"), "Z", b"z=1\n")], "any"),
    "gnu-sparse-S": ([E(P("s.py"), "S", b"s=1\n")], "any"),
    "gnu-volume-V": ([E("vol", "V", b"")], "any"),
    "chr-named-pkg-root": (None, "any"),
}
for xname, (ents, ex) in SPECIAL.items():
    if ents is None:
        def b(c):
            return {"src": img(c, [hg.tar_bytes(site_dirs() + [E(f"{SITE}/{PKG}", "chr")])], "da")}
    else:
        def b(c, ents=ents):
            return {"src": img(c, [layer(ents)], "da")}
    add("special", xname, b, ex)


def _global_pax(c):
    g = E("pax_global_header", "g", hg_pax({"path": c.up + "/g_evil.txt"}))
    return {"src": img(c, [hg.tar_bytes([g] + hg.pkg_entries(), fmt=tarfile.USTAR_FORMAT)], "da")}


def hg_pax(recs: dict) -> bytes:
    out = b""
    for k, v in recs.items():
        v = v.encode() if isinstance(v, str) else v
        body = b" " + k.encode() + b"=" + v + b"\n"
        n = len(body) + 1
        while len(str(n)) + len(body) != n:
            n = len(str(n)) + len(body)
        out += str(n).encode() + body
    return out


add("special", "global-pax-path-up", _global_pax)

# ============================================================================ Z: huge sizes in headers


def _patched(c, name, off, val, k="da", fix=True, extra=None):
    raw = layer(extra or [])
    raw = patch_by_name(raw, name, off, val, fix)
    return {"src": img(c, [raw], k)}


def patch_by_name(raw: bytes, name: str, off: int, val: bytes, fix: bool = True) -> bytes:
    b = bytearray(raw)
    for pos in hg.header_offsets(raw):
        if b[pos:pos + 100].rstrip(b"\0").decode(errors="replace") == name:
            b[pos + off:pos + off + len(val)] = val
            if fix:
                blk = b[pos:pos + 512]
                hg.fix_checksum(blk)
                b[pos:pos + 512] = blk
            return bytes(b)
    raise KeyError(name)


MOD = P("mod.py")
add("hugesize", "octal-8GiB-short-data", lambda c: _patched(c, MOD, 124, b"%011o\0" % (8 << 30)), "fail")
add("hugesize", "base256-2^62", lambda c: _patched(c, MOD, 124, b"\x80" + (2 ** 62).to_bytes(11, "big")), "fail")
add("hugesize", "base256-negative", lambda c: _patched(c, MOD, 124, b"\xff" * 12), "fail")
add("hugesize", "size-not-octal", lambda c: _patched(c, MOD, 124, b"zzzzzzzzzzz\0"), "fail")
add("hugesize", "octal-8GiB-short-data-oci", lambda c: _patched(c, MOD, 124, b"%011o\0" % (8 << 30), k="oci"), "fail")
add("hugesize", "pax-size-1e12", lambda c: {"src": img(c, [hg.tar_bytes(
    site_dirs() + [E(P("x.pax"), "x", hg_pax({"size": "1000000000000"})), E(P("big.py"), data=b"b=1\n")],
    fmt=tarfile.USTAR_FORMAT)], "da")}, "fail")
add("hugesize", "pax-size-negative", lambda c: {"src": img(c, [hg.tar_bytes(
    site_dirs() + [E(P("x.pax"), "x", hg_pax({"size": "-5"})), E(P("big.py"), data=b"b=1\n")],
    fmt=tarfile.USTAR_FORMAT)], "da")}, "fail")
add("hugesize", "max-file-size-1K", lambda c: {"src": img(c, [layer([E(P("big.py"), data=b"#" * 4096)])], "da"),
                                               "args": ["--max-file-size", "1K"]}, "fail")
add("hugesize", "max-total-size-2K", lambda c: {"src": img(c, [layer(
    [E(P(f"f{i}.py"), data=b"#" * 1024) for i in range(4)])], "da"), "args": ["--max-total-size", "2K"]}, "fail")
add("hugesize", "max-layer-size-1K", lambda c: {"src": img(c, [layer([E(P("big.py"), data=b"#" * 8192)])], "oci"),
                                                "args": ["--max-layer-size", "1K"]}, "fail")
def _huge_last(c):
    hdr = bytearray(tarfile.TarInfo("opt/huge").tobuf(tarfile.USTAR_FORMAT))
    hdr[124:136] = b"%011o\0" % (1 << 33)
    hg.fix_checksum(hdr)
    return {"src": img(c, [hg.tar_bytes(hg.pkg_entries(), end=False) + bytes(hdr) + b"x" * 1000], "da")}


add("hugesize", "huge-last-entry-outside-pkg", _huge_last, "fail")

# ============================================================================ R: truncation, corrupt compression, mediaType lies


def _trunc_layer(frac_fn, k="da", compress=None):
    def b(c):
        raw = layer([E(P("big.py"), data=os.urandom(60000).hex().encode())])
        blob = raw.rstrip(b"\0") if compress is None else compress(raw)
        cut = blob[:frac_fn(blob)]
        if k == "da":
            return {"src": hg.docker_archive(str(c.inp / "img.tar"), Image(layers=[cut]))}
        im = Image(raw_layers=[cut], compress={hg.gz: "gzip", hg.zst: "zstd", None: "none"}[compress],
                   diff_ids=[hg.sha(raw)])
        return {"src": hg.oci_layout(str(c.inp / "oci"), im)}
    return b


add("truncated", "layer-mid-data", _trunc_layer(lambda b: len(b) // 2), "fail")
add("truncated", "layer-mid-header", _trunc_layer(lambda b: hg.header_offsets(b)[-1] + 200), "fail")
add("truncated", "gzip-layer-half", _trunc_layer(lambda b: len(b) // 2, "oci", hg.gz), "fail")
add("truncated", "gzip-layer-no-trailer", _trunc_layer(lambda b: len(b) - 8, "oci", hg.gz), "fail")
add("truncated", "zstd-layer-half", _trunc_layer(lambda b: len(b) // 2, "ociz", hg.zst), "fail")
add("truncated", "zstd-layer-minus-3", _trunc_layer(lambda b: len(b) - 3, "ociz", hg.zst), "fail")
add("truncated", "plain-layer-oci-half", _trunc_layer(lambda b: len(b) // 2, "ocin", None), "fail")


def _outer_trunc(c):
    im = Image(layers=[layer([E(P("big.py"), data=b"#" * 20000)])])
    full = Path(hg.docker_archive(str(c.inp / "tmp.tar"), im).split(":", 1)[1])
    raw = full.read_bytes()
    full.unlink()
    raw = raw.rstrip(b"\0")
    (c.inp / "img.tar").write_bytes(raw[:int(len(raw) * 0.6)])
    return {"src": "docker-archive:" + str(c.inp / "img.tar")}


add("truncated", "outer-docker-archive-60pct", _outer_trunc, "fail")


def _outer_oci_trunc(c):
    src = hg.oci_archive(str(c.inp / "tmp.tar"), Image(layers=[layer([E(P("big.py"), data=b"#" * 20000)])]))
    p = Path(src.split(":", 1)[1])
    raw = p.read_bytes()
    p.unlink()
    raw = raw.rstrip(b"\0")
    (c.inp / "img.oci.tar").write_bytes(raw[:int(len(raw) * 0.7)])
    return {"src": "oci-archive:" + str(c.inp / "img.oci.tar")}


add("truncated", "outer-oci-archive-70pct", _outer_oci_trunc, "fail")


def _raw_oci(blob_fn, compress, diff_fn=None, k="oci"):
    def b(c):
        raw = hg.base_layer()
        blob = blob_fn(raw)
        im = Image(raw_layers=[blob], compress=compress, diff_ids=[diff_fn(raw) if diff_fn else hg.sha(raw)])
        return {"src": hg.oci_layout(str(c.inp / "oci"), im)}
    return b


def _bad_crc(raw):
    g = bytearray(hg.gz(raw))
    g[-8] ^= 0xFF
    return bytes(g)


add("corrupt", "gzip-bad-crc", _raw_oci(_bad_crc, "gzip"), "fail")
add("corrupt", "gzip-garbage-body", _raw_oci(lambda r: hg.gz(r)[:10] + os.urandom(3000), "gzip"), "fail")
add("corrupt", "zstd-garbage-body", _raw_oci(lambda r: b"\x28\xb5\x2f\xfd" + os.urandom(3000), "zstd"), "fail")
add("corrupt", "empty-blob-gzip", _raw_oci(lambda r: b"", "gzip"), "fail")
add("corrupt", "gzip-of-gzip", _raw_oci(lambda r: hg.gz(hg.gz(r)), "gzip"), "any")
add("corrupt", "not-a-tar-plain", _raw_oci(lambda r: os.urandom(5000), "none"), "fail")
add("corrupt", "tar-trailing-garbage", _raw_oci(lambda r: r + os.urandom(4096), "none",
                                                diff_fn=None), "any")
add("corrupt", "tar-no-end-blocks", _raw_oci(lambda r: hg.tar_bytes(hg.pkg_entries(), end=False), "none"), "any")
add("medialie", "says-gzip-is-plain", _raw_oci(lambda r: r, "gzip"), "any")
add("medialie", "says-plain-is-gzip", _raw_oci(lambda r: hg.gz(r), "none"), "any")
add("medialie", "says-zstd-is-gzip", _raw_oci(lambda r: hg.gz(r), "zstd"), "any")
add("medialie", "says-gzip-is-zstd", _raw_oci(lambda r: hg.zst(r), "gzip"), "any")


def _unknown_media(c):
    return {"src": hg.oci_layout(str(c.inp / "oci"), Image(), layer_descs=lambda ds: [
        dict(d, mediaType="application/x-evil") for d in ds])}


add("medialie", "unknown-layer-mediatype", _unknown_media, "any")

# ============================================================================ B: bombs (cheap to build)


def _bomb(kind, total, args=()):
    def b(c):
        blob = hg.gzip_bomb(total) if kind == "gzip" else hg.zstd_bomb(total)
        im = Image(raw_layers=[blob], compress=kind, diff_ids=[hg.sha(b"unknown")])
        return {"src": hg.oci_layout(str(c.inp / "oci"), im), "args": list(args)}
    return b


add("bomb", "gzip-4GiB-default-caps", _bomb("gzip", 4 << 30), "fail")
add("bomb", "zstd-32GiB-default-caps", _bomb("zstd", 32 << 30), "fail")
add("bomb", "gzip-1GiB-max-layer-64M", _bomb("gzip", 1 << 30, ["--max-layer-size", "64M"]), "fail")
add("bomb", "zstd-4GiB-max-layer-64M", _bomb("zstd", 4 << 30, ["--max-layer-size", "64M"]), "fail")


def _pkg_bomb(c):
    pre = hg.tar_bytes(hg.pkg_entries(), end=False)
    ti = tarfile.TarInfo(P("big.py"))
    ti.size = 600 << 20
    blob = hg.gz(pre + ti.tobuf()) + hg.gzip_zero_member(64 << 20) * 10 + hg.gz(b"\0" * 1024)
    im = Image(raw_layers=[blob], compress="gzip", diff_ids=[hg.sha(b"x")])
    return {"src": hg.oci_layout(str(c.inp / "oci"), im)}


add("bomb", "pkg-file-600MiB-gzip", _pkg_bomb, "fail")


def _many_entries(c):
    ents = [E(P(f"d{i // 1000}/f{i}.py"), data=b"") for i in range(15000)]
    return {"src": img(c, [layer(ents)], "oci")}


add("bomb", "15k-entries", _many_entries, "any")

# ============================================================================ L: long names, odd names, PAX
DEEP_80K = "/".join(["abcdefgh"] * 9100)
LONG = {
    "pax-path-80KiB-deep-in-pkg": (lambda c: [E(P(DEEP_80K + ".py"), data=b"x")], "any"),
    "pax-path-80KiB-outside": (lambda c: [E("opt/" + DEEP_80K, data=b"x")], "any"),
    "pax-path-1MiB": (lambda c: [E(P("/".join(["abcdefghi"] * 105000)), data=b"x")], "any"),
    "deep-1200-in-pkg": (lambda c: [E(P("d/" * 1200 + "x.py"), data=b"x")], "any"),
    "deep-1200-outside": (lambda c: [E("opt/" + "d/" * 1200 + "x", data=b"x")], "any"),
    "component-300": (lambda c: [E(P("c" * 300 + ".py"), data=b"x")], "any"),
    "pax-linkpath-80KiB-hard": (lambda c: [E(P("hl80.py"), "hard", link=P(DEEP_80K))], "any"),
    "name-with-newline": (lambda c: [E(P("a\nb.py"), data=b"x=1\n")], "any"),
    "dot-only-entries": (lambda c: [E("./", "dir"), E(".", "dir"), E(P("./dot.py"), data=b"d=1\n")], "any"),
    "double-slash": (lambda c: [E(SITE + "//" + PKG + "//ds.py", data=b"d=1\n")], "any"),
}
for lname, (fn, ex) in LONG.items():
    add("longname", lname, lambda c, fn=fn: {"src": img(c, [layer(fn(c))], "da")}, ex)
add("longname", "component-255-legit", lambda c: {"src": img(c, [layer([E(P("c" * 252 + ".py"), data=b"ok=1\n")])],
                                                              "da")},
    "ok", has_file(f"{PKG}/{'c' * 252}.py", b"ok=1\n"))


def _pax_raw(recs_bytes: bytes, expect_name="p.py"):
    def b(c):
        return {"src": img(c, [hg.tar_bytes(site_dirs() + hg.pkg_entries(dirs=False) + [
            E(P("pax"), "x", recs_bytes), E(P(expect_name), data=b"p=1\n")], fmt=tarfile.USTAR_FORMAT)], "da")}
    return b


add("longname", "pax-invalid-utf8", _pax_raw(hg_pax({"hdrcharset": "BINARY"}) + hg_pax({"path": P("\udcff")
                                                                                      .encode(errors="surrogateescape")
                                                                                      + b"\xff\xfe.py"})), "any")
add("longname", "pax-bad-record-length", _pax_raw(b"99999 path=x\n"), "fail")
add("longname", "pax-zero-record-length", _pax_raw(b"0 path=x\n"), "any")
add("longname", "pax-non-numeric-length", _pax_raw(b"abc path=x\n"), "fail")
add("longname", "pax-empty-path", _pax_raw(hg_pax({"path": ""})), "any")
add("longname", "pax-nul-in-path", _pax_raw(hg_pax({"path": P("a\0b.py")})), "any")
add("longname", "pax-path-up-to-host", lambda c: _pax_raw(hg_pax({"path": c.up + "/pax_evil.txt"}))(c), "fail")
add("longname", "pax-linkpath-abs-host-symlink-then-file", lambda c: {"src": img(c, [hg.tar_bytes(
    site_dirs() + hg.pkg_entries(dirs=False) + [
        E(P("px"), "x", hg_pax({"linkpath": c.H})), E(P("pl"), "sym", link="harmless"),
        E(P("pl/pax_evil.py"), data=b"x")], fmt=tarfile.USTAR_FORMAT)], "da")}, "any")
add("longname", "gnu-longname-80KiB", lambda c: {"src": img(c, [hg.tar_bytes(
    hg.pkg_entries() + [E(P(DEEP_80K), data=b"x")], fmt=tarfile.GNU_FORMAT)], "da")}, "any")

# ============================================================================ K: checksums


def _chk(which, fix=False, val=b"0000000\0"):
    def b(c):
        raw = layer([])
        offs = hg.header_offsets(raw)
        pos = {"first": offs[0], "pkg": offs[-1], "last": offs[-1]}[which]
        bb = bytearray(raw)
        bb[pos + 148:pos + 156] = val
        return {"src": img(c, [bytes(bb)], "da")}
    return b


add("checksum", "first-header-bad", _chk("first"), "fail")
add("checksum", "pkg-file-header-bad", _chk("pkg"), "fail")
add("checksum", "checksum-not-octal", _chk("pkg", val=b"zzzzzzz\0"), "fail")


def _chk_oci(c):
    raw = bytearray(layer([]))
    pos = hg.header_offsets(bytes(raw))[-2]
    raw[pos + 148:pos + 156] = b"0000001\0"
    return {"src": hg.oci_layout(str(c.inp / "oci"), Image(layers=[bytes(raw)]))}


add("checksum", "bad-in-gzip-layer-oci", _chk_oci, "fail")


def _outer_chk(c):
    p = Path(hg.docker_archive(str(c.inp / "img.tar"), Image()).split(":", 1)[1])
    raw = bytearray(p.read_bytes())
    raw[148:156] = b"0000000\0"
    p.write_bytes(bytes(raw))
    return {"src": "docker-archive:" + str(p)}


add("checksum", "outer-archive-first-header", _outer_chk, "fail")


def _zero_block_then_junk(c):
    raw = hg.tar_bytes([E(P("early.py"), data=b"e=1\n")], end=False) + b"\0" * 512 + hg.base_layer()
    return {"src": img(c, [raw], "da")}


add("checksum", "one-zero-block-then-more", _zero_block_then_junk, "any")

# ============================================================================ M: docker-archive manifests and configs


def da(c, **kw):
    im_kw = {k: kw.pop(k) for k in list(kw) if k in ("config_raw", "config_obj", "diff_ids", "env", "labels", "layers")}
    return hg.docker_archive(str(c.inp / ("imgdir" if kw.get("as_dir") else "img.tar")), Image(**im_kw), **kw)


MAN = {
    "manifest-not-json": (lambda c: da(c, manifest_raw=b"{not json"), "fail"),
    "manifest-list-of-strings": (lambda c: da(c, manifest=["x", "y"]), "fail"),
    "manifest-object": (lambda c: da(c, manifest={"Config": "x", "Layers": []}), "fail"),
    "manifest-empty-list": (lambda c: da(c, manifest=[]), "fail"),
    "manifest-null": (lambda c: da(c, manifest_raw=b"null"), "fail"),
    "manifest-nested-10000": (lambda c: da(c, manifest_raw=hg.nested_json(10000)), "fail"),
    "manifest-nested-obj-10000": (lambda c: da(c, manifest_raw=hg.nested_json(10000, "obj")), "fail"),
    "manifest-missing": (lambda c: da(c, drop={"manifest.json"}), "fail"),
    "layers-a-string": (lambda c: da(c, manifest=[{"Config": "c.json", "Layers": "a/layer.tar"}]), "fail"),
    "layers-int-entry": (lambda c: da(c, manifest=[{"Config": "c.json", "Layers": [7]}]), "fail"),
    "config-key-int": (lambda c: da(c, manifest=[{"Config": 5, "Layers": []}]), "fail"),
    "layer-dotdot-tar": (lambda c: da(c, layer_names=["../host/layer.tar"]), "fail"),
    "layer-absolute-tar": (lambda c: da(c, layer_names=[c.H + "/layer.tar"]), "fail"),
    "layer-missing": (lambda c: da(c, layer_names=["nope/layer.tar"], drop={"nope/layer.tar"}), "fail"),
    "layer-not-a-tar": (lambda c: da(c, layers=[os.urandom(3000)]), "fail"),
    "config-missing": (lambda c: da(c, config_name="missing.json", drop={"missing.json"}), "fail"),
    "config-not-json": (lambda c: da(c, config_raw=b"{{{{"), "fail"),
    "config-a-list": (lambda c: da(c, config_raw=b"[1, 2, 3]"), "fail"),
    "config-config-a-list": (lambda c: da(c, config_obj={"config": [1], "rootfs": {"diff_ids": []}}), "any"),
    "labels-a-list": (lambda c: da(c, labels=["a", "b"]), "any"),
    "env-a-string": (lambda c: da(c, env="PATH=/bin"), "any"),
    "env-ints": (lambda c: da(c, env=[1, 2, None]), "any"),
    "env-pythonpath-up": (lambda c: da(c, env=["PYTHONPATH=" + "/.." * 30 + c.H + "/pkgdir"]), "any"),
    "config-nested-10000": (lambda c: da(c, config_raw=hg.nested_json(10000)), "fail"),
    "labels-nested-10000": (lambda c: da(c, config_raw=b'{"config": {"Labels": {"a": ' + hg.nested_json(10000)
                                          + b'}}, "rootfs": {"type": "layers", "diff_ids": []}}'), "any"),
    "diff-ids-mismatch": (lambda c: da(c, diff_ids=[hg.sha(b"other")]), "fail"),
    "diff-ids-too-few": (lambda c: da(c, layers=[hg.base_layer(), hg.tar_bytes([E(P("t.py"), data=b"t")])],
                                      diff_ids=[hg.sha(hg.base_layer())]), "fail"),
    "diff-ids-malformed": (lambda c: da(c, diff_ids=["sha256:xyz"]), "fail"),
    "config-dotdot-folder": (lambda c: da(c, as_dir=True, config_name="../../host/config.json",
                                          layer_names=None), "fail"),
    "manifest-huge-whitespace": (lambda c: da(c, manifest_raw=b" " * (20 << 20) + json.dumps(
        [{"Config": "x.json", "Layers": []}]).encode()), "fail"),
}
for mname, (fn, ex) in MAN.items():
    add("manifest", mname, lambda c, fn=fn: {"src": fn(c)}, ex)


def _da_folder_up(absolute: bool):
    def b(c):
        folder = c.inp / "imgdir"
        target = str(c.host / "layer.tar") if absolute else os.path.relpath(c.host / "layer.tar", folder)
        lay = (c.host / "layer.tar").read_bytes()
        im = Image(layers=[lay])
        return {"src": hg.docker_archive(str(folder), im, as_dir=True, layer_names=[target])}
    return b


add("manifest", "folder-layer-relative-to-host", _da_folder_up(False), "fail")
add("manifest", "folder-layer-absolute-host", _da_folder_up(True), "fail")


def _da_folder_symlinked_layer(c):
    folder = c.inp / "imgdir"
    lay = (c.host / "layer.tar").read_bytes()
    src = hg.docker_archive(str(folder), Image(layers=[lay]), as_dir=True, layer_names=["l/layer.tar"])
    (folder / "l" / "layer.tar").unlink()
    (folder / "l" / "layer.tar").symlink_to(c.host / "layer.tar")
    return {"src": src}


add("manifest", "folder-layer-is-symlink-to-host", _da_folder_symlinked_layer, "any")


def _da_folder_layer_is_dir(c):
    folder = c.inp / "imgdir"
    src = hg.docker_archive(str(folder), Image(), as_dir=True, layer_names=["l/layer.tar"])
    (folder / "l" / "layer.tar").unlink()
    (folder / "l" / "layer.tar").mkdir()
    return {"src": src}


add("manifest", "folder-layer-is-a-folder", _da_folder_layer_is_dir, "fail")


def _outer_member(kind):
    def b(c):
        lay = (c.host / "layer.tar").read_bytes()
        diff = hg.sha(lay)
        cfg = json.dumps(hg.image_config([diff])).encode()
        man = json.dumps([{"Config": "c.json", "Layers": ["l/layer.tar"]}]).encode()
        ents = [E("manifest.json", data=man), E("c.json", data=cfg)]
        if kind == "symlink":
            ents.append(E("l/layer.tar", "sym", link=str(c.host / "layer.tar")))
        elif kind == "hardlink":
            ents.append(E("l/layer.tar", "hard", link=str(c.host / "layer.tar")))
        elif kind == "traversal":
            ents += [E("l/layer.tar", data=hg.base_layer()), E(c.up + "/outer_evil.txt", data=b"x")]
            ents[1] = E("c.json", data=json.dumps(hg.image_config([hg.sha(hg.base_layer())])).encode())
        elif kind == "dup-manifest":
            ents += [E("l/layer.tar", data=hg.base_layer()),
                     E("manifest.json", data=json.dumps([{"Config": "c.json", "Layers": [c.H + "/layer.tar"]}])
                       .encode())]
            ents[1] = E("c.json", data=json.dumps(hg.image_config([hg.sha(hg.base_layer())])).encode())
        p = c.inp / "img.tar"
        p.write_bytes(hg.tar_bytes(ents, fmt=tarfile.GNU_FORMAT))
        return {"src": "docker-archive:" + str(p)}
    return b


add("manifest", "outer-layer-symlink-to-host", _outer_member("symlink"), "fail")
add("manifest", "outer-layer-hardlink-to-host", _outer_member("hardlink"), "fail")
add("manifest", "outer-member-traversal", _outer_member("traversal"), "any")
add("manifest", "outer-duplicate-manifest", _outer_member("dup-manifest"), "any")


def _pkg_version_layer(version: str):
    def b(c):
        meta = f"Metadata-Version: 2.1\nName: {PKG}\nVersion: {version}\n\n".encode()
        return {"src": img(c, [layer([E(f"{SITE}/{PKG}-1.0.dist-info/METADATA", data=meta),
                                      E(f"{SITE}/{PKG}-1.0.dist-info/RECORD", data=b"")])], "da"),
                "noname": True}
    return b


add("manifest", "image-version-traversal-noname", lambda c: _pkg_version_layer(
    "1.0/" + "../" * 10 + c.H[1:] + "/verevil")(c), "any")
add("manifest", "image-version-300-chars-noname", _pkg_version_layer("7" * 300), "any")
add("manifest", "image-version-dotdot-noname", _pkg_version_layer(".."), "any")

# ============================================================================ O: OCI layouts


def oci(c, **kw):
    im_kw = {k: kw.pop(k) for k in list(kw) if k in ("config_raw", "config_obj", "diff_ids", "env", "layers",
                                                      "raw_layers", "compress")}
    return hg.oci_layout(str(c.inp / "oci"), Image(**im_kw), **kw)


def _ld(fn):
    return lambda ds: [fn(dict(d)) for d in ds]


def _host_layer_desc(alg_trav: bool):
    def b(c):
        lay = (c.host / "layer.tar").read_bytes()
        # layout at in/oci; blobs/<alg>/<hex> -> in/oci/blobs/../../../host/layer.tar == host/layer.tar
        dig = "../../../host:layer.tar" if alg_trav else "sha256:../../../../host/layer.tar"
        return {"src": oci(c, layers=[lay], compress="none", layer_descs=lambda ds: [
            dict(ds[0], digest=dig, mediaType="application/vnd.oci.image.layer.v1.tar")])}
    return b


add("oci", "layer-digest-alg-dotdot", _host_layer_desc(True), "fail")
add("oci", "layer-digest-hex-dotdot", _host_layer_desc(False), "fail")


def _host_config_desc(c):
    lay = (c.host / "layer.tar").read_bytes()
    return {"src": oci(c, layers=[lay], compress="none", config_desc_patch={"digest": "../../../host:config.json"})}


add("oci", "config-digest-alg-dotdot", _host_config_desc, "fail")


def _host_manifest_desc(c):
    def ip(index, put):
        index["manifests"][0]["digest"] = "../../../host:manifest.json"
        return index
    return {"src": oci(c, index_patch=ip)}


add("oci", "manifest-digest-alg-dotdot", _host_manifest_desc, "fail")
BADDIG = {
    "short-hex": "sha256:abc",
    "uppercase-hex": None,
    "unknown-alg": "md5:" + "0" * 32,
    "alg-uppercase": None,
    "empty": "",
    "no-colon": "0" * 64,
    "alg-plus-evil": "sha256+../..:" + "0" * 64,
    "newline-in-hex": "sha256:" + "0" * 32 + "\n" + "0" * 31,
}
for dname, dval in BADDIG.items():
    def b(c, dname=dname, dval=dval):
        def fix(d):
            if dname == "uppercase-hex":
                d["digest"] = "sha256:" + d["digest"][7:].upper()
            elif dname == "alg-uppercase":
                d["digest"] = "SHA256:" + d["digest"][7:]
            else:
                d["digest"] = dval
            return d
        return {"src": oci(c, layer_descs=_ld(fix))}
    add("oci", f"layer-digest-{dname}", b, "fail")
add("oci", "layer-digest-int", lambda c: {"src": oci(c, layer_descs=_ld(lambda d: dict(d, digest=12345)))}, "fail")
add("oci", "layer-without-digest", lambda c: {"src": oci(c, layer_descs=_ld(
    lambda d: {k: v for k, v in d.items() if k != "digest"}))}, "fail")
add("oci", "manifest-without-config", lambda c: {"src": oci(c, manifest_patch=lambda m: {
    k: v for k, v in m.items() if k != "config"})}, "fail")
add("oci", "manifest-layers-not-list", lambda c: {"src": oci(c, manifest_patch=lambda m: dict(m, layers={"a": 1}))},
    "fail")
add("oci", "manifest-no-layers", lambda c: {"src": oci(c, manifest_patch=lambda m: dict(m, layers=[]))}, "fail")
add("oci", "layer-blob-digest-mismatch", lambda c: {"src": oci(c, layer_descs=_ld(
    lambda d: dict(d, digest="sha256:" + hashlib.sha256(b"not these bytes").hexdigest())))}, "fail")


def _blob_bytes_changed(c):
    src = oci(c)
    lay = hg.base_layer()
    blob = c.inp / "oci" / "blobs" / "sha256" / hg.sha(hg.gz(lay))[7:]
    blob.write_bytes(hg.gz(hg.tar_bytes(hg.pkg_entries([E(P("injected.py"), data=b"i=1\n")]))))
    return {"src": src}


add("oci", "layer-bytes-replaced-digest-kept", _blob_bytes_changed, "fail")


def _config_bytes_changed(c):
    src = oci(c)
    files, man = hg.oci_files(Image())
    cpath = c.inp / "oci" / "blobs" / "sha256" / man["config"]["digest"][7:]
    cfg = json.loads(cpath.read_bytes())
    cfg["config"]["Env"].append("INJECTED=1")
    cpath.write_bytes(json.dumps(cfg).encode())
    return {"src": src}


add("oci", "config-bytes-replaced-digest-kept", _config_bytes_changed, "fail")
add("oci", "diff-ids-mismatch", lambda c: {"src": oci(c, diff_ids=[hg.sha(b"wrong")])}, "fail")
add("oci", "layer-size-lie", lambda c: {"src": oci(c, layer_descs=_ld(lambda d: dict(d, size=d["size"] // 2)))},
    "any")
add("oci", "layer-size-negative", lambda c: {"src": oci(c, layer_descs=_ld(lambda d: dict(d, size=-1)))}, "fail")


def _missing_blob(which):
    def b(c):
        src = oci(c)
        files, man = hg.oci_files(Image())
        dig = man["layers"][0]["digest"] if which == "layer" else man["config"]["digest"]
        if which == "manifest":
            idx = json.loads((c.inp / "oci" / "index.json").read_bytes())
            dig = idx["manifests"][0]["digest"]
        (c.inp / "oci" / "blobs" / "sha256" / dig[7:]).unlink()
        return {"src": src}
    return b


for w in ("layer", "config", "manifest"):
    add("oci", f"missing-{w}-blob", _missing_blob(w), "fail")


def _blob_is_dir(c):
    src = oci(c)
    files, man = hg.oci_files(Image())
    p = c.inp / "oci" / "blobs" / "sha256" / man["layers"][0]["digest"][7:]
    p.unlink()
    p.mkdir()
    return {"src": src}


add("oci", "layer-blob-is-a-folder", _blob_is_dir, "fail")


def _blob_symlink_host(c):
    lay = (c.host / "layer.tar").read_bytes()
    src = oci(c, layers=[lay], compress="none")
    p = c.inp / "oci" / "blobs" / "sha256" / hg.sha(lay)[7:]
    p.unlink()
    p.symlink_to(c.host / "layer.tar")
    return {"src": src}


add("oci", "layer-blob-symlink-to-host", _blob_symlink_host, "any")


def _index_cycle(n: int):
    def b(c):
        src = oci(c)
        blobs = c.inp / "oci" / "blobs" / "sha256"
        names = [str(i) * 64 if i < 10 else hashlib.sha256(str(i).encode()).hexdigest() for i in range(1, n + 1)]
        for i, nm in enumerate(names):
            nxt = names[(i + 1) % n]
            (blobs / nm).write_bytes(json.dumps({"schemaVersion": 2,
                                                 "mediaType": "application/vnd.oci.image.index.v1+json",
                                                 "manifests": [{"mediaType": "application/vnd.oci.image.index.v1+json",
                                                                "digest": "sha256:" + nxt, "size": 10}]}).encode())
        (c.inp / "oci" / "index.json").write_bytes(json.dumps({"schemaVersion": 2, "manifests": [
            {"mediaType": "application/vnd.oci.image.index.v1+json", "digest": "sha256:" + names[0],
             "size": 10}]}).encode())
        return {"src": src}
    return b


add("oci", "index-self-cycle", _index_cycle(1), "fail")
add("oci", "index-2-cycle", _index_cycle(2), "fail")


def _deep_index(depth: int):
    def b(c):
        def ip(index, put):
            cur = index["manifests"][0]
            for _ in range(depth):
                blob = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                                   "manifests": [cur]}).encode()
                cur = {"mediaType": "application/vnd.oci.image.index.v1+json", "digest": put(blob),
                       "size": len(blob)}
            return {"schemaVersion": 2, "manifests": [cur]}
        return {"src": oci(c, index_patch=ip)}
    return b


add("oci", "index-nesting-3000", _deep_index(3000), "any")
add("oci", "index-nesting-3-legit", _deep_index(3), "any")
add("oci", "index-not-json", lambda c: {"src": oci(c, index_patch=lambda i, put: b"{nope")}, "fail")
add("oci", "index-manifests-dict", lambda c: {"src": oci(c, index_patch=lambda i, put: dict(i, manifests={"a": 1}))},
    "fail")
add("oci", "index-nested-10000", lambda c: {"src": oci(c, index_patch=lambda i, put: hg.nested_json(10000))}, "fail")
add("oci", "manifest-nested-10000", lambda c: {"src": oci(c, manifest_patch=lambda m: hg.nested_json(10000))},
    "fail")


def _index_missing(c):
    src = oci(c)
    (c.inp / "oci" / "index.json").unlink()
    return {"src": src}


add("oci", "index-missing", _index_missing, "fail")


def _layout_missing(c):
    src = oci(c)
    (c.inp / "oci" / "oci-layout").unlink()
    return {"src": src}


add("oci", "oci-layout-file-missing", _layout_missing, "any")
add("oci", "manifest-mediatype-says-index", lambda c: {"src": oci(c, index_patch=lambda i, put: dict(i, manifests=[
    dict(i["manifests"][0], mediaType="application/vnd.oci.image.index.v1+json")]))}, "any")
add("oci", "platform-only-arm64", lambda c: {"src": oci(c, index_patch=lambda i, put: dict(i, manifests=[
    dict(i["manifests"][0], platform={"architecture": "arm64", "os": "linux"})]))}, "any")
add("oci", "config-not-json", lambda c: {"src": oci(c, config_raw=b"{{{")}, "fail")
add("oci", "config-a-list", lambda c: {"src": oci(c, config_raw=b"[]")}, "fail")
add("oci", "config-nested-10000", lambda c: {"src": oci(c, config_raw=hg.nested_json(10000, "obj"))}, "fail")


def _ocia_outer(kind):
    def b(c):
        if kind == "trav":
            extra = [E(c.up + "/ocia_evil.txt", data=b"x")]
            return {"src": hg.oci_archive(str(c.inp / "img.oci.tar"), Image(), outer_extra=extra)}
        lay = (c.host / "layer.tar").read_bytes()
        files, man = hg.oci_files(Image(layers=[lay], compress="none"))
        key = "blobs/sha256/" + hg.sha(lay)[7:]
        ents = [E(n, data=v) for n, v in files.items() if n != key]
        ents.append(E(key, "sym" if kind == "sym" else "hard", link=str(c.host / "layer.tar")))
        p = c.inp / "img.oci.tar"
        p.write_bytes(hg.tar_bytes(ents, fmt=tarfile.GNU_FORMAT))
        return {"src": "oci-archive:" + str(p)}
    return b


add("oci", "archive-outer-traversal-member", _ocia_outer("trav"), "any")
add("oci", "archive-blob-symlink-to-host", _ocia_outer("sym"), "fail")
add("oci", "archive-blob-hardlink-to-host", _ocia_outer("hard"), "fail")

# ---------------------------------------------------------------------------- type confusion in JSON
TYPES = {
    "layer-mediatype-int": lambda c: oci(c, layer_descs=_ld(lambda d: dict(d, mediaType=7))),
    "layer-size-string": lambda c: oci(c, layer_descs=_ld(lambda d: dict(d, size="12"))),
    "layer-desc-a-string": lambda c: oci(c, layer_descs=lambda ds: ["sha256:" + "0" * 64]),
    "index-entry-a-string": lambda c: oci(c, index_patch=lambda i, put: dict(i, manifests=["x"])),
    "index-platform-a-list": lambda c: oci(c, index_patch=lambda i, put: dict(i, manifests=[
        dict(i["manifests"][0], platform=["linux", "amd64"])])),
    "index-annotations-a-list": lambda c: oci(c, index_patch=lambda i, put: dict(i, annotations=[1, 2])),
    "config-rootfs-missing": lambda c: oci(c, config_obj={"architecture": "amd64", "os": "linux", "config": {}}),
    "config-diff-ids-a-dict": lambda c: oci(c, config_obj={"config": {}, "rootfs": {"diff_ids": {"a": 1}}}),
    "config-env-100k": lambda c: oci(c, env=[f"V{i}=x" for i in range(100000)]),
    "config-entrypoint-1MiB": lambda c: oci(c, config_obj=dict(hg.image_config([hg.sha(hg.base_layer())]),
                                                                config={"Entrypoint": ["x" * (1 << 20)]})),
    "da-layers-entries-dicts": lambda c: da(c, manifest=[{"Config": "c.json", "Layers": [{"a": 1}]}]),
    "da-repotags-int": lambda c: da(c, manifest=[{"Config": "x", "RepoTags": 5, "Layers": None}]),
}
for tname, fn in TYPES.items():
    add("jsontype", tname, lambda c, fn=fn: {"src": fn(c)}, "any")


# ============================================================================ WH: wheels


def _wh(members=None, version="1.0", patch=None, compression=zipfile.ZIP_DEFLATED):
    def b(c):
        raw = hg.zip_bytes(members(c) if callable(members) else hg.wheel_members(version), compression)
        if patch:
            raw = patch(raw)
        return {"src": wheel(c, raw)}
    return b


I32 = lambda v: v.to_bytes(4, "little")  # noqa: E731
I16 = lambda v: v.to_bytes(2, "little")  # noqa: E731
M = f"{PKG}/mod.py"
add("wheel", "bad-local-header-sig", _wh(patch=lambda r: hg.zip_patch(r, M, local={0: b"PK\x09\x09"})), "fail")
add("wheel", "bad-crc", _wh(patch=lambda r: hg.zip_patch(r, M, local={14: I32(0xDEADBEEF)},
                                                        central={16: I32(0xDEADBEEF)})), "fail")
add("wheel", "unknown-compression-99", _wh(patch=lambda r: hg.zip_patch(r, M, local={8: I16(99)}, central={10: I16(99)})),
    "fail")
add("wheel", "encryption-flag", _wh(patch=lambda r: hg.zip_patch(r, M, local={6: I16(1)}, central={8: I16(1)})), "fail")
add("wheel", "size-lie-uncompressed-bigger", _wh(patch=lambda r: hg.zip_patch(
    r, M, local={22: I32(1 << 30)}, central={24: I32(1 << 30)})), "fail")
add("wheel", "size-lie-compressed-smaller", _wh(patch=lambda r: hg.zip_patch(
    r, M, local={18: I32(3)}, central={20: I32(3)})), "fail")
add("wheel", "stored-size-lie", _wh(compression=zipfile.ZIP_STORED, patch=lambda r: hg.zip_patch(
    r, M, local={18: I32(400), 22: I32(400)}, central={20: I32(400), 24: I32(400)})), "fail")
add("wheel", "local-name-differs-traversal", _wh(patch=lambda r: hg.zip_patch(
    r, M, local={30: b"../evil.py"[:len(M)].ljust(len(M), b"x")})), "any")
add("wheel", "central-dir-offset-beyond", _wh(patch=lambda r: r[:-6] + I32(len(r) * 4) + r[-2:]), "fail")
add("wheel", "not-a-zip", lambda c: {"src": wheel(c, os.urandom(4000))}, "fail")
add("wheel", "empty-file", lambda c: {"src": wheel(c, b"")}, "fail")
add("wheel", "empty-zip", lambda c: {"src": wheel(c, hg.zip_bytes([]))}, "fail")
add("wheel", "truncated-half", _wh(patch=lambda r: r[:len(r) // 2]), "fail")
WTRAV = {
    "dotdot": lambda c: "../evil.py",
    "up-to-host": lambda c: c.up + "/wevil.py",
    "absolute-host": lambda c: c.H + "/wabs.py",
    "pkg-dotdot": lambda c: f"{PKG}/../../evil.py",
    "pkg-up-tmp": lambda c: f"{PKG}/" + "../" * 12 + f"tmp/recon_evil_{c.token}",
}
for wname, fn in WTRAV.items():
    add("wheel", f"traversal-{wname}", _wh(members=lambda c, fn=fn: hg.wheel_members(extra=[(fn(c), b"x=1\n")])),
        "fail")
add("wheel", "backslash-traversal", _wh(members=lambda c: hg.wheel_members(extra=[(f"{PKG}\\..\\..\\bs.py", b"x")])),
    "any")
add("wheel", "symlink-entry-abs-host", _wh(members=lambda c: hg.wheel_members(extra=[
    (f"{PKG}/link", c.H.encode(), 0o120777)])), "any")
add("wheel", "symlink-entry-then-file-through", _wh(members=lambda c: hg.wheel_members(extra=[
    (f"{PKG}/link", c.H.encode(), 0o120777), (f"{PKG}/link/through.py", b"x=1\n")])), "any")
add("wheel", "symlink-entry-to-host-file", _wh(members=lambda c: hg.wheel_members(extra=[
    (f"{PKG}/data.py", (c.H + "/canary.txt").encode(), 0o120777)])), "any")
add("wheel", "symlink-entry-rel-up", _wh(members=lambda c: hg.wheel_members(extra=[
    (f"{PKG}/up", ("../" * 30 + c.H[1:]).encode(), 0o120777)])), "any")
add("wheel", "pkg-folder-is-symlink-entry", _wh(members=lambda c: [
    m for m in hg.wheel_members() if not m[0].startswith(f"{PKG}/")] + [(PKG, (c.H + "/" + PKG).encode(), 0o120777)]),
    "any")
add("wheel", "fifo-mode-entry", _wh(members=lambda c: hg.wheel_members(extra=[(f"{PKG}/ff", b"", 0o010644)])), "any")
add("wheel", "chr-mode-entry", _wh(members=lambda c: hg.wheel_members(extra=[(f"{PKG}/cd.py", b"", 0o020644)])), "any")
add("wheel", "duplicate-names", _wh(members=lambda c: hg.wheel_members(extra=[(f"{PKG}/__init__.py", b"DUP=1\n")])),
    "any")
add("wheel", "dir-entry-with-data", _wh(members=lambda c: hg.wheel_members(extra=[(f"{PKG}/sub/", b"data")])), "any")
add("wheel", "nul-in-name", _wh(members=lambda c: hg.wheel_members(extra=[(f"{PKG}/a\0b.py", b"x")])), "any")
add("wheel", "deep-1200", _wh(members=lambda c: hg.wheel_members(extra=[(f"{PKG}/" + "d/" * 1200 + "x.py", b"x")])),
    "any")
add("wheel", "component-300", _wh(members=lambda c: hg.wheel_members(extra=[(f"{PKG}/" + "c" * 300 + ".py", b"x")])),
    "any")


def _wh_version(vfn):
    def b(c):
        return {"src": wheel(c, hg.zip_bytes(hg.wheel_members(vfn(c)))), "noname": True}
    return b


add("wheel", "version-300-chars-noname", _wh_version(lambda c: "1." + "0" * 300), "any")
add("wheel", "version-traversal-noname", _wh_version(lambda c: "1.0/" + "../" * 10 + c.H[1:] + "/wver"), "any")
add("wheel", "version-dotdot-noname", _wh_version(lambda c: ".."), "any")
add("wheel", "version-newline-noname", _wh_version(lambda c: "1.0\nEvil: yes"), "any")
add("wheel", "zip-bomb-100MiB-max-file-16M", lambda c: {"src": wheel(c, hg.zip_bomb_member(f"{PKG}/big.py", 100 << 20)),
                                                        "args": ["--max-file-size", "16M"]}, "fail")
add("wheel", "zip-bomb-520MiB-default", lambda c: {"src": wheel(c, hg.zip_bomb_member(f"{PKG}/big.py", 520 << 20))},
    "fail")
add("wheel", "zip-bomb-outside-pkg", lambda c: {"src": wheel(c, hg.zip_bomb_member(
    f"{PKG}-1.0.data/data/big.bin", 256 << 20))}, "any")

# ============================================================================ OUT: the output folder


def _out_symlink(c):
    link = c.root / "outlink"
    link.symlink_to(c.host / "sub")
    return {"src": img(c, [hg.base_layer()], "da"), "out": str(link)}


add("outdir", "out-is-symlink-to-host-folder", _out_symlink, "any")


def _out_symlink_dangling(c):
    link = c.root / "outlink"
    link.symlink_to(c.host / "newout")
    return {"src": img(c, [hg.base_layer()], "da"), "out": str(link)}


add("outdir", "out-is-dangling-symlink-into-host", _out_symlink_dangling, "any")


def _out_under_symlink(c):
    link = c.root / "outlink"
    link.symlink_to(c.host)
    return {"src": img(c, [hg.base_layer()], "da"), "out": str(link / "snaps")}




def _out_readonly(c):
    c.out.mkdir()
    o = str(c.out)
    return {"src": img(c, [hg.base_layer()], "da"),
            "wrap": ["unshare", "-m", "sh", "-c", f'mount --bind "{o}" "{o}" && mount -o remount,bind,ro "{o}" '
                     '&& exec "$@"', "sh"]}


add("outdir", "out-read-only", _out_readonly, "fail")


def _out_is_file(c):
    c.out.write_text("i am a file\n")
    return {"src": img(c, [hg.base_layer()], "da"), "skip_leftover": True}


add("outdir", "out-is-a-file", _out_is_file, "fail")


def _out_fsize(c):
    return {"src": img(c, [layer([E(P("big.py"), data=b"#" * 200000)])], "da"),
            "limit": lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))}


add("outdir", "disk-full-fsize-limit", _out_fsize, "fail")


def _name(name_fn, force=False, pre=None):
    def b(c):
        if pre:
            pre(c)
        d = {"src": img(c, [hg.base_layer()], "da"), "name": name_fn(c)}
        if force:
            d["args"] = ["--force"]
        return d
    return b


add("outdir", "name-dotdot", _name(lambda c: "../escaped"), "any")
add("outdir", "name-absolute-host", _name(lambda c: c.H + "/named"), "any")
add("outdir", "name-up-to-host-force", _name(lambda c: "../host", force=True), "any")
add("outdir", "name-up-to-host-sub-force", _name(lambda c: "../host/sub", force=True), "any")
add("outdir", "name-empty", _name(lambda c: ""), "any")
def _name_dot_force(c):
    c.out.mkdir()
    (c.out / "keep.txt").write_text("k")
    d = _name(lambda c: ".", force=True)(c)
    d["skip_leftover"] = True
    d["post"] = lambda c, rc, so, se: [] if (c.out / "keep.txt").exists() else [
        "--name . --force deleted out/keep.txt (a file recon did not create)"]
    return d


add("outdir", "name-dot-force", _name_dot_force, "any")


def _force_non_snapshot(c):
    (c.out / "n").mkdir(parents=True)
    (c.out / "n" / "user-notes.txt").write_text("mine\n")
    return {"src": img(c, [hg.base_layer()], "da"), "args": ["--force"], "skip_leftover": True,
            "post": lambda c, rc, so, se: [] if (c.out / "n" / "user-notes.txt").exists() else [
                "--force deleted a folder that was not a snapshot (out/n/user-notes.txt gone)"]}


add("outdir", "force-over-non-snapshot-folder", _force_non_snapshot, "any")


def _sigkill_partial(c):
    """SIGKILL a snapshot while it stages, then take another one: no hidden partial folder may remain."""
    big = img(c, [layer([E(P(f"d{i // 500}/f{i}.py"), data=b"x = 1\n" * 50) for i in range(20000)])], "da")
    env = base_env(c)
    cmd = [sys.executable, "-c", "import sys; from recon.cli import main; sys.exit(main())", "snapshot", big,
           "--package", PKG, "--out", str(c.out), "--name", "killed", "--quiet"]
    p = subprocess.Popen(cmd, cwd=c.cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         preexec_fn=limits)
    t = time.monotonic()
    while time.monotonic() - t < 20 and p.poll() is None:
        if c.out.is_dir() and any(n.startswith(".") for n in os.listdir(c.out)):
            time.sleep(0.3)
            break
        time.sleep(0.02)
    os.killpg(p.pid, 9)
    p.wait()
    seen = sorted(os.listdir(c.out)) if c.out.is_dir() else []
    (c.inp / "img.tar").unlink()

    def post(c, rc, so, se):
        left = [n for n in os.listdir(c.out) if n.startswith(".") and os.path.isdir(c.out / n)] \
            if c.out.is_dir() else []
        return [f"hidden staging folder left by the SIGKILLed run not removed by the next run: {left} "
                f"(seen after the kill: {seen})"] if left else []
    return {"src": img(c, [hg.base_layer()], "da"), "post": post}


add("outdir", "sigkill-partial-removed-next-run", _sigkill_partial, "ok")

def _pre_out(setup, force=True):
    def b(c):
        c.out.mkdir()
        setup(c)
        d = {"src": img(c, [hg.base_layer()], "da"), "skip_leftover": True}
        if force:
            d["args"] = ["--force"]
        return d
    return b


def _real_snapshot(c, name="n"):
    rc, so, se, _ = run_cli(["snapshot", img(c, [hg.base_layer()], "da"), "--package", PKG, "--out", str(c.out),
                             "--name", name, "--quiet"], c.cwd, base_env(c))
    assert rc == 0, se
    return c.out / name


def _force_src_link(c):
    g = _real_snapshot(c)
    shutil.rmtree(g / "src")
    (g / "src").symlink_to(c.host)


def _force_manifest_link(c):
    g = _real_snapshot(c)
    (g / "manifest.json").unlink()
    (g / "manifest.json").symlink_to(c.host / "canary.txt")


def _partial_link(c):
    (c.out / ".snapshot.partial-999999-deadbeef").symlink_to(c.host)


def _partial_with_link(c):
    p = c.out / ".snapshot.partial-999999-deadbeef"
    (p / "rootfs").mkdir(parents=True)
    (p / "rootfs" / "up").symlink_to(c.host)
    (p / "hostlink").symlink_to(c.host / "sub")
    old = time.time() - 86400
    os.utime(p, (old, old))


add("outdir", "force-over-name-that-is-symlink-to-host",
    _pre_out(lambda c: (c.out / "n").symlink_to(c.host / "sub")), "any")
add("outdir", "force-over-snapshot-whose-src-links-to-host", _pre_out(_force_src_link), "any")
add("outdir", "force-over-snapshot-whose-manifest-links-to-host", _pre_out(_force_manifest_link), "any")
add("outdir", "planted-partial-is-symlink-to-host", _pre_out(_partial_link, force=False), "any")
add("outdir", "planted-stale-partial-holding-host-links", _pre_out(_partial_with_link, force=False), "any")


# ============================================================================ DIR: dir: sources with host links


def _dir(setup):
    def b(c):
        d = c.inp / "site"
        (d / PKG).mkdir(parents=True)
        (d / PKG / "__init__.py").write_text("x = 1\n")
        setup(c, d)
        return {"src": "dir:" + str(d)}
    return b


add("dirsrc", "file-symlink-to-host", _dir(lambda c, d: (d / PKG / "evil.py").symlink_to(c.host / "canary.txt")))
add("dirsrc", "dir-symlink-to-host", _dir(lambda c, d: (d / PKG / "sub").symlink_to(c.host)))
add("dirsrc", "rel-up-symlink-to-host", _dir(lambda c, d: (d / PKG / "up").symlink_to("../" * 30 + c.H[1:])))
add("dirsrc", "symlink-to-etc-shadow", _dir(lambda c, d: (d / PKG / "shadow.py").symlink_to("/etc/shadow")))
add("dirsrc", "self-loop", _dir(lambda c, d: (d / PKG / "loop").symlink_to("loop")))
add("dirsrc", "fifo-in-pkg", _dir(lambda c, d: os.mkfifo(d / PKG / "fifo.py")))


def _dir_pkg_link(c):
    d = c.inp / "site"
    d.mkdir(parents=True)
    (d / PKG).symlink_to(c.host / PKG)
    return {"src": "dir:" + str(d)}


add("dirsrc", "pkg-folder-is-symlink-to-host", _dir_pkg_link)


# ============================================================================ LEGIT/EDGE: correctness next to the hostile ones


def _is_link(p: Path, target: str) -> None:
    assert os.path.islink(p) and os.readlink(p) == target, f"{p.name} not kept as a link to {target}"


def _gzip_multimember(c):
    raw = hg.base_layer()
    half = len(raw) // 2
    blob = hg.gz(raw[:half]) + hg.gz(raw[half:])
    im = Image(raw_layers=[blob], compress="gzip", diff_ids=[hg.sha(raw)])
    return {"src": hg.oci_layout(str(c.inp / "oci"), im)}


add("edge", "gzip-multi-member-legit", _gzip_multimember, "ok", has_file(f"{PKG}/mod.py"))


def _zstd_bad_checksum(c):
    raw = hg.base_layer()
    z = bytearray(zstandard.ZstdCompressor(level=3, write_checksum=True).compress(raw))
    z[-1] ^= 0xFF
    im = Image(raw_layers=[bytes(z)], compress="zstd", diff_ids=[hg.sha(raw)])
    return {"src": hg.oci_layout(str(c.inp / "oci"), im)}


add("edge", "zstd-bad-content-checksum", _zstd_bad_checksum, "fail")
add("edge", "hardlink-to-file-outside-pkg-legit", lambda c: {"src": img(c, [hg.tar_bytes(
    [E("usr/", "dir"), E("usr/share/", "dir"), E("usr/share/x.py", data=b"SHARED = 1\n")] +
    hg.pkg_entries([E(P("h.py"), "hard", link="usr/share/x.py")]))], "da")},
    "ok", has_file(f"{PKG}/h.py", b"SHARED = 1\n"))
add("edge", "relative-link-inside-pkg-legit", lambda c: {"src": img(c, [layer([E(P("alias.py"), "sym",
                                                                                   link="mod.py")])], "da")},
    "ok", lambda c, o: _is_link(snap_dir(c) / "src" / PKG / "alias.py", "mod.py"))
add("edge", "relative-link-escaping-snapshot", lambda c: {"src": img(c, [layer([E(P("esc"), "sym",
                                                                                  link="../" * 12 + "etc/passwd")])],
                                                                       "da")})
add("edge", "dot-slash-prefixed-layer-legit", lambda c: {"src": img(c, [hg.tar_bytes(
    [E("./", "dir")] + [E("./" + e.name, e.kind, e.data) for e in hg.pkg_entries()])], "da")},
    "ok", has_file(f"{PKG}/mod.py"))
add("edge", "whiteout-with-content", wh_case(lambda c: [E(P(".wh.mod.py"), data=b"x" * 5000)]))
add("edge", "pythonpath-relative-up", lambda c: {"src": img(c, [hg.base_layer()], "da",
                                                            env=["PYTHONPATH=" + "../" * 20 + c.H[1:] + "/pkgdir"])})


def _gzip_huge_fname(c):
    raw = hg.base_layer()
    comp = zlib.compressobj(6, zlib.DEFLATED, -15)
    body = comp.compress(raw) + comp.flush()
    hdr = b"\x1f\x8b\x08\x08" + b"\0" * 4 + b"\x00\x03" + b"n" * (4 << 20) + b"\0"
    blob = hdr + body + struct.pack("<II", zlib.crc32(raw), len(raw))
    im = Image(raw_layers=[blob], compress="gzip", diff_ids=[hg.sha(raw)])
    return {"src": hg.oci_layout(str(c.inp / "oci"), im)}


add("edge", "gzip-4MiB-fname-header", _gzip_huge_fname, "any")


# ============================================================================ SCALE: counts that cost memory, time or disk


def _many_layers(n, same=False):
    def b(c):
        if same:
            layers = [hg.base_layer()] * n
        else:
            layers = [hg.base_layer()] + [hg.tar_bytes([E(P(f"l{i}.py"), data=b"x")]) for i in range(n - 1)]
        return {"src": img(c, layers, "da")}
    return b


add("scale", "1000-layers", _many_layers(1000), "any")
add("scale", "same-layer-listed-500-times", _many_layers(500, same=True), "any")


def _many_manifests(c):
    def ip(index, put):
        m = index["manifests"][0]
        others = [dict(m, platform={"architecture": f"arch{i}", "os": "linux"}) for i in range(10000)]
        return dict(index, manifests=others + [m])
    return {"src": oci(c, index_patch=ip)}


add("scale", "index-10000-manifests", _many_manifests, "any")


def _zstd_window(c):
    raw = hg.base_layer()
    params = zstandard.ZstdCompressionParameters(window_log=31, compression_level=3, write_content_size=False)
    buf = io.BytesIO()
    w = zstandard.ZstdCompressor(compression_params=params).stream_writer(buf, closefd=False)
    w.write(raw)
    w.flush(zstandard.FLUSH_FRAME)
    im = Image(raw_layers=[buf.getvalue()], compress="zstd", diff_ids=[hg.sha(raw)])
    return {"src": hg.oci_layout(str(c.inp / "oci"), im)}


add("scale", "zstd-frame-2GiB-window", _zstd_window, "any")


def _hardlink_amp(c):
    ents = [E(P("big.py"), data=b"#" * (1 << 20))] + [E(P(f"h{i}.py"), "hard", link=P("big.py")) for i in range(200)]
    return {"src": img(c, [layer(ents)], "oci"), "args": ["--max-total-size", "100M"]}


def _disk_bounded(c, out):
    seen, total = set(), 0
    for dp, _dn, fn in os.walk(out):
        for n in fn:
            st = os.lstat(os.path.join(dp, n))
            if stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    assert total <= 110 << 20, f"--max-total-size 100M but {total >> 20} MiB written (hardlinks copied uncapped)"


add("scale", "hardlink-amplification-200x1MiB-max-total-100M", _hardlink_amp, "any", _disk_bounded)


# ============================================================================ MORE: OCI-form docker save, FIFOs, /dev/zero


def _da_oci_form(layer_path=None, as_dir=True, extra=None):
    """`docker save` of Docker 25+: index.json + oci-layout + blobs/ plus a manifest.json naming blobs."""
    def b(c):
        files, man = hg.oci_files(Image(compress="none"))
        lay = "blobs/sha256/" + man["layers"][0]["digest"][7:]
        cfg = "blobs/sha256/" + man["config"]["digest"][7:]
        target = layer_path(c) if layer_path else lay
        files["manifest.json"] = json.dumps([{"Config": cfg, "RepoTags": ["t:1"], "Layers": [target]}]).encode()
        if extra:
            extra(c, files)
        if as_dir:
            d = c.inp / "saved"
            d.mkdir()
            hg.write_tree(str(d), files)
            return {"src": "docker-archive:" + str(d)}
        p = c.inp / "saved.tar"
        p.write_bytes(hg.tar_bytes([E(n, data=v) for n, v in files.items()], fmt=tarfile.GNU_FORMAT))
        return {"src": "docker-archive:" + str(p)}
    return b


add("more", "docker-save-oci-form-legit-tar", _da_oci_form(as_dir=False), "ok", has_file(f"{PKG}/mod.py"))
add("more", "docker-save-oci-form-layer-up-to-host", _da_oci_form(
    lambda c: "blobs/sha256/../../../../host/layer.tar"), "fail")
add("more", "docker-save-oci-form-layer-blobs-dotdot", _da_oci_form(
    lambda c: "blobs/../../../host/layer.tar", as_dir=False), "fail")


def _fifo_blob(which):
    def b(c):
        src = oci(c)
        files, man = hg.oci_files(Image())
        if which == "layer":
            p = c.inp / "oci" / "blobs" / "sha256" / man["layers"][0]["digest"][7:]
        elif which == "config":
            p = c.inp / "oci" / "blobs" / "sha256" / man["config"]["digest"][7:]
        else:
            p = c.inp / "oci" / "index.json"
        p.unlink()
        os.mkfifo(p)
        return {"src": src}
    return b


for w in ("layer", "config", "index"):
    add("more", f"oci-{w}-is-a-fifo", _fifo_blob(w), "fail")


def _blob_dev_zero(c):
    src = oci(c)
    files, man = hg.oci_files(Image())
    p = c.inp / "oci" / "blobs" / "sha256" / man["layers"][0]["digest"][7:]
    p.unlink()
    p.symlink_to("/dev/zero")
    return {"src": src}


add("more", "oci-layer-blob-symlink-to-dev-zero", _blob_dev_zero, "fail")


def _da_dir_layer_dev_zero(c):
    folder = c.inp / "imgdir"
    src = hg.docker_archive(str(folder), Image(), as_dir=True, layer_names=["l/layer.tar"])
    (folder / "l" / "layer.tar").unlink()
    (folder / "l" / "layer.tar").symlink_to("/dev/zero")
    return {"src": src}


add("more", "docker-archive-folder-layer-is-dev-zero", _da_dir_layer_dev_zero, "fail")
add("more", "wheel-data-purelib-traversal", _wh(members=lambda c: hg.wheel_members(extra=[
    (f"{PKG}-1.0.data/purelib/../../../../evil.py", b"x=1\n")])), "fail")
add("more", "wheel-data-purelib-pkg-file-legit", _wh(members=lambda c: hg.wheel_members(extra=[
    (f"{PKG}-1.0.data/purelib/{PKG}/extra.py", b"E = 1\n")])), "any")
add("more", "zip-eocd-entry-count-lie", _wh(patch=lambda r: r[:-12] + I16(65535) + I16(65535) + r[-8:]), "any")
add("more", "zip-comment-with-fake-eocd", _wh(patch=lambda r: r[:-2] + I16(22 + 100) + b"PK\x05\x06" + b"\0" * 18
                                              + b"z" * 100), "any")


def _ansi_name(c):
    return {"src": img(c, [layer([E(P("\x1b]0;pwned\x07\x1b[2Jx.py"), data=b"a=1\n")])], "da"), "loud": True}


def _ansi_version(c):
    meta = f"Metadata-Version: 2.1\nName: {PKG}\nVersion: 1.0\x1b]0;pwned\x07\x1b[31m\n\n".encode()
    return {"src": img(c, [layer([E(f"{SITE}/{PKG}-1.0.dist-info/METADATA", data=meta)])], "da"), "loud": True,
            "noname": True}


def _no_escapes(c, rc, so, se):
    return ["terminal escape sequence from the input printed: " + repr((so + se)[(so + se).find("\x1b"):][:40])] \
        if "\x1b" in so + se else []


add("more", "ansi-escape-in-file-name", lambda c: dict(_ansi_name(c), post=_no_escapes), "any")
add("more", "ansi-escape-in-version", lambda c: dict(_ansi_version(c), post=_no_escapes), "any")


# ============================================================================ READ: kept links read back by other verbs


def _stolen(kind):
    def b(c):
        if kind == "wheel":
            src = wheel(c, hg.zip_bytes(hg.wheel_members(extra=[
                (f"{PKG}/stolen.py", (c.H + f"/{PKG}/mod.py").encode(), 0o120777)])))
        elif kind == "dir":
            d = c.inp / "site"
            (d / PKG).mkdir(parents=True)
            (d / PKG / "__init__.py").write_text("x = 1\n")
            (d / PKG / "stolen.py").symlink_to(c.host / PKG / "mod.py")
            src = "dir:" + str(d)
        else:
            src = img(c, [layer([E(P("stolen.py"), "sym", link=c.H + f"/{PKG}/mod.py")])], kind)
        snap = str(snap_dir(c))
        return {"src": src, "followup": lambda c: [
            ["find", snap, "-e", "return", "--json"],
            ["run", snap, f"{PKG}.stolen:f", "--json"],
            ["slice", snap, f"{PKG}.stolen:f", "-o", str(c.out / "slice.py")],
        ]}
    return b


for k in ("da", "oci", "wheel", "dir"):
    add("readback", f"abs-link-to-host-py-then-find-run-slice-{k}", _stolen(k))

# ============================================================================ PKGARG: --package values that are paths
# (aimed only at the canary folder: a recon that writes or deletes through them damages nothing else)
PKGARG = {"dotdot": lambda c: "..", "up-to-host": lambda c: "../" * 12 + c.H[1:], "slash": lambda c: "pkg/../..",
          "absolute-host": lambda c: c.H, "dot": lambda c: "."}
for pname, pfn in PKGARG.items():
    add("pkgarg", pname, lambda c, pfn=pfn: {"src": img(c, [hg.base_layer()], "da"), "package": pfn(c)}, "any")

# ============================================================================ CRAFTED: hostile snapshot folders given to other verbs


def _crafted(mutate, verb):
    def b(c):
        # a real snapshot first, then edited as an attacker who ships a snapshot folder would
        src = img(c, [hg.base_layer()], "da")
        rc, so, se, _ = run_cli(["snapshot", src, "--package", PKG, "--out", str(c.root / "given"), "--name", "g",
                                 "--quiet"], c.cwd, base_env(c))
        assert rc == 0, se
        g = c.root / "given" / "g"
        man = json.loads((g / "manifest.json").read_text())
        mutate(c, g, man)
        (g / "manifest.json").write_text(json.dumps(man))
        return {"verb": verb(c, g)}
    return b


def _m_key_up(c, g, man):
    man["files"]["../../../host/canary.txt"] = {"kind": "file", "size": 3, "layer": 0, "sha256": "0" * 64}
    man["files"][f"{PKG}/" + "../" * 6 + c.H[1:] + "/secret.txt"] = {"kind": "file", "size": 3, "layer": 0,
                                                                     "sha256": "0" * 64}


def _m_link_host(c, g, man):
    os.unlink(g / "src" / PKG / "mod.py")
    os.symlink(c.host / PKG / "mod.py", g / "src" / PKG / "mod.py")


def _m_src_link(c, g, man):
    shutil.rmtree(g / "src")
    os.symlink(c.host, g / "src")


def _m_package_name(c, g, man):
    man["package"]["name"] = "../../host"


CRAFTED = {
    "manifest-key-traversal-verify": (_m_key_up, lambda c, g: ["snapshot", "verify", str(g)]),
    "manifest-key-traversal-index": (_m_key_up, lambda c, g: ["index", str(g), "-j", "0"]),
    "manifest-key-traversal-chain-keep": (_m_key_up, lambda c, g: [
        "chain", str(g), "--to", f"{PKG}.mod:f", "--keep", "3", "--out", str(c.out)]),
    "file-replaced-by-host-link-find": (_m_link_host, lambda c, g: ["find", str(g), "-e", "return", "--json"]),
    "file-replaced-by-host-link-chain-keep": (_m_link_host, lambda c, g: [
        "chain", str(g), "--to", f"{PKG}.mod:f", "--keep", "3", "--out", str(c.out)]),
    "src-is-link-to-host-index": (_m_src_link, lambda c, g: ["index", str(g), "-j", "0"]),
    "package-name-traversal-chain-keep": (_m_package_name, lambda c, g: [
        "chain", str(g), "--to", f"{PKG}.mod:f", "--keep", "3", "--out", str(c.out)]),
    "chain-keep-force-over-name-linked-to-host": (
        lambda c, g, man: (c.out.mkdir(), (c.out / "kept").symlink_to(c.host / "sub")),
        lambda c, g: ["chain", str(g), "--to", f"{PKG}.mod:f", "--keep", "3", "--out", str(c.out), "--name", "kept",
                      "--force"]),
    "chain-keep-force-out-is-host": (lambda c, g, man: None, lambda c, g: [
        "chain", str(g), "--to", f"{PKG}.mod:f", "--keep", "3", "--out", c.H, "--name", "sub", "--force"]),
}
CRAFTED_CASES = [(k, _crafted(m, v)) for k, (m, v) in CRAFTED.items()]


@pytest.mark.parametrize("cid,build", CRAFTED_CASES, ids=[k for k, _ in CRAFTED_CASES])
def test_crafted_snapshot_folder(cid: str, build, tmp_path: Path) -> None:
    c = fresh_ctx(tmp_path)
    args = build(c)["verb"]
    host_before = tree_state(c.host)
    rc, so, se, dt = run_cli(args, c.cwd, base_env(c))
    problems: list[str] = []
    if rc is None:
        problems.append("hang")
    elif rc < 0 or rc not in OK_CODES:
        problems.append(f"exit status {rc}")
    if not (args[:2] == ["snapshot", "verify"] and rc == 1):  # verify: exit 1 = differs (documented)
        check_error_output(rc, se, problems)
    problems += [f"HOST CHANGED: {d}" for d in diff_state(host_before, tree_state(c.host))]
    if c.token in so + se:
        problems.append("host file bytes printed (read through the crafted snapshot)")
    if rc == 0 and c.out.exists():
        snapshot_checks(c, c.out, problems)
    log_result("crafted-" + cid, rc, se, problems)
    first = " | ".join([ln for ln in se.splitlines() if ln.strip()][:2])[:300]
    assert not problems, f"rc={rc} t={dt:.1f}s stderr: {first!r}\n  - " + "\n  - ".join(problems)


# Variants left out of the default run to keep it near 4 minutes on a loaded 2-core machine; set
# RECON_HOSTILE_FULL=1 to run the whole corpus.
_EXTENDED_IDS = """
traversal-dotdot-dad traversal-dotdot-ociz traversal-dotdot-ocia traversal-absolute-dad traversal-absolute-ociz
traversal-absolute-ocia traversal-dot-dotdot-oci traversal-pkg-then-up-oci traversal-pkg-up-tmp-oci traversal-dir-up-to-host-oci
traversal-pkg-zigzag-oci traversal-nested-layer2-ociz traversal-backslash-name
symlink-abs-dir-then-file-ociz symlink-rel-up-dir-then-file-oci symlink-chain-then-file-oci symlink-root-link-da
symlink-link-then-symlink-da symlink-empty-target-oci symlink-long-target-da symlink-pkg-root-is-link-abs-oci
symlink-pkg-root-is-link-rel-da symlink-issue-pythonpath-through-link-ociz symlink-pythonpath-self-loop
symlink-link-lower-file-upper-oci
duplicate-pkgroot-file-sym-dir-oci duplicate-pkgroot-dir-file-sym-oci duplicate-pkgroot-sym-file-dir-oci
duplicate-pkgroot-sym-dir-file-oci duplicate-inside-file-dir duplicate-inside-dir-file duplicate-inside-sym-sym
hardlink-abs-host-oci hardlink-up-host-oci hardlink-through-symlinked-dir-oci hardlink-to-itself-da
whiteout-up-to-host-oci whiteout-through-link-oci whiteout-whiteout-dotdotdot whiteout-whiteout-as-dir-with-child
special-contiguous-in-pkg special-gnu-volume-V special-fifo-outside
hugesize-octal-8GiB-short-data-oci hugesize-base256-negative
truncated-zstd-layer-minus-3 truncated-gzip-layer-no-trailer
corrupt-tar-trailing-garbage corrupt-tar-no-end-blocks corrupt-empty-blob-gzip
medialie-says-zstd-is-gzip medialie-says-gzip-is-zstd
longname-dot-only-entries longname-double-slash longname-pax-zero-record-length longname-pax-non-numeric-length
longname-deep-1200-outside longname-pax-empty-path
checksum-checksum-not-octal
manifest-manifest-null manifest-manifest-nested-obj-10000 manifest-layers-int-entry manifest-config-key-int
manifest-env-ints manifest-labels-nested-10000 manifest-manifest-huge-whitespace manifest-image-version-dotdot-noname
manifest-outer-duplicate-manifest manifest-env-a-string manifest-config-config-a-list manifest-manifest-object
oci-layer-digest-alg-uppercase oci-layer-digest-empty oci-layer-digest-newline-in-hex oci-layer-digest-int
oci-layer-size-negative oci-index-nesting-3-legit oci-config-a-list oci-oci-layout-file-missing
oci-manifest-mediatype-says-index oci-manifest-layers-not-list oci-missing-config-blob oci-index-manifests-dict
oci-archive-blob-hardlink-to-host
wheel-backslash-traversal wheel-fifo-mode-entry wheel-dir-entry-with-data wheel-nul-in-name wheel-version-dotdot-noname
wheel-version-newline-noname wheel-symlink-entry-rel-up wheel-empty-file wheel-traversal-pkg-dotdot
wheel-size-lie-compressed-smaller
outdir-name-empty outdir-out-is-dangling-symlink-into-host
dirsrc-self-loop
scale-1000-layers scale-same-layer-listed-500-times jsontype-index-annotations-a-list jsontype-layer-size-string
jsontype-da-repotags-int jsontype-config-diff-ids-a-dict jsontype-index-platform-a-list
manifest-layers-a-string manifest-labels-a-list manifest-config-missing
oci-layer-digest-short-hex oci-missing-manifest-blob oci-index-missing oci-config-nested-10000
wheel-empty-zip wheel-truncated-half wheel-not-a-zip wheel-deep-1200
edge-whiteout-with-content edge-gzip-4MiB-fname-header edge-pythonpath-relative-up
pkgarg-dot pkgarg-slash readback-abs-link-to-host-py-then-find-run-slice-oci
hugesize-pax-size-negative hugesize-max-total-size-2K
outdir-name-dotdot outdir-name-absolute-host
traversal-dir-up-to-host-da traversal-gnu-longlink-up
symlink-chain-then-file-da symlink-empty-target-da
duplicate-pkgroot-file-dir-sym-oci
whiteout-whiteout-dotdot-name whiteout-whiteout-as-symlink
longname-pax-path-80KiB-outside
traversal-up-to-host-ociz traversal-pkg-zigzag-da traversal-dot-dotdot-da
symlink-abs-dir-then-file-dad symlink-loop-da symlink-usr-local-is-link-same-layer duplicate-inside-sym-dir
hardlink-forward-ref-da hardlink-empty-target-da whiteout-whiteout-empty-name whiteout-opaque-up-to-host
special-gnu-sparse-S special-unknown-type-Z hugesize-size-not-octal truncated-plain-layer-oci-half
corrupt-zstd-garbage-body longname-name-with-newline longname-pax-nul-in-path longname-gnu-longname-80KiB
checksum-one-zero-block-then-more manifest-manifest-empty-list manifest-layers-a-string manifest-layer-not-a-tar
manifest-diff-ids-malformed oci-layer-digest-no-colon oci-layer-digest-alg-plus-evil oci-index-not-json
oci-config-not-json oci-layer-blob-is-a-folder oci-platform-only-arm64 wheel-empty-zip wheel-chr-mode-entry
wheel-stored-size-lie wheel-duplicate-names wheel-zip-bomb-outside-pkg wheel-component-300
outdir-name-up-to-host-sub-force dirsrc-rel-up-symlink-to-host
"""
EXTENDED = set(_EXTENDED_IDS.split())
_unknown = EXTENDED - {c.id for c in CASES}
assert not _unknown, _unknown
if not os.environ.get("RECON_HOSTILE_FULL"):
    CASES = [c for c in CASES if c.id not in EXTENDED]


@pytest.mark.parametrize("cs", CASES, ids=[c.id for c in CASES])
def test_snapshot_hostile(cs: Case, tmp_path: Path) -> None:
    run_case(cs, tmp_path)


def test_corpus_size() -> None:
    assert len(CASES) >= 150, len(CASES)
    assert len(RUN_CASES) >= 20, len(RUN_CASES)


# ============================================================================ FILES: other untrusted files (server logs, model configs)
LOGLINE = "(APIServer pid=1) INFO 06-11 08:02:17 [api_utils.py:327] vLLM server version 0.29.0, serving model /m\n"
OTHER = {
    "logs-ansi-escapes": lambda c, snap: ["logs", _w(c, "a.log", LOGLINE + "(APIServer pid=1) ERROR 06-11 08:02:18 "
                                          "[x.py:1] boom \x1b]0;pwned\x07\x1b[2J\x1b[31mred\n")],
    "logs-20MiB-single-line": lambda c, snap: ["logs", _w(c, "b.log", LOGLINE + "(APIServer pid=1) INFO 06-11 "
                                               "08:02:18 [x.py:1] " + "y" * (20 << 20) + "\n")],
    "logs-binary-garbage": lambda c, snap: ["logs", _w(c, "c.log", os.urandom(1 << 20))],
    "logs-20k-startup-lines-20s": lambda c, snap: ["logs", _w(c, "d.log", LOGLINE * 20000)],
    "logs-100k-ordinary-lines-20s": lambda c, snap: ["logs", _w(c, "e.log", LOGLINE + "(APIServer pid=1) INFO 06-11 "
                                                     "08:02:26 [model.py:1750] Using max model len 272000\n" * 100000)],
    "run-config-nested-10000": lambda c, snap: ["run", str(snap), f"{PKG}.evil:getuid", "--config",
                                               _w(c, "config.json", hg.nested_json(10000, "obj")), *_RUNARGS(c)],
    "run-config-not-json": lambda c, snap: ["run", str(snap), f"{PKG}.evil:getuid", "--config",
                                           _w(c, "config.json", b"{nope"), *_RUNARGS(c)],
    "run-config-a-list": lambda c, snap: ["run", str(snap), f"{PKG}.evil:getuid", "--config",
                                         _w(c, "config.json", b"[1, 2]"), *_RUNARGS(c)],
    "run-config-50MiB": lambda c, snap: ["run", str(snap), f"{PKG}.evil:getuid", "--config",
                                        _w(c, "config.json", json.dumps({"a": "z" * (50 << 20)})), *_RUNARGS(c)],
    "run-config-symlink-to-etc-shadow": lambda c, snap: ["run", str(snap), f"{PKG}.evil:getuid", "--config",
                                                        _l(c, "config.json", "/etc/shadow"), *_RUNARGS(c)],
}


def _w(c: Ctx, name: str, data) -> str:
    p = c.inp / name
    p.write_bytes(data if isinstance(data, bytes) else data.encode(errors="surrogateescape"))
    return str(p)


def _l(c: Ctx, name: str, target: str) -> str:
    p = c.inp / name
    p.symlink_to(target)
    return str(p)


def _RUNARGS(c: Ctx) -> list[str]:  # noqa: N802
    return ["--json", "--arg", "host=" + json.dumps(c.H), "--arg", "token=" + json.dumps(c.token), "--arg",
            'snap="x"', "--arg", "port=1", "--arg", 'home="/root"']


@pytest.mark.parametrize("oid", list(OTHER), ids=list(OTHER))
def test_other_untrusted_files(oid: str, run_snapshot: Path, tmp_path: Path) -> None:
    c = fresh_ctx(tmp_path)
    args = OTHER[oid](c, run_snapshot)
    host_before = tree_state(c.host)
    limit = 20 if oid.endswith("-20s") else 60
    rc, so, se, dt = run_cli(args, c.cwd, base_env(c), timeout=limit)
    problems: list[str] = []
    if rc is None:
        problems.append(f"no exit within {limit} s")
    elif rc < 0 or rc not in OK_CODES | {6}:
        problems.append(f"exit status {rc}")
    check_error_output(rc, se, problems)
    if "\x1b" in so + se:
        problems.append("terminal escape sequence from the input printed: "
                        + repr((so + se)[(so + se).find("\x1b"):][:40]))
    shadow = Path("/etc/shadow").read_text().splitlines()[0]
    if shadow in so + se:
        problems.append("/etc/shadow bytes printed")
    problems += [f"HOST CHANGED: {d}" for d in diff_state(host_before, tree_state(c.host))]
    log_result("files-" + oid, rc, se, problems)
    first = " | ".join([ln for ln in se.splitlines() if ln.strip()][:2])[:300]
    assert not problems, f"rc={rc} t={dt:.1f}s stderr: {first!r}\n  - " + "\n  - ".join(problems)


# ============================================================================ RUN: untrusted code under `recon run`

EVIL = r'''
def shadow(host, token, snap, port, home):
    return open("/etc/shadow").read()


def proc_environ(host, token, snap, port, home):
    import os
    out = []
    me = os.getpid()
    for p in ["1", str(os.getppid())] + [d for d in os.listdir("/proc") if d.isdigit()]:
        if p == str(me):
            continue
        try:
            with open(f"/proc/{p}/environ", "rb") as f:
                out.append(f.read().decode(errors="replace"))
        except OSError:
            pass
    return "\n".join(out)


def own_environ(host, token, snap, port, home):
    import os
    return dict(os.environ)


def read_host_secret(host, token, snap, port, home):
    return open(host + "/secret.txt").read()


def read_home_secret(host, token, snap, port, home):
    return open(home + "/.recon_hostile_secret_" + token).read()


def write_canary(host, token, snap, port, home):
    with open(host + "/canary.txt", "w") as f:
        f.write("owned")
    return "written"


def write_new(host, token, snap, port, home):
    with open(host + "/new.txt", "w") as f:
        f.write("owned")
    return "written"


def remove_canary(host, token, snap, port, home):
    import os, shutil
    os.remove(host + "/canary.txt")
    shutil.rmtree(host + "/sub")
    return "removed"


def rename_canary(host, token, snap, port, home):
    import os
    os.rename(host + "/secret.txt", host + "/renamed.txt")
    return "renamed"


def dir_fd_write(host, token, snap, port, home):
    import os
    fd = os.open(host, os.O_RDONLY | os.O_DIRECTORY)
    w = os.open("dirfd.txt", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd)
    os.write(w, b"owned")
    os.close(w)
    os.unlink("canary.txt", dir_fd=fd)
    return "written"


def proc_self_cwd(host, token, snap, port, home):
    p = "/proc/self/cwd/" + "../" * 30 + host[1:] + "/cwd_evil.txt"
    with open(p, "w") as f:
        f.write("owned")
    return "written"


def proc_ppid_cwd(host, token, snap, port, home):
    import os
    p = f"/proc/{os.getppid()}/cwd/recon_evil_{token}"
    with open(p, "w") as f:
        f.write("owned")
    return os.path.realpath(p)


def os_system(host, token, snap, port, home):
    import os
    return os.system(f"echo owned > {host}/system.txt; rm -f {host}/canary.txt")


def subprocess_run(host, token, snap, port, home):
    import subprocess
    return subprocess.run(["sh", "-c", f"echo owned > {host}/subprocess.txt"]).returncode


def posix_spawn(host, token, snap, port, home):
    import os
    pid = os.posix_spawn("/bin/sh", ["sh", "-c", f"echo owned > {host}/spawn.txt"], {})
    return os.waitpid(pid, 0)[1]


def fork_exec_raw(host, token, snap, port, home):
    import _posixsubprocess, os
    r, w = os.pipe()
    pid = _posixsubprocess.fork_exec(
        [b"/bin/sh", b"-c", f"echo owned > {host}/forkexec.txt".encode()], [b"/bin/sh"], True, (w,), None, None,
        -1, -1, -1, -1, -1, -1, r, w, True, False, -1, None, None, None, -1, None, False)
    os.close(w)
    os.waitpid(pid, 0)
    return "spawned"


def ctypes_system(host, token, snap, port, home):
    import ctypes
    libc = ctypes.CDLL(None)
    return libc.system(f"echo owned > {host}/ctypes.txt".encode())


def clear_guard_then_system(host, token, snap, port, home):
    import gc, os
    names = {"open", "os.system", "subprocess.Popen", "os.posix_spawn", "os.fork", "socket.connect", "os.exec"}
    for o in gc.get_objects():
        try:
            if isinstance(o, (set, dict)) and 0 < len(o) < 5000 and any(isinstance(k, str) and k in names for k in o):
                o.clear()
            elif isinstance(o, list) and 0 < len(o) < 5000 and any(callable(x) for x in o) and \
                    any(getattr(x, "__name__", "").startswith(("audit", "_audit", "guard", "_guard", "hook"))
                        for x in o):
                o.clear()
        except Exception:
            pass
    with open(host + "/afterclear.txt", "w") as f:
        f.write("owned")
    os.system(f"echo owned > {host}/afterclear2.txt")
    return "done"


def fork_bomb(host, token, snap, port, home):
    import os, time
    n = 0
    for i in range(64):
        pid = os.fork()
        if pid == 0:
            time.sleep(2)
            try:
                with open(f"{host}/fork_{i}.txt", "w") as f:
                    f.write("alive")
            finally:
                os._exit(0)
        n += 1
    return n


def setsid_double_fork(host, token, snap, port, home):
    import os, time
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(1.5)
            try:
                with open(host + "/late.txt", "w") as f:
                    f.write("outlived the run")
                os.remove(host + "/canary.txt")
            finally:
                os._exit(0)
        os._exit(0)
    os.waitpid(pid, 0)
    return "forked"


def tcp_connect(host, token, snap, port, home):
    import socket
    s = socket.create_connection(("127.0.0.1", port), timeout=3)
    s.sendall(token.encode())
    s.close()
    return "connected"


def unix_abstract_connect(host, token, snap, port, home):
    import socket
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(3)
    s.connect("\0recon-hostile-" + token)
    s.sendall(token.encode())
    s.close()
    return "connected"


def setuid_root(host, token, snap, port, home):
    import os
    try:
        os.setuid(0)
    except Exception:
        pass
    return os.getuid()


def getuid(host, token, snap, port, home):
    import os
    return [os.getuid(), os.geteuid()]


def huge_memory(host, token, snap, port, home):
    b = b"\1" * (1 << 30)
    return "allocated %d" % len(b)


def infinite_loop(host, token, snap, port, home):
    while True:
        pass


def ignore_sigterm_loop(host, token, snap, port, home):
    import signal
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        pass


def write_own_snapshot(host, token, snap, port, home):
    import os
    for root, dirs, files in os.walk(snap):
        for n in files:
            try:
                with open(os.path.join(root, n), "a") as f:
                    f.write("\n# tampered\n")
            except OSError:
                pass
    with open(snap + "/src/pkg/evil.py", "a") as f:
        f.write("\n# tampered\n")
    return "tampered"


def write_python_site(host, token, snap, port, home):
    import sysconfig
    p = sysconfig.get_paths()["purelib"] + f"/zz_recon_evil_{token}.pth"
    with open(p, "w") as f:
        f.write("import os\n")
    return p


def write_home(host, token, snap, port, home):
    with open(home + f"/.recon_evil_{token}", "w") as f:
        f.write("owned")
    return "written"


def kill_sleeper(host, token, snap, port, home):
    import os, signal
    os.kill(port, signal.SIGKILL)
    return "killed"


def write_dev_shm(host, token, snap, port, home):
    with open(f"/dev/shm/recon_evil_{token}", "w") as f:
        f.write("owned")
    return "written"


def write_var_tmp(host, token, snap, port, home):
    with open(f"/var/tmp/recon_evil_{token}", "w") as f:
        f.write("owned")
    return "written"


def proc_1_root(host, token, snap, port, home):
    with open("/proc/1/root" + host + "/p1root.txt", "w") as f:
        f.write("owned")
    return "written"


def cache_poison(host, token, snap, port, home):
    import os
    p = os.path.join(os.path.dirname(host), "cache", "poison.txt")
    with open(p, "w") as f:
        f.write("poisoned")
    return "written"


def chmod_canary(host, token, snap, port, home):
    import os
    os.chmod(host + "/canary.txt", 0o777)
    os.utime(host + "/canary.txt", (0, 0))
    os.symlink("/etc/shadow", host + "/sl")
    return "changed"


def huge_return(host, token, snap, port, home):
    return "x" * (200 << 20)


def deep_return(host, token, snap, port, home):
    v = []
    for _ in range(200000):
        v = [v]
    return v


def huge_stdout(host, token, snap, port, home):
    import sys
    chunk = "y" * (1 << 20)
    for _ in range(200):
        sys.stdout.write(chunk)
    return "printed"


def _defeat_guard():
    """Best effort against an in-process guard: clear its tables, neuter its hook functions."""
    import gc
    names = {"open", "os.system", "subprocess.Popen", "os.posix_spawn", "os.fork", "socket.connect", "os.exec",
             "os.remove", "os.unlink", "os.symlink", "os.rename", "os.chmod", "os.kill"}
    noop = (lambda *a, **k: None).__code__
    for o in gc.get_objects():
        try:
            if isinstance(o, (set, dict)) and 0 < len(o) < 5000 and any(isinstance(k, str) and k in names for k in o):
                o.clear()
            elif callable(o) and hasattr(o, "__code__") and any(
                    w in o.__name__.lower() for w in ("audit", "guard", "hook", "refuse", "check")) and \
                    "evil" not in (o.__module__ or ""):
                o.__code__ = noop.replace(co_freevars=o.__code__.co_freevars) if o.__code__.co_freevars else noop
        except Exception:
            pass


def patch_guard_then_write(host, token, snap, port, home):
    _defeat_guard()
    with open(host + "/patched.txt", "w") as f:
        f.write("owned")
    import os
    os.remove(host + "/canary.txt")
    return "written"


def ctypes_open_write(host, token, snap, port, home):
    import ctypes, os
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.open((host + "/ctypes_open.txt").encode(), os.O_WRONLY | os.O_CREAT, 0o644)
    if fd >= 0:
        libc.write(fd, b"owned", 5)
        libc.close(fd)
    libc.unlink((host + "/canary.txt").encode())
    return fd


def report_symlink(host, token, snap, port, home):
    import os
    _defeat_guard()
    base = os.path.dirname(os.getcwd())
    if not os.path.basename(base).startswith("recon-run-"):
        return "no run folder"
    for root, dirs, files in os.walk(base):
        if root.count("/") - base.count("/") > 2:
            continue
        for n in files:
            p = os.path.join(root, n)
            try:
                os.unlink(p)
                os.symlink(host + "/secret.txt", p)
            except OSError:
                pass
    for n in ("report.json", "result.json", "out.json", "report", "result"):
        try:
            os.symlink(host + "/secret.txt", os.path.join(base, n))
        except OSError:
            pass
    os._exit(0)


def leaked_fds(host, token, snap, port, home):
    import os, stat
    found = []
    for fd in range(3, 256):
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = "?"
        found.append((fd, target))
        if stat.S_ISDIR(st.st_mode):
            try:
                w = os.open(f"escape_{token}", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd)
                os.close(w)
                found.append((fd, "WROTE"))
                os.open(f"../escape_{token}", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd)
            except OSError:
                pass
    return found


def read_work_tree(host, token, snap, port, home):
    return open(home).read()


def fork_after_defeat(host, token, snap, port, home):
    _defeat_guard()
    return fork_bomb(host, token, snap, port, home)


def setsid_after_defeat(host, token, snap, port, home):
    _defeat_guard()
    return setsid_double_fork(host, token, snap, port, home)


def forge_report(host, token, snap, port, home):
    import json, os
    forged = json.dumps({"ok": True, "value": "FORGED", "error": None, "refused": [], "stdout": "", "stderr": ""})
    try:
        open("/etc/shadow").read()
    except Exception:
        pass
    base = os.path.dirname(os.getcwd())
    # only ever inside recon's own run folder (never walk a real folder if the sandbox is missing)
    walk = os.walk(base) if os.path.basename(base).startswith("recon-run-") else []
    for root, dirs, files in walk:
        if root.count("/") - base.count("/") > 2:
            continue
        for n in files:
            try:
                with open(os.path.join(root, n), "w") as f:
                    f.write(forged)
            except OSError:
                pass
    for fd in range(1, 64):
        try:
            os.write(fd, (forged + "\n").encode())
        except OSError:
            pass
    os._exit(0)
'''

RUN_CASES: list[tuple[str, dict]] = [
    ("read-etc-shadow", {"fn": "shadow", "secret": "shadow"}),
    ("read-proc-environ-of-others", {"fn": "proc_environ", "secret": "env"}),
    ("own-environ-has-parent-secret", {"fn": "own_environ", "secret": "env"}),
    ("read-host-tmp-secret", {"fn": "read_host_secret", "secret": "token"}),
    ("read-home-secret", {"fn": "read_home_secret", "secret": "home"}),
    ("write-canary-open", {"fn": "write_canary"}),
    ("write-new-file-open", {"fn": "write_new"}),
    ("remove-and-rmtree", {"fn": "remove_canary"}),
    ("rename", {"fn": "rename_canary"}),
    ("os-open-dir-fd", {"fn": "dir_fd_write"}),
    ("proc-self-cwd-dotdot", {"fn": "proc_self_cwd"}),
    ("proc-ppid-cwd", {"fn": "proc_ppid_cwd"}),
    ("os-system", {"fn": "os_system"}),
    ("subprocess-run", {"fn": "subprocess_run"}),
    ("os-posix-spawn", {"fn": "posix_spawn"}),
    ("posixsubprocess-fork-exec", {"fn": "fork_exec_raw"}),
    ("ctypes-libc-system", {"fn": "ctypes_system"}),
    ("clear-guard-then-write", {"fn": "clear_guard_then_system"}),
    ("fork-bomb-64-bounded", {"fn": "fork_bomb", "late": True}),
    ("setsid-double-fork-late-write", {"fn": "setsid_double_fork", "late": True}),
    ("tcp-connect-localhost", {"fn": "tcp_connect", "net": "tcp"}),
    ("unix-abstract-connect", {"fn": "unix_abstract_connect", "net": "unix"}),
    ("setuid-0", {"fn": "setuid_root", "uid": True}),
    ("getuid-is-root", {"fn": "getuid", "uid": True}),
    ("legit-run-with-tmpdir-under-0700-folder", {"fn": "getuid", "uid": True, "tmpdir_0700": True, "must_ok": True}),
    ("huge-memory-1GiB-limit-256M", {"fn": "huge_memory", "args": ["--memory", "256"], "no_value": "allocated"}),
    ("infinite-loop-timeout-3", {"fn": "infinite_loop", "args": ["--timeout", "3"], "must_not_ok": True}),
    ("sigterm-ignoring-loop-timeout-3", {"fn": "ignore_sigterm_loop", "args": ["--timeout", "3"], "must_not_ok": True}),
    ("write-own-snapshot", {"fn": "write_own_snapshot"}),
    ("write-python-site-pth", {"fn": "write_python_site", "site": True}),
    ("write-home", {"fn": "write_home"}),
    ("forge-result-report", {"fn": "forge_report", "no_value": "FORGED"}),
    ("write-through-inherited-dir-fds", {"fn": "leaked_fds", "fds": True}),
    ("kill-a-host-process", {"fn": "kill_sleeper", "sleeper": True}),
    ("read-a-file-of-the-work-tree", {"fn": "read_work_tree", "home_arg": str(Path(__file__).resolve()),
                                      "secret": "worktree"}),
    ("fork-64-after-defeating-guard", {"fn": "fork_after_defeat", "late": True}),
    ("setsid-daemon-after-defeating-guard", {"fn": "setsid_after_defeat", "late": True}),
    ("patch-guard-code-then-write", {"fn": "patch_guard_then_write"}),
    ("ctypes-libc-open-write-unlink", {"fn": "ctypes_open_write"}),
    ("report-files-replaced-by-links-to-host-secret", {"fn": "report_symlink", "secret": "token"}),
    ("write-dev-shm", {"fn": "write_dev_shm", "paths": ["/dev/shm/recon_evil_{token}"]}),
    ("write-var-tmp", {"fn": "write_var_tmp", "paths": ["/var/tmp/recon_evil_{token}"]}),
    ("write-via-proc-1-root", {"fn": "proc_1_root"}),
    ("poison-recon-cache", {"fn": "cache_poison", "poison": True}),
    ("chmod-utime-symlink-in-host", {"fn": "chmod_canary"}),
    ("huge-return-value-200MiB", {"fn": "huge_return"}),
    ("deep-return-value-200000", {"fn": "deep_return"}),
    ("huge-stdout-200MiB", {"fn": "huge_stdout"}),
]


@pytest.fixture(scope="module")
def run_snapshot(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("runsnap")
    src = root / "site" / PKG
    src.mkdir(parents=True)
    (src / "__init__.py").write_text("")
    (src / "evil.py").write_text(EVIL)
    c = Ctx(root, "x")
    (root / "cwd").mkdir()
    rc, so, se, _ = run_cli(["snapshot", "dir:" + str(root / "site"), "--package", PKG, "--out", str(root / "out"),
                             "--name", "rs", "--quiet"], root / "cwd", base_env(c))
    assert rc == 0, se
    return root / "out" / "rs"


@pytest.mark.parametrize("rid,spec", RUN_CASES, ids=[r[0] for r in RUN_CASES])
def test_run_untrusted(rid: str, spec: dict, run_snapshot: Path, tmp_path: Path) -> None:
    c = fresh_ctx(tmp_path)
    home = Path(os.environ.get("HOME", "/root"))
    home_secret = home / f".recon_hostile_secret_{c.token}"
    home_secret.write_text(f"homesecret{c.token}\n")
    site_pth = Path(sysconfig.get_paths()["purelib"]) / f"zz_recon_evil_{c.token}.pth"
    snap_before = tree_state(run_snapshot)
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    tcp.setblocking(False)
    ux = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ux.bind("\0recon-hostile-" + c.token)
    ux.listen(8)
    ux.setblocking(False)
    port = tcp.getsockname()[1]
    sleeper = None
    if spec.get("sleeper"):
        sleeper = subprocess.Popen(["sleep", "60"])
        port = sleeper.pid
    poison = c.root / "cache" / "poison.txt"
    if spec.get("poison"):
        poison.parent.mkdir(parents=True, exist_ok=True)
        poison.write_text("clean\n")
    watch = [Path(x.format(token=c.token)) for x in spec.get("paths", [])]
    args = ["run", str(run_snapshot), f"{PKG}.evil:{spec['fn']}", "--json",
            "--arg", "host=" + json.dumps(c.H), "--arg", "token=" + json.dumps(c.token),
            "--arg", "snap=" + json.dumps(str(run_snapshot)), "--arg", f"port={port}",
            "--arg", "home=" + json.dumps(spec.get("home_arg", str(home)))] + spec.get(
                "args", ["--timeout", "15", "--memory", "1024"])
    host_before = tree_state(c.host)
    if spec.get("tmpdir_0700"):
        scratch = c.root / "tmp"  # under pytest's 0700 folder, like a TMPDIR under $HOME
        scratch.mkdir()
    else:
        scratch = Path(tempfile.mkdtemp(prefix="hostile-tmpdir-", dir="/tmp"))
        scratch.chmod(0o755)
    env = base_env(c)
    env["TMPDIR"] = str(scratch)  # recon's run folders land here: leftovers are ours, not another user's
    top_before = set(os.listdir(c.root)) | {"cache"}
    problems: list[str] = []
    try:
        rc, so, se, dt = run_cli(args, c.cwd, env, timeout=45)
        if sleeper is not None and sleeper.poll() is not None:
            problems.append("the untrusted code killed a host process (the test's sleeper)")
        if spec.get("poison") and poison.read_text() != "clean\n":
            problems.append("the untrusted code rewrote a file in recon's cache folder")
        for w in watch:
            if os.path.lexists(w):
                problems.append(f"HOST CHANGED: {w} created")
                os.unlink(w)
        if spec.get("late"):
            time.sleep(3.5)
        if rc is None:
            problems.append("hang: recon run did not return within 45 s")
        elif rc < 0:
            problems.append(f"recon run killed by signal {-rc}")
        check_error_output(rc, se, problems)
        value, ok = None, None
        if rc == 0:
            try:
                res = json.loads(so)
                value, ok = res.get("value"), res.get("ok")
            except ValueError:
                problems.append(f"--json output is not JSON: {so[:200]!r}")
        both = so + se
        secret = spec.get("secret")
        if secret == "shadow":
            first = Path("/etc/shadow").read_text().splitlines()[0]
            if first in both:
                problems.append(f"/etc/shadow read by the untrusted code (saw {first[:30]!r})")
        elif secret == "env" and f"envsecret{c.token}" in both:
            problems.append("the parent's environment secret reached the untrusted code")
        elif secret == "token" and f"secret {c.token}" in both:
            problems.append("a host file under /tmp was read by the untrusted code")
        elif secret == "worktree" and "MARKER: this line proves the work tree was read" in both:
            problems.append("a file of the host's work tree (/work/...) was read by the untrusted code")
        elif secret == "home" and f"homesecret{c.token}" in both:
            problems.append("a file in $HOME was read by the untrusted code")
        if spec.get("uid") and rc == 0 and ok:
            uids = value if isinstance(value, list) else [value]
            if 0 in uids:
                problems.append(f"untrusted code runs as root (uid {value})")
        if spec.get("no_value") and rc == 0 and isinstance(value, str) and spec["no_value"] in value:
            problems.append(f"effect not prevented: returned {value[:80]!r}")
        if spec.get("fds") and rc == 0 and isinstance(value, list):
            outside = [v for v in value if isinstance(v, list) and isinstance(v[1], str)
                       and v[1].startswith((str(c.root), "/work", "/root"))]
            if any(isinstance(v, list) and v[1] == "WROTE" for v in value):
                problems.append(f"the untrusted code created a file through an inherited folder descriptor: {value}")
            elif outside:
                problems.append(f"host descriptors visible to the untrusted code: {outside[:4]}")
        if spec.get("must_ok") and not (rc == 0 and ok):
            problems.append("a harmless function did not run (TMPDIR inside a 0700 folder)")
        if spec.get("must_not_ok") and rc == 0 and ok:
            problems.append("an endless function reported success")
        if spec.get("net"):
            srv = tcp if spec["net"] == "tcp" else ux
            try:
                conn, _ = srv.accept()
                conn.close()
                problems.append(f"network: the untrusted code connected to the test's {spec['net']} socket")
            except (BlockingIOError, OSError):
                pass
        problems += [f"HOST CHANGED: {d}" for d in diff_state(host_before, tree_state(c.host))]
        problems += [f"SNAPSHOT CHANGED: {d}" for d in diff_state(snap_before, tree_state(run_snapshot))]
        if os.listdir(scratch):
            problems.append(f"run scratch left in $TMPDIR after the run: {sorted(os.listdir(scratch))[:4]}")
        new_top = set(os.listdir(c.root)) - top_before
        if new_top:
            problems.append(f"HOST CHANGED: new entries in the case folder: {sorted(new_top)}")
        if os.listdir(c.cwd):
            problems.append(f"HOST CHANGED: written into recon's working folder: {os.listdir(c.cwd)}")
        for p in (site_pth, home / f".recon_evil_{c.token}", Path(c.evil_tmp), Path(f"/recon_evil_{c.token}")):
            if os.path.lexists(p):
                problems.append(f"HOST CHANGED: {p} created")
        if spec["fn"] == "proc_ppid_cwd" and isinstance(value, str) and os.path.exists(value) and \
                os.path.basename(value) == f"recon_evil_{c.token}":
            problems.append(f"HOST CHANGED: {value} written through /proc/<ppid>/cwd")
            os.unlink(value)
    finally:
        tcp.close()
        ux.close()
        if sleeper is not None and sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()
        for w in watch:
            if os.path.lexists(w):
                os.unlink(w)
        if not spec.get("tmpdir_0700"):
            shutil.rmtree(scratch, ignore_errors=True)
        for p in (home_secret, site_pth, home / f".recon_evil_{c.token}", Path(f"/recon_evil_{c.token}")):
            if os.path.lexists(p):
                os.unlink(p)
    log_result("run-" + rid, rc, se, problems)
    first = " | ".join([ln for ln in se.splitlines() if ln.strip()][:2])[:300] if rc is not None else ""
    summary = f"rc={rc} t={dt:.1f}s stderr: {first!r}"
    assert not problems, summary + "\n  - " + "\n  - ".join(problems)
