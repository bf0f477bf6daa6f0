"""Per-feature standardisation fitted by streaming over record batches.

Column sums and sums of squares are kept exactly (as integers, see
``exact_sums``), so moments from any split of the rows, merged in any order,
give the very same scaler, bit for bit, as the whole column in memory: one
pass over Parquet, or one task per partition on a cluster, changes nothing.

>>> import numpy as np
>>> X = np.array([[0., 1.], [2., 1.], [4., 0.]])
>>> s = Scaler.fit(X)
>>> s.mean_.tolist(), s.std_.round(4).tolist(), s.discrete_.tolist()
([2.0, 0.0], [1.633, 1.0], [False, True])
>>> s.transform(X)[:, 0].round(3).tolist()
[-1.225, 0.0, 1.225]
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

# Every finite float64 is M * 2**(e - 53) with an integer |M| < 2**53 and e >= -1073 (np.frexp), so
# sums are integers in units of 2**UNIT_EXP and sums of squares in units of 2**(2 * UNIT_EXP).
UNIT_EXP = -1126
# Rows per exact block: 17- and 18-bit mantissa pieces, multiplied in pairs (sums of products < 2**38)
# and added over at most 2**14 rows, stay below 2**53, so numpy's float64 bincount adds them without
# rounding; it also keeps the block's temporaries small (2 MiB each at 16 features).
_BLOCK_ROWS = 1 << 14


def exact_sums(X: np.ndarray) -> tuple[list[int], list[int]]:
    """Per column, the exact sum (units 2**UNIT_EXP) and sum of squares (units 2**(2*UNIT_EXP)) of finite ``X``.

    >>> s, q = exact_sums(np.array([[0.1], [0.2], [-3.0]]))
    >>> Fraction(s[0]) * Fraction(2) ** UNIT_EXP == Fraction(0.1) + Fraction(0.2) + Fraction(-3.0)
    True
    >>> Fraction(q[0]) * Fraction(2) ** (2 * UNIT_EXP) == Fraction(0.1) ** 2 + Fraction(0.2) ** 2 + 9
    True
    """
    X = np.asarray(X, dtype=np.float64)
    d = X.shape[1]
    sums, squares = [0] * d, [0] * d
    for start in range(0, len(X), _BLOCK_ROWS):
        _add_block(X[start:start + _BLOCK_ROWS], sums, squares)
    return sums, squares


def _add_block(B: np.ndarray, sums: list[int], squares: list[int]) -> None:
    """Add a block's exact sums to ``sums`` and ``squares``.

    Each value is sign * (a 2**35 + b 2**17 + c) * 2**(e - 53) with integers a, b < 2**18 and
    c < 2**17, split off in float64 without rounding. Per (column, exponent), numpy's float64
    bincount adds the pieces and their pairwise products exactly (every total stays below 2**53),
    and Python integers put them together.
    """
    d = B.shape[1]
    if B.size == 0:
        return
    m, e = np.frexp(B)
    emin = int(e.min())
    width = int(e.max()) - emin + 1
    idx = ((e - emin) + np.arange(d) * width).ravel()
    sign = np.sign(m)
    t = np.abs(m) * 2.0**18
    a = np.floor(t)
    t = (t - a) * 2.0**18
    b = np.floor(t)
    c = (t - b) * 2.0**17

    def total(w):
        return np.bincount(idx, weights=w.ravel(), minlength=d * width).reshape(d, width).tolist()

    sa, sb, sc = total(sign * a), total(sign * b), total(sign * c)
    qaa, qab, qbb, qbc, qcc = total(a * a), total(2 * a * b), total(b * b + 4 * a * c), total(2 * b * c), total(c * c)
    used = np.bincount(idx, minlength=d * width).reshape(d, width) > 0
    for j, k in zip(*np.nonzero(used), strict=True):
        j, k = int(j), int(k)
        shift = k + emin - 53 - UNIT_EXP
        sums[j] += ((int(sa[j][k]) << 35) + (int(sb[j][k]) << 17) + int(sc[j][k])) << shift
        sq = ((int(qaa[j][k]) << 70) + (int(qab[j][k]) << 52) + (int(qbb[j][k]) << 34)
              + (int(qbc[j][k]) << 17) + int(qcc[j][k]))
        squares[j] += sq << (2 * shift)


@dataclass
class ColumnMoments:
    """Count, exact sums and sums of squares, min, max and {-1,0,1}-membership of each column.

    Mergeable: ``a.merge(b)`` equals the moments of a's rows and b's rows together, exactly.
    """

    n: int
    sums: list[int]
    squares: list[int]
    min: np.ndarray
    max: np.ndarray
    ternary: np.ndarray  # every value so far is in {-1, 0, 1}

    @classmethod
    def empty(cls, d: int) -> ColumnMoments:
        return cls(0, [0] * d, [0] * d, np.full(d, np.inf), np.full(d, -np.inf), np.ones(d, bool))

    def update(self, X: np.ndarray) -> ColumnMoments:
        if len(X) == 0:
            return self
        s, q = exact_sums(X)
        return self.merge(ColumnMoments(len(X), s, q, X.min(axis=0), X.max(axis=0),
                                        np.isin(X, (-1.0, 0.0, 1.0)).all(axis=0)))

    def merge(self, other: ColumnMoments) -> ColumnMoments:
        self.n += other.n
        self.sums = [a + b for a, b in zip(self.sums, other.sums, strict=True)]
        self.squares = [a + b for a, b in zip(self.squares, other.squares, strict=True)]
        self.min = np.minimum(self.min, other.min)
        self.max = np.maximum(self.max, other.max)
        self.ternary = self.ternary & other.ternary
        return self

    @property
    def mean(self) -> np.ndarray:
        """Each column's mean, correctly rounded."""
        unit = Fraction(2) ** UNIT_EXP
        return np.array([float(Fraction(s, self.n) * unit) for s in self.sums])

    @property
    def std(self) -> np.ndarray:
        """Each column's population standard deviation, sqrt((n Q - S^2) / n^2), finite even where the variance is not."""
        n = self.n
        unit = Fraction(2) ** (2 * UNIT_EXP)
        return np.array([_sqrt(Fraction(n * q - s * s, n * n) * unit) for s, q in zip(self.sums, self.squares, strict=True)])


def _sqrt(v: Fraction) -> float:
    """sqrt of an exact non-negative value, scaled by a power of 4 first: a variance of 1e600 has a std of 1e300."""
    if v == 0:
        return 0.0
    half = (v.numerator.bit_length() - v.denominator.bit_length()) // 2
    return math.ldexp(math.sqrt(float(v / Fraction(4) ** half)), half)


@dataclass
class Scaler:
    """x -> (x - mean_) / std_; a zero-std column gets std 1.

    ``discrete_`` marks {0,1}/{-1,0,1} columns; with ``scale_discrete=False``
    (the reference code's choice) they pass through unscaled.

    ``categories`` (``from_moments``, ``fit``) marks category columns (a feature
    spec's one-hot and boolean columns). One that never left its training value in
    n rows (``name=<unseen>``, a boolean always false) is centred on that value
    and scaled by 1/sqrt(n), the standard deviation of a column set once in n
    rows: a category never seen in training then stands sqrt(n) units off, where
    unscaled it stood 1 unit off, nearer than a rare category the data holds
    (``tests/test_features.py``, docs/contaminated-passes.md "Twenty-eighth pass").
    Training rows still hold one value there (0, as ``<unseen>`` always did).

    >>> X = np.array([[0., 1.], [0., 0.], [0., 1.], [0., 0.]])
    >>> s = Scaler.fit(X, categories=np.array([True, True]))
    >>> s.transform(np.array([[1., 1.]])).tolist()  # column 0 never set in 4 rows: 1 / (1 / sqrt(4))
    [[2.0, 1.0]]
    """

    mean_: np.ndarray
    std_: np.ndarray
    discrete_: np.ndarray
    constant_: np.ndarray

    @classmethod
    def from_moments(cls, m: ColumnMoments, scale_discrete: bool = False,
                     categories: np.ndarray | None = None) -> Scaler:
        if m.n == 0:
            raise ValueError("cannot fit a scaler on zero rows")
        std = m.std
        constant = m.max <= m.min
        std = np.where(constant | (std == 0), 1.0, std)
        mean = m.mean.copy()
        if not scale_discrete:
            mean = np.where(m.ternary, 0.0, mean)
            std = np.where(m.ternary, 1.0, std)
        if categories is not None:
            never_left = np.asarray(categories, bool) & constant
            mean = np.where(never_left, m.min, mean)
            std = np.where(never_left, 1.0 / math.sqrt(m.n), std)
        return cls(mean, std, m.ternary.copy(), constant)

    @classmethod
    def fit(cls, X: np.ndarray, scale_discrete: bool = False, categories: np.ndarray | None = None) -> Scaler:
        return cls.fit_batches([X], X.shape[1], scale_discrete, categories)

    @classmethod
    def fit_batches(cls, batches: Iterable[np.ndarray], d: int, scale_discrete: bool = False,
                    categories: np.ndarray | None = None) -> Scaler:
        m = ColumnMoments.empty(d)
        for X in batches:
            m.update(np.asarray(X, dtype=np.float64))
        return cls.from_moments(m, scale_discrete, categories)

    def transform(self, X: np.ndarray) -> np.ndarray:
        return (np.asarray(X, dtype=np.float64) - self.mean_) / self.std_

    def inverse_transform(self, Z: np.ndarray) -> np.ndarray:
        return np.asarray(Z, dtype=np.float64) * self.std_ + self.mean_

    def to_dict(self) -> dict:
        return {k: getattr(self, k).tolist() for k in ("mean_", "std_", "discrete_", "constant_")}

    @classmethod
    def from_dict(cls, d: dict, n_features: int | None = None) -> Scaler:
        """A scaler from ``to_dict``; raises ValueError unless its four arrays are 1-D of one length (``n_features``
        where given), the means finite, the standard deviations finite and above 0 (what ``transform`` divides by) and
        the discrete and constant flags true/false.

        >>> Scaler.from_dict({"mean_": [0.0], "std_": [0.0], "discrete_": [False], "constant_": [False]})
        Traceback (most recent call last):
        ...
        ValueError: scaler: std_ must be finite and above 0
        """
        for name in ("discrete_", "constant_"):  # np.asarray(..., bool) would read "x" or 2 as true
            if not isinstance(d[name], list) or not all(isinstance(v, bool) for v in d[name]):
                raise ValueError(f"scaler: {name} must be a list of true/false")
        s = cls(np.asarray(d["mean_"], float), np.asarray(d["std_"], float),
                np.asarray(d["discrete_"], bool), np.asarray(d["constant_"], bool))
        n = n_features if n_features is not None else s.mean_.shape[0] if s.mean_.ndim == 1 else None
        for name in ("mean_", "std_", "discrete_", "constant_"):
            if n is None or getattr(s, name).shape != (n,):
                raise ValueError(f"scaler: {name} has shape {getattr(s, name).shape}, expected ({n or 'd'},)")
        if not np.isfinite(s.mean_).all():
            raise ValueError("scaler: mean_ must be finite")
        if not (np.isfinite(s.std_) & (s.std_ > 0)).all():
            raise ValueError("scaler: std_ must be finite and above 0")
        return s
