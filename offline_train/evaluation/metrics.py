"""Threshold-free detection metrics of the paper (DESIGN 4).

* AUC-PR: average precision, step-wise (``sklearn.metrics.average_precision_score``).
* AUC-ROC: ``sklearn.metrics.roc_auc_score``.
* F1 at k: with k = number of test anomalies, precision at k equals recall
  at k and so equals F1; ties in the score are broken by row order.

>>> import numpy as np
>>> y = np.array([1, 0, 1, 0, 0])
>>> s = np.array([0.9, 0.8, 0.7, 0.1, 0.0])
>>> f1_at_k(y, s)
0.5
>>> round(detection_metrics(y, s)["aucpr"], 4)
0.8333
"""

from __future__ import annotations

import numpy as np
from sklearn.metrics import average_precision_score, roc_auc_score


def f1_at_k(y: np.ndarray, scores: np.ndarray) -> float:
    """Fraction of anomalies among the k top-scored rows, k = number of anomalies."""
    y = np.asarray(y).astype(np.int64)
    k = int(y.sum())
    if k == 0:
        raise ValueError("f1_at_k needs at least one anomaly")
    top = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")[:k]
    return float(y[top].sum() / k)


def detection_metrics(y: np.ndarray, scores: np.ndarray) -> dict[str, float]:
    """AUC-PR, AUC-ROC and F1 at k for labels ``y`` (1 = anomaly) and scores (higher = more anomalous)."""
    scores = np.asarray(scores, dtype=np.float64)
    if not np.isfinite(scores).all():
        raise ValueError("scores contain NaN or infinite values")
    return {"aucpr": float(average_precision_score(y, scores)), "aucroc": float(roc_auc_score(y, scores)),
            "f1": f1_at_k(y, scores)}
