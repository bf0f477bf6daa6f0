"""``KDSM``: the detector, in the scikit-learn / PyOD estimator style.

``fit`` returns self; learned state ends in ``_``; a higher
``decision_function`` means more anomalous. The same object is what the
streamer loads to score events, so offline and online scoring share one path.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> X = rng.normal(size=(400, 3))
>>> det = KDSM(model=ModelConfig(width=32, depth=1), train=OptimConfig(steps=30, precision="fp32")).fit(X)
>>> det.sigmas_.shape, sorted(det.thresholds_)
((3,), ['critical', 'warning'])
>>> s = det.decision_function(np.array([[0., 0., 0.], [8., -8., 8.]]))
>>> bool(s[1] > s[0])
True
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from pydantic import ValidationError
from scipy import sparse
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from .artifact import ArtifactError, check_shapes, read_artifact, schema_hash, write_artifact
from .blend import PART_NAMES, Blend
from .calibrate import Calibration, severity_of
from .config import (
    CalibrationConfig,
    ConfigError,
    DataConfig,
    EMAConfig,
    ModelConfig,
    OptimConfig,
    RefineConfig,
    ScoreConfig,
    SigmaConfig,
    TrainSettings,
)
from .data import DataError, ParquetSource, bounded_sample, named_twice
from .engine import LocalEngine
from .features import FittedFeatures
from .isolation import IsolationScorer, fit_forest
from .model import ScoreNet, resolve_device
from .neighbours import NeighbourScorer, reference_rows
from .refine import Refinement, lowest
from .scaler import ColumnMoments, Scaler
from .sigmas import KurtosisSigmas
from .train import TrainSummary, train_score_net

# Standardised values are clipped to +-Z_BOUND before the fp32 forward pass: a finite value far out
# (1e308, or every feature -1e300) would overflow float32 and score NaN. A row this far from the training
# data (a million standard deviations) is an anomaly beyond doubt; the clip keeps its score finite and far
# above any calibrated threshold (the score grows about linearly with the distance up to the bound).
Z_BOUND = 1e6


@dataclass
class Explanation:
    """Per-row top features, in original units. Arrays have shape (n, k)."""

    scores: np.ndarray
    features: np.ndarray  # feature indices, most contributing first
    contribution: np.ndarray  # share of the squared score norm, in [0, 1]
    direction: np.ndarray  # sign of f(x): +1 = the feature should rise to look normal
    value: np.ndarray
    expected: np.ndarray  # Tweedie: x + sigma * f(x), mapped back to original units
    items: list | None = None  # with a feature spec: per row, the top features in the user's terms (dicts)


@dataclass
class ScoreParts:
    """One scoring pass over rows: the score and what it is made of."""

    scores: np.ndarray  # the anomaly score (the blend, or the network's score alone)
    outputs: np.ndarray  # f(x), the network's raw outputs (n, d): the explanations' source
    network: np.ndarray  # ||f(x)||, the network's score
    forest: np.ndarray | None  # the isolation forest's score (score.forest_metric), where the blend is on
    knn: np.ndarray | None = None  # the distance to the k-th nearest kept training row, where score.knn is on

    def by_name(self) -> dict[str, np.ndarray] | None:
        """The blended score's parts by their names in alerts (``blend.PART_NAMES``), in ``Blend.z_scores`` order;
        None for the network's score alone."""
        if self.forest is None:
            return None
        parts = dict(zip(PART_NAMES, (self.network, self.forest, self.knn), strict=True))
        return {name: values for name, values in parts.items() if values is not None}


def _or_default(section, cls):
    return section if section is not None else cls()


def _every_tenth(steps: int, phase):
    """A loss-curve hook that tells ``phase`` about training once per tenth of the steps."""
    mark = [0]

    def on_log(step: int, loss: float) -> None:
        if step * 10 >= (mark[0] + 1) * steps:
            mark[0] = step * 10 // steps
            phase(f"training: step {step}/{steps} ({mark[0] * 10}%), loss {loss:.3f}")

    return on_log


def _rows(X) -> np.ndarray:
    """``X`` as float64, refusing what scikit-learn's ``check_array`` refuses in its words (its estimator checks match
    them): sparse input (a scaler and a network read every value) and complex values (fitted on the real part else)."""
    if sparse.issparse(X):
        raise TypeError("KDSM does not accept sparse input: pass dense rows (X.toarray())")
    X = np.asarray(X)
    if np.iscomplexobj(X):
        raise ValueError("Complex data not supported")
    return np.asarray(X, dtype=np.float64)


def _no_rows(offset: int, n: int) -> np.ndarray:
    """A hold-out mask that holds out nothing (``fit_source`` on too few rows for a hold-out)."""
    return np.zeros(n, dtype=bool)


def _check_network(state: dict[str, torch.Tensor], d: int, cfg: ModelConfig) -> None:
    """An artifact's network size (``model_config``) against its weights (``net.*``, prefix removed), before a network
    of that size is built: the stem's weight must be (width, d), the head's (d, width), and the residual blocks present
    exactly 0..depth-1. The metadata is a checksummed JSON anyone can re-sign, and ``ScoreNet`` allocates its layers
    first; ``load_state_dict`` compared them only after. RuntimeError (as it raises) names the field."""
    width, depth = cfg.width, cfg.depth
    if width is None or depth is None:
        raise ValueError("model_config.width and model_config.depth must be set in an artifact")
    check_shapes(state, {"stem.weight": (width, d), "head.2.weight": (d, width)}, "net",
                 f"model_config.width = {width} and model_config.d = {d}")
    blocks = {k.split(".")[1] for k in state if k.startswith("blocks.")}
    if len(blocks) != depth or blocks != {str(i) for i in range(depth)}:  # the count first: depth may be huge
        raise RuntimeError(f"model_config.depth = {depth}, but the weights hold {len(blocks)} residual block(s) "
                           f"(net.blocks.*)")


_DATA_PARAMS = {"scale_discrete": "True or False",
                "max_train_rows": "None (every row) or a whole number of at least 2"}


def _check_data_params(scale_discrete, max_train_rows) -> None:
    """The estimator's own parameters, checked as ``DataConfig`` checks ``data.scale_discrete`` and
    ``data.max_train_rows`` (strictly: a truthy string is no boolean, 2.5 no row count), with None allowed for every
    row. ValueError names the parameter, as scikit-learn's estimators refuse a bad parameter at ``fit``.

    >>> _check_data_params(False, None)
    >>> _check_data_params(np.bool_(True), np.int64(500))
    >>> _check_data_params("no", 200_000)
    Traceback (most recent call last):
    ...
    ValueError: KDSM parameter scale_discrete must be True or False, got 'no'
    >>> _check_data_params(False, -5)
    Traceback (most recent call last):
    ...
    ValueError: KDSM parameter max_train_rows must be None (every row) or a whole number of at least 2, got -5
    """
    given = {"scale_discrete": scale_discrete, "max_train_rows": max_train_rows}
    values = {k: v.item() if isinstance(v, np.generic) else v for k, v in given.items()
              if not (k == "max_train_rows" and v is None)}
    try:
        DataConfig.model_validate(values, strict=True)
    except ValidationError as e:
        names = list(dict.fromkeys(err["loc"][0] for err in e.errors()))
        raise ValueError("; ".join(f"KDSM parameter {name} must be {_DATA_PARAMS[name]}, got {given[name]!r}"
                                   for name in names)) from None


def _estimator_params(saved: dict) -> dict:
    """``scale_discrete`` and ``max_train_rows`` as saved (checked as ``DataConfig`` checks them); an artifact from
    before they were saved loads with the defaults it was then given. ``max_train_rows`` None (every row) loads as
    None: ``KDSM(max_train_rows=None)`` fits and saves."""
    saved = {k: v for k, v in saved.items() if k in ("scale_discrete", "max_train_rows")}
    every_row = "max_train_rows" in saved and saved["max_train_rows"] is None
    if every_row:
        del saved["max_train_rows"]
    out = DataConfig(**saved).model_dump(include={"scale_discrete", "max_train_rows"})
    return {**out, "max_train_rows": None} if every_row else out


class KDSM(BaseEstimator):
    """Kurtosis-guided denoising score matching anomaly detector.

    Parameters are the config sections of ``offline_train.config``; see
    DESIGN 3 for the method. ``None`` means the section's defaults, which are
    what ``kdsm train`` ships (``TrainSettings()``). ``ema.enabled`` turns the
    EMA-teacher filter (K-DSM-EMA) on or off; ``sigma.mode="global"`` gives
    plain single-scale DSM.

    The scikit-learn / PyOD estimator contract: ``__init__`` only stores its
    arguments, defaults are resolved in ``fit`` (``get_params``/``set_params``
    and ``sklearn.base.clone`` work), learned state ends in ``_``, and after
    ``fit`` there are ``decision_scores_`` (the training rows' scores) and
    ``labels_`` (0/1 at the warning threshold), as in PyOD.

    ``max_train_rows``: the network trains (and calibrates) on a seeded uniform sample of at most this many rows
    (``data.max_train_rows``); None trains on every row, and such a model saves and loads as None. It and
    ``scale_discrete`` are checked as ``DataConfig`` checks them when ``fit`` or ``fit_source`` starts: a count below
    2 or not whole, or a ``scale_discrete`` other than True or False, is a ValueError naming the parameter.
    """

    def __init__(self, sigma: SigmaConfig | None = None, model: ModelConfig | None = None,
                 ema: EMAConfig | None = None, train: OptimConfig | None = None,
                 calibration: CalibrationConfig | None = None, scale_discrete: bool = False,
                 max_train_rows: int = 200_000, refine: RefineConfig | None = None,
                 score: ScoreConfig | None = None):
        self.sigma = sigma
        self.model = model
        self.ema = ema
        self.refine = refine
        self.score = score
        self.train = train
        self.calibration = calibration
        self.scale_discrete = scale_discrete
        self.max_train_rows = max_train_rows

    @classmethod
    def from_settings(cls, s: TrainSettings) -> KDSM:
        return cls(s.sigma, s.model, s.ema, s.train, s.calibration, s.data.scale_discrete, s.data.max_train_rows,
                   s.refine, s.score)

    # The resolved config sections: the parameter, or the default ``kdsm train`` uses.
    sigma_config = property(lambda self: _or_default(self.sigma, SigmaConfig))
    model_config = property(lambda self: _or_default(self.model, ModelConfig))
    ema_config = property(lambda self: _or_default(self.ema, EMAConfig))
    refine_config = property(lambda self: _or_default(self.refine, RefineConfig))
    score_config = property(lambda self: _or_default(self.score, ScoreConfig))
    train_config = property(lambda self: _or_default(self.train, OptimConfig))
    calibration_config = property(lambda self: _or_default(self.calibration, CalibrationConfig))

    # ----------------------------------------------------------------- fitting
    def fit(self, X: np.ndarray, y=None, feature_names: list[str] | None = None, progress: bool = False,
            scaler: Scaler | None = None, features: FittedFeatures | None = None) -> KDSM:
        """Fit on raw rows ``X`` (n, d). ``y`` is ignored (unsupervised, as in PyOD).

        ``scaler``: an already-fitted ``Scaler`` to use instead of fitting one
        on ``X`` (the unsupervised ADBench protocol fits it on all rows).
        ``features``: the fitted feature spec that encoded ``X`` (its columns name
        the features); the model keeps it, so it scores and explains raw records.
        The scaler and sigmas see every row; the network trains (and calibrates) on a seeded
        sample of at most ``max_train_rows`` of them, as ``fit_source`` does.
        """
        _check_data_params(self.scale_discrete, self.max_train_rows)  # before anything learned is forgotten
        self._reset()
        self.features_ = features
        if features is not None:
            feature_names = features.columns
        X = _rows(X)
        if X.ndim != 2:
            raise ValueError(f"X must be a 2-D array of rows, got shape {X.shape}")
        if len(X) < 2:  # scikit-learn's wording
            raise ValueError(f"Found array with {len(X)} sample(s) (shape={X.shape}) while a minimum of 2 is required.")
        if X.shape[1] < 1:  # before any part is built (scikit-learn's wording, which its estimator checks expect)
            raise ValueError(f"Found array with 0 feature(s) (shape={X.shape}) while a minimum of 1 is required.")
        if not np.isfinite(X).all():
            raise ValueError("X contains NaN or infinite values")
        names = list(feature_names) if feature_names is not None else [f"f{j}" for j in range(X.shape[1])]
        if len(names) != X.shape[1]:  # else a torch shape error deep in training
            raise ValueError(f"{len(names)} feature name(s) for the {X.shape[1]} column(s) of X")
        twice = named_twice(names)
        if twice:  # else the model saves, and its load refuses it (explanations name features)
            raise ValueError(f"feature(s) named twice: {', '.join(map(str, twice))}")
        train_X, cal_X = self._holdout_split(X)
        scaler = scaler or Scaler.fit(train_X, self.scale_discrete, self._category_columns())
        sig = KurtosisSigmas.from_config(self.sigma_config).fit(train_X, scaler)
        # As fit_source: the statistics see every row, the network a seeded sample of at most max_train_rows
        # (fewer rows are kept whole, as they were).
        train_X, cal_X = (bounded_sample([(A, None)], self.max_train_rows, self.train_config.seed)[0] for A in (train_X, cal_X))
        self._fit_network(train_X, cal_X, scaler, sig, names, progress)
        self._set_training_scores(X)
        return self

    def fit_source(self, source: ParquetSource, progress: bool = False, on_phase=None, engine=None,
                   features: FittedFeatures | None = None) -> KDSM:
        """Fit from Parquet: scaler and sigmas stream over record batches; the network trains on a sample.

        ``features``: for a source of columns a fitted feature spec already encoded (the archive a retraining reads),
        that spec; the model keeps it as ``fit``'s ``features`` does, and, like there, the scaler sets its category
        columns apart from the start (an unseen category stands far off). Default: the source's own encoder, if any.

        The calibration holdout is drawn before any statistic, so its rows
        never shape the scaler, the sigmas or the network. Where it would leave
        fewer than 2 rows to train on (a file of 2 or 3 rows), nothing is held
        out, as ``fit`` does: the network trains on every usable row and
        calibrates on them (``calibration_source_`` "train"). ``engine``
        (``offline_train.engine``; default: this process) runs the statistics
        passes; the sample the network trains on is drawn here. ``on_phase(text)``,
        if given, hears each phase (reading, sigma passes, sampling, training
        with a line every 10% of the steps, calibration): the job's progress
        lines where no progress bar can show (not a TTY).
        """
        phase = on_phase or (lambda text: None)
        _check_data_params(self.scale_discrete, self.max_train_rows)  # before anything learned is forgotten
        self._reset()
        if features is not None and list(features.columns) != list(source.features):
            raise ValueError(f"the feature spec encodes {len(features.columns)} column(s) "
                             f"({', '.join(features.columns[:5])}...); the source reads {len(source.features)}: "
                             f"not the columns it made")
        self.features_ = features if features is not None else source.encoder
        engine = engine or LocalEngine()
        d = len(source.features)
        holdout = self._holdout_mask_fn()

        def training_rows(offset: int, n: int) -> np.ndarray:
            return ~holdout(offset, n)

        def reduce(acc):
            return engine.reduce(source, acc, training_rows)

        where = "" if engine.name == "local" else f" on the {engine.name} engine"
        phase(f"reading: pass 1 of 5 (column moments){where}")
        moments = reduce(ColumnMoments.empty(d))
        if moments.n < 2 and source.rows_read - source.rows_skipped >= 2:
            # As fit does (_holdout_split): calibration's hold-out would leave fewer than 2 rows to train on, so
            # nothing is held out; the network trains on every usable row and calibrates on them
            # (calibration_source_ "train").
            phase("too few rows for a calibration hold-out: training and calibrating on every usable row")
            holdout = _no_rows
            moments = reduce(ColumnMoments.empty(d))
        if moments.n < 2:
            held_out = source.rows_read - source.rows_skipped - moments.n  # calibration's share (calibration.holdout)
            raise DataError(f"too few usable rows to train in {source.path}: {moments.n} of {source.rows_read} read "
                            f"({source.rows_skipped} with missing or non-finite features, {held_out} held out for "
                            f"calibration); at least 2 are needed")
        scaler = Scaler.from_moments(moments, self.scale_discrete, self._category_columns())
        phase(f"sigma passes 2-4 of 5 over {moments.n} rows (range, cut ranks, histogram){where}")
        sig = KurtosisSigmas.from_config(self.sigma_config).fit_with(reduce, scaler)

        phase("sampling: pass 5 of 5 (" + ("every training row" if self.max_train_rows is None
                                              else f"at most {self.max_train_rows} training rows") + ")")
        train_X, _ = bounded_sample(source.batches(keep_rows=training_rows), self.max_train_rows, self.train_config.seed)
        cal_X, _ = bounded_sample(source.batches(keep_rows=holdout), self.max_train_rows, self.train_config.seed)
        cal_X = cal_X if cal_X.size else train_X[:0]
        self.data_summary_ = {"rows_read": source.rows_read, "rows_skipped": source.rows_skipped,
                              "train_rows": int(len(train_X)), "calibration_rows": int(len(cal_X))}
        self._fit_network(train_X, cal_X, scaler, sig, list(source.features), progress, phase)
        self._set_training_scores(train_X)  # the in-memory training sample, not every row of the source
        return self

    def _reset(self) -> None:
        """Forget what an earlier ``fit``, ``fit_source`` or ``load`` learned (the attributes ending in ``_``):
        ``data_summary_`` (``fit_source`` only) and ``metadata_`` (``load`` only) would otherwise outlive a refit."""
        for name in [k for k in vars(self) if k.endswith("_") and not k.startswith("_")]:
            delattr(self, name)

    def _category_columns(self) -> np.ndarray | None:
        """The feature spec's category columns, for the scaler (an unseen category stands far off), or None."""
        features = getattr(self, "features_", None)
        return features.category_columns if features is not None else None

    def _set_training_scores(self, X: np.ndarray) -> None:
        """PyOD's ``decision_scores_`` and ``labels_`` (1 = at or above the warning threshold)."""
        self.decision_scores_ = self.decision_function(X)
        self.labels_ = (self.decision_scores_ >= self.threshold_).astype(np.int64)

    def _holdout_mask_fn(self):
        """Row i (in stored order) is held out iff a seeded hash of i falls under ``holdout``.

        A pure function of the row index, so every streaming pass agrees on it, and so does
        every worker of an engine, which knows where its partition starts. The index counts
        every stored row, skipped ones (a missing feature) included.
        """
        frac, seed = self.calibration_config.holdout, self.train_config.seed

        def mask(offset: int, n: int) -> np.ndarray:
            idx = np.arange(offset, offset + n, dtype=np.uint64)
            h = (idx * np.uint64(0x9E3779B97F4A7C15) + np.uint64(seed * 0xBF58476D1CE4E5B9 % (1 << 64))) & np.uint64((1 << 64) - 1)
            h ^= h >> np.uint64(31)
            return (h % np.uint64(1_000_000)).astype(np.float64) / 1e6 < frac

        return mask

    def _holdout_split(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mask = self._holdout_mask_fn()(0, len(X))
        if mask.sum() < 1 or (~mask).sum() < 2:
            return X, X[:0]
        return X[~mask], X[mask]

    def _fit_network(self, train_X, cal_X, scaler: Scaler, sig: KurtosisSigmas, names: list[str], progress: bool,
                     phase=lambda text: None) -> KDSM:
        t, ema = self.train_config, self.ema_config
        if t.threads:
            torch.set_num_threads(t.threads)
        self.device_ = resolve_device(t.device)
        self.feature_names_ = names
        self.n_features_in_ = len(names)
        self.scaler_, self.sigmas_, self.kappas_ = scaler, sig.sigmas_, sig.kappas_
        torch.manual_seed(t.seed)
        # The profile sizes the network unless the model config sets width/depth itself.
        self.model_ = t.model_for(self.model_config)
        self.net_ = ScoreNet.from_config(len(names), self.model_)
        Z = scaler.transform(train_X)
        steps = t.budget(len(Z))
        rows, refine = None, None
        phase(f"training: {steps} steps on {len(Z)} rows")
        if self.refine_config.enabled:
            refine = Refinement(self.refine_config, Z, steps, t.seed, self.device_)
            rows = refine.start_rows()
        self.train_summary_: TrainSummary = train_score_net(
            Z, self.sigmas_, self.net_, steps=steps, batch_size=t.batch_size, copies=t.noise_copies, lr=t.lr,
            weight_decay=t.weight_decay, ema=ema.enabled, ema_decay=ema.decay,
            ema_percentile=ema.percentile, ema_buffers=ema.average_buffers, precision=t.precision,
            device=self.device_, seed=t.seed, progress=progress, rows=rows,
            reselect=refine, reselect_at=refine.at if refine else (),
            on_log=None if progress else _every_tenth(steps, phase))
        if refine is not None:
            self.train_summary_.refine = refine.summary()
        if not all(bool(torch.isfinite(w).all()) for w in self.net_.parameters()):
            # Diverged: raised before anything is saved, so a model already at the output stays.
            raise ConfigError(f"training diverged: the network's weights are not finite after {steps} steps "
                              f"(train.lr {t.lr:g}, train.weight_decay {t.weight_decay:g}); lower train.lr")
        self.net_.eval()
        self.forest_, self.neighbours_, self.blend_ = None, None, None
        if self.score_config.isolation_forest:
            # The warm start's forest where there is one: fitted on these rows with this seed either way.
            forest = refine.warm_.forest_ if refine is not None else fit_forest(Z, t.seed)
            self.forest_ = IsolationScorer.from_forest(forest, Z, self.score_config.forest_metric).to(self.device_)
            parts = self.score_parts(train_X)
            knn = None
            if self.score_config.knn:
                knn = self._fit_neighbours(train_X, parts.network, refine.keep_ if refine is not None else 1.0,
                                           refine.strata_ if refine is not None else None)
            self.blend_ = Blend.fit(parts.network, parts.forest, knn)
        phase("calibrating: thresholds from held-out scores")
        # Held-out scores when there are any; otherwise in-sample (said so in the metadata).
        self.calibration_source_ = "holdout" if len(cal_X) else "train"
        cal_scores = self.decision_function(cal_X if len(cal_X) else train_X)
        if not np.isfinite(cal_scores).all():
            raise ConfigError(f"training diverged: {int((~np.isfinite(cal_scores)).sum())} calibration score(s) are not "
                              f"finite (train.lr {t.lr:g}); lower train.lr")
        self.calibration_ = Calibration.fit(cal_scores, self.calibration_config.severities)
        self.version_ = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]
        return self

    def _fit_neighbours(self, train_X: np.ndarray, network_scores: np.ndarray, keep: float,
                        strata: np.ndarray | None = None) -> np.ndarray:
        """The k-NN part's reference: a seeded sample of the ``keep`` share of training rows the trained network
        finds most normal (what the refinement keeps, per stratum if it has them). Returns the training rows'
        distances for the blend's moments."""
        core = lowest(network_scores, keep, strata)
        ref = reference_rows(core, self.score_config.knn_rows, self.train_config.seed)
        Z = self.standardise(train_X).astype(np.float32)  # what score_parts feeds the part
        self.neighbours_ = NeighbourScorer.from_rows(Z[ref], self.score_config.knn_k).to(self.device_)
        return self.neighbours_.training_distances(torch.from_numpy(Z).to(self.device_), ref).cpu().numpy()

    # ----------------------------------------------------------------- scoring
    @property
    def thresholds_(self) -> dict[str, float]:
        check_is_fitted(self, "calibration_")
        return self.calibration_.thresholds

    @property
    def threshold_(self) -> float:
        """The lowest severity's threshold (``predict`` uses it)."""
        return min(self.thresholds_.values())

    @property
    def schema_hash_(self) -> str:
        """The input contract's hash: the feature spec's where there is one, else the ordered feature names."""
        check_is_fitted(self, "feature_names_")
        spec = getattr(self, "features_", None)
        return spec.spec_hash() if spec is not None else schema_hash(self.feature_names_)

    @torch.no_grad()
    def score_parts(self, X: np.ndarray, chunk: int = 65536) -> ScoreParts:
        """Scores of raw rows ``X`` with their parts, in eval mode (batch-invariant): one pass of each part."""
        check_is_fitted(self, "net_")  # scikit-learn's NotFittedError before fit (fit itself scores once net_ is set)
        X = _rows(X)
        if X.ndim != 2:
            raise ValueError(f"expected a 2-D array of rows, got shape {X.shape}. Reshape your data "
                             "with X.reshape(1, -1) for a single row")
        if X.shape[1] != self.n_features_in_:  # scikit-learn's wording
            raise ValueError(f"X has {X.shape[1]} features, but {type(self).__name__} is expecting "
                             f"{self.n_features_in_} features as input.")
        if not np.isfinite(X).all():  # the streamer dead-letters such rows before they get here
            raise ValueError("X contains NaN or infinite values")
        Z = self.standardise(X).astype(np.float32)
        forest, neighbours = getattr(self, "forest_", None), getattr(self, "neighbours_", None)
        outs, isolation, distances = [], [], []
        cuda = self.device_.type == "cuda"
        for i in range(0, len(Z), chunk):
            t = torch.from_numpy(Z[i:i + chunk])
            if cuda:
                t = t.pin_memory().to(self.device_, non_blocking=True)
            outs.append(self.net_(t).float().cpu().numpy())
            if forest is not None:
                isolation.append(forest(t).cpu().numpy())
            if neighbours is not None:
                distances.append(neighbours(t).cpu().numpy())
        F = np.concatenate(outs) if outs else np.zeros((0, self.n_features_in_), np.float32)
        network = np.linalg.norm(F.astype(np.float64), axis=1)
        if forest is None:
            return ScoreParts(network, F, network, None)
        s = np.concatenate(isolation) if isolation else np.zeros(0)
        knn = None
        if neighbours is not None:
            knn = np.concatenate(distances) if distances else np.zeros(0)
        blend = getattr(self, "blend_", None)
        if blend is None:  # during fit, before the blend's moments exist
            return ScoreParts(network, F, network, s, knn)
        return ScoreParts(blend(network, s, knn), F, network, s, knn)

    def score_outputs(self, X: np.ndarray, chunk: int = 65536) -> tuple[np.ndarray, np.ndarray]:
        """Scores and the network's raw outputs f(x) for raw rows ``X`` (``score_parts``, without the parts)."""
        p = self.score_parts(X, chunk)
        return p.scores, p.outputs

    def standardise(self, X: np.ndarray) -> np.ndarray:
        """Scaled rows, clipped to +-``Z_BOUND`` (what the network sees; finite for every finite input)."""
        check_is_fitted(self, "scaler_")
        with np.errstate(over="ignore"):  # (1e308 - mean) / std may overflow to inf: the clip bounds it
            return np.clip(self.scaler_.transform(X), -Z_BOUND, Z_BOUND)

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        """Anomaly score: the blend of ``||f(x)||`` and the isolation forest's score (``offline_train.blend``),
        or ``||f(x)||`` alone with ``score.isolation_forest`` off. Higher = more anomalous."""
        return self.score_outputs(X)[0]

    def predict(self, X: np.ndarray, severity: str | None = None) -> np.ndarray:
        """1 where the score reaches the threshold of ``severity`` (default: the lowest), else 0."""
        t = self.thresholds_[severity] if severity else self.threshold_
        return (self.decision_function(X) >= t).astype(np.int64)

    def fit_predict(self, X: np.ndarray, y=None) -> np.ndarray:
        """``fit(X)`` then the 0/1 labels of the training rows (PyOD's convention: 1 = outlier)."""
        return self.fit(X).labels_

    def p_values(self, scores: np.ndarray) -> np.ndarray:
        check_is_fitted(self, "calibration_")
        return self.calibration_.p_values(scores)

    def severity(self, scores: np.ndarray, thresholds: dict[str, float] | None = None) -> np.ndarray:
        return severity_of(scores, thresholds or self.thresholds_)

    def explain(self, X: np.ndarray, top_k: int | None = None, outputs: np.ndarray | None = None,
                records: list[dict] | None = None) -> Explanation:
        """Top features per row: contribution = f_j^2 / ||f||^2; expected value by Tweedie's formula.

        Pass ``outputs`` (from ``score_outputs``) to skip the forward pass. With a
        feature spec, ``items`` also lists the top features in the user's terms
        (``FittedFeatures.explain``); ``records``, the raw events of the rows, let
        it quote their values (an unseen category by name).
        """
        check_is_fitted(self, "net_")
        X = _rows(X)
        F = self.score_outputs(X)[1] if outputs is None else outputs
        F = F.astype(np.float64)
        k = min(top_k or self.calibration_config.top_features, self.n_features_in_)
        sq = F**2
        total = sq.sum(axis=1, keepdims=True)
        share = np.divide(sq, total, out=np.zeros_like(sq), where=total > 0)
        top = np.argsort(-share, axis=1, kind="stable")[:, :k]
        rows = np.arange(len(X))[:, None]
        Z = self.standardise(X)
        expected = self.scaler_.inverse_transform(Z + self.sigmas_ * F)
        items = None
        spec = getattr(self, "features_", None)
        if spec is not None:
            # A category column that never left its training value (``name=<unseen>``) is never the expected
            # category: an unseen category stands sqrt(n) units off (``Scaler``), where one denoising step does not
            # reach back, so its own column would keep the largest expected value.
            never_left = spec.category_columns & self.scaler_.constant_
            items = spec.explain(X, share, expected, F, top_k or self.calibration_config.top_features, records,
                                 never_set=never_left)
        return Explanation(scores=np.sqrt(total[:, 0]), features=top, contribution=share[rows, top],
                           direction=np.sign(F[rows, top]), value=X[rows, top], expected=expected[rows, top],
                           items=items)

    # ----------------------------------------------------------------- persistence
    def save(self, path, extra: dict | None = None, also=None) -> Path:
        """Write the artifact directory (see ``offline_train.artifact``); ``also(directory)`` adds files (the report)
        before the new directory takes ``path``'s place."""
        check_is_fitted(self, "calibration_")
        tensors = {f"net.{k}": v for k, v in self.net_.state_dict().items()}
        tensors["calibration_scores"] = torch.as_tensor(self.calibration_.scores, dtype=torch.float64)
        forest = getattr(self, "forest_", None)
        if forest is not None:
            tensors.update({f"forest.{k}": v for k, v in forest.state_dict().items()})
        neighbours = getattr(self, "neighbours_", None)
        if neighbours is not None:
            tensors.update({f"knn.{k}": v for k, v in neighbours.state_dict().items()})
        meta = {
            "version": self.version_,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "features": self.feature_names_,
            "schema_hash": self.schema_hash_,
            "scaler": self.scaler_.to_dict(),
            "sigmas": self.sigmas_.tolist(),
            "kappas": self.kappas_.tolist(),
            "sigma_config": self.sigma_config.model_dump(),
            "model_config": {"d": self.n_features_in_, **self.model_.model_dump()},
            "ema_config": self.ema_config.model_dump(),
            "refine_config": self.refine_config.model_dump(),
            "score_config": self.score_config.model_dump(),
            **({"forest": forest.shape, "blend": self.blend_.to_dict()} if forest is not None else {}),
            **({"knn": neighbours.shape} if neighbours is not None else {}),
            "train_config": self.train_config.model_dump(),
            "thresholds": self.thresholds_,
            "quantiles": self.calibration_.quantiles,
            "calibration": {"source": self.calibration_source_, "n": int(len(self.calibration_.scores)),
                            "top_features": self.calibration_config.top_features,
                            "holdout": self.calibration_config.holdout},
            # The other parameters that shape training, so that clone(KDSM.load(p)).fit(X) trains the same model.
            "estimator": {"scale_discrete": bool(self.scale_discrete),
                          "max_train_rows": None if self.max_train_rows is None else int(self.max_train_rows)},
            "train_summary": self.train_summary_.to_dict(),
            "data_summary": getattr(self, "data_summary_", None),
            **({"feature_spec": self.features_.to_dict()} if getattr(self, "features_", None) is not None else {}),
            **(extra or {}),
        }
        return write_artifact(path, tensors, meta, also)

    @classmethod
    def load(cls, path, device: str = "auto") -> KDSM:
        """Load a verified artifact onto ``device`` (a GPU-trained artifact loads on CPU)."""
        tensors, meta = read_artifact(path)
        try:
            mc = dict(meta["model_config"])
            d = int(mc.pop("d"))
            det = cls(sigma=SigmaConfig(**meta["sigma_config"]), model=ModelConfig(**mc),
                      ema=EMAConfig(**meta["ema_config"]),
                      refine=RefineConfig(**meta.get("refine_config", {"enabled": False})),
                      score=ScoreConfig(**{"isolation_forest": False, "knn": False, "forest_metric": "depth", **meta.get("score_config", {})}), train=OptimConfig(**{**meta["train_config"], "device": device}),
                      calibration=CalibrationConfig.model_validate(
                          {"severities": meta["quantiles"], "top_features": meta["calibration"]["top_features"],
                           **({"holdout": meta["calibration"]["holdout"]} if "holdout" in meta["calibration"] else {})},
                          context={"artifact": True}),
                      **_estimator_params(meta.get("estimator", {})))
            det.feature_names_ = list(meta["features"])
            if len(set(det.feature_names_)) != len(det.feature_names_):
                raise ArtifactError(f"{path}: feature names must be unique")
            det.features_ = FittedFeatures.from_dict(meta["feature_spec"]) if meta.get("feature_spec") else None
            if det.features_ is not None and det.features_.columns != det.feature_names_:
                raise ArtifactError(f"{path}: the feature spec's columns differ from the feature list")
            det.n_features_in_ = d
            if d < 1 or len(det.feature_names_) != d:
                raise ArtifactError(f"{path}: feature count mismatch ({len(det.feature_names_)} names, d={d})")
            det.sigmas_ = np.asarray(meta["sigmas"], float)
            det.kappas_ = np.asarray(meta["kappas"], float)
            if det.sigmas_.shape != (d,) or det.kappas_.shape != (d,):
                raise ArtifactError(f"{path}: sigmas of shape {det.sigmas_.shape} and kappas of shape "
                                    f"{det.kappas_.shape} for d={d}")
            if not (np.isfinite(det.sigmas_) & (det.sigmas_ > 0)).all():
                raise ArtifactError(f"{path}: sigmas must be finite and above 0")
            if not np.isfinite(det.kappas_).all():
                raise ArtifactError(f"{path}: kappas must be finite")
            det.scaler_ = Scaler.from_dict(meta["scaler"], d)
            bad = [k for k, t in tensors.items()
                   if k.startswith("net.") and t.is_floating_point() and not bool(torch.isfinite(t).all())]
            if bad:
                raise ArtifactError(f"{path}: non-finite network weights in {', '.join(sorted(bad))}")
            det.model_ = det.model
            net_state = {k[4:]: v for k, v in tensors.items() if k.startswith("net.")}
            _check_network(net_state, d, det.model)  # before the network of that size is built
            det.net_ = ScoreNet.from_config(d, det.model)
            det.net_.load_state_dict(net_state, strict=True)
            det.device_ = resolve_device(device)
            det.net_.to(det.device_).eval()
            det.forest_, det.neighbours_, det.blend_ = None, None, None
            if det.score_config.isolation_forest:  # artifacts from before the blend have neither
                det.forest_ = IsolationScorer.from_state(
                    {k[7:]: v for k, v in tensors.items() if k.startswith("forest.")}, meta["forest"], d).to(det.device_)
                det.blend_ = Blend.from_dict(meta["blend"])
            if "knn" in meta:  # score.knn: artifacts from before the k-NN part have none
                det.neighbours_ = NeighbourScorer.from_state(
                    {k[4:]: v for k, v in tensors.items() if k.startswith("knn.")}, meta["knn"], d).to(det.device_)
            if (det.neighbours_ is not None) != (det.blend_ is not None and det.blend_.has_knn):
                raise ArtifactError(f"{path}: the k-NN part and the blend's moments do not fit together")
            det.calibration_ = Calibration.from_artifact(tensors["calibration_scores"].numpy(), meta)
            det.calibration_source_ = meta["calibration"]["source"]
            det.train_summary_ = TrainSummary(**{**meta["train_summary"], "loss_curve": [tuple(p) for p in meta["train_summary"]["loss_curve"]]})
            det.data_summary_ = meta.get("data_summary")
            det.version_ = meta["version"]
            det.metadata_ = meta
        except ArtifactError:
            raise
        except (KeyError, TypeError, ValueError, RuntimeError, AttributeError, OverflowError, IndexError) as e:
            # a field missing, of the wrong type (a list for a mapping), out of range (Infinity for a count) or shape
            raise ArtifactError(f"{path}: artifact metadata and weights do not fit together: {' '.join(str(e).split())}") from None
        return det
