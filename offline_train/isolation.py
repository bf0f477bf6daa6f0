"""An isolation forest as tensors: scikit-learn fits it, torch scores it, safetensors stores it.

The default score blends the network's score with an isolation forest's
(``offline_train.blend``). scikit-learn's forest would need pickle to be
stored and runs on CPU only, so ``IsolationScorer`` copies its trees into flat
tensors (registered buffers: they travel with ``.to(device)`` and
``state_dict``) and walks all trees for a batch of rows at once, one gather
per level. It gives scikit-learn's score ``s = 2 ** (-E[h(x)] / c(n))``
(``-IsolationForest.score_samples``) to float rounding:

>>> import numpy as np, torch
>>> from sklearn.ensemble import IsolationForest
>>> Z = np.random.default_rng(0).normal(size=(300, 4))
>>> iso = IsolationForest(n_estimators=20, random_state=0).fit(Z)
>>> ours = IsolationScorer.from_forest(iso)(torch.as_tensor(Z, dtype=torch.float32)).numpy()
>>> bool(np.allclose(ours, -iso.score_samples(Z), rtol=0, atol=1e-9))
True

Why it matches exactly: scikit-learn compares float32 features with float64
thresholds; each threshold is stored as the largest float32 not above it,
which makes ``x <= t`` the same test for every float32 ``x``.

The same trees can be read by *density* instead of depth (``metric="density"``,
isotree's ``scoring_metric="density"``; issue 11, thirty-seventh pass): a leaf
scores ``-log(share of the tree's sample in the leaf / share of the volume the
splits to it leave)``, each split's share measured on the range of the node's
own rows, and a row scores the mean over trees. The walk is the same; only the
leaf values differ. Alone it ranks a little worse than depth; as the blend's
forest part it ranks better (the pass's tables, docs/contaminated-passes.md):

>>> dense = IsolationScorer.from_forest(iso, Z, metric="density")
>>> far = torch.tensor([[0.0, 0.0, 0.0, 0.0], [4.0, 4.0, 4.0, 4.0]])
>>> bool(dense(far)[1] > dense(far)[0])
True
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.ensemble import IsolationForest
from torch import nn

from .artifact import check_counts, check_shapes


def average_path_length(n: np.ndarray) -> np.ndarray:
    """c(n): the mean depth of an unsuccessful search in a binary search tree of n keys (Liu et al. 2008).

    >>> average_path_length(np.array([1, 2, 256])).round(3).tolist()
    [0.0, 1.0, 10.245]
    """
    n = np.asarray(n, dtype=np.float64)
    c = np.where(n == 2, 1.0, 0.0)
    big = n > 2
    c[big] = 2.0 * (np.log(n[big] - 1.0) + np.euler_gamma) - 2.0 * (n[big] - 1.0) / n[big]
    return c


def _floor_float32(t: np.ndarray) -> np.ndarray:
    """The largest float32 <= t, elementwise (so that ``x32 <= t`` iff ``x32 <= result``)."""
    t32 = t.astype(np.float32)
    over = t32.astype(np.float64) > t
    t32[over] = np.nextafter(t32[over], np.float32(-np.inf))
    return t32


METRICS = ("depth", "density")
# The deepest forest an artifact may hold: scikit-learn's trees of its default 256-row samples have 8 levels, and a
# forest of 2**32 leaves per tree would not fit in memory anyway. Checked before 2**levels is computed.
MAX_LEVELS = 32


def _density_leaf_values(tree, sample: np.ndarray) -> np.ndarray:
    """A tree's score per scikit-learn node (set at its leaves): log(volume share) - log(sample share).

    The tree's own sample (its rows of ``estimators_samples_``, float32 as the tree saw them) is pushed down it
    once; at each split the node's rows' range on the split column is cut at the threshold, and each side's share of
    that range multiplies its volume share. A share is floored at 1e-9 (a threshold drawn at the range's very end)
    so that no leaf scores -inf.
    """
    t, S = tree.tree_, sample
    reach = tree.decision_path(S).tocoo()  # (row, node) for every node each of the sample's rows passes
    inner = t.children_left[reach.col] >= 0
    rows, nodes = reach.row[inner], reach.col[inner]
    x = S[rows, t.feature[nodes]].astype(np.float64)
    lo, hi = np.full(t.node_count, np.inf), np.full(t.node_count, -np.inf)
    np.minimum.at(lo, nodes, x)
    np.maximum.at(hi, nodes, x)
    log_volume = np.zeros(t.node_count)
    for node in range(t.node_count):  # scikit-learn numbers a parent before its children
        left, right = t.children_left[node], t.children_right[node]
        if left >= 0:
            width = hi[node] - lo[node]
            share = (t.threshold[node] - lo[node]) / width if width > 0 else 0.5
            log_volume[left] = log_volume[node] + np.log(max(share, 1e-9))
            log_volume[right] = log_volume[node] + np.log(max(1.0 - share, 1e-9))
    return log_volume - np.log(t.n_node_samples / len(S))


def fit_forest(Z: np.ndarray, seed: int) -> IsolationForest:
    """The forest the default fits on the standardised training rows (scikit-learn's defaults: 100 trees of 256 rows)."""
    return IsolationForest(random_state=seed, n_jobs=1).fit(Z)


class IsolationScorer(nn.Module):
    """A fitted isolation forest's trees in flat tensors; ``forward(Z)`` is its score ``s`` in (0, 1].

    Each tree is laid out as a complete binary tree of ``levels`` levels (heap
    order: node ``i`` has children ``2i+1`` and ``2i+2``), so a step down is
    arithmetic, not a lookup. A leaf above the bottom level is passed straight
    down (threshold +inf: always left) to a bottom node that holds its value:
    by depth, its path length (its depth plus c(leaf size) - 1, what
    scikit-learn adds up); by density, its density score.
    """

    def __init__(self, trees: int, levels: int, metric: str = "depth"):
        super().__init__()
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}, not {metric!r}")
        self.trees, self.levels, self.metric = trees, levels, metric
        inner, bottom = 2**levels - 1, 2**levels
        self.register_buffer("feature", torch.zeros(trees * max(inner, 1), dtype=torch.int64))
        self.register_buffer("threshold", torch.full((trees * max(inner, 1),), float("inf"), dtype=torch.float32))
        self.register_buffer("leaf_value", torch.zeros(trees * bottom, dtype=torch.float64))
        self.register_buffer("scale", torch.ones((), dtype=torch.float64))  # by depth trees * c(max_samples); density trees

    @classmethod
    def from_forest(cls, iso: IsolationForest, Z: np.ndarray | None = None, metric: str = "depth") -> IsolationScorer:
        """The forest's trees as tensors; ``metric="density"`` needs ``Z``, the rows the forest was fitted on."""
        if iso.max_features != 1.0 or iso.bootstrap:
            raise ValueError("only forests on every feature without bootstrap are exported")
        if metric == "density" and Z is None:
            raise ValueError("the density metric needs the rows the forest was fitted on")
        trees = [e.tree_ for e in iso.estimators_]
        depths = [t.compute_node_depths() - 1 for t in trees]  # the root at 0
        levels = int(max(d.max() for d in depths))
        if metric == "density":  # each tree's sample, float32 as scikit-learn's trees see rows (regenerated per call)
            Z32 = np.asarray(Z, dtype=np.float32)
            samples = [Z32[rows] for rows in iso.estimators_samples_]
        inner, bottom = 2**levels - 1, 2**levels
        feature = np.zeros((len(trees), max(inner, 1)), np.int64)
        threshold = np.full((len(trees), max(inner, 1)), np.inf, np.float32)
        leaf_value = np.zeros((len(trees), bottom), np.float64)
        for k, (t, depth) in enumerate(zip(trees, depths, strict=True)):
            if metric == "density":
                value = _density_leaf_values(iso.estimators_[k], samples[k])
            else:
                value = depth + average_path_length(t.n_node_samples)  # edges from the root, + c(leaf size)
            stack = [(0, 0)]  # (scikit-learn node, heap position)
            while stack:
                node, pos = stack.pop()
                if t.children_left[node] >= 0:
                    feature[k, pos] = t.feature[node]
                    threshold[k, pos] = _floor_float32(np.array([t.threshold[node]]))[0]
                    stack += [(t.children_left[node], 2 * pos + 1), (t.children_right[node], 2 * pos + 2)]
                else:
                    while pos < inner:  # pass the leaf down the always-left path
                        pos = 2 * pos + 1
                    leaf_value[k, pos - inner] = value[node]
        scorer = cls(len(trees), levels, metric)
        with torch.no_grad():
            scorer.feature.copy_(torch.from_numpy(feature.ravel()))
            scorer.threshold.copy_(torch.from_numpy(threshold.ravel()))
            scorer.leaf_value.copy_(torch.from_numpy(leaf_value.ravel()))
            if metric == "density":  # the mean over trees
                scorer.scale.fill_(len(trees))
            else:
                scorer.scale.fill_(len(trees) * float(average_path_length(np.array([iso.max_samples_]))[0]))
        return scorer

    @property
    def shape(self) -> dict[str, int | str]:
        """What ``from_state`` needs besides the tensors (the artifact's metadata keeps it)."""
        return {"trees": self.trees, "levels": self.levels, "metric": self.metric}

    @classmethod
    def from_state(cls, state: dict[str, torch.Tensor], shape: dict[str, int], d: int | None = None) -> IsolationScorer:
        """Rebuild from ``state_dict()`` tensors and ``shape`` (an artifact); raises on a mismatch.

        With ``d`` (the rows' width), every node's feature must be a column of the rows: ``forward`` gathers
        the feature of every node it passes, a leaf's pass-through nodes included (they hold 0), so one out of
        range would fail at scoring. Thresholds must not be NaN, leaf values and the scale must be finite.
        Artifacts from before the density metric name none: their forests score by depth.

        ``shape``'s sizes are checked against the tensors before anything of their size is built (``_sizes``): an
        artifact's metadata is a checksummed JSON anyone can re-sign, and ``forest.levels`` 22 in it built 8 GB of
        zeros before the tensors were compared."""
        trees, levels = cls._sizes(state, shape)
        scorer = cls(trees, levels, str(shape.get("metric", "depth")))
        scorer.load_state_dict(state, strict=True)
        if d is not None and len(scorer.feature) and not (0 <= int(scorer.feature.min()) <= int(scorer.feature.max()) < d):
            raise ValueError(f"isolation forest: a node splits on a feature outside 0..{d - 1}")
        if not (torch.isfinite(scorer.leaf_value).all() and torch.isfinite(scorer.scale) and scorer.scale >= 0
                and not torch.isnan(scorer.threshold).any()):
            raise ValueError("isolation forest: thresholds must be numbers (+inf passes a leaf down), leaf values and "
                             "scale finite")
        return scorer

    @staticmethod
    def _sizes(state: dict[str, torch.Tensor], shape: dict[str, int]) -> tuple[int, int]:
        """``shape``'s trees and levels once they fit ``state``'s tensors: whole numbers (levels at most
        ``MAX_LEVELS``, so that 2**levels stays a small number) and, for each buffer, the size the constructor would
        give it. RuntimeError (as ``load_state_dict`` raises) names the fields that disagree with the weights.

        >>> a = IsolationScorer(trees=3, levels=2)
        >>> IsolationScorer._sizes(a.state_dict(), a.shape)
        (3, 2)
        >>> IsolationScorer._sizes(a.state_dict(), {**a.shape, "levels": 22})
        Traceback (most recent call last):
        ...
        RuntimeError: forest.trees = 3 and forest.levels = 22 give forest.feature the shape (12582909,); the weights' has (9,)
        """
        trees, levels = shape["trees"], shape["levels"]
        check_counts("forest", trees=trees, levels=levels)
        if trees < 1:
            raise ValueError(f"forest.trees = {trees}: a forest has at least 1 tree")
        if not 0 <= levels <= MAX_LEVELS:
            raise ValueError(f"forest.levels = {levels} is outside 0..{MAX_LEVELS}")
        inner = trees * max(2**levels - 1, 1)
        expected = {"feature": (inner,), "threshold": (inner,), "leaf_value": (trees * 2**levels,), "scale": ()}
        check_shapes(state, expected, "forest", f"forest.trees = {trees} and forest.levels = {levels}")
        return trees, levels

    @torch.no_grad()
    def forward(self, Z: torch.Tensor) -> torch.Tensor:
        """Scores of standardised rows ``Z`` (n, d), float64, higher = more anomalous: by depth the isolation score
        in (0, 1] (higher = isolated sooner), by density the mean over trees of the leaves' density scores."""
        Z = Z.float()
        inner = 2**self.levels - 1
        tree = torch.arange(self.trees, device=Z.device)
        node_base, leaf_base = tree * inner, tree * (inner + 1) - inner  # each tree's first inner node, first leaf - inner
        pos = torch.zeros((len(Z), self.trees), dtype=torch.int64, device=Z.device)
        for _ in range(self.levels):
            at = pos + node_base
            goes_right = Z.gather(1, self.feature.take(at)) > self.threshold.take(at)
            pos.mul_(2).add_(goes_right).add_(1)  # in place: this loop is most of a blended score's cost on CPU
        path = self.leaf_value.take(pos + leaf_base).sum(dim=1)
        if self.metric == "density":
            return path / self.scale
        # A forest of one-row trees (scale 0): scikit-learn takes the exponent as -1, so every row scores 0.5.
        # A where, not .item(): no device sync per batch.
        return torch.where(self.scale > 0, torch.exp2(-path / self.scale), torch.full_like(path, 0.5))
