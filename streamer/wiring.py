"""Wiring of the model-lifecycle parts into a streamer: the model provider and the archive and drift sinks.

``lifecycle_parts(settings, model_path)`` is what ``streamer.service`` calls
when it builds a ``StreamApp``:

- provider: ``RegistryModelProvider`` when ``registry.enabled`` (the
  artifact at ``model_path``, if given, serves until the registry has a
  current version), else ``StaticModelProvider(model_path)``;
- sinks, in this order: ``ArchiveSink`` when ``archive.dir`` is set, then
  ``DriftSink`` when ``drift.enabled`` (its expected alert rate comes from the
  serving model at the live thresholds; its Kafka producer is built at the
  first drift event).

Everything returned has ``close()`` (or needs none); ``close_parts`` calls it, each part whatever the others do.

>>> from streamer.config import Settings
>>> Settings().registry.enabled, Settings().archive.dir
(False, None)
"""

from __future__ import annotations

import logging

from offline_train.detector import KDSM
from streamer.lifecycle.archive import ArchiveSink
from streamer.lifecycle.control import Keys, redis_client
from streamer.lifecycle.drift import DriftSink, model_alert_rate
from streamer.lifecycle.registry import ModelRegistry, RegistryModelProvider
from streamer.pipeline.provider import StaticModelProvider

log = logging.getLogger("kdsm.stream")


def build_provider(settings, model_path=None, metrics=None):
    if not settings.registry.enabled:
        if not model_path:
            raise FileNotFoundError("no model: pass --model DIR, set stream.model, or enable the registry (registry.enabled)")
        return StaticModelProvider(model_path, settings.stream.device)
    fallback = KDSM.load(model_path, device=settings.stream.device) if model_path else None
    return RegistryModelProvider(ModelRegistry.from_settings(settings), device=settings.stream.device,
                                 check_interval_s=settings.registry.check_interval_s, fallback=fallback,
                                 metrics=metrics)


def build_sinks(settings, provider, metrics=None) -> list:
    sinks: list = []
    if settings.archive.dir:
        sinks.append(ArchiveSink(settings.archive, metrics=metrics))
    if settings.drift.enabled:
        from streamer.pipeline.kafka_clients import ensure_topics, make_producer

        def rate(version: str, thresholds: dict):
            model = provider.current()
            return model_alert_rate(model, thresholds) if model.version_ == version else None

        def producer():
            if settings.drift.kafka_topic:
                ensure_topics(settings.kafka, [settings.drift.kafka_topic])
            return make_producer(settings.kafka)

        sinks.append(DriftSink(settings.drift, redis=redis_client(settings.redis), keys=Keys(settings.redis.key_prefix),
                               producer_factory=producer, calibrated_rate=rate, metrics=metrics, background=True))
    return sinks


def lifecycle_parts(settings, model_path=None, metrics=None):
    """(provider, sinks) for a streamer built from ``settings``; ``metrics``: the ``LifecycleMetrics`` they count in."""
    provider = build_provider(settings, model_path, metrics)
    return provider, build_sinks(settings, provider, metrics)


def close_parts(*parts) -> None:
    """Close sinks and providers that have ``close`` (archive: closes its open file), each on its own: a part that
    fails to close is logged (``close_failed``) and the next one is still closed; nothing is raised over the run's
    own outcome (its counts, or the error that ended it)."""
    for part in parts:
        close = getattr(part, "close", None)
        if close is not None:
            close_quietly(type(part).__name__, close)


def close_quietly(part: str, close) -> None:
    """Call ``close``; an exception is logged as ``close_failed`` naming ``part``, never raised."""
    try:
        close()
    except Exception as e:  # noqa: BLE001 - see the docstring
        log.warning({"event": "close_failed", "part": part, "error": repr(e)})
