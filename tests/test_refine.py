"""The default's defence against contaminated history (``offline_train.refine``), on constructed data."""

import numpy as np
import pytest

from offline_train.config import ModelConfig, OptimConfig, RefineConfig
from offline_train.detector import KDSM
from offline_train.refine import Refinement, fence_share, warm_start_rows

SMALL = ModelConfig(width=64, depth=2)


def contaminated(share: float, n: int = 1500, d: int = 5, seed: int = 0):
    """Correlated Gaussian inliers; ``share`` of the rows replaced by a far cluster (the planted anomalies)."""
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(d, d)) / np.sqrt(d)
    X = rng.normal(size=(n, d)) @ A + 0.3 * rng.normal(size=(n, d))
    k = int(share * n)
    X[:k] = rng.normal(size=(k, d)) * 0.3 + 4.0
    return X, np.r_[np.ones(k, bool), np.zeros(n - k, bool)]


def fit(X, **refine):
    return KDSM(model=SMALL, train=OptimConfig(steps=600, seed=0), refine=RefineConfig(**refine)).fit(X)


def test_warm_start_core_holds_no_planted_row():
    X, planted = contaminated(0.10)
    core = warm_start_rows(X, keep=0.5, seed=0)
    assert len(core) == len(X) // 2 and not planted[core].any()


@pytest.mark.parametrize("share", [0.10, 0.20])
def test_left_out_share_tracks_the_planted_share(share):
    det = fit(contaminated(share)[0])
    rounds = det.train_summary_.refine["rounds"]
    assert len(rounds) == 3
    left_out = 1 - rounds[-1]["kept"]
    assert share - 0.03 <= left_out <= share + 0.05, rounds  # not a fixed 20%, not nothing


def test_clean_data_is_barely_filtered():
    det = fit(contaminated(0.0)[0])
    assert det.train_summary_.refine["rounds"][-1]["kept"] >= 0.95


def test_planted_rows_score_above_inliers_after_refinement():
    X, planted = contaminated(0.15)
    s = fit(X).decision_function(X)
    assert s[planted].min() > np.quantile(s[~planted], 0.95)


def test_a_fixed_share_and_off_switch():
    X, _ = contaminated(0.10)
    assert fit(X, keep=0.7).train_summary_.refine["rounds"][-1]["kept"] == 0.7
    off = KDSM(model=SMALL, train=OptimConfig(steps=50), refine=RefineConfig(enabled=False)).fit(X)
    assert off.train_summary_.refine is None and off.train_summary_.steps == 50


def test_rounds_split_the_budget_evenly():
    r = Refinement(RefineConfig(rounds=3), np.zeros((10, 2)), steps=4000, seed=0)
    assert r.at == (1000, 2000, 3000)


def test_fence_share_on_a_two_level_sample():
    s = np.r_[np.ones(95), np.full(5, 50.0)] * np.random.default_rng(0).uniform(0.9, 1.1, 100)
    assert fence_share(s) == pytest.approx(0.05)
