import functools

FACTOR = 3
UNUSED = object()


def scale(x):
    return x * FACTOR


@functools.lru_cache(maxsize=None)
def cached_square(x):
    return x * x


def never_called():
    return UNUSED
