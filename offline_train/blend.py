"""The default score: the network's and an isolation forest's, on the network's scale.

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
symmetric; the forest's score s in (0, 1] as it is), and the larger of the two
z-scores is mapped back onto the network's log scale:

    score = exp(mu + sd * max(z_network, z_forest))

So a row that either part finds clearly anomalous scores high: an average of
the two would halve what only one part can see (the forest never splits on a
column that was constant in training, so an unseen category, whose bucket
column was always 0, is invisible to it; averaged, none of 15 such events
alerted in ``tests/test_stream_mixed.py``). The score is in the network's
units: positive, equal to ``||f(x)||`` wherever the network's part is the
larger, and still rising without bound for rows far outside the data (the
forest's part is bounded, the network's is not). Explanations come from the
network's part (``KDSM.explain``); alerts also carry both parts.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> b = Blend.fit(np.exp(rng.normal(size=1000)), rng.uniform(0.3, 0.6, size=1000))
>>> s = b(np.array([1.0, 1.0, 10.0]), np.array([0.45, 0.6, 0.45]))
>>> bool(s[1] > s[0] and s[2] > s[0])
True
>>> Blend.from_dict(b.to_dict()) == b
True
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

_TINY = 1e-12  # keeps log(0) and a constant part finite


@dataclass(frozen=True)
class Blend:
    """Training-row moments of the two parts: the network's log score and the forest's score."""

    network_mean: float
    network_std: float
    forest_mean: float
    forest_std: float

    @classmethod
    def fit(cls, network_scores: np.ndarray, forest_scores: np.ndarray) -> Blend:
        log_n = np.log(np.asarray(network_scores, np.float64) + _TINY)
        f = np.asarray(forest_scores, np.float64)
        return cls(float(log_n.mean()), float(log_n.std()) + _TINY, float(f.mean()), float(f.std()) + _TINY)

    def z_scores(self, network_scores: np.ndarray, forest_scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each part standardised by its training-row moments: (z_network on the log scale, z_forest)."""
        z_net = (np.log(np.asarray(network_scores, np.float64) + _TINY) - self.network_mean) / self.network_std
        z_forest = (np.asarray(forest_scores, np.float64) - self.forest_mean) / self.forest_std
        return z_net, z_forest

    def __call__(self, network_scores: np.ndarray, forest_scores: np.ndarray) -> np.ndarray:
        z_net, z_forest = self.z_scores(network_scores, forest_scores)
        return np.exp(self.network_mean + self.network_std * np.maximum(z_net, z_forest))

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Blend:
        return cls(**{k: float(d[k]) for k in ("network_mean", "network_std", "forest_mean", "forest_std")})
