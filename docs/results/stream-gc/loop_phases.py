"""Where the streamer's loop spends its time with scoring excluded (diagnosis; docs/streaming.md, "The collector").

One local Tansu, one topic of 200,000 6-feature events, the heap settled as ``kdsm bench stream`` does; three rounds
of consume-only then end to end (``--scorer none``'s loop, ``ConstantScorer`` alerting on 1%). Each step of the loop is
wrapped in a timer: seconds and calls per end-to-end run (``poll_batch`` includes the group join, which falls outside
the measured window). Settings may be overridden as ``section.key=value``. From the repository root:

    python3 docs/results/stream-gc/loop_phases.py
    python3 docs/results/stream-gc/loop_phases.py kafka.commit_interval_ms=1000
"""
import sys
import time
from collections import Counter

from backlog import EVENTS, backlog, settings, start_broker  # this folder's shared setup

from streamer.dev.bench_fixtures import consume_only
from streamer.dev.bench_stream import _end_to_end
from streamer.pipeline import app as app_module
from streamer.pipeline import checkpoint as checkpoint_module
from streamer.pipeline.scorer import ConstantScorer

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
    s = settings()
    for override in sys.argv[1:]:  # section.key=value
        try:
            dotted, value = override.split("=", 1)
            section, key = dotted.split(".")
            setattr(getattr(s, section), key, type(getattr(getattr(s, section), key))(value))
        except (ValueError, AttributeError) as e:
            raise SystemExit(f"loop_phases.py: bad override {override!r} (expected section.key=value): {e}") from None
    broker = start_broker(s)
    timed(app_module, "poll_batch", "poll_batch (group join included)")
    timed(app_module.StreamApp, "_prepare", "prepare (decode, hand-off)")
    timed(app_module.StreamApp, "_publish_pending", "publish")
    timed(app_module, "build_alerts", "  of which build_alerts")
    timed(checkpoint_module.Checkpointer, "retire", "retire")
    timed(checkpoint_module.Checkpointer, "_commit", "commit (in retire or settle)")
    timed(app_module.StreamApp, "_backpressure", "backpressure")
    timed(app_module.StreamApp, "_after_commit", "sinks")
    try:
        model, topic = backlog(s, "ph")
        app_module.settle_heap()
        print("overrides:", " ".join(sys.argv[1:]) or "none")
        for r in range(3):
            c = consume_only(s.kafka, topic, EVENTS, s.stream.max_batch)
            SECONDS.clear()
            CALLS.clear()
            e, app = _end_to_end(s, model, topic, f"ph-e2e-{r}-{time.time_ns()}", EVENTS, ConstantScorer(0.01, 5))
            print(f"round {r + 1}: consume-only {c:,.0f} msg/s, end to end {e:,.0f} events/s, ratio {e / c:.2f}; "
                  f"{app.counts['batches']} batches")
            for label, sec in SECONDS.most_common():
                print(f"   {label:34s} {sec * 1000:8.1f} ms  {CALLS[label]:4d} calls")
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
