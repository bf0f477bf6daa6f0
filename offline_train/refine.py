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
   scores every training row, and training goes on with the ``keep`` share
   that looks most normal to it. With ``keep="auto"`` (the default) that
   share is one minus the forest's own contamination estimate, so it follows
   the data: about 10% left out of data with 10% planted anomalies, a third
   of ADBench breastw (34% anomalies). It does not fall to zero on clean
   data (10-50% of ADBench's clean training sets, as many as on the
   contaminated ones), which costs accuracy there: docs/contaminated.md.
   Rows left out of the core come back once the network finds them normal.
3. **Strata** (``strata``, off by default): the core and each round keep
   their share within each of ``strata`` k-means clusters of the rows, not
   over all of them. A mode of clean history that the forest finds isolated
   (a digit class of pendigits) is otherwise left out of the core, never
   learnt, scored high by every round, and so left out for good: its
   normal rows then alert.

The step budget is unchanged: the rounds split it, they do not add to it.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> planted = rng.normal(size=(100, 6)) * 0.5 + rng.choice([-6.0, 6.0], size=(100, 6))
>>> Z = np.vstack([rng.normal(size=(900, 6)), planted])
>>> warm = WarmStart(Z, seed=0)
>>> round(warm.contamination_, 2)
0.1
>>> core = warm.core(0.5)
>>> len(core), bool((core < 900).all())
(500, True)
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.cluster import KMeans

from .blend import Blend
from .isolation import fit_forest


class WarmStart:
    """An isolation forest on the training rows: its ranking gives the core, its score the contamination estimate.

    ``contamination_`` is the share of rows whose isolation score
    ``s = 2 ** (-E[h(x)] / c(n))`` exceeds ``threshold`` (``refine.threshold``);
    0.5 is the rule of Liu, Ting and Zhou (2008) that scikit-learn uses for
    ``contamination="auto"``: rows isolated in fewer splits than an average
    unsuccessful search are anomalies.
    """

    def __init__(self, Z: np.ndarray, seed: int, threshold: float = 0.5):
        self.forest_ = iso = fit_forest(Z, seed)  # the default's score blends it in (offline_train.blend)
        self.scores_ = -iso.score_samples(Z)  # s in (0, 1]; higher = isolated sooner
        self.contamination_ = float(np.mean(self.scores_ > threshold))

    def core(self, keep: float, strata: np.ndarray | None = None) -> np.ndarray:
        """Indices of the ``keep`` share of rows the forest finds least anomalous (sorted), per stratum if given."""
        return lowest(self.scores_, keep, strata)


def lowest(scores: np.ndarray, keep: float, strata: np.ndarray | None = None) -> np.ndarray:
    """Indices of the ``ceil(keep * n)`` lowest scores (ties broken by index), sorted.

    With ``strata`` (a label per row), the ``ceil(keep * size)`` lowest of each stratum instead:

    >>> lowest(np.array([5.0, 1.0, 9.0, 8.0]), 0.5)
    array([0, 1])
    >>> lowest(np.array([5.0, 1.0, 9.0, 8.0]), 0.5, strata=np.array([0, 0, 1, 1]))
    array([1, 3])
    """
    if strata is None:
        k = max(2, int(np.ceil(keep * len(scores))))
        return np.sort(np.argsort(scores, kind="stable")[:k])
    kept = []
    for label in np.unique(strata):
        rows = np.flatnonzero(strata == label)
        k = max(1, int(np.ceil(keep * len(rows))))
        kept.append(rows[np.argsort(scores[rows], kind="stable")[:k]])
    return np.sort(np.concatenate(kept))


def strata_of(Z: np.ndarray, clusters: int, seed: int) -> np.ndarray | None:
    """A k-means cluster label per row (``clusters`` of them at most), or None when ``clusters`` < 2 or there are
    fewer than two rows a cluster (then one share over all rows; ``Refinement.summary``'s ``strata`` says 0)."""
    if clusters < 2 or len(Z) < 2 * clusters:
        return None
    return KMeans(clusters, n_init=4, random_state=seed).fit_predict(Z)


@torch.no_grad()
def row_scores(net: torch.nn.Module, Z: torch.Tensor, chunk: int = 65536) -> np.ndarray:
    """Score norms ``||f(z)||`` of standardised rows ``Z`` (net already in eval mode), fp32."""
    return torch.cat([net(Z[i:i + chunk]).float().norm(dim=1) for i in range(0, len(Z), chunk)]).cpu().numpy()


class Refinement:
    """The warm start and the refinement rounds of one training run, under a ``RefineConfig``.

    ``keep_`` is the share of rows each round trains on: the config's share,
    or with ``keep="auto"`` one minus the forest's contamination estimate
    (at most ``max_drop`` left out). ``rounds_`` records each round.
    """

    def __init__(self, config, Z: np.ndarray, steps: int, seed: int, device="cpu"):
        self.config = config
        self._Zt = torch.as_tensor(Z, dtype=torch.float32, device=device)
        self.strata_ = strata_of(Z, config.strata, seed)
        self.warm_ = WarmStart(Z, seed, config.threshold)
        if config.keep == "auto":
            self.keep_ = 1.0 - min(self.warm_.contamination_, config.max_drop)
        else:
            self.keep_ = float(config.keep)
        k = config.rounds
        self.at = tuple(sorted({int(steps * (i + 1) / (k + 1)) for i in range(k)} - {0}))
        self.rounds_: list[dict] = []

    def start_rows(self) -> np.ndarray | None:
        """The warm start's core, or None (every row) when ``start_keep`` is 1."""
        return None if self.config.start_keep >= 1 else self.warm_.core(self.config.start_keep, self.strata_)

    def summary(self) -> dict:
        return {"contamination_estimate": round(self.warm_.contamination_, 4), "keep": round(self.keep_, 4),
                "start_keep": self.config.start_keep, "rounds": len(self.rounds_), "rank": self.config.rank,
                "strata": 0 if self.strata_ is None else len(np.unique(self.strata_))}

    def __call__(self, net: torch.nn.Module) -> np.ndarray:
        """A round: score every row with ``net`` (eval mode) and return the ``keep_`` share that look most normal."""
        scores = row_scores(net, self._Zt)
        if self.config.rank == "blend":
            scores = Blend.fit(scores, self.warm_.scores_)(scores, self.warm_.scores_)
        rows = lowest(scores, self.keep_, self.strata_)
        self.rounds_.append({"kept": round(len(rows) / len(self._Zt), 4)})
        return rows
