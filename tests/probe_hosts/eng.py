"""The module most host programs of the probe matrix probe (tests/test_probe_invisible.py)."""

from __future__ import annotations

import functools
import sys
import warnings


class Engine:
    """A class with every kind of callable the runtime instruments."""

    block = 16

    def __init__(self) -> None:
        self.cfg = type("Cfg", (), {"block_size": 1152})()
        self.__secret = 7

    def step(self, n: int, *, scale: int = 2) -> int:
        """Docstring kept."""
        return n * scale

    @classmethod
    def make(cls, k: int) -> int:
        return k + 1

    @staticmethod
    def helper(a, *rest, **kw):
        return (a, rest, sorted(kw))

    @property
    def size(self) -> int:
        return self.block * 2

    def parent(self) -> str:
        return super().__repr__()[:1]

    def secret(self) -> int:
        return self.__secret


def total(xs: list[int], start: int = 0, *, bonus: int = 0) -> int:
    return start + sum(xs) + bonus


async def fetch(x: int) -> int:
    return x + 1


def count(n: int):
    yield from range(n)
    return "done"


def fail(x: int) -> None:
    raise ValueError(f"bad {x}")


def rec(n: int) -> int:
    try:
        return rec(n + 1)
    except RecursionError:
        return n


def deep(n: int) -> int:
    return 0 if n == 0 else deep(n - 1) + 1


def warn() -> None:
    warnings.warn("careful", stacklevel=2)


def caller() -> str:
    return sys._getframe(1).f_code.co_name


def deco(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper


class Worker:
    def __init__(self) -> None:
        self.gpu_memory_utilization = 0.9

    @deco
    def determine_available_memory(self, budget: int) -> int:
        return int(budget * self.gpu_memory_utilization)


def make_adder(k: int):
    def add(x: int) -> int:
        return x + k
    return add


add3 = make_adder(3)
COUNTER = 0


def bump() -> int:
    global COUNTER
    COUNTER += 1
    return COUNTER


def echo(*args, **kwargs):
    return len(args) + len(kwargs)
