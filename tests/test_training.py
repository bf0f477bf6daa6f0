"""Training, EMA filtering, scoring and explanation on synthetic data with planted outliers."""

import numpy as np
import pytest
import torch
from conftest import make_blobs
from sklearn.metrics import roc_auc_score

from offline_train.config import CalibrationConfig, EMAConfig, ModelConfig, OptimConfig
from offline_train.detector import KDSM
from offline_train.model import ScoreNet
from offline_train.scaler import Scaler
from offline_train.sigmas import KurtosisSigmas
from offline_train.train import train_score_net

SMALL = ModelConfig(width=64, depth=2)


@pytest.fixture(scope="module")
def fitted():
    X, out = make_blobs(n=1500, n_out=40)
    det = KDSM(model=SMALL, train=OptimConfig(steps=500, seed=1)).fit(X)
    return det, X, out


def test_loss_falls(fitted):
    det, _, _ = fitted
    curve = [loss for _, loss in det.train_summary_.loss_curve]
    # DSM loss has an irreducible floor (the noise is not fully predictable), so expect a clear drop, not zero.
    assert np.mean(curve[-3:]) < 0.9 * curve[0]
    assert np.polyfit(np.arange(len(curve)), curve, 1)[0] < 0


def test_ranks_planted_outliers_above_inliers(fitted):
    det, X, out = fitted
    fresh, _ = make_blobs(n=600, n_out=1, seed=3)  # same distribution, unseen rows
    scores = det.decision_function(np.vstack([fresh, out]))
    y = np.r_[np.zeros(len(fresh)), np.ones(len(out))]
    assert roc_auc_score(y, scores) > 0.9


def test_scores_do_not_depend_on_batch_composition(fitted):
    det, X, out = fitted
    both = np.vstack([X[:50], out[:5]])
    alone = np.array([det.decision_function(row[None, :])[0] for row in both[:10]])
    together = det.decision_function(both)[:10]
    shuffled = det.decision_function(both[::-1])[::-1][:10]
    np.testing.assert_allclose(alone, together, rtol=1e-5)
    np.testing.assert_allclose(shuffled, together, rtol=1e-5)


def test_thresholds_and_pvalues_from_holdout(fitted):
    det, X, _ = fitted
    assert det.calibration_source_ == "holdout"
    assert 0.1 * len(X) < len(det.calibration_.scores) < 0.3 * len(X)
    assert det.thresholds_["critical"] >= det.thresholds_["warning"]
    p = det.p_values(np.array([det.thresholds_["warning"], 1e9]))
    assert p[0] == pytest.approx(0.01, abs=0.01)
    assert p[1] == pytest.approx(1 / (len(det.calibration_.scores) + 1))


def test_predict_uses_calibrated_threshold(fitted):
    det, X, out = fitted
    assert det.predict(out).mean() > 0.9
    assert det.predict(X).mean() < 0.05


def test_explanation_points_at_the_shifted_feature(fitted):
    det, X, _ = fitted
    row = X[:1].copy()
    row[0, 2] += 12.0 * det.scaler_.std_[2]
    exp = det.explain(row, top_k=3)
    assert exp.features[0, 0] == 2
    assert exp.contribution[0].sum() <= 1.0 + 1e-9
    assert exp.value[0, 0] == pytest.approx(row[0, 2])
    # Tweedie's expected value moves the feature back toward the data.
    assert abs(exp.expected[0, 0] - X[:, 2].mean()) < abs(row[0, 2] - X[:, 2].mean())
    assert exp.direction[0, 0] == -1.0


def test_ema_filter_drops_contaminants_more_than_clean_rows():
    X, out = make_blobs(n=900, n_out=100, seed=5)
    data = np.vstack([X, out])
    is_out = np.r_[np.zeros(len(X), bool), np.ones(len(out), bool)]
    scaler = Scaler.fit(data)
    Z = scaler.transform(data)
    sig = KurtosisSigmas().fit(data, scaler).sigmas_
    seen, dropped = np.zeros(len(data)), np.zeros(len(data))

    def record(idx, keep):
        np.add.at(seen, idx.numpy(), 1)
        np.add.at(dropped, idx.numpy()[~keep.numpy()], 1)

    torch.manual_seed(0)
    net = ScoreNet(Z.shape[1], 64, 2)
    summary = train_score_net(Z, sig, net, steps=600, ema=True, ema_decay=0.99, seed=0, on_filter=record)
    late = seen > 0
    rate_out = dropped[is_out & late].sum() / seen[is_out & late].sum()
    rate_in = dropped[~is_out & late].sum() / seen[~is_out & late].sum()
    assert rate_out > 2 * rate_in
    assert summary.filtered_fraction == pytest.approx(0.2, abs=0.03)


def test_training_is_reproducible_with_a_seed():
    X, _ = make_blobs(n=400)
    cfg = OptimConfig(steps=60, seed=3)
    a = KDSM(model=SMALL, train=cfg).fit(X).decision_function(X[:20])
    b = KDSM(model=SMALL, train=cfg).fit(X).decision_function(X[:20])
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("ema", [False, True])
def test_one_noise_copy_never_trains_on_a_one_row_batch(ema):
    """129 rows in batches of 32 leave 1 row at each epoch's end: BatchNorm cannot train on it, so the batch before
    takes it (train.noise_copies 1; more copies repeat every row, and their batches are as before)."""
    X = np.random.default_rng(0).normal(size=(129, 4))
    sizes = []
    net = ScoreNet(4, width=16, depth=1)
    net.register_forward_pre_hook(lambda _, args: sizes.append(len(args[0])) if net.training else None)
    train_score_net(X, np.ones(4), net, steps=10, batch_size=32, copies=1, ema=ema, seed=0)
    assert min(sizes) >= 2 and 33 in sizes


def test_ema_variant_and_global_sigma_variant_train():
    X, _ = make_blobs(n=400)
    det = KDSM(model=SMALL, ema=EMAConfig(enabled=True), train=OptimConfig(steps=40),
               calibration=CalibrationConfig(holdout=0.25)).fit(X)
    assert det.train_summary_.ema and det.train_summary_.filtered_fraction > 0
    from offline_train.config import SigmaConfig
    dsm = KDSM(model=SMALL, sigma=SigmaConfig(mode="global"), train=OptimConfig(steps=20)).fit(X)
    assert np.all(dsm.sigmas_ == 0.5)


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="NaN"):
        KDSM(model=SMALL).fit(np.array([[1.0, np.nan], [2.0, 3.0], [1.0, 1.0]]))
    with pytest.raises(ValueError, match="2-D"):
        KDSM(model=SMALL).fit(np.zeros(5))
