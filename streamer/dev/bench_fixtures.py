"""What the stream benches share (``bench_stream``, ``bench_scale``): a briefly trained model, JSON events,
a fast producer and the consume-only reference loop."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import numpy as np

from offline_train import storage
from offline_train.detector import KDSM


def bench_model(d: int, width: int, depth: int, device: str, seed: int = 0) -> KDSM:
    from offline_train.config import ModelConfig, OptimConfig

    X = np.random.default_rng(seed).normal(size=(4000, d))
    # Throughput does not depend on how well the net is trained: a few steps give real weights and thresholds.
    return KDSM(model=ModelConfig(width=width, depth=depth), train=OptimConfig(steps=20, device=device, seed=seed)).fit(X)


def events_json(X: np.ndarray, names: list[str]) -> list[bytes]:
    return [json.dumps({"id": i, **dict(zip(names, row, strict=True))}, separators=(",", ":")).encode() for i, row in enumerate(X.tolist())]


def produce(k, topic: str, values: list[bytes]) -> float:
    from streamer.pipeline.kafka_clients import make_producer

    p = make_producer(k, linger_ms=20)
    t = time.perf_counter()
    for v in values:
        p.send(topic, value=v)
    p.flush()
    rate = len(values) / (time.perf_counter() - t)
    p.close()
    return rate


def consume_only(k, topic: str, n: int, max_batch: int) -> float:
    from streamer.pipeline.kafka_clients import make_consumer

    c = make_consumer(k, group_id=f"bench-consume-{os.getpid()}-{time.time_ns()}")
    c.subscribe([topic])
    got, first, t0, deadline = 0, 0, None, time.monotonic() + 120
    try:
        while got < n and time.monotonic() < deadline:
            recs = c.poll(timeout_ms=200, max_records=max_batch)
            m = sum(len(v) for v in recs.values())
            if m and t0 is None:
                t0, first = time.perf_counter(), m  # the clock starts at the first records (group join excluded)
            got += m
        return (got - first) / (time.perf_counter() - t0) if t0 and got > first else 0.0
    finally:
        c.close(autocommit=False)


def write_result(out: str | None, result: dict, log=print) -> None:
    """Write a bench's result JSON to ``out`` (when given: a local file or an object-store URI, uploaded as one
    object; ``Path`` would fold ``s3://b/x`` into a local folder ``s3:``) and say so."""
    if out:
        storage.write_bytes(out, json.dumps(result, indent=2).encode())  # StorageError: one line
        log(f"wrote {out}")


def stop_on_sigterm() -> None:
    """A SIGTERM (``timeout``, a pod's stop) ends a bench as Ctrl-C does, through its ``finally`` blocks: the broker
    it started (in its own session, out of ``timeout``'s reach) is stopped and its temp folder handled."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def remove_scratch(tmp: Path) -> None:
    """For a bench's ``finally``: its temp folder (broker state, models, child logs) goes after a run that ended
    well; after a failure it stays, named on stderr, for its logs (unless it holds nothing: an external broker's run
    that failed before writing anything)."""
    if sys.exc_info()[0] is None or not any(tmp.iterdir()):
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print(f"kdsm bench: kept {tmp} (the failed run's broker state and logs)", file=sys.stderr)
