"""Typed configuration of the offline job (pydantic-settings).

Every key comes, in rising priority, from: the defaults below, a YAML file,
environment variables ``KDSM_<SECTION>__<KEY>`` and explicit overrides (CLI
flags). Unknown keys are an error, so a typo never silently falls back to a
default.

>>> s = TrainSettings()
>>> (s.sigma.base, s.sigma.c, s.sigma.clip, s.train.profile)
(0.5, 0.33, 'code', 'fast')
>>> s.sigma.clip_range
(0.1, 3.0)
"""

from __future__ import annotations

import contextlib
import os
import typing
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)


class ConfigError(ValueError):
    """A config file or value that cannot be used; the message says which key and why."""


class Section(BaseModel):
    # No NaN or infinity in any number of the config: an infinite learning rate trained a NaN network that was saved
    # over a good model, and a NaN clip bound crashed the scaler.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class DataConfig(Section):
    """Which Parquet columns are features, ids, times and (optional) labels."""

    features: list[str] | None = Field(None, description="feature columns in order; None = inferred: every numeric, boolean and string column (struct fields flattened to dotted paths) except id/timestamp/label and identifier-like strings (kdsm features infer prints them)")
    id_column: str = Field("id", description="Parquet column holding the row id (kept out of the features)")
    timestamp_column: str = Field("ts", description="Parquet column holding the event time (kept out of the features)")
    label_column: str | None = Field("label", description="used only for the report's AUC-PR/AUC-ROC, never for training")
    batch_rows: int = Field(65536, gt=0, le=2**24, description="Parquet record-batch size while streaming (at most 2**24 = 16777216 rows: one batch is held in memory whole)")
    max_train_rows: int = Field(200_000, ge=2, description="cap on rows held in memory for SGD (uniform sample); at least 2")
    max_skipped_fraction: float = Field(0.25, ge=0, le=1, description="fail training when more than this fraction of the rows has a missing or non-finite feature (such rows are skipped)")
    scale_discrete: bool = Field(False, description="standardise {0,1}/{-1,0,1} columns too (reference code: no)")
    engine: Literal["local", "dask"] = Field("local", description="where the statistics passes (moments, sigmas) run: local = this process, streaming record batches; dask = one task per partition on a Dask cluster")
    scheduler: str | None = Field(None, description="engine dask: the scheduler's address (tcp://host:8786); null = start a local cluster of data.workers processes for the job")
    workers: int = Field(2, gt=0, le=256, description="engine dask without a scheduler: worker processes of the local cluster (at most 256; a larger cluster has its own scheduler)")


MAX_CATEGORIES = 100_000  # categories counted per feature while profiling (offline_train.features)
MAX_HASH_BUCKETS = 65_536  # one encoded column each


class FeatureSpec(Section):
    """One feature of a mixed event (``features:`` in the config; ``offline_train.features`` applies it).

    >>> FeatureSpec(name="amount", type="numeric", missing="impute", log1p=True).keys
    ['amount']
    >>> FeatureSpec(name="os", path="device.os", type="categorical").keys
    ['device', 'os']
    """

    name: str = Field(..., min_length=1, description="the feature's name in alerts and explanations")
    path: str | None = Field(None, description="dotted path into nested objects (device.os = field os of object device); null = the top-level field named like the feature")
    type: Literal["numeric", "categorical", "boolean"] = Field(..., description="numeric = a JSON number; categorical = a string (or integer code); boolean = true/false")
    missing: Literal["reject", "impute", "zero"] = Field("reject", description="absent or null: reject = dead letter missing_feature (training skips the row); impute = training median/mode plus a missing-indicator column; zero = 0 (categorical: no category)")
    log1p: bool = Field(False, description="numeric only: sign(x) * log(1 + |x|), after clipping")
    clip: tuple[float | None, float | None] | None = Field(None, description="numeric only: [low, high] bounds applied before log1p (null = open)")
    encoding: Literal["auto", "onehot", "frequency", "hash"] = Field("auto", description="categorical only: auto = onehot up to max_categories training categories, else frequency")
    max_categories: int = Field(20, ge=1, description=f"categorical: one-hot columns at most (at most {MAX_CATEGORIES}: the categories profiling counts); rarer training categories share the <unseen> column")
    hash_buckets: int = Field(32, ge=2, description=f"categorical, encoding hash: number of buckets, one column each (crc32 of the UTF-8 text; at most {MAX_HASH_BUCKETS})")

    @property
    def keys(self) -> list[str]:
        """The keys from the record to the value: the path split at dots, or just the name."""
        return self.path.split(".") if self.path else [self.name]

    @model_validator(mode="after")
    def _options_fit_type(self, info: ValidationInfo) -> FeatureSpec:
        # A spec an artifact holds loads as it was trained (these bounds came after, in 2026-12; a hashed feature of
        # 5000 buckets trained and served before them)
        if not (info.context or {}).get("artifact"):
            for key, most in (("max_categories", MAX_CATEGORIES), ("hash_buckets", MAX_HASH_BUCKETS)):
                if getattr(self, key) > most:
                    raise ValueError(f"feature {self.name!r}: {key} {getattr(self, key)} is above {most}")
        if self.type != "numeric" and (self.log1p or self.clip is not None):
            raise ValueError(f"feature {self.name!r}: log1p and clip apply to numeric features only")
        if self.clip is not None and None not in self.clip and self.clip[0] > self.clip[1]:
            raise ValueError(f"feature {self.name!r}: clip [{self.clip[0]:g}, {self.clip[1]:g}] has its low bound above "
                             "its high bound")
        if self.type != "categorical" and self.encoding != "auto":
            raise ValueError(f"feature {self.name!r}: encoding applies to categorical features only")
        return self


class SigmaConfig(Section):
    """Per-feature noise scales from kurtosis (DESIGN 3.2)."""

    mode: Literal["kurtosis", "global"] = Field("kurtosis", description="kurtosis = per-feature noise scale from the feature's kurtosis; global = one scale for all")
    base: float = Field(0.5, gt=0, description="base noise scale sigma_0 in standardised units")
    c: float = Field(0.33, description="sigma_j = base * (1 + c * (kappa_j - 3)), then clipped (see clip)")
    trim: float = Field(0.02, ge=0, lt=0.5, description="fraction trimmed at each tail")
    bins: int = Field(200, ge=2, le=10**6, description="equal-width histogram bins of the (rearranged) kurtosis estimate (at most 10**6: a count per bin and feature is held)")
    clip: Literal["code", "paper"] = Field("code", description="code = [0.1, 3.0], paper = [0.1, 2.0]")
    discrete_kappa: float = Field(1.8, description="kappa for binary/ternary/constant columns")

    @property
    def clip_range(self) -> tuple[float, float]:
        return (0.1, 3.0) if self.clip == "code" else (0.1, 2.0)


class ModelConfig(Section):
    """ResNet-MLP score network (DESIGN 3.3)."""

    width: int | None = Field(None, gt=0, le=8192, description="hidden width of the ResNet-MLP score network (at most 8192); null = train.profile's (fast 256, paper 512: the paper's network)")
    depth: int | None = Field(None, ge=0, le=128, description="residual blocks of the score network (at most 128); null = train.profile's (6 in both, as the paper)")
    dropout_hidden: float = Field(0.2, ge=0, lt=1, description="dropout after the ReLU inside each residual block")
    dropout_residual: float = Field(0.1, ge=0, lt=1, description="dropout after the second Linear of each block, before the skip add")


class EMAConfig(Section):
    """EMA-teacher filtering (DESIGN 3.5)."""

    enabled: bool = Field(True, description="EMA-teacher filtering of likely anomalies from training batches (K-DSM-EMA)")
    decay: float = Field(0.999, gt=0, lt=1, description="decay of the EMA teacher's weights")
    percentile: float = Field(80.0, gt=0, le=100, description="rows of each batch the teacher scores above this percentile are left out of the step")
    average_buffers: bool = Field(False, description="also average BatchNorm running stats (reference code: no)")


class RefineConfig(Section):
    """Which rows the network learns from on contaminated history (``offline_train.refine``)."""

    enabled: bool = Field(True, description="warm start from an isolation forest's core, then refinement rounds; false = every row (the published method; better for history known to be clean)")
    start_keep: float = Field(0.5, gt=0, le=1, description="share of rows, least anomalous first by an isolation forest, the network learns from first")
    rounds: int = Field(3, ge=0, le=10**4, description="refinement rounds (evenly spaced over the step budget; at most 10**4, and one a step at most whatever the number): rescore every row, keep the normal-looking ones")
    keep: float | Literal["auto"] = Field("auto", description="share of rows each round trains on (lowest scores first); auto = 1 - the isolation forest's contamination estimate")
    max_drop: float = Field(0.5, ge=0, lt=1, description="auto: never leave out more than this share of rows")
    threshold: float = Field(0.5, gt=0, lt=1, description="auto: rows whose isolation score 2^(-E[h]/c(n)) exceeds this count as contamination (0.5: Liu et al. 2008)")
    rank: Literal["network", "blend"] = Field("network", description="what each round ranks the rows by: the network's score, or its blend with the warm start's isolation forest (offline_train.blend)")
    strata: int = Field(0, ge=0, le=256, description="k-means clusters (at most 256) of the training rows within each of which the core and every round keep their share, so that no mode of the history is left out whole (issue 11, fortieth pass); 0 = one share over all rows (also where there are fewer than two rows a cluster)")

    @field_validator("strata")
    @classmethod
    def _strata_off_or_two(cls, v: int) -> int:
        if v == 1:
            raise ValueError("must be 0 (off) or at least 2 clusters")
        return v

    @field_validator("keep")
    @classmethod
    def _keep_share(cls, v):
        if v != "auto" and not 0 < v <= 1:
            raise ValueError("keep must be a share in (0, 1] or 'auto'")
        return v


_FALSE = ("false", "0", "no", "off", "f", "n")  # what pydantic reads as false, in a raw setting


class ScoreConfig(Section):
    """What a row's anomaly score is (``offline_train.blend``)."""

    isolation_forest: bool = Field(True, description="blend the network's score with an isolation forest's, fitted on the same training rows (the larger of the two z-scores, on the network's scale; explanations from the network); false = the network's score alone (the published method)")
    forest_metric: Literal["density", "depth"] = Field("density", description="how the blend's forest part reads its trees: density = each leaf's share of the sample over its share of the volume (isotree's density metric; issue 11, thirty-seventh pass); depth = the isolation depth (scikit-learn's score, the default before); the warm start ranks by depth either way")
    knn: bool = Field(True, description="a third part of the blend: the distance to the k-th nearest of a sample of the training rows the network keeps (offline_train.neighbours); the artifact then carries those rows, standardised; false = two parts, no training rows in the artifact; off by itself where isolation_forest is off")
    knn_k: int = Field(10, ge=1, description="k of the k-NN part: the distance to the k-th nearest reference row")
    knn_rows: int = Field(512, ge=2, le=65536, description="at most this many kept training rows (a seeded sample) are the k-NN part's reference; its scoring cost grows with them")

    @model_validator(mode="before")
    @classmethod
    def _knn_follows_forest(cls, data):
        # The k-NN part is a part of the blend: switching the blend off switches it off unless it is asked for.
        if isinstance(data, dict) and "knn" not in data and str(data.get("isolation_forest", True)).lower() in _FALSE:
            return {**data, "knn": False}
        return data

    @model_validator(mode="after")
    def _knn_needs_forest(self):
        if self.knn and not self.isolation_forest:
            raise ValueError("score.knn is a third part of the blend: it needs score.isolation_forest")
        return self


PROFILES: dict[str, dict[str, dict[str, Any]]] = {
    # Published settings: 500 epochs of the 512x6 network.
    "paper": {"train": {"epochs": 500}, "model": {"width": 512, "depth": 6}},
    # CPU profile: the paper's 500 epochs on a narrower network, within 2000..4500
    # steps: small data gets the paper's step count (~2000), large data at most
    # ~45 s of CPU per model, so K-DSM and DSM on all 26 ADBench datasets fit in
    # 30 minutes on 2 cores. Chosen and measured against the paper profile in
    # docs/results.md (kdsm bench adbench).
    "fast": {"train": {"epochs": 500, "min_steps": 2000, "max_steps": 4500}, "model": {"width": 256, "depth": 6}},
}


class OptimConfig(Section):
    """Training loop (DESIGN 3.4). ``profile`` fills epochs/steps unless they are set."""

    profile: Literal["fast", "paper"] = Field("fast", description="fast = 256-wide net, 500 epochs within 2000..4500 steps (CPU); paper = 512 wide, 500 epochs")
    # The upper bounds only refuse typos (a billion steps is years of CPU); they also keep
    # step counts inside torch's int64 and threads below what an OS gives one process.
    epochs: int | None = Field(None, gt=0, le=10**6, description="epochs over the training rows; null = from the profile")
    steps: int | None = Field(None, gt=0, le=10**9, description="optimiser steps (at most 10**9); null = from the profile (set it to override epochs)")
    min_steps: int | None = Field(None, gt=0, le=10**9, description="lower bound on an epoch budget; null = the profile's (fast: 2000)")
    max_steps: int | None = Field(None, gt=0, le=10**9, description="upper bound on an epoch budget; null = the profile's (fast: 4500)")
    batch_size: int = Field(128, gt=1, description="rows per optimiser step")
    noise_copies: int = Field(3, gt=0, le=1024, description="noisy copies of each row per step (at most 1024: a step holds batch_size * noise_copies rows)")
    lr: float = Field(5e-4, gt=0, description="Adam learning rate")
    weight_decay: float = Field(5e-5, ge=0, description="Adam weight decay (L2)")
    precision: Literal["auto", "fp32", "bf16"] = Field("auto", description="auto = bf16 autocast on a CPU that runs it natively, fp32 on CUDA (faster there at these sizes)")
    device: str = Field("auto", description="auto = cuda when present, else cpu")
    seed: int = Field(0, ge=0, lt=2**32, description="seed of sampling, noise and initialisation (0 to 2**32 - 1)")
    threads: int | None = Field(None, gt=0, le=1024, description="torch CPU threads (at most 1024); None = torch default")

    def budget_rule(self) -> dict[str, int | None]:
        """The resolved step rule: ``{"steps": N}``, or ``{"epochs": E, "min_steps": a, "max_steps": b}``.

        Explicit ``steps`` wins; explicit ``epochs`` drops the profile's bounds
        (set ``min_steps``/``max_steps`` too to keep bounds).

        >>> OptimConfig(profile="fast").budget_rule()
        {'epochs': 500, 'min_steps': 2000, 'max_steps': 4500}
        >>> OptimConfig(profile="fast", epochs=50).budget_rule()
        {'epochs': 50, 'min_steps': None, 'max_steps': None}
        """
        preset = PROFILES[self.profile]["train"]
        if self.steps is not None:
            return {"steps": self.steps}
        if self.epochs is not None:
            return {"epochs": self.epochs, "min_steps": self.min_steps, "max_steps": self.max_steps}
        return {"epochs": int(preset["epochs"]),
                "min_steps": self.min_steps if self.min_steps is not None else preset.get("min_steps"),
                "max_steps": self.max_steps if self.max_steps is not None else preset.get("max_steps")}

    def budget(self, n_rows: int) -> int:
        """Number of optimiser steps for ``n_rows`` training rows.

        >>> OptimConfig(profile="paper").budget(1000), OptimConfig(epochs=2).budget(129)
        (4000, 4)
        >>> [OptimConfig(profile="fast").budget(n) for n in (400, 827, 50_000)]
        [2000, 3500, 4500]
        """
        rule = self.budget_rule()
        if "steps" in rule:
            return int(rule["steps"])
        steps = int(rule["epochs"]) * max(1, -(-n_rows // self.batch_size))
        if rule["min_steps"] is not None:
            steps = max(steps, int(rule["min_steps"]))
        if rule["max_steps"] is not None:
            steps = min(steps, int(rule["max_steps"]))
        return steps

    def model_for(self, model: ModelConfig) -> ModelConfig:
        """``model`` with this profile's sizes filled in where it leaves them null (the default).

        >>> OptimConfig(profile="fast").model_for(ModelConfig()).width
        256
        >>> OptimConfig(profile="fast").model_for(ModelConfig(width=512)).width
        512
        >>> OptimConfig(profile="paper").model_for(ModelConfig()).width, OptimConfig().model_for(ModelConfig()).depth
        (512, 6)
        """
        preset = {k: v for k, v in PROFILES[self.profile].get("model", {}).items() if getattr(model, k) is None}
        return model.model_copy(update=preset) if preset else model


SEVERITY_LADDER = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")  # syslog, mildest first


class CalibrationConfig(Section):
    """Held-out calibration slice and named severities (DESIGN 3.7)."""

    holdout: float = Field(0.2, ge=0, lt=1, description="fraction of the training window kept out of training; 0 = calibrate in-sample (benchmarks)")
    severities: dict[str, float] = Field(default_factory=lambda: {"warning": 0.99, "critical": 0.999}, min_length=1, description="severity name -> quantile of the calibration scores that is its threshold; syslog's names rise in their order (debug < info < notice < warning < error < critical < alert < emergency)")
    top_features: int = Field(5, gt=0, description="features listed in an explanation")

    @model_validator(mode="after")
    def _quantiles_valid(self, info: ValidationInfo) -> CalibrationConfig:
        for name, q in self.severities.items():
            if not name.strip():
                raise ValueError("a severity needs a name")
            if not 0 < q < 1:
                raise ValueError(f"severity {name!r}: quantile {q} is not in (0, 1)")
        if (info.context or {}).get("artifact"):  # an artifact trained before this rule still loads as it was
            return self
        # A severity is the highest threshold a score reaches (calibrate.severity_of ranks them by threshold, i.e. by
        # quantile), so warning at 0.999 over critical at 0.99 would make every critical score a "warning".
        ranked = sorted((SEVERITY_LADDER.index(n.lower()), n, q) for n, q in self.severities.items()
                        if n.lower() in SEVERITY_LADDER)
        for (_, milder, qm), (_, severer, qs) in zip(ranked, ranked[1:], strict=False):
            if qs <= qm:
                raise ValueError(f"severity {severer!r} (quantile {qs}) must be above {milder!r} ({qm}): "
                                 "a more severe threshold must be higher")
        return self


class StorageConfig(Section):
    """Object storage for s3:// locations (data, --out, archive.dir, registry.store_dir, stream.model)."""

    s3_endpoint: str | None = Field(None, description="S3-compatible endpoint URL, e.g. http://127.0.0.1:8333 for SeaweedFS or MinIO; None = AWS S3 (or env AWS_ENDPOINT_URL)")
    s3_region: str | None = Field(None, description="S3 region; None = env AWS_DEFAULT_REGION, else us-east-1")
    s3_access_key: str | None = Field(None, description="S3 access key id; None = the AWS default chain (env AWS_ACCESS_KEY_ID, profile, instance role)")
    s3_secret_key: SecretStr | None = Field(None, description="S3 secret key (prefer env KDSM_STORAGE__S3_SECRET_KEY or AWS_SECRET_ACCESS_KEY)")
    connect_timeout_s: float = Field(5.0, gt=0, description="give up connecting to the object store after this long")
    request_timeout_s: float = Field(30.0, gt=0, description="give up on one object-store request after this long")
    retries: int = Field(3, ge=1, le=20, description="attempts per object-store request (AWS standard retry strategy; at most 20: against a store that does not answer, each attempt waits out its timeouts)")


class _YamlSource(PydanticBaseSettingsSource):
    """Reads the YAML file named by ``_config_file`` (set per load, see ``load_settings``)."""

    def __init__(self, settings_cls: type[BaseSettings], path: Path | None):
        super().__init__(settings_cls)
        self.path = path
        self._data: dict[str, Any] | None = None

    def get_field_value(self, field, field_name):  # pragma: no cover - unused, __call__ does it all
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        if self._data is None:  # read once: _OverYaml asks for it too
            self._data = self._read()
        return self._data

    def not_mappings(self) -> list[tuple[str, ...]]:
        """Where the file sets a section (or a section in one) to something other than a mapping."""
        return _not_mappings(self.settings_cls, self())

    def _read(self) -> dict[str, Any]:
        if self.path is None:
            return {}
        try:
            data = yaml.safe_load(self.path.read_text(encoding="utf-8")) or {}
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {self.path}") from None
        except IsADirectoryError:
            raise ConfigError(f"config file {self.path} is a directory, not a YAML file") from None
        except OSError as e:  # permission, I/O error, ...: one line naming the file
            raise ConfigError(f"config file {self.path} cannot be read: {e.strerror or e}") from None
        except UnicodeDecodeError as e:
            raise ConfigError(f"config file {self.path} is not UTF-8 text (byte {e.start}: {e.reason})") from None
        except yaml.YAMLError as e:  # one line: the problem and where, not PyYAML's quoted snippet
            mark = getattr(e, "problem_mark", None)
            where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
            problem = getattr(e, "problem", None) or str(e).splitlines()[0]
            raise ConfigError(f"config file {self.path} is not valid YAML{where}: {problem}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"config file {self.path} must hold a mapping of sections")
        return data


def _is_model(annotation) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _not_mappings(cls: type[BaseModel], data: dict[str, Any], path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The paths in ``data`` of the sections of ``cls`` (nested ones too) whose value is not a mapping.

    ``train:`` with nothing after it is null, not an empty section (``train: {}``): refused, with or without
    environment variables.

    >>> _not_mappings(TrainSettings, {"train": 7, "sigma": {"bins": 3}, "model": None, "ema": {}, "features": 1})
    [('model',), ('train',)]
    """
    out = []
    for name, value in data.items():
        field = cls.model_fields.get(name) if isinstance(name, str) else None
        if field is None or not _is_model(field.annotation):
            continue
        if isinstance(value, dict):
            out += _not_mappings(field.annotation, value, (*path, name))
        else:
            out.append((*path, name))
    return sorted(out)


def _without(data: dict[str, Any], paths: list[tuple[str, ...]]) -> dict[str, Any]:
    """``data`` less the keys at ``paths`` (a copy where one is left out).

    >>> _without({"train": {"threads": 1}, "drift": {"adwin": {"delta": 0.1}, "x": 1}}, [("train",), ("drift", "adwin")])
    {'drift': {'x': 1}}
    """
    out = dict(data)
    for key, *rest in paths:
        if key not in out:
            continue
        if not rest:
            del out[key]
        elif isinstance(out[key], dict):
            out[key] = _without(out[key], [tuple(rest)])
    return out


class _OverYaml(PydanticBaseSettingsSource):
    """A source merged over the YAML file (environment variables, explicit overrides) less what it sets in a section
    the file sets to something other than a mapping (``train: 7``, ``train: [1, 2]``, ``train:``).

    Merged, a ``KDSM_TRAIN__THREADS`` made ``train`` a mapping again and the file's error went unseen (``kdsm config
    check`` said OK); now the file's value is what is validated, so the file is refused with the same line whatever
    the environment holds.
    """

    def __init__(self, source: PydanticBaseSettingsSource, yaml_source: _YamlSource):
        super().__init__(source.settings_cls)
        self.source, self.yaml = source, yaml_source
        self.__name__ = getattr(source, "__name__", type(source).__name__)  # its name among the sources, as before

    def get_field_value(self, field, field_name):  # pragma: no cover - unused, __call__ does it all
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        data = self.source()  # first, as before: a variable that is not JSON is its own error
        return _without(data, self.yaml.not_mappings())


class KDSMSettings(BaseSettings):
    """Base of the project's settings classes: env prefix, YAML source, strict keys."""

    model_config = SettingsConfigDict(env_prefix="KDSM_", env_nested_delimiter="__", extra="forbid")
    _yaml_path: Path | None = None

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings, file_secret_settings):
        yaml_source = _YamlSource(settings_cls, _CURRENT_FILE.get(cls))
        return (_OverYaml(init_settings, yaml_source), _OverYaml(env_settings, yaml_source), yaml_source,
                file_secret_settings)


class TrainSettings(KDSMSettings):
    """Everything the offline job needs."""

    data: DataConfig = DataConfig()
    sigma: SigmaConfig = SigmaConfig()
    model: ModelConfig = ModelConfig()
    ema: EMAConfig = EMAConfig()
    refine: RefineConfig = RefineConfig()
    score: ScoreConfig = ScoreConfig()
    train: OptimConfig = OptimConfig()
    calibration: CalibrationConfig = CalibrationConfig()
    storage: StorageConfig = StorageConfig()
    features: list[FeatureSpec] | None = Field(None, description="the feature spec (README \"Feature spec\"); null = inferred from the Parquet schema (kdsm features infer prints it)")

    @model_validator(mode="after")
    def _one_feature_list(self) -> TrainSettings:
        if self.features is not None and self.data.features is not None:
            raise ValueError("set either features (the spec) or data.features (column names), not both")
        if self.features is not None:
            names = [f.name for f in self.features]
            if len(set(names)) != len(names) or not names:
                raise ValueError("features: names must be unique and the list non-empty")
        return self


# The YAML path travels to settings_customise_sources through this per-class slot:
# pydantic-settings builds sources before __init__ can see a custom argument.
_CURRENT_FILE: dict[type, Path | None] = {}


ENV_PREFIX = "KDSM_"


def env_names(cls: type[BaseModel], prefix: str = ENV_PREFIX) -> set[str]:
    """Every environment variable a settings class reads: ``KDSM_SECTION`` (JSON) and ``KDSM_SECTION__KEY``, nested.

    >>> sorted(n for n in env_names(TrainSettings) if n.startswith("KDSM_EMA"))[:3]
    ['KDSM_EMA', 'KDSM_EMA__AVERAGE_BUFFERS', 'KDSM_EMA__DECAY']
    """
    out = set()
    for name, f in cls.model_fields.items():
        env = (prefix + name).upper()
        out.add(env)
        sub = f.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            out |= env_names(sub, env + "__")
        elif typing.get_origin(sub) is dict:  # KDSM_CALIBRATION__SEVERITIES__WARNING: any key below it
            out.add(env + "__*")
    return out


def unknown_env(cls: type[BaseModel], environ=None) -> list[str]:
    """``KDSM_*`` variables ``cls`` would silently ignore: a misspelt key, or a section with one underscore.

    Variables of tools rather than settings (``KDSM_TEST_KAFKA``, ``KDSM_LOCAL_STATE``) have no ``__`` and
    start with no section name, so they pass.

    >>> unknown_env(TrainSettings, {"KDSM_TRAIN__STPES": "5", "KDSM_TRAIN_STEPS": "5", "KDSM_TRAIN__STEPS": "5",
    ...                             "KDSM_TEST_KAFKA": "x"})
    ['KDSM_TRAIN_STEPS (did you mean KDSM_TRAIN__STEPS?)', 'KDSM_TRAIN__STPES (did you mean KDSM_TRAIN__STEPS?)']
    """
    import difflib

    environ = os.environ if environ is None else environ
    known = env_names(cls)
    sections = {n[len(ENV_PREFIX):] for n in known if "__" not in n}
    out = []
    for name in sorted(environ):
        up = name.upper()
        if not up.startswith(ENV_PREFIX) or up in known:
            continue
        if any(up.startswith(k[:-1]) for k in known if k.endswith("__*")):
            continue
        rest = up[len(ENV_PREFIX):]
        if "__" not in rest and not any(rest.startswith(s + "_") for s in sections):
            continue
        guess = difflib.get_close_matches(up, [k for k in known if not k.endswith("*")], n=1, cutoff=0.8)
        out.append(name + (f" (did you mean {guess[0]}?)" if guess else ""))
    return out


def _settings_error(e: Exception, environ=None) -> str:
    """One line for pydantic-settings' ``SettingsError``: which variable is not the JSON its setting needs.

    >>> err = SettingsError('error parsing value for field "archive" from source "EnvSettingsSource"')
    >>> print(_settings_error(err, {"KDSM_ARCHIVE": "{bad", "KDSM_SIGMA__BASE": "x"}))
    environment variable KDSM_ARCHIVE is not valid JSON (a section, list or mapping set whole is JSON, e.g. KDSM_ARCHIVE='{"key": "value"}'; or set one key: KDSM_ARCHIVE__<KEY>)
    """
    import json
    import re

    m = re.search(r'field "([^"]+)" from source "(\w+)"', str(e))
    if m is None or m.group(2) != "EnvSettingsSource":
        return f"cannot read the settings: {e}"
    section = f"{ENV_PREFIX}{m.group(1).upper()}"
    environ = os.environ if environ is None else environ

    def not_json(value: str) -> bool:
        try:
            json.loads(value)
        except ValueError:
            return True
        return False

    # The section's own variable, or one below it that looks like JSON (a mapping or list) and is not.
    bad = sorted(name for name, value in environ.items()
                 if (name.upper() == section or (name.upper().startswith(section + "__") and value.lstrip()[:1] in "[{"))
                 and not_json(value))
    var = bad[0] if len(bad) == 1 else f"{section} (or a {section}__* below it)"
    return (f"environment variable {var} is not valid JSON (a section, list or mapping set whole is JSON, "
            f"e.g. {var.split()[0]}='{{\"key\": \"value\"}}'; or set one key: {var.split()[0]}__<KEY>)")


def check_remote_out(out, settings_cls) -> None:
    """An object-store ``--out`` of a command that has no ``--config``: the ``storage`` settings from the environment
    (``KDSM_STORAGE__*``, which ``load_settings`` applies), then its bucket, checked before the work, not after it."""
    from . import storage

    if storage.is_remote(out):
        load_settings(settings_cls)
        storage.check_bucket(out)


def load_settings(cls: type[KDSMSettings] = TrainSettings, path: str | os.PathLike | None = None, **overrides: Any):
    """Build ``cls`` from defaults < YAML ``path`` < env ``KDSM_*`` < ``overrides``.

    Raises ``ConfigError`` with a readable message (no traceback needed).
    """
    _CURRENT_FILE[cls] = Path(path) if path is not None else None
    try:
        try:
            settings = cls(**overrides)
        except SettingsError as e:  # a KDSM_<SECTION> (or list) variable that is not JSON: name it, no traceback
            raise ConfigError(_settings_error(e)) from None
        if hasattr(settings, "storage"):  # every command loads its settings here: s3:// locations use them from now on
            from . import storage

            storage.configure(settings.storage)
        return settings
    except ValidationError as e:
        source = f" in {path}" if path else ""
        raise ConfigError(f"invalid configuration{source}: " + _errors(e)) from None
    finally:
        _CURRENT_FILE.pop(cls, None)


def _errors(e: ValidationError) -> str:
    """Every error as ``key.path: what``, in one line (the README's promise for config errors): joined by "; "."""
    parts = []
    for err in e.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = "unknown key" if err["type"] == "extra_forbidden" else " ".join(str(err["msg"]).split())
        parts.append(f"{where}: {msg}")
    return "; ".join(parts)


@contextlib.contextmanager
def flag_overrides():
    """Command-line flags set on loaded settings: a value the config refuses is a ``ConfigError``, not a traceback.

    The sections validate on assignment, so ``--steps 10000000000`` meets the same bound as ``train.steps`` does.

    >>> s = TrainSettings()
    >>> with flag_overrides():
    ...     s.train.steps = 10**10
    Traceback (most recent call last):
    offline_train.config.ConfigError: invalid value for steps: Input should be less than or equal to 1000000000
    """
    try:
        yield
    except ValidationError as e:  # one flag is set at a time: one error, one line
        raise ConfigError("invalid value for " + _errors(e)) from None
