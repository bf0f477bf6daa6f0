"""Online subcommands of ``kdsm``: stream, replay, thresholds, demo. Registered by ``streamer.ops.cli``."""

from __future__ import annotations

import argparse
import json
import sys

from offline_train.argtypes import (
    folder,
    non_negative_float,
    port_or_free,
    positive_float,
    positive_int,
)
from offline_train.config import load_settings


def register(sub: argparse._SubParsersAction, settings_cls) -> None:
    p = sub.add_parser("stream", help="score Kafka events with a model artifact; publish alerts and dead letters",
                       description="Consumer group on kafka.events_topic -> micro-batches -> K-DSM -> alerts / dead letters. "
                                   "Offsets are committed after the broker acknowledged every message (at least once).")
    p.add_argument("--config", help="YAML config file (env KDSM_<SECTION>__<KEY> overrides it)")
    p.add_argument("--model", help="model artifact directory (default: stream.model from the config)")
    p.add_argument("--max-events", type=positive_int, help="stop after this many events (default: run until SIGTERM/SIGINT)")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], type=str.upper,
                   help="JSON log lines on stderr from this level up")
    p.set_defaults(func=lambda a: _stream(a, settings_cls))

    p = sub.add_parser("replay", help="produce the rows of a Parquet file as JSON events (demos, benchmarks)",
                       description="One JSON object per row (all columns but the label), keyed by id, at --rate events/s.")
    p.add_argument("--data", required=True, help="Parquet file, directory or glob")
    p.add_argument("--topic", help="topic to produce to (default: kafka.events_topic)")
    p.add_argument("--rate", type=positive_float, help="events per second (default: as fast as possible)")
    p.add_argument("--limit", type=positive_int, help="send at most this many rows")
    p.add_argument("--repeat", type=positive_int, default=1, help="send the file this many times")
    p.add_argument("--config", help="YAML config file")
    p.set_defaults(func=lambda a: _replay(a, settings_cls))

    p = sub.add_parser("thresholds", help="show, set or reset the live alert thresholds in Redis",
                       description="Thresholds are per model version and severity; a change reaches running streamers within ~1 s "
                                   "and is recorded in an audit list (who/when/old/new).")
    tsub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, help_ in (("show", "thresholds in force, overrides, quantiles and the audit trail"),
                        ("set", "override one severity's threshold by --quantile or --score"),
                        ("reset", "drop overrides (one --severity or all), back to the artifact's thresholds")):
        q = tsub.add_parser(name, help=help_)
        q.add_argument("--model", help="model artifact directory (default: the registry's current version when "
                                       "registry.enabled, else stream.model)")
        q.add_argument("--config", help="YAML config file")
        if name == "set":
            q.add_argument("--severity", required=True, metavar="{warning,critical,...}",
                           help="one of the model's severities (calibration.severities; by default warning, critical)")
            g = q.add_mutually_exclusive_group(required=True)
            g.add_argument("--quantile", type=float, help="quantile of the artifact's calibration scores, e.g. 0.995")
            g.add_argument("--score", type=float, help="absolute anomaly score")
        if name == "reset":
            q.add_argument("--severity", help="only this severity (default: all)")
        if name in ("set", "reset"):
            q.add_argument("--by", help="who makes the change, for the audit record (default: user@host)")
        q.set_defaults(func=lambda a: _thresholds(a, settings_cls))
    q = tsub.add_parser("report", help="PNG of the recent score distribution with the thresholds and their alert rates",
                        description="Reads the archive (archive.dir), keeps the rows scored by the model's version "
                                    "(or --rescore), and shows what each threshold, and a few candidate quantiles, "
                                    "would alert on that window.")
    q.add_argument("--model", help="model artifact directory (default: the registry's current version when "
                                   "registry.enabled, else stream.model)")
    q.add_argument("--config", help="YAML config file")
    q.add_argument("--archive", help="archive directory (default: archive.dir from the config)")
    q.add_argument("--hours", type=non_negative_float, default=24.0, help="files closed within this many hours (0 = all)")
    q.add_argument("--max-rows", type=positive_int, default=200_000, help="newest rows used")
    q.add_argument("--rescore", action="store_true", help="score the window's features with the model")
    q.add_argument("--out", default="thresholds-report.png", help="PNG file to write (not a directory), or an object-store URI (s3://bucket/report.png)")
    q.add_argument("--json", action="store_true", help="print the report as JSON instead of a table")
    q.set_defaults(func=lambda a: _report(a, settings_cls))

    p = sub.add_parser("demo", help="the whole product on your machine: local broker + Redis, train, stream, alerts",
                       description="Starts a local Tansu broker and Redis, trains on the bundled cardio data, replays it as a "
                                   "live stream with anomalies, prints alerts as they arrive, then cleans up.")
    p.add_argument("--events", type=positive_int, default=3000, help="events to replay (the data set is cycled)")
    p.add_argument("--rate", type=positive_float, default=500.0, help="events per second")
    p.add_argument("--duration", type=positive_float, default=120.0, help="stop after this many seconds at the latest")
    p.add_argument("--steps", type=positive_int, default=400, help="training steps of the demo model")
    p.add_argument("--workdir", type=folder, help="where the model, report and logs go (default: a new temp directory)")
    p.add_argument("--metrics-port", type=port_or_free, default=0, help="metrics port (default 0: a free one)")
    p.add_argument("--mixed", action="store_true", help="mixed events: the bundled Solar Flare data (categorical fields, "
                                                        "a nested object) under its feature spec; alerts name categories")
    p.set_defaults(func=lambda a: _demo(a, settings_cls))


def _settings(a, settings_cls):
    return load_settings(settings_cls, getattr(a, "config", None))


def _model_path(a, s) -> str:
    """--model, else the model the fleet serves (the registry's current version, else stream.model)."""
    from streamer.lifecycle.registry import serving_model_dir

    return a.model or serving_model_dir(s)


def _stream(a, settings_cls) -> int:
    from streamer.pipeline.checkpoint import DeliveryError
    from streamer.pipeline.logs import setup_logging
    from streamer.service import configure_process, run_stream

    setup_logging(a.log_level)
    s = _settings(a, settings_cls)
    configure_process(s)
    from offline_train.model import resolve_device

    resolve_device(s.stream.device)  # `cuda` without CUDA: one line now, not an artifact error later
    # With registry.enabled the model may come from the registry alone (streamer.wiring checks).
    try:
        counts = run_stream(s, a.model or s.stream.model, max_events=a.max_events, signals=True)
    except DeliveryError as e:
        # The unacknowledged batch's offsets were not committed: a restart re-reads it (at least once).
        print(f"kdsm stream: stopped: {e}", file=sys.stderr)
        return 1
    print(json.dumps(counts))
    return 0


def _replay(a, settings_cls) -> int:
    from streamer.dev.replay import replay

    s = _settings(a, settings_cls)
    replay(s, a.data, a.topic or s.kafka.events_topic, rate=a.rate, limit=a.limit, repeat=a.repeat)
    return 0


def _thresholds(a, settings_cls) -> int:
    from streamer.lifecycle.control import redis_replies
    from streamer.lifecycle.thresholds import ArtifactCalibration, ThresholdOps
    from streamer.pipeline.logs import setup_logging

    setup_logging("WARNING")  # a record in Redis that is ignored is a JSON log line, as the streamer writes it
    s = _settings(a, settings_cls)
    with redis_replies(s.redis):  # an error reply (bad DB index, NOPERM on the prefix, MISCONF): one line, exit 2
        ops = ThresholdOps.from_settings(s, ArtifactCalibration.read(_model_path(a, s)))
        if a.action == "show":
            out = ops.show()
        elif a.action == "set":
            out = ops.set(a.severity, quantile=a.quantile, score=a.score, by=a.by)
        else:
            out = ops.reset(a.severity, by=a.by)
    json.dump(out, sys.stdout, indent=2)
    print()
    return 0


def _report(a, settings_cls) -> int:
    from streamer.pipeline.logs import setup_logging

    from .threshold_report import run

    setup_logging("WARNING")  # a skipped archive file is a JSON log line, as the streamer writes them
    return run(a, settings_cls)


def _demo(a, settings_cls) -> int:
    from streamer.dev.demo import run_demo

    return run_demo(settings_cls, events=a.events, rate=a.rate, duration=a.duration, steps=a.steps,
                    workdir=a.workdir, metrics_port=a.metrics_port, mixed=a.mixed)
