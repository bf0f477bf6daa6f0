"""Where the streamer's loop spends its time with scoring excluded (diagnosis; docs/streaming.md, "The collector").

One local Tansu, one topic of 200,000 6-feature events, the heap settled as ``kdsm bench stream`` does; three rounds
of consume-only then end to end (``--scorer none``'s loop, ``ConstantScorer`` alerting on 1%). Each step of the loop is
wrapped in a timer: seconds and calls per end-to-end run (``poll_batch`` includes the group join, which falls outside
the measured window). Settings may be overridden as ``section.key=value``. From the repository root:

    python3 docs/results/stream-gc/loop_phases.py
    python3 docs/results/stream-gc/loop_phases.py kafka.commit_interval_ms=1000
"""
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

from offline_train.config import load_settings
from streamer.config import Settings
from streamer.dev import local_services
from streamer.dev.bench_fixtures import bench_model, consume_only, events_json, produce
from streamer.dev.bench_stream import _end_to_end
from streamer.pipeline import app as app_module
from streamer.pipeline import checkpoint as checkpoint_module
from streamer.pipeline.kafka_clients import ensure_topics
from streamer.pipeline.scorer import ConstantScorer

EVENTS = 200_000
SECONDS, CALLS = Counter(), Counter()


def timed(owner, name: str, label: str) -> None:
    """Replace ``owner.name`` by a wrapper that adds its seconds and calls under ``label``."""
    inner = getattr(owner, name)

    def wrapper(*args, **kwargs):
        t = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            SECONDS[label] += time.perf_counter() - t
            CALLS[label] += 1

    setattr(owner, name, wrapper)


def main() -> None:
    s = load_settings(Settings, None)
    s.metrics.enabled = False
    for override in sys.argv[1:]:  # section.key=value
        try:
            dotted, value = override.split("=", 1)
            section, key = dotted.split(".")
            setattr(getattr(s, section), key, type(getattr(getattr(s, section), key))(value))
        except (ValueError, AttributeError) as e:
            raise SystemExit(f"loop_phases.py: bad override {override!r} (expected section.key=value): {e}") from None
    broker = local_services.Service("kafka", local_services.free_port(), Path(tempfile.mkdtemp()) / "state").start()
    s.kafka.bootstrap = broker.url
    timed(app_module, "poll_batch", "poll_batch (group join included)")
    timed(app_module.StreamApp, "_prepare", "prepare (decode, hand-off)")
    timed(app_module.StreamApp, "_publish_pending", "publish")
    timed(app_module, "build_alerts", "  of which build_alerts")
    timed(checkpoint_module.Checkpointer, "retire", "retire")
    timed(checkpoint_module.Checkpointer, "_commit", "commit (in retire or settle)")
    timed(app_module.StreamApp, "_backpressure", "backpressure")
    timed(app_module.StreamApp, "_after_commit", "sinks")
    try:
        model = bench_model(6, 64, 1, "cpu")
        s.kafka.alerts_topic, s.kafka.deadletter_topic = "ph-alerts", "ph-dead"
        ensure_topics(s.kafka, ["ph-events", "ph-alerts", "ph-dead"])
        X = model.scaler_.inverse_transform(np.random.default_rng(1).normal(size=(EVENTS, 6)))
        produce(s.kafka, "ph-events", events_json(X, model.feature_names_))
        app_module.settle_heap()
        print("overrides:", " ".join(sys.argv[1:]) or "none")
        for r in range(3):
            c = consume_only(s.kafka, "ph-events", EVENTS, s.stream.max_batch)
            SECONDS.clear()
            CALLS.clear()
            e, app = _end_to_end(s, model, "ph-events", f"ph-e2e-{r}-{time.time_ns()}", EVENTS, ConstantScorer(0.01, 5))
            print(f"round {r + 1}: consume-only {c:,.0f} msg/s, end to end {e:,.0f} events/s, ratio {e / c:.2f}; "
                  f"{app.counts['batches']} batches")
            for label, sec in SECONDS.most_common():
                print(f"   {label:34s} {sec * 1000:8.1f} ms  {CALLS[label]:4d} calls")
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
