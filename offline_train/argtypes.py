"""argparse types for the commands' numeric options: a bad value is one usage line and exit 2, not a traceback.

>>> positive_int("3"), port("8080")
(3, 8080)
>>> positive_int("0")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: expected a positive integer, got 0
>>> port("99999")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: expected a TCP port (1-65535), got 99999
>>> positive_float("0.5"), port_or_free("0")
(0.5, 0)
>>> positive_float("-1")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: expected a positive number, got -1.0
>>> share("0.1"), share("1")
(0.1, 1.0)
>>> share("2")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: expected a share in (0, 1], got 2.0
>>> seed("7")
7
>>> seed("-1")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: expected a seed in 0..4294967295, got -1
"""

from __future__ import annotations

import argparse
from pathlib import Path


def _int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None


def positive_int(text: str) -> int:
    """An integer above zero (a count: rows, events, workers, rounds)."""
    n = _int(text, "a positive integer")
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {n}")
    return n


def seed(text: str) -> int:
    """A random seed: what numpy, torch and scikit-learn all take (scikit-learn's random_state stops at 2**32 - 1)."""
    n = _int(text, "a seed in 0..4294967295")
    if not 0 <= n < 2**32:
        raise argparse.ArgumentTypeError(f"expected a seed in 0..4294967295, got {n}")
    return n


def port(text: str) -> int:
    """A TCP port number."""
    n = _int(text, "a TCP port (1-65535)")
    if not 1 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"expected a TCP port (1-65535), got {n}")
    return n


def _float(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None


def positive_float(text: str) -> float:
    """A finite number above zero (a rate, a duration)."""
    x = _float(text, "a positive number")
    if not 0 < x < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {x}")
    return x


def non_negative_float(text: str) -> float:
    """A finite number of zero or more (a window where 0 means everything).

    >>> non_negative_float("0"), non_negative_float("1.5")
    (0.0, 1.5)
    >>> non_negative_float("-1")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected a number >= 0, got -1.0
    """
    x = _float(text, "a number >= 0")
    if not 0 <= x < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {x}")
    return x


def port_or_free(text: str) -> int:
    """A TCP port number, or 0 for a free one."""
    return 0 if _int(text, "a TCP port (1-65535) or 0 for a free one") == 0 else port(text)


def share(text: str) -> float:
    """A fraction above zero and at most one (a share of events)."""
    x = _float(text, "a share in (0, 1]")
    if not 0 < x <= 1:
        raise argparse.ArgumentTypeError(f"expected a share in (0, 1], got {x}")
    return x


def folder(text: str) -> str:
    """A local folder a command keeps files in: one that exists, or one it can create (not a file, not under one).

    >>> folder("/tmp")
    '/tmp'
    >>> folder("/dev/null/sub")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected a folder, but /dev/null is not one: cannot keep files in /dev/null/sub
    """
    path = Path(text)
    # storage.nearest_existing's rule, written here again: the parser does not load pyarrow (storage does)
    above = next((p for p in (path, *path.parents) if p.exists()), Path("."))
    if not above.is_dir():
        where = f": cannot keep files in {text}" if above != path else ""
        raise argparse.ArgumentTypeError(f"expected a folder, but {above} is not one{where}")
    return text
