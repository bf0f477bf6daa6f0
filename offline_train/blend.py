"""The default score: the network's and an isolation forest's, on the network's scale.

With ``score.knn`` on, a third part joins them: the distance to the k-th
nearest of the training rows the network keeps (``offline_train.neighbours``).

On contaminated history the score network and an isolation forest miss
different anomalies (docs/contaminated.md): the network sees departures from
the learnt density feature by feature, the forest sees rows that few random
splits isolate, and it is robust to contamination because each tree learns
from 256 rows. On the benchmark's contaminated settings their blend ranks
anomalies far better than the network alone and about as well as the forest
alone (docs/contaminated.md), while keeping what only the network sees, so it
is what ``kdsm train`` ships (``score.isolation_forest``, on by default).

Each part is standardised by its own mean and standard deviation over the
training rows (the network's score on the log scale, where it is close to
symmetric; the forest's score as it is: its density reading by default,
``score.forest_metric``), and the larger of the two
z-scores is mapped back onto the network's log scale:

    score = exp(mu + sd * max(z_network, z_forest))

So a row that either part finds clearly anomalous scores high: an average of
the two would halve what only one part can see (the forest never splits on a
column that was constant in training, so an unseen category, whose bucket
column was always 0, is invisible to it; averaged, none of 15 such events
alerted in ``tests/test_stream_mixed.py``). The score is in the network's
units: positive, equal to ``||f(x)||`` wherever the network's part is the
larger, and still rising for rows far outside the data (the forest's part is
bounded by its leaves' values, the network's is not; the k-NN part's exponent grows logarithmically
past e^100, so the score stays finite). Explanations come from the
network's part (``KDSM.explain``); alerts also carry the parts and name the
one whose z-score was the largest (``leading``: the part the score equals).

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> b = Blend.fit(np.exp(rng.normal(size=1000)), rng.uniform(0.3, 0.6, size=1000))
>>> s = b(np.array([1.0, 1.0, 10.0]), np.array([0.45, 0.6, 0.45]))
>>> bool(s[1] > s[0] and s[2] > s[0])
True
>>> Blend.from_dict(b.to_dict()) == b
True
>>> b.leading(np.array([1.0, 10.0]), np.array([0.6, 0.45])).tolist()  # two parts: no k-NN part to lead
['isolation', 'network']
>>> b3 = Blend.fit(np.exp(rng.normal(size=1000)), rng.uniform(0.3, 0.6, size=1000), rng.uniform(1, 2, size=1000))
>>> s3 = b3(np.array([1.0, 1.0]), np.array([0.45, 0.45]), np.array([1.5, 9.0]))
>>> bool(s3[1] > s3[0]), Blend.from_dict(b3.to_dict()) == b3
(True, True)
>>> b3.leading(np.array([1.0, 1.0, 50.0]), np.array([0.45, 0.99, 0.45]), np.array([9.0, 1.5, 1.5])).tolist()
['knn', 'isolation', 'network']
>>> far = b3(np.ones(3), np.full(3, 0.45), np.array([1e3, 1e6, 1e300]))  # rows far outside the data
>>> bool(np.isfinite(far).all() and far[0] < far[1] < far[2])
True
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

_TINY = 1e-12  # keeps log(0) and a constant part finite
# The k-NN part's z-score grows linearly with a row's distance, so exp(mu + sd * z) overflows float64 for rows far
# outside the training data (one feature 1e5 standard deviations out). Past this exponent the score's exponent grows
# logarithmically: the order of rows is kept and the score stays finite. An fp32 network's ||f(x)|| stays far below
# e^100, so wherever the network's part is the largest the score still equals ||f(x)||.
_LOG_LINEAR = 100.0
_LOG_MAX = 700.0  # a guard: exp stays finite in float64 whatever the parts
PART_NAMES = ("network", "isolation", "knn")  # the parts' names in alerts (``score_parts``), in ``z_scores`` order


@dataclass(frozen=True)
class Blend:
    """Training-row moments of the parts: the network's log score, the forest's score and, where
    ``score.knn`` is on, the k-NN distance (``knn_mean`` and ``knn_std`` are None without it)."""

    network_mean: float
    network_std: float
    forest_mean: float
    forest_std: float
    knn_mean: float | None = None
    knn_std: float | None = None

    @classmethod
    def fit(cls, network_scores: np.ndarray, forest_scores: np.ndarray, knn_distances: np.ndarray | None = None) -> Blend:
        log_n = np.log(np.asarray(network_scores, np.float64) + _TINY)
        f = np.asarray(forest_scores, np.float64)
        knn = (None, None)
        if knn_distances is not None:
            d = np.asarray(knn_distances, np.float64)
            knn = (float(d.mean()), float(d.std()) + _TINY)
        return cls(float(log_n.mean()), float(log_n.std()) + _TINY, float(f.mean()), float(f.std()) + _TINY, *knn)

    @property
    def has_knn(self) -> bool:
        return self.knn_mean is not None

    def z_scores(self, network_scores: np.ndarray, forest_scores: np.ndarray,
                 knn_distances: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
        """Each part standardised by its training-row moments: (z_network on the log scale, z_forest[, z_knn])."""
        if self.has_knn != (knn_distances is not None):
            raise ValueError("the k-NN distances must be given exactly when the blend was fitted with them")
        z = [(np.log(np.asarray(network_scores, np.float64) + _TINY) - self.network_mean) / self.network_std,
             (np.asarray(forest_scores, np.float64) - self.forest_mean) / self.forest_std]
        if knn_distances is not None:
            z.append((np.asarray(knn_distances, np.float64) - self.knn_mean) / self.knn_std)
        return tuple(z)

    def leading(self, network_scores: np.ndarray, forest_scores: np.ndarray,
                knn_distances: np.ndarray | None = None) -> np.ndarray:
        """Per row, the name of the part whose z-score is the largest (``PART_NAMES``): the part the score is
        mapped from; ties go to the earlier part."""
        z = self.z_scores(network_scores, forest_scores, knn_distances)
        return np.asarray(PART_NAMES, dtype=object)[np.argmax(z, axis=0)]

    def __call__(self, network_scores: np.ndarray, forest_scores: np.ndarray,
                 knn_distances: np.ndarray | None = None) -> np.ndarray:
        z = self.z_scores(network_scores, forest_scores, knn_distances)
        e = self.network_mean + self.network_std * np.max(z, axis=0)
        e = np.where(e > _LOG_LINEAR, _LOG_LINEAR + np.log1p(np.maximum(e - _LOG_LINEAR, 0.0)), e)
        return np.exp(np.minimum(e, _LOG_MAX))

    def to_dict(self) -> dict[str, float]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, d: dict) -> Blend:
        """From ``to_dict``; a blend saved before the k-NN part (no ``knn_*`` keys) has two parts."""
        keys = ["network_mean", "network_std", "forest_mean", "forest_std"]
        if "knn_mean" in d or "knn_std" in d:
            keys += ["knn_mean", "knn_std"]  # both or a KeyError
        values = {k: float(d[k]) for k in keys}
        bad = [k for k, v in values.items() if not np.isfinite(v) or (k.endswith("_std") and v <= 0)]
        if bad:  # a zero or non-finite spread would give every row an infinite or NaN z-score
            raise ValueError(f"blend moments {', '.join(bad)} must be finite, spreads above 0")
        return cls(**values)
