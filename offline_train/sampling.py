"""A uniform sample of a stream of rows in bounded memory: the network's training rows (``data.bounded_sample``)
and the feature spec's numeric sample for medians (``features.profile``)."""

from __future__ import annotations

import numpy as np

_MASK64 = (1 << 64) - 1


def row_keys(start: int, n: int, seed: int) -> np.ndarray:
    """Seeded pseudo-random 64-bit keys of rows ``start..start+n-1`` (splitmix64 of the index): a pure function of
    the row's position, so the sample does not depend on how the rows were cut into batches.

    >>> bool((row_keys(0, 5, 1)[2:] == row_keys(2, 3, 1)).all()), bool((row_keys(0, 5, 1) != row_keys(0, 5, 2)).all())
    (True, True)
    """
    z = np.arange(start, start + n, dtype=np.uint64) + np.uint64((int(seed) + 1) * 0x9E3779B97F4A7C15 & _MASK64)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


class UniformSample:
    """A uniform sample of at most ``max_rows`` of the rows added, in the order they came: the rows with the
    ``max_rows`` smallest seeded keys (``row_keys`` of each row's position among all rows added).

    Every row is kept with the same probability wherever it comes in the stream (thinning the buffer each time
    it filled kept early rows less often). Memory: at most ``max_rows`` candidates plus one batch; once full, a
    batch's rows with a key above the largest kept one are dropped on arrival. ``max_rows`` None keeps every row.
    """

    def __init__(self, max_rows: int | None, seed: int = 0):
        self.max_rows, self.seed = max_rows, seed
        self.seen = 0  # rows added so far
        self._xs, self._ys, self._keys, self._idx = [], [], [], []
        self._held = 0
        self._bound = None  # the largest kept key once the sample is full: a row above it can never get in
        self._widest = 0  # the largest batch added (how far the candidates may run over max_rows)
        self._width = None  # the columns of the first batch (the result's shape when no row was added)

    @property
    def held(self) -> int:
        """Rows held now (at most ``max_rows`` plus one batch)."""
        return self._held

    def add(self, X: np.ndarray, y: np.ndarray | None = None) -> None:
        n = len(X)
        if self._width is None:
            self._width = X.shape[1:]
        start, self.seen = self.seen, self.seen + n
        if self.max_rows is None:
            self._append(X, y, None, None)
            return
        keys, idx = row_keys(start, n, self.seed), np.arange(start, start + n, dtype=np.int64)
        if self._bound is not None:
            keep = keys < self._bound
            X, y, keys, idx = X[keep], (None if y is None else y[keep]), keys[keep], idx[keep]
        self._append(X, y, keys, idx)
        self._widest = max(self._widest, n)
        if self._held > self.max_rows + self._widest:
            self._shrink()

    def _append(self, X, y, keys, idx) -> None:
        self._xs.append(X)
        self._ys.append(y)
        self._keys.append(keys)
        self._idx.append(idx)
        self._held += len(X)

    def _shrink(self) -> None:
        """Keep the ``max_rows`` candidates of smallest key (in stored order)."""
        if self.max_rows is None or self._held <= self.max_rows:
            return
        X, y = np.concatenate(self._xs), (np.concatenate(self._ys) if self._ys[0] is not None else None)
        keys, idx = np.concatenate(self._keys), np.concatenate(self._idx)
        keep = np.sort(np.argpartition(keys, self.max_rows - 1)[:self.max_rows])  # positions in stored order
        self._xs, self._ys, self._keys, self._idx = [X[keep]], [None if y is None else y[keep]], [keys[keep]], [idx[keep]]
        self._held = self.max_rows
        self._bound = keys[keep].max()

    def result(self) -> tuple[np.ndarray, np.ndarray | None]:
        """(X, y): the sample in stored order; every row added where there were no more than ``max_rows``."""
        if self._width is None:
            return np.zeros((0, 0)), None
        self._shrink()
        X = np.concatenate(self._xs)
        return X, (np.concatenate(self._ys) if self._ys[0] is not None else None)
