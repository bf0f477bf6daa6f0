"""The scorer: one scoring pass per micro-batch through ``KDSM.score_parts``.

Scoring runs in fp32, eval mode, no gradients (``KDSM.score_parts``), with
pinned memory and non-blocking copies on CUDA; a row's score does not depend
on its batch. ``Scorer`` adds the per-batch pieces the stream needs: severity
against the live thresholds, p-values, and explanations and the score's parts
(the network's score, the isolation forest's and, with ``score.knn``, the k-NN
distance) only for alert rows.

>>> import numpy as np
>>> from offline_train.config import ModelConfig, OptimConfig
>>> from offline_train.detector import KDSM
>>> det = KDSM(model=ModelConfig(width=16, depth=1), train=OptimConfig(steps=5, precision="fp32")).fit(np.random.default_rng(0).normal(size=(200, 3)))
>>> r = Scorer(top_features=2).score(det, np.zeros((4, 3)), {"warning": 0.0})
>>> r.severities.tolist(), r.explanation.features.shape
(['warning', 'warning', 'warning', 'warning'], (4, 2))

``ConstantScorer`` takes the forward pass out (``kdsm bench stream --scorer
none``): the loop, decode, alert encoding, publish and commit stay as they are.

>>> c = ConstantScorer(alert_share=0.25, top_features=2).score(det, np.zeros((8, 3)), {"warning": 1.0, "critical": 2.0})
>>> c.alert_rows.tolist(), c.severities.tolist()[:2], c.scores.tolist()[:2], c.explanation.features.shape
([0, 4], ['warning', ''], [1.0, 0.0], (2, 2))
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from offline_train.detector import KDSM, Explanation


@dataclass
class ScoreResult:
    scores: np.ndarray
    severities: np.ndarray  # '' / severity name per row
    alert_rows: np.ndarray  # indices of rows at or above the lowest threshold
    p_values: np.ndarray  # for alert rows only
    explanation: Explanation | None  # for alert rows only
    parts: dict[str, np.ndarray] | None = None  # for alert rows only: the blended score's parts (network, isolation[, knn])
    leading: np.ndarray | None = None  # for alert rows only, with parts: the name of the part the score equals


class Scorer:
    """Scores batches; holds no process-wide state (torch's thread count is the entry point's: ``streamer.service``)."""

    def __init__(self, top_features: int = 5):
        self.top_features = top_features

    def score(self, model: KDSM, X: np.ndarray, thresholds: dict[str, float], records: list | None = None) -> ScoreResult:
        """``records``: the rows' JSON objects, for explanations in the user's terms (feature-spec models)."""
        p = model.score_parts(X)
        scores, F = p.scores, p.outputs
        severities = model.severity(scores, thresholds)
        alert_rows = np.flatnonzero(severities != "")
        expl = None
        pv = np.zeros(0)
        if len(alert_rows):
            # Explanations and p-values only for the rows that become alerts.
            expl = model.explain(X[alert_rows], top_k=self.top_features, outputs=F[alert_rows],
                                 records=[records[i] for i in alert_rows.tolist()] if records is not None else None)
            pv = model.p_values(scores[alert_rows])
        parts = leading = None
        named = p.by_name()
        if named is not None:
            parts = {name: values[alert_rows] for name, values in named.items()}
            leading = model.blend_.leading(*parts.values())
        return ScoreResult(scores, severities, alert_rows, pv, expl, parts, leading)


class ConstantScorer:
    """Scoring excluded: the pipe's own ceiling, measurable without a GPU (``kdsm bench stream --scorer none``).

    Every ``round(1 / alert_share)``-th row of a batch scores exactly the
    lowest threshold in force (an alert of that severity), every other row
    scores 0. Severities and p-values come from the model as in ``Scorer``;
    the explanation is the row's first ``top_features`` values, each with the
    same share, expected = value, so alerts are encoded and published in full.
    """

    def __init__(self, alert_share: float = 0.01, top_features: int = 5):
        if not 0 < alert_share <= 1:
            raise ValueError(f"alert_share must be in (0, 1], got {alert_share}")
        self.step = max(1, round(1 / alert_share))
        self.top_features = top_features

    def score(self, model: KDSM, X: np.ndarray, thresholds: dict[str, float], records: list | None = None) -> ScoreResult:
        n, d = X.shape
        scores = np.zeros(n)
        rows = np.arange(0, n, self.step)
        scores[rows] = min(thresholds.values())
        severities = model.severity(scores, thresholds)
        alert_rows = np.flatnonzero(severities != "")
        k = min(self.top_features, d)
        a = len(alert_rows)
        value = X[alert_rows, :k]
        expl = Explanation(scores=scores[alert_rows], features=np.tile(np.arange(k), (a, 1)),
                           contribution=np.full((a, k), 1.0 / k), direction=np.ones((a, k), dtype=np.int64),
                           value=value, expected=value.copy())
        return ScoreResult(scores, severities, alert_rows, model.p_values(scores[alert_rows]), expl)
