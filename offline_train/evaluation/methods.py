"""The detectors of the benchmark, fitted on one split: K-DSM variants and PyOD baselines.

Deep methods all go through ``offline_train.detector.KDSM`` (no second
training path). ``default`` is exactly what ``kdsm train`` ships
(``KDSM.from_settings`` of the settings, refinement included); the published
methods keep their names (``offline_train.published``, what ``kdsm train
--method NAME`` trains): ``kdsm`` = kurtosis sigmas, ``dsm`` = one global
sigma, ``-ema`` adds the EMA-teacher filter, all without the refinement of
``offline_train.refine`` and scored by the network alone (no blend with the
isolation forest, ``offline_train.blend``). Calibration is in-sample (holdout 0):
every training row trains, and the metrics are threshold-free anyway.

Baselines are PyOD with its defaults except the protocol's choices: KNN with
k=5 and the largest-distance score, IForest, LOF with 20 neighbours, ECOD.
They see the same standardised rows the deep methods see. The wider set
(``EXTRA_BASELINES``: the rest of ADBench's classical detectors, PCA, OCSVM,
CBLOF, HBOS, COPOD, LODA and MCD, plus INNE, a one-component GMM and DIF, the
deep isolation forest of Xu et al. (2023), all at PyOD's defaults, seeded where
they draw) runs only when named in ``--methods``.

>>> import numpy as np
>>> from offline_train.config import TrainSettings
>>> from offline_train.scaler import Scaler
>>> X = np.random.default_rng(0).normal(size=(200, 3))
>>> r = fit_score("knn", X[:100], X[100:], Scaler.fit(X[:100]), TrainSettings(), seed=0)
>>> r.scores.shape, r.fit_seconds >= 0
((100,), True)
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from ..config import CalibrationConfig
from ..detector import KDSM
from ..published import METHOD_NAMES, published_sections
from ..scaler import Scaler

EXTRA_BASELINES = ("pca", "ocsvm", "cblof", "hbos", "copod", "loda", "mcd", "inne", "gmm", "dif")
BASELINES = ("knn", "iforest", "lof", "ecod", *EXTRA_BASELINES)
METHODS = METHOD_NAMES + BASELINES  # ``default`` and the published methods first


@dataclass
class FitResult:
    scores: np.ndarray
    fit_seconds: float
    score_seconds: float
    fit_cpu_seconds: float
    info: dict = field(default_factory=dict)


def _baseline(name: str, seed: int, X: np.ndarray):
    # Imported here: PyOD is an optional (bench) dependency of the package.
    import importlib

    module, cls, kwargs = {
        "knn": ("knn", "KNN", {"n_neighbors": 5, "method": "largest"}), "iforest": ("iforest", "IForest", {"random_state": seed}),
        "lof": ("lof", "LOF", {"n_neighbors": 20}), "ecod": ("ecod", "ECOD", {}),
        "pca": ("pca", "PCA", {"random_state": seed}), "ocsvm": ("ocsvm", "OCSVM", {}),
        "cblof": ("cblof", "CBLOF", {"random_state": seed}), "hbos": ("hbos", "HBOS", {}), "copod": ("copod", "COPOD", {}),
        "loda": ("loda", "LODA", {"random_state": seed}), "mcd": ("mcd", "MCD", {"random_state": seed}),
        "inne": ("inne", "INNE", {"random_state": seed}), "gmm": ("gmm", "GMM", {"random_state": seed}),
        "dif": ("dif", "DIF", {"random_state": seed}),
    }[name]
    if name == "pca":
        kwargs = {**kwargs, "n_components": _rank(X)}
    if name == "dif":
        # What scikit-learn's forests fall back to on fewer rows than 256 anyway, without 50 warnings saying so.
        kwargs = {**kwargs, "max_samples": min(256, len(X))}
    return getattr(importlib.import_module(f"pyod.models.{module}"), cls)(**kwargs)


def _rank(X: np.ndarray) -> int:
    # PyOD's PCA weights each component by 1 / its explained variance: a component of zero variance
    # (a bootstrap sample with collinear columns) makes every score infinite, so keep only the rank's.
    return max(1, int(np.linalg.matrix_rank(X - X.mean(axis=0))))


def bench_calibration() -> CalibrationConfig:
    """What every deep method calibrates with, whatever the config says: in-sample (holdout 0: all training rows
    train); the metrics are threshold-free."""
    return CalibrationConfig(holdout=0.0)


def make_kdsm(name: str, settings, seed: int) -> KDSM:
    """The ``KDSM`` estimator for deep method ``name`` under ``settings`` (a ``TrainSettings``), calibrated as
    ``bench_calibration`` says."""
    det = KDSM.from_settings(settings).set_params(
        train=settings.train.model_copy(update={"seed": seed}), calibration=bench_calibration())
    return det if name == "default" else det.set_params(**published_sections(name, settings))


def fit_score(name: str, X_train: np.ndarray, X_test: np.ndarray, scaler: Scaler, settings, seed: int) -> FitResult:
    """Fit method ``name`` on ``X_train`` (raw units) and score ``X_test``; higher = more anomalous."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; choose from {', '.join(METHODS)}")
    t0, c0 = time.perf_counter(), time.process_time()
    info: dict = {}
    if name in METHOD_NAMES:
        det = make_kdsm(name, settings, seed).fit(X_train, scaler=scaler)
        fit_s, fit_cpu = time.perf_counter() - t0, time.process_time() - c0
        t1 = time.perf_counter()
        scores = det.decision_function(X_test)
        ts = det.train_summary_
        info = {"steps": ts.steps, "epochs": round(ts.epochs, 2), "precision": ts.precision,
                "filtered_fraction": ts.filtered_fraction,
                "kept_fraction": ts.refine["keep"] if ts.refine else None}
    else:
        Z = scaler.transform(X_train)
        with warnings.catch_warnings():
            # PyOD's DIF asks its DataLoader for pinned memory even on CPU, where torch warns once per batch.
            warnings.filterwarnings("ignore", message=".*pin_memory.*")
            model = _baseline(name, seed, Z).fit(Z)
            fit_s, fit_cpu = time.perf_counter() - t0, time.process_time() - c0
            t1 = time.perf_counter()
            scores = model.decision_function(scaler.transform(X_test))
    return FitResult(np.asarray(scores, dtype=np.float64), fit_s, time.perf_counter() - t1, fit_cpu, info)
