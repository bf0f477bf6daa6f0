"""The ADBench protocol itself: splits, resampling rule, metrics (DESIGN 4)."""

from __future__ import annotations

import numpy as np
import pytest

from offline_train.evaluation.metrics import detection_metrics, f1_at_k
from offline_train.evaluation.protocol import SplitError, make_split


def labels(n_normal: int, n_anom: int, seed: int = 0) -> np.ndarray:
    y = np.array([0] * n_normal + [1] * n_anom)
    return np.random.default_rng(seed).permutation(y)


@pytest.mark.parametrize("seed", [0, 1])
def test_clean_semi_sizes_and_disjoint(seed):
    y = labels(301, 40)
    s = make_split(y, "semi", "clean", seed)
    train, test = set(s.train_idx.tolist()), set(s.test_idx.tolist())
    assert len(s.train_idx) == 150 and len(train) == 150  # half the normals, no repeats
    assert len(s.test_idx) == 151 + 40 and len(test) == 191
    assert not train & test
    assert train | test == set(range(len(y)))
    assert (y[s.train_idx] == 0).all()
    assert s.y_test.sum() == 40 and (s.y_test == y[s.test_idx]).all()
    assert s.n_rows == len(y)  # clean mode never resamples
    assert np.array_equal(s.scaler_idx, s.train_idx)


def test_clean_split_is_seeded():
    y = labels(200, 20)
    a, b, c = (make_split(y, "semi", "clean", s) for s in (3, 3, 4))
    assert np.array_equal(a.train_idx, b.train_idx)
    assert not np.array_equal(a.train_idx, c.train_idx)


def test_clean_unsup_stratified_disjoint():
    y = labels(300, 60)
    s = make_split(y, "unsup", "clean", 0)
    train, test = set(s.train_idx.tolist()), set(s.test_idx.tolist())
    assert not train & test and train | test == set(range(len(y)))
    assert y[s.train_idx].sum() == 30 and s.y_test.sum() == 30  # contamination kept on both sides


def test_paper_resamples_small_data_with_replacement():
    y = labels(180, 20)
    s = make_split(y, "semi", "paper", seed=0)
    assert s.n_rows == 1000
    assert len(np.unique(s.rows)) < 1000  # drawn with replacement from 200 rows
    assert s.rows.min() >= 0 and s.rows.max() < len(y)
    normals = s.rows[y[s.rows] == 0]
    # Train = first half of the normals in (resampled) stored order; test = the rest + every anomaly.
    assert np.array_equal(s.train_idx, normals[: len(normals) // 2])
    assert len(s.train_idx) + len(s.test_idx) == 1000
    assert s.y_test.sum() == (y[s.rows] == 1).sum()
    # Resampling is why the paper split can put one row on both sides.
    assert set(s.train_idx.tolist()) & set(s.test_idx.tolist())
    assert np.array_equal(s.rows, make_split(y, "semi", "paper", seed=0).rows)
    assert not np.array_equal(s.rows, make_split(y, "semi", "paper", seed=1).rows)


def test_paper_keeps_mid_sized_data_in_stored_order():
    y = labels(1500, 100)
    s = make_split(y, "semi", "paper", seed=5)
    assert np.array_equal(s.rows, np.arange(1600))
    normals = np.flatnonzero(y == 0)
    assert np.array_equal(s.train_idx, normals[:750])
    assert np.array_equal(np.sort(s.test_idx), np.sort(np.concatenate([normals[750:], np.flatnonzero(y == 1)])))
    # Deterministic whatever the seed: the published split has no randomness at this size.
    assert np.array_equal(s.train_idx, make_split(y, "semi", "paper", seed=9).train_idx)


def test_paper_subsamples_large_data():
    y = labels(50_500, 600)
    s = make_split(y, "semi", "paper", seed=0)
    assert s.n_rows == 50_000 and len(np.unique(s.rows)) == 50_000
    assert (np.diff(s.rows) > 0).all()  # stored order kept


def test_paper_unsup_bootstrap_and_scaler_on_all_rows():
    y = labels(1800, 200)
    s = make_split(y, "unsup", "paper", seed=0)
    assert len(s.train_idx) == 2000 and len(np.unique(s.train_idx)) < 2000  # bootstrap
    assert np.array_equal(s.test_idx, s.rows) and np.array_equal(s.scaler_idx, s.rows)


def test_split_errors():
    with pytest.raises(SplitError):
        make_split(np.array([0, 1, 1, 1]), "semi", "clean", 0)  # one normal: nothing to train on
    with pytest.raises(SplitError):
        make_split(np.zeros(50, int), "semi", "clean", 0)  # no anomaly to detect


def test_f1_at_k_hand_made():
    y = np.array([1, 0, 1, 0, 0, 1, 0, 0])
    s = np.array([0.9, 0.95, 0.2, 0.1, 0.3, 0.8, 0.05, 0.0])
    # k = 3 anomalies; the top 3 scores are rows 1 (normal), 0 (anomaly), 5 (anomaly) -> 2/3.
    assert f1_at_k(y, s) == pytest.approx(2 / 3)
    assert f1_at_k(y, y.astype(float)) == 1.0
    assert f1_at_k(y, -y.astype(float)) == 0.0
    # Ties are broken by row order: with all-equal scores the first k rows are taken (rows 0,1,2 -> 2/3).
    assert f1_at_k(y, np.zeros(8)) == pytest.approx(2 / 3)


def test_auc_pr_is_step_wise_average_precision():
    y = np.array([1, 0, 1, 0])
    m = detection_metrics(y, np.array([0.9, 0.8, 0.7, 0.1]))
    assert m["aucpr"] == pytest.approx((1 / 1 + 2 / 3) / 2)  # precision at each recall step
    assert m["aucroc"] == pytest.approx(0.75)
    with pytest.raises(ValueError):
        detection_metrics(y, np.array([0.1, np.nan, 0.2, 0.3]))
