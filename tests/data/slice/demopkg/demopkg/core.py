from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from demopkg import scale
from .sub import helpers
from .sub.helpers import cached_square

if TYPE_CHECKING:
    from transformers import PretrainedConfig
else:
    PretrainedConfig = object

try:
    import flash_attn_missing as fa
except ImportError:
    fa = None

LIMIT = 10
DEFAULTS = {"width": 2}


def uses_default(x: PretrainedConfig, width=DEFAULTS["width"]) -> int:
    return scale(x) + width


@torch.compile(dynamic=True)
def compiled_add(a, b):
    return a + b


@torch.inference_mode()
def under_inference(a):
    return helpers.scale(a) + cached_square(a)


class Layer(nn.Module):
    """Subclasses an outside class."""

    kind = "layer"

    def __init__(self, size):
        super().__init__()
        self.size = size

    def double(self):
        return self._twice(self.size)

    def _twice(self, v):
        return 2 * v

    def unrelated(self):
        return np.zeros(3)


def make_layer(size):
    layer = Layer(size)
    return layer.double(), isinstance(layer, nn.Module), layer.kind


def has_flash():
    return fa is not None


def broken():
    return not_defined_anywhere + LIMIT  # noqa: F821 - an unresolved name, on purpose


class Counter:
    """A method target that mutates self."""

    step = 1

    def bump(self, n):
        self.total = self.total + n * self.step
        self.history.append(n)
        return self.total

    def limited(self):
        if self.total > LIMIT:
            return torch.cuda.is_available()
        return False
