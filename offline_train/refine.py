"""Training on contaminated history: which rows the score network learns from.

The EMA teacher (DESIGN 3.5) drops the batch's top 20% *while* the network
learns, but the network has already learnt the anomalies by the time the
teacher could spot them: on ADBench cardio (10% anomalies) K-DSM-EMA reaches
AUC-PR 0.31, the same network trained on the normal rows alone 0.87. So the
default also decides, from the training data alone, which rows to learn from,
the way robust statistics estimate a location from a trimmed core (the
C-steps of the minimum covariance determinant):

1. **Warm start**: an isolation forest ranks the rows; the network first
   learns from the least isolated ``start_keep`` share (the core).
2. **Refinement rounds**: at evenly spaced steps the network in eval mode
   scores every training row; training goes on with the rows whose score is
   at most the ``keep`` quantile (or, with ``keep="auto"``, every row below
   the outlier fence of the log-scores). Rows dropped earlier come back once
   the model finds them normal.

The step budget is unchanged: the rounds split it, they do not add to it.

>>> import numpy as np
>>> Z = np.vstack([np.random.default_rng(0).normal(size=(95, 2)), np.full((5, 2), 8.0)])
>>> core = warm_start_rows(Z, keep=0.9, seed=0)
>>> len(core), bool(set(range(95, 100)).isdisjoint(core.tolist()))
(90, True)
>>> fence_share(np.r_[np.ones(90), np.full(10, 100.0)] * np.random.default_rng(1).uniform(0.9, 1.1, 100))
0.1
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.ensemble import IsolationForest


def warm_start_rows(Z: np.ndarray, keep: float, seed: int) -> np.ndarray:
    """Indices of the ``keep`` share of rows an isolation forest finds least anomalous (sorted)."""
    iso = IsolationForest(random_state=seed, n_jobs=1).fit(Z)
    return lowest(-iso.score_samples(Z), keep)


def lowest(scores: np.ndarray, keep: float) -> np.ndarray:
    """Indices of the ``ceil(keep * n)`` lowest scores (ties broken by index), sorted."""
    k = max(2, int(np.ceil(keep * len(scores))))
    return np.sort(np.argsort(scores, kind="stable")[:k])


def fence_share(scores: np.ndarray, k: float = 3.0) -> float:
    """Share of rows above the robust outlier fence ``median + k * 1.4826 * MAD`` of the log-scores."""
    logs = np.log(np.maximum(scores, 1e-12))
    med = np.median(logs)
    mad = 1.4826 * np.median(np.abs(logs - med))
    return float(np.mean(logs > med + k * max(mad, 1e-12)))


@torch.no_grad()
def row_scores(net: torch.nn.Module, Z: torch.Tensor, chunk: int = 65536) -> np.ndarray:
    """Score norms ``||f(z)||`` of standardised rows ``Z`` (net already in eval mode), fp32."""
    return torch.cat([net(Z[i:i + chunk]).float().norm(dim=1) for i in range(0, len(Z), chunk)]).cpu().numpy()


class Refinement:
    """The warm start and the refinement rounds of one training run, under a ``RefineConfig``.

    ``rounds_`` records each round: the share of rows kept and, for
    ``keep="auto"``, the fence's share (the contamination estimate).
    """

    def __init__(self, config, Z: np.ndarray, steps: int, seed: int, device="cpu"):
        self.config, self.seed = config, seed
        self.Z = Z
        self._Zt = torch.as_tensor(Z, dtype=torch.float32, device=device)
        k = config.rounds
        self.at = tuple(sorted({int(steps * (i + 1) / (k + 1)) for i in range(k)} - {0}))
        self.rounds_: list[dict] = []

    def start_rows(self) -> np.ndarray | None:
        """The warm start's core, or None (every row) when ``start_keep`` is 1."""
        if self.config.start_keep >= 1:
            return None
        return warm_start_rows(self.Z, self.config.start_keep, self.seed)

    def keep_share(self, scores: np.ndarray) -> tuple[float, float | None]:
        """The share of rows to keep this round, and the fence's contamination estimate (auto only)."""
        c = self.config
        if c.keep != "auto":
            return float(c.keep), None
        estimate = fence_share(scores, c.fence)
        # Self-paced: the kept set grows by at most one step a round, so a model that has seen only
        # the core (and so finds every tail row odd, which widens the fence) cannot let everything in.
        prev = self.rounds_[-1]["kept"] if self.rounds_ else min(c.start_keep, 1.0)
        pace = (1.0 - min(c.start_keep, 1.0)) / max(c.rounds, 1)
        keep = min(1.0 - min(estimate, c.max_drop), prev + pace) if pace > 0 else 1.0 - min(estimate, c.max_drop)
        return keep, estimate

    def __call__(self, net: torch.nn.Module) -> np.ndarray:
        """A round: score every row with ``net`` (eval mode) and return the rows to train on."""
        scores = row_scores(net, self._Zt)
        keep, estimate = self.keep_share(scores)
        self.rounds_.append({"kept": round(keep, 4), "estimate": None if estimate is None else round(estimate, 4)})
        return lowest(scores, keep)
