"""The function section: match every function of side A to side B and say what happened to it.

Identity is the normalized AST the index already hashes (no positions, no
comments, no formatting): ``ast_hash`` for the whole definition,
``body_hash`` for the statements without the docstring, ``doc_hash`` for
the docstring. Matching runs in rounds, most certain first, and each round
only sees what earlier rounds left unmatched:

1. same qualname;
2. the identical definition under another qualname with the same local
   name (a class or function moved to another module);
3. the identical definition in another class or function of its own module,
   or anywhere when it is unique and not trivially short;
4. same short name inside containers already known to correspond (a
   renamed class or moved module: its edited methods pair up too);
5. renames: the identical body under another name, unique on both sides
   and either in the same container or not trivially short.

Trivial bodies (``pass``, ``return self._x``) recur everywhere; pairing them
across containers would report unrelated functions as moved or renamed, so
rounds 3 and 5 accept them only within one container. Only files whose
bytes differ are compared: a file with the same sha256 on both sides holds
the same functions at the same lines.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from ..index.build import gc_paused
from ..index.models import FunctionInfo, split_qualname
from ..index.snapshot_index import SnapshotIndex
from .model import LISTED_KINDS, FunctionChange, FunctionDiff
from .signature import compare_signatures, decorators_differ

#: Lines after the ``def`` line from which a body is specific enough to pair across containers.
MIN_SPECIFIC_LINES = 3


def container(q: str) -> str:
    """``mod:Cls.meth`` -> ``mod:Cls``; ``mod:f`` -> ``mod:``; ``mod:f.<locals>.g`` -> ``mod:f.<locals>``."""
    module, local = split_qualname(q)
    head, _, _ = local.rpartition(".")
    return f"{module}:{head}"


def local_name(q: str) -> str:
    return split_qualname(q)[1]


def _specific(fn: FunctionInfo) -> bool:
    return fn.end_lineno - fn.def_lineno >= MIN_SPECIFIC_LINES


def _same_code(o: FunctionInfo, n: FunctionInfo) -> bool:
    if o.ast_hash is None or n.ast_hash is None:  # too deep to normalize: fall back to text
        return False
    return o.ast_hash == n.ast_hash


def _order(fn: FunctionInfo) -> tuple[str, int]:
    return fn.path, fn.lineno


class _Matcher:
    """Holds both sides and the rounds' state; :func:`diff_functions` drives it."""

    def __init__(self, ia: SnapshotIndex, ib: SnapshotIndex, fa: dict[str, FunctionInfo],
                 fb: dict[str, FunctionInfo]) -> None:
        self.ia, self.ib = ia, ib
        self.fa, self.fb = fa, fb
        self.removed = {q: f for q, f in fa.items() if q not in fb}
        self.added = {q: f for q, f in fb.items() if q not in fa}
        self.pairs: list[tuple[FunctionInfo, FunctionInfo]] = []
        self.containers: dict[str, str] = {}  # old container -> new container
        self._raw_a: dict[str, list[bytes]] = {}
        self._raw_b: dict[str, list[bytes]] = {}

    def raw_lines(self, idx: SnapshotIndex, path: str) -> list[bytes]:
        """The file's lines as bytes, split the way the parser counts lines.

        Bytes, not text: only equality matters here, and skipping the decode
        halves the cost of reading a thousand changed files.
        """
        cache = self._raw_a if idx is self.ia else self._raw_b
        got = cache.get(path)
        if got is None:
            data = idx.snapshot.path(path).read_bytes()
            if b"\r" in data:
                data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            got = cache[path] = data.split(b"\n")
        return got

    def same_text(self, o: FunctionInfo, n: FunctionInfo) -> bool:
        """Byte-identical source segments (decorators included), indentation aside."""
        ta = self.raw_lines(self.ia, o.path)[o.lineno - 1: o.end_lineno]
        tb = self.raw_lines(self.ib, n.path)[n.lineno - 1: n.end_lineno]
        if ta == tb:
            return True
        if o.col != n.col:  # moved in or out of a class: compare without the indentation
            return [ln[o.col:] for ln in ta] == [ln[n.col:] for ln in tb]
        return False

    def pair(self, o: FunctionInfo, n: FunctionInfo) -> None:
        del self.removed[o.qualname]
        del self.added[n.qualname]
        self.pairs.append((o, n))
        if o.qualname != n.qualname:
            # Nested functions follow their parent; methods follow a moved/renamed class.
            self.containers.setdefault(f"{o.qualname}.<locals>", f"{n.qualname}.<locals>")
            co, cn = container(o.qualname), container(n.qualname)
            if co != cn:
                self.containers.setdefault(co, cn)

    # -- rounds ------------------------------------------------------------------------------
    def by_hash(self, table: dict[str, FunctionInfo], attr: str) -> dict[str, list[FunctionInfo]]:
        out: dict[str, list[FunctionInfo]] = defaultdict(list)
        for fn in sorted(table.values(), key=_order):
            h = getattr(fn, attr)
            if h is not None:
                out[h].append(fn)
        return out

    def identical_elsewhere(self) -> None:
        """Rounds 2 and 3: the identical definition under another qualname."""
        new_by_hash = self.by_hash(self.added, "ast_hash")
        old_by_hash = self.by_hash(self.removed, "ast_hash")
        for h, olds in old_by_hash.items():
            news = new_by_hash.get(h)
            if not news:
                continue
            for o in list(olds):  # round 2: same local name in another module
                hit = next((n for n in news if local_name(n.qualname) == local_name(o.qualname)), None)
                if hit is not None:
                    self.pair(o, hit)
                    news.remove(hit)
                    olds.remove(o)
            if len(olds) == 1 and len(news) == 1:  # round 3: unique on both sides
                o, n = olds[0], news[0]
                if o.module == n.module or _specific(o):
                    self.pair(o, n)

    def in_known_containers(self) -> None:
        """Round 4, to a fixpoint: same short name in containers already paired."""
        while True:
            index: dict[tuple[str, str], FunctionInfo] = {}
            for n in self.added.values():
                index.setdefault((container(n.qualname), local_name(n.qualname).rsplit(".", 1)[-1]), n)
            found = []
            for o in sorted(self.removed.values(), key=_order):
                holder = self.containers.get(container(o.qualname))
                if holder is None:
                    continue
                match = index.get((holder, local_name(o.qualname).rsplit(".", 1)[-1]))
                if match is not None and match.qualname in self.added:
                    found.append((o, match))
            if not found:
                return
            for o, n in found:
                if o.qualname in self.removed and n.qualname in self.added:
                    self.pair(o, n)

    def renames(self) -> None:
        """Round 5: the identical body (docstring excluded) under another name."""
        new_by_body = self.by_hash(self.added, "body_hash")
        for h, olds in self.by_hash(self.removed, "body_hash").items():
            news = new_by_body.get(h)
            if len(olds) != 1 or not news or len(news) != 1:
                continue
            o, n = olds[0], news[0]
            if container(o.qualname) == container(n.qualname) or _specific(o):
                self.pair(o, n)

    # -- classification ----------------------------------------------------------------------
    def classify(self, o: FunctionInfo, n: FunctionInfo) -> FunctionChange:
        """What differs between two versions of one function (see :mod:`recon.diffing.model`)."""
        renamed = o.short != n.short
        moved = container(o.qualname) != container(n.qualname)
        unhashed = (o.ast_hash is None or n.ast_hash is None) and not renamed
        if _same_code(o, n) or (unhashed and self.same_text(o, n)):  # too deep to hash: text decides
            text = self.same_text(o, n)
            if o.qualname != n.qualname or (o.path, o.def_lineno) != (n.path, n.def_lineno):
                return FunctionChange("moved", o, n, ("moved",) if text else ("moved", "text"))
            return FunctionChange("formatting" if not text else "unchanged", o, n, ("text",))
        sig = tuple(compare_signatures(o, n))
        parts: list[str] = []
        if renamed:
            parts.append("name")
        if moved:
            parts.append("moved")
        if sig:
            parts.append("signature")
        body = o.body_hash is None or o.body_hash != n.body_hash
        if body:
            parts.append("body")
        if decorators_differ(o, n):
            parts.append("decorators")
        if o.doc_hash != n.doc_hash:
            parts.append("docstring")
        if renamed and not body:
            kind = "renamed"
        else:
            kind = next((k for k in ("signature", "body", "decorators", "docstring") if k in parts),
                        "body")
            if kind == "body" and "body" not in parts:
                parts.append("other")  # e.g. type parameters: in the AST, in no field above
        return FunctionChange(kind, o, n, tuple(parts), sig)


def diff_functions(ia: SnapshotIndex, ib: SnapshotIndex, *, paths_a: Iterable[str] | None = None,
                   paths_b: Iterable[str] | None = None) -> FunctionDiff:
    """Compare the functions of ``paths_a`` in ``ia`` with those of ``paths_b`` in ``ib``.

    Without paths every function of both indexes is compared (give the
    changed, added and removed ``.py`` files: identical files hold
    identical functions).
    """
    with gc_paused():  # see recon.index.build: no cycles here, and the collector's scans of
        fd = _diff_functions(ia, ib, _select(ia, paths_a), _select(ib, paths_b))  # big heaps cost
    if paths_a is not None and paths_b is not None:
        fd.files_compared = len(set(paths_a) | set(paths_b))
    return fd


def _diff_functions(ia: SnapshotIndex, ib: SnapshotIndex, fa: dict[str, FunctionInfo],
                    fb: dict[str, FunctionInfo]) -> FunctionDiff:
    m = _Matcher(ia, ib, fa, fb)
    changes: list[FunctionChange] = []
    moved: list[FunctionChange] = []
    formatting: list[FunctionChange] = []
    unchanged = 0
    for q, o in fa.items():
        n = fb.get(q)
        if n is None:
            continue
        if (o.ast_hash is not None and o.ast_hash == n.ast_hash and o.path == n.path
                and o.def_lineno == n.def_lineno and m.same_text(o, n)):
            unchanged += 1  # the common case, without building a FunctionChange
            continue
        c = m.classify(o, n)
        if c.kind == "unchanged":
            unchanged += 1
        elif c.kind == "moved":
            moved.append(c)
        elif c.kind == "formatting":
            formatting.append(c)
        else:
            changes.append(c)
    m.identical_elsewhere()
    m.in_known_containers()
    m.renames()
    m.in_known_containers()
    for o, n in m.pairs:
        c = m.classify(o, n)
        (moved if c.kind == "moved" else changes).append(c)
    changes += [FunctionChange("removed", o, None) for o in m.removed.values()]
    changes += [FunctionChange("added", None, n) for n in m.added.values()]
    rank = {k: i for i, k in enumerate(LISTED_KINDS)}
    changes.sort(key=lambda c: (rank[c.kind], _order(c.new or c.old)))  # type: ignore[arg-type]
    moved.sort(key=lambda c: _order(c.new))  # type: ignore[arg-type]
    formatting.sort(key=lambda c: _order(c.new))  # type: ignore[arg-type]
    files = len({f.path for f in fa.values()} | {f.path for f in fb.values()})
    return FunctionDiff(changes=changes, moved=moved, formatting=formatting, files_compared=files,
                        unchanged=unchanged)


def compare(ia: SnapshotIndex, old: FunctionInfo, ib: SnapshotIndex,
            new: FunctionInfo) -> FunctionChange:
    """Classify one function across two indexes (bisect and has compare single functions).

    ``kind`` is one of the function kinds, or ``"unchanged"`` (same
    normalized AST and byte-identical text at the same place).
    """
    return _Matcher(ia, ib, {}, {}).classify(old, new)


def _select(idx: SnapshotIndex, paths: Iterable[str] | None) -> dict[str, FunctionInfo]:
    if paths is None:
        return dict(idx.functions)
    wanted = set(paths)
    return {q: f for q, f in idx.functions.items() if f.path in wanted}
