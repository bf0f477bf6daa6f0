"""The setup gc_pauses.py and loop_phases.py share: a local Tansu and a topic of 200,000 6-feature events."""
import tempfile
from pathlib import Path

import numpy as np

from offline_train.config import load_settings
from streamer.config import Settings
from streamer.dev import local_services
from streamer.dev.bench_fixtures import bench_model, events_json, produce
from streamer.pipeline.kafka_clients import ensure_topics

EVENTS = 200_000


def settings():
    s = load_settings(Settings, None)
    s.metrics.enabled = False
    return s


def start_broker(s):
    """A local Tansu for this run (stop it with ``.stop()``); ``s.kafka.bootstrap`` points at it."""
    broker = local_services.Service("kafka", local_services.free_port(), Path(tempfile.mkdtemp()) / "state").start()
    s.kafka.bootstrap = broker.url
    return broker


def backlog(s, prefix: str):
    """A small bench model and the topic ``<prefix>-events`` holding EVENTS events for it; alerts and dead letters
    go to ``<prefix>-alerts`` and ``<prefix>-dead``. Returns (model, events topic)."""
    model = bench_model(6, 64, 1, "cpu")
    topic = f"{prefix}-events"
    s.kafka.alerts_topic, s.kafka.deadletter_topic = f"{prefix}-alerts", f"{prefix}-dead"
    ensure_topics(s.kafka, [topic, s.kafka.alerts_topic, s.kafka.deadletter_topic])
    X = model.scaler_.inverse_transform(np.random.default_rng(1).normal(size=(EVENTS, 6)))
    produce(s.kafka, topic, events_json(X, model.feature_names_))
    return model, topic
