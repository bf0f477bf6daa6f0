"""The default score: the network's blended with an isolation forest's (offline_train.blend, offline_train.isolation)."""

import json

import numpy as np
import pytest
import torch
from conftest import make_blobs
from sklearn.ensemble import IsolationForest

from offline_train.artifact import METADATA, read_artifact, write_artifact
from offline_train.blend import Blend
from offline_train.config import ModelConfig, OptimConfig, RefineConfig, ScoreConfig
from offline_train.detector import KDSM
from offline_train.isolation import IsolationScorer, fit_forest
from offline_train.model import resolve_device


def test_exported_forest_scores_exactly_like_scikit_learn():
    """Heavy tails, rounded columns (ties at the split values) and many features: the same scores to rounding."""
    rng = np.random.default_rng(3)
    Z = rng.standard_t(3, size=(3000, 21))
    Z[:, :5] = np.round(Z[:, :5])
    forest = fit_forest(Z, seed=7)
    rows = np.vstack([Z, rng.normal(size=(500, 21)) * 5])  # rows the forest never saw, far ones included
    ours = IsolationScorer.from_forest(forest)(torch.as_tensor(rows, dtype=torch.float32)).numpy()
    np.testing.assert_allclose(ours, -forest.score_samples(rows), rtol=0, atol=1e-12)


def test_exported_forest_round_trips_through_its_tensors():
    Z = np.random.default_rng(0).normal(size=(400, 5))
    a = IsolationScorer.from_forest(fit_forest(Z, seed=0))
    b = IsolationScorer.from_state(a.state_dict(), a.shape)
    t = torch.as_tensor(Z, dtype=torch.float32)
    assert torch.equal(a(t), b(t))
    with pytest.raises(RuntimeError):  # a tensor of the wrong size is refused, not silently used
        IsolationScorer.from_state({**a.state_dict(), "leaf_value": torch.zeros(3, dtype=torch.float64)}, a.shape)


def test_parts_score_alike_on_the_scoring_device(tiny_model_dir):
    """``auto`` is CUDA where present: on a GPU machine (``FULL=1 bash deploy/gpu/check.sh``) the forest walked on the
    GPU gives the CPU's scores to rounding, the network's and the k-NN part agree to float tolerance, and the blend is formed
    from them the same way; on a CPU machine both sides run on the CPU."""
    dev = resolve_device("auto")
    cpu, here = KDSM.load(tiny_model_dir, device="cpu"), KDSM.load(tiny_model_dir, device=str(dev))
    assert here.device_.type == dev.type and here.forest_.threshold.device.type == dev.type
    X, out = make_blobs(n=300, n_out=20, seed=5)
    rows = np.vstack([X, out * 50])  # far rows too: isolated within a few splits, beyond every threshold
    a, b = cpu.score_parts(rows), here.score_parts(rows)
    np.testing.assert_allclose(b.forest, a.forest, rtol=0, atol=1e-12)
    np.testing.assert_allclose(b.network, a.network, rtol=1e-4)
    np.testing.assert_allclose(b.knn, a.knn, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(b.scores, here.blend_(b.network, b.forest, b.knn))
    assert b.scores[300:].min() > np.quantile(b.scores[:300], 0.9)


def test_bootstrapped_or_feature_sampled_forests_are_refused():
    Z = np.random.default_rng(0).normal(size=(100, 3))
    with pytest.raises(ValueError, match="every feature"):
        IsolationScorer.from_forest(IsolationForest(max_features=0.5, random_state=0).fit(Z))


def test_default_score_is_the_blend_of_its_parts(tiny_model_dir):
    det = KDSM.load(tiny_model_dir, device="cpu")
    X, out = make_blobs(n=300, n_out=20, seed=5)
    rows = np.vstack([X, out])
    p = det.score_parts(rows)
    np.testing.assert_allclose(p.network, np.linalg.norm(p.outputs.astype(np.float64), axis=1))
    assert p.forest is not None and det.forest_.metric == "density"  # the forest read by density by default
    assert p.knn is not None and (p.knn >= 0).all()
    np.testing.assert_allclose(p.scores, det.blend_(p.network, p.forest, p.knn))
    # Every part, and so the blend, ranks the planted far rows above the inliers.
    for s in (p.network, p.forest, p.knn, p.scores):
        assert s[300:].min() > np.quantile(s[:300], 0.9)
    meta = json.loads((tiny_model_dir / METADATA).read_text())
    assert meta["score_config"] == ScoreConfig().model_dump() and meta["score_config"]["knn"]  # three parts by default
    assert set(meta["blend"]) == {"network_mean", "network_std", "forest_mean", "forest_std", "knn_mean", "knn_std"}
    assert meta["knn"] == {"rows": 512, "d": 6, "k": 10}  # knn_rows standardised training rows ride along
    tensors, _ = read_artifact(tiny_model_dir)
    assert {k for k in tensors if k.startswith("forest.")} == {f"forest.{k}" for k in det.forest_.state_dict()}
    assert {k for k in tensors if k.startswith("knn.")} == {f"knn.{k}" for k in det.neighbours_.state_dict()}


def test_blend_follows_each_part_and_stays_positive_and_finite():
    b = Blend(network_mean=1.0, network_std=0.5, forest_mean=0.45, forest_std=0.05)
    net = np.array([1.0, 1.0, 5.0, 1e6, 0.0])
    forest = np.array([0.45, 0.60, 0.45, 1.0, 0.3])
    s = b(net, forest)
    assert s[1] > s[0] and s[2] > s[0] and s[3] > s[2]
    assert np.isfinite(s).all() and (s > 0).all()
    # Where the network's part is the larger, the blend is the network's score itself.
    assert s[2] == pytest.approx(5.0)
    # The larger part decides: a row only the network finds far out is not pulled down by the forest.
    only_network = b(np.array([np.exp(1.0 + 0.5 * 4)]), np.array([0.40]))  # z_network 4, z_forest -1
    assert only_network[0] == pytest.approx(np.exp(1.0 + 0.5 * 4))


def test_published_method_scores_with_the_network_alone(tmp_path):
    X, _ = make_blobs(n=400, seed=2)
    det = KDSM(model=ModelConfig(width=16, depth=1), train=OptimConfig(steps=30, precision="fp32"),
               refine=RefineConfig(enabled=False), score=ScoreConfig(isolation_forest=False)).fit(X)
    p = det.score_parts(X[:50])
    assert p.forest is None and det.forest_ is None
    np.testing.assert_array_equal(p.scores, p.network)
    tensors, meta = read_artifact(det.save(tmp_path / "m"))
    assert "blend" not in meta and not any(k.startswith("forest.") for k in tensors)


@pytest.mark.parametrize("metric", ["density", "depth"])
def test_blend_without_refinement_fits_its_own_forest(metric):
    """The forest part is the forest fitted on the training rows, read by ``score.forest_metric``: by depth exactly
    scikit-learn's score; by density the same trees' density reading."""
    X, out = make_blobs(n=400, seed=4)
    det = KDSM(model=ModelConfig(width=16, depth=1), train=OptimConfig(steps=30, precision="fp32"),
               refine=RefineConfig(enabled=False), score=ScoreConfig(forest_metric=metric)).fit(X)
    p = det.score_parts(out)
    Z = det.scaler_.transform(det._holdout_split(X)[0])  # the calibration holdout shapes neither part
    forest = fit_forest(Z, seed=0)
    expected = (-forest.score_samples(det.scaler_.transform(out)) if metric == "depth" else
                IsolationScorer.from_forest(forest, Z, "density")(torch.as_tensor(det.scaler_.transform(out),
                                                                               dtype=torch.float32)).numpy())
    np.testing.assert_allclose(p.forest, expected, atol=1e-12)
    assert det.forest_.metric == metric == det.score_config.forest_metric


def _density_by_hand(forest, Z, rows):
    """The density reading computed apart from the tensors: for every tree, each row's leaf share of the tree's
    sample and the volume the splits on its path leave, each split measured on the rows of the sample reaching it."""
    total = np.zeros(len(rows))
    for tree, sample in zip(forest.estimators_, forest.estimators_samples_, strict=True):
        S, t = Z[sample].astype(np.float32), tree.tree_
        for i, x in enumerate(rows.astype(np.float32)):
            node, log_volume, here = 0, 0.0, S
            while t.children_left[node] >= 0:
                f, cut = t.feature[node], t.threshold[node]
                lo, hi = float(here[:, f].min()), float(here[:, f].max())
                left = x[f] <= cut
                share = (cut - lo) / (hi - lo) if left else (hi - cut) / (hi - lo)
                log_volume += np.log(max(share, 1e-9))
                here = here[(here[:, f] <= cut) == left]
                node = t.children_left[node] if left else t.children_right[node]
            total[i] += log_volume - np.log(len(here) / len(S))
    return total / len(forest.estimators_)


def test_density_reading_equals_a_computation_by_hand():
    """Heavy tails and rounded columns (ties at the split values): the tensors' density reading equals a walk that
    recomputes every leaf's sample share and volume from the tree's own sample."""
    rng = np.random.default_rng(11)
    Z = rng.standard_t(3, size=(600, 4))
    Z[:, :2] = np.round(Z[:, :2])
    forest = IsolationForest(n_estimators=8, random_state=2).fit(Z)
    rows = np.vstack([Z[:40], rng.normal(size=(10, 4)) * 6])
    ours = IsolationScorer.from_forest(forest, Z, "density")(torch.as_tensor(rows, dtype=torch.float32)).numpy()
    np.testing.assert_allclose(ours, _density_by_hand(forest, Z, rows), rtol=0, atol=1e-9)


def test_density_ranks_a_sparse_tail_above_a_dense_core_and_round_trips():
    rng = np.random.default_rng(5)
    Z = np.vstack([rng.normal(size=(950, 3)) * 0.3, rng.normal(size=(50, 3)) * 3])  # dense core, sparse halo
    forest = fit_forest(Z, seed=0)
    dense = IsolationScorer.from_forest(forest, Z, "density")
    t = torch.as_tensor(Z, dtype=torch.float32)
    s = dense(t).numpy()
    assert np.median(s[950:]) > np.quantile(s[:950], 0.95)
    back = IsolationScorer.from_state(dense.state_dict(), dense.shape)
    assert back.metric == "density" and torch.equal(back(t), dense(t))
    # an artifact's forest from before the metric existed names none: it scores by depth
    depth = IsolationScorer.from_forest(forest)
    old_shape = {k: v for k, v in depth.shape.items() if k != "metric"}
    np.testing.assert_allclose(IsolationScorer.from_state(depth.state_dict(), old_shape)(t).numpy(),
                               -forest.score_samples(Z), atol=1e-12)
    with pytest.raises(ValueError, match="needs the rows"):
        IsolationScorer.from_forest(forest, metric="density")
    with pytest.raises(ValueError, match="metric must be one of"):
        IsolationScorer.from_forest(forest, Z, metric="height")


def test_artifact_from_before_the_blend_loads_and_scores_with_the_network(tiny_model_dir, tmp_path):
    """An artifact written before the blend existed (no score_config, no forest) still loads, as the network alone."""
    tensors, meta = read_artifact(tiny_model_dir)
    old = {k: v for k, v in tensors.items() if not k.startswith(("forest.", "knn."))}
    meta = {k: v for k, v in meta.items() if k not in ("score_config", "forest", "knn", "blend", "checksum", "format")}
    path = write_artifact(tmp_path / "old", old, meta)
    det, new = KDSM.load(path, device="cpu"), KDSM.load(tiny_model_dir, device="cpu")
    rows = make_blobs(n=50, seed=1)[0]
    assert det.forest_ is None
    np.testing.assert_allclose(det.decision_function(rows), new.score_parts(rows).network)


def test_artifact_missing_a_forest_tensor_is_refused_in_one_line(tiny_model_dir, tmp_path):
    from offline_train.artifact import ArtifactError

    tensors, meta = read_artifact(tiny_model_dir)
    broken = {k: v for k, v in tensors.items() if k != "forest.leaf_value"}
    path = write_artifact(tmp_path / "b", broken, {k: v for k, v in meta.items() if k not in ("checksum", "format")})
    with pytest.raises(ArtifactError, match="do not fit together") as e:
        KDSM.load(path, device="cpu")
    assert "\n" not in str(e.value) and "leaf_value" in str(e.value)
