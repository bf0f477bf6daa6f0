"""Config sections of the model-lifecycle modules: archive, drift, registry, retrain.

They are fields of ``streamer.config.Settings`` (YAML sections ``archive:``,
``drift:``, ``registry:``, ``retrain:``; env ``KDSM_ARCHIVE__DIR=...``). Kept
in their own module so archive/drift/registry/retrain import them without
importing the whole settings class.

>>> ArchiveConfig().dir is None, DriftConfig().detector, RetrainConfig().min_rows
(True, 'adwin', 1000)

Redis (URL, password, key prefix) is the ``redis`` section of the streamer.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from offline_train.config import Section

# Upper bound of the seconds fields: far below threading.TIMEOUT_MAX (~292 years; a wait beyond it is an OverflowError)
# and Redis's expiry range, and longer than any sensible lock, delay or period.
DAY_S = 86400.0


class ArchiveConfig(Section):
    """Parquet archive of committed, scored events (the training data of the next model)."""

    dir: str | None = Field(None, description="archive root (dir/date=YYYY-MM-DD/part-*.parquet), a path or s3://bucket/prefix; None = archive off")
    spool_dir: str | None = Field(None, description="local directory of the open file when dir is an object store (keep it on a persistent disk: a restart recovers it); None = a folder under the system temp dir")
    max_file_bytes: int = Field(64 * 2**20, gt=0, description="roll the open file once its spool reaches this size")
    max_file_seconds: float = Field(300.0, gt=0, le=DAY_S, description="roll the open file once it is this old (at most a day: the UTC date change closes it anyway)")
    retention_max_bytes: int | None = Field(10 * 2**30, gt=0, description="delete oldest closed files above this total; None = no bound")
    retention_max_age_hours: float | None = Field(14 * 24.0, gt=0, description="delete closed files older than this; None = no bound")
    fsync: bool = Field(True, description="fsync the spool after every batch (the crash window is then one batch)")
    compression: Literal["zstd", "snappy", "gzip", "none"] = Field("zstd", description="Parquet compression codec")


class AdwinParams(Section):
    """river.drift.ADWIN parameters."""

    delta: float = Field(0.002, gt=0, lt=1, description="confidence; smaller = fewer false alarms")
    clock: int = Field(32, gt=0, description="ADWIN checks for a change every this many updates")
    grace_period: int = Field(10, gt=0, description="ADWIN updates before the first check")
    min_window_length: int = Field(5, gt=0, description="smallest ADWIN sub-window compared")


class KswinParams(Section):
    """river.drift.KSWIN parameters (a KS test per update: keep alpha small)."""

    alpha: float = Field(0.0001, gt=0, lt=1, description="KSWIN significance level of the KS test")
    window_size: int = Field(300, gt=0, description="KSWIN sliding window length")
    stat_size: int = Field(100, gt=0, description="KSWIN size of the recent sample compared with the window")
    seed: int = Field(0, description="KSWIN sampling seed")


class PageHinkleyParams(Section):
    """river.drift.PageHinkley parameters (on the log score)."""

    min_instances: int = Field(30, gt=0, description="Page-Hinkley updates before the first check")
    delta: float = Field(0.005, ge=0, description="Page-Hinkley tolerated change magnitude")
    threshold: float = Field(50.0, gt=0, description="Page-Hinkley detection threshold (lambda)")
    alpha: float = Field(0.9999, gt=0, le=1, description="Page-Hinkley forgetting factor")
    mode: Literal["up", "down", "both"] = Field("both", description="Page-Hinkley direction of change watched: up, down or both")


class DriftConfig(Section):
    """Drift watch on the committed score stream (a sink of the streamer)."""

    enabled: bool = Field(True, description="run the drift sink in the streamer")
    detector: Literal["adwin", "kswin", "page_hinkley"] = Field("adwin", description="river detector fed log(1 + score)")
    adwin: AdwinParams = AdwinParams()
    kswin: KswinParams = KswinParams()
    page_hinkley: PageHinkleyParams = PageHinkleyParams()
    warmup_events: int = Field(500, ge=0, description="events after start or a model swap before any signal counts")
    calibrated_alert_rate: float | None = Field(None, gt=0, lt=1, description="expected alert rate; None = 1 - lowest severity quantile of the scoring model")
    alert_rate_window: int = Field(500, gt=0, description="events in the rolling alert-rate window (keep it below persist_events)")
    alert_rate_z: float = Field(4.0, gt=0, description="two-sided binomial z bound on the rolling alert rate")
    hold_events: int = Field(300, ge=0, description="events skipped after a detector fires (a short burst passes in this time)")
    persist_events: int = Field(1000, gt=0, description="hysteresis: after the hold, the detector's shift must still show over this many events; the alert-rate signal must stay on this long")
    persist_z: float = Field(4.0, gt=0, description="z bound of the before/after mean test that confirms a detector firing")
    cooldown_s: float = Field(3600.0, ge=0, le=30 * DAY_S, description="after a drift event, none for this long (fleet-wide via Redis; at most 30 days)")
    kafka_topic: str | None = Field("kdsm.drift", description="topic for drift events; None = Redis stream only")
    request_retrain: bool = Field(True, description="a drift event also writes a retrain request")
    stream_maxlen: int = Field(10000, gt=0, description="approximate cap of the Redis drift/request streams")


class RegistryConfig(Section):
    """Model registry: artifacts in a store, pointers and metadata in Redis."""

    enabled: bool = Field(False, description="streamers serve the registry's current version and hot-swap on promote/rollback")
    store_dir: str = Field("runs/models", description="artifact store root: one directory per version; a path or s3://bucket/prefix")
    check_interval_s: float = Field(10.0, gt=0, le=DAY_S, description="streamers re-read the pointer this often (pub/sub is the fast path; at most a day)")
    device: str = Field("auto", description="device the retrain job loads the current model and its gate the new version onto (streamers use stream.device)")


class RetrainConfig(Section):
    """The retrain job: archive window, size limits, validation gate, promotion."""

    window_hours: float | None = Field(24.0, gt=0, description="archive files closed within this many hours; None = all")
    max_rows: int = Field(200_000, gt=0, description="newest archived rows used for training (file granularity)")
    min_rows: int = Field(1000, gt=1, description="fewer usable rows than this: no training, current keeps serving")
    gate_window_rows: int = Field(2000, gt=0, description="most recent archived rows the gate scores")
    gate_min_alert_ratio: float = Field(0.0, ge=0, description="gate: alert rate / calibrated rate must be >= this")
    gate_max_alert_ratio: float = Field(3.0, gt=0, description="gate: alert rate / calibrated rate must be <= this (above gate_min_alert_ratio)")
    gate_labelled_data: str | None = Field(None, description="Parquet with a label column: the new model must not be worse than current on it")
    gate_max_auc_pr_drop: float = Field(0.02, ge=0, description="allowed AUC-PR drop versus current on the labelled rows")
    auto_promote: bool = Field(True, description="promote a version that passes the gate (else register only)")
    lock_ttl_s: float = Field(300.0, gt=1, le=DAY_S, description="lock expiry; the holder renews it every third of this (at most a day)")
    request_delay_s: float = Field(600.0, ge=0, le=DAY_S, description="`--watch`: start this long after a request, so the archive holds data of the new regime (files close every archive.max_file_seconds; at most a day)")
    watch_block_s: float = Field(5.0, gt=0, le=3600, description="`kdsm retrain --watch`: block this long per read of the request stream (at most an hour)")
    metrics_port: int = Field(0, ge=0, le=65535, description="`kdsm retrain --watch`: serve /metrics (kdsm_retrain_runs_total{outcome}) and /healthz on metrics.host at this port; 0 = off (a one-shot run records its outcome in <prefix>retrain:runs)")

    @model_validator(mode="after")
    def _gate_ratios_ordered(self) -> RetrainConfig:
        if self.gate_min_alert_ratio >= self.gate_max_alert_ratio:
            raise ValueError(f"gate_min_alert_ratio ({self.gate_min_alert_ratio:g}) must be below gate_max_alert_ratio "
                             f"({self.gate_max_alert_ratio:g}): no alert rate could pass the gate")
        return self
