"""Probe: how long confluent-kafka (librdkafka) takes to join a group on the local Tansu, by session timeout.

Not part of the product (`pip install confluent-kafka` first). Prints the time from subscribe to the first message
for librdkafka's defaults (session.timeout.ms 45000), the streamer's session timeout (10000) and shorter settings.

    python3 docs/results/confluent-probe/join.py
"""
import time
from pathlib import Path

from confluent_kafka import Consumer

from streamer.config import KafkaConfig
from streamer.dev import local_services
from streamer.dev.bench_fixtures import produce

SETTINGS = ({}, {"session.timeout.ms": 10000}, {"session.timeout.ms": 6000},
            {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}, {"partition.assignment.strategy": "range"})


def first_message_s(url: str, topic: str, extra: dict) -> float:
    c = Consumer({"bootstrap.servers": url, "group.id": f"join-{time.time_ns()}", "auto.offset.reset": "earliest",
                  **extra})
    c.subscribe([topic])
    t = time.perf_counter()
    while not c.consume(10, timeout=0.2) and time.perf_counter() - t < 60:
        pass
    elapsed = time.perf_counter() - t
    c.close()
    return elapsed


def main() -> None:
    state = Path("/tmp/kdsm-confluent-join")
    state.mkdir(exist_ok=True)
    broker = local_services.Service("kafka", local_services.free_port(), state).start()
    try:
        topic = f"join-{time.time_ns()}"
        produce(KafkaConfig(bootstrap=broker.url), topic, [b'{"id": 1}'] * 10)
        for extra in SETTINGS:
            print(f"{extra or 'librdkafka defaults'}: first message after {first_message_s(broker.url, topic, extra):.1f} s",
                  flush=True)
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
