"""Per-feature standardisation fitted by streaming over record batches.

Moments merge exactly across batches (Chan et al.'s pairwise update), so one
pass over Parquet gives the same scaler as the whole column in memory.

>>> import numpy as np
>>> X = np.array([[0., 1.], [2., 1.], [4., 0.]])
>>> s = Scaler.fit(X)
>>> s.mean_.tolist(), s.std_.round(4).tolist(), s.discrete_.tolist()
([2.0, 0.0], [1.633, 1.0], [False, True])
>>> s.transform(X)[:, 0].round(3).tolist()
[-1.225, 0.0, 1.225]
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np


@dataclass
class ColumnMoments:
    """Running count, mean, M2, min, max and {-1,0,1}-membership of each column."""

    n: int
    mean: np.ndarray
    m2: np.ndarray
    min: np.ndarray
    max: np.ndarray
    ternary: np.ndarray  # every value so far is in {-1, 0, 1}

    @classmethod
    def empty(cls, d: int) -> ColumnMoments:
        return cls(0, np.zeros(d), np.zeros(d), np.full(d, np.inf), np.full(d, -np.inf), np.ones(d, bool))

    def update(self, X: np.ndarray) -> ColumnMoments:
        if len(X) == 0:
            return self
        nb = len(X)
        mb = X.mean(axis=0)
        m2b = ((X - mb) ** 2).sum(axis=0)
        n = self.n + nb
        delta = mb - self.mean
        self.mean = self.mean + delta * nb / n
        self.m2 = self.m2 + m2b + delta**2 * self.n * nb / n
        self.n = n
        self.min = np.minimum(self.min, X.min(axis=0))
        self.max = np.maximum(self.max, X.max(axis=0))
        self.ternary &= np.isin(X, (-1.0, 0.0, 1.0)).all(axis=0)
        return self


@dataclass
class Scaler:
    """x -> (x - mean_) / std_; a zero-std column gets std 1.

    ``discrete_`` marks {0,1}/{-1,0,1} columns; with ``scale_discrete=False``
    (the reference code's choice) they pass through unscaled.
    """

    mean_: np.ndarray
    std_: np.ndarray
    discrete_: np.ndarray
    constant_: np.ndarray

    @classmethod
    def from_moments(cls, m: ColumnMoments, scale_discrete: bool = False) -> Scaler:
        if m.n == 0:
            raise ValueError("cannot fit a scaler on zero rows")
        std = np.sqrt(m.m2 / m.n)
        constant = m.max <= m.min
        std = np.where(constant | (std == 0), 1.0, std)
        mean = m.mean.copy()
        if not scale_discrete:
            mean = np.where(m.ternary, 0.0, mean)
            std = np.where(m.ternary, 1.0, std)
        return cls(mean, std, m.ternary.copy(), constant)

    @classmethod
    def fit(cls, X: np.ndarray, scale_discrete: bool = False) -> Scaler:
        return cls.fit_batches([X], X.shape[1], scale_discrete)

    @classmethod
    def fit_batches(cls, batches: Iterable[np.ndarray], d: int, scale_discrete: bool = False) -> Scaler:
        m = ColumnMoments.empty(d)
        for X in batches:
            m.update(np.asarray(X, dtype=np.float64))
        return cls.from_moments(m, scale_discrete)

    def transform(self, X: np.ndarray) -> np.ndarray:
        return (np.asarray(X, dtype=np.float64) - self.mean_) / self.std_

    def inverse_transform(self, Z: np.ndarray) -> np.ndarray:
        return np.asarray(Z, dtype=np.float64) * self.std_ + self.mean_

    def to_dict(self) -> dict:
        return {k: getattr(self, k).tolist() for k in ("mean_", "std_", "discrete_", "constant_")}

    @classmethod
    def from_dict(cls, d: dict) -> Scaler:
        return cls(np.asarray(d["mean_"], float), np.asarray(d["std_"], float),
                   np.asarray(d["discrete_"], bool), np.asarray(d["constant_"], bool))
