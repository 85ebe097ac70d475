"""Render a closure as one standalone Python module (the slice).

The slice holds each kept piece byte-exact as a string, preceded by a comment
giving its origin (file:first-last line) and the sha256 of its bytes, grouped
by origin module; then the loader runtime (``loader.py``, copied verbatim).
Pieces are stored as text rather than pasted as code because each must run in
a module of its own name, at its own line numbers, with lazy annotations:
the loader compiles them that way (see ``loader.py``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..snapshots.model import Snapshot
from .closure import ClosureResult, KeptModule, pieces, suggest_budget
from .units import ModuleModel

RUNTIME_MARKER = "# --- runtime ---"
FORMAT = 1


@dataclass
class Piece:
    """One byte-exact segment of the snapshot in the slice."""

    module: str
    file: str
    start: int
    end: int
    sha256: str
    what: str  # "def round_up", "class CompilationConfig (shell)", "CompilationConfig.method", ...
    synthetic: bool = False  # recon-written (a `pass` in an empty shell), not from the snapshot

    def to_json(self) -> dict[str, Any]:
        return {"module": self.module, "file": self.file, "start": self.start, "end": self.end,
                "sha256": self.sha256, "what": self.what, "synthetic": self.synthetic}


def _literal(text: str) -> str:
    """A Python literal for ``"\\n" + text`` that keeps ``text`` readable when possible."""
    body = "\n" + text
    try:
        body.encode("utf-8")
    except UnicodeEncodeError:
        return repr(body)
    for quote in ("'''", '"""'):
        if quote in text or text.endswith(quote[0]) or text.endswith("\\"):
            continue
        if "\r" in text or "\x00" in text or "\f" in text:
            break
        return f"r{quote}{body}{quote}"
    return repr(body)


def _describe(node_kind: str, name: str) -> str:
    return f"{node_kind} {name}".strip()


def _unit_pieces(model: ModuleModel, km: KeptModule, index: int) -> tuple[list[Piece], str]:
    """Segments for one kept top-level unit: (pieces, kind label)."""
    unit = model.units[index]
    label = ", ".join(sorted(unit.names)) or unit.kind
    if unit.kind != "class" or index not in model.classes:
        sha = model.segment_sha256(unit.start, unit.end)
        return [Piece(model.name, model.rel, unit.start, unit.end, sha,
                      _describe(unit.kind, label))], unit.kind
    cm = model.classes[index]
    kc = km.classes.get(index)
    mode = kc.mode if kc else "shell"
    if cm.atomic:
        sha = model.segment_sha256(unit.start, unit.end)
        return [Piece(model.name, model.rel, unit.start, unit.end, sha,
                      f"class {cm.node.name} (whole)")], "class"
    head_start = unit.start if mode == "whole" else cm.class_line
    pieces = [Piece(model.name, model.rel, head_start, cm.header_end,
                    model.segment_sha256(head_start, cm.header_end),
                    f"class {cm.node.name} ({mode}"
                    + (": class line and bases, no decorators" if mode == "shell" else "") + ")")]
    members = sorted(kc.members) if kc else []
    for mi in members:
        member = cm.members[mi]
        mlabel = ", ".join(sorted(member.names)) or member.kind
        pieces.append(Piece(model.name, model.rel, member.start, member.end,
                            model.segment_sha256(member.start, member.end),
                            f"{cm.node.name}.{mlabel}"))
    if not members:
        line = cm.members[0].start
        text = f"{cm.body_indent}pass\n"
        pieces.append(Piece(model.name, model.rel, line, line,
                            hashlib.sha256(text.encode()).hexdigest(),
                            f"{cm.node.name}: empty shell", synthetic=True))
    return pieces, "class"


def _piece_text(model: ModuleModel, piece: Piece, indent: str) -> str:
    if piece.synthetic:
        return f"{indent}pass\n"
    return model.text(piece.start, piece.end)


def render(closure: ClosureResult, snapshot: Snapshot) -> tuple[str, dict[str, Any]]:
    """(slice module text, metadata: targets, pieces, outside, unresolved, ...)."""
    modules_meta: dict[str, dict[str, Any]] = {}
    all_pieces: list[Piece] = []
    body: list[str] = []
    manifest_files = snapshot.manifest.files
    edited: list[str] = []
    for name in sorted(closure.modules):
        km = closure.modules[name]
        model = km.model
        if not km.units:
            continue
        record = manifest_files.get(model.rel)
        recorded = record.sha256 if record is not None else None
        if recorded and recorded != model.file_sha256:
            edited.append(model.rel)
        modules_meta[name] = {"file": model.rel, "package": model.is_package,
                              "sha256": model.file_sha256}
        body.append(f"\n# {'=' * 70}\n# module {name}  ({model.rel}, sha256 {model.file_sha256})"
                    + ("  EDITED: differs from the snapshot manifest" if model.rel in edited else "")
                    + f"\n_module({name!r}, {model.rel!r}, package={model.is_package!r})\n")
        for index in sorted(km.units, key=lambda i: model.units[i].start):
            unit = model.units[index]
            pieces, kind = _unit_pieces(model, km, index)
            all_pieces.extend(pieces)
            names = sorted(unit.names)
            indent = model.classes[index].body_indent if index in model.classes else ""
            body.append(f"_unit({name!r}, {names!r}, {kind!r}, [")
            for p in pieces:
                tag = "recon: synthetic, not in the snapshot" if p.synthetic else \
                    f"{p.file}:{p.start}-{p.end} sha256={p.sha256}"
                body.append(f"    # {tag}  {p.what}")
                body.append(f"    ({p.start}, {p.end}, {p.sha256!r}, "
                            f"{_literal(_piece_text(model, p, indent))}),")
            body.append("])\n")
    meta: dict[str, Any] = {
        "format": FORMAT,
        "package": closure.package,
        "snapshot": {"name": snapshot.name, "version": snapshot.version,
                     "path": str(snapshot.root), "label": snapshot.label},
        "targets": [{"qualname": t.qualname, "kind": t.kind, "file": t.file, "line": t.line,
                     "defined_in": t.defined_in} for t in closure.targets],
        "outside": closure.outside,
        "unresolved": closure.unresolved,
        "stub_points": [list(p) for p in closure.stub_points],
        "edited_files": edited,
        "parse_errors": closure.parse_errors,
        "budget": closure.budget,
        "cut": closure.cut,
        "pieces": [p.to_json() for p in all_pieces],
    }
    text = _header(meta) + "".join(line + "\n" for line in body) + _footer(meta) + _runtime()
    return text, meta


def _header(meta: dict[str, Any]) -> str:
    snap = meta["snapshot"]
    lines = [
        f"# recon slice of {snap['label']}",
        "# Targets:",
        *(f"#   {t['qualname']}  ({t['file']}:{t['line']}, {t['kind']})" for t in meta["targets"]),
        "# Every piece below is byte-exact source from the snapshot, with its origin file:lines",
        "# and the sha256 of its bytes. The loader at the end runs each piece in a module of its",
        "# original name, at its original line numbers, with lazy annotations (PEP 563).",
    ]
    outside = meta["outside"]
    if outside:
        lines.append(f"# Names from outside the package ({len(outside)}; recording stubs under "
                     "`recon run` unless --real/--stub):")
        lines += [f"#   {n}  ({v['kind']}; {', '.join(v['sites'][:2])})"
                  for n, v in outside.items()]
    if meta["unresolved"]:
        lines.append("# Names that could not be resolved:")
        lines += [f"#   {u['file']}:{u['line']}  {u['name']}  ({u['why']})"
                  for u in meta["unresolved"]]
    if meta["stub_points"]:
        lines.append("# Stubbed by request (not walked): "
                     + ", ".join(f"{m}.{n}" for m, n, _ in meta["stub_points"]))
    if meta["cut"]:
        cut = meta["cut"]
        lines.append(f"# CUT: the closure budget ({pieces(meta['budget'])}) was reached; at least "
                     f"{pieces(len(cut))} the kept code needs are NOT in this slice (rebuild with "
                     f"--budget {suggest_budget(meta['budget'])}):")
        lines += [f"#   {what}" for what in cut[:20]]
        if len(cut) > 20:
            lines.append(f"#   ... and {len(cut) - 20} more")
    lines += ["", '"""A recon slice: import it and call install(), or run it with python."""', "",
              "from __future__ import annotations", "", "MODULES: dict = {}", "", "",
              "def _module(name, file, *, package):",
              "    MODULES[name] = {\"file\": file, \"package\": package, \"units\": []}",
              "", "",
              "def _unit(module, names, kind, segments):",
              "    MODULES[module][\"units\"].append(",
              "        {\"names\": names, \"kind\": kind, \"segments\": segments})",
              ""]
    return "\n".join(lines) + "\n"


def _footer(meta: dict[str, Any]) -> str:
    import pprint

    small = {k: meta[k] for k in ("format", "package", "snapshot", "targets", "stub_points",
                                  "edited_files")}
    return ("\n# " + "=" * 70 + "\n# slice metadata\nSLICE = "
            + pprint.pformat(small, width=100, sort_dicts=False) + "\n\n")


def _runtime() -> str:
    src = (Path(__file__).with_name("loader.py")).read_text(encoding="utf-8")
    at = src.index("\n" + RUNTIME_MARKER + "\n") + 1
    return ("# " + "=" * 70 + "\n# recon runtime (recon/slicing/loader.py), not from the snapshot\n"
            + src[at:])
