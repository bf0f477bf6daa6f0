"""``kdsm bench lifecycle``: what the archive and drift sinks cost per event on the scoring thread.

For each drift detector (ADWIN, KSWIN, PageHinkley) and for the archive
sink (fsync on and off), feeds committed batches of ``--batch`` rows with
``--features`` features and reports microseconds per event (median of
``--rounds``). Prints a table and writes JSON to ``--out``.
"""

from __future__ import annotations

import json
import platform
import tempfile
import time

import numpy as np

from offline_train import storage
from offline_train.argtypes import positive_int
from offline_train.config import check_remote_out
from streamer.lifecycle.archive import ArchiveSink, example_batch
from streamer.lifecycle.config import ArchiveConfig, DriftConfig
from streamer.lifecycle.drift import DriftSink


def _batches(n_events: int, batch: int, d: int) -> list:
    out = []
    for i in range(0, n_events, batch):
        b = example_batch(batch, features=[f"f{j}" for j in range(d)], offset0=i, seed=i)
        b.thresholds = {"warning": 6.0}
        out.append(b)
    return out


def _time(sink, batches) -> float:
    t = time.perf_counter()
    for b in batches:
        sink.on_committed(b)
    return (time.perf_counter() - t) / sum(len(b.scores) for b in batches) * 1e6


def run(events: int = 20000, batch: int = 500, features: int = 21, rounds: int = 3, out: str = "runs/bench-lifecycle.json") -> dict:
    batches = _batches(events, batch, features)
    results: dict[str, float] = {}
    for det in ("adwin", "kswin", "page_hinkley"):
        results[f"drift/{det}"] = float(np.median([_time(DriftSink(DriftConfig(detector=det, calibrated_alert_rate=0.01)), batches)
                                                   for _ in range(rounds)]))
    for fsync in (False, True):
        times = []
        for _ in range(rounds):
            with tempfile.TemporaryDirectory() as d:
                sink = ArchiveSink(ArchiveConfig(dir=d, fsync=fsync))
                times.append(_time(sink, batches))
                sink.close()
        results[f"archive/fsync={'on' if fsync else 'off'}"] = float(np.median(times))
    report = {"events": events, "batch": batch, "features": features, "rounds": rounds,
              "machine": platform.processor() or platform.machine(), "us_per_event": results}
    print(f"{'sink':<24} {'us/event':>10}   ({events} events, batches of {batch}, {features} features, median of {rounds})")
    for k, v in results.items():
        print(f"{k:<24} {v:>10.2f}")
    storage.write_bytes(out, json.dumps(report, indent=2).encode())  # a local file or an object-store URI
    print(f"written to {out}")
    return report


def register_bench(sub, settings_cls) -> None:
    p = sub.add_parser("lifecycle", help="per-event cost of the drift detectors and the archive sink")
    p.add_argument("--events", type=positive_int, default=20000, help="events fed to each detector and to the archive")
    p.add_argument("--batch", type=positive_int, default=500, help="events per batch, as the stream hands them on")
    p.add_argument("--features", type=positive_int, default=21, help="features per archived event")
    p.add_argument("--rounds", type=positive_int, default=3, help="repetitions; the median is reported")
    p.add_argument("--out", default="runs/bench-lifecycle.json", help="JSON file the figures are written to, or an "
                   "object-store URI (s3://bucket/x.json; storage settings from KDSM_STORAGE__*)")
    p.set_defaults(func=lambda a: _main(a, settings_cls))


def _main(a, settings_cls) -> int:
    storage.check_output_file(a.out, "JSON", "bench-lifecycle.json")  # before the benchmark, not after it
    check_remote_out(a.out, settings_cls)
    run(a.events, a.batch, a.features, a.rounds, a.out)
    return 0
