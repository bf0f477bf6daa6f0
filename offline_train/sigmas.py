"""Per-feature noise scales from the shape of each marginal (DESIGN 3.2).

For each standardised column: trim ``trim`` of the values at each tail, build
a ``bins``-bin histogram over the trimmed range, rearrange the bins by count
(fullest at position 0, then +1, -1, +2, -2, ...), take the Pearson kurtosis
of the positions, and map it to a noise scale with the affine rule
``sigma = base * (1 + c * (kappa - 3))`` clipped to the configured range.

Everything is computed from counts, so statistics stream over record batches
in bounded memory, and each pass is a mergeable accumulator
(``offline_train.sigma_passes``) that an engine may run per partition on
many workers: pass 1 gives each standardised column's range and the row
count, pass 2 a fine histogram that locates the two cut ranks, pass 3 the
exact values at those ranks (from the few values near them), pass 4 the
coarse histogram of the kept values. The result equals sorting each column
and keeping ranks ``[cut, n - cut)``, ``cut = int(n * trim)``, as the
reference code does; ties at a cut are kept in part, not dropped together.

A column that is not constant but whose kept values are all equal (a spike
with rare departures, e.g. a count that is almost always 0) has no spread
to measure; it is the heaviest tail there is and gets ``DEGENERATE_KAPPA``,
so sigma is the clip's maximum. The reference code does the same (its
kurtosis is NaN there, mapped to 1000).

On the trim: the paper's algorithm has none; the reference code trims 2% per
tail, and that is our default. Trimming truncates the marginal, so a Gaussian
column gets the kurtosis of a normal truncated at its 2%/98% quantiles
(about 2.39, sigma about 0.40), not 3; with ``trim=0`` it gets about 3 and
sigma about ``base``. The ordering heavy-tailed > Gaussian > uniform holds
either way.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> X = np.column_stack([rng.normal(size=20000), rng.laplace(size=20000), rng.uniform(size=20000)])
>>> KurtosisSigmas(trim=0.0).fit(X).kappas_.round(1).tolist()
[3.0, 5.4, 1.9]
>>> s = KurtosisSigmas().fit(X).sigmas_
>>> bool(s[1] > s[0] > s[2]), round(float(s[0]), 2)
(True, 0.4)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .scaler import Scaler
from .sigma_passes import CutValuesPass, KeptHistogramPass, RangePass, Window

# Bump when a change to this rule alters the sigmas of the same data and config:
# benchmark rows (``kdsm bench adbench`` resumes from its CSV) are keyed by it.
# 2: rank trim and spike columns (was a value trim and kappa 1.8 for spikes).
# 3: exact column moments (offline_train.scaler): the scaler moves by an ulp on most data, and a value
#    tied on a histogram edge may change bins with it (sigmas moved on 4 of the 26 ADBench datasets).
RULE_REVISION = 3
# kappa of a non-constant column whose kept values are all equal (see fit_with).
DEGENERATE_KAPPA = 1000.0
# An accumulator of offline_train.sigma_passes (update(X), merge(other)).
Accumulator = Any


def rearranged_positions(counts: np.ndarray) -> np.ndarray:
    """Position of each bin after sorting by count, descending (ties: lower bin first).

    >>> rearranged_positions(np.array([1, 5, 3, 3])).tolist()
    [2, 0, 1, -1]
    """
    order = np.lexsort((np.arange(len(counts)), -np.asarray(counts)))
    ranks = np.arange(len(counts))
    # rank 0 -> 0, 1 -> +1, 2 -> -1, 3 -> +2, 4 -> -2, ...
    pos_by_rank = np.where(ranks % 2 == 1, (ranks + 1) // 2, -(ranks // 2))
    positions = np.empty(len(counts), dtype=np.int64)
    positions[order] = pos_by_rank
    return positions


def kurtosis_from_counts(counts: np.ndarray, positions: np.ndarray) -> float:
    """Pearson kurtosis (population moments, Gaussian = 3) of positions weighted by counts; NaN if degenerate."""
    w = np.asarray(counts, dtype=np.float64)
    n = w.sum()
    if n <= 0:
        return float("nan")
    p = positions.astype(np.float64)
    mu = (w * p).sum() / n
    var = (w * (p - mu) ** 2).sum() / n
    if var <= 0:
        return float("nan")
    return float((w * (p - mu) ** 4).sum() / n / var**2)


def sigma_from_kappa(kappa: np.ndarray, base: float, c: float, clip: tuple[float, float]) -> np.ndarray:
    """The affine rule ``base * (1 + c * (kappa - 3))`` clipped to ``clip``.

    >>> sigma_from_kappa(np.array([3.0, 1.8, 9.0, 30.0]), 0.5, 0.33, (0.1, 3.0)).round(3).tolist()
    [0.5, 0.302, 1.49, 3.0]
    """
    return np.clip(base * (1.0 + c * (np.asarray(kappa, float) - 3.0)), clip[0], clip[1])


@dataclass
class KurtosisSigmas:
    """Estimator of per-feature sigmas. ``fit`` returns self; results end in ``_``.

    mode="global" gives every feature ``base`` (plain DSM).
    """

    base: float = 0.5
    c: float = 0.33
    trim: float = 0.02
    bins: int = 200
    clip: tuple[float, float] = (0.1, 3.0)
    discrete_kappa: float = 1.8
    mode: str = "kurtosis"
    kappas_: np.ndarray = field(init=False, repr=False)
    sigmas_: np.ndarray = field(init=False, repr=False)

    @classmethod
    def from_config(cls, cfg) -> KurtosisSigmas:
        return cls(base=cfg.base, c=cfg.c, trim=cfg.trim, bins=cfg.bins, clip=cfg.clip_range,
                   discrete_kappa=cfg.discrete_kappa, mode=cfg.mode)

    def fit(self, X: np.ndarray, scaler: Scaler | None = None) -> KurtosisSigmas:
        """In-memory fit: the same passes as ``fit_batches`` over a single batch."""
        X = np.asarray(X, dtype=np.float64)
        scaler = scaler or Scaler.fit(X)
        return self.fit_batches(lambda: iter([X]), scaler)

    def fit_batches(self, batches: Callable[[], Iterable[np.ndarray]], scaler: Scaler) -> KurtosisSigmas:
        """Fit from a re-iterable source of raw feature batches (called once per pass)."""

        def fold(acc):
            for X in batches():
                acc.update(X)
            return acc

        return self.fit_with(fold, scaler)

    def fit_with(self, reduce: Callable[[Accumulator], Accumulator], scaler: Scaler) -> KurtosisSigmas:
        """Fit with an engine: ``reduce(acc)`` feeds every raw training row to the empty accumulator ``acc``
        (``offline_train.sigma_passes``; in one piece, or one per partition, merged) and returns it."""
        d = len(scaler.mean_)
        if self.mode == "global":
            self.kappas_ = np.full(d, 3.0)
            self.sigmas_ = np.full(d, float(self.base))
            return self
        if self.mode != "kurtosis":
            raise ValueError(f"unknown sigma mode {self.mode!r}")
        span = reduce(RangePass(scaler))
        n = span.n
        if n == 0:
            raise ValueError("no rows to compute sigmas from")
        # The kept values are the sorted column's ranks [cut, n - cut), as in the reference code.
        # Ties at a cut stay in part: trimming by value would drop a whole tied mass.
        cut = int(n * self.trim)
        lo, hi, below_hi, at_most_lo = _cut_values(reduce, scaler, span, (cut, n - cut - 1))
        # Copies of each cut value that are kept (all kept rows when lo == hi).
        keep_lo = np.minimum(at_most_lo, n - cut) - cut
        keep_hi = (n - cut) - below_hi
        coarse = reduce(KeptHistogramPass(scaler, lo, hi, self.bins)).counts.astype(np.float64)
        coarse[:, 0] += keep_lo
        coarse[:, -1] += np.where(hi > lo, keep_hi, 0.0)  # lo == hi: one value, counted once
        kappas = np.empty(d)
        for j in range(d):
            if scaler.discrete_[j] or scaler.constant_[j]:
                kappas[j] = self.discrete_kappa
                continue
            k = kurtosis_from_counts(coarse[j], rearranged_positions(coarse[j]))
            # All kept values equal although the column is not constant: a spike with rare
            # departures, the heaviest tail there is (the reference code maps this NaN to 1000).
            kappas[j] = DEGENERATE_KAPPA if np.isnan(k) else k
        self.kappas_ = kappas
        self.sigmas_ = sigma_from_kappa(kappas, self.base, self.c, self.clip)
        return self


# Narrowing rounds of the cut-value search before giving up (each divides a window by ~2700).
MAX_CUT_ROUNDS = 40


def _cut_values(reduce, scaler: Scaler, span: RangePass, ranks: tuple[int, int]):
    """Each column's values at the two cut ranks, how many values lie below the high one and at or
    below the low one: ``CutValuesPass`` rounds, narrowing the windows that held too many values."""
    d = len(span.lo)
    found: dict[tuple[int, int], tuple[float, int, int]] = {}
    # Per column: the windows still to count, each with the ranks it must settle (one window for both at first).
    pending = {j: [(Window(span.lo[j], span.hi[j]), ranks)] for j in range(d)}
    for _ in range(MAX_CUT_ROUNDS):
        if not pending:
            break
        counted = reduce(CutValuesPass(scaler, [[w for w, _ in pending[j]] if j in pending else None
                                                for j in range(d)]))
        narrower: dict[int, list] = {}
        for j, items in pending.items():
            for (_, settles), w in zip(items, counted.windows[j], strict=True):
                for r in settles:
                    if w.overflowed:
                        narrower.setdefault(j, []).append((w.narrowed(r), (r,)))
                    else:
                        found[j, r] = w.cut(r)
        pending = narrower
    if pending:
        raise RuntimeError("cut values not settled; the data changed between passes")
    lo = np.array([found[j, ranks[0]][0] for j in range(d)])
    hi = np.array([found[j, ranks[1]][0] for j in range(d)])
    below_hi = np.array([found[j, ranks[1]][1] for j in range(d)])
    at_most_lo = np.array([found[j, ranks[0]][2] for j in range(d)])
    return lo, hi, below_hi, at_most_lo
