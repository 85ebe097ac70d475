"""Issue 36, item 5: text from outside never reaches the terminal raw.

Written from the issue's text: ESC and C1 controls (U+009B CSI, U+009D OSC, U+0090 DCS,
U+0085 NEL), the other C0 controls, DEL and bidirectional overrides, arriving in server
logs (also as repr/JSON escapes such as ``'\\x1b[31m'`` that ``recon logs`` decodes), in
registry error bodies and headers, and in package file names and source text shown by
``find``, ``index``, ``slice``, ``snapshot verify`` and ``diff``, in the terminal, Markdown and
HTML outputs. Every case runs the real CLI (``python -m recon``) in a subprocess on real
files, real snapshots and a real HTTP server on loopback, and reads the bytes it wrote.

Two modes: a pipe (``COLUMNS`` set), where no control byte may appear at all, and a forced
terminal (``FORCE_COLOR``/``TTY_COMPATIBLE``), where rich's own colour and cursor codes are
allowed but none of the hostile sequences may appear verbatim and, once rich's own codes
are taken out, no control character is left. The data must still be shown (escaped), so a
case cannot pass by printing nothing.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

#: Terminal commands a hostile name or line carries: a window title (OSC), colour (CSI), the
#: 8-bit CSI/OSC/DCS/ST and NEL, a right-to-left override, DEL.
HOSTILE = "\x1b]0;pwned\x07 \x1b[31mRED \u009b31m \u009d0;x\x07 \u0090q\u009c \u0085 \u202e \x7f"
#: A file name of the package (a module, so also a qualname): ESC, CSI and the 8-bit CSI.
EVIL_NAME = "f\x1b[31mred\u009bname"
#: What must never be written verbatim, in either mode (as UTF-8, and the raw 8-bit bytes).
RAW_MARKERS = [s.encode() for s in ("\x1b]0;pwned", "\x1b[31mRED", "\x1b[31mred", "\u009b31m",
                                    "\u009d0;x", "\u0090q", "\u0085", "\u202e", "\x1b[2J",
                                    "\x1b]8;", "\x7f", "\x07")] + [b"\x9b31m", b"\x9d0;x"]
#: How the escaped 8-bit CSI reads: the data is there, as text.
SHOWN = "\\u009b31m"
#: What rich itself writes on a terminal: colours, the cursor and line commands of its live
#: progress display, carriage returns of that display.
RICH_OWN = re.compile(rb"\x1b\[[0-9;]*m|\x1b\[\?25[lh]|\x1b\[[0-9]*[ABCDGK]|\r")
#: Control characters: C0 but newline and tab, DEL, C1, bidi controls, and lone surrogates
#: U+DC80-U+DC9F (raw 8-bit C1 bytes that were not UTF-8).
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
                     "\udc80-\udc9f]")


def recon(*argv: str, cwd: Path, force: bool = False, stdin: bytes | None = None,
          timeout: float = 120) -> tuple[int, bytes, bytes]:
    """``python -m recon ARGV`` in a subprocess: (exit status, stdout bytes, stderr bytes)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR", "TERM", "RECON_SNAPSHOTS")}
    env.update(COLUMNS="400", HOME=str(cwd / "home"), RECON_CACHE=str(cwd / "cache"),
               PYTHONIOENCODING="utf-8")
    if force:
        env.update(FORCE_COLOR="1", TTY_COMPATIBLE="1", TERM="xterm-256color")
    proc = subprocess.run([sys.executable, "-m", "recon", *argv], cwd=cwd, env=env,
                          input=stdin, capture_output=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def clean(data: bytes, force: bool, what: str) -> str:
    """Assert ``data`` carries no control character of the input; return it as text."""
    for marker in RAW_MARKERS:
        assert marker not in data, f"{what}: {marker!r} written verbatim: {data[-2000:]!r}"
    if force:
        data = RICH_OWN.sub(b"", data)
    assert b"\x1b" not in data, f"{what}: ESC written: {data[-2000:]!r}"
    text = data.decode("utf-8", "surrogateescape")
    found = CONTROL.findall(text)
    assert not found, f"{what}: control characters {sorted(set(found))!r} written: {text[-2000:]!r}"
    return text


def check(result: tuple[int, bytes, bytes], force: bool, *, rc: int | tuple[int, ...] = 0,
          shown: str | None = SHOWN, where: str = "out") -> tuple[str, str]:
    """Both streams clean; the exit status as expected; the escaped data shown on ``where``."""
    code, out, err = result
    text_out, text_err = clean(out, force, "stdout"), clean(err, force, "stderr")
    expected = rc if isinstance(rc, tuple) else (rc,)
    assert code in expected, f"exit {code}: {text_err[-2000:]}"
    if shown is not None:
        text = text_out if where == "out" else text_err
        assert shown in text, f"{shown!r} not shown on std{where}: {text[-3000:]!r}"
    return text_out, text_err


def strings(doc: object) -> str:
    """Every key and string value of a JSON document, one per line (what a script reads)."""
    if isinstance(doc, dict):
        return "\n".join(f"{k}\n{strings(v)}" for k, v in doc.items())
    if isinstance(doc, list):
        return "\n".join(strings(v) for v in doc)
    return doc if isinstance(doc, str) else ""


MODES = pytest.mark.parametrize("force", [False, True], ids=["pipe", "terminal"])


# -- a package whose names and source are hostile ----------------------------------------------
def _package(root: Path, changed: bool) -> None:
    pkg = root / "evil"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    extra = "    y = 2  # \x1b[2J\n" if changed else ""
    (pkg / "mod.py").write_text(
        f'def pwned():\n    """doc {HOSTILE}"""\n    s = "{HOSTILE}"\n    return s\n{extra}\n\n'
        f'class K:\n    """{HOSTILE}"""\n    field = "{HOSTILE}"\n\n    def meth(self):\n'
        f'        return "\u009b2J"\n\n\nLIMIT = "{HOSTILE}"\n'
        + ('LIMIT2 = "\u009b31m"\n' if changed else ""))
    (pkg / f"{EVIL_NAME}.py").write_text(f"def g():\n    return 'x'\n{extra}")
    (pkg / "bad\x1b[5m\u009b31m.py").write_text("def broken(:\n")
    (pkg / "[link=mailto:x@evil.example]l.py").write_text(f"def k():\n    return {int(changed)}\n")


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two folders of the package (B changed A's functions), each snapshotted by the CLI."""
    base = tmp_path_factory.mktemp("terminal")
    (base / "home").mkdir()
    for side, changed in (("a", False), ("b", True)):
        _package(base / side, changed)
        code, out, err = recon("snapshot", "take", f"dir:{base / side}", "--package", "evil",
                               "-o", str(base / "snaps"), "--name", side, cwd=base)
        assert code == 0, err.decode(errors="replace")
    return base


@MODES
def test_snapshot_take_of_hostile_names(work: Path, tmp_path: Path, force: bool) -> None:
    shutil.copytree(work / "a", tmp_path / "a")
    (tmp_path / "home").mkdir()
    result = recon("snapshot", "take", f"dir:{tmp_path / 'a'}", "--package", "evil", "-o",
                   str(tmp_path / "snaps"), "--name", "t", cwd=tmp_path, force=force)
    check(result, force, shown=None)


@MODES
def test_index_names_files_that_failed_to_parse(work: Path, force: bool) -> None:
    out, _ = check(recon("index", str(work / "snaps" / "a"), "--no-cache", "-j", "0", cwd=work,
                         force=force), force)
    assert "bad\\x1b[5m" in out


def test_index_json_stays_json(work: Path) -> None:
    code, out, err = recon("index", str(work / "snaps" / "a"), "--json", cwd=work)
    check((code, out, err), False, shown=None)
    assert "bad\x1b[5m\u009b31m.py" in strings(json.loads(out))


@MODES
def test_find_by_name_shows_hostile_module_names(work: Path, force: bool) -> None:
    out, _ = check(recon("find", str(work / "snaps" / "a"), "*", cwd=work, force=force), force,
                   shown="\\u009bname")
    assert "f\\x1b[31mred" in out


@MODES
def test_find_by_regex_shows_hostile_source_lines(work: Path, force: bool) -> None:
    out, _ = check(recon("find", str(work / "snaps" / "a"), "-e", "RED", cwd=work, force=force),
                   force)
    assert "\\x1b]0;pwned" in out and "\\u202e" in out


def test_find_json_stays_json(work: Path) -> None:
    code, out, err = recon("find", str(work / "snaps" / "a"), "-e", "RED", "--json", cwd=work)
    check((code, out, err), False, shown=None)
    assert "\x1b]0;pwned" in strings(json.loads(out))


@MODES
def test_slice_to_stdout_shows_hostile_source(work: Path, force: bool) -> None:
    out, _ = check(recon("slice", str(work / "snaps" / "a"), "evil.mod:pwned", cwd=work,
                         force=force), force)
    assert "def pwned" in out


@MODES
def test_slice_tables_name_hostile_files(work: Path, tmp_path: Path, force: bool) -> None:
    check(recon("slice", str(work / "snaps" / "a"), f"evil.{EVIL_NAME}:g", "-o",
                str(tmp_path / "s.py"), cwd=work, force=force), force, shown="\\u009bname")


def test_slice_json_stays_json(work: Path) -> None:
    code, out, err = recon("slice", str(work / "snaps" / "a"), f"evil.{EVIL_NAME}:g", "--json",
                           cwd=work)
    check((code, out, err), False, shown=None)
    assert EVIL_NAME in strings(json.loads(out))


def test_error_line_quoting_a_hostile_qualname(work: Path) -> None:
    _, err = check(recon("slice", str(work / "snaps" / "a"), f"evil.{EVIL_NAME}:missing\u0085x",
                         cwd=work), False, rc=2, shown="\\u009bname", where="err")
    assert len([x for x in err.splitlines() if x.strip()]) == 1, err


@MODES
def test_snapshot_verify_names_the_edited_hostile_file(work: Path, tmp_path: Path,
                                                      force: bool) -> None:
    snap = tmp_path / "snap"
    shutil.copytree(work / "snaps" / "a", snap)
    (snap / "src" / "evil" / f"{EVIL_NAME}.py").write_text("def g():\n    return 'edited'\n")
    out, _ = check(recon("snapshot", "verify", str(snap), cwd=work, force=force), force, rc=1,
                   shown="\\u009bname")
    assert "f\\x1b[31mred" in out


@MODES
def test_diff_console(work: Path, force: bool) -> None:
    snaps = work / "snaps"
    out, _ = check(recon("diff", str(snaps / "a"), str(snaps / "b"), "--files", cwd=work,
                         force=force), force, shown="\\u009bname")
    assert "f\\x1b[31mred" in out


@MODES
def test_diff_show_highlighted_source(work: Path, force: bool) -> None:
    snaps = work / "snaps"
    out, _ = check(recon("diff", str(snaps / "a"), str(snaps / "b"), "--show", cwd=work,
                         force=force), force, shown="\\u009bname")
    assert "\\x1b[2J" in out


def test_diff_markdown_to_stdout(work: Path) -> None:
    snaps = work / "snaps"
    out, _ = check(recon("diff", str(snaps / "a"), str(snaps / "b"), "--markdown", "-",
                         cwd=work), False, shown="\\u009bname")
    assert "\\x1b[2J" in out


def test_diff_markdown_and_html_files(work: Path, tmp_path: Path) -> None:
    snaps = work / "snaps"
    md, page = tmp_path / "r.md", tmp_path / "r.html"
    check(recon("diff", str(snaps / "a"), str(snaps / "b"), "--markdown", str(md), "--html",
                str(page), cwd=work), False, shown=None)
    for path in (md, page):
        text = clean(path.read_bytes(), False, path.name)
        assert "\\u009bname" in text and "\\x1b[2J" in text, path


def test_diff_json_stays_json(work: Path) -> None:
    snaps = work / "snaps"
    code, out, err = recon("diff", str(snaps / "a"), str(snaps / "b"), "--json", cwd=work)
    check((code, out, err), False, shown=None)
    assert EVIL_NAME in strings(json.loads(out))


def test_markup_in_names_is_shown_as_text(tmp_path: Path) -> None:
    """``[link=...]`` in a file name makes no OSC 8 hyperlink on a terminal, and a ``[/x]``
    that a folder ``sub[`` and a file ``x].py`` make in a path is no crash."""
    (tmp_path / "home").mkdir()
    for side in ("a", "b"):
        pkg = tmp_path / side / "evil"
        (pkg / "sub[").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "[link=mailto:x@evil.example]l.py").write_text(f"def k():\n    return '{side}'\n")
        (pkg / "sub[" / "x].py").write_text(f"def h():\n    return '{side}'\n")
        assert recon("snapshot", "take", f"dir:{tmp_path / side}", "--package", "evil", "-o",
                     str(tmp_path / "snaps"), "--name", side, cwd=tmp_path)[0] == 0
    out, _ = check(recon("diff", str(tmp_path / "snaps" / "a"), str(tmp_path / "snaps" / "b"),
                         "--files", cwd=tmp_path, force=True), True, shown=None)
    listed = [line.split()[-1] for line in out.splitlines() if line.strip().startswith("changed")]
    assert sorted(listed) == ["evil/[link=mailto:x@evil.example]l.py", "evil/sub[/x].py"], out


# -- server logs -------------------------------------------------------------------------------
def _log(path: Path) -> Path:
    """A vLLM log: raw ESC/C1 bytes in a message and a traceback, and an argument line whose
    repr escapes decode to ESC, CSI and a right-to-left override."""
    lines = [
        "(APIServer pid=1) INFO 09-10 19:45:09 [startup.py:31] vLLM API server version 0.33.0",
        "(APIServer pid=1) INFO 09-10 19:45:09 [startup.py:96] non-default args: {'model_tag': "
        "'/m', 'model': '/models/\\x1b]0;pwned\\x07\\x1b[31mRED\\x9b31m', 'served_model_name': "
        "['\\x9b31m\\u202eq\\x1b[2J'], 'max_model_len': 4096}",
        f"(APIServer pid=1) ERROR 09-10 19:45:10 [core.py:1] boom {HOSTILE}",
        "Traceback (most recent call last):",
        f'  File "/x/{HOSTILE}.py", line 3, in f',
        f"ValueError: bad {HOSTILE}",
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@MODES
def test_logs_console(tmp_path: Path, force: bool) -> None:
    (tmp_path / "home").mkdir()
    log = _log(tmp_path / "server.log")
    out, _ = check(recon("logs", str(log), cwd=tmp_path, force=force), force, rc=(0, 6))
    assert "ValueError" in out


@MODES
def test_logs_argument_line_escapes_decoded(tmp_path: Path, force: bool) -> None:
    """The argument line's ``'\\x1b[31m'`` becomes ESC only after the raw line was cleaned."""
    (tmp_path / "home").mkdir()
    log = tmp_path / "args.log"
    log.write_text(_log(tmp_path / "x.log").read_text().splitlines()[1] + "\n")
    out, _ = check(recon("logs", str(log), cwd=tmp_path, force=force), force, rc=(0, 6))
    assert "\\x1b[31mRED" in out


def test_logs_markdown_to_stdout_and_file(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    log = _log(tmp_path / "server.log")
    out, _ = check(recon("logs", str(log), "--markdown", "-", cwd=tmp_path), False, rc=(0, 6))
    assert "\\x1b[31mRED" in out
    md = tmp_path / "r.md"
    check(recon("logs", str(log), "--markdown", str(md), cwd=tmp_path), False, rc=(0, 6))
    text = clean(md.read_bytes(), False, "r.md")
    assert SHOWN in text and "\\x1b[31mRED" in text


def test_logs_json_stays_json(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    log = _log(tmp_path / "server.log")
    code, out, err = recon("logs", str(log), "--json", cwd=tmp_path)
    check((code, out, err), False, rc=(0, 6), shown=None)
    assert "\x1b[31mRED" in strings(json.loads(out))


def test_logs_from_stdin(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    data = _log(tmp_path / "server.log").read_bytes()
    check(recon("logs", "-", cwd=tmp_path, stdin=data), False, rc=(0, 6))


@MODES
def test_logs_hostile_file_name(tmp_path: Path, force: bool) -> None:
    (tmp_path / "home").mkdir()
    log = _log(tmp_path / "srv\x1b]0;pwned\x07\u009b31m.log")
    check(recon("logs", log.name, cwd=tmp_path, force=force), force, rc=(0, 6))


# -- registry error bodies and headers ---------------------------------------------------------
class _Hostile(http.server.BaseHTTPRequestHandler):
    """Answers every request with the server's status, a JSON error body of control
    characters, and (for 401) a challenge whose scheme is control characters."""

    def do_GET(self) -> None:
        status = self.server.status  # type: ignore[attr-defined]
        body = json.dumps({"errors": [{"code": "DENIED" + HOSTILE, "message": "no " + HOSTILE}]},
                          ensure_ascii=False).encode()
        self.send_response(status)
        if status == 401:  # latin-1 on the wire: the raw 8-bit CSI byte 0x9b
            self.send_header("WWW-Authenticate", 'Evil\x1b]0;pwned\x07\x9b31m realm="x"')
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_HEAD = do_GET

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def registry_answering(request: pytest.FixtureRequest) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    server.status = request.param  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("registry_answering", [500, 403, 404, 401], indirect=True)
@MODES
def test_registry_error_body(registry_answering: str, tmp_path: Path, force: bool) -> None:
    (tmp_path / "home").mkdir()
    result = recon("snapshot", "take", f"registry:{registry_answering}/evil/repo:tag",
                   "--insecure", "-o", str(tmp_path / "snaps"), cwd=tmp_path, force=force)
    _, err = check(result, force, rc=(2, 3), shown=SHOWN, where="err")
    assert err.count("recon: error:") == 1 and len(err.strip().splitlines()) == 1, err


# -- rich markup in data: shown as text, never obeyed ------------------------------------------
#: SGR escape sequences rich writes on a terminal; the parameters are checked for the ones the
#: data asks for ([conceal] is SGR 8, [blink] 5, [reverse] 7, [strike] 9).
SGR = re.compile(rb"\x1b\[([0-9;]*)m")
ASKED = {"5", "7", "8", "9"}


def attributes(params: str) -> list[str]:
    """The SGR attributes of ``params``, less the operands of 256- and true-colour codes."""
    codes, out = params.split(";"), []
    while codes:
        code = codes.pop(0)
        if code in ("38", "48", "58") and codes:  # 5;N or 2;R;G;B follow
            del codes[:2 if codes[0] == "5" else 4]
        else:
            out.append(code)
    return out


def verbatim(result: tuple[int, bytes, bytes], force: bool, *texts: str,
             rc: int | tuple[int, ...] = 0) -> str:
    """No style the data asked for, no hyperlink, and each of ``texts`` shown as written."""
    out, _ = check(result, force, rc=rc, shown=None)
    for params in SGR.findall(result[1]) + SGR.findall(result[2]):
        asked = ASKED & set(attributes(params.decode()))
        assert not asked, f"SGR {sorted(asked)} written: {result[1][-1500:]!r}"
    assert b"\x1b]8;" not in result[1], "hyperlink written"
    for text in texts:
        assert text in out, f"{text!r} not shown: {out[-3000:]!r}"
    return out


@MODES
def test_markup_in_a_log_line_and_file_name(tmp_path: Path, force: bool) -> None:
    (tmp_path / "home").mkdir()
    (tmp_path / "[conceal]X.log").write_text(
        "INFO 01-01 00:00:00 x.py:1] Initializing a V1 LLM engine (v0.9[/][conceal]SECRET[/]"
        "[link=https://e]click) with config: model='x'\n")
    verbatim(recon("logs", "[conceal]X.log", cwd=tmp_path, force=force), force,
             "[conceal]X.log", "[/][conceal]SECRET[/][link=https://e]click", rc=(0, 6))


@MODES
def test_markup_in_a_probe_log_target(tmp_path: Path, force: bool) -> None:
    (tmp_path / "home").mkdir()
    logs = tmp_path / "probe-logs"
    logs.mkdir()
    target = "m:f [conceal]HIDDEN"
    records = [{"kind": "VERIFY", "pid": 1, "targets": {target: "patched"}},
               {"kind": "call", "pid": 1, "target": target, "n": 0, "args": {}}]
    (logs / "probe-1-1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    verbatim(recon("probe", "read", str(logs), cwd=tmp_path, force=force), force, target)


@MODES
def test_markup_in_a_module_name_and_source_line(tmp_path: Path, force: bool) -> None:
    (tmp_path / "home").mkdir()
    pkg = tmp_path / "src" / "vllm"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "m[conceal]Z.py").write_text('def f():\n    x = "[conceal]HIDE"\n    return x\n')
    assert recon("snapshot", "take", "dir:src", "-o", "out", "--name", "s", cwd=tmp_path)[0] == 0
    verbatim(recon("has", "f", "--in", "out/s", "-p", "HIDE", "--regex", cwd=tmp_path,
                   force=force), force, "vllm/m[conceal]Z.py", 'x = "[conceal]HIDE"')


@MODES
def test_markup_in_manifest_fields(tmp_path: Path, force: bool) -> None:
    (tmp_path / "home").mkdir()
    (tmp_path / "src" / "vllm").mkdir(parents=True)
    (tmp_path / "src" / "vllm" / "__init__.py").write_text("")
    assert recon("snapshot", "take", "dir:src", "-o", "out", "--name", "s", cwd=tmp_path)[0] == 0
    path = tmp_path / "out" / "s" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["package"]["import_root"] = "/s[conceal]HID1"
    manifest["python"]["version"] = "/s[conceal]HID2"
    manifest["tool"]["version"] = "/s[conceal]HID3"
    manifest["layers"][0]["digest"] = "/s[conceal]HID4"
    path.write_text(json.dumps(manifest))
    verbatim(recon("snapshot", "show", "out/s", cwd=tmp_path, force=force), force,
             *(f"/s[conceal]HID{i}" for i in range(1, 5)))
