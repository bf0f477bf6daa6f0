"""A uniform sample of a stream of rows in bounded memory: the network's training rows (``data.bounded_sample``)
and the feature spec's numeric sample for medians (``features.profile``)."""

from __future__ import annotations

import numpy as np

_MASK64 = (1 << 64) - 1
_SLACK = 4  # the candidates are cut back to max_rows when they run over it by more than max_rows / _SLACK


def _mix(positions: np.ndarray, seed: int) -> np.ndarray:
    """splitmix64 of the seeded positions: a bijection of 64-bit words, so distinct positions get distinct keys."""
    z = positions.astype(np.uint64)  # a copy, worked on in place (a cut's memory)
    z += np.uint64((int(seed) + 1) * 0x9E3779B97F4A7C15 & _MASK64)
    z ^= z >> np.uint64(30)
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(27)
    z *= np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return z


def row_keys(start: int, n: int, seed: int) -> np.ndarray:
    """Seeded pseudo-random 64-bit keys of rows ``start..start+n-1`` (splitmix64 of the index): a pure function of
    the row's position, so the sample does not depend on how the rows were cut into batches.

    >>> bool((row_keys(0, 5, 1)[2:] == row_keys(2, 3, 1)).all()), bool((row_keys(0, 5, 1) != row_keys(0, 5, 2)).all())
    (True, True)
    """
    return _mix(np.arange(start, start + n, dtype=np.uint64), seed)


def _positions(p: np.ndarray, seen: int) -> np.ndarray:
    """Row positions in 4 bytes each while every position so far fits (8 past 2**32 rows)."""
    return p.astype(np.uint32 if seen <= 1 << 32 else np.uint64, copy=False)


class UniformSample:
    """A uniform sample of at most ``max_rows`` of the rows added, in the order they came: the rows with the
    ``max_rows`` smallest seeded keys (``row_keys`` of each row's position among all rows added).

    Every row is kept with the same probability wherever it comes in the stream (thinning the buffer each time
    it filled kept early rows less often). The candidates are cut back to the ``max_rows`` of smallest key when
    they run over ``max_rows`` by more than ``max_rows / 4``, so a cut's cost, O(max_rows + one batch), is spread
    over at least ``max_rows / 4`` rows (a constant cost per row whatever the batch size); after a cut a batch's
    rows with a key above the largest kept one are dropped on arrival. Memory between batches: at most
    ``1.25 * max_rows`` rows and, once a cut was made, their positions (4 bytes a row; the keys are recomputed
    from them). Up to ``max_rows`` rows nothing but the rows is held and every row is kept as it came;
    ``max_rows`` None keeps every row. Where the cuts fall does not change the result: the keys are distinct
    (splitmix64 is a bijection), so the ``max_rows`` smallest are one set, returned in the order the rows came.
    """

    def __init__(self, max_rows: int | None, seed: int = 0):
        self.max_rows, self.seed = max_rows, seed
        self.seen = 0  # rows added so far
        self._xs, self._ys = [], []
        self._pos = []  # positions of the rows held, once a cut was made (before, they are rows 0..seen-1)
        self._held = 0
        self._bound = None  # the largest kept key once a cut was made: a row above it can never get in
        self._width = None  # the columns of the first batch (the result's shape when no row was added)

    @property
    def held(self) -> int:
        """Rows held now (between batches at most ``max_rows + max_rows // 4``)."""
        return self._held

    def add(self, X: np.ndarray, y: np.ndarray | None = None) -> None:
        n = len(X)
        if self._width is None:
            self._width = X.shape[1:]
        start, self.seen = self.seen, self.seen + n
        if self.max_rows is None:
            self._append(X, y)
            return
        if self._bound is not None:
            keep = np.flatnonzero(row_keys(start, n, self.seed) < self._bound)
            if len(keep) == 0:
                return
            self._pos.append(_positions(keep + start, self.seen))
            X, y = X[keep], (None if y is None else y[keep])
        self._append(X, y)
        if self._held > self.max_rows + self.max_rows // _SLACK:
            self._shrink()

    def _append(self, X, y) -> None:
        self._xs.append(X)
        self._ys.append(y)
        self._held += len(X)

    def _shrink(self) -> None:
        """Keep the ``max_rows`` candidates of smallest key (in stored order)."""
        if self.max_rows is None or self._held <= self.max_rows:
            return
        X, y = np.concatenate(self._xs), (np.concatenate(self._ys) if self._ys[0] is not None else None)
        self._xs = self._ys = None  # a cut's memory: the pieces go as soon as they are joined
        if self._bound is None:  # the first cut: the rows held are rows 0..held-1, their positions their indices
            pos, keys = None, row_keys(0, self._held, self.seed)
        else:
            pos = np.concatenate(self._pos)
            self._pos, keys = None, _mix(pos, self.seed)
        keep = np.argpartition(keys, self.max_rows - 1)[:self.max_rows]
        keep.sort()  # positions in stored order
        self._bound = keys[keep].max()
        del keys
        self._xs, self._ys = [X[keep]], [None if y is None else y[keep]]
        self._pos = [_positions(keep if pos is None else pos[keep], self.seen)]
        self._held = self.max_rows

    def result(self) -> tuple[np.ndarray, np.ndarray | None]:
        """(X, y): the sample in stored order; every row added where there were no more than ``max_rows``."""
        if self._width is None:
            return np.zeros((0, 0)), None
        self._shrink()
        X = np.concatenate(self._xs)
        return X, (np.concatenate(self._ys) if self._ys[0] is not None else None)
