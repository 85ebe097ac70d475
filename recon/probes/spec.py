"""The probe spec: what to patch and what to log, saved as the bundle's ``probe.json``.

The runtime reads this file inside the container with nothing but ``json``,
so the format is plain data and every field has a default there too. Syntax is
checked here, on the investigator's machine, so that a typo fails at
``recon probe new`` and not silently in a production worker.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import ReconError

SPEC_VERSION = 1
LOG_ITEMS = ("args", "shapes", "return")
DEFAULT_LOG = ("shapes", "return")
DEFAULT_LOG_DIR = "/tmp/recon-probe-logs"
_QUALNAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_IDENT = re.compile(r"^[A-Za-z_]\w*$")


@dataclass
class TargetSpec:
    """One callable to probe, named ``package.module:Class.method``.

    ``log`` picks what goes in each call record: ``args`` (values; tensors as
    metadata), ``shapes`` (metadata only: type, shape, dtype, device, length),
    ``return`` (in the same detail as the arguments). ``self_attrs`` are
    dotted attribute paths read from ``self`` (``cache_config.block_size``);
    ``exprs`` are named Python expressions over the parameters, evaluated at
    entry, or at exit when they use ``result``. ``copies`` lists the modules
    that hold a ``from module import name`` copy, patched as well.
    """

    qualname: str
    log: list[str] = field(default_factory=lambda: list(DEFAULT_LOG))
    self_attrs: list[str] = field(default_factory=list)
    exprs: dict[str, str] = field(default_factory=dict)
    copies: list[str] = field(default_factory=list)
    kind: str | None = None  # from snapshot validation: function, method, ...
    signature: str | None = None

    @property
    def module(self) -> str:
        return self.qualname.partition(":")[0]

    @property
    def attr(self) -> str:
        return self.qualname.partition(":")[2]

    def check(self) -> None:
        """Raise :class:`ReconError` for anything the runtime could not use."""
        where = self.qualname
        if not _QUALNAME.match(self.qualname):
            raise ReconError("a target is 'package.module:Class.method' or 'package.module:function'",
                             where=where)
        bad = sorted(set(self.log) - set(LOG_ITEMS))
        if bad:
            raise ReconError(f"unknown --log item(s) {', '.join(bad)}; use {', '.join(LOG_ITEMS)}",
                             where=where)
        for path in self.self_attrs:
            if not all(_IDENT.match(p) for p in path.split(".")):
                raise ReconError(f"--self-attr {path!r} is not a dotted attribute path", where=where)
        for name, src in self.exprs.items():
            if not _IDENT.match(name):
                raise ReconError(f"--expr name {name!r} is not an identifier", where=where)
            try:
                compile(src, f"<expr {name}>", "eval")
            except SyntaxError as err:
                raise ReconError(f"--expr {name}={src!r} is not a Python expression: {err.msg}",
                                 where=where) from err


@dataclass
class ProbeSpec:
    """Everything the runtime needs, for every process of the container.

    Sampling is per process and per target: the first ``first`` calls are
    logged, then every ``every``-th (0: none after the first). ``max_bytes``
    caps each process's log file, ``max_files`` the number of log files in the
    folder. ``only_argv`` / ``skip_argv`` are regular expressions over the full
    command line that pick the processes to probe.
    """

    targets: list[TargetSpec]
    env: list[str] = field(default_factory=list)
    first: int = 10
    every: int = 0
    max_bytes: int = 64 << 20
    max_files: int = 256
    log_dir: str = DEFAULT_LOG_DIR
    only_argv: str | None = None
    skip_argv: str | None = None
    error_budget: int = 50
    snapshot: dict[str, Any] | None = None  # name/package/version the targets were checked on
    version: int = SPEC_VERSION

    def check(self) -> None:
        """Validate the syntax of every field (no snapshot needed)."""
        if not self.targets:
            raise ReconError("a probe bundle needs at least one --target")
        seen: set[str] = set()
        for target in self.targets:
            target.check()
            if target.qualname in seen:
                raise ReconError(f"target {target.qualname} is given twice")
            seen.add(target.qualname)
        for name in ("first", "every", "error_budget"):
            if getattr(self, name) < 0:
                raise ReconError(f"--{name.replace('_', '-')} must not be negative")
        if self.max_bytes < 16 << 10:
            raise ReconError("--max-bytes must be at least 16384 (the EXIT record needs room)")
        if self.max_files < 1:
            raise ReconError("--max-files must be at least 1")
        for name in ("only_argv", "skip_argv"):
            pattern = getattr(self, name)
            if pattern:
                try:
                    re.compile(pattern)
                except re.error as err:
                    raise ReconError(f"--{name.replace('_', '-')} {pattern!r}: {err}") from err
        for var in self.env:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", var):
                raise ReconError(f"--env takes a variable name (letters, digits, _), not {var!r}")
        if not self.log_dir.startswith("/"):
            raise ReconError(f"--log-dir is a path inside the container and must be absolute: "
                             f"{self.log_dir!r}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProbeSpec:
        raw = dict(data)
        known = {f for f in TargetSpec.__dataclass_fields__}
        targets = [TargetSpec(**{k: v for k, v in t.items() if k in known})
                   for t in raw.pop("targets", [])]
        fields = {f for f in cls.__dataclass_fields__} - {"targets"}
        return cls(targets=targets, **{k: v for k, v in raw.items() if k in fields})


def split_scoped(values: list[str], qualnames: list[str]) -> dict[str | None, list[str]]:
    """Split ``QUALNAME::VALUE`` options by target; plain values apply to all (key None).

    The prefix counts only when it is one of the given targets, so an
    expression such as ``x[::2]`` is never mistaken for a scoped option.
    """
    out: dict[str | None, list[str]] = {}
    for value in values:
        head, sep, tail = value.partition("::")
        key = head if sep and head in qualnames else None
        out.setdefault(key, []).append(tail if key else value)
    return out


def parse_expr(text: str) -> tuple[str, str]:
    """``NAME=EXPR`` -> (name, expr); a bare expression is named after itself."""
    name, sep, expr = text.partition("=")
    if sep and _IDENT.match(name.strip()) and not expr.startswith("="):
        return name.strip(), expr.strip()
    return re.sub(r"\W+", "_", text).strip("_") or "expr", text


def build_spec(targets: list[str], *, log: list[str] | None = None,
               self_attrs: list[str] | None = None, exprs: list[str] | None = None,
               **options: Any) -> ProbeSpec:
    """Build a :class:`ProbeSpec` from CLI-shaped options (``QUALNAME::`` scopes one target)."""
    attrs_by = split_scoped(self_attrs or [], targets)
    exprs_by = split_scoped(exprs or [], targets)
    specs = []
    for q in targets:
        t_exprs = dict(parse_expr(e) for e in exprs_by.get(None, []) + exprs_by.get(q, []))
        specs.append(TargetSpec(qualname=q, log=list(log or DEFAULT_LOG),
                                self_attrs=attrs_by.get(None, []) + attrs_by.get(q, []),
                                exprs=t_exprs))
    spec = ProbeSpec(targets=specs, **{k: v for k, v in options.items() if v is not None})
    spec.check()
    return spec
