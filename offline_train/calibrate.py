"""Thresholds from held-out scores (DESIGN 3.7).

>>> cal = Calibration.fit(np.arange(1, 101, dtype=float), {"warning": 0.9, "critical": 0.99})
>>> round(cal.thresholds["warning"], 2), round(cal.thresholds["critical"], 2)
(90.1, 99.01)
>>> cal.p_values(np.array([100.0, 0.5])).round(4).tolist()
[0.0198, 1.0]
>>> cal.severity(np.array([50.0, 95.0, 100.0])).tolist()
['', 'warning', 'critical']
>>> round(cal.threshold_for_quantile(0.5), 2)
50.5
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Calibration:
    """Sorted calibration scores and named severity thresholds (quantiles of them).

    ``thresholds`` and ``quantiles`` are kept mildest first (by quantile), whatever order they were given or stored in
    (an artifact's JSON sorts its keys: critical before warning): two severities whose thresholds are equal (repeated
    top calibration scores, or an operator's override) are then ranked by quantile, by ``severity_of`` and by the
    streamers' order check, not by name.

    >>> tied = Calibration.fit(np.ones(10), {"critical": 0.999, "warning": 0.99})
    >>> list(tied.thresholds), tied.severity(np.array([1.0])).tolist()
    (['warning', 'critical'], ['critical'])
    """

    scores: np.ndarray  # sorted ascending
    quantiles: dict[str, float]
    thresholds: dict[str, float]

    def __post_init__(self) -> None:
        order = sorted(self.quantiles, key=lambda name: self.quantiles[name])  # stable: equal quantiles keep theirs
        self.quantiles = {name: self.quantiles[name] for name in order}
        self.thresholds = {name: self.thresholds[name] for name in order if name in self.thresholds}

    @classmethod
    def fit(cls, scores: np.ndarray, severities: dict[str, float]) -> Calibration:
        s = np.sort(np.asarray(scores, dtype=np.float64))
        if len(s) == 0:
            raise ValueError("calibration needs at least one score")
        thresholds = {name: float(np.quantile(s, q)) for name, q in severities.items()}
        return cls(s, dict(severities), thresholds)

    @classmethod
    def from_artifact(cls, scores, meta: dict) -> Calibration:
        """An artifact's calibration: its sorted scores (a tensor or an array) and its metadata's quantiles and thresholds.

        Raises ValueError unless the scores are a non-empty 1-D run of finite values in ascending order (what
        ``p_values`` and ``quantile_of`` binary-search), as many as the metadata's ``calibration.n`` where it says,
        and the thresholds and quantiles are mappings of the same severity names, the thresholds finite numbers
        ordered like their quantiles and, as every score is a norm, none below zero (a tampered -1e9 would alert on
        every event).
        """
        s = np.asarray(scores, dtype=np.float64)
        if s.ndim != 1 or len(s) == 0:
            raise ValueError(f"calibration scores of shape {s.shape}: expected a non-empty 1-D array")
        if not np.isfinite(s).all():
            raise ValueError("calibration scores must be finite")
        if (np.diff(s) < 0).any():
            raise ValueError("calibration scores must be sorted ascending")
        n = meta["calibration"].get("n") if isinstance(meta.get("calibration"), dict) else None
        if n is not None and n != len(s):
            raise ValueError(f"{len(s)} calibration scores, the metadata says {n}")
        if not isinstance(meta["thresholds"], dict) or not isinstance(meta["quantiles"], dict):
            raise ValueError("thresholds and quantiles must be mappings of severity names")
        thresholds = {str(k): float(v) for k, v in meta["thresholds"].items()}
        if not all(np.isfinite(t) and t >= 0 for t in thresholds.values()):
            raise ValueError(f"thresholds {thresholds} must be finite numbers >= 0 (a score is a norm)")
        quantiles = {str(k): float(v) for k, v in meta["quantiles"].items()}
        if sorted(thresholds) != sorted(quantiles):
            raise ValueError(f"thresholds of {sorted(thresholds)} for the severities {sorted(quantiles)}: the names must match")
        # A higher quantile has a threshold at least as high: severity_of ranks the names by their thresholds.
        if any((quantiles[a] < quantiles[b] and thresholds[a] > thresholds[b])
               or (quantiles[a] == quantiles[b] and thresholds[a] != thresholds[b]) for a in quantiles for b in quantiles):
            raise ValueError(f"thresholds {thresholds} are not ordered like their quantiles {quantiles}")
        return cls(s, quantiles, thresholds)

    def threshold_for_quantile(self, q: float) -> float:
        return float(np.quantile(self.scores, q))

    def quantile_of(self, threshold: float) -> float:
        """Fraction of calibration scores below ``threshold`` (the rate it would not alert)."""
        return float(np.searchsorted(self.scores, threshold, side="left") / len(self.scores))

    def p_values(self, scores: np.ndarray) -> np.ndarray:
        """(1 + #calibration scores >= s) / (n + 1)."""
        n = len(self.scores)
        at_or_above = n - np.searchsorted(self.scores, np.asarray(scores, dtype=np.float64), side="left")
        return (1.0 + at_or_above) / (n + 1.0)

    def severity(self, scores: np.ndarray, thresholds: dict[str, float] | None = None) -> np.ndarray:
        """Name of the highest threshold each score reaches ('' below all)."""
        return severity_of(scores, thresholds or self.thresholds)


def severity_of(scores: np.ndarray, thresholds: dict[str, float]) -> np.ndarray:
    """Vectorised: the highest named threshold each score reaches, '' when none.

    Of two equal thresholds the one later in ``thresholds`` wins: give them mildest first, as ``Calibration`` keeps
    them (and ``effective_thresholds`` keeps the artifact's order).

    >>> severity_of(np.array([0.5, 2.0, 3.0]), {"warning": 2.0, "critical": 2.0}).tolist()
    ['', 'critical', 'critical']
    """
    scores = np.asarray(scores, dtype=np.float64)
    out = np.full(scores.shape, "", dtype=object)
    for name, t in sorted(thresholds.items(), key=lambda kv: kv[1]):
        out[scores >= t] = name
    return out
