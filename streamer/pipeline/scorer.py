"""The scorer: one forward pass per micro-batch through ``KDSM.score_outputs``.

Scoring runs in fp32, eval mode, no gradients (``KDSM.score_outputs``), with
pinned memory and non-blocking copies on CUDA; a row's score does not depend
on its batch. ``Scorer`` adds the per-batch pieces the stream needs: severity
against the live thresholds, p-values, and explanations only for alert rows.

>>> import numpy as np
>>> from offline_train.config import ModelConfig, OptimConfig
>>> from offline_train.detector import KDSM
>>> det = KDSM(model=ModelConfig(width=16, depth=1), train=OptimConfig(steps=5, precision="fp32")).fit(np.random.default_rng(0).normal(size=(200, 3)))
>>> r = Scorer(top_features=2).score(det, np.zeros((4, 3)), {"warning": 0.0})
>>> r.severities.tolist(), r.explanation.features.shape
(['warning', 'warning', 'warning', 'warning'], (4, 2))
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


class Scorer:
    """Scores batches; holds no process-wide state (torch's thread count is the entry point's: ``streamer.service``)."""

    def __init__(self, top_features: int = 5):
        self.top_features = top_features

    def score(self, model: KDSM, X: np.ndarray, thresholds: dict[str, float]) -> ScoreResult:
        scores, F = model.score_outputs(X)
        severities = model.severity(scores, thresholds)
        alert_rows = np.flatnonzero(severities != "")
        expl = None
        pv = np.zeros(0)
        if len(alert_rows):
            # Explanations and p-values only for the rows that become alerts.
            expl = model.explain(X[alert_rows], top_k=self.top_features, outputs=F[alert_rows])
            pv = model.p_values(scores[alert_rows])
        return ScoreResult(scores, severities, alert_rows, pv, expl)
