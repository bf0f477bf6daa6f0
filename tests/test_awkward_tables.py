"""The default detector on tables that break naive scalers and trimming rules: it fits, scores finite, and still
ranks rows unlike its history above every training row.

Each case is a shape real event tables take: most rows copies of a few, constant columns, all-binary columns,
more columns than rows, a dozen rows. The default trims what its warm start finds isolated, standardises every
column and blends in an isolation forest; any of these can divide by a zero spread or leave nothing to learn from.
"""

import warnings

import numpy as np
import pytest

from offline_train.config import ModelConfig, OptimConfig
from offline_train.detector import KDSM


def duplicates(rng):
    base = rng.normal(size=(20, 6))
    return base[rng.integers(0, 20, 1000)], rng.normal(size=(10, 6)) * 0.5 + 5


def constant_columns(rng):
    X = np.c_[rng.normal(size=(300, 5)), np.zeros((300, 2)), np.full((300, 1), 7.0)]
    departed = X[:10].copy()
    departed[:, 5] = 3.0  # a column that never moved in the history moves
    return X, departed


def binary_columns(rng):
    X = (rng.random((1000, 60)) < np.linspace(0.05, 0.5, 60)).astype(float)
    return X, (rng.random((10, 60)) < 0.9).astype(float)


def more_columns_than_rows(rng):
    return rng.normal(size=(80, 200)), rng.normal(size=(10, 200)) * 3


def a_dozen_rows(rng):
    return rng.normal(size=(12, 3)), rng.normal(size=(3, 3)) + 8


@pytest.mark.parametrize("table", [duplicates, constant_columns, binary_columns, more_columns_than_rows, a_dozen_rows])
def test_the_default_fits_awkward_tables_and_ranks_departures_first(table):
    history, departures = table(np.random.default_rng(0))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no division by a zero spread, no overflow, anywhere
        det = KDSM(model=ModelConfig(width=64, depth=2), train=OptimConfig(steps=300, seed=0)).fit(history)
        seen, new = det.decision_function(history), det.decision_function(departures)
    assert np.isfinite(seen).all() and np.isfinite(new).all()
    assert new.min() > seen.max()
    assert 0.5 <= det.train_summary_.refine["keep"] <= 1.0  # the trimming never leaves out more than max_drop
