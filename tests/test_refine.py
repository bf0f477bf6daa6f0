"""The default's defence against contaminated history (``offline_train.refine``), on constructed data."""

import numpy as np
import pytest
import torch

from offline_train.config import EMAConfig, ModelConfig, OptimConfig, RefineConfig, ScoreConfig
from offline_train.detector import KDSM
from offline_train.refine import Refinement, WarmStart

SMALL = ModelConfig(width=64, depth=2)


def contaminated(share: float, n: int = 2000, d: int = 6, seed: int = 0):
    """Gaussian inliers; ``share`` of the rows replaced by scattered far points (the planted anomalies)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    k = int(share * n)
    X[:k] = rng.normal(size=(k, d)) * 0.5 + rng.choice([-6.0, 6.0], size=(k, d))
    return X, np.r_[np.ones(k, bool), np.zeros(n - k, bool)]


def fit(X, **refine):
    return KDSM(model=SMALL, train=OptimConfig(steps=400, seed=0), refine=RefineConfig(**refine)).fit(X)


def test_warm_start_core_holds_no_planted_row():
    X, planted = contaminated(0.10)
    core = WarmStart(X, seed=0).core(0.5)
    assert len(core) == len(X) // 2 and not planted[core].any()


@pytest.mark.parametrize("share", [0.05, 0.10, 0.20])
def test_left_out_share_tracks_the_planted_share(share):
    X, planted = contaminated(share)
    det = fit(X)
    left_out = 1 - det.train_summary_.refine["keep"]
    assert share - 0.02 <= left_out <= share + 0.03  # not a fixed 20%
    assert det.train_summary_.refine["rounds"] == 3


def test_clean_high_dimensional_data_is_barely_filtered():
    X = np.random.default_rng(1).normal(size=(2000, 20))
    assert 1 - fit(X).train_summary_.refine["keep"] < 0.03


def test_planted_rows_score_above_inliers_after_refinement():
    X, planted = contaminated(0.15)
    s = fit(X).decision_function(X)
    assert np.quantile(s[planted], 0.05) > np.quantile(s[~planted], 0.95)


def test_rounds_train_on_the_rows_the_network_finds_normal():
    X, planted = contaminated(0.10)
    det = KDSM(model=SMALL, train=OptimConfig(steps=400, seed=0), refine=RefineConfig(enabled=False)).fit(X[~planted])
    r = Refinement(RefineConfig(), X, steps=400, seed=0, device=det.device_)  # as training does: CUDA where present
    rows = r(det.net_)
    assert len(rows) == pytest.approx(r.keep_ * len(X), abs=1) and planted[rows].mean() < 0.01


def test_a_fixed_share_and_the_off_switch():
    X, _ = contaminated(0.10)
    assert fit(X, keep=0.7).train_summary_.refine["keep"] == 0.7
    off = KDSM(model=SMALL, train=OptimConfig(steps=50), refine=RefineConfig(enabled=False)).fit(X)
    assert off.train_summary_.refine is None and off.train_summary_.steps == 50


def test_rounds_split_the_budget_evenly():
    r = Refinement(RefineConfig(rounds=3), np.random.default_rng(0).normal(size=(50, 2)), steps=4000, seed=0)
    assert r.at == (1000, 2000, 3000)


def test_keep_must_be_a_share_or_auto():
    with pytest.raises(ValueError):
        RefineConfig(keep=1.5)
    assert RefineConfig(keep="auto").keep == "auto"


def test_a_higher_isolation_cut_estimates_less_contamination():
    X, _ = contaminated(0.10, d=3)
    estimates = [WarmStart(X, seed=0, threshold=t).contamination_ for t in (0.45, 0.5, 0.55, 0.6)]
    assert estimates == sorted(estimates, reverse=True) and estimates[0] > estimates[-1]
    r = Refinement(RefineConfig(threshold=0.6), X, steps=400, seed=0)
    assert r.keep_ == pytest.approx(1 - r.warm_.contamination_) and r.warm_.contamination_ == estimates[-1]


def test_rounds_ranked_by_the_blend_let_the_forest_overrule_a_poor_network():
    """``rank: blend``: a round ranks rows by the blend of the network's score and the warm start's forest."""
    from offline_train.blend import Blend
    from offline_train.refine import lowest, row_scores

    class Inverted(torch.nn.Module):
        """A network that is wrong on purpose: its score falls as a row moves away, so far rows look most normal."""

        def forward(self, z):
            return torch.exp(-z.abs())

    X, planted = contaminated(0.10)
    net = Inverted()
    by_network = Refinement(RefineConfig(rank="network"), X, steps=400, seed=0)
    by_blend = Refinement(RefineConfig(rank="blend"), X, steps=400, seed=0)
    kept_network, kept_blend = by_network(net), by_blend(net)
    assert planted[kept_blend].mean() < 0.5 * planted[kept_network].mean()
    s = row_scores(net, by_blend._Zt)
    expected = lowest(Blend.fit(s, by_blend.warm_.scores_)(s, by_blend.warm_.scores_), by_blend.keep_)
    np.testing.assert_array_equal(kept_blend, expected)


def test_without_rounds_the_network_learns_the_core_only():
    """``rounds: 0`` (configs/contaminated-core.yaml): the planted rows stay out of what the network learns."""
    X, planted = contaminated(0.20)
    net_only = ScoreConfig(isolation_forest=False)
    core = KDSM(model=SMALL, train=OptimConfig(steps=400, seed=0), refine=RefineConfig(rounds=0), score=net_only).fit(X)
    every = KDSM(model=SMALL, train=OptimConfig(steps=400, seed=0), refine=RefineConfig(enabled=False),
                 ema=EMAConfig(enabled=False), score=net_only).fit(X)
    assert core.train_summary_.refine["rounds"] == 0 and core.train_summary_.steps == 400
    s_core, s_every = core.decision_function(X), every.decision_function(X)
    assert np.quantile(s_core[planted], 0.05) > np.quantile(s_core[~planted], 0.95)
    # Learnt from every row, the planted rows are part of the density: they score far lower against the inliers.
    assert np.median(s_core[planted]) / np.median(s_core[~planted]) > 2 * np.median(s_every[planted]) / np.median(s_every[~planted])


def two_modes(n: int = 2000, d: int = 4, share: float = 0.12, seed: int = 0):
    """Clean history with two modes: a main Gaussian and a smaller one far from it (a second class of normal rows)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    m = int(share * n)
    X[:m] = rng.normal(size=(m, d)) * 0.6 + 5.0
    return X, np.r_[np.ones(m, bool), np.zeros(n - m, bool)]


def test_strata_keep_a_share_of_every_mode_in_the_core():
    X, mode = two_modes()
    warm = WarmStart(X, seed=0)
    assert mode[warm.core(0.5)].sum() < 0.05 * mode.sum()  # over all rows the forest's core leaves the mode out whole
    r = Refinement(RefineConfig(strata=4), X, steps=400, seed=0)
    core = r.start_rows()
    assert r.strata_ is not None and r.summary()["strata"] == 4
    assert 0.4 <= mode[core].sum() / mode.sum() <= 0.6  # half of each stratum, so about half of the mode


def test_strata_let_the_network_learn_a_mode_the_forest_isolates():
    X, _ = two_modes()
    fresh = np.random.default_rng(1).normal(size=(500, 4)) * 0.6 + 5.0  # new normal rows of the smaller mode
    flagged = {s: fit(X, strata=s).predict(fresh).mean() for s in (0, 4)}
    assert flagged[4] < 0.5 * flagged[0]


def test_strata_off_and_too_few_rows_keep_one_share_over_all_rows():
    Z = np.random.default_rng(0).normal(size=(30, 2))
    assert Refinement(RefineConfig(), Z, steps=100, seed=0).strata_ is None
    assert Refinement(RefineConfig(strata=20), Z, steps=100, seed=0).strata_ is None  # fewer than 2 rows a stratum
    with pytest.raises(ValueError, match="at least 2 clusters"):
        RefineConfig(strata=1)
