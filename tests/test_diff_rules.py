"""Matching and signature rules on a small package written here, one rule per function.

The griffe findings listed in ``GRIFFE`` are what griffe 2.4.1's
``find_breaking_changes`` reports for exactly these two trees (run by hand
during development; griffe is a bench dependency only): recon must name
them the same way, and report what griffe leaves out under its own names.
"""

from __future__ import annotations

import pytest

from recon.diffing import DiffResult, diff
from tests.kit import demo_tree

OLD = {
    "a.py": '''
def moved_pos(a, b, c=1):
    return a


def removed_kw(a, *, k=1):
    return a


def swallowed(a, *, k=1):
    return a


def kind_change(a, b):
    return a


def default_change(a, t=(1,2)):
    return a


def default_same(a, t=(1,2)):
    return a


def now_required(a, b=1):
    return a


def added_required(a):
    return a


def added_optional(a):
    return a


def ret(a) -> int:
    return a


async def made_sync(a):
    return a


class Old:
    def keep(self):
        x = 1
        y = 2
        return x + y

    def edited(self):
        return 1

    def tiny(self):
        pass
''',
}
NEW = {
    "a.py": '''
def moved_pos(b, a, c=1):
    return a


def removed_kw(a):
    return a


def swallowed(a, **kw):
    return a


def kind_change(a, *, b):
    return a


def default_change(a, t=(1, 3)):
    return a


def default_same(a, t=(1, 2)):
    return a + 0


def now_required(a, b):
    return a


def added_required(a, b):
    return a


def added_optional(a, b=None):
    return a


def ret(a):
    return a


def made_sync(a):
    return a
''',
    "b.py": '''
class New:
    def keep(self):
        x = 1
        y = 2
        return x + y

    def edited(self):
        return 2

    def tiny(self):
        pass
''',
}

#: griffe 2.4.1 on these two trees (function, kind, parameter), its OBJECT_REMOVED of Old aside.
GRIFFE = {
    ("moved_pos", "PARAMETER_MOVED", "a"), ("moved_pos", "PARAMETER_MOVED", "b"),
    ("removed_kw", "PARAMETER_REMOVED", "k"), ("kind_change", "PARAMETER_CHANGED_KIND", "b"),
    ("default_change", "PARAMETER_CHANGED_DEFAULT", "t"),
    ("now_required", "PARAMETER_CHANGED_REQUIRED", "b"),
    ("added_required", "PARAMETER_ADDED_REQUIRED", "b"), ("ret", "RETURN_CHANGED_TYPE", None),
}
#: What griffe does not report (nothing breaks for a caller), under recon's names.
RECON_ONLY = {
    ("swallowed", "PARAMETER_SWALLOWED", "k"), ("swallowed", "PARAMETER_ADDED_VARIADIC", "kw"),
    ("added_optional", "PARAMETER_ADDED_OPTIONAL", "b"),
    ("made_sync", "FUNCTION_CHANGED_ASYNC", None),
}


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> DiffResult:
    base = tmp_path_factory.mktemp("rules")
    return diff(demo_tree(base / "old", OLD), demo_tree(base / "new", NEW), sections=["functions"])


def test_signature_changes_use_griffes_names(result: DiffResult) -> None:
    fd = result.functions
    assert fd is not None
    found = {(c.qualname.split(":")[1], s.kind, s.param) for c in fd.changes for s in c.signature}
    assert found == GRIFFE | RECON_ONLY
    by_kind = {s.kind: s for c in fd.changes for s in c.signature}
    assert all(by_kind[k].source == "griffe" and by_kind[k].breaking for _, k, _ in GRIFFE)
    assert all(by_kind[k].source == "recon" and not by_kind[k].breaking for _, k, _ in RECON_ONLY)
    assert by_kind["PARAMETER_MOVED"].text == "Positional parameter was moved"


def test_default_compared_by_ast_not_text(result: DiffResult) -> None:
    fd = result.functions
    assert fd is not None
    same = next(c for c in fd.changes if c.qualname == "demo.a:default_same")
    assert same.kind == "body" and same.signature == ()  # (1,2) == (1, 2)


def test_class_moved_and_renamed(result: DiffResult) -> None:
    fd = result.functions
    assert fd is not None
    keep = next(c for c in fd.moved if c.qualname == "demo.b:New.keep")
    assert keep.old_name == "demo.a:Old.keep"
    # once Old -> New is known, the edited and the trivial method pair up too
    edited = next(c for c in fd.changes if c.qualname == "demo.b:New.edited")
    assert edited.kind == "body" and edited.old_name == "demo.a:Old.edited" and "moved" in edited.parts
    tiny = next(c for c in fd.moved if c.qualname == "demo.b:New.tiny")
    assert tiny.old_name == "demo.a:Old.tiny"
    assert not [c for c in fd.changes if c.kind in ("added", "removed")]
