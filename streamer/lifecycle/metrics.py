"""The lifecycle's Prometheus counters, as one object the wiring injects (archive, drift, registry, retrain).

A streamer builds one ``LifecycleMetrics`` on its ``StreamMetrics`` registry
(``streamer.service``), so ``/metrics`` serves them beside the loop's. A part
built without one gets a private registry: it counts, nobody scrapes it, and
two parts (or tests) in one process never share a counter.

>>> m = LifecycleMetrics()
>>> m.retrain_runs.labels("promoted").inc()
>>> m.value("kdsm_retrain_runs_total", outcome="promoted")
1.0
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter


class LifecycleMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        r = self.registry = registry if registry is not None else CollectorRegistry()
        self.archive_rows = Counter("kdsm_archive_rows", "Rows appended to the archive spool", registry=r)
        self.archive_files = Counter("kdsm_archive_files", "Parquet files closed into the archive", ["how"], registry=r)
        self.archive_deleted = Counter("kdsm_archive_deleted_files", "Archive files deleted by retention", registry=r)
        self.drift_events = Counter("kdsm_drift_events", "Drift events published", ["detector", "signal"], registry=r)
        self.drift_suppressed = Counter("kdsm_drift_suppressed", "Drift confirmations not published (scope: local or fleet cooldown, publication backlog)", ["scope"],
                                        registry=r)
        self.drift_publish_errors = Counter("kdsm_drift_publish_errors", "Drift event publications that failed", ["target"],
                                            registry=r)
        self.model_swaps = Counter("kdsm_registry_swaps", "Models swapped in by the registry provider", ["reason"], registry=r)
        self.model_refused = Counter("kdsm_registry_refused", "Registry versions a streamer refused to load (old model kept)",
                                     registry=r)
        self.retrain_runs = Counter("kdsm_retrain_runs", "Retrain runs by outcome", ["outcome"], registry=r)

    def value(self, name: str, **labels) -> float | None:
        """The current value of one sample (tests, ``kdsm`` output)."""
        return self.registry.get_sample_value(name, labels or None)
