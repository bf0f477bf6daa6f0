"""Two streamers in one consumer group split the partitions; every event is scored, duplicates only around rebalances."""

from __future__ import annotations

from collections import Counter

import pytest
from conftest import make_blobs
from stream_support import (
    Collect,
    StreamerThread,
    create_topics,
    event,
    make_settings,
    produce,
    wait_for,
)

from offline_train.detector import KDSM

pytestmark = pytest.mark.integration


def test_two_streamers_share_the_partitions(kafka_bootstrap, redis_url, unique, tiny_model_dir):
    model = KDSM.load(tiny_model_dir, device="cpu")
    s = make_settings(kafka_bootstrap, redis_url, unique, model=str(tiny_model_dir), max_batch=100)
    create_topics(s, partitions=4)
    X = make_blobs(n=2200, seed=0)[0][1200:]
    names = model.feature_names_
    first, second = Collect(), Collect()
    a = StreamerThread(s, sinks=[first]).start()
    try:
        produce(s, [event(f"a{i}", x, names) for i, x in enumerate(X[:500])])
        b = StreamerThread(s, sinks=[second]).start(wait_assigned=30)  # joining triggers a rebalance
        try:
            assert wait_for(lambda: len(a.app.consumer.assignment()) + len(b.app.consumer.assignment()) == 4
                            and a.app.consumer.assignment() and b.app.consumer.assignment(), timeout=20)
            produce(s, [event(f"b{i}", x, names) for i, x in enumerate(X[500:])])
            want = {f"a{i}" for i in range(500)} | {f"b{i}" for i in range(len(X) - 500)}
            assert wait_for(lambda: set(first.ids()) | set(second.ids()) >= want, timeout=30)
        finally:
            b.stop()
    finally:
        a.stop()
    counts = Counter(first.ids() + second.ids())
    assert set(counts) == want
    # After the rebalance both members scored part of the second wave, and none of it twice.
    second_wave_a = {i for i in first.ids() if i.startswith("b")}
    second_wave_b = {i for i in second.ids() if i.startswith("b")}
    assert second_wave_a and second_wave_b and not (second_wave_a & second_wave_b)
    dups = sum(c - 1 for c in counts.values())
    assert dups <= 2 * s.stream.max_in_flight * s.stream.max_batch
