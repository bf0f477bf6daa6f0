"""Train/test splits of the ADBench protocol (DESIGN 4).

Two split modes:

* ``paper``: a dataset with fewer than 1000 rows is resampled with
  replacement to 1000 rows, one with more than 50,000 is subsampled to
  50,000 (stored order kept). Semi-supervised: train = the first half of the
  normal rows in (resampled) stored order, test = the other normals plus all
  anomalies. Unsupervised: train = a bootstrap sample of all rows, test = all
  rows, and the scaler is fitted on all rows. Resampling can put one row in
  both train and test.
* ``clean``: no resampling; a seeded random half of the normals trains
  (semi), or a seeded stratified half of all rows trains (unsup); the test
  set is the rest, so no row is in both. The scaler is fitted on train.

Indices always point into the original arrays.

>>> import numpy as np
>>> y = np.array([0] * 8 + [1] * 2)
>>> s = make_split(y, "semi", "clean", seed=0)
>>> len(s.train_idx), len(s.test_idx), int(s.y_test.sum())
(4, 6, 2)
>>> set(s.train_idx.tolist()) & set(s.test_idx.tolist())
set()
>>> p = make_split(y, "semi", "paper", seed=0)
>>> p.n_rows, int(p.y_test.sum()) == int((y[p.rows] == 1).sum())
(1000, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

Setting = Literal["semi", "unsup"]
SplitMode = Literal["paper", "clean"]

PAPER_MIN_ROWS = 1000
PAPER_MAX_ROWS = 50_000


class SplitError(ValueError):
    """A dataset that cannot be split under the protocol (e.g. too few normals)."""


@dataclass(frozen=True)
class Split:
    """Row indices into the original dataset for one (setting, split mode, seed)."""

    setting: str
    mode: str
    seed: int
    rows: np.ndarray  # the (resampled) dataset the split is drawn from
    train_idx: np.ndarray
    test_idx: np.ndarray
    y_test: np.ndarray
    scaler_idx: np.ndarray  # rows the scaler is fitted on

    @property
    def n_rows(self) -> int:
        return len(self.rows)


def paper_rows(n: int, rng: np.random.Generator) -> np.ndarray:
    """The paper's resampling rule: < 1000 rows -> 1000 drawn with replacement; > 50k -> 50k without."""
    if n < PAPER_MIN_ROWS:
        return rng.choice(n, PAPER_MIN_ROWS, replace=True)
    if n > PAPER_MAX_ROWS:
        return np.sort(rng.choice(n, PAPER_MAX_ROWS, replace=False))
    return np.arange(n)


def make_split(y: np.ndarray, setting: Setting, mode: SplitMode, seed: int) -> Split:
    """Split labels ``y`` (1 = anomaly) under ``setting`` and ``mode``; raises ``SplitError``."""
    y = np.asarray(y).astype(np.int64).ravel()
    if setting not in ("semi", "unsup") or mode not in ("paper", "clean"):
        raise ValueError(f"unknown setting/split {setting!r}/{mode!r}")
    rng = np.random.default_rng(seed)
    if mode == "paper":
        rows = paper_rows(len(y), rng)
        normals, anomalies = rows[y[rows] == 0], rows[y[rows] == 1]
        if setting == "semi":
            half = len(normals) // 2
            train, test = normals[:half], np.concatenate([normals[half:], anomalies])
        else:
            train, test = rng.choice(rows, len(rows), replace=True), rows
        scaler_idx = train if setting == "semi" else rows
    else:
        rows = np.arange(len(y))
        normals, anomalies = rng.permutation(np.flatnonzero(y == 0)), rng.permutation(np.flatnonzero(y == 1))
        hn = len(normals) // 2
        if setting == "semi":
            train, test = np.sort(normals[:hn]), np.concatenate([np.sort(normals[hn:]), np.sort(anomalies)])
        else:  # stratified halves: both sides keep the contamination rate
            ha = len(anomalies) // 2
            train = np.sort(np.concatenate([normals[:hn], anomalies[:ha]]))
            test = np.sort(np.concatenate([normals[hn:], anomalies[ha:]]))
        scaler_idx = train
    y_test = y[test]
    if (y[train] == 0).sum() < 2:
        raise SplitError(f"too few normal rows to train on ({int((y[train] == 0).sum())})")
    if y_test.sum() == 0 or (y_test == 0).sum() == 0:
        raise SplitError(f"test set needs both classes (anomalies={int(y_test.sum())}, normals={int((y_test == 0).sum())})")
    return Split(setting, mode, seed, rows, train, test, y_test, scaler_idx)
