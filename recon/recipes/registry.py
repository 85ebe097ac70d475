"""The recipe registry: each recipe module registers itself here on import."""

from __future__ import annotations

import difflib
import importlib
import pkgutil

from ..errors import ReconError
from .base import Recipe

_RECIPES: dict[str, Recipe] = {}
_LOADED: list[bool] = []  # the whole catalog imported (one module imported alone is not all)


def register(recipe: Recipe) -> Recipe:
    if recipe.name in _RECIPES:
        raise ValueError(f"duplicate recipe {recipe.name}")
    _RECIPES[recipe.name] = recipe
    return recipe


def _load_all() -> None:
    from . import catalog

    for mod in pkgutil.iter_modules(catalog.__path__):
        importlib.import_module(f"{catalog.__name__}.{mod.name}")
    _LOADED.append(True)


def all_recipes() -> list[Recipe]:
    if not _LOADED:  # not "no recipe yet": importing one recipe's module registers only it
        _load_all()
    return sorted(_RECIPES.values(), key=lambda r: (r.engine, r.name))


def get(name: str) -> Recipe:
    all_recipes()
    if name in _RECIPES:
        return _RECIPES[name]
    close = difflib.get_close_matches(name, list(_RECIPES), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(sorted(_RECIPES))}"
    raise ReconError(f"no recipe named {name!r}{hint}")
