"""Typed ``--set`` options of the recipes: one reading of each kind, one wording of its error.

``--set k=v`` arrives as a string from the command line and as a number or a list
from the Python API; every recipe reads its options through these.
"""

from __future__ import annotations

from collections.abc import Mapping
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


def opt_ints(options: Mapping[str, Any], key: str) -> list[int] | None:
    """An integer-list ``--set`` option: JSON ``[1,2]`` or ``1,2``."""
    if key not in options or options[key] is None:
        return None
    value = options[key]
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, str):
        value = [v for v in value.replace(",", " ").split() if v]
    if not isinstance(value, list):
        raise ReconError(f"--set {key}: expected a list of integers, got {value!r}")
    out = []
    for item in value:
        try:
            if isinstance(item, bool):
                raise ValueError(item)
            out.append(int(item))
        except (TypeError, ValueError) as err:
            raise ReconError(f"--set {key}: expected a list of integers, got {value!r}") from err
    return out


def opt_bools(options: Mapping[str, Any], key: str) -> list[bool] | None:
    """A boolean-list ``--set`` option: JSON ``[true,false]`` or ``1,0``."""
    if key not in options or options[key] is None:
        return None
    value = options[key]
    if isinstance(value, bool):
        return [value]
    if isinstance(value, str):
        value = [v for v in value.replace(",", " ").split() if v]
    if not isinstance(value, list):
        raise ReconError(f"--set {key}: expected a list of booleans, got {value!r}")
    out = []
    for v in value:
        if isinstance(v, bool):
            out.append(v)
        elif str(v).lower() in ("1", "true", "yes"):
            out.append(True)
        elif str(v).lower() in ("0", "false", "no"):
            out.append(False)
        else:
            raise ReconError(f"--set {key}: expected booleans, got {value!r}")
    return out
