"""``kdsm demo``: the whole product on one machine, in about a minute, cleaning up after itself.

1. starts a local Tansu broker and a Redis server on free loopback ports;
2. trains K-DSM (with the EMA teacher: the data is contaminated) on the
   bundled ADBench cardio data (1831 rows, 21 features, 9.6 % anomalies;
   ``offline_train/bundled/cardio.parquet``), writing the artifact and its report;
3. runs the streamer and replays the same rows, shuffled, as a live stream
   (labels are never sent; the demo keeps them to say which alerts were real
   anomalies); halfway through it lowers the warning threshold in Redis to the
   calibration q0.90, as ``kdsm thresholds set`` would, and the alert rate
   follows live;
4. prints each alert on one line as it arrives, then a summary with where the
   report, the metrics and the logs are;
5. stops everything it started, also on Ctrl-C.

``kdsm demo --mixed`` does the same with mixed events: the bundled Solar
Flare data (``offline_train.evaluation.solar_flare``: three categorical
fields, integer codes, a nested object; 3.6 % labelled anomalies) under its
feature spec (the one configs/demo-mixed.yaml holds), so alerts read in the
user's terms, e.g. ``spot_size = "K" (expected "S")``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq

from offline_train.data import BUNDLED_CARDIO, BUNDLED_SOLAR_FLARE

DATA = BUNDLED_CARDIO


def _feature_text(t: dict) -> str:
    if "text" in t:  # a feature-spec model explains in the user's terms
        return f"{t['text']} ({t['contribution']:.0%})"
    return f"{t['name']} {t['value']:.3g}->{t['expected']:.3g} ({t['contribution']:.0%})"


def _alert_line(a: dict, label: int | None) -> str:
    top = ", ".join(_feature_text(t) for t in a["top_features"][:3])
    truth = {1: "labelled anomaly", 0: "labelled normal"}.get(label, "")
    parts = a.get("score_parts")  # the blended score's parts; the top features explain the network's
    names = {"network": "network", "isolation": "forest", "knn": "k-NN"}
    why = ""
    if parts:
        shown = ", ".join(f"{names[key]} {value:.2f}" for key, value in parts.items())
        why = f" ({shown}; led by {names[a['leading_part']]})"
    return (f"ALERT {a['severity']:<8} event {a['event_id']:>6}  score {a['score']:7.2f} >= {a['threshold']:.2f}{why}  "
            f"p={a['p_value']:.4f}  top: {top}  [{truth}]")


@contextlib.contextmanager
def _sigint_held():
    """Within: a Ctrl-C is only noted, and raised as ``KeyboardInterrupt`` on the way out. For the clean-up, so a
    second Ctrl-C (an impatient user, or ``timeout -s INT`` signalling the whole group) cannot cut it short and leave
    the broker and Redis running: they run in their own sessions, nothing else stops them."""
    noted = []
    try:
        previous = signal.signal(signal.SIGINT, lambda signum, frame: noted.append(signum))
        held = True
    except ValueError:  # not the main thread: no Ctrl-C lands here
        held = False
    try:
        yield
    finally:
        if held:  # a handler set outside Python reads as None: Python's default then, not Ctrl-C ignored for good
            signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)
    if noted:
        raise KeyboardInterrupt


def run_demo(settings_cls, events: int = 3000, rate: float = 500.0, duration: float = 120.0, steps: int = 400,
             workdir: str | None = None, metrics_port: int = 0, out=print, mixed: bool = False) -> int:
    from kafka import KafkaConsumer, TopicPartition

    from offline_train.job import train_job
    from streamer.lifecycle.thresholds import ThresholdOps
    from streamer.pipeline.kafka_clients import ensure_topics, make_producer
    from streamer.pipeline.logs import setup_logging
    from streamer.service import build_app

    from . import local_services
    from .replay import events_from_table

    work = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="kdsm-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    log_path = work / "streamer.log"
    setup_logging("INFO", stream=open(log_path, "a"))  # JSON logs to a file; the terminal shows alerts
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    services = [local_services.Service("kafka", local_services.free_port(), work / "services"),
                local_services.Service("redis", local_services.free_port(), work / "services")]
    app = server = stream_thread = None
    stop = threading.Event()  # tells the replay thread to end
    replay = replay_thread = reader = None
    try:
        for svc in services:
            svc.start()
            out(f"started {svc.name} at {svc.url}")
        s = settings_cls()
        s.kafka.bootstrap, s.redis.url = services[0].url, services[1].url
        s.kafka.session_timeout_ms, s.kafka.heartbeat_interval_ms = 6000, 1000
        s.metrics.port = metrics_port
        s.stream.max_wait_ms = 50
        s.model.width, s.model.depth = 128, 3  # small enough to train in seconds on a laptop CPU
        s.train.steps = steps
        data = DATA
        if mixed:
            from offline_train.evaluation.solar_flare import SPEC

            data, s.features = BUNDLED_SOLAR_FLARE, SPEC
        out(f"training K-DSM-EMA on {data.name} ({steps} steps) ...")
        summary = train_job(s, data, work / "model", progress=False, log=lambda m: out("  " + m),
                            force=True)  # the demo owns its workdir: a re-run replaces its model
        table = pq.read_table(data)
        labels = table.column("label").to_pylist()
        ensure_topics(s.kafka, [s.kafka.events_topic, s.kafka.alerts_topic, s.kafka.deadletter_topic])

        app, server = build_app(s, work / "model")
        stream_thread = threading.Thread(target=app.run, name="kdsm-stream", daemon=True)
        stream_thread.start()
        if server:
            out(f"metrics: {server.url}/metrics   health: {server.url}/healthz")
        if not app.ready.wait(30):
            raise RuntimeError(f"the streamer did not join its consumer group; see {log_path}")

        base = events_from_table(table, label_column="label")
        n = len(base)
        replayed = {"events": 0, "anomalies": 0}

        replay = make_producer(s.kafka)  # closed by the clean-up below, however the demo ends

        def produce():  # shuffled rows, cycled, ids kept unique per cycle, at `rate` events/s
            order = list(range(n))
            sent, t0, cycle = 0, time.monotonic(), 0
            while sent < events and not stop.is_set():
                random.Random(cycle).shuffle(order)
                for i in order:
                    if sent >= events or stop.is_set():
                        break
                    rec = json.loads(base[i][1])
                    rec["id"] = cycle * n + i
                    rec["ts"] = round(time.time(), 3)
                    try:
                        replay.send(s.kafka.events_topic, key=str(rec["id"]).encode(), value=json.dumps(rec).encode())
                    except Exception:
                        if stop.is_set():  # the demo is ending (Ctrl-C) and closed the producer meanwhile
                            return
                        raise
                    sent += 1
                    replayed["events"] += 1
                    replayed["anomalies"] += labels[i]
                    ahead = sent / rate - (time.monotonic() - t0)
                    if ahead > 0:
                        time.sleep(ahead)
                cycle += 1
            if not stop.is_set():
                replay.flush()

        replay_thread = threading.Thread(target=produce, name="kdsm-demo-replay", daemon=True)
        replay_thread.start()
        out(f"replaying {events} events at {rate:.0f}/s; alerts as they arrive:")
        reader = KafkaConsumer(bootstrap_servers=s.kafka.bootstrap, group_id=None, enable_auto_commit=False)
        reader.assign([TopicPartition(s.kafka.alerts_topic, 0)])
        reader.seek_to_beginning()
        seen, true_alerts = 0, 0

        def show_alerts() -> None:
            nonlocal seen, true_alerts
            for recs in reader.poll(timeout_ms=200).values():
                for r in recs:
                    a = json.loads(r.value)
                    label = labels[int(a["event_id"]) % n]
                    seen += 1
                    true_alerts += label == 1
                    out(_alert_line(a, label))

        switched = False
        deadline = time.monotonic() + duration
        while time.monotonic() < deadline:
            if not switched and replayed["events"] >= events // 2:
                # Live ops, as `kdsm thresholds set --severity warning --quantile 0.9` would do: the data is
                # ~10 % anomalies, so the artifact's q0.99 warning threshold alerts on few of them.
                switched = True
                change = ThresholdOps.from_settings(s, app.provider.current()).set("warning", quantile=0.9, by="kdsm demo")
                out(f"-- ops: warning threshold {change['old']:.2f} -> {change['new']:.2f} (calibration q0.90) in Redis; "
                    f"the streamer picks it up within a second --")
            show_alerts()
            if not replay_thread.is_alive() and app.counts["events"] >= events and not app.checkpoint.in_flight:
                break
        # The last batch's alerts may still be on their way to the reader: print every alert the streamer published.
        drain_until = time.monotonic() + 10
        while seen < app.counts["alerts"] and time.monotonic() < drain_until:
            show_alerts()
        stop.set()
        reader.close()
        reader = None
        scored = app.counts["events"]
        out("")
        out(f"done: {scored} events scored, {seen} alerts ({true_alerts} on labelled anomalies), "
            f"{app.counts['dead_letters']} dead letters; the replay held {replayed['anomalies']} labelled anomalies "
            f"in {replayed['events']} events")
        labels_info = summary.get("labels") or {}
        if labels_info:
            out(f"model quality on the training file (labels used only for this report): "
                f"AUC-PR {labels_info['auc_pr']:.3f}, AUC-ROC {labels_info['auc_roc']:.3f}")
        (work / "metrics.txt").write_bytes(app.metrics.render())
        out(f"report:  {work / 'model' / 'report'}")
        out(f"model:   {work / 'model'}")
        out(f"metrics: {work / 'metrics.txt'} (snapshot; served at /metrics while the demo ran)")
        out(f"logs:    {log_path}")
        return 0
    finally:
        # On Ctrl-C too: first the replay (its producer would otherwise outlive the broker and fail at exit), then the
        # streamer, then the services, with Ctrl-C held so a second one cannot leave the broker or Redis running.
        with _sigint_held():
            try:
                _stop_replay(stop, replay_thread, replay, reader)
                if app is not None:
                    app.stop()
                    if stream_thread is not None:
                        stream_thread.join(30)
                    if app.thresholds is not None:
                        app.thresholds.stop()
                if server is not None:
                    server.stop()
            finally:
                for svc in reversed(services):
                    svc.stop()
                if workdir is None:
                    shutil.rmtree(work / "services", ignore_errors=True)
                out("stopped the broker, Redis and the streamer")


def _stop_replay(stop: threading.Event, thread: threading.Thread | None, producer, reader) -> None:
    """End the replay thread and close its producer and the alert reader, each within a few seconds."""
    stop.set()
    if thread is not None:
        thread.join(10)
    for client, close in ((producer, lambda c: c.close(timeout=5)), (reader, lambda c: c.close())):
        if client is not None:
            try:
                close(client)
            except Exception as e:  # a record the broker did not take in time: the demo is ending anyway
                logging.getLogger(__name__).warning({"event": "demo_close_failed", "error": repr(e)})
