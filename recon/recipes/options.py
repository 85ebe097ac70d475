"""Typed ``--set`` options of the recipes: one reading of each kind, one wording of its error.

``--set k=v`` arrives as a string from the command line and as a number or a list
from the Python API; every recipe reads its options through these.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..errors import ReconError


def opt_int(options: Mapping[str, Any], key: str, default: int | None = None) -> int | None:
    """An integer ``--set`` option: ``8``, ``"8"`` or ``"8.0"``; a clear error for anything else."""
    value = options.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ReconError(f"--set {key}: expected an integer, got {value!r}")
    try:
        number = float(value)
    except ValueError as err:
        raise ReconError(f"--set {key}: expected an integer, got {value!r}") from err
    if number != int(number):
        raise ReconError(f"--set {key}: expected an integer, got {value!r}")
    return int(number)


def opt_float(options: Mapping[str, Any], key: str, default: float | None = None) -> float | None:
    """A number ``--set`` option (clear error for a word)."""
    value = options.get(key, default)
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError) as err:
        raise ReconError(f"--set {key}: expected a number, got {value!r}") from err


def _list_option(options: Mapping[str, Any], key: str, single: type, what: str,
                 convert: Callable[[Any], Any]) -> list[Any] | None:
    """A list ``--set`` option: JSON ``[1,2]``, ``1,2`` or one ``single`` value, each item
    through ``convert`` (ValueError: not one); None when the option is not given."""
    value = options.get(key)
    if value is None:
        return None
    if isinstance(value, single) and (single is bool or not isinstance(value, bool)):
        return [value]
    if isinstance(value, str):
        value = [v for v in value.replace(",", " ").split() if v]
    if not isinstance(value, list):
        raise ReconError(f"--set {key}: expected a list of {what}, got {value!r}")
    try:
        return [convert(item) for item in value]
    except (TypeError, ValueError) as err:
        raise ReconError(f"--set {key}: expected a list of {what}, got {value!r}") from err


def _integer(item: Any) -> int:
    if isinstance(item, bool):
        raise ValueError(item)
    return int(item)


def _boolean(item: Any) -> bool:
    if isinstance(item, bool):
        return item
    word = str(item).lower()
    if word not in ("1", "true", "yes", "0", "false", "no"):
        raise ValueError(item)
    return word in ("1", "true", "yes")


def opt_ints(options: Mapping[str, Any], key: str) -> list[int] | None:
    """An integer-list ``--set`` option: JSON ``[1,2]`` or ``1,2``."""
    return _list_option(options, key, int, "integers", _integer)


def opt_bools(options: Mapping[str, Any], key: str) -> list[bool] | None:
    """A boolean-list ``--set`` option: JSON ``[true,false]`` or ``1,0``."""
    return _list_option(options, key, bool, "booleans", _boolean)
