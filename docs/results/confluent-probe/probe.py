"""Probe (issue 12, target 2): kafka-python vs a librdkafka client (confluent-kafka) on the local Tansu broker.

Not part of the product: confluent-kafka is not a dependency (`pip install confluent-kafka` first).

``probe.py [N=200000]`` produces N 6-feature JSON events to a fresh topic, then twice in alternation: the bench's
kafka-python consume-only loop (`streamer.dev.bench_fixtures.consume_only`), confluent-kafka consume-only (the values
pulled into a list) and confluent-kafka consume + the streamer's own decoder (`Decoder.decode`, the orjson path) on
each batch of 2000. Each rate counts from the first message to the last (the group join excluded). Per confluent pass
it also prints the join time, the decode time and (batch, rows, seconds since the first message) marks.

``probe.py join`` prints how long librdkafka takes to join a group (subscribe to first message) at its defaults
(session.timeout.ms 45000), the streamer's session timeout (10000) and shorter settings.

    python3 docs/results/confluent-probe/probe.py 200000     # output.txt
    python3 docs/results/confluent-probe/probe.py join       # join-output.txt
"""
import sys
import time
from pathlib import Path

import numpy as np
from confluent_kafka import Consumer

from streamer.config import KafkaConfig
from streamer.dev import local_services
from streamer.dev.bench_fixtures import consume_only, events_json, produce
from streamer.pipeline.decode import Decoder

MARKS = (1, 2, 5, 10, 25, 50, 75, 100)
# librdkafka's defaults stall ~1 s on this broker: it postpones the next fetch by fetch.queue.backoff.ms (1000)
# once 100k messages are queued, and waits fetch.wait.max.ms (500).
FAST_FETCH = {"fetch.max.bytes": 52428800, "fetch.wait.max.ms": 10, "fetch.queue.backoff.ms": 10}
JOIN_SETTINGS = ({}, {"session.timeout.ms": 10000}, {"session.timeout.ms": 6000},
                 {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}, {"partition.assignment.strategy": "range"})


def consumer(url: str, topic: str, **extra) -> Consumer:
    c = Consumer({"bootstrap.servers": url, "group.id": f"probe-{time.time_ns()}", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, **extra})
    c.subscribe([topic])
    return c


def confluent_rate(url: str, topic: str, n: int, decoder: Decoder | None, batch: int = 2000) -> float:
    c = consumer(url, topic, **FAST_FETCH)
    got, first, t0, t_sub, t_dec, n_batches, marks = 0, 0, None, time.perf_counter(), 0.0, 0, []
    deadline = time.monotonic() + 120
    while got < n and time.monotonic() < deadline:
        msgs = c.consume(batch, timeout=0.2)
        if not msgs:
            continue
        if t0 is None:
            t0, first = time.perf_counter(), len(msgs)
        values = [m.value() for m in msgs]
        if decoder is not None:
            a = time.perf_counter()
            decoder.decode(values)
            t_dec += time.perf_counter() - a
        got += len(msgs)
        n_batches += 1
        if n_batches in MARKS:
            marks.append((n_batches, got, round(time.perf_counter() - t0, 3)))
    end = time.perf_counter()
    c.close()
    print(f"   {got} messages in {n_batches} batches; join {t0 - t_sub:.1f} s, first to last {end - t0:.2f} s, "
          f"decode {t_dec:.2f} s; marks {marks}", flush=True)
    return (got - first) / (end - t0)


def first_message_s(url: str, topic: str, extra: dict) -> float:
    c = consumer(url, topic, **extra)
    t = time.perf_counter()
    while not c.consume(10, timeout=0.2) and time.perf_counter() - t < 60:
        pass
    elapsed = time.perf_counter() - t
    c.close()
    return elapsed


def rates(url: str, topic: str, n: int) -> None:
    names = [f"f{i}" for i in range(6)]
    k = KafkaConfig(bootstrap=url)
    print(f"produce {produce(k, topic, events_json(np.random.default_rng(0).normal(size=(n, 6)), names)):,.0f} msg/s",
          flush=True)
    decoder = Decoder(names)
    for _ in range(2):
        print(f"kafka-python consume-only {consume_only(k, topic, n, 2000):,.0f} msg/s", flush=True)
        print(f"confluent-kafka consume-only {confluent_rate(url, topic, n, None):,.0f} msg/s", flush=True)
        print(f"confluent-kafka consume + decode {confluent_rate(url, topic, n, decoder):,.0f} events/s", flush=True)


def joins(url: str, topic: str) -> None:
    produce(KafkaConfig(bootstrap=url), topic, [b'{"id": 1}'] * 10)
    for extra in JOIN_SETTINGS:
        print(f"{extra or 'librdkafka defaults'}: first message after {first_message_s(url, topic, extra):.1f} s",
              flush=True)


def main(arg: str) -> None:
    state = Path("/tmp/kdsm-confluent-probe")
    state.mkdir(exist_ok=True)
    broker = local_services.Service("kafka", local_services.free_port(), state).start()
    topic = f"probe-{time.time_ns()}"
    try:
        if arg == "join":
            joins(broker.url, topic)
        else:
            rates(broker.url, topic, int(arg))
    finally:
        broker.stop()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "200000")
