"""The passes of the sigma rule (DESIGN 3.2) as mergeable accumulators.

Each pass is an accumulator over raw feature batches: ``update(X)`` adds a
batch (standardised with the fitted scaler), ``merge(other)`` adds another
accumulator's rows. Every state is a count, a minimum/maximum or a set of
values with counts, so the result does not depend on how the rows were split
or in which order the pieces were merged: an engine may run one accumulator
per partition on many workers and merge them, and get bit for bit what one
accumulator over all rows gets (``offline_train.engine``).

The passes (``KurtosisSigmas.fit_with`` drives them): ``RangePass`` gives
the row count and range of each standardised column; ``CutValuesPass`` then
counts the values of a ``Window`` of each column, at first its whole range:
a fine histogram of the window, and each distinct value with its count. When
the window holds at most ``MAX_WINDOW_VALUES`` distinct values (a binary or
small-count column) the cut values are read off at once; otherwise the
histogram locates the bin of each cut rank and the pass runs again on that
bin, widened by a bin each side, which holds few values (repeated until it
does: a single extreme value can squeeze the rest of a column into one bin).
``KeptHistogramPass`` is the coarse histogram of the kept values. For most
columns that is four passes, as in the reference implementation's sort, and
memory stays bounded whatever the row count.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .scaler import Scaler

FINE_BINS = 8192
# Distinct values a CutValuesPass keeps per window before it gives up and asks for a narrower window.
MAX_WINDOW_VALUES = 4096


def hist(z: np.ndarray, lo: float, hi: float, bins: int) -> np.ndarray:
    """Equal-width counts over [lo, hi] (numpy's edges: the maximum falls in the last bin)."""
    if not hi > lo:
        out = np.zeros(bins, np.int64)
        out[0] = len(z)
        return out
    return np.histogram(z, bins=bins, range=(lo, hi))[0].astype(np.int64)


@dataclass
class RangePass:
    """Row count and [min, max] of each standardised column."""

    scaler: Scaler
    n: int = 0
    lo: np.ndarray = None
    hi: np.ndarray = None

    def __post_init__(self):
        d = len(self.scaler.mean_)
        self.lo = np.full(d, np.inf) if self.lo is None else self.lo
        self.hi = np.full(d, -np.inf) if self.hi is None else self.hi

    def update(self, X: np.ndarray) -> RangePass:
        if len(X):
            Z = self.scaler.transform(X)
            self.n += len(Z)
            self.lo, self.hi = np.minimum(self.lo, Z.min(0)), np.maximum(self.hi, Z.max(0))
        return self

    def merge(self, other: RangePass) -> RangePass:
        self.n += other.n
        self.lo, self.hi = np.minimum(self.lo, other.lo), np.maximum(self.hi, other.hi)
        return self


@dataclass
class Window:
    """Values of one column in [a, b], counted: the rows below ``a``, a fine histogram of
    the window, and each distinct value with its count (until there are too many)."""

    a: float
    b: float
    below: int = 0
    counts: np.ndarray = None  # FINE_BINS counts over [a, b]
    values: np.ndarray = None  # distinct values in [a, b], ascending; None once past MAX_WINDOW_VALUES
    multiplicity: np.ndarray = None

    def __post_init__(self):
        if self.counts is None:
            self.counts = np.zeros(FINE_BINS, np.int64)
            self.values, self.multiplicity = np.zeros(0), np.zeros(0, np.int64)

    @property
    def overflowed(self) -> bool:
        return self.values is None

    def update(self, z: np.ndarray) -> None:
        self.below += int((z < self.a).sum())
        inside = z[(z >= self.a) & (z <= self.b)]
        if not len(inside):
            return
        self.counts += hist(inside, self.a, self.b, FINE_BINS)
        if not self.overflowed:
            self._add(*np.unique(inside, return_counts=True))

    def merge(self, other: Window) -> None:
        self.below += other.below
        self.counts += other.counts
        if other.overflowed:
            self.values = self.multiplicity = None
        elif not self.overflowed:
            self._add(other.values, other.multiplicity)

    def _add(self, values: np.ndarray, multiplicity: np.ndarray) -> None:
        merged, inverse = np.unique(np.concatenate([self.values, values]), return_inverse=True)
        if len(merged) > MAX_WINDOW_VALUES:
            self.values = self.multiplicity = None
            return
        self.multiplicity = np.bincount(inverse, np.concatenate([self.multiplicity, multiplicity]),
                                        minlength=len(merged)).astype(np.int64)
        self.values = merged

    def cut(self, rank: int) -> tuple[float, int, int]:
        """The value of 0-based ``rank``, and how many values lie below it and at or below it."""
        cum = self.below + np.cumsum(self.multiplicity)
        i = int(np.searchsorted(cum, rank, side="right"))
        if rank < self.below or i >= len(self.values):
            raise RuntimeError("rank outside its window; the data changed between passes")
        return float(self.values[i]), int(cum[i - 1]) if i > 0 else self.below, int(cum[i])

    def narrowed(self, rank: int) -> Window:
        """A narrower window sure to hold ``rank``, located with this window's fine histogram."""
        a, b = rank_window(self.counts, self.a, self.b, rank - self.below)
        return Window(a, b)


def rank_window(counts: np.ndarray, lo: float, hi: float, rank: int) -> tuple[float, float]:
    """A value interval sure to hold the value of 0-based ``rank`` among the histogram's values:
    its fine bin, widened by one bin each side (numpy's binning may round a value into a neighbour)."""
    if not hi > lo:
        return lo, hi
    k = int(np.searchsorted(np.cumsum(counts), rank, side="right"))
    width = (hi - lo) / len(counts)
    return max(lo, lo + (k - 1) * width), min(hi, lo + (k + 2) * width)


@dataclass
class CutValuesPass:
    """Per column, the low-cut and high-cut ``Window``; ``None`` for a column already settled."""

    scaler: Scaler
    windows: list[list[Window] | None]

    def update(self, X: np.ndarray) -> CutValuesPass:
        if len(X):
            Z = self.scaler.transform(X)
            for j, pair in enumerate(self.windows):
                for w in pair or ():
                    w.update(Z[:, j])
        return self

    def merge(self, other: CutValuesPass) -> CutValuesPass:
        for mine, theirs in zip(self.windows, other.windows, strict=True):
            for a, b in zip(mine or (), theirs or (), strict=True):
                a.merge(b)
        return self


@dataclass
class KeptHistogramPass:
    """The ``bins``-bin histogram of the values strictly between the cut values lo and hi of each column
    (the copies of the cut values that are kept are added by the driver)."""

    scaler: Scaler
    lo: np.ndarray
    hi: np.ndarray
    bins: int
    counts: np.ndarray = field(default=None)

    def __post_init__(self):
        if self.counts is None:
            self.counts = np.zeros((len(self.lo), self.bins), np.int64)

    def update(self, X: np.ndarray) -> KeptHistogramPass:
        if len(X):
            Z = self.scaler.transform(X)
            for j in range(Z.shape[1]):
                z = Z[:, j]
                self.counts[j] += hist(z[(z > self.lo[j]) & (z < self.hi[j])], self.lo[j], self.hi[j], self.bins)
        return self

    def merge(self, other: KeptHistogramPass) -> KeptHistogramPass:
        self.counts += other.counts
        return self
